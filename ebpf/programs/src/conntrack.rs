//! The kernel's conntrack kfuncs as aya-ebpf programs call them (docs/kfuncs.md): declared as
//! plain `extern "C"` functions, whose calls the loader (`dxdp::datapath::kfunc`) rewrites into
//! kfunc calls by the running kernel's BTF ids; the argument structs as Linux 6.18 has them;
//! and the read of an entry's fields at offsets the loader takes from the kernel's BTF.
use aya_ebpf::bindings::__sk_buff;

/// `BPF_F_CURRENT_NETNS`: the lookup uses the namespace of the skb's device.
pub(crate) const CURRENT_NETNS: i32 = -1;
pub(crate) const ENOENT: i32 = 2;
/// `enum ip_conntrack_dir`: the direction of the tuple a lookup matched (`CtOpts::dir`).
pub(crate) const DIR_ORIGINAL: u8 = 0;
pub(crate) const DIR_REPLY: u8 = 1;

/// `struct bpf_sock_tuple`'s IPv4 member: addresses and ports in network order.
#[repr(C)]
pub(crate) struct SockTupleV4 {
    pub(crate) saddr: u32,
    pub(crate) daddr: u32,
    pub(crate) sport: u16,
    pub(crate) dport: u16,
}

/// `struct bpf_sock_tuple`'s IPv6 member: addresses and ports in network order.
#[repr(C)]
pub(crate) struct SockTupleV6 {
    pub(crate) saddr: [u8; 16],
    pub(crate) daddr: [u8; 16],
    pub(crate) sport: u16,
    pub(crate) dport: u16,
}

/// A member of `struct bpf_sock_tuple`: the kfunc takes the family from the size it is given
/// (12 bytes IPv4, 36 IPv6; `bpf_nf_ct_tuple_parse`).
pub(crate) trait SockTuple {}
impl SockTuple for SockTupleV4 {}
impl SockTuple for SockTupleV6 {}

/// `struct bpf_ct_opts` as Linux 6.18 has it (16 bytes; `NF_BPF_CT_OPTS_SZ`). Linux 6.1 to 6.x
/// before the zone fields took 12 bytes; the kernel checks `opts__sz` against its own size.
#[repr(C)]
pub(crate) struct CtOpts {
    pub(crate) netns_id: i32,
    pub(crate) error: i32,
    pub(crate) l4proto: u8,
    pub(crate) dir: u8,
    pub(crate) ct_zone_id: u16,
    pub(crate) ct_zone_dir: u8,
    pub(crate) reserved: [u8; 3],
}

impl CtOpts {
    /// A lookup of `l4proto` in the current namespace's default zone.
    #[inline(always)]
    pub(crate) fn new(l4proto: u8) -> Self {
        Self {
            netns_id: CURRENT_NETNS,
            error: 0,
            l4proto,
            dir: 0,
            ct_zone_id: 0,
            ct_zone_dir: 0,
            reserved: [0; 3],
        }
    }
}

/// `struct nf_conn`, only ever behind a pointer the kfuncs hand out.
#[repr(C)]
pub(crate) struct NfConn {
    _opaque: [u8; 0],
}

// The kfuncs, as net/netfilter/nf_conntrack_bpf.c defines them. Their BTF ids are the running
// kernel's: the loader writes them into the calls (docs/kfuncs.md).
unsafe extern "C" {
    pub(crate) fn bpf_skb_ct_lookup(
        skb: *mut __sk_buff,
        tuple: *mut core::ffi::c_void,
        tuple_size: u32,
        opts: *mut CtOpts,
        opts_size: u32,
    ) -> *mut NfConn;
    pub(crate) fn bpf_ct_release(ct: *mut NfConn);
    pub(crate) fn bpf_ct_change_timeout(ct: *mut NfConn, timeout_ms: u32) -> i32;
}

/// Looks the IPv4 or IPv6 `tuple` of `proto` up from the program's skb; `opts` says what the
/// lookup found (`error`, and `dir`: which of the entry's tuples matched). A non-null entry is
/// referenced and must be released with `bpf_ct_release`.
#[inline(always)]
pub(crate) fn lookup<T: SockTuple>(
    skb: *mut __sk_buff,
    tuple: &mut T,
    opts: &mut CtOpts,
) -> *mut NfConn {
    // SAFETY: a kfunc call on the program's own context with a tuple and options on the
    // caller's stack, their sizes as declared; the verifier checks the arguments against the
    // kfunc's BTF.
    unsafe {
        bpf_skb_ct_lookup(
            skb,
            (tuple as *mut T).cast(),
            core::mem::size_of::<T>() as u32,
            opts,
            core::mem::size_of::<CtOpts>() as u32,
        )
    }
}

/// The `T` at byte `offset` of `ct`, or `None` when the loader left the offset at 0.
///
/// # Safety
/// `ct` is a live entry from `bpf_skb_ct_lookup`, `offset` a field of `T`'s size in it.
#[inline(always)]
pub(crate) unsafe fn field<T: Copy>(ct: *mut NfConn, offset: u32) -> Option<T> {
    if offset == 0 {
        return None;
    }
    // SAFETY: the caller's; the verifier checks the load against `struct nf_conn`'s BTF.
    Some(unsafe { core::ptr::read((ct as *const u8).add(offset as usize) as *const T) })
}
