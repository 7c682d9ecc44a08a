//! Reliability promises, each bounded in time (`DXDP_SOAK=1` runs more rounds):
//!
//! 1. no misdelivery: a sniffer on the bridge sees none of a linked pair's frames while the pair
//!    restarts and is replaced by containers with the same IPs and MACs, and afterwards every map
//!    entry belongs to a link between live veths;
//! 2. no loss across `kill -9` of the watch in the middle of reconciles: not one ping lost, the
//!    TCP stream never reset, the pinned state converges;
//! 3. the watch survives dockerd going away and coming back (with and without live-restore);
//! 4. no program or attachment leaks when workloads and the watch restart or go;
//! 5. a container started while the watch starts is linked at once, without a resync;
//! 7. `--max-links` caps the maps with whole links only, and the watch keeps serving;
//! 8. bad input gets a clear error and changes nothing (the rows not covered by tests/docker.rs
//!    and tests/netns_datapath.rs; docs/errors.md lists them all);
//! 10. pins and the Docker socket are never made more accessible.
//!
//! Docker tests run against a private dockerd (see `docker::Fleet`), so that they see only their
//! own containers and may stop the daemon; the rest use network namespaces (`Topology`).
mod common;
#[path = "common/docker.rs"]
mod docker;

use std::{
    collections::{BTreeMap, BTreeSet},
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
    thread,
    time::{Duration, Instant},
};

use common::{
    DXDP, Dxdp, LinkStatus, Status, Topology, host_tx_packets, must, require_privileges, run,
    run_for, wait_until, xdp_prog_id,
};
use docker::{
    DOCKER, Fleet, Rng, Watch, bpf_links, netns_rx_packets, pinned_prog_id, pinned_state_problems,
    require_docker, soak,
};

// ---------------------------------------------------------------------------------------------
// Helpers

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `--network NET -l dxdp.enable=true -l dxdp.group=GROUP` and `extra`.
fn member(net: &str, group: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["--network", net, "-l", "dxdp.enable=true", "-l"]
        .map(str::to_owned)
        .to_vec();
    v.push(format!("dxdp.group={group}"));
    v.extend(extra.iter().map(|s| (*s).to_owned()));
    v
}

fn sorted_pair(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_owned(), b.to_owned())
    } else {
        (b.to_owned(), a.to_owned())
    }
}

/// Links by the names of their endpoints, each pair sorted.
fn named_links(status: &Status) -> BTreeSet<(String, String)> {
    status
        .links
        .iter()
        .map(|l| sorted_pair(&l.low_name, &l.high_name))
        .collect()
}

/// Every pair of `names`.
fn mesh(names: &[String]) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (i, x) in names.iter().enumerate() {
        for y in &names[i + 1..] {
            out.insert(sorted_pair(x, y));
        }
    }
    out
}

fn link_between<'s>(status: &'s Status, a: &str, b: &str) -> Option<&'s LinkStatus> {
    status
        .links
        .iter()
        .find(|l| (l.low_name == a && l.high_name == b) || (l.low_name == b && l.high_name == a))
}

/// Polls `dxdp status` until `check` holds; panics with the last status and the watch log.
#[track_caller]
fn wait_status(
    dxdp: &Dxdp,
    watch: Option<&Watch>,
    within: Duration,
    what: &str,
    mut check: impl FnMut(&Status) -> bool,
) -> Status {
    let mut last = None;
    let ok = wait_until(within, || {
        let status = dxdp.status();
        let done = check(&status);
        last = Some(status);
        done
    });
    let last = last.expect("at least one status");
    assert!(
        ok,
        "{what}: not reached within {within:?}\n--- last status\n{:#?}\n--- watch log\n{}",
        named_links(&last),
        watch.map(Watch::log_text).unwrap_or_default()
    );
    last
}

/// Waits until the links are exactly `expected` (by names).
#[track_caller]
fn wait_links(
    dxdp: &Dxdp,
    watch: &Watch,
    expected: &BTreeSet<(String, String)>,
    within: Duration,
) -> Status {
    wait_status(
        dxdp,
        Some(watch),
        within,
        &format!("links {expected:?}"),
        |s| named_links(s) == *expected,
    )
}

/// Waits until `a` and `b` are linked through their current veths on `net`.
#[track_caller]
fn wait_linked_via_current_veths(
    fleet: &Fleet,
    watch: &Watch,
    a: &str,
    b: &str,
    net: &str,
    within: Duration,
) -> LinkStatus {
    let (va, vb) = (fleet.veth(a, net).1, fleet.veth(b, net).1);
    let status = wait_status(
        &fleet.dxdp,
        Some(watch),
        within,
        &format!("{a} <-> {b} via ifindexes {va} and {vb}, and nothing else"),
        |s| {
            s.links.len() == 1
                && s.link_between(va, vb)
                    .is_some_and(|l| sorted_pair(&l.low_name, &l.high_name) == sorted_pair(a, b))
        },
    );
    status.link_between(va, vb).cloned().expect("linked")
}

#[track_caller]
fn assert_consistent(dxdp: &Dxdp, watch: Option<&Watch>) {
    let problems = pinned_state_problems(dxdp);
    assert!(
        problems.is_empty(),
        "the pinned state is not exactly the links:\n{}\n--- watch log\n{}",
        problems.join("\n"),
        watch.map(Watch::log_text).unwrap_or_default()
    );
}

/// `ping -c COUNT -i INTERVAL` inside a container; returns (transmitted, received).
fn docker_ping(fleet: &Fleet, from: &str, to_ip: &str, count: u32, interval: &str) -> (u64, u64) {
    let count_s = count.to_string();
    let run = fleet.docker(&[
        "exec", from, "ping", "-q", "-n", "-c", &count_s, "-i", interval, "-W", "1", to_ip,
    ]);
    ping_counts(&run.stdout).unwrap_or_else(|| panic!("no ping statistics: {run}"))
}

/// (transmitted, received) from ping's summary line.
fn ping_counts(out: &str) -> Option<(u64, u64)> {
    let line = out.lines().find(|l| l.contains("packets transmitted"))?;
    let mut numbers = line
        .split(',')
        .map(|part| part.split_whitespace().next().and_then(|n| n.parse().ok()));
    Some((numbers.next()??, numbers.next()??))
}

/// A one-off iperf3 server in `server` (port 5201), listening before this returns.
#[track_caller]
fn iperf3_server(fleet: &Fleet, server: &str) {
    fleet.docker_ok(&["exec", "-d", server, "iperf3", "-s", "-1", "-p", "5201"]);
    let listening = wait_until(Duration::from_secs(10), || {
        !fleet
            .docker(&["exec", server, "ss", "-Hltn", "sport = :5201"])
            .stdout
            .trim()
            .is_empty()
    });
    assert!(listening, "iperf3 server in {server} does not listen");
}

/// A file or directory of the test's own, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Counts lines of a file (tcpdump's output).
fn line_count(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn has_tool(tool: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(tool).is_file())
}

/// Every file and directory under `dir`: path, mode, owner.
fn pin_tree(dir: &Path) -> Vec<(PathBuf, u32, u32)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&d) else {
            continue;
        };
        out.push((d.clone(), meta.mode(), meta.uid()));
        if meta.is_dir() {
            for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                todo.push(entry.path());
            }
        }
    }
    out.sort();
    out
}

/// A link without its counters: ifindexes, names, datapath.
type LinkKey = (u32, u32, String, String, String);

/// What a refusal must leave exactly as it was: links (without their counters), managed
/// interfaces and every pinned file.
type Snapshot = (Vec<LinkKey>, Vec<u32>, Vec<PathBuf>);

fn snapshot(dxdp: &Dxdp) -> Snapshot {
    let status = dxdp.status();
    let interfaces = status.interfaces.iter().map(|i| i.ifindex).collect();
    let files = pin_tree(&dxdp.pin_dir)
        .into_iter()
        .map(|(p, ..)| p)
        .collect();
    (snapshot_links(&status), interfaces, files)
}

fn snapshot_links(status: &Status) -> Vec<LinkKey> {
    status
        .links
        .iter()
        .map(|l| {
            (
                l.low_ifindex,
                l.high_ifindex,
                l.low_name.clone(),
                l.high_name.clone(),
                l.datapath.clone(),
            )
        })
        .collect()
}

/// Asserts a command exited 1 with one line of error containing every `needle`.
#[track_caller]
fn assert_refused(run: &common::Run, needles: &[&str]) {
    assert_eq!(run.code(), Some(1), "{run}");
    for needle in needles {
        assert!(run.stderr.contains(needle), "expected {needle:?}: {run}");
    }
    assert!(
        run.stderr.trim().lines().count() == 1,
        "one line of error, not a trace: {run}"
    );
}

// ---------------------------------------------------------------------------------------------
// 1. No misdelivery

/// Starts one member of the pair with a fixed IP and MAC.
fn start_member(
    fleet: &mut Fleet,
    name: &str,
    net: &str,
    group: &str,
    ip: &str,
    mac: &str,
) -> String {
    let args = member(net, group, &["--ip", ip, "--mac-address", mac]);
    fleet.run(name, &strs(&args), &[])
}

/// What one window of traffic between the pair moved, and what the sniffer got meanwhile.
#[derive(Debug, Default)]
struct Window {
    pair_frames: u64,
    sniffer_tx: u64,
    sniffer_rx: u64,
    sniffed: usize,
}

#[test]
fn a_sniffer_sees_no_frame_of_a_linked_pair_across_restarts_and_replacements() {
    if !require_docker() {
        return;
    }
    let iterations = if soak() { 25 } else { 5 };
    let started = Instant::now();
    let mut fleet = Fleet::new();
    let net = fleet.network("net", &[]);
    let group = format!("{}-pair", fleet.prefix);
    let sniffer = fleet.run("sniffer", &["--network", &net], &[]);
    let sniffer_pid = fleet.pid(&sniffer);
    let (sniffer_veth, _) = fleet.veth(&sniffer, &net);
    // Promiscuous: whatever the bridge sends the sniffer reaches its counters.
    let pid_s = sniffer_pid.to_string();
    must(&[
        "nsenter", "-t", &pid_s, "-n", "ip", "link", "set", "eth0", "promisc", "on",
    ]);
    let ips = [fleet.address(&net, 10), fleet.address(&net, 11)];
    let macs = ["02:dd:00:00:00:0a", "02:dd:00:00:00:0b"];
    // tcpdump (on the host, inside the sniffer's namespace) names exactly the pair's frames.
    let capture = Scratch(std::env::temp_dir().join(format!("{}-sniffed.txt", fleet.prefix)));
    let capture = &capture.0;
    let filter = format!(
        "(ether src {a} and ether dst {b}) or (ether src {b} and ether dst {a})",
        a = macs[0],
        b = macs[1]
    );
    let _tcpdump = has_tool("tcpdump").then(|| {
        let shell = format!(
            "exec nsenter -t {pid_s} -n tcpdump -i eth0 -nn -e -l '{filter}' > {} 2>/dev/null",
            capture.display()
        );
        let bg = common::Background::spawn(&["sh", "-c", &shell]);
        thread::sleep(Duration::from_millis(500));
        bg
    });

    let mut pair = [
        start_member(&mut fleet, "a0", &net, &group, &ips[0], macs[0]),
        start_member(&mut fleet, "b0", &net, &group, &ips[1], macs[1]),
    ];
    // The bridge learns no address (ageing time 0), so it floods every unicast frame like a hub:
    // any frame of the pair that the link does not carry reaches the sniffer too.
    must(&[
        "ip",
        "link",
        "set",
        "dev",
        fleet.bridge(&net),
        "type",
        "bridge",
        "ageing_time",
        "0",
    ]);
    // Control, before any link: the sniffer does see the pair's frames.
    let (tx0, sniffed0) = (host_tx_packets(&sniffer_veth), line_count(capture));
    assert_eq!(
        docker_ping(&fleet, &pair[0], &ips[1], 100, "0.005"),
        (100, 100)
    );
    thread::sleep(Duration::from_millis(300));
    let control = (
        host_tx_packets(&sniffer_veth) - tx0,
        line_count(capture) - sniffed0,
    );
    assert!(
        control.0 >= 200 && (control.1 >= 200 || !has_tool("tcpdump")),
        "the sniffer does not see an unlinked pair's 200 frames: (bridge sent, tcpdump) = {control:?}"
    );
    let watch = fleet.watch(&["--resync", "30"]);
    wait_linked_via_current_veths(
        &fleet,
        &watch,
        &pair[0],
        &pair[1],
        &net,
        Duration::from_secs(10),
    );

    let window = |fleet: &Fleet, pair: &[String; 2], what: &str| -> Window {
        let status0 = fleet.dxdp.status();
        let link0 = link_between(&status0, &pair[0], &pair[1])
            .cloned()
            .expect("linked");
        let (tx0, rx0) = (
            host_tx_packets(&sniffer_veth),
            netns_rx_packets(sniffer_pid, "eth0"),
        );
        let sniffed0 = line_count(capture);
        // UDP from b to a and a ping flood from a to b, at the same time.
        iperf3_server(fleet, &pair[0]);
        let (host, client, server_ip) = (fleet.host.clone(), pair[1].clone(), ips[0].clone());
        let udp = thread::spawn(move || {
            docker::docker_at(
                &host,
                &[
                    "exec", &client, "timeout", "20", "iperf3", "-c", &server_ip, "-p", "5201",
                    "-u", "-b", "20M", "-l", "1000", "-t", "1", "--json",
                ],
            )
        });
        let (sent, got) = docker_ping(fleet, &pair[0], &ips[1], 500, "0.002");
        assert_eq!((sent, got), (500, 500), "{what}: ping lost frames");
        let run = udp.join().expect("iperf3 thread");
        assert!(run.success(), "{what}: iperf3 UDP: {run}");
        thread::sleep(Duration::from_millis(200));
        let status1 = fleet.dxdp.status();
        let link1 = link_between(&status1, &pair[0], &pair[1])
            .cloned()
            .expect("linked");
        Window {
            pair_frames: link1.low_to_high.packets + link1.high_to_low.packets
                - link0.low_to_high.packets
                - link0.high_to_low.packets,
            sniffer_tx: host_tx_packets(&sniffer_veth) - tx0,
            sniffer_rx: netns_rx_packets(sniffer_pid, "eth0") - rx0,
            sniffed: line_count(capture) - sniffed0,
        }
    };

    let mut total = Window::default();
    let mut phases = 0;
    for i in 1..=iterations {
        for phase in ["restart", "replace"] {
            if phase == "restart" {
                fleet.docker_ok(&["restart", "-t", "0", &pair[0], &pair[1]]);
            } else {
                fleet.remove(&pair);
                pair = [
                    start_member(&mut fleet, &format!("a{i}"), &net, &group, &ips[0], macs[0]),
                    start_member(&mut fleet, &format!("b{i}"), &net, &group, &ips[1], macs[1]),
                ];
            }
            wait_linked_via_current_veths(
                &fleet,
                &watch,
                &pair[0],
                &pair[1],
                &net,
                Duration::from_secs(10),
            );
            let what = format!("iteration {i}, after the {phase}");
            let w = window(&fleet, &pair, &what);
            assert!(w.pair_frames >= 2000, "{what}: the link carried only {w:?}");
            assert!(
                w.sniffer_tx < 50 && w.sniffer_rx < 50 && w.sniffed == 0,
                "{what}: the sniffer got the pair's frames: {w:?}\n--- watch log\n{}",
                watch.log_text()
            );
            total.pair_frames += w.pair_frames;
            total.sniffer_tx += w.sniffer_tx;
            total.sniffer_rx += w.sniffer_rx;
            total.sniffed += w.sniffed;
            phases += 1;
        }
        assert_consistent(&fleet.dxdp, Some(&watch));
    }

    // Afterwards: one link, between the current containers' veths; nothing else anywhere.
    let status = fleet.dxdp.status();
    let (va, vb) = (fleet.veth(&pair[0], &net), fleet.veth(&pair[1], &net));
    assert_eq!(status.links.len(), 1, "{status:#?}");
    assert!(status.link_between(va.1, vb.1).is_some(), "{status:#?}");
    let interfaces: BTreeSet<u32> = status.interfaces.iter().map(|i| i.ifindex).collect();
    assert_eq!(interfaces, BTreeSet::from([va.1, vb.1]));
    assert_consistent(&fleet.dxdp, Some(&watch));
    eprintln!(
        "misdelivery: control without a link: the sniffer got {control:?} (bridge, tcpdump) of \
         the pair's 200 frames; {iterations} iterations ({phases} restarts and replacements) in {:?}; \
         the pair exchanged {} frames over the link; the sniffer got {} frames from the bridge \
         ({} received), {} of them the pair's unicast{}",
        started.elapsed(),
        total.pair_frames,
        total.sniffer_tx,
        total.sniffer_rx,
        total.sniffed,
        if has_tool("tcpdump") {
            ""
        } else {
            " (no tcpdump: counters only)"
        }
    );
}

// ---------------------------------------------------------------------------------------------
// 2. No loss across kill -9 of the watch

#[test]
fn kill_9_of_the_watch_mid_reconcile_loses_no_ping_and_resets_no_stream() {
    if !require_docker() {
        return;
    }
    let rounds: u64 = if soak() { 40 } else { 10 };
    let mut rng = Rng::seeded("kill -9 delays");
    let mut fleet = Fleet::new();
    let net = fleet.network("net", &[]);
    let group = format!("{}-g", fleet.prefix);
    let args = member(&net, &group, &[]);
    let a = fleet.run("a", &strs(&args), &[]);
    let b = fleet.run("b", &strs(&args), &[]);
    let mut watch = fleet.watch(&["--resync", "2"]);
    let before = wait_links(
        &fleet.dxdp,
        &watch,
        &mesh(&[a.clone(), b.clone()]),
        Duration::from_secs(10),
    );
    let created = link_between(&before, &a, &b)
        .expect("linked")
        .created_unix_secs;
    let ip_b = fleet.ip(&b, &net);

    // A TCP stream and a ping flood from a to b, for longer than all the rounds take.
    let seconds = rounds * 2 + 8;
    let count = (seconds - 3) * 500;
    iperf3_server(&fleet, &b);
    let (host, a2, ip2) = (fleet.host.clone(), a.clone(), ip_b.clone());
    let stream = thread::spawn(move || {
        let t = seconds.to_string();
        run_for(
            &[
                DOCKER,
                "-H",
                &host,
                "exec",
                &a2,
                "iperf3",
                "-c",
                &ip2,
                "-p",
                "5201",
                "-t",
                &t,
                "-b",
                "300M",
                "--json",
                "--connect-timeout",
                "3000",
            ],
            Duration::from_secs(seconds + 60),
        )
    });
    let (host, a2, ip2) = (fleet.host.clone(), a.clone(), ip_b.clone());
    let flood = thread::spawn(move || {
        let c = count.to_string();
        run_for(
            &[
                DOCKER, "-H", &host, "exec", &a2, "ping", "-q", "-n", "-i", "0.002", "-c", &c,
                "-W", "1", &ip2,
            ],
            Duration::from_secs(seconds + 60),
        )
    });
    thread::sleep(Duration::from_millis(1000));

    let mut previous: Option<String> = None;
    let mut delays = Vec::new();
    // How many of c's two links the killed watch had made: 0 (killed before or early in the
    // reconcile), 1 (in the middle of it), 2 (after it).
    let mut made_before_kill = [0usize; 3];
    let loop_started = Instant::now();
    for round in 0..rounds {
        if let Some(old) = previous.take() {
            fleet.remove(&[old]);
        }
        // The start event sets off a reconcile that links c to a and b; kill it somewhere.
        let mark = watch.log_text().len();
        let c = fleet.run(&format!("c{round}"), &strs(&args), &[]);
        // 0-300 ms, and every other round 0-50 ms: a reconcile of this size takes tens of
        // milliseconds, so that more kills land inside one.
        let delay = rng.below(if round % 2 == 0 { 301 } else { 51 });
        thread::sleep(Duration::from_millis(delay));
        watch.kill9();
        delays.push(delay);
        let made = watch.log_text()[mark..]
            .lines()
            .filter(|l| l.contains("link added") && l.contains(&format!("={c} ")))
            .count();
        made_before_kill[made.min(2)] += 1;
        watch.restart();
        wait_links(
            &fleet.dxdp,
            &watch,
            &mesh(&[a.clone(), b.clone(), c.clone()]),
            Duration::from_secs(15),
        );
        assert_consistent(&fleet.dxdp, Some(&watch));
        previous = Some(c);
    }
    let loop_took = loop_started.elapsed();
    assert!(
        !flood.is_finished() && !stream.is_finished(),
        "the traffic ended before the last restart ({loop_took:?}): it must cover them all"
    );

    let ping = flood.join().expect("ping thread");
    let (sent, got) = ping_counts(&ping.stdout).unwrap_or_else(|| panic!("ping: {ping}"));
    assert_eq!(
        (sent, got),
        (count, count),
        "pings lost across {rounds} kill -9 of the watch: {ping}\n--- watch log\n{}",
        watch.log_text()
    );
    let iperf = stream.join().expect("iperf3 thread");
    let json: serde_json::Value = serde_json::from_str(&iperf.stdout)
        .unwrap_or_else(|e| panic!("iperf3 printed no JSON ({e}): {iperf}"));
    assert!(
        iperf.success() && json.get("error").is_none(),
        "the TCP stream failed: {iperf}"
    );
    let sent_bytes = json["end"]["sum_sent"]["bytes"].as_f64().unwrap_or(0.0);
    let retransmits = json["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    assert!(sent_bytes > 0.0, "{iperf}");

    // Adopted, never rebuilt: the a-b link is the one made at the start, and carried the flood.
    let status = fleet.dxdp.status();
    let link = link_between(&status, &a, &b).expect("a-b linked");
    assert_eq!(link.created_unix_secs, created, "a-b was rebuilt");
    assert!(
        link.low_to_high.packets >= count && link.high_to_low.packets >= count,
        "{link:?}"
    );
    assert_consistent(&fleet.dxdp, Some(&watch));
    eprintln!(
        "kill -9: {rounds} restarts survived in {loop_took:?} (killed {delays:?} ms after \
         `docker run` returned; c's links made before the kill: none {}, one {}, both {}); \
         {got}/{sent} pings answered; TCP stream {:.0} MB, {retransmits} retransmits, no reset",
        made_before_kill[0],
        made_before_kill[1],
        made_before_kill[2],
        sent_bytes / 1e6
    );
}

/// The narrowest window of a reconcile: the maps hold a new link but the kill -9 came before
/// its attachment was pinned, so the program went with the process. Made on purpose here (the
/// pin removed, which detaches the program exactly as the dying process would), the next
/// reconcile must complete the link, not take the map entries for a finished one.
#[test]
fn a_link_left_half_made_by_a_killed_watch_is_completed_by_the_next_reconcile() {
    if !require_docker() {
        return;
    }
    let mut fleet = Fleet::new();
    let net = fleet.network("net", &[]);
    let group = format!("{}-g", fleet.prefix);
    let args = member(&net, &group, &[]);
    let a = fleet.run("a", &strs(&args), &[]);
    let b = fleet.run("b", &strs(&args), &[]);
    let mut watch = fleet.watch(&["--resync", "1"]);
    let link = wait_linked_via_current_veths(&fleet, &watch, &a, &b, &net, Duration::from_secs(10));
    assert_consistent(&fleet.dxdp, Some(&watch));
    let (veth_b, ifindex_b) = fleet.veth(&b, &net);
    let tc_id = pinned_prog_id(&fleet.dxdp.pin_dir.join("progs/dxdp_tc"));
    for how in ["resync", "restart"] {
        if how == "restart" {
            watch.kill9();
        }
        std::fs::remove_file(fleet.dxdp.pin_dir.join(format!("links/tc-{ifindex_b}")))
            .expect("unpin b's attachment");
        // The kernel frees an unpinned bpf_link after an RCU grace period.
        assert!(
            wait_until(Duration::from_secs(5), || {
                !docker::tcx_ingress_ids(&veth_b).contains(&tc_id)
            }),
            "unpinning detaches"
        );
        if how == "restart" {
            watch.restart();
        }
        let healed = wait_until(Duration::from_secs(10), || {
            pinned_state_problems(&fleet.dxdp).is_empty()
        });
        assert!(
            healed,
            "after a {how}: {:?}\n--- watch log\n{}",
            pinned_state_problems(&fleet.dxdp),
            watch.log_text()
        );
        let now = fleet.dxdp.status();
        let same = link_between(&now, &a, &b).expect("linked");
        assert_eq!(same.created_unix_secs, link.created_unix_secs, "rebuilt");
        let ip_a = fleet.ip(&a, &net);
        let before = same.clone();
        assert_eq!(docker_ping(&fleet, &b, &ip_a, 20, "0.01"), (20, 20));
        let after = fleet.dxdp.status();
        let after = link_between(&after, &a, &b).expect("linked");
        let from_b = if before.high_ifindex == ifindex_b {
            after.high_to_low.packets - before.high_to_low.packets
        } else {
            after.low_to_high.packets - before.low_to_high.packets
        };
        assert!(
            from_b >= 20,
            "b's frames are not redirected after a {how}: {after:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 3. dockerd goes away and comes back

fn connects(watch: &Watch) -> usize {
    watch.log_text().matches("connected to dockerd").count()
}

#[test]
fn the_watch_survives_dockerd_stopping_and_relinks_when_it_is_back() {
    if !require_docker() {
        return;
    }
    let mut fleet = Fleet::new();
    let net = fleet.network("net", &[]);
    let group = format!("{}-g", fleet.prefix);
    let args = member(
        &net,
        &group,
        &["--restart", "always", "--stop-timeout", "1"],
    );
    let a = fleet.run("a", &strs(&args), &[]);
    let b = fleet.run("b", &strs(&args), &[]);
    let mut watch = fleet.watch(&["--resync", "2"]);
    let first =
        wait_linked_via_current_veths(&fleet, &watch, &a, &b, &net, Duration::from_secs(10));
    assert!(wait_until(Duration::from_secs(5), || connects(&watch) == 1));

    // Without live-restore, stopping dockerd stops the containers.
    let stop_took = fleet.stop_daemon();
    thread::sleep(Duration::from_millis(500));
    let down = snapshot(&fleet.dxdp);
    let down_for = Duration::from_secs(4);
    let t_down = Instant::now();
    while t_down.elapsed() < down_for {
        assert!(
            watch.alive(),
            "the watch died without dockerd:\n{}",
            watch.log_text()
        );
        assert_eq!(
            snapshot(&fleet.dxdp),
            down,
            "the watch changed the pinned state while dockerd was down:\n{}",
            watch.log_text()
        );
        thread::sleep(Duration::from_millis(250));
    }
    let log = watch.log_text();
    assert!(
        log.contains("cannot reach dockerd") && log.contains("retrying"),
        "the watch does not say it lost dockerd:\n{log}"
    );

    // Back (with live-restore from now on): the containers restart with new veths.
    let start_took = fleet.start_daemon(true);
    let back = Instant::now();
    let relinked = {
        assert!(
            wait_until(Duration::from_secs(30), || {
                fleet
                    .docker(&["inspect", "-f", "{{.State.Running}}", &a, &b])
                    .stdout
                    == "true\ntrue\n"
            }),
            "the containers did not restart"
        );
        wait_linked_via_current_veths(&fleet, &watch, &a, &b, &net, Duration::from_secs(30))
    };
    let relink_delay = back.elapsed();
    assert!(
        relink_delay <= Duration::from_secs(30),
        "relinked {relink_delay:?} after dockerd was back"
    );
    assert_ne!(
        (relinked.low_ifindex, relinked.high_ifindex),
        (first.low_ifindex, first.high_ifindex),
        "the restarted containers have new veths"
    );
    assert!(
        connects(&watch) >= 2,
        "no reconnect logged:\n{}",
        watch.log_text()
    );
    assert_consistent(&fleet.dxdp, Some(&watch));
    let ip_b = fleet.ip(&b, &net);
    assert_eq!(docker_ping(&fleet, &a, &ip_b, 50, "0.01"), (50, 50));

    // With live-restore, the containers outlive dockerd: links and traffic stay.
    let pid_a = fleet.pid(&a).to_string();
    fleet.stop_daemon();
    let during = fleet.dxdp.status();
    let link0 = link_between(&during, &a, &b)
        .cloned()
        .expect("still linked");
    assert_eq!(
        (
            link0.low_ifindex,
            link0.high_ifindex,
            link0.created_unix_secs
        ),
        (
            relinked.low_ifindex,
            relinked.high_ifindex,
            relinked.created_unix_secs
        )
    );
    let ping = run(&[
        "nsenter", "-t", &pid_a, "-n", "ping", "-q", "-n", "-c", "200", "-i", "0.005", "-W", "1",
        &ip_b,
    ]);
    assert_eq!(ping_counts(&ping.stdout), Some((200, 200)), "{ping}");
    thread::sleep(Duration::from_secs(2));
    assert!(watch.alive(), "the watch died:\n{}", watch.log_text());
    let later = fleet.dxdp.status();
    let link1 = link_between(&later, &a, &b).cloned().expect("still linked");
    assert_eq!(link1.created_unix_secs, link0.created_unix_secs);
    assert!(
        link1.low_to_high.packets >= link0.low_to_high.packets + 200
            && link1.high_to_low.packets >= link0.high_to_low.packets + 200,
        "the link did not carry the pings while dockerd was down: {link0:?} -> {link1:?}"
    );
    fleet.start_daemon(true);
    assert!(
        wait_until(Duration::from_secs(30), || connects(&watch) >= 3),
        "no reconnect within 30 s:\n{}",
        watch.log_text()
    );
    thread::sleep(Duration::from_millis(2500));
    let after = fleet.dxdp.status();
    let link2 = link_between(&after, &a, &b).cloned().expect("still linked");
    assert_eq!(
        (
            link2.low_ifindex,
            link2.high_ifindex,
            link2.created_unix_secs
        ),
        (
            link0.low_ifindex,
            link0.high_ifindex,
            link0.created_unix_secs
        ),
        "the link was rebuilt after a live-restore restart of dockerd"
    );
    assert_consistent(&fleet.dxdp, Some(&watch));
    assert!(
        !watch.log_text().contains("panicked"),
        "{}",
        watch.log_text()
    );
    eprintln!(
        "dockerd: stopped in {stop_took:?}, down {:?}, started in {start_took:?}; relinked \
         {relink_delay:?} after it was back; links and pings kept through a live-restore restart",
        down_for
    );
}

// ---------------------------------------------------------------------------------------------
// 4. No leaks of programs and attachments

#[test]
fn no_program_or_attachment_leaks_when_workloads_or_the_watch_restart_or_go() {
    if !require_docker() {
        return;
    }
    let dxdp_programs = || -> BTreeSet<u32> {
        common::bpftool(&["prog", "show"])
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| matches!(p["name"].as_str(), Some("dxdp_tc" | "dxdp_xdp")))
            .filter_map(|p| p["id"].as_u64().map(|id| id as u32))
            .collect()
    };
    let programs_before = dxdp_programs();
    let mut fleet = Fleet::new();
    let net = fleet.network("net", &[]);
    let group = format!("{}-g", fleet.prefix);
    let args = member(&net, &group, &[]);
    let members: Vec<String> = (0..4)
        .map(|i| fleet.run(&format!("m{i}"), &strs(&args), &[]))
        .collect();
    let mut watch = fleet.watch(&["--resync", "1"]);
    wait_links(
        &fleet.dxdp,
        &watch,
        &mesh(&members),
        Duration::from_secs(15),
    );
    assert_consistent(&fleet.dxdp, Some(&watch));
    let dir = fleet.dxdp.pin_dir.clone();
    let prog_ids = || {
        (
            pinned_prog_id(&dir.join("progs/dxdp_tc")),
            pinned_prog_id(&dir.join("progs/dxdp_xdp")),
        )
    };
    let progs = prog_ids();
    let ours = || -> BTreeSet<u32> {
        bpf_links()
            .into_iter()
            .filter(|(_, prog)| *prog == progs.0 || *prog == progs.1)
            .map(|(id, _)| id)
            .collect()
    };
    let attached = ours();
    assert_eq!(attached.len(), 4, "one attachment per member: {attached:?}");

    // A restarted watch adopts what is attached: same bpf_links, same programs.
    for how in ["kill -9", "SIGTERM"] {
        let seen = connects(&watch);
        if how == "kill -9" {
            watch.kill9();
        } else {
            assert_eq!(watch.terminate(), Some(0), "{}", watch.log_text());
        }
        watch.restart();
        assert!(wait_until(Duration::from_secs(10), || connects(&watch) > seen));
        thread::sleep(Duration::from_millis(1500)); // a reconcile and a resync
        assert_eq!(ours(), attached, "after {how} and a restart of the watch");
        assert_eq!(prog_ids(), progs, "programs reloaded after {how}");
        assert_consistent(&fleet.dxdp, Some(&watch));
    }

    // Two workloads restart: their old attachments go with their veths, new ones come.
    fleet.docker_ok(&["restart", "-t", "0", &members[0], &members[1]]);
    let veths: BTreeSet<u32> = members.iter().map(|m| fleet.veth(m, &net).1).collect();
    wait_status(
        &fleet.dxdp,
        Some(&watch),
        Duration::from_secs(15),
        "relinked",
        |s| {
            named_links(s) == mesh(&members)
                && s.interfaces
                    .iter()
                    .map(|i| i.ifindex)
                    .collect::<BTreeSet<_>>()
                    == veths
        },
    );
    let reattached = ours();
    assert_eq!(reattached.len(), 4, "{reattached:?}");
    assert_eq!(
        reattached.intersection(&attached).count(),
        2,
        "the untouched members keep their attachments: {attached:?} -> {reattached:?}"
    );
    assert_consistent(&fleet.dxdp, Some(&watch));

    // All go: back to the baseline of no attachment at all.
    fleet.remove(&members);
    wait_links(
        &fleet.dxdp,
        &watch,
        &BTreeSet::new(),
        Duration::from_secs(15),
    );
    assert!(
        wait_until(Duration::from_secs(5), || ours().is_empty()),
        "attachments left: {:?}",
        ours()
    );
    assert_eq!(fleet.dxdp.link_pins(), Vec::<String>::new());
    assert_eq!(prog_ids(), progs, "the pinned programs are loaded once");
    assert_consistent(&fleet.dxdp, Some(&watch));
    drop(watch);
    let programs_after = dxdp_programs();
    let new: Vec<u32> = programs_after
        .difference(&programs_before)
        .copied()
        .collect();
    eprintln!(
        "leaks: 4 attachments kept across 2 watch restarts, 2 replaced across 2 workload \
         restarts, 0 left after the workloads went; dxdp programs loaded on the host: {} \
         before, {} now ({new:?} new, ours {progs:?})",
        programs_before.len(),
        programs_after.len()
    );
    assert!(
        new.iter().all(|id| *id == progs.0 || *id == progs.1),
        "dxdp programs other than the pinned two appeared and stayed: {new:?} (ours {progs:?})"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Start-up race

#[test]
fn a_container_started_while_the_watch_starts_is_linked_without_waiting_for_a_resync() {
    if !require_docker() {
        return;
    }
    let rounds = if soak() { 12 } else { 4 };
    let mut rng = Rng::seeded("start-up race");
    let mut fleet = Fleet::new();
    let net = fleet.network("net", &[]);
    let group = format!("{}-g", fleet.prefix);
    let args = member(&net, &group, &[]);
    let anchor = fleet.run("anchor", &strs(&args), &[]);
    let mut delays = Vec::new();
    for round in 0..rounds {
        let name = format!("{}-b{round}", fleet.prefix);
        let mut argv: Vec<String> = ["run", "-d", "--name", &name].map(str::to_owned).to_vec();
        argv.extend(args.iter().cloned());
        argv.push(docker::IMAGE.to_owned());
        fleet.track(&name);
        // Even rounds: the watch first, then at once `docker run`. Odd rounds: `docker run`
        // first, the watch a few milliseconds later, while the container is being created.
        let (watch, returned) = if round % 2 == 0 {
            let watch = fleet.watch(&["--resync", "300"]);
            fleet.docker_ok(&strs(&argv));
            (watch, Instant::now())
        } else {
            let host = fleet.host.clone();
            let argv2 = argv.clone();
            let run = thread::spawn(move || {
                let r = docker::docker_at(&host, &strs(&argv2));
                (r, Instant::now())
            });
            thread::sleep(Duration::from_millis(rng.below(40)));
            let watch = fleet.watch(&["--resync", "300"]);
            let (r, at) = run.join().expect("docker run");
            r.assert_success();
            (watch, at)
        };
        let expected = mesh(&[anchor.clone(), name.clone()]);
        let linked = wait_until(Duration::from_secs(5), || {
            named_links(&fleet.dxdp.status()) == expected
        });
        let delay = returned.elapsed();
        assert!(
            linked,
            "round {round}: {name} not linked within 5 s of `docker run`\n{}",
            watch.log_text()
        );
        delays.push(delay);
        drop(watch);
        fleet.remove(&[name]);
    }
    eprintln!(
        "start-up race: {rounds} containers started with the watch, linked after {:?}",
        delays
    );
}

// ---------------------------------------------------------------------------------------------
// 7. Capacity

#[test]
fn max_links_caps_the_maps_with_whole_links_and_the_watch_keeps_serving() {
    if !require_docker() {
        return;
    }
    let run0 = run(&[DXDP, "--max-links", "0", "status"]);
    assert_eq!(run0.code(), Some(2), "{run0}");
    let mut fleet = Fleet::new();
    let net = fleet.network("net", &[]);
    let group = format!("{}-g", fleet.prefix);
    let args = member(&net, &group, &[]);
    let members: Vec<String> = (0..4)
        .map(|i| fleet.run(&format!("m{i}"), &strs(&args), &[]))
        .collect();
    let watch = fleet.watch(&["--max-links", "2", "--resync", "1"]);
    wait_status(
        &fleet.dxdp,
        Some(&watch),
        Duration::from_secs(15),
        "2 links",
        |s| s.links.len() == 2,
    );
    thread::sleep(Duration::from_secs(3)); // three resyncs retry the other four
    let status = fleet.dxdp.status();
    assert_eq!(status.links.len(), 2, "{status:#?}");
    assert_consistent(&fleet.dxdp, Some(&watch));
    let max_entries = |map: &str| -> u64 {
        let path = fleet.dxdp.pin_dir.join("maps").join(map);
        let out = must(&[
            "bpftool",
            "-j",
            "map",
            "show",
            "pinned",
            &path.to_string_lossy(),
        ]);
        serde_json::from_str::<serde_json::Value>(&out).expect("json")["max_entries"]
            .as_u64()
            .expect("max_entries")
    };
    assert_eq!(
        (max_entries("DXDP_LINK_META"), max_entries("DXDP_LINKS")),
        (2, 4)
    );

    // The log names a pair that was left out, and why.
    let installed = named_links(&status);
    let left_out: Vec<(String, String)> = mesh(&members).difference(&installed).cloned().collect();
    let log = watch.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("cannot link") && l.contains("is full"))
        .unwrap_or_else(|| panic!("no 'cannot link ... is full' in the log:\n{log}"));
    assert!(line.contains("--max-links"), "{line}");
    assert!(
        left_out.iter().any(|(x, y)| {
            (line.contains(&format!("a={x}")) && line.contains(&format!("b={y}")))
                || (line.contains(&format!("a={y}")) && line.contains(&format!("b={x}")))
        }),
        "the line names none of the left-out pairs {left_out:?}: {line}"
    );

    // Whole links: each carries both ways, now and after more resyncs.
    let ips: BTreeMap<String, String> = members
        .iter()
        .map(|m| (m.clone(), fleet.ip(m, &net)))
        .collect();
    for round in 0..2 {
        let before = fleet.dxdp.status();
        for l in &before.links {
            assert_eq!(
                docker_ping(&fleet, &l.low_name, &ips[&l.high_name], 20, "0.01"),
                (20, 20)
            );
            assert_eq!(
                docker_ping(&fleet, &l.high_name, &ips[&l.low_name], 20, "0.01"),
                (20, 20)
            );
        }
        let after = fleet.dxdp.status();
        for l in &before.links {
            let now = link_between(&after, &l.low_name, &l.high_name).expect("still linked");
            assert!(
                now.low_to_high.packets >= l.low_to_high.packets + 40
                    && now.high_to_low.packets >= l.high_to_low.packets + 40,
                "round {round}: {l:?} -> {now:?}"
            );
        }
        assert_eq!(named_links(&after), installed);
        thread::sleep(Duration::from_secs(2));
    }
    let mut watch = watch;
    assert!(watch.alive(), "{}", watch.log_text());
    eprintln!(
        "capacity: --max-links 2 with 6 pairs wanted: installed {installed:?}; log: {}",
        line.trim()
    );
}

// ---------------------------------------------------------------------------------------------
// 8. Bad input: a clear error, nothing changed

/// Not root: every privileged command says what it needs, and touches nothing.
#[test]
fn bad_input_not_root_is_refused_with_what_it_needs() {
    if !require_privileges() {
        return;
    }
    let topo = Topology::new(2);
    let (a, b) = (topo.node(0), topo.node(1));
    topo.dxdp.link(a, b, "tc");
    let before = snapshot(&topo.dxdp);
    // A copy anyone can run: the build directory may not be reachable for `nobody`.
    let binary = Scratch(std::env::temp_dir().join(format!("dxdp-nobody-{}", std::process::id())));
    let binary = &binary.0;
    std::fs::copy(DXDP, binary).expect("copy dxdp");
    std::fs::set_permissions(binary, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let binary_s = binary.to_string_lossy().into_owned();
    let dir = topo.pin_dir().to_string_lossy().into_owned();
    let (sa, sb) = (a.spec(), b.spec());
    let commands: [&[&str]; 7] = [
        &["status"],
        &["status", "--json"],
        &["link", &sa, &sb],
        &["unlink", &sa, &sb],
        &["cleanup"],
        &["watch", "--once"],
        &["bench", &sa, &sb, "--quick"],
    ];
    for args in commands {
        let mut argv = vec![
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            &binary_s,
            "--pin-dir",
            &dir,
        ];
        argv.extend_from_slice(args);
        let out = run(&argv);
        assert_refused(
            &out,
            &[
                &format!("`dxdp {}` needs root", args[0]),
                "CAP_BPF",
                "CAP_NET_ADMIN",
                "CAP_SYS_ADMIN",
            ],
        );
    }
    assert_eq!(snapshot(&topo.dxdp), before);
}

/// A pin directory outside bpffs: refused, and nothing is created there.
#[test]
fn bad_input_a_pin_dir_outside_bpffs_is_refused_and_nothing_is_created() {
    if !require_privileges() {
        return;
    }
    let topo = Topology::new(2);
    let (a, b) = (topo.node(0), topo.node(1));
    let base = Scratch(std::env::temp_dir().join(format!("dxdp-nobpffs-{}", std::process::id())));
    let base = &base.0;
    let _ = std::fs::remove_dir_all(base);
    let missing = base.join("pins");
    std::fs::create_dir_all(base).expect("scratch dir");
    let existing = base.join("existing");
    std::fs::create_dir(&existing).expect("existing dir");
    let (sa, sb) = (a.spec(), b.spec());
    for dir in [&missing, &existing] {
        let d = dir.to_string_lossy().into_owned();
        for args in [
            vec!["link", sa.as_str(), sb.as_str()],
            vec!["status"],
            vec!["unlink", sa.as_str(), sb.as_str()],
            vec!["cleanup"],
        ] {
            let mut argv = vec![DXDP, "--pin-dir", &d];
            argv.extend_from_slice(&args);
            let out = run(&argv);
            if dir == &missing && args[0] != "link" {
                // Nothing there to show or remove: these say so and succeed, or (unlink) fail
                // for lack of a link; none creates anything.
                assert!(!dir.exists(), "{out}");
                continue;
            }
            assert_refused(&out, &["is not on a BPF filesystem", "mount -t bpf"]);
            assert!(
                !missing.exists(),
                "{} was created: {out}",
                missing.display()
            );
            assert_eq!(
                std::fs::read_dir(&existing).expect("readdir").count(),
                0,
                "something was created in {}: {out}",
                existing.display()
            );
        }
    }
    // The watch: its reconcile fails, and `--once` says so in its exit status.
    let docker_up =
        common::try_run(&[DOCKER, "info"], Duration::from_secs(10)).is_ok_and(|r| r.success());
    for dir in [&missing, &existing] {
        if !docker_up && dir == &missing {
            continue; // it would wait for dockerd before it opens the pin directory
        }
        let d = dir.to_string_lossy().into_owned();
        let out = run(&[DXDP, "--pin-dir", &d, "watch", "--once"]);
        assert_eq!(out.code(), Some(1), "{out}");
        assert!(out.stderr.contains("is not on a BPF filesystem"), "{out}");
        assert!(!missing.exists(), "{out}");
        assert_eq!(std::fs::read_dir(&existing).expect("readdir").count(), 0);
    }
    assert_eq!(xdp_prog_id(&a.host_veth), None);
    topo.dxdp.status().assert_empty();
}

/// A pin directory written by another dxdp version: every command refuses it, names both
/// versions and the way out, and leaves it (and its traffic) alone.
#[test]
fn bad_input_a_pin_dir_of_another_dxdp_version_is_refused_and_left_alone() {
    if !require_privileges() {
        return;
    }
    let topo = Topology::new(3);
    let (a, b, c) = (topo.node(0), topo.node(1), topo.node(2));
    topo.dxdp.link(a, b, "tc");
    let before = snapshot(&topo.dxdp);
    let meta = topo.pin_dir().join("maps/DXDP_META");
    let meta_s = meta.to_string_lossy().into_owned();
    let set_abi = |v: &str| {
        must(&[
            "bpftool", "map", "update", "pinned", &meta_s, "key", "0", "0", "0", "0", "value", v,
            "0", "0", "0", "0", "0", "0", "0",
        ]);
    };
    set_abi("99");
    let files = pin_tree(topo.pin_dir());
    let dumps = || {
        [
            "DXDP_LINKS",
            "DXDP_ENDPOINTS",
            "DXDP_LINK_META",
            "DXDP_TARGETS",
        ]
        .map(|m| docker::map_entries(topo.pin_dir(), m))
    };
    let maps = dumps();
    let links = bpf_links();
    let (sa, sb, sc) = (a.spec(), b.spec(), c.spec());
    let layout = format!(
        "written by a dxdp with state layout 99, this one uses {}",
        dxdp_common::ABI_VERSION
    );
    for args in [
        vec!["status"],
        vec!["status", "--json"],
        vec!["link", &sa, &sc],
        vec!["unlink", &sa, &sb],
        vec!["cleanup"],
    ] {
        let out = topo.dxdp.run(&args);
        assert_refused(&out, &[&layout, "dxdp cleanup"]);
        assert_eq!(pin_tree(topo.pin_dir()), files, "after {args:?}");
        assert!(dumps() == maps, "maps changed by {args:?}");
    }
    assert_eq!(bpf_links(), links, "attachments changed");
    // The link keeps working meanwhile.
    assert_eq!(common::ping(&a.netns, &b.ipv4, 20).received, 20);
    set_abi(&dxdp_common::ABI_VERSION.to_string());
    assert_eq!(snapshot(&topo.dxdp), before);
    assert_consistent(&topo.dxdp, None);
}

/// Malformed and oversized labels: one log line each naming the container, the key and the
/// value; that container is left out, the others are linked, the watch goes on.
#[test]
fn bad_input_malformed_and_oversized_labels_are_logged_once_and_keep_the_container_out() {
    if !require_docker() {
        return;
    }
    let mut fleet = Fleet::new();
    let net = fleet.network("net", &[]);
    let group = format!("{}-g", fleet.prefix);
    let good = member(&net, &group, &[]);
    let oversized = format!("dxdp.peers={}", "p,".repeat(700));
    let bad: [(&str, Vec<String>, &[&str]); 4] = [
        (
            "enable",
            member(&net, &group, &["-l", "dxdp.enable=yes"]),
            &["dxdp.enable=\"yes\"", "expected true or false"],
        ),
        (
            "oversized",
            member(&net, &group, &["-l", &oversized]),
            &["dxdp.peers=", "(1400 bytes)", "oversized"],
        ),
        (
            "group",
            vec![
                "--network".into(),
                net.clone(),
                "-l".into(),
                "dxdp.enable=true".into(),
                "-l".into(),
                "dxdp.group=no space allowed".into(),
            ],
            &["dxdp.group=\"no space allowed\"", "is not allowed"],
        ),
        (
            "typo",
            member(&net, &group, &["-l", "dxdp.enabel=true"]),
            &["dxdp.enabel", "unknown dxdp label key"],
        ),
    ];
    let g1 = fleet.run("good1", &strs(&good), &[]);
    let g2 = fleet.run("good2", &strs(&good), &[]);
    let mut bad_names = Vec::new();
    for (name, args, _) in &bad {
        bad_names.push(fleet.run(&format!("bad-{name}"), &strs(args), &[]));
    }
    let mut watch = fleet.watch(&["--resync", "1"]);
    wait_links(
        &fleet.dxdp,
        &watch,
        &mesh(&[g1, g2]),
        Duration::from_secs(10),
    );
    let before = snapshot(&fleet.dxdp);
    thread::sleep(Duration::from_secs(3)); // resyncs: nothing changes, nothing is repeated
    assert_eq!(snapshot(&fleet.dxdp), before);
    let log = watch.log_text();
    for ((_, _, needles), container) in bad.iter().zip(&bad_names) {
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&format!("container={container}")) && l.contains(needles[0]))
            .collect();
        assert_eq!(lines.len(), 1, "one line about {container}:\n{log}");
        for needle in *needles {
            assert!(
                lines[0].contains(needle),
                "expected {needle:?} in {}",
                lines[0]
            );
        }
        assert!(lines[0].contains("left out of every link"), "{}", lines[0]);
        assert!(
            lines[0].len() < 1000,
            "oversized value echoed: {}",
            lines[0]
        );
    }
    assert!(watch.alive(), "{log}");
    assert_consistent(&fleet.dxdp, Some(&watch));
}

/// Another tool's XDP program on a veth the watch would manage with xdp: never replaced; the
/// link is refused with the veth and the program named, the other links are made.
#[test]
fn bad_input_a_foreign_xdp_program_is_never_replaced_by_the_watch() {
    if !require_docker() {
        return;
    }
    let mut fleet = Fleet::new();
    let net = fleet.network("net", &[]);
    let group = format!("{}-g", fleet.prefix);
    let args = member(&net, &group, &["-l", "dxdp.datapath=xdp"]);
    let x: Vec<String> = (1..=3)
        .map(|i| fleet.run(&format!("x{i}"), &strs(&args), &[]))
        .collect();
    let (veth3, ifindex3) = fleet.veth(&x[2], &net);
    let pin = PathBuf::from(format!("{}-foreign", fleet.dxdp.pin_dir.display()));
    let foreign = common::load_foreign_xdp(&pin, "dxt_foreign");
    must(&[
        "ip",
        "link",
        "set",
        "dev",
        &veth3,
        "xdpdrv",
        "pinned",
        &pin.to_string_lossy(),
    ]);
    foreign.unpin();
    let id = xdp_prog_id(&veth3).expect("foreign program attached");

    let watch = fleet.watch(&["--resync", "1"]);
    let status = wait_links(&fleet.dxdp, &watch, &mesh(&x[..2]), Duration::from_secs(15));
    thread::sleep(Duration::from_secs(2));
    assert_eq!(snapshot(&fleet.dxdp).0, snapshot_links(&status));
    assert!(
        status.links.iter().all(|l| l.datapath == "xdp"),
        "{status:#?}"
    );
    assert!(!fleet.dxdp.status().mentions(ifindex3));
    assert_eq!(
        xdp_prog_id(&veth3),
        Some(id),
        "the foreign program was touched"
    );
    let log = watch.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("cannot link") && l.contains(&veth3))
        .unwrap_or_else(|| panic!("no 'cannot link' line naming {veth3}:\n{log}"));
    let id_text = format!("id {id}");
    for needle in [id_text.as_str(), "dxt_foreign", "never replaces it"] {
        assert!(line.contains(needle), "expected {needle:?}: {line}");
    }
    assert_consistent(&fleet.dxdp, Some(&watch));
    let ip2 = fleet.ip(&x[1], &net);
    let ip3 = fleet.ip(&x[2], &net);
    assert_eq!(docker_ping(&fleet, &x[0], &ip2, 20, "0.01"), (20, 20));
    assert_eq!(docker_ping(&fleet, &x[0], &ip3, 20, "0.01"), (20, 20));
    let after = fleet.dxdp.status();
    let l = link_between(&after, &x[0], &x[1]).expect("linked");
    assert!(
        l.low_to_high.packets >= 20 && l.high_to_low.packets >= 20,
        "{l:?}"
    );
}

/// Endpoint strings that do not parse: exit 2 before anything is opened, with the input and
/// the accepted forms. (`pid:abc` is in tests/netns_datapath.rs.)
#[test]
fn bad_input_endpoint_strings_that_do_not_parse_exit_2_and_create_nothing() {
    let dir = std::env::temp_dir().join(format!("dxdp-parse-{}", std::process::id()));
    let d = dir.to_string_lossy().into_owned();
    let cases: [(&str, &str); 9] = [
        ("netns:", "namespace name must be a plain name"),
        ("netns:../x", "namespace name must be a plain name"),
        (
            "netns:x:averyveryverylongname",
            "interface name must be 1-15 characters",
        ),
        ("netns:x:", "interface name must be 1-15 characters"),
        ("pid:0", "PID must be a positive number"),
        ("pid:-3", "PID must be a positive number"),
        (
            "container:web:eth0",
            "a container endpoint takes no interface",
        ),
        ("bogus:x", "unknown endpoint kind"),
        ("web$", "container names are"),
    ];
    for (input, reason) in cases {
        for args in [["link", input, "netns:x"], ["unlink", "netns:x", input]] {
            let out = run(&[DXDP, "--pin-dir", &d, args[0], args[1], args[2]]);
            assert_eq!(out.code(), Some(2), "{out}");
            assert!(
                out.stderr.contains(&format!("{input:?}"))
                    && out.stderr.contains(reason)
                    && out.stderr.contains("write netns:NAME[:IFACE]"),
                "{out}"
            );
        }
    }
    let out = run(&[DXDP, "--pin-dir", &d, "--max-endpoints", "0", "status"]);
    assert_eq!(out.code(), Some(2), "{out}");
    let out = run(&["env", "DXDP_MAX_LINKS=0", DXDP, "--pin-dir", &d, "status"]);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("--max-links"), "{out}");
    assert!(!dir.exists(), "{} was created", dir.display());
}

// ---------------------------------------------------------------------------------------------
// 10. Privileges

#[test]
fn pins_and_the_docker_socket_are_never_made_more_accessible() {
    if !require_privileges() {
        return;
    }
    let sock = Path::new("/var/run/docker.sock");
    let stat = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.mode(), m.uid(), m.gid()))
    };
    let sock_before = stat(sock);
    for umask in ["022", "077", "000"] {
        let topo = Topology::new(2);
        let (a, b) = (topo.node(0), topo.node(1));
        let dir = topo.pin_dir().to_string_lossy().into_owned();
        for args in [
            format!("link {} {}", a.spec(), b.spec()),
            "status".to_owned(),
            "doctor".to_owned(),
        ] {
            let shell = format!("umask {umask}; exec {DXDP} --pin-dir {dir} {args}");
            let out = run(&["sh", "-c", &shell]);
            if args != "doctor" {
                out.assert_success();
            }
        }
        let tree = pin_tree(topo.pin_dir());
        assert!(tree.len() > 10, "{tree:?}");
        for (path, mode, uid) in &tree {
            assert_eq!(*uid, 0, "{} is not root's (umask {umask})", path.display());
            let (is_dir, bits) = (mode & 0o170000 == 0o040000, mode & 0o777);
            if is_dir {
                assert_eq!(
                    bits & 0o022,
                    0,
                    "{} is writable by others: {bits:o} (umask {umask})",
                    path.display()
                );
            } else {
                assert_eq!(
                    bits & 0o077,
                    0,
                    "{} is accessible to others: {bits:o} (umask {umask})",
                    path.display()
                );
            }
        }
        topo.dxdp.unlink(a, b);
    }
    assert_eq!(stat(sock), sock_before, "the Docker socket changed");
}

/// `/sys/fs/bpf` is world-writable: a pin directory someone else made (or may write) could hold
/// maps and programs planted for root to adopt. Every command refuses it and adds nothing.
#[test]
fn a_pin_dir_another_user_owns_or_may_write_is_refused_and_left_alone() {
    if !require_privileges() {
        return;
    }
    let topo = Topology::new(2);
    let (a, b) = (topo.node(0), topo.node(1));
    let (sa, sb) = (a.spec(), b.spec());
    let pins = common::PinDir::new(common::next_id());
    let dir = pins.path.to_string_lossy().into_owned();
    let links_before = bpf_links();
    let cases: [(&str, u32, u32, &str); 3] = [
        (
            "writable by others",
            0,
            0o777,
            "is writable by others (mode 0777)",
        ),
        (
            "group-writable",
            0,
            0o775,
            "is writable by others (mode 0775)",
        ),
        ("another user's", 65534, 0o755, "belongs to uid 65534"),
    ];
    for (what, uid, mode, message) in cases {
        std::fs::create_dir(&pins.path).expect("pin dir");
        std::fs::set_permissions(&pins.path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        std::os::unix::fs::chown(&pins.path, Some(uid), None).expect("chown");
        for args in [
            vec!["link", sa.as_str(), sb.as_str()],
            vec!["status"],
            vec!["cleanup"],
        ] {
            let mut argv = vec![DXDP, "--pin-dir", &dir];
            argv.extend_from_slice(&args);
            let out = run(&argv);
            assert_refused(&out, &[message, "another --pin-dir"]);
            assert_eq!(
                std::fs::read_dir(&pins.path).expect("readdir").count(),
                0,
                "{what} pin dir: something was created by {args:?}: {out}"
            );
            assert!(pins.path.exists(), "{what} pin dir removed by {args:?}");
        }
        assert_eq!(xdp_prog_id(&a.host_veth), None);
        assert_eq!(
            bpf_links(),
            links_before,
            "{what} pin dir: an attachment was made"
        );
        std::fs::remove_dir(&pins.path).expect("rmdir");
    }
    // Made by dxdp itself, under any umask, it is accepted.
    must(&[
        "sh",
        "-c",
        &format!("umask 000; exec {DXDP} --pin-dir {dir} link {sa} {sb}"),
    ]);
    let owned = Dxdp {
        pin_dir: pins.path.clone(),
    };
    assert_eq!(owned.status().links.len(), 1);
    owned.unlink(a, b);
}
