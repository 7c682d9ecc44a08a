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

/// What the host's stack takes of an IP header before it lets a packet further (`ip_rcv`,
/// `ipv6_rcv`, and on a bridge with `br_netfilter`, `br_validate_ipv4` / `br_validate_ipv6` and
/// conntrack's defragmentation): the fast paths hand on only what the stack would, and leave
/// the rest to it. `l3_len` is what the frame holds after its Ethernet header, by the frame's
/// own length (all of it, not only what the program can read directly).
pub mod stack {
    /// An IPv4 header without options.
    pub const IPV4_HLEN: usize = 20;
    /// IPv6's fixed header.
    pub const IPV6_HLEN: usize = 40;

    /// Whether an IPv4 header without options sums to zero, as `ip_rcv` requires before it
    /// lets a packet further.
    #[inline(always)]
    pub const fn ipv4_header_checksum_ok(header: &[u8; 20]) -> bool {
        let mut sum: u32 = 0;
        let mut i = 0;
        while i < 20 {
            sum += ((header[i] as u32) << 8) | header[i + 1] as u32;
            i += 2;
        }
        // Ten words sum to less than 2^20: two folds carry every bit back, and a loop "until
        // no carry is left" would be one the verifier walks state by state.
        sum = (sum & 0xffff) + (sum >> 16);
        sum = (sum & 0xffff) + (sum >> 16);
        sum == 0xffff
    }

    /// Whether `header` is an IPv4 header without options that the stack takes: version 4 and
    /// five words, a checksum that sums to zero, a total length at least the header's and at
    /// most the `l3_len` bytes the frame holds (a frame shorter than its packet is dropped; a
    /// longer one is trimmed). Options are not judged here (`ip_options_compile` may refuse
    /// them): a header with options is not valid by this check, so it is left to the stack.
    #[inline(always)]
    pub const fn ipv4_header_valid(header: &[u8; IPV4_HLEN], l3_len: usize) -> bool {
        let total = u16::from_be_bytes([header[2], header[3]]) as usize;
        header[0] == 0x45
            && ipv4_header_checksum_ok(header)
            && total >= IPV4_HLEN
            && total <= l3_len
    }

    /// Whether an IPv4 header is a fragment's, first or later (more-fragments bit or a
    /// fragment offset): conntrack holds it for reassembly, and a lone one never passes.
    #[inline(always)]
    pub const fn ipv4_fragment(header: &[u8; IPV4_HLEN]) -> bool {
        header[6] & 0x3f != 0 || header[7] != 0
    }

    /// A ones'-complement sum of 32 bits folded to 16: 0xffff where a checksum is right.
    #[inline(always)]
    pub const fn fold(sum: u32) -> u16 {
        // Two folds carry every bit back: a loop "until no carry is left" would be one the
        // verifier walks state by state.
        let sum = (sum & 0xffff) + (sum >> 16);
        let sum = (sum & 0xffff) + (sum >> 16);
        sum as u16
    }

    /// Whether an IPv6 payload length of `payload_len` fits the `l3_len` bytes the frame holds.
    #[inline(always)]
    pub const fn ipv6_length_valid(payload_len: u16, l3_len: usize) -> bool {
        IPV6_HLEN + payload_len as usize <= l3_len
    }
}

/// Published ports straight from the NIC into the container (`dxdp expose`, issue 24): what the
/// `dxdp_ingress` program on a NIC and the `dxdp_reply` program on a container's host veth share
/// with userspace. Addresses are 16 bytes, IPv4 v4-mapped (`::ffff:a.b.c.d`), in network order;
/// ports in host order.
pub mod ingress {
    use super::MacAddr;

    pub mod names {
        pub const PORTS: &str = "DXDP_PORTS";
        pub const FLOWS: &str = "DXDP_FLOWS";
        pub const OPENING: &str = "DXDP_OPENING";
        pub const UDP_FLOWS: &str = "DXDP_UDP_FLOWS";
        pub const VETHS: &str = "DXDP_PORT_VETHS";
        pub const REPLY_FRAGMENTS: &str = "DXDP_REPLY_FRAGMENTS";
        pub const OWNERS: &str = "DXDP_PORT_OWNERS";
        pub const INGRESS_PROGRAM: &str = "dxdp_ingress";
        pub const REPLY_PROGRAM: &str = "dxdp_reply";
    }

    pub const DEFAULT_MAX_PORTS: u32 = 16384;
    /// TCP connections at once through exposed ports (`DXDP_FLOWS`); the least recently used
    /// is forgotten first, and its replies then take the stack (see docs/ingress.md).
    pub const DEFAULT_MAX_FLOWS: u32 = 131072;
    /// Fragmented datagrams being sent at once by exposed containers (`DXDP_REPLY_FRAGMENTS`):
    /// a record lives from a datagram's first fragment to its last, microseconds apart.
    pub const DEFAULT_MAX_REPLY_FRAGMENTS: u32 = 4096;

    /// The size of each table beside `DXDP_FLOWS` for a `DXDP_FLOWS` of `max_flows`: a quarter,
    /// at least 256. `DXDP_OPENING` holds TCP connections being opened ([`Opening`]), each for
    /// a round trip; `DXDP_UDP_FLOWS` holds UDP flows, most of which are a query and its
    /// answer. The tables are preallocated (LRU maps must be) when a pin directory is made.
    pub const fn side_table_size(max_flows: u32) -> u32 {
        let quarter = max_flows / 4;
        if quarter < 256 { 256 } else { quarter }
    }

    /// Whether the host's stack refuses `addr` (16 bytes; IPv4 v4-mapped unless `v6`) as the
    /// source of a packet from outside: IPv4's martians (`ip_route_input_slow`: `0.0.0.0/8`,
    /// `127.0.0.0/8`, multicast and the limited broadcast; the whole of `224.0.0.0/3` here),
    /// IPv6's unspecified, loopback, multicast and v4-mapped sources (`ipv6_rcv`) and
    /// link-local ones (`ip6_forward` does not forward them). A route may lead back to such a
    /// source through the NIC (a default route does), so the route check alone would let it
    /// in; refusing more than the stack does is safe, as the packet then takes Docker's path.
    #[inline(always)]
    pub const fn refused_source(addr: &[u8; 16], v6: bool) -> bool {
        if !v6 {
            let first = addr[12];
            return first == 0 || first == 127 || first >= 224;
        }
        let mut zero_head = true;
        let mut i = 0;
        while i < 15 {
            zero_head &= addr[i] == 0;
            i += 1;
        }
        let unspecified_or_loopback = zero_head && addr[15] <= 1;
        let multicast = addr[0] == 0xff;
        let link_local = addr[0] == 0xfe && addr[1] & 0xc0 == 0x80;
        let mut v4_mapped = addr[10] == 0xff && addr[11] == 0xff;
        let mut j = 0;
        while j < 10 {
            v4_mapped &= addr[j] == 0;
            j += 1;
        }
        unspecified_or_loopback || multicast || link_local || v4_mapped
    }

    pub const PROTO_TCP: u8 = 6;
    pub const PROTO_UDP: u8 = 17;

    /// TCP's flag bits.
    pub const TCP_FIN: u8 = 0x01;
    pub const TCP_SYN: u8 = 0x02;
    pub const TCP_RST: u8 = 0x04;
    pub const TCP_PSH: u8 = 0x08;
    pub const TCP_ACK: u8 = 0x10;
    pub const TCP_URG: u8 = 0x20;
    pub const TCP_ECE: u8 = 0x40;
    pub const TCP_CWR: u8 = 0x80;

    /// Whether conntrack takes a segment with these flags (`tcp_valid_flags` in
    /// `nf_conntrack_proto_tcp.c`, with PSH, ECE and CWR ignored as it ignores them). Anything
    /// else (SYN+FIN, no flag at all, SYN+RST, ...) is invalid there: Docker's DNAT never
    /// translates it, so the fast path must not either.
    #[inline(always)]
    pub const fn tcp_flags_valid(flags: u8) -> bool {
        let flags = flags & !(TCP_PSH | TCP_ECE | TCP_CWR);
        matches!(
            flags,
            TCP_SYN
                | 0x22 // SYN|URG
                | 0x12 // SYN|ACK
                | TCP_RST
                | 0x14 // RST|ACK
                | 0x11 // FIN|ACK
                | 0x31 // FIN|ACK|URG
                | TCP_ACK
                | 0x30 // ACK|URG
        )
    }

    pub use crate::stack::ipv4_header_checksum_ok;

    /// Whether a UDP header's length field fits the IP payload it arrived in (`ip_payload`
    /// bytes, by the IP header's own length): conntrack's `udp_error` marks a datagram
    /// longer than its packet, or shorter than its header, invalid, and Docker's DNAT then
    /// never translates it.
    #[inline(always)]
    pub const fn udp_length_valid(udp_len: u16, ip_payload: u16) -> bool {
        udp_len >= 8 && udp_len <= ip_payload
    }

    /// One fragmented datagram a container sends over a fast-path connection, as its fragments
    /// carry it: from `src` to `dst` over `proto` with IP identification `id` (IPv4's 16 bits,
    /// or IPv6's fragment header's 32), leaving the container behind `veth_ifindex`. Only the
    /// first fragment has the ports that find the connection; the rest find it by this key,
    /// which the first recorded (`DXDP_REPLY_FRAGMENTS`). Addresses as in [`FlowKey`].
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct FragmentKey {
        pub veth_ifindex: u32,
        pub id: u32,
        pub proto: u8,
        pub v6: u8,
        pub _pad: u16,
        pub src: [u8; 16],
        pub dst: [u8; 16],
    }

    /// A published port as packets from outside address it: arriving on `nic_ifindex` for
    /// `addr`:`port` over `proto`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub struct PortKey {
        pub nic_ifindex: u32,
        pub port: u16,
        pub proto: u8,
        pub _pad: u8,
        pub addr: [u8; 16],
    }

    /// Where a published port leads (the same on every CPU) and, per CPU, what it carried.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct PortTarget {
        /// The container's address and port Docker translates the published port to.
        pub addr: [u8; 16],
        /// The container's host-side veth: `bpf_redirect_peer` enters its peer.
        pub veth_ifindex: u32,
        pub port: u16,
        pub _pad: u16,
        /// The container interface's MAC, and the bridge's, which the container's replies are
        /// addressed to: what the frame would carry had the bridge delivered it.
        pub mac: MacAddr,
        pub gateway_mac: MacAddr,
        pub _pad2: u32,
        /// Packets and bytes taken into the container, and replies taken out of the NIC.
        pub in_packets: u64,
        pub in_bytes: u64,
        pub out_packets: u64,
        pub out_bytes: u64,
        /// Packets to this port left to Docker's path: fragments, IP options, a target veth
        /// gone, a client the NIC does not route back to, a source the stack refuses.
        pub passed_packets: u64,
    }

    /// One connection through an exposed port, as the container's replies carry it: from
    /// (`addr`, `port`) behind `veth_ifindex` to (`client_addr`, `client_port`). Only replies of
    /// connections the NIC's program let in are translated ([`Flow`]).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct FlowKey {
        pub veth_ifindex: u32,
        pub proto: u8,
        pub _pad: u8,
        pub port: u16,
        pub client_port: u16,
        pub _pad2: u16,
        pub addr: [u8; 16],
        pub client_addr: [u8; 16],
    }

    impl FlowKey {
        /// The connection between the container's `addr`:`port` behind `veth_ifindex` and
        /// the client's `client_addr`:`client_port`, padding zeroed (keys compare bytewise).
        #[inline(always)]
        pub const fn new(
            veth_ifindex: u32,
            proto: u8,
            (addr, port): ([u8; 16], u16),
            (client_addr, client_port): ([u8; 16], u16),
        ) -> Self {
            Self {
                veth_ifindex,
                proto,
                _pad: 0,
                port,
                client_port,
                _pad2: 0,
                addr,
                client_addr,
            }
        }
    }

    /// Who exposed a container's ports (keyed by its host veth's ifindex). Never read by the
    /// programs.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct PortOwner {
        pub created_unix_secs: u64,
        /// [`crate::ORIGIN_MANUAL`] or [`crate::ORIGIN_WATCH`].
        pub origin: u8,
        /// [`crate::FIREWALL_CHECKED`] or [`crate::FIREWALL_BYPASSED`].
        pub firewall: u8,
        pub _pad: [u8; 6],
        /// The container's name, NUL-padded UTF-8.
        pub name: [u8; crate::NAME_LEN],
    }

    /// A connection the NIC's program let in: the published port it came to, which its replies
    /// are translated back to, and when it last carried a packet (`bpf_ktime_get_ns`,
    /// CLOCK_MONOTONIC). Its replies keep the fast path after the port is unexposed, until it
    /// has been idle a while: its inbound packets then meet conntrack as a connection picked up
    /// midway, but a reply that reached conntrack first would be taken for a new connection
    /// from the container and masqueraded.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Flow {
        pub port: PortKey,
        pub last_seen_ns: u64,
    }

    /// A TCP connection whose SYN the NIC's program let in but whose client has not completed
    /// the handshake (`DXDP_OPENING`). It moves to `DXDP_FLOWS` when the client acknowledges
    /// the container's SYN-ACK, which a sender of forged SYNs never sees, so cannot
    /// acknowledge. Until then its packets take the fast path as well; the tables are apart so
    /// that a flood of forged SYNs can only push out other connections being opened, never
    /// established ones.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Opening {
        pub flow: Flow,
        /// The acknowledgement number that completes the handshake: the container's SYN-ACK's
        /// sequence number plus one, once `answered`.
        pub completing_ack: u32,
        /// Non-zero once the container's SYN-ACK passed.
        pub answered: u32,
    }

    const _: () = {
        assert!(core::mem::size_of::<Flow>() == 32);
        assert!(core::mem::size_of::<Opening>() == 40);
        assert!(core::mem::size_of::<PortOwner>() == 16 + crate::NAME_LEN);
        assert!(core::mem::size_of::<PortKey>() == 24);
        assert!(core::mem::size_of::<PortTarget>() == 80);
        assert!(core::mem::size_of::<FlowKey>() == 44);
        assert!(core::mem::size_of::<FragmentKey>() == 44);
    };

    #[cfg(feature = "user")]
    mod pod {
        // SAFETY: repr(C), Copy, no implicit padding (sizes asserted above).
        unsafe impl aya::Pod for super::PortKey {}
        unsafe impl aya::Pod for super::PortTarget {}
        unsafe impl aya::Pod for super::FlowKey {}
        unsafe impl aya::Pod for super::PortOwner {}
        unsafe impl aya::Pod for super::Flow {}
        unsafe impl aya::Pod for super::Opening {}
        unsafe impl aya::Pod for super::FragmentKey {}
    }
}

/// The socket layer (`sock` datapath), a lab that is not shipped (docs/sock-datapath.md): maps
/// and programs of `ebpf/programs/src/sock.rs`, loaded by the integration tests' `sock` area.
///
/// Addresses are IPv6-shaped everywhere: an IPv4 address `a.b.c.d` is stored as the v4-mapped
/// `::ffff:a.b.c.d`, which is also how a dual-stack (`[::]`) listener's accepted socket sees its
/// IPv4 peer, so both ends of a connection compute the same key whatever their family. Addresses
/// are in network byte order (as the kernel hands them), ports in host byte order.
pub mod sock {
    pub mod names {
        pub const SOCKETS: &str = "DXDP_SOCK_HASH";
        pub const LINKS: &str = "DXDP_SOCK_LINKS";
        pub const SWITCHES: &str = "DXDP_SOCK_SWITCHES";
        pub const STATES: &str = "DXDP_SOCK_STATES";
        pub const COUNTERS: &str = "DXDP_SOCK_COUNTERS";
        pub const SOCK_OPS_PROGRAM: &str = "dxdp_sock_ops";
        pub const SK_MSG_PROGRAM: &str = "dxdp_sk_msg";
        /// Load-time constants (`.rodata`): offsets read from the running kernel's BTF.
        pub const OFF_SK_USER_DATA: &str = "DXDP_OFF_SK_USER_DATA";
        pub const OFF_PSOCK_MSG_TOT_LEN: &str = "DXDP_OFF_PSOCK_MSG_TOT_LEN";
        pub const OFF_TP_WRITE_SEQ: &str = "DXDP_OFF_TP_WRITE_SEQ";
        pub const OFF_TP_COPIED_SEQ: &str = "DXDP_OFF_TP_COPIED_SEQ";
        pub const QUEUE_FLOOR: &str = "DXDP_SOCK_QUEUE_FLOOR";
    }

    pub const DEFAULT_MAX_SOCKETS: u32 = 65536;
    pub const DEFAULT_MAX_LINKS: u32 = 16384;

    /// One end of an established TCP connection, as seen from its own namespace.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct SockKey {
        /// `bpf_get_netns_cookie` of the socket's network namespace.
        pub netns_cookie: u64,
        pub local_ip: [u32; 4],
        pub remote_ip: [u32; 4],
        pub local_port: u32,
        pub remote_port: u32,
    }

    /// A direction of a socket-level link: sockets in `netns_cookie` talking to `remote_ip` may
    /// be handed to a socket in the value's namespace, and only there.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct SockLinkKey {
        pub netns_cookie: u64,
        pub remote_ip: [u32; 4],
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct SockLinkValue {
        pub peer_netns_cookie: u64,
        /// Key of the link's switch in `DXDP_SOCK_SWITCHES`.
        pub link_id: u32,
        pub _pad: u32,
    }

    /// Value of a switch: redirect new messages of sockets that have never used TCP.
    pub const SWITCH_ON: u32 = 1;
    /// Every socket of the link falls back to TCP at its next message, for good.
    pub const SWITCH_OFF: u32 = 0;

    /// A socket in the sockhash (keyed by its [`SockKey`]): its state, and its kernel address,
    /// which the peer's sk_msg program reads `tcp_sock` fields from with probe reads (an
    /// sk_msg program may not look a sockhash up: the lookup takes a reference that only
    /// `bpf_sk_release` drops, and sk_msg programs cannot call it).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct SockEntry {
        pub state: u32,
        pub _pad: u32,
        pub sk_addr: u64,
    }

    /// Per-socket states of [`SockEntry::state`], written when the socket is inserted.
    /// Nothing decided yet: no payload byte sent.
    pub const STATE_FRESH: u32 = 0;
    /// Its payload so far went to the peer socket directly.
    pub const STATE_REDIRECTING: u32 = 1;
    /// Some payload went over TCP: everything after it must too (ordering), for good.
    pub const STATE_TCP: u32 = 2;
    /// Payload went over TCP because the peer socket was not in the sockhash yet (the client
    /// writes before the server's PASSIVE_ESTABLISHED): redirecting resumes once the stream is
    /// quiet, i.e. the peer application has read every byte this socket wrote over TCP
    /// (peer `copied_seq` == own `write_seq`), so nothing redirected can overtake it.
    pub const STATE_TCP_UNTIL_QUIET: u32 = 3;

    /// Per-CPU counters of the socket layer (one entry, index 0).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct SockCounters {
        /// Established sockets put in the sockhash (both ends of a connection count).
        pub sockets_inserted: u64,
        pub redirected_msgs: u64,
        pub redirected_bytes: u64,
        /// Bytes sent over TCP by sockets in the sockhash.
        pub passed_bytes: u64,
        /// Sockets that fell back to TCP for good, by reason.
        pub fallback_no_peer: u64,
        pub fallback_switch_off: u64,
        pub fallback_backpressure: u64,
        pub fallback_no_link: u64,
        /// The sockhash or state map was full: the socket was left to TCP.
        pub insert_failed: u64,
        /// Sockets that went from TCP back to redirecting once their stream was quiet.
        pub rejoined: u64,
    }

    const _: () = {
        assert!(core::mem::size_of::<SockKey>() == 48);
        assert!(core::mem::size_of::<SockLinkKey>() == 24);
        assert!(core::mem::size_of::<SockLinkValue>() == 16);
        assert!(core::mem::size_of::<SockEntry>() == 16);
        assert!(core::mem::size_of::<SockCounters>() == 80);
    };

    #[cfg(feature = "user")]
    mod pod {
        // SAFETY: repr(C), Copy, no implicit padding (sizes asserted above).
        unsafe impl aya::Pod for super::SockKey {}
        unsafe impl aya::Pod for super::SockLinkKey {}
        unsafe impl aya::Pod for super::SockLinkValue {}
        unsafe impl aya::Pod for super::SockEntry {}
        unsafe impl aya::Pod for super::SockCounters {}
    }
}

/// The conntrack kfunc lab (`dxdp-ct-lab`, docs/kfuncs.md): a tc program that looks each IPv4
/// TCP or UDP packet up in the kernel's conntrack with `bpf_skb_ct_lookup` and records the
/// outcome per tuple. Not shipped; the integration tests' `ct_kfunc` area loads it.
pub mod ct {
    pub mod names {
        pub const SEEN: &str = "DXDP_CT_SEEN";
        pub const PROGRAM: &str = "dxdp_ct_probe";
        /// Load-time constants (`.rodata`): offsets in the running kernel's `struct nf_conn`,
        /// read from its BTF; 0 leaves the field unread.
        pub const OFF_STATUS: &str = "DXDP_CT_OFF_STATUS";
        pub const OFF_MARK: &str = "DXDP_CT_OFF_MARK";
        /// The reply direction's source address and port (`tuplehash[IP_CT_DIR_REPLY]
        /// .tuple.src`): where a reply comes from, the source NAT's address and port.
        pub const OFF_REPLY_SRC_IP: &str = "DXDP_CT_OFF_REPLY_SRC_IP";
        pub const OFF_REPLY_SRC_PORT: &str = "DXDP_CT_OFF_REPLY_SRC_PORT";
        /// Load-time constants of the keep-alive: packets of found entries to this destination
        /// port (network order; 0: none) set their entry's timeout to `KEEPALIVE_MS` with
        /// `bpf_ct_change_timeout` and are dropped, as if a fast path had taken them past
        /// conntrack.
        pub const KEEPALIVE_PORT: &str = "DXDP_CT_KEEPALIVE_PORT";
        pub const KEEPALIVE_MS: &str = "DXDP_CT_KEEPALIVE_MS";
    }

    pub const DEFAULT_MAX_TUPLES: u32 = 1024;

    /// An IPv4 TCP or UDP packet's tuple as the packet holds it: addresses and ports in network
    /// order.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct CtProbeKey {
        pub saddr: u32,
        pub daddr: u32,
        pub sport: u16,
        pub dport: u16,
        pub proto: u8,
        pub _pad: [u8; 3],
    }

    /// What the lookups of one tuple found.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct CtProbeValue {
        /// Lookups that returned an entry (released at once).
        pub found: u64,
        /// Lookups that returned none with `opts.error == -ENOENT`: no such connection.
        pub not_found: u64,
        /// Lookups that returned none with another error (bad arguments, no netns).
        pub failed: u64,
        /// `opts.error` of the last lookup that returned none.
        pub last_error: i32,
        /// The low 32 bits of the last found entry's `status` (IPS_* bits), 0 when not read.
        pub status: u32,
        /// The last found entry's `mark`.
        pub mark: u32,
        /// The last found entry's reply source address and port (network order).
        pub reply_src_ip: u32,
        pub reply_src_port: u16,
        pub _pad: u16,
        /// Packets to the keep-alive port whose entry's timeout `bpf_ct_change_timeout` set.
        pub kept_alive: u32,
        /// The last nonzero return of `bpf_ct_change_timeout`.
        pub keepalive_error: i32,
        pub _pad2: u32,
    }

    const _: () = {
        assert!(core::mem::size_of::<CtProbeKey>() == 16);
        assert!(core::mem::size_of::<CtProbeValue>() == 56);
    };

    #[cfg(feature = "user")]
    mod pod {
        // SAFETY: repr(C), Copy, no implicit padding (sizes asserted above).
        unsafe impl aya::Pod for super::CtProbeKey {}
        unsafe impl aya::Pod for super::CtProbeValue {}
    }
}

/// Outbound connections of containers straight to the NIC, conntrack the only NAT table
/// (issue 36, docs/egress.md).
pub mod egress;
