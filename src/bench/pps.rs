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
use std::{
    net::{Ipv4Addr, UdpSocket},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow, bail};
use aya::{
    Ebpf,
    maps::XskMap,
    programs::{TestRun, TestRunAttrs, TestRunOptions, Xdp, XdpMode, links::Link, xdp::XdpLink},
};
use serde::Serialize;

use super::{
    Config, Step,
    measure::{self, in_netns, run_to_end},
    pair::PairState,
    stats::Spread,
    table, xsk,
};
use crate::{endpoint::Endpoint, ethtool, netlink::MacAddr, netns::NetnsPath};

/// The generator and receiver programs, built from `ebpf/programs/src/bench.rs` by build.rs.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dxdp-bench"));

const TX_PROGRAM: &str = "dxdp_bench_tx";
const DROP_PROGRAM: &str = "dxdp_bench_drop";
const XSK_PROGRAM: &str = "dxdp_bench_xsk";
const XSK_MAP: &str = "DXDP_BENCH_XSKS";
/// The queue the AF_XDP socket is bound to: Docker's veths have one.
const XSK_QUEUE: u32 = 0;

/// Frame lengths measured, without the FCS: the smallest Ethernet frame, and a full one at the
/// default MTU.
pub const FRAME_SIZES: [usize; 2] = [64, 1500];

/// Frames the kernel sends per batch of a live-frames run (its default, and its upper bound is
/// 256).
const BATCH: u32 = 64;

/// Frames per `BPF_PROG_TEST_RUN` call: about 50 ms at the rates seen here, so that an
/// interrupt or the end of the time is noticed quickly.
const CHUNK: u32 = 1 << 17;

/// Time for frames still queued (veth rings, the backlog) to reach the counters.
const SETTLE: Duration = Duration::from_millis(200);

const ETH_HEADER: usize = 14;
const IPV4_HEADER: usize = 20;
const UDP_HEADER: usize = 8;

/// The addresses of the measured flow: A's interface to B's, one UDP port.
#[derive(Clone, Debug)]
pub struct Flow {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub port: u16,
}

/// An Ethernet/IPv4/UDP frame of `size` bytes (headers included, FCS not) carrying the flow:
/// DF set, TTL 64, the IPv4 header checksum computed, no UDP checksum (optional over IPv4).
pub fn frame(flow: &Flow, size: usize) -> Result<Vec<u8>> {
    let headers = ETH_HEADER + IPV4_HEADER + UDP_HEADER;
    if size < headers {
        bail!("a frame of {size} bytes cannot hold the {headers} bytes of headers");
    }
    let ip_len = u16::try_from(size - ETH_HEADER)
        .map_err(|_| anyhow!("a frame of {size} bytes is too long for IPv4"))?;
    let udp_len = ip_len - IPV4_HEADER as u16;
    let mut f = Vec::with_capacity(size);
    f.extend_from_slice(&flow.dst_mac);
    f.extend_from_slice(&flow.src_mac);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let ip_start = f.len();
    f.extend_from_slice(&[0x45, 0]); // version 4, 5 words of header; DSCP/ECN 0
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&0u16.to_be_bytes()); // identification
    f.extend_from_slice(&0x4000u16.to_be_bytes()); // DF, offset 0
    f.extend_from_slice(&[64, 17]); // TTL, UDP
    f.extend_from_slice(&0u16.to_be_bytes()); // checksum, filled below
    f.extend_from_slice(&flow.src_ip.octets());
    f.extend_from_slice(&flow.dst_ip.octets());
    let checksum = ipv4_checksum(&f[ip_start..]);
    f[ip_start + 10..ip_start + 12].copy_from_slice(&checksum.to_be_bytes());
    f.extend_from_slice(&flow.port.to_be_bytes());
    f.extend_from_slice(&flow.port.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&0u16.to_be_bytes());
    f.resize(size, b'x');
    Ok(f)
}

/// The Internet checksum (RFC 1071) of `header`: the ones' complement of the ones' complement
/// sum of its 16-bit words. Over a header that carries its checksum, the result is 0.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The XDP_DROP verdicts of every queue in `ethtool -S` output of a veth
/// (`rx_queue_N_xdp_drops`).
pub fn xdp_drops(ethtool_stats: &str) -> Result<u64> {
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
pub fn udp_no_ports(snmp: &str) -> Result<u64> {
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
pub fn backlog_drops(softnet_stat: &str) -> Result<u64> {
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
    fn places(&self) -> [(&'static str, u64); 8] {
        [
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

    fn since(&self, before: &Drops) -> Drops {
        Drops {
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

    fn add(&mut self, other: &Drops) {
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
    fn largest(&self) -> Option<(&'static str, u64)> {
        self.places()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .max_by_key(|(_, n)| *n)
    }
}

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

/// Per configuration, in the order measured.
#[derive(Clone, Debug, Default)]
pub struct PpsResults {
    pub configs: Vec<(Config, ConfigResults)>,
}

/// The pair as the pps measurement needs it.
pub struct Setup<'a> {
    pub a: &'a Endpoint,
    pub b: &'a Endpoint,
    pub flow: Flow,
    pub seconds: u32,
}

/// The generator and receiver programs, loaded (not attached).
struct Programs(Ebpf);

impl Programs {
    fn load() -> Result<Self> {
        let mut ebpf = Ebpf::load(OBJECT).context("cannot load the bench's eBPF object")?;
        for name in [TX_PROGRAM, DROP_PROGRAM, XSK_PROGRAM] {
            let prog: &mut Xdp = ebpf
                .program_mut(name)
                .ok_or_else(|| anyhow!("the bench's eBPF object lacks {name}"))?
                .try_into()?;
            prog.load()
                .with_context(|| format!("cannot load the {name} program"))?;
        }
        Ok(Self(ebpf))
    }

    fn get(&self, name: &str) -> Result<&Xdp> {
        let prog = self
            .0
            .program(name)
            .ok_or_else(|| anyhow!("the bench's eBPF object lacks {name}"))?;
        Ok(prog.try_into()?)
    }

    /// Attaches the receiver's program `name` to B's interface, inside B's namespace (the
    /// interface index is B's); it stays attached until the returned guard is dropped.
    fn attach_receiver(&mut self, b: &Endpoint, name: &str) -> Result<Attached> {
        let prog: &mut Xdp = self
            .0
            .program_mut(name)
            .ok_or_else(|| anyhow!("the bench's eBPF object lacks {name}"))?
            .try_into()?;
        let ifindex = b.ifindex;
        let link = b.netns.run(|| {
            let id = prog
                .attach_to_if_index(ifindex, XdpMode::Driver)
                .with_context(|| format!("cannot attach the XDP program {name}"))?;
            Ok(prog.take_link(id)?)
        });
        let link = link.with_context(|| format!("{} ({}) in {}", b.label, b.ifname, b.netns))?;
        Ok(Attached {
            link: Some(link),
            netns: b.netns.clone(),
        })
    }

    /// The AF_XDP application: a socket on queue [`XSK_QUEUE`] of B's interface, made inside
    /// B's namespace (where the interface index is B's), put in the bench's XskMap and read by a
    /// thread of its own. Closing the socket (when the reader stops or is dropped) takes it out
    /// of the map again; the kernel frees the UMEM and rings with it.
    /// It counts as delivered only frames like `sent` (the same length and headers).
    fn start_app(&mut self, b: &Endpoint, sent: &[u8]) -> Result<xsk::Reader> {
        let ifindex = b.ifindex;
        let socket = b
            .netns
            .run(|| xsk::Socket::open(ifindex, XSK_QUEUE))
            .with_context(|| format!("{} ({}) in {}", b.label, b.ifname, b.netns))?;
        let mut map: XskMap<_> = self
            .0
            .map_mut(XSK_MAP)
            .ok_or_else(|| anyhow!("the bench's eBPF object lacks the map {XSK_MAP}"))?
            .try_into()?;
        map.set(XSK_QUEUE, socket.fd(), 0)
            .with_context(|| format!("cannot put the AF_XDP socket in {XSK_MAP}"))?;
        let headers = ETH_HEADER + IPV4_HEADER + UDP_HEADER;
        xsk::Reader::start(socket, xsk::Expected::like(sent, headers))
    }
}

/// The XDP receiver on B's interface, detached (inside B's namespace, where its interface index
/// means B's interface) when this is dropped: after the measurement, an error or Ctrl-C alike.
/// Were the process killed, the kernel would detach it with the link's last file descriptor.
struct Attached {
    link: Option<XdpLink>,
    netns: NetnsPath,
}

impl Drop for Attached {
    fn drop(&mut self) {
        if let Some(link) = self.link.take()
            && let Err(err) = self.netns.run(move || Ok(link.detach()?))
        {
            eprintln!(
                "dxdp: error: could not detach the bench's XDP receiver in {}: {err:#}",
                self.netns
            );
        }
    }
}

/// GRO on A's host veth for the bridge and tc: without NAPI there, `XDP_TX` frames from A are
/// dropped. Put back as found when dropped.
struct GroOn {
    ifname: String,
    was: bool,
}

impl GroOn {
    fn set(ifname: &str) -> Result<Self> {
        let was = ethtool::get(ifname, ethtool::Feature::Gro)?;
        if !was {
            ethtool::set(ifname, ethtool::Feature::Gro, true)?;
        }
        Ok(Self {
            ifname: ifname.to_owned(),
            was,
        })
    }
}

impl Drop for GroOn {
    fn drop(&mut self) {
        if !self.was
            && let Err(err) = ethtool::set(&self.ifname, ethtool::Feature::Gro, false)
        {
            eprintln!(
                "dxdp: error: could not turn GRO off again on {}: {err:#}; run `ethtool -K {} \
                 gro off`",
                self.ifname, self.ifname
            );
        }
    }
}

/// What one live-frames run offered.
struct Offered {
    frames: u64,
    seconds: f64,
}

/// Runs `dxdp_bench_tx` over `frame` as live frames on A's interface for `limit`, from a thread
/// inside A's namespace: the run's `ingress_ifindex` is looked up in the caller's namespace.
fn offer(tx: &Xdp, a: &Endpoint, frame: &[u8], limit: Duration) -> Result<Offered> {
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex.
    let len = u32::try_from(frame.len())?;
    let ctx: Vec<u8> = [0, len, 0, a.ifindex, 0, 0]
        .iter()
        .flat_map(|w: &u32| w.to_ne_bytes())
        .collect();
    a.netns.run(|| {
        let started = Instant::now();
        let mut frames = 0u64;
        while frames == 0 || started.elapsed() < limit {
            measure::check_interrupted()?;
            let opts = TestRunOptions {
                data_in: Some(frame),
                ctx_in: Some(&ctx),
                repeat: CHUNK,
                attrs: TestRunAttrs::new().xdp_live_frames(BATCH),
                ..TestRunOptions::new()
            };
            if let Err(err) = tx.test_run(opts) {
                measure::check_interrupted()?;
                return Err(anyhow::Error::new(err).context(format!(
                    "cannot send live frames on {} ({}): BPF_PROG_TEST_RUN with \
                     BPF_F_TEST_XDP_LIVE_FRAMES needs Linux 5.18",
                    a.label, a.ifname
                )));
            }
            frames += u64::from(CHUNK);
        }
        Ok(Offered {
            frames,
            seconds: started.elapsed().as_secs_f64(),
        })
    })
}

/// What B's receiver has counted so far; the AF_XDP application counts its own from 0.
fn delivered(b: &Endpoint, receiver: Receiver) -> Result<u64> {
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
fn b_xdp_drops(b: &Endpoint) -> Result<u64> {
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

fn host_counter(ifname: &str, name: &str) -> Result<u64> {
    let path = format!("/sys/class/net/{ifname}/statistics/{name}");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    text.trim()
        .parse()
        .with_context(|| format!("{path}: not a number"))
}

/// The host-side drop counters now, and for the AF_XDP receiver B's `xdp_drops` (frames its
/// program found no socket for). The socket's own counts are read when it stops.
fn drops_now(a: &Endpoint, b: &Endpoint, receiver: Receiver) -> Result<Drops> {
    let softnet = std::fs::read_to_string("/proc/net/softnet_stat")
        .context("cannot read /proc/net/softnet_stat")?;
    Ok(Drops {
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

/// One datagram from B to A before each measurement, so that the bridge has learnt B's MAC
/// address: frames to an address it does not know yet are flooded to every port.
fn announce(b: &Endpoint, a_ip: Ipv4Addr) -> Result<()> {
    b.netns
        .run(move || {
            let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
            socket.send_to(b"dxdp", (a_ip, 9))?;
            Ok(())
        })
        .with_context(|| format!("cannot send from {}", b.label))?;
    thread::sleep(Duration::from_millis(20));
    Ok(())
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
    let mut results = PpsResults {
        configs: configs
            .iter()
            .map(|c| (*c, ConfigResults::default()))
            .collect(),
    };
    let (a, b) = (setup.a, setup.b);
    for round in 1..=rounds {
        for (config, found) in &mut results.configs {
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
                    let offered = offer(programs.get(TX_PROGRAM)?, a, bytes, limit)?;
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
            if config.datapath().is_some() {
                let redirected = pair.redirected()?.saturating_sub(redirected_before);
                *found.redirected_packets.get_or_insert(0) += redirected;
                if redirected == 0 {
                    tell(Step::Note(&format!(
                        "round {round}/{rounds}: warning: the {config} datapath redirected no \
                         packets, so these numbers are the bridge's"
                    )));
                }
            }
        }
    }
    Ok(results)
}

/// The table: a row per frame size and configuration, the XDP receiver beside the stack.
pub fn render(results: &PpsResults, rounds: u32) -> String {
    let mut header = vec![format!("{:<7} CONFIG", "FRAME")];
    for receiver in Receiver::ALL {
        header.extend([
            format!("{}: OFFERED Mpps", receiver.heading()),
            "DELIVERED Mpps".to_owned(),
            "%".to_owned(),
            "DROPPED AT".to_owned(),
        ]);
    }
    let mut rows: Vec<Vec<String>> = vec![header];
    for size in FRAME_SIZES {
        for (config, found) in &results.configs {
            let mut row = vec![format!("{:<7} {config}", format!("{size} B"))];
            for receiver in Receiver::ALL {
                match found.get(size, receiver) {
                    Some(series) => row.extend([
                        table::cell(series.spread(Sample::offered_mpps)),
                        table::cell(series.spread(Sample::delivered_mpps)),
                        series
                            .spread(Sample::delivered_percent)
                            .map_or_else(|| "n/a".to_owned(), |s| table::number(s.median)),
                        dropped_at(series),
                    ]),
                    None => row.extend(std::iter::repeat_n("n/a".to_owned(), 4)),
                }
            }
            rows.push(row);
        }
    }
    let mut out = table::align(&rows);
    let spread = if rounds > 1 {
        format!(" (min–max over {rounds} rounds)")
    } else {
        String::new()
    };
    out.push_str(&format!(
        "\nframes of 64 and 1500 B sent from A as XDP live frames; medians{spread}; % is \
         delivered / offered; DROPPED AT: the counter that rose most, as a share of all frames \
         offered. XDP RX and AF_XDP APP (an application reading an AF_XDP socket on B's interface, \
         copy mode) are n/a for tc: bpf_redirect_peer enters B past its driver's XDP hook\n"
    ));
    out
}

fn dropped_at(series: &Series) -> String {
    let offered = series.offered();
    match series.dropped().largest() {
        Some((place, n)) if offered > 0 => {
            format!(
                "{}% {place}",
                table::number(n as f64 * 100.0 / offered as f64)
            )
        }
        _ => "-".to_owned(),
    }
}

/// The JSON of one configuration: each series with its samples and the medians of its rates.
#[derive(Serialize)]
pub struct JsonConfig {
    name: Config,
    series: Vec<JsonSeries>,
    #[serde(skip_serializing_if = "Option::is_none")]
    redirected_packets: Option<u64>,
}

#[derive(Serialize)]
struct JsonSeries {
    frame_bytes: usize,
    receiver: Receiver,
    offered_mpps: Option<Spread>,
    delivered_mpps: Option<Spread>,
    delivered_percent: Option<Spread>,
    dropped: Drops,
    samples: Vec<Sample>,
}

pub fn json_configs(results: &PpsResults) -> Vec<JsonConfig> {
    results
        .configs
        .iter()
        .map(|(config, found)| JsonConfig {
            name: *config,
            series: found
                .series
                .iter()
                .map(|s| JsonSeries {
                    frame_bytes: s.frame_bytes,
                    receiver: s.receiver,
                    offered_mpps: s.spread(Sample::offered_mpps),
                    delivered_mpps: s.spread(Sample::delivered_mpps),
                    delivered_percent: s.spread(Sample::delivered_percent),
                    dropped: s.dropped(),
                    samples: s.samples.clone(),
                })
                .collect(),
            redirected_packets: found.redirected_packets,
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn flow() -> Flow {
        Flow {
            src_mac: [0x02, 0, 0, 0, 0, 1],
            dst_mac: [0x02, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 231, 0, 1),
            dst_ip: Ipv4Addr::new(10, 231, 0, 2),
            port: 5299,
        }
    }

    #[test]
    fn the_checksum_is_rfc_1071() {
        // The example header of RFC 1071's errata / Wikipedia's "IPv4 header checksum".
        let header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_checksum(&header), 0xb861);
        let mut with = header;
        with[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(ipv4_checksum(&with), 0);
        // An odd length pads with a zero byte.
        assert_eq!(ipv4_checksum(&[0xff]), !0xff00);
    }

    #[test]
    fn frames_carry_the_flow_at_the_size_asked() {
        for size in FRAME_SIZES {
            let f = frame(&flow(), size).unwrap();
            assert_eq!(f.len(), size);
            assert_eq!(&f[0..6], &[0x02, 0, 0, 0, 0, 2], "destination MAC first");
            assert_eq!(&f[6..12], &[0x02, 0, 0, 0, 0, 1]);
            assert_eq!(&f[12..14], &[0x08, 0x00]);
            let ip = &f[14..34];
            assert_eq!(ip[0], 0x45);
            assert_eq!(usize::from(u16::from_be_bytes([ip[2], ip[3]])), size - 14);
            assert_eq!(ip[9], 17, "UDP");
            assert_eq!(&ip[12..16], &[10, 231, 0, 1]);
            assert_eq!(&ip[16..20], &[10, 231, 0, 2]);
            assert_eq!(
                ipv4_checksum(ip),
                0,
                "{size} B: the header checksum is right"
            );
            let udp = &f[34..42];
            assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 5299);
            assert_eq!(usize::from(u16::from_be_bytes([udp[4], udp[5]])), size - 34);
        }
        assert!(frame(&flow(), 41).is_err());
        assert!(frame(&flow(), 42).is_ok());
        assert!(frame(&flow(), 70_000).is_err());
    }

    #[test]
    fn xdp_drops_sum_over_queues() {
        let stats = "NIC statistics:\n     peer_ifindex: 31231\n     \
                     rx_queue_0_xdp_packets: 10\n     rx_queue_0_drops: 3\n     \
                     rx_queue_0_xdp_drops: 1000\n     rx_queue_1_xdp_drops: 234\n     \
                     rx_queue_0_xdp_tx_errors: 7\n     tx_queue_0_xdp_xmit: 0\n";
        assert_eq!(xdp_drops(stats).unwrap(), 1234);
        assert!(xdp_drops("NIC statistics:\n     rx_packets: 5\n").is_err());
        assert!(xdp_drops("     rx_queue_0_xdp_drops: many\n").is_err());
    }

    #[test]
    fn no_ports_comes_from_the_udp_value_line() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\n\
                    Udp: 12 3456789 0 12 0\n\
                    UdpLite: InDatagrams NoPorts InErrors\nUdpLite: 0 99 0\n";
        assert_eq!(udp_no_ports(snmp).unwrap(), 3_456_789);
        assert!(udp_no_ports("Ip: Forwarding\nIp: 1\n").is_err());
        assert!(udp_no_ports("Udp: InDatagrams\nUdp: 5\n").is_err());
    }

    #[test]
    fn backlog_drops_are_hex_summed_over_cpus() {
        let softnet = "0000a1b2 0000000f 00000003 00000000\n00000010 00000001 00000000 00000000\n";
        assert_eq!(backlog_drops(softnet).unwrap(), 16);
        assert!(backlog_drops("00000001 zz\n").is_err());
    }

    fn sample(offered: u64, delivered: u64, a_veth_rx: u64) -> Sample {
        Sample {
            offered,
            seconds: 2.0,
            delivered,
            dropped: Drops {
                a_veth_rx,
                ..Drops::default()
            },
            other_frames: None,
        }
    }

    #[test]
    fn the_table_puts_the_receivers_side_by_side() {
        let mut bridge = ConfigResults::default();
        bridge.push(64, Receiver::Xdp, sample(4_000_000, 1_000_000, 3_000_000));
        bridge.push(64, Receiver::Stack, sample(4_000_000, 400_000, 0));
        let mut at_socket = sample(4_000_000, 3_000_000, 200_000);
        at_socket.dropped.b_xsk_rx_ring_full = 600_000;
        at_socket.dropped.b_xsk_rx_dropped = 200_000;
        at_socket.dropped.b_xsk_fill_ring_empty = 200_000;
        bridge.push(64, Receiver::AfXdp, at_socket);
        let mut tc = ConfigResults::default();
        tc.push(64, Receiver::Stack, sample(4_000_000, 800_000, 0));
        let results = PpsResults {
            configs: vec![(Config::Bridge, bridge), (Config::Tc, tc)],
        };
        let text = render(&results, 1);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("FRAME") && lines[0].contains("STACK: OFFERED Mpps"));
        assert!(lines[0].contains("AF_XDP APP: OFFERED Mpps"));
        let words = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            words(lines[1]),
            [
                "64", "B", "bridge", "2.00", "0.50", "25.0", "75.0%", "A", "veth", "rx", "2.00"
            ]
            .into_iter()
            .chain(["0.20", "10.0", "-"])
            // The socket's rx ring full is the largest place; the fill ring's share of its
            // drops is not a place of its own.
            .chain(["2.00", "1.50", "75.0", "15.0%", "B", "rx", "ring", "full"])
            .collect::<Vec<_>>()
        );
        assert_eq!(
            words(lines[2]),
            [
                "64", "B", "tc", "n/a", "n/a", "n/a", "n/a", "2.00", "0.40", "20.0", "-", "n/a",
                "n/a", "n/a", "n/a"
            ]
        );
        // 1500 B was not measured: every cell says so.
        assert!(lines[3].starts_with("1500 B") && lines[3].matches("n/a").count() == 12);
        assert!(text.contains("XDP RX and AF_XDP APP (an application reading an AF_XDP"));
        assert!(text.contains("are n/a for tc"));
    }

    #[test]
    fn tc_cannot_feed_an_xdp_receiver() {
        for receiver in [Receiver::Xdp, Receiver::AfXdp] {
            assert!(!receiver.reachable_over(Config::Tc));
            assert!(receiver.reachable_over(Config::Xdp));
            assert!(receiver.reachable_over(Config::Bridge));
        }
        assert!(Receiver::Stack.reachable_over(Config::Tc));
        let runs = estimate(&[Config::Bridge, Config::Tc, Config::Xdp], 1, 1);
        // 6 + 2 + 6 runs of 1.5 s, and 2 s per configuration.
        assert_eq!(runs, Duration::from_secs(27));
    }

    #[test]
    fn drops_count_each_frame_once_and_receivers_keep_their_json_names() {
        let d = Drops {
            a_veth_rx: 1,
            b_veth_tx: 2,
            b_xsk_no_socket: 4,
            b_xsk_rx_dropped: 8,
            b_xsk_rx_ring_full: 16,
            // Part of b_xsk_rx_dropped.
            b_xsk_fill_ring_empty: 8,
            ..Drops::default()
        };
        assert_eq!(d.total(), 31);
        let later = Drops {
            b_xsk_no_socket: 10,
            ..d
        };
        assert_eq!(later.since(&d).b_xsk_no_socket, 6);
        assert_eq!(later.since(&d).total(), 6);
        let names: Vec<String> = Receiver::ALL
            .iter()
            .map(|r| serde_json::to_string(r).unwrap())
            .collect();
        assert_eq!(names, [r#""xdp""#, r#""stack""#, r#""af_xdp""#]);
    }
}
