//! The generator for kernels that refuse XDP live frames: one AF_PACKET socket on A's
//! interface, sending the prepared frame with `sendmmsg` in batches and bypassing the qdisc.
//!
//! The frames leave A's interface as A's own stack's would (`veth_xmit`, then the host veth's
//! receive path with its XDP or tc program), without A's sockets and IP output. They are slower
//! to make than live frames (one `sk_buff` each, built in this thread), so the offered rate is
//! lower; what the path does with them is counted the same way.
use std::{
    io,
    mem::{size_of, zeroed},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    ptr,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use super::programs::Offered;
use crate::{bench::measure, endpoint::Endpoint};

/// Frames per `sendmmsg` call.
const BATCH: usize = 64;

/// Calls between two looks at the clock and at Ctrl-C: about a millisecond of frames.
const CALLS_PER_CHECK: u32 = 16;

/// Sends `frame` out of A's interface for `limit`, from a thread inside A's namespace (where
/// the interface index is A's). Frames the interface refused to queue (`ENOBUFS` while its
/// queue is stopped) are not counted as offered; frames its driver dropped are counted by the
/// caller at A's interface.
pub(super) fn offer(a: &Endpoint, frame: &[u8], limit: Duration) -> Result<Offered> {
    let ifindex = a.ifindex;
    a.netns
        .run(|| {
            let socket = open(ifindex)?;
            send_for(&socket, frame, limit)
        })
        .with_context(|| {
            format!(
                "cannot send frames on {} ({}) from an AF_PACKET socket",
                a.label, a.ifname
            )
        })
}

/// A raw packet socket bound to `ifindex` for sending only (protocol 0 receives nothing), its
/// frames handed straight to the driver (`PACKET_QDISC_BYPASS`).
fn open(ifindex: u32) -> Result<OwnedFd> {
    // SAFETY: plain socket(2); the descriptor is owned right after.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error()).context("cannot open an AF_PACKET socket");
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(raw) };
    let bypass: libc::c_int = 1;
    // SAFETY: `bypass` is a live c_int and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            ptr::from_ref(&bypass).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error()).context("cannot set PACKET_QDISC_BYPASS");
    }
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value to fill in.
    let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = i32::try_from(ifindex).context("interface index out of range")?;
    // SAFETY: `addr` is a live sockaddr_ll and its size is passed.
    let rc = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            ptr::from_ref(&addr).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("cannot bind an AF_PACKET socket to interface {ifindex}"));
    }
    Ok(socket)
}

fn send_for(socket: &OwnedFd, frame: &[u8], limit: Duration) -> Result<Offered> {
    let mut iov = libc::iovec {
        iov_base: frame.as_ptr().cast_mut().cast(),
        iov_len: frame.len(),
    };
    // SAFETY: mmsghdr is plain data; all-zero is a valid value to fill in.
    let mut messages: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
    for m in &mut messages {
        // Every message sends the same frame (the kernel only reads it); no address: the
        // socket's binding names the interface.
        m.msg_hdr.msg_iov = &raw mut iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    let started = Instant::now();
    let mut frames = 0u64;
    while started.elapsed() < limit {
        measure::check_interrupted()?;
        for _ in 0..CALLS_PER_CHECK {
            // SAFETY: `messages` holds BATCH initialised headers whose iovec points to `frame`,
            // alive for the call.
            let sent = unsafe {
                libc::sendmmsg(
                    socket.as_raw_fd(),
                    messages.as_mut_ptr(),
                    BATCH as libc::c_uint,
                    0,
                )
            };
            if sent >= 0 {
                frames += sent as u64;
                continue;
            }
            let err = io::Error::last_os_error();
            // The driver stopped its queue (a veth whose peer's ring is full): try again.
            if err.raw_os_error() != Some(libc::ENOBUFS) {
                return Err(err).context("sendmmsg");
            }
            std::thread::yield_now();
        }
    }
    if frames == 0 {
        bail!("the interface took no frame in {limit:?}: is it down?");
    }
    Ok(Offered {
        frames,
        seconds: started.elapsed().as_secs_f64(),
    })
}
