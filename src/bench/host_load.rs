//! What else the host did while a benchmark measured, recorded with the results because it
//! explains wide ranges and ratios that do not reproduce: the load average when the measurement
//! started and ended, and the share of CPU time the hypervisor gave to others while this guest
//! wanted it ("steal", from `/proc/stat`), which no load average shows.
use std::thread;

use serde::Serialize;

/// The host as a measurement starts; [`HostLoad::since`] compares the end with it.
pub struct Start {
    load: Option<f64>,
    ticks: Option<CpuTicks>,
}

/// Reads the load average and the CPU time so far.
pub fn start() -> Start {
    Start {
        load: load_average(),
        ticks: cpu_ticks(),
    }
}

impl Start {
    /// The 1-minute load average when the measurement started.
    pub fn load(&self) -> Option<f64> {
        self.load
    }
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct HostLoad {
    pub cpus: usize,
    /// 1-minute load averages when the measurement started and ended.
    pub before: Option<f64>,
    pub after: Option<f64>,
    /// Percent of all CPUs' time in the measurement stolen by the hypervisor.
    pub steal_percent: Option<f64>,
}

impl HostLoad {
    pub fn since(start: &Start) -> Self {
        Self {
            cpus: cpus(),
            before: start.load,
            after: load_average(),
            steal_percent: start
                .ticks
                .zip(cpu_ticks())
                .and_then(|(a, b)| b.steal_since(a)),
        }
    }

    /// `load average 0.80 before, 1.40 after, on 2 CPUs, steal 0.3%`.
    pub fn describe(&self) -> String {
        let load = |l: Option<f64>| l.map_or("?".into(), |l| format!("{l:.2}"));
        format!(
            "load average {} before, {} after, on {} CPUs, steal {}",
            load(self.before),
            load(self.after),
            self.cpus,
            self.steal_percent
                .map_or("?".into(), |s| format!("{s:.1}%"))
        )
    }
}

pub fn cpus() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// The 1-minute load average.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// All CPUs' time so far, in ticks, and the part of it stolen.
#[derive(Clone, Copy, Debug, PartialEq)]
struct CpuTicks {
    total: u64,
    steal: u64,
}

impl CpuTicks {
    /// Percent of the time from `earlier` to `self` that was stolen; `None` if no tick passed.
    fn steal_since(self, earlier: CpuTicks) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let steal = self.steal.checked_sub(earlier.steal)?;
        (total > 0).then(|| 100.0 * steal as f64 / total as f64)
    }
}

fn cpu_ticks() -> Option<CpuTicks> {
    parse_cpu_line(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The first line of `/proc/stat`: `cpu user nice system idle iowait irq softirq steal guest
/// guest_nice`. Guest time is counted in user time already, so the total is the first eight.
fn parse_cpu_line(stat: &str) -> Option<CpuTicks> {
    let mut fields = stat.lines().next()?.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let ticks: Vec<u64> = fields
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    (ticks.len() == 8).then(|| CpuTicks {
        total: ticks.iter().sum(),
        steal: ticks[7],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_stolen_share_of_all_cpu_time_between_two_readings() {
        let before = parse_cpu_line(
            "cpu  5044972 0 1792769 6242458 45936 0 486428 38883 0 0\n\
             cpu0 2465120 0 879816 3193502 12958 0 257774 19412 0 0\n",
        )
        .unwrap();
        assert_eq!(before.steal, 38883);
        assert_eq!(before.total, 13_651_446);
        // 1,000 ticks later, 50 of them stolen.
        let after = CpuTicks {
            total: before.total + 1000,
            steal: before.steal + 50,
        };
        assert_eq!(after.steal_since(before), Some(5.0));
        assert_eq!(before.steal_since(before), None, "no time passed");
    }

    #[test]
    fn a_cpu_line_that_is_not_the_total_or_is_short_is_not_read() {
        assert_eq!(parse_cpu_line("cpu0 1 2 3 4 5 6 7 8\n"), None);
        assert_eq!(parse_cpu_line("cpu  1 2 3 4 5 6 7\n"), None);
        assert_eq!(parse_cpu_line(""), None);
    }

    #[test]
    fn the_description_names_what_is_unknown() {
        let load = HostLoad {
            cpus: 2,
            before: Some(0.8),
            after: None,
            steal_percent: Some(0.26),
        };
        assert_eq!(
            load.describe(),
            "load average 0.80 before, ? after, on 2 CPUs, steal 0.3%"
        );
    }
}
