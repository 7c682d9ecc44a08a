//! The one decision both datapaths share.
use dxdp_common::{
    CLOSED_IPV4, CLOSED_IPV6, Counters, LinkKey, MacAddr, TunnelPeerKey, is_remote_endpoint,
};

use crate::{
    Frame,
    headers::{
        ETH_HLEN, ETH_P_ARP, ETH_P_IP, ETH_P_IPV6, IPV4_HLEN, IPV6_HLEN, PROTO_ICMPV6, PROTO_SCTP,
        PROTO_TCP, PROTO_UDP, ipv4_fragment, ipv4_header_valid, ipv6_length_valid, v4_mapped,
    },
    maps::{COUNTERS, ENDPOINTS, LINKS, SOURCES, TARGETS, TUNNEL_PEERS},
};

/// How a link's frame leaves for its target.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// Into the target veth's peer, the container's own interface (`bpf_redirect_peer`).
    Peer,
    /// Out of an overlay's VXLAN device (`bpf_redirect` to its egress), toward a task of
    /// another node: the device's own forwarding table picks the node, as when the overlay's
    /// bridge hands it the frame.
    Tunnel,
}

/// An ARP message for IPv4 over Ethernet.
const ARP_LEN: usize = 28;
/// ICMPv6 router solicitation .. redirect: neighbour discovery. Router messages and redirects
/// are the bridge's; solicitations and advertisements are carried when their claims are the
/// sender's own.
const NDP_FIRST: u8 = 133;
const NDP_LAST: u8 = 137;
const NDP_NEIGHBOR_SOLICIT: u8 = 135;
const NDP_NEIGHBOR_ADVERT: u8 = 136;
/// ICMPv6 header and target of a solicitation or advertisement, and one link-layer option.
const NDP_LEN: usize = 24;
const NDP_OPT_LEN: usize = 8;

/// Redirects only a frame that (1) arrives on a managed veth, (2) carries that container's own
/// source MAC, (3) is unicast to a MAC linked from this very veth, (4) is IPv4, ARP or IPv6
/// (not behind an IPv6 extension header, no router message) of a family the link carries (a
/// family the firewall may drop on the bridge goes there) and whose every claim about its sender
/// is the container's own (source address; ARP's sender addresses; a neighbour message's
/// link-layer option and an advertisement's target), (5) is addressed to one of the target
/// container's own addresses (IP destination; ARP's target protocol address), (6) is a packet
/// the bridge would carry (see below), and (7) whose target veth still exists.
///
/// (5) keeps a link from carrying a frame to a container that took over the linked one's MAC
/// before the watch noticed (issue 22, 1b): such a frame is addressed to the newcomer's IP,
/// which is not the target's, so the bridge delivers it where the MAC now lives. Traffic that
/// a linked container routes for others takes the bridge for the same reason.
///
/// (6) holds the link to what Docker's path delivers: with `br_netfilter` (which Docker loads),
/// the bridge drops an IP packet `br_validate_ipv4` / `br_validate_ipv6` refuse (IPv4: a bad
/// header checksum; either: a length beyond the frame), conntrack holds a lone IPv4 fragment
/// for reassembly, and a frame bigger than the target's MTU is not forwarded (IPv6: the host
/// answers "packet too big"). Such a frame takes the bridge, which does just that; IPv4 options
/// (which `ip_options_compile` judges) take it too. `fits` tells whether the frame (each
/// segment of a GSO packet) fits the MTU of the target veth `fits` is given.
/// Everything else passes to the bridge untouched, where the operator's rules see it as they
/// would without dxdp: the result is `pass`.
///
/// `redirect` performs the program's own redirect to the device a target's frames leave by
/// (its veth, or for a task of another node its VXLAN device, as `Hop` says) and returns its
/// action, or `None` when the target vanished after the liveness check or the program cannot
/// take that hop; only a redirect that took effect is counted as one.
///
/// `ingress_ifindex` is the endpoint the frame came from: a host veth's ifindex, or for a frame
/// that arrived through an overlay's VXLAN device, the id of the task of another node it came
/// from ([`tunnel_peer`]), held to the same checks.
#[inline(always)]
pub fn decide<A: Copy>(
    ingress_ifindex: u32,
    frame: &Frame,
    len: u64,
    pass: A,
    fits: impl FnOnce(u32) -> bool,
    redirect: impl FnOnce(u32, Hop) -> Option<A>,
) -> A {
    // SAFETY: map lookups return pointers into map memory that stay valid for this invocation.
    let Some(endpoint) = (unsafe { ENDPOINTS.get(ingress_ifindex) }) else {
        return pass;
    };
    let counters = COUNTERS.get_ptr_mut(ingress_ifindex);
    let verdict = match ethernet_addrs(frame) {
        None => Outcome::Passed,
        Some((dst, src)) => {
            if src != endpoint.mac {
                Outcome::Spoofed
            } else if dst[0] & 1 != 0 {
                // Broadcast and multicast belong to the bridge.
                Outcome::Passed
            } else {
                match LINKS.get_ptr_mut(LinkKey::new(ingress_ifindex, dst)) {
                    None => Outcome::Passed,
                    Some(link) => {
                        // SAFETY: this CPU's copy of the value; nothing else writes it now.
                        let link = unsafe { &mut *link };
                        match claim(frame, len) {
                            // IPv6 extension headers, router messages, other ethertypes.
                            None => Outcome::Passed,
                            // A family the rules may drop there: the bridge's, whoever sent it.
                            Some(claim) if link.closed & claim.family != 0 => Outcome::Passed,
                            Some(claim) if !honest(ingress_ifindex, &endpoint.mac, &claim) => {
                                Outcome::Spoofed
                            }
                            Some(claim) if !addressed_to(link.target_ifindex, &claim) => {
                                Outcome::Passed
                            }
                            // What the bridge drops or holds: its to drop or hold.
                            Some(claim) if !claim.bridged => Outcome::Passed,
                            Some(_) => {
                                // A host veth's entry is itself; a remote task's, its tunnel.
                                let hop = if is_remote_endpoint(link.target_ifindex) {
                                    Hop::Tunnel
                                } else {
                                    Hop::Peer
                                };
                                match TARGETS.get_ifindex(link.target_ifindex) {
                                    None => Outcome::Fallback,
                                    // Too big for the device: the bridge refuses it as well.
                                    Some(device) if !fits(device) => Outcome::Passed,
                                    Some(device) => match redirect(device, hop) {
                                        Some(action) => {
                                            link.packets += 1;
                                            link.bytes += len;
                                            Outcome::Redirected(action)
                                        }
                                        None => Outcome::Fallback,
                                    },
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    if let Some(counters) = counters {
        // SAFETY: per-CPU value of this CPU; nothing else writes it concurrently.
        count(unsafe { &mut *counters }, &verdict, len);
    }
    match verdict {
        Outcome::Redirected(action) => action,
        _ => pass,
    }
}

/// The endpoint id of the task of another node a frame arriving on the VXLAN device
/// `tunnel_ifindex` comes from, if that task is linked: found by the frame's source MAC.
#[inline(always)]
pub fn tunnel_peer(tunnel_ifindex: u32, frame: &Frame) -> Option<u32> {
    let (_, src) = ethernet_addrs(frame)?;
    // SAFETY: a map value pointer, valid for this invocation.
    unsafe { TUNNEL_PEERS.get(TunnelPeerKey::new(tunnel_ifindex, src)) }.copied()
}

enum Outcome<A> {
    Redirected(A),
    Passed,
    Fallback,
    Spoofed,
}

#[inline(always)]
fn count<A>(counters: &mut Counters, outcome: &Outcome<A>, len: u64) {
    match outcome {
        Outcome::Redirected(_) => {
            counters.redirected_packets += 1;
            counters.redirected_bytes += len;
            return;
        }
        Outcome::Fallback => counters.fallback_packets += 1,
        Outcome::Spoofed => counters.spoofed_packets += 1,
        Outcome::Passed => {}
    }
    counters.passed_packets += 1;
    counters.passed_bytes += len;
}

/// Destination and source MAC of the frame, or `None` for a runt.
#[inline(always)]
fn ethernet_addrs(frame: &Frame) -> Option<(MacAddr, MacAddr)> {
    if frame.start + ETH_HLEN > frame.end {
        return None;
    }
    let header = frame.start as *const [u8; ETH_HLEN];
    // SAFETY: bounds checked against data_end just above, which the verifier tracks.
    let header = unsafe { &*header };
    let mut dst = [0u8; 6];
    let mut src = [0u8; 6];
    dst.copy_from_slice(&header[0..6]);
    src.copy_from_slice(&header[6..12]);
    Some((dst, src))
}

/// What a frame a link may carry says about its sender, all of which must be the sending
/// container's own for the frame to skip the bridge.
struct Claim {
    /// The family's bit in `LinkTarget::closed`: ARP counts as IPv4 (it resolves IPv4
    /// addresses; the ip6tables rules that close IPv6 never see it).
    family: u8,
    /// IPv4 (v4-mapped) or IPv6 source address; for ARP, the sender protocol address.
    source: [u8; 16],
    /// A neighbour advertisement's target: the address it claims the sender has.
    target: Option<[u8; 16]>,
    /// ARP's sender hardware address, or a neighbour message's link-layer address option.
    lladdr: Option<MacAddr>,
    /// IPv4 (v4-mapped) or IPv6 destination address; for ARP, the target protocol address.
    destination: [u8; 16],
    /// Whether the bridge would carry the packet on (its MTU aside): IPv4 without options with
    /// a valid checksum and total length, not a fragment; IPv6 with a payload length within
    /// the frame; any ARP message the link carries.
    bridged: bool,
}

/// Whether the container behind this veth owns everything `claim` says (see
/// `dxdp_common::Sources`); with no addresses recorded, nothing is known to be its own.
#[inline(always)]
fn honest(ingress_ifindex: u32, mac: &MacAddr, claim: &Claim) -> bool {
    if let Some(lladdr) = claim.lladdr
        && lladdr != *mac
    {
        return false;
    }
    // SAFETY: a map value pointer, valid for this invocation.
    let Some(sources) = (unsafe { SOURCES.get(ingress_ifindex) }) else {
        return false;
    };
    if let Some(target) = &claim.target
        && !sources.contains(target)
    {
        return false;
    }
    sources.contains(&claim.source)
}

/// Whether the frame is addressed to the container behind the target veth: the addresses
/// recorded for it are the same ones its own frames are held to.
#[inline(always)]
fn addressed_to(target_ifindex: u32, claim: &Claim) -> bool {
    // SAFETY: a map value pointer, valid for this invocation.
    match unsafe { SOURCES.get(target_ifindex) } {
        Some(own) => own.contains(&claim.destination),
        None => false,
    }
}

/// The claims of an IPv4 packet, an ARP message for IPv4, or an IPv6 packet carrying TCP, UDP,
/// SCTP or ICMPv6 right after its fixed header (neighbour solicitations and advertisements
/// only with at most their one link-layer address option); `None` for anything else, which the
/// bridge carries.
///
/// `len` is the whole frame's length (every buffer of it, not only what the program reads
/// directly), which the IP header's lengths must fit.
#[inline(always)]
fn claim(frame: &Frame, len: u64) -> Option<Claim> {
    if frame.start + ETH_HLEN > frame.end {
        return None;
    }
    // SAFETY: the Ethernet header was bounds-checked just above.
    let eth = unsafe { &*(frame.start as *const [u8; ETH_HLEN]) };
    let ethertype = u16::from_be_bytes([eth[12], eth[13]]);
    let l3 = frame.start + ETH_HLEN;
    // What the frame holds after its Ethernet header.
    let l3_len = len.saturating_sub(ETH_HLEN as u64) as usize;
    match ethertype {
        ETH_P_IP => {
            if l3 + IPV4_HLEN > frame.end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; IPV4_HLEN]) };
            if ip[0] >> 4 != 4 {
                return None;
            }
            Some(Claim {
                family: CLOSED_IPV4,
                source: v4_mapped(&ip[12..16]),
                target: None,
                lladdr: None,
                destination: v4_mapped(&ip[16..20]),
                bridged: ipv4_header_valid(ip, l3_len) && !ipv4_fragment(ip),
            })
        }
        ETH_P_ARP => {
            if l3 + ARP_LEN > frame.end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let arp = unsafe { &*(l3 as *const [u8; ARP_LEN]) };
            // Ethernet hardware, IPv4 protocol, 6- and 4-byte addresses.
            if arp[0..6] != [0, 1, 8, 0, 6, 4] {
                return None;
            }
            let mut sha = [0u8; 6];
            sha.copy_from_slice(&arp[8..14]);
            Some(Claim {
                family: CLOSED_IPV4,
                source: v4_mapped(&arp[14..18]),
                target: None,
                lladdr: Some(sha),
                destination: v4_mapped(&arp[24..28]),
                bridged: true,
            })
        }
        ETH_P_IPV6 => {
            // One byte past the fixed header: an ICMPv6 type.
            if l3 + IPV6_HLEN + 1 > frame.end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; IPV6_HLEN + 1]) };
            if ip[0] >> 4 != 6 {
                return None;
            }
            let mut source = [0u8; 16];
            source.copy_from_slice(&ip[8..24]);
            let mut destination = [0u8; 16];
            destination.copy_from_slice(&ip[24..40]);
            let bridged = ipv6_length_valid(u16::from_be_bytes([ip[4], ip[5]]), l3_len);
            match ip[6] {
                PROTO_TCP | PROTO_UDP | PROTO_SCTP => Some(Claim {
                    family: CLOSED_IPV6,
                    source,
                    target: None,
                    lladdr: None,
                    destination,
                    bridged,
                }),
                PROTO_ICMPV6 => match ip[IPV6_HLEN] {
                    NDP_NEIGHBOR_SOLICIT | NDP_NEIGHBOR_ADVERT => {
                        neighbour_claim(frame, l3, source, destination, ip[IPV6_HLEN], bridged)
                    }
                    NDP_FIRST..=NDP_LAST => None,
                    _ => Some(Claim {
                        family: CLOSED_IPV6,
                        source,
                        target: None,
                        lladdr: None,
                        destination,
                        bridged,
                    }),
                },
                _ => None,
            }
        }
        _ => None,
    }
}

/// A neighbour solicitation or advertisement: 24 bytes of ICMPv6 (type, code, checksum, flags,
/// target), then nothing or one link-layer address option (type, length 1, MAC). An
/// advertisement claims its target as the sender's; either claims its option's MAC.
#[inline(always)]
fn neighbour_claim(
    frame: &Frame,
    l3: usize,
    source: [u8; 16],
    destination: [u8; 16],
    kind: u8,
    bridged: bool,
) -> Option<Claim> {
    if l3 + IPV6_HLEN + NDP_LEN > frame.end {
        return None;
    }
    // SAFETY: bounds-checked above.
    let ip = unsafe { &*(l3 as *const [u8; IPV6_HLEN + NDP_LEN]) };
    let payload = u16::from_be_bytes([ip[4], ip[5]]) as usize;
    let icmp = IPV6_HLEN;
    let mut target = [0u8; 16];
    target.copy_from_slice(&ip[icmp + 8..icmp + 24]);
    let lladdr = if payload == NDP_LEN {
        None
    } else if payload == NDP_LEN + NDP_OPT_LEN {
        if l3 + IPV6_HLEN + NDP_LEN + NDP_OPT_LEN > frame.end {
            return None;
        }
        // SAFETY: bounds-checked just above.
        let opt = unsafe { &*((l3 + IPV6_HLEN + NDP_LEN) as *const [u8; NDP_OPT_LEN]) };
        let wanted = if kind == NDP_NEIGHBOR_SOLICIT { 1 } else { 2 };
        if opt[0] != wanted || opt[1] != 1 {
            return None;
        }
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&opt[2..8]);
        Some(mac)
    } else {
        return None;
    };
    Some(Claim {
        family: CLOSED_IPV6,
        source,
        target: (kind == NDP_NEIGHBOR_ADVERT).then_some(target),
        lladdr,
        destination,
        bridged,
    })
}
