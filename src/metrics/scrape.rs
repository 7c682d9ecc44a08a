//! What the datapath's pinned maps hold at scrape time: the host's, and each live overlay
//! sandbox's (read from inside the sandbox, whose ifindexes are its own).
use std::path::Path;

use anyhow::Result;
use tracing::debug;

use crate::{
    choice::Kind,
    datapath::{
        Capacity, ConnectionTables, Datapath, EgressRecord, ExposedPort, InterfaceCounters,
        LinkRecord,
    },
    netlink::Interface,
};

/// A managed veth: its ifindex, name, datapath and counters.
pub(crate) type InterfaceState = (u32, String, Kind, InterfaceCounters);

/// The pinned state at scrape time.
pub(crate) struct PinnedState {
    pub(crate) links: Vec<LinkRecord>,
    /// Published ports taken from the NIC (`dxdp expose`, the `dxdp.ingress` label).
    pub(crate) exposed: Vec<ExposedPort>,
    /// Containers whose outbound connections leave straight by the NIC (`dxdp egress on`, the
    /// `dxdp.egress` label), each with its NIC's name (empty where that is gone).
    pub(crate) egress: Vec<(EgressRecord, String)>,
    pub(crate) interfaces: Vec<InterfaceState>,
    pub(crate) capacity: Capacity,
    /// How full the connection tables of exposed ports are; `None` without a pin directory.
    pub(crate) connections: Option<ConnectionTables>,
    /// The links of each live overlay sandbox, by sandbox name.
    pub(crate) sites: Vec<SiteState>,
    /// Overlay sandboxes whose pinned state remains though they are gone.
    pub(crate) gone_sites: usize,
}

/// An overlay network's sandbox: its links and managed veths.
pub(crate) struct SiteState {
    /// `1-<network id prefix>`.
    pub(crate) sandbox: String,
    pub(crate) links: Vec<LinkRecord>,
    pub(crate) interfaces: Vec<InterfaceState>,
}

pub(super) fn read_state(pin_dir: &Path, capacity: Capacity) -> Result<PinnedState> {
    if !pin_dir.exists() {
        return Ok(PinnedState {
            links: vec![],
            exposed: vec![],
            egress: vec![],
            interfaces: vec![],
            capacity,
            connections: None,
            sites: vec![],
            gone_sites: 0,
        });
    }
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    let host = crate::netlink::interfaces(&crate::netns::NetnsPath::host())?;
    let (links, interfaces) = links_and_interfaces(&mut datapath, &host)?;
    let exposed = datapath.exposed()?;
    let egress = with_nic_names(datapath.egress()?, &host);
    let connections = Some(datapath.connection_tables()?);
    drop(datapath);
    let (mut sites, mut gone_sites) = (Vec::new(), 0);
    for site in crate::overlay::sites(pin_dir) {
        let Some(sandbox) = &site.sandbox else {
            gone_sites += 1;
            continue;
        };
        let read = sandbox.run(|| {
            let mut datapath = Datapath::open(&site.pin_dir, capacity)?;
            let here = crate::netlink::interfaces(&crate::netns::NetnsPath::host())?;
            links_and_interfaces(&mut datapath, &here)
        });
        match read {
            Ok((links, interfaces)) => sites.push(SiteState {
                sandbox: site.name,
                links,
                interfaces,
            }),
            // The sandbox went between the listing and the read: the next scrape counts it
            // gone.
            Err(e) => debug!(sandbox = %site.name, "metrics: {e:#}"),
        }
    }
    Ok(PinnedState {
        links,
        exposed,
        egress,
        interfaces,
        capacity,
        connections,
        sites,
        gone_sites,
    })
}

/// Each egress record with its NIC's name in `host` (empty where it is gone).
fn with_nic_names(records: Vec<EgressRecord>, host: &[Interface]) -> Vec<(EgressRecord, String)> {
    records
        .into_iter()
        .map(|r| {
            let nic = name_of(host, r.nic_ifindex);
            (r, nic)
        })
        .collect()
}

/// The name of the interface `index` in `here`; empty where it is gone.
fn name_of(here: &[Interface], index: u32) -> String {
    here.iter()
        .find(|i| i.index == index)
        .map(|i| i.name.clone())
        .unwrap_or_default()
}

/// A datapath's links and managed veths, the veths named as `here` (the calling thread's
/// namespace's interfaces) names them.
fn links_and_interfaces(
    datapath: &mut Datapath,
    here: &[Interface],
) -> Result<(Vec<LinkRecord>, Vec<InterfaceState>)> {
    let mut interfaces = Vec::new();
    for (ifindex, kind) in datapath.interfaces()? {
        let name = name_of(here, ifindex);
        let counters = datapath.counters(ifindex)?.unwrap_or_default();
        interfaces.push((ifindex, name, kind, counters));
    }
    interfaces.sort_by_key(|i| i.0);
    Ok((datapath.links()?, interfaces))
}
