//! The exposed-port topology: the ingress tests' client namespace behind a veth "NIC", a
//! container publishing a TCP port (iperf3's listener) and a UDP port (an echo) on the NIC's
//! addresses in both families, another container beside it, and a dummy interface that routes
//! the addresses "not behind the NIC". Docker's path: the container not exposed; dxdp's path:
//! `dxdp expose CONTAINER --nic NIC`. Observers: what arrived in the container's namespace, what
//! came back to the client, and, for MTU errors, the container's path MTU towards the client.

use std::{
    net::{IpAddr, UdpSocket},
    time::Duration,
};

use super::{
    allowlist,
    case::{Case, Family, L4, Source},
    frame::{self, Target},
    packet_socket::PacketSocket,
    record::record,
    runner::{Allowance, Observation, Topology},
};
use crate::support::{
    Background, LinkGuard, NetnsGuard, Outside, World, iface_name, in_container, in_netns, must,
    named_netns, netns_of, quietly, run,
};

/// How long each observer watches after a frame: long enough for a reply to come back through
/// either path, short of the first retransmission (1 s).
const WINDOW: Duration = Duration::from_millis(300);

/// The ports the container publishes (host side) and listens on.
const TCP_PORT: u16 = 17100;
const UDP_PORT: u16 = 17101;
const TCP_INSIDE: u16 = 5201;
const UDP_INSIDE: u16 = 7002;

/// A UDP echo on both families that lives as long as its process (ingress_peer.py's gives up
/// after 30 s of silence, which a long run has), and past a datagram it cannot answer (from
/// port 0, say: `sendto` fails, which ended the echo and every later case's answers).
pub const ECHO: &str = "import socket, sys\n\
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n\
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n\
    s.bind(('::', int(sys.argv[1])))\n\
    while True:\n    \
        data, peer = s.recvfrom(65535)\n    \
        try:\n        \
            s.sendto(data, peer)\n    \
        except OSError:\n        \
            pass\n";

pub struct ExposedPorts {
    // Dropped first: sockets and processes, then the fixture's interfaces, then the world
    // (containers, networks, the pin directory with `dxdp cleanup`).
    client: PacketSocket,
    inside: PacketSocket,
    _echo: Background,
    nic_mac: [u8; 6],
    client_mac: [u8; 6],
    web: String,
    pid: u32,
    container: (IpAddr, IpAddr),
    other: (IpAddr, IpAddr),
    fast: bool,
    _elsewhere: LinkGuard,
    _sink: NetnsGuard,
    out: Outside,
    world: World,
}

impl ExposedPorts {
    pub fn new() -> Self {
        let mut world = World::shared();
        let out = Outside::new(&world);
        let k = out.k;
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
        let web = world.run("web", &args, &["iperf3", "-s"]);
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
        let echo = Background::spawn(&in_container(
            pid,
            &["python3", "-c", ECHO, &UDP_INSIDE.to_string()],
        ));

        // Addresses "not behind the NIC" live behind another veth of the test's, whose far end
        // sits alone in a namespace with no address: what goes there answers nobody. The
        // link-local and multicast sources and the class E "martian" get routes of their own,
        // through the NIC or that veth, so that no answer on either path follows the host's
        // default route out of the machine. All of them go with the interfaces.
        let sink = NetnsGuard::create(&format!("{}-sink{k}", world.prefix));
        let elsewhere = iface_name();
        let far_end = iface_name();
        must(&[
            "ip", "link", "add", &elsewhere, "type", "veth", "peer", "name", &far_end, "netns",
            &sink.name,
        ]);
        let elsewhere_guard = LinkGuard::adopt(&elsewhere);
        must(&["ip", "-n", &sink.name, "link", "set", &far_end, "up"]);
        must(&["ip", "link", "set", &elsewhere, "up"]);
        must(&[
            "ip",
            "addr",
            "add",
            &format!("10.240.{k}.1/24"),
            "dev",
            &elsewhere,
        ]);
        must(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("fd00:240:{k:x}::1/64"),
            "dev",
            &elsewhere,
            "nodad",
        ]);
        for (route, dev) in [
            (format!("169.254.236.{k}/32"), &out.nic),
            (format!("239.255.236.{k}/32"), &out.nic),
            (format!("240.236.{k}.9/32"), &elsewhere),
            (format!("0.236.{k}.9/32"), &elsewhere),
            (format!("::ffff:{}/128", out.client_addr), &elsewhere),
        ] {
            must(&["ip", "route", "add", &route, "dev", dev]);
        }
        // The one route not of this fixture's own: `replace`, should another run hold it.
        must(&["ip", "-6", "route", "replace", "::/128", "dev", &elsewhere]);
        // Neighbours nobody answers for would, 3 s later, draw "address unreachable" errors
        // into the container, in some later case's window: these are known, to a MAC nobody
        // has, so that what goes to them is dropped at once and silently.
        let nobody = "02:00:5e:10:ee:02";
        for (addr, dev) in [
            (format!("10.240.{k}.9"), &elsewhere),
            (format!("fd00:240:{k:x}::9"), &elsewhere),
            (format!("240.236.{k}.9"), &elsewhere),
            (format!("0.236.{k}.9"), &elsewhere),
            ("::".to_owned(), &elsewhere),
            (format!("::ffff:{}", out.client_addr), &elsewhere),
            (format!("169.254.236.{k}"), &out.nic),
        ] {
            must(&[
                "ip",
                "neigh",
                "replace",
                &addr,
                "lladdr",
                nobody,
                "dev",
                dev,
                "nud",
                "permanent",
            ]);
        }

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
            _echo: echo,
            nic_mac,
            client_mac,
            web,
            pid,
            container,
            other,
            fast: false,
            _elsewhere: elsewhere_guard,
            _sink: sink,
            out,
            world,
        };
        topology.assert_sources_stay_here();
        // The container's IPv6 address may still be tentative (DAD), and the first packets of
        // either family wait for neighbours: the cases start once a flow answers in both.
        for family in [Family::V4, Family::V6] {
            drop(topology.live_flow(family, 29999, 20));
        }
        topology
    }

    /// The address a case's source kind stands for, in its family.
    fn source(&self, source: Source, family: Family) -> IpAddr {
        let k = self.out.k;
        let v4 = family == Family::V4;
        let text = match (source, v4) {
            (Source::Client, true) => self.out.client_addr.clone(),
            (Source::Client, false) => self.out.client_addr6.clone(),
            (Source::Martian(n), true) => [
                "127.0.0.9".to_owned(),
                format!("0.236.{k}.9"),
                format!("240.236.{k}.9"),
            ][n as usize % 3]
                .clone(),
            (Source::Martian(n), false) => [
                "::1".to_owned(),
                "::".to_owned(),
                format!("::ffff:{}", self.out.client_addr),
            ][n as usize % 3]
                .clone(),
            (Source::HostNic, true) => self.out.host_addr.clone(),
            (Source::HostNic, false) => self.out.host_addr6.clone(),
            (Source::OtherContainer, true) => self.other.0.to_string(),
            (Source::OtherContainer, false) => self.other.1.to_string(),
            (Source::LinkLocal, true) => format!("169.254.236.{k}"),
            (Source::LinkLocal, false) => format!("fe80::236:{k:x}"),
            (Source::Multicast, true) => format!("239.255.236.{k}"),
            (Source::Multicast, false) => format!("ff0e::236:{k:x}"),
            (Source::Broadcast(n), true) => {
                ["255.255.255.255".to_owned(), format!("10.236.{k}.255")][n as usize % 2].clone()
            }
            (Source::Broadcast(_), false) => "ff02::1".to_owned(),
            (Source::NotViaNic, true) => format!("10.240.{k}.9"),
            (Source::NotViaNic, false) => format!("fd00:240:{k:x}::9"),
        };
        text.parse().expect("a source address")
    }

    /// No source a case uses may route out of the host's own interfaces: every answer must
    /// stay within what the test made.
    fn assert_sources_stay_here(&self) {
        let mut default_devs = Vec::new();
        for family in ["-4", "-6"] {
            let routes = must(&["ip", family, "route", "show", "default"]);
            default_devs.extend(
                routes
                    .split_whitespace()
                    .skip_while(|w| *w != "dev")
                    .nth(1)
                    .map(str::to_owned),
            );
        }
        let kinds = [
            Source::Client,
            Source::Martian(0),
            Source::Martian(1),
            Source::Martian(2),
            Source::HostNic,
            Source::OtherContainer,
            Source::LinkLocal,
            Source::Multicast,
            Source::Broadcast(0),
            Source::Broadcast(1),
            Source::NotViaNic,
        ];
        for family in [Family::V4, Family::V6] {
            for kind in kinds {
                let addr = self.source(kind, family).to_string();
                let route = run(&["ip", "route", "get", &addr]);
                // Multicast, broadcast and IPv6 link-local destinations are never forwarded:
                // an answer to them stays on the container's own link.
                let link_only = route.stdout.starts_with("multicast ")
                    || route.stdout.starts_with("broadcast ")
                    || addr.starts_with("fe80:");
                for dev in default_devs.iter().filter(|_| !link_only) {
                    assert!(
                        !(route.success() && route.stdout.contains(&format!("dev {dev} "))),
                        "source {addr} ({kind:?}) would be answered through {dev}: {route}"
                    );
                }
            }
        }
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
    /// `tries`, 500 ms apart) and the container's answer. The socket stays open while the case runs, so that the client
    /// itself raises no "port unreachable".
    fn live_flow(&self, family: Family, sport: u16, tries: u32) -> (UdpSocket, Vec<u8>) {
        let (client, host) = match family {
            Family::V4 => (&self.out.client_addr, &self.out.host_addr),
            Family::V6 => (&self.out.client_addr6, &self.out.host_addr6),
        };
        let client: IpAddr = client.parse().expect("client address");
        let host: IpAddr = host.parse().expect("host address");
        in_netns(&named_netns(&self.out.ns.name), move || {
            let socket = UdpSocket::bind((client, sport)).expect("the client's UDP socket");
            socket.connect((host, UDP_PORT)).expect("connect");
            socket
                .set_read_timeout(Some(Duration::from_millis(500)))
                .expect("timeout");
            for _ in 0..tries {
                socket.send(b"dxdp-differential").expect("send");
                let mut buf = [0u8; 2048];
                if let Ok(n) = socket.recv(&mut buf) {
                    return (socket, buf[..n].to_vec());
                }
            }
            panic!("no answer on the live flow from {client}:{sport} to {host}:{UDP_PORT}");
        })
    }

    /// `ip route get CLIENT` in the container: the path MTU it learned, if any.
    fn path_mtu(&self, family: Family) -> String {
        let client = match family {
            Family::V4 => &self.out.client_addr,
            Family::V6 => &self.out.client_addr6,
        };
        let route = must(&in_container(self.pid, &["ip", "route", "get", client]));
        let mtu = route
            .split_whitespace()
            .skip_while(|w| *w != "mtu")
            .nth(1)
            .map_or("none".to_owned(), str::to_owned);
        format!("path MTU {mtu}")
    }
}

impl Topology for ExposedPorts {
    type Case = Case;
    const TEST: &'static str = "differential::exposed_ports_match_dockers_path";
    const NORMALISED: &'static [Allowance] = allowlist::NORMALISED;

    fn case(&self, seed: u64, index: u64) -> Case {
        Case::generate(seed, index)
    }

    fn make_dockers(&mut self, _: &Case) {
        if self.fast {
            self.world
                .dxdp
                .run(&["unexpose", &self.web])
                .assert_success();
            self.fast = false;
        }
    }

    fn make_fast(&mut self, _: &Case) {
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

    fn exercise(&mut self, case: &Case) -> Observation {
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
        let target = Target {
            src_mac: self.client_mac,
            nic_mac: self.nic_mac,
            src: self.source(case.source, case.family),
            dst: published,
            tcp_port: TCP_PORT,
            udp_port: UDP_PORT,
            quote,
        };
        let bytes = frame::frame(case, &target);
        self.client.forget();
        self.inside.forget();
        self.client.send(&bytes);
        std::thread::sleep(WINDOW);
        let seen = |socket: &PacketSocket| {
            let mut lines: Vec<String> = socket
                .arrived(Duration::from_millis(20))
                .iter()
                .filter_map(|a| record(&a.bytes))
                .filter(|r| !r.reassembly_timeout())
                .map(|r| r.to_string())
                .collect();
            lines.sort();
            lines
        };
        let mut observation = Observation::new();
        observation.insert("container", seen(&self.inside));
        observation.insert("client", seen(&self.client));
        if flow.is_some() {
            observation.insert("path MTU", vec![self.path_mtu(case.family)]);
        }
        observation
    }

    fn allowed(
        &self,
        case: &Case,
        observer: &str,
        docker: &[String],
        fast: &[String],
    ) -> Option<&'static Allowance> {
        allowlist::exposed(case, observer, docker, fast)
    }
}

fn mac(text: &str) -> [u8; 6] {
    let bytes: Vec<u8> = text
        .trim()
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).expect("a MAC byte"))
        .collect();
    bytes.try_into().expect("six bytes")
}
