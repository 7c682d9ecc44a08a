//! Links' diff and apply against a fake table: what it removes, installs and completes, and what it leaves.
use std::collections::BTreeSet;

use anyhow::{Result, bail};

use super::*;

/// A pinned link between these ifindexes, in either order.
fn rec(x: u32, y: u32, kind: Kind, origin: Origin) -> LinkRecord {
    crate::engine::tests::record(x, y, kind, origin)
}

fn want(x: u32, y: u32, kind: Kind) -> Wanted<(u32, u32)> {
    Wanted::new(x, y, kind, (x.min(y), x.max(y)))
}

/// Pinned links, which of them lack an attachment, and pairs whose install fails.
#[derive(Default)]
struct Fake {
    links: Vec<LinkRecord>,
    half_made: BTreeSet<(u32, u32)>,
    refuse: BTreeSet<(u32, u32)>,
    calls: Vec<String>,
}

impl LinkTable for Fake {
    type Link = (u32, u32);

    fn links(&mut self) -> Result<Vec<LinkRecord>> {
        Ok(self.links.clone())
    }

    fn complete(&mut self, r: &LinkRecord, _: &(u32, u32)) -> bool {
        !self.half_made.contains(&(r.low_ifindex, r.high_ifindex))
    }

    fn remove(&mut self, low: u32, high: u32) -> Result<()> {
        self.calls.push(format!("remove {low}-{high}"));
        self.links
            .retain(|l| (l.low_ifindex, l.high_ifindex) != (low, high));
        Ok(())
    }

    fn install(&mut self, &(low, high): &(u32, u32), kind: Kind, families: Families) -> Result<()> {
        let only = if families == Families::ALL {
            String::new()
        } else {
            format!(" {families}")
        };
        self.calls
            .push(format!("install {low}-{high} {kind}{only}"));
        if self.refuse.contains(&(low, high)) {
            bail!("map full");
        }
        self.half_made.remove(&(low, high));
        self.links
            .retain(|l| (l.low_ifindex, l.high_ifindex) != (low, high) || l.datapath != kind);
        if !self
            .links
            .iter()
            .any(|l| (l.low_ifindex, l.high_ifindex) == (low, high))
        {
            self.links.push(LinkRecord {
                families,
                ..rec(low, high, kind, Origin::Watch)
            });
        }
        Ok(())
    }
}

#[test]
fn adds_missing_and_removes_unwanted_watch_links() {
    let wanted = [want(2, 1, Kind::Tc), want(3, 4, Kind::Tc)];
    let actual = [
        rec(1, 2, Kind::Tc, Origin::Watch),
        rec(5, 6, Kind::Tc, Origin::Watch),
    ];
    assert_eq!(
        diff(&wanted, &actual, &Scope::Whole, |_, _| true),
        [
            Intent::Remove { low: 5, high: 6 },
            Intent::Install(&wanted[1])
        ]
    );
}

#[test]
fn leaves_manual_links_alone() {
    let actual = [rec(1, 2, Kind::Xdp, Origin::Manual)];
    let none: [Wanted<(u32, u32)>; 0] = [];
    assert_eq!(diff(&none, &actual, &Scope::Whole, |_, _| true), []);
    // Wanted with another datapath: the hand-made link stays and counts as present, even when
    // it lacks an attachment (that is for whoever made it to fix).
    assert_eq!(
        diff(&[want(1, 2, Kind::Tc)], &actual, &Scope::Whole, |_, _| {
            false
        }),
        []
    );
}

#[test]
fn datapath_change_replaces_a_watch_link() {
    let wanted = [want(1, 2, Kind::Xdp)];
    assert_eq!(
        diff(
            &wanted,
            &[rec(1, 2, Kind::Tc, Origin::Watch)],
            &Scope::Whole,
            |_, _| true
        ),
        [
            Intent::Remove { low: 1, high: 2 },
            Intent::Install(&wanted[0])
        ]
    );
}

#[test]
fn converged_state_changes_nothing() {
    let wanted = [want(1, 2, Kind::Tc), want(1, 3, Kind::Tc)];
    let actual = [
        rec(1, 2, Kind::Tc, Origin::Watch),
        rec(1, 3, Kind::Tc, Origin::Watch),
    ];
    assert_eq!(diff(&wanted, &actual, &Scope::Whole, |_, _| true), []);
}

#[test]
fn duplicate_wants_are_added_once() {
    let wanted = [want(1, 2, Kind::Tc), want(2, 1, Kind::Tc)];
    assert_eq!(
        diff(&wanted, &[], &Scope::Whole, |_, _| true),
        [Intent::Install(&wanted[0])]
    );
}

#[test]
fn a_half_made_watch_link_is_completed_with_its_pinned_datapath() {
    let wanted = [want(1, 2, Kind::Xdp)];
    let actual = [rec(1, 2, Kind::Xdp, Origin::Watch)];
    assert_eq!(
        diff(&wanted, &actual, &Scope::Whole, |_, _| false),
        [Intent::Complete(&wanted[0], Kind::Xdp)]
    );
}

#[test]
fn apply_removes_before_installing_and_one_failure_does_not_stop_the_others() {
    let mut table = Fake {
        links: vec![
            rec(7, 8, Kind::Tc, Origin::Watch),
            rec(1, 2, Kind::Tc, Origin::Watch),
            rec(9, 10, Kind::Xdp, Origin::Manual),
        ],
        half_made: BTreeSet::from([(1, 2)]),
        refuse: BTreeSet::from([(3, 4)]),
        ..Fake::default()
    };
    let wanted = [
        want(1, 2, Kind::Tc),
        want(3, 4, Kind::Tc),
        want(5, 6, Kind::Xdp),
    ];
    let actual = table.links().unwrap();
    let applied = apply(&mut table, &actual, &wanted, &Scope::Whole).unwrap();
    assert_eq!(
        table.calls,
        [
            "remove 7-8",
            "install 3-4 tc",
            "install 5-6 xdp",
            "install 1-2 tc"
        ]
    );
    assert_eq!(applied.removed, [(7, 8)]);
    assert_eq!(applied.installed, [&wanted[2]]);
    assert_eq!(applied.completed, [&wanted[0]]);
    assert_eq!(applied.failed.len(), 1);
    assert_eq!(applied.failed[0].0, &wanted[1]);
    // The hand-made link survived; 1-2 completed, 5-6 new.
    assert_eq!(applied.links, 3);
    assert!(table.half_made.is_empty());

    // A second pass retries only what failed.
    table.calls.clear();
    table.refuse.clear();
    let actual = table.links().unwrap();
    let again = apply(&mut table, &actual, &wanted, &Scope::Whole).unwrap();
    assert_eq!(table.calls, ["install 3-4 tc"]);
    assert_eq!(again.links, 4);
}

/// An event about the container behind veths 3 and 4: links elsewhere are neither removed
/// (even unwanted ones, left to the resync) nor installed.
#[test]
fn a_scoped_pass_changes_only_links_touching_its_veths() {
    let scope = Scope::Touching(BTreeSet::from([3, 4]));
    let wanted = [want(1, 2, Kind::Tc), want(3, 5, Kind::Tc)];
    let actual = [
        rec(4, 6, Kind::Tc, Origin::Watch),
        rec(7, 8, Kind::Tc, Origin::Watch),
    ];
    assert_eq!(
        diff(&wanted, &actual, &scope, |_, _| true),
        [
            Intent::Remove { low: 4, high: 6 },
            Intent::Install(&wanted[1]),
        ]
    );
}

#[test]
fn a_scoped_pass_completes_and_keeps_hand_made_links_like_a_whole_one() {
    let scope = Scope::Touching(BTreeSet::from([1]));
    let wanted = [want(1, 2, Kind::Tc)];
    let half_made = [rec(1, 2, Kind::Tc, Origin::Watch)];
    assert_eq!(
        diff(&wanted, &half_made, &scope, |_, _| false),
        [Intent::Complete(&wanted[0], Kind::Tc)]
    );
    let by_hand = [rec(1, 9, Kind::Xdp, Origin::Manual)];
    assert_eq!(diff::<(u32, u32)>(&[], &by_hand, &scope, |_, _| true), []);
}

#[test]
fn a_scoped_apply_then_a_whole_one_reach_the_same_table() {
    let mut table = Fake {
        links: vec![
            rec(1, 2, Kind::Tc, Origin::Watch),
            rec(5, 6, Kind::Tc, Origin::Watch),
        ],
        ..Fake::default()
    };
    let wanted = [
        want(1, 3, Kind::Tc),
        want(5, 6, Kind::Tc),
        want(7, 8, Kind::Tc),
    ];
    let actual = table.links().unwrap();
    let scoped = apply(
        &mut table,
        &actual,
        &wanted,
        &Scope::Touching(BTreeSet::from([3])),
    )
    .unwrap();
    assert_eq!(table.calls, ["install 1-3 tc"]);
    assert_eq!(scoped.links, 3);
    let actual = table.links().unwrap();
    let whole = apply(&mut table, &actual, &wanted, &Scope::Whole).unwrap();
    assert_eq!(whole.removed, [(1, 2)]);
    assert_eq!(table.calls[1..], ["remove 1-2", "install 7-8 tc"]);
    assert_eq!(whole.links, 3);
}

/// A rule that closes IPv6 under a link of the watch (or a rule that goes) changes the families
/// it carries in place: an update, not a removal and a new install that would zero its
/// counters. A hand-made link is left to the check of links made by hand.
#[test]
fn a_watch_link_whose_families_the_rules_change_is_updated_in_place() {
    let wanted = [
        want(1, 2, Kind::Tc).carrying(Families::IPV4),
        want(3, 4, Kind::Tc),
        want(5, 6, Kind::Tc).carrying(Families::IPV4),
    ];
    let mut table = Fake {
        links: vec![
            rec(1, 2, Kind::Tc, Origin::Watch),
            LinkRecord {
                families: Families::IPV6,
                ..rec(3, 4, Kind::Tc, Origin::Watch)
            },
            rec(5, 6, Kind::Tc, Origin::Manual),
        ],
        ..Fake::default()
    };
    let actual = table.links.clone();
    assert_eq!(
        diff(&wanted, &actual, &Scope::Whole, |_, _| true),
        [Intent::Update(&wanted[0]), Intent::Update(&wanted[1])]
    );
    let applied = apply(&mut table, &actual, &wanted, &Scope::Whole).unwrap();
    assert_eq!(applied.updated.len(), 2);
    assert!(applied.removed.is_empty() && applied.installed.is_empty());
    assert_eq!(table.calls, ["install 1-2 tc IPv4", "install 3-4 tc"]);
    let families: Vec<Families> = table.links().unwrap().iter().map(|l| l.families).collect();
    assert!(families.contains(&Families::IPV4) && families.contains(&Families::ALL));
    // Once carried as wanted, nothing is left to do.
    let now = table.links().unwrap();
    assert_eq!(diff(&wanted, &now, &Scope::Whole, |_, _| true), []);
}
