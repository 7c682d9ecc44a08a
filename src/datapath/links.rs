//! Installing and removing links between two endpoints: the maps of both directions, the
//! programs on both veths, the bridge entry of a task of another node — all or nothing.
use anyhow::{Result, bail};
use dxdp_common::{LinkMetaKey, is_remote_endpoint};
use tracing::{info, warn};

use super::{
    Datapath, LinkRecord, Pins, Traffic, attach, fixups, pins,
    record::{link_meta, meta_key, to_record},
    state,
};
use crate::{
    choice::{Kind, Origin},
    endpoint::Endpoint,
    family::Families,
    netlink::Interface,
};

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

impl Datapath {
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

    pub(super) fn release_interface(&mut self, ifindex: u32) -> Result<()> {
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
pub(super) fn release_tunnel_peer(
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
