//! The one decision both datapaths share.
use dxdp_common::{Counters, LinkKey, MacAddr};

use crate::{
    Frame,
    maps::{COUNTERS, ENDPOINTS, LINKS, SOURCES, TARGETS},
};

const ETH_HLEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const IPV4_HLEN: usize = 20;
const IPV6_HLEN: usize = 40;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_ICMPV6: u8 = 58;
const IPPROTO_SCTP: u8 = 132;
/// ICMPv6 router solicitation .. redirect: neighbour discovery, which the bridge carries.
const NDP_FIRST: u8 = 133;
const NDP_LAST: u8 = 137;

/// Redirects only a frame that (1) arrives on a managed veth, (2) carries that container's own
/// source MAC, (3) is unicast to a MAC linked from this very veth, (4) is IPv4 or IPv6 (not
/// neighbour discovery, not behind an IPv6 extension header) from one of the container's own
/// addresses, and (5) whose target veth still exists. Everything else passes to the bridge
/// untouched, where the operator's rules see it as they would without dxdp: the result is `pass`.
///
/// `redirect` performs the program's own redirect to the target ifindex and returns its
/// action, or `None` when the target vanished after the liveness check; only a redirect that
/// took effect is counted as one.
#[inline(always)]
pub fn decide<A: Copy>(
    ingress_ifindex: u32,
    frame: &Frame,
    len: u64,
    pass: A,
    redirect: impl FnOnce(u32) -> Option<A>,
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
                        let source = l3_source(frame);
                        if source == L3Source::Other {
                            // ARP, neighbour discovery, IPv6 extension headers, other ethertypes.
                            Outcome::Passed
                        } else if !owns(ingress_ifindex, &source) {
                            Outcome::Spoofed
                        } else if TARGETS.get_ifindex(link.target_ifindex).is_none() {
                            Outcome::Fallback
                        } else if let Some(action) = redirect(link.target_ifindex) {
                            link.packets += 1;
                            link.bytes += len;
                            Outcome::Redirected(action)
                        } else {
                            Outcome::Fallback
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

/// The network-layer source of a frame a link may carry.
#[derive(PartialEq, Eq)]
enum L3Source {
    /// IPv4 (v4-mapped) or IPv6 source address.
    Ip([u8; 16]),
    /// Anything a link leaves to the bridge whoever sent it.
    Other,
}

/// Whether the container behind this veth owns `source` (see `dxdp_common::Sources`).
#[inline(always)]
fn owns(ingress_ifindex: u32, source: &L3Source) -> bool {
    let L3Source::Ip(addr) = source else {
        return false;
    };
    // SAFETY: a map value pointer, valid for this invocation.
    match unsafe { SOURCES.get(ingress_ifindex) } {
        Some(sources) => sources.contains(addr),
        // No addresses recorded (a directory being migrated): nothing is known to be its own.
        None => false,
    }
}

/// The source address of an IPv4 packet, or of an IPv6 packet carrying TCP, UDP, SCTP or
/// ICMPv6 other than neighbour discovery right after its fixed header.
#[inline(always)]
fn l3_source(frame: &Frame) -> L3Source {
    if frame.start + ETH_HLEN > frame.end {
        return L3Source::Other;
    }
    // SAFETY: the Ethernet header was bounds-checked just above.
    let eth = unsafe { &*(frame.start as *const [u8; ETH_HLEN]) };
    let ethertype = u16::from_be_bytes([eth[12], eth[13]]);
    let l3 = frame.start + ETH_HLEN;
    match ethertype {
        ETH_P_IP => {
            if l3 + IPV4_HLEN > frame.end {
                return L3Source::Other;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; IPV4_HLEN]) };
            if ip[0] >> 4 != 4 {
                return L3Source::Other;
            }
            let mut addr = [0u8; 16];
            addr[10] = 0xff;
            addr[11] = 0xff;
            addr[12..16].copy_from_slice(&ip[12..16]);
            L3Source::Ip(addr)
        }
        ETH_P_IPV6 => {
            // One byte past the fixed header: an ICMPv6 type.
            if l3 + IPV6_HLEN + 1 > frame.end {
                return L3Source::Other;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; IPV6_HLEN + 1]) };
            if ip[0] >> 4 != 6 {
                return L3Source::Other;
            }
            let carried = match ip[6] {
                IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP => true,
                IPPROTO_ICMPV6 => !(NDP_FIRST..=NDP_LAST).contains(&ip[IPV6_HLEN]),
                _ => false,
            };
            if !carried {
                return L3Source::Other;
            }
            let mut addr = [0u8; 16];
            addr.copy_from_slice(&ip[8..24]);
            L3Source::Ip(addr)
        }
        _ => L3Source::Other,
    }
}
