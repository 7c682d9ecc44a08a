//! The monitoring shipped in `packaging/monitoring/`, tested with the real thing: Debian's
//! Prometheus 2.42 and its promtool. The alert rules pass `promtool check rules` and their unit
//! tests; a live scrape of `dxdp watch --metrics` passes `promtool check metrics`; a Prometheus
//! server started here scrapes the watch, loads the rules, sees a per-link rate once traffic
//! flows, and evaluates every query of the Grafana dashboard.
use std::{
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use crate::support::{
    Background, World, assert_promtool_accepts, can_run, free_port, missing_tools, require_docker,
    run, wait_until,
};

fn monitoring_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/monitoring")
}

/// Prometheus's tools (Debian's `prometheus` package; scripts/setup.sh installs it).
fn require_prometheus() -> bool {
    can_run(missing_tools(&["promtool", "prometheus"]))
}

/// One plain HTTP GET; the whole response, headers included.
fn http_get(addr: &str, path: &str) -> String {
    let Ok(mut conn) = TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    // HTTP/1.0: a plain body, never chunked.
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let _ = conn.write_all(request.as_bytes());
    let mut body = String::new();
    let _ = conn.read_to_string(&mut body);
    body
}

fn body_of(response: &str) -> &str {
    response.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// `promtool query instant`: the numeric value of every sample, or why the query failed.
fn query(server: &str, expr: &str) -> Result<Vec<f64>, String> {
    let out = run(&[
        "promtool",
        "query",
        "instant",
        "-o",
        "json",
        &format!("http://{server}"),
        expr,
    ]);
    if !out.success() {
        return Err(format!("{expr}: {}{}", out.stdout, out.stderr));
    }
    let samples: serde_json::Value =
        serde_json::from_str(&out.stdout).map_err(|e| format!("{expr}: {e}: {}", out.stdout))?;
    Ok(samples
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["value"][1].as_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default())
}

#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    if !require_prometheus() {
        return;
    }
    let dir = monitoring_dir();
    let check = run(&[
        "promtool",
        "check",
        "rules",
        dir.join("dxdp-alerts.yml").to_str().unwrap(),
    ]);
    assert!(check.success(), "{}{}", check.stdout, check.stderr);
    assert!(
        check.stdout.contains("SUCCESS: 8 rules found"),
        "{}",
        check.stdout
    );
    // The unit tests fire every alert on a failing watch and none on a healthy one.
    let test = Command::new("promtool")
        .args(["test", "rules", "dxdp-alerts.test.yml"])
        .current_dir(&dir)
        .output()
        .expect("run promtool");
    let shown =
        String::from_utf8_lossy(&test.stdout).into_owned() + &String::from_utf8_lossy(&test.stderr);
    assert!(test.status.success(), "{shown}");
    assert!(shown.contains("SUCCESS"), "{shown}");
}

#[test]
fn a_real_prometheus_scrapes_the_watch_and_sees_a_per_link_rate() {
    if !require_docker() || !require_prometheus() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("net", &[]);
    let group = format!("dxdp.group={}-mon", world.prefix);
    let args = ["--network", &net, "-l", "dxdp.enable=true", "-l", &group];
    let a = world.run("a", &args, &[]);
    let b = world.run("b", &args, &[]);
    let metrics = format!("127.0.0.1:{}", free_port());
    let watch = world.watch(&["--resync", "2", "--metrics", &metrics]);
    let linked =
        wait_until(Duration::from_secs(15), || {
            world.dxdp.status().links.iter().any(|l| {
                (l.low_name == a && l.high_name == b) || (l.low_name == b && l.high_name == a)
            })
        });
    assert!(linked, "{a} and {b} not linked\n{}", watch.log_text());

    // A live scrape passes promtool's exposition lint.
    let scrape = http_get(&metrics, "/metrics");
    let exposition = body_of(&scrape).to_owned();
    assert!(exposition.contains("dxdp_map_capacity"), "{scrape}");
    assert!(
        exposition.contains("dxdp_connections{table=\"established\"} 0\n"),
        "{scrape}"
    );
    assert_promtool_accepts(&exposition);

    // A Prometheus server of our own, scraping every second, with the shipped rules loaded.
    let scratch = tempdir(&world.prefix);
    let config = scratch.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: dxdp\n    static_configs:\n      - targets: ['{metrics}']\n",
            monitoring_dir().join("dxdp-alerts.yml").display()
        ),
    )
    .unwrap();
    let server = format!("127.0.0.1:{}", free_port());
    let _prometheus = Background::spawn(&[
        "prometheus",
        &format!("--config.file={}", config.display()),
        &format!("--storage.tsdb.path={}", scratch.join("data").display()),
        &format!("--web.listen-address={server}"),
    ]);
    let up = wait_until(Duration::from_secs(30), || {
        query(&server, "up{job=\"dxdp\"}").is_ok_and(|v| v == [1.0])
    });
    assert!(up, "Prometheus never scraped the watch at {metrics}");

    // Traffic over the link while Prometheus scrapes: its rate shows per link and direction.
    let ip_b = world.ip(&b, &net);
    let _ping = Background::spawn(&[
        "docker", "exec", &a, "ping", "-q", "-c", "800", "-i", "0.01", &ip_b,
    ]);
    let rate = format!(
        "sum(rate(dxdp_link_redirected_packets_total{{job=\"dxdp\",from=\"{a}\",to=\"{b}\"}}[5s]))"
    );
    let mut seen = Vec::new();
    let flowing = wait_until(Duration::from_secs(30), || {
        seen = query(&server, &rate).unwrap_or_default();
        seen.first().is_some_and(|v| *v > 10.0)
    });
    assert!(flowing, "{rate} = {seen:?}\n{}", watch.log_text());
    eprintln!("Prometheus: {rate} = {seen:?} packets/s");

    // Every query of the dashboard parses and runs, and names only metrics the watch serves.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring_dir().join("dxdp-dashboard.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    let exprs: Vec<&str> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");
    for expr in &exprs {
        if let Err(why) = query(&server, expr) {
            panic!("dashboard query fails: {why}");
        }
        for metric in metric_names(expr) {
            let family = metric.trim_end_matches("_sum").trim_end_matches("_count");
            assert!(
                exposition.contains(&format!("# TYPE {family} ")),
                "the dashboard names {metric}, which the watch does not serve"
            );
        }
    }

    // The shipped rules are loaded and healthy, and none fires for a healthy watch.
    let rules = http_get(&server, "/api/v1/rules");
    let rules: serde_json::Value = serde_json::from_str(body_of(&rules)).expect("rules JSON");
    let loaded: Vec<(&str, &str)> = rules["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .map(|r| {
            (
                r["name"].as_str().unwrap_or(""),
                r["health"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(loaded.len(), 8, "{rules}");
    for (name, health) in &loaded {
        assert!(*health == "ok" || *health == "unknown", "{name}: {health}");
    }
    let firing = query(&server, "ALERTS{alertstate=\"firing\",job=\"dxdp\"}").unwrap();
    assert!(
        firing.is_empty(),
        "alerts fire on a healthy watch: {firing:?}"
    );
}

/// The `dxdp_*` metric names an expression reads.
fn metric_names(expr: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("dxdp_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(&tail[..end]);
        rest = &tail[end..];
    }
    names
}

/// A scratch directory for the Prometheus server, named after the test's prefix and removed on
/// drop, also when the test fails.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir(prefix: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("{prefix}-prometheus"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    Scratch(dir)
}

/// More idle connections to `--metrics` than the watch may open files (its soft limit set to
/// 1024, the old unit's default) neither end the listener nor the watch: once the flood is
/// gone, a scrape answers at once. Before, accept failed with EMFILE and the listener was gone
/// for good, silently, while the watch ran on (issue 22).
#[test]
fn a_flood_of_idle_metrics_connections_leaves_the_listener_serving() {
    if !require_docker() {
        return;
    }
    let world = World::shared();
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut watch = world.watch(&["--metrics", &metrics]);
    let serving = || {
        http_get(&metrics, "/metrics")
            .lines()
            .next()
            .is_some_and(|status| status.contains(" 200 "))
    };
    assert!(
        wait_until(Duration::from_secs(15), serving),
        "no scrape answered\n{}",
        watch.log_text()
    );
    run(&[
        "prlimit",
        "--pid",
        &watch.pid().to_string(),
        "--nofile=1024:1024",
    ])
    .assert_success();
    // This process opens the flood: its own soft limit up to its hard one.
    // SAFETY: plain getrlimit/setrlimit on this process's own limits.
    unsafe {
        let mut limit = std::mem::zeroed::<libc::rlimit>();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
    let flood: Vec<TcpStream> = (0..1100)
        .filter_map(|_| TcpStream::connect(&metrics).ok())
        .collect();
    assert!(
        flood.len() > 1024,
        "only {} connections opened",
        flood.len()
    );
    std::thread::sleep(Duration::from_secs(2));
    drop(flood);
    assert!(
        wait_until(Duration::from_secs(15), serving),
        "the metrics listener did not survive the flood\n{}",
        watch.log_text()
    );
    assert!(watch.alive(), "the watch died\n{}", watch.log_text());
}
