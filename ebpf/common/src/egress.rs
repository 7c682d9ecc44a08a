//! What the egress programs (`dxdp egress on`) and userspace share: the names of the object's
//! maps, programs and load-time constants, and the two map layouts.
//!
//! No connection is recorded here: conntrack holds every one, and its entries' reply tuples the
//! source NAT the programs apply. The maps only say which containers take the fast path.

pub mod names {
    /// Enabled containers by host veth ifindex ([`super::EgressVeth`], per CPU for counters).
    pub const VETHS: &str = "DXDP_EGRESS_VETHS";
    /// Enabled containers' IPv4 addresses (network order, as read from a packet) to their host
    /// veth's ifindex: how a reply arriving on the NIC finds its container.
    pub const ADDRS: &str = "DXDP_EGRESS_ADDRS";
    /// Live host veths of enabled containers (a devmap: the kernel removes a veth that goes).
    pub const LIVE: &str = "DXDP_EGRESS_LIVE";
    /// Who enabled each veth ([`super::EgressOwner`]).
    pub const OWNERS: &str = "DXDP_EGRESS_OWNERS";
    /// The fast path's copy of each carried TCP connection's windows
    /// ([`crate::tcp_window::WindowKey`] to [`crate::tcp_window::TcpWindow`]). Named anew
    /// when the key grew to 16-byte addresses: a binary must never take a pinned map of the
    /// old key for one of the new.
    pub const WINDOWS: &str = "DXDP_EGRESS_TCP_WINDOWS";
    /// Closed connections' copies, kept for their late segments while conntrack's entries
    /// live ([`crate::tcp_window::WindowKey`] to [`crate::tcp_window::ClosedWindow`]).
    pub const CLOSED_WINDOWS: &str = "DXDP_EGRESS_TCP_CLOSED_WINDOWS";
    /// The two maps as binaries before IPv6 pinned them
    /// ([`crate::tcp_window::LegacyWindowKey`]): their connections are handed back to
    /// conntrack before this binary's programs are swapped in, and the pins removed.
    pub const LEGACY_WINDOWS: &str = "DXDP_EGRESS_WINDOWS";
    pub const LEGACY_CLOSED_WINDOWS: &str = "DXDP_EGRESS_CLOSED_WINDOWS";
    /// Conntrack's timeouts and TCP switches as its sysctls are now ([`super::Sysctls`], one
    /// entry): written at `egress on` and on each of the watch's passes, so that programs
    /// loaded before a sysctl changed refresh entries to what conntrack itself would give
    /// them, and judge segments as it would. (Named before it held the switches too.)
    pub const TIMEOUTS: &str = "DXDP_EGRESS_TIMEOUTS";
    /// TCX ingress on an enabled container's host veth: its packets out of the NIC.
    pub const OUT_PROGRAM: &str = "dxdp_egress";
    /// TCX ingress on the NIC: the replies into the container.
    pub const BACK_PROGRAM: &str = "dxdp_egress_back";

    /// Load-time constants (`.rodata`): offsets in the running kernel's `struct nf_conn`.
    pub const OFF_STATUS: &str = "DXDP_EGRESS_OFF_STATUS";
    pub const OFF_TIMEOUT: &str = "DXDP_EGRESS_OFF_TIMEOUT";
    /// `proto.tcp.state`: conntrack's TCP state (a `u8`).
    pub const OFF_TCP_STATE: &str = "DXDP_EGRESS_OFF_TCP_STATE";
    /// `tuplehash[IP_CT_DIR_ORIGINAL].tuple.src`: the container's address and port.
    pub const OFF_ORIG_SRC_IP: &str = "DXDP_EGRESS_OFF_ORIG_SRC_IP";
    pub const OFF_ORIG_SRC_PORT: &str = "DXDP_EGRESS_OFF_ORIG_SRC_PORT";
    /// `tuplehash[IP_CT_DIR_REPLY].tuple.dst`: the masqueraded address and port.
    pub const OFF_REPLY_DST_IP: &str = "DXDP_EGRESS_OFF_REPLY_DST_IP";
    pub const OFF_REPLY_DST_PORT: &str = "DXDP_EGRESS_OFF_REPLY_DST_PORT";
    /// `proto.tcp.seen[0]`'s fields (`struct ip_ct_tcp_state`), and `seen[1]`'s distance.
    pub const OFF_SEEN_END: &str = "DXDP_EGRESS_OFF_SEEN_END";
    pub const OFF_SEEN_MAXEND: &str = "DXDP_EGRESS_OFF_SEEN_MAXEND";
    pub const OFF_SEEN_MAXWIN: &str = "DXDP_EGRESS_OFF_SEEN_MAXWIN";
    pub const OFF_SEEN_MAXACK: &str = "DXDP_EGRESS_OFF_SEEN_MAXACK";
    pub const OFF_SEEN_SCALE: &str = "DXDP_EGRESS_OFF_SEEN_SCALE";
    pub const OFF_SEEN_FLAGS: &str = "DXDP_EGRESS_OFF_SEEN_FLAGS";
    pub const SEEN_STRIDE: &str = "DXDP_EGRESS_SEEN_STRIDE";
    /// The kernel's tick rate, which `nf_conn.timeout` counts in.
    pub const HZ: &str = "DXDP_EGRESS_HZ";
}

/// Conntrack's sysctls the egress programs follow. The timeouts conntrack itself gives an
/// entry on each packet, in milliseconds (0: not known, the entry's timeout is left alone):
/// `nf_conntrack_tcp_timeout_established`, `_time_wait`, `_close`, `nf_conntrack_udp_timeout`
/// and `_stream`; and its TCP switches ([`switch`] bits).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sysctls {
    pub tcp_established_ms: u32,
    pub tcp_closing_ms: u32,
    pub tcp_reset_ms: u32,
    pub udp_ms: u32,
    pub udp_stream_ms: u32,
    /// Where the value had its padding: a map pinned by a binary before the switches keeps
    /// its size, and is taken as it is.
    pub tcp_switches: u32,
}

/// Bits of [`Sysctls::tcp_switches`]: the published ports' programs read the same bits.
pub use crate::tcp_window::switch;

pub const DEFAULT_MAX_EGRESS: u32 = 1024;

/// An enabled container's host veth: where its packets leave, what its frames carry, and what
/// the fast path carried (per CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EgressVeth {
    /// The NIC its connections leave by, and the bridge its veth is a port of (the device the
    /// host routes its packets from).
    pub nic_ifindex: u32,
    pub bridge_ifindex: u32,
    /// The container's IPv4 address (network order, as a packet holds it).
    pub addr: u32,
    pub _pad: u32,
    /// The container's MAC, and the bridge's (the gateway its routed frames go to).
    pub mac: [u8; 6],
    pub gateway_mac: [u8; 6],
    pub _pad2: u32,
    /// Out of the NIC, and replies into the container.
    pub out_packets: u64,
    pub out_bytes: u64,
    pub in_packets: u64,
    pub in_bytes: u64,
    /// TCP and UDP packets from the container left to Docker's path (a connection's first
    /// packets, conntrack not finding one, a route elsewhere…).
    pub passed_packets: u64,
}

/// Who enabled a veth and when: userspace's bookkeeping, beside the datapath.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EgressOwner {
    pub created_unix_secs: u64,
    /// The container's name, NUL-padded UTF-8.
    pub name: [u8; crate::NAME_LEN],
}

const _: () = {
    assert!(core::mem::size_of::<EgressVeth>() == 72);
    assert!(core::mem::size_of::<EgressOwner>() == 8 + crate::NAME_LEN);
    assert!(core::mem::size_of::<Sysctls>() == 24);
};

/// `IPS_*` bits of `nf_conn.status` (include/uapi/linux/netfilter/nf_conntrack_common.h).
pub mod status {
    pub const EXPECTED: u32 = 1 << 0;
    pub const SEEN_REPLY: u32 = 1 << 1;
    pub const ASSURED: u32 = 1 << 2;
    pub const CONFIRMED: u32 = 1 << 3;
    pub const DST_NAT: u32 = 1 << 5;
    pub const SEQ_ADJUST: u32 = 1 << 6;
    pub const DYING: u32 = 1 << 9;
    pub const TEMPLATE: u32 = 1 << 11;
    pub const UNTRACKED: u32 = 1 << 12;
    pub const HELPER: u32 = 1 << 13;
    pub const OFFLOAD: u32 = 1 << 14;
    pub const HW_OFFLOAD: u32 = 1 << 15;
    /// What the fast path needs set: a reply seen, the entry in the table.
    pub const NEEDED: u32 = SEEN_REPLY | CONFIRMED;
    /// What keeps a connection on Docker's path: a destination NAT (a published port's, or a
    /// rule's), a helper or expectation (they read the payload), sequence adjustment, an entry
    /// going away, or one a flowtable owns.
    pub const REFUSED: u32 = EXPECTED
        | DST_NAT
        | SEQ_ADJUST
        | DYING
        | TEMPLATE
        | UNTRACKED
        | HELPER
        | OFFLOAD
        | HW_OFFLOAD;

    /// Whether an entry of this status may take the fast path.
    pub const fn carried(status: u32) -> bool {
        status & NEEDED == NEEDED && status & REFUSED == 0
    }
}

/// `TCP_CONNTRACK_ESTABLISHED` of `enum tcp_conntrack`.
pub const TCP_CONNTRACK_ESTABLISHED: u8 = 3;

/// When a carried packet sets its entry's timeout: conntrack would have set it to `full_ms`
/// on this packet; the fast path sets it only once less than seven eighths of it are left, so
/// an entry is written about once per eighth of its timeout, and expires between seven eighths
/// and all of its timeout after the connection's last packet. An entry left with `closing_ms`
/// or less (a FIN or RST the fast path carried set it so) is never lengthened again, where
/// that tells such an entry from a live one: only while `closing_ms` is below `full_ms`. With
/// an established timeout at or below TIME_WAIT's (`nf_conntrack_tcp_timeout_established`
/// lowered to 10 s, say), every live entry had less than `closing_ms` left, none was ever
/// refreshed, and conntrack expired live connections under the fast path
/// (`egress::a_carried_connection_outlives_conntracks_timeout_and_expires_when_quiet`).
/// `remaining_ms` is what the entry has left.
///
/// An entry with more than `full_ms` left was given a longer timeout before the operator
/// lowered the sysctl: conntrack would cut it to the new one on this packet (it sets the
/// timeout outright), and so does the fast path, save where it could be a closing entry (no
/// more than `closing_ms` left), which conntrack's own TIME_WAIT keeps.
pub const fn refresh_due(remaining_ms: u64, full_ms: u64, closing_ms: u64) -> bool {
    let closed = closing_ms < full_ms && remaining_ms <= closing_ms;
    let lowered = remaining_ms > full_ms && remaining_ms > closing_ms;
    lowered || (!closed && remaining_ms < full_ms - full_ms / 8)
}

#[cfg(test)]
mod tests {
    use super::refresh_due;

    #[test]
    fn entries_are_refreshed_below_seven_eighths_and_closing_ones_never() {
        const DAY: u64 = 86_400_000;
        // Five days established, two minutes TIME_WAIT (the defaults).
        assert!(!refresh_due(5 * DAY - 1000, 5 * DAY, 120_000));
        assert!(refresh_due(4 * DAY, 5 * DAY, 120_000));
        // A FIN set it to TIME_WAIT's: never lengthened again.
        assert!(!refresh_due(120_000, 5 * DAY, 120_000));
        assert!(!refresh_due(60_000, 5 * DAY, 120_000));
        // Established lowered below TIME_WAIT: a live entry is refreshed all the same.
        assert!(refresh_due(8_000, 10_000, 120_000));
        assert!(!refresh_due(9_000, 10_000, 120_000));
        // UDP: no closing timeout.
        assert!(refresh_due(100_000, 120_000, 0));
        assert!(!refresh_due(110_000, 120_000, 0));
    }

    #[test]
    fn a_lowered_timeout_cuts_live_entries_and_leaves_closing_ones() {
        const DAY: u64 = 86_400_000;
        // Five days lowered to three, or to 10 s: cut, as conntrack's next packet would.
        assert!(refresh_due(4 * DAY, 3 * DAY, 120_000));
        assert!(refresh_due(4 * DAY, 10_000, 120_000));
        // Below 10 s lowered to under TIME_WAIT's 120 s, an entry with 100 s left may be one a
        // FIN set to TIME_WAIT's: left.
        assert!(!refresh_due(100_000, 10_000, 120_000));
        // UDP's 120 s stream timeout lowered to 30 s.
        assert!(refresh_due(110_000, 30_000, 0));
        // Nothing lowered: an entry never has more than the timeout left.
        assert!(!refresh_due(5 * DAY, 5 * DAY, 120_000));
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), Copy, no implicit padding (sizes asserted above).
    unsafe impl aya::Pod for super::EgressVeth {}
    unsafe impl aya::Pod for super::EgressOwner {}
    unsafe impl aya::Pod for super::Sysctls {}
}
