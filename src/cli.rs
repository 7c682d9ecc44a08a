//! Command-line definitions; the doc comments are the help text.
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::{bench::wire::WireSubnet, choice::Choice, datapath::Capacity, endpoint::EndpointSpec};

/// Accelerate container-to-container links on one host: frames between linked containers skip
/// the Linux bridge through eBPF (TC redirect_peer or XDP devmap redirect).
#[derive(Debug, Parser)]
#[command(name = "dxdp", version, propagate_version = true)]
pub struct Cli {
    /// bpffs directory holding dxdp's pinned maps, programs and links.
    #[arg(long, global = true, env = "DXDP_PIN_DIR", default_value = crate::datapath::DEFAULT_PIN_DIR)]
    pub pin_dir: PathBuf,

    /// Most links a pin directory made from scratch can hold. Pinned maps keep the size they
    /// were made with: to change it, `dxdp cleanup` and link again.
    #[arg(
        long,
        global = true,
        env = "DXDP_MAX_LINKS",
        default_value_t = dxdp_common::DEFAULT_MAX_LINKS,
        value_parser = clap::value_parser!(u32).range(1..=MAX_CAPACITY)
    )]
    pub max_links: u32,

    /// Most veths a pin directory made from scratch can manage (see --max-links).
    #[arg(
        long,
        global = true,
        env = "DXDP_MAX_ENDPOINTS",
        default_value_t = dxdp_common::DEFAULT_MAX_ENDPOINTS,
        value_parser = clap::value_parser!(u32).range(1..=MAX_CAPACITY)
    )]
    pub max_endpoints: u32,

    /// Most TCP connections at once through exposed ports in a pin directory made from scratch
    /// (see --max-links); beyond it the least recently used is forgotten. A quarter as many
    /// more may be opening (handshake not completed), and a quarter as many UDP flows kept.
    #[arg(
        long,
        global = true,
        env = "DXDP_MAX_CONNECTIONS",
        default_value_t = dxdp_common::ingress::DEFAULT_MAX_FLOWS,
        value_parser = clap::value_parser!(u32).range(1..=MAX_CAPACITY)
    )]
    pub max_connections: u32,

    /// Log lines on stderr as human text, or as one JSON object per line (for journald, Loki
    /// and other collectors). `DXDP_LOG` sets the level, as `RUST_LOG` would.
    #[arg(
        long,
        global = true,
        env = "DXDP_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Upper bound of --max-links, --max-endpoints and --max-connections: the maps are
/// preallocated (some per CPU).
const MAX_CAPACITY: i64 = 1 << 20;

impl Cli {
    /// Map sizes for a pin directory made from scratch.
    pub fn capacity(&self) -> Capacity {
        Capacity {
            max_endpoints: self.max_endpoints,
            max_links: self.max_links,
            max_connections: self.max_connections,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Link two endpoints so their frames bypass the bridge in both directions.
    Link(LinkArgs),
    /// Remove the link between two endpoints; traffic goes back through the bridge.
    Unlink(UnlinkArgs),
    /// Take a container's published ports straight from the NIC into it, skipping Docker's
    /// DNAT, conntrack and the bridge (replies go back the same way).
    ///
    /// Every TCP and UDP port the container publishes on an address of the NIC (all of them for
    /// 0.0.0.0 and ::) gets the fast path; other traffic is untouched. Refused, with the rule
    /// named, where a firewall rule could drop or change the port's packets on Docker's path.
    Expose(ExposeArgs),
    /// Put a container's published ports back on Docker's path.
    Unexpose(UnexposeArgs),
    /// Take a container's outbound IPv4 connections straight to the NIC, conntrack still the
    /// only NAT table (`on`), or back on Docker's path (`off`).
    ///
    /// A connection's first packets take Docker's path (DOCKER-USER, MASQUERADE, conntrack);
    /// once conntrack holds it established, its packets skip the bridge and netfilter,
    /// translated as its conntrack entry says. Refused, with the rule named, where a firewall
    /// rule could drop or change them on Docker's path. See docs/egress.md.
    Egress(EgressArgs),
    /// Show installed links and their counters.
    Status(StatusArgs),
    /// Live rates of every link and managed veth, busiest first, from the pinned counters.
    ///
    /// On a terminal the view redraws in place every --interval seconds; `q` or Ctrl-C quits.
    /// Otherwise (or with --once, --count, --json) it prints one sample after another for
    /// scripts. Rates come from two reads of the counters --interval apart, so the first sample
    /// takes one interval. Needs no running watch.
    Top(TopArgs),
    /// Remove every link, program, fix-up and pin dxdp made.
    Cleanup,
    /// Follow Docker and keep the links that container labels ask for.
    Watch(WatchArgs),
    /// Measure a pair over the bridge, each datapath and loopback, and put its link back.
    ///
    /// Runs the host's iperf3 and ping inside both endpoints' namespaces (containers need no
    /// tools), and redis-benchmark's GETs and sockperf's ping-pong from A to a redis-server and
    /// a sockperf server it runs in B (in A, on 127.0.0.1, for loopback), interleaving the
    /// configurations round by round, and prints `median (min–max)` per metric. Each datapath links the pair only while it is measured; the link found at
    /// the start (or its absence) is restored afterwards, also after an error or Ctrl-C.
    /// Refuses a pair that carries other traffic or whose endpoints are on different bridges.
    Bench(BenchArgs),
    /// Measure a container's published ports from outside over Docker's path and the fast path.
    ///
    /// Clients in a client namespace reach the container through a NIC at its published
    /// addresses; the servers are the host's redis-server, nginx, iperf3 and sockperf run in
    /// the container's namespace, so the container must publish 6379/tcp, 80/tcp, 5201/tcp,
    /// 5201/udp (on the same host port as 5201/tcp) and 11111/tcp on an address of the NIC.
    /// Docker's path (unexposed) and `dxdp expose CONTAINER --nic IFACE` alternate round by
    /// round; the table shows `median (min–max)` of each and their ratio. The exposure found at
    /// the start (or its absence) is restored afterwards, also after an error or Ctrl-C.
    BenchIngress(BenchIngressArgs),
    /// Measure a container's outbound connections over Docker's path and the egress fast path.
    ///
    /// The container is the client: the host's redis-benchmark, wrk, iperf3 and sockperf run in
    /// its namespace against the host's redis-server, nginx, iperf3 and sockperf servers run in
    /// a namespace behind the NIC (on 6379, 80, 5201 and 11111), which the host routes to
    /// through the NIC and Docker masquerades the container's connections to. Docker's path and
    /// `dxdp egress on CONTAINER --nic IFACE` alternate round by round; the table shows
    /// `median (min–max)` of each and their ratio. The container's egress fast path as found at
    /// the start (on or off) is restored afterwards, also after an error or Ctrl-C.
    BenchEgress(BenchEgressArgs),
    /// Check the dxdp labels of compose files without Docker: every problem, one per line.
    ComposeCheck(ComposeCheckArgs),
    /// Check that this host can run dxdp, with a fix for each problem.
    Doctor(DoctorArgs),
    /// Print shell completions.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff).
    Man,
}

/// Endpoints: netns:NAME[:IFACE] (a namespace under /run/netns), pid:PID[:IFACE], or a
/// container name, ID prefix or compose service.
#[derive(Debug, Args)]
pub struct LinkArgs {
    #[arg(value_parser = EndpointParser)]
    pub a: EndpointSpec,
    #[arg(value_parser = EndpointParser)]
    pub b: EndpointSpec,
    #[arg(long, value_enum, default_value_t)]
    pub datapath: Choice,
    /// Link even if a firewall rule (iptables, ip6tables, nftables) could drop the pair's
    /// traffic on the bridge: the link bypasses such rules. Without it, such a pair is refused
    /// with the rule named.
    #[arg(long)]
    pub bypass_firewall: bool,
}

#[derive(Debug, Args)]
pub struct UnlinkArgs {
    #[arg(value_parser = EndpointParser)]
    pub a: EndpointSpec,
    #[arg(value_parser = EndpointParser)]
    pub b: EndpointSpec,
}

#[derive(Debug, Args)]
pub struct ExposeArgs {
    /// Container name or ID prefix.
    pub container: String,
    /// The interface clients come in on (repeatable); the default route's if not given.
    #[arg(long = "nic", value_name = "IFACE")]
    pub nics: Vec<String>,
    /// Expose even if a firewall rule could drop or change the port's packets on Docker's
    /// path: the fast path skips such rules. Without it, such a port is refused, rule named.
    #[arg(long)]
    pub bypass_firewall: bool,
}

#[derive(Debug, Args)]
pub struct EgressArgs {
    #[command(subcommand)]
    pub action: EgressAction,
}

#[derive(Debug, Subcommand)]
pub enum EgressAction {
    /// Enable the fast path for the container's outbound connections.
    On {
        /// Container name or ID prefix.
        container: String,
        /// The interface its connections leave by; the default route's if not given.
        #[arg(long = "nic", value_name = "IFACE")]
        nic: Option<String>,
    },
    /// Put the container's outbound connections back on Docker's path.
    Off {
        /// Container name or ID prefix.
        container: String,
    },
}

#[derive(Debug, Args)]
pub struct UnexposeArgs {
    /// Container name or ID prefix.
    pub container: String,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON for scripts instead of a table (shape: docs/json.md, `dxdp.status/1`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON for scripts instead of lines (shape: docs/json.md, `dxdp.doctor/1`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Seconds between samples (fractions allowed, 0.1 to 3600).
    #[arg(long, default_value_t = 1.0, value_name = "SECS", value_parser = parse_interval)]
    pub interval: f64,
    /// Print one sample and exit (same as --count 1).
    #[arg(long, conflicts_with = "count")]
    pub once: bool,
    /// Print this many samples and exit.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// One JSON object per sample per line (schema "dxdp.top/1") instead of tables.
    #[arg(long)]
    pub json: bool,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    if (0.1..=3600.0).contains(&secs) {
        Ok(secs)
    } else {
        Err(format!("{s} is outside 0.1 to 3600 seconds"))
    }
}

/// Labels: dxdp.enable=true opts a container in; dxdp.peers=NAME[,NAME...] and
/// dxdp.group=NAME link it; dxdp.datapath=auto|tc|xdp and dxdp.network=NAME refine the link.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Seconds between full resyncs, which heal any missed event.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub resync: u64,
    /// On exit, remove the links and exposed ports this watch made (by default they stay and
    /// keep working).
    #[arg(long)]
    pub cleanup: bool,
    /// Reconcile once and exit.
    #[arg(long)]
    pub once: bool,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9477) at /metrics.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// While a pass attaches programs, turn the kernel's expedited RCU grace periods on
    /// (/sys/kernel/rcu_expedited), and back to what they were when it is done. Each TCX
    /// attachment waits for a grace period (about 12 ms), one after another, so a first
    /// reconcile of 200 containers takes seconds; expedited, it takes under one. The switch is
    /// host-wide: while on, every grace period interrupts every CPU. A value set already is left
    /// alone.
    #[arg(long)]
    pub expedite_rcu: bool,
    /// The interface clients of published ports come in on (repeatable): containers labeled
    /// `dxdp.ingress=true` have their published ports taken from it straight into them (as
    /// `dxdp expose`). The default route's interface if not given.
    #[arg(long = "ingress-nic", value_name = "IFACE")]
    pub ingress_nics: Vec<String>,
    /// The interface containers labeled `dxdp.egress=true` have their established outbound
    /// connections taken to (as `dxdp egress on --nic`). The default route's interface if not
    /// given.
    #[arg(long = "egress-nic", value_name = "IFACE")]
    pub egress_nic: Option<String>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Each FILE is checked on its own, as one compose project, and the -f files \
    together as one more; `-` reads standard input, so `docker compose config | dxdp \
    compose-check -` checks exactly what Compose will run (overrides, extends and variables \
    resolved). Without files: COMPOSE_FILE (separated by COMPOSE_PATH_SEPARATOR, default ':'; \
    one project), else the first of compose.yaml, compose.yml, docker-compose.yaml, \
    docker-compose.yml in this directory, as Compose looks them up. Each problem starts with \
    FILE:LINE:COLUMN, where its label (or service) is written. Exit \
    status: 0 without errors (warnings allowed), 1 with errors or when a file cannot be read or \
    parsed, 2 for a command line that does not parse."
)]
pub struct ComposeCheckArgs {
    /// Compose files (docker-compose.yml, ...), each checked as a project of its own; `-` for
    /// standard input.
    pub files: Vec<PathBuf>,
    /// A compose file, as `docker compose -f` takes it; repeatable: the -f files are merged into
    /// one project, as Compose merges them, and checked after FILES. A problem names the file
    /// that wrote the label.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Vec<PathBuf>,
    /// Let dxdp.peers name containers outside the file: a name that matches no service or
    /// container_name is then a warning, not an error.
    #[arg(long)]
    pub allow_external: bool,
    /// Compose project name, so that dxdp.network=PROJECT_NETWORK can be checked exactly
    /// (otherwise the file's top-level `name:`).
    #[arg(long, short = 'p', env = "COMPOSE_PROJECT_NAME")]
    pub project_name: Option<String>,
    /// Print JSON for scripts instead of lines (shape: docs/json.md, `dxdp.compose-check/1`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Client side: netns:NAME[:IFACE], pid:PID[:IFACE] or a container.
    pub a: EndpointSpec,
    /// Server side; the bench targets the IPv4 address of its interface.
    pub b: EndpointSpec,
    /// Rounds over all configurations; the table shows the median and the range.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Seconds per iperf3, redis-benchmark and sockperf test (and 200 pings per second for the
    /// RTT).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub seconds: u32,
    /// Configurations to measure, comma-separated (default: all).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "CONFIG,...")]
    pub only: Vec<crate::bench::Config>,
    /// One round of 1 s tests: a smoke test, not a measurement.
    #[arg(long, conflicts_with_all = ["rounds", "seconds"])]
    pub quick: bool,
    /// TCP and UDP port of the iperf3 server inside the namespaces.
    #[arg(long, default_value_t = 5299, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// Also write every sample, median, range and ratio as JSON to FILE (`-`: to stdout, the
    /// table then to stderr; shape: docs/json.md, `dxdp.bench/1`).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write an SVG bar chart, normalised to the bridge, to FILE.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Measure the datapaths even if a firewall rule could drop the pair's traffic on the
    /// bridge (see `dxdp link --bypass-firewall`).
    #[arg(long)]
    pub bypass_firewall: bool,
    /// Measure packet rates instead: 64 B and 1500 B UDP frames sent from A as XDP live frames
    /// (not through A's sockets, which cap the rate; an AF_PACKET socket where the kernel
    /// refuses live frames), counted by an XDP program on B's
    /// interface, by B's UDP stack and by an application reading an AF_XDP socket on B's
    /// interface, with where the rest were dropped. `--seconds` is per run and `--port` the
    /// frames' UDP port; there is no loopback configuration nor chart.
    #[arg(long, conflicts_with = "plot")]
    pub pps: bool,
}

#[derive(Debug, Args)]
pub struct BenchIngressArgs {
    /// The container whose published ports are measured: name or ID prefix.
    pub container: String,
    /// Where the clients run: netns:NAME or pid:PID, a namespace that reaches the container's
    /// published addresses through --nic.
    #[arg(long, value_parser = EndpointParser, value_name = "NETNS")]
    pub client: EndpointSpec,
    /// The interface the clients come in on.
    #[arg(long = "nic", value_name = "IFACE")]
    pub nic: String,
    /// Expose even if a firewall rule could drop or change the ports' packets on Docker's path
    /// (see `dxdp expose --bypass-firewall`).
    #[arg(long)]
    pub bypass_firewall: bool,
    #[command(flatten)]
    pub run: NicBenchRun,
}

#[derive(Debug, Args)]
pub struct BenchEgressArgs {
    /// The container whose outbound connections are measured: name or ID prefix.
    pub container: String,
    /// Where the servers run: netns:NAME or pid:PID, a namespace the host routes to through
    /// --nic; the bench targets its first IPv4 address routed so.
    #[arg(long, value_parser = EndpointParser, value_name = "NETNS")]
    pub server: EndpointSpec,
    /// The interface the container's connections leave by.
    #[arg(long = "nic", value_name = "IFACE")]
    pub nic: String,
    #[command(flatten)]
    pub run: NicBenchRun,
}

/// How `bench-ingress` and `bench-egress` measure.
#[derive(Debug, Args)]
pub struct NicBenchRun {
    /// Rounds, each Docker's path then the fast path; the table shows the median and range.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub seconds: u32,
    /// Also measure, each round, over a veth pair laid from the outside namespace straight
    /// into the container's, with addresses from this IPv4 subnet (the server's end: its first
    /// host, the client's: its second): the reference no path through the NIC can beat.
    /// Removed at the end.
    #[arg(long, value_name = "SUBNET", value_parser = WireSubnet::parse)]
    pub wire: Option<WireSubnet>,
    /// Run every client tool on CPU 0 and every server on CPU 1 (the one-CPU ping-pong keeps
    /// both on CPU 0), so that every round of every route has the same placement rather than
    /// the scheduler's of the moment.
    #[arg(long)]
    pub pin_cpus: bool,
    /// Also write every sample, median, range and ratio as JSON to FILE (`-`: to stdout, the
    /// table then to stderr; shapes: docs/json.md, `dxdp.bench-ingress/1` and
    /// `dxdp.bench-egress/1`).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

impl Command {
    pub fn is_daemon(&self) -> bool {
        matches!(self, Command::Watch(_))
    }
}

/// Parses an endpoint like `EndpointSpec::from_str`, but says what is wrong without echoing a
/// huge argument whole: clap's own "invalid value '…'" prints every byte, and the reason once
/// more (a 100,000-character name made 200 KB of stderr).
#[derive(Clone)]
struct EndpointParser;

impl clap::builder::TypedValueParser for EndpointParser {
    type Value = EndpointSpec;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<EndpointSpec, clap::Error> {
        let arg = arg.map_or_else(|| "ENDPOINT".to_owned(), ToString::to_string);
        let Some(text) = value.to_str() else {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::InvalidUtf8,
                format!("invalid value for '{arg}': an endpoint is UTF-8 text\n"),
            )
            .with_cmd(cmd));
        };
        text.parse()
            .map_err(|e: crate::endpoint::EndpointParseError| {
                clap::Error::raw(
                    clap::error::ErrorKind::ValueValidation,
                    format!(
                        "invalid value '{}' for '{arg}': {e}\n",
                        crate::endpoint::shortened(text)
                    ),
                )
                .with_cmd(cmd)
            })
    }
}
