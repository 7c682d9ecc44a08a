//! The connection tables of exposed ports and the two ends of the fast path they feed: what
//! the NIC's packets, the container's replies, their fragments and the ICMP errors about them
//! all look up, and how a packet enters the container or leaves through the NIC.
use aya_ebpf::{
    bindings::{TC_ACT_SHOT, bpf_fib_lookup},
    helpers::generated::{bpf_ktime_get_ns, bpf_redirect_neigh, bpf_redirect_peer},
    programs::TcContext,
};
use dxdp_common::ingress::{Flow, FlowKey, Opening, PortKey, PortTarget, RESET_KEPT_NS};

use crate::{
    fib,
    headers::{PACKET_HOST, PROTO_UDP},
    maps::{FLOWS, OPENING, PORTS, RESET_FLOWS, UDP_FLOWS},
};

/// A connection in the tables, by the table it is in.
#[derive(Clone, Copy)]
pub(crate) enum Known {
    /// A TCP connection in `DXDP_FLOWS`.
    Established(*mut Flow),
    /// A TCP connection in `DXDP_OPENING`.
    Opening(*mut Opening),
    /// A UDP flow in `DXDP_UDP_FLOWS`.
    Udp(*mut Flow),
}

impl Known {
    /// The part every table's entry has: the port and when it was last seen.
    #[inline(always)]
    fn flow(self) -> *mut Flow {
        match self {
            Self::Established(flow) | Self::Udp(flow) => flow,
            // SAFETY: a map value pointer, valid for this invocation; no reference is made.
            Self::Opening(opening) => unsafe { core::ptr::addr_of_mut!((*opening).flow) },
        }
    }

    /// The exposed port the connection was let in through.
    #[inline(always)]
    pub(crate) fn port(self) -> PortKey {
        // SAFETY: a map value pointer, valid for this invocation; the key is copied out.
        unsafe { (*self.flow()).port }
    }

    /// Records that the connection carried a packet now.
    #[inline(always)]
    pub(crate) fn touch(self) {
        // SAFETY: a map value pointer, valid for this invocation; a plain store.
        unsafe { (*self.flow()).last_seen_ns = now() };
    }

    /// Removes the connection `flow` (this one's key), which an RST closed, from its table, and
    /// keeps its port for the ICMP errors about it ([`reset_port`]).
    #[inline(always)]
    pub(crate) fn reset(self, flow: FlowKey) {
        let port = self.port();
        self.forget(flow);
        let closed = Flow {
            port,
            last_seen_ns: now(),
        };
        let _ = RESET_FLOWS.insert(flow, closed, 0);
    }

    /// Removes the connection `flow` (this one's key) from its table.
    #[inline(always)]
    pub(crate) fn forget(self, flow: FlowKey) {
        let _ = match self {
            Self::Established(_) => FLOWS.remove(flow),
            Self::Opening(_) => OPENING.remove(flow),
            Self::Udp(_) => UDP_FLOWS.remove(flow),
        };
    }
}

/// The connection `flow`, in the table its protocol and state put it in; `None` if the fast
/// path did not let it in (or forgot it).
#[inline(always)]
pub(crate) fn known_flow(flow: FlowKey) -> Option<Known> {
    if flow.proto == PROTO_UDP {
        return UDP_FLOWS.get_ptr_mut(flow).map(Known::Udp);
    }
    if let Some(established) = FLOWS.get_ptr_mut(flow) {
        return Some(Known::Established(established));
    }
    OPENING.get_ptr_mut(flow).map(Known::Opening)
}

/// The port the TCP connection `flow` came in through, if an RST closed it within the last
/// `RESET_KEPT_NS` ([`Known::reset`]).
#[inline(always)]
pub(crate) fn reset_port(flow: FlowKey) -> Option<PortKey> {
    let closed = RESET_FLOWS.get_ptr(flow)?;
    // SAFETY: a map value pointer, valid for this invocation; plain loads.
    let (port, at) = unsafe { ((*closed).port, (*closed).last_seen_ns) };
    (now().wrapping_sub(at) < RESET_KEPT_NS).then_some(port)
}

/// The exposed port at `published` (address, port) for `proto` on the NIC, and the key of
/// `client`'s connection to its container; `None` if nothing is exposed there.
#[inline(always)]
pub(crate) fn exposed(
    nic_ifindex: u32,
    proto: u8,
    published: End<'_>,
    client: End<'_>,
) -> Option<(PortKey, &'static mut PortTarget, FlowKey)> {
    let key = PortKey {
        nic_ifindex,
        port: published.1,
        proto,
        _pad: 0,
        addr: *published.0,
    };
    let target = PORTS.get_ptr_mut(key)?;
    // SAFETY: this CPU's copy of the value, valid for this invocation; nothing else writes it.
    let target = unsafe { &mut *target };
    let flow = FlowKey::new(
        target.veth_ifindex,
        proto,
        (target.addr, target.port),
        (*client.0, client.1),
    );
    Some((key, target, flow))
}

/// Whether the frame arrived as the host's to route: addressed to the receiving device's own
/// MAC (not broadcast, multicast or another host's: `pkt_type`), and without a VLAN tag (which
/// the kernel takes off the frame before tc runs, into `vlan_tci`, and which no container
/// network carries). The stack forwards nothing else to a container.
#[inline(always)]
pub(crate) fn for_this_host(ctx: &TcContext) -> bool {
    // SAFETY: the verifier guarantees ctx.skb.skb points at a valid __sk_buff for this call.
    let (pkt_type, vlan_present) =
        unsafe { ((*ctx.skb.skb).pkt_type, (*ctx.skb.skb).vlan_present) };
    pkt_type == PACKET_HOST && vlan_present == 0
}

/// A packet `translated` for `target`'s container gets the container's MAC as destination and
/// the bridge's as source (what the bridge would have delivered), is counted, and goes into the
/// container's namespace.
#[inline(always)]
pub(crate) fn into_container(
    ctx: &TcContext,
    target: &mut PortTarget,
    translated: Result<(), i64>,
) -> i32 {
    let mut macs = [0u8; 12];
    macs[..6].copy_from_slice(&target.mac);
    macs[6..].copy_from_slice(&target.gateway_mac);
    if translated.is_err() || ctx.store(0, &macs, 0).is_err() {
        // Half rewritten (the helpers fail only on memory pressure): a frame that cannot be
        // delivered as translated must not reach the stack either.
        return TC_ACT_SHOT;
    }
    target.in_packets += 1;
    target.in_bytes += ctx.len() as u64;
    // SAFETY: a plain helper call; it only records the target in per-CPU redirect info.
    unsafe { bpf_redirect_peer(target.veth_ifindex, 0) as i32 }
}

/// A packet from `veth_ifindex`'s container `translated` to be from the published `port` is
/// counted (where the port still leads to that veth) and leaves through the port's NIC.
#[inline(always)]
pub(crate) fn out_of_nic(
    ctx: &TcContext,
    port: &PortKey,
    target: Option<*mut PortTarget>,
    veth_ifindex: u32,
    translated: Result<(), i64>,
) -> i32 {
    if translated.is_err() {
        return TC_ACT_SHOT;
    }
    if let Some(target) = target {
        // SAFETY: this CPU's copy of the value; nothing else writes it now.
        let target = unsafe { &mut *target };
        // Counted where the port still leads here (not while its connections drain).
        if target.veth_ifindex == veth_ifindex {
            target.out_packets += 1;
            target.out_bytes += ctx.len() as u64;
        }
    }
    // SAFETY: a plain helper call; a null neighbour means "look the next hop up in the FIB".
    unsafe { bpf_redirect_neigh(port.nic_ifindex, core::ptr::null_mut(), 0, 0) as i32 }
}

#[inline(always)]
pub(crate) fn now() -> u64 {
    // SAFETY: a plain helper call.
    unsafe { bpf_ktime_get_ns() }
}

/// One end of a packet as the route check reads it: address (16 bytes, IPv4 v4-mapped) and
/// port (0 where the protocol has none). The address by reference: copied by value, its bytes
/// took a stack slot each.
pub(crate) type End<'a> = (&'a [u8; 16], u16);

/// Whether the host routes `remote` (a packet's source, that arrived on `nic_ifindex` for
/// `local`) back out of that NIC, as a unicast route: only then can the replies leave there,
/// as the stack would send them, and only then does the stack take the source as one the NIC
/// may carry (the host's own addresses and those behind other interfaces, a container's among
/// them, are not: the lookup finds a local route or another device).
#[inline(always)]
pub(crate) fn routes_back(
    ctx: &TcContext,
    params: &mut bpf_fib_lookup,
    v6: bool,
    proto: u8,
    local: End<'_>,
    remote: End<'_>,
    nic_ifindex: u32,
) -> bool {
    fib::ask(params, v6, local.0, remote.0, nic_ifindex);
    params.l4_protocol = proto;
    params.sport = local.1.to_be();
    params.dport = remote.1.to_be();
    let rc = fib::lookup(ctx, params);
    rc == 0 && params.ifindex == nic_ifindex
}
