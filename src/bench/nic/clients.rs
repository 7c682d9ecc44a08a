//! The client tools, run in the client namespace against the servers (a container's published
//! ports, or servers behind the NIC), and what their output says.
use std::{net::IpAddr, path::PathBuf, time::Duration};

use anyhow::{Context, Result, anyhow, bail};

use super::{Metric, PINNED_CPU, Route, Service, Target, targets::target};
use crate::bench::{
    Step,
    measure::{self, Placement, Runner},
    table,
    workloads::{
        last_lines, parse_redis_csv, parse_sockperf, redis_benchmark_args, redis_requests,
        run_client, sockperf_pingpong_args,
    },
};

/// The clients, in the client namespace, against the servers in the server namespace.
pub struct Clients {
    pub client_ns: PathBuf,
    pub server_ns: PathBuf,
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
    pub fn new(client_ns: PathBuf, server_ns: PathBuf, targets: Vec<Target>, seconds: u32) -> Self {
        Self {
            client_ns,
            server_ns,
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
        run_client(&self.client_ns, cpu, program, args, limit)
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
        let requests = redis_requests(Some(rate), self.seconds, clients);
        let t = target(self.targets(), Service::Redis)?;
        let args = redis_benchmark_args(t.host_addr, t.host_port, clients, requests);
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
        let args = sockperf_pingpong_args(t.host_addr, t.host_port, seconds);
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
            server_ns: self.server_ns.clone(),
            target: t.host_addr,
            port: t.host_port,
            seconds,
            label: format!("to {}", t.addr()),
            placement: self.placement,
        };
        runner.iperf_via(t.need.port, extra)
    }

    /// Each workload once for a second, on whatever route is set: proves every server answers
    /// before anything is measured, and sizes the redis runs.
    pub fn warm_up(&mut self, mut tell: impl FnMut(&str)) -> Result<()> {
        let what = |name: &str, r: Result<String>| -> Result<String> {
            r.with_context(|| format!("warm-up: {name}"))
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
    pub(super) fn measure(
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
                .with_context(|| format!("{at}: {}", metric.short()))?;
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
            Metric::TcpUp => measure::tcp_gbps(&self.iperf(s, &["-P", "1"])?)?,
            Metric::TcpDown => measure::tcp_gbps(&self.iperf(s, &["-P", "1", "-R"])?)?,
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
