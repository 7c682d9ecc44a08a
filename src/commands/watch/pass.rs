//! One reconcile pass of the watch, and what it keeps between passes so that the next one
//! redoes only what may have changed.
//!
//! - A resync ([`Which::All`]) is whole: every running container, every link. It lists the
//!   containers (inspecting only new or changed ones), and walks every link the labels call
//!   for.
//! - An event ([`Which::Containers`]) is scoped to the containers it names: they alone are
//!   inspected, the plan is made over every container held (labels of the others are known),
//!   and only links with an end on one of their veths, as held before and as found now, are
//!   installed or removed ([`reconcile::Scope`]). A burst of events makes one pass.
//! - Between passes: the inventory of containers and networks, each container incarnation's
//!   endpoints (netns inspection), the firewall ruleset (while the nf_tables generation stays),
//!   and the loaded eBPF object (unlocked, so that other `dxdp` commands run meanwhile).
//!
//! What a cache could get wrong, the checks it is held to rule out: an endpoint is used only
//! while its host veth still has the same ifindex, name and bridge, for the same container
//! process and Docker endpoint; the ruleset only while nf_tables reports the same generation
//! and no legacy table is loaded; the loaded object only while the pinned maps are the same
//! files. Every tenth resync forgets the inventory and the endpoints and starts afresh.
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use anyhow::{Context, Result};
use tracing::{debug, info, trace, warn};

use crate::{
    datapath::{Capacity, Datapath, LinkRecord, Origin, Unlocked},
    docker::{Container, Docker, EndpointCache, Inventory},
    firewall::{self, RulesetCache},
    labels,
    metrics::Metrics,
    netlink::{self, Interface, MacAddr},
    netns::NetnsPath,
    plan::{self, DesiredLink, Diagnostic, Level},
    rcu,
    reconcile::{
        self, Scope, Wanted,
        live::{Live, Resolved},
    },
};

/// What a pass is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Which {
    /// Every container: the start, a resync, a reconnect, an event about no container.
    All,
    /// The containers events named, by ID.
    Containers(BTreeSet<String>),
    /// Every link, over the containers as last seen, without asking the engine: the
    /// firewall changed, nothing about the containers did.
    Known,
}

impl Which {
    /// A pass about the container an event names, or a whole one if it names none.
    pub(super) fn about(container: Option<&str>) -> Self {
        match container {
            Some(id) => Which::Containers(BTreeSet::from([id.to_owned()])),
            None => Which::All,
        }
    }

    /// Widens this pass to cover another event's too.
    pub(super) fn merge(&mut self, other: Which) {
        match (&mut *self, other) {
            (Which::Containers(ids), Which::Containers(more)) => ids.extend(more),
            (Which::Known, Which::Known) => {}
            _ => *self = Which::All,
        }
    }

    /// Whether the pass walks every link (and so may collect garbage and replace what is held
    /// about every veth).
    fn is_whole(&self) -> bool {
        matches!(self, Which::All | Which::Known)
    }
}

/// What the blocking half of a pass keeps: moved into the blocking thread and back.
#[derive(Default)]
struct Held {
    endpoints: EndpointCache,
    rules: RulesetCache,
    datapath: Option<Unlocked>,
    /// Each container's host veths as last resolved, so that an event about a container that
    /// died still reaches its links.
    veths: HashMap<String, BTreeSet<u32>>,
    /// Firewall refusals by (low, high) ifindex pair, as of the last pass that covered them.
    refused: BTreeMap<(u32, u32), Diagnostic>,
}

pub(super) struct Watcher {
    pub(super) pin_dir: PathBuf,
    pub(super) capacity: Capacity,
    /// `--expedite-rcu`: expedited grace periods while a pass attaches ([`rcu`]).
    expedite_rcu: bool,
    pub(super) stats: Arc<Metrics>,
    inventory: Inventory,
    held: Option<Held>,
    reported: BTreeSet<Diagnostic>,
    resyncs: u64,
}

pub(super) struct Outcome {
    pub(super) containers: usize,
    pub(super) links: usize,
}

/// Every how many resyncs the caches are dropped: a safety net under the safety net.
const FRESH_EVERY: u64 = 10;

impl Watcher {
    pub(super) fn new(
        pin_dir: PathBuf,
        capacity: Capacity,
        expedite_rcu: bool,
        stats: Arc<Metrics>,
    ) -> Self {
        Self {
            pin_dir,
            capacity,
            expedite_rcu,
            stats,
            inventory: Inventory::default(),
            held: Some(Held::default()),
            reported: BTreeSet::new(),
            resyncs: 0,
        }
    }

    /// A periodic resync: whole, and every [`FRESH_EVERY`]th one from scratch.
    pub(super) async fn resync(&mut self, docker: &Docker) -> Option<Outcome> {
        self.resyncs += 1;
        if self.resyncs.is_multiple_of(FRESH_EVERY) {
            self.inventory.clear();
            if let Some(held) = &mut self.held {
                held.endpoints.clear();
            }
        }
        self.reconcile(docker, Which::All).await
    }

    /// Drops what is held about a removed network.
    pub(super) fn network_removed(&mut self, id: &str) {
        self.inventory.forget_network(id);
    }

    /// The containers a bridge's learning `mac` behind `port` says changed, among those whose
    /// endpoints are held (containers the labels link): the one behind `port` if that is not
    /// its MAC, and the one whose MAC it was if that is behind another port (taken over).
    pub(super) fn moved(&self, port: u32, mac: MacAddr) -> BTreeSet<String> {
        let Some(held) = &self.held else {
            return BTreeSet::new();
        };
        held.endpoints
            .iter()
            .filter(|(_, ep)| (ep.host_ifindex == port) != (ep.mac == mac))
            .map(|(id, _)| id.to_owned())
            .collect()
    }

    /// Forgets every endpoint found, so that the next pass reads every namespace again.
    pub(super) fn forget_all_endpoints(&mut self) {
        if let Some(held) = &mut self.held {
            held.endpoints.clear();
        }
    }

    /// Forgets the endpoints found for these containers, so that the next pass about them
    /// reads their namespaces again.
    pub(super) fn forget_endpoints(&mut self, ids: &BTreeSet<String>) {
        if let Some(held) = &mut self.held {
            held.endpoints.retain(|id| !ids.contains(id));
        }
    }

    /// Returns what the pass found, or `None` if it failed; a failure is logged.
    pub(super) async fn reconcile(&mut self, docker: &Docker, which: Which) -> Option<Outcome> {
        let started = Instant::now();
        let result = self.pass(docker, &which).await;
        self.stats.reconciled(started.elapsed(), result.is_ok());
        match result {
            Ok(outcome) => {
                debug!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    scope = ?which,
                    containers = outcome.containers,
                    links = outcome.links,
                    inspections = self.inventory.inspections(),
                    "reconciled"
                );
                Some(outcome)
            }
            Err(err) => {
                warn!("reconcile failed: {err:#}");
                None
            }
        }
    }

    async fn pass(&mut self, docker: &Docker, which: &Which) -> Result<Outcome> {
        let started = Instant::now();
        match which {
            Which::All => self.inventory.refresh_all(docker).await?,
            Which::Containers(ids) => self.inventory.refresh(docker, ids).await?,
            Which::Known => {}
        }
        trace!(
            elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
            "asked the engine"
        );
        let containers: Vec<Container> = self.inventory.containers().cloned().collect();
        let views: Vec<_> = containers.iter().map(|c| c.view.clone()).collect();
        let plan = plan::plan(&views);
        let links: BTreeSet<DesiredLink> = match which {
            Which::All | Which::Known => plan.links,
            Which::Containers(ids) => plan
                .links
                .into_iter()
                .filter(|l| ids.contains(&l.a) || ids.contains(&l.b))
                .collect(),
        };
        let mut held = self.held.take().unwrap_or_default();
        let (pin_dir, capacity, which_now) = (self.pin_dir.clone(), self.capacity, which.clone());
        let expedite_rcu = self.expedite_rcu;
        let (held, applied) = tokio::task::spawn_blocking(move || {
            let applied = apply(
                &mut held,
                &pin_dir,
                capacity,
                expedite_rcu,
                &containers,
                &links,
                &which_now,
            );
            if applied.is_err() {
                // Whatever failed may have been the loaded object: load it again next time.
                held.datapath = None;
            }
            (held, applied)
        })
        .await
        .context("reconcile task panicked")?;
        let running: BTreeSet<String> = self
            .inventory
            .containers()
            .map(|c| c.view.id.clone())
            .collect();
        self.held = Some(held);
        let applied = applied?;
        for id in &applied.unreadable {
            self.inventory.distrust(id);
        }
        self.stats.removed_by_firewall(applied.removed_by_rules);
        let held = self.held.as_mut().expect("just put back");
        held.veths.retain(|id, _| running.contains(id));
        held.endpoints.retain(|id| running.contains(id));
        // Label problems and firewall refusals are logged together, each once while it holds.
        let mut diagnostics = plan.diagnostics;
        diagnostics.extend(held.refused.values().cloned());
        report_new(&diagnostics, &mut self.reported);
        self.stats.firewall_refused(held.refused.len());
        self.stats.refused(&plan.refused, plan.malformed);
        give_back_freed_memory();
        Ok(Outcome {
            containers: running.len(),
            links: applied.links,
        })
    }
}

/// Logs each diagnostic once while it holds, so a resync does not repeat them every time.
fn report_new(diagnostics: &[Diagnostic], reported: &mut BTreeSet<Diagnostic>) {
    let current: BTreeSet<Diagnostic> = diagnostics.iter().cloned().collect();
    for d in current.difference(reported) {
        match d.level {
            Level::Warn => warn!(container = %d.container, "{}", d.message),
            Level::Info => info!(container = %d.container, "{}", d.message),
        }
    }
    *reported = current;
}

/// What the blocking half of one pass did.
struct Applied {
    /// Links pinned after it.
    links: usize,
    /// Containers whose namespace could not be read as held (a restart whose events were
    /// lost): the next resync inspects them again.
    unreadable: Vec<String>,
    /// Links a firewall rule took away in this pass, the watch's and hand-made ones.
    removed_by_rules: usize,
}

fn apply(
    held: &mut Held,
    pin_dir: &Path,
    capacity: Capacity,
    expedite_rcu: bool,
    containers: &[Container],
    links: &BTreeSet<DesiredLink>,
    which: &Which,
) -> Result<Applied> {
    let mut phases = Phases::start();
    let host = netlink::interfaces(&NetnsPath::host())?;
    phases.mark("host interfaces");
    let by_id: HashMap<&str, &Container> =
        containers.iter().map(|c| (c.view.id.as_str(), c)).collect();
    // The veths the event's containers had, before this pass finds them again.
    let mut before = BTreeSet::new();
    if let Which::Containers(ids) = which {
        for id in ids {
            before.extend(held.veths.get(id).into_iter().flatten().copied());
        }
    }
    let pairs: Vec<(&Container, &str)> = links
        .iter()
        .flat_map(|l| [(&l.a, &l.network_id), (&l.b, &l.network_id)])
        .filter_map(|(id, net)| Some((*by_id.get(id.as_str())?, net.as_str())))
        .collect();
    held.endpoints.prefetch(&pairs, &host);
    phases.mark("prefetch");
    let mut refused = BTreeMap::new();
    let mut rules_read = false;
    let mut unreadable = Vec::new();
    let mut now: HashMap<&str, BTreeSet<u32>> = HashMap::new();
    let mut wanted = Vec::new();
    for link in links {
        let (Some(a), Some(b)) = (by_id.get(link.a.as_str()), by_id.get(link.b.as_str())) else {
            continue;
        };
        let net = link.network_id.as_str();
        let (ea, eb) = match (
            held.endpoints.get(a, net, &host),
            held.endpoints.get(b, net, &host),
        ) {
            (Ok(ea), Ok(eb)) => (ea, eb),
            // A container that just stopped or is still starting: the next event catches up.
            // A permission problem will not heal by itself: say so loudly.
            (Err(err), _) | (_, Err(err)) if permission_denied(&err) => {
                warn!(a = %a.view.name, b = %b.view.name, "cannot link: {err:#}");
                continue;
            }
            (ra, rb) => {
                for (c, r) in [(a, &ra), (b, &rb)] {
                    if let Err(err) = r {
                        debug!(container = %c.view.name, "not linkable yet: {err:#}");
                        unreadable.push(c.view.id.clone());
                    }
                }
                continue;
            }
        };
        for (c, ep) in [(a, &ea), (b, &eb)] {
            now.entry(c.view.id.as_str())
                .or_default()
                .insert(ep.host_ifindex);
        }
        let (x, y) = (ea.host_ifindex, eb.host_ifindex);
        let pair = (x.min(y), x.max(y));
        let bypass = [a, b]
            .iter()
            .all(|c| labels::bypasses_firewall(&c.view.labels));
        if !bypass {
            // Brought up to date once a pass, when a pair needs it: read again only when the
            // generation moved. A ruleset that cannot be read fails the pass, which then
            // changes nothing.
            if !rules_read {
                held.rules
                    .refresh()
                    .context("cannot read the host's firewall rules")?;
                rules_read = true;
            }
            let blockers = held.rules.between(&ea, &eb)?;
            if !blockers.is_empty() {
                refused.insert(
                    pair,
                    Diagnostic {
                        container: a.view.name.clone(),
                        level: Level::Warn,
                        message: firewall::refusal(
                            &a.view.name,
                            &b.view.name,
                            &ea.bridge_name,
                            &blockers,
                            "label both containers dxdp.firewall=bypass",
                        ),
                    },
                );
                continue;
            }
        }
        let network = a
            .attachment(&link.network_id)
            .map(|att| att.network.name.clone())
            .unwrap_or_default();
        wanted.push(Wanted::new(
            x,
            y,
            link.datapath.resolve(),
            Resolved {
                a: ea,
                b: eb,
                network,
                bypass_firewall: bypass,
            },
        ));
    }
    phases.mark("endpoints and firewall");
    trace!(
        reads = held.rules.reads(),
        "firewall rules read in full so far"
    );
    let scope = match which {
        Which::All | Which::Known => Scope::Whole,
        Which::Containers(ids) => {
            let mut veths = before.clone();
            for id in ids {
                veths.extend(now.get(id.as_str()).into_iter().flatten().copied());
            }
            Scope::Touching(veths)
        }
    };
    let mut datapath = match held.datapath.take() {
        Some(unlocked) => unlocked.lock(capacity)?,
        None => Datapath::open(pin_dir, capacity)?,
    };
    // Garbage (state of veths that are gone) is collected by every resync, and by an event's
    // pass only when one of its containers lost a veth.
    let vanished = before.iter().any(|i| !host.iter().any(|h| h.index == *i));
    phases.mark("lock");
    if which.is_whole() || vanished {
        datapath.collect_garbage(&host)?;
        phases.mark("garbage");
    }
    let mut table = Live {
        datapath,
        host: &host,
    };
    let switch = rcu::Switch::host();
    let expedited = if expedite_rcu {
        expedite(&switch, &table.datapath, &wanted, &scope)
    } else {
        None
    };
    let applied = reconcile::apply(&mut table, &wanted, &scope);
    drop(expedited);
    // A container's addresses as this pass read them (IPv6 added later) are the only sources
    // its links redirect: the datapath passes frames from any other to the bridge.
    let resolved = wanted
        .iter()
        .filter(|w| scope.covers(w.low_ifindex, w.high_ifindex))
        .flat_map(|w| [&w.link.a, &w.link.b]);
    if let Err(err) = table.datapath.refresh_sources(resolved) {
        warn!("cannot update the containers' source addresses: {err:#}");
    }
    // Links made by hand are held to the rules as firmly as the watch's own.
    let mut hand_made_removed = 0;
    if which.is_whole() {
        match hold_hand_made_links(&mut held.rules, &mut rules_read, &mut table.datapath, &host) {
            Ok(removed) => hand_made_removed = removed,
            Err(err) => warn!("cannot check the links made by hand against the rules: {err:#}"),
        }
    }
    held.datapath = Some(table.datapath.unlock());
    phases.mark("apply");
    phases.log();
    let applied = applied?;
    for w in &applied.completed {
        warn!(
            a = %w.link.a.label,
            b = %w.link.b.label,
            "link lacked an attachment or an endpoint changed (MAC, namespace); installed it again"
        );
    }
    for (w, err) in &applied.failed {
        let Resolved { a, b, network, .. } = &w.link;
        warn!(a = %a.label, b = %b.label, network = %network, "cannot link: {err:#}");
    }
    // Fail closed: a rule that appeared after the link was made takes the link away.
    let mut removed_by_rules = hand_made_removed;
    for pair in &applied.removed {
        if let Some(d) = refused.get(pair) {
            warn!(container = %d.container, "removed a link: {}", d.message);
            removed_by_rules += 1;
        }
    }
    // What this pass saw replaces what was held about the same veths and containers.
    match which {
        Which::All | Which::Known => {
            held.refused = refused;
            held.veths = now
                .into_iter()
                .map(|(id, veths)| (id.to_owned(), veths))
                .collect();
        }
        Which::Containers(ids) => {
            held.refused.retain(|&(x, y), _| !scope.covers(x, y));
            held.refused.extend(refused);
            for id in ids {
                held.veths.remove(id);
            }
            for (id, veths) in now {
                held.veths.entry(id.to_owned()).or_default().extend(veths);
            }
        }
    }
    Ok(Applied {
        links: applied.links.saturating_sub(hand_made_removed),
        unreadable,
        removed_by_rules,
    })
}

/// Removes the links made by hand (without `--bypass-firewall`) that a rule now covers, each
/// logged with the rule; returns how many. The rules are read once a pass, as for the watch's
/// own links.
fn hold_hand_made_links(
    rules: &mut RulesetCache,
    rules_read: &mut bool,
    datapath: &mut Datapath,
    host: &[Interface],
) -> Result<usize> {
    let by_hand: Vec<LinkRecord> = datapath
        .links()?
        .into_iter()
        .filter(|l| l.origin == Origin::Manual && !l.bypasses_firewall)
        .collect();
    if by_hand.is_empty() {
        return Ok(0);
    }
    if !*rules_read {
        rules
            .refresh()
            .context("cannot read the host's firewall rules")?;
        *rules_read = true;
    }
    let covered = firewall::covered(
        rules,
        datapath,
        host,
        &by_hand,
        "link them again with --bypass-firewall",
    )?;
    let pairs: Vec<(u32, u32)> = covered
        .iter()
        .map(|c| (c.link.low_ifindex, c.link.high_ifindex))
        .collect();
    datapath.remove_links(&pairs)?;
    for c in &covered {
        warn!("removed a link made by hand: {}", c.message);
    }
    Ok(covered.len())
}

/// Expedited grace periods for this pass if it will attach a program to a veth that has none
/// pinned ([`rcu`]); a pass that attaches nothing leaves the host's switch alone. Not being able
/// to turn it on slows the pass down, and is logged, but does not stop it.
fn expedite<'s>(
    switch: &'s rcu::Switch,
    datapath: &Datapath,
    wanted: &[Wanted<Resolved>],
    scope: &Scope,
) -> Option<rcu::Expedited<'s>> {
    let veths: BTreeSet<u32> = wanted
        .iter()
        .filter(|w| scope.covers(w.low_ifindex, w.high_ifindex))
        .flat_map(|w| [(w.kind, w.low_ifindex), (w.kind, w.high_ifindex)])
        .filter(|&(kind, ifindex)| !datapath.attachment_pinned(kind, ifindex))
        .map(|(_, ifindex)| ifindex)
        .collect();
    if veths.is_empty() {
        return None;
    }
    match switch.expedite() {
        Ok(expedited) => {
            debug!(
                veths = veths.len(),
                ours = expedited.is_some(),
                "expedited RCU grace periods for the attachments"
            );
            expedited
        }
        Err(err) => {
            warn!("--expedite-rcu: {err:#}; attaching at the kernel's normal pace");
            None
        }
    }
}

/// Hands the heap pages a pass freed back to the kernel. glibc keeps them for reuse, in an
/// arena per thread that ever allocated (the runtime's workers, the blocking pool, the threads
/// that enter namespaces), so a long-running watch would otherwise sit on its high-water mark.
fn give_back_freed_memory() {
    // SAFETY: malloc_trim only releases free memory; it is safe to call at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How long each step of a pass took, logged at trace level (`DXDP_LOG=dxdp=trace`).
struct Phases {
    last: Instant,
    took: Vec<(&'static str, u128)>,
}

impl Phases {
    fn start() -> Self {
        Self {
            last: Instant::now(),
            took: Vec::new(),
        }
    }

    fn mark(&mut self, phase: &'static str) {
        let now = Instant::now();
        self.took.push((phase, (now - self.last).as_micros()));
        self.last = now;
    }

    fn log(&self) {
        let steps: Vec<String> = self
            .took
            .iter()
            .map(|(phase, us)| format!("{phase} {:.1} ms", *us as f64 / 1000.0))
            .collect();
        trace!(steps = %steps.join(", "), "reconcile steps");
    }
}

fn permission_denied(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_about_every_container_it_names_or_everything() {
        let mut which = Which::about(Some("a"));
        which.merge(Which::about(Some("b")));
        assert_eq!(
            which,
            Which::Containers(BTreeSet::from(["a".to_owned(), "b".to_owned()]))
        );
        which.merge(Which::about(None));
        assert_eq!(which, Which::All);
        which.merge(Which::about(Some("c")));
        assert_eq!(which, Which::All);
    }
}
