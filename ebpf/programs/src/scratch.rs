//! The buffers of a checksum's sum (`checksum`), in a per-CPU map of each object that sums
//! (`maps::SCRATCH`, egress's own): too big for the programs' 512-byte stacks. A room of its
//! own so that the maps and the sum both take it without taking each other.

/// What a scratch map of a summing object holds.
#[repr(C)]
pub struct Scratch {
    /// Bytes of a packet being summed.
    pub(crate) words: [u32; 16],
    /// An IPv6 pseudo-header (an IPv4 one uses the first three words).
    pub(crate) pseudo: [u32; 10],
}
