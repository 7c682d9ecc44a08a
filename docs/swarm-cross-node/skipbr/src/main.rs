//! Prototype for issue 35 "cross-node: skip br0": not dxdp code, a measurement aid.
//! to_vxlan: tc ingress on a task's sandbox veth; frames for the remote task's MAC go straight
//!   to vxlan0's egress (bpf_redirect, so vxlan_xmit and its FDB still pick the VTEP).
//! from_vxlan: tc ingress on vxlan0; frames for the local task's MAC go straight into the task
//!   (bpf_redirect_peer to the sandbox veth's peer, the task's eth0).
//! Addresses and ifindexes are compile-time constants (consts.rs, written by crossnode/build-bpf.sh).
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::TC_ACT_OK,
    helpers::generated::{bpf_redirect, bpf_redirect_peer},
    macros::classifier,
    programs::TcContext,
};

include!(concat!(env!("CARGO_MANIFEST_DIR"), "/consts.rs"));

#[inline(always)]
fn dst_is(ctx: &TcContext, mac: &[u8; 6]) -> bool {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + 14 > end {
        return false;
    }
    let p = start as *const u8;
    // SAFETY: bounds checked above against data_end.
    unsafe {
        *p == mac[0]
            && *p.add(1) == mac[1]
            && *p.add(2) == mac[2]
            && *p.add(3) == mac[3]
            && *p.add(4) == mac[4]
            && *p.add(5) == mac[5]
    }
}

#[classifier]
pub fn to_vxlan(ctx: TcContext) -> i32 {
    if dst_is(&ctx, &REMOTE_MAC) {
        // SAFETY: plain helper call.
        return unsafe { bpf_redirect(VXLAN_IFINDEX, 0) } as i32;
    }
    TC_ACT_OK
}

#[classifier]
pub fn from_vxlan(ctx: TcContext) -> i32 {
    if dst_is(&ctx, &LOCAL_MAC) {
        // SAFETY: plain helper call.
        return unsafe { bpf_redirect_peer(VETH_IFINDEX, 0) } as i32;
    }
    TC_ACT_OK
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}
