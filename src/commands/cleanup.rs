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
    let removed = Datapath::open(pin_dir, capacity)?.purge()?;
    println!(
        "removed {removed} link(s) and everything pinned at {}",
        pin_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
