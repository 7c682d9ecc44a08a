//! The socket layer (`sock` datapath), a lab that is not shipped (docs/sock-datapath.md): maps
//! and programs of `ebpf/programs/src/sock.rs`, loaded by the integration tests' `sock` area.
//!
//! Addresses are IPv6-shaped everywhere: an IPv4 address `a.b.c.d` is stored as the v4-mapped
//! `::ffff:a.b.c.d`, which is also how a dual-stack (`[::]`) listener's accepted socket sees its
//! IPv4 peer, so both ends of a connection compute the same key whatever their family. Addresses
//! are in network byte order (as the kernel hands them), ports in host byte order.
pub mod names {
    pub const SOCKETS: &str = "DXDP_SOCK_HASH";
    pub const LINKS: &str = "DXDP_SOCK_LINKS";
    pub const SWITCHES: &str = "DXDP_SOCK_SWITCHES";
    pub const STATES: &str = "DXDP_SOCK_STATES";
    pub const COUNTERS: &str = "DXDP_SOCK_COUNTERS";
    pub const SOCK_OPS_PROGRAM: &str = "dxdp_sock_ops";
    pub const SK_MSG_PROGRAM: &str = "dxdp_sk_msg";
    /// Load-time constants (`.rodata`): offsets read from the running kernel's BTF.
    pub const OFF_SK_USER_DATA: &str = "DXDP_OFF_SK_USER_DATA";
    pub const OFF_PSOCK_MSG_TOT_LEN: &str = "DXDP_OFF_PSOCK_MSG_TOT_LEN";
    pub const OFF_TP_WRITE_SEQ: &str = "DXDP_OFF_TP_WRITE_SEQ";
    pub const OFF_TP_COPIED_SEQ: &str = "DXDP_OFF_TP_COPIED_SEQ";
    pub const QUEUE_FLOOR: &str = "DXDP_SOCK_QUEUE_FLOOR";
}

pub const DEFAULT_MAX_SOCKETS: u32 = 65536;
pub const DEFAULT_MAX_LINKS: u32 = 16384;

/// One end of an established TCP connection, as seen from its own namespace.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SockKey {
    /// `bpf_get_netns_cookie` of the socket's network namespace.
    pub netns_cookie: u64,
    pub local_ip: [u32; 4],
    pub remote_ip: [u32; 4],
    pub local_port: u32,
    pub remote_port: u32,
}

/// A direction of a socket-level link: sockets in `netns_cookie` talking to `remote_ip` may
/// be handed to a socket in the value's namespace, and only there.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SockLinkKey {
    pub netns_cookie: u64,
    pub remote_ip: [u32; 4],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockLinkValue {
    pub peer_netns_cookie: u64,
    /// Key of the link's switch in `DXDP_SOCK_SWITCHES`.
    pub link_id: u32,
    pub _pad: u32,
}

/// Value of a switch: redirect new messages of sockets that have never used TCP.
pub const SWITCH_ON: u32 = 1;
/// Every socket of the link falls back to TCP at its next message, for good.
pub const SWITCH_OFF: u32 = 0;

/// A socket in the sockhash (keyed by its [`SockKey`]): its state, and its kernel address,
/// which the peer's sk_msg program reads `tcp_sock` fields from with probe reads (an
/// sk_msg program may not look a sockhash up: the lookup takes a reference that only
/// `bpf_sk_release` drops, and sk_msg programs cannot call it).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockEntry {
    pub state: u32,
    pub _pad: u32,
    pub sk_addr: u64,
}

/// Per-socket states of [`SockEntry::state`], written when the socket is inserted.
/// Nothing decided yet: no payload byte sent.
pub const STATE_FRESH: u32 = 0;
/// Its payload so far went to the peer socket directly.
pub const STATE_REDIRECTING: u32 = 1;
/// Some payload went over TCP: everything after it must too (ordering), for good.
pub const STATE_TCP: u32 = 2;
/// Payload went over TCP because the peer socket was not in the sockhash yet (the client
/// writes before the server's PASSIVE_ESTABLISHED): redirecting resumes once the stream is
/// quiet, i.e. the peer application has read every byte this socket wrote over TCP
/// (peer `copied_seq` == own `write_seq`), so nothing redirected can overtake it.
pub const STATE_TCP_UNTIL_QUIET: u32 = 3;

/// Per-CPU counters of the socket layer (one entry, index 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockCounters {
    /// Established sockets put in the sockhash (both ends of a connection count).
    pub sockets_inserted: u64,
    pub redirected_msgs: u64,
    pub redirected_bytes: u64,
    /// Bytes sent over TCP by sockets in the sockhash.
    pub passed_bytes: u64,
    /// Sockets that fell back to TCP for good, by reason.
    pub fallback_no_peer: u64,
    pub fallback_switch_off: u64,
    pub fallback_backpressure: u64,
    pub fallback_no_link: u64,
    /// The sockhash or state map was full: the socket was left to TCP.
    pub insert_failed: u64,
    /// Sockets that went from TCP back to redirecting once their stream was quiet.
    pub rejoined: u64,
}

const _: () = {
    assert!(core::mem::size_of::<SockKey>() == 48);
    assert!(core::mem::size_of::<SockLinkKey>() == 24);
    assert!(core::mem::size_of::<SockLinkValue>() == 16);
    assert!(core::mem::size_of::<SockEntry>() == 16);
    assert!(core::mem::size_of::<SockCounters>() == 80);
};

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), Copy, no implicit padding (sizes asserted above).
    unsafe impl aya::Pod for super::SockKey {}
    unsafe impl aya::Pod for super::SockLinkKey {}
    unsafe impl aya::Pod for super::SockLinkValue {}
    unsafe impl aya::Pod for super::SockEntry {}
    unsafe impl aya::Pod for super::SockCounters {}
}
