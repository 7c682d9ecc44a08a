//! The one decision both datapaths share.
use dxdp_common::{Counters, LinkKey, MacAddr};

use crate::{
    Frame,
    maps::{COUNTERS, ENDPOINTS, LINKS, TARGETS},
};

const ETH_HLEN: usize = 14;

/// Redirects only a frame that (1) arrives on a managed veth, (2) carries that container's own
/// source MAC, (3) is unicast to a MAC linked from this very veth, and (4) whose target veth
/// still exists. Everything else passes to the bridge untouched: the result is `pass`.
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
                        if TARGETS.get_ifindex(link.target_ifindex).is_none() {
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
