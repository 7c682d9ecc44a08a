//! A minimal AF_XDP receiver for `dxdp bench --pps`: one socket in copy mode on one queue of an
//! interface, with the application reading every frame the kernel puts in its rx ring.
//!
//! No libbpf/libxdp: the socket is set up with the kernel's own interface
//! (`include/uapi/linux/if_xdp.h`, whose structures and constants `libc` carries) as the kernel's
//! selftests (`tools/testing/selftests/bpf/xsk.c`) do it:
//! - the UMEM, an anonymous mapping of [`FRAMES`] frames of [`FRAME_SIZE`] bytes, registered with
//!   `XDP_UMEM_REG`;
//! - the fill, completion and rx rings sized with `setsockopt`, located with
//!   `XDP_MMAP_OFFSETS` and mapped from the socket at their page offsets;
//! - every frame handed to the kernel on the fill ring, then `bind` to (ifindex, queue) with
//!   `XDP_COPY` (veth has no zero-copy mode).
//!
//! The rings are single-producer single-consumer queues of free-running `u32` indices: a side
//! reads the other side's index with acquire ordering (the entries it covers are then visible)
//! and publishes its own with release ordering (after its entries are written). [`Ring`] holds
//! that arithmetic.
//!
//! The reader returns each frame to the fill ring as soon as it has counted it, so the kernel
//! always has buffers; what it could not deliver anyway it counts in `XDP_STATISTICS`.
use std::{
    io,
    mem::size_of,
    os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    ptr::{self, NonNull},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
    thread::{self, JoinHandle},
};

use anyhow::{Context, Result, anyhow, bail};

/// Frames in the UMEM.
pub const FRAMES: u32 = 4096;
/// Bytes per UMEM frame. The kernel keeps `XDP_PACKET_HEADROOM` (256) of each, so a frame of up
/// to 1792 bytes fits: a full 1500 B frame does.
pub const FRAME_SIZE: u32 = 2048;
/// The rx ring: as many descriptors as there are frames.
const RX_ENTRIES: u32 = FRAMES;
/// The fill ring has room for every frame twice: the kernel publishes its consumer index at each
/// flush, so slots it has already read may still look taken; with twice the room, the reader can
/// always give back every frame it has read.
const FILL_ENTRIES: u32 = 2 * FRAMES;
/// Nothing is sent, but bind refuses a UMEM without a completion ring.
const COMPLETION_ENTRIES: u32 = 64;

// The fill ring takes back every frame; a frame, past the kernel's 256 B of headroom, holds a
// full frame at MTU 1500 (1514 B with its Ethernet header).
const _: () = assert!(FILL_ENTRIES >= 2 * FRAMES && FILL_ENTRIES.is_power_of_two());
const _: () = assert!(RX_ENTRIES.is_power_of_two() && FRAME_SIZE.is_power_of_two());
const _: () = assert!(FRAME_SIZE - 256 >= 1514);

/// How long the reader sleeps in `poll` on an empty ring before it looks at its stop flag.
const POLL_MS: i32 = 20;

/// The arithmetic of one ring: free-running `u32` producer and consumer indices over a power of
/// two entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    entries: u32,
}

impl Ring {
    pub fn new(entries: u32) -> Result<Self> {
        if !entries.is_power_of_two() {
            bail!("an AF_XDP ring needs a power of two entries, not {entries}");
        }
        Ok(Self { entries })
    }

    /// Entries the producer has published and the consumer not yet read.
    pub fn filled(self, producer: u32, consumer: u32) -> u32 {
        producer.wrapping_sub(consumer)
    }

    /// Entries the producer may still write.
    pub fn free(self, producer: u32, consumer: u32) -> u32 {
        self.entries - self.filled(producer, consumer)
    }

    /// The slot of a free-running index.
    pub fn slot(self, index: u32) -> usize {
        (index & (self.entries - 1)) as usize
    }
}

/// A shared mapping, unmapped when dropped.
struct Mapping {
    addr: NonNull<libc::c_void>,
    len: usize,
}

impl Mapping {
    /// Maps `len` bytes of `fd` at `offset`, or anonymous memory when `fd` is `None`.
    fn new(len: usize, fd: Option<BorrowedFd<'_>>, offset: u64, what: &str) -> Result<Self> {
        let (flags, raw_fd) = match fd {
            Some(fd) => (libc::MAP_SHARED | libc::MAP_POPULATE, fd.as_raw_fd()),
            None => (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
            ),
        };
        let offset = libc::off_t::try_from(offset)?;
        // SAFETY: a new mapping at an address the kernel picks overlaps no Rust object; the
        // result is checked before use.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                raw_fd,
                offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error()).with_context(|| format!("cannot map {what}"));
        }
        let addr = NonNull::new(addr).ok_or_else(|| anyhow!("mmap of {what} returned null"))?;
        Ok(Self { addr, len })
    }

    /// A pointer to a `T` at `offset`; panics rather than point outside the mapping.
    fn at<T>(&self, offset: u64) -> *mut T {
        let end = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(size_of::<T>()));
        assert!(
            end.is_some_and(|end| end <= self.len),
            "offset {offset} is outside a mapping of {} bytes",
            self.len
        );
        // SAFETY: inside the mapping's `len` bytes (asserted above).
        unsafe { self.addr.as_ptr().cast::<u8>().add(offset as usize).cast() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `Mapping::new` with this length and nothing refers to
        // it any more (the ring views borrow it).
        unsafe {
            libc::munmap(self.addr.as_ptr(), self.len);
        }
    }
}

/// One mapped ring: its indices and its descriptors.
struct MappedRing {
    map: Mapping,
    ring: Ring,
    producer: u64,
    consumer: u64,
    desc: u64,
}

/// How the socket's rings are asked for and found: the option that sizes one, its entries, the
/// size of an entry and the page offset it is mapped at.
struct RingSpec {
    size_option: libc::c_int,
    entries: u32,
    desc_size: usize,
    page_offset: u64,
    what: &'static str,
}

impl RingSpec {
    /// A UMEM ring (fill, completion), whose entries are frame addresses.
    const fn addresses(
        size_option: libc::c_int,
        entries: u32,
        page_offset: u64,
        what: &'static str,
    ) -> Self {
        Self {
            size_option,
            entries,
            desc_size: size_of::<u64>(),
            page_offset,
            what,
        }
    }
}

const RX_RING: RingSpec = RingSpec {
    size_option: libc::XDP_RX_RING,
    entries: RX_ENTRIES,
    desc_size: size_of::<libc::xdp_desc>(),
    page_offset: libc::XDP_PGOFF_RX_RING as u64,
    what: "the AF_XDP rx ring",
};
const FILL_RING: RingSpec = RingSpec::addresses(
    libc::XDP_UMEM_FILL_RING,
    FILL_ENTRIES,
    libc::XDP_UMEM_PGOFF_FILL_RING,
    "the AF_XDP fill ring",
);
const COMPLETION_RING: RingSpec = RingSpec::addresses(
    libc::XDP_UMEM_COMPLETION_RING,
    COMPLETION_ENTRIES,
    libc::XDP_UMEM_PGOFF_COMPLETION_RING,
    "the AF_XDP completion ring",
);

impl MappedRing {
    fn map(fd: BorrowedFd<'_>, offsets: &libc::xdp_ring_offset, spec: &RingSpec) -> Result<Self> {
        let len = offsets.desc as usize + spec.entries as usize * spec.desc_size;
        Ok(Self {
            map: Mapping::new(len, Some(fd), spec.page_offset, spec.what)?,
            ring: Ring::new(spec.entries)?,
            producer: offsets.producer,
            consumer: offsets.consumer,
            desc: offsets.desc,
        })
    }

    fn index(&self, offset: u64) -> &AtomicU32 {
        // SAFETY: the kernel places the u32 indices at these offsets, aligned, in the mapping;
        // the kernel writes them concurrently, which is what atomics are for; the reference
        // lives no longer than `self`, which owns the mapping.
        unsafe { AtomicU32::from_ptr(self.map.at(offset)) }
    }

    fn producer(&self) -> &AtomicU32 {
        self.index(self.producer)
    }

    fn consumer(&self) -> &AtomicU32 {
        self.index(self.consumer)
    }

    fn desc<T>(&self, index: u32) -> *mut T {
        self.map
            .at(self.desc + (self.ring.slot(index) * size_of::<T>()) as u64)
    }
}

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
    fn receive(&self, expected: &Expected, tally: &mut Tally) -> u32 {
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
    fn wait(&self) -> Result<()> {
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

/// The frames the application counts as the measured flow's: this length, starting with these
/// bytes (the bench sends one frame over and over, so its headers are all alike).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    pub len: usize,
    pub start: Vec<u8>,
}

impl Expected {
    /// Frames like `frame`, compared on its first `header` bytes.
    pub fn like(frame: &[u8], header: usize) -> Self {
        Self {
            len: frame.len(),
            start: frame[..header.min(frame.len())].to_vec(),
        }
    }

    pub fn matches(&self, frame: &[u8]) -> bool {
        frame.len() == self.len && frame.starts_with(&self.start)
    }
}

/// What the application read: the flow's frames and bytes, and any other frame that reached
/// the socket (B's own traffic, say an ARP answer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub frames: u64,
    pub bytes: u64,
    pub other: u64,
}

impl Tally {
    fn count(&mut self, expected: &Expected, frame: Option<&[u8]>) {
        match frame {
            Some(f) if expected.matches(f) => {
                self.frames += 1;
                self.bytes += f.len() as u64;
            }
            _ => self.other += 1,
        }
    }
}

/// The reader's tally, shared with the bench's thread.
#[derive(Debug, Default)]
struct Counts {
    frames: AtomicU64,
    bytes: AtomicU64,
    other: AtomicU64,
}

impl Counts {
    fn publish(&self, tally: &Tally) {
        self.frames.store(tally.frames, Ordering::Relaxed);
        self.bytes.store(tally.bytes, Ordering::Relaxed);
        self.other.store(tally.other, Ordering::Relaxed);
    }

    fn read(&self) -> Tally {
        Tally {
            frames: self.frames.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
        }
    }
}

/// What the application read in all, and what the kernel could not give it.
#[derive(Clone, Copy, Debug)]
pub struct Stopped {
    pub read: Tally,
    pub drops: SocketDrops,
}

/// The application: a thread reading a [`Socket`] until stopped.
pub struct Reader {
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Socket>>>,
}

impl Reader {
    /// Starts reading `socket` on a thread of its own (the socket works from any namespace),
    /// counting the frames like `expected` apart from the others.
    pub fn start(socket: Socket, expected: Expected) -> Result<Self> {
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = thread::Builder::new()
            .name("dxdp-xsk-reader".to_owned())
            .spawn({
                let (counts, stop) = (counts.clone(), stop.clone());
                move || {
                    let mut tally = Tally::default();
                    loop {
                        if socket.receive(&expected, &mut tally) > 0 {
                            counts.publish(&tally);
                        } else if stop.load(Ordering::Relaxed) {
                            return Ok(socket);
                        } else {
                            socket.wait()?;
                        }
                    }
                }
            })
            .context("cannot start the AF_XDP reader thread")?;
        Ok(Self {
            counts,
            stop,
            thread: Some(thread),
        })
    }

    /// What the application has read so far.
    pub fn read(&self) -> Tally {
        self.counts.read()
    }

    /// Stops the thread once the ring is empty, and closes the socket.
    pub fn stop(mut self) -> Result<Stopped> {
        let socket = self.join()?;
        Ok(Stopped {
            read: self.read(),
            drops: socket.drops()?,
        })
    }

    fn join(&mut self) -> Result<Socket> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self
            .thread
            .take()
            .ok_or_else(|| anyhow!("the AF_XDP reader was already stopped"))?;
        thread
            .join()
            .map_err(|_| anyhow!("the AF_XDP reader thread panicked"))?
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if self.thread.is_some()
            && let Err(err) = self.join()
        {
            eprintln!("dxdp: error: the bench's AF_XDP reader: {err:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_indices_run_free_and_wrap() {
        let ring = Ring::new(8).unwrap();
        assert_eq!(ring.filled(5, 2), 3);
        assert_eq!(ring.free(5, 2), 5);
        assert_eq!(ring.free(10, 2), 0);
        // The producer has wrapped past u32::MAX and the consumer not yet.
        assert_eq!(ring.filled(2, u32::MAX - 1), 4);
        assert_eq!(ring.free(2, u32::MAX - 1), 4);
        assert_eq!(ring.slot(9), 1);
        assert_eq!(ring.slot(u32::MAX), 7);
        assert_eq!(ring.slot(u32::MAX.wrapping_add(1)), 0);
        assert!(Ring::new(6).is_err());
        assert!(Ring::new(0).is_err());
    }

    #[test]
    fn only_frames_like_the_flows_count_as_its() {
        let sent = [1u8, 2, 3, 4, 9, 9];
        let expected = Expected::like(&sent, 4);
        let mut tally = Tally::default();
        tally.count(&expected, Some(&sent));
        tally.count(&expected, Some(&[1, 2, 3, 4, 0, 0]));
        tally.count(&expected, Some(&[1, 2, 3, 5, 9, 9]));
        tally.count(&expected, Some(&[1, 2, 3, 4, 9]));
        tally.count(&expected, None);
        assert_eq!(
            tally,
            Tally {
                frames: 2,
                bytes: 12,
                other: 3
            }
        );
        assert!(Expected::like(&[1, 2], 4).matches(&[1, 2]));
    }
}
