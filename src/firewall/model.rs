//! One model for iptables and nftables rules, and the walk that decides whether a linked pair's
//! packets would all be accepted by a chain.
//!
//! Each condition of a rule is evaluated against the pair's packets as "true for all of them",
//! "for none" or "maybe for some" ([`Tri`]). A rule that may match and would stop or alter a
//! packet (drop, reject, queue, NAT, a target we do not know) blocks the link; a rule that
//! certainly matches and accepts ends the walk; everything else lets the walk go on. So a
//! chain "passes" only if every packet of the pair provably ends in an accept.
use std::{collections::HashMap, fmt, net::IpAddr};

use super::{
    addr::{Net, meet},
    tri::Tri,
};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(super) enum Family {
    #[default]
    V4,
    V6,
}

/// Which interface a condition names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dev {
    /// iptables `-i`, nft `iifname`: the bridge under br_netfilter, the port in the bridge family.
    In,
    Out,
    /// iptables `--physdev-in/out`: the bridge port.
    PhysIn,
    PhysOut,
    /// nft bridge family `meta ibrname/obrname`.
    BridgeIn,
    BridgeOut,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    Src,
    Dst,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Cond {
    /// Interface names; a trailing `+` (iptables) or `*` (nft) is a wildcard.
    Dev {
        dev: Dev,
        names: Vec<String>,
        negate: bool,
    },
    Addr {
        end: End,
        nets: Vec<Net>,
        negate: bool,
    },
    /// The packet is of this family (nft payload `ip …`, `meta nfproto ipv4`).
    Family { family: Family, negate: bool },
    /// The layer-4 protocol is one of these numbers (iptables `-p`, nft `meta l4proto`).
    Proto { protos: Vec<u8>, negate: bool },
    /// The source or destination port lies in one of these inclusive ranges (`--dport 80`,
    /// `--dports 80,8000:8080`, nft `tcp dport { 80, 443 }`).
    Port {
        end: End,
        ranges: Vec<(u16, u16)>,
        negate: bool,
    },
    /// The destination is an address of this host (`-m addrtype --dst-type LOCAL`).
    DstLocal { negate: bool },
    /// The packet's mark, masked, equals `value` (`-m mark --mark VALUE[/MASK]`, nft
    /// `meta mark VALUE`, `meta mark & MASK == VALUE`).
    Mark { value: u32, mask: u32, negate: bool },
    /// The connection's conntrack state is one of `states` ([`CtStates`] bits; `-m conntrack
    /// --ctstate`, `-m state --state`, nft `ct state`).
    CtState { states: u8, negate: bool },
    /// Holds for any bridged packet (`--physdev-is-bridged`).
    Always,
    /// Holds for none of the pair's packets (`meta protocol arp`).
    Never,
    /// A condition this module does not evaluate: true for some packets, perhaps.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Action {
    Accept,
    /// Drop, reject, queue, NAT, marks, or a target we do not know: the pair's packets may not
    /// come through unchanged.
    Block,
    Return,
    Jump(String),
    Goto(String),
    /// Counting and logging: the walk goes on.
    Continue,
    /// Destination NAT to `address:port` as the tool prints it (`172.18.0.2:80`,
    /// `[fd00::2]:80`): Docker's publishing of a port. It alters the packet, so it blocks,
    /// except where a flow expects exactly this translation ([`Flow::expected_dnat`]).
    Dnat(String),
}

#[derive(Clone, Debug, PartialEq)]
pub(super) struct Rule {
    pub(crate) conds: Vec<Cond>,
    pub(crate) action: Action,
    /// As the tool that wrote it prints it, for messages.
    pub(crate) text: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Chain {
    pub(crate) rules: Vec<Rule>,
    /// A base chain's policy: `Some(true)` accept, `Some(false)` drop; `None` for a user chain.
    pub(crate) policy_accepts: Option<bool>,
}

/// Where a base chain sits, which decides how the pair's interfaces look to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hook {
    Prerouting,
    Forward,
    Postrouting,
    /// netdev family, on one device.
    Ingress,
    Egress,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) struct Base {
    pub(crate) chain: String,
    pub(crate) hook: Hook,
    /// netdev chains: the devices they are bound to.
    pub(crate) devices: Vec<String>,
    /// A nat chain (nft `type nat`, the iptables nat table).
    pub(crate) nat: bool,
}

/// How packets reach a set of chains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layer {
    /// iptables tables and nft ip/ip6/inet tables: bridged packets reach them only through
    /// br_netfilter, with the bridge as in/out device and the ports as physdev.
    Inet,
    /// nft bridge tables: the ports are the in/out devices.
    Bridge,
    /// nft netdev tables: one device's ingress or egress.
    Netdev,
}

/// The chains of one table of one tool.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Table {
    /// e.g. "iptables (nf_tables) filter", "nftables inet filter".
    pub(crate) name: String,
    /// The families whose packets this table sees; both for nft inet, bridge and netdev.
    pub(crate) families: Vec<Family>,
    pub(crate) layer: Layer,
    pub(crate) chains: HashMap<String, Chain>,
    pub(crate) bases: Vec<Base>,
    /// The iptables nat table's PREROUTING and POSTROUTING: only a published port's first
    /// packets meet them, never a linked pair's (Docker's nat rules exclude its bridges), so
    /// only the inbound walk reads them.
    pub(crate) nat_bases: Vec<Base>,
}

impl Table {
    /// Whether a rule of this table translates to `to` (Docker publishing the port here).
    pub(super) fn has_dnat(&self, to: &str) -> bool {
        self.chains
            .values()
            .flat_map(|c| &c.rules)
            .any(|r| matches!(&r.action, Action::Dnat(t) if t == to))
    }
}

/// One direction of a pair's traffic as one hook sees it. What is `None` (or empty) is
/// unknown: conditions on it are `Maybe`.
#[derive(Clone, Debug, Default)]
pub(super) struct Flow<'a> {
    pub(crate) family: Family,
    pub(crate) src: &'a [IpAddr],
    pub(crate) dst: &'a [IpAddr],
    pub(crate) dev_in: Option<&'a str>,
    pub(crate) dev_out: Option<&'a str>,
    pub(crate) phys_in: Option<&'a str>,
    pub(crate) phys_out: Option<&'a str>,
    pub(crate) bridge_in: Option<&'a str>,
    pub(crate) bridge_out: Option<&'a str>,
    /// IANA protocol number (6 TCP, 17 UDP); unknown for a linked pair.
    pub(crate) proto: Option<u8>,
    pub(crate) sport: Option<u16>,
    pub(crate) dport: Option<u16>,
    /// Whether the destination is one of the host's own addresses.
    pub(crate) dst_local: Option<bool>,
    /// The packets' mark (`skb->mark`), where it is known.
    pub(crate) mark: Option<u32>,
    /// The conntrack state of every one of the packets ([`CtStates`] bit), where it is known.
    pub(crate) ct_state: Option<u8>,
    /// Where `src` (or `dst`) is empty, the unknown addresses are none of these: a client of
    /// a published port is not on the host's container networks (the fast path leaves such
    /// packets to the stack).
    pub(crate) src_outside: &'a [Net],
    pub(crate) dst_outside: &'a [Net],
    /// The one DNAT (`address:port`) this flow's packets are meant to get; see [`Action::Dnat`].
    pub(crate) expected_dnat: Option<&'a str>,
}

/// Conntrack states as rules name them, as bits of [`Cond::CtState`].
pub(super) struct CtStates;

impl CtStates {
    pub(super) const INVALID: u8 = 1 << 0;
    pub(super) const NEW: u8 = 1 << 1;
    pub(super) const ESTABLISHED: u8 = 1 << 2;
    pub(super) const RELATED: u8 = 1 << 3;
    pub(super) const UNTRACKED: u8 = 1 << 4;

    /// The states a comma-separated list names (`RELATED,ESTABLISHED`, any case); `None` for
    /// one this model does not evaluate (`SNAT` and `DNAT` are properties of a connection's
    /// NAT, not states) or an empty list.
    pub(super) fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<u8> {
        let mut states = 0;
        for name in names {
            states |= match name.trim().to_ascii_lowercase().as_str() {
                "invalid" => Self::INVALID,
                "new" => Self::NEW,
                "established" => Self::ESTABLISHED,
                "related" => Self::RELATED,
                "untracked" => Self::UNTRACKED,
                _ => return None,
            };
        }
        (states != 0).then_some(states)
    }
}

/// How a chain's end and its accepts count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// A filter chain: a packet that is accepted or falls off an accepting policy goes on.
    Filter,
    /// A nat chain that must translate every packet ([`Flow::expected_dnat`]): an accept or
    /// the chain's end leaves a packet untranslated, on a path the fast path does not take.
    Translate,
}

/// The rule (or policy) that keeps a pair from being linked.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Blocker {
    pub table: String,
    pub chain: String,
    /// The rule's text, or `policy drop`.
    pub rule: String,
}

impl Blocker {
    /// A qdisc or classic filter on a veth ([`super::tc`]), not a netfilter rule.
    pub(crate) fn is_traffic_control(&self) -> bool {
        self.table.starts_with("tc on ")
    }
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} chain {}: {}", self.table, self.chain, self.rule)
    }
}

/// Nesting deeper than this is not followed (a loop, or a ruleset we refuse to reason about).
const MAX_DEPTH: usize = 32;

impl Cond {
    fn eval(&self, flow: &Flow<'_>) -> Tri {
        match self {
            Cond::Dev { dev, names, negate } => {
                let seen = match dev {
                    Dev::In => flow.dev_in,
                    Dev::Out => flow.dev_out,
                    Dev::PhysIn => flow.phys_in,
                    Dev::PhysOut => flow.phys_out,
                    Dev::BridgeIn => flow.bridge_in,
                    Dev::BridgeOut => flow.bridge_out,
                };
                match seen {
                    None => Tri::Maybe,
                    Some(name) if names.iter().any(|p| name_matches(p, name)) => {
                        Tri::Yes.negate(*negate)
                    }
                    Some(_) => Tri::No.negate(*negate),
                }
            }
            Cond::Addr { end, nets, negate } => {
                let (addrs, outside) = match end {
                    End::Src => (flow.src, flow.src_outside),
                    End::Dst => (flow.dst, flow.dst_outside),
                };
                if addrs.is_empty() && nets.iter().all(|n| outside.iter().any(|o| n.within(o))) {
                    return Tri::No.negate(*negate);
                }
                meet(nets, addrs).negate(*negate)
            }
            Cond::Proto { protos, negate } => match flow.proto {
                None => Tri::Maybe,
                Some(p) => Tri::from(protos.contains(&p)).negate(*negate),
            },
            Cond::Port {
                end,
                ranges,
                negate,
            } => {
                let port = match end {
                    End::Src => flow.sport,
                    End::Dst => flow.dport,
                };
                match port {
                    None => Tri::Maybe,
                    Some(p) => {
                        Tri::from(ranges.iter().any(|&(lo, hi)| lo <= p && p <= hi)).negate(*negate)
                    }
                }
            }
            Cond::DstLocal { negate } => match flow.dst_local {
                None => Tri::Maybe,
                Some(local) => Tri::from(local).negate(*negate),
            },
            Cond::Mark {
                value,
                mask,
                negate,
            } => match flow.mark {
                None => Tri::Maybe,
                Some(mark) => Tri::from(mark & mask == *value).negate(*negate),
            },
            Cond::CtState { states, negate } => match flow.ct_state {
                None => Tri::Maybe,
                Some(state) => Tri::from(states & state != 0).negate(*negate),
            },
            Cond::Family { family, negate } => {
                if *family == flow.family {
                    Tri::Yes.negate(*negate)
                } else {
                    Tri::No.negate(*negate)
                }
            }
            Cond::Always => Tri::Yes,
            Cond::Never => Tri::No,
            Cond::Unknown => Tri::Maybe,
        }
    }
}

fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern
        .strip_suffix('+')
        .or_else(|| pattern.strip_suffix('*'))
    {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

impl Rule {
    pub(super) fn matches(&self, flow: &Flow<'_>) -> Tri {
        let mut all = Tri::Yes;
        for cond in &self.conds {
            match cond.eval(flow) {
                Tri::No => return Tri::No,
                Tri::Maybe => all = Tri::Maybe,
                Tri::Yes => {}
            }
        }
        all
    }
}

enum Exit {
    /// Every packet that reached the chain was accepted.
    Accepted,
    /// Some or all packets left the chain (its end or a `return`) to the caller.
    Fell,
}

impl Table {
    /// `Ok` if every packet of `flow` reaching base chain `base` is accepted by this table.
    pub(super) fn passes(&self, base: &Base, flow: &Flow<'_>) -> Result<(), Blocker> {
        self.passes_as(base, flow, Mode::Filter)
    }

    /// [`Table::passes`], with a chain's accepts and end counted as `mode` says.
    pub(super) fn passes_as(
        &self,
        base: &Base,
        flow: &Flow<'_>,
        mode: Mode,
    ) -> Result<(), Blocker> {
        let Some(chain) = self.chains.get(&base.chain) else {
            return match (mode, flow.expected_dnat) {
                (Mode::Translate, Some(to)) => Err(self.untranslated(&base.chain, to)),
                _ => Ok(()),
            };
        };
        match self.walk(&base.chain, chain, flow, mode, 0)? {
            Exit::Accepted => Ok(()),
            Exit::Fell => match (mode, chain.policy_accepts) {
                (Mode::Translate, _) => Err(self.untranslated(
                    &base.chain,
                    flow.expected_dnat.unwrap_or("the published port"),
                )),
                (Mode::Filter, Some(false)) => {
                    Err(self.blocker(&base.chain, "policy drop".to_owned()))
                }
                (Mode::Filter, _) => Ok(()),
            },
        }
    }

    fn untranslated(&self, chain: &str, to: &str) -> Blocker {
        self.blocker(
            chain,
            format!("some packets reach the chain's end without Docker's DNAT to {to}"),
        )
    }

    fn blocker(&self, chain: &str, rule: String) -> Blocker {
        Blocker {
            table: self.name.clone(),
            chain: chain.to_owned(),
            rule,
        }
    }

    fn walk(
        &self,
        name: &str,
        chain: &Chain,
        flow: &Flow<'_>,
        mode: Mode,
        depth: usize,
    ) -> Result<Exit, Blocker> {
        for rule in &chain.rules {
            let matched = rule.matches(flow);
            if matched == Tri::No {
                continue;
            }
            let certain = matched == Tri::Yes;
            match &rule.action {
                Action::Continue => {}
                // In a nat chain an accept ends the translation: the packet stays on the host.
                Action::Accept if mode == Mode::Translate => {
                    return Err(self.blocker(name, rule.text.clone()));
                }
                Action::Accept if certain => return Ok(Exit::Accepted),
                Action::Accept => {}
                Action::Dnat(to) if Some(to.as_str()) == flow.expected_dnat => {
                    if certain {
                        return Ok(Exit::Accepted);
                    }
                }
                Action::Dnat(_) => return Err(self.blocker(name, rule.text.clone())),
                Action::Return if certain => return Ok(Exit::Fell),
                Action::Return => {}
                Action::Block => return Err(self.blocker(name, rule.text.clone())),
                Action::Jump(target) | Action::Goto(target) => {
                    let Some(callee) = self.chains.get(target) else {
                        return Err(
                            self.blocker(name, format!("{} (no chain {target})", rule.text))
                        );
                    };
                    if depth >= MAX_DEPTH {
                        return Err(self.blocker(
                            name,
                            format!("{} (chains nested deeper than {MAX_DEPTH})", rule.text),
                        ));
                    }
                    let end = self.walk(target, callee, flow, mode, depth + 1)?;
                    let goto = matches!(rule.action, Action::Goto(_));
                    match end {
                        Exit::Accepted if certain => return Ok(Exit::Accepted),
                        // A goto does not come back: its end is this chain's end.
                        Exit::Fell if certain && goto => return Ok(Exit::Fell),
                        _ => {}
                    }
                }
            }
        }
        Ok(Exit::Fell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firewall::addr::Prefix;

    fn flow<'a>(src: &'a [IpAddr], dst: &'a [IpAddr]) -> Flow<'a> {
        Flow {
            family: Family::V4,
            src,
            dst,
            dev_in: Some("br-x"),
            dev_out: Some("br-x"),
            phys_in: Some("vetha"),
            phys_out: Some("vethb"),
            ..Flow::default()
        }
    }

    fn rule(conds: Vec<Cond>, action: Action) -> Rule {
        Rule {
            conds,
            action,
            text: "r".into(),
        }
    }

    fn dev(dev: Dev, name: &str, negate: bool) -> Cond {
        Cond::Dev {
            dev,
            names: vec![name.into()],
            negate,
        }
    }

    fn table(chains: Vec<(&str, Chain)>) -> Table {
        Table {
            name: "t".into(),
            families: vec![Family::V4],
            layer: Layer::Inet,
            chains: chains.into_iter().map(|(n, c)| (n.to_owned(), c)).collect(),
            bases: vec![],
            nat_bases: vec![],
        }
    }

    fn base() -> Base {
        Base {
            chain: "FORWARD".into(),
            hook: Hook::Forward,
            devices: vec![],
            nat: false,
        }
    }

    #[test]
    fn interface_names_and_wildcards() {
        assert!(name_matches("br-x", "br-x"));
        assert!(name_matches("br+", "br-x"));
        assert!(name_matches("veth*", "veth12"));
        assert!(!name_matches("br-x", "br-xy"));
    }

    #[test]
    fn a_certain_accept_before_a_drop_passes_and_a_possible_one_does_not() {
        let a = ["10.0.0.2".parse().unwrap()];
        let b = ["10.0.0.3".parse().unwrap()];
        let drop_all = rule(vec![], Action::Block);
        let forward = |first: Rule| Chain {
            rules: vec![first, drop_all.clone()],
            policy_accepts: Some(true),
        };
        let certain = rule(vec![dev(Dev::In, "br-x", false)], Action::Accept);
        let possible = rule(vec![Cond::Unknown], Action::Accept);
        let t = table(vec![("FORWARD", forward(certain))]);
        assert_eq!(t.passes(&base(), &flow(&a, &b)), Ok(()));
        let t = table(vec![("FORWARD", forward(possible))]);
        assert!(t.passes(&base(), &flow(&a, &b)).is_err());
    }

    #[test]
    fn jumps_returns_gotos_and_policies() {
        let a = ["10.0.0.2".parse().unwrap()];
        let b = ["10.0.0.3".parse().unwrap()];
        let user = Chain {
            rules: vec![rule(vec![dev(Dev::Out, "br-other", false)], Action::Block)],
            policy_accepts: None,
        };
        let forward = |then: Action, policy| Chain {
            rules: vec![
                rule(vec![], Action::Jump("USER".into())),
                rule(vec![], then),
            ],
            policy_accepts: Some(policy),
        };
        let t = table(vec![
            ("USER", user.clone()),
            ("FORWARD", forward(Action::Accept, false)),
        ]);
        assert_eq!(t.passes(&base(), &flow(&a, &b)), Ok(()));
        let t = table(vec![
            ("USER", user.clone()),
            ("FORWARD", forward(Action::Continue, false)),
        ]);
        assert_eq!(
            t.passes(&base(), &flow(&a, &b)).unwrap_err().rule,
            "policy drop"
        );
        // A goto into a chain that falls off its end ends the calling chain too.
        let goto = Chain {
            rules: vec![
                rule(vec![], Action::Goto("USER".into())),
                rule(vec![], Action::Block),
            ],
            policy_accepts: Some(true),
        };
        let t = table(vec![("USER", user), ("FORWARD", goto)]);
        assert_eq!(t.passes(&base(), &flow(&a, &b)), Ok(()));
    }

    #[test]
    fn a_rule_for_other_addresses_or_interfaces_blocks_nothing() {
        let a = ["10.0.0.2".parse().unwrap()];
        let b = ["10.0.0.3".parse().unwrap()];
        let other = Prefix::parse("10.0.0.9").unwrap();
        let mine = Prefix::parse("10.0.0.2").unwrap();
        let drop_src = |p: Prefix, negate| {
            rule(
                vec![Cond::Addr {
                    end: End::Src,
                    nets: vec![Net::Prefix(p)],
                    negate,
                }],
                Action::Block,
            )
        };
        let cases = [
            ("other source", drop_src(other, false), true),
            ("this source", drop_src(mine, false), false),
            ("not this source", drop_src(mine, true), true),
            ("not another source", drop_src(other, true), false),
            (
                "other bridge",
                rule(vec![dev(Dev::In, "br-y", false)], Action::Block),
                true,
            ),
            (
                "not this bridge",
                rule(vec![dev(Dev::In, "br-x", true)], Action::Block),
                true,
            ),
            (
                "its port",
                rule(vec![dev(Dev::PhysIn, "vetha", false)], Action::Block),
                false,
            ),
        ];
        for (name, r, passes) in cases {
            let t = table(vec![(
                "FORWARD",
                Chain {
                    rules: vec![r],
                    policy_accepts: Some(true),
                },
            )]);
            assert_eq!(t.passes(&base(), &flow(&a, &b)).is_ok(), passes, "{name}");
        }
    }

    #[test]
    fn a_loop_of_jumps_blocks_instead_of_recursing_forever() {
        let a = ["10.0.0.2".parse().unwrap()];
        let looping = Chain {
            rules: vec![rule(vec![Cond::Unknown], Action::Jump("FORWARD".into()))],
            policy_accepts: Some(true),
        };
        let t = table(vec![("FORWARD", looping)]);
        assert!(t.passes(&base(), &flow(&a, &a)).is_err());
    }
}
