//! From a container on a network to its endpoint, by netns inspection: enter the container's
//! namespace, find the interface with Docker's MAC for that network, follow IFLA_LINK to the
//! host veth, and check the veth hangs on that network's bridge.
use anyhow::{Result, anyhow, bail};

use super::Container;
use crate::{
    endpoint::{self, Endpoint},
    netlink::Interface,
    netns::NetnsPath,
};

/// The endpoint of `container` on `network_id`.
pub fn endpoint_on(
    container: &Container,
    network_id: &str,
    host: &[Interface],
) -> Result<Endpoint> {
    if let Some(remote) = &container.remote {
        // A task of another node: reached through the overlay's VXLAN device in this sandbox.
        let name = &container.view.name;
        let Some((_, addr)) = remote.addrs.iter().find(|(net, _)| net == network_id) else {
            bail!("task {name} of another node is not on network {network_id}");
        };
        return crate::overlay::remote_task_endpoint(name, *addr, host);
    }
    if let Some(why) = container.unlinkable() {
        bail!(why);
    }
    let attachment = container.attachment(network_id)?;
    let name = &container.view.name;
    let net = &attachment.network.name;
    let pid = container
        .pid
        .ok_or_else(|| anyhow!("container {name} has no process"))?;
    let Some(mac) = attachment.mac else {
        bail!("container {name} has no MAC address on network {net}");
    };
    let ep = endpoint::locate(name.clone(), NetnsPath::of_pid(pid), None, Some(mac), host)?;
    if let Some(bridge) = &attachment.bridge
        && &ep.bridge_name != bridge
    {
        bail!(
            "container {name}: its veth {} on network {net} hangs on {} instead of the \
             network's bridge {bridge}",
            ep.host_ifname,
            ep.bridge_name
        );
    }
    Ok(ep)
}
