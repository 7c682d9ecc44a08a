//! The networks a compose service is on, as Docker will name them, and which of them
//! `dxdp.network` names: what the file says about where a link could go.
use crate::plan::OVERLAY_DRIVER;
use crate::rules::{
    Candidate, Unusable,
    keys::{ENCRYPTED_OPTION, ICC_OPTION, NETWORK},
};

use super::super::model::{ComposeFile, External, NetworkDef, Scalar, Service};
use super::Out;

/// How Docker will name a network, which is what `dxdp.network` has to match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum DockerName {
    /// Set in the file: `name:`, an external network, or a `network_mode` such as `bridge`.
    Fixed(String),
    /// `PROJECT_KEY`, from the compose key.
    Prefixed(String),
}

#[derive(Debug, Clone)]
pub(super) struct Net {
    /// The name under `networks:`; `None` for one given by `network_mode`.
    pub(super) key: Option<String>,
    pub(super) docker: DockerName,
    /// Why dxdp would refuse to accelerate on it, as far as the file tells.
    pub(super) unusable: Option<Unusable>,
}

impl Net {
    pub(super) fn docker_name(&self, project: Option<&str>) -> String {
        match &self.docker {
            DockerName::Fixed(name) => name.clone(),
            DockerName::Prefixed(key) => format!("{}_{key}", project.unwrap_or("PROJECT")),
        }
    }

    pub(super) fn shown(&self, project: Option<&str>) -> String {
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

pub(super) fn attachment(file: &ComposeFile, svc: &Service) -> Result<Vec<Net>, String> {
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

pub(super) fn network(file: &ComposeFile, key: String) -> Net {
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
    let encrypted = def
        .driver_opts
        .as_ref()
        .is_some_and(|o| o.contains_key(ENCRYPTED_OPTION));
    let unusable = match def.driver.as_deref().map(str::trim) {
        Some(driver) if driver != "bridge" && driver != OVERLAY_DRIVER => {
            Some(Unusable::Driver(driver.to_owned()))
        }
        Some(OVERLAY_DRIVER) if encrypted => Some(Unusable::Encrypted),
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
pub(super) fn is_false(v: &Scalar) -> bool {
    matches!(v, Scalar::Bool(false))
        || matches!(
            v.to_text().trim(),
            "0" | "f" | "F" | "false" | "FALSE" | "False"
        )
}

pub(super) fn resolve_wanted(
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
