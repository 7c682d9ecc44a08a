//! Churn: waves of 50 labeled containers (groups, peers, plain and opted-out ones) start, move
//! between networks, die, come back and go, under one `dxdp watch`. After every step the pinned
//! maps hold exactly the links the labels call for (computed from the README's rules by
//! `support::labeled`), each between the right veths, and nothing else; the watch's memory stays
//! flat over the waves. (How long a reconcile takes as the fleet grows is the `fleet` area's.)
//!
//! Runs against a private dockerd (`World::private`), so the expected link set is exact.

use std::{collections::BTreeSet, time::Instant};

use crate::support::{
    Rng, Spec, World, converge, expected, pick, require_docker, settled_rss, soak, start_all,
};

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
