//! The host's checks: kernel version, capabilities, bpffs, the RCU expedite switch.
use std::path::Path;

use aya::util::KernelVersion;

use super::{Check, Verdict, check};
use crate::{
    commands::privileges::missing_capabilities,
    datapath::{TC_SINCE, XDP_SINCE, kernel_has},
    rcu,
};

pub(super) fn kernel() -> Check {
    match KernelVersion::current() {
        Ok(v) if kernel_has(v, TC_SINCE) => check(
            Verdict::Ok,
            format!("kernel {v}: TCX, bpf_redirect_peer, native XDP on veth"),
            None,
        ),
        Ok(v) if kernel_has(v, XDP_SINCE) => check(
            Verdict::Warn,
            format!("kernel {v}: no TCX (6.6), so only the xdp datapath can be pinned"),
            Some("use --datapath xdp, or upgrade to Linux 6.6 or later"),
        ),
        Ok(v) => check(
            Verdict::Fail,
            format!("kernel {v} is too old for dxdp"),
            Some("Linux 5.10 at least, 6.6 or later for the tc datapath"),
        ),
        Err(e) => check(
            Verdict::Fail,
            format!("cannot read the kernel version: {e}"),
            None,
        ),
    }
}

pub(super) fn capabilities() -> Check {
    let missing = missing_capabilities();
    if missing.is_empty() {
        check(
            Verdict::Ok,
            "capabilities: CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN",
            None,
        )
    } else {
        check(
            Verdict::Fail,
            format!("missing capabilities: {}", missing.join(", ")),
            Some("run as root, or grant them (the systemd unit in packaging/ does)"),
        )
    }
}

/// The kernel's RCU expedite switch, which decides how long a veth's first attachment waits,
/// and whether a dxdp that turned it on (`watch --expedite-rcu`) died before putting it back.
pub(super) fn rcu(switch: &rcu::Switch) -> Check {
    let knob = switch.knob().display();
    let value = match switch.read() {
        Ok(value) => value,
        Err(e) => {
            return check(
                Verdict::Warn,
                format!("RCU grace periods: {e:#}"),
                Some("watch --expedite-rcu cannot be used here"),
            );
        }
    };
    match (value, switch.holder()) {
        (0, _) => check(
            Verdict::Ok,
            format!(
                "RCU grace periods normal ({knob} = 0): a veth's first attachment waits one \
                 (about 12 ms); `watch --expedite-rcu` expedites them while it attaches"
            ),
            None,
        ),
        (_, Some(holder)) if holder.alive() => check(
            Verdict::Ok,
            format!(
                "RCU grace periods expedited for now: dxdp pid {} is attaching \
                 (watch --expedite-rcu) and puts {knob} back to {} after",
                holder.pid, holder.previous
            ),
            None,
        ),
        (_, Some(holder)) => check(
            Verdict::Warn,
            format!(
                "{knob} = {value}, left on by dxdp pid {} that died while attaching \
                 (watch --expedite-rcu); every grace period on the host interrupts every CPU",
                holder.pid
            ),
            Some(&format!(
                "start `dxdp watch` (it puts the value back), or `echo {} > {knob}` and remove {}",
                holder.previous,
                switch.marker().display()
            )),
        ),
        (_, None) => check(
            Verdict::Ok,
            format!(
                "RCU grace periods expedited ({knob} = {value}, the host's setting): first \
                 attachments are fast; dxdp leaves it as it is"
            ),
            None,
        ),
    }
}

pub(super) fn bpffs(pin_dir: &Path) -> Check {
    let probe = pin_dir.parent().unwrap_or(Path::new("/sys/fs/bpf"));
    if crate::datapath::on_bpffs(probe) {
        check(
            Verdict::Ok,
            format!("bpffs mounted at {}", probe.display()),
            None,
        )
    } else {
        check(
            Verdict::Fail,
            format!("{} is not a bpffs mount", probe.display()),
            Some("mount -t bpf bpf /sys/fs/bpf"),
        )
    }
}
