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

/// The most option bytes an IPv4 header holds: fifteen words less the header's five.
pub const IPV4_OPTIONS_MAX: usize = 40;
/// IPv4's end-of-options and no-operation options, one byte each.
const IPOPT_END: u8 = 0;
const IPOPT_NOOP: u8 = 1;

/// Whether the first `len` bytes of `options` are padding only: no-operations, and from
/// the first end-of-list on, end-of-list bytes only. `ip_options_compile` takes those and
/// the forwarding path leaves them as they are; it rewrites any byte after an end-of-list
/// to one, and judges or fills in every other option (record route, timestamps, source
/// routes), so a header holding anything else is not one a fast path may carry as it is.
#[inline(always)]
pub const fn ipv4_options_padding_only(options: &[u8; IPV4_OPTIONS_MAX], len: usize) -> bool {
    let mut ended = false;
    let mut i = 0;
    while i < IPV4_OPTIONS_MAX && i < len {
        match options[i] {
            IPOPT_END => ended = true,
            IPOPT_NOOP if !ended => {}
            _ => return false,
        }
        i += 1;
    }
    true
}

/// Whether an IPv4 header with `len` bytes of options sums to zero (`ip_fast_csum` over
/// all of it, as `ip_rcv` checks).
#[inline(always)]
pub const fn ipv4_header_with_options_checksum_ok(
    header: &[u8; IPV4_HLEN],
    options: &[u8; IPV4_OPTIONS_MAX],
    len: usize,
) -> bool {
    let mut sum: u32 = 0;
    let mut i = 0;
    while i < IPV4_HLEN {
        sum += ((header[i] as u32) << 8) | header[i + 1] as u32;
        i += 2;
    }
    i = 0;
    while i < IPV4_OPTIONS_MAX && i < len {
        sum += ((options[i] as u32) << 8) | options[i + 1] as u32;
        i += 2;
    }
    fold(sum) == 0xffff
}

/// [`ipv4_header_valid`] for a header with `len` bytes of options (whose version and length
/// the caller read to find them): a checksum over all of it that sums to zero, a total length
/// at least the header's and at most the `l3_len` bytes the frame holds. The options' own
/// validity is [`ipv4_options_padding_only`]'s to judge.
#[inline(always)]
pub const fn ipv4_header_with_options_valid(
    header: &[u8; IPV4_HLEN],
    options: &[u8; IPV4_OPTIONS_MAX],
    len: usize,
    l3_len: usize,
) -> bool {
    let total = u16::from_be_bytes([header[2], header[3]]) as usize;
    ipv4_header_with_options_checksum_ok(header, options, len)
        && total >= IPV4_HLEN + len
        && total <= l3_len
}

/// The length of the one-unit IPv6 extension headers below: a hop-by-hop header of eight
/// bytes, a fragment header.
pub const IPV6_EXTENSION_UNIT: usize = 8;
/// IPv6's Pad1 and PadN options.
const IPV6_PAD1: u8 = 0;
const IPV6_PADN: u8 = 1;

/// Whether an IPv6 hop-by-hop header of one unit holds padding only: Pad1 and PadN options
/// (PadN's bytes zero) filling its six option bytes, as `ip6_parse_tlv` takes them without
/// acting on any. Anything else (a router alert, a jumbo payload, an unknown option whose
/// type says discard) is the stack's to judge.
#[inline(always)]
pub const fn ipv6_hop_by_hop_padding_only(header: &[u8; IPV6_EXTENSION_UNIT]) -> bool {
    if header[1] != 0 {
        return false;
    }
    let mut at = 2;
    while at < IPV6_EXTENSION_UNIT {
        match header[at] {
            IPV6_PAD1 => at += 1,
            IPV6_PADN => {
                if at + 1 >= IPV6_EXTENSION_UNIT {
                    return false;
                }
                let end = at + 2 + header[at + 1] as usize;
                if end > IPV6_EXTENSION_UNIT {
                    return false;
                }
                let mut i = at + 2;
                while i < end {
                    if header[i] != 0 {
                        return false;
                    }
                    i += 1;
                }
                at = end;
            }
            _ => return false,
        }
    }
    true
}

/// Whether conntrack's IPv6 defragmentation passes a packet whose only extension header is
/// this fragment header on as it is, unreassembled, with `payload_len` its IPv6 payload
/// length: a first fragment (offset 0, more to come) whose end is not a multiple of eight
/// (`nf_ct_frag6_queue` gives up on it with `-EPROTO`, and `nf_ct_frag6_gather` lets it
/// through, for the receiver to answer with a parameter problem). Conntrack then tracks it
/// by the headers it has. Every other fragment it holds for reassembly (or drops).
#[inline(always)]
pub const fn ipv6_fragment_passed_on(header: &[u8; IPV6_EXTENSION_UNIT], payload_len: u16) -> bool {
    let offset_and_more = u16::from_be_bytes([header[2], header[3]]);
    let end = (payload_len as usize).saturating_sub(IPV6_EXTENSION_UNIT);
    offset_and_more & !0x7 == 0 && offset_and_more & 0x1 == 1 && end & 0x7 != 0
}

#[cfg(test)]
mod tests;
