//! Promise 1, no misdelivery: a sniffer on the bridge sees none of a linked pair's frames while
//! the pair restarts and is replaced by containers with the same IPs and MACs, and afterwards
//! every map entry belongs to a link between live veths.

use super::*;

/// Starts one member of the pair with a fixed IP and MAC.
fn start_member(
    world: &mut World,
    name: &str,
    net: &str,
    group: &str,
    ip: &str,
    mac: &str,
) -> String {
    let args = member(net, group, &["--ip", ip, "--mac-address", mac]);
    world.run(name, &strs(&args), &[])
}

/// What one window of traffic between the pair moved, and what the sniffer got meanwhile.
#[derive(Debug, Default)]
struct Window {
    pair_frames: u64,
    sniffer_tx: u64,
    sniffer_rx: u64,
    sniffed: usize,
}

#[test]
fn a_sniffer_sees_no_frame_of_a_linked_pair_across_restarts_and_replacements() {
    if !require_docker() {
        return;
    }
    let iterations = if soak() { 25 } else { 5 };
    let started = Instant::now();
    let mut world = World::private();
    let net = world.network("net", &[]);
    let group = format!("{}-pair", world.prefix);
    let sniffer = world.run("sniffer", &["--network", &net], &[]);
    let sniffer_pid = world.pid(&sniffer);
    let (sniffer_veth, _) = world.veth(&sniffer, &net);
    // Promiscuous: whatever the bridge sends the sniffer reaches its counters.
    let pid_s = sniffer_pid.to_string();
    must(&[
        "nsenter", "-t", &pid_s, "-n", "ip", "link", "set", "eth0", "promisc", "on",
    ]);
    let ips = [world.address(&net, 10), world.address(&net, 11)];
    let macs = ["02:dd:00:00:00:0a", "02:dd:00:00:00:0b"];
    // tcpdump (on the host, inside the sniffer's namespace) names exactly the pair's frames.
    let capture = Scratch(std::env::temp_dir().join(format!("{}-sniffed.txt", world.prefix)));
    let capture = &capture.0;
    let filter = format!(
        "(ether src {a} and ether dst {b}) or (ether src {b} and ether dst {a})",
        a = macs[0],
        b = macs[1]
    );
    let _tcpdump = has_tool("tcpdump").then(|| {
        let shell = format!(
            "exec nsenter -t {pid_s} -n tcpdump -i eth0 -nn -e -l '{filter}' > {} 2>/dev/null",
            capture.display()
        );
        let bg = support::Background::spawn(&["sh", "-c", &shell]);
        thread::sleep(Duration::from_millis(500));
        bg
    });

    let mut pair = [
        start_member(&mut world, "a0", &net, &group, &ips[0], macs[0]),
        start_member(&mut world, "b0", &net, &group, &ips[1], macs[1]),
    ];
    // The bridge learns no address (ageing time 0), so it floods every unicast frame like a hub:
    // any frame of the pair that the link does not carry reaches the sniffer too.
    must(&[
        "ip",
        "link",
        "set",
        "dev",
        world.bridge(&net),
        "type",
        "bridge",
        "ageing_time",
        "0",
    ]);
    // Control, before any link: the sniffer does see the pair's frames.
    let (tx0, sniffed0) = (host_tx_packets(&sniffer_veth), line_count(capture));
    assert_eq!(
        docker_ping(&world, &pair[0], &ips[1], 100, "0.005"),
        (100, 100)
    );
    thread::sleep(Duration::from_millis(300));
    let control = (
        host_tx_packets(&sniffer_veth) - tx0,
        line_count(capture) - sniffed0,
    );
    assert!(
        control.0 >= 200 && (control.1 >= 200 || !has_tool("tcpdump")),
        "the sniffer does not see an unlinked pair's 200 frames: (bridge sent, tcpdump) = {control:?}"
    );
    let watch = world.watch(&["--resync", "30"]);
    wait_linked_via_current_veths(
        &world,
        &watch,
        &pair[0],
        &pair[1],
        &net,
        Duration::from_secs(10),
    );

    let window = |world: &World, pair: &[String; 2], what: &str| -> Window {
        let status0 = world.dxdp.status();
        let link0 = link_between(&status0, &pair[0], &pair[1])
            .cloned()
            .expect("linked");
        let (tx0, rx0) = (
            host_tx_packets(&sniffer_veth),
            netns_rx_packets(sniffer_pid, "eth0"),
        );
        let sniffed0 = line_count(capture);
        // UDP from b to a and a ping flood from a to b, at the same time.
        iperf3_server(world, &pair[0]);
        let (cli, client, server_ip) = (world.cli.clone(), pair[1].clone(), ips[0].clone());
        let udp = thread::spawn(move || {
            cli.run(&[
                "exec", &client, "timeout", "20", "iperf3", "-c", &server_ip, "-p", "5201", "-u",
                "-b", "20M", "-l", "1000", "-t", "1", "--json",
            ])
        });
        let (sent, got) = docker_ping(world, &pair[0], &ips[1], 500, "0.002");
        assert_eq!((sent, got), (500, 500), "{what}: ping lost frames");
        let run = udp.join().expect("iperf3 thread");
        assert!(run.success(), "{what}: iperf3 UDP: {run}");
        thread::sleep(Duration::from_millis(200));
        let status1 = world.dxdp.status();
        let link1 = link_between(&status1, &pair[0], &pair[1])
            .cloned()
            .expect("linked");
        Window {
            pair_frames: link1.low_to_high.packets + link1.high_to_low.packets
                - link0.low_to_high.packets
                - link0.high_to_low.packets,
            sniffer_tx: host_tx_packets(&sniffer_veth) - tx0,
            sniffer_rx: netns_rx_packets(sniffer_pid, "eth0") - rx0,
            sniffed: line_count(capture) - sniffed0,
        }
    };

    let mut total = Window::default();
    let mut phases = 0;
    for i in 1..=iterations {
        for phase in ["restart", "replace"] {
            if phase == "restart" {
                world.docker_ok(&["restart", "-t", "0", &pair[0], &pair[1]]);
            } else {
                world.remove(&pair);
                pair = [
                    start_member(&mut world, &format!("a{i}"), &net, &group, &ips[0], macs[0]),
                    start_member(&mut world, &format!("b{i}"), &net, &group, &ips[1], macs[1]),
                ];
            }
            wait_linked_via_current_veths(
                &world,
                &watch,
                &pair[0],
                &pair[1],
                &net,
                Duration::from_secs(10),
            );
            let what = format!("iteration {i}, after the {phase}");
            let w = window(&world, &pair, &what);
            assert!(w.pair_frames >= 2000, "{what}: the link carried only {w:?}");
            assert!(
                w.sniffer_tx < 50 && w.sniffer_rx < 50 && w.sniffed == 0,
                "{what}: the sniffer got the pair's frames: {w:?}\n--- watch log\n{}",
                watch.log_text()
            );
            total.pair_frames += w.pair_frames;
            total.sniffer_tx += w.sniffer_tx;
            total.sniffer_rx += w.sniffer_rx;
            total.sniffed += w.sniffed;
            phases += 1;
        }
        assert_consistent(&world.dxdp, Some(&watch));
    }

    // Afterwards: one link, between the current containers' veths; nothing else anywhere.
    let status = world.dxdp.status();
    let (va, vb) = (world.veth(&pair[0], &net), world.veth(&pair[1], &net));
    assert_eq!(status.links.len(), 1, "{status:#?}");
    assert!(status.link_between(va.1, vb.1).is_some(), "{status:#?}");
    let interfaces: BTreeSet<u32> = status.interfaces.iter().map(|i| i.ifindex).collect();
    assert_eq!(interfaces, BTreeSet::from([va.1, vb.1]));
    assert_consistent(&world.dxdp, Some(&watch));
    eprintln!(
        "misdelivery: control without a link: the sniffer got {control:?} (bridge, tcpdump) of \
         the pair's 200 frames; {iterations} iterations ({phases} restarts and replacements) in {:?}; \
         the pair exchanged {} frames over the link; the sniffer got {} frames from the bridge \
         ({} received), {} of them the pair's unicast{}",
        started.elapsed(),
        total.pair_frames,
        total.sniffer_tx,
        total.sniffer_rx,
        total.sniffed,
        if has_tool("tcpdump") {
            ""
        } else {
            " (no tcpdump: counters only)"
        }
    );
}
