use std::{path::Path, process::ExitCode};

use anyhow::Result;
use serde::Serialize;

use crate::{
    cli::StatusArgs,
    datapath::{Capacity, Datapath, InterfaceCounters, Kind, LinkRecord},
};

#[derive(Serialize)]
struct Status {
    pin_dir: String,
    links: Vec<LinkRecord>,
    interfaces: Vec<InterfaceStatus>,
}

#[derive(Serialize)]
struct InterfaceStatus {
    ifindex: u32,
    datapath: Kind,
    counters: InterfaceCounters,
}

pub fn run(pin_dir: &Path, capacity: Capacity, args: StatusArgs) -> Result<ExitCode> {
    let status = if pin_dir.exists() {
        let mut datapath = Datapath::open(pin_dir, capacity)?;
        let mut interfaces = Vec::new();
        for (ifindex, datapath_kind) in datapath.interfaces()? {
            interfaces.push(InterfaceStatus {
                ifindex,
                datapath: datapath_kind,
                counters: datapath.counters(ifindex)?.unwrap_or_default(),
            });
        }
        interfaces.sort_by_key(|i| i.ifindex);
        Status {
            pin_dir: pin_dir.display().to_string(),
            links: datapath.links()?,
            interfaces,
        }
    } else {
        Status {
            pin_dir: pin_dir.display().to_string(),
            links: Vec::new(),
            interfaces: Vec::new(),
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print_table(&status);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(status: &Status) {
    if status.links.is_empty() {
        println!("no links (pin directory {})", status.pin_dir);
        return;
    }
    println!(
        "{:<24} {:<24} {:<20} {:<4} {:<6} {:>12} {:>12}",
        "ENDPOINT A", "ENDPOINT B", "NETWORK", "PATH", "ORIGIN", "A->B PKTS", "B->A PKTS"
    );
    for l in &status.links {
        println!(
            "{:<24} {:<24} {:<20} {:<4} {:<6} {:>12} {:>12}",
            l.low_name,
            l.high_name,
            l.network,
            l.datapath.to_string(),
            format!("{:?}", l.origin).to_lowercase(),
            l.low_to_high.packets,
            l.high_to_low.packets
        );
    }
    println!();
    println!(
        "{:>8} {:<4} {:>14} {:>16} {:>12} {:>10} {:>8}",
        "IFINDEX", "PATH", "REDIRECTED", "BYTES", "PASSED", "FALLBACK", "SPOOFED"
    );
    for i in &status.interfaces {
        let c = &i.counters;
        println!(
            "{:>8} {:<4} {:>14} {:>16} {:>12} {:>10} {:>8}",
            i.ifindex,
            i.datapath.to_string(),
            c.redirected_packets,
            c.redirected_bytes,
            c.passed_packets,
            c.fallback_packets,
            c.spoofed_packets
        );
    }
}
