//! A unix-socket proxy in front of a dockerd, run by the test on threads of its own: a process
//! given `DOCKER_HOST=unix://<proxy socket>` talks to the daemon through it, every connection
//! copied both ways. The proxy notes each HTTP request line it forwards (with when), and it can
//! stall the event streams: on a connection that asked for `/events`, while the stall is on,
//! what the daemon sends is read and held back, neither forwarded nor dropped, and both sockets
//! stay open. Lifting the stall forwards what was held, in order.

use std::{
    io::{ErrorKind, Read, Write},
    net::Shutdown,
    os::unix::net::{UnixListener, UnixStream},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use super::names::next_id;

/// The proxy, stopped on drop: its sockets shut down, its threads joined, its socket file gone.
pub struct DockerProxy {
    socket: PathBuf,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    stall: AtomicBool,
    /// Every request line forwarded to the daemon, with when it was seen.
    requests: Mutex<Vec<(Instant, String)>>,
    /// Event stream bytes forwarded to the client.
    events_forwarded: AtomicU64,
    /// Every event stream byte that was held back (also once forwarded), for the assertions.
    held: Mutex<Vec<u8>>,
    /// Both sockets of every connection, to shut them down on drop.
    sockets: Mutex<Vec<UnixStream>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl DockerProxy {
    /// Listens on a socket of its own in the temporary directory and forwards to the daemon at
    /// `docker_host` (`unix://PATH`).
    #[track_caller]
    pub fn start(docker_host: &str) -> Self {
        let upstream = PathBuf::from(
            docker_host
                .strip_prefix("unix://")
                .unwrap_or_else(|| panic!("{docker_host}: the proxy forwards to unix sockets")),
        );
        let socket = std::env::temp_dir().join(format!(
            "dxdp-proxy-{}-{}.sock",
            std::process::id(),
            next_id()
        ));
        let listener = UnixListener::bind(&socket)
            .unwrap_or_else(|e| panic!("cannot listen on {}: {e}", socket.display()));
        listener.set_nonblocking(true).expect("non-blocking accept");
        let shared = Arc::new(Shared::default());
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || accept_loop(&listener, &upstream, &shared))
        };
        Self {
            socket,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// `DOCKER_HOST` for a client of the proxy.
    pub fn docker_host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Holds back (on) or forwards again (off) what the daemon sends on event streams.
    pub fn stall_events(&self, on: bool) {
        self.shared.stall.store(on, Ordering::SeqCst);
    }

    /// When each request whose request line contains `needle` (e.g. `/_ping`) was forwarded.
    pub fn requests(&self, needle: &str) -> Vec<Instant> {
        lock(&self.shared.requests)
            .iter()
            .filter(|(_, line)| line.contains(needle))
            .map(|(at, _)| *at)
            .collect()
    }

    /// Every request line forwarded so far, with its time relative to `since` (for messages).
    pub fn request_log(&self, since: Instant) -> String {
        lock(&self.shared.requests)
            .iter()
            .map(|(at, line)| {
                let ms = at.saturating_duration_since(since).as_millis();
                format!("{ms:>7} ms  {line}\n")
            })
            .collect()
    }

    /// Event stream bytes forwarded to the client so far.
    pub fn events_forwarded(&self) -> u64 {
        self.shared.events_forwarded.load(Ordering::SeqCst)
    }

    /// Every event stream byte that was held back so far, as text.
    pub fn held_text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.shared.held)).into_owned()
    }
}

impl Drop for DockerProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for socket in lock(&self.shared.sockets).iter() {
            let _ = socket.shutdown(Shutdown::Both);
        }
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let workers: Vec<_> = lock(&self.shared.workers).drain(..).collect();
        for worker in workers {
            let _ = worker.join();
        }
        if let Err(e) = std::fs::remove_file(&self.socket) {
            eprintln!("cleanup: cannot remove {}: {e}", self.socket.display());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn accept_loop(listener: &UnixListener, upstream: &Path, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => {
                eprintln!("docker proxy: accept: {e}");
                thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        let daemon = match UnixStream::connect(upstream) {
            Ok(daemon) => daemon,
            Err(e) => {
                // The client sees its connection closed, as with a daemon that is down.
                eprintln!(
                    "docker proxy: cannot connect to {}: {e}",
                    upstream.display()
                );
                continue;
            }
        };
        let clones = (
            client.try_clone(),
            daemon.try_clone(),
            client.try_clone(),
            daemon.try_clone(),
        );
        let (Ok(client_in), Ok(daemon_out), Ok(client_keep), Ok(daemon_keep)) = clones else {
            eprintln!("docker proxy: cannot clone a socket");
            continue;
        };
        {
            let mut sockets = lock(&shared.sockets);
            sockets.push(client_keep);
            sockets.push(daemon_keep);
        }
        // Set before the request goes on, so the daemon's answer is already judged by it.
        let is_events = Arc::new(AtomicBool::new(false));
        let up = {
            let (shared, is_events) = (Arc::clone(shared), Arc::clone(&is_events));
            thread::spawn(move || upstream_copy(client_in, daemon, &shared, &is_events))
        };
        let down = {
            let shared = Arc::clone(shared);
            thread::spawn(move || downstream_copy(daemon_out, client, &shared, &is_events))
        };
        lock(&shared.workers).extend([up, down]);
    }
}

/// Client to daemon: forwards everything, noting request lines; a request for `/events` makes
/// the connection an event stream (it stays one: its answer never ends).
fn upstream_copy(
    mut client: UnixStream,
    mut daemon: UnixStream,
    shared: &Shared,
    is_events: &AtomicBool,
) {
    let mut buf = [0u8; 16 * 1024];
    let mut line = Vec::new();
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                if is_request_line(&text) {
                    if text.contains("/events") {
                        is_events.store(true, Ordering::SeqCst);
                    }
                    lock(&shared.requests).push((Instant::now(), text));
                }
                line.clear();
            } else if line.len() < 4096 {
                line.push(b);
            }
        }
        if daemon.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = daemon.shutdown(Shutdown::Write);
}

fn is_request_line(line: &str) -> bool {
    let mut words = line.split(' ');
    matches!(
        (words.next(), words.next(), words.next(), words.next()),
        (Some("GET" | "HEAD" | "POST" | "PUT" | "DELETE"), Some(_), Some(v), None)
            if v.starts_with("HTTP/1.")
    )
}

/// Daemon to client: forwards everything, except on an event stream while the stall is on:
/// then what the daemon sends is read (so the daemon never blocks on this subscriber) and held
/// until the stall is lifted.
fn downstream_copy(
    mut daemon: UnixStream,
    mut client: UnixStream,
    shared: &Shared,
    is_events: &AtomicBool,
) {
    // Wakes up to notice a lifted stall or the proxy stopping while the daemon is quiet.
    let _ = daemon.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = [0u8; 16 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut daemon_done = false;
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let events = is_events.load(Ordering::SeqCst);
        let stalled = events && shared.stall.load(Ordering::SeqCst);
        if !stalled && !pending.is_empty() {
            if client.write_all(&pending).is_err() {
                break;
            }
            shared
                .events_forwarded
                .fetch_add(pending.len() as u64, Ordering::SeqCst);
            pending.clear();
        }
        if daemon_done {
            if stalled {
                thread::sleep(Duration::from_millis(20));
                continue;
            }
            break;
        }
        let n = match daemon.read(&mut buf) {
            Ok(0) => {
                daemon_done = true;
                continue;
            }
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        if stalled {
            pending.extend_from_slice(&buf[..n]);
            lock(&shared.held).extend_from_slice(&buf[..n]);
            continue;
        }
        if client.write_all(&buf[..n]).is_err() {
            break;
        }
        if events {
            shared
                .events_forwarded
                .fetch_add(n as u64, Ordering::SeqCst);
        }
    }
    let _ = client.shutdown(Shutdown::Write);
}
