//! Links between containers of one node: what a pass installs, keeps and removes, and what it
//! does when an install, the rules or a namespace fails it.
use super::*;

#[test]
fn a_whole_pass_installs_every_link_the_labels_call_for() {
    let mut rig = Rig::new(two_pairs());
    let outcome = rig.pass(Which::All);
    assert_eq!(
        outcome,
        Some(Outcome {
            containers: 4,
            links: 2
        })
    );
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
}

#[test]
fn an_event_about_one_container_inspects_it_alone_and_touches_only_its_links() {
    let mut rig = Rig::new(two_pairs());
    rig.pass(Which::All);
    // a-b lost behind the engine's back; an event about `a` puts it back and leaves c-d,
    // which the links planned for `a` alone do not include, alone.
    rig.shared.world().links.retain(|l| l.low_ifindex != 11);
    rig.about(&["a"]);
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
    // Both lost; an event about `a` comes.
    rig.shared.world().links.clear();
    rig.shared.world().inspected.clear();
    rig.about(&["a"]);
    assert_eq!(rig.shared.world().inspected, ["id-a"]);
    assert_eq!(rig.pinned(), ["11-12 Watch"], "c-d is not a's business");
    // The next resync puts back what the event's pass left alone.
    rig.pass(Which::All);
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
}

#[test]
fn an_event_about_a_container_that_stopped_removes_its_links() {
    let mut rig = Rig::new(two_pairs());
    rig.pass(Which::All);
    rig.shared.world().stop("b");
    rig.about(&["b"]);
    assert_eq!(rig.pinned(), ["13-14 Watch"]);
}

#[test]
fn a_resync_heals_a_lost_event() {
    let mut world = two_pairs();
    world.stop("d");
    let mut rig = Rig::new(world);
    rig.pass(Which::All);
    assert_eq!(rig.pinned(), ["11-12 Watch"]);
    // d starts, and its event is lost: a pass about another container does not see it...
    rig.shared.world().start("d", 15, &[]);
    rig.about(&["a"]);
    assert_eq!(rig.pinned(), ["11-12 Watch"]);
    // ...the resync, which lists every container, does.
    rig.pass(Which::All);
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-15 Watch"]);
}

#[test]
fn a_failed_install_is_retried_by_the_next_pass() {
    let mut world = two_pairs();
    world.failing_installs = 1;
    let mut rig = Rig::new(world);
    let first = rig
        .pass(Which::All)
        .expect("one failed link does not fail the pass");
    assert_eq!(first.links, 1);
    assert_eq!(rig.pinned().len(), 1);
    let second = rig.pass(Which::All).expect("a pass");
    assert_eq!(second.links, 2);
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
}

#[test]
fn a_held_endpoint_is_found_again_when_its_veth_check_fails() {
    let mut rig = Rig::new(two_pairs());
    rig.pass(Which::All);
    rig.pass(Which::All);
    let lookups = |rig: &Rig, name: &str| rig.shared.world().endpoint_lookups[name];
    assert_eq!(
        lookups(&rig, "b"),
        1,
        "the second pass uses the held endpoint"
    );
    // b's veth comes back under another ifindex, Docker's endpoint unchanged (no event).
    rig.shared.world().replug("b", 22);
    rig.pass(Which::All);
    assert_eq!(
        lookups(&rig, "b"),
        2,
        "a veth that is not the one held is looked up"
    );
    assert_eq!(lookups(&rig, "a"), 1, "a's held endpoint still checks out");
    assert_eq!(rig.pinned(), ["11-22 Watch", "13-14 Watch"]);
}

#[test]
fn the_rules_are_read_again_only_when_their_generation_moves() {
    let mut rig = Rig::new(two_pairs());
    rig.pass(Which::All);
    rig.pass(Which::All);
    assert_eq!(rig.shared.world().rule_reads, 1);
    // A DROP between a and b: without a new generation the cached verdict stands (which is
    // why the generation is the check)...
    let drop_a_to_b = "*filter\n:FORWARD ACCEPT [0:0]\n\
                       -A FORWARD -s 10.0.0.11/32 -d 10.0.0.12/32 -j DROP\nCOMMIT\n";
    rig.shared.world().rules = drop_a_to_b.to_owned();
    rig.pass(Which::LastSeen);
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
    // ...and with one, the rules are read again and every verdict re-evaluated: the covered
    // link goes (fail closed), the other stays.
    rig.shared.world().generation += 1;
    rig.pass(Which::LastSeen);
    assert_eq!(rig.shared.world().rule_reads, 2);
    assert_eq!(rig.pinned(), ["13-14 Watch"]);
    // The rule goes: the link comes back.
    rig.shared.world().rules = ACCEPT_ALL.to_owned();
    rig.shared.world().generation += 1;
    rig.pass(Which::LastSeen);
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
}

#[test]
fn a_rule_known_by_rules_change_only_does_not_ask_the_container_engine() {
    let mut rig = Rig::new(two_pairs());
    rig.pass(Which::All);
    rig.shared.world().inspected.clear();
    rig.pass(Which::LastSeen);
    assert!(rig.shared.world().inspected.is_empty());
}

#[test]
fn a_whole_pass_removes_a_hand_made_link_a_rule_covers_unless_it_bypasses_the_firewall() {
    let mut world = World::new();
    for (name, ifindex) in [("x", 21), ("y", 22), ("p", 23), ("q", 24)] {
        world.start(name, ifindex, &[]);
    }
    world.link_by_hand(21, 22, false);
    world.link_by_hand(23, 24, true);
    world.rules =
        "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -d 10.0.0.0/24 -j DROP\nCOMMIT\n".to_owned();
    let mut rig = Rig::new(world);
    // An event's pass is not about hand-made links.
    rig.about(&["x"]);
    assert_eq!(rig.pinned(), ["21-22 Manual", "23-24 Manual"]);
    rig.shared.world().link_reads = 0;
    let outcome = rig.pass(Which::LastSeen).map(|o| o.links);
    assert_eq!(rig.pinned(), ["23-24 Manual"]);
    assert_eq!(outcome, Some(1), "the link taken away is not counted");
    assert_eq!(
        rig.shared.world().link_reads,
        1,
        "one read serves the hand-made links' check and the diff"
    );
}

#[test]
fn a_failed_pass_changes_nothing_and_the_next_one_recovers() {
    let mut rig = Rig::new(two_pairs());
    rig.pass(Which::All);
    // Rules that cannot be read fail the pass before any change.
    rig.shared.world().rules_unreadable = true;
    rig.shared.world().generation += 1;
    rig.shared.world().links.retain(|l| l.low_ifindex != 13);
    assert_eq!(rig.pass(Which::All), None);
    assert_eq!(rig.pinned(), ["11-12 Watch"]);
    rig.shared.world().rules_unreadable = false;
    assert!(rig.pass(Which::All).is_some());
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
}

#[test]
fn a_namespace_it_may_not_enter_is_no_reason_to_inspect_the_container_again() {
    let mut world = two_pairs();
    world.denied.insert("a".to_owned());
    let mut rig = Rig::new(world);
    rig.pass(Which::All);
    assert_eq!(rig.pinned(), ["13-14 Watch"]);
    // Denied will not heal by itself: the next resync does not inspect `a` again...
    rig.shared.world().inspected.clear();
    rig.pass(Which::All);
    assert!(rig.shared.world().inspected.is_empty());
    // ...where a veth not found yet (a restart whose events were lost) does.
    rig.shared.world().denied.clear();
    rig.shared.world().interfaces.retain(|i| i.index != 14);
    rig.pass(Which::All);
    rig.shared.world().inspected.clear();
    rig.pass(Which::All);
    assert_eq!(rig.shared.world().inspected, ["id-d"]);
}
