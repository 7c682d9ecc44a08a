//! The `dxdp.*` Docker labels through which a container opts in to acceleration.
//!
//! | key             | value                      | default |
//! |-----------------|----------------------------|---------|
//! | `dxdp.enable`   | `true` or `false`          | absent  |
//! | `dxdp.peers`    | `NAME[,NAME...]`           | none    |
//! | `dxdp.group`    | `NAME[,NAME...]`           | none    |
//! | `dxdp.datapath` | `auto`, `tc` or `xdp`      | `auto`  |
//! | `dxdp.network`  | `NAME` of a Docker network | any     |
//! | `dxdp.firewall` | `enforce` or `bypass`      | `enforce` |
//! | `dxdp.ingress`  | `true` or `false`          | `false` |
//! | `dxdp.egress`   | `true` or `false`          | `false` |
//!
//! Rules:
//! - Every `dxdp.*` label is validated whether or not the container opted in, so that a typo
//!   such as `dxdp.enabel=true` is reported instead of silently leaving the container out.
//! - `dxdp.enable`, `dxdp.datapath` and `dxdp.firewall` ignore surrounding whitespace and ASCII
//!   case.
//! - `dxdp.ingress=true` asks a watch started with `--ingress-nic` to take the container's
//!   published ports straight from the NIC (`dxdp expose`); it needs no `dxdp.enable`. With
//!   `dxdp.firewall=bypass` on the same container, its ports skip the firewall walk.
//! - `dxdp.egress=true` asks a watch to take the container's established outbound IPv4
//!   connections straight to the default route's NIC (`dxdp egress on`); it needs no
//!   `dxdp.enable`, and the rules are always walked (no bypass).
//! - `dxdp.firewall=bypass` lets a link skip host firewall rules that could drop its traffic on
//!   the bridge (see [`crate::firewall`]) only when both containers of the pair carry it, so it
//!   counts on a container that is only named as a peer, without `dxdp.enable`.
//! - In lists, whitespace around items is dropped, an empty item is an error and duplicates
//!   collapse. A peer may carry one leading `/` (as `docker inspect` prints names); a group or
//!   network may not, because there is no "global" group syntax: see [`crate::plan`] for scoping.
//! - Names follow [`validate_name`]. A value longer than [`MAX_VALUE_LEN`] bytes is rejected
//!   unread. At most [`MAX_PEERS`] peers and [`MAX_GROUPS`] groups per container.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;
use thiserror::Error;

use crate::choice::Choice;

pub(crate) use crate::rules::keys::{
    DATAPATH, EGRESS, ENABLE, FIREWALL, GROUP, INGRESS, KEYS, NETWORK, PEERS, PREFIX,
};

/// Docker's container-name limit, so that any container name can be written as a peer.
pub(crate) const MAX_NAME_LEN: usize = 128;
pub(crate) const MAX_VALUE_LEN: usize = 1024;
pub(crate) const MAX_PEERS: usize = 64;
/// Same bound as peers: groups cost a quadratic number of pairs.
pub(crate) const MAX_GROUPS: usize = 64;

/// Longest value echoed back in a [`LabelError`]; an oversized value would drown the message.
const SHOWN_VALUE_CHARS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum NameError {
    #[error("name is empty")]
    Empty,
    #[error("name must start with a letter or digit, not {0:?}")]
    BadStart(char),
    #[error("character {0:?} is not allowed; use letters, digits, '_', '.' or '-'")]
    BadChar(char),
    #[error("name is {0} characters long, over the limit of {MAX_NAME_LEN}")]
    TooLong(usize),
}

/// Checks `[A-Za-z0-9][A-Za-z0-9_.-]*` of at most [`MAX_NAME_LEN`] characters, the shape of
/// Docker container, compose service and network names (without a leading `/`).
pub(crate) fn validate_name(name: &str) -> Result<(), NameError> {
    let mut chars = name.chars();
    let first = chars.next().ok_or(NameError::Empty)?;
    if !first.is_ascii_alphanumeric() {
        return Err(NameError::BadStart(first));
    }
    if let Some(c) = chars.find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))) {
        return Err(NameError::BadChar(c));
    }
    // Only ASCII is left, so bytes are characters.
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong(name.len()));
    }
    Ok(())
}

/// Container name as Docker reports it in lists (`docker inspect` prefixes a `/`).
pub(crate) fn normalize_name(raw: &str) -> &str {
    let trimmed = raw.trim();
    trimmed.strip_prefix('/').unwrap_or(trimmed)
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Policy {
    /// Normalised (no leading `/`), deduplicated, in written order.
    pub(crate) peers: Vec<String>,
    /// Deduplicated, in written order.
    pub(crate) groups: Vec<String>,
    pub(crate) datapath: Choice,
    pub(crate) network: Option<String>,
}

/// What a container's labels say about taking part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OptIn {
    /// No `dxdp.enable`: the container asks for nothing but may be named as a peer.
    /// `ignored` lists the other `dxdp.*` keys present, sorted; they have no effect.
    Absent {
        ignored: Vec<String>,
    },
    /// `dxdp.enable=false`: an opt-out that beats any other container naming this one.
    OptedOut {
        ignored: Vec<String>,
    },
    Enabled(Policy),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LabelError {
    pub(crate) key: String,
    pub(crate) value: String,
    /// What is wrong.
    pub(crate) reason: String,
    /// What to write instead.
    pub(crate) hint: String,
}

impl LabelError {
    fn new(key: &str, value: &str, reason: impl Into<String>) -> Self {
        let hint = match key {
            ENABLE => "write dxdp.enable=true to opt in or dxdp.enable=false to opt out".to_owned(),
            PEERS => "write dxdp.peers=NAME[,NAME...]".to_owned(),
            GROUP => "write dxdp.group=NAME[,NAME...]".to_owned(),
            DATAPATH => "write dxdp.datapath=auto, tc or xdp".to_owned(),
            NETWORK => "write dxdp.network=NAME with the name of one Docker network".to_owned(),
            FIREWALL => "write dxdp.firewall=bypass to let links skip host firewall rules, or \
                         dxdp.firewall=enforce (the default)"
                .to_owned(),
            INGRESS => "write dxdp.ingress=true to take the container's published ports \
                        straight from the NIC, or dxdp.ingress=false"
                .to_owned(),
            EGRESS => "write dxdp.egress=true to take the container's outbound connections \
                       straight to the NIC, or dxdp.egress=false"
                .to_owned(),
            _ => format!("valid keys are {}", KEYS.join(", ")),
        };
        Self {
            key: key.to_owned(),
            value: value.to_owned(),
            reason: reason.into(),
            hint,
        }
    }
}

impl fmt::Display for LabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "label {}={}", self.key, shown_value(&self.value))?;
        write!(f, ": {}; {}", self.reason, self.hint)
    }
}

impl std::error::Error for LabelError {}

/// A label value as messages echo it: quoted, and cut to its first characters when long (with
/// its size), so that an oversized value does not drown the message.
pub(crate) fn shown_value(value: &str) -> String {
    if value.chars().count() > SHOWN_VALUE_CHARS {
        let head: String = value.chars().take(SHOWN_VALUE_CHARS).collect();
        format!("{head:?}... ({} bytes)", value.len())
    } else {
        format!("{value:?}")
    }
}

/// Reads the `dxdp.*` labels; other labels are not looked at.
/// `Err` carries every problem found, sorted by key, not just the first.
pub(crate) fn parse(labels: &HashMap<String, String>) -> Result<OptIn, Vec<LabelError>> {
    let mut ours: Vec<(&str, &str)> = labels
        .iter()
        .filter(|(k, _)| k.starts_with(PREFIX))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    // HashMap order is random; errors must come out the same every time.
    ours.sort_unstable();

    let mut errors = Vec::new();
    let mut enable = None;
    let mut policy = Policy::default();
    for &(key, value) in &ours {
        let mut fail = |reason: String| errors.push(LabelError::new(key, value, reason));
        if !KEYS.contains(&key) {
            fail("unknown dxdp label key".to_owned());
            continue;
        }
        if value.len() > MAX_VALUE_LEN {
            fail(format!(
                "value is oversized, over the {MAX_VALUE_LEN}-byte limit"
            ));
            continue;
        }
        match key {
            ENABLE => match bool_value(value) {
                Some(on) => enable = Some(on),
                None => fail("expected true or false".to_owned()),
            },
            PEERS => match parse_list(value, "peer", MAX_PEERS, true) {
                Ok(list) => policy.peers = list,
                Err(reasons) => reasons.into_iter().for_each(fail),
            },
            GROUP => match parse_list(value, "group", MAX_GROUPS, false) {
                Ok(list) => policy.groups = list,
                Err(reasons) => reasons.into_iter().for_each(fail),
            },
            DATAPATH => match value.parse() {
                Ok(choice) => policy.datapath = choice,
                Err(_) => fail("unknown datapath".to_owned()),
            },
            FIREWALL => {
                if firewall_value(value).is_none() {
                    fail("expected enforce or bypass".to_owned());
                }
            }
            INGRESS | EGRESS => {
                if bool_value(value).is_none() {
                    fail("expected true or false".to_owned());
                }
            }
            _ => {
                let name = value.trim();
                match validate_name(name) {
                    Ok(()) => policy.network = Some(name.to_owned()),
                    Err(e) => fail(format!("network name {name:?}: {e}")),
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }

    let ignored = || {
        ours.iter()
            .filter(|(k, _)| ![ENABLE, FIREWALL, INGRESS, EGRESS].contains(k))
            .map(|(k, _)| (*k).to_owned())
            .collect()
    };
    Ok(match enable {
        Some(true) => OptIn::Enabled(policy),
        Some(false) => OptIn::OptedOut { ignored: ignored() },
        None => OptIn::Absent { ignored: ignored() },
    })
}

/// `Some(true)` for `bypass`, `Some(false)` for `enforce`, `None` for anything else.
fn firewall_value(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "bypass" => Some(true),
        "enforce" => Some(false),
        _ => None,
    }
}

fn bool_value(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// Whether these labels say `dxdp.ingress=true` (validly): the container's published ports are
/// to be taken straight from the NIC.
pub fn wants_ingress(labels: &HashMap<String, String>) -> bool {
    labels
        .get(INGRESS)
        .and_then(|v| bool_value(v))
        .unwrap_or(false)
}

/// Whether these labels say `dxdp.egress=true` (validly): the container's established
/// outbound connections are to be taken straight to the NIC.
pub fn wants_egress(labels: &HashMap<String, String>) -> bool {
    labels
        .get(EGRESS)
        .and_then(|v| bool_value(v))
        .unwrap_or(false)
}

/// Whether these labels say `dxdp.firewall=bypass` (validly). A pair bypasses the firewall
/// check only if both of its containers say so.
pub fn bypasses_firewall(labels: &HashMap<String, String>) -> bool {
    labels
        .get(FIREWALL)
        .and_then(|v| firewall_value(v))
        .unwrap_or(false)
}

/// `Err` holds one reason per distinct problem.
fn parse_list(
    value: &str,
    what: &str,
    max: usize,
    strip_slash: bool,
) -> Result<Vec<String>, Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    let mut reasons = Vec::new();
    let mut saw_empty = false;
    for raw in value.split(',') {
        let item = if strip_slash {
            normalize_name(raw)
        } else {
            raw.trim()
        };
        if item.is_empty() {
            saw_empty = true;
        } else if let Err(e) = validate_name(item) {
            reasons.push(format!("{what} name {item:?}: {e}"));
        } else if !out.iter().any(|known| known == item) {
            out.push(item.to_owned());
        }
    }
    if saw_empty {
        // One message however many commas, so "a,,b,," does not read as two separate faults.
        reasons.insert(0, format!("empty {what} name"));
    }
    if out.len() > max {
        reasons.push(format!("{} {what} names, at most {max} allowed", out.len()));
    }
    if reasons.is_empty() {
        Ok(out)
    } else {
        Err(reasons)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn enabled(pairs: &[(&str, &str)]) -> Policy {
        let mut all = vec![(ENABLE, "true")];
        all.extend_from_slice(pairs);
        match parse(&labels(&all)) {
            Ok(OptIn::Enabled(p)) => p,
            other => panic!("expected Enabled, got {other:?}"),
        }
    }

    fn errors(pairs: &[(&str, &str)]) -> Vec<LabelError> {
        match parse(&labels(pairs)) {
            Err(e) => e,
            ok => panic!("expected errors, got {ok:?}"),
        }
    }

    #[test]
    fn firewall_bypass_is_validated_and_read_on_any_container() {
        for (value, bypass) in [("bypass", true), (" BYPASS ", true), ("enforce", false)] {
            let l = labels(&[(FIREWALL, value)]);
            assert_eq!(parse(&l), Ok(OptIn::Absent { ignored: vec![] }), "{value}");
            assert_eq!(bypasses_firewall(&l), bypass, "{value}");
        }
        let l = labels(&[(FIREWALL, "off")]);
        let errors = parse(&l).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().contains("expected enforce or bypass"));
        assert!(!bypasses_firewall(&l));
        assert!(!bypasses_firewall(&labels(&[])));
    }

    #[test]
    fn no_labels_is_absent() {
        assert_eq!(
            parse(&HashMap::new()),
            Ok(OptIn::Absent { ignored: vec![] })
        );
        let foreign = labels(&[("com.example", "x"), ("dxdp", "1"), ("dxdpx.a", "b")]);
        assert_eq!(parse(&foreign), Ok(OptIn::Absent { ignored: vec![] }));
    }

    #[test]
    fn opt_in_missing_lists_ignored_keys() {
        let got = parse(&labels(&[(PEERS, "a"), (GROUP, "g")]));
        assert_eq!(
            got,
            Ok(OptIn::Absent {
                ignored: vec![GROUP.to_owned(), PEERS.to_owned()]
            })
        );
    }

    #[test]
    fn explicit_false_is_opt_out() {
        let got = parse(&labels(&[(ENABLE, "false"), (DATAPATH, "tc")]));
        assert_eq!(
            got,
            Ok(OptIn::OptedOut {
                ignored: vec![DATAPATH.to_owned()]
            })
        );
    }

    #[test]
    fn enable_is_case_and_space_tolerant() {
        assert_eq!(enabled(&[]), Policy::default());
        let got = parse(&labels(&[(ENABLE, " True ")]));
        assert_eq!(got, Ok(OptIn::Enabled(Policy::default())));
    }

    #[test]
    fn enable_garbage_is_error() {
        let e = errors(&[(ENABLE, "yes")]);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].key, ENABLE);
        assert!(e[0].to_string().contains("expected true or false"));
    }

    #[test]
    fn malformed_labels_fail_even_when_not_enabled() {
        let e = errors(&[(PEERS, "a,,b")]);
        assert_eq!(e.len(), 1);
        let e = errors(&[(ENABLE, "false"), (DATAPATH, "fast")]);
        assert_eq!(e[0].key, DATAPATH);
    }

    #[test]
    fn unknown_key_names_key_and_valid_keys() {
        let e = errors(&[(ENABLE, "true"), ("dxdp.enabel", "true")]);
        assert_eq!(e.len(), 1);
        let msg = e[0].to_string();
        assert!(msg.contains("dxdp.enabel"), "{msg}");
        assert!(msg.contains("unknown dxdp label key"), "{msg}");
        for key in KEYS {
            assert!(msg.contains(key), "{msg}");
        }
    }

    #[test]
    fn empty_peer_display() {
        let e = errors(&[(ENABLE, "true"), (PEERS, "a,,b")]);
        assert_eq!(
            e[0].to_string(),
            r#"label dxdp.peers="a,,b": empty peer name; write dxdp.peers=NAME[,NAME...]"#
        );
    }

    #[test]
    fn empty_items_in_every_position() {
        for value in ["", " ", ",a", "a,", "a, ,b", "/", "a,,b,,"] {
            let e = errors(&[(PEERS, value)]);
            assert_eq!(e.len(), 1, "{value:?}: {e:?}");
            assert_eq!(e[0].reason, "empty peer name", "{value:?}");
        }
    }

    #[test]
    fn peers_normalised() {
        let p = enabled(&[(PEERS, " /web , db,web,/db ,cache-1 ")]);
        assert_eq!(p.peers, ["web", "db", "cache-1"]);
    }

    #[test]
    fn bad_peer_names_each_reported() {
        let e = errors(&[(PEERS, "ok,-bad,a b,é,,x")]);
        let reasons: Vec<&str> = e.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert_eq!(reasons[0], "empty peer name");
        assert!(reasons[1].contains("\"-bad\""));
        assert!(reasons[2].contains("' '"));
        assert!(reasons[3].contains("'é'"));
    }

    #[test]
    fn peer_count_limit() {
        let names = |n: usize| {
            (0..n)
                .map(|i| format!("p{i}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        assert_eq!(
            enabled(&[(PEERS, &names(MAX_PEERS))]).peers.len(),
            MAX_PEERS
        );
        let e = errors(&[(PEERS, &names(MAX_PEERS + 1))]);
        assert_eq!(e.len(), 1);
        assert!(
            e[0].reason.contains("65 peer names, at most 64"),
            "{}",
            e[0]
        );
        // Duplicates are not counted twice.
        let dup = format!("{},p0", names(MAX_PEERS));
        assert_eq!(enabled(&[(PEERS, &dup)]).peers.len(), MAX_PEERS);
    }

    #[test]
    fn oversized_value_is_rejected_and_truncated_in_message() {
        let big = "a,".repeat(600);
        let e = errors(&[(ENABLE, "true"), (PEERS, &big)]);
        assert_eq!(e.len(), 1);
        assert!(e[0].reason.contains("oversized"));
        let msg = e[0].to_string();
        assert!(msg.contains("(1200 bytes)"), "{msg}");
        assert!(msg.len() < 300, "{msg}");
        // At exactly the limit the value is read (and here fails on its own merits).
        let at_limit = "a".repeat(MAX_VALUE_LEN);
        let e = errors(&[(NETWORK, &at_limit)]);
        assert!(!e[0].reason.contains("oversized"), "{}", e[0]);
        assert!(e[0].reason.contains("over the limit of 128"), "{}", e[0]);
    }

    #[test]
    fn datapath_values() {
        assert_eq!(enabled(&[]).datapath, Choice::Auto);
        assert_eq!(enabled(&[(DATAPATH, "tc")]).datapath, Choice::Tc);
        assert_eq!(enabled(&[(DATAPATH, " XDP")]).datapath, Choice::Xdp);
        assert_eq!(enabled(&[(DATAPATH, "auto")]).datapath, Choice::Auto);
        let e = errors(&[(ENABLE, "true"), (DATAPATH, "fast")]);
        assert_eq!(
            e[0].to_string(),
            r#"label dxdp.datapath="fast": unknown datapath; write dxdp.datapath=auto, tc or xdp"#
        );
    }

    #[test]
    fn groups_and_network() {
        let p = enabled(&[(GROUP, "web, db ,web"), (NETWORK, " backend ")]);
        assert_eq!(p.groups, ["web", "db"]);
        assert_eq!(p.network.as_deref(), Some("backend"));
    }

    #[test]
    fn group_with_slash_is_rejected() {
        let e = errors(&[(GROUP, "/web")]);
        assert!(
            e[0].reason.contains("start with a letter or digit"),
            "{}",
            e[0]
        );
    }

    #[test]
    fn bad_network_name() {
        let e = errors(&[(NETWORK, "a,b")]);
        assert!(e[0].reason.contains("','"), "{}", e[0]);
        let e = errors(&[(NETWORK, "")]);
        assert!(e[0].reason.contains("name is empty"), "{}", e[0]);
    }

    #[test]
    fn all_errors_reported_sorted_by_key() {
        let e = errors(&[
            (ENABLE, "maybe"),
            (PEERS, ",x"),
            (DATAPATH, "fast"),
            ("dxdp.zzz", "1"),
            ("dxdp.aaa", "1"),
        ]);
        let keys: Vec<&str> = e.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            ["dxdp.aaa", DATAPATH, ENABLE, PEERS, "dxdp.zzz"],
            "{e:?}"
        );
    }

    #[test]
    fn name_rules() {
        assert_eq!(validate_name("a"), Ok(()));
        assert_eq!(validate_name("Web_1.x-y"), Ok(()));
        assert_eq!(validate_name(&"a".repeat(MAX_NAME_LEN)), Ok(()));
        assert_eq!(
            validate_name(&"a".repeat(MAX_NAME_LEN + 1)),
            Err(NameError::TooLong(129))
        );
        assert_eq!(validate_name(""), Err(NameError::Empty));
        assert_eq!(validate_name("_a"), Err(NameError::BadStart('_')));
        assert_eq!(validate_name("/a"), Err(NameError::BadStart('/')));
        assert_eq!(validate_name("a/b"), Err(NameError::BadChar('/')));
        assert_eq!(validate_name("a\nb"), Err(NameError::BadChar('\n')));
    }

    #[test]
    fn normalize() {
        assert_eq!(normalize_name("/web"), "web");
        assert_eq!(normalize_name(" web "), "web");
        assert_eq!(normalize_name("//web"), "/web");
    }

    #[test]
    fn control_characters_are_escaped_in_messages() {
        let e = errors(&[(NETWORK, "a\nb")]);
        assert!(!e[0].to_string().contains('\n'), "{}", e[0]);
    }
}
