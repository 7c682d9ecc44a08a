//! What every kind of fast path shares in one pass ([`Shared`]): the host's interfaces as read
//! at its start, the endpoints found (held between passes), and the firewall rules, read at most
//! once a pass and only when something needs a verdict; and the clock of the pass's steps
//! ([`Phases`]). Each kind's planner takes `Shared`; the pass ([`super::pass`]) makes it, so
//! the arrows run one way: the pass to the kinds, both to this.
use anyhow::{Context, Result};
use tracing::trace;

use super::endpoints::{EndpointCache, EndpointError, Find};
use crate::{docker::Container, endpoint::Endpoint, firewall::RulesetCache, netlink::Interface};

/// What the kinds of fast path share in one pass.
pub(super) struct Shared<'p> {
    pub(super) host: &'p [Interface],
    endpoints: &'p mut EndpointCache,
    rules: &'p mut RulesetCache,
    rules_read: bool,
    find: &'p Find<'p>,
}

impl<'p> Shared<'p> {
    /// The start of a pass: the host's interfaces as read now, the caches held between passes,
    /// and the rules not yet brought up to date.
    pub(super) fn new(
        host: &'p [Interface],
        endpoints: &'p mut EndpointCache,
        rules: &'p mut RulesetCache,
        find: &'p Find<'p>,
    ) -> Self {
        Self {
            host,
            endpoints,
            rules,
            rules_read: false,
            find,
        }
    }

    /// The endpoint of `container` on `network_id`: held, or found now.
    pub(super) fn endpoint(
        &mut self,
        container: &Container,
        network_id: &str,
    ) -> Result<Endpoint, EndpointError> {
        self.endpoints
            .get(container, network_id, self.host, self.find)
    }

    /// The rules, brought up to date once a pass, when something needs them: read again only
    /// when the generation moved. Rules that cannot be read fail the pass, which then changes
    /// nothing.
    pub(super) fn rules(&mut self) -> Result<&mut RulesetCache> {
        if !self.rules_read {
            self.rules
                .refresh()
                .context("cannot read the host's firewall rules")?;
            self.rules_read = true;
        }
        Ok(self.rules)
    }

    /// How many times the rules were read in full, this pass and those before.
    pub(super) fn rule_reads(&self) -> u64 {
        self.rules.reads()
    }
}

/// How long each step of a pass took, logged at trace level (`DXDP_LOG=dxdp=trace`).
pub(super) struct Phases {
    last: std::time::Instant,
    took: Vec<(&'static str, u128)>,
}

impl Phases {
    pub(super) fn start() -> Self {
        Self {
            last: std::time::Instant::now(),
            took: Vec::new(),
        }
    }

    pub(super) fn mark(&mut self, phase: &'static str) {
        let now = std::time::Instant::now();
        self.took.push((phase, (now - self.last).as_micros()));
        self.last = now;
    }

    pub(super) fn log(&self) {
        let steps: Vec<String> = self
            .took
            .iter()
            .map(|(phase, us)| format!("{phase} {:.1} ms", *us as f64 / 1000.0))
            .collect();
        trace!(steps = %steps.join(", "), "reconcile steps");
    }
}
