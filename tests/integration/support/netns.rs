//! Code run inside another network namespace. setns(2) switches only the calling thread, so the
//! code runs on a thread of its own that enters the namespace and ends with the work; a socket
//! opened there stays in that namespace wherever it is used afterwards.

use std::{
    fs::File,
    path::{Path, PathBuf},
};

use nix::sched::{CloneFlags, setns};

/// The namespace `ip netns add NAME` made.
pub fn named_netns(name: &str) -> PathBuf {
    Path::new("/run/netns").join(name)
}

/// The network namespace of process `pid` (a container's, for its main process).
pub fn netns_of(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/ns/net"))
}

/// Runs `work` on a thread inside the network namespace at `ns` and returns what it returns; a
/// panic in `work` goes on in the caller.
#[track_caller]
pub fn in_netns<T: Send + 'static>(ns: &Path, work: impl FnOnce() -> T + Send + 'static) -> T {
    let path = ns.to_owned();
    let file = File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::thread::spawn(move || {
        setns(&file, CloneFlags::CLONE_NEWNET)
            .unwrap_or_else(|e| panic!("cannot enter {}: {e}", path.display()));
        work()
    })
    .join()
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}
