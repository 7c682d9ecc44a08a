//! Published ports straight from the NIC into the container (`dxdp expose`, issue 24), on real
//! containers of the host's dockerd. The "NIC" is a veth pair: its host end holds the address
//! Docker publishes on, its far end sits in a client namespace the test makes, which plays the
//! outside world; every packet stays between the two.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use crate::support::{
    Background, FORGE, Files, FirewallRule, NetfilterSysctl, NetnsGuard, Outside, World,
    assert_every_route_measured, assert_only_the_ack_in_the_window_arrived, assert_wire_gone,
    bench_through_nic, bpftool, four_streams_on_cpu, iface_name, in_container, in_ns,
    load_passing_tc, map_entries, must, next_id, pinned_link, pinned_program, quietly,
    require_docker, run_for, update_pinned_link, wait_until,
};

/// Waits until a UDP socket is bound to `port` in the container's namespace, so that the
/// first datagram a test sends it is not refused.
fn wait_for_udp_server(pid: u32, port: u16) {
    let filter = format!("sport = :{port}");
    let bound = || {
        run_for(
            &in_container(pid, &["ss", "-Hunl", &filter]),
            Duration::from_secs(5),
        )
        .stdout
        .contains(&format!(":{port}"))
    };
    assert!(
        wait_until(Duration::from_secs(10), bound),
        "nothing listens on UDP port {port} in the container"
    );
}

/// A file of random bytes and its sha256, removed on drop.
struct Payload {
    path: PathBuf,
    sha: String,
}

impl Payload {
    fn new(tag: &str, megabytes: u32) -> Self {
        let path = PathBuf::from(format!("/tmp/dxt-{}-{tag}", std::process::id()));
        must(&[
            "dd",
            "if=/dev/urandom",
            &format!("of={}", path.display()),
            "bs=1M",
            &format!("count={megabytes}"),
            "status=none",
        ]);
        let sha = sha256(&path);
        Self { path, sha }
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `ingress_peer.py serve` in the container: accepts one connection on port 7001 and sends it
/// `payload`.
fn serve(pid: u32, payload: &Payload) -> Background {
    let file = payload.path.display().to_string();
    Background::spawn(&in_container(
        pid,
        &["python3", PEER, "serve", &file, "7001"],
    ))
}

fn sha256(path: &Path) -> String {
    must(&["sha256sum", &path.display().to_string()])
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Both ends of the transfers: paced senders and plain receivers, a UDP echo of the sender's
/// address.
const PEER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/integration/ingress_peer.py"
);

/// The container's counters for one exposed port, from `dxdp status --json`.
fn port_counters(world: &World, host_port: u16, protocol: &str) -> Option<(u64, u64, u64)> {
    counters_at(world, None, host_port, protocol)
}

/// [`port_counters`] of the entry for one host address (`None`: the first of any).
fn counters_at(
    world: &World,
    addr: Option<&str>,
    host_port: u16,
    protocol: &str,
) -> Option<(u64, u64, u64)> {
    let run = world.dxdp.run(&["status", "--json"]);
    run.assert_success();
    let status: serde_json::Value = serde_json::from_str(&run.stdout).expect("status JSON");
    status["exposed"].as_array()?.iter().find_map(|p| {
        let at = addr.is_none_or(|a| p["host_addr"] == a);
        (at && p["host_port"] == host_port && p["protocol"] == protocol).then(|| {
            (
                p["inbound"]["packets"].as_u64().unwrap_or(0),
                p["outbound"]["packets"].as_u64().unwrap_or(0),
                p["passed_packets"].as_u64().unwrap_or(0),
            )
        })
    })
}

fn exposed_count(world: &World) -> usize {
    let run = world.dxdp.run(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&run.stdout).expect("status JSON");
    status["exposed"].as_array().map_or(0, Vec::len)
}

/// TCP and UDP both ways through the fast path, with the client's own address reaching the
/// container; transfers that span `expose` and `unexpose` arrive whole (sha256), whichever
/// direction they flow; a third container publishing on the same address is untouched.
#[test]
fn exposed_ports_carry_tcp_and_udp_and_connections_survive_expose_and_unexpose() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let net = world.network("pub", &[]);
    let (tcp_up, tcp_down, udp, other) = (17000u16, 17001u16, 17002u16, 17003u16);
    let publish = |host: u16, container: u16, proto: &str| {
        format!("{}:{host}:{container}/{proto}", out.host_addr)
    };
    let (p_up, p_down, p_udp, p_other) = (
        publish(tcp_up, 7000, "tcp"),
        publish(tcp_down, 7001, "tcp"),
        publish(udp, 7002, "udp"),
        publish(other, 5201, "tcp"),
    );
    let web = world.run(
        "web",
        &["--network", &net, "-p", &p_up, "-p", &p_down, "-p", &p_udp],
        &["iperf3", "-s"],
    );
    let third = world.run(
        "third",
        &["--network", &net, "-p", &p_other],
        &["iperf3", "-s"],
    );
    let pid = world.pid(&web);

    // UDP echo of the sender's address, as the container sees it.
    let _udp_echo = Background::spawn(&in_container(pid, &["python3", PEER, "udp-echo", "7002"]));
    let upload = Payload::new("up", 48);
    let download = Payload::new("down", 48);
    let early = Payload::new("early", 48);
    let received = |tag: &str| PathBuf::from(format!("/tmp/dxt-{}-got-{tag}", std::process::id()));
    let _cleanup = Files(vec![received("up"), received("down"), received("early")]);
    let listen_up = |tag: &str| {
        let out = received(tag).display().to_string();
        Background::spawn(&in_container(
            pid,
            &["python3", PEER, "receive", "7000", &out],
        ))
    };
    let send = |payload: &Payload, port: u16| {
        let file = payload.path.display().to_string();
        let port = port.to_string();
        Background::spawn(&in_ns(
            &out.ns.name,
            &["python3", PEER, "send", &file, &out.host_addr, &port],
        ))
    };

    // A connection that begins on Docker's path and runs through `expose`: it stays there.
    let mut early_server = listen_up("early");
    std::thread::sleep(Duration::from_millis(300));
    let mut early_client = send(&early, tcp_up);
    std::thread::sleep(Duration::from_millis(1000));

    let exposed = world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"]);
    exposed.assert_success();
    for port in [tcp_up, tcp_down, udp] {
        assert!(
            exposed.stdout.contains(&format!("{port}/")),
            "expose should list port {port}: {exposed}"
        );
    }
    assert!(early_client.wait_timeout(Duration::from_secs(20)).is_some());
    assert!(early_server.wait_timeout(Duration::from_secs(5)).is_some());
    assert_eq!(
        sha256(&received("early")),
        early.sha,
        "a connection from before `expose` lost bytes"
    );
    let (in_after_early, _, passed) = port_counters(&world, tcp_up, "tcp").expect("tcp_up exposed");
    assert_eq!(
        in_after_early, 0,
        "a TCP connection that began on Docker's path must stay there"
    );
    assert!(
        passed > 0,
        "its packets should count as passed to the stack"
    );

    // UDP both ways, and the container sees the client's own address.
    let echo = out.run(
        &["python3", PEER, "udp-ask", &out.host_addr, &udp.to_string()],
        Duration::from_secs(10),
    );
    echo.assert_success();
    assert!(
        echo.stdout.starts_with(&format!("{}:", out.client_addr)),
        "the container should see the client's address {}: {echo}",
        out.client_addr
    );
    let (udp_in, udp_out, _) = port_counters(&world, udp, "udp").expect("udp exposed");
    assert!(
        udp_in >= 1 && udp_out >= 1,
        "UDP in {udp_in}, out {udp_out}"
    );

    // An upload and a download that begin on the fast path and run through `unexpose`.
    let mut up_server = listen_up("up");
    let mut down_server = serve(pid, &download);
    std::thread::sleep(Duration::from_millis(300));
    let mut up_client = send(&upload, tcp_up);
    let got = received("down").display().to_string();
    let mut down_client = Background::spawn(&in_ns(
        &out.ns.name,
        &[
            "python3",
            PEER,
            "receive-from",
            &out.host_addr,
            &tcp_down.to_string(),
            &got,
        ],
    ));
    assert!(
        wait_until(Duration::from_secs(5), || {
            port_counters(&world, tcp_down, "tcp").is_some_and(|(_, o, _)| o > 100)
                && port_counters(&world, tcp_up, "tcp").is_some_and(|(i, _, _)| i > 100)
        }),
        "both transfers should run over the fast path"
    );
    // `top` shows both transfers on their ports, each in its own direction.
    let top = world
        .dxdp
        .run(&["top", "--json", "--once", "--interval", "0.5"]);
    top.assert_success();
    let sample: serde_json::Value = serde_json::from_str(&top.stdout).expect("top JSON");
    let rate = |port: u16, direction: &str| {
        sample["ports"]
            .as_array()
            .and_then(|ports| {
                ports
                    .iter()
                    .find(|p| p["host"] == format!("{}:{port}", out.host_addr))
            })
            .and_then(|p| p[direction]["bits_per_sec"].as_f64())
            .unwrap_or_else(|| panic!("no {direction} rate for port {port} in top: {top}"))
    };
    assert!(
        rate(tcp_up, "inbound") > 1e6 && rate(tcp_down, "outbound") > 1e6,
        "top should show the upload coming in and the download going out: {top}"
    );
    let unexposed = world.dxdp.run(&["unexpose", &web]);
    unexposed.assert_success();
    assert_eq!(exposed_count(&world), 0);
    for process in [
        &mut up_client,
        &mut down_client,
        &mut up_server,
        &mut down_server,
    ] {
        assert!(
            process.wait_timeout(Duration::from_secs(20)).is_some(),
            "a transfer did not finish"
        );
    }
    assert_eq!(
        sha256(&received("up")),
        upload.sha,
        "upload across unexpose"
    );
    assert_eq!(
        sha256(&received("down")),
        download.sha,
        "download across unexpose"
    );

    // The third container's port was never exposed and still answers through Docker's path.
    let third_ok = out.run(
        &[
            "iperf3",
            "-c",
            &out.host_addr,
            "-p",
            &other.to_string(),
            "-t",
            "1",
        ],
        Duration::from_secs(15),
    );
    third_ok.assert_success();
    assert!(world.dxdp.run(&["status"]).stdout.find(&third).is_none());
}

/// A rule on the port's path keeps it on Docker's path: `expose` fails naming it and changes
/// nothing; without the rule it succeeds. The rule coming back after the exposure: `doctor`
/// fails naming the container, and the watch's whole pass takes the exposure away (fail
/// closed), but not one made with `--bypass-firewall`.
#[test]
fn a_rule_on_a_published_port_refuses_expose_and_names_it() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let web = one_port_web(&mut world, &out, "pub", 17010, "5201", &["iperf3", "-s"]);
    let source = format!("{}/32", out.client_addr);
    let rule = FirewallRule::insert(
        "iptables",
        "DOCKER-USER",
        &["-s", &source, "-p", "tcp", "-j", "DROP"],
    );
    let refused = world.dxdp.run(&["expose", &web, "--nic", &out.nic]);
    refused.assert_failure();
    assert!(
        refused.stderr.contains("DOCKER-USER") && refused.stderr.contains(&source),
        "the refusal should name the rule: {refused}"
    );
    assert!(
        !world.dxdp.pin_dir.exists() || exposed_count(&world) == 0,
        "a refused expose changed something"
    );
    drop(rule);

    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic])
        .assert_success();
    assert_eq!(exposed_count(&world), 1);
    let rule = FirewallRule::insert(
        "iptables",
        "DOCKER-USER",
        &["-s", &source, "-p", "tcp", "-j", "DROP"],
    );
    let doctor = world.dxdp.run(&["doctor"]);
    doctor.assert_failure();
    assert!(
        doctor.stdout.contains(&format!(
            "[FAIL] exposed container {web} bypasses a rule that came after its exposure"
        )) && doctor.stdout.contains(&format!("fix: dxdp unexpose {web}")),
        "doctor should name the exposure the rule covers: {doctor}"
    );
    let pass = world.dxdp.run(&["watch", "--once"]);
    pass.assert_success();
    assert!(
        pass.stderr.contains("removed an exposure made by hand") && pass.stderr.contains(&source),
        "the watch should say which rule took the exposure away: {pass}"
    );
    assert_eq!(exposed_count(&world), 0, "fail closed: {pass}");

    // Made to bypass the rules on purpose: the watch leaves it.
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    world.dxdp.run(&["watch", "--once"]).assert_success();
    assert_eq!(exposed_count(&world), 1);
    world.dxdp.run(&["unexpose", &web]).assert_success();
    drop(rule);
}

/// The exposures in `dxdp status --json`, as (container, veth ifindex, origin).
fn exposures(world: &World) -> Vec<(String, u64, String)> {
    let run = world.dxdp.run(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&run.stdout).unwrap_or_default();
    status["exposed"]
        .as_array()
        .map(|ports| {
            ports
                .iter()
                .map(|p| {
                    (
                        p["container"].as_str().unwrap_or_default().to_owned(),
                        p["veth_ifindex"].as_u64().unwrap_or(0),
                        p["origin"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A file sent from the client to the container's published port arrives whole, over the
/// fast path (the port's inbound counter moves).
fn assert_carried(world: &World, out: &Outside, pid: u32, host_port: u16, tag: &str) {
    carried_to(world, out, &out.host_addr, pid, (host_port, 7000), tag);
}

/// [`assert_carried`] to `addr`:`ports.0`, which the container publishes from `ports.1`.
fn carried_to(world: &World, out: &Outside, addr: &str, pid: u32, ports: (u16, u16), tag: &str) {
    let (host_port, container_port) = ports;
    let inbound = || counters_at(world, Some(addr), host_port, "tcp").map_or(0, |c| c.0);
    let before = inbound();
    let mut upload = Upload::listen(pid, container_port, tag, 4);
    let file = upload.payload.path.display().to_string();
    let sent = out.run(
        &["python3", PEER, "send", &file, addr, &host_port.to_string()],
        Duration::from_secs(30),
    );
    sent.assert_success();
    assert!(
        upload
            .receiver
            .wait_timeout(Duration::from_secs(10))
            .is_some()
    );
    assert_eq!(sha256(&upload.got), upload.payload.sha, "{tag}: bytes lost");
    assert!(inbound() > before, "{tag}: the fast path carried nothing");
}

/// A file on its way from the client into a container: the client sends `payload`, the
/// container's receiver writes it to `got`. Fields drop in order: the receiver is stopped
/// before its file and the payload are removed.
struct Upload {
    receiver: Background,
    got: PathBuf,
    _cleanup: Files,
    payload: Payload,
}

impl Upload {
    /// `megabytes` of random bytes tagged `tag`, and a receiver for them on `container_port`
    /// in the container of `pid`, given time to listen before the client connects.
    fn listen(pid: u32, container_port: u16, tag: &str, megabytes: u32) -> Self {
        let payload = Payload::new(tag, megabytes);
        let got = PathBuf::from(format!("/tmp/dxt-{}-got-{tag}", std::process::id()));
        let _cleanup = Files(vec![got.clone()]);
        let target = got.display().to_string();
        let listen = container_port.to_string();
        let receiver = Background::spawn(&in_container(
            pid,
            &["python3", PEER, "receive", &listen, &target],
        ));
        std::thread::sleep(Duration::from_millis(300));
        Self {
            receiver,
            got,
            _cleanup,
            payload,
        }
    }
}

/// `dxdp watch --ingress-nic` exposes a container labeled `dxdp.ingress=true`, follows it
/// across a restart (new veth) and lets it go when it is removed; an unlabeled container that
/// publishes a port is never exposed.
#[test]
fn the_watch_exposes_a_labeled_container_and_follows_its_restart_and_removal() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let net = world.network("pub", &[]);
    let port = 17020u16;
    let publish = format!("{}:{port}:7000", out.host_addr);
    // dxdp.firewall=bypass: on hosts with rootful Podman, netavark's masquerade rule (a mark
    // match the walk cannot rule out) keeps every published port on Docker's path.
    let web = world.run(
        "web",
        &[
            "--network",
            &net,
            "-p",
            &publish,
            "-l",
            "dxdp.ingress=true",
            "-l",
            "dxdp.firewall=bypass",
        ],
        &["iperf3", "-s"],
    );
    let other = format!("{}:{}:5201", out.host_addr, port + 1);
    let plain = world.run(
        "plain",
        &["--network", &net, "-p", &other],
        &["iperf3", "-s"],
    );
    let mut watch = world.watch(&["--resync", "30", "--ingress-nic", &out.nic, "--cleanup"]);
    let watched = |world: &World| {
        exposures(world)
            .into_iter()
            .filter(|(c, _, origin)| *c == web && origin == "watch")
            .map(|(_, veth, _)| veth)
            .collect::<Vec<u64>>()
    };
    assert!(
        wait_until(Duration::from_secs(10), || !watched(&world).is_empty()),
        "the watch did not expose {web}: {:?}",
        exposures(&world)
    );
    let first_veth = watched(&world)[0];
    assert_carried(&world, &out, world.pid(&web), port, "watch-1");
    assert!(exposures(&world).iter().all(|(c, ..)| *c != plain));

    world.docker_ok(&["restart", "-t", "1", &web]);
    assert!(
        wait_until(Duration::from_secs(10), || {
            let veths = watched(&world);
            !veths.is_empty() && !veths.contains(&first_veth)
        }),
        "the exposure did not follow the restart: {:?}",
        exposures(&world)
    );
    assert_carried(&world, &out, world.pid(&web), port, "watch-2");

    // A second labeled container, then the first one removed: only its exposure goes.
    let api_port = format!("{}:{}:7000", out.host_addr, port + 2);
    let api = world.run(
        "api",
        &[
            "--network",
            &net,
            "-p",
            &api_port,
            "-l",
            "dxdp.ingress=true",
            "-l",
            "dxdp.firewall=bypass",
        ],
        &["iperf3", "-s"],
    );
    let of =
        |world: &World, name: &str| exposures(world).iter().filter(|(c, ..)| c == name).count();
    assert!(
        wait_until(Duration::from_secs(10), || of(&world, &api) == 1),
        "the watch did not expose {api}: {:?}",
        exposures(&world)
    );
    world.docker_ok(&["rm", "-f", &web]);
    assert!(
        wait_until(Duration::from_secs(10), || watched(&world).is_empty()),
        "the exposure outlived its container: {:?}",
        exposures(&world)
    );
    assert_eq!(of(&world, &api), 1, "{api} lost its exposure");
    // `--cleanup`: the watch takes its exposures with it when it stops.
    assert_eq!(watch.terminate(), Some(0));
    assert!(exposures(&world).is_empty(), "{:?}", exposures(&world));
}

/// IPv4 and IPv6 bindings of a port range, a second container exposing another port, and a
/// link to a peer on the exposed container's veth: every binding is carried by the fast path,
/// each to its own container, and the link keeps redirecting beside the exposure. Exposed
/// through the firewall walk: Docker 28's IPv6 DNAT leaves out only link-local clients, which
/// the fast path refuses anyway (issue 38).
#[test]
fn ipv6_port_ranges_two_containers_and_a_linked_one() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let net = world.network_v6("dual", true, &[]);
    let (v4, v6) = (&out.host_addr, format!("[{}]", out.host_addr6));
    let range4 = format!("{v4}:17030-17031:7000-7001");
    let range6 = format!("{v6}:17030-17031:7000-7001");
    let web = world.run(
        "web",
        &["--network", &net, "-p", &range4, "-p", &range6],
        &["iperf3", "-s"],
    );
    let api_port = format!("{v4}:17032:7000");
    let api = world.run(
        "api",
        &["--network", &net, "-p", &api_port],
        &["iperf3", "-s"],
    );
    let peer = world.run("peer", &["--network", &net], &["iperf3", "-s"]);
    world
        .dxdp
        .run(&["link", &web, &peer, "--bypass-firewall"])
        .assert_success();
    for c in [&web, &api] {
        world
            .dxdp
            .run(&["expose", c, "--nic", &out.nic])
            .assert_success();
    }
    let entries = exposures(&world);
    assert_eq!(
        entries.iter().filter(|(c, ..)| *c == web).count(),
        4,
        "two ports, two families: {entries:?}"
    );
    assert_eq!(entries.iter().filter(|(c, ..)| *c == api).count(), 1);

    let (web_pid, api_pid) = (world.pid(&web), world.pid(&api));
    carried_to(&world, &out, v4, web_pid, (17030, 7000), "v4-first");
    carried_to(&world, &out, v4, web_pid, (17031, 7001), "v4-second");
    carried_to(
        &world,
        &out,
        &out.host_addr6,
        web_pid,
        (17030, 7000),
        "v6-first",
    );
    carried_to(
        &world,
        &out,
        &out.host_addr6,
        web_pid,
        (17031, 7001),
        "v6-second",
    );
    carried_to(&world, &out, v4, api_pid, (17032, 7000), "api");

    // The link beside the exposure on web's veth still redirects.
    let peer_ip = world.ip(&peer, &net);
    let before = world.dxdp.status().links[0].low_to_high.packets
        + world.dxdp.status().links[0].high_to_low.packets;
    world.docker_ok(&[
        "exec", &web, "ping", "-c", "3", "-i", "0.2", "-W", "1", &peer_ip,
    ]);
    let status = world.dxdp.status();
    let after = status.links[0].low_to_high.packets + status.links[0].high_to_low.packets;
    assert!(
        after >= before + 6,
        "the link redirected {before} -> {after}"
    );
}

/// `dxdp bench-ingress --wire --pin-cpus` for one round of 1 s tests through a veth "NIC": every
/// row has a figure for Docker's path, the fast path and the wire, the JSON has its schema and
/// placement, the wire is
/// gone afterwards and the container is left unexposed as it was found. A wire subnet the
/// client already uses is refused first. Host ports differ from the container ports on purpose.
#[test]
fn bench_ingress_measures_both_paths_and_leaves_the_container_unexposed() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let net = world.network("bench", &[]);
    let mut args = vec!["--network".to_owned(), net];
    for (host, container) in [
        (17020, "6379"),
        (17021, "80"),
        (17022, "5201"),
        (17022, "5201/udp"),
        (17023, "11111"),
    ] {
        args.push("-p".to_owned());
        args.push(format!("{}:{host}:{container}", out.host_addr));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let web = world.run("bweb", &args, &["sleep", "infinity"]);
    let json = std::env::temp_dir().join(format!("dxt-bench-ingress-{}.json", next_id()));
    let _cleanup = Files(vec![json.clone()]);
    let pin_dir = world.dxdp.pin_dir.display().to_string();
    let json_arg = json.display().to_string();
    let bench_with_wire = |wire: &str| {
        bench_through_nic(
            &pin_dir,
            "bench-ingress",
            &web,
            ("--client", &out.ns.name),
            &out.nic,
            wire,
            &json_arg,
        )
    };
    // A.B.C.0/30 of the NIC's A.B.C.1.
    let first_30 =
        |addr: &str| format!("{}.0/30", addr.rsplit_once('.').expect("an IPv4 address").0);
    // The client's own subnet (10.236.k.0/30 holds 10.236.k.2): refused.
    let refused = bench_with_wire(&first_30(&out.host_addr));
    assert!(
        !refused.success()
            && refused
                .stderr
                .contains(&format!("already has {}", out.client_addr)),
        "a wire subnet the client uses must be refused, naming its address: {refused}"
    );
    let wire = first_30(&out.host_addr.replacen("10.236.", "10.239.", 1));
    let bench = bench_with_wire(&wire);
    bench.assert_success();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON file"))
            .expect("bench JSON");
    assert_eq!(report["schema"], "dxdp.bench-ingress/1");
    assert_eq!(report["wire"]["subnet"], wire.as_str(), "{report}");
    assert_eq!(
        report["placement"],
        serde_json::json!({"client_cpu": 0, "server_cpu": 1}),
        "{report}"
    );
    assert!(bench.stdout.contains(", steal "), "{bench}");
    assert_every_route_measured(&report, &bench.stdout);
    assert_wire_gone(&out.ns.name, world.pid(&web));
    assert!(
        !world.dxdp.pin_dir.exists() || exposed_count(&world) == 0,
        "the bench left {web} exposed"
    );
}

/// A newer dxdp meets port attachments running programs that differ from its own (here ones
/// that let everything through, standing in for an older release's): the next `expose` swaps
/// its own into each attachment, the NIC's and the veth's, with bpf_link_update and says so.
/// The attachments stay (same bpf_link ids), the pinned programs are this binary's again, a
/// transfer running across the swap arrives whole, and a new connection takes the fast path.
#[test]
fn an_upgraded_binary_swaps_its_port_programs_into_running_attachments() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let host_port = 17060u16;
    let web = one_port_web(
        &mut world,
        &out,
        "upg",
        host_port,
        "7000",
        &["sleep", "infinity"],
    );
    let pid = world.pid(&web);
    let expose = || {
        world
            .dxdp
            .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
    };
    expose().assert_success();
    let veth = exposures(&world)
        .into_iter()
        .find(|(c, ..)| *c == web)
        .expect("web exposed")
        .1;
    let nic = must(&["cat", &format!("/sys/class/net/{}/ifindex", out.nic)]);
    let pins = &world.dxdp.pin_dir;
    // (program, its pin, the attachment running it).
    let roles = [
        ("dxdp_ingress", format!("links/ingress-{}", nic.trim())),
        ("dxdp_reply", format!("links/reply-{veth}")),
    ]
    .map(|(name, link)| (name, pins.join("progs").join(name), pins.join(link)));
    let ours: Vec<String> = roles.iter().map(|(_, p, _)| pinned_program(p).1).collect();
    let link_ids: Vec<u64> = roles.iter().map(|(.., l)| pinned_link(l).0).collect();

    // The state an older dxdp would have left: its programs pinned and in both attachments.
    for (name, prog_pin, link_pin) in &roles {
        let scratch = Path::new("/sys/fs/bpf").join(format!(
            "dxdp-test-{}-{}-old-{name}",
            std::process::id(),
            next_id()
        ));
        let old = load_passing_tc(&scratch, "dxt_old");
        update_pinned_link(link_pin, &old.path);
        std::fs::remove_file(prog_pin).expect("unpin ours");
        std::fs::rename(&old.path, prog_pin).expect("pin the old program in its place");
        assert_eq!(
            pinned_link(link_pin).1,
            pinned_program(prog_pin).0,
            "{name} runs the old one"
        );
    }
    let inbound = || port_counters(&world, host_port, "tcp").map_or(0, |c| c.0);
    let before = inbound();

    // A transfer on Docker's path (the old programs pass everything), across the swap.
    let mut upload = Upload::listen(pid, 7000, "upgrade", 48);
    let file = upload.payload.path.display().to_string();
    let mut client = Background::spawn(&in_ns(
        &out.ns.name,
        &[
            "python3",
            PEER,
            "send",
            &file,
            &out.host_addr,
            &host_port.to_string(),
        ],
    ));
    std::thread::sleep(Duration::from_millis(1000));
    let upgrade = expose();
    upgrade.assert_success();
    for (name, ..) in &roles {
        assert!(
            upgrade.stdout.contains(&format!(
                "replaced the pinned {name} program with this binary's in every attachment"
            )),
            "{upgrade}"
        );
    }
    assert!(client.wait_timeout(Duration::from_secs(30)).is_some());
    assert!(
        upload
            .receiver
            .wait_timeout(Duration::from_secs(5))
            .is_some()
    );
    assert_eq!(
        sha256(&upload.got),
        upload.payload.sha,
        "the transfer across the swap lost bytes"
    );
    assert_eq!(
        inbound(),
        before,
        "a connection that began on Docker's path must stay there"
    );

    for (((name, prog_pin, link_pin), tag), id) in roles.iter().zip(&ours).zip(&link_ids) {
        let (new_id, new_tag) = pinned_program(prog_pin);
        assert_eq!(
            &new_tag, tag,
            "{name}: the pinned program is not this binary's"
        );
        assert_eq!(
            pinned_link(link_pin),
            (*id, new_id),
            "{name}: not the same attachment running the new program"
        );
    }
    assert_carried(&world, &out, pid, host_port, "after-upgrade");
    world.dxdp.run(&["unexpose", &web]).assert_success();
}

/// A client that connects again from the same address and port soon after `unexpose` takes
/// Docker's path whole: the container's answer to its SYN must not take the fast path of the
/// earlier connection with the same addresses, which still drains, or conntrack would see only
/// the SYN and the connection would break.
#[test]
fn a_client_reusing_its_port_after_unexpose_is_answered_on_dockers_path() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let port = 17040u16;
    let web = one_port_web(&mut world, &out, "pub", port, "7001", &["iperf3", "-s"]);
    let pid = world.pid(&web);
    let payload = Payload::new("reuse", 2);
    let got = PathBuf::from(format!("/tmp/dxt-{}-got-reuse", std::process::id()));
    let _cleanup = Files(vec![got.clone()]);
    let file = payload.path.display().to_string();
    let target = got.display().to_string();
    // The container closes first, so the client's port is free again at once.
    let download = |tag: &str| {
        let _ = std::fs::remove_file(&got);
        let mut server = Background::spawn(&in_container(
            pid,
            &["python3", PEER, "serve", &file, "7001"],
        ));
        std::thread::sleep(Duration::from_millis(300));
        let run = out.run(
            &[
                "python3",
                PEER,
                "receive-from",
                &out.host_addr,
                &port.to_string(),
                &target,
                "41000",
            ],
            Duration::from_secs(20),
        );
        assert!(run.success(), "{tag}: {run}");
        assert!(server.wait_timeout(Duration::from_secs(10)).is_some());
        assert_eq!(sha256(&got), payload.sha, "{tag}: bytes lost");
    };
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    download("over the fast path");
    let (_, out_packets, _) = port_counters(&world, port, "tcp").expect("exposed");
    assert!(
        out_packets > 0,
        "the first download did not take the fast path"
    );
    world.dxdp.run(&["unexpose", &web]).assert_success();
    download("again from the same port, on Docker's path");
}

/// A container "web" running `cmd` on a new network `net`, publishing `port` on the NIC's IPv4
/// address to `target` (a container port, with a protocol or not).
fn one_port_web(
    world: &mut World,
    out: &Outside,
    net: &str,
    port: u16,
    target: &str,
    cmd: &[&str],
) -> String {
    let net = world.network(net, &[]);
    let publish = format!("{}:{port}:{target}", out.host_addr);
    world.run("web", &["--network", &net, "-p", &publish], cmd)
}

/// A container "web" on a new dual-stack network `net`, publishing `port` on both of the NIC's
/// addresses to `target` (a container port, with a protocol or not).
fn dual_stack_web(world: &mut World, out: &Outside, net: &str, port: u16, target: &str) -> String {
    let net = world.network_v6(net, true, &[]);
    let v4 = format!("{}:{port}:{target}", out.host_addr);
    let v6 = format!("[{}]:{port}:{target}", out.host_addr6);
    world.run(
        "web",
        &["--network", &net, "-p", &v4, "-p", &v6],
        &["iperf3", "-s"],
    )
}

/// A router between the NIC and the client whose link towards the client has a smaller MTU
/// than the rest of the path: the container's full-size replies draw "fragmentation needed"
/// (IPv4) and "packet too big" (IPv6) errors, addressed to the published address. The NIC's
/// program takes them to the container (as conntrack would on Docker's path), which lowers its
/// path MTU: a download over the fast path completes, in both families. Without that the
/// container never learns, and it stalls (checked by hand for each family: the download times
/// out).
#[test]
fn an_mtu_error_from_a_router_reaches_the_container_and_the_download_completes() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    // The client namespace is the router; the far client sits behind its small-MTU link.
    let k = out
        .host_addr
        .split('.')
        .nth(2)
        .expect("10.236.k.1")
        .to_owned();
    let k6 = format!("{:x}", k.parse::<u32>().expect("k"));
    let far = NetnsGuard::create(&format!("{}-far{k}", world.prefix));
    let (r_end, f_end) = (iface_name(), iface_name());
    must(&[
        "ip",
        "-n",
        &out.ns.name,
        "link",
        "add",
        &r_end,
        "type",
        "veth",
        "peer",
        "name",
        &f_end,
        "netns",
        &far.name,
    ]);
    let ip_in = |ns: &str, args: &[&str]| {
        let mut argv = vec!["ip", "-n", ns];
        argv.extend_from_slice(args);
        must(&argv);
    };
    let (router, far_ns) = (out.ns.name.as_str(), far.name.as_str());
    ip_in(router, &["link", "set", &r_end, "mtu", "1280", "up"]);
    ip_in(
        router,
        &["addr", "add", &format!("10.238.{k}.1/24"), "dev", &r_end],
    );
    let r6 = format!("fd00:238:{k6}::1");
    ip_in(
        router,
        &[
            "-6",
            "addr",
            "add",
            &format!("{r6}/64"),
            "dev",
            &r_end,
            "nodad",
        ],
    );
    for sysctl in ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"] {
        must(&in_ns(router, &["sysctl", "-qw", sysctl]));
    }
    ip_in(far_ns, &["link", "set", &f_end, "mtu", "1500", "up"]);
    ip_in(
        far_ns,
        &["addr", "add", &format!("10.238.{k}.2/24"), "dev", &f_end],
    );
    let far6 = format!("fd00:238:{k6}::2");
    ip_in(
        far_ns,
        &[
            "-6",
            "addr",
            "add",
            &format!("{far6}/64"),
            "dev",
            &f_end,
            "nodad",
        ],
    );
    ip_in(
        far_ns,
        &["route", "add", "default", "via", &format!("10.238.{k}.1")],
    );
    ip_in(far_ns, &["-6", "route", "add", "default", "via", &r6]);
    // The host reaches the far client through the router; the routes go with the NIC.
    let router6 = format!("fd00:236:{k6}::2");
    must(&[
        "ip",
        "route",
        "add",
        &format!("10.238.{k}.0/24"),
        "via",
        &out.client_addr,
        "dev",
        &out.nic,
    ]);
    must(&[
        "ip",
        "-6",
        "route",
        "add",
        &format!("fd00:238:{k6}::/64"),
        "via",
        &router6,
        "dev",
        &out.nic,
    ]);

    let port = 17050u16;
    let web = dual_stack_web(&mut world, &out, "pmtu", port, "7001");
    let pid = world.pid(&web);
    let payload = Payload::new("pmtu", 4);
    let got = PathBuf::from(format!("/tmp/dxt-{}-got-pmtu", std::process::id()));
    let _cleanup = Files(vec![got.clone()]);
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    for (host, far_addr) in [
        (out.host_addr.as_str(), format!("10.238.{k}.2")),
        (out.host_addr6.as_str(), far6.clone()),
    ] {
        let _ = std::fs::remove_file(&got);
        let mut server = serve(pid, &payload);
        std::thread::sleep(Duration::from_millis(300));
        let run = run_for(
            &in_ns(
                far_ns,
                &[
                    "python3",
                    PEER,
                    "receive-from",
                    host,
                    &port.to_string(),
                    &got.display().to_string(),
                ],
            ),
            Duration::from_secs(30),
        );
        assert!(
            run.success() && server.wait_timeout(Duration::from_secs(10)).is_some(),
            "from {host}: the download did not finish (a path MTU black hole?): {run}"
        );
        assert_eq!(sha256(&got), payload.sha, "from {host}: bytes lost");
        // Every packet of the connection went over the fast path (GSO makes few, large ones).
        let counters = counters_at(&world, Some(host), port, "tcp").expect("exposed");
        assert!(
            counters.0 > 0 && counters.1 > 0 && counters.2 == 0,
            "from {host}: the download did not take the fast path: (in, out, passed) \
             {counters:?}"
        );
        // The container learned the path's MTU from the error the NIC's program brought in.
        let cached = must(&in_container(pid, &["ip", "route", "get", &far_addr]));
        assert!(
            cached.contains("mtu 1280"),
            "from {host}: no path MTU in the container: {cached}"
        );
    }
    world.dxdp.run(&["unexpose", &web]).assert_success();
}

/// A client's connected UDP socket sending to an exposed UDP port where nothing listens in the
/// container: the container's "port unreachable" (IPv4) and "destination unreachable, port
/// unreachable" (IPv6) about the fast path's datagram leave through the NIC translated as
/// conntrack translates them on Docker's path (from the published address, quoting it), so
/// the client's socket gets ECONNREFUSED, in both families, and the port's out counter shows
/// the fast path carried the error. Without the translation the client sees no error (checked
/// by hand: both families time out).
#[test]
fn a_containers_port_unreachable_reaches_the_client_as_a_refusal() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let port = 17070u16;
    let web = dual_stack_web(&mut world, &out, "refuse", port, "7009/udp");
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    // A few tries, each bounded: the first datagram may wait for a neighbour.
    const ASK: &str = "import socket, sys\n\
        host, port = sys.argv[1], int(sys.argv[2])\n\
        s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET, socket.SOCK_DGRAM)\n\
        s.settimeout(1.5)\n\
        s.connect((host, port))\n\
        for _ in range(3):\n    \
            try:\n        \
                s.send(b'anyone?')\n        \
                s.recv(64)\n        \
                sys.exit('answered')\n    \
            except ConnectionRefusedError:\n        \
                print('refused')\n        \
                sys.exit(0)\n    \
            except socket.timeout:\n        \
                pass\n\
        sys.exit('no error within the time')\n";
    for host in [out.host_addr.as_str(), out.host_addr6.as_str()] {
        let run = out.run(
            &["python3", "-c", ASK, host, &port.to_string()],
            Duration::from_secs(10),
        );
        assert!(
            run.success() && run.stdout.contains("refused"),
            "to {host}: the client's socket was not refused: {run}"
        );
        let counters = counters_at(&world, Some(host), port, "udp").expect("exposed");
        assert!(
            counters.0 > 0 && counters.1 > 0 && counters.2 == 0,
            "to {host}: the error did not take the fast path: (in, out, passed) {counters:?}"
        );
    }
    world.dxdp.run(&["unexpose", &web]).assert_success();
}

/// Floods from a forged address, each twice as many connections as the table holds,
/// cannot push an established TCP connection off the fast path: TCP connections opened by a
/// SYN and an ACK that guesses the container's sequence number (a sender that never sees the
/// SYN-ACKs must guess), and UDP flows to a port whose container answers every datagram. The
/// connection is quiet during the floods and the container speaks first after them, the case a
/// forgotten connection does not survive: its data would meet conntrack before any packet of
/// the client's and leave masqueraded, from the container's port (checked by hand with the
/// forged openings let straight into `DXDP_FLOWS`: the download never arrives). The container
/// keeps listening, so that it answers the forged SYNs.
#[test]
fn forged_openings_cannot_push_an_established_connection_off_the_fast_path() {
    if !require_docker() {
        return;
    }
    // Large enough that the tables of openings and UDP flows, a quarter of it, fill to nine
    // tenths (each CPU keeps up to 128 free entries of an LRU map at hand).
    const TABLE: usize = 10240;
    const FLOOD: usize = 2 * TABLE;
    let mut world = World::shared();
    let out = Outside::new(&world);
    let (port, udp_port) = (17080u16, 17081u16);
    let net = world.network("flood", &[]);
    let publish_tcp = format!("{}:{port}:7001/tcp", out.host_addr);
    let publish_udp = format!("{}:{udp_port}:7002/udp", out.host_addr);
    let web = world.run(
        "web",
        &["--network", &net, "-p", &publish_tcp, "-p", &publish_udp],
        &["iperf3", "-s"],
    );
    let pid = world.pid(&web);
    let _udp_echo = Background::spawn(&in_container(pid, &["python3", PEER, "udp-echo", "7002"]));
    // The pin directory is made by this first command, with a table of TABLE connections.
    world
        .dxdp
        .run(&[
            "--max-connections",
            &TABLE.to_string(),
            "expose",
            &web,
            "--nic",
            &out.nic,
            "--bypass-firewall",
        ])
        .assert_success();
    let flows = world.dxdp.pin_dir.join("maps/DXDP_FLOWS");
    let size = bpftool(&["map", "show", "pinned", &flows.to_string_lossy()])["max_entries"].clone();
    assert_eq!(size, TABLE, "--max-connections should size DXDP_FLOWS");

    let download = Payload::new("late", 4);
    let got = PathBuf::from(format!("/tmp/dxt-{}-got-late", std::process::id()));
    let _cleanup = Files(vec![got.clone()]);
    let file = download.path.display().to_string();
    let quiet_secs = 8;
    let mut server = Background::spawn(&in_container(
        pid,
        &[
            "python3",
            PEER,
            "serve",
            &file,
            "7001",
            &quiet_secs.to_string(),
            "listening",
        ],
    ));
    std::thread::sleep(Duration::from_millis(300));
    let connected = std::time::Instant::now();
    let mut client = Background::spawn(&in_ns(
        &out.ns.name,
        &[
            "python3",
            PEER,
            "receive-from",
            &out.host_addr,
            &port.to_string(),
            &got.display().to_string(),
        ],
    ));
    assert!(
        wait_until(Duration::from_secs(3), || {
            map_entries(&world.dxdp.pin_dir, "DXDP_FLOWS").len() == 1
        }),
        "the client's completed handshake should establish its connection"
    );
    let inbound =
        |port: u16, protocol: &str| port_counters(&world, port, protocol).expect("exposed").0;
    let (tcp_before, udp_before) = (inbound(port, "tcp"), inbound(udp_port, "udp"));
    let refused_before = refused(&world, port);

    // Forged from an address of the NIC's subnet that nobody holds: the host routes it back
    // through the NIC, so the NIC's program lets its first packets in, and the answers go
    // nowhere.
    let (subnet, _) = out.host_addr.rsplit_once('.').expect("10.236.k.1");
    let forged = format!("{subnet}.200");
    out.forge("syn", &forged, &out.host_addr, port, FLOOD);
    out.forge("udp-flood", &forged, &out.host_addr, udp_port, FLOOD);
    assert!(
        connected.elapsed() < Duration::from_secs(quiet_secs - 1),
        "the floods took too long to end before the container speaks ({:?})",
        connected.elapsed()
    );
    let (tcp_flood, udp_flood) = (
        inbound(port, "tcp") - tcp_before,
        inbound(udp_port, "udp") - udp_before,
    );
    let refused_acks = refused(&world, port) - refused_before;
    // Each guessing ACK is judged against the window the container's SYN-ACK opened: where
    // the guess is above it, conntrack marks it INVALID and the fast path refuses it; where it
    // is far below, conntrack lets it through untracked, and so does the fast path (the
    // container then resets that opening). None takes Docker's path: each finds its opening.
    assert!(
        tcp_flood >= (FLOOD * 9 / 10) as u64
            && tcp_flood + refused_acks >= (2 * FLOOD * 9 / 10) as u64
            && refused_acks >= (FLOOD / 4) as u64
            && udp_flood >= (FLOOD * 9 / 10) as u64,
        "the floods should have met their openings on the fast path: {tcp_flood} TCP packets \
         in and {refused_acks} refused of {}, {udp_flood} datagrams of {FLOOD}",
        2 * FLOOD
    );
    let established = map_entries(&world.dxdp.pin_dir, "DXDP_FLOWS");
    assert_eq!(
        established.len(),
        1,
        "only the client's connection is established; no forged one may be"
    );
    // `status` says so, and that the tables of openings and UDP flows filled up (an LRU map
    // that forgets keeps up to a few dozen free entries per CPU, hence not "equal").
    let run = world.dxdp.run(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&run.stdout).expect("status JSON");
    let tables = &status["connections"];
    assert_eq!(tables["established"]["entries"], 1, "{tables}");
    assert_eq!(tables["established"]["capacity"], TABLE, "{tables}");
    for side in ["opening", "udp"] {
        let (entries, capacity) = (
            tables[side]["entries"].as_u64().unwrap_or(0),
            tables[side]["capacity"].as_u64().unwrap_or(0),
        );
        assert!(
            capacity == (TABLE / 4) as u64 && entries * 10 >= capacity * 9,
            "{side}: {tables}"
        );
    }
    // `doctor` names the flood.
    let doctor = world.dxdp.run(&["doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&doctor.stdout).expect("doctor JSON");
    let warned = report["checks"].as_array().into_iter().flatten().any(|c| {
        c["verdict"] == "warn" && c["what"].as_str().is_some_and(|w| w.contains("SYN flood"))
    });
    assert!(warned, "{tables}: {report:#}");

    assert!(
        client.wait_timeout(Duration::from_secs(30)).is_some(),
        "the download did not end"
    );
    assert!(server.wait_timeout(Duration::from_secs(5)).is_some());
    assert_eq!(
        sha256(&got),
        download.sha,
        "the download after the floods did not arrive whole"
    );
    let run = world.dxdp.run(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&run.stdout).expect("status JSON");
    let out_bytes = status["exposed"]
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["host_port"] == port))
        .and_then(|p| p["outbound"]["bytes"].as_u64())
        .unwrap_or(0);
    assert!(
        out_bytes >= 4 << 20,
        "the download should have left over the fast path: {out_bytes} bytes out"
    );
    world.dxdp.run(&["unexpose", &web]).assert_success();
}

/// A connection from a source address the host's stack refuses (a martian: `0.0.0.0/8`,
/// `127.0.0.0/8`, multicast and the rest above `224.0.0.0`; IPv6's unspecified, loopback,
/// multicast, link-local and v4-mapped) stays on Docker's path, where the stack drops it, even
/// where a route leads back to it through the NIC: a multicast source here, with a route for
/// it through the NIC, as a host whose default route is the NIC has for every address
/// (checked by hand without the source check: the SYN took the fast path).
#[test]
fn a_martian_source_stays_on_dockers_path_even_where_a_route_leads_back_to_it() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let port = 17090u16;
    let web = one_port_web(&mut world, &out, "martian", port, "5201", &["iperf3", "-s"]);
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    // An organisation-local multicast address of this test's own, routed through its NIC (the
    // route goes with the NIC).
    let (subnet, _) = out.host_addr.rsplit_once('.').expect("10.236.k.1");
    let k = subnet.rsplit('.').next().expect("k");
    let martian = format!("239.255.236.{k}");
    must(&[
        "ip",
        "route",
        "add",
        &format!("{martian}/32"),
        "dev",
        &out.nic,
    ]);
    let counters = || port_counters(&world, port, "tcp").expect("exposed");
    let (in_before, _, passed_before) = counters();
    out.forge("syn", &martian, &out.host_addr, port, 1);
    let (in_after, _, passed_after) = counters();
    assert_eq!(
        (in_after - in_before, passed_after - passed_before),
        (0, 2),
        "the SYN and the ACK from {martian} should both pass to the stack"
    );
    world.dxdp.run(&["unexpose", &web]).assert_success();
}

/// A UDP answer larger than the MTU (a big DNS answer, say) leaves the container in fragments;
/// over the fast path each answer reaches the client whole, from the published address and
/// port, as over Docker's path: ten questions in each family, on both paths. Before the
/// fragments were translated they took the stack, where conntrack, which never saw the flow,
/// took the answer for a new connection from the container and masqueraded it from the
/// container's own port: the client's connected socket got none of the ten (checked by hand
/// without `fragments::reply`, in both families).
#[test]
fn udp_answers_larger_than_the_mtu_reach_the_client_whole_from_the_published_port() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let port = 17090u16;
    let web = dual_stack_web(&mut world, &out, "frag", port, "7010/udp");
    let pid = world.pid(&web);
    // Three fragments each at the network's MTU of 1,500.
    let size = "4000";
    let _server = Background::spawn(&in_container(
        pid,
        &["python3", PEER, "udp-big", "7010", size],
    ));
    wait_for_udp_server(pid, 7010);
    let hosts = [out.host_addr.as_str(), out.host_addr6.as_str()];
    let whole_answers = |host: &str| {
        let port = port.to_string();
        let run = out.run(
            &["python3", PEER, "udp-ask-big", host, &port, "10", size],
            Duration::from_secs(30),
        );
        run.assert_success();
        run.stdout.trim().to_owned()
    };
    for host in hosts {
        assert_eq!(whole_answers(host), "10", "Docker's path, to {host}");
    }
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    for host in hosts {
        assert_eq!(whole_answers(host), "10", "the fast path, to {host}");
        let (inbound, outbound, passed) =
            counters_at(&world, Some(host), port, "udp").expect("exposed");
        assert!(
            inbound >= 10 && outbound >= 30 && passed == 0,
            "to {host}: the answers' fragments did not take the fast path: (in, out, passed) \
             ({inbound}, {outbound}, {passed})"
        );
    }
    world.dxdp.run(&["unexpose", &web]).assert_success();
}

/// A rule that closes a published port's traffic to a client, and the exposure taken away for
/// it (as the watch takes it when the rules change), stop the container's datagrams to that
/// client at once, as the rule stops them on Docker's path: a UDP flow ends with its exposure,
/// and the container's next datagram meets conntrack and the rule. Before, a flow kept the
/// fast path for its replies until it had been quiet for 120 s, and each datagram the container
/// sent kept it alive (checked by hand with the flows left to drain: the stream went on
/// reaching the client until its end).
#[test]
fn a_udp_flow_ends_with_its_exposure_and_meets_the_rule_that_took_it() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let port = 17100u16;
    let web = one_port_web(
        &mut world,
        &out,
        "stream",
        port,
        "7011/udp",
        &["iperf3", "-s"],
    );
    let pid = world.pid(&web);
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    let _server = Background::spawn(&in_container(
        pid,
        &["python3", PEER, "udp-stream", "7011", "8"],
    ));
    wait_for_udp_server(pid, 7011);
    let arrivals = PathBuf::from(format!("/tmp/dxt-{}-stream", std::process::id()));
    let _files = Files(vec![arrivals.clone()]);
    let mut follower = Background::spawn(&in_ns(
        &out.ns.name,
        &[
            "python3",
            PEER,
            "udp-follow",
            &out.host_addr,
            &port.to_string(),
            &arrivals.display().to_string(),
            "7",
        ],
    ));
    let arrived = || {
        std::fs::read_to_string(&arrivals)
            .map(|text| text.lines().count())
            .unwrap_or(0)
    };
    assert!(
        wait_until(Duration::from_secs(5), || arrived() >= 100),
        "the stream did not reach the client: {} datagrams",
        arrived()
    );
    let (_, outbound, _) = port_counters(&world, port, "udp").expect("exposed");
    assert!(
        outbound >= 100,
        "the stream did not take the fast path: {outbound} out"
    );
    let _rule = FirewallRule::insert(
        "iptables",
        "DOCKER-USER",
        &["-d", &out.client_addr, "-j", "DROP"],
    );
    world.dxdp.run(&["unexpose", &web]).assert_success();
    // What was already on its way.
    std::thread::sleep(Duration::from_millis(200));
    let settled = arrived();
    follower.wait_timeout(Duration::from_secs(15));
    assert_eq!(
        arrived(),
        settled,
        "datagrams reached the client after the rule and the unexpose"
    );
}

/// A forged "fragmentation needed" (IPv4) or "packet too big" (IPv6) quoting a live fast-path
/// flow is delivered to the container only from a source the stack would take it from: one the
/// host routes back out of the NIC, as the flow's own packets must come from. From the host's
/// own address, from a container's, or from an address routed through another interface it
/// stays with the stack, which drops it as on Docker's path, and the container's path MTU is
/// untouched; from the client's side of the NIC (a router there) it is delivered and the path
/// MTU drops, so the check is not vacuous. Before, only martian sources were refused: each of
/// these forged errors cut the container's path MTU (checked by hand without the route check:
/// every assertion on a refused source fails).
#[test]
fn a_forged_mtu_error_from_a_source_the_stack_refuses_never_reaches_the_container() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    // Another NIC: its client's address is routed through it, not through `out`'s.
    let elsewhere = Outside::new(&world);
    let port = 17110u16;
    let net = world.network_v6("icmpsrc", true, &[]);
    let v4 = format!("{}:{port}:7012/udp", out.host_addr);
    let v6 = format!("[{}]:{port}:7012/udp", out.host_addr6);
    let web = world.run(
        "web",
        &["--network", &net, "-p", &v4, "-p", &v6],
        &["iperf3", "-s"],
    );
    let pid = world.pid(&web);
    let web_addr = world.ip(&web, &net);
    let _echo = Background::spawn(&in_container(pid, &["python3", PEER, "udp-echo", "7012"]));
    wait_for_udp_server(pid, 7012);
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    let client_port = 40400u16;
    // The live flow the errors quote: a datagram from the client's fixed port, and its answer.
    const FLOW: &str = "import socket, sys\n\
        host, port, sport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n\
        s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET, socket.SOCK_DGRAM)\n\
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
        s.bind(('::' if ':' in host else '', sport))\n\
        s.settimeout(1.5)\n\
        s.sendto(b'hi', (host, port))\n\
        print(s.recvfrom(64)[0].decode())\n";
    let path_mtu = |client: &str| {
        let family = if client.contains(':') { "-6" } else { "-4" };
        let run = run_for(
            &in_container(pid, &["ip", family, "route", "get", client]),
            Duration::from_secs(5),
        );
        run.assert_success();
        run.stdout
            .split_whitespace()
            .skip_while(|w| *w != "mtu")
            .nth(1)
            .map(str::to_owned)
    };
    let v6_client = out.client_addr6.clone();
    let v6_elsewhere = elsewhere.client_addr6.clone();
    let cases: [(&str, &str, &str, &str, u16); 5] = [
        (
            "the host's own address",
            &out.host_addr,
            &out.host_addr,
            &out.client_addr,
            600,
        ),
        (
            "the container's address",
            &web_addr,
            &out.host_addr,
            &out.client_addr,
            600,
        ),
        (
            "an address routed elsewhere",
            &elsewhere.client_addr,
            &out.host_addr,
            &out.client_addr,
            600,
        ),
        (
            "the host's own IPv6 address",
            &out.host_addr6,
            &out.host_addr6,
            &v6_client,
            1280,
        ),
        (
            "an IPv6 address routed elsewhere",
            &v6_elsewhere,
            &out.host_addr6,
            &v6_client,
            1280,
        ),
    ];
    for (what, from, published, client, mtu) in cases {
        quietly(&in_container(pid, &["ip", "route", "flush", "cache"]));
        quietly(&in_container(pid, &["ip", "-6", "route", "flush", "cache"]));
        let flow = out.run(
            &[
                "python3",
                "-c",
                FLOW,
                published,
                &port.to_string(),
                &client_port.to_string(),
            ],
            Duration::from_secs(10),
        );
        assert!(
            flow.success(),
            "the flow to {published} was not answered: {flow}"
        );
        out.forge_too_big(from, (published, port), (client, client_port), mtu);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            path_mtu(client),
            None,
            "an error from {what} ({from}) reached the container"
        );
        // The same error from the client's side of the NIC, where a router would be.
        let router = if client.contains(':') {
            client
        } else {
            &out.client_addr
        };
        out.forge_too_big(router, (published, port), (client, client_port), mtu);
        assert!(
            wait_until(Duration::from_secs(2), || path_mtu(client)
                .is_some_and(|m| m == mtu.to_string())),
            "an error from the client's side ({router}) did not reach the container: {:?}",
            path_mtu(client)
        );
    }
    world.dxdp.run(&["unexpose", &web]).assert_success();
}

/// Frames the stack would not forward to a container take no fast path: to a broadcast,
/// multicast or another host's MAC, VLAN-tagged, with a TTL or hop limit of 0 or 1, a bad IPv4
/// header checksum, an IP length longer than the packet, a UDP length that does not fit, and
/// TCP segments with flags conntrack refuses (SYN+FIN, none). Each is counted as passed to
/// Docker's path, none is counted in, and the container's receiver gets only the two valid
/// datagrams sent last (one per family): the stack dropped the others, as it does when nothing
/// is exposed. Before, every one of them was carried in (checked by hand with the checks taken
/// out of `ingress`: each assertion on an odd frame fails).
#[test]
fn frames_the_stack_would_not_forward_to_the_container_stay_off_the_fast_path() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let port = 17120u16;
    let tcp_port = port + 1;
    let net = world.network_v6("odd", true, &[]);
    let udp4 = format!("{}:{port}:7013/udp", out.host_addr);
    let udp6 = format!("[{}]:{port}:7013/udp", out.host_addr6);
    let tcp4 = format!("{}:{tcp_port}:5201", out.host_addr);
    let web = world.run(
        "web",
        &["--network", &net, "-p", &udp4, "-p", &udp6, "-p", &tcp4],
        &["iperf3", "-s"],
    );
    let pid = world.pid(&web);
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    let receiver = std::thread::spawn(move || {
        run_for(
            &in_container(pid, &["python3", FORGE, "receive", "7013", "60", "60"]),
            Duration::from_secs(70),
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    let nic_mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", out.nic))
        .expect("the NIC's MAC");
    let send = |from: &str, to: &str, port: u16, kind: &str| {
        let port = port.to_string();
        let argv = [
            "python3",
            FORGE,
            "odd",
            &out.peer,
            nic_mac.trim(),
            "02:00:5e:10:00:01",
            from,
            to,
            &port,
            kind,
        ];
        out.run(&argv, Duration::from_secs(10)).assert_success();
    };
    let client6 = out.client_addr6.clone();
    let odd_udp = [
        "broadcast",
        "multicast",
        "foreign-mac",
        "vlan",
        "ttl-0",
        "ttl-1",
        "ip-length-long",
        "udp-length-long",
        "udp-length-short",
    ];
    let mut cases: Vec<(&str, &str, u16, &str, &str)> = Vec::new();
    for kind in odd_udp {
        cases.push((&out.client_addr, &out.host_addr, port, "udp", kind));
        cases.push((&client6, &out.host_addr6, port, "udp", kind));
    }
    cases.push((
        &out.client_addr,
        &out.host_addr,
        port,
        "udp",
        "bad-ip-checksum",
    ));
    for kind in ["syn-fin", "no-flags"] {
        cases.push((&out.client_addr, &out.host_addr, tcp_port, "tcp", kind));
    }
    for (from, to, port, protocol, kind) in cases {
        let before = counters_at(&world, Some(to), port, protocol).expect("exposed");
        send(from, to, port, kind);
        let counted = wait_until(Duration::from_secs(2), || {
            counters_at(&world, Some(to), port, protocol)
                .is_some_and(|now| now.2 > before.2 || now.0 > before.0)
        });
        let after = counters_at(&world, Some(to), port, protocol).expect("exposed");
        assert!(
            counted && after.0 == before.0 && after.2 == before.2 + 1,
            "{kind} to {to}:{port}/{protocol} was not left to the stack: (in, out, passed) \
             {before:?} -> {after:?}"
        );
    }
    // The receiver stops at the last.
    let valid = [
        (&out.client_addr, &out.host_addr, "valid"),
        (&client6, &out.host_addr6, "valid-last"),
    ];
    for (from, to, kind) in valid {
        let before = counters_at(&world, Some(to), port, "udp").expect("exposed");
        send(from, to, port, kind);
        assert!(
            wait_until(Duration::from_secs(2), || {
                counters_at(&world, Some(to), port, "udp").is_some_and(|now| now.0 == before.0 + 1)
            }),
            "a valid datagram to {to} did not take the fast path"
        );
    }
    let received = receiver.join().expect("the receiver's thread");
    received.assert_success();
    assert_eq!(
        received.stdout.lines().last(),
        Some("2"),
        "the container did not receive exactly the two valid datagrams: {received}"
    );
    world.dxdp.run(&["unexpose", &web]).assert_success();
}

/// A client's own SYN-ACK, sent after its SYN of the same connection, is one conntrack marks
/// INVALID ("client can't send SYN and then SYN/ACK"), so Docker's path never delivers it: the
/// fast path, which carried the SYN, hands it to the stack instead (where conntrack, which
/// never saw the connection, refuses it all the same), over IPv4 and IPv6. The container's
/// SYN-ACK is dropped in its own namespace, so that the connection stays where the client's
/// SYN left it; then, answered, the client resets it before its SYN-ACK, which conntrack finds
/// closed (the differential harness's seed 7373, cases 410 and 510; before, the fast path
/// carried both SYN-ACKs: in +2, passed +0, then in +4, passed +0).
#[test]
fn a_clients_own_syn_ack_after_its_syn_stays_off_the_fast_path() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    // A port for each half: the container's SYN-ACKs to the first half's openings, sent
    // again once they are let out, must not count in the second's.
    let (port, after_rst_port) = (17160u16, 17161u16);
    let net = world.network_v6("synack", true, &[]);
    let publish = [
        format!("{}:{port}:5201", out.host_addr),
        format!("[{}]:{port}:5201", out.host_addr6),
        format!("{}:{after_rst_port}:5201", out.host_addr),
        format!("[{}]:{after_rst_port}:5201", out.host_addr6),
    ];
    let mut args = vec!["--network", net.as_str()];
    for p in &publish {
        args.extend(["-p", p.as_str()]);
    }
    let web = world.run("synack", &args, &["iperf3", "-s"]);
    let pid = world.pid(&web);
    // The container's own SYN-ACKs dropped in its namespace (`-A`) or let out again (`-D`).
    let answers = |action: &str| {
        for iptables in ["iptables", "ip6tables"] {
            let rule = [
                iptables,
                action,
                "OUTPUT",
                "-p",
                "tcp",
                "--tcp-flags",
                "SYN,ACK",
                "SYN,ACK",
                "-j",
                "DROP",
            ];
            must(&in_container(pid, &rule));
        }
    };
    answers("-A");
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    let nic_mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", out.nic))
        .expect("the NIC's MAC");
    let client6 = out.client_addr6.clone();
    let clients = [
        (&out.client_addr, &out.host_addr),
        (&client6, &out.host_addr6),
    ];
    // forge.py syn-ack from `from` to `to` (and its `extra` argument): the port's (in, out,
    // passed) counters before and once the stack has passed something.
    let forge = |port: u16, from: &str, to: &str, extra: &[&str]| {
        let before = counters_at(&world, Some(to), port, "tcp").expect("exposed");
        let port_arg = port.to_string();
        let mut argv = vec![
            "python3",
            FORGE,
            "syn-ack",
            &out.peer,
            nic_mac.trim(),
            "02:00:5e:10:00:01",
            from,
            to,
            &port_arg,
        ];
        argv.extend_from_slice(extra);
        out.run(&argv, Duration::from_secs(10)).assert_success();
        let counted = wait_until(Duration::from_secs(2), || {
            counters_at(&world, Some(to), port, "tcp").is_some_and(|now| now.2 > before.2)
        });
        let after = counters_at(&world, Some(to), port, "tcp").expect("exposed");
        (counted, before, after)
    };
    for (from, to) in clients {
        let (counted, before, after) = forge(port, from, to, &[]);
        assert!(
            counted && after.0 == before.0 + 1 && after.2 == before.2 + 1,
            "to {to}: the SYN should take the fast path and the SYN-ACK the stack: (in, out, \
             passed) {before:?} -> {after:?}"
        );
    }
    // The container answers now; the client resets the opening and then sends its SYN-ACK:
    // conntrack closed the connection at the RST, and the SYN-ACK takes the stack.
    answers("-D");
    for (from, to) in clients {
        let (counted, before, after) = forge(after_rst_port, from, to, &["after-rst"]);
        assert!(
            // The SYN and the first RST (the client namespace's own, answering the container's
            // SYN-ACK, or the forged one) take the fast path; what follows finds no opening.
            counted && after.0 == before.0 + 2 && after.2 > before.2,
            "to {to}: the SYN and RST should take the fast path and the SYN-ACK after them the \
             stack: (in, out, passed) {before:?} -> {after:?}"
        );
    }
    world.dxdp.run(&["unexpose", &web]).assert_success();
}

/// Where the NIC's MTU (1,400 here) is smaller than the container network's (1,500), a reply
/// too big for the NIC is not lost on the fast path: it takes the stack, which answers the
/// container with "fragmentation needed" / "packet too big" as on Docker's path, and the
/// container sends the next answers in fragments that fit, which the fast path carries. Five
/// 1,450-byte answers in each family: as many arrive as over Docker's path (the first is lost
/// on both). Before, `bpf_redirect_neigh` dropped every one silently and nothing told the
/// container (checked by hand without the MTU check: none of the five arrived).
#[test]
fn replies_too_big_for_a_smaller_nic_mtu_teach_the_container_its_path_mtu() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    must(&["ip", "link", "set", &out.nic, "mtu", "1400"]);
    out.set_peer_mtu(1400);
    big_answers_arrive_as_over_dockers_path(&mut world, &out, "nicmtu", 17130, 7014);
}

/// Where the host's route to the client sets an MTU (1,400; IPv4's as `ip route … mtu`, which
/// forwarding heeds unlocked, IPv6's locked, as forwarding heeds it there) below the NIC's
/// (1,500), and the client's link takes no more, a reply too big for the route takes the stack
/// as one too big for the NIC does, and the container learns its path MTU. The programs
/// cannot ask the kernel for a route's MTU (`bpf_check_mtu` knows the device's,
/// `bpf_fib_lookup` what output uses): `DXDP_ROUTE_MTUS` mirrors the routes. Without it (the
/// programs of the build before), none of the five answers arrives over the fast path in
/// either family, where Docker's path delivers four.
#[test]
fn replies_too_big_for_a_routes_mtu_teach_the_container_its_path_mtu() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    out.set_peer_mtu(1400);
    // On the NIC, which takes them with it when the test's guard deletes it.
    let client4 = format!("{}/32", out.client_addr);
    must(&[
        "ip", "route", "add", &client4, "dev", &out.nic, "mtu", "1400",
    ]);
    let client6 = format!("{}/128", out.client_addr6);
    must(&[
        "ip", "-6", "route", "add", &client6, "dev", &out.nic, "mtu", "lock", "1400",
    ]);
    big_answers_arrive_as_over_dockers_path(&mut world, &out, "routemtu", 17140, 7015);
}

/// Where the host has cached a path MTU to the client (1,300: an IPv6 "packet too big" it took
/// for itself, as about its own traffic there), IPv6 forwarding holds replies to it:
/// `ip6_finish_output` answers the container "packet too big" for each that is bigger, though
/// the route and the NIC take 1,500. Over the fast path the same must happen: the container
/// learns the path MTU and the same number of answers arrive. No map mirrors such a cache (the
/// kernel announces none of it); `bpf_fib_lookup`, asked with the reply's length, answers from
/// it. Without that (the programs of the build before), the fast path delivered all five
/// 1,470-byte answers and the container learnt nothing, where Docker's path delivered four and
/// taught it 1,300 (found by the differential harness's long run, seed 6262 cases 15 and 42).
#[test]
fn replies_too_big_for_a_cached_path_mtu_teach_the_container_as_dockers_path_does() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    // On the NIC's route, which goes when the test's guard deletes the NIC.
    let planted = out.run(
        &[
            "python3",
            PEER,
            "ptb6",
            &out.host_addr6,
            &out.client_addr6,
            "1300",
        ],
        Duration::from_secs(5),
    );
    planted.assert_success();
    let cached = must(&["ip", "-6", "route", "get", &out.client_addr6]);
    assert!(
        cached.contains("mtu 1300"),
        "the host did not cache a path MTU to {}: {cached}",
        out.client_addr6
    );
    let web = dual_stack_web(&mut world, &out, "cachedmtu", 17150, "7016/udp");
    let pid = world.pid(&web);
    let size = "1422";
    let _server = Background::spawn(&in_container(
        pid,
        &["python3", PEER, "udp-big", "7016", size],
    ));
    wait_for_udp_server(pid, 7016);
    let host = out.host_addr6.as_str();
    let round = || -> (u32, String) {
        quietly(&in_container(pid, &["ip", "-6", "route", "flush", "cache"]));
        let run = out.run(
            &["python3", PEER, "udp-ask-big", host, "17150", "5", size],
            Duration::from_secs(30),
        );
        run.assert_success();
        let learnt = must(&in_container(
            pid,
            &["ip", "-6", "route", "get", &out.client_addr6],
        ));
        (run.stdout.trim().parse().expect("a count"), learnt)
    };
    let (docker, docker_learnt) = round();
    assert!(
        docker == 4 && docker_learnt.contains("mtu 1300"),
        "Docker's path did not hold the answers to the host's cached path MTU: {docker} of 5 \
         arrived; the container's route: {docker_learnt}"
    );
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    let (fast, fast_learnt) = round();
    assert!(
        fast == docker && fast_learnt.contains("mtu 1300"),
        "over the fast path {fast} of 5 answers arrived (Docker's path: {docker}) and the \
         container's route to the client is: {fast_learnt}"
    );
    let (_, outbound, _) = counters_at(&world, Some(host), 17150, "udp").expect("exposed");
    assert!(
        outbound >= 6,
        "the answers' fragments did not take the fast path"
    );
    world.dxdp.run(&["unexpose", &web]).assert_success();
}

/// Five UDP answers of 1,450 bytes on the wire (1,470 in IPv6) from a container published at
/// `port` (its server on `udp_port`), to the client of `out`, in each family, over Docker's path
/// and then over the fast path, the container's cached path MTUs forgotten before each round:
/// at least as many arrive over the fast path as over Docker's (which loses only the first),
/// and the answers' fragments take the fast path.
fn big_answers_arrive_as_over_dockers_path(
    world: &mut World,
    out: &Outside,
    name: &str,
    port: u16,
    udp_port: u16,
) {
    let udp = udp_port.to_string();
    let web = dual_stack_web(world, out, name, port, &format!("{udp}/udp"));
    let pid = world.pid(&web);
    let size = "1422";
    let _server = Background::spawn(&in_container(
        pid,
        &["python3", PEER, "udp-big", &udp, size],
    ));
    let hosts = [out.host_addr.as_str(), out.host_addr6.as_str()];
    let answers = |host: &str| -> u32 {
        let port = port.to_string();
        let run = out.run(
            &["python3", PEER, "udp-ask-big", host, &port, "5", size],
            Duration::from_secs(30),
        );
        run.assert_success();
        run.stdout.trim().parse().expect("a count")
    };
    let forget_path_mtus = || {
        quietly(&in_container(pid, &["ip", "route", "flush", "cache"]));
        quietly(&in_container(pid, &["ip", "-6", "route", "flush", "cache"]));
    };
    wait_for_udp_server(pid, udp_port);
    let mut dockers = Vec::new();
    for host in hosts {
        forget_path_mtus();
        dockers.push(answers(host));
    }
    assert!(
        dockers.iter().all(|&n| n >= 4),
        "Docker's path lost more than the first answer: {dockers:?}"
    );
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    for (host, docker) in hosts.into_iter().zip(dockers) {
        forget_path_mtus();
        let fast = answers(host);
        assert!(
            fast >= docker.min(4),
            "to {host}: {fast} of 5 answers over the fast path, {docker} over Docker's path"
        );
        let (_, outbound, _) = counters_at(world, Some(host), port, "udp").expect("exposed");
        assert!(
            outbound >= 6,
            "to {host}: the answers' fragments did not take the fast path"
        );
    }
    world.dxdp.run(&["unexpose", &web]).assert_success();
}

/// The fast path carries a published port's connections from the client's SYN on, so
/// conntrack never sees them; it holds their segments to the windows conntrack would have
/// (`tcp_windows`, from the handshake on). Forged into a running download from outside: an RST
/// and a data segment 2^30 past the window never reach the container (conntrack marks them
/// INVALID, so Docker's DNAT never translates them), an ACK in the window does, the port counts
/// the two as refused, and the download arrives whole. Before, the fast path delivered all
/// three (checked on a build of 38823e8).
#[test]
fn segments_out_of_the_window_of_a_published_ports_connection_never_reach_the_container() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let (web, pid) = exposed_window_server(&mut world, &out, "pubwin", 17170);
    let forged = forged_into_a_published_download(&world, &out, pid, (17170, 41700));
    world.dxdp.run(&["unexpose", &web]).assert_success();
    assert_only_the_ack_in_the_window_arrived(&forged.arrived);
    assert!(
        forged.refused_after >= forged.refused_before + 2,
        "the port should count the two as refused: {} -> {}",
        forged.refused_before,
        forged.refused_after
    );
}

/// `nf_conntrack_tcp_be_liberal` on when a port is exposed, turned off after: `dxdp doctor`
/// fails naming the switch until a watch's pass gives the published ports' programs
/// conntrack's switches, and after it a data segment forged far past a carried connection's
/// window does not reach the container, as conntrack, strict again, would have marked it
/// INVALID. (The programs read the switches once, at load, before: liberal, they went on
/// carrying such segments in.)
#[test]
fn a_switch_turned_off_after_expose_is_followed_once_the_watch_runs() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    // Each put back on drop: the second's first, then the host's own.
    let _on = NetfilterSysctl::set("nf_conntrack_tcp_be_liberal", "1");
    let (web, pid) = exposed_window_server(&mut world, &out, "pubswitch", 17171);
    let _off = NetfilterSysctl::set("nf_conntrack_tcp_be_liberal", "0");
    let stale = "conntrack's TCP switches changed since the published ports' programs";
    let doctor = world.dxdp.run(&["doctor"]);
    assert!(
        !doctor.success() && doctor.stdout.contains(stale),
        "{}",
        doctor.stdout
    );
    assert!(
        doctor
            .stdout
            .contains("nf_conntrack_tcp_be_liberal 1, now 0"),
        "{}",
        doctor.stdout
    );
    world.dxdp.run(&["watch", "--once"]).assert_success();
    let doctor = world.dxdp.run(&["doctor"]);
    assert!(!doctor.stdout.contains(stale), "{}", doctor.stdout);
    let forged = forged_into_a_published_download(&world, &out, pid, (17171, 41701));
    world.dxdp.run(&["unexpose", &web]).assert_success();
    assert_only_the_ack_in_the_window_arrived(&forged.arrived);
}

/// An iperf3 server's container on a network of its own (`tag`), port `port` published on the
/// outside's host address to its 7001 and exposed by hand on the outside's NIC: its name and
/// pid.
fn exposed_window_server(world: &mut World, out: &Outside, tag: &str, port: u16) -> (String, u32) {
    let net = world.network(tag, &[]);
    let publish = format!("{}:{port}:7001", out.host_addr);
    let web = world.run(tag, &["--network", &net, "-p", &publish], &["iperf3", "-s"]);
    let pid = world.pid(&web);
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    (web, pid)
}

/// What [`forged_into_a_published_download`] found.
struct Forged {
    /// The forged segments that reached the container (`forge.py tcp-watch`).
    arrived: String,
    /// The port's `refused_packets` before and after the forging.
    refused_before: u64,
    refused_after: u64,
}

/// A download from the container `pid` (exposed by [`exposed_window_server`]) to a client
/// outside on `ports` (host port, client port), over the fast path, with `forge.py
/// tcp-window`'s three segments forged into it from outside. The download must arrive whole.
fn forged_into_a_published_download(
    world: &World,
    out: &Outside,
    pid: u32,
    (port, client_port): (u16, u16),
) -> Forged {
    let download = Payload::new(&format!("window-{port}"), 48);
    let got = PathBuf::from(format!("/tmp/dxt-{}-got-{port}", std::process::id()));
    let seen = PathBuf::from(format!("/tmp/dxt-{}-seen-{port}", std::process::id()));
    let ready = PathBuf::from(format!("{}.ready", seen.display()));
    let _cleanup = Files(vec![got.clone(), seen.clone(), ready.clone()]);
    let mut server = serve(pid, &download);
    std::thread::sleep(Duration::from_millis(300));
    let mut client = Background::spawn(&in_ns(
        &out.ns.name,
        &[
            "python3",
            PEER,
            "receive-from",
            &out.host_addr,
            &port.to_string(),
            &got.display().to_string(),
            &client_port.to_string(),
        ],
    ));
    assert!(
        wait_until(Duration::from_secs(5), || {
            port_counters(world, port, "tcp").is_some_and(|(i, o, _)| i > 10 && o > 10)
        }),
        "the download should run over the fast path"
    );
    let mut watch = Background::spawn(&in_container(
        pid,
        &[
            "python3",
            FORGE,
            "tcp-watch",
            "eth0",
            "3",
            &seen.display().to_string(),
        ],
    ));
    assert!(
        wait_until(Duration::from_secs(5), || ready.exists()),
        "the watch in the container did not start"
    );
    let refused_before = refused(world, port);
    let nic_mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", out.nic))
        .expect("the NIC's MAC");
    let forged = out.run(
        &[
            "python3",
            FORGE,
            "tcp-window",
            &out.peer,
            nic_mac.trim(),
            "02:00:5e:10:00:01",
            &out.client_addr,
            &out.host_addr,
            &client_port.to_string(),
            &port.to_string(),
        ],
        Duration::from_secs(15),
    );
    forged.assert_success();
    eprintln!("{}", forged.stdout.trim());
    assert!(watch.wait_timeout(Duration::from_secs(10)).is_some());
    let arrived = std::fs::read_to_string(&seen).unwrap_or_default();
    eprintln!("forged segments that reached the container: {arrived:?}");
    let refused_after = refused(world, port);
    assert!(client.wait_timeout(Duration::from_secs(20)).is_some());
    assert!(server.wait_timeout(Duration::from_secs(5)).is_some());
    assert_eq!(sha256(&got), download.sha, "the download lost bytes");
    Forged {
        arrived,
        refused_before,
        refused_after,
    }
}

/// The port's `refused_packets` in `dxdp status --json`.
fn refused(world: &World, host_port: u16) -> u64 {
    let run = world.dxdp.run(&["status", "--json"]);
    run.assert_success();
    let status: serde_json::Value = serde_json::from_str(&run.stdout).expect("status JSON");
    status["exposed"]
        .as_array()
        .and_then(|ports| {
            ports
                .iter()
                .find(|p| p["host_port"] == host_port && p["protocol"] == "tcp")
        })
        .and_then(|p| p["refused_packets"].as_u64())
        .unwrap_or(0)
}

/// Transfers of four parallel streams through a published port, with the container's iperf3
/// on one CPU and the client's on the other, uploads and downloads: each connection's
/// segments are judged on both CPUs at once (a sender's process context on one, its
/// ACK-clocked sends from the softirq on the other), and the window copy must not lose what
/// either CPU moved on. A lost `td_end` makes the receiver's ACK of the higher end look like
/// an ACK of data never sent: INVALID, dropped, counted in the port's `refused_packets`, and
/// the connection stalls until the sender retransmits. Nothing of well-behaved TCP may be
/// refused.
#[test]
fn parallel_transfers_on_two_cpus_never_have_a_segment_refused() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let out = Outside::new(&world);
    let (port, container_port) = (17180u16, 7002u16);
    let web = one_port_web(
        &mut world,
        &out,
        "pubcpu",
        port,
        &container_port.to_string(),
        &["sleep", "infinity"],
    );
    let pid = world.pid(&web);
    world
        .dxdp
        .run(&["expose", &web, "--nic", &out.nic, "--bypass-firewall"])
        .assert_success();
    let listen = container_port.to_string();
    let target = port.to_string();
    let mut failures = Vec::new();
    for i in 0..24 {
        let mut server = Background::spawn(&in_container(
            pid,
            &["taskset", "-c", "1", "iperf3", "-s", "-1", "-p", &listen],
        ));
        std::thread::sleep(Duration::from_millis(200));
        let mut client = four_streams_on_cpu("0", &out.host_addr, &target);
        // Downloads every other round: the container is then the sender.
        if i % 2 == 1 {
            client.push("-R".to_owned());
        }
        let client: Vec<&str> = client.iter().map(String::as_str).collect();
        let transfer = out.run(&client, Duration::from_secs(20));
        if !transfer.success() {
            failures.push(format!("transfer {i}: {transfer}"));
        }
        let _ = server.wait_timeout(Duration::from_secs(5));
    }
    let (inbound, outbound, _) = port_counters(&world, port, "tcp").expect("exposed");
    let refused = refused(&world, port);
    eprintln!("carried {inbound} packets in, {outbound} out; refused {refused}");
    world.dxdp.run(&["unexpose", &web]).assert_success();
    assert!(
        inbound > 100_000 && outbound > 100_000,
        "the fast path carried {inbound} packets in, {outbound} out"
    );
    assert!(failures.is_empty(), "transfers failed: {failures:?}");
    assert_eq!(
        refused, 0,
        "segments of well-behaved connections were refused as out of their window"
    );
}
