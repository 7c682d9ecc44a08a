//! Promise 4: no program or attachment leaks when workloads and the watch restart or go.

use super::*;

#[test]
fn no_program_or_attachment_leaks_when_workloads_or_the_watch_restart_or_go() {
    if !require_docker() {
        return;
    }
    let dxdp_programs = || -> BTreeSet<u32> {
        support::bpftool(&["prog", "show"])
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| matches!(p["name"].as_str(), Some("dxdp_tc" | "dxdp_xdp")))
            .filter_map(|p| p["id"].as_u64().map(|id| id as u32))
            .collect()
    };
    let programs_before = dxdp_programs();
    let mut world = World::private();
    let net = world.network("net", &[]);
    let group = format!("{}-g", world.prefix);
    let args = member(&net, &group, &[]);
    let members: Vec<String> = (0..4)
        .map(|i| world.run(&format!("m{i}"), &strs(&args), &[]))
        .collect();
    let mut watch = world.watch(&["--resync", "1"]);
    wait_links(
        &world.dxdp,
        &watch,
        &mesh(&members),
        Duration::from_secs(15),
    );
    assert_consistent(&world.dxdp, Some(&watch));
    let dir = world.dxdp.pin_dir.clone();
    let prog_ids = || {
        (
            pinned_prog_id(&dir.join("progs/dxdp_tc")),
            pinned_prog_id(&dir.join("progs/dxdp_xdp")),
        )
    };
    let progs = prog_ids();
    let ours = || -> BTreeSet<u32> {
        bpf_links()
            .into_iter()
            .filter(|(_, prog)| *prog == progs.0 || *prog == progs.1)
            .map(|(id, _)| id)
            .collect()
    };
    let attached = ours();
    assert_eq!(attached.len(), 4, "one attachment per member: {attached:?}");

    // A restarted watch adopts what is attached: same bpf_links, same programs.
    for how in ["kill -9", "SIGTERM"] {
        let seen = connects(&watch);
        if how == "kill -9" {
            watch.kill9();
        } else {
            assert_eq!(watch.terminate(), Some(0), "{}", watch.log_text());
        }
        watch.restart();
        assert!(wait_until(Duration::from_secs(10), || connects(&watch) > seen));
        thread::sleep(Duration::from_millis(1500)); // a reconcile and a resync
        assert_eq!(ours(), attached, "after {how} and a restart of the watch");
        assert_eq!(prog_ids(), progs, "programs reloaded after {how}");
        assert_consistent(&world.dxdp, Some(&watch));
    }

    // Two workloads restart: their old attachments go with their veths, new ones come.
    world.docker_ok(&["restart", "-t", "0", &members[0], &members[1]]);
    let veths: BTreeSet<u32> = members.iter().map(|m| world.veth(m, &net).1).collect();
    wait_status(
        &world.dxdp,
        Some(&watch),
        Duration::from_secs(15),
        "relinked",
        |s| {
            named_links(s) == mesh(&members)
                && s.interfaces
                    .iter()
                    .map(|i| i.ifindex)
                    .collect::<BTreeSet<_>>()
                    == veths
        },
    );
    let reattached = ours();
    assert_eq!(reattached.len(), 4, "{reattached:?}");
    assert_eq!(
        reattached.intersection(&attached).count(),
        2,
        "the untouched members keep their attachments: {attached:?} -> {reattached:?}"
    );
    assert_consistent(&world.dxdp, Some(&watch));

    // All go: back to the baseline of no attachment at all.
    world.remove(&members);
    wait_links(
        &world.dxdp,
        &watch,
        &BTreeSet::new(),
        Duration::from_secs(15),
    );
    assert!(
        wait_until(Duration::from_secs(5), || ours().is_empty()),
        "attachments left: {:?}",
        ours()
    );
    assert_eq!(world.dxdp.link_pins(), Vec::<String>::new());
    assert_eq!(prog_ids(), progs, "the pinned programs are loaded once");
    assert_consistent(&world.dxdp, Some(&watch));
    drop(watch);
    let programs_after = dxdp_programs();
    let new: Vec<u32> = programs_after
        .difference(&programs_before)
        .copied()
        .collect();
    eprintln!(
        "leaks: 4 attachments kept across 2 watch restarts, 2 replaced across 2 workload \
         restarts, 0 left after the workloads went; dxdp programs loaded on the host: {} \
         before, {} now ({new:?} new, ours {progs:?})",
        programs_before.len(),
        programs_after.len()
    );
    assert!(
        new.iter().all(|id| *id == progs.0 || *id == progs.1),
        "dxdp programs other than the pinned two appeared and stayed: {new:?} (ours {progs:?})"
    );
}
