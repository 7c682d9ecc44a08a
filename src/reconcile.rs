//! The pure half of `watch`: given the links the labels call for and the links pinned now,
//! which to remove and which to add.
use std::collections::BTreeMap;

use crate::datapath::{Kind, LinkRecord, Origin};

/// A link the labels call for, identified by the host ifindexes of its two endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub low_ifindex: u32,
    pub high_ifindex: u32,
    pub kind: Kind,
}

impl Wanted {
    pub fn new(x: u32, y: u32, kind: Kind) -> Self {
        Self {
            low_ifindex: x.min(y),
            high_ifindex: x.max(y),
            kind,
        }
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// (low, high) ifindex pairs to remove.
    pub remove: Vec<(u32, u32)>,
    /// Indexes into the wanted slice to install.
    pub add: Vec<usize>,
}

/// Links made by the watch that are no longer wanted (or wanted with another datapath) go;
/// wanted links not pinned yet come. Links made by hand are never removed: the watch leaves
/// them alone, and a wanted link that exists by hand counts as present.
pub fn diff(wanted: &[Wanted], actual: &[LinkRecord]) -> Changes {
    let actual_by_pair: BTreeMap<(u32, u32), &LinkRecord> = actual
        .iter()
        .map(|l| ((l.low_ifindex, l.high_ifindex), l))
        .collect();
    let wanted_by_pair: BTreeMap<(u32, u32), &Wanted> = wanted
        .iter()
        .map(|w| ((w.low_ifindex, w.high_ifindex), w))
        .collect();
    let mut changes = Changes::default();
    for (pair, have) in &actual_by_pair {
        if have.origin != Origin::Watch {
            continue;
        }
        match wanted_by_pair.get(pair) {
            Some(w) if w.kind == have.datapath => {}
            _ => changes.remove.push(*pair),
        }
    }
    for (i, w) in wanted.iter().enumerate() {
        let pair = (w.low_ifindex, w.high_ifindex);
        let present = actual_by_pair
            .get(&pair)
            .is_some_and(|have| have.origin != Origin::Watch || have.datapath == w.kind);
        if !present && !changes.add.iter().any(|&j| wanted[j] == *w) {
            changes.add.push(i);
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(x: u32, y: u32, kind: Kind, origin: Origin) -> LinkRecord {
        LinkRecord {
            low_ifindex: x,
            high_ifindex: y,
            low_name: format!("c{x}"),
            high_name: format!("c{y}"),
            network: "n".into(),
            datapath: kind,
            origin,
            created_unix_secs: 0,
            low_to_high: Default::default(),
            high_to_low: Default::default(),
        }
    }

    #[test]
    fn adds_missing_and_removes_unwanted_watch_links() {
        let wanted = [Wanted::new(2, 1, Kind::Tc), Wanted::new(3, 4, Kind::Tc)];
        let actual = [
            rec(1, 2, Kind::Tc, Origin::Watch),
            rec(5, 6, Kind::Tc, Origin::Watch),
        ];
        let c = diff(&wanted, &actual);
        assert_eq!(c.remove, vec![(5, 6)]);
        assert_eq!(c.add, vec![1]);
    }

    #[test]
    fn leaves_manual_links_alone() {
        let actual = [rec(1, 2, Kind::Xdp, Origin::Manual)];
        assert_eq!(diff(&[], &actual), Changes::default());
        // Wanted with another datapath: the hand-made link stays and counts as present.
        let c = diff(&[Wanted::new(1, 2, Kind::Tc)], &actual);
        assert_eq!(c, Changes::default());
    }

    #[test]
    fn datapath_change_replaces_a_watch_link() {
        let c = diff(
            &[Wanted::new(1, 2, Kind::Xdp)],
            &[rec(1, 2, Kind::Tc, Origin::Watch)],
        );
        assert_eq!(c.remove, vec![(1, 2)]);
        assert_eq!(c.add, vec![0]);
    }

    #[test]
    fn converged_state_changes_nothing() {
        let wanted = [Wanted::new(1, 2, Kind::Tc), Wanted::new(1, 3, Kind::Tc)];
        let actual = [
            rec(1, 2, Kind::Tc, Origin::Watch),
            rec(1, 3, Kind::Tc, Origin::Watch),
        ];
        assert_eq!(diff(&wanted, &actual), Changes::default());
    }

    #[test]
    fn duplicate_wants_are_added_once() {
        let wanted = [Wanted::new(1, 2, Kind::Tc), Wanted::new(2, 1, Kind::Tc)];
        assert_eq!(diff(&wanted, &[]).add, vec![0]);
    }
}
