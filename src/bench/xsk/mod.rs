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
mod reader;
mod ring;
mod socket;
mod tally;
#[cfg(test)]
mod tests;

pub use reader::{Reader, Stopped};
pub use ring::Ring;
pub use socket::{Socket, SocketDrops};
pub use tally::{Expected, Tally};

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
