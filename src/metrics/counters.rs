//! The counters the watch writes as it reconciles, read at each scrape.
use std::{
    collections::BTreeMap,
    sync::Mutex,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

/// What the watch loop reports about itself.
#[derive(Default)]
pub struct Metrics(Mutex<WatchCounters>);

#[derive(Default, Clone)]
pub(super) struct WatchCounters {
    pub(super) reconciles: u64,
    pub(super) errors: u64,
    pub(super) duration_sum: f64,
    pub(super) last_duration: f64,
    pub(super) docker_connected: bool,
    /// Pairs the labels ask for that a firewall rule keeps on the bridge, at the last
    /// reconcile.
    pub(super) firewall_refused: u64,
    /// Links a rule that appeared after them took away, since the watch started.
    pub(super) removed_by_firewall: u64,
    /// Exposures made by hand a rule that appeared after them took away, since the watch
    /// started.
    pub(super) exposures_removed_by_firewall: u64,
    /// Egress fast paths (`dxdp egress on`) a rule that appeared after them took away, since
    /// the watch started.
    pub(super) egress_removed_by_firewall: u64,
    /// Pairs the rules refused at the last reconcile, by reason.
    pub(super) refused: BTreeMap<&'static str, usize>,
    /// Containers whose dxdp labels do not parse, at the last reconcile.
    pub(super) malformed: usize,
    /// Containers labeled `dxdp.ingress` whose published ports the watch does not expose, at
    /// the last reconcile.
    pub(super) refused_exposures: usize,
    /// When the last reconcile that succeeded ended, in Unix seconds (0: none yet).
    pub(super) last_success_unix: f64,
}

impl Metrics {
    pub fn reconciled(&self, took: Duration, ok: bool) {
        if let Ok(mut m) = self.0.lock() {
            m.reconciles += 1;
            m.errors += u64::from(!ok);
            m.duration_sum += took.as_secs_f64();
            m.last_duration = took.as_secs_f64();
            if ok {
                m.last_success_unix = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
            }
        }
    }

    /// Links a firewall rule took away (fail closed), the watch's and hand-made ones.
    pub fn removed_by_firewall(&self, links: usize) {
        if let Ok(mut m) = self.0.lock() {
            m.removed_by_firewall += links as u64;
        }
    }

    /// Exposures made by hand a firewall rule took away (fail closed).
    pub fn exposures_removed_by_firewall(&self, exposures: usize) {
        if let Ok(mut m) = self.0.lock() {
            m.exposures_removed_by_firewall += exposures as u64;
        }
    }

    /// Egress fast paths a firewall rule took away (fail closed).
    pub fn egress_removed_by_firewall(&self, containers: usize) {
        if let Ok(mut m) = self.0.lock() {
            m.egress_removed_by_firewall += containers as u64;
        }
    }

    pub fn firewall_refused(&self, pairs: usize) {
        if let Ok(mut m) = self.0.lock() {
            m.firewall_refused = pairs as u64;
        }
    }

    pub fn refused(&self, by_reason: &BTreeMap<&'static str, usize>, malformed: usize) {
        if let Ok(mut m) = self.0.lock() {
            m.refused = by_reason.clone();
            m.malformed = malformed;
        }
    }

    pub fn refused_exposures(&self, containers: usize) {
        if let Ok(mut m) = self.0.lock() {
            m.refused_exposures = containers;
        }
    }

    pub fn docker_connected(&self, connected: bool) {
        if let Ok(mut m) = self.0.lock() {
            m.docker_connected = connected;
        }
    }

    /// What the engine's tests read back of the counter.
    #[cfg(test)]
    pub(crate) fn exposures_removed_by_firewall_total(&self) -> u64 {
        self.snapshot().exposures_removed_by_firewall
    }

    /// What the engine's tests read back of the counter.
    #[cfg(test)]
    pub(crate) fn egress_removed_by_firewall_total(&self) -> u64 {
        self.snapshot().egress_removed_by_firewall
    }

    pub(super) fn snapshot(&self) -> WatchCounters {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}
