//! Endpoints found by netns inspection, held between passes: entering 200 namespaces was most
//! of a resync. Each is kept for one incarnation of a container on a network (its process, its
//! Docker endpoint there) and used only while the host veth is still what was found.
use std::collections::HashMap;

use crate::{docker::Container, endpoint::Endpoint, netlink::Interface};

/// How a pass finds an endpoint that is not held: netns inspection on a real host
/// ([`crate::docker::endpoint_on`]). Called from several threads at once.
pub(super) type Find<'f> =
    dyn Fn(&Container, &str, &[Interface]) -> Result<Endpoint, EndpointError> + Sync + 'f;

pub use crate::endpoint::EndpointError;

/// The endpoints held, by incarnation.
#[derive(Default)]
pub(super) struct EndpointCache {
    found: HashMap<Incarnation, Endpoint>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Incarnation {
    container: String,
    pid: u32,
    network: String,
    endpoint: String,
}

/// Threads finding endpoints at once when many are missing (a watch's first pass): each
/// enters namespaces on its own thread, so they overlap.
const FINDERS: usize = 4;

impl EndpointCache {
    /// Finds, in parallel, the endpoints of these (container, network) pairs that are not
    /// held; failures are left for [`EndpointCache::get`] to report.
    pub(super) fn prefetch(
        &mut self,
        wanted: &[(&Container, &str)],
        host: &[Interface],
        find: &Find<'_>,
    ) {
        let missing: Vec<&(&Container, &str)> = wanted
            .iter()
            .filter(|(c, net)| self.held(c, net, host).is_none())
            .collect();
        if missing.len() < 2 * FINDERS {
            return;
        }
        let chunk = missing.len().div_ceil(FINDERS);
        let found: Vec<(Incarnation, Endpoint)> = std::thread::scope(|scope| {
            let workers: Vec<_> = missing
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        part.iter()
                            .filter_map(|(c, net)| {
                                let key = incarnation(c, net)?;
                                Some((key, find(c, net, host).ok()?))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_default())
                .collect()
        });
        self.found.extend(found);
    }

    /// The held endpoint, if its veth is still there.
    fn held(
        &self,
        container: &Container,
        network_id: &str,
        host: &[Interface],
    ) -> Option<&Endpoint> {
        let key = incarnation(container, network_id)?;
        self.found.get(&key).filter(|ep| still_there(ep, host))
    }

    /// The endpoint of `container` on `network_id`, from the cache if the host veth it names
    /// is still there, a veth, on the same bridge; found again otherwise.
    pub(super) fn get(
        &mut self,
        container: &Container,
        network_id: &str,
        host: &[Interface],
        find: &Find<'_>,
    ) -> Result<Endpoint, EndpointError> {
        if let Some(ep) = self.held(container, network_id, host) {
            return Ok(ep.clone());
        }
        let key = incarnation(container, network_id);
        let ep = find(container, network_id, host)?;
        if let Some(key) = key {
            self.found.insert(key, ep.clone());
        }
        Ok(ep)
    }

    /// Drops what is held about containers that are no longer running.
    pub(super) fn retain(&mut self, running: impl Fn(&str) -> bool) {
        self.found.retain(|k, _| running(&k.container));
    }

    /// Every endpoint held, with the ID of its container.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &Endpoint)> {
        self.found
            .iter()
            .map(|(key, ep)| (key.container.as_str(), ep))
    }

    pub(super) fn clear(&mut self) {
        self.found.clear();
    }
}

/// One container process on one network through one Docker endpoint.
fn incarnation(container: &Container, network_id: &str) -> Option<Incarnation> {
    Some(Incarnation {
        container: container.view.id.clone(),
        pid: container.pid?,
        network: network_id.to_owned(),
        endpoint: container
            .attachment(network_id)
            .map(|a| a.endpoint_id.clone())
            .unwrap_or_default(),
    })
}

/// Whether the host veth an endpoint names is still that veth, on that bridge. An ifindex and
/// a name both reused by another container's veth on the same bridge is beyond this check;
/// the incarnation key (the container's pid and Docker's endpoint) is what rules that out.
fn still_there(ep: &Endpoint, host: &[Interface]) -> bool {
    host.iter().any(|i| {
        i.index == ep.host_ifindex
            && i.name == ep.host_ifname
            && i.is_veth()
            && i.master == Some(ep.bridge_ifindex)
    })
}
