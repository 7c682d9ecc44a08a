//! The sources a fast path from the NIC refuses, as prefixes a rule's address match can be
//! compared with.
//!
//! The NIC program leaves a packet from such a source to the stack
//! (`dxdp_common::ingress::refused_source`), so what the rules do to it is Docker's path's
//! business, not the fast path's. A rule that leaves out only these sources therefore leaves
//! out no packet the fast path carries: Docker 28's `! -s fe80::/10` on its IPv6 DNAT still
//! translates every one of them (issue 38).
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Every source `refused_source` refuses, and no other (the test below holds the two together).
pub(super) const REFUSED_SOURCES: [(IpAddr, u8); 7] = [
    (IpAddr::V4(Ipv4Addr::new(0, 0, 0, 0)), 8),
    (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 8),
    // Multicast, the reserved 240/4 and the limited broadcast.
    (IpAddr::V4(Ipv4Addr::new(224, 0, 0, 0)), 3),
    // Unspecified and loopback.
    (IpAddr::V6(Ipv6Addr::UNSPECIFIED), 127),
    (IpAddr::V6(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0)), 8),
    (IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0)), 10),
    (IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0)), 96),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firewall::addr::Prefix;
    use dxdp_common::ingress::refused_source;

    fn refused(ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => refused_source(&a.to_ipv6_mapped().octets(), false),
            IpAddr::V6(a) => refused_source(&a.octets(), true),
        }
    }

    fn in_the_list(ip: IpAddr) -> bool {
        REFUSED_SOURCES
            .iter()
            .any(|&(net, len)| Prefix::new(net, len).unwrap().contains(ip))
    }

    /// A prefix's first and last address, as numbers of the family's width.
    fn ends(net: IpAddr, len: u8) -> (u128, u128, u32) {
        let (first, bits) = match net {
            IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
            IpAddr::V6(a) => (u128::from(a), 128),
        };
        let host_bits = bits - u32::from(len);
        let last = first | u128::MAX.checked_shr(128 - host_bits).unwrap_or(0);
        (first, last, bits)
    }

    fn address(n: u128, bits: u32) -> IpAddr {
        if bits == 32 {
            IpAddr::V4(Ipv4Addr::from(n as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from(n))
        }
    }

    /// Each prefix's first and last address is refused, and the addresses just outside it are
    /// refused exactly when another prefix holds them: the list is the function's set.
    #[test]
    fn the_prefixes_are_the_sources_the_datapath_refuses() {
        for &(net, len) in &REFUSED_SOURCES {
            let (first, last, bits) = ends(net, len);
            let top = u128::MAX >> (128 - bits);
            for inside in [first, last] {
                assert!(refused(address(inside, bits)), "{net}/{len}");
            }
            let neighbours = [
                first.checked_sub(1),
                last.checked_add(1).filter(|n| *n <= top),
            ];
            for n in neighbours.into_iter().flatten() {
                let ip = address(n, bits);
                assert_eq!(refused(ip), in_the_list(ip), "{ip} next to {net}/{len}");
            }
        }
    }
}
