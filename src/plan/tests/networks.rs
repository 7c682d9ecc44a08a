//! Which network a pair is linked on, and the containers and networks that cannot carry one.
use super::*;

#[test]
fn stopped_container() {
    let mut b = c("b", &[]);
    b.running = false;
    let p = links_from_labels(&[c("a", &en(&[(PEERS, "b")])), b]);
    assert!(p.links.is_empty());
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);

    let mut a = c("a", &en(&[(PEERS, "b,nowhere"), (GROUP, "g")]));
    a.running = false;
    let p = links_from_labels(&[a, c("b", &[]), c("c", &en(&[(GROUP, "g")]))]);
    assert!(p.links.is_empty());
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
}

#[test]
fn self_link() {
    let p = links_from_labels(&[c("a", &en(&[(PEERS, "a")]))]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Warn, "this container itself");
}

#[test]
fn unknown_peer_is_info() {
    let p = links_from_labels(&[c("a", &en(&[(PEERS, "later")]))]);
    assert!(p.links.is_empty());
    assert_eq!(
            p.diagnostics,
            [Diagnostic {
                container: "a".into(),
                level: Level::Info,
                message: "dxdp.peers names later, which matches no container yet; the link is made once it exists".into(),
            }]
        );
}

#[test]
fn no_shared_network() {
    let p = links_from_labels(&[
        on(c("a", &en(&[(PEERS, "b")])), vec![bridge("n1")]),
        on(c("b", &[]), vec![bridge("n2")]),
    ]);
    assert!(p.links.is_empty());
    assert_diag(
        &p,
        "a",
        Level::Warn,
        "no link between a and b: they share no network",
    );
}

#[test]
fn macvlan_network() {
    let mv = net("lan", "macvlan", true);
    let p = links_from_labels(&[
        on(c("a", &en(&[(PEERS, "b")])), vec![mv.clone()]),
        on(c("b", &[]), vec![mv.clone()]),
    ]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Warn, "network lan has driver macvlan");
    // With a bridge also shared, the bridge is used and the macvlan is not reported.
    let p = links_from_labels(&[
        on(c("a", &en(&[(PEERS, "b")])), vec![mv.clone(), bridge("z")]),
        on(c("b", &[]), vec![bridge("z"), mv]),
    ]);
    assert_eq!(
        p.links.first().map(|l| l.network_id.as_str()),
        Some("nid-z")
    );
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
}

#[test]
fn overlay_networks_are_linked_unless_encrypted() {
    let ov = net("ov", "overlay", true);
    let sealed = NetworkView {
        encrypted: true,
        ..net("sealed", "overlay", true)
    };
    // The watch's planner links a labeled pair on an overlay as on a bridge.
    let p = links_from_labels(&[
        on(c("a", &en(&[(PEERS, "b")])), vec![ov.clone()]),
        on(c("b", &[]), vec![ov.clone()]),
    ]);
    assert_eq!(
        p.links.first().map(|l| l.network_id.as_str()),
        Some("nid-ov")
    );
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
    // `dxdp link` takes the overlay too; an encrypted one neither takes.
    let (a, b) = (on(c("a", &[]), vec![ov.clone()]), on(c("b", &[]), vec![ov]));
    assert_eq!(
        network_for_link(&a, &b).map(|n| n.id.as_str()),
        Ok("nid-ov")
    );
    let (a, b) = (
        on(c("a", &[]), vec![sealed.clone()]),
        on(c("b", &[]), vec![sealed.clone()]),
    );
    let refused = network_for_link(&a, &b).expect_err("encrypted");
    assert!(refused[0].contains("--opt encrypted"), "{refused:?}");
    let p = links_from_labels(&[
        on(c("a", &en(&[(PEERS, "b")])), vec![sealed.clone()]),
        on(c("b", &[]), vec![sealed]),
    ]);
    assert_diag(&p, "a", Level::Warn, "is encrypted (--opt encrypted)");
    // Tasks on the routing mesh and on their own overlay are linked on their own.
    let mesh = NetworkView {
        routing_mesh: true,
        ..net("ingress", "overlay", true)
    };
    let own = net("web", "overlay", true);
    let p = links_from_labels(&[
        on(
            c("a", &en(&[(PEERS, "b")])),
            vec![mesh.clone(), own.clone()],
        ),
        on(c("b", &[]), vec![mesh.clone(), own]),
    ]);
    assert_eq!(
        p.links.first().map(|l| l.network_id.as_str()),
        Some("nid-web")
    );
    let (a, b) = (
        on(c("a", &[]), vec![mesh.clone()]),
        on(c("b", &[]), vec![mesh]),
    );
    let refused = network_for_link(&a, &b).expect_err("the routing mesh");
    assert!(refused[0].contains("routing mesh"), "{refused:?}");
}

#[test]
fn icc_disabled() {
    let closed = net("secure", "bridge", false);
    let p = links_from_labels(&[
        on(c("a", &en(&[(PEERS, "b")])), vec![closed.clone()]),
        on(c("b", &[]), vec![closed]),
    ]);
    assert!(p.links.is_empty());
    assert_diag(
        &p,
        "a",
        Level::Warn,
        "Docker disables inter-container traffic on network secure (com.docker.network.bridge.enable_icc=false); dxdp never opens a path Docker closes",
    );
    // Counted by reason, for the dxdp_refused_pairs metric.
    assert_eq!(p.refused, BTreeMap::from([("icc_disabled", 1)]));
    assert_eq!(p.malformed, 0);
}

#[test]
fn first_qualifying_network_by_name() {
    let nets = vec![
        bridge("zeta"),
        net("alpha", "bridge", false),
        bridge("beta"),
    ];
    let mut rev = nets.clone();
    rev.reverse();
    let p = links_from_labels(&[on(c("a", &en(&[(PEERS, "b")])), nets), on(c("b", &[]), rev)]);
    assert_eq!(p.links.len(), 1);
    assert_eq!(
        p.links.first().map(|l| l.network_id.as_str()),
        Some("nid-beta")
    );
}

#[test]
fn network_label_narrows() {
    let nets = vec![bridge("front"), bridge("back")];
    let p = links_from_labels(&[
        on(
            c("a", &en(&[(PEERS, "b"), (NETWORK, "front")])),
            nets.clone(),
        ),
        on(c("b", &[]), nets.clone()),
    ]);
    assert_eq!(
        p.links.first().map(|l| l.network_id.as_str()),
        Some("nid-front")
    );

    // Set on the named side only, and that side did not opt in: its labels do not count.
    let p = links_from_labels(&[
        on(c("a", &en(&[(PEERS, "b")])), nets.clone()),
        on(c("b", &[(NETWORK, "front")]), nets.clone()),
    ]);
    assert_eq!(
        p.links.first().map(|l| l.network_id.as_str()),
        Some("nid-back")
    );

    // Set on the enabled peer side: it counts.
    let p = links_from_labels(&[
        on(c("a", &en(&[(PEERS, "b")])), nets.clone()),
        on(c("b", &en(&[(NETWORK, "front")])), nets.clone()),
    ]);
    assert_eq!(
        p.links.first().map(|l| l.network_id.as_str()),
        Some("nid-front")
    );

    // Narrowed to a network they do not share.
    let p = links_from_labels(&[
        on(
            c("a", &en(&[(PEERS, "b"), (NETWORK, "front")])),
            vec![bridge("back")],
        ),
        on(c("b", &[]), nets.clone()),
    ]);
    assert!(p.links.is_empty());
    assert_diag(
        &p,
        "a",
        Level::Warn,
        "a is not on network front, which dxdp.network of a names",
    );

    // Narrowed to an unusable network: no fallback to another one.
    let lan = net("lan", "ipvlan", true);
    let p = links_from_labels(&[
        on(
            c("a", &en(&[(PEERS, "b"), (NETWORK, "lan")])),
            vec![lan.clone(), bridge("back")],
        ),
        on(c("b", &[]), vec![lan, bridge("back")]),
    ]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Warn, "network lan has driver ipvlan");
}

#[test]
fn conflicting_networks() {
    let nets = vec![bridge("front"), bridge("back")];
    let p = links_from_labels(&[
        on(
            c("a", &en(&[(PEERS, "b"), (NETWORK, "front")])),
            nets.clone(),
        ),
        on(c("b", &en(&[(NETWORK, "back")])), nets),
    ]);
    assert!(p.links.is_empty());
    assert_diag(
        &p,
        "a",
        Level::Warn,
        "a sets dxdp.network=front but b sets dxdp.network=back",
    );
}

#[test]
fn datapath_resolution() {
    let dp = |x: &str, y: &str| {
        let p = links_from_labels(&[
            c("a", &en(&[(PEERS, "b"), (DATAPATH, x)])),
            c("b", &en(&[(DATAPATH, y)])),
        ]);
        (p.links.first().map(|l| l.datapath), p)
    };
    assert_eq!(dp("auto", "auto").0, Some(Choice::Auto));
    assert_eq!(dp("auto", "tc").0, Some(Choice::Tc));
    assert_eq!(dp("xdp", "auto").0, Some(Choice::Xdp));
    assert_eq!(dp("xdp", "xdp").0, Some(Choice::Xdp));
    let (link, p) = dp("tc", "xdp");
    assert_eq!(link, None);
    assert_diag(
        &p,
        "a",
        Level::Warn,
        "a sets dxdp.datapath=tc but b sets dxdp.datapath=xdp",
    );
}

#[test]
fn duplicate_ids_are_left_out() {
    let mut twin = c("b2", &[]);
    twin.id = "id-b".into();
    let p = links_from_labels(&[c("a", &en(&[(PEERS, "b")])), c("b", &[]), twin]);
    assert!(p.links.is_empty());
    assert_diag(&p, "b", Level::Warn, "appears more than once");
    assert_diag(&p, "b2", Level::Warn, "appears more than once");
}
