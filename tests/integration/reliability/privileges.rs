//! Promise 10: pins and the Docker socket are never made more accessible.

use super::*;

#[test]
fn pins_and_the_docker_socket_are_never_made_more_accessible() {
    if !require_privileges() {
        return;
    }
    let sock = Path::new("/var/run/docker.sock");
    let stat = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.mode(), m.uid(), m.gid()))
    };
    let sock_before = stat(sock);
    for umask in ["022", "077", "000"] {
        let topo = Topology::new(2);
        let (a, b) = (topo.node(0), topo.node(1));
        let dir = topo.pin_dir().to_string_lossy().into_owned();
        for args in [
            format!("link {} {}", a.spec(), b.spec()),
            "status".to_owned(),
            "doctor".to_owned(),
        ] {
            let shell = format!("umask {umask}; exec {DXDP} --pin-dir {dir} {args}");
            let out = run(&["sh", "-c", &shell]);
            if args != "doctor" {
                out.assert_success();
            }
        }
        let tree = pin_tree(topo.pin_dir());
        assert!(tree.len() > 10, "{tree:?}");
        for (path, mode, uid) in &tree {
            assert_eq!(*uid, 0, "{} is not root's (umask {umask})", path.display());
            let (is_dir, bits) = (mode & 0o170000 == 0o040000, mode & 0o777);
            if is_dir {
                assert_eq!(
                    bits & 0o022,
                    0,
                    "{} is writable by others: {bits:o} (umask {umask})",
                    path.display()
                );
            } else {
                assert_eq!(
                    bits & 0o077,
                    0,
                    "{} is accessible to others: {bits:o} (umask {umask})",
                    path.display()
                );
            }
        }
        topo.dxdp.unlink(a, b);
    }
    assert_eq!(stat(sock), sock_before, "the Docker socket changed");
}

/// `/sys/fs/bpf` is world-writable: a pin directory someone else made (or may write) could hold
/// maps and programs planted for root to adopt. Every command refuses it and adds nothing.
#[test]
fn a_pin_dir_another_user_owns_or_may_write_is_refused_and_left_alone() {
    if !require_privileges() {
        return;
    }
    let topo = Topology::new(2);
    let (a, b) = (topo.node(0), topo.node(1));
    let (sa, sb) = (a.spec(), b.spec());
    let pins = support::PinDir::new(support::next_id());
    let dir = pins.path.to_string_lossy().into_owned();
    let links_before = bpf_links();
    let cases: [(&str, u32, u32, &str); 3] = [
        (
            "writable by others",
            0,
            0o777,
            "is writable by others (mode 0777)",
        ),
        (
            "group-writable",
            0,
            0o775,
            "is writable by others (mode 0775)",
        ),
        ("another user's", 65534, 0o755, "belongs to uid 65534"),
    ];
    for (what, uid, mode, message) in cases {
        std::fs::create_dir(&pins.path).expect("pin dir");
        std::fs::set_permissions(&pins.path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        std::os::unix::fs::chown(&pins.path, Some(uid), None).expect("chown");
        for args in [
            vec!["link", sa.as_str(), sb.as_str()],
            vec!["status"],
            vec!["cleanup"],
        ] {
            let mut argv = vec![DXDP, "--pin-dir", &dir];
            argv.extend_from_slice(&args);
            let out = run(&argv);
            assert_refused(&out, &[message, "another --pin-dir"]);
            assert_eq!(
                std::fs::read_dir(&pins.path).expect("readdir").count(),
                0,
                "{what} pin dir: something was created by {args:?}: {out}"
            );
            assert!(pins.path.exists(), "{what} pin dir removed by {args:?}");
        }
        assert_eq!(xdp_prog_id(&a.host_veth), None);
        assert_eq!(
            bpf_links(),
            links_before,
            "{what} pin dir: an attachment was made"
        );
        std::fs::remove_dir(&pins.path).expect("rmdir");
    }
    // Made by dxdp itself, under any umask, it is accepted.
    must(&[
        "sh",
        "-c",
        &format!("umask 000; exec {DXDP} --pin-dir {dir} link {sa} {sb}"),
    ]);
    let owned = Dxdp {
        pin_dir: pins.path.clone(),
    };
    assert_eq!(owned.status().links.len(), 1);
    owned.unlink(a, b);
}

/// A pin directory inside a directory another user owns, or may write without the sticky bit:
/// that user could rename the pin directory away (after which `status` said "no links" and
/// `cleanup` "nothing to clean", exit 0, while the links went on redirecting). Every command
/// refuses it and creates nothing; a root-owned sticky parent (as /sys/fs/bpf, 1777) is fine.
#[test]
fn a_pin_dir_whose_parent_another_user_could_rename_it_in_is_refused() {
    if !require_privileges() {
        return;
    }
    let topo = Topology::new(2);
    let (a, b) = (topo.node(0), topo.node(1));
    let (sa, sb) = (a.spec(), b.spec());
    let parent = support::PinDir::new(support::next_id());
    let dir = parent.path.join("dxdp").to_string_lossy().into_owned();
    let links_before = bpf_links();
    let cases: [(&str, u32, u32, Option<&str>); 3] = [
        ("another user's", 65534, 0o755, Some("belongs to uid 65534")),
        (
            "others may write",
            0,
            0o777,
            Some("is writable by others without the sticky bit (mode 0777)"),
        ),
        ("root's and sticky", 0, 0o1777, None),
    ];
    for (what, uid, mode, message) in cases {
        std::fs::create_dir(&parent.path).expect("parent dir");
        std::fs::set_permissions(&parent.path, std::fs::Permissions::from_mode(mode))
            .expect("chmod");
        std::os::unix::fs::chown(&parent.path, Some(uid), None).expect("chown");
        let Some(message) = message else {
            let owned = Dxdp {
                pin_dir: parent.path.join("dxdp"),
            };
            owned.link(a, b, "tc");
            assert_eq!(owned.status().links.len(), 1, "{what} parent");
            owned.unlink(a, b);
            must(&[DXDP, "--pin-dir", &dir, "cleanup"]);
            std::fs::remove_dir(&parent.path).expect("rmdir");
            continue;
        };
        for args in [
            vec!["link", sa.as_str(), sb.as_str()],
            vec!["status"],
            vec!["cleanup"],
        ] {
            let mut argv = vec![DXDP, "--pin-dir", &dir];
            argv.extend_from_slice(&args);
            let out = run(&argv);
            assert_refused(&out, &[message, "another --pin-dir"]);
            assert_eq!(
                std::fs::read_dir(&parent.path).expect("readdir").count(),
                0,
                "{what} parent: something was created by {args:?}: {out}"
            );
        }
        assert_eq!(
            bpf_links(),
            links_before,
            "{what} parent: an attachment was made"
        );
        std::fs::remove_dir(&parent.path).expect("rmdir");
    }
}
