//! conntrack's settings of the host's namespace (`/proc/sys/net/netfilter/nf_conntrack_*`),
//! which the programs that stand in for its checks are given.
use dxdp_common::tcp_window::switch;

/// The setting `nf_conntrack_{name}`; `None` where the kernel has no such setting.
pub(super) fn conntrack(name: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/sys/net/netfilter/nf_conntrack_{name}"))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
}

/// Whether the on/off setting `nf_conntrack_{name}` is on; absent (an older kernel), it is
/// off, as there.
fn conntrack_switch(name: &str) -> bool {
    conntrack(name).unwrap_or(0) != 0
}

/// Conntrack's TCP switches as they are now, as `tcp_window::switch` bits: what the
/// published ports' and the egress programs judge segments by.
pub(super) fn tcp_switches() -> u32 {
    let on = |name: &str, bit: u32| if conntrack_switch(name) { bit } else { 0 };
    on("tcp_be_liberal", switch::BE_LIBERAL)
        | on("tcp_ignore_invalid_rst", switch::IGNORE_INVALID_RST)
}
