//! Published ports straight from the NIC into the container (issue 24): the translation Docker's
//! DNAT and conntrack make, done by two programs, so that neither the host's netfilter nor the
//! bridge is on the way.
//!
//! - `dxdp_ingress` (TCX ingress on a NIC): a TCP or UDP packet to an exposed (address, port)
//!   gets the container's address and port as destination, the container's MAC, and
//!   `bpf_redirect_peer` into its namespace. Its connection is remembered: a TCP connection
//!   in `DXDP_OPENING`, and in `DXDP_FLOWS` once the client has acknowledged the container's
//!   SYN-ACK (see `Opening`); a UDP flow in `DXDP_UDP_FLOWS`.
//! - `dxdp_reply` (TCX ingress on the container's host veth): a packet of a remembered
//!   connection gets the published address and port back as source, and leaves through the NIC
//!   by `bpf_redirect_neigh` (the kernel's FIB and neighbour table pick the next hop).
//!
//! - ICMP errors about those replies go to the container too, and the container's errors about
//!   its connections' packets leave through the NIC as the published port's (`icmp_errors`).
//!
//! Everything else passes, unchanged, to the programs after ours and the stack.
use aya_ebpf::{
    bindings::{
        BPF_F_MARK_MANGLED_0, BPF_F_PSEUDO_HDR, BPF_FIB_LOOKUP_SKIP_NEIGH, TC_ACT_SHOT,
        TC_ACT_UNSPEC, bpf_fib_lookup,
    },
    helpers::generated::{
        bpf_csum_diff, bpf_fib_lookup as fib_lookup, bpf_ktime_get_ns, bpf_redirect_neigh,
    },
    programs::TcContext,
};
use dxdp_common::ingress::{
    Flow, FlowKey, Opening, PROTO_TCP, PROTO_UDP, PortKey, PortTarget, refused_source,
};

use crate::{
    icmp_errors,
    maps::{FLOWS, OPENING, PORT_VETHS, PORTS, UDP_FLOWS},
    verdict::v4_mapped,
};

pub(crate) const ETH_HLEN: usize = 14;
pub(crate) const ETH_P_IP: u16 = 0x0800;
pub(crate) const ETH_P_IPV6: u16 = 0x86DD;
pub(crate) const IPV4_HLEN: usize = 20;
pub(crate) const IPV6_HLEN: usize = 40;
/// Source and destination port, and UDP's length and checksum: what is read of layer 4.
const L4_READ: usize = 8;
const TCP_CSUM_OFF: usize = 16;
/// TCP's sequence and acknowledgement numbers, the flags byte, and the flags of a handshake.
const TCP_SEQ_OFF: usize = 4;
const TCP_ACK_SEQ_OFF: usize = 8;
const TCP_FLAGS_OFF: usize = 13;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;
const UDP_CSUM_OFF: usize = 6;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// A TCP or UDP packet's addresses and ports, and where its headers sit.
struct Packet {
    v6: bool,
    proto: u8,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    /// A connection's first packet: a TCP SYN without ACK, or any UDP datagram (UDP has no
    /// state conntrack could find stale).
    opens: bool,
    /// A TCP SYN with ACK: the answer to a connection's first packet.
    accepts: bool,
    /// A TCP segment with ACK and neither SYN nor RST: the client's that may complete a
    /// handshake.
    acknowledges: bool,
    /// TCP's sequence and acknowledgement numbers (zero for UDP).
    seq: u32,
    ack_seq: u32,
    /// Offset of the IP header and of the layer-4 checksum.
    l3: usize,
    l4_csum: usize,
}

impl Packet {
    /// Byte offset of the source or destination address inside the frame.
    fn addr_offset(&self, source: bool) -> usize {
        match (self.v6, source) {
            (false, true) => self.l3 + 12,
            (false, false) => self.l3 + 16,
            (true, true) => self.l3 + 8,
            (true, false) => self.l3 + 24,
        }
    }

    fn port_offset(&self, source: bool) -> usize {
        let l4 = self.l3 + if self.v6 { IPV6_HLEN } else { IPV4_HLEN };
        if source { l4 } else { l4 + 2 }
    }

    /// Layer-4 checksum flags: UDP over IPv4 may carry none, which must stay none.
    fn csum_flags(&self) -> u64 {
        if self.proto == PROTO_UDP {
            BPF_F_MARK_MANGLED_0 as u64
        } else {
            0
        }
    }
}

/// Parses an unfragmented IPv4 packet without options, or an IPv6 packet whose next header is
/// TCP or UDP, carrying TCP or UDP; `None` for anything else.
#[inline(always)]
fn parse(ctx: &TcContext) -> Option<Packet> {
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
            if l3 + IPV4_HLEN + L4_READ > end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; IPV4_HLEN + L4_READ]) };
            // Version 4, no options; not a fragment (no offset, no more-fragments bit).
            if ip[0] != 0x45 || (ip[6] & 0x3f) != 0 || ip[7] != 0 {
                return None;
            }
            let proto = ip[9];
            let l4_csum = match proto {
                PROTO_TCP => TCP_CSUM_OFF,
                PROTO_UDP => UDP_CSUM_OFF,
                _ => return None,
            };
            let l4 = &ip[IPV4_HLEN..];
            let hs = handshake(proto, l3 + IPV4_HLEN, end)?;
            Some(Packet {
                v6: false,
                opens: hs.opens,
                accepts: hs.accepts,
                acknowledges: hs.acknowledges,
                seq: hs.seq,
                ack_seq: hs.ack_seq,
                proto,
                src: v4_mapped(&ip[12..16]),
                dst: v4_mapped(&ip[16..20]),
                sport: u16::from_be_bytes([l4[0], l4[1]]),
                dport: u16::from_be_bytes([l4[2], l4[3]]),
                l3: ETH_HLEN,
                l4_csum: ETH_HLEN + IPV4_HLEN + l4_csum,
            })
        }
        ETH_P_IPV6 => {
            if l3 + IPV6_HLEN + L4_READ > end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; IPV6_HLEN + L4_READ]) };
            if ip[0] >> 4 != 6 {
                return None;
            }
            let proto = ip[6];
            let l4_csum = match proto {
                PROTO_TCP => TCP_CSUM_OFF,
                PROTO_UDP => UDP_CSUM_OFF,
                // Extension headers (fragments among them) take the stack.
                _ => return None,
            };
            let mut src = [0u8; 16];
            src.copy_from_slice(&ip[8..24]);
            let mut dst = [0u8; 16];
            dst.copy_from_slice(&ip[24..40]);
            let l4 = &ip[IPV6_HLEN..];
            let hs = handshake(proto, l3 + IPV6_HLEN, end)?;
            Some(Packet {
                v6: true,
                opens: hs.opens,
                accepts: hs.accepts,
                acknowledges: hs.acknowledges,
                seq: hs.seq,
                ack_seq: hs.ack_seq,
                proto,
                src,
                dst,
                sport: u16::from_be_bytes([l4[0], l4[1]]),
                dport: u16::from_be_bytes([l4[2], l4[3]]),
                l3: ETH_HLEN,
                l4_csum: ETH_HLEN + IPV6_HLEN + l4_csum,
            })
        }
        _ => None,
    }
}

/// What a TCP or UDP header says of its connection's handshake (the fields of [`Packet`] of
/// the same names).
struct Handshake {
    opens: bool,
    accepts: bool,
    acknowledges: bool,
    seq: u32,
    ack_seq: u32,
}

/// [`Handshake`] of the layer-4 header at `l4`; `None` for a truncated TCP header.
#[inline(always)]
fn handshake(proto: u8, l4: usize, end: usize) -> Option<Handshake> {
    if proto != PROTO_TCP {
        return Some(Handshake {
            opens: true,
            accepts: false,
            acknowledges: false,
            seq: 0,
            ack_seq: 0,
        });
    }
    if l4 + TCP_FLAGS_OFF + 1 > end {
        return None;
    }
    // SAFETY: bounds-checked just above.
    let tcp = unsafe { &*(l4 as *const [u8; TCP_FLAGS_OFF + 1]) };
    let word = |at: usize| u32::from_be_bytes([tcp[at], tcp[at + 1], tcp[at + 2], tcp[at + 3]]);
    let flags = tcp[TCP_FLAGS_OFF] & (TCP_SYN | TCP_RST | TCP_ACK);
    Some(Handshake {
        opens: flags == TCP_SYN,
        accepts: flags == TCP_SYN | TCP_ACK,
        acknowledges: flags == TCP_ACK,
        seq: word(TCP_SEQ_OFF),
        ack_seq: word(TCP_ACK_SEQ_OFF),
    })
}

/// TCX ingress on a NIC: an exposed port's packets go straight into their container.
#[inline(always)]
pub fn ingress(ctx: &TcContext) -> i32 {
    // SAFETY: the verifier guarantees ctx.skb.skb points at a valid __sk_buff for this call.
    let nic_ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let Some(packet) = parse(ctx) else {
        return icmp_errors::ingress(ctx, nic_ifindex);
    };
    let Some((key, target, flow)) = exposed(
        nic_ifindex,
        packet.proto,
        (packet.dst, packet.dport),
        (packet.src, packet.sport),
    ) else {
        return TC_ACT_UNSPEC;
    };
    // A veth that is gone (its container stopped) is not in the devmap any more: the kernel
    // removes it at unregistration, so a reused ifindex is not taken for it either.
    let admitted = PORT_VETHS.get_ifindex(target.veth_ifindex).is_some()
        && admit(ctx, &packet, key, flow, nic_ifindex);
    if !admitted {
        target.passed_packets += 1;
        return TC_ACT_UNSPEC;
    }
    let translated = translate(ctx, &packet, false, &target.addr, target.port);
    into_container(ctx, target, translated)
}

/// Whether `packet`, to the exposed port `port`, takes the fast path: a packet of a connection
/// the tables know (kept alive by it; in `DXDP_OPENING`, the client's acknowledgement of the
/// container's SYN-ACK establishes it), or the first packet of a new one, which is remembered:
/// a TCP connection as opening, a UDP flow in its own table.
#[inline(always)]
fn admit(ctx: &TcContext, packet: &Packet, port: PortKey, flow: FlowKey, nic_ifindex: u32) -> bool {
    let Some(known) = known_flow(flow) else {
        // A TCP connection that began before the port was exposed stays on Docker's path
        // (conntrack tracks its windows, and would find them stale once the fast path went).
        // So does a client the host does not route back through this NIC, and one from a
        // source the stack refuses, which a route may still lead back to.
        return packet.opens
            && !refused_source(&packet.src, packet.v6)
            && routes_back(ctx, packet, nic_ifindex)
            && remember(flow, port);
    };
    known.touch();
    // Only a client that received the SYN-ACK knows the number it must acknowledge: a sender
    // of forged SYNs cannot establish their connections, however many it sends.
    if let Known::Opening(opening) = known
        && packet.acknowledges
    {
        // SAFETY: a map value pointer, valid for this invocation; plain loads.
        let (answered, completing_ack) =
            unsafe { ((*opening).answered, (*opening).completing_ack) };
        if answered != 0 && packet.ack_seq == completing_ack {
            establish(flow, known.port());
        }
    }
    true
}

/// Remembers the new connection `flow`, let in through `port`: a TCP one as opening, a UDP one
/// in `DXDP_UDP_FLOWS`, where forged datagrams can only push out other UDP flows (no handshake
/// tells a forged UDP client from a real one; the container answers both).
#[inline(always)]
fn remember(flow: FlowKey, port: PortKey) -> bool {
    let first = Flow {
        port,
        last_seen_ns: now(),
    };
    if flow.proto == PROTO_UDP {
        return UDP_FLOWS.insert(flow, first, 0).is_ok();
    }
    let opening = Opening {
        flow: first,
        completing_ack: 0,
        answered: 0,
    };
    OPENING.insert(flow, opening, 0).is_ok()
}

/// Moves the connection `flow` from `DXDP_OPENING` to `DXDP_FLOWS`: added before it is removed,
/// so that a lookup on another CPU finds it in one of them. Where `DXDP_FLOWS` cannot take it
/// (out of memory), it stays opening, which carries it all the same.
#[inline(always)]
fn establish(flow: FlowKey, port: PortKey) {
    let established = Flow {
        port,
        last_seen_ns: now(),
    };
    if FLOWS.insert(flow, established, 0).is_ok() {
        let _ = OPENING.remove(flow);
    }
}

/// The exposed port at `published` (address, port) for `proto` on the NIC, and the key of
/// `client`'s connection to its container; `None` if nothing is exposed there.
#[inline(always)]
pub(crate) fn exposed(
    nic_ifindex: u32,
    proto: u8,
    published: ([u8; 16], u16),
    client: ([u8; 16], u16),
) -> Option<(PortKey, &'static mut PortTarget, FlowKey)> {
    let key = PortKey {
        nic_ifindex,
        port: published.1,
        proto,
        _pad: 0,
        addr: published.0,
    };
    let target = PORTS.get_ptr_mut(key)?;
    // SAFETY: this CPU's copy of the value, valid for this invocation; nothing else writes it.
    let target = unsafe { &mut *target };
    let flow = FlowKey::new(
        target.veth_ifindex,
        proto,
        (target.addr, target.port),
        client,
    );
    Some((key, target, flow))
}

/// A packet `translated` for `target`'s container gets the container's MAC as destination and
/// the bridge's as source (what the bridge would have delivered), is counted, and goes into the
/// container's namespace.
#[inline(always)]
pub(crate) fn into_container(
    ctx: &TcContext,
    target: &mut PortTarget,
    translated: Result<(), i64>,
) -> i32 {
    let mut macs = [0u8; 12];
    macs[..6].copy_from_slice(&target.mac);
    macs[6..].copy_from_slice(&target.gateway_mac);
    if translated.is_err() || ctx.store(0, &macs, 0).is_err() {
        // Half rewritten (the helpers fail only on memory pressure): a frame that cannot be
        // delivered as translated must not reach the stack either.
        return TC_ACT_SHOT;
    }
    target.in_packets += 1;
    target.in_bytes += ctx.len() as u64;
    // SAFETY: a plain helper call; it only records the target in per-CPU redirect info.
    unsafe { aya_ebpf::helpers::generated::bpf_redirect_peer(target.veth_ifindex, 0) as i32 }
}

/// TCX ingress on an exposed container's host veth: replies of the connections `ingress` let in
/// leave through the NIC they came from, as from the published address and port.
#[inline(always)]
pub fn reply(ctx: &TcContext) -> i32 {
    // SAFETY: as in `ingress`.
    let veth_ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let Some(packet) = parse(ctx) else {
        return icmp_errors::reply(ctx, veth_ifindex);
    };
    // The reply's source is the container, its destination the client.
    let flow = FlowKey::new(
        veth_ifindex,
        packet.proto,
        (packet.src, packet.sport),
        (packet.dst, packet.dport),
    );
    let Some(known) = known_flow(flow) else {
        return TC_ACT_UNSPEC;
    };
    let port = known.port();
    let target = PORTS.get_ptr_mut(port);
    // A SYN-ACK answers a connection's first packet: if the port no longer leads here, that
    // packet came over Docker's path (a client reusing its address and port after an
    // unexpose), and so must this answer, for conntrack to see the connection it tracks.
    // SAFETY (the read): this CPU's copy of a map value, valid for this invocation.
    if packet.accepts && target.is_none_or(|t| unsafe { (*t).veth_ifindex } != veth_ifindex) {
        known.forget(flow);
        return TC_ACT_UNSPEC;
    }
    known.touch();
    if let Known::Opening(opening) = known
        && packet.accepts
    {
        // SAFETY: a map value pointer, valid for this invocation; plain stores. A retransmitted
        // SYN-ACK carries the same number.
        unsafe {
            (*opening).completing_ack = packet.seq.wrapping_add(1);
            (*opening).answered = 1;
        }
    }
    // The flow alone decides, also after the port was unexposed: only this veth's container,
    // from the address and port the connection was let in to, to that very client, is
    // answered as the published port, which is what it is.
    let translated = translate(ctx, &packet, true, &port.addr, port.port);
    out_of_nic(ctx, &port, target, veth_ifindex, translated)
}

/// A connection in the tables, by the table it is in.
#[derive(Clone, Copy)]
pub(crate) enum Known {
    /// A TCP connection in `DXDP_FLOWS`.
    Established(*mut Flow),
    /// A TCP connection in `DXDP_OPENING`.
    Opening(*mut Opening),
    /// A UDP flow in `DXDP_UDP_FLOWS`.
    Udp(*mut Flow),
}

impl Known {
    /// The part every table's entry has: the port and when it was last seen.
    #[inline(always)]
    fn flow(self) -> *mut Flow {
        match self {
            Self::Established(flow) | Self::Udp(flow) => flow,
            // SAFETY: a map value pointer, valid for this invocation; no reference is made.
            Self::Opening(opening) => unsafe { core::ptr::addr_of_mut!((*opening).flow) },
        }
    }

    /// The exposed port the connection was let in through.
    #[inline(always)]
    pub(crate) fn port(self) -> PortKey {
        // SAFETY: a map value pointer, valid for this invocation; the key is copied out.
        unsafe { (*self.flow()).port }
    }

    /// Records that the connection carried a packet now.
    #[inline(always)]
    pub(crate) fn touch(self) {
        // SAFETY: a map value pointer, valid for this invocation; a plain store.
        unsafe { (*self.flow()).last_seen_ns = now() };
    }

    /// Removes the connection `flow` (this one's key) from its table.
    #[inline(always)]
    fn forget(self, flow: FlowKey) {
        let _ = match self {
            Self::Established(_) => FLOWS.remove(flow),
            Self::Opening(_) => OPENING.remove(flow),
            Self::Udp(_) => UDP_FLOWS.remove(flow),
        };
    }
}

/// The connection `flow`, in the table its protocol and state put it in; `None` if the fast
/// path did not let it in (or forgot it).
#[inline(always)]
pub(crate) fn known_flow(flow: FlowKey) -> Option<Known> {
    if flow.proto == PROTO_UDP {
        return UDP_FLOWS.get_ptr_mut(flow).map(Known::Udp);
    }
    if let Some(established) = FLOWS.get_ptr_mut(flow) {
        return Some(Known::Established(established));
    }
    OPENING.get_ptr_mut(flow).map(Known::Opening)
}

/// A packet from `veth_ifindex`'s container `translated` to be from the published `port` is
/// counted (where the port still leads to that veth) and leaves through the port's NIC.
#[inline(always)]
pub(crate) fn out_of_nic(
    ctx: &TcContext,
    port: &PortKey,
    target: Option<*mut PortTarget>,
    veth_ifindex: u32,
    translated: Result<(), i64>,
) -> i32 {
    if translated.is_err() {
        return TC_ACT_SHOT;
    }
    if let Some(target) = target {
        // SAFETY: this CPU's copy of the value; nothing else writes it now.
        let target = unsafe { &mut *target };
        // Counted where the port still leads here (not while its connections drain).
        if target.veth_ifindex == veth_ifindex {
            target.out_packets += 1;
            target.out_bytes += ctx.len() as u64;
        }
    }
    // SAFETY: a plain helper call; a null neighbour means "look the next hop up in the FIB".
    unsafe { bpf_redirect_neigh(port.nic_ifindex, core::ptr::null_mut(), 0, 0) as i32 }
}

#[inline(always)]
pub(crate) fn now() -> u64 {
    // SAFETY: a plain helper call.
    unsafe { bpf_ktime_get_ns() }
}

/// Whether the host routes the client's address back out of the NIC the packet came in on: only
/// then can the replies leave there, as the stack would send them. Asked once per connection.
#[inline(always)]
fn routes_back(ctx: &TcContext, packet: &Packet, nic_ifindex: u32) -> bool {
    // SAFETY: plain data; every field the lookup reads is set below or zero.
    let mut params: bpf_fib_lookup = unsafe { core::mem::zeroed() };
    params.l4_protocol = packet.proto;
    params.sport = packet.dport.to_be();
    params.dport = packet.sport.to_be();
    params.ifindex = nic_ifindex;
    if packet.v6 {
        params.family = AF_INET6;
        params.__bindgen_anon_3.ipv6_src = words(&packet.dst);
        params.__bindgen_anon_4.ipv6_dst = words(&packet.src);
    } else {
        params.family = AF_INET;
        params.__bindgen_anon_3.ipv4_src = words(&packet.dst)[3];
        params.__bindgen_anon_4.ipv4_dst = words(&packet.src)[3];
    }
    // SAFETY: the helper reads and writes `params`, which lives on this stack frame.
    let rc = unsafe {
        fib_lookup(
            ctx.skb.skb as *mut _,
            &mut params,
            core::mem::size_of::<bpf_fib_lookup>() as i32,
            BPF_FIB_LOOKUP_SKIP_NEIGH,
        )
    };
    rc == 0 && params.ifindex == nic_ifindex
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

/// Rewrites the packet's source (`source`) or destination address and port to `addr`:`port`,
/// with the IPv4 header checksum and the layer-4 checksum (pseudo-header included) made right
/// whether the checksum is complete, partial (offloaded) or, for UDP over IPv4, absent.
#[inline(always)]
fn translate(
    ctx: &TcContext,
    packet: &Packet,
    source: bool,
    addr: &[u8; 16],
    port: u16,
) -> Result<(), i64> {
    let old_addr = if source { &packet.src } else { &packet.dst };
    let old_port = if source { packet.sport } else { packet.dport };
    let flags = packet.csum_flags();
    if packet.v6 {
        let mut from = words(old_addr);
        let mut to = words(addr);
        // SAFETY: both buffers are 16 bytes on this stack frame.
        let diff = unsafe { bpf_csum_diff(from.as_mut_ptr(), 16, to.as_mut_ptr(), 16, 0) };
        if diff < 0 {
            return Err(diff);
        }
        ctx.l4_csum_replace(
            packet.l4_csum,
            0,
            diff as u64,
            BPF_F_PSEUDO_HDR as u64 | flags,
        )?;
        ctx.store(packet.addr_offset(source), addr, 0)?;
    } else {
        let from = words(old_addr)[3] as u64;
        let to = words(addr)[3] as u64;
        ctx.l4_csum_replace(
            packet.l4_csum,
            from,
            to,
            BPF_F_PSEUDO_HDR as u64 | flags | 4,
        )?;
        ctx.l3_csum_replace(packet.l3 + 10, from, to, 4)?;
        let mut v4 = [0u8; 4];
        v4.copy_from_slice(&addr[12..16]);
        ctx.store(packet.addr_offset(source), &v4, 0)?;
    }
    let from = u16::from_ne_bytes(old_port.to_be_bytes()) as u64;
    let to = u16::from_ne_bytes(port.to_be_bytes()) as u64;
    ctx.l4_csum_replace(packet.l4_csum, from, to, flags | 2)?;
    ctx.store(packet.port_offset(source), &port.to_be_bytes(), 0)?;
    Ok(())
}
