//! The differential harness (issue 39): one generated case sent through Docker's path and
//! through dxdp's on the same topology, and what every observer saw compared. The promise is
//! that a fast path delivers exactly what Docker's own path would; a difference is a failure
//! that prints the case, its seed and the command that reruns it, unless the allowlist
//! (`allowlist.rs`, docs/differential.md) names it with a reason.
//!
//! - [`runner`]: the [`runner::Topology`] plug, the run over cases, the report;
//! - [`case`]: a case of the exposed-port topology, drawn from (seed, number), and a case of
//!   the link topology (the same case, plus what a link judges);
//! - [`frame`]: its frame, built with etherparse;
//! - [`packet_socket`]: AF_PACKET sockets that inject and observe inside namespaces;
//! - [`record`]: a frame normalised to what both paths must agree on;
//! - [`exposed`]: the exposed-port topology (`dxdp expose`);
//! - [`live`]: live TCP connections a case's segment joins, and their next numbers;
//! - [`outbound`]: the outbound topology (`dxdp egress`), frames both ways beside live flows;
//! - [`sources`]: the addresses a case's source kind stands for, routed so that every answer
//!   stays inside the test;
//! - [`links`]: the link topology (`dxdp link`, tc and xdp);
//! - [`segment`]: the link topology's network, a bridge network of the host's or a Swarm overlay
//!   network (linked inside its sandbox), and the namespace holding its bridge;
//! - [`allowlist`]: the expected differences.
//!
//! `DXDP_DIFF_SEED`, `DXDP_DIFF_FIRST` and `DXDP_DIFF_CASES` choose the cases; `DXDP_BIN` runs
//! another build's dxdp (and so its programs) as the fast path, e.g. an older commit's.

mod allowlist;
mod case;
mod exposed;
mod frame;
mod links;
mod live;
mod outbound;
mod packet_socket;
mod record;
mod runner;
mod segment;
mod sources;

use std::time::Duration;

use crate::support::{can_run, missing_tools, require_docker, swarm_can_be_made};

use self::runner::{Budget, Report};

/// CI's seed, fixed so that every run sends the same cases.
const CI_SEED: u64 = 39;
/// CI's cases: 1.2 to 3 s each (two paths, 300 ms windows, expose and unexpose between, a
/// live connection opened before each run of a case on its ports): 110 took 207 to 212 s on an
/// idle host, 330 s beside a build.
const CI_CASES: u64 = 110;
const CI_TIME: Duration = Duration::from_secs(400);
/// The link topology's: 1.3 to 1.5 s each (two paths, 300 ms windows, link and unlink between).
const CI_LINK_CASES: u64 = 72;
const CI_LINK_TIME: Duration = Duration::from_secs(115);
/// The overlay's: 1.2 to 1.3 s each as the link topology's, and a swarm, an overlay network and
/// its containers made and undone around them (10 s).
const CI_OVERLAY_CASES: u64 = 110;
const CI_OVERLAY_TIME: Duration = Duration::from_secs(150);
/// The outbound topology's: a live flow opened before each run of a case, `egress on` and
/// `off` between them.
const CI_OUTBOUND_CASES: u64 = 110;
const CI_OUTBOUND_TIME: Duration = Duration::from_secs(240);

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|e| panic!("{name}={value:?}: {e}")),
    )
}

fn prerequisites() -> bool {
    require_docker() && can_run(missing_tools(&["conntrack", "python3", "nsenter"]))
}

#[track_caller]
fn assert_no_difference(report: &Report) {
    eprintln!("differential: {report}");
    assert!(
        report.differences.is_empty(),
        "{report}; each is printed above with its rerun command"
    );
}

/// Sends the cases of `seed` and `budget` through a topology `make` sets up, and fails on any
/// difference.
#[track_caller]
fn assert_paths_match<T: runner::Topology>(
    make: impl FnOnce() -> T,
    (seed, budget): (u64, Budget),
) {
    let mut topology = make();
    let report = runner::run(&mut topology, seed, &budget);
    assert_no_difference(&report);
}

fn ci_budget(cases: u64, time: Duration) -> (u64, Budget) {
    let seed = env_number("DXDP_DIFF_SEED").unwrap_or(CI_SEED);
    let budget = Budget {
        first: env_number("DXDP_DIFF_FIRST").unwrap_or(0),
        cases: env_number("DXDP_DIFF_CASES").unwrap_or(cases),
        time,
    };
    (seed, budget)
}

/// The long run's: a seed of the clock's unless `DXDP_DIFF_SEED` gives one, for
/// `DXDP_DIFF_MINUTES` (10).
fn long_budget() -> (u64, Budget) {
    let seed = env_number("DXDP_DIFF_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let minutes = env_number("DXDP_DIFF_MINUTES").unwrap_or(10);
    let budget = Budget {
        first: env_number("DXDP_DIFF_FIRST").unwrap_or(0),
        cases: u64::MAX / 2,
        time: Duration::from_secs(minutes * 60),
    };
    (seed, budget)
}

/// CI's run: a fixed seed and a budget of cases, every one alike on both paths.
#[test]
fn exposed_ports_match_dockers_path() {
    if !prerequisites() {
        return;
    }
    assert_paths_match(exposed::ExposedPorts::new, ci_budget(CI_CASES, CI_TIME));
}

/// Cases of the long runs that found the fast path's own differences, sent again on every CI
/// run so that what was fixed stays fixed: (seed, case, what differed). Seed 39's are its
/// first live FINs on their last hop past CI's 110 cases (the generator searched for them):
/// the host's RST answered them on the fast path. Seed 9393's took the stack, whose conntrack
/// never saw their connection, until the client's parser took a hop-by-hop header of padding.
/// Seed 1207's took it too, on their last hop, where the stack's conntrack picked a segment far
/// out of the window up (Docker's path: the host's RST; dxdp's: "time exceeded"), or, a
/// fragment, not at all (dxdp's: the host's "parameter problem"). Seed 2607's were such
/// fragments with an RST or a FIN far out of the window, dropped on their last hop as a
/// carried connection's (dxdp's: nothing), which Docker's path leaves untranslated to the
/// host's reassembly ("parameter problem"). Not here: seed 712's case 1237, the harness's
/// (a request socket left over), which matched alone before its fix as after, and once differed
/// alone in CI all the same (docs/differential.md): a case that cannot fail for the fix and
/// can fail without it guards nothing.
const FOUND_BY_LONG_RUNS: &[(u64, u64, &str)] = &[
    (5151, 808, "ICMPv6 packet too big with a wrong checksum"),
    (5151, 1286, "ICMPv6 packet too big with a wrong checksum"),
    (
        5151,
        1565,
        "IPv6 UDP with a wrong checksum to the published port",
    ),
    (
        5151,
        1735,
        "IPv6 UDP with a wrong checksum to the published port",
    ),
    (5151, 1092, "an MTU error with IPv4 options about a reply"),
    (
        5151,
        330,
        "a packet too big with a hop-by-hop header about a reply",
    ),
    (
        5151,
        915,
        "a packet too big with a hop-by-hop header about a reply",
    ),
    (5151, 29, "a packet too big sent as a first fragment"),
    (5151, 79, "a packet too big sent as a first fragment"),
    (39, 380, "a live connection's FIN with hop limit 0"),
    (39, 2120, "a live connection's FIN with TTL 1"),
    (
        9393,
        154,
        "a live connection's IPv6 RST with a hop-by-hop header of padding",
    ),
    (
        9393,
        315,
        "a live connection's IPv6 data with a hop-by-hop header of padding",
    ),
    (
        1207,
        161,
        "a live connection's data out of the window with TTL 1",
    ),
    (
        1207,
        462,
        "a live connection's IPv6 ACK out of the window with hop limit 0",
    ),
    (
        1207,
        146,
        "a live connection's IPv6 RST as a first fragment with hop limit 1",
    ),
    (
        2607,
        819,
        "a live connection's IPv6 FIN out of the window as a first fragment with hop limit 1",
    ),
    (
        2607,
        895,
        "a live connection's IPv6 RST out of the window as a first fragment with hop limit 0",
    ),
    (
        3107,
        553,
        "a live connection's IPv6 FIN in the window as a first fragment",
    ),
    (
        712,
        728,
        "a live connection's IPv6 ACK out of the window as a first fragment with hop limit 1",
    ),
    (
        2718,
        544,
        "a live connection's IPv6 RST in the window as a first fragment",
    ),
];

/// The long runs' findings (`FOUND_BY_LONG_RUNS`), each case alone, as its rerun line does.
#[test]
fn exposed_ports_match_dockers_path_where_long_runs_found_differences() {
    if !prerequisites() {
        return;
    }
    assert_findings_match(&mut exposed::ExposedPorts::new(), FOUND_BY_LONG_RUNS);
}

/// Each of `findings` (seed, case, what differed) alone on `topology`, as its rerun line runs
/// it; fails if any differs again.
#[track_caller]
fn assert_findings_match<T: runner::Topology>(topology: &mut T, findings: &[(u64, u64, &str)]) {
    let mut differences = Vec::new();
    for &(seed, index, what) in findings {
        let budget = Budget {
            first: index,
            cases: 1,
            time: Duration::from_secs(60),
        };
        let report = runner::run(topology, seed, &budget);
        eprintln!("differential: {report} ({what})");
        assert_eq!(report.cases, 1, "seed {seed} case {index} did not run");
        differences.extend(report.differences);
    }
    assert!(
        differences.is_empty(),
        "{} of the long runs' findings differ again; each is printed above with its rerun command",
        differences.len()
    );
}

/// The long run, by hand (scripts/differential.sh --topology exposed).
#[test]
#[ignore = "long: scripts/differential.sh --topology exposed --seed N --minutes M"]
fn exposed_ports_match_dockers_path_long() {
    if !prerequisites() {
        return;
    }
    assert_paths_match(exposed::ExposedPorts::new, long_budget());
}

/// CI's run of the link topology: a fixed seed, a budget of cases, tc and xdp links.
#[test]
fn links_match_the_bridge() {
    if !prerequisites() {
        return;
    }
    assert_paths_match(
        links::Links::<segment::Bridge>::new,
        ci_budget(CI_LINK_CASES, CI_LINK_TIME),
    );
}

/// The long run of the link topology, by hand (scripts/differential.sh --topology links).
#[test]
#[ignore = "long: scripts/differential.sh --topology links --seed N --minutes M"]
fn links_match_the_bridge_long() {
    if !prerequisites() {
        return;
    }
    assert_paths_match(links::Links::<segment::Bridge>::new, long_budget());
}

/// CI's run of the link topology on a Swarm overlay network: a fixed seed, a budget of cases,
/// tc and xdp links inside the overlay's sandbox, Docker's path being its `br0`.
#[test]
fn overlay_links_match_the_overlay_bridge() {
    if !prerequisites() || !swarm_can_be_made() {
        return;
    }
    assert_paths_match(
        links::Links::<segment::Overlay>::new,
        ci_budget(CI_OVERLAY_CASES, CI_OVERLAY_TIME),
    );
}

/// The long run of the overlay link topology, by hand (scripts/differential.sh --topology
/// overlay).
#[test]
#[ignore = "long: scripts/differential.sh --topology overlay --seed N --minutes M"]
fn overlay_links_match_the_overlay_bridge_long() {
    if !prerequisites() || !swarm_can_be_made() {
        return;
    }
    assert_paths_match(links::Links::<segment::Overlay>::new, long_budget());
}

/// CI's run of the outbound topology (`dxdp egress`): a fixed seed, a budget of cases.
#[test]
fn outbound_connections_match_dockers_path() {
    if !prerequisites() {
        return;
    }
    assert_outbound_matches(ci_budget(CI_OUTBOUND_CASES, CI_OUTBOUND_TIME));
}

/// The outbound topology's long-run findings, as `FOUND_BY_LONG_RUNS` is the exposed one's.
const OUTBOUND_FOUND_BY_LONG_RUNS: &[(u64, u64, &str)] = &[
    (
        9393,
        200,
        "the server's FIN again after the fast path saw the connection close: the host's RST \
         answered it",
    ),
    (
        9393,
        63,
        "the server's segment at the live numbers with IPv4 options and TTL 0: left to the \
         stack as it came, conntrack's stale windows made it INVALID and the host's RST \
         answered it, where Docker's path answers time exceeded",
    ),
];

/// The outbound topology's long-run findings (`OUTBOUND_FOUND_BY_LONG_RUNS`), each case alone.
#[test]
fn outbound_connections_match_dockers_path_where_long_runs_found_differences() {
    if !prerequisites() {
        return;
    }
    assert_findings_match(&mut outbound::Outbound::new(), OUTBOUND_FOUND_BY_LONG_RUNS);
}

/// The long run of the outbound topology, by hand (scripts/differential.sh --topology
/// outbound).
#[test]
#[ignore = "long: scripts/differential.sh --topology outbound --seed N --minutes M"]
fn outbound_connections_match_dockers_path_long() {
    if !prerequisites() {
        return;
    }
    assert_outbound_matches(long_budget());
}

/// As [`assert_paths_match`] on the outbound topology, and the fast path carried some of the
/// cases: without it, Docker's path would only have been compared with itself.
fn assert_outbound_matches((seed, budget): (u64, Budget)) {
    let mut topology = outbound::Outbound::new();
    let report = runner::run(&mut topology, seed, &budget);
    assert_no_difference(&report);
    let carried = topology.carried();
    eprintln!(
        "differential: the egress fast path carried {carried} of the {} cases",
        report.cases
    );
    assert!(
        carried > 0 || report.cases < 10,
        "the egress fast path carried none of {} cases",
        report.cases
    );
}
