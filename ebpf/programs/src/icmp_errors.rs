//! ICMP errors about the fast path's replies, taken to the container that sent them, and a
//! container's errors about the fast path's packets, taken to the client, as conntrack takes
//! them on Docker's path (as RELATED, translated).
//!
//! A router between the host and a client that cannot forward a reply (a link with a smaller
//! MTU: "fragmentation needed" / "packet too big"; an unreachable or expired route) answers the
//! reply's source, the published address. On Docker's path conntrack finds the connection the
//! error quotes and translates the error back to the container; without that, a container
//! never learns the path's MTU and a connection whose segments are too big stalls (a PMTU black
//! hole). So: an ICMPv4 destination-unreachable, time-exceeded or parameter-problem, or an
//! ICMPv6 destination-unreachable, packet-too-big, time-exceeded or parameter-problem, whose
//! quoted packet is a reply of a connection the fast path let in (in any of its tables: from
//! the exposed address and port to that client) gets the container's address as destination, the quoted packet the
//! container's address and port as source, the checksums made right, and goes into the
//! container like the connection's packets.
//!
//! The other way, the same errors a container sends about a packet a client sent it over the
//! fast path (a UDP datagram to a port nothing listens on: "port unreachable", which the
//! client's socket takes as ECONNREFUSED; "parameter problem" about a first fragment its
//! reassembly refuses) leave through the NIC as conntrack translates them: from the published
//! address, quoting the published address and port as the destination, the checksums made
//! right. Any other ICMP passes to the stack, IPv4's source quench and redirect among them
//! (which conntrack relates too, and which nothing here has needed yet).
use core::ffi::c_void;

use aya_ebpf::{
    bindings::{BPF_F_PSEUDO_HDR, TC_ACT_UNSPEC, bpf_fib_lookup},
    helpers::generated::{bpf_csum_diff, bpf_skb_load_bytes},
    macros::map,
    maps::PerCpuArray,
    programs::TcContext,
};
use dxdp_common::ingress::{FlowKey, refused_source};

use crate::{
    checksum,
    flows::{
        exposed, for_this_host, into_container, known_flow, out_of_nic, reset_port, routes_back,
    },
    headers::{
        ETH_HLEN, ETH_P_IP, ETH_P_IPV6, ICMP_ERROR_READ, ICMP_HLEN, IPV4_HLEN, IPV4_OPTIONS_MAX,
        IPV6_EXTENSION_UNIT, IPV6_FRAGMENT, IPV6_FRAGMENT_HLEN, IPV6_HLEN, IPV6_HOP_BY_HOP,
        PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP, ethertype, fits_mtu, ipv4_fragment,
        ipv4_header_with_options_valid, ipv4_options, ipv4_options_padding_only,
        ipv6_fragment_passed_on, ipv6_hop_by_hop_padding_only, ipv6_length_valid, v4_mapped, words,
    },
    maps::{PORT_VETHS, PORTS},
    routes,
};

/// What an error quotes of the packet it is about and this reads: the IP header and the ports.
const QUOTED_L4: usize = 4;
/// ICMPv4 destination unreachable (fragmentation needed is its code 4), time exceeded and
/// parameter problem.
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_TIME_EXCEEDED: u8 = 11;
const ICMP_PARAMETER_PROBLEM: u8 = 12;
/// ICMPv6 destination unreachable, packet too big, time exceeded, parameter problem.
const ICMPV6_DEST_UNREACH: u8 = 1;
const ICMPV6_PACKET_TOO_BIG: u8 = 2;
const ICMPV6_TIME_EXCEEDED: u8 = 3;
const ICMPV6_PARAMETER_PROBLEM: u8 = 4;

/// Where an error and the packet it quotes sit, and what that packet was. Its `local` end is
/// this host's: the exposed address and port an error from a client's router is about (the
/// quoted reply's source), or the container's an error from the container is about (the quoted
/// packet's destination); its `remote` end is the client.
#[repr(C)]
struct Quoted {
    v6: bool,
    /// Offsets of the outer address that is the local end (the error's destination coming in,
    /// its source going out), of the ICMP message (and its length by the IP header), of the
    /// quoted IP header, of the quoted local address and port.
    outer: usize,
    icmp: usize,
    icmp_len: usize,
    inner: usize,
    inner_local: usize,
    inner_local_port: usize,
    proto: u8,
    local: ([u8; 16], u16),
    remote: ([u8; 16], u16),
    /// The error's own source (a router's address coming in) and destination, and whether the
    /// host would forward the error on (a TTL or hop limit above 1; IPv4's header checksum
    /// right; an IP length the frame holds).
    from: [u8; 16],
    to: [u8; 16],
    forwardable: bool,
}

/// Where `parse` puts what it reads: the error as parsed, its IP options, the part of its message
/// read. Scratch memory (each CPU's own, used within one invocation), since the ICMP programs'
/// frames hold the checksum's and the route lookup's buffers besides.
#[repr(C)]
struct ErrorScratch {
    quoted: Quoted,
    options: [u8; IPV4_OPTIONS_MAX],
    message: [u8; ICMP_ERROR_READ],
    /// The route lookup's parameters (`routes_back`).
    fib: bpf_fib_lookup,
}

#[map(name = "DXDP_ICMP_SCRATCH")]
static ERROR_SCRATCH: PerCpuArray<ErrorScratch> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's [`ErrorScratch`].
#[inline(always)]
fn scratch() -> Option<&'static mut ErrorScratch> {
    // SAFETY: this CPU's own value, used by nothing else during this invocation (a program is
    // not preempted on its CPU by another of its kind).
    ERROR_SCRATCH
        .get_ptr_mut(0)
        .map(|value| unsafe { &mut *value })
}

impl Quoted {
    /// What conntrack sums of the error (`checksum`): the ICMP message, and for ICMPv6 the
    /// pseudo-header of the error's own addresses.
    #[inline(always)]
    fn message(&self, icmp: u8) -> checksum::Message<'_> {
        checksum::Message {
            v6: self.v6,
            proto: icmp,
            src: &self.from,
            dst: &self.to,
            at: self.icmp,
            len: self.icmp_len,
            checksum_at: 2,
        }
    }
}

/// An ICMP error arriving on a NIC about a fast-path reply goes to its container; anything
/// else passes. The error's source must pass the checks a connection's first packet passes
/// (`ingress::admit`): not one the stack refuses, and one the host routes back out of this
/// NIC, which neither the host's own addresses nor a container's are. Docker's path drops
/// an error from such a source (as a martian, or by reverse-path filtering), so the fast path
/// must not deliver it: a forged "fragmentation needed" would cut the container's path MTU.
#[inline(always)]
pub fn ingress(ctx: &TcContext) -> i32 {
    // SAFETY: the verifier guarantees ctx.skb.skb points at a valid __sk_buff for this call.
    let nic_ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let Some(scratch) = scratch() else {
        return TC_ACT_UNSPEC;
    };
    if parse(ctx, false, scratch).is_none() {
        return TC_ACT_UNSPEC;
    }
    let q = &scratch.quoted;
    let icmp = if q.v6 { PROTO_ICMPV6 } else { PROTO_ICMP };
    if !q.forwardable
        || !for_this_host(ctx)
        || !routes_back(
            ctx,
            &mut scratch.fib,
            q.v6,
            icmp,
            (&q.local.0, 0),
            (&q.from, 0),
            nic_ifindex,
        )
        || !checksum::taken(ctx, &q.message(icmp))
    {
        return TC_ACT_UNSPEC;
    }
    let Some((_, target, flow)) = exposed(
        nic_ifindex,
        q.proto,
        (&q.local.0, q.local.1),
        (&q.remote.0, q.remote.1),
    ) else {
        return TC_ACT_UNSPEC;
    };
    // Only a connection the fast path carries, or one an RST closed that conntrack would still
    // hold: any other's errors are conntrack's to translate.
    let known = known_flow(flow);
    if known.is_none() && reset_port(flow).is_none() {
        return TC_ACT_UNSPEC;
    }
    if PORT_VETHS.get_ifindex(target.veth_ifindex).is_none() {
        return TC_ACT_UNSPEC;
    }
    if let Some(known) = known {
        known.touch();
    }
    let translated = translate(ctx, q, &target.addr, target.port);
    into_container(ctx, target, translated)
}

/// An ICMP error a container sends about a fast-path connection (its quoted packet one the
/// client sent it over the fast path) leaves through the NIC as from the published address
/// and port, as conntrack translates it on Docker's path; anything else passes.
#[inline(always)]
pub fn reply(ctx: &TcContext) -> i32 {
    // SAFETY: as in `ingress`.
    let veth_ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let Some(scratch) = scratch() else {
        return TC_ACT_UNSPEC;
    };
    if parse(ctx, true, scratch).is_none() {
        return TC_ACT_UNSPEC;
    }
    let q = &scratch.quoted;
    // The quoted packet came from the client to the container.
    let flow = FlowKey::new(veth_ifindex, q.proto, q.local, q.remote);
    if !q.forwardable {
        return TC_ACT_UNSPEC;
    }
    // A connection the fast path carries, or one an RST closed that conntrack would still hold.
    let port = match known_flow(flow) {
        Some(known) => {
            known.touch();
            known.port()
        }
        None => match reset_port(flow) {
            Some(port) => port,
            None => return TC_ACT_UNSPEC,
        },
    };
    if !fits_mtu(ctx, port.nic_ifindex) || !routes::fit(ctx, &q.to, q.v6, None, port.nic_ifindex) {
        return TC_ACT_UNSPEC;
    }
    let translated = translate(ctx, q, &port.addr, port.port);
    out_of_nic(
        ctx,
        &port,
        PORTS.get_ptr_mut(port),
        veth_ifindex,
        translated,
    )
}

/// An unfragmented ICMPv4 error (its IP options, if any, padding only) quoting a TCP or UDP
/// packet without options, or an ICMPv6 error (after at most a hop-by-hop header of padding
/// or the header of a first fragment conntrack passes on as it is) quoting a TCP or UDP packet
/// without extension headers or with a first fragment's header only; about a packet from its
/// destination coming in, to its source going out (`outward`). Such an error is what conntrack relates to the connection it quotes
/// and Docker's path delivers; what the stack would judge or rewrite on the way (other IP
/// options, other extension headers) is left to it.
#[inline(always)]
fn parse(ctx: &TcContext, outward: bool, scratch: &mut ErrorScratch) -> Option<()> {
    let (ethertype, l3) = ethertype(ctx)?;
    // What the frame holds after its Ethernet header, by its own length: an IP header that
    // claims more is one the stack drops.
    let l3_len = (ctx.len() as usize).saturating_sub(ETH_HLEN);
    // Within an IP header: where the local end's address is outside and inside, and where
    // the local port is after the quoted header.
    let (outer_v4, inner_v4, outer_v6, inner_v6, port) = if outward {
        (12, 16, 8, 24, 2)
    } else {
        (16, 12, 24, 8, 0)
    };
    match ethertype {
        ETH_P_IP => {
            const MESSAGE: usize = ICMP_HLEN + IPV4_HLEN + QUOTED_L4;
            if l3 + IPV4_HLEN > ctx.data_end() {
                return None;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; IPV4_HLEN]) };
            if ip[0] >> 4 != 4 || ip[0] & 0x0f < 5 || ipv4_fragment(ip) || ip[9] != PROTO_ICMP {
                return None;
            }
            let options_len = ((ip[0] & 0x0f) as usize - 5) * 4;
            let options = ipv4_options(ctx, options_len, &mut scratch.options)?;
            if !ipv4_options_padding_only(options, options_len) {
                return None;
            }
            let icmp_at = ETH_HLEN + IPV4_HLEN + options_len;
            let message = load::<MESSAGE>(ctx, icmp_at, &mut scratch.message)?;
            let icmp = &message[..ICMP_HLEN];
            if !matches!(
                icmp[0],
                ICMP_DEST_UNREACH | ICMP_TIME_EXCEEDED | ICMP_PARAMETER_PROBLEM
            ) {
                return None;
            }
            let inner = &message[ICMP_HLEN..];
            let proto = inner[9];
            // About a packet to or from the address the error is from or for; one the container
            // sends goes to the client whose packet it quotes, and nowhere else (a router's
            // error coming in is from anywhere).
            if inner[0] != 0x45
                || !matches!(proto, PROTO_TCP | PROTO_UDP)
                || ip[outer_v4..outer_v4 + 4] != inner[inner_v4..inner_v4 + 4]
                || (outward && ip[16..20] != inner[12..16])
            {
                return None;
            }
            // An error from a source the stack refuses stays with the stack, which drops it.
            if !outward && refused_source(&v4_mapped(&ip[12..16]), false) {
                return None;
            }
            let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
            let header_len = IPV4_HLEN + options_len;
            let forwardable = ip[8] > 1
                && ipv4_header_with_options_valid(ip, options, options_len, l3_len)
                && total >= header_len + MESSAGE;
            let remote_v4 = 28 - inner_v4;
            let local = v4_mapped(&inner[inner_v4..inner_v4 + 4]);
            let remote = v4_mapped(&inner[remote_v4..remote_v4 + 4]);
            let ports = &inner[IPV4_HLEN..];
            let inner = icmp_at + ICMP_HLEN;
            scratch.quoted = Quoted {
                v6: false,
                from: v4_mapped(&ip[12..16]),
                to: v4_mapped(&ip[16..20]),
                forwardable,
                outer: ETH_HLEN + outer_v4,
                icmp: icmp_at,
                icmp_len: total.saturating_sub(header_len),
                inner,
                inner_local: inner + inner_v4,
                inner_local_port: inner + IPV4_HLEN + port,
                proto,
                local: (local, u16::from_be_bytes([ports[port], ports[port + 1]])),
                remote: (
                    remote,
                    u16::from_be_bytes([ports[2 - port], ports[3 - port]]),
                ),
            };
            Some(())
        }
        ETH_P_IPV6 => {
            const MESSAGE: usize = ICMP_HLEN + IPV6_HLEN + QUOTED_L4;
            // One quoting a first fragment (a container's "parameter problem" about one the
            // fast path carried it, see `ingress::ingress`): conntrack relates it by the
            // ports after the fragment header (`ipv6_skip_exthdr`), as this does.
            const FRAGMENT_MESSAGE: usize = MESSAGE + IPV6_FRAGMENT_HLEN;
            if l3 + IPV6_HLEN + IPV6_EXTENSION_UNIT > ctx.data_end() {
                return None;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; IPV6_HLEN + IPV6_EXTENSION_UNIT]) };
            if ip[0] >> 4 != 6 {
                return None;
            }
            let payload_len = u16::from_be_bytes([ip[4], ip[5]]);
            let mut extension = [0u8; IPV6_EXTENSION_UNIT];
            extension.copy_from_slice(&ip[IPV6_HLEN..]);
            let extension_len = match ip[6] {
                PROTO_ICMPV6 => 0,
                IPV6_HOP_BY_HOP if ipv6_hop_by_hop_padding_only(&extension) => IPV6_EXTENSION_UNIT,
                IPV6_FRAGMENT if ipv6_fragment_passed_on(&extension, payload_len) => {
                    IPV6_EXTENSION_UNIT
                }
                _ => return None,
            };
            if extension_len != 0 && extension[0] != PROTO_ICMPV6 {
                return None;
            }
            let icmp_at = ETH_HLEN + IPV6_HLEN + extension_len;
            let message = load::<MESSAGE>(ctx, icmp_at, &mut scratch.message)?;
            let icmp = &message[..ICMP_HLEN];
            if !matches!(
                icmp[0],
                ICMPV6_DEST_UNREACH
                    | ICMPV6_PACKET_TOO_BIG
                    | ICMPV6_TIME_EXCEEDED
                    | ICMPV6_PARAMETER_PROBLEM
            ) {
                return None;
            }
            let quoted_extension_len = if message[ICMP_HLEN + 6] == IPV6_FRAGMENT {
                let message = load::<FRAGMENT_MESSAGE>(ctx, icmp_at, &mut scratch.message)?;
                let fragment = &message[ICMP_HLEN + IPV6_HLEN..];
                // Offset 0: a later fragment quotes no ports, and conntrack relates nothing.
                if u16::from_be_bytes([fragment[2], fragment[3]]) & !0x7 != 0 {
                    return None;
                }
                IPV6_FRAGMENT_HLEN
            } else {
                0
            };
            // The quoted packet's protocol and ports, after its fragment header if it has one.
            let message = &scratch.message;
            let after = ICMP_HLEN + IPV6_HLEN;
            let (proto, ports) = if quoted_extension_len != 0 {
                let at = after + IPV6_FRAGMENT_HLEN;
                (
                    message[after],
                    [
                        message[at],
                        message[at + 1],
                        message[at + 2],
                        message[at + 3],
                    ],
                )
            } else {
                let at = after;
                (
                    message[ICMP_HLEN + 6],
                    [
                        message[at],
                        message[at + 1],
                        message[at + 2],
                        message[at + 3],
                    ],
                )
            };
            let inner = &message[ICMP_HLEN..];
            if inner[0] >> 4 != 6
                || !matches!(proto, PROTO_TCP | PROTO_UDP)
                || ip[outer_v6..outer_v6 + 16] != inner[inner_v6..inner_v6 + 16]
                || (outward && ip[24..40] != inner[8..24])
            {
                return None;
            }
            let mut from = [0u8; 16];
            from.copy_from_slice(&ip[8..24]);
            if !outward && refused_source(&from, true) {
                return None;
            }
            let mut to = [0u8; 16];
            to.copy_from_slice(&ip[24..40]);
            let remote_v6 = 32 - inner_v6;
            let mut local = [0u8; 16];
            local.copy_from_slice(&inner[inner_v6..inner_v6 + 16]);
            let mut remote = [0u8; 16];
            remote.copy_from_slice(&inner[remote_v6..remote_v6 + 16]);
            let inner = icmp_at + ICMP_HLEN;
            scratch.quoted = Quoted {
                v6: true,
                from,
                to,
                forwardable: ip[7] > 1
                    && payload_len as usize >= extension_len + MESSAGE + quoted_extension_len
                    && ipv6_length_valid(payload_len, l3_len),
                outer: ETH_HLEN + outer_v6,
                icmp: icmp_at,
                icmp_len: (payload_len as usize).saturating_sub(extension_len),
                inner,
                inner_local: inner + inner_v6,
                inner_local_port: inner + IPV6_HLEN + quoted_extension_len + port,
                proto,
                local: (local, u16::from_be_bytes([ports[port], ports[port + 1]])),
                remote: (
                    remote,
                    u16::from_be_bytes([ports[2 - port], ports[3 - port]]),
                ),
            };
            Some(())
        }
        _ => None,
    }
}

/// The `N` bytes of the frame at `at`, read into `buffer` (scratch memory: a copy on the
/// stack would not fit there).
#[inline(always)]
fn load<'a, const N: usize>(
    ctx: &TcContext,
    at: usize,
    buffer: &'a mut [u8; ICMP_ERROR_READ],
) -> Option<&'a [u8; N]> {
    const { assert!(N <= ICMP_ERROR_READ) };
    // SAFETY: `buffer` holds ICMP_ERROR_READ >= N bytes; the helper writes N of them or fails.
    let read = unsafe {
        bpf_skb_load_bytes(
            ctx.skb.skb as *mut _,
            at as u32,
            buffer.as_mut_ptr() as *mut c_void,
            N as u32,
        )
    };
    if read < 0 {
        return None;
    }
    // SAFETY: the first N of the buffer's bytes, which the helper wrote.
    Some(unsafe { &*(buffer.as_ptr() as *const [u8; N]) })
}

/// The error's local end (its destination coming in, its source going out) and its quoted
/// packet's become `addr`, the quoted local port `port`. ICMPv4's checksum covers the ICMP
/// message only (the quoted header's own checksum changes with its address, and is part of
/// it); ICMPv6's also covers the pseudo-header, where the outer address changed. The quoted
/// packet's own TCP or UDP checksum is left as it was (conntrack updates it where the whole
/// header is quoted): an error's receiver reads only the addresses and ports.
#[inline(always)]
fn translate(ctx: &TcContext, q: &Quoted, addr: &[u8; 16], port: u16) -> Result<(), i64> {
    if q.v6 {
        let mut from = words(&q.local.0);
        let mut to = words(addr);
        // SAFETY: both buffers are 16 bytes on this stack frame.
        let diff = unsafe { bpf_csum_diff(from.as_mut_ptr(), 16, to.as_mut_ptr(), 16, 0) };
        if diff < 0 {
            return Err(diff);
        }
        // The outer address (in the pseudo-header) and the quoted one change alike.
        ctx.l4_csum_replace(q.icmp + 2, 0, diff as u64, BPF_F_PSEUDO_HDR as u64)?;
        ctx.l4_csum_replace(q.icmp + 2, 0, diff as u64, 0)?;
        ctx.store(q.outer, addr, 0)?;
        ctx.store(q.inner_local, addr, 0)?;
    } else {
        let from = words(&q.local.0)[3] as u64;
        let to = words(addr)[3] as u64;
        // The outer header: its address, with its checksum.
        ctx.l3_csum_replace(ETH_HLEN + 10, from, to, 4)?;
        let mut v4 = [0u8; 4];
        v4.copy_from_slice(&addr[12..16]);
        ctx.store(q.outer, &v4, 0)?;
        // The quoted header: its address, its checksum, and both in the ICMP checksum.
        let inner_csum = q.inner + 10;
        let old_csum: u16 = ctx.load(inner_csum)?;
        ctx.l3_csum_replace(inner_csum, from, to, 4)?;
        let new_csum: u16 = ctx.load(inner_csum)?;
        ctx.l4_csum_replace(q.icmp + 2, from, to, 4)?;
        ctx.l4_csum_replace(q.icmp + 2, old_csum as u64, new_csum as u64, 2)?;
        ctx.store(q.inner_local, &v4, 0)?;
    }
    let from = u16::from_ne_bytes(q.local.1.to_be_bytes()) as u64;
    let to = u16::from_ne_bytes(port.to_be_bytes()) as u64;
    ctx.l4_csum_replace(q.icmp + 2, from, to, 2)?;
    ctx.store(q.inner_local_port, &port.to_be_bytes(), 0)?;
    Ok(())
}
