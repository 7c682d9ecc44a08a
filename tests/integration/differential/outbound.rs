//! The outbound topology (`dxdp egress`, issue 36): a container on a dual-stack bridge network
//! and a server in the outside namespace behind a veth "NIC" (the ingress tests' `Outside`), a
//! UDP echo and a TCP echo on both families. Before each case the container opens a live flow
//! of the case's protocol from its own port to the server (a UDP datagram answered, or a TCP
//! connection that echoed a few bytes), so that conntrack holds an answered, established
//! connection the fast path may carry; then one frame goes out (the container puts it on its
//! own `eth0`, towards the server) or back (the outside namespace puts it onto the NIC, to the
//! host's address at the live flow's masqueraded port). Docker's path: `egress off`; dxdp's:
//! `dxdp egress on CONTAINER --nic NIC`. Observers: what arrived at the outside namespace's end
//! of the NIC and on the container's `eth0`, and, for an MTU error coming back, the container's
//! path MTU towards the server.

use std::{
    net::{IpAddr, SocketAddr, TcpStream, UdpSocket},
    time::Duration,
};

use super::{
    allowlist,
    case::{Case, Direction, Family, L4, OutboundCase, Port},
    frame::{self, Target, mac},
    live::{self, GREETING, TCP_ECHO, UDP_ECHO},
    packet_socket::PacketSocket,
    record::{self, lines},
    runner::{Allowance, Observation, Topology},
    sources::Sources,
};
use crate::support::{
    Background, Outside, World, in_container, in_ns, must, named_netns, netns_of, quietly, run,
};

/// As the exposed topology's: an answer comes back well within it.
const WINDOW: Duration = Duration::from_millis(300);
/// The server's ports in the outside namespace.
const TCP_PORT: u16 = 17200;
const UDP_PORT: u16 = 17201;
/// The container's end of a live flow, open while its case runs.
enum Flow {
    Udp(#[allow(dead_code)] UdpSocket),
    /// Closed with an RST (`SO_LINGER` 0), so that no TIME_WAIT keeps the port from the next
    /// run of the same case.
    Tcp(#[allow(dead_code)] TcpStream),
}

pub struct Outbound {
    // Dropped first: sockets and processes, then the fixture's interfaces, then the world
    // (containers, networks, the pin directory with `dxdp cleanup`).
    outside_eth: PacketSocket,
    container_eth: PacketSocket,
    _udp_echo: Background,
    _tcp_echo: Background,
    container_mac: [u8; 6],
    gateway_mac: [u8; 6],
    nic_mac: [u8; 6],
    outside_mac: [u8; 6],
    name: String,
    pid: u32,
    container: (IpAddr, IpAddr),
    fast: bool,
    /// Cases whose frame or its answers the fast path carried (its counters moved while the
    /// case's frame was on the way): a run where none did compared Docker's path with itself.
    carried: u64,
    sources: Sources,
    out: Outside,
    world: World,
}

impl Outbound {
    pub fn new() -> Self {
        let mut world = World::shared();
        let out = Outside::new(&world);
        let net = world.network_v6("diff-out", true, &[]);
        let name = world.run("client", &["--network", &net], &["sleep", "infinity"]);
        let other = world.run("other", &["--network", &net], &["sleep", "infinity"]);
        let pid = world.pid(&name);
        let ip = |c: &str| -> (IpAddr, IpAddr) {
            (
                world.ip(c, &net).parse().expect("an IPv4 address"),
                world.ip6(c, &net).parse().expect("an IPv6 address"),
            )
        };
        let (container, other) = (ip(&name), ip(&other));
        let sources = Sources::new(&world.prefix, &out, other);
        let echo = |script: &str, port: u16| {
            Background::spawn(&in_ns(
                &out.ns.name,
                &["python3", "-c", script, &port.to_string()],
            ))
        };
        let (udp_echo, tcp_echo) = (echo(UDP_ECHO, UDP_PORT), echo(TCP_ECHO, TCP_PORT));
        let outside_eth = PacketSocket::open(&named_netns(&out.ns.name), &out.peer);
        let container_eth = PacketSocket::open(&netns_of(pid), "eth0");
        let sysfs_mac = |iface: &str| {
            mac(&std::fs::read_to_string(format!("/sys/class/net/{iface}/address")).expect("a MAC"))
        };
        let outside_mac = mac(&must(&[
            "ip",
            "netns",
            "exec",
            &out.ns.name,
            "cat",
            &format!("/sys/class/net/{}/address", out.peer),
        ]));
        let topology = Self {
            outside_eth,
            container_eth,
            _udp_echo: udp_echo,
            _tcp_echo: tcp_echo,
            container_mac: mac(&world.mac(&name, &net)),
            gateway_mac: sysfs_mac(&bridge_of(&net)),
            nic_mac: sysfs_mac(&out.nic),
            outside_mac,
            name,
            pid,
            container,
            fast: false,
            carried: 0,
            sources,
            out,
            world,
        };
        // Sources stand in for the container's address going out, the server's coming back.
        topology.sources.assert_stay_here(topology.container);
        topology.sources.assert_stay_here(topology.server_pair());
        // The container's IPv6 address may still be tentative (DAD), and the first packets of
        // either family wait for neighbours: the cases start once a flow answers in both.
        for family in [Family::V4, Family::V6] {
            drop(topology.udp_flow(family, 29999, 20));
            // The TCP echo started with the UDP one, which has answered.
            drop(topology.tcp_flow(family, 29998));
        }
        topology
    }

    fn pick(pair: (IpAddr, IpAddr), family: Family) -> IpAddr {
        match family {
            Family::V4 => pair.0,
            Family::V6 => pair.1,
        }
    }

    fn server_pair(&self) -> (IpAddr, IpAddr) {
        (
            self.out.client_addr.parse().expect("the server's address"),
            self.out.client_addr6.parse().expect("the server's address"),
        )
    }

    fn host_pair(&self) -> (IpAddr, IpAddr) {
        (
            self.out.host_addr.parse().expect("the NIC's address"),
            self.out.host_addr6.parse().expect("the NIC's address"),
        )
    }

    /// Forgets what earlier cases left on the paths: conntrack's entries of the test's
    /// addresses, and the container's cached path MTUs.
    fn forget(&self) {
        let mut addresses = Vec::new();
        for pair in [self.container, self.host_pair(), self.server_pair()] {
            addresses.extend([pair.0.to_string(), pair.1.to_string()]);
        }
        for (i, addr) in addresses.iter().enumerate() {
            let family = if i % 2 == 0 { "ipv4" } else { "ipv6" };
            // Both ends: the live flows and the forged frames' entries, either way. Exits 1
            // when there was nothing to delete.
            for end in ["-s", "-d"] {
                let _ = run(&["conntrack", "-D", "-f", family, end, addr]);
            }
        }
        for family in ["-4", "-6"] {
            quietly(&in_container(
                self.pid,
                &["ip", family, "route", "flush", "cache"],
            ));
        }
    }

    /// A live UDP flow from the container's port `sport` to the server's echo, answered (up to
    /// `tries`, 500 ms apart): the socket and the answer.
    fn udp_flow(&self, family: Family, sport: u16, tries: u32) -> (UdpSocket, Vec<u8>) {
        let from = SocketAddr::new(Self::pick(self.container, family), sport);
        let to = SocketAddr::new(Self::pick(self.server_pair(), family), UDP_PORT);
        live::udp_flow(&netns_of(self.pid), from, to, tries)
    }

    /// A live TCP connection from the container's port `sport` to the server's echo, which
    /// echoed a greeting: conntrack holds it established and answered.
    fn tcp_flow(&self, family: Family, sport: u16) -> TcpStream {
        let from = SocketAddr::new(Self::pick(self.container, family), sport);
        let to = SocketAddr::new(Self::pick(self.server_pair(), family), TCP_PORT);
        live::connect(&netns_of(self.pid), from, to)
    }

    /// The port conntrack's masquerade gave the container's flow from `sport` (the reply
    /// tuple's destination port), or `sport` itself where it lists none.
    fn masqueraded(&self, case: &Case, sport: u16) -> u16 {
        let (proto, family) = (
            if matches!(case.l4, L4::Tcp { .. }) {
                "tcp"
            } else {
                "udp"
            },
            match case.family {
                Family::V4 => "ipv4",
                Family::V6 => "ipv6",
            },
        );
        let from = Self::pick(self.container, case.family).to_string();
        let listed = run(&[
            "conntrack",
            "-L",
            "-f",
            family,
            "-p",
            proto,
            "-s",
            &from,
            "--sport",
            &sport.to_string(),
        ]);
        listed
            .stdout
            .lines()
            .next()
            .and_then(|entry| {
                entry
                    .split_whitespace()
                    .filter(|w| w.starts_with("dport="))
                    .nth(1)
            })
            .and_then(|field| field["dport=".len()..].parse().ok())
            .unwrap_or(sport)
    }

    /// Cases whose frame or its answers the fast path carried.
    pub fn carried(&self) -> u64 {
        self.carried
    }

    /// The packets the fast path carried for the container since `egress on`, both ways
    /// (`dxdp status --json`); 0 on Docker's path.
    fn fast_path_packets(&self) -> u64 {
        if !self.fast {
            return 0;
        }
        let run = self.world.dxdp.run(&["status", "--json"]);
        run.assert_success();
        let status: serde_json::Value = serde_json::from_str(&run.stdout).expect("status JSON");
        let egress = status["egress"].as_array().into_iter().flatten();
        egress
            .filter(|e| e["container"] == self.name.as_str())
            .map(|e| {
                e["outbound"]["packets"].as_u64().unwrap_or(0)
                    + e["inbound"]["packets"].as_u64().unwrap_or(0)
            })
            .sum()
    }

    /// `ip route get SERVER` in the container: the path MTU it learned, if any.
    fn path_mtu(&self, family: Family) -> String {
        let server = Self::pick(self.server_pair(), family).to_string();
        record::path_mtu(self.pid, &server)
    }

    /// The frame of a case going out, from the container towards the server.
    fn frame_out(
        &self,
        case: &OutboundCase,
        answer: &[u8],
        numbers: Option<(u32, u32)>,
    ) -> Vec<u8> {
        let base = &case.base;
        let (container, server) = (
            Self::pick(self.container, base.family),
            Self::pick(self.server_pair(), base.family),
        );
        // An MTU error the container's stack might send about the server's answer, as it
        // arrived.
        let quote = match base.l4 {
            L4::MtuError { sport } => frame::answer((server, UDP_PORT), (container, sport), answer),
            _ => Vec::new(),
        };
        let target = Target {
            src_mac: self.container_mac,
            nic_mac: self.gateway_mac,
            src: self.sources.address(base.source, container),
            dst: server,
            tcp_port: TCP_PORT,
            udp_port: UDP_PORT,
            quote,
            tcp_numbers: numbers,
        };
        frame::frame(base, &target)
    }

    /// The frame of a case coming back, from the server's side to the host's address: the
    /// case's ports turned around, its own port (the live flow's) to the masqueraded one.
    fn frame_back(&self, case: &OutboundCase, numbers: Option<(u32, u32)>) -> Vec<u8> {
        let base = &case.base;
        let (host, server) = (
            Self::pick(self.host_pair(), base.family),
            Self::pick(self.server_pair(), base.family),
        );
        let server_port = |dport: Port, port: u16| match dport {
            Port::Published => port,
            Port::Beside => port.wrapping_add(1),
            Port::Number(n) => n,
        };
        let to = |sport: u16| {
            let port = if sport == case.flow_port() {
                self.masqueraded(base, sport)
            } else {
                sport
            };
            Port::Number(port)
        };
        let mut turned = *base;
        let mut quote = Vec::new();
        match &mut turned.l4 {
            L4::Tcp { sport, dport, .. } => {
                (*sport, *dport) = (server_port(*dport, TCP_PORT), to(*sport));
            }
            L4::Udp { sport, dport, .. } => {
                (*sport, *dport) = (server_port(*dport, UDP_PORT), to(*sport));
            }
            // A router on the way about the container's datagram as it left the NIC.
            L4::MtuError { sport } => {
                let Port::Number(masqueraded) = to(*sport) else {
                    unreachable!("a number")
                };
                quote = frame::answer((host, masqueraded), (server, UDP_PORT), GREETING);
            }
        }
        let target = Target {
            src_mac: self.outside_mac,
            nic_mac: self.nic_mac,
            src: self.sources.address(base.source, server),
            dst: host,
            tcp_port: TCP_PORT,
            udp_port: UDP_PORT,
            quote,
            tcp_numbers: numbers,
        };
        frame::frame(&turned, &target)
    }
}

impl Topology for Outbound {
    type Case = OutboundCase;
    const TEST: &'static str = "differential::outbound_connections_match_dockers_path";
    const NORMALISED: &'static [Allowance] = allowlist::OUTBOUND_NORMALISED;

    fn case(&self, seed: u64, index: u64) -> OutboundCase {
        OutboundCase::generate(seed, index)
    }

    fn make_dockers(&mut self, _: &OutboundCase) {
        if self.fast {
            self.world
                .dxdp
                .run(&["egress", "off", &self.name])
                .assert_success();
            self.fast = false;
        }
    }

    fn make_fast(&mut self, _: &OutboundCase) {
        if !self.fast {
            self.world
                .dxdp
                .run(&["egress", "on", &self.name, "--nic", &self.out.nic])
                .assert_success();
            self.fast = true;
        }
    }

    fn exercise(&mut self, case: &OutboundCase) -> Observation {
        self.forget();
        let base = &case.base;
        let sport = case.flow_port();
        let (flow, answer) = match base.l4 {
            L4::Tcp { .. } => (Flow::Tcp(self.tcp_flow(base.family, sport)), Vec::new()),
            _ => {
                let (socket, answer) = self.udp_flow(base.family, sport, 4);
                (Flow::Udp(socket), answer)
            }
        };
        // The segment's numbers: the connection's next ones in its direction, shifted.
        let numbers = case.shift().map(|(seq, ack)| {
            let (server, container) = live::next_numbers(&self.container_eth, TCP_PORT, sport);
            let (sender, receiver) = match case.direction {
                Direction::Out => (container, server),
                Direction::Back => (server, container),
            };
            (
                sender.wrapping_add_signed(seq),
                receiver.wrapping_add_signed(ack),
            )
        });
        let (bytes, socket) = match case.direction {
            Direction::Out => (self.frame_out(case, &answer, numbers), &self.container_eth),
            Direction::Back => (self.frame_back(case, numbers), &self.outside_eth),
        };
        self.outside_eth.forget();
        self.container_eth.forget();
        let before = self.fast_path_packets();
        socket.send(&bytes);
        std::thread::sleep(WINDOW);
        let seen = |socket: &PacketSocket| {
            let arrived = socket.arrived(Duration::from_millis(20));
            lines(arrived.iter().map(|a| a.bytes.as_slice()))
        };
        let mut observation = Observation::new();
        observation.insert("outside", seen(&self.outside_eth));
        observation.insert("container", seen(&self.container_eth));
        if case.direction == Direction::Back && matches!(base.l4, L4::MtuError { .. }) {
            observation.insert("path MTU", vec![self.path_mtu(base.family)]);
        }
        if self.fast_path_packets() > before {
            self.carried += 1;
        }
        if let Flow::Tcp(stream) = flow {
            drop(stream);
            let abort = live::abort_server_side(sport);
            quietly(&in_ns(&self.out.ns.name, &abort));
        }
        observation
    }

    fn allowed(
        &self,
        case: &OutboundCase,
        observer: &str,
        docker: &[String],
        fast: &[String],
    ) -> Option<&'static Allowance> {
        allowlist::outbound(case, observer, docker, fast)
    }
}

/// The Linux bridge of the host's Docker network `net`: `br-` and the first 12 digits of its ID.
fn bridge_of(net: &str) -> String {
    let id = must(&["docker", "network", "inspect", "-f", "{{.Id}}", net]);
    format!("br-{}", &id.trim()[..12])
}
