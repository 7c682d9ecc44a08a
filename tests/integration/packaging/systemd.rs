//! The Debian package's service under a real systemd: systemd 252 of this host booted as PID 1
//! of a privileged container (the "machine"), the .deb installed there with dpkg, and the unit
//! driven with systemctl, against the host's dockerd, bpffs and network.
//!
//! The machine is built without a registry, from the host itself:
//! - /usr is an overlay on the host's /usr and /var/lib/dpkg one on the host's dpkg database, so
//!   systemd, dpkg and deb-systemd-helper are the host's and the package installs into the
//!   overlays' upper layers, never into the host;
//! - /etc is a few files of our own (not the host's: it enables docker.service and more), with
//!   the units that would act on the shared kernel masked: systemd-sysctl would apply
//!   /usr/lib/sysctl.d to the host (a privileged container's /proc/sys is writable; it did,
//!   when first tried), docker.service would start a second dockerd on the host's network (the
//!   unit's Wants=docker.service pulls it in);
//! - host network (the containers' veths are in the host's namespace), the host's
//!   /run/docker.sock and /sys/fs/bpf bound in.
//!
//! systemd must be PID 1 of a pid namespace of its own, but the watch opens
//! /proc/<pid>/ns/net of container processes by the pids dockerd reports, which are the host's.
//! So the host's procfs is bound at /host/proc and a drop-in binds it over the service's /proc
//! (BindPaths=, in the service's own mount namespace; systemd as PID 1 keeps its own /proc). On a
//! host booted with systemd the two are the same, which is what the drop-in reproduces. The
//! drop-in also shortens WatchdogSec= to 4 s, so that a frozen watch is caught within seconds,
//! not the unit's 60 s; the rest of the unit is the package's, as installed.
//!
//! `docker run --privileged --cgroupns=private` is what makes systemd boot on this hybrid-cgroup
//! host (v1 controllers, name=systemd and a cgroup2 at /sys/fs/cgroup/unified): Docker mounts
//! each hierarchy's container cgroup writable, and systemd 252 runs in hybrid mode there.

use std::{
    path::Path,
    thread,
    time::{Duration, Instant},
};

use super::{
    DEFAULT_PIN_DIR, DOCKER, DXDP, Run, Status, TEST_IMAGE, TempDir, Undo, build_deb,
    docker_and_test_image_problems, has_link, must, own_network, prefix, privileged_problems,
    quietly, run, status, tempdir, try_run, wait_until,
};
use crate::support::can_run;

/// systemd of the host, booted in the machine.
const SYSTEMD: &str = "/lib/systemd/systemd";
/// Where the machine sees the host's procfs.
const HOST_PROC: &str = "/host/proc";
/// WatchdogSec= of the test's drop-in.
const WATCHDOG_SECS: u64 = 4;
/// RestartSec= of the unit.
const RESTART_SECS: u64 = 5;

/// Units of the host's /usr that the machine must not start (see the module comment), masked.
const MASKED_UNITS: &[&str] = &[
    // A second dockerd and containerd on the host's network and /run/docker.sock.
    "docker.service",
    "docker.socket",
    "containerd.service",
    // Settings of the shared kernel: sysctls, modules, binfmt, the clock, devices.
    "systemd-sysctl.service",
    "systemd-modules-load.service",
    "systemd-binfmt.service",
    "proc-sys-fs-binfmt_misc.automount",
    "systemd-timesyncd.service",
    "systemd-udevd.service",
    "systemd-udev-trigger.service",
    "systemd-random-seed.service",
];

/// The test's drop-in for dxdp.service (see the module comment).
fn drop_in() -> String {
    format!(
        "# dxdp's systemd test: the host's pids for the watch (systemd is PID 1 of the\n\
         # machine's own pid namespace), and a watchdog that fires within seconds.\n\
         [Service]\n\
         BindPaths={HOST_PROC}:/proc\n\
         WatchdogSec={WATCHDOG_SECS}s\n"
    )
}

/// A container running the host's systemd as PID 1; removed (SIGKILL to all of it) on drop.
struct Machine {
    name: String,
}

impl Machine {
    /// `docker exec MACHINE ARGV…` within `timeout`, whatever its exit status.
    #[track_caller]
    fn exec_for(&self, argv: &[&str], timeout: Duration) -> Run {
        let mut full = vec![DOCKER, "exec", &self.name];
        full.extend_from_slice(argv);
        try_run(&full, &[], timeout).unwrap_or_else(|e| panic!("{e}"))
    }

    #[track_caller]
    fn exec(&self, argv: &[&str]) -> Run {
        self.exec_for(argv, Duration::from_secs(60))
    }

    /// `docker exec`, which must succeed; returns stdout.
    #[track_caller]
    fn must(&self, argv: &[&str]) -> String {
        self.exec(argv).ok().stdout
    }

    /// One property of dxdp.service, per `systemctl show`.
    #[track_caller]
    fn show(&self, property: &str) -> String {
        self.must(&["systemctl", "show", "-p", property, "--value", "dxdp"])
            .trim()
            .to_owned()
    }

    /// The service's journal, for failure messages.
    fn journal(&self) -> String {
        self.exec(&["journalctl", "-u", "dxdp", "--no-pager", "-n", "40"])
            .stdout
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        quietly(&[DOCKER, "rm", "-f", &self.name]);
    }
}

/// Installs the package in the host's systemd booted in a container, and proves with systemctl:
/// `start` returns once the first reconcile has linked two labeled containers; `status` shows
/// the watch's STATUS= line; a watch frozen with SIGSTOP is killed by the watchdog and
/// restarted, and the new one adopts the link while pings between the containers lose nothing;
/// `stop` leaves the link working; `dpkg -r` stops the service and its prerm's `dxdp cleanup`
/// removes everything pinned.
#[test]
fn deb_service_runs_under_systemd_as_pid1() {
    let mut problems = privileged_problems(&["dpkg-deb", "cargo", "mount", "umount", "tar"]);
    if !Path::new(SYSTEMD).exists() {
        problems.push(format!(
            "{SYSTEMD} is missing (scripts/setup.sh installs systemd)"
        ));
    }
    // The machine's dpkg database is the host's: an installed dxdp would make this an upgrade.
    if run(&["dpkg", "-s", "dxdp"]).status.success() {
        problems.push("a dxdp package is installed on the host".to_owned());
    }
    // The service pins at the default directory, and the package's prerm cleans it.
    if Path::new(DEFAULT_PIN_DIR).exists() {
        problems.push(format!(
            "{DEFAULT_PIN_DIR} exists: something uses dxdp's default pin directory, which the \
             service under test uses and removing the package cleans"
        ));
    }
    if problems.is_empty() {
        problems.extend(docker_and_test_image_problems());
    }
    if !can_run(problems) {
        return;
    }
    let started = Instant::now();
    let prefix = format!("{}-sd", prefix());
    // Before `undo`, so dropped after it: `work` holds the overlays' mount points, which must be
    // unmounted before the directory is removed.
    let deb_dir = tempdir("sd-deb");
    let work = tempdir("sd-machine");
    let mut undo = Undo::default();
    // Last resort if the test fails with links made: the pin directory did not exist before.
    undo.push("default pin directory", || {
        if Path::new(DEFAULT_PIN_DIR).exists() {
            quietly(&[DXDP, "--pin-dir", DEFAULT_PIN_DIR, "cleanup"]);
        }
    });
    let deb = build_deb(&deb_dir);
    let deb_name = Path::new(&deb).file_name().unwrap().to_str().unwrap();
    eprintln!("built {deb} after {:?}", started.elapsed());

    let machine = boot_machine(&prefix, &work, &deb_dir, &mut undo);
    eprintln!("systemd booted after {:?}", started.elapsed());
    // The host was made from an image whose /usr/sbin/policy-rc.d refuses every service action
    // (exit 101, Docker's convention for image builds): the package's prerm would then leave the
    // service running. A host booted with systemd has none; removed from the machine's /usr.
    machine.must(&["rm", "-f", "/usr/sbin/policy-rc.d"]);
    let installed = machine.must(&["dpkg", "-i", &format!("/deb/{deb_name}")]);
    assert_eq!(
        machine
            .exec(&["systemctl", "is-active", "dxdp"])
            .stdout
            .trim(),
        "inactive",
        "the package started the service: {installed}"
    );

    let network = own_network(&prefix, &mut undo);
    let (a, b) = labeled_pair(&prefix, &network, &mut undo);
    let ip_b = must(&[
        DOCKER,
        "inspect",
        "-f",
        &format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}"),
        &b,
    ])
    .trim()
    .to_owned();

    // 1. Type=notify: `systemctl start` returns after READY=1, which the watch sends after its
    // first reconcile, so the link is there as soon as it returns.
    let start = Instant::now();
    let started_run = machine.exec(&["systemctl", "start", "dxdp"]);
    let start_took = start.elapsed();
    assert!(
        started_run.status.success(),
        "systemctl start dxdp: {started_run}\n{}",
        machine.journal()
    );
    let first = status(DXDP, Some(DEFAULT_PIN_DIR));
    assert!(
        has_link(&first, &a, &b, "watch"),
        "`systemctl start` returned after {start_took:?} without the link {a} - {b}: {first:?}\n{}",
        machine.journal()
    );
    eprintln!("systemctl start returned after {start_took:?}, link in place");

    // 2. The STATUS= line, as `systemctl status` shows it.
    let shown = machine.exec(&["systemctl", "status", "--no-pager", "dxdp"]);
    let status_line = shown
        .stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Status: "))
        .map(|l| l.trim_matches('"'))
        .unwrap_or_else(|| panic!("no Status: line in `systemctl status`: {shown}"));
    assert!(
        status_line.starts_with("1 link, ")
            && status_line.contains(" running containers; dockerd API "),
        "unexpected STATUS= line {status_line}"
    );
    eprintln!("systemctl status: Status: {status_line}");

    // 3. A frozen watch: the watchdog kills it, Restart=on-failure starts a new one, which
    // adopts the link; meanwhile the link carries pings, none lost.
    let before = link_of(&first, &a, &b);
    let pings = ping_in_background(&a, &ip_b, 80);
    thread::sleep(Duration::from_secs(1));
    let frozen_pid = machine.show("MainPID");
    let freeze = Instant::now();
    machine.must(&["kill", "-STOP", &frozen_pid]);
    let restarted = wait_until(
        Duration::from_secs(WATCHDOG_SECS + RESTART_SECS + 20),
        || {
            machine.show("NRestarts") == "1"
                && machine.show("ActiveState") == "active"
                && machine.show("MainPID") != frozen_pid
        },
    );
    let restart_took = freeze.elapsed();
    assert!(
        restarted,
        "the frozen watch (pid {frozen_pid} in the machine) was not restarted within \
         {restart_took:?}\n{}",
        machine.journal()
    );
    let journal = machine.journal();
    assert!(
        journal.contains("Watchdog timeout"),
        "restarted, but not by the watchdog:\n{journal}"
    );
    eprintln!("watchdog restart: a new watch runs {restart_took:?} after SIGSTOP");
    let pinged = pings.join().expect("ping thread");
    assert!(
        pinged.status.success() && pinged.stdout.contains(" 0% packet loss"),
        "pings over the link lost some while the watch was frozen and restarted: {pinged}"
    );
    let adopted = status(DXDP, Some(DEFAULT_PIN_DIR));
    let after = link_of(&adopted, &a, &b);
    assert_eq!(
        (before.created, before.ifindexes),
        (after.created, after.ifindexes),
        "the restarted watch replaced the link instead of adopting it: {adopted:?}"
    );
    assert!(
        after.packets > before.packets,
        "the pings did not take the link: {before:?} then {after:?}"
    );
    eprintln!(
        "link adopted; packets over it {} -> {}",
        before.packets, after.packets
    );

    // 4. `systemctl stop`: the watch exits, the link stays and carries traffic.
    machine.must(&["systemctl", "stop", "dxdp"]);
    assert_eq!(machine.show("ActiveState"), "inactive");
    let stopped = status(DXDP, Some(DEFAULT_PIN_DIR));
    let kept = link_of(&stopped, &a, &b);
    assert_eq!(kept.created, after.created, "stop replaced the link");
    let pinged = ping_in_background(&a, &ip_b, 5)
        .join()
        .expect("ping thread");
    assert!(pinged.status.success(), "no traffic after stop: {pinged}");
    let kept_after = link_of(&status(DXDP, Some(DEFAULT_PIN_DIR)), &a, &b);
    assert!(
        kept_after.packets > kept.packets,
        "after `systemctl stop`, traffic no longer takes the link: {kept:?} then {kept_after:?}"
    );

    // 5. Removal with the service running: prerm stops it and runs `dxdp cleanup`. That cleanup
    // runs in the machine's pid namespace, where it cannot find the containers' namespaces to
    // undo xdp fix-ups in; the link here is tc (the default), which has none.
    machine.must(&["systemctl", "start", "dxdp"]);
    let removed = machine.exec_for(&["dpkg", "-r", "dxdp"], Duration::from_secs(120));
    assert!(
        removed.status.success() && removed.stdout.contains("removed "),
        "dpkg -r did not run dxdp cleanup: {removed}"
    );
    assert!(
        !Path::new(DEFAULT_PIN_DIR).exists(),
        "{DEFAULT_PIN_DIR} is still there after dpkg -r: {removed}"
    );
    assert_ne!(
        machine.show("ActiveState"),
        "active",
        "the prerm left the service running: {removed}"
    );
    let pinged = ping_in_background(&a, &ip_b, 3)
        .join()
        .expect("ping thread");
    assert!(
        pinged.status.success(),
        "no traffic over the bridge after removal: {pinged}"
    );

    drop(machine);
    drop(undo);
    eprintln!("systemd test took {:?}", started.elapsed());
}

/// The one link between `a` and `b`, as far as these checks compare it.
#[derive(Debug)]
struct LinkSeen {
    created: u64,
    ifindexes: (u32, u32),
    packets: u64,
}

#[track_caller]
fn link_of(status: &Status, a: &str, b: &str) -> LinkSeen {
    let link = status
        .links
        .iter()
        .find(|l| {
            let names = [l.low_name.as_str(), l.high_name.as_str()];
            names.contains(&a) && names.contains(&b) && l.origin == "watch"
        })
        .unwrap_or_else(|| panic!("no watch link between {a} and {b}: {status:?}"));
    LinkSeen {
        created: link.created_unix_secs,
        ifindexes: (link.low_ifindex, link.high_ifindex),
        packets: link.low_to_high.packets + link.high_to_low.packets,
    }
}

/// `count` pings 0.2 s apart from container `from` to `ip`, on a thread of their own.
fn ping_in_background(from: &str, ip: &str, count: u32) -> thread::JoinHandle<Run> {
    let (from, ip, count) = (from.to_owned(), ip.to_owned(), count.to_string());
    thread::spawn(move || {
        try_run(
            &[
                DOCKER, "exec", &from, "ping", "-q", "-n", "-c", &count, "-i", "0.2", "-W", "1",
                &ip,
            ],
            &[],
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// Two containers of the test image on `network`, the first asking for the second as a peer.
#[track_caller]
fn labeled_pair(prefix: &str, network: &str, undo: &mut Undo) -> (String, String) {
    let (a, b) = (format!("{prefix}-a"), format!("{prefix}-b"));
    let peers = format!("dxdp.peers={b}");
    let enable = "dxdp.enable=true";
    for (name, labels) in [(&a, vec![enable, peers.as_str()]), (&b, vec![enable])] {
        {
            let name = name.clone();
            undo.push(format!("container {name}"), move || {
                quietly(&[DOCKER, "rm", "-f", &name])
            });
        }
        let mut argv = vec![DOCKER, "run", "-d", "--name", name, "--network", network];
        for label in labels {
            argv.extend(["-l", label]);
        }
        argv.push(TEST_IMAGE);
        must(&argv);
    }
    (a, b)
}

/// Builds the machine's image and overlays under `work`, starts it with `deb_dir` at /deb, and
/// waits until systemd has booted.
#[track_caller]
fn boot_machine(prefix: &str, work: &TempDir, deb_dir: &TempDir, undo: &mut Undo) -> Machine {
    let image = format!("{prefix}-machine:latest");
    import_rootfs(&work.path.join("rootfs"), &image);
    {
        let image = image.clone();
        undo.push("machine image", move || {
            quietly(&[DOCKER, "image", "rm", &image])
        });
    }
    let usr = overlay(&work.path.join("usr"), "/usr", undo);
    let dpkg = overlay(&work.path.join("dpkg"), "/var/lib/dpkg", undo);
    // Removed on drop, also if `docker run` fails halfway.
    let machine = Machine {
        name: format!("{prefix}-machine"),
    };
    let mounts = [
        format!("{usr}:/usr"),
        format!("{dpkg}:/var/lib/dpkg"),
        "/run/docker.sock:/run/docker.sock".to_owned(),
        "/sys/fs/bpf:/sys/fs/bpf".to_owned(),
        format!("{}:/deb:ro", deb_dir.path.display()),
    ];
    let host_proc = format!("type=bind,src=/proc,dst={HOST_PROC},bind-recursive=disabled");
    let mut argv = vec![
        DOCKER,
        "run",
        "-d",
        "--name",
        &machine.name,
        // systemd mounts and writes its cgroups, and the service needs the host's capabilities.
        "--privileged",
        "--cgroupns=private",
        "--network",
        "host",
        // How systemd knows it runs in a container (and skips what does not apply there).
        "-e",
        "container=docker",
        "--tmpfs",
        "/run",
        "--tmpfs",
        "/run/lock",
        "--tmpfs",
        "/tmp",
        "--mount",
        &host_proc,
    ];
    for mount in &mounts {
        argv.extend(["-v", mount]);
    }
    argv.extend([image.as_str(), SYSTEMD]);
    must(&argv);
    // `is-system-running --wait` prints "running", or "degraded" if some unit failed, which
    // does not matter here; it waits out the boot, once systemd listens on its bus socket
    // (until then it fails with "Failed to connect to bus").
    let deadline = Instant::now() + Duration::from_secs(60);
    let booted = loop {
        let asked = machine.exec_for(
            &["systemctl", "is-system-running", "--wait"],
            Duration::from_secs(60),
        );
        if !asked.stderr.contains("Failed to connect to bus") || Instant::now() > deadline {
            break asked;
        }
        thread::sleep(Duration::from_millis(200));
    };
    let state = booted.stdout.trim();
    assert!(
        state == "running" || state == "degraded",
        "systemd did not boot in {}: {booted}\n--- docker logs\n{}",
        machine.name,
        run(&[DOCKER, "logs", &machine.name]).stderr
    );
    if state == "degraded" {
        eprintln!(
            "systemd booted degraded: {}",
            machine
                .exec(&["systemctl", "--failed", "--no-pager"])
                .stdout
        );
    }
    machine
}

/// The machine's root file system, without /usr (an overlay on the host's, bound at start),
/// imported as `image`.
#[track_caller]
fn import_rootfs(rootfs: &Path, image: &str) {
    let dirs = [
        "usr",
        "etc/systemd/system/dxdp.service.d",
        "root",
        "proc",
        "sys",
        "dev",
        "run",
        "tmp",
        "var/lib/dpkg",
        "var/log",
        "var/tmp",
        "host/proc",
        "deb",
    ];
    for dir in dirs {
        std::fs::create_dir_all(rootfs.join(dir)).unwrap();
    }
    // The host's merged-/usr layout.
    for dir in ["bin", "lib", "lib64", "sbin"] {
        std::os::unix::fs::symlink(format!("usr/{dir}"), rootfs.join(dir)).unwrap();
    }
    let etc = rootfs.join("etc");
    // dpkg checks the users and groups of its statoverrides; no secrets in these two.
    for file in ["passwd", "group", "ld.so.cache"] {
        std::fs::copy(Path::new("/etc").join(file), etc.join(file)).unwrap();
    }
    std::fs::copy("/usr/lib/os-release", etc.join("os-release")).unwrap();
    // Empty: systemd makes a transient machine id at boot.
    std::fs::write(etc.join("machine-id"), "").unwrap();
    std::fs::write(
        etc.join("nsswitch.conf"),
        "passwd: files\ngroup: files\nshadow: files\nhosts: files\n",
    )
    .unwrap();
    // /usr/bin/awk and friends point into /etc/alternatives; dpkg reads /etc/dpkg.
    must(&[
        "cp",
        "-a",
        "/etc/alternatives",
        "/etc/dpkg",
        etc.to_str().unwrap(),
    ]);
    let units = etc.join("systemd/system");
    for unit in MASKED_UNITS {
        std::os::unix::fs::symlink("/dev/null", units.join(unit)).unwrap();
    }
    // basic.target rather than graphical.target: no getty, logind or D-Bus needed.
    std::os::unix::fs::symlink(
        "/lib/systemd/system/basic.target",
        units.join("default.target"),
    )
    .unwrap();
    std::fs::write(units.join("dxdp.service.d/dxdp-test.conf"), drop_in()).unwrap();
    for dir in ["tmp", "var/tmp"] {
        must(&["chmod", "1777", rootfs.join(dir).to_str().unwrap()]);
    }
    let tar_import = format!(
        "tar -C {} --numeric-owner --owner=0 --group=0 -c . | {DOCKER} import - {image}",
        rootfs.display()
    );
    must(&["sh", "-c", &tar_import]);
}

/// An overlay mount under `dir` on the host's `lower`, writable, unmounted by `undo`; its path.
#[track_caller]
fn overlay(dir: &Path, lower: &str, undo: &mut Undo) -> String {
    let (upper, workdir, merged) = (dir.join("upper"), dir.join("work"), dir.join("merged"));
    for d in [&upper, &workdir, &merged] {
        std::fs::create_dir_all(d).unwrap();
    }
    let merged = merged.to_str().unwrap().to_owned();
    let options = format!(
        "lowerdir={lower},upperdir={},workdir={}",
        upper.display(),
        workdir.display()
    );
    must(&["mount", "-t", "overlay", "overlay", "-o", &options, &merged]);
    {
        let merged = merged.clone();
        undo.push(format!("overlay {merged}"), move || {
            quietly(&["umount", &merged])
        });
    }
    merged
}
