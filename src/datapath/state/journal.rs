//! The journal that makes a multi-step change all-or-nothing: each step taken is written down
//! with how to undo it, and undone in reverse order unless the change commits.
use aya::Ebpf;
use dxdp_common::{LinkKey, LinkMetaKey, MacAddr};
use tracing::warn;

use super::{Maps, ignore_absent};
use crate::datapath::{fixups, pins};
use crate::{endpoint::Endpoint, netns::NetnsPath};

/// One step to take back if a change fails halfway.
pub(in crate::datapath) enum Undo {
    Endpoint(u32),
    Direction(LinkKey),
    /// A direction's families as they were.
    Closed(LinkKey, u8),
    Meta(LinkMetaKey),
    LinkPin(std::path::PathBuf),
    /// A remote task's MAC pinned on the bridge port of its tunnel.
    BridgeEntry(u32, MacAddr),
    Fixups {
        netns: NetnsPath,
        ifname: String,
        changed: u8,
    },
}

impl Undo {
    /// Reverting the fix-ups `changed` on the container side of `ep`'s veth.
    pub(in crate::datapath) fn fixups(ep: &Endpoint, changed: u8) -> Self {
        Undo::Fixups {
            netns: ep.netns.clone(),
            ifname: ep.ifname.clone(),
            changed,
        }
    }
}

/// Steps taken so far, undone in reverse order unless committed.
#[derive(Default)]
pub(in crate::datapath) struct Journal(Vec<Undo>);

impl Journal {
    pub(in crate::datapath) fn push(&mut self, step: Undo) {
        self.0.push(step);
    }

    pub(in crate::datapath) fn commit(&mut self) {
        self.0.clear();
    }

    pub(in crate::datapath) fn roll_back(&mut self, ebpf: &mut Ebpf) {
        let steps: Vec<_> = self.0.drain(..).rev().collect();
        let mut maps = match Maps::new(ebpf) {
            Ok(maps) => maps,
            Err(e) => {
                warn!("cannot roll back: {e:#}");
                return;
            }
        };
        for step in steps {
            let result = match step {
                Undo::Endpoint(ifindex) => {
                    let _ = maps.forget_tunnel_peer(ifindex);
                    let _ = maps.endpoints.remove(&ifindex);
                    let _ = maps.counters.remove(&ifindex);
                    let _ = maps.sources.remove(&ifindex);
                    ignore_absent(maps.targets.remove(ifindex))
                }
                Undo::Direction(key) => ignore_absent(maps.links.remove(&key)),
                Undo::Closed(key, closed) => maps.set_closed(&key, closed),
                Undo::Meta(key) => ignore_absent(maps.link_meta.remove(&key)),
                Undo::LinkPin(path) => pins::remove_if_present(&path),
                Undo::BridgeEntry(port, mac) => {
                    crate::netlink::remove_static_bridge_entry(port, &mac)
                }
                Undo::Fixups {
                    netns,
                    ifname,
                    changed,
                } => fixups::revert(&netns, &ifname, changed),
            };
            if let Err(e) = result {
                warn!("roll back step failed: {e:#}");
            }
        }
    }
}
