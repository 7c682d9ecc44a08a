//! `dxdp bench-egress CONTAINER --server NETNS --nic IFACE`: the container as the client of
//! servers in a namespace behind the NIC, over Docker's path (bridge, FORWARD, MASQUERADE) and
//! the `dxdp egress on` fast path (issue 36), then the container's fast path put back as it was.
use std::{path::Path, process::ExitCode};

use anyhow::{Context, Result, bail};

use super::bench_nic::{self, Setup};
use crate::{
    bench::nic::{self, Direction, EgressSwitch, RouteSwitch, Schedule},
    cli::BenchEgressArgs,
    datapath::{Capacity, egress_available},
    docker::Docker,
    engine, firewall, netlink,
    netns::NetnsPath,
};

pub fn run(pin_dir: &Path, capacity: Capacity, args: BenchEgressArgs) -> Result<ExitCode> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "dxdp bench-egress must run as root: it enters namespaces and turns the egress fast \
             path on and off"
        );
    }
    let placement = bench_nic::placement(args.run.pin_cpus)?;
    bench_nic::require_tools()?;
    let server_ns = nic::namespace_of(&args.server, "--server", "the servers'")?;
    let host = netlink::interfaces(&NetnsPath::host())?;
    let container = super::runtime()?.block_on(async {
        let docker = Docker::connect().await?;
        docker.find(&args.container).await
    })?;
    if let Some(why) = container.unlinkable() {
        bail!(why.replace("link", "measure its outbound connections"));
    }
    egress_available()?;
    let rules = firewall::Ruleset::read()?;
    let plan = match engine::egress::plan_by_hand(&container, Some(&args.nic), &host, &rules)? {
        Ok(plan) => plan,
        Err(refusal) => bail!(refusal),
    };
    let server_addr = nic::server_addr(&server_ns, &args.nic)
        .with_context(|| format!("--server {}", args.server))?;
    bench_nic::require_free_ports(&server_ns, &format!("--server {}", args.server))?;
    let name = plan.container.clone();
    let container_addr = plan.addr;
    let veth = plan.endpoint.host_ifname.clone();
    let client_ns = plan.endpoint.netns.path().to_path_buf();
    let targets = nic::server_targets(server_addr);
    let mut egress = EgressSwitch::snapshot(pin_dir, capacity, plan)?;
    let json_fields = serde_json::json!({
        "container_addr": container_addr.to_string(),
        "server_netns": server_ns.path().display().to_string(),
        "server_addr": server_addr.to_string(),
        "servers": targets,
        "found_enabled": egress.found_on(),
    });
    let setup = Setup {
        direction: Direction::Egress,
        plan: Schedule {
            rounds: args.run.rounds,
            seconds: args.run.seconds,
            wire: args.run.wire.is_some(),
        },
        container: name,
        veth,
        between: format!(
            "({container_addr}) as the client of {server_addr} through {}",
            args.nic
        ),
        nic: args.nic,
        client_ns,
        server_ns,
        targets,
        wire: args.run.wire,
        wire_names: ["container", "server"],
        placement,
        json: args.run.json,
        json_fields: bench_nic::into_map(json_fields),
    };
    let switch: &mut dyn RouteSwitch = &mut egress;
    bench_nic::measure_and_report(setup, switch)
}
