//! Reliability promises, each bounded in time (`DXDP_SOAK=1` runs more rounds):
//!
//! 1. no misdelivery: a sniffer on the bridge sees none of a linked pair's frames while the pair
//!    restarts and is replaced by containers with the same IPs and MACs, and afterwards every map
//!    entry belongs to a link between live veths;
//! 2. no loss across `kill -9` of the watch in the middle of reconciles: not one ping lost, the
//!    TCP stream never reset, the pinned state converges;
//! 3. the watch survives dockerd going away and coming back (with and without live-restore);
//! 4. no program or attachment leaks when workloads and the watch restart or go;
//! 5. a container started while the watch starts is linked at once, without a resync;
//! 7. `--max-links` caps the maps with whole links only, and the watch keeps serving;
//! 8. bad input gets a clear error and changes nothing (the rows not covered by the `docker` and
//!    `netns_datapath` areas; docs/errors.md lists them all);
//! 10. pins and the Docker socket are never made more accessible.
//!
//! One module per promise. The Docker tests run against a private dockerd (`World::private`), so
//! that they see only their own containers and may stop the daemon; the rest use network
//! namespaces (`Topology`).

use std::{
    collections::{BTreeMap, BTreeSet},
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
    thread,
    time::{Duration, Instant},
};

use crate::support::{
    self, DOCKER, DXDP, Dxdp, LinkStatus, Rng, Status, Topology, Watch, World, bpf_links,
    host_tx_packets, link_between, must, netns_rx_packets, pinned_prog_id, pinned_state_problems,
    require_docker, require_privileges, run, run_for, soak, wait_until, xdp_prog_id,
};

mod bad_input;
mod capacity;
mod dockerd_restart;
mod kill_watch;
mod leaks;
mod misdelivery;
mod privileges;
mod startup_race;

// ---------------------------------------------------------------------------------------------
// Helpers

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `--network NET -l dxdp.enable=true -l dxdp.group=GROUP` and `extra`.
fn member(net: &str, group: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["--network", net, "-l", "dxdp.enable=true", "-l"]
        .map(str::to_owned)
        .to_vec();
    v.push(format!("dxdp.group={group}"));
    v.extend(extra.iter().map(|s| (*s).to_owned()));
    v
}

fn sorted_pair(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_owned(), b.to_owned())
    } else {
        (b.to_owned(), a.to_owned())
    }
}

/// Links by the names of their endpoints, each pair sorted.
fn named_links(status: &Status) -> BTreeSet<(String, String)> {
    status
        .links
        .iter()
        .map(|l| sorted_pair(&l.low_name, &l.high_name))
        .collect()
}

/// Every pair of `names`.
fn mesh(names: &[String]) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (i, x) in names.iter().enumerate() {
        for y in &names[i + 1..] {
            out.insert(sorted_pair(x, y));
        }
    }
    out
}

/// Polls `dxdp status` until `check` holds; panics with the last status and the watch log.
#[track_caller]
fn wait_status(
    dxdp: &Dxdp,
    watch: Option<&Watch>,
    within: Duration,
    what: &str,
    mut check: impl FnMut(&Status) -> bool,
) -> Status {
    let mut last = None;
    let ok = wait_until(within, || {
        let status = dxdp.status();
        let done = check(&status);
        last = Some(status);
        done
    });
    let last = last.expect("at least one status");
    assert!(
        ok,
        "{what}: not reached within {within:?}\n--- last status\n{:#?}\n--- watch log\n{}",
        named_links(&last),
        watch.map(Watch::log_text).unwrap_or_default()
    );
    last
}

/// Waits until the links are exactly `expected` (by names).
#[track_caller]
fn wait_links(
    dxdp: &Dxdp,
    watch: &Watch,
    expected: &BTreeSet<(String, String)>,
    within: Duration,
) -> Status {
    wait_status(
        dxdp,
        Some(watch),
        within,
        &format!("links {expected:?}"),
        |s| named_links(s) == *expected,
    )
}

/// Waits until `a` and `b` are linked through their current veths on `net`.
#[track_caller]
fn wait_linked_via_current_veths(
    world: &World,
    watch: &Watch,
    a: &str,
    b: &str,
    net: &str,
    within: Duration,
) -> LinkStatus {
    let (va, vb) = (world.veth(a, net).1, world.veth(b, net).1);
    let status = wait_status(
        &world.dxdp,
        Some(watch),
        within,
        &format!("{a} <-> {b} via ifindexes {va} and {vb}, and nothing else"),
        |s| {
            s.links.len() == 1
                && s.link_between(va, vb)
                    .is_some_and(|l| sorted_pair(&l.low_name, &l.high_name) == sorted_pair(a, b))
        },
    );
    status.link_between(va, vb).cloned().expect("linked")
}

#[track_caller]
fn assert_consistent(dxdp: &Dxdp, watch: Option<&Watch>) {
    let problems = pinned_state_problems(dxdp);
    assert!(
        problems.is_empty(),
        "the pinned state is not exactly the links:\n{}\n--- watch log\n{}",
        problems.join("\n"),
        watch.map(Watch::log_text).unwrap_or_default()
    );
}

/// `ping -c COUNT -i INTERVAL` inside a container; returns (transmitted, received).
fn docker_ping(world: &World, from: &str, to_ip: &str, count: u32, interval: &str) -> (u64, u64) {
    let count_s = count.to_string();
    let run = world.docker(&[
        "exec", from, "ping", "-q", "-n", "-c", &count_s, "-i", interval, "-W", "1", to_ip,
    ]);
    ping_counts(&run.stdout).unwrap_or_else(|| panic!("no ping statistics: {run}"))
}

/// (transmitted, received) from ping's summary line.
fn ping_counts(out: &str) -> Option<(u64, u64)> {
    let line = out.lines().find(|l| l.contains("packets transmitted"))?;
    let mut numbers = line
        .split(',')
        .map(|part| part.split_whitespace().next().and_then(|n| n.parse().ok()));
    Some((numbers.next()??, numbers.next()??))
}

/// A one-off iperf3 server in `server` (port 5201), listening before this returns.
#[track_caller]
fn iperf3_server(world: &World, server: &str) {
    world.docker_ok(&["exec", "-d", server, "iperf3", "-s", "-1", "-p", "5201"]);
    let listening = wait_until(Duration::from_secs(10), || {
        !world
            .docker(&["exec", server, "ss", "-Hltn", "sport = :5201"])
            .stdout
            .trim()
            .is_empty()
    });
    assert!(listening, "iperf3 server in {server} does not listen");
}

/// A file or directory of the test's own, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Counts lines of a file (tcpdump's output).
fn line_count(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn has_tool(tool: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(tool).is_file())
}

/// Every file and directory under `dir`: path, mode, owner.
fn pin_tree(dir: &Path) -> Vec<(PathBuf, u32, u32)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&d) else {
            continue;
        };
        out.push((d.clone(), meta.mode(), meta.uid()));
        if meta.is_dir() {
            for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                todo.push(entry.path());
            }
        }
    }
    out.sort();
    out
}

/// A link without its counters: ifindexes, names, datapath.
type LinkKey = (u32, u32, String, String, String);

/// What a refusal must leave exactly as it was: links (without their counters), managed
/// interfaces and every pinned file.
type Snapshot = (Vec<LinkKey>, Vec<u32>, Vec<PathBuf>);

fn snapshot(dxdp: &Dxdp) -> Snapshot {
    let status = dxdp.status();
    let interfaces = status.interfaces.iter().map(|i| i.ifindex).collect();
    let files = pin_tree(&dxdp.pin_dir)
        .into_iter()
        .map(|(p, ..)| p)
        .collect();
    (snapshot_links(&status), interfaces, files)
}

fn snapshot_links(status: &Status) -> Vec<LinkKey> {
    status
        .links
        .iter()
        .map(|l| {
            (
                l.low_ifindex,
                l.high_ifindex,
                l.low_name.clone(),
                l.high_name.clone(),
                l.datapath.clone(),
            )
        })
        .collect()
}

/// Asserts a command exited 1 with one line of error containing every `needle`.
#[track_caller]
fn assert_refused(run: &support::Run, needles: &[&str]) {
    assert_eq!(run.code(), Some(1), "{run}");
    for needle in needles {
        assert!(run.stderr.contains(needle), "expected {needle:?}: {run}");
    }
    assert!(
        run.stderr.trim().lines().count() == 1,
        "one line of error, not a trace: {run}"
    );
}

/// How often the watch logged that it connected to dockerd.
fn connects(watch: &Watch) -> usize {
    watch.log_text().matches("connected to dockerd").count()
}
