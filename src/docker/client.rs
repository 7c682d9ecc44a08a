use std::collections::HashMap;

use anyhow::{Context, Result, anyhow, bail};
use bollard::{
    errors::Error as DockerError,
    models::{ContainerInspectResponse, ContainerStateStatusEnum},
    query_parameters::{EventsOptionsBuilder, ListContainersOptionsBuilder},
};
use futures::{Stream, StreamExt};
use tracing::debug;

use super::podman::{self, Podman};
use crate::{
    netlink::MacAddr,
    plan::{ContainerView, NetworkView},
    rules::keys::{COMPOSE_PROJECT, COMPOSE_SERVICE, ENCRYPTED_OPTION, ICC_OPTION, PREFIX},
};

const BRIDGE_NAME_OPTION: &str = "com.docker.network.bridge.name";

/// A dockerd connection with the API version negotiated, so Debian's 20.10 (API 1.41) works as
/// well as current engines; or rootful Podman's Docker-compatible API (see [`podman`]).
#[derive(Clone)]
pub struct Docker {
    pub(super) client: bollard::Docker,
    /// Set when the engine is Podman.
    podman: Option<Podman>,
}

/// A container as dxdp sees it: the planner's view plus what netns inspection needs.
#[derive(Clone, Debug)]
pub struct Container {
    pub view: ContainerView,
    pub pid: Option<u32>,
    pub status: String,
    pub network_mode: String,
    pub attachments: Vec<NetworkAttachment>,
    /// Its published ports (`docker port`), one per binding.
    pub ports: Vec<PublishedPort>,
    /// Set for a Swarm task of another node, seen on an overlay network this node shares
    /// ([`crate::docker::OverlayTask`]): no process or veth of its own here.
    pub remote: Option<RemoteTask>,
}

/// Where a task of another node is on the overlay networks it shares with this node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteTask {
    /// Its address on each overlay network, by network id.
    pub addrs: Vec<(String, std::net::IpAddr)>,
}

#[derive(Clone, Debug)]
pub struct NetworkAttachment {
    pub network: NetworkView,
    /// The Linux bridge carrying a `bridge` network (docker0, br-<id>).
    pub bridge: Option<String>,
    pub mac: Option<MacAddr>,
    /// Docker's endpoint: a new one each time the container joins the network (a restart,
    /// a reconnect), so it names one incarnation of the veth.
    pub endpoint_id: String,
}

/// Why [`Docker::connect`] failed: the engine runs rootless (refused: its containers have no
/// host-side veth), or it cannot be reached or asked.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Rootless(#[from] podman::Rootless),
    #[error(transparent)]
    Unreachable(#[from] anyhow::Error),
}

impl Docker {
    /// Connects through DOCKER_HOST or /var/run/docker.sock.
    pub async fn connect() -> Result<Self, ConnectError> {
        let client = bollard::Docker::connect_with_defaults()
            .context("cannot reach dockerd (DOCKER_HOST or /var/run/docker.sock)")?
            .negotiate_version()
            .await
            .context(
                "cannot reach dockerd: is it running? (DOCKER_HOST or /var/run/docker.sock)",
            )?;
        let version = client.client_version();
        let api = format!("{}.{}", version.major_version, version.minor_version);
        // The engine's own version, for the log: an old engine is worth knowing about. Podman
        // lists itself among the components.
        let (engine, podman) = match client.version().await {
            Ok(v) => match podman::podman_version(&v) {
                Some(pv) => (format!("Podman {pv}"), Some(Podman::new(pv)?)),
                None => (v.version.unwrap_or_default(), None),
            },
            Err(e) => (format!("unknown ({e})"), None),
        };
        debug!(%api, %engine, "connected to the engine");
        // A rootless engine's containers have no host-side veth to attach to.
        let rootless = match &podman {
            Some(p) => p
                .rootless()
                .await
                .context("cannot ask Podman whether it runs rootless")?,
            None => client.info().await.is_ok_and(|i| podman::rootless(&i)),
        };
        if rootless {
            let name = if podman.is_some() {
                "Podman"
            } else {
                "dockerd"
            };
            return Err(podman::rootless_refusal(name).into());
        }
        Ok(Self { client, podman })
    }

    /// The engine and its API, e.g. "dockerd (API 1.51)" or "Podman 4.3.1 (Docker-compatible
    /// API 1.41)".
    pub fn describe(&self) -> String {
        match &self.podman {
            Some(p) => format!(
                "Podman {} (Docker-compatible API {})",
                p.version,
                self.api_version()
            ),
            None => format!("dockerd (API {})", self.api_version()),
        }
    }

    /// The negotiated API version, e.g. "1.41".
    pub fn api_version(&self) -> String {
        let v = self.client.client_version();
        format!("{}.{}", v.major_version, v.minor_version)
    }

    /// The OCI runtime the engine starts containers with: libpod's for Podman, dockerd's
    /// `DefaultRuntime` otherwise (dockerd reports no version for it).
    pub async fn oci_runtime(&self) -> Result<crate::runtime::OciRuntime> {
        match &self.podman {
            Some(p) => p.oci_runtime().await,
            None => {
                let info = self
                    .client
                    .info()
                    .await
                    .context("cannot ask dockerd for /info")?;
                Ok(crate::runtime::OciRuntime {
                    name: info.default_runtime.unwrap_or_default(),
                    version: String::new(),
                })
            }
        }
    }

    /// Whether the engine is Podman (which has no docker-proxy and no userland-proxy setting).
    pub fn is_podman(&self) -> bool {
        self.podman.is_some()
    }

    /// `docker ps`: the running containers' summaries.
    async fn running_summaries(&self) -> Result<Vec<bollard::models::ContainerSummary>> {
        let options = ListContainersOptionsBuilder::new().all(false).build();
        self.client
            .list_containers(Some(options))
            .await
            .context("cannot list containers")
    }

    /// Names of the running containers that publish a port on the host.
    pub async fn publishing_containers(&self) -> Result<Vec<String>> {
        let list = self.running_summaries().await?;
        Ok(list
            .into_iter()
            .filter(|c| {
                c.ports
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|p| p.public_port.is_some())
            })
            .filter_map(|c| Some(c.names?.first()?.trim_start_matches('/').to_owned()))
            .collect())
    }

    /// Every port a running container publishes on the host, TCP and UDP.
    pub async fn published_ports(&self) -> Result<Vec<PublishedPort>> {
        use bollard::models::PortSummaryTypeEnum;
        let list = self.running_summaries().await?;
        let mut out = Vec::new();
        for c in list {
            let (Some(id), Some(name)) = (c.id, c.names.and_then(|n| n.into_iter().next())) else {
                continue;
            };
            for port in c.ports.unwrap_or_default() {
                let udp = match port.typ {
                    Some(PortSummaryTypeEnum::TCP) => false,
                    Some(PortSummaryTypeEnum::UDP) => true,
                    _ => continue,
                };
                let (Some(host_port), Some(Ok(host_ip))) =
                    (port.public_port, port.ip.as_deref().map(str::parse))
                else {
                    continue;
                };
                out.push(PublishedPort {
                    container: name.trim_start_matches('/').to_owned(),
                    id: id.clone(),
                    host_ip,
                    host_port,
                    container_port: port.private_port,
                    udp,
                });
            }
        }
        out.sort_by(|a, b| {
            (&a.container, a.host_port, a.udp).cmp(&(&b.container, b.host_port, b.udp))
        });
        Ok(out)
    }

    pub async fn ping(&self) -> Result<()> {
        self.client.ping().await?;
        Ok(())
    }

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

    /// Every running container, inspected (those gone between the list and their inspect are
    /// left out: the next event brings them up to date).
    pub async fn running(&self) -> Result<Vec<Container>> {
        let ids: Vec<String> = self
            .running_fingerprints()
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let mut networks = NetworkCache::default();
        let inspected = self.inspect_many(&ids, &mut networks).await?;
        Ok(inspected.into_iter().flatten().collect())
    }

    /// The running containers as one list call gives them: each ID with a fingerprint of what
    /// an inspect would say that can change a link (names, state, each network's endpoint and
    /// MAC). An unchanged fingerprint lets the watch keep its last inspect.
    pub(crate) async fn running_fingerprints(&self) -> Result<Vec<(String, String)>> {
        let options = ListContainersOptionsBuilder::new().all(false).build();
        let summaries = self
            .client
            .list_containers(Some(options))
            .await
            .context("cannot list containers")?;
        Ok(summaries
            .into_iter()
            .filter_map(|s| {
                let id = s.id.clone()?;
                Some((id, fingerprint(&s)))
            })
            .collect())
    }

    /// Several inspects at once (dockerd answers them concurrently), at most `WIDTH` in
    /// flight; in the order of `ids`, `None` for containers gone meanwhile.
    pub(crate) async fn inspect_many(
        &self,
        ids: &[String],
        networks: &mut NetworkCache,
    ) -> Result<Vec<Option<Container>>> {
        const WIDTH: usize = 8;
        let raw: Vec<_> = futures::stream::iter(ids.iter().map(|id| async move {
            match self.client.inspect_container(id, None).await {
                Ok(inspect) => Ok(Some(inspect)),
                Err(e) if not_found(&e) => Ok(None),
                Err(e) => Err(e).context(format!("cannot inspect container {id}")),
            }
        }))
        .buffered(WIDTH)
        .collect()
        .await;
        let mut out = Vec::with_capacity(raw.len());
        for inspect in raw {
            out.push(match inspect? {
                Some(inspect) => Some(self.to_container(inspect, networks).await?),
                None => None,
            });
        }
        Ok(out)
    }

    /// A container by name, ID or unique ID prefix, or compose service name.
    pub async fn find(&self, reference: &str) -> Result<Container> {
        let mut networks = NetworkCache::default();
        match self.client.inspect_container(reference, None).await {
            Ok(inspect) => return self.to_container(inspect, &mut networks).await,
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e).context(format!("cannot inspect container {reference}")),
        }
        let filters = HashMap::from([("label", vec![format!("{COMPOSE_SERVICE}={reference}")])]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let found = self.client.list_containers(Some(options)).await?;
        match found.as_slice() {
            [] => bail!(
                "no container named {reference}: no container has that name, ID prefix or \
                 compose service; check `docker ps -a`"
            ),
            [one] => {
                let id = one.id.clone().unwrap_or_default();
                let inspect = self.client.inspect_container(&id, None).await?;
                self.to_container(inspect, &mut networks).await
            }
            many => {
                let names: Vec<String> = many
                    .iter()
                    .filter_map(|s| s.names.as_ref()?.first().cloned())
                    .map(|n| n.trim_start_matches('/').to_owned())
                    .collect();
                bail!(
                    "compose service {reference} has several containers ({}); name one",
                    names.join(", ")
                )
            }
        }
    }

    async fn to_container(
        &self,
        inspect: ContainerInspectResponse,
        networks: &mut NetworkCache,
    ) -> Result<Container> {
        let id = inspect.id.clone().unwrap_or_default();
        let name = inspect
            .name
            .clone()
            .unwrap_or_default()
            .trim_start_matches('/')
            .to_owned();
        let state = inspect.state.clone().unwrap_or_default();
        let running = state.running.unwrap_or(false);
        let status = state
            .status
            .unwrap_or(ContainerStateStatusEnum::EMPTY)
            .to_string();
        let pid = state
            .pid
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p > 0);
        let mut labels = inspect
            .config
            .as_ref()
            .and_then(|c| c.labels.clone())
            .unwrap_or_default();
        if let Some(service) = labels.get(SWARM_SERVICE_ID).cloned() {
            self.add_service_labels(&service, &mut labels).await;
        }
        let network_mode = inspect
            .host_config
            .as_ref()
            .and_then(|h| h.network_mode.clone())
            .unwrap_or_default();
        let mut attachments = Vec::new();
        for Joined {
            network_name: net_name,
            network_id: net_id,
            mac,
            endpoint_id,
        } in endpoints_of(&inspect)
        {
            let (network, bridge) = networks
                .get(&self.client, self.podman.as_ref(), &net_id, &net_name)
                .await?;
            attachments.push(NetworkAttachment {
                network,
                bridge,
                mac,
                endpoint_id,
            });
        }
        attachments.sort_by(|x, y| x.network.name.cmp(&y.network.name));
        let view = ContainerView {
            id,
            name,
            running,
            compose_project: labels.get(COMPOSE_PROJECT).cloned(),
            compose_service: labels.get(COMPOSE_SERVICE).cloned(),
            labels,
            networks: attachments.iter().map(|a| a.network.clone()).collect(),
        };
        let ports = published_of(&inspect, &view);
        Ok(Container {
            view,
            pid,
            status,
            network_mode,
            attachments,
            ports,
            remote: None,
        })
    }
}

/// The bindings of `NetworkSettings.Ports` (`"80/tcp": [{"HostIp": "0.0.0.0", "HostPort":
/// "8080"}]`): TCP and UDP only, an empty host address read as all of IPv4 (Podman writes it
/// so), a binding without a host port (exposed, not published) left out.
fn published_of(inspect: &ContainerInspectResponse, view: &ContainerView) -> Vec<PublishedPort> {
    let Some(ports) = inspect
        .network_settings
        .as_ref()
        .and_then(|n| n.ports.as_ref())
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (spec, bindings) in ports {
        let Some((port, proto)) = spec.split_once('/') else {
            continue;
        };
        let (Ok(container_port), udp) = (port.parse::<u16>(), proto == "udp") else {
            continue;
        };
        if !udp && proto != "tcp" {
            continue;
        }
        for b in bindings.iter().flatten() {
            let host_ip = match b.host_ip.as_deref().map(str::trim) {
                None | Some("") => Ok(std::net::IpAddr::from([0, 0, 0, 0])),
                Some(ip) => ip.parse(),
            };
            let host_port = b.host_port.as_deref().map(str::parse::<u16>);
            if let (Ok(host_ip), Some(Ok(host_port))) = (host_ip, host_port) {
                out.push(PublishedPort {
                    container: view.name.clone(),
                    id: view.id.clone(),
                    host_ip,
                    host_port,
                    container_port,
                    udp,
                });
            }
        }
    }
    out.sort_by_key(|p| (p.host_port, p.udp, p.host_ip));
    out
}

/// A port a running container publishes, as `doctor` checks it (`docker ps`'s PORTS column).
#[derive(Clone, Debug)]
pub struct PublishedPort {
    pub container: String,
    pub id: String,
    /// The host address it is bound to; unspecified (0.0.0.0, ::) for all of that family.
    pub host_ip: std::net::IpAddr,
    pub host_port: u16,
    pub container_port: u16,
    pub udp: bool,
}

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
    async fn add_service_labels(&self, service: &str, labels: &mut HashMap<String, String>) {
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

/// Networks looked up once per snapshot, or for as long as the watch runs: what dxdp reads of
/// a network (name, driver, bridge, ICC option) is fixed when it is created.
#[derive(Default)]
pub struct NetworkCache(HashMap<String, (NetworkView, Option<String>)>);

impl NetworkCache {
    /// Drops a network that was removed.
    pub(crate) fn forget(&mut self, id: &str) {
        self.0.remove(id);
    }

    async fn get(
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

/// What a list entry says that an inspect would turn into a different link: names, state and
/// each network's endpoint ID and MAC (a new endpoint after a restart or reconnect).
fn fingerprint(summary: &bollard::models::ContainerSummary) -> String {
    let mut networks: Vec<String> = summary
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
        .into_iter()
        .flatten()
        .map(|(name, e)| {
            format!(
                "{name}={}/{}/{}",
                e.network_id.as_deref().unwrap_or_default(),
                e.endpoint_id.as_deref().unwrap_or_default(),
                e.mac_address.as_deref().unwrap_or_default()
            )
        })
        .collect();
    networks.sort();
    format!(
        "{:?} {:?} {}",
        summary.names,
        summary.state,
        networks.join(" ")
    )
}

/// A container's place on one network, as its inspect gives it.
#[derive(Debug, PartialEq, Eq)]
struct Joined {
    network_name: String,
    network_id: String,
    mac: Option<MacAddr>,
    endpoint_id: String,
}

/// Where a container is on each network it is on, from the per-network
/// endpoint settings only: API 1.52 (Engine 29) drops the top-level
/// `NetworkSettings.MacAddress`/`IPAddress` (one value for the default bridge only), so nothing
/// reads them. Endpoints without a network ID (not attached yet) are left out.
fn endpoints_of(inspect: &ContainerInspectResponse) -> Vec<Joined> {
    let Some(networks) = inspect
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
    else {
        return Vec::new();
    };
    networks
        .iter()
        .filter_map(|(name, endpoint)| {
            let id = endpoint.network_id.as_deref().filter(|i| !i.is_empty())?;
            Some(Joined {
                network_name: name.clone(),
                network_id: id.to_owned(),
                mac: endpoint.mac_address.as_deref().and_then(parse_mac),
                endpoint_id: endpoint.endpoint_id.clone().unwrap_or_default(),
            })
        })
        .collect()
}

fn not_found(e: &DockerError) -> bool {
    matches!(
        e,
        DockerError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

fn parse_mac(s: &str) -> Option<MacAddr> {
    let bytes: Vec<u8> = s
        .split(':')
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    bytes.try_into().ok()
}

impl Container {
    /// Why this container cannot be linked at all, if it cannot.
    pub fn unlinkable(&self) -> Option<String> {
        let name = &self.view.name;
        if !self.view.running {
            return Some(format!(
                "container {name} is not running (status {}); start it first",
                self.status
            ));
        }
        let mode = self.network_mode.as_str();
        if let Some(owner) = mode.strip_prefix("container:") {
            // A Podman pod's members share the namespace of the pod's infra container.
            let short = &owner[..owner.len().min(12)];
            return Some(format!(
                "container {name} uses network mode container:{owner}: it shares that \
                 container's network namespace (in a Podman pod, the pod's infra container); \
                 link container {short} instead"
            ));
        }
        if mode == "host" || mode == "none" {
            return Some(format!(
                "container {name} uses network mode {mode}; dxdp links containers attached to \
                 bridge networks"
            ));
        }
        if self.pid.is_none() {
            return Some(format!("container {name} has no process to inspect"));
        }
        None
    }

    pub fn attachment(&self, network_id: &str) -> Result<&NetworkAttachment> {
        self.attachments
            .iter()
            .find(|a| a.network.id == network_id)
            .ok_or_else(|| {
                anyhow!(
                    "container {} is not on network {network_id}",
                    self.view.name
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::{Event, Joined, endpoints_of, event_of, parse_mac, published_of};

    /// An Engine 28.5 inspect of a container on a user-defined network, in the shape API 1.52
    /// gives it: the top-level `NetworkSettings.MacAddress`, `IPAddress` (and the rest of the
    /// default-bridge-only fields) are gone; only the per-network endpoints carry them.
    const INSPECT_1_52: &str = r#"{
      "Id": "6a971f4056db6f1e0d3c8e1a1d2b0e6f0b6a3f7d2c1e9b8a7f6e5d4c3b2a1908",
      "Name": "/dxt-rec-c",
      "State": {"Status": "running", "Running": true, "Pid": 4242},
      "Config": {"Labels": {"dxdp.enable": "true"}},
      "HostConfig": {"NetworkMode": "dxt-rec"},
      "NetworkSettings": {
        "SandboxID": "0f4c3b2a19087f6e5d4c",
        "SandboxKey": "/var/run/docker/netns/0f4c3b2a1908",
        "Ports": {},
        "Networks": {
          "dxt-rec": {
            "IPAMConfig": null, "Links": null, "Aliases": null,
            "MacAddress": "d6:44:95:34:8e:6f",
            "DriverOpts": null, "GwPriority": 0,
            "NetworkID": "53d14924c787c63386dd531eac63cc37e69d10d0b42414d5c4312fcca2cddc1f",
            "EndpointID": "bc6daf927d0f8f33c62f5073e19591e58ddd14dab08fb0433fd2e1c15c95f68d",
            "Gateway": "10.231.251.1", "IPAddress": "10.231.251.2", "IPPrefixLen": 24,
            "IPv6Gateway": "", "GlobalIPv6Address": "", "GlobalIPv6PrefixLen": 0,
            "DNSNames": ["dxt-rec-c", "6a971f4056db"]
          },
          "not-attached-yet": {"MacAddress": "", "NetworkID": ""}
        }
      }
    }"#;

    #[test]
    fn endpoints_come_from_the_per_network_settings_of_a_1_52_inspect() {
        let inspect = serde_json::from_str(INSPECT_1_52).expect("1.52-style inspect parses");
        assert_eq!(
            endpoints_of(&inspect),
            vec![Joined {
                network_name: "dxt-rec".to_owned(),
                network_id: "53d14924c787c63386dd531eac63cc37e69d10d0b42414d5c4312fcca2cddc1f"
                    .to_owned(),
                mac: Some([0xd6, 0x44, 0x95, 0x34, 0x8e, 0x6f]),
                endpoint_id: "bc6daf927d0f8f33c62f5073e19591e58ddd14dab08fb0433fd2e1c15c95f68d"
                    .to_owned(),
            }]
        );
    }

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

    #[test]
    fn parses_docker_macs() {
        assert_eq!(
            parse_mac("02:42:ac:11:00:02"),
            Some([2, 0x42, 0xac, 0x11, 0, 2])
        );
        assert_eq!(parse_mac(""), None);
        assert_eq!(parse_mac("02:42:ac:11:00"), None);
        assert_eq!(parse_mac("zz:42:ac:11:00:02"), None);
    }

    #[test]
    fn published_ports_are_read_from_the_inspects_port_map() {
        let inspect: bollard::models::ContainerInspectResponse = serde_json::from_str(
            r#"{"Id": "abc", "Name": "/web", "NetworkSettings": {"Ports": {
                "80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8080"},
                           {"HostIp": "::", "HostPort": "8080"}],
                "53/udp": [{"HostIp": "", "HostPort": "5353"}],
                "9000/tcp": null,
                "132/sctp": [{"HostIp": "0.0.0.0", "HostPort": "132"}]
            }}}"#,
        )
        .expect("an inspect");
        let view = crate::plan::ContainerView {
            id: "abc".into(),
            name: "web".into(),
            ..Default::default()
        };
        let got: Vec<String> = published_of(&inspect, &view)
            .iter()
            .map(|p| {
                let proto = if p.udp { "udp" } else { "tcp" };
                format!(
                    "{}:{}->{}/{proto}",
                    p.host_ip, p.host_port, p.container_port
                )
            })
            .collect();
        // Exposed-only (no binding) and SCTP are left out; Podman's empty address is IPv4's all.
        assert_eq!(
            got,
            [
                "0.0.0.0:5353->53/udp",
                "0.0.0.0:8080->80/tcp",
                ":::8080->80/tcp"
            ]
        );
    }
}
