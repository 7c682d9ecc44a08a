//! Which generator makes the frames: XDP live frames where the kernel runs them, an AF_PACKET
//! socket where it refuses them.
//!
//! Some kernels answer `BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` with EPERM even for
//! root (a sandbox's build of 6.18 does, for any program on any interface), and kernels before
//! 5.18 do not know the flag. The first refusal, before any live frame was sent, switches the
//! whole measurement to the AF_PACKET generator, so that every run of a report has the same
//! generator; the report names it and the refusal. A failure after live frames were sent is an
//! error, as before.
use std::{io, time::Duration};

use anyhow::Result;
use aya::programs::Xdp;
use serde::Serialize;

use super::{packet_socket, programs};
use crate::endpoint::Endpoint;

/// What makes the measured frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Generator {
    /// `dxdp_bench_tx` run as XDP live frames on A's interface: each `XDP_TX` sends the frame.
    XdpLiveFrames,
    /// An AF_PACKET socket on A's interface, `sendmmsg` past the qdisc.
    AfPacket,
}

impl Generator {
    /// How the table's footnote says where the frames came from.
    pub(super) fn describe(self) -> &'static str {
        match self {
            Generator::XdpLiveFrames => "sent from A as XDP live frames",
            Generator::AfPacket => {
                "sent from A by an AF_PACKET socket (sendmmsg, past the qdisc: slower to make than \
                 XDP live frames)"
            }
        }
    }
}

/// The generator of one measurement, and why live frames were not used if they were not.
pub(super) struct Sender {
    generator: Generator,
    /// The kernel's answer to the first live-frames run, when it refused it.
    refusal: Option<String>,
    live_frames_sent: bool,
}

impl Sender {
    pub(super) fn new() -> Self {
        Self {
            generator: Generator::XdpLiveFrames,
            refusal: None,
            live_frames_sent: false,
        }
    }

    pub(super) fn generator(&self) -> Generator {
        self.generator
    }

    pub(super) fn refusal(&self) -> Option<&str> {
        self.refusal.as_deref()
    }

    /// Offers `frame` from A for `limit` with the measurement's generator.
    pub(super) fn offer(
        &mut self,
        tx: &Xdp,
        a: &Endpoint,
        frame: &[u8],
        limit: Duration,
    ) -> Result<programs::Offered> {
        if self.generator == Generator::XdpLiveFrames {
            match programs::offer(tx, a, frame, limit) {
                Ok(offered) => {
                    self.live_frames_sent = true;
                    return Ok(offered);
                }
                Err(err) => {
                    let refusal = (!self.live_frames_sent).then(|| refused(&err)).flatten();
                    let Some(errno) = refusal else {
                        return Err(err);
                    };
                    self.refusal = Some(errno.to_string());
                    self.generator = Generator::AfPacket;
                }
            }
        }
        packet_socket::offer(a, frame, limit)
    }
}

/// The kernel's error when `err` says it does not run live frames at all: EPERM (refused),
/// EINVAL (a kernel that does not know the flag), EOPNOTSUPP or ENOTSUPP.
pub(super) fn refused(err: &anyhow::Error) -> Option<io::Error> {
    /// The kernel's internal ENOTSUPP, which BPF commands can return to user space.
    const ENOTSUPP: i32 = 524;
    err.chain()
        .filter_map(|cause| cause.downcast_ref::<io::Error>())
        .filter_map(io::Error::raw_os_error)
        .find(|errno| [libc::EPERM, libc::EINVAL, libc::EOPNOTSUPP, ENOTSUPP].contains(errno))
        .map(io::Error::from_raw_os_error)
}
