//! What the datapath's pinned maps hold at scrape time.
use std::path::Path;

use anyhow::Result;

use crate::{
    choice::Kind,
    datapath::{Capacity, ConnectionTables, Datapath, ExposedPort, InterfaceCounters, LinkRecord},
};

/// The pinned state at scrape time.
pub(crate) struct PinnedState {
    pub(crate) links: Vec<LinkRecord>,
    /// Published ports taken from the NIC (`dxdp expose`, the `dxdp.ingress` label).
    pub(crate) exposed: Vec<ExposedPort>,
    pub(crate) interfaces: Vec<(u32, String, Kind, InterfaceCounters)>,
    pub(crate) capacity: Capacity,
    /// How full the connection tables of exposed ports are; `None` without a pin directory.
    pub(crate) connections: Option<ConnectionTables>,
}

pub(super) fn read_state(pin_dir: &Path, capacity: Capacity) -> Result<PinnedState> {
    if !pin_dir.exists() {
        return Ok(PinnedState {
            links: vec![],
            exposed: vec![],
            interfaces: vec![],
            capacity,
            connections: None,
        });
    }
    let host = crate::netlink::interfaces(&crate::netns::NetnsPath::host())?;
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    let mut interfaces = Vec::new();
    for (ifindex, kind) in datapath.interfaces()? {
        let name = host
            .iter()
            .find(|i| i.index == ifindex)
            .map(|i| i.name.clone())
            .unwrap_or_default();
        let counters = datapath.counters(ifindex)?.unwrap_or_default();
        interfaces.push((ifindex, name, kind, counters));
    }
    interfaces.sort_by_key(|i| i.0);
    Ok(PinnedState {
        links: datapath.links()?,
        exposed: datapath.exposed()?,
        interfaces,
        capacity,
        connections: Some(datapath.connection_tables()?),
    })
}
