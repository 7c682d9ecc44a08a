//! One sample of `dxdp top`: the rates between two reads of the pinned counters, and its
//! documented JSON shape (`dxdp.top/1`). Pure: unit-tested in `tests.rs`.
use std::{collections::HashMap, net::SocketAddr, time::Duration};

use serde::Serialize;

use crate::{
    choice::Kind,
    datapath::{EgressRecord, ExposedPort, InterfaceCounters, LinkRecord, Traffic},
};

/// One read of the pinned state: cumulative counters, with the veths' current names.
#[derive(Clone, Debug, Default)]
pub(super) struct Snapshot {
    pub(super) links: Vec<LinkSnap>,
    pub(super) interfaces: Vec<InterfaceSnap>,
    pub(super) ports: Vec<PortSnap>,
    pub(super) egress: Vec<EgressSnap>,
}

#[derive(Clone, Debug)]
pub(super) struct LinkSnap {
    pub(super) record: LinkRecord,
    pub(super) low_ifname: Option<String>,
    pub(super) high_ifname: Option<String>,
}

#[derive(Clone, Debug)]
pub(super) struct InterfaceSnap {
    pub(super) ifindex: u32,
    pub(super) ifname: Option<String>,
    pub(super) datapath: Kind,
    pub(super) counters: InterfaceCounters,
}

/// An exposed port, with the name of the NIC it is exposed on (`None` where that is gone).
#[derive(Clone, Debug)]
pub(super) struct PortSnap {
    pub(super) port: ExposedPort,
    pub(super) nic: Option<String>,
}

/// A container whose outbound connections leave straight by the NIC (`dxdp egress on`), with
/// the NIC's name (`None` where that is gone).
#[derive(Clone, Debug)]
pub(super) struct EgressSnap {
    pub(super) record: EgressRecord,
    pub(super) nic: Option<String>,
}

/// One sample: the rates between two snapshots. Serialized as the documented `dxdp.top/1` line.
#[derive(Debug, Serialize)]
pub(super) struct Sample {
    pub(super) schema: &'static str,
    /// RFC 3339, UTC, of the second read.
    pub(super) time: String,
    /// Seconds actually elapsed between the two reads the rates come from.
    pub(super) interval_secs: f64,
    pub(super) links: Vec<LinkRate>,
    pub(super) interfaces: Vec<InterfaceRate>,
    /// Exposed published ports (`dxdp expose`, the `dxdp.ingress` label), busiest first.
    pub(super) ports: Vec<PortRate>,
    /// Containers with the egress fast path (`dxdp egress on`, the `dxdp.egress` label),
    /// busiest first.
    pub(super) egress: Vec<EgressRate>,
}

/// A link's rates; `a` and `b` are its low and high endpoints, as `dxdp status` orders them.
#[derive(Debug, Serialize, PartialEq)]
pub(super) struct LinkRate {
    pub(super) a: String,
    pub(super) b: String,
    /// Host-side veth names; `null` where the veth is gone.
    pub(super) a_veth: Option<String>,
    pub(super) b_veth: Option<String>,
    pub(super) network: String,
    pub(super) datapath: Kind,
    pub(super) a_to_b: Rate,
    pub(super) b_to_a: Rate,
}

#[derive(Debug, Default, Serialize, PartialEq, Clone, Copy)]
pub(super) struct Rate {
    pub(super) packets_per_sec: f64,
    pub(super) bits_per_sec: f64,
}

#[derive(Debug, Serialize, PartialEq)]
pub(super) struct InterfaceRate {
    pub(super) ifname: Option<String>,
    pub(super) ifindex: u32,
    pub(super) datapath: Kind,
    pub(super) redirected_packets_per_sec: f64,
    pub(super) passed_packets_per_sec: f64,
    pub(super) fallback_packets_per_sec: f64,
    pub(super) spoofed_packets_per_sec: f64,
}

/// An exposed port's rates: `inbound` into the container from the NIC, `outbound` its replies
/// out of the NIC, and the packets to the port left to Docker's path.
#[derive(Debug, Serialize, PartialEq)]
pub(super) struct PortRate {
    pub(super) container: String,
    /// `null` where the NIC is gone.
    pub(super) nic: Option<String>,
    pub(super) protocol: &'static str,
    /// `address:port` (`[address]:port` for IPv6) the clients connect to, and where it leads.
    pub(super) host: String,
    pub(super) to: String,
    pub(super) inbound: Rate,
    pub(super) outbound: Rate,
    pub(super) passed_packets_per_sec: f64,
}

/// A container's egress rates: `outbound` its connections' packets out of the NIC, `back` their
/// replies into the container, and its TCP/UDP packets left to Docker's path.
#[derive(Debug, Serialize, PartialEq)]
pub(super) struct EgressRate {
    pub(super) container: String,
    pub(super) address: String,
    /// `null` where the NIC is gone.
    pub(super) nic: Option<String>,
    pub(super) outbound: Rate,
    pub(super) back: Rate,
    pub(super) passed_packets_per_sec: f64,
}

impl EgressRate {
    pub(super) fn bits_per_sec(&self) -> f64 {
        self.outbound.bits_per_sec + self.back.bits_per_sec
    }
    pub(super) fn packets_per_sec(&self) -> f64 {
        self.outbound.packets_per_sec + self.back.packets_per_sec
    }
}

impl PortRate {
    pub(super) fn bits_per_sec(&self) -> f64 {
        self.inbound.bits_per_sec + self.outbound.bits_per_sec
    }
    pub(super) fn packets_per_sec(&self) -> f64 {
        self.inbound.packets_per_sec + self.outbound.packets_per_sec
    }
}

impl LinkRate {
    pub(super) fn bits_per_sec(&self) -> f64 {
        self.a_to_b.bits_per_sec + self.b_to_a.bits_per_sec
    }
    pub(super) fn packets_per_sec(&self) -> f64 {
        self.a_to_b.packets_per_sec + self.b_to_a.packets_per_sec
    }
}

impl InterfaceRate {
    pub(super) fn packets_per_sec(&self) -> f64 {
        self.redirected_packets_per_sec
            + self.passed_packets_per_sec
            + self.fallback_packets_per_sec
            + self.spoofed_packets_per_sec
    }
}

/// Growth of a counter per second. Nothing to compare with (a link or veth that appeared between
/// the reads), a counter that went backwards (state recreated under the same key) or no elapsed
/// time give 0, never a negative or infinite rate.
pub(super) fn per_sec(now: u64, then: Option<u64>, secs: f64) -> f64 {
    match then {
        Some(then) if now >= then && secs > 0.0 => (now - then) as f64 / secs,
        _ => 0.0,
    }
}

/// A traffic counter's packet and bit rates.
fn traffic_rate(now: &Traffic, then: Option<Traffic>, secs: f64) -> Rate {
    Rate {
        packets_per_sec: per_sec(now.packets, then.map(|t| t.packets), secs),
        bits_per_sec: 8.0 * per_sec(now.bytes, then.map(|t| t.bytes), secs),
    }
}

/// Busiest first: by bits, then packets per second, then `tie` (names: a stable order).
fn busiest_first<T>(
    rates: &mut [T],
    busy: impl Fn(&T) -> (f64, f64),
    tie: impl Fn(&T, &T) -> std::cmp::Ordering,
) {
    rates.sort_by(|x, y| {
        let ((x_bits, x_packets), (y_bits, y_packets)) = (busy(x), busy(y));
        y_bits
            .total_cmp(&x_bits)
            .then(y_packets.total_cmp(&x_packets))
            .then_with(|| tie(x, y))
    });
}

/// The rates between two snapshots taken `elapsed` apart, busiest first. Pure: unit-tested.
/// Links and veths that vanished between the reads are not shown; new ones show 0.
pub(super) fn rates(
    prev: &Snapshot,
    cur: &Snapshot,
    elapsed: Duration,
) -> (Vec<LinkRate>, Vec<InterfaceRate>) {
    let secs = elapsed.as_secs_f64();
    // A link recreated between the reads has new counters: its creation time tells them apart.
    let key = |r: &LinkRecord| (r.low_ifindex, r.high_ifindex, r.created_unix_secs);
    let before: HashMap<_, &LinkRecord> = prev
        .links
        .iter()
        .map(|l| (key(&l.record), &l.record))
        .collect();
    let mut links: Vec<LinkRate> = cur
        .links
        .iter()
        .map(|l| {
            let r = &l.record;
            let old = before.get(&key(r));
            let rate = |now: &Traffic, then: Option<Traffic>| traffic_rate(now, then, secs);
            LinkRate {
                a: r.low_name.clone(),
                b: r.high_name.clone(),
                a_veth: l.low_ifname.clone(),
                b_veth: l.high_ifname.clone(),
                network: r.network.clone(),
                datapath: r.datapath,
                a_to_b: rate(&r.low_to_high, old.map(|o| o.low_to_high)),
                b_to_a: rate(&r.high_to_low, old.map(|o| o.high_to_low)),
            }
        })
        .collect();
    busiest_first(
        &mut links,
        |l| (l.bits_per_sec(), l.packets_per_sec()),
        |x, y| (&x.a, &x.b).cmp(&(&y.a, &y.b)),
    );

    let before: HashMap<u32, &InterfaceCounters> = prev
        .interfaces
        .iter()
        .map(|i| (i.ifindex, &i.counters))
        .collect();
    let mut interfaces: Vec<InterfaceRate> = cur
        .interfaces
        .iter()
        .map(|i| {
            let old = before.get(&i.ifindex);
            let c = &i.counters;
            let rate =
                |pick: fn(&InterfaceCounters) -> u64| per_sec(pick(c), old.map(|o| pick(o)), secs);
            InterfaceRate {
                ifname: i.ifname.clone(),
                ifindex: i.ifindex,
                datapath: i.datapath,
                redirected_packets_per_sec: rate(|c| c.redirected_packets),
                passed_packets_per_sec: rate(|c| c.passed_packets),
                fallback_packets_per_sec: rate(|c| c.fallback_packets),
                spoofed_packets_per_sec: rate(|c| c.spoofed_packets),
            }
        })
        .collect();
    interfaces.sort_by(|x, y| {
        y.packets_per_sec()
            .total_cmp(&x.packets_per_sec())
            .then(x.ifindex.cmp(&y.ifindex))
    });
    (links, interfaces)
}

/// The exposed ports' rates between two snapshots taken `elapsed` apart, busiest first. A port
/// exposed again between the reads (new creation time, new counters) shows 0, as a new one does.
pub(super) fn port_rates(prev: &Snapshot, cur: &Snapshot, elapsed: Duration) -> Vec<PortRate> {
    let secs = elapsed.as_secs_f64();
    let key = |p: &ExposedPort| {
        (
            p.nic_ifindex,
            p.host_addr,
            p.protocol,
            p.host_port,
            p.veth_ifindex,
            p.created_unix_secs,
        )
    };
    let before: HashMap<_, &ExposedPort> =
        prev.ports.iter().map(|p| (key(&p.port), &p.port)).collect();
    let mut ports: Vec<PortRate> = cur
        .ports
        .iter()
        .map(|PortSnap { port: p, nic }| {
            let old = before.get(&key(p));
            PortRate {
                container: p.container.clone(),
                nic: nic.clone(),
                protocol: p.protocol,
                host: SocketAddr::new(p.host_addr, p.host_port).to_string(),
                to: SocketAddr::new(p.container_addr, p.container_port).to_string(),
                inbound: traffic_rate(&p.inbound, old.map(|o| o.inbound), secs),
                outbound: traffic_rate(&p.outbound, old.map(|o| o.outbound), secs),
                passed_packets_per_sec: per_sec(
                    p.passed_packets,
                    old.map(|o| o.passed_packets),
                    secs,
                ),
            }
        })
        .collect();
    busiest_first(
        &mut ports,
        |p| (p.bits_per_sec(), p.packets_per_sec()),
        |x, y| (&x.container, &x.host).cmp(&(&y.container, &y.host)),
    );
    ports
}

/// The egress containers' rates between two snapshots taken `elapsed` apart, busiest first. A
/// container enabled again between the reads (new creation time, new counters) shows 0, as a
/// new one does.
pub(super) fn egress_rates(prev: &Snapshot, cur: &Snapshot, elapsed: Duration) -> Vec<EgressRate> {
    let secs = elapsed.as_secs_f64();
    let key = |r: &EgressRecord| (r.veth_ifindex, r.nic_ifindex, r.created_unix_secs);
    let before: HashMap<_, &EgressRecord> = prev
        .egress
        .iter()
        .map(|e| (key(&e.record), &e.record))
        .collect();
    let mut egress: Vec<EgressRate> = cur
        .egress
        .iter()
        .map(|EgressSnap { record: r, nic }| {
            let old = before.get(&key(r));
            EgressRate {
                container: r.container.clone(),
                address: r.addr.to_string(),
                nic: nic.clone(),
                outbound: traffic_rate(&r.outbound, old.map(|o| o.outbound), secs),
                back: traffic_rate(&r.inbound, old.map(|o| o.inbound), secs),
                passed_packets_per_sec: per_sec(
                    r.passed_packets,
                    old.map(|o| o.passed_packets),
                    secs,
                ),
            }
        })
        .collect();
    busiest_first(
        &mut egress,
        |e| (e.bits_per_sec(), e.packets_per_sec()),
        |x, y| x.container.cmp(&y.container),
    );
    egress
}
