//! The first kind of fast path, links between two containers: given the links the labels call
//! for and the links pinned now, what to remove, install and complete, and doing it through a
//! [`LinkTable`]. The engine's pass feeds it ([`super::tables`] holds the real table); the unit
//! tests feed it a fake table.
//!
//! Rules:
//! - Links made by the watch that are no longer wanted (or wanted with another datapath) go;
//!   wanted links not pinned yet come.
//! - Links made by hand are never removed by this engine: a wanted link that exists by hand
//!   counts as present. (The watch holds them to the firewall rules apart from it.)
//! - A link of the watch that the maps hold without both attachments (a watch killed between
//!   the two), or for endpoints that are no longer what the watch resolves (a container that
//!   took another MAC), is installed again, with its pinned datapath, which completes or
//!   renews it: present is not the same as finished.
//! - One link that cannot be installed (full map, foreign program) does not stop the others;
//!   a removal that fails stops the pass, which the next reconcile retries.
//! - A link of the watch that carries other families than the rules now leave open (a rule
//!   closed IPv6, or went) is updated in place: its counters and attachments stay.
//! - A pass can be scoped to the veths of the containers an event is about ([`Scope`]): it
//!   then changes only links with an end among them, and leaves every other link as it is.
use std::net::IpAddr;

use anyhow::Result;

use super::record::Refusal;
pub use super::record::Scope;
use crate::{
    choice::{Kind, Origin},
    datapath::LinkRecord,
    endpoint::Endpoint,
    family::Families,
    firewall::{self, RulesetCache},
    netlink::Interface,
};

/// Both endpoints of a wanted link, and the name of the network that carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub a: Endpoint,
    pub b: Endpoint,
    pub network: String,
    /// Both containers say `dxdp.firewall=bypass`.
    pub bypass_firewall: bool,
}

/// What the rules leave a pair of endpoints: the families a link between them may carry, and a
/// note on those it may not.
#[derive(Debug)]
pub struct Open {
    pub families: Families,
    pub note: Option<String>,
}

/// The planner of one link, for the watch (each pair the labels call for) and for `dxdp link`
/// (the pair it names): holds `a`–`b` to `rules`, or lets every family ride the link when the
/// rules are bypassed (`None`). A pair whose every family a rule may drop or alter is refused,
/// with the way out `origin`'s asker has (a label, or an option).
pub fn judge(
    rules: Option<&mut RulesetCache>,
    a: &Endpoint,
    b: &Endpoint,
    origin: Origin,
) -> Result<Result<Open, Refusal>> {
    let Some(rules) = rules else {
        return Ok(Ok(Open {
            families: Families::ALL,
            note: None,
        }));
    };
    let way_out = match origin {
        Origin::Watch => "label both containers dxdp.firewall=bypass",
        Origin::Manual => "link with --bypass-firewall",
    };
    Ok(match firewall::judge(rules, a, b, way_out)? {
        Ok(verdict) => Ok(Open {
            families: verdict.open(),
            note: verdict.note(),
        }),
        Err(message) => Err(Refusal {
            container: a.label.clone(),
            message,
        }),
    })
}

/// A link the labels call for, identified by the host ifindexes of its two endpoints; `link` is
/// what the table needs to install it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted<L> {
    pub low_ifindex: u32,
    pub high_ifindex: u32,
    pub kind: Kind,
    /// The families the rules leave open; the others stay on the bridge.
    pub families: Families,
    pub link: L,
}

impl<L> Wanted<L> {
    /// A link of every family; [`Wanted::carrying`] narrows it.
    pub fn new(x: u32, y: u32, kind: Kind, link: L) -> Self {
        Self {
            low_ifindex: x.min(y),
            high_ifindex: x.max(y),
            kind,
            families: Families::ALL,
            link,
        }
    }

    pub fn carrying(self, families: Families) -> Self {
        Self { families, ..self }
    }

    fn pair(&self) -> (u32, u32) {
        (self.low_ifindex, self.high_ifindex)
    }
}

/// One change the engine makes.
#[derive(Debug, PartialEq, Eq)]
pub enum Intent<'w, L> {
    /// Remove the watch's link between these (low, high) ifindexes.
    Remove { low: u32, high: u32 },
    /// Install a wanted link that is not pinned.
    Install(&'w Wanted<L>),
    /// Install again a link of the watch that lacks an attachment or whose pinned endpoints
    /// are not the wanted ones any more, with its pinned datapath.
    Complete(&'w Wanted<L>, Kind),
    /// Make a link of the watch carry the wanted families (install again: only they change).
    Update(&'w Wanted<L>),
}

/// The links as the engine sees them: the pinned state, and how to change it.
pub trait LinkTable {
    /// What an install needs besides the datapath (the resolved endpoints, for the real table).
    type Link;

    fn links(&mut self) -> Result<Vec<LinkRecord>>;
    /// Whether both attachments of a pinned link are in place and its pinned endpoints are
    /// the ones `link` resolved.
    fn complete(&mut self, record: &LinkRecord, link: &Self::Link) -> bool;
    fn remove(&mut self, low_ifindex: u32, high_ifindex: u32) -> Result<()>;
    /// Installs the link carrying `families`, or makes an installed one carry them.
    fn install(&mut self, link: &Self::Link, kind: Kind, families: Families) -> Result<()>;
}

/// The links table as a whole pass of the engine uses it, besides what [`diff`] and [`apply`]
/// need: the state kept beside the links (attachments, each container's recorded addresses)
/// and its upkeep.
pub trait LinkStore: LinkTable<Link = Resolved> + Send {
    /// Removes the state of veths that are gone; returns how many.
    fn collect_garbage(&mut self, host: &[Interface]) -> Result<usize>;
    /// Whether a program of this kind is pinned on the veth: installing a link there attaches
    /// nothing new.
    fn attachment_pinned(&self, kind: Kind, ifindex: u32) -> bool;
    /// Records these endpoints' addresses as the only ones their links carry frames from and
    /// to, where they are managed; returns how many changed.
    fn refresh_sources(&mut self, endpoints: &[&Endpoint]) -> Result<usize>;
    /// The addresses recorded for the container behind a managed veth.
    fn recorded_addresses(&mut self, ifindex: u32) -> Result<Option<Vec<IpAddr>>>;
    /// Makes a pinned link carry only `families`, keeping everything else of it.
    fn set_families(
        &mut self,
        low_ifindex: u32,
        high_ifindex: u32,
        families: Families,
    ) -> Result<()>;
}

/// The changes that take `actual` to `wanted` within `scope`: removals first, then installs,
/// then completions, then updates of families. `complete` tells whether a pinned link is whole and as wanted.
pub fn diff<'w, L: PartialEq>(
    wanted: &'w [Wanted<L>],
    actual: &[LinkRecord],
    scope: &Scope,
    mut complete: impl FnMut(&LinkRecord, &L) -> bool,
) -> Vec<Intent<'w, L>> {
    let actual: Vec<&LinkRecord> = actual
        .iter()
        .filter(|l| scope.covers(l.low_ifindex, l.high_ifindex))
        .collect();
    let pinned = |pair: (u32, u32)| {
        actual
            .iter()
            .copied()
            .find(|l| (l.low_ifindex, l.high_ifindex) == pair)
    };
    let mut removals = Vec::new();
    for have in actual.iter().filter(|l| l.origin == Origin::Watch) {
        let pair = (have.low_ifindex, have.high_ifindex);
        let still_wanted = wanted
            .iter()
            .any(|w| w.pair() == pair && w.kind == have.datapath);
        if !still_wanted && !removals.contains(&pair) {
            removals.push(pair);
        }
    }
    let mut installs: Vec<Intent<'w, L>> = Vec::new();
    let mut completions = Vec::new();
    let mut updates = Vec::new();
    let mut seen: Vec<(u32, u32)> = Vec::new();
    for w in wanted {
        if seen.contains(&w.pair()) || !scope.covers(w.low_ifindex, w.high_ifindex) {
            continue;
        }
        seen.push(w.pair());
        match pinned(w.pair()) {
            Some(have) if have.origin != Origin::Watch => {}
            Some(have) if have.datapath == w.kind => {
                if !complete(have, &w.link) {
                    // Installing again writes the wanted families too.
                    completions.push(Intent::Complete(w, have.datapath));
                } else if have.families != w.families {
                    updates.push(Intent::Update(w));
                }
            }
            _ => installs.push(Intent::Install(w)),
        }
    }
    removals
        .into_iter()
        .map(|(low, high)| Intent::Remove { low, high })
        .chain(installs)
        .chain(completions)
        .chain(updates)
        .collect()
}

/// What one pass did.
#[derive(Debug)]
pub struct LinksApplied<'w, L> {
    /// (low, high) ifindex pairs whose link was removed.
    pub removed: Vec<(u32, u32)>,
    pub installed: Vec<&'w Wanted<L>>,
    pub completed: Vec<&'w Wanted<L>>,
    /// Links of the watch that carry other families now.
    pub updated: Vec<&'w Wanted<L>>,
    /// Links that could not be installed, with why; the next pass tries again.
    pub failed: Vec<(&'w Wanted<L>, anyhow::Error)>,
    /// Links pinned after the pass.
    pub links: usize,
}

/// Takes the table from `actual` (its links, as the pass read them) to `wanted` within
/// `scope`, by [`diff`].
pub fn apply<'w, T: LinkTable>(
    table: &mut T,
    actual: &[LinkRecord],
    wanted: &'w [Wanted<T::Link>],
    scope: &Scope,
) -> Result<LinksApplied<'w, T::Link>>
where
    T::Link: PartialEq,
{
    let intents = diff(wanted, actual, scope, |record, link| {
        table.complete(record, link)
    });
    let mut applied = LinksApplied {
        removed: Vec::new(),
        installed: Vec::new(),
        completed: Vec::new(),
        updated: Vec::new(),
        failed: Vec::new(),
        links: 0,
    };
    for intent in intents {
        match intent {
            Intent::Remove { low, high } => {
                table.remove(low, high)?;
                applied.removed.push((low, high));
            }
            Intent::Install(w) => match table.install(&w.link, w.kind, w.families) {
                Ok(()) => applied.installed.push(w),
                Err(err) => applied.failed.push((w, err)),
            },
            Intent::Complete(w, kind) => match table.install(&w.link, kind, w.families) {
                Ok(()) => applied.completed.push(w),
                Err(err) => applied.failed.push((w, err)),
            },
            Intent::Update(w) => match table.install(&w.link, w.kind, w.families) {
                Ok(()) => applied.updated.push(w),
                Err(err) => applied.failed.push((w, err)),
            },
        }
    }
    // Counted, not read again: reading the links map costs a lookup per link.
    applied.links = actual.len() - applied.removed.len() + applied.installed.len();
    Ok(applied)
}

#[cfg(test)]
mod tests;
