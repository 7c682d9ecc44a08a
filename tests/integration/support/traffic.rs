//! Traffic between netns nodes: ping and iperf3, with what they report.

use std::time::Duration;

use super::{
    process::{Background, in_ns, must, run_for, wait_until},
    topology::Node,
};

/// Port of the iperf3 servers; each runs in a namespace of its own, so one port serves all.
pub const IPERF_PORT: u16 = 5201;

/// The forger of packets with addresses not its own (forge.py: forged UDP, forged handshakes)
/// and a receiver that counts datagrams.
pub const FORGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/integration/forge.py");

/// That of what `forge.py tcp-window` forged, `forge.py tcp-watch` saw (`arrived`) only the ACK
/// in the window reach the container, as on Docker's path, where conntrack marks the other two
/// INVALID.
pub fn assert_only_the_ack_in_the_window_arrived(arrived: &str) {
    assert!(
        !arrived.contains("0xd001"),
        "an RST out of the window reached the container"
    );
    assert!(
        !arrived.contains("0xd002"),
        "a data segment out of the window reached the container"
    );
    assert!(
        arrived.contains("0xd003"),
        "an ACK in the window should reach the container, as on Docker's path: {arrived:?}"
    );
}

/// What `ping -q` reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PingReport {
    pub transmitted: u64,
    pub received: u64,
}

/// `ping -c COUNT -i 0.01 -W 1` from a namespace to `addr` (IPv4 or IPv6), bounded by a
/// deadline; returns what was sent and answered, even if not everything was.
pub fn ping(ns: &str, addr: &str, count: u32) -> PingReport {
    let count_s = count.to_string();
    let deadline = (count / 50 + 5).to_string();
    let argv = in_ns(
        ns,
        &[
            "ping", "-q", "-n", "-c", &count_s, "-i", "0.01", "-W", "1", "-w", &deadline, addr,
        ],
    );
    let run = run_for(&argv, Duration::from_secs(u64::from(count / 50) + 15));
    let stats = run
        .stdout
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("no statistics from ping: {run}"));
    let number_before = |word: &str| -> u64 {
        let head = &stats[..stats
            .find(word)
            .unwrap_or_else(|| panic!("{word:?} missing in {stats:?}"))];
        head.trim_end()
            .rsplit([' ', ','])
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("cannot parse {stats:?}"))
    };
    PingReport {
        transmitted: number_before(" packets transmitted"),
        received: number_before(" received"),
    }
}

/// Pings and panics unless every echo request of `count` was answered.
#[track_caller]
pub fn assert_ping(from: &Node, addr: &str, count: u32) {
    let report = ping(&from.netns, addr, count);
    assert_eq!(
        report,
        PingReport {
            transmitted: u64::from(count),
            received: u64::from(count),
        },
        "ping from {} to {addr}",
        from.netns
    );
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// The figures of one iperf3 run, from the client's `--json` report.
#[derive(Clone, Debug)]
pub struct IperfReport {
    /// Payload bytes the sending side wrote (the server's with `reverse`).
    pub sent_bytes: u64,
    pub received_bytes: u64,
    /// Throughput measured at the receiver.
    pub bits_per_second: f64,
    /// UDP: datagrams sent, lost, and the loss in percent.
    pub packets: u64,
    pub lost_packets: u64,
    pub lost_percent: f64,
}

/// Runs one iperf3 test between two nodes: a one-off server in `server`'s namespace, and a client
/// in `client`'s that connects to `addr`. TCP runs 2 s, UDP 1 s at 100 Mbit/s. With `reverse`
/// (`-R`) the server sends. Panics unless iperf3 succeeds and reports a throughput above zero.
#[track_caller]
pub fn iperf3(
    client: &Node,
    server: &Node,
    addr: &str,
    proto: Proto,
    reverse: bool,
) -> IperfReport {
    let port = IPERF_PORT.to_string();
    let mut srv = Background::spawn(&in_ns(&server.netns, &["iperf3", "-s", "-1", "-p", &port]));
    let filter = format!("sport = :{port}");
    let listening = wait_until(Duration::from_secs(5), || {
        !must(&in_ns(&server.netns, &["ss", "-Hltn", &filter]))
            .trim()
            .is_empty()
    });
    assert!(
        listening,
        "iperf3 server in {} did not listen",
        server.netns
    );
    let mut args = vec!["iperf3", "-c", addr, "-p", &port, "--json"];
    match proto {
        Proto::Tcp => args.extend(["-t", "2"]),
        Proto::Udp => args.extend(["-u", "-b", "100M", "-t", "1"]),
    }
    if reverse {
        args.push("-R");
    }
    let run = run_for(&in_ns(&client.netns, &args), Duration::from_secs(20));
    srv.wait_timeout(Duration::from_secs(3));
    let json: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("iperf3 printed no JSON ({e}): {run}"));
    assert!(
        run.success() && json.get("error").is_none(),
        "iperf3 {proto:?} from {} to {addr} failed: {run}",
        client.netns
    );
    let end = &json["end"];
    let num = |v: &serde_json::Value, what: &str| -> f64 {
        v.as_f64()
            .unwrap_or_else(|| panic!("iperf3 report lacks {what}: {}", json["end"]))
    };
    let report = match proto {
        Proto::Tcp => IperfReport {
            sent_bytes: num(&end["sum_sent"]["bytes"], "sum_sent.bytes") as u64,
            received_bytes: num(&end["sum_received"]["bytes"], "sum_received.bytes") as u64,
            bits_per_second: num(
                &end["sum_received"]["bits_per_second"],
                "sum_received.bits_per_second",
            ),
            packets: 0,
            lost_packets: 0,
            lost_percent: 0.0,
        },
        Proto::Udp => {
            // `sum` holds the sender's datagram count and the receiver's loss.
            let sum = &end["sum"];
            let received = end.get("sum_received").unwrap_or(sum);
            IperfReport {
                sent_bytes: num(&end.get("sum_sent").unwrap_or(sum)["bytes"], "bytes") as u64,
                received_bytes: num(&received["bytes"], "bytes") as u64,
                bits_per_second: num(&received["bits_per_second"], "bits_per_second"),
                packets: num(&sum["packets"], "sum.packets") as u64,
                lost_packets: num(&sum["lost_packets"], "sum.lost_packets") as u64,
                lost_percent: num(&sum["lost_percent"], "sum.lost_percent"),
            }
        }
    };
    assert!(
        report.bits_per_second > 0.0 && report.sent_bytes > 0,
        "iperf3 {proto:?} from {} to {addr} moved nothing: {report:?}",
        client.netns
    );
    report
}

/// `taskset -c CPU iperf3 -c ADDR -p PORT -t 1 -P 4`: one second of four parallel streams from
/// a client on `cpu`, what the tests of the window copies' merge across CPUs send.
pub fn four_streams_on_cpu(cpu: &str, addr: &str, port: &str) -> Vec<String> {
    [
        "taskset",
        "-c",
        cpu,
        "iperf3",
        "-c",
        addr,
        "-p",
        port,
        "-t",
        "1",
        "-P",
        "4",
        "--connect-timeout",
        "3000",
    ]
    .map(str::to_owned)
    .to_vec()
}
