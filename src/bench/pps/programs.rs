//! The bench's XDP programs: the live-frames generator on A, the receivers on B, and what the
//! path needs around them (NAPI on A's host veth, B's MAC address learnt by the bridge).
use std::{
    net::{Ipv4Addr, UdpSocket},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow};
use aya::{
    Ebpf,
    maps::XskMap,
    programs::{TestRun, TestRunAttrs, TestRunOptions, Xdp, XdpMode, links::Link, xdp::XdpLink},
};

use super::frame::{ETH_HEADER, IPV4_HEADER, UDP_HEADER};
use crate::{
    bench::{measure, xsk},
    endpoint::Endpoint,
    ethtool,
    netns::NetnsPath,
};

/// The generator and receiver programs, built from `ebpf/programs/src/bench.rs` by build.rs.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dxdp-bench"));

pub(super) const TX_PROGRAM: &str = "dxdp_bench_tx";
pub(super) const DROP_PROGRAM: &str = "dxdp_bench_drop";
pub(super) const XSK_PROGRAM: &str = "dxdp_bench_xsk";
pub(super) const XSK_MAP: &str = "DXDP_BENCH_XSKS";
/// The queue the AF_XDP socket is bound to: Docker's veths have one.
pub(super) const XSK_QUEUE: u32 = 0;

/// Frames the kernel sends per batch of a live-frames run (its default, and its upper bound is
/// 256).
pub(super) const BATCH: u32 = 64;

/// Frames per `BPF_PROG_TEST_RUN` call: about 50 ms at the rates seen here, so that an
/// interrupt or the end of the time is noticed quickly.
pub(super) const CHUNK: u32 = 1 << 17;

/// The generator and receiver programs, loaded (not attached).
pub(super) struct Programs(Ebpf);

impl Programs {
    pub(super) fn load() -> Result<Self> {
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

    pub(super) fn get(&self, name: &str) -> Result<&Xdp> {
        let prog = self
            .0
            .program(name)
            .ok_or_else(|| anyhow!("the bench's eBPF object lacks {name}"))?;
        Ok(prog.try_into()?)
    }

    /// Attaches the receiver's program `name` to B's interface, inside B's namespace (the
    /// interface index is B's); it stays attached until the returned guard is dropped.
    pub(super) fn attach_receiver(&mut self, b: &Endpoint, name: &str) -> Result<Attached> {
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
    pub(super) fn start_app(&mut self, b: &Endpoint, sent: &[u8]) -> Result<xsk::Reader> {
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
pub(super) struct Attached {
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
/// dropped (the AF_PACKET generator's frames would not need it; they get it too, so that both
/// generators meet the same receive path). Put back as found when dropped.
pub(super) struct GroOn {
    ifname: String,
    was: bool,
}

impl GroOn {
    pub(super) fn set(ifname: &str) -> Result<Self> {
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

/// What one run of a generator offered.
pub(super) struct Offered {
    pub(super) frames: u64,
    pub(super) seconds: f64,
}

/// Runs `dxdp_bench_tx` over `frame` as live frames on A's interface for `limit`, from a thread
/// inside A's namespace: the run's `ingress_ifindex` is looked up in the caller's namespace.
pub(super) fn offer(tx: &Xdp, a: &Endpoint, frame: &[u8], limit: Duration) -> Result<Offered> {
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

/// One datagram from B to A before each measurement, so that the bridge has learnt B's MAC
/// address: frames to an address it does not know yet are flooded to every port.
pub(super) fn announce(b: &Endpoint, a_ip: Ipv4Addr) -> Result<()> {
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
