//! `dxdp watch` under a service manager: the sd_notify protocol against a real `NOTIFY_SOCKET`
//! (a datagram socket this test binds, with SO_PASSCRED, so that each message's sender pid is
//! checked as systemd's `NotifyAccess=main` does), a private dockerd and real containers.
//!
//! READY=1 comes after the first reconcile (the labeled pair is linked by then), WATCHDOG=1
//! comes at half of `$WATCHDOG_USEC`, a loop that is really stuck (dockerd frozen with SIGSTOP,
//! so the watch's resync waits on it) stops the pings while the process lives on, they resume
//! when dockerd does, and SIGTERM says STOPPING=1.

use std::{
    io::IoSliceMut,
    os::{fd::AsRawFd, unix::net::UnixDatagram},
    path::PathBuf,
    time::{Duration, Instant},
};

use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, UnixAddr, UnixCredentials, recvmsg, setsockopt,
    sockopt::PassCred,
};

use crate::support::{DXDP, World, require_docker, require_privileges};

/// A bound notify socket, removed on drop.
struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
}

/// One notification: when it arrived, the sender's pid, the text.
#[derive(Debug)]
struct Message {
    at: Instant,
    pid: i32,
    text: String,
}

impl Message {
    fn has(&self, line: &str) -> bool {
        self.text.lines().any(|l| l == line)
    }
}

impl NotifySocket {
    fn bind(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("{name}-notify.sock"));
        let _ = std::fs::remove_file(&path);
        let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
        setsockopt(&socket, PassCred, &true).expect("SO_PASSCRED");
        Self { socket, path }
    }

    /// The next message within `timeout`, if any.
    fn recv(&self, timeout: Duration) -> Option<Message> {
        self.socket
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .unwrap();
        let mut buf = [0u8; 4096];
        let mut cmsg = nix::cmsg_space!(UnixCredentials);
        let (n, pid) = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let msg = match recvmsg::<UnixAddr>(
                self.socket.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::empty(),
            ) {
                Ok(msg) => msg,
                Err(nix::errno::Errno::EAGAIN) => return None,
                Err(e) => panic!("recvmsg on the notify socket: {e}"),
            };
            let pid = msg
                .cmsgs()
                .expect("control messages")
                .find_map(|c| match c {
                    ControlMessageOwned::ScmCredentials(cred) => Some(cred.pid()),
                    _ => None,
                })
                .expect("SCM_CREDENTIALS with every message");
            (msg.bytes, pid)
        };
        Some(Message {
            at: Instant::now(),
            pid,
            text: String::from_utf8_lossy(&buf[..n]).into_owned(),
        })
    }

    /// Every message that arrives within `window`.
    fn collect(&self, window: Duration) -> Vec<Message> {
        let end = Instant::now() + window;
        let mut got = Vec::new();
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.recv(left) {
                Some(m) => got.push(m),
                None => break,
            }
        }
        got
    }
}

impl Drop for NotifySocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A process stopped with SIGSTOP, continued on drop (also when an assertion fails).
struct Frozen(libc::pid_t);

impl Frozen {
    fn stop(pid: u32) -> Self {
        // SAFETY: kill(2) of the test's own private dockerd.
        assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) }, 0);
        Self(pid as libc::pid_t)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

fn pings(messages: &[Message]) -> Vec<Instant> {
    messages
        .iter()
        .filter(|m| m.has("WATCHDOG=1"))
        .map(|m| m.at)
        .collect()
}

const WATCHDOG: Duration = Duration::from_secs(2);

#[test]
fn the_watch_is_ready_once_linked_pings_from_its_loop_and_says_stopping() {
    if !require_docker() {
        return;
    }
    let mut world = World::private();
    let net = world.network("net", &[]);
    let group = format!("dxdp.group={}-g", world.prefix);
    let labels = ["--network", &net, "-l", "dxdp.enable=true", "-l", &group];
    let a = world.run("a", &labels, &[]);
    let b = world.run("b", &labels, &[]);
    let notify = NotifySocket::bind(&world.prefix);
    let usec = WATCHDOG.as_micros().to_string();
    let mut watch = world.watch_with_env(
        &["--resync", "1"],
        &[
            ("NOTIFY_SOCKET", notify.path.to_str().unwrap()),
            ("WATCHDOG_USEC", &usec),
        ],
    );
    let pid = watch.pid() as i32;

    // READY=1, with the pair linked by then; before it, only watchdog pings.
    let mut before = Vec::new();
    let ready = loop {
        let m = notify.recv(Duration::from_secs(30)).unwrap_or_else(|| {
            panic!(
                "no READY=1 within 30 s; before: {before:?}\n--- watch log\n{}",
                watch.log_text()
            )
        });
        assert_eq!(m.pid, pid, "a message not from the watch's main pid: {m:?}");
        if m.has("READY=1") {
            break m;
        }
        assert!(m.has("WATCHDOG=1"), "before READY=1: {m:?}");
        before.push(m);
    };
    let status = world.dxdp.status();
    assert_eq!(
        status.links.len(),
        1,
        "READY=1 before the first reconcile linked {a} and {b}: {ready:?}\n{status:?}"
    );
    assert!(
        ready.text.contains("STATUS=1 link, 2 running containers"),
        "{ready:?}"
    );

    // Pings at half the interval, steadily, across resyncs (one a second).
    let window = Duration::from_secs(5);
    let messages = notify.collect(window);
    assert!(messages.iter().all(|m| m.pid == pid), "{messages:?}");
    let steady = pings(&messages);
    assert!(
        steady.len() >= 4,
        "{} WATCHDOG=1 in {window:?} with WATCHDOG_USEC={usec}: {messages:?}",
        steady.len()
    );
    let mut last = ready.at;
    for at in &steady {
        assert!(
            *at - last < WATCHDOG,
            "a gap of {:?} between pings would have the watch restarted: {messages:?}",
            *at - last
        );
        last = *at;
    }

    // Stuck for real: with dockerd frozen the next resync's ping to dockerd waits (bollard's
    // timeout is 120 s), the loop with it, and a separate timer would go on pinging. Within the
    // resync period plus one ping interval the pings stop, and stay stopped for more than
    // WATCHDOG_USEC (systemd would restart the watch), while the process runs.
    let frozen = Frozen::stop(world.daemon_pid().expect("private dockerd"));
    let stopped_at = Instant::now();
    let messages = notify.collect(Duration::from_secs(7));
    let during = pings(&messages);
    let settle = Duration::from_secs(1) + WATCHDOG / 2 + Duration::from_millis(500);
    let late: Vec<Duration> = during
        .iter()
        .map(|at| *at - stopped_at)
        .filter(|d| *d > settle)
        .collect();
    assert!(
        late.is_empty(),
        "pings went on while the loop waited on a frozen dockerd, at {late:?} after the freeze\n\
         --- watch log\n{}",
        watch.log_text()
    );
    let silent = Instant::now() - during.last().copied().unwrap_or(stopped_at);
    assert!(silent > 2 * WATCHDOG, "silent for only {silent:?}");
    assert!(watch.alive(), "the watch died:\n{}", watch.log_text());

    // dockerd is back: the loop goes on and so do the pings.
    drop(frozen);
    let resumed = loop {
        match notify.recv(Duration::from_secs(10)) {
            Some(m) if m.has("WATCHDOG=1") => break m,
            Some(_) => {}
            None => panic!(
                "no WATCHDOG=1 within 10 s of dockerd continuing\n--- watch log\n{}",
                watch.log_text()
            ),
        }
    };
    assert_eq!(resumed.pid, pid);
    watch.expect_links(1, Duration::from_secs(5));

    // SIGTERM: STOPPING=1, a clean exit, the link left in place.
    assert_eq!(watch.terminate(), Some(0), "{}", watch.log_text());
    let rest = notify.collect(Duration::from_millis(200));
    let stopping = rest
        .iter()
        .find(|m| m.has("STOPPING=1"))
        .unwrap_or_else(|| panic!("no STOPPING=1 after SIGTERM: {rest:?}"));
    assert_eq!(stopping.pid, pid);
    assert!(
        stopping
            .text
            .contains("STATUS=stopping; links stay in place"),
        "{stopping:?}"
    );
    assert_eq!(world.dxdp.status().links.len(), 1);
}

/// A watch that cannot use its pin directory exits at once with the reason and never says
/// READY=1: `systemctl start` then fails where the operator looks, instead of a service that is
/// "running" and links nothing. Two ways: a directory on a file system that is not bpffs, and
/// one in a bpffs mount that is read-only (what systemd's `ProtectKernelTunables=` made of
/// /sys/fs/bpf: issue 22).
#[test]
fn a_watch_that_cannot_use_its_pin_directory_fails_its_start_instead_of_saying_ready() {
    if !require_privileges() {
        return;
    }
    let name = format!("dxt-notify-{}", std::process::id());
    let not_bpffs = std::env::temp_dir().join(format!("{name}-pins"));
    refuses_to_start(&name, &not_bpffs, "bpffs");
    let read_only = ReadOnlyBpffs::mount(&std::env::temp_dir().join(format!("{name}-ro")));
    refuses_to_start(&name, &read_only.0.join("dxdp"), "cannot create it");
}

/// Runs `dxdp watch` with this pin directory under a notify socket: it must exit non-zero within
/// 20 s, say `needle` and the directory, send no READY=1, and leave no directory behind.
#[track_caller]
fn refuses_to_start(name: &str, pin_dir: &std::path::Path, needle: &str) {
    let notify = NotifySocket::bind(name);
    let mut child = std::process::Command::new(DXDP)
        .args(["--pin-dir", pin_dir.to_str().unwrap(), "watch"])
        .env("NOTIFY_SOCKET", &notify.path)
        .env("WATCHDOG_USEC", WATCHDOG.as_micros().to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start dxdp watch");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for dxdp watch") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("dxdp watch still runs after 20 s with pin directory {pin_dir:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "exited successfully: {stderr}");
    assert!(
        stderr.contains(pin_dir.to_str().unwrap()) && stderr.contains(needle),
        "the error names {pin_dir:?} and says {needle:?}: {stderr}"
    );
    let said = notify.collect(Duration::from_millis(200));
    assert!(
        !said.iter().any(|m| m.has("READY=1")),
        "READY=1 from a watch that cannot pin anything: {said:?}"
    );
    assert!(!pin_dir.exists(), "left {} behind", pin_dir.display());
}

/// A bpffs instance mounted read-only at a directory of our own; unmounted and removed on drop.
struct ReadOnlyBpffs(PathBuf);

impl ReadOnlyBpffs {
    fn mount(at: &std::path::Path) -> Self {
        std::fs::create_dir_all(at).expect("mount point");
        let guard = Self(at.to_path_buf());
        let out = std::process::Command::new("mount")
            .args(["-t", "bpf", "-o", "ro", "bpf", at.to_str().unwrap()])
            .output()
            .expect("run mount");
        assert!(out.status.success(), "mount -t bpf -o ro: {out:?}");
        guard
    }
}

impl Drop for ReadOnlyBpffs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}
