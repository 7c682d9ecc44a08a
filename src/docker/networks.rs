//! Networks and Swarm services as dxdp reads them: each network's view and bridge (cached for
//! as long as a network lives), the bridge networks `doctor` checks, a task's service labels.
use std::collections::HashMap;

use anyhow::{Context, Result};
use tracing::debug;

use super::{Docker, podman::Podman};
use crate::{
    plan::NetworkView,
    rules::keys::{ENCRYPTED_OPTION, ICC_OPTION, PREFIX},
};

const BRIDGE_NAME_OPTION: &str = "com.docker.network.bridge.name";

/// A bridge network as `doctor` reports it.
#[derive(Clone, Debug)]
pub struct BridgeNetwork {
    pub name: String,
    /// The Linux bridge carrying it.
    pub bridge: String,
    /// Its containers' addresses, without prefix lengths.
    pub addrs: Vec<std::net::IpAddr>,
    /// Its subnets (address, prefix length), from its IPAM configuration.
    pub subnets: Vec<(std::net::IpAddr, u8)>,
}

/// The label Swarm puts on a task's container: the id of the service it belongs to.
pub(crate) const SWARM_SERVICE_ID: &str = "com.docker.swarm.service.id";

impl Docker {
    /// Adds the `dxdp.*` labels of a Swarm task's service (a stack file's `deploy.labels`,
    /// `docker service create --label`) that the container does not set itself: the
    /// container's own labels (`labels:` at service level, `--container-label`) win. A service
    /// that cannot be read adds nothing (logged).
    pub(super) async fn add_service_labels(
        &self,
        service: &str,
        labels: &mut HashMap<String, String>,
    ) {
        let spec = match self.client.inspect_service(service, None).await {
            Ok(found) => found.spec.and_then(|s| s.labels).unwrap_or_default(),
            Err(err) => {
                debug!(service, "cannot read the task's service labels: {err}");
                return;
            }
        };
        for (key, value) in spec {
            if key.starts_with(PREFIX) {
                labels.entry(key).or_insert(value);
            }
        }
    }

    /// The labels every task of the Swarm service `service` (a name or id) has: its container
    /// spec's, and its own `dxdp.*` ones where the container spec sets no such key, as
    /// [`Docker::add_service_labels`] merges them for a task of this node. A manager's answer
    /// only: a worker cannot read services.
    pub async fn task_labels(&self, service: &str) -> Result<HashMap<String, String>> {
        let found = self
            .client
            .inspect_service(service, None)
            .await
            .with_context(|| format!("cannot inspect service {service}"))?;
        let spec = found.spec.unwrap_or_default();
        let mut labels = spec
            .task_template
            .and_then(|t| t.container_spec)
            .and_then(|c| c.labels)
            .unwrap_or_default();
        for (key, value) in spec.labels.unwrap_or_default() {
            if key.starts_with(PREFIX) {
                labels.entry(key).or_insert(value);
            }
        }
        Ok(labels)
    }

    /// Every `bridge` network with the addresses of the containers on it.
    pub async fn bridge_networks(&self) -> Result<Vec<BridgeNetwork>> {
        let list = self
            .client
            .list_networks(None)
            .await
            .context("cannot list networks")?;
        let mut out = Vec::new();
        for id in list
            .into_iter()
            .filter(|n| n.driver.as_deref() == Some("bridge"))
            .filter_map(|n| n.id)
        {
            let Ok(inspect) = self.client.inspect_network(&id, None).await else {
                continue;
            };
            let options = inspect.options.unwrap_or_default();
            let bridge = match (options.get(BRIDGE_NAME_OPTION), &self.podman) {
                (Some(name), _) => name.clone(),
                (None, Some(podman)) => match podman.bridge_of(&id).await {
                    Ok(name) => name,
                    Err(_) => continue,
                },
                (None, None) => format!("br-{}", &id[..id.len().min(12)]),
            };
            let subnets = inspect
                .ipam
                .and_then(|ipam| ipam.config)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|c| {
                    let (addr, len) = c
                        .subnet?
                        .split_once('/')
                        .map(|(a, l)| (a.to_owned(), l.to_owned()))?;
                    Some((addr.parse().ok()?, len.parse().ok()?))
                })
                .collect();
            let addrs = inspect
                .containers
                .unwrap_or_default()
                .into_values()
                .flat_map(|e| [e.ipv4_address, e.ipv6_address])
                .flatten()
                .filter_map(|a| a.split('/').next()?.parse().ok())
                .collect();
            out.push(BridgeNetwork {
                name: inspect.name.unwrap_or_default(),
                bridge,
                addrs,
                subnets,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

/// Networks looked up once per snapshot, or for as long as the watch runs: what dxdp reads of
/// a network (name, driver, bridge, ICC option) is fixed when it is created.
#[derive(Default)]
pub struct NetworkCache(HashMap<String, (NetworkView, Option<String>)>);

impl NetworkCache {
    /// Drops a network that was removed.
    pub(crate) fn forget(&mut self, id: &str) {
        self.0.remove(id);
    }

    pub(super) async fn get(
        &mut self,
        client: &bollard::Docker,
        podman: Option<&Podman>,
        id: &str,
        name: &str,
    ) -> Result<(NetworkView, Option<String>)> {
        if let Some(hit) = self.0.get(id) {
            return Ok(hit.clone());
        }
        let inspect = client
            .inspect_network(id, None)
            .await
            .with_context(|| format!("cannot inspect network {name}"))?;
        let options = inspect.options.unwrap_or_default();
        let driver = inspect.driver.unwrap_or_default();
        // Docker names a network's bridge in its options or else `br-<id>`; Podman's compat
        // API leaves the options empty (its bridges are podman0, podmanN), so libpod is asked.
        // Podman's container inspect gives the network's name as its ID: the inspect's own ID
        // is the one libpod surely knows (its compat list calls the default network "bridge").
        let bridge = match (driver == "bridge", options.get(BRIDGE_NAME_OPTION), podman) {
            (false, _, _) => None,
            (true, Some(name), _) => Some(name.clone()),
            (true, None, Some(podman)) => {
                let real_id = inspect.id.as_deref().unwrap_or(id);
                Some(
                    podman
                        .bridge_of(real_id)
                        .await
                        .with_context(|| format!("cannot find the bridge of network {name}"))?,
                )
            }
            (true, None, None) => Some(format!("br-{}", &id[..id.len().min(12)])),
        };
        let view = NetworkView {
            id: id.to_owned(),
            name: inspect.name.unwrap_or_else(|| name.to_owned()),
            driver,
            icc: options.get(ICC_OPTION).is_none_or(|v| v != "false"),
            // libnetwork's overlay driver encrypts when the option is present, whatever its
            // value (`--opt encrypted` sets it to "").
            encrypted: options.contains_key(ENCRYPTED_OPTION),
            routing_mesh: inspect.ingress.unwrap_or(false),
        };
        self.0.insert(id.to_owned(), (view.clone(), bridge.clone()));
        Ok((view, bridge))
    }
}
