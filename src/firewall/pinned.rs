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

use super::{RulesetCache, Side, refusal};
use crate::{datapath::LinkRecord, netlink::Interface};

/// The addresses recorded for the container behind a managed veth, by ifindex (`None`: not
/// managed): what the datapath holds ([`crate::datapath::Datapath::recorded_addresses`]).
pub type Recorded<'r> = dyn FnMut(u32) -> Result<Option<Vec<IpAddr>>> + 'r;

/// A pinned link a rule now covers, and the one line that says which.
#[derive(Debug)]
pub struct Covered {
    pub link: LinkRecord,
    pub message: String,
}

/// The links among `links` not made to bypass the firewall that the rules, as of the cache's
/// last refresh, would now refuse. A link whose veth is gone is left to garbage collection.
pub fn covered(
    rules: &mut RulesetCache,
    recorded: &mut Recorded<'_>,
    host: &[Interface],
    links: &[LinkRecord],
    way_out: &str,
) -> Result<Vec<Covered>> {
    let mut out = Vec::new();
    for link in links.iter().filter(|l| !l.bypasses_firewall) {
        let (Some(low), Some(high)) = (
            port(recorded, host, link.low_ifindex)?,
            port(recorded, host, link.high_ifindex)?,
        ) else {
            continue;
        };
        let blockers = rules.between_ports(&low.bridge, low.side(), high.side())?;
        if !blockers.is_empty() {
            out.push(Covered {
                link: link.clone(),
                message: refusal(
                    &link.low_name,
                    &link.high_name,
                    &low.bridge,
                    &blockers,
                    way_out,
                ),
            });
        }
    }
    Ok(out)
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
    let Some(veth) = host.iter().find(|i| i.index == ifindex) else {
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
