//! The second kind of fast path, published ports straight from the NIC (issue 24): the
//! containers labeled `dxdp.ingress=true`, each with its published ports as entries on the
//! watch's ingress NICs, held to the firewall walk unless the container says
//! `dxdp.firewall=bypass`, and taken to the pinned table within the pass's scope. Exposures made
//! by hand (`dxdp expose`) are the operator's, as hand-made links are, but held to the rules as
//! firmly: a rule that appears later takes them away (unless made with `--bypass-firewall`).
use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use anyhow::Result;
use tracing::{info, warn};

use super::{
    record::{Refusal, Scope, VethsAndRefusals},
    shared::Shared,
};
use crate::{
    choice::Origin,
    datapath::{ExistingConnections, ExposedPort, Exposure, PortMapping},
    docker::{Container, PublishedPort},
    endpoint::Endpoint,
    exposure::ContainerExposure,
    firewall, labels,
    netlink::Interface,
    ports::{self, Nic},
};

/// What the exposure table must do for the engine; the pinned datapath in the product, a fake
/// in the unit tests.
pub trait PortStore {
    fn exposed(&mut self) -> Result<Vec<ExposedPort>>;
    fn expose(&mut self, exposure: &Exposure<'_>) -> Result<usize>;
    fn unexpose(&mut self, veth_ifindex: u32, existing: ExistingConnections) -> Result<()>;
    /// Mirrors the host's routes the replies must heed (their MTUs); how many entries changed.
    /// Tables whose replies take no route (the tests' fakes) have nothing to mirror.
    fn mirror_route_mtus(&mut self) -> Result<usize> {
        Ok(0)
    }
    /// Gives the published ports' programs conntrack's TCP switches as its sysctls are now;
    /// whether they had changed.
    fn follow_tcp_switches(&mut self) -> Result<bool>;
}

/// Where clients come in and which prefixes none is on: what the kind needs of the host.
pub struct Ingress {
    pub nics: Vec<Nic>,
    /// The NICs' arriving marks, asked at most once in the pass, by either walk (a labeled
    /// container's ports, or a port exposed by hand).
    pub marks: ports::ArrivingMarks,
    /// The host's container networks ([`ports::container_prefixes`]).
    pub outside: Vec<(IpAddr, u8)>,
}

impl Ingress {
    /// The host as it is now: the NICs `nic_names` names (the default route's if it names none),
    /// or none when `None` (a pass that only checks exposures made by hand); its container
    /// networks; the marks, asked when first needed.
    pub fn of_host(host: &[Interface], nic_names: Option<&[String]>) -> Result<Self> {
        let addrs = ports::host_addresses()?;
        Ok(Self {
            nics: match nic_names {
                Some(names) => ports::nics(names, host, &addrs)?,
                None => vec![],
            },
            outside: ports::container_prefixes(host, &addrs),
            marks: ports::ArrivingMarks::default(),
        })
    }

    /// The host's NICs with these ifindexes (those that exist and are no bridge or bridge
    /// port), with their addresses now, and its container networks: the ways out the egress
    /// fast paths were made on, as the host is now.
    pub fn of_nic_indexes(host: &[Interface], indexes: &[u32]) -> Result<Self> {
        let addrs = ports::host_addresses()?;
        let names: Vec<String> = host
            .iter()
            .filter(|i| indexes.contains(&i.index))
            .map(|i| i.name.clone())
            .collect();
        let nics = names
            .iter()
            .filter_map(|name| ports::nics(std::slice::from_ref(name), host, &addrs).ok())
            .flatten()
            .collect();
        Ok(Self {
            nics,
            outside: ports::container_prefixes(host, &addrs),
            marks: ports::ArrivingMarks::default(),
        })
    }
}

/// The exposures a pass wants, by host veth; each labeled container's veth, for the scope of an
/// event's pass, and the refusals, by veth.
#[derive(Default)]
pub(super) struct WantedPorts {
    pub(super) wanted: BTreeMap<u32, ContainerExposure>,
    pub(super) seen: VethsAndRefusals<u32>,
    /// The veths of containers a rule now refuses: their connections end with the exposure.
    pub(super) refused_by_rules: BTreeSet<u32>,
}

/// The labeled containers' published ports on `ingress`'s NICs, judged by the rules.
pub(super) fn wanted_ports(
    shared: &mut Shared<'_>,
    containers: &[Container],
    ingress: &Ingress,
) -> Result<WantedPorts> {
    let mut plan = WantedPorts::default();
    for c in containers {
        if !c.view.running || c.ports.is_empty() || !labels::wants_ingress(&c.view.labels) {
            continue;
        }
        let name = &c.view.name;
        let mut found = Vec::new();
        for a in c.attachments.iter().filter(|a| a.bridge.is_some()) {
            match shared.endpoint(c, &a.network.id) {
                Ok(e) => found.push(e),
                Err(err) => warn!(container = %name, "cannot expose: {err:#}"),
            }
        }
        let endpoint_for = |host_ip| {
            Ok(found
                .iter()
                .find(|e| e.addrs.iter().any(|a| ports::routable_of(a, host_ip)))
                .cloned())
        };
        let host = shared.host;
        // The rules are read once a pass, and only when a container is held to them.
        let rules = (!labels::bypasses_firewall(&c.view.labels)).then_some(
            |port: &firewall::PublishedPort<'_>| {
                Ok(shared
                    .rules()?
                    .published_port_blockers(port)
                    .unwrap_or_default())
            },
        );
        let planned = plan_container(
            name,
            &c.ports,
            ingress,
            host,
            Origin::Watch,
            endpoint_for,
            rules,
        )?;
        let id = &c.view.id;
        let not = match planned {
            Ok(wanted) => {
                let veth = wanted.endpoint.host_ifindex;
                plan.seen.saw(id, veth);
                plan.wanted.insert(veth, wanted);
                continue;
            }
            Err(not) => not,
        };
        if let Some(veth) = not.veth() {
            plan.seen.saw(id, veth);
        }
        match &not {
            NotExposed::Rule { veth, .. } => {
                plan.refused_by_rules.insert(*veth);
                plan.seen
                    .refuse(*veth, not.refusal(name, Origin::Watch, ingress));
            }
            NotExposed::SeveralNetworks { veth } => {
                plan.seen
                    .refuse(*veth, not.refusal(name, Origin::Watch, ingress));
            }
            // Ports on no NIC are not asked for; a bridge without a MAC is not the label's
            // business (the next pass finds it again).
            NotExposed::NotOnTheNics | NotExposed::NoGatewayMac { .. } => {}
        }
    }
    Ok(plan)
}

/// Why one container's published ports are not exposed. The watch logs it once and tells how
/// a label gets round a rule; `dxdp expose` fails with it and tells how an option does.
#[derive(Debug)]
pub enum NotExposed {
    /// None of its published ports is bound to an address of the NICs, with an address of the
    /// container's family.
    NotOnTheNics,
    /// Its published ports lead to more than one of its networks ([`SEVERAL_NETWORKS`]).
    /// `veth` is the host veth of the first.
    SeveralNetworks { veth: u32 },
    /// A rule may drop or change the packets of `port` on Docker's path, and the fast path
    /// would skip it: `rule` names every such rule. `veth` is the container's host veth.
    Rule {
        veth: u32,
        port: PortMapping,
        rule: String,
    },
    /// The bridge of the container's network (`bridge`), whose MAC its frames carry as source,
    /// has none. `veth` is the container's host veth.
    NoGatewayMac { veth: u32, bridge: String },
}

/// [`NotExposed::SeveralNetworks`] in words, after "its" or "NAME's".
const SEVERAL_NETWORKS: &str = "published ports lead to more than one of its networks; dxdp exposes a container on one \
     network";

impl NotExposed {
    /// The container's host veth, where one was found.
    fn veth(&self) -> Option<u32> {
        match self {
            NotExposed::NotOnTheNics => None,
            NotExposed::SeveralNetworks { veth }
            | NotExposed::Rule { veth, .. }
            | NotExposed::NoGatewayMac { veth, .. } => Some(*veth),
        }
    }

    /// Why container `name`'s ports are not exposed, with the way out `origin`'s asker has (a
    /// label for the watch, an option for `dxdp expose`). `ingress`'s NICs are those asked.
    pub fn refusal(&self, name: &str, origin: Origin, ingress: &Ingress) -> Refusal {
        let nics = || {
            let on: Vec<&str> = ingress.nics.iter().map(|n| n.name.as_str()).collect();
            on.join(", ")
        };
        let message = match (origin, self) {
            (Origin::Watch, NotExposed::NotOnTheNics) => format!(
                "cannot expose its published ports: none is bound to an address of {} with an \
                 address of the container's family",
                nics()
            ),
            (Origin::Watch, NotExposed::NoGatewayMac { bridge, .. }) => {
                format!("cannot expose its published ports: bridge {bridge} has no MAC address")
            }
            (Origin::Watch, NotExposed::SeveralNetworks { .. }) => {
                format!("cannot expose its published ports: its {SEVERAL_NETWORKS}")
            }
            (Origin::Watch, NotExposed::Rule { port, rule, .. }) => format!(
                "cannot expose its published ports: port {}: {rule}; label it \
                 dxdp.firewall=bypass to skip such rules on purpose",
                ports::describe(port)
            ),
            (Origin::Manual, NotExposed::NotOnTheNics) => format!(
                "none of {name}'s published ports is bound to an address of {} with an address \
                 of the container's family; name the NIC that holds the port's address with --nic",
                nics()
            ),
            (Origin::Manual, NotExposed::SeveralNetworks { .. }) => {
                format!("{name}'s {SEVERAL_NETWORKS}")
            }
            (Origin::Manual, NotExposed::Rule { port, rule, .. }) => format!(
                "cannot expose {name} port {}: a rule may drop or change its packets on \
                 Docker's path, and the fast path would skip it: {rule}; expose with \
                 --bypass-firewall to skip such rules on purpose",
                ports::describe(port)
            ),
            (Origin::Manual, NotExposed::NoGatewayMac { bridge, .. }) => {
                format!("bridge {bridge} has no MAC address")
            }
        };
        Refusal {
            container: name.to_owned(),
            message,
        }
    }
}

/// One container's `published` ports as fast-path entries on `ingress`'s NICs, held to the
/// firewall unless `rules` is `None`: the planner of the watch, for each labeled container, and
/// of `dxdp expose`, for the one it names. `endpoint_for` finds the container's endpoint with
/// an address of a host address's family; `rules` names the rules that may keep a port on
/// Docker's path, reading them when first asked. `host` is the host's interfaces, where the
/// bridge's MAC is found. An error is one of finding out; a refusal is [`NotExposed`].
pub fn plan_container<R>(
    name: &str,
    published: &[PublishedPort],
    ingress: &Ingress,
    host: &[Interface],
    origin: Origin,
    endpoint_for: impl FnMut(IpAddr) -> Result<Option<Endpoint>>,
    rules: Option<R>,
) -> Result<Result<ContainerExposure, NotExposed>>
where
    R: FnMut(&firewall::PublishedPort<'_>) -> Result<Vec<firewall::Blocker>>,
{
    let mappings = ports::mappings(published, &ingress.nics, endpoint_for)?;
    let Some((_, endpoint)) = mappings.first() else {
        return Ok(Err(NotExposed::NotOnTheNics));
    };
    let endpoint = endpoint.clone();
    if mappings
        .iter()
        .any(|(_, e)| e.host_ifindex != endpoint.host_ifindex)
    {
        return Ok(Err(NotExposed::SeveralNetworks {
            veth: endpoint.host_ifindex,
        }));
    }
    let veth = endpoint.host_ifindex;
    let bypass_firewall = rules.is_none();
    if let Some(mut rules) = rules {
        for (m, e) in &mappings {
            let port = ports::published_port(m, e, &ingress.outside, &ingress.marks);
            if let Some(rule) = ports::named(&rules(&port)?) {
                return Ok(Err(NotExposed::Rule {
                    veth,
                    port: m.clone(),
                    rule,
                }));
            }
        }
    }
    let Some(gateway_mac) = host
        .iter()
        .find(|i| i.index == endpoint.bridge_ifindex)
        .and_then(|i| i.mac)
    else {
        return Ok(Err(NotExposed::NoGatewayMac {
            veth,
            bridge: endpoint.bridge_name.clone(),
        }));
    };
    Ok(Ok(ContainerExposure {
        container: name.to_owned(),
        endpoint,
        gateway_mac,
        ports: mappings.into_iter().map(|(m, _)| m).collect(),
        origin,
        bypass_firewall,
    }))
}

/// The planner of `dxdp expose` for the container it names: the watch's ([`plan_container`])
/// for this one container, its `published` ports on the NICs `nic_names` names (the default
/// route's if none), held to the rules unless `bypass_firewall` (read once, when first asked).
/// A refusal says why, with the option that gets round it where there is one.
pub fn plan_by_hand(
    container: &Container,
    published: &[PublishedPort],
    nic_names: &[String],
    bypass_firewall: bool,
    host: &[Interface],
) -> Result<Result<ContainerExposure, Refusal>> {
    let name = &container.view.name;
    let refused = |message: String| {
        Ok(Err(Refusal {
            container: name.clone(),
            message,
        }))
    };
    if published.is_empty() {
        if let Some(mesh) = container.view.networks.iter().find(|n| n.routing_mesh) {
            return refused(format!(
                "container {name} is on Swarm's routing mesh ({}): its service's ports are \
                 published there, balanced by IPVS to tasks on any node, which a fast path into \
                 this one container would bypass; publish with --publish mode=host,… to expose \
                 it",
                mesh.name
            ));
        }
        return refused(format!(
            "container {name} publishes no ports; publish them (docker run -p HOST:CONTAINER) \
             and expose it again"
        ));
    }
    let ingress = Ingress::of_host(host, Some(nic_names))?;
    let endpoint_for = |ip| ports::endpoint_of(container, ip, host).map_err(anyhow::Error::msg);
    let mut read: Option<firewall::Ruleset> = None;
    let rules = (!bypass_firewall).then_some(|port: &firewall::PublishedPort<'_>| {
        let rules = match &read {
            Some(rules) => rules,
            None => read.insert(firewall::Ruleset::read()?),
        };
        Ok(rules.published_port_blockers(port))
    });
    let planned = plan_container(
        name,
        published,
        &ingress,
        host,
        Origin::Manual,
        endpoint_for,
        rules,
    )?;
    Ok(planned.map_err(|not| not.refusal(name, Origin::Manual, &ingress)))
}

/// What applying did: exposures made or changed, and removed (of which, made by hand and
/// removed because a rule now covers them).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct PortsApplied {
    pub(super) exposed: usize,
    pub(super) unexposed: usize,
    pub(super) removed_by_rules: usize,
}

/// The veths exposed by hand (and not to bypass the rules) whose ports a rule now keeps on
/// Docker's path, with the first such port and its rules: fail closed, as for hand-made links.
pub(super) fn covered_by_hand(
    shared: &mut Shared<'_>,
    pinned: &[ExposedPort],
    ingress: &Ingress,
) -> Result<BTreeMap<u32, String>> {
    let host = shared.host;
    let rules = shared.rules()?;
    let by_hand = pinned.iter().filter(|p| p.origin == Origin::Manual);
    ports::covered_exposures(rules, by_hand, host, &ingress.outside, &ingress.marks)
        .map(|found| found.map(|(p, why)| (p.veth_ifindex, format!("{}: {why}", p.container))))
        .collect()
}

/// Takes the watch's exposures within `scope` to `plan`'s: those no longer wanted (label gone,
/// container gone, a rule now refusing) go, wanted ones whose entries differ are written. A
/// veth exposed by hand is not touched unless `covered` (a rule now keeps its ports on Docker's
/// path). An exposure a rule takes away takes its connections with it at once, so that their
/// replies meet the rule; others' drain ([`ExistingConnections`]). `pinned` is the table's
/// exposures as the pass read them. One that fails does not stop the others.
pub(super) fn apply(
    table: &mut impl PortStore,
    pinned: &[ExposedPort],
    plan: &WantedPorts,
    covered: &BTreeMap<u32, String>,
    scope: &Scope,
) -> Result<PortsApplied> {
    let wanted = &plan.wanted;
    let mut have: BTreeMap<u32, (Origin, BTreeSet<PortMapping>)> = BTreeMap::new();
    for p in pinned {
        let entry = have
            .entry(p.veth_ifindex)
            .or_insert_with(|| (p.origin, BTreeSet::new()));
        entry.1.insert(p.mapping());
    }
    let mut done = PortsApplied::default();
    for (&veth, (origin, _)) in &have {
        if !scope.covers(veth, veth) {
            continue;
        }
        if *origin == Origin::Watch && !wanted.contains_key(&veth) {
            let existing = if plan.refused_by_rules.contains(&veth) {
                ExistingConnections::End
            } else {
                ExistingConnections::Drain
            };
            table.unexpose(veth, existing)?;
            done.unexposed += 1;
        } else if let (Origin::Manual, Some(why)) = (origin, covered.get(&veth)) {
            table.unexpose(veth, ExistingConnections::End)?;
            warn!(
                "removed an exposure made by hand: {why}; expose it again with \
                 --bypass-firewall to skip such rules on purpose"
            );
            done.unexposed += 1;
            done.removed_by_rules += 1;
        }
    }
    for (&veth, w) in wanted.iter().filter(|(v, _)| scope.covers(**v, **v)) {
        let keys: BTreeSet<PortMapping> = w.ports.iter().map(key).collect();
        match have.get(&veth) {
            Some((Origin::Manual, _)) => continue,
            Some((_, present)) if *present == keys => continue,
            _ => {}
        }
        match table.expose(&w.exposure()) {
            Ok(_) => {
                info!(container = %w.container, ports = w.ports.len(), "published ports exposed");
                done.exposed += 1;
            }
            Err(err) => warn!(container = %w.container, "cannot expose: {err:#}"),
        }
    }
    // A route's MTU or a conntrack switch may have changed since the last pass (a route
    // notice, or the resync; an operator's sysctl). An exposure made in this pass has just
    // given the programs both (`Datapath::expose`).
    if !pinned.is_empty() && done.exposed == 0 {
        if table.follow_tcp_switches()? {
            info!("conntrack's TCP switches changed: the published ports' fast path follows them");
        }
        let changed = table.mirror_route_mtus()?;
        if changed > 0 {
            info!(
                changed,
                "route MTUs mirrored for the published ports' replies"
            );
        }
    }
    Ok(done)
}

/// What identifies an entry and where it leads, for comparing the pinned with the wanted: the
/// mapping without its NIC's name, which the pinned state does not keep.
fn key(m: &PortMapping) -> PortMapping {
    PortMapping {
        nic: String::new(),
        ..m.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::{netlink::MacAddr, netns::NetnsPath, ports::ArrivingMarks};

    const NIC: u32 = 2;
    const BRIDGE: u32 = 3;
    const BRIDGE_MAC: MacAddr = [2, 0, 0, 0, 0, 3];

    /// The rules of a container that bypasses them: never asked.
    type NoRules = fn(&firewall::PublishedPort<'_>) -> Result<Vec<firewall::Blocker>>;

    fn ingress() -> Ingress {
        Ingress {
            nics: vec![Nic {
                index: NIC,
                name: "nic0".to_owned(),
                addrs: vec![IpAddr::from([192, 0, 2, 1]), "2001:db8::1".parse().unwrap()],
            }],
            marks: ArrivingMarks::known([(NIC, Some(0))]),
            outside: vec![],
        }
    }

    fn host(bridge_mac: Option<MacAddr>) -> Vec<Interface> {
        vec![Interface {
            index: BRIDGE,
            name: "br0".to_owned(),
            mac: bridge_mac,
            ..Interface::default()
        }]
    }

    /// The container's endpoint behind host veth `veth`, with `addr`.
    fn endpoint(veth: u32, addr: IpAddr) -> Endpoint {
        Endpoint {
            label: "web".to_owned(),
            netns: NetnsPath::of_pid(1),
            netns_ino: 1,
            ifname: "eth0".to_owned(),
            ifindex: 2,
            mac: [2, 0, 0, 0, 0, 9],
            host_ifname: format!("veth{veth}"),
            host_ifindex: veth,
            bridge_ifindex: BRIDGE,
            bridge_name: "br0".to_owned(),
            addrs: vec![addr],
            tunnel_ifindex: None,
        }
    }

    /// Container port 80 published on `host_port` of every address of `host_ip`'s family.
    fn published(host_ip: &str, host_port: u16) -> PublishedPort {
        PublishedPort {
            container: "web".to_owned(),
            id: "abc".to_owned(),
            host_ip: host_ip.parse().unwrap(),
            host_port,
            container_port: 80,
            udp: false,
        }
    }

    /// The endpoint on veth 21 for IPv4 and on veth 22 for IPv6.
    fn two_networks(host_ip: IpAddr) -> Result<Option<Endpoint>> {
        Ok(Some(if host_ip.is_ipv4() {
            endpoint(21, IpAddr::from([172, 18, 0, 2]))
        } else {
            endpoint(22, "fd00::2".parse().unwrap())
        }))
    }

    /// `web`'s ports as `origin`'s planner sees them on a host whose bridge has `bridge_mac`.
    fn plan_web<R>(
        published: &[PublishedPort],
        bridge_mac: Option<MacAddr>,
        origin: Origin,
        endpoint_for: impl FnMut(IpAddr) -> Result<Option<Endpoint>>,
        rules: Option<R>,
    ) -> Result<ContainerExposure, NotExposed>
    where
        R: FnMut(&firewall::PublishedPort<'_>) -> Result<Vec<firewall::Blocker>>,
    {
        let host = host(bridge_mac);
        plan_container(
            "web",
            published,
            &ingress(),
            &host,
            origin,
            endpoint_for,
            rules,
        )
        .expect("nothing to find out that can fail")
    }

    #[test]
    fn a_containers_ports_on_the_nics_are_planned_with_its_bridges_mac() {
        let both = [published("0.0.0.0", 8080), published("::", 8080)];
        let planned = plan_web(
            &both,
            Some(BRIDGE_MAC),
            Origin::Manual,
            two_networks,
            None::<NoRules>,
        );
        // Both families lead to two networks: refused, whoever asks.
        assert!(matches!(planned, Err(NotExposed::SeveralNetworks { .. })));

        let v4 = [published("0.0.0.0", 8080)];
        let plan = plan_web(
            &v4,
            Some(BRIDGE_MAC),
            Origin::Watch,
            two_networks,
            None::<NoRules>,
        )
        .expect("planned");
        assert_eq!(plan.container, "web");
        assert_eq!(plan.endpoint.host_ifindex, 21);
        assert_eq!(plan.gateway_mac, BRIDGE_MAC);
        assert_eq!(plan.origin, Origin::Watch);
        assert!(plan.bypass_firewall, "no rules were asked for");
        // 0.0.0.0: the NIC's one IPv4 address.
        let hosts: Vec<IpAddr> = plan.ports.iter().map(|m| m.host_addr).collect();
        assert_eq!(hosts, [IpAddr::from([192, 0, 2, 1])]);
    }

    #[test]
    fn a_refusal_says_why_and_the_rules_are_read_only_for_ports_on_one_network() {
        let asked = Cell::new(0);
        let dropping = |_: &firewall::PublishedPort<'_>| {
            asked.set(asked.get() + 1);
            Ok(vec![firewall::Blocker {
                table: "filter".to_owned(),
                chain: "FORWARD".to_owned(),
                rule: "drop".to_owned(),
            }])
        };
        let v4 = [published("0.0.0.0", 8080)];
        let none_found = |_| Ok(None);
        let planned = plan_web(
            &v4,
            Some(BRIDGE_MAC),
            Origin::Manual,
            none_found,
            Some(dropping),
        );
        assert!(matches!(planned, Err(NotExposed::NotOnTheNics)));
        assert_eq!(asked.get(), 0);

        let planned = plan_web(
            &v4,
            Some(BRIDGE_MAC),
            Origin::Manual,
            two_networks,
            Some(dropping),
        );
        let Err(NotExposed::Rule { veth, port, rule }) = planned else {
            panic!("refused by the rule: {planned:?}");
        };
        assert_eq!((veth, port.host_port), (21, 8080));
        assert_eq!(rule, "[filter chain FORWARD: drop]");
        assert_eq!(asked.get(), 1);

        let planned = plan_web(&v4, None, Origin::Manual, two_networks, None::<NoRules>);
        assert!(matches!(
            planned,
            Err(NotExposed::NoGatewayMac { veth: 21, ref bridge }) if bridge == "br0"
        ));
    }
}
