//! Fragmented datagrams a container sends over a fast-path connection (a UDP answer larger
//! than the container's MTU: a big DNS answer), translated like the connection's other packets.
//!
//! Without this, the fragments took the stack, where conntrack (which never saw the
//! connection: the fast path carried its first packet) reassembled the datagram, took it for a
//! new connection from the container, and masqueraded it from the container's own port: the
//! client dropped every such answer. Only the first fragment carries the ports that find the
//! connection; it records the datagram (its addresses, protocol and IP identification) with
//! the published port in `DXDP_REPLY_FRAGMENTS`, and the fragments after it find the port
//! there. The first gets the published address and port (its layer-4 checksum covers the whole
//! datagram, and is updated as for an unfragmented packet); the others only the address. The
//! kernel sends a datagram's fragments in order, the first first (`ip_do_fragment`,
//! `ip6_fragment`); a fragment that finds no record takes the stack, as before.
use aya_ebpf::{bindings::TC_ACT_UNSPEC, programs::TcContext};
use dxdp_common::ingress::{FlowKey, FragmentKey, PortKey};

use crate::{
    flows::{known_flow, out_of_nic},
    headers::{
        ETH_HLEN, ETH_P_IP, ETH_P_IPV6, IPV4_HLEN, IPV6_FRAGMENT, IPV6_FRAGMENT_HLEN, IPV6_HLEN,
        PROTO_TCP, PROTO_UDP, TCP_CSUM_OFF, UDP_CSUM_OFF, ethertype, fits_mtu, v4_mapped,
    },
    maps::{PORTS, REPLY_FRAGMENTS},
    rewrite::{self, Sums},
    routes,
};

/// The ports, which the first fragment's layer-4 header starts with.
const PORTS_LEN: usize = 4;

/// One fragment of a TCP or UDP datagram.
struct Fragment {
    key: FragmentKey,
    /// The first fragment's layer-4 header offset, its ports and the offset of its checksum;
    /// `None` for the fragments after it.
    first: Option<First>,
    /// No fragment follows (IPv4's more-fragments bit, IPv6's M flag, clear).
    last: bool,
    /// A TTL or hop limit the host would forward (above 1).
    forwardable: bool,
}

struct First {
    l4: usize,
    l4_csum: usize,
    sport: u16,
    dport: u16,
}

/// A fragment of a datagram `veth_ifindex`'s container sends over a fast-path connection
/// leaves through its NIC, translated; `None` for a packet that is not a TCP or UDP fragment
/// (an IPv4 header without options, or IPv6's fixed header followed straight by a fragment
/// header), and `Some(pass)` for one of another datagram.
#[inline(always)]
pub fn reply(ctx: &TcContext) -> Option<i32> {
    // SAFETY: the verifier guarantees ctx.skb.skb points at a valid __sk_buff for this call.
    let veth_ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let fragment = parse(ctx, veth_ifindex)?;
    let key = fragment.key;
    let port = match fragment.first {
        Some(ref first) => {
            let flow = FlowKey::new(
                veth_ifindex,
                key.proto,
                (key.src, first.sport),
                (key.dst, first.dport),
            );
            let Some(known) = known_flow(flow).filter(|_| fragment.forwardable) else {
                // Another datagram's: its fragments after this one must not find an older
                // record of the same identification.
                let _ = REPLY_FRAGMENTS.remove(key);
                return Some(TC_ACT_UNSPEC);
            };
            known.touch();
            let port = known.port();
            // Unrecorded, the rest would be lost on the stack: this one goes there too.
            if !fragment.last && REPLY_FRAGMENTS.insert(key, port, 0).is_err() {
                return Some(TC_ACT_UNSPEC);
            }
            port
        }
        None => {
            // SAFETY: a map value, copied out at once.
            let Some(port) = (unsafe { REPLY_FRAGMENTS.get(key) }).copied() else {
                return Some(TC_ACT_UNSPEC);
            };
            if fragment.last {
                let _ = REPLY_FRAGMENTS.remove(key);
            }
            if !fragment.forwardable {
                return Some(TC_ACT_UNSPEC);
            }
            port
        }
    };
    // A fragment too big for the NIC takes the stack, whose answer ("fragmentation needed")
    // the container heeds for the datagrams after.
    if !fits_mtu(ctx, port.nic_ifindex)
        || !routes::fit(ctx, &key.dst, key.v6 != 0, None, port.nic_ifindex)
    {
        return Some(TC_ACT_UNSPEC);
    }
    let translated = translate(ctx, &fragment, &port);
    Some(out_of_nic(
        ctx,
        &port,
        PORTS.get_ptr_mut(port),
        veth_ifindex,
        translated,
    ))
}

/// The fragment's source becomes the published address; the first fragment's source port the
/// published port.
#[inline(always)]
fn translate(ctx: &TcContext, fragment: &Fragment, port: &PortKey) -> Result<(), i64> {
    let v6 = fragment.key.v6 != 0;
    let sums = Sums {
        v6,
        l3: ETH_HLEN,
        l4_csum: fragment.first.as_ref().map(|first| first.l4_csum),
        proto: fragment.key.proto,
    };
    let source = ETH_HLEN + if v6 { 8 } else { 12 };
    rewrite::address(ctx, sums, source, &fragment.key.src, &port.addr)?;
    if let Some(ref first) = fragment.first {
        rewrite::port(ctx, sums, first.l4_csum, first.l4, first.sport, port.port)?;
    }
    Ok(())
}

/// The layer-4 checksum's offset in a TCP or UDP header; `None` for other protocols.
#[inline(always)]
fn l4_csum_offset(proto: u8) -> Option<usize> {
    match proto {
        PROTO_TCP => Some(TCP_CSUM_OFF),
        PROTO_UDP => Some(UDP_CSUM_OFF),
        _ => None,
    }
}

#[inline(always)]
fn parse(ctx: &TcContext, veth_ifindex: u32) -> Option<Fragment> {
    let end = ctx.data_end();
    let (ethertype, l3) = ethertype(ctx)?;
    match ethertype {
        ETH_P_IP => {
            if l3 + IPV4_HLEN > end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; IPV4_HLEN]) };
            let offset = u16::from_be_bytes([ip[6] & 0x1f, ip[7]]);
            let more = ip[6] & 0x20 != 0;
            if ip[0] != 0x45 || (offset == 0 && !more) {
                return None;
            }
            let proto = ip[9];
            let csum = l4_csum_offset(proto)?;
            let first = if offset == 0 {
                Some(first_of(l3 + IPV4_HLEN, end, ETH_HLEN + IPV4_HLEN, csum)?)
            } else {
                None
            };
            Some(Fragment {
                key: FragmentKey {
                    veth_ifindex,
                    id: u16::from_be_bytes([ip[4], ip[5]]) as u32,
                    proto,
                    v6: 0,
                    _pad: 0,
                    src: v4_mapped(&ip[12..16]),
                    dst: v4_mapped(&ip[16..20]),
                },
                first,
                last: !more,
                forwardable: ip[8] > 1,
            })
        }
        ETH_P_IPV6 => {
            const LEN: usize = IPV6_HLEN + IPV6_FRAGMENT_HLEN;
            if l3 + LEN > end {
                return None;
            }
            // SAFETY: bounds-checked above.
            let ip = unsafe { &*(l3 as *const [u8; LEN]) };
            if ip[0] >> 4 != 6 || ip[6] != IPV6_FRAGMENT {
                return None;
            }
            let frag = &ip[IPV6_HLEN..];
            let proto = frag[0];
            let csum = l4_csum_offset(proto)?;
            let offset = u16::from_be_bytes([frag[2], frag[3]]) >> 3;
            let more = frag[3] & 1 != 0;
            let first = if offset == 0 {
                Some(first_of(l3 + LEN, end, ETH_HLEN + LEN, csum)?)
            } else {
                None
            };
            let mut src = [0u8; 16];
            src.copy_from_slice(&ip[8..24]);
            let mut dst = [0u8; 16];
            dst.copy_from_slice(&ip[24..40]);
            Some(Fragment {
                key: FragmentKey {
                    veth_ifindex,
                    id: u32::from_be_bytes([frag[4], frag[5], frag[6], frag[7]]),
                    proto,
                    v6: 1,
                    _pad: 0,
                    src,
                    dst,
                },
                first,
                last: !more,
                forwardable: ip[7] > 1,
            })
        }
        _ => None,
    }
}

/// The first fragment's ports, its layer-4 header at `l4` in the packet (at `l4_offset` in the
/// frame), its checksum `csum` bytes into it.
#[inline(always)]
fn first_of(l4: usize, end: usize, l4_offset: usize, csum: usize) -> Option<First> {
    if l4 + PORTS_LEN > end {
        return None;
    }
    // SAFETY: bounds-checked just above.
    let ports = unsafe { &*(l4 as *const [u8; PORTS_LEN]) };
    Some(First {
        l4: l4_offset,
        l4_csum: l4_offset + csum,
        sport: u16::from_be_bytes([ports[0], ports[1]]),
        dport: u16::from_be_bytes([ports[2], ports[3]]),
    })
}
