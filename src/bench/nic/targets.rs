//! What the bench's servers need the container to publish, where the clients reach them, and
//! what the host must have for the bench to run.
use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::Path,
    time::Duration,
};

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;

use crate::bench::{
    measure::{self, in_netns, run_bounded},
    wire::ipv4_addrs,
};
use crate::{datapath::PortMapping, endpoint::EndpointSpec, netns::NetnsPath};

/// A server the bench runs in the container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    Redis,
    Nginx,
    Iperf3,
    Sockperf,
}

impl Service {
    pub(super) fn name(self) -> &'static str {
        match self {
            Service::Redis => "redis",
            Service::Nginx => "nginx",
            Service::Iperf3 => "iperf3",
            Service::Sockperf => "sockperf",
        }
    }
}

/// A container port the bench's servers listen on, which the container must publish on the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Need {
    pub service: Service,
    #[serde(rename = "container_port")]
    pub port: u16,
    #[serde(rename = "protocol", serialize_with = "protocol")]
    pub udp: bool,
}

fn protocol<S: serde::Serializer>(udp: &bool, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(if *udp { "udp" } else { "tcp" })
}

/// The fixed mapping: redis, nginx, iperf3 (its control connection, TCP tests and the UDP
/// packet rate, which iperf3 sends to its control port's number) and sockperf's ping-pong.
pub const NEEDS: [Need; 5] = [
    Need {
        service: Service::Redis,
        port: 6379,
        udp: false,
    },
    Need {
        service: Service::Nginx,
        port: 80,
        udp: false,
    },
    Need {
        service: Service::Iperf3,
        port: 5201,
        udp: false,
    },
    Need {
        service: Service::Iperf3,
        port: 5201,
        udp: true,
    },
    Need {
        service: Service::Sockperf,
        port: 11111,
        udp: false,
    },
];

impl Need {
    pub(super) fn proto(&self) -> &'static str {
        if self.udp { "udp" } else { "tcp" }
    }
}

/// Where clients reach a needed container port: its published address and port on the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Target {
    #[serde(flatten)]
    pub need: Need,
    pub host_addr: IpAddr,
    pub host_port: u16,
}

impl Target {
    pub(super) fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host_addr, self.host_port)
    }
}

/// The published address and port of every [`NEEDS`] entry among `ports` (the container's on
/// `nic`, as `expose` would take them), or a refusal naming each one missing.
pub fn targets(container: &str, nic: &str, ports: &[PortMapping]) -> Result<Vec<Target>> {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for need in NEEDS {
        let mut on_nic: Vec<&PortMapping> = ports
            .iter()
            .filter(|m| m.nic == nic && m.container_port == need.port && m.udp == need.udp)
            .collect();
        // IPv4 first: the client namespace's address is.
        on_nic.sort_by_key(|m| !m.host_addr.is_ipv4());
        match on_nic.first() {
            Some(m) => found.push(Target {
                need,
                host_addr: m.host_addr,
                host_port: m.host_port,
            }),
            None => missing.push(format!(
                "{}/{} ({})",
                need.port,
                need.proto(),
                need.service.name()
            )),
        }
    }
    if !missing.is_empty() {
        let example: Vec<String> = NEEDS
            .iter()
            .map(|n| {
                let udp = if n.udp { "/udp" } else { "" };
                format!("-p ADDR:{}:{}{udp}", n.port, n.port)
            })
            .collect();
        bail!(
            "{container} does not publish {} on an address of {nic}; the bench runs its servers \
             on fixed container ports, so publish each on the NIC's address ADDR: {}",
            missing.join(", "),
            example.join(" ")
        );
    }
    let iperf: Vec<&Target> = found
        .iter()
        .filter(|t| t.need.service == Service::Iperf3)
        .collect();
    if let [tcp, udp] = iperf[..]
        && (tcp.host_addr, tcp.host_port) != (udp.host_addr, udp.host_port)
    {
        bail!(
            "{container} publishes 5201/tcp as {} but 5201/udp as {}; iperf3 sends its UDP test \
             to its control connection's address and port, so publish both on the same one",
            tcp.addr(),
            udp.addr()
        );
    }
    Ok(found)
}

/// Every [`NEEDS`] entry on its own port at `addr`: the servers behind the NIC that
/// `bench-egress` runs, which nothing translates on the way.
pub fn server_targets(addr: Ipv4Addr) -> Vec<Target> {
    NEEDS
        .iter()
        .map(|&need| Target {
            need,
            host_addr: IpAddr::V4(addr),
            host_port: need.port,
        })
        .collect()
}

/// The servers' address: the first IPv4 address of their namespace that the host routes
/// through `nic`, as the container's masqueraded connections leave.
pub fn server_addr(server_ns: &NetnsPath, nic: &str) -> Result<Ipv4Addr> {
    let candidates: Vec<Ipv4Addr> = ipv4_addrs(server_ns.path())?
        .into_iter()
        .filter(|(ifname, _)| ifname != "lo")
        .flat_map(|(_, addrs)| addrs)
        .collect();
    for addr in &candidates {
        if route_dev(*addr)?.as_deref() == Some(nic) {
            return Ok(*addr);
        }
    }
    let listed: Vec<String> = candidates.iter().map(ToString::to_string).collect();
    bail!(
        "the host routes none of the servers' addresses ({}) through {nic}; the bench measures \
         connections that leave by the NIC, so give the namespace behind it",
        if listed.is_empty() {
            "none".to_owned()
        } else {
            listed.join(", ")
        }
    )
}

/// The interface the host's route to `addr` leaves by, if it has one.
fn route_dev(addr: Ipv4Addr) -> Result<Option<String>> {
    let mut cmd = in_netns(NetnsPath::host().path(), "ip");
    cmd.args(["-j", "route", "get", &addr.to_string()]);
    let out = run_bounded(cmd, Duration::from_secs(10), "ip route get")?;
    if !out.status.success() {
        return Ok(None);
    }
    let routes: Vec<serde_json::Value> =
        serde_json::from_str(&out.stdout).context("cannot parse `ip -j route get`")?;
    Ok(routes
        .first()
        .and_then(|r| r.get("dev")?.as_str())
        .map(str::to_owned))
}

/// The namespace an endpoint names for `flag` (`whose` namespace, for the message): netns:NAME
/// or pid:PID, and there; a container is refused.
pub fn namespace_of(spec: &EndpointSpec, flag: &str, whose: &str) -> Result<NetnsPath> {
    let netns = match spec {
        EndpointSpec::Netns { name, .. } => NetnsPath::named(name),
        EndpointSpec::Pid { pid, .. } => NetnsPath::of_pid(*pid),
        EndpointSpec::Container { .. } => {
            bail!("{flag} {spec}: name {whose} namespace, netns:NAME or pid:PID")
        }
    };
    if !netns.path().exists() {
        bail!("{flag} {spec}: {} is not there", netns.path().display());
    }
    Ok(netns)
}

/// `targets` at the servers' end of the wire: their address there and their own ports.
pub fn wire_targets(targets: &[Target], server_addr: Ipv4Addr) -> Vec<Target> {
    targets
        .iter()
        .map(|t| Target {
            host_addr: IpAddr::V4(server_addr),
            host_port: t.need.port,
            ..*t
        })
        .collect()
}

pub(super) fn target(targets: &[Target], service: Service) -> Result<Target> {
    targets
        .iter()
        .find(|t| t.need.service == service && !t.need.udp)
        .copied()
        .ok_or_else(|| anyhow!("no published port for {}", service.name()))
}

/// The host tools the bench runs beside [`measure::TOOLS`] (which has redis and sockperf, as
/// `dxdp bench A B` runs them too), each with its Debian package.
const TOOLS: &[(&str, &str)] = &[("nginx", "nginx-light"), ("wrk", "wrk")];

/// The tools missing from `PATH`, with what to install (Debian's package names).
pub fn missing_tools() -> Vec<String> {
    let ours = TOOLS.iter().map(|(tool, package)| {
        (
            *tool,
            format!("apt-get install {package} (scripts/setup.sh installs it)"),
        )
    });
    let shared = measure::TOOLS
        .iter()
        .map(|(tool, hint)| (*tool, (*hint).to_owned()));
    shared
        .chain(ours)
        .filter(|(tool, _)| !measure::on_path(tool))
        .map(|(tool, hint)| format!("{tool}: {hint}"))
        .collect()
}

/// The address the client namespace sends from to `to`: its connections are the ones the
/// bench forgets when it switches the fast path off.
pub fn client_source(client_ns: &Path, to: IpAddr) -> Result<IpAddr> {
    let mut cmd = in_netns(client_ns, "ip");
    cmd.args(["-j", "route", "get", &to.to_string()]);
    let out = run_bounded(cmd, Duration::from_secs(10), "ip route get")?;
    if !out.status.success() {
        bail!(
            "the client namespace {} has no route to {to}: {}",
            client_ns.display(),
            out.stderr.trim()
        );
    }
    let routes: Vec<serde_json::Value> =
        serde_json::from_str(&out.stdout).context("cannot parse `ip -j route get`")?;
    let src = routes
        .first()
        .and_then(|r| r.get("prefsrc")?.as_str())
        .ok_or_else(|| anyhow!("`ip route get {to}` in the client namespace names no source"))?;
    src.parse()
        .with_context(|| format!("bad source address {src:?}"))
}

/// The busiest of `ifaces` (host interfaces) over a second, in packets per second both ways:
/// other traffic through the NIC or the container's veth would be measured with the bench's.
pub fn busiest(ifaces: &[&str]) -> Result<(u64, String)> {
    let rates = measure::per_second(|| {
        let mut out = Vec::new();
        for iface in ifaces {
            let mut sum = 0;
            for way in ["rx", "tx"] {
                let path = format!("/sys/class/net/{iface}/statistics/{way}_packets");
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read {path}"))?;
                sum += text.trim().parse::<u64>().unwrap_or(0);
            }
            out.push(sum);
        }
        Ok(out)
    })?;
    Ok(rates
        .iter()
        .zip(ifaces)
        .map(|(rate, i)| (*rate as u64, (*i).to_owned()))
        .max()
        .unwrap_or_default())
}
