//! The pinned state's checks, on the host and in each overlay sandbox: it opens, its programs are
//! attached and pinned, no other tool's program sits beside them, its tables have room.
use std::path::Path;

use super::{
    Check, Verdict, check,
    rules::{covered_links, egress, exposures},
};
use crate::{
    choice::Kind,
    commands::mtu,
    datapath::{Attachment, Capacity, ConnectionTables, Datapath, LinkRecord, TablePressure},
    firewall::RulesetCache,
    netlink::{self, Interface},
    netns::NetnsPath,
};

/// The pinned state opens, and no other tool's program sits on a managed veth.
pub(super) fn programs(pin_dir: &Path, capacity: Capacity) -> Vec<Check> {
    if !pin_dir.exists() {
        return vec![check(
            Verdict::Ok,
            format!("no pinned state at {} yet", pin_dir.display()),
            None,
        )];
    }
    let mut datapath = match Datapath::open(pin_dir, capacity) {
        Ok(d) => d,
        Err(e) => {
            return vec![check(
                Verdict::Fail,
                format!("pinned state at {}: {e:#}", pin_dir.display()),
                Some("dxdp cleanup, then link again"),
            )];
        }
    };
    let host = netlink::interfaces(&NetnsPath::host()).unwrap_or_default();
    let mut out = vec![];
    let managed = datapath.interfaces().unwrap_or_default();
    let foreign = datapath.foreign_programs(&host).unwrap_or_default();
    for (ifname, description) in &foreign {
        out.push(check(
            Verdict::Warn,
            format!("{ifname}: another tool's program is attached: {description}"),
            Some("check that it does not conflict with dxdp's redirect"),
        ));
    }
    let records = datapath.links().unwrap_or_default();
    out.extend(attachments(&mut datapath, &host, &records, None));
    // One read of the rules serves the links, the exposed ports and the egress fast paths.
    let mut rules = RulesetCache::default();
    let mut readable = rules.refresh().is_ok().then_some(&mut rules);
    out.extend(covered_links(
        &mut datapath,
        readable.as_deref_mut(),
        &host,
        &records,
    ));
    out.extend(exposures(&mut datapath, readable.as_deref_mut(), &host));
    out.extend(egress(&mut datapath, readable, &host));
    if let Ok(tables) = datapath.connection_tables() {
        out.extend(connection_tables(&tables));
    }
    out.extend(mtus(&host, &records));
    let links = records.len();
    let xdp = managed.iter().filter(|(_, k)| *k == Kind::Xdp).count();
    out.push(check(
        Verdict::Ok,
        format!(
            "pinned state at {}: {links} link(s), {} managed veth(s) ({xdp} xdp)",
            pin_dir.display(),
            managed.len()
        ),
        None,
    ));
    out
}

/// Once per network that carries links, its MTU (the smallest of its linked veths'), and for the
/// default what a larger one would change: information, not a warning.
pub(super) fn mtus(host: &[Interface], links: &[LinkRecord]) -> Vec<Check> {
    let mut by_network: std::collections::BTreeMap<&str, (usize, Option<u32>)> = Default::default();
    for link in links {
        let mtu = [link.low_ifindex, link.high_ifindex]
            .iter()
            .filter_map(|i| host.iter().find(|h| h.index == *i))
            .filter_map(|veth| mtu::of(&veth.name))
            .min();
        let entry = by_network.entry(&link.network).or_insert((0, None));
        entry.0 += 1;
        entry.1 = match (entry.1, mtu) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
    }
    by_network
        .into_iter()
        .filter_map(|(network, (links, mtu))| {
            Some(check(
                Verdict::Ok,
                format!(
                    "network {network}: {links} link(s) at {}",
                    mtu::advice(mtu?)
                ),
                None,
            ))
        })
        .collect()
}

/// The tables of connections through exposed ports: a warning where one is nearly full,
/// nothing while all are empty.
pub(super) fn connection_tables(t: &ConnectionTables) -> Option<Check> {
    let (e, o) = (&t.established, &t.opening);
    match t.pressure() {
        Some(TablePressure::Forgetting) => Some(check(
            Verdict::Warn,
            format!(
                "connections through exposed ports: {} of {} established: the least recently \
                 used are being forgotten, and one whose container speaks next breaks",
                e.entries, e.capacity
            ),
            Some(
                "raise --max-connections (DXDP_MAX_CONNECTIONS) on a fresh pin directory: \
                 dxdp cleanup, then expose again",
            ),
        )),
        Some(TablePressure::UnansweredHandshakes) => Some(check(
            Verdict::Warn,
            format!(
                "connections through exposed ports: {} of {} being opened whose clients never \
                 completed the handshake (a SYN flood?); established connections keep their \
                 place",
                o.entries, o.capacity
            ),
            None,
        )),
        None => (e.entries + o.entries + t.udp.entries > 0).then(|| {
            check(
                Verdict::Ok,
                format!(
                    "connections through exposed ports: {} established (of {}), {} being \
                     opened, {} UDP flows",
                    e.entries, e.capacity, o.entries, t.udp.entries
                ),
                None,
            )
        }),
    }
}

/// Each link whose veths do not both carry dxdp's program with its attachment pinned, with
/// what to do. `sandbox` names the overlay sandbox the links are in (`None`: the host).
pub(super) fn attachments(
    datapath: &mut Datapath,
    here: &[Interface],
    links: &[LinkRecord],
    sandbox: Option<&str>,
) -> Vec<Check> {
    let states = match datapath.attachments(here) {
        Ok(states) => states,
        Err(e) => {
            return vec![check(
                Verdict::Warn,
                format!("cannot check the programs' attachments: {e:#}"),
                None,
            )];
        }
    };
    attachment_checks(&states, here, links, sandbox)
}

/// [`attachments`] of the states found.
pub(super) fn attachment_checks(
    states: &[(u32, Attachment)],
    here: &[Interface],
    links: &[LinkRecord],
    sandbox: Option<&str>,
) -> Vec<Check> {
    let place = sandbox.map_or(String::new(), |s| format!(" in overlay sandbox {s}"));
    let mut out = Vec::new();
    for link in links {
        let ends = [
            (link.low_ifindex, &link.low_name),
            (link.high_ifindex, &link.high_name),
        ];
        let mut problems = Vec::new();
        let mut fix = format!(
            "dxdp link {} {} (it attaches again)",
            link.low_name, link.high_name
        );
        for (ifindex, name) in ends {
            let veth = here
                .iter()
                .find(|i| i.index == ifindex)
                .map_or_else(|| format!("ifindex {ifindex}"), |i| i.name.clone());
            match states.iter().find(|(i, _)| *i == ifindex).map(|s| s.1) {
                Some(Attachment::Attached) | None => {}
                Some(Attachment::VethGone) => {
                    problems.push(format!("{name}'s veth is gone (its container stopped)"));
                    fix = format!(
                        "dxdp unlink {} {} (a running watch removes its own links at once)",
                        link.low_name, link.high_name
                    );
                }
                Some(Attachment::Detached) => problems.push(format!(
                    "dxdp's {} program is not attached to {name}'s veth {veth}, whose frames \
                     take the bridge",
                    link.datapath
                )),
                Some(Attachment::Unpinned) => {
                    problems.push(format!(
                        "dxdp's {} program is attached to {name}'s veth {veth} without its \
                         pin: another process holds that attachment",
                        link.datapath
                    ));
                    fix = "stop the process that holds it, or restart the container (a new \
                           veth), then dxdp link again"
                        .to_owned();
                }
            }
        }
        if !problems.is_empty() {
            out.push(check(
                Verdict::Warn,
                format!(
                    "link {} - {}{place}: {}",
                    link.low_name,
                    link.high_name,
                    problems.join("; ")
                ),
                Some(&fix),
            ));
        }
    }
    out
}

/// Each overlay network's sandbox with pinned state on this node: a live one's datapath,
/// checked from inside it (its veths and rules are its own); a gone one's state, left behind.
pub(super) fn overlay_sites(pin_dir: &Path, capacity: Capacity) -> Vec<Check> {
    let mut out = Vec::new();
    for site in crate::overlay::sites(pin_dir) {
        let Some(sandbox) = &site.sandbox else {
            out.push(gone_site(&site.name, &site.pin_dir));
            continue;
        };
        match sandbox.run(|| Ok(site_checks(&site.pin_dir, &site.name, capacity))) {
            Ok(checks) => out.extend(checks),
            Err(e) => out.push(check(
                Verdict::Warn,
                format!("overlay sandbox {}: {e:#}", site.name),
                None,
            )),
        }
    }
    out
}

/// The pinned state of an overlay sandbox that is gone: its veths went with it, so its
/// programs redirect nothing, but its pins hold the programs and maps until removed.
pub(super) fn gone_site(name: &str, dir: &Path) -> Check {
    check(
        Verdict::Warn,
        format!(
            "overlay sandbox {name} is gone (its network removed, or its last task on this node \
             stopped), and its pinned state is left at {}",
            dir.display()
        ),
        Some(
            "dxdp cleanup removes it (and every link); a running watch removes it at its next \
             resync, as does the next dxdp link or unlink",
        ),
    )
}

/// One live sandbox's datapath, read on a thread inside the sandbox.
pub(super) fn site_checks(dir: &Path, name: &str, capacity: Capacity) -> Vec<Check> {
    let mut datapath = match Datapath::open(dir, capacity) {
        Ok(d) => d,
        Err(e) => {
            return vec![check(
                Verdict::Fail,
                format!(
                    "overlay sandbox {name}: pinned state at {}: {e:#}",
                    dir.display()
                ),
                Some("dxdp cleanup, then link again"),
            )];
        }
    };
    let here = netlink::interfaces(&NetnsPath::host()).unwrap_or_default();
    let mut out = Vec::new();
    for (ifname, description) in datapath.foreign_programs(&here).unwrap_or_default() {
        out.push(check(
            Verdict::Warn,
            format!(
                "{ifname} in overlay sandbox {name}: another tool's program is attached: \
                 {description}"
            ),
            Some("check that it does not conflict with dxdp's redirect"),
        ));
    }
    let records = datapath.links().unwrap_or_default();
    out.extend(attachments(&mut datapath, &here, &records, Some(name)));
    // The sandbox's own rules, read from inside it.
    let mut rules = RulesetCache::default();
    let readable = rules.refresh().is_ok().then_some(&mut rules);
    out.extend(covered_links(&mut datapath, readable, &here, &records));
    let managed = datapath.interfaces().unwrap_or_default();
    let xdp = managed.iter().filter(|(_, k)| *k == Kind::Xdp).count();
    let network = records
        .first()
        .map_or(String::new(), |l| format!("network {}, ", l.network));
    out.push(check(
        Verdict::Ok,
        format!(
            "overlay sandbox {name} ({network}pinned at {}): {} link(s), {} managed veth(s) \
             ({xdp} xdp)",
            dir.display(),
            records.len(),
            managed.len()
        ),
        None,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{choice::Origin, datapath::TableFill, family::Families};

    fn tables(established: usize, opening: usize, udp: usize) -> ConnectionTables {
        let fill = |entries, capacity| TableFill { entries, capacity };
        ConnectionTables {
            established: fill(established, 1000),
            opening: fill(opening, 250),
            udp: fill(udp, 250),
        }
    }

    fn link(low: (u32, &str), high: (u32, &str)) -> LinkRecord {
        LinkRecord {
            low_ifindex: low.0,
            high_ifindex: high.0,
            low_name: low.1.into(),
            high_name: high.1.into(),
            network: "backend".into(),
            datapath: Kind::Tc,
            origin: Origin::Watch,
            bypasses_firewall: false,
            families: Families::ALL,
            created_unix_secs: 0,
            low_to_high: Default::default(),
            high_to_low: Default::default(),
        }
    }

    fn veth(index: u32, name: &str) -> Interface {
        Interface {
            index,
            name: name.into(),
            mac: None,
            kind: Some("veth".into()),
            peer_index: None,
            peer_netnsid: None,
            master: None,
            xdp_prog_id: None,
            up: true,
        }
    }

    /// A link whose veths carry dxdp's attached, pinned program says nothing; one with a veth
    /// gone, detached or unpinned is a warning naming the end, the sandbox and the way out.
    #[test]
    fn attachments_warn_per_link_naming_the_sandbox_and_the_fix() {
        let here = [veth(3, "veth0"), veth(5, "veth1"), veth(7, "veth2")];
        let links = [
            link((3, "api.1"), (5, "db.1")),
            link((7, "web.1"), (9, "cache.1")),
        ];
        let fine = [(3, Attachment::Attached), (5, Attachment::Attached)];
        assert!(attachment_checks(&fine, &here, &links[..1], Some("1-qqxh7f1pd1")).is_empty());

        let detached = [(3, Attachment::Attached), (5, Attachment::Detached)];
        let checks = attachment_checks(&detached, &here, &links[..1], Some("1-qqxh7f1pd1"));
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].verdict, Verdict::Warn);
        assert!(
            checks[0]
                .what
                .contains("api.1 - db.1 in overlay sandbox 1-qqxh7f1pd1")
                && checks[0].what.contains("not attached to db.1's veth veth1"),
            "{}",
            checks[0].what
        );
        assert_eq!(
            checks[0].fix.as_deref(),
            Some("dxdp link api.1 db.1 (it attaches again)")
        );

        let gone = [(7, Attachment::Unpinned), (9, Attachment::VethGone)];
        let checks = attachment_checks(&gone, &here, &links[1..], None);
        assert_eq!(checks.len(), 1);
        assert!(
            checks[0].what.starts_with("link web.1 - cache.1: ")
                && checks[0].what.contains("cache.1's veth is gone")
                && checks[0].what.contains("without its pin"),
            "{}",
            checks[0].what
        );
    }

    #[test]
    fn a_gone_sandboxs_state_is_a_warning_with_the_way_out() {
        let c = gone_site(
            "1-qqxh7f1pd1",
            Path::new("/sys/fs/bpf/dxdp/overlay/1-qqxh7f1pd1@4026532001"),
        );
        assert_eq!(c.verdict, Verdict::Warn);
        assert!(
            c.what.contains("1-qqxh7f1pd1 is gone") && c.what.contains("@4026532001"),
            "{}",
            c.what
        );
        assert!(c.fix.is_some_and(|f| f.starts_with("dxdp cleanup")));
    }

    #[test]
    fn connection_tables_warn_when_nearly_full_and_stay_quiet_when_empty() {
        assert!(connection_tables(&tables(0, 0, 0)).is_none());
        let calm = connection_tables(&tables(10, 2, 3)).expect("a line");
        assert_eq!(calm.verdict, Verdict::Ok);
        let flood = connection_tables(&tables(10, 240, 3)).expect("a line");
        assert_eq!(flood.verdict, Verdict::Warn);
        assert!(flood.what.contains("SYN flood"), "{}", flood.what);
        let crowded = connection_tables(&tables(950, 240, 3)).expect("a line");
        assert_eq!(crowded.verdict, Verdict::Warn);
        assert!(
            crowded
                .fix
                .as_deref()
                .is_some_and(|f| f.contains("--max-connections")),
            "{:?}",
            crowded.fix
        );
    }
}
