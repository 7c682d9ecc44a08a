//! The benches through a NIC, over Docker's path and over a dxdp fast path, interleaved round by
//! round (docker, fast, docker, fast, …), with "the wire" beside them where asked:
//! - `dxdp bench-ingress` ([`Direction::Ingress`]): a container's published ports from a client
//!   namespace, Docker's DNAT, conntrack and bridge against `dxdp expose`;
//! - `dxdp bench-egress` ([`Direction::Egress`]): the container as the client of servers in a
//!   namespace behind the NIC, Docker's bridge, FORWARD and MASQUERADE against `dxdp egress on`.
//!
//! Servers and clients are the host's binaries run inside the namespaces (the image needs none
//! of its own): one side is the container's, the other reaches it, or is reached, through the
//! NIC as any outside peer. What the bench changes (the container's fast path, the servers, a
//! scratch directory) is put back when it ends: after an error or Ctrl-C as after success.
mod clients;
mod egress_switch;
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
pub use egress_switch::EgressSwitch;
pub use exposure::ExposureSwitch;
pub use servers::Servers;
pub use table::render;
pub use targets::{
    NEEDS, Need, Service, Target, busiest, client_source, missing_tools, namespace_of, server_addr,
    server_targets, targets, wire_targets,
};

use crate::bench::{Step, measure::check_interrupted, stats::Spread};

/// Which side of the NIC the container is on: the server of outside clients, or the client of
/// outside servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// `bench-ingress`: clients outside, servers in the container, `dxdp expose`.
    Ingress,
    /// `bench-egress`: clients in the container, servers outside, `dxdp egress on`.
    Egress,
}

impl Direction {
    /// The goal for fast / docker: at least this for rates, at most for latency
    /// (issue 24 for published ports, issue 36 for outbound connections).
    pub fn goal(self, metric: Metric) -> Option<f64> {
        match (self, metric) {
            (Direction::Ingress, Metric::Wrk20 | Metric::Udp64) => Some(1.4),
            (Direction::Ingress, Metric::RedisGet20) => Some(1.15),
            (Direction::Ingress, Metric::PingPongMedian | Metric::PingPongOneCpuMedian) => {
                Some(0.8)
            }
            (Direction::Egress, Metric::Wrk20 | Metric::RedisGet20) => Some(1.2),
            (Direction::Egress, Metric::Udp64) => Some(1.4),
            (Direction::Egress, Metric::PingPongMedian | Metric::PingPongOneCpuMedian) => Some(0.9),
            _ => None,
        }
    }

    /// The goal for fast / wire, where it sets one (at least this).
    pub fn wire_goal(self, metric: Metric) -> Option<f64> {
        match (self, metric) {
            (Direction::Egress, Metric::Wrk20 | Metric::RedisGet20) => Some(0.85),
            _ => None,
        }
    }

    /// The JSON report's schema.
    pub fn schema(self) -> &'static str {
        match self {
            Direction::Ingress => "dxdp.bench-ingress/1",
            Direction::Egress => "dxdp.bench-egress/1",
        }
    }

    /// What the fast path is called in the command line.
    pub fn fast_path(self) -> &'static str {
        match self {
            Direction::Ingress => "dxdp expose",
            Direction::Egress => "dxdp egress on",
        }
    }
}

/// Which way the traffic between the client and the container travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// Docker's: the bridge, FORWARD and conntrack, with DNAT for published ports and
    /// MASQUERADE for outbound connections.
    Docker,
    /// The fast path: `dxdp expose` (the NIC's program straight into the container, and back)
    /// or `dxdp egress on` (the container's veth straight out of the NIC, and back).
    Fast,
    /// `--wire`: a veth pair from the outside namespace into the container's, no host between
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
    /// iperf3 from the client to the server.
    TcpUp,
    /// iperf3 -R: from the server to the client.
    TcpDown,
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
        Metric::TcpUp,
        Metric::TcpDown,
        Metric::Udp64,
        Metric::PingPongMedian,
        Metric::PingPongP99,
        Metric::PingPongOneCpuMedian,
        Metric::PingPongOneCpuP99,
    ];

    /// Stable key for JSON consumers: "in" and "out" are the container's.
    pub fn id(self, direction: Direction) -> &'static str {
        let ingress = direction == Direction::Ingress;
        match self {
            Metric::RedisGet1 => "redis_get_c1_rps",
            Metric::RedisGet20 => "redis_get_c20_rps",
            Metric::Wrk20 => "wrk_c20_rps",
            Metric::TcpUp if ingress => "tcp_in_gbps",
            Metric::TcpUp => "tcp_out_gbps",
            Metric::TcpDown if ingress => "tcp_out_gbps",
            Metric::TcpDown => "tcp_in_gbps",
            Metric::Udp64 if ingress => "udp64_in_kpps",
            Metric::Udp64 => "udp64_out_kpps",
            Metric::PingPongMedian => "pingpong_median_us",
            Metric::PingPongP99 => "pingpong_p99_us",
            Metric::PingPongOneCpuMedian => "pingpong_one_cpu_median_us",
            Metric::PingPongOneCpuP99 => "pingpong_one_cpu_p99_us",
        }
    }

    /// The table's row name, which says how it was measured.
    pub fn label(self, direction: Direction) -> &'static str {
        let ingress = direction == Direction::Ingress;
        match self {
            Metric::RedisGet1 => "redis-benchmark GET -c 1",
            Metric::RedisGet20 => "redis-benchmark GET -c 20",
            Metric::Wrk20 => "wrk -t1 -c20 (nginx)",
            Metric::TcpUp if ingress => "iperf3 TCP, into the container",
            Metric::TcpUp => "iperf3 TCP, out of the container",
            Metric::TcpDown if ingress => "iperf3 TCP -R, out of it",
            Metric::TcpDown => "iperf3 TCP -R, into it",
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
            Metric::TcpUp | Metric::TcpDown => "Gbit/s",
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

    /// Whether a `ratio` meets `goal`: at least for rates, at most for latency.
    fn meets(self, ratio: f64, goal: f64) -> bool {
        if self.lower_is_better() {
            ratio <= goal
        } else {
            ratio >= goal
        }
    }

    /// Progress label.
    pub(super) fn short(self) -> &'static str {
        match self {
            Metric::RedisGet1 => "redis GET c1",
            Metric::RedisGet20 => "redis GET c20",
            Metric::Wrk20 => "wrk c20",
            Metric::TcpUp => "tcp up",
            Metric::TcpDown => "tcp down",
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
#[derive(Clone, Debug)]
pub struct Results {
    /// Which bench took them: it sets the goals.
    pub direction: Direction,
    samples: [[Vec<f64>; Metric::ALL.len()]; Route::ALL.len()],
    /// Packets the fast path let into the container in each fast round; zero would mean the
    /// round measured Docker's path after all.
    pub fast_packets_per_round: Vec<u64>,
}

impl Results {
    pub fn new(direction: Direction) -> Self {
        Self {
            direction,
            samples: Default::default(),
            fast_packets_per_round: Vec::new(),
        }
    }

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

    /// The fast path's median over the wire's, where the wire was measured.
    pub fn fast_over_wire(&self, metric: Metric) -> Option<f64> {
        let wire = self.spread(Route::Wire, metric)?.median;
        let fast = self.spread(Route::Fast, metric)?.median;
        (wire > 0.0).then(|| fast / wire)
    }

    /// The goal of `metric` in this bench's direction.
    pub fn goal(&self, metric: Metric) -> Option<f64> {
        self.direction.goal(metric)
    }

    /// Whether the ratio of the medians meets the metric's goal; `None` without a goal or a
    /// ratio.
    pub fn met(&self, metric: Metric) -> Option<bool> {
        Some(metric.meets(self.ratio(metric)?, self.goal(metric)?))
    }

    /// Whether the fast path's median over the wire's meets the metric's goal for it; `None`
    /// without that goal or without the wire.
    pub fn wire_met(&self, metric: Metric) -> Option<bool> {
        let goal = self.direction.wire_goal(metric)?;
        Some(metric.meets(self.fast_over_wire(metric)?, goal))
    }

    /// In how many rounds the fast path's ratio met the metric's goal, of how many; `None`
    /// without a goal.
    pub fn rounds_meeting_goal(&self, metric: Metric) -> Option<(usize, usize)> {
        let goal = self.goal(metric)?;
        let ratios = self.per_round(Route::Fast, metric);
        let met = ratios.iter().filter(|&&r| metric.meets(r, goal)).count();
        Some((met, ratios.len()))
    }
}

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    pub rounds: u32,
    pub seconds: u32,
    /// Whether each round also measures the wire (`--wire`).
    pub wire: bool,
}

impl Schedule {
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

/// What switches the container between Docker's path and the fast path, and puts back what it
/// found: [`ExposureSwitch`], [`EgressSwitch`].
pub trait RouteSwitch {
    /// Sets the route the next measurements take; the wire leaves the switch as it was.
    fn set(&mut self, route: Route) -> Result<()>;
    /// Packets the fast path has carried so far, in the direction it was made for.
    fn carried(&self) -> Result<u64>;
    /// What the bench found, in a few words ("exposed (5 ports)", "not exposed").
    fn found_description(&self) -> String;
    /// Puts back what the bench found. Idempotent.
    fn restore(&mut self) -> Result<()>;
}

/// Every round: Docker's path, then the fast path, each with every metric.
pub fn run(
    direction: Direction,
    plan: &Schedule,
    switch: &mut dyn RouteSwitch,
    clients: &mut Clients,
    mut tell: impl FnMut(Step<'_>),
) -> Result<Results> {
    let mut results = Results::new(direction);
    for round in 1..=plan.rounds {
        for &route in plan.routes() {
            check_interrupted()?;
            clients.route = route;
            switch.set(route)?;
            let carried_before = switch.carried()?;
            let at = format!("round {round}/{}: {}", plan.rounds, route.name());
            clients.measure(&at, |m, v| results.push(route, m, v), &mut tell)?;
            if route == Route::Fast {
                let carried = switch.carried()?.saturating_sub(carried_before);
                results.fast_packets_per_round.push(carried);
                if carried == 0 {
                    tell(Step::Note(&format!(
                        "{at}: warning: the fast path carried no packet, so these numbers are \
                         Docker's path's"
                    )));
                }
            }
        }
    }
    Ok(results)
}
