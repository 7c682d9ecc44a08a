//! Per-veth traffic control that the bridge path runs and a link skips (issue 22, 2b): a root
//! qdisc other than veth's `noqueue` (a `tbf` rate limit, `netem`, `htb` with its filters) on
//! either end shapes or drops what leaves toward the container, and classic filters under an
//! `ingress` or `clsact` qdisc (`cls_bpf`, `u32`, `flower`, … returning `TC_ACT_SHOT`) act on
//! what the container sends. A link redirects at TCX or XDP, before the classic ingress filters
//! of the sender's veth and around the receiver's veth's egress, so such policy is treated like
//! a firewall rule: it keeps the pair on the bridge unless the operator bypasses it. TCX programs
//! (other tools' and dxdp's own) are not policy here: they keep running first, in TCX order.
use anyhow::Result;

use super::model::Blocker;
use crate::netlink::{self, Qdisc};

/// The host's qdiscs at one moment; filters are asked for per veth, only where an `ingress` or
/// `clsact` qdisc could hold some.
#[derive(Debug, Default)]
pub(crate) struct TcState {
    qdiscs: Vec<Qdisc>,
}

impl TcState {
    /// One dump of every qdisc of the host's namespace.
    pub(super) fn read() -> Result<Self> {
        Ok(Self {
            qdiscs: netlink::host_qdiscs()?,
        })
    }

    /// What on the veth with this ifindex and name a link would skip.
    pub(crate) fn on(&self, index: u32, name: &str) -> Result<Vec<Blocker>> {
        let mut out = Vec::new();
        let blocker = |hook: &str, what: String| Blocker {
            table: format!("tc on {name}"),
            chain: hook.to_owned(),
            rule: what,
        };
        for q in self.qdiscs.iter().filter(|q| q.index == index) {
            if q.root && q.kind != "noqueue" {
                out.push(blocker("root", format!("qdisc {}", q.kind)));
            }
            let hooks: &[(&str, bool)] = match q.kind.as_str() {
                "clsact" => &[("ingress", false), ("egress", true)],
                "ingress" => &[("ingress", false)],
                _ => &[],
            };
            for &(hook, egress) in hooks {
                let mut kinds = netlink::host_filters(index, egress)?;
                kinds.sort();
                kinds.dedup();
                for kind in kinds {
                    out.push(blocker(hook, format!("filter {kind}")));
                }
            }
        }
        Ok(out)
    }
}
