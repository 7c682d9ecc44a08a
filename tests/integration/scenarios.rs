//! Scenarios that run on Docker and on Podman alike: one function each, generic over the
//! engine's world ([`Engine`]), and a thin `#[test]` per engine in `docker.rs` and `podman.rs`
//! (`docker::NAME`, `podman::NAME`) that makes the world and adds what only that engine has.

use crate::support::{Engine, container_iperf3, container_pings, link_between};

/// `dxdp link` by container name and by ID prefix on one of the engine's bridges; TCP and UDP
/// iperf3 over the link raise its redirect counters both ways; a third container on the bridge
/// moves no counter; `status` lists the link by container names; `unlink`, naming the pair the
/// other way round, removes it.
pub fn link_by_name_and_id_prefix_carries_iperf3_and_leaves_a_third_container_alone(
    world: &mut impl Engine,
) {
    let net = world.network("net", &[]);
    let a = world.container("a", &["--network", &net]);
    let b = world.container("b", &["--network", &net]);
    let c = world.container("c", &["--network", &net]);
    let (ip_a, ip_b) = (world.ip(&a, &net), world.ip(&b, &net));
    let b_prefix = world.id(&b)[..12].to_owned();

    let run = world.run_dxdp(&["link", &a, &b_prefix]);
    run.assert_success();
    assert!(
        run.stdout
            .contains(&format!("on {net} ({}", world.bridge_prefix())),
        "linked on the network and its bridge: {run}"
    );
    let status = world.status();
    let link = link_between(&status, &a, &b).expect("link listed by container names");
    assert_eq!(
        (
            link.network.as_str(),
            link.datapath.as_str(),
            link.origin.as_str()
        ),
        (net.as_str(), "tc", "manual")
    );

    let cli = |args: &[&str]| world.cli(args);
    let tcp = container_iperf3(cli, &b, &a, &ip_b, false);
    let udp = container_iperf3(cli, &a, &b, &ip_a, true);
    eprintln!(
        "{} link: tcp {tcp:.3e} bit/s, udp {udp:.3e} bit/s",
        world.name()
    );
    assert!(tcp > 1e8 && udp > 1e7, "tcp {tcp} bit/s, udp {udp} bit/s");
    let after = world.status();
    let link = link_between(&after, &a, &b).expect("still linked");
    assert!(
        link.low_to_high.packets > 1000 && link.high_to_low.packets > 1000,
        "both directions carried the iperf3 traffic: {link:?}"
    );

    // The third container reaches both through the bridge and moves no link counter.
    let before = link.clone();
    ping_all(world, &c, &ip_a, 20);
    ping_all(world, &c, &ip_b, 20);
    let later = world.status();
    let link = link_between(&later, &a, &b).expect("still linked");
    assert_eq!(
        (link.low_to_high.packets, link.high_to_low.packets),
        (before.low_to_high.packets, before.high_to_low.packets),
        "c's traffic must not be redirected"
    );
    assert!(
        !later
            .links
            .iter()
            .any(|l| l.low_name == c || l.high_name == c)
    );

    world.run_dxdp(&["unlink", &b, &a]).assert_success();
    world.status().assert_empty();
    ping_all(world, &a, &ip_b, 10);
}

/// What no engine's containers can be linked to, beside `a` (running on `net`, which the caller
/// made with its engine's options): one on another network, in network mode host and none, a
/// stopped one on `net`, an unknown name, `a` itself. Each is refused with exit code 1 and one
/// clear error; nothing is linked or pinned after.
pub fn refuses_what_no_engine_can_link(world: &mut impl Engine, a: &str, net: &str) {
    let other_net = world.network("other", &[]);
    let other = world.container("other", &["--network", &other_net]);
    let host = world.container("host", &["--network", "host"]);
    let none = world.container("none", &["--network", "none"]);
    let stopped = world.container("stopped", &["--network", net]);
    world.cli(&["stop", "-t", "0", &stopped]).assert_success();
    let unknown = format!("{}-nosuch", world.prefix());

    let cases: [(&str, &str, &str); 6] = [
        (a, &other, "share no network"),
        (a, &host, "network mode host"),
        (a, &none, "network mode none"),
        (a, &unknown, "no container named"),
        (a, &stopped, "is not running"),
        (a, a, "to itself"),
    ];
    for (p, q, message) in cases {
        assert_refused(world, p, q, message);
    }
    world.status().assert_empty();
    assert!(world.link_pins().is_empty());
}

/// `dxdp link P Q` fails with exit code 1 and one clear error that contains `message`.
#[track_caller]
pub fn assert_refused(world: &impl Engine, p: &str, q: &str, message: &str) {
    let run = world.run_dxdp(&["link", p, q]);
    run.assert_failure();
    assert_eq!(run.code(), Some(1), "{run}");
    assert!(run.stderr.contains(message), "expected {message:?}: {run}");
    assert!(
        run.stderr.lines().count() <= 2,
        "one clear error, not a trace: {run}"
    );
}

/// `count` pings `from -> ip`, every one answered.
#[track_caller]
pub fn ping_all(world: &impl Engine, from: &str, ip: &str, count: u32) {
    if let Err(run) = container_pings(|args| world.cli(args), from, ip, count) {
        panic!("ping {from} -> {ip}: {run}");
    }
}
