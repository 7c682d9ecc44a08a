//! Links on Swarm overlay networks: pairs in a sandbox, tasks of other nodes, service labels.
use super::*;

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
    rig.pass(Which::LastSeen);
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
    assert_eq!(rig.poll(), Some(Which::LastSeen), "a retry");
    assert_eq!(sandbox.world().pinned(), [half]);
    assert_eq!(sandbox.world().links[0].datapath, crate::choice::Kind::Tc);
    assert!(rig.pinned().is_empty(), "nothing on the machine's bridges");
    // Nothing changed: the poll calls for no pass.
    assert_eq!(rig.poll(), None);
    // The far task goes: no event here, the poll sees it and its half goes.
    rig.shared.world().swarm_tasks.retain(|t| t.addr != far);
    sandbox.world().gossip.clear();
    assert_eq!(rig.poll(), Some(Which::LastSeen));
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
