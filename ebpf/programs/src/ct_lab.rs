//! The conntrack kfunc lab, not shipped (docs/kfuncs.md): proof that an aya-ebpf program can call
//! the kernel's conntrack kfuncs once the loader has resolved them (`dxdp::datapath::kfunc`).
//!
//! `dxdp_ct_probe`, on tc ingress, looks every IPv4 or IPv6 TCP or UDP packet up in the conntrack table
//! of the device's namespace with `bpf_skb_ct_lookup`, releases the entry it gets at once with
//! `bpf_ct_release` (the verifier refuses a program that leaks the reference), and records per
//! tuple whether the lookup found an entry, the lookup's error otherwise, and a few fields of the
//! entry it found, read at offsets the loader took from the running kernel's BTF (aya-ebpf has no
//! CO-RE). The packet goes on (`TC_ACT_UNSPEC`): the lab only watches, but for the keep-alive:
//! a packet of a found entry to the loader's keep-alive port sets the entry's timeout with
//! `bpf_ct_change_timeout` and is dropped, standing for a packet a fast path would take past
//! conntrack (which then would not refresh the entry itself).
//!
//! The kfuncs are declared as plain `extern "C"` functions. bpf-linker leaves each call as a
//! `call` instruction against an undefined symbol of that name; aya 0.14 cannot load such an
//! object, and `dxdp::datapath::kfunc` rewrites the calls to kfunc calls by BTF id first.
//!
//! An object of its own (`dxdp-ct-lab`), built by build.rs beside dxdp's and loaded only by the
//! integration tests' `ct_kfunc` area. Built for the host too, like the others, for the linters.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

use aya_ebpf::{
    Global,
    bindings::{BPF_NOEXIST, TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::{classifier, map},
    maps::HashMap,
    programs::TcContext,
};
use dxdp_common::ct::{CtProbeKey, CtProbeValue, DEFAULT_MAX_TUPLES};

// Shared with the egress object, which uses the directions the lab does not read.
#[allow(dead_code)]
mod conntrack;

use conntrack::{
    CtOpts, ENOENT, NfConn, SockTupleV4, SockTupleV6, bpf_ct_change_timeout, bpf_ct_release, field,
};

const ETH_HLEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const IPV4_HLEN: usize = 20;
const IPV6_HLEN: usize = 40;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

#[map(name = "DXDP_CT_SEEN")]
static SEEN: HashMap<CtProbeKey, CtProbeValue> = HashMap::with_max_entries(DEFAULT_MAX_TUPLES, 0);

// Offsets in the running kernel's `struct nf_conn`, set by the loader from its BTF. Frozen
// `.rodata`: the verifier sees constants, as a load from a PTR_TO_BTF_ID needs. 0: not read.
#[unsafe(no_mangle)]
static DXDP_CT_OFF_STATUS: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_CT_OFF_MARK: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_CT_OFF_REPLY_SRC_IP: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static DXDP_CT_OFF_REPLY_SRC_PORT: Global<u32> = Global::new(0);
/// Destination port (network order) of the packets that keep their entry alive; 0: none.
#[unsafe(no_mangle)]
static DXDP_CT_KEEPALIVE_PORT: Global<u16> = Global::new(0);
/// The timeout those packets give their entry, in milliseconds.
#[unsafe(no_mangle)]
static DXDP_CT_KEEPALIVE_MS: Global<u32> = Global::new(0);

/// tc ingress: looks the packet's connection up and records the outcome; lets the packet go on,
/// but for the keep-alive's.
#[classifier]
pub fn dxdp_ct_probe(ctx: TcContext) -> i32 {
    match tuple(&ctx) {
        Some((key, v6)) => probe(&ctx, key, v6),
        None => TC_ACT_UNSPEC,
    }
}

/// The packet's TCP or UDP tuple, and whether it is IPv6; `None` for anything else, for IPv4
/// options, IPv6 extension headers and IPv4 fragments after the first (no ports).
#[inline(always)]
fn tuple(ctx: &TcContext) -> Option<(CtProbeKey, bool)> {
    let (start, end) = (ctx.data(), ctx.data_end());
    if start + ETH_HLEN > end {
        return None;
    }
    // SAFETY: bounds-checked against data_end just above.
    let eth = unsafe { &*(start as *const [u8; ETH_HLEN]) };
    match u16::from_be_bytes([eth[12], eth[13]]) {
        ETH_P_IP => tuple_v4(start, end).map(|key| (key, false)),
        ETH_P_IPV6 => tuple_v6(start, end).map(|key| (key, true)),
        _ => None,
    }
}

#[inline(always)]
fn tuple_v4(start: usize, end: usize) -> Option<CtProbeKey> {
    if start + ETH_HLEN + IPV4_HLEN + 4 > end {
        return None;
    }
    // SAFETY: bounds-checked against data_end just above.
    let bytes = unsafe { &*(start as *const [u8; ETH_HLEN + IPV4_HLEN + 4]) };
    let ip = &bytes[ETH_HLEN..];
    let proto = ip[9];
    let fragment_offset = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff;
    if ip[0] != 0x45 || (proto != PROTO_TCP && proto != PROTO_UDP) || fragment_offset != 0 {
        return None;
    }
    let l4 = &ip[IPV4_HLEN..];
    Some(CtProbeKey {
        saddr: v4_mapped([ip[12], ip[13], ip[14], ip[15]]),
        daddr: v4_mapped([ip[16], ip[17], ip[18], ip[19]]),
        sport: u16::from_ne_bytes([l4[0], l4[1]]),
        dport: u16::from_ne_bytes([l4[2], l4[3]]),
        proto,
        _pad: [0; 3],
    })
}

#[inline(always)]
fn tuple_v6(start: usize, end: usize) -> Option<CtProbeKey> {
    if start + ETH_HLEN + IPV6_HLEN + 4 > end {
        return None;
    }
    // SAFETY: bounds-checked against data_end just above.
    let bytes = unsafe { &*(start as *const [u8; ETH_HLEN + IPV6_HLEN + 4]) };
    let ip = &bytes[ETH_HLEN..];
    let proto = ip[6];
    if ip[0] >> 4 != 6 || (proto != PROTO_TCP && proto != PROTO_UDP) {
        return None;
    }
    let mut key = CtProbeKey {
        saddr: [0; 16],
        daddr: [0; 16],
        sport: 0,
        dport: 0,
        proto,
        _pad: [0; 3],
    };
    key.saddr.copy_from_slice(&ip[8..24]);
    key.daddr.copy_from_slice(&ip[24..40]);
    let l4 = &ip[IPV6_HLEN..];
    key.sport = u16::from_ne_bytes([l4[0], l4[1]]);
    key.dport = u16::from_ne_bytes([l4[2], l4[3]]);
    Some(key)
}

/// `::ffff:a.b.c.d`.
#[inline(always)]
fn v4_mapped(addr: [u8; 4]) -> [u8; 16] {
    let mut mapped = [0u8; 16];
    mapped[10] = 0xff;
    mapped[11] = 0xff;
    mapped[12..].copy_from_slice(&addr);
    mapped
}

/// Looks `key` up in conntrack: the entry (null for none) and the lookup's options.
#[inline(always)]
fn lookup(ctx: &TcContext, key: &CtProbeKey, v6: bool) -> (*mut NfConn, CtOpts) {
    let mut opts = CtOpts::new(key.proto);
    let ct = if v6 {
        let mut tuple = SockTupleV6 {
            saddr: key.saddr,
            daddr: key.daddr,
            sport: key.sport,
            dport: key.dport,
        };
        conntrack::lookup(ctx.skb.skb, &mut tuple, &mut opts)
    } else {
        let word = |a: &[u8; 16]| u32::from_ne_bytes([a[12], a[13], a[14], a[15]]);
        let mut tuple = SockTupleV4 {
            saddr: word(&key.saddr),
            daddr: word(&key.daddr),
            sport: key.sport,
            dport: key.dport,
        };
        conntrack::lookup(ctx.skb.skb, &mut tuple, &mut opts)
    };
    (ct, opts)
}

/// The address at byte `offset` of `ct` (a `union nf_inet_addr`), read a word at a time as
/// its BTF allows (`all[4]`); IPv4 v4-mapped.
///
/// # Safety
/// `ct` is a live entry from `bpf_skb_ct_lookup`, `offset` a `union nf_inet_addr` in it.
#[inline(always)]
unsafe fn address(ct: *mut NfConn, offset: u32, v6: bool) -> [u8; 16] {
    if offset == 0 {
        return [0; 16];
    }
    // SAFETY: the caller's; each word lies inside the union.
    let word = |at: u32| {
        unsafe { field::<u32>(ct, offset + at) }
            .unwrap_or(0)
            .to_ne_bytes()
    };
    if !v6 {
        return v4_mapped(word(0));
    }
    let mut addr = [0u8; 16];
    addr[..4].copy_from_slice(&word(0));
    addr[4..8].copy_from_slice(&word(4));
    addr[8..12].copy_from_slice(&word(8));
    addr[12..].copy_from_slice(&word(12));
    addr
}

/// Looks `key` up, records what the lookup found, and returns the packet's verdict.
#[inline(always)]
fn probe(ctx: &TcContext, key: CtProbeKey, v6: bool) -> i32 {
    let (ct, opts) = lookup(ctx, &key, v6);
    if SEEN.get_ptr_mut(key).is_none() {
        // A lost race with another CPU inserting the same key is fine: the insert then fails.
        let _ = SEEN.insert(key, CtProbeValue::default(), BPF_NOEXIST.into());
    }
    let seen = SEEN.get_ptr_mut(key);
    if ct.is_null() {
        if let Some(seen) = seen {
            // SAFETY: a map value of this tuple; the counters are approximate under concurrency.
            let seen = unsafe { &mut *seen };
            if opts.error == -ENOENT {
                seen.not_found += 1;
            } else {
                seen.failed += 1;
            }
            seen.last_error = opts.error;
        }
        return TC_ACT_UNSPEC;
    }
    let keepalive_port = DXDP_CT_KEEPALIVE_PORT.load();
    let keep_alive = keepalive_port != 0 && key.dport == keepalive_port;
    if let Some(seen) = seen {
        // SAFETY: as above; `ct` is a referenced `struct nf_conn` the verifier knows by BTF,
        // read at constant offsets inside it.
        unsafe {
            let seen = &mut *seen;
            seen.found += 1;
            seen.status = field::<u32>(ct, DXDP_CT_OFF_STATUS.load()).unwrap_or(0);
            seen.mark = field::<u32>(ct, DXDP_CT_OFF_MARK.load()).unwrap_or(0);
            seen.reply_src_ip = address(ct, DXDP_CT_OFF_REPLY_SRC_IP.load(), v6);
            seen.reply_src_port = field::<u16>(ct, DXDP_CT_OFF_REPLY_SRC_PORT.load()).unwrap_or(0);
        }
    }
    let verdict = if keep_alive {
        // SAFETY: `ct` is the referenced entry from the lookup, not yet released.
        let ret = unsafe { bpf_ct_change_timeout(ct, DXDP_CT_KEEPALIVE_MS.load()) };
        if let Some(seen) = seen {
            // SAFETY: as above.
            let seen = unsafe { &mut *seen };
            if ret == 0 {
                seen.kept_alive += 1;
            } else {
                seen.keepalive_error = ret;
            }
        }
        TC_ACT_SHOT
    } else {
        TC_ACT_UNSPEC
    };
    // SAFETY: `ct` came from the lookup above and is released exactly once.
    unsafe { bpf_ct_release(ct) };
    verdict
}

dxdp_ebpf::object_boilerplate!();
