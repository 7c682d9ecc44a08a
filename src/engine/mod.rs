//! The watch's engine: one reconcile pass end to end, and what it keeps between passes so that
//! the next one redoes only what may have changed. `dxdp watch` owns the loop (signals, the
//! event stream, readiness, metrics server) and calls [`Engine::reconcile`]; the pass is
//! written here only.
//!
//! - A resync ([`Which::All`]) is whole: every running container, every link. It lists the
//!   containers (inspecting only new or changed ones), and walks every link the labels call
//!   for, and every link made by hand against the rules.
//! - An event ([`Which::Containers`]) is scoped to the containers it names: they alone are
//!   inspected, the plan is made over every container held (labels of the others are known),
//!   and only links with an end on one of their veths, as held before and as found now, are
//!   installed or removed ([`record::Scope`]). A burst of events makes one pass.
//! - A change of the rules ([`Which::LastSeen`]) walks every link over the containers as last
//!   seen, without asking the container engine.
//! - Between passes: the inventory of containers and networks, each container incarnation's
//!   endpoints (netns inspection, [`endpoints`]), the firewall ruleset (while the nf_tables
//!   generation stays), the loaded tables (unlocked, so that other `dxdp` commands run
//!   meanwhile), and per kind of fast path each container's veths and the refusals in force
//!   ([`record`]).
//!
//! What a cache could get wrong, the checks it is held to rule out: an endpoint is used only
//! while its host veth still has the same ifindex, name and bridge, for the same container
//! process and Docker endpoint; the ruleset only while nf_tables reports the same generation
//! and no legacy table is loaded; the loaded object only while the pinned maps are the same
//! files. Every tenth resync forgets the inventory and the endpoints and starts afresh.
//!
//! The pass reaches the world through two ports: a [`ContainerSource`] (dockerd or Podman) for
//! the async half, and a [`Host`] (interfaces, namespaces, rules, pinned tables) for the
//! blocking half ([`pass`]). The unit tests run it against fakes of both.
pub mod egress;
mod endpoints;
pub mod host;
pub mod links;
pub mod notice_batch;
pub mod notices;
mod pass;
pub mod ports;
pub mod record;
mod remote;
mod shared;
mod sites;
pub mod tables;
mod which;

#[cfg(test)]
mod tests;

use std::{collections::BTreeSet, sync::Arc, time::Instant};

use anyhow::{Context, Result};
use tracing::{debug, info, trace, warn};

pub use host::{EndpointError, Host, RealHost};
pub use ports::{Ingress, PortStore};
pub use remote::POLL as REMOTE_POLL;
pub use which::Which;

use crate::{
    docker::{Container, ContainerSource, Event, Inventory},
    metrics::Metrics,
    netlink::MacAddr,
    plan::{self, DesiredLink, Diagnostic, Level, OVERLAY_DRIVER},
};
use pass::BetweenPasses;
use record::Refusal;
use remote::RemoteTasks;
use sites::Sites;

/// The watch's engine over a host (this machine, [`RealHost`], in the product).
pub struct Engine<H: Host = RealHost> {
    host: Arc<H>,
    stats: Arc<Metrics>,
    inventory: Inventory,
    /// `None` only while a pass's blocking half has it.
    held: Option<BetweenPasses<H>>,
    /// The overlay networks whose links are made in their sandboxes.
    sites: Sites<H::Sandbox>,
    /// Tasks of other nodes on this node's overlays, for links across nodes.
    remote: RemoteTasks,
    reported: BTreeSet<Diagnostic>,
    resyncs: u64,
}

/// What a pass found.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub containers: usize,
    pub links: usize,
}

/// Every how many resyncs the caches are dropped: a safety net under the safety net.
const FRESH_EVERY: u64 = 10;

impl<H: Host> Engine<H> {
    pub fn new(host: H, stats: Arc<Metrics>) -> Self {
        let held = BetweenPasses::new(&host);
        Self {
            host: Arc::new(host),
            stats,
            inventory: Inventory::default(),
            held: Some(held),
            sites: Sites::default(),
            remote: RemoteTasks::default(),
            reported: BTreeSet::new(),
            resyncs: 0,
        }
    }

    /// The links table as opened already (loaded, not locked), for the first pass to take
    /// rather than open it again; `None` leaves that to the first pass.
    pub fn with_links(mut self, links: Option<H::Idle>) -> Self {
        if let Some(held) = &mut self.held {
            held.links = links;
        }
        self
    }

    /// A periodic resync: whole, and every [`FRESH_EVERY`]th one from scratch.
    pub async fn resync(&mut self, source: &impl ContainerSource) -> Option<Outcome> {
        self.resyncs += 1;
        if self.resyncs.is_multiple_of(FRESH_EVERY) {
            self.inventory.clear();
            if let Some(held) = &mut self.held {
                held.endpoints.clear();
            }
            self.sites.forget_endpoints(None);
        }
        self.reconcile(source, Which::All).await
    }

    /// The pass an event calls for, if any: one about the container it names, or a whole one;
    /// for a Swarm service's update, one about its running tasks here (their inspects read the
    /// service's labels again), none if it has none. A removed network is forgotten at once.
    pub fn scope_of(&mut self, event: &Event) -> Option<Which> {
        if event.service.is_some() {
            let service = which::updates_service(event)?;
            let tasks = self.inventory.tasks_of(service);
            debug!(service, tasks = tasks.len(), "docker service update");
            return (!tasks.is_empty()).then_some(Which::Containers(tasks));
        }
        if !which::is_relevant(event) {
            return None;
        }
        debug!(action = %event.action, container = ?event.container, "docker event");
        if which::removes_network(event)
            && let Some(network) = &event.network
        {
            self.inventory.forget_network(network);
        }
        Some(Which::about(event.container.as_deref()))
    }

    /// The containers a bridge's learning `mac` behind `port` says changed, among those whose
    /// endpoints are held (containers the labels link): the one behind `port` if that is not
    /// its MAC, and the one whose MAC it was if that is behind another port (taken over).
    pub fn moved(&self, port: u32, mac: MacAddr) -> BTreeSet<String> {
        let Some(held) = &self.held else {
            return BTreeSet::new();
        };
        held.endpoints
            .iter()
            .filter(|(_, ep)| (ep.host_ifindex == port) != (ep.mac == mac))
            .map(|(id, _)| id.to_owned())
            .collect()
    }

    /// The pass that the tasks of other nodes call for, if they changed since last asked (a
    /// far task started, stopped or moved, which makes no event here; its labels changed) or
    /// the last pass could not find one's endpoint yet: a whole pass over the containers as
    /// last seen. Asks nothing while no labeled container
    /// of this node is on an overlay network. The watch calls it every [`REMOTE_POLL`].
    pub async fn poll_remote(&mut self, source: &impl ContainerSource) -> Option<Which> {
        let local: Vec<Container> = self.inventory.containers().cloned().collect();
        if !self.remote.worth_polling(&local) {
            return None;
        }
        let changed = self.remote.refresh(source, &local).await;
        let retry = std::mem::take(&mut self.remote.retry);
        (changed || retry).then_some(Which::LastSeen)
    }

    /// Forgets every endpoint found, so that the next pass reads every namespace again.
    pub fn forget_all_endpoints(&mut self) {
        if let Some(held) = &mut self.held {
            held.endpoints.clear();
        }
        self.sites.forget_endpoints(None);
    }

    /// Forgets the endpoints found for these containers, so that the next pass about them
    /// reads their namespaces again.
    pub fn forget_endpoints(&mut self, ids: &BTreeSet<String>) {
        if let Some(held) = &mut self.held {
            held.endpoints.retain(|id| !ids.contains(id));
        }
        self.sites.forget_endpoints(Some(ids));
    }

    /// Returns what the pass found, or `None` if it failed; a failure is logged.
    pub async fn reconcile(
        &mut self,
        source: &impl ContainerSource,
        which: Which,
    ) -> Option<Outcome> {
        let started = Instant::now();
        let result = self.pass(source, &which).await;
        self.stats.reconciled(started.elapsed(), result.is_ok());
        match result {
            Ok(outcome) => {
                debug!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    scope = ?which,
                    containers = outcome.containers,
                    links = outcome.links,
                    inspections = self.inventory.inspections(),
                    "reconciled"
                );
                Some(outcome)
            }
            Err(err) => {
                warn!("reconcile failed: {err:#}");
                None
            }
        }
    }

    async fn pass(&mut self, source: &impl ContainerSource, which: &Which) -> Result<Outcome> {
        let started = Instant::now();
        match which {
            Which::All => self.inventory.refresh_all(source).await?,
            Which::Containers(ids) => self.inventory.refresh(source, ids).await?,
            Which::LastSeen => {}
        }
        trace!(
            elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
            "asked the engine"
        );
        let containers: Vec<Container> = self.inventory.containers().cloned().collect();
        // Tasks of other nodes: asked again by a whole pass, or when one of this node's labeled
        // containers is on an overlay not asked about yet; the poll does the rest.
        if matches!(which, Which::All) || self.remote.stale(&containers) {
            self.remote.refresh(source, &containers).await;
        }
        let views: Vec<_> = containers.iter().map(|c| c.view.clone()).collect();
        let mut plan = plan::links_from_labels(&views);
        let (across, refused_across) = remote::links(&views, self.remote.tasks());
        plan.links.extend(across);
        let scoped: BTreeSet<DesiredLink> = match which {
            Which::All | Which::LastSeen => plan.links,
            Which::Containers(ids) => plan
                .links
                .into_iter()
                .filter(|l| ids.contains(&l.a) || ids.contains(&l.b))
                .collect(),
        };
        // Links on overlay networks are made in their sandboxes, the others on the machine.
        let overlays: BTreeSet<&str> = views
            .iter()
            .flat_map(|v| &v.networks)
            .filter(|n| n.driver == OVERLAY_DRIVER)
            .map(|n| n.id.as_str())
            .collect();
        let (on_overlays, links): (BTreeSet<DesiredLink>, BTreeSet<DesiredLink>) = scoped
            .into_iter()
            .partition(|l| overlays.contains(l.network_id.as_str()));
        // The sites' passes see the tasks of other nodes too, the machine's only its own.
        let mut on_sites: Vec<Container> = containers.clone();
        on_sites.extend(self.remote.tasks().iter().cloned());
        let for_sites = Arc::new(on_sites);
        let containers = Arc::new(containers);
        // Gone only if the last pass's thread panicked: start afresh.
        let mut held = self
            .held
            .take()
            .unwrap_or_else(|| BetweenPasses::new(&*self.host));
        let host = Arc::clone(&self.host);
        let which_now = which.clone();
        let (held, applied) = tokio::task::spawn_blocking(move || {
            let applied = pass::run(&mut held, &*host, &containers, &links, &which_now);
            if which_now.is_whole() {
                sites::forget_dead(&*host);
            }
            if applied.is_err() {
                // Whatever failed may have been the loaded tables: load them again next time.
                held.links = None;
            }
            (held, applied)
        })
        .await
        .context("reconcile task panicked")?;
        let running: BTreeSet<String> = self
            .inventory
            .containers()
            .map(|c| c.view.id.clone())
            .collect();
        let held = self.held.insert(held);
        let applied = applied?;
        let on_sites = self
            .sites
            .reconcile(&*self.host, &for_sites, &on_overlays, which)
            .await;
        for id in applied.unreadable.iter().chain(&on_sites.unreadable) {
            self.inventory.distrust(id);
        }
        self.remote.retry = on_sites.unreadable.iter().any(|id| remote::is_remote(id));
        self.stats
            .removed_by_firewall(applied.removed_by_rules + on_sites.removed_by_rules);
        self.stats
            .exposures_removed_by_firewall(applied.exposures_removed_by_rules);
        self.stats
            .egress_removed_by_firewall(applied.egress_removed_by_rules);
        held.links_seen.retain_running(&running);
        held.ports_seen.retain_running(&running);
        held.endpoints.retain(|id| running.contains(id));
        self.sites.retain_running(&running);
        // Label problems and every kind's refusals are logged together, each once while it
        // holds.
        let mut diagnostics = plan.diagnostics;
        diagnostics.extend(refused_across);
        let link_refusals = held.links_seen.refusals().chain(self.sites.refused());
        diagnostics.extend(link_refusals.clone().map(Refusal::diagnostic));
        diagnostics.extend(held.ports_seen.refusals().map(Refusal::diagnostic));
        report_new(&diagnostics, &mut self.reported);
        self.stats.firewall_refused(link_refusals.count());
        self.stats.refused(&plan.refused, plan.malformed);
        self.stats
            .refused_exposures(held.ports_seen.refusals().count());
        give_back_freed_memory();
        Ok(Outcome {
            containers: running.len(),
            links: applied.links + on_sites.links,
        })
    }
}

/// Logs each diagnostic once while it holds, so a resync does not repeat them every time.
fn report_new(diagnostics: &[Diagnostic], reported: &mut BTreeSet<Diagnostic>) {
    let current: BTreeSet<Diagnostic> = diagnostics.iter().cloned().collect();
    for d in current.difference(reported) {
        match d.level {
            Level::Warn => warn!(container = %d.container, "{}", d.message),
            Level::Info => info!(container = %d.container, "{}", d.message),
        }
    }
    *reported = current;
}

/// Hands the heap pages a pass freed back to the kernel. glibc keeps them for reuse, in an
/// arena per thread that ever allocated (the runtime's workers, the blocking pool, the threads
/// that enter namespaces), so a long-running watch would otherwise sit on its high-water mark.
fn give_back_freed_memory() {
    // SAFETY: malloc_trim only releases free memory; it is safe to call at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
