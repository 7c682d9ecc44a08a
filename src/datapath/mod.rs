//! The only code that talks to the kernel's BPF objects: loading and adopting the pinned maps and
//! programs, attaching them, and keeping the maps consistent with the links that exist.
mod attach;
pub mod btf_layout;
mod choice;
mod egress;
mod fixups;
mod handback;
mod icmp_programs;
pub mod kfunc;
mod links;
mod pins;
mod ports;
mod record;
mod remote;
mod route_table;
mod state;
mod sysctl;

use std::{fs::File, path::Path};

use anyhow::{Context, Result};
use aya::{Ebpf, EbpfLoader};
use dxdp_common::is_remote_endpoint;
use nix::fcntl::{Flock, FlockArg};
use tracing::info;

pub use choice::{TC_SINCE, XDP_SINCE, has as kernel_has};
pub use egress::{EgressPlan, EgressRecord, EgressUnavailable, egress_available};
use links::release_tunnel_peer;
pub use links::{Installed, LinkRequest};
pub use pins::{Pins, check_ancestors, on_bpffs};
pub use ports::{
    ConnectionTables, ExistingConnections, ExposedPort, Exposure, PortMapping, TableFill,
    TablePressure,
};
pub use record::{InterfaceCounters, LinkRecord, Traffic};
pub use state::Capacity;

use crate::{
    choice::{Kind, Origin},
    endpoint::Endpoint,
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
        // Before the port programs are swapped in: a binary before the switches' map left it
        // empty, which would hold their connections stricter than conntrack may be set to.
        self.follow_tcp_switches()?;
        let mut ports = ports::upgrade(&mut self.ebpf, &self.pins)?;
        ports.extend(egress::upgrade(&self.pins)?);
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
    /// a destroyed veth, its counters, its dead program attachment pins, exposures and egress
    /// fast paths of its container.
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
        purged += self.collect_egress_garbage(host)?;
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
