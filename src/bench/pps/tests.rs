use std::net::Ipv4Addr;

use super::{
    counters::{backlog_drops, udp_no_ports, xdp_drops},
    frame::ipv4_checksum,
    *,
};

fn flow() -> Flow {
    Flow {
        src_mac: [0x02, 0, 0, 0, 0, 1],
        dst_mac: [0x02, 0, 0, 0, 0, 2],
        src_ip: Ipv4Addr::new(10, 231, 0, 1),
        dst_ip: Ipv4Addr::new(10, 231, 0, 2),
        port: 5299,
    }
}

#[test]
fn the_checksum_is_rfc_1071() {
    // The example header of RFC 1071's errata / Wikipedia's "IPv4 header checksum".
    let header = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];
    assert_eq!(ipv4_checksum(&header), 0xb861);
    let mut with = header;
    with[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
    assert_eq!(ipv4_checksum(&with), 0);
    // An odd length pads with a zero byte.
    assert_eq!(ipv4_checksum(&[0xff]), !0xff00);
}

#[test]
fn frames_carry_the_flow_at_the_size_asked() {
    for size in FRAME_SIZES {
        let f = frame(&flow(), size).unwrap();
        assert_eq!(f.len(), size);
        assert_eq!(&f[0..6], &[0x02, 0, 0, 0, 0, 2], "destination MAC first");
        assert_eq!(&f[6..12], &[0x02, 0, 0, 0, 0, 1]);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        let ip = &f[14..34];
        assert_eq!(ip[0], 0x45);
        assert_eq!(usize::from(u16::from_be_bytes([ip[2], ip[3]])), size - 14);
        assert_eq!(ip[9], 17, "UDP");
        assert_eq!(&ip[12..16], &[10, 231, 0, 1]);
        assert_eq!(&ip[16..20], &[10, 231, 0, 2]);
        assert_eq!(
            ipv4_checksum(ip),
            0,
            "{size} B: the header checksum is right"
        );
        let udp = &f[34..42];
        assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 5299);
        assert_eq!(usize::from(u16::from_be_bytes([udp[4], udp[5]])), size - 34);
    }
    assert!(frame(&flow(), 41).is_err());
    assert!(frame(&flow(), 42).is_ok());
    assert!(frame(&flow(), 70_000).is_err());
}

#[test]
fn xdp_drops_sum_over_queues() {
    let stats = "NIC statistics:\n     peer_ifindex: 31231\n     \
                 rx_queue_0_xdp_packets: 10\n     rx_queue_0_drops: 3\n     \
                 rx_queue_0_xdp_drops: 1000\n     rx_queue_1_xdp_drops: 234\n     \
                 rx_queue_0_xdp_tx_errors: 7\n     tx_queue_0_xdp_xmit: 0\n";
    assert_eq!(xdp_drops(stats).unwrap(), 1234);
    assert!(xdp_drops("NIC statistics:\n     rx_packets: 5\n").is_err());
    assert!(xdp_drops("     rx_queue_0_xdp_drops: many\n").is_err());
}

#[test]
fn no_ports_comes_from_the_udp_value_line() {
    let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\n\
                Udp: 12 3456789 0 12 0\n\
                UdpLite: InDatagrams NoPorts InErrors\nUdpLite: 0 99 0\n";
    assert_eq!(udp_no_ports(snmp).unwrap(), 3_456_789);
    assert!(udp_no_ports("Ip: Forwarding\nIp: 1\n").is_err());
    assert!(udp_no_ports("Udp: InDatagrams\nUdp: 5\n").is_err());
}

#[test]
fn backlog_drops_are_hex_summed_over_cpus() {
    let softnet = "0000a1b2 0000000f 00000003 00000000\n00000010 00000001 00000000 00000000\n";
    assert_eq!(backlog_drops(softnet).unwrap(), 16);
    assert!(backlog_drops("00000001 zz\n").is_err());
}

fn sample(offered: u64, delivered: u64, a_veth_rx: u64) -> Sample {
    Sample {
        offered,
        seconds: 2.0,
        delivered,
        dropped: Drops {
            a_veth_rx,
            ..Drops::default()
        },
        other_frames: None,
    }
}

#[test]
fn the_table_puts_the_receivers_side_by_side() {
    let mut bridge = ConfigResults::default();
    bridge.push(64, Receiver::Xdp, sample(4_000_000, 1_000_000, 3_000_000));
    bridge.push(64, Receiver::Stack, sample(4_000_000, 400_000, 0));
    let mut at_socket = sample(4_000_000, 3_000_000, 200_000);
    at_socket.dropped.b_xsk_rx_ring_full = 600_000;
    at_socket.dropped.b_xsk_rx_dropped = 200_000;
    at_socket.dropped.b_xsk_fill_ring_empty = 200_000;
    bridge.push(64, Receiver::AfXdp, at_socket);
    let mut tc = ConfigResults::default();
    tc.push(64, Receiver::Stack, sample(4_000_000, 800_000, 0));
    let mut results = PpsResults {
        configs: vec![(Config::Bridge, bridge), (Config::Tc, tc)],
        generator: Generator::XdpLiveFrames,
        live_frames_refused: None,
    };
    let text = render(&results, 1);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("FRAME") && lines[0].contains("STACK: OFFERED Mpps"));
    assert!(lines[0].contains("AF_XDP APP: OFFERED Mpps"));
    let words = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        words(lines[1]),
        [
            "64", "B", "bridge", "2.00", "0.50", "25.0", "75.0%", "A", "veth", "rx", "2.00"
        ]
        .into_iter()
        .chain(["0.20", "10.0", "-"])
        // The socket's rx ring full is the largest place; the fill ring's share of its
        // drops is not a place of its own.
        .chain(["2.00", "1.50", "75.0", "15.0%", "B", "rx", "ring", "full"])
        .collect::<Vec<_>>()
    );
    assert_eq!(
        words(lines[2]),
        [
            "64", "B", "tc", "n/a", "n/a", "n/a", "n/a", "2.00", "0.40", "20.0", "-", "n/a", "n/a",
            "n/a", "n/a"
        ]
    );
    // 1500 B was not measured: every cell says so.
    assert!(lines[3].starts_with("1500 B") && lines[3].matches("n/a").count() == 12);
    assert!(text.contains("XDP RX and AF_XDP APP (an application reading an AF_XDP"));
    assert!(text.contains("are n/a for tc"));
    assert!(text.contains("B sent from A as XDP live frames; medians"));
    // Where the kernel refused live frames, the footnote names the other generator and why.
    results.generator = Generator::AfPacket;
    results.live_frames_refused = Some("Operation not permitted (os error 1)".to_owned());
    let text = render(&results, 1);
    assert!(text.contains(
        "sent from A by an AF_PACKET socket (sendmmsg, past the qdisc: slower to make than XDP \
         live frames) (the kernel refused XDP live frames: Operation not permitted (os error 1))"
    ));
}

#[test]
fn only_a_kernel_that_does_not_run_live_frames_switches_the_generator() {
    use std::io;
    let syscall = |errno: i32| {
        anyhow::Error::new(io::Error::from_raw_os_error(errno))
            .context("`bpf_prog_test_run` failed")
            .context("cannot send live frames on a (eth0)")
    };
    for errno in [libc::EPERM, libc::EINVAL, libc::EOPNOTSUPP, 524] {
        assert_eq!(
            generator::refused(&syscall(errno)).and_then(|e| e.raw_os_error()),
            Some(errno)
        );
    }
    // Out of memory or an interrupted call is an error of the measurement, not a refusal.
    for errno in [libc::ENOMEM, libc::EINTR, libc::ENXIO] {
        assert!(generator::refused(&syscall(errno)).is_none(), "{errno}");
    }
    assert!(generator::refused(&anyhow::anyhow!("interrupted")).is_none());
    assert_eq!(
        serde_json::to_string(&[Generator::XdpLiveFrames, Generator::AfPacket]).unwrap(),
        r#"["xdp_live_frames","af_packet"]"#
    );
}

#[test]
fn tc_cannot_feed_an_xdp_receiver() {
    for receiver in [Receiver::Xdp, Receiver::AfXdp] {
        assert!(!receiver.reachable_over(Config::Tc));
        assert!(receiver.reachable_over(Config::Xdp));
        assert!(receiver.reachable_over(Config::Bridge));
    }
    assert!(Receiver::Stack.reachable_over(Config::Tc));
    let runs = estimate(&[Config::Bridge, Config::Tc, Config::Xdp], 1, 1);
    // 6 + 2 + 6 runs of 1.5 s, and 2 s per configuration.
    assert_eq!(runs, Duration::from_secs(27));
}

#[test]
fn drops_count_each_frame_once_and_receivers_keep_their_json_names() {
    let d = Drops {
        a_tx: 32,
        a_veth_rx: 1,
        b_veth_tx: 2,
        b_xsk_no_socket: 4,
        b_xsk_rx_dropped: 8,
        b_xsk_rx_ring_full: 16,
        // Part of b_xsk_rx_dropped.
        b_xsk_fill_ring_empty: 8,
        ..Drops::default()
    };
    assert_eq!(d.total(), 63);
    let later = Drops {
        b_xsk_no_socket: 10,
        ..d
    };
    assert_eq!(later.since(&d).b_xsk_no_socket, 6);
    assert_eq!(later.since(&d).total(), 6);
    let names: Vec<String> = Receiver::ALL
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    assert_eq!(names, [r#""xdp""#, r#""stack""#, r#""af_xdp""#]);
}
