//! The pinned state's layout: the sizes of maps made from scratch, the ABI version stamped in
//! `DXDP_META`, and the migrations from the layouts before it.
use anyhow::{Context, Result, anyhow, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData},
};
use dxdp_common::{
    ABI_VERSION, ABI_VERSION_WITHOUT_FAMILIES, ABI_VERSION_WITHOUT_FIREWALL,
    ABI_VERSION_WITHOUT_SOURCES, DEFAULT_MAX_ENDPOINTS, DEFAULT_MAX_LINKS, Meta, ingress, names,
};
use tracing::warn;

use super::Maps;

/// Map sizes for a pin directory made from scratch; existing pinned maps keep their size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub max_endpoints: u32,
    pub max_links: u32,
    /// TCP connections at once through exposed ports (`DXDP_FLOWS`); `DXDP_OPENING` (TCP
    /// connections being opened) and `DXDP_UDP_FLOWS` hold a quarter as many each.
    pub max_connections: u32,
}

impl Default for Capacity {
    fn default() -> Self {
        Self {
            max_endpoints: DEFAULT_MAX_ENDPOINTS,
            max_links: DEFAULT_MAX_LINKS,
            max_connections: ingress::DEFAULT_MAX_FLOWS,
        }
    }
}

impl Capacity {
    pub(in crate::datapath) fn apply(self, loader: &mut EbpfLoader<'_>) {
        for name in [
            names::ENDPOINTS,
            names::TARGETS,
            names::COUNTERS,
            names::SOURCES,
            names::TUNNEL_PEERS,
        ] {
            loader.map_max_entries(name, self.max_endpoints);
        }
        // A link takes two directed entries.
        loader.map_max_entries(names::LINKS, self.max_links.saturating_mul(2));
        loader.map_max_entries(names::LINK_META, self.max_links);
        loader.map_max_entries(ingress::names::FLOWS, self.max_connections);
        let side = ingress::side_table_size(self.max_connections);
        loader.map_max_entries(ingress::names::OPENING, side);
        loader.map_max_entries(ingress::names::UDP_FLOWS, side);
        // Each TCP connection's window copy, beside its entry.
        loader.map_max_entries(ingress::names::TCP_WINDOWS, self.max_connections);
        loader.map_max_entries(ingress::names::TCP_OPENING_WINDOWS, side);
    }
}

/// Refuses a pin directory written by a dxdp whose map layout differs from ours, before the
/// loader tries to reuse maps whose keys and values it would misread. Returns the version found
/// (0 for a new directory): [`ABI_VERSION_WITHOUT_SOURCES`] is taken, and migrated by
/// [`migrate_sources`] once loaded; [`ABI_VERSION_WITHOUT_FIREWALL`] and
/// [`ABI_VERSION_WITHOUT_FAMILIES`] are taken as they are.
pub(in crate::datapath) fn check_abi(pins: &crate::datapath::Pins) -> Result<u32> {
    let path = pins.maps().join(names::META);
    if !path.exists() {
        return Ok(0);
    }
    let data =
        MapData::from_pin(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let meta: Array<_, Meta> = Array::try_from(aya::maps::Map::Array(data))?;
    let found = meta.get(&0, 0)?.abi_version;
    let known = [
        ABI_VERSION,
        ABI_VERSION_WITHOUT_SOURCES,
        ABI_VERSION_WITHOUT_FIREWALL,
        ABI_VERSION_WITHOUT_FAMILIES,
    ];
    if found != 0 && !known.contains(&found) {
        bail!(
            "{} was written by a dxdp with state layout {found}, this one uses {ABI_VERSION}; \
             remove it with that version's `dxdp cleanup` (or `rm -r {}`) and link again",
            pins.root().display(),
            pins.root().display()
        );
    }
    Ok(found)
}

/// Brings a directory of [`ABI_VERSION_WITHOUT_SOURCES`] to this layout: each managed veth gets
/// the addresses of its container's interface, read in the namespace its record names (found
/// by inode among running processes). A veth whose namespace is gone gets none, so its frames
/// take the bridge until the garbage collection removes it. Returns how many were filled.
pub(in crate::datapath) fn migrate_sources(ebpf: &mut Ebpf) -> Result<usize> {
    let mut maps = Maps::new(ebpf)?;
    let mut filled = 0;
    for item in maps.endpoints.iter().collect::<Vec<_>>() {
        let (ifindex, rec) = item?;
        let Some(netns) = crate::netns::find_by_inode(rec.netns_ino) else {
            warn!(
                ifindex,
                "migration: the container's namespace is gone; no addresses"
            );
            continue;
        };
        match crate::netlink::addresses(&netns, rec.peer_ifindex) {
            Ok(addrs) => {
                maps.set_sources(ifindex, &addrs)?;
                filled += 1;
            }
            Err(e) => warn!(
                ifindex,
                "migration: cannot read the container's addresses: {e:#}"
            ),
        }
    }
    Ok(filled)
}

/// Records in META that the pinned maps have this binary's layout: on a new directory, and
/// after [`migrate_sources`] (`force`).
pub(in crate::datapath) fn stamp_abi(ebpf: &mut Ebpf, force: bool) -> Result<()> {
    let map = ebpf
        .map_mut(names::META)
        .ok_or_else(|| anyhow!("eBPF object lacks {}", names::META))?;
    let mut meta: Array<_, Meta> = Array::try_from(map)?;
    if force || meta.get(&0, 0)?.abi_version == 0 {
        meta.set(
            0,
            Meta {
                abi_version: ABI_VERSION,
                _reserved: 0,
            },
            0,
        )?;
    }
    Ok(())
}
