//! Types shared by the eBPF programs and the `dxdp` binary.
//!
//! Every struct here is a map key or value, so its layout is ABI: `#[repr(C)]`, no implicit
//! padding (the kernel compares keys bytewise, and padding bytes are undefined), and a size
//! assertion so a change cannot slip through unnoticed. Bump [`ABI_VERSION`] on any change.
#![no_std]

/// Layout version of the pinned maps. A pinned directory written with another version is refused.
pub const ABI_VERSION: u32 = 2;

/// Names of the maps and programs as they appear in the object file and under the pin directory.
pub mod names {
    pub const ENDPOINTS: &str = "DXDP_ENDPOINTS";
    pub const LINKS: &str = "DXDP_LINKS";
    pub const TARGETS: &str = "DXDP_TARGETS";
    pub const COUNTERS: &str = "DXDP_COUNTERS";
    pub const LINK_META: &str = "DXDP_LINK_META";
    pub const META: &str = "DXDP_META";
    pub const TC_PROGRAM: &str = "dxdp_tc";
    pub const XDP_PROGRAM: &str = "dxdp_xdp";
}

/// Default capacities; overridable at load time (the pinned maps keep the size they were made with).
pub const DEFAULT_MAX_ENDPOINTS: u32 = 4096;
pub const DEFAULT_MAX_LINKS: u32 = 16384;

pub type MacAddr = [u8; 6];

/// A directed link: frames arriving on `ingress_ifindex` for `dst_mac` go to the value's ifindex.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LinkKey {
    pub ingress_ifindex: u32,
    pub dst_mac: MacAddr,
    pub _pad: [u8; 2],
}

impl LinkKey {
    pub const fn new(ingress_ifindex: u32, dst_mac: MacAddr) -> Self {
        Self {
            ingress_ifindex,
            dst_mac,
            _pad: [0; 2],
        }
    }
}

/// Where a directed link leads, and how much it carried (per CPU: the map is per-CPU, so the
/// one lookup that finds the target also finds this CPU's counters).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkTarget {
    pub target_ifindex: u32,
    pub _pad: u32,
    pub packets: u64,
    pub bytes: u64,
}

impl LinkTarget {
    pub const fn new(target_ifindex: u32) -> Self {
        Self {
            target_ifindex,
            _pad: 0,
            packets: 0,
            bytes: 0,
        }
    }
}

/// Datapath of a managed interface, stored in [`Endpoint::datapath`].
pub const DATAPATH_TC: u8 = 1;
pub const DATAPATH_XDP: u8 = 2;

/// Fix-ups dxdp applied to the container-side interface, so it can undo exactly those.
pub const FIXUP_GRO_ENABLED: u8 = 1 << 0;
pub const FIXUP_TX_CSUM_DISABLED: u8 = 1 << 1;

/// A managed host-side veth (keyed by its ifindex): the container's MAC it may send from, and what
/// userspace needs to find and restore the container side later.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Inode of the container's network namespace, to recognise it again.
    pub netns_ino: u64,
    /// ifindex of the container-side interface inside its namespace.
    pub peer_ifindex: u32,
    pub mac: MacAddr,
    pub datapath: u8,
    pub fixups: u8,
    pub _reserved: u32,
}

/// Per-CPU counters of one managed interface.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub redirected_packets: u64,
    pub redirected_bytes: u64,
    pub passed_packets: u64,
    pub passed_bytes: u64,
    /// A link matched but its target device is gone: the frame took the bridge instead.
    pub fallback_packets: u64,
    /// Source MAC was not the container's own: never redirected.
    pub spoofed_packets: u64,
}

/// Identity of a link in [`LinkMeta`]: the two host ifindexes, lower first.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LinkMetaKey {
    pub low_ifindex: u32,
    pub high_ifindex: u32,
}

pub const ORIGIN_MANUAL: u8 = 1;
pub const ORIGIN_WATCH: u8 = 2;
pub const NAME_LEN: usize = 64;

/// What userspace remembers about a link (names for `status`, who made it). Never read by the
/// datapath.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkMeta {
    pub datapath: u8,
    pub origin: u8,
    pub _pad: [u8; 6],
    pub created_unix_secs: u64,
    /// Names of the endpoints on the low and high ifindex, and of the network, NUL-padded UTF-8.
    pub low_name: [u8; NAME_LEN],
    pub high_name: [u8; NAME_LEN],
    pub network: [u8; NAME_LEN],
}

/// Single entry of the META array: the ABI version the pinned maps were created with.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub abi_version: u32,
    pub _reserved: u32,
}

const _: () = {
    assert!(core::mem::size_of::<LinkKey>() == 12);
    assert!(core::mem::size_of::<LinkTarget>() == 24);
    assert!(core::mem::size_of::<Endpoint>() == 24);
    assert!(core::mem::size_of::<Counters>() == 48);
    assert!(core::mem::size_of::<LinkMetaKey>() == 8);
    assert!(core::mem::size_of::<LinkMeta>() == 16 + 3 * NAME_LEN);
    assert!(core::mem::size_of::<Meta>() == 8);
};

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are repr(C), Copy, and have no implicit padding (asserted above).
    unsafe impl aya::Pod for super::LinkKey {}
    unsafe impl aya::Pod for super::LinkTarget {}
    unsafe impl aya::Pod for super::Endpoint {}
    unsafe impl aya::Pod for super::Counters {}
    unsafe impl aya::Pod for super::LinkMetaKey {}
    unsafe impl aya::Pod for super::LinkMeta {}
    unsafe impl aya::Pod for super::Meta {}
}
