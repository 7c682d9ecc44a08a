//! `dxdp bench-ingress CONTAINER --client NETNS --nic IFACE`: the container's published ports
//! from a client namespace, over Docker's path and the `dxdp expose` fast path (issue 24), then
//! the container's exposure put back as it was.
use std::{
    net::IpAddr,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Instant,
};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::expose::prepare;
use crate::{
    bench::{
        cpu_idle::CpuIdle,
        host_load::{self, HostLoad, cpus},
        ingress::{
            self, Clients, ExposureSwitch, IngressSchedule, Metric, NEEDS, Results, Route, Servers,
            Service, Target,
        },
        measure::{self, Placement},
        show_steps,
        stats::Spread,
        wire::{Wire, WireSubnet},
    },
    cli::BenchIngressArgs,
    datapath::Capacity,
    endpoint::EndpointSpec,
    netlink,
    netns::NetnsPath,
};

pub fn run(pin_dir: &Path, capacity: Capacity, args: BenchIngressArgs) -> Result<ExitCode> {
    let plan = IngressSchedule {
        rounds: args.rounds,
        seconds: args.seconds,
        wire: args.wire.is_some(),
    };
    if !nix::unistd::geteuid().is_root() {
        bail!("dxdp bench-ingress must run as root: it enters namespaces and exposes ports");
    }
    let placement = args.pin_cpus.then_some(Placement::SPLIT);
    if placement.is_some() && cpus() < 2 {
        bail!(
            "--pin-cpus puts the clients on CPU 0 and the servers on CPU 1, but this machine \
             has {} CPU; leave it out",
            cpus()
        );
    }
    let missing = ingress::missing_tools();
    if !missing.is_empty() {
        bail!(
            "missing on the host: {}; the bench runs the host's tools inside the container's \
             and the client's namespaces, so the container needs none of its own",
            missing.join("; ")
        );
    }
    let client_ns = match &args.client {
        EndpointSpec::Netns { name, .. } => NetnsPath::named(name).path().to_path_buf(),
        EndpointSpec::Pid { pid, .. } => PathBuf::from(format!("/proc/{pid}/ns/net")),
        EndpointSpec::Container { .. } => bail!(
            "--client {}: name the clients' namespace, netns:NAME or pid:PID",
            args.client
        ),
    };
    if !client_ns.exists() {
        bail!(
            "--client {}: {} is not there",
            args.client,
            client_ns.display()
        );
    }
    let host = netlink::interfaces(&NetnsPath::host())?;
    let exposure_plan = prepare(
        &args.container,
        std::slice::from_ref(&args.nic),
        args.bypass_firewall,
        &host,
    )?;
    let name = exposure_plan.container.clone();
    let targets = ingress::targets(&name, &args.nic, &exposure_plan.ports)?;
    let client_addr = ingress::client_source(&client_ns, targets[0].host_addr)?;
    let container_ns = exposure_plan.endpoint.netns.clone();
    let mut ports: Vec<u16> = NEEDS.iter().map(|n| n.port).collect();
    ports.dedup();
    for port in ports {
        if !measure::port_free(&container_ns, port)? {
            bail!(
                "port {port} is in use in {name}'s namespace; the bench runs its own servers on \
                 {}, so measure a container that does not listen on them",
                NEEDS
                    .iter()
                    .map(|n| n.port.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }

    measure::catch_interrupts()?;
    // Before the exposure is touched: a subnet in use is refused with nothing changed.
    let wire = match args.wire {
        Some(subnet) => Some(Wire::lay(&client_ns, container_ns.path(), subnet)?),
        None => None,
    };
    let veth = exposure_plan.endpoint.host_ifname.clone();
    let mut exposure =
        ExposureSwitch::snapshot(pin_dir, capacity, exposure_plan, client_addr, &host)?;
    let found = match exposure.found() {
        Some(f) => format!("exposed ({} ports)", f.ports.len()),
        None => "not exposed".to_owned(),
    };
    let (rate, on) = ingress::busiest(&[&args.nic, &veth])?;
    if rate > measure::MAX_BACKGROUND_PPS {
        bail!(
            "busy: {rate} pps of other traffic on {on}; the bench would measure it too, so run \
             it on a quiet container and NIC (limit {} pps)",
            measure::MAX_BACKGROUND_PPS
        );
    }
    let routes: Vec<&str> = plan.routes().iter().map(|r| r.name()).collect();
    eprintln!(
        "benchmarking {name} from {client_addr} through {} ({}), {found}: {} round(s) of {}, \
         {}s per test, about {}s{}",
        args.nic,
        targets[0].host_addr,
        plan.rounds,
        routes.join(", "),
        plan.seconds,
        plan.estimate().as_secs(),
        if args.bypass_firewall {
            "; --bypass-firewall: the fast path skips the host's firewall rules for these ports"
        } else {
            ""
        }
    );
    let servers = Servers::start(&container_ns, placement)?;
    let mut clients = Clients::new(
        client_ns.clone(),
        container_ns.path().to_path_buf(),
        targets.clone(),
        plan.seconds,
    )
    .with_sockperf_server(servers.pid(Service::Sockperf));
    clients.placement = placement;
    if let Some(wire) = &wire {
        clients.wire_targets = ingress::wire_targets(&targets, wire.subnet.container_addr());
        clients.route = Route::Wire;
        clients.warm_up(|what| eprintln!("warm-up over the wire: {what}"))?;
        clients.route = Route::Docker;
    }
    exposure.set(Route::Docker)?;
    clients.warm_up(|what| eprintln!("warm-up: {what}"))?;

    let load_start = host_load::start();
    if let Some(load) = load_start.load()
        && load > 1.0
    {
        eprintln!(
            "warning: load average {load:.2} on {} CPUs before the measurement: the machine is \
             not quiet, so expect wide ranges",
            cpus()
        );
    }
    let started = Instant::now();
    let results = show_steps(|tell| ingress::run(&plan, &mut exposure, &mut clients, tell))?;
    let load = HostLoad::since(&load_start);
    drop(servers);
    drop(wire);
    exposure
        .restore()
        .context("measured, but could not put the exposure back as it was")?;
    eprintln!(
        "done in {}s; {name} is {found} again",
        started.elapsed().as_secs()
    );
    let cpu_idle = CpuIdle::read();
    let load_line = format!(
        "{}{}{}",
        load.describe(),
        placement.map_or(String::new(), |p| format!(
            "; clients on CPU {}, servers on CPU {}",
            p.client_cpu, p.server_cpu
        )),
        cpu_idle
            .as_ref()
            .map_or(String::new(), |idle| format!("\n{}", idle.describe()))
    );

    let json_to_stdout = args.json.as_deref() == Some(Path::new("-"));
    let text = format!("{}{load_line}\n", ingress::render(&results, plan.rounds));
    if json_to_stdout {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    if let Some(path) = &args.json {
        let report = JsonReport::new(
            &results,
            &RunInfo {
                plan,
                container: &name,
                veth: &veth,
                nic: &args.nic,
                client_ns: &client_ns,
                client_addr,
                targets: &targets,
                bypass_firewall: args.bypass_firewall,
                found_exposed: exposure.found().is_some(),
                wire: args.wire,
                placement,
                load,
                cpu_idle,
            },
        );
        write_json(path, &(serde_json::to_string_pretty(&report)? + "\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the report to `path`, or to stdout for `-`.
fn write_json(path: &Path, report: &str) -> Result<()> {
    if path == Path::new("-") {
        print!("{report}");
        return Ok(());
    }
    std::fs::write(path, report).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// What the report says about the run besides the samples.
struct RunInfo<'a> {
    plan: IngressSchedule,
    container: &'a str,
    veth: &'a str,
    nic: &'a str,
    client_ns: &'a Path,
    client_addr: IpAddr,
    targets: &'a [Target],
    bypass_firewall: bool,
    found_exposed: bool,
    wire: Option<WireSubnet>,
    placement: Option<Placement>,
    load: HostLoad,
    cpu_idle: Option<CpuIdle>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    /// `dxdp.bench-ingress/1`: the shape docs/json.md documents.
    schema: &'static str,
    container: &'a str,
    container_veth: &'a str,
    nic: &'a str,
    client_netns: String,
    client_addr: String,
    ports: &'a [Target],
    rounds: u32,
    seconds_per_test: u32,
    bypass_firewall: bool,
    found_exposed: bool,
    /// The wire's addresses, with `--wire`.
    #[serde(skip_serializing_if = "Option::is_none")]
    wire: Option<JsonWire>,
    /// `--pin-cpus`: where the clients and the servers ran; `null`: where the scheduler put them.
    placement: Option<Placement>,
    host_load: HostLoad,
    /// How idle CPUs wait (`null` without cpuidle): it sets the cost of a wake-up, which every
    /// round trip between two CPUs pays.
    cpu_idle: Option<CpuIdle>,
    metrics: Vec<JsonMetric>,
    fast_path_packets_per_round: &'a [u64],
}

#[derive(Serialize)]
struct JsonMetric {
    id: &'static str,
    label: &'static str,
    unit: &'static str,
    lower_is_better: bool,
    docker: JsonRoute,
    fast: JsonRoute,
    fast_over_docker: Option<f64>,
    /// Each round's fast sample over the same round's Docker sample.
    fast_over_docker_per_round: Vec<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wire: Option<JsonRoute>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wire_over_docker: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wire_over_docker_per_round: Option<Vec<f64>>,
    /// Issue 24's bound on `fast_over_docker`: at least (rates) or at most (latency).
    goal: Option<f64>,
    goal_met: Option<bool>,
    /// How many of `fast_over_docker_per_round` meet the goal.
    goal_met_rounds: Option<usize>,
}

#[derive(Serialize)]
struct JsonWire {
    subnet: String,
    container_addr: String,
    client_addr: String,
}

#[derive(Serialize)]
struct JsonRoute {
    samples: Vec<f64>,
    #[serde(flatten)]
    spread: Option<Spread>,
}

impl<'a> JsonReport<'a> {
    fn new(results: &'a Results, cx: &RunInfo<'a>) -> Self {
        let route = |r: Route, m: Metric| JsonRoute {
            samples: results.samples(r, m).to_vec(),
            spread: results.spread(r, m),
        };
        Self {
            schema: "dxdp.bench-ingress/1",
            container: cx.container,
            container_veth: cx.veth,
            nic: cx.nic,
            client_netns: cx.client_ns.display().to_string(),
            client_addr: cx.client_addr.to_string(),
            ports: cx.targets,
            rounds: cx.plan.rounds,
            seconds_per_test: cx.plan.seconds,
            bypass_firewall: cx.bypass_firewall,
            found_exposed: cx.found_exposed,
            wire: cx.wire.map(|w| JsonWire {
                subnet: w.to_string(),
                container_addr: w.container_addr().to_string(),
                client_addr: w.client_addr().to_string(),
            }),
            placement: cx.placement,
            host_load: cx.load,
            cpu_idle: cx.cpu_idle.clone(),
            metrics: Metric::ALL
                .iter()
                .map(|&m| JsonMetric {
                    id: m.id(),
                    label: m.label(),
                    unit: m.unit(),
                    lower_is_better: m.lower_is_better(),
                    docker: route(Route::Docker, m),
                    fast: route(Route::Fast, m),
                    fast_over_docker: results.ratio(m),
                    fast_over_docker_per_round: results.per_round(Route::Fast, m),
                    wire: results.has_wire().then(|| route(Route::Wire, m)),
                    wire_over_docker: results.over_docker(Route::Wire, m),
                    wire_over_docker_per_round: results
                        .has_wire()
                        .then(|| results.per_round(Route::Wire, m)),
                    goal: m.goal(),
                    goal_met: results.met(m),
                    goal_met_rounds: results.rounds_meeting_goal(m).map(|(met, _)| met),
                })
                .collect(),
            fast_path_packets_per_round: &results.fast_packets_per_round,
        }
    }
}
