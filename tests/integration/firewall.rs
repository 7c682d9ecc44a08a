//! Never open a path the firewall closes: real dockerd, real iptables/nftables rules, real ufw.
//! An operator's rule that could drop a pair's traffic on the bridge keeps the pair unlinked
//! (and still drops), the explicit opt-ins link it, a rule for other addresses blocks nothing,
//! and a rule added under a running watch takes the watch's link away within a second (nf_tables
//! announces every change), not at its resync.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::support::{
    FORGE, FirewallRule, World, docker, must, quietly, require_docker, wait_until,
};

/// How many UDP datagrams with a forged source each check sends.
const FORGED: u32 = 200;

/// Whether `from` reaches `ip` (3 pings, 1 s each at most).
fn pings(from: &str, ip: &str) -> bool {
    docker(&[
        "exec", from, "ping", "-q", "-n", "-c", "3", "-i", "0.2", "-W", "1", ip,
    ])
    .success()
}

fn linked(world: &World) -> usize {
    if !world.dxdp.pin_dir.exists() {
        return 0;
    }
    world.dxdp.status().links.len()
}

/// An nftables table of the test's own, deleted on drop.
struct NftTable {
    family: &'static str,
    name: String,
}

impl NftTable {
    /// `table FAMILY dxdp_test_<pid> { chain forward { type filter hook forward priority 0;
    /// RULE } }`
    #[track_caller]
    fn forward_rule(family: &'static str, rule: &str) -> Self {
        let name = format!("dxdp_test_{}", std::process::id());
        must(&["nft", "add", "table", family, &name]);
        let table = Self { family, name };
        let hook = "{ type filter hook forward priority 0; policy accept; }";
        must(&["nft", "add", "chain", family, &table.name, "forward", hook]);
        let mut argv = vec!["nft", "add", "rule", family, &table.name, "forward"];
        argv.extend(rule.split_whitespace());
        must(&argv);
        table
    }
}

impl Drop for NftTable {
    fn drop(&mut self) {
        quietly(&["nft", "delete", "table", self.family, &self.name]);
    }
}

#[test]
fn a_docker_user_drop_keeps_the_pair_on_the_bridge_and_only_the_flag_links_it() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("fw", &[]);
    let a = world.run("a", &["--network", &net], &[]);
    let b = world.run("b", &["--network", &net], &[]);
    let c = world.run("c", &["--network", &net], &[]);
    let (ip_a, ip_b) = (world.ip(&a, &net), world.ip(&b, &net));
    assert!(pings(&a, &ip_b), "{a} cannot reach {b} before any rule");

    let src = format!("{ip_a}/32");
    let dst = format!("{ip_b}/32");
    let _rule = FirewallRule::insert(
        "iptables",
        "DOCKER-USER",
        &["-s", &src, "-d", &dst, "-j", "DROP"],
    );
    let run = world.dxdp.run(&["link", &a, &b]);
    run.assert_failure();
    let rule_text = format!("-A DOCKER-USER -s {src} -d {dst} -j DROP");
    assert!(
        run.stderr.contains(&rule_text)
            && run.stderr.contains("DOCKER-USER")
            && run.stderr.contains("--bypass-firewall"),
        "the refusal names the rule and the way out: {run}"
    );
    assert_eq!(run.stderr.trim().lines().count(), 1, "one line: {run}");
    assert!(
        !world.dxdp.pin_dir.exists(),
        "a refused link made nothing, not even the pin directory"
    );
    assert!(
        !pings(&a, &ip_b),
        "the operator's DROP still drops on the bridge"
    );

    // The rule names a and b only: a and c link.
    world.dxdp.run(&["link", &a, &c]).assert_success();
    assert_eq!(linked(&world), 1);

    // The explicit opt-in links a and b, and then the link carries what the rule drops.
    world
        .dxdp
        .run(&["link", "--bypass-firewall", &a, &b])
        .assert_success();
    assert_eq!(linked(&world), 2);
    assert!(pings(&a, &ip_b), "--bypass-firewall links past the rule");
}

#[test]
fn an_nftables_rule_blocks_like_an_iptables_one() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("nft", &[]);
    let a = world.run("a", &["--network", &net], &[]);
    let b = world.run("b", &["--network", &net], &[]);
    let (ip_a, ip_b) = (world.ip(&a, &net), world.ip(&b, &net));
    let table = NftTable::forward_rule(
        "inet",
        &format!("ip saddr {ip_b} ip daddr {ip_a} tcp dport 6379 drop"),
    );
    let run = world.dxdp.run(&["link", &a, &b]);
    run.assert_failure();
    let rule_text = format!("ip saddr {ip_b} ip daddr {ip_a} tcp dport 6379 drop");
    assert!(
        run.stderr
            .contains(&format!("nftables inet {} chain forward", table.name))
            && run.stderr.contains(&rule_text),
        "the refusal names the nft rule: {run}"
    );
    drop(table);
    world.dxdp.run(&["link", &a, &b]).assert_success();
    assert_eq!(linked(&world), 1);
}

#[test]
fn the_watch_leaves_covered_pairs_on_the_bridge_and_removes_a_link_a_new_rule_covers() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("watch", &[]);
    let group = [
        "--network",
        &net,
        "-l",
        "dxdp.enable=true",
        "-l",
        "dxdp.group=fw",
    ];
    let bypass = [&group[..], &["-l", "dxdp.firewall=bypass"]].concat();
    let a = world.run("a", &group, &[]);
    let b = world.run("b", &group, &[]);
    let (ip_a, ip_b) = (world.ip(&a, &net), world.ip(&b, &net));
    // Long enough that only the kernel's notice can explain a change within seconds.
    let resync = 300;
    let soon = Duration::from_secs(2);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let watch = world.watch(&["--resync", &resync.to_string(), "--metrics", &addr]);
    watch.expect_links(1, Duration::from_secs(10));
    let refused_pairs = || {
        use std::io::{Read, Write};
        let mut body = String::new();
        if let Ok(mut conn) = std::net::TcpStream::connect(&addr) {
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: dxdp\r\n\r\n");
            let _ = conn.read_to_string(&mut body);
        }
        body.lines()
            .find_map(|l| l.strip_prefix("dxdp_firewall_refused_pairs "))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    assert_eq!(refused_pairs(), Some(0));

    // A rule appears: the watch takes the link away within a second or so, naming the rule.
    let src = format!("{ip_a}/32");
    let rule = FirewallRule::insert("iptables", "DOCKER-USER", &["-s", &src, "-j", "REJECT"]);
    let added = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || linked(&world) == 0),
        "the link is still there 10 s after a rule covered it; watch log:\n{}",
        watch.log_text()
    );
    let took = added.elapsed();
    assert!(
        took <= soon,
        "removed after {took:?}: the watch should act on nf_tables' notice, not its resync"
    );
    eprintln!("link removed {took:?} after the rule");
    let log = watch.log_text();
    assert!(
        log.contains("removed a link")
            && log.contains(&format!("-A DOCKER-USER -s {src} -j REJECT")),
        "the watch says which rule took the link: {log}"
    );
    assert!(
        !pings(&a, &ip_b),
        "the REJECT applies again: the pair is on the bridge"
    );

    // The rule goes: the link comes back, as soon.
    drop(rule);
    watch.expect_links(1, soon);

    // Both containers opting in link past a rule; one alone does not.
    let c = world.run("c", &bypass, &[]);
    let d = world.run("d", &bypass, &[]);
    let (ip_c, ip_d) = (world.ip(&c, &net), world.ip(&d, &net));
    let c_src = format!("{ip_c}/32");
    let _c_rule = FirewallRule::insert("iptables", "DOCKER-USER", &["-s", &c_src, "-j", "DROP"]);
    // Group of four: a-b, a-c, a-d, b-c, b-d, c-d; c's rule covers every pair with c except c-d
    // (both opted in).
    watch.expect_links(4, Duration::from_secs(10));
    let status = world.dxdp.status();
    let names: Vec<(String, String)> = status
        .links
        .iter()
        .map(|l| (l.low_name.clone(), l.high_name.clone()))
        .collect();
    let has = |x: &str, y: &str| {
        names
            .iter()
            .any(|(l, h)| (l == x && h == y) || (l == y && h == x))
    };
    assert!(
        has(&c, &d) && has(&a, &b) && has(&a, &d) && has(&b, &d),
        "links: {names:?}"
    );
    assert!(pings(&c, &ip_d), "c and d opted in: linked past c's DROP");
    assert!(
        !pings(&c, &ip_b),
        "b did not opt in: c's DROP holds for c -> b"
    );
}

/// ufw, enabled for the test if it was not, and disabled again on drop with the policies of the
/// filter table's built-in chains put back as they were, in iptables and ip6tables.
///
/// `ufw disable` does not undo `ufw enable`: it sets INPUT, FORWARD and OUTPUT to ACCEPT in both
/// (ufw-init's stop), whatever they were before. On a host where Engine 28 had set FORWARD to
/// DROP, that left every bridge forwarding everything after the suite.
///
/// Nor does it undo the kernel switches `ufw enable` sets from its `IPT_SYSCTL` file
/// (`/etc/ufw/sysctl.conf`: ICMP redirects off, broadcast echo ignored, …): those are put back
/// as found too, so the suite leaves the host's sysctls as it found them.
struct Ufw {
    /// (tool, chain, policy) as found, for a ufw this guard enabled.
    policies: Vec<(&'static str, &'static str, String)>,
    /// (sysctl path under /proc/sys, value) as found, of every switch ufw's file sets.
    sysctls: Vec<(String, String)>,
}

/// ufw's sysctl file, as `/etc/default/ufw` names it (`IPT_SYSCTL`).
const UFW_SYSCTLS: &str = "/etc/ufw/sysctl.conf";

/// The current value of each switch `file` sets (`net/ipv4/…=VALUE` lines), by its path under
/// /proc/sys; switches this kernel lacks are left out.
fn sysctls_set_by(file: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .filter_map(|(key, _)| {
            let path = format!("/proc/sys/{}", key.trim().replace('.', "/"));
            let value = std::fs::read_to_string(&path).ok()?;
            Some((path, value.trim().to_owned()))
        })
        .collect()
}

impl Ufw {
    #[track_caller]
    fn enable() -> Self {
        let status = must(&["ufw", "status"]);
        if status.contains("Status: active") {
            return Self {
                policies: Vec::new(),
                sysctls: Vec::new(),
            };
        }
        let mut policies = Vec::new();
        for tool in ["iptables", "ip6tables"] {
            for chain in ["INPUT", "FORWARD", "OUTPUT"] {
                policies.push((tool, chain, policy(tool, chain)));
            }
        }
        // The guard exists before ufw runs: an enable that fails half way is undone too.
        let guard = Self {
            policies,
            sysctls: sysctls_set_by(UFW_SYSCTLS),
        };
        must(&["ufw", "--force", "enable"]);
        guard
    }
}

/// The policy of a built-in chain of the filter table (`ACCEPT`, `DROP`), from `TOOL -S CHAIN`,
/// whose first line is `-P CHAIN POLICY`.
#[track_caller]
fn policy(tool: &str, chain: &str) -> String {
    let rules = must(&[tool, "-w", "-t", "filter", "-S", chain]);
    let first = rules.lines().next().unwrap_or_default();
    match first.split_whitespace().collect::<Vec<_>>()[..] {
        ["-P", c, policy] if c == chain => policy.to_owned(),
        _ => panic!("`{tool} -S {chain}` does not start with its policy: {rules}"),
    }
}

impl Drop for Ufw {
    fn drop(&mut self) {
        if self.policies.is_empty() {
            return;
        }
        quietly(&["ufw", "--force", "disable"]);
        for (tool, chain, policy) in &self.policies {
            quietly(&[tool, "-w", "-t", "filter", "-P", chain, policy.as_str()]);
        }
        for (path, value) in &self.sysctls {
            if let Err(e) = std::fs::write(path, value) {
                eprintln!("cannot put {path} back to {value}: {e}");
            }
        }
    }
}

#[test]
fn a_stock_ufw_next_to_docker_blocks_nothing() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("ufw", &[]);
    let a = world.run("a", &["--network", &net], &[]);
    let b = world.run("b", &["--network", &net], &[]);
    let ip_b = world.ip(&b, &net);
    let _ufw = Ufw::enable();
    // ufw's FORWARD chains come after Docker's accept for the bridge: they never see the pair.
    let run = world.dxdp.run(&["link", &a, &b]);
    run.assert_success();
    assert!(pings(&a, &ip_b));
    let doctor = world.dxdp.run(&["doctor"]);
    assert!(
        doctor
            .stdout
            .contains(&format!("no rule keeps containers on network {net}")),
        "doctor finds nothing blocking on {net}: {doctor}"
    );
}

/// How many of [`FORGED`] UDP datagrams that `from` puts on its eth0 with source `src_ip` (its
/// own MAC, `to`'s MAC) reach a socket in `to` listening on `dst_ip`.
fn arrivals(world: &World, from: &str, to: &str, net: &str, src_ip: &str, dst_ip: &str) -> u32 {
    let port = "9999";
    let pid_to = world.pid(to).to_string();
    let mut receiver = Command::new("nsenter")
        .args(["-t", &pid_to, "-n", "python3", FORGE, "receive", port, "1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("cannot start the receiver");
    let mut out = BufReader::new(receiver.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the receiver's first line");
    assert_eq!(line.trim(), "ready", "the receiver did not bind");
    let pid_from = world.pid(from).to_string();
    let (mac_from, mac_to) = (world.mac(from, net), world.mac(to, net));
    let count = FORGED.to_string();
    must(&[
        "nsenter", "-t", &pid_from, "-n", "python3", FORGE, "send", "eth0", &mac_to, &mac_from,
        src_ip, dst_ip, port, &count,
    ]);
    line.clear();
    out.read_line(&mut line).expect("the receiver's count");
    receiver
        .wait()
        .expect("the receiver ends by itself within 10 s");
    line.trim()
        .parse()
        .unwrap_or_else(|_| panic!("the receiver printed {line:?}"))
}

/// A's frames with its own MAC but C's source address, to B: over a link they meet the
/// operator's rule about C exactly as on the bridge, over tc and xdp, and are counted as
/// spoofed; A's own address still rides the link (issue 22).
fn forged_sources_meet_the_rule(world: &mut World, net: &str, ipv6: bool) {
    let a = world.run("a", &["--network", net], &[]);
    let b = world.run("b", &["--network", net], &[]);
    let c = world.run("c", &["--network", net], &[]);
    let ip = |w: &World, x: &str| if ipv6 { w.ip6(x, net) } else { w.ip(x, net) };
    let (ip_a, ip_b, ip_c) = (ip(world, &a), ip(world, &b), ip(world, &c));
    let (tool, host) = if ipv6 {
        ("ip6tables", "/128")
    } else {
        ("iptables", "/32")
    };
    let (src, dst) = (format!("{ip_c}{host}"), format!("{ip_b}{host}"));
    let _rule = FirewallRule::insert(tool, "DOCKER-USER", &["-s", &src, "-d", &dst, "-j", "DROP"]);
    let family = if ipv6 { "IPv6" } else { "IPv4" };
    assert_eq!(
        arrivals(world, &a, &b, net, &ip_a, &ip_b),
        FORGED,
        "{family}: A's own datagrams must all reach B over the bridge (the sender works)"
    );
    assert_eq!(
        arrivals(world, &a, &b, net, &ip_c, &ip_b),
        0,
        "{family}: on the bridge the rule about C drops A's datagrams forged from C"
    );
    let (_, veth_a) = world.veth(&a, net);
    for datapath in ["tc", "xdp"] {
        let at = format!("{family} over {datapath}");
        world
            .dxdp
            .run(&["link", "--datapath", datapath, &a, &b])
            .assert_success();
        let before = world.dxdp.status().counters(veth_a);
        assert_eq!(
            arrivals(world, &a, &b, net, &ip_c, &ip_b),
            0,
            "{at}: a forged source rode the link past `{tool} -A DOCKER-USER -s {src} -d {dst} \
             -j DROP`"
        );
        let forged = world.dxdp.status().counters(veth_a).since(&before);
        assert!(
            forged.spoofed_packets >= u64::from(FORGED) && forged.redirected_packets == 0,
            "{at}: the forged datagrams must be counted as spoofed and not redirected: {forged:?}"
        );
        let before = world.dxdp.status().counters(veth_a);
        assert_eq!(
            arrivals(world, &a, &b, net, &ip_a, &ip_b),
            FORGED,
            "{at}: A's own"
        );
        let own = world.dxdp.status().counters(veth_a).since(&before);
        assert!(
            own.redirected_packets >= u64::from(FORGED),
            "{at}: A's own datagrams must ride the link: {own:?}"
        );
        world.dxdp.run(&["unlink", &a, &b]).assert_success();
    }
}

#[test]
fn a_forged_ipv4_source_meets_the_rule_about_it_over_a_link_as_on_the_bridge() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("forge", &[]);
    forged_sources_meet_the_rule(&mut world, &net, false);
}

/// Engine 28: DOCKER-USER in ip6tables.
#[test]
fn engine28_a_forged_ipv6_source_meets_the_rule_about_it_over_a_link_as_on_the_bridge() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network_v6("forge6", true, &[]);
    forged_sources_meet_the_rule(&mut world, &net, true);
}

/// Runs `ip ARGS` inside a container's network namespace (the image need not have `ip`).
#[track_caller]
fn ip_in(world: &World, container: &str, args: &[&str]) {
    let pid = world.pid(container).to_string();
    let mut argv = vec!["nsenter", "-t", &pid, "-n", "ip"];
    argv.extend_from_slice(args);
    must(&argv);
}

/// Gives a container's eth0 another MAC (veth takes a new address only while down).
#[track_caller]
fn set_mac(world: &World, container: &str, mac: &str) {
    ip_in(world, container, &["link", "set", "eth0", "down"]);
    ip_in(world, container, &["link", "set", "eth0", "address", mac]);
    ip_in(world, container, &["link", "set", "eth0", "up"]);
}

/// Packets the link between the veths `from` and `to` redirected from `from` to `to`.
fn redirected(world: &World, from: u32, to: u32) -> u64 {
    let status = world.dxdp.status();
    let Some(link) = status
        .links
        .iter()
        .find(|l| (l.low_ifindex, l.high_ifindex) == (from.min(to), from.max(to)))
    else {
        return 0;
    };
    if from < to {
        link.low_to_high.packets
    } else {
        link.high_to_low.packets
    }
}

/// Issue 22, 1b: A and B linked, B takes another MAC behind Docker's back and C (not linked)
/// takes B's old one. A's frames to C's address at that MAC reach C, never B, and the watch
/// drops the link within a second or two (B is no longer the interface Docker names), not at
/// its resync (300 s here).
#[test]
fn a_mac_taken_over_by_another_container_carries_nothing_into_the_linked_one() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("takeover", &[]);
    let group = [
        "--network",
        &net,
        "-l",
        "dxdp.enable=true",
        "-l",
        "dxdp.group=mv",
    ];
    let a = world.run("a", &group, &[]);
    let b = world.run("b", &group, &[]);
    let c = world.run("c", &["--network", &net], &[]);
    let (ip_b, ip_c) = (world.ip(&b, &net), world.ip(&c, &net));
    let (_, veth_a) = world.veth(&a, &net);
    let (_, veth_b) = world.veth(&b, &net);
    let old_b = world.mac(&b, &net);
    let watch = world.watch(&["--resync", "300"]);
    watch.expect_links(1, Duration::from_secs(10));
    assert!(pings(&a, &ip_b), "the link carries A -> B");
    assert!(
        redirected(&world, veth_a, veth_b) > 0,
        "A's pings to B were redirected"
    );

    let new_b = format!(
        "02:dd:{:02x}:{:02x}:00:0b",
        std::process::id() & 0xff,
        veth_b & 0xff
    );
    let changed = Instant::now();
    set_mac(&world, &b, &new_b);
    set_mac(&world, &c, &old_b);
    // A believes what is now true: C's address is at B's old MAC.
    let neigh = [
        "neigh",
        "replace",
        &ip_c,
        "lladdr",
        &old_b,
        "dev",
        "eth0",
        "nud",
        "permanent",
    ];
    ip_in(&world, &a, &neigh);
    let to_b = redirected(&world, veth_a, veth_b);
    assert!(
        pings(&a, &ip_c),
        "A's frames to C at B's old MAC reach C; watch log:\n{}",
        watch.log_text()
    );
    assert!(
        redirected(&world, veth_a, veth_b) <= to_b,
        "none of A's frames to C went into B"
    );

    // C sent from B's old MAC: the bridge announced it, and the watch read B again.
    let gone = wait_until(Duration::from_secs(5), || linked(&world) == 0);
    let took = changed.elapsed();
    assert!(
        gone,
        "the link to B outlived B's MAC by 5 s; watch log:\n{}",
        watch.log_text()
    );
    assert!(
        took <= Duration::from_secs(3),
        "the link went {took:?} after the change: that is not the bridge's notice"
    );
    let log = watch.log_text();
    assert!(
        log.contains("a bridge learned a MAC that changes linked containers"),
        "the watch says why it read B again: {log}"
    );
    eprintln!("link to B removed {took:?} after B's MAC changed");
    assert!(pings(&a, &ip_b), "A still reaches B, over the bridge");
}

/// Issue 22, 2: a link made by hand is held to the rules that come after it. Without a watch,
/// `doctor` fails it, naming the rule and the fix; a watch (resync 300 s) removes it within a
/// second or two, naming the rule. A link made with --bypass-firewall stays past its rule.
#[test]
fn a_rule_added_after_a_hand_made_link_takes_it_away_unless_it_was_made_to_bypass() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("byhand", &[]);
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|n| world.run(n, &["--network", &net], &[]));
    let (ip_a, ip_b) = (world.ip(&a, &net), world.ip(&b, &net));
    let (ip_c, ip_d) = (world.ip(&c, &net), world.ip(&d, &net));
    world.dxdp.run(&["link", &a, &b]).assert_success();
    world
        .dxdp
        .run(&["link", "--bypass-firewall", &c, &d])
        .assert_success();
    assert_eq!(linked(&world), 2);

    let (src_a, src_c) = (format!("{ip_a}/32"), format!("{ip_c}/32"));
    let _rule_a = FirewallRule::insert("iptables", "DOCKER-USER", &["-s", &src_a, "-j", "REJECT"]);
    let _rule_c = FirewallRule::insert("iptables", "DOCKER-USER", &["-s", &src_c, "-j", "REJECT"]);
    let rule_a = format!("-A DOCKER-USER -s {src_a} -j REJECT");

    // No watch: nothing takes the link away, and doctor says so.
    let doctor = world.dxdp.run(&["doctor"]);
    assert_eq!(
        doctor.code(),
        Some(1),
        "doctor fails a covered link: {doctor}"
    );
    let covered: Vec<&str> = doctor
        .stdout
        .lines()
        .filter(|l| l.contains("bypasses a rule that came after it"))
        .collect();
    assert_eq!(
        covered.len(),
        1,
        "only a - b is covered and not bypassed: {doctor}"
    );
    assert!(
        covered[0].starts_with("[FAIL]") && covered[0].contains(&rule_a) && covered[0].contains(&a),
        "{doctor}"
    );
    assert!(
        doctor.stdout.contains(&format!("fix: dxdp unlink {a} {b}"))
            || doctor.stdout.contains(&format!("fix: dxdp unlink {b} {a}")),
        "{doctor}"
    );
    // Issue 21: the network's MTU, once, as information.
    let mtu_lines: Vec<&str> = doctor
        .stdout
        .lines()
        .filter(|l| l.contains(&format!("network {net}: ")))
        .collect();
    assert_eq!(mtu_lines.len(), 1, "{doctor}");
    assert!(
        mtu_lines[0].starts_with("[ ok ] ")
            && mtu_lines[0].contains("2 link(s) at MTU 1500: bulk TCP")
            && mtu_lines[0].contains("com.docker.network.driver.mtu"),
        "{doctor}"
    );
    assert_eq!(linked(&world), 2);

    let started = Instant::now();
    let watch = world.watch(&["--resync", "300"]);
    watch.expect_links(1, Duration::from_secs(5));
    eprintln!(
        "hand-made link removed {:?} after the watch started",
        started.elapsed()
    );
    let status = world.dxdp.status();
    let kept = &status.links[0];
    assert!(
        kept.bypasses_firewall
            && [&kept.low_name, &kept.high_name]
                .iter()
                .all(|n| **n == c || **n == d),
        "the bypassed link stays: {status:?}"
    );
    let log = watch.log_text();
    assert!(
        log.contains("removed a link made by hand") && log.contains(&rule_a),
        "the watch names the rule: {log}"
    );
    assert!(!pings(&a, &ip_b), "the REJECT applies to a -> b again");
    assert!(
        pings(&c, &ip_d),
        "c -> d still rides its link past c's rule"
    );

    // A rule that comes while the watch runs is acted on as soon.
    world
        .dxdp
        .run(&["link", "--bypass-firewall", &a, &b])
        .assert_success();
    world.dxdp.run(&["link", &b, &d]).assert_success();
    assert_eq!(linked(&world), 3);
    let src_d = format!("{ip_d}/32");
    let added = Instant::now();
    let _rule_d = FirewallRule::insert("iptables", "DOCKER-USER", &["-s", &src_d, "-j", "REJECT"]);
    watch.expect_links(2, Duration::from_secs(5));
    let took = added.elapsed();
    assert!(
        took <= Duration::from_secs(2),
        "b - d went {took:?} after its rule"
    );
    eprintln!("hand-made link removed {took:?} after a rule that covers it");
}

/// A host interface the test created, deleted on drop.
struct DeleteLink(String);

impl Drop for DeleteLink {
    fn drop(&mut self) {
        quietly(&["ip", "link", "del", &self.0]);
    }
}

/// A qdisc the test added to a host veth, deleted on drop (with its filters).
struct Qdisc {
    dev: String,
    parent: &'static str,
}

impl Qdisc {
    /// `tc qdisc add dev DEV PARENT SPEC…` (`root tbf …`, `clsact`).
    #[track_caller]
    fn add(dev: &str, parent: &'static str, spec: &[&str]) -> Self {
        let mut argv = vec!["tc", "qdisc", "add", "dev", dev, parent];
        argv.extend_from_slice(spec);
        must(&argv);
        Self {
            dev: dev.to_owned(),
            parent,
        }
    }
}

impl Drop for Qdisc {
    fn drop(&mut self) {
        quietly(&["tc", "qdisc", "del", "dev", &self.dev, self.parent]);
    }
}

/// Issue 22, 2b: traffic control on a pair's veth is policy a link would skip (a redirect at
/// TCX runs before classic ingress filters and around the receiver's qdisc). A rate limit on
/// B's veth keeps `dxdp link` from linking the pair, naming it; a filter that steals A's frames
/// (added on A's veth under a running watch, resync 300 s) takes a hand-made link away within
/// seconds.
#[test]
fn traffic_control_on_a_veth_keeps_the_pair_on_the_bridge_like_a_firewall_rule() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("tc", &[]);
    let [a, b] = ["a", "b"].map(|n| world.run(n, &["--network", &net], &[]));
    let ip_b = world.ip(&b, &net);
    let (veth_a, _) = world.veth(&a, &net);
    let (veth_b, _) = world.veth(&b, &net);

    let shaper = Qdisc::add(
        &veth_b,
        "root",
        &[
            "tbf", "rate", "5mbit", "burst", "32kbit", "latency", "400ms",
        ],
    );
    let run = world.dxdp.run(&["link", &a, &b]);
    run.assert_failure();
    assert!(
        run.stderr.contains(&format!(
            "the traffic control [tc on {veth_b} chain root: qdisc tbf]"
        )) && run.stderr.contains("--bypass-firewall"),
        "the refusal names the qdisc and the way out: {run}"
    );
    assert_eq!(linked(&world), 0);
    drop(shaper);
    world.dxdp.run(&["link", &a, &b]).assert_success();
    assert!(pings(&a, &ip_b));

    let watch = world.watch(&["--resync", "300"]);
    watch.expect_links(1, Duration::from_secs(5));
    let added = Instant::now();
    // This kernel has cls_bpf and act_mirred only (no gact, no dummy device): a classic BPF
    // filter that matches every frame and steals it to a veth left down drops A's traffic on
    // the bridge path.
    let sink = format!("dxtsink{}", std::process::id() % 100_000);
    let peer = format!("{sink}p");
    must(&[
        "ip", "link", "add", &sink, "type", "veth", "peer", "name", &peer,
    ]);
    let _sink = DeleteLink(sink.clone());
    let _clsact = Qdisc::add(&veth_a, "clsact", &[]);
    must(&[
        "tc",
        "filter",
        "add",
        "dev",
        &veth_a,
        "ingress",
        "bpf",
        "bytecode",
        "1,6 0 0 4294967295",
        "action",
        "mirred",
        "egress",
        "redirect",
        "dev",
        &sink,
    ]);
    watch.expect_links(0, Duration::from_secs(5));
    let took = added.elapsed();
    assert!(took <= Duration::from_secs(3), "removed after {took:?}");
    let log = watch.log_text();
    assert!(
        log.contains("removed a link made by hand")
            && log.contains(&format!("tc on {veth_a} chain ingress: filter bpf")),
        "the watch names the filter: {log}"
    );
    assert!(
        !pings(&a, &ip_b),
        "the filter applies again: A's frames go to the sink"
    );
    eprintln!("link removed {took:?} after a filter on A's veth");
}

/// Issue 24: doctor says, per published port, whether the rules would let a fast path from the
/// NIC take it; an operator's DOCKER-USER drop for the container port keeps it on Docker's
/// path, named. (Whether the port passes without it depends on what else the host holds.)
#[test]
fn doctor_names_the_rule_that_keeps_a_published_port_on_dockers_path() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("published", &[]);
    let web = world.run("web", &["--network", &net, "-p", "18090:80"], &[]);
    let line_of = |doctor: &str| {
        doctor
            .lines()
            .find(|l| l.contains(&format!("port 18090/tcp → {web}:80")))
            .map(str::to_owned)
    };
    let before = world.dxdp.run(&["doctor"]);
    let line = line_of(&before.stdout).unwrap_or_else(|| panic!("no line for 18090: {before}"));
    assert!(
        line.starts_with("[ ok ]") || line.contains("stays on Docker's path"),
        "{line}"
    );
    let ip = world.ip(&web, &net);
    let dst = format!("{ip}/32");
    let _rule = FirewallRule::insert(
        "iptables",
        "DOCKER-USER",
        &[
            "-d", &dst, "-p", "tcp", "-m", "tcp", "--dport", "80", "-j", "DROP",
        ],
    );
    let after = world.dxdp.run(&["doctor"]);
    let line = line_of(&after.stdout).unwrap_or_else(|| panic!("no line for 18090: {after}"));
    assert!(
        line.starts_with("[warn]")
            && line.contains(&format!(
                "iptables filter chain DOCKER-USER: -A DOCKER-USER -d {dst} -p tcp -m tcp \
                 --dport 80 -j DROP"
            )),
        "{line}"
    );
}
