//! The Docker fixture: a test's [`World`] of networks and containers, on the host's dockerd
//! ([`World::shared`]) or on a dockerd of the test's own ([`World::private`]), with a pin
//! directory of its own; everything is removed on drop.
//!
//! Names are `dxt-<pid>-<n>…`, so tests never touch containers or networks they did not make.
//! Subnets are given explicitly (10.231.<k>.0/24 on the shared daemon, 10.232.<k>.0/24 on a
//! private one) rather than left to Docker's pool, so that a test only ever sends traffic to
//! addresses of a network it created.
//!
//! Which daemon: the host's dockerd is shared with whatever else runs on the machine. Other
//! labeled containers would be linked by a watch of ours (and ours by theirs), and it must never
//! be stopped by a test. A private daemon sees only this test's containers, so the test can expect
//! exact link sets, and it can be stopped and started at will. It is started the way
//! scripts/setup.sh starts the host's (`setsid nohup dockerd`: a session of its own, output to a
//! log) with its own socket, data root and exec root, no default bridge and no iptables rules of
//! its own: each network gets a named bridge and a `FORWARD -i BR -o BR -j ACCEPT` rule in
//! iptables and in ip6tables, so bridged traffic flows under the host's DROP policies.

use std::{
    collections::HashMap,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use super::{
    docker_cli::{DOCKER, DockerCli, IMAGE},
    dxdp::Dxdp,
    guards::{FirewallRule, PinDir},
    host::{host_iface_exists, host_veth},
    names::{iface_name, next_id},
    process::{Run, must, run_for, try_run, wait_until},
    watch::Watch,
};

/// A test's world: a prefix for names, its own pin directory, the daemon it talks to, and guards
/// for what it creates. Dropped in this order: containers, networks, the private daemon (if any)
/// with its bridges, firewall rules and directories, then the pin directory.
pub struct World {
    pub prefix: String,
    pub dxdp: Dxdp,
    /// `docker` against this world's daemon.
    pub cli: DockerCli,
    n: u32,
    subnets: u32,
    containers: Vec<String>,
    networks: Vec<String>,
    /// Network name -> the first three octets of its IPv4 subnet.
    bases: HashMap<String, String>,
    /// The dockerd of the test's own; `None` on the host's.
    private: Option<PrivateDaemon>,
    _pin_dir: PinDir,
}

/// A dockerd of the test's own and what it needs besides its data: a named bridge and two
/// FORWARD rules per network.
struct PrivateDaemon {
    /// DOCKER_HOST of the daemon.
    host: String,
    log: PathBuf,
    run_dir: PathBuf,
    data_root: PathBuf,
    child: Option<Child>,
    /// Network name -> its Linux bridge.
    bridge_of: HashMap<String, String>,
    bridges: Vec<String>,
    rules: Vec<FirewallRule>,
    /// The bridge of the daemon's default network, made by the test: with `--bridge=none`
    /// dockerd deletes the host's docker0 at start (moby's removeDefaultBridgeInterface),
    /// which broke every later container on the host daemon's default network.
    default_bridge: String,
}

impl World {
    fn with(private: Option<PrivateDaemon>, n: u32, pin_dir: PinDir) -> Self {
        Self {
            prefix: format!("dxt-{}-{n}", std::process::id()),
            dxdp: Dxdp {
                pin_dir: pin_dir.path.clone(),
            },
            cli: match &private {
                Some(daemon) => DockerCli::at(&daemon.host),
                None => DockerCli::shared(),
            },
            n,
            subnets: 0,
            containers: Vec::new(),
            networks: Vec::new(),
            bases: HashMap::new(),
            private,
            _pin_dir: pin_dir,
        }
    }

    /// A world on the host's dockerd.
    pub fn shared() -> Self {
        let n = next_id();
        Self::with(None, n, PinDir::new(n))
    }

    /// A world on a private dockerd (without live-restore) that has the test image. Panics,
    /// having removed what it made, if the daemon does not come up.
    pub fn private() -> Self {
        let n = next_id();
        let pin_dir = PinDir::new(n);
        let prefix = format!("dxt-{}-{n}", std::process::id());
        let run_dir = PathBuf::from(format!("/run/{prefix}"));
        let daemon = PrivateDaemon {
            host: format!("unix://{}/docker.sock", run_dir.display()),
            log: run_dir.join("dockerd.log"),
            data_root: PathBuf::from(format!("/var/lib/{prefix}-docker")),
            run_dir,
            child: None,
            bridge_of: HashMap::new(),
            bridges: Vec::new(),
            rules: Vec::new(),
            default_bridge: iface_name(),
        };
        let bridge = daemon.default_bridge.clone();
        let mut world = Self::with(Some(daemon), n, pin_dir);
        // Recorded before it exists, so that teardown removes it even if `ip` fails halfway.
        world.daemon_mut().bridges.push(bridge.clone());
        must(&["ip", "link", "add", &bridge, "type", "bridge"]);
        // dockerd takes the default network's subnet from the bridge (-b excludes --bip); out of
        // the 10.232.1-250 subnets that World::network hands out.
        must(&["ip", "addr", "add", "10.232.254.1/24", "dev", &bridge]);
        let daemon = world.daemon();
        std::fs::create_dir_all(&daemon.run_dir).expect("run dir of the private dockerd");
        std::fs::write(daemon.run_dir.join("daemon.json"), "{}\n").expect("daemon.json");
        world.start_daemon(false);
        let host = &world.daemon().host;
        let load = format!("{DOCKER} save {IMAGE} | {DOCKER} -H {host} load -q");
        let run = run_for(&["sh", "-c", &load], Duration::from_secs(120));
        assert!(
            run.success(),
            "cannot load {IMAGE} into the private dockerd: {run}"
        );
        world
    }

    /// `docker [-H HOST] ARGS…` against this world's daemon within 60 s, whatever its exit code.
    pub fn docker(&self, args: &[&str]) -> Run {
        self.cli.run(args)
    }

    /// `docker [-H HOST] ARGS…`, which must succeed; returns trimmed stdout.
    #[track_caller]
    pub fn docker_ok(&self, args: &[&str]) -> String {
        self.cli.ok(args)
    }

    /// The third octet of the next subnet: split by test process and network, the pid keeps
    /// parallel runs apart.
    fn next_subnet(&mut self) -> u32 {
        let third = (std::process::id() * 7 + self.n * 13 + self.subnets) % 250 + 1;
        self.subnets += 1;
        third
    }

    /// A bridge network `<prefix>-<name>` with an IPv4 subnet of its own (on a private daemon,
    /// also a bridge of its own and FORWARD rules); `extra` go to `docker network create` (e.g.
    /// `-o com.docker.network.bridge.enable_icc=false`).
    #[track_caller]
    pub fn network(&mut self, name: &str, extra: &[&str]) -> String {
        let full = format!("{}-{name}", self.prefix);
        let third = self.next_subnet();
        let base = match self.private {
            Some(_) => format!("10.232.{third}"),
            None => format!("10.231.{third}"),
        };
        let subnet = format!("{base}.0/24");
        let bridge = self.private.as_ref().map(|_| iface_name());
        let bridge_opt = bridge
            .as_ref()
            .map(|b| format!("com.docker.network.bridge.name={b}"));
        let mut args = vec!["network", "create", "--subnet", &subnet];
        if let Some(opt) = &bridge_opt {
            args.extend_from_slice(&["-o", opt]);
        }
        args.extend_from_slice(extra);
        args.push(&full);
        self.docker_ok(&args);
        self.networks.push(full.clone());
        self.bases.insert(full.clone(), base);
        if let (Some(daemon), Some(bridge)) = (self.private.as_mut(), bridge) {
            daemon.bridges.push(bridge.clone());
            // Both families: Engine 28 sets ip6tables' FORWARD policy to DROP as well, and with
            // br_netfilter bridged IPv6 (neighbour discovery included) goes through it.
            for tool in ["iptables", "ip6tables"] {
                daemon
                    .rules
                    .push(FirewallRule::accept_bridged(tool, &bridge));
            }
            daemon.bridge_of.insert(full.clone(), bridge);
        }
        full
    }

    /// A bridge network `<prefix>-<name>` with IPv6 (a ULA /64 of its own) and, if `ipv4`, an
    /// IPv4 subnet as [`World::network`] gives; without it, `--ipv4=false` (Engine 28's IPv6-only
    /// networks). `extra` go to `docker network create`. On the host's dockerd.
    #[track_caller]
    pub fn network_v6(&mut self, name: &str, ipv4: bool, extra: &[&str]) -> String {
        assert!(
            self.private.is_none(),
            "network_v6 is made for the host's dockerd"
        );
        let full = format!("{}-{name}", self.prefix);
        let third = self.next_subnet();
        let subnet4 = format!("10.231.{third}.0/24");
        let subnet6 = format!("fd00:231:{third:x}::/64");
        let mut args = vec!["network", "create", "--ipv6", "--subnet", &subnet6];
        if ipv4 {
            args.extend_from_slice(&["--subnet", &subnet4]);
            self.bases.insert(full.clone(), format!("10.231.{third}"));
        } else {
            args.push("--ipv4=false");
        }
        args.extend_from_slice(extra);
        args.push(&full);
        self.docker_ok(&args);
        self.networks.push(full.clone());
        full
    }

    /// `A.B.C.host` in a network made by [`World::network`].
    pub fn address(&self, network: &str, host: u8) -> String {
        format!("{}.{host}", self.bases[network])
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

    /// One field of a container's endpoint on a network, per `docker inspect`.
    #[track_caller]
    fn endpoint_field(&self, container: &str, network: &str, field: &str) -> String {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").{field}}}}}");
        self.docker_ok(&["inspect", "-f", &format, container])
    }

    /// The container's IPv4 address on a network.
    #[track_caller]
    pub fn ip(&self, container: &str, network: &str) -> String {
        self.endpoint_field(container, network, "IPAddress")
    }

    /// The container's global IPv6 address on a network.
    #[track_caller]
    pub fn ip6(&self, container: &str, network: &str) -> String {
        self.endpoint_field(container, network, "GlobalIPv6Address")
    }

    /// The container's MAC address on a network, as Docker reports it.
    #[track_caller]
    pub fn mac(&self, container: &str, network: &str) -> String {
        self.endpoint_field(container, network, "MacAddress")
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

    /// DOCKER_HOST for a dxdp talking to this world's daemon; `None` for the host's.
    pub fn docker_host(&self) -> Option<&str> {
        self.private.as_ref().map(|d| d.host.as_str())
    }

    /// `dxdp watch` on this world's pin directory, talking to its daemon.
    pub fn watch(&self, extra: &[&str]) -> Watch {
        self.watch_with_env(extra, &[])
    }

    /// Like [`World::watch`], with more environment for the watch process.
    pub fn watch_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Watch {
        let mut all: Vec<(&str, &str)> = self
            .docker_host()
            .map(|host| ("DOCKER_HOST", host))
            .into_iter()
            .collect();
        all.extend_from_slice(env);
        Watch::start_with_env(&self.dxdp, extra, &all)
    }

    // -----------------------------------------------------------------------------------------
    // The private daemon

    #[track_caller]
    fn daemon(&self) -> &PrivateDaemon {
        self.private
            .as_ref()
            .expect("this test's world is on the host's dockerd, not a private one")
    }

    #[track_caller]
    fn daemon_mut(&mut self) -> &mut PrivateDaemon {
        self.private
            .as_mut()
            .expect("this test's world is on the host's dockerd, not a private one")
    }

    /// The Linux bridge of a network made by [`World::network`] on a private daemon.
    pub fn bridge(&self, network: &str) -> &str {
        &self.daemon().bridge_of[network]
    }

    /// The pid of the private dockerd, while it runs.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.daemon().child.as_ref().map(Child::id)
    }

    /// Starts the private daemon and waits (up to 60 s) until `docker info` answers; returns how
    /// long that took. If it does not come up, it is killed and started once more; if that fails
    /// too, the test panics with the daemon's log.
    #[track_caller]
    pub fn start_daemon(&mut self, live_restore: bool) -> Duration {
        let daemon = self.daemon_mut();
        match daemon.try_start(live_restore) {
            Ok(took) => took,
            Err(first) => {
                eprintln!("{first}; starting it once more");
                daemon.kill();
                match daemon.try_start(live_restore) {
                    Ok(took) => took,
                    Err(second) => panic!(
                        "the private dockerd cannot be started: {first}; then {second}\n\
                         --- {}\n{}",
                        daemon.log.display(),
                        daemon.log_tail(40)
                    ),
                }
            }
        }
    }

    /// SIGTERM to the private daemon, and wait (up to 60 s, then SIGKILL) until it has exited.
    pub fn stop_daemon(&mut self) -> Duration {
        self.daemon_mut().stop()
    }
}

impl PrivateDaemon {
    fn argv(&self, live_restore: bool) -> Vec<String> {
        let r = self.run_dir.display();
        let mut argv: Vec<String> = vec![
            "dockerd".into(),
            format!("--config-file={r}/daemon.json"),
            format!("--host={}", self.host),
            format!("--pidfile={r}/docker.pid"),
            format!("--data-root={}", self.data_root.display()),
            format!("--exec-root={r}/exec"),
            format!("--bridge={}", self.default_bridge),
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
    fn answers(&self) -> bool {
        matches!(
            try_run(
                &[DOCKER, "-H", &self.host, "info", "--format", "{{.ServerVersion}}"],
                Duration::from_secs(10),
            ),
            Ok(run) if run.success()
        )
    }

    /// Whether the daemon process is running.
    fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    fn try_start(&mut self, live_restore: bool) -> Result<Duration, String> {
        assert!(!self.running(), "the private dockerd is running already");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("cannot open {}: {e}", self.log.display()))?;
        let argv = self.argv(live_restore);
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
        self.child = Some(child);
        let mut exited = false;
        let up = wait_until(Duration::from_secs(60), || {
            exited = !self.running();
            exited || self.answers()
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

    fn stop(&mut self) -> Duration {
        let started = Instant::now();
        let Some(mut child) = self.child.take() else {
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

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
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

    /// Stops the daemon, then removes its containerd, bridges, firewall rules and directories.
    fn tear_down(&mut self) {
        self.stop();
        self.kill_leftover_containerd();
        for bridge in self.bridges.drain(..) {
            if host_iface_exists(&bridge) {
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

/// Unmounts (lazily, deepest first) every mount at or under `dir`.
fn unmount_under(dir: &Path) {
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

impl Drop for World {
    fn drop(&mut self) {
        let containers: Vec<String> = self.containers.drain(..).rev().collect();
        let networks: Vec<String> = self.networks.drain(..).rev().collect();
        let Some(daemon) = self.private.as_mut() else {
            for c in &containers {
                self.cli.quietly(&["rm", "-f", "-v", c]);
            }
            for n in &networks {
                self.cli.quietly(&["network", "rm", n]);
            }
            return;
        };
        if !containers.is_empty() || !networks.is_empty() {
            if !daemon.running()
                && let Err(e) = daemon.try_start(false)
            {
                eprintln!("cleanup: {e}");
            }
            if daemon.running() {
                for chunk in containers.chunks(100) {
                    let mut args = vec!["rm", "-f", "-v"];
                    args.extend(chunk.iter().map(String::as_str));
                    self.cli.quietly(&args);
                }
                // dockerd 20.10 sometimes keeps a stale endpoint of a removed container and
                // refuses; no matter: the daemon's state goes with its data root, its bridges
                // below.
                for n in &networks {
                    let _ = self.cli.run(&["network", "rm", n]);
                }
            }
        }
        daemon.tear_down();
    }
}
