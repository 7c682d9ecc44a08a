//! Where dxdp keeps its state on bpffs:
//! `ROOT/maps/DXDP_*`, `ROOT/progs/{dxdp_tc,dxdp_xdp,dxdp_tunnel}`,
//! `ROOT/links/{tc,xdp,tunnel}-IFINDEX`.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use dxdp_common::names;

use super::Kind;

const TUNNEL_LINK_PREFIX: &str = "tunnel-";

pub struct Pins {
    root: PathBuf,
}

impl Pins {
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn maps(&self) -> PathBuf {
        self.root.join("maps")
    }

    pub(crate) fn progs(&self) -> PathBuf {
        self.root.join("progs")
    }

    pub(crate) fn links(&self) -> PathBuf {
        self.root.join("links")
    }

    pub(crate) fn prog(&self, kind: Kind) -> PathBuf {
        self.progs().join(match kind {
            Kind::Tc => names::TC_PROGRAM,
            Kind::Xdp => names::XDP_PROGRAM,
        })
    }

    pub(crate) fn link(&self, kind: Kind, ifindex: u32) -> PathBuf {
        self.links().join(format!("{kind}-{ifindex}"))
    }

    /// The program on an overlay's VXLAN device, for links to tasks of other nodes.
    pub(crate) fn tunnel_prog(&self) -> PathBuf {
        self.progs().join(names::TUNNEL_PROGRAM)
    }

    /// Its attachment to the VXLAN device `ifindex` (not a `KIND-IFINDEX` name: the device is
    /// no endpoint, and what tidies endpoints' attachments leaves it alone).
    pub(crate) fn tunnel_link(&self, ifindex: u32) -> PathBuf {
        self.links().join(format!("{TUNNEL_LINK_PREFIX}{ifindex}"))
    }

    /// Checks the root is on bpffs and creates the directories.
    pub(crate) fn prepare(&self) -> Result<()> {
        self.check()?;
        // Never writable by others, whatever the umask: whoever may unlink a pin may detach a
        // link. (Pinned objects themselves are made 0600 by the kernel.)
        use std::os::unix::fs::DirBuilderExt;
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true).mode(0o755);
        for dir in [self.root.clone(), self.maps(), self.progs(), self.links()] {
            builder
                .create(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        Ok(())
    }

    /// What [`Pins::prepare`] checks, and, where the root does not exist yet, that it could be
    /// created (a bpffs mount that a sandbox made read-only cannot hold it), without creating
    /// anything.
    pub(crate) fn check_usable(&self) -> Result<()> {
        self.check()?;
        if let Some(existing) = self.root.ancestors().find(|dir| dir.exists())
            && existing != self.root
        {
            nix::unistd::access(existing, nix::unistd::AccessFlags::W_OK).with_context(|| {
                format!(
                    "pin directory {}: cannot create it in {}; make that writable (under \
                     systemd: ReadWritePaths=) or choose another --pin-dir",
                    self.root.display(),
                    existing.display()
                )
            })?;
        }
        Ok(())
    }

    /// The root is on bpffs, where nobody else can rename it away or write its directories.
    fn check(&self) -> Result<()> {
        // The nearest directory that exists: an overlay sandbox's root is two levels below
        // the pin directory, which may not exist yet either.
        let parent = self.root.parent().unwrap_or(Path::new("/"));
        let probe = self
            .root
            .ancestors()
            .find(|dir| dir.exists())
            .unwrap_or(parent);
        let fs = nix::sys::statfs::statfs(probe).with_context(|| {
            format!(
                "pin directory {}: {} is not there; mount bpffs with `mount -t bpf bpf /sys/fs/bpf`",
                self.root.display(),
                probe.display()
            )
        })?;
        if fs.filesystem_type() != nix::sys::statfs::BPF_FS_MAGIC {
            bail!(
                "pin directory {}: {} is not on a BPF filesystem; mount it with \
                 `mount -t bpf bpf /sys/fs/bpf` or choose a --pin-dir under a bpffs mount",
                self.root.display(),
                probe.display()
            );
        }
        check_ancestors(&self.root)?;
        for dir in [self.root.clone(), self.maps(), self.progs(), self.links()] {
            check_private(&self.root, &dir)?;
        }
        Ok(())
    }
}

/// Refuses a pin directory that another user could rename away (and put something else in its
/// place): renaming needs write permission on the parent, so every ancestor must belong to root
/// (or to us) and, where others may write it, carry the sticky bit, as `/sys/fs/bpf` (1777) does.
/// Otherwise `status` would say "no links" and `cleanup` "nothing to clean" while the renamed
/// links kept redirecting.
pub fn check_ancestors(root: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    for dir in root.ancestors().skip(1) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let meta = match std::fs::metadata(dir) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", dir.display())),
        };
        let mode = meta.mode() & 0o7777;
        let problem = if meta.uid() != me && meta.uid() != 0 {
            Some(format!("belongs to uid {}", meta.uid()))
        } else if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            Some(format!(
                "is writable by others without the sticky bit (mode {mode:04o})"
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            bail!(
                "pin directory {}: its parent {} {problem}, so another user could rename the pin \
                 directory away while its links keep redirecting; choose another --pin-dir, \
                 whose every parent belongs to root",
                root.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

/// Refuses a pin directory that another user owns or may write: `/sys/fs/bpf` is usually
/// world-writable (sticky), so anyone can create `/sys/fs/bpf/dxdp` first and plant maps or
/// programs for a root `dxdp` to adopt, or unlink its pins (which detaches links).
fn check_private(root: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", dir.display())),
    };
    let me = nix::unistd::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    let problem = if !meta.is_dir() {
        Some("is not a directory".to_owned())
    } else if meta.uid() != me {
        Some(format!("belongs to uid {}, not to uid {me}", meta.uid()))
    } else if mode & 0o022 != 0 {
        Some(format!("is writable by others (mode {mode:04o})"))
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(problem) => bail!(
            "pin directory {}: {} {problem}; another user could plant or unpin dxdp's maps \
             and programs there. Remove it (`rm -r {}`) if nothing of yours is linked through \
             it, or choose another --pin-dir",
            root.display(),
            dir.display(),
            root.display()
        ),
    }
}

/// Whether `path` is on a BPF filesystem.
pub fn on_bpffs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::BPF_FS_MAGIC)
}

/// The file names and paths in the attachments directory; none when it does not exist yet.
fn link_pin_entries(pins: &Pins) -> Result<Vec<(String, PathBuf)>> {
    let dir = pins.links();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        out.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.path(),
        ));
    }
    Ok(out)
}

/// Pinned attachments of `ifindex`, by parsing `KIND-IFINDEX` file names.
pub(super) fn link_pins(pins: &Pins) -> Result<Vec<(Kind, u32, PathBuf)>> {
    Ok(link_pin_entries(pins)?
        .into_iter()
        .filter_map(|(name, path)| {
            let (kind, ifindex) = name.split_once('-')?;
            Some((
                kind.parse::<Kind>().ok()?,
                ifindex.parse::<u32>().ok()?,
                path,
            ))
        })
        .collect())
}

/// Attachments to VXLAN devices, by the device's ifindex.
pub(super) fn tunnel_link_pins(pins: &Pins) -> Result<Vec<(u32, PathBuf)>> {
    prefixed_link_pins(pins, TUNNEL_LINK_PREFIX)
}

/// Attachments pinned as `PREFIX` and an ifindex, by the ifindex (`egress-` takes no
/// `egress-back-` pin: what follows the prefix must be a number).
pub(super) fn prefixed_link_pins(pins: &Pins, prefix: &str) -> Result<Vec<(u32, PathBuf)>> {
    Ok(link_pin_entries(pins)?
        .into_iter()
        .filter_map(|(name, path)| {
            let ifindex = name.strip_prefix(prefix)?.parse::<u32>().ok()?;
            Some((ifindex, path))
        })
        .collect())
}

/// Unpinning the last reference to a bpf_link detaches its program.
pub(super) fn remove_link_pins(pins: &Pins, ifindex: u32) -> Result<()> {
    for kind in [Kind::Tc, Kind::Xdp] {
        remove_if_present(&pins.link(kind, ifindex))?;
    }
    Ok(())
}

pub(super) fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot unpin {}", path.display())),
    }
}

/// Removes the whole pin tree; bpffs has no recursive unlink, so walk it.
pub(super) fn remove_all(root: &Path) -> Result<()> {
    if !root.exists() {
        return Ok(());
    }
    for sub in ["links", "progs", "maps"] {
        let dir = root.join(sub);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                remove_if_present(&entry.path())?;
            }
        }
        if dir.exists() {
            std::fs::remove_dir(&dir)
                .with_context(|| format!("cannot remove {}", dir.display()))?;
        }
    }
    std::fs::remove_dir(root).with_context(|| format!("cannot remove {}", root.display()))
}
