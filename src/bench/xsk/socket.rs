//! The socket: its UMEM and rings set up, bound to a queue, and what the kernel counted at it.
use std::{
    io,
    mem::size_of,
    os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    ptr,
    sync::atomic::Ordering,
};

use anyhow::{Context, Result, bail};

use super::{
    FRAME_SIZE, FRAMES, POLL_MS,
    ring::{COMPLETION_RING, FILL_RING, MappedRing, Mapping, RX_RING},
    tally::{Expected, Tally},
};

/// What the kernel counted at the socket (`XDP_STATISTICS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketDrops {
    /// Frames the socket could not take: too long for a UMEM frame, or no buffer on the fill
    /// ring (the latter also counted in `fill_ring_empty`).
    pub rx_dropped: u64,
    /// Frames dropped because the rx ring was full: the application did not keep up.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub fill_ring_empty: u64,
}

/// An AF_XDP socket bound to one queue of an interface, with its UMEM and rings.
pub struct Socket {
    // Fields drop in order: the rings' mappings, then the socket, then the UMEM it used.
    rx: MappedRing,
    fill: MappedRing,
    _completion: MappedRing,
    fd: OwnedFd,
    umem: Mapping,
}

// SAFETY: the mappings are plain memory shared with the kernel, not with other threads of this
// process; one thread at a time uses a `Socket` (the reader takes it by value).
unsafe impl Send for Socket {}

fn setsockopt<T>(fd: BorrowedFd<'_>, name: libc::c_int, value: &T, what: &str) -> Result<()> {
    // SAFETY: `value` points to a live `T` of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            ptr::from_ref(value).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error()).with_context(|| format!("cannot set {what}"));
    }
    Ok(())
}

fn getsockopt<T: Default>(fd: BorrowedFd<'_>, name: libc::c_int, what: &str) -> Result<T> {
    let mut value = T::default();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a live `T` and `len` its size: the kernel writes at most that much.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            ptr::from_mut(&mut value).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error()).with_context(|| format!("cannot read {what}"));
    }
    if len as usize != size_of::<T>() {
        bail!(
            "{what}: the kernel answered {len} bytes, not {} (a kernel older than 5.9?)",
            size_of::<T>()
        );
    }
    Ok(value)
}

impl Socket {
    /// Opens a socket on queue `queue` of the interface `ifindex` of the calling thread's
    /// network namespace, with every UMEM frame on the fill ring.
    pub fn open(ifindex: u32, queue: u32) -> Result<Self> {
        // SAFETY: plain syscall; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error())
                .context("cannot create an AF_XDP socket (needs CONFIG_XDP_SOCKETS and root)");
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let umem_len = FRAMES as usize * FRAME_SIZE as usize;
        let umem = Mapping::new(umem_len, None, 0, "the AF_XDP UMEM")?;
        let reg = libc::xdp_umem_reg {
            addr: umem.addr.as_ptr() as u64,
            len: umem_len as u64,
            chunk_size: FRAME_SIZE,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(fd.as_fd(), libc::XDP_UMEM_REG, &reg, "the AF_XDP UMEM")?;
        for spec in [&FILL_RING, &COMPLETION_RING, &RX_RING] {
            let what = format!("the size of {}", spec.what);
            setsockopt(fd.as_fd(), spec.size_option, &spec.entries, &what)?;
        }
        let offsets: XdpMmapOffsets = getsockopt(
            fd.as_fd(),
            libc::XDP_MMAP_OFFSETS,
            "the AF_XDP ring offsets",
        )?;
        let offsets = offsets.0;
        let rx = MappedRing::map(fd.as_fd(), &offsets.rx, &RX_RING)?;
        let fill = MappedRing::map(fd.as_fd(), &offsets.fr, &FILL_RING)?;
        let completion = MappedRing::map(fd.as_fd(), &offsets.cr, &COMPLETION_RING)?;

        // Every frame to the kernel before bind: it takes buffers from the fill ring as frames
        // arrive.
        let producer = fill.producer().load(Ordering::Relaxed);
        for i in 0..FRAMES {
            // SAFETY: the slot is inside the fill ring, and the kernel reads it only after the
            // producer index below is published.
            unsafe {
                fill.desc::<u64>(producer.wrapping_add(i))
                    .write(u64::from(i * FRAME_SIZE));
            }
        }
        fill.producer()
            .store(producer.wrapping_add(FRAMES), Ordering::Release);

        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_COPY,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: `addr` is a live sockaddr_xdp of the size passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                ptr::from_ref(&addr).cast(),
                size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error()).with_context(|| {
                format!(
                    "cannot bind an AF_XDP socket to queue {queue} of interface {ifindex} in copy \
                     mode"
                )
            });
        }
        Ok(Self {
            rx,
            fill,
            _completion: completion,
            fd,
            umem,
        })
    }

    /// The socket, for the XskMap.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The kernel's counts of what it could not deliver to this socket.
    pub fn drops(&self) -> Result<SocketDrops> {
        let stats: XdpStatistics = getsockopt(
            self.fd.as_fd(),
            libc::XDP_STATISTICS,
            "the AF_XDP socket's statistics",
        )?;
        let stats = stats.0;
        Ok(SocketDrops {
            rx_dropped: stats.rx_dropped,
            rx_ring_full: stats.rx_ring_full,
            fill_ring_empty: stats.rx_fill_ring_empty_descs,
        })
    }

    /// Reads what the rx ring holds, counts it into `tally`, and gives the frames back on the
    /// fill ring. Returns the frames read.
    pub(super) fn receive(&self, expected: &Expected, tally: &mut Tally) -> u32 {
        let rx_producer = self.rx.producer().load(Ordering::Acquire);
        let rx_consumer = self.rx.consumer().load(Ordering::Relaxed);
        let fill_producer = self.fill.producer().load(Ordering::Relaxed);
        let fill_consumer = self.fill.consumer().load(Ordering::Acquire);
        let n = self
            .rx
            .ring
            .filled(rx_producer, rx_consumer)
            .min(self.fill.ring.free(fill_producer, fill_consumer));
        for i in 0..n {
            // SAFETY: slots below the rx producer index read with acquire ordering hold
            // descriptors the kernel has written, and their frames are the application's until
            // they are back on the fill ring, which happens only at the release store below; the
            // fill slots are free (below the consumer's index plus the ring's size).
            unsafe {
                let desc = self
                    .rx
                    .desc::<libc::xdp_desc>(rx_consumer.wrapping_add(i))
                    .read();
                // The kernel wrote the frame before the descriptor, and leaves it alone until
                // the frame is back on the fill ring; a descriptor outside the UMEM is the
                // kernel's bug, and counted as not ours rather than read.
                let frame = self.umem_frame(desc.addr, desc.len);
                tally.count(expected, frame);
                // The address points past the kernel's headroom; the fill ring takes the frame's
                // start (aligned mode masks it anyway).
                self.fill
                    .desc::<u64>(fill_producer.wrapping_add(i))
                    .write(desc.addr & !u64::from(FRAME_SIZE - 1));
            }
        }
        if n > 0 {
            self.fill
                .producer()
                .store(fill_producer.wrapping_add(n), Ordering::Release);
            self.rx
                .consumer()
                .store(rx_consumer.wrapping_add(n), Ordering::Release);
        }
        n
    }

    /// The bytes of a received frame, if the descriptor lies inside the UMEM.
    ///
    /// # Safety
    /// The descriptor must come from the rx ring and its frame not be back on the fill ring.
    unsafe fn umem_frame(&self, addr: u64, len: u32) -> Option<&[u8]> {
        let end = addr.checked_add(u64::from(len))?;
        if addr >= self.umem.len as u64 || end > self.umem.len as u64 {
            return None;
        }
        // SAFETY: inside the UMEM mapping (checked above); the kernel does not write a frame it
        // has handed to the rx ring until the application gives it back (the caller's promise).
        Some(unsafe { std::slice::from_raw_parts(self.umem.at::<u8>(addr), len as usize) })
    }

    /// Waits up to [`POLL_MS`] for the rx ring to hold something.
    pub(super) fn wait(&self) -> Result<()> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, as the count says.
        let rc = unsafe { libc::poll(&mut pfd, 1, POLL_MS) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err).context("cannot poll the AF_XDP socket");
            }
        }
        Ok(())
    }
}

/// `xdp_mmap_offsets` and `xdp_statistics` with the `Default` that [`getsockopt`] needs.
#[repr(transparent)]
struct XdpMmapOffsets(libc::xdp_mmap_offsets);

impl Default for XdpMmapOffsets {
    fn default() -> Self {
        // SAFETY: a struct of integers, for which all zeroes is a valid value.
        Self(unsafe { std::mem::zeroed() })
    }
}

#[repr(transparent)]
struct XdpStatistics(libc::xdp_statistics);

impl Default for XdpStatistics {
    fn default() -> Self {
        // SAFETY: a struct of integers, for which all zeroes is a valid value.
        Self(unsafe { std::mem::zeroed() })
    }
}
