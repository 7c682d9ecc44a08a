//! How this machine's idle CPUs wait, recorded with latency results: in a virtual machine whose
//! idle vCPUs halt at once, every wake-up of a sleeping server or client exits to the
//! hypervisor, and that cost, the same on every path, sits in each round trip between two
//! CPUs. A guest that polls before halting (`haltpoll`'s `guest_halt_poll_ns`) pays it less.
use std::{fs, path::Path};

use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CpuIdle {
    /// The cpuidle driver (`haltpoll` in a KVM guest that uses it, `intel_idle`, `acpi_idle`…).
    pub driver: String,
    /// How long an idle vCPU polls before halting, when the driver is `haltpoll`.
    pub guest_halt_poll_ns: Option<u64>,
}

impl CpuIdle {
    /// This machine's, from sysfs; `None` without cpuidle.
    pub fn read() -> Option<Self> {
        Self::from_files(|path| fs::read_to_string(Path::new("/sys").join(path)).ok())
    }

    /// From the files `read` gives, by their paths under /sys.
    fn from_files(read: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let driver = read("devices/system/cpu/cpuidle/current_driver")?
            .trim()
            .to_owned();
        let guest_halt_poll_ns = (driver == "haltpoll")
            .then(|| {
                read("module/haltpoll/parameters/guest_halt_poll_ns")?
                    .trim()
                    .parse()
                    .ok()
            })
            .flatten();
        Some(Self {
            driver,
            guest_halt_poll_ns,
        })
    }

    /// One clause for the results' footer.
    pub fn describe(&self) -> String {
        match self.guest_halt_poll_ns {
            Some(0) => format!(
                "idle CPUs halt without polling ({}, guest_halt_poll_ns 0): each wake-up exits \
                 to the hypervisor",
                self.driver
            ),
            Some(ns) => format!(
                "idle CPUs poll up to {} µs before halting ({})",
                ns / 1000,
                self.driver
            ),
            None => format!("cpuidle driver {}", self.driver),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A /sys with `driver` as the cpuidle driver and haltpoll's knob at `poll_ns`.
    fn sys(driver: &str, poll_ns: Option<&str>) -> Option<CpuIdle> {
        CpuIdle::from_files(|path| match path {
            "devices/system/cpu/cpuidle/current_driver" => Some(format!("{driver}\n")),
            "module/haltpoll/parameters/guest_halt_poll_ns" => poll_ns.map(|ns| format!("{ns}\n")),
            _ => None,
        })
    }

    #[test]
    fn a_haltpoll_guest_says_how_long_it_polls() {
        let idle = sys("haltpoll", Some("0")).unwrap();
        assert_eq!(idle.guest_halt_poll_ns, Some(0));
        assert!(
            idle.describe()
                .starts_with("idle CPUs halt without polling")
        );
        let idle = sys("haltpoll", Some("200000")).unwrap();
        assert_eq!(
            idle.describe(),
            "idle CPUs poll up to 200 µs before halting (haltpoll)"
        );
    }

    #[test]
    fn other_drivers_are_named_and_a_machine_without_cpuidle_has_none() {
        let idle = sys("intel_idle", Some("0")).unwrap();
        assert_eq!(idle.guest_halt_poll_ns, None, "haltpoll's knob, not in use");
        assert_eq!(idle.describe(), "cpuidle driver intel_idle");
        assert_eq!(CpuIdle::from_files(|_| None), None);
    }
}
