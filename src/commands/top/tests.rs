use super::*;
use std::time::UNIX_EPOCH;

use crate::{
    choice::{Kind, Origin},
    datapath::{InterfaceCounters, LinkRecord, Traffic},
};

fn link(low: u32, high: u32, l2h: (u64, u64), h2l: (u64, u64)) -> LinkSnap {
    LinkSnap {
        record: LinkRecord {
            low_ifindex: low,
            high_ifindex: high,
            low_name: format!("c{low}"),
            high_name: format!("c{high}"),
            network: "net".to_owned(),
            datapath: Kind::Tc,
            origin: Origin::Manual,
            bypasses_firewall: false,
            families: crate::family::Families::ALL,
            created_unix_secs: 100,
            low_to_high: Traffic {
                packets: l2h.0,
                bytes: l2h.1,
            },
            high_to_low: Traffic {
                packets: h2l.0,
                bytes: h2l.1,
            },
        },
        low_ifname: Some(format!("veth{low}")),
        high_ifname: None,
    }
}

fn iface(ifindex: u32, redirected: u64, fallback: u64) -> InterfaceSnap {
    InterfaceSnap {
        ifindex,
        ifname: Some(format!("veth{ifindex}")),
        datapath: Kind::Xdp,
        counters: InterfaceCounters {
            redirected_packets: redirected,
            fallback_packets: fallback,
            ..Default::default()
        },
    }
}

#[test]
fn rates_are_deltas_over_elapsed_time_busiest_first() {
    let prev = Snapshot {
        links: vec![link(1, 2, (10, 1000), (0, 0)), link(3, 4, (0, 0), (0, 0))],
        interfaces: vec![iface(1, 10, 0), iface(2, 0, 5)],
        ports: vec![],
        egress: vec![],
    };
    let cur = Snapshot {
        links: vec![
            link(1, 2, (110, 2000), (0, 0)),
            link(3, 4, (0, 0), (50, 500_000)),
        ],
        interfaces: vec![iface(1, 110, 0), iface(2, 0, 405)],
        ..Default::default()
    };
    let (links, interfaces) = rates(&prev, &cur, Duration::from_millis(500));
    // 500,000 bytes in 0.5 s is 8 Mbit/s: the busiest link comes first.
    assert_eq!((links[0].a.as_str(), links[0].b.as_str()), ("c3", "c4"));
    assert_eq!(links[0].b_to_a.bits_per_sec, 8_000_000.0);
    assert_eq!(links[0].b_to_a.packets_per_sec, 100.0);
    assert_eq!(links[0].a_to_b, Rate::default());
    assert_eq!(links[1].a_to_b.packets_per_sec, 200.0);
    assert_eq!(links[1].a_to_b.bits_per_sec, 16_000.0);
    assert_eq!(links[1].a_veth.as_deref(), Some("veth1"));
    assert_eq!(links[1].b_veth, None);
    // veth 2's fallbacks (800/s) outrun veth 1's redirects (200/s).
    assert_eq!(interfaces[0].ifindex, 2);
    assert_eq!(interfaces[0].fallback_packets_per_sec, 800.0);
    assert_eq!(interfaces[1].redirected_packets_per_sec, 200.0);
}

#[test]
fn resets_new_and_vanished_state_never_give_negative_rates() {
    let prev = Snapshot {
        links: vec![
            link(1, 2, (1000, 90_000), (5, 500)),
            link(5, 6, (1, 1), (1, 1)),
        ],
        interfaces: vec![iface(1, 1000, 7), iface(9, 3, 3)],
        ..Default::default()
    };
    let mut recreated = link(7, 8, (40, 4000), (0, 0));
    recreated.record.created_unix_secs = 200;
    let mut relinked = link(1, 2, (3, 300), (0, 0));
    relinked.record.created_unix_secs = 100; // same key, counters went backwards
    let cur = Snapshot {
        // 1-2 reset, 5-6 vanished, 7-8 new.
        links: vec![relinked, recreated],
        interfaces: vec![iface(1, 2, 0), iface(3, 50, 50)],
        ..Default::default()
    };
    let (links, interfaces) = rates(&prev, &cur, Duration::from_secs(1));
    assert_eq!(links.len(), 2);
    assert_eq!(interfaces.len(), 2);
    for l in &links {
        for r in [l.a_to_b, l.b_to_a] {
            assert_eq!(r, Rate::default(), "{l:?}");
        }
    }
    for i in &interfaces {
        assert_eq!(i.packets_per_sec(), 0.0, "{i:?}");
    }
    // No elapsed time: zero, not infinity or NaN.
    let (links, _) = rates(&cur, &cur, Duration::ZERO);
    assert!(links.iter().all(|l| l.bits_per_sec() == 0.0));
}

#[test]
fn json_sample_has_the_documented_shape() {
    let prev = Snapshot {
        links: vec![link(1, 2, (0, 0), (0, 0))],
        interfaces: vec![iface(1, 0, 0)],
        ..Default::default()
    };
    let cur = Snapshot {
        links: vec![link(1, 2, (1, 125), (0, 0))],
        interfaces: vec![iface(1, 1, 0)],
        ..Default::default()
    };
    let (links, interfaces) = rates(&prev, &cur, Duration::from_secs(1));
    let sample = Sample {
        schema: SCHEMA,
        time: clock(UNIX_EPOCH + Duration::from_millis(1_764_769_801_250)).0,
        interval_secs: 1.0,
        links,
        interfaces,
        ports: vec![],
        egress: vec![],
    };
    let v = serde_json::to_value(&sample).expect("json");
    assert_eq!(v["schema"], "dxdp.top/1");
    assert_eq!(v["time"], "2025-12-03T13:50:01.250Z");
    assert_eq!(v["links"][0]["a"], "c1");
    assert_eq!(v["links"][0]["a_veth"], "veth1");
    assert_eq!(v["links"][0]["datapath"], "tc");
    assert_eq!(v["links"][0]["a_to_b"]["bits_per_sec"], 1000.0);
    assert_eq!(v["links"][0]["b_to_a"]["packets_per_sec"], 0.0);
    assert_eq!(v["interfaces"][0]["ifname"], "veth1");
    assert_eq!(v["interfaces"][0]["redirected_packets_per_sec"], 1.0);
    let mut text = Vec::new();
    render(&sample, Path::new("/sys/fs/bpf/dxdp"), &mut text).expect("render");
    let text = String::from_utf8(text).expect("utf-8");
    assert!(
        text.starts_with("dxdp top  2025-12-03 13:50:01 UTC  every 1s  1 links"),
        "{text}"
    );
}

#[test]
fn empty_state_renders_no_links() {
    let sample = Sample {
        schema: SCHEMA,
        time: clock(UNIX_EPOCH).0,
        interval_secs: 1.0,
        links: vec![],
        interfaces: vec![],
        ports: vec![],
        egress: vec![],
    };
    let mut text = Vec::new();
    render(&sample, Path::new("/x"), &mut text).expect("render");
    let text = String::from_utf8(text).expect("utf-8");
    assert!(text.contains("no links (pin directory /x)"), "{text}");
    assert!(
        text.starts_with("dxdp top  1970-01-01 00:00:00 UTC"),
        "{text}"
    );
}

#[test]
fn si_prefixes() {
    for (v, s) in [
        (0.0, "0"),
        (-0.0, "0"),
        (950.0, "950"),
        (1234.0, "1.23k"),
        (12_345.0, "12.3k"),
        (9.41e9, "9.41G"),
        (123e6, "123M"),
    ] {
        assert_eq!(si(v), s, "{v}");
    }
}

fn port(container: &str, host_port: u16, created: u64, inbound: (u64, u64)) -> PortSnap {
    PortSnap {
        port: crate::datapath::ExposedPort {
            container: container.to_owned(),
            veth_ifindex: 7,
            nic_ifindex: 2,
            host_addr: "fd00::1".parse().expect("address"),
            protocol: "tcp",
            host_port,
            container_addr: "172.18.0.2".parse().expect("address"),
            container_port: 80,
            origin: Origin::Watch,
            bypasses_firewall: false,
            created_unix_secs: created,
            inbound: Traffic {
                packets: inbound.0,
                bytes: inbound.1,
            },
            outbound: Traffic {
                packets: inbound.0 / 2,
                bytes: inbound.1 / 2,
            },
            passed_packets: 3,
            refused_packets: 0,
        },
        nic: Some("eth0".to_owned()),
    }
}

#[test]
fn exposed_ports_show_their_rates_busiest_first_and_reexposed_ones_start_at_zero() {
    let prev = Snapshot {
        ports: vec![
            port("web", 80, 100, (10, 1000)),
            port("api", 81, 100, (0, 0)),
        ],
        ..Default::default()
    };
    let cur = Snapshot {
        ports: vec![
            port("web", 80, 100, (110, 2000)),
            port("api", 81, 100, (20, 400_000)),
            // New since the first read: nothing to compare with.
            port("db", 82, 100, (5, 5)),
        ],
        ..Default::default()
    };
    let mut recreated = cur.clone();
    recreated.ports[1].port.created_unix_secs = 200;
    let ports = port_rates(&prev, &cur, Duration::from_millis(500));
    assert_eq!(ports[0].container, "api", "{ports:?}");
    assert_eq!(ports[0].host, "[fd00::1]:81");
    assert_eq!(ports[0].to, "172.18.0.2:80");
    assert_eq!(ports[0].inbound.bits_per_sec, 6_400_000.0);
    assert_eq!(ports[0].outbound.packets_per_sec, 20.0);
    assert_eq!(ports[1].inbound.packets_per_sec, 200.0);
    assert_eq!(ports[1].passed_packets_per_sec, 0.0);
    assert_eq!(ports[2].container, "db");
    assert_eq!(ports[2].packets_per_sec(), 0.0);
    let again = port_rates(&prev, &recreated, Duration::from_secs(1));
    assert_eq!(
        again
            .iter()
            .find(|p| p.container == "api")
            .expect("api")
            .bits_per_sec(),
        0.0
    );

    let sample = Sample {
        schema: SCHEMA,
        time: clock(UNIX_EPOCH).0,
        interval_secs: 0.5,
        links: vec![],
        interfaces: vec![],
        ports,
        egress: vec![],
    };
    let v = serde_json::to_value(&sample).expect("json");
    assert_eq!(v["ports"][0]["nic"], "eth0");
    assert_eq!(v["ports"][0]["protocol"], "tcp");
    assert_eq!(v["ports"][0]["inbound"]["packets_per_sec"], 40.0);
    let mut text = Vec::new();
    render(&sample, Path::new("/x"), &mut text).expect("render");
    let text = String::from_utf8(text).expect("utf-8");
    assert!(text.contains("0 veths, 3 exposed ports"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("api "))
        .unwrap_or_else(|| panic!("no api row: {text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "api",
            "[fd00::1]:81/tcp",
            "eth0",
            "172.18.0.2:80",
            "6.40M",
            "40",
            "3.20M",
            "20",
            "0"
        ]
    );
}

fn egress(container: &str, created: u64, out: (u64, u64), back: (u64, u64)) -> EgressSnap {
    EgressSnap {
        record: crate::datapath::EgressRecord {
            container: container.to_owned(),
            veth_ifindex: 9,
            nic_ifindex: 2,
            addr: "172.18.0.3".parse().expect("address"),
            created_unix_secs: created,
            outbound: Traffic {
                packets: out.0,
                bytes: out.1,
            },
            inbound: Traffic {
                packets: back.0,
                bytes: back.1,
            },
            passed_packets: out.0 / 10,
        },
        nic: Some("eth0".to_owned()),
    }
}

#[test]
fn egress_containers_show_their_rates_and_reenabled_ones_start_at_zero() {
    let prev = Snapshot {
        egress: vec![egress("client", 100, (100, 10_000), (50, 5_000))],
        ..Default::default()
    };
    let cur = Snapshot {
        egress: vec![egress("client", 100, (300, 1_010_000), (150, 15_000))],
        ..Default::default()
    };
    let rates = egress_rates(&prev, &cur, Duration::from_millis(500));
    assert_eq!(rates.len(), 1);
    let e = &rates[0];
    assert_eq!(
        (e.container.as_str(), e.address.as_str()),
        ("client", "172.18.0.3")
    );
    // 1,000,000 bytes in 0.5 s out, 10,000 back.
    assert_eq!(e.outbound.bits_per_sec, 16_000_000.0);
    assert_eq!(e.outbound.packets_per_sec, 400.0);
    assert_eq!(e.back.bits_per_sec, 160_000.0);
    assert_eq!(e.back.packets_per_sec, 200.0);
    assert_eq!(e.passed_packets_per_sec, 40.0);
    // Enabled again between the reads: new counters, nothing to compare with.
    let mut again = cur.clone();
    again.egress[0].record.created_unix_secs = 200;
    assert_eq!(
        egress_rates(&prev, &again, Duration::from_secs(1))[0].bits_per_sec(),
        0.0
    );

    let sample = Sample {
        schema: SCHEMA,
        time: clock(UNIX_EPOCH).0,
        interval_secs: 0.5,
        links: vec![],
        interfaces: vec![],
        ports: vec![],
        egress: rates,
    };
    let v = serde_json::to_value(&sample).expect("json");
    assert_eq!(v["egress"][0]["nic"], "eth0");
    assert_eq!(v["egress"][0]["back"]["packets_per_sec"], 200.0);
    let mut text = Vec::new();
    render(&sample, Path::new("/x"), &mut text).expect("render");
    let text = String::from_utf8(text).expect("utf-8");
    assert!(text.contains("0 veths, 1 egress"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("client "))
        .unwrap_or_else(|| panic!("no client row: {text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "client",
            "172.18.0.3",
            "eth0",
            "16.0M",
            "400",
            "160k",
            "200",
            "40"
        ]
    );
}
