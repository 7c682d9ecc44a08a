//! `iptables-save` / `ip6tables-save` output (legacy or nf_tables backend) as [`Table`]s.
//!
//! Only the chains bridged packets traverse under br_netfilter are kept as base chains: raw
//! PREROUTING, mangle PREROUTING/FORWARD/POSTROUTING and filter FORWARD. The nat table's
//! PREROUTING and POSTROUTING are kept apart ([`Table::nat_bases`]): they see only a
//! connection's first packet, and Docker's own nat rules exclude traffic that stays on its
//! bridge, so only a published port's inbound walk reads them.
use std::collections::HashMap;

use super::{
    addr::{Net, Prefix},
    model::{Action, Base, Cond, CtStates, Dev, End, Family, Hook, Layer, Rule, Table},
};

/// Targets that only count, log or trace: the packet goes on to the next rule.
const PASSIVE_TARGETS: &[&str] = &["LOG", "NFLOG", "ULOG", "TRACE", "AUDIT"];

/// Base chains per table that bridged packets pass through.
fn hooks(table: &str) -> &'static [(&'static str, Hook)] {
    match table {
        "raw" => &[("PREROUTING", Hook::Prerouting)],
        "mangle" => &[
            ("PREROUTING", Hook::Prerouting),
            ("FORWARD", Hook::Forward),
            ("POSTROUTING", Hook::Postrouting),
        ],
        "filter" => &[("FORWARD", Hook::Forward)],
        "nat" => &[
            ("PREROUTING", Hook::Prerouting),
            ("POSTROUTING", Hook::Postrouting),
        ],
        _ => &[],
    }
}

/// IANA numbers of the protocols `-p` names that a published port can carry.
fn proto_number(name: &str) -> Option<u8> {
    match name {
        "tcp" | "6" => Some(6),
        "udp" | "17" => Some(17),
        "sctp" | "132" => Some(132),
        "icmp" | "1" => Some(1),
        "icmpv6" | "ipv6-icmp" | "58" => Some(58),
        _ => None,
    }
}

/// `80`, `8000:8080`, or multiport's `80,443,8000:8080`.
fn port_ranges(text: &str) -> Option<Vec<(u16, u16)>> {
    text.split(',')
        .map(|part| match part.split_once(':') {
            Some((lo, hi)) => {
                let lo = if lo.is_empty() { 0 } else { lo.parse().ok()? };
                let hi = if hi.is_empty() {
                    u16::MAX
                } else {
                    hi.parse().ok()?
                };
                Some((lo, hi))
            }
            None => part.parse().ok().map(|p| (p, p)),
        })
        .collect()
}

/// Parses one tool's dump. `tool` names it in messages ("iptables (nf_tables)").
/// Fails on a line it cannot read, naming it: a ruleset we cannot read is not one we can
/// prove harmless.
pub(super) fn parse(tool: &str, family: Family, dump: &str) -> Result<Vec<Table>, String> {
    let mut tables = Vec::new();
    let mut current: Option<Table> = None;
    for (n, line) in dump.lines().enumerate() {
        let line = line.trim();
        let bad = |why: &str| format!("{tool}: line {}: {why}: {line}", n + 1);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('*') {
            tables.extend(current.take().map(targets_resolved));
            let nat = name == "nat";
            let bases: Vec<Base> = hooks(name)
                .iter()
                .map(|&(chain, hook)| Base {
                    chain: chain.to_owned(),
                    hook,
                    devices: vec![],
                    nat,
                })
                .collect();
            let (bases, nat_bases) = if nat {
                (vec![], bases)
            } else {
                (bases, vec![])
            };
            current = Some(Table {
                name: format!("{tool} {name}"),
                families: vec![family],
                layer: Layer::Inet,
                chains: HashMap::new(),
                bases,
                nat_bases,
            });
            continue;
        }
        let Some(table) = current.as_mut() else {
            return Err(bad("rule outside a table"));
        };
        if line == "COMMIT" {
            tables.extend(current.take().map(targets_resolved));
            continue;
        }
        if let Some(decl) = line.strip_prefix(':') {
            let mut parts = decl.split_whitespace();
            let (Some(name), Some(policy)) = (parts.next(), parts.next()) else {
                return Err(bad("chain declaration without a policy"));
            };
            let chain = table.chains.entry(name.to_owned()).or_default();
            chain.policy_accepts = match policy {
                "-" => None,
                "ACCEPT" => Some(true),
                _ => Some(false),
            };
            continue;
        }
        let words = split(line).ok_or_else(|| bad("unbalanced quotes"))?;
        let (Some("-A"), Some(chain)) = (words.first().map(String::as_str), words.get(1)) else {
            return Err(bad("expected -A CHAIN"));
        };
        let rule = rule(&words[2..], line);
        table
            .chains
            .entry(chain.clone())
            .or_default()
            .rules
            .push(rule);
    }
    tables.extend(current.map(targets_resolved));
    Ok(tables)
}

/// `-j NAME` names a user chain or a target module (MARK, NFQUEUE, DNAT…); once the table's
/// chains are known, a jump to no chain is a target that may alter the packet.
fn targets_resolved(mut table: Table) -> Table {
    let chains: std::collections::HashSet<String> = table.chains.keys().cloned().collect();
    for chain in table.chains.values_mut() {
        for rule in &mut chain.rules {
            if matches!(&rule.action, Action::Jump(t) if !chains.contains(t)) {
                rule.action = Action::Block;
            }
        }
    }
    table
}

/// Reads the match and target options of one `-A` line.
fn rule(words: &[String], text: &str) -> Rule {
    let mut conds = Vec::new();
    let mut action = Action::Continue;
    let mut negate = false;
    // The match module whose options follow (`-m physdev --physdev-in X`).
    let mut module = String::new();
    let mut i = 0;
    let value = |i: usize| words.get(i + 1).cloned().unwrap_or_default();
    while i < words.len() {
        let word = words[i].as_str();
        if word == "!" {
            negate = true;
            i += 1;
            continue;
        }
        let mut takes_value = true;
        match word {
            "-s" | "--source" | "-d" | "--destination" => {
                let end = if word.starts_with("-s") || word == "--source" {
                    End::Src
                } else {
                    End::Dst
                };
                let nets: Option<Vec<_>> = value(i)
                    .split(',')
                    .map(|p| Prefix::parse(p).map(Net::Prefix))
                    .collect();
                conds.push(match nets {
                    Some(nets) => Cond::Addr { end, nets, negate },
                    None => Cond::Unknown,
                });
            }
            "-i" | "--in-interface" => conds.push(dev(Dev::In, value(i), negate)),
            "-o" | "--out-interface" => conds.push(dev(Dev::Out, value(i), negate)),
            "-p" | "--protocol" => {
                let name = value(i);
                if !matches!(name.as_str(), "all" | "0") {
                    conds.push(match proto_number(&name) {
                        Some(p) => Cond::Proto {
                            protos: vec![p],
                            negate,
                        },
                        None => Cond::Unknown,
                    });
                }
            }
            "--dport"
            | "--destination-port"
            | "--sport"
            | "--source-port"
            | "--dports"
            | "--destination-ports"
            | "--sports"
            | "--source-ports"
                if matches!(module.as_str(), "tcp" | "udp" | "sctp" | "multiport") =>
            {
                let end = if word.starts_with("--d") {
                    End::Dst
                } else {
                    End::Src
                };
                conds.push(match port_ranges(&value(i)) {
                    Some(ranges) => Cond::Port {
                        end,
                        ranges,
                        negate,
                    },
                    None => Cond::Unknown,
                });
            }
            "--dst-type" if module == "addrtype" && value(i) == "LOCAL" => {
                conds.push(Cond::DstLocal { negate });
            }
            "--mark" if module == "mark" => conds.push(match mark(&value(i)) {
                Some((value, mask)) => Cond::Mark {
                    value,
                    mask,
                    negate,
                },
                None => Cond::Unknown,
            }),
            "--ctstate" | "--state" if matches!(module.as_str(), "conntrack" | "state") => {
                conds.push(match CtStates::parse(value(i).split(',')) {
                    Some(states) => Cond::CtState { states, negate },
                    None => Cond::Unknown,
                });
            }
            "-m" | "--match" => module = value(i),
            "-j" | "--jump" => {
                action = match value(i).as_str() {
                    "DNAT" => dnat(&words[i + 2..]),
                    name => target(name),
                };
                // The target's own options follow; only DNAT's change the verdict's kind.
                break;
            }
            "-g" | "--goto" => {
                action = Action::Goto(value(i));
                break;
            }
            "--physdev-in" => conds.push(dev(Dev::PhysIn, value(i), negate)),
            "--physdev-out" => conds.push(dev(Dev::PhysOut, value(i), negate)),
            "--physdev-is-bridged" | "--physdev-is-in" | "--physdev-is-out" => {
                takes_value = false;
                conds.push(if negate { Cond::Unknown } else { Cond::Always });
            }
            "--comment" if module == "comment" => {}
            _ if word.starts_with('-') => {
                // An option of a match we do not evaluate (conntrack, addrtype, multiport, set…)
                // or a flag: the rule may hold for some of the pair's packets.
                conds.push(Cond::Unknown);
                takes_value = words.get(i + 1).is_some_and(|w| !w.starts_with('-'));
            }
            _ => takes_value = false,
        }
        negate = false;
        i += if takes_value { 2 } else { 1 };
    }
    Rule {
        conds,
        action,
        text: text.to_owned(),
    }
}

/// DNAT to one `address:port` (Docker's form); a range, a random choice or no port is a
/// translation no fast path reproduces, so it blocks.
fn dnat(options: &[String]) -> Action {
    match options {
        [opt, to] if opt == "--to-destination" && !to.contains('-') && to.contains(':') => {
            Action::Dnat(to.clone())
        }
        _ => Action::Block,
    }
}

/// `0x2000/0x2000` or `0x1` (all bits) as iptables-save prints a mark match: (value, mask).
fn mark(text: &str) -> Option<(u32, u32)> {
    let number = |s: &str| match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    };
    match text.split_once('/') {
        Some((value, mask)) => Some((number(value)?, number(mask)?)),
        None => Some((number(text)?, u32::MAX)),
    }
}

fn dev(dev: Dev, name: String, negate: bool) -> Cond {
    Cond::Dev {
        dev,
        names: vec![name],
        negate,
    }
}

fn target(name: &str) -> Action {
    match name {
        "ACCEPT" => Action::Accept,
        "RETURN" => Action::Return,
        "DROP" | "REJECT" => Action::Block,
        _ if PASSIVE_TARGETS.contains(&name) => Action::Continue,
        // A user chain, or a target module: told apart by `targets_resolved`.
        _ => Action::Jump(name.to_owned()),
    }
}

/// Splits a line into words the way iptables-save quotes them (`"a b"`, `\"` inside).
fn split(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quoted = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            '\\' if quoted => word.extend(chars.next()),
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if quoted {
        return None;
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firewall::model::{Blocker, Flow};

    /// `iptables-save` on Engine 28.5 with three networks (one `--internal`), as recorded here.
    const ENGINE_28: &str = include_str!("../../tests/fixtures/firewall/iptables-engine-28.txt");
    /// The same host after `ufw enable` (Debian's ufw 0.36 with its defaults).
    const ENGINE_28_UFW: &str =
        include_str!("../../tests/fixtures/firewall/iptables-engine-28-ufw.txt");
    /// Debian 12's docker.io 20.10 layout with one network, written from the rules 20.10
    /// installs (it matches, rule for rule, the 20.10 part of the recording below).
    const ENGINE_20: &str = include_str!("../../tests/fixtures/firewall/iptables-engine-20.txt");
    /// `iptables-save` recorded here with 20.10 running (network br-958e11ffb28c) on a host where
    /// Engine 28 and a since-disabled ufw had run before: their chains stay behind.
    const ENGINE_20_AFTER_28: &str =
        include_str!("../../tests/fixtures/firewall/iptables-engine-20-after-28.txt");

    fn forward(dump: &str, bridge: &str, src: &str, dst: &str) -> Result<(), Blocker> {
        let src = [src.parse().unwrap()];
        let dst = [dst.parse().unwrap()];
        let flow = Flow {
            family: Family::V4,
            src: &src,
            dst: &dst,
            dev_in: Some(bridge),
            dev_out: Some(bridge),
            phys_in: Some("vetha"),
            phys_out: Some("vethb"),
            ..Flow::default()
        };
        for table in parse("iptables", Family::V4, dump).unwrap() {
            for base in &table.bases {
                table.passes(base, &flow)?;
            }
        }
        Ok(())
    }

    #[test]
    fn splits_quoted_words() {
        assert_eq!(
            split(r#"-A X -m comment --comment "a \"b\" c" -j DROP"#).unwrap(),
            [
                "-A",
                "X",
                "-m",
                "comment",
                "--comment",
                r#"a "b" c"#,
                "-j",
                "DROP"
            ]
        );
        assert_eq!(split(r#"-A X "open"#), None);
    }

    #[test]
    fn dockers_own_rules_let_a_pair_on_one_bridge_through() {
        // Every network of the recording, internal included, both directions.
        for (dump, bridge, a, b) in [
            (ENGINE_28, "br-4abc8bbf58d0", "172.18.0.2", "172.18.0.3"),
            (ENGINE_28, "br-c3c4e13ff096", "172.20.0.2", "172.20.0.3"),
            (ENGINE_28, "docker0", "172.17.0.2", "172.17.0.3"),
            (ENGINE_28_UFW, "br-4abc8bbf58d0", "172.18.0.2", "172.18.0.3"),
            (ENGINE_20, "br-6d0c1b8e5f7a", "172.18.0.2", "172.18.0.3"),
            (
                ENGINE_20_AFTER_28,
                "br-958e11ffb28c",
                "172.21.0.2",
                "172.21.0.3",
            ),
        ] {
            assert_eq!(forward(dump, bridge, a, b), Ok(()), "{bridge} {a} -> {b}");
            assert_eq!(forward(dump, bridge, b, a), Ok(()), "{bridge} {b} -> {a}");
        }
    }

    #[test]
    fn a_bridge_docker_does_not_know_meets_the_drop_policy() {
        let err = forward(ENGINE_28, "br-mine", "10.9.0.2", "10.9.0.3").unwrap_err();
        assert_eq!(err.chain, "FORWARD");
        assert_eq!(err.rule, "policy drop");
    }

    #[test]
    fn an_operators_drop_in_docker_user_blocks_the_pair_it_names_only() {
        let dump = ENGINE_28.replace(
            "-A FORWARD -j DOCKER-USER",
            "-A FORWARD -j DOCKER-USER\n-A DOCKER-USER -s 172.18.0.2/32 -d 172.18.0.3/32 -j DROP",
        );
        let err = forward(&dump, "br-4abc8bbf58d0", "172.18.0.2", "172.18.0.3").unwrap_err();
        assert_eq!(err.chain, "DOCKER-USER");
        assert_eq!(
            err.rule,
            "-A DOCKER-USER -s 172.18.0.2/32 -d 172.18.0.3/32 -j DROP"
        );
        assert!(
            err.to_string()
                .starts_with("iptables filter chain DOCKER-USER: -A")
        );
        // The reverse direction is not named by the rule, but the link would carry both.
        assert_eq!(
            forward(&dump, "br-4abc8bbf58d0", "172.18.0.3", "172.18.0.2"),
            Ok(())
        );
        // Another pair on the same network.
        assert_eq!(
            forward(&dump, "br-4abc8bbf58d0", "172.18.0.4", "172.18.0.3"),
            Ok(())
        );
    }

    #[test]
    fn rules_that_may_match_block_and_rules_that_cannot_do_not() {
        let cases = [
            ("-A DOCKER-USER -p tcp --dport 6379 -j DROP", false),
            (
                "-A DOCKER-USER -m conntrack --ctstate INVALID -j DROP",
                false,
            ),
            (
                "-A DOCKER-USER -i br-4abc8bbf58d0 -j REJECT --reject-with icmp-port-unreachable",
                false,
            ),
            ("-A DOCKER-USER -i br+ -j DROP", false),
            (
                "-A DOCKER-USER -m physdev --physdev-in vetha -j DROP",
                false,
            ),
            ("-A DOCKER-USER -j NFQUEUE --queue-num 1", false),
            ("-A DOCKER-USER -j MARK --set-mark 0x1", false),
            ("-A DOCKER-USER -s 10.0.0.0/8 -j DROP", true),
            ("-A DOCKER-USER -i eth0 -j DROP", true),
            ("-A DOCKER-USER ! -i br-4abc8bbf58d0 -j DROP", true),
            ("-A DOCKER-USER -j LOG --log-prefix \"dxdp test \"", true),
            (
                "-A DOCKER-USER -m comment --comment \"accept all\" -j RETURN",
                true,
            ),
            ("-A DOCKER-USER -m physdev --physdev-in vethz -j DROP", true),
        ];
        for (line, passes) in cases {
            let dump = ENGINE_28.replace(
                "-A FORWARD -j DOCKER-USER",
                &format!("-A FORWARD -j DOCKER-USER\n{line}"),
            );
            let got = forward(&dump, "br-4abc8bbf58d0", "172.18.0.2", "172.18.0.3");
            assert_eq!(got.is_ok(), passes, "{line}: {got:?}");
        }
    }

    #[test]
    fn protocols_ports_and_docker_dnat_are_read() {
        let r = |line: &str| rule(&split(line).unwrap()[2..], line);
        let got = r("-A X ! -p udp -m udp --dport 53 -m multiport --sports 1:1023,2049 -j DROP");
        assert_eq!(
            got.conds,
            [
                Cond::Proto {
                    protos: vec![17],
                    negate: true
                },
                Cond::Port {
                    end: End::Dst,
                    ranges: vec![(53, 53)],
                    negate: false
                },
                Cond::Port {
                    end: End::Src,
                    ranges: vec![(1, 1023), (2049, 2049)],
                    negate: false
                },
            ]
        );
        assert_eq!(
            r("-A DOCKER -p tcp -m tcp --dport 8080 -j DNAT --to-destination 172.18.0.2:80").action,
            Action::Dnat("172.18.0.2:80".into())
        );
        assert_eq!(
            r("-A X -p tcp -j DNAT --to-destination 10.0.0.1-10.0.0.9:80").action,
            Action::Block
        );
        assert_eq!(
            r("-A X -m addrtype --dst-type LOCAL -j DOCKER").conds,
            [Cond::DstLocal { negate: false }]
        );
        assert_eq!(
            r("-A X -m mark --mark 0x2000/0x2000 -j MASQUERADE").conds,
            [Cond::Mark {
                value: 0x2000,
                mask: 0x2000,
                negate: false
            }]
        );
        assert_eq!(
            r("-A X -m mark ! --mark 7 -j DROP").conds,
            [Cond::Mark {
                value: 7,
                mask: u32::MAX,
                negate: true
            }]
        );
        assert_eq!(r("-A X -m mark --mark 0xzz -j DROP").conds, [Cond::Unknown]);
    }

    #[test]
    fn unreadable_lines_are_errors() {
        assert!(parse("iptables", Family::V4, "-A FORWARD -j DROP").is_err());
        assert!(parse("iptables", Family::V4, "*filter\nfoo\nCOMMIT").is_err());
        assert!(
            parse(
                "iptables",
                Family::V4,
                "*filter\n-A X -m comment --comment \"x\nCOMMIT"
            )
            .is_err()
        );
    }
}
