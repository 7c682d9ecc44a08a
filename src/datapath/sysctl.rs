//! conntrack's settings of the host's namespace (`/proc/sys/net/netfilter/nf_conntrack_*`),
//! which the programs that stand in for its checks are loaded with.

/// The setting `nf_conntrack_{name}`; `None` where the kernel has no such setting.
pub(super) fn conntrack(name: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/sys/net/netfilter/nf_conntrack_{name}"))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
}

/// The on/off setting `nf_conntrack_{name}` as 0 or 1; absent (an older kernel), it is off, as
/// there.
pub(super) fn conntrack_switch(name: &str) -> u32 {
    u32::from(conntrack(name).unwrap_or(0) != 0)
}
