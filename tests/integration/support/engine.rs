//! What a scenario needs of a container engine's world, so that one scenario body runs on Docker
//! ([`World`]) and on Podman (the `podman` area's world, which implements [`Engine`] beside its
//! own fixture). The scenarios are in `tests/integration/scenarios.rs`.

use super::{
    dxdp::{Dxdp, Status},
    process::Run,
    world::World,
};

/// A test's world of networks and containers on one engine, with the dxdp that links them.
pub trait Engine {
    /// `docker` or `podman`, for messages.
    fn name(&self) -> &'static str;
    /// How dxdp names the bridge of one of this world's networks begins: `br-` (Docker's
    /// `br-<network ID>`), `podman` (netavark's `podmanN`).
    fn bridge_prefix(&self) -> &'static str;
    /// What the names of this world's networks and containers begin with.
    fn prefix(&self) -> &str;
    /// A bridge network `<prefix>-<name>` with a subnet of its own; `extra` go to `network
    /// create`. Returns the full name.
    fn network(&mut self, name: &str, extra: &[&str]) -> String;
    /// `run -d --name <prefix>-<name> ARGS… IMAGE`, removed with the world; returns the full name.
    fn container(&mut self, name: &str, args: &[&str]) -> String;
    /// The container's IPv4 address on a network.
    fn ip(&self, container: &str, network: &str) -> String;
    /// The container's full ID.
    fn id(&self, container: &str) -> String;
    /// The engine's command line (`docker ARGS…`, `podman ARGS…`), whatever its exit code.
    fn cli(&self, args: &[&str]) -> Run;
    /// `dxdp --pin-dir DIR ARGS…` talking to this engine, whatever its exit code.
    fn run_dxdp(&self, args: &[&str]) -> Run;
    /// `dxdp status --json` on this world's pin directory.
    fn status(&self) -> Status {
        self.pins().status()
    }
    /// The link pins under this world's pin directory.
    fn link_pins(&self) -> Vec<String> {
        self.pins().link_pins()
    }
    /// The binary on this world's pin directory, for what it reads from the pins alone.
    fn pins(&self) -> &Dxdp;
}

/// Docker: the host's dockerd or a private one.
impl Engine for World {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn bridge_prefix(&self) -> &'static str {
        "br-"
    }

    fn prefix(&self) -> &str {
        &self.prefix
    }

    fn network(&mut self, name: &str, extra: &[&str]) -> String {
        World::network(self, name, extra)
    }

    fn container(&mut self, name: &str, args: &[&str]) -> String {
        self.run(name, args, &[])
    }

    fn ip(&self, container: &str, network: &str) -> String {
        World::ip(self, container, network)
    }

    fn id(&self, container: &str) -> String {
        self.docker_ok(&["inspect", "-f", "{{.Id}}", container])
    }

    fn cli(&self, args: &[&str]) -> Run {
        self.docker(args)
    }

    fn run_dxdp(&self, args: &[&str]) -> Run {
        match self.docker_host() {
            Some(host) => {
                let env = format!("DOCKER_HOST={host}");
                let dir = self.dxdp.pin_dir.to_string_lossy().into_owned();
                let mut argv = vec!["env", &env, super::DXDP, "--pin-dir", &dir];
                argv.extend_from_slice(args);
                super::process::run(&argv)
            }
            None => self.dxdp.run(args),
        }
    }

    fn pins(&self) -> &Dxdp {
        &self.dxdp
    }
}
