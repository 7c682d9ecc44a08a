//! `dxdp bench-ingress`: a container's published ports measured from a client namespace through
//! a NIC, over Docker's path (DNAT, conntrack, the bridge) and over the `dxdp expose` fast path,
//! interleaved round by round (docker, fast, docker, fast, …).
//!
//! The servers are the host's binaries run inside the container's network namespace (the image
//! needs none of its own); the clients run in the client namespace and reach the container as
//! any outside client does, at the published address and port on the NIC. What the bench
//! changes (the container's exposure, the servers, a scratch directory) is put back when it
//! ends: after an error or Ctrl-C as after success.
use std::{
    fs::File,
    net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::Stdio,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;

use super::{
    Step,
    measure::{
        self, KillOnDrop, Placement, Runner, check_interrupted, in_netns, on_cpu, run_bounded,
    },
    stats::Spread,
    table,
};
use crate::{
    datapath::{Capacity, Datapath, ExistingConnections, ExposedPort, ExposurePlan, PortMapping},
    netlink::Interface,
    netns::NetnsPath,
};

/// A server the bench runs in the container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    Redis,
    Nginx,
    Iperf3,
    Sockperf,
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Service::Redis => "redis",
            Service::Nginx => "nginx",
            Service::Iperf3 => "iperf3",
            Service::Sockperf => "sockperf",
        }
    }
}

/// A container port the bench's servers listen on, which the container must publish on the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Need {
    pub service: Service,
    #[serde(rename = "container_port")]
    pub port: u16,
    #[serde(rename = "protocol", serialize_with = "protocol")]
    pub udp: bool,
}

fn protocol<S: serde::Serializer>(udp: &bool, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(if *udp { "udp" } else { "tcp" })
}

/// The fixed mapping: redis, nginx, iperf3 (its control connection, TCP tests and the UDP
/// packet rate, which iperf3 sends to its control port's number) and sockperf's ping-pong.
pub const NEEDS: [Need; 5] = [
    Need {
        service: Service::Redis,
        port: 6379,
        udp: false,
    },
    Need {
        service: Service::Nginx,
        port: 80,
        udp: false,
    },
    Need {
        service: Service::Iperf3,
        port: 5201,
        udp: false,
    },
    Need {
        service: Service::Iperf3,
        port: 5201,
        udp: true,
    },
    Need {
        service: Service::Sockperf,
        port: 11111,
        udp: false,
    },
];

impl Need {
    fn proto(&self) -> &'static str {
        if self.udp { "udp" } else { "tcp" }
    }
}

/// Where clients reach a needed container port: its published address and port on the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Target {
    #[serde(flatten)]
    pub need: Need,
    pub host_addr: IpAddr,
    pub host_port: u16,
}

impl Target {
    fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host_addr, self.host_port)
    }
}

/// The published address and port of every [`NEEDS`] entry among `ports` (the container's on
/// `nic`, as `expose` would take them), or a refusal naming each one missing.
pub fn targets(container: &str, nic: &str, ports: &[PortMapping]) -> Result<Vec<Target>> {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for need in NEEDS {
        let mut on_nic: Vec<&PortMapping> = ports
            .iter()
            .filter(|m| m.nic == nic && m.container_port == need.port && m.udp == need.udp)
            .collect();
        // IPv4 first: the client namespace's address is.
        on_nic.sort_by_key(|m| !m.host_addr.is_ipv4());
        match on_nic.first() {
            Some(m) => found.push(Target {
                need,
                host_addr: m.host_addr,
                host_port: m.host_port,
            }),
            None => missing.push(format!(
                "{}/{} ({})",
                need.port,
                need.proto(),
                need.service.name()
            )),
        }
    }
    if !missing.is_empty() {
        let example: Vec<String> = NEEDS
            .iter()
            .map(|n| {
                let udp = if n.udp { "/udp" } else { "" };
                format!("-p ADDR:{}:{}{udp}", n.port, n.port)
            })
            .collect();
        bail!(
            "{container} does not publish {} on an address of {nic}; the bench runs its servers \
             on fixed container ports, so publish each on the NIC's address ADDR: {}",
            missing.join(", "),
            example.join(" ")
        );
    }
    let iperf: Vec<&Target> = found
        .iter()
        .filter(|t| t.need.service == Service::Iperf3)
        .collect();
    if let [tcp, udp] = iperf[..]
        && (tcp.host_addr, tcp.host_port) != (udp.host_addr, udp.host_port)
    {
        bail!(
            "{container} publishes 5201/tcp as {} but 5201/udp as {}; iperf3 sends its UDP test \
             to its control connection's address and port, so publish both on the same one",
            tcp.addr(),
            udp.addr()
        );
    }
    Ok(found)
}

/// `targets` at the container's end of the wire: its address there and the container ports.
pub fn wire_targets(targets: &[Target], container_addr: Ipv4Addr) -> Vec<Target> {
    targets
        .iter()
        .map(|t| Target {
            host_addr: IpAddr::V4(container_addr),
            host_port: t.need.port,
            ..*t
        })
        .collect()
}

fn target(targets: &[Target], service: Service) -> Result<Target> {
    targets
        .iter()
        .find(|t| t.need.service == service && !t.need.udp)
        .copied()
        .ok_or_else(|| anyhow!("no published port for {}", service.name()))
}

/// The host tools the bench runs beside [`measure::TOOLS`], each with its Debian package.
const TOOLS: &[(&str, &str)] = &[
    ("redis-server", "redis-server"),
    ("redis-benchmark", "redis-tools"),
    ("nginx", "nginx-light"),
    ("wrk", "wrk"),
    ("sockperf", "sockperf"),
];

/// The tools missing from `PATH`, with what to install (Debian's package names).
pub fn missing_tools() -> Vec<String> {
    let ours = TOOLS.iter().map(|(tool, package)| {
        (
            *tool,
            format!("apt-get install {package} (scripts/setup.sh installs it)"),
        )
    });
    let shared = measure::TOOLS
        .iter()
        .map(|(tool, hint)| (*tool, (*hint).to_owned()));
    shared
        .chain(ours)
        .filter(|(tool, _)| !measure::on_path(tool))
        .map(|(tool, hint)| format!("{tool}: {hint}"))
        .collect()
}

/// The address the client namespace sends from to `to`: its connections are the ones the
/// bench forgets when it switches the fast path off.
pub fn client_source(client_ns: &Path, to: IpAddr) -> Result<IpAddr> {
    let mut cmd = in_netns(client_ns, "ip");
    cmd.args(["-j", "route", "get", &to.to_string()]);
    let out = run_bounded(cmd, Duration::from_secs(10), "ip route get")?;
    if !out.status.success() {
        bail!(
            "the client namespace {} has no route to {to}: {}",
            client_ns.display(),
            out.stderr.trim()
        );
    }
    let routes: Vec<serde_json::Value> =
        serde_json::from_str(&out.stdout).context("cannot parse `ip -j route get`")?;
    let src = routes
        .first()
        .and_then(|r| r.get("prefsrc")?.as_str())
        .ok_or_else(|| anyhow!("`ip route get {to}` in the client namespace names no source"))?;
    src.parse()
        .with_context(|| format!("bad source address {src:?}"))
}

/// The busiest of `ifaces` (host interfaces) over a second, in packets per second both ways:
/// other traffic through the NIC or the container's veth would be measured with the bench's.
pub fn busiest(ifaces: &[&str]) -> Result<(u64, String)> {
    let rates = measure::per_second(|| {
        let mut out = Vec::new();
        for iface in ifaces {
            let mut sum = 0;
            for way in ["rx", "tx"] {
                let path = format!("/sys/class/net/{iface}/statistics/{way}_packets");
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read {path}"))?;
                sum += text.trim().parse::<u64>().unwrap_or(0);
            }
            out.push(sum);
        }
        Ok(out)
    })?;
    Ok(rates
        .iter()
        .zip(ifaces)
        .map(|(rate, i)| (*rate as u64, (*i).to_owned()))
        .max()
        .unwrap_or_default())
}

/// Which way the client's traffic reaches the container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// Unexposed: Docker's DNAT, conntrack, FORWARD and the bridge.
    Docker,
    /// `dxdp expose`: the NIC's program straight into the container, and back.
    Fast,
    /// `--wire`: a veth pair from the client namespace into the container's, no host between
    /// (the reference; see [`super::wire`]).
    Wire,
}

impl Route {
    pub const ALL: [Route; 3] = [Route::Docker, Route::Fast, Route::Wire];

    pub fn name(self) -> &'static str {
        match self {
            Route::Docker => "docker",
            Route::Fast => "fast",
            Route::Wire => "wire",
        }
    }
}

/// What each route is measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Metric {
    RedisGet1,
    RedisGet20,
    Wrk20,
    TcpIn,
    TcpOut,
    Udp64,
    PingPongMedian,
    PingPongP99,
    /// The same ping-pong with the client and the server on one CPU ([`PINNED_CPU`]): the
    /// path's own latency, without the wake-up of an idle vCPU on each side.
    PingPongOneCpuMedian,
    PingPongOneCpuP99,
}

/// The CPU the one-CPU ping-pong runs both ends on.
pub const PINNED_CPU: usize = 0;

impl Metric {
    pub const ALL: [Metric; 10] = [
        Metric::RedisGet1,
        Metric::RedisGet20,
        Metric::Wrk20,
        Metric::TcpIn,
        Metric::TcpOut,
        Metric::Udp64,
        Metric::PingPongMedian,
        Metric::PingPongP99,
        Metric::PingPongOneCpuMedian,
        Metric::PingPongOneCpuP99,
    ];

    /// Stable key for JSON consumers.
    pub fn id(self) -> &'static str {
        match self {
            Metric::RedisGet1 => "redis_get_c1_rps",
            Metric::RedisGet20 => "redis_get_c20_rps",
            Metric::Wrk20 => "wrk_c20_rps",
            Metric::TcpIn => "tcp_in_gbps",
            Metric::TcpOut => "tcp_out_gbps",
            Metric::Udp64 => "udp64_in_kpps",
            Metric::PingPongMedian => "pingpong_median_us",
            Metric::PingPongP99 => "pingpong_p99_us",
            Metric::PingPongOneCpuMedian => "pingpong_one_cpu_median_us",
            Metric::PingPongOneCpuP99 => "pingpong_one_cpu_p99_us",
        }
    }

    /// The table's row name, which says how it was measured.
    pub fn label(self) -> &'static str {
        match self {
            Metric::RedisGet1 => "redis-benchmark GET -c 1",
            Metric::RedisGet20 => "redis-benchmark GET -c 20",
            Metric::Wrk20 => "wrk -t1 -c20 (nginx)",
            Metric::TcpIn => "iperf3 TCP, into the container",
            Metric::TcpOut => "iperf3 TCP -R, out of it",
            Metric::Udp64 => "iperf3 UDP 64 B, delivered",
            Metric::PingPongMedian => "sockperf TCP ping-pong, median",
            Metric::PingPongP99 => "sockperf TCP ping-pong, p99",
            Metric::PingPongOneCpuMedian => "the same, both ends on CPU 0, median",
            Metric::PingPongOneCpuP99 => "the same, both ends on CPU 0, p99",
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            Metric::RedisGet1 | Metric::RedisGet20 | Metric::Wrk20 => "req/s",
            Metric::TcpIn | Metric::TcpOut => "Gbit/s",
            Metric::Udp64 => "kpps",
            Metric::PingPongMedian
            | Metric::PingPongP99
            | Metric::PingPongOneCpuMedian
            | Metric::PingPongOneCpuP99 => "µs",
        }
    }

    pub fn lower_is_better(self) -> bool {
        matches!(
            self,
            Metric::PingPongMedian
                | Metric::PingPongP99
                | Metric::PingPongOneCpuMedian
                | Metric::PingPongOneCpuP99
        )
    }

    /// Issue 24's goal for fast / docker: at least this for rates, at most for latency.
    pub fn goal(self) -> Option<f64> {
        match self {
            Metric::Wrk20 | Metric::Udp64 => Some(1.4),
            Metric::RedisGet20 => Some(1.15),
            Metric::PingPongMedian | Metric::PingPongOneCpuMedian => Some(0.8),
            _ => None,
        }
    }

    /// Whether a fast / docker `ratio` meets the goal; `None` without one.
    fn meets(self, ratio: f64) -> Option<bool> {
        let goal = self.goal()?;
        Some(if self.lower_is_better() {
            ratio <= goal
        } else {
            ratio >= goal
        })
    }

    /// Progress label.
    fn short(self) -> &'static str {
        match self {
            Metric::RedisGet1 => "redis GET c1",
            Metric::RedisGet20 => "redis GET c20",
            Metric::Wrk20 => "wrk c20",
            Metric::TcpIn => "tcp in",
            Metric::TcpOut => "tcp out",
            Metric::Udp64 => "udp64",
            Metric::PingPongMedian | Metric::PingPongP99 => "ping-pong",
            Metric::PingPongOneCpuMedian | Metric::PingPongOneCpuP99 => "ping-pong, one CPU",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Every sample: one per round, route and metric.
#[derive(Clone, Debug, Default)]
pub struct Results {
    samples: [[Vec<f64>; Metric::ALL.len()]; Route::ALL.len()],
    /// Packets the fast path let into the container in each fast round; zero would mean the
    /// round measured Docker's path after all.
    pub fast_packets_per_round: Vec<u64>,
}

impl Results {
    pub fn samples(&self, route: Route, metric: Metric) -> &[f64] {
        &self.samples[route as usize][metric.index()]
    }

    fn push(&mut self, route: Route, metric: Metric, value: f64) {
        self.samples[route as usize][metric.index()].push(value);
    }

    pub fn spread(&self, route: Route, metric: Metric) -> Option<Spread> {
        Spread::of(self.samples(route, metric))
    }

    /// The fast path's median over Docker's.
    pub fn ratio(&self, metric: Metric) -> Option<f64> {
        self.over_docker(Route::Fast, metric)
    }

    /// `route`'s median over Docker's.
    pub fn over_docker(&self, route: Route, metric: Metric) -> Option<f64> {
        let docker = self.spread(Route::Docker, metric)?.median;
        let other = self.spread(route, metric)?.median;
        (docker > 0.0).then(|| other / docker)
    }

    /// Whether the wire was measured (`--wire`).
    pub fn has_wire(&self) -> bool {
        self.samples[Route::Wire as usize]
            .iter()
            .any(|s| !s.is_empty())
    }

    /// `route` over Docker's in each round: the rounds interleave the routes, so a round's
    /// ratio compares figures taken a minute apart, whatever the host did over the whole run.
    /// A run stops at its first failed measurement, so the i-th samples are the same round's.
    pub fn per_round(&self, route: Route, metric: Metric) -> Vec<f64> {
        self.samples(Route::Docker, metric)
            .iter()
            .zip(self.samples(route, metric))
            .filter(|(docker, _)| **docker > 0.0)
            .map(|(docker, other)| other / docker)
            .collect()
    }

    /// Whether the ratio of the medians meets the metric's goal; `None` without a goal or a
    /// ratio.
    pub fn met(&self, metric: Metric) -> Option<bool> {
        metric.meets(self.ratio(metric)?)
    }

    /// In how many rounds the fast path's ratio met the metric's goal, of how many; `None`
    /// without a goal.
    pub fn rounds_meeting_goal(&self, metric: Metric) -> Option<(usize, usize)> {
        metric.goal()?;
        let ratios = self.per_round(Route::Fast, metric);
        let met = ratios
            .iter()
            .filter(|&&r| metric.meets(r) == Some(true))
            .count();
        Some((met, ratios.len()))
    }
}

/// The side-by-side table: one row per metric, Docker's path and the fast path (and the wire,
/// if measured) as `median (min–max)`, their ratios to Docker's and issue 24's goal.
pub fn render(results: &Results, rounds: u32) -> String {
    let wire = results.has_wire();
    let mut header = vec!["WORKLOAD", "UNIT", "DOCKER", "FAST"];
    if wire {
        header.push("WIRE");
    }
    header.push("FAST/DOCKER");
    if wire {
        header.push("WIRE/DOCKER");
    }
    header.push("GOAL");
    let mut rows = vec![header.into_iter().map(str::to_owned).collect::<Vec<_>>()];
    for m in Metric::ALL {
        let goal = match (m.goal(), results.met(m)) {
            (None, _) => String::new(),
            (Some(g), met) => format!(
                "{} {g:.2}x {}{}",
                if m.lower_is_better() { "≤" } else { "≥" },
                match met {
                    Some(true) => "met",
                    Some(false) => "missed",
                    None => "n/a",
                },
                match results.rounds_meeting_goal(m) {
                    Some((met, of)) if of > 1 => format!(", in {met} of {of} rounds"),
                    _ => String::new(),
                }
            ),
        };
        let mut row = vec![
            m.label().to_owned(),
            m.unit().to_owned(),
            table::cell(results.spread(Route::Docker, m)),
            table::cell(results.spread(Route::Fast, m)),
        ];
        if wire {
            row.push(table::cell(results.spread(Route::Wire, m)));
        }
        row.push(table::ratio(results.ratio(m)));
        if wire {
            row.push(table::ratio(results.over_docker(Route::Wire, m)));
        }
        row.push(goal);
        rows.push(row);
    }
    let ranges = if rounds > 1 {
        format!(
            "; ranges are min–max over {rounds} rounds; a goal is judged on the medians' ratio, \
             and each round's own ratio is counted against it"
        )
    } else {
        String::new()
    };
    let wire_note = if wire {
        "\nWIRE is a veth from the client namespace straight into the container's, no host in \
         between: no path through the NIC can beat it"
    } else {
        ""
    };
    format!(
        "{}\nmedians{ranges}; FAST/DOCKER is the fast path's median over Docker's: higher is \
         better for rates, lower for latency{wire_note}\n",
        table::align(&rows)
    )
}

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub rounds: u32,
    pub seconds: u32,
    /// Whether each round also measures the wire (`--wire`).
    pub wire: bool,
}

impl Plan {
    /// The routes each round measures, in order.
    pub fn routes(&self) -> &'static [Route] {
        if self.wire {
            &Route::ALL
        } else {
            &Route::ALL[..2]
        }
    }

    /// Roughly how long the whole run takes: eight client runs per route and round, each of
    /// `seconds` and a second or so of start-up.
    pub fn estimate(&self) -> Duration {
        let per_route = u64::from(self.seconds) * 8 + 9;
        let routes = self.routes().len() as u64;
        Duration::from_secs(per_route * routes * u64::from(self.rounds) + 10)
    }
}

/// The servers, running in the container's namespace until dropped; their scratch directory
/// (nginx's configuration, redis's working directory, their logs) goes with them.
pub struct Servers {
    children: Vec<(Service, KillOnDrop)>,
    dir: PathBuf,
}

/// How long a server may take to listen.
const LISTEN_WAIT: Duration = Duration::from_secs(10);

impl Servers {
    /// Starts redis, nginx and sockperf on their [`NEEDS`] ports in `container` (iperf3 runs one
    /// server per test) and waits until each listens.
    /// With `placement`, every server runs on its server CPU.
    pub fn start(container: &NetnsPath, placement: Option<Placement>) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("dxdp-bench-ingress-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let mut servers = Self {
            children: Vec::new(),
            dir,
        };
        let conf = servers.dir.join("nginx.conf");
        std::fs::write(&conf, nginx_conf(&servers.dir, port_of(Service::Nginx)))
            .with_context(|| format!("cannot write {}", conf.display()))?;
        let dir = servers.dir.display().to_string();
        let redis_port = port_of(Service::Redis).to_string();
        let sockperf_port = port_of(Service::Sockperf).to_string();
        let conf = conf.display().to_string();
        let commands: [(Service, &str, Vec<&str>); 3] = [
            (
                Service::Redis,
                "redis-server",
                vec![
                    "--port",
                    &redis_port,
                    "--bind",
                    "0.0.0.0",
                    "--protected-mode",
                    "no",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    &dir,
                ],
            ),
            (
                Service::Nginx,
                "nginx",
                vec!["-e", "stderr", "-p", &dir, "-c", &conf],
            ),
            (
                Service::Sockperf,
                "sockperf",
                vec!["sr", "--tcp", "-i", "0.0.0.0", "-p", &sockperf_port],
            ),
        ];
        for (service, program, args) in commands {
            let log = servers.log(service);
            let out = File::create(&log).with_context(|| format!("cannot create {log:?}"))?;
            let mut cmd = in_netns(container.path(), program);
            if let Some(p) = placement {
                on_cpu(&mut cmd, p.server_cpu)?;
            }
            cmd.args(args)
                .stdin(Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out);
            let child = KillOnDrop::spawn(&mut cmd, program)?;
            servers.children.push((service, child));
        }
        for i in 0..servers.children.len() {
            servers.wait_listening(container, i)?;
        }
        Ok(servers)
    }

    /// The process of a server (nsenter execs it in place, so its pid is the server's).
    pub fn pid(&self, service: Service) -> Option<u32> {
        self.children
            .iter()
            .find(|(s, _)| *s == service)
            .map(|(_, child)| child.id())
    }

    fn log(&self, service: Service) -> PathBuf {
        self.dir.join(format!("{}.log", service.name()))
    }

    fn wait_listening(&mut self, container: &NetnsPath, i: usize) -> Result<()> {
        let service = self.children[i].0;
        let port = port_of(service);
        let started = Instant::now();
        loop {
            check_interrupted()?;
            if let Some(status) = self.children[i].1.exited() {
                let log = std::fs::read_to_string(self.log(service)).unwrap_or_default();
                bail!(
                    "the {} server exited ({status}) in the container's namespace: {}",
                    service.name(),
                    last_lines(&log, 5)
                );
            }
            let listening = container.run(move || {
                let local = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
                Ok(TcpStream::connect_timeout(&local, Duration::from_millis(200)).is_ok())
            })?;
            if listening {
                return Ok(());
            }
            if started.elapsed() > LISTEN_WAIT {
                bail!(
                    "the {} server did not listen on port {port} within {}s",
                    service.name(),
                    LISTEN_WAIT.as_secs()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        // Killed and reaped before their directory goes.
        self.children.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn port_of(service: Service) -> u16 {
    NEEDS
        .iter()
        .find(|n| n.service == service)
        .map_or(0, |n| n.port)
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}

/// One nginx process (no master, no daemon: the child the bench holds is the server) answering
/// every request with a short 200, its paths all in `dir`.
fn nginx_conf(dir: &Path, port: u16) -> String {
    let dir = dir.display();
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {dir}/nginx.pid;\n\
         error_log stderr warn;\nevents {{ worker_connections 1024; }}\nhttp {{\n\
         access_log off;\nclient_body_temp_path {dir}/body;\nproxy_temp_path {dir}/proxy;\n\
         fastcgi_temp_path {dir}/fastcgi;\nuwsgi_temp_path {dir}/uwsgi;\nscgi_temp_path {dir}/scgi;\n\
         server {{ listen {port}; location / {{ default_type text/plain; return 200 \"ok\\n\"; }} }}\n}}\n"
    )
}

/// The clients, in the client namespace, against the published ports.
pub struct Clients {
    pub client_ns: PathBuf,
    pub container_ns: PathBuf,
    pub targets: Vec<Target>,
    /// The same servers at the container's end of the wire (`--wire`).
    pub wire_targets: Vec<Target>,
    /// The route measured now: which of the two target lists the clients use.
    pub route: Route,
    pub seconds: u32,
    /// Requests per second each redis-benchmark row reached last, to size the next run to
    /// about `seconds` (redis-benchmark counts requests, not time).
    redis_rate: [f64; 2],
    /// The sockperf server's process, pinned for the one-CPU ping-pong.
    sockperf_server: Option<u32>,
    /// `--pin-cpus`: the CPU every client tool runs on (and the servers', for iperf3's).
    pub placement: Option<Placement>,
}

impl Clients {
    pub fn new(
        client_ns: PathBuf,
        container_ns: PathBuf,
        targets: Vec<Target>,
        seconds: u32,
    ) -> Self {
        Self {
            client_ns,
            container_ns,
            targets,
            wire_targets: Vec::new(),
            route: Route::Docker,
            seconds,
            redis_rate: [0.0; 2],
            sockperf_server: None,
            placement: None,
        }
    }

    /// The sockperf server the ping-pongs reach, so that the one-CPU run can pin it.
    pub fn with_sockperf_server(mut self, pid: Option<u32>) -> Self {
        self.sockperf_server = pid;
        self
    }

    /// The servers' addresses on the route measured now.
    fn targets(&self) -> &[Target] {
        match self.route {
            Route::Wire => &self.wire_targets,
            Route::Docker | Route::Fast => &self.targets,
        }
    }

    /// A client tool in the client namespace, on `cpu` if given; its stdout, or why it failed.
    fn run_on(
        &self,
        cpu: Option<usize>,
        program: &str,
        args: &[String],
        limit: Duration,
    ) -> Result<String> {
        let mut cmd = in_netns(&self.client_ns, program);
        if let Some(cpu) = cpu {
            on_cpu(&mut cmd, cpu)?;
        }
        cmd.args(args);
        let out = run_bounded(cmd, limit, program)?;
        if !out.status.success() {
            bail!(
                "{program} {} exited with {}: {}",
                args.join(" "),
                out.status,
                last_lines(out.stderr.trim(), 3)
            );
        }
        Ok(out.stdout)
    }

    /// [`Self::run_on`] the client CPU of `--pin-cpus`, or wherever the scheduler puts it.
    fn run(&self, program: &str, args: &[String], limit: Duration) -> Result<String> {
        self.run_on(self.placement.map(|p| p.client_cpu), program, args, limit)
    }

    fn limit(&self) -> Duration {
        Duration::from_secs(u64::from(self.seconds) * 4 + 20)
    }

    /// GET requests per second with `clients` connections; the first call of a row is a short
    /// warm-up that also sizes the later runs.
    fn redis_get(&mut self, clients: u32) -> Result<f64> {
        let row = usize::from(clients > 1);
        let rate = self.redis_rate[row];
        let requests = if rate > 0.0 {
            (rate * f64::from(self.seconds)).max(1000.0) as u64
        } else {
            2000 * u64::from(clients)
        };
        let t = target(self.targets(), Service::Redis)?;
        let args: Vec<String> = [
            "-h",
            &t.host_addr.to_string(),
            "-p",
            &t.host_port.to_string(),
            "-t",
            "get",
            "-c",
            &clients.to_string(),
            "-n",
            &requests.to_string(),
            "--csv",
        ]
        .map(str::to_owned)
        .to_vec();
        let rps = parse_redis_csv(&self.run("redis-benchmark", &args, self.limit())?)?;
        self.redis_rate[row] = rps;
        Ok(rps)
    }

    /// Requests per second from wrk, and the errors it counted, if any.
    fn wrk(&self, seconds: u32) -> Result<(f64, Option<String>)> {
        let t = target(self.targets(), Service::Nginx)?;
        let url = match t.host_addr {
            IpAddr::V4(a) => format!("http://{a}:{}/", t.host_port),
            IpAddr::V6(a) => format!("http://[{a}]:{}/", t.host_port),
        };
        let args: Vec<String> = ["-t1", "-c20", &format!("-d{seconds}s"), "--timeout", "2s"]
            .into_iter()
            .map(str::to_owned)
            .chain([url])
            .collect();
        parse_wrk(&self.run("wrk", &args, self.limit())?)
    }

    /// Round-trip median and p99 in µs of a TCP ping-pong; with `one_cpu`, the server and the
    /// client both on [`PINNED_CPU`] for the run. An idle 2-vCPU guest takes tens of µs to wake
    /// a halted vCPU, on each side of each round trip, whatever the path: on one CPU the round
    /// trip is the path and two context switches.
    fn pingpong(&self, seconds: u32, one_cpu: bool) -> Result<(f64, f64)> {
        let t = target(self.targets(), Service::Sockperf)?;
        let _server_pinned = match (one_cpu, self.sockperf_server) {
            (false, _) => None,
            (true, Some(pid)) => Some(Pinned::to(pid, PINNED_CPU)?),
            (true, None) => bail!("the sockperf server's process is not known; cannot pin it"),
        };
        let args: Vec<String> = [
            "pp",
            "--tcp",
            "-i",
            &t.host_addr.to_string(),
            "-p",
            &t.host_port.to_string(),
            "-t",
            &seconds.to_string(),
            "--full-rtt",
        ]
        .map(str::to_owned)
        .to_vec();
        // The client joins the server's CPU.
        let cpu = if one_cpu {
            Some(PINNED_CPU)
        } else {
            self.placement.map(|p| p.client_cpu)
        };
        parse_sockperf(&self.run_on(cpu, "sockperf", &args, self.limit())?)
    }

    fn iperf(&self, seconds: u32, extra: &[&str]) -> Result<serde_json::Value> {
        let t = target(self.targets(), Service::Iperf3)?;
        let runner = Runner {
            client_ns: self.client_ns.clone(),
            server_ns: self.container_ns.clone(),
            target: t.host_addr,
            port: t.host_port,
            seconds,
            label: format!("to {}", t.addr()),
            placement: self.placement,
        };
        runner.iperf_via(t.need.port, extra)
    }

    /// Each workload once for a second, on whatever route is set: proves every server answers
    /// through the NIC before anything is measured, and sizes the redis runs.
    pub fn warm_up(&mut self, mut tell: impl FnMut(&str)) -> Result<()> {
        let what = |name: &str, r: Result<String>| -> Result<String> {
            r.with_context(|| format!("warm-up: {name} through the NIC"))
        };
        let r = what("redis", self.redis_get(1).map(|v| format!("{v:.0} req/s")))?;
        tell(&format!("redis {r}"));
        self.redis_get(20)?;
        let r = what("wrk", self.wrk(1).map(|(v, _)| format!("{v:.0} req/s")))?;
        tell(&format!("nginx {r}"));
        let r = what(
            "iperf3",
            self.iperf(1, &[])
                .and_then(|v| measure::tcp_gbps(&v))
                .map(|v| format!("{v:.1} Gbit/s")),
        )?;
        tell(&format!("iperf3 {r}"));
        let r = what(
            "sockperf",
            self.pingpong(1, false).map(|(m, _)| format!("{m:.1} µs")),
        )?;
        tell(&format!("sockperf {r}"));
        let r = what(
            "sockperf on one CPU",
            self.pingpong(1, true).map(|(m, _)| format!("{m:.1} µs")),
        )?;
        tell(&format!("sockperf on CPU {PINNED_CPU} {r}"));
        Ok(())
    }

    /// Every metric once on the route that is set now.
    fn measure(
        &mut self,
        at: &str,
        mut record: impl FnMut(Metric, f64),
        tell: &mut impl FnMut(Step<'_>),
    ) -> Result<()> {
        for metric in Metric::ALL {
            if matches!(metric, Metric::PingPongP99 | Metric::PingPongOneCpuP99) {
                continue; // from the median's run
            }
            tell(Step::Begin(&format!("{at} {}", metric.short())));
            let (figures, note) = self
                .figures(metric)
                .with_context(|| format!("{at}: {}", metric.label()))?;
            let shown: Vec<String> = figures
                .iter()
                .map(|(m, v)| format!("{} {}", table::number(*v), m.unit()))
                .collect();
            tell(Step::End(&shown.join(", ")));
            if let Some(note) = note {
                tell(Step::Note(&format!("{at}: {note}")));
            }
            for (m, v) in figures {
                record(m, v);
            }
        }
        Ok(())
    }

    /// What one client run gives for `metric` (ping-pong's median and p99 come from one run),
    /// and anything worth a note.
    fn figures(&mut self, metric: Metric) -> Result<Figures> {
        let s = self.seconds;
        let figure = match metric {
            Metric::RedisGet1 => self.redis_get(1)?,
            Metric::RedisGet20 => self.redis_get(20)?,
            Metric::Wrk20 => {
                let (rps, errors) = self.wrk(s)?;
                let note = errors.map(|e| format!("wrk counted errors: {e}"));
                return Ok((vec![(metric, rps)], note));
            }
            Metric::TcpIn => measure::tcp_gbps(&self.iperf(s, &["-P", "1"])?)?,
            Metric::TcpOut => measure::tcp_gbps(&self.iperf(s, &["-P", "1", "-R"])?)?,
            Metric::Udp64 => {
                measure::udp_pps(&self.iperf(s, &["-u", "-b", "0", "-l", "64"])?)? / 1000.0
            }
            Metric::PingPongMedian | Metric::PingPongP99 => {
                let (median, p99) = self.pingpong(s, false)?;
                let both = vec![(Metric::PingPongMedian, median), (Metric::PingPongP99, p99)];
                return Ok((both, None));
            }
            Metric::PingPongOneCpuMedian | Metric::PingPongOneCpuP99 => {
                let (median, p99) = self.pingpong(s, true)?;
                let both = vec![
                    (Metric::PingPongOneCpuMedian, median),
                    (Metric::PingPongOneCpuP99, p99),
                ];
                return Ok((both, None));
            }
        };
        Ok((vec![(metric, figure)], None))
    }
}

/// A process's CPU affinity set to one CPU until dropped, then put back as it was.
struct Pinned {
    pid: nix::unistd::Pid,
    was: nix::sched::CpuSet,
}

impl Pinned {
    fn to(pid: u32, cpu: usize) -> Result<Self> {
        let pid = nix::unistd::Pid::from_raw(
            i32::try_from(pid).with_context(|| format!("pid {pid} out of range"))?,
        );
        let was = nix::sched::sched_getaffinity(pid)
            .with_context(|| format!("cannot read the CPU affinity of pid {pid}"))?;
        let mut one = nix::sched::CpuSet::new();
        one.set(cpu)
            .with_context(|| format!("CPU {cpu} is out of range"))?;
        nix::sched::sched_setaffinity(pid, &one)
            .with_context(|| format!("cannot pin pid {pid} to CPU {cpu}"))?;
        Ok(Self { pid, was })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // The server may have died meanwhile; then there is nothing to put back.
        let _ = nix::sched::sched_setaffinity(self.pid, &self.was);
    }
}

/// Figures of one client run, and a note on it.
type Figures = (Vec<(Metric, f64)>, Option<String>);

/// Shows the progress on stderr: what is measured, then its result on the same line.
#[derive(Default)]
pub struct Progress {
    midline: bool,
}

impl Progress {
    pub fn show(&mut self, step: Step<'_>) {
        let (text, ends_line) = match step {
            Step::Begin(what) => (format!("{what} ... "), false),
            Step::End(text) | Step::Note(text) => (format!("{text}\n"), true),
        };
        eprint!("{text}");
        self.midline = !ends_line;
    }

    /// Ends the line a measurement that failed left open: the error gets a line of its own.
    pub fn close(&self) {
        if self.midline {
            eprintln!("failed");
        }
    }
}

/// Every round: Docker's path, then the fast path, each with every metric.
pub fn run(
    plan: &Plan,
    exposure: &mut ExposureSwitch,
    clients: &mut Clients,
    mut tell: impl FnMut(Step<'_>),
) -> Result<Results> {
    let mut results = Results::default();
    for round in 1..=plan.rounds {
        for &route in plan.routes() {
            check_interrupted()?;
            clients.route = route;
            exposure.set(route)?;
            let carried_before = exposure.carried()?;
            let at = format!("round {round}/{}: {}", plan.rounds, route.name());
            clients.measure(&at, |m, v| results.push(route, m, v), &mut tell)?;
            if route == Route::Fast {
                let carried = exposure.carried()?.saturating_sub(carried_before);
                results.fast_packets_per_round.push(carried);
                if carried == 0 {
                    tell(Step::Note(&format!(
                        "{at}: warning: the fast path let no packet in, so these numbers are \
                         Docker's path's"
                    )));
                }
            }
        }
    }
    Ok(results)
}

/// The container's exposure while the bench switches it, and putting back what it found: the
/// same ports, origin and firewall mark, or none. Undone when dropped, also after an error and
/// Ctrl-C.
pub struct ExposureSwitch {
    pin_dir: PathBuf,
    capacity: Capacity,
    plan: ExposurePlan,
    found: Option<ExposurePlan>,
    /// The client's address: its connections are forgotten when the fast path is switched off.
    client: IpAddr,
    pin_dir_existed: bool,
    restored: bool,
}

impl ExposureSwitch {
    /// Records the container's exposure now; nothing is changed yet.
    pub fn snapshot(
        pin_dir: &Path,
        capacity: Capacity,
        plan: ExposurePlan,
        client: IpAddr,
        host: &[Interface],
    ) -> Result<Self> {
        let pin_dir_existed = pin_dir.exists();
        let mut found = None;
        if pin_dir_existed {
            let veth = plan.endpoint.host_ifindex;
            let mut datapath = Datapath::open(pin_dir, capacity)?;
            let ports: Vec<ExposedPort> = datapath
                .exposed()?
                .into_iter()
                .filter(|p| p.veth_ifindex == veth)
                .collect();
            if !ports.is_empty() {
                found = Some(as_found(&ports, &plan, host)?);
            }
        }
        Ok(Self {
            pin_dir: pin_dir.to_path_buf(),
            capacity,
            plan,
            found,
            client,
            pin_dir_existed,
            restored: false,
        })
    }

    /// The exposure found at the start, if any.
    pub fn found(&self) -> Option<&ExposurePlan> {
        self.found.as_ref()
    }

    fn open(&self) -> Result<Datapath> {
        Datapath::open(&self.pin_dir, self.capacity)
    }

    pub fn set(&mut self, route: Route) -> Result<()> {
        match route {
            Route::Fast => self.expose(&self.plan.clone()),
            Route::Docker => self.unexpose(),
            // The wire does not cross the NIC: the exposure stays as the round before left it.
            Route::Wire => Ok(()),
        }
    }

    fn expose(&self, plan: &ExposurePlan) -> Result<()> {
        self.open()?
            .expose(&plan.exposure())
            .with_context(|| format!("cannot expose {}", plan.container))?;
        Ok(())
    }

    /// Unexposes the container and forgets the client's connections, which have all ended: a
    /// later connection from a reused client port must not find its replies on the fast path.
    fn unexpose(&self) -> Result<()> {
        if !self.pin_dir.exists() {
            return Ok(());
        }
        let veth = self.plan.endpoint.host_ifindex;
        let mut datapath = self.open()?;
        datapath
            .unexpose(veth, ExistingConnections::End)
            .with_context(|| format!("cannot unexpose {}", self.plan.container))?;
        datapath.forget_connections(veth, self.client)?;
        Ok(())
    }

    /// Packets the fast path has let into the container so far (its exposed ports' counters).
    pub fn carried(&self) -> Result<u64> {
        if !self.pin_dir.exists() {
            return Ok(0);
        }
        let veth = self.plan.endpoint.host_ifindex;
        Ok(self
            .open()?
            .exposed()?
            .iter()
            .filter(|p| p.veth_ifindex == veth)
            .map(|p| p.inbound.packets)
            .sum())
    }

    /// Puts back the exposure found at the start; removes a pin directory the bench created if
    /// nothing else is in it. Idempotent.
    pub fn restore(&mut self) -> Result<()> {
        if self.restored {
            return Ok(());
        }
        match self.found.clone() {
            Some(found) => self.expose(&found)?,
            None => self.unexpose()?,
        }
        if !self.pin_dir_existed && self.pin_dir.exists() {
            let mut datapath = self.open()?;
            // Someone else may have linked or exposed something meanwhile.
            if datapath.links()?.is_empty()
                && datapath.interfaces()?.is_empty()
                && datapath.exposed()?.is_empty()
                && datapath.draining()?.is_empty()
            {
                datapath.purge()?;
            }
        }
        self.restored = true;
        Ok(())
    }
}

impl Drop for ExposureSwitch {
    fn drop(&mut self) {
        if !self.restored
            && let Err(err) = self.restore()
        {
            let how = match &self.found {
                Some(_) => "dxdp expose",
                None => "dxdp unexpose",
            };
            eprintln!(
                "dxdp: error: could not put the exposure of {} back as it was: {err:#}; run \
                 `{how} {}`",
                self.plan.container, self.plan.container
            );
        }
    }
}

/// The exposure `ports` record, to write again: the bench's plan with the ports, origin and
/// firewall mark found.
fn as_found(
    ports: &[ExposedPort],
    plan: &ExposurePlan,
    host: &[Interface],
) -> Result<ExposurePlan> {
    let mappings = ports
        .iter()
        .map(|p| {
            let nic = host
                .iter()
                .find(|i| i.index == p.nic_ifindex)
                .map(|i| i.name.clone())
                .with_context(|| {
                    format!(
                        "{} is exposed on interface {}, which is gone",
                        p.container, p.nic_ifindex
                    )
                })?;
            Ok(PortMapping {
                nic_ifindex: p.nic_ifindex,
                nic,
                host_addr: p.host_addr,
                udp: p.protocol == "udp",
                host_port: p.host_port,
                container_addr: p.container_addr,
                container_port: p.container_port,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ExposurePlan {
        container: ports[0].container.clone(),
        ports: mappings,
        origin: ports[0].origin,
        bypass_firewall: ports[0].bypasses_firewall,
        ..plan.clone()
    })
}

/// The `rps` of redis-benchmark's `--csv` GET row.
pub(crate) fn parse_redis_csv(out: &str) -> Result<f64> {
    let row = out
        .lines()
        .find(|l| l.starts_with("\"GET\""))
        .ok_or_else(|| anyhow!("redis-benchmark printed no GET row: {}", last_lines(out, 3)))?;
    let rps = row
        .split(',')
        .nth(1)
        .map(|f| f.trim_matches('"'))
        .ok_or_else(|| anyhow!("redis-benchmark's GET row has no rps: {row}"))?;
    rps.parse()
        .with_context(|| format!("redis-benchmark's rps {rps:?} is not a number"))
}

/// wrk's `Requests/sec`, and its error lines (socket errors, non-2xx responses) if any.
pub(crate) fn parse_wrk(out: &str) -> Result<(f64, Option<String>)> {
    let rps = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .ok_or_else(|| anyhow!("wrk printed no Requests/sec: {}", last_lines(out, 3)))?
        .trim();
    let rps: f64 = rps
        .parse()
        .with_context(|| format!("wrk's Requests/sec {rps:?} is not a number"))?;
    let errors: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("Socket errors:") || l.starts_with("Non-2xx"))
        .collect();
    Ok((rps, (!errors.is_empty()).then(|| errors.join("; "))))
}

/// sockperf's 50th and 99th percentile, in µs.
pub(crate) fn parse_sockperf(out: &str) -> Result<(f64, f64)> {
    let percentile = |p: &str| -> Result<f64> {
        let key = format!("percentile {p} =");
        let value = out
            .lines()
            .find_map(|l| Some(l.split_once(&key)?.1.trim()))
            .ok_or_else(|| anyhow!("sockperf printed no {p} percentile: {}", last_lines(out, 3)))?;
        value
            .parse()
            .with_context(|| format!("sockperf's percentile {p} {value:?} is not a number"))
    };
    Ok((percentile("50.000")?, percentile("99.000")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(port: u16, udp: bool, host_port: u16) -> PortMapping {
        PortMapping {
            nic_ifindex: 7,
            nic: "dxbi-nic".into(),
            host_addr: "10.237.1.1".parse().unwrap(),
            udp,
            host_port,
            container_addr: "172.18.0.2".parse().unwrap(),
            container_port: port,
        }
    }

    fn all() -> Vec<PortMapping> {
        NEEDS
            .iter()
            .map(|n| mapping(n.port, n.udp, n.port + 10000))
            .collect()
    }

    #[test]
    fn every_needed_port_is_found_on_the_nic() {
        let t = targets("web", "dxbi-nic", &all()).unwrap();
        assert_eq!(t.len(), NEEDS.len());
        assert_eq!(t[1].need.service, Service::Nginx);
        assert_eq!(t[1].addr().to_string(), "10.237.1.1:10080");
        assert!(targets("web", "eth0", &all()).is_err());
    }

    #[test]
    fn a_missing_port_is_named_with_the_way_to_publish_it() {
        let mut ports = all();
        ports.retain(|m| !(m.container_port == 5201 && m.udp));
        ports.retain(|m| m.container_port != 80);
        let err = targets("web", "dxbi-nic", &ports).unwrap_err().to_string();
        assert!(err.contains("80/tcp (nginx), 5201/udp (iperf3)"), "{err}");
        assert!(err.contains("-p ADDR:5201:5201/udp"), "{err}");
    }

    #[test]
    fn iperf3_needs_its_udp_port_on_its_tcp_port() {
        let mut ports = all();
        for m in &mut ports {
            if m.udp {
                m.host_port = 9;
            }
        }
        let err = targets("web", "dxbi-nic", &ports).unwrap_err().to_string();
        assert!(err.contains("same one"), "{err}");
    }

    #[test]
    fn tool_outputs_parse() {
        let redis = "\"test\",\"rps\",\"avg_latency_ms\"\n\"GET\",\"26595.75\",\"0.033\"\n";
        assert_eq!(parse_redis_csv(redis).unwrap(), 26595.75);
        assert!(parse_redis_csv("Could not connect to Redis").is_err());
        let wrk = "  48490 requests in 1.11s, 6.94MB read\nRequests/sec:  43822.86\n";
        assert_eq!(parse_wrk(wrk).unwrap(), (43822.86, None));
        let bad = "  Socket errors: connect 0, read 0, write 0, timeout 3\nRequests/sec: 10.5\n";
        assert_eq!(
            parse_wrk(bad).unwrap().1.as_deref(),
            Some("Socket errors: connect 0, read 0, write 0, timeout 3")
        );
        let sockperf = "sockperf: ---> percentile 99.000 =   40.429\n\
                        sockperf: ---> percentile 90.000 =   18.797\n\
                        sockperf: ---> percentile 50.000 =   16.885\n";
        assert_eq!(parse_sockperf(sockperf).unwrap(), (16.885, 40.429));
        assert!(parse_sockperf("sockperf: connect failed").is_err());
    }

    #[test]
    fn the_table_puts_both_routes_side_by_side_with_the_goal() {
        let mut r = Results::default();
        for m in Metric::ALL {
            r.push(Route::Docker, m, 10.0);
            r.push(Route::Fast, m, 15.0);
        }
        let text = render(&r, 1);
        let wrk = text.lines().find(|l| l.starts_with("wrk")).unwrap();
        assert!(
            wrk.contains("1.50x") && wrk.ends_with("≥ 1.40x met"),
            "{wrk}"
        );
        let median = text.lines().find(|l| l.contains("median")).unwrap();
        assert!(median.ends_with("≤ 0.80x missed"), "{median}");
        assert_eq!(r.met(Metric::TcpIn), None);
        assert_eq!(r.ratio(Metric::Udp64), Some(1.5));
        assert!(!text.contains("WIRE"), "{text}");
    }

    #[test]
    fn each_rounds_ratio_is_counted_against_the_goal() {
        let mut r = Results::default();
        // Docker's path drifts from 10 to 20 over the run; the fast path keeps 1.5x of it in
        // two rounds of three.
        for (docker, fast) in [(10.0, 15.0), (20.0, 30.0), (15.0, 18.0)] {
            for m in Metric::ALL {
                r.push(Route::Docker, m, docker);
                r.push(Route::Fast, m, fast);
            }
        }
        assert_eq!(r.per_round(Route::Fast, Metric::Wrk20), [1.5, 1.5, 1.2]);
        assert_eq!(r.rounds_meeting_goal(Metric::Wrk20), Some((2, 3)));
        // Latency: lower is better, and 1.2x misses ≤ 0.8x as 1.5x does.
        assert_eq!(r.rounds_meeting_goal(Metric::PingPongMedian), Some((0, 3)));
        assert_eq!(r.rounds_meeting_goal(Metric::TcpIn), None);
        let text = render(&r, 3);
        let wrk = text.lines().find(|l| l.starts_with("wrk")).unwrap();
        // The medians (15 and 18) put the drift in the ratio: 1.20x.
        assert!(wrk.ends_with("≥ 1.40x missed, in 2 of 3 rounds"), "{wrk}");
        let tcp = text.lines().find(|l| l.starts_with("iperf3 TCP,")).unwrap();
        assert!(!tcp.contains("rounds"), "{tcp}");
    }

    #[test]
    fn a_measured_wire_gets_its_own_columns_beside_the_fast_path() {
        let mut r = Results::default();
        for m in Metric::ALL {
            r.push(Route::Docker, m, 10.0);
            r.push(Route::Fast, m, 13.0);
            r.push(Route::Wire, m, 14.5);
        }
        let text = render(&r, 1);
        let header = text.lines().next().unwrap();
        let columns: Vec<&str> = header.split_whitespace().collect();
        assert_eq!(
            columns,
            [
                "WORKLOAD",
                "UNIT",
                "DOCKER",
                "FAST",
                "WIRE",
                "FAST/DOCKER",
                "WIRE/DOCKER",
                "GOAL"
            ]
        );
        let wrk = text.lines().find(|l| l.starts_with("wrk")).unwrap();
        assert!(
            wrk.contains("1.30x") && wrk.contains("1.45x") && wrk.ends_with("≥ 1.40x missed"),
            "{wrk}"
        );
        assert!(text.contains("no host in between"), "{text}");
        assert_eq!(r.over_docker(Route::Wire, Metric::Wrk20), Some(1.45));
    }

    #[test]
    fn the_wire_targets_are_the_container_ports_at_its_end_of_the_wire() {
        let targets = targets("web", "dxbi-nic", &all()).unwrap();
        let wired = wire_targets(&targets, Ipv4Addr::new(10, 237, 2, 1));
        assert_eq!(wired.len(), targets.len());
        for (w, t) in wired.iter().zip(&targets) {
            assert_eq!(w.need, t.need);
            assert_eq!(w.host_addr, IpAddr::V4(Ipv4Addr::new(10, 237, 2, 1)));
            assert_eq!(w.host_port, t.need.port);
        }
    }
}
