//! Where each problem points ([`Problem::at`]): the label as written, else the service's name.
use super::*;
use crate::compose::{LoadError, parse_str};

/// `(service, key, line, column)` of every problem of `yaml`, in the checker's order.
fn places(yaml: &str) -> Vec<(String, Option<String>, u64, u64)> {
    let file = parse_str(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    check(&file, &CheckOptions::default())
        .into_iter()
        .map(|p| {
            let at = p.at.unwrap_or_else(|| panic!("no place for {p}"));
            assert_eq!(at.source, 0, "{p}");
            (p.service.unwrap(), p.key, at.line, at.column)
        })
        .collect()
}

fn place(
    service: &str,
    key: Option<&str>,
    line: u64,
    column: u64,
) -> (String, Option<String>, u64, u64) {
    (service.to_owned(), key.map(str::to_owned), line, column)
}

#[test]
fn a_label_in_map_form_points_at_its_key() {
    let yaml = "\
services:
  web:
    image: x
    labels:
      dxdp.enable: \"true\"
      dxdp.datapath: fast
  db: {labels: {dxdp.enable: \"true\", \"dxdp.peers\": nosuch}}
";
    assert_eq!(
        places(yaml),
        [
            place("db", Some("dxdp.peers"), 7, 38),
            place("web", Some("dxdp.datapath"), 6, 7),
        ]
    );
}

#[test]
fn a_label_in_list_form_points_at_its_item_and_a_repeat_at_the_last_one() {
    let yaml = "\
services:
  web:
    labels:
      - dxdp.enable=true
      - dxdp.datapath=tc
      - dxdp.datapath=xdp
  db:
    labels: [\"dxdp.enable=true\", \"dxdp.group=g\"]
";
    assert_eq!(
        places(yaml),
        [
            place("db", Some("dxdp.group"), 8, 34),
            place("web", Some("dxdp.datapath"), 6, 9),
        ]
    );
}

#[test]
fn a_problem_of_the_service_points_at_its_name() {
    let yaml = "\
services:
  a:
    labels: {dxdp.enable: \"true\", dxdp.peers: b}
  # a comment line
  probe:
    network_mode: host
    labels: {dxdp.enable: \"true\"}
  b: {}
";
    assert_eq!(places(yaml), [place("probe", None, 5, 3)]);
}

#[test]
fn a_pair_problem_points_at_the_label_that_asks_for_the_pair() {
    let yaml = "\
services:
  web:
    networks: [front]
    labels:
      dxdp.enable: \"true\"
      dxdp.peers: db
  db:
    networks: [back]
networks: {front: {}, back: {}}
";
    assert_eq!(places(yaml), [place("web", Some("dxdp.peers"), 6, 7)]);
}

#[test]
fn labels_from_an_anchor_point_where_each_service_uses_it() {
    // One bad value shared by two services: each problem names its own service's `<<:` line,
    // which tells them apart (the anchor's line would be the same for both).
    let yaml = "\
x-dxdp: &dxdp {dxdp.enable: \"true\", dxdp.datapath: fast}
services:
  a:
    labels:
      <<: *dxdp
  b:
    labels:
      dxdp.firewall: enforce
      <<: *dxdp
";
    let found = places(yaml);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!((found[0].0.as_str(), found[0].2), ("a", 5));
    assert_eq!((found[1].0.as_str(), found[1].2), ("b", 9));
}

#[test]
fn a_file_that_is_not_yaml_carries_where_the_parser_stopped() {
    let e = parse_str("services:\n  a:\n    labels: [unclosed\n  b: {}\n").unwrap_err();
    assert!(matches!(e, LoadError::Yaml(_)), "{e}");
    let at = e.at().expect("a place");
    assert!(at.line >= 3, "{at:?}: {e}");
    assert_eq!(LoadError::NoServices.at(), None);
}
