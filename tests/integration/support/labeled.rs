//! Labeled containers as a test plans them, and the links their labels call for: the plan
//! ([`Spec`]), the README's rules computed here ([`expected`]), what the pinned state holds
//! ([`actual`]), and waiting until both agree, entry by entry ([`converge`]). Shared by the
//! `churn` and `fleet` areas, which run against a private dockerd so the expected set is exact.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::Path,
    thread,
    time::{Duration, Instant},
};

use super::{
    docker_cli::IMAGE,
    dxdp::{DXDP, Dxdp, Status},
    host::host_veth,
    pinned::pinned_state_problems,
    process::{Run, run_for, wait_until},
    rng::Rng,
    watch::Watch,
    world::World,
};

/// One container as the test planned it.
#[derive(Clone, Debug)]
pub struct Spec {
    pub name: String,
    pub enable: Option<bool>,
    pub peers: Vec<String>,
    pub groups: Vec<String>,
    pub networks: BTreeSet<String>,
    pub running: bool,
}

impl Spec {
    /// An enabled container in one group, on one network, running.
    pub fn grouped(name: String, group: String, network: &str) -> Self {
        Self {
            name,
            enable: Some(true),
            peers: vec![],
            groups: vec![group],
            networks: BTreeSet::from([network.to_owned()]),
            running: true,
        }
    }

    /// `-l KEY=VALUE` arguments of `docker run` for its labels.
    pub fn labels(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut label = |kv: String| {
            out.push("-l".to_owned());
            out.push(kv);
        };
        if let Some(enable) = self.enable {
            label(format!("dxdp.enable={enable}"));
        }
        if !self.peers.is_empty() {
            label(format!("dxdp.peers={}", self.peers.join(",")));
        }
        if !self.groups.is_empty() {
            label(format!("dxdp.group={}", self.groups.join(",")));
        }
        out
    }
}

/// Links as (name, name, network), names sorted.
pub type Expected = BTreeSet<(String, String, String)>;

fn sorted_pair(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_owned(), b.to_owned())
    } else {
        (b.to_owned(), a.to_owned())
    }
}

/// The links the labels call for (README, "Rules"): a pair asked for by either side (a peer, or
/// a shared group of enabled containers), both running, neither opted out, on the first shared
/// network by name. As (name, name, network), names sorted.
pub fn expected(specs: &[Spec]) -> Expected {
    let by_name: HashMap<&str, &Spec> = specs.iter().map(|s| (s.name.as_str(), s)).collect();
    let mut asked = BTreeSet::new();
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in specs.iter().filter(|s| s.enable == Some(true) && s.running) {
        for peer in &s.peers {
            if peer != &s.name && by_name.contains_key(peer.as_str()) {
                asked.insert(sorted_pair(&s.name, peer));
            }
        }
        for g in &s.groups {
            groups.entry(g).or_default().push(&s.name);
        }
    }
    for members in groups.values() {
        for (i, x) in members.iter().enumerate() {
            for y in &members[i + 1..] {
                asked.insert(sorted_pair(x, y));
            }
        }
    }
    let mut out = BTreeSet::new();
    for (x, y) in asked {
        let (sx, sy) = (by_name[x.as_str()], by_name[y.as_str()]);
        if !sx.running || !sy.running || sx.enable == Some(false) || sy.enable == Some(false) {
            continue;
        }
        if let Some(net) = sx.networks.intersection(&sy.networks).next() {
            out.insert((x, y, net.clone()));
        }
    }
    out
}

/// The links `dxdp status` lists, in the shape of [`expected`].
pub fn actual(status: &Status) -> Expected {
    status
        .links
        .iter()
        .map(|l| {
            let (x, y) = sorted_pair(&l.low_name, &l.high_name);
            (x, y, l.network.clone())
        })
        .collect()
}

/// Host veth ifindex of every (container, network), from one `docker inspect` of them all.
pub fn veths(world: &World, names: &[&str]) -> HashMap<(String, String), u32> {
    let mut out = HashMap::new();
    if names.is_empty() {
        return out;
    }
    let mut args = vec![
        "inspect",
        "-f",
        "{{.Name}} {{.State.Pid}}{{range $k, $v := .NetworkSettings.Networks}} {{$k}}={{$v.MacAddress}}{{end}}",
    ];
    args.extend_from_slice(names);
    for line in world.docker_ok(&args).lines() {
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or_default().trim_start_matches('/');
        let pid: u32 = words.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if pid == 0 {
            continue;
        }
        for attachment in words {
            if let Some((net, mac)) = attachment.split_once('=') {
                out.insert((name.to_owned(), net.to_owned()), host_veth(pid, mac).1);
            }
        }
    }
    out
}

/// Waits (up to `within`) until the links in `dxdp`'s pin directory are exactly what the specs
/// call for, each between the right veths, and the pinned maps hold nothing else; panics with
/// the difference and the watch's log otherwise. Returns how long it took.
#[track_caller]
pub fn converge_within(
    world: &World,
    dxdp: &Dxdp,
    watch: &Watch,
    specs: &[Spec],
    step: &str,
    within: Duration,
) -> Duration {
    let want = expected(specs);
    let started = Instant::now();
    let mut last = Expected::new();
    let ok = wait_until(within, || {
        last = actual(&dxdp.status());
        last == want
    });
    assert!(
        ok,
        "{step}: links differ after {within:?}\n--- missing\n{:#?}\n--- unexpected\n{:#?}\n\
         --- watch log\n{}",
        want.difference(&last).collect::<Vec<_>>(),
        last.difference(&want).collect::<Vec<_>>(),
        watch.log_text()
    );
    let took = started.elapsed();
    let running: Vec<&str> = specs
        .iter()
        .filter(|s| s.running)
        .map(|s| s.name.as_str())
        .collect();
    let veths = veths(world, &running);
    let status = dxdp.status();
    for l in &status.links {
        let ends = [
            veths.get(&(l.low_name.clone(), l.network.clone())),
            veths.get(&(l.high_name.clone(), l.network.clone())),
        ];
        let mut got = [l.low_ifindex, l.high_ifindex];
        got.sort();
        let mut wanted = ends.map(|v| v.copied().unwrap_or(0));
        wanted.sort();
        assert_eq!(
            got, wanted,
            "{step}: {l:?} is not between the current veths"
        );
    }
    let problems = pinned_state_problems(dxdp);
    assert!(
        problems.is_empty(),
        "{step}: the pinned state is not exactly the links:\n{}",
        problems.join("\n")
    );
    took
}

/// [`converge_within`] 40 s, on the world's own pin directory.
#[track_caller]
pub fn converge(world: &World, watch: &Watch, specs: &[Spec], step: &str) -> Duration {
    converge_within(
        world,
        &world.dxdp,
        watch,
        specs,
        step,
        Duration::from_secs(40),
    )
}

/// `docker run -d` of every spec on `first_network`, four at a time; the world removes them.
pub fn start_all(world: &mut World, specs: &[Spec], first_network: &str) {
    for s in specs {
        world.track(&s.name);
    }
    let jobs: Vec<Vec<String>> = specs
        .iter()
        .map(|s| {
            let mut argv: Vec<String> =
                ["run", "-d", "--name", &s.name, "--network", first_network]
                    .map(str::to_owned)
                    .to_vec();
            argv.extend(s.labels());
            argv.push(IMAGE.to_owned());
            argv
        })
        .collect();
    let chunk = jobs.len().div_ceil(4).max(1);
    let handles: Vec<_> = jobs
        .chunks(chunk)
        .map(|chunk| {
            let cli = world.cli.clone();
            let chunk = chunk.to_vec();
            thread::spawn(move || {
                for argv in chunk {
                    let args: Vec<&str> = argv.iter().map(String::as_str).collect();
                    cli.run(&args).assert_success();
                }
            })
        })
        .collect();
    let mut failed = None;
    for h in handles {
        if let Err(panic) = h.join() {
            failed = Some(panic);
        }
    }
    if let Some(panic) = failed {
        std::panic::resume_unwind(panic);
    }
}

/// Picks `n` distinct indexes below `len`.
pub fn pick(rng: &mut Rng, len: usize, n: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..len).collect();
    for i in 0..all.len() {
        let j = i + rng.below((all.len() - i) as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(n);
    all
}

/// The watch's resident memory once idle: the least of 3 s of samples. A reconcile holds some
/// 16 MB for a moment (the eBPF object and the kernel's BTF, parsed to open the pinned maps),
/// and one sample may catch it; what a leak keeps stays in every sample.
pub fn settled_rss(watch: &Watch) -> u64 {
    let mut least = u64::MAX;
    for _ in 0..30 {
        least = least.min(watch.rss_kib());
        thread::sleep(Duration::from_millis(100));
    }
    least
}

/// One reconcile: `DOCKER_HOST=… dxdp --pin-dir DIR watch --once`, which must succeed and link
/// everything; returns how long it took.
#[track_caller]
pub fn watch_once(world: &World, pin_dir: &Path) -> Duration {
    watch_once_with(world, pin_dir, &[]).0
}

/// [`watch_once`] with more arguments for `watch`; returns how long it took and its output.
#[track_caller]
pub fn watch_once_with(world: &World, pin_dir: &Path, extra: &[&str]) -> (Duration, Run) {
    let env = format!(
        "DOCKER_HOST={}",
        world.docker_host().expect("a private dockerd")
    );
    let dir = pin_dir.to_string_lossy().into_owned();
    let mut argv = vec!["env", &env, DXDP, "--pin-dir", &dir, "watch", "--once"];
    argv.extend_from_slice(extra);
    let started = Instant::now();
    let run = run_for(&argv, Duration::from_secs(300));
    let took = started.elapsed();
    assert!(run.success(), "{run}");
    assert!(!run.stderr.contains("cannot link"), "{run}");
    (took, run)
}
