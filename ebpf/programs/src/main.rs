//! dxdp's datapath: frames from a linked container skip the bridge and go straight to the
//! container they are addressed to. Both programs share [`verdict::decide`]; they differ only in
//! how they read the frame and how they redirect it.
#![no_std]
#![no_main]

mod maps;
mod verdict;

use aya_ebpf::{
    bindings::{TC_ACT_UNSPEC, xdp_action},
    helpers::generated::bpf_redirect_peer,
    macros::{classifier, xdp},
    programs::{TcContext, XdpContext},
};

use verdict::{Verdict, decide};

/// TCX ingress on a host-side veth. `bpf_redirect_peer` hands the skb, GSO and checksum state
/// intact, to the target veth's peer inside the target container's namespace, skipping the
/// bridge and the backlog queue.
#[classifier]
pub fn dxdp_tc(ctx: TcContext) -> i32 {
    // SAFETY: the verifier guarantees ctx.skb.skb points at a valid __sk_buff for this call.
    let ingress_ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let frame = Frame {
        start: ctx.data(),
        end: ctx.data_end(),
    };
    match decide(ingress_ifindex, &frame, ctx.len().into()) {
        // SAFETY: a plain helper call; it only records the target in per-CPU redirect info.
        Verdict::Redirect { target } => unsafe { bpf_redirect_peer(target, 0) as i32 },
        // TCX_NEXT: let the programs attached after us and then the stack see the frame.
        Verdict::Pass => TC_ACT_UNSPEC,
    }
}

/// Native XDP on a host-side veth, redirecting through the DEVMAP_HASH of live targets.
#[xdp]
pub fn dxdp_xdp(ctx: XdpContext) -> u32 {
    let ingress_ifindex = ctx.ingress_ifindex() as u32;
    let frame = Frame {
        start: ctx.data(),
        end: ctx.data_end(),
    };
    let len = (frame.end - frame.start) as u64;
    match decide(ingress_ifindex, &frame, len) {
        // The low bits of the flags are the action on a lookup miss: a target that vanished
        // since `decide` looked falls back to the bridge.
        Verdict::Redirect { target } => maps::TARGETS
            .redirect(target, xdp_action::XDP_PASS.into())
            .unwrap_or(xdp_action::XDP_PASS),
        Verdict::Pass => xdp_action::XDP_PASS,
    }
}

/// The packet bytes between `start` and `end`, as the verifier knows them.
pub struct Frame {
    start: usize,
    end: usize,
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
