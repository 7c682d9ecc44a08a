//! Turning the two endpoints a user named into endpoints on one bridge.
use anyhow::{Result, anyhow, bail};

use crate::{
    docker::{Docker, endpoint_on},
    endpoint::{Endpoint, EndpointSpec},
    netlink::Interface,
    plan,
};

/// A resolved pair and the name of the network that carries it.
pub struct Pair {
    pub a: Endpoint,
    pub b: Endpoint,
    pub network: String,
}

pub fn resolve_pair(a: &EndpointSpec, b: &EndpointSpec, host: &[Interface]) -> Result<Pair> {
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
            Ok(Pair { a, b, network })
        }
    }
}

async fn containers(ra: &str, rb: &str, host: &[Interface]) -> Result<Pair> {
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
    Ok(Pair {
        a: endpoint_on(&a, &net.id, host)?,
        b: endpoint_on(&b, &net.id, host)?,
        network: net.name.clone(),
    })
}
