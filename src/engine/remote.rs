//! Tasks of other nodes as the planner's views (issue 35, the watch across nodes): a labeled
//! task of this node and its labeled peer running on another node of the same overlay are
//! linked here as `dxdp link` links them by hand, this node's half (its task's veth to the
//! overlay's VXLAN device, and the device's tunnel program into the task); the other node's
//! watch makes the other half.
//!
//! - Who: the tasks each overlay network of this node's labeled containers knows across the
//!   swarm (`docker network inspect --verbose`, Swarm's gossip; a worker answers it too), less
//!   this node's own containers. Each becomes a [`Container`] with [`Container::remote`] set:
//!   no process, no veth here; its endpoint is found through the VXLAN device
//!   ([`crate::overlay::remote_task_endpoint`]) and its endpoint id is deterministic
//!   ([`dxdp_common::remote_endpoint_id`]), so planning needs no datapath.
//! - Labels: a task's own (its service's container spec) and its service's `dxdp.*` ones, as
//!   for a task of this node, read from the service on a manager. A worker cannot read
//!   services: there a task of another node has the labels of this node's task of the same
//!   service (one spec for all its tasks), and none when this node runs no task of its service.
//! - Which links: the plan over this node's containers and those tasks, less the pairs of two
//!   tasks of other nodes (not this node's to make); a link across nodes runs on tc (a VXLAN
//!   device takes no XDP frames): `auto` is tc, `xdp` is refused.
//! - When: a whole pass and [`Engine::poll_remote`](super::Engine::poll_remote) ask again; a
//!   far task that goes makes no event here (gossip drops it), so the watch polls every
//!   [`POLL`] while one of its containers is on an overlay, and a change makes a pass.
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::IpAddr,
    time::Duration,
};

use tracing::{debug, warn};

use crate::{
    choice::Choice,
    docker::{Container, ContainerSource, NetworkAttachment, OverlayTask, RemoteTask},
    plan::{self, ContainerView, DesiredLink, Diagnostic, Level, NetworkView, OVERLAY_DRIVER},
    rules::keys::{COMPOSE_PROJECT, COMPOSE_SERVICE, PREFIX},
};

/// How often the watch asks whether the tasks of other nodes changed.
pub const POLL: Duration = Duration::from_secs(2);

/// The prefix of a task of another node's id in the plan (this node's are Docker's hex ids).
const ID_PREFIX: &str = "remote:";

/// The label Swarm puts on a task's container: the name of its service.
const SWARM_SERVICE_NAME: &str = "com.docker.swarm.service.name";

/// The tasks of other nodes, as last asked.
#[derive(Default)]
pub(super) struct RemoteTasks {
    tasks: Vec<Container>,
    /// The overlay networks they were asked for.
    overlays: BTreeSet<String>,
    /// What a change of makes a pass: each task's id, addresses and labels.
    seen: Vec<Fingerprint>,
    /// The last pass could not find a task's endpoint (gossip lists the task before its
    /// neighbour entry is on the VXLAN device): the next poll makes a pass even if nothing
    /// changed.
    pub(super) retry: bool,
}

type Fingerprint = (String, Vec<(String, IpAddr)>, BTreeMap<String, String>);

impl RemoteTasks {
    /// The tasks of other nodes, as containers.
    pub(super) fn tasks(&self) -> &[Container] {
        &self.tasks
    }

    /// Whether asking again may find something new without a poll: an overlay network of this
    /// node's labeled containers that was not asked about.
    pub(super) fn stale(&self, local: &[Container]) -> bool {
        overlays(local).keys().any(|id| !self.overlays.contains(id))
    }

    /// Whether there is anything to poll: a labeled container of this node on an overlay, or
    /// tasks of other nodes held from before.
    pub(super) fn worth_polling(&self, local: &[Container]) -> bool {
        !self.tasks.is_empty() || !overlays(local).is_empty()
    }

    /// Asks the engine again for the tasks of other nodes on the overlays of this node's
    /// labeled containers (`local`); returns whether they changed. A network that cannot be
    /// asked keeps everything as it was (logged).
    pub(super) async fn refresh(
        &mut self,
        source: &impl ContainerSource,
        local: &[Container],
    ) -> bool {
        let overlays = overlays(local);
        let mut found: Vec<(NetworkView, Vec<OverlayTask>)> = Vec::new();
        for (id, network) in &overlays {
            match source.overlay_tasks(id).await {
                Ok(tasks) => found.push((network.clone(), tasks)),
                Err(err) => {
                    warn!(network = %network.name, "cannot list the tasks of other nodes: {err:#}");
                    return false;
                }
            }
        }
        let tasks = remote_tasks(source, local, found).await;
        self.overlays = overlays.into_keys().collect();
        let seen: Vec<Fingerprint> = tasks.iter().map(fingerprint).collect();
        let changed = seen != self.seen;
        if changed {
            debug!(tasks = tasks.len(), "tasks of other nodes changed");
        }
        self.tasks = tasks;
        self.seen = seen;
        changed
    }
}

/// The overlay networks a link across nodes could use, of this node's running containers that
/// carry a `dxdp.*` label, by id.
fn overlays(local: &[Container]) -> BTreeMap<String, NetworkView> {
    local
        .iter()
        .filter(|c| c.remote.is_none() && c.view.running)
        .filter(|c| c.view.labels.keys().any(|k| k.starts_with(PREFIX)))
        .flat_map(|c| &c.view.networks)
        .filter(|n| n.driver == OVERLAY_DRIVER && !n.encrypted && !n.routing_mesh)
        .map(|n| (n.id.clone(), n.clone()))
        .collect()
}

fn fingerprint(task: &Container) -> Fingerprint {
    (
        task.view.id.clone(),
        task.remote.clone().unwrap_or_default().addrs,
        task.view.labels.clone().into_iter().collect(),
    )
}

/// The tasks of other nodes among `found` (each network's tasks across the swarm), as
/// containers, sorted by id: this node's own containers left out, and a name two tasks of one
/// network share (a load balancer's endpoint on each node) too.
async fn remote_tasks(
    source: &impl ContainerSource,
    local: &[Container],
    found: Vec<(NetworkView, Vec<OverlayTask>)>,
) -> Vec<Container> {
    let here: BTreeSet<&str> = local.iter().map(|c| c.view.name.as_str()).collect();
    // By name: the service, and each network with the task's address on it.
    let mut by_name: BTreeMap<String, (String, Vec<(NetworkView, IpAddr)>)> = BTreeMap::new();
    for (network, tasks) in found {
        let mut count: HashMap<&str, usize> = HashMap::new();
        for t in &tasks {
            *count.entry(t.name.as_str()).or_default() += 1;
        }
        for t in &tasks {
            if here.contains(t.name.as_str()) || count[t.name.as_str()] > 1 {
                continue;
            }
            let entry = by_name
                .entry(t.name.clone())
                .or_insert_with(|| (t.service.clone(), Vec::new()));
            entry.1.push((network.clone(), t.addr));
        }
    }
    let mut labels_of: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut out = Vec::with_capacity(by_name.len());
    for (name, (service, networks)) in by_name {
        if !service.is_empty() && !labels_of.contains_key(&service) {
            let labels = service_labels(source, local, &service).await;
            labels_of.insert(service.clone(), labels);
        }
        let labels = labels_of.get(&service).cloned().unwrap_or_default();
        out.push(as_container(name, labels, networks));
    }
    out
}

/// The labels of a task of the service `service`: the service's, where this node can read it
/// (a manager); otherwise those of this node's task of the same service, if it runs one.
async fn service_labels(
    source: &impl ContainerSource,
    local: &[Container],
    service: &str,
) -> HashMap<String, String> {
    match source.task_labels(service).await {
        Ok(labels) => labels,
        Err(err) => {
            debug!(service, "labels of its tasks on other nodes: {err:#}");
            local
                .iter()
                .find(|c| {
                    c.view
                        .labels
                        .get(SWARM_SERVICE_NAME)
                        .is_some_and(|s| s == service)
                })
                .map(|c| c.view.labels.clone())
                .unwrap_or_default()
        }
    }
}

/// A task of another node called `name` as the planner and the pass see a container.
fn as_container(
    name: String,
    labels: HashMap<String, String>,
    networks: Vec<(NetworkView, IpAddr)>,
) -> Container {
    let view = ContainerView {
        id: format!("{ID_PREFIX}{name}"),
        name,
        running: true,
        compose_project: labels.get(COMPOSE_PROJECT).cloned(),
        compose_service: labels.get(COMPOSE_SERVICE).cloned(),
        labels,
        networks: networks.iter().map(|(n, _)| n.clone()).collect(),
    };
    Container {
        view,
        pid: None,
        status: "running on another node".to_owned(),
        network_mode: String::new(),
        attachments: networks
            .iter()
            .map(|(network, _)| NetworkAttachment {
                network: network.clone(),
                bridge: None,
                mac: None,
                endpoint_id: String::new(),
            })
            .collect(),
        ports: Vec::new(),
        remote: Some(RemoteTask {
            addrs: networks.into_iter().map(|(n, addr)| (n.id, addr)).collect(),
        }),
    }
}

/// Whether a plan's container id is a task of another node's.
pub(super) fn is_remote(id: &str) -> bool {
    id.starts_with(ID_PREFIX)
}

/// The links across nodes the labels call for: the plan over this node's containers (`local`)
/// and the tasks of other nodes, less pairs with no end here or both ends here (the plan over
/// `local` alone makes those); each on tc. A pair whose labels ask for xdp is refused.
pub(super) fn links(
    local: &[ContainerView],
    tasks: &[Container],
) -> (BTreeSet<DesiredLink>, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    if tasks.is_empty() {
        return (BTreeSet::new(), diagnostics);
    }
    let mut views = local.to_vec();
    views.extend(tasks.iter().map(|t| t.view.clone()));
    let name_of = |id: &str| {
        views
            .iter()
            .find(|v| v.id == id)
            .map(|v| v.name.clone())
            .unwrap_or_default()
    };
    let mut links = BTreeSet::new();
    for mut link in plan::links_from_labels(&views).links {
        if is_remote(&link.a) == is_remote(&link.b) {
            continue;
        }
        match link.datapath {
            Choice::Xdp => {
                let (a, b) = (name_of(&link.a), name_of(&link.b));
                let (near, far) = if is_remote(&link.a) {
                    (&b, &a)
                } else {
                    (&a, &b)
                };
                diagnostics.push(Diagnostic {
                    container: near.clone(),
                    level: Level::Warn,
                    message: format!(
                        "no link between {near} and {far}: {far} runs on another node, reached \
                         through the overlay's VXLAN device, which takes no XDP frames; label \
                         them dxdp.datapath=tc or auto"
                    ),
                });
                continue;
            }
            Choice::Auto => link.datapath = Choice::Tc,
            Choice::Tc => {}
        }
        links.insert(link);
    }
    (links, diagnostics)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay() -> NetworkView {
        NetworkView {
            id: "ov1".into(),
            name: "backend".into(),
            driver: OVERLAY_DRIVER.into(),
            icc: true,
            ..NetworkView::default()
        }
    }

    fn local(name: &str, labels: &[(&str, &str)]) -> Container {
        let mut task = as_container(
            name.to_owned(),
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            vec![(overlay(), "10.0.0.2".parse().unwrap())],
        );
        task.view.id = format!("id-{name}");
        task.remote = None;
        task.pid = Some(42);
        task
    }

    struct Swarm {
        tasks: Vec<OverlayTask>,
        manager: bool,
    }

    impl ContainerSource for Swarm {
        async fn running_fingerprints(&self) -> anyhow::Result<Vec<(String, String)>> {
            Ok(Vec::new())
        }

        async fn inspect_many(
            &self,
            _: &[String],
            _: &mut crate::docker::NetworkCache,
        ) -> anyhow::Result<Vec<Option<Container>>> {
            Ok(Vec::new())
        }

        async fn overlay_tasks(&self, _: &str) -> anyhow::Result<Vec<OverlayTask>> {
            Ok(self.tasks.clone())
        }

        async fn task_labels(&self, service: &str) -> anyhow::Result<HashMap<String, String>> {
            anyhow::ensure!(self.manager, "not a manager");
            Ok(HashMap::from([
                ("dxdp.enable".into(), "true".into()),
                ("dxdp.group".into(), format!("{service}-group")),
            ]))
        }
    }

    fn task(name: &str, service: &str, addr: &str) -> OverlayTask {
        OverlayTask {
            name: name.into(),
            addr: addr.parse().unwrap(),
            node: None,
            service: service.into(),
        }
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    const GROUPED: &[(&str, &str)] = &[
        ("dxdp.enable", "true"),
        ("dxdp.group", "web-group"),
        (SWARM_SERVICE_NAME, "web"),
    ];

    /// A worker reads no service: the far task of this node's task's service has this task's
    /// labels, and is linked to it on tc; the load balancer's endpoint (one per node, one name)
    /// and this node's own task are not tasks of other nodes.
    #[test]
    fn a_worker_links_its_task_to_the_far_task_of_the_same_service() {
        let here = vec![local("web.1.a", GROUPED)];
        let swarm = Swarm {
            manager: false,
            tasks: vec![
                task("web.1.a", "web", "10.0.0.2"),
                task("web.2.b", "web", "10.0.0.3"),
                task("backend-endpoint", "", "10.0.0.4"),
                task("backend-endpoint", "", "10.0.0.5"),
                task("db.1.c", "db", "10.0.0.6"),
            ],
        };
        let mut remote = RemoteTasks::default();
        assert!(remote.stale(&here));
        assert!(run(remote.refresh(&swarm, &here)));
        assert!(!remote.stale(&here));
        let names: Vec<&str> = remote
            .tasks()
            .iter()
            .map(|t| t.view.name.as_str())
            .collect();
        assert_eq!(names, ["db.1.c", "web.2.b"]);
        let views: Vec<ContainerView> = here.iter().map(|c| c.view.clone()).collect();
        let (wanted, diagnostics) = links(&views, remote.tasks());
        let pairs: Vec<(&str, &str, Choice)> = wanted
            .iter()
            .map(|l| (l.a.as_str(), l.b.as_str(), l.datapath))
            .collect();
        assert_eq!(pairs, [("id-web.1.a", "remote:web.2.b", Choice::Tc)]);
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        // Asked again, nothing changed; the far task gone, it changed and the link goes.
        assert!(!run(remote.refresh(&swarm, &here)));
        let gone = Swarm {
            manager: false,
            tasks: vec![task("web.1.a", "web", "10.0.0.2")],
        };
        assert!(run(remote.refresh(&gone, &here)));
        assert!(links(&views, remote.tasks()).0.is_empty());
    }

    /// A manager reads the far task's service: a task of another service is linked when the
    /// labels say so; two tasks of other nodes are never linked here; xdp is refused.
    #[test]
    fn a_manager_reads_the_far_tasks_service_and_links_only_its_own_half() {
        let here = vec![local(
            "api.1.a",
            &[("dxdp.enable", "true"), ("dxdp.group", "db-group")],
        )];
        let swarm = Swarm {
            manager: true,
            tasks: vec![
                task("db.1.b", "db", "10.0.0.3"),
                task("db.2.c", "db", "10.0.0.4"),
            ],
        };
        let mut remote = RemoteTasks::default();
        assert!(run(remote.refresh(&swarm, &here)));
        let views: Vec<ContainerView> = here.iter().map(|c| c.view.clone()).collect();
        let (wanted, _) = links(&views, remote.tasks());
        let pairs: Vec<(&str, &str)> = wanted
            .iter()
            .map(|l| (l.a.as_str(), l.b.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("id-api.1.a", "remote:db.1.b"),
                ("id-api.1.a", "remote:db.2.c")
            ]
        );

        let xdp = [local(
            "api.1.a",
            &[
                ("dxdp.enable", "true"),
                ("dxdp.group", "db-group"),
                ("dxdp.datapath", "xdp"),
            ],
        )];
        let views: Vec<ContainerView> = xdp.iter().map(|c| c.view.clone()).collect();
        let (wanted, diagnostics) = links(&views, remote.tasks());
        assert!(wanted.is_empty());
        assert!(
            diagnostics.len() == 2 && diagnostics[0].message.contains("no XDP frames"),
            "{diagnostics:?}"
        );
    }

    /// Unlabeled containers and encrypted overlays ask nothing of the swarm.
    #[test]
    fn only_labeled_containers_on_usable_overlays_are_worth_asking_about() {
        let plain = vec![local("web.1.a", &[])];
        assert!(overlays(&plain).is_empty());
        let mut sealed = local("web.1.a", GROUPED);
        sealed.view.networks[0].encrypted = true;
        assert!(overlays(&[sealed]).is_empty());
        assert_eq!(overlays(&[local("web.1.a", GROUPED)]).len(), 1);
    }
}
