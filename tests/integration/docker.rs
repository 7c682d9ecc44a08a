//! Real dockerd, real containers from the local test image, real iperf3: `dxdp link` by
//! container name, the refusals, and `dxdp watch` following labels through the containers'
//! lives. Every network and container is the test's own and is removed on drop.

use std::{
    thread,
    time::{Duration, Instant},
};

use crate::{
    scenarios,
    support::{
        self, Background, DOCKER, Engine, World, docker, docker_ok, link_between, require_docker,
        wait_until,
    },
};

const LABELS_GROUP: &[&str] = &["-l", "dxdp.enable=true", "-l"];

/// iperf3 from container `client` to `server_ip`, bounded; returns bits/s received.
#[track_caller]
fn iperf3(server: &str, client: &str, server_ip: &str, udp: bool) -> f64 {
    support::container_iperf3(docker, server, client, server_ip, udp)
}

#[track_caller]
fn ping_all(from: &str, ip: &str, count: u32) {
    if let Err(run) = support::container_pings(docker, from, ip, count) {
        panic!("ping {from} -> {ip}: {run}");
    }
}

/// [`scenarios::link_by_name_and_id_prefix_carries_iperf3_and_leaves_a_third_container_alone`]
/// on the host's dockerd.
#[test]
fn link_by_name_and_id_prefix_carries_iperf3_and_leaves_a_third_container_alone() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    scenarios::link_by_name_and_id_prefix_carries_iperf3_and_leaves_a_third_container_alone(
        &mut world,
    );
}

/// A compose service named like another container's ID prefix: the engine's own lookup takes
/// the prefix as readily as a name, and a service called "db" once resolved to whichever
/// container's ID began with "db" (a podman-compose test linked `web` to itself, 1 run in 256).
/// Both are named and nothing is linked; the service's container by its own name links.
#[test]
fn a_service_named_like_another_containers_id_prefix_is_refused_as_ambiguous() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("ambiguous", &[]);
    let a = world.container("a", &["--network", &net]);
    let prefix = world.id(&a)[..8].to_owned();
    let service = format!("com.docker.compose.service={prefix}");
    let b = world.container("b", &["--network", &net, "--label", &service]);
    let c = world.container("c", &["--network", &net]);
    let run = world.run_dxdp(&["link", &prefix, &c]);
    run.assert_failure();
    assert_eq!(run.code(), Some(1), "{run}");
    assert!(
        run.stderr.contains("ambiguous") && run.stderr.contains(&a) && run.stderr.contains(&b),
        "the error names both containers: {run}"
    );
    world.dxdp.status().assert_empty();
    world.run_dxdp(&["link", &b, &c]).assert_success();
    world.run_dxdp(&["unlink", &b, &c]).assert_success();
}

/// [`scenarios::refuses_what_no_engine_can_link`], and Docker's own refusal: a pair on a network
/// whose bridge forbids container-to-container traffic (`enable_icc=false`).
#[test]
fn refuses_what_cannot_or_must_not_be_linked() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("one", &[]);
    let a = world.run("a", &["--network", &net], &[]);
    scenarios::refuses_what_no_engine_can_link(&mut world, &a, &net);

    let closed = world.network(
        "closed",
        &["-o", "com.docker.network.bridge.enable_icc=false"],
    );
    let x = world.run("x", &["--network", &closed], &[]);
    let y = world.run("y", &["--network", &closed], &[]);
    scenarios::assert_refused(&world, &x, &y, "enable_icc=false");
    world.dxdp.status().assert_empty();
    assert!(world.dxdp.link_pins().is_empty());
}

#[test]
fn watch_follows_labels_through_start_stop_restart_groups_and_disconnect() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("net", &[]);
    let watch = world.watch(&["--resync", "2"]);
    thread::sleep(Duration::from_millis(500));

    let pair_label = format!("dxdp.group={}-pair", world.prefix);
    let mut labels = LABELS_GROUP.to_vec();
    labels.push(&pair_label);
    let with = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = vec!["--network".into(), net.clone()];
        v.extend(extra.iter().map(|s| (*s).to_owned()));
        v
    };
    let args = with(&labels);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let a = world.run("a", &args, &[]);
    let started = Instant::now();
    let b = world.run("b", &args, &[]);
    let run_returned = Instant::now();
    let plain_args = with(&[]);
    let plain_args: Vec<&str> = plain_args.iter().map(String::as_str).collect();
    let plain = world.run("plain", &plain_args, &[]);
    watch.expect_links(1, Duration::from_secs(10));
    eprintln!(
        "labeled pair linked {:?} after `docker run` returned ({:?} after it started)",
        run_returned.elapsed(),
        started.elapsed()
    );
    let status = world.dxdp.status();
    let link = link_between(&status, &a, &b).expect("a-b linked");
    assert_eq!(link.origin, "watch");
    assert!(
        !status
            .links
            .iter()
            .any(|l| l.low_name == plain || l.high_name == plain)
    );
    ping_all(&a, &world.ip(&b, &net), 10);

    docker_ok(&["stop", "-t", "0", &b]);
    watch.expect_links(0, Duration::from_secs(10));
    docker_ok(&["start", &b]);
    watch.expect_links(1, Duration::from_secs(10));
    docker_ok(&["restart", "-t", "0", &a]);
    watch.expect_links(1, Duration::from_secs(10));
    ping_all(&a, &world.ip(&b, &net), 10);

    // A group of four meshes fully: 6 more links.
    let quad_label = format!("dxdp.group={}-quad", world.prefix);
    let mut quad = LABELS_GROUP.to_vec();
    quad.push(&quad_label);
    let quad_args = with(&quad);
    let quad_args: Vec<&str> = quad_args.iter().map(String::as_str).collect();
    let members: Vec<String> = (0..4)
        .map(|i| world.run(&format!("q{i}"), &quad_args, &[]))
        .collect();
    watch.expect_links(7, Duration::from_secs(15));
    let status = world.dxdp.status();
    for (i, m) in members.iter().enumerate() {
        for n in &members[i + 1..] {
            assert!(
                link_between(&status, m, n).is_some(),
                "{m} - {n} not linked"
            );
        }
    }

    // Leaving the shared network removes the link; the rest stays.
    docker_ok(&["network", "disconnect", &net, &b]);
    watch.expect_links(6, Duration::from_secs(10));
    assert!(link_between(&world.dxdp.status(), &a, &b).is_none());
    assert!(
        !watch.log_text().contains("panicked"),
        "{}",
        watch.log_text()
    );
}

/// Median and worst delay from `docker run` returning to the link being active, over 20 runs,
/// and the watch's resident memory and idle CPU.
#[test]
fn watch_links_a_new_container_within_a_second() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("net", &[]);
    let anchor = world.run("anchor", &["--network", &net], &[]);
    let watch = world.watch(&["--resync", "30"]);
    thread::sleep(Duration::from_millis(500));
    let peer_label = format!("dxdp.peers={anchor}");
    let mut delays = Vec::new();
    for i in 0..20 {
        let name = format!("{}-p{i}", world.prefix);
        let run = docker(&[
            "run",
            "-d",
            "--name",
            &name,
            "--network",
            &net,
            "-l",
            "dxdp.enable=true",
            "-l",
            &peer_label,
            support::IMAGE,
        ]);
        let returned = Instant::now();
        run.assert_success();
        let linked = wait_until(Duration::from_secs(10), || {
            world.dxdp.link_pins().len() >= 2
        });
        let delay = returned.elapsed();
        docker(&["rm", "-f", &name]);
        assert!(
            linked,
            "run {i}: not linked within 10 s\n{}",
            watch.log_text()
        );
        delays.push(delay);
        assert!(
            wait_until(Duration::from_secs(10), || world
                .dxdp
                .link_pins()
                .is_empty()),
            "run {i}: link not removed after the container went\n{}",
            watch.log_text()
        );
    }
    delays.sort();
    let median = delays[delays.len() / 2];
    let worst = delays[delays.len() - 1];
    eprintln!("docker run -> link active over 20 runs: median {median:?}, worst {worst:?}");
    assert!(worst < Duration::from_secs(2), "worst delay {worst:?}");

    let pid = watch.pid();
    let ticks = || -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0)
    };
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .expect("VmRSS");
    let t0 = ticks();
    thread::sleep(Duration::from_secs(5));
    let idle_cpu = (ticks() - t0) as f64 / 100.0 / 5.0 * 100.0;
    eprintln!("watch resident memory {rss_kib} KiB, idle CPU {idle_cpu:.2} %");
    assert!(rss_kib < 100 * 1024, "watch uses {rss_kib} KiB");
    assert!(idle_cpu < 5.0, "watch idles at {idle_cpu} % CPU");
}

#[test]
fn killing_and_restarting_the_watch_loses_no_packet() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("net", &[]);
    let group = format!("dxdp.group={}-g", world.prefix);
    let a = world.run(
        "a",
        &["--network", &net, "-l", "dxdp.enable=true", "-l", &group],
        &[],
    );
    let b = world.run(
        "b",
        &["--network", &net, "-l", "dxdp.enable=true", "-l", &group],
        &[],
    );
    let mut watch = world.watch(&["--resync", "1"]);
    watch.expect_links(1, Duration::from_secs(10));
    let before = world.dxdp.status();
    let pins_before = world.dxdp.link_pins();
    let ip_b = world.ip(&b, &net);

    // 2500 echo requests at 2 ms, about 5 s, across a kill -9 and two restarts of the watch.
    let log = std::env::temp_dir().join(format!("dxdp-flood-{}.txt", std::process::id()));
    let flood = Background::spawn(&[
        "sh",
        "-c",
        &format!(
            "{DOCKER} exec {a} ping -q -n -i 0.002 -c 2500 -W 1 {ip_b} > {}",
            log.display()
        ),
    ]);
    thread::sleep(Duration::from_millis(800));
    watch.kill9();
    thread::sleep(Duration::from_millis(500));
    watch.restart();
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(watch.terminate(), Some(0), "SIGTERM exits cleanly");
    watch.restart();
    let mut flood = flood;
    assert!(
        flood.wait_timeout(Duration::from_secs(20)).is_some(),
        "ping did not finish"
    );
    let out = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        out.contains("2500 packets transmitted, 2500 received"),
        "lost packets across watch restarts: {out}\n--- watch log\n{}",
        watch.log_text()
    );

    // Adopted, not rebuilt: same link record, same attachment pins, and it carried the flood.
    let after = world.dxdp.status();
    let (l0, l1) = (
        link_between(&before, &a, &b).expect("linked before"),
        link_between(&after, &a, &b).expect("linked after"),
    );
    assert_eq!(l0.created_unix_secs, l1.created_unix_secs);
    assert_eq!(pins_before, world.dxdp.link_pins());
    assert!(
        l1.low_to_high.packets >= 2500 && l1.high_to_low.packets >= 2500,
        "{l1:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// What changed in the engines since 20.10 (issue 10). Tests named `engine28_…` need Engine 28
// features (IPv6-only networks, several networks at create, gateway modes); the legacy lane
// (scripts/legacy-docker.sh, Engine 20.10) runs this file with `--skip engine28_`.

/// Packets of the link between `a` and `b`, both directions summed.
#[track_caller]
fn link_packets(world: &World, a: &str, b: &str) -> u64 {
    let status = world.dxdp.status();
    let link = link_between(&status, a, b)
        .unwrap_or_else(|| panic!("no link between {a} and {b}: {status:?}"));
    link.low_to_high.packets + link.high_to_low.packets
}

/// `dxdp link a b` must succeed and name `net`; then 20 pings `a -> ip` (of b) must all be
/// answered and be redirected by the link, both ways.
#[track_caller]
fn link_and_ping(world: &World, a: &str, b: &str, net: &str, ip: &str) {
    let run = world.dxdp.run(&["link", a, b]);
    run.assert_success();
    let status = world.dxdp.status();
    let link = link_between(&status, a, b).expect("linked");
    assert_eq!(link.network, net, "{a} - {b} linked on the wrong network");
    ping_redirected(world, a, b, ip);
}

/// 20 pings `a -> ip` (of b) must all be answered and be redirected by their link, both ways.
#[track_caller]
fn ping_redirected(world: &World, a: &str, b: &str, ip: &str) {
    let before = link_packets(world, a, b);
    ping_all(a, ip, 20);
    let grown = link_packets(world, a, b) - before;
    assert!(
        grown >= 40,
        "{a} -> {b} ({ip}): 20 pings should be redirected both ways, the link's counters grew \
         by {grown}"
    );
}

/// The host veth ifindex of `container` in its link with `peer`.
#[track_caller]
fn veth_of(world: &World, container: &str, peer: &str) -> u32 {
    let status = world.dxdp.status();
    let link = link_between(&status, container, peer).expect("linked");
    if link.low_name == container {
        link.low_ifindex
    } else {
        link.high_ifindex
    }
}

/// A restarted container gets a new veth (and on Engine 28 a new random MAC): the watch follows
/// it, and frames still addressed to its old MAC are never redirected.
#[test]
fn restarted_container_gets_a_new_veth_and_mac_and_the_link_follows() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("net", &[]);
    let group = format!("dxdp.group={}-g", world.prefix);
    let labels = ["-l", "dxdp.enable=true", "-l", &group, "--network", &net];
    let a = world.run("a", &labels, &[]);
    // b rewrites its neighbour table below: NET_ADMIN inside its own namespace.
    let mut b_args = labels.to_vec();
    b_args.extend_from_slice(&["--cap-add", "NET_ADMIN"]);
    let b = world.run("b", &b_args, &[]);
    let watch = world.watch(&["--resync", "2"]);
    watch.expect_links(1, Duration::from_secs(10));
    let (old_mac, old_veth) = (world.mac(&a, &net), veth_of(&world, &a, &b));
    let ip_a = world.ip(&a, &net);
    ping_all(&b, &ip_a, 10);

    docker_ok(&["restart", "-t", "0", &a]);
    let mut new_veth = old_veth;
    let followed = wait_until(Duration::from_secs(10), || {
        let status = world.dxdp.status();
        new_veth = match link_between(&status, &a, &b) {
            Some(l) if l.low_name == a => l.low_ifindex,
            Some(l) => l.high_ifindex,
            None => old_veth,
        };
        new_veth != old_veth
    });
    assert!(
        followed,
        "the link did not move to {a}'s new veth within 10 s\n--- watch log\n{}",
        watch.log_text()
    );
    let new_mac = world.mac(&a, &net);
    let ip_a = world.ip(&a, &net);
    if support::engine_major() >= 28 {
        assert_ne!(
            old_mac, new_mac,
            "Engine 28 gives a restarted container a new MAC"
        );
    }
    let before = link_packets(&world, &a, &b);
    ping_all(&b, &ip_a, 20);
    assert!(
        link_packets(&world, &a, &b) - before >= 40,
        "traffic after the restart is not redirected"
    );

    if old_mac != new_mac {
        // b still believes a's address is at the old MAC: the frames go to the bridge (which
        // floods them, and a drops them), never redirected to a's new veth.
        let b_veth = veth_of(&world, &b, &a);
        docker_ok(&[
            "exec",
            &b,
            "ip",
            "neigh",
            "replace",
            &ip_a,
            "lladdr",
            &old_mac,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ]);
        let before = world.dxdp.status().counters(b_veth);
        let run = docker(&[
            "exec", &b, "ping", "-q", "-n", "-c", "10", "-i", "0.01", "-W", "1", &ip_a,
        ]);
        let grown = world.dxdp.status().counters(b_veth).since(&before);
        assert!(
            !run.success(),
            "a answered frames sent to its old MAC: {run}"
        );
        assert_eq!(
            grown.redirected_packets, 0,
            "frames to the old MAC {old_mac} were redirected: {grown:?}"
        );
        assert!(grown.passed_packets >= 10, "{grown:?}");
        docker_ok(&["exec", &b, "ip", "neigh", "del", &ip_a, "dev", "eth0"]);
        ping_all(&b, &ip_a, 10);
    }
    assert!(
        !watch.log_text().contains("panicked"),
        "{}",
        watch.log_text()
    );
}

/// `com.docker.network.endpoint.ifname` names the container-side interface (Engine 28; older
/// engines ignore it and keep eth0): dxdp finds endpoints by MAC, not by name.
#[test]
fn container_interface_not_named_eth0_links() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("net", &[]);
    let endpoint = format!("name={net},driver-opt=com.docker.network.endpoint.ifname=dx0");
    let a = world.run("a", &["--network", &endpoint], &[]);
    let b = world.run("b", &["--network", &net], &[]);
    let names = docker_ok(&["exec", &a, "ls", "/sys/class/net"]);
    if support::engine_major() >= 28 {
        assert!(
            names.lines().any(|n| n == "dx0") && !names.lines().any(|n| n == "eth0"),
            "{a}'s interfaces: {names}"
        );
    }
    let ip_b = world.ip(&b, &net);
    link_and_ping(&world, &a, &b, &net, &ip_b);
    let ip_a = world.ip(&a, &net);
    ping_all(&b, &ip_a, 10);
}

/// Internal networks (gateway mode `isolated` for the outside world) still connect their
/// containers to each other, so they link.
#[test]
fn internal_network_links() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("internal", &["--internal"]);
    let a = world.run("a", &["--network", &net], &[]);
    let b = world.run("b", &["--network", &net], &[]);
    let ip_b = world.ip(&b, &net);
    link_and_ping(&world, &a, &b, &net, &ip_b);
}

/// A container created on two networks at once (`--network a --network b`, API 1.44+) links
/// with a peer on each, each link on the network the pair shares.
#[test]
fn engine28_container_created_on_two_networks_links_on_each() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let one = world.network("one", &[]);
    let two = world.network("two", &[]);
    let a = world.run("a", &["--network", &one, "--network", &two], &[]);
    let b = world.run("b", &["--network", &one], &[]);
    let c = world.run("c", &["--network", &two], &[]);
    let ip_b = world.ip(&b, &one);
    let ip_c = world.ip(&c, &two);
    link_and_ping(&world, &a, &b, &one, &ip_b);
    link_and_ping(&world, &a, &c, &two, &ip_c);
}

/// IPv6-only (`--ipv4=false`) and dual-stack networks link; ping and iperf3 over IPv6 (and over
/// IPv4 where there is one) go through the link.
#[test]
fn engine28_ipv6_only_and_dual_stack_networks_link() {
    if !require_docker() {
        return;
    }
    for ipv4 in [false, true] {
        let case = if ipv4 { "dual-stack" } else { "IPv6-only" };
        let mut world = World::shared();
        let net = world.network_v6("v6", ipv4, &[]);
        let a = world.run("a", &["--network", &net], &[]);
        let b = world.run("b", &["--network", &net], &[]);
        let ip6_b = world.ip6(&b, &net);
        assert!(ip6_b.contains(':'), "{case}: {b} has no IPv6 address");
        let ip4_b = world.ip(&b, &net);
        assert_eq!(
            !ip4_b.is_empty(),
            ipv4,
            "{case}: {b}'s IPv4 address {ip4_b:?}"
        );
        link_and_ping(&world, &a, &b, &net, &ip6_b);
        let before = link_packets(&world, &a, &b);
        let tcp = iperf3(&b, &a, &ip6_b, false);
        assert!(tcp > 1e8, "{case}: iperf3 over IPv6 gave {tcp} bit/s");
        assert!(
            link_packets(&world, &a, &b) - before > 1000,
            "{case}: iperf3 over IPv6 was not redirected"
        );
        if ipv4 {
            let before = link_packets(&world, &a, &b);
            ping_all(&a, &ip4_b, 20);
            assert!(link_packets(&world, &a, &b) - before >= 40, "{case}: IPv4");
        }
    }
}

/// Gateway modes change how the network reaches the outside (routed: no NAT; nat-unprotected:
/// no filtering of direct access), not how its containers reach each other: both link.
#[test]
fn engine28_gateway_modes_link() {
    if !require_docker() {
        return;
    }
    for mode in ["routed", "nat-unprotected"] {
        let mut world = World::shared();
        let opt = format!("com.docker.network.bridge.gateway_mode_ipv4={mode}");
        let net = world.network(mode, &["-o", &opt]);
        let a = world.run("a", &["--network", &net], &[]);
        let b = world.run("b", &["--network", &net], &[]);
        let ip_b = world.ip(&b, &net);
        link_and_ping(&world, &a, &b, &net, &ip_b);
        let ip_a = world.ip(&a, &net);
        ping_all(&b, &ip_a, 10);
    }
}

/// `watch --cleanup` removes the links it made when it stops, and nothing else: a link made by
/// hand keeps working, with its attachments. `dxdp cleanup` then removes everything, and the
/// pair still talks, over the bridge. Both remove their links in one pass over the maps.
#[test]
fn watch_cleanup_removes_its_own_links_and_cleanup_removes_the_rest() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("net", &[]);
    let mut watch = world.watch(&["--cleanup"]);
    let group = format!("dxdp.group={}-four", world.prefix);
    let mut labels = LABELS_GROUP.to_vec();
    labels.push(&group);
    let mut args = vec!["--network", net.as_str()];
    args.extend_from_slice(&labels);
    for i in 0..4 {
        world.run(&format!("g{i}"), &args, &[]);
    }
    let p = world.run("p", &["--network", &net], &[]);
    let q = world.run("q", &["--network", &net], &[]);
    link_and_ping(&world, &p, &q, &net, &world.ip(&q, &net));
    watch.expect_links(7, Duration::from_secs(15));

    assert_eq!(watch.terminate(), Some(0), "{}", watch.log_text());
    let status = world.dxdp.status();
    assert_eq!(status.links.len(), 1, "{status:?}");
    assert_eq!(
        link_between(&status, &p, &q).expect("p-q kept").origin,
        "manual"
    );
    let mut pinned: Vec<String> = std::fs::read_dir(world.dxdp.pin_dir.join("links"))
        .expect("links pin directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    pinned.sort();
    let mut kept: Vec<String> = [&p, &q]
        .iter()
        .map(|c| format!("tc-{}", world.veth(c, &net).1))
        .collect();
    kept.sort();
    assert_eq!(pinned, kept, "attachments other than p's and q's left");
    assert!(
        watch.log_text().contains("removed=6"),
        "{}",
        watch.log_text()
    );
    ping_redirected(&world, &p, &q, &world.ip(&q, &net));

    world.dxdp.run(&["cleanup"]).assert_success();
    assert!(
        !world.dxdp.pin_dir.exists(),
        "cleanup left the pin directory"
    );
    ping_all(&p, &world.ip(&q, &net), 5);
}
