//! The conntrack kfunc lab (`dxdp-ct-lab`, docs/kfuncs.md): a tc program that looks each IPv4
//! or IPv6 TCP or UDP packet up in the kernel's conntrack with `bpf_skb_ct_lookup` and records the
//! outcome per tuple. Not shipped; the integration tests' `ct_kfunc` area loads it.
pub mod names {
    pub const SEEN: &str = "DXDP_CT_SEEN";
    pub const PROGRAM: &str = "dxdp_ct_probe";
    /// Load-time constants (`.rodata`): offsets in the running kernel's `struct nf_conn`,
    /// read from its BTF; 0 leaves the field unread.
    pub const OFF_STATUS: &str = "DXDP_CT_OFF_STATUS";
    pub const OFF_MARK: &str = "DXDP_CT_OFF_MARK";
    /// The reply direction's source address and port (`tuplehash[IP_CT_DIR_REPLY]
    /// .tuple.src`): where a reply comes from, the source NAT's address and port.
    pub const OFF_REPLY_SRC_IP: &str = "DXDP_CT_OFF_REPLY_SRC_IP";
    pub const OFF_REPLY_SRC_PORT: &str = "DXDP_CT_OFF_REPLY_SRC_PORT";
    /// Load-time constants of the keep-alive: packets of found entries to this destination
    /// port (network order; 0: none) set their entry's timeout to `KEEPALIVE_MS` with
    /// `bpf_ct_change_timeout` and are dropped, as if a fast path had taken them past
    /// conntrack.
    pub const KEEPALIVE_PORT: &str = "DXDP_CT_KEEPALIVE_PORT";
    pub const KEEPALIVE_MS: &str = "DXDP_CT_KEEPALIVE_MS";
}

pub const DEFAULT_MAX_TUPLES: u32 = 1024;

/// A TCP or UDP packet's tuple as the packet holds it: addresses (IPv4 v4-mapped,
/// `::ffff:a.b.c.d`) and ports in network order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CtProbeKey {
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub _pad: [u8; 3],
}

/// What the lookups of one tuple found.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtProbeValue {
    /// Lookups that returned an entry (released at once).
    pub found: u64,
    /// Lookups that returned none with `opts.error == -ENOENT`: no such connection.
    pub not_found: u64,
    /// Lookups that returned none with another error (bad arguments, no netns).
    pub failed: u64,
    /// `opts.error` of the last lookup that returned none.
    pub last_error: i32,
    /// The low 32 bits of the last found entry's `status` (IPS_* bits), 0 when not read.
    pub status: u32,
    /// The last found entry's `mark`.
    pub mark: u32,
    /// The last found entry's reply source address (IPv4 v4-mapped) and port (network order).
    pub reply_src_ip: [u8; 16],
    pub reply_src_port: u16,
    pub _pad: u16,
    /// Packets to the keep-alive port whose entry's timeout `bpf_ct_change_timeout` set.
    pub kept_alive: u32,
    /// The last nonzero return of `bpf_ct_change_timeout`.
    pub keepalive_error: i32,
}

const _: () = {
    assert!(core::mem::size_of::<CtProbeKey>() == 40);
    assert!(core::mem::size_of::<CtProbeValue>() == 64);
};

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), Copy, no implicit padding (sizes asserted above).
    unsafe impl aya::Pod for super::CtProbeKey {}
    unsafe impl aya::Pod for super::CtProbeValue {}
}
