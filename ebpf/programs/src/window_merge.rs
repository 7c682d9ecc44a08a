//! Merging a segment's judgement of a connection's windows into the shared copy with atomic
//! compare-and-exchange, so that two CPUs judging segments of one connection at once cannot put
//! a bound back (`dxdp_common::tcp_window::merge` has the why and the rules).
use dxdp_common::tcp_window::{
    TcpWindow,
    merge::{WORDS, merge_word, word_at},
};

/// Attempts at a word another CPU keeps moving; past them the other CPU's value stays, as if
/// its segment came after ours.
const TRIES: usize = 4;
/// Where `TcpWindow.seen` starts: after the entry's address (`conn`), 8-aligned.
const SEEN_AT: usize = 8;

/// Merges what judging a segment changed (`before` judged into `mine`) into `shared`, the
/// map's copy: each 64-bit word of `seen` (two of its `u32` fields) with one
/// compare-and-exchange, tried again from what another CPU left there.
///
/// # Safety
/// `shared` points at a live map value (8-aligned, as every map value is).
#[inline(always)]
pub(crate) unsafe fn publish(shared: *mut TcpWindow, before: &TcpWindow, mine: &TcpWindow) {
    let changed = |i: usize| word_at(before, i) != word_at(mine, i);
    let mut w = 0;
    while w < WORDS / 2 {
        let (lo, hi) = (2 * w, 2 * w + 1);
        if changed(lo) || changed(hi) {
            // SAFETY: the caller's; word `w` of `seen` lies within the value.
            unsafe {
                let at = shared.cast::<u8>().add(SEEN_AT + 8 * w).cast::<u64>();
                update(at, |current| {
                    let (a, c) = split(current);
                    join(
                        merge_word(lo, a, before, mine),
                        merge_word(hi, c, before, mine),
                    )
                });
            }
        }
        w += 1;
    }
}

/// A 64-bit word as the two `u32` fields it holds, in memory order.
#[inline(always)]
fn split(word: u64) -> (u32, u32) {
    let bytes = word.to_ne_bytes();
    (
        u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        u32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
    )
}

#[inline(always)]
fn join(first: u32, second: u32) -> u64 {
    let (a, b) = (first.to_ne_bytes(), second.to_ne_bytes());
    u64::from_ne_bytes([a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]])
}

/// Sets the word at `at` to `next(current)` unless another CPU changed it in between, then
/// tries again from what it found.
///
/// # Safety
/// `at` is an aligned `u64` in a map value, valid for this invocation.
#[inline(always)]
unsafe fn update(at: *mut u64, next: impl Fn(u64) -> u64) {
    // SAFETY: the caller's; an aligned word is read whole.
    let mut current = unsafe { core::ptr::read_volatile(at) };
    for _ in 0..TRIES {
        let new = next(current);
        if new == current {
            return;
        }
        // SAFETY: the caller's.
        match unsafe { compare_exchange(at, current, new) } {
            Ok(()) => return,
            Err(now) => current = now,
        }
    }
}

/// BPF's 64-bit `cmpxchg` (`BPF_ATOMIC | BPF_CMPXCHG`, Linux 5.12): the target's
/// `core::sync::atomic` has no compare-and-exchange (`atomic-cas: false`).
///
/// # Safety
/// `at` is an aligned `u64` valid for this invocation.
#[cfg(target_arch = "bpf")]
#[inline(always)]
unsafe fn compare_exchange(at: *mut u64, current: u64, new: u64) -> Result<(), u64> {
    use core::intrinsics::{AtomicOrdering::Relaxed, atomic_cxchg};
    // SAFETY: the caller's.
    let (found, swapped) =
        unsafe { atomic_cxchg::<u64, { Relaxed }, { Relaxed }>(at, current, new) };
    if swapped { Ok(()) } else { Err(found) }
}

/// The host build (clippy) has the atomics the BPF target lacks.
#[cfg(not(target_arch = "bpf"))]
#[inline(always)]
unsafe fn compare_exchange(at: *mut u64, current: u64, new: u64) -> Result<(), u64> {
    use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
    // SAFETY: the caller's.
    let cell = unsafe { AtomicU64::from_ptr(at) };
    cell.compare_exchange(current, new, Relaxed, Relaxed)
        .map(|_| ())
}
