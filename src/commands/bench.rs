//! `dxdp bench A B`: measures the pair over the bridge, each datapath and loopback, then puts
//! the pair's link back as it was.
use std::{
    net::{IpAddr, Ipv4Addr},
    path::Path,
    process::ExitCode,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::{
    mtu,
    resolve::{Pair, resolve_pair},
};
use crate::{
    bench::{
        self, Config, Metric, Plan, Results, Step,
        measure::{self, Runner},
        pair::PairState,
        stats::Spread,
        svg, table,
    },
    cli::BenchArgs,
    datapath::Capacity,
    endpoint::Endpoint,
    firewall, netlink,
    netns::NetnsPath,
};

/// Above this, other traffic on the pair would be measured along with ours.
const MAX_BACKGROUND_PPS: u64 = 1000;

pub fn run(pin_dir: &Path, capacity: Capacity, args: BenchArgs) -> Result<ExitCode> {
    let plan = Plan {
        configs: Config::selection(&args.only),
        rounds: if args.quick { 1 } else { args.rounds },
        seconds: if args.quick { 1 } else { args.seconds },
    };
    if !nix::unistd::geteuid().is_root() {
        bail!("dxdp bench must run as root: it enters network namespaces and links the pair");
    }
    if let Some((tool, hint)) = measure::missing_tool() {
        bail!(
            "{tool} is not installed on the host: {hint}; the bench runs the host's tools inside \
             the endpoints' namespaces, so containers need none of their own"
        );
    }
    let host = netlink::interfaces(&NetnsPath::host())?;
    let Pair { a, b, network } = resolve_pair(&args.a, &args.b, &host)?;
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
    if !args.bypass_firewall && plan.configs.iter().any(|c| c.datapath().is_some()) {
        firewall::check(&a, &b, "measure with --bypass-firewall")?;
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

    let over_pair = Runner {
        client_ns: a.netns.path().to_path_buf(),
        server_ns: b.netns.path().to_path_buf(),
        target: IpAddr::V4(server_ip),
        port: args.port,
        seconds: plan.seconds,
        label: format!("{} -> {} ({server_ip})", a.label, b.label),
    };
    let loopback = Runner {
        client_ns: a.netns.path().to_path_buf(),
        server_ns: a.netns.path().to_path_buf(),
        target: IpAddr::V4(Ipv4Addr::LOCALHOST),
        label: format!("loopback in {}", a.label),
        ..over_pair.clone()
    };
    let found = match pair.found() {
        Some(f) => format!("linked with {}", f.datapath),
        None => "not linked".to_owned(),
    };
    eprintln!(
        "benchmarking {} -> {} ({server_ip}) on {}, {found}: {} × {} round(s) of {}s tests, \
         about {}s",
        a.label,
        b.label,
        on_bridge(&network, &a.bridge_name),
        plan.configs
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(","),
        plan.rounds,
        plan.seconds,
        bench::estimate(&plan).as_secs()
    );
    let load_before = load_average();
    if let Some(load) = load_before
        && load > cpus() as f64
    {
        eprintln!(
            "warning: load average {load:.1} on {} CPUs: other work competes with the \
             measurement, so expect wide ranges and ratios that mean little",
            cpus()
        );
    }
    let started = Instant::now();
    let mut midline = false;
    let results = bench::run(&plan, &mut pair, &over_pair, &loopback, |step| {
        match step {
            Step::Begin(what) => eprint!("{what} ... "),
            Step::End(result) => eprintln!("{result}"),
            Step::Note(note) => eprintln!("{note}"),
        }
        midline = matches!(step, Step::Begin(_));
    });
    if midline {
        // The error that ended the run gets a line of its own.
        eprintln!("failed");
    }
    let results = results?;
    pair.restore()
        .context("measured, but could not put the pair back as it was")?;
    eprintln!(
        "done in {}s; the pair is {found} again",
        started.elapsed().as_secs()
    );

    let load = HostLoad {
        cpus: cpus(),
        before: load_before,
        after: load_average(),
    };
    // `--json -` makes stdout the JSON's: the table goes to stderr then.
    let json_to_stdout = args.json.as_deref() == Some(Path::new("-"));
    if json_to_stdout {
        eprint!("{}", table::render(&results, plan.rounds));
    } else {
        print!("{}", table::render(&results, plan.rounds));
    }
    let mtu = pair_mtu(&a, &b);
    eprintln!("{}", mtu_note(mtu));
    let title = format!("dxdp bench: {} -> {}", a.label, b.label);
    let subtitle = format!(
        "{} round(s) × {}s per test on {}; medians relative to {}",
        plan.rounds,
        plan.seconds,
        on_bridge(&network, &a.bridge_name),
        results.baseline().map_or("-", |c| c.name())
    );
    if let Some(path) = &args.json {
        let info = RunInfo {
            plan: &plan,
            a: &a,
            b: &b,
            server_ip,
            port: args.port,
            network: &network,
            load,
            mtu,
        };
        let report = serde_json::to_string_pretty(&JsonReport::new(&results, &info))? + "\n";
        if json_to_stdout {
            print!("{report}");
        } else {
            std::fs::write(path, report)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, svg::render(&svg::chart(&results, title, subtitle)))
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
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

pub(super) fn cpus() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// The 1-minute load average, recorded with the results because a loaded host explains both
/// wide ranges and ratios that do not reproduce.
pub(super) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn check_ports(plan: &Plan, a: &Endpoint, b: &Endpoint, port: u16) -> Result<()> {
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
    let path = format!("/sys/class/net/{ifname}/statistics/rx_packets");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    text.trim()
        .parse()
        .with_context(|| format!("{path}: not a number"))
}

/// Refuses a pair that already carries traffic: it would share the path (and the CPUs) with
/// ours and make every configuration look slower, the bridge by a different amount than the
/// datapaths. Counts what reaches the host veths, and what the datapath saw if linked.
fn check_quiet(pair: &PairState, a: &Endpoint, b: &Endpoint) -> Result<()> {
    let sample = || -> Result<(u64, u64, u64)> {
        Ok((
            rx_packets(&a.host_ifname)?,
            rx_packets(&b.host_ifname)?,
            pair.seen()?,
        ))
    };
    let before = sample()?;
    let started = Instant::now();
    thread::sleep(Duration::from_secs(1));
    measure::check_interrupted()?;
    let after = sample()?;
    let secs = started.elapsed().as_secs_f64();
    let pps = |x: u64, y: u64| (y.saturating_sub(x) as f64 / secs).round() as u64;
    let busiest = [
        (pps(before.0, after.0), a.host_ifname.as_str()),
        (pps(before.1, after.1), b.host_ifname.as_str()),
        (pps(before.2, after.2), "the pair's link"),
    ]
    .into_iter()
    .max_by_key(|(rate, _)| *rate);
    if let Some((rate, on)) = busiest
        && rate > MAX_BACKGROUND_PPS
    {
        bail!(
            "busy: {rate} pps of other traffic on {on}; the bench would measure it too, so run \
             it on a quiet pair (limit {MAX_BACKGROUND_PPS} pps)"
        );
    }
    Ok(())
}

#[derive(Serialize)]
struct JsonReport {
    /// `dxdp.bench/1`: the shape docs/json.md documents.
    schema: &'static str,
    a: String,
    b: String,
    a_host_veth: String,
    b_host_veth: String,
    network: String,
    bridge: String,
    server_ip: String,
    port: u16,
    rounds: u32,
    seconds_per_test: u32,
    pings_per_round: u32,
    host_load: HostLoad,
    /// The pair's MTU (`null` if it could not be read).
    mtu: Option<u32>,
    baseline: Option<Config>,
    configs: Vec<JsonConfig>,
}

#[derive(Clone, Copy, Serialize)]
pub(super) struct HostLoad {
    pub cpus: usize,
    /// 1-minute load averages when the measurement started and ended.
    pub before: Option<f64>,
    pub after: Option<f64>,
}

/// What the report says about the run besides the samples.
struct RunInfo<'a> {
    plan: &'a Plan,
    a: &'a Endpoint,
    b: &'a Endpoint,
    server_ip: Ipv4Addr,
    port: u16,
    network: &'a str,
    load: HostLoad,
    mtu: Option<u32>,
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

impl JsonReport {
    fn new(results: &Results, cx: &RunInfo<'_>) -> Self {
        Self {
            schema: "dxdp.bench/1",
            a: cx.a.label.clone(),
            b: cx.b.label.clone(),
            a_host_veth: cx.a.host_ifname.clone(),
            b_host_veth: cx.b.host_ifname.clone(),
            network: cx.network.to_owned(),
            bridge: cx.a.bridge_name.clone(),
            server_ip: cx.server_ip.to_string(),
            port: cx.port,
            rounds: cx.plan.rounds,
            seconds_per_test: cx.plan.seconds,
            pings_per_round: cx.plan.pings(),
            host_load: cx.load,
            mtu: cx.mtu,
            baseline: results.baseline(),
            configs: results
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
                .collect(),
        }
    }
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
