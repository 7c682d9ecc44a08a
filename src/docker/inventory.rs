//! What the watch knows about the engine's running containers between two reconciles, so that
//! neither an event nor a resync inspects every container again.
//!
//! - An event about container X inspects X alone ([`Inventory::refresh`]).
//! - A resync lists the running containers (one call) and inspects only those it does not
//!   hold, or whose list entry changed since (names, state, a network's endpoint or MAC: a
//!   restart or reconnect makes a new endpoint), in parallel ([`Inventory::refresh_all`]).
//! - Networks are inspected once: nothing dxdp reads of one changes after it is created.
//!
//! An event that never arrives is healed by the next resync's list, which sees the new entry.
use std::{
    collections::{BTreeSet, HashMap},
    future::Future,
};

use anyhow::Result;

use super::{Container, Docker, NetworkCache};

/// Where the inventory's containers come from: dockerd, or Podman's Docker-compatible API, in
/// the product; a fake engine in the unit tests of the watch's engine.
pub trait ContainerSource {
    /// Each running container's ID and a fingerprint of its list entry (names, state, each
    /// network's endpoint and MAC) that changes when an inspect would tell something new.
    fn running_fingerprints(&self) -> impl Future<Output = Result<Vec<(String, String)>>>;

    /// Inspects these containers; `None` for one that is gone.
    fn inspect_many(
        &self,
        ids: &[String],
        networks: &mut NetworkCache,
    ) -> impl Future<Output = Result<Vec<Option<Container>>>>;

    /// Every task the overlay network `network_id` knows, on every node (Swarm's gossip); none
    /// for an engine without Swarm.
    fn overlay_tasks(
        &self,
        network_id: &str,
    ) -> impl Future<Output = Result<Vec<super::OverlayTask>>> {
        let _ = network_id;
        async { Ok(Vec::new()) }
    }

    /// The labels of every task of a Swarm service, where this engine can read services (a
    /// manager); an error where it cannot.
    fn task_labels(&self, service: &str) -> impl Future<Output = Result<HashMap<String, String>>> {
        let service = service.to_owned();
        async move { anyhow::bail!("no Swarm service {service} here") }
    }
}

impl ContainerSource for Docker {
    async fn running_fingerprints(&self) -> Result<Vec<(String, String)>> {
        Docker::running_fingerprints(self).await
    }

    async fn inspect_many(
        &self,
        ids: &[String],
        networks: &mut NetworkCache,
    ) -> Result<Vec<Option<Container>>> {
        Docker::inspect_many(self, ids, networks).await
    }

    async fn overlay_tasks(&self, network_id: &str) -> Result<Vec<super::OverlayTask>> {
        Docker::overlay_tasks(self, network_id).await
    }

    async fn task_labels(&self, service: &str) -> Result<HashMap<String, String>> {
        Docker::task_labels(self, service).await
    }
}

#[derive(Default)]
pub struct Inventory {
    containers: HashMap<String, Inspected>,
    networks: NetworkCache,
    /// Container inspects made so far.
    inspections: u64,
}

struct Inspected {
    container: Container,
    /// The list entry it was inspected for; `None` after an event's inspect, so the next
    /// resync inspects it once more and records one.
    fingerprint: Option<String>,
}

impl Inventory {
    /// Lists the running containers and inspects the ones whose entry is new or changed.
    pub async fn refresh_all(&mut self, docker: &impl ContainerSource) -> Result<()> {
        let listed = docker.running_fingerprints().await?;
        let running: BTreeSet<&str> = listed.iter().map(|(id, _)| id.as_str()).collect();
        self.containers
            .retain(|id, _| running.contains(id.as_str()));
        let (ids, fingerprints): (Vec<String>, Vec<String>) = listed
            .iter()
            .filter(|(id, fingerprint)| {
                self.containers
                    .get(id)
                    .is_none_or(|held| held.fingerprint.as_ref() != Some(fingerprint))
            })
            .cloned()
            .unzip();
        let inspected = docker.inspect_many(&ids, &mut self.networks).await?;
        self.inspections += ids.len() as u64;
        for ((id, fingerprint), container) in ids.into_iter().zip(fingerprints).zip(inspected) {
            self.hold(id, container, Some(fingerprint));
        }
        Ok(())
    }

    /// Inspects these containers again (what an event is about).
    pub async fn refresh(
        &mut self,
        docker: &impl ContainerSource,
        ids: &BTreeSet<String>,
    ) -> Result<()> {
        let ids: Vec<String> = ids.iter().cloned().collect();
        let inspected = docker.inspect_many(&ids, &mut self.networks).await?;
        self.inspections += ids.len() as u64;
        for (id, container) in ids.into_iter().zip(inspected) {
            self.hold(id, container, None);
        }
        Ok(())
    }

    /// Keeps a running container, forgets one that stopped or is gone.
    fn hold(&mut self, id: String, container: Option<Container>, fingerprint: Option<String>) {
        // Keyed by the inspect's full ID, whatever form of it the event used.
        let key = match &container {
            Some(c) if !c.view.id.is_empty() => c.view.id.clone(),
            _ => id,
        };
        match container.filter(|c| c.view.running) {
            Some(container) => {
                self.containers.insert(
                    key,
                    Inspected {
                        container,
                        fingerprint,
                    },
                );
            }
            None => {
                self.containers.remove(&key);
            }
        }
    }

    /// Makes the next resync inspect this container again (its netns could not be read as
    /// held: a restart whose events were lost).
    pub fn distrust(&mut self, id: &str) {
        if let Some(held) = self.containers.get_mut(id) {
            held.fingerprint = None;
        }
    }

    /// Drops a removed network.
    pub fn forget_network(&mut self, id: &str) {
        self.networks.forget(id);
    }

    /// Forgets everything: the next resync inspects every container and network again.
    pub fn clear(&mut self) {
        *self = Self {
            inspections: self.inspections,
            ..Self::default()
        };
    }

    /// The running containers held, in no particular order.
    pub fn containers(&self) -> impl Iterator<Item = &Container> {
        self.containers.values().map(|held| &held.container)
    }

    /// The running tasks of the Swarm service `service` (by id) held, by container id.
    pub fn tasks_of(&self, service: &str) -> BTreeSet<String> {
        self.containers
            .iter()
            .filter(|(_, held)| {
                held.container
                    .view
                    .labels
                    .get(super::networks::SWARM_SERVICE_ID)
                    .is_some_and(|id| id == service)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Container inspects made so far.
    pub fn inspections(&self) -> u64 {
        self.inspections
    }
}
