//! Docker side of the harness: networks and containers of the test's own, removed on drop, and
//! a `dxdp watch` running in the background with its log kept for the failure message.
//!
//! Names are `dxt-<pid>-<n>…`, so tests never touch containers or networks they did not make.
//! Subnets are given explicitly (10.231.<n>.0/24) rather than left to Docker's pool, so that a
//! test only ever sends traffic to addresses of a network it created.
#![allow(dead_code)]

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::common::{DXDP, Dxdp, PinDir, Run, next_id, run_for, try_run, wait_until};

/// The 20.10 client that matches Debian's daemon; the newer CLI first on PATH is not.
pub const DOCKER: &str = "/usr/bin/docker";
/// Built by scripts/build-test-image.sh: sh, sleep, ip, ping, iperf3.
pub const IMAGE: &str = "dxdp-test:local";

/// Whether dockerd and the test image are there; like `require_privileges`, panics under
/// CI=true instead of skipping.
pub fn require_docker() -> bool {
    if !crate::common::require_privileges() {
        return false;
    }
    let mut missing = Vec::new();
    match try_run(
        &[DOCKER, "info", "--format", "{{.ServerVersion}}"],
        Duration::from_secs(20),
    ) {
        Ok(run) if run.success() => {}
        _ => missing.push("dockerd is not reachable (start it: scripts/setup.sh)".to_owned()),
    }
    match try_run(
        &[DOCKER, "image", "inspect", IMAGE],
        Duration::from_secs(20),
    ) {
        Ok(run) if run.success() => {}
        _ => missing.push(format!(
            "image {IMAGE} is missing (scripts/build-test-image.sh)"
        )),
    }
    if missing.is_empty() {
        return true;
    }
    let why = missing.join("; ");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true, and this Docker test cannot run here: {why}");
    }
    eprintln!("skipping: {why}");
    false
}

/// `docker ARGS…` within 60 s, whatever its exit code.
pub fn docker(args: &[&str]) -> Run {
    let mut argv = vec![DOCKER];
    argv.extend_from_slice(args);
    run_for(&argv, Duration::from_secs(60))
}

/// `docker ARGS…`, which must succeed; returns trimmed stdout.
#[track_caller]
pub fn docker_ok(args: &[&str]) -> String {
    let run = docker(args);
    run.assert_success();
    run.stdout.trim().to_owned()
}

fn quietly(args: &[&str]) {
    let mut argv = vec![DOCKER];
    argv.extend_from_slice(args);
    match try_run(&argv, Duration::from_secs(60)) {
        Ok(run) if run.success() => {}
        Ok(run) => eprintln!("cleanup: {run}"),
        Err(e) => eprintln!("cleanup: {e}"),
    }
}

/// A test's world: a prefix for names, its own pin directory, and guards for what it creates.
/// Dropped in this order: containers, networks, pin directory.
pub struct World {
    pub prefix: String,
    pub dxdp: Dxdp,
    n: u32,
    subnets: u32,
    containers: Vec<String>,
    networks: Vec<String>,
    _pin_dir: PinDir,
}

impl World {
    pub fn new() -> Self {
        let n = next_id();
        let pin_dir = PinDir::new(n);
        Self {
            prefix: format!("dxt-{}-{n}", std::process::id()),
            dxdp: Dxdp {
                pin_dir: pin_dir.path.clone(),
            },
            n,
            subnets: 0,
            containers: Vec::new(),
            networks: Vec::new(),
            _pin_dir: pin_dir,
        }
    }

    /// A bridge network `<prefix>-<name>` with a subnet of its own; `extra` go to
    /// `docker network create` (e.g. `-o com.docker.network.bridge.enable_icc=false`).
    #[track_caller]
    pub fn network(&mut self, name: &str, extra: &[&str]) -> String {
        let full = format!("{}-{name}", self.prefix);
        // 10.231.0.0/16 split by test process and network; pid keeps parallel runs apart.
        let third = (std::process::id() * 7 + self.n * 13 + self.subnets) % 250 + 1;
        self.subnets += 1;
        let subnet = format!("10.231.{third}.0/24");
        let mut args = vec!["network", "create", "--subnet", &subnet];
        args.extend_from_slice(extra);
        args.push(&full);
        docker_ok(&args);
        self.networks.push(full.clone());
        full
    }

    /// `docker run -d --name <prefix>-<name> ARGS… IMAGE [CMD…]`; returns the full name.
    #[track_caller]
    pub fn run(&mut self, name: &str, args: &[&str], cmd: &[&str]) -> String {
        self.start_container(name, args, cmd).assert_success();
        format!("{}-{name}", self.prefix)
    }

    /// Like [`World::run`] but returns the `docker run` outcome, for refusal tests.
    pub fn start_container(&mut self, name: &str, args: &[&str], cmd: &[&str]) -> Run {
        let full = format!("{}-{name}", self.prefix);
        let mut argv = vec!["run", "-d", "--name", &full];
        argv.extend_from_slice(args);
        argv.push(IMAGE);
        argv.extend_from_slice(cmd);
        self.containers.push(full.clone());
        docker(&argv)
    }

    /// The container's IPv4 address on a network.
    #[track_caller]
    pub fn ip(&self, container: &str, network: &str) -> String {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
        docker_ok(&["inspect", "-f", &format, container])
    }

    #[track_caller]
    pub fn pid(&self, container: &str) -> u32 {
        docker_ok(&["inspect", "-f", "{{.State.Pid}}", container])
            .parse()
            .expect("pid")
    }

    /// `dxdp watch` on this world's pin directory.
    pub fn watch(&self, extra: &[&str]) -> Watch {
        Watch::start(&self.dxdp, extra)
    }
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for c in self.containers.drain(..).rev() {
            quietly(&["rm", "-f", "-v", &c]);
        }
        for n in self.networks.drain(..).rev() {
            quietly(&["network", "rm", &n]);
        }
    }
}

/// A `dxdp watch` process, killed on drop; its log goes to a file read back for messages.
pub struct Watch {
    child: Option<Child>,
    pub log: PathBuf,
    dxdp: Dxdp,
    extra: Vec<String>,
}

impl Watch {
    pub fn start(dxdp: &Dxdp, extra: &[&str]) -> Self {
        let log = std::env::temp_dir().join(format!(
            "dxdp-watch-{}-{}.log",
            std::process::id(),
            next_id()
        ));
        let mut watch = Self {
            child: None,
            log,
            dxdp: dxdp.clone(),
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
        };
        watch.spawn();
        watch
    }

    fn spawn(&mut self) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("watch log");
        let child = Command::new(DXDP)
            .arg("--pin-dir")
            .arg(&self.dxdp.pin_dir)
            .arg("watch")
            .args(&self.extra)
            .env("DXDP_LOG", "info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup"))
            .stderr(file)
            .spawn()
            .expect("start dxdp watch");
        self.child = Some(child);
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let child = self.child.as_mut()?;
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return status.code();
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the watch again after [`Watch::kill9`] or [`Watch::terminate`].
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "watch still running");
        self.spawn();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `dxdp status` shows exactly `n` links; panics with the log if it does not.
    #[track_caller]
    pub fn expect_links(&self, n: usize, within: Duration) {
        let mut last = usize::MAX;
        let ok = wait_until(within, || {
            last = self.dxdp.status().links.len();
            last == n
        });
        assert!(
            ok,
            "expected {n} link(s) within {within:?}, have {last}\n--- watch log\n{}",
            self.log_text()
        );
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_file(&self.log);
    }
}
