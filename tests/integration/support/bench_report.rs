//! What every bench's JSON says of the host it measured on.

/// `report`'s `host_load.steal_percent` is a share, and its `cpu_idle` names this machine's
/// cpuidle driver (`null` where there is none).
pub fn assert_host_facts(report: &serde_json::Value) {
    let steal = report["host_load"]["steal_percent"].as_f64();
    assert!(
        steal.is_some_and(|s| (0.0..=100.0).contains(&s)),
        "{report}"
    );
    let driver = std::fs::read_to_string("/sys/devices/system/cpu/cpuidle/current_driver")
        .ok()
        .map(|d| d.trim().to_owned());
    assert_eq!(
        report["cpu_idle"]["driver"].as_str(),
        driver.as_deref(),
        "{report}"
    );
}

/// `dxdp --pin-dir PIN_DIR KIND CONTAINER --PEER_FLAG netns:NS --nic NIC` for one round of 1 s
/// tests with `--wire WIRE --pin-cpus --json JSON` (`bench-ingress` with `--bypass-firewall`):
/// what `bench-ingress` and `bench-egress` are checked with.
pub fn bench_through_nic(
    pin_dir: &str,
    kind: &str,
    container: &str,
    peer: (&str, &str),
    nic: &str,
    wire: &str,
    json: &str,
) -> super::Run {
    let peer_ns = format!("netns:{}", peer.1);
    let mut argv = vec![
        super::DXDP,
        "--pin-dir",
        pin_dir,
        kind,
        container,
        peer.0,
        &peer_ns,
        "--nic",
        nic,
    ];
    if kind == "bench-ingress" {
        argv.push("--bypass-firewall");
    }
    argv.extend([
        "--rounds",
        "1",
        "--seconds",
        "1",
        "--wire",
        wire,
        "--pin-cpus",
        "--json",
        json,
    ]);
    super::run_for(&argv, std::time::Duration::from_secs(120))
}

/// Every metric of a one-round bench through a NIC has one positive sample on each route, the
/// ratios to Docker's path (and the fast path's to the wire), and its row in the table.
pub fn assert_every_route_measured(report: &serde_json::Value, table: &str) {
    let metrics = report["metrics"].as_array().expect("metrics");
    assert_eq!(metrics.len(), 10, "{report}");
    for m in metrics {
        for route in ["docker", "fast", "wire"] {
            let samples = m[route]["samples"].as_array().expect("samples");
            assert!(
                samples.len() == 1 && samples[0].as_f64().is_some_and(|v| v > 0.0),
                "{} on {route}: {samples:?}",
                m["id"]
            );
        }
        for ratio in ["fast_over_docker", "wire_over_docker", "fast_over_wire"] {
            assert!(m[ratio].as_f64().is_some(), "{ratio}: {m}");
        }
        // One round: its own ratio is the medians' ratio.
        for ratio in ["fast_over_docker", "wire_over_docker"] {
            assert_eq!(
                m[format!("{ratio}_per_round")],
                serde_json::json!([m[ratio]]),
                "{m}"
            );
        }
        let row = m["label"].as_str().expect("label");
        assert!(table.contains(row), "the table lacks {row}: {table}");
    }
    let carried = report["fast_path_packets_per_round"][0].as_u64();
    assert!(carried.is_some_and(|p| p > 0), "{report}");
    assert!(
        table.contains("WIRE/DOCKER") && table.contains("FAST/WIRE"),
        "{table}"
    );
    assert_host_facts(report);
}

/// The bench's wire is gone from the outside namespace `ns` and from the container's (`pid`).
pub fn assert_wire_gone(ns: &str, pid: u32) {
    let pid = pid.to_string();
    for mut argv in [
        vec!["ip", "-n", ns],
        vec!["nsenter", "-t", &pid, "-n", "ip"],
    ] {
        argv.extend(["link", "show", "dev", "dxbench-wire"]);
        let left = super::run_for(&argv, std::time::Duration::from_secs(10));
        assert!(
            !left.success(),
            "the wire is still there ({argv:?}): {left}"
        );
    }
}
