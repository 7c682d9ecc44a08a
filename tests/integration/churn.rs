//! Churn: waves of 50 labeled containers (groups, peers, plain and opted-out ones) start, move
//! between networks, die, come back and go, under one `dxdp watch`. After every step the pinned
//! maps hold exactly the links the labels call for (computed here from the README's rules), each
//! between the right veths, and nothing else; the watch's memory stays flat over the waves. Also
//! measures how long one reconcile (`watch --once`) takes with 10, 50 and 200 labeled containers.
//!
//! Runs against a private dockerd (`World::private`), so the expected link set is exact.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    thread,
    time::{Duration, Instant},
};

use crate::support::{
    self, DXDP, Dxdp, PinDir, Rng, Status, Watch, World, host_veth, next_id, pinned_state_problems,
    require_docker, run_for, soak, wait_until,
};

/// One container as the test planned it.
#[derive(Clone, Debug)]
struct Spec {
    name: String,
    enable: Option<bool>,
    peers: Vec<String>,
    groups: Vec<String>,
    networks: BTreeSet<String>,
    running: bool,
}

impl Spec {
    fn labels(&self) -> Vec<String> {
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

type Expected = BTreeSet<(String, String, String)>;

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
fn expected(specs: &[Spec]) -> Expected {
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

fn actual(status: &Status) -> Expected {
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
fn veths(world: &World, names: &[&str]) -> HashMap<(String, String), u32> {
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

/// Waits until the links are exactly what the specs call for, each between the right veths, and
/// the pinned maps hold nothing else. Returns how long it took.
#[track_caller]
fn converge(world: &World, watch: &Watch, specs: &[Spec], step: &str) -> Duration {
    let want = expected(specs);
    let started = Instant::now();
    let mut last = Expected::new();
    let ok = wait_until(Duration::from_secs(40), || {
        last = actual(&world.dxdp.status());
        last == want
    });
    assert!(
        ok,
        "{step}: links differ after 40 s\n--- missing\n{:#?}\n--- unexpected\n{:#?}\n--- watch log\n{}",
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
    let status = world.dxdp.status();
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
    let problems = pinned_state_problems(&world.dxdp);
    assert!(
        problems.is_empty(),
        "{step}: the pinned state is not exactly the links:\n{}",
        problems.join("\n")
    );
    took
}

/// `docker run -d` of every spec, four at a time.
fn start_all(world: &mut World, specs: &[Spec], first_network: &str) {
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
            argv.push(support::IMAGE.to_owned());
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
    for h in handles {
        h.join().expect("docker run thread");
    }
}

/// Picks `n` distinct indexes below `len`.
fn pick(rng: &mut Rng, len: usize, n: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..len).collect();
    for i in 0..all.len() {
        let j = i + rng.below((all.len() - i) as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(n);
    all
}

#[test]
fn waves_of_50_containers_keep_the_maps_exact_and_the_watch_flat() {
    if !require_docker() {
        return;
    }
    let waves = if soak() { 10 } else { 3 };
    assert!(waves >= 2, "the first wave is a warm-up");
    let mut rng = Rng::seeded("churn");
    let started = Instant::now();
    let mut world = World::private();
    let net_a = world.network("a", &[]);
    let net_b = world.network("b", &[]);
    // One malloc arena: by default glibc gives the watch's short-lived blocking threads arenas
    // of their own, each keeping the peak of one reconcile, so that RSS climbs in steps for a
    // few waves before it levels off (15, 15, 24, 44, 44, 44… MB over ten waves) with no leak at
    // all. With one arena it measures what the watch keeps.
    let watch = world.watch_with_env(&["--resync", "5"], &[("MALLOC_ARENA_MAX", "1")]);
    let mut rss = Vec::new();
    let mut report = Vec::new();
    for w in 0..waves {
        let names: Vec<String> = (0..50)
            .map(|i| format!("{}-w{w}-{i:02}", world.prefix))
            .collect();
        let mut specs: Vec<Spec> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut s = Spec {
                    name: name.clone(),
                    enable: None,
                    peers: vec![],
                    groups: vec![],
                    networks: BTreeSet::from([net_a.clone()]),
                    running: true,
                };
                match i {
                    // Six groups of four.
                    0..24 => {
                        s.enable = Some(true);
                        s.groups = vec![format!("{}-w{w}-g{}", world.prefix, i / 4)];
                    }
                    // Peers: one or two other containers of the wave, of any kind.
                    24..40 => {
                        s.enable = Some(true);
                        let n = 1 + rng.below(2) as usize;
                        s.peers = pick(&mut rng, 50, n + 1)
                            .into_iter()
                            .filter(|&j| j != i)
                            .take(n)
                            .map(|j| names[j].clone())
                            .collect();
                    }
                    // Plain containers that peers may name.
                    40..45 => {}
                    // Opted out: whoever names them gets no link.
                    _ => s.enable = Some(false),
                }
                s
            })
            .collect();
        let t = Instant::now();
        start_all(&mut world, &specs, &net_a);
        let started_in = t.elapsed();
        let up = converge(&world, &watch, &specs, &format!("wave {w}: 50 started"));
        let links_up = expected(&specs).len();

        // Network churn: ten join network b, five of them then leave a.
        let movers = pick(&mut rng, 50, 10);
        for &i in &movers {
            world.docker_ok(&["network", "connect", &net_b, &specs[i].name]);
            specs[i].networks.insert(net_b.clone());
        }
        for &i in &movers[..5] {
            world.docker_ok(&["network", "disconnect", &net_a, &specs[i].name]);
            specs[i].networks.remove(&net_a);
        }
        converge(
            &world,
            &watch,
            &specs,
            &format!("wave {w}: networks changed"),
        );

        // Fifteen die; five of them come back.
        let dying = pick(&mut rng, 50, 15);
        let mut kill = vec!["kill"];
        kill.extend(dying.iter().map(|&i| specs[i].name.as_str()));
        world.docker_ok(&kill);
        for &i in &dying {
            specs[i].running = false;
        }
        converge(&world, &watch, &specs, &format!("wave {w}: 15 killed"));
        let mut start = vec!["start"];
        start.extend(dying[..5].iter().map(|&i| specs[i].name.as_str()));
        world.docker_ok(&start);
        for &i in &dying[..5] {
            specs[i].running = true;
        }
        converge(&world, &watch, &specs, &format!("wave {w}: 5 restarted"));
        let peak = watch.rss_kib();

        // All go.
        world.remove(&names);
        for s in &mut specs {
            s.running = false;
        }
        converge(&world, &watch, &[], &format!("wave {w}: all removed"));
        assert!(world.dxdp.link_pins().is_empty());
        let after = settled_rss(&watch);
        rss.push(after);
        report.push(format!(
            "wave {w}: 50 started in {started_in:?}, {links_up} links converged {up:?} after; \
             RSS {peak} KiB at the peak, {after} KiB after (settled)"
        ));
    }
    for line in &report {
        eprintln!("churn: {line}");
    }
    eprintln!(
        "churn: {waves} waves in {:?}, watch RSS after each wave {rss:?} KiB",
        started.elapsed()
    );
    // The first wave only warms up (the heap grows to its working size): the baseline is after
    // wave 1, and no later wave may grow past 1.5 times that, as a leak proportional to churn
    // would, wave after wave.
    let baseline = rss[1] as f64;
    for (w, kib) in rss.iter().enumerate() {
        assert!(
            *kib < 100 * 1024,
            "the watch uses {kib} KiB after wave {w}: {rss:?}"
        );
        assert!(
            w < 1 || (*kib as f64) < baseline * 1.5,
            "the watch grew from {baseline} KiB after wave 1 to {kib} KiB after wave {w}: {rss:?}"
        );
    }
    assert!(
        !watch.log_text().contains("panicked"),
        "{}",
        watch.log_text()
    );
}

/// The watch's resident memory once idle: the least of 3 s of samples. A reconcile holds some
/// 16 MB for a moment (the eBPF object and the kernel's BTF, parsed to open the pinned maps),
/// and one sample may catch it; what a leak keeps stays in every sample.
fn settled_rss(watch: &Watch) -> u64 {
    let mut least = u64::MAX;
    for _ in 0..30 {
        least = least.min(watch.rss_kib());
        thread::sleep(Duration::from_millis(100));
    }
    least
}

/// One reconcile: `DOCKER_HOST=… dxdp --pin-dir DIR watch --once`.
fn watch_once(world: &World, pin_dir: &std::path::Path) -> Duration {
    let env = format!(
        "DOCKER_HOST={}",
        world.docker_host().expect("a private dockerd")
    );
    let dir = pin_dir.to_string_lossy().into_owned();
    let started = Instant::now();
    let run = run_for(
        &["env", &env, DXDP, "--pin-dir", &dir, "watch", "--once"],
        Duration::from_secs(300),
    );
    let took = started.elapsed();
    assert!(run.success(), "{run}");
    assert!(!run.stderr.contains("cannot link"), "{run}");
    took
}

#[test]
fn reconcile_time_as_the_number_of_containers_grows() {
    if !require_docker() {
        return;
    }
    let counts: &[usize] = &[10, 50, 200];
    let mut world = World::private();
    let net = world.network("net", &[]);
    let mut specs: Vec<Spec> = Vec::new();
    let mut figures = Vec::new();
    for &n in counts {
        // Groups of five: ten links each, two per container.
        let more: Vec<Spec> = (specs.len()..n)
            .map(|i| Spec {
                name: format!("{}-c{i:03}", world.prefix),
                enable: Some(true),
                peers: vec![],
                groups: vec![format!("{}-g{}", world.prefix, i / 5)],
                networks: BTreeSet::from([net.clone()]),
                running: true,
            })
            .collect();
        start_all(&mut world, &more, &net);
        specs.extend(more);
        let pins = PinDir::new(next_id());
        let cold = watch_once(&world, &pins.path);
        let warm = watch_once(&world, &pins.path);
        let dxdp = Dxdp {
            pin_dir: pins.path.clone(),
        };
        let links = actual(&dxdp.status());
        assert_eq!(links, expected(&specs), "{n} containers");
        assert!(pinned_state_problems(&dxdp).is_empty());
        figures.push(format!(
            "{n} containers, {} links: first reconcile {cold:?} (links made), next {warm:?} \
             (nothing to change)",
            links.len()
        ));
    }
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    world.remove(&names);
    for line in figures {
        eprintln!("reconcile time: {line}");
    }
}
