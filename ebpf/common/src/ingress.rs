//! Published ports straight from the NIC into the container (`dxdp expose`, issue 24): what the
//! `dxdp_ingress` program on a NIC and the `dxdp_reply` program on a container's host veth share
//! with userspace. Addresses are 16 bytes, IPv4 v4-mapped (`::ffff:a.b.c.d`), in network order;
//! ports in host order.
use super::MacAddr;

pub mod names {
    pub const PORTS: &str = "DXDP_PORTS";
    pub const FLOWS: &str = "DXDP_FLOWS";
    pub const OPENING: &str = "DXDP_OPENING";
    /// The copies of the TCP connections' windows (`tcp_window::TcpWindow`), by
    /// [`super::FlowKey`]: established ones, and those being opened, apart as their tables are.
    pub const TCP_WINDOWS: &str = "DXDP_TCP_WINDOWS";
    pub const TCP_OPENING_WINDOWS: &str = "DXDP_TCP_OPENING_WINDOWS";
    /// `nf_conntrack_tcp_be_liberal` and `nf_conntrack_tcp_ignore_invalid_rst` as
    /// `tcp_window::switch` bits, in entry 0: written where the programs are attached or
    /// swapped in, and by the watch's passes, so they follow the sysctls.
    pub const TCP_SWITCHES: &str = "DXDP_TCP_SWITCHES";
    pub const UDP_FLOWS: &str = "DXDP_UDP_FLOWS";
    pub const VETHS: &str = "DXDP_PORT_VETHS";
    pub const REPLY_FRAGMENTS: &str = "DXDP_REPLY_FRAGMENTS";
    /// TCP connections an RST closed, while conntrack's entry would live in CLOSE
    /// ([`super::RESET_KEPT_NS`]): the ICMP errors about them are still translated.
    pub const RESET_FLOWS: &str = "DXDP_RESET_FLOWS";
    pub const OWNERS: &str = "DXDP_PORT_OWNERS";
    pub const INGRESS_PROGRAM: &str = "dxdp_ingress";
    pub const REPLY_PROGRAM: &str = "dxdp_reply";
    /// The program array the two hand ICMP errors to, and the programs it holds.
    pub const ICMP_ERRORS: &str = "DXDP_ICMP_ERRORS";
    pub const ROUTE_MTUS: &str = "DXDP_ROUTE_MTUS";
    pub const ICMP_IN_PROGRAM: &str = "dxdp_icmp_in";
    pub const ICMP_OUT_PROGRAM: &str = "dxdp_icmp_out";
}

/// Where `DXDP_ICMP_ERRORS` holds each program: errors coming in on a NIC (`dxdp_ingress`
/// hands them on), and those a container sends (`dxdp_reply`).
pub const ICMP_IN: u32 = 0;
pub const ICMP_OUT: u32 = 1;
pub const ICMP_ERROR_PROGRAMS: u32 = 2;

pub const DEFAULT_MAX_PORTS: u32 = 16384;
/// Routes `DXDP_ROUTE_MTUS` mirrors at most (an LPM trie, allocated per entry).
pub const DEFAULT_MAX_ROUTES: u32 = 65536;
/// TCP connections at once through exposed ports (`DXDP_FLOWS`); the least recently used
/// is forgotten first, and its replies then take the stack (see docs/ingress.md).
pub const DEFAULT_MAX_FLOWS: u32 = 131072;
/// Fragmented datagrams being sent at once by exposed containers (`DXDP_REPLY_FRAGMENTS`):
/// a record lives from a datagram's first fragment to its last, microseconds apart.
pub const DEFAULT_MAX_REPLY_FRAGMENTS: u32 = 4096;
/// TCP connections an RST closed in the last [`RESET_KEPT_NS`] (`DXDP_RESET_FLOWS`).
pub const DEFAULT_MAX_RESET_FLOWS: u32 = 4096;
/// How long a connection an RST closed is still known to the ICMP errors about it:
/// `nf_conntrack_tcp_timeout_close`'s default, 10 s, for which conntrack keeps the entry (in
/// CLOSE) and translates the errors that quote it.
pub const RESET_KEPT_NS: u64 = 10_000_000_000;

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
    /// Segments of fast-path connections dropped as conntrack would mark them INVALID (out of
    /// their window; see `dxdp_ingress`), which Docker's path never delivers. Was padding
    /// (zero) before layout 5's dxdp counted them.
    pub refused_packets: u32,
    /// Packets and bytes taken into the container, and replies taken out of the NIC.
    pub in_packets: u64,
    pub in_bytes: u64,
    pub out_packets: u64,
    pub out_bytes: u64,
    /// Packets to this port left to Docker's path: fragments, IP options, a target veth
    /// gone, a client the NIC does not route back to, a source the stack refuses.
    pub passed_packets: u64,
}

impl PortTarget {
    /// Counts a segment dropped as conntrack would mark it INVALID. Wraps at 32 bits (the
    /// layout's old padding); Prometheus takes a wrap for a counter reset.
    pub fn refuse(&mut self) {
        self.refused_packets = self.refused_packets.wrapping_add(1);
    }
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
