//! The watch's overlay networks. Each overlay network with links to make on this node is a
//! site: its sandbox namespace is the host of a pass of its own ([`pass::run`], run inside the
//! sandbox), with what that pass keeps between passes, as the machine's bridges have theirs.
//! The plan is made once for every network; a site takes the links on its network. A whole
//! pass also visits every live sandbox with pinned links, so that links there the labels do not
//! call for (made by hand) are held to the sandbox's rules and swept as the machine's are.
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use anyhow::Context;
use tracing::{info, warn};

use super::{
    Which,
    host::Host,
    pass::{self, BetweenPasses},
    record::Refusal,
};
use crate::{
    docker::Container,
    overlay::sandbox_name,
    plan::{DesiredLink, NetworkView, OVERLAY_DRIVER},
};

/// One overlay network's sandbox and what its passes keep.
struct Site<S: Host> {
    host: Arc<S>,
    /// `None` only while a pass's blocking half has it.
    held: Option<BetweenPasses<S>>,
    network: NetworkView,
}

/// Every site with links, or with links to remove, by network id.
pub(super) struct Sites<S: Host> {
    by_network: BTreeMap<String, Site<S>>,
}

impl<S: Host> Default for Sites<S> {
    fn default() -> Self {
        Self {
            by_network: BTreeMap::new(),
        }
    }
}

/// What the sites' passes did, summed.
#[derive(Default)]
pub(super) struct SitesApplied {
    pub(super) links: usize,
    pub(super) removed_by_rules: usize,
    pub(super) unreadable: Vec<String>,
}

impl<S: Host> Sites<S> {
    /// Takes each site to the `links` on its network (already within `which`'s scope), making
    /// sites for networks that have a sandbox here and dropping those left with no link.
    pub(super) async fn reconcile<H: Host<Sandbox = S>>(
        &mut self,
        host: &H,
        containers: &Arc<Vec<Container>>,
        links: &BTreeSet<DesiredLink>,
        which: &Which,
    ) -> SitesApplied {
        let mut networks: BTreeMap<String, NetworkView> = self
            .by_network
            .iter()
            .map(|(id, site)| (id.clone(), site.network.clone()))
            .collect();
        for link in links {
            if let Some(net) = network_of(containers, &link.network_id) {
                networks.entry(link.network_id.clone()).or_insert(net);
            }
        }
        // A whole pass also visits the sandboxes holding links the labels do not call for
        // (made by hand, or by a watch before the labels changed): held to the rules, swept.
        if which.is_whole() {
            for name in host.pinned_sandboxes() {
                if let Some(net) = containers
                    .iter()
                    .flat_map(|c| &c.view.networks)
                    .find(|n| n.driver == OVERLAY_DRIVER && sandbox_name(&n.id) == name)
                {
                    networks
                        .entry(net.id.clone())
                        .or_insert_with(|| net.clone());
                }
            }
        }
        let mut done = SitesApplied::default();
        for (id, network) in networks {
            if !self.concerns(&id, containers, which) {
                continue;
            }
            let here: BTreeSet<DesiredLink> = links
                .iter()
                .filter(|l| l.network_id == id)
                .cloned()
                .collect();
            let none_wanted = here.is_empty();
            let site = match self.by_network.entry(id.clone()) {
                std::collections::btree_map::Entry::Occupied(site) => site.into_mut(),
                std::collections::btree_map::Entry::Vacant(slot) => {
                    let Some(sandbox) = host.sandbox(&network) else {
                        continue;
                    };
                    let held = BetweenPasses::new(&sandbox);
                    slot.insert(Site {
                        host: Arc::new(sandbox),
                        held: Some(held),
                        network,
                    })
                }
            };
            let name = site.network.name.clone();
            let mut held = site
                .held
                .take()
                .unwrap_or_else(|| BetweenPasses::new(&*site.host));
            let site_host = Arc::clone(&site.host);
            let on_site = Arc::clone(containers);
            let which_now = which.clone();
            let outcome = tokio::task::spawn_blocking(move || {
                let applied = site_host
                    .inside(|| pass::run(&mut held, &*site_host, &on_site, &here, &which_now));
                (held, applied)
            })
            .await
            .context("overlay reconcile task panicked");
            match outcome {
                Ok((held, Ok(applied))) => {
                    done.links += applied.links;
                    done.removed_by_rules += applied.removed_by_rules;
                    done.unreadable.extend(applied.unreadable);
                    if none_wanted && applied.links == 0 {
                        self.by_network.remove(&id);
                    } else {
                        site.held = Some(held);
                    }
                }
                // The sandbox is gone (the network removed, its last local task stopped) or
                // its table failed: start afresh next time; the machine's whole pass removes
                // a dead sandbox's pins.
                Ok((_, Err(err))) | Err(err) => {
                    warn!(network = %name, "overlay network's links: {err:#}");
                    self.by_network.remove(&id);
                }
            }
        }
        done
    }

    /// Whether a pass about `which` concerns the site of network `id`: a whole pass always; an
    /// event's only if one of its containers is on the network or had a veth held there.
    fn concerns(&self, id: &str, containers: &[Container], which: &Which) -> bool {
        let Which::Containers(ids) = which else {
            return true;
        };
        let on_network = containers
            .iter()
            .filter(|c| ids.contains(&c.view.id))
            .any(|c| c.view.networks.iter().any(|n| n.id == id));
        let held_there = self.by_network.get(id).is_some_and(|site| {
            site.held
                .as_ref()
                .is_some_and(|h| h.links_seen.holds_any(ids))
        });
        on_network || held_there
    }

    /// Firewall refusals of every site, as of their last passes.
    pub(super) fn refused(&self) -> impl Iterator<Item = &Refusal> + Clone {
        self.by_network
            .values()
            .filter_map(|s| s.held.as_ref())
            .flat_map(|h| h.links_seen.refusals())
    }

    /// Forgets what is held about containers no longer running.
    pub(super) fn retain_running(&mut self, running: &BTreeSet<String>) {
        for held in self.by_network.values_mut().filter_map(|s| s.held.as_mut()) {
            held.links_seen.retain_running(running);
            held.endpoints.retain(|id| running.contains(id));
        }
    }

    /// Forgets every endpoint found, so that the next pass reads every namespace again.
    pub(super) fn forget_endpoints(&mut self, ids: Option<&BTreeSet<String>>) {
        for held in self.by_network.values_mut().filter_map(|s| s.held.as_mut()) {
            match ids {
                None => held.endpoints.clear(),
                Some(ids) => held.endpoints.retain(|id| !ids.contains(id)),
            }
        }
    }
}

/// The network `id` as a container on it sees it.
fn network_of(containers: &[Container], id: &str) -> Option<NetworkView> {
    containers
        .iter()
        .flat_map(|c| &c.view.networks)
        .find(|n| n.id == id)
        .cloned()
}

/// Removes the pinned state of sandboxes that are gone, saying which.
pub(super) fn forget_dead<H: Host>(host: &H) {
    match host.forget_dead_sandboxes() {
        Ok(names) => {
            for name in names {
                info!(sandbox = %name, "removed the pinned state of an overlay sandbox that is gone");
            }
        }
        Err(err) => warn!("cannot remove the state of overlay sandboxes that are gone: {err:#}"),
    }
}
