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
//! Only what the stack would itself forward to the container takes the fast path: a frame
//! addressed to the NIC's MAC, untagged, with a valid IP header (checksum, lengths), a TTL or
//! hop limit that survives forwarding, and a TCP or UDP header conntrack takes as valid
//! (flags, lengths). Both return `None` for a packet they do not parse (no TCP or UDP right
//! after the IP header, or a fragment; a client's IP header may have options of padding only,
//! or one hop-by-hop header of padding only, see `read`): fragments of the container's
//! replies (`fragments`) and ICMP errors (`icmp_errors`) are looked at next, by `main`.
//!
//! Everything else passes, unchanged, to the programs after ours and the stack, save a carried
//! connection's RST or FIN on its last hop, which is dropped (see `ingress`).
use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::map,
    maps::PerCpuArray,
    programs::TcContext,
};
use dxdp_common::{
    ingress::{
        Flow, FlowKey, Opening, PortKey, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN, refused_source,
        tcp_flags_valid, udp_length_valid,
    },
    tcp_window::Verdict,
};

use crate::{
    checksum,
    flows::{
        Known, exposed, for_this_host, into_container, known_flow, now, out_of_nic, routes_back,
    },
    headers::{
        ETH_HLEN, ETH_P_IP, ETH_P_IPV6, IPV4_HLEN, IPV4_OPTIONS_MAX, IPV6_EXTENSION_UNIT,
        IPV6_FRAGMENT, IPV6_HLEN, IPV6_HOP_BY_HOP, PROTO_TCP, PROTO_UDP, TCP_ACK_SEQ_OFF,
        TCP_CSUM_OFF, TCP_DOFF_OFF, TCP_FLAGS_OFF, TCP_HLEN, TCP_SEQ_OFF, UDP_CSUM_OFF, UDP_HLEN,
        UDP_LEN_OFF, ethertype, fits_mtu, ipv4_fragment, ipv4_header_valid,
        ipv4_header_with_options_valid, ipv4_options, ipv4_options_padding_only,
        ipv6_fragment_passed_on, ipv6_hop_by_hop_padding_only, ipv6_length_valid, v4_mapped,
    },
    maps::{FLOWS, OPENING, PORT_VETHS, PORTS, UDP_FLOWS},
    rewrite::{self, Sums},
    routes,
    tcp_windows::{self, Way},
};

/// Source and destination port, and UDP's length and checksum: what is read of layer 4.
const L4_READ: usize = 8;

/// A TCP or UDP packet's addresses and ports, and where its headers sit.
pub(crate) struct Packet {
    pub(crate) v6: bool,
    pub(crate) proto: u8,
    pub(crate) src: [u8; 16],
    pub(crate) dst: [u8; 16],
    pub(crate) sport: u16,
    pub(crate) dport: u16,
    /// A connection's first packet: a TCP SYN without ACK, or any UDP datagram (UDP has no
    /// state conntrack could find stale).
    opens: bool,
    /// A TCP SYN with ACK: the answer to a connection's first packet.
    accepts: bool,
    /// A TCP segment with ACK and neither SYN nor RST: the client's that may complete a
    /// handshake.
    acknowledges: bool,
    /// A TCP segment with RST.
    resets: bool,
    /// A TCP segment with RST or FIN: one conntrack does not pick up mid-stream (`tcp_new`).
    ends: bool,
    /// A TTL or hop limit of 0 or 1: the host answers it "time exceeded" instead of
    /// forwarding it.
    last_hop: bool,
    /// An IPv6 first fragment that conntrack's defragmentation passes on as it is
    /// (`ipv6_fragment_passed_on`): tracked by its TCP or UDP header, carried only as a
    /// segment of a carried connection conntrack takes (its receiver answers it; see `ingress`).
    fragment: bool,
    /// TCP's sequence and acknowledgement numbers (zero for UDP).
    seq: u32,
    ack_seq: u32,
    /// Whether its TCP header is one conntrack takes as valid (flags, data offset); true for UDP.
    header_valid: bool,
    /// Whether its IP header is one `ip_rcv` / `ipv6_rcv` take (IPv4's checksum, the lengths
    /// within the frame) and its UDP length one conntrack takes: checked on packets from
    /// outside, as the stack checks them before Docker's DNAT.
    well_formed: bool,
    /// Offsets of the IP header, of the layer-4 header and of its checksum.
    l3: usize,
    l4: usize,
    l4_csum: usize,
    /// The layer-4 message's length by the IP header.
    l4_len: usize,
}

impl Packet {
    /// Whether the stack would forward the packet on: a TTL or hop limit above 1, and a header
    /// conntrack takes.
    fn forwardable(&self) -> bool {
        !self.last_hop && self.header_valid
    }

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
        if source { self.l4 } else { self.l4 + 2 }
    }

    /// What conntrack sums of the packet (`checksum`).
    fn message(&self) -> checksum::Message<'_> {
        checksum::Message {
            v6: self.v6,
            proto: self.proto,
            src: &self.src,
            dst: &self.dst,
            at: self.l4,
            len: self.l4_len,
            checksum_at: self.l4_csum - self.l4,
        }
    }

    fn sums(&self) -> Sums {
        Sums {
            v6: self.v6,
            l3: self.l3,
            l4_csum: Some(self.l4_csum),
            proto: self.proto,
        }
    }
}

/// Each CPU's [`Packet`] of the packet in hand: what the two programs read of it takes 100
/// bytes their stacks have no room for beside the TCP window check.
#[map(name = "DXDP_PACKET_SCRATCH")]
static PACKET: PerCpuArray<Packet> = PerCpuArray::with_max_entries(1, 0);

/// Each CPU's copy of a client's IPv4 options, read to judge and sum them.
#[map(name = "DXDP_IP_OPTIONS_SCRATCH")]
static IP_OPTIONS: PerCpuArray<[u8; IPV4_OPTIONS_MAX]> = PerCpuArray::with_max_entries(1, 0);

/// [`read`] into this CPU's [`PACKET`]; `OPTIONS`: whether IPv4 options and an IPv6 hop-by-hop
/// header of padding only are taken (a client's packets; the container's replies have none
/// its stack puts there).
#[inline(always)]
fn parse<const OPTIONS: bool>(ctx: &TcContext) -> Option<&'static Packet> {
    // SAFETY: this CPU's copy, valid for this invocation; one packet's at a time.
    let slot = unsafe { &mut *PACKET.get_ptr_mut(0)? };
    read::<OPTIONS>(ctx, slot)?;
    Some(slot)
}

/// Parses an unfragmented IPv4 packet or an IPv6 packet carrying TCP or UDP; `None` for
/// anything else. With `OPTIONS`, the IPv4 header may have options of padding only and the
/// IPv6 header may be followed by one hop-by-hop header of padding only: the stack forwards
/// those as they are (`headers::ipv4_options_padding_only`), conntrack tracks their segments as
/// any others, and a client's segment of a carried connection that took the stack instead would
/// meet a conntrack that never saw the connection (the exposed differential topology's seed
/// 9393, cases 154 and 315). Other options and extension headers are the stack's to judge.
/// Written into `slot` field by field: a `Packet` on the stack would not fit there.
#[inline(always)]
fn read<const OPTIONS: bool>(ctx: &TcContext, slot: &mut Packet) -> Option<()> {
    let end = ctx.data_end();
    let (ethertype, l3) = ethertype(ctx)?;
    // What the frame holds after its Ethernet header, by its own length.
    let l3_len = (ctx.len() as usize).saturating_sub(ETH_HLEN);
    match ethertype {
        ETH_P_IP => {
            if l3 + IPV4_HLEN > end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; IPV4_HLEN]) };
            // Version 4; not a fragment (no offset, no more-fragments bit).
            if ip[0] >> 4 != 4 || ip[0] & 0x0f < 5 || ipv4_fragment(ip) {
                return None;
            }
            let options_len = ((ip[0] & 0x0f) as usize - 5) * 4;
            let options = if options_len == 0 {
                None
            } else if OPTIONS {
                // SAFETY: this CPU's copy, valid for this invocation.
                let buffer = unsafe { &mut *IP_OPTIONS.get_ptr_mut(0)? };
                let options = ipv4_options(ctx, options_len, buffer)?;
                if !ipv4_options_padding_only(options, options_len) {
                    return None;
                }
                Some(options)
            } else {
                return None;
            };
            let proto = ip[9];
            let l4_csum = match proto {
                PROTO_TCP => TCP_CSUM_OFF,
                PROTO_UDP => UDP_CSUM_OFF,
                _ => return None,
            };
            let header_len = IPV4_HLEN + options_len;
            let l4_at = l3 + header_len;
            if l4_at + L4_READ > end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let l4 = unsafe { &*(l4_at as *const [u8; L4_READ]) };
            let total = u16::from_be_bytes([ip[2], ip[3]]);
            let payload = total.saturating_sub(header_len as u16);
            let hs = layer4(proto, l4_at, end, payload, udp_len(l4))?;
            let header_valid = match options {
                None => ipv4_header_valid(ip, l3_len),
                Some(options) => ipv4_header_with_options_valid(ip, options, options_len, l3_len),
            };
            *slot = Packet {
                v6: false,
                opens: hs.opens,
                accepts: hs.accepts,
                acknowledges: hs.acknowledges,
                resets: hs.resets,
                ends: hs.ends,
                seq: hs.seq,
                ack_seq: hs.ack_seq,
                last_hop: ip[8] <= 1,
                fragment: false,
                header_valid: hs.header_valid,
                well_formed: header_valid && hs.length_valid,
                proto,
                src: v4_mapped(&ip[12..16]),
                dst: v4_mapped(&ip[16..20]),
                sport: u16::from_be_bytes([l4[0], l4[1]]),
                dport: u16::from_be_bytes([l4[2], l4[3]]),
                l3: ETH_HLEN,
                l4: ETH_HLEN + header_len,
                l4_csum: ETH_HLEN + header_len + l4_csum,
                l4_len: payload as usize,
            };
            Some(())
        }
        ETH_P_IPV6 => {
            if l3 + IPV6_HLEN + IPV6_EXTENSION_UNIT > end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; IPV6_HLEN + IPV6_EXTENSION_UNIT]) };
            if ip[0] >> 4 != 6 {
                return None;
            }
            let payload = u16::from_be_bytes([ip[4], ip[5]]);
            let mut extension = [0u8; IPV6_EXTENSION_UNIT];
            extension.copy_from_slice(&ip[IPV6_HLEN..]);
            let (proto, extension_len, fragment) = match ip[6] {
                PROTO_TCP | PROTO_UDP => (ip[6], 0, false),
                IPV6_HOP_BY_HOP if OPTIONS && ipv6_hop_by_hop_padding_only(&extension) => {
                    (extension[0], IPV6_EXTENSION_UNIT, false)
                }
                IPV6_FRAGMENT if OPTIONS && ipv6_fragment_passed_on(&extension, payload) => {
                    (extension[0], IPV6_EXTENSION_UNIT, true)
                }
                // Other extension headers (other fragments among them) take the stack.
                _ => return None,
            };
            let l4_csum = match proto {
                PROTO_TCP => TCP_CSUM_OFF,
                PROTO_UDP => UDP_CSUM_OFF,
                _ => return None,
            };
            let l4_at = l3 + IPV6_HLEN + extension_len;
            if l4_at + L4_READ > end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let l4 = unsafe { &*(l4_at as *const [u8; L4_READ]) };
            let mut src = [0u8; 16];
            src.copy_from_slice(&ip[8..24]);
            let mut dst = [0u8; 16];
            dst.copy_from_slice(&ip[24..40]);
            // The upper-layer length, what TCP's and UDP's pseudo-headers and lengths count.
            let upper = payload.saturating_sub(extension_len as u16);
            let hs = layer4(proto, l4_at, end, upper, udp_len(l4))?;
            *slot = Packet {
                v6: true,
                opens: hs.opens,
                accepts: hs.accepts,
                acknowledges: hs.acknowledges,
                resets: hs.resets,
                ends: hs.ends,
                seq: hs.seq,
                ack_seq: hs.ack_seq,
                last_hop: ip[7] <= 1,
                fragment,
                header_valid: hs.header_valid,
                well_formed: ipv6_length_valid(payload, l3_len)
                    && payload as usize >= extension_len
                    && hs.length_valid,
                proto,
                src,
                dst,
                sport: u16::from_be_bytes([l4[0], l4[1]]),
                dport: u16::from_be_bytes([l4[2], l4[3]]),
                l3: ETH_HLEN,
                l4: ETH_HLEN + IPV6_HLEN + extension_len,
                l4_csum: ETH_HLEN + IPV6_HLEN + extension_len + l4_csum,
                l4_len: upper as usize,
            };
            Some(())
        }
        _ => None,
    }
}

/// The length field of the UDP header `l4` starts (meaningless for TCP, which is not asked).
#[inline(always)]
fn udp_len(l4: &[u8]) -> u16 {
    u16::from_be_bytes([l4[UDP_LEN_OFF], l4[UDP_LEN_OFF + 1]])
}

/// What a TCP or UDP header says of its connection's handshake (the fields of [`Packet`] of
/// the same names), and whether conntrack takes it.
struct Layer4 {
    opens: bool,
    accepts: bool,
    acknowledges: bool,
    resets: bool,
    ends: bool,
    seq: u32,
    ack_seq: u32,
    /// TCP: flags conntrack takes (`tcp_flags_valid`) and a data offset of at least 5 words.
    header_valid: bool,
    /// The header fits the IP payload of `ip_payload` bytes (TCP's data offset, UDP's length).
    length_valid: bool,
}

/// [`Layer4`] of the header at `l4`, in an IP payload of `ip_payload` bytes (by the IP
/// header's own length; `udp_len` is what a UDP header says); `None` for a truncated TCP
/// header.
#[inline(always)]
fn layer4(proto: u8, l4: usize, end: usize, ip_payload: u16, udp_len: u16) -> Option<Layer4> {
    if proto != PROTO_TCP {
        return Some(Layer4 {
            opens: true,
            accepts: false,
            acknowledges: false,
            resets: false,
            ends: false,
            seq: 0,
            ack_seq: 0,
            header_valid: true,
            length_valid: ip_payload >= UDP_HLEN && udp_length_valid(udp_len, ip_payload),
        });
    }
    if l4 + TCP_FLAGS_OFF + 1 > end {
        return None;
    }
    // SAFETY: bounds-checked just above.
    let tcp = unsafe { &*(l4 as *const [u8; TCP_FLAGS_OFF + 1]) };
    let word = |at: usize| u32::from_be_bytes([tcp[at], tcp[at + 1], tcp[at + 2], tcp[at + 3]]);
    let all_flags = tcp[TCP_FLAGS_OFF];
    let flags = all_flags & (TCP_SYN | TCP_RST | TCP_ACK);
    let header_len = (tcp[TCP_DOFF_OFF] >> 4) as u16 * 4;
    Some(Layer4 {
        opens: flags == TCP_SYN,
        accepts: flags == TCP_SYN | TCP_ACK,
        acknowledges: flags == TCP_ACK,
        resets: flags & TCP_RST != 0,
        ends: all_flags & (TCP_RST | TCP_FIN) != 0,
        seq: word(TCP_SEQ_OFF),
        ack_seq: word(TCP_ACK_SEQ_OFF),
        header_valid: tcp_flags_valid(all_flags) && header_len >= TCP_HLEN,
        length_valid: header_len <= ip_payload,
    })
}

/// TCX ingress on a NIC: an exposed port's packets go straight into their container; `None`
/// for a packet this does not parse.
#[inline(always)]
pub fn ingress(ctx: &TcContext) -> Option<i32> {
    // SAFETY: the verifier guarantees ctx.skb.skb points at a valid __sk_buff for this call.
    let nic_ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let packet = parse::<true>(ctx)?;
    let Some((key, target, flow)) = exposed(
        nic_ifindex,
        packet.proto,
        (&packet.dst, packet.dport),
        (&packet.src, packet.sport),
    ) else {
        return Some(TC_ACT_UNSPEC);
    };
    // A veth that is gone (its container stopped) is not in the devmap any more: the kernel
    // removes it at unregistration, so a reused ifindex is not taken for it either. What the
    // stack would not forward to the container (see the module's head) is its to refuse.
    // A carried connection's segment at its last hop (TTL or hop limit 0 or 1) or in a first
    // fragment conntrack's defragmentation passes on (`Packet::fragment`) is judged on the
    // window copy, as conntrack judges it on Docker's path, and then:
    //
    // - At its last hop, one conntrack takes moves the copy on, as conntrack's windows, and
    //   goes to the stack to be answered "time exceeded"; one it finds INVALID is refused, as
    //   any INVALID segment, and never reaches the forward path. Left to the stack unjudged,
    //   its conntrack, which never saw the connection, picked even a segment far out of the
    //   window up mid-stream and answered it so (the exposed differential topology's seed
    //   1207, case 161: Docker's path answers with the host's RST).
    // - In a fragment, one conntrack takes is carried into the container, which answers it as
    //   on Docker's path (its reassembly: "parameter problem"). Left to the stack, an RST or a
    //   FIN, which its conntrack does not pick up mid-stream, reached the host's own stack
    //   instead (seed 3107, case 553: a FIN 70,000 bytes back, inside conntrack's window).
    // - An RST or a FIN at its last hop, in a fragment or not, that conntrack takes is
    //   dropped, the copy moved on: Docker's path answers it "time exceeded", but the stack
    //   here would not pick it up, and its own listener on the published port
    //   (docker-proxy's) answers a FIN with an RST the client takes, ending a connection
    //   Docker's path keeps (seed 1207, case 146).
    // - An RST or a FIN at its last hop or in a fragment that conntrack finds INVALID, Docker's
    //   path leaves untranslated, to the host's own stack: it goes there as it came, for the
    //   same answer (seed 2607, cases 819 and 895: a fragment far out of the window, answered
    //   "parameter problem" by the host on both paths).
    let judged_apart = packet.last_hop || packet.fragment;
    let admission = if PORT_VETHS.get_ifindex(target.veth_ifindex).is_some()
        && (!judged_apart || carried_tcp(flow))
        && packet.header_valid
        && packet.well_formed
        && for_this_host(ctx)
        && checksum::taken(ctx, &packet.message())
    {
        let admission = admit(ctx, packet, &key, &flow, nic_ifindex);
        // Read back from the packet's map memory rather than kept from the checks above: the
        // verifier would walk `admit` once for each kind of packet they tell apart.
        // SAFETY: plain loads of this CPU's parsed packet, valid for this invocation.
        let (last_hop, fragment, ends) = unsafe {
            (
                core::ptr::read_volatile(&packet.last_hop),
                core::ptr::read_volatile(&packet.fragment),
                core::ptr::read_volatile(&packet.ends),
            )
        };
        match admission {
            Admission::Carry if last_hop && ends => Admission::Refuse,
            Admission::Carry if last_hop => Admission::Pass,
            Admission::Refuse if ends && (last_hop || fragment) => Admission::Pass,
            admission => admission,
        }
    } else {
        Admission::Pass
    };
    match admission {
        Admission::Carry => {
            let translated = translate(ctx, packet, false, &target.addr, target.port);
            Some(into_container(ctx, target, translated))
        }
        Admission::Pass => {
            target.passed_packets += 1;
            Some(TC_ACT_UNSPEC)
        }
        Admission::Refuse => {
            target.refuse();
            Some(TC_ACT_SHOT)
        }
    }
}

/// Whether `flow` is a TCP connection the fast path carries (opening or established).
#[inline(always)]
fn carried_tcp(flow: FlowKey) -> bool {
    matches!(
        known_flow(flow),
        Some(Known::Opening(_) | Known::Established(_))
    )
}

/// What becomes of a packet to an exposed port.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// Into the container, translated.
    Carry,
    /// To Docker's path, unchanged.
    Pass,
    /// Dropped: a segment of a fast-path connection conntrack would mark INVALID, which
    /// Docker's path never delivers (without an entry, nothing translates it), and which the
    /// stack here would take for a connection of its own (conntrack's mid-stream pickup).
    Refuse,
}

/// What becomes of `packet`, to the exposed port `port`: a packet of a connection the tables
/// know takes the fast path if conntrack would take it (kept alive by it; in `DXDP_OPENING`,
/// the client's acknowledgement of the container's SYN-ACK establishes it), and so does the
/// first packet of a new one, which is remembered: a TCP connection as opening, a UDP flow in
/// its own table.
#[inline(always)]
fn admit(
    ctx: &TcContext,
    packet: &Packet,
    port: &PortKey,
    flow: &FlowKey,
    nic_ifindex: u32,
) -> Admission {
    let (port, flow) = (*port, *flow);
    let Some(known) = known_flow(flow) else {
        return opened(ctx, packet, port, flow, nic_ifindex);
    };
    // A client's own SYN-ACK is one conntrack marks INVALID (`tcp_conntracks`: "client can't
    // send SYN and then SYN/ACK"), save the late retransmission of a simultaneous open once
    // the container has answered (SYN_RECV): Docker's path never delivers it, so it takes
    // that path, where conntrack, which never saw the connection, refuses it all the same.
    let opening = match known {
        Known::Udp(_) => {
            known.touch();
            return Admission::Carry;
        }
        Known::Established(_) if packet.accepts => return Admission::Pass,
        // Both FINs carried: a SYN opens a new connection on the same ports, as conntrack's
        // TIME_WAIT lets it.
        Known::Established(_) if packet.opens && tcp_windows::closed(&flow) => {
            known.forget(flow);
            return opened(ctx, packet, port, flow, nic_ifindex);
        }
        Known::Established(_) => None,
        Known::Opening(opening) => Some(opening),
    };
    // SAFETY: a map value pointer, valid for this invocation; plain loads.
    let (answered, completing_ack) =
        opening.map_or((1, 0), |o| unsafe { ((*o).answered, (*o).completing_ack) });
    if opening.is_some() && answered == 0 {
        // Before the container's SYN-ACK, conntrack (SYN_SENT) takes the client's SYNs and
        // RST; anything else is INVALID, its SYN-ACK included.
        if packet.accepts {
            return Admission::Pass;
        }
        if !packet.opens && !packet.resets {
            return Admission::Refuse;
        }
    }
    let l4 = (packet.l4, packet.l4_len);
    let way = Way::from_client(opening.is_some());
    let closes = match tcp_windows::check(ctx, l4.0, l4.1, &flow, way) {
        // No copy (a connection of an older dxdp, or pushed out of the table): conntrack
        // takes it over from here, picking it up mid-stream, as the host's own.
        None => {
            known.forget(flow);
            return Admission::Pass;
        }
        Some(checked) if checked.verdict == Verdict::Invalid => return Admission::Refuse,
        Some(checked) => checked.closes,
    };
    known.touch();
    // A client's RST that closes the connection (conntrack: to CLOSE, the entry gone seconds
    // later): it reaches the container, and what the client sends after it is judged afresh,
    // on Docker's path unless it opens a connection again. Kept, an opening would let a
    // SYN-ACK of the client's in long after (seed 7373, cases 410 and 510). An RST beside what
    // the container acknowledged keeps the connection, as conntrack does, for the challenge
    // ACK the container answers with. The ICMP errors about the RST (a container's "parameter
    // problem" about one in a first fragment) are still translated while conntrack's entry
    // would live (`Known::reset`).
    if closes {
        known.reset(flow);
        return Admission::Carry;
    }
    // Only a client that received the SYN-ACK knows the number it must acknowledge: a sender
    // of forged SYNs cannot establish their connections, however many it sends.
    if opening.is_some() && packet.acknowledges && packet.ack_seq == completing_ack {
        establish(flow, known.port());
    }
    Admission::Carry
}

/// A packet of no connection the tables know: the first of a new one takes the fast path, and
/// is remembered. A TCP connection that began before the port was exposed stays on Docker's
/// path (conntrack tracks its windows, and would find them stale once the fast path went).
/// So does a client the host does not route back through this NIC, and one from a source the
/// stack refuses, which a route may still lead back to.
#[inline(always)]
fn opened(
    ctx: &TcContext,
    packet: &Packet,
    port: PortKey,
    flow: FlowKey,
    nic_ifindex: u32,
) -> Admission {
    let taken = packet.opens
        && !refused_source(&packet.src, packet.v6)
        && routes::scratch().is_some_and(|params| {
            routes_back(
                ctx,
                params,
                packet.v6,
                packet.proto,
                (&packet.dst, packet.dport),
                (&packet.src, packet.sport),
                nic_ifindex,
            )
        })
        && (packet.proto != PROTO_TCP || tcp_windows::open(ctx, packet.l4, packet.l4_len, &flow))
        && remember(flow, port);
    if taken {
        Admission::Carry
    } else {
        Admission::Pass
    }
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
    // The window copy first: an established connection without one would go to Docker's path.
    if tcp_windows::establish(&flow) && FLOWS.insert(flow, established, 0).is_ok() {
        let _ = OPENING.remove(flow);
    }
}

/// TCX ingress on an exposed container's host veth: replies of the connections `ingress` let in
/// leave through the NIC they came from, as from the published address and port; `None` for a
/// packet this does not parse.
#[inline(always)]
pub fn reply(ctx: &TcContext) -> Option<i32> {
    // SAFETY: as in `ingress`.
    let veth_ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let packet = parse::<false>(ctx)?;
    // The reply's source is the container, its destination the client.
    let flow = FlowKey::new(
        veth_ifindex,
        packet.proto,
        (packet.src, packet.sport),
        (packet.dst, packet.dport),
    );
    let Some(known) = known_flow(flow) else {
        return Some(TC_ACT_UNSPEC);
    };
    let port = known.port();
    // A packet the host would not forward (TTL or hop limit 1; flags conntrack refuses; too
    // big for the NIC) is the stack's to answer or drop, as on Docker's path.
    if !packet.forwardable()
        || !fits_mtu(ctx, port.nic_ifindex)
        || !routes::fit(
            ctx,
            &packet.dst,
            packet.v6,
            Some((packet.proto, packet.l4)),
            port.nic_ifindex,
        )
    {
        return Some(TC_ACT_UNSPEC);
    }
    let target = PORTS.get_ptr_mut(port);
    // A SYN-ACK answers a connection's first packet: if the port no longer leads here, that
    // packet came over Docker's path (a client reusing its address and port after an
    // unexpose), and so must this answer, for conntrack to see the connection it tracks.
    // SAFETY (the read): this CPU's copy of a map value, valid for this invocation.
    let draining = target.is_none_or(|t| unsafe { (*t).veth_ifindex } != veth_ifindex);
    if packet.accepts && draining {
        known.forget(flow);
        return Some(TC_ACT_UNSPEC);
    }
    if packet.proto == PROTO_TCP && draining {
        // Unexposed: the client's segments take Docker's path now (conntrack picks them up
        // mid-stream), and the copy, which no longer sees them, would fall behind.
        tcp_windows::forget(&flow);
    } else if packet.proto == PROTO_TCP {
        let way = Way::from_container(matches!(known, Known::Opening(_)));
        let (l4, l4_len) = (packet.l4, packet.l4_len);
        // No copy: a connection of an older dxdp, or one that drains after an unexpose,
        // whose replies go on as they did.
        match tcp_windows::check(ctx, l4, l4_len, &flow, way) {
            Some(checked) if checked.verdict == Verdict::Invalid => {
                if let Some(target) = target {
                    // SAFETY: this CPU's copy of the value; nothing else writes it now. Not
                    // draining (above), so the port leads here.
                    unsafe { (*target).refuse() };
                }
                return Some(TC_ACT_SHOT);
            }
            Some(checked) if checked.closes => known.reset(flow),
            _ => {}
        }
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
    let translated = translate(ctx, packet, true, &port.addr, port.port);
    Some(out_of_nic(ctx, &port, target, veth_ifindex, translated))
}

/// Rewrites the packet's source (`source`) or destination address and port to `addr`:`port`,
/// with every checksum that covers them.
#[inline(always)]
fn translate(
    ctx: &TcContext,
    packet: &Packet,
    source: bool,
    addr: &[u8; 16],
    port: u16,
) -> Result<(), i64> {
    let (old_addr, old_port) = if source {
        (&packet.src, packet.sport)
    } else {
        (&packet.dst, packet.dport)
    };
    let sums = packet.sums();
    rewrite::address(ctx, sums, packet.addr_offset(source), old_addr, addr)?;
    rewrite::port(
        ctx,
        sums,
        packet.l4_csum,
        packet.port_offset(source),
        old_port,
        port,
    )
}
