//! `dxdp unlink A B`: the pair's pinned link removed, both directions, where it was made (the
//! host's pins or an overlay sandbox's).
use std::{path::Path, process::ExitCode};

use anyhow::{Result, bail};

use super::resolve::resolve_placed_pair;
use crate::{
    cli::UnlinkArgs,
    datapath::{Capacity, Datapath, LinkRecord},
    netlink,
    netns::NetnsPath,
    overlay::{self, Sandbox},
};

pub fn run(pin_dir: &Path, capacity: Capacity, args: UnlinkArgs) -> Result<ExitCode> {
    crate::datapath::check_ancestors(pin_dir)?;
    if !pin_dir.exists() {
        bail!(
            "no link between {} and {}: nothing is pinned at {}",
            args.a,
            args.b,
            pin_dir.display()
        );
    }
    let (a, b) = (args.a.to_string(), args.b.to_string());
    // A sandbox that is gone took the pair's veths along; its pinned state goes now, saying
    // so when it held the link asked for.
    let in_dead = dead_sandbox_link(pin_dir, capacity, (&a, &b));
    overlay::remove_dead_sites(pin_dir)?;
    if let Some((sandbox, rec)) = in_dead {
        println!(
            "unlinked {} <-> {} in sandbox {sandbox}, which is gone",
            rec.low_name, rec.high_name
        );
        return Ok(ExitCode::SUCCESS);
    }
    let host = netlink::interfaces(&NetnsPath::host())?;
    // The live endpoints name the datapath (the host's or an overlay sandbox's) and the veths;
    // an endpoint that is gone, or whose veth was replaced, is still known by the name it was
    // linked under, in whichever datapath holds it.
    let live = resolve_placed_pair(&args.a, &args.b, &host).ok();
    let mut places: Vec<Option<Sandbox>> = Vec::new();
    if let Some((_, sandbox)) = &live {
        places.push(sandbox.clone());
    }
    let others = std::iter::once(None).chain(
        overlay::sites(pin_dir)
            .into_iter()
            .filter_map(|s| s.sandbox)
            .map(Some),
    );
    for place in others {
        if !places.contains(&place) {
            places.push(place);
        }
    }
    for place in places {
        let veths = live
            .as_ref()
            .filter(|(_, sandbox)| *sandbox == place)
            .map(|(pair, _)| (pair.a.host_ifindex, pair.b.host_ifindex));
        let removed = overlay::in_site(place.as_ref(), pin_dir, |dir| {
            remove(dir, capacity, veths, (&a, &b))
        })?;
        if let Some(rec) = removed {
            let inside = place
                .map(|s| format!(" in sandbox {}", s.name))
                .unwrap_or_default();
            println!("unlinked {} <-> {}{inside}", rec.low_name, rec.high_name);
            return Ok(ExitCode::SUCCESS);
        }
    }
    bail!("no link between {a} and {b}; see `dxdp status`")
}

/// The link recorded between the names `(a, b)` in the pinned state of a sandbox that is gone,
/// with the sandbox's name.
fn dead_sandbox_link(
    pin_dir: &Path,
    capacity: Capacity,
    (a, b): (&str, &str),
) -> Option<(String, LinkRecord)> {
    overlay::sites(pin_dir)
        .into_iter()
        .filter(|site| site.sandbox.is_none())
        .find_map(|site| {
            let mut datapath = Datapath::open(&site.pin_dir, capacity).ok()?;
            let found = datapath
                .links()
                .ok()?
                .into_iter()
                .find(|l| l.between_names(a, b))?;
            Some((site.name, found))
        })
}

/// Removes the link between `veths`, or else the one recorded between the names `(a, b)`, from
/// the datapath pinned at `dir`; collects its garbage either way.
fn remove(
    dir: &Path,
    capacity: Capacity,
    veths: Option<(u32, u32)>,
    (a, b): (&str, &str),
) -> Result<Option<LinkRecord>> {
    if !dir.exists() {
        return Ok(None);
    }
    let host = netlink::interfaces(&NetnsPath::host())?;
    let mut datapath = Datapath::open(dir, capacity)?;
    let by_name = datapath
        .links()?
        .iter()
        .find(|l| l.between_names(a, b))
        .map(|l| (l.low_ifindex, l.high_ifindex));
    let mut removed = None;
    for (x, y) in veths.into_iter().chain(by_name) {
        removed = datapath.remove(x, y)?;
        if removed.is_some() {
            break;
        }
    }
    datapath.collect_garbage(&host)?;
    Ok(removed)
}
