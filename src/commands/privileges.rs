//! Which privileges the commands that load eBPF objects or enter namespaces need, read from
//! this process's effective capabilities.
/// The capabilities dxdp needs, by bit number in CapEff.
const NEEDED_CAPABILITIES: [(u32, &str); 3] = [
    (39, "CAP_BPF"),
    (12, "CAP_NET_ADMIN"),
    (21, "CAP_SYS_ADMIN"),
];

const CAP_BPF: u32 = 39;
const CAP_SYS_ADMIN: u32 = 21;

/// Which of [`NEEDED_CAPABILITIES`] this process lacks, from CapEff in /proc/self/status.
pub fn missing_capabilities() -> Vec<&'static str> {
    let eff = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0);
    let has = |bit: u32| eff & (1 << bit) != 0;
    NEEDED_CAPABILITIES
        .iter()
        // The kernel lets CAP_SYS_ADMIN stand in for CAP_BPF, and Docker 20.10 cannot grant
        // CAP_BPF to a container at all.
        .filter(|(bit, _)| !(has(*bit) || (*bit == CAP_BPF && has(CAP_SYS_ADMIN))))
        .map(|(_, name)| *name)
        .collect()
}
