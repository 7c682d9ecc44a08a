//! The Prometheus text exposition: pure functions of the pinned state and the watch's counters,
//! one per family of metrics, so that the format is unit-tested.
use std::fmt::{Display, Write as _};

use super::{
    counters::WatchCounters,
    scrape::{InterfaceState, PinnedState},
};
use crate::rules::{FIREWALL_REASON, REASONS};
use crate::{
    choice::Kind,
    datapath::{
        ConnectionTables, EgressRecord, ExposedPort, InterfaceCounters, LinkRecord, TableFill,
        Traffic,
    },
};

/// Renders the exposition text, family by family in a fixed order.
pub(super) fn render(state: &PinnedState, watch: WatchCounters) -> String {
    let mut out = String::new();
    render_links(&mut out, state);
    render_interfaces(&mut out, state);
    render_exposed(&mut out, &state.exposed);
    render_egress(&mut out, &state.egress);
    if let Some(tables) = &state.connections {
        render_connections(&mut out, tables);
    }
    render_reconciles(&mut out, &watch);
    render_refusals(&mut out, &watch);
    single(
        &mut out,
        "dxdp_last_reconcile_success_timestamp_seconds",
        "gauge",
        "When the last successful reconciliation ended (Unix time; 0 before the first).",
        watch.last_success_unix,
    );
    render_maps(&mut out, state);
    render_sandboxes(&mut out, state);
    render_build_info(&mut out);
    out
}

/// A pinned datapath's links and veths, with the labels its samples add.
struct Datapath<'s> {
    /// Nothing for the host's (its series as they always were), `,sandbox="…"` for an overlay
    /// sandbox's: its ifindexes are its own, and its links' counters live in its own maps.
    labels: String,
    links: &'s [LinkRecord],
    interfaces: &'s [InterfaceState],
}

/// The host's datapath, then each live overlay sandbox's.
fn datapaths(state: &PinnedState) -> Vec<Datapath<'_>> {
    let host = Datapath {
        labels: String::new(),
        links: &state.links,
        interfaces: &state.interfaces,
    };
    let sites = state.sites.iter().map(|site| Datapath {
        labels: format!(",sandbox=\"{}\"", escape(&site.sandbox)),
        links: &site.links,
        interfaces: &site.interfaces,
    });
    std::iter::once(host).chain(sites).collect()
}

/// The links installed, by datapath, and what each carried per direction.
fn render_links(out: &mut String, state: &PinnedState) {
    let datapaths = datapaths(state);
    header(out, "dxdp_links", "gauge", "Links installed, by datapath.");
    for dp in &datapaths {
        for kind in [Kind::Tc, Kind::Xdp] {
            let n = dp.links.iter().filter(|l| l.datapath == kind).count();
            let _ = writeln!(out, "dxdp_links{{datapath=\"{kind}\"{}}} {n}", dp.labels);
        }
    }

    type PickTraffic = fn(&Traffic) -> u64;
    let per_link: [(&str, &str, PickTraffic); 2] = [
        (
            "dxdp_link_redirected_packets_total",
            "Frames redirected over a link, per direction.",
            |t| t.packets,
        ),
        (
            "dxdp_link_redirected_bytes_total",
            "Bytes redirected over a link, per direction.",
            |t| t.bytes,
        ),
    ];
    for (metric, help, pick) in per_link {
        header(out, metric, "counter", help);
        for dp in &datapaths {
            for l in dp.links {
                for (from, to, traffic) in [
                    (&l.low_name, &l.high_name, &l.low_to_high),
                    (&l.high_name, &l.low_name, &l.high_to_low),
                ] {
                    let _ = writeln!(
                        out,
                        "{metric}{{from=\"{}\",to=\"{}\",network=\"{}\",datapath=\"{}\"{}}} {}",
                        escape(from),
                        escape(to),
                        escape(&l.network),
                        l.datapath,
                        dp.labels,
                        pick(traffic)
                    );
                }
            }
        }
    }
}

/// Per managed veth: what it redirected, passed to the bridge, sent back for a gone target and
/// refused as spoofed.
fn render_interfaces(out: &mut String, state: &PinnedState) {
    type Pick = fn(&InterfaceCounters) -> u64;
    let per_interface: [(&str, &str, Pick); 6] = [
        (
            "dxdp_interface_redirected_packets_total",
            "Frames redirected from a managed veth.",
            |c| c.redirected_packets,
        ),
        (
            "dxdp_interface_redirected_bytes_total",
            "Bytes redirected from a managed veth.",
            |c| c.redirected_bytes,
        ),
        (
            "dxdp_interface_passed_packets_total",
            "Frames a managed veth passed to the bridge.",
            |c| c.passed_packets,
        ),
        (
            "dxdp_interface_passed_bytes_total",
            "Bytes a managed veth passed to the bridge.",
            |c| c.passed_bytes,
        ),
        (
            "dxdp_interface_fallback_packets_total",
            "Frames for a link whose target is gone, sent to the bridge.",
            |c| c.fallback_packets,
        ),
        (
            "dxdp_interface_spoofed_packets_total",
            "Frames with a source MAC not the container's own, never redirected.",
            |c| c.spoofed_packets,
        ),
    ];
    let datapaths = datapaths(state);
    for (metric, help, pick) in per_interface {
        header(out, metric, "counter", help);
        for dp in &datapaths {
            for (ifindex, ifname, kind, counters) in dp.interfaces {
                let _ = writeln!(
                    out,
                    "{metric}{{ifindex=\"{ifindex}\",interface=\"{}\",datapath=\"{kind}\"{}}} {}",
                    escape(ifname),
                    dp.labels,
                    pick(counters)
                );
            }
        }
    }
}

/// The watch loop itself: how many reconciliations, how many failed, how long they took, and
/// whether it is connected to dockerd.
fn render_reconciles(out: &mut String, watch: &WatchCounters) {
    single(
        out,
        "dxdp_reconciles_total",
        "counter",
        "Reconciliations run.",
        watch.reconciles,
    );
    single(
        out,
        "dxdp_reconcile_errors_total",
        "counter",
        "Reconciliations that failed.",
        watch.errors,
    );
    header(
        out,
        "dxdp_reconcile_duration_seconds",
        "summary",
        "Time spent reconciling.",
    );
    let _ = writeln!(
        out,
        "dxdp_reconcile_duration_seconds_sum {}\ndxdp_reconcile_duration_seconds_count {}",
        watch.duration_sum, watch.reconciles
    );
    single(
        out,
        "dxdp_last_reconcile_duration_seconds",
        "gauge",
        "Duration of the latest reconciliation.",
        watch.last_duration,
    );
    single(
        out,
        "dxdp_docker_connected",
        "gauge",
        "Whether the watch is connected to dockerd.",
        u8::from(watch.docker_connected),
    );
}

/// What the labels or `dxdp.ingress` ask for that the watch does not do, and what a firewall
/// rule took away: pairs by reason, exposures, labels that do not parse.
fn render_refusals(out: &mut String, watch: &WatchCounters) {
    single(
        out,
        "dxdp_firewall_refused_pairs",
        "gauge",
        "Pairs the labels ask for that a firewall rule keeps on the bridge (see the watch log for the rules).",
        watch.firewall_refused,
    );
    single(
        out,
        "dxdp_links_removed_by_firewall_total",
        "counter",
        "Links a firewall rule that appeared after them took away (fail closed), made by the watch or by hand.",
        watch.removed_by_firewall,
    );
    header(
        out,
        "dxdp_refused_pairs",
        "gauge",
        "Refusals of pairs the labels ask for, by reason, at the last reconcile (see the watch log for each).",
    );
    for reason in REASONS {
        let n = if reason == FIREWALL_REASON {
            watch.firewall_refused as usize
        } else {
            watch.refused.get(reason).copied().unwrap_or(0)
        };
        let _ = writeln!(out, "dxdp_refused_pairs{{reason=\"{reason}\"}} {n}");
    }
    single(
        out,
        "dxdp_refused_exposures",
        "gauge",
        "Containers labeled dxdp.ingress whose published ports stay on Docker's path (a firewall rule on a port, ports on more than one network), at the last reconcile (see the watch log for why).",
        watch.refused_exposures,
    );
    single(
        out,
        "dxdp_exposures_removed_by_firewall_total",
        "counter",
        "Containers exposed by hand (dxdp expose) whose fast path a firewall rule that appeared after it took away (fail closed).",
        watch.exposures_removed_by_firewall,
    );
    single(
        out,
        "dxdp_egress_removed_by_firewall_total",
        "counter",
        "Containers whose egress fast path (dxdp egress on) a firewall rule that appeared after it took away (fail closed).",
        watch.egress_removed_by_firewall,
    );
    single(
        out,
        "dxdp_label_errors",
        "gauge",
        "Containers whose dxdp labels do not parse, left out of every link, at the last reconcile.",
        watch.malformed,
    );
}

/// How many entries the pinned maps hold at most, and how many are in use: the host's, and
/// each overlay sandbox's (maps of their own, of the same capacity).
fn render_maps(out: &mut String, state: &PinnedState) {
    let datapaths = datapaths(state);
    header(
        out,
        "dxdp_map_capacity",
        "gauge",
        "Entries the pinned maps hold at most (--max-links, --max-endpoints).",
    );
    for dp in &datapaths {
        per_map(
            out,
            "dxdp_map_capacity",
            &dp.labels,
            state.capacity.max_links as usize,
            state.capacity.max_endpoints as usize,
        );
    }
    header(
        out,
        "dxdp_map_entries",
        "gauge",
        "Entries in use in the pinned maps: links, and managed veths (endpoints).",
    );
    for dp in &datapaths {
        per_map(
            out,
            "dxdp_map_entries",
            &dp.labels,
            dp.links.len(),
            dp.interfaces.len(),
        );
    }
}

/// The overlay networks' sandboxes with pinned state here: live ones (their links are the
/// series labeled `sandbox`), and gone ones whose state is left behind.
fn render_sandboxes(out: &mut String, state: &PinnedState) {
    header(
        out,
        "dxdp_overlay_sandboxes",
        "gauge",
        "Overlay network sandboxes with pinned dxdp state on this node: live, or gone (their state stays until the watch's next resync, dxdp link or unlink, or dxdp cleanup).",
    );
    let _ = writeln!(
        out,
        "dxdp_overlay_sandboxes{{state=\"live\"}} {}\ndxdp_overlay_sandboxes{{state=\"gone\"}} {}",
        state.sites.len(),
        state.gone_sites
    );
}

/// The running version and the ABI of the state it pins.
fn render_build_info(out: &mut String) {
    header(
        out,
        "dxdp_build_info",
        "gauge",
        "The running dxdp: its version and the layout (ABI) of the state it pins.",
    );
    let _ = writeln!(
        out,
        "dxdp_build_info{{version=\"{}\",abi=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        dxdp_common::ABI_VERSION
    );
}

/// How full each connection table of the exposed ports is: an established table near its
/// capacity forgets connections; an opening table that fills up says handshakes are not
/// completed (a SYN flood).
fn render_connections(out: &mut String, tables: &ConnectionTables) {
    let rows = [
        ("established", tables.established),
        ("opening", tables.opening),
        ("udp", tables.udp),
    ];
    type Pick = fn(&TableFill) -> u64;
    let gauges: [(&str, &str, Pick); 2] = [
        (
            "dxdp_connections",
            "Connections through exposed ports, by table: TCP established, TCP opening (handshake not completed), UDP flows.",
            |f| f.entries as u64,
        ),
        (
            "dxdp_connections_capacity",
            "Entries each connection table holds at most (--max-connections); beyond it the least recently used is forgotten.",
            |f| u64::from(f.capacity),
        ),
    ];
    for (metric, help, pick) in gauges {
        header(out, metric, "gauge", help);
        for (table, fill) in &rows {
            let _ = writeln!(out, "{metric}{{table=\"{table}\"}} {}", pick(fill));
        }
    }
}

/// The exposed published ports: how many, and per port what the fast path carried each way and
/// what it left to Docker's path.
fn render_exposed(out: &mut String, exposed: &[ExposedPort]) {
    header(
        out,
        "dxdp_exposed_ports",
        "gauge",
        "Published ports taken from the NIC straight into their container.",
    );
    let _ = writeln!(out, "dxdp_exposed_ports {}", exposed.len());
    type Pick = fn(&ExposedPort) -> u64;
    let per_port: [(&str, &str, Pick, Pick); 2] = [
        (
            "dxdp_port_packets_total",
            "Packets the fast path carried to (in) and from (out) an exposed port.",
            |p| p.inbound.packets,
            |p| p.outbound.packets,
        ),
        (
            "dxdp_port_bytes_total",
            "Bytes the fast path carried to (in) and from (out) an exposed port.",
            |p| p.inbound.bytes,
            |p| p.outbound.bytes,
        ),
    ];
    let labels = |p: &ExposedPort| {
        format!(
            "container=\"{}\",address=\"{}\",port=\"{}\",protocol=\"{}\"",
            escape(&p.container),
            p.host_addr,
            p.host_port,
            p.protocol
        )
    };
    for (metric, help, inbound, outbound) in per_port {
        header(out, metric, "counter", help);
        for p in exposed {
            let l = labels(p);
            let _ = writeln!(out, "{metric}{{{l},direction=\"in\"}} {}", inbound(p));
            let _ = writeln!(out, "{metric}{{{l},direction=\"out\"}} {}", outbound(p));
        }
    }
    header(
        out,
        "dxdp_port_passed_packets_total",
        "counter",
        "Packets to an exposed port left to Docker's path (fragments, IP options, connections from before it was exposed, a client not routed back through the NIC, a source the stack refuses).",
    );
    for p in exposed {
        let _ = writeln!(
            out,
            "dxdp_port_passed_packets_total{{{}}} {}",
            labels(p),
            p.passed_packets
        );
    }
    header(
        out,
        "dxdp_port_refused_packets_total",
        "counter",
        "Segments of fast-path TCP connections to an exposed port dropped as conntrack would mark them INVALID (out of window), which Docker's path does not deliver either.",
    );
    for p in exposed {
        let _ = writeln!(
            out,
            "dxdp_port_refused_packets_total{{{}}} {}",
            labels(p),
            p.refused_packets
        );
    }
}

/// The containers with the egress fast path: how many, and per container what it carried out of
/// the NIC and back into the container, and what it left to Docker's path.
fn render_egress(out: &mut String, egress: &[(EgressRecord, String)]) {
    header(
        out,
        "dxdp_egress_containers",
        "gauge",
        "Containers whose established outbound connections leave straight by the NIC (dxdp egress on, the dxdp.egress label).",
    );
    let _ = writeln!(out, "dxdp_egress_containers {}", egress.len());
    let labels = |(r, nic): &(EgressRecord, String)| {
        format!(
            "container=\"{}\",address=\"{}\",nic=\"{}\"",
            escape(&r.container),
            r.addr,
            escape(nic)
        )
    };
    type Pick = fn(&Traffic) -> u64;
    let per_container: [(&str, &str, Pick); 2] = [
        (
            "dxdp_egress_packets_total",
            "Packets of a container's outbound connections the fast path carried out of the NIC (out) and their replies into the container (back).",
            |t| t.packets,
        ),
        (
            "dxdp_egress_bytes_total",
            "Bytes of a container's outbound connections the fast path carried out of the NIC (out) and their replies into the container (back).",
            |t| t.bytes,
        ),
    ];
    for (metric, help, pick) in per_container {
        header(out, metric, "counter", help);
        for e in egress {
            let l = labels(e);
            let _ = writeln!(
                out,
                "{metric}{{{l},direction=\"out\"}} {}",
                pick(&e.0.outbound)
            );
            let _ = writeln!(
                out,
                "{metric}{{{l},direction=\"back\"}} {}",
                pick(&e.0.inbound)
            );
        }
    }
    header(
        out,
        "dxdp_egress_passed_packets_total",
        "counter",
        "A container's TCP and UDP packets left to Docker's path: each connection's first packets, and what else the fast path does not carry (docs/egress.md).",
    );
    for e in egress {
        let _ = writeln!(
            out,
            "dxdp_egress_passed_packets_total{{{}}} {}",
            labels(e),
            e.0.passed_packets
        );
    }
}

/// The `links` and `endpoints` samples of a per-map metric, with `labels` added.
fn per_map(out: &mut String, name: &str, labels: &str, links: usize, endpoints: usize) {
    let _ = writeln!(out, "{name}{{map=\"links\"{labels}}} {links}");
    let _ = writeln!(out, "{name}{{map=\"endpoints\"{labels}}} {endpoints}");
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A family of one sample without labels.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: impl Display) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{choice::Origin, datapath::Capacity, metrics::scrape::SiteState};

    /// A fixed state and loop, with something in every family.
    fn fixed() -> (PinnedState, WatchCounters) {
        let state = PinnedState {
            links: vec![LinkRecord {
                low_ifindex: 3,
                high_ifindex: 4,
                low_name: "web".into(),
                high_name: "d\"b".into(),
                network: "app".into(),
                datapath: Kind::Tc,
                origin: Origin::Watch,
                bypasses_firewall: false,
                families: crate::family::Families::ALL,
                created_unix_secs: 0,
                low_to_high: Traffic {
                    packets: 7,
                    bytes: 700,
                },
                high_to_low: Traffic::default(),
            }],
            interfaces: vec![(
                3,
                "veth1".into(),
                Kind::Tc,
                InterfaceCounters {
                    redirected_packets: 7,
                    ..Default::default()
                },
            )],
            exposed: vec![ExposedPort {
                container: "web".into(),
                veth_ifindex: 3,
                nic_ifindex: 2,
                host_addr: "192.0.2.1".parse().unwrap(),
                protocol: "tcp",
                host_port: 8080,
                container_addr: "172.17.0.2".parse().unwrap(),
                container_port: 80,
                origin: Origin::Watch,
                bypasses_firewall: false,
                created_unix_secs: 0,
                inbound: Traffic {
                    packets: 5,
                    bytes: 500,
                },
                outbound: Traffic {
                    packets: 4,
                    bytes: 400,
                },
                passed_packets: 2,
                refused_packets: 3,
            }],
            egress: vec![(
                EgressRecord {
                    container: "cli\"ent".into(),
                    veth_ifindex: 6,
                    nic_ifindex: 2,
                    addr: "172.17.0.3".parse().unwrap(),
                    created_unix_secs: 0,
                    outbound: Traffic {
                        packets: 12,
                        bytes: 1200,
                    },
                    inbound: Traffic {
                        packets: 10,
                        bytes: 15000,
                    },
                    passed_packets: 4,
                },
                "eth0".into(),
            )],
            capacity: Capacity {
                max_endpoints: 8,
                max_links: 4,
                max_connections: 16,
            },
            connections: Some(ConnectionTables {
                established: TableFill {
                    entries: 5,
                    capacity: 16,
                },
                ..Default::default()
            }),
            // An overlay network's sandbox whose ifindexes collide with the host's, and one
            // gone sandbox.
            sites: vec![SiteState {
                sandbox: "1-qqxh7f1pd1".into(),
                links: vec![LinkRecord {
                    low_ifindex: 3,
                    high_ifindex: 5,
                    low_name: "api.1.x7k2".into(),
                    high_name: "db.1.p3q9".into(),
                    network: "backend".into(),
                    datapath: Kind::Xdp,
                    origin: Origin::Watch,
                    bypasses_firewall: false,
                    families: crate::family::Families::ALL,
                    created_unix_secs: 0,
                    low_to_high: Traffic {
                        packets: 11,
                        bytes: 1100,
                    },
                    high_to_low: Traffic {
                        packets: 9,
                        bytes: 900,
                    },
                }],
                interfaces: vec![
                    (
                        3,
                        "veth0".into(),
                        Kind::Xdp,
                        InterfaceCounters {
                            redirected_packets: 11,
                            redirected_bytes: 1100,
                            ..Default::default()
                        },
                    ),
                    (5, "veth1".into(), Kind::Xdp, InterfaceCounters::default()),
                ],
            }],
            gone_sites: 1,
        };
        let watch = WatchCounters {
            reconciles: 2,
            errors: 1,
            duration_sum: 0.5,
            last_duration: 0.25,
            docker_connected: true,
            firewall_refused: 3,
            refused_exposures: 2,
            exposures_removed_by_firewall: 5,
            egress_removed_by_firewall: 6,
            removed_by_firewall: 4,
            refused: BTreeMap::from([("icc_disabled", 2)]),
            malformed: 1,
            last_success_unix: 1.5e9,
        };
        (state, watch)
    }

    #[test]
    fn renders_links_interfaces_and_loop_metrics() {
        let (state, watch) = fixed();
        let text = render(&state, watch);
        assert!(
            text.contains("dxdp_refused_pairs{reason=\"firewall\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_links_removed_by_firewall_total 4\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_refused_pairs{reason=\"icc_disabled\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_refused_pairs{reason=\"opted_out\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("dxdp_label_errors 1\n"), "{text}");
        assert!(
            text.contains("dxdp_last_reconcile_success_timestamp_seconds 1500000000\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_map_capacity{map=\"links\"} 4\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_map_capacity{map=\"endpoints\"} 8\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_map_entries{map=\"links\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_map_entries{map=\"endpoints\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("dxdp_firewall_refused_pairs 3\n"), "{text}");
        assert!(text.contains("dxdp_refused_exposures 2\n"), "{text}");
        assert!(
            text.contains("dxdp_exposures_removed_by_firewall_total 5\n")
                && text.contains("dxdp_egress_removed_by_firewall_total 6\n"),
            "{text}"
        );
        assert!(text.contains(&format!(
            "dxdp_build_info{{version=\"{}\",abi=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION"),
            dxdp_common::ABI_VERSION
        )));
        assert!(text.contains("dxdp_links{datapath=\"tc\"} 1\n"), "{text}");
        assert!(text.contains("dxdp_links{datapath=\"xdp\"} 0\n"));
        assert!(text.contains(
            "dxdp_link_redirected_packets_total{from=\"web\",to=\"d\\\"b\",network=\"app\",datapath=\"tc\"} 7\n"
        ));
        assert!(text.contains(
            "dxdp_interface_redirected_packets_total{ifindex=\"3\",interface=\"veth1\",datapath=\"tc\"} 7\n"
        ));
        assert!(text.contains("dxdp_exposed_ports 1\n"), "{text}");
        assert!(
            text.contains("dxdp_connections{table=\"established\"} 5\n")
                && text.contains("dxdp_connections_capacity{table=\"established\"} 16\n")
                && text.contains("dxdp_connections{table=\"udp\"} 0\n"),
            "{text}"
        );
        let port = "container=\"web\",address=\"192.0.2.1\",port=\"8080\",protocol=\"tcp\"";
        for sample in [
            format!("dxdp_port_packets_total{{{port},direction=\"in\"}} 5\n"),
            format!("dxdp_port_bytes_total{{{port},direction=\"out\"}} 400\n"),
            format!("dxdp_port_passed_packets_total{{{port}}} 2\n"),
            format!("dxdp_port_refused_packets_total{{{port}}} 3\n"),
        ] {
            assert!(text.contains(&sample), "{sample} in {text}");
        }
        assert!(text.contains("dxdp_egress_containers 1\n"), "{text}");
        let client = "container=\"cli\\\"ent\",address=\"172.17.0.3\",nic=\"eth0\"";
        for sample in [
            format!("dxdp_egress_packets_total{{{client},direction=\"out\"}} 12\n"),
            format!("dxdp_egress_bytes_total{{{client},direction=\"back\"}} 15000\n"),
            format!("dxdp_egress_passed_packets_total{{{client}}} 4\n"),
        ] {
            assert!(text.contains(&sample), "{sample} in {text}");
        }
        assert!(text.contains("dxdp_reconcile_errors_total 1\n"));
        assert!(text.contains("dxdp_reconcile_duration_seconds_count 2\n"));
        assert!(text.contains("dxdp_docker_connected 1\n"));
        // Every sample belongs to a family announced with HELP and TYPE.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = name.trim_end_matches("_sum").trim_end_matches("_count");
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "no TYPE for {name}"
            );
        }
    }

    /// The whole text for a fixed state, to the byte: the families, their order, HELP and TYPE
    /// lines and every sample (the version and ABI of `dxdp_build_info` are put in).
    #[test]
    fn renders_a_fixed_state_to_the_byte() {
        let (state, watch) = fixed();
        let expected = include_str!("testdata/fixed_state.prom")
            .replace("@VERSION@", env!("CARGO_PKG_VERSION"))
            .replace("@ABI@", &dxdp_common::ABI_VERSION.to_string());
        let text = render(&state, watch);
        assert_eq!(text, expected);
    }
}
