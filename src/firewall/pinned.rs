//! Links already pinned, held to the rules as they are now. A link is checked when it is made;
//! a rule that appears later must take it away too (fail closed), whoever made it, unless the
//! operator chose to bypass the firewall for it (recorded with the link). The watch removes what
//! this finds; `doctor` fails it when no watch runs.
//!
//! A pinned link is judged by what the datapath holds: each end's bridge port (the host veth)
//! and the addresses recorded for its container, which are the only ones its frames may carry
//! from and to over the link.
use std::net::IpAddr;

use anyhow::Result;

use super::{FamilyVerdict, RulesetCache, Side, refusal, verdict::listed};
use crate::{datapath::LinkRecord, family::Families, netlink::Interface};

/// The addresses recorded for the container behind a managed veth, by ifindex (`None`: not
/// managed): what the datapath holds ([`crate::datapath::Datapath::recorded_addresses`]).
pub type Recorded<'r> = dyn FnMut(u32) -> Result<Option<Vec<IpAddr>>> + 'r;

/// A pinned link a rule now covers, the families it may keep, and the one line that says which
/// rule.
#[derive(Debug)]
pub struct Covered {
    pub link: LinkRecord,
    /// What the link may still carry: empty when it must go.
    pub families: Families,
    pub message: String,
}

/// The links among `links` not made to bypass the firewall that carry a family the rules, as of
/// the cache's last refresh, now close: each with the families it may keep (none: it must go).
/// A link whose veth is gone is left to garbage collection.
pub fn covered(
    rules: &mut RulesetCache,
    recorded: &mut Recorded<'_>,
    host: &[Interface],
    links: &[LinkRecord],
    way_out: &str,
) -> Result<Vec<Covered>> {
    let mut out = Vec::new();
    for link in links.iter().filter(|l| !l.bypasses_firewall) {
        let Some((bridge, verdict)) = judged(rules, recorded, host, link)? else {
            continue;
        };
        let closed = link.families.and(verdict.closed());
        if closed.is_empty() {
            continue;
        }
        let left = link.families.and(closed.others());
        // A family the pair has no address of carries nothing: a link left with only such a
        // family is no link.
        let families = if left.and(verdict.carried()).is_empty() {
            Families::NONE
        } else {
            left
        };
        let message = if families.is_empty() {
            refusal(
                &link.low_name,
                &link.high_name,
                &bridge,
                &verdict.blockers(),
                way_out,
            )
        } else {
            format!(
                "{} and {} carry {families} only: their {closed} traffic goes back to bridge {}, \
                 where {} may drop or alter it",
                link.low_name,
                link.high_name,
                bridge,
                listed(&verdict.closing(closed))
            )
        };
        out.push(Covered {
            link: link.clone(),
            families,
            message,
        });
    }
    Ok(out)
}

/// What the rules, as of the cache's last refresh, say of a pinned link's traffic, with its
/// bridge; `None` when a veth of it is gone or not managed.
pub fn judged(
    rules: &mut RulesetCache,
    recorded: &mut Recorded<'_>,
    host: &[Interface],
    link: &LinkRecord,
) -> Result<Option<(String, FamilyVerdict)>> {
    let (Some(low), Some(high)) = (
        port(recorded, host, link.low_ifindex)?,
        port(recorded, host, link.high_ifindex)?,
    ) else {
        return Ok(None);
    };
    let verdict = rules.between_ports(&low.bridge, low.side(), high.side())?;
    Ok(Some((low.bridge, verdict)))
}

/// A managed veth as the rules see it.
struct Port {
    index: u32,
    name: String,
    bridge: String,
    addrs: Vec<IpAddr>,
}

impl Port {
    fn side(&self) -> Side<'_> {
        Side {
            index: self.index,
            port: &self.name,
            addrs: &self.addrs,
        }
    }
}

fn port(recorded: &mut Recorded<'_>, host: &[Interface], ifindex: u32) -> Result<Option<Port>> {
    // A task of another node enters the bridge through the overlay's VXLAN device (one per
    // sandbox, whose namespace `host` is); any other end through its own veth.
    let found = if dxdp_common::is_remote_endpoint(ifindex) {
        host.iter()
            .find(|i| i.kind.as_deref() == Some("vxlan") && i.master.is_some())
    } else {
        host.iter().find(|i| i.index == ifindex)
    };
    let Some(veth) = found else {
        return Ok(None);
    };
    let Some(bridge) = host.iter().find(|i| Some(i.index) == veth.master) else {
        return Ok(None);
    };
    Ok(recorded(ifindex)?.map(|addrs| Port {
        index: ifindex,
        name: veth.name.clone(),
        bridge: bridge.name.clone(),
        addrs,
    }))
}
