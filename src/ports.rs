//! Published ports as the fast path from the NIC takes them (issue 24, `dxdp expose` and the
//! watch's `dxdp.ingress` label): the NICs clients come in on, each published port as an entry
//! per NIC address, and the rules that keep one on Docker's path.
use std::{
    cell::RefCell,
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use anyhow::{Context, Result, bail};

use crate::{
    datapath::{ExposedPort, PortMapping},
    docker::{self, PublishedPort},
    endpoint::Endpoint,
    firewall::{self, Transport},
    netlink::{self, Interface},
    netns::NetnsPath,
};

/// A NIC clients come in on, with its addresses.
pub struct Nic {
    pub index: u32,
    pub name: String,
    pub addrs: Vec<IpAddr>,
}

/// Each NIC's [`arriving_mark`], asked the first time a firewall walk needs it and kept for
/// the caller's pass, whether the walk is of a port to expose or of one exposed already: asking
/// costs a TCX query and a qdisc dump, and a pass whose containers all bypass the rules asks
/// none.
#[derive(Default)]
pub struct ArrivingMarks(RefCell<BTreeMap<u32, Option<u32>>>);

impl ArrivingMarks {
    /// Marks known already, never asked (the unit tests' NICs).
    pub fn known(marks: impl IntoIterator<Item = (u32, Option<u32>)>) -> Self {
        Self(RefCell::new(marks.into_iter().collect()))
    }

    /// The arriving mark of the NIC `index` (`name`): asked once.
    pub fn of(&self, index: u32, name: &str) -> Option<u32> {
        *self
            .0
            .borrow_mut()
            .entry(index)
            .or_insert_with(|| arriving_mark(index, name))
    }
}

/// The mark a packet from `nic` carries when netfilter first sees it, on Docker's path as on
/// the fast path's: none (0), as the driver made it, unless something on the NIC's ingress
/// before netfilter may set one (`None`: unknown). Netfilter's own mark-setting rules need no
/// account here: the walk refuses any that a port's packets may meet. So a rule matching a mark
/// (netavark's `-m mark --mark 0x2000/0x2000 -j MASQUERADE`, for its own ports) is judged
/// against the mark the packets really have.
pub fn arriving_mark(index: u32, name: &str) -> Option<u32> {
    (!crate::datapath::Datapath::nic_ingress_may_mark(index, name)).then_some(0)
}

/// The NICs named, or the default route's; each must exist and hold an address.
/// `addrs` is the host's addresses as [`host_addresses`] reads them.
pub fn nics(names: &[String], host: &[Interface], addrs: &HostAddresses) -> Result<Vec<Nic>> {
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
            let mut addrs: Vec<IpAddr> = addrs
                .iter()
                .filter(|(index, a, _)| {
                    *index == iface.index
                        && !matches!(a, IpAddr::V6(v6) if v6.is_unicast_link_local())
                })
                .map(|(_, a, _)| *a)
                .collect();
            addrs.sort();
            addrs.dedup();
            Ok(Nic {
                index: iface.index,
                name,
                addrs,
            })
        })
        .collect()
}

/// The prefixes no client of a published port is on: those of the host's bridges (the
/// container networks, whose gateway address the bridge holds with the subnet's length). The
/// fast path leaves packets from them to the stack (it answers only clients routed back through
/// the NIC), so the firewall walk need not consider them.
pub fn container_prefixes(host: &[Interface], addrs: &HostAddresses) -> Vec<(IpAddr, u8)> {
    let bridges: Vec<u32> = host
        .iter()
        .filter(|i| i.is_bridge())
        .map(|i| i.index)
        .collect();
    addrs
        .iter()
        .copied()
        .filter(|(index, addr, _)| {
            bridges.contains(index) && !matches!(addr, IpAddr::V6(a) if a.is_unicast_link_local())
        })
        .map(|(_, addr, len)| (addr, len))
        .collect()
}

/// Every address of the host namespace with its interface and prefix length: one read serves
/// [`nics`] and [`container_prefixes`].
pub type HostAddresses = Vec<(u32, IpAddr, u8)>;

pub fn host_addresses() -> Result<HostAddresses> {
    netlink::prefixes(&NetnsPath::host())
}

/// The container's published ports as fast-path entries on `nics`, with the endpoint of each
/// family; bindings of a family the container lacks (Docker's `::` beside `0.0.0.0` for an
/// IPv4-only container, served by docker-proxy) and addresses not on these NICs are left out.
pub fn mappings(
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
pub fn describe(m: &PortMapping) -> String {
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

/// `m` as the firewall walk takes it (`firewall::Ruleset::published_port_blockers`).
pub fn published_port<'a>(
    m: &'a PortMapping,
    endpoint: &'a Endpoint,
    outside: &'a [(IpAddr, u8)],
    marks: &ArrivingMarks,
) -> firewall::PublishedPort<'a> {
    firewall::PublishedPort {
        arriving_mark: marks.of(m.nic_ifindex, &m.nic),
        nic: &m.nic,
        host_addrs: std::slice::from_ref(&m.host_addr),
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
    }
}

/// The pinned exposures among `exposed` that a rule now keeps on Docker's path, each with the
/// rules in one line: for each veth, the first of its ports found covered (the others are not
/// walked). Exposures made to bypass the rules are skipped. Lazy: a caller that stops at the
/// first error (the watch) walks no further; one that skips errors (`doctor`) goes on with the
/// next port.
pub fn covered_exposures<'a>(
    rules: &'a firewall::RulesetCache,
    exposed: impl IntoIterator<Item = &'a ExposedPort> + 'a,
    host: &'a [Interface],
    outside: &'a [(IpAddr, u8)],
    marks: &'a ArrivingMarks,
) -> impl Iterator<Item = Result<(&'a ExposedPort, String)>> + 'a {
    first_covered_per_veth(exposed, move |p| {
        pinned_port_blockers(rules, p, host, outside, marks)
    })
}

/// [`covered_exposures`] with the walk of one port given: what it skips and when it stops.
fn first_covered_per_veth<'a>(
    exposed: impl IntoIterator<Item = &'a ExposedPort> + 'a,
    mut walk: impl FnMut(&ExposedPort) -> Result<Option<String>> + 'a,
) -> impl Iterator<Item = Result<(&'a ExposedPort, String)>> + 'a {
    let mut covered = BTreeSet::new();
    exposed
        .into_iter()
        .filter(|p| !p.bypasses_firewall)
        .filter_map(move |p| {
            if covered.contains(&p.veth_ifindex) {
                return None;
            }
            match walk(p) {
                Ok(Some(why)) => {
                    covered.insert(p.veth_ifindex);
                    Some(Ok((p, why)))
                }
                Ok(None) => None,
                Err(err) => Some(Err(err)),
            }
        })
}

/// The rules that now keep a pinned exposed port on Docker's path, in one line (`None` if none
/// does, or if its container's veth is gone: garbage collection takes such entries). The same
/// walk as before exposing, on what the pinned record says: a rule added since, or Docker's
/// DNAT for the port gone, is named.
fn pinned_port_blockers(
    rules: &firewall::RulesetCache,
    port: &ExposedPort,
    host: &[Interface],
    outside: &[(IpAddr, u8)],
    marks: &ArrivingMarks,
) -> Result<Option<String>> {
    let name = |index: u32| host.iter().find(|i| i.index == index);
    let Some(veth) = name(port.veth_ifindex) else {
        return Ok(None);
    };
    let bridge = veth.master.and_then(name).map_or("", |b| b.name.as_str());
    let nic = name(port.nic_ifindex).map_or("", |n| n.name.as_str());
    let walked = firewall::PublishedPort {
        arriving_mark: marks.of(port.nic_ifindex, nic),
        nic,
        host_addrs: std::slice::from_ref(&port.host_addr),
        transport: if port.protocol == "udp" {
            Transport::Udp
        } else {
            Transport::Tcp
        },
        host_port: port.host_port,
        container_addr: port.container_addr,
        container_port: port.container_port,
        bridge,
        veth: &veth.name,
        clients_outside: outside,
    };
    Ok(named(&rules.published_port_blockers(&walked)?).map(|rule| {
        format!(
            "port {}/{} on {nic} ({}): {rule}",
            port.host_port, port.protocol, port.host_addr
        )
    }))
}

/// Every rule that keeps a port on Docker's path, in one line; `None` if there is none. All of
/// them: the operator has to deal with each before the port can be exposed.
pub fn named(blockers: &[firewall::Blocker]) -> Option<String> {
    if blockers.is_empty() {
        return None;
    }
    let named: Vec<String> = blockers.iter().map(|b| format!("[{b}]")).collect();
    Some(named.join("; "))
}

/// The container's endpoint on a bridge network with an address of `host_ip`'s family.
pub fn endpoint_of(
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

pub fn routable_of(addr: &IpAddr, family_of: IpAddr) -> bool {
    match (addr, family_of) {
        (IpAddr::V4(_), IpAddr::V4(_)) => true,
        (IpAddr::V6(a), IpAddr::V6(_)) => !a.is_unicast_link_local(),
        _ => false,
    }
}

/// The interface of the host's default route, IPv4's first: where clients come from.
pub fn default_route_interface() -> Option<String> {
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
            tunnel_ifindex: None,
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

    #[test]
    fn a_known_arriving_mark_is_taken_as_is() {
        let ep = endpoint(&["172.17.0.2"]);
        let nics = [nic(&["192.0.2.1"])];
        let marks = ArrivingMarks::known([(4, Some(0x10))]);
        let got = mappings(&[published("0.0.0.0", false)], &nics, |_| {
            Ok(Some(ep.clone()))
        })
        .unwrap();
        let port = published_port(&got[0].0, &got[0].1, &[], &marks);
        assert_eq!(port.arriving_mark, Some(0x10));
    }

    fn exposed(veth: u32, host_port: u16, bypasses_firewall: bool) -> ExposedPort {
        ExposedPort {
            container: format!("c{veth}"),
            veth_ifindex: veth,
            nic_ifindex: 4,
            host_addr: "192.0.2.1".parse().unwrap(),
            protocol: "tcp",
            host_port,
            container_addr: "172.17.0.2".parse().unwrap(),
            container_port: 80,
            origin: crate::choice::Origin::Manual,
            bypasses_firewall,
            created_unix_secs: 0,
            inbound: Default::default(),
            outbound: Default::default(),
            passed_packets: 0,
            refused_packets: 0,
        }
    }

    #[test]
    fn each_veth_is_named_once_for_its_first_covered_port_and_bypassing_ones_are_not_walked() {
        let pinned = [
            exposed(7, 80, false),
            exposed(7, 81, false),
            exposed(7, 82, false),
            exposed(8, 80, true),
            exposed(9, 80, false),
        ];
        let mut walked = Vec::new();
        let found: Vec<(u32, u16, String)> = first_covered_per_veth(&pinned, |p| {
            walked.push((p.veth_ifindex, p.host_port));
            Ok((p.host_port != 80).then(|| format!("rule for {}", p.host_port)))
        })
        .map(|r| r.map(|(p, why)| (p.veth_ifindex, p.host_port, why)))
        .collect::<Result<_>>()
        .unwrap();
        assert_eq!(found, [(7, 81, "rule for 81".to_owned())]);
        // Port 82 of veth 7 is not walked once 81 covered it; veth 8 bypasses the rules.
        assert_eq!(walked, [(7, 80), (7, 81), (9, 80)]);
    }

    #[test]
    fn a_walk_that_fails_stops_a_caller_that_stops_and_not_one_that_skips_it() {
        let pinned = [
            exposed(7, 80, false),
            exposed(7, 81, false),
            exposed(9, 80, false),
        ];
        let walk = |p: &ExposedPort| -> Result<Option<String>> {
            if p.host_port == 80 && p.veth_ifindex == 7 {
                bail!("rules not read");
            }
            Ok(Some("a rule".to_owned()))
        };
        let mut walks = 0;
        let stopped: Result<Vec<_>> = first_covered_per_veth(&pinned, |p| {
            walks += 1;
            walk(p)
        })
        .collect();
        assert!(stopped.is_err());
        assert_eq!(
            walks, 1,
            "collecting into a Result walks no further than the error"
        );
        let skipped: Vec<(u32, u16)> = first_covered_per_veth(&pinned, walk)
            .flatten()
            .map(|(p, _)| (p.veth_ifindex, p.host_port))
            .collect();
        // The failed port's veth is walked on: its next port is named.
        assert_eq!(skipped, [(7, 81), (9, 80)]);
    }
}
