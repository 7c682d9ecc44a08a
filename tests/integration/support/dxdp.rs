//! The binary under test: `dxdp --pin-dir DIR …` run as users run it, and what `dxdp status
//! --json` reports.

use std::{
    path::PathBuf,
    time::{SystemTime, UNIX_EPOCH},
};

use serde::Deserialize;

use super::{
    process::{Run, run},
    topology::Node,
};

/// The binary under test, built by cargo for this test run.
pub const DXDP: &str = env!("CARGO_BIN_EXE_dxdp");

/// The binary [`Dxdp::run`] runs: `DXDP_BIN` if set (another build, e.g. an older commit's, whose
/// programs the differential harness holds against Docker's path), else [`DXDP`].
pub fn dxdp_bin() -> String {
    std::env::var("DXDP_BIN").unwrap_or_else(|_| DXDP.to_owned())
}

/// Where bpffs is mounted; every pin directory of the tests is made under it
/// (`/sys/fs/bpf/dxdp-test-<pid>-<n>`).
pub const BPFFS: &str = "/sys/fs/bpf";

/// `dxdp --pin-dir DIR …` as separate processes, the way users run it.
#[derive(Clone, Debug)]
pub struct Dxdp {
    pub pin_dir: PathBuf,
}

impl Dxdp {
    /// Runs `dxdp --pin-dir DIR ARGS…` whatever its exit code.
    pub fn run(&self, args: &[&str]) -> Run {
        let dir = self.pin_dir.to_string_lossy().into_owned();
        let bin = dxdp_bin();
        let mut argv = vec![bin.as_str(), "--pin-dir", &dir];
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
    pub bypasses_firewall: bool,
    /// `ipv4`, `ipv6`: what rides the link; the other family stays on the bridge.
    #[serde(default)]
    pub families: Vec<String>,
    pub created_unix_secs: u64,
    #[serde(default)]
    pub low_to_high: Traffic,
    #[serde(default)]
    pub high_to_low: Traffic,
    /// The overlay sandbox whose veths the link joins; `None` on the host's bridges.
    #[serde(default)]
    pub sandbox: Option<String>,
    /// `live`, or `gone` when a veth of the link no longer exists.
    #[serde(default)]
    pub state: Option<String>,
    /// The host-side veths (for a task of another node, the VXLAN device it is reached
    /// through); `None` where gone.
    #[serde(default)]
    pub low_ifname: Option<String>,
    #[serde(default)]
    pub high_ifname: Option<String>,
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
    /// The overlay sandbox the veth is in; `None` for the host's.
    #[serde(default)]
    pub sandbox: Option<String>,
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

/// The link between the containers (or endpoints) named `a` and `b`, in either order.
pub fn link_between<'s>(status: &'s Status, a: &str, b: &str) -> Option<&'s LinkStatus> {
    status
        .links
        .iter()
        .find(|l| (l.low_name == a && l.high_name == b) || (l.low_name == b && l.high_name == a))
}
