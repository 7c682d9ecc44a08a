//! The container engine's checks: reachable, its OCI runtime, dockerd's userland-proxy.
use anyhow::Result;

use super::{Check, Verdict, check};
use crate::{
    commands::published::{self, PortPath},
    docker::{BridgeNetwork, ConnectError, userland_proxy::UserlandProxy},
    runtime::{self, CgroupLayout, OciRuntime},
};

/// The engine, and whether its OCI runtime can start containers on this host.
pub(super) fn docker() -> (Vec<Check>, Vec<BridgeNetwork>, Result<Vec<PortPath>>) {
    let probe = async {
        let docker = crate::docker::Docker::connect().await?;
        docker.ping().await?;
        let networks = docker.bridge_networks().await.unwrap_or_default();
        let runtime = docker.oci_runtime().await;
        let publishing = if docker.is_podman() {
            None
        } else {
            docker.publishing_containers().await.ok()
        };
        let ports = published::gather(&docker).await;
        Ok::<_, ConnectError>((docker.describe(), networks, runtime, publishing, ports))
    };
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ConnectError::Unreachable(e.into()))
        .and_then(|rt| rt.block_on(probe));
    match result {
        Ok((engine, networks, runtime, publishing, ports)) => {
            let mut checks = vec![
                check(Verdict::Ok, format!("{engine} reachable"), None),
                oci_runtime(runtime, &CgroupLayout::host()),
            ];
            if let Some(publishing) = publishing {
                checks.push(userland_proxy(
                    crate::docker::userland_proxy::of_running_daemon(),
                    &publishing,
                ));
            }
            (checks, networks, ports)
        }
        Err(ConnectError::Rootless(e)) => (
            vec![check(
                Verdict::Fail,
                format!("{e:#}"),
                Some("link containers of rootful Podman or dockerd"),
            )],
            Vec::new(),
            Ok(Vec::new()),
        ),
        Err(e) => (
            vec![check(
                Verdict::Warn,
                format!("dockerd not reachable: {e:#}"),
                Some("start dockerd (watch and container names need it; netns: endpoints do not)"),
            )],
            Vec::new(),
            Ok(Vec::new()),
        ),
    }
}

/// dockerd's `userland-proxy`: while it is on, clients on the host itself reach published ports
/// through a docker-proxy process per port, which dxdp does not accelerate.
pub(super) fn userland_proxy(setting: Option<UserlandProxy>, publishing: &[String]) -> Check {
    let Some(setting) = setting else {
        return check(
            Verdict::Ok,
            "dockerd's userland-proxy: the daemon runs elsewhere (not a process of this host), \
             so its setting cannot be read",
            None,
        );
    };
    let source = &setting.source;
    if !setting.on {
        return check(
            Verdict::Ok,
            format!(
                "dockerd's userland-proxy is off ({source}): clients on this host reach \
                 published ports through Docker's DNAT, with no docker-proxy in the way"
            ),
            None,
        );
    }
    if publishing.is_empty() {
        return check(
            Verdict::Ok,
            format!(
                "dockerd's userland-proxy is on ({source}); no running container publishes a \
                 port, so no docker-proxy runs"
            ),
            None,
        );
    }
    let mut names = publishing
        .iter()
        .take(3)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if publishing.len() > 3 {
        names.push_str(&format!(" and {} more", publishing.len() - 3));
    }
    check(
        Verdict::Warn,
        format!(
            "dockerd's userland-proxy is on ({source}) and {} publish ports ({names}): clients \
             on this host reach them through docker-proxy, one process per port, at about half \
             the rate of the container's own address (redis GET, 20 clients: 40 k against 84 k \
             requests/s on this project's test machine); dxdp does not accelerate that path",
            publishing.len()
        ),
        Some(
            "set \"userland-proxy\": false in /etc/docker/daemon.json and restart dockerd: Docker \
             then forwards the host's own connections with iptables DNAT (hairpin mode on the \
             bridge ports, route_localnet=1 on its bridges for 127.0.0.1) instead of \
             docker-proxy (measured 0.89x of the direct rate); kernels or setups without \
             hairpin NAT need the proxy",
        ),
    )
}

/// The engine's OCI runtime: a runtime that cannot start a container here means no container
/// to link, whatever dxdp does.
pub(super) fn oci_runtime(runtime: Result<OciRuntime>, layout: &CgroupLayout) -> Check {
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            return check(
                Verdict::Warn,
                format!("cannot ask the engine for its OCI runtime: {e:#}"),
                None,
            );
        }
    };
    let named = if runtime.version.is_empty() {
        runtime.name.clone()
    } else {
        format!("{} ({})", runtime.name, runtime.version)
    };
    match runtime::refusal(&runtime, layout) {
        None => check(Verdict::Ok, format!("OCI runtime {named}"), None),
        Some(why) => check(
            Verdict::Fail,
            format!("OCI runtime {named} cannot start containers here: {why}"),
            Some(
                "use runc: printf '[engine]\\nruntime = \"runc\"\\n' > \
                 /etc/containers/containers.conf.d/dxdp-runtime.conf (Podman; apt-get install \
                 runc first if it is missing), then restart the API service (systemctl restart \
                 podman.service); scripts/setup.sh does both",
            ),
        ),
    }
}
