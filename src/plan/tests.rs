use super::*;
use crate::labels::{DATAPATH, ENABLE, GROUP, NETWORK, PEERS};
use proptest::prelude::*;

fn net(name: &str, driver: &str, icc: bool) -> NetworkView {
    NetworkView {
        id: format!("nid-{name}"),
        name: name.to_owned(),
        driver: driver.to_owned(),
        icc,
        encrypted: false,
        routing_mesh: false,
    }
}

fn bridge(name: &str) -> NetworkView {
    net(name, "bridge", true)
}

/// Running, on bridge network `n1`, id `id-NAME`.
fn c(name: &str, labels: &[(&str, &str)]) -> ContainerView {
    ContainerView {
        id: format!("id-{name}"),
        name: name.to_owned(),
        running: true,
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        compose_project: None,
        compose_service: None,
        networks: vec![bridge("n1")],
    }
}

fn on(mut view: ContainerView, networks: Vec<NetworkView>) -> ContainerView {
    view.networks = networks;
    view
}

fn compose(mut view: ContainerView, project: &str, service: &str) -> ContainerView {
    view.compose_project = Some(project.to_owned());
    view.compose_service = Some(service.to_owned());
    view
}

fn en<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut l = vec![(ENABLE, "true")];
    l.extend_from_slice(extra);
    l
}

/// Links as sorted "x-y" name pairs (ids minus the `id-` prefix).
fn pairs(p: &Plan) -> Vec<String> {
    p.links
        .iter()
        .map(|l| format!("{}-{}", &l.a[3..], &l.b[3..]))
        .collect()
}

fn has(p: &Plan, container: &str, level: Level, needle: &str) -> bool {
    p.diagnostics
        .iter()
        .any(|d| d.container == container && d.level == level && d.message.contains(needle))
}

#[track_caller]
fn assert_diag(p: &Plan, container: &str, level: Level, needle: &str) {
    assert!(
        has(p, container, level, needle),
        "no {level:?} diagnostic on {container} containing {needle:?} in {:#?}",
        p.diagnostics
    );
}

#[test]
fn empty_snapshot() {
    assert_eq!(plan(&[]), Plan::default());
}

#[test]
fn peers_by_name() {
    let p = plan(&[c("a", &en(&[(PEERS, "/b")])), c("b", &[]), c("x", &[])]);
    assert_eq!(pairs(&p), ["a-b"]);
    let link = p.links.first().cloned();
    assert_eq!(
        link,
        Some(DesiredLink {
            a: "id-a".into(),
            b: "id-b".into(),
            network_id: "nid-n1".into(),
            datapath: Choice::Auto,
        })
    );
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
}

#[test]
fn link_is_normalised_whoever_asks() {
    let p = plan(&[c("b", &en(&[(PEERS, "a")])), c("a", &[])]);
    assert_eq!(pairs(&p), ["a-b"]);
}

#[test]
fn mutual_peers_give_one_link() {
    let p = plan(&[c("a", &en(&[(PEERS, "b")])), c("b", &en(&[(PEERS, "a")]))]);
    assert_eq!(pairs(&p), ["a-b"]);
}

#[test]
fn opt_in_missing_asks_for_nothing() {
    let p = plan(&[c("a", &[(PEERS, "b")]), c("b", &[])]);
    assert!(p.links.is_empty());
    assert_diag(
        &p,
        "a",
        Level::Warn,
        "dxdp.peers ignored because not enabled",
    );
}

#[test]
fn unknown_key_excludes_container() {
    let p = plan(&[
        c("a", &en(&[(PEERS, "b"), ("dxdp.peer", "b")])),
        c("b", &[]),
    ]);
    assert!(p.links.is_empty());
    assert_diag(
        &p,
        "a",
        Level::Warn,
        "dxdp.peer=\"b\": unknown dxdp label key",
    );
    assert_diag(&p, "a", Level::Warn, "left out of every link");
}

#[test]
fn empty_peer_excludes_container() {
    let p = plan(&[c("a", &en(&[(PEERS, "b,,c")])), c("b", &[]), c("c", &[])]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Warn, "empty peer name");
}

#[test]
fn oversized_value_excludes_container() {
    let big = "b,".repeat(600);
    let p = plan(&[c("a", &en(&[(PEERS, &big)])), c("b", &[])]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Warn, "oversized");
}

#[test]
fn bad_datapath_excludes_container() {
    let p = plan(&[
        c("a", &en(&[(PEERS, "b"), (DATAPATH, "fast")])),
        c("b", &[]),
    ]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Warn, "unknown datapath");
}

#[test]
fn malformed_peer_is_never_linked() {
    // b did not opt in, but its broken labels still exclude it, even from a's request.
    let p = plan(&[c("a", &en(&[(PEERS, "b")])), c("b", &[(DATAPATH, "fast")])]);
    assert!(p.links.is_empty());
    assert_diag(&p, "b", Level::Warn, "unknown datapath");
    assert_diag(&p, "a", Level::Info, "b has malformed dxdp labels");
    assert_eq!(p.malformed, 1);
    assert_eq!(p.refused, BTreeMap::from([("malformed_labels", 1)]));
}

#[test]
fn malformed_group_member_is_left_out() {
    let p = plan(&[
        c("a", &en(&[(GROUP, "g")])),
        c("b", &en(&[(GROUP, "g")])),
        c("c", &en(&[(GROUP, "g"), (NETWORK, "bad name")])),
    ]);
    assert_eq!(pairs(&p), ["a-b"]);
}

#[test]
fn peers_by_compose_service_within_project() {
    let p = plan(&[
        compose(c("p1-app-1", &en(&[(PEERS, "db")])), "p1", "app"),
        compose(c("p1-db-1", &[]), "p1", "db"),
        compose(c("p1-db-2", &[]), "p1", "db"),
        compose(c("p2-db-1", &[]), "p2", "db"),
    ]);
    assert_eq!(pairs(&p), ["p1-app-1-p1-db-1", "p1-app-1-p1-db-2"]);
}

#[test]
fn compose_service_not_resolved_across_projects() {
    let p = plan(&[
        compose(c("p1-app-1", &en(&[(PEERS, "db")])), "p1", "app"),
        compose(c("p2-db-1", &[]), "p2", "db"),
    ]);
    assert!(p.links.is_empty());
    assert_diag(
        &p,
        "p1-app-1",
        Level::Info,
        "matches no service of compose project p1 or container yet",
    );
}

#[test]
fn compose_falls_back_to_container_name_in_any_project() {
    let p = plan(&[
        compose(c("p1-app-1", &en(&[(PEERS, "p2-db-1")])), "p1", "app"),
        compose(c("p2-db-1", &[]), "p2", "db"),
    ]);
    assert_eq!(pairs(&p), ["p1-app-1-p2-db-1"]);
}

#[test]
fn compose_fields_read_from_labels_when_missing() {
    let p = plan(&[
        c(
            "x1",
            &en(&[
                (PEERS, "db"),
                (COMPOSE_PROJECT, "p"),
                (COMPOSE_SERVICE, "app"),
            ]),
        ),
        c("x2", &[(COMPOSE_PROJECT, "p"), (COMPOSE_SERVICE, "db")]),
    ]);
    assert_eq!(pairs(&p), ["x1-x2"]);
}

#[test]
fn own_service_links_other_replicas() {
    let p = plan(&[
        compose(c("w1", &en(&[(PEERS, "web")])), "p", "web"),
        compose(c("w2", &[]), "p", "web"),
        compose(c("w3", &[]), "p", "web"),
    ]);
    assert_eq!(pairs(&p), ["w1-w2", "w1-w3"]);
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
}

#[test]
fn group_mesh_of_four_is_six_links() {
    let p = plan(&[
        c("a", &en(&[(GROUP, "g")])),
        c("b", &en(&[(GROUP, "g,h")])),
        c("c", &en(&[(GROUP, "g")])),
        c("d", &en(&[(GROUP, "g")])),
    ]);
    assert_eq!(pairs(&p), ["a-b", "a-c", "a-d", "b-c", "b-d", "c-d"]);
}

#[test]
fn groups_scoped_per_project() {
    let p = plan(&[
        compose(c("a1", &en(&[(GROUP, "web")])), "a", "s1"),
        compose(c("a2", &en(&[(GROUP, "web")])), "a", "s2"),
        compose(c("b1", &en(&[(GROUP, "web")])), "b", "s1"),
        compose(c("b2", &en(&[(GROUP, "web")])), "b", "s2"),
        c("g1", &en(&[(GROUP, "web")])),
        c("g2", &en(&[(GROUP, "web")])),
    ]);
    assert_eq!(pairs(&p), ["a1-a2", "b1-b2", "g1-g2"]);
}

#[test]
fn unlabeled_container_linked_only_when_named() {
    let p = plan(&[c("a", &en(&[(GROUP, "g")])), c("b", &[]), c("c", &[])]);
    assert!(p.links.is_empty());
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
    // Naming it from a container that did not opt in is not enough either.
    let p = plan(&[c("a", &[(ENABLE, "false"), (PEERS, "b")]), c("b", &[])]);
    assert!(p.links.is_empty());
    let p = plan(&[c("a", &en(&[(PEERS, "b")])), c("b", &[]), c("c", &[])]);
    assert_eq!(pairs(&p), ["a-b"]);
}

#[test]
fn explicit_enable_false_blocks() {
    let p = plan(&[c("a", &en(&[(PEERS, "b")])), c("b", &[(ENABLE, "false")])]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Info, "b opted out with dxdp.enable=false");
    let p = plan(&[
        c("a", &en(&[(PEERS, "b")])),
        c("b", &[(ENABLE, "false"), (PEERS, "a")]),
    ]);
    assert!(p.links.is_empty());
    assert_diag(
        &p,
        "b",
        Level::Info,
        "dxdp.peers ignored because not enabled",
    );
}

#[test]
fn stopped_container() {
    let mut b = c("b", &[]);
    b.running = false;
    let p = plan(&[c("a", &en(&[(PEERS, "b")])), b]);
    assert!(p.links.is_empty());
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);

    let mut a = c("a", &en(&[(PEERS, "b,nowhere"), (GROUP, "g")]));
    a.running = false;
    let p = plan(&[a, c("b", &[]), c("c", &en(&[(GROUP, "g")]))]);
    assert!(p.links.is_empty());
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
}

#[test]
fn self_link() {
    let p = plan(&[c("a", &en(&[(PEERS, "a")]))]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Warn, "this container itself");
}

#[test]
fn unknown_peer_is_info() {
    let p = plan(&[c("a", &en(&[(PEERS, "later")]))]);
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
    let p = plan(&[
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
    let p = plan(&[
        on(c("a", &en(&[(PEERS, "b")])), vec![mv.clone()]),
        on(c("b", &[]), vec![mv.clone()]),
    ]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Warn, "network lan has driver macvlan");
    // With a bridge also shared, the bridge is used and the macvlan is not reported.
    let p = plan(&[
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
    let p = plan(&[
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
    let p = plan(&[
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
    let p = plan(&[
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
    let p = plan(&[
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
    let p = plan(&[on(c("a", &en(&[(PEERS, "b")])), nets), on(c("b", &[]), rev)]);
    assert_eq!(p.links.len(), 1);
    assert_eq!(
        p.links.first().map(|l| l.network_id.as_str()),
        Some("nid-beta")
    );
}

#[test]
fn network_label_narrows() {
    let nets = vec![bridge("front"), bridge("back")];
    let p = plan(&[
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
    let p = plan(&[
        on(c("a", &en(&[(PEERS, "b")])), nets.clone()),
        on(c("b", &[(NETWORK, "front")]), nets.clone()),
    ]);
    assert_eq!(
        p.links.first().map(|l| l.network_id.as_str()),
        Some("nid-back")
    );

    // Set on the enabled peer side: it counts.
    let p = plan(&[
        on(c("a", &en(&[(PEERS, "b")])), nets.clone()),
        on(c("b", &en(&[(NETWORK, "front")])), nets.clone()),
    ]);
    assert_eq!(
        p.links.first().map(|l| l.network_id.as_str()),
        Some("nid-front")
    );

    // Narrowed to a network they do not share.
    let p = plan(&[
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
    let p = plan(&[
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
    let p = plan(&[
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
        let p = plan(&[
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
    let p = plan(&[c("a", &en(&[(PEERS, "b")])), c("b", &[]), twin]);
    assert!(p.links.is_empty());
    assert_diag(&p, "b", Level::Warn, "appears more than once");
    assert_diag(&p, "b2", Level::Warn, "appears more than once");
}

#[test]
fn order_independence_reversed() {
    let mut input = vec![
        compose(
            c("a1", &en(&[(GROUP, "web"), (PEERS, "db,ghost")])),
            "a",
            "web",
        ),
        compose(c("a2", &en(&[(GROUP, "web")])), "a", "web"),
        compose(c("adb", &[]), "a", "db"),
        c("x", &en(&[(PEERS, "y"), (DATAPATH, "tc")])),
        c("y", &en(&[(PEERS, "x"), (DATAPATH, "xdp")])),
        on(
            c("z", &en(&[(PEERS, "x")])),
            vec![bridge("n1"), bridge("n0")],
        ),
    ];
    let forward = plan(&input);
    input.reverse();
    assert_eq!(plan(&input), forward);
    assert_eq!(pairs(&forward), ["a1-a2", "a1-adb", "x-z"]);
}

fn arb_container(i: usize) -> impl Strategy<Value = ContainerView> {
    let names: Vec<String> = (0..8).map(|k| format!("c{k}")).collect();
    let pools = [
        bridge("n1"),
        bridge("n2"),
        net("n3", "bridge", false),
        net("n4", "macvlan", true),
    ];
    (
        prop::option::of(prop::sample::select(vec!["true", "false", "nope"])),
        prop::sample::subsequence(names, 0..3),
        prop::sample::subsequence(vec!["g", "h"], 0..=2),
        prop::sample::select(vec![None, Some("tc"), Some("xdp"), Some("auto")]),
        prop::option::weighted(0.2, prop::sample::select(vec!["n1", "n2"])),
        prop::option::of((
            prop::sample::select(vec!["p", "q"]),
            prop::sample::select(vec!["s", "t"]),
        )),
        prop::sample::subsequence(pools.to_vec(), 0..=4),
        prop::bool::weighted(0.85),
    )
        .prop_map(
            move |(enable, peers, groups, dp, network, proj, nets, running)| {
                let mut l: Vec<(&str, String)> = Vec::new();
                if let Some(e) = enable {
                    l.push((ENABLE, e.to_owned()));
                }
                if !peers.is_empty() {
                    l.push((PEERS, peers.join(",")));
                }
                if !groups.is_empty() {
                    l.push((GROUP, groups.join(",")));
                }
                if let Some(d) = dp {
                    l.push((DATAPATH, d.to_owned()));
                }
                if let Some(n) = network {
                    l.push((NETWORK, n.to_owned()));
                }
                let pairs: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let mut view = on(c(&format!("c{i}"), &pairs), nets);
                view.running = running;
                if let Some((p, s)) = proj {
                    view = compose(view, p, s);
                }
                view
            },
        )
}

fn arb_snapshot() -> impl Strategy<Value = Vec<ContainerView>> {
    (1usize..=8).prop_flat_map(|n| (0..n).map(arb_container).collect::<Vec<_>>())
}

proptest! {
    #[test]
    fn order_independence_shuffled(
        (input, shuffled) in arb_snapshot()
            .prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle()))
    ) {
        let expected = plan(&input);
        prop_assert_eq!(plan(&shuffled), expected.clone());
        for l in &expected.links {
            prop_assert!(l.a < l.b);
        }
    }
}
