use super::*;
use std::time::UNIX_EPOCH;

use crate::datapath::{InterfaceCounters, Kind, LinkRecord, Origin, Traffic};

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
    };
    let cur = Snapshot {
        links: vec![
            link(1, 2, (110, 2000), (0, 0)),
            link(3, 4, (0, 0), (50, 500_000)),
        ],
        interfaces: vec![iface(1, 110, 0), iface(2, 0, 405)],
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
    };
    let mut recreated = link(7, 8, (40, 4000), (0, 0));
    recreated.record.created_unix_secs = 200;
    let mut relinked = link(1, 2, (3, 300), (0, 0));
    relinked.record.created_unix_secs = 100; // same key, counters went backwards
    let cur = Snapshot {
        // 1-2 reset, 5-6 vanished, 7-8 new.
        links: vec![relinked, recreated],
        interfaces: vec![iface(1, 2, 0), iface(3, 50, 50)],
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
    };
    let cur = Snapshot {
        links: vec![link(1, 2, (1, 125), (0, 0))],
        interfaces: vec![iface(1, 1, 0)],
    };
    let (links, interfaces) = rates(&prev, &cur, Duration::from_secs(1));
    let sample = Sample {
        schema: SCHEMA,
        time: clock(UNIX_EPOCH + Duration::from_millis(1_764_769_801_250)).0,
        interval_secs: 1.0,
        links,
        interfaces,
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
