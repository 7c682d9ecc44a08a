//! Prometheus text exposition for `dxdp watch --metrics ADDR`.
use std::{
    collections::BTreeMap,
    fmt::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};
use tracing::{debug, info};

use crate::datapath::{Capacity, Datapath, InterfaceCounters, Kind, LinkRecord, Traffic};
use crate::rules::{FIREWALL_REASON, REASONS};

/// What the watch loop reports about itself.
#[derive(Default)]
pub struct Metrics(Mutex<Loop>);

#[derive(Default, Clone)]
struct Loop {
    reconciles: u64,
    errors: u64,
    duration_sum: f64,
    last_duration: f64,
    docker_connected: bool,
    /// Pairs the labels ask for that a firewall rule keeps on the bridge, at the last
    /// reconcile.
    firewall_refused: u64,
    /// Pairs the rules refused at the last reconcile, by reason.
    refused: BTreeMap<&'static str, usize>,
    /// Containers whose dxdp labels do not parse, at the last reconcile.
    malformed: usize,
    /// When the last reconcile that succeeded ended, in Unix seconds (0: none yet).
    last_success_unix: f64,
}

impl Metrics {
    pub fn reconciled(&self, took: Duration, ok: bool) {
        if let Ok(mut m) = self.0.lock() {
            m.reconciles += 1;
            m.errors += u64::from(!ok);
            m.duration_sum += took.as_secs_f64();
            m.last_duration = took.as_secs_f64();
            if ok {
                m.last_success_unix = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
            }
        }
    }

    pub fn firewall_refused(&self, pairs: usize) {
        if let Ok(mut m) = self.0.lock() {
            m.firewall_refused = pairs as u64;
        }
    }

    pub fn refused(&self, by_reason: &BTreeMap<&'static str, usize>, malformed: usize) {
        if let Ok(mut m) = self.0.lock() {
            m.refused = by_reason.clone();
            m.malformed = malformed;
        }
    }

    pub fn docker_connected(&self, connected: bool) {
        if let Ok(mut m) = self.0.lock() {
            m.docker_connected = connected;
        }
    }

    fn snapshot(&self) -> Loop {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// The pinned state at scrape time.
pub(crate) struct State {
    pub(crate) links: Vec<LinkRecord>,
    pub(crate) interfaces: Vec<(u32, String, Kind, InterfaceCounters)>,
    pub(crate) capacity: Capacity,
}

fn read_state(pin_dir: &Path, capacity: Capacity) -> Result<State> {
    if !pin_dir.exists() {
        return Ok(State {
            links: vec![],
            interfaces: vec![],
            capacity,
        });
    }
    let host = crate::netlink::interfaces(&crate::netns::NetnsPath::host())?;
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    let mut interfaces = Vec::new();
    for (ifindex, kind) in datapath.interfaces()? {
        let name = host
            .iter()
            .find(|i| i.index == ifindex)
            .map(|i| i.name.clone())
            .unwrap_or_default();
        let counters = datapath.counters(ifindex)?.unwrap_or_default();
        interfaces.push((ifindex, name, kind, counters));
    }
    interfaces.sort_by_key(|i| i.0);
    Ok(State {
        links: datapath.links()?,
        interfaces,
        capacity,
    })
}

/// Renders the exposition text; pure, so its format is unit-tested.
fn render(state: &State, watch: Loop) -> String {
    let mut out = String::new();
    header(
        &mut out,
        "dxdp_links",
        "gauge",
        "Links installed, by datapath.",
    );
    for kind in [Kind::Tc, Kind::Xdp] {
        let n = state.links.iter().filter(|l| l.datapath == kind).count();
        let _ = writeln!(out, "dxdp_links{{datapath=\"{kind}\"}} {n}");
    }

    type PickTraffic = fn(&Traffic) -> u64;
    let per_link: [(&str, &str, PickTraffic); 2] = [
        (
            "dxdp_link_redirected_packets_total",
            "Frames redirected over a link, per direction.",
            |t| t.packets,
        ),
        (
            "dxdp_link_redirected_bytes_total",
            "Bytes redirected over a link, per direction.",
            |t| t.bytes,
        ),
    ];
    for (metric, help, pick) in per_link {
        header(&mut out, metric, "counter", help);
        for l in &state.links {
            for (from, to, traffic) in [
                (&l.low_name, &l.high_name, &l.low_to_high),
                (&l.high_name, &l.low_name, &l.high_to_low),
            ] {
                let _ = writeln!(
                    out,
                    "{metric}{{from=\"{}\",to=\"{}\",network=\"{}\",datapath=\"{}\"}} {}",
                    escape(from),
                    escape(to),
                    escape(&l.network),
                    l.datapath,
                    pick(traffic)
                );
            }
        }
    }

    type Pick = fn(&InterfaceCounters) -> u64;
    let per_interface: [(&str, &str, Pick); 6] = [
        (
            "dxdp_interface_redirected_packets_total",
            "Frames redirected from a managed veth.",
            |c| c.redirected_packets,
        ),
        (
            "dxdp_interface_redirected_bytes_total",
            "Bytes redirected from a managed veth.",
            |c| c.redirected_bytes,
        ),
        (
            "dxdp_interface_passed_packets_total",
            "Frames a managed veth passed to the bridge.",
            |c| c.passed_packets,
        ),
        (
            "dxdp_interface_passed_bytes_total",
            "Bytes a managed veth passed to the bridge.",
            |c| c.passed_bytes,
        ),
        (
            "dxdp_interface_fallback_packets_total",
            "Frames for a link whose target is gone, sent to the bridge.",
            |c| c.fallback_packets,
        ),
        (
            "dxdp_interface_spoofed_packets_total",
            "Frames with a source MAC not the container's own, never redirected.",
            |c| c.spoofed_packets,
        ),
    ];
    for (metric, help, pick) in per_interface {
        header(&mut out, metric, "counter", help);
        for (ifindex, ifname, kind, counters) in &state.interfaces {
            let _ = writeln!(
                out,
                "{metric}{{ifindex=\"{ifindex}\",interface=\"{}\",datapath=\"{kind}\"}} {}",
                escape(ifname),
                pick(counters)
            );
        }
    }

    let _ = writeln!(
        out,
        "# HELP dxdp_reconciles_total Reconciliations run.\n# TYPE dxdp_reconciles_total counter\ndxdp_reconciles_total {}",
        watch.reconciles
    );
    let _ = writeln!(
        out,
        "# HELP dxdp_reconcile_errors_total Reconciliations that failed.\n# TYPE dxdp_reconcile_errors_total counter\ndxdp_reconcile_errors_total {}",
        watch.errors
    );
    let _ = writeln!(
        out,
        "# HELP dxdp_reconcile_duration_seconds Time spent reconciling.\n# TYPE dxdp_reconcile_duration_seconds summary\ndxdp_reconcile_duration_seconds_sum {}\ndxdp_reconcile_duration_seconds_count {}",
        watch.duration_sum, watch.reconciles
    );
    let _ = writeln!(
        out,
        "# HELP dxdp_last_reconcile_duration_seconds Duration of the latest reconciliation.\n# TYPE dxdp_last_reconcile_duration_seconds gauge\ndxdp_last_reconcile_duration_seconds {}",
        watch.last_duration
    );
    let _ = writeln!(
        out,
        "# HELP dxdp_docker_connected Whether the watch is connected to dockerd.\n# TYPE dxdp_docker_connected gauge\ndxdp_docker_connected {}",
        u8::from(watch.docker_connected)
    );
    let _ = writeln!(
        out,
        "# HELP dxdp_firewall_refused_pairs Pairs the labels ask for that a firewall rule keeps on the bridge (see the watch log for the rules).\n# TYPE dxdp_firewall_refused_pairs gauge\ndxdp_firewall_refused_pairs {}",
        watch.firewall_refused
    );
    header(
        &mut out,
        "dxdp_refused_pairs",
        "gauge",
        "Refusals of pairs the labels ask for, by reason, at the last reconcile (see the watch log for each).",
    );
    for reason in REASONS {
        let n = if reason == FIREWALL_REASON {
            watch.firewall_refused as usize
        } else {
            watch.refused.get(reason).copied().unwrap_or(0)
        };
        let _ = writeln!(out, "dxdp_refused_pairs{{reason=\"{reason}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP dxdp_label_errors Containers whose dxdp labels do not parse, left out of every link, at the last reconcile.\n# TYPE dxdp_label_errors gauge\ndxdp_label_errors {}",
        watch.malformed
    );
    let _ = writeln!(
        out,
        "# HELP dxdp_last_reconcile_success_timestamp_seconds When the last successful reconciliation ended (Unix time; 0 before the first).\n# TYPE dxdp_last_reconcile_success_timestamp_seconds gauge\ndxdp_last_reconcile_success_timestamp_seconds {}",
        watch.last_success_unix
    );
    header(
        &mut out,
        "dxdp_map_capacity",
        "gauge",
        "Entries the pinned maps hold at most (--max-links, --max-endpoints).",
    );
    per_map(
        &mut out,
        "dxdp_map_capacity",
        state.capacity.max_links as usize,
        state.capacity.max_endpoints as usize,
    );
    header(
        &mut out,
        "dxdp_map_entries",
        "gauge",
        "Entries in use in the pinned maps: links, and managed veths (endpoints).",
    );
    per_map(
        &mut out,
        "dxdp_map_entries",
        state.links.len(),
        state.interfaces.len(),
    );
    let _ = writeln!(
        out,
        "# HELP dxdp_build_info The running dxdp: its version and the layout (ABI) of the state it pins.\n# TYPE dxdp_build_info gauge\ndxdp_build_info{{version=\"{}\",abi=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        dxdp_common::ABI_VERSION
    );
    out
}

/// The `links` and `endpoints` samples of a per-map metric.
fn per_map(out: &mut String, name: &str, links: usize, endpoints: usize) {
    let _ = writeln!(out, "{name}{{map=\"links\"}} {links}");
    let _ = writeln!(out, "{name}{{map=\"endpoints\"}} {endpoints}");
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Serves `GET /metrics` until the task is dropped.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    pin_dir: PathBuf,
    capacity: Capacity,
) -> Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for --metrics"))?;
    info!(%addr, "serving Prometheus metrics on /metrics");
    loop {
        let (mut conn, peer) = listener.accept().await?;
        let metrics = Arc::clone(&metrics);
        let pin_dir = pin_dir.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            let n = match tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await {
                Ok(Ok(n)) => n,
                _ => return,
            };
            let request = String::from_utf8_lossy(&buf[..n]);
            let path = request.split_whitespace().nth(1).unwrap_or("");
            let response = if path == "/metrics" {
                let watch = metrics.snapshot();
                let state =
                    tokio::task::spawn_blocking(move || read_state(&pin_dir, capacity)).await;
                match state {
                    Ok(Ok(state)) => http(200, "text/plain; version=0.0.4", &render(&state, watch)),
                    Ok(Err(e)) => http(500, "text/plain", &format!("{e:#}\n")),
                    Err(e) => http(500, "text/plain", &format!("{e}\n")),
                }
            } else {
                http(404, "text/plain", "try /metrics\n")
            };
            debug!(%peer, path, "metrics request");
            let _ = conn.write_all(response.as_bytes()).await;
        });
    }
}

fn http(status: u16, content_type: &str, body: &str) -> String {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Internal Server Error",
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::Origin;

    #[test]
    fn renders_links_interfaces_and_loop_metrics() {
        let state = State {
            links: vec![LinkRecord {
                low_ifindex: 3,
                high_ifindex: 4,
                low_name: "web".into(),
                high_name: "d\"b".into(),
                network: "app".into(),
                datapath: Kind::Tc,
                origin: Origin::Watch,
                created_unix_secs: 0,
                low_to_high: Traffic {
                    packets: 7,
                    bytes: 700,
                },
                high_to_low: Traffic::default(),
            }],
            interfaces: vec![(
                3,
                "veth1".into(),
                Kind::Tc,
                InterfaceCounters {
                    redirected_packets: 7,
                    ..Default::default()
                },
            )],
            capacity: Capacity {
                max_endpoints: 8,
                max_links: 4,
            },
        };
        let text = render(
            &state,
            Loop {
                reconciles: 2,
                errors: 1,
                duration_sum: 0.5,
                last_duration: 0.25,
                docker_connected: true,
                firewall_refused: 3,
                refused: BTreeMap::from([("icc_disabled", 2)]),
                malformed: 1,
                last_success_unix: 1.5e9,
            },
        );
        assert!(
            text.contains("dxdp_refused_pairs{reason=\"firewall\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_refused_pairs{reason=\"icc_disabled\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_refused_pairs{reason=\"opted_out\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("dxdp_label_errors 1\n"), "{text}");
        assert!(
            text.contains("dxdp_last_reconcile_success_timestamp_seconds 1500000000\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_map_capacity{map=\"links\"} 4\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_map_capacity{map=\"endpoints\"} 8\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_map_entries{map=\"links\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_map_entries{map=\"endpoints\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("dxdp_firewall_refused_pairs 3\n"), "{text}");
        assert!(text.contains(&format!(
            "dxdp_build_info{{version=\"{}\",abi=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION"),
            dxdp_common::ABI_VERSION
        )));
        assert!(text.contains("dxdp_links{datapath=\"tc\"} 1\n"), "{text}");
        assert!(text.contains("dxdp_links{datapath=\"xdp\"} 0\n"));
        assert!(text.contains(
            "dxdp_link_redirected_packets_total{from=\"web\",to=\"d\\\"b\",network=\"app\",datapath=\"tc\"} 7\n"
        ));
        assert!(text.contains(
            "dxdp_interface_redirected_packets_total{ifindex=\"3\",interface=\"veth1\",datapath=\"tc\"} 7\n"
        ));
        assert!(text.contains("dxdp_reconcile_errors_total 1\n"));
        assert!(text.contains("dxdp_reconcile_duration_seconds_count 2\n"));
        assert!(text.contains("dxdp_docker_connected 1\n"));
        // Every sample belongs to a family announced with HELP and TYPE.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = name.trim_end_matches("_sum").trim_end_matches("_count");
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "no TYPE for {name}"
            );
        }
    }
}
