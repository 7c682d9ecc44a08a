use std::{path::Path, process::ExitCode};

use anyhow::{Result, bail};

use super::resolve::resolve_pair;
use crate::{
    cli::UnlinkArgs,
    datapath::{Capacity, Datapath},
    endpoint::EndpointSpec,
    netlink::{self, Interface},
    netns::NetnsPath,
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
    let host = netlink::interfaces(&NetnsPath::host())?;
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    let links = datapath.links()?;
    // An endpoint that is gone, or whose veth was replaced, is still known by the name it was
    // linked under; try the live endpoints first, then the recorded names.
    let (a, b) = (args.a.to_string(), args.b.to_string());
    let by_name = links
        .iter()
        .find(|l| (l.low_name == a && l.high_name == b) || (l.low_name == b && l.high_name == a))
        .map(|l| (l.low_ifindex, l.high_ifindex));
    for (x, y) in resolved(&args.a, &args.b, &host).into_iter().chain(by_name) {
        if let Some(rec) = datapath.remove(x, y)? {
            println!("unlinked {} <-> {}", rec.low_name, rec.high_name);
            datapath.collect_garbage(&host)?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    datapath.collect_garbage(&host)?;
    bail!("no link between {a} and {b}; see `dxdp status`")
}

/// The host ifindexes of both endpoints, when they can still be resolved.
fn resolved(a: &EndpointSpec, b: &EndpointSpec, host: &[Interface]) -> Option<(u32, u32)> {
    resolve_pair(a, b, host)
        .ok()
        .map(|p| (p.a.host_ifindex, p.b.host_ifindex))
}
