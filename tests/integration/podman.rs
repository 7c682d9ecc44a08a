//! Real rootful Podman (Debian 12's 4.3.1 with netavark), beside the host's dockerd: dxdp
//! talks to Podman's Docker-compatible API through `DOCKER_HOST=unix:///run/podman/podman.sock`
//! and links its containers by name and ID prefix; the refusals; netavark's own firewall chains;
//! `dxdp watch` following labels. Every network and container is the test's own (`dxp-<pid>-<n>…`,
//! subnets 10.234.<k>.0/24, apart from the Docker tests' 10.231 and 10.232) and is removed on
//! drop, even when the test fails. dockerd and its containers are not touched.
use std::{thread, time::Duration};

use crate::{
    scenarios,
    support::{
        self, Background, ChainPolicy, DXDP, Dxdp, Engine, FirewallRule, PinDir, Run, Watch,
        can_run, link_between, must, next_id, run_for, try_run,
    },
};

const PODMAN: &str = "/usr/bin/podman";
/// Where scripts/setup.sh starts `podman system service`.
const HOST: &str = "unix:///run/podman/podman.sock";
/// Built by `scripts/build-test-image.sh --podman` (`podman import`; Podman stores it as
/// localhost/dxdp-test:local).
const IMAGE: &str = "dxdp-test:local";
/// Rootful runc on these VMs cannot raise RLIMIT_NOFILE/NPROC to Podman's defaults.
const ULIMITS: &[&str] = &[
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
];

/// Whether the privileged tests can run and rootful Podman's API and the test image are there;
/// panics under CI=true instead of skipping.
fn require_podman() -> bool {
    if !support::require_privileges() {
        return false;
    }
    let mut missing = Vec::new();
    let ping = ["curl", "-sf", "--unix-socket", "/run/podman/podman.sock"];
    match try_run(
        &[&ping[..], &["http://podman/_ping"]].concat(),
        Duration::from_secs(20),
    ) {
        Ok(run) if run.success() => {}
        _ => missing.push(format!(
            "the Podman API is not reachable at {HOST} (install and start it: scripts/setup.sh)"
        )),
    }
    match try_run(
        &[PODMAN, "image", "inspect", IMAGE],
        Duration::from_secs(20),
    ) {
        Ok(run) if run.success() => {}
        _ => missing.push(format!(
            "Podman has no image {IMAGE} (scripts/build-test-image.sh --podman)"
        )),
    }
    can_run(missing)
}

/// `podman ARGS…` within 60 s, whatever its exit code.
fn podman(args: &[&str]) -> Run {
    let mut argv = vec![PODMAN];
    argv.extend_from_slice(args);
    run_for(&argv, Duration::from_secs(60))
}

/// `podman ARGS…`, which must succeed; returns trimmed stdout.
#[track_caller]
fn podman_ok(args: &[&str]) -> String {
    let run = podman(args);
    run.assert_success();
    run.stdout.trim().to_owned()
}

/// A test's Podman world: its name prefix, a pin directory, and the containers and networks it
/// made, removed on drop (containers, networks, then the pin directory).
struct World {
    prefix: String,
    dxdp: Dxdp,
    n: u32,
    subnets: u32,
    containers: Vec<String>,
    pods: Vec<String>,
    networks: Vec<String>,
    _pin_dir: PinDir,
}

impl World {
    fn new() -> Self {
        let n = next_id();
        let pin_dir = PinDir::new(n);
        Self {
            prefix: format!("dxp-{}-{n}", std::process::id()),
            dxdp: Dxdp {
                pin_dir: pin_dir.path.clone(),
            },
            n,
            subnets: 0,
            containers: Vec::new(),
            pods: Vec::new(),
            networks: Vec::new(),
            _pin_dir: pin_dir,
        }
    }

    /// A netavark bridge network `<prefix>-<name>` with a subnet of its own; `extra` go to
    /// `podman network create` (e.g. `-o isolate=true`).
    #[track_caller]
    fn network(&mut self, name: &str, extra: &[&str]) -> String {
        let full = format!("{}-{name}", self.prefix);
        let third = (std::process::id() * 7 + self.n * 13 + self.subnets) % 250 + 1;
        self.subnets += 1;
        let subnet = format!("10.234.{third}.0/24");
        let mut args = vec!["network", "create", "--subnet", &subnet];
        args.extend_from_slice(extra);
        args.push(&full);
        self.networks.push(full.clone());
        podman_ok(&args);
        full
    }

    /// `podman run -d --name <prefix>-<name> ULIMITS ARGS… IMAGE`; returns the full name.
    #[track_caller]
    fn run(&mut self, name: &str, args: &[&str]) -> String {
        let full = format!("{}-{name}", self.prefix);
        let mut argv = vec!["run", "-d", "--name", &full];
        argv.extend_from_slice(ULIMITS);
        argv.extend_from_slice(args);
        argv.push(IMAGE);
        self.containers.push(full.clone());
        podman_ok(&argv);
        full
    }

    /// `podman pod create --name <prefix>-<name> ARGS…`; returns the full name.
    #[track_caller]
    fn pod(&mut self, name: &str, args: &[&str]) -> String {
        let full = format!("{}-{name}", self.prefix);
        let mut argv = vec!["pod", "create", "--name", &full];
        argv.extend_from_slice(args);
        self.pods.push(full.clone());
        podman_ok(&argv);
        full
    }

    #[track_caller]
    fn ip(&self, container: &str, network: &str) -> String {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
        podman_ok(&["inspect", "-f", &format, container])
    }

    #[track_caller]
    fn id(&self, container: &str) -> String {
        podman_ok(&["inspect", "-f", "{{.Id}}", container])
    }

    /// `dxdp --pin-dir DIR ARGS…` with DOCKER_HOST pointing at Podman.
    fn dxdp(&self, args: &[&str]) -> Run {
        let dir = self.dxdp.pin_dir.to_string_lossy().into_owned();
        let host = format!("DOCKER_HOST={HOST}");
        let mut argv = vec!["env", &host, DXDP, "--pin-dir", &dir];
        argv.extend_from_slice(args);
        run_for(&argv, Duration::from_secs(60))
    }

    /// `dxdp watch` on this world's pin directory, on Podman.
    fn watch(&self, extra: &[&str]) -> Watch {
        Watch::start_with_env(&self.dxdp, extra, &[("DOCKER_HOST", HOST)])
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for c in self.containers.drain(..).rev() {
            quietly(&["rm", "-f", "-t", "0", "-v", &c]);
        }
        for p in self.pods.drain(..).rev() {
            quietly(&["pod", "rm", "-f", "-t", "0", &p]);
        }
        for n in self.networks.drain(..).rev() {
            quietly(&["network", "rm", "-f", &n]);
        }
    }
}

/// Podman: the rootful service at [`HOST`].
impl Engine for World {
    fn name(&self) -> &'static str {
        "podman"
    }

    fn bridge_prefix(&self) -> &'static str {
        "podman"
    }

    fn prefix(&self) -> &str {
        &self.prefix
    }

    fn network(&mut self, name: &str, extra: &[&str]) -> String {
        World::network(self, name, extra)
    }

    fn container(&mut self, name: &str, args: &[&str]) -> String {
        self.run(name, args)
    }

    fn ip(&self, container: &str, network: &str) -> String {
        World::ip(self, container, network)
    }

    fn id(&self, container: &str) -> String {
        World::id(self, container)
    }

    fn cli(&self, args: &[&str]) -> Run {
        podman(args)
    }

    fn run_dxdp(&self, args: &[&str]) -> Run {
        World::dxdp(self, args)
    }

    fn pins(&self) -> &Dxdp {
        &self.dxdp
    }
}

fn quietly(args: &[&str]) {
    let mut argv = vec![PODMAN];
    argv.extend_from_slice(args);
    match try_run(&argv, Duration::from_secs(60)) {
        Ok(run) if run.success() => {}
        Ok(run) => eprintln!("cleanup: {run}"),
        Err(e) => eprintln!("cleanup: {e}"),
    }
}

/// Whether `count` pings `from -> ip` are all answered.
fn pings(from: &str, ip: &str, count: u32) -> bool {
    support::container_pings(podman, from, ip, count).is_ok()
}

#[track_caller]
fn ping_all(from: &str, ip: &str, count: u32) {
    assert!(
        pings(from, ip, count),
        "ping {from} -> {ip}: not all answered"
    );
}

/// [`scenarios::link_by_name_and_id_prefix_carries_iperf3_and_leaves_a_third_container_alone`]
/// on a netavark bridge (podmanN, not br-<id>).
#[test]
fn link_by_name_and_id_prefix_carries_iperf3_and_leaves_a_third_container_alone() {
    if !require_podman() {
        return;
    }
    let mut world = World::new();
    scenarios::link_by_name_and_id_prefix_carries_iperf3_and_leaves_a_third_container_alone(
        &mut world,
    );
}

/// netavark's `isolate` option closes paths between networks, never within one: a pair on an
/// isolated network links (Podman lets it talk, and netavark's ISOLATION chains are walked and
/// found not to match it), while [`scenarios::refuses_what_no_engine_can_link`] holds with the
/// isolated network as the shared one.
#[test]
fn isolated_networks_link_within_and_the_refusals_hold() {
    if !require_podman() {
        return;
    }
    let mut world = World::new();
    let iso = world.network("iso", &["-o", "isolate=true"]);
    let x = world.run("x", &["--network", &iso]);
    let y = world.run("y", &["--network", &iso]);
    let ip_y = world.ip(&y, &iso);
    assert!(pings(&x, &ip_y, 3), "Podman lets {x} reach {y} on {iso}");
    let rules = run_for(&["iptables-save", "-t", "filter"], Duration::from_secs(20));
    assert!(
        rules.stdout.contains("NETAVARK_ISOLATION_1"),
        "netavark made its isolation chains: {rules}"
    );
    scenarios::refuses_what_no_engine_can_link(&mut world, &x, &iso);

    world.dxdp(&["link", &x, &y]).assert_success();
    let before = link_between(&world.dxdp.status(), &x, &y)
        .expect("linked")
        .clone();
    ping_all(&x, &ip_y, 20);
    let status = world.dxdp.status();
    let link = link_between(&status, &x, &y).expect("linked");
    assert!(
        link.low_to_high.packets >= before.low_to_high.packets + 20
            && link.high_to_low.packets >= before.high_to_low.packets + 20,
        "the pings were redirected both ways: {link:?}"
    );
}

/// A rule in netavark's own NETAVARK_FORWARD chain that may drop the pair blocks the link, named
/// with the way out; netavark's ACCEPT for its subnet, which comes after it, does not save it.
#[test]
fn a_drop_in_netavarks_forward_chain_refuses_the_pair() {
    if !require_podman() {
        return;
    }
    let mut world = World::new();
    let net = world.network("fw", &[]);
    let a = world.run("a", &["--network", &net]);
    let b = world.run("b", &["--network", &net]);
    let (ip_a, ip_b) = (world.ip(&a, &net), world.ip(&b, &net));
    let (src, dst) = (format!("{ip_a}/32"), format!("{ip_b}/32"));
    let rule = FirewallRule::insert(
        "iptables",
        "NETAVARK_FORWARD",
        &["-s", &src, "-d", &dst, "-j", "DROP"],
    );
    let run = world.dxdp(&["link", &a, &b]);
    run.assert_failure();
    let rule_text = format!("-A NETAVARK_FORWARD -s {src} -d {dst} -j DROP");
    assert!(
        run.stderr.contains(&rule_text) && run.stderr.contains("--bypass-firewall"),
        "the refusal names netavark's chain, the rule and the way out: {run}"
    );
    world.dxdp.status().assert_empty();
    drop(rule);
    world.dxdp(&["link", &a, &b]).assert_success();
}

/// The IPv6 link-local address of a container's `eth0`, from /proc/net/if_inet6 (the image has
/// no `ip -6`): Podman gives one even on an IPv4-only network.
#[track_caller]
fn link_local(container: &str) -> String {
    let table = podman_ok(&["exec", container, "cat", "/proc/net/if_inet6"]);
    let hex = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() == 6 && f[5] == "eth0" && f[0].starts_with("fe80"))
        .map(|f| f[0].to_owned())
        .unwrap_or_else(|| panic!("{container} has no IPv6 link-local on eth0: {table}"));
    let groups: Vec<&str> = (0..8).map(|i| &hex[4 * i..4 * i + 4]).collect();
    let addr: std::net::Ipv6Addr = groups.join(":").parse().expect("an IPv6 address");
    addr.to_string()
}

/// Makes `container` know `peer`'s link-local address at `mac` without neighbour discovery
/// (whose multicast solicitations take the bridge, where the rules drop them), so that its
/// IPv6 frames to the peer are unicast to the linked MAC: those the link must leave alone.
#[track_caller]
fn pin_neighbour(container: &str, peer_ll: &str, mac: &str) {
    let pid = podman_ok(&["inspect", "-f", "{{.State.Pid}}", container]);
    must(&[
        "nsenter",
        "-t",
        &pid,
        "-n",
        "ip",
        "-6",
        "neigh",
        "replace",
        peer_ll,
        "dev",
        "eth0",
        "lladdr",
        mac,
        "nud",
        "permanent",
    ]);
}

/// Podman next to Docker 28 (issue 38, item 7): Podman gives its containers IPv6 link-local
/// addresses on an IPv4-only network, and Docker 28 sets ip6tables' `FORWARD` policy to `DROP`.
/// The pair is linked for IPv4, which Docker's and netavark's rules accept, and says so; IPv4
/// rides the link (its counters rise); IPv6 stays on the bridge, where the policy drops it as
/// before: a unicast IPv6 frame to the linked MAC is not redirected.
#[test]
fn a_pair_ip6tables_drops_is_linked_for_ipv4_only_and_ipv6_stays_on_the_bridge() {
    if !require_podman() {
        return;
    }
    let _policy = ChainPolicy::set("ip6tables", "FORWARD", "DROP");
    let mut world = World::new();
    let net = world.network("v4only", &[]);
    let a = world.run("a", &["--network", &net]);
    let b = world.run("b", &["--network", &net]);
    let (ll_a, ll_b) = (link_local(&a), link_local(&b));

    let run = world.dxdp(&["link", &a, &b]);
    run.assert_success();
    assert!(
        run.stdout
            .contains("(IPv4 only; IPv6 stays on the bridge: [ip6tables filter chain FORWARD"),
        "the link says which family stays on the bridge and why: {run}"
    );
    let status = world.dxdp.status();
    let link = link_between(&status, &a, &b).expect("linked").clone();
    assert_eq!(link.families, ["ipv4"], "{link:?}");
    let text = world.dxdp(&["status"]);
    text.assert_success();
    assert!(
        text.stdout.contains("FAMILIES") && text.stdout.contains("ipv4 "),
        "status shows the link's families: {text}"
    );

    ping_all(&a, &world.ip(&b, &net), 20);
    let status = world.dxdp.status();
    let after_v4 = link_between(&status, &a, &b).expect("linked").clone();
    assert!(
        after_v4.low_to_high.packets >= link.low_to_high.packets + 20
            && after_v4.high_to_low.packets >= link.high_to_low.packets + 20,
        "IPv4 rides the link both ways: {after_v4:?}"
    );

    let mac = |c: &str| {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{net}\").MacAddress}}}}");
        podman_ok(&["inspect", "-f", &format, c])
    };
    pin_neighbour(&a, &ll_b, &mac(&b));
    pin_neighbour(&b, &ll_a, &mac(&a));
    let ping6 = podman(&[
        "exec",
        &a,
        "ping",
        "-6",
        "-q",
        "-n",
        "-c",
        "5",
        "-i",
        "0.2",
        "-W",
        "1",
        &format!("{ll_b}%eth0"),
    ]);
    let status = world.dxdp.status();
    let after_v6 = link_between(&status, &a, &b).expect("still linked").clone();
    assert_eq!(
        (after_v6.low_to_high, after_v6.high_to_low),
        (after_v4.low_to_high, after_v4.high_to_low),
        "no IPv6 frame was redirected: {ping6}"
    );
    let nf6 = std::fs::read_to_string("/proc/sys/net/bridge/bridge-nf-call-ip6tables");
    if nf6.is_ok_and(|v| v.trim() == "1") {
        assert!(
            !ping6.stdout.contains(" 0% packet loss"),
            "the bridge drops IPv6 between them as before: {ping6}"
        );
    }

    let doctor = world.dxdp(&["doctor"]);
    assert!(
        doctor
            .stdout
            .contains("carries IPv4 only; IPv6 stays on the bridge, where [ip6tables"),
        "doctor names the rule keeping IPv6 on the bridge: {doctor}"
    );
}

/// `dxdp watch` on Podman, driven by Podman's events (the resync is left at 60 s, beyond every
/// wait here): a labeled pair started after the watch is linked; a restarted container comes
/// back on a new veth and the link follows it; a stopped one is unlinked.
#[test]
fn watch_links_a_labeled_pair_follows_a_restart_and_unlinks_on_stop() {
    if !require_podman() {
        return;
    }
    let mut world = World::new();
    let net = world.network("watch", &[]);
    let watch = world.watch(&["--resync", "60"]);
    thread::sleep(Duration::from_secs(2));
    let group = format!("dxdp.group={}-pair", world.prefix);
    let labels = ["--network", &net, "-l", "dxdp.enable=true", "-l", &group];
    let a = world.run("a", &labels);
    let b = world.run("b", &labels);
    let linked = |world: &World| link_between(&world.dxdp.status(), &a, &b).cloned();
    let within = Duration::from_secs(15);
    let ok = support::wait_until(within, || linked(&world).is_some());
    assert!(ok, "pair not linked\n--- watch log\n{}", watch.log_text());
    let first = linked(&world).expect("linked");

    podman_ok(&["restart", "-t", "0", &b]);
    let ip_b = world.ip(&b, &net);
    let veths = |l: &support::LinkStatus| (l.low_ifindex, l.high_ifindex);
    let ok = support::wait_until(within, || {
        linked(&world).is_some_and(|l| veths(&l) != veths(&first))
    });
    assert!(
        ok,
        "the link did not follow {b}'s new veth: {:?} (before: {first:?})\n--- watch log\n{}",
        linked(&world),
        watch.log_text()
    );
    let before = linked(&world).expect("linked");
    ping_all(&a, &ip_b, 20);
    let after = linked(&world).expect("linked");
    assert!(
        after.low_to_high.packets >= before.low_to_high.packets + 20
            && after.high_to_low.packets >= before.high_to_low.packets + 20,
        "the restarted pair's pings were redirected: {after:?}"
    );

    podman_ok(&["stop", "-t", "0", &a]);
    let ok = support::wait_until(within, || linked(&world).is_none());
    assert!(
        ok,
        "not unlinked on stop\n--- watch log\n{}",
        watch.log_text()
    );
}

/// A rootless Podman API service of the test's own: `podman system service` run as nobody
/// (no subuid range: Podman falls back to a single mapping, enough to answer the API) with its
/// storage and runtime directory in a temporary directory. On drop: the service, the pause
/// process rootless Podman leaves behind, the directory.
struct RootlessPodman {
    dir: std::path::PathBuf,
    host: String,
    service: Option<Background>,
}

impl RootlessPodman {
    #[track_caller]
    fn start() -> Self {
        let dir =
            std::env::temp_dir().join(format!("dxp-rootless-{}-{}", std::process::id(), next_id()));
        std::fs::create_dir_all(&dir).expect("rootless dir");
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).expect("chown to nobody");
        let d = dir.to_string_lossy().into_owned();
        let socket = format!("{d}/podman.sock");
        let env = [
            format!("HOME={d}"),
            format!("XDG_RUNTIME_DIR={d}"),
            format!("XDG_CONFIG_HOME={d}/config"),
            format!("XDG_DATA_HOME={d}/data"),
        ];
        let url = format!("unix://{socket}");
        let mut argv = vec![
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "env",
            "-i",
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
        ];
        argv.extend(env.iter().map(String::as_str));
        argv.extend_from_slice(&[PODMAN, "system", "service", "--time=0", &url]);
        let me = Self {
            dir,
            host: url.clone(),
            service: Some(Background::spawn(&argv)),
        };
        let up = support::wait_until(Duration::from_secs(30), || {
            try_run(
                &[
                    "curl",
                    "-sf",
                    "--unix-socket",
                    &socket,
                    "http://podman/_ping",
                ],
                Duration::from_secs(5),
            )
            .is_ok_and(|r| r.success())
        });
        assert!(up, "the rootless Podman service did not answer on {socket}");
        me
    }
}

impl Drop for RootlessPodman {
    fn drop(&mut self) {
        drop(self.service.take());
        let pause = self.dir.join("libpod/tmp/pause.pid");
        if let Some(pid) = std::fs::read_to_string(&pause)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            // SAFETY: kill(2) on the pause process this test's rootless Podman started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("cleanup: {}: {e}", self.dir.display());
        }
    }
}

/// Rootless Podman's containers have no host-side veth (pasta/slirp4netns or a bridge in the
/// user's namespace): dxdp refuses it at connect, in one line that names the way out. Podman
/// 4.3.1's compat `/info` does not say it runs rootless; libpod's does.
#[test]
fn rootless_podman_is_refused_with_the_way_out() {
    if !require_podman() {
        return;
    }
    let world = World::new();
    let rootless = RootlessPodman::start();
    let dir = world.dxdp.pin_dir.to_string_lossy().into_owned();
    let host = format!("DOCKER_HOST={}", rootless.host);
    let run = run_for(
        &["env", &host, DXDP, "--pin-dir", &dir, "link", "web", "db"],
        Duration::from_secs(60),
    );
    run.assert_failure();
    assert_eq!(run.code(), Some(1), "{run}");
    assert!(
        run.stderr.contains("Podman runs rootless")
            && run.stderr.contains("no host-side veth")
            && run
                .stderr
                .contains("DOCKER_HOST=unix:///run/podman/podman.sock"),
        "the refusal says why and names the way out: {run}"
    );
    assert_eq!(run.stderr.trim().lines().count(), 1, "one line: {run}");

    // doctor recognises the case: a failed check, not "dockerd not reachable".
    let doctor = run_for(
        &["env", &host, DXDP, "--pin-dir", &dir, "doctor"],
        Duration::from_secs(60),
    );
    let line = doctor
        .stdout
        .lines()
        .find(|l| l.contains("runs rootless"))
        .unwrap_or_else(|| panic!("doctor names the rootless engine: {doctor}"));
    assert!(line.contains("FAIL"), "a failed check: {doctor}");
}

/// The containers of a pod share one netns, the infra container's: a member is refused (its
/// network mode is `container:<infra>`), and the pod links as one endpoint through its infra
/// container, by ID prefix; the members' traffic to the peer then goes over that link.
#[test]
fn a_pod_is_one_endpoint_through_its_infra_container() {
    if !require_podman() {
        return;
    }
    let mut world = World::new();
    let net = world.network("pod", &[]);
    let pod = world.pod("p", &["--network", &net]);
    let m1 = world.run("m1", &["--pod", &pod]);
    let m2 = world.run("m2", &["--pod", &pod]);
    let solo = world.run("solo", &["--network", &net]);
    let infra_id = podman_ok(&["pod", "inspect", "-f", "{{.InfraContainerID}}", &pod]);
    let infra = podman_ok(&["inspect", "-f", "{{.Name}}", &infra_id]);
    let ip_solo = world.ip(&solo, &net);

    let way_out = format!("link container {} instead", &infra_id[..12]);
    for (p, q) in [(&m1, &solo), (&m1, &m2)] {
        let run = world.dxdp(&["link", p, q]);
        run.assert_failure();
        assert!(
            run.stderr.contains("uses network mode container:") && run.stderr.contains(&way_out),
            "a pod member is refused, naming the infra container to link: {run}"
        );
    }
    world.dxdp.status().assert_empty();

    world
        .dxdp(&["link", &infra_id[..12], &solo])
        .assert_success();
    let before = link_between(&world.dxdp.status(), &infra, &solo)
        .expect("the pod's infra container is linked")
        .clone();
    ping_all(&m2, &ip_solo, 20);
    ping_all(&m1, &ip_solo, 20);
    let status = world.dxdp.status();
    let link = link_between(&status, &infra, &solo).expect("linked");
    assert!(
        link.low_to_high.packets >= before.low_to_high.packets + 40
            && link.high_to_low.packets >= before.high_to_low.packets + 40,
        "both members' pings went over the pod's link: {link:?}"
    );
}

/// podman-compose 1.0.3 sets `com.docker.compose.project/service` (and `io.podman.compose.*`),
/// so `link` by service name and a `dxdp.group` of services work as with Compose v2; the
/// unlabeled service is left alone. (podman-compose 1.0.3 ignores the network's `ipam` subnet:
/// the network comes from Podman's pool, 10.89.x.0/24.)
#[test]
fn podman_compose_services_link_by_name_and_by_group() {
    if !require_podman() {
        return;
    }
    let mut world = World::new();
    let project = world.prefix.replace('-', "");
    let dir = std::env::temp_dir().join(format!("{}-compose", world.prefix));
    std::fs::create_dir_all(&dir).expect("compose dir");
    let file = dir.join("compose.yml");
    let group = format!("{project}-backend");
    std::fs::write(
        &file,
        format!(
            "services:\n\
             \x20 web:\n    image: {IMAGE}\n    networks: [app]\n    labels: {{ dxdp.enable: \"true\", dxdp.group: {group} }}\n\
             \x20 store:\n    image: {IMAGE}\n    networks: [app]\n    labels: {{ dxdp.enable: \"true\", dxdp.group: {group} }}\n\
             \x20 other:\n    image: {IMAGE}\n    networks: [app]\n\
             networks:\n  app: {{}}\n"
        ),
    )
    .expect("compose file");
    let (web, db, other) = (
        format!("{project}_web_1"),
        format!("{project}_store_1"),
        format!("{project}_other_1"),
    );
    let net = format!("{project}_app");
    // Removed by the world on drop whatever podman-compose managed to do.
    world
        .containers
        .extend([web.clone(), db.clone(), other.clone()]);
    world.networks.push(net.clone());
    let f = file.to_string_lossy().into_owned();
    let up = run_for(
        &["podman-compose", "-f", &f, "-p", &project, "up", "-d"],
        Duration::from_secs(120),
    );
    let _ = std::fs::remove_dir_all(&dir);
    up.assert_success();

    let run = world.dxdp(&["link", "web", "store"]);
    run.assert_success();
    assert!(
        run.stdout.contains(&web) && run.stdout.contains(&db) && run.stdout.contains(&net),
        "services resolved to their containers: {run}"
    );
    world.dxdp(&["unlink", "store", "web"]).assert_success();
    world.dxdp.status().assert_empty();

    world.dxdp(&["watch", "--once"]).assert_success();
    let status = world.dxdp.status();
    let link = link_between(&status, &web, &db).expect("the group's pair is linked");
    assert_eq!(link.origin, "watch");
    assert!(
        !status
            .links
            .iter()
            .any(|l| l.low_name == other || l.high_name == other),
        "the unlabeled service is not linked: {status:?}"
    );
    let before = link.clone();
    ping_all(&web, &world.ip(&db, &net), 20);
    let status = world.dxdp.status();
    let link = link_between(&status, &web, &db).expect("linked");
    assert!(
        link.low_to_high.packets >= before.low_to_high.packets + 20
            && link.high_to_low.packets >= before.high_to_low.packets + 20,
        "the pings were redirected: {link:?}"
    );
}

/// `dxdp bench` on a Podman pair by container names: a quick bridge-vs-tc run measures both
/// configurations and puts the pair back unlinked.
#[test]
fn bench_runs_on_a_podman_pair_and_leaves_it_unlinked() {
    if !require_podman() {
        return;
    }
    let mut world = World::new();
    let net = world.network("bench", &[]);
    let a = world.run("a", &["--network", &net]);
    let b = world.run("b", &["--network", &net]);
    let run = world.dxdp(&["bench", &a, &b, "--quick", "--only", "bridge,tc"]);
    run.assert_success();
    let rows: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| !l.contains(" vs "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| ["bridge", "tc", "xdp", "loopback"].contains(w))
        .collect();
    assert_eq!(rows, ["bridge", "tc"], "one row per configuration: {run}");
    world.dxdp.status().assert_empty();
}
