//! dxdp's datapath: frames from a linked container skip the bridge and go straight to the
//! container they are addressed to. Both programs share [`verdict::decide`]; they differ only in
//! how they read the frame and how they redirect it.
//!
//! Built for the host too (a std binary with an empty `main`), so that clippy and rustc lint it
//! with the rest of the workspace: only the BPF target is `no_std`/`no_main` with a panic handler.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// `window_merge`'s compare-and-exchange, which the target's atomics lack.
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

mod checksum;
mod fib;
mod flows;
mod fragments;
mod headers;
mod icmp_errors;
mod ingress;
mod maps;
mod rewrite;
mod routes;
mod scratch;
mod tcp_windows;
mod verdict;
mod window_merge;

use aya_ebpf::{
    bindings::{TC_ACT_UNSPEC, xdp_action},
    helpers::generated::{bpf_redirect, bpf_redirect_peer, bpf_xdp_get_buff_len},
    macros::{classifier, xdp},
    programs::{TcContext, XdpContext},
};

use dxdp_common::ingress::{ICMP_IN, ICMP_OUT};
use verdict::{Hop, decide};

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
    // TCX_NEXT on pass: the programs attached after us, then the stack, see the frame.
    decide(
        ingress_ifindex,
        &frame,
        ctx.len().into(),
        TC_ACT_UNSPEC,
        |device| headers::fits_mtu(&ctx, device),
        |device, hop| {
            // SAFETY: plain helper calls; they only record the target in per-CPU redirect info.
            Some(match hop {
                Hop::Peer => unsafe { bpf_redirect_peer(device, 0) },
                // The VXLAN device's egress: its transmit path encapsulates for the node its
                // forwarding table names, as after the overlay's bridge.
                Hop::Tunnel => unsafe { bpf_redirect(device, 0) },
            } as i32)
        },
    )
}

/// TCX ingress on an overlay's VXLAN device (a Swarm overlay's sandbox): a frame from a task of
/// another node, linked to a task of this node, goes into it by `bpf_redirect_peer`, skipping
/// the overlay's bridge, under the same verdict as a frame from a local veth; the remote task
/// is the endpoint [`verdict::tunnel_peer`] finds by its MAC. Everything else (gossip's own
/// frames, unlinked tasks, broadcast) goes on to the bridge.
#[classifier]
pub fn dxdp_tunnel(ctx: TcContext) -> i32 {
    // SAFETY: the verifier guarantees ctx.skb.skb points at a valid __sk_buff for this call.
    let tunnel_ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let frame = Frame {
        start: ctx.data(),
        end: ctx.data_end(),
    };
    let Some(peer) = verdict::tunnel_peer(tunnel_ifindex, &frame) else {
        return TC_ACT_UNSPEC;
    };
    decide(
        peer,
        &frame,
        ctx.len().into(),
        TC_ACT_UNSPEC,
        |device| headers::fits_mtu(&ctx, device),
        |device, hop| match hop {
            // SAFETY: a plain helper call; it only records the target in per-CPU redirect info.
            Hop::Peer => Some(unsafe { bpf_redirect_peer(device, 0) } as i32),
            // Two tasks of other nodes are never linked here: the bridge's.
            Hop::Tunnel => None,
        },
    )
}

/// TCX ingress on a NIC: packets to exposed published ports go straight into their container
/// (see `ingress`); anything else goes on to [`dxdp_icmp_in`], which takes ICMP errors about
/// their replies.
#[classifier]
pub fn dxdp_ingress(ctx: TcContext) -> i32 {
    if let Some(verdict) = ingress::ingress(&ctx) {
        return verdict;
    }
    hand_icmp_errors(&ctx, ICMP_IN)
}

/// TCX ingress on an exposed container's host veth: replies of the connections `dxdp_ingress`
/// let in leave through their NIC, translated back, whole or in fragments (`fragments`);
/// anything else goes on to [`dxdp_icmp_out`], which takes the container's ICMP errors about
/// them.
#[classifier]
pub fn dxdp_reply(ctx: TcContext) -> i32 {
    if let Some(verdict) = ingress::reply(&ctx).or_else(|| fragments::reply(&ctx)) {
        return verdict;
    }
    hand_icmp_errors(&ctx, ICMP_OUT)
}

/// Tail-called by `dxdp_ingress` with what it did not take: ICMP errors about an exposed port's
/// replies go into their container (`icmp_errors::ingress`).
#[classifier]
pub fn dxdp_icmp_in(ctx: TcContext) -> i32 {
    icmp_errors::ingress(&ctx)
}

/// Tail-called by `dxdp_reply` with what it did not take: a container's ICMP errors about the
/// packets of its fast-path connections leave through the NIC (`icmp_errors::reply`).
#[classifier]
pub fn dxdp_icmp_out(ctx: TcContext) -> i32 {
    icmp_errors::reply(&ctx)
}

/// Hands the packet to the program at `index` of `DXDP_ICMP_ERRORS`, which never returns here
/// when it is there. Where it is not (userspace sets it before attaching), the packet goes on
/// to the stack, which is where an error went before the fast path knew of it.
#[inline(always)]
fn hand_icmp_errors(ctx: &TcContext, index: u32) -> i32 {
    // SAFETY: the callee is a classifier of this object, reading the same context; nothing of
    // this program's is held across the call, which does not return when it succeeds.
    unsafe { maps::ICMP_ERRORS.tail_call(ctx, index) };
    TC_ACT_UNSPEC
}

/// Native XDP on a host-side veth, redirecting through the DEVMAP_HASH of live targets.
///
/// Multi-buffer aware (`xdp.frags`): veth takes a program without it only while the peer's MTU
/// fits one page less headroom (about 3,500 bytes), so jumbo networks could not be linked. The
/// verdict reads only the headers, which are in the first buffer; the frame's length, for the
/// counters, is all of its buffers. Loaded from Linux 6.6 on (the kernels the tc datapath needs
/// too), where veth's multi-buffer XDP is complete.
#[xdp(frags)]
pub fn dxdp_xdp(ctx: XdpContext) -> u32 {
    // SAFETY: a plain helper call on this program's own context.
    let len = unsafe { bpf_xdp_get_buff_len(ctx.ctx) };
    xdp_redirect(&ctx, len)
}

/// [`dxdp_xdp`] for kernels before 6.6: one buffer per frame, so veth refuses it above an MTU of
/// about 3,500 bytes, and `bpf_xdp_get_buff_len` (5.18) is not asked.
#[xdp]
pub fn dxdp_xdp_1buf(ctx: XdpContext) -> u32 {
    let len = (ctx.data_end() - ctx.data()) as u64;
    xdp_redirect(&ctx, len)
}

#[inline(always)]
fn xdp_redirect(ctx: &XdpContext, len: u64) -> u32 {
    let ingress_ifindex = ctx.ingress_ifindex() as u32;
    let frame = Frame {
        start: ctx.data(),
        end: ctx.data_end(),
    };
    decide(
        ingress_ifindex,
        &frame,
        len,
        xdp_action::XDP_PASS,
        |device| headers::xdp_fits_mtu(ctx, device, len),
        |device, hop| match hop {
            // A host veth's key in the map is its own ifindex. The low bits of the flags are
            // the action on a lookup miss: a target that vanished since `decide` looked falls
            // back to the bridge.
            Hop::Peer => maps::TARGETS
                .redirect(device, xdp_action::XDP_PASS.into())
                .ok(),
            // Links across nodes are tc's (a VXLAN device takes no XDP frames): the bridge's.
            Hop::Tunnel => None,
        },
    )
}

/// The packet bytes between `start` and `end`, as the verifier knows them.
pub struct Frame {
    start: usize,
    end: usize,
}

dxdp_ebpf::object_boilerplate!();
