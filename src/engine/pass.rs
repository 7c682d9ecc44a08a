//! The blocking half of a pass: from the links the plan calls for to the pinned tables, on a
//! thread that may enter namespaces and wait for the kernel.
//!
//! What every kind of fast path shares in a pass is [`Shared`] ([`super::shared`]): the host's
//! interfaces, the endpoints found, and the firewall rules, read at most once a pass. Links are
//! the first kind
//! ([`wanted_links`] resolves and judges them, then [`super::links::apply`] takes their table
//! there). A second kind (published ports from the NIC) adds its own planner over the same
//! `Shared` and its own table, in [`run`], so that it is reconciled in the same pass, with the
//! same caches and the same rule: a path a rule covers is refused, or removed if it exists.
//! Each kind's planner fills a [`VethsAndRefusals`] ([`super::record`]); the one kept between
//! passes scopes an event's pass and takes it in, and its refusals are reported with the
//! others.
//! The egress fast paths (`dxdp egress on`, or the `dxdp.egress` label: [`egress_labeled`])
//! are held to the same rules by every whole pass ([`hold_egress`]), whoever made them.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::Result;
use tracing::{debug, info, trace, warn};

use super::{
    Which, egress,
    egress::EgressStore,
    endpoints::EndpointCache,
    host::{EndpointError, Host},
    links::{self, LinkStore, LinkTable, Resolved, Scope, Wanted},
    ports::{self, PortStore},
    record::VethsAndRefusals,
    shared::{Phases, Shared},
};
use crate::{
    choice::Origin,
    datapath::LinkRecord,
    docker::Container,
    endpoint::Endpoint,
    firewall::{self, RulesetCache},
    labels,
    netlink::Interface,
    plan::DesiredLink,
};

/// What the blocking half keeps between passes: moved into its thread and back.
pub(super) struct BetweenPasses<H: Host> {
    pub(super) endpoints: EndpointCache,
    pub(super) rules: RulesetCache,
    pub(super) links: Option<H::Idle>,
    /// The linked containers' veths as last resolved, and the pairs the rules refuse, by (low,
    /// high) ifindex, as of the last pass that covered them.
    pub(super) links_seen: VethsAndRefusals<(u32, u32)>,
    /// The labeled containers' veths whose ports were planned, and the refusals, by veth.
    pub(super) ports_seen: VethsAndRefusals<u32>,
    /// Why each container labeled `dxdp.egress=true` stays on Docker's path, by container id:
    /// logged when it first holds or changes.
    pub(super) egress_refused: BTreeMap<String, String>,
}

impl<H: Host> BetweenPasses<H> {
    pub(super) fn new(host: &H) -> Self {
        Self {
            endpoints: EndpointCache::default(),
            rules: host.rules(),
            links: None,
            links_seen: VethsAndRefusals::default(),
            ports_seen: VethsAndRefusals::default(),
            egress_refused: BTreeMap::new(),
        }
    }
}

/// What the blocking half of one pass did.
pub(super) struct PassApplied {
    /// Links pinned after it.
    pub(super) links: usize,
    /// Containers whose namespace could not be read as held (a restart whose events were
    /// lost): the next resync inspects them again.
    pub(super) unreadable: Vec<String>,
    /// Links a firewall rule took away in this pass, the watch's and hand-made ones.
    pub(super) removed_by_rules: usize,
    /// Exposures made by hand a firewall rule took away in this pass (the watch's own are
    /// refusals, held in [`BetweenPasses::ports_seen`]).
    pub(super) exposures_removed_by_rules: usize,
    /// Egress fast paths (`dxdp egress on`) a firewall rule took away in this pass.
    pub(super) egress_removed_by_rules: usize,
}

/// Takes every kind's table to what `links` call for, within what `which` is about.
pub(super) fn run<H: Host>(
    held: &mut BetweenPasses<H>,
    host: &H,
    containers: &[Container],
    links: &BTreeSet<DesiredLink>,
    which: &Which,
) -> Result<PassApplied> {
    let mut phases = Phases::start();
    let interfaces = host.interfaces()?;
    phases.mark("host interfaces");
    let by_id: HashMap<&str, &Container> =
        containers.iter().map(|c| (c.view.id.as_str(), c)).collect();
    // The veths the event's containers had, before this pass finds them again.
    let before = match which {
        Which::Containers(ids) => held.links_seen.veths_of(ids),
        Which::All | Which::LastSeen => BTreeSet::new(),
    };
    let find = |c: &Container, net: &str, ifs: &[Interface]| host.endpoint_on(c, net, ifs);
    let pairs: Vec<(&Container, &str)> = links
        .iter()
        .flat_map(|l| [(&l.a, &l.network_id), (&l.b, &l.network_id)])
        .filter_map(|(id, net)| Some((*by_id.get(id.as_str())?, net.as_str())))
        .collect();
    held.endpoints.prefetch(&pairs, &interfaces, &find);
    phases.mark("prefetch");
    let mut shared = Shared::new(&interfaces, &mut held.endpoints, &mut held.rules, &find);
    let plan = wanted_links(&mut shared, &by_id, links)?;
    phases.mark("endpoints and firewall");
    let scope = held.links_seen.scope(&plan.seen, which);
    let mut table = host.lock_links(held.links.take(), &interfaces)?;
    phases.mark("lock");
    // Garbage (state of veths that are gone) is collected by every whole pass, and by an
    // event's pass only when one of its containers lost a veth.
    let vanished = before
        .iter()
        .any(|i| !interfaces.iter().any(|h| h.index == *i));
    // An egress fast path's veth is not among the links' veths held: its container's stop or
    // restart is found by its record (left, a restarted labeled container had two records
    // until the next whole pass).
    let egress_vanished = !which.is_whole()
        && table.egress().is_ok_and(|records| {
            records
                .iter()
                .any(|r| !interfaces.iter().any(|h| h.index == r.veth_ifindex))
        });
    if which.is_whole() || vanished || egress_vanished {
        table.collect_garbage(&interfaces)?;
        phases.mark("garbage");
    }
    // One read of the pinned links, after the garbage collection, serves the check of the
    // links made by hand and the diff.
    let mut pinned = table.links();
    // Links made by hand are held to the rules as firmly as the watch's own. Those a rule now
    // covers go first, from the table and from what the diff starts from.
    let mut hand_made_removed = 0;
    if which.is_whole()
        && let Ok(pinned) = &mut pinned
    {
        match hold_hand_made_links(&mut shared, &mut table, pinned) {
            Ok(removed) => hand_made_removed = removed,
            Err(err) => warn!("cannot check the links made by hand against the rules: {err:#}"),
        }
    }
    let expedited = if attaches_new(&table, &plan.wanted, &scope) {
        host.expedite()
    } else {
        None
    };
    let applied = pinned.and_then(|pinned| links::apply(&mut table, &pinned, &plan.wanted, &scope));
    drop(expedited);
    // A container's addresses as this pass read them (IPv6 added later) are the only sources
    // its links redirect: the datapath passes frames from any other to the bridge.
    let resolved: Vec<&Endpoint> = plan
        .wanted
        .iter()
        .filter(|w| scope.covers(w.low_ifindex, w.high_ifindex))
        .flat_map(|w| [&w.link.a, &w.link.b])
        .collect();
    if let Err(err) = table.refresh_sources(&resolved) {
        warn!("cannot update the containers' source addresses: {err:#}");
    }
    let mut removed_exposures = 0;
    // A sandbox's bridge is no NIC's: published ports are the machine's pass's.
    let exposures = host.exposes_ports().then(|| {
        expose_ports(
            &mut held.ports_seen,
            &mut shared,
            host,
            containers,
            which,
            &mut table,
        )
    });
    match exposures {
        Some(Ok(done)) => {
            trace!(?done, "published ports");
            removed_exposures = done.removed_by_rules;
        }
        Some(Err(err)) => warn!("cannot expose the labeled containers' published ports: {err:#}"),
        None => {}
    }
    // The egress fast paths are the machine's too, made by hand or for a label: a whole pass
    // holds them all to the rules.
    let mut removed_egress = 0;
    if host.exposes_ports() && which.is_whole() {
        follow_sysctls(&mut table);
        match hold_egress(&mut shared, host, &mut table) {
            Ok(removed) => removed_egress = removed,
            Err(err) => warn!("cannot check the egress fast paths against the rules: {err:#}"),
        }
    }
    // After the hold: a labeled container a rule now covers is refused, not enabled again.
    if host.exposes_ports()
        && let Err(err) = egress_labeled(
            &mut held.egress_refused,
            &mut shared,
            host,
            containers,
            which,
            &mut table,
        )
    {
        warn!("cannot take the labeled containers' outbound connections to the NIC: {err:#}");
    }
    trace!(
        reads = shared.rule_reads(),
        "firewall rules read in full so far"
    );
    held.links = Some(host.unlock_links(table));
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
        if let Some(r) = plan.seen.refusal(pair) {
            warn!(container = %r.container, "removed a link: {}", r.message);
            removed_by_rules += 1;
        }
    }
    // What this pass saw replaces what was held about the same veths and containers.
    held.links_seen.take(plan.seen, which, &scope);
    Ok(PassApplied {
        links: applied.links,
        unreadable: plan.unreadable,
        removed_by_rules,
        exposures_removed_by_rules: removed_exposures,
        egress_removed_by_rules: removed_egress,
    })
}

/// The second kind: the labeled containers' published ports, planned over the pass's `Shared`
/// and taken to the table within the pass's scope; in a whole pass, exposures made by hand are
/// held to the rules too. The host's NICs are asked only when a container wants its ports
/// exposed; without one, the watch's exposures (if any) go.
fn expose_ports<H: Host>(
    seen: &mut VethsAndRefusals<u32>,
    shared: &mut Shared<'_>,
    host: &H,
    containers: &[Container],
    which: &Which,
    table: &mut H::Links,
) -> Result<ports::PortsApplied> {
    let labeled = containers
        .iter()
        .any(|c| labels::wants_ingress(&c.view.labels));
    let pinned = table.exposed()?;
    let by_hand = which.is_whole()
        && pinned
            .iter()
            .any(|p| p.origin == Origin::Manual && !p.bypasses_firewall);
    let ingress = if labeled || by_hand {
        Some(host.ingress(shared.host, labeled)?)
    } else {
        None
    };
    let plan = match &ingress {
        Some(ingress) if labeled => ports::wanted_ports(shared, containers, ingress)?,
        _ => ports::WantedPorts::default(),
    };
    let covered = match &ingress {
        Some(ingress) if by_hand => ports::covered_by_hand(shared, &pinned, ingress)?,
        _ => Default::default(),
    };
    let scope = seen.scope(&plan.seen, which);
    let done = ports::apply(table, &pinned, &plan, &covered, &scope);
    seen.take(plan.seen, which, &scope);
    done
}

/// Conntrack's timeouts and TCP switches as its sysctls are now, for the egress programs to
/// refresh entries to and judge segments by: one an operator changed after `egress on` is
/// followed within a whole pass (before, a lowered timeout left dead connections' entries
/// living the old, longer one, and a switch was read only when the programs were loaded).
fn follow_sysctls<S: EgressStore>(table: &mut S) {
    match table.follow_egress_sysctls() {
        Ok(true) => info!("conntrack's sysctls changed: the egress fast path follows them"),
        Ok(false) => {}
        Err(err) => warn!("cannot give the egress fast path conntrack's sysctls: {err:#}"),
    }
}

/// Holds the egress fast paths (`dxdp egress on`, or a label's) to the rules, as firmly as
/// hand-made links: one a rule now covers (a DOCKER-USER rule added after it was made, say) is
/// taken away, its connections back on Docker's path, where the rule meets their next packets.
/// Returns how many were taken away. The NICs' addresses are asked only when there is a fast path to hold.
fn hold_egress<H: Host>(shared: &mut Shared<'_>, host: &H, table: &mut H::Links) -> Result<usize> {
    let records = table.egress()?;
    if records.is_empty() {
        return Ok(0);
    }
    let nics: Vec<u32> = records.iter().map(|r| r.nic_ifindex).collect();
    let way_out = host.egress_ways_out(shared.host, &nics)?;
    let covered = egress::covered(&records, shared.host, &way_out, shared.rules()?)?;
    let mut removed = 0;
    for (veth, why) in covered {
        match table.egress_off(veth) {
            Ok(()) => {
                warn!("removed an egress fast path: {why}");
                removed += 1;
            }
            Err(err) => warn!("cannot remove the egress fast path a rule covers ({why}): {err:#}"),
        }
    }
    Ok(removed)
}

/// Takes the outbound connections of the running containers labeled `dxdp.egress=true`, within
/// what `which` is about, to the default route's NIC, as `dxdp egress on` would; a container
/// already enabled (by the watch or by hand) is left as it is. What refuses one (no IPv4
/// endpoint, a rule, a kernel without the kfuncs) is held in `refused` and logged when it first
/// holds or changes. The fast path goes with its container's veth (garbage) or with a rule
/// ([`hold_egress`]). Returns how many were enabled.
fn egress_labeled<H: Host>(
    refused: &mut BTreeMap<String, String>,
    shared: &mut Shared<'_>,
    host: &H,
    containers: &[Container],
    which: &Which,
    table: &mut H::Links,
) -> Result<usize> {
    let in_scope = |c: &&Container| match which {
        Which::Containers(ids) => ids.contains(&c.view.id),
        Which::All | Which::LastSeen => true,
    };
    let labeled: Vec<&Container> = containers
        .iter()
        .filter(|c| c.view.running && labels::wants_egress(&c.view.labels))
        .filter(in_scope)
        .collect();
    refused.retain(|id, _| labeled.iter().any(|c| c.view.id == *id) || !which.is_whole());
    if labeled.is_empty() {
        return Ok(0);
    }
    let enabled: BTreeSet<u32> = table.egress()?.iter().map(|r| r.veth_ifindex).collect();
    let way_out = host.egress_default_way_out(shared.host)?;
    let mut made = 0;
    for c in labeled {
        let endpoints: Vec<_> = c
            .attachments
            .iter()
            .filter(|a| a.bridge.is_some())
            .map(|a| shared.endpoint(c, &a.network.id))
            .collect();
        let host_ifs = shared.host;
        let planned =
            egress::plan_labeled(&c.view.name, endpoints, &way_out, host_ifs, shared.rules()?)?;
        let outcome = match planned {
            Ok(plan) if enabled.contains(&plan.endpoint.host_ifindex) => Ok(false),
            Ok(plan) => table
                .egress_on(&plan)
                .map(|()| true)
                .map_err(|err| format!("container {}: {err:#}", c.view.name)),
            Err(why) => Err(why),
        };
        match outcome {
            Ok(made_now) => {
                refused.remove(&c.view.id);
                if made_now {
                    info!(container = %c.view.name, "outbound connections take the egress fast path");
                    made += 1;
                }
            }
            Err(why) => {
                if refused.get(&c.view.id) != Some(&why) {
                    warn!("dxdp.egress: {why}");
                    refused.insert(c.view.id.clone(), why);
                }
            }
        }
    }
    Ok(made)
}

/// The links a pass wants, resolved and judged.
struct WantedLinks {
    /// Links whose endpoints were found and that no rule refuses.
    wanted: Vec<Wanted<Resolved>>,
    /// Each container's host veths that this pass found, and the pairs a rule refuses.
    seen: VethsAndRefusals<(u32, u32)>,
    /// Containers whose endpoint could not be found.
    unreadable: Vec<String>,
}

/// Resolves each desired link's endpoints and holds the pair to the rules, unless both
/// containers chose to bypass them.
fn wanted_links(
    shared: &mut Shared<'_>,
    by_id: &HashMap<&str, &Container>,
    links: &BTreeSet<DesiredLink>,
) -> Result<WantedLinks> {
    let mut plan = WantedLinks {
        wanted: Vec::new(),
        seen: VethsAndRefusals::default(),
        unreadable: Vec::new(),
    };
    for link in links {
        let (Some(a), Some(b)) = (by_id.get(link.a.as_str()), by_id.get(link.b.as_str())) else {
            continue;
        };
        let net = link.network_id.as_str();
        let (ea, eb) = match (shared.endpoint(a, net), shared.endpoint(b, net)) {
            (Ok(ea), Ok(eb)) => (ea, eb),
            // A container that just stopped or is still starting: the next event catches up.
            // A permission problem will not heal by itself: say so loudly.
            (Err(err @ EndpointError::Denied(_)), _) | (_, Err(err @ EndpointError::Denied(_))) => {
                warn!(a = %a.view.name, b = %b.view.name, "cannot link: {err:#}");
                continue;
            }
            (ra, rb) => {
                for (c, r) in [(a, &ra), (b, &rb)] {
                    if let Err(err) = r {
                        debug!(container = %c.view.name, "not linkable yet: {err:#}");
                        plan.unreadable.push(c.view.id.clone());
                    }
                }
                continue;
            }
        };
        for (c, ep) in [(a, &ea), (b, &eb)] {
            plan.seen.saw(&c.view.id, ep.host_ifindex);
        }
        let (x, y) = (ea.host_ifindex, eb.host_ifindex);
        let bypass = [a, b]
            .iter()
            .all(|c| labels::bypasses_firewall(&c.view.labels));
        let rules = if bypass { None } else { Some(shared.rules()?) };
        let families = match links::judge(rules, &ea, &eb, Origin::Watch)? {
            Ok(open) => {
                if let Some(note) = open.note {
                    trace!(a = %a.view.name, b = %b.view.name, "{note}");
                }
                open.families
            }
            Err(refusal) => {
                plan.seen.refuse((x.min(y), x.max(y)), refusal);
                continue;
            }
        };
        let network = a
            .attachment(&link.network_id)
            .map(|att| att.network.name.clone())
            .unwrap_or_default();
        plan.wanted.push(
            Wanted::new(
                x,
                y,
                link.datapath.resolve(),
                Resolved {
                    a: ea,
                    b: eb,
                    network,
                    bypass_firewall: bypass,
                },
            )
            .carrying(families),
        );
    }
    Ok(plan)
}

/// Holds the links made by hand (without `--bypass-firewall`) to the rules: one a rule now
/// closes a family of carries the others from now on; one left with none is removed, from the
/// table and from `pinned` (its links as this pass read them). Each is logged with the rule;
/// returns how many were removed. The rules are read once a pass, as for the watch's own links.
fn hold_hand_made_links(
    shared: &mut Shared<'_>,
    table: &mut impl LinkStore,
    pinned: &mut Vec<LinkRecord>,
) -> Result<usize> {
    let by_hand: Vec<LinkRecord> = pinned
        .iter()
        .filter(|l| l.origin == Origin::Manual && !l.bypasses_firewall)
        .cloned()
        .collect();
    if by_hand.is_empty() {
        return Ok(0);
    }
    let host = shared.host;
    let covered = firewall::covered(
        shared.rules()?,
        &mut |ifindex| table.recorded_addresses(ifindex),
        host,
        &by_hand,
        "link them again with --bypass-firewall",
    )?;
    let mut removed = 0;
    for c in &covered {
        let pair = (c.link.low_ifindex, c.link.high_ifindex);
        if c.families.is_empty() {
            table.remove(pair.0, pair.1)?;
            pinned.retain(|l| (l.low_ifindex, l.high_ifindex) != pair);
            warn!("removed a link made by hand: {}", c.message);
            removed += 1;
        } else {
            table.set_families(pair.0, pair.1, c.families)?;
            for l in pinned.iter_mut() {
                if (l.low_ifindex, l.high_ifindex) == pair {
                    l.families = c.families;
                }
            }
            warn!("narrowed a link made by hand: {}", c.message);
        }
    }
    Ok(removed)
}

/// Whether this pass will attach a program to a veth that has none pinned: only then is it
/// worth expediting grace periods ([`crate::rcu`]); a pass that attaches nothing leaves the
/// host's switch alone.
fn attaches_new(table: &impl LinkStore, wanted: &[Wanted<Resolved>], scope: &Scope) -> bool {
    wanted
        .iter()
        .filter(|w| scope.covers(w.low_ifindex, w.high_ifindex))
        .flat_map(|w| [(w.kind, w.low_ifindex), (w.kind, w.high_ifindex)])
        .any(|(kind, ifindex)| !table.attachment_pinned(kind, ifindex))
}
