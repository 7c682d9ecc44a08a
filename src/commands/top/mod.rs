//! `dxdp top`: live rates of every link, managed veth, exposed port and egress container,
//! computed from two successive reads of the pinned counters (no watch needed).
//!
//! On a terminal the view is redrawn in place (ANSI home and clear, no TUI crate) with the
//! terminal's stdin in non-canonical mode, so a single `q` quits; the terminal is restored on
//! every exit path: `q`, Ctrl-C, SIGTERM, SIGHUP, an error, a panic. Otherwise (stdout not a
//! terminal, or `--once`, `--count`, `--json`) samples are printed one after another.
mod render;
mod sample;
mod screen;
#[cfg(test)]
mod tests;

use std::{
    collections::HashMap,
    io::{self, IsTerminal, Write},
    path::Path,
    process::ExitCode,
    time::{Duration, Instant, SystemTime},
};

use anyhow::Result;

use crate::{
    cli::TopArgs,
    datapath::{Capacity, Datapath},
    netlink,
    netns::NetnsPath,
};

use render::*;
use sample::*;
use screen::*;

/// The `schema` field of every JSON sample; bumped when the shape changes incompatibly.
const SCHEMA: &str = "dxdp.top/1";

/// Reads the pinned state; a missing pin directory is an empty state, as in `dxdp status`. The
/// datapath is opened (and its lock taken) per read only, so links can change meanwhile.
fn read(pin_dir: &Path, capacity: Capacity) -> Result<Snapshot> {
    if !pin_dir.exists() {
        return Ok(Snapshot::default());
    }
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    let host = netlink::interfaces(&NetnsPath::host())?;
    // A NIC is any kind of interface; a managed one is a veth.
    let names: HashMap<u32, String> = host.iter().map(|i| (i.index, i.name.clone())).collect();
    let veths: HashMap<u32, String> = host
        .into_iter()
        .filter(|i| i.is_veth())
        .map(|i| (i.index, i.name))
        .collect();
    let mut snap = Snapshot::default();
    for (ifindex, datapath_kind) in datapath.interfaces()? {
        snap.interfaces.push(InterfaceSnap {
            ifindex,
            ifname: veths.get(&ifindex).cloned(),
            datapath: datapath_kind,
            counters: datapath.counters(ifindex)?.unwrap_or_default(),
        });
    }
    for record in datapath.links()? {
        snap.links.push(LinkSnap {
            low_ifname: veths.get(&record.low_ifindex).cloned(),
            high_ifname: veths.get(&record.high_ifindex).cloned(),
            record,
        });
    }
    for port in datapath.exposed()? {
        snap.ports.push(PortSnap {
            nic: names.get(&port.nic_ifindex).cloned(),
            port,
        });
    }
    for record in datapath.egress()? {
        snap.egress.push(EgressSnap {
            nic: names.get(&record.nic_ifindex).cloned(),
            record,
        });
    }
    drop(datapath);
    snap.links.extend(overlay_links(pin_dir, capacity)?);
    Ok(snap)
}

/// The links of every live overlay sandbox, read from inside it, their veths named with the
/// sandbox (`veth1 (1-qqxh7f1pd1)`): a sandbox's ifindexes are its own. Their interfaces'
/// counters stay out of the per-veth table, whose rows are keyed by the host's ifindexes.
fn overlay_links(pin_dir: &Path, capacity: Capacity) -> Result<Vec<LinkSnap>> {
    let mut out = Vec::new();
    for site in crate::overlay::sites(pin_dir) {
        let Some(sandbox) = site.sandbox else {
            continue;
        };
        out.extend(sandbox.run(|| {
            let mut datapath = Datapath::open(&site.pin_dir, capacity)?;
            // A task of another node is named as the VXLAN device it is reached through.
            let here = super::status::with_remote_ends(
                &mut datapath,
                netlink::veth_names(&NetnsPath::host())?,
            )?;
            let veths: HashMap<u32, String> = here
                .into_iter()
                .map(|(index, name)| (index, format!("{name} ({})", sandbox.name)))
                .collect();
            Ok(datapath
                .links()?
                .into_iter()
                .map(|record| LinkSnap {
                    low_ifname: veths.get(&record.low_ifindex).cloned(),
                    high_ifname: veths.get(&record.high_ifindex).cloned(),
                    record,
                })
                .collect::<Vec<_>>())
        })?);
    }
    Ok(out)
}

pub fn run(pin_dir: &Path, capacity: Capacity, args: TopArgs) -> Result<ExitCode> {
    let interval = Duration::from_secs_f64(args.interval);
    let limit = if args.once { Some(1) } else { args.count };
    let interactive =
        !args.json && !args.once && args.count.is_none() && io::stdout().is_terminal();
    let mut screen = if interactive {
        Some(Screen::enter()?)
    } else {
        None
    };
    let mut out = io::stdout().lock();
    let mut prev = read(pin_dir, capacity)?;
    let mut prev_at = Instant::now();
    if let Some(screen) = &mut screen {
        screen.draw(
            &mut out,
            &format!(
                "dxdp top  {}  every {}\n\nreading the counters…",
                clock(SystemTime::now()).1,
                seconds(args.interval)
            ),
        )?;
    }
    let mut printed = 0u64;
    loop {
        let deadline = prev_at + interval;
        if let Some(screen) = &mut screen {
            if screen.wait_for_quit(deadline)? {
                break;
            }
        } else {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        }
        let cur = read(pin_dir, capacity)?;
        let at = Instant::now();
        let elapsed = at - prev_at;
        let (links, interfaces) = rates(&prev, &cur, elapsed);
        let sample = Sample {
            schema: SCHEMA,
            time: clock(SystemTime::now()).0,
            interval_secs: elapsed.as_secs_f64(),
            links,
            interfaces,
            ports: port_rates(&prev, &cur, elapsed),
            egress: egress_rates(&prev, &cur, elapsed),
        };
        if args.json {
            serde_json::to_writer(&mut out, &sample)?;
            writeln!(out)?;
        } else {
            let mut text = Vec::new();
            render(&sample, pin_dir, &mut text)?;
            let text = String::from_utf8_lossy(&text);
            match &mut screen {
                Some(screen) => screen.draw(&mut out, &format!("{text}\nq or Ctrl-C quits"))?,
                None => {
                    if printed > 0 {
                        writeln!(out)?;
                    }
                    out.write_all(text.as_bytes())?;
                }
            }
        }
        out.flush()?;
        printed += 1;
        if limit.is_some_and(|n| printed >= n) {
            break;
        }
        prev = cur;
        prev_at = at;
    }
    drop(out);
    drop(screen);
    Ok(ExitCode::SUCCESS)
}
