//! Published ports from the NIC: what a pass exposes, keeps and takes away, and its refusals.
use super::*;

const INGRESS: &str = "dxdp.ingress";
const FIREWALL: &str = "dxdp.firewall";

/// Docker's DNAT of host port 8080 to `container`:80, and a FORWARD chain that `extra` adds to.
fn published_rules(container: &str, extra: &str) -> String {
    format!(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:DOCKER - [0:0]\n\
         -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER\n\
         -A DOCKER ! -i br-test -p tcp -m tcp --dport 8080 -j DNAT --to-destination {container}:80\n\
         COMMIT\n*filter\n:FORWARD ACCEPT [0:0]\n{extra}COMMIT\n"
    )
}

#[test]
fn a_labeled_containers_published_ports_are_exposed_and_follow_it() {
    let mut world = World::new();
    // The rules are another test's: here, the walk is skipped on purpose.
    let asks = [(INGRESS, "true"), (FIREWALL, "bypass")];
    world.start("web", 21, &asks);
    world.publish("web", 8080);
    // Publishes too, without the label: never exposed.
    world.start("plain", 22, &[]);
    world.publish("plain", 8081);
    let mut rig = Rig::new(world);
    rig.pass(Which::All);
    assert_eq!(
        rig.shared.world().exposures(),
        ["21:8080->10.0.0.21:80 Watch"]
    );
    // A restart: a new veth and address; the event's pass follows it.
    {
        let mut world = rig.shared.world();
        world.stop("web");
        world.start("web", 23, &asks);
        world.publish("web", 8080);
    }
    rig.about(&["web"]);
    assert_eq!(
        rig.shared.world().exposures(),
        ["23:8080->10.0.0.23:80 Watch"]
    );
    // Stopped: its exposure goes with the event; no rule took it, so its connections drain.
    rig.shared.world().stop("web");
    rig.about(&["web"]);
    assert!(rig.shared.world().exposures().is_empty());
    assert_eq!(
        rig.shared.world().unexposed.last(),
        Some(&(23, ExistingConnections::Drain))
    );
}

#[test]
fn a_rule_on_the_port_keeps_it_unexposed_unless_the_container_bypasses_the_firewall() {
    let mut world = World::new();
    world.start("web", 21, &[(INGRESS, "true")]);
    world.publish("web", 8080);
    let drop_some = "-A FORWARD -s 198.51.100.0/24 -j DROP\n";
    world.rules = published_rules("10.0.0.21", drop_some);
    let mut rig = Rig::new(world);
    rig.pass(Which::All);
    assert!(rig.shared.world().exposures().is_empty());
    let refused_now = |rig: &Rig| {
        rig.engine
            .held
            .as_ref()
            .map(|h| h.ports_seen.refusals().count())
    };
    assert_eq!(refused_now(&rig), Some(1), "the metrics count the refusal");
    // The rule goes (a new generation): the next pass exposes.
    {
        let mut world = rig.shared.world();
        world.rules = published_rules("10.0.0.21", "");
        world.generation += 1;
    }
    rig.pass(Which::LastSeen);
    assert_eq!(
        rig.shared.world().exposures(),
        ["21:8080->10.0.0.21:80 Watch"]
    );
    assert_eq!(refused_now(&rig), Some(0));
    // It comes back: the exposure goes, as a link would, and its connections with it, so that
    // their replies meet the rule.
    {
        let mut world = rig.shared.world();
        world.rules = published_rules("10.0.0.21", drop_some);
        world.generation += 1;
    }
    rig.pass(Which::LastSeen);
    assert!(rig.shared.world().exposures().is_empty());
    assert_eq!(
        rig.shared.world().unexposed,
        [(21, ExistingConnections::End)]
    );
    // Labeled to bypass the rules: exposed despite the rule.
    {
        let mut world = rig.shared.world();
        world.stop("web");
        world.start("web", 24, &[(INGRESS, "true"), (FIREWALL, "bypass")]);
        world.publish("web", 8080);
    }
    rig.pass(Which::All);
    assert_eq!(
        rig.shared.world().exposures(),
        ["24:8080->10.0.0.24:80 Watch"]
    );
}

/// `web` (veth 21, port 8080) exposed by hand, as `dxdp expose` pins it.
fn exposed_by_hand(world: &mut World, bypass_firewall: bool) {
    world.exposed.push(crate::datapath::ExposedPort {
        container: "web".to_owned(),
        veth_ifindex: 21,
        nic_ifindex: fakes::NIC,
        host_addr: std::net::IpAddr::from(fakes::NIC_ADDR),
        protocol: "tcp",
        host_port: 8080,
        container_addr: std::net::IpAddr::from([10, 0, 0, 21]),
        container_port: 80,
        origin: crate::choice::Origin::Manual,
        bypasses_firewall: bypass_firewall,
        created_unix_secs: 0,
        inbound: Default::default(),
        outbound: Default::default(),
        passed_packets: 0,
        refused_packets: 0,
    });
}

#[test]
fn a_rule_that_comes_after_an_exposure_by_hand_takes_it_away_unless_it_bypasses_the_rules() {
    let mut world = World::new();
    world.start("web", 21, &[]);
    world.publish("web", 8080);
    world.rules = published_rules("10.0.0.21", "");
    exposed_by_hand(&mut world, false);
    let mut rig = Rig::new(world);
    rig.pass(Which::All);
    assert_eq!(
        rig.shared.world().exposures(),
        ["21:8080->10.0.0.21:80 Manual"],
        "no rule covers it: the watch leaves the operator's exposure alone"
    );
    let drop_some = "-A FORWARD -s 198.51.100.0/24 -j DROP\n";
    {
        let mut world = rig.shared.world();
        world.rules = published_rules("10.0.0.21", drop_some);
        world.generation += 1;
    }
    // An event's pass does not judge hand-made exposures; the whole pass a rule change brings does.
    rig.about(&["web"]);
    assert_eq!(rig.shared.world().exposures().len(), 1);
    rig.pass(Which::LastSeen);
    assert!(
        rig.shared.world().exposures().is_empty(),
        "fail closed: {:?}",
        rig.shared.world().exposures()
    );
    assert_eq!(
        rig.shared.world().unexposed,
        [(21, ExistingConnections::End)],
        "its connections end with it"
    );
    let removed = |rig: &Rig| rig.engine.stats.exposures_removed_by_firewall_total();
    assert_eq!(removed(&rig), 1);
    // Made with --bypass-firewall: the operator said so, it stays.
    exposed_by_hand(&mut rig.shared.world(), true);
    rig.pass(Which::LastSeen);
    assert_eq!(
        rig.shared.world().exposures(),
        ["21:8080->10.0.0.21:80 Manual"]
    );
    assert_eq!(removed(&rig), 1);
}

/// web1 (veth 21, port 8080) and web2 (veth 22, port 8081), each labeled to be exposed, and
/// to bypass the rules (their walk is another test's).
fn two_exposed() -> World {
    let mut world = World::new();
    let asks = [(INGRESS, "true"), (FIREWALL, "bypass")];
    world.start("web1", 21, &asks);
    world.publish("web1", 8080);
    world.start("web2", 22, &asks);
    world.publish("web2", 8081);
    world
}

#[test]
fn an_event_about_one_container_touches_only_its_exposure_and_a_resync_heals_the_rest() {
    let mut rig = Rig::new(two_exposed());
    rig.pass(Which::All);
    let both = ["21:8080->10.0.0.21:80 Watch", "22:8081->10.0.0.22:80 Watch"];
    assert_eq!(rig.shared.world().exposures(), both);
    // Both lost behind the engine's back; an event about web1 puts back its own alone.
    rig.shared.world().exposed.clear();
    rig.shared.world().inspected.clear();
    rig.about(&["web1"]);
    assert_eq!(rig.shared.world().inspected, ["id-web1"]);
    assert_eq!(
        rig.shared.world().exposures(),
        ["21:8080->10.0.0.21:80 Watch"],
        "web2 is not web1's business"
    );
    // The next resync puts back what the event's pass left alone.
    rig.pass(Which::All);
    assert_eq!(rig.shared.world().exposures(), both);
    // An event about web2, stopped, takes its exposure and leaves web1's.
    rig.shared.world().stop("web2");
    rig.about(&["web2"]);
    assert_eq!(
        rig.shared.world().exposures(),
        ["21:8080->10.0.0.21:80 Watch"]
    );
}

/// Conntrack's TCP switches (sysctls an operator turns at any time) reach the published ports'
/// programs in every pass that finds ports exposed and exposes none (an exposure gives them
/// itself), and in none while nothing is exposed.
#[test]
fn passes_with_exposed_ports_give_their_programs_conntracks_switches() {
    let mut rig = Rig::new(two_exposed());
    rig.shared.world().stop("web1");
    rig.shared.world().stop("web2");
    rig.pass(Which::All);
    assert_eq!(rig.shared.world().switches_followed, 0, "nothing exposed");
    {
        let mut world = rig.shared.world();
        let asks = [(INGRESS, "true"), (FIREWALL, "bypass")];
        world.start("web1", 21, &asks);
        world.publish("web1", 8080);
    }
    rig.pass(Which::All);
    assert_eq!(rig.shared.world().exposures().len(), 1);
    assert_eq!(
        rig.shared.world().switches_followed,
        0,
        "exposed in the pass"
    );
    rig.pass(Which::All);
    rig.about(&["web1"]);
    assert_eq!(rig.shared.world().switches_followed, 2);
}

#[test]
fn a_failed_exposure_is_retried_by_the_next_pass() {
    let mut world = two_exposed();
    world.failing_exposures = 1;
    let mut rig = Rig::new(world);
    assert!(
        rig.pass(Which::All).is_some(),
        "one failed exposure does not fail the pass"
    );
    assert_eq!(rig.shared.world().exposures().len(), 1);
    rig.pass(Which::All);
    assert_eq!(
        rig.shared.world().exposures(),
        ["21:8080->10.0.0.21:80 Watch", "22:8081->10.0.0.22:80 Watch"]
    );
}

/// `web` (veth 21) labeled to be exposed and held to the rules, publishing port 8080, which
/// the rules DNAT to it; `extra` adds to their FORWARD chain.
fn web_held_to_the_rules(extra: &str) -> World {
    let mut world = World::new();
    world.start("web", 21, &[(INGRESS, "true")]);
    world.publish("web", 8080);
    world.rules = published_rules("10.0.0.21", extra);
    world
}

#[test]
fn rules_that_cannot_be_read_change_no_exposure_and_the_next_pass_recovers() {
    let mut rig = Rig::new(web_held_to_the_rules(""));
    rig.pass(Which::All);
    assert_eq!(rig.shared.world().exposures().len(), 1);
    // The rules cannot be read, and the exposure was lost meanwhile: nothing is judged, so
    // nothing is exposed (nor taken away) until they can be.
    {
        let mut world = rig.shared.world();
        world.rules_unreadable = true;
        world.generation += 1;
        world.exposed.clear();
    }
    rig.pass(Which::All);
    assert!(rig.shared.world().exposures().is_empty());
    rig.shared.world().rules_unreadable = false;
    rig.pass(Which::All);
    assert_eq!(
        rig.shared.world().exposures(),
        ["21:8080->10.0.0.21:80 Watch"]
    );
    assert_eq!(
        rig.shared.world().rule_reads,
        2,
        "read once a pass when its generation moved, and not again"
    );
}

#[test]
fn a_refusal_is_held_until_a_pass_about_its_container_or_a_whole_one_finds_it_gone() {
    // web is held to the rules, and one covers its port; other bypasses them.
    let mut world = web_held_to_the_rules("-A FORWARD -s 198.51.100.0/24 -j DROP\n");
    world.start("other", 22, &[(INGRESS, "true"), (FIREWALL, "bypass")]);
    world.publish("other", 8081);
    let mut rig = Rig::new(world);
    let refused = |rig: &Rig| {
        let held = rig.engine.held.as_ref().expect("held between passes");
        held.ports_seen
            .refusals()
            .map(|r| r.container.clone())
            .collect::<Vec<_>>()
    };
    rig.pass(Which::All);
    assert_eq!(refused(&rig), ["web"]);
    assert_eq!(
        rig.shared.world().exposures(),
        ["22:8081->10.0.0.22:80 Watch"]
    );
    // A pass about another container keeps it.
    rig.about(&["other"]);
    assert_eq!(refused(&rig), ["web"]);
    // web stops: the pass about it finds no refusal there any more.
    rig.shared.world().stop("web");
    rig.about(&["web"]);
    assert!(refused(&rig).is_empty());
}
