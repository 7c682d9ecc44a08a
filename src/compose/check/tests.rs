use super::*;
use crate::compose::{model::Scalar, parse_str};
use crate::labels::DATAPATH;

fn run(yaml: &str) -> Vec<Problem> {
    run_with(yaml, &CheckOptions::default())
}

fn run_with(yaml: &str, options: &CheckOptions) -> Vec<Problem> {
    let file = parse_str(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    check(&file, options)
}

fn lines(problems: &[Problem]) -> Vec<String> {
    problems
        .iter()
        .map(|p| format!("{}: {p}", p.severity))
        .collect()
}

#[track_caller]
fn assert_clean(yaml: &str) {
    let p = run(yaml);
    assert!(p.is_empty(), "{:#?}", lines(&p));
}

/// Exactly one problem, of this severity, containing `needle`.
#[track_caller]
fn assert_one(problems: &[Problem], severity: Severity, needle: &str) -> Problem {
    assert_eq!(problems.len(), 1, "{:#?}", lines(problems));
    let p = &problems[0];
    assert_eq!(p.severity, severity, "{p}");
    assert!(p.to_string().contains(needle), "{p}\nwanted: {needle}");
    p.clone()
}

const PAIR: &str = r#"
services:
  a:
    image: x
    labels: {dxdp.enable: "true", dxdp.group: g}
  b:
    image: x
    labels: ["dxdp.enable=true", "dxdp.group=g"]
"#;

#[test]
fn group_pair_in_both_label_forms_is_clean() {
    assert_clean(PAIR);
}

#[test]
fn model_built_by_hand() {
    use super::super::model::{Label, Labels, Service};
    let svc = |labels: &[(&str, &str)]| Service {
        labels: Some(Labels(
            labels
                .iter()
                .map(|(k, v)| Label {
                    key: (*k).to_owned(),
                    value: Scalar::Text((*v).to_owned()),
                    at: None,
                })
                .collect(),
        )),
        ..Service::default()
    };
    let mut file = ComposeFile {
        services: Some(BTreeMap::from([
            ("a".to_owned(), svc(&[(ENABLE, "true"), (PEERS, "b")])),
            ("b".to_owned(), svc(&[])),
        ])),
        ..ComposeFile::default()
    };
    assert_eq!(check(&file, &CheckOptions::default()), []);
    file.services
        .as_mut()
        .unwrap()
        .insert("b".to_owned(), svc(&[(ENABLE, "false")]));
    let p = check(&file, &CheckOptions::default());
    let p = assert_one(&p, Severity::Warning, "opts out with dxdp.enable=false");
    // Nothing was parsed, so there is no place to name.
    assert_eq!(p.at, None);
}

#[test]
fn yaml_scalars_are_stringified() {
    assert_clean(
        r#"
services:
  a:
    image: x
    labels:
      dxdp.enable: true
      dxdp.peers: b
  b:
    image: x
    labels: {dxdp.enable: True, dxdp.group: 7}
  c:
    image: x
    labels: {dxdp.enable: TRUE, dxdp.group: 7}
"#,
    );
    let p = run("services:\n  a:\n    labels: {dxdp.enable: 1}\n");
    let p = assert_one(&p, Severity::Error, "expected true or false in \"1\"");
    assert_eq!(p.key.as_deref(), Some(ENABLE));
    let p = run("services:\n  a:\n    labels: {dxdp.enable: }\n");
    assert_one(&p, Severity::Error, "expected true or false in \"\"");
}

#[test]
fn label_errors_are_reported_with_service_and_key() {
    let p = run(r#"
services:
  web:
    labels: ["dxdp.enable=true", "dxdp.datapath=fast", "dxdp.enabel=true"]
"#);
    let l = lines(&p);
    assert_eq!(l.len(), 2, "{l:#?}");
    assert_eq!(
        l[0],
        "error: service web: label dxdp.datapath: unknown datapath in \"fast\"; write \
             dxdp.datapath=auto, tc or xdp"
    );
    assert!(
        l[1].starts_with(
            "error: service web: label dxdp.enabel: unknown dxdp label key; valid keys are"
        ),
        "{}",
        l[1]
    );
}

#[test]
fn one_bad_label_does_not_hide_the_others() {
    // The bad datapath would leave the container out of every link at run time; the peer
    // is still worth reporting now rather than after the next fix.
    let p = run(r#"
services:
  web:
    labels: {dxdp.enable: "true", dxdp.datapath: fast, dxdp.peers: nosuch}
"#);
    assert_eq!(p.len(), 2, "{:#?}", lines(&p));
    assert_eq!(p[0].key.as_deref(), Some(DATAPATH));
    assert!(p[1].message.contains("names nosuch"), "{}", p[1]);
}

#[test]
fn bad_enable_still_checks_the_rest_as_if_enabled() {
    let p = run(r#"
services:
  web:
    labels: {dxdp.enable: "on", dxdp.peers: nosuch}
"#);
    assert_eq!(p.len(), 2, "{:#?}", lines(&p));
    assert!(p[0].message.contains("expected true or false"));
    assert!(p[1].message.contains("names nosuch"));
}

#[test]
fn repeated_list_label() {
    let p = run(r#"
services:
  a:
    labels: ["dxdp.enable=true", "dxdp.enable=false"]
"#);
    let p = assert_one(&p, Severity::Error, "given more than once");
    assert_eq!(p.key.as_deref(), Some(ENABLE));
}

#[test]
fn bare_list_label_is_empty() {
    let p = run("services:\n  a:\n    labels: [dxdp.enable]\n");
    assert_one(&p, Severity::Error, "expected true or false in \"\"");
}

#[test]
fn uppercase_prefix_is_warned() {
    let p = run("services:\n  a:\n    labels: [DXDP.enable=true]\n");
    assert_one(&p, Severity::Warning, "write dxdp.enable");
}

#[test]
fn labels_without_enable_are_warnings() {
    let p = run(r#"
services:
  a:
    labels: {dxdp.peers: b, dxdp.group: g}
  b: {}
"#);
    let l = lines(&p);
    assert_eq!(
        l,
        [
            "warning: service a: label dxdp.group: ignored because the service has no \
                 dxdp.enable=true; add dxdp.enable=true to opt in",
            "warning: service a: label dxdp.peers: ignored because the service has no \
                 dxdp.enable=true; add dxdp.enable=true to opt in",
        ]
    );
    let p = run("services:\n  a:\n    labels: {dxdp.enable: \"false\", dxdp.datapath: tc}\n");
    assert_one(&p, Severity::Warning, "opts out with dxdp.enable=false");
    // A lone opt-out is no problem, not even next to network_mode host.
    assert_clean("services:\n  a:\n    network_mode: host\n    labels: {dxdp.enable: \"false\"}\n");
}

#[test]
fn peers_resolve_to_services_and_container_names() {
    assert_clean(
        r#"
services:
  a:
    labels: {dxdp.enable: "true", dxdp.peers: "b, the-c, /b"}
  b: {}
  c:
    container_name: the-c
"#,
    );
}

#[test]
fn unknown_peer_is_error_or_warning() {
    let yaml = "services:\n  a:\n    labels: {dxdp.enable: \"true\", dxdp.peers: ghost}\n";
    let p = run(yaml);
    let p = assert_one(
        &p,
        Severity::Error,
        "label dxdp.peers: names ghost, which is neither a service nor a container_name in this file",
    );
    assert!(p.message.contains("--allow-external"), "{p}");
    let allow = CheckOptions {
        allow_external: true,
        ..CheckOptions::default()
    };
    let p = run_with(yaml, &allow);
    assert_one(
        &p,
        Severity::Warning,
        "linked once a container of that name runs",
    );
}

#[test]
fn peer_on_itself() {
    let p = run("services:\n  a:\n    labels: {dxdp.enable: \"true\", dxdp.peers: a}\n");
    assert_one(&p, Severity::Warning, "which is this service itself");
    // With replicas, naming one's own service links the replicas.
    assert_clean(
        "services:\n  a:\n    scale: 3\n    labels: {dxdp.enable: \"true\", dxdp.peers: a}\n",
    );
    assert_clean(
        "services:\n  a:\n    deploy: {replicas: 2}\n    labels: {dxdp.enable: \"true\", dxdp.peers: a}\n",
    );
}

#[test]
fn single_member_group() {
    let p = run(r#"
services:
  a:
    labels: {dxdp.enable: "true", dxdp.group: "g, h"}
  b:
    labels: {dxdp.enable: "true", dxdp.group: h}
  c:
    labels: {dxdp.group: g}
"#);
    let l = lines(&p);
    assert_eq!(l.len(), 2, "{l:#?}");
    assert!(
        l[0].starts_with("error: service a: label dxdp.group: group g has only service a;"),
        "{}",
        l[0]
    );
    assert!(l[1].starts_with("warning: service c: label dxdp.group: ignored"));
    // Replicas of one service are enough for a group.
    assert_clean(
        "services:\n  a:\n    scale: 2\n    labels: {dxdp.enable: \"true\", dxdp.group: g}\n",
    );
    // A replica count that only `up` knows is given the benefit of the doubt.
    assert_clean(
        "services:\n  a:\n    scale: ${N}\n    labels: {dxdp.enable: \"true\", dxdp.group: g}\n",
    );
    // A fixed container name cannot scale.
    let p = run(
        "services:\n  a:\n    scale: 2\n    container_name: x\n    labels: {dxdp.enable: \"true\", dxdp.group: g}\n",
    );
    assert_one(&p, Severity::Error, "group g has only service a");
}

#[test]
fn network_modes_without_a_veth() {
    for mode in ["host", "none", "service:b", "container:abc"] {
        let yaml = format!(
            "services:\n  a:\n    network_mode: \"{mode}\"\n    labels: {{dxdp.enable: \"true\", dxdp.peers: b}}\n  b: {{}}\n"
        );
        let p = run(&yaml);
        let p = assert_one(&p, Severity::Error, &format!("network_mode {mode}"));
        assert_eq!(p.key, None);
        assert_eq!(p.service.as_deref(), Some("a"));
        assert!(
            p.message
                .ends_with("remove its dxdp labels or attach it to a network")
        );
    }
    // Named as a peer by another service.
    let p = run(r#"
services:
  a:
    labels: {dxdp.enable: "true", dxdp.peers: b}
  b:
    network_mode: host
"#);
    assert_one(
        &p,
        Severity::Error,
        "service a: label dxdp.peers: names b, which dxdp cannot link: network_mode host",
    );
    // The default bridge network is a network like any other.
    assert_clean(
        r#"
services:
  a:
    network_mode: bridge
    labels: {dxdp.enable: "true", dxdp.peers: b}
  b:
    network_mode: bridge
"#,
    );
}

const TWO_NETS: &str = r#"
services:
  frontend:
    networks: [front]
    labels: {dxdp.enable: "true", dxdp.peers: api, dxdp.network: NETWORK}
  api:
    networks:
      front:
      back: {aliases: [api.internal]}
  db:
    networks: [back]
networks:
  front: NAMED
  back:
"#;

fn two_nets(network: &str, named: &str) -> String {
    TWO_NETS.replace("NETWORK", network).replace("NAMED", named)
}

#[test]
fn network_label_with_fixed_name() {
    assert_clean(&two_nets("edge", "{name: edge}"));
    assert_clean(&two_nets("edge", "{external: true, name: edge}"));
    assert_clean(&two_nets("edge", "{external: {name: edge}}"));
    assert_clean(&two_nets("front", "{external: true}"));
}

#[test]
fn network_label_naming_a_prefixed_compose_network() {
    let p = run(&two_nets("front", "{}"));
    assert_one(
        &p,
        Severity::Error,
        "names compose network front, but dxdp.network takes the Docker name, which is PROJECT_front (compose",
    );
    let with_project = CheckOptions {
        project: Some("Shop".to_owned()),
        ..CheckOptions::default()
    };
    let p = run_with(&two_nets("front", "{}"), &with_project);
    assert_one(&p, Severity::Error, "or write dxdp.network=shop_front");
    assert_eq!(run_with(&two_nets("shop_front", "{}"), &with_project), []);
    // The top-level name of the compose specification counts too.
    let named = format!("name: shop\n{}", two_nets("shop_front", "{}"));
    assert_clean(&named);
}

#[test]
fn network_label_naming_the_compose_key_of_a_named_network() {
    let p = run(&two_nets("front", "{name: edge}"));
    assert_one(
        &p,
        Severity::Error,
        "names compose network front, but dxdp.network takes the Docker name, which is edge; \
             write dxdp.network=edge",
    );
}

#[test]
fn network_label_guessing_the_project() {
    let p = run(&two_nets("shop_front", "{}"));
    assert_one(
        &p,
        Severity::Warning,
        "which is network front only when the compose project is named shop",
    );
}

#[test]
fn network_label_naming_a_network_the_service_is_not_on() {
    let p = run(&two_nets("edge", "{}"));
    let p = assert_one(
        &p,
        Severity::Error,
        "names network edge, which service frontend is not on; its networks: front (Docker name PROJECT_front)",
    );
    assert_eq!(p.key.as_deref(), Some(NETWORK));
    // A network the service is not on, even if another service is.
    let p = run(&two_nets("back", "{}").replace("back:\n", "back: {name: back}\n"));
    assert_one(
        &p,
        Severity::Error,
        "names network back, which service frontend is not on",
    );
}

#[test]
fn network_label_the_peer_is_not_on() {
    let p = run(r#"
services:
  api:
    networks: [front, back]
    labels: {dxdp.enable: "true", dxdp.network: back}
  frontend:
    networks: [front]
    labels: {dxdp.enable: "true", dxdp.peers: api}
networks:
  front:
  back: {name: back}
"#);
    assert_one(
        &p,
        Severity::Error,
        "service frontend: label dxdp.peers: no link between frontend and api: frontend is \
             not on network back, which dxdp.network of api names",
    );
}

#[test]
fn conflicting_network_and_datapath() {
    let p = run(r#"
services:
  a:
    networks: [x, y]
    labels: {dxdp.enable: "true", dxdp.group: g, dxdp.network: x, dxdp.datapath: tc}
  b:
    networks: [x, y]
    labels: {dxdp.enable: "true", dxdp.group: g, dxdp.network: y, dxdp.datapath: xdp}
networks:
  x: {name: x}
  y: {name: y}
"#);
    let l = lines(&p);
    assert_eq!(l.len(), 2, "{l:#?}");
    assert!(l[0].contains("a sets dxdp.datapath=tc but b sets dxdp.datapath=xdp"));
    assert!(l[1].contains("a sets dxdp.network=x but b sets dxdp.network=y"));
    assert!(
        l.iter()
            .all(|l| l.starts_with("error: service a: label dxdp.group: no link between a and b"))
    );
}

#[test]
fn no_shared_network() {
    let p = run(r#"
services:
  a:
    networks: [x]
    labels: {dxdp.enable: "true", dxdp.peers: b}
  b:
    networks: [y]
"#);
    assert_one(
        &p,
        Severity::Error,
        "no link between a and b: they share no network",
    );
    // No networks at all means the default network, shared by both.
    assert_clean("services:\n  a:\n    labels: {dxdp.enable: \"true\", dxdp.peers: b}\n  b: {}\n");
    let p = run(
        "services:\n  a:\n    labels: {dxdp.enable: \"true\", dxdp.peers: b}\n  b:\n    networks: [y]\n",
    );
    assert_one(&p, Severity::Error, "they share no network");
}

#[test]
fn unusable_networks() {
    let yaml = |net: &str| {
        format!(
            "services:\n  a:\n    networks: [n]\n    labels: {{dxdp.enable: \"true\", dxdp.peers: b}}\n  b:\n    networks: [n]\nnetworks:\n  n: {net}\n"
        )
    };
    let p = run(&yaml("{driver: macvlan}"));
    assert_one(&p, Severity::Error, "network n has driver macvlan");
    let p = run(&yaml(
        "{driver_opts: {com.docker.network.bridge.enable_icc: \"false\"}}",
    ));
    assert_one(&p, Severity::Error, "enable_icc=false");
    assert_clean(&yaml(
        "{driver: bridge, driver_opts: {com.docker.network.bridge.enable_icc: \"true\"}}",
    ));
    // One usable shared network is enough.
    let two = yaml("{driver: macvlan}")
        .replace("[n]", "[n, m]")
        .replace("networks:\n  n:", "networks:\n  m:\n  n:");
    assert_clean(&two);
}

#[test]
fn interpolated_values_are_not_checked() {
    let p = run(r#"
services:
  a:
    labels: {dxdp.enable: "${ENABLE:-true}", dxdp.group: g, dxdp.network: "$NET"}
  b:
    labels: {dxdp.enable: "true", dxdp.group: g}
"#);
    let l = lines(&p);
    assert_eq!(l.len(), 2, "{l:#?}");
    assert!(l[0].contains("label dxdp.enable: value \"${ENABLE:-true}\" is substituted"));
    assert!(l[1].contains("label dxdp.network: value \"$NET\""));
    // `$$` is a literal dollar, which no dxdp value may hold.
    let p = run("services:\n  a:\n    labels: {dxdp.enable: \"true\", dxdp.network: \"a$$b\"}\n");
    assert_one(&p, Severity::Error, "'$' is not allowed");
}

#[test]
fn hostile_names_stay_on_one_line() {
    let p = run("services:\n  \"a\\nb\":\n    labels: {\"dxdp.x\\ny\": \"1\"}\n");
    assert_eq!(p.len(), 1);
    let line = p[0].to_string();
    assert!(!line.contains('\n'), "{line}");
    assert!(
        line.starts_with("service a\\nb: label dxdp.x\\ny: unknown dxdp label key"),
        "{line}"
    );
}

#[test]
fn output_is_sorted_and_deterministic() {
    let yaml = r#"
services:
  z:
    labels: {dxdp.enable: "true", dxdp.peers: "ghost1,ghost2", dxdp.datapath: bad}
  a:
    labels: {dxdp.enable: "true", dxdp.group: lonely}
"#;
    let p = run(yaml);
    let services: Vec<_> = p.iter().map(|p| p.service.clone().unwrap()).collect();
    assert_eq!(services, ["a", "z", "z", "z"]);
    assert_eq!(p, run(yaml));
}

#[test]
fn normalize_project_like_compose_1() {
    assert_eq!(normalize_project("My Shop.v2"), "myshopv2");
    assert_eq!(normalize_project("a-b_c"), "a-b_c");
}
