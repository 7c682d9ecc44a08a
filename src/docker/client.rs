//! The connection to the engine (dockerd, or rootful Podman's compatible API) and the containers
//! it runs: listed, inspected, found by name, ID prefix or compose service.
use std::collections::HashMap;

use anyhow::{Context, Result, anyhow, bail};
use bollard::{
    errors::Error as DockerError,
    models::{ContainerInspectResponse, ContainerStateStatusEnum},
    query_parameters::ListContainersOptionsBuilder,
};
use futures::StreamExt;
use tracing::debug;

use super::{
    NetworkCache, PublishedPort,
    networks::SWARM_SERVICE_ID,
    podman::{self, Podman},
    published::published_of,
};
use crate::{
    netlink::MacAddr,
    plan::{ContainerView, NetworkView},
    rules::keys::{COMPOSE_PROJECT, COMPOSE_SERVICE},
};

/// A dockerd connection with the API version negotiated, so Debian's 20.10 (API 1.41) works as
/// well as current engines; or rootful Podman's Docker-compatible API (see [`podman`]).
#[derive(Clone)]
pub struct Docker {
    pub(super) client: bollard::Docker,
    /// Set when the engine is Podman.
    pub(super) podman: Option<Podman>,
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
    pub(super) async fn running_summaries(&self) -> Result<Vec<bollard::models::ContainerSummary>> {
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

    pub async fn ping(&self) -> Result<()> {
        self.client.ping().await?;
        Ok(())
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

    /// A container by name, ID, compose service name or unique ID prefix, in that order. The
    /// engine's own lookup takes an ID prefix as readily as a name, so a service named like a
    /// hex number ("db", "cafe") could resolve to whichever container's ID starts so: a service
    /// and another container's ID prefix are refused as ambiguous, naming both.
    pub async fn find(&self, reference: &str) -> Result<Container> {
        let mut networks = NetworkCache::default();
        let by_engine = match self.client.inspect_container(reference, None).await {
            Ok(inspect) => Some(inspect),
            Err(e) if not_found(&e) => None,
            Err(e) => return Err(e).context(format!("cannot inspect container {reference}")),
        };
        let named = |inspect: &ContainerInspectResponse| {
            inspect.id.as_deref() == Some(reference)
                || inspect.name.as_deref().map(|n| n.trim_start_matches('/')) == Some(reference)
        };
        let by_engine = match by_engine {
            Some(inspect) if named(&inspect) => {
                return self.to_container(inspect, &mut networks).await;
            }
            by_prefix => by_prefix,
        };
        let filters = HashMap::from([("label", vec![format!("{COMPOSE_SERVICE}={reference}")])]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let found = self.client.list_containers(Some(options)).await?;
        match (found.as_slice(), by_engine) {
            ([], Some(by_prefix)) => self.to_container(by_prefix, &mut networks).await,
            ([], None) => bail!(
                "no container named {reference}: no container has that name, ID prefix or \
                 compose service; check `docker ps -a`"
            ),
            ([one], Some(by_prefix)) if one.id != by_prefix.id => bail!(
                "{reference} is ambiguous: compose service {reference}'s container {} and the \
                 container {} whose ID starts with {reference}; name the container",
                one.names
                    .as_ref()
                    .and_then(|n| n.first())
                    .map_or("?", |n| n.trim_start_matches('/')),
                by_prefix
                    .name
                    .as_deref()
                    .map_or("?", |n| n.trim_start_matches('/'))
            ),
            ([one], _) => {
                let id = one.id.clone().unwrap_or_default();
                let inspect = self.client.inspect_container(&id, None).await?;
                self.to_container(inspect, &mut networks).await
            }
            (many, _) => {
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
    use super::{Joined, endpoints_of, parse_mac};

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
    fn parses_docker_macs() {
        assert_eq!(
            parse_mac("02:42:ac:11:00:02"),
            Some([2, 0x42, 0xac, 0x11, 0, 2])
        );
        assert_eq!(parse_mac(""), None);
        assert_eq!(parse_mac("02:42:ac:11:00"), None);
        assert_eq!(parse_mac("zz:42:ac:11:00:02"), None);
    }
}
