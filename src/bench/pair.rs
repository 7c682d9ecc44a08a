//! The pair's link while the bench switches it between configurations, and putting it back.
//!
//! The bench changes real state that other things rely on (a link made by hand or by `watch`,
//! the loopback interface of A), so everything it changes is recorded here and undone when
//! this is dropped: after success, after an error and after Ctrl-C alike.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::{
    Config, Step,
    measure::{in_netns, run_to_end},
};
use crate::{
    choice::{Kind, Origin},
    datapath::{Capacity, Datapath, LinkRecord, LinkRequest},
    endpoint::Endpoint,
    family::Families,
    netlink,
    netns::NetnsPath,
};

/// How the pair was linked when the bench started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundLink {
    pub datapath: Kind,
    pub origin: Origin,
    pub network: String,
    pub bypasses_firewall: bool,
    pub families: Families,
}

pub struct PairState {
    pin_dir: PathBuf,
    capacity: Capacity,
    a: Endpoint,
    b: Endpoint,
    network: String,
    /// `--bypass-firewall`: the bench's own links are recorded as bypassing the rules, so that
    /// a watch does not take them away mid-measurement.
    bypass_firewall: bool,
    /// The families the rules leave open: the bench's own links carry only those.
    families: Families,
    found: Option<FoundLink>,
    /// A pin directory the bench had to create is removed again if it ends up holding nothing.
    pin_dir_existed: bool,
    /// A's loopback interface, brought up for the loopback configuration.
    lo_raised: Option<NetnsPath>,
    restored: bool,
}

impl PairState {
    /// Records how the pair is linked now; nothing is changed yet.
    pub fn snapshot(
        pin_dir: &Path,
        capacity: Capacity,
        a: Endpoint,
        b: Endpoint,
        network: String,
        bypass_firewall: bool,
        families: Families,
    ) -> Result<Self> {
        let pin_dir_existed = pin_dir.exists();
        let mut state = Self {
            pin_dir: pin_dir.to_path_buf(),
            capacity,
            a,
            b,
            network,
            bypass_firewall,
            families,
            found: None,
            pin_dir_existed,
            lo_raised: None,
            restored: false,
        };
        if pin_dir_existed {
            let mut datapath = state.open()?;
            state.found = state.current(&mut datapath)?.map(|rec| FoundLink {
                datapath: rec.datapath,
                origin: rec.origin,
                network: rec.network,
                bypasses_firewall: rec.bypasses_firewall,
                families: rec.families,
            });
        }
        Ok(state)
    }

    pub fn found(&self) -> Option<&FoundLink> {
        self.found.as_ref()
    }

    fn open(&self) -> Result<Datapath> {
        Datapath::open(&self.pin_dir, self.capacity)
    }

    fn key(&self) -> (u32, u32) {
        let (x, y) = (self.a.host_ifindex, self.b.host_ifindex);
        (x.min(y), x.max(y))
    }

    fn current(&self, datapath: &mut Datapath) -> Result<Option<LinkRecord>> {
        let (low, high) = self.key();
        Ok(datapath
            .links()?
            .into_iter()
            .find(|l| l.low_ifindex == low && l.high_ifindex == high))
    }

    /// Why the pair cannot be linked with `kind` for a while: a veth takes one datapath, so
    /// another link of A or B with the other datapath rules this one out.
    pub fn conflict(&self, kind: Kind) -> Result<Option<String>> {
        if !self.pin_dir_existed {
            return Ok(None);
        }
        let (low, high) = self.key();
        let mut datapath = self.open()?;
        for link in datapath.links()? {
            if (link.low_ifindex, link.high_ifindex) == (low, high) || link.datapath == kind {
                continue;
            }
            for ep in [&self.a, &self.b] {
                if link.involves(ep.host_ifindex) {
                    return Ok(Some(format!(
                        "{} ({}) is also linked to {} with the {} datapath, and a veth takes \
                         one datapath",
                        ep.label,
                        ep.host_ifname,
                        if link.low_ifindex == ep.host_ifindex {
                            &link.high_name
                        } else {
                            &link.low_name
                        },
                        link.datapath
                    )));
                }
            }
        }
        Ok(None)
    }

    /// Links the pair with `want`, or unlinks it for `None`.
    pub(crate) fn switch(&mut self, want: Option<Kind>) -> Result<()> {
        self.set(want.map(|datapath| FoundLink {
            datapath,
            origin: Origin::Manual,
            network: self.network.clone(),
            bypasses_firewall: self.bypass_firewall,
            families: self.families,
        }))
    }

    fn set(&mut self, want: Option<FoundLink>) -> Result<()> {
        if want.is_none() && !self.pin_dir.exists() {
            return Ok(());
        }
        let mut datapath = self.open()?;
        let current = self.current(&mut datapath)?;
        if let (Some(cur), Some(want)) = (&current, &want)
            && cur.datapath == want.datapath
            && cur.origin == want.origin
            && cur.network == want.network
            && cur.bypasses_firewall == want.bypasses_firewall
            && cur.families == want.families
        {
            return Ok(());
        }
        if let Some(cur) = &current {
            datapath
                .remove(cur.low_ifindex, cur.high_ifindex)
                .context("cannot unlink the pair")?;
        }
        if let Some(want) = want {
            let kind = want.datapath;
            let host = netlink::interfaces(&NetnsPath::host())?;
            datapath
                .install(
                    &LinkRequest {
                        a: &self.a,
                        b: &self.b,
                        kind,
                        origin: want.origin,
                        network: &want.network,
                        bypass_firewall: want.bypasses_firewall,
                        families: want.families,
                    },
                    &host,
                )
                .with_context(|| format!("cannot link the pair with the {kind} datapath"))?;
        }
        Ok(())
    }

    /// Packets the datapath has seen on both veths (redirected or passed to the bridge), zero
    /// when neither is managed.
    pub fn seen(&self) -> Result<u64> {
        self.count(|c| c.redirected_packets + c.passed_packets)
    }

    /// Packets redirected from either veth.
    pub(crate) fn redirected(&self) -> Result<u64> {
        self.count(|c| c.redirected_packets)
    }

    /// Adds what the datapath redirected since `before` (a count of [`Self::redirected`]) to
    /// `total`, for a configuration with a datapath; one that redirected nothing is told: the
    /// numbers measured `at` are the bridge's.
    pub(crate) fn tally_redirected(
        &self,
        config: Config,
        before: u64,
        total: &mut Option<u64>,
        at: &str,
        tell: &mut impl FnMut(Step<'_>),
    ) -> Result<()> {
        if config.datapath().is_none() {
            return Ok(());
        }
        let redirected = self.redirected()?.saturating_sub(before);
        *total.get_or_insert(0) += redirected;
        if redirected == 0 {
            tell(Step::Note(&format!(
                "{at}: warning: the {config} datapath redirected no packets, so these numbers \
                 are the bridge's"
            )));
        }
        Ok(())
    }

    fn count(&self, pick: impl Fn(&crate::datapath::InterfaceCounters) -> u64) -> Result<u64> {
        if !self.pin_dir.exists() {
            return Ok(0);
        }
        let mut datapath = self.open()?;
        let mut total = 0;
        for ifindex in [self.a.host_ifindex, self.b.host_ifindex] {
            total += datapath.counters(ifindex)?.as_ref().map_or(0, &pick);
        }
        Ok(total)
    }

    /// Brings up `lo` in A's namespace if it is down (as in a fresh `ip netns add`); it goes
    /// down again on restore.
    pub(crate) fn ensure_loopback_up(&mut self) -> Result<()> {
        if self.lo_raised.is_some() {
            return Ok(());
        }
        let ns = &self.a.netns;
        let lo_up = netlink::interfaces(ns)?
            .iter()
            .any(|i| i.name == "lo" && i.up);
        if !lo_up {
            set_lo(ns, "up")?;
            self.lo_raised = Some(ns.clone());
        }
        Ok(())
    }

    /// Puts back the link found at the start (same datapath, origin and network), and the
    /// loopback interface. Idempotent.
    pub fn restore(&mut self) -> Result<()> {
        if self.restored {
            return Ok(());
        }
        let mut result = self.set(self.found.clone());
        if result.is_ok() && !self.pin_dir_existed && self.pin_dir.exists() {
            result = self.remove_pin_dir_if_empty();
        }
        if let Some(ns) = self.lo_raised.take()
            && let Err(err) = set_lo(&ns, "down")
        {
            result = result.and(Err(err));
        }
        self.restored = result.is_ok();
        result
    }

    fn remove_pin_dir_if_empty(&self) -> Result<()> {
        let mut datapath = self.open()?;
        // Someone else may have linked something meanwhile; then the directory is theirs too.
        if datapath.links()?.is_empty() && datapath.interfaces()?.is_empty() {
            datapath.purge()?;
        }
        Ok(())
    }
}

impl Drop for PairState {
    fn drop(&mut self) {
        if !self.restored
            && let Err(err) = self.restore()
        {
            let how = match &self.found {
                Some(f) => format!(
                    "dxdp link {} {} --datapath {}",
                    self.a.label, self.b.label, f.datapath
                ),
                None => format!("dxdp unlink {} {}", self.a.label, self.b.label),
            };
            eprintln!("dxdp: error: could not put the pair back as it was: {err:#}; run `{how}`");
        }
    }
}

fn set_lo(ns: &NetnsPath, updown: &str) -> Result<()> {
    let mut cmd = in_netns(ns.path(), "ip");
    cmd.args(["link", "set", "lo", updown]);
    let out = run_to_end(cmd, std::time::Duration::from_secs(10), "ip link set lo")?;
    if !out.status.success() {
        bail!("ip link set lo {updown} in {ns}: {}", out.stderr.trim());
    }
    Ok(())
}
