//! `dxdp compose-check`: the dxdp labels of a compose file, checked before `docker-compose up`
//! instead of read from `dxdp watch`'s log afterwards.
//!
//! A project is one file, or several merged as `docker compose -f a.yml -f b.yml` merges them
//! ([`merge`]); it is checked with the rules of [`crate::labels`] and [`crate::plan`]. Errors
//! are labels that cannot do what they say; warnings are labels that do nothing, or that only
//! `up` can judge. Each problem carries where it is written ([`At`]): the label's key (or its
//! list item), else the service's name, in the file that wrote it.
//!
//! Errors:
//! - a malformed `dxdp.*` label (unknown key, bad value), as [`crate::labels::parse`] reports
//!   it; a list-form label given twice (docker-compose keeps only the last);
//! - `dxdp.peers` naming neither a service nor a `container_name` of the file. Runtime also
//!   accepts any container name (`dxdp watch` links it once it runs), so `--allow-external`
//!   turns these into warnings;
//! - a group with a single service, unless the service may run several replicas (`scale` or
//!   `deploy.replicas` above 1, or not a literal), since a group is scoped to its project;
//! - dxdp labels (other than a lone `dxdp.enable=false`) on a service whose `network_mode` is
//!   `host`, `none`, `service:…` or `container:…`, or `dxdp.peers` naming such a service;
//! - `dxdp.network` naming a network the service is not on. The value is the *Docker* name:
//!   compose names network `front` `PROJECT_front` unless it has `name:` or is external, so
//!   `dxdp.network=front` is an error there. With the project known (`--project-name`,
//!   `COMPOSE_PROJECT_NAME`, or a top-level `name:`), `PROJECT_front` is checked exactly;
//!   without, a value of that shape is a warning;
//! - a pair asked for (by peers or a group) that `dxdp watch` would refuse: the two ends set
//!   different `dxdp.network` or `dxdp.datapath` values, share no network (or not the one
//!   `dxdp.network` names), or share only networks of another driver than `bridge` or with
//!   `enable_icc=false`.
//!
//! Warnings: `dxdp.*` labels without `dxdp.enable=true` (ignored), or next to
//! `dxdp.enable=false`; `dxdp.peers` naming an opted-out service, or the service itself when it
//! has one replica; a `DXDP.*` key in the wrong case; a value holding `${VAR}`, which is left
//! unchecked (and a malformed or substituted `dxdp.enable` is taken as `true`, so the rest is
//! still checked).
//!
//! YAML 1.1 booleans such as `yes` and `on` stay strings, as in Compose v2: `dxdp.enable: yes`
//! is an error (docker-compose 1.x would pass it on as `True`). Unquoted `true` is fine.
//!
//! A file that cannot be read or parsed (exit status 2) includes one over [`MAX_FILE_BYTES`], or
//! one that breaks the parser budget set in `options()` (depth, nodes, anchors, alias expansion).
//!
//! Not read: `extends`, profiles, and the value of any interpolation (`docker compose config |
//! dxdp compose-check -` resolves them all first).

mod check;
mod merge;
mod model;

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use thiserror::Error;

pub use check::{CheckOptions, Problem, Severity, check, normalize_project, one_line};
pub use model::At;
pub(crate) use model::ComposeFile;

/// Compose files are a few kilobytes; anything this big is a mistake or an attack.
pub(crate) const MAX_FILE_BYTES: u64 = 1 << 20;

#[derive(Debug, Error)]
pub enum LoadError {
    #[error("cannot read: {0}")]
    Read(#[from] io::Error),
    #[error("file is over the {MAX_FILE_BYTES}-byte limit for compose files")]
    TooLarge,
    #[error("not YAML dxdp can read: {}", yaml_message(.0))]
    Yaml(#[from] serde_saphyr::Error),
    #[error(
        "no services section; not a compose file (format 1, without `services:`, is not supported)"
    )]
    NoServices,
}

/// The parser's text, without its advice to the programmer, which a user cannot act on.
fn yaml_message(e: &serde_saphyr::Error) -> String {
    e.to_string()
        .replace(", set DuplicateKeyPolicy in Options if acceptable", "")
}

impl LoadError {
    /// Where the parser stopped, for a file that is not YAML dxdp can read.
    pub fn at(&self) -> Option<At> {
        match self {
            Self::Yaml(e) => e.location().and_then(|l| At::of(&l)),
            _ => None,
        }
    }
}

/// One file of a project, which may lack `services:` (an override that only adds networks);
/// [`project`] says whether the whole has any. Reads at most [`MAX_FILE_BYTES`] (plus one, to
/// tell), whatever the file claims to be: `/dev/zero` or a growing file must not be read to
/// the end.
pub fn read_file(path: &Path) -> Result<ComposeFile, LoadError> {
    read_from(File::open(path)?)
}

/// Like [`read_file`], from any reader (standard input for `-`).
pub fn read_from(reader: impl Read) -> Result<ComposeFile, LoadError> {
    let mut bytes = Vec::new();
    reader.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(LoadError::TooLarge);
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not UTF-8: {e}")))?;
    parse_part(&text)
}

/// The files of one project, in the order given, merged; places in file `i` have source `i`.
pub fn project(parts: Vec<ComposeFile>) -> Result<ComposeFile, LoadError> {
    let file = merge::merge(parts);
    if file.services.is_none() {
        return Err(LoadError::NoServices);
    }
    Ok(file)
}

pub(crate) fn parse_part(text: &str) -> Result<ComposeFile, LoadError> {
    Ok(serde_saphyr::from_str_with_options(text, options())?)
}

/// A project of one file, for the tests.
#[cfg(test)]
pub(crate) fn parse_str(text: &str) -> Result<ComposeFile, LoadError> {
    project(vec![parse_part(text)?])
}

/// Limits sized for compose files, far below the parser's general-purpose defaults: 1 MiB of
/// YAML holds at most ~500k nodes, so the node and event caps bite first only on alias bombs,
/// which the replay limits stop.
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: Some(MAX_FILE_BYTES as usize),
            max_events: 500_000,
            max_nodes: 200_000,
            max_depth: 32,
            max_documents: 1,
            max_anchors: 5_000,
            max_aliases: 5_000,
            max_merge_keys: 5_000,
            max_total_scalar_bytes: MAX_FILE_BYTES as usize,
            max_recorded_anchor_events: 200_000,
            max_recorded_anchor_bytes: MAX_FILE_BYTES as usize,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 200_000,
            max_replay_stack_depth: 16,
        },
        // Label values are read untyped; without this, `dxdp.network: y` would become `true`.
        strict_booleans: true,
        // One line, "... at line L, column C"; the source snippet would span several.
        with_snippet: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compose::model::Scalar;

    fn yaml_error(text: &str) -> String {
        match parse_str(text) {
            Err(e @ LoadError::Yaml(_)) => e.to_string(),
            other => panic!("expected a YAML error, got {other:?}"),
        }
    }

    #[test]
    fn anchors_and_merge_keys_are_expanded() {
        let file = parse_str(
            r#"
x-dxdp: &dxdp {dxdp.enable: "true", dxdp.group: g}
services:
  a: {labels: *dxdp}
  b:
    labels:
      <<: *dxdp
      dxdp.datapath: tc
"#,
        )
        .unwrap();
        let services = file.services.as_ref().unwrap();
        assert_eq!(services["b"].labels.as_ref().unwrap().0.len(), 3);
        assert_eq!(check(&file, &CheckOptions::default()), []);
    }

    #[test]
    fn yaml_1_1_booleans_stay_strings() {
        let file =
            parse_str("services:\n  a:\n    labels: {dxdp.network: y, dxdp.enable: on}\n").unwrap();
        let labels = &file.services.unwrap()["a"].labels.clone().unwrap().0;
        assert_eq!(labels[0].value, Scalar::Text("y".to_owned()));
        assert_eq!(labels[1].value, Scalar::Text("on".to_owned()));
    }

    #[test]
    fn syntax_errors_carry_the_line() {
        let e = yaml_error("services:\n  a:\n    labels: [unclosed\n");
        assert!(e.contains("line"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let e = yaml_error("services:\n  a: {}\n  a: {}\n");
        assert!(e.contains("duplicate mapping key: a at line 3"), "{e}");
        assert!(e.contains("line 3"), "{e}");
        let e = yaml_error("services:\n  a:\n    labels: 5\n");
        assert!(e.contains("line 3"), "{e}");
    }

    #[test]
    fn not_a_compose_file() {
        assert!(matches!(parse_str(""), Err(LoadError::NoServices)));
        assert!(matches!(
            parse_str("version: '2.4'\n"),
            Err(LoadError::NoServices)
        ));
        yaml_error("- a\n- b\n");
        yaml_error("services: {}\n---\nservices: {}\n");
    }

    #[test]
    fn alias_bomb_is_refused() {
        // Nine levels of ten aliases each: 10^9 strings if expanded.
        let mut text = String::from("x0: &a0 [lol]\n");
        for i in 1..10 {
            let prev = format!("*a{}", i - 1);
            text.push_str(&format!("x{i}: &a{i} [{}]\n", vec![prev; 10].join(", ")));
        }
        text.push_str("services: {}\n");
        yaml_error(&text);
    }

    #[test]
    fn deep_nesting_is_refused() {
        let text = format!(
            "services: {{}}\nx: {}{}\n",
            "[".repeat(200),
            "]".repeat(200)
        );
        yaml_error(&text);
    }
}
