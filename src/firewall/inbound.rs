//! Whether the rules accept every packet of one published port, both ways, as a fast path from
//! the NIC straight into the container would carry them (issue 24).
//!
//! Such a path skips nat PREROUTING (Docker's DNAT, which it does itself), conntrack, filter
//! FORWARD and the bridge. So the port's packets are walked through every chain they pass
//! today: arriving on the NIC (raw, mangle and nat PREROUTING, netdev ingress), forwarded to
//! the container after the DNAT (mangle and filter FORWARD, mangle and nat POSTROUTING, the
//! bridge family's postrouting), and the replies (raw and mangle PREROUTING, FORWARD, mangle
//! POSTROUTING, netdev egress; the nat table sees only a connection's first packet). Docker's
//! own `DNAT --to-destination CONTAINER:PORT` for this port is the one translation expected;
//! any other that may match blocks, as do conntrack state, rate limits and source matches
//! that may drop (the walk cannot tell which packets they pick).
use std::{fmt, net::IpAddr};

use super::{
    Ruleset,
    addr::{Net, Prefix},
    model::{Blocker, Family, Flow, Hook, Layer, Mode},
    of_family,
    refused::REFUSED_SOURCES,
};

/// A published port's transport protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

impl Transport {
    fn number(self) -> u8 {
        match self {
            Transport::Tcp => 6,
            Transport::Udp => 17,
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        })
    }
}

/// One published port as a fast path on `nic` would take it.
#[derive(Clone, Debug)]
pub struct PublishedPort<'a> {
    pub nic: &'a str,
    /// The mark the client's packets carry when netfilter first sees them; `None` if unknown
    /// (something on the NIC's ingress may set one). See `ports::arriving_mark`.
    pub arriving_mark: Option<u32>,
    /// The addresses the port is published on: the binding's own, or all of the NIC's.
    pub host_addrs: &'a [IpAddr],
    pub transport: Transport,
    pub host_port: u16,
    pub container_addr: IpAddr,
    pub container_port: u16,
    /// The bridge of the container's network, and the container's host-side veth on it.
    pub bridge: &'a str,
    pub veth: &'a str,
    /// Prefixes (address, length) no client is on: the host's container networks (the sources
    /// the fast path refuses, `REFUSED_SOURCES`, are added). The fast path must leave packets
    /// from them to the stack; Docker's raw PREROUTING drops for other networks' containers
    /// then cannot meet a reply.
    pub clients_outside: &'a [(IpAddr, u8)],
}

impl PublishedPort<'_> {
    /// The DNAT Docker installs for the port, as iptables prints its target.
    fn translation(&self) -> String {
        match self.container_addr {
            IpAddr::V4(a) => format!("{a}:{}", self.container_port),
            IpAddr::V6(a) => format!("[{a}]:{}", self.container_port),
        }
    }
}

/// Which of the port's packets a chain sees.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Leg {
    /// From the client, before the DNAT.
    Arriving,
    /// From the client, after the DNAT, towards the container.
    Forwarded,
    /// From the container back to the client.
    Reply,
}

impl Ruleset {
    /// The rules that keep a fast path from taking `port`: empty if every packet of it, both
    /// ways, is provably accepted today. Distinct, in the order found.
    pub fn published_port_blockers(&self, port: &PublishedPort<'_>) -> Vec<Blocker> {
        let family = if port.container_addr.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        };
        let to = port.translation();
        let host = of_family(port.host_addrs, family);
        let container = [port.container_addr];
        // Nor is a client at a source the fast path refuses (loopback, link-local, multicast…):
        // its packets take Docker's path whatever the rules do to them.
        let outside = outside_nets(port.clients_outside);
        let veth = self.bridge_port_seen(port.bridge, port.veth, family);
        let proto = Some(port.transport.number());
        let arriving = Flow {
            family,
            dst: &host,
            src_outside: &outside,
            dev_in: Some(port.nic),
            proto,
            dport: Some(port.host_port),
            dst_local: Some(true),
            mark: port.arriving_mark,
            expected_dnat: Some(&to),
            ..Flow::default()
        };
        // The same packets after Docker's DNAT, routed to the bridge.
        let forwarded = Flow {
            dst: &container,
            dev_out: Some(port.bridge),
            phys_out: veth,
            dport: Some(port.container_port),
            dst_local: Some(false),
            expected_dnat: None,
            ..arriving.clone()
        };
        let reply = Flow {
            family,
            src: &container,
            dst_outside: &outside,
            dev_in: Some(port.bridge),
            dev_out: Some(port.nic),
            phys_in: veth,
            proto,
            sport: Some(port.container_port),
            dst_local: Some(false),
            ..Flow::default()
        };
        let mut found = Vec::new();
        let mut note = |blocker: Blocker| {
            if !found.contains(&blocker) {
                found.push(blocker);
            }
        };
        let tables = self.tables.iter().filter(|t| t.families.contains(&family));
        if !tables.clone().any(|t| t.has_dnat(&to)) {
            note(Blocker {
                table: format!("{} nat", tool(family)),
                chain: "PREROUTING".to_owned(),
                rule: format!(
                    "no DNAT to {to} for port {}/{}: Docker does not publish it this way",
                    port.host_port, port.transport
                ),
            });
        }
        for table in tables {
            for base in table.bases.iter().chain(&table.nat_bases) {
                for leg in legs(table.layer, base.hook, base.nat, &base.devices, port) {
                    let flow = match leg {
                        Leg::Arriving => &arriving,
                        Leg::Forwarded => &forwarded,
                        Leg::Reply => &reply,
                    };
                    let flow = as_seen(flow, leg, table.layer, base.hook, port);
                    let mode = if base.nat && leg == Leg::Arriving && table.has_dnat(&to) {
                        Mode::Translate
                    } else {
                        Mode::Filter
                    };
                    if let Err(blocker) = table.passes_as(base, &flow, mode) {
                        note(blocker);
                    }
                }
            }
        }
        found
    }
}

/// `prefixes` and the sources the fast paths refuse (loopback, link-local, multicast…), as
/// networks an unknown address of a flow is not on: packets from or to them take Docker's path
/// whatever the rules do to them.
pub(super) fn outside_nets(prefixes: &[(IpAddr, u8)]) -> Vec<Net> {
    prefixes
        .iter()
        .chain(&REFUSED_SOURCES)
        .filter_map(|&(addr, len)| Prefix::new(addr, len).map(Net::Prefix))
        .collect()
}

impl Ruleset {
    /// `veth`, the bridge port a packet of `family` routed through `bridge` crosses, where the
    /// inet chains can know it: under br_netfilter physdev matches see it too.
    pub(super) fn bridge_port_seen<'a>(
        &self,
        bridge: &str,
        veth: &'a str,
        family: Family,
    ) -> Option<&'a str> {
        let nf = self.bridge_nf.is_some_and(|(v4, v6)| {
            let (own4, own6) = (self.bridge_switches)(bridge);
            match family {
                Family::V4 => v4 || own4,
                Family::V6 => v6 || own6,
            }
        });
        Some(veth).filter(|_| nf)
    }
}

fn tool(family: Family) -> &'static str {
    match family {
        Family::V4 => "iptables",
        Family::V6 => "ip6tables",
    }
}

/// The legs of the port's traffic a base chain sees. A chain bound to devices sees what passes
/// them; the nat table only a connection's first packet, which is the client's.
fn legs(
    layer: Layer,
    hook: Hook,
    nat: bool,
    devices: &[String],
    port: &PublishedPort<'_>,
) -> Vec<Leg> {
    let legs: &[Leg] = match (layer, hook) {
        (Layer::Inet, Hook::Prerouting) => &[Leg::Arriving, Leg::Reply],
        (Layer::Inet, Hook::Forward) => &[Leg::Forwarded, Leg::Reply],
        (Layer::Inet, Hook::Postrouting) => &[Leg::Forwarded, Leg::Reply],
        // The routed packet enters the bridge at its output, then postrouting; the reply
        // enters at prerouting and goes up to the host.
        (Layer::Bridge, Hook::Postrouting) => &[Leg::Forwarded],
        (Layer::Bridge, Hook::Prerouting) => &[Leg::Reply],
        (Layer::Bridge, _) => &[],
        // What a device receives (ingress) or sends (egress): the NIC the client's packets and
        // the replies, the bridge and the veth the other way round.
        (_, Hook::Ingress | Hook::Egress) => {
            let (from_nic, from_container) = if hook == Hook::Ingress {
                (Leg::Arriving, Leg::Reply)
            } else {
                (Leg::Reply, Leg::Forwarded)
            };
            return device_legs(
                devices,
                (port.nic, from_nic),
                (&[port.veth, port.bridge], from_container),
            );
        }
        (_, _) => &[],
    };
    legs.iter()
        .copied()
        .filter(|leg| !nat || *leg != Leg::Reply)
        .collect()
}

/// The legs a netdev chain bound to `devices` (any, if empty) sees: `nic`'s leg where it is
/// bound to the NIC, `container`'s where it is bound to the container's veth or bridge.
pub(super) fn device_legs<L>(
    devices: &[String],
    (nic, nic_leg): (&str, L),
    (container, container_leg): (&[&str], L),
) -> Vec<L> {
    let bound =
        |names: &[&str]| devices.is_empty() || devices.iter().any(|d| names.contains(&d.as_str()));
    let mut legs = Vec::new();
    if bound(&[nic]) {
        legs.push(nic_leg);
    }
    if bound(container) {
        legs.push(container_leg);
    }
    legs
}

/// `flow` as one hook of one layer sees it: no output device before routing, no input device
/// after it; in the bridge family the container's port is the device; a netdev chain's
/// device conditions stay unknown.
fn as_seen<'f>(
    flow: &Flow<'f>,
    leg: Leg,
    layer: Layer,
    hook: Hook,
    port: &PublishedPort<'f>,
) -> Flow<'f> {
    let mut seen = flow.clone();
    match layer {
        Layer::Netdev => {
            (seen.dev_in, seen.dev_out, seen.phys_in, seen.phys_out) = (None, None, None, None);
        }
        Layer::Bridge => {
            let veth = Some(port.veth);
            (seen.dev_in, seen.dev_out) = match leg {
                Leg::Reply => (veth, None),
                _ => (None, veth),
            };
            (seen.phys_in, seen.phys_out) = (None, None);
            (seen.bridge_in, seen.bridge_out) = (Some(port.bridge), Some(port.bridge));
        }
        Layer::Inet => {}
    }
    if hook == Hook::Prerouting {
        seen.dev_out = None;
        seen.phys_out = None;
    }
    if hook == Hook::Postrouting {
        seen.dev_in = None;
        seen.phys_in = None;
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firewall::{model::Table, nft};

    /// `iptables-save` on Engine 28.5 (this project's test host) with container 172.18.0.2 on
    /// network br-89ae790ba755 publishing 127.0.0.1:18080→80/tcp, 18081→80/tcp and
    /// 18053→53/udp. Other sessions' networks (10.232.4.0/24 on br-b3f830b43b97) and chains
    /// Podman's netavark and a disabled ufw left behind are part of the recording.
    const PUBLISHED_V4: &str =
        include_str!("../../tests/fixtures/firewall/iptables-engine-28-published.txt");
    const PUBLISHED_V6: &str =
        include_str!("../../tests/fixtures/firewall/ip6tables-engine-28-published.txt");
    const BRIDGE: &str = "br-89ae790ba755";
    /// The host's container networks in the recording.
    const NETWORKS: &[(&str, u8)] = &[("172.18.0.0", 16), ("172.17.0.0", 16), ("10.232.4.0", 24)];

    /// The recording without netavark's leftover chains: Docker's rules as it installs them.
    fn stock(dump: &str) -> String {
        dump.lines()
            .filter(|l| !l.contains("NETAVARK"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn outside() -> Vec<(IpAddr, u8)> {
        NETWORKS
            .iter()
            .map(|(a, l)| (a.parse().unwrap(), *l))
            .collect()
    }

    fn port<'a>(
        host: &'a [IpAddr],
        transport: Transport,
        ports: (u16, u16),
        outside: &'a [(IpAddr, u8)],
    ) -> PublishedPort<'a> {
        PublishedPort {
            nic: "eth0",
            arriving_mark: Some(0),
            host_addrs: host,
            transport,
            host_port: ports.0,
            container_addr: "172.18.0.2".parse().unwrap(),
            container_port: ports.1,
            bridge: BRIDGE,
            veth: "veth0b20480",
            clients_outside: outside,
        }
    }

    fn blockers(v4: &str, transport: Transport, ports: (u16, u16)) -> Vec<String> {
        let rs = Ruleset::saved(v4, PUBLISHED_V6, Some((true, true)));
        let host = ["192.0.2.2".parse().unwrap()];
        let outside = outside();
        rs.published_port_blockers(&port(&host, transport, ports, &outside))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// The stock recording with `line` added after the line that starts with `after`.
    fn with(after: &str, line: &str) -> String {
        let dump = stock(PUBLISHED_V4);
        assert!(dump.contains(after), "{after}");
        dump.replacen(after, &format!("{after}\n{line}"), 1)
    }

    #[test]
    fn dockers_stock_rules_accept_a_published_port_both_ways() {
        let v4 = stock(PUBLISHED_V4);
        assert_eq!(
            blockers(&v4, Transport::Tcp, (18081, 80)),
            [] as [String; 0]
        );
        assert_eq!(
            blockers(&v4, Transport::Udp, (18053, 53)),
            [] as [String; 0]
        );
    }

    #[test]
    fn a_port_published_on_loopback_is_dropped_from_the_nic_today() {
        let v4 = stock(PUBLISHED_V4);
        let rs = Ruleset::saved(&v4, PUBLISHED_V6, Some((true, true)));
        let host = ["127.0.0.1".parse().unwrap()];
        let outside = outside();
        let found = rs.published_port_blockers(&port(&host, Transport::Tcp, (18080, 80), &outside));
        assert_eq!(
            found[0].to_string(),
            "iptables raw chain PREROUTING: -A PREROUTING -d 127.0.0.1/32 ! -i lo -p tcp -m tcp \
             --dport 18080 -j DROP"
        );
    }

    #[test]
    fn a_port_docker_does_not_publish_so_is_refused() {
        let found = blockers(&stock(PUBLISHED_V4), Transport::Tcp, (18082, 80));
        assert_eq!(
            found,
            [
                "iptables nat chain PREROUTING: some packets reach the chain's end without Docker's \
              DNAT to 172.18.0.2:80"
            ]
        );
        let found = blockers(&stock(PUBLISHED_V4), Transport::Tcp, (18081, 8080));
        assert!(
            found[0].contains("no DNAT to 172.18.0.2:8080 for port 18081/tcp"),
            "{found:?}"
        );
        // Published for UDP only.
        let found = blockers(&stock(PUBLISHED_V4), Transport::Tcp, (18053, 53));
        assert!(!found.is_empty());
    }

    /// Netavark masquerades by mark what its own port forwarding marked: the packets of a
    /// Docker port arrive unmarked and meet no rule that marks them, so the rule cannot match.
    #[test]
    fn netavarks_masquerade_by_mark_is_judged_on_the_mark_the_packets_arrive_with() {
        let masq = "iptables nat chain NETAVARK-HOSTPORT-MASQ: -A NETAVARK-HOSTPORT-MASQ -m \
                    comment --comment \"netavark portfw masq mark\" -m mark --mark \
                    0x2000/0x2000 -j MASQUERADE";
        assert_eq!(
            blockers(PUBLISHED_V4, Transport::Tcp, (18081, 80)),
            [] as [String; 0]
        );
        // A live Podman port: its DNAT chain marks its own port's packets, not Docker's.
        let podman = PUBLISHED_V4.replacen(
            ":NETAVARK-HOSTPORT-SETMARK - [0:0]",
            ":NETAVARK-HOSTPORT-SETMARK - [0:0]\n:NETAVARK-DN-1 - [0:0]\n\
             -A NETAVARK-HOSTPORT-DNAT -p tcp -m tcp --dport 9090 -j NETAVARK-DN-1\n\
             -A NETAVARK-DN-1 -s 10.88.0.0/16 -p tcp -m tcp --dport 9090 -j \
             NETAVARK-HOSTPORT-SETMARK\n\
             -A NETAVARK-DN-1 -p tcp -m tcp --dport 9090 -j DNAT --to-destination 10.88.0.2:80",
            1,
        );
        assert!(podman.contains("NETAVARK-DN-1 -s"));
        assert_eq!(
            blockers(&podman, Transport::Tcp, (18081, 80)),
            [] as [String; 0]
        );
        // A rule that may mark Docker's port is refused itself, whatever it marks.
        let marking = PUBLISHED_V4.replacen(
            "-A PREROUTING -m addrtype --dst-type LOCAL -j NETAVARK-HOSTPORT-DNAT",
            "-A PREROUTING -p tcp -j NETAVARK-HOSTPORT-SETMARK\n\
             -A PREROUTING -m addrtype --dst-type LOCAL -j NETAVARK-HOSTPORT-DNAT",
            1,
        );
        let found = blockers(&marking, Transport::Tcp, (18081, 80));
        assert!(
            found
                .iter()
                .any(|b| b.contains("MARK --set-xmark 0x2000/0x2000")),
            "{found:?}"
        );
        // Where something before netfilter may mark (another tool's tc program on the NIC),
        // the mark is unknown and the rule may match.
        let rs = Ruleset::saved(PUBLISHED_V4, PUBLISHED_V6, Some((true, true)));
        let host = ["192.0.2.2".parse().unwrap()];
        let outside = outside();
        let mut unknown = port(&host, Transport::Tcp, (18081, 80), &outside);
        unknown.arriving_mark = None;
        let found: Vec<String> = rs
            .published_port_blockers(&unknown)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found, [masq]);
    }

    #[test]
    fn a_client_on_another_container_network_is_left_out_of_the_walk() {
        // Docker's raw PREROUTING drop for 10.232.4.2 would meet a reply to such a client.
        let rs = Ruleset::saved(&stock(PUBLISHED_V4), PUBLISHED_V6, Some((true, true)));
        let host = ["192.0.2.2".parse().unwrap()];
        let found = rs.published_port_blockers(&port(&host, Transport::Tcp, (18081, 80), &[]));
        assert!(
            found
                .iter()
                .any(|b| b.rule == "-A PREROUTING -d 10.232.4.2/32 ! -i br-b3f830b43b97 -j DROP"),
            "{found:?}"
        );
    }

    #[test]
    fn rules_that_may_drop_the_port_block_it_named_and_others_do_not() {
        let user = "-A FORWARD -j DOCKER-USER";
        let raw = "-A PREROUTING -d 172.18.0.2/32 ! -i br-89ae790ba755 -j DROP";
        // Declarations of the nat table (only it has POSTROUTING here): what follows comes
        // before Docker's jump.
        let nat = ":POSTROUTING ACCEPT [0:0]";
        let cases = [
            (
                user,
                "-A DOCKER-USER -p tcp -m tcp --dport 80 -j DROP",
                false,
            ),
            (user, "-A DOCKER-USER -s 10.9.0.0/16 -j DROP", false),
            (
                user,
                "-A DOCKER-USER -m conntrack --ctstate NEW -j DROP",
                false,
            ),
            (
                user,
                "-A DOCKER-USER -p tcp -m tcp --dport 80 -m limit --limit 100/sec -j RETURN\n\
                 -A DOCKER-USER -p tcp -m tcp --dport 80 -j DROP",
                false,
            ),
            (
                user,
                "-A DOCKER-USER -m hashlimit --hashlimit-above 10/sec --hashlimit-name x -j DROP",
                false,
            ),
            (
                user,
                "-A DOCKER-USER -p tcp -m connlimit --connlimit-above 10 -j REJECT",
                false,
            ),
            (
                user,
                "-A DOCKER-USER -o eth0 -p tcp -m tcp --sport 80 -j DROP",
                false,
            ),
            (
                user,
                "-A DOCKER-USER -p tcp -m multiport --dports 22,80:90 -j DROP",
                false,
            ),
            (
                raw,
                "-A PREROUTING -p tcp -m tcp --dport 18081 -j DROP",
                false,
            ),
            (
                raw,
                "-A PREROUTING -i eth0 -p tcp -m tcp --dport 18000:18100 -j DROP",
                false,
            ),
            (
                nat,
                "-A PREROUTING -p tcp -m tcp --dport 18081 -j DNAT --to-destination 10.0.0.5:80",
                false,
            ),
            (
                nat,
                "-A PREROUTING -p tcp -m tcp --dport 18081 -j REDIRECT --to-ports 81",
                false,
            ),
            // A port match alone also meets replies to a client using that port as its own.
            (
                user,
                "-A DOCKER-USER -p tcp -m tcp --dport 81 -j DROP",
                false,
            ),
            // Not this port, protocol, interface or address.
            (
                user,
                "-A DOCKER-USER -i eth0 -p tcp -m tcp --dport 81 -j DROP",
                true,
            ),
            (user, "-A DOCKER-USER -p udp -j DROP", true),
            (user, "-A DOCKER-USER ! -p tcp -j DROP", true),
            (
                user,
                "-A DOCKER-USER -i eth0 -p tcp -m multiport --dports 22,443 -j DROP",
                true,
            ),
            (user, "-A DOCKER-USER -i eth1 -j DROP", true),
            (
                user,
                "-A DOCKER-USER -s 172.18.0.0/16 -o eth1 -j DROP",
                true,
            ),
            (
                raw,
                "-A PREROUTING -i eth0 -p tcp -m tcp --dport 18082 -j DROP",
                true,
            ),
            (
                nat,
                "-A PREROUTING -p tcp -m tcp --dport 18082 -j DNAT --to-destination 10.0.0.5:80",
                true,
            ),
        ];
        for (after, line, passes) in cases {
            let found = blockers(&with(after, line), Transport::Tcp, (18081, 80));
            assert_eq!(found.is_empty(), passes, "{line}: {found:?}");
            if !passes {
                let last = line.lines().last().unwrap().trim();
                assert!(found[0].ends_with(last), "{line}: {found:?}");
            }
        }
    }

    /// `ip6tables-save` on Engine 28.5 with container fd00:dead:38::2 on the IPv6 network
    /// br-8a73c47aaf27 publishing 18638→80/tcp: Docker's DNAT leaves out link-local clients
    /// (`! -s fe80::/10`), which the fast path refuses anyway (issue 38).
    const PUBLISHED_IPV6: &str =
        include_str!("../../tests/fixtures/firewall/ip6tables-engine-28-published-v6.txt");

    fn ipv6_blockers(v6: &str) -> Vec<String> {
        let rs = Ruleset::saved(&stock(PUBLISHED_V4), v6, Some((true, true)));
        let host = ["2001:db8::2".parse().unwrap()];
        let outside = [("fd00:dead:38::".parse().unwrap(), 64)];
        let p = PublishedPort {
            host_addrs: &host,
            container_addr: "fd00:dead:38::2".parse().unwrap(),
            bridge: "br-8a73c47aaf27",
            veth: "veth6d1a7c0",
            ..port(&host, Transport::Tcp, (18638, 80), &outside)
        };
        rs.published_port_blockers(&p)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn dockers_ipv6_dnat_leaving_out_only_refused_sources_translates_every_carried_packet() {
        assert_eq!(ipv6_blockers(PUBLISHED_IPV6), [] as [String; 0]);
        // Leaving out sources the fast path does carry leaves them untranslated: refused.
        for excluded in ["2001:db8::/32", "fe80::/9", "::/0"] {
            let v6 = PUBLISHED_IPV6.replacen("! -s fe80::/10", &format!("! -s {excluded}"), 1);
            assert_eq!(
                ipv6_blockers(&v6),
                [
                    "ip6tables nat chain PREROUTING: some packets reach the chain's end without \
                     Docker's DNAT to [fd00:dead:38::2]:80"
                ],
                "! -s {excluded}"
            );
        }
    }

    /// A netdev table whose ingress chain on `device` drops TCP to the given ports.
    fn netdev_drop(device: &str, ports: &str, set: &str) -> Vec<Table> {
        let json = format!(
            r#"{{"nftables":[{{"table":{{"family":"netdev","name":"t","handle":1}}}},
            {{"chain":{{"family":"netdev","table":"t","name":"in","handle":1,"type":"filter",
              "hook":"ingress","prio":0,"policy":"accept"}}}},
            {{"rule":{{"family":"netdev","table":"t","chain":"in","handle":2,"expr":[
              {{"match":{{"op":"==","left":{{"payload":{{"protocol":"tcp","field":"dport"}}}},
                "right":{set}}}}},{{"drop":null}}]}}}}]}}"#
        );
        let listing = format!(
            "table netdev t {{ # handle 1\n\tchain in {{ # handle 1\n\t\ttype filter hook \
             ingress device \"{device}\" priority filter; policy accept;\n\t\ttcp dport {ports} \
             drop # handle 2\n\t}}\n}}\n"
        );
        nft::parse(&json, |_, _| false, &nft::Listing::parse(&listing)).unwrap()
    }

    #[test]
    fn a_netdev_ingress_drop_on_the_nic_blocks_its_ports() {
        let host = ["192.0.2.2".parse().unwrap()];
        let outside = outside();
        let p = port(&host, Transport::Tcp, (18081, 80), &outside);
        let cases = [
            ("eth0", "{ 443, 18081 }", r#"{"set":[443,18081]}"#, false),
            ("eth0", "18000-18100", r#"{"range":[18000,18100]}"#, false),
            ("eth0", "443", "443", true),
            ("eth1", "18081", "18081", true),
        ];
        for (device, ports, set, passes) in cases {
            let mut rs = Ruleset::saved(&stock(PUBLISHED_V4), PUBLISHED_V6, Some((true, true)));
            rs.tables.extend(netdev_drop(device, ports, set));
            let found = rs.published_port_blockers(&p);
            assert_eq!(found.is_empty(), passes, "{device} {ports}: {found:?}");
            if !passes {
                assert_eq!(
                    found[0].to_string(),
                    format!("nftables netdev t chain in: tcp dport {ports} drop")
                );
            }
        }
    }
}
