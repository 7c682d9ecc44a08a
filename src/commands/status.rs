//! `dxdp status`: the pinned links, whether their veths still exist, and the counters.
use std::{
    collections::HashMap,
    io::{self, Write},
    path::Path,
    process::ExitCode,
};

use anyhow::Result;
use serde::Serialize;
use tabwriter::TabWriter;

use crate::{
    choice::Kind,
    cli::StatusArgs,
    datapath::{
        Capacity, ConnectionTables, Datapath, EgressRecord, ExposedPort, InterfaceCounters,
        LinkRecord, TableFill, TablePressure,
    },
    family::Families,
    netlink,
    netns::NetnsPath,
};

#[derive(Serialize)]
struct Status {
    /// `dxdp.status/1`: the shape docs/json.md documents.
    schema: &'static str,
    pin_dir: String,
    links: Vec<LinkStatus>,
    interfaces: Vec<InterfaceStatus>,
    /// Published ports taken from the NIC straight into their container (`dxdp expose`).
    exposed: Vec<ExposedStatus>,
    /// Unexposed containers whose connections' replies still take the fast path until quiet.
    draining: Vec<Draining>,
    /// Containers whose outbound connections leave straight by the NIC (`dxdp egress on`).
    egress: Vec<EgressStatus>,
    /// How full the tables of connections through exposed ports are; `null` without a pin
    /// directory.
    connections: Option<ConnectionTables>,
}

#[derive(Serialize)]
struct ExposedStatus {
    #[serde(flatten)]
    port: ExposedPort,
    /// The NIC's name; `null` where it is gone.
    nic: Option<String>,
}

#[derive(Serialize)]
struct EgressStatus {
    #[serde(flatten)]
    record: EgressRecord,
    /// The NIC's name; `null` where it is gone.
    nic: Option<String>,
}

#[derive(Serialize)]
struct Draining {
    veth_ifindex: u32,
    connections: usize,
}

/// Whether a link's two host veths still exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum LinkState {
    Live,
    /// A veth is gone (its container stopped or was removed while no watch ran): the record
    /// redirects nothing any more and is collected by the next `link`, `unlink` or watch
    /// reconcile.
    Gone,
}

#[derive(Serialize)]
struct LinkStatus {
    #[serde(flatten)]
    record: LinkRecord,
    state: LinkState,
    /// Host-side veth names; `null` where the veth is gone.
    low_ifname: Option<String>,
    high_ifname: Option<String>,
    /// The overlay network's sandbox namespace the veths are in; `null` for the host's.
    sandbox: Option<String>,
}

#[derive(Serialize)]
struct InterfaceStatus {
    ifindex: u32,
    ifname: Option<String>,
    /// As for links: the sandbox whose ifindex this is; `null` for the host's.
    sandbox: Option<String>,
    datapath: Kind,
    counters: InterfaceCounters,
}

impl Status {
    fn empty(pin_dir: &Path) -> Self {
        Self {
            schema: "dxdp.status/1",
            pin_dir: pin_dir.display().to_string(),
            links: Vec::new(),
            interfaces: Vec::new(),
            exposed: Vec::new(),
            draining: Vec::new(),
            egress: Vec::new(),
            connections: None,
        }
    }
}

/// The veths of the calling thread's namespace (the host's, or an overlay sandbox's).
fn veths_here() -> Result<HashMap<u32, String>> {
    netlink::veth_names(&NetnsPath::host())
}

/// `veths` (the calling thread's namespace's, by ifindex) with each task of another node that
/// `datapath` reaches named as the VXLAN device it is reached through, while that is there
/// (gone with its sandbox, where `veths` is empty).
pub(super) fn with_remote_ends(
    datapath: &mut Datapath,
    mut veths: HashMap<u32, String>,
) -> Result<HashMap<u32, String>> {
    let remote = datapath.remote_endpoints()?;
    if !remote.is_empty() && !veths.is_empty() {
        let here = netlink::interfaces(&NetnsPath::host())?;
        for (id, tunnel) in remote {
            if let Some(tunnel) = here.iter().find(|i| i.index == tunnel) {
                veths.insert(id, tunnel.name.clone());
            }
        }
    }
    Ok(veths)
}

/// The links and managed interfaces of one datapath, whose veths are `veths` (none for a
/// sandbox that is gone, whose links all read GONE): the host's, or the overlay sandbox
/// `sandbox`'s.
fn read_links(
    datapath: &mut Datapath,
    veths: &HashMap<u32, String>,
    sandbox: Option<&str>,
    status: &mut Status,
) -> Result<()> {
    let sandbox = sandbox.map(str::to_owned);
    let names = with_remote_ends(datapath, veths.clone())?;
    let veths = &names;
    let mut interfaces = Vec::new();
    for (ifindex, kind) in datapath.interfaces()? {
        interfaces.push(InterfaceStatus {
            ifindex,
            ifname: veths.get(&ifindex).cloned(),
            sandbox: sandbox.clone(),
            datapath: kind,
            counters: datapath.counters(ifindex)?.unwrap_or_default(),
        });
    }
    interfaces.sort_by_key(|i| i.ifindex);
    status.interfaces.extend(interfaces);
    for record in datapath.links()? {
        let low_ifname = veths.get(&record.low_ifindex).cloned();
        let high_ifname = veths.get(&record.high_ifindex).cloned();
        let state = if low_ifname.is_some() && high_ifname.is_some() {
            LinkState::Live
        } else {
            LinkState::Gone
        };
        status.links.push(LinkStatus {
            record,
            state,
            low_ifname,
            high_ifname,
            sandbox: sandbox.clone(),
        });
    }
    Ok(())
}

pub fn run(pin_dir: &Path, capacity: Capacity, args: StatusArgs) -> Result<ExitCode> {
    let mut status = Status::empty(pin_dir);
    // An absent directory may have been renamed away under a parent another user controls.
    crate::datapath::check_ancestors(pin_dir)?;
    if pin_dir.exists() {
        let mut datapath = Datapath::open(pin_dir, capacity)?;
        let host = netlink::interfaces(&NetnsPath::host())?;
        let names: HashMap<u32, String> = host.iter().map(|i| (i.index, i.name.clone())).collect();
        for port in datapath.exposed()? {
            let nic = names.get(&port.nic_ifindex).cloned();
            status.exposed.push(ExposedStatus { port, nic });
        }
        for record in datapath.egress()? {
            let nic = names.get(&record.nic_ifindex).cloned();
            status.egress.push(EgressStatus { record, nic });
        }
        status.connections = Some(datapath.connection_tables()?);
        for (veth_ifindex, connections) in datapath.draining()? {
            status.draining.push(Draining {
                veth_ifindex,
                connections,
            });
        }
        read_links(&mut datapath, &veths_here()?, None, &mut status)?;
        drop(datapath);
        // Each overlay sandbox's links, read from inside it (its ifindexes are its own). A
        // sandbox that is gone took its veths along: its links read GONE until the next
        // `link`, `unlink` or watch pass removes its pins.
        for site in crate::overlay::sites(pin_dir) {
            let mut found = Status::empty(pin_dir);
            match &site.sandbox {
                Some(sandbox) => sandbox.run(|| {
                    let mut datapath = Datapath::open(&site.pin_dir, capacity)?;
                    read_links(&mut datapath, &veths_here()?, Some(&site.name), &mut found)
                })?,
                None => {
                    let mut datapath = Datapath::open(&site.pin_dir, capacity)?;
                    read_links(&mut datapath, &HashMap::new(), Some(&site.name), &mut found)?;
                }
            }
            status.links.extend(found.links);
            status.interfaces.extend(found.interfaces);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print_tables(&status, &mut io::stdout().lock())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A link's families for the table: `ipv4,ipv6`, `ipv4`, `ipv6`.
fn families(families: Families) -> String {
    let names = families.names();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(",")
    }
}

/// Both tables, columns aligned whatever the names' lengths (Compose v2 names are long).
fn print_tables(status: &Status, out: &mut impl Write) -> io::Result<()> {
    print_exposed(status, out)?;
    print_egress(status, out)?;
    if status.links.is_empty() {
        writeln!(out, "no links (pin directory {})", status.pin_dir)?;
        return Ok(());
    }
    let name = |n: &Option<String>| n.clone().unwrap_or_else(|| "-".to_owned());
    let mut links = TabWriter::new(&mut *out).padding(2);
    writeln!(
        links,
        "ENDPOINT A\tVETH A\tENDPOINT B\tVETH B\tNETWORK\tPATH\tFAMILIES\tORIGIN\tSTATE\t\
         A->B PKTS\tA->B BYTES\tB->A PKTS\tB->A BYTES"
    )?;
    for l in &status.links {
        let r = &l.record;
        writeln!(
            links,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            r.low_name,
            name(&l.low_ifname),
            r.high_name,
            name(&l.high_ifname),
            match &l.sandbox {
                None => r.network.clone(),
                Some(sandbox) => format!("{} ({sandbox})", r.network),
            },
            r.datapath,
            families(r.families),
            format!("{:?}", r.origin).to_lowercase(),
            match l.state {
                LinkState::Live => "live",
                LinkState::Gone => "GONE",
            },
            r.low_to_high.packets,
            r.low_to_high.bytes,
            r.high_to_low.packets,
            r.high_to_low.bytes
        )?;
    }
    links.flush()?;
    drop(links);
    if status
        .links
        .iter()
        .any(|l| l.record.families != Families::ALL)
    {
        writeln!(
            out,
            "FAMILIES: what rides the link; the other family stays on the bridge (a firewall \
             rule may drop or alter it there, or neither end has an address of it). \
             `dxdp doctor` names the rule."
        )?;
    }
    if status.links.iter().any(|l| l.state == LinkState::Gone) {
        writeln!(
            out,
            "GONE: a veth of the link no longer exists (its container stopped or was removed \
             while no watch ran); it redirects nothing. The next `dxdp link`, `dxdp unlink` or \
             watch reconcile removes it, or `dxdp unlink A B` now."
        )?;
    }
    writeln!(out)?;
    let mut ifaces = TabWriter::new(out)
        .padding(2)
        .alignment(tabwriter::Alignment::Right);
    writeln!(
        ifaces,
        "IFINDEX\tVETH\tPATH\tREDIRECTED\tBYTES\tPASSED\tFALLBACK\tSPOOFED\t"
    )?;
    for i in &status.interfaces {
        let c = &i.counters;
        writeln!(
            ifaces,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t",
            i.ifindex,
            match &i.sandbox {
                None => name(&i.ifname),
                Some(sandbox) => format!("{} ({sandbox})", name(&i.ifname)),
            },
            i.datapath,
            c.redirected_packets,
            c.redirected_bytes,
            c.passed_packets,
            c.fallback_packets,
            c.spoofed_packets
        )?;
    }
    ifaces.flush()
}

/// The exposed ports, if any, and the unexposed containers still draining.
fn print_exposed(status: &Status, out: &mut impl Write) -> io::Result<()> {
    if status.exposed.is_empty() && status.draining.is_empty() {
        return Ok(());
    }
    let mut table = TabWriter::new(&mut *out).padding(2);
    writeln!(
        table,
        "CONTAINER\tPORT\tNIC\tTO\tORIGIN\tIN PKTS\tIN BYTES\tOUT PKTS\tOUT BYTES\tPASSED\tREFUSED"
    )?;
    for e in &status.exposed {
        let p = &e.port;
        // `[address]:port` for IPv6, as a URL writes it.
        let at = std::net::SocketAddr::new(p.host_addr, p.host_port);
        let to = std::net::SocketAddr::new(p.container_addr, p.container_port);
        writeln!(
            table,
            "{}\t{at}/{}\t{}\t{to}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            p.container,
            p.protocol,
            e.nic.as_deref().unwrap_or("-"),
            format!("{:?}", p.origin).to_lowercase(),
            p.inbound.packets,
            p.inbound.bytes,
            p.outbound.packets,
            p.outbound.bytes,
            p.passed_packets,
            p.refused_packets
        )?;
    }
    table.flush()?;
    drop(table);
    for d in &status.draining {
        writeln!(
            out,
            "unexposed veth {}: {} connection(s) still answered over the fast path until quiet",
            d.veth_ifindex, d.connections
        )?;
    }
    if let Some(tables) = &status.connections {
        writeln!(out, "{}", describe_connections(tables))?;
    }
    writeln!(out)
}

/// The containers whose outbound connections leave straight by the NIC, if any.
fn print_egress(status: &Status, out: &mut impl Write) -> io::Result<()> {
    if status.egress.is_empty() {
        return Ok(());
    }
    let mut table = TabWriter::new(&mut *out).padding(2);
    writeln!(
        table,
        "EGRESS\tADDRESS\tNIC\tOUT PKTS\tOUT BYTES\tBACK PKTS\tBACK BYTES\tPASSED"
    )?;
    for e in &status.egress {
        let r = &e.record;
        writeln!(
            table,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            r.container,
            r.addr,
            e.nic.as_deref().unwrap_or("-"),
            r.outbound.packets,
            r.outbound.bytes,
            r.inbound.packets,
            r.inbound.bytes,
            r.passed_packets
        )?;
    }
    table.flush()?;
    drop(table);
    writeln!(out)
}

/// One line on the connection tables, saying which are nearly full and what that means.
fn describe_connections(t: &ConnectionTables) -> String {
    let fill = |f: &TableFill, what: &str| {
        let full = if f.is_nearly_full() {
            ", nearly full"
        } else {
            ""
        };
        format!("{} {what} (of {}{full})", f.entries, f.capacity)
    };
    let mut line = format!(
        "connections: {}, {}, {}",
        fill(&t.established, "TCP established"),
        fill(&t.opening, "TCP opening"),
        fill(&t.udp, "UDP flows")
    );
    match t.pressure() {
        Some(TablePressure::Forgetting) => line.push_str(
            "; established connections are being forgotten, least recently used first: \
             raise --max-connections on a fresh pin directory",
        ),
        Some(TablePressure::UnansweredHandshakes) => {
            line.push_str("; many handshakes are not completed (a SYN flood?)");
        }
        None => {}
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(entries: usize, capacity: u32) -> TableFill {
        TableFill { entries, capacity }
    }

    #[test]
    fn the_connections_line_says_which_table_is_full_and_what_to_do() {
        let calm = ConnectionTables {
            established: fill(3, 1024),
            opening: fill(0, 256),
            udp: fill(1, 256),
        };
        assert_eq!(
            describe_connections(&calm),
            "connections: 3 TCP established (of 1024), 0 TCP opening (of 256), 1 UDP flows (of 256)"
        );
        let flooded = ConnectionTables {
            opening: fill(256, 256),
            ..calm
        };
        let line = describe_connections(&flooded);
        assert!(
            line.contains("256 TCP opening (of 256, nearly full)"),
            "{line}"
        );
        assert!(line.ends_with("(a SYN flood?)"), "{line}");
        // An LRU map that forgets keeps a few free entries per CPU.
        let crowded = ConnectionTables {
            established: fill(950, 1024),
            ..flooded
        };
        let line = describe_connections(&crowded);
        assert!(line.contains("raise --max-connections"), "{line}");
    }
}
