//! One container's published ports as a planner decided them, kept whole: what the watch diffs
//! against the pinned table and `dxdp bench-ingress` writes again round by round. Below the
//! planners (the engine's, `expose`'s) and the bench alike, above only the datapath's borrowed
//! [`Exposure`], which is what gets installed.
use dxdp_common::MacAddr;

use crate::{
    choice::Origin,
    datapath::{Exposure, PortMapping},
    endpoint::Endpoint,
};

/// One container's ports to take from the NIC, as a planner decided them
/// ([`crate::engine::ports::plan_container`]): the [`Exposure`] the datapath installs, owning its
/// parts, so that the watch keeps it for its diff and `dxdp bench-ingress` writes it again round
/// by round.
#[derive(Clone, Debug)]
pub struct ContainerExposure {
    pub container: String,
    pub endpoint: Endpoint,
    pub gateway_mac: MacAddr,
    pub ports: Vec<PortMapping>,
    pub origin: Origin,
    pub bypass_firewall: bool,
}

impl ContainerExposure {
    pub fn exposure(&self) -> Exposure<'_> {
        Exposure {
            container: &self.container,
            endpoint: &self.endpoint,
            gateway_mac: self.gateway_mac,
            ports: &self.ports,
            origin: self.origin,
            bypass_firewall: self.bypass_firewall,
        }
    }
}
