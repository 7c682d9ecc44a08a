//! Whether a task of another node that a link reaches is still where it was: its overlay's
//! VXLAN device is there, and Swarm's gossip still lists the task's MAC on it.
use std::collections::HashMap;

use dxdp_common::Endpoint as EndpointRec;
use tracing::warn;

use crate::netlink::{self, Interface, MacAddr};

/// The MACs of other nodes' tasks each VXLAN device knows, read once per device per sweep.
#[derive(Default)]
pub(super) struct Tunnels {
    macs: HashMap<u32, Vec<MacAddr>>,
}

impl Tunnels {
    /// Whether the task recorded in `rec` is still reached through its tunnel: the device is a
    /// VXLAN device of this namespace (`host`), and a permanent neighbour entry there carries
    /// the task's MAC (gossip removes it when the task goes). What cannot be read counts as
    /// gone: the link then takes the bridge, which is Docker's own path.
    pub(super) fn still_reaches(&mut self, host: &[Interface], rec: &EndpointRec) -> bool {
        let tunnel = rec.tunnel_ifindex;
        let is_vxlan = host
            .iter()
            .any(|i| i.index == tunnel && i.kind.as_deref() == Some("vxlan"));
        if !is_vxlan {
            return false;
        }
        let macs = self.macs.entry(tunnel).or_insert_with(|| {
            match netlink::permanent_neighbours(tunnel) {
                Ok(neighbours) => neighbours.into_iter().map(|(_, mac)| mac).collect(),
                Err(err) => {
                    warn!(tunnel, "{err:#}");
                    Vec::new()
                }
            }
        });
        macs.contains(&rec.mac)
    }
}
