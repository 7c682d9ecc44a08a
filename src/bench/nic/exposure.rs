//! Switching the container's exposure between Docker's path and the fast path, and putting it
//! back as it was found.
use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};

use super::{Route, RouteSwitch};
use crate::{
    datapath::{Capacity, Datapath, ExistingConnections, ExposedPort, PortMapping},
    exposure::ContainerExposure,
    netlink::Interface,
};

/// The container's exposure while the bench switches it, and putting back what it found: the
/// same ports, origin and firewall mark, or none. Undone when dropped, also after an error and
/// Ctrl-C.
pub struct ExposureSwitch {
    pin_dir: PathBuf,
    capacity: Capacity,
    plan: ContainerExposure,
    found: Option<ContainerExposure>,
    /// The client's address: its connections are forgotten when the fast path is switched off.
    client: IpAddr,
    pin_dir_existed: bool,
    restored: bool,
}

impl ExposureSwitch {
    /// Records the container's exposure now; nothing is changed yet.
    pub fn snapshot(
        pin_dir: &Path,
        capacity: Capacity,
        plan: ContainerExposure,
        client: IpAddr,
        host: &[Interface],
    ) -> Result<Self> {
        let pin_dir_existed = pin_dir.exists();
        let mut found = None;
        if pin_dir_existed {
            let veth = plan.endpoint.host_ifindex;
            let mut datapath = Datapath::open(pin_dir, capacity)?;
            let ports: Vec<ExposedPort> = datapath
                .exposed()?
                .into_iter()
                .filter(|p| p.veth_ifindex == veth)
                .collect();
            if !ports.is_empty() {
                found = Some(as_found(&ports, &plan, host)?);
            }
        }
        Ok(Self {
            pin_dir: pin_dir.to_path_buf(),
            capacity,
            plan,
            found,
            client,
            pin_dir_existed,
            restored: false,
        })
    }

    /// The exposure found at the start, if any.
    pub fn found(&self) -> Option<&ContainerExposure> {
        self.found.as_ref()
    }

    fn open(&self) -> Result<Datapath> {
        Datapath::open(&self.pin_dir, self.capacity)
    }
}

impl RouteSwitch for ExposureSwitch {
    fn set(&mut self, route: Route) -> Result<()> {
        match route {
            Route::Fast => self.expose(&self.plan.clone()),
            Route::Docker => self.unexpose(),
            // The wire does not cross the NIC: the exposure stays as the round before left it.
            Route::Wire => Ok(()),
        }
    }

    /// Packets the fast path has let into the container so far (its exposed ports' counters).
    fn carried(&self) -> Result<u64> {
        if !self.pin_dir.exists() {
            return Ok(0);
        }
        let veth = self.plan.endpoint.host_ifindex;
        Ok(self
            .open()?
            .exposed()?
            .iter()
            .filter(|p| p.veth_ifindex == veth)
            .map(|p| p.inbound.packets)
            .sum())
    }

    fn found_description(&self) -> String {
        match &self.found {
            Some(f) => format!("exposed ({} ports)", f.ports.len()),
            None => "not exposed".to_owned(),
        }
    }

    /// Puts back the exposure found at the start; removes a pin directory the bench created if
    /// nothing else is in it. Idempotent.
    fn restore(&mut self) -> Result<()> {
        if self.restored {
            return Ok(());
        }
        match self.found.clone() {
            Some(found) => self.expose(&found)?,
            None => self.unexpose()?,
        }
        if !self.pin_dir_existed && self.pin_dir.exists() {
            purge_if_empty(self.open()?)?;
        }
        self.restored = true;
        Ok(())
    }
}

impl ExposureSwitch {
    fn expose(&self, plan: &ContainerExposure) -> Result<()> {
        self.open()?
            .expose(&plan.exposure())
            .with_context(|| format!("cannot expose {}", plan.container))?;
        Ok(())
    }

    /// Unexposes the container and forgets the client's connections, which have all ended: a
    /// later connection from a reused client port must not find its replies on the fast path.
    fn unexpose(&self) -> Result<()> {
        if !self.pin_dir.exists() {
            return Ok(());
        }
        let veth = self.plan.endpoint.host_ifindex;
        let mut datapath = self.open()?;
        datapath
            .unexpose(veth, ExistingConnections::End)
            .with_context(|| format!("cannot unexpose {}", self.plan.container))?;
        datapath.forget_connections(veth, self.client)?;
        Ok(())
    }
}

impl Drop for ExposureSwitch {
    fn drop(&mut self) {
        if !self.restored
            && let Err(err) = self.restore()
        {
            let how = match &self.found {
                Some(_) => "dxdp expose",
                None => "dxdp unexpose",
            };
            eprintln!(
                "dxdp: error: could not put the exposure of {} back as it was: {err:#}; run \
                 `{how} {}`",
                self.plan.container, self.plan.container
            );
        }
    }
}

/// Removes the pin directory `datapath` opened if the bench was its last user: nothing linked,
/// exposed or enabled in it, as when the bench created it.
pub(super) fn purge_if_empty(mut datapath: Datapath) -> Result<()> {
    // Someone else may have linked or exposed something meanwhile.
    if datapath.links()?.is_empty()
        && datapath.interfaces()?.is_empty()
        && datapath.exposed()?.is_empty()
        && datapath.draining()?.is_empty()
        && datapath.egress()?.is_empty()
    {
        datapath.purge()?;
    }
    Ok(())
}

/// The exposure `ports` record, to write again: the bench's plan with the ports, origin and
/// firewall mark found.
fn as_found(
    ports: &[ExposedPort],
    plan: &ContainerExposure,
    host: &[Interface],
) -> Result<ContainerExposure> {
    let mappings = ports
        .iter()
        .map(|p| {
            let nic = host
                .iter()
                .find(|i| i.index == p.nic_ifindex)
                .map(|i| i.name.clone())
                .with_context(|| {
                    format!(
                        "{} is exposed on interface {}, which is gone",
                        p.container, p.nic_ifindex
                    )
                })?;
            Ok(PortMapping {
                nic_ifindex: p.nic_ifindex,
                nic,
                host_addr: p.host_addr,
                udp: p.protocol == "udp",
                host_port: p.host_port,
                container_addr: p.container_addr,
                container_port: p.container_port,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ContainerExposure {
        container: ports[0].container.clone(),
        ports: mappings,
        origin: ports[0].origin,
        bypass_firewall: ports[0].bypasses_firewall,
        ..plan.clone()
    })
}
