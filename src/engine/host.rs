//! What a pass touches outside the engine's memory, on its blocking thread: the host's
//! interfaces, the containers' namespaces, the firewall and the pinned tables. [`RealHost`] is
//! this machine; the engine's unit tests have a fake, so that what the pass decides is tested
//! without a kernel.
use std::path::PathBuf;

use anyhow::Result;
use tracing::{debug, warn};

pub use super::endpoints::EndpointError;
use super::{
    egress::EgressStore,
    links::LinkStore,
    ports::{Ingress, PortStore},
    tables::PinnedTables,
};
use crate::{
    datapath::{Capacity, Datapath, Unlocked},
    docker::{self, Container},
    endpoint::Endpoint,
    firewall::RulesetCache,
    netlink::{self, Interface},
    netns::NetnsPath,
    overlay::{self, Sandbox},
    plan::NetworkView,
    rcu,
};

pub trait Host: Send + Sync + 'static {
    /// The links table, locked for one pass; the exposed ports and the egress fast paths are in
    /// it too.
    type Links: LinkStore + PortStore + EgressStore;
    /// The links table between passes (loaded, not locked).
    type Idle: Send;

    fn interfaces(&self) -> Result<Vec<Interface>>;
    /// The endpoint of `container` on the network `network_id`, by namespace inspection.
    fn endpoint_on(
        &self,
        container: &Container,
        network_id: &str,
        host: &[Interface],
    ) -> Result<Endpoint, EndpointError>;
    /// A cache of the firewall rules, empty.
    fn rules(&self) -> RulesetCache;
    /// The NICs published ports are taken from (looked up only if `find_nics`: a container
    /// wants its ports exposed), with their addresses, and the container networks' prefixes:
    /// asked only in a pass with such a container or with exposures made by hand to check.
    fn ingress(&self, host: &[Interface], find_nics: bool) -> Result<Ingress>;
    /// The NICs with these ifindexes, with their addresses, and the container networks'
    /// prefixes: the ways out of the egress fast paths, asked only in a pass that holds some
    /// to the rules.
    fn egress_ways_out(&self, host: &[Interface], nic_ifindexes: &[u32]) -> Result<Ingress>;
    /// The NIC the labeled containers leave by (`--egress-nic`, else the default route's) with
    /// its addresses, and the container networks' prefixes: the way out of the containers
    /// labeled `dxdp.egress=true`, asked only in a pass with one.
    fn egress_default_way_out(&self, host: &[Interface]) -> Result<Ingress>;
    /// Locks the links table: the one kept from the last pass if given, else opened afresh.
    fn lock_links(&self, idle: Option<Self::Idle>, host: &[Interface]) -> Result<Self::Links>;
    fn unlock_links(&self, links: Self::Links) -> Self::Idle;
    /// Makes attaching programs faster while the returned guard lives, if configured to; `None`
    /// when not, or when that failed (logged: attaching is slower, not wrong).
    fn expedite(&self) -> Option<Box<dyn Send + '_>>;

    /// Where the links of the overlay network `network` are made on this node: a host of
    /// their own, its sandbox namespace; `None` when the network has none here (no local task).
    type Sandbox: Host;
    fn sandbox(&self, network: &NetworkView) -> Option<Self::Sandbox>;
    /// Runs a pass's blocking half where this host's veths are: here, or inside a sandbox.
    fn inside<T: Send>(&self, work: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        work()
    }
    /// Whether the labeled containers' published ports are this host's to expose: the
    /// machine's, not a sandbox's (whose bridge no NIC reaches).
    fn exposes_ports(&self) -> bool {
        true
    }
    /// Removes the pinned state of sandboxes that are gone (their veths went with them);
    /// returns their names.
    fn forget_dead_sandboxes(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
    /// The names of the live sandboxes with a pinned datapath (links made by hand there too),
    /// which a whole pass visits even when the labels call for no link on their networks.
    fn pinned_sandboxes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// This machine: the pinned datapath in `pin_dir`. Or, as the host of an overlay network's links,
/// that network's sandbox on this machine, with its own pinned datapath (`crate::overlay`):
/// every call then comes from a thread inside it ([`Host::inside`]).
pub struct RealHost {
    pin_dir: PathBuf,
    /// The overlay sandbox this host is; `None` for the machine itself.
    sandbox: Option<Sandbox>,
    capacity: Capacity,
    /// `--expedite-rcu`: expedited grace periods while a pass attaches ([`rcu`]).
    expedite_rcu: bool,
    switch: rcu::Switch,
    /// `--ingress-nic`: where clients of published ports come in; the default route's
    /// interface when empty.
    ingress_nics: Vec<String>,
    /// `--egress-nic`: where the labeled containers' outbound connections leave; the default
    /// route's interface when empty.
    egress_nic: Vec<String>,
}

impl RealHost {
    pub fn new(pin_dir: PathBuf, capacity: Capacity, expedite_rcu: bool) -> Self {
        Self {
            pin_dir,
            sandbox: None,
            capacity,
            expedite_rcu,
            switch: rcu::Switch::host(),
            ingress_nics: Vec::new(),
            egress_nic: Vec::new(),
        }
    }

    /// Takes published ports from these NICs (`--ingress-nic`).
    pub fn with_ingress_nics(mut self, nics: Vec<String>) -> Self {
        self.ingress_nics = nics;
        self
    }

    /// Takes the labeled containers' outbound connections to this NIC (`--egress-nic`).
    pub fn with_egress_nic(mut self, nic: Option<String>) -> Self {
        self.egress_nic = nic.into_iter().collect();
        self
    }
}

impl Host for RealHost {
    type Links = PinnedTables;
    type Idle = Unlocked;

    fn interfaces(&self) -> Result<Vec<Interface>> {
        netlink::interfaces(&NetnsPath::host())
    }

    fn endpoint_on(
        &self,
        container: &Container,
        network_id: &str,
        host: &[Interface],
    ) -> Result<Endpoint, EndpointError> {
        docker::find_endpoint(container, network_id, host)
    }

    fn rules(&self) -> RulesetCache {
        RulesetCache::default()
    }

    fn ingress(&self, host: &[Interface], find_nics: bool) -> Result<Ingress> {
        if let Some(sandbox) = &self.sandbox {
            anyhow::bail!(
                "sandbox {}: no NIC reaches an overlay's bridge",
                sandbox.name
            );
        }
        Ingress::of_host(host, find_nics.then_some(&self.ingress_nics))
    }

    fn egress_ways_out(&self, host: &[Interface], nic_ifindexes: &[u32]) -> Result<Ingress> {
        Ingress::of_nic_indexes(host, nic_ifindexes)
    }

    fn egress_default_way_out(&self, host: &[Interface]) -> Result<Ingress> {
        Ingress::of_host(host, Some(&self.egress_nic))
    }

    fn lock_links(&self, idle: Option<Unlocked>, host: &[Interface]) -> Result<PinnedTables> {
        let datapath = match idle {
            Some(unlocked) => unlocked.lock(self.capacity)?,
            None => Datapath::open(&self.pin_dir, self.capacity)?,
        };
        Ok(PinnedTables {
            datapath,
            host: host.to_vec(),
        })
    }

    fn unlock_links(&self, links: PinnedTables) -> Unlocked {
        links.datapath.unlock()
    }

    fn expedite(&self) -> Option<Box<dyn Send + '_>> {
        if !self.expedite_rcu {
            return None;
        }
        match self.switch.expedite() {
            Ok(expedited) => expedited.map(|e| Box::new(e) as Box<dyn Send>),
            Err(err) => {
                warn!("--expedite-rcu: {err:#}; attaching at the kernel's normal pace");
                None
            }
        }
    }

    type Sandbox = RealHost;

    fn sandbox(&self, network: &NetworkView) -> Option<RealHost> {
        if self.sandbox.is_some() {
            return None;
        }
        match Sandbox::of_network(&network.name, &network.id) {
            Ok(sandbox) => Some(RealHost {
                pin_dir: sandbox.pin_dir(&self.pin_dir),
                sandbox: Some(sandbox),
                capacity: self.capacity,
                expedite_rcu: false,
                switch: rcu::Switch::host(),
                ingress_nics: Vec::new(),
                egress_nic: Vec::new(),
            }),
            Err(err) => {
                debug!("{err:#}");
                None
            }
        }
    }

    fn inside<T: Send>(&self, work: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        match &self.sandbox {
            Some(sandbox) => sandbox.run(work),
            None => work(),
        }
    }

    fn exposes_ports(&self) -> bool {
        self.sandbox.is_none()
    }

    fn forget_dead_sandboxes(&self) -> Result<Vec<String>> {
        match self.sandbox {
            Some(_) => Ok(Vec::new()),
            None => overlay::remove_dead_sites(&self.pin_dir),
        }
    }

    fn pinned_sandboxes(&self) -> Vec<String> {
        if self.sandbox.is_some() {
            return Vec::new();
        }
        overlay::sites(&self.pin_dir)
            .into_iter()
            .filter(|site| site.sandbox.is_some())
            .map(|site| site.name)
            .collect()
    }
}
