use std::{path::Path, process::ExitCode};

use anyhow::{Result, bail};

use crate::{
    cli::UnlinkArgs,
    datapath::{Capacity, Datapath},
    endpoint::{Endpoint, EndpointSpec},
    netlink::{self, Interface},
    netns::NetnsPath,
};

pub fn run(pin_dir: &Path, args: UnlinkArgs) -> Result<ExitCode> {
    if !pin_dir.exists() {
        bail!(
            "no link between {} and {}: nothing is pinned at {}",
            args.a,
            args.b,
            pin_dir.display()
        );
    }
    let host = netlink::interfaces(&NetnsPath::host())?;
    let mut datapath = Datapath::open(pin_dir, Capacity::default())?;
    let links = datapath.links()?;
    // An endpoint that is gone can still be named as it was linked.
    let find = |spec: &EndpointSpec| -> Option<u32> {
        host_ifindex(spec, &host).or_else(|| {
            let label = spec.to_string();
            links.iter().find_map(|l| {
                if l.low_name == label {
                    Some(l.low_ifindex)
                } else if l.high_name == label {
                    Some(l.high_ifindex)
                } else {
                    None
                }
            })
        })
    };
    let (Some(x), Some(y)) = (find(&args.a), find(&args.b)) else {
        bail!(
            "no link between {} and {}; see `dxdp status`",
            args.a,
            args.b
        );
    };
    match datapath.remove(x, y)? {
        Some(rec) => {
            println!("unlinked {} <-> {}", rec.low_name, rec.high_name);
            datapath.collect_garbage(&host)?;
            Ok(ExitCode::SUCCESS)
        }
        None => bail!(
            "no link between {} and {}; see `dxdp status`",
            args.a,
            args.b
        ),
    }
}

fn host_ifindex(spec: &EndpointSpec, host: &[Interface]) -> Option<u32> {
    Endpoint::resolve_local(spec, host)
        .ok()
        .map(|ep| ep.host_ifindex)
}
