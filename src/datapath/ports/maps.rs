//! The pinned maps of exposed ports, read and written entry by entry: the ports, the
//! connection tables, the veths the replies leave by, and who owns each exposure.
use std::{net::IpAddr, time::Duration};

use anyhow::{Context, Result};
use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuHashMap, xdp::DevMapHash},
};
use dxdp_common::{
    FIREWALL_BYPASSED,
    ingress::{
        Flow, FlowKey, Opening, PROTO_TCP, PROTO_UDP, PortKey, PortOwner, PortTarget, names,
    },
    tcp_window::TcpWindow,
};

use super::{ExposedPort, Exposure, PortMapping};
use crate::datapath::{
    Origin, Traffic,
    record::unfixed_name,
    state::{absent_is_none, ignore_absent, missing},
};

pub(super) struct PortMaps<'a> {
    pub(super) ports: PerCpuHashMap<&'a mut MapData, PortKey, PortTarget>,
    pub(super) flows: HashMap<&'a mut MapData, FlowKey, Flow>,
    pub(super) opening: HashMap<&'a mut MapData, FlowKey, Opening>,
    pub(super) udp_flows: HashMap<&'a mut MapData, FlowKey, Flow>,
    pub(super) veths: DevMapHash<&'a mut MapData>,
    pub(super) owners: HashMap<&'a mut MapData, u32, PortOwner>,
    /// The programs' copies of the TCP connections' windows (`DXDP_TCP_WINDOWS`), and of
    /// those being opened (`DXDP_TCP_OPENING_WINDOWS`).
    pub(super) windows: HashMap<&'a mut MapData, FlowKey, TcpWindow>,
    pub(super) opening_windows: HashMap<&'a mut MapData, FlowKey, TcpWindow>,
}

impl<'a> PortMaps<'a> {
    pub(super) fn new(ebpf: &'a mut Ebpf) -> Result<Self> {
        let [
            ports,
            flows,
            opening,
            udp_flows,
            veths,
            owners,
            windows,
            opening_windows,
        ] = ebpf.maps_disjoint_mut([
            names::PORTS,
            names::FLOWS,
            names::OPENING,
            names::UDP_FLOWS,
            names::VETHS,
            names::OWNERS,
            names::TCP_WINDOWS,
            names::TCP_OPENING_WINDOWS,
        ]);
        Ok(Self {
            ports: PerCpuHashMap::try_from(ports.ok_or_else(|| missing(names::PORTS))?)?,
            flows: HashMap::try_from(flows.ok_or_else(|| missing(names::FLOWS))?)?,
            opening: HashMap::try_from(opening.ok_or_else(|| missing(names::OPENING))?)?,
            udp_flows: HashMap::try_from(udp_flows.ok_or_else(|| missing(names::UDP_FLOWS))?)?,
            veths: DevMapHash::try_from(veths.ok_or_else(|| missing(names::VETHS))?)?,
            owners: HashMap::try_from(owners.ok_or_else(|| missing(names::OWNERS))?)?,
            windows: HashMap::try_from(windows.ok_or_else(|| missing(names::TCP_WINDOWS))?)?,
            opening_windows: HashMap::try_from(
                opening_windows.ok_or_else(|| missing(names::TCP_OPENING_WINDOWS))?,
            )?,
        })
    }

    /// Every exposed port, its target and its counters summed over CPUs.
    pub(super) fn all(&self) -> Result<Vec<(PortKey, PortTarget)>> {
        let mut out = Vec::new();
        for item in self.ports.iter() {
            let (key, per_cpu) = item?;
            let mut sum = *per_cpu
                .iter()
                .next()
                .context("a per-CPU value without CPUs")?;
            (sum.in_packets, sum.in_bytes, sum.out_packets, sum.out_bytes) = (0, 0, 0, 0);
            (sum.passed_packets, sum.refused_packets) = (0, 0);
            for v in per_cpu.iter() {
                sum.in_packets += v.in_packets;
                sum.in_bytes += v.in_bytes;
                sum.out_packets += v.out_packets;
                sum.out_bytes += v.out_bytes;
                sum.passed_packets += v.passed_packets;
                sum.refused_packets = sum.refused_packets.wrapping_add(v.refused_packets);
            }
            out.push((key, sum));
        }
        Ok(out)
    }

    /// Removes the veth's ports (those of `entries`, as [`Self::all`] read them), owner and
    /// liveness entry; its connections stay (they drain).
    pub(super) fn forget_veth(
        &mut self,
        veth_ifindex: u32,
        entries: &[(PortKey, PortTarget)],
    ) -> Result<()> {
        for (key, _) in entries
            .iter()
            .filter(|(_, t)| t.veth_ifindex == veth_ifindex)
        {
            ignore_absent(self.ports.remove(key))?;
        }
        ignore_absent(self.owners.remove(&veth_ifindex))?;
        ignore_absent(self.veths.remove(veth_ifindex))
    }

    /// `entries` (as [`Self::all`] read them) as exposed ports, with their owners' records,
    /// sorted by container, port, protocol and address.
    pub(super) fn exposed_ports(
        &self,
        entries: &[(PortKey, PortTarget)],
    ) -> Result<Vec<ExposedPort>> {
        let mut out = Vec::new();
        for &(key, target) in entries {
            let owner = absent_is_none(self.owners.get(&target.veth_ifindex, 0))?;
            out.push(ExposedPort {
                container: owner.map_or_else(String::new, |o| unfixed_name(&o.name)),
                veth_ifindex: target.veth_ifindex,
                nic_ifindex: key.nic_ifindex,
                host_addr: from_sixteen(key.addr),
                protocol: if key.proto == PROTO_UDP { "udp" } else { "tcp" },
                host_port: key.port,
                container_addr: from_sixteen(target.addr),
                container_port: target.port,
                origin: Origin::from_code(owner.map_or(0, |o| o.origin)),
                bypasses_firewall: owner.is_some_and(|o| o.firewall == FIREWALL_BYPASSED),
                created_unix_secs: owner.map_or(0, |o| o.created_unix_secs),
                inbound: Traffic {
                    packets: target.in_packets,
                    bytes: target.in_bytes,
                },
                outbound: Traffic {
                    packets: target.out_packets,
                    bytes: target.out_bytes,
                },
                passed_packets: target.passed_packets,
                refused_packets: target.refused_packets.into(),
            });
        }
        out.sort_by(|a, b| {
            (&a.container, a.host_port, a.protocol, a.host_addr).cmp(&(
                &b.container,
                b.host_port,
                b.protocol,
                b.host_addr,
            ))
        });
        Ok(out)
    }

    /// The veth's connections (TCP established or being opened, UDP), with how long each has
    /// been idle.
    pub(super) fn flows_of(&self, veth_ifindex: u32) -> Vec<(FlowKey, Duration)> {
        let now = monotonic_ns();
        let established = self.flows.iter().filter_map(Result::ok);
        let opening = self
            .opening
            .iter()
            .filter_map(Result::ok)
            .map(|(k, o)| (k, o.flow));
        let udp = self.udp_flows.iter().filter_map(Result::ok);
        established
            .chain(opening)
            .chain(udp)
            .filter(|(k, _)| k.veth_ifindex == veth_ifindex)
            .map(|(k, f)| (k, Duration::from_nanos(now.saturating_sub(f.last_seen_ns))))
            .collect()
    }

    /// Drops the window copies of the veth's TCP connections: once its ports are unexposed, the
    /// clients' segments take Docker's path, where conntrack picks them up, and a copy would
    /// fall behind them. Without one, the replies that drain are carried unchecked, and a
    /// connection the port is exposed again to stays on Docker's path.
    pub(super) fn forget_windows(&mut self, veth_ifindex: u32) -> Result<()> {
        for table in [&mut self.windows, &mut self.opening_windows] {
            let keys: Vec<FlowKey> = table
                .keys()
                .filter_map(Result::ok)
                .filter(|k| k.veth_ifindex == veth_ifindex)
                .collect();
            for key in keys {
                ignore_absent(table.remove(&key))?;
            }
        }
        Ok(())
    }

    /// Forgets the veth's connections idle for `idle` or longer (all with zero); returns how
    /// many are left.
    pub(super) fn drop_flows(&mut self, veth_ifindex: u32, idle: Duration) -> Result<usize> {
        self.drop_flows_where(veth_ifindex, |_, quiet| quiet >= idle)
    }

    /// Forgets the veth's connections `gone` picks (given the key and how long it has been
    /// quiet); returns how many are left.
    pub(super) fn drop_flows_where(
        &mut self,
        veth_ifindex: u32,
        gone: impl Fn(&FlowKey, Duration) -> bool,
    ) -> Result<usize> {
        let mut left = 0;
        for (key, quiet) in self.flows_of(veth_ifindex) {
            if gone(&key, quiet) {
                // From every table: a TCP connection is in both for the instant it moves, and
                // a dxdp before DXDP_UDP_FLOWS kept UDP flows in DXDP_FLOWS.
                ignore_absent(self.flows.remove(&key))?;
                ignore_absent(self.opening.remove(&key))?;
                ignore_absent(self.udp_flows.remove(&key))?;
                ignore_absent(self.windows.remove(&key))?;
                ignore_absent(self.opening_windows.remove(&key))?;
            } else {
                left += 1;
            }
        }
        Ok(left)
    }
}

/// How long an unexposed container's TCP connection may be quiet before its replies lose the
/// fast path (UDP flows do not drain: [`ExistingConnections`]): conntrack's timeout for a UDP
/// stream, as a measure of quiet; a TCP connection quiet that long whose next packet is a reply
/// is the one case that breaks (docs/ingress.md).
pub(super) const DRAIN_IDLE: Duration = Duration::from_secs(120);

/// CLOCK_MONOTONIC, as `bpf_ktime_get_ns` reads it.
pub(super) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct it is given and nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

pub(super) fn key_of(m: &PortMapping) -> PortKey {
    PortKey {
        nic_ifindex: m.nic_ifindex,
        port: m.host_port,
        proto: if m.udp { PROTO_UDP } else { PROTO_TCP },
        _pad: 0,
        addr: sixteen(m.host_addr),
    }
}

pub(super) fn target_of(m: &PortMapping, e: &Exposure<'_>) -> PortTarget {
    PortTarget {
        addr: sixteen(m.container_addr),
        veth_ifindex: e.endpoint.host_ifindex,
        port: m.container_port,
        mac: e.endpoint.mac,
        gateway_mac: e.gateway_mac,
        ..PortTarget::default()
    }
}

/// IPv4 v4-mapped, as the programs compare addresses.
pub(super) fn sixteen(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

pub(super) fn from_sixteen(raw: [u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(raw);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Whether two targets lead to the same place (counters aside).
pub(super) fn same_target(a: &PortTarget, b: &PortTarget) -> bool {
    (a.addr, a.veth_ifindex, a.port, a.mac, a.gateway_mac)
        == (b.addr, b.veth_ifindex, b.port, b.mac, b.gateway_mac)
}
