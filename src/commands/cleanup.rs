//! `dxdp cleanup`: everything pinned under the pin directory removed, links and exposures with
//! their programs, each overlay sandbox's first (its pins live inside the host's directory).
use std::{path::Path, process::ExitCode};

use anyhow::Result;

use crate::datapath::{Capacity, Datapath};

pub fn run(pin_dir: &Path, capacity: Capacity) -> Result<ExitCode> {
    // An absent directory may have been renamed away under a parent another user controls.
    crate::datapath::check_ancestors(pin_dir)?;
    if !pin_dir.exists() {
        println!("nothing to clean: {} does not exist", pin_dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    // Overlay sandboxes' datapaths first: they are pinned inside the host's directory. A live
    // sandbox's links are removed from inside it, as they were made; a dead one's pins only
    // remain.
    let mut removed = 0;
    for site in crate::overlay::sites(pin_dir) {
        if let Some(sandbox) = &site.sandbox {
            removed += sandbox.run(|| Datapath::open(&site.pin_dir, capacity)?.purge())?;
        }
    }
    crate::overlay::remove_all_sites(pin_dir)?;
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    // Connections the egress fast path carries keep going on Docker's path (docs/egress.md).
    if let Err(e) = datapath.egress_hand_back_all() {
        eprintln!("dxdp: warning: egress connections not handed back to conntrack: {e:#}");
    }
    removed += datapath.purge()?;
    println!(
        "removed {removed} link(s) and everything pinned at {}",
        pin_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
