//! The application: a thread that reads the rx ring, counts the flow's frames and gives every
//! frame back on the fill ring.
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::{self, JoinHandle},
};

use anyhow::{Context, Result, anyhow};

use super::socket::{Socket, SocketDrops};

/// The frames the application counts as the measured flow's: this length, starting with these
/// bytes (the bench sends one frame over and over, so its headers are all alike).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    pub len: usize,
    pub start: Vec<u8>,
}

impl Expected {
    /// Frames like `frame`, compared on its first `header` bytes.
    pub fn like(frame: &[u8], header: usize) -> Self {
        Self {
            len: frame.len(),
            start: frame[..header.min(frame.len())].to_vec(),
        }
    }

    pub fn matches(&self, frame: &[u8]) -> bool {
        frame.len() == self.len && frame.starts_with(&self.start)
    }
}

/// What the application read: the flow's frames and bytes, and any other frame that reached
/// the socket (B's own traffic, say an ARP answer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub frames: u64,
    pub bytes: u64,
    pub other: u64,
}

impl Tally {
    pub(super) fn count(&mut self, expected: &Expected, frame: Option<&[u8]>) {
        match frame {
            Some(f) if expected.matches(f) => {
                self.frames += 1;
                self.bytes += f.len() as u64;
            }
            _ => self.other += 1,
        }
    }
}

/// The reader's tally, shared with the bench's thread.
#[derive(Debug, Default)]
struct Counts {
    frames: AtomicU64,
    bytes: AtomicU64,
    other: AtomicU64,
}

impl Counts {
    fn publish(&self, tally: &Tally) {
        self.frames.store(tally.frames, Ordering::Relaxed);
        self.bytes.store(tally.bytes, Ordering::Relaxed);
        self.other.store(tally.other, Ordering::Relaxed);
    }

    fn read(&self) -> Tally {
        Tally {
            frames: self.frames.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
        }
    }
}

/// What the application read in all, and what the kernel could not give it.
#[derive(Clone, Copy, Debug)]
pub struct Stopped {
    pub read: Tally,
    pub drops: SocketDrops,
}

/// The application: a thread reading a [`Socket`] until stopped.
pub struct Reader {
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Socket>>>,
}

impl Reader {
    /// Starts reading `socket` on a thread of its own (the socket works from any namespace),
    /// counting the frames like `expected` apart from the others.
    pub fn start(socket: Socket, expected: Expected) -> Result<Self> {
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = thread::Builder::new()
            .name("dxdp-xsk-reader".to_owned())
            .spawn({
                let (counts, stop) = (counts.clone(), stop.clone());
                move || {
                    let mut tally = Tally::default();
                    loop {
                        if socket.receive(&expected, &mut tally) > 0 {
                            counts.publish(&tally);
                        } else if stop.load(Ordering::Relaxed) {
                            return Ok(socket);
                        } else {
                            socket.wait()?;
                        }
                    }
                }
            })
            .context("cannot start the AF_XDP reader thread")?;
        Ok(Self {
            counts,
            stop,
            thread: Some(thread),
        })
    }

    /// What the application has read so far.
    pub fn read(&self) -> Tally {
        self.counts.read()
    }

    /// Stops the thread once the ring is empty, and closes the socket.
    pub fn stop(mut self) -> Result<Stopped> {
        let socket = self.join()?;
        Ok(Stopped {
            read: self.read(),
            drops: socket.drops()?,
        })
    }

    fn join(&mut self) -> Result<Socket> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self
            .thread
            .take()
            .ok_or_else(|| anyhow!("the AF_XDP reader was already stopped"))?;
        thread
            .join()
            .map_err(|_| anyhow!("the AF_XDP reader thread panicked"))?
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if self.thread.is_some()
            && let Err(err) = self.join()
        {
            eprintln!("dxdp: error: the bench's AF_XDP reader: {err:#}");
        }
    }
}
