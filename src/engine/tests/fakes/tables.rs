//! The fake tables of the two kinds of fast path, both over [`World`](super::World)'s lists: the
//! links table, what [`LinkStore`] keeps of it between passes, and the exposed ports.
use std::{collections::BTreeSet, net::IpAddr};

use anyhow::{Result, bail};

use super::{Shared, record};
use crate::{
    choice::{Kind, Origin},
    datapath::{
        EgressPlan, EgressRecord, ExistingConnections, ExposedPort, Exposure, LinkRecord, Traffic,
    },
    endpoint::Endpoint,
    engine::{
        PortStore,
        egress::EgressStore,
        links::{LinkStore, LinkTable, Resolved},
    },
    family::Families,
    netlink::Interface,
};

/// The links table: [`World::links`](super::World::links).
pub(in crate::engine::tests) struct FakeLinks(pub(super) Shared);

impl LinkTable for FakeLinks {
    type Link = Resolved;

    fn links(&mut self) -> Result<Vec<LinkRecord>> {
        let mut world = self.0.world();
        world.link_reads += 1;
        Ok(world.links.clone())
    }

    fn complete(&mut self, _: &LinkRecord, _: &Resolved) -> bool {
        true
    }

    fn remove(&mut self, low: u32, high: u32) -> Result<()> {
        self.0
            .world()
            .links
            .retain(|l| (l.low_ifindex, l.high_ifindex) != (low, high));
        Ok(())
    }

    fn install(&mut self, link: &Resolved, kind: Kind, families: Families) -> Result<()> {
        let mut world = self.0.world();
        if world.failing_installs > 0 {
            world.failing_installs -= 1;
            bail!("the links map is full");
        }
        let (x, y) = (link.a.host_ifindex, link.b.host_ifindex);
        world
            .links
            .retain(|l| (l.low_ifindex, l.high_ifindex) != (x.min(y), x.max(y)));
        world.links.push(LinkRecord {
            families,
            ..record(x, y, kind, Origin::Watch)
        });
        Ok(())
    }
}

impl PortStore for FakeLinks {
    fn exposed(&mut self) -> Result<Vec<ExposedPort>> {
        Ok(self.0.world().exposed.clone())
    }

    fn expose(&mut self, e: &Exposure<'_>) -> Result<usize> {
        let mut world = self.0.world();
        if world.failing_exposures > 0 {
            world.failing_exposures -= 1;
            bail!("the exposures map is full");
        }
        let veth = e.endpoint.host_ifindex;
        world.exposed.retain(|p| p.veth_ifindex != veth);
        for m in e.ports {
            world.exposed.push(ExposedPort {
                container: e.container.to_owned(),
                veth_ifindex: veth,
                nic_ifindex: m.nic_ifindex,
                host_addr: m.host_addr,
                protocol: if m.udp { "udp" } else { "tcp" },
                host_port: m.host_port,
                container_addr: m.container_addr,
                container_port: m.container_port,
                origin: e.origin,
                bypasses_firewall: e.bypass_firewall,
                created_unix_secs: 0,
                inbound: Traffic::default(),
                outbound: Traffic::default(),
                passed_packets: 0,
                refused_packets: 0,
            });
        }
        Ok(e.ports.len())
    }

    fn unexpose(&mut self, veth_ifindex: u32, existing: ExistingConnections) -> Result<()> {
        let mut world = self.0.world();
        world.exposed.retain(|p| p.veth_ifindex != veth_ifindex);
        world.unexposed.push((veth_ifindex, existing));
        Ok(())
    }

    fn follow_tcp_switches(&mut self) -> Result<bool> {
        self.0.world().switches_followed += 1;
        Ok(false)
    }
}

impl LinkStore for FakeLinks {
    fn collect_garbage(&mut self, host: &[Interface]) -> Result<usize> {
        let present: BTreeSet<u32> = host.iter().map(|i| i.index).collect();
        let mut world = self.0.world();
        let before = world.links.len();
        world
            .links
            .retain(|l| present.contains(&l.low_ifindex) && present.contains(&l.high_ifindex));
        Ok(before - world.links.len())
    }

    fn attachment_pinned(&self, _: Kind, _: u32) -> bool {
        true
    }

    fn refresh_sources(&mut self, _: &[&Endpoint]) -> Result<usize> {
        Ok(0)
    }

    fn recorded_addresses(&mut self, ifindex: u32) -> Result<Option<Vec<IpAddr>>> {
        let world = self.0.world();
        Ok(world
            .name_of_veth(ifindex)
            .and_then(|name| world.addrs.get(&name).copied())
            .map(|addr| vec![addr]))
    }

    fn set_families(&mut self, low: u32, high: u32, families: Families) -> Result<()> {
        let mut world = self.0.world();
        for l in &mut world.links {
            if (l.low_ifindex, l.high_ifindex) == (low, high) {
                l.families = families;
            }
        }
        Ok(())
    }
}

impl EgressStore for FakeLinks {
    fn egress(&mut self) -> Result<Vec<EgressRecord>> {
        Ok(self.0.world().egress.clone())
    }

    fn egress_off(&mut self, veth_ifindex: u32) -> Result<()> {
        let mut world = self.0.world();
        world.egress.retain(|r| r.veth_ifindex != veth_ifindex);
        world.egress_off.push(veth_ifindex);
        Ok(())
    }

    fn egress_on(&mut self, plan: &EgressPlan) -> Result<()> {
        self.0.world().egress.push(EgressRecord {
            container: plan.container.clone(),
            veth_ifindex: plan.endpoint.host_ifindex,
            nic_ifindex: plan.nic_ifindex,
            addr: plan.addr,
            created_unix_secs: 0,
            outbound: Traffic::default(),
            inbound: Traffic::default(),
            passed_packets: 0,
        });
        Ok(())
    }

    fn follow_egress_sysctls(&mut self) -> Result<bool> {
        self.0.world().timeouts_followed += 1;
        Ok(false)
    }
}
