//! The nftables ruleset (`nft -j list ruleset`) as [`Table`]s.
//!
//! Chains hooked where a bridged pair's packets pass are kept as base chains: prerouting,
//! forward and postrouting in the ip, ip6, inet and bridge families, and every netdev (or inet
//! ingress) chain, whose devices nft 1.0's JSON does not name. Tables that iptables-nft
//! manages are left to the iptables reader, which shows their rules as the operator wrote them.
use std::{collections::HashMap, net::IpAddr};

use serde_json::Value;

use super::{
    addr::{Net, Prefix},
    model::{Action, Base, Cond, CtStates, Dev, End, Family, Hook, Layer, Rule, Table},
};

/// Parses the JSON ruleset. `skip(family, table)` says which tables another reader covers;
/// `listing` adds what only the text listing shows.
pub(super) fn parse(
    json: &str,
    skip: impl Fn(&str, &str) -> bool,
    listing: &Listing,
) -> Result<Vec<Table>, String> {
    let root: Value =
        serde_json::from_str(json).map_err(|e| format!("nft -j list ruleset: not JSON: {e}"))?;
    let items = root
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or("nft -j list ruleset: no \"nftables\" array")?;
    let mut tables: HashMap<(String, String), Table> = HashMap::new();
    let key = |o: &Value| {
        let s = |k: &str| {
            o.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        (s("family"), s("table"), s("name"), s("chain"))
    };
    for item in items {
        if let Some(t) = item.get("table") {
            let (family, _, name, _) = key(t);
            let Some((families, layer)) = layer(&family) else {
                continue;
            };
            if skip(&family, &name) {
                continue;
            }
            tables.insert(
                (family.clone(), name.clone()),
                Table {
                    name: format!("nftables {family} {name}"),
                    families,
                    layer,
                    chains: HashMap::new(),
                    bases: Vec::new(),
                    nat_bases: Vec::new(),
                },
            );
        } else if let Some(c) = item.get("chain") {
            let (family, table, name, _) = key(c);
            let Some(t) = tables.get_mut(&(family.clone(), table)) else {
                continue;
            };
            let chain = t.chains.entry(name.clone()).or_default();
            if let Some(hook) = c.get("hook").and_then(Value::as_str) {
                chain.policy_accepts =
                    Some(c.get("policy").and_then(Value::as_str) != Some("drop"));
                if let Some(hook) = base_hook(&family, hook) {
                    let devices = listing
                        .devices
                        .get(&(family.clone(), c_table(c), name.clone()))
                        .cloned()
                        .unwrap_or_default();
                    t.bases.push(Base {
                        chain: name,
                        hook,
                        devices,
                        nat: c.get("type").and_then(Value::as_str) == Some("nat"),
                    });
                }
            }
        } else if let Some(r) = item.get("rule") {
            let (family, table, _, chain) = key(r);
            let Some(t) = tables.get_mut(&(family.clone(), table.clone())) else {
                continue;
            };
            let handle = r.get("handle").and_then(Value::as_u64).unwrap_or_default();
            let exprs = r.get("expr").and_then(Value::as_array).map(Vec::as_slice);
            let shown = listing
                .texts
                .get(&(family.clone(), table.clone(), chain.clone(), handle))
                .cloned()
                .unwrap_or_else(|| format!("rule handle {handle}"));
            let rule = rule(exprs.unwrap_or_default(), shown);
            t.chains.entry(chain).or_default().rules.push(rule);
        }
    }
    let mut tables: Vec<Table> = tables.into_values().collect();
    tables.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tables)
}

fn c_table(chain: &Value) -> String {
    chain
        .get("table")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn layer(family: &str) -> Option<(Vec<Family>, Layer)> {
    let both = vec![Family::V4, Family::V6];
    Some(match family {
        "ip" => (vec![Family::V4], Layer::Inet),
        "ip6" => (vec![Family::V6], Layer::Inet),
        "inet" => (both, Layer::Inet),
        "bridge" => (both, Layer::Bridge),
        "netdev" => (both, Layer::Netdev),
        // arp tables see ARP only, which dxdp never redirects (it is broadcast or answered
        // before any IP packet of the pair exists).
        _ => return None,
    })
}

fn base_hook(family: &str, hook: &str) -> Option<Hook> {
    match hook {
        "prerouting" => Some(Hook::Prerouting),
        "forward" => Some(Hook::Forward),
        "postrouting" => Some(Hook::Postrouting),
        "ingress" => Some(Hook::Ingress),
        "egress" if family == "netdev" => Some(Hook::Egress),
        _ => None,
    }
}

/// Statements that only count, log or skip connection tracking: the walk goes on past them.
const PASSIVE: &[&str] = &["counter", "log", "notrack"];

fn rule(exprs: &[Value], text: String) -> Rule {
    let mut conds = Vec::new();
    let mut action = Action::Continue;
    let mut alters = false;
    for expr in exprs {
        let Some((kind, body)) = expr.as_object().and_then(|o| o.iter().next()) else {
            conds.push(Cond::Unknown);
            continue;
        };
        match kind.as_str() {
            "match" => conds.extend(condition(body)),
            "accept" => action = Action::Accept,
            "drop" | "reject" | "queue" => action = Action::Block,
            "dnat" => match dnat(body) {
                Some(to) => action = Action::Dnat(to),
                None => alters = true,
            },
            "return" => action = Action::Return,
            "continue" => action = Action::Continue,
            "jump" | "goto" => {
                let target = body
                    .get("target")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                action = if kind == "jump" {
                    Action::Jump(target)
                } else {
                    Action::Goto(target)
                };
            }
            // A rate or quota holds for some packets only.
            "limit" | "quota" => conds.push(Cond::Unknown),
            "xt" => match body.get("type").and_then(Value::as_str) {
                Some("match") => conds.push(Cond::Unknown),
                Some("target")
                    if matches!(
                        body.get("name").and_then(Value::as_str),
                        Some("LOG" | "NFLOG" | "TRACE")
                    ) => {}
                Some("watcher") => {}
                _ => alters = true,
            },
            _ if PASSIVE.contains(&kind.as_str()) => {}
            // NAT, marks, payload rewrites, dup/fwd, set updates…: the packet may not reach
            // the peer as it was sent.
            _ => alters = true,
        }
    }
    if alters {
        action = Action::Block;
    }
    Rule {
        conds,
        action,
        text,
    }
}

/// The conditions one `match` expression stands for.
fn condition(m: &Value) -> Vec<Cond> {
    let negate = match m.get("op").and_then(Value::as_str) {
        Some("==" | "in") => false,
        Some("!=") => true,
        _ => return vec![Cond::Unknown],
    };
    let (Some(left), Some(right)) = (m.get("left"), m.get("right")) else {
        return vec![Cond::Unknown];
    };
    if let Some(mask) = mark_mask(left) {
        return vec![mark_cond(m, mask, right, negate)];
    }
    if let Some(meta) = left
        .get("meta")
        .and_then(|m| m.get("key"))
        .and_then(Value::as_str)
    {
        let dev = match meta {
            "iifname" | "iif" => Dev::In,
            "oifname" | "oif" => Dev::Out,
            "ibrname" | "ibridgename" => Dev::BridgeIn,
            "obrname" | "obridgename" => Dev::BridgeOut,
            "nfproto" | "protocol" => return vec![family_cond(right, negate)],
            "l4proto" => return vec![proto_cond(right, negate)],
            _ => return vec![Cond::Unknown],
        };
        return match strings(right) {
            Some(names) => vec![Cond::Dev { dev, names, negate }],
            None => vec![Cond::Unknown],
        };
    }
    if left
        .get("ct")
        .and_then(|c| c.get("key"))
        .and_then(Value::as_str)
        == Some("state")
    {
        // A list of states is a plain array in nft's JSON (`["established", "related"]`).
        let names = match right {
            Value::Array(list) => list.iter().map(|e| e.as_str().map(str::to_owned)).collect(),
            other => strings(other),
        };
        let states = names.and_then(|names| CtStates::parse(names.iter().map(String::as_str)));
        return vec![match states {
            Some(states) => Cond::CtState { states, negate },
            None => Cond::Unknown,
        }];
    }
    if let Some(payload) = left.get("payload") {
        let s = |k: &str| payload.get(k).and_then(Value::as_str).unwrap_or_default();
        let family = match s("protocol") {
            "ip" => Family::V4,
            "ip6" => Family::V6,
            // `tcp dport 80` holds only for TCP packets; `th` is any transport header.
            l4 @ ("tcp" | "udp" | "sctp" | "th") => {
                let end = match s("field") {
                    "sport" => End::Src,
                    "dport" => End::Dst,
                    _ => return vec![Cond::Unknown],
                };
                let port = match port_ranges(right) {
                    Some(ranges) => Cond::Port {
                        end,
                        ranges,
                        negate,
                    },
                    None => Cond::Unknown,
                };
                return match proto_number(l4) {
                    Some(p) => vec![
                        Cond::Proto {
                            protos: vec![p],
                            negate: false,
                        },
                        port,
                    ],
                    None => vec![port],
                };
            }
            _ => return vec![Cond::Unknown],
        };
        // `ip saddr …` holds only for IPv4 packets, whatever the operator compares it with.
        let is_family = Cond::Family {
            family,
            negate: false,
        };
        let end = match s("field") {
            "saddr" => End::Src,
            "daddr" => End::Dst,
            "protocol" | "nexthdr" => return vec![is_family, proto_cond(right, negate)],
            _ => return vec![is_family, Cond::Unknown],
        };
        return match nets(right) {
            Some(nets) => vec![is_family, Cond::Addr { end, nets, negate }],
            None => vec![is_family, Cond::Unknown],
        };
    }
    vec![Cond::Unknown]
}

/// The mask a `meta mark` comparison applies: all bits for `meta mark 0x10`, `0xff00` for
/// `meta mark & 0xff00 == 0x2000` (`{"&": [{"meta": {"key": "mark"}}, 65280]}`); `None` when the
/// left side is not the mark, or is the mark under another operation.
fn mark_mask(left: &Value) -> Option<u32> {
    let is_mark = |v: &Value| {
        v.get("meta")
            .and_then(|m| m.get("key"))
            .and_then(Value::as_str)
            == Some("mark")
    };
    if is_mark(left) {
        return Some(u32::MAX);
    }
    match left.get("&").and_then(Value::as_array).map(Vec::as_slice) {
        Some([mark, mask]) if is_mark(mark) => mask.as_u64().and_then(|m| u32::try_from(m).ok()),
        _ => None,
    }
}

/// The packet's mark, masked, equal (or not) to one value, as iptables' `-m mark --mark V/M`.
/// A set or a range of marks, or a flag test (`in`), stays unknown.
fn mark_cond(m: &Value, mask: u32, right: &Value, negate: bool) -> Cond {
    let value = right.as_u64().and_then(|v| u32::try_from(v).ok());
    match (m.get("op").and_then(Value::as_str), value) {
        (Some("==" | "!="), Some(value)) => Cond::Mark {
            value,
            mask,
            negate,
        },
        _ => Cond::Unknown,
    }
}

fn family_cond(right: &Value, negate: bool) -> Cond {
    let family = match right.as_str() {
        Some("ipv4" | "ip") => Family::V4,
        Some("ipv6" | "ip6") => Family::V6,
        // Another protocol (arp, vlan…) is none of the pair's IP packets.
        Some(_) if negate => return Cond::Always,
        Some(_) => return Cond::Never,
        None => return Cond::Unknown,
    };
    Cond::Family { family, negate }
}

fn proto_number(name: &str) -> Option<u8> {
    match name {
        "tcp" => Some(6),
        "udp" => Some(17),
        "sctp" => Some(132),
        "icmp" => Some(1),
        "ipv6-icmp" | "icmpv6" => Some(58),
        _ => None,
    }
}

/// `meta l4proto tcp`, `ip protocol { tcp, udp }`: names or numbers, alone or in a set.
fn proto_cond(right: &Value, negate: bool) -> Cond {
    let one = |v: &Value| match v {
        Value::String(s) => proto_number(s),
        Value::Number(n) => n.as_u64().and_then(|n| u8::try_from(n).ok()),
        _ => None,
    };
    let protos = match right.get("set").and_then(Value::as_array) {
        Some(items) => items.iter().map(one).collect::<Option<Vec<_>>>(),
        None => one(right).map(|p| vec![p]),
    };
    match protos {
        Some(protos) => Cond::Proto { protos, negate },
        None => Cond::Unknown,
    }
}

/// `80`, `{ 80, 443 }`, `8000-8080` (`{"range": [8000, 8080]}`), and sets of those.
fn port_ranges(v: &Value) -> Option<Vec<(u16, u16)>> {
    let port = |v: &Value| v.as_u64().and_then(|n| u16::try_from(n).ok());
    let one = |v: &Value| match v.get("range").and_then(Value::as_array).map(Vec::as_slice) {
        Some([lo, hi]) => Some((port(lo)?, port(hi)?)),
        Some(_) => None,
        None => port(v).map(|p| (p, p)),
    };
    match v.get("set").and_then(Value::as_array) {
        Some(items) => items.iter().map(one).collect(),
        None => one(v).map(|r| vec![r]),
    }
}

/// `dnat ip to 172.18.0.2:80` as `172.18.0.2:80` (`[fd00::2]:80` for IPv6), the way iptables
/// prints Docker's; `None` for a map, a range or a translation without a port.
fn dnat(body: &Value) -> Option<String> {
    let addr: IpAddr = body.get("addr")?.as_str()?.parse().ok()?;
    let port = body.get("port")?.as_u64()?;
    Some(match addr {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    })
}

/// Strings, or a set of strings.
fn strings(v: &Value) -> Option<Vec<String>> {
    match v {
        Value::String(s) if !s.starts_with('@') => Some(vec![s.clone()]),
        Value::Object(o) => o
            .get("set")?
            .as_array()?
            .iter()
            .map(|e| e.as_str().map(str::to_owned))
            .collect(),
        _ => None,
    }
}

/// Addresses, prefixes and ranges, alone or in an anonymous set; `None` for a named set or
/// anything else.
fn nets(v: &Value) -> Option<Vec<Net>> {
    if let Some(items) = v.get("set").and_then(Value::as_array) {
        return items.iter().map(net).collect::<Option<Vec<_>>>();
    }
    net(v).map(|n| vec![n])
}

fn net(v: &Value) -> Option<Net> {
    if let Some(s) = v.as_str() {
        return Prefix::parse(s).map(Net::Prefix);
    }
    if let Some(p) = v.get("prefix") {
        let addr: IpAddr = p.get("addr")?.as_str()?.parse().ok()?;
        let len = u8::try_from(p.get("len")?.as_u64()?).ok()?;
        return Prefix::new(addr, len).map(Net::Prefix);
    }
    if let Some([lo, hi]) = v.get("range").and_then(Value::as_array).map(Vec::as_slice) {
        return Some(Net::Range(
            lo.as_str()?.parse().ok()?,
            hi.as_str()?.parse().ok()?,
        ));
    }
    None
}

/// What `nft -a list ruleset` shows that its JSON (nft 1.0) does not: each rule's text, for
/// messages, and the devices an ingress or egress chain is bound to.
#[derive(Debug, Default)]
pub(super) struct Listing {
    /// (family, table, chain, handle) → the rule as nft prints it.
    pub(crate) texts: HashMap<(String, String, String, u64), String>,
    /// (family, table, chain) → `device "lo"` or `devices = { a, b }`.
    pub(crate) devices: HashMap<(String, String, String), Vec<String>>,
}

impl Listing {
    pub(super) fn parse(listing: &str) -> Self {
        let mut out = Self::default();
        let (mut family, mut table, mut chain) = (String::new(), String::new(), String::new());
        for line in listing.lines() {
            let line = line.trim();
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["table", f, t, ..] => {
                    (family, table) = ((*f).to_owned(), (*t).to_owned());
                    chain.clear();
                }
                ["chain", c, ..] => chain = (*c).to_owned(),
                ["type", ..] if !chain.is_empty() => {
                    if let Some(devices) = devices_of(line) {
                        out.devices
                            .insert((family.clone(), table.clone(), chain.clone()), devices);
                    }
                }
                _ => {
                    let Some((rule, handle)) = line.rsplit_once(" # handle ") else {
                        continue;
                    };
                    if chain.is_empty() || rule.ends_with('{') {
                        continue;
                    }
                    if let Ok(handle) = handle.trim().parse() {
                        out.texts.insert(
                            (family.clone(), table.clone(), chain.clone(), handle),
                            rule.trim().to_owned(),
                        );
                    }
                }
            }
        }
        out
    }
}

/// The devices named on a chain's `type … hook ingress device "lo" …` line.
fn devices_of(line: &str) -> Option<Vec<String>> {
    let clean = |d: &str| d.trim().trim_matches('"').to_owned();
    if let Some((_, rest)) = line.split_once("devices = {") {
        let (list, _) = rest.split_once('}')?;
        return Some(
            list.split(',')
                .map(clean)
                .filter(|d| !d.is_empty())
                .collect(),
        );
    }
    let (_, rest) = line.split_once(" device ")?;
    rest.split_whitespace().next().map(|d| vec![clean(d)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firewall::model::{Blocker, Flow};

    /// `nft -j list ruleset` with Engine 28.5's iptables-nft tables and a native inet table.
    const RULESET: &str = include_str!("../../tests/fixtures/firewall/nft-ruleset.json");
    const LISTING: &str = include_str!("../../tests/fixtures/firewall/nft-ruleset.txt");

    fn tables(json: &str) -> Vec<Table> {
        parse(
            json,
            |family, table| {
                matches!(family, "ip" | "ip6")
                    && matches!(table, "filter" | "nat" | "mangle" | "raw" | "security")
            },
            &Listing::parse(LISTING),
        )
        .unwrap()
    }

    fn check(tables: &[Table], family: Family, src: &str, dst: &str) -> Result<(), Blocker> {
        let src = [src.parse().unwrap()];
        let dst = [dst.parse().unwrap()];
        for table in tables {
            if !table.families.contains(&family) {
                continue;
            }
            let bridged = table.layer == Layer::Bridge;
            let flow = Flow {
                family,
                src: &src,
                dst: &dst,
                dev_in: Some(if bridged { "vetha" } else { "br-x" }),
                dev_out: Some(if bridged { "vethb" } else { "br-x" }),
                phys_in: Some("vetha"),
                phys_out: Some("vethb"),
                bridge_in: Some("br-x"),
                bridge_out: Some("br-x"),
                ..Flow::default()
            };
            for base in &table.bases {
                table.passes(base, &flow)?;
            }
        }
        Ok(())
    }

    #[test]
    fn reads_rule_texts_by_handle_and_chain_devices() {
        let texts = Listing::parse(LISTING).texts;
        let devices = Listing::parse(
            "table netdev t { # handle 9\n\tchain i { # handle 1\n\t\ttype filter hook \
             ingress devices = { docker0, lo } priority filter; policy accept;\n\t}\n}\n\
             table netdev u { # handle 10\n\tchain e { # handle 1\n\t\ttype filter hook \
             ingress device \"eth0\" priority filter; policy accept;\n\t}\n}",
        )
        .devices;
        assert_eq!(
            devices[&("netdev".into(), "t".into(), "i".into())],
            ["docker0", "lo"]
        );
        assert_eq!(
            devices[&("netdev".into(), "u".into(), "e".into())],
            ["eth0"]
        );
        assert_eq!(
            texts[&("inet".into(), "operator".into(), "forward".into(), 2)],
            "ip saddr 172.18.0.2 ip daddr 172.18.0.3 drop"
        );
    }

    #[test]
    fn iptables_tables_are_left_to_the_iptables_reader() {
        let names: Vec<String> = tables(RULESET).into_iter().map(|t| t.name).collect();
        assert_eq!(
            names,
            ["nftables bridge operatorb", "nftables inet operator"]
        );
    }

    #[test]
    fn an_operators_nft_drop_blocks_the_pair_it_names_only() {
        let t = tables(RULESET);
        let err = check(&t, Family::V4, "172.18.0.2", "172.18.0.3").unwrap_err();
        assert_eq!(
            err.to_string(),
            "nftables inet operator chain forward: ip saddr 172.18.0.2 ip daddr 172.18.0.3 drop"
        );
        assert_eq!(check(&t, Family::V4, "172.18.0.4", "172.18.0.3"), Ok(()));
        // `ip …` rules do not see IPv6 packets; the fd00::/64 reject is for other addresses.
        assert_eq!(check(&t, Family::V6, "fd01::2", "fd01::3"), Ok(()));
        assert!(check(&t, Family::V6, "fd00::2", "fd00::3").is_err());
    }

    #[test]
    fn conditions_read_from_match_expressions() {
        let m = |s: &str| condition(&serde_json::from_str(s).unwrap());
        assert_eq!(
            m(r#"{"op":"!=","left":{"meta":{"key":"oifname"}},"right":{"set":["a","b"]}}"#),
            [Cond::Dev {
                dev: Dev::Out,
                names: vec!["a".into(), "b".into()],
                negate: true
            }]
        );
        assert_eq!(
            m(r#"{"op":"==","left":{"payload":{"protocol":"ip","field":"saddr"}},"right":"@s"}"#),
            [
                Cond::Family {
                    family: Family::V4,
                    negate: false
                },
                Cond::Unknown
            ]
        );
        assert_eq!(
            m(r#"{"op":"==","left":{"meta":{"key":"protocol"}},"right":"arp"}"#),
            [Cond::Never]
        );
        assert_eq!(
            m(r#"{"op":"<","left":{"meta":{"key":"length"}},"right":100}"#),
            [Cond::Unknown]
        );
        let tcp = Cond::Proto {
            protos: vec![6],
            negate: false,
        };
        assert_eq!(
            m(
                r#"{"op":"!=","left":{"payload":{"protocol":"tcp","field":"dport"}},
                  "right":{"set":[80,{"range":[8000,8080]}]}}"#
            ),
            [
                tcp.clone(),
                Cond::Port {
                    end: End::Dst,
                    ranges: vec![(80, 80), (8000, 8080)],
                    negate: true
                }
            ]
        );
        assert_eq!(
            m(r#"{"op":"==","left":{"payload":{"protocol":"th","field":"sport"}},"right":53}"#),
            [Cond::Port {
                end: End::Src,
                ranges: vec![(53, 53)],
                negate: false
            }]
        );
        assert_eq!(
            m(r#"{"op":"==","left":{"meta":{"key":"l4proto"}},"right":{"set":["tcp","udp"]}}"#),
            [Cond::Proto {
                protos: vec![6, 17],
                negate: false
            }]
        );
        assert_eq!(
            m(
                r#"{"op":"==","left":{"payload":{"protocol":"ip","field":"protocol"}},"right":"tcp"}"#
            ),
            [
                Cond::Family {
                    family: Family::V4,
                    negate: false
                },
                tcp
            ]
        );
    }

    #[test]
    fn statements_that_alter_packets_block() {
        let r = |s: &str| {
            rule(
                &serde_json::from_str::<Vec<Value>>(s).unwrap(),
                String::new(),
            )
        };
        assert_eq!(
            r(r#"[{"counter":null},{"accept":null}]"#).action,
            Action::Accept
        );
        assert_eq!(
            r(r#"[{"mangle":{"key":{"meta":{"key":"mark"}},"value":1}},{"accept":null}]"#).action,
            Action::Block
        );
        assert_eq!(
            r(r#"[{"xt":{"type":"target","name":"LOG"}}]"#).action,
            Action::Continue
        );
        assert_eq!(
            r(r#"[{"xt":{"type":"target","name":"DNAT"}}]"#).action,
            Action::Block
        );
        assert_eq!(
            r(r#"[{"dnat":{"family":"ip","addr":"172.18.0.2","port":80}}]"#).action,
            Action::Dnat("172.18.0.2:80".into())
        );
        assert_eq!(
            r(r#"[{"dnat":{"family":"ip6","addr":"fd00::2","port":80}}]"#).action,
            Action::Dnat("[fd00::2]:80".into())
        );
        assert_eq!(
            r(r#"[{"dnat":{"family":"ip","addr":"172.18.0.2"}}]"#).action,
            Action::Block
        );
        assert_eq!(
            r(r#"[{"limit":{"rate":1}},{"drop":null}]"#).conds,
            [Cond::Unknown]
        );
    }

    /// Rules added to a chain without a hook, each with its text and its `expr` as nftables
    /// 1.0.6's `nft -j list table` prints it (`meta mark & 0xff00 == 0x2000` prints as the
    /// `and` form does).
    const MARK_RULES: &[(&str, &str)] = &[
        (
            "meta mark 0x10 accept",
            r#"[{"match": {"op": "==", "left": {"meta": {"key": "mark"}}, "right": 16}}, {"accept": null}]"#,
        ),
        (
            "meta mark != 0x10 accept",
            r#"[{"match": {"op": "!=", "left": {"meta": {"key": "mark"}}, "right": 16}}, {"accept": null}]"#,
        ),
        (
            "meta mark and 0xff00 == 0x2000 accept",
            r#"[{"match": {"op": "==", "left": {"&": [{"meta": {"key": "mark"}}, 65280]}, "right": 8192}}, {"accept": null}]"#,
        ),
        (
            "meta mark & 0xff00 != 0x2000 accept",
            r#"[{"match": {"op": "!=", "left": {"&": [{"meta": {"key": "mark"}}, 65280]}, "right": 8192}}, {"accept": null}]"#,
        ),
        (
            "meta mark & 0xff00 == 0 accept",
            r#"[{"match": {"op": "==", "left": {"&": [{"meta": {"key": "mark"}}, 65280]}, "right": 0}}, {"accept": null}]"#,
        ),
        (
            "meta mark { 0x1, 0x2 } accept",
            r#"[{"match": {"op": "==", "left": {"meta": {"key": "mark"}}, "right": {"set": [1, 2]}}}, {"accept": null}]"#,
        ),
        (
            "meta mark 0x1-0x5 accept",
            r#"[{"match": {"op": "==", "left": {"meta": {"key": "mark"}}, "right": {"range": [1, 5]}}}, {"accept": null}]"#,
        ),
        (
            "meta mark set 0x10 accept",
            r#"[{"mangle": {"key": {"meta": {"key": "mark"}}, "value": 16}}, {"accept": null}]"#,
        ),
    ];

    #[test]
    fn meta_mark_compared_with_one_value_masked_or_not_is_a_mark_condition() {
        let mark = |value, mask, negate| {
            vec![Cond::Mark {
                value,
                mask,
                negate,
            }]
        };
        let expected = [
            (mark(0x10, u32::MAX, false), Action::Accept),
            (mark(0x10, u32::MAX, true), Action::Accept),
            (mark(0x2000, 0xff00, false), Action::Accept),
            (mark(0x2000, 0xff00, true), Action::Accept),
            (mark(0, 0xff00, false), Action::Accept),
            // A set or a range of marks is not evaluated.
            (vec![Cond::Unknown], Action::Accept),
            (vec![Cond::Unknown], Action::Accept),
            // Setting the mark changes the packet: refused, as any mark-setting rule.
            (vec![], Action::Block),
        ];
        for ((text, json), (conds, action)) in MARK_RULES.iter().zip(expected) {
            let got = rule(
                &serde_json::from_str::<Vec<Value>>(json).unwrap(),
                String::new(),
            );
            assert_eq!((got.conds, got.action), (conds, action), "{text}");
        }
    }

    #[test]
    fn a_flag_test_on_the_mark_or_the_mark_under_another_operation_stays_unknown() {
        let m = |s: &str| condition(&serde_json::from_str(s).unwrap());
        assert_eq!(
            m(r#"{"op":"in","left":{"meta":{"key":"mark"}},"right":16}"#),
            [Cond::Unknown]
        );
        assert_eq!(
            m(r#"{"op":"==","left":{"|":[{"meta":{"key":"mark"}},16]},"right":16}"#),
            [Cond::Unknown]
        );
        assert_eq!(
            m(r#"{"op":"==","left":{"ct":{"key":"mark"}},"right":16}"#),
            [Cond::Unknown]
        );
    }

    #[test]
    fn a_drop_by_mark_blocks_only_packets_whose_mark_may_match() {
        let json = r#"{"nftables": [
            {"table": {"family": "inet", "name": "marks", "handle": 1}},
            {"chain": {"family": "inet", "table": "marks", "name": "forward", "handle": 1,
              "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}},
            {"rule": {"family": "inet", "table": "marks", "chain": "forward", "handle": 2,
              "expr": [{"match": {"op": "==", "left": {"&": [{"meta": {"key": "mark"}}, 65280]},
                "right": 8192}}, {"drop": null}]}}]}"#;
        let tables = parse(json, |_, _| false, &Listing::default()).unwrap();
        let (src, dst) = (
            ["172.18.0.2".parse().unwrap()],
            ["172.18.0.3".parse().unwrap()],
        );
        let passes = |mark| {
            let flow = Flow {
                family: Family::V4,
                src: &src,
                dst: &dst,
                mark,
                ..Flow::default()
            };
            tables[0].passes(&tables[0].bases[0], &flow).is_ok()
        };
        assert!(passes(Some(0)), "unmarked packets do not match");
        assert!(
            passes(Some(0x0100_00ff)),
            "bits outside the mask do not count"
        );
        assert!(!passes(Some(0x2000)));
        assert!(!passes(Some(0x1234_20ff)), "nor do they hide a match");
        assert!(!passes(None), "an unknown mark may match");
    }
}
