//! Several compose files as one project, the way `docker compose -f a.yml -f b.yml` merges
//! them, for the parts dxdp reads: a later file adds services, labels and networks and replaces
//! single values (`network_mode`, `container_name`, `scale`, `deploy.replicas`, a network's
//! `name`, `external` and `driver`). Each place ([`At`]) keeps the index of the file it came
//! from, so a problem names the file that wrote the label, or that first defined the service.

use std::collections::BTreeMap;

use super::model::{ComposeFile, Labels, NetworkDef, Service};

/// `files` in command-line order; positions in file `i` get source `i`.
pub(crate) fn merge(files: Vec<ComposeFile>) -> ComposeFile {
    let mut merged = ComposeFile::default();
    for (source, mut file) in files.into_iter().enumerate() {
        set_source(&mut file, source);
        merge_into(&mut merged, file);
    }
    merged
}

fn set_source(file: &mut ComposeFile, source: usize) {
    for svc in file.services.iter_mut().flat_map(BTreeMap::values_mut) {
        for at in svc.at.iter_mut() {
            at.source = source;
        }
        for label in svc.labels.iter_mut().flat_map(|l| l.0.iter_mut()) {
            for at in label.at.iter_mut() {
                at.source = source;
            }
        }
    }
}

fn merge_into(base: &mut ComposeFile, over: ComposeFile) {
    base.name = over.name.or(base.name.take());
    if let Some(services) = over.services {
        let into = base.services.get_or_insert_with(BTreeMap::new);
        for (name, svc) in services {
            match into.get_mut(&name) {
                Some(old) => merge_service(old, svc),
                None => {
                    into.insert(name, svc);
                }
            }
        }
    }
    if let Some(networks) = over.networks {
        let into = base.networks.get_or_insert_with(BTreeMap::new);
        for (key, def) in networks {
            let old = into.entry(key).or_default();
            // `front:` with no body adds nothing to an earlier definition.
            if let Some(def) = def {
                merge_network(old.get_or_insert_with(NetworkDef::default), def);
            }
        }
    }
}

fn merge_service(base: &mut Service, over: Service) {
    if let Some(labels) = over.labels {
        // A key the later file sets replaces every earlier entry of it, so that only a repeat
        // within one file's list reads as "given more than once".
        let old = base.labels.take().unwrap_or_default();
        let mut merged: Vec<_> = old
            .0
            .into_iter()
            .filter(|l| !labels.0.iter().any(|n| n.key == l.key))
            .collect();
        merged.extend(labels.0);
        base.labels = Some(Labels(merged));
    }
    if let Some(networks) = over.networks {
        let into = base.networks.get_or_insert_with(Default::default);
        for key in networks.0 {
            if !into.0.contains(&key) {
                into.0.push(key);
            }
        }
    }
    base.network_mode = over.network_mode.or(base.network_mode.take());
    base.container_name = over.container_name.or(base.container_name.take());
    base.scale = over.scale.or(base.scale.take());
    if let Some(deploy) = over.deploy {
        let into = base.deploy.get_or_insert_with(Default::default);
        into.replicas = deploy.replicas.or(into.replicas.take());
    }
    // `at` stays where the service was first defined.
}

fn merge_network(base: &mut NetworkDef, over: NetworkDef) {
    base.name = over.name.or(base.name.take());
    base.external = over.external.or(base.external.take());
    base.driver = over.driver.or(base.driver.take());
    if let Some(opts) = over.driver_opts {
        base.driver_opts
            .get_or_insert_with(BTreeMap::new)
            .extend(opts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compose::check::{CheckOptions, check};
    use crate::compose::model::{At, Scalar};
    use crate::compose::parse_part;

    fn merged(texts: &[&str]) -> ComposeFile {
        merge(texts.iter().map(|t| parse_part(t).unwrap()).collect())
    }

    const BASE: &str = "\
services:
  web:
    networks: [front]
    labels:
      dxdp.enable: \"true\"
      dxdp.peers: db
  db:
    networks: [front]
networks:
  front:
    name: frontnet
";

    #[test]
    fn later_labels_replace_earlier_ones_and_keep_their_file() {
        let file = merged(&[
            BASE,
            "services:\n  web:\n    labels: [dxdp.peers=cache, dxdp.datapath=tc]\n",
        ]);
        let web = &file.services.as_ref().unwrap()["web"];
        let labels: Vec<(&str, String, usize)> = web
            .labels
            .as_ref()
            .unwrap()
            .0
            .iter()
            .map(|l| (l.key.as_str(), l.value.to_text(), l.at.unwrap().source))
            .collect();
        assert_eq!(
            labels,
            [
                ("dxdp.enable", "true".to_owned(), 0),
                ("dxdp.peers", "cache".to_owned(), 1),
                ("dxdp.datapath", "tc".to_owned(), 1),
            ]
        );
        // The service keeps the place of its first definition.
        assert_eq!(
            web.at,
            Some(At {
                source: 0,
                line: 2,
                column: 3
            })
        );
        assert_eq!(web.networks.as_ref().unwrap().0, ["front"]);
    }

    #[test]
    fn a_problem_names_the_file_that_wrote_the_label() {
        let file = merged(&[
            BASE,
            "services:\n  web:\n    labels: {dxdp.datapath: fast}\n",
        ]);
        let p = check(&file, &CheckOptions::default());
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].key.as_deref(), Some("dxdp.datapath"));
        assert_eq!(
            p[0].at,
            Some(At {
                source: 1,
                line: 3,
                column: 14
            })
        );
    }

    #[test]
    fn an_override_without_networks_or_labels_of_its_own_is_checked_with_the_base() {
        // Alone, the override's peer would be unknown and its service on no declared network.
        let file = merged(&[
            BASE,
            "services:\n  web:\n    labels: {dxdp.peers: db}\n  db:\n    image: x\n",
        ]);
        assert_eq!(check(&file, &CheckOptions::default()), []);
        // A later file can move a service off the shared network, which the check then sees.
        let file = merged(&[BASE, "services:\n  db:\n    network_mode: host\n"]);
        let p = check(&file, &CheckOptions::default());
        assert_eq!(p.len(), 1, "{p:#?}");
        assert!(p[0].message.contains("network_mode host"), "{}", p[0]);
        // The label that asks for db is in file 0.
        assert_eq!(p[0].at.map(|a| (a.source, a.line)), Some((0, 6)));
    }

    #[test]
    fn networks_and_single_values_are_replaced_field_by_field() {
        let file = merged(&[
            "services:\n  a:\n    scale: 3\n    deploy: {replicas: 2}\nnetworks:\n  n:\n    driver: bridge\n    driver_opts: {a: '1'}\nname: one\n",
            "services:\n  a:\n    container_name: x\n    scale: 1\nnetworks:\n  n:\n    name: fixed\n    driver_opts: {b: '2'}\n  m:\nname: two\n",
        ]);
        assert_eq!(file.name.as_deref(), Some("two"));
        let a = &file.services.as_ref().unwrap()["a"];
        assert_eq!(a.scale, Some(Scalar::Number("1".to_owned())));
        assert_eq!(a.container_name.as_deref(), Some("x"));
        assert_eq!(
            a.deploy.as_ref().unwrap().replicas,
            Some(Scalar::Number("2".to_owned()))
        );
        let nets = file.networks.as_ref().unwrap();
        let n = nets["n"].as_ref().unwrap();
        assert_eq!(n.name.as_deref(), Some("fixed"));
        assert_eq!(n.driver.as_deref(), Some("bridge"));
        assert_eq!(
            n.driver_opts.as_ref().unwrap().keys().collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(nets["m"], None);
    }
}
