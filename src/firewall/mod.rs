//! Never open a path the firewall closes.
//!
//! A linked pair's frames skip the bridge, and with it every netfilter hook a bridged frame
//! would pass: iptables and ip6tables (through br_netfilter, legacy and nf_tables backends),
//! nftables chains of the ip, ip6, inet and bridge families, and netdev chains. Before a link
//! is made (and at every resync of the watch) the rules those hooks hold are read and each
//! direction of the pair's IPv4 and IPv6 traffic is walked through them ([`model`]): a family
//! rides the link only if every base chain provably accepts all of its traffic, as the bridge
//! would; a family a rule may close stays on the bridge ([`verdict`]), and a pair with no family
//! left is not linked.
//!
//! Docker's own rules need no special case: they are ordinary rules about bridges and
//! subnets, and the walk sees that Docker's `-i BRIDGE -j ACCEPT` for the pair's network comes
//! before anything that could drop the pair. A rule the walk cannot evaluate (a port match,
//! conntrack state, a named set) may hold for some packet, so if it could drop or alter it, it
//! blocks the link: unproven is not harmless.
//!
//! Addresses are the endpoints' own. Frames with a forged source MAC are never redirected
//! (the datapath passes them to the bridge), but a container can forge its source IP; a rule
//! that matches only forged addresses is out of this check's reach, as it is of the bridge's.
mod addr;
mod generation;
mod inbound;
mod iptables;
mod model;
mod nft;
mod outbound;
mod pinned;
mod read;
mod refused;
mod tc;
mod tri;
mod verdict;

pub use inbound::{PublishedPort, Transport};
pub use outbound::OutboundWay;
pub use pinned::{Covered, Recorded, covered, judged};

use std::{collections::HashMap, net::IpAddr};

pub use model::Blocker;
#[cfg(test)]
pub(crate) use tc::TcState;
pub use verdict::{FamilyVerdict, listed};

use crate::{endpoint::Endpoint, family::Families};
use model::{Family, Flow, Hook, Layer, Table};

/// One end of a pair as the rules see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Side<'a> {
    /// The host-side veth: the bridge port, by ifindex and name.
    pub(crate) index: u32,
    pub(crate) port: &'a str,
    /// The container interface's addresses, link-local ones included.
    pub(crate) addrs: &'a [IpAddr],
}

impl<'a> Side<'a> {
    fn of(e: &'a Endpoint) -> Self {
        Side {
            index: e.host_ifindex,
            port: &e.host_ifname,
            addrs: &e.addrs,
        }
    }
}

/// The host's rules at one moment.
#[derive(Debug)]
pub struct Ruleset {
    tables: Vec<Table>,
    /// `None` when br_netfilter is not loaded: no iptables or nft ip/ip6/inet chain sees
    /// bridged frames then. Otherwise the global `bridge-nf-call-ip(6)tables` switches.
    bridge_nf: Option<(bool, bool)>,
    /// A bridge's own `nf_call_ip(6)tables` switches (they add to the global ones).
    bridge_switches: fn(&str) -> (bool, bool),
}

/// The ruleset as last read, kept while nothing can have changed it: the nf_tables generation
/// (which iptables-nft's rules move too) is the same and no legacy x_tables table is loaded.
/// Saves the watch four tool runs (60–150 ms) on every reconcile, and, with each pair's verdict
/// remembered while the rules stay, the walk of every pair's traffic through them.
#[derive(Debug)]
pub struct RulesetCache {
    source: Box<dyn RulesSource>,
    held: Option<(Option<u32>, Ruleset)>,
    verdicts: HashMap<Pair, FamilyVerdict>,
    /// Each bridge's own br_netfilter switches, read once per refresh (two sysfs files).
    switches: HashMap<String, (bool, bool)>,
    /// Full reads so far, for the log and the tests.
    reads: u64,
    /// The host's qdiscs as of the last refresh ([`tc`]).
    tc: tc::TcState,
}

impl Default for RulesetCache {
    /// The cache of this host's rules.
    fn default() -> Self {
        Self::of(Box::new(HostRules))
    }
}

/// Where a [`RulesetCache`] reads the rules: this host ([`HostRules`]), or a fake in the unit
/// tests of the engine that follow a generation change.
pub(crate) trait RulesSource: std::fmt::Debug + Send {
    /// The nf_tables generation, or `None` when it cannot prove the rules unchanged (no
    /// nf_tables, or a legacy x_tables table loaded): they are read every time then.
    fn generation(&self) -> Option<u32>;
    fn read(&self) -> anyhow::Result<Ruleset>;
    /// The global br_netfilter switches ([`Ruleset::bridge_nf`]).
    fn bridge_nf(&self) -> Option<(bool, bool)>;
    fn traffic_control(&self) -> anyhow::Result<tc::TcState>;
}

/// The rules of the host's network namespace.
#[derive(Debug)]
struct HostRules;

impl RulesSource for HostRules {
    fn generation(&self) -> Option<u32> {
        if read::legacy_tables_loaded() {
            None
        } else {
            generation::current().ok()
        }
    }

    fn read(&self) -> anyhow::Result<Ruleset> {
        Ruleset::read()
    }

    fn bridge_nf(&self) -> Option<(bool, bool)> {
        read::bridge_nf()
    }

    fn traffic_control(&self) -> anyhow::Result<tc::TcState> {
        tc::TcState::read()
    }
}

/// What a verdict depends on besides the rules: the bridge's effective br_netfilter switches,
/// and each side's port and addresses.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Pair {
    bridge: String,
    nf: Option<(bool, bool)>,
    a: (String, Vec<IpAddr>),
    b: (String, Vec<IpAddr>),
}

impl RulesetCache {
    pub(crate) fn of(source: Box<dyn RulesSource>) -> Self {
        Self {
            source,
            held: None,
            verdicts: HashMap::new(),
            switches: HashMap::new(),
            reads: 0,
            tc: tc::TcState::default(),
        }
    }

    /// Brings the rules up to date: read again unless the generation proves them unchanged.
    /// Once per pass; [`RulesetCache::between`] then answers by them.
    pub fn refresh(&mut self) -> anyhow::Result<()> {
        // Asked before the read: a change during the read moves it past what is kept, so the
        // next refresh reads again. Unknown (no nf_tables) or legacy tables: read every time.
        let generation = self.source.generation();
        let unchanged = matches!(&self.held, Some((Some(held), _)) if Some(*held) == generation);
        if !unchanged {
            self.held = None;
            self.verdicts.clear();
            let ruleset = self.source.read()?;
            self.reads += 1;
            self.held = Some((generation, ruleset));
        }
        self.switches.clear();
        // Traffic control moves no generation: one qdisc dump, every refresh.
        self.tc = self.source.traffic_control()?;
        if let Some((_, ruleset)) = &mut self.held {
            // sysctls move no generation, and are one file read each; they are part of each
            // verdict's key.
            ruleset.bridge_nf = self.source.bridge_nf();
        }
        Ok(())
    }

    /// The rules that close each family of the two endpoints' traffic, by the rules as of the
    /// last [`RulesetCache::refresh`], which must have succeeded.
    pub fn between(&mut self, a: &Endpoint, b: &Endpoint) -> anyhow::Result<FamilyVerdict> {
        self.between_ports(&a.bridge_name, Side::of(a), Side::of(b))
    }

    /// [`RulesetCache::between`] for two ports of `bridge` known by name and addresses.
    pub(crate) fn between_ports(
        &mut self,
        bridge: &str,
        a: Side<'_>,
        b: Side<'_>,
    ) -> anyhow::Result<FamilyVerdict> {
        let Some((_, ruleset)) = &self.held else {
            anyhow::bail!("the firewall rules were not read");
        };
        let read_switches = ruleset.bridge_switches;
        let switches = &mut self.switches;
        let nf = ruleset.bridge_nf.map(|(v4, v6)| {
            let (own4, own6) = *switches
                .entry(bridge.to_owned())
                .or_insert_with(|| read_switches(bridge));
            (v4 || own4, v6 || own6)
        });
        let key = Pair {
            bridge: bridge.to_owned(),
            nf,
            a: (a.port.to_owned(), a.addrs.to_vec()),
            b: (b.port.to_owned(), b.addrs.to_vec()),
        };
        let mut verdict = match self.verdicts.get(&key) {
            Some(verdict) => verdict.clone(),
            None => {
                let verdict = ruleset.blockers(bridge, a, b);
                self.verdicts.insert(key, verdict.clone());
                verdict
            }
        };
        // Read at every refresh, so not part of the cached verdict. A qdisc sees every frame.
        for blocker in self
            .tc
            .on(a.index, a.port)?
            .into_iter()
            .chain(self.tc.on(b.index, b.port)?)
        {
            verdict.close_all(blocker);
        }
        Ok(verdict)
    }

    /// The rules that keep a published port on Docker's path
    /// ([`Ruleset::published_port_blockers`]), as of the last [`RulesetCache::refresh`].
    pub fn published_port_blockers(
        &self,
        port: &PublishedPort<'_>,
    ) -> anyhow::Result<Vec<Blocker>> {
        let (_, rules) = self
            .held
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("the firewall rules were not read yet"))?;
        Ok(rules.published_port_blockers(port))
    }

    /// The rules that keep a container's outbound connections on Docker's path
    /// ([`Ruleset::outbound_blockers`]), as of the last [`RulesetCache::refresh`].
    pub fn outbound_blockers(&self, way: &OutboundWay<'_>) -> anyhow::Result<Vec<Blocker>> {
        let (_, rules) = self
            .held
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("the firewall rules were not read yet"))?;
        Ok(rules.outbound_blockers(way))
    }

    /// How many times the rules were read in full.
    pub fn reads(&self) -> u64 {
        self.reads
    }
}

impl Ruleset {
    /// The rules `iptables-save` and `ip6tables-save` printed, with bridges of their own
    /// switches off: for the unit tests.
    #[cfg(test)]
    pub(crate) fn saved(v4: &str, v6: &str, nf: Option<(bool, bool)>) -> Self {
        let mut tables = iptables::parse("iptables", Family::V4, v4).unwrap();
        tables.extend(iptables::parse("ip6tables", Family::V6, v6).unwrap());
        Ruleset {
            tables,
            bridge_nf: nf,
            bridge_switches: |_| (false, false),
        }
    }

    /// Reads iptables (both backends), ip6tables and the nftables ruleset. Fails, naming the
    /// tool and the way out, when rules may exist that cannot be read.
    pub fn read() -> anyhow::Result<Self> {
        read::ruleset()
    }

    /// One line on what was read and which hooks see bridged frames, for `doctor`.
    pub fn summary(&self) -> String {
        let nft = self
            .tables
            .iter()
            .filter(|t| t.name.starts_with("nftables"))
            .count();
        let ipt = self.tables.len() - nft;
        let nf = match self.bridge_nf {
            None => "br_netfilter off: iptables and nft ip/ip6/inet chains see no bridged frame"
                .to_owned(),
            Some((v4, v6)) => format!(
                "br_netfilter on (bridge-nf-call-iptables={}, -ip6tables={}): those chains see \
                 bridged frames",
                u8::from(v4),
                u8::from(v6)
            ),
        };
        format!("{ipt} iptables/ip6tables tables and {nft} other nftables tables read; {nf}")
    }

    /// The rules that close each family of the traffic between `a` and `b`, ports of `bridge`:
    /// none if the bridge would accept all of it. Distinct, in the order found.
    pub(crate) fn blockers(&self, bridge: &str, a: Side<'_>, b: Side<'_>) -> FamilyVerdict {
        let mut directions = Vec::new();
        for (from, to) in [(a, b), (b, a)] {
            for family in [Family::V4, Family::V6] {
                let (src, dst) = (of_family(from.addrs, family), of_family(to.addrs, family));
                // A receiver without an address of the family drops such packets itself.
                if !dst.is_empty() {
                    directions.push(Direction {
                        family,
                        ports: (Some(from.port), Some(to.port)),
                        src,
                        dst,
                    });
                }
            }
        }
        let carried = Families::of(a.addrs).or(Families::of(b.addrs));
        self.walk(bridge, &directions, carried)
    }

    /// The rules that close each family of the two endpoints' traffic.
    pub fn between(&self, a: &Endpoint, b: &Endpoint) -> FamilyVerdict {
        self.blockers(&a.bridge_name, Side::of(a), Side::of(b))
    }

    /// The rules that could keep some pair of ports of `bridge` apart, for the families the
    /// bridge's network carries, the pair's addresses being any of `addrs`: what `doctor`
    /// lists. Ports are unknown.
    pub fn on_bridge(&self, bridge: &str, addrs: &[IpAddr], v4: bool, v6: bool) -> FamilyVerdict {
        let directions: Vec<Direction<'_>> = [(Family::V4, v4), (Family::V6, v6)]
            .into_iter()
            .filter(|(_, carried)| *carried)
            .map(|(family, _)| Direction {
                family,
                ports: (None, None),
                src: of_family(addrs, family),
                dst: of_family(addrs, family),
            })
            .collect();
        let carried = Families { ipv4: v4, ipv6: v6 };
        self.walk(bridge, &directions, carried)
    }

    fn walk(&self, bridge: &str, directions: &[Direction<'_>], carried: Families) -> FamilyVerdict {
        let nf = self.bridge_nf.map(|(v4, v6)| {
            let (own4, own6) = (self.bridge_switches)(bridge);
            (v4 || own4, v6 || own6)
        });
        let mut found = FamilyVerdict::new(carried);
        for d in directions {
            let inet_sees = nf.is_some_and(|(v4, v6)| match d.family {
                Family::V4 => v4,
                Family::V6 => v6,
            });
            for table in &self.tables {
                if !table.families.contains(&d.family) || (table.layer == Layer::Inet && !inet_sees)
                {
                    continue;
                }
                for base in &table.bases {
                    if !d.may_pass(bridge, &base.devices) {
                        continue;
                    }
                    if let Err(blocker) =
                        table.passes(base, &d.flow(table.layer, base.hook, bridge))
                    {
                        found.close(d.family, blocker);
                    }
                }
            }
        }
        found
    }
}

fn of_family(addrs: &[IpAddr], family: Family) -> Vec<IpAddr> {
    addrs
        .iter()
        .copied()
        .filter(|ip| ip.is_ipv4() == (family == Family::V4))
        .collect()
}

/// One direction of a pair's traffic of one family; ports and addresses unknown for `doctor`.
struct Direction<'a> {
    family: Family,
    /// Sender's and receiver's bridge ports.
    ports: (Option<&'a str>, Option<&'a str>),
    src: Vec<IpAddr>,
    dst: Vec<IpAddr>,
}

impl Direction<'_> {
    /// Whether a chain bound to `devices` (an ingress or egress chain; empty for any other)
    /// can see this direction: only on the bridge or one of the pair's ports. With the ports
    /// unknown (`doctor`), any device may be one.
    fn may_pass(&self, bridge: &str, devices: &[String]) -> bool {
        let (from, to) = self.ports;
        devices.is_empty()
            || from.is_none()
            || to.is_none()
            || devices
                .iter()
                .any(|d| d == bridge || Some(d.as_str()) == from || Some(d.as_str()) == to)
    }

    /// How this direction looks at one hook: under br_netfilter the bridge is the in/out
    /// device and the ports are physdev; in the bridge family the ports are the devices; a
    /// netdev chain's device is not known here, so its device conditions stay unknown.
    fn flow<'f>(&'f self, layer: Layer, hook: Hook, bridge: &'f str) -> Flow<'f> {
        let has_in = hook != Hook::Postrouting;
        let has_out = hook != Hook::Prerouting;
        let bridged = layer != Layer::Netdev;
        let (from, to) = self.ports;
        let (dev_in, dev_out) = match layer {
            Layer::Inet => (Some(bridge), Some(bridge)),
            Layer::Bridge => (from, to),
            Layer::Netdev => (None, None),
        };
        let only = |cond: bool, dev: Option<&'f str>| dev.filter(|_| cond);
        Flow {
            family: self.family,
            src: &self.src,
            dst: &self.dst,
            dev_in: only(has_in, dev_in),
            dev_out: only(has_out, dev_out),
            phys_in: only(bridged && has_in, from),
            phys_out: only(bridged && has_out, to),
            bridge_in: only(bridged, Some(bridge)),
            bridge_out: only(bridged, Some(bridge)),
            ..Flow::default()
        }
    }
}

/// The host's rules, read to check a pair before anything is made; `way_out` names the opt-in
/// an error offers.
pub fn read_for_a_pair(way_out: &str) -> anyhow::Result<RulesetCache> {
    use anyhow::Context;
    let mut rules = RulesetCache::default();
    rules.refresh().with_context(|| {
        format!("cannot read the host's firewall rules to check that a link bypasses none; fix that, or {way_out}")
    })?;
    Ok(rules)
}

/// The rules' verdict on a pair, whose open families a link may carry; or, when they leave it
/// none, why it stays on the bridge ([`refusal`]): a link would bypass the rule that may drop or
/// alter their traffic there. `way_out` names the opt-in.
pub fn judge(
    rules: &mut RulesetCache,
    a: &Endpoint,
    b: &Endpoint,
    way_out: &str,
) -> anyhow::Result<Result<FamilyVerdict, String>> {
    let verdict = rules.between(a, b)?;
    if !verdict.open().is_empty() {
        return Ok(Ok(verdict));
    }
    Ok(Err(refusal(
        &a.label,
        &b.label,
        &a.bridge_name,
        &verdict.blockers(),
        way_out,
    )))
}

/// Reads the rules and [`judge`]s a pair before anything is made; a refusal is an error.
pub fn check(a: &Endpoint, b: &Endpoint, way_out: &str) -> anyhow::Result<FamilyVerdict> {
    judge(&mut read_for_a_pair(way_out)?, a, b, way_out)?.map_err(anyhow::Error::msg)
}

/// Why a pair stays on the bridge, with the way out: one line. `blockers` close every family
/// the pair has; none means it has no address a link could carry frames to.
pub fn refusal(a: &str, b: &str, bridge: &str, blockers: &[Blocker], way_out: &str) -> String {
    if blockers.is_empty() {
        return format!(
            "{a} and {b} stay on bridge {bridge}: neither has an IP address a link could carry \
             frames to"
        );
    }
    let (what, it) = if blockers[0].is_traffic_control() {
        ("traffic control", "it")
    } else {
        ("firewall rule", "the rule")
    };
    format!(
        "{a} and {b} stay on bridge {bridge}: the {what} {} may drop or alter their traffic \
         there, and a link would bypass it; remove {it}, or {way_out}",
        verdict::listed(blockers)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENGINE_28_V4: &str = include_str!("../../tests/fixtures/firewall/iptables-engine-28.txt");
    const ENGINE_28_V6: &str =
        include_str!("../../tests/fixtures/firewall/ip6tables-engine-28.txt");

    fn ruleset(v4: &str, v6: &str, nf: Option<(bool, bool)>) -> Ruleset {
        Ruleset::saved(v4, v6, nf)
    }

    fn side<'a>(port: &'a str, addrs: &'a [IpAddr]) -> Side<'a> {
        Side {
            index: 0,
            port,
            addrs,
        }
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn ipv6_is_checked_only_where_the_receiver_has_ipv6() {
        let rs = ruleset(ENGINE_28_V4, ENGINE_28_V6, Some((true, true)));
        // br-4abc8bbf58d0 is an IPv4-only network: Docker adds no ip6tables accept for it,
        // and Engine 28 disables IPv6 on its containers' interfaces.
        let a4 = ips(&["172.18.0.2"]);
        let b4 = ips(&["172.18.0.3"]);
        let a = side("veth1", &a4);
        let b = side("veth2", &b4);
        assert_eq!(rs.blockers("br-4abc8bbf58d0", a, b).blockers(), []);
        // With link-local IPv6 on both ends, ip6tables' FORWARD policy drops the pair on the
        // bridge, so a link would open a path that is closed today.
        let a6 = ips(&["172.18.0.2", "fe80::1"]);
        let b6 = ips(&["172.18.0.3", "fe80::2"]);
        let a = side("veth1", &a6);
        let b = side("veth2", &b6);
        let found = rs.blockers("br-4abc8bbf58d0", a, b).blockers();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].to_string(),
            "ip6tables filter chain FORWARD: policy drop"
        );
        // The dual-stack network br-c2359292ee9c has Docker's ip6tables accept.
        assert_eq!(rs.blockers("br-c2359292ee9c", a, b).blockers(), []);
    }

    /// Podman next to Docker 28 (issue 38, item 7): Podman gives its containers IPv6
    /// link-local addresses on an IPv4-only network, and Docker 28's ip6tables `FORWARD`
    /// policy drops them on the bridge. IPv6 stays there; IPv4, which Docker's rules accept for
    /// the network, rides the link.
    #[test]
    fn a_family_the_rules_close_stays_on_the_bridge_and_the_other_rides_the_link() {
        let rs = ruleset(ENGINE_28_V4, ENGINE_28_V6, Some((true, true)));
        let a = ips(&["172.18.0.2", "fe80::1"]);
        let b = ips(&["172.18.0.3", "fe80::2"]);
        let verdict = rs.blockers("br-4abc8bbf58d0", side("veth1", &a), side("veth2", &b));
        assert_eq!(verdict.carried(), Families::ALL);
        assert_eq!(verdict.closed(), Families::IPV6);
        assert_eq!(verdict.open(), Families::IPV4);
        let closing: Vec<String> = verdict
            .closing(Families::IPV6)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(closing, ["ip6tables filter chain FORWARD: policy drop"]);
        assert_eq!(verdict.closing(Families::IPV4), []);
        assert_eq!(
            verdict.note().as_deref(),
            Some(
                "IPv4 only; IPv6 stays on the bridge: [ip6tables filter chain FORWARD: policy \
                 drop]"
            )
        );

        // A network Docker's rules know nothing of: iptables' FORWARD policy closes IPv4 too,
        // and with no family left the pair is refused, naming a rule of each.
        let closed = rs.blockers("br-mine", side("veth1", &a), side("veth2", &b));
        assert_eq!(closed.open(), Families::NONE);
        let all: Vec<String> = closed.blockers().iter().map(ToString::to_string).collect();
        assert_eq!(
            all,
            [
                "iptables filter chain FORWARD: policy drop",
                "ip6tables filter chain FORWARD: policy drop"
            ]
        );

        // A family neither end has an address of is not open: it has nothing to carry, and
        // frames of it stay on the bridge (fail closed if one appears before the next check).
        let a4 = ips(&["172.18.0.2"]);
        let b4 = ips(&["172.18.0.3"]);
        let v4 = rs.blockers("br-4abc8bbf58d0", side("veth1", &a4), side("veth2", &b4));
        assert_eq!((v4.open(), v4.note()), (Families::IPV4, None));
    }

    /// Traffic control on a port acts on every frame: it closes both families.
    #[test]
    fn traffic_control_closes_every_family() {
        let mut verdict = FamilyVerdict::new(Families::ALL);
        verdict.close_all(Blocker {
            table: "tc on veth1".into(),
            chain: "root".into(),
            rule: "qdisc tbf".into(),
        });
        assert_eq!(verdict.open(), Families::NONE);
        assert!(refusal("a", "b", "br", &verdict.blockers(), "x").contains("traffic control"));
    }

    #[test]
    fn without_br_netfilter_iptables_sees_no_bridged_frame() {
        let rs = ruleset(ENGINE_28_V4, ENGINE_28_V6, None);
        let a4 = ips(&["10.9.0.2", "fe80::1"]);
        let b4 = ips(&["10.9.0.3", "fe80::2"]);
        let a = side("veth1", &a4);
        let b = side("veth2", &b4);
        assert_eq!(rs.blockers("br-mine", a, b).blockers(), []);
        let rs = ruleset(ENGINE_28_V4, ENGINE_28_V6, Some((true, false)));
        let found = rs.blockers("br-mine", a, b).blockers();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].to_string(),
            "iptables filter chain FORWARD: policy drop"
        );
    }

    #[test]
    fn an_ingress_chain_counts_only_on_the_bridge_or_the_pairs_ports() {
        use model::{Action, Base, Chain, Rule};
        let drop_all = |device: &str| Ruleset {
            tables: vec![Table {
                name: "nftables netdev t".into(),
                families: vec![Family::V4, Family::V6],
                layer: Layer::Netdev,
                chains: [(
                    "in".to_owned(),
                    Chain {
                        rules: vec![Rule {
                            conds: vec![],
                            action: Action::Block,
                            text: "drop".into(),
                        }],
                        policy_accepts: Some(true),
                    },
                )]
                .into(),
                bases: vec![Base {
                    chain: "in".into(),
                    hook: Hook::Ingress,
                    devices: vec![device.into()],
                    nat: false,
                }],
                nat_bases: vec![],
            }],
            bridge_nf: None,
            bridge_switches: |_| (false, false),
        };
        let (a4, b4) = (ips(&["10.9.0.2"]), ips(&["10.9.0.3"]));
        let (a, b) = (side("veth1", &a4), side("veth2", &b4));
        assert_eq!(drop_all("eth0").blockers("br-x", a, b).blockers(), []);
        assert_eq!(drop_all("veth2").blockers("br-x", a, b).blockers().len(), 1);
        assert_eq!(drop_all("br-x").blockers("br-x", a, b).blockers().len(), 1);
        // doctor does not know the ports: any device may be one.
        assert_eq!(
            drop_all("eth0")
                .on_bridge("br-x", &a4, true, false)
                .blockers()
                .len(),
            1
        );
    }
}
