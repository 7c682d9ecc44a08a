//! Rewriting an address or a port in place, with every checksum that covers it made right: the
//! IPv4 header's, and the layer-4 one (pseudo-header included) whether it is complete, partial
//! (offloaded) or, for UDP over IPv4, absent.
use crate::headers::{PROTO_UDP, words};
use aya_ebpf::{
    bindings::{BPF_F_MARK_MANGLED_0, BPF_F_PSEUDO_HDR},
    helpers::generated::bpf_csum_diff,
    programs::TcContext,
};

/// Where the checksums that cover a packet's addresses and ports sit.
#[derive(Clone, Copy)]
pub(crate) struct Sums {
    pub(crate) v6: bool,
    /// Offset of the IP header (IPv4's checksum is at 10 in it).
    pub(crate) l3: usize,
    /// Offset of the TCP or UDP checksum; `None` in a fragment after the first, which carries
    /// no layer-4 header (the first fragment's checksum covers the whole datagram).
    pub(crate) l4_csum: Option<usize>,
    pub(crate) proto: u8,
}

impl Sums {
    /// Layer-4 checksum flags: UDP over IPv4 may carry none, which must stay none.
    #[inline(always)]
    fn l4_flags(&self) -> u64 {
        if self.proto == PROTO_UDP {
            BPF_F_MARK_MANGLED_0 as u64
        } else {
            0
        }
    }
}

/// The address at `offset` (IPv4's 4 bytes, or IPv6's 16) goes from `old` to `new` (16 bytes,
/// IPv4 v4-mapped).
#[inline(always)]
pub(crate) fn address(
    ctx: &TcContext,
    sums: Sums,
    offset: usize,
    old: &[u8; 16],
    new: &[u8; 16],
) -> Result<(), i64> {
    let flags = BPF_F_PSEUDO_HDR as u64 | sums.l4_flags();
    if sums.v6 {
        if let Some(l4_csum) = sums.l4_csum {
            let mut from = words(old);
            let mut to = words(new);
            // SAFETY: both buffers are 16 bytes on this stack frame.
            let diff = unsafe { bpf_csum_diff(from.as_mut_ptr(), 16, to.as_mut_ptr(), 16, 0) };
            if diff < 0 {
                return Err(diff);
            }
            ctx.l4_csum_replace(l4_csum, 0, diff as u64, flags)?;
        }
        ctx.store(offset, new, 0)?;
    } else {
        let from = words(old)[3] as u64;
        let to = words(new)[3] as u64;
        if let Some(l4_csum) = sums.l4_csum {
            ctx.l4_csum_replace(l4_csum, from, to, flags | 4)?;
        }
        ctx.l3_csum_replace(sums.l3 + 10, from, to, 4)?;
        let mut v4 = [0u8; 4];
        v4.copy_from_slice(&new[12..16]);
        ctx.store(offset, &v4, 0)?;
    }
    Ok(())
}

/// The port at `offset` goes from `old` to `new`; the layer-4 checksum (which a port is always
/// next to) follows.
#[inline(always)]
pub(crate) fn port(
    ctx: &TcContext,
    sums: Sums,
    l4_csum: usize,
    offset: usize,
    old: u16,
    new: u16,
) -> Result<(), i64> {
    let from = u16::from_ne_bytes(old.to_be_bytes()) as u64;
    let to = u16::from_ne_bytes(new.to_be_bytes()) as u64;
    ctx.l4_csum_replace(l4_csum, from, to, sums.l4_flags() | 2)?;
    ctx.store(offset, &new.to_be_bytes(), 0)
}
