//! `doctor`'s view of published ports: for each, whether the host's rules would let a fast path
//! from the NIC straight into the container take it (issue 24), or which rule keeps it on
//! Docker's path.
use std::{collections::HashMap, net::IpAddr};

use anyhow::{Context, Result};

use crate::{
    docker::{self, BridgeNetwork, Docker},
    endpoint::Endpoint,
    firewall::{self, Ruleset, Transport},
    netlink,
    netns::NetnsPath,
    ports::{arriving_mark, default_route_interface, endpoint_of, routable_of},
};

/// Beyond this many ports, the rest are summed up in one line.
const LISTED: usize = 20;

/// A published port and the container endpoint Docker translates it to.
pub(super) struct PortPath {
    published: docker::PublishedPort,
    /// The container's endpoint with an address of the binding's family, or why there is none.
    endpoint: Result<Endpoint, String>,
}

/// Every published port of the running containers, with its container endpoint.
pub(super) async fn gather(docker: &Docker) -> Result<Vec<PortPath>> {
    let published = docker.published_ports().await?;
    let host = netlink::interfaces(&NetnsPath::host())?;
    let mut containers = HashMap::new();
    let mut out = Vec::new();
    for port in published {
        if !containers.contains_key(&port.id) {
            let found = docker.find(&port.id).await.map_err(|e| format!("{e:#}"));
            containers.insert(port.id.clone(), found);
        }
        let endpoint = match &containers[&port.id] {
            Ok(container) => endpoint_of(container, port.host_ip, &host),
            Err(e) => Err(e.clone()),
        };
        let endpoint = match endpoint {
            Ok(Some(e)) => Ok(e),
            // A binding of the other family than the container's (Docker's `::` beside
            // `0.0.0.0` for an IPv4-only container) is docker-proxy's alone: no fast path.
            Ok(None) => continue,
            Err(e) => Err(e),
        };
        out.push(PortPath {
            published: port,
            endpoint,
        });
    }
    Ok(out)
}

/// One line per port (at most [`LISTED`], then a sum): `Ok(line)` where the rules accept
/// every packet of it, `Err(line)` where a rule keeps it on Docker's path.
pub(super) fn verdicts(
    rules: &Ruleset,
    networks: &[BridgeNetwork],
    ports: &[PortPath],
) -> Result<Vec<Result<String, String>>> {
    let nic = default_route_interface()
        .context("no default route: clients of published ports come from no known interface")?;
    let host = netlink::interfaces(&NetnsPath::host())?;
    let index = host
        .iter()
        .find(|i| i.name == nic)
        .map(|i| i.index)
        .with_context(|| format!("the default route's interface {nic} is gone"))?;
    let nic_addrs = netlink::addresses(&NetnsPath::host(), index)?;
    let outside: Vec<(IpAddr, u8)> = networks.iter().flat_map(|n| n.subnets.clone()).collect();
    let nic = (nic.as_str(), arriving_mark(index, &nic));
    let lines = ports
        .iter()
        .map(|path| verdict(rules, nic, &nic_addrs, &outside, path))
        .collect();
    Ok(summed(lines))
}

/// The first [`LISTED`] lines, and one for the rest: a warning if any of them is.
fn summed(mut lines: Vec<Result<String, String>>) -> Vec<Result<String, String>> {
    if lines.len() > LISTED {
        let rest = lines.split_off(LISTED);
        let refused = rest.iter().filter(|l| l.is_err()).count();
        let summary = format!(
            "and {} more published ports: {} accepted, {refused} stay on Docker's path",
            rest.len(),
            rest.len() - refused
        );
        lines.push(if refused == 0 {
            Ok(summary)
        } else {
            Err(summary)
        });
    }
    lines
}

/// `nic` is the NIC's name and the mark its packets arrive with ([`arriving_mark`]).
fn verdict(
    rules: &Ruleset,
    (nic, arriving_mark): (&str, Option<u32>),
    nic_addrs: &[IpAddr],
    outside: &[(IpAddr, u8)],
    path: &PortPath,
) -> Result<String, String> {
    let p = &path.published;
    let transport = if p.udp {
        Transport::Udp
    } else {
        Transport::Tcp
    };
    let on = match p.host_ip {
        ip if ip.is_unspecified() => String::new(),
        IpAddr::V4(ip) => format!("{ip}:"),
        IpAddr::V6(ip) => format!("[{ip}]:"),
    };
    let name = format!(
        "port {on}{}/{transport} → {}:{}",
        p.host_port, p.container, p.container_port
    );
    let endpoint = match &path.endpoint {
        Ok(e) => e,
        Err(e) => return Err(format!("{name}: cannot find its container endpoint: {e}")),
    };
    let host_addrs: Vec<IpAddr> = if p.host_ip.is_unspecified() {
        nic_addrs.to_vec()
    } else {
        vec![p.host_ip]
    };
    let Some(&container_addr) = endpoint.addrs.iter().find(|a| routable_of(a, p.host_ip)) else {
        return Err(format!(
            "{name}: the container has no address of its family"
        ));
    };
    let port = firewall::PublishedPort {
        nic,
        arriving_mark,
        host_addrs: &host_addrs,
        transport,
        host_port: p.host_port,
        container_addr,
        container_port: p.container_port,
        bridge: &endpoint.bridge_name,
        veth: &endpoint.host_ifname,
        clients_outside: outside,
    };
    let blockers = rules.published_port_blockers(&port);
    match blockers.first() {
        None => Ok(format!("{name}: the rules accept every packet of it")),
        Some(first) => {
            let more = match blockers.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            };
            Err(format!("{name} stays on Docker's path: [{first}]{more}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_ports_are_summed_up_after_the_first_twenty() {
        let few: Vec<Result<String, String>> = (0..3).map(|i| Ok(format!("port {i}"))).collect();
        assert_eq!(summed(few.clone()), few);
        let many = (0..25)
            .map(|i| {
                if i == 22 {
                    Err(format!("port {i}"))
                } else {
                    Ok(format!("port {i}"))
                }
            })
            .collect();
        let lines = summed(many);
        assert_eq!(lines.len(), LISTED + 1);
        assert_eq!(
            lines[LISTED],
            Err("and 5 more published ports: 4 accepted, 1 stay on Docker's path".to_owned())
        );
    }
}
