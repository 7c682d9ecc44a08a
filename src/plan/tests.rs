//! The links planner over snapshots of labeled containers: who asks for whom, and what a label
//! that does not parse leaves out.
use super::*;
use crate::labels::{DATAPATH, ENABLE, GROUP, NETWORK, PEERS};

mod networks;
mod properties;

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
fn pairs(p: &LinksFromLabels) -> Vec<String> {
    p.links
        .iter()
        .map(|l| format!("{}-{}", &l.a[3..], &l.b[3..]))
        .collect()
}

fn has(p: &LinksFromLabels, container: &str, level: Level, needle: &str) -> bool {
    p.diagnostics
        .iter()
        .any(|d| d.container == container && d.level == level && d.message.contains(needle))
}

#[track_caller]
fn assert_diag(p: &LinksFromLabels, container: &str, level: Level, needle: &str) {
    assert!(
        has(p, container, level, needle),
        "no {level:?} diagnostic on {container} containing {needle:?} in {:#?}",
        p.diagnostics
    );
}

#[test]
fn empty_snapshot() {
    assert_eq!(links_from_labels(&[]), LinksFromLabels::default());
}

#[test]
fn peers_by_name() {
    let p = links_from_labels(&[c("a", &en(&[(PEERS, "/b")])), c("b", &[]), c("x", &[])]);
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
    let p = links_from_labels(&[c("b", &en(&[(PEERS, "a")])), c("a", &[])]);
    assert_eq!(pairs(&p), ["a-b"]);
}

#[test]
fn mutual_peers_give_one_link() {
    let p = links_from_labels(&[c("a", &en(&[(PEERS, "b")])), c("b", &en(&[(PEERS, "a")]))]);
    assert_eq!(pairs(&p), ["a-b"]);
}

#[test]
fn opt_in_missing_asks_for_nothing() {
    let p = links_from_labels(&[c("a", &[(PEERS, "b")]), c("b", &[])]);
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
    let p = links_from_labels(&[
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
    let p = links_from_labels(&[c("a", &en(&[(PEERS, "b,,c")])), c("b", &[]), c("c", &[])]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Warn, "empty peer name");
}

#[test]
fn oversized_value_excludes_container() {
    let big = "b,".repeat(600);
    let p = links_from_labels(&[c("a", &en(&[(PEERS, &big)])), c("b", &[])]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Warn, "oversized");
}

#[test]
fn bad_datapath_excludes_container() {
    let p = links_from_labels(&[
        c("a", &en(&[(PEERS, "b"), (DATAPATH, "fast")])),
        c("b", &[]),
    ]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Warn, "unknown datapath");
}

#[test]
fn malformed_peer_is_never_linked() {
    // b did not opt in, but its broken labels still exclude it, even from a's request.
    let p = links_from_labels(&[c("a", &en(&[(PEERS, "b")])), c("b", &[(DATAPATH, "fast")])]);
    assert!(p.links.is_empty());
    assert_diag(&p, "b", Level::Warn, "unknown datapath");
    assert_diag(&p, "a", Level::Info, "b has malformed dxdp labels");
    assert_eq!(p.malformed, 1);
    assert_eq!(p.refused, BTreeMap::from([("malformed_labels", 1)]));
}

#[test]
fn malformed_group_member_is_left_out() {
    let p = links_from_labels(&[
        c("a", &en(&[(GROUP, "g")])),
        c("b", &en(&[(GROUP, "g")])),
        c("c", &en(&[(GROUP, "g"), (NETWORK, "bad name")])),
    ]);
    assert_eq!(pairs(&p), ["a-b"]);
}

#[test]
fn peers_by_compose_service_within_project() {
    let p = links_from_labels(&[
        compose(c("p1-app-1", &en(&[(PEERS, "db")])), "p1", "app"),
        compose(c("p1-db-1", &[]), "p1", "db"),
        compose(c("p1-db-2", &[]), "p1", "db"),
        compose(c("p2-db-1", &[]), "p2", "db"),
    ]);
    assert_eq!(pairs(&p), ["p1-app-1-p1-db-1", "p1-app-1-p1-db-2"]);
}

#[test]
fn compose_service_not_resolved_across_projects() {
    let p = links_from_labels(&[
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
    let p = links_from_labels(&[
        compose(c("p1-app-1", &en(&[(PEERS, "p2-db-1")])), "p1", "app"),
        compose(c("p2-db-1", &[]), "p2", "db"),
    ]);
    assert_eq!(pairs(&p), ["p1-app-1-p2-db-1"]);
}

#[test]
fn compose_fields_read_from_labels_when_missing() {
    let p = links_from_labels(&[
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
    let p = links_from_labels(&[
        compose(c("w1", &en(&[(PEERS, "web")])), "p", "web"),
        compose(c("w2", &[]), "p", "web"),
        compose(c("w3", &[]), "p", "web"),
    ]);
    assert_eq!(pairs(&p), ["w1-w2", "w1-w3"]);
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
}

#[test]
fn group_mesh_of_four_is_six_links() {
    let p = links_from_labels(&[
        c("a", &en(&[(GROUP, "g")])),
        c("b", &en(&[(GROUP, "g,h")])),
        c("c", &en(&[(GROUP, "g")])),
        c("d", &en(&[(GROUP, "g")])),
    ]);
    assert_eq!(pairs(&p), ["a-b", "a-c", "a-d", "b-c", "b-d", "c-d"]);
}

#[test]
fn groups_scoped_per_project() {
    let p = links_from_labels(&[
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
    let p = links_from_labels(&[c("a", &en(&[(GROUP, "g")])), c("b", &[]), c("c", &[])]);
    assert!(p.links.is_empty());
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
    // Naming it from a container that did not opt in is not enough either.
    let p = links_from_labels(&[c("a", &[(ENABLE, "false"), (PEERS, "b")]), c("b", &[])]);
    assert!(p.links.is_empty());
    let p = links_from_labels(&[c("a", &en(&[(PEERS, "b")])), c("b", &[]), c("c", &[])]);
    assert_eq!(pairs(&p), ["a-b"]);
}

#[test]
fn explicit_enable_false_blocks() {
    let p = links_from_labels(&[c("a", &en(&[(PEERS, "b")])), c("b", &[(ENABLE, "false")])]);
    assert!(p.links.is_empty());
    assert_diag(&p, "a", Level::Info, "b opted out with dxdp.enable=false");
    let p = links_from_labels(&[
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
