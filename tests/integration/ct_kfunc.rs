//! The conntrack kfuncs from an aya program (docs/kfuncs.md, issue 36's first step): the lab
//! program `dxdp_ct_probe` (ebpf/programs/src/ct_lab.rs) calls `bpf_skb_ct_lookup`,
//! `bpf_ct_change_timeout` and `bpf_ct_release`, which aya 0.14 cannot load by itself;
//! `dxdp::datapath::kfunc` resolves the calls by BTF id first. The program sits on tcx ingress of
//! a veth in a namespace of this test's own ("router"), whose conntrack an nft rule turns on; a
//! second namespace ("client") sends UDP and TCP to sockets in the router over the veth pair,
//! over IPv4 and over IPv6.
//! Nothing is made in the host's namespace and nothing is pinned.
//!
//! What is checked: aya refuses the object as built; resolved, it loads and attaches; the lookup
//! finds the live UDP and TCP connections (the entries `conntrack -L` lists; their status, the
//! mark an nft rule gave one of them, and the reply tuple read from the entry), does not find a
//! made-up flow (a first datagram no entry exists for: `-ENOENT`), keeps an entry alive (a found
//! datagram the probe drops sets its entry's timeout to an hour: `conntrack -L` shows it), and
//! stops finding a live flow once `conntrack -F` flushed it.
//!
//! Needs root, bpffs, BTF, nft and conntrack; without them the test prints "skipping: …", or
//! fails when CI=true.

use std::{
    io::{Read, Write},
    net::{
        IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket,
    },
    time::Duration,
};

use aya::{
    Ebpf, EbpfLoader,
    maps::HashMap,
    programs::{SchedClassifier, TcAttachType},
};
use dxdp_common::ct::{CtProbeKey, CtProbeValue, names};

use crate::{
    sock::btf::{self, member_offset, struct_size},
    support::{
        NetnsGuard, can_run, in_netns, library::kfunc, missing_tools, must, named_netns, next_id,
        require_privileges,
    },
};

/// The lab's object, built by build.rs beside dxdp's.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dxdp-ct-lab"));

const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const ENOENT: i32 = 2;
/// `IPS_SEEN_REPLY` and `IPS_CONFIRMED` of include/uapi/linux/netfilter/nf_conntrack_common.h.
const IPS_SEEN_REPLY: u32 = 1 << 1;
const IPS_CONFIRMED: u32 = 1 << 3;
/// The mark the router's nft rule sets on the entries of UDP flows to [`UDP_PORT`].
const MARK: u32 = 0x5eed;
const UDP_PORT: u16 = 7000;
/// Datagrams to this port keep their entry alive for [`KEEPALIVE_SECS`] (and are dropped).
const KEEPALIVE_PORT: u16 = 7002;
const KEEPALIVE_SECS: u64 = 3600;
const ROUND_TRIPS: u64 = 5;
const TIMEOUT: Duration = Duration::from_secs(5);

#[test]
fn kfunc_lookup_finds_live_connections_and_not_made_up_ones() {
    if !(require_privileges() && can_run(missing_tools(&["nft", "conntrack"]))) {
        return;
    }
    // aya 0.14 as it is: the kfunc calls look like calls into the object, which has no such code.
    let refused = EbpfLoader::new()
        .load(OBJECT)
        .expect_err("aya 0.14 loaded unresolved kfunc calls");
    let refused = format!("{:#}", anyhow::Error::from(refused));
    eprintln!("aya 0.14 on the object as built: {refused}");
    assert!(refused.contains("not found while relocating"), "{refused}");

    let lab = Lab::new();
    let server = SocketAddr::new(lab.router_ip.into(), UDP_PORT);

    // A live UDP flow: request and echo, several times. The first datagram is looked up before
    // conntrack saw it (tc ingress comes before netfilter's prerouting), the others are found.
    let (udp_client, udp_server) = lab.udp_pair(server);
    let udp_port = echo_udp(&udp_client, &udp_server, server, ROUND_TRIPS);
    let udp = lab.seen(PROTO_UDP, udp_port, server);
    eprintln!("UDP flow {udp_port} -> {}: {udp:?}", server.port());
    assert_eq!(udp.not_found, 1, "only the first datagram is new: {udp:?}");
    assert_eq!(udp.found, ROUND_TRIPS - 1, "{udp:?}");
    assert_eq!(udp.failed, 0, "{udp:?}");
    assert_eq!(udp.status & IPS_CONFIRMED, IPS_CONFIRMED, "{udp:?}");
    assert_eq!(udp.status & IPS_SEEN_REPLY, IPS_SEEN_REPLY, "{udp:?}");
    // The reply tuple: the reply comes from the server, unNATed.
    assert_eq!(
        (reply_source(&udp), u16::from_be(udp.reply_src_port)),
        (server.ip(), server.port()),
        "{udp:?}"
    );
    // The entry the program read is the one conntrack lists, with the mark the router's nft rule
    // gave the flow (only this one: TCP's entry below has none).
    assert_eq!(udp.mark, MARK, "{udp:?}");
    let listed = lab.conntrack(&["-L", "-p", "udp", "--sport", &udp_port.to_string()]);
    assert!(
        listed.contains(&format!("dport={}", server.port())),
        "{listed}"
    );
    assert!(listed.contains(&format!("mark={MARK}")), "{listed}");

    // A made-up flow: one datagram to a port nobody listens on, the first of its tuple.
    let made_up_port = server.port() + 100;
    let probe = in_netns(&named_netns(&lab.client.name), || {
        UdpSocket::bind("0.0.0.0:0").unwrap()
    });
    let probe_port = probe.local_addr().unwrap().port();
    probe
        .send_to(b"anyone?", SocketAddrV4::new(lab.router_ip, made_up_port))
        .unwrap();
    let made_up = lab.wait_seen(
        PROTO_UDP,
        probe_port,
        SocketAddr::new(server.ip(), made_up_port),
        |v| v.found + v.not_found + v.failed > 0,
    );
    eprintln!("made-up flow {probe_port} -> {made_up_port}: {made_up:?}");
    assert_eq!(
        (made_up.found, made_up.not_found, made_up.last_error),
        (0, 1, -ENOENT),
        "{made_up:?}"
    );

    // A live TCP connection: the SYN is new, everything after it is found.
    let tcp_server = SocketAddrV4::new(lab.router_ip, 7001);
    let (tcp_port, _connection) = lab.tcp_round_trips(tcp_server.into());
    let tcp = lab.wait_seen(PROTO_TCP, tcp_port, tcp_server.into(), |v| {
        v.found > ROUND_TRIPS
    });
    eprintln!("TCP flow {tcp_port} -> {}: {tcp:?}", tcp_server.port());
    assert_eq!(tcp.not_found, 1, "only the SYN is new: {tcp:?}");
    assert_eq!(tcp.failed, 0, "{tcp:?}");
    assert_eq!(tcp.status & IPS_SEEN_REPLY, IPS_SEEN_REPLY, "{tcp:?}");
    assert_eq!(tcp.mark, 0, "{tcp:?}");
    assert_eq!(
        (reply_source(&tcp), u16::from_be(tcp.reply_src_port)),
        (IpAddr::from(lab.router_ip), tcp_server.port()),
        "{tcp:?}"
    );

    // The keep-alive: a datagram the probe finds and drops (a fast path's, past conntrack) sets
    // its entry's timeout with bpf_ct_change_timeout, far above the UDP timeouts conntrack uses.
    let keepalive_server = SocketAddr::new(lab.router_ip.into(), KEEPALIVE_PORT);
    let (ka_client, ka_server) = lab.udp_pair(keepalive_server);
    let ka_port = echo_udp(&ka_client, &ka_server, keepalive_server, 1);
    ka_client.send_to(b"kept alive", keepalive_server).unwrap();
    let kept = lab.wait_seen(PROTO_UDP, ka_port, keepalive_server, |v| v.kept_alive > 0);
    eprintln!("keep-alive flow {ka_port} -> {KEEPALIVE_PORT}: {kept:?}");
    assert_eq!((kept.found, kept.not_found), (1, 1), "{kept:?}");
    assert_eq!((kept.kept_alive, kept.keepalive_error), (1, 0), "{kept:?}");
    ka_server
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        ka_server.recv_from(&mut [0u8; 64]).is_err(),
        "the kept-alive datagram reached the server"
    );
    let listed = lab.conntrack(&["-L", "-p", "udp", "--dport", &KEEPALIVE_PORT.to_string()]);
    let remaining = remaining_seconds(&listed, ka_port);
    eprintln!("keep-alive entry: {remaining} s left; {listed}");
    assert!(
        remaining > KEEPALIVE_SECS - 60 && remaining <= KEEPALIVE_SECS,
        "{remaining} s left: {listed}"
    );

    // Flushed, the live UDP flow is gone from conntrack: its next datagram is not found.
    lab.conntrack(&["-F"]);
    udp_client.send_to(b"after flush", server).unwrap();
    let flushed = lab.wait_seen(PROTO_UDP, udp_port, server, |v| v.not_found > udp.not_found);
    eprintln!("UDP flow after conntrack -F: {flushed:?}");
    assert_eq!(flushed.found, udp.found, "{flushed:?}");
    assert_eq!(flushed.not_found, udp.not_found + 1, "{flushed:?}");
}

/// The same lookups over IPv6, the first step of IPv6 egress: the kfunc takes the 36-byte
/// IPv6 member of `bpf_sock_tuple` (the family comes from the size it is given), and the
/// entry's reply address is read from its `union nf_inet_addr` a word at a time. A live UDP flow
/// and a TCP connection are found, with the reply tuple the entry holds, and a made-up flow is
/// not.
#[test]
fn kfunc_lookup_finds_ipv6_connections_and_not_made_up_ones() {
    if !(require_privileges() && can_run(missing_tools(&["nft", "conntrack"]))) {
        return;
    }
    let lab = Lab::new();
    let server = SocketAddr::new(lab.router_ip6.into(), UDP_PORT);
    let (udp_client, udp_server) = lab.udp_pair(server);
    let udp_port = echo_udp(&udp_client, &udp_server, server, ROUND_TRIPS);
    let udp = lab.wait_seen(PROTO_UDP, udp_port, server, |v| v.found == ROUND_TRIPS - 1);
    eprintln!("IPv6 UDP flow {udp_port} -> {}: {udp:?}", server.port());
    assert_eq!(
        (udp.found, udp.not_found, udp.failed),
        (ROUND_TRIPS - 1, 1, 0),
        "only the first datagram is new: {udp:?}"
    );
    assert_eq!(udp.status & IPS_SEEN_REPLY, IPS_SEEN_REPLY, "{udp:?}");
    assert_eq!(udp.mark, MARK, "{udp:?}");
    assert_eq!(
        (reply_source(&udp), u16::from_be(udp.reply_src_port)),
        (server.ip(), server.port()),
        "{udp:?}"
    );
    let listed = lab.conntrack(&[
        "-L",
        "-f",
        "ipv6",
        "-p",
        "udp",
        "--sport",
        &udp_port.to_string(),
    ]);
    assert!(
        listed.contains(&format!("dst={}", lab.router_ip6)),
        "{listed}"
    );

    let made_up_port = server.port() + 100;
    let probe = in_netns(&named_netns(&lab.client.name), || {
        UdpSocket::bind("[::]:0").unwrap()
    });
    let probe_port = probe.local_addr().unwrap().port();
    let made_up_server = SocketAddr::new(server.ip(), made_up_port);
    probe.send_to(b"anyone?", made_up_server).unwrap();
    let made_up = lab.wait_seen(PROTO_UDP, probe_port, made_up_server, |v| {
        v.found + v.not_found + v.failed > 0
    });
    eprintln!("IPv6 made-up flow {probe_port} -> {made_up_port}: {made_up:?}");
    assert_eq!(
        (made_up.found, made_up.not_found, made_up.last_error),
        (0, 1, -ENOENT),
        "{made_up:?}"
    );

    let tcp_server = SocketAddr::new(lab.router_ip6.into(), 7001);
    let (tcp_port, _connection) = lab.tcp_round_trips(tcp_server);
    let tcp = lab.wait_seen(PROTO_TCP, tcp_port, tcp_server, |v| v.found > ROUND_TRIPS);
    eprintln!("IPv6 TCP flow {tcp_port} -> {}: {tcp:?}", tcp_server.port());
    assert_eq!(
        (tcp.not_found, tcp.failed),
        (1, 0),
        "only the SYN is new: {tcp:?}"
    );
    assert_eq!(tcp.status & IPS_SEEN_REPLY, IPS_SEEN_REPLY, "{tcp:?}");
    assert_eq!(
        (reply_source(&tcp), u16::from_be(tcp.reply_src_port)),
        (tcp_server.ip(), tcp_server.port()),
        "{tcp:?}"
    );
}

/// The reply source address the probe read from the entry, IPv4 unmapped.
fn reply_source(seen: &CtProbeValue) -> IpAddr {
    Ipv6Addr::from(seen.reply_src_ip).to_canonical()
}

/// The seconds `conntrack -L` says the entry from the client port `sport` has left (its third
/// field: `udp 17 3599 src=… sport=…`).
#[track_caller]
fn remaining_seconds(listed: &str, sport: u16) -> u64 {
    let line = listed
        .lines()
        .find(|l| l.contains(&format!("sport={sport} ")))
        .unwrap_or_else(|| panic!("no entry from port {sport}: {listed}"));
    line.split_whitespace()
        .nth(2)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no timeout in {line}"))
}

/// Sends `rounds` datagrams from `client` to `server` and echoes each back from `server_sock`;
/// returns the client's port.
#[track_caller]
fn echo_udp(client: &UdpSocket, server_sock: &UdpSocket, server: SocketAddr, rounds: u64) -> u16 {
    let mut buf = [0u8; 64];
    for i in 0..rounds {
        client.send_to(&i.to_be_bytes(), server).unwrap();
        let (n, from) = server_sock.recv_from(&mut buf).unwrap();
        server_sock.send_to(&buf[..n], from).unwrap();
        client.recv_from(&mut buf).unwrap();
    }
    client.local_addr().unwrap().port()
}

/// The two namespaces, the veth pair between them, and the probe on the router's end. Dropped in
/// field order: the program and its attachment first, then the namespaces (with the veths).
struct Lab {
    ebpf: Ebpf,
    router: NetnsGuard,
    client: NetnsGuard,
    router_ip: Ipv4Addr,
    client_ip: Ipv4Addr,
    router_ip6: Ipv6Addr,
    client_ip6: Ipv6Addr,
}

impl Lab {
    #[track_caller]
    fn new() -> Self {
        let id = next_id();
        let pid = std::process::id();
        let client = NetnsGuard::create(&format!("dxt-{pid}-{id}-ctc"));
        let router = NetnsGuard::create(&format!("dxt-{pid}-{id}-ctr"));
        let subnet = 1 + (pid + id) % 250;
        let (router_ip, client_ip) = (
            Ipv4Addr::new(10, 251, subnet as u8, 1),
            Ipv4Addr::new(10, 251, subnet as u8, 2),
        );
        let (router_ip6, client_ip6) = (
            Ipv6Addr::new(0xfd00, 0x251, subnet as u16, 0, 0, 0, 0, 1),
            Ipv6Addr::new(0xfd00, 0x251, subnet as u16, 0, 0, 0, 0, 2),
        );
        must(&[
            "ip",
            "-n",
            &router.name,
            "link",
            "add",
            "ct0",
            "type",
            "veth",
            "peer",
            "name",
            "ct1",
            "netns",
            &client.name,
        ]);
        for (ns, ifname, ip, ip6) in [
            (&router, "ct0", router_ip, router_ip6),
            (&client, "ct1", client_ip, client_ip6),
        ] {
            let (v4, v6) = (format!("{ip}/24"), format!("{ip6}/64"));
            must(&["ip", "-n", &ns.name, "addr", "add", &v4, "dev", ifname]);
            // No duplicate address detection: the address is usable at once.
            must(&[
                "ip", "-n", &ns.name, "addr", "add", &v6, "dev", ifname, "nodad",
            ]);
            must(&["ip", "-n", &ns.name, "link", "set", ifname, "up"]);
        }
        // Conntrack tracks in a namespace only once something there asks for it.
        must(&[
            "ip",
            "netns",
            "exec",
            &router.name,
            "nft",
            &format!(
                "add table inet dxdp_ct; add chain inet dxdp_ct input {{ type filter hook input \
                 priority 0; }}; add rule inet dxdp_ct input ct state new,established counter; \
                 add rule inet dxdp_ct input udp dport {UDP_PORT} ct mark set {MARK}"
            ),
        ]);

        let started = std::time::Instant::now();
        let (resolved, mut kfuncs) = kfunc::KernelFuncs::vmlinux()
            .and_then(|kernel| kfunc::resolve(OBJECT, |name| kernel.id(name)))
            .expect("cannot resolve the lab's kfunc calls");
        eprintln!("kfuncs resolved in {:?}: {kfuncs:?}", started.elapsed());
        kfuncs.sort();
        assert_eq!(
            kfuncs,
            [
                "bpf_ct_change_timeout",
                "bpf_ct_release",
                "bpf_skb_ct_lookup"
            ]
        );
        let globals = lab_globals();
        let ebpf = in_netns(&named_netns(&router.name), move || {
            let mut loader = EbpfLoader::new();
            for (name, value) in &globals {
                loader.override_global(name, value, true);
            }
            let keepalive_port = KEEPALIVE_PORT.to_be();
            loader.override_global(names::KEEPALIVE_PORT, &keepalive_port, true);
            let mut ebpf = loader
                .load(&resolved)
                .expect("the resolved lab does not load");
            let program: &mut SchedClassifier = ebpf
                .program_mut(names::PROGRAM)
                .expect("no probe program")
                .try_into()
                .unwrap();
            program.load().expect("the verifier refused the probe");
            program
                .attach("ct0", TcAttachType::Ingress)
                .expect("cannot attach the probe to ct0");
            ebpf
        });
        Self {
            ebpf,
            router,
            client,
            router_ip,
            client_ip,
            router_ip6,
            client_ip6,
        }
    }

    /// A UDP socket in the client and one bound to `server` in the router, both with reads
    /// bounded in time.
    fn udp_pair(&self, server: SocketAddr) -> (UdpSocket, UdpSocket) {
        let any = if server.is_ipv6() {
            "[::]:0"
        } else {
            "0.0.0.0:0"
        };
        let client = in_netns(&named_netns(&self.client.name), move || {
            UdpSocket::bind(any).unwrap()
        });
        let router = in_netns(&named_netns(&self.router.name), move || {
            UdpSocket::bind(server).unwrap()
        });
        for s in [&client, &router] {
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
        }
        (client, router)
    }

    /// A TCP connection from the client to a listener on `server` in the router, with
    /// [`ROUND_TRIPS`] ping-pongs over it: the client's port, and both ends, kept open while
    /// the caller holds them (their closing would be looked up too).
    fn tcp_round_trips(&self, server: SocketAddr) -> (u16, [TcpStream; 2]) {
        let listener = in_netns(&named_netns(&self.router.name), move || {
            TcpListener::bind(server).unwrap()
        });
        let mut stream = in_netns(&named_netns(&self.client.name), move || {
            TcpStream::connect_timeout(&server, TIMEOUT).unwrap()
        });
        let port = stream.local_addr().unwrap().port();
        let (mut accepted, _) = listener.accept().unwrap();
        for s in [&stream, &accepted] {
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
        }
        for _ in 0..ROUND_TRIPS {
            let mut buf = [0u8; 4];
            stream.write_all(b"ping").unwrap();
            accepted.read_exact(&mut buf).unwrap();
            accepted.write_all(b"pong").unwrap();
            stream.read_exact(&mut buf).unwrap();
        }
        (port, [stream, accepted])
    }

    /// What the probe recorded for the client's `proto` flow from its port `sport` to
    /// `server`, from the client's address of the server's family.
    fn seen(&self, proto: u8, sport: u16, server: SocketAddr) -> CtProbeValue {
        let map: HashMap<_, CtProbeKey, CtProbeValue> =
            HashMap::try_from(self.ebpf.map(names::SEEN).expect("no DXDP_CT_SEEN")).unwrap();
        let client = match server.ip() {
            IpAddr::V4(_) => self.client_ip.to_ipv6_mapped(),
            IpAddr::V6(_) => self.client_ip6,
        };
        let server_ip = match server.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        let key = CtProbeKey {
            saddr: client.octets(),
            daddr: server_ip.octets(),
            sport: sport.to_be(),
            dport: server.port().to_be(),
            proto,
            _pad: [0; 3],
        };
        map.get(&key, 0).unwrap_or_default()
    }

    /// [`Self::seen`] once `ready` holds (packets still in flight when the call starts), or
    /// what it is after a few seconds.
    fn wait_seen(
        &self,
        proto: u8,
        sport: u16,
        server: SocketAddr,
        ready: impl Fn(&CtProbeValue) -> bool,
    ) -> CtProbeValue {
        let mut value = self.seen(proto, sport, server);
        crate::support::wait_until(TIMEOUT, || {
            value = self.seen(proto, sport, server);
            ready(&value)
        });
        value
    }

    /// `conntrack ARGS` in the router's namespace, its output.
    #[track_caller]
    fn conntrack(&self, args: &[&str]) -> String {
        let mut argv = vec!["ip", "netns", "exec", &self.router.name, "conntrack"];
        argv.extend_from_slice(args);
        let run = crate::support::run(&argv);
        // `conntrack -L` prints its summary on stderr; -U and -F fail when nothing matched.
        assert!(run.success(), "{run}");
        format!("{}{}", run.stdout, run.stderr)
    }
}

/// The probe's 32-bit `.rodata` constants: the keep-alive's timeout, and the offsets it reads
/// `struct nf_conn` with, from the running kernel's BTF.
fn lab_globals() -> Vec<(&'static str, u32)> {
    let blob = std::fs::read(btf::VMLINUX).expect("no vmlinux BTF");
    let offset =
        |s: &str, m: &str| member_offset(&blob, s, m).unwrap_or_else(|e| panic!("{s}.{m}: {e:#}"));
    // tuplehash[IP_CT_DIR_REPLY].tuple.src: the second element of the array, then down.
    let reply_src = offset("nf_conn", "tuplehash")
        + struct_size(&blob, "nf_conntrack_tuple_hash").expect("nf_conntrack_tuple_hash")
        + offset("nf_conntrack_tuple_hash", "tuple")
        + offset("nf_conntrack_tuple", "src");
    vec![
        (names::KEEPALIVE_MS, (KEEPALIVE_SECS * 1000) as u32),
        (names::OFF_STATUS, offset("nf_conn", "status")),
        (names::OFF_MARK, offset("nf_conn", "mark")),
        (
            names::OFF_REPLY_SRC_IP,
            reply_src + offset("nf_conntrack_man", "u3"),
        ),
        (
            names::OFF_REPLY_SRC_PORT,
            reply_src + offset("nf_conntrack_man", "u"),
        ),
    ]
}
