//! Exposed published ports (issue 24): the pinned maps `DXDP_PORTS`, `DXDP_FLOWS`,
//! `DXDP_OPENING`, `DXDP_UDP_FLOWS`, `DXDP_PORT_VETHS` and `DXDP_PORT_OWNERS`, and the
//! attachments of the two programs that use them: `dxdp_ingress` on every NIC a port is exposed
//! on, `dxdp_reply` on every exposed container's host veth.
use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    time::Duration,
};

use anyhow::{Context, Result, anyhow, bail};
use aya::maps::{HashMap, IterableMap, MapData, PerCpuValues};
use dxdp_common::{
    MacAddr,
    ingress::{PROTO_UDP, PortKey, PortOwner, PortTarget, names},
};
use tracing::info;

use super::{
    Datapath, Origin, Traffic,
    record::{firewall_code, fixed_name, now_unix_secs},
    state::{absent_is_none, ignore_absent},
};
use crate::{endpoint::Endpoint, netlink::Interface};

mod maps;
mod programs;
mod switches;

use maps::{DRAIN_IDLE, PortMaps, from_sixteen, key_of, same_target, sixteen, target_of};
pub(super) use programs::upgrade;
use programs::{PortPrograms, Role, attachment_pins, detach, detach_idle_nics};

/// One published port to take from a NIC straight into its container.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortMapping {
    pub nic_ifindex: u32,
    pub nic: String,
    pub host_addr: IpAddr,
    pub udp: bool,
    pub host_port: u16,
    pub container_addr: IpAddr,
    pub container_port: u16,
}

/// What `expose` asks for: every port of one container that takes the fast path (those of it
/// not listed lose theirs).
pub struct Exposure<'a> {
    pub container: &'a str,
    pub endpoint: &'a Endpoint,
    /// The MAC the container's frames from the bridge carry as source: the bridge's own.
    pub gateway_mac: MacAddr,
    pub ports: &'a [PortMapping],
    pub origin: Origin,
    pub bypass_firewall: bool,
}

/// An exposed port as the pinned state records it, with what it carried.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ExposedPort {
    pub container: String,
    pub veth_ifindex: u32,
    pub nic_ifindex: u32,
    pub host_addr: IpAddr,
    pub protocol: &'static str,
    pub host_port: u16,
    pub container_addr: IpAddr,
    pub container_port: u16,
    pub origin: Origin,
    pub bypasses_firewall: bool,
    pub created_unix_secs: u64,
    /// Into the container, and replies out of the NIC.
    pub inbound: Traffic,
    pub outbound: Traffic,
    /// Packets to the port left to Docker's path (fragments, IP options, the container's veth
    /// gone, a client not routed back through the NIC, a source the stack refuses).
    pub passed_packets: u64,
    /// Segments of fast-path TCP connections dropped as conntrack would mark them INVALID
    /// (out of window), which Docker's path does not deliver either.
    pub refused_packets: u64,
}

/// How full one connection table is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TableFill {
    pub entries: usize,
    pub capacity: u32,
}

impl TableFill {
    fn of<K: aya::Pod, V: aya::Pod>(table: &HashMap<&mut MapData, K, V>) -> Result<Self> {
        Ok(Self {
            entries: table.keys().filter(Result::is_ok).count(),
            capacity: table.map().info()?.max_entries(),
        })
    }

    /// Nine tenths full or more: new entries make the table forget the least recently used.
    /// (An LRU map that has begun to forget holds somewhat fewer entries than its capacity:
    /// each CPU keeps up to 128 free ones at hand, so a table of fewer than about 1,300
    /// entries per CPU may forget while under nine tenths.)
    pub fn is_nearly_full(&self) -> bool {
        self.entries.saturating_mul(10) >= (self.capacity as usize).saturating_mul(9)
    }
}

/// How full the tables of connections through exposed ports are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConnectionTables {
    /// TCP connections whose client completed the handshake (`DXDP_FLOWS`).
    pub established: TableFill,
    /// TCP connections being opened (`DXDP_OPENING`): a flood of forged SYNs fills it.
    pub opening: TableFill,
    /// UDP flows (`DXDP_UDP_FLOWS`).
    pub udp: TableFill,
}

/// What a nearly full connection table means, for `status` and `doctor` to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TablePressure {
    /// Established connections are being forgotten, least recently used first: one whose
    /// container speaks next breaks. Only a larger table helps.
    Forgetting,
    /// Handshakes that clients never complete fill the table of openings (a SYN flood?);
    /// established connections keep their place.
    UnansweredHandshakes,
}

impl ConnectionTables {
    /// The worse of what the nearly full tables mean; `None` while none is.
    pub fn pressure(&self) -> Option<TablePressure> {
        if self.established.is_nearly_full() {
            Some(TablePressure::Forgetting)
        } else if self.opening.is_nearly_full() {
            Some(TablePressure::UnansweredHandshakes)
        } else {
            None
        }
    }
}

impl ExposedPort {
    /// The mapping this entry was exposed from, but for the NIC's name, which the pinned state
    /// does not keep (empty: `nic_ifindex` says which NIC).
    pub fn mapping(&self) -> PortMapping {
        PortMapping {
            nic_ifindex: self.nic_ifindex,
            nic: String::new(),
            host_addr: self.host_addr,
            udp: self.protocol == "udp",
            host_port: self.host_port,
            container_addr: self.container_addr,
            container_port: self.container_port,
        }
    }
}

/// What becomes of the connections the fast path let in when their container's ports are
/// unexposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExistingConnections {
    /// The operator's or the labels' doing: TCP connections keep the fast path for their
    /// replies until quiet (`DRAIN_IDLE`), for a reply that reached conntrack before any packet
    /// of the client's would be masqueraded. UDP flows go at once: the client's next datagram
    /// meets conntrack as a new flow, and the container's answer then goes through it too, so
    /// conntrack sees both halves (a drained flow it saw only half of would stay NEW to it,
    /// and a later `--ctstate NEW -j DROP` would cut it where Docker's path would not).
    Drain,
    /// A firewall rule now covers the port: every connection goes at once, so that the replies
    /// meet the rule, as on Docker's path.
    End,
}

impl Datapath {
    /// Makes `e.ports` the container's exposed ports: entries first, then the reply program on
    /// its veth, then the NIC's program, so that no packet is translated in before its replies
    /// can be translated back. Ports of it not listed any more are removed. On failure, a
    /// container exposed for the first time is left unexposed. Returns the ports added.
    pub fn expose(&mut self, e: &Exposure<'_>) -> Result<usize> {
        let veth = e.endpoint.host_ifindex;
        let first_time = PortMaps::new(&mut self.ebpf)?.owners.get(&veth, 0).is_err();
        let result = self.expose_steps(e);
        if result.is_err() && first_time {
            let _ = self.unexpose(veth, ExistingConnections::End);
        }
        result
    }

    fn expose_steps(&mut self, e: &Exposure<'_>) -> Result<usize> {
        let veth = e.endpoint.host_ifindex;
        let cpus = aya::util::nr_cpus().map_err(|(what, err)| anyhow!("{what}: {err}"))?;
        let mut maps = PortMaps::new(&mut self.ebpf)?;
        let wanted: BTreeMap<PortKey, PortTarget> = e
            .ports
            .iter()
            .map(|m| (key_of(m), target_of(m, e)))
            .collect();
        for (key, target) in maps.all()? {
            let stale = target.veth_ifindex == veth && !wanted.contains_key(&key);
            if stale {
                ignore_absent(maps.ports.remove(&key))?;
            } else if target.veth_ifindex != veth && wanted.contains_key(&key) {
                bail!(
                    "{} port {} is exposed for another container already (veth ifindex {}); \
                     unexpose that one first",
                    from_sixteen(key.addr),
                    key.port,
                    target.veth_ifindex
                );
            }
        }
        maps.veths.insert(veth, veth, None, 0).with_context(|| {
            format!("cannot add {} to {}", e.endpoint.host_ifname, names::VETHS)
        })?;
        let mut added = 0;
        for (key, target) in &wanted {
            let current = absent_is_none(maps.ports.get(key, 0))?;
            if current.is_some_and(|c| c.iter().next().is_some_and(|c| same_target(c, target))) {
                continue;
            }
            let value = PerCpuValues::try_from(vec![*target; cpus])?;
            maps.ports.insert(*key, value, 0).with_context(|| {
                format!("cannot add port {} to {} (full?)", key.port, names::PORTS)
            })?;
            added += 1;
        }
        // Exposed again (ports changed): it keeps the time it was first exposed.
        let created_unix_secs = absent_is_none(maps.owners.get(&veth, 0))?
            .map_or_else(now_unix_secs, |o| o.created_unix_secs);
        let owner = PortOwner {
            created_unix_secs,
            origin: e.origin.code(),
            firewall: firewall_code(e.bypass_firewall),
            _pad: [0; 6],
            name: fixed_name(e.container),
        };
        maps.owners.insert(veth, owner, 0)?;
        // Before the reply program: none of its replies may leave past a route's MTU, and its
        // connections are judged as conntrack is set to judge them.
        self.mirror_route_mtus()?;
        self.follow_tcp_switches()?;
        let mut programs = PortPrograms::open(&mut self.ebpf, &self.pins)?;
        programs.attach(Role::Reply, veth, &e.endpoint.host_ifname)?;
        let nics: BTreeSet<(u32, &str)> = e
            .ports
            .iter()
            .map(|m| (m.nic_ifindex, m.nic.as_str()))
            .collect();
        for (ifindex, name) in nics {
            programs.attach(Role::Ingress, ifindex, name)?;
        }
        if added > 0 {
            info!(
                container = e.container,
                ports = added,
                "published ports exposed"
            );
        }
        self.drop_idle_nics()?;
        Ok(added)
    }

    /// Takes the fast path away from the container behind this veth: every packet to its ports
    /// takes Docker's path again at once. The connections let in before go at once or drain
    /// (`existing`); draining ones go when quiet, at the garbage collection of a later `dxdp`
    /// command or the watch's resync. Returns the ports it had.
    pub fn unexpose(
        &mut self,
        veth_ifindex: u32,
        existing: ExistingConnections,
    ) -> Result<Vec<ExposedPort>> {
        let mut maps = PortMaps::new(&mut self.ebpf)?;
        // One read of the ports map: the veth's entries are what it had and what goes, the
        // others' NICs are those that keep their program.
        let (own, others): (Vec<_>, Vec<_>) = maps
            .all()?
            .into_iter()
            .partition(|(_, t)| t.veth_ifindex == veth_ifindex);
        let had = maps.exposed_ports(&own)?;
        maps.forget_veth(veth_ifindex, &own)?;
        maps.forget_windows(veth_ifindex)?;
        // The ports' entries are gone, so no new connection comes in while these go.
        let left = maps.drop_flows_where(veth_ifindex, |key, quiet| match existing {
            ExistingConnections::End => true,
            ExistingConnections::Drain => key.proto == PROTO_UDP || quiet >= DRAIN_IDLE,
        })?;
        if left == 0 {
            detach(&self.pins, Role::Reply, veth_ifindex)?;
        }
        detach_idle_nics(&self.pins, &others)?;
        if let Some(first) = had.first() {
            info!(container = %first.container, ports = had.len(), "published ports unexposed");
        }
        Ok(had)
    }

    /// Forgets at once, instead of when quiet, the connections from `client` through the veth
    /// of a container that is not exposed any more, and lets the reply program go if none is
    /// left. For a caller that knows they all ended: `dxdp bench-ingress` between rounds, so
    /// that a round on Docker's path has no program of ours on the container's veth. Returns
    /// how many it forgot.
    pub fn forget_connections(&mut self, veth_ifindex: u32, client: IpAddr) -> Result<usize> {
        let mut maps = PortMaps::new(&mut self.ebpf)?;
        if absent_is_none(maps.owners.get(&veth_ifindex, 0))?.is_some() {
            bail!("veth ifindex {veth_ifindex} is exposed; unexpose it first");
        }
        let client = sixteen(client);
        let before = maps.flows_of(veth_ifindex).len();
        let left = maps.drop_flows_where(veth_ifindex, |k, _| k.client_addr == client)?;
        if left == 0 {
            detach(&self.pins, Role::Reply, veth_ifindex)?;
        }
        Ok(before.saturating_sub(left))
    }

    /// Every exposed port, with what it carried.
    pub fn exposed(&mut self) -> Result<Vec<ExposedPort>> {
        let maps = PortMaps::new(&mut self.ebpf)?;
        maps.exposed_ports(&maps.all()?)
    }

    /// Forgets exposures whose veth is gone (the container stopped), as `collect_garbage` does
    /// for links, and lets the connections of unexposed containers go once quiet (all of them
    /// where the veth is gone). Returns how many containers' exposures were dropped.
    pub(super) fn collect_port_garbage(&mut self, host: &[Interface]) -> Result<usize> {
        let alive = |veth: u32| host.iter().any(|i| i.index == veth && i.is_veth());
        let owners: Vec<u32> = PortMaps::new(&mut self.ebpf)?
            .owners
            .keys()
            .filter_map(Result::ok)
            .collect();
        let mut dropped = 0;
        for &veth in &owners {
            if !alive(veth) {
                self.unexpose(veth, ExistingConnections::End)?;
                dropped += 1;
            }
        }
        for veth in attachment_pins(&self.pins, Role::Reply)? {
            let mut maps = PortMaps::new(&mut self.ebpf)?;
            if absent_is_none(maps.owners.get(&veth, 0))?.is_some() {
                continue;
            }
            let idle = if alive(veth) {
                DRAIN_IDLE
            } else {
                Duration::ZERO
            };
            if maps.drop_flows(veth, idle)? == 0 {
                detach(&self.pins, Role::Reply, veth)?;
            }
        }
        Ok(dropped)
    }

    /// How full the connection tables are.
    pub fn connection_tables(&mut self) -> Result<ConnectionTables> {
        let maps = PortMaps::new(&mut self.ebpf)?;
        Ok(ConnectionTables {
            established: TableFill::of(&maps.flows)?,
            opening: TableFill::of(&maps.opening)?,
            udp: TableFill::of(&maps.udp_flows)?,
        })
    }

    /// Unexposed containers' veths whose connections still drain, with how many.
    pub fn draining(&mut self) -> Result<Vec<(u32, usize)>> {
        let mut out = Vec::new();
        for veth in attachment_pins(&self.pins, Role::Reply)? {
            let maps = PortMaps::new(&mut self.ebpf)?;
            if absent_is_none(maps.owners.get(&veth, 0))?.is_none() {
                out.push((veth, maps.flows_of(veth).len()));
            }
        }
        Ok(out)
    }

    /// Detaches the NIC program where no port is exposed on that NIC any more.
    fn drop_idle_nics(&mut self) -> Result<()> {
        let entries = PortMaps::new(&mut self.ebpf)?.all()?;
        detach_idle_nics(&self.pins, &entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dxdp_common::ingress::{
        DEFAULT_MAX_FLOWS, TCP_ACK, TCP_CWR, TCP_ECE, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN, TCP_URG,
        ipv4_header_checksum_ok, refused_source, side_table_size, tcp_flags_valid,
        udp_length_valid,
    };
    use dxdp_common::stack::{fold, ipv4_fragment, ipv4_header_valid, ipv6_length_valid};

    // The programs' shared logic is tested here: dxdp-common has no test binary of its own.

    #[test]
    fn a_folded_sum_carries_every_bit_back() {
        // The checksum module compares folded sums with 0xffff (right) and with a checksum
        // field (a pseudo-header's sum): both need every carry folded in.
        assert_eq!(fold(0x0001_fffe), 0xffff);
        assert_eq!(fold(0xffff_ffff), 0xffff);
        assert_eq!(fold(0x0001_0000), 0x0001);
        assert_eq!(fold(0x0000_1234), 0x1234);
        // An IPv4 header with its checksum sums to all ones.
        let header: [u16; 10] = [
            0x4500, 0x0073, 0x0000, 0x4000, 0x4011, 0xb861, 0xc0a8, 0x0001, 0xc0a8, 0x00c7,
        ];
        assert_eq!(fold(header.iter().map(|&w| w as u32).sum()), 0xffff);
    }
    #[test]
    fn the_stacks_martian_sources_are_refused_and_ordinary_ones_are_not() {
        let refused = |addr: &str| {
            let addr: IpAddr = addr.parse().unwrap();
            refused_source(&sixteen(addr), addr.is_ipv6())
        };
        for martian in [
            "0.1.2.3",
            "127.0.0.1",
            "224.0.0.5",
            "239.255.236.2",
            "255.255.255.255",
            "::",
            "::1",
            "ff02::1",
            "fe80::5e:99",
            "febf::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(refused(martian), "{martian}");
        }
        for ordinary in [
            "10.236.1.2",
            "192.0.2.7",
            "169.254.1.1",
            "223.1.1.1",
            "fd00:236:1::2",
            "2001:db8::1",
            "fec0::1",
            "::2",
            "64:ff9b::a00:1",
        ] {
            assert!(!refused(ordinary), "{ordinary}");
        }
    }

    #[test]
    fn tcp_flags_are_valid_exactly_where_conntrack_takes_them() {
        let taken = [
            TCP_SYN,
            TCP_SYN | TCP_ACK,
            TCP_SYN | TCP_URG,
            TCP_RST,
            TCP_RST | TCP_ACK,
            TCP_FIN | TCP_ACK,
            TCP_FIN | TCP_ACK | TCP_URG,
            TCP_ACK,
            TCP_ACK | TCP_URG,
        ];
        for flags in 0..=u8::MAX {
            // PSH, ECE and CWR never change conntrack's verdict.
            let core = flags & !(TCP_PSH | TCP_ECE | TCP_CWR);
            assert_eq!(
                tcp_flags_valid(flags),
                taken.contains(&core),
                "flags {flags:#04x}"
            );
        }
        for refused in [
            0,
            TCP_SYN | TCP_FIN,
            TCP_SYN | TCP_RST,
            TCP_FIN,
            TCP_FIN | TCP_PSH | TCP_URG,
        ] {
            assert!(!tcp_flags_valid(refused), "flags {refused:#04x}");
        }
        assert!(
            tcp_flags_valid(TCP_SYN | TCP_ECE | TCP_CWR),
            "an ECN-setup SYN"
        );
    }

    #[test]
    fn an_ipv4_header_checksum_is_checked_as_ip_rcv_checks_it() {
        // 10.236.1.2 -> 10.236.1.1, UDP, 48 bytes, TTL 64, as a client sends it.
        let header = with_checksum([
            0x45, 0, 0, 48, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 236, 1, 2, 10, 236, 1, 1,
        ]);
        assert!(ipv4_header_checksum_ok(&header));
        let mut bad = header;
        bad[11] ^= 1;
        assert!(!ipv4_header_checksum_ok(&bad));
        let mut ttl_changed = header;
        ttl_changed[8] = 1;
        assert!(!ipv4_header_checksum_ok(&ttl_changed), "the TTL is covered");
    }

    /// 10.236.1.2 -> 10.236.1.1, UDP, `total` bytes, TTL 64, DF, with its checksum.
    fn ipv4_header(total: u16) -> [u8; 20] {
        let mut header: [u8; 20] = [
            0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 236, 1, 2, 10, 236, 1, 1,
        ];
        header[2..4].copy_from_slice(&total.to_be_bytes());
        with_checksum(header)
    }

    fn with_checksum(mut header: [u8; 20]) -> [u8; 20] {
        header[10..12].copy_from_slice(&[0, 0]);
        let sum: u32 = header
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        header[10..12].copy_from_slice(&(!(folded as u16)).to_be_bytes());
        header
    }

    #[test]
    fn an_ipv4_header_is_valid_as_the_bridge_validates_it() {
        let header = ipv4_header(48);
        assert!(ipv4_header_valid(&header, 48));
        assert!(
            ipv4_header_valid(&header, 60),
            "the stack trims the frame's padding"
        );
        assert!(
            !ipv4_header_valid(&header, 47),
            "a total length past the frame"
        );
        assert!(ipv4_header_valid(&ipv4_header(20), 20), "a bare header");
        assert!(
            !ipv4_header_valid(&ipv4_header(19), 60),
            "shorter than its header"
        );
        let mut bad = header;
        bad[11] ^= 1;
        assert!(!ipv4_header_valid(&bad, 48), "the checksum");
        let mut options = header;
        options[0] = 0x46;
        assert!(
            !ipv4_header_valid(&with_checksum(options), 48),
            "options: the stack's"
        );
        let mut short = header;
        short[0] = 0x44;
        assert!(!ipv4_header_valid(&with_checksum(short), 48), "four words");
        let mut v6 = header;
        v6[0] = 0x65;
        assert!(!ipv4_header_valid(&with_checksum(v6), 48), "not version 4");
    }

    #[test]
    fn ipv4_fragments_are_told_by_more_fragments_or_an_offset() {
        let header = ipv4_header(48);
        assert!(!ipv4_fragment(&header), "DF alone");
        for (flags, offset) in [(0x20, 0), (0x00, 1), (0x01, 0), (0x20, 0xb9), (0x1f, 0xff)] {
            let mut fragment = header;
            fragment[6] = 0x40 & header[6] | flags;
            fragment[7] = offset;
            assert!(ipv4_fragment(&fragment), "{flags:#04x} {offset:#04x}");
        }
        let mut reserved = header;
        reserved[6] = 0x80;
        assert!(!ipv4_fragment(&reserved), "the reserved bit is no fragment");
    }

    #[test]
    fn an_ipv6_payload_length_must_fit_its_frame() {
        assert!(ipv6_length_valid(8, 48));
        assert!(ipv6_length_valid(0, 40));
        assert!(ipv6_length_valid(8, 100), "the stack trims the rest");
        assert!(!ipv6_length_valid(9, 48));
        assert!(!ipv6_length_valid(u16::MAX, 1500));
        assert!(!ipv6_length_valid(0, 39));
    }

    #[test]
    fn a_udp_length_must_fit_its_packet_and_its_header() {
        assert!(udp_length_valid(8, 8));
        assert!(udp_length_valid(100, 100));
        assert!(udp_length_valid(90, 100), "the stack trims what follows");
        assert!(!udp_length_valid(101, 100), "longer than its packet");
        assert!(!udp_length_valid(7, 100), "shorter than its header");
    }

    #[test]
    fn side_tables_get_a_quarter_of_the_connection_table_and_never_fewer_than_256() {
        assert_eq!(side_table_size(DEFAULT_MAX_FLOWS), 32768);
        assert_eq!(side_table_size(4096), 1024);
        assert_eq!(side_table_size(1024), 256);
        assert_eq!(side_table_size(1), 256);
    }

    #[test]
    fn addresses_round_trip_through_the_programs_sixteen_bytes() {
        for addr in ["192.0.2.7", "2001:db8::7", "::1"] {
            let addr: IpAddr = addr.parse().unwrap();
            assert_eq!(from_sixteen(sixteen(addr)), addr);
        }
        assert_eq!(
            sixteen("192.0.2.7".parse().unwrap())[10..],
            [0xff, 0xff, 192, 0, 2, 7]
        );
    }

    #[test]
    fn an_exposed_ports_mapping_is_the_one_it_was_exposed_from_but_for_the_nics_name() {
        let m = PortMapping {
            nic_ifindex: 4,
            nic: "eth1".into(),
            host_addr: "192.0.2.1".parse().unwrap(),
            udp: true,
            host_port: 5353,
            container_addr: "172.17.0.2".parse().unwrap(),
            container_port: 53,
        };
        let pinned = ExposedPort {
            container: "dns".into(),
            veth_ifindex: 9,
            nic_ifindex: m.nic_ifindex,
            host_addr: m.host_addr,
            protocol: "udp",
            host_port: m.host_port,
            container_addr: m.container_addr,
            container_port: m.container_port,
            origin: Origin::Watch,
            bypasses_firewall: false,
            created_unix_secs: 0,
            inbound: Traffic::default(),
            outbound: Traffic::default(),
            passed_packets: 0,
            refused_packets: 0,
        };
        assert_eq!(
            pinned.mapping(),
            PortMapping {
                nic: String::new(),
                ..m
            }
        );
    }
}
