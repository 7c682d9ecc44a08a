//! `dxdp egress on|off CONTAINER`: a container's outbound connections straight to the NIC once
//! conntrack holds them established, and back to Docker's path (issue 36, docs/egress.md).
use std::{path::Path, process::ExitCode};

use anyhow::{Result, bail};

use crate::{
    cli::{EgressAction, EgressArgs},
    datapath::{Capacity, Datapath, EgressRecord, egress_available},
    docker::Docker,
    engine, firewall,
    netlink::{self},
    netns::NetnsPath,
};

pub fn run(pin_dir: &Path, capacity: Capacity, args: EgressArgs) -> Result<ExitCode> {
    match args.action {
        EgressAction::On { container, nic } => on(pin_dir, capacity, &container, nic.as_deref()),
        EgressAction::Off { container } => off(pin_dir, capacity, &container),
    }
}

fn on(pin_dir: &Path, capacity: Capacity, reference: &str, nic: Option<&str>) -> Result<ExitCode> {
    let host = netlink::interfaces(&NetnsPath::host())?;
    let container = super::runtime()?.block_on(async {
        let docker = Docker::connect().await?;
        docker.find(reference).await
    })?;
    if let Some(why) = container.unlinkable() {
        bail!(why.replace("link", "take its outbound connections to the NIC"));
    }
    // Before anything is made: the pin directory is not even opened on a kernel that cannot.
    egress_available()?;
    let rules = firewall::Ruleset::read()?;
    let plan = match engine::egress::plan_by_hand(&container, nic, &host, &rules)? {
        Ok(plan) => plan,
        Err(refusal) => bail!(refusal),
    };
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    for program in datapath.upgrade_programs()? {
        println!("replaced the pinned {program} program with this binary's in every attachment");
    }
    datapath.egress_on(&plan)?;
    println!(
        "egress on: {} ({}) leaves by {} once conntrack holds a connection established",
        plan.container, plan.addr, plan.nic
    );
    if plan
        .endpoint
        .addrs
        .iter()
        .any(|a| a.is_ipv6() && !is_link_local(a))
    {
        println!("its IPv6 connections stay on Docker's path (the fast path carries IPv4 only)");
    }
    Ok(ExitCode::SUCCESS)
}

fn is_link_local(addr: &std::net::IpAddr) -> bool {
    matches!(addr, std::net::IpAddr::V6(a) if a.is_unicast_link_local())
}

fn off(pin_dir: &Path, capacity: Capacity, reference: &str) -> Result<ExitCode> {
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    let enabled = datapath.egress()?;
    // By name as recorded, or by the veths of the container Docker knows by this reference.
    let mut veths: Vec<u32> = enabled
        .iter()
        .filter(|r| r.container == reference)
        .map(|r| r.veth_ifindex)
        .collect();
    if veths.is_empty()
        && let Ok(container) =
            super::runtime()?.block_on(async { Docker::connect().await?.find(reference).await })
    {
        let names = [container.view.name.as_str()];
        veths.extend(
            enabled
                .iter()
                .filter(|r| names.contains(&r.container.as_str()))
                .map(|r| r.veth_ifindex),
        );
    }
    let mut removed: Vec<EgressRecord> = Vec::new();
    for veth in veths {
        removed.extend(datapath.egress_off(veth)?);
    }
    if removed.is_empty() {
        bail!("{reference} has no egress fast path; `dxdp status` lists those that do");
    }
    for r in &removed {
        println!(
            "egress off: {} ({}) back on Docker's path; carried {} packets out, {} back",
            r.container, r.addr, r.outbound.packets, r.inbound.packets
        );
    }
    Ok(ExitCode::SUCCESS)
}
