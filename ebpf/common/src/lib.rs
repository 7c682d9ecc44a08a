//! Types shared by the eBPF programs and the `dxdp` binary.
//!
//! Every struct here is a map key or value, so its layout is ABI: `#[repr(C)]`, no implicit
//! padding (the kernel compares keys bytewise, and padding bytes are undefined), and a size
//! assertion so a change cannot slip through unnoticed. Bump [`ABI_VERSION`] on any change.
#![no_std]

/// Layout version of the pinned maps. A pinned directory written with another version is refused.
pub const ABI_VERSION: u32 = 5;

/// The layout before [`Sources`]: the same maps less `DXDP_SOURCES`. A directory of this
/// version is migrated in place (the map is added and filled from each endpoint's namespace).
pub const ABI_VERSION_WITHOUT_SOURCES: u32 = 2;

/// The layout before [`LinkMeta::firewall`]: the byte was padding, always zero, which reads as
/// [`FIREWALL_CHECKED`]. A directory of this version is taken as it is and stamped.
pub const ABI_VERSION_WITHOUT_FIREWALL: u32 = 3;

/// The layout before [`LinkTarget::closed`]: the byte was padding, always zero, which reads as
/// "every family rides the link", what the firewall check of that layout allowed. A directory of
/// this version gets this binary's programs and is stamped; its links stay as they are.
pub const ABI_VERSION_WITHOUT_FAMILIES: u32 = 4;

/// Names of the maps and programs as they appear in the object file and under the pin directory.
pub mod names {
    pub const ENDPOINTS: &str = "DXDP_ENDPOINTS";
    pub const LINKS: &str = "DXDP_LINKS";
    pub const TARGETS: &str = "DXDP_TARGETS";
    pub const COUNTERS: &str = "DXDP_COUNTERS";
    pub const LINK_META: &str = "DXDP_LINK_META";
    pub const SOURCES: &str = "DXDP_SOURCES";
    pub const META: &str = "DXDP_META";
    pub const TUNNEL_PEERS: &str = "DXDP_TUNNEL_PEERS";
    pub const TC_PROGRAM: &str = "dxdp_tc";
    /// On an overlay's VXLAN device: frames from linked tasks of other nodes.
    pub const TUNNEL_PROGRAM: &str = "dxdp_tunnel";
    /// Multi-buffer aware (`xdp.frags`), for Linux 6.6 on.
    pub const XDP_PROGRAM: &str = "dxdp_xdp";
    /// One buffer per frame, for older kernels.
    pub const XDP_PROGRAM_SINGLE_BUFFER: &str = "dxdp_xdp_1buf";
}

/// Default capacities; overridable at load time (the pinned maps keep the size they were made with).
pub const DEFAULT_MAX_ENDPOINTS: u32 = 4096;
pub const DEFAULT_MAX_LINKS: u32 = 16384;

pub type MacAddr = [u8; 6];

/// The first id of an endpoint on another node (a Swarm task across an overlay's VXLAN
/// device): ids from here on key the endpoint maps as host veths' ifindexes do. No ifindex
/// reaches it (the kernel's are positive `int`s), so a link's target says by itself whether it
/// leaves through a local veth or through the tunnel.
pub const REMOTE_ENDPOINT_BASE: u32 = 1 << 31;

/// The endpoint id of the task of another node with this MAC: [`REMOTE_ENDPOINT_BASE`] and
/// the MAC's last 31 bits. An overlay gives a task the MAC `02:42` and its IPv4 address, so the
/// tasks of one overlay (one sandbox's pin directory) never share an id; the same task has the
/// same id in every run, the watch's and the one-shot commands'.
pub const fn remote_endpoint_id(mac: &MacAddr) -> u32 {
    REMOTE_ENDPOINT_BASE
        | (u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]) & !REMOTE_ENDPOINT_BASE)
}

/// Whether an endpoint id is a task on another node ([`REMOTE_ENDPOINT_BASE`]).
#[inline(always)]
pub const fn is_remote_endpoint(id: u32) -> bool {
    id >= REMOTE_ENDPOINT_BASE
}

/// A task on another node as a frame from it arrives: on which VXLAN device, from which MAC.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TunnelPeerKey {
    pub tunnel_ifindex: u32,
    pub mac: MacAddr,
    pub _pad: [u8; 2],
}

impl TunnelPeerKey {
    pub const fn new(tunnel_ifindex: u32, mac: MacAddr) -> Self {
        Self {
            tunnel_ifindex,
            mac,
            _pad: [0; 2],
        }
    }
}

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
    /// The address families whose frames stay on the bridge ([`CLOSED_IPV4`], [`CLOSED_IPV6`]):
    /// those the firewall may drop or alter there. Zero: every family rides the link.
    pub closed: u8,
    pub _pad: [u8; 3],
    pub packets: u64,
    pub bytes: u64,
}

/// [`LinkTarget::closed`]: IPv4 and ARP frames stay on the bridge.
pub const CLOSED_IPV4: u8 = 1 << 0;
/// [`LinkTarget::closed`]: IPv6 frames, neighbour discovery included, stay on the bridge.
pub const CLOSED_IPV6: u8 = 1 << 1;

impl LinkTarget {
    pub const fn new(target_ifindex: u32, closed: u8) -> Self {
        Self {
            target_ifindex,
            closed,
            _pad: [0; 3],
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
    /// For an endpoint on another node ([`REMOTE_ENDPOINT_BASE`]): the VXLAN device its frames
    /// come in by and leave by. Zero for a host veth (the field was reserved, always zero).
    pub tunnel_ifindex: u32,
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

/// How many addresses one managed veth's container may send from over a link (Docker gives an
/// interface at most three: IPv4, IPv6 and the IPv6 link-local).
pub const MAX_SOURCES: usize = 8;

/// The addresses a managed veth's container owns (keyed by the host-side ifindex). A linked
/// frame is redirected only if its IPv4/IPv6 source is one of them: a container with CAP_NET_RAW
/// can forge another's source address, and on the bridge br_netfilter would apply the operator's
/// rules about that address to it. IPv4 addresses are stored v4-mapped (`::ffff:a.b.c.d`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sources {
    pub count: u32,
    pub _pad: u32,
    pub addrs: [[u8; 16]; MAX_SOURCES],
}

impl Sources {
    /// Up to [`MAX_SOURCES`] of `addrs` (each 16 bytes, IPv4 already mapped); the rest are
    /// left out, so frames from them take the bridge.
    pub fn new(addrs: impl IntoIterator<Item = [u8; 16]>) -> Self {
        let mut out = Self {
            count: 0,
            _pad: 0,
            addrs: [[0; 16]; MAX_SOURCES],
        };
        for addr in addrs.into_iter().take(MAX_SOURCES) {
            out.addrs[out.count as usize] = addr;
            out.count += 1;
        }
        out
    }

    /// Whether `addr` (16 bytes, IPv4 mapped) is one of these.
    #[inline(always)]
    pub fn contains(&self, addr: &[u8; 16]) -> bool {
        let mut i = 0;
        while i < MAX_SOURCES {
            if i as u32 >= self.count {
                return false;
            }
            if self.addrs[i] == *addr {
                return true;
            }
            i += 1;
        }
        false
    }
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
/// [`LinkMeta::firewall`]: the link is held to the host's firewall rules; a rule that covers it
/// later takes it away.
pub const FIREWALL_CHECKED: u8 = 0;
/// [`LinkMeta::firewall`]: the operator chose to bypass the rules (`--bypass-firewall`, or
/// `dxdp.firewall=bypass` on both containers).
pub const FIREWALL_BYPASSED: u8 = 1;
pub const NAME_LEN: usize = 64;

/// What userspace remembers about a link (names for `status`, who made it). Never read by the
/// datapath.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkMeta {
    pub datapath: u8,
    pub origin: u8,
    /// [`FIREWALL_CHECKED`] or [`FIREWALL_BYPASSED`].
    pub firewall: u8,
    pub _pad: [u8; 5],
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
    assert!(core::mem::size_of::<TunnelPeerKey>() == 12);
    assert!(core::mem::size_of::<LinkTarget>() == 24);
    assert!(core::mem::size_of::<Endpoint>() == 24);
    assert!(core::mem::size_of::<Counters>() == 48);
    assert!(core::mem::size_of::<LinkMetaKey>() == 8);
    assert!(core::mem::size_of::<LinkMeta>() == 16 + 3 * NAME_LEN);
    assert!(core::mem::size_of::<Meta>() == 8);
    assert!(core::mem::size_of::<Sources>() == 8 + 16 * MAX_SOURCES);
};

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are repr(C), Copy, and have no implicit padding (asserted above).
    unsafe impl aya::Pod for super::LinkKey {}
    unsafe impl aya::Pod for super::TunnelPeerKey {}
    unsafe impl aya::Pod for super::LinkTarget {}
    unsafe impl aya::Pod for super::Endpoint {}
    unsafe impl aya::Pod for super::Counters {}
    unsafe impl aya::Pod for super::LinkMetaKey {}
    unsafe impl aya::Pod for super::LinkMeta {}
    unsafe impl aya::Pod for super::Meta {}
    unsafe impl aya::Pod for super::Sources {}
}

pub mod ct;
/// Outbound connections of containers straight to the NIC, conntrack the only NAT table
/// (issue 36, docs/egress.md).
pub mod egress;
pub mod ingress;
pub mod sock;
pub mod stack;
pub mod tcp_window;
