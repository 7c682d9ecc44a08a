//! What a pass is about: everything, the containers events named, or every known link without
//! asking the container engine. Events and kernel notices are turned into one of these here,
//! so that the loop that receives them only forwards.
use std::collections::BTreeSet;

use crate::docker::Event;

/// What a pass is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Which {
    /// Every container: the start, a resync, a reconnect, an event about no container.
    All,
    /// The containers events named, by ID.
    Containers(BTreeSet<String>),
    /// Every link, over the containers as last seen, without asking the engine: the
    /// firewall changed, nothing about the containers did.
    LastSeen,
}

impl Which {
    /// A pass about the container an event names, or a whole one if it names none.
    pub fn about(container: Option<&str>) -> Self {
        match container {
            Some(id) => Which::Containers(BTreeSet::from([id.to_owned()])),
            None => Which::All,
        }
    }

    /// Widens this pass to cover another event's too.
    pub fn merge(&mut self, other: Which) {
        match (&mut *self, other) {
            (Which::Containers(ids), Which::Containers(more)) => ids.extend(more),
            (Which::LastSeen, Which::LastSeen) => {}
            _ => *self = Which::All,
        }
    }

    /// Whether the pass walks every link (and so may collect garbage and replace what is held
    /// about every veth).
    pub fn is_whole(&self) -> bool {
        matches!(self, Which::All | Which::LastSeen)
    }
}

/// Container and network actions that can change which links should exist. `create` is not
/// one: a created container runs nothing until its `start`.
const RELEVANT: &[&str] = &[
    "start",
    "restart",
    "die",
    "stop",
    "kill",
    "destroy",
    "rename",
    "connect",
    "disconnect",
    "pause",
    "unpause",
    "update",
];

/// Whether an event can change which links should exist, and so calls for a pass.
pub(super) fn is_relevant(event: &Event) -> bool {
    RELEVANT.contains(&verb(&event.action))
}

/// The service a Swarm service's `update` is about: its labels may have changed, which its
/// running tasks' links depend on. (Its tasks' starts and stops are container events.)
pub(super) fn updates_service(event: &Event) -> Option<&str> {
    (verb(&event.action) == "update")
        .then_some(event.service.as_deref())
        .flatten()
}

/// Whether the event says a network was removed.
pub(super) fn removes_network(event: &Event) -> bool {
    verb(&event.action) == "destroy" && event.container.is_none() && event.network.is_some()
}

/// `exec_start: sh -c …` → `exec_start`.
fn verb(action: &str) -> &str {
    action.split(':').next().unwrap_or(action).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(action: &str, container: Option<&str>, network: Option<&str>) -> Event {
        Event {
            action: action.to_owned(),
            container: container.map(str::to_owned),
            network: network.map(str::to_owned),
            service: None,
        }
    }

    #[test]
    fn a_burst_is_about_every_container_it_names_or_everything() {
        let mut which = Which::about(Some("a"));
        which.merge(Which::about(Some("b")));
        assert_eq!(
            which,
            Which::Containers(BTreeSet::from(["a".to_owned(), "b".to_owned()]))
        );
        which.merge(Which::about(None));
        assert_eq!(which, Which::All);
        which.merge(Which::about(Some("c")));
        assert_eq!(which, Which::All);
    }

    #[test]
    fn only_actions_that_change_links_call_for_a_pass() {
        assert!(is_relevant(&event("start", Some("a"), None)));
        assert!(is_relevant(&event("connect", Some("a"), Some("n"))));
        assert!(!is_relevant(&event("create", Some("a"), None)));
        assert!(!is_relevant(&event(
            "exec_start: sh -c true",
            Some("a"),
            None
        )));
        assert!(removes_network(&event("destroy", None, Some("n"))));
        let service = |action: &str| Event {
            service: Some("svc".to_owned()),
            ..event(action, None, None)
        };
        assert_eq!(updates_service(&service("update")), Some("svc"));
        assert_eq!(updates_service(&service("remove")), None);
        assert_eq!(updates_service(&event("update", Some("a"), None)), None);
        assert!(!removes_network(&event("destroy", Some("a"), None)));
    }
}
