use super::*;

#[test]
fn ring_indices_run_free_and_wrap() {
    let ring = Ring::new(8).unwrap();
    assert_eq!(ring.filled(5, 2), 3);
    assert_eq!(ring.free(5, 2), 5);
    assert_eq!(ring.free(10, 2), 0);
    // The producer has wrapped past u32::MAX and the consumer not yet.
    assert_eq!(ring.filled(2, u32::MAX - 1), 4);
    assert_eq!(ring.free(2, u32::MAX - 1), 4);
    assert_eq!(ring.slot(9), 1);
    assert_eq!(ring.slot(u32::MAX), 7);
    assert_eq!(ring.slot(u32::MAX.wrapping_add(1)), 0);
    assert!(Ring::new(6).is_err());
    assert!(Ring::new(0).is_err());
}

#[test]
fn only_frames_like_the_flows_count_as_its() {
    let sent = [1u8, 2, 3, 4, 9, 9];
    let expected = Expected::like(&sent, 4);
    let mut tally = Tally::default();
    tally.count(&expected, Some(&sent));
    tally.count(&expected, Some(&[1, 2, 3, 4, 0, 0]));
    tally.count(&expected, Some(&[1, 2, 3, 5, 9, 9]));
    tally.count(&expected, Some(&[1, 2, 3, 4, 9]));
    tally.count(&expected, None);
    assert_eq!(
        tally,
        Tally {
            frames: 2,
            bytes: 12,
            other: 3
        }
    );
    assert!(Expected::like(&[1, 2], 4).matches(&[1, 2]));
}
