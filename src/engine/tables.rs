//! The real tables of every kind of fast path ([`PinnedTables`]): the pinned datapath of this
//! host, installing links between endpoints the watch resolved from Docker ([`LinkTable`],
//! [`LinkStore`]), exposing published ports ([`PortStore`]) and holding the egress fast paths
//! ([`EgressStore`]). The unit tests have fakes.
use std::net::IpAddr;

use anyhow::Result;

use super::{
    egress::EgressStore,
    links::{LinkStore, LinkTable, Resolved},
    ports::PortStore,
};
use crate::{
    choice::{Kind, Origin},
    datapath::{
        Datapath, EgressPlan, EgressRecord, ExistingConnections, ExposedPort, Exposure, LinkRecord,
        LinkRequest,
    },
    endpoint::Endpoint,
    family::Families,
    netlink::Interface,
};

/// The pinned datapath, with the host's interfaces as read at the start of the pass.
pub struct PinnedTables {
    pub datapath: Datapath,
    pub host: Vec<Interface>,
}

impl LinkTable for PinnedTables {
    type Link = Resolved;

    fn links(&mut self) -> Result<Vec<LinkRecord>> {
        self.datapath.links()
    }

    fn complete(&mut self, record: &LinkRecord, link: &Resolved) -> bool {
        // Each end's own attachment: a veth's program, or a task of another node's tunnel's.
        self.datapath.end_attached(record.datapath, &link.a)
            && self.datapath.end_attached(record.datapath, &link.b)
            // A map that cannot be read counts as changed: installing again says why.
            && self.datapath.records(&link.a).unwrap_or(false)
            && self.datapath.records(&link.b).unwrap_or(false)
    }

    fn remove(&mut self, low_ifindex: u32, high_ifindex: u32) -> Result<()> {
        self.datapath.remove(low_ifindex, high_ifindex).map(drop)
    }

    fn install(&mut self, link: &Resolved, kind: Kind, families: Families) -> Result<()> {
        let request = LinkRequest {
            a: &link.a,
            b: &link.b,
            kind,
            origin: Origin::Watch,
            network: &link.network,
            bypass_firewall: link.bypass_firewall,
            families,
        };
        self.datapath.install(&request, &self.host).map(drop)
    }
}

impl LinkStore for PinnedTables {
    fn collect_garbage(&mut self, host: &[Interface]) -> Result<usize> {
        self.datapath.collect_garbage(host)
    }

    fn attachment_pinned(&self, kind: Kind, ifindex: u32) -> bool {
        self.datapath.attachment_pinned(kind, ifindex)
    }

    fn refresh_sources(&mut self, endpoints: &[&Endpoint]) -> Result<usize> {
        self.datapath.refresh_sources(endpoints.iter().copied())
    }

    fn recorded_addresses(&mut self, ifindex: u32) -> Result<Option<Vec<IpAddr>>> {
        self.datapath.recorded_addresses(ifindex)
    }

    fn set_families(&mut self, low: u32, high: u32, families: Families) -> Result<()> {
        self.datapath.set_families(low, high, families).map(drop)
    }
}

impl PortStore for PinnedTables {
    fn exposed(&mut self) -> Result<Vec<ExposedPort>> {
        self.datapath.exposed()
    }

    fn expose(&mut self, exposure: &Exposure<'_>) -> Result<usize> {
        self.datapath.expose(exposure)
    }

    fn unexpose(&mut self, veth_ifindex: u32, existing: ExistingConnections) -> Result<()> {
        self.datapath.unexpose(veth_ifindex, existing).map(drop)
    }

    fn mirror_route_mtus(&mut self) -> Result<usize> {
        self.datapath.mirror_route_mtus()
    }

    fn follow_tcp_switches(&mut self) -> Result<bool> {
        self.datapath.follow_tcp_switches()
    }
}

impl EgressStore for PinnedTables {
    fn egress(&mut self) -> Result<Vec<EgressRecord>> {
        self.datapath.egress()
    }

    fn egress_off(&mut self, veth_ifindex: u32) -> Result<()> {
        self.datapath.egress_off(veth_ifindex).map(drop)
    }

    fn egress_on(&mut self, plan: &EgressPlan) -> Result<()> {
        // Before anything is made, as `dxdp egress on` checks: a kernel that cannot run it.
        crate::datapath::egress_available()?;
        self.datapath.egress_on(plan)
    }

    fn follow_egress_sysctls(&mut self) -> Result<bool> {
        self.datapath.follow_egress_sysctls()
    }
}
