//! `dxdp expose CONTAINER` / `dxdp unexpose CONTAINER`: a container's published ports straight
//! from the NIC into it, and back to Docker's path (issue 24).
use std::{net::IpAddr, path::Path, process::ExitCode};

use anyhow::{Context, Result, bail};

use super::published::{default_route_interface, endpoint_of, routable_of};
use crate::{
    cli::{ExposeArgs, UnexposeArgs},
    datapath::{Capacity, Datapath, ExposedPort, ExposurePlan, Origin, PortMapping},
    docker::{Container, Docker, PublishedPort},
    endpoint::Endpoint,
    firewall::{self, Ruleset, Transport},
    netlink::{self, Interface},
    netns::NetnsPath,
};

/// A NIC clients come in on, with its addresses.
pub(super) struct Nic {
    pub index: u32,
    pub name: String,
    pub addrs: Vec<IpAddr>,
}

/// The NICs named, or the default route's; each must exist and hold an address.
pub(super) fn nics(names: &[String], host: &[Interface]) -> Result<Vec<Nic>> {
    let names = if names.is_empty() {
        vec![default_route_interface().context(
            "no default route to take the NIC from; name the interface clients come in on \
             with --nic IFACE",
        )?]
    } else {
        names.to_vec()
    };
    names
        .into_iter()
        .map(|name| {
            let Some(iface) = host.iter().find(|i| i.name == name) else {
                bail!("--nic {name}: no such interface in the host namespace");
            };
            if iface.is_veth() && iface.master.is_some() || iface.is_bridge() {
                bail!(
                    "--nic {name}: that is a bridge or a bridge port; name the interface \
                     clients come in on"
                );
            }
            let addrs: Vec<IpAddr> = netlink::addresses(&NetnsPath::host(), iface.index)?
                .into_iter()
                .filter(|a| !matches!(a, IpAddr::V6(v6) if v6.is_unicast_link_local()))
                .collect();
            Ok(Nic {
                index: iface.index,
                name,
                addrs,
            })
        })
        .collect()
}

/// The container's published ports as fast-path entries on `nics`, with the endpoint of each
/// family; bindings of a family the container lacks (Docker's `::` beside `0.0.0.0` for an
/// IPv4-only container, served by docker-proxy) and addresses not on these NICs are left out.
pub(super) fn mappings(
    published: &[PublishedPort],
    nics: &[Nic],
    mut endpoint_for: impl FnMut(IpAddr) -> Result<Option<Endpoint>>,
) -> Result<Vec<(PortMapping, Endpoint)>> {
    let mut out = Vec::new();
    for p in published {
        let Some(endpoint) = endpoint_for(p.host_ip)? else {
            continue;
        };
        let Some(&container_addr) = endpoint.addrs.iter().find(|a| routable_of(a, p.host_ip))
        else {
            continue;
        };
        for nic in nics {
            let same_family = |a: &&IpAddr| a.is_ipv4() == p.host_ip.is_ipv4();
            let host_addrs: Vec<IpAddr> = if p.host_ip.is_unspecified() {
                nic.addrs.iter().filter(same_family).copied().collect()
            } else {
                nic.addrs
                    .iter()
                    .filter(|a| **a == p.host_ip)
                    .copied()
                    .collect()
            };
            for host_addr in host_addrs {
                out.push((
                    PortMapping {
                        nic_ifindex: nic.index,
                        nic: nic.name.clone(),
                        host_addr,
                        udp: p.udp,
                        host_port: p.host_port,
                        container_addr,
                        container_port: p.container_port,
                    },
                    endpoint.clone(),
                ));
            }
        }
    }
    Ok(out)
}

/// `PORT/PROTO on NIC (ADDR) → CONTAINER_ADDR:PORT`, as the output and refusals name a port.
pub(super) fn describe(m: &PortMapping) -> String {
    let transport = if m.udp { "udp" } else { "tcp" };
    let to = match m.container_addr {
        IpAddr::V4(a) => format!("{a}:{}", m.container_port),
        IpAddr::V6(a) => format!("[{a}]:{}", m.container_port),
    };
    format!(
        "{}/{transport} on {} ({}) → {to}",
        m.host_port, m.nic, m.host_addr
    )
}

/// The rule that keeps `m` on Docker's path, if one does.
fn blocker(
    rules: &Ruleset,
    outside: &[(IpAddr, u8)],
    m: &PortMapping,
    endpoint: &Endpoint,
) -> Option<String> {
    let port = firewall::PublishedPort {
        nic: &m.nic,
        host_addrs: &[m.host_addr],
        transport: if m.udp {
            Transport::Udp
        } else {
            Transport::Tcp
        },
        host_port: m.host_port,
        container_addr: m.container_addr,
        container_port: m.container_port,
        bridge: &endpoint.bridge_name,
        veth: &endpoint.host_ifname,
        clients_outside: outside,
    };
    let blockers = rules.published_port_blockers(&port);
    if blockers.is_empty() {
        return None;
    }
    // All of them: the operator has to deal with each before the port can be exposed.
    let named: Vec<String> = blockers.iter().map(|b| format!("[{b}]")).collect();
    Some(named.join("; "))
}

struct Found {
    container: Container,
    published: Vec<PublishedPort>,
    outside: Vec<(IpAddr, u8)>,
}

async fn find(reference: &str) -> Result<Found> {
    let docker = Docker::connect().await?;
    let container = docker.find(reference).await?;
    if let Some(why) = container.unlinkable() {
        bail!(why.replace("link", "expose"));
    }
    let published: Vec<PublishedPort> = docker
        .published_ports()
        .await?
        .into_iter()
        .filter(|p| p.id == container.view.id)
        .collect();
    let outside = docker
        .bridge_networks()
        .await?
        .into_iter()
        .flat_map(|n| n.subnets)
        .collect();
    Ok(Found {
        container,
        published,
        outside,
    })
}

/// The container's published ports on `nic_names` (the default route's if empty) as fast-path
/// entries, refused with the rule named where one could drop or change their packets on
/// Docker's path (unless `bypass_firewall`). Changes nothing.
pub(super) fn prepare(
    reference: &str,
    nic_names: &[String],
    bypass_firewall: bool,
    host: &[Interface],
) -> Result<ExposurePlan> {
    let nics = nics(nic_names, host)?;
    let found = super::runtime()?.block_on(find(reference))?;
    let name = found.container.view.name.clone();
    if found.published.is_empty() {
        bail!(
            "container {name} publishes no ports; publish them (docker run -p HOST:CONTAINER) \
             and expose it again"
        );
    }
    let mappings = mappings(&found.published, &nics, |ip| {
        endpoint_of(&found.container, ip, host).map_err(anyhow::Error::msg)
    })?;
    if mappings.is_empty() {
        let on: Vec<&str> = nics.iter().map(|n| n.name.as_str()).collect();
        bail!(
            "none of {name}'s published ports is bound to an address of {} with an address of \
             the container's family; name the NIC that holds the port's address with --nic",
            on.join(", ")
        );
    }
    let endpoint = mappings[0].1.clone();
    if mappings
        .iter()
        .any(|(_, e)| e.host_ifindex != endpoint.host_ifindex)
    {
        bail!(
            "{name}'s published ports lead to more than one of its networks; dxdp exposes a \
             container on one network"
        );
    }
    if !bypass_firewall {
        let rules = Ruleset::read()?;
        for (m, e) in &mappings {
            if let Some(rule) = blocker(&rules, &found.outside, m, e) {
                bail!(
                    "cannot expose {name} port {}: a rule may drop or change its packets on \
                     Docker's path, and the fast path would skip it: {rule}; expose with \
                     --bypass-firewall to skip such rules on purpose",
                    describe(m)
                );
            }
        }
    }
    let gateway_mac = host
        .iter()
        .find(|i| i.index == endpoint.bridge_ifindex)
        .and_then(|i| i.mac)
        .with_context(|| format!("bridge {} has no MAC address", endpoint.bridge_name))?;
    Ok(ExposurePlan {
        container: name,
        endpoint,
        gateway_mac,
        ports: mappings.into_iter().map(|(m, _)| m).collect(),
        origin: Origin::Manual,
        bypass_firewall,
    })
}

pub fn run(pin_dir: &Path, capacity: Capacity, args: ExposeArgs) -> Result<ExitCode> {
    let host = netlink::interfaces(&NetnsPath::host())?;
    let plan = prepare(&args.container, &args.nics, args.bypass_firewall, &host)?;
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    datapath.collect_garbage(&host)?;
    datapath.expose(&plan.exposure())?;
    for m in &plan.ports {
        println!("exposed {} {}", plan.container, describe(m));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn unexpose(pin_dir: &Path, capacity: Capacity, args: UnexposeArgs) -> Result<ExitCode> {
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    let exposed = datapath.exposed()?;
    // By name as recorded, or by the veths of the container Docker knows by this reference
    // (an ID prefix, or a container renamed since).
    let mut veths: Vec<u32> = exposed
        .iter()
        .filter(|p| p.container == args.container)
        .map(|p| p.veth_ifindex)
        .collect();
    if veths.is_empty()
        && let Ok(container) = super::runtime()?
            .block_on(async { Docker::connect().await?.find(&args.container).await })
    {
        let host = netlink::interfaces(&NetnsPath::host())?;
        for a in container.attachments.iter().filter(|a| a.bridge.is_some()) {
            if let Ok(e) = crate::docker::endpoint_on(&container, &a.network.id, &host) {
                veths.push(e.host_ifindex);
            }
        }
    }
    veths.sort_unstable();
    veths.dedup();
    let mut removed: Vec<ExposedPort> = Vec::new();
    for veth in veths {
        removed.extend(datapath.unexpose(veth)?);
    }
    if removed.is_empty() {
        bail!(
            "{} has no exposed ports; `dxdp status` lists those that are",
            args.container
        );
    }
    for p in &removed {
        println!(
            "unexposed {} {}/{} ({}): back on Docker's path",
            p.container, p.host_port, p.protocol, p.host_addr
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(host_ip: &str, udp: bool) -> PublishedPort {
        PublishedPort {
            container: "web".into(),
            id: "abc".into(),
            host_ip: host_ip.parse().unwrap(),
            host_port: 8080,
            container_port: 80,
            udp,
        }
    }

    fn endpoint(addrs: &[&str]) -> Endpoint {
        Endpoint {
            label: "web".into(),
            netns: NetnsPath::host(),
            netns_ino: 1,
            ifname: "eth0".into(),
            ifindex: 2,
            mac: [2, 0, 0, 0, 0, 1],
            host_ifname: "veth1".into(),
            host_ifindex: 9,
            bridge_ifindex: 3,
            bridge_name: "docker0".into(),
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    fn nic(addrs: &[&str]) -> Nic {
        Nic {
            index: 4,
            name: "eth1".into(),
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn an_unspecified_binding_takes_every_address_of_its_family_on_the_nic() {
        let ep = endpoint(&["172.17.0.2", "fe80::1"]);
        let nics = [nic(&["192.0.2.1", "198.51.100.1", "2001:db8::1"])];
        let got = mappings(
            &[published("0.0.0.0", false), published("::", false)],
            &nics,
            |ip| Ok(ip.is_ipv4().then(|| ep.clone())),
        )
        .unwrap();
        let hosts: Vec<String> = got.iter().map(|(m, _)| m.host_addr.to_string()).collect();
        // `::` is docker-proxy's for an IPv4-only container: left out.
        assert_eq!(hosts, ["192.0.2.1", "198.51.100.1"]);
        assert_eq!(got[0].0.container_addr.to_string(), "172.17.0.2");
        assert_eq!(
            describe(&got[0].0),
            "8080/tcp on eth1 (192.0.2.1) → 172.17.0.2:80"
        );
    }

    #[test]
    fn a_binding_to_one_address_takes_only_that_address_if_the_nic_has_it() {
        let ep = endpoint(&["172.17.0.2"]);
        let on_nic = mappings(
            &[published("198.51.100.1", true)],
            &[nic(&["192.0.2.1", "198.51.100.1"])],
            |_| Ok(Some(ep.clone())),
        )
        .unwrap();
        assert_eq!(on_nic.len(), 1);
        assert!(on_nic[0].0.udp);
        assert_eq!(on_nic[0].0.host_addr.to_string(), "198.51.100.1");
        let elsewhere = mappings(
            &[published("203.0.113.9", false)],
            &[nic(&["192.0.2.1"])],
            |_| Ok(Some(ep.clone())),
        )
        .unwrap();
        assert!(elsewhere.is_empty());
    }
}
