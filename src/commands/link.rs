use std::{path::Path, process::ExitCode};

use anyhow::Result;

use super::resolve::{Pair, resolve_pair};
use crate::{
    cli::LinkArgs,
    datapath::{Capacity, Datapath, Installed, LinkRequest, Origin},
    family::Families,
    firewall, netlink,
    netns::NetnsPath,
};

pub fn run(pin_dir: &Path, capacity: Capacity, args: LinkArgs) -> Result<ExitCode> {
    let host = netlink::interfaces(&NetnsPath::host())?;
    let Pair { a, b, network } = resolve_pair(&args.a, &args.b, &host)?;
    // A family the rules close stays on the bridge; the link carries the others.
    let (families, note) = if args.bypass_firewall {
        (Families::ALL, None)
    } else {
        let verdict = firewall::check(&a, &b, "link with --bypass-firewall")?;
        (verdict.open(), verdict.note())
    };
    let kind = args.datapath.resolve();
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    for program in datapath.upgrade_programs()? {
        println!("replaced the pinned {program} program with this binary's in every attachment");
    }
    datapath.collect_garbage(&host)?;
    let outcome = datapath.install(
        &LinkRequest {
            a: &a,
            b: &b,
            kind,
            origin: Origin::Manual,
            network: &network,
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
    let via = if network == a.bridge_name {
        network.clone()
    } else {
        format!("{network} ({})", a.bridge_name)
    };
    let only = note.map(|n| format!(" ({n})")).unwrap_or_default();
    println!(
        "{verb} {} ({}) <-> {} ({}) on {via} via {kind}{only}",
        a.label, a.host_ifname, b.label, b.host_ifname
    );
    Ok(ExitCode::SUCCESS)
}
