//! `dxdp link A B`: the two containers' endpoints found (on one bridge, or one overlay's sandbox
//! on this node or across nodes), the pair judged by the same planner the watch uses
//! (`engine::links`), and both directions installed, or nothing.
use std::{path::Path, process::ExitCode};

use anyhow::Result;

use super::resolve::{Pair, resolve_placed_pair};
use crate::{
    choice::Origin,
    cli::LinkArgs,
    datapath::{Capacity, Datapath, Installed, LinkRequest},
    engine::links::{self, Open},
    firewall, netlink,
    netns::NetnsPath,
};

pub fn run(pin_dir: &Path, capacity: Capacity, args: LinkArgs) -> Result<ExitCode> {
    let host = netlink::interfaces(&NetnsPath::host())?;
    let (pair, sandbox) = resolve_placed_pair(&args.a, &args.b, &host)?;
    crate::overlay::remove_dead_sites(pin_dir)?;
    // Inside a sandbox, its veths, bridge and rules are the "host" of everything below.
    let line = crate::overlay::in_site(sandbox.as_ref(), pin_dir, |dir| {
        install(dir, capacity, &args, &pair)
    })?;
    let inside = sandbox
        .map(|s| format!(" in sandbox {}", s.name))
        .unwrap_or_default();
    println!("{line}{inside}");
    Ok(ExitCode::SUCCESS)
}

/// Checks the rules, installs the link in the datapath pinned at `pin_dir`, and says what it
/// did in one line.
fn install(pin_dir: &Path, capacity: Capacity, args: &LinkArgs, pair: &Pair) -> Result<String> {
    let Pair { a, b, network } = pair;
    // A family the rules close stays on the bridge; the link carries the others. The watch's
    // planner judges the pair.
    let mut read;
    let rules = if args.bypass_firewall {
        None
    } else {
        read = firewall::read_for_a_pair("link with --bypass-firewall")?;
        Some(&mut read)
    };
    let Open { families, note } = links::judge(rules, a, b, Origin::Manual)??;
    let kind = args.datapath.resolve();
    let host = netlink::interfaces(&NetnsPath::host())?;
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    for program in datapath.upgrade_programs()? {
        println!("replaced the pinned {program} program with this binary's in every attachment");
    }
    datapath.collect_garbage(&host)?;
    let outcome = datapath.install(
        &LinkRequest {
            a,
            b,
            kind,
            origin: Origin::Manual,
            network,
            bypass_firewall: args.bypass_firewall,
            families,
        },
        &host,
    )?;
    let verb = match outcome {
        Installed::New => "linked",
        Installed::AlreadyThere => "already linked",
        Installed::FamiliesChanged => "relinked",
    };
    let via = if *network == a.bridge_name {
        network.clone()
    } else {
        format!("{network} ({})", a.bridge_name)
    };
    let only = note.map(|n| format!(" ({n})")).unwrap_or_default();
    Ok(format!(
        "{verb} {} ({}) <-> {} ({}) on {via} via {kind}{only}",
        a.label, a.host_ifname, b.label, b.host_ifname
    ))
}
