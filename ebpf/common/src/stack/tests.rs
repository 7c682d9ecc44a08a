use super::*;

/// `len` option bytes from `bytes`, zero-filled as the programs read them.
fn options(bytes: &[u8]) -> [u8; IPV4_OPTIONS_MAX] {
    let mut out = [0u8; IPV4_OPTIONS_MAX];
    out[..bytes.len()].copy_from_slice(bytes);
    out
}

#[test]
fn ipv4_padding_is_no_operations_then_end_of_list_bytes() {
    assert!(ipv4_options_padding_only(&options(&[1, 1, 1, 1]), 4));
    assert!(ipv4_options_padding_only(&options(&[1, 1, 0, 0]), 4));
    assert!(ipv4_options_padding_only(&options(&[0, 0, 0, 0]), 4));
    assert!(ipv4_options_padding_only(&options(&[1; 40]), 40));
    assert!(
        !ipv4_options_padding_only(&options(&[0, 1, 1, 1]), 4),
        "the stack rewrites a no-operation after the end of the list"
    );
    // Record route (7), timestamp (68), loose source route (131), router alert (148).
    for kind in [7u8, 68, 131, 148] {
        assert!(
            !ipv4_options_padding_only(&options(&[kind, 4, 5, 0]), 4),
            "option {kind}"
        );
    }
    assert!(
        ipv4_options_padding_only(&options(&[1, 1, 1, 1, 7, 7, 7, 7]), 4),
        "bytes past the header's length are not options"
    );
}

/// An IPv4 header of five words plus `extra` option bytes, its checksum filled in.
fn header_with_options(extra: &[u8]) -> ([u8; IPV4_HLEN], [u8; IPV4_OPTIONS_MAX]) {
    let mut header = [
        0x45, 0, 0, 48, 0x12, 0x34, 0x40, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    header[0] = 0x40 | (5 + extra.len() / 4) as u8;
    let opts = options(extra);
    let mut sum: u32 = 0;
    for pair in header.chunks(2).chain(extra.chunks(2)) {
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    let checksum = !fold(sum);
    header[10..12].copy_from_slice(&checksum.to_be_bytes());
    (header, opts)
}

#[test]
fn an_ipv4_header_with_options_sums_its_options_too() {
    let (header, opts) = header_with_options(&[1, 1, 1, 1]);
    assert!(ipv4_header_with_options_checksum_ok(&header, &opts, 4));
    assert!(
        !ipv4_header_with_options_checksum_ok(&header, &opts, 0),
        "the options are part of the sum"
    );
    let mut spoiled = opts;
    spoiled[1] = 0;
    assert!(!ipv4_header_with_options_checksum_ok(&header, &spoiled, 4));
    let (bare, none) = header_with_options(&[]);
    assert!(ipv4_header_with_options_checksum_ok(&bare, &none, 0));
    assert_eq!(
        ipv4_header_with_options_checksum_ok(&bare, &none, 0),
        ipv4_header_checksum_ok(&bare),
        "without options, the same check as the header's own"
    );
    let (long, long_opts) = header_with_options(&[1; 40]);
    assert!(ipv4_header_with_options_checksum_ok(&long, &long_opts, 40));
}

#[test]
fn an_ipv4_header_with_options_is_valid_where_its_length_holds_it_and_fits_the_frame() {
    // A total length of 48: 24 bytes of header, 24 of payload.
    let (header, opts) = header_with_options(&[1, 1, 1, 1]);
    assert!(ipv4_header_with_options_valid(&header, &opts, 4, 48));
    assert!(
        ipv4_header_with_options_valid(&header, &opts, 4, 60),
        "a frame longer than its packet is trimmed"
    );
    assert!(
        !ipv4_header_with_options_valid(&header, &opts, 4, 47),
        "a frame shorter than its packet"
    );
    let mut spoiled = opts;
    spoiled[3] = 0;
    assert!(!ipv4_header_with_options_valid(&header, &spoiled, 4, 48));
    // A total length of 20 is shorter than a header of 24: its checksum filled in again.
    let mut short = header;
    short[3] = 20;
    let mut sum: u32 = 0;
    short[10..12].fill(0);
    for pair in short.chunks(2).chain([1u8, 1, 1, 1].chunks(2)) {
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    short[10..12].copy_from_slice(&(!fold(sum)).to_be_bytes());
    assert!(ipv4_header_with_options_checksum_ok(&short, &opts, 4));
    assert!(
        !ipv4_header_with_options_valid(&short, &opts, 4, 48),
        "a total length shorter than the header"
    );
}

#[test]
fn a_hop_by_hop_header_of_padding_is_pad1_and_zeroed_padn_filling_it() {
    // Next header ICMPv6 (58), one unit; then six option bytes.
    assert!(ipv6_hop_by_hop_padding_only(&[58, 0, 1, 4, 0, 0, 0, 0]));
    assert!(ipv6_hop_by_hop_padding_only(&[58, 0, 0, 0, 0, 0, 0, 0]));
    assert!(ipv6_hop_by_hop_padding_only(&[58, 0, 0, 1, 3, 0, 0, 0]));
    assert!(ipv6_hop_by_hop_padding_only(&[58, 0, 1, 0, 1, 0, 0, 0]));
    assert!(
        !ipv6_hop_by_hop_padding_only(&[58, 0, 1, 4, 0, 9, 0, 0]),
        "PadN's bytes are zero"
    );
    assert!(
        !ipv6_hop_by_hop_padding_only(&[58, 0, 1, 5, 0, 0, 0, 0]),
        "a PadN past the header's end"
    );
    assert!(
        !ipv6_hop_by_hop_padding_only(&[58, 0, 0, 0, 0, 0, 0, 1]),
        "a PadN without its length"
    );
    assert!(
        !ipv6_hop_by_hop_padding_only(&[58, 0, 5, 2, 0, 0, 1, 0]),
        "a router alert"
    );
    assert!(
        !ipv6_hop_by_hop_padding_only(&[58, 1, 1, 4, 0, 0, 0, 0]),
        "a header of two units"
    );
}

#[test]
fn conntrack_passes_on_only_a_first_fragment_whose_end_is_not_a_multiple_of_eight() {
    // Next header ICMPv6, reserved, offset and more-fragments, identification.
    let first = [58, 0, 0, 1, 0, 0, 0, 7];
    // A fragment header and 73 bytes of ICMPv6.
    assert!(ipv6_fragment_passed_on(&first, 8 + 73));
    assert!(
        !ipv6_fragment_passed_on(&first, 8 + 72),
        "a multiple of eight is held for reassembly"
    );
    let last = [58, 0, 0, 0, 0, 0, 0, 7];
    assert!(!ipv6_fragment_passed_on(&last, 8 + 73), "no more to come");
    let later = [58, 0, 0, 9, 0, 0, 0, 7];
    assert!(!ipv6_fragment_passed_on(&later, 8 + 73), "an offset");
}
