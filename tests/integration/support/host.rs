//! Interfaces of the host namespace, and containers' interfaces seen from the host (sysfs, procfs,
//! `ip`, `ethtool`).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use super::process::{in_ns, must};

pub fn host_iface_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

fn sysfs_number(name: &str, file: &str) -> u64 {
    let path = Path::new("/sys/class/net").join(name).join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

/// ifindex of an interface in the host namespace (the tests' own).
pub fn host_ifindex(name: &str) -> u32 {
    sysfs_number(name, "ifindex") as u32
}

/// Frames the kernel sent out of a host interface; for a bridge port, what the bridge forwarded
/// to it.
pub fn host_tx_packets(name: &str) -> u64 {
    sysfs_number(name, "statistics/tx_packets")
}

/// Id of the XDP program attached to a host interface, in any mode, per `ip -d link show`.
pub fn xdp_prog_id(name: &str) -> Option<u32> {
    let out = must(&["ip", "-d", "link", "show", "dev", name]);
    let rest = &out[out.find("prog/xdp id ")? + "prog/xdp id ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some(digits.parse().expect("numeric XDP program id"))
}

/// `ethtool -k IFACE` inside a namespace, as feature name -> "on"/"off".
pub fn ethtool_features(ns: &str, ifname: &str) -> BTreeMap<String, String> {
    let out = must(&in_ns(ns, &["ethtool", "-k", ifname]));
    out.lines()
        .skip(1) // "Features for IFACE:"
        .filter_map(|line| {
            let (name, value) = line.trim().split_once(':')?;
            let value = value.split_whitespace().next()?;
            Some((name.to_owned(), value.to_owned()))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Containers' interfaces seen from the host

/// ifindex of every interface of the host namespace, by name.
pub fn host_ifindexes() -> std::collections::BTreeMap<u32, String> {
    let mut out = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir("/sys/class/net")
        .expect("/sys/class/net")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Ok(text) = std::fs::read_to_string(entry.path().join("ifindex"))
            && let Ok(ifindex) = text.trim().parse()
        {
            out.insert(ifindex, name);
        }
    }
    out
}

/// The host-side veth (name, ifindex) of the interface carrying `mac` inside the network
/// namespace of process `pid`, found through the container's own sysfs.
#[track_caller]
pub fn host_veth(pid: u32, mac: &str) -> (String, u32) {
    let (_, iflink) = container_iface(pid, mac);
    let name = host_ifindexes()
        .remove(&iflink)
        .unwrap_or_else(|| panic!("no host interface has ifindex {iflink} (peer of {mac})"));
    (name, iflink)
}

/// The interface carrying `mac` inside the network namespace of process `pid`: its name there,
/// and the ifindex of its peer (a veth's other end, in whichever namespace it is), found through
/// the container's own sysfs.
#[track_caller]
pub fn container_iface(pid: u32, mac: &str) -> (String, u32) {
    let root = PathBuf::from(format!("/proc/{pid}/root/sys/class/net"));
    let mac = mac.to_ascii_lowercase();
    for entry in std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .flatten()
    {
        let address = std::fs::read_to_string(entry.path().join("address")).unwrap_or_default();
        if address.trim() != mac {
            continue;
        }
        let iflink: u32 = std::fs::read_to_string(entry.path().join("iflink"))
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("iflink of {}: {e}", entry.path().display()));
        return (entry.file_name().to_string_lossy().into_owned(), iflink);
    }
    panic!("process {pid} has no interface with MAC {mac}");
}

/// Received packets of an interface inside the network namespace of `pid` (/proc/PID/net/dev).
pub fn netns_rx_packets(pid: u32, ifname: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).expect("/proc/PID/net/dev");
    text.lines()
        .find_map(|l| {
            let (name, rest) = l.split_once(':')?;
            (name.trim() == ifname).then(|| rest.split_whitespace().nth(1)?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {ifname} in /proc/{pid}/net/dev"))
}

/// A TCP port on 127.0.0.1 free a moment ago, for a server the test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The mount holding `path` made shared for a test's run when it is neither shared nor a slave
/// (a host not booted with systemd): Docker refuses an `rslave` bind of a path on a private
/// mount. Made private again on drop.
pub struct SharedMount {
    /// The mount point changed, if one was.
    changed: Option<String>,
}

impl SharedMount {
    #[track_caller]
    pub fn ensure(path: &str) -> Self {
        let path = std::fs::canonicalize(path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .to_string_lossy()
            .into_owned();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let (point, line) = mount_holding(&mountinfo, &path)
            .unwrap_or_else(|| panic!("no mount holds {path} in:\n{mountinfo}"));
        if line.contains(" shared:") || line.contains(" master:") {
            return Self { changed: None };
        }
        must(&["mount", "--make-shared", point]);
        Self {
            changed: Some(point.to_owned()),
        }
    }
}

impl Drop for SharedMount {
    fn drop(&mut self) {
        if let Some(point) = &self.changed {
            super::process::quietly(&["mount", "--make-private", point]);
        }
    }
}

/// The mount point holding `path` (the longest one that is `path` or an ancestor) and its
/// mountinfo line; the last mounted where several share the point.
fn mount_holding<'m>(mountinfo: &'m str, path: &str) -> Option<(&'m str, &'m str)> {
    let holds = |point: &str| {
        point == "/"
            || path == point
            || path
                .strip_prefix(point)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    mountinfo
        .lines()
        .filter_map(|line| Some((line.split_whitespace().nth(4)?, line)))
        .filter(|(point, _)| holds(point))
        .fold(
            None,
            |best: Option<(&str, &str)>, (point, line)| match best {
                Some((b, _)) if b.len() > point.len() => best,
                _ => Some((point, line)),
            },
        )
}

#[cfg(test)]
mod tests {
    use super::mount_holding;

    #[test]
    fn the_mount_holding_a_path_is_its_longest_ancestor_mount() {
        let mountinfo = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
                         49 27 254:0 /run/netns /run/netns rw shared:2 - ext4 /dev/vda rw\n\
                         63 27 0:4 net:[1] /run/docker/netns/x rw - nsfs nsfs rw\n";
        assert_eq!(mount_holding(mountinfo, "/run").map(|m| m.0), Some("/"));
        assert_eq!(
            mount_holding(mountinfo, "/run/netns/a").map(|m| m.0),
            Some("/run/netns")
        );
        assert_eq!(mount_holding(mountinfo, "/runx").map(|m| m.0), Some("/"));
    }
}
