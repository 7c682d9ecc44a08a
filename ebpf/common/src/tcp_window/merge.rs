//! Merging a judged copy of a connection's windows back into the shared one.
//!
//! Conntrack judges a connection's segments one at a time under the entry's lock; the fast
//! paths judge them on every CPU at once, and BPF has no lock to take on a map value without
//! BTF-declared maps. Judging in place, two CPUs that carry segments of one side at once
//! (a sender's process context on one CPU, its ACK-clocked sends from the softirq on the other)
//! both read `td_end`, and the later store can put back the lower of the two ends: the other
//! side's ACK of the higher one is then over the copy's `td_end`, INVALID, left to conntrack,
//! whose windows the carried segments left behind, and the host answers it with an RST that
//! resets the connection (measured: `dxdp bench-egress`'s iperf3 upload, about one run in
//! twenty on two CPUs).
//!
//! So each segment is judged on a private snapshot (`before`, judged into `mine`), and only
//! what it changed is merged back, field by field, with atomic compare-and-exchange on the
//! 64-bit words that hold two fields each (the programs' `window_merge`: BPF's v1 instruction
//! set has no 32-bit one): every sequence bound conntrack moves only forward
//! (`td_end`, `td_maxend`, `td_maxack`) becomes the later of the shared value and ours, every
//! window only grows (`td_maxwin`), and the flags, the FIN note and `last_ack` take our change
//! and keep anyone else's. Where two segments race, the shared copy's bounds and windows end as
//! conntrack's would after both, in either order; of the flags and `last_ack` the last writer's
//! change wins (none of them decides a verdict but `last_ack`, for an RST right after an ACK).
use super::{FLAG_MAXACK_SET, TcpSide, TcpWindow, after};

/// The later, in sequence space, of the shared bound `current` and ours, `mine`, where ours
/// moved (`mine != before`); `current` otherwise.
#[inline(always)]
pub const fn later(current: u32, before: u32, mine: u32) -> u32 {
    if mine != before && after(mine, current) {
        mine
    } else {
        current
    }
}

/// The larger of the shared window `current` and ours, where ours moved.
#[inline(always)]
pub const fn larger(current: u32, before: u32, mine: u32) -> u32 {
    if mine != before && mine > current {
        mine
    } else {
        current
    }
}

/// The last word of a [`TcpSide`] (`td_scale`, `flags`, `fin`, `last_ack`, in memory order),
/// merged: the scale as it is (fixed once the connection is established), the flags our
/// judgement set or cleared set or cleared in the shared ones and the others kept, the FIN
/// note once set set, `last_ack` ours where our judgement changed it.
#[inline(always)]
pub const fn tail(current: [u8; 4], before: [u8; 4], mine: [u8; 4]) -> [u8; 4] {
    let set = mine[1] & !before[1];
    let cleared = before[1] & !mine[1];
    let flags = (current[1] | set) & !cleared;
    let fin = current[2] | mine[2];
    let last_ack = if mine[3] != before[3] {
        mine[3]
    } else {
        current[3]
    };
    [current[0], flags, fin, last_ack]
}

/// [`TcpSide`]'s last word, as [`tail`] takes it.
#[inline(always)]
pub const fn tail_of(side: &TcpSide) -> [u8; 4] {
    [side.td_scale, side.flags, side.fin, side.last_ack]
}

/// How many `u32` words `TcpWindow.seen` is: five per side.
pub const WORDS: usize = 10;

/// Word `i` of `window.seen` (side `i / 5`; `td_end`, `td_maxend`, `td_maxwin`, `td_maxack`,
/// then the [`tail`] bytes), as memory holds it: read field by field, so that no array of them
/// takes the programs' stack.
#[inline(always)]
pub const fn word_at(window: &TcpWindow, i: usize) -> u32 {
    let side = &window.seen[if i < 5 { 0 } else { 1 }];
    match i % 5 {
        0 => side.td_end,
        1 => side.td_maxend,
        2 => side.td_maxwin,
        3 => side.td_maxack,
        _ => u32::from_ne_bytes(tail_of(side)),
    }
}

/// Word `i` of `seen` (as [`word_at`] numbers them) merged: the shared value `current` with
/// what judging a segment changed from `before` to `mine`.
#[inline(always)]
pub const fn merge_word(i: usize, current: u32, before: &TcpWindow, mine: &TcpWindow) -> u32 {
    let (b, m) = (word_at(before, i), word_at(mine, i));
    match i % 5 {
        0 | 1 => later(current, b, m),
        2 => larger(current, b, m),
        3 => {
            let side = if i < 5 { 0 } else { 1 };
            let set = mine.seen[side].flags & !before.seen[side].flags;
            // The first ACK's `td_maxack` (the flag set now) is no bound to compare with.
            if set & FLAG_MAXACK_SET != 0 {
                m
            } else {
                later(current, b, m)
            }
        }
        _ => u32::from_ne_bytes(tail(
            current.to_ne_bytes(),
            b.to_ne_bytes(),
            m.to_ne_bytes(),
        )),
    }
}

/// `current` with what judging a segment changed from `before` to `mine`, every word merged
/// at once: what [`merge_word`] gives word by word, for the tests.
pub fn merged(current: &TcpWindow, before: &TcpWindow, mine: &TcpWindow) -> TcpWindow {
    let mut out = *current;
    for (s, side) in out.seen.iter_mut().enumerate() {
        let w: [u32; 5] = core::array::from_fn(|f| {
            let i = s * 5 + f;
            merge_word(i, word_at(current, i), before, mine)
        });
        let tail = w[4].to_ne_bytes();
        *side = TcpSide {
            td_end: w[0],
            td_maxend: w[1],
            td_maxwin: w[2],
            td_maxack: w[3],
            td_scale: tail[0],
            flags: tail[1],
            fin: tail[2],
            last_ack: tail[3],
        };
    }
    out
}
