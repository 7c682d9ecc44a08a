//! conntrack's TCP window tracking as the egress fast path mirrors it (issue 36, docs/egress.md
//! "TCP windows"): the arithmetic of `tcp_in_window` and of the RST check in
//! `nf_conntrack_tcp_packet` (net/netfilter/nf_conntrack_proto_tcp.c, Linux 6.18) on a copy
//! of an entry's `proto.tcp.seen[]`, so that a segment the fast path carries is one conntrack
//! would have let through, and one it would mark INVALID takes Docker's path, where it does.
//!
//! Pure functions of plain data: unit-tested on the host, and called by `dxdp_egress` and
//! `dxdp_egress_back` on each carried TCP segment.

/// `IP_CT_TCP_FLAG_*` of `ip_ct_tcp_state.flags` (include/uapi/linux/netfilter/nf_conntrack_tcp.h).
pub const FLAG_WINDOW_SCALE: u8 = 0x01;
pub const FLAG_SACK_PERM: u8 = 0x02;
pub const FLAG_CLOSE_INIT: u8 = 0x04;
pub const FLAG_BE_LIBERAL: u8 = 0x08;
pub const FLAG_DATA_UNACKNOWLEDGED: u8 = 0x10;
pub const FLAG_MAXACK_SET: u8 = 0x20;

/// Conntrack's TCP switches of the host's namespace, as bits of one `u32` that the programs
/// read from a map (`DXDP_TCP_SWITCHES` for the published ports', in `DXDP_EGRESS_TIMEOUTS`
/// for egress), so that a switch an operator turns later is followed, not frozen at load.
pub mod switch {
    /// `nf_conntrack_tcp_be_liberal`: only RSTs out of the window are INVALID.
    pub const BE_LIBERAL: u32 = 1 << 0;
    /// `nf_conntrack_tcp_ignore_invalid_rst`: an RST out of the window is not INVALID either.
    pub const IGNORE_INVALID_RST: u32 = 1 << 1;
}

/// TCP header flag bits, and the flag combinations conntrack takes (`tcp_error`'s check), as
/// the published ports' fast path reads them.
pub use crate::ingress::{
    TCP_ACK, TCP_CWR, TCP_ECE, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN, TCP_URG,
    tcp_flags_valid as flags_valid,
};

/// The most option bytes a TCP header carries.
pub const TCP_OPTIONS_MAX: usize = 40;
/// `MAXACKWINCONST`: the least of the window below the receiver's end an ACK may fall in.
const MAXACKWINCONST: u32 = 66_000;
const TCPOPT_EOL: u8 = 0;
const TCPOPT_NOP: u8 = 1;
const TCPOPT_WINDOW: u8 = 3;
const TCPOLEN_WINDOW: usize = 3;
const TCPOPT_SACK_PERM: u8 = 4;
const TCPOLEN_SACK_PERM: usize = 2;
/// `TCP_MAX_WSCALE`: the largest window scale conntrack takes from a SYN.
const TCP_MAX_WSCALE: u8 = 14;
const TCPOPT_SACK: u8 = 5;
const TCPOPT_TIMESTAMP: u8 = 8;
const TCPOLEN_TIMESTAMP: u8 = 10;
const TCPOLEN_SACK_BASE: usize = 2;
const TCPOLEN_SACK_PERBLOCK: usize = 8;

/// Default size of the fast path's window copies (`DXDP_EGRESS_WINDOWS`): when full, a new
/// connection is simply not taken over.
pub const DEFAULT_MAX_WINDOWS: u32 = 65_536;

/// Size of the closed connections' copies (`DXDP_EGRESS_CLOSED_WINDOWS`, least recently used
/// pushed out): a closed connection's entry lives on for conntrack's TIME_WAIT (two minutes),
/// so this holds what closes in two minutes at about 130 connections a second; one pushed out
/// earlier only leaves its late segments to conntrack, as before the map.
pub const DEFAULT_MAX_CLOSED_WINDOWS: u32 = 16_384;

/// One direction's `struct ip_ct_tcp_state`, as conntrack keeps it, and the fast path's own
/// note of a FIN (`fin`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSide {
    pub td_end: u32,
    pub td_maxend: u32,
    pub td_maxwin: u32,
    pub td_maxack: u32,
    pub td_scale: u8,
    pub flags: u8,
    /// 1 once this side's FIN was carried (not conntrack's: its entry is not told).
    pub fin: u8,
    /// 1 while the connection's last segment let through in window was this side's and an
    /// ACK without SYN, FIN or RST (conntrack's `last_index == TCP_ACK_SET`, `last_dir`):
    /// an RST right after it, at its end, is the end of a train ([`rst_ends`]).
    pub last_ack: u8,
}

/// The fast path's copy of a carried connection's windows (`DXDP_EGRESS_WINDOWS`' value):
/// `seen[0]` the container's side (conntrack's original direction), `seen[1]` the server's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpWindow {
    /// Which conntrack entry the copy was taken from (its address): a copy of another entry
    /// of the same tuple (the connection ended, a new one reuses its ports) is taken again.
    pub conn: u64,
    pub seen: [TcpSide; 2],
}

/// A closed connection's copy (`DXDP_EGRESS_CLOSED_WINDOWS`' value): its late segments (a
/// retransmitted FIN, the last segment of a side whose FIN came first) are judged on it, as
/// conntrack's TIME_WAIT judges them, not on the windows conntrack's entry still holds from
/// when the fast path took the connection over, which would find them INVALID and leave them
/// untranslated to the host's stack, which resets the connection.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClosedWindow {
    pub window: TcpWindow,
    /// The entry's own `seen[].td_end` when the copy closed: with `window.conn`, what tells
    /// this entry from a later one of the same tuple at the same address (the slab reuses
    /// it), whose sequence numbers differ.
    pub ct_ends: [u32; 2],
}

/// The window copies' key: a connection's original tuple, in network order as the
/// container's packets hold it; addresses of 16 bytes, IPv4 v4-mapped (`::ffff:a.b.c.d`), so
/// that one map and one judgement serve both families.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WindowKey {
    pub container: [u8; 16],
    pub server: [u8; 16],
    pub container_port: u16,
    pub server_port: u16,
}

/// The key of the copies' maps before IPv6 (`names::LEGACY_WINDOWS`): IPv4 addresses only.
/// Read only to hand those copies' connections back after an upgrade.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LegacyWindowKey {
    pub container: u32,
    pub server: u32,
    pub container_port: u16,
    pub server_port: u16,
}

impl From<LegacyWindowKey> for WindowKey {
    fn from(k: LegacyWindowKey) -> Self {
        Self {
            container: v4_mapped(k.container.to_ne_bytes()),
            server: v4_mapped(k.server.to_ne_bytes()),
            container_port: k.container_port,
            server_port: k.server_port,
        }
    }
}

/// `::ffff:a.b.c.d`, for an IPv4 address as a packet holds it.
#[inline(always)]
pub const fn v4_mapped(addr: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, addr[0], addr[1], addr[2], addr[3],
    ]
}

const _: () = {
    assert!(core::mem::size_of::<TcpSide>() == 20);
    assert!(core::mem::size_of::<TcpWindow>() == 48);
    assert!(core::mem::size_of::<ClosedWindow>() == 56);
    assert!(core::mem::size_of::<WindowKey>() == 36);
    assert!(core::mem::size_of::<LegacyWindowKey>() == 12);
};

/// What a TCP segment needs for the window check, in host order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    pub seq: u32,
    pub ack: u32,
    /// The highest right edge of the SACK blocks if the receiver allowed SACK, else `ack`
    /// ([`highest_sack`]).
    pub sack: u32,
    /// `seq` + payload length + SYN + FIN (`segment_seq_plus_len`).
    pub end: u32,
    pub win: u16,
    pub flags: u8,
}

impl Segment {
    /// The segment of a header with `flags`, `payload` bytes after its options.
    pub const fn new(seq: u32, ack: u32, win: u16, flags: u8, payload: u32) -> Self {
        let end = seq
            .wrapping_add(payload)
            .wrapping_add((flags & TCP_SYN != 0) as u32)
            .wrapping_add((flags & TCP_FIN != 0) as u32);
        Self {
            seq,
            ack,
            sack: ack,
            end,
            win,
            flags,
        }
    }
}

/// What conntrack does with a segment of an ESTABLISHED connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// In window (or liberal): the state moves on, the entry's timeout is refreshed.
    Accept,
    /// `NFCT_TCP_IGNORE`: let through untracked (a retransmission below the window, an old
    /// ACK): the packet keeps its entry and its NAT, the timeout is not refreshed.
    Ignore,
    /// `NFCT_TCP_INVALID` (or an invalid header or RST): no entry, so no NAT; Docker's rules
    /// decide what becomes of it.
    Invalid,
}

/// `before()` of include/net/tcp.h: `a` comes before `b` in sequence space.
#[inline(always)]
pub const fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `after()`: `a` comes after `b`.
#[inline(always)]
pub const fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// The option byte at `i`, 0 (end of list) past the buffer: an index the compiler need not
/// prove in bounds (a panic's call would fail the verifier).
#[inline(always)]
const fn byte(options: &[u8; TCP_OPTIONS_MAX], i: usize) -> u8 {
    if i < TCP_OPTIONS_MAX { options[i] } else { 0 }
}

/// `tcp_sack`: the highest right edge of the SACK blocks among the `len` option bytes of
/// `options` (`ack` if none is after it). The timestamp-only layout is answered at once.
#[inline(always)]
pub const fn highest_sack(options: &[u8; TCP_OPTIONS_MAX], len: usize, ack: u32) -> u32 {
    let mut sack = ack;
    if len == 12
        && byte(options, 0) == TCPOPT_NOP
        && byte(options, 1) == TCPOPT_NOP
        && byte(options, 2) == TCPOPT_TIMESTAMP
        && byte(options, 3) == TCPOLEN_TIMESTAMP
    {
        return sack;
    }
    let mut i = 0;
    while i < TCP_OPTIONS_MAX && i < len {
        let opcode = byte(options, i);
        if opcode == TCPOPT_EOL {
            return sack;
        }
        if opcode == TCPOPT_NOP {
            i += 1;
            continue;
        }
        if i + 1 >= len || i + 1 >= TCP_OPTIONS_MAX {
            return sack;
        }
        let opsize = byte(options, i + 1) as usize;
        if opsize < 2 || opsize > len - i {
            return sack;
        }
        if opcode == TCPOPT_SACK
            && opsize >= TCPOLEN_SACK_BASE + TCPOLEN_SACK_PERBLOCK
            && (opsize - TCPOLEN_SACK_BASE).is_multiple_of(TCPOLEN_SACK_PERBLOCK)
        {
            // Each block is a left and a right edge; the right one counts.
            let mut at = i + TCPOLEN_SACK_BASE + 4;
            while at + 4 <= i + opsize && at + 4 <= TCP_OPTIONS_MAX {
                let edge = u32::from_be_bytes([
                    byte(options, at),
                    byte(options, at + 1),
                    byte(options, at + 2),
                    byte(options, at + 3),
                ]);
                if after(edge, sack) {
                    sack = edge;
                }
                at += TCPOLEN_SACK_PERBLOCK;
            }
            return sack;
        }
        i += opsize;
    }
    sack
}

/// `tcp_options`: what a SYN's `len` option bytes tell of its sender's side: the window scale
/// (capped at 14) and whether it permits SACK. A SYN without options leaves `side` as it is.
#[inline(always)]
pub fn syn_options(side: &mut TcpSide, options: &[u8; TCP_OPTIONS_MAX], len: usize) {
    if len == 0 {
        return;
    }
    side.td_scale = 0;
    side.flags &= FLAG_BE_LIBERAL;
    let mut i = 0;
    while i < TCP_OPTIONS_MAX && i < len {
        let opcode = byte(options, i);
        if opcode == TCPOPT_EOL {
            return;
        }
        if opcode == TCPOPT_NOP {
            i += 1;
            continue;
        }
        if i + 1 >= len {
            return;
        }
        let opsize = byte(options, i + 1) as usize;
        // "Silly options", and options cut short, end the parse.
        if opsize < 2 || opsize > len - i {
            return;
        }
        if opcode == TCPOPT_SACK_PERM && opsize == TCPOLEN_SACK_PERM {
            side.flags |= FLAG_SACK_PERM;
        } else if opcode == TCPOPT_WINDOW && opsize == TCPOLEN_WINDOW {
            let scale = byte(options, i + 2);
            side.td_scale = if scale > TCP_MAX_WSCALE {
                TCP_MAX_WSCALE
            } else {
                scale
            };
            side.flags |= FLAG_WINDOW_SCALE;
        }
        i += opsize;
    }
}

/// `tcp_new` and the window check of the SYN that follows it: `window` becomes the copy of a
/// connection conntrack would start from the client's SYN `segment` (its options in `options`,
/// `len` bytes of them). The server's side stays unknown until its SYN-ACK ([`answer`]).
#[inline(always)]
pub fn open(
    window: &mut TcpWindow,
    segment: &Segment,
    options: &[u8; TCP_OPTIONS_MAX],
    len: usize,
    be_liberal: bool,
) {
    *window = TcpWindow::default();
    let [client, server] = &mut window.seen;
    start(client, segment, options, len);
    in_window(client, server, segment, be_liberal);
}

/// A side as its SYN (or SYN-ACK) `segment` starts it: its end, the SYN's window (never
/// scaled), and what its options offer.
#[inline(always)]
fn start(side: &mut TcpSide, segment: &Segment, options: &[u8; TCP_OPTIONS_MAX], len: usize) {
    side.td_end = segment.end;
    side.td_maxend = segment.end;
    side.td_maxwin = if segment.win == 0 {
        1
    } else {
        segment.win as u32
    };
    syn_options(side, options, len);
}

/// Whether a SYN in direction `dir` (re)starts its sender's side of `window`, as
/// `tcp_in_window` has it: the side is unknown yet (a server's first SYN-ACK), or, while the
/// connection is `opening`, the SYN comes after what the side sent before (a sender that
/// started again with another sequence number).
#[inline(always)]
pub const fn restarts(window: &TcpWindow, dir: usize, segment: &Segment, opening: bool) -> bool {
    let sender = &window.seen[if dir == 0 { 0 } else { 1 }];
    segment.flags & TCP_SYN != 0
        && (sender.td_maxwin == 0 || (opening && after(segment.end, sender.td_end)))
}

/// `tcp_init_sender`, then the rest of `tcp_in_window`: [`init_sender`], then
/// [`answer_started`].
#[inline(always)]
pub fn answer(
    window: &mut TcpWindow,
    dir: usize,
    segment: &Segment,
    options: &[u8; TCP_OPTIONS_MAX],
    len: usize,
    be_liberal: bool,
) -> Verdict {
    let unknown = init_sender(window, dir, segment, options, len);
    answer_started(window, dir, segment, unknown, be_liberal)
}

/// `tcp_init_sender`: the SYN (or SYN-ACK) `segment` in direction `dir` starts its sender's
/// side of `window` (see [`restarts`]), with what its `len` option bytes offer; `true` where
/// the side was unknown before (a server's first SYN-ACK).
#[inline(always)]
pub fn init_sender(
    window: &mut TcpWindow,
    dir: usize,
    segment: &Segment,
    options: &[u8; TCP_OPTIONS_MAX],
    len: usize,
) -> bool {
    let sender = &mut window.seen[if dir == 0 { 0 } else { 1 }];
    let unknown = sender.td_maxwin == 0;
    start(sender, segment, options, len);
    unknown
}

/// The rest of `tcp_in_window` after [`init_sender`] (`unknown` what it returned): window
/// scaling holds only where both sides offered it, which the server's answer settles; then
/// the SYN is judged in the window.
#[inline(always)]
pub fn answer_started(
    window: &mut TcpWindow,
    dir: usize,
    segment: &Segment,
    unknown: bool,
    be_liberal: bool,
) -> Verdict {
    let [original, reply] = &mut window.seen;
    let (sender, receiver) = if dir == 0 {
        (original, reply)
    } else {
        (reply, original)
    };
    if dir == 1
        && !(sender.flags & FLAG_WINDOW_SCALE != 0 && receiver.flags & FLAG_WINDOW_SCALE != 0)
    {
        sender.td_scale = 0;
        receiver.td_scale = 0;
    }
    if segment.flags & TCP_ACK == 0 && (unknown || dir == 1) {
        // A simultaneous open's SYN from the server's side.
        return Verdict::Accept;
    }
    in_window(sender, receiver, segment, be_liberal)
}

/// Whether an RST conntrack lets through in direction `dir` closes the connection
/// (`nf_conntrack_tcp_packet`, the move to `TCP_CONNTRACK_CLOSE`), judged before the segment
/// moves the copy on: where the connection is not established yet, where the receiver has
/// acknowledged nothing (no `MAXACK_SET`), where the RST's sequence number is exactly what the
/// receiver acknowledged, or where it ends a train (the sender's last segment was an ACK and
/// the RST sits at its end). Any other RST in the window keeps the connection ESTABLISHED,
/// "to allow a possible challenge ACK": its receiver answers with an ACK, which conntrack
/// translates, so the copy must go on too.
///
/// The train's end is the sender's `td_end`; conntrack's `last_end` differs from it only
/// where that last ACK was a retransmission below the sender's end.
#[inline(always)]
pub const fn rst_ends(window: &TcpWindow, dir: usize, seq: u32, established: bool) -> bool {
    let (sender, receiver) = if dir == 0 {
        (&window.seen[0], &window.seen[1])
    } else {
        (&window.seen[1], &window.seen[0])
    };
    !established
        || receiver.flags & FLAG_MAXACK_SET == 0
        || seq == receiver.td_maxack
        || (sender.last_ack != 0 && seq == sender.td_end)
}

/// Conntrack's judgement of one segment of a connection a fast path carries (published ports
/// and outbound connections alike): its verdict, and whether it is an RST that closes the
/// connection, after which the fast path's copy of the windows is gone and the connection is
/// left to conntrack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Judgement {
    pub verdict: Verdict,
    pub closes: bool,
}

impl Judgement {
    /// A verdict on a segment that closes nothing.
    #[inline(always)]
    pub const fn kept(verdict: Verdict) -> Self {
        Self {
            verdict,
            closes: false,
        }
    }

    /// `verdict` on a segment, `resets` being whether it is an RST [`rst_ends`] found closing
    /// (judged before the segment moved the copy on): an RST conntrack accepts closes the
    /// connection; while the connection is `opening`, so does any RST it does not find
    /// INVALID (its state machine does not wait for the window check there).
    #[inline(always)]
    pub const fn of_rst(verdict: Verdict, resets: bool, opening: bool) -> Self {
        let closes = resets
            && (matches!(verdict, Verdict::Accept)
                || opening && !matches!(verdict, Verdict::Invalid));
        Self { verdict, closes }
    }
}

/// The RST check of `nf_conntrack_tcp_packet` for an ESTABLISHED entry: an RST whose sequence
/// number is below what the other side has acknowledged is INVALID, liberal or not (unless
/// `nf_conntrack_tcp_ignore_invalid_rst`).
#[inline(always)]
pub const fn rst_invalid(receiver: &TcpSide, seq: u32, ignore_invalid_rst: bool) -> bool {
    receiver.flags & FLAG_MAXACK_SET != 0 && before(seq, receiver.td_maxack) && !ignore_invalid_rst
}

/// `MAXACKWINDOW(sender)`.
#[inline(always)]
const fn max_ack_window(sender: &TcpSide) -> u32 {
    if sender.td_maxwin > MAXACKWINCONST {
        sender.td_maxwin
    } else {
        MAXACKWINCONST
    }
}

/// `tcp_in_window` for a segment of an ESTABLISHED entry whose sender side is known
/// (`td_maxwin != 0`; where it is 0, conntrack initialises it from the packet: the caller
/// leaves such a segment to conntrack). Updates `sender` and `receiver` exactly where
/// conntrack would; `be_liberal` is `nf_conntrack_tcp_be_liberal`.
#[inline(always)]
pub fn in_window(
    sender: &mut TcpSide,
    receiver: &mut TcpSide,
    segment: &Segment,
    be_liberal: bool,
) -> Verdict {
    let liberal = be_liberal || sender.flags & FLAG_BE_LIBERAL != 0;
    // `nf_tcp_store_invalid`: liberal tracking lets anything through, without an update.
    let refused = |verdict: Verdict| if liberal { Verdict::Accept } else { verdict };
    let (seq, end) = (segment.seq, segment.end);
    let (mut ack, mut sack) = (segment.ack, segment.sack);
    if segment.flags & TCP_ACK == 0 {
        // No ACK: pretend it was set and fine.
        ack = receiver.td_end;
        sack = receiver.td_end;
    } else if segment.flags & TCP_RST != 0 && ack == 0 {
        // Broken stacks that set ACK on an RST with a zero ack.
        ack = receiver.td_end;
        sack = receiver.td_end;
    }
    let max_ack_win = max_ack_window(sender);
    if !before(seq, sender.td_maxend.wrapping_add(1)) {
        let overshot = end.wrapping_sub(sender.td_maxend).wrapping_add(1);
        let ack_ok = after(
            sack,
            receiver.td_end.wrapping_sub(max_ack_win).wrapping_sub(1),
        );
        let in_recv_win = receiver.td_maxwin != 0
            && after(
                end,
                sender
                    .td_end
                    .wrapping_sub(receiver.td_maxwin)
                    .wrapping_sub(1),
            );
        if in_recv_win
            && ack_ok
            && overshot <= receiver.td_maxwin
            && before(sack, receiver.td_end.wrapping_add(1))
        {
            // More than the window allows, by less than a window: ignored, but its end is
            // recorded so that the ACK of it is in window.
            sender.td_end = end;
            sender.flags |= FLAG_DATA_UNACKNOWLEDGED;
            return refused(Verdict::Ignore);
        }
        return refused(Verdict::Invalid);
    }
    if !before(sack, receiver.td_end.wrapping_add(1)) {
        return refused(Verdict::Invalid);
    }
    let in_recv_win = receiver.td_maxwin == 0
        || after(
            end,
            sender
                .td_end
                .wrapping_sub(receiver.td_maxwin)
                .wrapping_sub(1),
        );
    if !in_recv_win {
        return refused(Verdict::Ignore);
    }
    if !after(
        sack,
        receiver.td_end.wrapping_sub(max_ack_win).wrapping_sub(1),
    ) {
        return refused(Verdict::Ignore);
    }
    let mut win = segment.win as u32;
    if segment.flags & TCP_SYN == 0 {
        win = win.wrapping_shl(sender.td_scale as u32);
    }
    let swin = win.wrapping_add(sack.wrapping_sub(ack));
    if sender.td_maxwin < swin {
        sender.td_maxwin = swin;
    }
    if after(end, sender.td_end) {
        sender.td_end = end;
        sender.flags |= FLAG_DATA_UNACKNOWLEDGED;
    }
    if segment.flags & TCP_ACK != 0 {
        if sender.flags & FLAG_MAXACK_SET == 0 {
            sender.td_maxack = ack;
            sender.flags |= FLAG_MAXACK_SET;
        } else if after(ack, sender.td_maxack) {
            sender.td_maxack = ack;
        }
    }
    if receiver.td_maxwin != 0 && after(end, sender.td_maxend) {
        receiver.td_maxwin = receiver
            .td_maxwin
            .wrapping_add(end.wrapping_sub(sender.td_maxend));
    }
    if after(sack.wrapping_add(win), receiver.td_maxend.wrapping_sub(1)) {
        receiver.td_maxend = sack.wrapping_add(win);
        if win == 0 {
            receiver.td_maxend = receiver.td_maxend.wrapping_add(1);
        }
    }
    if ack == receiver.td_end {
        receiver.flags &= !FLAG_DATA_UNACKNOWLEDGED;
    }
    Verdict::Accept
}

/// The whole of conntrack's judgement of a segment of an ESTABLISHED entry in direction
/// `dir` (0 original, 1 reply) against `window`: the header's flags, the RST check, then
/// [`in_window`]. `None` where conntrack would (re)learn the sender's side from the packet
/// (`td_maxwin == 0`): the caller leaves that segment to conntrack.
#[inline(always)]
pub fn judge(
    window: &mut TcpWindow,
    dir: usize,
    segment: &Segment,
    be_liberal: bool,
    ignore_invalid_rst: bool,
) -> Option<Verdict> {
    let [original, reply] = &mut window.seen;
    let (sender, receiver) = if dir == 0 {
        (original, reply)
    } else {
        (reply, original)
    };
    if sender.td_maxwin == 0 {
        return None;
    }
    if !flags_valid(segment.flags) {
        return Some(Verdict::Invalid);
    }
    if segment.flags & TCP_RST != 0 && rst_invalid(receiver, segment.seq, ignore_invalid_rst) {
        return Some(Verdict::Invalid);
    }
    let verdict = in_window(sender, receiver, segment, be_liberal);
    if verdict == Verdict::Accept {
        if segment.flags & TCP_FIN != 0 {
            sender.fin = 1;
        }
        // conntrack's `last_index`: this segment's kind, from this side.
        let ack_only = segment.flags & (TCP_SYN | TCP_FIN | TCP_RST | TCP_ACK) == TCP_ACK;
        sender.last_ack = ack_only as u8;
        receiver.last_ack = 0;
    }
    Some(verdict)
}

/// Whether `segment`, just let through in direction `dir`, ends the connection: both sides
/// sent a FIN and this, itself no FIN, acknowledges the other's (the last ACK; conntrack would
/// go TIME_WAIT): the fast path drops its copy then, so that copies do not outlive their
/// connections.
#[inline(always)]
pub const fn closes(window: &TcpWindow, dir: usize, segment: &Segment) -> bool {
    let (sender, receiver) = if dir == 0 {
        (&window.seen[0], &window.seen[1])
    } else {
        (&window.seen[1], &window.seen[0])
    };
    sender.fin != 0
        && receiver.fin != 0
        && segment.flags & (TCP_ACK | TCP_FIN) == TCP_ACK
        && segment.ack == receiver.td_end
}

pub mod merge;

#[cfg(test)]
mod tests;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), Copy, no implicit padding (sizes asserted above).
    unsafe impl aya::Pod for super::WindowKey {}
    unsafe impl aya::Pod for super::LegacyWindowKey {}
    unsafe impl aya::Pod for super::TcpWindow {}
    unsafe impl aya::Pod for super::ClosedWindow {}
}
