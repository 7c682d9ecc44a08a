//! A case's frame, built with etherparse: the headers are etherparse's, the edges are their
//! fields set to what the case asks (a checksum off, a length too long), never bytes by hand.

use std::net::{IpAddr, Ipv6Addr};

use etherparse::{
    ArpEthIpv4Packet, ArpOperation, EtherType, Ethernet2Header, Icmpv4Header, Icmpv4Type,
    Icmpv6Header, Icmpv6Type, IpFragOffset, IpNumber, Ipv4Header, Ipv6FlowLabel,
    Ipv6FragmentHeader, Ipv6Header, Ipv6RawExtHeader, SingleVlanHeader, TcpHeader, UdpHeader,
    VlanId, VlanPcp, icmpv4::DestUnreachableHeader, icmpv6::NeighborAdvertisementHeader,
};

use super::case::{Case, L2, L3Edge, L4, Port, TcpFlags, UdpLength};

/// What a case's addresses became on the topology.
pub struct Target {
    pub src_mac: [u8; 6],
    pub nic_mac: [u8; 6],
    pub src: IpAddr,
    /// The published address.
    pub dst: IpAddr,
    pub tcp_port: u16,
    pub udp_port: u16,
    /// For an MTU error: the packet it quotes, from its IP header on.
    pub quote: Vec<u8>,
    /// A TCP segment's sequence and acknowledgment numbers, where they are a live
    /// connection's; otherwise the case's own, far from any window.
    pub tcp_numbers: Option<(u32, u32)>,
}

/// The MTUs the errors announce: above each family's minimum, below the container's 1500.
pub const MTU4: u16 = 600;
pub const MTU6: u32 = 1280;

/// Flipped bits that turn a right checksum into a wrong one.
const SPOIL: u16 = 0x0101;

/// A MAC from its text (`02:42:0a:e7:00:02`, as sysfs and Docker write it).
pub fn mac(text: &str) -> [u8; 6] {
    let bytes: Vec<u8> = text
        .trim()
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).expect("a MAC byte"))
        .collect();
    bytes.try_into().expect("six bytes")
}

/// The whole frame of `case` on `target`.
pub fn frame(case: &Case, target: &Target) -> Vec<u8> {
    let spoil_l4 = spoils_layer4(case, target.src.is_ipv6());
    let (proto, l4) = transport(case, target, spoil_l4);
    let ip_type = if target.dst.is_ipv4() {
        EtherType::IPV4
    } else {
        EtherType::IPV6
    };
    let mut out = link(case, target, ip_type);
    match (target.src, target.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => ipv4(case, src.octets(), dst.octets(), proto, &l4)
            .write_raw(&mut out)
            .expect("IPv4 header"),
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            ipv6(case, src.octets(), dst.octets(), proto, &l4, &mut out)
        }
        _ => panic!("case {case}: source and destination of different families"),
    }
    out.extend_from_slice(&l4);
    out
}

/// The Ethernet header (and VLAN tag) of `case` on `target`, for a payload of `ip_type`.
fn link(case: &Case, target: &Target, ip_type: EtherType) -> Vec<u8> {
    let destination = match (case.l2, target.dst) {
        (L2::NicMac | L2::Vlan, _) => target.nic_mac,
        (L2::Broadcast, _) => [0xff; 6],
        (L2::Multicast, IpAddr::V4(_)) => [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01],
        // A neighbour solicitation's multicast goes to the target's solicited-node group.
        (L2::Multicast, IpAddr::V6(dst)) if ip_type == EtherType::IPV6 && is_solicited(dst) => {
            let o = dst.octets();
            [0x33, 0x33, 0xff, o[13], o[14], o[15]]
        }
        (L2::Multicast, IpAddr::V6(_)) => [0x33, 0x33, 0x00, 0x00, 0x00, 0x01],
        (L2::ForeignMac, _) => [0x02, 0x00, 0x5e, 0x10, 0xee, 0x01],
    };
    let mut out = Vec::new();
    let tagged = case.l2 == L2::Vlan;
    Ethernet2Header {
        source: target.src_mac,
        destination,
        ether_type: if tagged {
            EtherType::VLAN_TAGGED_FRAME
        } else {
            ip_type
        },
    }
    .write(&mut out)
    .expect("Ethernet header");
    if tagged {
        SingleVlanHeader {
            pcp: VlanPcp::ZERO,
            drop_eligible_indicator: false,
            vlan_id: VlanId::try_new(236).expect("a VLAN id"),
            ether_type: ip_type,
        }
        .write(&mut out)
        .expect("VLAN header");
    }
    out
}

fn ipv4(case: &Case, src: [u8; 4], dst: [u8; 4], proto: IpNumber, l4: &[u8]) -> Ipv4Header {
    let mut ip = Ipv4Header::new(0, case.ttl, proto, src, dst).expect("IPv4 header");
    ip.identification = case.index as u16;
    if case.l3 == L3Edge::Options {
        // Four NOPs: options that ask nothing of anyone, only make the header longer.
        ip.options = [1u8, 1, 1, 1][..].try_into().expect("IPv4 options");
    }
    ip.set_payload_len(l4.len()).expect("IPv4 length");
    match case.l3 {
        L3Edge::FirstFragment => ip.more_fragments = true,
        L3Edge::LaterFragment => {
            ip.fragment_offset = IpFragOffset::try_new(64).expect("an offset");
        }
        L3Edge::LongerThanFrame => ip.total_len += 40,
        _ => {}
    }
    ip.header_checksum = ip.calc_header_checksum();
    if case.l3 == L3Edge::BadChecksum && !spoils_layer4(case, false) {
        ip.header_checksum ^= SPOIL;
    }
    ip
}

/// Whether the case's bad checksum is its layer 4's: always for IPv6, which has no header
/// checksum; for IPv4 in odd-numbered cases (the header's in even ones), decided by the
/// number so that the seed's stream of cases stays as it was.
fn spoils_layer4(case: &Case, v6: bool) -> bool {
    case.l3 == L3Edge::BadChecksum && (v6 || case.index % 2 == 1)
}

fn ipv6(case: &Case, src: [u8; 16], dst: [u8; 16], proto: IpNumber, l4: &[u8], out: &mut Vec<u8>) {
    let mut extension = Vec::new();
    let next_header = match case.l3 {
        L3Edge::Options => {
            // One PadN option filling the header to 8 bytes.
            Ipv6RawExtHeader::new_raw(proto, &[1, 4, 0, 0, 0, 0])
                .expect("hop-by-hop header")
                .write(&mut extension)
                .expect("hop-by-hop header");
            IpNumber::IPV6_HEADER_HOP_BY_HOP
        }
        L3Edge::FirstFragment | L3Edge::LaterFragment => {
            let later = case.l3 == L3Edge::LaterFragment;
            let offset = IpFragOffset::try_new(if later { 64 } else { 0 }).expect("an offset");
            Ipv6FragmentHeader::new(proto, offset, !later, case.index as u32)
                .write(&mut extension)
                .expect("fragment header");
            IpNumber::IPV6_FRAGMENTATION_HEADER
        }
        _ => proto,
    };
    let mut payload_length = (extension.len() + l4.len()) as u16;
    if case.l3 == L3Edge::LongerThanFrame {
        payload_length += 40;
    }
    Ipv6Header {
        traffic_class: 0,
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length,
        next_header,
        hop_limit: case.ttl,
        source: src,
        destination: dst,
    }
    .write(out)
    .expect("IPv6 header");
    out.extend_from_slice(&extension);
}

/// The layer-4 bytes, checksummed over the pseudo-header of the target's addresses.
fn transport(case: &Case, target: &Target, spoil: bool) -> (IpNumber, Vec<u8>) {
    let port = |port: Port, published: u16| match port {
        Port::Published => published,
        Port::Beside => published.wrapping_add(1),
        Port::Number(n) => n,
    };
    let mut out = Vec::new();
    match case.l4 {
        L4::Tcp {
            flags,
            sport,
            dport,
            payload,
        } => {
            let data = vec![b't'; payload as usize];
            let (seq, ack) = target
                .tcp_numbers
                .unwrap_or((0x1000_0000 + case.index as u32, 1));
            let mut tcp = TcpHeader::new(sport, port(dport, target.tcp_port), seq, 64240);
            let bits = flags.0;
            tcp.fin = bits & TcpFlags::FIN != 0;
            tcp.syn = bits & TcpFlags::SYN != 0;
            tcp.rst = bits & TcpFlags::RST != 0;
            tcp.psh = bits & TcpFlags::PSH != 0;
            tcp.ack = bits & TcpFlags::ACK != 0;
            tcp.urg = bits & TcpFlags::URG != 0;
            if tcp.ack {
                tcp.acknowledgment_number = ack;
            }
            tcp.checksum = match (target.src, target.dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    tcp.calc_checksum_ipv4_raw(s.octets(), d.octets(), &data)
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    tcp.calc_checksum_ipv6_raw(s.octets(), d.octets(), &data)
                }
                _ => unreachable!("one family per case"),
            }
            .expect("TCP checksum");
            if spoil {
                tcp.checksum ^= SPOIL;
            }
            tcp.write(&mut out).expect("TCP header");
            out.extend_from_slice(&data);
            (IpNumber::TCP, out)
        }
        L4::Udp {
            sport,
            dport,
            payload,
            length,
        } => {
            let data = vec![b'u'; payload as usize];
            let mut udp = UdpHeader {
                source_port: sport,
                destination_port: port(dport, target.udp_port),
                length: (UdpHeader::LEN + data.len()) as u16,
                checksum: 0,
            };
            udp.checksum = match (target.src, target.dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    udp.calc_checksum_ipv4_raw(s.octets(), d.octets(), &data)
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    udp.calc_checksum_ipv6_raw(s.octets(), d.octets(), &data)
                }
                _ => unreachable!("one family per case"),
            }
            .expect("UDP checksum");
            if spoil {
                udp.checksum ^= SPOIL;
            }
            // After the checksum: the stack checks the length first and drops on it.
            match length {
                UdpLength::Exact => {}
                UdpLength::TooLong => udp.length += 16,
                UdpLength::TooShort => udp.length = 4,
            }
            udp.write(&mut out).expect("UDP header");
            out.extend_from_slice(&data);
            (IpNumber::UDP, out)
        }
        L4::MtuError { .. } => match (target.src, target.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => {
                let kind = DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: MTU4 };
                let mut icmp = Icmpv4Header::with_checksum(
                    Icmpv4Type::DestinationUnreachable(kind),
                    &target.quote,
                );
                if spoil {
                    icmp.checksum ^= SPOIL;
                }
                icmp.write(&mut out).expect("ICMP header");
                out.extend_from_slice(&target.quote);
                (IpNumber::ICMP, out)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut icmp = Icmpv6Header::with_checksum(
                    Icmpv6Type::PacketTooBig { mtu: MTU6 },
                    s.octets(),
                    d.octets(),
                    &target.quote,
                )
                .expect("ICMPv6 header");
                if spoil {
                    icmp.checksum ^= SPOIL;
                }
                icmp.write(&mut out).expect("ICMPv6 header");
                out.extend_from_slice(&target.quote);
                (IpNumber::IPV6_ICMP, out)
            }
            _ => unreachable!("one family per case"),
        },
    }
}

/// The container's answer on a UDP flow as it left the NIC (from the published address and
/// port to the client), from its IP header on: what a router quotes in an error about it.
pub fn answer(from: (IpAddr, u16), to: (IpAddr, u16), payload: &[u8]) -> Vec<u8> {
    let mut udp = UdpHeader {
        source_port: from.1,
        destination_port: to.1,
        length: (UdpHeader::LEN + payload.len()) as u16,
        checksum: 0,
    };
    let mut out = Vec::new();
    match (from.0, to.0) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            udp.checksum = udp
                .calc_checksum_ipv4_raw(s.octets(), d.octets(), payload)
                .expect("UDP checksum");
            let len = UdpHeader::LEN + payload.len();
            let mut ip = Ipv4Header::new(len as u16, 63, IpNumber::UDP, s.octets(), d.octets())
                .expect("IPv4 header");
            ip.dont_fragment = true;
            ip.write(&mut out).expect("IPv4 header");
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            udp.checksum = udp
                .calc_checksum_ipv6_raw(s.octets(), d.octets(), payload)
                .expect("UDP checksum");
            Ipv6Header {
                traffic_class: 0,
                flow_label: Ipv6FlowLabel::ZERO,
                payload_length: (UdpHeader::LEN + payload.len()) as u16,
                next_header: IpNumber::UDP,
                hop_limit: 63,
                source: s.octets(),
                destination: d.octets(),
            }
            .write(&mut out)
            .expect("IPv6 header");
        }
        _ => panic!("an answer between families"),
    }
    udp.write(&mut out).expect("UDP header");
    out.extend_from_slice(payload);
    out
}

fn is_solicited(addr: Ipv6Addr) -> bool {
    addr.segments()[..6] == [0xff02, 0, 0, 0, 0, 1] && addr.octets()[12] == 0xff
}

/// The solicited-node multicast group of `addr` (RFC 4291 2.7.1).
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// An ARP message for IPv4 over Ethernet in the frame `case` (and `target`) asks for: from
/// `target.src` at `sender_mac` to `target.dst` (for a reply, at `target.nic_mac`).
pub fn arp(case: &Case, target: &Target, reply: bool, sender_mac: [u8; 6]) -> Vec<u8> {
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (target.src, target.dst) else {
        panic!("case {case}: ARP between IPv4 addresses only");
    };
    let mut out = link(case, target, EtherType::ARP);
    let message = ArpEthIpv4Packet {
        operation: if reply {
            ArpOperation::REPLY
        } else {
            ArpOperation::REQUEST
        },
        sender_mac,
        sender_ipv4: src.octets(),
        target_mac: if reply { target.nic_mac } else { [0; 6] },
        target_ipv4: dst.octets(),
    };
    out.extend_from_slice(&message.to_bytes());
    out
}

/// A neighbour solicitation from `target.src` for `target.dst` (to `target.dst`, or its
/// solicited-node group when the case's L2 is multicast), or an advertisement from `target.src`
/// claiming it, to `target.dst`; with a link-layer address option if `lladdr`. The hop limit is
/// 255 as RFC 4861 requires unless the case's TTL edge says otherwise.
pub fn neighbour(case: &Case, target: &Target, advert: bool, lladdr: Option<[u8; 6]>) -> Vec<u8> {
    let (IpAddr::V6(src), IpAddr::V6(dst)) = (target.src, target.dst) else {
        panic!("case {case}: neighbour discovery between IPv6 addresses only");
    };
    let to = if !advert && case.l2 == L2::Multicast {
        solicited_node(dst)
    } else {
        dst
    };
    let (typ, about, option_type) = if advert {
        let flags = NeighborAdvertisementHeader {
            router: false,
            solicited: true,
            r#override: true,
        };
        (Icmpv6Type::NeighborAdvertisement(flags), src, 2u8)
    } else {
        (Icmpv6Type::NeighborSolicitation, dst, 1u8)
    };
    let mut body = about.octets().to_vec();
    if let Some(mac) = lladdr {
        // RFC 4861 4.6.1: type, length in units of 8 bytes, the address (etherparse has no
        // builder for options).
        body.extend_from_slice(&[option_type, 1]);
        body.extend_from_slice(&mac);
    }
    let icmp =
        Icmpv6Header::with_checksum(typ, src.octets(), to.octets(), &body).expect("ICMPv6 header");
    let mut l4 = Vec::new();
    icmp.write(&mut l4).expect("ICMPv6 header");
    l4.extend_from_slice(&body);
    let on_wire = Target {
        dst: IpAddr::V6(to),
        quote: Vec::new(),
        tcp_numbers: None,
        ..*target
    };
    let mut out = link(case, &on_wire, EtherType::IPV6);
    Ipv6Header {
        traffic_class: 0,
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length: l4.len() as u16,
        next_header: IpNumber::IPV6_ICMP,
        hop_limit: if case.ttl == 64 { 255 } else { case.ttl },
        source: src.octets(),
        destination: to.octets(),
    }
    .write(&mut out)
    .expect("IPv6 header");
    out.extend_from_slice(&l4);
    out
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::{Target, answer, frame};
    use crate::differential::case::{Case, Family, L2, L4};

    /// Every case's frame is one the wire carries: at most a 1500-byte packet (the NIC's MTU)
    /// behind an Ethernet header, and a VLAN tag. A packet socket refuses anything larger.
    #[test]
    fn every_case_fits_the_wire() {
        for seed in [39, 4242, 5151] {
            for index in 0..3000 {
                let case = Case::generate(seed, index);
                let (src, dst): (IpAddr, IpAddr) = match case.family {
                    Family::V4 => (
                        "10.236.50.2".parse().unwrap(),
                        "10.236.50.1".parse().unwrap(),
                    ),
                    Family::V6 => (
                        "fd00:236::2".parse().unwrap(),
                        "fd00:236::1".parse().unwrap(),
                    ),
                };
                let quote = match case.l4 {
                    L4::MtuError { sport } => answer((dst, 7002), (src, sport), b"dxdp"),
                    _ => Vec::new(),
                };
                let target = Target {
                    src_mac: [2, 0, 0, 0, 0, 2],
                    nic_mac: [2, 0, 0, 0, 0, 1],
                    src,
                    dst,
                    tcp_port: 5201,
                    udp_port: 7002,
                    quote,
                    tcp_numbers: None,
                };
                let tag = if case.l2 == L2::Vlan { 4 } else { 0 };
                let len = frame(&case, &target).len();
                assert!(len <= 1514 + tag, "case {case}: a {len}-byte frame");
            }
        }
    }
}
