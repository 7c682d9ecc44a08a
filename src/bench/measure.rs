//! Running the host's iperf3 and ping inside the endpoints' namespaces, and reading their output
//! (redis and sockperf, which run the same way, are [`super::workloads`]').
//!
//! The tools come from the host and enter a namespace through `nsenter --net`, so containers need
//! no tools of their own. nsenter execs the tool when only the network namespace changes, so the
//! child we hold is iperf3 or ping itself and killing it leaves nothing behind.
use std::{
    io::Read,
    net::{IpAddr, Ipv4Addr},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use serde_json::Value;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Turns SIGINT and SIGTERM into a flag the measurement loop polls, so that Ctrl-C unwinds
/// through the guards that kill the tools and put the pair's link back, instead of killing
/// the process with the pair left in whatever configuration was being measured.
pub fn catch_interrupts() -> Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        let failed = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut()) != 0
        };
        if failed {
            return Err(std::io::Error::last_os_error()).context("cannot catch SIGINT/SIGTERM");
        }
    }
    Ok(())
}

pub fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

/// The host tools the bench runs, each with what to tell a user who lacks it.
pub const TOOLS: &[(&str, &str)] = &[
    (
        "iperf3",
        "install iperf3 (apt-get install iperf3, dnf install iperf3)",
    ),
    ("ping", "install iputils-ping"),
    (
        "redis-server",
        "install redis-server (apt-get install redis-server, dnf install redis)",
    ),
    (
        "redis-benchmark",
        "install redis-tools (apt-get install redis-tools, dnf install redis)",
    ),
    (
        "sockperf",
        "install sockperf (apt-get install sockperf; scripts/setup.sh installs it)",
    ),
    ("nsenter", "install util-linux"),
    ("ip", "install iproute2"),
];

/// The host tools `--pps` runs: no iperf3 nor ping, but ethtool for the XDP receiver's counters.
pub const PPS_TOOLS: &[(&str, &str)] = &[
    ("ethtool", "install ethtool"),
    ("nsenter", "install util-linux"),
    ("ip", "install iproute2"),
];

/// The first of `tools` missing from `PATH`, with its install hint.
pub fn missing_tool(
    tools: &[(&'static str, &'static str)],
) -> Option<(&'static str, &'static str)> {
    tools.iter().copied().find(|(tool, _)| !on_path(tool))
}

/// Whether an executable file named `tool` is in a directory of `PATH`.
pub(crate) fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| {
        dir.join(tool).metadata().is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        })
    })
}

/// Above this, other traffic on what a bench measures would be measured along with its own.
pub const MAX_BACKGROUND_PPS: u64 = 1000;

/// The rate of each counter `sample` reads, per second, over one second: how busy what a bench
/// is about to measure is already. An interrupt meanwhile stops it.
pub fn per_second(sample: impl Fn() -> Result<Vec<u64>>) -> Result<Vec<f64>> {
    let before = sample()?;
    let started = Instant::now();
    thread::sleep(Duration::from_secs(1));
    check_interrupted()?;
    let after = sample()?;
    let secs = started.elapsed().as_secs_f64();
    Ok(before
        .iter()
        .zip(&after)
        .map(|(b, a)| a.saturating_sub(*b) as f64 / secs)
        .collect())
}

/// The counter `name` (`rx_packets`, `tx_dropped`…) of the interface `ifname` in the calling
/// thread's namespace: the host's, or an overlay sandbox's (sysfs would show the host's only).
pub fn host_counter(ifname: &str, name: &str) -> Result<u64> {
    let path = "/proc/thread-self/net/dev";
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    dev_counter(&text, ifname, name).with_context(|| format!("{path}: no {name} of {ifname}"))
}

/// One counter of `/proc/net/dev`'s line for `ifname`: eight receive columns (bytes, packets,
/// errs, drop, …) then eight transmit ones.
fn dev_counter(text: &str, ifname: &str, name: &str) -> Option<u64> {
    let column = match name {
        "rx_bytes" => 0,
        "rx_packets" => 1,
        "rx_errors" => 2,
        "rx_dropped" => 3,
        "tx_bytes" => 8,
        "tx_packets" => 9,
        "tx_errors" => 10,
        "tx_dropped" => 11,
        _ => return None,
    };
    let (_, fields) = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(iface, _)| iface.trim() == ifname)?;
    fields.split_whitespace().nth(column)?.parse().ok()
}

/// `program args…` inside the network namespace at `netns`.
pub(crate) fn in_netns(netns: &Path, program: &str) -> Command {
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net={}", netns.display()))
        .arg("--")
        .arg(program);
    cmd
}

/// Runs `cmd`'s process on `cpu` alone (its threads and children too): set between fork and
/// exec, so that nothing of it ever runs elsewhere.
pub(crate) fn on_cpu(cmd: &mut Command, cpu: usize) -> Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)
        .with_context(|| format!("CPU {cpu} is out of range"))?;
    // SAFETY: sched_setaffinity is a plain system call, safe between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
                .map_err(std::io::Error::from)
        });
    }
    Ok(())
}

/// Where `--pin-cpus` puts the client tools and the servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Placement {
    pub client_cpu: usize,
    pub server_cpu: usize,
}

impl Placement {
    /// Clients on CPU 0, servers on CPU 1.
    pub const SPLIT: Placement = Placement {
        client_cpu: 0,
        server_cpu: 1,
    };
}

/// A child that is killed and reaped when dropped, however the caller leaves.
pub(crate) struct KillOnDrop(Child);

impl KillOnDrop {
    pub(crate) fn spawn(cmd: &mut Command, what: &str) -> Result<Self> {
        Ok(Self(
            cmd.spawn().with_context(|| format!("cannot run {what}"))?,
        ))
    }

    pub(crate) fn id(&self) -> u32 {
        self.0.id()
    }

    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.0.try_wait().ok().flatten()
    }

    /// Waits up to `grace` for the child to exit by itself, then kills it.
    fn finish(mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.exited().is_none() {
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

pub(crate) struct Output {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `cmd` to completion, killing it after `limit` or on an interrupt. Output is drained on
/// threads: iperf3's JSON of a long multi-stream run can outgrow a pipe buffer before it exits.
pub(crate) fn run_bounded(cmd: Command, limit: Duration, what: &str) -> Result<Output> {
    run(cmd, limit, what, true)
}

/// Like [`run_bounded`] but deaf to interrupts: for undoing changes after Ctrl-C.
pub(crate) fn run_to_end(cmd: Command, limit: Duration, what: &str) -> Result<Output> {
    run(cmd, limit, what, false)
}

fn run(mut cmd: Command, limit: Duration, what: &str, interruptible: bool) -> Result<Output> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = KillOnDrop::spawn(&mut cmd, what)?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = drain(child.0.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.0.stderr.take().map(|p| Box::new(p) as _));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.exited() {
            break status;
        }
        if interruptible && INTERRUPTED.load(Ordering::SeqCst) {
            drop(child);
            bail!("interrupted");
        }
        if started.elapsed() > limit {
            drop(child);
            bail!("{what} did not finish within {}s", limit.as_secs());
        }
        thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().map_err(|_| anyhow!("reading {what}"))?;
    let stderr = stderr.join().map_err(|_| anyhow!("reading {what}"))?;
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// How one iperf3 client run ended.
#[derive(Debug, PartialEq)]
pub(crate) enum IperfError {
    /// Nothing listens yet: the server has not bound its port, worth retrying briefly.
    NotListening,
    Failed(String),
}

/// The client's JSON report, or why there is none. iperf3 3.12 exits 0 even when it could not
/// connect, so the `error` field decides, not the exit status.
pub(crate) fn parse_iperf(json: &str) -> Result<Value, IperfError> {
    let value: Value = serde_json::from_str(json)
        .map_err(|e| IperfError::Failed(format!("iperf3 printed no JSON report ({e})")))?;
    if let Some(error) = value.get("error").and_then(Value::as_str) {
        return Err(if error.contains("Connection refused") {
            IperfError::NotListening
        } else {
            IperfError::Failed(error.to_owned())
        });
    }
    Ok(value)
}

fn number(value: &Value, path: &[&str]) -> Result<f64> {
    let mut at = value;
    for key in path {
        at = at
            .get(key)
            .ok_or_else(|| anyhow!("iperf3 report lacks {}", path.join(".")))?;
    }
    at.as_f64()
        .ok_or_else(|| anyhow!("iperf3 report: {} is not a number", path.join(".")))
}

/// TCP goodput the receiver saw, in Gbit/s.
pub(crate) fn tcp_gbps(report: &Value) -> Result<f64> {
    Ok(number(report, &["end", "sum_received", "bits_per_second"])? / 1e9)
}

/// UDP packets per second that reached the receiver: with `-b 0` the sender outruns any path,
/// so what counts is what arrived, not what was sent.
pub(crate) fn udp_pps(report: &Value) -> Result<f64> {
    let packets = number(report, &["end", "sum", "packets"])?;
    let lost = number(report, &["end", "sum", "lost_packets"])?;
    let seconds = number(report, &["end", "sum", "seconds"])?;
    if seconds <= 0.0 {
        bail!("iperf3 report: the UDP test lasted {seconds}s");
    }
    Ok((packets - lost).max(0.0) / seconds)
}

/// Every round-trip time ping printed, in µs. Duplicates are left out: they answer a request
/// that already has its time.
pub(crate) fn ping_rtts_us(output: &str) -> Vec<f64> {
    output
        .lines()
        .filter(|line| !line.contains("DUP!"))
        .filter_map(|line| {
            let (_, rest) = line
                .split_once("time=")
                .or_else(|| line.split_once("time<"))?;
            let mut words = rest.split_whitespace();
            let value: f64 = words.next()?.parse().ok()?;
            let scale = match words.next().unwrap_or("ms") {
                "ms" => 1000.0,
                "us" | "usec" | "µs" => 1.0,
                "s" => 1e6,
                _ => return None,
            };
            Some(value * scale)
        })
        .collect()
}

/// The first IPv4 address in `ip -j -4 addr show` output, preferring global scope.
pub(crate) fn first_ipv4(json: &str) -> Result<Ipv4Addr> {
    let links: Vec<Value> = serde_json::from_str(json).context("cannot parse `ip -j addr`")?;
    let addrs: Vec<&Value> = links
        .iter()
        .filter_map(|l| l.get("addr_info")?.as_array())
        .flatten()
        .filter(|a| a.get("family").and_then(Value::as_str) == Some("inet"))
        .collect();
    let global = addrs
        .iter()
        .find(|a| a.get("scope").and_then(Value::as_str) == Some("global"));
    let addr = global
        .or(addrs.first())
        .and_then(|a| a.get("local")?.as_str())
        .ok_or_else(|| anyhow!("no IPv4 address"))?;
    addr.parse()
        .with_context(|| format!("bad IPv4 address {addr:?}"))
}

/// The IPv4 address of `ifname` as seen inside `netns`.
pub fn ipv4_of(netns: &Path, ifname: &str) -> Result<Ipv4Addr> {
    let mut cmd = in_netns(netns, "ip");
    cmd.args(["-j", "-4", "addr", "show", "dev", ifname]);
    let out = run_bounded(cmd, Duration::from_secs(10), "ip addr")?;
    if !out.status.success() {
        bail!("ip addr show dev {ifname}: {}", out.stderr.trim());
    }
    first_ipv4(&out.stdout).with_context(|| format!("{ifname} in {}", netns.display()))
}

/// One direction of measurement: clients in one namespace, one-off servers in another (or the
/// same, for loopback).
#[derive(Clone, Debug)]
pub struct Runner {
    pub client_ns: PathBuf,
    pub server_ns: PathBuf,
    pub target: IpAddr,
    pub port: u16,
    pub seconds: u32,
    /// Names the path in error messages.
    pub label: String,
    /// The CPUs the client and the server run on; `None`: where the scheduler puts them.
    pub placement: Option<Placement>,
}

/// How long an iperf3 server may take to bind its port before the bench gives up.
const LISTEN_WAIT: Duration = Duration::from_secs(5);

impl Runner {
    pub(crate) fn tcp_gbps(&self, streams: u32) -> Result<f64> {
        tcp_gbps(&self.iperf(&["-P", &streams.to_string()])?)
    }

    pub(crate) fn udp_pps(&self, payload: u32) -> Result<f64> {
        udp_pps(&self.iperf(&["-u", "-b", "0", "-l", &payload.to_string()])?)
    }

    /// `count` pings 5 ms apart; the interval below 200 ms needs root, which the bench has.
    pub(crate) fn ping_us(&self, count: u32) -> Result<Vec<f64>> {
        let mut cmd = in_netns(&self.client_ns, "ping");
        cmd.args(["-n", "-c", &count.to_string(), "-i", "0.005", "-W", "1"])
            .arg(self.target.to_string());
        let limit = Duration::from_millis(u64::from(count) * 5) + Duration::from_secs(15);
        let out = run_bounded(cmd, limit, "ping")?;
        let rtts = ping_rtts_us(&out.stdout);
        if rtts.is_empty() {
            bail!(
                "{}: no reply to ping from {}: {}",
                self.label,
                self.target,
                out.stderr.trim()
            );
        }
        Ok(rtts)
    }

    fn iperf(&self, extra: &[&str]) -> Result<Value> {
        self.iperf_via(self.port, extra)
    }

    /// One client run to `target:port` against a fresh one-off server on `server_port` (another
    /// port where a NAT between them translates it; `-s -1` exits after one test, so none is
    /// left listening between measurements).
    pub(crate) fn iperf_via(&self, server_port: u16, extra: &[&str]) -> Result<Value> {
        let port = self.port.to_string();
        let mut server = in_netns(&self.server_ns, "iperf3");
        if let Some(p) = self.placement {
            on_cpu(&mut server, p.server_cpu)?;
        }
        server
            .args(["-s", "-1", "-p", &server_port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut server = KillOnDrop::spawn(&mut server, "iperf3 -s")?;
        let started = Instant::now();
        loop {
            check_interrupted()?;
            if let Some(status) = server.exited() {
                let mut why = String::new();
                if let Some(mut err) = server.0.stderr.take() {
                    let _ = err.read_to_string(&mut why);
                }
                bail!(
                    "{}: the iperf3 server on port {server_port} exited ({status}) before the test: {}",
                    self.label,
                    why.trim()
                );
            }
            let mut client = in_netns(&self.client_ns, "iperf3");
            if let Some(p) = self.placement {
                on_cpu(&mut client, p.client_cpu)?;
            }
            client
                .args(["-c", &self.target.to_string(), "-p", &port])
                .args(["-t", &self.seconds.to_string(), "--json"])
                .args(["--connect-timeout", "3000"])
                .args(extra);
            let limit = Duration::from_secs(u64::from(self.seconds) + 20);
            let out = run_bounded(client, limit, "iperf3 -c")?;
            match parse_iperf(&out.stdout) {
                Ok(report) => {
                    server.finish(Duration::from_secs(2));
                    return Ok(report);
                }
                Err(IperfError::NotListening) if started.elapsed() < LISTEN_WAIT => {
                    thread::sleep(Duration::from_millis(50));
                }
                Err(IperfError::NotListening) => bail!(
                    "{}: nothing listened on {}:{port} within {}s",
                    self.label,
                    self.target,
                    LISTEN_WAIT.as_secs()
                ),
                Err(IperfError::Failed(why)) => {
                    let stderr = out.stderr.trim();
                    bail!(
                        "{}: iperf3 -c {} {}: {why}{}{stderr}",
                        self.label,
                        self.target,
                        extra.join(" "),
                        if stderr.is_empty() { "" } else { "; " }
                    )
                }
            }
        }
    }
}

/// Whether a TCP and a UDP socket can bind `port` inside `netns`: a foreign iperf3 server
/// there would answer our clients and report someone else's numbers.
pub fn port_free(netns: &crate::netns::NetnsPath, port: u16) -> Result<bool> {
    netns.run(move || {
        let any = (Ipv4Addr::UNSPECIFIED, port);
        Ok(std::net::TcpListener::bind(any).is_ok() && std::net::UdpSocket::bind(any).is_ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = include_str!("testdata/iperf3-tcp-P2.json");
    const UDP: &str = include_str!("testdata/iperf3-udp-l64.json");
    const REFUSED: &str = include_str!("testdata/iperf3-refused.json");

    #[test]
    fn counters_are_read_from_the_namespaces_proc_net_dev() {
        let dev = "Inter-|   Receive                                                |  Transmit\n \
                   face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
                   lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0\n \
                   veth1: 9000      77    1    5    0     0          0         0     8000      66    0    7    0     0       0          0\n";
        assert_eq!(dev_counter(dev, "veth1", "rx_packets"), Some(77));
        assert_eq!(dev_counter(dev, "veth1", "rx_dropped"), Some(5));
        assert_eq!(dev_counter(dev, "veth1", "tx_packets"), Some(66));
        assert_eq!(dev_counter(dev, "veth1", "tx_dropped"), Some(7));
        assert_eq!(dev_counter(dev, "veth2", "rx_packets"), None);
        assert_eq!(dev_counter(dev, "veth1", "rx_fifo"), None);
    }

    #[test]
    fn a_command_put_on_a_cpu_runs_there_alone() {
        let cpu = crate::bench::host_load::cpus() - 1;
        let mut cmd = Command::new("grep");
        cmd.args(["Cpus_allowed_list", "/proc/self/status"]);
        on_cpu(&mut cmd, cpu).unwrap();
        let out = cmd.output().unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("Cpus_allowed_list:\t{cpu}")
        );
    }
    const PING: &str = include_str!("testdata/ping-lo.txt");

    #[test]
    fn tcp_report_gives_receiver_goodput() {
        let report = parse_iperf(TCP).unwrap();
        let gbps = tcp_gbps(&report).unwrap();
        assert!((gbps - 14.271034562305754).abs() < 1e-9, "{gbps}");
    }

    #[test]
    fn udp_report_gives_received_packets_per_second() {
        let report = parse_iperf(UDP).unwrap();
        let pps = udp_pps(&report).unwrap();
        // (118070 sent - 52751 lost) / 1.00013 s
        assert!((pps - 65_310.509_6).abs() < 0.1, "{pps}");
    }

    #[test]
    fn refused_connection_is_retryable_and_others_are_not() {
        assert_eq!(parse_iperf(REFUSED).unwrap_err(), IperfError::NotListening);
        let other =
            r#"{"start":{},"end":{},"error":"unable to connect to server: No route to host"}"#;
        assert_eq!(
            parse_iperf(other).unwrap_err(),
            IperfError::Failed("unable to connect to server: No route to host".into())
        );
        assert!(matches!(
            parse_iperf("iperf3: error"),
            Err(IperfError::Failed(_))
        ));
        // A report without the expected sums is an error, not a zero.
        let empty = parse_iperf(r#"{"end":{}}"#).unwrap();
        assert!(tcp_gbps(&empty).is_err());
        assert!(udp_pps(&empty).is_err());
    }

    #[test]
    fn ping_times_are_microseconds() {
        assert_eq!(ping_rtts_us(PING), vec![80.0, 44.0, 44.0, 47.0, 38.0, 39.0]);
        let odd = "64 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=1.50 ms\n\
                   64 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=1.70 ms (DUP!)\n\
                   64 bytes from 10.0.0.2: icmp_seq=2 ttl=64 time<1 ms\n\
                   Request timeout for icmp_seq 3\n\
                   rtt min/avg/max/mdev = 0.038/0.048/0.080/0.014 ms\n";
        assert_eq!(ping_rtts_us(odd), vec![1500.0, 1000.0]);
        assert!(ping_rtts_us("").is_empty());
    }

    #[test]
    fn ipv4_prefers_global_scope() {
        let json = r#"[{"ifindex":2,"ifname":"eth0","addr_info":[
            {"family":"inet","local":"169.254.1.1","prefixlen":16,"scope":"link"},
            {"family":"inet","local":"172.17.0.3","prefixlen":16,"scope":"global"}]}]"#;
        assert_eq!(first_ipv4(json).unwrap(), Ipv4Addr::new(172, 17, 0, 3));
        assert!(first_ipv4("[]").is_err());
        assert!(first_ipv4(r#"[{"ifname":"eth0","addr_info":[]}]"#).is_err());
    }
}
