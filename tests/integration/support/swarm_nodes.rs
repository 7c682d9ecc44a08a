//! A real multi-node Docker Swarm on this machine: [`SwarmNodes`], 2 or 3 dockerd nodes, each in
//! a network, mount and UTS namespace of its own, joined by a bridge, with real VXLAN between
//! them. scripts/swarm-nodes.sh does the work (`up`, `down`, `load`), so the swarm a test makes
//! and the one a human starts by hand (`scripts/swarm-nodes.sh up`) are the same; its opening
//! comment has the layout (names, addresses, directories).
//!
//! Each node's mount namespace has a fresh bpffs at /sys/fs/bpf and a private /run where its
//! dockerd listens too (/var/run/docker.sock), so dxdp run inside a node with [`SwarmNode::exec`]
//! sees that node's dockerd and pins on that node's bpffs. The host's docker client talks to a
//! node through the socket in the node's directory ([`SwarmNode::docker`]).
//!
//! Names are fixed (`dxt-sw1`…), so one swarm at a time: a lock (in-process and, by flock(2) on
//! [`LOCK`], across processes) is held while a [`SwarmNodes`] lives, and `up` first removes what a
//! crashed run left. Dropping it (also while a failed assertion unwinds) runs `down`: workers
//! leave, then the manager, containers are killed, each dockerd gets SIGTERM and whatever of a
//! node remains SIGKILL, then the namespaces, cgroups and directories go.

use std::{
    fs::File,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    sync::{Mutex, MutexGuard},
    time::{Duration, Instant},
};

use super::{
    docker_cli::DockerCli,
    prereq::{can_run, missing_tools, require_docker},
    process::{Run, run_for, try_run},
};

/// The one source of truth for how nodes are made and unmade.
pub const SWARM_NODES_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/swarm-nodes.sh");
/// Held (flock) while a swarm of nodes made by a test lives.
const LOCK: &str = "/run/dxt-swarm.lock";
/// The nodes' directories (data roots, sockets, logs), per the script.
const ROOT: &str = "/var/lib/dxt-swarm";
/// Network namespaces the script makes: one per node, and the hub with the bridge.
const NETNS_PREFIX: &str = "dxt-sw";
/// How long `up` and `down` may take (both normally take seconds).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a command inside a node may take by default.
const EXEC_TIMEOUT: Duration = Duration::from_secs(20);

static IN_PROCESS: Mutex<()> = Mutex::new(());

/// [`require_docker`] (root, bpffs, the netns tools, dockerd, the test image), and what the
/// nodes need besides: the namespace tools and dockerd's binary.
#[track_caller]
pub fn require_swarm_nodes() -> bool {
    require_docker()
        && can_run(missing_tools(&[
            "nsenter", "unshare", "setsid", "dockerd", "timeout",
        ]))
}

/// One node: its dockerd, reached from the host through `docker -H`.
#[derive(Debug, Clone)]
pub struct SwarmNode {
    /// 1-based; node 1 is the manager.
    pub index: usize,
    /// Its network namespace (`ip netns`), hostname, and cgroup parent.
    pub name: String,
    address: String,
    pid: u32,
    /// `docker -H unix://DIR/docker.sock`.
    pub cli: DockerCli,
    /// Its directory: data root, daemon.json, docker.sock, dockerd.log.
    pub dir: PathBuf,
}

/// An attachable overlay network made on the manager.
#[derive(Debug, Clone)]
pub struct Overlay {
    pub name: String,
    pub id: String,
    pub subnet: String,
}

impl Overlay {
    /// The name of its sandbox namespace under a node's /run/docker/netns: `1-<id prefix>`.
    pub fn sandbox(&self) -> String {
        format!("1-{}", &self.id[..10])
    }
}

/// What [`SwarmNodes::stop`] found: how long teardown took and anything left behind.
#[derive(Debug)]
pub struct Teardown {
    pub took: Duration,
    pub leftovers: Vec<String>,
}

/// A swarm of nodes; torn down on drop.
pub struct SwarmNodes {
    pub nodes: Vec<SwarmNode>,
    /// How long `up` took: namespaces, dockerds answering, the swarm formed with all nodes Ready.
    pub started_in: Duration,
    torn_down: bool,
    _lock: File,
    _in_process: MutexGuard<'static, ()>,
}

impl SwarmNodes {
    /// `n` nodes (2 or 3) in one swarm, node 1 the manager, all Ready. Panics (having removed
    /// what it made) if they do not come up.
    #[track_caller]
    pub fn start(n: usize) -> Self {
        assert!((2..=3).contains(&n), "2 or 3 nodes, not {n}");
        let in_process = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
        let lock = File::create(LOCK).unwrap_or_else(|e| panic!("cannot open {LOCK}: {e}"));
        // SAFETY: flock(2) on a descriptor we own; blocks until another test process's swarm
        // is gone.
        let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(
            locked,
            0,
            "flock {LOCK}: {}",
            std::io::Error::last_os_error()
        );
        // The guard exists before `up` runs, so that whatever `up` made goes even if it fails.
        let mut swarm = Self {
            nodes: Vec::new(),
            started_in: Duration::ZERO,
            torn_down: false,
            _lock: lock,
            _in_process: in_process,
        };
        let started = Instant::now();
        let up = script(&["up", &n.to_string()]);
        swarm.started_in = started.elapsed();
        assert!(up.success(), "scripts/swarm-nodes.sh up {n} failed: {up}");
        swarm.nodes = parse_nodes(&up.stdout);
        assert_eq!(
            swarm.nodes.len(),
            n,
            "up printed {} nodes: {up}",
            swarm.nodes.len()
        );
        eprintln!("swarm of {n} nodes up in {:?}", swarm.started_in);
        swarm
    }

    /// Node `k`, 1-based.
    #[track_caller]
    pub fn node(&self, k: usize) -> &SwarmNode {
        &self.nodes[k - 1]
    }

    /// Node 1, the manager.
    pub fn manager(&self) -> &SwarmNode {
        &self.nodes[0]
    }

    /// `docker save` of `image` from the host's dockerd, `docker load` into every node.
    #[track_caller]
    pub fn load_image(&self, image: &str) {
        let run = script(&["load", image]);
        assert!(run.success(), "cannot load {image} into the nodes: {run}");
    }

    /// An attachable overlay network `name` on `subnet`, made on the manager; keep subnets in
    /// 10.240.200-254.0/24 (the script's other ranges are the nodes' own).
    #[track_caller]
    pub fn overlay(&self, name: &str, subnet: &str) -> Overlay {
        let id = self.manager().docker_ok(&[
            "network",
            "create",
            "-d",
            "overlay",
            "--attachable",
            "--subnet",
            subnet,
            name,
        ]);
        Overlay {
            name: name.to_owned(),
            id,
            subnet: subnet.to_owned(),
        }
    }

    /// Tears everything down now and says how long that took and what, if anything, is left:
    /// network namespaces, cgroups, the directory, and any process that was in a node's network
    /// namespace (dockerd, containerd, shims) or in its cgroups before teardown.
    pub fn stop(mut self) -> Teardown {
        let before: Vec<(u32, Option<u64>)> = self
            .nodes
            .iter()
            .flat_map(SwarmNode::processes)
            .map(|pid| (pid, process_start_time(pid)))
            .collect();
        let started = Instant::now();
        self.tear_down();
        let took = started.elapsed();
        let mut leftovers = swarm_leftovers();
        leftovers.extend(
            before
                .iter()
                // The same process: alive, and started when it did (not a reused pid).
                .filter(|(pid, start)| process_alive(*pid) && process_start_time(*pid) == *start)
                .map(|(pid, _)| format!("process {pid} ({})", cmdline(*pid))),
        );
        eprintln!("swarm torn down in {took:?}");
        Teardown { took, leftovers }
    }

    /// Lets go of the swarm without tearing it down, as a crashed run would; the next
    /// [`SwarmNodes::start`] (or `scripts/swarm-nodes.sh down`) removes it.
    pub fn abandon(mut self) {
        self.torn_down = true;
    }

    fn tear_down(&mut self) {
        if std::mem::replace(&mut self.torn_down, true) {
            return;
        }
        match try_run(&[SWARM_NODES_SCRIPT, "down"], SCRIPT_TIMEOUT) {
            Ok(run) if run.success() => {}
            Ok(run) => eprintln!("cleanup: {run}"),
            Err(e) => eprintln!("cleanup: {e}"),
        }
    }
}

impl Drop for SwarmNodes {
    fn drop(&mut self) {
        self.tear_down();
    }
}

impl SwarmNode {
    /// `docker -H NODE ARGS…` (the host's client) within 60 s, whatever its exit code.
    pub fn docker(&self, args: &[&str]) -> Run {
        self.cli.run(args)
    }

    /// `docker -H NODE ARGS…`, which must succeed; returns trimmed stdout.
    #[track_caller]
    pub fn docker_ok(&self, args: &[&str]) -> String {
        self.cli.ok(args)
    }

    /// The pid of the node's dockerd (on the host).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The node's address on the bridge between nodes (10.240.0.K).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// DOCKER_HOST for the node's dockerd, from the host.
    pub fn host(&self) -> &str {
        self.cli
            .host
            .as_deref()
            .expect("a node's client has a host")
    }

    /// `argv` inside the node's network, mount and UTS namespaces (`nsenter -t DOCKERD -n -m
    /// -u`), within 20 s, whatever its exit code.
    #[track_caller]
    pub fn exec(&self, argv: &[&str]) -> Run {
        self.exec_for(argv, EXEC_TIMEOUT)
    }

    /// [`SwarmNode::exec`] within `timeout`.
    #[track_caller]
    pub fn exec_for(&self, argv: &[&str], timeout: Duration) -> Run {
        let pid = self.pid.to_string();
        let mut all = vec!["nsenter", "-t", &pid, "-n", "-m", "-u", "--"];
        all.extend_from_slice(argv);
        run_for(&all, timeout)
    }

    /// [`SwarmNode::exec`], which must succeed; returns stdout.
    #[track_caller]
    pub fn exec_ok(&self, argv: &[&str]) -> String {
        let run = self.exec(argv);
        run.assert_success();
        run.stdout
    }

    /// `argv` inside one of the node's sandboxes (`/run/docker/netns/NAME`, e.g. an overlay's
    /// `1-…`), within 20 s, whatever its exit code.
    #[track_caller]
    pub fn in_sandbox(&self, sandbox: &str, argv: &[&str]) -> Run {
        let ns = format!("--net=/run/docker/netns/{sandbox}");
        let mut all = vec!["nsenter", &ns, "--"];
        all.extend_from_slice(argv);
        self.exec(&all)
    }

    /// The names under the node's /run/docker/netns: overlay sandboxes (`1-<id prefix>`),
    /// `lb_…`, `ingress_sbox`, and one per container.
    #[track_caller]
    pub fn sandboxes(&self) -> Vec<String> {
        let out = self.exec_ok(&["ls", "/run/docker/netns"]);
        out.lines().map(str::to_owned).collect()
    }

    /// `docker run -d --name NAME ARGS… IMAGE [CMD…]` on this node; returns the name.
    #[track_caller]
    pub fn run(&self, name: &str, args: &[&str], image: &str, cmd: &[&str]) -> String {
        let mut argv = vec!["run", "-d", "--name", name];
        argv.extend_from_slice(args);
        argv.push(image);
        argv.extend_from_slice(cmd);
        self.docker_ok(&argv);
        name.to_owned()
    }

    /// A container's IPv4 address on a network, per `docker inspect`.
    #[track_caller]
    pub fn ip(&self, container: &str, network: &str) -> String {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
        self.docker_ok(&["inspect", "-f", &format, container])
    }

    /// Processes of the node now: those in its network namespace (dockerd, containerd, shims)
    /// and in its cgroups (containers).
    pub fn processes(&self) -> Vec<u32> {
        let mut pids = pids_in_netns(&Path::new("/run/netns").join(&self.name));
        pids.extend(pids_in_cgroups(&self.name));
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

/// `scripts/swarm-nodes.sh ARGS…`, bounded.
#[track_caller]
fn script(args: &[&str]) -> Run {
    let mut argv = vec![SWARM_NODES_SCRIPT];
    argv.extend_from_slice(args);
    run_for(&argv, SCRIPT_TIMEOUT)
}

/// The script's node lines: `node=K name=… address=… pid=… host=… dir=… state=…`.
#[track_caller]
fn parse_nodes(stdout: &str) -> Vec<SwarmNode> {
    stdout
        .lines()
        .filter(|l| l.starts_with("node="))
        .map(|line| {
            let field = |key: &str| -> String {
                line.split(' ')
                    .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
                    .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
                    .to_owned()
            };
            assert_eq!(field("state"), "up", "node not up: {line}");
            SwarmNode {
                index: field("node").parse().expect("node number"),
                name: field("name"),
                address: field("address"),
                pid: field("pid").parse().expect("dockerd pid"),
                cli: DockerCli::at(&field("host")),
                dir: PathBuf::from(field("dir")),
            }
        })
        .collect()
}

/// What of any swarm node is on the host, one line each; empty when nothing is: network
/// namespaces `dxt-sw*`, cgroups `/sys/fs/cgroup/*/dxt-sw*`, processes in either, and the
/// nodes' directory.
pub fn swarm_leftovers() -> Vec<String> {
    let mut found = Vec::new();
    for entry in read_dir_names(Path::new("/run/netns")) {
        if entry.starts_with(NETNS_PREFIX) {
            let pids = pids_in_netns(&Path::new("/run/netns").join(&entry));
            found.push(format!("netns {entry} (processes: {pids:?})"));
        }
    }
    for controller in read_dir_names(Path::new("/sys/fs/cgroup")) {
        let dir = Path::new("/sys/fs/cgroup").join(&controller);
        for entry in read_dir_names(&dir) {
            if entry.starts_with(NETNS_PREFIX) {
                let pids = pids_in_cgroups(&entry);
                found.push(format!(
                    "cgroup {}/{entry} (processes: {pids:?})",
                    dir.display()
                ));
            }
        }
    }
    if Path::new(ROOT).exists() {
        found.push(format!("directory {ROOT}"));
    }
    found
}

fn read_dir_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Pids of processes in the network namespace bound at `ns` (compared by inode, as `ip netns
/// pids` does).
fn pids_in_netns(ns: &Path) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(target) = std::fs::metadata(ns) else {
        return Vec::new();
    };
    read_dir_names(Path::new("/proc"))
        .into_iter()
        .filter_map(|name| name.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|m| m.ino() == target.ino() && m.dev() == target.dev())
        })
        .collect()
}

/// Pids in the cgroups `/sys/fs/cgroup/*/NAME` and their children, any depth.
fn pids_in_cgroups(name: &str) -> Vec<u32> {
    fn walk(dir: &Path, pids: &mut Vec<u32>) {
        if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        for child in read_dir_names(dir) {
            let path = dir.join(child);
            if path.is_dir() {
                walk(&path, pids);
            }
        }
    }
    let mut pids = Vec::new();
    for controller in read_dir_names(Path::new("/sys/fs/cgroup")) {
        walk(
            &Path::new("/sys/fs/cgroup").join(controller).join(name),
            &mut pids,
        );
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The fields of /proc/PID/stat after the command name (which is in parentheses and may hold
/// spaces): the state first, the start time 20th.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Whether `pid` is a live process (a zombie counts as gone).
pub fn process_alive(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|state| state != "Z"))
}

/// When `pid` started, in clock ticks after boot.
pub fn process_start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim()
                .to_owned()
        })
        .unwrap_or_default()
}
