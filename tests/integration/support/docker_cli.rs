//! The docker and compose command lines: the host's shared dockerd by default, or a private one
//! (`docker -H HOST`) through [`DockerCli`].

use std::time::Duration;

use super::process::{Run, run_for, try_run};

/// The Debian package's client (28.x; it negotiates down to a 20.10 daemon's API 1.41).
pub const DOCKER: &str = "/usr/bin/docker";
/// Built by scripts/build-test-image.sh: sh, sleep, ip, ping, iperf3.
pub const IMAGE: &str = "dxdp-test:local";

/// How long one docker command may take.
const DOCKER_TIMEOUT: Duration = Duration::from_secs(60);

/// `docker [-H HOST]`: the host's dockerd, or the daemon at `host`. Cheap to clone and `Send`,
/// for commands run from other threads.
#[derive(Clone, Debug, Default)]
pub struct DockerCli {
    /// DOCKER_HOST of a private daemon; `None` for the host's.
    pub host: Option<String>,
}

impl DockerCli {
    /// The host's dockerd, shared with whatever else runs on the machine.
    pub fn shared() -> Self {
        Self { host: None }
    }

    /// The daemon listening at `host` (`unix://…`).
    pub fn at(host: &str) -> Self {
        Self {
            host: Some(host.to_owned()),
        }
    }

    /// `docker [-H HOST] ARGS…` as an argv.
    pub fn argv(&self, args: &[&str]) -> Vec<String> {
        let mut argv = vec![DOCKER.to_owned()];
        if let Some(host) = &self.host {
            argv.extend(["-H".to_owned(), host.clone()]);
        }
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        argv
    }

    /// `docker [-H HOST] ARGS…` within 60 s, whatever its exit code.
    pub fn run(&self, args: &[&str]) -> Run {
        run_for(&self.argv(args), DOCKER_TIMEOUT)
    }

    /// `docker [-H HOST] ARGS…`, which must succeed; returns trimmed stdout.
    #[track_caller]
    pub fn ok(&self, args: &[&str]) -> String {
        let run = self.run(args);
        run.assert_success();
        run.stdout.trim().to_owned()
    }

    /// Like [`DockerCli::run`] from a guard's drop: failures are reported, never panicked on.
    pub fn quietly(&self, args: &[&str]) {
        match try_run(&self.argv(args), DOCKER_TIMEOUT) {
            Ok(run) if run.success() => {}
            Ok(run) => eprintln!("cleanup: {run}"),
            Err(e) => eprintln!("cleanup: {e}"),
        }
    }
}

/// `docker ARGS…` against the host's dockerd within 60 s, whatever its exit code.
pub fn docker(args: &[&str]) -> Run {
    DockerCli::shared().run(args)
}

/// `docker ARGS…` against the host's dockerd, which must succeed; returns trimmed stdout.
#[track_caller]
pub fn docker_ok(args: &[&str]) -> String {
    DockerCli::shared().ok(args)
}

/// The compose command: `DXDP_COMPOSE` split on spaces (the legacy lane sets `docker-compose`,
/// Compose 1.29), else Compose v2's `docker compose`.
pub fn compose_command() -> Vec<String> {
    let configured = std::env::var("DXDP_COMPOSE").unwrap_or_default();
    let words: Vec<String> = configured.split_whitespace().map(str::to_owned).collect();
    if words.is_empty() {
        vec![DOCKER.to_owned(), "compose".to_owned()]
    } else {
        words
    }
}

/// `COMPOSE ARGS…` (see [`compose_command`]) within `timeout`, whatever its exit code.
pub fn compose(args: &[&str], timeout: Duration) -> Run {
    let mut argv = compose_command();
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    run_for(&argv, timeout)
}

/// Like [`compose`], but an error to start it is returned rather than a panic.
pub fn try_compose(args: &[&str], timeout: Duration) -> Result<Run, String> {
    let mut argv = compose_command();
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    try_run(&argv, timeout)
}

/// The name of a compose service's first container, looked up by compose's labels: Compose v2
/// names it `PROJECT-SERVICE-1`, Compose 1.x `PROJECT_SERVICE_1`.
#[track_caller]
pub fn compose_container(project: &str, service: &str) -> String {
    let project = format!("label=com.docker.compose.project={project}");
    let service = format!("label=com.docker.compose.service={service}");
    let names = docker_ok(&[
        "ps",
        "-a",
        "--filter",
        &project,
        "--filter",
        &service,
        "--filter",
        "label=com.docker.compose.container-number=1",
        "--format",
        "{{.Names}}",
    ]);
    let mut lines = names.lines();
    match (lines.next(), lines.next()) {
        (Some(one), None) => one.to_owned(),
        _ => panic!("{project} {service}: expected one container numbered 1, found {names:?}"),
    }
}

/// The daemon's major version (20 for Debian 12's 20.10, 28 for Engine 28.5).
#[track_caller]
pub fn engine_major() -> u32 {
    let version = docker_ok(&["version", "--format", "{{.Server.Version}}"]);
    version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("cannot parse the daemon's version {version:?}"))
}

/// iperf3 from container `client` to `server_ip` through a container engine's command line
/// (`cli`: `docker` or `podman`, run with ARGS), bounded; returns bits/s received.
#[track_caller]
pub fn container_iperf3(
    cli: impl Fn(&[&str]) -> Run,
    server: &str,
    client: &str,
    server_ip: &str,
    udp: bool,
) -> f64 {
    let started = cli(&["exec", "-d", server, "iperf3", "-s", "-1", "-p", "5201"]);
    assert!(started.success(), "iperf3 server: {started}");
    let mut args = vec![
        "exec", client, "timeout", "20", "iperf3", "-c", server_ip, "-p", "5201",
    ];
    args.extend_from_slice(&["-t", "2", "--json", "--connect-timeout", "3000"]);
    if udp {
        args.extend_from_slice(&["-u", "-b", "200M"]);
    }
    // The one-off server may need a moment to listen.
    let mut last = None;
    for _ in 0..20 {
        let run = cli(&args);
        if run.success() {
            let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("iperf3 json");
            let sum = if udp {
                &json["end"]["sum"]
            } else {
                &json["end"]["sum_received"]
            };
            return sum["bits_per_second"].as_f64().expect("bits_per_second");
        }
        last = Some(run);
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("iperf3 never ran: {}", last.expect("a run"));
}

/// `count` pings from container `from` to `ip`, 10 ms apart, through a container engine's
/// command line (`cli`, as for [`container_iperf3`]): `Ok` when every one is answered, else the
/// run that says why.
pub fn container_pings(
    cli: impl Fn(&[&str]) -> Run,
    from: &str,
    ip: &str,
    count: u32,
) -> Result<(), Run> {
    let count_s = count.to_string();
    let run = cli(&[
        "exec", from, "ping", "-q", "-n", "-c", &count_s, "-i", "0.01", "-W", "1", ip,
    ]);
    if run.success() && run.stdout.contains(&format!("{count} received")) {
        Ok(())
    } else {
        Err(run)
    }
}
