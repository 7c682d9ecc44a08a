//! `dxdp expose CONTAINER` / `dxdp unexpose CONTAINER`: a container's published ports straight
//! from the NIC into it, and back to Docker's path (issue 24).
use std::{path::Path, process::ExitCode};

use anyhow::{Result, bail};

use crate::{
    choice::Origin,
    cli::{ExposeArgs, UnexposeArgs},
    datapath::{Capacity, Datapath, ExistingConnections, ExposedPort, ExposurePlan},
    docker::{Container, Docker, PublishedPort},
    engine::ports::{Ingress, NotExposed, SEVERAL_NETWORKS, plan_container},
    firewall::{self, Ruleset},
    netlink::{self, Interface},
    netns::NetnsPath,
    ports::{describe, endpoint_of},
};

struct Found {
    container: Container,
    published: Vec<PublishedPort>,
}

async fn find(reference: &str) -> Result<Found> {
    let docker = Docker::connect().await?;
    let container = docker.find(reference).await?;
    if let Some(why) = container.unlinkable() {
        bail!(why.replace("link", "expose"));
    }
    let published: Vec<PublishedPort> = docker
        .published_ports()
        .await?
        .into_iter()
        .filter(|p| p.id == container.view.id)
        .collect();
    Ok(Found {
        container,
        published,
    })
}

/// The container's published ports on `nic_names` (the default route's if empty) as fast-path
/// entries, refused with the rule named where one could drop or change their packets on
/// Docker's path (unless `bypass_firewall`): the watch's planner, for this one container. Changes
/// nothing.
pub(super) fn prepare(
    reference: &str,
    nic_names: &[String],
    bypass_firewall: bool,
    host: &[Interface],
) -> Result<ExposurePlan> {
    let ingress = Ingress::of_host(host, Some(nic_names))?;
    let found = super::runtime()?.block_on(find(reference))?;
    let name = found.container.view.name.clone();
    let mesh = found
        .container
        .view
        .networks
        .iter()
        .find(|n| n.routing_mesh);
    if let (true, Some(mesh)) = (found.published.is_empty(), mesh) {
        bail!(
            "container {name} is on Swarm's routing mesh ({}): its service's ports are \
             published there, balanced by IPVS to tasks on any node, which a fast path into \
             this one container would bypass; publish with --publish mode=host,… to expose it",
            mesh.name
        );
    }
    if found.published.is_empty() {
        bail!(
            "container {name} publishes no ports; publish them (docker run -p HOST:CONTAINER) \
             and expose it again"
        );
    }
    let endpoint_for = |ip| endpoint_of(&found.container, ip, host).map_err(anyhow::Error::msg);
    // The rules are read once, and only when the mappings are there to be judged.
    let mut read: Option<Ruleset> = None;
    let rules = (!bypass_firewall).then_some(|port: &firewall::PublishedPort<'_>| {
        let rules = match &read {
            Some(rules) => rules,
            None => read.insert(Ruleset::read()?),
        };
        Ok(rules.published_port_blockers(port))
    });
    let planned = plan_container(
        &name,
        &found.published,
        &ingress,
        host,
        Origin::Manual,
        endpoint_for,
        rules,
    )?;
    match planned {
        Ok(plan) => Ok(plan),
        Err(NotExposed::NotOnTheNics) => {
            let on: Vec<&str> = ingress.nics.iter().map(|n| n.name.as_str()).collect();
            bail!(
                "none of {name}'s published ports is bound to an address of {} with an address \
                 of the container's family; name the NIC that holds the port's address with --nic",
                on.join(", ")
            )
        }
        Err(NotExposed::SeveralNetworks) => bail!("{name}'s {SEVERAL_NETWORKS}"),
        Err(NotExposed::Rule { port, rule, .. }) => bail!(
            "cannot expose {name} port {}: a rule may drop or change its packets on Docker's \
             path, and the fast path would skip it: {rule}; expose with --bypass-firewall to \
             skip such rules on purpose",
            describe(&port)
        ),
        Err(NotExposed::NoGatewayMac { bridge, .. }) => {
            bail!("bridge {bridge} has no MAC address")
        }
    }
}

pub fn run(pin_dir: &Path, capacity: Capacity, args: ExposeArgs) -> Result<ExitCode> {
    let host = netlink::interfaces(&NetnsPath::host())?;
    let plan = prepare(&args.container, &args.nics, args.bypass_firewall, &host)?;
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    for program in datapath.upgrade_programs()? {
        println!("replaced the pinned {program} program with this binary's in every attachment");
    }
    datapath.collect_garbage(&host)?;
    datapath.expose(&plan.exposure())?;
    for m in &plan.ports {
        println!("exposed {} {}", plan.container, describe(m));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn unexpose(pin_dir: &Path, capacity: Capacity, args: UnexposeArgs) -> Result<ExitCode> {
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    let exposed = datapath.exposed()?;
    // By name as recorded, or by the veths of the container Docker knows by this reference
    // (an ID prefix, or a container renamed since).
    let mut veths: Vec<u32> = exposed
        .iter()
        .filter(|p| p.container == args.container)
        .map(|p| p.veth_ifindex)
        .collect();
    if veths.is_empty()
        && let Ok(container) = super::runtime()?
            .block_on(async { Docker::connect().await?.find(&args.container).await })
    {
        let host = netlink::interfaces(&NetnsPath::host())?;
        for a in container.attachments.iter().filter(|a| a.bridge.is_some()) {
            if let Ok(e) = crate::docker::endpoint_on(&container, &a.network.id, &host) {
                veths.push(e.host_ifindex);
            }
        }
    }
    veths.sort_unstable();
    veths.dedup();
    let mut removed: Vec<ExposedPort> = Vec::new();
    for veth in veths {
        removed.extend(datapath.unexpose(veth, ExistingConnections::Drain)?);
    }
    if removed.is_empty() {
        bail!(
            "{} has no exposed ports; `dxdp status` lists those that are",
            args.container
        );
    }
    for p in &removed {
        println!(
            "unexposed {} {}/{} ({}): back on Docker's path",
            p.container, p.host_port, p.protocol, p.host_addr
        );
    }
    Ok(ExitCode::SUCCESS)
}
