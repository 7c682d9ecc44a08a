//! Rootful Podman behind its Docker-compatible API (`podman system service`): what the compat
//! API leaves out and dxdp needs, read from the libpod API on the same socket.
//!
//! Podman 4.3's compat API answers like dockerd at API 1.41 with three differences that matter
//! here: a network's `Options` are empty, so the bridge name (`podman0`, `podmanN`: never
//! `br-<id>`) is only in libpod's `network_interface`; a container's `NetworkID` is the network's
//! name; and rootless Podman does not say so in `SecurityOptions` (rootless Docker adds
//! `name=rootless` there): only libpod's `/info` has `host.security.rootless`.
use std::{
    io::{Read, Write},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;

use crate::runtime::OciRuntime;

/// The component name Podman's `/version` lists itself under.
const PODMAN_COMPONENT: &str = "Podman Engine";
/// libpod API version in request paths: Podman 4.x serves any 4.x path.
const LIBPOD_API: &str = "v4.0.0";

/// The libpod side of a Podman API socket.
#[derive(Clone, Debug)]
pub(crate) struct Podman {
    pub(crate) version: String,
    socket: PathBuf,
}

/// Whether a `/version` answer comes from Podman, and which Podman.
pub(super) fn podman_version(version: &bollard::models::SystemVersion) -> Option<String> {
    version
        .components
        .as_deref()?
        .iter()
        .find(|c| c.name == PODMAN_COMPONENT)
        .map(|c| c.version.clone())
}

/// Whether dockerd runs rootless (`name=rootless` in its security options; Podman 4.3's compat
/// API leaves it out, see [`Podman::rootless`]).
pub(super) fn rootless(info: &bollard::models::SystemInfo) -> bool {
    info.security_options
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| o.split(',').any(|kv| kv == "name=rootless"))
}

/// A rootless engine, refused at connect: its message says why and names the way out.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Rootless(String);

/// Why a rootless engine's containers cannot be linked, and the way out.
pub(super) fn rootless_refusal(engine: &str) -> Rootless {
    Rootless(format!(
        "{engine} runs rootless: its containers reach each other through pasta/slirp4netns or a \
         bridge inside the user's own namespace, with no host-side veth dxdp can attach to; run \
         the containers under rootful Podman (sudo podman …) and point dxdp at its socket: \
         DOCKER_HOST=unix:///run/podman/podman.sock (started by `podman system service` or \
         podman.socket)"
    ))
}

/// The unix socket DOCKER_HOST names (or Docker's default), for libpod requests.
fn socket_path(docker_host: Option<&str>) -> Result<PathBuf> {
    match docker_host.filter(|h| !h.is_empty()) {
        None => Ok(PathBuf::from("/var/run/docker.sock")),
        Some(host) => match host.strip_prefix("unix://") {
            Some(path) => Ok(PathBuf::from(path)),
            None => bail!(
                "DOCKER_HOST={host} serves Podman, whose bridge names dxdp reads from the libpod \
                 API on a local unix socket; use DOCKER_HOST=unix:///run/podman/podman.sock"
            ),
        },
    }
}

#[derive(Deserialize)]
struct LibpodInfo {
    host: LibpodHost,
}

#[derive(Deserialize)]
struct LibpodHost {
    security: LibpodSecurity,
    #[serde(rename = "ociRuntime")]
    oci_runtime: Option<LibpodOciRuntime>,
}

#[derive(Deserialize)]
struct LibpodOciRuntime {
    name: String,
    /// Several lines ("crun version 1.8.1\ncommit: …"): the first says it.
    #[serde(default)]
    version: String,
}

#[derive(Deserialize)]
struct LibpodSecurity {
    rootless: bool,
}

/// `host.security.rootless` of a libpod `/info` answer.
fn libpod_rootless(body: &[u8]) -> Result<bool> {
    let info: LibpodInfo =
        serde_json::from_slice(body).context("libpod info: unexpected answer")?;
    Ok(info.host.security.rootless)
}

/// `host.ociRuntime` of a libpod `/info` answer.
fn libpod_oci_runtime(body: &[u8]) -> Result<OciRuntime> {
    let info: LibpodInfo =
        serde_json::from_slice(body).context("libpod info: unexpected answer")?;
    let runtime = info
        .host
        .oci_runtime
        .ok_or_else(|| anyhow!("libpod info names no OCI runtime"))?;
    Ok(OciRuntime {
        name: runtime.name,
        version: runtime
            .version
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned(),
    })
}

#[derive(Deserialize)]
struct LibpodNetwork {
    #[serde(default)]
    network_interface: String,
}

impl Podman {
    pub(super) fn new(version: String) -> Result<Self> {
        let host = std::env::var("DOCKER_HOST").ok();
        Ok(Self {
            version,
            socket: socket_path(host.as_deref())?,
        })
    }

    /// Whether this Podman runs rootless, from libpod.
    pub(super) async fn rootless(&self) -> Result<bool> {
        libpod_rootless(&self.libpod(format!("/{LIBPOD_API}/libpod/info")).await?)
    }

    /// The OCI runtime this Podman runs containers with, from libpod (the compat `/info` has
    /// no `DefaultRuntime`).
    pub(super) async fn oci_runtime(&self) -> Result<OciRuntime> {
        libpod_oci_runtime(&self.libpod(format!("/{LIBPOD_API}/libpod/info")).await?)
    }

    async fn libpod(&self, path: String) -> Result<Vec<u8>> {
        let socket = self.socket.clone();
        tokio::task::spawn_blocking(move || get(&socket, &path))
            .await
            .map_err(|e| anyhow!("libpod request: {e}"))?
    }

    /// The Linux bridge of a `bridge` network (by name or ID), from libpod.
    pub(super) async fn bridge_of(&self, network: &str) -> Result<String> {
        let body = self
            .libpod(format!("/{LIBPOD_API}/libpod/networks/{network}/json"))
            .await?;
        let net: LibpodNetwork = serde_json::from_slice(&body)
            .with_context(|| format!("libpod network {network}: unexpected answer"))?;
        if net.network_interface.is_empty() {
            bail!("Podman names no bridge for network {network}");
        }
        Ok(net.network_interface)
    }
}

/// A bare HTTP/1.0 GET on a unix socket: the answer ends when Podman closes the connection,
/// so neither keep-alive nor chunked encoding arises. 200 only.
fn get(socket: &Path, path: &str) -> Result<Vec<u8>> {
    let mut stream = UnixStream::connect(socket)
        .with_context(|| format!("cannot connect to {}", socket.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: podman\r\n\r\n")?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("GET {path} on {}", socket.display()))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("GET {path}: no HTTP header in the answer"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("GET {path}: {status}");
    }
    Ok(raw[split + 4..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::{libpod_oci_runtime, libpod_rootless, podman_version, rootless, socket_path};

    /// Podman 4.3.1's `/version` (Debian 12), trimmed.
    const VERSION: &str = r#"{"Platform":{"Name":"linux/amd64/debian-12"},
        "Components":[{"Name":"Podman Engine","Version":"4.3.1",
          "Details":{"APIVersion":"4.3.1","MinAPIVersion":"4.0.0"}},
          {"Name":"Conmon","Version":"conmon version 2.1.6, commit: unknown"}],
        "Version":"4.3.1","ApiVersion":"1.41","MinAPIVersion":"1.24"}"#;

    #[test]
    fn podman_is_told_from_docker_by_its_version_component() {
        let podman = serde_json::from_str(VERSION).expect("parses");
        assert_eq!(podman_version(&podman).as_deref(), Some("4.3.1"));
        let docker = serde_json::from_str(
            r#"{"Components":[{"Name":"Engine","Version":"28.5.2"}],"Version":"28.5.2"}"#,
        )
        .expect("parses");
        assert_eq!(podman_version(&docker), None);
    }

    #[test]
    fn rootless_engines_say_so_in_their_security_options() {
        let rootful =
            serde_json::from_str(r#"{"SecurityOptions":["name=seccomp,profile=default"]}"#)
                .expect("parses");
        assert!(!rootless(&rootful));
        let rootless_info = serde_json::from_str(
            r#"{"SecurityOptions":["name=seccomp,profile=default","name=rootless"]}"#,
        )
        .expect("parses");
        assert!(rootless(&rootless_info));
    }

    #[test]
    fn rootless_podman_says_so_in_libpod_info_only() {
        // Podman 4.3.1 run by an unprivileged user: compat /info has SecurityOptions
        // ["name=seccomp,profile=default"] only; libpod /info (trimmed) has this.
        let body = br#"{"host":{"networkBackend":"netavark","security":{"rootless":true,
            "seccompEnabled":true}},"version":{"Version":"4.3.1"}}"#;
        assert!(libpod_rootless(body).expect("parses"));
        let rootful = br#"{"host":{"security":{"rootless":false}}}"#;
        assert!(!libpod_rootless(rootful).expect("parses"));
    }

    #[test]
    fn the_oci_runtime_is_read_from_libpod_info_with_the_first_line_of_its_version() {
        // Podman 4.3.1 on Debian 12 with crun installed (trimmed).
        let body = br#"{"host":{"security":{"rootless":false},"ociRuntime":{"name":"crun",
            "package":"crun_1.8.1-1+deb12u1_amd64","path":"/usr/bin/crun",
            "version":"crun version 1.8.1\ncommit: f8a096be\nrundir: /run/crun"}}}"#;
        let runtime = libpod_oci_runtime(body).expect("parses");
        assert_eq!(runtime.name, "crun");
        assert_eq!(runtime.version, "crun version 1.8.1");
        let none = br#"{"host":{"security":{"rootless":false}}}"#;
        assert!(libpod_oci_runtime(none).is_err());
    }

    #[test]
    fn libpod_requests_go_to_the_unix_socket_of_docker_host() {
        assert_eq!(
            socket_path(Some("unix:///run/podman/podman.sock")).expect("unix"),
            std::path::PathBuf::from("/run/podman/podman.sock")
        );
        assert_eq!(
            socket_path(None).expect("default"),
            std::path::PathBuf::from("/var/run/docker.sock")
        );
        let err = socket_path(Some("tcp://127.0.0.1:8080")).expect_err("tcp refused");
        assert!(err.to_string().contains("unix:///run/podman/podman.sock"));
    }
}
