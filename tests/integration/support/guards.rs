//! Guards that undo on drop, also while a failed assertion unwinds: network namespaces, links
//! (bridges, veths), iptables rules, pin directories and pinned objects. A guard's drop never
//! panics: a cleanup step that fails is reported on stderr and the next step still runs.

use std::path::{Path, PathBuf};

use super::{
    dxdp::{BPFFS, dxdp_bin},
    host::host_iface_exists,
    process::{must, quietly},
};

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

/// One rule inserted at the head of an iptables/ip6tables chain, of the host's or of another
/// network namespace's; exactly that rule is deleted on drop (`-D` removes the first rule that
/// matches the same specification).
pub struct FirewallRule {
    /// `nsenter --net=NS` for a namespace's rule; empty for the host's.
    within: Vec<String>,
    tool: &'static str,
    chain: String,
    spec: Vec<String>,
}

impl FirewallRule {
    #[track_caller]
    pub fn insert(tool: &'static str, chain: &str, spec: &[&str]) -> Self {
        Self::insert_within(Vec::new(), tool, chain, spec)
    }

    /// [`FirewallRule::insert`] inside the network namespace at `netns` (an overlay network's
    /// sandbox, say).
    #[track_caller]
    pub fn insert_in(netns: &Path, tool: &'static str, chain: &str, spec: &[&str]) -> Self {
        let within = vec!["nsenter".to_owned(), format!("--net={}", netns.display())];
        Self::insert_within(within, tool, chain, spec)
    }

    #[track_caller]
    fn insert_within(within: Vec<String>, tool: &'static str, chain: &str, spec: &[&str]) -> Self {
        let rule = Self {
            within,
            tool,
            chain: chain.to_owned(),
            spec: spec.iter().map(|s| (*s).to_owned()).collect(),
        };
        must(&rule.argv("-I"));
        rule
    }

    /// `[nsenter --net=NS] TOOL -w OP CHAIN SPEC…`.
    fn argv(&self, op: &str) -> Vec<String> {
        let mut argv = self.within.clone();
        argv.extend([
            self.tool.to_owned(),
            "-w".into(),
            op.into(),
            self.chain.clone(),
        ]);
        argv.extend(self.spec.iter().cloned());
        argv
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
        quietly(&self.argv("-D"));
    }
}

/// A built-in chain's policy set for a test (`ip6tables -P FORWARD DROP`, as Docker 28 leaves
/// it), and put back exactly as found on drop. A policy that already is the wanted one is left
/// alone, and then not touched on drop either: other tests on the host rely on it.
pub struct ChainPolicy {
    tool: &'static str,
    chain: String,
    /// The policy found, where this guard changed it.
    changed_from: Option<String>,
}

impl ChainPolicy {
    #[track_caller]
    pub fn set(tool: &'static str, chain: &str, policy: &str) -> Self {
        let found = Self::current(tool, chain);
        let changed_from = (found != policy).then(|| {
            must(&[tool, "-w", "-P", chain, policy]);
            found
        });
        Self {
            tool,
            chain: chain.to_owned(),
            changed_from,
        }
    }

    /// The policy `TOOL -S CHAIN` prints first: `-P CHAIN POLICY`.
    #[track_caller]
    pub fn current(tool: &str, chain: &str) -> String {
        let rules = must(&[tool, "-w", "-S", chain]);
        rules
            .lines()
            .find_map(|l| l.strip_prefix(&format!("-P {chain} ")))
            .unwrap_or_else(|| panic!("{tool} -S {chain} printed no policy: {rules}"))
            .trim()
            .to_owned()
    }
}

impl Drop for ChainPolicy {
    fn drop(&mut self) {
        if let Some(policy) = &self.changed_from {
            quietly(&[self.tool, "-w", "-P", &self.chain, policy]);
        }
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
        quietly(&[dxdp_bin().as_str(), "--pin-dir", &dir, "cleanup"]);
        if self.path.exists() {
            eprintln!("cleanup: `dxdp cleanup` left {dir} behind; removing it");
            if let Err(e) = std::fs::remove_dir_all(&self.path) {
                eprintln!("cleanup: cannot remove {dir}: {e}");
            }
        }
    }
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

/// Files a test wrote, removed on drop (also when it fails).
pub struct Files(pub Vec<std::path::PathBuf>);

impl Drop for Files {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// `net.netfilter.NAME` set for a test and put back on drop.
pub struct NetfilterSysctl {
    path: PathBuf,
    was: String,
}

impl NetfilterSysctl {
    pub fn set(name: &str, value: &str) -> Self {
        let path = PathBuf::from(format!("/proc/sys/net/netfilter/{name}"));
        let was = std::fs::read_to_string(&path).expect("read the sysctl");
        std::fs::write(&path, value).expect("write the sysctl");
        Self { path, was }
    }
}

impl Drop for NetfilterSysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, self.was.trim());
    }
}
