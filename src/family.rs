//! The address families a link carries. The firewall may close one family on the bridge and
//! accept the other (Docker 28 sets ip6tables' `FORWARD` policy to `DROP`, and Podman gives its
//! containers IPv6 link-local addresses even on IPv4-only networks): the closed family's frames
//! then stay on the bridge, where the rules see them, and the open one rides the link.
use std::fmt;

use dxdp_common::{CLOSED_IPV4, CLOSED_IPV6};

/// A set of address families: IPv4 (with ARP) and IPv6 (with neighbour discovery).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Families {
    pub ipv4: bool,
    pub ipv6: bool,
}

impl Families {
    pub const NONE: Self = Self {
        ipv4: false,
        ipv6: false,
    };
    pub const ALL: Self = Self {
        ipv4: true,
        ipv6: true,
    };
    pub const IPV4: Self = Self {
        ipv4: true,
        ipv6: false,
    };
    pub const IPV6: Self = Self {
        ipv4: false,
        ipv6: true,
    };

    /// The families `addrs` hold an address of.
    pub fn of(addrs: &[std::net::IpAddr]) -> Self {
        Self {
            ipv4: addrs.iter().any(|a| a.is_ipv4()),
            ipv6: addrs.iter().any(|a| a.is_ipv6()),
        }
    }

    pub const fn is_empty(self) -> bool {
        !self.ipv4 && !self.ipv6
    }

    pub const fn or(self, other: Self) -> Self {
        Self {
            ipv4: self.ipv4 || other.ipv4,
            ipv6: self.ipv6 || other.ipv6,
        }
    }

    pub const fn and(self, other: Self) -> Self {
        Self {
            ipv4: self.ipv4 && other.ipv4,
            ipv6: self.ipv6 && other.ipv6,
        }
    }

    /// The families of `ALL` not in this set.
    pub const fn others(self) -> Self {
        Self {
            ipv4: !self.ipv4,
            ipv6: !self.ipv6,
        }
    }

    /// What the datapath keeps on the bridge: `LinkTarget::closed`, the families not in this set.
    pub const fn closed_bits(self) -> u8 {
        (if self.ipv4 { 0 } else { CLOSED_IPV4 }) | (if self.ipv6 { 0 } else { CLOSED_IPV6 })
    }

    /// The families a `LinkTarget::closed` byte lets ride the link (unknown bits are ignored).
    pub const fn from_closed_bits(closed: u8) -> Self {
        Self {
            ipv4: closed & CLOSED_IPV4 == 0,
            ipv6: closed & CLOSED_IPV6 == 0,
        }
    }

    /// The names as `status --json` lists them.
    pub fn names(self) -> Vec<&'static str> {
        [(self.ipv4, "ipv4"), (self.ipv6, "ipv6")]
            .into_iter()
            .filter_map(|(has, name)| has.then_some(name))
            .collect()
    }
}

/// "IPv4", "IPv6", "IPv4 and IPv6" or "no family": for sentences.
impl fmt::Display for Families {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match (self.ipv4, self.ipv6) {
            (true, true) => "IPv4 and IPv6",
            (true, false) => "IPv4",
            (false, true) => "IPv6",
            (false, false) => "no family",
        })
    }
}

/// A list of `"ipv4"`, `"ipv6"`: stays readable if a family is ever added.
impl serde::Serialize for Families {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.names())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_bits_round_trip_and_zero_opens_every_family() {
        for f in [
            Families::NONE,
            Families::IPV4,
            Families::IPV6,
            Families::ALL,
        ] {
            assert_eq!(Families::from_closed_bits(f.closed_bits()), f);
        }
        // The padding of the older layout: links made before read as carrying both.
        assert_eq!(Families::from_closed_bits(0), Families::ALL);
        assert_eq!(Families::IPV4.closed_bits(), CLOSED_IPV6);
        assert_eq!(
            serde_json::to_string(&Families::ALL).unwrap(),
            r#"["ipv4","ipv6"]"#
        );
    }
}
