//! The watch links across nodes (issue 35): `dxdp watch` on each node links its task of a
//! labeled service to the service's task on the other node, its own half, as `dxdp link` does by
//! hand (multinode::across); frames between them skip the overlay's bridge on both nodes; when
//! the far task goes (gossip drops it, which makes no event on the near node, a worker) the near
//! node's watch takes its half away within seconds, long before its resync.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use super::{
    across::{handed, mac, pinned_on_tunnel, tunnel_pins},
    links::{CARRIED, PIN_DIR, cleanup_each, dxdp, iperf, status, tasks, within_bound},
    overlay_comes_up, pings_within, stop_and_check,
};
use crate::support::{
    DXDP, IMAGE, LinkStatus, SwarmNode, SwarmNodes, link_between, require_swarm_nodes, wait_until,
};

/// The watches' resync: far longer than the test waits for a far task's half to go, so that
/// what takes it away is the watch following the tasks of other nodes, not the resync.
const RESYNC: &str = "120";
/// How long the near node's watch may take to remove a half once the far task went.
const GONE_WITHIN: Duration = Duration::from_secs(15);

/// `dxdp watch` inside a node, killed on drop; its log kept in a file for failure messages.
struct NodeWatch {
    child: Child,
    log: PathBuf,
    node: String,
}

impl NodeWatch {
    fn start(node: &SwarmNode) -> Self {
        let log = std::env::temp_dir().join(format!(
            "dxdp-node-watch-{}-{}.log",
            std::process::id(),
            node.name
        ));
        let file = std::fs::File::create(&log).expect("watch log");
        let pid = node.pid().to_string();
        let child = Command::new("nsenter")
            .args([
                "-t",
                &pid,
                "-n",
                "-m",
                "-u",
                "--",
                DXDP,
                "--pin-dir",
                PIN_DIR,
            ])
            .args(["watch", "--resync", RESYNC])
            .env("DXDP_LOG", "dxdp=debug")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("spawn dxdp watch in a node");
        Self {
            child,
            log,
            node: node.name.clone(),
        }
    }

    fn log_text(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(60).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!("--- watch on {} ---\n{}", self.node, tail.join("\n"))
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The watch's link between `a` and `b` on `node`, live, with the far end `far` named as the
/// VXLAN device it is reached through.
fn watch_link(node: &SwarmNode, near: &str, far: &str) -> Option<LinkStatus> {
    let now = status(node);
    let l = link_between(&now, near, far)?.clone();
    let far_ifname = if l.low_name == far {
        l.low_ifname.as_deref()
    } else {
        l.high_ifname.as_deref()
    };
    (l.origin == "watch"
        && l.state.as_deref() == Some("live")
        && l.datapath == "tc"
        && far_ifname == Some("vxlan0"))
    .then_some(l)
}

/// The sandbox veth of `name` in a link.
fn veth_of(l: &LinkStatus, name: &str) -> String {
    if l.low_name == name {
        l.low_ifname.clone()
    } else {
        l.high_ifname.clone()
    }
    .expect("the near end's veth")
}

#[test]
fn the_watch_links_a_labeled_services_tasks_across_nodes_and_drops_the_half_when_one_goes() {
    if !require_swarm_nodes() {
        return;
    }
    let nodes = SwarmNodes::start(2);
    let began = Instant::now();
    nodes.load_image(IMAGE);
    let overlay = nodes.overlay("dxt-sw-ov", "10.240.209.0/24");
    let (one, two, manager) = (nodes.node(1), nodes.node(2), nodes.manager());
    // One task per node. Container labels: a worker cannot read a service's own labels.
    manager.docker_ok(&[
        "service",
        "create",
        "--detach",
        "--no-resolve-image",
        "--endpoint-mode",
        "dnsrr",
        "--stop-grace-period",
        "1s",
        "--mode",
        "global",
        "--container-label",
        "dxdp.enable=true",
        "--container-label",
        "dxdp.group=dxt-sw-all",
        "--network",
        &overlay.name,
        "--name",
        "dxt-sw-all",
        IMAGE,
        "sleep",
        "600",
    ]);
    let a = tasks(one, "dxt-sw-all", 1).remove(0);
    let b = tasks(two, "dxt-sw-all", 1).remove(0);
    let (a, b) = (&a, &b);
    let (ip_a, ip_b) = (one.ip(a, &overlay.name), two.ip(b, &overlay.name));
    let mac_b = mac(two, b, &overlay.name);
    let mac_a_was = mac(one, a, &overlay.name);
    let sandbox = overlay.sandbox();
    overlay_comes_up(one, a, &ip_b);
    overlay_comes_up(two, b, &ip_a);

    let mut watches = [NodeWatch::start(one), NodeWatch::start(two)];
    let logs = |w: &[NodeWatch]| {
        w.iter()
            .map(NodeWatch::log_text)
            .collect::<Vec<_>>()
            .join("\n")
    };
    // Each node's watch links its own task to the other node's.
    let linked = Instant::now();
    for (node, near, far) in [(one, a, b), (two, b, a)] {
        let made = wait_until(Duration::from_secs(30), || {
            watch_link(node, near, far).is_some()
        });
        assert!(
            made,
            "{}: no watch link {near} <-> {far} (vxlan0) within 30 s: {:#?}\n{}",
            node.name,
            status(node),
            logs(&watches)
        );
        assert_eq!(tunnel_pins(node).len(), 1, "{}", node.name);
    }
    eprintln!(
        "both halves linked by the watches in {:?}",
        linked.elapsed()
    );
    // top names the far end as the VXLAN device it is reached through, in the sandbox.
    let top = dxdp(one, &["top", "--once"]);
    top.assert_success();
    assert!(
        top.stdout.contains(&format!("vxlan0 ({sandbox})")),
        "top does not name the far end: {top}"
    );
    assert!(pinned_on_tunnel(one, &sandbox, &mac_b));
    assert!(pinned_on_tunnel(two, &sandbox, &mac_a_was));

    // Frames between the pair skip br0 on both nodes: neither bridge hands its task the bulk.
    let veth_a = veth_of(&watch_link(one, a, b).expect("node 1's half"), a);
    let veth_b = veth_of(&watch_link(two, b, a).expect("node 2's half"), b);
    let before = (
        handed(one, &sandbox, &veth_a),
        handed(two, &sandbox, &veth_b),
    );
    pings_within(one, a, &ip_b);
    iperf(one, a, two, b, &ip_b, "5206");
    iperf(two, b, one, a, &ip_a, "5207");
    let after = (
        handed(one, &sandbox, &veth_a),
        handed(two, &sandbox, &veth_b),
    );
    let (by_one, by_two) = (after.0 - before.0, after.1 - before.1);
    eprintln!("during the bulk, node 1's br0 handed a {by_one} frames, node 2's handed b {by_two}");
    assert!(
        by_one < 20 && by_two < 20,
        "the bridges handed a {by_one} and b {by_two} frames during the bulk: the watch's \
         links did not skip them"
    );
    for (node, near, far) in [(one, a, b), (two, b, a)] {
        let l = watch_link(node, near, far).expect("the half");
        eprintln!(
            "{}: the half carried {} B / {} B",
            node.name, l.low_to_high.bytes, l.high_to_low.bytes
        );
        assert!(
            l.low_to_high.bytes > CARRIED && l.high_to_low.bytes > CARRIED,
            "{}: the half carried too little each way: {l:#?}",
            node.name
        );
    }

    // The far task goes (the service leaves node 1): node 1's watch sees its own task die;
    // node 2, a worker, gets no event at all (no container of its own changed, and a worker
    // hears of no service), only gossip dropping a: both halves go within seconds.
    let constraint = format!("node.hostname=={}", two.name);
    manager.docker_ok(&[
        "service",
        "update",
        "--detach",
        "--constraint-add",
        &constraint,
        "dxt-sw-all",
    ]);
    assert!(tasks(one, "dxt-sw-all", 0).is_empty());
    let went = Instant::now();
    let dropped = wait_until(GONE_WITHIN, || {
        link_between(&status(two), b, a).is_none() && status(one).links.is_empty()
    });
    assert!(
        dropped,
        "a half outlived the far task by {GONE_WITHIN:?}: node 1 {:#?}, node 2 {:#?}\n{}",
        status(one),
        status(two),
        logs(&watches)
    );
    eprintln!(
        "both halves gone {:?} after node 1's task was",
        went.elapsed()
    );
    let mac_a = mac_a_was;
    assert!(!pinned_on_tunnel(two, &sandbox, &mac_a));
    assert!(tunnel_pins(two).is_empty(), "{:?}", tunnel_pins(two));
    // b is the same task as before, and still reaches the overlay.
    assert_eq!(tasks(two, "dxt-sw-all", 1), vec![b.clone()]);
    for w in &mut watches {
        assert!(w.alive(), "a watch died:\n{}", w.log_text());
    }
    let worker = std::fs::read_to_string(&watches[1].log).unwrap_or_default();
    for line in worker
        .lines()
        .filter(|l| l.contains("tasks of other nodes changed") || l.contains("link removed"))
    {
        eprintln!("node 2's watch: {line}");
    }

    drop(watches);
    manager.docker_ok(&["service", "rm", "dxt-sw-all"]);
    cleanup_each(&nodes);
    stop_and_check(nodes);
    within_bound(began);
}
