//! The egress fast paths (`dxdp egress on`): what a pass does with them when the rules change.
use super::*;
use crate::datapath::EgressRecord;

/// `web`'s connections out of the fake NIC, as `dxdp egress on web` pins them (veth `veth`).
fn egress_on(world: &mut World, container: &str, veth: u32) {
    world.egress.push(EgressRecord {
        container: container.to_owned(),
        veth_ifindex: veth,
        nic_ifindex: fakes::NIC,
        addr: std::net::Ipv4Addr::new(10, 0, 0, veth as u8),
        created_unix_secs: 0,
        outbound: Default::default(),
        inbound: Default::default(),
        passed_packets: 0,
    });
}

fn held(rig: &Rig) -> Vec<u32> {
    rig.shared
        .world()
        .egress
        .iter()
        .map(|r| r.veth_ifindex)
        .collect()
}

#[test]
fn a_rule_that_comes_after_egress_on_takes_the_fast_path_away_in_the_pass_it_brings() {
    let mut world = World::new();
    world.start("web", 21, &[]);
    world.start("db", 22, &[]);
    egress_on(&mut world, "web", 21);
    egress_on(&mut world, "db", 22);
    // A fast path whose veth went (its container stopped): garbage, not the rules' to judge.
    egress_on(&mut world, "gone", 99);
    let mut rig = Rig::new(world);
    rig.pass(Which::All);
    assert_eq!(held(&rig), [21, 22, 99], "no rule covers them: left alone");

    // web may no longer reach a network: a rule of the kind DOCKER-USER holds.
    {
        let mut world = rig.shared.world();
        world.rules = "*filter\n:FORWARD ACCEPT [0:0]\n\
                       -A FORWARD -s 10.0.0.21/32 -d 203.0.113.0/24 -j DROP\nCOMMIT\n"
            .to_owned();
        world.generation += 1;
    }
    // An event's pass does not judge them; the whole pass a rule change brings does.
    rig.about(&["web"]);
    assert_eq!(held(&rig), [21, 22, 99]);
    rig.pass(Which::LastSeen);
    assert_eq!(
        held(&rig),
        [22, 99],
        "fail closed: web's fast path goes, db's stays"
    );
    assert_eq!(rig.shared.world().egress_off, [21]);
    assert_eq!(rig.engine.stats.egress_removed_by_firewall_total(), 1);

    // Rules that cannot be read change nothing (the next pass that reads them decides).
    egress_on(&mut rig.shared.world(), "web", 21);
    {
        let mut world = rig.shared.world();
        world.rules_unreadable = true;
        world.generation += 1;
    }
    rig.pass(Which::All);
    assert_eq!(held(&rig), [22, 99, 21]);
    assert_eq!(rig.shared.world().egress_off, [21]);
}

/// Conntrack's timeouts (a sysctl an operator changes at any time) reach the egress programs
/// on every whole pass, and on no event's pass.
#[test]
fn whole_passes_give_the_egress_programs_conntracks_timeouts() {
    let mut world = World::new();
    world.start("web", 21, &[]);
    let mut rig = Rig::new(world);
    rig.pass(Which::All);
    assert_eq!(rig.shared.world().timeouts_followed, 1);
    egress_on(&mut rig.shared.world(), "web", 21);
    rig.about(&["web"]);
    assert_eq!(rig.shared.world().timeouts_followed, 1, "an event's pass");
    rig.pass(Which::LastSeen);
    rig.pass(Which::All);
    assert_eq!(rig.shared.world().timeouts_followed, 3);
}

const EGRESS: &str = "dxdp.egress";

#[test]
fn a_container_labeled_dxdp_egress_is_enabled_held_to_the_rules_and_enabled_again() {
    let mut world = World::new();
    world.start("web", 21, &[(EGRESS, "true")]);
    world.start("db", 22, &[]);
    world.start("typo", 23, &[(EGRESS, "yes")]);
    let mut rig = Rig::new(world);
    rig.pass(Which::All);
    assert_eq!(
        held(&rig),
        [21],
        "web only: db is not labeled, typo's label is invalid"
    );
    {
        let world = rig.shared.world();
        let web = &world.egress[0];
        assert_eq!(
            (web.container.as_str(), web.nic_ifindex),
            ("web", fakes::NIC)
        );
        assert_eq!(web.addr, std::net::Ipv4Addr::new(10, 0, 0, 21));
    }
    // Enabled already: a pass leaves it (no second egress on).
    rig.pass(Which::All);
    assert_eq!(held(&rig), [21]);

    // A container started later: the event's pass enables it.
    rig.shared.world().start("api", 24, &[(EGRESS, "true")]);
    rig.about(&["api"]);
    assert_eq!(held(&rig), [21, 24]);

    // A rule on web's way out: taken away and refused, not enabled again in the same pass.
    {
        let mut world = rig.shared.world();
        world.rules = "*filter\n:FORWARD ACCEPT [0:0]\n\
                       -A FORWARD -s 10.0.0.21/32 -d 203.0.113.0/24 -j DROP\nCOMMIT\n"
            .to_owned();
        world.generation += 1;
    }
    rig.pass(Which::LastSeen);
    assert_eq!(held(&rig), [24]);
    assert_eq!(rig.shared.world().egress_off, [21]);
    rig.pass(Which::All);
    assert_eq!(held(&rig), [24], "refused while the rule holds");
    // The rule goes: the next whole pass enables web again.
    {
        let mut world = rig.shared.world();
        world.rules = ACCEPT_ALL.to_owned();
        world.generation += 1;
    }
    rig.pass(Which::LastSeen);
    assert_eq!(held(&rig), [24, 21]);
}
