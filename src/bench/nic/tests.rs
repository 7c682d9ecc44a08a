use super::{clients::parse_wrk, *};
use std::net::{IpAddr, Ipv4Addr};

use crate::datapath::PortMapping;

fn mapping(port: u16, udp: bool, host_port: u16) -> PortMapping {
    PortMapping {
        nic_ifindex: 7,
        nic: "dxbi-nic".into(),
        host_addr: "10.237.1.1".parse().unwrap(),
        udp,
        host_port,
        container_addr: "172.18.0.2".parse().unwrap(),
        container_port: port,
    }
}

fn all() -> Vec<PortMapping> {
    NEEDS
        .iter()
        .map(|n| mapping(n.port, n.udp, n.port + 10000))
        .collect()
}

#[test]
fn every_needed_port_is_found_on_the_nic() {
    let t = targets("web", "dxbi-nic", &all()).unwrap();
    assert_eq!(t.len(), NEEDS.len());
    assert_eq!(t[1].need.service, Service::Nginx);
    assert_eq!(t[1].addr().to_string(), "10.237.1.1:10080");
    assert!(targets("web", "eth0", &all()).is_err());
}

#[test]
fn a_missing_port_is_named_with_the_way_to_publish_it() {
    let mut ports = all();
    ports.retain(|m| !(m.container_port == 5201 && m.udp));
    ports.retain(|m| m.container_port != 80);
    let err = targets("web", "dxbi-nic", &ports).unwrap_err().to_string();
    assert!(err.contains("80/tcp (nginx), 5201/udp (iperf3)"), "{err}");
    assert!(err.contains("-p ADDR:5201:5201/udp"), "{err}");
}

#[test]
fn iperf3_needs_its_udp_port_on_its_tcp_port() {
    let mut ports = all();
    for m in &mut ports {
        if m.udp {
            m.host_port = 9;
        }
    }
    let err = targets("web", "dxbi-nic", &ports).unwrap_err().to_string();
    assert!(err.contains("same one"), "{err}");
}

#[test]
fn wrk_output_parses() {
    let wrk = "  48490 requests in 1.11s, 6.94MB read\nRequests/sec:  43822.86\n";
    assert_eq!(parse_wrk(wrk).unwrap(), (43822.86, None));
    let bad = "  Socket errors: connect 0, read 0, write 0, timeout 3\nRequests/sec: 10.5\n";
    assert_eq!(
        parse_wrk(bad).unwrap().1.as_deref(),
        Some("Socket errors: connect 0, read 0, write 0, timeout 3")
    );
}

#[test]
fn the_table_puts_both_routes_side_by_side_with_the_goal() {
    let mut r = Results::new(Direction::Ingress);
    for m in Metric::ALL {
        r.push(Route::Docker, m, 10.0);
        r.push(Route::Fast, m, 15.0);
    }
    let text = render(&r, 1);
    let wrk = text.lines().find(|l| l.starts_with("wrk")).unwrap();
    assert!(
        wrk.contains("1.50x") && wrk.ends_with("≥ 1.40x met"),
        "{wrk}"
    );
    let median = text.lines().find(|l| l.contains("median")).unwrap();
    assert!(median.ends_with("≤ 0.80x missed"), "{median}");
    assert_eq!(r.met(Metric::TcpUp), None);
    assert_eq!(r.ratio(Metric::Udp64), Some(1.5));
    assert!(!text.contains("WIRE"), "{text}");
}

#[test]
fn each_rounds_ratio_is_counted_against_the_goal() {
    let mut r = Results::new(Direction::Ingress);
    // Docker's path drifts from 10 to 20 over the run; the fast path keeps 1.5x of it in
    // two rounds of three.
    for (docker, fast) in [(10.0, 15.0), (20.0, 30.0), (15.0, 18.0)] {
        for m in Metric::ALL {
            r.push(Route::Docker, m, docker);
            r.push(Route::Fast, m, fast);
        }
    }
    assert_eq!(r.per_round(Route::Fast, Metric::Wrk20), [1.5, 1.5, 1.2]);
    assert_eq!(r.rounds_meeting_goal(Metric::Wrk20), Some((2, 3)));
    // Latency: lower is better, and 1.2x misses ≤ 0.8x as 1.5x does.
    assert_eq!(r.rounds_meeting_goal(Metric::PingPongMedian), Some((0, 3)));
    assert_eq!(r.rounds_meeting_goal(Metric::TcpUp), None);
    let text = render(&r, 3);
    let wrk = text.lines().find(|l| l.starts_with("wrk")).unwrap();
    // The medians (15 and 18) put the drift in the ratio: 1.20x.
    assert!(wrk.ends_with("≥ 1.40x missed, in 2 of 3 rounds"), "{wrk}");
    let tcp = text.lines().find(|l| l.starts_with("iperf3 TCP,")).unwrap();
    assert!(!tcp.contains("rounds"), "{tcp}");
}

#[test]
fn a_measured_wire_gets_its_own_columns_beside_the_fast_path() {
    let mut r = Results::new(Direction::Ingress);
    for m in Metric::ALL {
        r.push(Route::Docker, m, 10.0);
        r.push(Route::Fast, m, 13.0);
        r.push(Route::Wire, m, 14.5);
    }
    let text = render(&r, 1);
    let header = text.lines().next().unwrap();
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        columns,
        [
            "WORKLOAD",
            "UNIT",
            "DOCKER",
            "FAST",
            "WIRE",
            "FAST/DOCKER",
            "WIRE/DOCKER",
            "FAST/WIRE",
            "GOAL"
        ]
    );
    let wrk = text.lines().find(|l| l.starts_with("wrk")).unwrap();
    assert!(
        wrk.contains("1.30x")
            && wrk.contains("1.45x")
            && wrk.contains("0.90x")
            && wrk.ends_with("≥ 1.40x missed"),
        "{wrk}"
    );
    assert!(text.contains("no host in between"), "{text}");
    assert_eq!(r.over_docker(Route::Wire, Metric::Wrk20), Some(1.45));
}

#[test]
fn the_wire_targets_are_the_container_ports_at_its_end_of_the_wire() {
    let targets = targets("web", "dxbi-nic", &all()).unwrap();
    let wired = wire_targets(&targets, Ipv4Addr::new(10, 237, 2, 1));
    assert_eq!(wired.len(), targets.len());
    for (w, t) in wired.iter().zip(&targets) {
        assert_eq!(w.need, t.need);
        assert_eq!(w.host_addr, IpAddr::V4(Ipv4Addr::new(10, 237, 2, 1)));
        assert_eq!(w.host_port, t.need.port);
    }
}

#[test]
fn egress_is_judged_on_its_own_goals_and_on_the_wire() {
    let mut r = Results::new(Direction::Egress);
    for m in Metric::ALL {
        r.push(Route::Docker, m, 10.0);
        r.push(Route::Fast, m, 12.5);
        r.push(Route::Wire, m, 14.0);
    }
    // Issue 36: ≥ 1.2x Docker's path and ≥ 0.85x the wire for redis c20 and wrk.
    assert_eq!(r.met(Metric::RedisGet20), Some(true));
    assert_eq!(r.wire_met(Metric::RedisGet20), Some(true));
    assert_eq!(r.met(Metric::Udp64), Some(false));
    assert_eq!(r.wire_met(Metric::Udp64), None);
    let text = render(&r, 1);
    let redis = text
        .lines()
        .find(|l| l.starts_with("redis-benchmark GET -c 20"))
        .unwrap();
    assert!(redis.ends_with("≥ 1.20x met; wire ≥ 0.85x met"), "{redis}");
    let up = text
        .lines()
        .find(|l| l.starts_with("iperf3 TCP, out of the container"))
        .unwrap();
    assert!(up.contains("1.25x"), "{up}");
    assert!(
        text.contains("from the container straight into the servers'"),
        "{text}"
    );
    assert_eq!(Metric::TcpUp.id(Direction::Egress), "tcp_out_gbps");
    assert_eq!(Metric::TcpUp.id(Direction::Ingress), "tcp_in_gbps");
}

#[test]
fn the_servers_behind_the_nic_are_reached_on_their_own_ports() {
    let t = server_targets(Ipv4Addr::new(10, 236, 7, 2));
    assert_eq!(t.len(), NEEDS.len());
    for (t, need) in t.iter().zip(NEEDS) {
        assert_eq!(t.need, need);
        assert_eq!(t.addr().to_string(), format!("10.236.7.2:{}", need.port));
    }
}
