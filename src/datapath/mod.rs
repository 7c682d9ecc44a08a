//! The only code that talks to the kernel's BPF objects: loading and adopting the pinned maps and
//! programs, attaching them, and keeping the maps consistent with the links that exist.
mod attach;
pub mod btf_layout;
mod choice;
mod egress;
mod fixups;
pub mod kfunc;
mod pins;
mod ports;
mod remote;
mod state;

use std::{
    fs::File,
    path::Path,
    time::{SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result, bail};
use aya::{Ebpf, EbpfLoader};
use dxdp_common::{
    Counters, DATAPATH_TC, DATAPATH_XDP, LinkMeta, LinkMetaKey, NAME_LEN, is_remote_endpoint,
};
use nix::fcntl::{Flock, FlockArg};
use tracing::{info, warn};

pub use choice::{TC_SINCE, XDP_SINCE, has as kernel_has};
pub use egress::{EgressPlan, EgressRecord, EgressUnavailable, egress_available};
pub use pins::{Pins, check_ancestors, on_bpffs};
pub use ports::{
    ConnectionTables, ExistingConnections, ExposedPort, Exposure, ExposurePlan, PortMapping,
    TableFill, TablePressure,
};
pub use state::Capacity;

use crate::{
    choice::{Kind, Origin},
    endpoint::Endpoint,
    family::Families,
    netlink::Interface,
};

/// The eBPF object built from `ebpf/programs` by build.rs.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dxdp-ebpf"));

pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/dxdp";

/// A managed veth's attachment, as [`Datapath::attachments`] finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attachment {
    /// dxdp's program is attached and its attachment pinned.
    Attached,
    /// The veth is gone (its container stopped); its entries remain until a pass or command
    /// collects them.
    VethGone,
    /// dxdp's program is not attached: the veth's frames take the bridge.
    Detached,
    /// Attached, but its pin is gone: nothing of dxdp's would ever detach it.
    Unpinned,
}

/// How the pinned maps spell a link's datapath: the codes the eBPF programs read.
impl Kind {
    pub(crate) const fn code(self) -> u8 {
        match self {
            Kind::Tc => DATAPATH_TC,
            Kind::Xdp => DATAPATH_XDP,
        }
    }

    pub(crate) const fn from_code(code: u8) -> Option<Self> {
        match code {
            DATAPATH_TC => Some(Kind::Tc),
            DATAPATH_XDP => Some(Kind::Xdp),
            _ => None,
        }
    }
}

/// How the pinned maps spell who made a link.
impl Origin {
    const fn code(self) -> u8 {
        match self {
            Origin::Manual => dxdp_common::ORIGIN_MANUAL,
            Origin::Watch => dxdp_common::ORIGIN_WATCH,
        }
    }

    const fn from_code(code: u8) -> Self {
        if code == dxdp_common::ORIGIN_WATCH {
            Origin::Watch
        } else {
            Origin::Manual
        }
    }
}

/// A link as the pinned state records it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LinkRecord {
    pub low_ifindex: u32,
    pub high_ifindex: u32,
    pub low_name: String,
    pub high_name: String,
    pub network: String,
    pub datapath: Kind,
    pub origin: Origin,
    /// Made with the firewall bypassed on purpose; any other link is held to the rules.
    pub bypasses_firewall: bool,
    /// The families the link carries; the others stay on the bridge (a rule may drop them there).
    pub families: Families,
    pub created_unix_secs: u64,
    /// Frames redirected from the low to the high endpoint, and back.
    pub low_to_high: Traffic,
    pub high_to_low: Traffic,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Traffic {
    pub packets: u64,
    pub bytes: u64,
}

impl LinkRecord {
    pub(crate) fn involves(&self, ifindex: u32) -> bool {
        self.low_ifindex == ifindex || self.high_ifindex == ifindex
    }

    /// Whether the link was made between endpoints named `a` and `b`, in either order.
    pub fn between_names(&self, a: &str, b: &str) -> bool {
        (self.low_name == a && self.high_name == b) || (self.low_name == b && self.high_name == a)
    }
}

/// Sum over CPUs of one managed interface's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct InterfaceCounters {
    pub redirected_packets: u64,
    pub redirected_bytes: u64,
    pub passed_packets: u64,
    pub passed_bytes: u64,
    pub fallback_packets: u64,
    pub spoofed_packets: u64,
}

impl From<Counters> for InterfaceCounters {
    fn from(c: Counters) -> Self {
        Self {
            redirected_packets: c.redirected_packets,
            redirected_bytes: c.redirected_bytes,
            passed_packets: c.passed_packets,
            passed_bytes: c.passed_bytes,
            fallback_packets: c.fallback_packets,
            spoofed_packets: c.spoofed_packets,
        }
    }
}

/// What a link request asks for.
pub struct LinkRequest<'a> {
    pub a: &'a Endpoint,
    pub b: &'a Endpoint,
    pub kind: Kind,
    pub origin: Origin,
    pub network: &'a str,
    /// The operator chose to bypass the firewall for this pair; recorded with the link, so that
    /// whoever re-checks links later knows which ones rules must not take away.
    pub bypass_firewall: bool,
    /// The families the link carries: those the firewall accepts on the bridge.
    pub families: Families,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Installed {
    New,
    AlreadyThere,
    /// It was there, carrying other families.
    FamiliesChanged,
}

/// The pinned datapath, opened under an exclusive lock so that concurrent `dxdp` processes
/// apply their changes one at a time.
pub struct Datapath {
    ebpf: Ebpf,
    pins: Pins,
    _lock: Flock<File>,
}

/// The datapath between two passes of the watch: loaded (parsing the object, its BTF and the
/// pins took about 30 ms at each open), but not locked, so that `dxdp link` and the other
/// commands can take the lock meanwhile.
pub struct Unlocked {
    ebpf: Ebpf,
    pins: Pins,
    /// The pinned maps as they were when loaded: a `dxdp cleanup` (or a new `link` after one)
    /// meanwhile replaces them, and the loaded object would then write to maps nobody reads.
    identity: Vec<(std::ffi::OsString, u64)>,
}

/// Takes the pin directory's lock, waiting for another `dxdp` process to let it go.
fn lock_exclusive(dir: File, root: &Path) -> Result<Flock<File>> {
    Flock::lock(dir, FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .with_context(|| format!("cannot lock {}", root.display()))
}

/// Each pinned map's name and inode.
fn map_identity(pins: &Pins) -> Vec<(std::ffi::OsString, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut out: Vec<_> = std::fs::read_dir(pins.maps())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name(), e.metadata().ok()?.ino())))
        .collect();
    out.sort();
    out
}

impl Unlocked {
    /// Locks the pinned state again; opens it afresh if its maps were replaced meanwhile.
    pub fn lock(self, capacity: Capacity) -> Result<Datapath> {
        let root = self.pins.root().to_path_buf();
        let Ok(dir) = File::open(&root) else {
            return Datapath::open(&root, capacity);
        };
        let lock = lock_exclusive(dir, &root)?;
        if map_identity(&self.pins) != self.identity {
            drop(lock);
            return Datapath::open(&root, capacity);
        }
        Ok(Datapath {
            ebpf: self.ebpf,
            pins: self.pins,
            _lock: lock,
        })
    }
}

impl Datapath {
    /// Lets go of the lock and keeps the loaded object for the next [`Unlocked::lock`].
    pub fn unlock(self) -> Unlocked {
        let identity = map_identity(&self.pins);
        Unlocked {
            ebpf: self.ebpf,
            pins: self.pins,
            identity,
        }
    }

    /// Opens (creating on first use) the pinned state under `root`.
    pub fn open(root: &Path, capacity: Capacity) -> Result<Self> {
        let pins = Pins::new(root);
        pins.prepare()?;
        let dir = File::open(root).with_context(|| format!("cannot open {}", root.display()))?;
        let lock = lock_exclusive(dir, root)?;
        let found_abi = state::check_abi(&pins)?;
        let mut loader = EbpfLoader::new();
        loader.default_map_pin_directory(pins.maps());
        capacity.apply(&mut loader);
        let mut ebpf = loader.load(OBJECT).with_context(|| {
            format!(
                "cannot load dxdp's eBPF object with maps pinned in {}",
                pins.maps().display()
            )
        })?;
        // Layout 4's links read as carrying every family (the byte was zero padding), which is
        // what its firewall check allowed them; the next check narrows them where a rule closes
        // a family. Its programs would not read the byte: swapped.
        let migrating = found_abi == dxdp_common::ABI_VERSION_WITHOUT_SOURCES
            || found_abi == dxdp_common::ABI_VERSION_WITHOUT_FIREWALL
            || found_abi == dxdp_common::ABI_VERSION_WITHOUT_FAMILIES;
        if found_abi == dxdp_common::ABI_VERSION_WITHOUT_SOURCES {
            // The pinned programs of that layout check no source address: fill the addresses
            // first, then swap in this binary's programs, which need them.
            let filled = state::migrate_sources(&mut ebpf)?;
            info!(veths = filled, "migration: source addresses recorded");
        }
        if migrating {
            // Layout 3's links read as held to the firewall (the byte was zero padding): one
            // made with --bypass-firewall before must be made again to stay past a rule.
            attach::Programs::upgrade(&mut ebpf, &pins)?;
            info!(
                from = found_abi,
                "migrated {} to state layout {}: programs replaced; links made before it are \
                 held to the firewall rules (make one again with --bypass-firewall to exempt it)",
                root.display(),
                dxdp_common::ABI_VERSION
            );
        }
        state::stamp_abi(&mut ebpf, migrating)?;
        Ok(Self {
            ebpf,
            pins,
            _lock: lock,
        })
    }

    /// Records the addresses these endpoints' containers send from, where they are managed and
    /// the addresses changed (IPv6 added later, a link-local that appeared after the link):
    /// frames from an address not recorded take the bridge. Returns how many changed.
    pub fn refresh_sources<'e>(
        &mut self,
        endpoints: impl IntoIterator<Item = &'e Endpoint>,
    ) -> Result<usize> {
        let mut maps = state::Maps::new(&mut self.ebpf)?;
        let mut changed = 0;
        for ep in endpoints {
            if let Some(rec) = maps.endpoint(ep.host_ifindex)?
                && state::same_endpoint(&rec, ep)
                && maps.set_sources(ep.host_ifindex, &ep.addrs)?
            {
                info!(endpoint = %ep.label, addresses = ?ep.addrs, "source addresses updated");
                changed += 1;
            }
        }
        Ok(changed)
    }

    /// The addresses recorded for the container behind a managed veth: those its links carry
    /// frames from and to. `None` for a veth not managed.
    pub fn recorded_addresses(&mut self, ifindex: u32) -> Result<Option<Vec<std::net::IpAddr>>> {
        let maps = state::Maps::new(&mut self.ebpf)?;
        Ok(maps.sources(ifindex)?.map(|s| state::addresses_of(&s)))
    }

    /// Whether the pinned record of this endpoint's veth is this very container interface:
    /// same namespace, same peer, same MAC. A container that changed its MAC is not (a link
    /// to its old MAC would redirect to whoever takes that MAC over).
    pub fn records(&mut self, ep: &Endpoint) -> Result<bool> {
        let maps = state::Maps::new(&mut self.ebpf)?;
        Ok(maps
            .endpoint(ep.host_ifindex)?
            .is_some_and(|rec| state::same_endpoint(&rec, ep)))
    }

    /// Whether a pin directory at `root` could be opened (on bpffs, safe from other users, and
    /// creatable where it does not exist yet), without creating or locking anything.
    pub fn check_usable(root: &Path) -> Result<()> {
        Pins::new(root).check_usable()
    }

    /// Swaps in this binary's programs where the pinned ones differ (after an upgrade); returns
    /// what was replaced: the link datapaths by kind (`tc`, `xdp`), the port programs by name.
    pub fn upgrade_programs(&mut self) -> Result<Vec<String>> {
        let links = attach::Programs::upgrade(&mut self.ebpf, &self.pins)?;
        for kind in &links {
            info!(datapath = %kind, "replaced the pinned program with this binary's, in place");
        }
        let ports = ports::upgrade(&mut self.ebpf, &self.pins)?;
        for name in &ports {
            info!(
                program = name,
                "replaced the pinned program with this binary's, in place"
            );
        }
        Ok(links
            .iter()
            .map(Kind::to_string)
            .chain(ports.iter().map(|p| (*p).to_owned()))
            .collect())
    }

    /// Installs both directions of a link, or nothing: every step taken is undone on failure.
    pub fn install(&mut self, req: &LinkRequest<'_>, host: &[Interface]) -> Result<Installed> {
        let LinkRequest { a, b, kind, .. } = *req;
        if a.host_ifindex == b.host_ifindex {
            bail!("cannot link {} to itself", a.label);
        }
        check_remote_ends(req)?;
        if a.bridge_ifindex != b.bridge_ifindex {
            bail!(
                "{} hangs on bridge {} and {} on bridge {}: dxdp only links endpoints of one bridge",
                a.label,
                a.bridge_name,
                b.label,
                b.bridge_name
            );
        }
        if a.mac == b.mac {
            bail!(
                "{} and {} share the MAC address {}: the bridge could not tell them apart either",
                a.label,
                b.label,
                crate::netlink::format_mac(&a.mac)
            );
        }
        let mut maps = state::Maps::new(&mut self.ebpf)?;
        for ep in [a, b] {
            match maps.endpoint(ep.host_ifindex)? {
                Some(rec) if state::same_endpoint(&rec, ep) => {
                    let existing = Kind::from_code(rec.datapath);
                    if existing != Some(kind) {
                        bail!(
                            "{} ({}) already uses the {} datapath; a veth takes one datapath, \
                             so link with --datapath {} or unlink its other links first",
                            ep.label,
                            ep.host_ifname,
                            existing.map_or("unknown".to_owned(), |k| k.to_string()),
                            existing.map_or("tc".to_owned(), |k| k.to_string()),
                        );
                    }
                    // Linking again brings its addresses up to date.
                    maps.set_sources(ep.host_ifindex, &ep.addrs)?;
                }
                Some(rec) if ep.tunnel_ifindex.is_some() => bail!(
                    "{} (MAC {}) has the endpoint id of another task of another node (MAC {}); \
                     unlink that one first",
                    ep.label,
                    crate::netlink::format_mac(&ep.mac),
                    crate::netlink::format_mac(&rec.mac)
                ),
                Some(_) => {
                    // The ifindex was reused by a new veth, or its container took another MAC:
                    // nothing recorded for it is valid, links to the old MAC least of all.
                    warn!(
                        ifindex = ep.host_ifindex,
                        endpoint = %ep.label,
                        "the veth's container interface is not the one recorded (new MAC, \
                         namespace or veth); purging what was recorded for it"
                    );
                    maps.purge_interface(ep.host_ifindex)?;
                    pins::remove_link_pins(&self.pins, ep.host_ifindex)?;
                }
                None => {}
            }
        }
        let meta_key = meta_key(a.host_ifindex, b.host_ifindex);
        let already =
            maps.link_meta(&meta_key)?.is_some() && maps.has_link(a, b)? && maps.has_link(b, a)?;
        let mut programs = attach::Programs::open(&mut self.ebpf, &self.pins)?;
        for ep in [a, b] {
            attach::check_foreign(kind, ep, host, &programs)?;
        }
        let mut undo = state::Journal::default();
        let mut refamilied = false;
        let result = (|| -> Result<()> {
            let mut maps = state::Maps::new(&mut self.ebpf)?;
            for ep in [a, b] {
                if maps.endpoint(ep.host_ifindex)?.is_none() {
                    let fixups = match kind {
                        Kind::Xdp => {
                            let changed = fixups::apply(ep)?;
                            undo.push(state::Undo::fixups(ep, changed));
                            changed
                        }
                        Kind::Tc => 0,
                    };
                    maps.add_endpoint(ep, kind, fixups, &mut undo)?;
                }
            }
            let changed = maps.add_direction(a, b, req.families, &mut undo)?;
            refamilied = maps.add_direction(b, a, req.families, &mut undo)? || changed;
            maps.set_link_meta(meta_key, link_meta(req, &meta_key), &mut undo)?;
            for ep in [a, b] {
                programs.attach(kind, ep, &mut undo)?;
            }
            for ep in [a, b] {
                if let Some(tunnel) = ep.tunnel_ifindex {
                    crate::netlink::set_static_bridge_entry(tunnel, &ep.mac)?;
                    undo.push(state::Undo::BridgeEntry(tunnel, ep.mac));
                }
            }
            Ok(())
        })();
        if let Err(err) = result {
            undo.roll_back(&mut self.ebpf);
            return Err(err);
        }
        undo.commit();
        if already && refamilied {
            info!(a = %a.label, b = %b.label, families = %req.families, "link carries other families now");
            Ok(Installed::FamiliesChanged)
        } else if already {
            Ok(Installed::AlreadyThere)
        } else {
            info!(a = %a.label, b = %b.label, network = req.network, datapath = %kind, families = %req.families, "link added");
            Ok(Installed::New)
        }
    }

    /// The endpoints on other nodes, each with the VXLAN device it is reached through.
    pub fn remote_endpoints(&mut self) -> Result<Vec<(u32, u32)>> {
        let maps = state::Maps::new(&mut self.ebpf)?;
        let mut out = Vec::new();
        for (id, _) in maps.managed()? {
            if is_remote_endpoint(id)
                && let Some(rec) = maps.endpoint(id)?
            {
                out.push((id, rec.tunnel_ifindex));
            }
        }
        Ok(out)
    }

    /// Makes an existing link carry only `families` (a rule closed one since it was made),
    /// keeping its counters; returns whether that changed anything.
    pub fn set_families(&mut self, low: u32, high: u32, families: Families) -> Result<bool> {
        let changed = state::Maps::new(&mut self.ebpf)?.set_link_families(low, high, families)?;
        if changed {
            info!(low, high, families = %families, "link carries other families now");
        }
        Ok(changed)
    }

    /// Removes a link; an interface left without links loses its program and its fix-ups.
    pub fn remove(&mut self, low_ifindex: u32, high_ifindex: u32) -> Result<Option<LinkRecord>> {
        Ok(self.remove_links(&[(low_ifindex, high_ifindex)])?.pop())
    }

    /// Removes these links, given by their two host ifindexes, and the programs of the veths
    /// left without one; returns the records of those that existed. Each removal reads the
    /// whole links map, so many links go in one pass, not one pass each (that made `cleanup`
    /// of 1000 links quadratic: 10 s).
    pub fn remove_links(&mut self, pairs: &[(u32, u32)]) -> Result<Vec<LinkRecord>> {
        let keys: Vec<LinkMetaKey> = pairs.iter().map(|&(x, y)| meta_key(x, y)).collect();
        let mut maps = state::Maps::new(&mut self.ebpf)?;
        let mut records = Vec::new();
        for key in &keys {
            if let Some(meta) = maps.link_meta(key)? {
                records.push(to_record(key, &meta));
            }
        }
        maps.remove_links(&keys)?;
        let in_use = maps.interfaces_in_use()?;
        let ends: std::collections::BTreeSet<u32> = keys
            .iter()
            .flat_map(|k| [k.low_ifindex, k.high_ifindex])
            .filter(|i| !in_use.contains(i))
            .collect();
        for ifindex in ends {
            self.release_interface(ifindex)?;
        }
        for rec in &records {
            info!(a = %rec.low_name, b = %rec.high_name, network = %rec.network, datapath = %rec.datapath, "link removed");
        }
        Ok(records)
    }

    fn release_interface(&mut self, ifindex: u32) -> Result<()> {
        let mut maps = state::Maps::new(&mut self.ebpf)?;
        let record = maps.endpoint(ifindex)?;
        pins::remove_link_pins(&self.pins, ifindex)?;
        maps.purge_interface(ifindex)?;
        if let Some(rec) = record.filter(|_| is_remote_endpoint(ifindex)) {
            release_tunnel_peer(&maps, &self.pins, &rec)?;
            return Ok(());
        }
        if let Some(rec) = record
            && rec.fixups != 0
            && let Err(err) = fixups::restore(&rec)
        {
            warn!(ifindex, "could not undo fix-ups: {err:#}");
        }
        Ok(())
    }

    /// Every link in the pinned state.
    pub fn links(&mut self) -> Result<Vec<LinkRecord>> {
        let maps = state::Maps::new(&mut self.ebpf)?;
        // Keyed by (ingress, target), not scanned per link: status lists hundreds of links.
        let mut by_ends: std::collections::HashMap<(u32, u32), (Traffic, u8)> = Default::default();
        for (k, t) in maps.directions()? {
            let (sum, closed) = by_ends
                .entry((k.ingress_ifindex, t.target_ifindex))
                .or_default();
            sum.packets += t.packets;
            sum.bytes += t.bytes;
            *closed |= t.closed;
        }
        let direction = |from: u32, to: u32| by_ends.get(&(from, to)).copied().unwrap_or_default();
        let mut links: Vec<_> = maps
            .all_link_meta()?
            .iter()
            .map(|(k, m)| {
                let (low_to_high, up) = direction(k.low_ifindex, k.high_ifindex);
                let (high_to_low, down) = direction(k.high_ifindex, k.low_ifindex);
                LinkRecord {
                    low_to_high,
                    high_to_low,
                    // A family either direction keeps on the bridge is not linked.
                    families: Families::from_closed_bits(up | down),
                    ..to_record(k, m)
                }
            })
            .collect();
        links.sort_by(|x, y| (&x.low_name, &x.high_name).cmp(&(&y.low_name, &y.high_name)));
        Ok(links)
    }

    /// Whether both endpoints of a link hold their pinned attachment of `kind`. A process killed
    /// between writing a link into the maps and pinning an attachment leaves a link that the
    /// maps list but that one side (or neither) redirects; [`Datapath::install`] completes it.
    pub fn attachments_pinned(&self, kind: Kind, x: u32, y: u32) -> bool {
        self.attachment_pinned(kind, x) && self.attachment_pinned(kind, y)
    }

    /// Whether this veth holds its pinned attachment of `kind`.
    pub fn attachment_pinned(&self, kind: Kind, ifindex: u32) -> bool {
        self.pins.link(kind, ifindex).exists()
    }

    /// Whether the attachment a link's end needs is pinned: its veth's program of `kind`, or for
    /// a task of another node the tunnel program on the VXLAN device it is reached through.
    pub fn end_attached(&self, kind: Kind, ep: &Endpoint) -> bool {
        match ep.tunnel_ifindex {
            Some(tunnel) => self.pins.tunnel_link(tunnel).exists(),
            None => self.attachment_pinned(kind, ep.host_ifindex),
        }
    }

    pub fn counters(&mut self, ifindex: u32) -> Result<Option<InterfaceCounters>> {
        state::Maps::new(&mut self.ebpf)?.counters(ifindex)
    }

    /// Managed interfaces: host ifindex and datapath.
    pub fn interfaces(&mut self) -> Result<Vec<(u32, Kind)>> {
        state::Maps::new(&mut self.ebpf)?.managed()
    }

    /// Whether anything on `nic`'s ingress before netfilter may set a packet's mark: a TCX
    /// program other than dxdp's own `dxdp_ingress` (which only ever redirects), or a classic tc
    /// filter (`cls_bpf`, `action skbedit mark`, …). What cannot be read counts as "may".
    pub fn nic_ingress_may_mark(index: u32, name: &str) -> bool {
        let tcx_foreign = attach::tcx_ingress(name).map(|programs| {
            programs
                .iter()
                .any(|p| p.name_as_str() != Some(dxdp_common::ingress::names::INGRESS_PROGRAM))
        });
        let classic = crate::netlink::host_qdiscs().and_then(|qdiscs| {
            let hooked = qdiscs
                .iter()
                .any(|q| q.index == index && matches!(q.kind.as_str(), "clsact" | "ingress"));
            Ok(hooked && !crate::netlink::host_filters(index, false)?.is_empty())
        });
        !matches!((tcx_foreign, classic), (Ok(false), Ok(false)))
    }

    /// Other tools' programs on managed veths, as (veth name, description).
    pub fn foreign_programs(&mut self, host: &[Interface]) -> Result<Vec<(String, String)>> {
        let managed = self.interfaces()?;
        let programs = attach::Programs::open(&mut self.ebpf, &self.pins)?;
        let mut out = Vec::new();
        for (ifindex, _) in managed {
            if let Some(iface) = host.iter().find(|i| i.index == ifindex) {
                for description in programs.foreign_on(iface)? {
                    out.push((iface.name.clone(), description));
                }
            }
        }
        Ok(out)
    }

    /// How each managed veth's attachment stands, asked of the kernel in the calling thread's
    /// namespace (`doctor`'s consistency check): the state a process killed mid-way, a veth
    /// destroyed under a link, or another tool's detach leaves.
    pub fn attachments(&mut self, host: &[Interface]) -> Result<Vec<(u32, Attachment)>> {
        let managed = self.interfaces()?;
        let programs = attach::Programs::open(&mut self.ebpf, &self.pins)?;
        let mut out = Vec::new();
        for (ifindex, kind) in managed {
            if is_remote_endpoint(ifindex) {
                // A task of another node: the tunnel program on the VXLAN device it comes in by.
                let rec = state::Maps::new(&mut self.ebpf)?.endpoint(ifindex)?;
                let tunnel = rec.map_or(0, |r| r.tunnel_ifindex);
                let state = match host.iter().find(|i| i.index == tunnel) {
                    None => Attachment::VethGone,
                    Some(iface) => match (
                        programs.tunnel_attached(&iface.name)?,
                        self.pins.tunnel_link(tunnel).exists(),
                    ) {
                        (true, true) => Attachment::Attached,
                        (true, false) => Attachment::Unpinned,
                        (false, _) => Attachment::Detached,
                    },
                };
                out.push((ifindex, state));
                continue;
            }
            let state = match host.iter().find(|i| i.index == ifindex) {
                None => Attachment::VethGone,
                Some(iface) => match (
                    programs.attached(kind, &iface.name, Some(iface))?,
                    self.pins.link(kind, ifindex).exists(),
                ) {
                    (true, true) => Attachment::Attached,
                    (true, false) => Attachment::Unpinned,
                    (false, _) => Attachment::Detached,
                },
            };
            out.push((ifindex, state));
        }
        Ok(out)
    }

    /// Drops whatever refers to interfaces that no longer exist in the host namespace: links to
    /// a destroyed veth, its counters, its dead program attachment pins.
    pub fn collect_garbage(&mut self, host: &[Interface]) -> Result<usize> {
        let mut maps = state::Maps::new(&mut self.ebpf)?;
        let mut purged = 0;
        let mut tunnels = remote::Tunnels::default();
        for (ifindex, _) in maps.managed()? {
            // A task of another node lives while its tunnel reaches it; a veth while it exists.
            let remote = if is_remote_endpoint(ifindex) {
                Some(maps.endpoint(ifindex)?)
            } else {
                None
            };
            let alive = match &remote {
                Some(rec) => rec
                    .as_ref()
                    .is_some_and(|rec| tunnels.still_reaches(host, rec)),
                None => host.iter().any(|i| i.index == ifindex && i.is_veth()),
            };
            if !alive {
                maps.purge_interface(ifindex)?;
                pins::remove_link_pins(&self.pins, ifindex)?;
                if let Some(Some(rec)) = &remote {
                    release_tunnel_peer(&maps, &self.pins, rec)?;
                }
                purged += 1;
            }
        }
        maps.drop_dangling()?;
        // The survivor of a link whose other end died keeps no program it does not need.
        // One pass over the links map, not one per managed veth: at 200 containers that was
        // 320,000 bpf() calls per resync.
        let in_use = maps.interfaces_in_use()?;
        let orphans: Vec<u32> = maps
            .managed()?
            .into_iter()
            .map(|(ifindex, _)| ifindex)
            .filter(|i| !in_use.contains(i))
            .collect();
        for ifindex in orphans {
            self.release_interface(ifindex)?;
            purged += 1;
        }
        let managed: Vec<u32> = self.interfaces()?.into_iter().map(|(i, _)| i).collect();
        let programs = attach::Programs::open(&mut self.ebpf, &self.pins)?;
        purged += programs.drop_stale_pins(&managed, host)?;
        purged += self.collect_port_garbage(host)?;
        Ok(purged)
    }

    /// Removes every link, program, fix-up and pin dxdp made under this root.
    pub fn purge(mut self) -> Result<usize> {
        let links = self.links()?;
        let pairs: Vec<(u32, u32)> = links
            .iter()
            .map(|l| (l.low_ifindex, l.high_ifindex))
            .collect();
        self.remove_links(&pairs)?;
        for (ifindex, _) in self.interfaces()? {
            self.release_interface(ifindex)?;
        }
        let root = self.pins.root().to_path_buf();
        drop(self);
        pins::remove_all(&root)?;
        Ok(links.len())
    }
}

/// Refuses what a link to a task of another node cannot be: both ends remote, or the xdp
/// datapath (a VXLAN device takes no XDP frames).
fn check_remote_ends(req: &LinkRequest<'_>) -> Result<()> {
    match (req.a.tunnel_ifindex, req.b.tunnel_ifindex) {
        (Some(_), Some(_)) => bail!(
            "neither {} nor {} runs on this node; link them on a node that runs one of them",
            req.a.label,
            req.b.label
        ),
        (None, None) => Ok(()),
        _ if req.kind == Kind::Xdp => {
            let remote = if req.a.tunnel_ifindex.is_some() {
                req.a
            } else {
                req.b
            };
            bail!(
                "{} runs on another node: a link across nodes leaves through the overlay's VXLAN \
                 device, which takes no XDP frames; link with --datapath tc",
                remote.label
            )
        }
        _ => Ok(()),
    }
}

/// What a task of another node leaves behind once its endpoint is purged: the bridge entry
/// that pinned its MAC on the tunnel's port, and the tunnel's program if no other remote
/// endpoint comes in by that device.
fn release_tunnel_peer(
    maps: &state::Maps<'_>,
    pins: &Pins,
    rec: &dxdp_common::Endpoint,
) -> Result<()> {
    let tunnel = rec.tunnel_ifindex;
    if let Err(err) = crate::netlink::remove_static_bridge_entry(tunnel, &rec.mac) {
        // The overlay going (its last local task stopped, the network removed) takes the
        // device, or its bridge, and the entry with it: nothing is left to remove then.
        let still_bridged = crate::netlink::interfaces(&crate::netns::NetnsPath::host())
            .map_or(true, |here| {
                here.iter().any(|i| i.index == tunnel && i.master.is_some())
            });
        if still_bridged {
            warn!(tunnel, "{err:#}");
        } else {
            tracing::debug!(tunnel, "the tunnel left its bridge with the entry: {err:#}");
        }
    }
    if !maps.tunnel_in_use(tunnel)? {
        pins::remove_if_present(&pins.tunnel_link(tunnel))?;
    }
    Ok(())
}

fn meta_key(x: u32, y: u32) -> LinkMetaKey {
    LinkMetaKey {
        low_ifindex: x.min(y),
        high_ifindex: x.max(y),
    }
}

fn link_meta(req: &LinkRequest<'_>, key: &LinkMetaKey) -> LinkMeta {
    let (low, high) = if req.a.host_ifindex == key.low_ifindex {
        (req.a, req.b)
    } else {
        (req.b, req.a)
    };
    LinkMeta {
        datapath: req.kind.code(),
        origin: req.origin.code(),
        firewall: firewall_code(req.bypass_firewall),
        _pad: [0; 5],
        created_unix_secs: now_unix_secs(),
        low_name: fixed_name(&low.label),
        high_name: fixed_name(&high.label),
        network: fixed_name(req.network),
    }
}

/// What the pinned records say about the firewall: held to the rules, or bypassing them.
fn firewall_code(bypass: bool) -> u8 {
    if bypass {
        dxdp_common::FIREWALL_BYPASSED
    } else {
        dxdp_common::FIREWALL_CHECKED
    }
}

/// When a record is made, as the pinned records keep it.
fn now_unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn to_record(key: &LinkMetaKey, meta: &LinkMeta) -> LinkRecord {
    LinkRecord {
        low_ifindex: key.low_ifindex,
        high_ifindex: key.high_ifindex,
        low_name: unfixed_name(&meta.low_name),
        high_name: unfixed_name(&meta.high_name),
        network: unfixed_name(&meta.network),
        datapath: Kind::from_code(meta.datapath).unwrap_or(Kind::Tc),
        origin: Origin::from_code(meta.origin),
        bypasses_firewall: meta.firewall == dxdp_common::FIREWALL_BYPASSED,
        families: Families::ALL,
        created_unix_secs: meta.created_unix_secs,
        low_to_high: Traffic::default(),
        high_to_low: Traffic::default(),
    }
}

/// Truncates on a character boundary so the stored name stays valid UTF-8.
fn fixed_name(name: &str) -> [u8; NAME_LEN] {
    let mut out = [0u8; NAME_LEN];
    let mut end = name.len().min(NAME_LEN);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    out[..end].copy_from_slice(&name.as_bytes()[..end]);
    out
}

fn unfixed_name(raw: &[u8; NAME_LEN]) -> String {
    let end = raw.iter().position(|b| *b == 0).unwrap_or(NAME_LEN);
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_truncate_on_char_boundaries() {
        assert_eq!(unfixed_name(&fixed_name("web-1")), "web-1");
        let long = "é".repeat(40); // 80 bytes
        let back = unfixed_name(&fixed_name(&long));
        assert!(back.len() <= NAME_LEN && long.starts_with(&back));
    }

    #[test]
    fn meta_key_is_order_independent() {
        assert_eq!(meta_key(7, 3), meta_key(3, 7));
        assert_eq!(meta_key(7, 3).low_ifindex, 3);
    }
}
