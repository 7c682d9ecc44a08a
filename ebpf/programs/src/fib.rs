//! The kernel's route lookup as the datapath's programs ask it: `bpf_fib_lookup` for the
//! route alone (`BPF_FIB_LOOKUP_SKIP_NEIGH`: the redirect that follows resolves the next hop),
//! on parameters the caller keeps (its stack, or scratch memory where the stack is full).
use aya_ebpf::{
    bindings::{BPF_FIB_LOOKUP_SKIP_NEIGH, bpf_fib_lookup},
    helpers::generated::bpf_fib_lookup as fib_lookup,
    programs::TcContext,
};

use crate::headers::words;

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// Clears `params` and sets the lookup's family, ends (16 bytes, IPv4 v4-mapped; an unknown
/// source as zero) and the interface it is asked as if arriving on.
#[inline(always)]
pub(crate) fn ask(
    params: &mut bpf_fib_lookup,
    v6: bool,
    src: &[u8; 16],
    dst: &[u8; 16],
    ifindex: u32,
) {
    // SAFETY: plain data; every field the lookup reads is set below or zero.
    *params = unsafe { core::mem::zeroed() };
    params.ifindex = ifindex;
    if v6 {
        params.family = AF_INET6;
        params.__bindgen_anon_3.ipv6_src = words(src);
        params.__bindgen_anon_4.ipv6_dst = words(dst);
    } else {
        params.family = AF_INET;
        params.__bindgen_anon_3.ipv4_src = words(src)[3];
        params.__bindgen_anon_4.ipv4_dst = words(dst)[3];
    }
}

/// The kernel's answer to `params` (`BPF_FIB_LKUP_RET_*`; 0: forwarded out of
/// `params.ifindex`, which it overwrites).
#[inline(always)]
pub(crate) fn lookup(ctx: &TcContext, params: &mut bpf_fib_lookup) -> i64 {
    // SAFETY: the helper reads and writes `params`, the caller's, for this call only.
    unsafe {
        fib_lookup(
            ctx.skb.skb as *mut _,
            params,
            core::mem::size_of::<bpf_fib_lookup>() as i32,
            BPF_FIB_LOOKUP_SKIP_NEIGH,
        )
    }
}
