//! The engine's events as dxdp reads them: a "something changed" signal naming the container,
//! network or Swarm service, read by `Type`, `Action` and `Actor` alone.
use std::collections::HashMap;

use anyhow::Result;
use bollard::query_parameters::EventsOptionsBuilder;
use futures::{Stream, StreamExt};

use super::Docker;

impl Docker {
    /// Container and network events from `since` (unix seconds) on, and Swarm service events
    /// (a manager's: a service's labels changed reach its running tasks): they are all that can
    /// change a link. Podman has no services.
    pub fn events_since(&self, since: u64) -> impl Stream<Item = Result<Event>> + use<> {
        let mut types = vec!["container", "network"];
        if !self.is_podman() {
            types.push("service");
        }
        let filters = HashMap::from([("type", types)]);
        let options = EventsOptionsBuilder::new()
            .since(&since.to_string())
            .filters(&filters)
            .build();
        self.client
            .events(Some(options))
            .map(|event| Ok(event_of(event?)))
    }
}

/// What an event says happened, and to which container: enough to tell which links it can
/// change (the reconcile that follows inspects the container itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// `start`, `die`, `connect`, … (`exec_start: sh` and the like keep their suffix).
    pub action: String,
    /// The container it is about: a container event's actor, or the `container` attribute of
    /// a network's `connect`/`disconnect`. `None` for other network events.
    pub container: Option<String>,
    /// The network, for network events.
    pub network: Option<String>,
    /// The Swarm service's id, for service events (`update`: its spec, labels included,
    /// changed).
    pub service: Option<String>,
}

/// From `Type`, `Action` and `Actor`: API 1.52 drops the old `status`, `id` and `from` fields,
/// which dxdp never reads.
fn event_of(event: bollard::models::EventMessage) -> Event {
    use bollard::models::EventMessageTypeEnum as Type;
    let actor = event.actor.unwrap_or_default();
    let (container, network, service) = match event.typ {
        Some(Type::CONTAINER) => (actor.id, None, None),
        Some(Type::NETWORK) => (
            actor
                .attributes
                .unwrap_or_default()
                .remove("container")
                .filter(|id| !id.is_empty()),
            actor.id,
            None,
        ),
        Some(Type::SERVICE) => (None, None, actor.id.filter(|id| !id.is_empty())),
        _ => (None, None, None),
    };
    Event {
        action: event.action.unwrap_or_default(),
        container,
        network,
        service,
    }
}

#[cfg(test)]
mod tests {
    use super::{Event, event_of};

    #[test]
    fn events_are_read_by_action_without_status_id_or_from() {
        // A 1.52 container event: Type, Action, Actor, scope and times only.
        let event = serde_json::from_str(
            r#"{"Type": "container", "Action": "start",
                "Actor": {"ID": "6a971f4056db", "Attributes": {"name": "dxt-rec-c"}},
                "scope": "local", "time": 1764755000, "timeNano": 1764755000123456789}"#,
        )
        .expect("1.52-style event parses");
        assert_eq!(
            event_of(event),
            Event {
                action: "start".to_owned(),
                container: Some("6a971f4056db".to_owned()),
                network: None,
                service: None,
            }
        );
    }

    #[test]
    fn a_service_update_is_about_its_service() {
        // As Engine 28 sends it on a manager after `docker service update --label-add`.
        let event = serde_json::from_str(
            r#"{"Type": "service", "Action": "update",
                "Actor": {"ID": "qqxh7f1pd1neffvl5oibv86zl",
                          "Attributes": {"name": "web"}},
                "scope": "swarm", "time": 1764755000, "timeNano": 1764755000123456789}"#,
        )
        .expect("service event parses");
        assert_eq!(
            event_of(event),
            Event {
                action: "update".to_owned(),
                container: None,
                network: None,
                service: Some("qqxh7f1pd1neffvl5oibv86zl".to_owned()),
            }
        );
    }

    #[test]
    fn a_network_connect_is_about_its_container() {
        let event = serde_json::from_str(
            r#"{"Type": "network", "Action": "connect",
                "Actor": {"ID": "53d14924c787", "Attributes": {"container": "6a971f4056db",
                          "name": "dxt-rec", "type": "bridge"}},
                "scope": "local", "time": 1764755000, "timeNano": 1764755000123456789}"#,
        )
        .expect("network event parses");
        assert_eq!(
            event_of(event),
            Event {
                action: "connect".to_owned(),
                container: Some("6a971f4056db".to_owned()),
                network: Some("53d14924c787".to_owned()),
                service: None,
            }
        );
    }
}
