//! Links on Swarm overlay networks: where their veths live and where their state is pinned.
//!
//! On each node, an overlay network has one sandbox namespace, bind-mounted by dockerd at
//! `<exec-root>/netns/1-<first 10 characters of the network id>`. It holds the network's
//! bridge `br0`, its VXLAN device and the far end of every local task's veth. Two tasks of one
//! node talk veth → br0 → veth inside it, so a link between them is the bridge link of
//! `crate::datapath`, made inside the sandbox: the sandbox plays the host's part (its
//! interfaces, its firewall rules, its br_netfilter switches), which is why everything here
//! runs on a thread that entered it (`NetnsPath::host()` is the calling thread's namespace).
//!
//! Each sandbox gets its own pinned datapath under `<pin dir>/overlay/<sandbox>@<inode>`: the
//! ifindexes of its veths are the sandbox's and would collide with the host's in one map. The
//! inode in the name tells a sandbox from a later one of the same name (the network removed and
//! made again), so the state of a sandbox that is gone is found and removed.
use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, bail};

use crate::{
    endpoint::Endpoint,
    netlink::{self, Interface},
    netns::NetnsPath,
};

/// Where dxdp looks for dockerd's exec-root when `DXDP_DOCKER_EXEC_ROOT` is not set: dockerd's
/// default.
pub const DEFAULT_EXEC_ROOT: &str = "/var/run/docker";
/// Names dockerd's `--exec-root` when it is not the default.
pub const EXEC_ROOT_ENV: &str = "DXDP_DOCKER_EXEC_ROOT";
/// The pin directory's subdirectory holding one directory per sandbox.
const SITES_DIR: &str = "overlay";

/// An overlay network's sandbox namespace on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    /// `1-<network id prefix>`, as dockerd names it.
    pub name: String,
    pub netns: NetnsPath,
    pub inode: u64,
}

fn exec_root() -> PathBuf {
    std::env::var_os(EXEC_ROOT_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_EXEC_ROOT))
}

/// The sandbox's name for a network id: libnetwork's `osl.GenerateKey("1-" + id)` keeps the
/// first 12 characters.
pub fn sandbox_name(network_id: &str) -> String {
    let key = format!("1-{network_id}");
    key.chars().take(12).collect()
}

impl Sandbox {
    /// The sandbox of the overlay network `network_id` (called `network` for the user).
    pub fn of_network(network: &str, network_id: &str) -> Result<Self> {
        let name = sandbox_name(network_id);
        let root = exec_root();
        let path = root.join("netns").join(&name);
        let Ok(meta) = std::fs::metadata(&path) else {
            bail!(
                "overlay network {network} has no sandbox namespace on this node at {} (no \
                 local task on it yet, or dockerd's --exec-root is not {}: set {EXEC_ROOT_ENV})",
                path.display(),
                root.display()
            );
        };
        Ok(Self {
            name,
            netns: NetnsPath::at(path),
            inode: meta.ino(),
        })
    }

    /// The directory this sandbox's datapath is pinned in.
    pub fn pin_dir(&self, pin_dir: &Path) -> PathBuf {
        sites_dir(pin_dir).join(format!("{}@{}", self.name, self.inode))
    }

    /// Runs `work` on a thread inside the sandbox, where it is the "host" of the links.
    pub fn run<T: Send>(&self, work: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        self.netns
            .run(work)
            .with_context(|| format!("in the sandbox {} of an overlay network", self.name))
    }
}

/// Runs `work` with the pin directory of the datapath that holds links of `sandbox` (the host's
/// own for `None`), inside the sandbox when there is one.
pub fn in_site<T: Send>(
    sandbox: Option<&Sandbox>,
    pin_dir: &Path,
    work: impl FnOnce(&Path) -> Result<T> + Send,
) -> Result<T> {
    match sandbox {
        None => work(pin_dir),
        Some(sandbox) => sandbox.run(|| work(&sandbox.pin_dir(pin_dir))),
    }
}

fn sites_dir(pin_dir: &Path) -> PathBuf {
    pin_dir.join(SITES_DIR)
}

/// A sandbox's pinned datapath, found under the pin directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    pub pin_dir: PathBuf,
    /// The sandbox, when the namespace named by the directory is still there; `None` when it
    /// is gone (or replaced by another of the same name), and its state with it.
    pub sandbox: Option<Sandbox>,
    /// The sandbox's name, from the directory's.
    pub name: String,
}

/// `NAME@INODE` into its parts.
fn parse_site(dir_name: &str) -> Option<(&str, u64)> {
    let (name, inode) = dir_name.rsplit_once('@')?;
    (name.starts_with("1-") && !name.contains('/')).then_some(())?;
    Some((name, inode.parse().ok()?))
}

/// Every sandbox's pinned datapath under `pin_dir`, live or not, by name.
pub fn sites(pin_dir: &Path) -> Vec<Site> {
    let root = exec_root().join("netns");
    let mut out: Vec<Site> = std::fs::read_dir(sites_dir(pin_dir))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let (name, inode) = parse_site(&file_name)?;
            let path = root.join(name);
            let live = std::fs::metadata(&path).is_ok_and(|m| m.ino() == inode);
            Some(Site {
                pin_dir: entry.path(),
                sandbox: live.then(|| Sandbox {
                    name: name.to_owned(),
                    netns: NetnsPath::at(path),
                    inode,
                }),
                name: name.to_owned(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.pin_dir.cmp(&b.pin_dir));
    out
}

/// Removes every sandbox's pinned state and the directory holding them (`dxdp cleanup`, after
/// the live ones' links were removed from inside them).
pub fn remove_all_sites(pin_dir: &Path) -> Result<()> {
    let dir = sites_dir(pin_dir);
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove {}", dir.display()))
        }
        _ => Ok(()),
    }
}

/// Removes the pinned state of sandboxes that are gone: their veths went with them, so their
/// programs redirect nothing, and unpinning frees them. Returns the names removed.
pub fn remove_dead_sites(pin_dir: &Path) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for site in sites(pin_dir).into_iter().filter(|s| s.sandbox.is_none()) {
        std::fs::remove_dir_all(&site.pin_dir)
            .with_context(|| format!("cannot remove {}", site.pin_dir.display()))?;
        removed.push(site.name);
    }
    if !removed.is_empty() {
        // The last site gone: the directory itself, so that `cleanup` leaves nothing.
        let _ = std::fs::remove_dir(sites_dir(pin_dir));
    }
    Ok(removed)
}

/// A task of another node as one end of a link made in this node's sandbox (the calling
/// thread's namespace, whose interfaces are `here`): reached through the VXLAN device on
/// `bridge` (the local end's `br0`), where Swarm's gossip put a permanent neighbour entry for
/// the task's address `addr` with its MAC, which gives its endpoint id.
pub fn remote_endpoint(
    label: &str,
    addr: std::net::IpAddr,
    bridge: &Endpoint,
    here: &[Interface],
) -> Result<Endpoint> {
    let tunnels = here
        .iter()
        .filter(|i| i.kind.as_deref() == Some("vxlan") && i.master == Some(bridge.bridge_ifindex));
    for tunnel in tunnels {
        if let Some(ep) = through(
            label,
            addr,
            tunnel,
            bridge.bridge_ifindex,
            &bridge.bridge_name,
        )? {
            return Ok(ep);
        }
    }
    bail!(
        "task {label} ({addr}) runs on another node, but the overlay's VXLAN device on {} has no \
         entry for it yet (Swarm's gossip adds it within seconds of the task starting); try \
         again",
        bridge.bridge_name
    )
}

/// [`remote_endpoint`] for the watch, which resolves each end on its own: the task behind any
/// VXLAN device of this sandbox that hangs on a bridge (an overlay's sandbox has one of each).
pub fn remote_task_endpoint(
    label: &str,
    addr: std::net::IpAddr,
    here: &[Interface],
) -> Result<Endpoint> {
    for tunnel in here.iter().filter(|i| i.kind.as_deref() == Some("vxlan")) {
        let Some(bridge) = tunnel
            .master
            .and_then(|m| here.iter().find(|i| i.index == m))
        else {
            continue;
        };
        if let Some(ep) = through(label, addr, tunnel, bridge.index, &bridge.name)? {
            return Ok(ep);
        }
    }
    bail!(
        "task {label} ({addr}) runs on another node, but no VXLAN device of this sandbox has an \
         entry for it yet (Swarm's gossip adds it within seconds of the task starting)"
    )
}

/// The task at `addr` behind the VXLAN device `tunnel` (on the bridge `bridge_ifindex`), if
/// gossip put its neighbour entry there.
fn through(
    label: &str,
    addr: std::net::IpAddr,
    tunnel: &Interface,
    bridge_ifindex: u32,
    bridge_name: &str,
) -> Result<Option<Endpoint>> {
    let neighbours = netlink::permanent_neighbours(tunnel.index)?;
    Ok(neighbours
        .into_iter()
        .find(|(a, _)| *a == addr)
        .map(|(_, mac)| Endpoint {
            label: label.to_owned(),
            netns: NetnsPath::host(),
            netns_ino: 0,
            ifname: String::new(),
            ifindex: 0,
            mac,
            host_ifname: tunnel.name.clone(),
            host_ifindex: dxdp_common::remote_endpoint_id(&mac),
            bridge_ifindex,
            bridge_name: bridge_name.to_owned(),
            addrs: vec![addr],
            tunnel_ifindex: Some(tunnel.index),
        }))
}

#[cfg(test)]
mod tests {
    /// A task's endpoint id is its MAC's last 31 bits above 2^31: an overlay's `02:42` + IPv4
    /// MACs keep their address, so the tasks of one subnet never share one, even where the
    /// address's top bit is dropped.
    #[test]
    fn a_remote_tasks_endpoint_id_is_its_address_above_2_pow_31() {
        use dxdp_common::{REMOTE_ENDPOINT_BASE, is_remote_endpoint, remote_endpoint_id};
        let ten = remote_endpoint_id(&[0x02, 0x42, 10, 240, 220, 4]);
        assert_eq!(ten, REMOTE_ENDPOINT_BASE | 0x0af0_dc04);
        assert!(is_remote_endpoint(ten) && !is_remote_endpoint(ten & !REMOTE_ENDPOINT_BASE));
        let ids: std::collections::HashSet<u32> = (0..=255u8)
            .map(|host| remote_endpoint_id(&[0x02, 0x42, 192, 168, 7, host]))
            .collect();
        assert_eq!(ids.len(), 256);
        assert!(ids.iter().all(|id| is_remote_endpoint(*id)));
    }

    use super::*;

    #[test]
    fn the_sandbox_is_named_as_libnetwork_names_it() {
        // A swarm-scoped network id (25 characters) and a local one (64).
        assert_eq!(sandbox_name("qqxh7f1pd1neffvl5oibv86zl"), "1-qqxh7f1pd1");
        assert_eq!(
            sandbox_name("53d14924c787c63386dd531eac63cc37e69d10d0b42414d5c4312fcca2cddc1f"),
            "1-53d14924c7"
        );
    }

    #[test]
    fn site_directories_name_a_sandbox_and_its_inode() {
        assert_eq!(
            parse_site("1-qqxh7f1pd1@4026532001"),
            Some(("1-qqxh7f1pd1", 4026532001))
        );
        for bad in ["1-qqxh7f1pd1", "lb_qqxh7f1pd@12", "1-x@", "1-x@y", "@12"] {
            assert_eq!(parse_site(bad), None, "{bad}");
        }
    }
}
