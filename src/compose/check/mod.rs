//! The checks themselves: a parsed compose file in, every problem with its dxdp labels out.
//! Pure: no file system, no Docker. The rules are listed in [`crate::compose`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use crate::choice::Choice;
use crate::labels::{self, LabelError, OptIn, Policy, shown_value};
use crate::rules::{
    self, Side,
    keys::{ENABLE, GROUP, KEYS, NETWORK, PEERS, PREFIX},
};

use super::model::{At, ComposeFile, Service};
use networks::{Net, attachment, resolve_wanted};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Error => "error",
            Self::Warning => "warning",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Problem {
    pub severity: Severity,
    /// `None` for a problem with the file as a whole.
    pub service: Option<String>,
    pub key: Option<String>,
    pub message: String,
    /// Where the label `key` is written, else the service's name; `None` only for a file built
    /// by hand, or one the parser could not place.
    pub at: Option<At>,
}

/// `service S: label K: MESSAGE`, on one line whatever the names hold: a YAML key may contain
/// a newline, and one problem per line is what scripts and tests rely on.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = String::new();
        if let Some(service) = &self.service {
            line.push_str(&format!("service {service}: "));
        }
        if let Some(key) = &self.key {
            line.push_str(&format!("label {key}: "));
        }
        line.push_str(&self.message);
        f.write_str(&one_line(&line))
    }
}

/// Control characters escaped, so that any text prints as a single line.
pub fn one_line(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_owned();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckOptions {
    /// A `dxdp.peers` name that matches nothing in the file is a warning instead of an error.
    pub allow_external: bool,
    /// Compose project name; without it (and without a top-level `name:`), network names that
    /// compose derives from the project cannot be spelled out.
    pub project: Option<String>,
}

/// docker-compose 1.x's normalisation: lowercase, then only `a-z`, `0-9`, `-` and `_` kept.
pub fn normalize_project(name: &str) -> String {
    name.to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        .collect()
}

pub fn check(file: &ComposeFile, options: &CheckOptions) -> Vec<Problem> {
    let project = options
        .project
        .as_deref()
        .or(file.name.as_deref())
        .map(normalize_project)
        .filter(|p| !p.is_empty());
    let mut out = Out::default();
    let empty = BTreeMap::new();
    let services = file.services.as_ref().unwrap_or(&empty);
    let infos: Vec<Info> = services
        .iter()
        .map(|(name, svc)| Info::new(file, name, svc, project.as_deref(), &mut out))
        .collect();

    let mut pairs: BTreeMap<(usize, usize), Asker> = BTreeMap::new();
    for (i, info) in infos.iter().enumerate() {
        let Some(policy) = info.policy() else {
            continue;
        };
        if info.attach.is_err() {
            continue;
        }
        for peer in &policy.peers {
            if let Some(j) = peer_target(&infos, i, peer, options, &mut out) {
                pairs.entry((i.min(j), i.max(j))).or_insert(Asker {
                    service: i,
                    key: PEERS,
                });
            }
        }
    }
    for (group, members) in groups(&infos) {
        if let [only] = members[..]
            && !infos[only].may_scale
        {
            out.error(
                infos[only].name,
                Some(GROUP),
                format!(
                    "group {group} has only service {}; a group links the services of one \
                     compose project that share it, so give a second service dxdp.group={group} \
                     or use dxdp.peers",
                    infos[only].name
                ),
            );
        }
        let linkable: Vec<usize> = members
            .into_iter()
            .filter(|&m| infos[m].attach.is_ok())
            .collect();
        for (k, &a) in linkable.iter().enumerate() {
            for &b in &linkable[k + 1..] {
                pairs.entry((a, b)).or_insert(Asker {
                    service: a,
                    key: GROUP,
                });
            }
        }
    }
    for ((a, b), asker) in pairs {
        // The asker first: "no link between web and db" under web's label.
        let other = if asker.service == a { b } else { a };
        check_pair(&infos[asker.service], &infos[other], asker.key, &mut out);
    }

    let mut problems = out.0;
    for p in &mut problems {
        if let Some(service) = &p.service {
            p.at = file.at(service, p.key.as_deref());
        }
    }
    problems.sort_by(|x, y| {
        (&x.service, &x.key, x.severity, &x.message)
            .cmp(&(&y.service, &y.key, y.severity, &y.message))
    });
    problems.dedup();
    problems
}

#[derive(Default)]
struct Out(Vec<Problem>);

impl Out {
    fn push(&mut self, severity: Severity, service: &str, key: Option<&str>, message: String) {
        self.0.push(Problem {
            severity,
            service: Some(service.to_owned()),
            key: key.map(str::to_owned),
            message,
            // Filled in by `check`, which has the file.
            at: None,
        });
    }
    fn error(&mut self, service: &str, key: Option<&str>, message: String) {
        self.push(Severity::Error, service, key, message);
    }
    fn warning(&mut self, service: &str, key: Option<&str>, message: String) {
        self.push(Severity::Warning, service, key, message);
    }
}

struct Asker {
    service: usize,
    key: &'static str,
}

enum Status {
    Enabled(Policy),
    Absent,
    OptedOut,
}

struct Info<'a> {
    name: &'a str,
    container_name: Option<&'a str>,
    /// More than one container may run for the service (or the count is not a literal).
    may_scale: bool,
    /// `Err` holds why the service cannot be linked at all.
    attach: Result<Vec<Net>, String>,
    status: Status,
    /// `dxdp.network` is interpolated or malformed: nothing can be said about it.
    network_unknown: bool,
    /// Which of `attach`'s networks `dxdp.network` names; `Err(())` once reported.
    wanted: Option<Result<usize, ()>>,
    project: Option<&'a str>,
}

impl<'a> Info<'a> {
    fn new(
        file: &ComposeFile,
        name: &'a str,
        svc: &'a Service,
        project: Option<&'a str>,
        out: &mut Out,
    ) -> Self {
        let mut info = Info {
            name,
            container_name: svc.container_name.as_deref(),
            may_scale: may_scale(svc),
            attach: attachment(file, svc),
            status: Status::Absent,
            network_unknown: false,
            wanted: None,
            project,
        };
        let labels = info.read_labels(svc, out);
        if let (Err(why), true) = (&info.attach, labels) {
            out.error(
                name,
                None,
                format!("{why}; remove its dxdp labels or attach it to a network"),
            );
        }
        let wanted = match (&info.attach, info.network_label()) {
            (Ok(nets), Some(wanted)) if !info.network_unknown => {
                Some(resolve_wanted(name, nets, wanted, project, out))
            }
            _ => None,
        };
        info.wanted = wanted;
        info
    }

    /// Validates the `dxdp.*` labels and sets `status`. True when the service carries dxdp
    /// labels other than a lone opt-out.
    fn read_labels(&mut self, svc: &Service, out: &mut Out) -> bool {
        let name = self.name;
        let mut ours: HashMap<String, String> = HashMap::new();
        let mut repeated = BTreeSet::new();
        for label in svc.labels.iter().flat_map(|l| &l.0) {
            let (key, value) = (&label.key, &label.value);
            if key.starts_with(PREFIX) {
                if ours.insert(key.clone(), value.to_text()).is_some() {
                    repeated.insert(key.as_str());
                }
            } else if key.to_ascii_lowercase().starts_with(PREFIX) {
                out.warning(
                    name,
                    Some(key),
                    format!(
                        "label keys are case-sensitive and dxdp reads only lowercase ones, so it \
                         ignores this label; write {}",
                        key.to_ascii_lowercase()
                    ),
                );
            }
        }
        for key in repeated {
            out.error(
                name,
                Some(key),
                "label is given more than once; docker-compose keeps only the last value"
                    .to_owned(),
            );
        }
        let carries_labels = ours.keys().any(|k| k != ENABLE);

        // Interpolated values are only known at `up` time: set aside, and assumed to be fine.
        let mut enable_unknown = false;
        let mut usable = HashMap::new();
        for (key, value) in &ours {
            match interpolation(value) {
                Interpolation::None => {
                    usable.insert(key.clone(), value.clone());
                }
                Interpolation::Escaped(literal) => {
                    usable.insert(key.clone(), literal);
                }
                Interpolation::Variable => {
                    out.warning(
                        name,
                        Some(key),
                        format!(
                            "value {} is substituted by docker-compose when it runs, so it is \
                             not checked",
                            shown_value(value)
                        ),
                    );
                    enable_unknown |= key == ENABLE;
                    self.network_unknown |= key == NETWORK;
                }
            }
        }
        if let Err(errors) = labels::parse(&usable) {
            for e in errors {
                out.error(name, Some(&e.key), label_error_message(&e));
                enable_unknown |= e.key == ENABLE;
                self.network_unknown |= e.key == NETWORK;
                usable.remove(&e.key);
            }
        }
        // A malformed or interpolated opt-in may well be meant as `true`; assuming so checks
        // the rest of the labels instead of burying them under "ignored" warnings.
        if enable_unknown {
            usable.insert(ENABLE.to_owned(), "true".to_owned());
        }
        self.status = match labels::parse(&usable) {
            Ok(OptIn::Enabled(policy)) => Status::Enabled(policy),
            Ok(OptIn::Absent { ignored }) => {
                for key in ignored {
                    out.warning(
                        name,
                        Some(&key),
                        "ignored because the service has no dxdp.enable=true; add \
                         dxdp.enable=true to opt in"
                            .to_owned(),
                    );
                }
                Status::Absent
            }
            Ok(OptIn::OptedOut { ignored }) => {
                for key in ignored {
                    out.warning(
                        name,
                        Some(&key),
                        "ignored because the service opts out with dxdp.enable=false".to_owned(),
                    );
                }
                Status::OptedOut
            }
            // Every malformed key was taken out above.
            Err(_) => Status::Absent,
        };
        carries_labels || matches!(self.status, Status::Enabled(_))
    }

    fn policy(&self) -> Option<&Policy> {
        match &self.status {
            Status::Enabled(p) => Some(p),
            _ => None,
        }
    }

    fn network_label(&self) -> Option<&str> {
        self.policy().and_then(|p| p.network.as_deref())
    }

    fn datapath(&self) -> Choice {
        self.policy().map_or(Choice::Auto, |p| p.datapath)
    }

    /// What the pair rules need of this service; `dxdp.network` only when it is known.
    fn side(&self, network_known: bool) -> Side<'_> {
        Side {
            name: self.name,
            network: self.network_label().filter(|_| network_known),
            datapath: self.datapath(),
        }
    }
}

fn may_scale(svc: &Service) -> bool {
    // Docker refuses a second container with the same fixed name.
    if svc.container_name.is_some() {
        return false;
    }
    let counts = [
        svc.scale.as_ref(),
        svc.deploy.as_ref().and_then(|d| d.replicas.as_ref()),
    ];
    counts
        .into_iter()
        .flatten()
        .any(|c| c.as_count().is_none_or(|n| n > 1))
}

enum Interpolation {
    None,
    /// Only `$$`, which compose turns into a literal `$`.
    Escaped(String),
    Variable,
}

fn interpolation(value: &str) -> Interpolation {
    if !value.contains('$') {
        Interpolation::None
    } else if value.replace("$$", "").contains('$') {
        Interpolation::Variable
    } else {
        Interpolation::Escaped(value.replace("$$", "$"))
    }
}

/// The reason and hint of a [`LabelError`]; the key is already in the line's `label KEY:`.
fn label_error_message(e: &LabelError) -> String {
    if KEYS.contains(&e.key.as_str()) {
        format!("{} in {}; {}", e.reason, shown_value(&e.value), e.hint)
    } else {
        format!("{}; {}", e.reason, e.hint)
    }
}

/// The service a `dxdp.peers` entry links to, if there is a link to check; reports the entry
/// itself when it cannot be one.
fn peer_target(
    infos: &[Info],
    from: usize,
    peer: &str,
    options: &CheckOptions,
    out: &mut Out,
) -> Option<usize> {
    let asker = &infos[from];
    // The same order as `dxdp watch`: a service of the project first, then a container name.
    let found = infos
        .iter()
        .position(|i| i.name == peer)
        .or_else(|| infos.iter().position(|i| i.container_name == Some(peer)));
    let Some(j) = found else {
        let what =
            format!("names {peer}, which is neither a service nor a container_name in this file");
        if options.allow_external {
            out.warning(
                asker.name,
                Some(PEERS),
                format!("{what}; it is linked once a container of that name runs"),
            );
        } else {
            out.error(
                asker.name,
                Some(PEERS),
                format!(
                    "{what}; name a service of this file, or pass --allow-external if {peer} \
                     is a container started elsewhere"
                ),
            );
        }
        return None;
    };
    let target = &infos[j];
    if j == from {
        if !asker.may_scale {
            out.warning(
                asker.name,
                Some(PEERS),
                format!(
                    "names {peer}, which is this service itself; that links only the service's \
                     replicas, and it has one"
                ),
            );
        }
        return None;
    }
    if let Err(why) = &target.attach {
        out.error(
            asker.name,
            Some(PEERS),
            format!("names {peer}, which dxdp cannot link: {why}"),
        );
        return None;
    }
    if let Status::OptedOut = target.status {
        out.warning(
            asker.name,
            Some(PEERS),
            format!("names {peer}, which opts out with dxdp.enable=false; no link is made"),
        );
        return None;
    }
    Some(j)
}

/// Opted-in members of each group, by index; a group's scope is the compose project, which is
/// this file.
fn groups(infos: &[Info]) -> BTreeMap<String, Vec<usize>> {
    let mut out: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, info) in infos.iter().enumerate() {
        for group in info.policy().map(|p| &p.groups[..]).unwrap_or_default() {
            out.entry(group.clone()).or_default().push(i);
        }
    }
    out
}

/// The refusal `dxdp watch` would log for the pair `a` asked for (by `key`), as far as the file
/// can tell, by the same [`rules`].
fn check_pair(a: &Info, b: &Info, key: &str, out: &mut Out) {
    let (Ok(a_nets), Ok(b_nets)) = (&a.attach, &b.attach) else {
        return;
    };
    let mut refuse = |refusals: Vec<rules::Refusal>| {
        for why in refusals {
            out.error(
                a.name,
                Some(key),
                format!("no link between {} and {}: {why}", a.name, b.name),
            );
        }
    };
    // An interpolated `dxdp.network` may name anything: only the datapaths can be compared.
    let known = !(a.network_unknown || b.network_unknown);
    if let Err(refusals) = rules::agree(a.side(known), b.side(known)) {
        refuse(refusals);
        return;
    }
    if !known {
        return;
    }
    let wanted = match (a.wanted, b.wanted) {
        (Some(Err(())), _) | (_, Some(Err(()))) => return,
        (Some(Ok(i)), _) => Some((a, b, &a_nets[i])),
        (_, Some(Ok(i))) => Some((b, a, &b_nets[i])),
        (None, None) => None,
    };
    let mut shared: Vec<&Net> = a_nets
        .iter()
        .filter(|n| b_nets.iter().any(|m| m.docker == n.docker))
        .filter(|n| wanted.is_none_or(|(_, _, w)| w.docker == n.docker))
        .collect();
    shared.sort_by_key(|n| n.docker_name(a.project));
    let named = wanted.map(|(setter, other, _)| {
        (
            setter.network_label().unwrap_or_default(),
            setter.name,
            Some(other.name),
        )
    });
    if let Err(refusals) = rules::pick_network(&shared, named) {
        refuse(refusals);
    }
}

#[cfg(test)]
mod at_tests;
mod networks;
#[cfg(test)]
mod tests;
