//! The differences the promise allows, each with its reason (docs/differential.md lists them).
//! What the fast path changes by design and no observer records (MACs, TTL and hop limit) is
//! normalised away in `record.rs`, and named in [`NORMALISED`].

use super::{
    case::{
        Direction, ExposedCase, Family, L3Edge, L4, LinkCase, Numbers, OutboundCase, Source,
        TcpFlags,
    },
    exposed::TCP_PORT as TCP_PUBLISHED,
    runner::Allowance,
};

/// What neither topology's observers record: an error that is never its own case's.
const REASSEMBLY_TIMEOUTS: Allowance = Allowance {
    name: "reassembly timeouts",
    reason: "\"fragment reassembly time exceeded\" (ICMP 11/1, ICMPv6 3/1) comes 30 or 60 s \
             after the fragment's case, from whichever stack held it, into some later case's \
             window: it is never its own case's observation",
};

/// Differences the observers do not record at all, by design of the fast path, and what is
/// never the case's own.
pub const NORMALISED: &[Allowance] = &[
    Allowance {
        name: "TTL/hop limit",
        reason: "the fast path does not decrement it; the host is not a hop, as with a bridge",
    },
    Allowance {
        name: "MACs",
        reason: "the fast path writes the bridge's MAC as source as the bridge would; the \
                 client's frames come from the NIC either way",
    },
    REASSEMBLY_TIMEOUTS,
];

/// Errors the fast path refuses by design: a "packet too big" or "fragmentation needed" from a
/// source that does not route back through the NIC as a unicast address. Docker's path takes
/// them (IPv6 has no reverse-path filter; with `rp_filter=0` neither has IPv4; conntrack relates
/// any source's error to the flow).
pub const OFF_PATH_ERROR: Allowance = Allowance {
    name: "off-path MTU error",
    reason: "stricter by design (issue 38 item 3): an MTU error about a fast-path flow from a \
             source that does not route back through the NIC as a unicast address (the host's \
             own, another container's, another interface's address, a subnet's broadcast \
             address, a martian the stack takes: 0.0.0.0/8, IPv4-mapped) is refused, so forged \
             errors cannot lower a container's path MTU; conntrack, which never saw the flow, \
             cannot relate it either, while Docker's path takes it",
};

/// Docker's own userland proxy carries an IPv6 link-local client's datagrams on both paths
/// (Engine 28's DNAT skips `fe80::/10`; the fast path refuses link-local sources), from a port
/// of its own choosing.
pub const PROXY_PORT: Allowance = Allowance {
    name: "docker-proxy's port",
    reason: "an IPv6 link-local client's datagram to a published port takes docker-proxy on \
             both paths; it forwards from the gateway with a port it draws per client address \
             and port and keeps 90 s after the last datagram (moby's UDPConnTrackTimeout), so \
             where an earlier case of the same source port made the mapping, it may lapse \
             between the two runs and the second draws another port",
};

/// A TCP or UDP line without its source port (`UDP a.P > b.Q len N` → `UDP a > b.Q len N`);
/// any other line as it is (an ICMP line's addresses have no port to strip).
fn without_source_port(line: &str) -> String {
    if !(line.starts_with("UDP ") || line.starts_with("TCP ")) {
        return line.to_owned();
    }
    let Some((from, rest)) = line.split_once(" > ") else {
        return line.to_owned();
    };
    let from = from.rsplit_once('.').map_or(from, |(addr, _)| addr);
    format!("{from} > {rest}")
}

/// A segment of a connection the fast path carries that conntrack would mark INVALID is dropped
/// and counted; on Docker's path it is not translated and reaches the host's own stack, whose
/// listener on the published port (docker-proxy's, or none) answers a non-RST with an RST.
pub const HOST_RST: Allowance = Allowance {
    name: "the host's RST to an INVALID segment",
    reason: "stricter by design (docs/ingress.md, TCP windows): a segment of a fast-path \
             connection conntrack would mark INVALID (out of the window, an ACK of data never \
             sent) is dropped and counted as refused; on Docker's path conntrack leaves it \
             untranslated, so it reaches the host's own stack, which answers it with an RST \
             from the published port; neither path delivers it",
};

/// A first fragment of a connection the fast path carries that conntrack would mark INVALID
/// (not an RST or a FIN, which go to the stack as they came) is dropped and counted; on Docker's
/// path it is not translated and reaches the host's own reassembly, which answers it "parameter
/// problem" (its length not a multiple of eight). Passed to the stack here, its conntrack, which
/// never saw the connection, would pick it up mid-stream and deliver it to the container.
pub const HOST_PARAMETER_PROBLEM: Allowance = Allowance {
    name: "the host's parameter problem to an INVALID fragment",
    reason: "stricter by design (docs/ingress.md, TCP windows): a first fragment of a \
             fast-path connection that conntrack would mark INVALID (out of the window) is \
             dropped and counted as refused; on Docker's path conntrack leaves it \
             untranslated, so it reaches the host's own reassembly, which answers it \
             \"parameter problem\" from the published address; neither path delivers it",
};

/// A carried connection's RST or FIN with a TTL the host does not forward: Docker's path, which
/// tracks the connection, answers "time exceeded"; the fast path drops it, as the stack, whose
/// conntrack never saw the connection, cannot pick an RST or FIN up mid-stream.
pub const LAST_HOP: Allowance = Allowance {
    name: "no time exceeded for a carried connection's RST or FIN",
    reason: "a carried connection's RST or FIN with TTL or hop limit 0 or 1 is dropped: the \
             fast path answers no ICMP, and the stack, whose conntrack never saw the \
             connection, picks a mid-stream ACK up (nf_conntrack_tcp_loose) but not an RST or a \
             FIN, which would reach the host's own listener (a FIN answered with an RST the \
             client takes); Docker's path answers \"time exceeded\"; neither path delivers \
             the segment",
};

/// Whether every line is a TCP RST (with or without ACK, no payload) from `port`.
fn resets_from(lines: &[String], port: u16) -> bool {
    lines.iter().all(|l| {
        l.starts_with("TCP ")
            && l.split_once(" > ")
                .is_some_and(|(from, _)| from.ends_with(&format!(".{port}")))
            && (l.ends_with("[R] len 0") || l.ends_with("[R.] len 0"))
    })
}

/// The allowance that excuses a difference of `observer` on `exposed`, if any.
pub fn exposed(
    exposed: &ExposedCase,
    observer: &str,
    docker: &[String],
    fast: &[String],
) -> Option<&'static Allowance> {
    let case = &exposed.base;
    let live = exposed.numbers != Numbers::Own;
    if live && observer == "client" && fast.is_empty() && resets_from(docker, TCP_PUBLISHED) {
        return Some(&HOST_RST);
    }
    let ends = matches!(case.l4, L4::Tcp { flags, .. }
        if flags.0 & (TcpFlags::RST | TcpFlags::FIN) != 0);
    let parameter_problem_from_the_port = |l: &String| {
        l.starts_with("ICMP error 4/0 ") && l.ends_with(&format!(" > {TCP_PUBLISHED}"))
    };
    if live
        && !ends
        && case.l3 == L3Edge::FirstFragment
        && observer == "client"
        && !docker.is_empty()
        && docker.iter().all(parameter_problem_from_the_port)
        && fast.is_empty()
    {
        return Some(&HOST_PARAMETER_PROBLEM);
    }
    let time_exceeded =
        |l: &String| l.starts_with("ICMP error 11/0 ") || l.starts_with("ICMP error 3/0 ");
    if live
        && ends
        && case.ttl <= 1
        && observer == "client"
        && !docker.is_empty()
        && docker.iter().all(time_exceeded)
        && fast.is_empty()
    {
        return Some(&LAST_HOP);
    }
    let proxied = case.family == Family::V6
        && case.source == Source::LinkLocal
        && matches!(case.l4, L4::Udp { .. });
    if proxied
        && observer == "container"
        && docker.len() == fast.len()
        && docker
            .iter()
            .zip(fast)
            .all(|(d, f)| without_source_port(d) == without_source_port(f))
    {
        return Some(&PROXY_PORT);
    }
    let mtu_error = matches!(case.l4, L4::MtuError { .. });
    // A subnet's broadcast address is no router's: the route back to it is a broadcast
    // route, not a unicast one through the NIC (the limited broadcast both paths drop). Of the
    // martians, this kernel's stack takes 0.0.0.0/8 and IPv4-mapped IPv6 sources, which this
    // topology routes to another interface; the fast path refuses every martian.
    let off_path = matches!(
        case.source,
        Source::HostNic
            | Source::OtherContainer
            | Source::NotViaNic
            | Source::Broadcast(_)
            | Source::Martian(_)
    );
    // Docker's path delivered the error and learned the MTU; the fast path neither.
    if mtu_error && off_path && fast.iter().all(|l| !l.contains("info ")) && fast != docker {
        let learned = observer != "path MTU" || fast == ["path MTU none"];
        if learned {
            return Some(&OFF_PATH_ERROR);
        }
    }
    None
}

/// What the link topology's observers leave out. A link rewrites nothing (a bridge does not),
/// so MACs, VLAN tags, TTL and hop limit are compared, and a frame B receives is compared with
/// the one A sent byte for byte.
pub const LINKS_NORMALISED: &[Allowance] = &[
    Allowance {
        name: "the stacks' own numbers",
        reason: "IP ids, TCP sequence numbers and checksums of what the containers' stacks send \
                 in answer differ between any two runs, on either path",
    },
    REASSEMBLY_TIMEOUTS,
    Allowance {
        name: "neighbour chatter",
        reason: "ARP, neighbour discovery, MLD and IGMP the namespaces send on their own are \
                 left out, except in the cases that send ARP or neighbour discovery: those \
                 record their own family's about the case's source or destination address (A \
                 resolving its gateway, B an earlier case's source are not the case's), never \
                 the host's (the bridge's or from its ends of the veths: it resolves an earlier \
                 case's link-local source there to answer \"packet too big\")",
    },
    Allowance {
        name: "other cases' errors",
        reason: "an ICMP error quoting a TCP or UDP packet of neither the case's source port \
                 nor its addresses answers an earlier case, late (the host's \"address \
                 unreachable\" comes seconds after a packet to an address it cannot resolve); the \
                 case's own frame and answers always carry its port and addresses",
    },
];

/// The allowance that excuses a difference of `observer` on a link `case`, if any: none yet.
pub fn links(
    _case: &LinkCase,
    _observer: &str,
    _docker: &[String],
    _fast: &[String],
) -> Option<&'static Allowance> {
    None
}

/// What the outbound topology's observers leave out (`record.rs`): the egress fast path routes
/// as the host does, so these are alike on both paths, but they are not the promise.
pub const OUTBOUND_NORMALISED: &[Allowance] = &[
    Allowance {
        name: "TTL/hop limit and MACs",
        reason: "both paths route: the TTL is decremented once, the frame leaves from the NIC's \
                 (or the bridge's) MAC to the next hop's",
    },
    Allowance {
        name: "the stacks' own numbers",
        reason: "IP ids, TCP sequence numbers and checksums of what the container's and the \
                 server's stacks send in answer differ between any two runs, on either path",
    },
    REASSEMBLY_TIMEOUTS,
];

/// A spoofed source whose connection would leave from the NIC's address and the live flow's
/// port: conntrack draws another port at random.
pub const CLASH_DRAW: Allowance = Allowance {
    name: "a clash's drawn port",
    reason: "a frame from the container claiming another container's address (which \
             MASQUERADE maps to the NIC's) or the NIC's own, from the live flow's port, is a new \
             connection on both paths (the fast path carries none); conntrack finds that tuple \
             taken by the live flow and draws another source port at random, so the two runs \
             leave from different ports",
};

/// A server's segment of a carried connection with a TTL the host does not forward: Docker's
/// path answers "time exceeded"; the fast path judges it on its window copy and drops it.
pub const OUTBOUND_LAST_HOP: Allowance = Allowance {
    name: "no time exceeded for a carried connection's last-hop reply",
    reason: "a server's TCP segment of a carried connection with TTL 0 or 1 that conntrack \
             would take is dropped after the window copy judged it: left to the stack as it \
             came, conntrack's windows, behind the connection, find it INVALID and the host's \
             own stack answers the server with an RST that ends the connection; translated \
             back first, Docker's raw PREROUTING rule drops it (a packet from outside addressed \
             to a container). Docker's path answers \"time exceeded\"; neither path delivers \
             the segment",
};

/// The allowance that excuses a difference of `observer` on an outbound `case`, if any.
pub fn outbound(
    case: &OutboundCase,
    observer: &str,
    docker: &[String],
    fast: &[String],
) -> Option<&'static Allowance> {
    let last_hop = case.direction == Direction::Back
        && case.numbers != Numbers::Own
        && case.base.ttl <= 1
        && matches!(case.base.l4, L4::Tcp { .. })
        && observer == "outside"
        && !docker.is_empty()
        && docker.iter().all(|l| l.starts_with("ICMP error 11/0 "))
        && fast.is_empty();
    if last_hop {
        return Some(&OUTBOUND_LAST_HOP);
    }
    let drawn = case.direction == Direction::Out
        && matches!(case.base.source, Source::OtherContainer | Source::HostNic)
        && observer == "outside"
        && docker.len() == fast.len()
        && docker
            .iter()
            .zip(fast)
            .all(|(d, f)| without_source_port(d) == without_source_port(f));
    drawn.then_some(&CLASH_DRAW)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::differential::case::{Case, L2, Port, UdpLength};

    /// Seed 8484's case 830, with the datagram `payload` bytes long.
    fn proxied(payload: u16) -> ExposedCase {
        let base = Case {
            index: 830,
            family: Family::V6,
            source: Source::LinkLocal,
            l2: L2::NicMac,
            ttl: 64,
            l3: L3Edge::None,
            l4: L4::Udp {
                sport: 0,
                dport: Port::Published,
                payload,
                length: UdpLength::Exact,
            },
        };
        ExposedCase {
            base,
            numbers: Numbers::Own,
        }
    }

    /// Seed 39's case 52: an IPv6 PSH+ACK on the live connection 2^30 past its window.
    fn past_the_window(flags: u8, ttl: u8) -> ExposedCase {
        let base = Case {
            index: 52,
            family: Family::V6,
            source: Source::Client,
            l2: L2::NicMac,
            ttl,
            l3: L3Edge::None,
            l4: L4::Tcp {
                flags: TcpFlags(flags),
                sport: 30052,
                dport: Port::Published,
                payload: 10,
            },
        };
        ExposedCase {
            base,
            numbers: Numbers::Live {
                seq: 1 << 30,
                ack: 1 << 20,
            },
        }
    }

    #[test]
    fn only_the_hosts_rst_from_the_published_port_is_allowed_for_an_invalid_segment() {
        let case = past_the_window(TcpFlags::PSH | TcpFlags::ACK, 64);
        let rst = ["TCP fd00:236:5f::1.17100 > fd00:236:5f::2.30052 [R] len 0".to_owned()];
        let allowed = exposed(&case, "client", &rst, &[]);
        assert_eq!(allowed.map(|a| a.name), Some(HOST_RST.name));
        // Not the other way round, not from another port, not data, not into the container.
        assert!(exposed(&case, "client", &[], &rst).is_none());
        let other = ["TCP fd00:236:5f::1.17101 > fd00:236:5f::2.30052 [R] len 0".to_owned()];
        assert!(exposed(&case, "client", &other, &[]).is_none());
        let data = ["TCP fd00:236:5f::1.17100 > fd00:236:5f::2.30052 [P.] len 10".to_owned()];
        assert!(exposed(&case, "client", &data, &[]).is_none());
        assert!(exposed(&case, "container", &rst, &[]).is_none());
        // Nor without the live connection's numbers.
        let own = ExposedCase {
            numbers: Numbers::Own,
            ..case
        };
        assert!(exposed(&own, "client", &rst, &[]).is_none());
    }

    #[test]
    fn only_the_hosts_parameter_problem_is_allowed_for_an_invalid_fragment() {
        // Seed 712's case 728: an ACK 2^30 past the window in a first fragment.
        let fragment = ExposedCase {
            base: Case {
                l3: L3Edge::FirstFragment,
                ..past_the_window(TcpFlags::ACK, 1).base
            },
            ..past_the_window(TcpFlags::ACK, 1)
        };
        let problem = [
            "ICMP error 4/0 info 4 fd00:236:bd::1 > fd00:236:bd::2 quoting proto 6 \
             fd00:236:bd::2 > fd00:236:bd::1 ports 30052 > 17100"
                .to_owned(),
        ];
        let allowed = exposed(&fragment, "client", &problem, &[]);
        assert_eq!(allowed.map(|a| a.name), Some(HOST_PARAMETER_PROBLEM.name));
        // Not the other way round, not into the container, not about another port.
        assert!(exposed(&fragment, "client", &[], &problem).is_none());
        assert!(exposed(&fragment, "container", &problem, &[]).is_none());
        let other = [problem[0].replace("> 17100", "> 17101")];
        assert!(exposed(&fragment, "client", &other, &[]).is_none());
        // Not unfragmented, nor for an RST or a FIN (they go to the stack as they came).
        let whole = past_the_window(TcpFlags::ACK, 1);
        assert!(exposed(&whole, "client", &problem, &[]).is_none());
        let fin = ExposedCase {
            base: Case {
                l3: L3Edge::FirstFragment,
                ..past_the_window(TcpFlags::FIN | TcpFlags::ACK, 64).base
            },
            ..past_the_window(TcpFlags::FIN | TcpFlags::ACK, 64)
        };
        assert!(exposed(&fin, "client", &problem, &[]).is_none());
    }

    #[test]
    fn a_missing_time_exceeded_is_allowed_only_for_a_last_hop_rst_or_fin() {
        let exceeded = [
            "ICMP error 3/0 info 0 fd00:236:5f::1 > fd00:236:5f::2 quoting proto 6 \
                         fd00:236:5f::2 > fd00:236:5f::1 ports 30052 > 17100"
                .to_owned(),
        ];
        let rst = past_the_window(TcpFlags::RST | TcpFlags::ACK, 1);
        let allowed = exposed(&rst, "client", &exceeded, &[]);
        assert_eq!(allowed.map(|a| a.name), Some(LAST_HOP.name));
        let fin = past_the_window(TcpFlags::FIN | TcpFlags::ACK, 0);
        assert!(exposed(&fin, "client", &exceeded, &[]).is_some());
        // The host's RST to a last-hop FIN is not: it ends the client's connection.
        let host_rst = ["TCP fd00:236:5f::1.17100 > fd00:236:5f::2.30052 [R] len 0".to_owned()];
        assert!(exposed(&fin, "client", &exceeded, &host_rst).is_none());
        // An ACK is picked up mid-stream: its time exceeded must come on both paths.
        let ack = past_the_window(TcpFlags::ACK, 1);
        assert!(exposed(&ack, "client", &exceeded, &[]).is_none());
        let far = past_the_window(TcpFlags::RST, 64);
        assert!(exposed(&far, "client", &exceeded, &[]).is_none());
    }

    #[test]
    fn docker_proxys_port_is_allowed_and_nothing_else_about_the_datagram() {
        let docker = ["UDP fd00:231:c5::1.36074 > fd00:231:c5::2.7002 len 512".to_owned()];
        let fast = ["UDP fd00:231:c5::1.56666 > fd00:231:c5::2.7002 len 512".to_owned()];
        let allowed = exposed(&proxied(512), "container", &docker, &fast);
        assert_eq!(allowed.map(|a| a.name), Some("docker-proxy's port"));
        let longer = ["UDP fd00:231:c5::1.56666 > fd00:231:c5::2.7002 len 513".to_owned()];
        assert!(exposed(&proxied(512), "container", &docker, &longer).is_none());
        let elsewhere = ["UDP fd00:231:c5::1.56666 > fd00:231:c5::2.7003 len 512".to_owned()];
        assert!(exposed(&proxied(512), "container", &docker, &elsewhere).is_none());
        assert!(exposed(&proxied(512), "client", &docker, &fast).is_none());
        // Only a port is stripped: an ICMP line's source has none, and its last octet is not
        // one.
        let icmp = |from: &str| vec![format!("ICMP 10.236.1.{from} > 10.236.1.2 unreachable")];
        assert!(exposed(&proxied(512), "container", &icmp("7"), &icmp("9")).is_none());
    }

    /// Seed 9393's outbound case 63: a server's PSH+ACK at the live numbers, TTL `ttl`.
    fn reply_at_last_hop(direction: Direction, ttl: u8) -> OutboundCase {
        let base = Case {
            index: 63,
            family: Family::V4,
            source: Source::Client,
            l2: L2::NicMac,
            ttl,
            l3: L3Edge::Options,
            l4: L4::Tcp {
                flags: TcpFlags(TcpFlags::PSH | TcpFlags::ACK),
                sport: 30063,
                dport: Port::Published,
                payload: 1000,
            },
        };
        OutboundCase {
            direction,
            base,
            numbers: Numbers::Live { seq: 0, ack: 0 },
        }
    }

    #[test]
    fn only_a_missing_time_exceeded_is_allowed_for_a_carried_connections_last_hop_reply() {
        let exceeded = [
            "ICMP error 11/0 info 0 10.236.39.1 > 10.236.39.2 quoting proto 6 10.236.39.2 > \
             10.236.39.1 ports 17200 > 30063"
                .to_owned(),
        ];
        let reply = reply_at_last_hop(Direction::Back, 0);
        let allowed = outbound(&reply, "outside", &exceeded, &[]);
        assert_eq!(allowed.map(|a| a.name), Some(OUTBOUND_LAST_HOP.name));
        // Not the host's RST in its place (it ends the server's connection), not in the
        // container, not going out, not a reply the host forwards.
        let host_rst = ["TCP 10.236.39.1.30063 > 10.236.39.2.17200 [R] len 0".to_owned()];
        assert!(outbound(&reply, "outside", &exceeded, &host_rst).is_none());
        assert!(outbound(&reply, "container", &exceeded, &[]).is_none());
        let out = reply_at_last_hop(Direction::Out, 1);
        assert!(outbound(&out, "outside", &exceeded, &[]).is_none());
        let forwarded = reply_at_last_hop(Direction::Back, 2);
        assert!(outbound(&forwarded, "outside", &exceeded, &[]).is_none());
        // Nor for a segment at numbers of its own, which no carried connection judges.
        let own = OutboundCase {
            numbers: Numbers::Own,
            ..reply_at_last_hop(Direction::Back, 1)
        };
        assert!(outbound(&own, "outside", &exceeded, &[]).is_none());
    }
}
