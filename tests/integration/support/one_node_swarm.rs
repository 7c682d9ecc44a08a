//! A one-node swarm of the host's dockerd, as the `swarm::` tests and the differential harness's
//! overlay topology make it: [`Swarm::init`] on 127.0.0.1, left on drop with what swarm mode made
//! (`docker_gwbridge` unless it was there before). A dockerd that is in a swarm already is
//! someone else's: [`swarm_can_be_made`] says so, and the test does not run there (it fails under
//! CI=true, as any test that cannot run). Also where an overlay network's sandbox namespace is
//! on this node.

use std::{path::PathBuf, time::Duration};

use super::{
    docker_cli::{DOCKER, docker_ok},
    prereq::can_run,
    process::{Run, try_run, wait_until},
};

/// Where dockerd (exec-root `/var/run/docker`) keeps its network namespaces.
const DOCKER_NETNS: &str = "/var/run/docker/netns";

/// `docker ARGS…` within 60 s; `None` if it could not run or overran. Never panics: guards call
/// it from `drop`, also while a failed assertion unwinds.
pub fn try_docker(args: &[&str]) -> Option<Run> {
    let mut argv = vec![DOCKER];
    argv.extend_from_slice(args);
    match try_run(&argv, Duration::from_secs(60)) {
        Ok(run) => Some(run),
        Err(e) => {
            eprintln!("{e}");
            None
        }
    }
}

/// `docker info`'s swarm state: `inactive`, `pending`, `active`, `error` or `locked`; empty if
/// dockerd did not answer.
pub fn swarm_state() -> String {
    try_docker(&["info", "--format", "{{.Swarm.LocalNodeState}}"])
        .map(|run| run.stdout.trim().to_owned())
        .unwrap_or_default()
}

/// Whether dockerd has a network of that name.
pub fn network_exists(name: &str) -> bool {
    try_docker(&["network", "inspect", name]).is_some_and(|run| run.success())
}

/// A swarm this test initialized; left on drop (or by [`Swarm::leave`]), taking with it what
/// swarm mode made: `docker_gwbridge` is removed unless it was there before.
pub struct Swarm {
    pub gwbridge_was_there: bool,
    left: bool,
}

impl Swarm {
    #[track_caller]
    pub fn init() -> Self {
        let swarm = Self {
            gwbridge_was_there: network_exists("docker_gwbridge"),
            left: false,
        };
        // Loopback only: a one-node swarm needs no reachable address, and nothing outside this
        // host gets a port 2377 to talk to.
        docker_ok(&[
            "swarm",
            "init",
            "--advertise-addr",
            "127.0.0.1",
            "--listen-addr",
            "127.0.0.1:2377",
        ]);
        swarm
    }

    /// Leaves the swarm and removes `docker_gwbridge` if swarm mode made it; what failed, if
    /// anything.
    pub fn leave(&mut self) -> Result<(), String> {
        if self.left {
            return Ok(());
        }
        self.left = true;
        let left = try_docker(&["swarm", "leave", "--force"]);
        if swarm_state() != "inactive" {
            return Err(match left {
                Some(run) => format!("cannot leave the swarm: {run}"),
                None => "cannot leave the swarm".to_owned(),
            });
        }
        if self.gwbridge_was_there {
            return Ok(());
        }
        // The ingress sandbox may still hold the bridge for a moment after the leave.
        let mut last = None;
        let removed = wait_until(Duration::from_secs(20), || {
            if !network_exists("docker_gwbridge") {
                return true;
            }
            let run = try_docker(&["network", "rm", "docker_gwbridge"]);
            let done = run.as_ref().is_some_and(Run::success);
            last = run;
            done
        });
        match (removed, last) {
            (true, _) => Ok(()),
            (false, Some(run)) => Err(format!("cannot remove docker_gwbridge: {run}")),
            (false, None) => Err("docker_gwbridge stayed".to_owned()),
        }
    }
}

impl Drop for Swarm {
    fn drop(&mut self) {
        if let Err(e) = self.leave() {
            eprintln!("cleanup: {e}");
        }
    }
}

/// Whether [`Swarm::init`] can run here: not in a swarm someone else made, nor under
/// live-restore (which swarm mode refuses); otherwise `false` after telling the runner why (a
/// failure under CI).
pub fn swarm_can_be_made() -> bool {
    let state = swarm_state();
    let mut problems = Vec::new();
    if state != "inactive" {
        problems.push(format!(
            "the host's dockerd is in a swarm already (state {state}); this test makes a swarm of \
             its own and leaves it, so it does not run in one it did not make"
        ));
    } else if docker_ok(&["info", "--format", "{{.LiveRestoreEnabled}}"]) == "true" {
        problems.push("dockerd runs with live-restore, which swarm mode refuses".to_owned());
    }
    can_run(problems)
}

/// The sandbox namespace of the overlay network `network` on this node: `1-<id prefix>`, as
/// libnetwork names it (the first 12 characters).
#[track_caller]
pub fn sandbox_of(network: &str) -> String {
    let id = docker_ok(&["network", "inspect", "-f", "{{.Id}}", network]);
    format!("1-{id}").chars().take(12).collect()
}

/// The namespace file of the sandbox `sandbox`, under dockerd's exec-root.
pub fn sandbox_netns(sandbox: &str) -> PathBuf {
    PathBuf::from(format!("{DOCKER_NETNS}/{sandbox}"))
}
