//! What the XDP datapath needs from the container side of a veth, applied and undone.
use anyhow::{Context, Result, anyhow};
use dxdp_common::{FIXUP_GRO_ENABLED, FIXUP_TX_CSUM_DISABLED};

use crate::{
    endpoint::Endpoint,
    ethtool::{self, Feature},
    netlink,
    netns::{self, NetnsPath},
};

/// Turns GRO on (a frame redirected into a veth by XDP is dropped unless the receiving peer has
/// NAPI) and tx checksum offload off (XDP cannot finish a CHECKSUM_PARTIAL frame) on the
/// container-side interface. Returns what was actually changed, so only that is undone.
pub(super) fn apply(ep: &Endpoint) -> Result<u8> {
    let ifname = ep.ifname.clone();
    ep.netns
        .run(move || {
            let mut changed = 0;
            if !ethtool::get(&ifname, Feature::Gro)? {
                ethtool::set(&ifname, Feature::Gro, true)?;
                changed |= FIXUP_GRO_ENABLED;
            }
            if ethtool::get(&ifname, Feature::TxChecksum)? {
                ethtool::set(&ifname, Feature::TxChecksum, false)?;
                changed |= FIXUP_TX_CSUM_DISABLED;
            }
            Ok(changed)
        })
        .with_context(|| format!("cannot prepare {} for the xdp datapath", ep.label))
}

/// Undoes `changed` on `ifname` inside `netns`.
pub(super) fn revert(netns: &NetnsPath, ifname: &str, changed: u8) -> Result<()> {
    let ifname = ifname.to_owned();
    netns.run(move || {
        if changed & FIXUP_GRO_ENABLED != 0 {
            ethtool::set(&ifname, Feature::Gro, false)?;
        }
        if changed & FIXUP_TX_CSUM_DISABLED != 0 {
            ethtool::set(&ifname, Feature::TxChecksum, true)?;
        }
        Ok(())
    })
}

/// Undoes the fix-ups recorded for a managed interface, finding its container's namespace by
/// inode. A container that is gone took its interface with it: nothing to undo then.
pub(super) fn restore(rec: &dxdp_common::Endpoint) -> Result<()> {
    let Some(ns) = netns::find_by_inode(rec.netns_ino) else {
        return Ok(());
    };
    let ifname = netlink::interfaces(&ns)?
        .into_iter()
        .find(|i| i.index == rec.peer_ifindex && i.mac == Some(rec.mac))
        .map(|i| i.name)
        .ok_or_else(|| anyhow!("interface {} is gone from {ns}", rec.peer_ifindex))?;
    revert(&ns, &ifname, rec.fixups)
}
