//! The checks themselves: a parsed compose file in, every problem with its dxdp labels out.
//! Pure: no file system, no Docker. The rules are listed in [`crate::compose`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use crate::datapath::Choice;
use crate::labels::{self, LabelError, OptIn, Policy, shown_value};
use crate::rules::{
    self, Candidate, Side, Unusable,
    keys::{ENABLE, GROUP, ICC_OPTION, KEYS, NETWORK, PEERS, PREFIX},
};

use super::model::{ComposeFile, External, NetworkDef, Scalar, Service};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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

/// How Docker will name a network, which is what `dxdp.network` has to match.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DockerName {
    /// Set in the file: `name:`, an external network, or a `network_mode` such as `bridge`.
    Fixed(String),
    /// `PROJECT_KEY`, from the compose key.
    Prefixed(String),
}

#[derive(Debug, Clone)]
struct Net {
    /// The name under `networks:`; `None` for one given by `network_mode`.
    key: Option<String>,
    docker: DockerName,
    /// Why dxdp would refuse to accelerate on it, as far as the file tells.
    unusable: Option<Unusable>,
}

impl Net {
    fn docker_name(&self, project: Option<&str>) -> String {
        match &self.docker {
            DockerName::Fixed(name) => name.clone(),
            DockerName::Prefixed(key) => format!("{}_{key}", project.unwrap_or("PROJECT")),
        }
    }

    fn shown(&self, project: Option<&str>) -> String {
        let docker = self.docker_name(project);
        match &self.key {
            Some(key) if *key != docker => format!("{key} (Docker name {docker})"),
            _ => docker,
        }
    }
}

/// Refusals name a network by its compose key, which is what the file's reader knows.
impl Candidate for Net {
    fn name(&self) -> String {
        match (&self.key, &self.docker) {
            (Some(key), _) => key.clone(),
            (None, DockerName::Fixed(name) | DockerName::Prefixed(name)) => name.clone(),
        }
    }

    fn unusable(&self) -> Option<Unusable> {
        self.unusable.clone()
    }
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
        for (key, value) in svc.labels.iter().flat_map(|l| &l.0) {
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

fn attachment(file: &ComposeFile, svc: &Service) -> Result<Vec<Net>, String> {
    if let Some(mode) = svc.network_mode.as_deref().map(str::trim) {
        if let Some(other) = ["service:", "container:"]
            .iter()
            .find_map(|p| mode.strip_prefix(p))
        {
            return Err(format!(
                "network_mode {mode} makes it share the network stack of {other}, so it has no \
                 veth of its own for dxdp to link"
            ));
        }
        return match mode {
            "host" => Err(
                "network_mode host puts it in the host's network stack, where there is \
                           no container veth for dxdp to link"
                    .to_owned(),
            ),
            "none" => Err("network_mode none leaves it without a network to link".to_owned()),
            // Docker's default network is the one called `bridge`.
            "bridge" | "default" => Ok(vec![Net {
                key: None,
                docker: DockerName::Fixed("bridge".to_owned()),
                unusable: None,
            }]),
            other => Ok(vec![Net {
                key: None,
                docker: DockerName::Fixed(other.to_owned()),
                unusable: None,
            }]),
        };
    }
    let keys = match &svc.networks {
        Some(n) if !n.0.is_empty() => n.0.clone(),
        _ => vec!["default".to_owned()],
    };
    Ok(keys.into_iter().map(|key| network(file, key)).collect())
}

fn network(file: &ComposeFile, key: String) -> Net {
    let def: Option<&NetworkDef> = file
        .networks
        .as_ref()
        .and_then(|nets| nets.get(&key))
        .and_then(Option::as_ref);
    let Some(def) = def else {
        return Net {
            docker: DockerName::Prefixed(key.clone()),
            key: Some(key),
            unusable: None,
        };
    };
    let docker = match (&def.external, &def.name) {
        (Some(External::Named(Some(name))), _) | (_, Some(name)) => DockerName::Fixed(name.clone()),
        (Some(External::Flag(true) | External::Named(None)), None) => {
            DockerName::Fixed(key.clone())
        }
        _ => DockerName::Prefixed(key.clone()),
    };
    let icc_off = def
        .driver_opts
        .as_ref()
        .and_then(|o| o.get(ICC_OPTION))
        .is_some_and(is_false);
    let unusable = match def.driver.as_deref().map(str::trim) {
        Some(driver) if driver != "bridge" => Some(Unusable::Driver(driver.to_owned())),
        _ if icc_off => Some(Unusable::IccDisabled),
        _ => None,
    };
    Net {
        key: Some(key),
        docker,
        unusable,
    }
}

/// The spellings of false that Docker's `strconv.ParseBool` accepts.
fn is_false(v: &Scalar) -> bool {
    matches!(v, Scalar::Bool(false))
        || matches!(
            v.to_text().trim(),
            "0" | "f" | "F" | "false" | "FALSE" | "False"
        )
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

fn resolve_wanted(
    service: &str,
    nets: &[Net],
    wanted: &str,
    project: Option<&str>,
    out: &mut Out,
) -> Result<usize, ()> {
    if let Some(i) = nets.iter().position(|n| {
        matches!(&n.docker, DockerName::Fixed(f) if f == wanted)
            || (project.is_some() && n.docker_name(project) == wanted)
    }) {
        return Ok(i);
    }
    fn prefixed(n: &Net) -> Option<&str> {
        match &n.docker {
            DockerName::Prefixed(key) => Some(key),
            DockerName::Fixed(_) => None,
        }
    }
    if let Some(n) = nets.iter().find(|n| n.key.as_deref() == Some(wanted)) {
        let docker = n.docker_name(project);
        let fix = match n.docker {
            DockerName::Prefixed(_) => format!(
                " (compose prefixes the project name); give network {wanted} a fixed name \
                 (name: {wanted} under the top-level networks) or write dxdp.network={docker}"
            ),
            DockerName::Fixed(_) => format!("; write dxdp.network={docker}"),
        };
        out.error(
            service,
            Some(NETWORK),
            format!(
                "names compose network {wanted}, but dxdp.network takes the Docker name, which \
                 is {docker}{fix}"
            ),
        );
        return Err(());
    }
    if project.is_none() {
        // PROJECT_KEY: right for exactly one project name, which only `up` will tell.
        let guess = nets.iter().enumerate().find_map(|(i, n)| {
            let key = prefixed(n)?;
            let head = wanted.strip_suffix(key)?.strip_suffix('_')?;
            (!head.is_empty()).then_some((i, head, key))
        });
        if let Some((i, head, key)) = guess {
            out.warning(
                service,
                Some(NETWORK),
                format!(
                    "names {wanted}, which is network {key} only when the compose project is \
                     named {head}; pass --project-name to check it, or give network {key} a \
                     fixed name"
                ),
            );
            return Ok(i);
        }
    }
    let on: Vec<String> = nets.iter().map(|n| n.shown(project)).collect();
    out.error(
        service,
        Some(NETWORK),
        format!(
            "names network {wanted}, which service {service} is not on; its networks: {}",
            on.join(", ")
        ),
    );
    Err(())
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
mod tests {
    use super::*;
    use crate::compose::parse_str;
    use crate::labels::DATAPATH;

    fn run(yaml: &str) -> Vec<Problem> {
        run_with(yaml, &CheckOptions::default())
    }

    fn run_with(yaml: &str, options: &CheckOptions) -> Vec<Problem> {
        let file = parse_str(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        check(&file, options)
    }

    fn lines(problems: &[Problem]) -> Vec<String> {
        problems
            .iter()
            .map(|p| format!("{}: {p}", p.severity))
            .collect()
    }

    #[track_caller]
    fn assert_clean(yaml: &str) {
        let p = run(yaml);
        assert!(p.is_empty(), "{:#?}", lines(&p));
    }

    /// Exactly one problem, of this severity, containing `needle`.
    #[track_caller]
    fn assert_one(problems: &[Problem], severity: Severity, needle: &str) -> Problem {
        assert_eq!(problems.len(), 1, "{:#?}", lines(problems));
        let p = &problems[0];
        assert_eq!(p.severity, severity, "{p}");
        assert!(p.to_string().contains(needle), "{p}\nwanted: {needle}");
        p.clone()
    }

    const PAIR: &str = r#"
services:
  a:
    image: x
    labels: {dxdp.enable: "true", dxdp.group: g}
  b:
    image: x
    labels: ["dxdp.enable=true", "dxdp.group=g"]
"#;

    #[test]
    fn group_pair_in_both_label_forms_is_clean() {
        assert_clean(PAIR);
    }

    #[test]
    fn model_built_by_hand() {
        use super::super::model::{Labels, Service};
        let svc = |labels: &[(&str, &str)]| Service {
            labels: Some(Labels(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), Scalar::Text((*v).to_owned())))
                    .collect(),
            )),
            ..Service::default()
        };
        let mut file = ComposeFile {
            services: Some(BTreeMap::from([
                ("a".to_owned(), svc(&[(ENABLE, "true"), (PEERS, "b")])),
                ("b".to_owned(), svc(&[])),
            ])),
            ..ComposeFile::default()
        };
        assert_eq!(check(&file, &CheckOptions::default()), []);
        file.services
            .as_mut()
            .unwrap()
            .insert("b".to_owned(), svc(&[(ENABLE, "false")]));
        let p = check(&file, &CheckOptions::default());
        assert_one(&p, Severity::Warning, "opts out with dxdp.enable=false");
    }

    #[test]
    fn yaml_scalars_are_stringified() {
        assert_clean(
            r#"
services:
  a:
    image: x
    labels:
      dxdp.enable: true
      dxdp.peers: b
  b:
    image: x
    labels: {dxdp.enable: True, dxdp.group: 7}
  c:
    image: x
    labels: {dxdp.enable: TRUE, dxdp.group: 7}
"#,
        );
        let p = run("services:\n  a:\n    labels: {dxdp.enable: 1}\n");
        let p = assert_one(&p, Severity::Error, "expected true or false in \"1\"");
        assert_eq!(p.key.as_deref(), Some(ENABLE));
        let p = run("services:\n  a:\n    labels: {dxdp.enable: }\n");
        assert_one(&p, Severity::Error, "expected true or false in \"\"");
    }

    #[test]
    fn label_errors_are_reported_with_service_and_key() {
        let p = run(r#"
services:
  web:
    labels: ["dxdp.enable=true", "dxdp.datapath=fast", "dxdp.enabel=true"]
"#);
        let l = lines(&p);
        assert_eq!(l.len(), 2, "{l:#?}");
        assert_eq!(
            l[0],
            "error: service web: label dxdp.datapath: unknown datapath in \"fast\"; write \
             dxdp.datapath=auto, tc or xdp"
        );
        assert!(
            l[1].starts_with(
                "error: service web: label dxdp.enabel: unknown dxdp label key; valid keys are"
            ),
            "{}",
            l[1]
        );
    }

    #[test]
    fn one_bad_label_does_not_hide_the_others() {
        // The bad datapath would leave the container out of every link at run time; the peer
        // is still worth reporting now rather than after the next fix.
        let p = run(r#"
services:
  web:
    labels: {dxdp.enable: "true", dxdp.datapath: fast, dxdp.peers: nosuch}
"#);
        assert_eq!(p.len(), 2, "{:#?}", lines(&p));
        assert_eq!(p[0].key.as_deref(), Some(DATAPATH));
        assert!(p[1].message.contains("names nosuch"), "{}", p[1]);
    }

    #[test]
    fn bad_enable_still_checks_the_rest_as_if_enabled() {
        let p = run(r#"
services:
  web:
    labels: {dxdp.enable: "on", dxdp.peers: nosuch}
"#);
        assert_eq!(p.len(), 2, "{:#?}", lines(&p));
        assert!(p[0].message.contains("expected true or false"));
        assert!(p[1].message.contains("names nosuch"));
    }

    #[test]
    fn repeated_list_label() {
        let p = run(r#"
services:
  a:
    labels: ["dxdp.enable=true", "dxdp.enable=false"]
"#);
        let p = assert_one(&p, Severity::Error, "given more than once");
        assert_eq!(p.key.as_deref(), Some(ENABLE));
    }

    #[test]
    fn bare_list_label_is_empty() {
        let p = run("services:\n  a:\n    labels: [dxdp.enable]\n");
        assert_one(&p, Severity::Error, "expected true or false in \"\"");
    }

    #[test]
    fn uppercase_prefix_is_warned() {
        let p = run("services:\n  a:\n    labels: [DXDP.enable=true]\n");
        assert_one(&p, Severity::Warning, "write dxdp.enable");
    }

    #[test]
    fn labels_without_enable_are_warnings() {
        let p = run(r#"
services:
  a:
    labels: {dxdp.peers: b, dxdp.group: g}
  b: {}
"#);
        let l = lines(&p);
        assert_eq!(
            l,
            [
                "warning: service a: label dxdp.group: ignored because the service has no \
                 dxdp.enable=true; add dxdp.enable=true to opt in",
                "warning: service a: label dxdp.peers: ignored because the service has no \
                 dxdp.enable=true; add dxdp.enable=true to opt in",
            ]
        );
        let p = run("services:\n  a:\n    labels: {dxdp.enable: \"false\", dxdp.datapath: tc}\n");
        assert_one(&p, Severity::Warning, "opts out with dxdp.enable=false");
        // A lone opt-out is no problem, not even next to network_mode host.
        assert_clean(
            "services:\n  a:\n    network_mode: host\n    labels: {dxdp.enable: \"false\"}\n",
        );
    }

    #[test]
    fn peers_resolve_to_services_and_container_names() {
        assert_clean(
            r#"
services:
  a:
    labels: {dxdp.enable: "true", dxdp.peers: "b, the-c, /b"}
  b: {}
  c:
    container_name: the-c
"#,
        );
    }

    #[test]
    fn unknown_peer_is_error_or_warning() {
        let yaml = "services:\n  a:\n    labels: {dxdp.enable: \"true\", dxdp.peers: ghost}\n";
        let p = run(yaml);
        let p = assert_one(
            &p,
            Severity::Error,
            "label dxdp.peers: names ghost, which is neither a service nor a container_name in this file",
        );
        assert!(p.message.contains("--allow-external"), "{p}");
        let allow = CheckOptions {
            allow_external: true,
            ..CheckOptions::default()
        };
        let p = run_with(yaml, &allow);
        assert_one(
            &p,
            Severity::Warning,
            "linked once a container of that name runs",
        );
    }

    #[test]
    fn peer_on_itself() {
        let p = run("services:\n  a:\n    labels: {dxdp.enable: \"true\", dxdp.peers: a}\n");
        assert_one(&p, Severity::Warning, "which is this service itself");
        // With replicas, naming one's own service links the replicas.
        assert_clean(
            "services:\n  a:\n    scale: 3\n    labels: {dxdp.enable: \"true\", dxdp.peers: a}\n",
        );
        assert_clean(
            "services:\n  a:\n    deploy: {replicas: 2}\n    labels: {dxdp.enable: \"true\", dxdp.peers: a}\n",
        );
    }

    #[test]
    fn single_member_group() {
        let p = run(r#"
services:
  a:
    labels: {dxdp.enable: "true", dxdp.group: "g, h"}
  b:
    labels: {dxdp.enable: "true", dxdp.group: h}
  c:
    labels: {dxdp.group: g}
"#);
        let l = lines(&p);
        assert_eq!(l.len(), 2, "{l:#?}");
        assert!(
            l[0].starts_with("error: service a: label dxdp.group: group g has only service a;"),
            "{}",
            l[0]
        );
        assert!(l[1].starts_with("warning: service c: label dxdp.group: ignored"));
        // Replicas of one service are enough for a group.
        assert_clean(
            "services:\n  a:\n    scale: 2\n    labels: {dxdp.enable: \"true\", dxdp.group: g}\n",
        );
        // A replica count that only `up` knows is given the benefit of the doubt.
        assert_clean(
            "services:\n  a:\n    scale: ${N}\n    labels: {dxdp.enable: \"true\", dxdp.group: g}\n",
        );
        // A fixed container name cannot scale.
        let p = run(
            "services:\n  a:\n    scale: 2\n    container_name: x\n    labels: {dxdp.enable: \"true\", dxdp.group: g}\n",
        );
        assert_one(&p, Severity::Error, "group g has only service a");
    }

    #[test]
    fn network_modes_without_a_veth() {
        for mode in ["host", "none", "service:b", "container:abc"] {
            let yaml = format!(
                "services:\n  a:\n    network_mode: \"{mode}\"\n    labels: {{dxdp.enable: \"true\", dxdp.peers: b}}\n  b: {{}}\n"
            );
            let p = run(&yaml);
            let p = assert_one(&p, Severity::Error, &format!("network_mode {mode}"));
            assert_eq!(p.key, None);
            assert_eq!(p.service.as_deref(), Some("a"));
            assert!(
                p.message
                    .ends_with("remove its dxdp labels or attach it to a network")
            );
        }
        // Named as a peer by another service.
        let p = run(r#"
services:
  a:
    labels: {dxdp.enable: "true", dxdp.peers: b}
  b:
    network_mode: host
"#);
        assert_one(
            &p,
            Severity::Error,
            "service a: label dxdp.peers: names b, which dxdp cannot link: network_mode host",
        );
        // The default bridge network is a network like any other.
        assert_clean(
            r#"
services:
  a:
    network_mode: bridge
    labels: {dxdp.enable: "true", dxdp.peers: b}
  b:
    network_mode: bridge
"#,
        );
    }

    const TWO_NETS: &str = r#"
services:
  frontend:
    networks: [front]
    labels: {dxdp.enable: "true", dxdp.peers: api, dxdp.network: NETWORK}
  api:
    networks:
      front:
      back: {aliases: [api.internal]}
  db:
    networks: [back]
networks:
  front: NAMED
  back:
"#;

    fn two_nets(network: &str, named: &str) -> String {
        TWO_NETS.replace("NETWORK", network).replace("NAMED", named)
    }

    #[test]
    fn network_label_with_fixed_name() {
        assert_clean(&two_nets("edge", "{name: edge}"));
        assert_clean(&two_nets("edge", "{external: true, name: edge}"));
        assert_clean(&two_nets("edge", "{external: {name: edge}}"));
        assert_clean(&two_nets("front", "{external: true}"));
    }

    #[test]
    fn network_label_naming_a_prefixed_compose_network() {
        let p = run(&two_nets("front", "{}"));
        assert_one(
            &p,
            Severity::Error,
            "names compose network front, but dxdp.network takes the Docker name, which is PROJECT_front (compose",
        );
        let with_project = CheckOptions {
            project: Some("Shop".to_owned()),
            ..CheckOptions::default()
        };
        let p = run_with(&two_nets("front", "{}"), &with_project);
        assert_one(&p, Severity::Error, "or write dxdp.network=shop_front");
        assert_eq!(run_with(&two_nets("shop_front", "{}"), &with_project), []);
        // The top-level name of the compose specification counts too.
        let named = format!("name: shop\n{}", two_nets("shop_front", "{}"));
        assert_clean(&named);
    }

    #[test]
    fn network_label_naming_the_compose_key_of_a_named_network() {
        let p = run(&two_nets("front", "{name: edge}"));
        assert_one(
            &p,
            Severity::Error,
            "names compose network front, but dxdp.network takes the Docker name, which is edge; \
             write dxdp.network=edge",
        );
    }

    #[test]
    fn network_label_guessing_the_project() {
        let p = run(&two_nets("shop_front", "{}"));
        assert_one(
            &p,
            Severity::Warning,
            "which is network front only when the compose project is named shop",
        );
    }

    #[test]
    fn network_label_naming_a_network_the_service_is_not_on() {
        let p = run(&two_nets("edge", "{}"));
        let p = assert_one(
            &p,
            Severity::Error,
            "names network edge, which service frontend is not on; its networks: front (Docker name PROJECT_front)",
        );
        assert_eq!(p.key.as_deref(), Some(NETWORK));
        // A network the service is not on, even if another service is.
        let p = run(&two_nets("back", "{}").replace("back:\n", "back: {name: back}\n"));
        assert_one(
            &p,
            Severity::Error,
            "names network back, which service frontend is not on",
        );
    }

    #[test]
    fn network_label_the_peer_is_not_on() {
        let p = run(r#"
services:
  api:
    networks: [front, back]
    labels: {dxdp.enable: "true", dxdp.network: back}
  frontend:
    networks: [front]
    labels: {dxdp.enable: "true", dxdp.peers: api}
networks:
  front:
  back: {name: back}
"#);
        assert_one(
            &p,
            Severity::Error,
            "service frontend: label dxdp.peers: no link between frontend and api: frontend is \
             not on network back, which dxdp.network of api names",
        );
    }

    #[test]
    fn conflicting_network_and_datapath() {
        let p = run(r#"
services:
  a:
    networks: [x, y]
    labels: {dxdp.enable: "true", dxdp.group: g, dxdp.network: x, dxdp.datapath: tc}
  b:
    networks: [x, y]
    labels: {dxdp.enable: "true", dxdp.group: g, dxdp.network: y, dxdp.datapath: xdp}
networks:
  x: {name: x}
  y: {name: y}
"#);
        let l = lines(&p);
        assert_eq!(l.len(), 2, "{l:#?}");
        assert!(l[0].contains("a sets dxdp.datapath=tc but b sets dxdp.datapath=xdp"));
        assert!(l[1].contains("a sets dxdp.network=x but b sets dxdp.network=y"));
        assert!(
            l.iter()
                .all(|l| l
                    .starts_with("error: service a: label dxdp.group: no link between a and b"))
        );
    }

    #[test]
    fn no_shared_network() {
        let p = run(r#"
services:
  a:
    networks: [x]
    labels: {dxdp.enable: "true", dxdp.peers: b}
  b:
    networks: [y]
"#);
        assert_one(
            &p,
            Severity::Error,
            "no link between a and b: they share no network",
        );
        // No networks at all means the default network, shared by both.
        assert_clean(
            "services:\n  a:\n    labels: {dxdp.enable: \"true\", dxdp.peers: b}\n  b: {}\n",
        );
        let p = run(
            "services:\n  a:\n    labels: {dxdp.enable: \"true\", dxdp.peers: b}\n  b:\n    networks: [y]\n",
        );
        assert_one(&p, Severity::Error, "they share no network");
    }

    #[test]
    fn unusable_networks() {
        let yaml = |net: &str| {
            format!(
                "services:\n  a:\n    networks: [n]\n    labels: {{dxdp.enable: \"true\", dxdp.peers: b}}\n  b:\n    networks: [n]\nnetworks:\n  n: {net}\n"
            )
        };
        let p = run(&yaml("{driver: macvlan}"));
        assert_one(&p, Severity::Error, "network n has driver macvlan");
        let p = run(&yaml(
            "{driver_opts: {com.docker.network.bridge.enable_icc: \"false\"}}",
        ));
        assert_one(&p, Severity::Error, "enable_icc=false");
        assert_clean(&yaml(
            "{driver: bridge, driver_opts: {com.docker.network.bridge.enable_icc: \"true\"}}",
        ));
        // One usable shared network is enough.
        let two = yaml("{driver: macvlan}")
            .replace("[n]", "[n, m]")
            .replace("networks:\n  n:", "networks:\n  m:\n  n:");
        assert_clean(&two);
    }

    #[test]
    fn interpolated_values_are_not_checked() {
        let p = run(r#"
services:
  a:
    labels: {dxdp.enable: "${ENABLE:-true}", dxdp.group: g, dxdp.network: "$NET"}
  b:
    labels: {dxdp.enable: "true", dxdp.group: g}
"#);
        let l = lines(&p);
        assert_eq!(l.len(), 2, "{l:#?}");
        assert!(l[0].contains("label dxdp.enable: value \"${ENABLE:-true}\" is substituted"));
        assert!(l[1].contains("label dxdp.network: value \"$NET\""));
        // `$$` is a literal dollar, which no dxdp value may hold.
        let p =
            run("services:\n  a:\n    labels: {dxdp.enable: \"true\", dxdp.network: \"a$$b\"}\n");
        assert_one(&p, Severity::Error, "'$' is not allowed");
    }

    #[test]
    fn hostile_names_stay_on_one_line() {
        let p = run("services:\n  \"a\\nb\":\n    labels: {\"dxdp.x\\ny\": \"1\"}\n");
        assert_eq!(p.len(), 1);
        let line = p[0].to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with("service a\\nb: label dxdp.x\\ny: unknown dxdp label key"),
            "{line}"
        );
    }

    #[test]
    fn output_is_sorted_and_deterministic() {
        let yaml = r#"
services:
  z:
    labels: {dxdp.enable: "true", dxdp.peers: "ghost1,ghost2", dxdp.datapath: bad}
  a:
    labels: {dxdp.enable: "true", dxdp.group: lonely}
"#;
        let p = run(yaml);
        let services: Vec<_> = p.iter().map(|p| p.service.clone().unwrap()).collect();
        assert_eq!(services, ["a", "z", "z", "z"]);
        assert_eq!(p, run(yaml));
    }

    #[test]
    fn normalize_project_like_compose_1() {
        assert_eq!(normalize_project("My Shop.v2"), "myshopv2");
        assert_eq!(normalize_project("a-b_c"), "a-b_c");
    }
}
