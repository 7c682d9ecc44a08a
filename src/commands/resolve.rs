//! Turning the two endpoints a user named into endpoints on one bridge: the host's, or an
//! overlay network's `br0` inside its sandbox.
use anyhow::{Result, anyhow, bail};

use crate::{
    docker::{Container, Docker, endpoint_on},
    endpoint::{Endpoint, EndpointSpec},
    netlink::{self, Interface},
    overlay::Sandbox,
    plan::{self, ContainerView},
};

/// A resolved pair and the name of the network that carries it.
pub struct Pair {
    pub a: Endpoint,
    pub b: Endpoint,
    pub network: String,
}

/// A pair and, for two containers on an overlay network, the sandbox whose bridge carries it
/// (the endpoints' veths are then the sandbox's, not the host's).
pub fn resolve_placed_pair(
    a: &EndpointSpec,
    b: &EndpointSpec,
    host: &[Interface],
) -> Result<(Pair, Option<Sandbox>)> {
    match (a, b) {
        (EndpointSpec::Container { reference: ra }, EndpointSpec::Container { reference: rb }) => {
            super::runtime()?.block_on(containers(ra, rb, host))
        }
        (EndpointSpec::Container { .. }, _) | (_, EndpointSpec::Container { .. }) => {
            bail!("{a} and {b}: link two containers, or two netns:/pid: endpoints, not one of each")
        }
        _ => {
            let a = Endpoint::resolve_local(a, host)?;
            let b = Endpoint::resolve_local(b, host)?;
            let network = a.bridge_name.clone();
            Ok((Pair { a, b, network }, None))
        }
    }
}

async fn containers(ra: &str, rb: &str, host: &[Interface]) -> Result<(Pair, Option<Sandbox>)> {
    let docker = Docker::connect().await?;
    let (a, b) = match (docker.find(ra).await, docker.find(rb).await) {
        (Ok(a), Ok(b)) => (a, b),
        // One of them is not on this node: a task of another node on a shared overlay?
        (Ok(a), Err(missing)) => return across_nodes(&docker, &a, rb, missing, false).await,
        (Err(missing), Ok(b)) => return across_nodes(&docker, &b, ra, missing, true).await,
        (Err(missing), Err(_)) => return Err(missing),
    };
    if a.view.id == b.view.id {
        bail!("cannot link container {} to itself", a.view.name);
    }
    for c in [&a, &b] {
        if let Some(why) = c.unlinkable() {
            bail!(why);
        }
    }
    let net = plan::network_for_link(&a.view, &b.view).map_err(|reasons| {
        anyhow!(
            "cannot link {} and {}: {}",
            a.view.name,
            b.view.name,
            reasons.join("; ")
        )
    })?;
    let pair_on = |veths_side: &[Interface]| -> Result<Pair> {
        Ok(Pair {
            a: endpoint_on(&a, &net.id, veths_side)?,
            b: endpoint_on(&b, &net.id, veths_side)?,
            network: net.name.clone(),
        })
    };
    if net.driver != plan::OVERLAY_DRIVER {
        return Ok((pair_on(host)?, None));
    }
    // The pair's veths are found from inside the sandbox, which holds their far ends and the
    // bridge.
    let sandbox = Sandbox::of_network(&net.name, &net.id)?;
    let pair = sandbox.run(|| pair_on(&netlink::interfaces(&crate::netns::NetnsPath::host())?))?;
    Ok((pair, Some(sandbox)))
}

/// A pair of a container of this node, `local`, and a task of another node called `name` on
/// one of `local`'s overlay networks (`remote_first`: the user named the remote one first).
/// Not found there either: the error of the local lookup (`missing`), which says what to check.
async fn across_nodes(
    docker: &Docker,
    local: &Container,
    name: &str,
    missing: anyhow::Error,
    remote_first: bool,
) -> Result<(Pair, Option<Sandbox>)> {
    let mut found = None;
    for net in local
        .view
        .networks
        .iter()
        .filter(|n| n.driver == plan::OVERLAY_DRIVER)
    {
        let tasks = docker.overlay_tasks(&net.id).await?;
        if let Some(task) = tasks.into_iter().find(|t| t.name == name) {
            found = Some(task);
            break;
        }
    }
    let Some(task) = found else {
        return Err(missing);
    };
    if let Some(why) = local.unlinkable() {
        bail!(why);
    }
    // The other node's view of it is not ours to read: it is on the overlay, labels unknown.
    let remote_view = ContainerView {
        id: format!("task {name}"),
        name: name.to_owned(),
        running: true,
        networks: local
            .view
            .networks
            .iter()
            .filter(|n| n.driver == plan::OVERLAY_DRIVER)
            .cloned()
            .collect(),
        ..ContainerView::default()
    };
    let net = plan::network_for_link(&local.view, &remote_view).map_err(|reasons| {
        anyhow!(
            "cannot link {} and {name}: {}",
            local.view.name,
            reasons.join("; ")
        )
    })?;
    let sandbox = Sandbox::of_network(&net.name, &net.id)?;
    let pair = sandbox.run(|| {
        let here = netlink::interfaces(&crate::netns::NetnsPath::host())?;
        let near = endpoint_on(local, &net.id, &here)?;
        let far = crate::overlay::remote_endpoint(name, task.addr, &near, &here)?;
        let (a, b) = if remote_first {
            (far, near)
        } else {
            (near, far)
        };
        Ok(Pair {
            a,
            b,
            network: net.name.clone(),
        })
    })?;
    Ok((pair, Some(sandbox)))
}
