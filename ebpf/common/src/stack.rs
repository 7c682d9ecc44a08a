//! What the host's stack takes of an IP header before it lets a packet further (`ip_rcv`,
//! `ipv6_rcv`, and on a bridge with `br_netfilter`, `br_validate_ipv4` / `br_validate_ipv6` and
//! conntrack's defragmentation): the fast paths hand on only what the stack would, and leave
//! the rest to it. `l3_len` is what the frame holds after its Ethernet header, by the frame's
//! own length (all of it, not only what the program can read directly).
/// An IPv4 header without options.
pub const IPV4_HLEN: usize = 20;
/// IPv6's fixed header.
pub const IPV6_HLEN: usize = 40;

/// Whether an IPv4 header without options sums to zero, as `ip_rcv` requires before it
/// lets a packet further.
#[inline(always)]
pub const fn ipv4_header_checksum_ok(header: &[u8; 20]) -> bool {
    let mut sum: u32 = 0;
    let mut i = 0;
    while i < 20 {
        sum += ((header[i] as u32) << 8) | header[i + 1] as u32;
        i += 2;
    }
    // Ten words sum to less than 2^20: two folds carry every bit back, and a loop "until
    // no carry is left" would be one the verifier walks state by state.
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum == 0xffff
}

/// Whether `header` is an IPv4 header without options that the stack takes: version 4 and
/// five words, a checksum that sums to zero, a total length at least the header's and at
/// most the `l3_len` bytes the frame holds (a frame shorter than its packet is dropped; a
/// longer one is trimmed). Options are not judged here (`ip_options_compile` may refuse
/// them): a header with options is not valid by this check, so it is left to the stack.
#[inline(always)]
pub const fn ipv4_header_valid(header: &[u8; IPV4_HLEN], l3_len: usize) -> bool {
    let total = u16::from_be_bytes([header[2], header[3]]) as usize;
    header[0] == 0x45 && ipv4_header_checksum_ok(header) && total >= IPV4_HLEN && total <= l3_len
}

/// Whether an IPv4 header is a fragment's, first or later (more-fragments bit or a
/// fragment offset): conntrack holds it for reassembly, and a lone one never passes.
#[inline(always)]
pub const fn ipv4_fragment(header: &[u8; IPV4_HLEN]) -> bool {
    header[6] & 0x3f != 0 || header[7] != 0
}

/// A ones'-complement sum of 32 bits folded to 16: 0xffff where a checksum is right.
#[inline(always)]
pub const fn fold(sum: u32) -> u16 {
    // Two folds carry every bit back: a loop "until no carry is left" would be one the
    // verifier walks state by state.
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// Whether an IPv6 payload length of `payload_len` fits the `l3_len` bytes the frame holds.
#[inline(always)]
pub const fn ipv6_length_valid(payload_len: u16, l3_len: usize) -> bool {
    IPV6_HLEN + payload_len as usize <= l3_len
}
