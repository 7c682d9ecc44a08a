//! packaging/swarm/dxdp-stack.yml deployed as its README says, on a one-node swarm of the
//! host's dockerd: the global dxdp service runs and links a labeled pair of containers.
//!
//! The test makes the swarm itself (`docker swarm init` on 127.0.0.1, `support::Swarm`) and leaves
//! it at the end, with what swarm mode made (the `ingress` network, and `docker_gwbridge`, which
//! `swarm leave` keeps). A dockerd that is in a swarm already is someone else's: the test does not
//! run there (it fails under CI=true, as any test that cannot run). Everything is undone by guards, in
//! reverse order, also when an assertion fails: the stack, the containers and the network, the
//! pin directory, the mounts made shared (bpffs, the one holding /run), the swarm.

use std::time::{Duration, Instant};

use crate::support::{
    DOCKER, DXDP, FirewallRule, Run, SharedMount, Status, Swarm, World, assert_promtool_accepts,
    can_run, docker_ok, free_port, link_between, metrics_text, missing_tools, network_exists,
    quietly, require_docker, run_for, sandbox_netns, sandbox_of, scrape_metrics, swarm_can_be_made,
    swarm_state, try_docker, wait_until,
};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const STACK_FILE: &str = "packaging/swarm/dxdp-stack.yml";
/// The image the stack file names, built by packaging/container/build.sh.
const STACK_IMAGE: &str = "dxdp:local";
const BPFFS: &str = "/sys/fs/bpf";
/// Made by swarm mode: `ingress` by `swarm init`, `docker_gwbridge` with the first task.
const SWARM_NETWORKS: [&str; 2] = ["ingress", "docker_gwbridge"];

/// A deployed stack: `docker stack rm` on drop, then a bounded wait until its containers are
/// gone (the removal is asynchronous, and the swarm must not be left under a running task).
struct Stack {
    name: String,
}

impl Stack {
    /// `docker stack deploy --resolve-image never -c packaging/swarm/dxdp-stack.yml NAME`, as
    /// the stack's README says, with the watch's pin directory set through the stack file's
    /// `DXDP_PIN_DIR` variable.
    #[track_caller]
    fn deploy(name: &str, pin_dir: &str) -> Self {
        let file = format!("{REPO}/{STACK_FILE}");
        let pin_env = format!("DXDP_PIN_DIR={pin_dir}");
        let stack = Self {
            name: name.to_owned(),
        };
        run_for(
            &[
                "env",
                &pin_env,
                DOCKER,
                "stack",
                "deploy",
                "--resolve-image",
                "never",
                "-c",
                &file,
                name,
            ],
            Duration::from_secs(60),
        )
        .assert_success();
        stack
    }

    fn label(&self) -> String {
        format!("label=com.docker.stack.namespace={}", self.name)
    }

    /// IDs of the stack's running containers.
    fn running(&self) -> Vec<String> {
        docker_ok(&["ps", "-q", "--filter", &self.label()])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `docker service ps` and the service's log, for a failure message.
    fn diagnostics(&self) -> String {
        let service = format!("{}_dxdp", self.name);
        let shown = |run: Option<Run>| run.map(|r| r.to_string()).unwrap_or_default();
        let ps = shown(try_docker(&["service", "ps", "--no-trunc", &service]));
        let logs = shown(try_docker(&["service", "logs", "--raw", &service]));
        format!("{ps}\n{logs}")
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        quietly(&[DOCKER, "stack", "rm", &self.name]);
        let gone = wait_until(Duration::from_secs(60), || {
            try_docker(&["ps", "-aq", "--filter", &self.label()])
                .is_some_and(|run| run.success() && run.stdout.trim().is_empty())
        });
        if !gone {
            eprintln!("cleanup: containers of stack {} still there", self.name);
        }
    }
}

/// The stack file deployed on a fresh one-node swarm runs `dxdp watch` as a global service, and
/// that watch links two labeled containers in the pin directory the stack gives it; afterwards
/// the host's dockerd is in no swarm and has no `ingress` nor (unless it was there before)
/// `docker_gwbridge` network.
#[test]
fn stack_watch_links_a_labeled_pair_on_a_one_node_swarm() {
    if !require_docker() {
        return;
    }
    let state = swarm_state();
    let mut problems = Vec::new();
    if state != "inactive" {
        problems.push(format!(
            "the host's dockerd is in a swarm already (state {state}); this test makes a swarm of \
             its own and leaves it, so it does not run in one it did not make: run it where \
             `docker info --format '{{{{.Swarm.LocalNodeState}}}}'` says inactive (`docker swarm \
             leave --force` if that swarm is yours to end)"
        ));
    } else if docker_ok(&["info", "--format", "{{.LiveRestoreEnabled}}"]) == "true" {
        problems.push(
            "dockerd runs with live-restore, which swarm mode refuses; run this test on a \
             dockerd without it"
                .to_owned(),
        );
    }
    if !can_run(problems) {
        return;
    }
    let started = Instant::now();

    // The image the stack names, with the binary under test, built as the README says.
    let build = format!("{REPO}/packaging/container/build.sh");
    run_for(
        &[&build, "--binary", DXDP, "--tag", STACK_IMAGE],
        Duration::from_secs(180),
    )
    .assert_success();

    // Dropped in reverse: stack, world (containers, networks, pin directory), the mounts made
    // shared for the stack's rslave binds (the README says so), swarm.
    let mut swarm = Swarm::init();
    let bpffs = SharedMount::ensure(BPFFS);
    let run_dir = SharedMount::ensure("/var/run");
    let mut world = World::shared();
    let pin_dir = world.dxdp.pin_dir.to_string_lossy().into_owned();
    let stack = Stack::deploy(&format!("{}-stack", world.prefix), &pin_dir);

    let running = wait_until(Duration::from_secs(60), || !stack.running().is_empty());
    assert!(
        running,
        "the stack's dxdp task did not run within 60 s:\n{}",
        stack.diagnostics()
    );
    let env = docker_ok(&["inspect", "-f", "{{json .Config.Env}}", &stack.running()[0]]);
    assert!(
        env.contains(&format!("\"DXDP_PIN_DIR={pin_dir}\"")),
        "the task's environment: {env}"
    );

    // A labeled pair on a bridge network of the test's own, started by plain `docker run`.
    let net = world.network("net", &[]);
    let group = format!("dxdp.group={}", world.prefix);
    let labels = ["--network", &net, "-l", "dxdp.enable=true", "-l", &group];
    let a = world.run("a", &labels, &[]);
    let b = world.run("b", &labels, &[]);
    // The watch makes the pin directory when it first needs it: until then, no status.
    let status = |world: &World| -> Option<Status> {
        let run = world.dxdp.run(&["status", "--json"]);
        run.success()
            .then(|| serde_json::from_str(&run.stdout).ok())
            .flatten()
    };
    let linked = wait_until(Duration::from_secs(30), || {
        status(&world)
            .is_some_and(|s| link_between(&s, &a, &b).is_some_and(|l| l.origin == "watch"))
    });
    assert!(
        linked,
        "no watch link between {a} and {b} in {pin_dir} within 30 s: {:#?}\n{}",
        world.dxdp.status(),
        stack.diagnostics()
    );
    let link = link_between(&world.dxdp.status(), &a, &b).cloned().unwrap();
    assert_eq!(
        (link.network.as_str(), link.datapath.as_str()),
        (net.as_str(), "tc")
    );

    // An overlay network made after the stack's task started: its sandbox, an nsfs mount
    // dockerd makes under /var/run/docker/netns now, reaches the task through the rslave bind
    // of /var/run, and the stack's watch links a labeled pair on it inside the sandbox.
    let ov = world.network("ov", &["--driver", "overlay", "--attachable"]);
    let on_ov = ["--network", &ov, "-l", "dxdp.enable=true", "-l", &group];
    let c = world.run("c", &on_ov, &[]);
    let d = world.run("d", &on_ov, &[]);
    let linked = wait_until(Duration::from_secs(30), || {
        status(&world).is_some_and(|s| {
            link_between(&s, &c, &d).is_some_and(|l| l.origin == "watch" && l.sandbox.is_some())
        })
    });
    assert!(
        linked,
        "no watch link between {c} and {d} in the sandbox of {ov} within 30 s (is the stack's \
         /var/run bind rslave?): {:#?}\n{}",
        world.dxdp.status(),
        stack.diagnostics()
    );

    // Undone in order, then checked: the host's dockerd is as the test found it.
    drop(stack);
    drop(world);
    drop(run_dir);
    drop(bpffs);
    swarm.leave().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(swarm_state(), "inactive");
    for network in SWARM_NETWORKS {
        if network == "docker_gwbridge" && swarm.gwbridge_was_there {
            continue;
        }
        assert!(
            !network_exists(network),
            "{network} is still there after the swarm was left"
        );
    }
    assert!(
        !std::path::Path::new(&pin_dir).exists(),
        "{pin_dir} is still there"
    );
    eprintln!("swarm stack test took {:?}", started.elapsed());
}

/// Bulk (iperf3, 2 s) and pings from `a` to `b` at `ip_b` ride their link, both ways, while
/// pings from `a` to a third container at `ip_c` take `br0` and are answered.
#[track_caller]
fn assert_link_carries(world: &World, (a, b): (&str, &str), ip_b: &str, ip_c: &str) {
    docker_ok(&["exec", "-d", b, "iperf3", "-s", "-1"]);
    let listening = wait_until(Duration::from_secs(5), || {
        try_docker(&["exec", b, "ss", "-Hltn", "sport = :5201"])
            .is_some_and(|r| !r.stdout.trim().is_empty())
    });
    assert!(listening, "iperf3 did not listen in {b}");
    let iperf = try_docker(&["exec", a, "timeout", "15", "iperf3", "-c", ip_b, "-t", "2"])
        .expect("iperf3 ran");
    assert!(iperf.success(), "iperf3 {a} -> {b}: {iperf}");
    for ip in [ip_b, ip_c] {
        let ping = try_docker(&[
            "exec", a, "ping", "-c", "3", "-i", "0.2", "-W", "1", "-w", "5", ip,
        ])
        .expect("ping ran");
        assert!(ping.success(), "ping {a} -> {ip}: {ping}");
    }
    let status = world.dxdp.status();
    let link = link_between(&status, a, b).unwrap_or_else(|| panic!("no link: {status:#?}"));
    let carried = link.low_to_high.bytes.min(link.high_to_low.bytes);
    assert!(
        carried > 100_000 && link.low_to_high.packets >= 3 && link.high_to_low.packets >= 3,
        "the link carried too little in one direction: {link:#?}"
    );
    assert_eq!(
        status.links.len(),
        1,
        "only the pair is linked: {status:#?}"
    );
}

/// `dxdp ARGS…`, which must succeed; its standard output.
#[track_caller]
fn dxdp_ok(dxdp: &crate::support::Dxdp, args: &[&str]) -> String {
    let run = dxdp.run(args);
    run.assert_success();
    run.stdout
}

/// The packets `/metrics` at `addr` counts over the link from `a` to `b` on `net`, in the
/// overlay sandbox `sandbox` (the series labeled `sandbox`); `None` without such a series.
fn overlay_link_packets(addr: &str, (a, b): (&str, &str), net: &str, sandbox: &str) -> Option<f64> {
    let prefix = format!(
        "dxdp_link_redirected_packets_total{{from=\"{a}\",to=\"{b}\",network=\"{net}\",datapath="
    );
    let suffix = format!(",sandbox=\"{sandbox}\"}}");
    scrape_metrics(addr)?
        .into_iter()
        .find(|(key, _)| key.starts_with(&prefix) && key.ends_with(&suffix))
        .map(|(_, packets)| packets)
}

/// Two containers of one node on an attachable overlay network are linked by `dxdp link`
/// inside the network's sandbox (tc and xdp): their traffic is redirected (the link's counters
/// carry an iperf3 run and pings) while a third container on the network stays on `br0`; a
/// rule in the sandbox's FORWARD chain refuses the link, naming the rule; an encrypted overlay
/// is refused naming the option; the watch's planner refuses an overlay pair by label; a
/// stopped container's link shows GONE and `unlink` removes it by name; the sandbox's pinned
/// state goes with the network.
#[test]
fn overlay_pair_links_by_hand_inside_the_networks_sandbox() {
    if !require_docker() || !swarm_can_be_made() {
        return;
    }
    let mut swarm = Swarm::init();
    let mut world = World::shared();
    let net = world.network("ov", &["--driver", "overlay", "--attachable"]);
    let enc = world.network(
        "enc",
        &["--driver", "overlay", "--attachable", "--opt", "encrypted"],
    );
    let on_net = ["--network", net.as_str()];
    let a = world.run("a", &on_net, &["sleep", "600"]);
    let b = world.run("b", &on_net, &["sleep", "600"]);
    let c = world.run("c", &on_net, &["sleep", "600"]);
    let sandbox = sandbox_of(&net);
    let (ip_b, ip_c) = (world.ip(&b, &net), world.ip(&c, &net));

    for datapath in ["tc", "xdp"] {
        let out = dxdp_ok(&world.dxdp, &["link", &a, &b, "--datapath", datapath]);
        assert!(
            out.contains(&format!("in sandbox {sandbox}")) && out.contains("on "),
            "{out}"
        );
        let status = world.dxdp.status();
        let link = link_between(&status, &a, &b)
            .unwrap_or_else(|| panic!("no link {a} <-> {b}: {status:#?}"));
        assert_eq!(
            (
                link.sandbox.as_deref(),
                link.network.as_str(),
                link.datapath.as_str()
            ),
            (Some(sandbox.as_str()), net.as_str(), datapath)
        );
        assert_eq!(
            status.links.len(),
            1,
            "only the pair is linked: {status:#?}"
        );

        assert_link_carries(&world, (&a, &b), &ip_b, &ip_c);
        // `doctor` checks the sandbox's datapath from inside it: the link's programs attached.
        let doctor = world.dxdp.run(&["doctor"]);
        assert!(
            doctor.stdout.contains(&format!(
                "[ ok ] overlay sandbox {sandbox} (network {net}, pinned at"
            )) && doctor.stdout.contains("): 1 link(s), 2 managed veth(s)")
                && !doctor
                    .stdout
                    .contains(&format!("in overlay sandbox {sandbox}:")),
            "doctor on the overlay link: {doctor}"
        );
        // `top` shows the sandbox's link, its veths named with the sandbox.
        let top = dxdp_ok(
            &world.dxdp,
            &["top", "--json", "--once", "--interval", "0.5"],
        );
        assert!(
            top.contains(&a) && top.contains(&format!("({sandbox})")),
            "top without the overlay link: {top}"
        );
        let out = dxdp_ok(&world.dxdp, &["unlink", &a, &b]);
        assert!(out.contains(&format!("in sandbox {sandbox}")), "{out}");
        world.dxdp.status().assert_empty();
    }

    // A rule in the sandbox, where the pair's frames are filtered (br_netfilter), keeps it on
    // br0; without the rule the same link is made.
    let ip_a = world.ip(&a, &net);
    let rule = FirewallRule::insert_in(
        &sandbox_netns(&sandbox),
        "iptables",
        "FORWARD",
        &["-s", &ip_a, "-d", &ip_b, "-j", "DROP"],
    );
    let refused = world.dxdp.run(&["link", &a, &b]);
    assert!(
        !refused.success()
            && refused.stderr.contains("-j DROP")
            && refused.stderr.contains(&sandbox),
        "a link past a rule in the sandbox: {refused}"
    );
    world.dxdp.status().assert_empty();
    drop(rule);

    // Encrypted overlays are refused in one line naming the option.
    let on_enc = ["--network", enc.as_str()];
    let x = world.run("x", &on_enc, &["sleep", "600"]);
    let y = world.run("y", &on_enc, &["sleep", "600"]);
    let refused = world.dxdp.run(&["link", &x, &y]);
    assert!(
        !refused.success() && refused.stderr.contains("--opt encrypted"),
        "a link on an encrypted overlay: {refused}"
    );

    // A stopped container's link is GONE and unlinked by name; the network's removal takes
    // the sandbox, whose pinned state the next command removes.
    dxdp_ok(&world.dxdp, &["link", &a, &b]);
    world.remove(std::slice::from_ref(&b));
    let status = world.dxdp.run(&["status"]);
    assert!(status.stdout.contains("GONE"), "{status}");
    let out = dxdp_ok(&world.dxdp, &["unlink", &a, &b]);
    assert!(out.contains("unlinked"), "{out}");
    dxdp_ok(&world.dxdp, &["link", &a, &c]);
    world.remove(&[a.clone(), c.clone()]);
    let sites = world.dxdp.pin_dir.join("overlay");
    let sandbox_gone = wait_until(Duration::from_secs(30), || {
        let _ = try_docker(&["network", "rm", &net]);
        !std::path::Path::new(&format!("/var/run/docker/netns/{sandbox}")).exists()
    });
    assert!(sandbox_gone, "the sandbox {sandbox} outlived its network");
    let gone = world.dxdp.run(&["status"]);
    assert!(
        gone.stdout.contains("GONE") && gone.stdout.contains(&sandbox),
        "a gone sandbox's link: {gone}"
    );
    // `doctor` reports the state left behind, with the way out.
    let doctor = world.dxdp.run(&["doctor"]);
    assert!(
        doctor
            .stdout
            .contains(&format!("[warn] overlay sandbox {sandbox} is gone"))
            && doctor.stdout.contains("fix: dxdp cleanup removes it"),
        "doctor on a gone sandbox's state: {doctor}"
    );
    let out = dxdp_ok(&world.dxdp, &["unlink", &a, &c]);
    assert!(out.contains("which is gone"), "{out}");
    let left: Vec<_> = std::fs::read_dir(&sites)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.is_empty(),
        "pinned state of a gone sandbox left: {left:?}"
    );

    drop(world);
    swarm.leave().unwrap_or_else(|e| panic!("{e}"));
}

/// The watch links a labeled pair of one node's containers on an overlay network inside the
/// network's sandbox and keeps it as it keeps bridge links: the link carries their traffic, an
/// unlabeled third container stays on `br0`, a rule in the sandbox takes the link away at the
/// next resync (and its removal brings it back), a stopped container takes its link along, and
/// the network's removal takes the sandbox's pinned state.
#[test]
fn watch_links_a_labeled_overlay_pair_inside_the_networks_sandbox() {
    if !require_docker() || !swarm_can_be_made() {
        return;
    }
    let mut swarm = Swarm::init();
    let mut world = World::shared();
    let net = world.network("ov", &["--driver", "overlay", "--attachable"]);
    let group = format!("dxdp.group={}", world.prefix);
    let labeled = [
        "--network",
        net.as_str(),
        "-l",
        "dxdp.enable=true",
        "-l",
        group.as_str(),
    ];
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut watch = world.watch(&["--resync", "1", "--metrics", &metrics]);
    let a = world.run("a", &labeled, &["sleep", "600"]);
    let b = world.run("b", &labeled, &["sleep", "600"]);
    let c = world.run("c", &["--network", net.as_str()], &["sleep", "600"]);
    let sandbox = sandbox_of(&net);
    let (ip_a, ip_b, ip_c) = (world.ip(&a, &net), world.ip(&b, &net), world.ip(&c, &net));
    let linked = |world: &World| {
        link_between(&world.dxdp.status(), &a, &b)
            .is_some_and(|l| l.origin == "watch" && l.sandbox.as_deref() == Some(&sandbox))
    };
    assert!(
        wait_until(Duration::from_secs(30), || linked(&world)),
        "no watch link in sandbox {sandbox} within 30 s: {:#?}\n{}",
        world.dxdp.status(),
        watch.log_text()
    );
    assert_link_carries(&world, (&a, &b), &ip_b, &ip_c);

    // `/metrics` serves the sandbox's link, labeled with the sandbox, its counters moving with
    // the pair's traffic, and the exposition passes promtool.
    // Both directions are series of their own: `a` to `b` is one.
    let before = overlay_link_packets(&metrics, (&a, &b), &net, &sandbox).unwrap_or_else(|| {
        panic!(
            "no series of the overlay link in /metrics: {:#?}",
            scrape_metrics(&metrics)
        )
    });
    assert!(before >= 3.0, "the overlay link's series counts {before}");
    let ping = try_docker(&[
        "exec", &a, "ping", "-c", "5", "-i", "0.2", "-W", "1", "-w", "5", &ip_b,
    ])
    .expect("ping ran");
    assert!(ping.success(), "{ping}");
    let after = overlay_link_packets(&metrics, (&a, &b), &net, &sandbox).unwrap_or(0.0);
    assert!(
        after >= before + 5.0,
        "the overlay link's counter did not move with 5 pings: {before} then {after}"
    );
    let scraped = scrape_metrics(&metrics).unwrap_or_default();
    assert_eq!(
        scraped.get("dxdp_overlay_sandboxes{state=\"live\"}"),
        Some(&1.0),
        "{scraped:#?}"
    );
    if missing_tools(&["promtool"]).is_empty() {
        assert_promtool_accepts(&metrics_text(&metrics).expect("/metrics answers"));
    }

    // A rule in the sandbox: the next resync takes the link away and says why.
    let rule = FirewallRule::insert_in(
        &sandbox_netns(&sandbox),
        "iptables",
        "FORWARD",
        &["-s", &ip_a, "-d", &ip_b, "-j", "DROP"],
    );
    assert!(
        wait_until(Duration::from_secs(15), || world
            .dxdp
            .status()
            .links
            .is_empty()),
        "the link outlived a rule in its sandbox: {:#?}",
        world.dxdp.status()
    );
    assert!(
        wait_until(Duration::from_secs(5), || watch
            .log_text()
            .contains("-j DROP")),
        "the watch did not name the rule: {}",
        watch.log_text()
    );
    drop(rule);
    assert!(
        wait_until(Duration::from_secs(15), || linked(&world)),
        "the link did not come back without the rule: {}",
        watch.log_text()
    );

    // A stopped container takes its link along.
    world.remove(std::slice::from_ref(&b));
    assert!(
        wait_until(Duration::from_secs(15), || world
            .dxdp
            .status()
            .links
            .is_empty()),
        "a link outlived its container: {:#?}",
        world.dxdp.status()
    );
    // The network's removal takes the sandbox; the next whole pass its pinned state.
    world.remove(&[a.clone(), c.clone()]);
    let sandbox_gone = wait_until(Duration::from_secs(30), || {
        let _ = try_docker(&["network", "rm", &net]);
        !std::path::Path::new(&format!("/var/run/docker/netns/{sandbox}")).exists()
    });
    assert!(sandbox_gone, "the sandbox {sandbox} outlived its network");
    let sites = world.dxdp.pin_dir.join("overlay");
    let emptied = wait_until(Duration::from_secs(15), || {
        std::fs::read_dir(&sites).map_or(true, |mut d| d.next().is_none())
    });
    assert!(
        emptied,
        "pinned state of a gone sandbox left in {}: {}",
        sites.display(),
        watch.log_text()
    );
    assert!(watch.alive(), "the watch died: {}", watch.log_text());
    drop(watch);
    drop(world);
    swarm.leave().unwrap_or_else(|e| panic!("{e}"));
}

/// A Swarm service, removed on drop (its tasks' containers with it, within a bounded wait).
struct Service {
    name: String,
}

impl Service {
    /// `docker service create --name NAME ARGS… IMAGE CMD…`, not waiting for convergence.
    #[track_caller]
    fn create(name: &str, args: &[&str], cmd: &[&str]) -> Self {
        let mut argv = vec!["service", "create", "--detach", "--name", name];
        argv.extend_from_slice(args);
        argv.push(crate::support::IMAGE);
        argv.extend_from_slice(cmd);
        docker_ok(&argv);
        Self {
            name: name.to_owned(),
        }
    }

    /// Two tasks of `sleep 600` on the overlay network `net` (DNS round robin, no virtual IP),
    /// named `<prefix>-<suffix>`, with `extra` arguments (labels).
    #[track_caller]
    fn pair_on(world: &World, suffix: &str, net: &str, extra: &[&str]) -> Self {
        let mut args = vec![
            "--network",
            net,
            "--endpoint-mode",
            "dnsrr",
            "--no-resolve-image",
            "--replicas",
            "2",
        ];
        args.extend_from_slice(extra);
        Self::create(
            &format!("{}-{suffix}", world.prefix),
            &args,
            &["sleep", "600"],
        )
    }

    /// Names of the service's running task containers.
    fn tasks(&self) -> Vec<String> {
        let filter = format!("label=com.docker.swarm.service.name={}", self.name);
        try_docker(&["ps", "--filter", &filter, "--format", "{{.Names}}"])
            .map(|run| run.stdout.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        quietly(&[DOCKER, "service", "rm", &self.name]);
        if !wait_until(Duration::from_secs(60), || self.tasks().is_empty()) {
            eprintln!("cleanup: tasks of service {} still there", self.name);
        }
    }
}

/// A service's labels (a stack file's `deploy.labels`, `docker service create --label`) reach
/// its tasks: the watch links the two tasks of a labeled service on an overlay network inside
/// its sandbox, while the tasks of the same service without the labels stay on `br0`.
#[test]
fn watch_links_a_services_tasks_by_its_deploy_labels() {
    if !require_docker() || !swarm_can_be_made() {
        return;
    }
    let mut swarm = Swarm::init();
    let mut world = World::shared();
    let net = world.network("ov", &["--driver", "overlay", "--attachable"]);
    let mut watch = world.watch(&["--resync", "1"]);
    let group = format!("dxdp.group={}", world.prefix);
    let labels = ["--label", "dxdp.enable=true", "--label", &group];
    let labeled = Service::pair_on(&world, "lab", &net, &labels);
    let plain = Service::pair_on(&world, "pl", &net, &[]);
    let started = wait_until(Duration::from_secs(60), || {
        labeled.tasks().len() == 2 && plain.tasks().len() == 2
    });
    assert!(started, "the services' tasks did not start within 60 s");
    let tasks = labeled.tasks();
    let linked = wait_until(Duration::from_secs(30), || {
        link_between(&world.dxdp.status(), &tasks[0], &tasks[1])
            .is_some_and(|l| l.sandbox.is_some())
    });
    assert!(
        linked,
        "no link between the labeled service's tasks {tasks:?}: {:#?}\n{}",
        world.dxdp.status(),
        watch.log_text()
    );
    let plain_tasks = plain.tasks();
    let ip = |c: &str| world.ip(c, &net);
    assert_link_carries(
        &world,
        (&tasks[0], &tasks[1]),
        &ip(&tasks[1]),
        &ip(&plain_tasks[0]),
    );
    assert!(watch.alive(), "the watch died: {}", watch.log_text());
    drop(labeled);
    drop(plain);
    assert!(
        wait_until(Duration::from_secs(15), || world
            .dxdp
            .status()
            .links
            .is_empty()),
        "links outlived the service: {:#?}",
        world.dxdp.status()
    );
    drop(watch);
    drop(world);
    swarm.leave().unwrap_or_else(|e| panic!("{e}"));
}

/// `docker service update --label-add` reaches the service's running tasks at once: the watch
/// follows the manager's service events, so the tasks are linked within seconds (its resync, 60
/// s, and full refresh, every tenth, are far off), and `--label-rm` takes the link away as fast.
#[test]
fn a_service_label_change_reaches_its_running_tasks_within_seconds() {
    if !require_docker() || !swarm_can_be_made() {
        return;
    }
    let mut swarm = Swarm::init();
    let mut world = World::shared();
    let net = world.network("ov", &["--driver", "overlay", "--attachable"]);
    let mut watch = world.watch(&["--resync", "60"]);
    let service = Service::pair_on(&world, "upd", &net, &[]);
    assert!(
        wait_until(Duration::from_secs(60), || service.tasks().len() == 2),
        "the service's tasks did not start within 60 s"
    );
    let tasks = service.tasks();
    let linked = |world: &World| {
        link_between(&world.dxdp.status(), &tasks[0], &tasks[1])
            .is_some_and(|l| l.sandbox.is_some() && l.origin == "watch")
    };
    // Let the watch see the tasks start: unlabeled, they are not linked.
    std::thread::sleep(Duration::from_secs(2));
    assert!(!linked(&world), "linked before any label");

    let group = format!("dxdp.group={}", world.prefix);
    docker_ok(&[
        "service",
        "update",
        "--detach",
        "--label-add",
        "dxdp.enable=true",
        "--label-add",
        &group,
        &service.name,
    ]);
    let started = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || linked(&world)),
        "the tasks {tasks:?} were not linked within 10 s of the service's --label-add: {:#?}\n{}",
        world.dxdp.status(),
        watch.log_text()
    );
    eprintln!("linked {:?} after --label-add", started.elapsed());
    let (mut now, mut before) = (service.tasks(), tasks.clone());
    now.sort();
    before.sort();
    assert_eq!(now, before, "the label change restarted the tasks");

    docker_ok(&[
        "service",
        "update",
        "--detach",
        "--label-rm",
        "dxdp.enable",
        &service.name,
    ]);
    assert!(
        wait_until(Duration::from_secs(10), || world
            .dxdp
            .status()
            .links
            .is_empty()),
        "the link outlived the service's --label-rm by 10 s: {:#?}\n{}",
        world.dxdp.status(),
        watch.log_text()
    );
    assert!(watch.alive(), "the watch died: {}", watch.log_text());
    drop(service);
    drop(watch);
    drop(world);
    swarm.leave().unwrap_or_else(|e| panic!("{e}"));
}

/// A Swarm task's port published with `mode=host` is Docker's DNAT on the task's bridge, which
/// `dxdp expose` takes from the NIC like any container's (iperf3 from outside rides it), while a
/// port published through the routing mesh is refused in one line saying why.
#[test]
fn a_tasks_host_mode_port_is_exposed_and_a_routing_mesh_port_is_refused() {
    if !require_docker() || !swarm_can_be_made() {
        return;
    }
    let mut swarm = Swarm::init();
    let world = World::shared();
    let out = crate::support::Outside::new(&world);
    let (host_port, mesh_port) = (17030u16, 17031u16);
    let host_mode = format!("mode=host,target=5201,published={host_port}");
    let mesh = format!("target=5201,published={mesh_port}");
    let served = Service::create(
        &format!("{}-hostmode", world.prefix),
        &["--no-resolve-image", "--publish", &host_mode],
        &["iperf3", "-s"],
    );
    let meshed = Service::create(
        &format!("{}-mesh", world.prefix),
        &["--no-resolve-image", "--publish", &mesh],
        &["iperf3", "-s"],
    );
    let started = wait_until(Duration::from_secs(60), || {
        served.tasks().len() == 1 && meshed.tasks().len() == 1
    });
    assert!(started, "the services' tasks did not start within 60 s");
    let task = served.tasks().remove(0);
    let exposed = world
        .dxdp
        .run(&["expose", &task, "--nic", &out.nic, "--bypass-firewall"]);
    assert!(exposed.success(), "expose of a host-mode task: {exposed}");
    let port = host_port.to_string();
    let iperf = out.run(
        &["iperf3", "-c", &out.host_addr, "-p", &port, "-t", "1"],
        Duration::from_secs(20),
    );
    assert!(iperf.success(), "iperf3 from outside to {task}: {iperf}");
    let status = world.dxdp.run(&["status", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&status.stdout).expect("status JSON");
    let inbound = json["exposed"][0]["inbound"]["packets"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        inbound > 100,
        "the exposure carried {inbound} packets: {status}"
    );
    world.dxdp.run(&["unexpose", &task]).assert_success();

    let task = meshed.tasks().remove(0);
    let refused = world.dxdp.run(&["expose", &task, "--nic", &out.nic]);
    assert!(
        !refused.success() && refused.stderr.contains("routing mesh"),
        "expose of a routing-mesh task: {refused}"
    );
    drop(meshed);
    drop(served);
    drop(out);
    drop(world);
    swarm.leave().unwrap_or_else(|e| panic!("{e}"));
}
