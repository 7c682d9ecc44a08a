//! Outbound connections of containers straight to the NIC (issue 36, docs/egress.md): the
//! egress object (`dxdp-egress`), its pinned maps `DXDP_EGRESS_VETHS`, `DXDP_EGRESS_ADDRS`,
//! `DXDP_EGRESS_LIVE` and `DXDP_EGRESS_OWNERS`, and the attachments of its two programs:
//! `dxdp_egress` on each enabled container's host veth (`links/egress-IFINDEX`),
//! `dxdp_egress_back` on each NIC one leaves by (`links/egress-back-IFINDEX`).
//!
//! The object calls conntrack's kfuncs, which aya 0.14 loads only after `super::kfunc` resolved
//! them; where the running kernel cannot give them (no BTF, conntrack a module), enabling is
//! refused ([`EgressUnavailable`]) and nothing is made.
use std::{
    net::Ipv4Addr,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, Map, MapData, PerCpuHashMap, PerCpuValues, xdp::DevMapHash},
    util::nr_cpus,
};
use dxdp_common::{
    MacAddr,
    egress::{EgressOwner, EgressVeth, Sysctls, names},
    tcp_window::{ClosedWindow, LegacyWindowKey, TcpWindow, WindowKey, v4_mapped},
};

use super::{
    Datapath, Interface, Traffic, attach, btf_layout, handback, kfunc, pins,
    record::{fixed_name, now_unix_secs, unfixed_name},
    state::{absent_is_none, ignore_absent, missing},
    sysctl,
};
use crate::endpoint::Endpoint;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dxdp-egress"));

/// What `dxdp egress on` makes for one container.
#[derive(Clone, Debug)]
pub struct EgressPlan {
    pub container: String,
    pub endpoint: Endpoint,
    /// The container's IPv4 address on its bridge network.
    pub addr: Ipv4Addr,
    /// The bridge's MAC: the gateway the container's routed frames are addressed to.
    pub gateway_mac: MacAddr,
    pub nic_ifindex: u32,
    pub nic: String,
}

/// A container whose outbound connections take the fast path, as the pinned state records it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct EgressRecord {
    pub container: String,
    pub veth_ifindex: u32,
    pub nic_ifindex: u32,
    pub addr: Ipv4Addr,
    pub created_unix_secs: u64,
    /// Out of the NIC, and replies into the container.
    pub outbound: Traffic,
    pub inbound: Traffic,
    /// Packets from the container left to Docker's path.
    pub passed_packets: u64,
}

/// The kernel cannot run the egress programs: nothing was changed.
#[derive(Debug, thiserror::Error)]
#[error(
    "the egress fast path needs conntrack's kfuncs from the kernel's own BTF, and this kernel \
     cannot give them: {reason}; outbound connections stay on Docker's path (docs/egress.md, \
     Limits)"
)]
pub struct EgressUnavailable {
    pub reason: String,
}

/// The object's load-time constants, by name.
type Globals = Vec<(&'static str, u32)>;

/// `struct nf_conn` offsets and the tick rate: the object's load-time constants. Conntrack's
/// timeouts and switches are not among them: they go to a map ([`sysctls_now`]), which
/// follows them.
fn globals() -> Result<Globals, EgressUnavailable> {
    let unavailable = |reason: String| EgressUnavailable { reason };
    let blob = std::fs::read(btf_layout::VMLINUX)
        .map_err(|e| unavailable(format!("cannot read {}: {e}", btf_layout::VMLINUX)))?;
    let at = |s: &str, m: &str| {
        btf_layout::member_offset(&blob, s, m).map_err(|e| unavailable(format!("{s}.{m}: {e:#}")))
    };
    let size =
        |s: &str| btf_layout::struct_size(&blob, s).map_err(|e| unavailable(format!("{s}: {e:#}")));
    let tuple = at("nf_conntrack_tuple_hash", "tuple")?;
    let hash = size("nf_conntrack_tuple_hash")?;
    let tuplehash = at("nf_conn", "tuplehash")?;
    // tuple.src is a `struct nf_conntrack_man` (u3, then u); tuple.dst an unnamed struct that
    // starts the same way: the address (`union nf_inet_addr`), then the ports' union.
    let (u3, u) = (at("nf_conntrack_man", "u3")?, at("nf_conntrack_man", "u")?);
    let original_src = tuplehash + tuple + at("nf_conntrack_tuple", "src")?;
    let reply_dst = tuplehash + hash + tuple + at("nf_conntrack_tuple", "dst")?;
    let tcp_state = at("nf_conn", "proto")? + at("ip_ct_tcp", "state")?;
    // proto.tcp.seen[0], a `struct ip_ct_tcp_state`; seen[1] follows it.
    let seen = at("nf_conn", "proto")? + at("ip_ct_tcp", "seen")?;
    let in_seen = |m: &str| at("ip_ct_tcp_state", m).map(|off| seen + off);
    Ok(vec![
        (names::OFF_STATUS, at("nf_conn", "status")?),
        (names::OFF_TIMEOUT, at("nf_conn", "timeout")?),
        (names::OFF_TCP_STATE, tcp_state),
        (names::OFF_ORIG_SRC_IP, original_src + u3),
        (names::OFF_ORIG_SRC_PORT, original_src + u),
        (names::OFF_REPLY_DST_IP, reply_dst + u3),
        (names::OFF_REPLY_DST_PORT, reply_dst + u),
        (names::OFF_SEEN_END, in_seen("td_end")?),
        (names::OFF_SEEN_MAXEND, in_seen("td_maxend")?),
        (names::OFF_SEEN_MAXWIN, in_seen("td_maxwin")?),
        (names::OFF_SEEN_MAXACK, in_seen("td_maxack")?),
        (names::OFF_SEEN_SCALE, in_seen("td_scale")?),
        (names::OFF_SEEN_FLAGS, in_seen("flags")?),
        (names::SEEN_STRIDE, size("ip_ct_tcp_state")?),
        (names::HZ, kernel_hz()),
    ])
}

/// Conntrack's timeouts as its sysctls are now, in milliseconds (0 for one that cannot be read:
/// the programs then leave such entries' timeouts alone), and its TCP switches (off where they
/// cannot be read).
fn sysctls_now() -> Sysctls {
    let ms = |name: &str| sysctl::conntrack(name).map_or(0, |secs| secs.saturating_mul(1000));
    Sysctls {
        tcp_established_ms: ms("tcp_timeout_established"),
        tcp_closing_ms: ms("tcp_timeout_time_wait"),
        tcp_reset_ms: ms("tcp_timeout_close"),
        udp_ms: ms("udp_timeout"),
        udp_stream_ms: ms("udp_timeout_stream"),
        tcp_switches: sysctl::tcp_switches(),
    }
}

/// Writes `sysctls` into the map `map` where it holds others; whether it did.
fn follow_sysctls<D: std::borrow::BorrowMut<MapData>>(
    map: &mut Array<D, Sysctls>,
    sysctls: Sysctls,
) -> Result<bool> {
    if map.get(&0, 0)? == sysctls {
        return Ok(false);
    }
    map.set(0, sysctls, 0)?;
    Ok(true)
}

/// The kernel's tick rate (`CONFIG_HZ`), which `nf_conn.timeout` counts in, measured from
/// `/proc/timer_list`'s jiffies over 200 ms and rounded to the rates Linux offers; 0 where it
/// cannot be read, which leaves the entries' timeouts alone. Measured once per process.
fn kernel_hz() -> u32 {
    static HZ: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *HZ.get_or_init(measure_hz)
}

fn measure_hz() -> u32 {
    let jiffies = || -> Option<u64> {
        let list = std::fs::read_to_string("/proc/timer_list").ok()?;
        list.lines()
            .find_map(|l| l.trim().strip_prefix("jiffies:"))?
            .trim()
            .parse()
            .ok()
    };
    let started = std::time::Instant::now();
    let Some(first) = jiffies() else { return 0 };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let Some(second) = jiffies() else { return 0 };
    let rate = second.wrapping_sub(first) as f64 / started.elapsed().as_secs_f64();
    nearest_hz(rate)
}

/// The `CONFIG_HZ` choice nearest to a measured tick rate.
fn nearest_hz(rate: f64) -> u32 {
    [100u32, 250, 300, 1000]
        .into_iter()
        .min_by(|a, b| {
            (f64::from(*a) - rate)
                .abs()
                .total_cmp(&(f64::from(*b) - rate).abs())
        })
        .unwrap_or(1000)
}

/// The egress object with its kfunc calls resolved for the running kernel, and its load-time
/// constants; [`EgressUnavailable`] where the kernel cannot give them.
fn resolved() -> Result<(kfunc::AlignedObject, Globals), EgressUnavailable> {
    let unavailable = |e: anyhow::Error| EgressUnavailable {
        reason: format!("{e:#}"),
    };
    let kernel = kfunc::KernelFuncs::vmlinux().map_err(unavailable)?;
    let (object, _) = kfunc::resolve(OBJECT, |name| kernel.id(name)).map_err(unavailable)?;
    Ok((object, globals()?))
}

/// Whether the running kernel can run the egress programs, asked before anything is made.
pub fn egress_available() -> Result<(), EgressUnavailable> {
    resolved().map(drop)
}

/// The egress object, loaded with its maps pinned beside the datapath's.
fn load(pins: &pins::Pins) -> Result<Ebpf> {
    let (object, globals) = resolved()?;
    let mut loader = EbpfLoader::new();
    loader.default_map_pin_directory(pins.maps());
    for (name, value) in &globals {
        loader.override_global(name, value, true);
    }
    let mut ebpf = loader.load(&object).with_context(|| {
        format!(
            "cannot load dxdp's egress object with maps pinned in {}",
            pins.maps().display()
        )
    })?;
    // Before any program of this load is attached: without them it refreshes no entry.
    let map = ebpf
        .map_mut(names::TIMEOUTS)
        .ok_or_else(|| missing(names::TIMEOUTS))?;
    follow_sysctls(&mut Array::try_from(map)?, sysctls_now())?;
    Ok(ebpf)
}

/// `links/egress-IFINDEX` on a veth, `links/egress-back-IFINDEX` on a NIC.
const OUT_PIN_PREFIX: &str = "egress-";
const BACK_PIN_PREFIX: &str = "egress-back-";

fn out_pin(pins: &pins::Pins, veth_ifindex: u32) -> PathBuf {
    pins.links().join(format!("{OUT_PIN_PREFIX}{veth_ifindex}"))
}

fn back_pin(pins: &pins::Pins, nic_ifindex: u32) -> PathBuf {
    pins.links().join(format!("{BACK_PIN_PREFIX}{nic_ifindex}"))
}

/// Replaces the pinned egress programs that differ from this binary's (after an upgrade) in
/// every attachment at once; returns the names of those replaced. Nothing where egress was
/// never enabled here. Before this, programs pinned by an older binary stayed until the last
/// container's egress went: one that took conntrack's timeouts at load kept them for good.
pub(super) fn upgrade(pins: &pins::Pins) -> Result<Vec<&'static str>> {
    let progs = pins.progs();
    let programs = [
        (names::OUT_PROGRAM, OUT_PIN_PREFIX),
        (names::BACK_PROGRAM, BACK_PIN_PREFIX),
    ];
    if !programs.iter().any(|(name, _)| progs.join(name).exists()) {
        return Ok(Vec::new());
    }
    // Copies a binary before IPv6 kept, under keys this binary's programs do not read: their
    // connections are handed back first (conntrack then tracks them liberally, and the new
    // programs take their copies from that), and again those the old programs took over
    // meanwhile, once the new ones run.
    let legacy = legacy_carried(pins)?;
    handback::hand_back(&legacy).context("cannot hand the connections back before the swap")?;
    let mut ebpf = load(pins)?;
    let mut replaced = Vec::new();
    for (name, prefix) in programs {
        let prog_pin = progs.join(name);
        if !prog_pin.exists() {
            continue;
        }
        let links: Vec<PathBuf> = pins::prefixed_link_pins(pins, prefix)?
            .into_iter()
            .map(|(_, path)| path)
            .collect();
        if attach::upgrade_classifier(&mut ebpf, name, &prog_pin, &links)? {
            replaced.push(name);
        }
    }
    // Every attachment runs this binary's programs now: nothing writes the legacy copies.
    let handed: std::collections::HashSet<WindowKey> = legacy.into_iter().collect();
    let late: Vec<WindowKey> = legacy_carried(pins)?
        .into_iter()
        .filter(|k| !handed.contains(k))
        .collect();
    handback::hand_back(&late).context("cannot hand the connections back after the swap")?;
    for name in [names::LEGACY_WINDOWS, names::LEGACY_CLOSED_WINDOWS] {
        pins::remove_if_present(&pins.maps().join(name))?;
    }
    Ok(replaced)
}

/// The connections whose copies a binary before IPv6 kept (its pins, where left).
fn legacy_carried(pins: &pins::Pins) -> Result<Vec<WindowKey>> {
    let Some(mut maps) = EgressMaps::pinned(&pins.maps())? else {
        return Ok(Vec::new());
    };
    // Only the legacy maps: the programs of this binary are not running yet, or run on their own.
    maps.windows = None;
    maps.closed = None;
    maps.carried(None)
}

/// The object's maps, from the loaded object or from their pins.
struct EgressMaps<D> {
    veths: PerCpuHashMap<D, u32, EgressVeth>,
    addrs: HashMap<D, u32, u32>,
    live: DevMapHash<D>,
    owners: HashMap<D, u32, EgressOwner>,
    /// Absent where a binary before the window copies enabled egress and none has loaded the
    /// object since.
    windows: Option<HashMap<D, WindowKey, TcpWindow>>,
    /// The copies of connections the fast path saw close (their late segments are judged on
    /// them while conntrack's entry lives); absent as `windows` is, before closed copies.
    closed: Option<HashMap<D, WindowKey, ClosedWindow>>,
    /// The copies a binary before IPv6 keyed by IPv4 addresses, while their pins are left
    /// (until this binary's programs are swapped in: [`upgrade`]); read only to hand their
    /// connections back.
    legacy: Option<HashMap<D, LegacyWindowKey, TcpWindow>>,
    legacy_closed: Option<HashMap<D, LegacyWindowKey, ClosedWindow>>,
}

impl<'a> EgressMaps<&'a mut MapData> {
    fn of(ebpf: &'a mut Ebpf) -> Result<Self> {
        let [veths, addrs, live, owners, windows, closed] = ebpf.maps_disjoint_mut([
            names::VETHS,
            names::ADDRS,
            names::LIVE,
            names::OWNERS,
            names::WINDOWS,
            names::CLOSED_WINDOWS,
        ]);
        Ok(Self {
            veths: PerCpuHashMap::try_from(veths.ok_or_else(|| missing(names::VETHS))?)?,
            addrs: HashMap::try_from(addrs.ok_or_else(|| missing(names::ADDRS))?)?,
            live: DevMapHash::try_from(live.ok_or_else(|| missing(names::LIVE))?)?,
            owners: HashMap::try_from(owners.ok_or_else(|| missing(names::OWNERS))?)?,
            windows: Some(HashMap::try_from(
                windows.ok_or_else(|| missing(names::WINDOWS))?,
            )?),
            closed: Some(HashMap::try_from(
                closed.ok_or_else(|| missing(names::CLOSED_WINDOWS))?,
            )?),
            legacy: None,
            legacy_closed: None,
        })
    }
}

impl EgressMaps<MapData> {
    /// The pinned maps without loading the object (no kfuncs needed); `None` before the first
    /// `egress on`.
    fn pinned(maps: &Path) -> Result<Option<Self>> {
        let open = |name: &str| -> Result<Option<MapData>> {
            let path = maps.join(name);
            if !path.exists() {
                return Ok(None);
            }
            Ok(Some(MapData::from_pin(&path).with_context(|| {
                format!("cannot open {}", path.display())
            })?))
        };
        let (Some(veths), Some(addrs), Some(live), Some(owners)) = (
            open(names::VETHS)?,
            open(names::ADDRS)?,
            open(names::LIVE)?,
            open(names::OWNERS)?,
        ) else {
            return Ok(None);
        };
        let windows = open(names::WINDOWS)?
            .map(|w| HashMap::try_from(Map::HashMap(w)))
            .transpose()?;
        let closed = open(names::CLOSED_WINDOWS)?
            .map(|w| HashMap::try_from(Map::LruHashMap(w)))
            .transpose()?;
        let legacy = open(names::LEGACY_WINDOWS)?
            .map(|w| HashMap::try_from(Map::HashMap(w)))
            .transpose()?;
        let legacy_closed = open(names::LEGACY_CLOSED_WINDOWS)?
            .map(|w| HashMap::try_from(Map::LruHashMap(w)))
            .transpose()?;
        Ok(Some(Self {
            veths: PerCpuHashMap::try_from(Map::PerCpuHashMap(veths))?,
            addrs: HashMap::try_from(Map::HashMap(addrs))?,
            live: DevMapHash::try_from(Map::DevMapHash(live))?,
            owners: HashMap::try_from(Map::HashMap(owners))?,
            windows,
            closed,
            legacy,
            legacy_closed,
        }))
    }
}

impl<D: std::borrow::Borrow<MapData> + std::borrow::BorrowMut<MapData>> EgressMaps<D> {
    /// Every enabled veth, its counters summed over CPUs.
    fn records(&self) -> Result<Vec<EgressRecord>> {
        let mut out = Vec::new();
        for item in self.veths.iter() {
            let (veth_ifindex, per_cpu) = item?;
            let first = *per_cpu
                .iter()
                .next()
                .context("a per-CPU value without CPUs")?;
            let sum = |f: fn(&EgressVeth) -> u64| per_cpu.iter().map(f).sum::<u64>();
            let owner = absent_is_none(self.owners.get(&veth_ifindex, 0))?;
            out.push(EgressRecord {
                container: owner.map_or_else(String::new, |o| unfixed_name(&o.name)),
                veth_ifindex,
                nic_ifindex: first.nic_ifindex,
                addr: Ipv4Addr::from(first.addr.to_ne_bytes()),
                created_unix_secs: owner.map_or(0, |o| o.created_unix_secs),
                outbound: Traffic {
                    packets: sum(|v| v.out_packets),
                    bytes: sum(|v| v.out_bytes),
                },
                inbound: Traffic {
                    packets: sum(|v| v.in_packets),
                    bytes: sum(|v| v.in_bytes),
                },
                passed_packets: sum(|v| v.passed_packets),
            });
        }
        out.sort_by(|a, b| (&a.container, a.veth_ifindex).cmp(&(&b.container, b.veth_ifindex)));
        Ok(out)
    }

    /// Records `plan`'s veth (keeping the counters of one enabled before).
    fn enable(&mut self, plan: &EgressPlan) -> Result<()> {
        let veth_ifindex = plan.endpoint.host_ifindex;
        let addr = u32::from_ne_bytes(plan.addr.octets());
        let config = EgressVeth {
            nic_ifindex: plan.nic_ifindex,
            bridge_ifindex: plan.endpoint.bridge_ifindex,
            addr,
            mac: plan.endpoint.mac,
            gateway_mac: plan.gateway_mac,
            ..EgressVeth::default()
        };
        let cpus = nr_cpus().map_err(|(_, e)| e)?;
        let old = absent_is_none(self.veths.get(&veth_ifindex, 0))?;
        let values: Vec<EgressVeth> = (0..cpus)
            .map(|cpu| {
                let kept = old.as_ref().and_then(|o| o.get(cpu).copied());
                let counters = kept.unwrap_or_default();
                EgressVeth {
                    out_packets: counters.out_packets,
                    out_bytes: counters.out_bytes,
                    in_packets: counters.in_packets,
                    in_bytes: counters.in_bytes,
                    passed_packets: counters.passed_packets,
                    ..config
                }
            })
            .collect();
        self.veths
            .insert(veth_ifindex, PerCpuValues::try_from(values)?, 0)?;
        self.addrs.insert(addr, veth_ifindex, 0)?;
        self.live.insert(veth_ifindex, veth_ifindex, None, 0)?;
        let owner = EgressOwner {
            created_unix_secs: now_unix_secs(),
            name: fixed_name(&plan.container),
        };
        self.owners.insert(veth_ifindex, owner, 0)?;
        Ok(())
    }

    /// The TCP connections of the container at `addr` the fast path carries (has a window
    /// copy of), every container's for `None`: the closed ones too, whose conntrack entries
    /// live on (TIME_WAIT) with windows as stale as a live one's, and would take a late
    /// segment for INVALID once no copy judges it.
    fn carried(&self, addr: Option<Ipv4Addr>) -> Result<Vec<WindowKey>> {
        let wanted = addr.map(|a| v4_mapped(a.octets()));
        // A tuple reused after a close has both copies; handed back once. A set, not a scan of
        // what was kept: tens of thousands of copies are handed back at once.
        let mut seen = std::collections::HashSet::new();
        let mut keys = Vec::new();
        let live = self.windows.iter().flat_map(|w| w.keys());
        let closed = self.closed.iter().flat_map(|w| w.keys());
        let legacy = (self.legacy.iter().flat_map(|w| w.keys()))
            .chain(self.legacy_closed.iter().flat_map(|w| w.keys()))
            .map(|key| key.map(WindowKey::from));
        for key in live.chain(closed).chain(legacy) {
            let key = key?;
            if wanted.is_none_or(|a| a == key.container) && seen.insert(key) {
                keys.push(key);
            }
        }
        Ok(keys)
    }

    /// Forgets the window copies `keys`, live and closed, also where a binary before IPv6 kept
    /// them.
    fn forget_windows(&mut self, keys: &[WindowKey]) -> Result<()> {
        for key in keys {
            if let Some(windows) = &mut self.windows {
                ignore_absent(windows.remove(key))?;
            }
            if let Some(closed) = &mut self.closed {
                ignore_absent(closed.remove(key))?;
            }
            let Some(legacy) = legacy_key(key) else {
                continue;
            };
            if let Some(windows) = &mut self.legacy {
                ignore_absent(windows.remove(&legacy))?;
            }
            if let Some(closed) = &mut self.legacy_closed {
                ignore_absent(closed.remove(&legacy))?;
            }
        }
        Ok(())
    }

    /// Forgets `record`'s veth.
    fn disable(&mut self, record: &EgressRecord) -> Result<()> {
        let addr = u32::from_ne_bytes(record.addr.octets());
        if absent_is_none(self.addrs.get(&addr, 0))? == Some(record.veth_ifindex) {
            ignore_absent(self.addrs.remove(&addr))?;
        }
        ignore_absent(self.live.remove(record.veth_ifindex))?;
        ignore_absent(self.owners.remove(&record.veth_ifindex))?;
        ignore_absent(self.veths.remove(&record.veth_ifindex))
    }
}

/// `key` as a binary before IPv6 keyed it; `None` for an IPv6 connection, which it never had.
fn legacy_key(key: &WindowKey) -> Option<LegacyWindowKey> {
    let word = |a: &[u8; 16]| {
        (a[..12] == v4_mapped([0; 4])[..12])
            .then(|| u32::from_ne_bytes([a[12], a[13], a[14], a[15]]))
    };
    Some(LegacyWindowKey {
        container: word(&key.container)?,
        server: word(&key.server)?,
        container_port: key.container_port,
        server_port: key.server_port,
    })
}

impl Datapath {
    /// Containers whose outbound connections take the fast path.
    pub fn egress(&mut self) -> Result<Vec<EgressRecord>> {
        match EgressMaps::pinned(&self.pins.maps())? {
            Some(maps) => maps.records(),
            None => Ok(Vec::new()),
        }
    }

    /// Enables `plan`: the maps first, then the NIC's program, then the veth's (from which
    /// packets start taking the fast path). Fails with [`EgressUnavailable`] before anything is
    /// made where the kernel cannot run the programs.
    pub fn egress_on(&mut self, plan: &EgressPlan) -> Result<()> {
        let mut ebpf = load(&self.pins)?;
        let progs = self.pins.progs();
        let mut out = attach::pinned_classifier(
            &mut ebpf,
            names::OUT_PROGRAM,
            &progs.join(names::OUT_PROGRAM),
        )?;
        let mut back = attach::pinned_classifier(
            &mut ebpf,
            names::BACK_PROGRAM,
            &progs.join(names::BACK_PROGRAM),
        )?;
        EgressMaps::of(&mut ebpf)?.enable(plan)?;
        attach::attach_pinned(
            &mut back,
            names::BACK_PROGRAM,
            &back_pin(&self.pins, plan.nic_ifindex),
            &plan.nic,
        )?;
        attach::attach_pinned(
            &mut out,
            names::OUT_PROGRAM,
            &out_pin(&self.pins, plan.endpoint.host_ifindex),
            &plan.endpoint.host_ifname,
        )?;
        Ok(())
    }

    /// Disables the veth `veth_ifindex`: the TCP connections the fast path carries for it are
    /// handed back to conntrack first ([`handback`]; if conntrack refuses, nothing is changed
    /// and they stay on the fast path), then its program goes (its packets take Docker's path
    /// from then on), then its records, then the NIC's program if no other container leaves by
    /// it; connections taken over meanwhile are handed back after. `None` if it was not
    /// enabled.
    pub fn egress_off(&mut self, veth_ifindex: u32) -> Result<Option<EgressRecord>> {
        let Some(mut maps) = EgressMaps::pinned(&self.pins.maps())? else {
            return Ok(None);
        };
        let records = maps.records()?;
        let Some(record) = records.iter().find(|r| r.veth_ifindex == veth_ifindex) else {
            return Ok(None);
        };
        let carried = maps.carried(Some(record.addr))?;
        handback::hand_back(&carried).with_context(|| {
            format!(
                "cannot hand {} connection(s) of {} back to conntrack; its fast path is left on",
                carried.len(),
                record.container
            )
        })?;
        self.forget_record(record, &records)?;
        // Connections first carried between the hand-back and the detach.
        let late: Vec<WindowKey> = maps
            .carried(Some(record.addr))?
            .into_iter()
            .filter(|k| !carried.contains(k))
            .collect();
        handback::hand_back(&late).with_context(|| {
            format!(
                "cannot hand {} connection(s) of {} back to conntrack",
                late.len(),
                record.container
            )
        })?;
        maps.forget_windows(&carried)?;
        maps.forget_windows(&late)?;
        Ok(Some(record.clone()))
    }

    /// Ends the egress fast path of each container whose veth is gone (it stopped, or came back
    /// with a new veth), as `egress off` does: its connections handed back (those conntrack
    /// still holds) and their copies forgotten, its record removed, the NIC's program detached
    /// if no other container leaves by it. Left, the record showed a dead container in `status`
    /// and the metrics and kept the NIC's program attached; a restarted container labeled
    /// `dxdp.egress` is enabled again on its new veth by the same pass. Where a live record has
    /// the same address (the container restarted and enabled again before this ran), the
    /// copies under that address are the live one's, so they are left to it and only the dead
    /// record goes. How many were ended.
    pub(super) fn collect_egress_garbage(&mut self, host: &[Interface]) -> Result<usize> {
        let records = self.egress()?;
        let alive = |veth: u32| host.iter().any(|i| i.index == veth && i.is_veth());
        let dead = dead_records(&records, alive);
        for &(record, hand_back) in &dead {
            if hand_back {
                self.egress_off(record.veth_ifindex)?;
            } else {
                self.forget_record(record, &records)?;
            }
        }
        Ok(dead.len())
    }

    /// Removes `record` and its veth's attachment pin, and the NIC's if no other of `records`
    /// leaves by it; its connections' copies stay.
    fn forget_record(&mut self, record: &EgressRecord, records: &[EgressRecord]) -> Result<()> {
        let Some(mut maps) = EgressMaps::pinned(&self.pins.maps())? else {
            return Ok(());
        };
        pins::remove_if_present(&out_pin(&self.pins, record.veth_ifindex))?;
        maps.disable(record)?;
        let nic_in_use = records
            .iter()
            .any(|r| r.veth_ifindex != record.veth_ifindex && r.nic_ifindex == record.nic_ifindex);
        if !nic_in_use {
            pins::remove_if_present(&back_pin(&self.pins, record.nic_ifindex))?;
        }
        Ok(())
    }

    /// Writes conntrack's timeouts and switches as its sysctls are now into the pinned map the
    /// programs refresh entries to and judge segments by, where they changed since the last
    /// write (an operator lowered a timeout or turned a switch after `egress on`): whether they
    /// had. Nothing where egress was never enabled here, or only by a binary before the map.
    pub fn follow_egress_sysctls(&mut self) -> Result<bool> {
        match self.sysctls_map()? {
            Some(mut map) => follow_sysctls(&mut map, sysctls_now()),
            None => Ok(false),
        }
    }

    /// The timeouts and switches the egress programs were given, and conntrack's as its
    /// sysctls are now; `None` where egress was never enabled here (or only by a binary before
    /// the map).
    pub fn egress_sysctls(&self) -> Result<Option<(Sysctls, Sysctls)>> {
        match self.sysctls_map()? {
            Some(map) => Ok(Some((map.get(&0, 0)?, sysctls_now()))),
            None => Ok(None),
        }
    }

    fn sysctls_map(&self) -> Result<Option<Array<MapData, Sysctls>>> {
        let path = self.pins.maps().join(names::TIMEOUTS);
        if !path.exists() {
            return Ok(None);
        }
        let map =
            MapData::from_pin(&path).with_context(|| format!("cannot open {}", path.display()))?;
        Ok(Some(Array::try_from(Map::Array(map))?))
    }

    /// Hands every connection the egress fast path carries back to conntrack (before
    /// `cleanup` removes the programs); how many were.
    pub fn egress_hand_back_all(&mut self) -> Result<usize> {
        let Some(maps) = EgressMaps::pinned(&self.pins.maps())? else {
            return Ok(0);
        };
        let carried = maps.carried(None)?;
        Ok(handback::hand_back(&carried)?)
    }
}

/// The records of `records` whose veth is not `alive`, each with whether its connections are to
/// be handed back: not where a live record has the same address, whose copies those are.
fn dead_records(
    records: &[EgressRecord],
    alive: impl Fn(u32) -> bool,
) -> Vec<(&EgressRecord, bool)> {
    records
        .iter()
        .filter(|r| !alive(r.veth_ifindex))
        .map(|dead| {
            let readdressed = records
                .iter()
                .any(|r| alive(r.veth_ifindex) && r.addr == dead.addr);
            (dead, !readdressed)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dead veth's record goes, its connections handed back unless a live record took its
    /// address (the container restarted and was enabled again first): those copies are the
    /// live one's.
    #[test]
    fn dead_records_hand_back_only_what_no_live_record_took_over() {
        let record = |veth: u32, addr: [u8; 4]| EgressRecord {
            container: format!("c{veth}"),
            veth_ifindex: veth,
            nic_ifindex: 2,
            addr: Ipv4Addr::from(addr),
            created_unix_secs: 0,
            outbound: Traffic::default(),
            inbound: Traffic::default(),
            passed_packets: 0,
        };
        let records = [
            record(10, [172, 17, 0, 2]),
            record(11, [172, 17, 0, 3]),
            record(12, [172, 17, 0, 2]),
            record(13, [172, 17, 0, 4]),
        ];
        let alive = |veth: u32| veth == 12 || veth == 13;
        let dead: Vec<(u32, bool)> = dead_records(&records, alive)
            .into_iter()
            .map(|(r, hand_back)| (r.veth_ifindex, hand_back))
            .collect();
        assert_eq!(dead, [(10, false), (11, true)]);
        assert!(dead_records(&records, |_| true).is_empty());
    }

    /// The object loads and both programs pass the running kernel's verifier (with the window
    /// copies' code, whose stack frames must stay under 512 bytes), in a pin directory of the
    /// test's own; skipped without root or the kfuncs.
    #[test]
    fn the_egress_programs_pass_the_verifier() {
        with_the_object_loaded("verify", |mut ebpf, _| {
            for name in [names::OUT_PROGRAM, names::BACK_PROGRAM] {
                let program: &mut aya::programs::SchedClassifier = ebpf
                    .program_mut(name)
                    .with_context(|| format!("no {name}"))?
                    .try_into()?;
                program
                    .load()
                    .map_err(|e| anyhow::anyhow!("{name}: {e:?}"))?;
                let verified = program.info()?.verified_instruction_count().unwrap_or(0);
                eprintln!("{name}: {verified} instructions verified");
            }
            Ok(())
        });
    }

    /// Runs `check` on the egress object loaded with its maps pinned in a directory of the
    /// test's own (`/sys/fs/bpf/dxdp-egress-{name}-PID`, removed after); skipped without root
    /// or conntrack's kfuncs.
    fn with_the_object_loaded(name: &str, check: impl FnOnce(Ebpf, &pins::Pins) -> Result<()>) {
        if !nix::unistd::Uid::effective().is_root() || resolved().is_err() {
            eprintln!("skipping: needs root and conntrack's kfuncs in vmlinux BTF");
            return;
        }
        let root = PathBuf::from(format!(
            "/sys/fs/bpf/dxdp-egress-{name}-{}",
            std::process::id()
        ));
        let pins = pins::Pins::new(&root);
        std::fs::create_dir_all(pins.maps()).unwrap();
        let checked = load(&pins).and_then(|ebpf| check(ebpf, &pins));
        let _ = std::fs::remove_dir_all(&root);
        checked.unwrap();
    }

    /// The hand-back's connections are the live copies' and the closed ones', each once, of
    /// the container asked for; forgetting them empties both maps (real pinned maps).
    #[test]
    fn closed_copies_are_handed_back_with_the_live_ones() {
        with_the_object_loaded("closed", |mut ebpf, _| {
            let mut maps = EgressMaps::of(&mut ebpf)?;
            let key = |container: [u8; 4], port: u16| WindowKey {
                container: v4_mapped(container),
                server: v4_mapped([192, 0, 2, 9]),
                container_port: port.to_be(),
                server_port: 80u16.to_be(),
            };
            let (live, closed, both, other) = (
                key([10, 0, 0, 2], 1000),
                key([10, 0, 0, 2], 1001),
                key([10, 0, 0, 2], 1002),
                key([10, 0, 0, 3], 1000),
            );
            let windows = maps.windows.as_mut().context("no window copies")?;
            for k in [live, both, other] {
                windows.insert(k, TcpWindow::default(), 0)?;
            }
            let closed_copies = maps.closed.as_mut().context("no closed copies")?;
            for k in [closed, both] {
                closed_copies.insert(k, ClosedWindow::default(), 0)?;
            }
            let mut carried = maps.carried(Some(Ipv4Addr::new(10, 0, 0, 2)))?;
            carried.sort_by_key(|k| u16::from_be(k.container_port));
            assert_eq!(carried, vec![live, closed, both]);
            assert_eq!(maps.carried(None)?.len(), 4);
            maps.forget_windows(&carried)?;
            assert_eq!(maps.carried(None)?, vec![other]);
            Ok(())
        });
    }

    /// Copies a binary before IPv6 kept under 12-byte IPv4 keys, in maps pinned under the
    /// names it gave them, are handed back as v4-mapped keys (a tuple with a live copy too,
    /// once), are all [`upgrade`] hands back before the swap, and are forgotten from those maps
    /// too (real pinned maps).
    #[test]
    fn copies_a_binary_before_ipv6_kept_are_handed_back_and_forgotten() {
        with_the_object_loaded("legacy", |mut ebpf, pins| {
            for (name, kind, value) in [
                (names::LEGACY_WINDOWS, "hash", size_of::<TcpWindow>()),
                (
                    names::LEGACY_CLOSED_WINDOWS,
                    "lru_hash",
                    size_of::<ClosedWindow>(),
                ),
            ] {
                let path = pins.maps().join(name);
                let made = std::process::Command::new("bpftool")
                    .args(["map", "create"])
                    .arg(&path)
                    .args(["type", kind, "key", "12", "value", &value.to_string()])
                    .args(["entries", "16", "name", "dxdp_legacy"])
                    .status()?;
                anyhow::ensure!(made.success(), "bpftool cannot make {name}");
            }
            let legacy = |container: [u8; 4], port: u16| LegacyWindowKey {
                container: u32::from_ne_bytes(container),
                server: u32::from_ne_bytes([192, 0, 2, 9]),
                container_port: port.to_be(),
                server_port: 80u16.to_be(),
            };
            let (old, old_closed, other) = (
                legacy([10, 0, 0, 2], 1000),
                legacy([10, 0, 0, 2], 1001),
                legacy([10, 0, 0, 3], 1000),
            );
            // The same tuple as `old`, carried again by this binary's programs since.
            EgressMaps::of(&mut ebpf)?
                .windows
                .context("no window copies")?
                .insert(WindowKey::from(old), TcpWindow::default(), 0)?;
            let mut maps = EgressMaps::pinned(&pins.maps())?.context("no pinned maps")?;
            let windows = maps.legacy.as_mut().context("the legacy copies unread")?;
            for k in [old, other] {
                windows.insert(k, TcpWindow::default(), 0)?;
            }
            let closed = maps
                .legacy_closed
                .as_mut()
                .context("the legacy closed unread")?;
            closed.insert(old_closed, ClosedWindow::default(), 0)?;
            let mut carried = maps.carried(Some(Ipv4Addr::new(10, 0, 0, 2)))?;
            carried.sort_by_key(|k| u16::from_be(k.container_port));
            assert_eq!(carried, [old, old_closed].map(WindowKey::from));
            assert_eq!(carried[0].container, v4_mapped([10, 0, 0, 2]));
            let mut before_swap = legacy_carried(pins)?;
            before_swap.sort_by_key(|k| (k.container, u16::from_be(k.container_port)));
            assert_eq!(before_swap, [old, old_closed, other].map(WindowKey::from));
            maps.forget_windows(&carried)?;
            assert_eq!(maps.carried(None)?, [WindowKey::from(other)]);
            Ok(())
        });
    }

    #[test]
    fn measured_tick_rates_round_to_the_kernel_choices() {
        assert_eq!(nearest_hz(248.7), 250);
        assert_eq!(nearest_hz(99.0), 100);
        assert_eq!(nearest_hz(290.0), 300);
        assert_eq!(nearest_hz(1003.0), 1000);
        assert_eq!(nearest_hz(0.0), 100);
    }

    #[test]
    fn attachment_pins_do_not_collide_with_the_ports_ones() {
        let pins = pins::Pins::new(Path::new("/sys/fs/bpf/dxdp"));
        assert_eq!(
            out_pin(&pins, 7),
            Path::new("/sys/fs/bpf/dxdp/links/egress-7")
        );
        assert_eq!(
            back_pin(&pins, 2),
            Path::new("/sys/fs/bpf/dxdp/links/egress-back-2")
        );
    }
}
