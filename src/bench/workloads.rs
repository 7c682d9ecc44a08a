//! The real workloads both benches run: redis-server and a sockperf server inside one network
//! namespace, redis-benchmark's GETs and sockperf's TCP ping-pong from another (or the same),
//! and what their output says. `dxdp bench-ingress` runs them through a NIC
//! ([`super::ingress`]), `dxdp bench A B` between the pair ([`super::containers`]).
//!
//! Like iperf3, the tools are the host's, entering a namespace through `nsenter --net`, which
//! execs them in place: the child held is the server itself, killed by its pid when dropped.
use std::{
    fs::File,
    net::{IpAddr, Ipv4Addr},
    path::Path,
    process::Stdio,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow, bail};

use super::measure::{KillOnDrop, Placement, check_interrupted, in_netns, on_cpu, run_bounded};
use crate::netns::NetnsPath;

/// How long a server may take to listen.
const LISTEN_WAIT: Duration = Duration::from_secs(10);

/// redis-server on `port` of every address, without persistence, its working directory `dir`.
pub(crate) fn redis_server_args(port: u16, dir: &Path) -> Vec<String> {
    let (port, dir) = (port.to_string(), dir.display().to_string());
    [
        "--port",
        &port,
        "--bind",
        "0.0.0.0",
        "--protected-mode",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &dir,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// sockperf's TCP server on `port` of every address.
pub(crate) fn sockperf_server_args(port: u16) -> Vec<String> {
    let port = port.to_string();
    ["sr", "--tcp", "-i", "0.0.0.0", "-p", &port]
        .map(str::to_owned)
        .to_vec()
}

/// Starts `program args…` in the namespace at `netns`, its output into `log`; on the server CPU
/// of `placement` if given.
pub(crate) fn spawn_server(
    netns: &Path,
    program: &str,
    args: &[String],
    log: &Path,
    placement: Option<Placement>,
) -> Result<KillOnDrop> {
    let out = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let mut cmd = in_netns(netns, program);
    if let Some(p) = placement {
        on_cpu(&mut cmd, p.server_cpu)?;
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    KillOnDrop::spawn(&mut cmd, program)
}

/// Waits until `server` listens on TCP `port`, seen in its own namespace's socket table (so
/// whether that namespace's loopback is up does not matter); fails if it exits first, with the
/// end of its `log`.
pub(crate) fn wait_listening(
    server: &mut KillOnDrop,
    name: &str,
    port: u16,
    log: &Path,
) -> Result<()> {
    let started = Instant::now();
    loop {
        check_interrupted()?;
        if let Some(status) = server.exited() {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            bail!(
                "the {name} server exited ({status}): {}",
                last_lines(&log, 5)
            );
        }
        let listening = ["tcp", "tcp6"].iter().any(|table| {
            std::fs::read_to_string(format!("/proc/{}/net/{table}", server.id()))
                .is_ok_and(|text| listens(&text, port))
        });
        if listening {
            return Ok(());
        }
        if started.elapsed() > LISTEN_WAIT {
            bail!(
                "the {name} server did not listen on port {port} within {}s",
                LISTEN_WAIT.as_secs()
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a `/proc/net/tcp` (or `tcp6`) table has a socket listening (state `0A`) on `port`.
fn listens(table: &str, port: u16) -> bool {
    let port = format!("{port:04X}");
    table.lines().skip(1).any(|line| {
        let mut fields = line.split_whitespace().skip(1);
        let local = fields.next().and_then(|a| a.rsplit_once(':'));
        let state = fields.nth(1);
        local.is_some_and(|(_, p)| p == port) && state == Some("0A")
    })
}

/// A TCP port no socket holds in `netns` now, other than `avoid`: the kernel's pick of an
/// ephemeral one, for a server started right after.
pub(crate) fn free_port(netns: &NetnsPath, avoid: u16) -> Result<u16> {
    netns.run(move || {
        for _ in 0..16 {
            let listener = std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
                .context("cannot bind a TCP port")?;
            let port = listener.local_addr()?.port();
            if port != avoid {
                return Ok(port);
            }
        }
        bail!("no free TCP port other than {avoid}")
    })
}

/// A client tool in the namespace at `netns`, on `cpu` if given; its stdout, or why it failed.
pub(crate) fn run_client(
    netns: &Path,
    cpu: Option<usize>,
    program: &str,
    args: &[String],
    limit: Duration,
) -> Result<String> {
    let mut cmd = in_netns(netns, program);
    if let Some(cpu) = cpu {
        on_cpu(&mut cmd, cpu)?;
    }
    cmd.args(args);
    let out = run_bounded(cmd, limit, program)?;
    if !out.status.success() {
        bail!(
            "{program} {} exited with {}: {}",
            args.join(" "),
            out.status,
            last_lines(out.stderr.trim(), 3)
        );
    }
    Ok(out.stdout)
}

/// How many GETs make a redis-benchmark run of about `seconds` at `last_rate` requests per
/// second (it counts requests, not time); without a rate yet, a short run that measures one.
pub(crate) fn redis_requests(last_rate: Option<f64>, seconds: u32, clients: u32) -> u64 {
    match last_rate {
        Some(rate) if rate > 0.0 => (rate * f64::from(seconds)).max(1000.0) as u64,
        _ => 2000 * u64::from(clients),
    }
}

/// redis-benchmark's GET test against `host:port` with `clients` connections, as CSV.
pub(crate) fn redis_benchmark_args(
    host: IpAddr,
    port: u16,
    clients: u32,
    requests: u64,
) -> Vec<String> {
    let (host, port) = (host.to_string(), port.to_string());
    let (clients, requests) = (clients.to_string(), requests.to_string());
    [
        "-h", &host, "-p", &port, "-t", "get", "-c", &clients, "-n", &requests, "--csv",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// sockperf's TCP ping-pong to `host:port` for `seconds`, every round trip in the percentiles.
pub(crate) fn sockperf_pingpong_args(host: IpAddr, port: u16, seconds: u32) -> Vec<String> {
    let (host, port, seconds) = (host.to_string(), port.to_string(), seconds.to_string());
    [
        "pp",
        "--tcp",
        "-i",
        &host,
        "-p",
        &port,
        "-t",
        &seconds,
        "--full-rtt",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The `rps` of redis-benchmark's `--csv` GET row.
pub(crate) fn parse_redis_csv(out: &str) -> Result<f64> {
    let row = out
        .lines()
        .find(|l| l.starts_with("\"GET\""))
        .ok_or_else(|| anyhow!("redis-benchmark printed no GET row: {}", last_lines(out, 3)))?;
    let rps = row
        .split(',')
        .nth(1)
        .map(|f| f.trim_matches('"'))
        .ok_or_else(|| anyhow!("redis-benchmark's GET row has no rps: {row}"))?;
    rps.parse()
        .with_context(|| format!("redis-benchmark's rps {rps:?} is not a number"))
}

/// sockperf's 50th and 99th percentile, in µs.
pub(crate) fn parse_sockperf(out: &str) -> Result<(f64, f64)> {
    let percentile = |p: &str| -> Result<f64> {
        let key = format!("percentile {p} =");
        let value = out
            .lines()
            .find_map(|l| Some(l.split_once(&key)?.1.trim()))
            .ok_or_else(|| anyhow!("sockperf printed no {p} percentile: {}", last_lines(out, 3)))?;
        value
            .parse()
            .with_context(|| format!("sockperf's percentile {p} {value:?} is not a number"))
    };
    Ok((percentile("50.000")?, percentile("99.000")?))
}

/// The last `n` lines of a tool's output, on one line.
pub(crate) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_outputs_parse() {
        let redis = "\"test\",\"rps\",\"avg_latency_ms\"\n\"GET\",\"26595.75\",\"0.033\"\n";
        assert_eq!(parse_redis_csv(redis).unwrap(), 26595.75);
        assert!(parse_redis_csv("Could not connect to Redis").is_err());
        let sockperf = "sockperf: ---> percentile 99.000 =   40.429\n\
                        sockperf: ---> percentile 90.000 =   18.797\n\
                        sockperf: ---> percentile 50.000 =   16.885\n";
        assert_eq!(parse_sockperf(sockperf).unwrap(), (16.885, 40.429));
        assert!(parse_sockperf("sockperf: connect failed").is_err());
    }

    #[test]
    fn a_listening_socket_is_found_by_its_port() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
                   0: 00000000:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n   \
                   1: 0100007F:2B67 0100007F:B2C4 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n";
        assert!(listens(tcp, 6379));
        // Connected, not listening.
        assert!(!listens(tcp, 11111));
        assert!(!listens(tcp, 80));
        let tcp6 = "  sl  local_address                         remote_address                        st\n   \
                    0: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 0A\n";
        assert!(listens(tcp6, 80));
    }

    #[test]
    fn redis_runs_are_sized_by_the_last_rate() {
        assert_eq!(redis_requests(None, 5, 20), 40_000);
        assert_eq!(redis_requests(Some(0.0), 5, 1), 2000);
        assert_eq!(redis_requests(Some(50_000.0), 3, 20), 150_000);
        assert_eq!(redis_requests(Some(100.0), 1, 20), 1000);
        let args = redis_benchmark_args(IpAddr::V4(Ipv4Addr::LOCALHOST), 6379, 20, 1000);
        assert_eq!(
            args.join(" "),
            "-h 127.0.0.1 -p 6379 -t get -c 20 -n 1000 --csv"
        );
    }
}
