//! Whether the rules accept every packet of a container's outbound connections that the egress
//! fast path (docs/egress.md) would carry, both ways.
//!
//! The fast path carries only packets of connections conntrack holds as established (their
//! first packets took Docker's path, where every rule, the MASQUERADE rule among them, saw
//! them), so the nat tables, which see a connection's first packet only, are not walked: the
//! translation applied is the one conntrack recorded. Every other chain such a packet passes
//! today is: leaving (raw and mangle PREROUTING from the bridge, filter FORWARD with
//! DOCKER-USER, mangle POSTROUTING, the bridge family's prerouting, netdev chains of the veth,
//! the bridge and the NIC) and the replies (the same from the NIC to the bridge). The packets
//! are known to be ESTABLISHED to conntrack (`--ctstate`, nft `ct state`); their destination
//! (leaving) or source (replies) is any address outside the host's container networks, their
//! ports any: a rule that may drop or change some of them blocks.
use std::net::IpAddr;

use super::{
    Ruleset,
    inbound::{device_legs, outside_nets},
    model::{Blocker, CtStates, Family, Flow, Hook, Layer},
};

/// One container's way out through a NIC, as the egress fast path would take it.
#[derive(Clone, Debug)]
pub struct OutboundWay<'a> {
    pub nic: &'a str,
    /// The bridge of the container's network and the container's host-side veth on it.
    pub bridge: &'a str,
    pub veth: &'a str,
    pub container_addr: IpAddr,
    /// The NIC's addresses: the masqueraded source the connections leave with, and the
    /// destination of their replies before conntrack undoes the masquerade.
    pub nic_addrs: &'a [IpAddr],
    /// Prefixes (address, length) no server the fast path reaches is on: the host's container
    /// networks (the route check leaves packets to them to the stack).
    pub remotes_outside: &'a [(IpAddr, u8)],
}

/// Which of the connection's packets a chain sees.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Leg {
    /// From the container, towards the NIC.
    Leaving,
    /// From the NIC, back to the container.
    Returning,
}

/// TCP and UDP, the protocols the fast path carries.
const PROTOCOLS: [u8; 2] = [6, 17];

impl Ruleset {
    /// The rules that keep the egress fast path from taking `way`: empty if every packet of
    /// its established connections, both ways, is provably accepted today. Distinct, in the
    /// order found.
    pub fn outbound_blockers(&self, way: &OutboundWay<'_>) -> Vec<Blocker> {
        let family = if way.container_addr.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        };
        let container = [way.container_addr];
        let host = super::of_family(way.nic_addrs, family);
        // After nat POSTROUTING the source is the NIC's; before it, the container's.
        let either: Vec<IpAddr> = container.iter().chain(&host).copied().collect();
        let outside = outside_nets(way.remotes_outside);
        let veth = self.bridge_port_seen(way.bridge, way.veth, family);
        let mut found = Vec::new();
        for proto in PROTOCOLS {
            let leaving = Flow {
                family,
                src: &container,
                dst_outside: &outside,
                dev_in: Some(way.bridge),
                dev_out: Some(way.nic),
                phys_in: veth,
                proto: Some(proto),
                dst_local: Some(false),
                ct_state: Some(CtStates::ESTABLISHED),
                ..Flow::default()
            };
            let returning = Flow {
                family,
                src_outside: &outside,
                dst: &container,
                dev_in: Some(way.nic),
                dev_out: Some(way.bridge),
                phys_out: veth,
                proto: Some(proto),
                dst_local: Some(false),
                ct_state: Some(CtStates::ESTABLISHED),
                ..Flow::default()
            };
            for table in self.tables.iter().filter(|t| t.families.contains(&family)) {
                // Only what br_netfilter hands them reaches the inet chains from a bridge;
                // routed packets reach them anyway.
                for base in &table.bases {
                    for leg in legs(table.layer, base.hook, &base.devices, way) {
                        let flow = match leg {
                            Leg::Leaving => &leaving,
                            Leg::Returning => &returning,
                        };
                        let sides = Sides {
                            host: &host,
                            either: &either,
                        };
                        let seen = as_seen(flow, leg, (table.layer, base.hook), way, sides);
                        if let Err(blocker) = table.passes(base, &seen)
                            && !found.contains(&blocker)
                        {
                            found.push(blocker);
                        }
                    }
                }
            }
        }
        found
    }
}

/// The legs a (non-nat) base chain sees. A chain bound to devices sees what passes them.
fn legs(layer: Layer, hook: Hook, devices: &[String], way: &OutboundWay<'_>) -> Vec<Leg> {
    match (layer, hook) {
        (Layer::Inet, Hook::Prerouting | Hook::Forward | Hook::Postrouting) => {
            vec![Leg::Leaving, Leg::Returning]
        }
        // The container's frame enters the bridge at its prerouting; the reply leaves the
        // bridge through its postrouting.
        (Layer::Bridge, Hook::Prerouting) => vec![Leg::Leaving],
        (Layer::Bridge, Hook::Postrouting) => vec![Leg::Returning],
        (Layer::Bridge, _) => Vec::new(),
        (_, Hook::Ingress | Hook::Egress) => {
            let (from_nic, from_container) = if hook == Hook::Ingress {
                (Leg::Returning, Leg::Leaving)
            } else {
                (Leg::Leaving, Leg::Returning)
            };
            device_legs(
                devices,
                (way.nic, from_nic),
                (&[way.veth, way.bridge], from_container),
            )
        }
        (_, _) => Vec::new(),
    }
}

/// The addresses a masqueraded packet may carry where the translation is not known to be done
/// or undone yet.
#[derive(Clone, Copy)]
struct Sides<'f> {
    /// The NIC's addresses.
    host: &'f [IpAddr],
    /// The container's address and the NIC's.
    either: &'f [IpAddr],
}

/// `flow` as one hook of one layer sees it: no output device before routing, no input device
/// after it; before routing a reply is still addressed to the host (conntrack undoes the
/// masquerade at nat PREROUTING), after it a leaving packet carries the container's source or
/// the host's (mangle POSTROUTING comes before the masquerade, nft chains may come after). In
/// the bridge family the container's port is the device; a netdev chain's device conditions
/// stay unknown.
fn as_seen<'f>(
    flow: &Flow<'f>,
    leg: Leg,
    (layer, hook): (Layer, Hook),
    way: &OutboundWay<'f>,
    sides: Sides<'f>,
) -> Flow<'f> {
    let mut seen = flow.clone();
    match layer {
        Layer::Netdev => {
            (seen.dev_in, seen.dev_out, seen.phys_in, seen.phys_out) = (None, None, None, None);
        }
        Layer::Bridge => {
            let veth = Some(way.veth);
            (seen.dev_in, seen.dev_out) = match leg {
                Leg::Leaving => (veth, None),
                Leg::Returning => (None, veth),
            };
            (seen.phys_in, seen.phys_out) = (None, None);
            (seen.bridge_in, seen.bridge_out) = (Some(way.bridge), Some(way.bridge));
        }
        Layer::Inet => {}
    }
    let before_routing = matches!(hook, Hook::Prerouting | Hook::Ingress);
    if hook == Hook::Prerouting {
        seen.dev_out = None;
        seen.phys_out = None;
    }
    if hook == Hook::Postrouting {
        seen.dev_in = None;
        seen.phys_in = None;
    }
    if leg == Leg::Returning && before_routing && layer != Layer::Bridge {
        (seen.dst, seen.dst_local) = (sides.host, Some(true));
    }
    if leg == Leg::Leaving && matches!(hook, Hook::Postrouting | Hook::Egress) {
        seen.src = sides.either;
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::super::model::Family;
    use super::*;
    use crate::firewall::{iptables, model::Table};

    /// `iptables-save` of this project's test host (Engine 28.5, docker0 172.17.0.0/16,
    /// netavark's and a disabled ufw's leftover chains), as recorded for the ports' walk.
    const ENGINE_28: &str =
        include_str!("../../tests/fixtures/firewall/iptables-engine-28-published.txt");

    fn ruleset(dump: &str) -> Ruleset {
        let tables: Vec<Table> = iptables::parse("iptables", Family::V4, dump).unwrap();
        Ruleset {
            tables,
            bridge_nf: Some((true, true)),
            bridge_switches: |_| (false, false),
        }
    }

    fn blockers(dump: &str) -> Vec<Blocker> {
        // The recording's container networks.
        let outside = [
            ("172.16.0.0".parse().unwrap(), 12),
            ("10.232.4.0".parse().unwrap(), 24),
        ];
        let nic_addrs = ["192.0.2.10".parse().unwrap()];
        ruleset(dump).outbound_blockers(&OutboundWay {
            nic: "eth0",
            bridge: "br-89ae790ba755",
            veth: "veth1234",
            container_addr: "172.18.0.2".parse().unwrap(),
            nic_addrs: &nic_addrs,
            remotes_outside: &outside,
        })
    }

    #[test]
    fn dockers_own_rules_let_established_connections_out_and_back() {
        assert_eq!(blockers(ENGINE_28), []);
    }

    #[test]
    fn a_docker_user_drop_blocks_naming_the_rule() {
        let dump = ENGINE_28.replace(
            "-A DOCKER-USER -j RETURN",
            "-A DOCKER-USER -d 203.0.113.0/24 -j DROP\n-A DOCKER-USER -j RETURN",
        );
        let found = blockers(&dump);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].chain, "DOCKER-USER");
        assert!(found[0].rule.contains("203.0.113.0/24"), "{found:?}");
    }

    #[test]
    fn rules_on_new_or_invalid_connections_do_not_block() {
        let dump = ENGINE_28.replace(
            "-A DOCKER-USER -j RETURN",
            "-A DOCKER-USER -m conntrack --ctstate INVALID -j DROP\n\
             -A DOCKER-USER -m state --state NEW -j DROP\n-A DOCKER-USER -j RETURN",
        );
        assert_eq!(blockers(&dump), []);
    }

    #[test]
    fn without_the_established_accept_dockers_isolation_drop_blocks_the_replies() {
        let dump = ENGINE_28
            .lines()
            .filter(|l| !l.contains("--ctstate RELATED,ESTABLISHED"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(!blockers(&dump).is_empty());
    }
}
