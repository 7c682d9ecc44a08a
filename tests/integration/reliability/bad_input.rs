//! Promise 8: bad input gets a clear error and changes nothing (the rows not covered by the
//! `docker` and `netns_datapath` areas; docs/errors.md lists them all).

use super::*;

/// Not root: every privileged command says what it needs, and touches nothing.
#[test]
fn bad_input_not_root_is_refused_with_what_it_needs() {
    if !require_privileges() {
        return;
    }
    let topo = Topology::new(2);
    let (a, b) = (topo.node(0), topo.node(1));
    topo.dxdp.link(a, b, "tc");
    let before = snapshot(&topo.dxdp);
    // A copy anyone can run: the build directory may not be reachable for `nobody`.
    let binary = Scratch(std::env::temp_dir().join(format!("dxdp-nobody-{}", std::process::id())));
    let binary = &binary.0;
    std::fs::copy(DXDP, binary).expect("copy dxdp");
    std::fs::set_permissions(binary, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let binary_s = binary.to_string_lossy().into_owned();
    let dir = topo.pin_dir().to_string_lossy().into_owned();
    let (sa, sb) = (a.spec(), b.spec());
    let commands: [&[&str]; 7] = [
        &["status"],
        &["status", "--json"],
        &["link", &sa, &sb],
        &["unlink", &sa, &sb],
        &["cleanup"],
        &["watch", "--once"],
        &["bench", &sa, &sb, "--quick"],
    ];
    for args in commands {
        let mut argv = vec![
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            &binary_s,
            "--pin-dir",
            &dir,
        ];
        argv.extend_from_slice(args);
        let out = run(&argv);
        assert_refused(
            &out,
            &[
                &format!("`dxdp {}` needs root", args[0]),
                "CAP_BPF",
                "CAP_NET_ADMIN",
                "CAP_SYS_ADMIN",
            ],
        );
    }
    assert_eq!(snapshot(&topo.dxdp), before);
}

/// A pin directory outside bpffs: refused, and nothing is created there.
#[test]
fn bad_input_a_pin_dir_outside_bpffs_is_refused_and_nothing_is_created() {
    if !require_privileges() {
        return;
    }
    let topo = Topology::new(2);
    let (a, b) = (topo.node(0), topo.node(1));
    let base = Scratch(std::env::temp_dir().join(format!("dxdp-nobpffs-{}", std::process::id())));
    let base = &base.0;
    let _ = std::fs::remove_dir_all(base);
    let missing = base.join("pins");
    std::fs::create_dir_all(base).expect("scratch dir");
    let existing = base.join("existing");
    std::fs::create_dir(&existing).expect("existing dir");
    let (sa, sb) = (a.spec(), b.spec());
    for dir in [&missing, &existing] {
        let d = dir.to_string_lossy().into_owned();
        for args in [
            vec!["link", sa.as_str(), sb.as_str()],
            vec!["status"],
            vec!["unlink", sa.as_str(), sb.as_str()],
            vec!["cleanup"],
        ] {
            let mut argv = vec![DXDP, "--pin-dir", &d];
            argv.extend_from_slice(&args);
            let out = run(&argv);
            if dir == &missing && args[0] != "link" {
                // Nothing there to show or remove: these say so and succeed, or (unlink) fail
                // for lack of a link; none creates anything.
                assert!(!dir.exists(), "{out}");
                continue;
            }
            assert_refused(&out, &["is not on a BPF filesystem", "mount -t bpf"]);
            assert!(
                !missing.exists(),
                "{} was created: {out}",
                missing.display()
            );
            assert_eq!(
                std::fs::read_dir(&existing).expect("readdir").count(),
                0,
                "something was created in {}: {out}",
                existing.display()
            );
        }
    }
    // The watch: its reconcile fails, and `--once` says so in its exit status.
    let docker_up =
        support::try_run(&[DOCKER, "info"], Duration::from_secs(10)).is_ok_and(|r| r.success());
    for dir in [&missing, &existing] {
        if !docker_up && dir == &missing {
            continue; // it would wait for dockerd before it opens the pin directory
        }
        let d = dir.to_string_lossy().into_owned();
        let out = run(&[DXDP, "--pin-dir", &d, "watch", "--once"]);
        assert_eq!(out.code(), Some(1), "{out}");
        assert!(out.stderr.contains("is not on a BPF filesystem"), "{out}");
        assert!(!missing.exists(), "{out}");
        assert_eq!(std::fs::read_dir(&existing).expect("readdir").count(), 0);
    }
    assert_eq!(xdp_prog_id(&a.host_veth), None);
    topo.dxdp.status().assert_empty();
}

/// A pin directory written by another dxdp version: every command refuses it, names both
/// versions and the way out, and leaves it (and its traffic) alone.
#[test]
fn bad_input_a_pin_dir_of_another_dxdp_version_is_refused_and_left_alone() {
    if !require_privileges() {
        return;
    }
    let topo = Topology::new(3);
    let (a, b, c) = (topo.node(0), topo.node(1), topo.node(2));
    topo.dxdp.link(a, b, "tc");
    let before = snapshot(&topo.dxdp);
    let meta = topo.pin_dir().join("maps/DXDP_META");
    let meta_s = meta.to_string_lossy().into_owned();
    let set_abi = |v: &str| {
        must(&[
            "bpftool", "map", "update", "pinned", &meta_s, "key", "0", "0", "0", "0", "value", v,
            "0", "0", "0", "0", "0", "0", "0",
        ]);
    };
    set_abi("99");
    let files = pin_tree(topo.pin_dir());
    let dumps = || {
        [
            "DXDP_LINKS",
            "DXDP_ENDPOINTS",
            "DXDP_LINK_META",
            "DXDP_TARGETS",
        ]
        .map(|m| support::map_entries(topo.pin_dir(), m))
    };
    let maps = dumps();
    let links = bpf_links();
    let (sa, sb, sc) = (a.spec(), b.spec(), c.spec());
    let layout = format!(
        "written by a dxdp with state layout 99, this one uses {}",
        dxdp_common::ABI_VERSION
    );
    for args in [
        vec!["status"],
        vec!["status", "--json"],
        vec!["link", &sa, &sc],
        vec!["unlink", &sa, &sb],
        vec!["cleanup"],
    ] {
        let out = topo.dxdp.run(&args);
        assert_refused(&out, &[&layout, "dxdp cleanup"]);
        assert_eq!(pin_tree(topo.pin_dir()), files, "after {args:?}");
        assert!(dumps() == maps, "maps changed by {args:?}");
    }
    assert_eq!(bpf_links(), links, "attachments changed");
    // The link keeps working meanwhile.
    assert_eq!(support::ping(&a.netns, &b.ipv4, 20).received, 20);
    set_abi(&dxdp_common::ABI_VERSION.to_string());
    assert_eq!(snapshot(&topo.dxdp), before);
    assert_consistent(&topo.dxdp, None);
}

/// Malformed and oversized labels: one log line each naming the container, the key and the
/// value; that container is left out, the others are linked, the watch goes on.
#[test]
fn bad_input_malformed_and_oversized_labels_are_logged_once_and_keep_the_container_out() {
    if !require_docker() {
        return;
    }
    let mut world = World::private();
    let net = world.network("net", &[]);
    let group = format!("{}-g", world.prefix);
    let good = member(&net, &group, &[]);
    let oversized = format!("dxdp.peers={}", "p,".repeat(700));
    let bad: [(&str, Vec<String>, &[&str]); 4] = [
        (
            "enable",
            member(&net, &group, &["-l", "dxdp.enable=yes"]),
            &["dxdp.enable=\"yes\"", "expected true or false"],
        ),
        (
            "oversized",
            member(&net, &group, &["-l", &oversized]),
            &["dxdp.peers=", "(1400 bytes)", "oversized"],
        ),
        (
            "group",
            vec![
                "--network".into(),
                net.clone(),
                "-l".into(),
                "dxdp.enable=true".into(),
                "-l".into(),
                "dxdp.group=no space allowed".into(),
            ],
            &["dxdp.group=\"no space allowed\"", "is not allowed"],
        ),
        (
            "typo",
            member(&net, &group, &["-l", "dxdp.enabel=true"]),
            &["dxdp.enabel", "unknown dxdp label key"],
        ),
    ];
    let g1 = world.run("good1", &strs(&good), &[]);
    let g2 = world.run("good2", &strs(&good), &[]);
    let mut bad_names = Vec::new();
    for (name, args, _) in &bad {
        bad_names.push(world.run(&format!("bad-{name}"), &strs(args), &[]));
    }
    let mut watch = world.watch(&["--resync", "1"]);
    wait_links(
        &world.dxdp,
        &watch,
        &mesh(&[g1, g2]),
        Duration::from_secs(10),
    );
    let before = snapshot(&world.dxdp);
    thread::sleep(Duration::from_secs(3)); // resyncs: nothing changes, nothing is repeated
    assert_eq!(snapshot(&world.dxdp), before);
    let log = watch.log_text();
    for ((_, _, needles), container) in bad.iter().zip(&bad_names) {
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&format!("container={container}")) && l.contains(needles[0]))
            .collect();
        assert_eq!(lines.len(), 1, "one line about {container}:\n{log}");
        for needle in *needles {
            assert!(
                lines[0].contains(needle),
                "expected {needle:?} in {}",
                lines[0]
            );
        }
        assert!(lines[0].contains("left out of every link"), "{}", lines[0]);
        assert!(
            lines[0].len() < 1000,
            "oversized value echoed: {}",
            lines[0]
        );
    }
    assert!(watch.alive(), "{log}");
    assert_consistent(&world.dxdp, Some(&watch));
}

/// Another tool's XDP program on a veth the watch would manage with xdp: never replaced; the
/// link is refused with the veth and the program named, the other links are made.
#[test]
fn bad_input_a_foreign_xdp_program_is_never_replaced_by_the_watch() {
    if !require_docker() {
        return;
    }
    let mut world = World::private();
    let net = world.network("net", &[]);
    let group = format!("{}-g", world.prefix);
    let args = member(&net, &group, &["-l", "dxdp.datapath=xdp"]);
    let x: Vec<String> = (1..=3)
        .map(|i| world.run(&format!("x{i}"), &strs(&args), &[]))
        .collect();
    let (veth3, ifindex3) = world.veth(&x[2], &net);
    let pin = PathBuf::from(format!("{}-foreign", world.dxdp.pin_dir.display()));
    let foreign = support::load_foreign_xdp(&pin, "dxt_foreign");
    must(&[
        "ip",
        "link",
        "set",
        "dev",
        &veth3,
        "xdpdrv",
        "pinned",
        &pin.to_string_lossy(),
    ]);
    foreign.unpin();
    let id = xdp_prog_id(&veth3).expect("foreign program attached");

    let watch = world.watch(&["--resync", "1"]);
    let status = wait_links(&world.dxdp, &watch, &mesh(&x[..2]), Duration::from_secs(15));
    thread::sleep(Duration::from_secs(2));
    assert_eq!(snapshot(&world.dxdp).0, snapshot_links(&status));
    assert!(
        status.links.iter().all(|l| l.datapath == "xdp"),
        "{status:#?}"
    );
    assert!(!world.dxdp.status().mentions(ifindex3));
    assert_eq!(
        xdp_prog_id(&veth3),
        Some(id),
        "the foreign program was touched"
    );
    let log = watch.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("cannot link") && l.contains(&veth3))
        .unwrap_or_else(|| panic!("no 'cannot link' line naming {veth3}:\n{log}"));
    let id_text = format!("id {id}");
    for needle in [id_text.as_str(), "dxt_foreign", "never replaces it"] {
        assert!(line.contains(needle), "expected {needle:?}: {line}");
    }
    assert_consistent(&world.dxdp, Some(&watch));
    let ip2 = world.ip(&x[1], &net);
    let ip3 = world.ip(&x[2], &net);
    assert_eq!(docker_ping(&world, &x[0], &ip2, 20, "0.01"), (20, 20));
    assert_eq!(docker_ping(&world, &x[0], &ip3, 20, "0.01"), (20, 20));
    let after = world.dxdp.status();
    let l = link_between(&after, &x[0], &x[1]).expect("linked");
    assert!(
        l.low_to_high.packets >= 20 && l.high_to_low.packets >= 20,
        "{l:?}"
    );
}

/// Endpoint strings that do not parse: exit 2 before anything is opened, with the input and
/// the accepted forms. (`pid:abc` is in tests/netns_datapath.rs.)
#[test]
fn bad_input_endpoint_strings_that_do_not_parse_exit_2_and_create_nothing() {
    let dir = std::env::temp_dir().join(format!("dxdp-parse-{}", std::process::id()));
    let d = dir.to_string_lossy().into_owned();
    let cases: [(&str, &str); 9] = [
        ("netns:", "namespace name must be a plain name"),
        ("netns:../x", "namespace name must be a plain name"),
        (
            "netns:x:averyveryverylongname",
            "interface name must be 1-15 characters",
        ),
        ("netns:x:", "interface name must be 1-15 characters"),
        ("pid:0", "PID must be a positive number"),
        ("pid:-3", "PID must be a positive number"),
        (
            "container:web:eth0",
            "a container endpoint takes no interface",
        ),
        ("bogus:x", "unknown endpoint kind"),
        ("web$", "container names are"),
    ];
    for (input, reason) in cases {
        for args in [["link", input, "netns:x"], ["unlink", "netns:x", input]] {
            let out = run(&[DXDP, "--pin-dir", &d, args[0], args[1], args[2]]);
            assert_eq!(out.code(), Some(2), "{out}");
            assert!(
                out.stderr.contains(&format!("{input:?}"))
                    && out.stderr.contains(reason)
                    && out.stderr.contains("write netns:NAME[:IFACE]"),
                "{out}"
            );
        }
    }
    // A 100,000-character name is shown shortened, with its length (it was echoed whole,
    // twice: 200 KB of stderr).
    let huge = "a".repeat(100_000);
    let out = run(&[DXDP, "--pin-dir", &d, "link", &huge, "netns:x"]);
    assert_eq!(
        out.code(),
        Some(2),
        "{}",
        &out.stderr[..out.stderr.len().min(500)]
    );
    assert!(
        out.stderr.len() < 1024 && out.stderr.contains("(100000 bytes)"),
        "{} bytes of stderr: {}",
        out.stderr.len(),
        &out.stderr[..out.stderr.len().min(500)]
    );
    let out = run(&[DXDP, "--pin-dir", &d, "--max-endpoints", "0", "status"]);
    assert_eq!(out.code(), Some(2), "{out}");
    let out = run(&["env", "DXDP_MAX_LINKS=0", DXDP, "--pin-dir", &d, "status"]);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("--max-links"), "{out}");
    let out = run(&[
        "env",
        "DXDP_MAX_CONNECTIONS=0",
        DXDP,
        "--pin-dir",
        &d,
        "status",
    ]);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("--max-connections"), "{out}");
    assert!(!dir.exists(), "{} was created", dir.display());
}
