//! ICMP errors about the fast path's replies, taken to the container that sent them, as
//! conntrack takes them on Docker's path (as RELATED, translated).
//!
//! A router between the host and a client that cannot forward a reply (a link with a smaller
//! MTU: "fragmentation needed" / "packet too big"; an unreachable or expired route) answers the
//! reply's source, the published address. On Docker's path conntrack finds the connection the
//! error quotes and translates the error back to the container; without that, a container
//! never learns the path's MTU and a connection whose segments are too big stalls (a PMTU black
//! hole). So: an ICMPv4 destination-unreachable or time-exceeded, or an ICMPv6
//! destination-unreachable, packet-too-big or time-exceeded, whose quoted packet is a reply of
//! a connection in `DXDP_FLOWS` (from the exposed address and port to that client) gets the
//! container's address as destination, the quoted packet the container's address and port as
//! source, the checksums made right, and goes into the container like the connection's packets.
//! Any other ICMP passes to the stack.
use aya_ebpf::{
    bindings::{BPF_F_PSEUDO_HDR, TC_ACT_UNSPEC},
    helpers::generated::bpf_csum_diff,
    programs::TcContext,
};
use dxdp_common::ingress::{PROTO_TCP, PROTO_UDP};

use crate::{
    ingress::{
        ETH_HLEN, ETH_P_IP, ETH_P_IPV6, IPV4_HLEN, IPV6_HLEN, exposed, into_container, now, words,
    },
    maps::{FLOWS, PORT_VETHS},
    verdict::v4_mapped,
};

const PROTO_ICMP: u8 = 1;
const PROTO_ICMPV6: u8 = 58;
const ICMP_HLEN: usize = 8;
/// What an error quotes of the packet it is about and this reads: the IP header and the ports.
const QUOTED_L4: usize = 4;
/// ICMPv4 destination unreachable (fragmentation needed is its code 4) and time exceeded.
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_TIME_EXCEEDED: u8 = 11;
/// ICMPv6 destination unreachable, packet too big, time exceeded.
const ICMPV6_DEST_UNREACH: u8 = 1;
const ICMPV6_PACKET_TOO_BIG: u8 = 2;
const ICMPV6_TIME_EXCEEDED: u8 = 3;

/// Where an error and the reply it quotes sit, and what the reply was.
struct Quoted {
    v6: bool,
    /// Offsets of the outer destination address, the ICMP checksum, the quoted IP header.
    outer_dst: usize,
    icmp_csum: usize,
    inner: usize,
    /// The quoted reply: its protocol, its source (the exposed address and port) and its
    /// destination (the client).
    proto: u8,
    src: [u8; 16],
    sport: u16,
    dst: [u8; 16],
    dport: u16,
}

impl Quoted {
    fn inner_src(&self) -> usize {
        self.inner + if self.v6 { 8 } else { 12 }
    }

    fn inner_sport(&self) -> usize {
        self.inner + if self.v6 { IPV6_HLEN } else { IPV4_HLEN }
    }
}

/// An ICMP error arriving on a NIC about a fast-path reply goes to its container; anything
/// else passes.
#[inline(always)]
pub fn ingress(ctx: &TcContext, nic_ifindex: u32) -> i32 {
    let Some(q) = parse(ctx) else {
        return TC_ACT_UNSPEC;
    };
    let Some((_, target, flow)) = exposed(nic_ifindex, q.proto, (q.src, q.sport), (q.dst, q.dport))
    else {
        return TC_ACT_UNSPEC;
    };
    // Only a connection the fast path carries: any other's errors are conntrack's to translate.
    let Some(known) = FLOWS.get_ptr_mut(flow) else {
        return TC_ACT_UNSPEC;
    };
    if PORT_VETHS.get_ifindex(target.veth_ifindex).is_none() {
        return TC_ACT_UNSPEC;
    }
    // SAFETY: a map value pointer, valid for this invocation; a plain store.
    unsafe { (*known).last_seen_ns = now() };
    let translated = translate(ctx, &q, &target.addr, target.port);
    into_container(ctx, target, translated)
}

/// An unfragmented ICMPv4 error without IP options quoting a TCP or UDP packet without options,
/// or an ICMPv6 error (no extension headers) quoting a TCP or UDP packet without any.
#[inline(always)]
fn parse(ctx: &TcContext) -> Option<Quoted> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + ETH_HLEN > end {
        return None;
    }
    // SAFETY: bounds-checked against data_end just above.
    let eth = unsafe { &*(start as *const [u8; ETH_HLEN]) };
    let l3 = start + ETH_HLEN;
    match u16::from_be_bytes([eth[12], eth[13]]) {
        ETH_P_IP => {
            const LEN: usize = IPV4_HLEN + ICMP_HLEN + IPV4_HLEN + QUOTED_L4;
            if l3 + LEN > end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; LEN]) };
            if ip[0] != 0x45 || (ip[6] & 0x3f) != 0 || ip[7] != 0 || ip[9] != PROTO_ICMP {
                return None;
            }
            let icmp = &ip[IPV4_HLEN..];
            if !matches!(icmp[0], ICMP_DEST_UNREACH | ICMP_TIME_EXCEEDED) {
                return None;
            }
            let inner = &ip[IPV4_HLEN + ICMP_HLEN..];
            let proto = inner[9];
            // About a packet this host sent from the address the error is for.
            if inner[0] != 0x45
                || !matches!(proto, PROTO_TCP | PROTO_UDP)
                || ip[16..20] != inner[12..16]
            {
                return None;
            }
            let ports = &inner[IPV4_HLEN..];
            Some(Quoted {
                v6: false,
                outer_dst: ETH_HLEN + 16,
                icmp_csum: ETH_HLEN + IPV4_HLEN + 2,
                inner: ETH_HLEN + IPV4_HLEN + ICMP_HLEN,
                proto,
                src: v4_mapped(&inner[12..16]),
                dst: v4_mapped(&inner[16..20]),
                sport: u16::from_be_bytes([ports[0], ports[1]]),
                dport: u16::from_be_bytes([ports[2], ports[3]]),
            })
        }
        ETH_P_IPV6 => {
            const LEN: usize = IPV6_HLEN + ICMP_HLEN + IPV6_HLEN + QUOTED_L4;
            if l3 + LEN > end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; LEN]) };
            if ip[0] >> 4 != 6 || ip[6] != PROTO_ICMPV6 {
                return None;
            }
            let icmp = &ip[IPV6_HLEN..];
            if !matches!(
                icmp[0],
                ICMPV6_DEST_UNREACH | ICMPV6_PACKET_TOO_BIG | ICMPV6_TIME_EXCEEDED
            ) {
                return None;
            }
            let inner = &ip[IPV6_HLEN + ICMP_HLEN..];
            let proto = inner[6];
            if inner[0] >> 4 != 6
                || !matches!(proto, PROTO_TCP | PROTO_UDP)
                || ip[24..40] != inner[8..24]
            {
                return None;
            }
            let mut src = [0u8; 16];
            src.copy_from_slice(&inner[8..24]);
            let mut dst = [0u8; 16];
            dst.copy_from_slice(&inner[24..40]);
            let ports = &inner[IPV6_HLEN..];
            Some(Quoted {
                v6: true,
                outer_dst: ETH_HLEN + 24,
                icmp_csum: ETH_HLEN + IPV6_HLEN + 2,
                inner: ETH_HLEN + IPV6_HLEN + ICMP_HLEN,
                proto,
                src,
                dst,
                sport: u16::from_be_bytes([ports[0], ports[1]]),
                dport: u16::from_be_bytes([ports[2], ports[3]]),
            })
        }
        _ => None,
    }
}

/// The error's destination and its quoted packet's source become the container's `addr`, the
/// quoted source port `port`. ICMPv4's checksum covers the ICMP message only (the quoted
/// header's own checksum changes with its source, and is part of it); ICMPv6's also covers the
/// pseudo-header, where the destination changed.
#[inline(always)]
fn translate(ctx: &TcContext, q: &Quoted, addr: &[u8; 16], port: u16) -> Result<(), i64> {
    if q.v6 {
        let mut from = words(&q.src);
        let mut to = words(addr);
        // SAFETY: both buffers are 16 bytes on this stack frame.
        let diff = unsafe { bpf_csum_diff(from.as_mut_ptr(), 16, to.as_mut_ptr(), 16, 0) };
        if diff < 0 {
            return Err(diff);
        }
        // The outer destination (in the pseudo-header) and the quoted source change alike.
        ctx.l4_csum_replace(q.icmp_csum, 0, diff as u64, BPF_F_PSEUDO_HDR as u64)?;
        ctx.l4_csum_replace(q.icmp_csum, 0, diff as u64, 0)?;
        ctx.store(q.outer_dst, addr, 0)?;
        ctx.store(q.inner_src(), addr, 0)?;
    } else {
        let from = words(&q.src)[3] as u64;
        let to = words(addr)[3] as u64;
        // The outer header: its destination, with its checksum.
        ctx.l3_csum_replace(ETH_HLEN + 10, from, to, 4)?;
        let mut v4 = [0u8; 4];
        v4.copy_from_slice(&addr[12..16]);
        ctx.store(q.outer_dst, &v4, 0)?;
        // The quoted header: its source, its checksum, and both in the ICMP checksum.
        let inner_csum = q.inner + 10;
        let old_csum: u16 = ctx.load(inner_csum)?;
        ctx.l3_csum_replace(inner_csum, from, to, 4)?;
        let new_csum: u16 = ctx.load(inner_csum)?;
        ctx.l4_csum_replace(q.icmp_csum, from, to, 4)?;
        ctx.l4_csum_replace(q.icmp_csum, old_csum as u64, new_csum as u64, 2)?;
        ctx.store(q.inner_src(), &v4, 0)?;
    }
    let from = u16::from_ne_bytes(q.sport.to_be_bytes()) as u64;
    let to = u16::from_ne_bytes(port.to_be_bytes()) as u64;
    ctx.l4_csum_replace(q.icmp_csum, from, to, 2)?;
    ctx.store(q.inner_sport(), &port.to_be_bytes(), 0)?;
    Ok(())
}
