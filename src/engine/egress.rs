//! The planner of the egress fast path (issue 36, docs/egress.md): what `dxdp egress on` makes
//! for one container, or why it refuses; and the watch's hold of those fast paths to the rules,
//! which takes one away when a rule that appeared later covers it.
use std::net::IpAddr;

use anyhow::Result;

use super::{host::EndpointError, ports::Ingress};
use crate::{
    datapath::{EgressPlan, EgressRecord},
    docker::Container,
    endpoint::Endpoint,
    firewall::{self, OutboundWay, RulesetCache},
    netlink::Interface,
    ports,
};

/// What the egress table must do for the engine; the pinned datapath in the product, a fake in
/// the unit tests.
pub trait EgressStore {
    fn egress(&mut self) -> Result<Vec<EgressRecord>>;
    /// Takes `veth_ifindex`'s container's fast path away: its connections go back to Docker's
    /// path.
    fn egress_off(&mut self, veth_ifindex: u32) -> Result<()>;
    /// Takes `plan`'s container's established outbound connections to the NIC.
    fn egress_on(&mut self, plan: &EgressPlan) -> Result<()>;
    /// Gives the egress programs conntrack's timeouts and TCP switches as its sysctls are now;
    /// whether they had changed.
    fn follow_egress_sysctls(&mut self) -> Result<bool>;
}

/// How to leave the fast path off without the refusal: what every refusal ends with.
const WAY_OUT: &str = "the container's connections stay on Docker's path";

/// The container's IPv4 way out through `nic_name` (the default route's if `None`) as an
/// [`EgressPlan`], or why it stays on Docker's path: no bridge endpoint with an IPv4 address,
/// a NIC that is none, or a firewall rule (named) that could drop or change its established
/// connections' packets. Changes nothing.
pub fn plan_by_hand(
    container: &Container,
    nic_name: Option<&str>,
    host: &[Interface],
    rules: &firewall::Ruleset,
) -> Result<Result<EgressPlan, String>> {
    let name = &container.view.name;
    let any_v4 = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
    let endpoint = match ports::endpoint_of(container, any_v4, host) {
        Ok(Some(endpoint)) => endpoint,
        Ok(None) => return Ok(Err(no_ipv4(name))),
        Err(e) => return Ok(Err(format!("container {name}: {e}"))),
    };
    let addrs = ports::host_addresses()?;
    let names: Vec<String> = nic_name.into_iter().map(str::to_owned).collect();
    let nic = match ports::nics(&names, host, &addrs) {
        Ok(mut nics) if !nics.is_empty() => nics.remove(0),
        Ok(_) => return Ok(Err(format!("no NIC to leave by; {WAY_OUT}"))),
        Err(e) => return Ok(Err(format!("{e:#}"))),
    };
    let outside = ports::container_prefixes(host, &addrs);
    plan_for(name, endpoint, &nic, &outside, host, |way| {
        Ok(rules.outbound_blockers(way))
    })
}

/// The plan for a container labeled `dxdp.egress=true`, as the watch makes it: its endpoint on
/// the first of its bridge networks where it has an IPv4 address (`endpoints`, one per bridge
/// network as the pass found them), the first NIC of `way_out` (the default route's), the rules
/// as the pass read them. Changes nothing.
pub fn plan_labeled(
    name: &str,
    endpoints: Vec<Result<Endpoint, EndpointError>>,
    way_out: &Ingress,
    host: &[Interface],
    rules: &RulesetCache,
) -> Result<Result<EgressPlan, String>> {
    let mut last_error = None;
    let mut endpoint = None;
    for found in endpoints {
        match found {
            Ok(e) if e.addrs.iter().any(IpAddr::is_ipv4) => {
                endpoint = Some(e);
                break;
            }
            Ok(_) => {}
            Err(e) => last_error = Some(format!("container {name}: {e:#}")),
        }
    }
    let Some(endpoint) = endpoint else {
        return Ok(Err(last_error.unwrap_or_else(|| no_ipv4(name))));
    };
    let Some(nic) = way_out.nics.first() else {
        return Ok(Err(format!("no NIC to leave by; {WAY_OUT}")));
    };
    plan_for(name, endpoint, nic, &way_out.outside, host, |way| {
        rules.outbound_blockers(way)
    })
}

fn no_ipv4(name: &str) -> String {
    format!(
        "container {name} has no IPv4 address on a bridge network; the egress fast path \
         carries IPv4 only (IPv6 and other drivers: not yet); {WAY_OUT}"
    )
}

/// The plan once the container's endpoint and the NIC are known: its IPv4 address, its
/// bridge's MAC, and the rules `blockers` names on the way (none, or it is refused).
fn plan_for(
    name: &str,
    endpoint: Endpoint,
    nic: &ports::Nic,
    outside: &[(IpAddr, u8)],
    host: &[Interface],
    blockers: impl FnOnce(&OutboundWay<'_>) -> Result<Vec<firewall::Blocker>>,
) -> Result<Result<EgressPlan, String>> {
    let Some(addr) = endpoint.addrs.iter().find_map(|a| match a {
        IpAddr::V4(v4) => Some(*v4),
        IpAddr::V6(_) => None,
    }) else {
        return Ok(Err(format!(
            "container {name} has no IPv4 address on {}; {WAY_OUT}",
            endpoint.bridge_name
        )));
    };
    let Some(gateway_mac) = host
        .iter()
        .find(|i| i.index == endpoint.bridge_ifindex)
        .and_then(|i| i.mac)
    else {
        return Ok(Err(format!(
            "container {name}: bridge {} has no MAC address; {WAY_OUT}",
            endpoint.bridge_name
        )));
    };
    let way = OutboundWay {
        nic: &nic.name,
        bridge: &endpoint.bridge_name,
        veth: &endpoint.host_ifname,
        container_addr: IpAddr::V4(addr),
        nic_addrs: &nic.addrs,
        remotes_outside: outside,
    };
    let blockers = blockers(&way)?;
    if !blockers.is_empty() {
        return Ok(Err(refusal(name, &nic.name, &blockers)));
    }
    Ok(Ok(EgressPlan {
        container: name.to_owned(),
        endpoint,
        addr,
        gateway_mac,
        nic_ifindex: nic.index,
        nic: nic.name.clone(),
    }))
}

/// The fast paths in `records` that a rule now covers, each with the rule named: the walk
/// `egress on` made, over the way each record names as the host is now (its veth, the veth's
/// bridge, its NIC and the NIC's addresses in `way_out`, the container networks). A record
/// whose veth or NIC is gone carries nothing: garbage, not the rules' to take.
pub fn covered(
    records: &[EgressRecord],
    host: &[Interface],
    way_out: &Ingress,
    rules: &RulesetCache,
) -> Result<Vec<(u32, String)>> {
    let by_index = |index: u32| host.iter().find(|i| i.index == index);
    let mut covered = Vec::new();
    for r in records {
        let nic = way_out.nics.iter().find(|n| n.index == r.nic_ifindex);
        let (Some(veth), Some(nic)) = (by_index(r.veth_ifindex), nic) else {
            continue;
        };
        let bridge = veth
            .master
            .and_then(by_index)
            .map_or("", |b| b.name.as_str());
        let way = OutboundWay {
            nic: &nic.name,
            bridge,
            veth: &veth.name,
            container_addr: IpAddr::V4(r.addr),
            nic_addrs: &nic.addrs,
            remotes_outside: &way_out.outside,
        };
        let blockers = rules.outbound_blockers(&way)?;
        if !blockers.is_empty() {
            covered.push((r.veth_ifindex, refusal(&r.container, &nic.name, &blockers)));
        }
    }
    Ok(covered)
}

/// Why `container`'s connections out of `nic` stay on Docker's path: the rules that could drop
/// or change their packets there, which the fast path would skip.
fn refusal(container: &str, nic: &str, blockers: &[firewall::Blocker]) -> String {
    format!(
        "container {container}: the egress fast path out of {nic} would bypass firewall rules \
         that may drop or change its connections' packets on Docker's path: {}; remove or \
         narrow the rule to enable it, or leave it off: {WAY_OUT}",
        firewall::listed(blockers)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_rule_and_the_way_out() {
        let blocker = firewall::Blocker {
            table: "iptables filter".to_owned(),
            chain: "DOCKER-USER".to_owned(),
            rule: "-A DOCKER-USER -d 203.0.113.0/24 -j DROP".to_owned(),
        };
        let message = refusal("web", "eth0", &[blocker]);
        assert!(message.contains("container web"), "{message}");
        assert!(
            message.contains("DOCKER-USER: -A DOCKER-USER -d 203.0.113.0/24 -j DROP"),
            "{message}"
        );
        assert!(message.contains("stay on Docker's path"), "{message}");
    }
}
