//! A fake container engine and a fake host for the engine's passes: one [`World`] behind both,
//! which a test changes between passes (behind the engine's back where the test is about a
//! lost event) and reads back to see what the passes did.
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::IpAddr,
    sync::{Arc, Mutex, MutexGuard},
};

use anyhow::{Result, anyhow, bail};

use crate::{
    choice::{Kind, Origin},
    datapath::{EgressRecord, ExistingConnections, ExposedPort, LinkRecord},
    docker::{
        Container, ContainerSource, NetworkAttachment, NetworkCache, OverlayTask, PublishedPort,
    },
    endpoint::Endpoint,
    engine::{EndpointError, Host, Ingress},
    family::Families,
    firewall::{RulesSource, Ruleset, RulesetCache, TcState},
    netlink::Interface,
    netns::NetnsPath,
    plan::{ContainerView, NetworkView},
    ports::{ArrivingMarks, Nic},
};

mod tables;

pub(super) use tables::FakeLinks;

pub(super) const BRIDGE: u32 = 2;
const BRIDGE_NAME: &str = "br-test";
/// The NIC published ports are taken from, and its address.
pub(super) const NIC: u32 = 3;
pub(super) const NIC_ADDR: [u8; 4] = [192, 0, 2, 1];

/// Everything the fakes answer from, and what they counted.
#[derive(Default)]
pub(super) struct World {
    pub(super) containers: Vec<Container>,
    pub(super) interfaces: Vec<Interface>,
    /// Each container's address, by name.
    pub(super) addrs: HashMap<String, IpAddr>,
    /// The pinned links.
    pub(super) links: Vec<LinkRecord>,
    /// The exposed ports.
    pub(super) exposed: Vec<ExposedPort>,
    /// Every unexposure, with what became of its connections.
    pub(super) unexposed: Vec<(u32, ExistingConnections)>,
    /// The egress fast paths (`dxdp egress on`), and the veths each `egress_off` named.
    pub(super) egress: Vec<EgressRecord>,
    pub(super) egress_off: Vec<u32>,
    /// How many times a pass gave the egress programs conntrack's timeouts.
    pub(super) timeouts_followed: usize,
    /// How many times a pass gave the published ports' programs conntrack's TCP switches.
    pub(super) switches_followed: usize,
    /// Installs to fail before one succeeds again.
    pub(super) failing_installs: usize,
    /// Exposures to fail before one succeeds again.
    pub(super) failing_exposures: usize,
    /// Containers whose namespace this process may not enter, by name.
    pub(super) denied: BTreeSet<String>,
    /// `iptables-save` text of the rules, and the nf_tables generation.
    pub(super) rules: String,
    pub(super) generation: u32,
    /// Reading the rules fails (a tool missing, a table it cannot parse).
    pub(super) rules_unreadable: bool,
    /// Counters: container inspects, namespace inspections by container name, full rule reads,
    /// reads of the pinned links.
    pub(super) inspected: Vec<String>,
    pub(super) endpoint_lookups: BTreeMap<String, usize>,
    pub(super) rule_reads: usize,
    pub(super) link_reads: usize,
    /// Overlay networks' sandboxes on this host, by network id: each a world of its own (its
    /// veths, rules and links), answering as [`Host::sandbox`].
    pub(super) sandboxes: BTreeMap<String, Shared>,
    /// This world is a sandbox: it exposes no ports; `gone` once its network went.
    pub(super) is_sandbox: bool,
    pub(super) gone: bool,
    /// Sandboxes whose pinned state [`Host::forget_dead_sandboxes`] removed.
    pub(super) forgotten: Vec<String>,
    /// The tasks every overlay network knows across the swarm (the engine's world), and the
    /// labels of each service's tasks where the engine reads services (a manager).
    pub(super) swarm_tasks: Vec<OverlayTask>,
    pub(super) service_labels: HashMap<String, HashMap<String, String>>,
    /// The addresses of tasks of other nodes that gossip wrote on the VXLAN device (a
    /// sandbox's world).
    pub(super) gossip: BTreeSet<IpAddr>,
}

/// The world, shared by the fakes and the test.
#[derive(Clone, Default)]
pub(super) struct Shared(Arc<Mutex<World>>);

impl Shared {
    pub(super) fn world(&self) -> MutexGuard<'_, World> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

pub(super) const ACCEPT_ALL: &str = "*filter\n:FORWARD ACCEPT [0:0]\nCOMMIT\n";

impl World {
    pub(super) fn new() -> Self {
        Self {
            interfaces: vec![
                Interface {
                    index: BRIDGE,
                    name: BRIDGE_NAME.to_owned(),
                    kind: Some("bridge".to_owned()),
                    mac: Some([2, 0, 0, 0, 0, 0xbb]),
                    up: true,
                    ..Interface::default()
                },
                Interface {
                    index: NIC,
                    name: "nic0".to_owned(),
                    up: true,
                    ..Interface::default()
                },
            ],
            rules: ACCEPT_ALL.to_owned(),
            ..Self::default()
        }
    }

    /// An overlay network's sandbox, empty but for its bridge.
    pub(super) fn sandbox() -> Self {
        Self {
            is_sandbox: true,
            ..Self::new()
        }
    }

    /// Starts a container on the overlay network `network_id`, whose sandbox world is given:
    /// its veth (at `ifindex`) is plugged there, not here.
    pub(super) fn start_on_overlay(
        &mut self,
        name: &str,
        ifindex: u32,
        labels: &[(&str, &str)],
        (network_id, sandbox): (&str, &Shared),
    ) {
        self.start(name, ifindex, labels);
        self.interfaces.retain(|i| i.name != veth(name));
        let c = self.containers.last_mut().expect("just started");
        let overlay = NetworkView {
            id: network_id.to_owned(),
            name: format!("ov-{network_id}"),
            driver: "overlay".to_owned(),
            icc: true,
            encrypted: false,
            routing_mesh: false,
        };
        c.view.networks = vec![overlay.clone()];
        c.attachments[0].network = overlay;
        c.attachments[0].bridge = None;
        let mut inside = sandbox.world();
        inside.plug(name, ifindex);
        inside
            .addrs
            .insert(name.to_owned(), IpAddr::from([10, 0, 0, ifindex as u8]));
    }

    /// Starts a container on the test network with these labels, its host veth at `ifindex`
    /// and its address 10.0.0.`ifindex`.
    pub(super) fn start(&mut self, name: &str, ifindex: u32, labels: &[(&str, &str)]) {
        let network = NetworkView {
            id: "nid".to_owned(),
            name: "net".to_owned(),
            driver: "bridge".to_owned(),
            icc: true,
            encrypted: false,
            routing_mesh: false,
        };
        self.containers.push(Container {
            ports: Vec::new(),
            remote: None,
            view: ContainerView {
                id: format!("id-{name}"),
                name: name.to_owned(),
                running: true,
                labels: labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                compose_project: None,
                compose_service: None,
                networks: vec![network.clone()],
            },
            pid: Some(1000 + ifindex),
            status: "running".to_owned(),
            network_mode: "net".to_owned(),
            attachments: vec![NetworkAttachment {
                network,
                bridge: Some(BRIDGE_NAME.to_owned()),
                mac: Some([2, 0, 0, 0, 0, ifindex as u8]),
                endpoint_id: format!("ep-{name}-{ifindex}"),
            }],
        });
        self.plug(name, ifindex);
        self.addrs
            .insert(name.to_owned(), IpAddr::from([10, 0, 0, ifindex as u8]));
    }

    /// Gives a container's host veth a new ifindex, as a restart would, keeping its Docker
    /// endpoint: only the veth check can tell.
    pub(super) fn replug(&mut self, name: &str, ifindex: u32) {
        self.interfaces.retain(|i| i.name != veth(name));
        self.plug(name, ifindex);
    }

    fn plug(&mut self, name: &str, ifindex: u32) {
        self.interfaces.push(Interface {
            index: ifindex,
            name: veth(name),
            kind: Some("veth".to_owned()),
            master: Some(BRIDGE),
            up: true,
            ..Interface::default()
        });
    }

    /// Publishes a started container's port 80 on `host_port` of every IPv4 address.
    pub(super) fn publish(&mut self, name: &str, host_port: u16) {
        let c = self
            .containers
            .iter_mut()
            .find(|c| c.view.name == name)
            .expect("a started container");
        c.ports.push(PublishedPort {
            container: name.to_owned(),
            id: c.view.id.clone(),
            host_ip: IpAddr::from([0, 0, 0, 0]),
            host_port,
            container_port: 80,
            udp: false,
        });
    }

    /// The exposed ports as `VETH:HOSTPORT->CONTAINER_ADDR:PORT ORIGIN`, sorted.
    pub(super) fn exposures(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .exposed
            .iter()
            .map(|p| {
                format!(
                    "{}:{}->{}:{} {:?}",
                    p.veth_ifindex, p.host_port, p.container_addr, p.container_port, p.origin
                )
            })
            .collect();
        out.sort();
        out
    }

    /// Stops a container: it leaves the engine's list and its veth goes.
    pub(super) fn stop(&mut self, name: &str) {
        self.containers.retain(|c| c.view.name != name);
        self.interfaces.retain(|i| i.name != veth(name));
    }

    /// A link made by hand, as `dxdp link` would pin it.
    pub(super) fn link_by_hand(&mut self, x: u32, y: u32, bypasses_firewall: bool) {
        let mut record = record(x, y, Kind::Tc, Origin::Manual);
        record.bypasses_firewall = bypasses_firewall;
        self.links.push(record);
    }

    /// The pinned links as sorted "low-high origin" strings.
    pub(super) fn pinned(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .links
            .iter()
            .map(|l| format!("{}-{} {:?}", l.low_ifindex, l.high_ifindex, l.origin))
            .collect();
        out.sort();
        out
    }

    fn name_of_veth(&self, ifindex: u32) -> Option<String> {
        let veth = self.interfaces.iter().find(|i| i.index == ifindex)?;
        veth.name.strip_prefix("veth-").map(str::to_owned)
    }
}

fn veth(name: &str) -> String {
    format!("veth-{name}")
}

/// A pinned link between these ifindexes, in either order.
pub(crate) fn record(x: u32, y: u32, kind: Kind, origin: Origin) -> LinkRecord {
    LinkRecord {
        low_ifindex: x.min(y),
        high_ifindex: x.max(y),
        low_name: format!("c{}", x.min(y)),
        high_name: format!("c{}", x.max(y)),
        network: "net".to_owned(),
        datapath: kind,
        origin,
        bypasses_firewall: false,
        families: Families::ALL,
        created_unix_secs: 0,
        low_to_high: Default::default(),
        high_to_low: Default::default(),
    }
}

/// The container engine: lists and inspects [`World::containers`].
pub(super) struct FakeEngine(pub(super) Shared);

impl ContainerSource for FakeEngine {
    async fn running_fingerprints(&self) -> Result<Vec<(String, String)>> {
        let world = self.0.world();
        Ok(world
            .containers
            .iter()
            .map(|c| {
                let endpoints: Vec<&str> = c
                    .attachments
                    .iter()
                    .map(|a| a.endpoint_id.as_str())
                    .collect();
                (c.view.id.clone(), endpoints.join(","))
            })
            .collect())
    }

    async fn inspect_many(
        &self,
        ids: &[String],
        _: &mut NetworkCache,
    ) -> Result<Vec<Option<Container>>> {
        let mut world = self.0.world();
        world.inspected.extend(ids.iter().cloned());
        Ok(ids
            .iter()
            .map(|id| world.containers.iter().find(|c| &c.view.id == id).cloned())
            .collect())
    }

    async fn overlay_tasks(&self, _: &str) -> Result<Vec<OverlayTask>> {
        Ok(self.0.world().swarm_tasks.clone())
    }

    async fn task_labels(&self, service: &str) -> Result<HashMap<String, String>> {
        let world = self.0.world();
        world
            .service_labels
            .get(service)
            .cloned()
            .ok_or_else(|| anyhow!("This node is not a swarm manager"))
    }
}

/// The VXLAN device of a sandbox's world, which tasks of other nodes are reached through.
pub(super) const VXLAN: u32 = 9;

/// The host: interfaces, namespaces, rules and the links table, all from the world.
pub(super) struct FakeHost(pub(super) Shared);

impl Host for FakeHost {
    type Links = FakeLinks;
    type Idle = ();

    fn interfaces(&self) -> Result<Vec<Interface>> {
        Ok(self.0.world().interfaces.clone())
    }

    fn endpoint_on(
        &self,
        container: &Container,
        network_id: &str,
        host: &[Interface],
    ) -> Result<Endpoint, EndpointError> {
        let name = &container.view.name;
        let mut world = self.0.world();
        *world.endpoint_lookups.entry(name.clone()).or_default() += 1;
        if world.denied.contains(name) {
            return Err(EndpointError::Denied(anyhow!(
                "cannot enter the namespace of container {name}: permission denied"
            )));
        }
        let missing = |why: String| EndpointError::Missing(anyhow!(why));
        if let Some(remote) = &container.remote {
            let (_, addr) = remote
                .addrs
                .iter()
                .find(|(n, _)| n == network_id)
                .ok_or_else(|| missing(format!("task {name} is not on {network_id}")))?;
            if !world.gossip.contains(addr) {
                return Err(missing(format!(
                    "task {name} ({addr}): no entry on the VXLAN device yet"
                )));
            }
            let IpAddr::V4(v4) = addr else {
                return Err(missing("IPv4 only here".to_owned()));
            };
            let [a, b, c, d] = v4.octets();
            let mac = [0x02, 0x42, a, b, c, d];
            return Ok(Endpoint {
                label: name.clone(),
                netns: NetnsPath::host(),
                netns_ino: 0,
                ifname: String::new(),
                ifindex: 0,
                mac,
                host_ifname: "vxlan0".to_owned(),
                host_ifindex: dxdp_common::remote_endpoint_id(&mac),
                bridge_ifindex: BRIDGE,
                bridge_name: BRIDGE_NAME.to_owned(),
                addrs: vec![*addr],
                tunnel_ifindex: Some(VXLAN),
            });
        }
        let attachment = container
            .attachment(network_id)
            .map_err(EndpointError::Missing)?;
        let veth = host
            .iter()
            .find(|i| i.name == veth(name))
            .ok_or_else(|| EndpointError::Missing(anyhow!("container {name} has no veth")))?;
        Ok(Endpoint {
            label: name.clone(),
            netns: NetnsPath::of_pid(container.pid.unwrap_or_default()),
            netns_ino: u64::from(container.pid.unwrap_or_default()),
            ifname: "eth0".to_owned(),
            ifindex: 2,
            mac: attachment.mac.unwrap_or_default(),
            host_ifname: veth.name.clone(),
            host_ifindex: veth.index,
            bridge_ifindex: BRIDGE,
            bridge_name: BRIDGE_NAME.to_owned(),
            addrs: world.addrs.get(name).copied().into_iter().collect(),
            tunnel_ifindex: None,
        })
    }

    fn rules(&self) -> RulesetCache {
        RulesetCache::of(Box::new(FakeRules(self.0.clone())))
    }

    fn ingress(&self, _: &[Interface], _: bool) -> Result<Ingress> {
        Ok(Ingress {
            nics: vec![Nic {
                index: NIC,
                name: "nic0".to_owned(),
                addrs: vec![IpAddr::from(NIC_ADDR)],
            }],
            marks: ArrivingMarks::known([(NIC, Some(0))]),
            outside: vec![(IpAddr::from([10, 0, 0, 0]), 24)],
        })
    }

    fn egress_ways_out(&self, host: &[Interface], _: &[u32]) -> Result<Ingress> {
        self.ingress(host, true)
    }

    fn egress_default_way_out(&self, host: &[Interface]) -> Result<Ingress> {
        self.ingress(host, true)
    }

    fn lock_links(&self, _: Option<()>, _: &[Interface]) -> Result<FakeLinks> {
        Ok(FakeLinks(self.0.clone()))
    }

    fn unlock_links(&self, _: FakeLinks) {}

    fn expedite(&self) -> Option<Box<dyn Send + '_>> {
        None
    }

    type Sandbox = FakeHost;

    fn sandbox(&self, network: &NetworkView) -> Option<FakeHost> {
        let world = self.0.world();
        let sandbox = world.sandboxes.get(&network.id)?;
        (!sandbox.world().gone).then(|| FakeHost(sandbox.clone()))
    }

    fn inside<T: Send>(&self, work: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        if self.0.world().gone {
            bail!("network namespace /var/run/docker/netns/1-fake is not there");
        }
        work()
    }

    fn exposes_ports(&self) -> bool {
        !self.0.world().is_sandbox
    }

    fn forget_dead_sandboxes(&self) -> Result<Vec<String>> {
        let mut world = self.0.world();
        let dead: Vec<String> = world
            .sandboxes
            .iter()
            .filter(|(_, s)| s.world().gone)
            .map(|(id, _)| id.clone())
            .collect();
        world.sandboxes.retain(|id, _| !dead.contains(id));
        world.forgotten.extend(dead.iter().cloned());
        Ok(dead)
    }

    fn pinned_sandboxes(&self) -> Vec<String> {
        let world = self.0.world();
        world
            .sandboxes
            .iter()
            .filter(|(_, s)| {
                let inside = s.world();
                !inside.gone && !inside.links.is_empty()
            })
            .map(|(id, _)| crate::overlay::sandbox_name(id))
            .collect()
    }
}

/// The rules: [`World::rules`] at [`World::generation`], with br_netfilter on.
#[derive(Debug)]
struct FakeRules(Shared);

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the test's world")
    }
}

impl RulesSource for FakeRules {
    fn generation(&self) -> Option<u32> {
        Some(self.0.world().generation)
    }

    fn read(&self) -> Result<Ruleset> {
        let mut world = self.0.world();
        if world.rules_unreadable {
            bail!("nft: cannot parse the ruleset");
        }
        world.rule_reads += 1;
        Ok(Ruleset::saved(&world.rules, "", Some((true, true))))
    }

    fn bridge_nf(&self) -> Option<(bool, bool)> {
        Some((true, true))
    }

    fn traffic_control(&self) -> Result<TcState> {
        Ok(TcState::default())
    }
}
