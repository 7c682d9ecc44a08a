//! Whether a packet from outside carries a layer-4 checksum the host's conntrack takes.
//!
//! On Docker's path conntrack checks the TCP, UDP, ICMP and ICMPv6 checksums of every packet
//! in PREROUTING (`nf_conntrack_checksum`, on by default) and marks a packet whose sum is wrong
//! invalid: Docker's DNAT never translates it, no ICMP error is related to a connection, and
//! the host drops it. The fast path must not hand such a packet to the container either, so
//! it sums what conntrack would sum (`nf_checksum`): the pseudo-header (not ICMPv4's) and the
//! layer-4 bytes as far as the IP header's length says, and leaves a packet that does not sum
//! to zero to the stack.
//!
//! What conntrack does not sum, the fast path does not either: a packet the device already
//! checked (`CHECKSUM_UNNECESSARY`), one another local stack sent without summing it
//! (`CHECKSUM_PARTIAL`: a GSO packet, or a TCP or UDP packet whose checksum field holds the
//! pseudo-header's sum, which is what such a sender leaves there), and UDP without a checksum.
use aya_ebpf::{
    bindings::BPF_CSUM_LEVEL_QUERY,
    helpers::generated::{bpf_csum_diff, bpf_csum_level, bpf_skb_load_bytes},
    programs::TcContext,
};
use core::ffi::c_void;

use dxdp_common::stack::fold;

use crate::{
    headers::{PROTO_ICMP, PROTO_TCP, PROTO_UDP, words},
    maps::SCRATCH,
};

/// Bytes summed by one helper call.
const STEP: usize = 64;
/// The most layer-4 bytes summed: a 9216-byte jumbo frame's. A longer packet that is neither
/// GSO nor checked by its device is left to the stack.
const MOST: usize = 9216;

/// A packet's layer-4 message as conntrack sums it.
pub(crate) struct Message<'a> {
    pub(crate) v6: bool,
    pub(crate) proto: u8,
    /// By reference: copied, an address's bytes took a stack slot each.
    pub(crate) src: &'a [u8; 16],
    pub(crate) dst: &'a [u8; 16],
    /// Offset of the layer-4 header in the frame, and its length by the IP header.
    pub(crate) at: usize,
    pub(crate) len: usize,
    /// Offset of the checksum within the layer-4 header.
    pub(crate) checksum_at: usize,
}

/// Whether conntrack would take the message's checksum (see the module's head). Its buffers
/// are scratch memory: the programs' stack frames could not also hold them.
#[inline(always)]
pub(crate) fn taken(ctx: &TcContext, m: &Message<'_>) -> bool {
    let skb = ctx.skb.skb;
    // SAFETY: the verifier guarantees ctx.skb.skb points at a valid __sk_buff for this call.
    if unsafe { (*skb).gso_size } != 0 {
        return true;
    }
    // SAFETY: a plain helper call on this program's own context; the query changes nothing.
    if unsafe { bpf_csum_level(skb, BPF_CSUM_LEVEL_QUERY as u64) } >= 0 {
        return true;
    }
    let Ok(field) = ctx.load::<[u8; 2]>(m.at + m.checksum_at) else {
        return false;
    };
    let field = u16::from_ne_bytes(field);
    let transport = matches!(m.proto, PROTO_TCP | PROTO_UDP);
    if m.proto == PROTO_UDP && field == 0 {
        return true;
    }
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: this CPU's own value of the scratch map, used by nothing else during this
    // invocation.
    let scratch = unsafe { &mut *scratch };
    let Some(pseudo) = pseudo_header(m, &mut scratch.pseudo) else {
        return false;
    };
    if transport && field == fold(pseudo) {
        return true;
    }
    sum(ctx, m.at, m.len, pseudo, &mut scratch.words).is_some_and(|total| fold(total) == 0xffff)
}

/// The sum of the pseudo-header the message's checksum covers: zero for ICMPv4, which has none.
#[inline(always)]
fn pseudo_header(m: &Message<'_>, header: &mut [u32; 10]) -> Option<u32> {
    if m.proto == PROTO_ICMP {
        return Some(0);
    }
    let src = words(m.src);
    let dst = words(m.dst);
    let len = m.len as u32;
    let proto = m.proto as u32;
    let size = if m.v6 {
        header[..4].copy_from_slice(&src);
        header[4..8].copy_from_slice(&dst);
        header[8] = len.to_be();
        header[9] = proto.to_be();
        40
    } else {
        header[0] = src[3];
        header[1] = dst[3];
        header[2] = ((proto << 16) | (len & 0xffff)).to_be();
        12
    };
    add(header, size, 0)
}

/// `seed` plus the ones'-complement sum of `len` bytes of the frame from `at`, in steps of
/// constant sizes (the verifier checks each helper call's size) into one buffer, and the last
/// one to three bytes padded with zeros, as the message's last word is.
#[inline(always)]
fn sum(
    ctx: &TcContext,
    at: usize,
    len: usize,
    seed: u32,
    buffer: &mut [u32; STEP / 4],
) -> Option<u32> {
    if len > MOST {
        return None;
    }
    let mut total = seed;
    let mut done = 0;
    for _ in 0..MOST / STEP {
        if done + STEP > len {
            break;
        }
        total = add_from(ctx, at + done, buffer, STEP as u32, total)?;
        done += STEP;
    }
    let left = len - done;
    for piece in [32u32, 16, 8, 4] {
        if left & piece as usize != 0 {
            total = add_from(ctx, at + done, buffer, piece, total)?;
            done += piece as usize;
        }
    }
    let last = left & 3;
    if last == 0 {
        return Some(total);
    }
    buffer[0] = 0;
    // SAFETY: `buffer` (scratch memory) holds at least the one to three bytes written.
    let read = unsafe {
        let to = buffer.as_mut_ptr() as *mut c_void;
        let skb = ctx.skb.skb as *mut _;
        match last {
            1 => bpf_skb_load_bytes(skb, (at + done) as u32, to, 1),
            2 => bpf_skb_load_bytes(skb, (at + done) as u32, to, 2),
            _ => bpf_skb_load_bytes(skb, (at + done) as u32, to, 3),
        }
    };
    if read < 0 {
        return None;
    }
    add(buffer, 4, total)
}

/// `seed` plus the sum of the `size` bytes of the frame at `at`, read into `buffer`.
#[inline(always)]
fn add_from(
    ctx: &TcContext,
    at: usize,
    buffer: &mut [u32; STEP / 4],
    size: u32,
    seed: u32,
) -> Option<u32> {
    // SAFETY: `buffer` (scratch memory) holds STEP >= `size` bytes.
    let read = unsafe {
        bpf_skb_load_bytes(
            ctx.skb.skb as *mut _,
            at as u32,
            buffer.as_mut_ptr() as *mut c_void,
            size,
        )
    };
    if read < 0 {
        return None;
    }
    add(buffer, size, seed)
}

/// `seed` plus the sum of the first `size` bytes of `words` (`bpf_csum_diff` with nothing
/// taken away).
#[inline(always)]
fn add<const N: usize>(words: &mut [u32; N], size: u32, seed: u32) -> Option<u32> {
    // SAFETY: `words` lives on this stack and holds at least `size` bytes; nothing is read
    // from the null "from" side, whose size is zero.
    let total = unsafe { bpf_csum_diff(core::ptr::null_mut(), 0, words.as_mut_ptr(), size, seed) };
    (total >= 0).then_some(total as u32)
}
