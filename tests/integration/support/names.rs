//! Names of what the tests make. Every name carries the test process's pid and a per-process
//! counter (`dxt-<pid>-<n>` for namespaces, containers and networks, `dxt<pid hex>-<k>` for
//! interfaces, which have 15 characters at most), so that tests never collide with each other nor
//! touch anything they did not make.

use std::sync::atomic::{AtomicU32, Ordering};

static NEXT_TOPOLOGY: AtomicU32 = AtomicU32::new(0);
static NEXT_IFACE: AtomicU32 = AtomicU32::new(0);

/// A fresh number for this test process.
pub fn next_id() -> u32 {
    NEXT_TOPOLOGY.fetch_add(1, Ordering::Relaxed)
}

/// A fresh interface name of this process, at most 15 characters: `dxt<pid hex>-<k>`.
pub fn iface_name() -> String {
    let name = format!(
        "dxt{:x}-{}",
        std::process::id(),
        NEXT_IFACE.fetch_add(1, Ordering::Relaxed)
    );
    assert!(name.len() < 16, "interface name {name} is too long");
    name
}
