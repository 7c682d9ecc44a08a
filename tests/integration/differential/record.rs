//! What an observer saw, normalised to what both paths must agree on: addresses, protocol,
//! ports, payload length, TCP flags, an ICMP error's type, code, MTU and the packet it quotes.
//! Left out on purpose (see docs/differential.md): MACs, TTL and hop limit, IP ids, checksums,
//! sequence numbers, and the neighbour discovery, MLD and IGMP chatter of the namespaces; for
//! the link topology, what is not the case's own ([`Own`]).

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use etherparse::{
    ArpOperation, Ethernet2HeaderSlice, LaxNetSlice, LaxSlicedPacket, TransportSlice,
};

use super::case::flag_letters;
use crate::support::{in_container, must, run};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Record {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub what: What,
}

impl Record {
    /// "Fragment reassembly time exceeded" (ICMP 11/1, ICMPv6 3/1): it comes 30 or 60 s after
    /// the fragment's case, from whichever stack held the fragment, into some later case's
    /// window; never its own case's observation.
    pub fn reassembly_timeout(&self) -> bool {
        let typ = if self.src.is_ipv6() { 3 } else { 11 };
        matches!(self.what, What::IcmpError { typ: t, code: 1, .. } if t == typ)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum What {
    Tcp {
        sport: u16,
        dport: u16,
        flags: u8,
        len: usize,
    },
    Udp {
        sport: u16,
        dport: u16,
        len: usize,
    },
    /// A fragment whose layer-4 header is not in it (or not whole).
    Fragment {
        proto: u8,
        len: usize,
    },
    /// An ICMP or ICMPv6 error: `info` is its bytes 5 to 8 (the MTU of "fragmentation needed"
    /// and "packet too big"), `quoted` the addresses, protocol and ports of what it quotes.
    IcmpError {
        typ: u8,
        code: u8,
        info: u32,
        quoted: Option<Quoted>,
    },
    Icmp {
        typ: u8,
        code: u8,
    },
    Other {
        proto: u8,
        len: usize,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quoted {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub ports: Option<(u16, u16)>,
}

/// The sorted records of `frames`, as lines, without what no case is about and without
/// reassembly timeouts (which belong to earlier cases).
pub fn lines<'a>(frames: impl IntoIterator<Item = &'a [u8]>) -> Vec<String> {
    let mut lines: Vec<String> = frames
        .into_iter()
        .filter_map(record)
        .filter(|r| !r.reassembly_timeout())
        .map(|r| r.to_string())
        .collect();
    lines.sort();
    lines
}

/// The path MTU the container of `pid` has learned towards `to` (`ip route get`), as an
/// observation: "path MTU 1400", or "path MTU none".
pub fn path_mtu(pid: u32, to: &str) -> String {
    let route = must(&in_container(pid, &["ip", "route", "get", to]));
    let mtu = route
        .split_whitespace()
        .skip_while(|w| *w != "mtu")
        .nth(1)
        .map_or("none".to_owned(), str::to_owned);
    format!("path MTU {mtu}")
}

/// The record of an Ethernet frame, `None` for what no case is about (not IP, or the
/// namespaces' own neighbour discovery, MLD and IGMP).
pub fn record(frame: &[u8]) -> Option<Record> {
    let packet = LaxSlicedPacket::from_ethernet(frame).ok()?;
    let net = packet.net.as_ref()?;
    let ip = net.ip_payload_ref()?;
    let (src, dst) = ends(net)?;
    let proto = ip.ip_number.0;
    let what = match &packet.transport {
        Some(TransportSlice::Tcp(tcp)) => What::Tcp {
            sport: tcp.source_port(),
            dport: tcp.destination_port(),
            flags: tcp.slice()[13],
            len: tcp.payload().len(),
        },
        Some(TransportSlice::Udp(udp)) => What::Udp {
            sport: udp.source_port(),
            dport: udp.destination_port(),
            len: udp.payload().len(),
        },
        Some(TransportSlice::Icmpv4(icmp)) => icmp_what(
            icmp.type_u8(),
            icmp.code_u8(),
            icmp.bytes5to8(),
            icmp.payload(),
            false,
        ),
        Some(TransportSlice::Icmpv6(icmp)) => {
            let typ = icmp.type_u8();
            // Neighbour discovery (133-137) and MLD (130-132, 143): the namespaces' own.
            if (130..=137).contains(&typ) || typ == 143 {
                return None;
            }
            icmp_what(typ, icmp.code_u8(), icmp.bytes5to8(), icmp.payload(), true)
        }
        Some(TransportSlice::Igmp(_)) => return None,
        None if ip.fragmented || ip.incomplete => What::Fragment {
            proto,
            len: ip.payload.len(),
        },
        None if proto == 2 => return None,
        None => What::Other {
            proto,
            len: ip.payload.len(),
        },
    };
    Some(Record { src, dst, what })
}

fn icmp_what(typ: u8, code: u8, info: [u8; 4], payload: &[u8], v6: bool) -> What {
    let error = if v6 {
        (1..=4).contains(&typ)
    } else {
        matches!(typ, 3 | 4 | 5 | 11 | 12)
    };
    if !error {
        return What::Icmp { typ, code };
    }
    What::IcmpError {
        typ,
        code,
        info: u32::from_be_bytes(info),
        quoted: quoted(payload),
    }
}

/// The source and destination addresses of an IPv4 or IPv6 header; `None` for anything else.
fn ends(net: &etherparse::LaxNetSlice<'_>) -> Option<(IpAddr, IpAddr)> {
    match net {
        etherparse::LaxNetSlice::Ipv4(v4) => Some((
            IpAddr::V4(v4.header().source_addr()),
            IpAddr::V4(v4.header().destination_addr()),
        )),
        etherparse::LaxNetSlice::Ipv6(v6) => Some((
            IpAddr::V6(v6.header().source_addr()),
            IpAddr::V6(v6.header().destination_addr()),
        )),
        _ => None,
    }
}

/// The addresses, protocol and ports of the packet an ICMP error quotes (its first 8 bytes of
/// layer 4 at least, so the ports are there).
fn quoted(payload: &[u8]) -> Option<Quoted> {
    let inner = LaxSlicedPacket::from_ip(payload).ok()?;
    let net = inner.net.as_ref()?;
    let ip = net.ip_payload_ref()?;
    let (src, dst) = ends(net)?;
    let proto = ip.ip_number.0;
    let ports = (matches!(proto, 6 | 17) && ip.payload.len() >= 4).then(|| {
        let p = ip.payload;
        (
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        )
    });
    Some(Quoted {
        src,
        dst,
        proto,
        ports,
    })
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (src, dst) = (self.src, self.dst);
        match &self.what {
            What::Tcp {
                sport,
                dport,
                flags,
                len,
            } => write!(
                f,
                "TCP {src}.{sport} > {dst}.{dport} [{}] len {len}",
                flag_letters(*flags)
            ),
            What::Udp { sport, dport, len } => {
                write!(f, "UDP {src}.{sport} > {dst}.{dport} len {len}")
            }
            What::Fragment { proto, len } => {
                write!(f, "fragment proto {proto} {src} > {dst} len {len}")
            }
            What::IcmpError {
                typ,
                code,
                info,
                quoted,
            } => {
                write!(f, "ICMP error {typ}/{code} info {info} {src} > {dst}")?;
                if let Some(q) = quoted {
                    write!(f, " quoting proto {} {} > {}", q.proto, q.src, q.dst)?;
                    if let Some((s, d)) = q.ports {
                        write!(f, " ports {s} > {d}")?;
                    }
                }
                Ok(())
            }
            What::Icmp { typ, code } => write!(f, "ICMP {typ}/{code} {src} > {dst}"),
            What::Other { proto, len } => write!(f, "proto {proto} {src} > {dst} len {len}"),
        }
    }
}

/// What a link case can draw, beside its own frame: the observers of the link topology record
/// only that, not what the namespaces send on their own or earlier cases' late errors.
pub struct Own {
    /// For the cases that send ARP or neighbour discovery: the addresses their message
    /// resolves or claims (the case's source and destination). ARP and neighbour solicitations
    /// and advertisements about other addresses are the namespaces' own (A resolving its
    /// gateway, B an earlier case's source); `None`: no ARP or neighbour discovery at all.
    pub about: Option<[IpAddr; 2]>,
    /// The case's own source port and addresses (its source, its destination, A's): an ICMP
    /// error quoting a TCP or UDP packet of neither this port nor these addresses answers
    /// another case.
    pub port: u16,
    pub addresses: [IpAddr; 3],
}

impl Own {
    fn about(&self, addr: IpAddr) -> bool {
        self.about.is_some_and(|about| about.contains(&addr))
    }

    /// Whether `record` is an error quoting a packet of another case: ports, and neither the
    /// case's port nor (both ends) its addresses.
    fn elsewhere(&self, record: &Record) -> bool {
        let What::IcmpError {
            quoted: Some(q), ..
        } = &record.what
        else {
            return false;
        };
        let Some((sport, dport)) = q.ports else {
            return false;
        };
        let port = sport == self.port || dport == self.port;
        let ends = self.addresses.contains(&q.src) || self.addresses.contains(&q.dst);
        !(port && ends)
    }
}

/// The link topology's line for a frame: its MACs, a VLAN tag, the TTL or hop limit and the
/// record, none of which a link may change, nor anything else a bridge keeps. ARP and
/// neighbour solicitations and advertisements only about what `own` says (for the cases that
/// send them: otherwise it is the namespaces' own chatter, left out as in [`record`]), and no
/// error quoting another case's packet. The frame the case sent is always about its own
/// addresses and port: it is recorded wherever it arrives.
pub fn link_line(frame: &[u8], own: &Own) -> Option<String> {
    let eth = Ethernet2HeaderSlice::from_slice(frame).ok()?;
    let packet = LaxSlicedPacket::from_ethernet(frame).ok()?;
    let tag = if packet.link_exts.is_empty() {
        ""
    } else {
        " vlan"
    };
    let macs = format!("{} > {}{tag}", mac(&eth.source()), mac(&eth.destination()));
    let body = match packet.net.as_ref()? {
        LaxNetSlice::Arp(arp) => {
            let arp = arp.to_packet().try_eth_ipv4().ok()?;
            // A request resolves its target, a reply claims its sender.
            let about = if arp.operation == ArpOperation::REPLY {
                arp.sender_ipv4
            } else {
                arp.target_ipv4
            };
            if !own.about(IpAddr::V4(Ipv4Addr::from(about))) {
                return None;
            }
            let op = match arp.operation {
                ArpOperation::REQUEST => "request".to_owned(),
                ArpOperation::REPLY => "reply".to_owned(),
                other => format!("op {}", other.0),
            };
            format!(
                "ARP {op} {} at {} for {} at {}",
                Ipv4Addr::from(arp.sender_ipv4),
                mac(&arp.sender_mac),
                Ipv4Addr::from(arp.target_ipv4),
                mac(&arp.target_mac)
            )
        }
        net => {
            let ttl = match net {
                LaxNetSlice::Ipv4(v4) => v4.header().ttl(),
                LaxNetSlice::Ipv6(v6) => v6.header().hop_limit(),
                LaxNetSlice::Arp(_) => unreachable!("matched above"),
            };
            if let Some(record) = record(frame) {
                if record.reassembly_timeout() || own.elsewhere(&record) {
                    return None;
                }
                format!("ttl {ttl} {record}")
            } else if let (true, Some(TransportSlice::Icmpv6(icmp))) =
                (own.about.is_some(), &packet.transport)
            {
                let typ = icmp.type_u8();
                if !(133..=137).contains(&typ) {
                    return None;
                }
                let (src, dst) = ends(net)?;
                let body = icmp.payload();
                let about = <[u8; 16]>::try_from(body.get(..16)?).ok()?;
                // A solicitation's or advertisement's target: the address it resolves or
                // claims (router discovery and redirects are recorded as they are).
                if matches!(typ, 135 | 136) && !own.about(IpAddr::V6(Ipv6Addr::from(about))) {
                    return None;
                }
                let option = body.get(16..24).map_or("no option".to_owned(), |o| {
                    format!("option {} {}", o[0], mac(&o[2..8]))
                });
                format!(
                    "ttl {ttl} ND {typ} {src} > {dst} about {} {option}",
                    Ipv6Addr::from(about)
                )
            } else {
                return None;
            }
        }
    };
    Some(format!("{macs}: {body}"))
}

fn mac(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The counters of the network stack of the container of `pid` that tell where it dropped or
/// refused a packet (`nstat`, since the namespace began; only those above zero), as one line.
pub fn stack_drops(pid: u32) -> String {
    const TELLING: [&str; 7] = [
        "Drop",
        "Err",
        "Fail",
        "Overflow",
        "Skipped",
        "Syncookies",
        "Rej",
    ];
    let nstat = run(&in_container(pid, &["nstat", "-as"]));
    let counted: Vec<String> = nstat
        .stdout
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (name, value) = (words.next()?, words.next()?);
            let telling = TELLING.iter().any(|t| name.contains(t));
            (telling && value != "0").then(|| format!("{name} {value}"))
        })
        .collect();
    if counted.is_empty() {
        "the container's stack: no drop counted".to_owned()
    } else {
        format!("the container's stack: {}", counted.join(", "))
    }
}
