//! The kernel's host-wide RCU expedite switch (`/sys/kernel/rcu_expedited`), which
//! `dxdp watch --expedite-rcu` turns on while it attaches: a guard that puts the value the test
//! found back, and a sampler that tells whether the switch was on meanwhile.

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread,
    time::Duration,
};

pub const RCU_EXPEDITED: &str = "/sys/kernel/rcu_expedited";
/// Where dxdp notes that it turned the switch on (src/rcu.rs).
pub const RCU_MARKER: &str = "/run/dxdp/rcu_expedited";

pub fn rcu_expedited() -> u8 {
    let text = std::fs::read_to_string(RCU_EXPEDITED)
        .unwrap_or_else(|e| panic!("cannot read {RCU_EXPEDITED}: {e}"));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{RCU_EXPEDITED}: {text:?}: {e}"))
}

pub fn set_rcu_expedited(value: u8) {
    std::fs::write(RCU_EXPEDITED, format!("{value}\n"))
        .unwrap_or_else(|e| panic!("cannot write {value} to {RCU_EXPEDITED}: {e}"));
}

/// Puts back the switch as the test found it, and removes a marker the test left, on drop.
pub struct RcuSwitchGuard {
    found: u8,
}

impl RcuSwitchGuard {
    /// Remembers the switch, then sets it to `value` for the test.
    pub fn set(value: u8) -> Self {
        assert!(
            !Path::new(RCU_MARKER).exists(),
            "{RCU_MARKER} exists: a dxdp has the RCU switch on (or died with it on); this test \
             would take it for its own"
        );
        let guard = Self {
            found: rcu_expedited(),
        };
        set_rcu_expedited(value);
        guard
    }
}

impl Drop for RcuSwitchGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(RCU_MARKER);
        if let Err(e) = std::fs::write(RCU_EXPEDITED, format!("{}\n", self.found)) {
            eprintln!(
                "cleanup: cannot put {RCU_EXPEDITED} back to {}: {e}",
                self.found
            );
        }
    }
}

/// Reads the switch every 200 µs on a thread of its own until [`RcuSampler::stop`].
pub struct RcuSampler {
    stop: Arc<AtomicBool>,
    on: Arc<AtomicUsize>,
    samples: Arc<AtomicUsize>,
    thread: Option<thread::JoinHandle<()>>,
}

impl RcuSampler {
    pub fn start() -> Self {
        let (stop, on, samples) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let thread = {
            let (stop, on, samples) = (stop.clone(), on.clone(), samples.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if rcu_expedited() != 0 {
                        on.fetch_add(1, Ordering::Relaxed);
                    }
                    samples.fetch_add(1, Ordering::Relaxed);
                    thread::sleep(Duration::from_micros(200));
                }
            })
        };
        Self {
            stop,
            on,
            samples,
            thread: Some(thread),
        }
    }

    /// Stops sampling; returns (samples that saw the switch on, samples).
    pub fn stop(mut self) -> (usize, usize) {
        self.halt();
        (
            self.on.load(Ordering::Relaxed),
            self.samples.load(Ordering::Relaxed),
        )
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RcuSampler {
    fn drop(&mut self) {
        self.halt();
    }
}
