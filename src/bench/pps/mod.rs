//! `dxdp bench --pps`: the packet rate each path carries, with a generator that is not the
//! socket stack.
//!
//! The iperf3 rows of the bench are bound by the sender's syscalls and its UDP/IP output: the
//! path shows in them only as far as it adds to that. Here the frames come from XDP live frames
//! instead: `BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` runs `dxdp_bench_tx` (which
//! returns `XDP_TX`) on A's interface, inside A's namespace, over one prepared Ethernet/IPv4/UDP
//! frame, and each run transmits the frame out of A's interface to its host-side veth, in
//! batches, at a few million frames a second. What the path does with them is counted at three
//! receivers in turn:
//! - the XDP receiver: `dxdp_bench_drop` on B's interface, counted by the kernel's per-queue
//!   `xdp_drops` (`ethtool -S`), the ceiling for any XDP consumer there. The tc
//!   datapath cannot feed it: `bpf_redirect_peer` enters B past its driver's XDP hook.
//! - the stack: UDP to a port nothing listens on in B, counted by `Udp: NoPorts` of B's
//!   `/proc/net/snmp`, the last counter a datagram passes before a socket would take it.
//! - an AF_XDP application: `dxdp_bench_xsk` on B's interface redirects every frame to an
//!   AF_XDP socket on its queue 0 (copy mode, [`super::xsk`]), and a thread of the bench reads
//!   the socket's rx ring and counts the frames. Like the XDP receiver, tc cannot feed it. What
//!   the kernel could not give the socket (`XDP_STATISTICS`) and frames that found no socket
//!   (B's `xdp_drops`) are counted as drops.
//!
//! A's host veth must have NAPI to take `XDP_TX` frames (`veth_xdp_xmit` drops them otherwise):
//! the xdp datapath's program gives it that, and for the bridge and tc the bench turns GRO on
//! there for the measurement and puts it back after.
//!
//! Where the kernel refuses live frames (EPERM for root on some sandboxed 6.18 builds; kernels
//! before 5.18), an AF_PACKET socket on A's interface sends the frames instead ([`generator`]):
//! fewer per second, counted the same way, and the report says which generator it used.
mod counters;
mod frame;
mod generator;
mod packet_socket;
mod programs;
mod report;
#[cfg(test)]
mod tests;

use std::{thread, time::Duration};

use anyhow::Result;
use serde::Serialize;

use super::{Config, Step, measure, pair::PairState, stats::Spread, table};
use crate::endpoint::Endpoint;
use counters::{delivered, drops_now};
use frame::frame;
use generator::Sender;
use programs::{DROP_PROGRAM, GroOn, Programs, TX_PROGRAM, XSK_PROGRAM, announce};

pub use counters::Drops;
pub use frame::Flow;
pub use generator::Generator;
pub use report::{JsonConfig, json_configs, render};

/// Frame lengths measured, without the FCS: the smallest Ethernet frame, and a full one at the
/// default MTU.
pub const FRAME_SIZES: [usize; 2] = [64, 1500];

/// Time for frames still queued (veth rings, the backlog) to reach the counters.
const SETTLE: Duration = Duration::from_millis(200);

/// Who counts the frames that arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Receiver {
    /// An XDP program dropping every frame at B's driver.
    Xdp,
    /// B's UDP, with no socket on the port.
    Stack,
    /// An application reading B's interface through an AF_XDP socket.
    AfXdp,
}

impl Receiver {
    pub const ALL: [Receiver; 3] = [Receiver::Xdp, Receiver::Stack, Receiver::AfXdp];

    fn name(self) -> &'static str {
        match self {
            Receiver::Xdp => "xdp receiver",
            Receiver::Stack => "stack",
            Receiver::AfXdp => "af_xdp app",
        }
    }

    /// The table's column group.
    fn heading(self) -> &'static str {
        match self {
            Receiver::Xdp => "XDP RX",
            Receiver::Stack => "STACK",
            Receiver::AfXdp => "AF_XDP APP",
        }
    }

    /// Whether frames over `config` can reach this receiver at all: both XDP receivers sit at
    /// B's driver, which `bpf_redirect_peer` (tc) enters past.
    pub fn reachable_over(self, config: Config) -> bool {
        self == Receiver::Stack || config != Config::Tc
    }
}

/// One measurement: frames offered for `seconds`, and what arrived.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Sample {
    pub offered: u64,
    pub seconds: f64,
    pub delivered: u64,
    pub dropped: Drops,
    /// AF_XDP receiver only: frames the application read that were not the measured flow's
    /// (B's own traffic), so not in `delivered`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_frames: Option<u64>,
}

impl Sample {
    pub fn offered_mpps(&self) -> f64 {
        self.offered as f64 / self.seconds / 1e6
    }

    pub fn delivered_mpps(&self) -> f64 {
        self.delivered as f64 / self.seconds / 1e6
    }

    pub fn delivered_percent(&self) -> f64 {
        if self.offered == 0 {
            f64::NAN
        } else {
            self.delivered as f64 * 100.0 / self.offered as f64
        }
    }
}

/// Every round of one frame size to one receiver over one configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Series {
    pub frame_bytes: usize,
    pub receiver: Receiver,
    pub samples: Vec<Sample>,
}

impl Series {
    fn spread(&self, value: impl Fn(&Sample) -> f64) -> Option<Spread> {
        Spread::of(&self.samples.iter().map(value).collect::<Vec<_>>())
    }

    /// The drops of every round together.
    fn dropped(&self) -> Drops {
        let mut total = Drops::default();
        for s in &self.samples {
            total.add(&s.dropped);
        }
        total
    }

    fn offered(&self) -> u64 {
        self.samples.iter().map(|s| s.offered).sum()
    }
}

/// All series of one configuration, and what its datapath redirected meanwhile.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ConfigResults {
    pub series: Vec<Series>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirected_packets: Option<u64>,
}

impl ConfigResults {
    pub fn get(&self, frame_bytes: usize, receiver: Receiver) -> Option<&Series> {
        self.series
            .iter()
            .find(|s| s.frame_bytes == frame_bytes && s.receiver == receiver)
    }

    fn push(&mut self, frame_bytes: usize, receiver: Receiver, sample: Sample) {
        match self
            .series
            .iter_mut()
            .find(|s| s.frame_bytes == frame_bytes && s.receiver == receiver)
        {
            Some(series) => series.samples.push(sample),
            None => self.series.push(Series {
                frame_bytes,
                receiver,
                samples: vec![sample],
            }),
        }
    }
}

/// Per configuration, in the order measured, and what made the frames.
#[derive(Clone, Debug)]
pub struct PpsResults {
    pub configs: Vec<(Config, ConfigResults)>,
    pub generator: Generator,
    /// The kernel's answer when it refused XDP live frames (and the AF_PACKET socket sent).
    pub live_frames_refused: Option<String>,
}

/// The pair as the pps measurement needs it.
pub struct Setup<'a> {
    pub a: &'a Endpoint,
    pub b: &'a Endpoint,
    pub flow: Flow,
    pub seconds: u32,
}

/// Runs every round: per configuration, each frame size to each receiver it can reach.
pub fn run(
    configs: &[Config],
    rounds: u32,
    pair: &mut PairState,
    setup: &Setup<'_>,
    mut tell: impl FnMut(Step<'_>),
) -> Result<PpsResults> {
    let mut programs = Programs::load()?;
    let frames: Vec<(usize, Vec<u8>)> = FRAME_SIZES
        .iter()
        .map(|size| Ok((*size, frame(&setup.flow, *size)?)))
        .collect::<Result<_>>()?;
    let limit = Duration::from_secs(u64::from(setup.seconds));
    let mut sender = Sender::new();
    let mut configs: Vec<(Config, ConfigResults)> = configs
        .iter()
        .map(|c| (*c, ConfigResults::default()))
        .collect();
    let (a, b) = (setup.a, setup.b);
    for round in 1..=rounds {
        for (config, found) in &mut configs {
            let config = *config;
            measure::check_interrupted()?;
            pair.switch(config.datapath())?;
            // The xdp datapath's program gives A's host veth NAPI; the others need GRO for it.
            let _gro = match config {
                Config::Xdp => None,
                _ => Some(GroOn::set(&a.host_ifname)?),
            };
            let redirected_before = pair.redirected()?;
            for (size, bytes) in &frames {
                for receiver in Receiver::ALL {
                    if !receiver.reachable_over(config) {
                        continue;
                    }
                    let at = format!(
                        "round {round}/{rounds}: {config} {size} B to the {}",
                        receiver.name()
                    );
                    tell(Step::Begin(&at));
                    // Before the receiver: A's answer (ICMP port unreachable) must not count.
                    announce(b, setup.flow.src_ip)?;
                    // The application before its program: no frame finds the XskMap empty. On
                    // any way out, the program is detached first (`_attached` drops first).
                    let app = match receiver {
                        Receiver::AfXdp => Some(programs.start_app(b, bytes)?),
                        Receiver::Xdp | Receiver::Stack => None,
                    };
                    let _attached = match receiver {
                        Receiver::Xdp => Some(programs.attach_receiver(b, DROP_PROGRAM)?),
                        Receiver::AfXdp => Some(programs.attach_receiver(b, XSK_PROGRAM)?),
                        Receiver::Stack => None,
                    };
                    let (count_before, drops_before) =
                        (delivered(b, receiver)?, drops_now(a, b, receiver)?);
                    let generator = sender.generator();
                    let offered = sender.offer(programs.get(TX_PROGRAM)?, a, bytes, limit)?;
                    if generator != sender.generator() {
                        tell(Step::Note(&format!(
                            "the kernel refused XDP live frames ({}): frames come from an \
                             AF_PACKET socket instead",
                            sender.refusal().unwrap_or("?")
                        )));
                    }
                    thread::sleep(SETTLE);
                    let mut dropped = drops_now(a, b, receiver)?.since(&drops_before);
                    let mut other_frames = None;
                    let count = match app {
                        // The reader empties its ring before it stops: what it counted is all
                        // the socket got.
                        Some(app) => {
                            let stopped = app.stop()?;
                            dropped.b_xsk_rx_dropped = stopped.drops.rx_dropped;
                            dropped.b_xsk_rx_ring_full = stopped.drops.rx_ring_full;
                            dropped.b_xsk_fill_ring_empty = stopped.drops.fill_ring_empty;
                            other_frames = Some(stopped.read.other);
                            stopped.read.frames
                        }
                        None => delivered(b, receiver)?.saturating_sub(count_before),
                    };
                    let sample = Sample {
                        offered: offered.frames,
                        seconds: offered.seconds,
                        delivered: count,
                        dropped,
                        other_frames,
                    };
                    tell(Step::End(&format!(
                        "offered {} Mpps, delivered {} Mpps ({}%)",
                        table::number(sample.offered_mpps()),
                        table::number(sample.delivered_mpps()),
                        table::number(sample.delivered_percent())
                    )));
                    found.push(*size, receiver, sample);
                }
            }
            pair.tally_redirected(
                config,
                redirected_before,
                &mut found.redirected_packets,
                &format!("round {round}/{rounds}"),
                &mut tell,
            )?;
        }
    }
    Ok(PpsResults {
        configs,
        generator: sender.generator(),
        live_frames_refused: sender.refusal().map(str::to_owned),
    })
}

/// How long the whole plan takes, roughly.
pub fn estimate(configs: &[Config], rounds: u32, seconds: u32) -> Duration {
    let runs: usize = configs
        .iter()
        .map(|c| {
            Receiver::ALL
                .iter()
                .filter(|r| r.reachable_over(*c))
                .count()
                * FRAME_SIZES.len()
        })
        .sum();
    let per_run = f64::from(seconds) + 0.5;
    Duration::from_secs_f64(per_run * runs as f64 * f64::from(rounds) + 2.0 * configs.len() as f64)
}
