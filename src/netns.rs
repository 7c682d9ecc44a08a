//! Running code inside another network namespace.
//!
//! `setns` switches only the calling thread, and an async runtime moves tasks between threads, so
//! every excursion gets a fresh OS thread that enters the namespace, does its work and exits.
//! Nothing else ever runs on that thread, so it never has to switch back.
use std::{
    fs::File,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, anyhow};
use nix::sched::{CloneFlags, setns};

/// Why a namespace's inode could not be read: a process that may not open another's namespace
/// (it lacks ptrace access to it) will not be let in later either, where a namespace that went
/// only means its container stopped.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error(
        "cannot open network namespace {path}: dxdp needs root with CAP_SYS_PTRACE to enter \
         other processes' namespaces"
    )]
    Denied {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("network namespace {path} is not there")]
    Gone {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Where a network namespace can be opened: a named one under /run/netns or a process's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetnsPath(PathBuf);

impl NetnsPath {
    pub fn named(name: &str) -> Self {
        Self(Path::new("/run/netns").join(name))
    }

    pub(crate) fn of_pid(pid: u32) -> Self {
        Self(PathBuf::from(format!("/proc/{pid}/ns/net")))
    }

    /// The namespace the calling thread is in: the host's, except on a thread that entered
    /// an overlay network's sandbox to manage the links there (see `crate::overlay`), where
    /// the sandbox plays the host's part (its veths' far ends, its bridge, its rules).
    pub fn host() -> Self {
        Self(PathBuf::from("/proc/thread-self/ns/net"))
    }

    /// A namespace bind-mounted at `path` (an overlay sandbox under dockerd's exec-root).
    pub(crate) fn at(path: PathBuf) -> Self {
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The namespace's inode: equal inodes mean the same namespace.
    pub(crate) fn inode(&self) -> Result<u64, NetnsError> {
        let path = || self.0.display().to_string();
        match std::fs::metadata(&self.0) {
            Ok(meta) => Ok(meta.ino()),
            // Another process's namespace opens only with ptrace access to it.
            Err(source) if source.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(NetnsError::Denied {
                    path: path(),
                    source,
                })
            }
            Err(source) => Err(NetnsError::Gone {
                path: path(),
                source,
            }),
        }
    }

    /// Runs `work` on a dedicated thread inside this namespace and returns its result. The
    /// thread is scoped: `work` may borrow from the caller.
    pub(crate) fn run<T, F>(&self, work: F) -> Result<T>
    where
        T: Send,
        F: FnOnce() -> Result<T> + Send,
    {
        let path = self.0.clone();
        let ns = File::open(&path)
            .with_context(|| format!("cannot open network namespace {}", path.display()))?;
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("dxdp-netns".into())
                .spawn_scoped(scope, move || {
                    setns(&ns, CloneFlags::CLONE_NEWNET).with_context(|| {
                        format!("cannot enter network namespace {}", path.display())
                    })?;
                    work()
                })
                .context("cannot spawn a thread to enter a network namespace")?
                .join()
                .map_err(|_| anyhow!("thread inside network namespace panicked"))?
        })
    }
}

impl std::fmt::Display for NetnsPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.display().fmt(f)
    }
}

/// Finds a way into the namespace with inode `ino`: a named namespace or any process inside it.
/// Used to undo fix-ups when only the pinned state remembers where a container lived.
pub(crate) fn find_by_inode(ino: u64) -> Option<NetnsPath> {
    let named = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| NetnsPath(entry.path()));
    let procs = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .map(|entry| NetnsPath(entry.path().join("ns/net")));
    named
        .chain(procs)
        .find(|ns| ns.inode().is_ok_and(|i| i == ino))
}
