//! The link topology: three containers A, B and C on one dual-stack network, B serving TCP
//! (iperf3's listener) and UDP (an echo). Docker's path: A and B not linked, their frames cross
//! the network's bridge; dxdp's path: `dxdp link A B` (tc, or xdp as the case says). Every case
//! is a frame A puts on its own `eth0` with a packet socket, addressed to B (or beside it); the
//! observers are `eth0` of B, of A (what came back) and of C, the bridge's own interface, and
//! for MTU errors B's path MTU towards A. A link must deliver or drop each frame as the bridge
//! does, byte for byte: MACs, VLAN tag and TTL are compared, and a frame B receives is marked
//! `as sent` when it is the very frame A sent.
//!
//! The network is a [`Segment`]: a user-defined bridge network of the host's ([`Bridge`]), or an
//! attachable Swarm overlay network ([`Overlay`]), whose bridge `br0` is in the overlay's
//! sandbox namespace, where dxdp links the pair (`segment.rs`).

use std::{
    net::{IpAddr, SocketAddr, UdpSocket},
    path::PathBuf,
    time::Duration,
};

use super::{
    allowlist,
    case::{Datapath, Family, L4, LinkCase, Message, NdOption, Rule, Source, Wire},
    frame::{self, Target, mac},
    live::{self, UDP_ECHO},
    packet_socket::PacketSocket,
    record::{self, Own, link_line},
    runner::{Allowance, Observation, Topology},
    segment::{Crossing, Segment},
    sources::Sink,
};
use crate::support::{
    Background, FirewallRule, World, container_iface, in_container, must, netns_of, run,
};

/// As the exposed topology's: a reply comes back well within it, the first retransmission not.
const WINDOW: Duration = Duration::from_millis(300);
/// B's listeners.
const TCP_PORT: u16 = 5201;
const UDP_PORT: u16 = 7002;
/// A's side of its veth takes frames this large, B's and the bridge's stay at the network's
/// MTU: what a link does with a frame too big for B's MTU is a case of its own.
const A_MTU: u32 = 9000;
/// How long Docker announces a container's addresses after it starts (advertise_addr_nmsgs 3,
/// advertise_addr_ms 1000), with a margin.
const ANNOUNCEMENTS: Duration = Duration::from_millis(2500);
/// A MAC nobody has: the spoofed source, and the neighbour of addresses that answer nobody.
const FOREIGN_MAC: [u8; 6] = [0x02, 0x00, 0x5e, 0x10, 0xee, 0x03];
const NOBODY: &str = "02:00:5e:10:ee:02";

/// One container of the topology.
struct Member {
    name: String,
    pid: u32,
    mac: [u8; 6],
    ip: (IpAddr, IpAddr),
    /// The ifindex of its veth's other end, in the bridge's namespace.
    port: u64,
}

impl Member {
    fn new(world: &World, name: String, net: &str) -> Self {
        let pid = world.pid(&name);
        let mac_text = world.mac(&name, net);
        let (iface, port) = container_iface(pid, &mac_text);
        assert_eq!(iface, "eth0", "{name}'s interface on {net}");
        Self {
            mac: mac(&mac_text),
            ip: (
                world.ip(&name, net).parse().expect("an IPv4 address"),
                world.ip6(&name, net).parse().expect("an IPv6 address"),
            ),
            name,
            pid,
            port: port.into(),
        }
    }

    fn ip(&self, family: Family) -> IpAddr {
        match family {
            Family::V4 => self.ip.0,
            Family::V6 => self.ip.1,
        }
    }

    fn netns(&self) -> PathBuf {
        netns_of(self.pid)
    }
}

pub struct Links<S: Segment> {
    // Dropped first: sockets, processes and the rule; then the sink; then the world; then
    // what the network needed.
    a_eth: PacketSocket,
    b_eth: PacketSocket,
    c_eth: PacketSocket,
    bridge_eth: PacketSocket,
    _echo: Background,
    rule: Rule,
    rule_guard: Option<FirewallRule>,
    linked: bool,
    a: Member,
    b: Member,
    c: Member,
    gateway: (IpAddr, IpAddr),
    /// The MACs of the bridge's namespace on the network: the bridge's, and those of its ports
    /// (the far ends of A's, B's and C's veths, from which the host resolves neighbours too).
    host_macs: Vec<String>,
    /// The third octet of the network's subnet: the test's other addresses use it too.
    k: u32,
    crossing: Crossing,
    _sink: Sink,
    world: World,
    _segment: S,
}

impl<S: Segment> Links<S> {
    pub fn new() -> Self {
        let segment = S::prepare();
        let mut world = World::shared();
        let (net, bridge_netns) = segment.network(&mut world);
        let crossing = Crossing::new(bridge_netns);
        let idle = ["sleep", "infinity"];
        let a = world.run("a", &["--network", &net], &idle);
        let b = world.run("b", &["--network", &net], &["iperf3", "-s"]);
        let c = world.run("c", &["--network", &net], &idle);
        let (a, b, c) = (
            Member::new(&world, a, &net),
            Member::new(&world, b, &net),
            Member::new(&world, c, &net),
        );
        // Every answer a case draws is in its window, and none in a later one's: no ICMP error
        // of the containers' waits for a rate limit a case before it filled, no SYN-ACK is sent
        // again (to a source that never answers, it was, into later cases), and no redirect
        // (rate-limited per peer, it came on one path and not the other) is sent at all.
        for member in [&a, &b, &c] {
            must(&in_container(
                member.pid,
                &[
                    "sysctl",
                    "-q",
                    "-w",
                    "net.ipv4.icmp_ratelimit=0",
                    "net.ipv6.icmp.ratelimit=0",
                    "net.ipv4.tcp_synack_retries=0",
                    "net.ipv4.conf.all.send_redirects=0",
                    "net.ipv4.conf.eth0.send_redirects=0",
                ],
            ));
        }
        let echo = Background::spawn(&in_container(
            b.pid,
            &["python3", "-c", UDP_ECHO, &UDP_PORT.to_string()],
        ));
        let k: u32 = world
            .address(&net, 0)
            .split('.')
            .nth(2)
            .expect("x.y.K.0")
            .parse()
            .expect("K");

        // A takes bigger frames than B: its end and the bridge's end of its veth.
        let interfaces = crossing.interfaces();
        let port = |member: &Member| {
            interfaces.get(&member.port).unwrap_or_else(|| {
                panic!(
                    "{}'s veth has no end {} in {}",
                    member.name,
                    member.port,
                    crossing.netns.display()
                )
            })
        };
        let a_port = port(&a);
        let mtu = A_MTU.to_string();
        must(&crossing.argv(&["ip", "link", "set", &a_port.name, "mtu", &mtu]));
        must(&in_container(
            a.pid,
            &["ip", "link", "set", "eth0", "mtu", &mtu],
        ));
        let bridge = a_port
            .master
            .clone()
            .unwrap_or_else(|| panic!("A's veth {} is no bridge's port", a_port.name));
        // The addresses of the bridge's namespace on the network, Docker's gateways: on the
        // bridge. An overlay's `br0` holds the IPv4 gateway only; its IPv6 gateway is an
        // address of the subnet nobody holds, as Docker's IPAM reserved it.
        let on_bridge = crossing.addresses(&bridge);
        let reserved = world.docker_ok(&[
            "network",
            "inspect",
            "-f",
            "{{range .IPAM.Config}}{{.Gateway}} {{end}}",
            &net,
        ]);
        let gateway = |v4: bool| -> IpAddr {
            let reserved = reserved.split_whitespace().filter_map(|a| a.parse().ok());
            on_bridge
                .iter()
                .copied()
                .chain(reserved)
                .find(|a: &IpAddr| a.is_ipv4() == v4)
                .unwrap_or_else(|| {
                    panic!("no gateway of each family on {bridge} ({on_bridge:?}) or {net}")
                })
        };
        let gateway = (gateway(true), gateway(false));
        let mut host_macs = vec![
            interfaces
                .values()
                .find(|i| i.name == bridge)
                .map(|i| i.mac.clone())
                .expect("the bridge's MAC"),
        ];
        for member in [&a, &b, &c] {
            host_macs.push(port(member).mac.clone());
        }

        // B answers the addresses no container has through its default gateway, the host (on a
        // bridge network, the bridge; on an overlay, `docker_gwbridge`): they are routed to a
        // veth of the test's whose far end sits alone in a namespace, to a MAC nobody has, so
        // that no answer leaves the machine or draws an error back later.
        let sink = Sink::new(&format!("{}-lsink{k}", world.prefix));
        let elsewhere = sink.iface.clone();
        let v4_net = format!("10.241.{k}.1/24");
        let v6_net = format!("fd00:241:{k:x}::1/64");
        must(&["ip", "addr", "add", &v4_net, "dev", &elsewhere]);
        must(&[
            "ip", "-6", "addr", "add", &v6_net, "dev", &elsewhere, "nodad",
        ]);
        let links = Self {
            a_eth: PacketSocket::open(&a.netns(), "eth0"),
            b_eth: PacketSocket::open(&b.netns(), "eth0"),
            c_eth: PacketSocket::open(&c.netns(), "eth0"),
            bridge_eth: PacketSocket::open(&crossing.netns, &bridge),
            _echo: echo,
            rule: Rule::None,
            rule_guard: None,
            linked: false,
            a,
            b,
            c,
            gateway,
            host_macs,
            k,
            crossing,
            _sink: sink,
            world,
            _segment: segment,
        };
        // `::` too: the host forwards B's answer to it by its default route, off the machine,
        // and its "address unreachable" came seconds later, into the next run's window (seed
        // 2607, case 164: both runs' errors in dxdp's).
        let routed = [
            (Family::V4, Source::Martian(1)),
            (Family::V4, Source::Martian(2)),
            (Family::V4, Source::LinkLocal),
            (Family::V6, Source::Martian(1)),
            (Family::V6, Source::Martian(2)),
        ];
        for (family, kind) in routed {
            let addr = links.source(kind, family).to_string();
            must(&["ip", "route", "add", &addr, "dev", &elsewhere]);
        }
        for (family, kind) in routed.into_iter().chain([
            (Family::V4, Source::NotViaNic),
            (Family::V6, Source::NotViaNic),
        ]) {
            let addr = links.source(kind, family).to_string();
            must(&[
                "ip",
                "neigh",
                "replace",
                &addr,
                "lladdr",
                NOBODY,
                "dev",
                &elsewhere,
                "nud",
                "permanent",
            ]);
        }
        // B's IPv6 address may still be tentative, and the first packets wait for neighbours:
        // the cases start once a flow from A answers in both families.
        for family in [Family::V4, Family::V6] {
            drop(links.live_flow(family, 29999, 20));
        }
        // Docker announces each container's addresses (gratuitous ARP, unsolicited neighbour
        // advertisements) three times, a second apart, after it starts: the first case, run
        // alone by its rerun line, would see them.
        std::thread::sleep(ANNOUNCEMENTS);
        links
    }

    /// The address a case's source kind stands for, in its family.
    fn source(&self, source: Source, family: Family) -> IpAddr {
        let k = self.k;
        let v4 = family == Family::V4;
        let text = match (source, v4) {
            (Source::Client, _) => return self.a.ip(family),
            (Source::HostNic, true) => return self.gateway.0,
            (Source::HostNic, false) => return self.gateway.1,
            (Source::OtherContainer, _) => return self.c.ip(family),
            (Source::Martian(n), true) => [
                "127.0.0.9".to_owned(),
                format!("0.237.{k}.9"),
                format!("240.237.{k}.9"),
            ][n as usize % 3]
                .clone(),
            (Source::Martian(n), false) => [
                "::1".to_owned(),
                "::".to_owned(),
                format!("::ffff:{}", self.a.ip.0),
            ][n as usize % 3]
                .clone(),
            (Source::LinkLocal, true) => format!("169.254.237.{k}"),
            (Source::LinkLocal, false) => format!("fe80::237:{k:x}"),
            (Source::Multicast, true) => format!("239.255.237.{k}"),
            (Source::Multicast, false) => format!("ff0e::237:{k:x}"),
            (Source::Broadcast(n), true) => {
                let IpAddr::V4(a) = self.a.ip.0 else {
                    unreachable!("an IPv4 address")
                };
                let o = a.octets();
                [
                    "255.255.255.255".to_owned(),
                    format!("{}.{}.{}.255", o[0], o[1], o[2]),
                ][n as usize % 2]
                    .clone()
            }
            (Source::Broadcast(_), false) => "ff02::1".to_owned(),
            (Source::NotViaNic, true) => format!("10.241.{k}.9"),
            (Source::NotViaNic, false) => format!("fd00:241:{k:x}::9"),
        };
        text.parse().expect("a source address")
    }

    /// Forgets what earlier cases left that this one could meet: conntrack's entries of the
    /// three containers in the case's family, B's cached path MTUs before an MTU error, and
    /// before and after an ARP or neighbour case, every neighbour the namespaces learned (such
    /// a case may teach B that C's address is at A's MAC). All at once: it is most of a case's
    /// time otherwise.
    fn forget(&self, case: &LinkCase) {
        let family = case.base.family;
        let mut commands: Vec<Vec<String>> = Vec::new();
        for member in [&self.a, &self.b, &self.c] {
            let f = if family == Family::V4 { "ipv4" } else { "ipv6" };
            let addr = member.ip(family).to_string();
            commands.push(
                self.crossing
                    .argv(&["conntrack", "-D", "-f", f, "-s", &addr]),
            );
            if neighbours(case) {
                commands.push(in_container(
                    member.pid,
                    &["ip", "neigh", "flush", "dev", "eth0"],
                ));
            }
        }
        if matches!(case.base.l4, L4::MtuError { .. }) {
            for f in ["-4", "-6"] {
                commands.push(in_container(
                    self.b.pid,
                    &["ip", f, "route", "flush", "cache"],
                ));
            }
        }
        std::thread::scope(|scope| {
            for argv in &commands {
                // conntrack exits 1 when there was nothing to delete.
                scope.spawn(move || drop(run(argv)));
            }
        });
    }

    /// A live UDP flow from A's port `sport` to B's echo, answered (up to `tries`, 500 ms
    /// apart); the socket stays open while the case runs.
    fn live_flow(&self, family: Family, sport: u16, tries: u32) -> (UdpSocket, Vec<u8>) {
        let from = SocketAddr::new(self.a.ip(family), sport);
        let to = SocketAddr::new(self.b.ip(family), UDP_PORT);
        live::udp_flow(&self.a.netns(), from, to, tries)
    }

    /// `ip route get A` in B: the path MTU it learned, if any.
    fn path_mtu(&self, family: Family) -> String {
        let a = self.a.ip(family).to_string();
        record::path_mtu(self.b.pid, &a)
    }

    /// The case's frame, and the UDP socket of its live flow (kept open while it runs).
    fn frame(&self, case: &LinkCase) -> (Vec<u8>, Option<UdpSocket>) {
        let base = &case.base;
        let family = base.family;
        let flow = match base.l4 {
            L4::MtuError { sport } if case.message == Message::Ip => {
                Some((sport, self.live_flow(family, sport, 4)))
            }
            _ => None,
        };
        let (b, a) = (self.b.ip(family), self.a.ip(family));
        let quote = flow.as_ref().map_or_else(Vec::new, |(sport, (_, answer))| {
            frame::answer((b, UDP_PORT), (a, *sport), answer)
        });
        let target = Target {
            src_mac: if case.wire == Wire::SpoofedMac {
                FOREIGN_MAC
            } else {
                self.a.mac
            },
            nic_mac: if case.wire == Wire::ThirdMac {
                self.c.mac
            } else {
                self.b.mac
            },
            src: self.source(base.source, family),
            dst: if case.wire == Wire::ThirdAddress {
                self.c.ip(family)
            } else {
                b
            },
            tcp_port: TCP_PORT,
            udp_port: UDP_PORT,
            quote,
            tcp_numbers: None,
        };
        let bytes = message(case, &target, self.a.mac);
        (bytes, flow.map(|(_, (socket, _))| socket))
    }

    /// What belongs to `case`: the addresses its message is about, its port and addresses.
    fn own(&self, case: &LinkCase) -> Own {
        let family = case.base.family;
        let src = self.source(case.base.source, family);
        let dst = if case.wire == Wire::ThirdAddress {
            self.c.ip(family)
        } else {
            self.b.ip(family)
        };
        own(case, src, dst, self.a.ip(family))
    }

    fn unlink(&mut self) {
        if self.linked {
            self.world
                .dxdp
                .run(&["unlink", &self.a.name, &self.b.name])
                .assert_success();
            self.linked = false;
        }
    }

    /// The rule `case` wants, on both paths (the bridge's is the same bridge), in the chain
    /// that filters the bridge's frames.
    fn set_rule(&mut self, rule: Rule) {
        if self.rule == rule {
            return;
        }
        self.rule_guard = None;
        if let Rule::DropTcp(family) = rule {
            let (tool, a, b) = match family {
                Family::V4 => ("iptables", self.a.ip.0, self.b.ip.0),
                Family::V6 => ("ip6tables", self.a.ip.1, self.b.ip.1),
            };
            let (a, b) = (a.to_string(), b.to_string());
            self.rule_guard = Some(self.crossing.rule(
                tool,
                S::CHAIN,
                &["-s", &a, "-d", &b, "-p", "tcp", "-j", "DROP"],
            ));
        }
        self.rule = rule;
    }
}

impl<S: Segment> Topology for Links<S> {
    type Case = LinkCase;
    const TEST: &'static str = S::TEST;
    const NORMALISED: &'static [Allowance] = allowlist::LINKS_NORMALISED;

    fn case(&self, seed: u64, index: u64) -> LinkCase {
        LinkCase::generate(seed, index, S::MTU)
    }

    fn make_dockers(&mut self, case: &LinkCase) {
        self.unlink();
        self.set_rule(case.rule);
    }

    fn make_fast(&mut self, case: &LinkCase) {
        self.unlink();
        self.set_rule(case.rule);
        let datapath = match case.datapath {
            Datapath::Tc => "tc",
            Datapath::Xdp => "xdp",
        };
        let mut args = vec!["link", &self.a.name, &self.b.name, "--datapath", datapath];
        // Past the firewall walk when the case has no rule of its own: other tests' rules come
        // and go on this host (see the exposed topology). With the case's rule, the walk must
        // close the rule's family and link the other.
        if case.rule == Rule::None {
            args.push("--bypass-firewall");
        }
        let outcome = self.world.dxdp.run(&args);
        outcome.assert_success();
        if let Rule::DropTcp(family) = case.rule
            && self.crossing.filters(family)
        {
            assert!(
                outcome.stdout.contains("only") || outcome.stderr.contains("only"),
                "case {case}: the rule should narrow the link to one family: {outcome}"
            );
        }
        self.linked = true;
    }

    fn exercise(&mut self, case: &LinkCase) -> Observation {
        self.forget(case);
        let (bytes, flow) = self.frame(case);
        let own = self.own(case);
        for socket in [&self.a_eth, &self.b_eth, &self.c_eth, &self.bridge_eth] {
            socket.forget();
        }
        self.a_eth.send(&bytes);
        std::thread::sleep(WINDOW);
        let seen = |socket: &PacketSocket| {
            let mut lines: Vec<String> = socket
                .arrived(Duration::from_millis(20))
                .iter()
                .filter_map(|a| {
                    let line = link_line(&a.bytes, &own)?;
                    // The host's own neighbour traffic, to and from it (the bridge, or its
                    // end of a veth): its entries are not reset between cases, and not the
                    // case's.
                    let (sent, asked) = self.host_macs.iter().fold((false, false), |(s, a), m| {
                        (
                            s || line.starts_with(&format!("{m} > ")),
                            a || line.contains(&format!(" > {m}")),
                        )
                    });
                    let (arp, nd) = (line.contains(": ARP "), line.contains(" ND "));
                    if (sent || asked) && (arp || nd) {
                        return None;
                    }
                    // The other family's resolution: the namespaces' own, whatever the case.
                    if (arp && case.base.family == Family::V6)
                        || (nd && case.base.family == Family::V4)
                    {
                        return None;
                    }
                    Some(if a.bytes == bytes {
                        format!("{line} (as sent)")
                    } else {
                        line
                    })
                })
                .collect();
            lines.sort();
            lines
        };
        let mut observation = Observation::new();
        observation.insert("B", seen(&self.b_eth));
        observation.insert("A", seen(&self.a_eth));
        observation.insert("C", seen(&self.c_eth));
        observation.insert("bridge", seen(&self.bridge_eth));
        if flow.is_some() {
            observation.insert("path MTU", vec![self.path_mtu(case.base.family)]);
        }
        drop(flow);
        if neighbours(case) {
            self.forget(case);
        }
        observation
    }

    fn allowed(
        &self,
        case: &LinkCase,
        observer: &str,
        docker: &[String],
        fast: &[String],
    ) -> Option<&'static Allowance> {
        allowlist::links(case, observer, docker, fast)
    }
}

/// The frame `case` sends on `target`, A's MAC being `a_mac`.
fn message(case: &LinkCase, target: &Target, a_mac: [u8; 6]) -> Vec<u8> {
    let base = &case.base;
    match case.message {
        Message::Ip => frame::frame(base, target),
        Message::Oversized { .. } => frame::frame(&case.ip_case(), target),
        Message::Arp { reply, lie } => {
            let sender = if lie { FOREIGN_MAC } else { target.src_mac };
            frame::arp(base, target, reply, sender)
        }
        Message::Neighbour { advert, option } => {
            let lladdr = match option {
                NdOption::None => None,
                NdOption::Own => Some(a_mac),
                NdOption::Foreign => Some(FOREIGN_MAC),
            };
            frame::neighbour(base, target, advert, lladdr)
        }
    }
}

/// What belongs to `case` sent from `src` to `dst` by A at `a`: ARP and neighbour discovery
/// about `src` or `dst` in the cases that send them, errors quoting its own port between its
/// addresses.
fn own(case: &LinkCase, src: IpAddr, dst: IpAddr, a: IpAddr) -> Own {
    Own {
        about: neighbours(case).then_some([src, dst]),
        port: case.ip_case().l4.sport(),
        addresses: [src, dst, a],
    }
}

/// Whether the case sends ARP or neighbour discovery, whose answers its observers record.
fn neighbours(case: &LinkCase) -> bool {
    matches!(
        case.message,
        Message::Arp { .. } | Message::Neighbour { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::differential::{
        case::{Case, WIRE_MTU},
        segment::OVERLAY_MTU,
    };

    const A_MAC: [u8; 6] = [0x02, 0x42, 0x0a, 0, 0, 2];
    const B_MAC: [u8; 6] = [0x02, 0x42, 0x0a, 0, 0, 3];

    fn addr(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    /// A's, B's and another source's address in `family`.
    fn addresses(family: Family) -> (IpAddr, IpAddr, IpAddr) {
        match family {
            Family::V4 => (addr("10.231.9.2"), addr("10.231.9.3"), addr("10.241.9.9")),
            Family::V6 => (
                addr("fd00:231:9::2"),
                addr("fd00:231:9::3"),
                addr("fd00:241:9::9"),
            ),
        }
    }

    fn target(case: &LinkCase) -> Target {
        let (a, b, other) = addresses(case.base.family);
        let quote = match case.base.l4 {
            L4::MtuError { sport } => frame::answer((b, UDP_PORT), (a, sport), b"dxdp"),
            _ => Vec::new(),
        };
        Target {
            src_mac: A_MAC,
            nic_mac: B_MAC,
            src: if case.base.source == Source::Client {
                a
            } else {
                other
            },
            dst: b,
            tcp_port: TCP_PORT,
            udp_port: UDP_PORT,
            quote,
            tcp_numbers: None,
        }
    }

    /// The normalisation never leaves out the frame a case sent, wherever it arrives: it is
    /// about the case's own addresses and port.
    #[test]
    fn a_link_case_records_the_frame_it_sent() {
        for (seed, mtu) in [(39, WIRE_MTU), (4242, WIRE_MTU), (5151, OVERLAY_MTU)] {
            for index in 0..3000 {
                let case = LinkCase::generate(seed, index, mtu);
                let target = target(&case);
                let bytes = message(&case, &target, A_MAC);
                let (a, _, _) = addresses(case.base.family);
                let own = own(&case, target.src, target.dst, a);
                assert!(
                    link_line(&bytes, &own).is_some(),
                    "case {case}: its own frame is left out"
                );
            }
        }
    }

    /// What the long run of seed 4242 met: a solicitation for A's gateway in a neighbour case,
    /// an error quoting two cases back (port 31020 in case 1022).
    #[test]
    fn a_link_case_leaves_out_what_is_not_its_own() {
        let case = (0..)
            .map(|index| LinkCase::generate(4242, index, WIRE_MTU))
            .find(|c| {
                c.base.family == Family::V6
                    && matches!(c.message, Message::Neighbour { advert: false, .. })
                    && c.base.l2 == crate::differential::case::L2::NicMac
            })
            .expect("a neighbour solicitation case");
        let (a, b, _) = addresses(Family::V6);
        let gateway = addr("fd00:231:9::1");
        let solicitation = frame::neighbour(
            &case.base,
            &Target {
                src: a,
                dst: gateway,
                ..target(&case)
            },
            false,
            Some(A_MAC),
        );
        assert!(link_line(&solicitation, &own(&case, a, b, a)).is_none());
        assert!(link_line(&solicitation, &own(&case, a, gateway, a)).is_some());

        let error = Case {
            l4: L4::MtuError { sport: 31020 },
            ..case.base
        };
        let quoting = |sport| Target {
            src: gateway,
            dst: b,
            quote: frame::answer((b, TCP_PORT), (a, sport), b""),
            tcp_numbers: None,
            ..target(&case)
        };
        let late = frame::frame(&error, &quoting(31020));
        let ip = LinkCase {
            message: Message::Ip,
            base: Case {
                l4: L4::Tcp {
                    flags: crate::differential::case::TcpFlags(0x02),
                    sport: 31022,
                    dport: crate::differential::case::Port::Published,
                    payload: 0,
                },
                ..case.base
            },
            ..case
        };
        assert!(link_line(&late, &own(&ip, a, b, a)).is_none());
        let own_error = frame::frame(&error, &quoting(31022));
        assert!(link_line(&own_error, &own(&ip, a, b, a)).is_some());
    }
}
