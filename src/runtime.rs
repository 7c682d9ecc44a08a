//! Whether the engine's OCI runtime can start a container on this host's cgroup layout.
//!
//! crun refuses every container on a hybrid host (cgroup v1 controllers under /sys/fs/cgroup,
//! plus a cgroup v2 hierarchy at /sys/fs/cgroup/unified) as soon as that v2 hierarchy holds any
//! controller: libcrun reads `/sys/fs/cgroup/unified/cgroup.controllers` and fails with "cgroups
//! in hybrid mode not supported, drop all controllers from cgroupv2" when it is not empty. Podman
//! prefers crun whenever it is installed, so a Debian 12 host that installs podman gets it.
use std::{fs, path::Path};

use nix::sys::statfs::{CGROUP2_SUPER_MAGIC, statfs};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// How the host mounts its cgroups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgroupLayout {
    /// cgroup v2 only, at /sys/fs/cgroup.
    Unified,
    /// cgroup v1 only.
    Legacy,
    /// cgroup v1 controllers plus a v2 hierarchy at /sys/fs/cgroup/unified holding these
    /// controllers (often none: systemd's default hybrid tracks processes only).
    Hybrid { v2_controllers: Vec<String> },
}

impl CgroupLayout {
    /// The layout of this host, as crun determines it.
    pub fn host() -> Self {
        Self::under(Path::new(CGROUP_ROOT))
    }

    fn under(root: &Path) -> Self {
        let is_v2 = |p: &Path| statfs(p).is_ok_and(|s| s.filesystem_type() == CGROUP2_SUPER_MAGIC);
        let unified = root.join("unified");
        if is_v2(root) {
            Self::Unified
        } else if is_v2(&unified) {
            let controllers =
                fs::read_to_string(unified.join("cgroup.controllers")).unwrap_or_default();
            Self::Hybrid {
                v2_controllers: controllers.split_whitespace().map(str::to_owned).collect(),
            }
        } else {
            Self::Legacy
        }
    }
}

/// An engine's OCI runtime: its name (`crun`, `runc`) and the first line of its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciRuntime {
    pub name: String,
    pub version: String,
}

/// Why `runtime` cannot start a container on `layout`, or `None` when nothing known stops it.
pub fn refusal(runtime: &OciRuntime, layout: &CgroupLayout) -> Option<String> {
    let is_crun = runtime.name == "crun" || runtime.name.ends_with("/crun");
    match layout {
        CgroupLayout::Hybrid { v2_controllers } if is_crun && !v2_controllers.is_empty() => {
            Some(format!(
                "this host's cgroups are hybrid and its cgroup v2 hierarchy holds controllers \
                 ({}), which crun refuses for every container (\"cgroups in hybrid mode not \
                 supported, drop all controllers from cgroupv2\")",
                v2_controllers.join(" ")
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime(name: &str) -> OciRuntime {
        OciRuntime {
            name: name.to_owned(),
            version: String::new(),
        }
    }

    fn hybrid(controllers: &[&str]) -> CgroupLayout {
        CgroupLayout::Hybrid {
            v2_controllers: controllers.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    #[test]
    fn crun_is_refused_only_on_a_hybrid_host_whose_v2_hierarchy_holds_controllers() {
        let why = refusal(&runtime("crun"), &hybrid(&["hugetlb"])).expect("refused");
        assert!(why.contains("hugetlb") && why.contains("hybrid"), "{why}");
        assert!(refusal(&runtime("/usr/bin/crun"), &hybrid(&["hugetlb"])).is_some());
        assert_eq!(refusal(&runtime("crun"), &hybrid(&[])), None);
        assert_eq!(refusal(&runtime("crun"), &CgroupLayout::Unified), None);
        assert_eq!(refusal(&runtime("crun"), &CgroupLayout::Legacy), None);
        assert_eq!(refusal(&runtime("runc"), &hybrid(&["hugetlb"])), None);
    }

    #[test]
    fn a_directory_that_is_no_cgroup_mount_reads_as_legacy() {
        let dir = std::env::temp_dir();
        assert_eq!(CgroupLayout::under(&dir), CgroupLayout::Legacy);
    }
}
