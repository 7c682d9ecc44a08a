//! Address prefixes as firewall rules write them, and how a set of addresses meets one.
use std::net::IpAddr;

use super::tri::Tri;

/// `addr/len`; a bare address is a host prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    pub(super) fn new(addr: IpAddr, len: u8) -> Option<Self> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (len <= max).then_some(Self { addr, len })
    }

    /// `10.0.0.0/8`, `10.1.2.3`, `fd00::/64`, `::1`; iptables-save's dotted masks
    /// (`10.0.0.0/255.0.0.0`) are read too.
    pub(super) fn parse(text: &str) -> Option<Self> {
        let (addr, len) = match text.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(len) => match len.parse::<u8>() {
                Ok(n) => n,
                Err(_) => mask_len(len.parse().ok()?)?,
            },
        };
        Self::new(addr, len)
    }

    fn max_len(&self) -> u8 {
        if self.addr.is_ipv4() { 32 } else { 128 }
    }

    pub(super) fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// The prefix length of a contiguous dotted mask (`255.255.0.0` → 16).
fn mask_len(mask: IpAddr) -> Option<u8> {
    let bits = match mask {
        IpAddr::V4(m) => u128::from(u32::from(m)) << 96,
        IpAddr::V6(m) => u128::from(m),
    };
    let len = bits.leading_ones();
    (bits.checked_shl(len).unwrap_or(0) == 0).then_some(len as u8)
}

/// What an address condition names: a prefix or an inclusive range (nft `a-b`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Net {
    Prefix(Prefix),
    Range(IpAddr, IpAddr),
}

impl Net {
    pub(super) fn contains(&self, ip: IpAddr) -> bool {
        match *self {
            Net::Prefix(p) => p.contains(ip),
            Net::Range(lo, hi) => {
                lo.is_ipv4() == ip.is_ipv4() && hi.is_ipv4() == ip.is_ipv4() && lo <= ip && ip <= hi
            }
        }
    }
}

impl Net {
    /// Whether every address of `self` lies in `outer`.
    pub(super) fn within(&self, outer: &Net) -> bool {
        match (*self, *outer) {
            (Net::Prefix(p), Net::Prefix(o)) => p.len >= o.len && o.contains(p.addr),
            (Net::Prefix(p), Net::Range(..)) => p.len == p.max_len() && outer.contains(p.addr),
            // A prefix or range holds every address between two it holds.
            (Net::Range(lo, hi), o) => o.contains(lo) && o.contains(hi),
        }
    }
}

/// Whether every, none or some of `addrs` fall in any of `nets`. An empty `addrs` is
/// `Maybe`: nothing is known about the packets' addresses then.
pub(super) fn meet(nets: &[Net], addrs: &[IpAddr]) -> Tri {
    let inside = addrs
        .iter()
        .filter(|ip| nets.iter().any(|n| n.contains(**ip)))
        .count();
    match inside {
        _ if addrs.is_empty() => Tri::Maybe,
        0 => Tri::No,
        n if n == addrs.len() => Tri::Yes,
        _ => Tri::Maybe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_the_forms_rules_use() {
        let cases = [
            ("172.18.0.2", Some(("172.18.0.2", 32))),
            ("172.18.0.2/32", Some(("172.18.0.2", 32))),
            ("172.18.0.0/16", Some(("172.18.0.0", 16))),
            ("10.0.0.0/255.0.0.0", Some(("10.0.0.0", 8))),
            ("fd00::/64", Some(("fd00::", 64))),
            ("::1", Some(("::1", 128))),
            ("10.0.0.0/33", None),
            ("10.0.0.0/255.0.255.0", None),
            ("br-1234", None),
        ];
        for (text, want) in cases {
            let got = Prefix::parse(text);
            let want = want.map(|(a, l)| Prefix::new(ip(a), l).unwrap());
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn containment_respects_the_length_and_the_family() {
        let net = Prefix::parse("172.18.0.0/16").unwrap();
        assert!(net.contains(ip("172.18.255.1")));
        assert!(!net.contains(ip("172.19.0.1")));
        assert!(!net.contains(ip("::ffff:172.18.0.1")));
        assert!(Prefix::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(Prefix::parse("::/0").unwrap().contains(ip("fe80::1")));
        assert!(
            !Prefix::parse("fd00::/64")
                .unwrap()
                .contains(ip("fd00:0:0:1::1"))
        );
    }

    #[test]
    fn a_set_meets_prefixes_wholly_partly_or_not() {
        let p = [Net::Prefix(Prefix::parse("172.18.0.2").unwrap())];
        assert_eq!(meet(&p, &[ip("172.18.0.2")]), Tri::Yes);
        assert_eq!(meet(&p, &[ip("172.18.0.3")]), Tri::No);
        assert_eq!(meet(&p, &[ip("172.18.0.2"), ip("172.18.0.3")]), Tri::Maybe);
        assert_eq!(meet(&p, &[]), Tri::Maybe);
        let r = [Net::Range(ip("10.0.0.1"), ip("10.0.0.9"))];
        assert_eq!(meet(&r, &[ip("10.0.0.5")]), Tri::Yes);
        assert_eq!(meet(&r, &[ip("10.0.0.10")]), Tri::No);
        assert_eq!(meet(&r, &[ip("::1")]), Tri::No);
    }
}
