//! The packet generator and the receiver of `dxdp bench --pps`: not part of the datapath.
//!
//! An object of its own (`dxdp-bench`), so that the datapath object carries only what links run.
//! `dxdp_bench_tx` is never attached: the bench runs it with `BPF_PROG_TEST_RUN` and
//! `BPF_F_TEST_XDP_LIVE_FRAMES` on the sender's interface, where each `XDP_TX` sends the frame
//! the bench gave it out of that interface (to its host-side veth peer), at a rate the socket
//! stack cannot reach. `dxdp_bench_drop` is attached to the receiver's interface for as long as
//! one measurement lasts, and drops every frame at the driver: the kernel's per-queue
//! `xdp_drops` counters are the ceiling for any XDP consumer there.
//! `dxdp_bench_xsk` is the AF_XDP receiver's hook: attached to the receiver's interface in place
//! of `dxdp_bench_drop`, it hands every frame to the bench's AF_XDP socket, which the bench
//! puts in `DXDP_BENCH_XSKS` at the queue it is bound to.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

use aya_ebpf::{
    bindings::xdp_action,
    macros::{map, xdp},
    maps::XskMap,
    programs::XdpContext,
};

/// The bench's AF_XDP sockets by receive queue. Docker's veths have one queue, so the bench
/// fills index 0 only; the room for more costs nothing.
#[map]
static DXDP_BENCH_XSKS: XskMap = XskMap::with_max_entries(64, 0);

/// Sends the frame back out of the interface it was run on.
#[xdp]
pub fn dxdp_bench_tx(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_TX
}

/// Receives a frame by dropping it at the driver.
#[xdp]
pub fn dxdp_bench_drop(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_DROP
}

/// Hands the frame to the AF_XDP socket bound to the queue it arrived on. A queue without a
/// socket drops the frame (the lookup's fallback verdict, in the low bits of the flags): it then
/// shows in the interface's `xdp_drops`, which the bench reads as "no socket", instead of
/// reaching B's stack, where it would be mixed with other traffic and answered with ICMP.
#[xdp]
pub fn dxdp_bench_xsk(ctx: XdpContext) -> u32 {
    DXDP_BENCH_XSKS
        .redirect(ctx.rx_queue_index(), u64::from(xdp_action::XDP_DROP))
        .unwrap_or(xdp_action::XDP_DROP)
}

dxdp_ebpf::object_boilerplate!();
