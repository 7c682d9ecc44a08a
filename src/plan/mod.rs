//! From a snapshot of containers to the set of links dxdp should hold.
//!
//! Which pairs are asked for:
//! - A container with `dxdp.enable=true` asks for each of its `dxdp.peers`. A peer name is first
//!   looked up as a compose service of the asker's own compose project (a scaled service yields
//!   every replica), and only if no such service exists as a container name (any project).
//!   Naming one's own service links the other replicas; the asker itself is skipped silently.
//! - Every pair of enabled containers sharing a `dxdp.group` is asked for. A group is scoped to
//!   the compose project (`com.docker.compose.project`) of the container; containers outside
//!   compose share one global scope. So `web` in project `a`, `web` in project `b` and a plain
//!   `web` are three separate groups; to link across scopes, use `dxdp.peers`.
//!
//! Which asked-for pairs become a link (either side asking is enough):
//! - Both running; a pair with a stopped side is skipped without a diagnostic, the next
//!   snapshot will see it start.
//! - The named side need not be enabled, but `dxdp.enable=false` is an opt-out that wins, and a
//!   container whose `dxdp.*` labels are malformed is left out of every link, to be safe.
//! - The rest is [`crate::rules`], shared with `compose-check`: labels that agree, and the first
//!   (by name) shared `bridge` network with inter-container traffic allowed. One link per pair
//!   at most; unqualified networks are reported only when they leave the pair with no link.
//!
//! The result depends only on the set of containers, never on their order: containers are
//! walked by id, and diagnostics are sorted. Ids are unique in Docker; a snapshot repeating an
//! id cannot be trusted, so every container with that id is left out.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::choice::Choice;
use crate::labels::{self, OptIn, Policy};
use crate::rules::{
    self, Refusal, Side, Unusable,
    keys::{COMPOSE_PROJECT, COMPOSE_SERVICE},
};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerView {
    pub id: String,
    /// Without the leading `/` (one is tolerated and stripped).
    pub name: String,
    pub running: bool,
    pub labels: HashMap<String, String>,
    /// When `None`, read from the `com.docker.compose.project` label.
    pub compose_project: Option<String>,
    /// When `None`, read from the `com.docker.compose.service` label.
    pub compose_service: Option<String>,
    pub networks: Vec<NetworkView>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkView {
    pub id: String,
    pub name: String,
    pub driver: String,
    /// False when `com.docker.network.bridge.enable_icc=false`.
    pub icc: bool,
    /// An overlay network created with `--opt encrypted`: IPsec between nodes.
    pub encrypted: bool,
    /// Swarm's routing mesh (`ingress`, or a network made with `--ingress`): ports published
    /// through it are balanced by IPVS to tasks on any node.
    pub routing_mesh: bool,
}

/// The driver of Swarm's multi-host networks, whose same-node pairs dxdp links inside the
/// network's sandbox (`crate::overlay`).
pub const OVERLAY_DRIVER: &str = "overlay";

/// Normalised so that `a < b`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct DesiredLink {
    pub a: String,
    pub b: String,
    pub network_id: String,
    pub datapath: Choice,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Info,
    Warn,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Diagnostic {
    /// Name of the container whose labels the message is about (the asker, for a pair).
    pub container: String,
    pub level: Level,
    pub message: String,
}

/// What the labels of a snapshot ask for: the links, and what is said of the asks left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LinksFromLabels {
    pub links: BTreeSet<DesiredLink>,
    /// Sorted, without duplicates.
    pub diagnostics: Vec<Diagnostic>,
    /// Refusals of asked-for pairs, by [`crate::rules::REASONS`] reason, for metrics.
    pub refused: BTreeMap<&'static str, usize>,
    /// Containers whose `dxdp.*` labels do not parse (each left out of every link).
    pub malformed: usize,
}

enum Status {
    Invalid,
    Absent,
    OptedOut,
    Enabled(Policy),
}

struct Node<'a> {
    view: &'a ContainerView,
    name: &'a str,
    project: Option<&'a str>,
    service: Option<&'a str>,
    status: Status,
}

impl Node<'_> {
    fn policy(&self) -> Option<&Policy> {
        match &self.status {
            Status::Enabled(p) => Some(p),
            _ => None,
        }
    }

    fn side(&self) -> Side<'_> {
        let policy = self.policy();
        Side {
            name: self.name,
            network: policy.and_then(|p| p.network.as_deref()),
            datapath: policy.map_or(Choice::Auto, |p| p.datapath),
        }
    }
}

#[derive(Default)]
struct Diags(Vec<Diagnostic>);

impl Diags {
    fn push(&mut self, container: &str, level: Level, message: String) {
        self.0.push(Diagnostic {
            container: container.to_owned(),
            level,
            message,
        });
    }
}

pub fn links_from_labels(containers: &[ContainerView]) -> LinksFromLabels {
    let mut diags = Diags::default();
    let nodes = nodes(containers, &mut diags);
    let mut links = BTreeSet::new();
    let mut refused = BTreeMap::new();
    for ((i, j), asker) in requests(&nodes, &mut diags) {
        let (a, b) = (&nodes[i], &nodes[j]);
        if let Some(link) = evaluate(a, b, &nodes[asker], &mut diags, &mut refused) {
            links.insert(link);
        }
    }
    let mut diagnostics = diags.0;
    diagnostics.sort();
    diagnostics.dedup();
    let malformed = nodes
        .iter()
        .filter(|n| matches!(n.status, Status::Invalid))
        .count();
    LinksFromLabels {
        links,
        diagnostics,
        refused,
        malformed,
    }
}

/// Sorted by id, so that indices into the result are order independent.
fn nodes<'a>(containers: &'a [ContainerView], diags: &mut Diags) -> Vec<Node<'a>> {
    let mut by_id: BTreeMap<&str, Vec<&ContainerView>> = BTreeMap::new();
    for c in containers {
        by_id.entry(c.id.as_str()).or_default().push(c);
    }
    let mut out = Vec::with_capacity(by_id.len());
    for (id, views) in by_id {
        let [view] = views[..] else {
            for v in views {
                diags.push(
                    labels::normalize_name(&v.name),
                    Level::Warn,
                    format!("container id {id} appears more than once in the snapshot; it is left out of every link"),
                );
            }
            continue;
        };
        let name = labels::normalize_name(&view.name);
        let from_labels = |field: &'a Option<String>, key: &str| {
            field
                .as_deref()
                .or_else(|| view.labels.get(key).map(String::as_str))
                .filter(|s| !s.is_empty())
        };
        let status = match labels::parse(&view.labels) {
            Err(errors) => {
                for e in errors {
                    diags.push(
                        name,
                        Level::Warn,
                        format!("{e}; until fixed, this container is left out of every link"),
                    );
                }
                Status::Invalid
            }
            Ok(OptIn::Absent { ignored }) => {
                // Warn, not Info: labels that say what to link but do nothing are surely a slip.
                if !ignored.is_empty() {
                    diags.push(
                        name,
                        Level::Warn,
                        format!(
                            "{} ignored because not enabled; add dxdp.enable=true to opt in",
                            ignored.join(", ")
                        ),
                    );
                }
                Status::Absent
            }
            Ok(OptIn::OptedOut { ignored }) => {
                if !ignored.is_empty() {
                    diags.push(
                        name,
                        Level::Info,
                        format!(
                            "{} ignored because not enabled (dxdp.enable=false)",
                            ignored.join(", ")
                        ),
                    );
                }
                Status::OptedOut
            }
            Ok(OptIn::Enabled(policy)) => Status::Enabled(policy),
        };
        out.push(Node {
            view,
            name,
            project: from_labels(&view.compose_project, COMPOSE_PROJECT),
            service: from_labels(&view.compose_service, COMPOSE_SERVICE),
            status,
        });
    }
    out
}

/// Pairs `(i, j)` with `i < j`, each mapped to the lowest-indexed container that asked for it.
fn requests(nodes: &[Node], diags: &mut Diags) -> BTreeMap<(usize, usize), usize> {
    let mut out = BTreeMap::new();
    let mut ask = |x: usize, y: usize, asker: usize| {
        out.entry((x.min(y), x.max(y)))
            .and_modify(|a: &mut usize| *a = (*a).min(asker))
            .or_insert(asker);
    };
    let mut groups: BTreeMap<(Option<&str>, &str), Vec<usize>> = BTreeMap::new();
    for (i, node) in nodes.iter().enumerate() {
        let Some(policy) = node.policy() else {
            continue;
        };
        if !node.view.running {
            continue;
        }
        for peer in &policy.peers {
            let found = resolve(nodes, node, peer);
            if found.is_empty() {
                let scope = match node.project {
                    Some(p) => format!("service of compose project {p} or "),
                    None => String::new(),
                };
                diags.push(
                    node.name,
                    Level::Info,
                    format!("dxdp.peers names {peer}, which matches no {scope}container yet; the link is made once it exists"),
                );
            } else if found == [i] {
                diags.push(
                    node.name,
                    Level::Warn,
                    format!("dxdp.peers names {peer}, which is this container itself; a container cannot link to itself"),
                );
            }
            for j in found.into_iter().filter(|&j| j != i) {
                ask(i, j, i);
            }
        }
        for group in &policy.groups {
            groups.entry((node.project, group)).or_default().push(i);
        }
    }
    for members in groups.values() {
        for (k, &x) in members.iter().enumerate() {
            for &y in &members[k + 1..] {
                ask(x, y, x);
            }
        }
    }
    out
}

fn resolve(nodes: &[Node], from: &Node, peer: &str) -> Vec<usize> {
    let matching = |pred: &dyn Fn(&Node) -> bool| -> Vec<usize> {
        (0..nodes.len()).filter(|&k| pred(&nodes[k])).collect()
    };
    if let Some(project) = from.project {
        let replicas = matching(&|n| n.project == Some(project) && n.service == Some(peer));
        if !replicas.is_empty() {
            return replicas;
        }
    }
    matching(&|n| n.name == peer)
}

fn evaluate(
    a: &Node,
    b: &Node,
    asker: &Node,
    diags: &mut Diags,
    refused: &mut BTreeMap<&'static str, usize>,
) -> Option<DesiredLink> {
    if !a.view.running || !b.view.running {
        return None;
    }
    let mut refuse = |level: Level, why: Refusal| {
        *refused.entry(why.reason()).or_default() += 1;
        diags.push(
            asker.name,
            level,
            format!("no link between {} and {}: {why}", a.name, b.name),
        );
    };
    for n in [a, b] {
        let name = n.name.to_owned();
        match n.status {
            Status::Invalid => {
                refuse(Level::Info, Refusal::Malformed { name });
                return None;
            }
            Status::OptedOut => {
                refuse(Level::Info, Refusal::OptedOut { name });
                return None;
            }
            Status::Absent | Status::Enabled(_) => {}
        }
    }
    let agreed = match rules::agree(a.side(), b.side()) {
        Ok(agreed) => agreed,
        Err(refusals) => {
            refusals
                .into_iter()
                .for_each(|why| refuse(Level::Warn, why));
            return None;
        }
    };
    match choose_network(a.view, b.view, agreed.network) {
        Ok(net) => Some(DesiredLink {
            a: a.view.id.clone(),
            b: b.view.id.clone(),
            network_id: net.id.clone(),
            datapath: agreed.datapath,
        }),
        Err(refusals) => {
            refusals
                .into_iter()
                .for_each(|why| refuse(Level::Warn, why));
            None
        }
    }
}

/// The network `dxdp link A B` uses for two containers (no labels involved), or every reason
/// there is none, each ready to show a user.
pub fn network_for_link<'v>(
    a: &'v ContainerView,
    b: &ContainerView,
) -> Result<&'v NetworkView, Vec<String>> {
    choose_network(a, b, None)
        .map_err(|refusals| refusals.iter().map(ToString::to_string).collect())
}

impl rules::Candidate for NetworkView {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn unusable(&self) -> Option<Unusable> {
        if self.driver != "bridge" && self.driver != OVERLAY_DRIVER {
            Some(Unusable::Driver(self.driver.clone()))
        } else if self.routing_mesh {
            Some(Unusable::RoutingMesh)
        } else if self.encrypted {
            Some(Unusable::Encrypted)
        } else if !self.icc {
            Some(Unusable::IccDisabled)
        } else {
            None
        }
    }
}

/// The network a link between `a` and `b` uses, by [`rules::pick_network`]: among the networks
/// both are on (only the one `named` by `dxdp.network` of the given setter, if any), the first
/// by name that can carry it. Otherwise every reason there is none.
pub(crate) fn choose_network<'v>(
    a: &'v ContainerView,
    b: &ContainerView,
    named: Option<(&str, &str)>,
) -> Result<&'v NetworkView, Vec<Refusal>> {
    let b_nets: BTreeSet<&str> = b.networks.iter().map(|n| n.id.as_str()).collect();
    let mut shared: Vec<&NetworkView> = a
        .networks
        .iter()
        .filter(|n| b_nets.contains(n.id.as_str()))
        .filter(|n| named.is_none_or(|(w, _)| n.name == w))
        .collect();
    shared.sort_by(|x, y| (&x.name, &x.id).cmp(&(&y.name, &y.id)));
    shared.dedup_by(|x, y| x.id == y.id);
    let named = named.map(|(network, setter)| {
        let on = |c: &ContainerView| c.networks.iter().any(|n| n.name == network);
        let missing = match (on(a), on(b)) {
            (false, true) => Some(labels::normalize_name(&a.name)),
            (true, false) => Some(labels::normalize_name(&b.name)),
            _ => None,
        };
        (network, setter, missing)
    });
    rules::pick_network(&shared, named)
}

#[cfg(test)]
mod tests;
