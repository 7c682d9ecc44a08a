//! Shared harness of the privileged integration suites: prerequisites, commands bounded in time,
//! and guards that undo on drop — also while a failed assertion unwinds — everything a test made:
//! bridges, network namespaces, veths, iptables rules, bpffs pin directories and pinned objects,
//! background processes.
//!
//! Every name carries the test process's pid and a per-process counter (`dxt-<pid>-<n>` for
//! namespaces, `dxt<pid hex>-<k>` for interfaces, which have 15 characters at most,
//! `/sys/fs/bpf/dxdp-test-<pid>-<n>` for pin directories), so suites and tests never collide with
//! each other nor touch anything they did not make. IP addresses need no such care: every
//! namespace has a network stack of its own, and the host side of the bridge has no address.
//!
//! A guard's drop never panics: a cleanup step that fails is reported on stderr and the next step
//! still runs.
#![allow(dead_code)] // each suite compiles this module and uses a different part of it

use std::{
    collections::BTreeMap,
    fmt,
    io::Read,
    os::{
        fd::{FromRawFd, OwnedFd},
        unix::process::CommandExt,
    },
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde::Deserialize;

/// The binary under test, built by cargo for this test run.
pub const DXDP: &str = env!("CARGO_BIN_EXE_dxdp");

/// Where bpffs is mounted; every pin directory of the tests is made under it.
pub const BPFFS: &str = "/sys/fs/bpf";

/// External tools the harness drives.
const TOOLS: &[&str] = &[
    "ip",
    "iptables",
    "ip6tables",
    "ping",
    "iperf3",
    "ethtool",
    "ss",
];

/// Port of the iperf3 servers; each runs in a namespace of its own, so one port serves all.
pub const IPERF_PORT: u16 = 5201;

const CMD_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Prerequisites

/// Whether the privileged tests can run here: root, bpffs at /sys/fs/bpf and the tools in
/// [`TOOLS`]. If not, prints `skipping: <why>` and returns false — unless the environment
/// variable CI is `true`, where a test that cannot run is a failure: then it panics.
///
/// Call it first in every privileged test: `if !common::require_privileges() { return; }`.
pub fn require_privileges() -> bool {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("not running as root".to_owned());
    }
    match nix::sys::statfs::statfs(BPFFS) {
        Ok(fs) if fs.filesystem_type() == nix::sys::statfs::BPF_FS_MAGIC => {}
        Ok(_) => missing.push(format!("{BPFFS} is not a bpffs mount")),
        Err(e) => missing.push(format!("{BPFFS} is not there ({e})")),
    }
    for tool in TOOLS {
        if find_in_path(tool).is_none() {
            missing.push(format!("{tool} is not installed"));
        }
    }
    if missing.is_empty() {
        return true;
    }
    let why = missing.join("; ");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true, and this privileged test cannot run here: {why}");
    }
    eprintln!("skipping: {why}");
    false
}

fn find_in_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

// ---------------------------------------------------------------------------------------------
// Names

static NEXT_TOPOLOGY: AtomicU32 = AtomicU32::new(0);
static NEXT_IFACE: AtomicU32 = AtomicU32::new(0);

/// A fresh number for this test process.
pub fn next_id() -> u32 {
    NEXT_TOPOLOGY.fetch_add(1, Ordering::Relaxed)
}

/// A fresh interface name of this process, at most 15 characters: `dxt<pid hex>-<k>`.
pub fn iface_name() -> String {
    let name = format!(
        "dxt{:x}-{}",
        std::process::id(),
        NEXT_IFACE.fetch_add(1, Ordering::Relaxed)
    );
    assert!(name.len() < 16, "interface name {name} is too long");
    name
}

// ---------------------------------------------------------------------------------------------
// Commands

/// What a finished command did.
#[derive(Debug)]
pub struct Run {
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// The exit code; `None` when a signal ended the process.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics with everything the command printed unless it succeeded.
    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        assert!(self.success(), "command failed: {self}");
        self
    }

    /// Panics unless the command exited on its own with a non-zero code.
    #[track_caller]
    pub fn assert_failure(&self) -> &Self {
        assert!(
            matches!(self.code(), Some(c) if c != 0),
            "command should have failed with an exit code: {self}"
        );
        self
    }
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` ({})\n--- stdout\n{}--- stderr\n{}---",
            self.command, self.status, self.stdout, self.stderr
        )
    }
}

fn shown(argv: &[impl AsRef<str>]) -> String {
    argv.iter()
        .map(|a| a.as_ref())
        .collect::<Vec<_>>()
        .join(" ")
}

fn command(argv: &[impl AsRef<str>]) -> Command {
    let mut cmd = Command::new(argv[0].as_ref());
    cmd.args(argv[1..].iter().map(|a| a.as_ref()))
        .stdin(Stdio::null())
        // A group of its own, so that a timeout kills whatever the command started too.
        .process_group(0);
    cmd
}

/// Sends SIGKILL to the process group of a child started by [`command`] (its pid is the pgid).
fn kill_group(child: &Child) {
    // SAFETY: kill(2) has no memory effects; the negative pid names the group this harness
    // created for its own child.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
}

/// Runs `argv` to completion, killing it (and its process group) after `timeout`.
pub fn try_run(argv: &[impl AsRef<str>], timeout: Duration) -> Result<Run, String> {
    let command_line = shown(argv);
    let mut child = command(argv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{command_line}`: {e}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                text = String::from_utf8_lossy(&bytes).into_owned();
            }
            text
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                kill_group(&child);
                let _ = child.wait();
                return Err(format!(
                    "`{command_line}` did not finish within {timeout:?}; killed it"
                ));
            }
            Err(e) => return Err(format!("cannot wait for `{command_line}`: {e}")),
        }
    };
    Ok(Run {
        command: command_line,
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// Runs `argv` to completion within `timeout`; panics if it cannot start or overruns.
#[track_caller]
pub fn run_for(argv: &[impl AsRef<str>], timeout: Duration) -> Run {
    try_run(argv, timeout).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `argv` (within 20 s) whatever its exit code.
#[track_caller]
pub fn run(argv: &[impl AsRef<str>]) -> Run {
    run_for(argv, CMD_TIMEOUT)
}

/// Runs `argv` (within 20 s), panics unless it succeeds, returns its stdout.
#[track_caller]
pub fn must(argv: &[impl AsRef<str>]) -> String {
    let run = run(argv);
    run.assert_success();
    run.stdout
}

/// Runs `argv` from a guard's drop: failures are reported, never panicked on.
pub fn quietly(argv: &[impl AsRef<str>]) {
    match try_run(argv, CMD_TIMEOUT) {
        Ok(run) if run.success() => {}
        Ok(run) => eprintln!("cleanup: {run}"),
        Err(e) => eprintln!("cleanup: {e}"),
    }
}

/// `argv` run inside the named network namespace.
pub fn in_ns(ns: &str, argv: &[impl AsRef<str>]) -> Vec<String> {
    ["ip", "netns", "exec", ns]
        .into_iter()
        .map(str::to_owned)
        .chain(argv.iter().map(|a| a.as_ref().to_owned()))
        .collect()
}

/// A process left running while the test goes on, killed with its process group on drop.
pub struct Background {
    child: Option<Child>,
    command: String,
}

impl Background {
    /// Starts `argv` with its output discarded.
    #[track_caller]
    pub fn spawn(argv: &[impl AsRef<str>]) -> Self {
        let command_line = shown(argv);
        let child = command(argv)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{command_line}`: {e}"));
        Self {
            child: Some(child),
            command: command_line,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits up to `timeout` for the process to exit by itself.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    return Some(status);
                }
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                _ => return None,
            }
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take()
            && let Ok(None) = child.try_wait()
        {
            kill_group(&child);
            if let Err(e) = child.wait() {
                eprintln!("cleanup: cannot reap `{}`: {e}", self.command);
            }
        }
    }
}

/// Polls `check` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// Guards

/// A network namespace under /run/netns, deleted on drop.
pub struct NetnsGuard {
    pub name: String,
}

impl NetnsGuard {
    #[track_caller]
    pub fn create(name: &str) -> Self {
        must(&["ip", "netns", "add", name]);
        let guard = Self {
            name: name.to_owned(),
        };
        must(&["ip", "-n", name, "link", "set", "lo", "up"]);
        guard
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        if Path::new("/run/netns").join(&self.name).exists() {
            quietly(&["ip", "netns", "del", &self.name]);
        }
    }
}

/// A link (bridge, veth, …) in the host namespace, deleted on drop if it still exists; deleting
/// one end of a veth deletes both.
pub struct LinkGuard {
    pub name: String,
}

impl LinkGuard {
    /// Takes charge of a link that was just made.
    pub fn adopt(name: &str) -> Self {
        Self {
            name: name.to_owned(),
        }
    }

    /// Makes a bridge that forwards at once (no STP, no forwarding delay) and brings it up.
    #[track_caller]
    pub fn bridge(name: &str) -> Self {
        must(&[
            "ip",
            "link",
            "add",
            name,
            "type",
            "bridge",
            "stp_state",
            "0",
            "forward_delay",
            "0",
        ]);
        let guard = Self::adopt(name);
        must(&["ip", "link", "set", name, "up"]);
        guard
    }
}

impl Drop for LinkGuard {
    fn drop(&mut self) {
        if host_iface_exists(&self.name) {
            quietly(&["ip", "link", "del", &self.name]);
        }
    }
}

/// One rule inserted at the head of an iptables/ip6tables chain; exactly that rule is deleted on
/// drop (`-D` removes the first rule that matches the same specification).
pub struct FirewallRule {
    tool: &'static str,
    chain: String,
    spec: Vec<String>,
}

impl FirewallRule {
    #[track_caller]
    pub fn insert(tool: &'static str, chain: &str, spec: &[&str]) -> Self {
        let spec: Vec<String> = spec.iter().map(|s| (*s).to_owned()).collect();
        let mut argv = vec![tool.to_owned(), "-w".into(), "-I".into(), chain.to_owned()];
        argv.extend(spec.iter().cloned());
        must(&argv);
        Self {
            tool,
            chain: chain.to_owned(),
            spec,
        }
    }

    /// `iptables -I FORWARD -i BR -o BR -j ACCEPT`: with br_netfilter loaded (docker loads it) and
    /// the FORWARD policy DROP, bridged frames are dropped unless a rule accepts them.
    #[track_caller]
    pub fn accept_bridged(tool: &'static str, bridge: &str) -> Self {
        Self::insert(
            tool,
            "FORWARD",
            &["-i", bridge, "-o", bridge, "-j", "ACCEPT"],
        )
    }
}

impl Drop for FirewallRule {
    fn drop(&mut self) {
        let mut argv = vec![
            self.tool.to_owned(),
            "-w".into(),
            "-D".into(),
            self.chain.clone(),
        ];
        argv.extend(self.spec.iter().cloned());
        quietly(&argv);
    }
}

/// A dxdp pin directory of its own under bpffs. On drop: `dxdp --pin-dir DIR cleanup`, then
/// whatever is still there is removed.
pub struct PinDir {
    pub path: PathBuf,
}

impl PinDir {
    /// `/sys/fs/bpf/dxdp-test-<pid>-<n>`; not created: dxdp makes it on first use.
    pub fn new(n: u32) -> Self {
        let path = Path::new(BPFFS).join(format!("dxdp-test-{}-{n}", std::process::id()));
        assert!(!path.exists(), "{} exists already", path.display());
        Self { path }
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        let dir = self.path.to_string_lossy().into_owned();
        quietly(&[DXDP, "--pin-dir", &dir, "cleanup"]);
        if self.path.exists() {
            eprintln!("cleanup: `dxdp cleanup` left {dir} behind; removing it");
            if let Err(e) = std::fs::remove_dir_all(&self.path) {
                eprintln!("cleanup: cannot remove {dir}: {e}");
            }
        }
    }
}

/// `bpftool -j ARGS…`, parsed; panics naming the command if it fails or prints no JSON.
pub fn bpftool(args: &[&str]) -> serde_json::Value {
    let out = must(&[&["bpftool", "-j"], args].concat());
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("bpftool {args:?}: {e}: {out}"))
}

/// A file pinned on bpffs (a program or map), unpinned on drop.
pub struct PinnedObject {
    pub path: PathBuf,
}

impl PinnedObject {
    /// Unpins now; the object lives on while something else (an attachment) holds it.
    pub fn unpin(&self) {
        if let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            panic!("cannot unpin {}: {e}", self.path.display());
        }
    }
}

impl Drop for PinnedObject {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!("cleanup: cannot unpin {}: {e}", self.path.display());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Host interfaces

pub fn host_iface_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

fn sysfs_number(name: &str, file: &str) -> u64 {
    let path = Path::new("/sys/class/net").join(name).join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

/// ifindex of an interface in the host namespace (the tests' own).
pub fn host_ifindex(name: &str) -> u32 {
    sysfs_number(name, "ifindex") as u32
}

/// Frames the kernel sent out of a host interface; for a bridge port, what the bridge forwarded
/// to it.
pub fn host_tx_packets(name: &str) -> u64 {
    sysfs_number(name, "statistics/tx_packets")
}

/// Id of the XDP program attached to a host interface, in any mode, per `ip -d link show`.
pub fn xdp_prog_id(name: &str) -> Option<u32> {
    let out = must(&["ip", "-d", "link", "show", "dev", name]);
    let rest = &out[out.find("prog/xdp id ")? + "prog/xdp id ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some(digits.parse().expect("numeric XDP program id"))
}

/// `ethtool -k IFACE` inside a namespace, as feature name -> "on"/"off".
pub fn ethtool_features(ns: &str, ifname: &str) -> BTreeMap<String, String> {
    let out = must(&in_ns(ns, &["ethtool", "-k", ifname]));
    out.lines()
        .skip(1) // "Features for IFACE:"
        .filter_map(|line| {
            let (name, value) = line.trim().split_once(':')?;
            let value = value.split_whitespace().next()?;
            Some((name.to_owned(), value.to_owned()))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The topology: a bridge and containers (network namespaces with one veth each)

/// A "container": a network namespace whose `eth0` is a veth whose host side is on the bridge.
#[derive(Clone, Debug)]
pub struct Node {
    pub index: usize,
    pub netns: String,
    /// The container-side interface.
    pub ifname: String,
    /// The host-side veth, on the bridge.
    pub host_veth: String,
    pub mac: String,
    pub ipv4: String,
    pub ipv6: String,
}

impl Node {
    /// How dxdp names this endpoint on its command line: `netns:NAME`.
    pub fn spec(&self) -> String {
        format!("netns:{}", self.netns)
    }

    pub fn host_ifindex(&self) -> u32 {
        host_ifindex(&self.host_veth)
    }

    /// `ethtool -k eth0` inside the container.
    pub fn features(&self) -> BTreeMap<String, String> {
        ethtool_features(&self.netns, &self.ifname)
    }
}

/// A bridge, iptables rules that let it forward, containers on it and a dxdp pin directory, all
/// of this test's own. Dropping it removes everything in the order that works: the pin directory
/// (with `dxdp cleanup`, while the containers it may restore still exist), veths, namespaces,
/// firewall rules, the bridge.
pub struct Topology {
    pub id: String,
    pub bridge: String,
    pub nodes: Vec<Node>,
    pub dxdp: Dxdp,
    // Guards, dropped in this order.
    _pin_dir: PinDir,
    veths: Vec<LinkGuard>,
    namespaces: Vec<NetnsGuard>,
    _rules: Vec<FirewallRule>,
    _bridge: LinkGuard,
    n: u32,
}

impl Topology {
    /// A bridge with `count` containers (named `dxt-<pid>-<n>-<i>`, addressed 10.213.<n>.<i+1>/24
    /// and fd00:dd:<n>::<i+1>/64, MAC 02:dd:<n>:<pid>:00:<i+1>), able to reach each other through
    /// the bridge. Panics, having removed what it made, if any step fails.
    #[track_caller]
    pub fn new(count: usize) -> Self {
        assert!(count < 250);
        let n = next_id();
        let id = format!("dxt-{}-{n}", std::process::id());
        let pin_dir = PinDir::new(n);
        let bridge_name = iface_name();
        let bridge = LinkGuard::bridge(&bridge_name);
        let rules = vec![
            FirewallRule::accept_bridged("iptables", &bridge_name),
            FirewallRule::accept_bridged("ip6tables", &bridge_name),
        ];
        let mut topo = Self {
            id: id.clone(),
            bridge: bridge_name,
            nodes: Vec::new(),
            dxdp: Dxdp {
                pin_dir: pin_dir.path.clone(),
            },
            _pin_dir: pin_dir,
            veths: Vec::new(),
            namespaces: Vec::new(),
            _rules: rules,
            _bridge: bridge,
            n,
        };
        for i in 0..count {
            let netns = format!("{id}-{i}");
            topo.namespaces.push(NetnsGuard::create(&netns));
            let node = Node {
                index: i,
                netns,
                ifname: "eth0".to_owned(),
                host_veth: String::new(),
                mac: format!(
                    "02:dd:{:02x}:{:02x}:00:{:02x}",
                    n % 256,
                    std::process::id() % 256,
                    i + 1
                ),
                ipv4: format!("10.213.{}.{}", n % 256, i + 1),
                ipv6: format!("fd00:dd:{n:x}::{}", i + 1),
            };
            topo.nodes.push(node);
            topo.plug(i);
        }
        topo
    }

    /// Makes node `i`'s veth pair, with the node's MAC and addresses, and plugs it into the bridge.
    #[track_caller]
    fn plug(&mut self, i: usize) {
        let host = iface_name();
        let node = &self.nodes[i];
        let (ns, ifname) = (node.netns.clone(), node.ifname.clone());
        must(&[
            "ip", "link", "add", &host, "type", "veth", "peer", "name", &ifname, "netns", &ns,
        ]);
        self.veths.push(LinkGuard::adopt(&host));
        must(&["ip", "link", "set", &host, "master", &self.bridge, "up"]);
        let ip_ns = |args: &[&str]| {
            let mut argv = vec!["ip", "-n", &ns];
            argv.extend_from_slice(args);
            must(&argv);
        };
        ip_ns(&["link", "set", &ifname, "address", &node.mac]);
        ip_ns(&["addr", "add", &format!("{}/24", node.ipv4), "dev", &ifname]);
        // nodad: the address is usable at once instead of after duplicate address detection.
        let v6 = format!("{}/64", node.ipv6);
        ip_ns(&["addr", "add", &v6, "dev", &ifname, "nodad"]);
        ip_ns(&["link", "set", &ifname, "up"]);
        self.nodes[i].host_veth = host;
    }

    /// Deletes node `i`'s veth pair (as when a container's interface is torn down) and makes a
    /// new one with the same MAC and addresses, hence a new host ifindex. Returns the new node.
    #[track_caller]
    pub fn recreate_veth(&mut self, i: usize) -> Node {
        let old = self.nodes[i].host_veth.clone();
        must(&["ip", "link", "del", &old]);
        assert!(
            wait_until(Duration::from_secs(5), || !host_iface_exists(&old)),
            "{old} is still there after ip link del"
        );
        self.plug(i);
        self.nodes[i].clone()
    }

    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// Path of this topology's pin directory.
    pub fn pin_dir(&self) -> &Path {
        &self.dxdp.pin_dir
    }

    /// A path on bpffs next to (not inside) the pin directory, unique to this topology.
    pub fn scratch_pin_path(&self, what: &str) -> PathBuf {
        Path::new(BPFFS).join(format!(
            "dxdp-test-{}-{}-{what}",
            std::process::id(),
            self.n
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// The binary under test

/// `dxdp --pin-dir DIR …` as separate processes, the way users run it.
#[derive(Clone, Debug)]
pub struct Dxdp {
    pub pin_dir: PathBuf,
}

impl Dxdp {
    /// Runs `dxdp --pin-dir DIR ARGS…` whatever its exit code.
    pub fn run(&self, args: &[&str]) -> Run {
        let dir = self.pin_dir.to_string_lossy().into_owned();
        let mut argv = vec![DXDP, "--pin-dir", &dir];
        argv.extend_from_slice(args);
        run(&argv)
    }

    /// `dxdp link A B --datapath KIND`, which must succeed.
    #[track_caller]
    pub fn link(&self, a: &Node, b: &Node, datapath: &str) -> Run {
        let run = self.run(&["link", &a.spec(), &b.spec(), "--datapath", datapath]);
        run.assert_success();
        run
    }

    /// `dxdp unlink A B`, which must succeed.
    #[track_caller]
    pub fn unlink(&self, a: &Node, b: &Node) -> Run {
        let run = self.run(&["unlink", &a.spec(), &b.spec()]);
        run.assert_success();
        run
    }

    /// `dxdp status --json`, parsed.
    #[track_caller]
    pub fn status(&self) -> Status {
        let run = self.run(&["status", "--json"]);
        run.assert_success();
        serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("`dxdp status --json` printed invalid JSON ({e}): {run}"))
    }

    /// Names in `DIR/links/` (attachment pins such as `tc-12`); empty if there is no such dir.
    pub fn link_pins(&self) -> Vec<String> {
        let mut names: Vec<String> = match std::fs::read_dir(self.pin_dir.join("links")) {
            Ok(entries) => entries
                .map(|e| {
                    e.expect("readdir")
                        .file_name()
                        .to_string_lossy()
                        .into_owned()
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("cannot list {}/links: {e}", self.pin_dir.display()),
        };
        names.sort();
        names
    }
}

/// The output of `dxdp status --json`.
#[derive(Clone, Debug, Deserialize)]
pub struct Status {
    pub pin_dir: String,
    pub links: Vec<LinkStatus>,
    pub interfaces: Vec<InterfaceStatus>,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct LinkStatus {
    pub low_ifindex: u32,
    pub high_ifindex: u32,
    pub low_name: String,
    pub high_name: String,
    pub network: String,
    pub datapath: String,
    pub origin: String,
    pub created_unix_secs: u64,
    #[serde(default)]
    pub low_to_high: Traffic,
    #[serde(default)]
    pub high_to_low: Traffic,
}

/// Frames redirected over one direction of a link.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Traffic {
    pub packets: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct InterfaceStatus {
    pub ifindex: u32,
    pub datapath: String,
    pub counters: Counters,
}

/// One managed interface's counters, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Counters {
    pub redirected_packets: u64,
    pub redirected_bytes: u64,
    pub passed_packets: u64,
    pub passed_bytes: u64,
    pub fallback_packets: u64,
    pub spoofed_packets: u64,
}

impl Counters {
    /// How much each counter grew since `before`; panics if one went backwards.
    #[track_caller]
    pub fn since(&self, before: &Counters) -> Counters {
        let d = |now: u64, then: u64, what: &str| {
            now.checked_sub(then).unwrap_or_else(|| {
                panic!("counter {what} went backwards: {then} -> {now} ({before:?} -> {self:?})")
            })
        };
        Counters {
            redirected_packets: d(
                self.redirected_packets,
                before.redirected_packets,
                "redirected_packets",
            ),
            redirected_bytes: d(
                self.redirected_bytes,
                before.redirected_bytes,
                "redirected_bytes",
            ),
            passed_packets: d(self.passed_packets, before.passed_packets, "passed_packets"),
            passed_bytes: d(self.passed_bytes, before.passed_bytes, "passed_bytes"),
            fallback_packets: d(
                self.fallback_packets,
                before.fallback_packets,
                "fallback_packets",
            ),
            spoofed_packets: d(
                self.spoofed_packets,
                before.spoofed_packets,
                "spoofed_packets",
            ),
        }
    }
}

impl Status {
    pub fn interface(&self, ifindex: u32) -> Option<&InterfaceStatus> {
        self.interfaces.iter().find(|i| i.ifindex == ifindex)
    }

    /// Counters of a managed interface; panics if it is not managed.
    #[track_caller]
    pub fn counters(&self, ifindex: u32) -> Counters {
        self.interface(ifindex)
            .unwrap_or_else(|| panic!("ifindex {ifindex} is not managed: {self:#?}"))
            .counters
    }

    /// The link between two host ifindexes, in either order.
    pub fn link_between(&self, x: u32, y: u32) -> Option<&LinkStatus> {
        let (low, high) = (x.min(y), x.max(y));
        self.links
            .iter()
            .find(|l| l.low_ifindex == low && l.high_ifindex == high)
    }

    /// Whether any link or managed interface refers to `ifindex`.
    pub fn mentions(&self, ifindex: u32) -> bool {
        self.interface(ifindex).is_some()
            || self
                .links
                .iter()
                .any(|l| l.low_ifindex == ifindex || l.high_ifindex == ifindex)
    }

    /// Panics unless there is no link and no managed interface.
    #[track_caller]
    pub fn assert_empty(&self) {
        assert!(
            self.links.is_empty() && self.interfaces.is_empty(),
            "expected no links and no managed interfaces: {self:#?}"
        );
    }
}

pub fn now_unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

// ---------------------------------------------------------------------------------------------
// Traffic

/// What `ping -q` reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PingReport {
    pub transmitted: u64,
    pub received: u64,
}

/// `ping -c COUNT -i 0.01 -W 1` from a namespace to `addr` (IPv4 or IPv6), bounded by a
/// deadline; returns what was sent and answered, even if not everything was.
pub fn ping(ns: &str, addr: &str, count: u32) -> PingReport {
    let count_s = count.to_string();
    let deadline = (count / 50 + 5).to_string();
    let argv = in_ns(
        ns,
        &[
            "ping", "-q", "-n", "-c", &count_s, "-i", "0.01", "-W", "1", "-w", &deadline, addr,
        ],
    );
    let run = run_for(&argv, Duration::from_secs(u64::from(count / 50) + 15));
    let stats = run
        .stdout
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("no statistics from ping: {run}"));
    let number_before = |word: &str| -> u64 {
        let head = &stats[..stats
            .find(word)
            .unwrap_or_else(|| panic!("{word:?} missing in {stats:?}"))];
        head.trim_end()
            .rsplit([' ', ','])
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("cannot parse {stats:?}"))
    };
    PingReport {
        transmitted: number_before(" packets transmitted"),
        received: number_before(" received"),
    }
}

/// Pings and panics unless every echo request of `count` was answered.
#[track_caller]
pub fn assert_ping(from: &Node, addr: &str, count: u32) {
    let report = ping(&from.netns, addr, count);
    assert_eq!(
        report,
        PingReport {
            transmitted: u64::from(count),
            received: u64::from(count),
        },
        "ping from {} to {addr}",
        from.netns
    );
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// The figures of one iperf3 run, from the client's `--json` report.
#[derive(Clone, Debug)]
pub struct IperfReport {
    /// Payload bytes the sending side wrote (the server's with `reverse`).
    pub sent_bytes: u64,
    pub received_bytes: u64,
    /// Throughput measured at the receiver.
    pub bits_per_second: f64,
    /// UDP: datagrams sent, lost, and the loss in percent.
    pub packets: u64,
    pub lost_packets: u64,
    pub lost_percent: f64,
}

/// Runs one iperf3 test between two nodes: a one-off server in `server`'s namespace, and a client
/// in `client`'s that connects to `addr`. TCP runs 2 s, UDP 1 s at 100 Mbit/s. With `reverse`
/// (`-R`) the server sends. Panics unless iperf3 succeeds and reports a throughput above zero.
#[track_caller]
pub fn iperf3(
    client: &Node,
    server: &Node,
    addr: &str,
    proto: Proto,
    reverse: bool,
) -> IperfReport {
    let port = IPERF_PORT.to_string();
    let mut srv = Background::spawn(&in_ns(&server.netns, &["iperf3", "-s", "-1", "-p", &port]));
    let filter = format!("sport = :{port}");
    let listening = wait_until(Duration::from_secs(5), || {
        !must(&in_ns(&server.netns, &["ss", "-Hltn", &filter]))
            .trim()
            .is_empty()
    });
    assert!(
        listening,
        "iperf3 server in {} did not listen",
        server.netns
    );
    let mut args = vec!["iperf3", "-c", addr, "-p", &port, "--json"];
    match proto {
        Proto::Tcp => args.extend(["-t", "2"]),
        Proto::Udp => args.extend(["-u", "-b", "100M", "-t", "1"]),
    }
    if reverse {
        args.push("-R");
    }
    let run = run_for(&in_ns(&client.netns, &args), Duration::from_secs(20));
    srv.wait_timeout(Duration::from_secs(3));
    let json: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("iperf3 printed no JSON ({e}): {run}"));
    assert!(
        run.success() && json.get("error").is_none(),
        "iperf3 {proto:?} from {} to {addr} failed: {run}",
        client.netns
    );
    let end = &json["end"];
    let num = |v: &serde_json::Value, what: &str| -> f64 {
        v.as_f64()
            .unwrap_or_else(|| panic!("iperf3 report lacks {what}: {}", json["end"]))
    };
    let report = match proto {
        Proto::Tcp => IperfReport {
            sent_bytes: num(&end["sum_sent"]["bytes"], "sum_sent.bytes") as u64,
            received_bytes: num(&end["sum_received"]["bytes"], "sum_received.bytes") as u64,
            bits_per_second: num(
                &end["sum_received"]["bits_per_second"],
                "sum_received.bits_per_second",
            ),
            packets: 0,
            lost_packets: 0,
            lost_percent: 0.0,
        },
        Proto::Udp => {
            // `sum` holds the sender's datagram count and the receiver's loss.
            let sum = &end["sum"];
            let received = end.get("sum_received").unwrap_or(sum);
            IperfReport {
                sent_bytes: num(&end.get("sum_sent").unwrap_or(sum)["bytes"], "bytes") as u64,
                received_bytes: num(&received["bytes"], "bytes") as u64,
                bits_per_second: num(&received["bits_per_second"], "bits_per_second"),
                packets: num(&sum["packets"], "sum.packets") as u64,
                lost_packets: num(&sum["lost_packets"], "sum.lost_packets") as u64,
                lost_percent: num(&sum["lost_percent"], "sum.lost_percent"),
            }
        }
    };
    assert!(
        report.bits_per_second > 0.0 && report.sent_bytes > 0,
        "iperf3 {proto:?} from {} to {addr} moved nothing: {report:?}",
        client.netns
    );
    report
}

// ---------------------------------------------------------------------------------------------
// A foreign XDP program

/// A minimal XDP program (`return XDP_PASS`) loaded straight through bpf(2), as some other tool
/// would, and pinned at `path` so that `ip link set … xdp pinned PATH` can attach it. The pin is
/// removed on drop (or earlier with [`PinnedObject::unpin`]); an attachment keeps the program
/// alive after that.
pub fn load_foreign_xdp(path: &Path, name: &str) -> PinnedObject {
    const BPF_PROG_TYPE_XDP: u32 = 6;
    const XDP_PASS: i32 = 2;
    load_constant_program(path, name, BPF_PROG_TYPE_XDP, XDP_PASS)
}

/// A minimal tc program that lets every frame go on (`return TCX_NEXT`), pinned at `path`: what
/// an older dxdp's program looks like to a newer one (same type, another tag).
pub fn load_passing_tc(path: &Path, name: &str) -> PinnedObject {
    const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
    const TCX_NEXT: i32 = -1;
    load_constant_program(path, name, BPF_PROG_TYPE_SCHED_CLS, TCX_NEXT)
}

/// Points the pinned bpf_link at `link_pin` to the program pinned at `prog_pin`
/// (BPF_LINK_UPDATE), as a running attachment is swapped in place.
pub fn update_pinned_link(link_pin: &Path, prog_pin: &Path) {
    #[repr(C)]
    struct LinkUpdate {
        link_fd: u32,
        new_prog_fd: u32,
        flags: u32,
        old_prog_fd: u32,
    }
    const BPF_LINK_UPDATE: libc::c_long = 29;
    let link = bpf_obj_get(link_pin);
    let prog = bpf_obj_get(prog_pin);
    let attr = LinkUpdate {
        link_fd: std::os::fd::AsRawFd::as_raw_fd(&link) as u32,
        new_prog_fd: std::os::fd::AsRawFd::as_raw_fd(&prog) as u32,
        flags: 0,
        old_prog_fd: 0,
    };
    let what = format!("BPF_LINK_UPDATE {}", link_pin.display());
    // SAFETY: attr is a valid prefix of union bpf_attr for BPF_LINK_UPDATE.
    unsafe { sys_bpf(BPF_LINK_UPDATE, &attr, &what) };
}

/// bpf(2) with `attr` as the command's part of union bpf_attr; panics naming `what` on failure.
///
/// # Safety
/// `attr` must be a `#[repr(C)]` prefix of union bpf_attr for `cmd`, and every pointer in it
/// valid for the call.
unsafe fn sys_bpf<T>(cmd: libc::c_long, attr: &T, what: &str) -> libc::c_long {
    // SAFETY: the caller vouches for attr; its size is passed along with it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *const T,
            std::mem::size_of::<T>(),
        )
    };
    assert!(rc >= 0, "{what}: {}", std::io::Error::last_os_error());
    rc
}

#[repr(C)]
struct ObjPath {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

/// An fd for the object pinned at `path` (BPF_OBJ_GET).
fn bpf_obj_get(path: &Path) -> OwnedFd {
    const BPF_OBJ_GET: libc::c_long = 7;
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    let attr = ObjPath {
        pathname: c_path.as_ptr() as u64,
        bpf_fd: 0,
        file_flags: 0,
    };
    let what = format!("BPF_OBJ_GET {}", path.display());
    // SAFETY: attr is a valid prefix of union bpf_attr for BPF_OBJ_GET; c_path outlives the call.
    let fd = unsafe { sys_bpf(BPF_OBJ_GET, &attr, &what) };
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// A two-instruction program of `prog_type` returning `verdict`, loaded through bpf(2) and
/// pinned at `path`.
fn load_constant_program(path: &Path, name: &str, prog_type: u32, verdict: i32) -> PinnedObject {
    #[repr(C)]
    struct Insn {
        code: u8,
        regs: u8,
        off: i16,
        imm: i32,
    }
    #[repr(C)]
    struct ProgLoad {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        prog_name: [u8; 16],
        prog_ifindex: u32,
        expected_attach_type: u32,
    }
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_OBJ_PIN: libc::c_long = 6;

    let insns = [
        // r0 = verdict (BPF_ALU64 | BPF_MOV | BPF_K)
        Insn {
            code: 0xb7,
            regs: 0,
            off: 0,
            imm: verdict,
        },
        // exit (BPF_JMP | BPF_EXIT)
        Insn {
            code: 0x95,
            regs: 0,
            off: 0,
            imm: 0,
        },
    ];
    let license = c"GPL";
    let mut prog_name = [0u8; 16];
    assert!(name.len() < 16);
    prog_name[..name.len()].copy_from_slice(name.as_bytes());
    let attr = ProgLoad {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
        prog_name,
        prog_ifindex: 0,
        expected_attach_type: 0,
    };
    // SAFETY: attr is a valid prefix of union bpf_attr for BPF_PROG_LOAD; the pointers in it
    // (instructions, license) outlive the call.
    let fd = unsafe { sys_bpf(BPF_PROG_LOAD, &attr, "BPF_PROG_LOAD") };
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    let pin = ObjPath {
        pathname: c_path.as_ptr() as u64,
        bpf_fd: std::os::fd::AsRawFd::as_raw_fd(&fd) as u32,
        file_flags: 0,
    };
    let what = format!("BPF_OBJ_PIN {}", path.display());
    // SAFETY: attr is a valid prefix of union bpf_attr for BPF_OBJ_PIN; c_path outlives the call.
    unsafe { sys_bpf(BPF_OBJ_PIN, &pin, &what) };
    PinnedObject {
        path: path.to_path_buf(),
    }
}
