//! The engine's passes against a fake container engine and a fake host ([`fakes`]): what a pass
//! looks at, what it keeps, and what it does when something fails or changes behind it.
mod fakes;

use std::sync::Arc;

use super::{Engine, Outcome, Which};
use crate::{datapath::ExistingConnections, labels::ENABLE, metrics::Metrics};
pub(crate) use fakes::record;
use fakes::{ACCEPT_ALL, FakeEngine, FakeHost, Shared, World};

const PEERS: &str = "dxdp.peers";
const DATAPATH: &str = "dxdp.datapath";

/// A test's world, the engine over it, and a runtime to drive its passes.
struct Rig {
    shared: Shared,
    engine: Engine<FakeHost>,
    runtime: tokio::runtime::Runtime,
}

impl Rig {
    fn new(world: World) -> Self {
        let shared = Shared::default();
        *shared.world() = world;
        Self {
            engine: Engine::new(FakeHost(shared.clone()), Arc::new(Metrics::default())),
            shared,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
        }
    }

    fn pass(&mut self, which: Which) -> Option<Outcome> {
        let source = FakeEngine(self.shared.clone());
        self.runtime.block_on(self.engine.reconcile(&source, which))
    }

    fn about(&mut self, names: &[&str]) -> Option<Outcome> {
        let ids = names.iter().map(|n| format!("id-{n}")).collect();
        self.pass(Which::Containers(ids))
    }

    fn pinned(&self) -> Vec<String> {
        self.shared.world().pinned()
    }

    /// What the watch's poll of the tasks of other nodes calls for, and that pass if any.
    fn poll(&mut self) -> Option<Which> {
        let source = FakeEngine(self.shared.clone());
        let which = self.runtime.block_on(self.engine.poll_remote(&source))?;
        self.pass(which.clone());
        Some(which)
    }
}

/// a–b and c–d, each pair asking for a tc link.
fn two_pairs() -> World {
    let mut world = World::new();
    let asks = |peer| [(ENABLE, "true"), (PEERS, peer), (DATAPATH, "tc")];
    world.start("a", 11, &asks("b"));
    world.start("b", 12, &[]);
    world.start("c", 13, &asks("d"));
    world.start("d", 14, &[]);
    world
}

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
    rig.pass(Which::Known);
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
    // ...and with one, the rules are read again and every verdict re-evaluated: the covered
    // link goes (fail closed), the other stays.
    rig.shared.world().generation += 1;
    rig.pass(Which::Known);
    assert_eq!(rig.shared.world().rule_reads, 2);
    assert_eq!(rig.pinned(), ["13-14 Watch"]);
    // The rule goes: the link comes back.
    rig.shared.world().rules = ACCEPT_ALL.to_owned();
    rig.shared.world().generation += 1;
    rig.pass(Which::Known);
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
}

#[test]
fn a_rule_known_by_rules_change_only_does_not_ask_the_container_engine() {
    let mut rig = Rig::new(two_pairs());
    rig.pass(Which::All);
    rig.shared.world().inspected.clear();
    rig.pass(Which::Known);
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
    let outcome = rig.pass(Which::Known).map(|o| o.links);
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
fn an_overlay_pair_is_linked_in_its_sandbox_held_to_its_rules_and_forgotten_with_it() {
    let sandbox = Shared::default();
    *sandbox.world() = World::sandbox();
    let mut world = two_pairs();
    world.sandboxes.insert("ovid".to_owned(), sandbox.clone());
    let asks = [(ENABLE, "true"), (PEERS, "f"), (DATAPATH, "tc")];
    world.start_on_overlay("e", 21, &asks, ("ovid", &sandbox));
    world.start_on_overlay("f", 22, &[], ("ovid", &sandbox));
    let mut rig = Rig::new(world);
    let outcome = rig.pass(Which::All).expect("a pass");
    assert_eq!(outcome.links, 3, "two on the bridge, one in the sandbox");
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
    assert_eq!(sandbox.world().pinned(), ["21-22 Watch"]);
    // The sandbox's rules hold its link, and not the bridge's.
    sandbox.world().rules = "*filter\n:FORWARD ACCEPT [0:0]\n\
                             -A FORWARD -s 10.0.0.21/32 -d 10.0.0.22/32 -j DROP\nCOMMIT\n"
        .to_owned();
    sandbox.world().generation += 1;
    rig.pass(Which::All);
    assert!(sandbox.world().pinned().is_empty(), "a rule in the sandbox");
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
    sandbox.world().rules = ACCEPT_ALL.to_owned();
    sandbox.world().generation += 1;
    rig.pass(Which::All);
    assert_eq!(sandbox.world().pinned(), ["21-22 Watch"]);
    // An event about a task that stopped takes its link, there only.
    rig.shared.world().stop("f");
    sandbox.world().interfaces.retain(|i| i.index != 22);
    rig.about(&["f"]);
    assert!(sandbox.world().pinned().is_empty());
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
    // The network goes with its sandbox: the next whole pass forgets its state and goes on.
    rig.shared
        .world()
        .start_on_overlay("f", 23, &[], ("ovid", &sandbox));
    rig.pass(Which::All);
    assert_eq!(sandbox.world().pinned(), ["21-23 Watch"]);
    sandbox.world().gone = true;
    let outcome = rig
        .pass(Which::All)
        .expect("a pass despite the gone sandbox");
    assert_eq!(outcome.links, 2);
    assert_eq!(rig.shared.world().forgotten, ["ovid"]);
}

/// A link made by hand in a sandbox whose network the labels call for no link on: a whole pass
/// still visits the sandbox and holds the link to its rules; an event's pass does not.
#[test]
fn a_hand_made_link_in_a_sandbox_without_labeled_links_is_held_to_its_rules() {
    let sandbox = Shared::default();
    *sandbox.world() = World::sandbox();
    let mut world = World::new();
    world.sandboxes.insert("ovid".to_owned(), sandbox.clone());
    world.start_on_overlay("e", 21, &[], ("ovid", &sandbox));
    world.start_on_overlay("f", 22, &[], ("ovid", &sandbox));
    sandbox.world().link_by_hand(21, 22, false);
    let mut rig = Rig::new(world);
    rig.pass(Which::All);
    assert_eq!(sandbox.world().pinned(), ["21-22 Manual"]);
    sandbox.world().rules = "*filter\n:FORWARD ACCEPT [0:0]\n\
                             -A FORWARD -s 10.0.0.21/32 -d 10.0.0.22/32 -j DROP\nCOMMIT\n"
        .to_owned();
    sandbox.world().generation += 1;
    rig.about(&["e"]);
    assert_eq!(
        sandbox.world().pinned(),
        ["21-22 Manual"],
        "an event's pass"
    );
    rig.pass(Which::Known);
    assert!(sandbox.world().pinned().is_empty(), "a rule in the sandbox");
}

/// A labeled task of this node and its service's task on another node (a worker's view: no
/// service is readable, the far task has this node's task's labels): linked in the sandbox, this
/// node's half, on tc, once gossip wrote the far task on the VXLAN device (the poll tries again
/// until then); its half goes at the next poll once the far task is gone, without any event.
#[test]
fn a_task_of_another_node_is_linked_in_the_sandbox_and_unlinked_when_gossip_drops_it() {
    use crate::docker::OverlayTask;
    let sandbox = Shared::default();
    *sandbox.world() = World::sandbox();
    let mut world = World::new();
    world.sandboxes.insert("ovid".to_owned(), sandbox.clone());
    let task = [
        (ENABLE, "true"),
        ("dxdp.group", "web"),
        ("com.docker.swarm.service.name", "web"),
    ];
    world.start_on_overlay("web.1.a", 21, &task, ("ovid", &sandbox));
    let far: std::net::IpAddr = [10, 0, 0, 99].into();
    world.swarm_tasks = vec![
        OverlayTask {
            name: "web.1.a".into(),
            addr: [10, 0, 0, 21].into(),
            node: None,
            service: "web".into(),
        },
        OverlayTask {
            name: "web.2.b".into(),
            addr: far,
            node: None,
            service: "web".into(),
        },
    ];
    let mut rig = Rig::new(world);
    let far_id = dxdp_common::remote_endpoint_id(&[0x02, 0x42, 10, 0, 0, 99]);
    let half = format!("21-{far_id} Watch");
    // Gossip has not written the far task yet: no link, and the next poll tries again.
    rig.pass(Which::All);
    assert!(sandbox.world().pinned().is_empty());
    sandbox.world().gossip.insert(far);
    assert_eq!(rig.poll(), Some(Which::Known), "a retry");
    assert_eq!(sandbox.world().pinned(), [half]);
    assert_eq!(sandbox.world().links[0].datapath, crate::choice::Kind::Tc);
    assert!(rig.pinned().is_empty(), "nothing on the machine's bridges");
    // Nothing changed: the poll calls for no pass.
    assert_eq!(rig.poll(), None);
    // The far task goes: no event here, the poll sees it and its half goes.
    rig.shared.world().swarm_tasks.retain(|t| t.addr != far);
    sandbox.world().gossip.clear();
    assert_eq!(rig.poll(), Some(Which::Known));
    assert!(sandbox.world().pinned().is_empty());
}

/// `docker service update --label-add` (`--label-rm`) as the watch sees it: a service `update`
/// event on a manager, about the service, after which its tasks' inspects carry the labels (or
/// not). The event's pass is about the service's tasks alone; another service's update calls
/// for none.
#[test]
fn a_service_update_calls_for_a_pass_about_its_tasks_which_follows_its_labels() {
    const SERVICE: &str = "com.docker.swarm.service.id";
    let sandbox = Shared::default();
    *sandbox.world() = World::sandbox();
    let mut world = two_pairs();
    world.sandboxes.insert("ovid".to_owned(), sandbox.clone());
    let task = [(SERVICE, "svc-web")];
    world.start_on_overlay("web1", 21, &task, ("ovid", &sandbox));
    world.start_on_overlay("web2", 22, &task, ("ovid", &sandbox));
    let mut rig = Rig::new(world);
    rig.pass(Which::All);
    assert!(sandbox.world().pinned().is_empty(), "no dxdp label yet");
    let update = |service: &str| crate::docker::Event {
        action: "update".to_owned(),
        container: None,
        network: None,
        service: Some(service.to_owned()),
    };
    let set_labels = |rig: &Rig, labels: &[(&str, &str)]| {
        for c in rig.shared.world().containers.iter_mut() {
            if c.view.labels.get(SERVICE).map(String::as_str) == Some("svc-web") {
                c.view.labels = labels
                    .iter()
                    .chain(&task)
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect();
            }
        }
    };
    // --label-add: the tasks' inspects now carry the service's labels.
    set_labels(&rig, &[(ENABLE, "true"), ("dxdp.group", "web")]);
    assert_eq!(rig.engine.scope_of(&update("svc-other")), None);
    let which = rig.engine.scope_of(&update("svc-web"));
    assert_eq!(
        which,
        Some(Which::Containers(
            ["id-web1".to_owned(), "id-web2".to_owned()].into()
        ))
    );
    rig.shared.world().inspected.clear();
    rig.pass(which.expect("a pass"));
    assert_eq!(rig.shared.world().inspected, ["id-web1", "id-web2"]);
    assert_eq!(sandbox.world().pinned(), ["21-22 Watch"]);
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
    // --label-rm: the link goes at the next update event.
    set_labels(&rig, &[]);
    let which = rig.engine.scope_of(&update("svc-web")).expect("a pass");
    rig.pass(which);
    assert!(sandbox.world().pinned().is_empty());
    assert_eq!(rig.pinned(), ["11-12 Watch", "13-14 Watch"]);
}

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
    rig.pass(Which::Known);
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
    rig.pass(Which::Known);
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
    rig.pass(Which::Known);
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
    rig.pass(Which::Known);
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
