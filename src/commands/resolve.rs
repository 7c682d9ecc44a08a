//! Turning the two endpoints a user named into endpoints on one bridge: the host's, or an
//! overlay network's `br0` inside its sandbox.
use anyhow::{Result, anyhow, bail};

use crate::{
    docker::{Docker, endpoint_on},
    endpoint::{Endpoint, EndpointSpec},
    netlink::{self, Interface},
    overlay::Sandbox,
    plan,
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
    let a = docker.find(ra).await?;
    let b = docker.find(rb).await?;
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
