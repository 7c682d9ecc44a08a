//! `dxdp bench-ingress`: a container's published ports measured from a client namespace through
//! a NIC, over Docker's path (DNAT, conntrack, the bridge) and over the `dxdp expose` fast path,
//! interleaved round by round (docker, fast, docker, fast, …).
//!
//! The servers are the host's binaries run inside the container's network namespace (the image
//! needs none of its own); the clients run in the client namespace and reach the container as
//! any outside client does, at the published address and port on the NIC. What the bench
//! changes (the container's exposure, the servers, a scratch directory) is put back when it
//! ends: after an error or Ctrl-C as after success.
mod clients;
mod exposure;
mod servers;
mod table;
mod targets;
#[cfg(test)]
mod tests;

use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

pub use clients::Clients;
pub use exposure::ExposureSwitch;
pub use servers::Servers;
pub use table::render;
pub use targets::{
    NEEDS, Need, Service, Target, busiest, client_source, missing_tools, targets, wire_targets,
};

use crate::bench::{Step, measure::check_interrupted, stats::Spread};

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

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct IngressSchedule {
    pub rounds: u32,
    pub seconds: u32,
    /// Whether each round also measures the wire (`--wire`).
    pub wire: bool,
}

impl IngressSchedule {
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

/// Every round: Docker's path, then the fast path, each with every metric.
pub fn run(
    plan: &IngressSchedule,
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
