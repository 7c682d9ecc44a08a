//! `dxdp expose CONTAINER` / `dxdp unexpose CONTAINER`: a container's published ports straight
//! from the NIC into it, and back to Docker's path (issue 24).
use std::{path::Path, process::ExitCode};

use anyhow::{Result, bail};

use crate::{
    cli::{ExposeArgs, UnexposeArgs},
    datapath::{Capacity, Datapath, ExistingConnections, ExposedPort},
    docker::{Container, Docker, PublishedPort},
    engine,
    exposure::ContainerExposure,
    netlink::{self, Interface},
    netns::NetnsPath,
    ports::describe,
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
/// Docker's path (unless `bypass_firewall`): the watch's planner, for this one container
/// ([`engine::ports::plan_by_hand`]). Changes nothing.
pub(super) fn prepare(
    reference: &str,
    nic_names: &[String],
    bypass_firewall: bool,
    host: &[Interface],
) -> Result<ContainerExposure> {
    let found = super::runtime()?.block_on(find(reference))?;
    let plan = engine::ports::plan_by_hand(
        &found.container,
        &found.published,
        nic_names,
        bypass_firewall,
        host,
    )??;
    Ok(plan)
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
