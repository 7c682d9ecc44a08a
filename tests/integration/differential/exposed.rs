//! The exposed-port topology: the ingress tests' client namespace behind a veth "NIC", a
//! container publishing a TCP port (an echo) and a UDP port (an echo) on the NIC's
//! addresses in both families, another container beside it, and a dummy interface that routes
//! the addresses "not behind the NIC". Docker's path: the container not exposed; dxdp's path:
//! `dxdp expose CONTAINER --nic NIC`. Observers: what arrived in the container's namespace, what
//! came back to the client, and, for MTU errors, the container's path MTU towards the client.

use std::{
    net::{IpAddr, SocketAddr, UdpSocket},
    time::Duration,
};

use super::{
    allowlist,
    case::{ExposedCase, Family, L4, Numbers, Source, own_port},
    frame::{self, Target, mac},
    live::{self, TCP_ECHO, UDP_ECHO},
    packet_socket::PacketSocket,
    record::{self, lines},
    runner::{Allowance, Observation, Topology},
    sources::Sources,
};
use crate::support::{
    Background, Outside, World, in_container, must, named_netns, netns_of, quietly, run,
};

/// How long each observer watches after a frame: long enough for a reply to come back through
/// either path, short of the first retransmission (1 s).
const WINDOW: Duration = Duration::from_millis(300);

/// The ports the container publishes (host side) and listens on.
pub(super) const TCP_PORT: u16 = 17100;
const UDP_PORT: u16 = 17101;
const TCP_INSIDE: u16 = 5201;
const UDP_INSIDE: u16 = 7002;

pub struct ExposedPorts {
    // Dropped first: sockets and processes, then the fixture's interfaces, then the world
    // (containers, networks, the pin directory with `dxdp cleanup`).
    client: PacketSocket,
    inside: PacketSocket,
    _udp_echo: Background,
    _tcp_echo: Background,
    nic_mac: [u8; 6],
    client_mac: [u8; 6],
    web: String,
    pid: u32,
    container: (IpAddr, IpAddr),
    fast: bool,
    sources: Sources,
    out: Outside,
    world: World,
}

impl ExposedPorts {
    pub fn new() -> Self {
        let mut world = World::shared();
        let out = Outside::new(&world);
        let net = world.network_v6("diff", true, &[]);
        let (h4, h6) = (&out.host_addr, &out.host_addr6);
        let publish = [
            format!("{h4}:{TCP_PORT}:{TCP_INSIDE}/tcp"),
            format!("{h4}:{UDP_PORT}:{UDP_INSIDE}/udp"),
            format!("[{h6}]:{TCP_PORT}:{TCP_INSIDE}/tcp"),
            format!("[{h6}]:{UDP_PORT}:{UDP_INSIDE}/udp"),
        ];
        let mut args = vec!["--network", net.as_str()];
        for p in &publish {
            args.extend(["-p", p.as_str()]);
        }
        let web = world.run("web", &args, &["sleep", "infinity"]);
        let other = world.run("other", &["--network", &net], &["sleep", "infinity"]);
        let pid = world.pid(&web);
        let ip = |c: &str| -> (IpAddr, IpAddr) {
            (
                world.ip(c, &net).parse().expect("an IPv4 address"),
                world.ip6(c, &net).parse().expect("an IPv6 address"),
            )
        };
        let (container, other) = (ip(&web), ip(&other));
        // No SYN-ACK is sent again (a source that never answers had them land in later cases'
        // windows, on Docker's path: the conntrack entry that would translate them is gone).
        must(&in_container(
            pid,
            &["sysctl", "-q", "-w", "net.ipv4.tcp_synack_retries=0"],
        ));
        // The host's python3 in the container's namespaces: the image has none.
        let echo = |script: &str, port: u16| {
            Background::spawn(&in_container(
                pid,
                &["python3", "-c", script, &port.to_string()],
            ))
        };
        let (udp_echo, tcp_echo) = (echo(UDP_ECHO, UDP_INSIDE), echo(TCP_ECHO, TCP_INSIDE));

        let sources = Sources::new(&world.prefix, &out, other);

        let client = PacketSocket::open(&named_netns(&out.ns.name), &out.peer);
        let inside = PacketSocket::open(&netns_of(pid), "eth0");
        let nic_mac = mac(
            &std::fs::read_to_string(format!("/sys/class/net/{}/address", out.nic))
                .expect("the NIC's MAC"),
        );
        let client_mac = mac(&must(&[
            "ip",
            "netns",
            "exec",
            &out.ns.name,
            "cat",
            &format!("/sys/class/net/{}/address", out.peer),
        ]));
        let topology = Self {
            client,
            inside,
            _udp_echo: udp_echo,
            _tcp_echo: tcp_echo,
            nic_mac,
            client_mac,
            web,
            pid,
            container,
            fast: false,
            sources,
            out,
            world,
        };
        topology.assert_sources_stay_here();
        // The container's IPv6 address may still be tentative (DAD), and the first packets of
        // either family wait for neighbours: the cases start once a flow answers in both.
        for family in [Family::V4, Family::V6] {
            drop(topology.live_flow(family, 29999, 20));
            // The TCP echo started with the UDP one, which has answered.
            let client = topology.client(family);
            let published = topology.sources.address(Source::HostNic, client);
            drop(live::connect(
                &named_netns(&topology.out.ns.name),
                SocketAddr::new(client, 29998),
                SocketAddr::new(published, TCP_PORT),
            ));
        }
        topology
    }

    /// The address a case's source kind stands for, in its family.
    fn source(&self, source: Source, family: Family) -> IpAddr {
        self.sources.address(source, self.client(family))
    }

    /// The client namespace's own address in `family`.
    fn client(&self, family: Family) -> IpAddr {
        match family {
            Family::V4 => &self.out.client_addr,
            Family::V6 => &self.out.client_addr6,
        }
        .parse()
        .expect("the client's address")
    }

    /// No source a case uses may route out of the host's own interfaces.
    fn assert_sources_stay_here(&self) {
        self.sources
            .assert_stay_here((self.client(Family::V4), self.client(Family::V6)));
    }

    /// Forgets what earlier cases left on the paths: conntrack's entries of the test's
    /// addresses, and the container's cached path MTUs.
    fn forget(&self) {
        let (h4, h6) = (&self.out.host_addr, &self.out.host_addr6);
        let (c4, c6) = (self.container.0.to_string(), self.container.1.to_string());
        for args in [
            ["-D", "-f", "ipv4", "-d", h4],
            ["-D", "-f", "ipv6", "-d", h6],
            ["-D", "-f", "ipv4", "-s", &c4],
            ["-D", "-f", "ipv6", "-s", &c6],
        ] {
            // Exits 1 when there was nothing to delete.
            let mut argv = vec!["conntrack"];
            argv.extend(args);
            let _ = run(&argv);
        }
        for family in ["-4", "-6"] {
            quietly(&in_container(
                self.pid,
                &["ip", family, "route", "flush", "cache"],
            ));
        }
    }

    /// A live UDP flow from the client's port `sport`: a datagram to the published port (up to
    /// `tries`, 500 ms apart) and the container's answer. The socket stays open while the case
    /// runs, so that the client itself raises no "port unreachable".
    fn live_flow(&self, family: Family, sport: u16, tries: u32) -> (UdpSocket, Vec<u8>) {
        let client = self.client(family);
        let host = self.sources.address(Source::HostNic, client);
        let ns = named_netns(&self.out.ns.name);
        live::udp_flow(
            &ns,
            SocketAddr::new(client, sport),
            SocketAddr::new(host, UDP_PORT),
            tries,
        )
    }

    /// `ip route get CLIENT` in the container: the path MTU it learned, if any.
    fn path_mtu(&self, family: Family) -> String {
        let client = match family {
            Family::V4 => &self.out.client_addr,
            Family::V6 => &self.out.client_addr6,
        };
        record::path_mtu(self.pid, client)
    }
}

impl Topology for ExposedPorts {
    type Case = ExposedCase;
    const TEST: &'static str = "differential::exposed_ports_match_dockers_path";
    const NORMALISED: &'static [Allowance] = allowlist::NORMALISED;

    fn case(&self, seed: u64, index: u64) -> ExposedCase {
        ExposedCase::generate(seed, index)
    }

    fn make_dockers(&mut self, _: &ExposedCase) {
        if self.fast {
            self.world
                .dxdp
                .run(&["unexpose", &self.web])
                .assert_success();
            self.fast = false;
        }
    }

    fn make_fast(&mut self, _: &ExposedCase) {
        if !self.fast {
            // Past the firewall walk: the walk judges every rule on the host, and other tests'
            // networks come and go with rules of their own (their MASQUERADE rules made it
            // refuse midway); this test adds none, and the walk has tests of its own.
            self.world
                .dxdp
                .run(&[
                    "expose",
                    &self.web,
                    "--nic",
                    &self.out.nic,
                    "--bypass-firewall",
                ])
                .assert_success();
            self.fast = true;
        }
    }

    fn exercise(&mut self, exposed: &ExposedCase) -> Observation {
        let case = &exposed.base;
        self.forget();
        let (published, client) = match case.family {
            Family::V4 => (&self.out.host_addr, &self.out.client_addr),
            Family::V6 => (&self.out.host_addr6, &self.out.client_addr6),
        };
        let published: IpAddr = published.parse().expect("published address");
        let client: IpAddr = client.parse().expect("client address");
        let flow = match case.l4 {
            L4::MtuError { sport } => Some((sport, self.live_flow(case.family, sport, 4))),
            _ => None,
        };
        let quote = flow.as_ref().map_or_else(Vec::new, |(sport, (_, answer))| {
            frame::answer((published, UDP_PORT), (client, *sport), answer)
        });
        // A live connection from the case's own port, whose next numbers (shifted) the
        // segment carries.
        let (connection, tcp_numbers) = match exposed.numbers {
            Numbers::Own => (None, None),
            Numbers::Live { seq, ack } => {
                let own = own_port(case.index);
                let ns = named_netns(&self.out.ns.name);
                let from = SocketAddr::new(client, own);
                let connection = live::connect(&ns, from, SocketAddr::new(published, TCP_PORT));
                let (server, client_next) = live::next_numbers(&self.client, TCP_PORT, own);
                let numbers = (
                    client_next.wrapping_add_signed(seq),
                    server.wrapping_add_signed(ack),
                );
                (Some(connection), Some(numbers))
            }
        };
        let target = Target {
            src_mac: self.client_mac,
            nic_mac: self.nic_mac,
            src: self.source(case.source, case.family),
            dst: published,
            tcp_port: TCP_PORT,
            udp_port: UDP_PORT,
            quote,
            tcp_numbers,
        };
        let bytes = frame::frame(case, &target);
        self.client.forget();
        self.inside.forget();
        self.client.send(&bytes);
        std::thread::sleep(WINDOW);
        let seen = |socket: &PacketSocket| {
            let arrived = socket.arrived(Duration::from_millis(20));
            lines(arrived.iter().map(|a| a.bytes.as_slice()))
        };
        let mut observation = Observation::new();
        observation.insert("container", seen(&self.inside));
        observation.insert("client", seen(&self.client));
        if flow.is_some() {
            observation.insert("path MTU", vec![self.path_mtu(case.family)]);
        }
        // What the case left in the container: the live connection, and any socket its own
        // segment opened there (a SYN's request socket).
        let mut ports = vec![];
        if connection.is_some() {
            drop(connection);
            ports.push(own_port(case.index));
        }
        // Not port 0: listening sockets' remote port is 0, and the echo's must live on.
        if let L4::Tcp { sport, .. } = case.l4
            && sport != 0
            && !ports.contains(&sport)
        {
            ports.push(sport);
        }
        for port in ports {
            let abort = live::abort_server_side(port);
            quietly(&in_container(
                self.pid,
                &abort.each_ref().map(String::as_str),
            ));
        }
        observation
    }

    fn allowed(
        &self,
        case: &ExposedCase,
        observer: &str,
        docker: &[String],
        fast: &[String],
    ) -> Option<&'static Allowance> {
        allowlist::exposed(case, observer, docker, fast)
    }

    /// The exposed ports' counters (what took the fast path, what was left to Docker's), how
    /// full the connection tables are, and the container stack's drop counters.
    fn evidence(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let status = self.world.dxdp.run(&["status", "--json"]);
        match serde_json::from_str::<serde_json::Value>(&status.stdout) {
            Ok(json) => {
                for port in json["exposed"].as_array().into_iter().flatten() {
                    let text = |field: &str| port[field].as_str().unwrap_or("?").to_owned();
                    lines.push(format!(
                        "port {} {}:{}: in {} out {} passed {}",
                        text("protocol"),
                        text("host_addr"),
                        port["host_port"],
                        port["inbound"]["packets"],
                        port["outbound"]["packets"],
                        port["passed_packets"],
                    ));
                }
                lines.push(format!("connections {}", json["connections"]));
            }
            Err(e) => lines.push(format!("no status: {e}: {}", status.stderr.trim())),
        }
        lines.push(record::stack_drops(self.pid));
        lines
    }
}
