//! The engines scripts/setup.sh installs can run a container, and when one cannot, setup's check
//! says which engine, why, and the way out (issue 21: Podman's crun refused every container on a
//! fresh hybrid-cgroup machine while CI passed on a machine that had a working runtime already).
//! Also `dxdp doctor` naming Podman's OCI runtime and failing one that cannot run here. Every
//! container is the check's own probe (`dxdp-probe-<pid>`), removed by the check.
//!
//! The runtime that cannot run here is crun on a hybrid-cgroup host. A fresh machine may have no
//! crun at all (Debian's podman depends on crun | runc, and setup.sh installs runc in the same
//! apt run), so where Podman finds no crun the tests run a stand-in of their own: an executable
//! named `crun` that refuses every container with crun's words, given to Podman by path for the
//! test only and removed after it.
use std::{fs, os::unix::fs::PermissionsExt, time::Duration};

use crate::support::{self, Background, DXDP, Run, run_for, wait_until};

const ENGINE_CHECK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/engine-check.sh");
const SETUP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/setup.sh");
const PODMAN_SOCKET: &str = "/run/podman/podman.sock";

fn require_engines() -> bool {
    support::require_docker()
        && support::can_run(support::missing_tools(&["podman", "curl", "busybox"]))
}

fn engine_check(args: &[&str]) -> Run {
    let argv: Vec<&str> = [ENGINE_CHECK]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    run_for(&argv, Duration::from_secs(120))
}

/// crun refuses every container here when the host's cgroups are hybrid and the v2 hierarchy
/// holds a controller (this machine: hugetlb).
fn crun_cannot_run_here() -> bool {
    let v2_is_unified = fs::metadata("/sys/fs/cgroup/cgroup.controllers").is_ok();
    let hybrid_controllers =
        fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers").unwrap_or_default();
    !v2_is_unified && !hybrid_controllers.trim().is_empty()
}

/// crun's refusal on a hybrid host whose cgroup v2 hierarchy holds a controller (libcrun's
/// message, which engine-check.sh and doctor recognise).
const CRUN_HYBRID_REFUSAL: &str =
    "cgroups in hybrid mode not supported, drop all controllers from cgroupv2";

/// The crun a test hands to Podman (`--runtime`): the installed one, or a stand-in of the test's
/// own, removed on drop, that answers `--version` and refuses everything else as crun does here.
struct Crun {
    /// `crun` (found by Podman in its runtime paths) or the stand-in's path.
    runtime: String,
    _dir: Option<ScratchDir>,
}

impl Crun {
    fn here() -> Self {
        // Podman's own search (its runtime paths, not PATH) says whether `--runtime crun` works.
        let installed = run_for(
            &[
                "podman",
                "--runtime",
                "crun",
                "info",
                "--format",
                "{{.Host.OCIRuntime.Path}}",
            ],
            Duration::from_secs(30),
        );
        if installed.success() {
            eprintln!("crun: {}", installed.stdout.trim());
            return Self {
                runtime: "crun".to_owned(),
                _dir: None,
            };
        }
        // Named crun so that Podman reports a runtime called crun (by its path), as doctor reads.
        let dir = ScratchDir::new("crun");
        let path = format!("{}/crun", dir.0);
        let script = format!(
            r#"#!/bin/sh
# A stand-in for crun, written by dxdp's engines test: crun is not installed here.
for arg do
    if [ "$arg" = --version ]; then echo 'crun version 0 (dxdp test stand-in)'; exit 0; fi
done
echo '{CRUN_HYBRID_REFUSAL}' >&2
exit 1
"#
        );
        fs::write(&path, script).expect("write the crun stand-in");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod the stand-in");
        eprintln!("crun is not installed: using a stand-in at {path}");
        Self {
            runtime: path,
            _dir: Some(dir),
        }
    }
}

/// libpod's /info from the API service on `socket`, or `None` while it does not answer.
fn libpod_info(socket: &str) -> Option<String> {
    let run = run_for(
        &[
            "curl",
            "-sf",
            "--unix-socket",
            socket,
            "http://podman/v4.0.0/libpod/info",
        ],
        Duration::from_secs(20),
    );
    run.success().then_some(run.stdout)
}

/// The runtime Podman's API service starts containers with, from libpod's /info.
fn podman_api_runtime(socket: &str) -> String {
    let body = libpod_info(socket)
        .unwrap_or_else(|| panic!("the Podman API service on {socket} does not answer"));
    let info: serde_json::Value = serde_json::from_str(&body).expect("libpod info is JSON");
    info["host"]["ociRuntime"]["name"]
        .as_str()
        .expect("libpod info names the OCI runtime")
        .to_owned()
}

#[test]
fn setup_proves_both_engines_run_a_container_and_names_podmans_runtime() {
    if !require_engines() {
        return;
    }
    // setup.sh on a set-up machine only checks, and now proves each engine.
    let setup = run_for(&[SETUP], Duration::from_secs(300));
    setup.assert_success();
    for engine in ["docker", "podman"] {
        assert!(
            setup
                .stderr
                .contains(&format!("engine-check: {engine} ran a container (runtime ")),
            "setup.sh did not prove {engine} runs a container:\n{setup}"
        );
    }
    let api_runtime = podman_api_runtime(PODMAN_SOCKET);
    assert!(
        setup
            .stderr
            .contains(&format!("podman API service: OCI runtime {api_runtime}")),
        "setup.sh's log does not name the runtime of the API service ({api_runtime}):\n{setup}"
    );
    if crun_cannot_run_here() {
        assert_ne!(
            api_runtime, "crun",
            "this host's cgroups are hybrid with v2 controllers, where crun runs nothing, yet \
             the Podman API service uses it"
        );
    }
    // The check itself, once per engine: run, ping, remove; nothing of it is left.
    for engine in ["docker", "podman"] {
        let run = engine_check(&[engine]);
        run.assert_success();
        assert!(run.stderr.contains("pinged it at"), "{run}");
        let left = run_for(
            &[
                engine,
                "ps",
                "-a",
                "--filter",
                "name=dxdp-probe-",
                "--format",
                "{{.Names}}",
            ],
            Duration::from_secs(30),
        );
        assert_eq!(left.stdout.trim(), "", "{engine} kept a probe container");
        let left = run_for(
            &[
                engine,
                "network",
                "ls",
                "--filter",
                "name=dxdp-probe-",
                "--format",
                "{{.Name}}",
            ],
            Duration::from_secs(30),
        );
        assert_eq!(left.stdout.trim(), "", "{engine} kept a probe network");
    }
}

#[test]
fn a_runtime_that_cannot_run_a_container_fails_the_check_naming_the_engine_and_the_fix() {
    if !require_engines() {
        return;
    }
    // A runtime that exits at once: any engine that cannot start a container.
    let broken = engine_check(&["podman", "--runtime=/bin/false"]);
    broken.assert_failure();
    assert!(
        broken
            .stderr
            .contains("engine-check: podman cannot run a container here"),
        "{broken}"
    );
    assert!(broken.stderr.contains("engine-check: fix: "), "{broken}");
    if crun_cannot_run_here() {
        // The fresh-machine break itself: crun (or its stand-in) on this hybrid host.
        let runtime = Crun::here();
        let crun = engine_check(&["podman", &format!("--runtime={}", runtime.runtime)]);
        crun.assert_failure();
        assert!(crun.stderr.contains(CRUN_HYBRID_REFUSAL), "{crun}");
        assert!(
            crun.stderr.contains("runtime = \"runc\"") && crun.stderr.contains("containers.conf.d"),
            "the fix should say how to choose runc: {crun}"
        );
    }
}

#[test]
fn doctor_names_podmans_runtime_and_fails_one_that_cannot_run_here() {
    if !require_engines() {
        return;
    }
    let doctor = |socket: &str| {
        let host = format!("unix://{socket}");
        run_for(
            &["env", &format!("DOCKER_HOST={host}"), DXDP, "doctor"],
            Duration::from_secs(60),
        )
    };
    let api_runtime = podman_api_runtime(PODMAN_SOCKET);
    let ok = doctor(PODMAN_SOCKET);
    assert!(
        ok.stdout
            .lines()
            .any(|l| l.starts_with("[ ok ] OCI runtime ") && l.contains(&api_runtime)),
        "doctor should name Podman's runtime {api_runtime}: {ok}"
    );
    if !crun_cannot_run_here() {
        return;
    }
    // A second API service of the test's own, told to use crun, on a socket beside nothing else.
    // Declared before the service, so dropped after it: the stand-in outlives its user.
    let runtime = Crun::here();
    let dir = ScratchDir::new("service");
    let socket = format!("{}/podman-crun.sock", dir.0);
    let _service = Background::spawn(&[
        "podman",
        "--runtime",
        &runtime.runtime,
        "system",
        "service",
        "--time=0",
        &format!("unix://{socket}"),
    ]);
    assert!(
        wait_until(Duration::from_secs(30), || fs::metadata(&socket).is_ok()
            && libpod_info(&socket).is_some()),
        "the test's crun API service did not come up on {socket}"
    );
    // Podman names a runtime given by path by its path: doctor must know it as crun all the same.
    let crun_name = podman_api_runtime(&socket);
    assert!(
        crun_name == "crun" || crun_name.ends_with("/crun"),
        "the test's API service runs {crun_name}, not crun"
    );
    let failed = doctor(&socket);
    failed.assert_failure();
    let line = failed
        .stdout
        .lines()
        .find(|l| l.starts_with(&format!("[FAIL] OCI runtime {crun_name}")))
        .unwrap_or_else(|| panic!("doctor did not fail crun ({crun_name}) here: {failed}"));
    assert!(line.contains("hybrid"), "{line}");
    assert!(
        failed.stdout.contains("runtime = \"runc\""),
        "the fix should name runc: {failed}"
    );
}

/// A directory of the test's own, removed on drop.
struct ScratchDir(String);

impl ScratchDir {
    /// `dxdp-engines-<pid>-<what>` in the temp directory.
    fn new(what: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("dxdp-engines-{}-{what}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        Self(dir.display().to_string())
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
