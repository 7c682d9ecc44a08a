//! The pinned maps, which userspace owns the contents of (the programs only read them and
//! count), and one scratch map of the programs' own.
use aya_ebpf::{
    macros::map,
    maps::{Array, DevMapHash, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, ProgramArray},
};
use dxdp_common::{
    Counters, DEFAULT_MAX_ENDPOINTS, DEFAULT_MAX_LINKS, Endpoint, LinkKey, LinkMeta, LinkMetaKey,
    LinkTarget, Meta, Sources, TunnelPeerKey,
    ingress::{
        DEFAULT_MAX_FLOWS, DEFAULT_MAX_PORTS, DEFAULT_MAX_REPLY_FRAGMENTS, DEFAULT_MAX_RESET_FLOWS,
        Flow, FlowKey, FragmentKey, ICMP_ERROR_PROGRAMS, Opening, PortKey, PortOwner, PortTarget,
        side_table_size,
    },
};

use crate::scratch::Scratch;

/// Managed host-side veths by ifindex, with the MAC their container may send from.
#[map(name = "DXDP_ENDPOINTS")]
pub static ENDPOINTS: HashMap<u32, Endpoint> = HashMap::pinned(DEFAULT_MAX_ENDPOINTS, 0);

/// Managed host-side veths by ifindex, with the addresses their container may send from.
#[map(name = "DXDP_SOURCES")]
pub static SOURCES: HashMap<u32, Sources> = HashMap::pinned(DEFAULT_MAX_ENDPOINTS, 0);

/// (ingress ifindex, destination MAC) -> target host-side veth ifindex and per-CPU counters.
#[map(name = "DXDP_LINKS")]
pub static LINKS: PerCpuHashMap<LinkKey, LinkTarget> = PerCpuHashMap::pinned(DEFAULT_MAX_LINKS, 0);

/// Tasks of other nodes linked across an overlay's VXLAN device, by the device and their MAC:
/// their endpoint id (`dxdp_common::REMOTE_ENDPOINT_BASE` on), which keys the maps above as a
/// host veth's ifindex does.
#[map(name = "DXDP_TUNNEL_PEERS")]
pub static TUNNEL_PEERS: HashMap<TunnelPeerKey, u32> = HashMap::pinned(DEFAULT_MAX_ENDPOINTS, 0);

/// Live targets: the kernel deletes an entry itself when its device is unregistered, so a link
/// to a dead veth falls back to the bridge instead of dropping or reaching a reused ifindex. A
/// host veth's entry is its own ifindex; a task of another node's (its id) is the VXLAN device
/// its frames leave by.
#[map(name = "DXDP_TARGETS")]
pub static TARGETS: DevMapHash = DevMapHash::pinned(DEFAULT_MAX_ENDPOINTS, 0);

#[map(name = "DXDP_COUNTERS")]
pub static COUNTERS: PerCpuHashMap<u32, Counters> = PerCpuHashMap::pinned(DEFAULT_MAX_ENDPOINTS, 0);

/// Userspace bookkeeping kept beside the datapath so that pinned state is the only state.
#[map(name = "DXDP_LINK_META")]
pub static LINK_META: HashMap<LinkMetaKey, LinkMeta> = HashMap::pinned(DEFAULT_MAX_LINKS, 0);

#[map(name = "DXDP_META")]
pub static META: Array<Meta> = Array::pinned(1, 0);

/// Exposed ports (`dxdp expose`): (NIC, address, protocol, port) -> the container's address and
/// port, and per-CPU counters.
#[map(name = "DXDP_PORTS")]
pub static PORTS: PerCpuHashMap<PortKey, PortTarget> = PerCpuHashMap::pinned(DEFAULT_MAX_PORTS, 0);

/// TCP connections let in through an exposed port, by their replies' addresses, once the
/// client acknowledged the container's SYN-ACK. Only the replies of connections in these
/// three tables are translated back and sent out of the NIC.
#[map(name = "DXDP_FLOWS")]
pub static FLOWS: LruHashMap<FlowKey, Flow> = LruHashMap::pinned(DEFAULT_MAX_FLOWS, 0);

/// TCP connections let in through an exposed port whose client has not completed the handshake
/// (`Opening`): apart from `FLOWS`, so that forged SYNs never push out an established
/// connection.
#[map(name = "DXDP_OPENING")]
pub static OPENING: LruHashMap<FlowKey, Opening> =
    LruHashMap::pinned(side_table_size(DEFAULT_MAX_FLOWS), 0);

/// UDP flows let in through an exposed port: apart from `FLOWS`, as nothing tells a forged
/// UDP client from a real one.
#[map(name = "DXDP_UDP_FLOWS")]
pub static UDP_FLOWS: LruHashMap<FlowKey, Flow> =
    LruHashMap::pinned(side_table_size(DEFAULT_MAX_FLOWS), 0);

/// TCP connections an RST closed (carried into the container, or from it), with the port they
/// came in through and when: for conntrack's CLOSE timeout Docker's path still translates the
/// ICMP errors that quote them (a container's "parameter problem" about an RST that came as a
/// first fragment: the exposed differential topology's seed 2718, case 544). Nothing else of
/// theirs takes the fast path: their next packets are judged afresh, as before.
#[map(name = "DXDP_RESET_FLOWS")]
pub static RESET_FLOWS: LruHashMap<FlowKey, Flow> = LruHashMap::pinned(DEFAULT_MAX_RESET_FLOWS, 0);

/// Host veths of exposed containers that are alive: as `DXDP_TARGETS` for links, the kernel
/// deletes an entry when its device goes, so a port whose container stopped passes to the stack.
#[map(name = "DXDP_PORT_VETHS")]
pub static PORT_VETHS: DevMapHash = DevMapHash::pinned(DEFAULT_MAX_PORTS, 0);

/// Who exposed each container (by host veth): userspace's bookkeeping, beside the datapath.
#[map(name = "DXDP_PORT_OWNERS")]
pub static PORT_OWNERS: HashMap<u32, PortOwner> = HashMap::pinned(DEFAULT_MAX_PORTS, 0);

/// Fragmented datagrams the containers of exposed ports are sending over fast-path
/// connections, by what their fragments share, with the published port the first fragment's
/// connection was let in through (see `fragments`). A record lives from a datagram's first
/// fragment to its last.
#[map(name = "DXDP_REPLY_FRAGMENTS")]
pub static REPLY_FRAGMENTS: LruHashMap<FragmentKey, PortKey> =
    LruHashMap::pinned(DEFAULT_MAX_REPLY_FRAGMENTS, 0);

/// The programs the published ports' programs hand ICMP errors to (`bpf_tail_call`), each with a
/// stack frame of its own: parsing an error's options and extension headers did not fit in the
/// frame `dxdp_ingress` already uses. Pinned, because the kernel empties a program array once no
/// file or pin holds it, and the one-shot commands exit after attaching.
#[map(name = "DXDP_ICMP_ERRORS")]
pub static ICMP_ERRORS: ProgramArray = ProgramArray::pinned(ICMP_ERROR_PROGRAMS, 0);

/// Buffers too big for the programs' 512-byte stacks (see `checksum`): each CPU's own, used
/// within one invocation. Not pinned: nothing outlives the invocation.
#[map(name = "DXDP_SCRATCH")]
pub static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);
