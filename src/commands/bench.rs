//! `dxdp bench A B`: measures the pair over the bridge, each datapath and loopback, then puts
//! the pair's link back as it was.
use std::{
    net::{IpAddr, Ipv4Addr},
    path::Path,
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::{
    mtu,
    resolve::{Pair, resolve_placed_pair},
};
use crate::{
    bench::{
        Config,
        containers::{self, Metric, PairSchedule, Results, Workloads},
        cpu_idle::CpuIdle,
        host_load::{self, HostLoad, cpus, load_average},
        measure::{self, Runner},
        pair::PairState,
        pps, show_steps,
        stats::Spread,
    },
    cli::BenchArgs,
    datapath::Capacity,
    endpoint::Endpoint,
    firewall, netlink,
    netns::NetnsPath,
};

pub fn run(pin_dir: &Path, capacity: Capacity, args: BenchArgs) -> Result<ExitCode> {
    let plan = PairSchedule {
        configs: configs(&args)?,
        rounds: if args.quick { 1 } else { args.rounds },
        seconds: if args.quick { 1 } else { args.seconds },
    };
    if !nix::unistd::geteuid().is_root() {
        bail!("dxdp bench must run as root: it enters network namespaces and links the pair");
    }
    let tools = if args.pps {
        measure::PPS_TOOLS
    } else {
        measure::TOOLS
    };
    if let Some((tool, hint)) = measure::missing_tool(tools) {
        bail!(
            "{tool} is not installed on the host: {hint}; the bench runs the host's tools inside \
             the endpoints' namespaces, so containers need none of their own"
        );
    }
    let host = netlink::interfaces(&NetnsPath::host())?;
    let (pair, sandbox) = resolve_placed_pair(&args.a, &args.b, &host)?;
    // On an overlay network the sandbox is the host of the pair's veths, rules and link.
    crate::overlay::in_site(sandbox.as_ref(), pin_dir, |dir| {
        measure_pair(dir, capacity, args, plan, pair)
    })
}

/// Measures the pair, whose veths are in the calling thread's namespace, with its links
/// pinned in `pin_dir`.
fn measure_pair(
    pin_dir: &Path,
    capacity: Capacity,
    args: BenchArgs,
    plan: PairSchedule,
    Pair { a, b, network }: Pair,
) -> Result<ExitCode> {
    if a.host_ifindex == b.host_ifindex {
        bail!("{} and {} are the same endpoint", args.a, args.b);
    }
    if a.bridge_ifindex != b.bridge_ifindex {
        bail!(
            "cannot compare {} and {} with the bridge: {} hangs on bridge {} and {} on bridge {}",
            a.label,
            b.label,
            a.label,
            a.bridge_name,
            b.label,
            b.bridge_name
        );
    }
    let mut families = crate::family::Families::ALL;
    if !args.bypass_firewall && plan.configs.iter().any(|c| c.datapath().is_some()) {
        let way_out = "measure with --bypass-firewall";
        let verdict = firewall::check(&a, &b, way_out)?;
        // The bench measures over IPv4: a link that leaves it on the bridge measures nothing.
        if !verdict.open().ipv4 {
            let ipv4 = crate::family::Families::IPV4;
            bail!(firewall::refusal(
                &a.label,
                &b.label,
                &a.bridge_name,
                &verdict.closing(ipv4),
                way_out
            ));
        }
        families = verdict.open();
    }
    let server_ip = measure::ipv4_of(b.netns.path(), &b.ifname)
        .with_context(|| format!("cannot find the IPv4 address of {}", b.label))?;

    measure::catch_interrupts()?;
    let mut pair = PairState::snapshot(
        pin_dir,
        capacity,
        a.clone(),
        b.clone(),
        network.clone(),
        args.bypass_firewall,
        families,
    )?;
    for config in &plan.configs {
        if let Some(kind) = config.datapath()
            && let Some(why) = pair.conflict(kind)?
        {
            bail!("cannot measure {kind}: {why}; leave it out with --only");
        }
    }
    check_ports(&plan, &a, &b, args.port)?;
    check_quiet(&pair, &a, &b)?;
    let found = match pair.found() {
        Some(f) => format!("linked with {}", f.datapath),
        None => "not linked".to_owned(),
    };
    let run = Run {
        plan: &plan,
        args: &args,
        a: &a,
        b: &b,
        server_ip,
        network: &network,
        found: &found,
    };
    if args.pps {
        return run.pps(&mut pair);
    }

    let over_pair = Runner {
        client_ns: a.netns.path().to_path_buf(),
        server_ns: b.netns.path().to_path_buf(),
        target: IpAddr::V4(server_ip),
        port: args.port,
        seconds: plan.seconds,
        label: format!("{} -> {} ({server_ip})", a.label, b.label),
        placement: None,
    };
    let loopback = Runner {
        client_ns: a.netns.path().to_path_buf(),
        server_ns: a.netns.path().to_path_buf(),
        target: IpAddr::V4(Ipv4Addr::LOCALHOST),
        label: format!("loopback in {}", a.label),
        ..over_pair.clone()
    };
    run.announce("tests", containers::estimate(&plan));
    // redis-server and sockperf in B (and A, for loopback) for the whole run; dropped, so
    // killed, however it ends (a failed measurement, Ctrl-C) before the pair is put back.
    let with_loopback = plan.configs.contains(&Config::Loopback);
    let workloads = Workloads::start(&over_pair, with_loopback.then_some(&loopback))?;
    let load_start = host_load::start();
    let started = Instant::now();
    let results = show_steps(|tell| {
        containers::run(&plan, &mut pair, &over_pair, &loopback, &workloads, tell)
    });
    drop(workloads);
    let results = results?;
    run.restored(&mut pair, started)?;

    let load = HostLoad::since(&load_start);
    let mtu = pair_mtu(&a, &b);
    run.emit(&containers::render_table(&results, plan.rounds), || {
        Ok(serde_json::to_string_pretty(&JsonReport {
            schema: "dxdp.bench/1",
            pair: run.pair_info(load, mtu),
            seconds_per_test: plan.seconds,
            pings_per_round: plan.pings(),
            baseline: results.baseline(),
            configs: json_configs(&results),
        })?)
    })?;
    let title = format!("dxdp bench: {} -> {}", a.label, b.label);
    let subtitle = format!(
        "{} round(s) × {}s per test on {}; medians relative to {}",
        plan.rounds,
        plan.seconds,
        on_bridge(&network, &a.bridge_name),
        results.baseline().map_or("-", |c| c.name())
    );
    if let Some(path) = &args.plot {
        std::fs::write(
            path,
            containers::render_chart(&containers::chart(&results, title, subtitle)),
        )
        .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The configurations to measure: `--only`'s, and for `--pps` all but loopback, whose traffic
/// never touches the pair.
fn configs(args: &BenchArgs) -> Result<Vec<Config>> {
    let configs = Config::selection(&args.only);
    if !args.pps {
        return Ok(configs);
    }
    if args.only.contains(&Config::Loopback) {
        bail!("--pps measures the pair's path, and loopback has none: leave it out of --only");
    }
    Ok(configs
        .into_iter()
        .filter(|c| *c != Config::Loopback)
        .collect())
}

/// One bench run's pair and plan, for what both kinds of measurement print and write alike.
struct Run<'a> {
    plan: &'a PairSchedule,
    args: &'a BenchArgs,
    a: &'a Endpoint,
    b: &'a Endpoint,
    server_ip: Ipv4Addr,
    network: &'a str,
    /// How the pair was linked when the bench started, in words.
    found: &'a str,
}

impl Run<'_> {
    /// What is about to be measured and for how long, and a warning on a loaded host.
    fn announce(&self, what: &str, estimate: Duration) {
        eprintln!(
            "benchmarking {} -> {} ({}) on {}, {}: {} × {} round(s) of {}s {what}, about {}s",
            self.a.label,
            self.b.label,
            self.server_ip,
            on_bridge(self.network, &self.a.bridge_name),
            self.found,
            self.plan
                .configs
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(","),
            self.plan.rounds,
            self.plan.seconds,
            estimate.as_secs()
        );
        if let Some(load) = load_average()
            && load > cpus() as f64
        {
            eprintln!(
                "warning: load average {load:.1} on {} CPUs: other work competes with the \
                 measurement, so expect wide ranges and ratios that mean little",
                cpus()
            );
        }
    }

    fn restored(&self, pair: &mut PairState, started: Instant) -> Result<()> {
        pair.restore()
            .context("measured, but could not put the pair back as it was")?;
        eprintln!(
            "done in {}s; the pair is {} again",
            started.elapsed().as_secs(),
            self.found
        );
        Ok(())
    }

    /// Prints the table and the pair's MTU, and writes the JSON `--json` asks for. `--json -`
    /// makes stdout the JSON's: the table goes to stderr then.
    fn emit(&self, table: &str, json: impl FnOnce() -> Result<String>) -> Result<()> {
        let json_to_stdout = self.args.json.as_deref() == Some(Path::new("-"));
        if json_to_stdout {
            eprint!("{table}");
        } else {
            print!("{table}");
        }
        eprintln!("{}", mtu_note(pair_mtu(self.a, self.b)));
        if let Some(path) = &self.args.json {
            let report = json()? + "\n";
            if json_to_stdout {
                print!("{report}");
            } else {
                std::fs::write(path, report)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
        Ok(())
    }

    fn pair_info(&self, load: HostLoad, mtu: Option<u32>) -> PairInfo {
        PairInfo {
            a: self.a.label.clone(),
            b: self.b.label.clone(),
            a_host_veth: self.a.host_ifname.clone(),
            b_host_veth: self.b.host_ifname.clone(),
            network: self.network.to_owned(),
            bridge: self.a.bridge_name.clone(),
            server_ip: self.server_ip.to_string(),
            port: self.args.port,
            rounds: self.plan.rounds,
            host_load: load,
            cpu_idle: CpuIdle::read(),
            mtu,
        }
    }

    /// `--pps`: frames from A (XDP live frames, or an AF_PACKET socket where the kernel refuses
    /// them), counted at B's XDP receiver, B's stack and an AF_XDP
    /// application on B's interface.
    fn pps(&self, pair: &mut PairState) -> Result<ExitCode> {
        let (a, b) = (self.a, self.b);
        let src_ip = measure::ipv4_of(a.netns.path(), &a.ifname)
            .with_context(|| format!("cannot find the IPv4 address of {}", a.label))?;
        let setup = pps::Setup {
            a,
            b,
            flow: pps::Flow {
                src_mac: a.mac,
                dst_mac: b.mac,
                src_ip,
                dst_ip: self.server_ip,
                port: self.args.port,
            },
            seconds: self.plan.seconds,
        };
        let (configs, rounds) = (&self.plan.configs, self.plan.rounds);
        self.announce(
            "frames per run",
            pps::estimate(configs, rounds, self.plan.seconds),
        );
        let load_start = host_load::start();
        let started = Instant::now();
        let results = show_steps(|tell| pps::run(configs, rounds, pair, &setup, tell))?;
        self.restored(pair, started)?;
        let load = HostLoad::since(&load_start);
        let mtu = pair_mtu(a, b);
        self.emit(&pps::render(&results, rounds), || {
            Ok(serde_json::to_string_pretty(&PpsReport {
                schema: "dxdp.bench-pps/1",
                pair: self.pair_info(load, mtu),
                seconds_per_run: self.plan.seconds,
                src_ip: src_ip.to_string(),
                generator: results.generator,
                live_frames_refused: results.live_frames_refused.clone(),
                configs: pps::json_configs(&results),
            })?)
        })?;
        Ok(ExitCode::SUCCESS)
    }
}

/// The pair's MTU, the smaller of its two host veths' (Docker gives both ends of a veth the
/// network's).
fn pair_mtu(a: &Endpoint, b: &Endpoint) -> Option<u32> {
    Some(mtu::of(&a.host_ifname)?.min(mtu::of(&b.host_ifname)?))
}

/// The pair's MTU beside the table: bulk TCP between containers is bound by it more than by the
/// bridge, which a user tuning for throughput should know before choosing a datapath.
fn mtu_note(mtu: Option<u32>) -> String {
    match mtu {
        None => "the pair's MTU could not be read".to_owned(),
        Some(mtu) => {
            let advice = mtu::advice(mtu);
            match advice.split_once(": ") {
                Some((figure, rest)) => format!("{figure} on this pair: {rest}"),
                None => format!("{advice} on this pair"),
            }
        }
    }
}

/// `NETWORK (BRIDGE)`, or the bridge alone when the network is named after it (netns endpoints).
fn on_bridge(network: &str, bridge: &str) -> String {
    if network == bridge {
        bridge.to_owned()
    } else {
        format!("{network} ({bridge})")
    }
}

fn check_ports(plan: &PairSchedule, a: &Endpoint, b: &Endpoint, port: u16) -> Result<()> {
    let mut sides = vec![b];
    if plan.configs.contains(&Config::Loopback) {
        sides.push(a);
    }
    for ep in sides {
        if !measure::port_free(&ep.netns, port)? {
            bail!(
                "port {port} is in use in the namespace of {}; an iperf3 server already there \
                 would answer instead of ours, so pick another with --port",
                ep.label
            );
        }
    }
    Ok(())
}

fn rx_packets(ifname: &str) -> Result<u64> {
    measure::host_counter(ifname, "rx_packets")
}

/// Refuses a pair that already carries traffic: it would share the path (and the CPUs) with
/// ours and make every configuration look slower, the bridge by a different amount than the
/// datapaths. Counts what reaches the host veths, and what the datapath saw if linked.
fn check_quiet(pair: &PairState, a: &Endpoint, b: &Endpoint) -> Result<()> {
    let rates = measure::per_second(|| {
        Ok(vec![
            rx_packets(&a.host_ifname)?,
            rx_packets(&b.host_ifname)?,
            pair.seen()?,
        ])
    })?;
    let busiest = rates
        .iter()
        .map(|r| r.round() as u64)
        .zip([
            a.host_ifname.as_str(),
            b.host_ifname.as_str(),
            "the pair's link",
        ])
        .max_by_key(|(rate, _)| *rate);
    if let Some((rate, on)) = busiest
        && rate > measure::MAX_BACKGROUND_PPS
    {
        bail!(
            "busy: {rate} pps of other traffic on {on}; the bench would measure it too, so run \
             it on a quiet pair (limit {} pps)",
            measure::MAX_BACKGROUND_PPS
        );
    }
    Ok(())
}

/// What both reports say about the pair and the run.
#[derive(Serialize)]
struct PairInfo {
    a: String,
    b: String,
    a_host_veth: String,
    b_host_veth: String,
    network: String,
    bridge: String,
    server_ip: String,
    port: u16,
    rounds: u32,
    host_load: HostLoad,
    /// How idle CPUs wait (`null` without cpuidle): the cost of every wake-up in an RTT.
    cpu_idle: Option<CpuIdle>,
    /// The pair's MTU (`null` if it could not be read).
    mtu: Option<u32>,
}

#[derive(Serialize)]
struct JsonReport {
    /// `dxdp.bench/1`: the shape docs/json.md documents.
    schema: &'static str,
    #[serde(flatten)]
    pair: PairInfo,
    seconds_per_test: u32,
    pings_per_round: u32,
    baseline: Option<Config>,
    configs: Vec<JsonConfig>,
}

/// `dxdp.bench-pps/1` (docs/json.md).
#[derive(Serialize)]
struct PpsReport {
    schema: &'static str,
    #[serde(flatten)]
    pair: PairInfo,
    seconds_per_run: u32,
    src_ip: String,
    generator: pps::Generator,
    #[serde(skip_serializing_if = "Option::is_none")]
    live_frames_refused: Option<String>,
    configs: Vec<pps::JsonConfig>,
}

#[derive(Serialize)]
struct JsonConfig {
    name: Config,
    metrics: Vec<JsonMetric>,
    rtt_us_per_round: Vec<Vec<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    redirected_packets: Option<u64>,
}

#[derive(Serialize)]
struct JsonMetric {
    id: &'static str,
    unit: &'static str,
    samples: Vec<f64>,
    #[serde(flatten)]
    spread: Option<Spread>,
    ratio_to_baseline: Option<f64>,
}

fn json_configs(results: &Results) -> Vec<JsonConfig> {
    results
        .configs
        .iter()
        .map(|(config, samples)| JsonConfig {
            name: *config,
            metrics: Metric::ALL
                .iter()
                .map(|m| JsonMetric {
                    id: m.id(),
                    unit: m.unit(),
                    samples: samples.of(*m).to_vec(),
                    spread: Spread::of(samples.of(*m)),
                    ratio_to_baseline: results.ratio(*config, *m),
                })
                .collect(),
            rtt_us_per_round: samples.rtt_us_per_round.clone(),
            redirected_packets: samples.redirected_packets,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::mtu_note;

    #[test]
    fn the_mtu_note_names_the_pair_and_the_way_to_raise_a_default_one() {
        let default = mtu_note(Some(1500));
        assert!(default.starts_with("MTU 1500 on this pair: "), "{default}");
        assert!(
            default.contains("com.docker.network.driver.mtu"),
            "{default}"
        );
        assert_eq!(mtu_note(Some(9000)), "MTU 9000 on this pair");
        assert!(mtu_note(None).contains("could not be read"));
    }
}
