//! The published ports' TCP connections held to the windows conntrack would hold them to: the
//! fast path carries their whole life, handshake included, so conntrack never sees them, and
//! the check it would have made is made here, on a copy of its `proto.tcp.seen[]` kept from
//! the client's SYN on (`dxdp_common::tcp_window`, unit-tested against
//! `nf_conntrack_proto_tcp.c`). A segment conntrack would mark INVALID is one Docker's path
//! never delivers (no entry, so no DNAT or reverse NAT): the programs drop it.
use core::ffi::c_void;

use aya_ebpf::{
    helpers::generated::bpf_skb_load_bytes,
    macros::map,
    maps::{Array, LruHashMap, PerCpuArray},
    programs::TcContext,
};
use dxdp_common::{
    ingress::{DEFAULT_MAX_FLOWS, FlowKey, side_table_size},
    tcp_window::{
        self, FLAG_SACK_PERM, Judgement, Segment, TCP_OPTIONS_MAX, TCP_RST, TCP_SYN, TcpWindow,
        Verdict, switch,
    },
};

use crate::window_merge;

/// The copies of established connections, by their key in `DXDP_FLOWS`, and as many. A
/// connection whose copy was pushed out goes to Docker's path at its client's next segment.
#[map(name = "DXDP_TCP_WINDOWS")]
static WINDOWS: LruHashMap<FlowKey, TcpWindow> = LruHashMap::pinned(DEFAULT_MAX_FLOWS, 0);

/// The copies of connections being opened, apart for the reason `DXDP_OPENING` is apart from
/// `DXDP_FLOWS`: a flood of forged SYNs can push out only each other's.
#[map(name = "DXDP_TCP_OPENING_WINDOWS")]
static OPENING_WINDOWS: LruHashMap<FlowKey, TcpWindow> =
    LruHashMap::pinned(side_table_size(DEFAULT_MAX_FLOWS), 0);

/// What one segment's check works on: 200 bytes the callers' stacks have no room for.
#[repr(C)]
pub(crate) struct Work {
    /// seq, ack, data offset, flags and window, as the header holds them.
    header: [u8; 12],
    /// The option bytes the header has (the rest is stale).
    options: [u8; TCP_OPTIONS_MAX],
    segment: Segment,
    /// A new connection's copy, before it goes into the table.
    window: TcpWindow,
    /// The connection's copy as the segment found it, and as judging the segment left it:
    /// what `window_merge` merges back (`check`).
    before: TcpWindow,
    mine: TcpWindow,
    /// The segment's judgement while the copy is merged back (see `check`).
    judged: Judgement,
}

#[map(name = "DXDP_TCP_WORK")]
static WORK: PerCpuArray<Work> = PerCpuArray::with_max_entries(1, 0);

/// `nf_conntrack_tcp_be_liberal` and `nf_conntrack_tcp_ignore_invalid_rst` of the host's
/// namespace, where Docker's DNAT runs (`tcp_window::switch` bits). A map, not load-time
/// constants: a switch turned off after the programs were attached must not leave them
/// carrying what conntrack now finds INVALID. Written before the programs are attached or
/// swapped in, and by the watch's passes (`dxdp::datapath::ports`).
#[map(name = "DXDP_TCP_SWITCHES")]
static SWITCHES: Array<u32> = Array::pinned(1, 0);

#[inline(always)]
fn conntrack_switches() -> u32 {
    SWITCHES.get(0).copied().unwrap_or(0)
}

/// Which way a segment goes, in conntrack's terms (the client opened the connection), and
/// whether its connection is still opening (the handshake not completed), when a later SYN
/// starts its sender's side again. One argument, as a BPF function takes five at most.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct Way(u8);

impl Way {
    const FROM_CONTAINER: u8 = 1;
    const OPENING: u8 = 2;

    #[inline(always)]
    pub(crate) const fn from_client(opening: bool) -> Self {
        Self(if opening { Self::OPENING } else { 0 })
    }

    #[inline(always)]
    pub(crate) const fn from_container(opening: bool) -> Self {
        Self(Self::FROM_CONTAINER | Self::from_client(opening).0)
    }

    /// conntrack's direction: 0 original (the client's), 1 reply.
    #[inline(always)]
    const fn dir(self) -> usize {
        (self.0 & Self::FROM_CONTAINER) as usize
    }

    #[inline(always)]
    const fn opening(self) -> bool {
        self.0 & Self::OPENING != 0
    }
}

/// This CPU's work area, with the segment of the TCP header at `l4` (in a layer-4 message of
/// `l4_len` bytes) read into it, and how many option bytes the header has; `None` for a
/// header cut short (`tcp_error`: INVALID) or one that cannot be read.
#[inline(always)]
fn read(ctx: &TcContext, l4: usize, l4_len: usize) -> Option<(&'static mut Work, usize)> {
    // SAFETY: this CPU's copy, valid for this invocation; one segment's at a time.
    let work = unsafe { &mut *WORK.get_ptr_mut(0)? };
    // SAFETY: `header` is 12 bytes of map memory.
    let read = unsafe {
        bpf_skb_load_bytes(
            ctx.skb.skb as *mut _,
            (l4 + 4) as u32,
            work.header.as_mut_ptr() as *mut c_void,
            12,
        )
    };
    if read < 0 {
        return None;
    }
    let h = &work.header;
    let doff = (h[8] >> 4) as usize * 4;
    if doff < 20 || l4_len < doff {
        return None;
    }
    work.segment = Segment::new(
        u32::from_be_bytes([h[0], h[1], h[2], h[3]]),
        u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
        u16::from_be_bytes([h[10], h[11]]),
        h[9],
        (l4_len - doff) as u32,
    );
    Some((work, doff - 20))
}

/// Reads the `len` option bytes of the TCP header at `l4` into `options`.
#[inline(always)]
fn read_options(
    ctx: &TcContext,
    l4: usize,
    len: usize,
    options: &mut [u8; TCP_OPTIONS_MAX],
) -> Option<()> {
    if len == 0 {
        return Some(());
    }
    if len > TCP_OPTIONS_MAX {
        return None;
    }
    // SAFETY: `options` is 40 bytes of map memory, `len` at most that.
    let read = unsafe {
        bpf_skb_load_bytes(
            ctx.skb.skb as *mut _,
            (l4 + 20) as u32,
            options.as_mut_ptr() as *mut c_void,
            len as u32,
        )
    };
    (read >= 0).then_some(())
}

/// Starts the copy of a connection from the client's SYN (the TCP header at `l4`): what
/// `tcp_new` records. `false` where it cannot be kept, and the connection must not take the
/// fast path.
#[inline(always)]
// The copy goes to the map from map memory, by reference: by value it would cross the stack.
#[allow(clippy::needless_borrows_for_generic_args)]
pub(crate) fn open(ctx: &TcContext, l4: usize, l4_len: usize, flow: &FlowKey) -> bool {
    let Some((work, len)) = read(ctx, l4, l4_len) else {
        return false;
    };
    if read_options(ctx, l4, len, &mut work.options).is_none() {
        return false;
    }
    let be_liberal = conntrack_switches() & switch::BE_LIBERAL != 0;
    tcp_window::open(
        &mut work.window,
        &work.segment,
        &work.options,
        len,
        be_liberal,
    );
    OPENING_WINDOWS.insert(flow, &work.window, 0).is_ok()
}

/// Moves the copy of the connection `flow`, just established, to the established ones' table;
/// `false` where it has none, or the table cannot take it.
#[inline(always)]
#[allow(clippy::needless_borrows_for_generic_args)] // As in `open`.
pub(crate) fn establish(flow: &FlowKey) -> bool {
    let Some(window) = OPENING_WINDOWS.get_ptr(flow) else {
        return false;
    };
    // SAFETY: a map value, valid for this invocation; the copy goes from map memory to map.
    if WINDOWS.insert(flow, unsafe { &*window }, 0).is_err() {
        return false;
    }
    let _ = OPENING_WINDOWS.remove(flow);
    true
}

/// conntrack's verdict on the segment at `l4` of the connection `flow`, going `way`, on the
/// copy, which moves on as conntrack's windows would; `None` if the connection has no copy
/// (it began before the fast path kept them, or the table pushed it out). An RST that closes
/// the connection ends the copy (one beside what its receiver acknowledged keeps it, as
/// conntrack keeps the connection for the challenge ACK); a connection whose both FINs were
/// acknowledged keeps it ([`closed`]).
///
/// An established connection's segments are judged on a snapshot of its copy and only what
/// they changed is merged back (`window_merge`, as the egress programs do): its two sides'
/// segments are judged on both CPUs at once (a sender's process context on one, the segments
/// its ACKs clock out from the softirq on the other), and a store of a whole judged copy could
/// put back a bound the other CPU had just moved on, which made the receiver's next ACK or the
/// sender's next segment look out of the window: refused, and a stall until a retransmission
/// (`ingress::parallel_transfers_on_two_cpus_never_have_a_segment_refused`: 4 refused in 24
/// transfers judged in place, over a thousand on a snapshot written back whole, none merged).
/// An opening connection's copy is written back whole: its handshake moves
/// fields the merge takes as fixed (the SYN-ACK's scale), and its segments come one at a time.
#[inline(always)]
pub(crate) fn check(
    ctx: &TcContext,
    l4: usize,
    l4_len: usize,
    flow: &FlowKey,
    way: Way,
) -> Option<Judgement> {
    let (dir, opening) = (way.dir(), way.opening());
    // Each map by name: a map pointer chosen at run time would keep the verifier from
    // pruning the two stages' paths into one.
    let shared = if opening {
        OPENING_WINDOWS.get_ptr_mut(flow)
    } else {
        WINDOWS.get_ptr_mut(flow)
    }?;
    let Some((work, len)) = read(ctx, l4, l4_len) else {
        return Some(Judgement::kept(Verdict::Invalid));
    };
    // SAFETY: a map value, valid for this invocation; copied whole into this CPU's work area.
    work.before = unsafe { *shared };
    work.mine = work.before;
    let judgement = judge(ctx, l4, len, work, dir, opening)?;
    // Through map memory, which the verifier does not follow: the merge is then walked once
    // for all the judgements a segment can have, not once for each (the reply program would
    // pass a million instructions).
    // SAFETY: a field of this CPU's work area, aligned.
    unsafe { core::ptr::write_volatile(&mut work.judged, judgement) };
    // SAFETY: as above; `shared` is 8-aligned, as every map value is.
    unsafe {
        if opening {
            *shared = work.mine;
        } else {
            window_merge::publish(shared, &work.before, &work.mine);
        }
    }
    // SAFETY: written just above, by this invocation.
    let judgement = unsafe { core::ptr::read_volatile(&work.judged) };
    if judgement.closes {
        forget(flow);
    }
    Some(judgement)
}

/// [`check`]'s judgement of the segment read into `work` (with `len` option bytes) on
/// `work.mine`, moved on as conntrack would move its windows; `None` where the options cannot
/// be read.
#[inline(always)]
fn judge(
    ctx: &TcContext,
    l4: usize,
    len: usize,
    work: &mut Work,
    dir: usize,
    opening: bool,
) -> Option<Judgement> {
    let switches = conntrack_switches();
    let be_liberal = switches & switch::BE_LIBERAL != 0;
    let window = &mut work.mine;
    let segment = &mut work.segment;
    if segment.flags & TCP_SYN != 0 {
        if tcp_window::restarts(window, dir, segment, opening) {
            read_options(ctx, l4, len, &mut work.options)?;
            let unknown = tcp_window::init_sender(window, dir, segment, &work.options, len);
            forget_what_the_options_set(window, dir);
            let verdict = tcp_window::answer_started(window, dir, segment, unknown, be_liberal);
            return Some(Judgement::kept(verdict));
        }
        if !opening {
            // A SYN on an established connection: conntrack ignores it (lets it through,
            // untracked), and the receiver answers it with an ACK.
            return Some(Judgement::kept(Verdict::Ignore));
        }
    }
    let receiver = window.seen[1 - dir].flags;
    if receiver & FLAG_SACK_PERM != 0 && len > 0 {
        read_options(ctx, l4, len, &mut work.options)?;
        segment.sack = tcp_window::highest_sack(&work.options, len, segment.ack);
    }
    // Judged before the segment moves the copy on, as conntrack judges it: an RST beside what
    // its receiver acknowledged keeps the connection for the challenge ACK it draws.
    let resets =
        segment.flags & TCP_RST != 0 && tcp_window::rst_ends(window, dir, segment.seq, !opening);
    let verdict = tcp_window::judge(
        window,
        dir,
        segment,
        be_liberal,
        switches & switch::IGNORE_INVALID_RST != 0,
    )
    // The container's side is unknown until its SYN-ACK: conntrack ignores what comes first.
    .unwrap_or(Verdict::Ignore);
    Some(Judgement::of_rst(verdict, resets, opening))
}

/// Reads the side a SYN started back from map memory, which the verifier does not follow.
/// Parsing the SYN's options leaves each combination of what they offer (window scale, SACK)
/// in registers as a known value, and the verifier walked the rest of the judgement, the merge
/// and the program after it once for each: dxdp_reply took 847k of the million instructions
/// with them known, 233k with them read back (307k with the whole window read back).
#[inline(always)]
fn forget_what_the_options_set(window: &mut TcpWindow, dir: usize) {
    let side = &mut window.seen[if dir == 0 { 0 } else { 1 }];
    // SAFETY: `side` is a live reference into this CPU's work area; read whole, aligned.
    let read = unsafe { core::ptr::read_volatile(side) };
    *side = read;
}

/// Whether both sides of the connection sent a FIN the fast path carried: a SYN then opens a
/// new connection on the same ports (conntrack: TIME_WAIT to SYN_SENT).
#[inline(always)]
pub(crate) fn closed(flow: &FlowKey) -> bool {
    // SAFETY: a map value, valid for this invocation; plain loads.
    WINDOWS
        .get_ptr(flow)
        .is_some_and(|w| unsafe { (*w).seen[0].fin != 0 && (*w).seen[1].fin != 0 })
}

/// Drops the copy of the connection `flow`, established or opening.
#[inline(always)]
pub(crate) fn forget(flow: &FlowKey) {
    let _ = WINDOWS.remove(flow);
    let _ = OPENING_WINDOWS.remove(flow);
}
