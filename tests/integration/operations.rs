//! What an operator runs besides link/unlink: `doctor`, `watch --metrics`, completions and the
//! man page.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    time::Duration,
};

use crate::support::{self, DXDP, World, free_port, require_docker, run, wait_until};

fn scrape(addr: &str) -> String {
    ask(addr, "GET")
}

fn ask(addr: &str, method: &str) -> String {
    let Ok(mut conn) = TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(conn, "{method} /metrics HTTP/1.1\r\nHost: dxdp\r\n\r\n");
    let mut body = String::new();
    let _ = conn.read_to_string(&mut body);
    body
}

#[test]
fn watch_serves_prometheus_metrics_of_its_links() {
    if !require_docker() {
        return;
    }
    let mut world = World::shared();
    let net = world.network("net", &[]);
    let group = format!("dxdp.group={}-m", world.prefix);
    let args = ["--network", &net, "-l", "dxdp.enable=true", "-l", &group];
    let a = world.run("a", &args, &[]);
    let b = world.run("b", &args, &[]);
    let addr = format!("127.0.0.1:{}", free_port());
    let watch = world.watch(&["--resync", "2", "--metrics", &addr]);
    // Count only this test's links: other labeled containers on the host are not ours.
    let linked =
        wait_until(Duration::from_secs(10), || {
            world.dxdp.status().links.iter().any(|l| {
                (l.low_name == a && l.high_name == b) || (l.low_name == b && l.high_name == a)
            })
        });
    assert!(linked, "{a} and {b} not linked\n{}", watch.log_text());
    let ip_b = world.ip(&b, &net);
    support::docker_ok(&["exec", &a, "ping", "-q", "-c", "20", "-i", "0.01", &ip_b]);

    let mut body = String::new();
    let served = wait_until(Duration::from_secs(10), || {
        body = scrape(&addr);
        body.contains("dxdp_reconciles_total") && !body.contains("dxdp_reconciles_total 0\n")
    });
    assert!(served, "no metrics at {addr}: {body}\n{}", watch.log_text());
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(
        body.contains("Content-Type: text/plain; version=0.0.4"),
        "{body}"
    );
    assert!(body.contains("dxdp_links{datapath=\"tc\"} "), "{body}");
    assert!(body.contains("dxdp_docker_connected 1\n"), "{body}");
    assert!(body.contains("dxdp_reconcile_errors_total 0\n"), "{body}");
    let forward = body
        .lines()
        .find(|l| {
            l.starts_with("dxdp_link_redirected_packets_total{")
                && l.contains(&format!("from=\"{a}\""))
        })
        .unwrap_or_else(|| panic!("no per-link counter from {a}: {body}"));
    let packets: u64 = forward
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a number");
    assert!(packets >= 20, "{forward}");
    assert!(
        body.contains("# TYPE dxdp_interface_redirected_packets_total counter"),
        "{body}"
    );
    let head = ask(&addr, "HEAD");
    assert!(
        head.starts_with("HTTP/1.1 200 OK") && head.ends_with("\r\n\r\n"),
        "{head}"
    );
    let post = ask(&addr, "POST");
    assert!(
        post.starts_with("HTTP/1.1 405 ") && post.contains("Allow: GET, HEAD"),
        "{post}"
    );
}

#[test]
fn metrics_address_in_use_is_a_clear_error() {
    if !require_docker() {
        return;
    }
    let holder = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = holder.local_addr().expect("addr").to_string();
    let world = World::shared();
    let dir = world.dxdp.pin_dir.to_string_lossy().into_owned();
    let run = support::run_for(
        &[DXDP, "--pin-dir", &dir, "watch", "--metrics", &addr],
        Duration::from_secs(20),
    );
    run.assert_failure();
    assert!(
        run.stderr.contains(&addr) && run.stderr.contains("--metrics"),
        "{run}"
    );
}

#[test]
fn doctor_reports_each_check_and_its_verdict() {
    if !support::require_privileges() {
        return;
    }
    let run = run(&[
        DXDP,
        "--pin-dir",
        "/sys/fs/bpf/dxdp-doctor-absent",
        "doctor",
    ]);
    run.assert_success();
    for check in [
        "kernel",
        "capabilities",
        "bpffs mounted",
        "RCU grace periods",
        "br_netfilter",
        "firewall:",
        "dockerd",
    ] {
        assert!(
            run.stdout.contains(check),
            "doctor says nothing about {check}: {run}"
        );
    }
    assert!(
        run.stdout
            .lines()
            .all(|l| l.starts_with('[') || l.trim_start().starts_with("fix:"))
    );
    // Not on bpffs: a failing check, a fix, and a non-zero exit.
    let run = support::run(&[DXDP, "--pin-dir", "/tmp/dxdp-not-bpffs/x", "doctor"]);
    run.assert_failure();
    assert!(
        run.stdout.contains("[FAIL]") && run.stdout.contains("mount -t bpf"),
        "{run}"
    );
}

#[test]
fn completions_and_man_page_come_from_the_cli_definitions() {
    for shell in ["bash", "zsh", "fish"] {
        let run = run(&[DXDP, "completions", shell]);
        run.assert_success();
        for sub in [
            "link",
            "unlink",
            "status",
            "top",
            "watch",
            "doctor",
            "bench",
            "compose-check",
        ] {
            assert!(run.stdout.contains(sub), "{shell} completions lack {sub}");
        }
    }
    let run = run(&[DXDP, "man"]);
    run.assert_success();
    assert!(
        run.stdout.starts_with(".ie") || run.stdout.contains(".TH dxdp 1"),
        "{run}"
    );
    assert!(run.stdout.contains("link"));
}

#[test]
fn status_names_the_veths_and_marks_a_link_whose_veth_is_gone() {
    if !support::require_privileges() {
        return;
    }
    let mut topo = support::Topology::new(3);
    let (a, b, c) = (
        topo.node(0).clone(),
        topo.node(1).clone(),
        topo.node(2).clone(),
    );
    topo.dxdp.link(&a, &b, "tc").assert_success();
    topo.dxdp.link(&a, &c, "tc").assert_success();
    let json = |run: support::Run| -> serde_json::Value {
        serde_json::from_str(&run.assert_success().stdout).expect("status --json")
    };
    let live = json(topo.dxdp.run(&["status", "--json"]));
    for link in live["links"].as_array().expect("links") {
        assert_eq!(link["state"], "live", "{link}");
        let names = [&link["low_ifname"], &link["high_ifname"]];
        assert!(
            names.iter().all(|n| n.as_str() == Some(&a.host_veth)
                || n.as_str() == Some(&b.host_veth)
                || n.as_str() == Some(&c.host_veth)),
            "{link}"
        );
    }

    // c's veth disappears while nothing runs that would collect the link.
    let gone_ifindex = c.host_ifindex();
    topo.recreate_veth(2);
    let after = json(topo.dxdp.run(&["status", "--json"]));
    let links = after["links"].as_array().expect("links");
    let state_of = |ifindex: u32| {
        links
            .iter()
            .find(|l| l["low_ifindex"] == ifindex || l["high_ifindex"] == ifindex)
            .map(|l| l["state"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(state_of(gone_ifindex).as_deref(), Some("gone"), "{after}");
    assert_eq!(
        state_of(b.host_ifindex()).as_deref(),
        Some("live"),
        "{after}"
    );

    let table = topo.dxdp.run(&["status"]);
    table.assert_success();
    let out = &table.stdout;
    assert!(out.contains("GONE") && out.contains("dxdp unlink"), "{out}");
    // Columns stay aligned: every row of the links table starts its STATE column at one offset.
    let rows: Vec<&str> = out.lines().take_while(|l| !l.is_empty()).collect();
    let header_at = rows[0].find("STATE").expect("STATE column");
    for row in &rows[1..rows.len() - 1] {
        let state = &row[header_at..];
        assert!(
            state.starts_with("live") || state.starts_with("GONE"),
            "misaligned row: {row:?}\n{out}"
        );
    }

    // Any later link collects it.
    topo.dxdp.link(&a, &b, "tc").assert_success();
    let collected = json(topo.dxdp.run(&["status", "--json"]));
    assert_eq!(
        collected["links"].as_array().map(Vec::len),
        Some(1),
        "{collected}"
    );
}

/// `--log-format json` (and `DXDP_LOG_FORMAT=json`) writes one JSON object per log line, with
/// the level, the message and the event's fields; the default stays text. A watch pointed at a
/// dockerd that is not there logs its retries, which is enough to read.
#[test]
fn log_format_json_writes_one_object_per_line() {
    if !support::require_privileges() {
        return;
    }
    let pin_dir = format!("/sys/fs/bpf/dxdp-test-{}-logs", std::process::id());
    let watch_for_two_seconds = |format: &[&str]| {
        let mut argv = vec![
            "env",
            "DOCKER_HOST=unix:///nonexistent/dxdp-test.sock",
            "timeout",
            "2",
            DXDP,
            "--pin-dir",
            &pin_dir,
        ];
        argv.extend_from_slice(format);
        argv.push("watch");
        run(&argv)
    };
    for format in [&["--log-format", "json"][..], &["--log-format=json"][..]] {
        let out = watch_for_two_seconds(format);
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert!(lines.len() >= 2, "{}", out.stderr);
        for line in &lines {
            let event: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line}"));
            assert!(
                event["level"].is_string() && event["message"].is_string(),
                "{line}"
            );
            assert!(event["timestamp"].is_string(), "{line}");
        }
        assert!(
            lines
                .iter()
                .any(|l| l.contains(r#""level":"WARN""#) && l.contains("cannot reach dockerd")),
            "{}",
            out.stderr
        );
        let start = serde_json::from_str::<serde_json::Value>(lines[0]).unwrap();
        assert_eq!(
            start["pin_dir"],
            pin_dir.as_str(),
            "fields are kept: {}",
            lines[0]
        );
    }
    // The environment variable selects it too; text is the default.
    let out = run(&[
        "env",
        "DXDP_LOG_FORMAT=json",
        "DOCKER_HOST=unix:///nonexistent/dxdp-test.sock",
        "timeout",
        "2",
        DXDP,
        "--pin-dir",
        &pin_dir,
        "watch",
    ]);
    assert!(out.stderr.starts_with('{'), "{}", out.stderr);
    let text = watch_for_two_seconds(&[]);
    assert!(!text.stderr.starts_with('{'), "{}", text.stderr);
    assert!(
        text.stderr.contains("cannot reach dockerd"),
        "{}",
        text.stderr
    );
    // The watch never got as far as making its pin directory.
    assert!(!std::path::Path::new(&pin_dir).exists());
}

/// `doctor --json` and `status --json` carry their documented schema (docs/json.md); doctor's
/// top-level verdict is the worst check's, and `fail` is what exit status 1 says.
#[test]
fn doctor_and_status_json_carry_their_schema() {
    if !support::require_privileges() {
        return;
    }
    let out = run(&[DXDP, "doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json is not JSON ({e}): {}", out.stdout));
    assert_eq!(report["schema"], "dxdp.doctor/1");
    let checks = report["checks"].as_array().expect("checks");
    assert!(checks.len() >= 5, "{report:#}");
    let rank = |v: &serde_json::Value| match v.as_str() {
        Some("ok") => 0,
        Some("warn") => 1,
        Some("fail") => 2,
        other => panic!("unknown verdict {other:?}"),
    };
    let worst = checks.iter().map(|c| rank(&c["verdict"])).max().unwrap();
    assert_eq!(rank(&report["verdict"]), worst, "{report:#}");
    assert_eq!(out.success(), worst < 2, "{report:#}");
    assert!(checks.iter().all(|c| c["what"].is_string()), "{report:#}");
    assert!(
        checks
            .iter()
            .any(|c| c["what"].as_str().unwrap().starts_with("kernel ")),
        "{report:#}"
    );

    let pin_dir = format!("/sys/fs/bpf/dxdp-test-{}-none", std::process::id());
    let status = run(&[DXDP, "--pin-dir", &pin_dir, "status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("status JSON");
    assert_eq!(status["schema"], "dxdp.status/1");
    assert_eq!(status["links"], serde_json::json!([]));
}

/// `doctor` reads the host dockerd's userland-proxy (its command line, then daemon.json, else
/// the default, on) and, while it is on and a container publishes a port, warns that host
/// clients go through docker-proxy, naming the container and the daemon.json way out; the
/// check is not a failure (issue 21).
#[test]
fn doctor_warns_of_docker_proxy_while_a_container_publishes_a_port() {
    if !require_docker() {
        return;
    }
    let doctor = || {
        run(&[
            DXDP,
            "--pin-dir",
            "/sys/fs/bpf/dxdp-doctor-absent",
            "doctor",
        ])
    };
    let line = |out: &support::Run| {
        out.stdout
            .lines()
            .find(|l| l.contains("userland-proxy"))
            .unwrap_or_else(|| panic!("doctor says nothing of userland-proxy: {out}"))
            .to_owned()
    };
    let dockerd = run(&["pgrep", "-ax", "dockerd"]);
    let explicit_off = std::fs::read_to_string("/etc/docker/daemon.json")
        .is_ok_and(|j| j.replace(' ', "").contains("\"userland-proxy\":false"))
        || dockerd.stdout.contains("--userland-proxy=false");
    let mut world = World::shared();
    let net = world.network("proxy", &[]);
    let published = world.run("web", &["--network", &net, "-p", "127.0.0.1::8080"], &[]);
    let out = doctor();
    out.assert_success();
    let said = line(&out);
    if explicit_off {
        assert!(
            said.starts_with("[ ok ]") && said.contains("is off"),
            "{said}"
        );
        return;
    }
    assert!(
        said.starts_with("[warn]")
            && said.contains("userland-proxy is on")
            && said.contains(&published)
            && said.contains("docker-proxy"),
        "{out}"
    );
    assert!(
        out.stdout
            .contains("\"userland-proxy\": false in /etc/docker/daemon.json"),
        "the way out: {out}"
    );
    world.remove(std::slice::from_ref(&published));
    let said = line(&doctor());
    assert!(!said.contains(&published), "{said}");
}
