//! From a container on a network to its endpoint, by netns inspection: enter the container's
//! namespace, find the interface with Docker's MAC for that network, follow IFLA_LINK to the
//! host veth, and check the veth hangs on that network's bridge.
use anyhow::{Result, anyhow};

use super::Container;
use crate::{
    endpoint::{self, Endpoint, EndpointError},
    netlink::Interface,
    netns::NetnsPath,
};

/// The endpoint of `container` on `network_id`, for callers that only report why not.
pub fn endpoint_on(
    container: &Container,
    network_id: &str,
    host: &[Interface],
) -> Result<Endpoint> {
    find_endpoint(container, network_id, host).map_err(EndpointError::into_inner)
}

/// The endpoint of `container` on `network_id`, or why not: a namespace this process may not
/// open is [`EndpointError::Denied`], anything else [`EndpointError::Missing`].
pub fn find_endpoint(
    container: &Container,
    network_id: &str,
    host: &[Interface],
) -> Result<Endpoint, EndpointError> {
    let missing = EndpointError::Missing;
    if let Some(remote) = &container.remote {
        // A task of another node: reached through the overlay's VXLAN device in this sandbox.
        let name = &container.view.name;
        let Some((_, addr)) = remote.addrs.iter().find(|(net, _)| net == network_id) else {
            return Err(missing(anyhow!(
                "task {name} of another node is not on network {network_id}"
            )));
        };
        return crate::overlay::remote_task_endpoint(name, *addr, host).map_err(missing);
    }
    if let Some(why) = container.unlinkable() {
        return Err(missing(anyhow!(why)));
    }
    let attachment = container.attachment(network_id).map_err(missing)?;
    let name = &container.view.name;
    let net = &attachment.network.name;
    let pid = container
        .pid
        .ok_or_else(|| missing(anyhow!("container {name} has no process")))?;
    let Some(mac) = attachment.mac else {
        return Err(missing(anyhow!(
            "container {name} has no MAC address on network {net}"
        )));
    };
    let ep = endpoint::locate(name.clone(), NetnsPath::of_pid(pid), None, Some(mac), host)?;
    if let Some(bridge) = &attachment.bridge
        && &ep.bridge_name != bridge
    {
        return Err(missing(anyhow!(
            "container {name}: its veth {} on network {net} hangs on {} instead of the \
             network's bridge {bridge}",
            ep.host_ifname,
            ep.bridge_name
        )));
    }
    Ok(ep)
}
