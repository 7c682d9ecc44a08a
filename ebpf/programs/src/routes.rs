//! The MTU the host's forwarding holds a reply to where a route sets one: `ip_forward` checks a
//! packet against its route's `mtu` (IPv4, locked or not), `ip6_forward` against a locked one
//! (IPv6), and against the device's MTU only where the route sets none. `bpf_check_mtu` knows
//! the device's alone, and `bpf_fib_lookup` answers what output would use (cached path MTUs, a
//! route's MTU only when locked), which is not what forwarding checks. So userspace mirrors the
//! host's routes into `DXDP_ROUTE_MTUS` where any of them sets an MTU forwarding heeds (all of
//! the table then, so that the longest prefix is the route the host takes), and a reply too big
//! for its route goes to the stack, which answers the container as on Docker's path.
use aya_ebpf::{
    macros::map,
    maps::{LpmTrie, lpm_trie::Key},
    programs::TcContext,
};
use dxdp_common::ingress::DEFAULT_MAX_ROUTES;

use crate::headers::{ETH_HLEN, PROTO_TCP, TCP_DOFF_OFF, UDP_HLEN};

/// Destination prefixes (IPv4 v4-mapped: its prefix length plus 96) to the MTU forwarding
/// checks packets to them against; 0 where the route sets none (the device's, checked apart).
#[map(name = "DXDP_ROUTE_MTUS")]
static ROUTE_MTUS: LpmTrie<[u8; 16], u32> = LpmTrie::pinned(DEFAULT_MAX_ROUTES, 0);

/// Whether the packet (its IP header at `ETH_HLEN`), or each of its GSO segments, fits the MTU
/// of the route to `dst`, where the mirrored routes set one. `layer4` is the protocol and
/// header offset of a TCP or UDP packet, which may be GSO; `None` for one that never is (a
/// fragment, an ICMP error).
#[inline(always)]
pub(crate) fn fit(ctx: &TcContext, dst: &[u8; 16], v6: bool, layer4: Option<(u8, usize)>) -> bool {
    let Some(&mtu) = ROUTE_MTUS.get(Key::new(128, *dst)) else {
        return true;
    };
    if mtu == 0 {
        return true;
    }
    // SAFETY: the verifier guarantees ctx.skb.skb points at a valid __sk_buff for this call.
    let gso_size = unsafe { (*ctx.skb.skb).gso_size } as usize;
    let len = if let (true, Some((proto, l4))) = (gso_size != 0, layer4) {
        // What `skb_gso_validate_network_len` measures: one segment's payload and headers.
        let l4_header = if proto == PROTO_TCP {
            match ctx.load::<u8>(l4 + TCP_DOFF_OFF) {
                Ok(offset) => (offset >> 4) as usize * 4,
                Err(_) => return false,
            }
        } else {
            UDP_HLEN as usize
        };
        l4 - ETH_HLEN + l4_header + gso_size
    } else {
        let length = if v6 {
            ctx.load::<[u8; 2]>(ETH_HLEN + 4)
                .map(|l| u16::from_be_bytes(l) as usize + crate::headers::IPV6_HLEN)
        } else {
            ctx.load::<[u8; 2]>(ETH_HLEN + 2)
                .map(|l| u16::from_be_bytes(l) as usize)
        };
        match length {
            Ok(length) => length,
            Err(_) => return false,
        }
    };
    len <= mtu as usize
}
