//! Prerequisites: whether a test can run on this host. Every test that needs something of the host
//! (root, bpffs, a tool, dockerd, compose) asks [`can_run`] first, through one of the `require_*`
//! shorthands or with a list of its own; without it the test prints `skipping: <why>` and passes,
//! except under CI=true, where a test that cannot run is a failure: it panics.
//!
//! Call it first: `if !require_privileges() { return; }`.

use std::{path::PathBuf, time::Duration};

use super::{
    docker_cli::{DOCKER, IMAGE, compose_command, try_compose},
    dxdp::BPFFS,
    process::try_run,
};

/// External tools the netns harness drives.
const TOOLS: &[&str] = &[
    "ip",
    "iptables",
    "ip6tables",
    "ping",
    "iperf3",
    "ethtool",
    "ss",
];

/// The one place that decides: true when nothing is `missing`; otherwise prints
/// `skipping: <why>` and returns false, or, when the environment variable CI is `true`, panics
/// with `<why>`.
#[track_caller]
pub fn can_run(missing: Vec<String>) -> bool {
    if missing.is_empty() {
        return true;
    }
    let why = missing.join("; ");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true, and this test cannot run here: {why}");
    }
    eprintln!("skipping: {why}");
    false
}

/// What is missing for the eBPF tests: root and bpffs at /sys/fs/bpf.
pub fn missing_root_and_bpffs() -> Vec<String> {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("not running as root".to_owned());
    }
    match nix::sys::statfs::statfs(BPFFS) {
        Ok(fs) if fs.filesystem_type() == nix::sys::statfs::BPF_FS_MAGIC => {}
        Ok(_) => missing.push(format!("{BPFFS} is not a bpffs mount")),
        Err(e) => missing.push(format!("{BPFFS} is not there ({e})")),
    }
    missing
}

/// `<tool> is not installed` for each of `tools` found neither on PATH nor in /usr/sbin, /sbin.
pub fn missing_tools(tools: &[&str]) -> Vec<String> {
    tools
        .iter()
        .filter(|tool| find_in_path(tool).is_none())
        .map(|tool| format!("{tool} is not installed"))
        .collect()
}

pub fn find_in_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

/// What is missing for the netns tests: root, bpffs and the tools in [`TOOLS`].
fn missing_privileges() -> Vec<String> {
    let mut missing = missing_root_and_bpffs();
    missing.extend(missing_tools(TOOLS));
    missing
}

/// What is missing for the Docker tests besides [`missing_privileges`]: a reachable dockerd and
/// the test image.
fn missing_docker() -> Vec<String> {
    let mut missing = Vec::new();
    match try_run(
        &[DOCKER, "info", "--format", "{{.ServerVersion}}"],
        Duration::from_secs(20),
    ) {
        Ok(run) if run.success() => {}
        _ => missing.push("dockerd is not reachable (start it: scripts/setup.sh)".to_owned()),
    }
    match try_run(
        &[DOCKER, "image", "inspect", IMAGE],
        Duration::from_secs(20),
    ) {
        Ok(run) if run.success() => {}
        _ => missing.push(format!(
            "image {IMAGE} is missing (scripts/build-test-image.sh)"
        )),
    }
    missing
}

/// Root, bpffs at /sys/fs/bpf and the tools the netns harness drives.
#[track_caller]
pub fn require_privileges() -> bool {
    can_run(missing_privileges())
}

/// [`require_privileges`], and dockerd with the test image.
#[track_caller]
pub fn require_docker() -> bool {
    require_privileges() && can_run(missing_docker())
}

/// [`require_docker`], and a compose command that runs (`DXDP_COMPOSE`, else `docker compose`).
#[track_caller]
pub fn require_compose() -> bool {
    if !require_docker() {
        return false;
    }
    let missing = match try_compose(&["version"], Duration::from_secs(20)) {
        Ok(run) if run.success() => Vec::new(),
        _ => vec![format!(
            "`{}` does not run (scripts/setup.sh installs Compose v2)",
            compose_command().join(" ")
        )],
    };
    can_run(missing)
}
