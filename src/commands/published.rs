//! `doctor`'s view of published ports: for each, whether the host's rules would let a fast path
//! from the NIC straight into the container take it (issue 24), or which rule keeps it on
//! Docker's path.
use std::{collections::HashMap, net::IpAddr};

use anyhow::{Context, Result};

use crate::{
    docker::{self, BridgeNetwork, Docker},
    endpoint::Endpoint,
    firewall::{self, Ruleset, Transport},
    netlink::{self, Interface},
    netns::NetnsPath,
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

/// The container's endpoint on a bridge network with an address of `host_ip`'s family.
pub(super) fn endpoint_of(
    container: &docker::Container,
    host_ip: IpAddr,
    host: &[Interface],
) -> Result<Option<Endpoint>, String> {
    let mut last_error = None;
    for attachment in container.attachments.iter().filter(|a| a.bridge.is_some()) {
        match docker::endpoint_on(container, &attachment.network.id, host) {
            Ok(e) if e.addrs.iter().any(|a| routable_of(a, host_ip)) => return Ok(Some(e)),
            Ok(_) => {}
            Err(e) => last_error = Some(format!("{e:#}")),
        }
    }
    last_error.map_or(Ok(None), Err)
}

pub(super) fn routable_of(addr: &IpAddr, family_of: IpAddr) -> bool {
    match (addr, family_of) {
        (IpAddr::V4(_), IpAddr::V4(_)) => true,
        (IpAddr::V6(a), IpAddr::V6(_)) => !a.is_unicast_link_local(),
        _ => false,
    }
}

/// The interface of the host's default route, IPv4's first: where clients come from.
pub(super) fn default_route_interface() -> Option<String> {
    let v4 = std::fs::read_to_string("/proc/net/route").ok()?;
    let from_v4 = v4.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&"00000000") && f.get(7) == Some(&"00000000")).then(|| f[0].to_owned())
    });
    from_v4.or_else(|| {
        let v6 = std::fs::read_to_string("/proc/net/ipv6_route").ok()?;
        v6.lines().find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let default =
                f.first().is_some_and(|d| d.chars().all(|c| c == '0')) && f.get(1) == Some(&"00");
            (default && f.get(9).is_some_and(|d| *d != "lo")).then(|| f[9].to_owned())
        })
    })
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
    let lines = ports
        .iter()
        .map(|path| verdict(rules, &nic, &nic_addrs, &outside, path))
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

fn verdict(
    rules: &Ruleset,
    nic: &str,
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
