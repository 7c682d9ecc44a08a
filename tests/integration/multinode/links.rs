//! dxdp links on a real two-node swarm (issue 35): Swarm service tasks on an overlay network,
//! linked by dxdp run inside their node as an operator runs it, with the other node's task and
//! the cross-node path (VXLAN) left as they were; refusals where a rule in the sandbox or
//! encryption forbids a link; and a task rescheduled to the other node, a network removed and a
//! node leaving the swarm, after which nothing of dxdp is left on either node.
//!
//! Services run with `--endpoint-mode dnsrr` (this kernel has no IPVS for VIPs) and
//! `--stop-grace-period 1s` (`sleep` ignores SIGTERM), each task pinned to a node by a
//! placement constraint on its hostname.

use std::time::{Duration, Instant};

use super::{overlay_comes_up, pings_within, stop_and_check, vxlan_tx_packets};
use crate::support::{
    DXDP, IMAGE, LinkStatus, Overlay, Run, Status, SwarmNode, SwarmNodes, link_between,
    require_swarm_nodes, wait_until,
};

/// The pin directory dxdp uses inside a node (each node has a bpffs of its own).
pub(super) const PIN_DIR: &str = "/sys/fs/bpf/dxdp-test";
/// How long a test may take once its swarm is up (waiting for another test's swarm to go is
/// not counted), teardown included; each takes 10-30 s here.
const TEST_BOUND: Duration = Duration::from_secs(120);
/// How long a service's tasks may take to run, or to go, on a node.
const TASKS_BOUND: Duration = Duration::from_secs(45);
/// What the link must have carried, each way, after a 2 s iperf3 between its ends.
pub(super) const CARRIED: u64 = 100_000;

/// `dxdp --pin-dir PIN_DIR ARGS…` inside `node` (its dockerd, its bpffs, its sandboxes).
#[track_caller]
pub(super) fn dxdp(node: &SwarmNode, args: &[&str]) -> Run {
    let mut argv = vec![DXDP, "--pin-dir", PIN_DIR];
    argv.extend_from_slice(args);
    node.exec(&argv)
}

/// [`dxdp`], which must succeed; returns stdout.
#[track_caller]
pub(super) fn dxdp_ok(node: &SwarmNode, args: &[&str]) -> String {
    let run = dxdp(node, args);
    run.assert_success();
    run.stdout
}

/// `dxdp status --json` inside `node`, parsed.
#[track_caller]
pub(super) fn status(node: &SwarmNode) -> Status {
    let run = dxdp(node, &["status", "--json"]);
    run.assert_success();
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{}: invalid `status --json` ({e}): {run}", node.name))
}

/// The link between the containers `a` and `b` in `node`'s status; panics if there is none.
#[track_caller]
pub(super) fn link(node: &SwarmNode, a: &str, b: &str) -> LinkStatus {
    let status = status(node);
    link_between(&status, a, b)
        .cloned()
        .unwrap_or_else(|| panic!("{}: no link {a} <-> {b}: {status:#?}", node.name))
}

/// A replicated service of `replicas` tasks (`sleep 600`) on `network`, all placed on `node`.
#[track_caller]
pub(super) fn service(
    manager: &SwarmNode,
    name: &str,
    replicas: u32,
    node: &SwarmNode,
    network: &str,
) {
    let replicas = replicas.to_string();
    let constraint = format!("node.hostname=={}", node.name);
    manager.docker_ok(&[
        "service",
        "create",
        "--detach",
        "--no-resolve-image",
        "--endpoint-mode",
        "dnsrr",
        "--stop-grace-period",
        "1s",
        "--replicas",
        &replicas,
        "--constraint",
        &constraint,
        "--network",
        network,
        "--name",
        name,
        IMAGE,
        "sleep",
        "600",
    ]);
}

/// The names (sorted) of the running task containers of `service` on `node`, once there are
/// `n` of them (as `docker ps` on that node lists them).
#[track_caller]
pub(super) fn tasks(node: &SwarmNode, service: &str, n: usize) -> Vec<String> {
    let filter = format!("label=com.docker.swarm.service.name={service}");
    let mut names = Vec::new();
    let settled = wait_until(TASKS_BOUND, || {
        let run = node.docker(&[
            "ps",
            "--filter",
            &filter,
            "--filter",
            "status=running",
            "--format",
            "{{.Names}}",
        ]);
        names = run.stdout.lines().map(str::to_owned).collect();
        names.sort_unstable();
        run.success() && names.len() == n
    });
    assert!(
        settled,
        "{}: {n} running task(s) of {service} expected, found {names:?}",
        node.name
    );
    names
}

/// TCP for 2 s from `client` (on `from`) to `server` (on `to`, at `ip`), which must succeed.
#[track_caller]
pub(super) fn iperf(
    from: &SwarmNode,
    client: &str,
    to: &SwarmNode,
    server: &str,
    ip: &str,
    port: &str,
) {
    to.docker_ok(&["exec", "-d", server, "iperf3", "-s", "-1", "-p", port]);
    let sport = format!("sport = :{port}");
    let listening = wait_until(Duration::from_secs(10), || {
        let run = to.docker(&["exec", server, "ss", "-Hltn", &sport]);
        run.success() && !run.stdout.trim().is_empty()
    });
    assert!(listening, "iperf3 did not listen in {server}");
    let run = from.docker(&[
        "exec",
        client,
        "timeout",
        "15",
        "iperf3",
        "-c",
        ip,
        "-p",
        port,
        "-t",
        "2",
        "--connect-timeout",
        "2000",
    ]);
    assert!(run.success(), "iperf3 {client} -> {server} ({ip}): {run}");
}

/// Removes everything dxdp pinned on each node and checks that its pin directory is gone.
#[track_caller]
pub(super) fn cleanup_each(nodes: &SwarmNodes) {
    for node in &nodes.nodes {
        dxdp_ok(node, &["cleanup"]);
        let left = node.exec(&["test", "-e", PIN_DIR]);
        assert!(
            !left.success(),
            "{}: {PIN_DIR} outlived `dxdp cleanup`",
            node.name
        );
    }
}

/// The names under `PIN_DIR/overlay` on `node` (the sandboxes' pinned datapaths); empty when
/// the directory is absent.
#[track_caller]
fn sites(node: &SwarmNode) -> Vec<String> {
    let dir = format!("{PIN_DIR}/overlay");
    let run = node.exec(&["sh", "-c", &format!("[ ! -e {dir} ] || ls -A {dir}")]);
    run.assert_success();
    run.stdout.lines().map(str::to_owned).collect()
}

/// Waits until `sandbox` is gone from `node` (removing `network` on the manager again while
/// the swarm still has tasks on it: the manager refuses until they are gone).
#[track_caller]
fn remove_network(nodes: &SwarmNodes, network: &str, node: &SwarmNode, sandbox: &str) {
    let gone = wait_until(TASKS_BOUND, || {
        let _ = nodes.manager().docker(&["network", "rm", network]);
        !node.sandboxes().iter().any(|s| s == sandbox)
    });
    assert!(
        gone,
        "{}: the sandbox {sandbox} outlived {network}",
        node.name
    );
}

/// Says how long the test took, which must be less than [`TEST_BOUND`].
#[track_caller]
pub(super) fn within_bound(began: Instant) {
    let took = began.elapsed();
    eprintln!("test took {took:?}");
    assert!(took < TEST_BOUND, "took {took:?}");
}

/// The test image loaded on every node, an overlay `dxt-sw-ov` on `subnet`, and its tasks: two
/// of `dxt-sw-near` on node 1 and one of `dxt-sw-far` on node 2 (names sorted).
#[track_caller]
pub(super) fn two_near_one_far(nodes: &SwarmNodes, subnet: &str) -> (Overlay, Vec<String>, String) {
    nodes.load_image(IMAGE);
    let overlay = nodes.overlay("dxt-sw-ov", subnet);
    let (one, two, manager) = (nodes.node(1), nodes.node(2), nodes.manager());
    service(manager, "dxt-sw-near", 2, one, &overlay.name);
    service(manager, "dxt-sw-far", 1, two, &overlay.name);
    let near = tasks(one, "dxt-sw-near", 2);
    let far = tasks(two, "dxt-sw-far", 1).remove(0);
    (overlay, near, far)
}

/// `iptables OP RULE…` in `sandbox` on `node` (`-I` to insert the rule, `-D` to delete it).
#[track_caller]
pub(super) fn sandbox_iptables(node: &SwarmNode, sandbox: &str, op: &str, rule: &[&str]) {
    let mut argv = vec!["iptables", op];
    argv.extend_from_slice(rule);
    node.in_sandbox(sandbox, &argv).assert_success();
}

#[test]
fn a_same_node_link_on_an_overlay_carries_tasks_traffic() {
    if !require_swarm_nodes() {
        return;
    }
    let nodes = SwarmNodes::start(2);
    let began = Instant::now();
    let (overlay, near, c) = two_near_one_far(&nodes, "10.240.204.0/24");
    let (one, two) = (nodes.node(1), nodes.node(2));
    let (a, b) = (&near[0], &near[1]);
    let c = &c;
    let (ip_a, ip_b) = (one.ip(a, &overlay.name), one.ip(b, &overlay.name));
    let ip_c = two.ip(c, &overlay.name);
    let sandbox = overlay.sandbox();
    pings_within(one, a, &ip_b);
    overlay_comes_up(one, a, &ip_c);
    overlay_comes_up(two, c, &ip_b);

    for datapath in ["tc", "xdp"] {
        let out = dxdp_ok(one, &["link", a, b, "--datapath", datapath]);
        assert!(out.contains(&format!("in sandbox {sandbox}")), "{out}");
        let linked = status(one);
        let l = link_between(&linked, a, b)
            .unwrap_or_else(|| panic!("no link {a} <-> {b}: {linked:#?}"));
        assert_eq!(
            (
                l.sandbox.as_deref(),
                l.network.as_str(),
                l.datapath.as_str()
            ),
            (Some(sandbox.as_str()), overlay.name.as_str(), datapath),
            "{l:#?}"
        );
        assert_eq!(linked.links.len(), 1, "only the pair: {linked:#?}");
        // The two linked veths (in the sandbox) and nothing else are managed on node 1: not
        // the VXLAN device, and nothing of node 2's task.
        let mut managed: Vec<(u32, Option<&str>)> = linked
            .interfaces
            .iter()
            .map(|i| (i.ifindex, i.sandbox.as_deref()))
            .collect();
        managed.sort_unstable();
        assert_eq!(
            managed,
            [
                (l.low_ifindex, Some(sandbox.as_str())),
                (l.high_ifindex, Some(sandbox.as_str()))
            ],
            "{linked:#?}"
        );
        // Nothing on node 2, whose task is not linked.
        status(two).assert_empty();

        // The pair's bulk rides the link, both ways (data, acks).
        iperf(one, a, one, b, &ip_b, "5201");
        pings_within(one, b, &ip_a);
        let carried = link(one, a, b);
        assert!(
            carried.low_to_high.bytes > CARRIED && carried.high_to_low.bytes > CARRIED,
            "the link carried too little over {datapath}: {carried:#?}"
        );

        // Cross-node with the link in place: node-1 tasks and node 2's reach each other over
        // VXLAN as before, and none of it rides the link.
        let sent_before = vxlan_tx_packets(one, &overlay);
        let veth_a = if carried.low_name == *a {
            carried.low_ifindex
        } else {
            carried.high_ifindex
        };
        let passed_before = status(one).counters(veth_a);
        pings_within(one, a, &ip_c);
        pings_within(two, c, &ip_a);
        pings_within(two, c, &ip_b);
        iperf(one, a, two, c, &ip_c, "5202");
        iperf(two, c, one, b, &ip_b, "5203");
        let after = link(one, a, b);
        let grew = |now: u64, then: u64| now - then;
        assert!(
            grew(after.low_to_high.bytes, carried.low_to_high.bytes) < 10_000
                && grew(after.high_to_low.bytes, carried.high_to_low.bytes) < 10_000,
            "cross-node traffic rode the link over {datapath}: {carried:#?} -> {after:#?}"
        );
        let passed = status(one).counters(veth_a).since(&passed_before);
        assert!(
            passed.passed_bytes > CARRIED,
            "{a}'s frames to node 2 did not pass its program to br0 over {datapath}: {passed:#?}"
        );
        let sent = vxlan_tx_packets(one, &overlay) - sent_before;
        assert!(sent > 100, "node 1's VXLAN device sent {sent} frames");
        status(two).assert_empty();

        let out = dxdp_ok(one, &["unlink", a, b]);
        assert!(out.contains(&format!("in sandbox {sandbox}")), "{out}");
        status(one).assert_empty();
        pings_within(one, a, &ip_b);
    }

    cleanup_each(&nodes);
    stop_and_check(nodes);
    within_bound(began);
}

#[test]
fn a_firewall_rule_in_the_sandbox_refuses_the_link_and_encrypted_overlays_are_refused() {
    if !require_swarm_nodes() {
        return;
    }
    let nodes = SwarmNodes::start(2);
    let began = Instant::now();
    nodes.load_image(IMAGE);
    let overlay = nodes.overlay("dxt-sw-ov", "10.240.205.0/24");
    let (one, manager) = (nodes.node(1), nodes.manager());
    let sealed = manager.docker_ok(&[
        "network",
        "create",
        "-d",
        "overlay",
        "--attachable",
        "--opt",
        "encrypted",
        "--subnet",
        "10.240.206.0/24",
        "dxt-sw-sealed",
    ]);
    service(manager, "dxt-sw-near", 2, one, &overlay.name);
    service(manager, "dxt-sw-hid", 2, one, "dxt-sw-sealed");
    let near = tasks(one, "dxt-sw-near", 2);
    let (a, b) = (&near[0], &near[1]);
    let (ip_a, ip_b) = (one.ip(a, &overlay.name), one.ip(b, &overlay.name));
    let sandbox = overlay.sandbox();
    pings_within(one, a, &ip_b);

    // A rule in the sandbox, where br0 filters the pair's frames (br_netfilter): no link.
    let rule = ["FORWARD", "-s", &ip_a, "-d", &ip_b, "-j", "DROP"];
    let iptables = |op: &str| sandbox_iptables(one, &sandbox, op, &rule);
    iptables("-I");
    let refused = dxdp(one, &["link", a, b]);
    assert!(
        !refused.success()
            && refused.stderr.contains("-j DROP")
            && refused.stderr.contains(&ip_a)
            && refused.stderr.contains(&sandbox),
        "a link past a rule in the sandbox: {refused}"
    );
    assert_eq!(refused.stderr.trim().lines().count(), 1, "{refused}");
    status(one).assert_empty();
    // Without the rule the same link is made: the rule was the reason.
    iptables("-D");
    dxdp_ok(one, &["link", a, b]);
    dxdp_ok(one, &["unlink", a, b]);
    status(one).assert_empty();

    // Two tasks of one node on an encrypted overlay: refused in one line naming the option.
    let hid = tasks(one, "dxt-sw-hid", 2);
    let refused = dxdp(one, &["link", &hid[0], &hid[1]]);
    assert!(
        !refused.success() && refused.stderr.contains("--opt encrypted"),
        "a link on an encrypted overlay ({sealed}): {refused}"
    );
    assert_eq!(refused.stderr.trim().lines().count(), 1, "{refused}");
    status(one).assert_empty();

    cleanup_each(&nodes);
    stop_and_check(nodes);
    within_bound(began);
}

#[test]
fn a_rescheduled_task_loses_its_link_and_nothing_is_left() {
    if !require_swarm_nodes() {
        return;
    }
    let nodes = SwarmNodes::start(2);
    let began = Instant::now();
    nodes.load_image(IMAGE);
    let overlay: Overlay = nodes.overlay("dxt-sw-ov", "10.240.207.0/24");
    let (one, two, manager) = (nodes.node(1), nodes.node(2), nodes.manager());
    service(manager, "dxt-sw-stay", 1, one, &overlay.name);
    service(manager, "dxt-sw-move", 1, one, &overlay.name);
    let a = tasks(one, "dxt-sw-stay", 1).remove(0);
    let b = tasks(one, "dxt-sw-move", 1).remove(0);
    let ip_b = one.ip(&b, &overlay.name);
    let sandbox = overlay.sandbox();
    pings_within(one, &a, &ip_b);
    dxdp_ok(one, &["link", &a, &b]);
    pings_within(one, &a, &ip_b);
    let before = link(one, &a, &b);
    assert!(
        before.low_to_high.packets >= 3 && before.high_to_low.packets >= 3,
        "the pings did not ride the link: {before:#?}"
    );
    let veth_a = if before.low_name == a {
        before.low_ifindex
    } else {
        before.high_ifindex
    };

    // The moving task goes to node 2: swarm stops it on node 1 and starts a new one there.
    manager.docker_ok(&[
        "service",
        "update",
        "--detach",
        "--constraint-rm",
        &format!("node.hostname=={}", one.name),
        "--constraint-add",
        &format!("node.hostname=={}", two.name),
        "dxt-sw-move",
    ]);
    let moved = tasks(two, "dxt-sw-move", 1).remove(0);
    assert!(tasks(one, "dxt-sw-move", 0).is_empty());
    let table = dxdp(one, &["status"]);
    table.assert_success();
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.contains(&b) && l.contains(&sandbox) && l.contains("GONE")),
        "the moved task's link is not GONE: {table}"
    );
    let gone = link(one, &a, &b);
    assert_eq!(gone.state.as_deref(), Some("gone"), "{gone:#?}");

    // Nothing misdelivered: the replacement on node 2 gets a's traffic over the overlay, and
    // a's program redirects none of it (to where the old veth was).
    let ip_moved = two.ip(&moved, &overlay.name);
    let sent_before = vxlan_tx_packets(one, &overlay);
    let counters_before = status(one).counters(veth_a);
    pings_within(one, &a, &ip_moved);
    pings_within(two, &moved, &one.ip(&a, &overlay.name));
    let counters = status(one).counters(veth_a).since(&counters_before);
    assert_eq!(
        counters.redirected_packets, 0,
        "a's program redirected frames after its peer moved: {counters:#?}"
    );
    assert!(counters.passed_packets >= 3, "{counters:#?}");
    assert!(vxlan_tx_packets(one, &overlay) - sent_before >= 3);
    assert_eq!(link(one, &a, &b), gone, "the GONE link counted traffic");

    // Unlinked by the names it was made with.
    let out = dxdp_ok(one, &["unlink", &a, &b]);
    assert!(out.contains("unlinked") && out.contains(&sandbox), "{out}");
    status(one).assert_empty();
    pings_within(one, &a, &ip_moved);

    // Node 2 links its two tasks and leaves the swarm: the sandbox goes with its veths, and
    // the next commands drop its pinned state.
    manager.docker_ok(&["service", "scale", "--detach", "dxt-sw-move=2"]);
    let there = tasks(two, "dxt-sw-move", 2);
    let out = dxdp_ok(two, &["link", &there[0], &there[1]]);
    assert!(out.contains(&format!("in sandbox {sandbox}")), "{out}");
    assert_eq!(sites(two).len(), 1, "{:?}", sites(two));
    two.docker_ok(&["swarm", "leave"]);
    let left = wait_until(TASKS_BOUND, || !two.sandboxes().contains(&sandbox));
    assert!(
        left,
        "{}: the sandbox {sandbox} outlived the swarm",
        two.name
    );
    // Its link reads GONE, with the sandbox, until `unlink` by name takes the pins.
    let gone = status(two);
    assert!(
        gone.links.len() == 1
            && gone.links[0].state.as_deref() == Some("gone")
            && gone.links[0].sandbox.as_deref() == Some(sandbox.as_str()),
        "a gone sandbox's link: {gone:#?}"
    );
    let out = dxdp_ok(two, &["unlink", &there[0], &there[1]]);
    assert!(out.contains("which is gone"), "{out}");
    status(two).assert_empty();
    assert_eq!(sites(two), Vec::<String>::new(), "a gone sandbox's pins");

    // On node 1: a link when the services and the network go.
    manager.docker_ok(&["service", "scale", "--detach", "dxt-sw-stay=2"]);
    let stay = tasks(one, "dxt-sw-stay", 2);
    dxdp_ok(one, &["link", &stay[0], &stay[1]]);
    assert_eq!(sites(one).len(), 1, "{:?}", sites(one));
    manager.docker_ok(&["service", "rm", "dxt-sw-stay", "dxt-sw-move"]);
    remove_network(&nodes, &overlay.name, one, &sandbox);
    let after = status(one);
    assert!(
        after
            .links
            .iter()
            .all(|l| l.state.as_deref() == Some("gone")),
        "live links of a gone sandbox: {after:#?}"
    );
    let stray = dxdp(one, &["unlink", "x", "y"]);
    assert!(!stray.success(), "{stray}");
    assert_eq!(sites(one), Vec::<String>::new(), "a gone sandbox's pins");

    cleanup_each(&nodes);
    stop_and_check(nodes);
    within_bound(began);
}
