//! Prometheus text exposition for `dxdp watch --metrics ADDR`.
//!
//! The endpoint is hyper's HTTP/1.1 server, one request per connection: `GET` and `HEAD` on
//! `/metrics`, 405 with `Allow` for other methods there, 404 elsewhere.
use std::{
    collections::BTreeMap,
    convert::Infallible,
    fmt::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{self, HeaderValue},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use crate::datapath::{
    Capacity, ConnectionTables, Datapath, ExposedPort, InterfaceCounters, Kind, LinkRecord,
    TableFill, Traffic,
};
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
    /// Links a rule that appeared after them took away, since the watch started.
    removed_by_firewall: u64,
    /// Exposures made by hand a rule that appeared after them took away, since the watch
    /// started.
    exposures_removed_by_firewall: u64,
    /// Pairs the rules refused at the last reconcile, by reason.
    refused: BTreeMap<&'static str, usize>,
    /// Containers whose dxdp labels do not parse, at the last reconcile.
    malformed: usize,
    /// Containers labeled `dxdp.ingress` whose published ports the watch does not expose, at
    /// the last reconcile.
    refused_exposures: usize,
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

    /// Links a firewall rule took away (fail closed), the watch's and hand-made ones.
    pub fn removed_by_firewall(&self, links: usize) {
        if let Ok(mut m) = self.0.lock() {
            m.removed_by_firewall += links as u64;
        }
    }

    /// Exposures made by hand a firewall rule took away (fail closed).
    pub fn exposures_removed_by_firewall(&self, exposures: usize) {
        if let Ok(mut m) = self.0.lock() {
            m.exposures_removed_by_firewall += exposures as u64;
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

    pub fn refused_exposures(&self, containers: usize) {
        if let Ok(mut m) = self.0.lock() {
            m.refused_exposures = containers;
        }
    }

    pub fn docker_connected(&self, connected: bool) {
        if let Ok(mut m) = self.0.lock() {
            m.docker_connected = connected;
        }
    }

    /// What the engine's tests read back of the counter.
    #[cfg(test)]
    pub(crate) fn exposures_removed_by_firewall_total(&self) -> u64 {
        self.snapshot().exposures_removed_by_firewall
    }

    fn snapshot(&self) -> Loop {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// The pinned state at scrape time.
pub(crate) struct State {
    pub(crate) links: Vec<LinkRecord>,
    /// Published ports taken from the NIC (`dxdp expose`, the `dxdp.ingress` label).
    pub(crate) exposed: Vec<ExposedPort>,
    pub(crate) interfaces: Vec<(u32, String, Kind, InterfaceCounters)>,
    pub(crate) capacity: Capacity,
    /// How full the connection tables of exposed ports are; `None` without a pin directory.
    pub(crate) connections: Option<ConnectionTables>,
}

fn read_state(pin_dir: &Path, capacity: Capacity) -> Result<State> {
    if !pin_dir.exists() {
        return Ok(State {
            links: vec![],
            exposed: vec![],
            interfaces: vec![],
            capacity,
            connections: None,
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
        exposed: datapath.exposed()?,
        interfaces,
        capacity,
        connections: Some(datapath.connection_tables()?),
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

    render_exposed(&mut out, &state.exposed);
    if let Some(tables) = &state.connections {
        render_connections(&mut out, tables);
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
    let _ = writeln!(
        out,
        "# HELP dxdp_links_removed_by_firewall_total Links a firewall rule that appeared after them took away (fail closed), made by the watch or by hand.\n# TYPE dxdp_links_removed_by_firewall_total counter\ndxdp_links_removed_by_firewall_total {}",
        watch.removed_by_firewall
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
        "# HELP dxdp_refused_exposures Containers labeled dxdp.ingress whose published ports stay on Docker's path (a firewall rule on a port, ports on more than one network), at the last reconcile (see the watch log for why).\n# TYPE dxdp_refused_exposures gauge\ndxdp_refused_exposures {}",
        watch.refused_exposures
    );
    let _ = writeln!(
        out,
        "# HELP dxdp_exposures_removed_by_firewall_total Containers exposed by hand (dxdp expose) whose fast path a firewall rule that appeared after it took away (fail closed).\n# TYPE dxdp_exposures_removed_by_firewall_total counter\ndxdp_exposures_removed_by_firewall_total {}",
        watch.exposures_removed_by_firewall
    );
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

/// How full each connection table of the exposed ports is: an established table near its
/// capacity forgets connections; an opening table that fills up says handshakes are not
/// completed (a SYN flood).
fn render_connections(out: &mut String, tables: &ConnectionTables) {
    let rows = [
        ("established", tables.established),
        ("opening", tables.opening),
        ("udp", tables.udp),
    ];
    type Pick = fn(&TableFill) -> u64;
    let gauges: [(&str, &str, Pick); 2] = [
        (
            "dxdp_connections",
            "Connections through exposed ports, by table: TCP established, TCP opening (handshake not completed), UDP flows.",
            |f| f.entries as u64,
        ),
        (
            "dxdp_connections_capacity",
            "Entries each connection table holds at most (--max-connections); beyond it the least recently used is forgotten.",
            |f| u64::from(f.capacity),
        ),
    ];
    for (metric, help, pick) in gauges {
        header(out, metric, "gauge", help);
        for (table, fill) in &rows {
            let _ = writeln!(out, "{metric}{{table=\"{table}\"}} {}", pick(fill));
        }
    }
}

/// The exposed published ports: how many, and per port what the fast path carried each way and
/// what it left to Docker's path.
fn render_exposed(out: &mut String, exposed: &[ExposedPort]) {
    header(
        out,
        "dxdp_exposed_ports",
        "gauge",
        "Published ports taken from the NIC straight into their container.",
    );
    let _ = writeln!(out, "dxdp_exposed_ports {}", exposed.len());
    type Pick = fn(&ExposedPort) -> u64;
    let per_port: [(&str, &str, Pick, Pick); 2] = [
        (
            "dxdp_port_packets_total",
            "Packets the fast path carried to (in) and from (out) an exposed port.",
            |p| p.inbound.packets,
            |p| p.outbound.packets,
        ),
        (
            "dxdp_port_bytes_total",
            "Bytes the fast path carried to (in) and from (out) an exposed port.",
            |p| p.inbound.bytes,
            |p| p.outbound.bytes,
        ),
    ];
    let labels = |p: &ExposedPort| {
        format!(
            "container=\"{}\",address=\"{}\",port=\"{}\",protocol=\"{}\"",
            escape(&p.container),
            p.host_addr,
            p.host_port,
            p.protocol
        )
    };
    for (metric, help, inbound, outbound) in per_port {
        header(out, metric, "counter", help);
        for p in exposed {
            let l = labels(p);
            let _ = writeln!(out, "{metric}{{{l},direction=\"in\"}} {}", inbound(p));
            let _ = writeln!(out, "{metric}{{{l},direction=\"out\"}} {}", outbound(p));
        }
    }
    header(
        out,
        "dxdp_port_passed_packets_total",
        "counter",
        "Packets to an exposed port left to Docker's path (fragments, IP options, connections from before it was exposed, a client not routed back through the NIC, a source the stack refuses).",
    );
    for p in exposed {
        let _ = writeln!(
            out,
            "dxdp_port_passed_packets_total{{{}}} {}",
            labels(p),
            p.passed_packets
        );
    }
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

/// How long a client may take to send its request head.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may last in all: a scrape takes milliseconds.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; one more is closed as soon as it is accepted. Far below the
/// unit's file limit, so a flood of idle connections can neither exhaust the watch's
/// descriptors nor hold the listener: a scraper (one connection per scrape) gets in again as
/// soon as the flood's connections time out.
const MAX_CONNECTIONS: usize = 64;
/// After an accept that failed (EMFILE, ENFILE, ENOBUFS…), the listener waits this long before
/// the next, instead of dying or spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `GET /metrics` (and `HEAD`) until the task is dropped.
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
    if !addr.ip().is_loopback() {
        warn!(
            %addr,
            "--metrics listens beyond loopback without authentication: its answer names \
             containers, networks and veths; bind 127.0.0.1 (or firewall the port) unless the \
             scraper is elsewhere"
        );
    }
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut accept_failures: u64 = 0;
    let mut http = http1::Builder::new();
    // One request per connection, as scrapers use it; Title-Case header names, as before hyper.
    http.keep_alive(false)
        .title_case_headers(true)
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_TIMEOUT);
    loop {
        let (conn, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors (or kernel memory): keep the listener, say so once per
                // burst, and try again shortly; closing connections frees descriptors.
                if accept_failures == 0 {
                    warn!(%addr, "metrics: cannot accept a connection: {e}; retrying");
                }
                accept_failures += 1;
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        if accept_failures > 0 {
            info!(%addr, failed = accept_failures, "metrics: accepting connections again");
            accept_failures = 0;
        }
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            debug!(%peer, "metrics: {MAX_CONNECTIONS} connections open; closing this one");
            continue;
        };
        let metrics = Arc::clone(&metrics);
        let pin_dir = pin_dir.clone();
        let service = service_fn(move |request| {
            respond(request, Arc::clone(&metrics), pin_dir.clone(), capacity)
        });
        let connection = http.serve_connection(TokioIo::new(conn), service);
        tokio::spawn(async move {
            match tokio::time::timeout(CONNECTION_TIMEOUT, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(%peer, "metrics connection: {e}"),
                Err(_) => debug!(%peer, "metrics connection: timed out"),
            }
            drop(slot);
        });
    }
}

async fn respond(
    request: Request<Incoming>,
    metrics: Arc<Metrics>,
    pin_dir: PathBuf,
    capacity: Capacity,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (method, path) = (request.method(), request.uri().path());
    debug!(%method, path, "metrics request");
    if path != "/metrics" {
        return Ok(text(
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics\n".into(),
        ));
    }
    // HEAD gets GET's headers, Content-Length included; hyper leaves the body out.
    if method != Method::GET && method != Method::HEAD {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "/metrics answers GET and HEAD\n".into(),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Ok(response);
    }
    let watch = metrics.snapshot();
    let state = tokio::task::spawn_blocking(move || read_state(&pin_dir, capacity)).await;
    Ok(match state {
        Ok(Ok(state)) => text(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            render(&state, watch),
        ),
        Ok(Err(e)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("{e:#}\n"),
        ),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("{e}\n"),
        ),
    })
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::Origin;

    /// The endpoint over a real socket, without privileges: a missing pin directory is an
    /// empty state.
    #[test]
    fn answers_get_and_head_refuses_other_methods_and_paths() {
        use std::io::{Read, Write};
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        runtime.spawn(serve(
            addr,
            Arc::default(),
            PathBuf::from("/nonexistent/dxdp-metrics-test"),
            Capacity::default(),
        ));
        let ask = |request: &str| -> String {
            for _ in 0..250 {
                let Ok(mut conn) = std::net::TcpStream::connect(addr) else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                conn.set_read_timeout(Some(Duration::from_secs(5)))
                    .expect("a timeout");
                conn.write_all(request.as_bytes()).expect("request sent");
                // The server closes the connection after its answer.
                let mut response = String::new();
                conn.read_to_string(&mut response)
                    .expect("a whole response");
                return response;
            }
            panic!("nothing listens on {addr}");
        };

        let get = ask("GET /metrics HTTP/1.1\r\nHost: dxdp\r\n\r\n");
        let (head_of_get, body) = get.split_once("\r\n\r\n").expect("a header block");
        assert!(head_of_get.starts_with("HTTP/1.1 200 OK\r\n"), "{get}");
        assert!(
            head_of_get.contains("\r\nContent-Type: text/plain; version=0.0.4"),
            "{get}"
        );
        assert!(head_of_get.contains("\r\nConnection: close"), "{get}");
        let length = format!("\r\nContent-Length: {}", body.len());
        assert!(head_of_get.contains(&length), "{get}");
        assert!(body.contains("dxdp_links{datapath=\"tc\"} 0\n"), "{body}");

        let head = ask("HEAD /metrics HTTP/1.1\r\nHost: dxdp\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(
            head.ends_with("\r\n\r\n"),
            "HEAD answered with a body: {head}"
        );
        assert!(head.contains(&length), "{head}");

        for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
            let refused = ask(&format!(
                "{method} /metrics HTTP/1.1\r\nHost: dxdp\r\nContent-Length: 0\r\n\r\n"
            ));
            assert!(
                refused.starts_with("HTTP/1.1 405 Method Not Allowed\r\n")
                    && refused.contains("\r\nAllow: GET, HEAD\r\n"),
                "{method}: {refused}"
            );
        }
        for path in ["/", "/metricsx", "/metrics/"] {
            let missing = ask(&format!("GET {path} HTTP/1.1\r\nHost: dxdp\r\n\r\n"));
            assert!(
                missing.starts_with("HTTP/1.1 404 Not Found\r\n"),
                "{path}: {missing}"
            );
        }
        // HTTP/1.0 clients too.
        let old = ask("GET /metrics HTTP/1.0\r\n\r\n");
        assert!(old.starts_with("HTTP/1.0 200 OK\r\n"), "{old}");
    }

    /// A fixed state and loop, with something in every family.
    fn fixed() -> (State, Loop) {
        let state = State {
            links: vec![LinkRecord {
                low_ifindex: 3,
                high_ifindex: 4,
                low_name: "web".into(),
                high_name: "d\"b".into(),
                network: "app".into(),
                datapath: Kind::Tc,
                origin: Origin::Watch,
                bypasses_firewall: false,
                families: crate::family::Families::ALL,
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
            exposed: vec![ExposedPort {
                container: "web".into(),
                veth_ifindex: 3,
                nic_ifindex: 2,
                host_addr: "192.0.2.1".parse().unwrap(),
                protocol: "tcp",
                host_port: 8080,
                container_addr: "172.17.0.2".parse().unwrap(),
                container_port: 80,
                origin: Origin::Watch,
                bypasses_firewall: false,
                created_unix_secs: 0,
                inbound: Traffic {
                    packets: 5,
                    bytes: 500,
                },
                outbound: Traffic {
                    packets: 4,
                    bytes: 400,
                },
                passed_packets: 2,
            }],
            capacity: Capacity {
                max_endpoints: 8,
                max_links: 4,
                max_connections: 16,
            },
            connections: Some(ConnectionTables {
                established: TableFill {
                    entries: 5,
                    capacity: 16,
                },
                ..Default::default()
            }),
        };
        let watch = Loop {
            reconciles: 2,
            errors: 1,
            duration_sum: 0.5,
            last_duration: 0.25,
            docker_connected: true,
            firewall_refused: 3,
            refused_exposures: 2,
            exposures_removed_by_firewall: 5,
            removed_by_firewall: 4,
            refused: BTreeMap::from([("icc_disabled", 2)]),
            malformed: 1,
            last_success_unix: 1.5e9,
        };
        (state, watch)
    }

    #[test]
    fn renders_links_interfaces_and_loop_metrics() {
        let (state, watch) = fixed();
        let text = render(&state, watch);
        assert!(
            text.contains("dxdp_refused_pairs{reason=\"firewall\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("dxdp_links_removed_by_firewall_total 4\n"),
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
        assert!(text.contains("dxdp_refused_exposures 2\n"), "{text}");
        assert!(
            text.contains("dxdp_exposures_removed_by_firewall_total 5\n"),
            "{text}"
        );
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
        assert!(text.contains("dxdp_exposed_ports 1\n"), "{text}");
        assert!(
            text.contains("dxdp_connections{table=\"established\"} 5\n")
                && text.contains("dxdp_connections_capacity{table=\"established\"} 16\n")
                && text.contains("dxdp_connections{table=\"udp\"} 0\n"),
            "{text}"
        );
        let port = "container=\"web\",address=\"192.0.2.1\",port=\"8080\",protocol=\"tcp\"";
        for sample in [
            format!("dxdp_port_packets_total{{{port},direction=\"in\"}} 5\n"),
            format!("dxdp_port_bytes_total{{{port},direction=\"out\"}} 400\n"),
            format!("dxdp_port_passed_packets_total{{{port}}} 2\n"),
        ] {
            assert!(text.contains(&sample), "{sample} in {text}");
        }
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

    /// The whole text for a fixed state, to the byte: the families, their order, HELP and TYPE
    /// lines and every sample (the version and ABI of `dxdp_build_info` are put in).
    #[test]
    fn renders_a_fixed_state_to_the_byte() {
        let (state, watch) = fixed();
        let expected = include_str!("metrics/testdata/fixed_state.prom")
            .replace("@VERSION@", env!("CARGO_PKG_VERSION"))
            .replace("@ABI@", &dxdp_common::ABI_VERSION.to_string());
        let text = render(&state, watch);
        assert_eq!(text, expected);
    }
}
