//! The packaging under packaging/: the systemd unit, the container image and its compose file,
//! the swarm stack file and the Debian package, each used the way its README says.
//!
//! The privileged tests need root, bpffs and the tools they drive (and dockerd for the image);
//! where something is missing they print `skipping: <why>` and pass, except under CI=true, where
//! they fail. Everything a test makes is named after the test process (`dxt-pkg-<pid>…`) and
//! undone on drop, also when an assertion fails.
//!
//! Together these tests take well under three minutes (most of it building the .deb, and
//! `cargo install cargo-deb` the first time, which packaging/deb/build.sh does when it is missing).

use std::{
    io::Read,
    os::unix::process::CommandExt,
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde::Deserialize;

use crate::support::{can_run, find_in_path, missing_root_and_bpffs, missing_tools};

// The package's service under a real systemd as PID 1 (in a container).
mod systemd;

/// The binary under test, built by cargo for this test run.
const DXDP: &str = env!("CARGO_BIN_EXE_dxdp");
const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// The Debian package's client (28.x; it negotiates down to a 20.10 daemon's API 1.41).
const DOCKER: &str = "/usr/bin/docker";
/// Built by scripts/build-test-image.sh.
const TEST_IMAGE: &str = "dxdp-test:local";
/// What packaging/container/build.sh builds.
const IMAGE: &str = "dxdp:local";
const BPFFS: &str = "/sys/fs/bpf";
/// The pin directory of the packaged service, which the package's prerm cleans.
const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/dxdp";

// ---------------------------------------------------------------------------------------------
// Prerequisites

/// Root and a bpffs at /sys/fs/bpf, plus `tools`.
fn privileged_problems(tools: &[&str]) -> Vec<String> {
    let mut problems = missing_root_and_bpffs();
    problems.extend(missing_tools(tools));
    problems
}

// ---------------------------------------------------------------------------------------------
// Commands

#[derive(Debug)]
struct Run {
    command: String,
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    #[track_caller]
    fn ok(self) -> Self {
        assert!(self.status.success(), "command failed: {self}");
        self
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` ({})\n--- stdout\n{}--- stderr\n{}---",
            self.command, self.status, self.stdout, self.stderr
        )
    }
}

/// Runs `argv` with `env` added, killing it and its process group after `timeout`.
fn try_run(argv: &[&str], env: &[(&str, &str)], timeout: Duration) -> Result<Run, String> {
    let command = argv.join(" ");
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        // A DXDP_PIN_DIR of the caller would redirect the dxdp runs (and the package's prerm)
        // that mean the default pin directory; callers pass --pin-dir or `env` explicitly.
        .env_remove("DXDP_PIN_DIR")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run `{command}`: {e}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                // SAFETY: kill(2) on the process group this function created for its child.
                unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
                let _ = child.wait();
                return Err(format!("`{command}` did not finish within {timeout:?}"));
            }
            Err(e) => return Err(format!("cannot wait for `{command}`: {e}")),
        }
    };
    Ok(Run {
        command,
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// Runs `argv` within 60 s whatever its exit status; panics if it cannot start or overruns.
#[track_caller]
fn run(argv: &[&str]) -> Run {
    try_run(argv, &[], Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `argv` within 60 s; panics unless it succeeds. Returns stdout.
#[track_caller]
fn must(argv: &[&str]) -> String {
    run(argv).ok().stdout
}

/// For cleanup: reports a failure on stderr, never panics.
fn quietly(argv: &[&str]) {
    match try_run(argv, &[], Duration::from_secs(60)) {
        Ok(run) if run.status.success() => {}
        Ok(run) => eprintln!("cleanup: {run}"),
        Err(e) => eprintln!("cleanup: {e}"),
    }
}

fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// Steps that undo what a test made, run last-in first-out on drop, each even if another one
/// panicked.
#[derive(Default)]
struct Undo(Vec<(String, Box<dyn FnOnce()>)>);

impl Undo {
    fn push(&mut self, what: impl Into<String>, step: impl FnOnce() + 'static) {
        self.0.push((what.into(), Box::new(step)));
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        while let Some((what, step)) = self.0.pop() {
            if catch_unwind(AssertUnwindSafe(step)).is_err() {
                eprintln!("cleanup: undoing {what} panicked");
            }
        }
    }
}

fn prefix() -> String {
    format!("dxt-pkg-{}", std::process::id())
}

// ---------------------------------------------------------------------------------------------
// dxdp status --json, the parts these tests read

#[derive(Debug, Deserialize)]
struct Status {
    links: Vec<LinkStatus>,
}

#[derive(Debug, Deserialize)]
struct LinkStatus {
    low_ifindex: u32,
    high_ifindex: u32,
    low_name: String,
    high_name: String,
    datapath: String,
    origin: String,
    created_unix_secs: u64,
    low_to_high: Traffic,
    high_to_low: Traffic,
}

#[derive(Debug, Deserialize)]
struct Traffic {
    packets: u64,
}

/// `BINARY [--pin-dir DIR] status --json`, parsed.
#[track_caller]
fn status(binary: &str, pin_dir: Option<&str>) -> Status {
    let mut argv = vec![binary];
    if let Some(dir) = pin_dir {
        argv.extend(["--pin-dir", dir]);
    }
    argv.extend(["status", "--json"]);
    let out = must(&argv);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("status --json: {e}: {out}"))
}

fn has_link(status: &Status, a: &str, b: &str, origin: &str) -> bool {
    status.links.iter().any(|l| {
        let names = [l.low_name.as_str(), l.high_name.as_str()];
        names.contains(&a) && names.contains(&b) && l.origin == origin
    })
}

// ---------------------------------------------------------------------------------------------
// The systemd unit

const UNIT: &str = "packaging/systemd/dxdp.service";

/// `systemd-analyze verify` accepts the unit (pointed at the binary under test, since
/// /usr/bin/dxdp is not installed here; the Debian test verifies the installed one as is), and
/// `systemd-analyze security` rates it no worse than "OK".
#[test]
fn systemd_unit_verifies_and_is_hardened() {
    if !can_run(missing_tools(&["systemd-analyze"])) {
        return;
    }
    let unit = std::fs::read_to_string(Path::new(REPO).join(UNIT)).unwrap();
    assert!(
        unit.contains("\nExecStart=/usr/bin/dxdp watch $DXDP_ARGS\n"),
        "ExecStart changed; the Debian package installs /usr/bin/dxdp"
    );
    // The watch speaks sd_notify (the sd_notify tests); the watchdog must leave room for a
    // first reconcile of a big host (seconds), or systemd restarts a healthy watch.
    for line in ["Type=notify", "NotifyAccess=main"] {
        assert!(
            unit.lines().any(|l| l == line),
            "{line} missing in the unit"
        );
    }
    let watchdog: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("WatchdogSec="))
        .and_then(|v| v.strip_suffix('s')?.parse().ok())
        .expect("WatchdogSec=<seconds>s in the unit");
    assert!(
        (20..=300).contains(&watchdog),
        "WatchdogSec={watchdog}s: too short for a big reconcile or too slow to notice a hang"
    );
    let dir = tempdir("unit");
    let copy = dir.path.join("dxdp.service");
    std::fs::write(
        &copy,
        unit.replace("ExecStart=/usr/bin/dxdp ", &format!("ExecStart={DXDP} ")),
    )
    .unwrap();
    let copy = copy.to_str().unwrap();

    // --man=no: the man page is only there once the package is installed.
    let verify = run(&["systemd-analyze", "verify", "--man=no", copy]);
    assert!(
        verify.status.success() && verify.stderr.trim().is_empty(),
        "systemd-analyze verify complains: {verify}"
    );

    let security = run(&["systemd-analyze", "security", "--offline=true", copy]).ok();
    let overall = security
        .stdout
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no overall exposure level: {security}"));
    eprintln!("{}", overall.trim());
    let score: f64 = overall
        .split(':')
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the score in {overall:?}"));
    // CAP_SYS_ADMIN, CAP_SYS_PTRACE, the host's network and root cost about 2 points that
    // dxdp cannot give up; everything else is locked down (3.0 when written: 2.8, plus 0.2
    // for ProtectKernelTunables= written out as ReadOnlyPaths=, see the unit).
    assert!(score <= 3.5, "the unit got less hardened: {overall}");
}

/// A directory under the system's temp dir, removed on drop.
struct TempDir {
    path: PathBuf,
}

fn tempdir(what: &str) -> TempDir {
    let path = std::env::temp_dir().join(format!("{}-{what}", prefix()));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path).unwrap();
    TempDir { path }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("cleanup: cannot remove {}: {e}", self.path.display());
        }
    }
}

/// A Docker network `<prefix>-net` of our own, with an explicit subnet (another one if that one
/// is taken), removed by `undo`.
#[track_caller]
fn own_network(prefix: &str, undo: &mut Undo) -> String {
    let network = format!("{prefix}-net");
    let created = (0..8).any(|k| {
        let subnet = format!("10.232.{}.0/24", (std::process::id() + k * 31) % 250 + 1);
        run(&[DOCKER, "network", "create", "--subnet", &subnet, &network])
            .status
            .success()
    });
    assert!(created, "cannot create docker network {network}");
    {
        let network = network.clone();
        undo.push("network", move || {
            quietly(&[DOCKER, "network", "rm", &network])
        });
    }
    network
}

// ---------------------------------------------------------------------------------------------
// Compose and stack files

/// The compose command: DXDP_COMPOSE split on spaces (the legacy lane's docker-compose 1.29),
/// else Compose v2's `docker compose`.
fn compose_command() -> Vec<String> {
    let configured = std::env::var("DXDP_COMPOSE").unwrap_or_default();
    let words: Vec<String> = configured.split_whitespace().map(str::to_owned).collect();
    if words.is_empty() {
        vec![DOCKER.to_owned(), "compose".to_owned()]
    } else {
        words
    }
}

/// Why the compose command cannot run here, if it cannot.
fn compose_problems() -> Vec<String> {
    let compose = compose_command();
    let works = Command::new(&compose[0])
        .args(&compose[1..])
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if works {
        Vec::new()
    } else {
        vec![format!("`{} version` fails", compose.join(" "))]
    }
}

/// Compose (v2's `docker compose`, or DXDP_COMPOSE: the legacy lane's docker-compose 1.29) parses
/// the compose file of the container and the swarm stack file, and keeps the options dxdp
/// depends on.
#[test]
fn compose_and_stack_files_parse() {
    if !can_run(compose_problems()) {
        return;
    }
    let compose = compose_command();
    for file in [
        "packaging/container/docker-compose.yml",
        "packaging/swarm/dxdp-stack.yml",
    ] {
        let path = Path::new(REPO).join(file);
        let mut argv: Vec<&str> = compose.iter().map(String::as_str).collect();
        argv.extend(["-f", path.to_str().unwrap(), "config"]);
        let config = must(&argv);
        // Both binds rslave: a bpffs, and the overlay sandboxes' nsfs mounts under
        // /var/run/docker/netns, mounted on the host later show up inside.
        for target in ["/sys/fs/bpf", "/var/run"] {
            let bind = volume_of(&config, target)
                .unwrap_or_else(|| panic!("{file}: no volume at {target} in:\n{config}"));
            assert!(
                bind.contains("propagation: rslave"),
                "{file}: the bind of {target} is not rslave:\n{bind}"
            );
        }
    }
    for (file, expected) in [
        (
            "packaging/container/docker-compose.yml",
            &[
                "network_mode: host",
                "pid: host",
                "propagation: rslave",
                "SYS_PTRACE",
            ][..],
        ),
        (
            "packaging/swarm/dxdp-stack.yml",
            &["mode: global", "name: host", "target: /proc", "SYS_PTRACE"][..],
        ),
    ] {
        let path = Path::new(REPO).join(file);
        let mut argv: Vec<&str> = compose.iter().map(String::as_str).collect();
        argv.extend(["-f", path.to_str().unwrap(), "config"]);
        let config = must(&argv);
        for needle in expected {
            assert!(
                config.contains(needle),
                "{file}: `{needle}` is missing from:\n{config}"
            );
        }
    }
}

/// The entry of `docker compose config`'s `volumes:` whose `target:` is `target`: its lines from
/// `- type:` to the next entry or the end of the list.
fn volume_of<'c>(config: &'c str, target: &str) -> Option<String> {
    let lines: Vec<&'c str> = config.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim() == format!("target: {target}"))?;
    let start = (0..=at)
        .rev()
        .find(|i| lines[*i].trim_start().starts_with("- type:"))?;
    let indent = lines[start].len() - lines[start].trim_start().len();
    let end = (start + 1..lines.len())
        .find(|i| {
            let l = lines[*i];
            let depth = l.len() - l.trim_start().len();
            depth < indent || (depth == indent && l.trim_start().starts_with('-'))
        })
        .unwrap_or(lines.len());
    Some(lines[start..end].join("\n"))
}

// ---------------------------------------------------------------------------------------------
// The container image

/// The `docker run` options of packaging/container/README.md, minus the name.
const RUN_OPTIONS: &[&str] = &[
    "--restart",
    "unless-stopped",
    "--network",
    "host",
    "--pid",
    "host",
    "--cap-drop",
    "ALL",
    "--cap-add",
    "SYS_ADMIN",
    "--cap-add",
    "NET_ADMIN",
    "--cap-add",
    "SYS_PTRACE",
    "-v",
    "/sys/fs/bpf:/sys/fs/bpf:rslave",
    "-v",
    "/var/run:/var/run:ro,rslave",
];

/// Why dockerd or the test image cannot be used, if they cannot: builds dxdp-test:local when it is
/// missing or stale (quick when it is up to date).
fn docker_and_test_image_problems() -> Vec<String> {
    match try_run(&[DOCKER, "info"], &[], Duration::from_secs(20)) {
        Ok(r) if r.status.success() => {}
        _ => return vec!["dockerd is not reachable".to_owned()],
    }
    let script = format!("{REPO}/scripts/build-test-image.sh");
    match try_run(&[&script], &[], Duration::from_secs(300)) {
        Ok(r) if r.status.success() => Vec::new(),
        Ok(r) => vec![format!("cannot build {TEST_IMAGE}: {r}")],
        Err(e) => vec![format!("cannot build {TEST_IMAGE}: {e}")],
    }
}

/// The image built by packaging/container/build.sh, run as packaging/container/README.md says
/// (and then through packaging/container/docker-compose.yml), links two labeled containers:
/// the host's `dxdp status --json` shows the link with origin "watch" within 15 s.
#[test]
fn container_image_watch_links_labeled_containers() {
    let mut problems = privileged_problems(&[]);
    problems.extend(compose_problems());
    if problems.is_empty() {
        problems.extend(docker_and_test_image_problems());
    }
    if !can_run(problems) {
        return;
    }
    let started = Instant::now();
    let prefix = prefix();
    let pin_dir = format!("{BPFFS}/{prefix}");
    let mut undo = Undo::default();

    let build = format!("{REPO}/packaging/container/build.sh");
    must(&[&build, "--binary", DXDP, "--tag", IMAGE]);
    let labels = must(&[
        DOCKER,
        "image",
        "inspect",
        "-f",
        "{{json .Config.Labels}}",
        IMAGE,
    ]);
    let labels: std::collections::BTreeMap<String, String> =
        serde_json::from_str(labels.trim()).expect("image labels");
    let version = must(&[DXDP, "--version"]);
    assert_eq!(
        labels
            .get("org.opencontainers.image.version")
            .map(String::as_str),
        version.trim().strip_prefix("dxdp "),
        "{labels:?}"
    );
    assert_eq!(
        labels
            .get("org.opencontainers.image.licenses")
            .map(String::as_str),
        Some("MIT OR Apache-2.0"),
        "{labels:?}"
    );
    // The source is Cargo.toml's `repository`, and nothing when it is not set (as now).
    let manifest = std::fs::read_to_string(Path::new(REPO).join("Cargo.toml")).unwrap();
    assert_eq!(
        labels.get("org.opencontainers.image.source"),
        cargo_repository(&manifest).as_ref(),
        "{labels:?}"
    );
    source_label_follows_the_manifest(&prefix, &mut undo);

    // Docker refuses rslave on a private mount; hosts booted with systemd have it shared, this
    // one may not (the README tells users to run the same command).
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let bpffs_line = mountinfo
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some(BPFFS))
        .expect("bpffs in mountinfo");
    if !bpffs_line.contains(" shared:") {
        must(&["mount", "--make-shared", BPFFS]);
        undo.push("shared bpffs", || {
            quietly(&["mount", "--make-private", BPFFS])
        });
    }
    // The same for the rslave bind of /var/run: the mount holding /run.
    let run_dir = crate::support::SharedMount::ensure("/var/run");
    undo.push("shared /run", move || drop(run_dir));
    {
        let pin_dir = pin_dir.clone();
        undo.push("pin directory", move || {
            quietly(&[DXDP, "--pin-dir", &pin_dir, "cleanup"]);
            let _ = std::fs::remove_dir_all(&pin_dir);
        });
    }

    let network = own_network(&prefix, &mut undo);
    let group = format!("dxdp.group={prefix}");
    let names = [format!("{prefix}-a"), format!("{prefix}-b")];
    for name in &names {
        {
            let name = name.clone();
            undo.push(format!("container {name}"), move || {
                quietly(&[DOCKER, "rm", "-f", &name])
            });
        }
        must(&[
            DOCKER,
            "run",
            "-d",
            "--name",
            name,
            "--network",
            &network,
            "-l",
            "dxdp.enable=true",
            "-l",
            &group,
            TEST_IMAGE,
        ]);
    }

    // 1. docker run, as the README says.
    let watch = format!("{prefix}-dxdp");
    {
        let watch = watch.clone();
        undo.push("dxdp container", move || {
            quietly(&[DOCKER, "rm", "-f", &watch])
        });
    }
    let mut argv = vec![DOCKER, "run", "-d", "--name", &watch];
    argv.extend_from_slice(RUN_OPTIONS);
    argv.extend([IMAGE, "--pin-dir", &pin_dir, "watch"]);
    must(&argv);
    let linked = wait_until(Duration::from_secs(15), || {
        has_link(&status(DXDP, Some(&pin_dir)), &names[0], &names[1], "watch")
    });
    assert!(
        linked,
        "no watch link between {} and {} within 15 s; status: {:?}\ndxdp container log:\n{}",
        names[0],
        names[1],
        status(DXDP, Some(&pin_dir)),
        run(&[DOCKER, "logs", &watch]).stderr
    );
    // The image is usable through `docker exec` too (PATH finds /usr/bin/dxdp).
    let inside = must(&[
        DOCKER,
        "exec",
        &watch,
        "dxdp",
        "--pin-dir",
        &pin_dir,
        "status",
    ]);
    assert!(
        inside.contains(&names[0]),
        "docker exec dxdp status: {inside}"
    );
    must(&[DOCKER, "rm", "-f", &watch]);
    // Stopping the watch leaves the link; cleanup removes everything.
    assert!(has_link(
        &status(DXDP, Some(&pin_dir)),
        &names[0],
        &names[1],
        "watch"
    ));
    must(&[DXDP, "--pin-dir", &pin_dir, "cleanup"]);
    assert!(!Path::new(&pin_dir).exists(), "{pin_dir} survived cleanup");

    // 2. Compose with the compose file, the pin directory from the environment.
    let compose_file = format!("{REPO}/packaging/container/docker-compose.yml");
    let compose_argv: Vec<String> = compose_command()
        .into_iter()
        .chain([
            "-p".to_owned(),
            prefix.clone(),
            "-f".to_owned(),
            compose_file,
        ])
        .collect();
    let compose = |args: &[&str]| -> Run {
        let mut argv: Vec<&str> = compose_argv.iter().map(String::as_str).collect();
        argv.extend_from_slice(args);
        try_run(
            &argv,
            &[("DXDP_PIN_DIR", &pin_dir)],
            Duration::from_secs(90),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    };
    {
        let compose_argv = compose_argv.clone();
        undo.push("compose project", move || {
            let mut argv: Vec<&str> = compose_argv.iter().map(String::as_str).collect();
            argv.push("down");
            quietly(&argv)
        });
    }
    compose(&["up", "-d"]).ok();
    let linked = wait_until(Duration::from_secs(15), || {
        has_link(&status(DXDP, Some(&pin_dir)), &names[0], &names[1], "watch")
    });
    assert!(
        linked,
        "compose: no watch link within 15 s; status: {:?}\nlog:\n{}",
        status(DXDP, Some(&pin_dir)),
        compose(&["logs"]).stdout
    );
    compose(&["down"]).ok();
    must(&[DXDP, "--pin-dir", &pin_dir, "cleanup"]);
    eprintln!("container image test took {:?}", started.elapsed());
}

/// `repository = "URL"` under `[package]` or `[workspace.package]` of a Cargo.toml.
fn cargo_repository(manifest: &str) -> Option<String> {
    let mut section = "";
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if matches!(section, "[package]" | "[workspace.package]")
            && let Some(value) = line.strip_prefix("repository")
            && let Some(value) = value.trim_start().strip_prefix('=')
            && let Some(value) = value.trim().strip_prefix('"')
        {
            return value.split('"').next().map(str::to_owned);
        }
    }
    None
}

#[test]
fn cargo_repository_is_read_from_the_package_or_the_workspace() {
    let ws = "[workspace.package]\nrepository = \"https://a.example/x\"\n[package]\nrepository.workspace = true\n";
    assert_eq!(cargo_repository(ws).as_deref(), Some("https://a.example/x"));
    let pkg = "[package]\nname = \"dxdp\"\nrepository=\"https://b.example/y\" # comment\n";
    assert_eq!(
        cargo_repository(pkg).as_deref(),
        Some("https://b.example/y")
    );
    // Another table's `repository` is not the project's.
    let dep =
        "[package]\nname = \"dxdp\"\n[dependencies.foo]\nrepository = \"https://c.example\"\n";
    assert_eq!(cargo_repository(dep), None);
}

/// build.sh, copied into a tree whose Cargo.toml sets the workspace's `repository` (the form
/// dxdp's manifest would use), labels the image with it as the OCI source.
fn source_label_follows_the_manifest(prefix: &str, undo: &mut Undo) {
    const URL: &str = "https://example.org/dxdp-test/dxdp";
    let tree = tempdir("source-label");
    let container = tree.path.join("packaging/container");
    std::fs::create_dir_all(&container).unwrap();
    for file in ["build.sh", "Dockerfile"] {
        std::fs::copy(
            Path::new(REPO).join("packaging/container").join(file),
            container.join(file),
        )
        .unwrap();
    }
    std::fs::write(
        tree.path.join("Cargo.toml"),
        format!(
            "[workspace.package]\nversion = \"0.1.0\"\nrepository = \"{URL}\"\n\n[package]\n\
             name = \"dxdp\"\nrepository.workspace = true\n"
        ),
    )
    .unwrap();
    let tag = format!("{prefix}-source:local");
    {
        let tag = tag.clone();
        undo.push("source-labelled image", move || {
            quietly(&[DOCKER, "image", "rm", &tag])
        });
    }
    let build = container.join("build.sh");
    must(&[build.to_str().unwrap(), "--binary", DXDP, "--tag", &tag]);
    let source = must(&[
        DOCKER,
        "image",
        "inspect",
        "-f",
        "{{index .Config.Labels \"org.opencontainers.image.source\"}}",
        &tag,
    ]);
    assert_eq!(source.trim(), URL);
}

// ---------------------------------------------------------------------------------------------
// The Debian package

/// Files the package must install.
const DEB_FILES: &[&str] = &[
    "/usr/bin/dxdp",
    "/lib/systemd/system/dxdp.service",
    "/etc/default/dxdp",
    "/usr/share/man/man1/dxdp.1.gz",
    "/usr/share/bash-completion/completions/dxdp",
    "/usr/share/zsh/vendor-completions/_dxdp",
    "/usr/share/fish/vendor_completions.d/dxdp.fish",
    "/usr/share/doc/dxdp/README.md",
    "/usr/share/doc/dxdp/copyright",
];

/// A "container" of the netns topology: a namespace, its veth and a process inside, through
/// whose pid dxdp finds the namespace (as it does for Docker containers).
struct Node {
    netns: String,
    host_veth: String,
    ipv4: String,
    pid: String,
}

/// Builds the package with packaging/deb/build.sh, installs it into this system, links two
/// pairs of namespaces (tc and xdp) with the installed dxdp under the unit's capability set,
/// then `dpkg -r`: the prerm must leave nothing pinned in /sys/fs/bpf/dxdp, no program on the
/// veths and the containers' offloads as they were.
#[test]
fn deb_package_installs_links_and_removes_everything() {
    let mut problems = privileged_problems(&[
        "dpkg", "cargo", "ip", "iptables", "ethtool", "ping", "setpriv", "sleep",
    ]);
    if run(&["dpkg", "-s", "dxdp"]).status.success() {
        problems.push("a dxdp package is installed already; not replacing it".to_owned());
    }
    // The package's prerm runs `dxdp cleanup` on the default pin directory: only run where
    // nothing else uses it.
    if Path::new(DEFAULT_PIN_DIR).exists() {
        problems.push(format!(
            "{DEFAULT_PIN_DIR} exists: something uses dxdp's default pin directory, which \
             removing the package cleans"
        ));
    }
    if !can_run(problems) {
        return;
    }
    let started = Instant::now();
    let prefix = prefix();
    let mut undo = Undo::default();
    let out = tempdir("deb");

    let deb = build_deb(&out);
    eprintln!("built {deb} after {:?}", started.elapsed());
    let fields = must(&[
        "dpkg-deb", "-f", &deb, "Package", "Section", "Priority", "Depends", "Suggests",
    ]);
    assert!(
        fields
            .lines()
            .any(|l| l.starts_with("Suggests: ") && l.contains("iperf3")),
        "the package suggests iperf3 for `dxdp bench`:\n{fields}"
    );
    for field in ["Package: dxdp", "Section: net", "Priority: optional"] {
        assert!(fields.contains(field), "control lacks `{field}`:\n{fields}");
    }
    // libc from the binary; nft and iptables-save, which dxdp reads the firewall with.
    let depends = fields
        .lines()
        .find_map(|l| l.strip_prefix("Depends: "))
        .unwrap_or_default();
    for dep in ["libc6", "nftables", "iptables"] {
        assert!(
            depends
                .split(", ")
                .any(|d| d.split(' ').next() == Some(dep)),
            "Depends lacks {dep}:\n{fields}"
        );
    }

    undo.push("package", || {
        if run(&["dpkg", "-s", "dxdp"]).status.success() {
            quietly(&["dpkg", "--purge", "dxdp"]);
        }
    });
    dpkg(&["-i", &deb]);

    // Files, binary, man page.
    let listed = must(&["dpkg", "-L", "dxdp"]);
    for file in DEB_FILES {
        assert!(
            listed.lines().any(|l| l == *file),
            "dpkg -L dxdp lacks {file}:\n{listed}"
        );
        assert!(Path::new(file).is_file(), "{file} is not installed");
    }
    assert_eq!(
        must(&["/usr/bin/dxdp", "--version"]),
        must(&[DXDP, "--version"])
    );
    if find_in_path("man").is_some() {
        let page = must(&["man", "-w", "dxdp"]);
        assert_eq!(page.trim(), "/usr/share/man/man1/dxdp.1.gz");
    }
    let conffiles = std::fs::read_to_string("/var/lib/dpkg/info/dxdp.conffiles").unwrap();
    assert_eq!(conffiles.trim(), "/etc/default/dxdp");
    // Installed, not enabled, not started.
    assert!(!Path::new("/etc/systemd/system/multi-user.target.wants/dxdp.service").exists());
    if find_in_path("systemd-analyze").is_some() {
        // The unit as installed: ExecStart and the man page exist now.
        let verify = run(&[
            "systemd-analyze",
            "verify",
            "/lib/systemd/system/dxdp.service",
        ]);
        assert!(
            verify.status.success() && verify.stderr.trim().is_empty(),
            "{verify}"
        );
    }

    // The topology: a bridge that forwards, four namespaces on it, a process in each.
    let bridge = format!("dxpkg{:x}", std::process::id());
    assert!(
        bridge.len() <= 13,
        "{bridge} leaves no room for veth suffixes"
    );
    must(&[
        "ip",
        "link",
        "add",
        &bridge,
        "type",
        "bridge",
        "stp_state",
        "0",
        "forward_delay",
        "0",
    ]);
    {
        let bridge = bridge.clone();
        undo.push("bridge", move || quietly(&["ip", "link", "del", &bridge]));
    }
    must(&["ip", "link", "set", &bridge, "up"]);
    // br_netfilter (Docker loads it) makes bridged frames go through FORWARD, policy DROP.
    let rule = ["FORWARD", "-i", &bridge, "-o", &bridge, "-j", "ACCEPT"].map(str::to_owned);
    let mut insert = vec!["iptables", "-w", "-I"];
    insert.extend(rule.iter().map(String::as_str));
    must(&insert);
    undo.push("iptables rule", move || {
        let mut delete = vec!["iptables", "-w", "-D"];
        delete.extend(rule.iter().map(String::as_str));
        quietly(&delete);
    });
    let third = std::process::id() % 250 + 1;
    let mut nodes = Vec::new();
    for i in 0..4 {
        let netns = format!("{prefix}-{i}");
        must(&["ip", "netns", "add", &netns]);
        {
            let netns = netns.clone();
            undo.push(format!("netns {netns}"), move || {
                quietly(&["ip", "netns", "del", &netns])
            });
        }
        let host_veth = format!("{bridge}v{i}");
        must(&[
            "ip", "link", "add", &host_veth, "type", "veth", "peer", "name", "eth0", "netns",
            &netns,
        ]);
        {
            let host_veth = host_veth.clone();
            undo.push(format!("veth {host_veth}"), move || {
                if Path::new("/sys/class/net").join(&host_veth).exists() {
                    quietly(&["ip", "link", "del", &host_veth]);
                }
            });
        }
        must(&["ip", "link", "set", &host_veth, "master", &bridge, "up"]);
        let ipv4 = format!("10.233.{third}.{}", i + 1);
        let mac = format!("02:dd:7e:{:02x}:00:{:02x}", third, i + 1);
        for args in [
            vec!["link", "set", "lo", "up"],
            vec!["link", "set", "eth0", "address", &mac],
            vec!["addr", "add", &format!("{ipv4}/24"), "dev", "eth0"],
            vec!["link", "set", "eth0", "up"],
        ] {
            let mut argv = vec!["ip", "-n", &netns];
            argv.extend(args);
            must(&argv);
        }
        // A process in the namespace, as a container's would be: root with every capability,
        // so opening its /proc/<pid>/ns/net needs CAP_SYS_PTRACE from a capability-bounded dxdp.
        let child = Command::new("ip")
            .args(["netns", "exec", &netns, "sleep", "600"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id().to_string();
        undo.push(format!("process {pid}"), move || {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        });
        nodes.push(Node {
            netns,
            host_veth,
            ipv4,
            pid,
        });
    }
    // `ip netns exec` enters the namespace and then execs sleep: wait for the exec.
    for node in &nodes {
        let ns_of = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
        let want = std::fs::metadata(format!("/run/netns/{}", node.netns))
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .unwrap();
        assert!(
            wait_until(Duration::from_secs(5), || ns_of(&node.pid)
                .is_some_and(|l| l.to_string_lossy() == format!("net:[{want}]"))),
            "process {} did not enter {}",
            node.pid,
            node.netns
        );
    }
    let features_before: Vec<_> = nodes.iter().map(offloads).collect();

    // The installed dxdp under exactly the capabilities of the installed unit: every one is
    // needed (without CAP_SYS_PTRACE it cannot open the namespace of a process with more
    // capabilities than itself, without CAP_NET_ADMIN the xdp fix-ups fail, without
    // CAP_SYS_ADMIN it cannot enter a namespace), and together they suffice.
    let caps = unit_capabilities("/lib/systemd/system/dxdp.service");
    for cap in ["sys_admin", "net_admin", "sys_ptrace"] {
        assert!(caps.iter().any(|c| c == cap), "the unit lacks CAP_{cap}");
    }
    let spec = |node: &Node| format!("pid:{}", node.pid);
    let (pair_tc, pair_xdp) = ((&nodes[0], &nodes[1]), (&nodes[2], &nodes[3]));
    for (dropped, pair, datapath) in [
        ("sys_ptrace", pair_tc, "tc"),
        ("net_admin", pair_xdp, "xdp"),
        ("sys_admin", pair_tc, "tc"),
    ] {
        let fewer: Vec<String> = caps.iter().filter(|c| *c != dropped).cloned().collect();
        let attempt = bounded(
            &fewer,
            &["link", &spec(pair.0), &spec(pair.1), "--datapath", datapath],
        );
        assert!(
            !attempt.status.success(),
            "linking worked without CAP_{dropped}: the unit's comment is wrong: {attempt}"
        );
    }
    // The failed attempts may have left pins (maps, programs) but no link.
    for (pair, datapath) in [(pair_tc, "tc"), (pair_xdp, "xdp")] {
        bounded(
            &caps,
            &["link", &spec(pair.0), &spec(pair.1), "--datapath", datapath],
        )
        .ok();
    }
    let linked = status("/usr/bin/dxdp", Some(DEFAULT_PIN_DIR));
    assert_eq!(linked.links.len(), 2, "{linked:?}");
    let mut datapaths: Vec<_> = linked.links.iter().map(|l| l.datapath.as_str()).collect();
    datapaths.sort();
    assert_eq!(datapaths, ["tc", "xdp"]);
    assert!(Path::new(DEFAULT_PIN_DIR).is_dir());

    // Traffic takes the links, and the checks below see the attachments.
    for (a, b) in [pair_tc, pair_xdp] {
        ping(a, b);
    }
    let after = status("/usr/bin/dxdp", Some(DEFAULT_PIN_DIR));
    for link in &after.links {
        assert!(
            link.low_to_high.packets > 0 && link.high_to_low.packets > 0,
            "no traffic over {link:?}"
        );
    }
    assert!(tcx_ingress_count(&pair_tc.0.host_veth) > 0);
    assert!(tcx_ingress_count(&pair_tc.1.host_veth) > 0);
    assert!(has_xdp(&pair_xdp.0.host_veth) && has_xdp(&pair_xdp.1.host_veth));

    // An upgrade (the same package again: prerm upgrade, postinst configure OLD-VERSION)
    // leaves the links alone, and still enables nothing.
    dpkg(&["-i", &deb]);
    let upgraded = status("/usr/bin/dxdp", Some(DEFAULT_PIN_DIR));
    assert_eq!(
        upgraded.links.len(),
        2,
        "the upgrade touched the links: {upgraded:?}"
    );
    assert!(tcx_ingress_count(&pair_tc.0.host_veth) > 0);
    assert!(has_xdp(&pair_xdp.0.host_veth));
    assert!(!Path::new("/etc/systemd/system/multi-user.target.wants/dxdp.service").exists());

    // Removal: the prerm stops nothing here (no systemd) and runs `dxdp cleanup`.
    let removed = dpkg(&["-r", "dxdp"]);
    assert!(
        removed.stdout.contains("removed 2 link(s)"),
        "the prerm did not run dxdp cleanup: {removed}"
    );
    assert!(
        !Path::new(DEFAULT_PIN_DIR).exists(),
        "{DEFAULT_PIN_DIR} is still there after dpkg -r"
    );
    for node in &nodes {
        assert_eq!(
            tcx_ingress_count(&node.host_veth),
            0,
            "a TCX program is still attached to {}",
            node.host_veth
        );
        assert!(
            !has_xdp(&node.host_veth),
            "an XDP program is still attached to {}",
            node.host_veth
        );
    }
    let features_after: Vec<_> = nodes.iter().map(offloads).collect();
    assert_eq!(features_before, features_after, "offloads not restored");
    for (a, b) in [pair_tc, pair_xdp] {
        ping(a, b); // through the bridge again
    }
    assert!(!Path::new("/usr/bin/dxdp").exists());
    // Removed, not purged: the conffile stays, and the unit is masked so that the symlinks of
    // an earlier `systemctl enable` cannot start it.
    assert!(Path::new("/etc/default/dxdp").exists());
    let mask = std::fs::read_link("/etc/systemd/system/dxdp.service");
    assert_eq!(mask.ok().as_deref(), Some(Path::new("/dev/null")));
    dpkg(&["--purge", "dxdp"]);
    assert!(!run(&["dpkg", "-s", "dxdp"]).status.success());
    // Nothing left: conffile, mask, deb-systemd-helper's records.
    for path in [
        "/etc/default/dxdp",
        "/etc/systemd/system/dxdp.service",
        "/var/lib/systemd/deb-systemd-helper-enabled/dxdp.service.dsh-also",
        "/var/lib/systemd/deb-systemd-helper-masked/dxdp.service",
    ] {
        assert!(
            std::fs::symlink_metadata(path).is_err(),
            "{path} is left after the purge"
        );
    }
    eprintln!("Debian package test took {:?}", started.elapsed());
}

/// The package of the binary under test, built by packaging/deb/build.sh into `dir`; its path.
#[track_caller]
fn build_deb(dir: &TempDir) -> String {
    let build = format!("{REPO}/packaging/deb/build.sh");
    let built = try_run(
        &[
            &build,
            "--binary",
            DXDP,
            "--output",
            &format!("{}/", dir.path.display()),
        ],
        &[],
        Duration::from_secs(240),
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .ok();
    let deb = built.stdout.trim().to_owned();
    assert!(
        deb.ends_with(".deb") && Path::new(&deb).is_file(),
        "{built}"
    );
    deb
}

/// `dpkg ARGS…`, retried while another dpkg or apt holds the lock.
#[track_caller]
fn dpkg(args: &[&str]) -> Run {
    let mut argv = vec!["dpkg"];
    argv.extend_from_slice(args);
    let env = [("DEBIAN_FRONTEND", "noninteractive")];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let run = try_run(&argv, &env, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
        if run.status.success() {
            return run;
        }
        if !run.stderr.contains("lock") || Instant::now() > deadline {
            panic!("command failed: {run}");
        }
        thread::sleep(Duration::from_secs(1));
    }
}

/// The capabilities in the unit's CapabilityBoundingSet=, as setpriv names them (`sys_admin`).
fn unit_capabilities(unit: &str) -> Vec<String> {
    let text = std::fs::read_to_string(unit).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("CapabilityBoundingSet= in the unit");
    line.split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_ascii_lowercase())
        .collect()
}

/// `/usr/bin/dxdp ARGS…` as root with only `caps` and no_new_privs, the way systemd runs the
/// unit's ExecStart (minus the sandboxing), with the default pin directory.
fn bounded(caps: &[String], args: &[&str]) -> Run {
    let set = format!(
        "-all,{}",
        caps.iter()
            .map(|c| format!("+{c}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut argv = vec![
        "setpriv",
        "--bounding-set",
        &set,
        "--inh-caps",
        "-all",
        "--ambient-caps",
        "-all",
        "--no-new-privs",
        "--",
        "/usr/bin/dxdp",
    ];
    argv.extend_from_slice(args);
    run(&argv)
}

#[track_caller]
fn ping(from: &Node, to: &Node) {
    must(&[
        "ip",
        "netns",
        "exec",
        &from.netns,
        "ping",
        "-c",
        "3",
        "-i",
        "0.2",
        "-W",
        "2",
        &to.ipv4,
    ]);
}

/// Whether `ip -d link show` reports an XDP program on a host interface.
fn has_xdp(ifname: &str) -> bool {
    must(&["ip", "-d", "link", "show", "dev", ifname]).contains("prog/xdp")
}

/// GRO and tx checksumming inside a node, which the xdp datapath changes and cleanup restores.
fn offloads(node: &Node) -> Vec<String> {
    must(&["ip", "netns", "exec", &node.netns, "ethtool", "-k", "eth0"])
        .lines()
        .filter(|l| l.starts_with("generic-receive-offload") || l.starts_with("tx-checksumming"))
        .map(str::to_owned)
        .collect()
}

/// Programs attached to the TCX ingress hook of a host interface, asked of the kernel with
/// BPF_PROG_QUERY (Debian 12's bpftool 7.1 does not show TCX attachments).
fn tcx_ingress_count(ifname: &str) -> u32 {
    const BPF_PROG_QUERY: libc::c_long = 16;
    const BPF_TCX_INGRESS: u32 = 46;
    /// The BPF_PROG_QUERY part of `union bpf_attr`.
    #[repr(C)]
    #[derive(Default)]
    struct Query {
        target_ifindex: u32,
        attach_type: u32,
        query_flags: u32,
        attach_flags: u32,
        prog_ids: u64,
        prog_cnt: u32,
        _pad: u32,
        prog_attach_flags: u64,
        link_ids: u64,
        link_attach_flags: u64,
        revision: u64,
    }
    let ifindex: u32 = std::fs::read_to_string(format!("/sys/class/net/{ifname}/ifindex"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut query = Query {
        target_ifindex: ifindex,
        attach_type: BPF_TCX_INGRESS,
        ..Query::default()
    };
    // SAFETY: bpf(2) with a BPF_PROG_QUERY attribute of the kernel's layout and size; with
    // prog_ids null the kernel only writes the count back into the struct.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_QUERY,
            &mut query as *mut Query,
            std::mem::size_of::<Query>() as libc::c_uint,
        )
    };
    assert_eq!(
        ret,
        0,
        "BPF_PROG_QUERY on {ifname}: {}",
        std::io::Error::last_os_error()
    );
    query.prog_cnt
}
