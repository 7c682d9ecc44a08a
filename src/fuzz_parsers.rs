//! The two parsers that read untrusted text, fuzzed with proptest: Docker labels (anyone who can
//! start a container writes them, and the watch reads them) and endpoint strings (the command
//! line). Neither may panic; every label error names its key; every endpoint that parses prints
//! back to a string that parses to the same endpoint. No privileges needed; bounded to a few
//! seconds (2000 cases each, `PROPTEST_CASES` to change).

use std::collections::HashMap;

use crate::{
    endpoint::EndpointSpec,
    labels::{self, OptIn},
};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    ProptestConfig {
        cases,
        // Failures are minimised and shown; no regression files are written into the tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Keys: the five real ones most of the time, near misses, other labels, and anything.
fn label_key() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(labels::KEYS.to_vec()).prop_map(str::to_owned),
        2 => "dxdp\\.[a-zA-Z._-]{0,12}",
        1 => "(com\\.docker\\.compose\\.)?[a-z.]{0,16}",
        1 => any::<String>(),
    ]
}

/// Values: plausible ones, lists with odd separators, oversized ones, and anything.
fn label_value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "true", "false", "TRUE", " tc ", "xdp", "auto", "yes", "", "a,b", "a,,b", "/web",
            "-x", "web,web", "net_1.x",
        ])
        .prop_map(str::to_owned),
        3 => "[ -~]{0,40}",
        2 => prop::collection::vec("[a-z0-9][a-z0-9_.-]{0,10}", 0..80).prop_map(|v| v.join(",")),
        1 => "[a-z,]{1000,1100}",
        1 => ".{0,30}",
        1 => any::<String>(),
    ]
}

fn label_map() -> impl Strategy<Value = HashMap<String, String>> {
    prop::collection::hash_map(label_key(), label_value(), 0..8)
}

proptest! {
    #![proptest_config(config())]

    /// Never panics; an error names one of the map's `dxdp.*` keys and carries its value, and
    /// shows at most a bounded part of an oversized value; what is accepted is valid.
    #[test]
    fn label_parser_never_panics_and_every_error_names_its_key(labels in label_map()) {
        let ours: Vec<&String> = labels.keys().filter(|k| k.starts_with(labels::PREFIX)).collect();
        match labels::parse(&labels) {
            Ok(opt_in) => {
                if let OptIn::Enabled(policy) = &opt_in {
                    prop_assert!(policy.peers.len() <= labels::MAX_PEERS);
                    prop_assert!(policy.groups.len() <= labels::MAX_GROUPS);
                    for name in policy.peers.iter().chain(&policy.groups) {
                        prop_assert!(labels::validate_name(name).is_ok(), "{name:?} accepted");
                    }
                }
                if ours.is_empty() {
                    prop_assert_eq!(opt_in, OptIn::Absent { ignored: vec![] });
                }
            }
            Err(errors) => {
                prop_assert!(!errors.is_empty(), "Err without an error");
                for e in &errors {
                    prop_assert!(ours.contains(&&e.key), "error for a key not given: {e:?}");
                    prop_assert_eq!(&labels[&e.key], &e.value);
                    let shown = e.to_string();
                    prop_assert!(shown.contains(&format!("label {}=", e.key)), "{shown}");
                    prop_assert!(!e.reason.is_empty() && !e.hint.is_empty(), "{e:?}");
                    // An oversized value is never echoed whole (64 characters, escaped).
                    if e.value.len() > labels::MAX_VALUE_LEN {
                        prop_assert!(
                            shown.len() <= e.key.len() + 64 * 10 + 400,
                            "{} bytes shown for a {}-byte value: {shown}",
                            shown.len(),
                            e.value.len()
                        );
                    }
                }
                // Sorted by key, every time, whatever the map's iteration order.
                let keys: Vec<&String> = errors.iter().map(|e| &e.key).collect();
                let mut sorted = keys.clone();
                sorted.sort();
                prop_assert_eq!(keys, sorted);
            }
        }
    }

    /// Never panics; what parses prints back to itself (after normalisation) and parses again to
    /// the same endpoint; what does not parse says so with the input and the accepted forms.
    #[test]
    fn endpoint_parser_never_panics_and_round_trips(input in prop_oneof![
        3 => "(netns|pid|container|[a-z]{0,6})?:?[ -~]{0,20}(:[ -~]{0,18})?",
        2 => "(netns:|pid:|container:|/)?[a-zA-Z0-9_.-]{1,20}(:eth[0-9])?",
        1 => "pid:[0-9]{0,12}(:[a-z0-9]{0,16})?",
        1 => any::<String>(),
    ]) {
        match input.parse::<EndpointSpec>() {
            Ok(spec) => {
                let shown = spec.to_string();
                prop_assert_eq!(shown.parse::<EndpointSpec>(), Ok(spec.clone()), "{:?} -> {:?}", input, shown);
                prop_assert_eq!(shown.parse::<EndpointSpec>().map(|s| s.to_string()), Ok(shown));
            }
            Err(err) => {
                let message = err.to_string();
                prop_assert_eq!(&err.input, &input);
                prop_assert!(message.contains("write netns:NAME[:IFACE]"), "{message}");
                prop_assert!(!err.reason.is_empty());
            }
        }
    }
}
