//! The socket layer, a lab that is not shipped (docs/sock-datapath.md: on Linux 6.18 a
//! redirected socket breaks blocking `recv` and `splice` readers): established TCP sockets of
//! linked namespaces go into a SOCKHASH (sock_ops, attached to a cgroup2), and each `sendmsg` of
//! such a socket is handed straight to the peer socket's receive queue (sk_msg, attached to the
//! SOCKHASH) instead of crossing TCP/IP and the veths.
//!
//! What keeps a socket's byte stream intact (each point checked against Linux 6.18's
//! net/core/sock_map.c, net/ipv4/tcp_bpf.c and net/core/skmsg.c):
//! - A socket is either redirected from its first payload byte or it sends over TCP for good
//!   (`STATE_TCP` is sticky). Redirected then TCP keeps order, because `tcp_bpf_recvmsg` drains
//!   the psock's ingress queue before it reads the TCP receive queue; TCP then redirected would
//!   not, so it never happens.
//! - Switching a link off (its switch, read here) moves its sockets to TCP at their next message.
//!   Entries of live sockets are never deleted: deleting one frees its psock queue (data loss).
//! - `bpf_msg_redirect_hash` returns SK_DROP when the key is missing, but only as its return
//!   value: it sets `msg->sk_redir` on success only, and the verdict is what the program
//!   returns. A failed redirect returns SK_PASS here, so the message goes over TCP.
//! - sk_msg programs cannot look a sockhash up (the lookup acquires a socket reference and
//!   `bpf_sk_release` is not allowed in sk_msg: the verifier says "program of this type cannot
//!   use helper bpf_sk_release#86"), so the peer's presence and address come from `STATES`,
//!   which sock_ops fills beside the sockhash.
//! - Backpressure: nothing in the redirect path refuses bytes for a receiver that does not
//!   read (the prototype queued 1.5 GB). On 6.18 the queued bytes are charged to the receiver
//!   (`ss -tm` shows `r` ≈ the queue) and its `sk_rcvbuf` grows with them (`rb` 4.2 MB with
//!   nothing read), so neither bounds anything. Before redirecting, the peer's queued bytes
//!   (`sk_psock.msg_tot_len`) are compared with `QUEUE_FLOOR`; over it, the socket sends over
//!   TCP, whose window then bounds memory and blocks the sender, until the peer has read every
//!   byte (then nothing queued can be overtaken) and redirecting resumes.
//! - Only sockets whose (namespace, remote address) is a linked direction are ever inserted, and
//!   a redirect targets the key built with the peer namespace's cookie that the link names.
//!
//! An object of its own (`dxdp-sock-lab`), so that dxdp's object carries only what dxdp runs:
//! build.rs builds both, and only the integration tests' `sock` area loads this one. Built for
//! the host too, like the datapath's, so that the linters see it.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

use aya_ebpf::{
    EbpfContext, Global,
    bindings::{
        BPF_ANY, BPF_F_INGRESS, BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB,
        BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, BPF_SOCK_OPS_STATE_CB, BPF_SOCK_OPS_STATE_CB_FLAG,
        bpf_sock_ops, sk_action, sk_msg_md,
    },
    helpers::generated::{bpf_get_netns_cookie, bpf_probe_read_kernel},
    macros::{map, sk_msg, sock_ops},
    maps::{HashMap, PerCpuArray, SockHash},
    programs::{SkMsgContext, SockOpsContext},
};
use dxdp_common::sock::{
    DEFAULT_MAX_LINKS, DEFAULT_MAX_SOCKETS, STATE_FRESH, STATE_REDIRECTING, STATE_TCP,
    STATE_TCP_UNTIL_QUIET, SWITCH_ON, SockCounters, SockEntry, SockKey, SockLinkKey, SockLinkValue,
};

const AF_INET: u32 = 2;
const AF_INET6: u32 = 10;
/// `TCP_CLOSE` of include/net/tcp_states.h.
const TCP_CLOSE: u32 = 7;
/// Low bits of `sk_user_data` that are flags, not pointer (SK_USER_DATA_PTRMASK).
const SK_USER_DATA_FLAGS: u64 = 7;

// Pinned by name under the loader's directory (ROOT/sock/maps), and adopted from there by the
// next load. The hash maps are not preallocated: memory grows with the links and sockets.
const NO_PREALLOC: u32 = aya_ebpf::bindings::BPF_F_NO_PREALLOC;

#[map(name = "DXDP_SOCK_HASH")]
static SOCKETS: SockHash<SockKey> = SockHash::pinned(DEFAULT_MAX_SOCKETS, 0);

#[map(name = "DXDP_SOCK_LINKS")]
static LINKS: HashMap<SockLinkKey, SockLinkValue> = HashMap::pinned(DEFAULT_MAX_LINKS, NO_PREALLOC);

#[map(name = "DXDP_SOCK_SWITCHES")]
static SWITCHES: HashMap<u32, u32> = HashMap::pinned(DEFAULT_MAX_LINKS, NO_PREALLOC);

#[map(name = "DXDP_SOCK_STATES")]
static STATES: HashMap<SockKey, SockEntry> = HashMap::pinned(DEFAULT_MAX_SOCKETS, NO_PREALLOC);

#[map(name = "DXDP_SOCK_COUNTERS")]
static COUNTERS: PerCpuArray<SockCounters> = PerCpuArray::pinned(1, 0);

// Offsets in the running kernel's `struct sock` and `struct sk_psock`, read from its BTF by the
// loader. Frozen `.rodata`: the verifier sees constants. 0 disables the backpressure check (the
// loader refuses to attach then).
#[unsafe(no_mangle)]
static DXDP_OFF_SK_USER_DATA: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_OFF_PSOCK_MSG_TOT_LEN: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_OFF_TP_WRITE_SEQ: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_OFF_TP_COPIED_SEQ: Global<u32> = Global::new(0);
/// Redirected bytes a peer socket may hold unread before its senders use TCP: the bound on
/// the memory a non-reading receiver costs, beyond what TCP itself lets queue.
#[unsafe(no_mangle)]
static DXDP_SOCK_QUEUE_FLOOR: Global<u32> = Global::new(4 << 20);

fn count(f: impl FnOnce(&mut SockCounters)) {
    if let Some(c) = COUNTERS.get_ptr_mut(0) {
        // SAFETY: a per-CPU slot, only touched by this CPU while the program runs.
        f(unsafe { &mut *c });
    }
}

/// An IPv4 address (network order) as the v4-mapped IPv6 address `::ffff:a.b.c.d`.
#[inline(always)]
fn mapped(ip4: u32) -> [u32; 4] {
    [0, 0, 0xffff_u32.to_be(), ip4]
}

/// The remote port from a context's `remote_port`: a network-order 16-bit value in a 32-bit
/// field, in its upper half on some paths and its lower half on others; a connected socket never
/// has port 0, so whichever half is set is it.
#[inline(always)]
fn remote_port(raw: u32) -> u32 {
    let v = u32::from_be(raw);
    if v > 0xffff { v >> 16 } else { v }
}

/// Reads the address fields of a context whose layout matches (sock_ops and sk_msg both have
/// family, remote_ip4, local_ip4, remote_ip6, local_ip6, remote_port, local_port). Every field is
/// read unconditionally with a volatile load at its own offset: reads in different branches let
/// clang merge them into one load from a computed ctx pointer, which the verifier rejects.
macro_rules! read_addrs {
    ($p:expr) => {{
        let p = $p;
        // SAFETY: `p` is the program's context pointer; each read is one fixed-offset ctx load.
        unsafe {
            let family = core::ptr::read_volatile(&raw const (*p).family);
            let l4 = core::ptr::read_volatile(&raw const (*p).local_ip4);
            let r4 = core::ptr::read_volatile(&raw const (*p).remote_ip4);
            let l6 = [
                core::ptr::read_volatile(&raw const (*p).local_ip6[0]),
                core::ptr::read_volatile(&raw const (*p).local_ip6[1]),
                core::ptr::read_volatile(&raw const (*p).local_ip6[2]),
                core::ptr::read_volatile(&raw const (*p).local_ip6[3]),
            ];
            let r6 = [
                core::ptr::read_volatile(&raw const (*p).remote_ip6[0]),
                core::ptr::read_volatile(&raw const (*p).remote_ip6[1]),
                core::ptr::read_volatile(&raw const (*p).remote_ip6[2]),
                core::ptr::read_volatile(&raw const (*p).remote_ip6[3]),
            ];
            let lport = core::ptr::read_volatile(&raw const (*p).local_port);
            let rport = core::ptr::read_volatile(&raw const (*p).remote_port);
            (family, l4, r4, l6, r6, lport, rport)
        }
    }};
}

/// This socket's key, or None if it is not TCP over IPv4/IPv6.
#[inline(always)]
fn key_of(
    netns_cookie: u64,
    (family, l4, r4, l6, r6, lport, rport): (u32, u32, u32, [u32; 4], [u32; 4], u32, u32),
) -> Option<SockKey> {
    let (local_ip, remote_ip) = match family {
        AF_INET => (mapped(l4), mapped(r4)),
        AF_INET6 => (l6, r6),
        _ => return None,
    };
    Some(SockKey {
        netns_cookie,
        local_ip,
        remote_ip,
        local_port: lport,
        remote_port: remote_port(rport),
    })
}

#[sock_ops]
pub fn dxdp_sock_ops(ctx: SockOpsContext) -> u32 {
    match ctx.op() {
        BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB | BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB => {
            established(&ctx)
        }
        BPF_SOCK_OPS_STATE_CB if ctx.arg(1) == TCP_CLOSE => closed(&ctx),
        _ => {}
    }
    1
}

fn sock_ops_key(ctx: &SockOpsContext) -> Option<SockKey> {
    let ops: *mut bpf_sock_ops = ctx.ops;
    // SAFETY: a helper that only reads the socket's namespace.
    let cookie = unsafe { bpf_get_netns_cookie(ctx.as_ptr()) };
    key_of(cookie, read_addrs!(ops))
}

/// Puts a socket of a linked direction into the sockhash, fresh.
fn established(ctx: &SockOpsContext) {
    let Some(mut key) = sock_ops_key(ctx) else {
        return;
    };
    let link = SockLinkKey {
        netns_cookie: key.netns_cookie,
        remote_ip: key.remote_ip,
    };
    // SAFETY: the value is only compared, not kept.
    if unsafe { LINKS.get(link) }.is_none() {
        return;
    }
    // SAFETY: a read of the context's socket pointer (the verifier checks it).
    let sk = unsafe { (*ctx.ops).__bindgen_anon_2.sk };
    if sk.is_null() {
        return;
    }
    let entry = SockEntry {
        state: STATE_FRESH,
        _pad: 0,
        sk_addr: sk as u64,
    };
    // A new connection with a reused 4-tuple starts fresh: the entry is overwritten.
    if STATES.insert(key, entry, BPF_ANY.into()).is_err() {
        count(|c| c.insert_failed += 1);
        return;
    }
    // SAFETY: ctx.ops is the context pointer of this sock_ops program.
    if SOCKETS
        .update(&mut key, unsafe { &mut *ctx.ops }, BPF_ANY.into())
        .is_err()
    {
        let _ = STATES.remove(key);
        count(|c| c.insert_failed += 1);
        return;
    }
    // STATE_CB tells us when the socket closes, to forget its state.
    let _ = ctx.set_cb_flags((ctx.cb_flags() | BPF_SOCK_OPS_STATE_CB_FLAG) as i32);
    count(|c| c.sockets_inserted += 1);
}

/// The kernel removes a closing socket from the sockhash itself; its state goes too.
fn closed(ctx: &SockOpsContext) {
    if let Some(key) = sock_ops_key(ctx) {
        let _ = STATES.remove(key);
    }
}

const SK_PASS: u32 = sk_action::SK_PASS;

#[sk_msg]
pub fn dxdp_sk_msg(ctx: SkMsgContext) -> u32 {
    let size = u64::from(ctx.size());
    if redirect(&ctx) {
        count(|c| {
            c.redirected_msgs += 1;
            c.redirected_bytes += size;
        });
    } else {
        count(|c| c.passed_bytes += size);
    }
    SK_PASS
}

/// Why a message is not redirected.
enum Fallback {
    NoLink,
    SwitchOff,
    NoPeer,
    Backpressure,
    /// The peer has not read every byte this socket sent over TCP yet.
    NotQuiet,
}

/// Redirects the message to the peer socket's ingress queue if this socket may; true if it did.
fn redirect(ctx: &SkMsgContext) -> bool {
    let msg: *mut sk_msg_md = ctx.msg;
    // SAFETY: a helper that only reads the socket's namespace.
    let cookie = unsafe { bpf_get_netns_cookie(ctx.as_ptr()) };
    let Some(key) = key_of(cookie, read_addrs!(msg)) else {
        return false;
    };
    let Some(entry) = STATES.get_ptr_mut(key) else {
        // Not a socket this program inserted (state is written before the sockhash entry).
        return false;
    };
    // SAFETY: the entry of this socket; only this socket's sendmsg (under its lock) writes it.
    let entry = unsafe { &mut *entry };
    let own_sk = entry.sk_addr as *const u8;
    let state = &mut entry.state;
    let before = *state;
    if before == STATE_TCP {
        return false;
    }
    // Until this socket has redirected, it may have sent over TCP (a pending fallback, or TCP
    // Fast Open data in the SYN): redirect only once the peer has read all of it.
    let must_be_quiet = before != STATE_REDIRECTING;
    match try_redirect(ctx, &key, own_sk, must_be_quiet) {
        Ok(()) => {
            *state = STATE_REDIRECTING;
            if before == STATE_TCP_UNTIL_QUIET {
                count(|c| c.rejoined += 1);
            }
            true
        }
        Err(why) => {
            let next = match why {
                // The peer is not in the sockhash yet (or not quiet): TCP for now, retried at
                // every message. A redirecting socket whose peer left it is closing: TCP.
                Fallback::NoPeer | Fallback::NotQuiet if before != STATE_REDIRECTING => {
                    STATE_TCP_UNTIL_QUIET
                }
                // The peer reads slower than this socket writes: TCP (whose window blocks
                // this writer) until the peer has read everything, then redirect again.
                Fallback::Backpressure => STATE_TCP_UNTIL_QUIET,
                _ => STATE_TCP,
            };
            if next != before {
                count(|c| match why {
                    Fallback::NoLink => c.fallback_no_link += 1,
                    Fallback::SwitchOff => c.fallback_switch_off += 1,
                    Fallback::NoPeer | Fallback::NotQuiet => c.fallback_no_peer += 1,
                    Fallback::Backpressure => c.fallback_backpressure += 1,
                });
            }
            *state = next;
            false
        }
    }
}

fn try_redirect(
    ctx: &SkMsgContext,
    key: &SockKey,
    own_sk: *const u8,
    must_be_quiet: bool,
) -> Result<(), Fallback> {
    let link_key = SockLinkKey {
        netns_cookie: key.netns_cookie,
        remote_ip: key.remote_ip,
    };
    // SAFETY: plain reads of map values.
    let link = unsafe { LINKS.get(link_key) }.ok_or(Fallback::NoLink)?;
    let on = unsafe { SWITCHES.get(link.link_id) }.is_some_and(|s| *s == SWITCH_ON);
    if !on {
        return Err(Fallback::SwitchOff);
    }
    let mut peer = SockKey {
        netns_cookie: link.peer_netns_cookie,
        local_ip: key.remote_ip,
        remote_ip: key.local_ip,
        local_port: key.remote_port,
        remote_port: key.local_port,
    };
    // SAFETY: a plain read of a map value.
    let peer_sk = unsafe { STATES.get(peer) }.ok_or(Fallback::NoPeer)?.sk_addr as *const u8;
    if must_be_quiet && !quiet(own_sk, peer_sk) {
        return Err(Fallback::NotQuiet);
    }
    if peer_queue_full(peer_sk) {
        return Err(Fallback::Backpressure);
    }
    if SOCKETS.redirect_msg(ctx, &mut peer, BPF_F_INGRESS.into()) as u32 != SK_PASS {
        // The peer left the sockhash (its application closed it): the helper set no target,
        // and the SK_PASS this program returns sends the message over TCP.
        return Err(Fallback::NoPeer);
    }
    Ok(())
}

/// Reads a u32 at `base + off` (0 if the read fails).
#[inline(always)]
fn read_u32(base: *const u8, off: u32) -> u32 {
    let mut v: u32 = 0;
    // SAFETY: probe reads never fault; a failed read leaves the zero in place.
    unsafe {
        bpf_probe_read_kernel(
            (&raw mut v).cast(),
            4,
            base.wrapping_add(off as usize).cast(),
        )
    };
    v
}

/// Whether the peer application has read every byte this socket wrote over TCP. Both
/// addresses come from sock_ops; a socket freed meanwhile reads as garbage, never faults.
#[inline(always)]
fn quiet(own: *const u8, peer: *const u8) -> bool {
    let off_write = DXDP_OFF_TP_WRITE_SEQ.load();
    let off_copied = DXDP_OFF_TP_COPIED_SEQ.load();
    if off_write == 0 || off_copied == 0 {
        return false;
    }
    read_u32(own, off_write) == read_u32(peer, off_copied)
}

/// Whether the peer socket holds `QUEUE_FLOOR` redirected bytes or more, unread.
#[inline(always)]
fn peer_queue_full(sk: *const u8) -> bool {
    let off_user_data = DXDP_OFF_SK_USER_DATA.load();
    let off_tot_len = DXDP_OFF_PSOCK_MSG_TOT_LEN.load();
    if off_user_data == 0 || off_tot_len == 0 {
        return false;
    }
    let mut user_data: u64 = 0;
    // SAFETY: probe reads never fault; a failed read leaves the zero in place.
    unsafe {
        bpf_probe_read_kernel(
            (&raw mut user_data).cast(),
            8,
            sk.wrapping_add(off_user_data as usize).cast(),
        )
    };
    let psock = (user_data & !SK_USER_DATA_FLAGS) as *const u8;
    if psock.is_null() {
        return false;
    }
    let queued = read_u32(psock, off_tot_len);
    queued >= DXDP_SOCK_QUEUE_FLOOR.load()
}

dxdp_ebpf::object_boilerplate!();
