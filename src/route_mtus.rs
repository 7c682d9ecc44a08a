//! Which of the host's routes the published ports' reply programs must know (`DXDP_ROUTE_MTUS`,
//! `ebpf/programs/src/routes.rs`): forwarding holds a packet to its route's MTU where the route
//! sets one (IPv4: any `mtu`; IPv6: a locked one, `lock mtu`), and to the device's otherwise,
//! which the programs check apart. Where no route sets one, nothing is mirrored and the programs
//! look nothing up; where one does, the whole main table is, so that the longest matching prefix
//! the programs find is the route the host takes.
use std::{collections::BTreeMap, net::IpAddr};

use anyhow::{Result, bail};
use dxdp_common::ingress::DEFAULT_MAX_ROUTES;

use crate::netlink::HostRoute;

/// A prefix as the trie keys it (IPv4 v4-mapped, its length plus 96) and the MTU forwarding
/// holds packets under it to (0: the device's).
pub type RouteMtu = ([u8; 16], u32, u32);

/// The entries to mirror for `routes`: none where no route sets an MTU forwarding heeds.
pub fn entries(routes: &[HostRoute]) -> Result<Vec<RouteMtu>> {
    let heeded = |r: &HostRoute| match r.dst {
        IpAddr::V4(_) => r.mtu,
        IpAddr::V6(_) if r.mtu_locked => r.mtu,
        IpAddr::V6(_) => 0,
    };
    if routes.iter().all(|r| heeded(r) == 0) {
        return Ok(vec![]);
    }
    // Of two routes to one prefix (metrics apart), the host takes the lower metric.
    let mut by_prefix: BTreeMap<([u8; 16], u32), (u32, u32)> = BTreeMap::new();
    for route in routes {
        let (addr, prefix_len) = match route.dst {
            IpAddr::V4(a) => (
                a.to_ipv6_mapped().octets(),
                u32::from(route.prefix_len) + 96,
            ),
            IpAddr::V6(a) => (a.octets(), u32::from(route.prefix_len)),
        };
        let entry = by_prefix
            .entry((addr, prefix_len))
            .or_insert((route.priority, heeded(route)));
        if route.priority < entry.0 {
            *entry = (route.priority, heeded(route));
        }
    }
    if by_prefix.len() > DEFAULT_MAX_ROUTES as usize {
        bail!(
            "the host's main routing table has {} routes, one of them with an MTU: more than the \
             {DEFAULT_MAX_ROUTES} dxdp mirrors for the published ports' replies, so a reply too \
             big for its route could leave; unexpose the ports, or move the routes with an MTU \
             to a device MTU",
            by_prefix.len()
        );
    }
    Ok(by_prefix
        .into_iter()
        .map(|((addr, prefix_len), (_, mtu))| (addr, prefix_len, mtu))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(dst: &str, prefix_len: u8, priority: u32, mtu: u32, locked: bool) -> HostRoute {
        HostRoute {
            dst: dst.parse().unwrap(),
            prefix_len,
            priority,
            mtu,
            mtu_locked: locked,
        }
    }

    #[test]
    fn nothing_is_mirrored_where_no_route_sets_an_mtu_forwarding_heeds() {
        let routes = [
            route("0.0.0.0", 0, 0, 0, false),
            route("10.1.0.0", 16, 0, 0, false),
            // IPv6 forwarding heeds a route's MTU only when it is locked.
            route("fd00::", 64, 256, 1400, false),
        ];
        assert_eq!(entries(&routes).unwrap(), vec![]);
    }

    #[test]
    fn one_route_with_an_mtu_brings_the_whole_table_with_the_lower_metric_winning() {
        let routes = [
            route("0.0.0.0", 0, 0, 0, false),
            route("10.9.0.0", 24, 0, 1400, false),
            route("10.9.0.128", 25, 0, 0, false),
            route("10.8.0.0", 16, 100, 1300, false),
            route("10.8.0.0", 16, 50, 0, false),
            route("fd00::", 64, 256, 1280, true),
        ];
        let got = entries(&routes).unwrap();
        let v4 = |a: &str| {
            a.parse::<std::net::Ipv4Addr>()
                .unwrap()
                .to_ipv6_mapped()
                .octets()
        };
        assert!(got.contains(&(v4("0.0.0.0"), 96, 0)));
        assert!(got.contains(&(v4("10.9.0.0"), 120, 1400)));
        assert!(
            got.contains(&(v4("10.9.0.128"), 121, 0)),
            "a more specific route without an MTU is mirrored too"
        );
        assert!(got.contains(&(v4("10.8.0.0"), 112, 0)), "the lower metric");
        let v6: std::net::Ipv6Addr = "fd00::".parse().unwrap();
        assert!(got.contains(&(v6.octets(), 64, 1280)));
        assert_eq!(got.len(), 5);
    }
}
