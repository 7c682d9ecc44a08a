//! Every project under compose-examples/ brought up with `docker compose` as its README says
//! (or the command in DXDP_COMPOSE: the legacy lane runs docker-compose 1.29), with a `dxdp
//! watch` of the test's own: the watch must make exactly the links the example's README lists
//! (by container names, `PROJECT-SERVICE-1` with Compose v2, and Docker network), no more, and a
//! ping
//! between the two ends of each link must move that link's counters in both directions.
//!
//! Each example runs under a project name of this process (`dxt<pid>ex<name>`) and a pin
//! directory of its own (`/sys/fs/bpf/dxdp-ex-<pid>-<n>`). On the way out, also when an
//! assertion fails: the watch is killed, `dxdp --pin-dir DIR cleanup` removes the links, and
//! `docker compose down -v` removes the containers, networks and volumes.
//!
//! `dxdp watch` follows every container of the host, not only the project's: the examples run
//! one at a time (a lock), so that one example's watch never links another's containers, and
//! links between containers that are not the project's (someone else's labeled containers on
//! this host) are reported and otherwise ignored. `two-networks` declares fixed network names
//! (`dxdp-example-front`, `dxdp-example-back`) that every copy of the project shares: if they
//! exist already, a copy is up on this host, and that test does not run (it fails under CI=true).

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    sync::Mutex,
    thread,
    time::{Duration, Instant},
};

use crate::support::{
    self, Dxdp, PinDir, Run, Status, Watch, can_run, compose, compose_container, docker, docker_ok,
    next_id, require_compose, try_compose, wait_until,
};

/// One example at a time: a watch links whatever it sees on the host.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// How long the watch may take to settle on the expected links after `up -d` returned.
const SETTLE: Duration = Duration::from_secs(20);
/// The watch's resync period in these tests, in seconds.
const RESYNC_SECS: &str = "2";
/// Pings per linked pair.
const PINGS: u32 = 20;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("compose-examples")
}

fn compose_file(example: &str) -> String {
    examples_dir()
        .join(example)
        .join("docker-compose.yml")
        .to_string_lossy()
        .into_owned()
}

/// A compose project brought up from an example; `docker compose down -v` on drop.
struct Project {
    name: String,
    file: String,
}

impl Project {
    /// `docker compose -p dxt<pid>ex<example> -f compose-examples/<example>/docker-compose.yml
    /// up -d`; the guard exists before `up` runs, so a half-made project is taken down too.
    #[track_caller]
    fn up(example: &str) -> Self {
        let project = Self {
            name: format!("dxt{}ex{}", std::process::id(), example.replace('-', "")),
            file: compose_file(example),
        };
        project.compose(&["up", "-d"]).assert_success();
        project
    }

    fn compose(&self, args: &[&str]) -> Run {
        let mut argv = vec!["-p", &self.name, "-f", &self.file];
        argv.extend_from_slice(args);
        compose(&argv, Duration::from_secs(120))
    }

    /// The name of a service's first container (Compose v2: `PROJECT-SERVICE-1`).
    #[track_caller]
    fn container(&self, service: &str) -> String {
        compose_container(&self.name, service)
    }

    /// The project's default network, `PROJECT_default`.
    fn default_network(&self) -> String {
        format!("{}_default", self.name)
    }

    /// Every container of the project, running or not.
    fn containers(&self) -> BTreeSet<String> {
        let label = format!("label=com.docker.compose.project={}", self.name);
        docker_ok(&["ps", "-a", "--filter", &label, "--format", "{{.Names}}"])
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        // -t 0: the services' PID 1 (`iperf3 -s`, `sleep infinity`) ignores SIGTERM anyway.
        match try_compose(
            &[
                "-p",
                &self.name,
                "-f",
                &self.file,
                "down",
                "-v",
                "--remove-orphans",
                "-t",
                "0",
            ],
            Duration::from_secs(120),
        ) {
            Ok(run) if run.success() => {}
            Ok(run) => eprintln!("cleanup: {run}"),
            Err(e) => eprintln!("cleanup: {e}"),
        }
    }
}

/// One example up, with a watch on a pin directory of its own. Fields drop in order: the watch
/// stops, `dxdp cleanup` removes its links while the containers still exist, then the project
/// goes down.
struct Example {
    watch: Watch,
    dxdp: Dxdp,
    _pin_dir: PinDir,
    project: Project,
}

/// A link as the test compares them: the two container names in order, and the network.
type Pair = (String, String, String);

fn pair(a: &str, b: &str, network: &str) -> Pair {
    let (low, high) = if a <= b { (a, b) } else { (b, a) };
    (low.to_owned(), high.to_owned(), network.to_owned())
}

impl Example {
    #[track_caller]
    fn up(example: &str) -> Self {
        let project = Project::up(example);
        let path =
            Path::new(support::BPFFS).join(format!("dxdp-ex-{}-{}", std::process::id(), next_id()));
        assert!(!path.exists(), "{} exists already", path.display());
        let pin_dir = PinDir { path };
        let dxdp = Dxdp {
            pin_dir: pin_dir.path.clone(),
        };
        let watch = Watch::start(&dxdp, &["--resync", RESYNC_SECS]);
        Self {
            watch,
            dxdp,
            _pin_dir: pin_dir,
            project,
        }
    }

    /// The links of this pin directory that touch one of the project's containers, and (for the
    /// report) the others.
    fn links(&self, ours: &BTreeSet<String>) -> (BTreeSet<Pair>, Vec<Pair>, Status) {
        let status = self.dxdp.status();
        let mut mine = BTreeSet::new();
        let mut foreign = Vec::new();
        for l in &status.links {
            let p = pair(&l.low_name, &l.high_name, &l.network);
            if ours.contains(&l.low_name) || ours.contains(&l.high_name) {
                mine.insert(p);
            } else {
                foreign.push(p);
            }
        }
        (mine, foreign, status)
    }

    /// Waits until the links touching the project are exactly `expected`, all made by the watch
    /// on the tc datapath; panics with the status and the watch log if they never are.
    #[track_caller]
    fn expect_exactly(&self, expected: &BTreeSet<Pair>) -> Duration {
        let ours = self.project.containers();
        let start = Instant::now();
        let mut last = (BTreeSet::new(), Vec::new());
        let ok = wait_until(SETTLE, || {
            let (mine, foreign, _) = self.links(&ours);
            let done = &mine == expected;
            last = (mine, foreign);
            done
        });
        let (mine, foreign) = last;
        assert!(
            ok,
            "project {}: expected exactly these links within {SETTLE:?}:\n{expected:#?}\nhave:\n\
             {mine:#?}\n--- watch log\n{}",
            self.project.name,
            self.watch.log_text()
        );
        if !foreign.is_empty() {
            eprintln!(
                "note: the watch also linked containers that are not project {}'s (ignored): \
                 {foreign:?}",
                self.project.name
            );
        }
        let (_, _, status) = self.links(&ours);
        for l in status
            .links
            .iter()
            .filter(|l| ours.contains(&l.low_name) || ours.contains(&l.high_name))
        {
            assert_eq!(
                (l.datapath.as_str(), l.origin.as_str()),
                ("tc", "watch"),
                "{l:?}"
            );
        }
        start.elapsed()
    }

    /// The container's IPv4 address on a network.
    #[track_caller]
    fn ip(&self, container: &str, network: &str) -> String {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
        let ip = docker_ok(&["inspect", "-f", &format, container]);
        assert!(
            !ip.is_empty() && ip != "<no value>",
            "{container} has no address on {network}"
        );
        ip
    }

    /// `(low_to_high, high_to_low)` packets of the link between two containers.
    #[track_caller]
    fn link_packets(&self, a: &str, b: &str) -> (u64, u64) {
        let status = self.dxdp.status();
        let l = status
            .links
            .iter()
            .find(|l| {
                (l.low_name == a && l.high_name == b) || (l.low_name == b && l.high_name == a)
            })
            .unwrap_or_else(|| panic!("no link between {a} and {b}: {status:#?}"));
        (l.low_to_high.packets, l.high_to_low.packets)
    }

    /// Pings `to` from `from` over `network`; both directions of their link must carry every
    /// echo request and reply.
    #[track_caller]
    fn ping_over_link(&self, from: &str, to: &str, network: &str) {
        let before = self.link_packets(from, to);
        ping(from, &self.ip(to, network), PINGS);
        let after = self.link_packets(from, to);
        let grown = (after.0 - before.0, after.1 - before.1);
        assert!(
            grown.0 >= u64::from(PINGS) && grown.1 >= u64::from(PINGS),
            "{PINGS} pings {from} -> {to} should be redirected both ways; the link's packet \
             counters grew by {grown:?} ({before:?} -> {after:?})"
        );
    }

    /// Pings `to` from `from` (not linked to each other): through the bridge, no link counter of
    /// the project moves.
    #[track_caller]
    fn ping_through_bridge(&self, from: &str, to: &str, network: &str) {
        let ours = self.project.containers();
        let totals = |s: &Status| -> Vec<(u64, u64)> {
            s.links
                .iter()
                .filter(|l| ours.contains(&l.low_name) || ours.contains(&l.high_name))
                .map(|l| (l.low_to_high.packets, l.high_to_low.packets))
                .collect()
        };
        let before = totals(&self.dxdp.status());
        ping(from, &self.ip(to, network), PINGS);
        let after = totals(&self.dxdp.status());
        assert_eq!(
            before, after,
            "{from} -> {to} is not linked: no link counter may move"
        );
    }

    /// Waits out at least one more resync since `since`, then checks that the links are still
    /// exactly `expected` (nothing was added late, nothing flaps).
    #[track_caller]
    fn still_exactly(&self, expected: &BTreeSet<Pair>, since: Instant) {
        let resync = Duration::from_secs(RESYNC_SECS.parse().expect("seconds"));
        let wait = (resync + Duration::from_millis(500)).saturating_sub(since.elapsed());
        thread::sleep(wait);
        let (mine, _, _) = self.links(&self.project.containers());
        assert_eq!(
            &mine,
            expected,
            "links changed after a resync\n--- watch log\n{}",
            self.watch.log_text()
        );
    }

    /// Tears everything down now and checks that nothing of the project is left.
    #[track_caller]
    fn down(self) {
        let name = self.project.name.clone();
        let pin_dir = self.dxdp.pin_dir.clone();
        drop(self);
        let label = format!("label=com.docker.compose.project={name}");
        let left = docker_ok(&["ps", "-a", "-q", "--filter", &label]);
        assert!(left.is_empty(), "containers of {name} left: {left}");
        let left = docker_ok(&["network", "ls", "-q", "--filter", &label]);
        assert!(left.is_empty(), "networks of {name} left: {left}");
        assert!(!pin_dir.exists(), "{} left", pin_dir.display());
    }
}

#[track_caller]
fn ping(from: &str, ip: &str, count: u32) {
    if let Err(run) = support::container_pings(docker, from, ip, count) {
        panic!("ping {from} -> {ip}: {run}");
    }
}

#[track_caller]
fn compose_check_passes(example: &str) {
    let file = compose_file(example);
    let run = support::run(&[support::DXDP, "compose-check", &file]);
    run.assert_success();
    assert!(
        run.stdout.starts_with("0 error(s), 0 warning(s)"),
        "{example}: {run}"
    );
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The examples this file brings up; a new example needs a test here.
const TESTED: &[&str] = &["iperf3-pair", "mesh", "two-networks"];

#[test]
fn every_example_has_a_test_and_passes_compose_check() {
    let mut found: Vec<String> = std::fs::read_dir(examples_dir())
        .expect("compose-examples/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("docker-compose.yml").is_file())
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    found.sort();
    assert_eq!(found, TESTED, "compose-examples/ and this file's tests");
    for example in TESTED {
        compose_check_passes(example);
    }
}

#[test]
fn iperf3_pair_gets_one_link() {
    if !require_compose() {
        return;
    }
    let _one = lock();
    compose_check_passes("iperf3-pair");
    let ex = Example::up("iperf3-pair");
    let (client, server) = (
        ex.project.container("client"),
        ex.project.container("server"),
    );
    let net = ex.project.default_network();
    let expected = BTreeSet::from([pair(&client, &server, &net)]);
    let took = ex.expect_exactly(&expected);
    let settled = Instant::now();
    eprintln!("iperf3-pair: linked {took:?} after `up -d` returned");

    ex.ping_over_link(&client, &server, &net);
    ex.still_exactly(&expected, settled);
    ex.down();
}

#[test]
fn mesh_links_every_pair_of_nodes_and_leaves_the_bystander_alone() {
    if !require_compose() {
        return;
    }
    let _one = lock();
    compose_check_passes("mesh");
    let ex = Example::up("mesh");
    let net = ex.project.default_network();
    let nodes: Vec<String> = ["node1", "node2", "node3"]
        .iter()
        .map(|s| ex.project.container(s))
        .collect();
    let bystander = ex.project.container("bystander");
    let expected: BTreeSet<Pair> = [(0, 1), (0, 2), (1, 2)]
        .iter()
        .map(|&(i, j)| pair(&nodes[i], &nodes[j], &net))
        .collect();
    let took = ex.expect_exactly(&expected);
    let settled = Instant::now();
    eprintln!("mesh: linked {took:?} after `up -d` returned");

    ex.ping_over_link(&nodes[0], &nodes[1], &net);
    ex.ping_over_link(&nodes[2], &nodes[0], &net);
    ex.ping_over_link(&nodes[1], &nodes[2], &net);
    ex.ping_through_bridge(&bystander, &nodes[2], &net);
    ex.still_exactly(&expected, settled);
    ex.down();
}

const FRONT: &str = "dxdp-example-front";
const BACK: &str = "dxdp-example-back";

#[test]
fn two_networks_links_each_pair_on_the_network_it_shares() {
    if !require_compose() {
        return;
    }
    let _one = lock();
    compose_check_passes("two-networks");
    // The networks' names are fixed, shared by every copy of the project: if they exist, a copy
    // is up (a user's, or a run that is still going), and bringing up ours would join it.
    for net in [FRONT, BACK] {
        if docker(&["network", "inspect", net]).success() {
            can_run(vec![format!(
                "network {net} exists: a copy of compose-examples/two-networks is up on this \
                 host; take it down first (docker compose -p PROJECT -f \
                 compose-examples/two-networks/docker-compose.yml down)"
            )]);
            return;
        }
    }
    let ex = Example::up("two-networks");
    let [frontend, api, db] = ["frontend", "api", "db"].map(|s| ex.project.container(s));
    let expected = BTreeSet::from([pair(&frontend, &api, FRONT), pair(&api, &db, BACK)]);
    let took = ex.expect_exactly(&expected);
    let settled = Instant::now();
    eprintln!("two-networks: linked {took:?} after `up -d` returned");

    ex.ping_over_link(&frontend, &api, FRONT);
    ex.ping_over_link(&db, &api, BACK);
    // No frontend–db link, and no path at all: they share no network.
    let db_ip = ex.ip(&db, BACK);
    let run = docker(&[
        "exec", &frontend, "ping", "-q", "-n", "-c", "1", "-W", "1", &db_ip,
    ]);
    assert!(!run.success(), "frontend must not reach db: {run}");
    ex.still_exactly(&expected, settled);
    ex.down();
    for net in [FRONT, BACK] {
        assert!(
            !docker(&["network", "inspect", net]).success(),
            "network {net} left behind"
        );
    }
}

/// What Compose itself will run (`COMPOSE -f FILE config`: overrides, extends and variables
/// resolved) piped into `dxdp compose-check -`, for every example.
#[test]
fn every_example_as_compose_resolves_it_passes_compose_check_from_stdin() {
    if !require_compose() {
        return;
    }
    for example in TESTED {
        let file = compose_file(example);
        let config = support::compose(&["-f", &file, "config"], Duration::from_secs(30));
        config.assert_success();
        let mut child = std::process::Command::new(support::DXDP)
            .args(["compose-check", "-"])
            .env_remove("COMPOSE_PROJECT_NAME")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run dxdp");
        std::io::Write::write_all(
            &mut child.stdin.take().expect("stdin"),
            config.stdout.as_bytes(),
        )
        .expect("write");
        let out = child.wait_with_output().expect("dxdp compose-check");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.starts_with("0 error(s), 0 warning(s)"),
            "{example}: `compose config | dxdp compose-check -`: {stdout}\n--- config\n{}",
            config.stdout
        );
    }
}
