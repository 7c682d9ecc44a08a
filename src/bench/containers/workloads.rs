//! The real workloads of `dxdp bench A B`: redis-server and a sockperf server in B's namespace,
//! reached from A's by redis-benchmark (GETs over [`REDIS_CLIENTS`] connections) and sockperf's
//! TCP ping-pong; for loopback, the same servers in A's namespace, reached on 127.0.0.1.
//!
//! The servers run for the whole bench, each on a port the kernel found free in its namespace,
//! and are killed by their pids when [`Workloads`] is dropped: after the last round, and as
//! well when a measurement fails or Ctrl-C stops the bench.
use std::{net::IpAddr, path::PathBuf, time::Duration};

use anyhow::{Context, Result};

use crate::{
    bench::{
        measure::{KillOnDrop, Runner},
        workloads::{
            free_port, parse_redis_csv, parse_sockperf, redis_benchmark_args, redis_requests,
            redis_server_args, run_client, sockperf_pingpong_args, sockperf_server_args,
            spawn_server, wait_listening,
        },
    },
    netns::NetnsPath,
};

/// redis-benchmark's connections (`-c`).
pub const REDIS_CLIENTS: u32 = 20;

/// One namespace's servers, and where the clients reach them from.
struct Servers {
    client_ns: PathBuf,
    target: IpAddr,
    redis_port: u16,
    sockperf_port: u16,
    /// Names the path in error messages.
    label: String,
    /// Held to be killed on drop.
    _children: Vec<KillOnDrop>,
}

/// The servers over the pair and, when loopback is measured, for loopback; running until
/// dropped, their scratch directory (redis's working directory, the logs) going with them.
pub struct Workloads {
    over_pair: Option<Servers>,
    loopback: Option<Servers>,
    dir: PathBuf,
    seconds: u32,
}

impl Workloads {
    /// Starts the servers where `over_pair` runs its servers (B's namespace) and, if given,
    /// where `loopback` does (A's), and waits until each listens.
    pub fn start(over_pair: &Runner, loopback: Option<&Runner>) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("dxdp-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let mut workloads = Self {
            over_pair: None,
            loopback: None,
            dir,
            seconds: over_pair.seconds,
        };
        workloads.over_pair = Some(workloads.servers(over_pair, "pair")?);
        if let Some(runner) = loopback {
            workloads.loopback = Some(workloads.servers(runner, "loopback")?);
        }
        Ok(workloads)
    }

    /// redis-server then sockperf in `runner`'s server namespace, each on a free port (never
    /// iperf3's).
    fn servers(&self, runner: &Runner, name: &str) -> Result<Servers> {
        let netns = NetnsPath::at(runner.server_ns.clone());
        let mut children = Vec::new();
        let mut start = |server: &str, args: &dyn Fn(u16) -> Vec<String>| -> Result<u16> {
            let port = free_port(&netns, runner.port)?;
            let log = self.dir.join(format!("{name}-{server}.log"));
            let mut child = spawn_server(netns.path(), server, &args(port), &log, None)?;
            wait_listening(&mut child, server, port, &log)?;
            children.push(child);
            Ok(port)
        };
        let started = (|| -> Result<(u16, u16)> {
            let redis = start("redis-server", &|port| redis_server_args(port, &self.dir))?;
            Ok((redis, start("sockperf", &sockperf_server_args)?))
        })()
        .with_context(|| format!("{}: cannot start the servers", runner.label))?;
        Ok(Servers {
            client_ns: runner.client_ns.clone(),
            target: runner.target,
            redis_port: started.0,
            sockperf_port: started.1,
            label: runner.label.clone(),
            _children: children,
        })
    }

    fn side(&self, loopback: bool) -> Result<&Servers> {
        let side = if loopback {
            &self.loopback
        } else {
            &self.over_pair
        };
        side.as_ref()
            .context("the bench started no servers for this configuration")
    }

    fn limit(&self) -> Duration {
        Duration::from_secs(u64::from(self.seconds) * 4 + 20)
    }

    /// Thousands of GETs a second over [`REDIS_CLIENTS`] connections, in a run of about the
    /// test's seconds at `last_krps` (this configuration's previous figure); without one, a
    /// short unrecorded run measures the rate first.
    pub fn redis_get_krps(&self, loopback: bool, last_krps: Option<f64>) -> Result<f64> {
        let side = self.side(loopback)?;
        let run = |requests: u64| -> Result<f64> {
            let args = redis_benchmark_args(side.target, side.redis_port, REDIS_CLIENTS, requests);
            let out = run_client(
                &side.client_ns,
                None,
                "redis-benchmark",
                &args,
                self.limit(),
            )
            .and_then(|out| parse_redis_csv(&out));
            out.with_context(|| format!("{}: redis GET", side.label))
        };
        let rate = match last_krps {
            Some(krps) => krps * 1000.0,
            None => run(redis_requests(None, self.seconds, REDIS_CLIENTS))?,
        };
        Ok(run(redis_requests(Some(rate), self.seconds, REDIS_CLIENTS))? / 1000.0)
    }

    /// The median round trip of sockperf's TCP ping-pong over the test's seconds, in µs.
    pub fn pingpong_median_us(&self, loopback: bool) -> Result<f64> {
        let side = self.side(loopback)?;
        let args = sockperf_pingpong_args(side.target, side.sockperf_port, self.seconds);
        let out = run_client(&side.client_ns, None, "sockperf", &args, self.limit())
            .and_then(|out| parse_sockperf(&out));
        let (median, _p99) = out.with_context(|| format!("{}: sockperf ping-pong", side.label))?;
        Ok(median)
    }
}

impl Drop for Workloads {
    fn drop(&mut self) {
        // Killed and reaped before their directory goes.
        self.over_pair = None;
        self.loopback = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
