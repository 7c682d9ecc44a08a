//! The rings: the index arithmetic, and the rings mapped from the socket.
use std::{
    io,
    mem::size_of,
    os::fd::{AsRawFd, BorrowedFd},
    ptr::{self, NonNull},
    sync::atomic::AtomicU32,
};

use anyhow::{Context, Result, anyhow, bail};

use super::{COMPLETION_ENTRIES, FILL_ENTRIES, RX_ENTRIES};

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
pub(super) struct Mapping {
    pub(super) addr: NonNull<libc::c_void>,
    pub(super) len: usize,
}

impl Mapping {
    /// Maps `len` bytes of `fd` at `offset`, or anonymous memory when `fd` is `None`.
    pub(super) fn new(
        len: usize,
        fd: Option<BorrowedFd<'_>>,
        offset: u64,
        what: &str,
    ) -> Result<Self> {
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
    pub(super) fn at<T>(&self, offset: u64) -> *mut T {
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
pub(super) struct MappedRing {
    map: Mapping,
    pub(super) ring: Ring,
    producer: u64,
    consumer: u64,
    desc: u64,
}

/// How the socket's rings are asked for and found: the option that sizes one, its entries, the
/// size of an entry and the page offset it is mapped at.
pub(super) struct RingSpec {
    pub(super) size_option: libc::c_int,
    pub(super) entries: u32,
    desc_size: usize,
    page_offset: u64,
    pub(super) what: &'static str,
}

impl RingSpec {
    /// A UMEM ring (fill, completion), whose entries are frame addresses.
    pub(super) const fn addresses(
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

pub(super) const RX_RING: RingSpec = RingSpec {
    size_option: libc::XDP_RX_RING,
    entries: RX_ENTRIES,
    desc_size: size_of::<libc::xdp_desc>(),
    page_offset: libc::XDP_PGOFF_RX_RING as u64,
    what: "the AF_XDP rx ring",
};
pub(super) const FILL_RING: RingSpec = RingSpec::addresses(
    libc::XDP_UMEM_FILL_RING,
    FILL_ENTRIES,
    libc::XDP_UMEM_PGOFF_FILL_RING,
    "the AF_XDP fill ring",
);
pub(super) const COMPLETION_RING: RingSpec = RingSpec::addresses(
    libc::XDP_UMEM_COMPLETION_RING,
    COMPLETION_ENTRIES,
    libc::XDP_UMEM_PGOFF_COMPLETION_RING,
    "the AF_XDP completion ring",
);

impl MappedRing {
    pub(super) fn map(
        fd: BorrowedFd<'_>,
        offsets: &libc::xdp_ring_offset,
        spec: &RingSpec,
    ) -> Result<Self> {
        let len = offsets.desc as usize + spec.entries as usize * spec.desc_size;
        Ok(Self {
            map: Mapping::new(len, Some(fd), spec.page_offset, spec.what)?,
            ring: Ring::new(spec.entries)?,
            producer: offsets.producer,
            consumer: offsets.consumer,
            desc: offsets.desc,
        })
    }

    pub(super) fn index(&self, offset: u64) -> &AtomicU32 {
        // SAFETY: the kernel places the u32 indices at these offsets, aligned, in the mapping;
        // the kernel writes them concurrently, which is what atomics are for; the reference
        // lives no longer than `self`, which owns the mapping.
        unsafe { AtomicU32::from_ptr(self.map.at(offset)) }
    }

    pub(super) fn producer(&self) -> &AtomicU32 {
        self.index(self.producer)
    }

    pub(super) fn consumer(&self) -> &AtomicU32 {
        self.index(self.consumer)
    }

    pub(super) fn desc<T>(&self, index: u32) -> *mut T {
        self.map
            .at(self.desc + (self.ring.slot(index) * size_of::<T>()) as u64)
    }
}
