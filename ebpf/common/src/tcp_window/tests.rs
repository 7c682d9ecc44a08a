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
        _pad: 0,
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
