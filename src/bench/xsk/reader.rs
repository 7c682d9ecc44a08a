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

use super::{
    socket::{Socket, SocketDrops},
    tally::{Expected, Tally},
};

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
