//! Typed access to the pinned maps; the journal of a change (journal.rs) and the layout with its
//! migrations (layout.rs) beside it.
use std::{collections::HashSet, net::IpAddr};

use anyhow::{Context, Result, anyhow};
use aya::{
    Ebpf,
    maps::{HashMap, MapData, MapError, PerCpuHashMap, PerCpuValues, xdp::DevMapHash},
};
use dxdp_common::{
    Counters, Endpoint as EndpointRec, LinkKey, LinkMeta, LinkMetaKey, LinkTarget, MAX_SOURCES,
    Sources, TunnelPeerKey, is_remote_endpoint, names,
};
use tracing::warn;

use super::{InterfaceCounters, Kind};
use crate::{endpoint::Endpoint, family::Families};

mod journal;
mod layout;

pub(super) use journal::{Journal, Undo};
pub use layout::Capacity;
pub(super) use layout::{check_abi, migrate_sources, stamp_abi};

/// Same container interface as recorded, not a new veth that inherited the ifindex.
pub(super) fn same_endpoint(rec: &EndpointRec, ep: &Endpoint) -> bool {
    rec.netns_ino == ep.netns_ino && rec.peer_ifindex == ep.ifindex && rec.mac == ep.mac
}

pub(super) struct Maps<'a> {
    endpoints: HashMap<&'a mut MapData, u32, EndpointRec>,
    links: PerCpuHashMap<&'a mut MapData, LinkKey, LinkTarget>,
    targets: DevMapHash<&'a mut MapData>,
    counters: PerCpuHashMap<&'a mut MapData, u32, Counters>,
    link_meta: HashMap<&'a mut MapData, LinkMetaKey, LinkMeta>,
    sources: HashMap<&'a mut MapData, u32, Sources>,
    tunnel_peers: HashMap<&'a mut MapData, TunnelPeerKey, u32>,
}

pub(super) fn missing(name: &str) -> anyhow::Error {
    anyhow!("eBPF object lacks map {name}")
}

impl<'a> Maps<'a> {
    pub(super) fn new(ebpf: &'a mut Ebpf) -> Result<Self> {
        let [
            endpoints,
            links,
            targets,
            counters,
            link_meta,
            sources,
            tunnel_peers,
        ] = ebpf.maps_disjoint_mut([
            names::ENDPOINTS,
            names::LINKS,
            names::TARGETS,
            names::COUNTERS,
            names::LINK_META,
            names::SOURCES,
            names::TUNNEL_PEERS,
        ]);
        Ok(Self {
            endpoints: HashMap::try_from(endpoints.ok_or_else(|| missing(names::ENDPOINTS))?)?,
            links: PerCpuHashMap::try_from(links.ok_or_else(|| missing(names::LINKS))?)?,
            targets: DevMapHash::try_from(targets.ok_or_else(|| missing(names::TARGETS))?)?,
            counters: PerCpuHashMap::try_from(counters.ok_or_else(|| missing(names::COUNTERS))?)?,
            link_meta: HashMap::try_from(link_meta.ok_or_else(|| missing(names::LINK_META))?)?,
            sources: HashMap::try_from(sources.ok_or_else(|| missing(names::SOURCES))?)?,
            tunnel_peers: HashMap::try_from(
                tunnel_peers.ok_or_else(|| missing(names::TUNNEL_PEERS))?,
            )?,
        })
    }

    /// Whether some endpoint on another node is reached through the VXLAN device
    /// `tunnel_ifindex` (so its program stays attached there).
    pub(super) fn tunnel_in_use(&self, tunnel_ifindex: u32) -> Result<bool> {
        for item in self.endpoints.iter() {
            let (id, rec) = item?;
            if is_remote_endpoint(id) && rec.tunnel_ifindex == tunnel_ifindex {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The addresses recorded for a managed veth's container.
    pub(super) fn sources(&self, ifindex: u32) -> Result<Option<Sources>> {
        absent_is_none(self.sources.get(&ifindex, 0))
    }

    /// Records the addresses `ifindex`'s container may send from (replacing what was there);
    /// returns whether that changed anything.
    pub(super) fn set_sources(&mut self, ifindex: u32, addrs: &[IpAddr]) -> Result<bool> {
        let wanted = sources_of(addrs);
        if addrs.len() > MAX_SOURCES {
            warn!(
                ifindex,
                addresses = addrs.len(),
                "more addresses than a link checks ({MAX_SOURCES}); frames from the others take \
                 the bridge"
            );
        }
        if self.sources(ifindex)? == Some(wanted) {
            return Ok(false);
        }
        self.sources
            .insert(ifindex, wanted, 0)
            .map_err(|e| full(e, names::SOURCES, "the container's addresses"))?;
        Ok(true)
    }

    pub(super) fn endpoint(&self, ifindex: u32) -> Result<Option<EndpointRec>> {
        absent_is_none(self.endpoints.get(&ifindex, 0))
    }

    pub(super) fn managed(&self) -> Result<Vec<(u32, Kind)>> {
        let mut out = Vec::new();
        for item in self.endpoints.iter() {
            let (ifindex, rec) = item?;
            out.push((ifindex, Kind::from_code(rec.datapath).unwrap_or(Kind::Tc)));
        }
        Ok(out)
    }

    pub(super) fn link_meta(&self, key: &LinkMetaKey) -> Result<Option<LinkMeta>> {
        absent_is_none(self.link_meta.get(key, 0))
    }

    pub(super) fn all_link_meta(&self) -> Result<Vec<(LinkMetaKey, LinkMeta)>> {
        Ok(self.link_meta.iter().collect::<Result<_, _>>()?)
    }

    pub(super) fn has_link(&self, from: &Endpoint, to: &Endpoint) -> Result<bool> {
        Ok(self.target(&LinkKey::new(from.host_ifindex, to.mac))? == Some(to.host_ifindex))
    }

    fn target(&self, key: &LinkKey) -> Result<Option<u32>> {
        Ok(absent_is_none(self.links.get(key, 0))?
            .and_then(|per_cpu| per_cpu.iter().next().map(|t| t.target_ifindex)))
    }

    /// Every directed link with its target and its traffic summed over CPUs; a family closed
    /// on any CPU's copy counts as closed.
    pub(super) fn directions(&self) -> Result<Vec<(LinkKey, LinkTarget)>> {
        let mut out = Vec::new();
        for item in self.links.iter() {
            let (key, per_cpu) = item?;
            let mut sum = LinkTarget::default();
            for t in per_cpu.iter() {
                sum.target_ifindex = t.target_ifindex;
                sum.closed |= t.closed;
                sum.packets += t.packets;
                sum.bytes += t.bytes;
            }
            out.push((key, sum));
        }
        Ok(out)
    }

    pub(super) fn counters(&self, ifindex: u32) -> Result<Option<InterfaceCounters>> {
        let Some(per_cpu) = absent_is_none(self.counters.get(&ifindex, 0))? else {
            return Ok(None);
        };
        let sum = per_cpu.iter().fold(Counters::default(), |mut acc, c| {
            acc.redirected_packets += c.redirected_packets;
            acc.redirected_bytes += c.redirected_bytes;
            acc.passed_packets += c.passed_packets;
            acc.passed_bytes += c.passed_bytes;
            acc.fallback_packets += c.fallback_packets;
            acc.spoofed_packets += c.spoofed_packets;
            acc
        });
        Ok(Some(sum.into()))
    }

    pub(super) fn add_endpoint(
        &mut self,
        ep: &Endpoint,
        kind: Kind,
        fixups: u8,
        undo: &mut Journal,
    ) -> Result<()> {
        let ifindex = ep.host_ifindex;
        let rec = EndpointRec {
            netns_ino: ep.netns_ino,
            peer_ifindex: ep.ifindex,
            mac: ep.mac,
            datapath: kind.code(),
            fixups,
            tunnel_ifindex: ep.tunnel_ifindex.unwrap_or(0),
        };
        // A host veth is its own target; a task of another node is reached through its tunnel.
        let device = ep.tunnel_ifindex.unwrap_or(ifindex);
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| anyhow!("{what}: {e}"))?;
        let zero = PerCpuValues::try_from(vec![Counters::default(); cpus])?;
        undo.push(Undo::Endpoint(ifindex));
        self.set_sources(ifindex, &ep.addrs)?;
        self.counters
            .insert(ifindex, zero, 0)
            .map_err(|e| full(e, names::COUNTERS, &ep.label))?;
        self.targets
            .insert(ifindex, device, None, 0)
            .with_context(|| format!("cannot add {} to {}", ep.host_ifname, names::TARGETS))?;
        if let Some(tunnel) = ep.tunnel_ifindex {
            self.tunnel_peers
                .insert(TunnelPeerKey::new(tunnel, ep.mac), ifindex, 0)
                .map_err(|e| full(e, names::TUNNEL_PEERS, &ep.label))?;
        }
        self.endpoints
            .insert(ifindex, rec, 0)
            .map_err(|e| full(e, names::ENDPOINTS, &ep.label))
    }

    /// Makes the direction `from` -> `to` carry `families`; returns whether an existing one
    /// changed its families.
    pub(super) fn add_direction(
        &mut self,
        from: &Endpoint,
        to: &Endpoint,
        families: Families,
        undo: &mut Journal,
    ) -> Result<bool> {
        let key = LinkKey::new(from.host_ifindex, to.mac);
        let closed = families.closed_bits();
        match self.target(&key)? {
            // Rewriting it would zero its counters: only its families change.
            Some(target) if target == to.host_ifindex => {
                let was = self.closed(&key)?;
                if was == closed {
                    return Ok(false);
                }
                undo.push(Undo::Closed(key, was));
                self.set_closed(&key, closed)?;
                return Ok(true);
            }
            Some(_) => {}
            None => undo.push(Undo::Direction(key)),
        }
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| anyhow!("{what}: {e}"))?;
        let value = PerCpuValues::try_from(vec![LinkTarget::new(to.host_ifindex, closed); cpus])?;
        self.links
            .insert(key, value, 0)
            .map_err(|e| full(e, names::LINKS, &from.label))?;
        Ok(false)
    }

    /// The families a direction keeps on the bridge, as any CPU's copy says.
    fn closed(&self, key: &LinkKey) -> Result<u8> {
        Ok(absent_is_none(self.links.get(key, 0))?
            .map_or(0, |per_cpu| per_cpu.iter().fold(0, |acc, t| acc | t.closed)))
    }

    /// Rewrites only the `closed` byte of every CPU's copy of a direction, keeping its target
    /// and counters. Read, then written: what the datapath counts on a CPU in between is lost
    /// from the counters (a few packets, once per change of families), never a frame.
    fn set_closed(&mut self, key: &LinkKey, closed: u8) -> Result<()> {
        let Some(per_cpu) = absent_is_none(self.links.get(key, 0))? else {
            return Ok(());
        };
        let values: Vec<LinkTarget> = per_cpu
            .iter()
            .map(|t| LinkTarget { closed, ..*t })
            .collect();
        self.links
            .insert(key, PerCpuValues::try_from(values)?, 0)
            .with_context(|| format!("cannot change the families of a link in {}", names::LINKS))
    }

    /// Makes both directions between these veths carry only `families`; returns whether that
    /// changed anything.
    pub(super) fn set_link_families(
        &mut self,
        low: u32,
        high: u32,
        families: Families,
    ) -> Result<bool> {
        let closed = families.closed_bits();
        let mut changed = false;
        for (key, target) in self.directions()? {
            let ends = (key.ingress_ifindex, target.target_ifindex);
            if (ends == (low, high) || ends == (high, low)) && target.closed != closed {
                self.set_closed(&key, closed)?;
                changed = true;
            }
        }
        Ok(changed)
    }

    pub(super) fn set_link_meta(
        &mut self,
        key: LinkMetaKey,
        meta: LinkMeta,
        undo: &mut Journal,
    ) -> Result<()> {
        match self.link_meta(&key)? {
            // Re-linking by hand or by the watch keeps the original record and its origin.
            Some(_) => Ok(()),
            None => {
                undo.push(Undo::Meta(key));
                self.link_meta
                    .insert(key, meta, 0)
                    .map_err(|e| full(e, names::LINK_META, "link"))
            }
        }
    }

    /// Removes both directions and the record of each of these links: one pass over the
    /// directions for all of them.
    pub(super) fn remove_links(&mut self, keys: &[LinkMetaKey]) -> Result<()> {
        let pairs: HashSet<(u32, u32)> = keys
            .iter()
            .map(|k| (k.low_ifindex, k.high_ifindex))
            .collect();
        self.remove_directions(|from, to| pairs.contains(&(from.min(to), from.max(to))))?;
        for key in keys {
            ignore_absent(self.link_meta.remove(key))?;
        }
        Ok(())
    }

    /// Deletes every directed link whose (ingress, target) ifindexes match.
    fn remove_directions(&mut self, doomed: impl Fn(u32, u32) -> bool) -> Result<()> {
        let keys: Vec<LinkKey> = self
            .directions()?
            .into_iter()
            .filter(|(k, t)| doomed(k.ingress_ifindex, t.target_ifindex))
            .map(|(k, _)| k)
            .collect();
        for key in keys {
            ignore_absent(self.links.remove(&key))?;
        }
        Ok(())
    }

    /// Deletes every link record whose (low, high) ifindexes match.
    fn remove_meta(&mut self, doomed: impl Fn(u32, u32) -> bool) -> Result<()> {
        let keys: Vec<LinkMetaKey> = self
            .link_meta
            .keys()
            .filter_map(Result::ok)
            .filter(|k| doomed(k.low_ifindex, k.high_ifindex))
            .collect();
        for key in keys {
            ignore_absent(self.link_meta.remove(&key))?;
        }
        Ok(())
    }

    /// Interfaces at either end of some directed link.
    pub(super) fn interfaces_in_use(&self) -> Result<HashSet<u32>> {
        Ok(self
            .directions()?
            .iter()
            .flat_map(|(k, t)| [k.ingress_ifindex, t.target_ifindex])
            .collect())
    }

    /// Forgets an interface and every link that touches it.
    pub(super) fn purge_interface(&mut self, ifindex: u32) -> Result<()> {
        let touches = |x: u32, y: u32| x == ifindex || y == ifindex;
        self.remove_directions(touches)?;
        self.remove_meta(touches)?;
        self.forget_tunnel_peer(ifindex)?;
        ignore_absent(self.endpoints.remove(&ifindex))?;
        ignore_absent(self.counters.remove(&ifindex))?;
        ignore_absent(self.sources.remove(&ifindex))?;
        ignore_absent(self.targets.remove(ifindex))
    }

    /// Forgets how frames of the endpoint of another node `id` are recognised on its tunnel.
    fn forget_tunnel_peer(&mut self, id: u32) -> Result<()> {
        let keys: Vec<TunnelPeerKey> = self
            .tunnel_peers
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, peer)| *peer == id)
            .map(|(key, _)| key)
            .collect();
        for key in keys {
            ignore_absent(self.tunnel_peers.remove(&key))?;
        }
        Ok(())
    }

    /// Drops entries that refer to an interface no longer managed.
    pub(super) fn drop_dangling(&mut self) -> Result<()> {
        let managed: Vec<u32> = self.managed()?.into_iter().map(|(i, _)| i).collect();
        let is_managed = |i: u32| managed.contains(&i);
        let dangling = |x: u32, y: u32| !is_managed(x) || !is_managed(y);
        self.remove_directions(dangling)?;
        self.remove_meta(dangling)?;
        let targets: Vec<_> = self
            .targets
            .keys()
            .filter_map(Result::ok)
            .filter(|i| !is_managed(*i))
            .collect();
        for ifindex in targets {
            ignore_absent(self.targets.remove(ifindex))?;
        }
        let counters: Vec<_> = self
            .counters
            .keys()
            .filter_map(Result::ok)
            .filter(|i| !is_managed(*i))
            .collect();
        for ifindex in counters {
            ignore_absent(self.counters.remove(&ifindex))?;
        }
        let sources: Vec<_> = self
            .sources
            .keys()
            .filter_map(Result::ok)
            .filter(|i| !is_managed(*i))
            .collect();
        for ifindex in sources {
            ignore_absent(self.sources.remove(&ifindex))?;
        }
        let peers: Vec<_> = self
            .tunnel_peers
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, id)| !is_managed(*id))
            .map(|(key, _)| key)
            .collect();
        for key in peers {
            ignore_absent(self.tunnel_peers.remove(&key))?;
        }
        Ok(())
    }
}

/// The 16-byte form the datapath compares: IPv6 as is, IPv4 v4-mapped. IPv4 first, in order.
/// The addresses a [`Sources`] record holds, IPv4 ones unmapped: the inverse of [`sources_of`].
pub(super) fn addresses_of(sources: &Sources) -> Vec<IpAddr> {
    sources.addrs[..(sources.count as usize).min(sources.addrs.len())]
        .iter()
        .map(|octets| {
            let v6 = std::net::Ipv6Addr::from(*octets);
            v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
        })
        .collect()
}

pub(super) fn sources_of(addrs: &[IpAddr]) -> Sources {
    let mut ordered: Vec<&IpAddr> = addrs.iter().collect();
    ordered.sort_by_key(|a| a.is_ipv6());
    Sources::new(ordered.into_iter().map(|a| match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }))
}

pub(super) fn absent_is_none<T>(result: Result<T, MapError>) -> Result<Option<T>> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(MapError::KeyNotFound) => Ok(None),
        // Deletes report a missing key as a plain ENOENT.
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

pub(super) fn ignore_absent(result: Result<(), MapError>) -> Result<()> {
    absent_is_none(result).map(|_| ())
}

/// A full map says E2BIG; name the map and the way out.
fn full(err: MapError, map: &str, what: &str) -> anyhow::Error {
    if let MapError::SyscallError(ref sys) = err
        && sys.io_error.raw_os_error() == Some(libc::E2BIG)
    {
        return anyhow!(
            "cannot add {what}: map {map} is full; raise --max-links/--max-endpoints on a fresh \
             pin directory or remove unused links"
        );
    }
    anyhow::Error::new(err).context(format!("cannot add {what} to {map}"))
}

#[cfg(test)]
mod source_tests {
    use super::*;

    #[test]
    fn sources_are_ipv4_mapped_first_and_capped_at_what_the_datapath_checks() {
        let v4: IpAddr = "10.231.9.10".parse().unwrap();
        let ll: IpAddr = "fe80::42:acff:fe11:a".parse().unwrap();
        let global: IpAddr = "fd00::a".parse().unwrap();
        let sources = sources_of(&[ll, global, v4]);
        assert_eq!(sources.count, 3);
        let mapped = match v4 {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(_) => unreachable!(),
        };
        assert_eq!(sources.addrs[0], mapped, "IPv4 first, v4-mapped");
        assert!(sources.contains(&mapped));
        let IpAddr::V6(ll6) = ll else { unreachable!() };
        assert!(sources.contains(&ll6.octets()));
        let other: std::net::Ipv6Addr = "fd00::c".parse().unwrap();
        assert!(!sources.contains(&other.octets()));
        // An empty slot is all zeros: `::` is never taken for one of them.
        assert!(!sources.contains(&[0; 16]));

        let many: Vec<IpAddr> = (1..=12u8)
            .map(|i| IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, i)))
            .collect();
        let capped = sources_of(&many);
        assert_eq!(capped.count as usize, MAX_SOURCES);
        let ninth = std::net::Ipv4Addr::new(10, 0, 0, 9)
            .to_ipv6_mapped()
            .octets();
        assert!(!capped.contains(&ninth), "past the cap: the bridge's");
    }
}
