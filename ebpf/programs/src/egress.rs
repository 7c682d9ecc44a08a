//! Outbound connections of containers straight to the NIC, conntrack the only NAT table
//! (issue 36, docs/egress.md). An object of its own (`dxdp-egress`): its kfunc calls need the
//! loader's resolution (`dxdp::datapath::kfunc`), which the datapath's object must not depend on.
//!
//! - `dxdp_egress` (TCX ingress on an enabled container's host veth): an IPv4 TCP or UDP packet
//!   routed to the gateway, of a connection conntrack holds as established and answered (its
//!   first packets took Docker's path, so FORWARD, MASQUERADE and conntrack decided and
//!   recorded), gets the source its conntrack entry's reply tuple names (the masqueraded
//!   address and port), a decremented TTL, and leaves by `bpf_redirect_neigh` out of the NIC
//!   the host routes it to.
//! - `dxdp_egress_back` (TCX ingress on the NIC, after `dxdp_ingress` if ports are exposed
//!   there): a reply of such a connection gets the container's address and port back (the
//!   entry's original source), a decremented TTL, the container's MAC, and
//!   `bpf_redirect_peer` into its namespace.
//! - Both carry IPv4 options of padding only as they are. A TCP segment on its last hop (TTL
//!   0 or 1) of a carried connection is judged on the window copy, as conntrack judges it
//!   before the host drops it: out, it is left to the stack for its "time exceeded"; a reply
//!   is dropped (see `back`).
//!
//! Nothing is allocated and no connection is recorded: a packet conntrack has no entry for, or
//! one whose entry is not carried (`dxdp_common::egress::status::carried`, TCP not
//! ESTABLISHED), takes Docker's path unchanged. Packets past conntrack do not refresh their
//! entry: the programs set its timeout (`bpf_ct_change_timeout`) when it runs low, and cut it
//! short on a FIN or a closing RST they carry, since conntrack, whose windows the carried
//! packets left behind, would take the teardown for out of window and leave it untranslated.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// `window_merge`'s compare-and-exchange, which the target's atomics lack.
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

mod checksum;
// Shared with the ct lab; this object calls every kfunc it declares.
#[allow(dead_code)]
mod conntrack;
mod fib;
// Shared with the datapath's object, which uses more of it.
#[allow(dead_code, unused_imports)]
mod headers;
mod rewrite;
mod scratch;
mod window_merge;

/// What `checksum` and `rewrite` take from the datapath's `maps`: this object's own scratch.
mod maps {
    use aya_ebpf::{macros::map, maps::PerCpuArray};

    use crate::scratch::Scratch;

    /// Each CPU's buffers of a checksum, used within one invocation; not pinned.
    #[map(name = "DXDP_EGRESS_SCRATCH")]
    pub static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);
}

use aya_ebpf::{
    Global,
    bindings::{BPF_ANY, BPF_NOEXIST, TC_ACT_SHOT, TC_ACT_UNSPEC, bpf_fib_lookup},
    helpers::generated::{bpf_jiffies64, bpf_redirect_neigh, bpf_redirect_peer},
    macros::{classifier, map},
    maps::{Array, DevMapHash, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap},
    programs::TcContext,
};
use dxdp_common::{
    egress::{
        DEFAULT_MAX_EGRESS, EgressOwner, EgressVeth, Sysctls, TCP_CONNTRACK_ESTABLISHED,
        refresh_due, status, switch,
    },
    tcp_window::{
        self, ClosedWindow, DEFAULT_MAX_CLOSED_WINDOWS, DEFAULT_MAX_WINDOWS, FLAG_BE_LIBERAL,
        FLAG_SACK_PERM, Judgement, Segment, TCP_OPTIONS_MAX, TcpSide, TcpWindow, Verdict,
        WindowKey, highest_sack,
    },
};

use conntrack::{
    CtOpts, DIR_ORIGINAL, DIR_REPLY, NfConn, SockTupleV4, bpf_ct_change_timeout, bpf_ct_release,
    field,
};
use headers::{
    ETH_HLEN, ETH_P_IP, IPV4_HLEN, IPV4_OPTIONS_MAX, PACKET_HOST, PROTO_TCP, PROTO_UDP,
    TCP_CSUM_OFF, TCP_FLAGS_OFF, UDP_CSUM_OFF, ethertype, fits_mtu, ipv4_fragment,
    ipv4_header_valid, ipv4_header_with_options_valid, ipv4_options, ipv4_options_padding_only,
    v4_mapped,
};
use rewrite::Sums;

use tcp_window::{TCP_FIN, TCP_RST, TCP_SYN};
/// A TCP header without options.
const TCP_HLEN: usize = 20;
/// Ports, and UDP's length and checksum: what is read of layer 4 first.
const L4_READ: usize = 8;

#[map(name = "DXDP_EGRESS_VETHS")]
static VETHS: PerCpuHashMap<u32, EgressVeth> = PerCpuHashMap::pinned(DEFAULT_MAX_EGRESS, 0);

#[map(name = "DXDP_EGRESS_ADDRS")]
static ADDRS: HashMap<u32, u32> = HashMap::pinned(DEFAULT_MAX_EGRESS, 0);

#[map(name = "DXDP_EGRESS_LIVE")]
static LIVE: DevMapHash = DevMapHash::pinned(DEFAULT_MAX_EGRESS, 0);

/// The fast path's copy of each carried TCP connection's windows (`dxdp_common::tcp_window`),
/// by original tuple: taken from its conntrack entry when first carried, moved on by each
/// carried segment as conntrack would have. When full, a new connection is not taken over.
#[map(name = "DXDP_EGRESS_TCP_WINDOWS")]
static WINDOWS: HashMap<WindowKey, TcpWindow> = HashMap::pinned(DEFAULT_MAX_WINDOWS, 0);

/// The copies of connections the fast path saw close (both FINs acknowledged, or an RST), moved
/// here from `DXDP_EGRESS_TCP_WINDOWS`: conntrack's entry lives on (TIME_WAIT), and so may a late
/// segment, which is judged on the closed copy (`ClosedWindow`). Least recently used pushed
/// out, so that closed connections never take a live one's room.
#[map(name = "DXDP_EGRESS_TCP_CLOSED_WINDOWS")]
static CLOSED_WINDOWS: LruHashMap<WindowKey, ClosedWindow> =
    LruHashMap::pinned(DEFAULT_MAX_CLOSED_WINDOWS, 0);

/// Each CPU's snapshot of a copy and its judgement (`before`, `mine`), used within one
/// invocation: the programs' stack frames could not also hold them. Not pinned.
#[map(name = "DXDP_EGRESS_JUDGING")]
static JUDGING: PerCpuArray<[TcpWindow; 2]> = PerCpuArray::with_max_entries(1, 0);

/// Each CPU's parsed packet (`parse`), used within one invocation; not pinned.
#[map(name = "DXDP_EGRESS_PACKET")]
static PACKET: PerCpuArray<Packet> = PerCpuArray::with_max_entries(1, 0);

/// Each CPU's copy of a packet's IPv4 options, read to judge and sum them.
#[map(name = "DXDP_EGRESS_IP_OPTIONS")]
static IP_OPTIONS: PerCpuArray<[u8; IPV4_OPTIONS_MAX]> = PerCpuArray::with_max_entries(1, 0);

/// Userspace's only (who enabled a veth, when): declared here so that the object creates it.
#[map(name = "DXDP_EGRESS_OWNERS")]
static OWNERS: HashMap<u32, EgressOwner> = HashMap::pinned(DEFAULT_MAX_EGRESS, 0);

// Offsets in the running kernel's `struct nf_conn` and conntrack's timeouts, set by the loader
// (`dxdp::datapath::egress`). Frozen `.rodata`: the verifier sees constants, as a load from a
// PTR_TO_BTF_ID needs. An offset of 0 leaves the field unread, and the packet to the stack.
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_STATUS: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_TIMEOUT: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_TCP_STATE: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_ORIG_SRC_IP: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_ORIG_SRC_PORT: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_REPLY_DST_IP: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_REPLY_DST_PORT: Global<u32> = Global::new(0);
/// `proto.tcp.seen[0]`'s fields (`struct ip_ct_tcp_state`), and the distance to `seen[1]`.
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_SEEN_END: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_SEEN_MAXEND: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_SEEN_MAXWIN: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_SEEN_MAXACK: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_SEEN_SCALE: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_OFF_SEEN_FLAGS: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_SEEN_STRIDE: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_EGRESS_HZ: Global<u32> = Global::new(0);

/// Conntrack's timeouts and TCP switches as its sysctls are now: a map, not load-time
/// constants, so that userspace can follow a sysctl changed after the programs were loaded and
/// pinned (a switch turned off later must not leave the fast path carrying what conntrack now
/// finds INVALID).
#[map(name = "DXDP_EGRESS_TIMEOUTS")]
static SYSCTLS: Array<Sysctls> = Array::pinned(1, 0);

/// An IPv4 TCP or UDP packet, not a fragment.
struct Packet {
    proto: u8,
    ttl: u8,
    /// TCP's flags (0 for UDP).
    flags: u8,
    /// Addresses as the packet holds them.
    src: [u8; 4],
    dst: [u8; 4],
    /// Ports in host order.
    sport: u16,
    dport: u16,
    /// The IP header is one `ip_rcv` takes (checksum, lengths, with its options).
    well_formed: bool,
    /// The IP header has no options, or padding only: the host forwards it as it is
    /// (`ipv4_options_padding_only`). Other options are the stack's to judge or fill in.
    plain: bool,
    /// Where layer 4 starts in the frame (after the IP header's options).
    l4_at: usize,
    /// The layer-4 message's length by the IP header.
    l4_len: usize,
}

impl Packet {
    fn l4_csum(&self) -> usize {
        self.l4_at
            + if self.proto == PROTO_TCP {
                TCP_CSUM_OFF
            } else {
                UDP_CSUM_OFF
            }
    }

    fn sums(&self) -> Sums {
        Sums {
            v6: false,
            l3: ETH_HLEN,
            l4_csum: Some(self.l4_csum()),
            proto: self.proto,
        }
    }

    /// The tuple conntrack is asked for: the packet's own, in network order.
    fn tuple(&self) -> SockTupleV4 {
        SockTupleV4 {
            saddr: u32::from_ne_bytes(self.src),
            daddr: u32::from_ne_bytes(self.dst),
            sport: self.sport.to_be(),
            dport: self.dport.to_be(),
        }
    }

    /// The host would forward it as it is, one hop less: the fast path may carry it.
    fn forwarded_as_is(&self) -> bool {
        self.ttl > 1 && self.plain
    }

    /// A TCP segment whose life ends at the host (`ip_forward`'s "time exceeded"), with any
    /// options: conntrack judges it on Docker's path before the host drops it, so the fast
    /// path judges it on its copy of a carried connection's windows before it leaves it to
    /// the stack (see `back`).
    fn tcp_last_hop(&self) -> bool {
        self.ttl <= 1 && self.proto == PROTO_TCP
    }
}

/// TCX ingress on an enabled container's host veth: its packets of carried connections leave
/// through the NIC, masqueraded as conntrack says.
#[classifier]
pub fn dxdp_egress(ctx: TcContext) -> i32 {
    out(&ctx).unwrap_or(TC_ACT_UNSPEC)
}

/// TCX ingress on a NIC: replies of carried connections go straight into their container.
#[classifier]
pub fn dxdp_egress_back(ctx: TcContext) -> i32 {
    back(&ctx).unwrap_or(TC_ACT_UNSPEC)
}

/// Parses an unfragmented IPv4 TCP or UDP packet into this CPU's [`PACKET`]; `None` for
/// anything else. Its fields are read back from there, as values the verifier does not know:
/// on the stack, each kind of header (options or none, a last hop or not) left known values
/// behind, and the verifier walked everything after once for each.
#[inline(always)]
fn parse(ctx: &TcContext) -> Option<&'static Packet> {
    let end = ctx.data_end();
    let (ethertype, l3) = ethertype(ctx)?;
    if ethertype != ETH_P_IP || l3 + IPV4_HLEN > end {
        return None;
    }
    // SAFETY: bounds-checked above.
    let ip = unsafe { &*(l3 as *const [u8; IPV4_HLEN]) };
    // Version 4; not a fragment (no offset, no more-fragments bit).
    if ip[0] >> 4 != 4 || ip[0] & 0x0f < 5 || ipv4_fragment(ip) {
        return None;
    }
    let l3_len = (ctx.len() as usize).saturating_sub(ETH_HLEN);
    let options_len = ((ip[0] & 0x0f) as usize - 5) * 4;
    let (well_formed, plain) = if options_len == 0 {
        (ipv4_header_valid(ip, l3_len), true)
    } else {
        // SAFETY: this CPU's copy, valid for this invocation.
        let buffer = unsafe { &mut *IP_OPTIONS.get_ptr_mut(0)? };
        let options = ipv4_options(ctx, options_len, buffer)?;
        (
            ipv4_header_with_options_valid(ip, options, options_len, l3_len),
            ipv4_options_padding_only(options, options_len),
        )
    };
    let proto = ip[9];
    let l4 = l3 + IPV4_HLEN + options_len;
    if l4 + L4_READ > end {
        return None;
    }
    let flags = match proto {
        PROTO_TCP => {
            let at = l4 + TCP_FLAGS_OFF;
            if at + 1 > end {
                return None;
            }
            // SAFETY: bounds-checked just above.
            unsafe { *(at as *const u8) }
        }
        PROTO_UDP => 0,
        _ => return None,
    };
    // SAFETY: bounds-checked above.
    let l4 = unsafe { &*(l4 as *const [u8; L4_READ]) };
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    // SAFETY: this CPU's copy, valid for this invocation; one packet's at a time.
    let slot = unsafe { &mut *PACKET.get_ptr_mut(0)? };
    *slot = Packet {
        proto,
        ttl: ip[8],
        flags,
        src: [ip[12], ip[13], ip[14], ip[15]],
        dst: [ip[16], ip[17], ip[18], ip[19]],
        sport: u16::from_be_bytes([l4[0], l4[1]]),
        dport: u16::from_be_bytes([l4[2], l4[3]]),
        well_formed,
        plain,
        l4_at: ETH_HLEN + IPV4_HLEN + options_len,
        l4_len: total.saturating_sub(IPV4_HLEN + options_len),
    };
    Some(slot)
}

/// Where a carried TCP segment leaves its connection, for the entry's timeout.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Open,
    /// An RST that closes it.
    Reset,
    /// A segment after the fast path saw it close (a closed copy judged it).
    Closed,
}

/// What a carried packet's conntrack entry says: the other end of the translation.
struct Carried {
    addr: [u8; 4],
    port: u16,
}

/// Looks the packet up; `Some` (the entry's other end: the reply tuple's destination for a
/// packet of the original direction, the original source for a reply, and what `ours` made
/// of it) if conntrack holds its connection as one the fast path carries, seen in direction
/// `dir`, and `ours` takes it (a reply's container is enabled through this NIC). Only then is
/// the entry's timeout set as conntrack would have, or cut short by a FIN or RST: the entries
/// of connections the fast path does not carry are conntrack's alone.
#[inline(always)]
fn conntrack_says<T>(
    ctx: &TcContext,
    packet: &Packet,
    dir: u8,
    ours: impl FnOnce(&Carried) -> Option<T>,
) -> Option<(Carried, T)> {
    let mut tuple = packet.tuple();
    let mut opts = CtOpts::new(packet.proto);
    let ct = conntrack::lookup(ctx.skb.skb, &mut tuple, &mut opts);
    if ct.is_null() {
        return None;
    }
    // SAFETY: `ct` is the referenced entry from the lookup, released below exactly once.
    let judged = unsafe { judge(ct, packet, opts.dir == dir, dir) };
    let taken = judged.and_then(|(carried, state, timeout)| {
        let mine = ours(&carried)?;
        let (refresh, end) = if packet.proto == PROTO_TCP {
            // SAFETY: as above.
            let (judged, closed) = unsafe { window_allows(ctx, ct, packet, dir, &carried) }?;
            let end = if judged.closes {
                End::Reset
            } else if closed {
                End::Closed
            } else {
                End::Open
            };
            match judged.verdict {
                Verdict::Accept => (true, end),
                // Conntrack lets it through keeping its entry (and NAT), untracked.
                Verdict::Ignore => (false, end),
                // INVALID on Docker's path: conntrack and Docker's rules decide there.
                Verdict::Invalid => return None,
            }
        } else {
            (true, End::Open)
        };
        if refresh {
            // SAFETY: as above.
            unsafe { keep_alive(ct, packet, state, timeout, end) };
        }
        Some((carried, mine))
    });
    // SAFETY: as above.
    unsafe { bpf_ct_release(ct) };
    taken
}

/// [`conntrack_says`] on the entry `ct`, found in the wanted direction if `matched`: the other
/// end, and the entry's status and timeout for [`keep_alive`].
///
/// # Safety
/// `ct` is a live entry from `bpf_skb_ct_lookup`, not yet released.
#[inline(always)]
unsafe fn judge(
    ct: *mut NfConn,
    packet: &Packet,
    matched: bool,
    dir: u8,
) -> Option<(Carried, u32, u32)> {
    if !matched {
        return None;
    }
    // SAFETY: the caller's; each field is read at its offset in the running kernel's BTF.
    unsafe {
        let state = field::<u32>(ct, DXDP_EGRESS_OFF_STATUS.load())?;
        if !status::carried(state) {
            return None;
        }
        let tcp = packet.proto == PROTO_TCP;
        if tcp && field::<u8>(ct, DXDP_EGRESS_OFF_TCP_STATE.load())? != TCP_CONNTRACK_ESTABLISHED {
            return None;
        }
        let (ip_at, port_at) = if dir == DIR_ORIGINAL {
            (
                DXDP_EGRESS_OFF_REPLY_DST_IP.load(),
                DXDP_EGRESS_OFF_REPLY_DST_PORT.load(),
            )
        } else {
            (
                DXDP_EGRESS_OFF_ORIG_SRC_IP.load(),
                DXDP_EGRESS_OFF_ORIG_SRC_PORT.load(),
            )
        };
        let addr = field::<u32>(ct, ip_at)?.to_ne_bytes();
        let port = u16::from_be(field::<u16>(ct, port_at)?);
        let timeout = field::<u32>(ct, DXDP_EGRESS_OFF_TIMEOUT.load())?;
        Some((Carried { addr, port }, state, timeout))
    }
}

/// Conntrack's window check of the TCP segment `packet` of the carried entry `ct`, seen in
/// direction `dir`, on the fast path's copy of the entry's windows (taken from `ct` when the
/// connection is first carried): `None` where the copy cannot be had (the map is full, the
/// kernel's offsets unknown, or conntrack would learn the sender's side from this packet), so
/// the segment goes to conntrack. An RST it accepts that closes the connection, or the ACK of
/// the second FIN, closes the copy: it moves to `DXDP_EGRESS_TCP_CLOSED_WINDOWS`, where the
/// connection's late segments find it. With the judgement, whether the copy was a closed one.
///
/// # Safety
/// `ct` is a live entry from `bpf_skb_ct_lookup`, not yet released.
#[inline(always)]
unsafe fn window_allows(
    ctx: &TcContext,
    ct: *mut NfConn,
    packet: &Packet,
    dir: u8,
    carried: &Carried,
) -> Option<(Judgement, bool)> {
    // seq, ack, data offset, flags, window.
    let header: [u8; 12] = ctx.load(packet.l4_at + 4).ok()?;
    let seq = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let ack = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    let doff = (header[8] >> 4) as usize * 4;
    let win = u16::from_be_bytes([header[10], header[11]]);
    if doff < TCP_HLEN || packet.l4_len < doff {
        // `tcp_error`: truncated.
        return Some((Judgement::kept(Verdict::Invalid), false));
    }
    let mut segment = Segment::new(seq, ack, win, header[9], (packet.l4_len - doff) as u32);
    let key = if dir == DIR_ORIGINAL {
        WindowKey {
            container: v4_mapped(&packet.src),
            server: v4_mapped(&packet.dst),
            container_port: packet.sport.to_be(),
            server_port: packet.dport.to_be(),
        }
    } else {
        WindowKey {
            container: v4_mapped(&carried.addr),
            server: v4_mapped(&packet.src),
            container_port: carried.port.to_be(),
            server_port: packet.sport.to_be(),
        }
    };
    // SAFETY: the caller's.
    let (shared, closed) = unsafe { window_of(ct, &key) }?;
    // Judged on a snapshot and merged back (`window_merge`): other CPUs judge this
    // connection's segments at the same time.
    // SAFETY: this CPU's own value of the scratch map, used by nothing else during this
    // invocation.
    let [before, mine] = unsafe { &mut *JUDGING.get_ptr_mut(0)? };
    *before = *shared;
    let before = &*before;
    let receiver = if dir == DIR_ORIGINAL {
        before.seen[1].flags
    } else {
        before.seen[0].flags
    };
    let options_len = doff - TCP_HLEN;
    if receiver & FLAG_SACK_PERM != 0 && options_len > 0 {
        let mut options = [0u8; TCP_OPTIONS_MAX];
        let mut at = 0;
        while at < TCP_OPTIONS_MAX {
            if at < options_len {
                let word: [u8; 4] = ctx.load(packet.l4_at + TCP_HLEN + at).ok()?;
                options[at..at + 4].copy_from_slice(&word);
            }
            at += 4;
        }
        segment.sack = highest_sack(&options, options_len, ack);
    }
    // Judged before the segment moves the copy on, as conntrack judges it.
    let resets = segment.flags & TCP_RST != 0
        && tcp_window::rst_ends(before, dir as usize, segment.seq, true);
    let switches = SYSCTLS.get(0).map_or(0, |s| s.tcp_switches);
    let judge = |window: &mut TcpWindow| {
        tcp_window::judge(
            window,
            dir as usize,
            &segment,
            switches & switch::BE_LIBERAL != 0,
            switches & switch::IGNORE_INVALID_RST != 0,
        )
    };
    *mine = *before;
    let verdict = judge(mine)?;
    // SAFETY: a map value, valid for this invocation.
    unsafe { window_merge::publish(shared, before, mine) };
    // An RST that closes the connection, or the last ACK of a closing: the copy moves to the
    // closed ones, for the segments that may still come. Conntrack moves no state on a
    // segment it ignores.
    let accepted = verdict == Verdict::Accept;
    if !closed && accepted && (resets || tcp_window::closes(mine, dir as usize, &segment)) {
        // SAFETY: the caller's; `shared` a map value, valid for this invocation.
        unsafe { close(ct, &key, shared) };
    }
    // An RST beside what its receiver acknowledged keeps the connection ESTABLISHED, for the
    // challenge ACK the receiver answers with (`tcp_window::rst_ends`).
    Some((Judgement::of_rst(verdict, resets, false), closed))
}

/// The copy of `ct`'s windows under `key`, and whether it is a closed one: the one in the map
/// if it was taken from `ct`, else the closed one `ct` left if it is `ct`'s (see
/// `ClosedWindow`), else a new one taken now; `None` if the map is full or a field cannot be
/// read. Where two CPUs take a new copy at once (the connection's first carried segments both
/// ways), the one that comes second uses the first's, so that neither's update is overwritten.
///
/// # Safety
/// `ct` is a live entry from `bpf_skb_ct_lookup`, not yet released.
#[inline(always)]
unsafe fn window_of(ct: *mut NfConn, key: &WindowKey) -> Option<(&'static mut TcpWindow, bool)> {
    let conn = ct as usize as u64;
    // The same address is not always the same entry: the slab often gives a deleted entry's
    // address (`conntrack -D`, `-F`) to the entry conntrack makes when it picks the connection
    // up again in mid-stream, whose windows saw what Docker's path carried meanwhile, and the
    // copy did not; judged on it, the next ACK was INVALID and the connection never came back
    // (egress::a_connection_conntrack_forgets_goes_back_to_dockers_path_and_on, one run in
    // five). Such an entry is liberal on both sides (`tcp_new`'s mid-stream branch), which a
    // copy taken from an entry that saw the handshake is not: it is taken again. (Comparing
    // the ends instead, 229cbe9, took a copy more than 2^31 bytes ahead of conntrack's frozen
    // ends for one behind them, and reset downloads of a few gigabytes.)
    let existing = |key: &WindowKey| {
        let window = WINDOWS.get_ptr_mut(key)?;
        // SAFETY: a map value, valid for this invocation.
        let window = unsafe { &mut *window };
        if window.conn != conn {
            return None;
        }
        // SAFETY: the caller's.
        let picked_up = unsafe { picked_up_since(ct, window) }?;
        (!picked_up).then_some(window)
    };
    if let Some(window) = existing(key) {
        return Some((window, false));
    }
    if let Some(closed) = CLOSED_WINDOWS.get_ptr_mut(key) {
        // SAFETY: a map value, valid for this invocation; the caller's `ct`.
        let closed = unsafe { &mut *closed };
        if closed.window.conn == conn && unsafe { ct_ends(ct) } == Some(closed.ct_ends) {
            return Some((&mut closed.window, true));
        }
    }
    let stride = DXDP_EGRESS_SEEN_STRIDE.load();
    // SAFETY: the caller's.
    let taken = unsafe {
        TcpWindow {
            conn,
            seen: [side(ct, 0)?, side(ct, stride)?],
        }
    };
    // A copy of another entry of the tuple is replaced; a copy of this one another CPU has
    // just taken is kept.
    let flags = if WINDOWS.get_ptr_mut(key).is_some() {
        BPF_ANY
    } else {
        BPF_NOEXIST
    };
    if WINDOWS.insert(key, taken, flags.into()).is_err() && flags == BPF_ANY {
        return None;
    }
    existing(key).map(|window| (window, false))
}

/// Whether `ct` holds a side liberal that `copy` holds strict: conntrack picked the
/// connection up in mid-stream after the copy was taken (see `window_of`).
///
/// # Safety
/// `ct` is a live entry from `bpf_skb_ct_lookup`, not yet released.
#[inline(always)]
unsafe fn picked_up_since(ct: *mut NfConn, copy: &TcpWindow) -> Option<bool> {
    // SAFETY: the caller's.
    let flags: [u8; 2] = unsafe { both_sides(ct, DXDP_EGRESS_OFF_SEEN_FLAGS.load()) }?;
    let liberal = |flags: u8| flags & FLAG_BE_LIBERAL != 0;
    Some((0..2).any(|s| liberal(flags[s]) && !liberal(copy.seen[s].flags)))
}

/// Moves the copy `shared` of `ct`'s connection, just closed, from `DXDP_EGRESS_TCP_WINDOWS` to
/// `DXDP_EGRESS_TCP_CLOSED_WINDOWS`; where the entry's own ends cannot be read (or the LRU map
/// cannot take it), it is only dropped, and late segments meet conntrack's windows.
///
/// # Safety
/// `ct` is a live entry from `bpf_skb_ct_lookup`, not yet released; `shared` a map value.
#[inline(always)]
unsafe fn close(ct: *mut NfConn, key: &WindowKey, shared: &TcpWindow) {
    // SAFETY: the caller's.
    if let Some(ct_ends) = unsafe { ct_ends(ct) } {
        let closed = ClosedWindow {
            window: *shared,
            ct_ends,
        };
        let _ = CLOSED_WINDOWS.insert(key, closed, 0);
    }
    let _ = WINDOWS.remove(key);
}

/// `seen[].td_end` of `ct` as conntrack holds them (behind, while the fast path carries).
///
/// # Safety
/// `ct` is a live entry from `bpf_skb_ct_lookup`, not yet released.
#[inline(always)]
unsafe fn ct_ends(ct: *mut NfConn) -> Option<[u32; 2]> {
    // SAFETY: the caller's.
    unsafe { both_sides(ct, DXDP_EGRESS_OFF_SEEN_END.load()) }
}

/// The `T` at `offset` in `proto.tcp.seen[0]` and `seen[1]` of `ct`.
///
/// # Safety
/// `ct` is a live entry from `bpf_skb_ct_lookup`, not yet released; `offset` a field of
/// `T`'s size in `seen[0]`.
#[inline(always)]
unsafe fn both_sides<T: Copy>(ct: *mut NfConn, offset: u32) -> Option<[T; 2]> {
    let stride = DXDP_EGRESS_SEEN_STRIDE.load();
    // SAFETY: the caller's.
    unsafe { Some([seen_field(ct, offset, 0)?, seen_field(ct, offset, stride)?]) }
}

/// `proto.tcp.seen[]` of `ct`, `shift` bytes on from `seen[0]`.
///
/// # Safety
/// `ct` is a live entry from `bpf_skb_ct_lookup`, not yet released.
#[inline(always)]
unsafe fn side(ct: *mut NfConn, shift: u32) -> Option<TcpSide> {
    // SAFETY: the caller's.
    unsafe {
        Some(TcpSide {
            td_end: seen_field(ct, DXDP_EGRESS_OFF_SEEN_END.load(), shift)?,
            td_maxend: seen_field(ct, DXDP_EGRESS_OFF_SEEN_MAXEND.load(), shift)?,
            td_maxwin: seen_field(ct, DXDP_EGRESS_OFF_SEEN_MAXWIN.load(), shift)?,
            td_maxack: seen_field(ct, DXDP_EGRESS_OFF_SEEN_MAXACK.load(), shift)?,
            td_scale: seen_field(ct, DXDP_EGRESS_OFF_SEEN_SCALE.load(), shift)?,
            flags: seen_field(ct, DXDP_EGRESS_OFF_SEEN_FLAGS.load(), shift)?,
            fin: 0,
            last_ack: 0,
        })
    }
}

/// The `T` of `proto.tcp.seen[0]` at `offset` (0 where the loader found no such field), or
/// of a later `seen[]`, `shift` bytes on.
///
/// # Safety
/// `ct` is a live entry from `bpf_skb_ct_lookup`, not yet released; `offset` a field of
/// `T`'s size in `seen[0]`, `shift` a multiple of `seen[]`'s stride within the array.
#[inline(always)]
unsafe fn seen_field<T: Copy>(ct: *mut NfConn, offset: u32, shift: u32) -> Option<T> {
    if offset == 0 {
        return None;
    }
    // SAFETY: the caller's; the field at its offset in the running kernel's BTF.
    unsafe { field::<T>(ct, offset + shift) }
}

/// Sets the entry's timeout where conntrack, had it seen the packet, would have given it more
/// than it has (see `refresh_due`), or ends it soon after a carried FIN or an RST that
/// `resets` (closes it).
///
/// # Safety
/// `ct` is a live entry from `bpf_skb_ct_lookup`, not yet released.
#[inline(always)]
unsafe fn keep_alive(ct: *mut NfConn, packet: &Packet, state: u32, timeout: u32, end: End) {
    let hz = DXDP_EGRESS_HZ.load() as u64;
    if hz == 0 {
        return;
    }
    // `nf_conn.timeout` is the 32-bit jiffy at which the entry expires.
    // SAFETY: a plain helper call.
    let now = unsafe { bpf_jiffies64() } as u32;
    let remaining_ms = (timeout.wrapping_sub(now) as i32).max(0) as u64 * 1000 / hz;
    let Some(&timeouts) = SYSCTLS.get(0) else {
        return;
    };
    let closing_ms = timeouts.tcp_closing_ms;
    let set_ms = if packet.proto == PROTO_TCP {
        if end == End::Reset {
            Some(timeouts.tcp_reset_ms)
        } else if packet.flags & TCP_FIN != 0 || end == End::Closed {
            // A closed connection's late segment: conntrack's TIME_WAIT would not keep the
            // entry longer than its own timeout either.
            Some(closing_ms).filter(|&ms| (ms as u64) < remaining_ms)
        } else {
            let full = timeouts.tcp_established_ms;
            Some(full).filter(|&ms| refresh_due(remaining_ms, ms as u64, closing_ms as u64))
        }
    } else {
        // conntrack gives a UDP flow it has seen both ways and assured the stream's timeout.
        let full = if state & status::ASSURED != 0 {
            timeouts.udp_stream_ms
        } else {
            timeouts.udp_ms
        };
        Some(full).filter(|&ms| refresh_due(remaining_ms, ms as u64, 0))
    };
    if let Some(ms) = set_ms
        && ms != 0
    {
        // SAFETY: the caller's `ct`, referenced; a failure leaves the timeout as it was.
        let _ = unsafe { bpf_ct_change_timeout(ct, ms) };
    }
}

/// The container's packet out of the NIC; `None` for one that takes Docker's path.
#[inline(always)]
fn out(ctx: &TcContext) -> Option<i32> {
    // SAFETY: the verifier guarantees ctx.skb.skb points at a valid __sk_buff for this call.
    let (veth_ifindex, vlan_present) =
        unsafe { ((*ctx.skb.skb).ifindex, (*ctx.skb.skb).vlan_present) };
    let veth = VETHS.get_ptr_mut(veth_ifindex)?;
    // SAFETY: this CPU's copy of the value, valid for this invocation.
    let veth = unsafe { &mut *veth };
    let packet = parse(ctx)?;
    // What the stack would route at all: an untagged frame (the kernel takes a tag off into
    // `vlan_tci` before tc runs; the bridge drops a tagged frame no VLAN device takes, which
    // the fast path carried: the outbound differential topology's seed 39, case 88), an IP
    // header `ip_rcv` takes, and a layer-4 checksum conntrack takes (a packet it finds
    // invalid is never masqueraded on Docker's path).
    let taken = vlan_present == 0
        && packet.well_formed
        && (packet.forwarded_as_is() || packet.tcp_last_hop())
        && routed_out(ctx, veth, packet)
        && l4_taken(ctx, packet);
    let carried = taken
        .then(|| conntrack_says(ctx, packet, DIR_ORIGINAL, |_| Some(())))
        .flatten();
    let Some((carried, ())) = carried else {
        veth.passed_packets += 1;
        return None;
    };
    if !packet.forwarded_as_is() {
        // Its last hop, judged on the copy as conntrack judges it on Docker's path before the
        // host drops it: the stack answers the container with "time exceeded" as it is.
        veth.passed_packets += 1;
        return None;
    }
    let translated =
        translate(ctx, packet, Side::Source, &carried).and_then(|()| decrement_ttl(ctx, packet));
    if translated.is_err() {
        // Half rewritten (the helpers fail only on memory pressure): not for the stack either.
        return Some(TC_ACT_SHOT);
    }
    veth.out_packets += 1;
    veth.out_bytes += ctx.len() as u64;
    // SAFETY: a plain helper call; a null neighbour means "look the next hop up in the FIB".
    Some(unsafe { bpf_redirect_neigh(veth.nic_ifindex, core::ptr::null_mut(), 0, 0) } as i32)
}

/// Whether the host would route the container's `packet` out of its NIC: sent from the
/// container's own address to the gateway's MAC, not a connection's first packet (SYN), and a
/// route from the bridge through the NIC that the packet (each segment of it) fits.
#[inline(always)]
fn routed_out(ctx: &TcContext, veth: &EgressVeth, packet: &Packet) -> bool {
    if packet.flags & TCP_SYN != 0
        || u32::from_ne_bytes(packet.src) != veth.addr
        || ctx.load::<[u8; 6]>(0).ok() != Some(veth.gateway_mac)
    {
        return false;
    }
    // SAFETY: plain data, which `fib::ask` sets.
    let mut params: bpf_fib_lookup = unsafe { core::mem::zeroed() };
    fib::ask(
        &mut params,
        false,
        &v4_mapped(&packet.src),
        &v4_mapped(&packet.dst),
        veth.bridge_ifindex,
    );
    // The ports too: a policy route may match on them.
    params.l4_protocol = packet.proto;
    params.sport = packet.sport.to_be();
    params.dport = packet.dport.to_be();
    let rc = fib::lookup(ctx, &mut params);
    rc == 0 && params.ifindex == veth.nic_ifindex && fits_mtu(ctx, veth.nic_ifindex)
}

/// A reply arriving on the NIC into its container; `None` for one that takes Docker's path.
#[inline(always)]
fn back(ctx: &TcContext) -> Option<i32> {
    // SAFETY: the verifier guarantees ctx.skb.skb points at a valid __sk_buff for this call.
    let (nic_ifindex, pkt_type, vlan_present) = unsafe {
        let skb = ctx.skb.skb;
        ((*skb).ifindex, (*skb).pkt_type, (*skb).vlan_present)
    };
    // Only what the host routes: to its own MAC, untagged, an IP header `ip_rcv` takes, and
    // no SYN (a new connection's, not a reply's); forwarded as it is, or a TCP segment on its
    // last hop.
    if pkt_type != PACKET_HOST || vlan_present != 0 {
        return None;
    }
    let packet = parse(ctx)?;
    if !packet.well_formed
        || packet.flags & TCP_SYN != 0
        || !(packet.forwarded_as_is() || packet.tcp_last_hop())
    {
        return None;
    }
    // The container is enabled through this NIC and alive, and conntrack would take the
    // checksum (on Docker's path a reply it finds invalid never reaches the container).
    let enabled = |carried: &Carried| {
        // SAFETY: a map value, copied out at once.
        let veth_ifindex = *unsafe { ADDRS.get(u32::from_ne_bytes(carried.addr)) }?;
        // SAFETY: this CPU's copy of the value, read at once.
        let veth_nic = unsafe { (*VETHS.get_ptr_mut(veth_ifindex)?).nic_ifindex };
        (veth_nic == nic_ifindex && LIVE.get(veth_ifindex).is_some() && l4_taken(ctx, packet))
            .then_some(veth_ifindex)
    };
    let (carried, veth_ifindex) = conntrack_says(ctx, packet, DIR_REPLY, enabled)?;
    let veth = VETHS.get_ptr_mut(veth_ifindex)?;
    // SAFETY: this CPU's copy of the value, valid for this invocation.
    let veth = unsafe { &mut *veth };
    if !packet.forwarded_as_is() {
        // Its last hop, judged on the copy (one conntrack would find INVALID took Docker's
        // path above, as on Docker's path). On Docker's path conntrack translates it back and
        // the host's forwarding answers "time exceeded". Left to the stack as it came, it
        // would meet conntrack's windows as they were when the fast path took the connection
        // over, be INVALID there, and reach the host's own stack, whose RST to the server ends
        // the connection (the outbound differential topology's seed 9393, case 63).
        // Translated back first, it meets Docker's own rule against packets from outside
        // addressed to a container (raw PREROUTING, `! -i` the bridge `-j DROP`), which on
        // Docker's path runs before conntrack translates. Dropped: neither path delivers it,
        // and the server hears no "time exceeded" (an expected difference, docs/egress.md).
        return Some(TC_ACT_SHOT);
    }
    let mut macs = [0u8; 12];
    macs[..6].copy_from_slice(&veth.mac);
    macs[6..].copy_from_slice(&veth.gateway_mac);
    let translated = translate(ctx, packet, Side::Destination, &carried)
        .and_then(|()| decrement_ttl(ctx, packet))
        .and_then(|()| ctx.store(0, &macs, 0));
    if translated.is_err() {
        return Some(TC_ACT_SHOT);
    }
    veth.in_packets += 1;
    veth.in_bytes += ctx.len() as u64;
    // SAFETY: a plain helper call; it only records the target in per-CPU redirect info.
    Some(unsafe { bpf_redirect_peer(veth_ifindex, 0) } as i32)
}

/// Whether conntrack would take the packet's TCP or UDP checksum (`nf_conntrack_checksum`).
#[inline(always)]
fn l4_taken(ctx: &TcContext, packet: &Packet) -> bool {
    let (src, dst) = (v4_mapped(&packet.src), v4_mapped(&packet.dst));
    let message = checksum::Message {
        v6: false,
        proto: packet.proto,
        src: &src,
        dst: &dst,
        at: packet.l4_at,
        len: packet.l4_len,
        checksum_at: packet.l4_csum() - packet.l4_at,
    };
    checksum::taken(ctx, &message)
}

/// Which end of a packet a translation rewrites.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Source,
    Destination,
}

/// Rewrites `side` of the packet to `carried`'s address and port, with every checksum that
/// covers them.
#[inline(always)]
fn translate(ctx: &TcContext, packet: &Packet, side: Side, carried: &Carried) -> Result<(), i64> {
    let sums = packet.sums();
    let (addr_at, port_at, old_addr, old_port) = match side {
        Side::Source => (12, 0, &packet.src, packet.sport),
        Side::Destination => (16, 2, &packet.dst, packet.dport),
    };
    rewrite::address(
        ctx,
        sums,
        ETH_HLEN + addr_at,
        &v4_mapped(old_addr),
        &v4_mapped(&carried.addr),
    )?;
    rewrite::port(
        ctx,
        sums,
        packet.l4_csum(),
        packet.l4_at + port_at,
        old_port,
        carried.port,
    )
}

/// One hop less, as the host's forwarding would leave it, with the IP header's checksum.
#[inline(always)]
fn decrement_ttl(ctx: &TcContext, packet: &Packet) -> Result<(), i64> {
    let ttl_at = ETH_HLEN + 8;
    let old = u16::from_ne_bytes([packet.ttl, packet.proto]) as u64;
    let new = u16::from_ne_bytes([packet.ttl - 1, packet.proto]) as u64;
    ctx.l3_csum_replace(ETH_HLEN + 10, old, new, 2)?;
    ctx.store(ttl_at, &(packet.ttl - 1), 0)
}

dxdp_ebpf::object_boilerplate!();
