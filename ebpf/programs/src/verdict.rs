//! The one decision both datapaths share.
use dxdp_common::{Counters, LinkKey, MacAddr};

use crate::{
    Frame,
    maps::{COUNTERS, ENDPOINTS, LINKS, TARGETS},
};

const ETH_HLEN: usize = 14;

pub enum Verdict {
    Pass,
    Redirect { target: u32 },
}

/// Redirects only a frame that (1) arrives on a managed veth, (2) carries that container's own
/// source MAC, (3) is unicast to a MAC linked from this very veth, and (4) whose target veth
/// still exists. Everything else passes to the bridge untouched.
#[inline(always)]
pub fn decide(ingress_ifindex: u32, frame: &Frame, len: u64) -> Verdict {
    // SAFETY: map lookups return pointers into map memory that stay valid for this invocation.
    let Some(endpoint) = (unsafe { ENDPOINTS.get(&ingress_ifindex) }) else {
        return Verdict::Pass;
    };
    let counters = COUNTERS.get_ptr_mut(&ingress_ifindex);
    let verdict = match ethernet_addrs(frame) {
        None => Outcome::Passed,
        Some((dst, src)) => {
            if src != endpoint.mac {
                Outcome::Spoofed
            } else if dst[0] & 1 != 0 {
                // Broadcast and multicast belong to the bridge.
                Outcome::Passed
            } else {
                match LINKS.get_ptr_mut(&LinkKey::new(ingress_ifindex, dst)) {
                    None => Outcome::Passed,
                    Some(link) => {
                        // SAFETY: this CPU's copy of the value; nothing else writes it now.
                        let link = unsafe { &mut *link };
                        if TARGETS.get_ifindex(link.target_ifindex).is_none() {
                            Outcome::Fallback
                        } else {
                            link.packets += 1;
                            link.bytes += len;
                            Outcome::Redirected(link.target_ifindex)
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
        Outcome::Redirected(target) => Verdict::Redirect { target },
        _ => Verdict::Pass,
    }
}

enum Outcome {
    Redirected(u32),
    Passed,
    Fallback,
    Spoofed,
}

#[inline(always)]
fn count(counters: &mut Counters, outcome: &Outcome, len: u64) {
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
