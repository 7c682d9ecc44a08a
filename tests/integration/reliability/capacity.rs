//! Promise 7: `--max-links` caps the maps with whole links only, and the watch keeps serving.

use super::*;

#[test]
fn max_links_caps_the_maps_with_whole_links_and_the_watch_keeps_serving() {
    if !require_docker() {
        return;
    }
    let run0 = run(&[DXDP, "--max-links", "0", "status"]);
    assert_eq!(run0.code(), Some(2), "{run0}");
    let mut world = World::private();
    let net = world.network("net", &[]);
    let group = format!("{}-g", world.prefix);
    let args = member(&net, &group, &[]);
    let members: Vec<String> = (0..4)
        .map(|i| world.run(&format!("m{i}"), &strs(&args), &[]))
        .collect();
    let watch = world.watch(&["--max-links", "2", "--resync", "1"]);
    wait_status(
        &world.dxdp,
        Some(&watch),
        Duration::from_secs(15),
        "2 links",
        |s| s.links.len() == 2,
    );
    thread::sleep(Duration::from_secs(3)); // three resyncs retry the other four
    let status = world.dxdp.status();
    assert_eq!(status.links.len(), 2, "{status:#?}");
    assert_consistent(&world.dxdp, Some(&watch));
    let max_entries = |map: &str| -> u64 {
        let path = world.dxdp.pin_dir.join("maps").join(map);
        let out = must(&[
            "bpftool",
            "-j",
            "map",
            "show",
            "pinned",
            &path.to_string_lossy(),
        ]);
        serde_json::from_str::<serde_json::Value>(&out).expect("json")["max_entries"]
            .as_u64()
            .expect("max_entries")
    };
    assert_eq!(
        (max_entries("DXDP_LINK_META"), max_entries("DXDP_LINKS")),
        (2, 4)
    );

    // The log names a pair that was left out, and why.
    let installed = named_links(&status);
    let left_out: Vec<(String, String)> = mesh(&members).difference(&installed).cloned().collect();
    let log = watch.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("cannot link") && l.contains("is full"))
        .unwrap_or_else(|| panic!("no 'cannot link ... is full' in the log:\n{log}"));
    assert!(line.contains("--max-links"), "{line}");
    assert!(
        left_out.iter().any(|(x, y)| {
            (line.contains(&format!("a={x}")) && line.contains(&format!("b={y}")))
                || (line.contains(&format!("a={y}")) && line.contains(&format!("b={x}")))
        }),
        "the line names none of the left-out pairs {left_out:?}: {line}"
    );

    // Whole links: each carries both ways, now and after more resyncs.
    let ips: BTreeMap<String, String> = members
        .iter()
        .map(|m| (m.clone(), world.ip(m, &net)))
        .collect();
    for round in 0..2 {
        let before = world.dxdp.status();
        for l in &before.links {
            assert_eq!(
                docker_ping(&world, &l.low_name, &ips[&l.high_name], 20, "0.01"),
                (20, 20)
            );
            assert_eq!(
                docker_ping(&world, &l.high_name, &ips[&l.low_name], 20, "0.01"),
                (20, 20)
            );
        }
        let after = world.dxdp.status();
        for l in &before.links {
            let now = link_between(&after, &l.low_name, &l.high_name).expect("still linked");
            assert!(
                now.low_to_high.packets >= l.low_to_high.packets + 40
                    && now.high_to_low.packets >= l.high_to_low.packets + 40,
                "round {round}: {l:?} -> {now:?}"
            );
        }
        assert_eq!(named_links(&after), installed);
        thread::sleep(Duration::from_secs(2));
    }
    let mut watch = watch;
    assert!(watch.alive(), "{}", watch.log_text());
    eprintln!(
        "capacity: --max-links 2 with 6 pairs wanted: installed {installed:?}; log: {}",
        line.trim()
    );
}
