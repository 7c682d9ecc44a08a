//! The MTU the host's forwarding holds a reply to where a route sets one: `ip_forward` checks a
//! packet against its route's `mtu` (IPv4, locked or not), `ip6_forward` against a locked one
//! (IPv6), and against the device's MTU only where the route sets none. `bpf_check_mtu` knows
//! the device's alone, and `bpf_fib_lookup` answers what output would use (cached path MTUs, a
//! route's MTU only when locked), which is not what forwarding checks. So userspace mirrors the
//! host's routes into `DXDP_ROUTE_MTUS` where any of them sets an MTU forwarding heeds (all of
//! the table then, so that the longest prefix is the route the host takes), and a reply too big
//! for its route goes to the stack, which answers the container as on Docker's path.
use aya_ebpf::{
    bindings::{BPF_FIB_LKUP_RET_FRAG_NEEDED, bpf_fib_lookup},
    macros::map,
    maps::{LpmTrie, PerCpuArray, lpm_trie::Key},
    programs::TcContext,
};
use dxdp_common::ingress::DEFAULT_MAX_ROUTES;

use crate::{
    fib,
    headers::{ETH_HLEN, IPV6_HLEN, PROTO_TCP, TCP_DOFF_OFF, UDP_HLEN},
};

/// The least MTU an IPv6 path may have (RFC 8200): no cached one is below.
const IPV6_MIN_MTU: usize = 1280;

/// Destination prefixes (IPv4 v4-mapped: its prefix length plus 96) to the MTU forwarding
/// checks packets to them against; 0 where the route sets none (the device's, checked apart).
#[map(name = "DXDP_ROUTE_MTUS")]
static ROUTE_MTUS: LpmTrie<[u8; 16], u32> = LpmTrie::pinned(DEFAULT_MAX_ROUTES, 0);

/// The route lookup's parameters: 64 bytes the callers' stacks have no room for.
#[map(name = "DXDP_ROUTE_SCRATCH")]
static ROUTE_SCRATCH: PerCpuArray<bpf_fib_lookup> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's route lookup parameters, for one lookup at a time: a program asks one, reads its
/// answer and is done with it before it asks another.
#[inline(always)]
pub(crate) fn scratch() -> Option<&'static mut bpf_fib_lookup> {
    // SAFETY: this CPU's copy of the scratch value, valid for this invocation; a program runs
    // to its end on its CPU, and uses the value for one lookup at a time.
    ROUTE_SCRATCH
        .get_ptr_mut(0)
        .map(|params| unsafe { &mut *params })
}

/// Whether the packet (its IP header at `ETH_HLEN`), or each of its GSO segments, fits what
/// the host's forwarding would hold it to on its way to `dst` out of `nic_ifindex`: the
/// route's MTU where the mirrored routes set one, and a path MTU the host has cached for `dst`
/// ([`fits_cached_path_mtu`]). `layer4` is the protocol and header offset of a TCP or UDP
/// packet, which may be GSO; `None` for one that never is (a fragment, an ICMP error).
#[inline(always)]
pub(crate) fn fit(
    ctx: &TcContext,
    dst: &[u8; 16],
    v6: bool,
    layer4: Option<(u8, usize)>,
    nic_ifindex: u32,
) -> bool {
    let route_mtu = ROUTE_MTUS
        .get(Key::new(128, *dst))
        .map_or(0, |&mtu| mtu as usize);
    // IPv4 has nothing more to check where no route sets an MTU: the common case skips the
    // length's loads.
    if !v6 && route_mtu == 0 {
        return true;
    }
    let Some(len) = forwarded_len(ctx, v6, layer4) else {
        return false;
    };
    if route_mtu != 0 && len > route_mtu {
        return false;
    }
    fits_cached_path_mtu(ctx, dst, v6, len, nic_ifindex)
}

/// The length forwarding measures against an MTU: the packet's IP length, or for a GSO packet
/// one segment's (what `skb_gso_validate_network_len` measures: its payload and headers).
#[inline(always)]
fn forwarded_len(ctx: &TcContext, v6: bool, layer4: Option<(u8, usize)>) -> Option<usize> {
    // SAFETY: the verifier guarantees ctx.skb.skb points at a valid __sk_buff for this call.
    let gso_size = unsafe { (*ctx.skb.skb).gso_size } as usize;
    if let (true, Some((proto, l4))) = (gso_size != 0, layer4) {
        let l4_header = if proto == PROTO_TCP {
            (ctx.load::<u8>(l4 + TCP_DOFF_OFF).ok()? >> 4) as usize * 4
        } else {
            UDP_HLEN as usize
        };
        return Some(l4 - ETH_HLEN + l4_header + gso_size);
    }
    let length = if v6 {
        u16::from_be_bytes(ctx.load::<[u8; 2]>(ETH_HLEN + 4).ok()?) as usize + IPV6_HLEN
    } else {
        u16::from_be_bytes(ctx.load::<[u8; 2]>(ETH_HLEN + 2).ok()?) as usize
    };
    Some(length)
}

/// Whether a packet of `len` bytes to `dst` fits the path MTU the host has cached for it (a
/// route exception, learnt from a "packet too big" error the host took for itself), where
/// forwarding heeds it. IPv6 forwarding does: `ip6_forward` checks the device's `mtu6`, but
/// `ip6_finish_output` then measures the packet against the route's MTU, the exception's, and
/// `ip6_fragment` answers "packet too big". No map can mirror these: the kernel caches them as
/// errors arrive and announces nothing. So the route lookup is asked, with the length:
/// `bpf_fib_lookup` answers "fragmentation needed" above `ip6_mtu_from_fib6`'s MTU, which is
/// the cached one where there is one. IPv4 forwarding heeds a cached MTU only when it is locked
/// (learnt below `min_pmtu`) or with `ip_forward_use_pmtu`, which the lookup cannot tell apart
/// from one it ignores, and a packet handed to the stack that the stack then forwards would
/// leave untranslated: IPv4 is not asked (docs/ingress.md). Packets no cached MTU can be below
/// (IPv6's minimum link MTU) skip the lookup.
#[inline(always)]
fn fits_cached_path_mtu(
    ctx: &TcContext,
    dst: &[u8; 16],
    v6: bool,
    len: usize,
    nic_ifindex: u32,
) -> bool {
    if !v6 || len <= IPV6_MIN_MTU {
        return true;
    }
    let Some(params) = scratch() else {
        return false;
    };
    fib::ask(params, true, &[0; 16], dst, nic_ifindex);
    params.__bindgen_anon_1.tot_len = len.min(u16::MAX as usize) as u16;
    let rc = fib::lookup(ctx, params);
    // Any other answer is not about the size: the callers' own checks judge the route.
    rc != BPF_FIB_LKUP_RET_FRAG_NEEDED as i64
}
