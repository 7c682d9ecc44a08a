//! The tasks an overlay network knows across the swarm: what a node's dockerd says of the
//! network with `verbose` (`docker network inspect --verbose`), from Swarm's gossip. A worker
//! answers it too, where the tasks API is a manager's alone; it is how a task of another node
//! is found by name, with its address on the overlay and its node's.
use std::{collections::HashMap, net::IpAddr};

use anyhow::{Context, Result};
use bollard::query_parameters::InspectNetworkOptions;

use super::Docker;

/// One task (or attachable container) on an overlay network, on this node or another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverlayTask {
    /// The container's name (`web.2.x7k2…` for a service's task).
    pub name: String,
    /// Its address on the overlay.
    pub addr: IpAddr,
    /// The address of the node it runs on, as gossip gives it.
    pub node: Option<IpAddr>,
    /// The Swarm service it is a task of (`""` for an attachable container).
    pub service: String,
}

impl Docker {
    /// Every task the overlay network `network_id` knows, on every node.
    pub async fn overlay_tasks(&self, network_id: &str) -> Result<Vec<OverlayTask>> {
        let options = InspectNetworkOptions {
            verbose: true,
            scope: None,
        };
        let network = self
            .client
            .inspect_network(network_id, Some(options))
            .await
            .with_context(|| format!("cannot inspect network {network_id} with its tasks"))?;
        Ok(tasks_of(&network.services.unwrap_or_default()))
    }
}

/// The tasks of a verbose network inspection's `Services` (keyed by service name, `""` for
/// attachable containers; each with its `Tasks`), sorted by name; entries without a name or a
/// readable address are left out.
fn tasks_of(services: &HashMap<String, serde_json::Value>) -> Vec<OverlayTask> {
    let mut tasks: Vec<OverlayTask> = services
        .iter()
        .filter_map(|(name, service)| Some((name, service.get("Tasks")?.as_array()?)))
        .flat_map(|(service, tasks)| tasks.iter().map(move |task| (service, task)))
        .filter_map(|(service, task)| {
            let info: bollard::models::NetworkTaskInfo =
                serde_json::from_value(task.clone()).ok()?;
            Some(OverlayTask {
                name: info.name?,
                addr: info.endpoint_ip?.parse().ok()?,
                node: info
                    .info
                    .as_ref()
                    .and_then(|i| i.get("Host IP"))
                    .and_then(|ip| ip.parse().ok()),
                service: service.clone(),
            })
        })
        .collect();
    tasks.sort_by(|x, y| x.name.cmp(&y.name));
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a worker of a two-node swarm answered (Engine 28.5), for an attachable overlay with
    /// a container on each node.
    const WORKER_SAYS: &str = r#"{
        "": {"VIP": "<nil>", "Ports": [], "LocalLBIndex": 0, "Tasks": [
            {"Name": "c2", "EndpointID": "8aa7", "EndpointIP": "10.240.220.4",
             "Info": {"Host IP": "10.240.0.2"}},
            {"Name": "c1", "EndpointID": "4deb", "EndpointIP": "10.240.220.2",
             "Info": {"Host IP": "10.240.0.1"}}]},
        "web": {"VIP": "10.240.220.9", "Tasks": [
            {"Name": "web.1.x7k2", "EndpointIP": "10.240.220.7", "Info": {}},
            {"Name": "noaddr", "EndpointIP": ""},
            {"EndpointIP": "10.240.220.8"}]}
    }"#;

    #[test]
    fn tasks_of_every_service_with_their_addresses_and_nodes() {
        let services: HashMap<String, serde_json::Value> =
            serde_json::from_str(WORKER_SAYS).unwrap();
        let tasks = tasks_of(&services);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            tasks,
            vec![
                OverlayTask {
                    name: "c1".into(),
                    addr: ip("10.240.220.2"),
                    node: Some(ip("10.240.0.1")),
                    service: String::new(),
                },
                OverlayTask {
                    name: "c2".into(),
                    addr: ip("10.240.220.4"),
                    node: Some(ip("10.240.0.2")),
                    service: String::new(),
                },
                OverlayTask {
                    name: "web.1.x7k2".into(),
                    addr: ip("10.240.220.7"),
                    node: None,
                    service: "web".into(),
                },
            ]
        );
    }
}
