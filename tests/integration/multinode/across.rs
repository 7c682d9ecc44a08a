//! A link between tasks of two nodes (issue 35, "cross-node: skip br0 on both sides"): each
//! node links its own task to the other node's, and a frame between them skips the overlay's
//! bridge on both: out of the task's veth straight to the VXLAN device, in from the VXLAN device
//! straight into the task. Bulk and pings ride it both ways; the far node's bridge hands the
//! near task none of them; a bystander of the near node still reaches the far task through the
//! bridge; unlinking, and the far task going, leave nothing behind.

use std::time::Instant;

use super::{
    links::{
        CARRIED, PIN_DIR, cleanup_each, dxdp, dxdp_ok, iperf, link, sandbox_iptables, status,
        two_near_one_far, within_bound,
    },
    overlay_comes_up, pings_within, stop_and_check,
};
use crate::support::{SwarmNode, SwarmNodes, link_between, require_swarm_nodes, wait_until};

/// The MAC of `container` on `network`, as its node's dockerd reports it.
#[track_caller]
pub(super) fn mac(node: &SwarmNode, container: &str, network: &str) -> String {
    let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").MacAddress}}}}");
    node.docker_ok(&["inspect", "-f", &format, container])
        .trim()
        .to_owned()
}

/// The frames the sandbox veth `veth` has handed its task (its transmit counter).
#[track_caller]
pub(super) fn handed(node: &SwarmNode, sandbox: &str, veth: &str) -> u64 {
    // sysfs shows the namespace it was mounted in: the counter is read through rtnetlink.
    let run = node.in_sandbox(sandbox, &["ip", "-s", "-j", "link", "show", "dev", veth]);
    run.assert_success();
    let parsed: serde_json::Value = serde_json::from_str(&run.stdout).expect("ip -j");
    parsed[0]["stats64"]["tx"]["packets"]
        .as_u64()
        .unwrap_or_else(|| panic!("no tx counter for {veth}: {run}"))
}

/// Whether the overlay's bridge on `node` holds `mac` as a static entry on the VXLAN port.
#[track_caller]
pub(super) fn pinned_on_tunnel(node: &SwarmNode, sandbox: &str, mac: &str) -> bool {
    let run = node.in_sandbox(sandbox, &["bridge", "fdb", "show", "br", "br0"]);
    run.assert_success();
    run.stdout
        .lines()
        .any(|l| l.starts_with(mac) && l.contains("dev vxlan0") && l.contains(" static"))
}

/// The tunnel program's attachments pinned on `node` (`tunnel-IFINDEX` under each sandbox's
/// pin directory).
#[track_caller]
pub(super) fn tunnel_pins(node: &SwarmNode) -> Vec<String> {
    let script = format!("ls {PIN_DIR}/overlay/*/links 2>/dev/null | grep '^tunnel-' || true");
    node.exec_ok(&["sh", "-c", &script])
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_link_across_nodes_skips_the_overlay_bridge_on_both_nodes() {
    if !require_swarm_nodes() {
        return;
    }
    let nodes = SwarmNodes::start(2);
    let began = Instant::now();
    let (overlay, near, b) = two_near_one_far(&nodes, "10.240.207.0/24");
    let (one, two, manager) = (nodes.node(1), nodes.node(2), nodes.manager());
    let (a, bystander, b) = (&near[0], &near[1], &b);
    let (ip_a, ip_b) = (one.ip(a, &overlay.name), two.ip(b, &overlay.name));
    let mac_b = mac(two, b, &overlay.name);
    let sandbox = overlay.sandbox();
    overlay_comes_up(one, a, &ip_b);
    overlay_comes_up(two, b, &ip_a);

    // The xdp datapath cannot leave through a VXLAN device: refused in one line, nothing made.
    let refused = dxdp(one, &["link", a, b, "--datapath", "xdp"]);
    assert!(
        !refused.success()
            && refused.stderr.contains("runs on another node")
            && refused.stderr.contains("--datapath tc"),
        "{refused}"
    );
    assert!(tunnel_pins(one).is_empty(), "{:?}", tunnel_pins(one));

    // A rule in node 1's sandbox on what b sends a (b's frames enter br0 through the VXLAN
    // device): no link, the rule named in one line.
    let rule = [
        "FORWARD", "-i", "br0", "-s", &ip_b, "-d", &ip_a, "-j", "DROP",
    ];
    let iptables = |op: &str| sandbox_iptables(one, &sandbox, op, &rule);
    iptables("-I");
    let refused = dxdp(one, &["link", a, b]);
    assert!(
        !refused.success() && refused.stderr.contains("-j DROP") && refused.stderr.contains(&ip_b),
        "a link across nodes past a rule in the sandbox: {refused}"
    );
    assert_eq!(refused.stderr.trim().lines().count(), 1, "{refused}");
    status(one).assert_empty();
    iptables("-D");

    // Each node links its own task to the other node's.
    for (node, near, far) in [(one, a, b), (two, b, a)] {
        let out = dxdp_ok(node, &["link", near, far]);
        assert!(
            out.contains("(vxlan0)") && out.contains(&format!("in sandbox {sandbox}")),
            "{}: {out}",
            node.name
        );
        let l = link(node, near, far);
        let far_ifname = if l.low_name == *far {
            &l.low_ifname
        } else {
            &l.high_ifname
        };
        assert_eq!(
            (
                l.state.as_deref(),
                far_ifname.as_deref(),
                l.datapath.as_str()
            ),
            (Some("live"), Some("vxlan0"), "tc"),
            "{}: {l:#?}",
            node.name
        );
        assert_eq!(tunnel_pins(node).len(), 1, "{}", node.name);
    }
    // doctor finds both halves sound: the far end's attachment is the tunnel program on the
    // VXLAN device, no warning names it.
    let doctor = dxdp(one, &["doctor"]);
    assert!(
        doctor
            .stdout
            .contains(&format!("[ ok ] overlay sandbox {sandbox}"))
            && !doctor
                .stdout
                .lines()
                .any(|l| (l.starts_with("[warn]") || l.starts_with("[FAIL]"))
                    && l.contains(b.as_str())),
        "doctor on a link across nodes: {doctor}"
    );
    // Node 1's bridge keeps sending frames for b to the VXLAN port, though none of b's frames
    // cross it any more to refresh what it learned (a bystander's would be flooded).
    assert!(pinned_on_tunnel(one, &sandbox, &mac_b));

    // b's veth in node 2's sandbox: what the bridge hands b goes through it.
    let here = link(two, b, a);
    let veth_b = if here.low_name == *b {
        here.low_ifname.clone()
    } else {
        here.high_ifname.clone()
    }
    .expect("b's veth");
    let handed_before = handed(two, &sandbox, &veth_b);
    pings_within(one, a, &ip_b);
    iperf(one, a, two, b, &ip_b, "5204");
    iperf(two, b, one, a, &ip_a, "5205");
    let handed_after = handed(two, &sandbox, &veth_b);
    assert!(
        handed_after - handed_before < 20,
        "node 2's bridge handed b {} frames during the bulk: the link did not skip it",
        handed_after - handed_before
    );
    for (node, near, far) in [(one, a, b), (two, b, a)] {
        let l = link(node, near, far);
        assert!(
            l.low_to_high.bytes > CARRIED && l.high_to_low.bytes > CARRIED,
            "{}: the link carried too little each way: {l:#?}",
            node.name
        );
    }

    // A task of node 1 that is not linked reaches b through the bridge, as before.
    let before = link(one, a, b);
    pings_within(one, bystander, &ip_b);
    let after = link(one, a, b);
    assert!(
        after.low_to_high.packets - before.low_to_high.packets < 5
            && after.high_to_low.packets - before.high_to_low.packets < 5,
        "the bystander's pings rode the link: {before:#?} -> {after:#?}"
    );

    // Unlinking takes the bridge entry and the tunnel's program with it; the bridge carries on.
    dxdp_ok(one, &["unlink", a, b]);
    dxdp_ok(two, &["unlink", b, a]);
    for node in [one, two] {
        status(node).assert_empty();
        assert!(tunnel_pins(node).is_empty(), "{}", node.name);
    }
    assert!(!pinned_on_tunnel(one, &sandbox, &mac_b));
    pings_within(one, a, &ip_b);

    // The far task goes: node 1's next sweep (any `dxdp link` there) takes the link to it,
    // once gossip took b's entry off the VXLAN device.
    dxdp_ok(one, &["link", a, b]);
    manager.docker_ok(&["service", "rm", "dxt-sw-far"]);
    let forgotten = wait_until(std::time::Duration::from_secs(30), || {
        let run = one.in_sandbox(&sandbox, &["ip", "neigh", "show", &ip_b]);
        run.success() && run.stdout.trim().is_empty()
    });
    assert!(forgotten, "node 1 still has a neighbour entry for {ip_b}");
    dxdp_ok(one, &["link", a, bystander]);
    let swept = status(one);
    assert!(link_between(&swept, a, b).is_none(), "{swept:#?}");
    assert!(link_between(&swept, a, bystander).is_some(), "{swept:#?}");
    assert!(!pinned_on_tunnel(one, &sandbox, &mac_b));
    assert!(tunnel_pins(one).is_empty(), "{:?}", tunnel_pins(one));

    cleanup_each(&nodes);
    stop_and_check(nodes);
    within_bound(began);
}
