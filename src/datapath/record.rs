//! How the pinned maps spell a link and a managed veth's counters, and how userspace reads them
//! back: the record `status` and the watch see, the fixed-width names, the datapath and origin
//! codes the eBPF programs read.
use std::time::{SystemTime, UNIX_EPOCH};

use dxdp_common::{Counters, DATAPATH_TC, DATAPATH_XDP, LinkMeta, LinkMetaKey, NAME_LEN};

use super::LinkRequest;
use crate::{
    choice::{Kind, Origin},
    family::Families,
};

/// How the pinned maps spell a link's datapath: the codes the eBPF programs read.
impl Kind {
    pub(crate) const fn code(self) -> u8 {
        match self {
            Kind::Tc => DATAPATH_TC,
            Kind::Xdp => DATAPATH_XDP,
        }
    }

    pub(crate) const fn from_code(code: u8) -> Option<Self> {
        match code {
            DATAPATH_TC => Some(Kind::Tc),
            DATAPATH_XDP => Some(Kind::Xdp),
            _ => None,
        }
    }
}

/// How the pinned maps spell who made a link.
impl Origin {
    pub(super) const fn code(self) -> u8 {
        match self {
            Origin::Manual => dxdp_common::ORIGIN_MANUAL,
            Origin::Watch => dxdp_common::ORIGIN_WATCH,
        }
    }

    pub(super) const fn from_code(code: u8) -> Self {
        if code == dxdp_common::ORIGIN_WATCH {
            Origin::Watch
        } else {
            Origin::Manual
        }
    }
}

/// A link as the pinned state records it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LinkRecord {
    pub low_ifindex: u32,
    pub high_ifindex: u32,
    pub low_name: String,
    pub high_name: String,
    pub network: String,
    pub datapath: Kind,
    pub origin: Origin,
    /// Made with the firewall bypassed on purpose; any other link is held to the rules.
    pub bypasses_firewall: bool,
    /// The families the link carries; the others stay on the bridge (a rule may drop them there).
    pub families: Families,
    pub created_unix_secs: u64,
    /// Frames redirected from the low to the high endpoint, and back.
    pub low_to_high: Traffic,
    pub high_to_low: Traffic,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Traffic {
    pub packets: u64,
    pub bytes: u64,
}

impl LinkRecord {
    pub(crate) fn involves(&self, ifindex: u32) -> bool {
        self.low_ifindex == ifindex || self.high_ifindex == ifindex
    }

    /// Whether the link was made between endpoints named `a` and `b`, in either order.
    pub fn between_names(&self, a: &str, b: &str) -> bool {
        (self.low_name == a && self.high_name == b) || (self.low_name == b && self.high_name == a)
    }
}

/// Sum over CPUs of one managed interface's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct InterfaceCounters {
    pub redirected_packets: u64,
    pub redirected_bytes: u64,
    pub passed_packets: u64,
    pub passed_bytes: u64,
    pub fallback_packets: u64,
    pub spoofed_packets: u64,
}

impl From<Counters> for InterfaceCounters {
    fn from(c: Counters) -> Self {
        Self {
            redirected_packets: c.redirected_packets,
            redirected_bytes: c.redirected_bytes,
            passed_packets: c.passed_packets,
            passed_bytes: c.passed_bytes,
            fallback_packets: c.fallback_packets,
            spoofed_packets: c.spoofed_packets,
        }
    }
}

pub(super) fn meta_key(x: u32, y: u32) -> LinkMetaKey {
    LinkMetaKey {
        low_ifindex: x.min(y),
        high_ifindex: x.max(y),
    }
}

pub(super) fn link_meta(req: &LinkRequest<'_>, key: &LinkMetaKey) -> LinkMeta {
    let (low, high) = if req.a.host_ifindex == key.low_ifindex {
        (req.a, req.b)
    } else {
        (req.b, req.a)
    };
    LinkMeta {
        datapath: req.kind.code(),
        origin: req.origin.code(),
        firewall: firewall_code(req.bypass_firewall),
        _pad: [0; 5],
        created_unix_secs: now_unix_secs(),
        low_name: fixed_name(&low.label),
        high_name: fixed_name(&high.label),
        network: fixed_name(req.network),
    }
}

/// What the pinned records say about the firewall: held to the rules, or bypassing them.
pub(super) fn firewall_code(bypass: bool) -> u8 {
    if bypass {
        dxdp_common::FIREWALL_BYPASSED
    } else {
        dxdp_common::FIREWALL_CHECKED
    }
}

/// When a record is made, as the pinned records keep it.
pub(super) fn now_unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub(super) fn to_record(key: &LinkMetaKey, meta: &LinkMeta) -> LinkRecord {
    LinkRecord {
        low_ifindex: key.low_ifindex,
        high_ifindex: key.high_ifindex,
        low_name: unfixed_name(&meta.low_name),
        high_name: unfixed_name(&meta.high_name),
        network: unfixed_name(&meta.network),
        datapath: Kind::from_code(meta.datapath).unwrap_or(Kind::Tc),
        origin: Origin::from_code(meta.origin),
        bypasses_firewall: meta.firewall == dxdp_common::FIREWALL_BYPASSED,
        families: Families::ALL,
        created_unix_secs: meta.created_unix_secs,
        low_to_high: Traffic::default(),
        high_to_low: Traffic::default(),
    }
}

/// Truncates on a character boundary so the stored name stays valid UTF-8.
pub(super) fn fixed_name(name: &str) -> [u8; NAME_LEN] {
    let mut out = [0u8; NAME_LEN];
    let mut end = name.len().min(NAME_LEN);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    out[..end].copy_from_slice(&name.as_bytes()[..end]);
    out
}

pub(super) fn unfixed_name(raw: &[u8; NAME_LEN]) -> String {
    let end = raw.iter().position(|b| *b == 0).unwrap_or(NAME_LEN);
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_truncate_on_char_boundaries() {
        assert_eq!(unfixed_name(&fixed_name("web-1")), "web-1");
        let long = "é".repeat(40); // 80 bytes
        let back = unfixed_name(&fixed_name(&long));
        assert!(back.len() <= NAME_LEN && long.starts_with(&back));
    }

    #[test]
    fn meta_key_is_order_independent() {
        assert_eq!(meta_key(7, 3), meta_key(3, 7));
        assert_eq!(meta_key(7, 3).low_ifindex, 3);
    }
}
