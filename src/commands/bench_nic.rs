//! What `bench-ingress` and `bench-egress` share once each has found its namespaces, its
//! servers' addresses and its route switch: the wire laid, the servers started, warm-ups, the
//! interleaved rounds, everything put back, the table and the JSON report.
use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    time::Instant,
};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::{
    bench::{
        cpu_idle::CpuIdle,
        host_load::{self, HostLoad, cpus},
        measure::{self, Placement},
        nic::{self, Clients, Direction, Metric, Results, Route, RouteSwitch, Schedule, Servers},
        nic::{NEEDS, Service, Target},
        show_steps,
        stats::Spread,
        wire::{EndNames, Wire, WireSubnet},
    },
    netns::NetnsPath,
};

/// One bench through a NIC, ready to run.
pub struct Setup {
    pub direction: Direction,
    pub plan: Schedule,
    pub container: String,
    pub veth: String,
    pub nic: String,
    /// Where the clients run, and the servers.
    pub client_ns: PathBuf,
    pub server_ns: NetnsPath,
    pub targets: Vec<Target>,
    pub wire: Option<WireSubnet>,
    /// What the wire's messages call the client's and the server's namespaces.
    pub wire_names: EndNames,
    pub placement: Option<Placement>,
    pub json: Option<PathBuf>,
    /// What the banner says of the clients and the servers ("from A through NIC (B)").
    pub between: String,
    /// The fields of the JSON report only this direction has.
    pub json_fields: serde_json::Map<String, serde_json::Value>,
}

/// `--pin-cpus` as a placement, refused on a machine with one CPU.
pub fn placement(pin_cpus: bool) -> Result<Option<Placement>> {
    let placement = pin_cpus.then_some(Placement::SPLIT);
    if placement.is_some() && cpus() < 2 {
        bail!(
            "--pin-cpus puts the clients on CPU 0 and the servers on CPU 1, but this machine \
             has {} CPU; leave it out",
            cpus()
        );
    }
    Ok(placement)
}

/// The host tools both benches run, or a refusal naming each missing one and its package.
pub fn require_tools() -> Result<()> {
    let missing = nic::missing_tools();
    if !missing.is_empty() {
        bail!(
            "missing on the host: {}; the bench runs the host's tools inside the container's \
             and the other side's namespaces, so the container needs none of its own",
            missing.join("; ")
        );
    }
    Ok(())
}

/// Refuses a server namespace where a port the servers need is taken; `whose` names it.
pub fn require_free_ports(server_ns: &NetnsPath, whose: &str) -> Result<()> {
    let mut ports: Vec<u16> = NEEDS.iter().map(|n| n.port).collect();
    ports.dedup();
    for port in ports {
        if !measure::port_free(server_ns, port)? {
            bail!(
                "port {port} is in use in {whose}; the bench runs its own servers on {}, so \
                 measure where nothing listens on them",
                NEEDS
                    .iter()
                    .map(|n| n.port.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    Ok(())
}

/// Runs the bench and reports; `switch` is put back as it was found, also after an error.
pub fn measure_and_report(setup: Setup, switch: &mut dyn RouteSwitch) -> Result<ExitCode> {
    let plan = setup.plan;
    measure::catch_interrupts()?;
    // Before the fast path is touched: a subnet in use is refused with nothing changed.
    let wire = match setup.wire {
        Some(subnet) => Some(Wire::lay(
            &setup.client_ns,
            setup.server_ns.path(),
            setup.wire_names,
            subnet,
        )?),
        None => None,
    };
    let found = switch.found_description();
    let (rate, on) = nic::busiest(&[&setup.nic, &setup.veth])?;
    if rate > measure::MAX_BACKGROUND_PPS {
        bail!(
            "busy: {rate} pps of other traffic on {on}; the bench would measure it too, so run \
             it on a quiet container and NIC (limit {} pps)",
            measure::MAX_BACKGROUND_PPS
        );
    }
    let routes: Vec<&str> = plan.routes().iter().map(|r| r.name()).collect();
    eprintln!(
        "benchmarking {} {}, {found}: {} round(s) of {}, {}s per test, about {}s",
        setup.container,
        setup.between,
        plan.rounds,
        routes.join(", "),
        plan.seconds,
        plan.estimate().as_secs(),
    );
    let servers = Servers::start(&setup.server_ns, setup.placement)?;
    let mut clients = Clients::new(
        setup.client_ns.clone(),
        setup.server_ns.path().to_path_buf(),
        setup.targets.clone(),
        plan.seconds,
    )
    .with_sockperf_server(servers.pid(Service::Sockperf));
    clients.placement = setup.placement;
    if let Some(wire) = &wire {
        clients.wire_targets = nic::wire_targets(&setup.targets, wire.subnet.server_addr());
        clients.route = Route::Wire;
        clients.warm_up(|what| eprintln!("warm-up over the wire: {what}"))?;
        clients.route = Route::Docker;
    }
    switch.set(Route::Docker)?;
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
    let results = show_steps(|tell| nic::run(setup.direction, &plan, switch, &mut clients, tell))?;
    let load = HostLoad::since(&load_start);
    drop(servers);
    drop(wire);
    switch
        .restore()
        .context("measured, but could not put the fast path back as it was")?;
    eprintln!(
        "done in {}s; {} is {found} again",
        started.elapsed().as_secs(),
        setup.container
    );
    let cpu_idle = CpuIdle::read();
    let load_line = format!(
        "{}{}{}",
        load.describe(),
        setup.placement.map_or(String::new(), |p| format!(
            "; clients on CPU {}, servers on CPU {}",
            p.client_cpu, p.server_cpu
        )),
        cpu_idle
            .as_ref()
            .map_or(String::new(), |idle| format!("\n{}", idle.describe()))
    );

    let json_to_stdout = setup.json.as_deref() == Some(Path::new("-"));
    let text = format!("{}{load_line}\n", nic::render(&results, plan.rounds));
    if json_to_stdout {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    if let Some(path) = &setup.json {
        let report = JsonReport::new(&results, &setup, load, cpu_idle);
        write_json(path, &(serde_json::to_string_pretty(&report)? + "\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The object `json!` made, as a map: a direction's fields of the report.
pub fn into_map(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match value {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
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

#[derive(Serialize)]
struct JsonReport<'a> {
    /// `dxdp.bench-ingress/1` or `dxdp.bench-egress/1`: the shapes docs/json.md documents.
    schema: &'static str,
    container: &'a str,
    container_veth: &'a str,
    nic: &'a str,
    /// The direction's own fields (the client's or the servers' namespace, the ports, what
    /// was found).
    #[serde(flatten)]
    direction: &'a serde_json::Map<String, serde_json::Value>,
    rounds: u32,
    seconds_per_test: u32,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    fast_over_wire: Option<f64>,
    /// The bound on `fast_over_docker`: at least (rates) or at most (latency).
    goal: Option<f64>,
    goal_met: Option<bool>,
    /// How many of `fast_over_docker_per_round` meet the goal.
    goal_met_rounds: Option<usize>,
    /// The lower bound on `fast_over_wire`, where it sets one.
    #[serde(skip_serializing_if = "Option::is_none")]
    wire_goal: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wire_goal_met: Option<bool>,
}

/// The wire's subnet and its ends' addresses; `container_addr` is whichever end the container
/// has.
#[derive(Serialize)]
struct JsonWire {
    subnet: String,
    container_addr: String,
    client_addr: String,
    server_addr: String,
}

#[derive(Serialize)]
struct JsonRoute {
    samples: Vec<f64>,
    #[serde(flatten)]
    spread: Option<Spread>,
}

impl<'a> JsonReport<'a> {
    fn new(
        results: &'a Results,
        setup: &'a Setup,
        host_load: HostLoad,
        cpu_idle: Option<CpuIdle>,
    ) -> Self {
        let direction = setup.direction;
        let route = |r: Route, m: Metric| JsonRoute {
            samples: results.samples(r, m).to_vec(),
            spread: results.spread(r, m),
        };
        Self {
            schema: direction.schema(),
            container: &setup.container,
            container_veth: &setup.veth,
            nic: &setup.nic,
            direction: &setup.json_fields,
            rounds: setup.plan.rounds,
            seconds_per_test: setup.plan.seconds,
            wire: setup.wire.map(|w| JsonWire {
                subnet: w.to_string(),
                container_addr: match direction {
                    Direction::Ingress => w.server_addr(),
                    Direction::Egress => w.client_addr(),
                }
                .to_string(),
                client_addr: w.client_addr().to_string(),
                server_addr: w.server_addr().to_string(),
            }),
            placement: setup.placement,
            host_load,
            cpu_idle,
            metrics: Metric::ALL
                .iter()
                .map(|&m| JsonMetric {
                    id: m.id(direction),
                    label: m.label(direction),
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
                    fast_over_wire: results.fast_over_wire(m),
                    goal: results.goal(m),
                    goal_met: results.met(m),
                    goal_met_rounds: results.rounds_meeting_goal(m).map(|(met, _)| met),
                    wire_goal: direction.wire_goal(m),
                    wire_goal_met: results.wire_met(m),
                })
                .collect(),
            fast_path_packets_per_round: &results.fast_packets_per_round,
        }
    }
}
