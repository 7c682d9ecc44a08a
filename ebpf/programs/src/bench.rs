//! The packet generator and the receiver of `dxdp bench --pps`: not part of the datapath.
//!
//! An object of its own (`dxdp-bench`), so that the datapath object carries only what links run.
//! `dxdp_bench_tx` is never attached: the bench runs it with `BPF_PROG_TEST_RUN` and
//! `BPF_F_TEST_XDP_LIVE_FRAMES` on the sender's interface, where each `XDP_TX` sends the frame
//! the bench gave it out of that interface (to its host-side veth peer), at a rate the socket
//! stack cannot reach. `dxdp_bench_drop` is attached to the receiver's interface for as long as
//! one measurement lasts, and drops every frame at the driver: the kernel's per-queue
//! `xdp_drops` counters are what an AF_XDP consumer there would have received.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};

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

dxdp_ebpf::object_boilerplate!();
