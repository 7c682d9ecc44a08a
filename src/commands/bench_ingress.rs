//! `dxdp bench-ingress CONTAINER --client NETNS --nic IFACE`: the container's published ports
//! from a client namespace, over Docker's path and the `dxdp expose` fast path (issue 24), then
//! the container's exposure put back as it was.
use std::{path::Path, process::ExitCode};

use anyhow::{Result, bail};

use super::{
    bench_nic::{self, Setup},
    expose::prepare,
};
use crate::{
    bench::nic::{self, Direction, ExposureSwitch, RouteSwitch, Schedule},
    cli::BenchIngressArgs,
    datapath::Capacity,
    netlink,
    netns::NetnsPath,
};

pub fn run(pin_dir: &Path, capacity: Capacity, args: BenchIngressArgs) -> Result<ExitCode> {
    if !nix::unistd::geteuid().is_root() {
        bail!("dxdp bench-ingress must run as root: it enters namespaces and exposes ports");
    }
    let placement = bench_nic::placement(args.run.pin_cpus)?;
    bench_nic::require_tools()?;
    let client_ns = nic::namespace_of(&args.client, "--client", "the clients'")?
        .path()
        .to_path_buf();
    let host = netlink::interfaces(&NetnsPath::host())?;
    let exposure_plan = prepare(
        &args.container,
        std::slice::from_ref(&args.nic),
        args.bypass_firewall,
        &host,
    )?;
    let name = exposure_plan.container.clone();
    let targets = nic::targets(&name, &args.nic, &exposure_plan.ports)?;
    let client_addr = nic::client_source(&client_ns, targets[0].host_addr)?;
    let container_ns = exposure_plan.endpoint.netns.clone();
    bench_nic::require_free_ports(&container_ns, &format!("{name}'s namespace"))?;
    let veth = exposure_plan.endpoint.host_ifname.clone();
    let mut exposure =
        ExposureSwitch::snapshot(pin_dir, capacity, exposure_plan, client_addr, &host)?;
    let json_fields = serde_json::json!({
        "client_netns": client_ns.display().to_string(),
        "client_addr": client_addr.to_string(),
        "ports": targets,
        "bypass_firewall": args.bypass_firewall,
        "found_exposed": exposure.found().is_some(),
    });
    let between = format!(
        "from {client_addr} through {} ({}){}",
        args.nic,
        targets[0].host_addr,
        if args.bypass_firewall {
            "; --bypass-firewall: the fast path skips the host's firewall rules for these ports"
        } else {
            ""
        }
    );
    let setup = Setup {
        direction: Direction::Ingress,
        plan: Schedule {
            rounds: args.run.rounds,
            seconds: args.run.seconds,
            wire: args.run.wire.is_some(),
        },
        container: name,
        veth,
        nic: args.nic,
        client_ns,
        server_ns: container_ns,
        targets,
        wire: args.run.wire,
        wire_names: ["client", "container"],
        placement,
        json: args.run.json,
        between,
        json_fields: bench_nic::into_map(json_fields),
    };
    let switch: &mut dyn RouteSwitch = &mut exposure;
    bench_nic::measure_and_report(setup, switch)
}
