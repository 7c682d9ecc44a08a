use super::*;

/// A connection as conntrack holds it after a handshake with window scaling (7 both ways) and
/// SACK permitted: the client (original) sent ISN 1000, the server ISN 5000; both sent their
/// handshake's last ACK, each advertising 64 KiB << 7.
fn established() -> TcpWindow {
    let side = |end: u32, peer_end: u32| TcpSide {
        td_end: end,
        td_maxend: peer_end + (512 << 7),
        td_maxwin: 512 << 7,
        td_maxack: peer_end,
        td_scale: 7,
        flags: FLAG_WINDOW_SCALE | FLAG_SACK_PERM | FLAG_MAXACK_SET,
        fin: 0,
        last_ack: 0,
    };
    TcpWindow {
        conn: 1,
        seen: [side(1001, 5001), side(5001, 1001)],
    }
}

fn data(seq: u32, ack: u32, len: u32) -> Segment {
    Segment::new(seq, ack, 512, TCP_ACK | TCP_PSH, len)
}

#[test]
fn sequence_arithmetic_wraps() {
    assert!(before(1, 2));
    assert!(!before(2, 2));
    assert!(before(u32::MAX, 0), "0 follows 2^32 - 1");
    assert!(after(5, u32::MAX - 5));
    assert!(!after(0x8000_0001, 1) || before(1, 0x8000_0001));
}

#[test]
fn in_window_data_moves_the_window_on_as_conntrack_does() {
    let mut w = established();
    let seg = data(1001, 5001, 1448);
    assert_eq!(judge(&mut w, 0, &seg, false, false), Some(Verdict::Accept));
    assert_eq!(w.seen[0].td_end, 1001 + 1448);
    assert_ne!(w.seen[0].flags & FLAG_DATA_UNACKNOWLEDGED, 0);
    // The server acknowledges it with a window of 1024 << 7: its receiver's maxend moves.
    let ack = Segment::new(5001, 1001 + 1448, 1024, TCP_ACK, 0);
    assert_eq!(judge(&mut w, 1, &ack, false, false), Some(Verdict::Accept));
    assert_eq!(w.seen[0].td_maxend, 1001 + 1448 + (1024 << 7));
    assert_eq!(w.seen[1].td_maxack, 1001 + 1448);
    assert_eq!(
        w.seen[1].td_maxwin,
        1024 << 7,
        "scaled window is the sender's maxwin"
    );
    assert_eq!(
        w.seen[0].flags & FLAG_DATA_UNACKNOWLEDGED,
        0,
        "all acknowledged"
    );
}

#[test]
fn a_sequence_number_past_the_window_is_invalid() {
    let mut w = established();
    let before_state = w;
    // From the server, far past what the client allowed.
    let forged = data(5001 + (512 << 7) + 100_000, 1001, 10);
    assert_eq!(
        judge(&mut w, 1, &forged, false, false),
        Some(Verdict::Invalid)
    );
    assert_eq!(w, before_state, "an invalid segment changes nothing");
}

#[test]
fn an_ack_of_data_never_sent_is_invalid() {
    let mut w = established();
    let seg = data(5001, 1001 + 10, 0);
    assert_eq!(judge(&mut w, 1, &seg, false, false), Some(Verdict::Invalid));
}

#[test]
fn a_retransmission_below_the_window_is_let_through_untracked() {
    let mut w = established();
    // Move the client far on: 3 MB sent and acknowledged in 1448-byte steps.
    let mut seq = 1001u32;
    for _ in 0..2000 {
        assert_eq!(
            judge(&mut w, 0, &data(seq, 5001, 1448), false, false),
            Some(Verdict::Accept)
        );
        seq += 1448;
        let ack = Segment::new(5001, seq, 1024, TCP_ACK, 0);
        assert_eq!(judge(&mut w, 1, &ack, false, false), Some(Verdict::Accept));
    }
    let state = w;
    // A segment from the start again, long acknowledged: conntrack ignores it (NF_ACCEPT).
    assert_eq!(
        judge(&mut w, 0, &data(1001, 5001, 1448), false, false),
        Some(Verdict::Ignore)
    );
    assert_eq!(w, state);
}

#[test]
fn an_rst_below_what_the_peer_acknowledged_is_invalid_even_when_liberal() {
    let mut w = established();
    w.seen[1].flags |= FLAG_BE_LIBERAL;
    let rst = Segment::new(5000, 0, 0, TCP_RST, 0);
    // Sent by the server: the client acknowledged 5001.
    assert_eq!(judge(&mut w, 1, &rst, false, false), Some(Verdict::Invalid));
    assert_eq!(judge(&mut w, 1, &rst, false, true), Some(Verdict::Accept));
}

#[test]
fn an_rst_past_the_window_is_invalid_and_one_in_it_accepted() {
    let mut w = established();
    let forged = Segment::new(5001 + 0x4000_0000, 0, 0, TCP_RST, 0);
    assert_eq!(
        judge(&mut w, 1, &forged, false, false),
        Some(Verdict::Invalid)
    );
    let forged_ack = Segment::new(5001 + 0x4000_0000, 1001, 0, TCP_RST | TCP_ACK, 0);
    assert_eq!(
        judge(&mut w, 1, &forged_ack, false, false),
        Some(Verdict::Invalid)
    );
    let real = Segment::new(5001, 1001, 0, TCP_RST | TCP_ACK, 0);
    assert_eq!(judge(&mut w, 1, &real, false, false), Some(Verdict::Accept));
}

#[test]
fn liberal_tracking_accepts_without_learning() {
    let mut w = established();
    let forged = data(5001 + 0x4000_0000, 1001, 10);
    assert_eq!(
        judge(&mut w, 1, &forged, true, false),
        Some(Verdict::Accept)
    );
    let state = w;
    w.seen[1].flags |= FLAG_BE_LIBERAL;
    assert_eq!(
        judge(&mut w, 1, &forged, false, false),
        Some(Verdict::Accept)
    );
    w.seen[1].flags &= !FLAG_BE_LIBERAL;
    assert_eq!(w, state, "out of window: accepted, nothing learnt");
}

#[test]
fn an_overshoot_by_less_than_a_window_is_ignored_but_recorded() {
    let mut w = established();
    let maxend = w.seen[0].td_maxend;
    let seg = data(maxend + 1, 5001, 100);
    assert_eq!(judge(&mut w, 0, &seg, false, false), Some(Verdict::Ignore));
    assert_eq!(w.seen[0].td_end, maxend + 101);
}

#[test]
fn an_unknown_sender_side_is_left_to_conntrack() {
    let mut w = established();
    w.seen[1].td_maxwin = 0;
    assert_eq!(judge(&mut w, 1, &data(5001, 1001, 1), false, false), None);
}

#[test]
fn flag_combinations_conntrack_refuses_are_invalid() {
    let mut w = established();
    for flags in [
        TCP_FIN,
        TCP_FIN | TCP_SYN,
        TCP_SYN | TCP_RST,
        0,
        TCP_FIN | TCP_RST,
    ] {
        let seg = Segment::new(1001, 5001, 512, flags, 0);
        assert_eq!(
            judge(&mut w, 0, &seg, false, false),
            Some(Verdict::Invalid),
            "{flags:#x}"
        );
    }
    assert!(flags_valid(TCP_FIN | TCP_ACK | TCP_PSH | TCP_ECE));
    assert!(flags_valid(TCP_RST | TCP_ACK));
}

#[test]
fn a_fin_counts_one_in_the_sequence() {
    let seg = Segment::new(10, 0, 0, TCP_FIN | TCP_ACK, 5);
    assert_eq!(seg.end, 16);
}

fn options(bytes: &[u8]) -> [u8; TCP_OPTIONS_MAX] {
    let mut out = [0u8; TCP_OPTIONS_MAX];
    out[..bytes.len()].copy_from_slice(bytes);
    out
}

#[test]
fn the_highest_sack_edge_is_found_as_tcp_sack_does() {
    // NOP NOP TS(10) + NOP NOP SACK with two blocks.
    let mut bytes = [0u8; 32];
    bytes[..16].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 1, 5, 18]);
    for (i, (left, right)) in [(3000u32, 4000u32), (5000, 6000)].into_iter().enumerate() {
        bytes[16 + i * 8..20 + i * 8].copy_from_slice(&left.to_be_bytes());
        bytes[20 + i * 8..24 + i * 8].copy_from_slice(&right.to_be_bytes());
    }
    let o = options(&bytes);
    assert_eq!(highest_sack(&o, bytes.len(), 2000), 6000);
    assert_eq!(highest_sack(&o, bytes.len(), 7000), 7000, "none after ack");
    // Timestamps alone: the ack.
    assert_eq!(highest_sack(&o, 12, 2000), 2000);
    // A silly option size ends the walk.
    assert_eq!(highest_sack(&options(&[3, 1, 5, 10]), 4, 9), 9);
    // A block that does not fit the option's length is not read.
    assert_eq!(highest_sack(&options(&[5, 10, 0, 0, 0, 1]), 6, 9), 9);
    // End of list.
    assert_eq!(highest_sack(&options(&[0, 5, 10]), 12, 9), 9);
}

#[test]
fn a_sack_beyond_the_receivers_end_is_invalid() {
    let mut w = established();
    let mut seg = data(5001, 1001, 0);
    seg.sack = 1001 + 5000;
    assert_eq!(judge(&mut w, 1, &seg, false, false), Some(Verdict::Invalid));
}

#[test]
fn an_rst_at_what_the_peer_acknowledged_closes_and_one_beside_it_keeps_the_connection() {
    let w = established();
    // The server acknowledged 1001: an RST from the client there closes, as it would anywhere
    // before the handshake completed or where the server acknowledged nothing.
    assert!(rst_ends(&w, 0, 1001, true));
    assert!(rst_ends(&w, 0, 1001 + 1000, false));
    let mut unacknowledged = w;
    unacknowledged.seen[1].flags &= !FLAG_MAXACK_SET;
    assert!(rst_ends(&unacknowledged, 0, 1001 + 1000, true));
    // Elsewhere in the window: conntrack keeps ESTABLISHED for the challenge ACK.
    assert!(!rst_ends(&w, 0, 1001 + 1000, true));
    assert!(!rst_ends(&w, 1, 5001 + 1000, true));
}

#[test]
fn an_rst_closes_where_conntrack_lets_it_through_and_while_opening_unless_invalid() {
    use Verdict::{Accept, Ignore, Invalid};
    for verdict in [Accept, Ignore, Invalid] {
        // Not closing by `rst_ends`: nothing closes, opening or not.
        for opening in [false, true] {
            assert_eq!(
                Judgement::of_rst(verdict, false, opening),
                Judgement::kept(verdict)
            );
        }
    }
    // Established: only an RST conntrack accepts moves it to CLOSE.
    assert!(Judgement::of_rst(Accept, true, false).closes);
    assert!(!Judgement::of_rst(Ignore, true, false).closes);
    assert!(!Judgement::of_rst(Invalid, true, false).closes);
    // Opening: any RST it does not mark INVALID.
    assert!(Judgement::of_rst(Accept, true, true).closes);
    assert!(Judgement::of_rst(Ignore, true, true).closes);
    assert!(!Judgement::of_rst(Invalid, true, true).closes);
    assert_eq!(Judgement::of_rst(Ignore, true, true).verdict, Ignore);
}

#[test]
fn an_rst_ending_a_train_of_the_senders_closes() {
    let mut w = established();
    let sent = data(1001, 5001, 100);
    assert_eq!(judge(&mut w, 0, &sent, false, false), Some(Verdict::Accept));
    // The client's data ended at 1101; the server has not acknowledged it (td_maxack 1001).
    assert!(
        rst_ends(&w, 0, 1101, true),
        "the RST at the end of the train"
    );
    assert!(!rst_ends(&w, 0, 1050, true), "inside the train");
    // Once the server's segment came last, the train is over.
    let answer = data(5001, 1101, 0);
    assert_eq!(
        judge(&mut w, 1, &answer, false, false),
        Some(Verdict::Accept)
    );
    assert!(!rst_ends(&w, 0, 1101 + 10, true));
    assert!(
        rst_ends(&w, 0, 1101, true),
        "at what the server acknowledged"
    );
    // A FIN is no ACK of the kind: an RST after it at its end keeps the connection.
    let fin = Segment::new(1101, 5001, 512, TCP_FIN | TCP_ACK, 0);
    assert_eq!(judge(&mut w, 0, &fin, false, false), Some(Verdict::Accept));
    assert!(!rst_ends(&w, 0, 1102, true));
}

#[test]
fn the_last_ack_of_both_fins_closes_the_copy() {
    let mut w = established();
    let fin = Segment::new(1001, 5001, 512, TCP_FIN | TCP_ACK, 0);
    assert_eq!(judge(&mut w, 0, &fin, false, false), Some(Verdict::Accept));
    assert!(!closes(&w, 0, &fin));
    let fin_ack = Segment::new(5001, 1002, 512, TCP_FIN | TCP_ACK, 0);
    assert_eq!(
        judge(&mut w, 1, &fin_ack, false, false),
        Some(Verdict::Accept)
    );
    assert!(
        !closes(&w, 1, &fin_ack),
        "the server's FIN is not acknowledged yet"
    );
    let last = Segment::new(1002, 5002, 512, TCP_ACK, 0);
    assert_eq!(judge(&mut w, 0, &last, false, false), Some(Verdict::Accept));
    assert!(closes(&w, 0, &last));
}

/// A SYN's options as Linux sends them: MSS 1460, SACK permitted, timestamps, window scale 7.
const LINUX_SYN_OPTIONS: [u8; 20] = [
    2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
];

fn syn(seq: u32, win: u16) -> Segment {
    Segment::new(seq, 0, win, TCP_SYN, 0)
}

/// The copy the client's SYN (ISN 1000, Linux's options) starts.
fn opened() -> TcpWindow {
    let mut w = TcpWindow::default();
    let opts = options(&LINUX_SYN_OPTIONS);
    open(
        &mut w,
        &syn(1000, 64240),
        &opts,
        LINUX_SYN_OPTIONS.len(),
        false,
    );
    w
}

/// The handshake of `established()`'s connection, as the fast path sees it: the client's SYN
/// (ISN 1000), the server's SYN-ACK (ISN 5000), the client's ACK.
fn handshake() -> TcpWindow {
    let opts = options(&LINUX_SYN_OPTIONS);
    let mut w = opened();
    let syn_ack = Segment::new(5000, 1001, 65160, TCP_SYN | TCP_ACK, 0);
    assert!(restarts(&w, 1, &syn_ack, true));
    let verdict = answer(&mut w, 1, &syn_ack, &opts, LINUX_SYN_OPTIONS.len(), false);
    assert_eq!(verdict, Verdict::Accept);
    let ack = Segment::new(1001, 5001, 502, TCP_ACK, 0);
    assert_eq!(judge(&mut w, 0, &ack, false, false), Some(Verdict::Accept));
    w
}

#[test]
fn a_syns_options_give_its_scale_and_sack_as_tcp_options_reads_them() {
    let mut side = TcpSide::default();
    syn_options(
        &mut side,
        &options(&LINUX_SYN_OPTIONS),
        LINUX_SYN_OPTIONS.len(),
    );
    assert_eq!(side.td_scale, 7);
    assert_eq!(side.flags, FLAG_WINDOW_SCALE | FLAG_SACK_PERM);
    // A scale past 14 is taken as 14; a window option of the wrong size is skipped.
    let mut side = TcpSide::default();
    syn_options(&mut side, &options(&[3, 3, 20, 1]), 4);
    assert_eq!((side.td_scale, side.flags), (14, FLAG_WINDOW_SCALE));
    let mut side = TcpSide::default();
    syn_options(&mut side, &options(&[3, 4, 7, 0, 4, 2, 0, 0]), 8);
    assert_eq!((side.td_scale, side.flags), (0, FLAG_SACK_PERM));
    // A silly size ends the parse; liberal tracking survives it; no options change nothing.
    let mut side = TcpSide {
        td_scale: 5,
        flags: FLAG_BE_LIBERAL | FLAG_WINDOW_SCALE,
        ..TcpSide::default()
    };
    syn_options(&mut side, &options(&[1, 3, 1, 7, 4, 2, 0, 0]), 8);
    assert_eq!((side.td_scale, side.flags), (0, FLAG_BE_LIBERAL));
    let before = side;
    syn_options(&mut side, &options(&[]), 0);
    assert_eq!(side, before);
}

#[test]
fn a_handshake_leaves_the_windows_conntrack_would_hold() {
    let w = handshake();
    let [client, server] = w.seen;
    assert_eq!((client.td_end, client.td_scale), (1001, 7));
    assert_eq!((server.td_end, server.td_scale), (5001, 7));
    assert_eq!(server.td_maxwin, 65160, "a SYN's window is not scaled");
    // The client's ACK advertised more than its SYN (502 << 7 = 64256).
    assert_eq!(client.td_maxwin, 502 << 7);
    assert_eq!(client.td_maxack, 5001);
    assert_eq!(server.td_maxack, 1001);
    // The server may send up to the client's last scaled window past what it acknowledged.
    assert_eq!(server.td_maxend, 5001 + (502 << 7));
    assert_eq!(client.td_maxend, 1001 + 65160);
    assert_eq!(client.flags & FLAG_SACK_PERM, FLAG_SACK_PERM);
}

#[test]
fn scaling_holds_only_where_both_sides_offer_it() {
    let mut w = opened();
    let syn_ack = Segment::new(5000, 1001, 65160, TCP_SYN | TCP_ACK, 0);
    // The server's SYN-ACK offers SACK alone.
    answer(&mut w, 1, &syn_ack, &options(&[4, 2, 1, 1]), 4, false);
    assert_eq!((w.seen[0].td_scale, w.seen[1].td_scale), (0, 0));
}

#[test]
fn after_a_handshake_data_in_window_passes_and_a_segment_windows_away_does_not() {
    let mut w = handshake();
    assert_eq!(
        judge(&mut w, 0, &data(1001, 5001, 1000), false, false),
        Some(Verdict::Accept)
    );
    assert_eq!(
        judge(&mut w, 1, &data(5001, 2001, 1448), false, false),
        Some(Verdict::Accept)
    );
    // Ten of the server's windows on: conntrack marks it INVALID.
    let far = 2001u32.wrapping_add(10 * (65160 << 7));
    assert_eq!(
        judge(&mut w, 0, &data(far, 6449, 100), false, false),
        Some(Verdict::Invalid)
    );
    // A forged RST far from the window is INVALID, one at the window's edge is not.
    let rst = |seq| Segment::new(seq, 0, 0, TCP_RST, 0);
    assert_eq!(
        judge(&mut w, 0, &rst(far), false, false),
        Some(Verdict::Invalid)
    );
    assert_eq!(
        judge(&mut w, 0, &rst(2001), false, false),
        Some(Verdict::Accept)
    );
}

#[test]
fn a_client_starting_again_with_a_later_syn_restarts_its_side_while_opening() {
    let mut w = opened();
    let again = syn(90_000, 64240);
    assert!(restarts(&w, 0, &again, true));
    assert!(!restarts(&w, 0, &again, false), "not once established");
    assert!(
        !restarts(&w, 0, &syn(1000, 64240), true),
        "a retransmission"
    );
    answer(&mut w, 0, &again, &options(&LINUX_SYN_OPTIONS), 20, false);
    assert_eq!(w.seen[0].td_end, 90_001);
}

/// Two CPUs carry segments of the client's side at once, each judged on the same snapshot;
/// the one with the lower end is published last. Stored whole, it would put `td_end` back, and
/// the server's ACK of the higher end would be INVALID (left to conntrack, whose windows are
/// behind: the host resets the connection). Merged, the copy holds both, in either order.
#[test]
fn segments_judged_at_once_on_two_cpus_merge_without_putting_a_bound_back() {
    let before = established();
    let (mut first, mut second) = (before, before);
    assert_eq!(
        judge(&mut first, 0, &data(1001, 5001, 1448), false, false),
        Some(Verdict::Accept)
    );
    assert_eq!(
        judge(&mut second, 0, &data(1001 + 1448, 5001, 1448), false, false),
        Some(Verdict::Accept)
    );
    let ack_of_both = Segment::new(5001, 1001 + 2 * 1448, 1024, TCP_ACK, 0);
    // The old way: each CPU stored its copy whole; the lower end came last.
    let mut overwritten = first;
    assert_eq!(
        judge(&mut overwritten, 1, &ack_of_both, false, false),
        Some(Verdict::Invalid),
        "the lost update this guards against"
    );
    for (a, b) in [(first, second), (second, first)] {
        let shared = merge::merged(&merge::merged(&before, &before, &a), &before, &b);
        assert_eq!(shared.seen[0].td_end, 1001 + 2 * 1448);
        assert_ne!(shared.seen[0].flags & FLAG_DATA_UNACKNOWLEDGED, 0);
        let mut shared = shared;
        assert_eq!(
            judge(&mut shared, 1, &ack_of_both, false, false),
            Some(Verdict::Accept)
        );
    }
}

/// What the other side's judgement moved meanwhile is kept: a merge changes only the words
/// this judgement changed, and a flag it cleared is cleared while one another set stays.
#[test]
fn a_merge_keeps_what_another_cpu_moved_meanwhile() {
    let before = established();
    let mut client = before;
    judge(&mut client, 0, &data(1001, 5001, 1448), false, false);
    let shared = merge::merged(&before, &before, &client);
    // The server's ACK of it, judged on the snapshot from before the client's segment landed:
    // it clears DATA_UNACKNOWLEDGED on a side where it was not set yet, and moves the
    // client's td_maxend.
    let mut server = client;
    judge(
        &mut server,
        1,
        &Segment::new(5001, 1001 + 1448, 1024, TCP_ACK, 0),
        false,
        false,
    );
    let shared = merge::merged(&shared, &client, &server);
    assert_eq!(shared.seen[0].td_end, 1001 + 1448, "the client's end stays");
    assert_eq!(shared.seen[0].td_maxend, 1001 + 1448 + (1024 << 7));
    assert_eq!(shared.seen[0].flags & FLAG_DATA_UNACKNOWLEDGED, 0);
    // An older judgement published late puts no bound or window back (its flags and
    // `last_ack`, the last writer's, may come back: neither decides a verdict but an RST's).
    let stale = merge::merged(&shared, &before, &client);
    for (s, t) in stale.seen.iter().zip(&shared.seen) {
        assert_eq!(
            (s.td_end, s.td_maxend, s.td_maxwin, s.td_maxack),
            (t.td_end, t.td_maxend, t.td_maxwin, t.td_maxack)
        );
    }
}
