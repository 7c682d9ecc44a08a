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

/// The Debian package's client (28.x; it negotiates down to a 20.10 daemon's API 1.41).
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

/// The compose command: `DXDP_COMPOSE` split on spaces (the legacy lane sets `docker-compose`,
/// Compose 1.29), else Compose v2's `docker compose`.
pub fn compose_command() -> Vec<String> {
    let configured = std::env::var("DXDP_COMPOSE").unwrap_or_default();
    let words: Vec<String> = configured.split_whitespace().map(str::to_owned).collect();
    if words.is_empty() {
        vec![DOCKER.to_owned(), "compose".to_owned()]
    } else {
        words
    }
}

/// `COMPOSE ARGS…` (see [`compose_command`]) within `timeout`, whatever its exit code.
pub fn compose(args: &[&str], timeout: Duration) -> Run {
    let mut argv = compose_command();
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    run_for(&argv, timeout)
}

/// Like [`compose`], but an error to start it is returned rather than a panic.
pub fn try_compose(args: &[&str], timeout: Duration) -> Result<Run, String> {
    let mut argv = compose_command();
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    try_run(&argv, timeout)
}

/// The name of a compose service's first container, looked up by compose's labels: Compose v2
/// names it `PROJECT-SERVICE-1`, Compose 1.x `PROJECT_SERVICE_1`.
#[track_caller]
pub fn compose_container(project: &str, service: &str) -> String {
    let project = format!("label=com.docker.compose.project={project}");
    let service = format!("label=com.docker.compose.service={service}");
    let names = docker_ok(&[
        "ps",
        "-a",
        "--filter",
        &project,
        "--filter",
        &service,
        "--filter",
        "label=com.docker.compose.container-number=1",
        "--format",
        "{{.Names}}",
    ]);
    let mut lines = names.lines();
    match (lines.next(), lines.next()) {
        (Some(one), None) => one.to_owned(),
        _ => panic!("{project} {service}: expected one container numbered 1, found {names:?}"),
    }
}

/// The daemon's major version (20 for Debian 12's 20.10, 28 for Engine 28.5).
#[track_caller]
pub fn engine_major() -> u32 {
    let version = docker_ok(&["version", "--format", "{{.Server.Version}}"]);
    version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("cannot parse the daemon's version {version:?}"))
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

    /// A bridge network `<prefix>-<name>` with IPv6 (a ULA /64 of its own) and, if `ipv4`, an
    /// IPv4 subnet as [`World::network`] gives; without it, `--ipv4=false` (Engine 28's IPv6-only
    /// networks). `extra` go to `docker network create`.
    #[track_caller]
    pub fn network_v6(&mut self, name: &str, ipv4: bool, extra: &[&str]) -> String {
        let full = format!("{}-{name}", self.prefix);
        let third = (std::process::id() * 7 + self.n * 13 + self.subnets) % 250 + 1;
        self.subnets += 1;
        let subnet4 = format!("10.231.{third}.0/24");
        let subnet6 = format!("fd00:231:{third:x}::/64");
        let mut args = vec!["network", "create", "--ipv6", "--subnet", &subnet6];
        if ipv4 {
            args.extend_from_slice(&["--subnet", &subnet4]);
        } else {
            args.push("--ipv4=false");
        }
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

    /// The container's global IPv6 address on a network.
    #[track_caller]
    pub fn ip6(&self, container: &str, network: &str) -> String {
        let format =
            format!("{{{{(index .NetworkSettings.Networks \"{network}\").GlobalIPv6Address}}}}");
        docker_ok(&["inspect", "-f", &format, container])
    }

    /// The container's MAC address on a network, as Docker reports it.
    #[track_caller]
    pub fn mac(&self, container: &str, network: &str) -> String {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").MacAddress}}}}");
        docker_ok(&["inspect", "-f", &format, container])
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
    /// Extra environment of the watch process (e.g. DOCKER_HOST of a private dockerd).
    env: Vec<(String, String)>,
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
            env: Vec::new(),
        };
        watch.spawn();
        watch
    }

    /// Like [`Watch::start`], with extra environment variables for the watch process.
    pub fn start_with_env(dxdp: &Dxdp, extra: &[&str], env: &[(&str, &str)]) -> Self {
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
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        watch.spawn();
        watch
    }

    /// Whether the watch process is still running (it has not exited or crashed).
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Resident memory of the watch process in KiB (VmRSS).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .unwrap_or_else(|e| panic!("watch pid {}: {e}", self.pid()));
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS in /proc/PID/status")
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
            .envs(self.env.iter().map(|(k, v)| (k, v)))
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

// ---------------------------------------------------------------------------------------------
// A private dockerd of the test's own

/// A dockerd of the test's own, with its containers, networks and a pin directory, all removed on
/// drop (containers, networks, the daemon, its bridges and firewall rules, its directories, then
/// the pin directory).
///
/// The host's dockerd is shared with whatever else runs on the machine: other labeled containers
/// would be linked by a watch of ours (and ours by theirs), and it must never be stopped by a
/// test. A private daemon sees only this test's containers, so the test can expect exact link
/// sets, and it can be stopped and started at will. It is started the way scripts/setup.sh starts
/// the host's (`setsid nohup dockerd`: a session of its own, output to a log) with its own socket,
/// data root and exec root, no default bridge and no iptables rules of its own: each network gets
/// a named bridge and a `FORWARD -i BR -o BR -j ACCEPT` rule in iptables and in ip6tables, so
/// bridged traffic flows under the host's DROP policies. Subnets are 10.232.<k>.0/24, apart from
/// the host daemon's test networks.
pub struct Fleet {
    pub prefix: String,
    pub dxdp: Dxdp,
    /// DOCKER_HOST of the private daemon.
    pub host: String,
    pub daemon_log: PathBuf,
    n: u32,
    subnets: u32,
    run_dir: PathBuf,
    data_root: PathBuf,
    daemon: Option<Child>,
    containers: Vec<String>,
    networks: Vec<String>,
    bases: std::collections::HashMap<String, String>,
    bridge_of: std::collections::HashMap<String, String>,
    bridges: Vec<String>,
    rules: Vec<crate::common::FirewallRule>,
    _pin_dir: PinDir,
}

/// `docker -H HOST ARGS…` within 60 s, whatever its exit code.
pub fn docker_at(host: &str, args: &[&str]) -> Run {
    let mut argv = vec![DOCKER, "-H", host];
    argv.extend_from_slice(args);
    run_for(&argv, Duration::from_secs(60))
}

impl Fleet {
    /// A private dockerd (without live-restore) that has the test image, and a pin directory.
    /// Panics, having removed what it made, if the daemon does not come up.
    pub fn new() -> Self {
        let n = next_id();
        let prefix = format!("dxt-{}-{n}", std::process::id());
        let pin_dir = PinDir::new(n);
        let run_dir = PathBuf::from(format!("/run/{prefix}"));
        let data_root = PathBuf::from(format!("/var/lib/{prefix}-docker"));
        let mut fleet = Self {
            host: format!("unix://{}/docker.sock", run_dir.display()),
            daemon_log: run_dir.join("dockerd.log"),
            prefix,
            dxdp: Dxdp {
                pin_dir: pin_dir.path.clone(),
            },
            n,
            subnets: 0,
            run_dir,
            data_root,
            daemon: None,
            containers: Vec::new(),
            networks: Vec::new(),
            bases: Default::default(),
            bridge_of: Default::default(),
            bridges: Vec::new(),
            rules: Vec::new(),
            _pin_dir: pin_dir,
        };
        std::fs::create_dir_all(&fleet.run_dir).expect("run dir of the private dockerd");
        std::fs::write(fleet.run_dir.join("daemon.json"), "{}\n").expect("daemon.json");
        fleet.start_daemon(false);
        let load = format!("{DOCKER} save {IMAGE} | {DOCKER} -H {} load -q", fleet.host);
        let run = run_for(&["sh", "-c", &load], Duration::from_secs(120));
        assert!(
            run.success(),
            "cannot load {IMAGE} into the private dockerd: {run}"
        );
        fleet
    }

    fn daemon_argv(&self, live_restore: bool) -> Vec<String> {
        let r = self.run_dir.display();
        let mut argv: Vec<String> = vec![
            "dockerd".into(),
            format!("--config-file={r}/daemon.json"),
            format!("--host={}", self.host),
            format!("--pidfile={r}/docker.pid"),
            format!("--data-root={}", self.data_root.display()),
            format!("--exec-root={r}/exec"),
            "--bridge=none".into(),
            "--iptables=false".into(),
            "--ip-forward=false".into(),
            "--ip-masq=false".into(),
        ];
        if live_restore {
            argv.push("--live-restore".into());
        }
        argv
    }

    /// Whether the daemon answers `docker info`.
    pub fn daemon_answers(&self) -> bool {
        matches!(
            try_run(
                &[DOCKER, "-H", &self.host, "info", "--format", "{{.ServerVersion}}"],
                Duration::from_secs(10),
            ),
            Ok(run) if run.success()
        )
    }

    /// Whether the daemon process is running.
    pub fn daemon_running(&mut self) -> bool {
        match self.daemon.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    fn try_start_daemon(&mut self, live_restore: bool) -> Result<Duration, String> {
        use std::os::unix::process::CommandExt;
        assert!(
            !self.daemon_running(),
            "the private dockerd is running already"
        );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.daemon_log)
            .map_err(|e| format!("cannot open {}: {e}", self.daemon_log.display()))?;
        let argv = self.daemon_argv(live_restore);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        // SAFETY: only setsid(2), which is async-signal-safe, runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let started = Instant::now();
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start `{}`: {e}", argv.join(" ")))?;
        self.daemon = Some(child);
        let mut exited = false;
        let up = wait_until(Duration::from_secs(60), || {
            exited = !self.daemon_running();
            exited || self.daemon_answers()
        });
        if up && !exited {
            return Ok(started.elapsed());
        }
        Err(format!(
            "`{}` {} within 60 s",
            argv.join(" "),
            if exited { "exited" } else { "did not answer" }
        ))
    }

    /// Starts the daemon and waits (up to 60 s) until `docker info` answers; returns how long that
    /// took. If it does not come up, it is killed and started once more; if that fails too, the
    /// test panics with the daemon's log.
    #[track_caller]
    pub fn start_daemon(&mut self, live_restore: bool) -> Duration {
        match self.try_start_daemon(live_restore) {
            Ok(took) => took,
            Err(first) => {
                eprintln!("{first}; starting it once more");
                self.kill_daemon();
                match self.try_start_daemon(live_restore) {
                    Ok(took) => took,
                    Err(second) => panic!(
                        "the private dockerd cannot be started: {first}; then {second}\n\
                         --- {}\n{}",
                        self.daemon_log.display(),
                        self.daemon_log_tail(40)
                    ),
                }
            }
        }
    }

    /// SIGTERM to the daemon, and wait (up to 60 s, then SIGKILL) until it has exited.
    pub fn stop_daemon(&mut self) -> Duration {
        let started = Instant::now();
        let Some(mut child) = self.daemon.take() else {
            return started.elapsed();
        };
        // SAFETY: kill(2) on the pid of our own child.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    eprintln!("the private dockerd ignored SIGTERM for 60 s; killing it");
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
            }
        }
        started.elapsed()
    }

    fn kill_daemon(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn daemon_log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.daemon_log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// `docker -H HOST ARGS…` within 60 s, whatever its exit code.
    pub fn docker(&self, args: &[&str]) -> Run {
        docker_at(&self.host, args)
    }

    /// `docker -H HOST ARGS…`, which must succeed; returns trimmed stdout.
    #[track_caller]
    pub fn docker_ok(&self, args: &[&str]) -> String {
        let run = self.docker(args);
        run.assert_success();
        run.stdout.trim().to_owned()
    }

    /// A bridge network `<prefix>-<name>` with a subnet and a bridge of its own; `extra` go to
    /// `docker network create`.
    #[track_caller]
    pub fn network(&mut self, name: &str, extra: &[&str]) -> String {
        let full = format!("{}-{name}", self.prefix);
        let third = (std::process::id() * 7 + self.n * 13 + self.subnets) % 250 + 1;
        self.subnets += 1;
        let base = format!("10.232.{third}");
        let subnet = format!("{base}.0/24");
        let bridge = crate::common::iface_name();
        let bridge_opt = format!("com.docker.network.bridge.name={bridge}");
        let mut args = vec!["network", "create", "--subnet", &subnet, "-o", &bridge_opt];
        args.extend_from_slice(extra);
        args.push(&full);
        self.docker_ok(&args);
        self.networks.push(full.clone());
        self.bridges.push(bridge.clone());
        // Both families: Engine 28 sets ip6tables' FORWARD policy to DROP as well, and with
        // br_netfilter bridged IPv6 (neighbour discovery included) goes through it.
        for tool in ["iptables", "ip6tables"] {
            self.rules
                .push(crate::common::FirewallRule::accept_bridged(tool, &bridge));
        }
        self.bases.insert(full.clone(), base);
        self.bridge_of.insert(full.clone(), bridge);
        full
    }

    /// The Linux bridge of a network made by [`Fleet::network`].
    pub fn bridge(&self, network: &str) -> &str {
        &self.bridge_of[network]
    }

    /// `A.B.C.host` in a network made by [`Fleet::network`].
    pub fn address(&self, network: &str, host: u8) -> String {
        format!("{}.{host}", self.bases[network])
    }

    /// `docker run -d --name <prefix>-<name> ARGS… IMAGE [CMD…]`; returns the full name.
    #[track_caller]
    pub fn run(&mut self, name: &str, args: &[&str], cmd: &[&str]) -> String {
        self.start_container(name, args, cmd).assert_success();
        format!("{}-{name}", self.prefix)
    }

    /// Like [`Fleet::run`] but returns the `docker run` outcome.
    pub fn start_container(&mut self, name: &str, args: &[&str], cmd: &[&str]) -> Run {
        let full = format!("{}-{name}", self.prefix);
        let mut argv = vec!["run", "-d", "--name", &full];
        argv.extend_from_slice(args);
        argv.push(IMAGE);
        argv.extend_from_slice(cmd);
        self.containers.push(full.clone());
        self.docker(&argv)
    }

    /// Takes charge of a container (full name) started some other way, e.g. from a thread.
    pub fn track(&mut self, full_name: &str) {
        self.containers.push(full_name.to_owned());
    }

    /// `docker rm -f -v` of these containers in one go; they are no longer tracked.
    #[track_caller]
    pub fn remove(&mut self, names: &[String]) {
        for chunk in names.chunks(100) {
            let mut args = vec!["rm", "-f", "-v"];
            args.extend(chunk.iter().map(String::as_str));
            self.docker_ok(&args);
        }
        self.containers.retain(|c| !names.contains(c));
    }

    /// The container's IPv4 address on a network.
    #[track_caller]
    pub fn ip(&self, container: &str, network: &str) -> String {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
        self.docker_ok(&["inspect", "-f", &format, container])
    }

    /// The container's MAC address on a network.
    #[track_caller]
    pub fn mac(&self, container: &str, network: &str) -> String {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").MacAddress}}}}");
        self.docker_ok(&["inspect", "-f", &format, container])
    }

    /// Host pid of the container's first process.
    #[track_caller]
    pub fn pid(&self, container: &str) -> u32 {
        self.docker_ok(&["inspect", "-f", "{{.State.Pid}}", container])
            .parse()
            .expect("pid")
    }

    /// The host-side veth (name, ifindex) of a container's interface on a network.
    #[track_caller]
    pub fn veth(&self, container: &str, network: &str) -> (String, u32) {
        host_veth(self.pid(container), &self.mac(container, network))
    }

    /// `dxdp watch` on the pin directory, talking to this daemon.
    pub fn watch(&self, extra: &[&str]) -> Watch {
        Watch::start_with_env(&self.dxdp, extra, &[("DOCKER_HOST", &self.host)])
    }

    /// Like [`Fleet::watch`], with more environment for the watch process.
    pub fn watch_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Watch {
        let mut all = vec![("DOCKER_HOST", self.host.as_str())];
        all.extend_from_slice(env);
        Watch::start_with_env(&self.dxdp, extra, &all)
    }

    /// The pid of the private dockerd, while it runs.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Child::id)
    }

    /// `dxdp --pin-dir DIR ARGS…` talking to this daemon, within `timeout`.
    pub fn dxdp_for(&self, args: &[&str], timeout: Duration) -> Run {
        let env = format!("DOCKER_HOST={}", self.host);
        let dir = self.dxdp.pin_dir.to_string_lossy().into_owned();
        let mut argv = vec!["env", &env, DXDP, "--pin-dir", &dir];
        argv.extend_from_slice(args);
        run_for(&argv, timeout)
    }

    /// Kills a containerd the daemon left behind (it normally stops it on exit).
    fn kill_leftover_containerd(&self) {
        let pidfile = self.run_dir.join("exec/containerd/containerd.pid");
        let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        else {
            return;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let ours = String::from_utf8_lossy(&cmdline).contains(&*self.run_dir.to_string_lossy());
        if ours {
            eprintln!("cleanup: killing containerd {pid} left by the private dockerd");
            // SAFETY: kill(2) of a process our daemon started, checked by its command line.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

impl Default for Fleet {
    fn default() -> Self {
        Self::new()
    }
}

/// Unmounts (lazily, deepest first) every mount at or under `dir`.
fn unmount_under(dir: &std::path::Path) {
    let prefix = dir.to_string_lossy().into_owned();
    let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
        .filter(|m| *m == prefix || m.starts_with(&format!("{prefix}/")))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    mounts.dedup();
    for m in mounts {
        let c = std::ffi::CString::new(m.clone()).expect("no NUL");
        // SAFETY: umount2(2) with a valid C string.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
            eprintln!("cleanup: umount {m}: {}", std::io::Error::last_os_error());
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if !self.containers.is_empty() || !self.networks.is_empty() {
            if !self.daemon_running()
                && let Err(e) = self.try_start_daemon(false)
            {
                eprintln!("cleanup: {e}");
            }
            if self.daemon_running() {
                let containers: Vec<String> = self.containers.drain(..).collect();
                for chunk in containers.chunks(100) {
                    let mut args = vec!["rm", "-f", "-v"];
                    args.extend(chunk.iter().map(String::as_str));
                    quietly_at(&self.host, &args);
                }
                // dockerd 20.10 sometimes keeps a stale endpoint of a removed container and
                // refuses; no matter: the daemon's state goes with its data root, its bridges
                // below.
                let networks: Vec<String> = self.networks.drain(..).rev().collect();
                for n in networks {
                    let _ = self.docker(&["network", "rm", &n]);
                }
            }
        }
        self.stop_daemon();
        self.kill_leftover_containerd();
        for bridge in self.bridges.drain(..) {
            if crate::common::host_iface_exists(&bridge) {
                let _ = try_run(&["ip", "link", "del", &bridge], Duration::from_secs(20));
            }
        }
        self.rules.clear();
        for dir in [self.data_root.clone(), self.run_dir.clone()] {
            unmount_under(&dir);
            if dir.exists()
                && let Err(e) = std::fs::remove_dir_all(&dir)
            {
                eprintln!("cleanup: cannot remove {}: {e}", dir.display());
            }
        }
    }
}

fn quietly_at(host: &str, args: &[&str]) {
    let mut argv = vec![DOCKER, "-H", host];
    argv.extend_from_slice(args);
    match try_run(&argv, Duration::from_secs(60)) {
        Ok(run) if run.success() => {}
        Ok(run) => eprintln!("cleanup: {run}"),
        Err(e) => eprintln!("cleanup: {e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Containers' interfaces seen from the host

/// ifindex of every interface of the host namespace, by name.
pub fn host_ifindexes() -> std::collections::BTreeMap<u32, String> {
    let mut out = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir("/sys/class/net")
        .expect("/sys/class/net")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Ok(text) = std::fs::read_to_string(entry.path().join("ifindex"))
            && let Ok(ifindex) = text.trim().parse()
        {
            out.insert(ifindex, name);
        }
    }
    out
}

/// The host-side veth (name, ifindex) of the interface carrying `mac` inside the network
/// namespace of process `pid`, found through the container's own sysfs.
#[track_caller]
pub fn host_veth(pid: u32, mac: &str) -> (String, u32) {
    let root = PathBuf::from(format!("/proc/{pid}/root/sys/class/net"));
    let mac = mac.to_ascii_lowercase();
    for entry in std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .flatten()
    {
        let address = std::fs::read_to_string(entry.path().join("address")).unwrap_or_default();
        if address.trim() != mac {
            continue;
        }
        let iflink: u32 = std::fs::read_to_string(entry.path().join("iflink"))
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("iflink of {}: {e}", entry.path().display()));
        let name = host_ifindexes()
            .remove(&iflink)
            .unwrap_or_else(|| panic!("no host interface has ifindex {iflink} (peer of {mac})"));
        return (name, iflink);
    }
    panic!("process {pid} has no interface with MAC {mac}");
}

/// Received packets of an interface inside the network namespace of `pid` (/proc/PID/net/dev).
pub fn netns_rx_packets(pid: u32, ifname: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).expect("/proc/PID/net/dev");
    text.lines()
        .find_map(|l| {
            let (name, rest) = l.split_once(':')?;
            (name.trim() == ifname).then(|| rest.split_whitespace().nth(1)?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {ifname} in /proc/{pid}/net/dev"))
}

// ---------------------------------------------------------------------------------------------
// The pinned state, entry by entry

/// bpftool's JSON dump of a pinned map: (key bytes, value bytes of CPU 0 or the value).
pub fn map_entries(pin_dir: &std::path::Path, map: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let path = pin_dir.join("maps").join(map);
    let path = path.to_string_lossy();
    let json = crate::common::bpftool(&["map", "dump", "pinned", &path]);
    let bytes = |v: &serde_json::Value| -> Vec<u8> {
        v.as_array()
            .unwrap_or_else(|| panic!("bpftool dump of {map}: not a byte array: {v}"))
            .iter()
            .map(|b| {
                let s = b.as_str().unwrap_or_default();
                u8::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex byte")
            })
            .collect()
    };
    json.as_array()
        .unwrap_or_else(|| panic!("bpftool dump of {map}: {json}"))
        .iter()
        .map(|e| {
            let value = match e.get("values") {
                Some(per_cpu) => bytes(&per_cpu[0]["value"]),
                None => bytes(&e["value"]),
            };
            (bytes(&e["key"]), value)
        })
        .collect()
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))
}

/// Id of a pinned program, per bpftool.
pub fn pinned_prog_id(path: &std::path::Path) -> u32 {
    let path = path.to_string_lossy();
    crate::common::bpftool(&["prog", "show", "pinned", &path])["id"]
        .as_u64()
        .expect("program id") as u32
}

/// Every bpf_link of the host: (link id, program id).
pub fn bpf_links() -> Vec<(u32, u32)> {
    crate::common::bpftool(&["link", "show"])
        .as_array()
        .map(|links| {
            links
                .iter()
                .map(|l| {
                    (
                        l["id"].as_u64().unwrap_or(0) as u32,
                        l["prog_id"].as_u64().unwrap_or(0) as u32,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Programs attached to a host interface's TCX ingress, by id.
pub fn tcx_ingress_ids(ifname: &str) -> Vec<u32> {
    use aya::programs::{SchedClassifier, TcAttachType};
    SchedClassifier::query_tcx(ifname, TcAttachType::Ingress)
        .map(|(_, programs)| programs.iter().map(|p| p.id()).collect())
        .unwrap_or_default()
}

/// What is wrong with a pin directory's state, entry by entry; empty when every entry of every
/// map belongs to a link `status` lists, between two live veths of the host that carry our
/// program through exactly one pinned attachment each:
/// - DXDP_LINK_META holds exactly the links; DXDP_LINKS exactly both directions of each;
/// - DXDP_ENDPOINTS, DXDP_TARGETS, DXDP_COUNTERS exactly the endpoints of the links, which are
///   the `interfaces` of status;
/// - `links/` holds one attachment pin per endpoint, of its datapath, and our program is
///   attached there (TCX ingress for tc, the XDP slot for xdp).
pub fn pinned_state_problems(dxdp: &Dxdp) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let status = dxdp.status();
    let mut problems = Vec::new();
    let links: BTreeSet<(u32, u32)> = status
        .links
        .iter()
        .map(|l| (l.low_ifindex, l.high_ifindex))
        .collect();
    let endpoints: BTreeSet<u32> = links.iter().flat_map(|(x, y)| [*x, *y]).collect();
    let managed: BTreeMap<u32, String> = status
        .interfaces
        .iter()
        .map(|i| (i.ifindex, i.datapath.clone()))
        .collect();
    let managed_set: BTreeSet<u32> = managed.keys().copied().collect();
    if managed_set != endpoints {
        problems.push(format!(
            "interfaces {managed_set:?} are not exactly the endpoints of the links {endpoints:?}"
        ));
    }
    let host = host_ifindexes();
    for ifindex in &managed_set {
        match host.get(ifindex) {
            None => problems.push(format!(
                "managed ifindex {ifindex} does not exist on the host"
            )),
            Some(name) => {
                let iflink = std::fs::read_to_string(format!("/sys/class/net/{name}/iflink"))
                    .unwrap_or_default();
                if iflink.trim() == ifindex.to_string() {
                    problems.push(format!("managed ifindex {ifindex} ({name}) is not a veth"));
                }
            }
        }
    }
    let dir = &dxdp.pin_dir;
    if !dir.join("maps").exists() {
        if !links.is_empty() || !managed.is_empty() {
            problems.push(format!(
                "status lists links but {} has no maps",
                dir.display()
            ));
        }
        return problems;
    }
    let meta: BTreeSet<(u32, u32)> = map_entries(dir, "DXDP_LINK_META")
        .iter()
        .map(|(k, _)| (le_u32(&k[0..4]), le_u32(&k[4..8])))
        .collect();
    if meta != links {
        problems.push(format!("DXDP_LINK_META {meta:?} != links {links:?}"));
    }
    let mut directions: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for (k, v) in map_entries(dir, "DXDP_LINKS") {
        let (from, to) = (le_u32(&k[0..4]), le_u32(&v[0..4]));
        *directions.entry((from, to)).or_default() += 1;
        if !links.contains(&(from.min(to), from.max(to))) {
            problems.push(format!(
                "DXDP_LINKS entry {from} -> {to} belongs to no link"
            ));
        }
    }
    for (x, y) in &links {
        for (from, to) in [(*x, *y), (*y, *x)] {
            let n = directions.get(&(from, to)).copied().unwrap_or(0);
            if n != 1 {
                problems.push(format!(
                    "link {x}-{y}: {n} DXDP_LINKS entries {from} -> {to}"
                ));
            }
        }
    }
    for map in ["DXDP_ENDPOINTS", "DXDP_TARGETS", "DXDP_COUNTERS"] {
        let keys: BTreeSet<u32> = map_entries(dir, map)
            .iter()
            .map(|(k, _)| le_u32(k))
            .collect();
        if keys != endpoints {
            problems.push(format!("{map} keys {keys:?} != endpoints {endpoints:?}"));
        }
    }
    let mut pinned: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for name in dxdp.link_pins() {
        match name.split_once('-').map(|(k, i)| (k, i.parse::<u32>())) {
            Some((kind, Ok(ifindex))) => pinned.entry(ifindex).or_default().push(kind.to_owned()),
            _ => problems.push(format!("unexpected attachment pin {name}")),
        }
    }
    let prog_id = |name: &str| {
        let path = dir.join("progs").join(name);
        if path.exists() {
            pinned_prog_id(&path)
        } else {
            0
        }
    };
    let (tc_id, xdp_id) = (prog_id("dxdp_tc"), prog_id("dxdp_xdp"));
    for (ifindex, kinds) in &pinned {
        if !managed_set.contains(ifindex) {
            problems.push(format!(
                "attachment pin {kinds:?}-{ifindex} of an unmanaged ifindex"
            ));
        }
    }
    for (ifindex, kind) in &managed {
        let kinds = pinned.get(ifindex).cloned().unwrap_or_default();
        if kinds != [kind.clone()] {
            problems.push(format!(
                "ifindex {ifindex} ({kind}) has attachment pins {kinds:?}"
            ));
        }
        let Some(name) = host.get(ifindex) else {
            continue;
        };
        let attached = match kind.as_str() {
            "tc" => tcx_ingress_ids(name)
                .iter()
                .filter(|id| **id == tc_id)
                .count(),
            _ => usize::from(crate::common::xdp_prog_id(name) == Some(xdp_id)),
        };
        if attached != 1 {
            problems.push(format!(
                "ifindex {ifindex} ({name}): our {kind} program is attached {attached} times"
            ));
        }
    }
    problems
}

// ---------------------------------------------------------------------------------------------
// Randomness and soak

/// Whether the longer soak runs: `DXDP_SOAK=1`.
pub fn soak() -> bool {
    std::env::var("DXDP_SOAK").as_deref() == Ok("1")
}

/// A small xorshift generator; the seed is printed, and `DXDP_SEED` replays a run.
pub struct Rng(u64);

impl Rng {
    pub fn seeded(what: &str) -> Self {
        let seed = std::env::var("DXDP_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{what}: DXDP_SEED={seed}");
        Self(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
