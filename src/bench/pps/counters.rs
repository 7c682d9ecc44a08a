//! Where the kernel counts the frames: what each receiver got, and where the rest was dropped.
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;

use super::Receiver;
use crate::{
    bench::measure::{host_counter, in_netns, run_to_end},
    endpoint::Endpoint,
};

/// The XDP_DROP verdicts of every queue in `ethtool -S` output of a veth
/// (`rx_queue_N_xdp_drops`).
pub(super) fn xdp_drops(ethtool_stats: &str) -> Result<u64> {
    let mut found = false;
    let mut total = 0u64;
    for line in ethtool_stats.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key.trim().ends_with("xdp_drops") {
            found = true;
            total += value
                .trim()
                .parse::<u64>()
                .with_context(|| format!("ethtool -S: {line:?}"))?;
        }
    }
    if !found {
        bail!("ethtool -S shows no xdp_drops counter (not a veth?)");
    }
    Ok(total)
}

/// `Udp: NoPorts` of `/proc/net/snmp`: datagrams that reached UDP with no socket bound to their
/// port. The file has a header line and a value line per protocol.
pub(super) fn udp_no_ports(snmp: &str) -> Result<u64> {
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
        bail!("/proc/net/snmp has no Udp lines");
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "NoPorts")
        .ok_or_else(|| anyhow!("/proc/net/snmp: Udp has no NoPorts"))?
        .1
        .parse()
        .context("/proc/net/snmp: Udp NoPorts is not a number")
}

/// Frames the per-CPU backlog queues dropped, summed over CPUs: the second column of
/// `/proc/net/softnet_stat`, in hex.
pub(super) fn backlog_drops(softnet_stat: &str) -> Result<u64> {
    softnet_stat
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|hex| {
            u64::from_str_radix(hex, 16)
                .with_context(|| format!("/proc/net/softnet_stat: {hex:?} is not hex"))
        })
        .sum()
}

/// Where the frames that were offered and not delivered were dropped, as the kernel counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Drops {
    /// A's own interface's `tx_dropped` (in A's namespace): frames of the AF_PACKET generator
    /// its driver could not pass to the host veth (live frames do not pass it).
    pub a_tx: u64,
    /// A's host veth `rx_dropped`: mostly its ring full when the generator outran its NAPI.
    pub a_veth_rx: u64,
    pub a_veth_tx: u64,
    pub b_veth_rx: u64,
    /// B's host veth `tx_dropped`: B's side did not take what the bridge or the redirect sent.
    pub b_veth_tx: u64,
    /// The per-CPU backlog queues, host-wide (`/proc/net/softnet_stat`).
    pub backlog: u64,
    /// AF_XDP receiver only: frames `dxdp_bench_xsk` found no socket for (B's `xdp_drops`).
    pub b_xsk_no_socket: u64,
    /// AF_XDP receiver only, the socket's `XDP_STATISTICS`: `rx_dropped` (too long for a UMEM
    /// frame, or no buffer on the fill ring) …
    pub b_xsk_rx_dropped: u64,
    /// … `rx_ring_full` (the application did not keep up) …
    pub b_xsk_rx_ring_full: u64,
    /// … and `rx_fill_ring_empty_descs`, the part of `rx_dropped` that found the fill ring
    /// empty: not a place of its own, so not in [`Drops::total`].
    pub b_xsk_fill_ring_empty: u64,
}

impl Drops {
    pub(super) fn places(&self) -> [(&'static str, u64); 9] {
        [
            ("A tx", self.a_tx),
            ("A veth rx", self.a_veth_rx),
            ("A veth tx", self.a_veth_tx),
            ("B veth rx", self.b_veth_rx),
            ("B veth tx", self.b_veth_tx),
            ("backlog", self.backlog),
            ("B no socket", self.b_xsk_no_socket),
            ("B socket", self.b_xsk_rx_dropped),
            ("B rx ring full", self.b_xsk_rx_ring_full),
        ]
    }

    /// Every frame counted as dropped, each once.
    pub fn total(&self) -> u64 {
        self.places().iter().map(|(_, n)| n).sum()
    }

    pub(super) fn since(&self, before: &Drops) -> Drops {
        Drops {
            a_tx: self.a_tx.saturating_sub(before.a_tx),
            a_veth_rx: self.a_veth_rx.saturating_sub(before.a_veth_rx),
            a_veth_tx: self.a_veth_tx.saturating_sub(before.a_veth_tx),
            b_veth_rx: self.b_veth_rx.saturating_sub(before.b_veth_rx),
            b_veth_tx: self.b_veth_tx.saturating_sub(before.b_veth_tx),
            backlog: self.backlog.saturating_sub(before.backlog),
            b_xsk_no_socket: self.b_xsk_no_socket.saturating_sub(before.b_xsk_no_socket),
            b_xsk_rx_dropped: self
                .b_xsk_rx_dropped
                .saturating_sub(before.b_xsk_rx_dropped),
            b_xsk_rx_ring_full: self
                .b_xsk_rx_ring_full
                .saturating_sub(before.b_xsk_rx_ring_full),
            b_xsk_fill_ring_empty: self
                .b_xsk_fill_ring_empty
                .saturating_sub(before.b_xsk_fill_ring_empty),
        }
    }

    pub(super) fn add(&mut self, other: &Drops) {
        self.a_tx += other.a_tx;
        self.a_veth_rx += other.a_veth_rx;
        self.a_veth_tx += other.a_veth_tx;
        self.b_veth_rx += other.b_veth_rx;
        self.b_veth_tx += other.b_veth_tx;
        self.backlog += other.backlog;
        self.b_xsk_no_socket += other.b_xsk_no_socket;
        self.b_xsk_rx_dropped += other.b_xsk_rx_dropped;
        self.b_xsk_rx_ring_full += other.b_xsk_rx_ring_full;
        self.b_xsk_fill_ring_empty += other.b_xsk_fill_ring_empty;
    }

    /// The place that dropped most, if any did.
    pub(super) fn largest(&self) -> Option<(&'static str, u64)> {
        self.places()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .max_by_key(|(_, n)| *n)
    }
}

/// What B's receiver has counted so far; the AF_XDP application counts its own from 0.
pub(super) fn delivered(b: &Endpoint, receiver: Receiver) -> Result<u64> {
    match receiver {
        Receiver::Xdp => b_xdp_drops(b),
        Receiver::AfXdp => Ok(0),
        Receiver::Stack => {
            // /proc/net is the process's namespace; thread-self is this thread's.
            let snmp = b
                .netns
                .run(|| Ok(std::fs::read_to_string("/proc/thread-self/net/snmp")?))
                .with_context(|| format!("cannot read /proc/net/snmp in {}", b.netns))?;
            udp_no_ports(&snmp)
        }
    }
}

/// The `xdp_drops` of B's interface (`ethtool -S` in B's namespace): what `dxdp_bench_drop`
/// received, or what `dxdp_bench_xsk` found no socket for.
pub(super) fn b_xdp_drops(b: &Endpoint) -> Result<u64> {
    let mut cmd = in_netns(b.netns.path(), "ethtool");
    cmd.args(["-S", &b.ifname]);
    let out = run_to_end(cmd, Duration::from_secs(10), "ethtool -S")?;
    if !out.status.success() {
        bail!(
            "ethtool -S {} in {}: {}",
            b.ifname,
            b.netns,
            out.stderr.trim()
        );
    }
    xdp_drops(&out.stdout).with_context(|| format!("{} in {}", b.ifname, b.netns))
}

/// The drop counters now: A's interface's, the host side's, and for the AF_XDP receiver B's `xdp_drops` (frames its
/// program found no socket for). The socket's own counts are read when it stops.
pub(super) fn drops_now(a: &Endpoint, b: &Endpoint, receiver: Receiver) -> Result<Drops> {
    let softnet = std::fs::read_to_string("/proc/net/softnet_stat")
        .context("cannot read /proc/net/softnet_stat")?;
    let a_tx = a
        .netns
        .run(|| host_counter(&a.ifname, "tx_dropped"))
        .with_context(|| format!("{} in {}", a.label, a.netns))?;
    Ok(Drops {
        a_tx,
        a_veth_rx: host_counter(&a.host_ifname, "rx_dropped")?,
        a_veth_tx: host_counter(&a.host_ifname, "tx_dropped")?,
        b_veth_rx: host_counter(&b.host_ifname, "rx_dropped")?,
        b_veth_tx: host_counter(&b.host_ifname, "tx_dropped")?,
        backlog: backlog_drops(&softnet)?,
        b_xsk_no_socket: match receiver {
            Receiver::AfXdp => b_xdp_drops(b)?,
            Receiver::Xdp | Receiver::Stack => 0,
        },
        ..Drops::default()
    })
}
