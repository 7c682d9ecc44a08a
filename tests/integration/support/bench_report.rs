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
