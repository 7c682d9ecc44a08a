//! The header layouts every program reads, in one place: sizes, offsets, EtherTypes, protocol
//! numbers, the checks the host's stack makes of an IP header, and the two ways addresses are
//! held (v4-mapped bytes, the kernel's network-order words). What userspace shares with the
//! programs (the IP header sizes and checks, TCP's and UDP's numbers) is defined in
//! `dxdp_common` and handed on from here, so that a program takes all of it from one module.
use aya_ebpf::{
    bindings::bpf_check_mtu_flags::BPF_MTU_CHK_SEGS,
    helpers::generated::{bpf_check_mtu, bpf_skb_load_bytes},
    programs::{TcContext, XdpContext},
};
pub(crate) use dxdp_common::{
    ingress::{PROTO_TCP, PROTO_UDP},
    stack::{
        IPV4_HLEN, IPV4_OPTIONS_MAX, IPV6_EXTENSION_UNIT, IPV6_HLEN, ipv4_fragment,
        ipv4_header_valid, ipv4_header_with_options_valid, ipv4_options_padding_only,
        ipv6_fragment_passed_on, ipv6_hop_by_hop_padding_only, ipv6_length_valid,
    },
};

pub(crate) const ETH_HLEN: usize = 14;
pub(crate) const ETH_P_IP: u16 = 0x0800;
pub(crate) const ETH_P_IPV6: u16 = 0x86DD;
pub(crate) const ETH_P_ARP: u16 = 0x0806;
/// IPv6's hop-by-hop header's number as a next header (it follows the fixed header only).
pub(crate) const IPV6_HOP_BY_HOP: u8 = 0;
/// IPv6's fragment header: its number as a next header, and its length.
pub(crate) const IPV6_FRAGMENT: u8 = 44;
pub(crate) const IPV6_FRAGMENT_HLEN: usize = 8;
pub(crate) const PROTO_ICMP: u8 = 1;
pub(crate) const PROTO_ICMPV6: u8 = 58;
pub(crate) const PROTO_SCTP: u8 = 132;
/// An ICMP or ICMPv6 header: type, code, checksum and four bytes that depend on the type.
pub(crate) const ICMP_HLEN: usize = 8;
/// The most of an ICMP error a program reads at once: its header, an IPv6 header it quotes, the
/// quoted fragment header if any and the quoted ports (60 bytes).
pub(crate) const ICMP_ERROR_READ: usize = 60;
/// TCP's sequence and acknowledgement numbers, its data offset, its flags byte and its checksum.
pub(crate) const TCP_SEQ_OFF: usize = 4;
pub(crate) const TCP_ACK_SEQ_OFF: usize = 8;
pub(crate) const TCP_DOFF_OFF: usize = 12;
pub(crate) const TCP_FLAGS_OFF: usize = 13;
pub(crate) const TCP_CSUM_OFF: usize = 16;
/// The smallest TCP and UDP headers.
pub(crate) const TCP_HLEN: u16 = 20;
pub(crate) const UDP_HLEN: u16 = 8;
/// UDP's length and checksum.
pub(crate) const UDP_LEN_OFF: usize = 4;
pub(crate) const UDP_CSUM_OFF: usize = 6;
/// `skb->pkt_type` of a frame addressed to the receiving device's own MAC: anything else
/// (broadcast, multicast, another host's MAC) is not the host's to route.
pub(crate) const PACKET_HOST: u32 = 0;

/// IPv4 as the maps hold it: `::ffff:a.b.c.d`.
#[inline(always)]
pub fn v4_mapped(addr: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[10] = 0xff;
    out[11] = 0xff;
    out[12..16].copy_from_slice(&addr[..4]);
    out
}

/// The 16 address bytes as the kernel's four network-order words.
#[inline(always)]
pub(crate) fn words(addr: &[u8; 16]) -> [u32; 4] {
    let mut out = [0u32; 4];
    let mut i = 0;
    while i < 4 {
        out[i] = u32::from_ne_bytes([
            addr[4 * i],
            addr[4 * i + 1],
            addr[4 * i + 2],
            addr[4 * i + 3],
        ]);
        i += 1;
    }
    out
}

/// The frame's EtherType and the address its layer-3 header starts at; `None` for a frame
/// shorter than an Ethernet header.
#[inline(always)]
pub(crate) fn ethertype(ctx: &TcContext) -> Option<(u16, usize)> {
    let start = ctx.data();
    if start + ETH_HLEN > ctx.data_end() {
        return None;
    }
    // SAFETY: bounds-checked against data_end just above.
    let eth = unsafe { &*(start as *const [u8; ETH_HLEN]) };
    Some((u16::from_be_bytes([eth[12], eth[13]]), start + ETH_HLEN))
}

/// Whether the packet, or each segment of a GSO packet, fits the MTU of the device
/// `ifindex`: a NIC a reply would leave by, or the target veth of a link.
///
/// `bpf_redirect_neigh` drops one that does not, silently: where the NIC's MTU is smaller
/// than the container network's, a reply too big for it must take the stack instead (before it
/// is translated), which answers the container with "fragmentation needed" or "packet too
/// big", as it does on Docker's path, and the container sends smaller ones from then on.
/// `bpf_redirect_peer` delivers one of any size: a link's frame too big for its target takes
/// the bridge, which drops it (IPv6: and answers "packet too big") as it does without dxdp.
#[inline(always)]
pub(crate) fn fits_mtu(ctx: &TcContext, ifindex: u32) -> bool {
    // Zero: the helper measures the packet itself (at tc ingress `skb->len` counts the
    // Ethernet header, as the device's MTU plus its header length does), and writes the MTU
    // back, unread here.
    let mut mtu: u32 = 0;
    // SAFETY: a plain helper call on this program's own context; `mtu` lives on this stack.
    let verdict = unsafe {
        bpf_check_mtu(
            ctx.skb.skb as *mut _,
            ifindex,
            &mut mtu,
            0,
            BPF_MTU_CHK_SEGS as u64,
        )
    };
    verdict == 0
}

/// [`fits_mtu`] for XDP: whether a frame of `len` bytes (all of its buffers) fits the MTU of
/// the device `ifindex`. The XDP helper measures only the first buffer itself and takes no
/// flags, so it is given the frame's layer-3 length to compare.
#[inline(always)]
pub(crate) fn xdp_fits_mtu(ctx: &XdpContext, ifindex: u32, len: u64) -> bool {
    // Input: the layer-3 length (the helper adds the device's header length); output: the MTU.
    let mut mtu = len.saturating_sub(ETH_HLEN as u64).min(u32::MAX as u64) as u32;
    // SAFETY: a plain helper call on this program's own context; `mtu` lives on this stack.
    let verdict = unsafe { bpf_check_mtu(ctx.ctx as *mut _, ifindex, &mut mtu, 0, 0) };
    verdict == 0
}

/// The `len` option bytes after an IPv4 header's first 20, read into `options`, zero past
/// them (as `ipv4_options_padding_only` and the checksum take them).
///
/// One load of all `len` bytes: a loop of loads up to `len` gave the verifier one path out of
/// it for each length a header can have, and it walked everything after once for each.
#[inline(always)]
pub(crate) fn ipv4_options<'a>(
    ctx: &TcContext,
    len: usize,
    options: &'a mut [u8; IPV4_OPTIONS_MAX],
) -> Option<&'a [u8; IPV4_OPTIONS_MAX]> {
    *options = [0; IPV4_OPTIONS_MAX];
    // Read back, so that the compiler checks the very value the helper is given (it would
    // check one form of it and pass another, which the verifier cannot bound).
    let size = len as u64;
    // SAFETY: a local, read whole.
    let size = unsafe { core::ptr::read_volatile(&size) };
    if size == 0 {
        return Some(options);
    }
    if size > IPV4_OPTIONS_MAX as u64 {
        return None;
    }
    // SAFETY: `options` has room for `len` bytes (checked above); the helper reads no further
    // than the packet holds, and fails otherwise.
    let loaded = unsafe {
        bpf_skb_load_bytes(
            ctx.skb.skb as *const _,
            (ETH_HLEN + IPV4_HLEN) as u32,
            options.as_mut_ptr().cast(),
            size as u32,
        )
    };
    (loaded == 0).then_some(options)
}
