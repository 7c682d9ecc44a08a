//! The firewall's checks: which rules keep pairs from being linked and ports from being exposed,
//! and which pinned links and exposures a rule added after them covers.
use anyhow::Result;
use dxdp_common::{egress::Sysctls, tcp_window::switch};

use super::{Check, Verdict, check};
use crate::{
    choice::Origin,
    commands::published::{self, PortPath},
    datapath::{Datapath, LinkRecord},
    docker::BridgeNetwork,
    engine::{self, Ingress},
    family::Families,
    firewall::{self, Ruleset, RulesetCache},
    netlink::Interface,
    ports,
};

/// Per Docker bridge network, the firewall rules that keep pairs on it from being linked; per
/// published port, whether the rules would let a fast path from the NIC take it.
pub(super) fn firewall(networks: &[BridgeNetwork], ports: &Result<Vec<PortPath>>) -> Vec<Check> {
    let rules = match Ruleset::read() {
        Ok(rules) => rules,
        Err(e) => {
            return vec![check(
                Verdict::Fail,
                format!("cannot read the firewall rules, so no pair can be linked: {e:#}"),
                Some("install what the message names, or link with --bypass-firewall"),
            )];
        }
    };
    let mut out = vec![check(
        Verdict::Ok,
        format!(
            "firewall: {}; every link is checked against these rules",
            rules.summary()
        ),
        None,
    )];
    for net in networks {
        // Docker's own addresses for the network's containers: a rule naming one of them
        // blocks that container's links.
        let v4 = net.addrs.iter().any(|a| a.is_ipv4());
        let v6 = net.addrs.iter().any(|a| a.is_ipv6());
        if net.addrs.is_empty() {
            continue;
        }
        let verdict = rules.on_bridge(&net.bridge, &net.addrs, v4, v6);
        let kept = verdict.carried().and(verdict.closed());
        let open = verdict.open();
        if kept.is_empty() {
            out.push(check(
                Verdict::Ok,
                format!(
                    "firewall: no rule keeps containers on network {} ({}) from being linked",
                    net.name, net.bridge
                ),
                None,
            ));
        } else if !open.is_empty() {
            let list: Vec<String> = verdict
                .closing(kept)
                .iter()
                .map(|b| format!("[{b}]"))
                .collect();
            out.push(check(
                Verdict::Warn,
                format!(
                    "firewall: on network {} ({}), links carry {open} only; {kept} stays on the \
                     bridge, where these rules may drop or alter it: {}",
                    net.name,
                    net.bridge,
                    list.join(" ")
                ),
                Some(
                    "remove the rules to link that family too, or opt in with --bypass-firewall \
                     (link) or the label dxdp.firewall=bypass on both containers (watch)",
                ),
            ));
        } else {
            let list: Vec<String> = verdict
                .blockers()
                .iter()
                .map(|b| format!("[{b}]"))
                .collect();
            out.push(check(
                Verdict::Warn,
                format!(
                    "firewall: on network {} ({}), links are refused where these rules may drop \
                     or alter traffic: {}",
                    net.name,
                    net.bridge,
                    list.join(" ")
                ),
                Some(
                    "remove the rules, or opt in with --bypass-firewall (link) or the label \
                     dxdp.firewall=bypass on both containers (watch)",
                ),
            ));
        }
    }
    out.extend(published_ports(&rules, networks, ports));
    out
}

/// One line per published port (a sum beyond twenty).
pub(super) fn published_ports(
    rules: &Ruleset,
    networks: &[BridgeNetwork],
    ports: &Result<Vec<PortPath>>,
) -> Vec<Check> {
    let verdicts = match ports {
        Ok(ports) => published::verdicts(rules, networks, ports),
        Err(e) => Err(anyhow::anyhow!("{e:#}")),
    };
    match verdicts {
        Ok(lines) => lines
            .into_iter()
            .map(|line| match line {
                Ok(line) => check(Verdict::Ok, line, None),
                Err(line) => check(Verdict::Warn, line, None),
            })
            .collect(),
        Err(e) => vec![check(
            Verdict::Warn,
            format!("published ports: cannot check them against the rules: {e:#}"),
            None,
        )],
    }
}

/// Pinned links a rule added after them covers: each bypasses that rule until it goes, which a
/// running watch does within a second; without one, nothing takes them away. `rules` is `None`
/// when they cannot be read (the firewall check above says why).
pub(super) fn covered_links(
    datapath: &mut Datapath,
    rules: Option<&mut RulesetCache>,
    host: &[Interface],
    links: &[LinkRecord],
) -> Vec<Check> {
    let Some(rules) = rules else {
        return vec![];
    };
    let covered = firewall::covered(
        rules,
        &mut |ifindex| datapath.recorded_addresses(ifindex),
        host,
        links,
        "unlink them (a running `dxdp watch` removes such a link within a second), or \
         link them again with --bypass-firewall",
    );
    let Ok(covered) = covered else {
        return vec![];
    };
    let mut out: Vec<Check> = covered
        .iter()
        .map(|c| {
            let fix = if c.families.is_empty() {
                format!("dxdp unlink {} {}", c.link.low_name, c.link.high_name)
            } else {
                // Linking again writes the families the rules leave open.
                format!("dxdp link {} {}", c.link.low_name, c.link.high_name)
            };
            check(
                Verdict::Fail,
                format!(
                    "link {} - {} (made {}) bypasses a rule that came after it: {}",
                    c.link.low_name,
                    c.link.high_name,
                    match c.link.origin {
                        Origin::Manual => "by hand",
                        Origin::Watch => "by the watch",
                    },
                    c.message
                ),
                Some(&fix),
            )
        })
        .collect();
    // The links that carry only some families, each with what keeps the others on the bridge.
    let narrowed = links.iter().filter(|l| {
        l.families != Families::ALL
            && !covered.iter().any(|c| {
                (c.link.low_ifindex, c.link.high_ifindex) == (l.low_ifindex, l.high_ifindex)
            })
    });
    for link in narrowed {
        let kept = link.families.others();
        let judged = firewall::judged(
            rules,
            &mut |ifindex| datapath.recorded_addresses(ifindex),
            host,
            link,
        );
        let why = match judged {
            Ok(Some((_, verdict))) if !verdict.closing(kept).is_empty() => {
                format!(
                    "where {} may drop or alter it",
                    firewall::listed(&verdict.closing(kept))
                )
            }
            Ok(Some((_, verdict))) if verdict.carried().and(kept).is_empty() => {
                "as neither end has an address of it".to_owned()
            }
            // The watch widens its own links at its next pass; one made by hand stays.
            Ok(Some(_)) => "though no rule closes it now (`dxdp link` again carries it)".to_owned(),
            _ => "its veths are gone or unreadable".to_owned(),
        };
        out.push(check(
            Verdict::Ok,
            format!(
                "link {} - {} carries {} only; {kept} stays on the bridge, {why}",
                link.low_name, link.high_name, link.families
            ),
            None,
        ));
    }
    out
}

/// The exposed published ports: how many, and each container whose ports a rule added after
/// the exposure now keeps on Docker's path (the fast path bypasses that rule until a running
/// watch takes it away at its next resync; without one, nothing does).
pub(super) fn exposures(
    datapath: &mut Datapath,
    rules: Option<&mut RulesetCache>,
    host: &[Interface],
) -> Vec<Check> {
    let exposed = match datapath.exposed() {
        Ok(e) => e,
        Err(e) => {
            return vec![check(
                Verdict::Warn,
                format!("cannot read the exposed ports: {e:#}"),
                None,
            )];
        }
    };
    if exposed.is_empty() {
        return vec![];
    }
    let mut out = vec![];
    if let Some(rules) = rules {
        let outside = ports::host_addresses()
            .map(|addrs| ports::container_prefixes(host, &addrs))
            .unwrap_or_default();
        // A walk fails only on rules never read, and these were: such a port names no rule.
        let marks = ports::ArrivingMarks::default();
        for (p, why) in ports::covered_exposures(rules, &exposed, host, &outside, &marks).flatten()
        {
            out.push(check(
                Verdict::Fail,
                format!(
                    "exposed container {} bypasses a rule that came after its exposure: {why}",
                    p.container
                ),
                Some(&format!("dxdp unexpose {}", p.container)),
            ));
        }
    }
    match datapath.tcp_switches() {
        Ok((given, now)) => out.extend(stale_switches(PORT_PROGRAMS, given, now, PORT_FIX)),
        Err(e) => out.push(check(
            Verdict::Warn,
            format!("cannot read the published ports' programs' TCP switches: {e:#}"),
            None,
        )),
    }
    let containers: std::collections::BTreeSet<&str> =
        exposed.iter().map(|p| p.container.as_str()).collect();
    out.push(check(
        Verdict::Ok,
        format!(
            "{} published port(s) of {} container(s) exposed from the NIC (dxdp status lists them)",
            exposed.len(),
            containers.len()
        ),
        None,
    ));
    out
}

/// The egress fast paths (`dxdp egress on`): how many, and each one a rule added after it now
/// covers (the fast path bypasses that rule until a running watch takes it away at the pass the
/// rule change brings; without one, nothing does).
pub(super) fn egress(
    datapath: &mut Datapath,
    rules: Option<&mut RulesetCache>,
    host: &[Interface],
) -> Vec<Check> {
    let records = match datapath.egress() {
        Ok(records) => records,
        Err(e) => {
            return vec![check(
                Verdict::Warn,
                format!("cannot read the egress fast paths: {e:#}"),
                None,
            )];
        }
    };
    if records.is_empty() {
        return vec![];
    }
    let mut out = vec![];
    if let Some(rules) = rules {
        let nics: Vec<u32> = records.iter().map(|r| r.nic_ifindex).collect();
        let covered = Ingress::of_nic_indexes(host, &nics)
            .and_then(|way_out| engine::egress::covered(&records, host, &way_out, rules));
        match covered {
            Ok(covered) => {
                for (veth, why) in covered {
                    let container = records
                        .iter()
                        .find(|r| r.veth_ifindex == veth)
                        .map_or("", |r| r.container.as_str());
                    out.push(check(
                        Verdict::Fail,
                        format!("an egress fast path bypasses a rule that came after it: {why}"),
                        Some(&format!("dxdp egress off {container}")),
                    ));
                }
            }
            Err(e) => out.push(check(
                Verdict::Warn,
                format!("cannot hold the egress fast paths to the rules: {e:#}"),
                None,
            )),
        }
    }
    if let Ok(Some((given, now))) = datapath.egress_sysctls() {
        out.extend(stale_timeouts(&given, &now));
        out.extend(stale_switches(
            EGRESS_PROGRAMS,
            given.tcp_switches,
            now.tcp_switches,
            EGRESS_FIX,
        ));
    }
    out.push(check(
        Verdict::Ok,
        format!(
            "{} container(s) leave by the egress fast path (dxdp status lists them)",
            records.len()
        ),
        None,
    ));
    out
}

/// A warning where conntrack's timeouts (`now`) changed since the egress programs were `given`
/// theirs: carried connections' entries keep the old ones until the watch's next whole pass.
fn stale_timeouts(given: &Sysctls, now: &Sysctls) -> Option<Check> {
    let changed: Vec<String> = [
        (
            "tcp_timeout_established",
            given.tcp_established_ms,
            now.tcp_established_ms,
        ),
        (
            "tcp_timeout_time_wait",
            given.tcp_closing_ms,
            now.tcp_closing_ms,
        ),
        ("tcp_timeout_close", given.tcp_reset_ms, now.tcp_reset_ms),
        ("udp_timeout", given.udp_ms, now.udp_ms),
        ("udp_timeout_stream", given.udp_stream_ms, now.udp_stream_ms),
    ]
    .into_iter()
    .filter(|(_, was, is)| was != is)
    .map(|(name, was, is)| format!("nf_conntrack_{name} {} s, now {} s", was / 1000, is / 1000))
    .collect();
    (!changed.is_empty()).then(|| {
        check(
            Verdict::Warn,
            format!(
                "conntrack's timeouts changed since the egress programs were given them \
                 ({}): carried connections' entries keep the old ones",
                changed.join("; ")
            ),
            Some(
                "run dxdp watch (each whole pass gives them conntrack's), or dxdp egress on again",
            ),
        )
    })
}

/// A check where conntrack's TCP switches (`now`) changed since `programs` were `given`
/// theirs: until they are given them again (`fix`), the fast path judges carried segments
/// otherwise than conntrack would. A failure where one was turned off since: the fast path
/// carries segments conntrack now finds INVALID, frames Docker's path would not deliver. A
/// warning where one was only turned on: the fast path refuses segments conntrack would now
/// let through (the egress programs leave them to conntrack, which does).
fn stale_switches(programs: &str, given: u32, now: u32, fix: &str) -> Option<Check> {
    let changed: Vec<String> = [
        ("tcp_be_liberal", switch::BE_LIBERAL),
        ("tcp_ignore_invalid_rst", switch::IGNORE_INVALID_RST),
    ]
    .into_iter()
    .filter(|(_, bit)| given & bit != now & bit)
    .map(|(name, bit)| {
        let on = |switches: u32| u32::from(switches & bit != 0);
        format!("nf_conntrack_{name} {}, now {}", on(given), on(now))
    })
    .collect();
    let turned_off = given & !now != 0;
    (!changed.is_empty()).then(|| {
        check(
            if turned_off {
                Verdict::Fail
            } else {
                Verdict::Warn
            },
            format!(
                "conntrack's TCP switches changed since {programs} were given them ({}): the \
                 fast path judges carried segments as conntrack no longer does",
                changed.join("; ")
            ),
            Some(fix),
        )
    })
}

/// Whose programs the egress check is about, and how they get the switches again.
const EGRESS_PROGRAMS: &str = "the egress programs";
const EGRESS_FIX: &str =
    "run dxdp watch (each whole pass gives them conntrack's), or dxdp egress on again";
/// The published ports' programs get them from every pass of a watch with ports exposed.
const PORT_PROGRAMS: &str = "the published ports' programs";
const PORT_FIX: &str = "run dxdp watch (its passes give them conntrack's), or dxdp expose again";

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts(established_s: u32) -> Sysctls {
        Sysctls {
            tcp_established_ms: established_s * 1000,
            tcp_closing_ms: 120_000,
            tcp_reset_ms: 10_000,
            udp_ms: 30_000,
            udp_stream_ms: 120_000,
            tcp_switches: 0,
        }
    }

    #[test]
    fn changed_conntrack_timeouts_warn_naming_each_and_the_fix() {
        assert!(stale_timeouts(&timeouts(432_000), &timeouts(432_000)).is_none());
        let warned = stale_timeouts(&timeouts(432_000), &timeouts(10)).expect("a warning");
        assert_eq!(warned.verdict, Verdict::Warn);
        assert!(
            warned
                .what
                .contains("nf_conntrack_tcp_timeout_established 432000 s, now 10 s"),
            "{}",
            warned.what
        );
        assert!(!warned.what.contains("udp"), "{}", warned.what);
        assert!(
            warned
                .fix
                .as_deref()
                .is_some_and(|f| f.contains("dxdp watch"))
        );
    }

    #[test]
    fn a_conntrack_switch_turned_off_since_fails_and_one_turned_on_warns() {
        let stale = |given: u32, now: u32| stale_switches(PORT_PROGRAMS, given, now, PORT_FIX);
        let liberal = switch::BE_LIBERAL;
        assert!(stale(liberal, liberal).is_none());
        let off = stale(liberal, 0).expect("a failure");
        assert_eq!(off.verdict, Verdict::Fail);
        assert!(
            off.what.contains("nf_conntrack_tcp_be_liberal 1, now 0")
                && off.what.contains("since the published ports' programs"),
            "{}",
            off.what
        );
        assert!(!off.what.contains("ignore_invalid_rst"), "{}", off.what);
        assert!(off.fix.as_deref().is_some_and(|f| f.contains("dxdp watch")));
        let on = stale(0, switch::IGNORE_INVALID_RST).expect("a warning");
        assert_eq!(on.verdict, Verdict::Warn);
        assert!(
            on.what
                .contains("nf_conntrack_tcp_ignore_invalid_rst 0, now 1"),
            "{}",
            on.what
        );
        // One off and one on: the one turned off decides.
        let both = stale(liberal, switch::IGNORE_INVALID_RST).expect("a check");
        assert_eq!(both.verdict, Verdict::Fail);
        let egress = stale_switches(EGRESS_PROGRAMS, liberal, 0, EGRESS_FIX).expect("a failure");
        assert!(
            egress.what.contains("since the egress programs"),
            "{}",
            egress.what
        );
        assert!(
            egress
                .fix
                .as_deref()
                .is_some_and(|f| f.contains("egress on"))
        );
    }
}
