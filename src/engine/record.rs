//! What the watch keeps between passes about each kind of fast path, the same for every kind
//! ([`VethsAndRefusals`]): each container's host veths as last seen, so that an event about a
//! container that died or lost its label still reaches the paths it had, and the refusals in
//! force ([`Refusal`]), said once while they hold. A kind's planner fills one for its pass; the
//! one held between passes says what the pass may change ([`Scope`]) and takes it in.
use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
};

use super::Which;
use crate::plan::{Diagnostic, Level};

/// Which paths of a kind a pass looks at and may change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every path (a resync).
    Whole,
    /// Only paths with an end among these host ifindexes: the veths of the containers an
    /// event is about, as they were and as they are now.
    Touching(BTreeSet<u32>),
}

impl Scope {
    pub fn covers(&self, low_ifindex: u32, high_ifindex: u32) -> bool {
        match self {
            Scope::Whole => true,
            Scope::Touching(ifindexes) => {
                ifindexes.contains(&low_ifindex) || ifindexes.contains(&high_ifindex)
            }
        }
    }
}

/// Why a fast path that was asked for is not made, whatever its kind and whoever asked: the
/// container it is about (the asker, for a pair) and one line that says why, with the way out.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Refusal {
    pub container: String,
    pub message: String,
}

impl Refusal {
    /// The refusal as the watch reports it, with the label problems: a warning.
    pub(super) fn diagnostic(&self) -> Diagnostic {
        Diagnostic {
            container: self.container.clone(),
            level: Level::Warn,
            message: self.message.clone(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

/// What a kind's refusals are keyed by: the host veths of the path refused, which a
/// [`Scope`] may cover.
pub(super) trait OnVeths: Ord {
    fn within(&self, scope: &Scope) -> bool;
}

/// A path from the NIC to one container's veth (a published port).
impl OnVeths for u32 {
    fn within(&self, scope: &Scope) -> bool {
        scope.covers(*self, *self)
    }
}

/// A path between two veths (a link), by (low, high) ifindex.
impl OnVeths for (u32, u32) {
    fn within(&self, scope: &Scope) -> bool {
        scope.covers(self.0, self.1)
    }
}

/// Each container's host veths that a kind's paths were planned or refused on, and the
/// refusals by path: what one pass found, or what the passes so far hold.
#[derive(Debug)]
pub(super) struct VethsAndRefusals<K> {
    veths: BTreeMap<String, BTreeSet<u32>>,
    refused: BTreeMap<K, Refusal>,
}

impl<K> Default for VethsAndRefusals<K> {
    fn default() -> Self {
        Self {
            veths: BTreeMap::new(),
            refused: BTreeMap::new(),
        }
    }
}

impl<K: OnVeths> VethsAndRefusals<K> {
    /// The container (by ID) was found on this host veth.
    pub(super) fn saw(&mut self, container: &str, veth: u32) {
        self.veths
            .entry(container.to_owned())
            .or_default()
            .insert(veth);
    }

    pub(super) fn refuse(&mut self, key: K, refusal: Refusal) {
        self.refused.insert(key, refusal);
    }

    pub(super) fn refusal(&self, key: &K) -> Option<&Refusal> {
        self.refused.get(key)
    }

    pub(super) fn refusals(&self) -> impl Iterator<Item = &Refusal> + Clone {
        self.refused.values()
    }

    /// The veths held for these containers.
    pub(super) fn veths_of(&self, ids: &BTreeSet<String>) -> BTreeSet<u32> {
        ids.iter()
            .flat_map(|id| self.veths.get(id).into_iter().flatten().copied())
            .collect()
    }

    /// Whether a veth of one of these containers is held.
    pub(super) fn holds_any(&self, ids: &BTreeSet<String>) -> bool {
        ids.iter().any(|id| self.veths.contains_key(id))
    }

    /// What a pass about `which` that `found` this may change: every path in a whole pass,
    /// else the paths on the veths the event's containers had (as held) and have (as found).
    pub(super) fn scope(&self, found: &Self, which: &Which) -> Scope {
        match which {
            Which::All | Which::LastSeen => Scope::Whole,
            Which::Containers(ids) => {
                let mut veths = self.veths_of(ids);
                veths.extend(found.veths_of(ids));
                Scope::Touching(veths)
            }
        }
    }

    /// Takes in what a pass about `which` found within `scope`: it replaces everything after a
    /// whole pass; after an event's, it replaces what was held about the event's containers
    /// and the refusals within the scope, and adds the veths found of the others.
    pub(super) fn take(&mut self, found: Self, which: &Which, scope: &Scope) {
        match which {
            Which::All | Which::LastSeen => *self = found,
            Which::Containers(ids) => {
                self.refused.retain(|key, _| !key.within(scope));
                self.refused.extend(found.refused);
                for id in ids {
                    self.veths.remove(id);
                }
                for (id, veths) in found.veths {
                    self.veths.entry(id).or_default().extend(veths);
                }
            }
        }
    }

    /// Forgets the containers no longer running.
    pub(super) fn retain_running(&mut self, running: &BTreeSet<String>) {
        self.veths.retain(|id, _| running.contains(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(container: &str) -> Refusal {
        Refusal {
            container: container.to_owned(),
            message: format!("{container} refused"),
        }
    }

    fn ids(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn an_events_pass_is_scoped_to_its_containers_veths_as_held_and_as_found() {
        let mut held = VethsAndRefusals::<u32>::default();
        held.saw("a", 11);
        held.saw("b", 12);
        let mut found = VethsAndRefusals::default();
        found.saw("a", 21);
        found.saw("b", 12);
        let which = Which::Containers(ids(&["a"]));
        let scope = held.scope(&found, &which);
        assert_eq!(scope, Scope::Touching([11, 21].into()));
        assert_eq!(held.scope(&found, &Which::LastSeen), Scope::Whole);
        held.take(found, &which, &scope);
        assert_eq!(
            held.veths_of(&ids(&["a"])),
            [21].into(),
            "a's old veth goes"
        );
        assert_eq!(held.veths_of(&ids(&["b"])), [12].into());
    }

    #[test]
    fn refusals_within_the_scope_are_replaced_and_others_kept_until_a_whole_pass() {
        let mut held = VethsAndRefusals::<(u32, u32)>::default();
        held.refuse((11, 12), refusal("a"));
        held.refuse((13, 14), refusal("c"));
        let which = Which::Containers(ids(&["a"]));
        let scope = Scope::Touching([11].into());
        held.take(VethsAndRefusals::default(), &which, &scope);
        let left: Vec<&str> = held.refusals().map(|r| r.container.as_str()).collect();
        assert_eq!(left, ["c"]);
        let mut found = VethsAndRefusals::default();
        found.refuse((11, 12), refusal("a"));
        held.take(found, &Which::All, &Scope::Whole);
        assert_eq!(held.refusal(&(11, 12)), Some(&refusal("a")));
        assert_eq!(held.refusal(&(13, 14)), None);
    }

    #[test]
    fn containers_no_longer_running_are_forgotten() {
        let mut held = VethsAndRefusals::<u32>::default();
        held.saw("a", 11);
        held.saw("b", 12);
        held.retain_running(&ids(&["b"]));
        assert!(!held.holds_any(&ids(&["a"])));
        assert!(held.holds_any(&ids(&["a", "b"])));
    }
}
