//! `dxdp bench`: the same traffic over the bridge, each datapath and loopback, interleaved.
//!
//! Rounds interleave the configurations (bridge, tc, xdp, loopback, bridge, tc, …) rather than
//! running each one's rounds back to back, so that a slow drift of the host (thermal, a noisy
//! neighbour, page cache) spreads over every configuration instead of biasing the last one.
mod chart;
mod table;
mod workloads;

pub use chart::{Chart, chart, render as render_chart};
pub use table::render as render_table;
pub use workloads::{REDIS_CLIENTS, Workloads};

use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use super::{Config, Step, measure, pair::PairState, stats, stats::Spread};
use measure::Runner;

/// What each configuration is measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Tcp1,
    Tcp4,
    Udp64,
    Udp1300,
    RttMedian,
    RttP99,
    /// redis-benchmark's GETs over [`REDIS_CLIENTS`] connections to a redis-server in B.
    RedisGet20,
    /// The median round trip of sockperf's TCP ping-pong with a sockperf server in B.
    SockperfPingPong,
}

impl Metric {
    pub const ALL: [Metric; 8] = [
        Metric::Tcp1,
        Metric::Tcp4,
        Metric::Udp64,
        Metric::Udp1300,
        Metric::RttMedian,
        Metric::RttP99,
        Metric::RedisGet20,
        Metric::SockperfPingPong,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Stable key for JSON consumers.
    pub fn id(self) -> &'static str {
        match self {
            Metric::Tcp1 => "tcp1_gbps",
            Metric::Tcp4 => "tcp4_gbps",
            Metric::Udp64 => "udp64_kpps",
            Metric::Udp1300 => "udp1300_kpps",
            Metric::RttMedian => "rtt_median_us",
            Metric::RttP99 => "rtt_p99_us",
            Metric::RedisGet20 => "redis_get_c20_krps",
            Metric::SockperfPingPong => "sockperf_pingpong_median_us",
        }
    }

    /// Column header of the table.
    pub(crate) fn header(self) -> &'static str {
        match self {
            Metric::Tcp1 => "TCP1 Gbit/s",
            Metric::Tcp4 => "TCP4 Gbit/s",
            Metric::Udp64 => "UDP64 kpps",
            Metric::Udp1300 => "UDP1300 kpps",
            Metric::RttMedian => "RTT median µs",
            Metric::RttP99 => "RTT p99 µs",
            Metric::RedisGet20 => "redis GET c20 krps",
            Metric::SockperfPingPong => "ping-pong µs",
        }
    }

    /// Progress and chart label.
    pub(crate) fn short(self) -> &'static str {
        match self {
            Metric::Tcp1 => "tcp1",
            Metric::Tcp4 => "tcp4",
            Metric::Udp64 => "udp64",
            Metric::Udp1300 => "udp1300",
            Metric::RttMedian => "rtt median",
            Metric::RttP99 => "rtt p99",
            Metric::RedisGet20 => "redis get c20",
            Metric::SockperfPingPong => "ping-pong",
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            Metric::Tcp1 | Metric::Tcp4 => "Gbit/s",
            Metric::Udp64 | Metric::Udp1300 => "kpps",
            Metric::RttMedian | Metric::RttP99 | Metric::SockperfPingPong => "µs",
            Metric::RedisGet20 => "krps",
        }
    }

    pub(crate) fn lower_is_better(self) -> bool {
        matches!(
            self,
            Metric::RttMedian | Metric::RttP99 | Metric::SockperfPingPong
        )
    }
}

/// How much to measure.
#[derive(Clone, Debug)]
pub struct PairSchedule {
    pub configs: Vec<Config>,
    pub rounds: u32,
    pub seconds: u32,
}

impl PairSchedule {
    /// Pings per round: 200 a second at the 5 ms interval, so that p99 rests on a couple of
    /// samples at least even with `--seconds 1`.
    pub fn pings(&self) -> u32 {
        self.seconds * 200
    }
}

/// Every sample of one configuration: one value per round and metric.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Samples {
    per_metric: [Vec<f64>; Metric::ALL.len()],
    /// Every ping of every round, in µs: the per-round RTT median and p99 come from these.
    pub rtt_us_per_round: Vec<Vec<f64>>,
    /// Packets the datapath redirected while this configuration was measured; zero for a
    /// datapath would mean the numbers are the bridge's after all.
    pub redirected_packets: Option<u64>,
}

impl Samples {
    pub fn of(&self, metric: Metric) -> &[f64] {
        &self.per_metric[metric.index()]
    }

    pub(crate) fn push(&mut self, metric: Metric, value: f64) {
        self.per_metric[metric.index()].push(value);
    }
}

/// All samples, per configuration in the order measured.
#[derive(Clone, Debug, Default)]
pub struct Results {
    pub configs: Vec<(Config, Samples)>,
}

impl Results {
    pub(crate) fn samples(&self, config: Config) -> Option<&Samples> {
        self.configs
            .iter()
            .find(|(c, _)| *c == config)
            .map(|(_, s)| s)
    }

    pub(crate) fn spread(&self, config: Config, metric: Metric) -> Option<Spread> {
        Spread::of(self.samples(config)?.of(metric))
    }

    /// What ratios are relative to: the bridge, or the first configuration when `--only`
    /// left the bridge out.
    pub fn baseline(&self) -> Option<Config> {
        self.samples(Config::Bridge)
            .map(|_| Config::Bridge)
            .or_else(|| self.configs.first().map(|(c, _)| *c))
    }

    /// The configuration's median over the baseline's median.
    pub fn ratio(&self, config: Config, metric: Metric) -> Option<f64> {
        let base = self.spread(self.baseline()?, metric)?.median;
        let value = self.spread(config, metric)?.median;
        (base > 0.0).then(|| value / base)
    }
}

/// Runs every round of every configuration, switching the pair's link as each one needs; the
/// real workloads run against `workloads`' servers.
pub fn run(
    plan: &PairSchedule,
    pair: &mut PairState,
    over_pair: &Runner,
    loopback: &Runner,
    workloads: &Workloads,
    mut tell: impl FnMut(Step<'_>),
) -> Result<Results> {
    let mut results = Results {
        configs: plan
            .configs
            .iter()
            .map(|c| (*c, Samples::default()))
            .collect(),
    };
    for round in 1..=plan.rounds {
        for (config, samples) in &mut results.configs {
            let config = *config;
            let at = format!("round {round}/{}: {config}", plan.rounds);
            measure::check_interrupted()?;
            let runner = if config == Config::Loopback {
                pair.ensure_loopback_up()?;
                loopback
            } else {
                pair.switch(config.datapath())?;
                over_pair
            };
            let redirected_before = pair.redirected()?;
            for metric in [Metric::Tcp1, Metric::Tcp4, Metric::Udp64, Metric::Udp1300] {
                tell(Step::Begin(&format!("{at} {}", metric.short())));
                let value = match metric {
                    Metric::Tcp1 => runner.tcp_gbps(1)?,
                    Metric::Tcp4 => runner.tcp_gbps(4)?,
                    Metric::Udp64 => runner.udp_pps(64)? / 1000.0,
                    _ => runner.udp_pps(1300)? / 1000.0,
                };
                tell(Step::End(&show(value, metric)));
                samples.push(metric, value);
            }
            tell(Step::Begin(&format!("{at} rtt ({} pings)", plan.pings())));
            let rtts = runner.ping_us(plan.pings())?;
            let median = stats::median(&rtts).unwrap_or(f64::NAN);
            let p99 = stats::percentile(&rtts, 99.0).unwrap_or(f64::NAN);
            tell(Step::End(&format!(
                "median {}, p99 {}",
                show(median, Metric::RttMedian),
                show(p99, Metric::RttP99)
            )));
            samples.push(Metric::RttMedian, median);
            samples.push(Metric::RttP99, p99);
            samples.rtt_us_per_round.push(rtts);
            let on_lo = config == Config::Loopback;
            let metric = Metric::RedisGet20;
            tell(Step::Begin(&format!("{at} {}", metric.short())));
            let last = samples.of(metric).last().copied();
            let krps = workloads.redis_get_krps(on_lo, last)?;
            tell(Step::End(&show(krps, metric)));
            samples.push(metric, krps);
            let metric = Metric::SockperfPingPong;
            tell(Step::Begin(&format!("{at} {}", metric.short())));
            let median = workloads.pingpong_median_us(on_lo)?;
            tell(Step::End(&format!("median {}", show(median, metric))));
            samples.push(metric, median);
            pair.tally_redirected(
                config,
                redirected_before,
                &mut samples.redirected_packets,
                &at,
                &mut tell,
            )?;
        }
    }
    Ok(results)
}

fn show(value: f64, metric: Metric) -> String {
    format!("{} {}", super::table::number(value), metric.unit())
}

/// How long the whole plan takes, roughly, to tell the user up front.
pub fn estimate(plan: &PairSchedule) -> Duration {
    // Four iperf3 runs, the pings, redis-benchmark and sockperf per configuration, plus
    // start-up, the first redis run's sizing and link changes.
    let per_config = u64::from(plan.seconds) * 7 + 4;
    Duration::from_secs(per_config * plan.configs.len() as u64 * u64::from(plan.rounds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(pairs: &[(Config, f64)]) -> Results {
        Results {
            configs: pairs
                .iter()
                .map(|(c, v)| {
                    let mut s = Samples::default();
                    for m in Metric::ALL {
                        s.push(m, *v);
                    }
                    (*c, s)
                })
                .collect(),
        }
    }

    #[test]
    fn ratios_are_to_the_bridge_or_the_first() {
        let r = results(&[(Config::Bridge, 2.0), (Config::Tc, 3.0)]);
        assert_eq!(r.baseline(), Some(Config::Bridge));
        assert_eq!(r.ratio(Config::Tc, Metric::Tcp1), Some(1.5));
        let r = results(&[(Config::Tc, 2.0), (Config::Xdp, 1.0)]);
        assert_eq!(r.baseline(), Some(Config::Tc));
        assert_eq!(r.ratio(Config::Xdp, Metric::RttP99), Some(0.5));
        let r = results(&[(Config::Bridge, 0.0), (Config::Tc, 3.0)]);
        assert_eq!(r.ratio(Config::Tc, Metric::Tcp1), None);
    }
}
