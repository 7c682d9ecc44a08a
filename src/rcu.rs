//! Expedited RCU grace periods while the watch attaches programs, when the operator asks for them
//! (`dxdp watch --expedite-rcu`).
//!
//! Every TCX attachment waits for a full RCU grace period with rtnl held
//! (`tcx_link_prog_attach()` → `tcx_entry_sync()` → `synchronize_rcu()`): about 12 ms each on a
//! 2-vCPU VM, and attachments made from several threads queue on rtnl, so a first reconcile of
//! 200 veths spends 2.4 s waiting. The kernel's only switch for that is host-wide: with
//! `/sys/kernel/rcu_expedited` at 1, every `synchronize_rcu()` on the host is expedited (it
//! interrupts the other CPUs instead of waiting for them to pass a quiescent state), which cuts
//! an attachment to a fraction of a millisecond but sends every CPU an interrupt per grace
//! period while it is on. So dxdp turns it on only when told to, only while a pass attaches, and
//! puts the previous value back as soon as the pass is done. A value the operator set (or
//! another dxdp, meanwhile) is left alone.
//!
//! SIGKILL skips destructors, so a watch killed meanwhile would leave the switch on. A marker,
//! written before the switch is turned on and removed after it is put back, names the process
//! (pid and start time) and the previous value; the next watch that starts finds a marker whose
//! process is gone and puts the value back ([`Switch::recover`]). The marker is in /run, which
//! like the switch starts afresh at boot.
use std::{
    fs,
    io::{ErrorKind, Write},
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, anyhow};
use tracing::warn;

const KNOB: &str = "/sys/kernel/rcu_expedited";
const MARKER: &str = "/run/dxdp/rcu_expedited";

/// The host's RCU switch and the marker that says dxdp turned it on.
pub struct Switch {
    knob: PathBuf,
    marker: PathBuf,
}

/// Who turned the switch on, and what it was before.
#[derive(Debug, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// Field 22 of /proc/PID/stat: a pid reused by another process does not pass for ours.
    start_time: u64,
    pub previous: u8,
}

impl Holder {
    fn this_process(previous: u8) -> Result<Self> {
        let pid = std::process::id();
        let start_time =
            start_time(pid).ok_or_else(|| anyhow!("cannot read this process's start time"))?;
        Ok(Self {
            pid,
            start_time,
            previous,
        })
    }

    fn parse(text: &str) -> Option<Self> {
        let mut words = text.split_whitespace();
        let holder = Self {
            pid: words.next()?.parse().ok()?,
            start_time: words.next()?.parse().ok()?,
            previous: words.next()?.parse().ok()?,
        };
        words.next().is_none().then_some(holder)
    }

    fn render(&self) -> String {
        format!("{} {} {}\n", self.pid, self.start_time, self.previous)
    }

    /// Whether the process that wrote the marker still runs.
    pub fn alive(&self) -> bool {
        start_time(self.pid) == Some(self.start_time)
    }
}

/// The start time of a process in clock ticks since boot, if it runs.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) is in parentheses and may hold spaces: count from its end.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Expedited grace periods, on until this is dropped.
pub struct Expedited<'s> {
    switch: &'s Switch,
    previous: u8,
}

impl Drop for Expedited<'_> {
    fn drop(&mut self) {
        // The switch first: a marker without the switch on is harmless, the reverse is not.
        if let Err(err) = self.switch.write(self.previous) {
            warn!(
                "cannot put {} back to {}: {err:#}; it stays on until the next watch starts \
                 or until `echo {} > {}`",
                self.switch.knob.display(),
                self.previous,
                self.previous,
                self.switch.knob.display()
            );
            return;
        }
        if let Err(err) = remove_marker(&self.switch.marker) {
            warn!("{err:#}");
        }
    }
}

impl Switch {
    pub fn host() -> Self {
        Self::at(Path::new(KNOB), Path::new(MARKER))
    }

    /// A switch and marker somewhere else: the unit tests use plain files.
    pub fn at(knob: &Path, marker: &Path) -> Self {
        Self {
            knob: knob.to_path_buf(),
            marker: marker.to_path_buf(),
        }
    }

    /// Fails, naming the file and the way out, if the switch cannot be turned: checked when the
    /// watch starts rather than at its first attachment.
    pub fn check(&self) -> Result<()> {
        self.read()?;
        nix::unistd::access(&self.knob, nix::unistd::AccessFlags::W_OK).with_context(|| {
            format!(
                "--expedite-rcu: cannot write {}; run dxdp as root where /sys is writable (a \
                 container needs --privileged), or leave --expedite-rcu out",
                self.knob.display()
            )
        })?;
        let dir = self.marker.parent().unwrap_or(Path::new("/"));
        fs::create_dir_all(dir).with_context(|| {
            format!(
                "--expedite-rcu: cannot create {}, where dxdp notes that it turned the switch on",
                dir.display()
            )
        })
    }

    pub fn read(&self) -> Result<u8> {
        let text = fs::read_to_string(&self.knob).with_context(|| {
            format!(
                "cannot read {}: this kernel has no RCU expedite switch",
                self.knob.display()
            )
        })?;
        text.trim()
            .parse()
            .with_context(|| format!("{}: unexpected {text:?}", self.knob.display()))
    }

    fn write(&self, value: u8) -> Result<()> {
        fs::write(&self.knob, format!("{value}\n"))
            .with_context(|| format!("cannot write {value} to {}", self.knob.display()))
    }

    /// Turns expedited grace periods on, until the returned guard drops. `None` when they are on
    /// already: the operator's setting, or another dxdp's that is still running.
    pub fn expedite(&self) -> Result<Option<Expedited<'_>>> {
        self.recover()?;
        if self.read()? != 0 {
            return Ok(None);
        }
        let holder = Holder::this_process(0)?;
        let mut marker = match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&self.marker)
        {
            Ok(file) => file,
            // Another dxdp between its marker and its switch: it is about to turn it on.
            Err(err) if err.kind() == ErrorKind::AlreadyExists => return Ok(None),
            Err(err) => {
                return Err(err)
                    .with_context(|| format!("cannot create {}", self.marker.display()));
            }
        };
        let written = marker
            .write_all(holder.render().as_bytes())
            .and_then(|()| marker.sync_all());
        if let Err(err) = written
            .map_err(anyhow::Error::from)
            .and_then(|()| self.write(1))
        {
            let _ = fs::remove_file(&self.marker);
            return Err(err);
        }
        Ok(Some(Expedited {
            switch: self,
            previous: holder.previous,
        }))
    }

    /// The dxdp that turned the switch on, if a readable marker says one did.
    pub fn holder(&self) -> Option<Holder> {
        Holder::parse(&fs::read_to_string(&self.marker).ok()?)
    }

    pub fn knob(&self) -> &Path {
        &self.knob
    }

    pub fn marker(&self) -> &Path {
        &self.marker
    }

    /// Puts the switch back for a dxdp that turned it on and died before it could: returns that
    /// process, or `None` if there was nothing to mend.
    pub fn recover(&self) -> Result<Option<Holder>> {
        let text = match fs::read_to_string(&self.marker) {
            Ok(text) => text,
            Err(err) if err.kind() == ErrorKind::NotFound => return Ok(None),
            Err(err) => {
                return Err(err).with_context(|| format!("cannot read {}", self.marker.display()));
            }
        };
        let Some(holder) = Holder::parse(&text) else {
            // Not ours to interpret: leave the switch as it is, but do not let the marker block
            // every later expedite.
            warn!(
                "{} holds {text:?}, not a pid, start time and value; removed it, the switch is \
                 left as it is",
                self.marker.display()
            );
            remove_marker(&self.marker)?;
            return Ok(None);
        };
        if holder.alive() {
            return Ok(None);
        }
        // Only undo our own doing: a switch found off was put back already, or by the operator.
        if self.read()? == 1 {
            self.write(holder.previous)?;
        }
        remove_marker(&self.marker)?;
        Ok(Some(holder))
    }
}

fn remove_marker(marker: &Path) -> Result<()> {
    match fs::remove_file(marker) {
        Err(err) if err.kind() != ErrorKind::NotFound => {
            Err(err).with_context(|| format!("cannot remove {}", marker.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake switch and marker in a directory of their own, removed on drop.
    struct Files {
        dir: PathBuf,
        switch: Switch,
    }

    impl Drop for Files {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    fn files(value: &str) -> Files {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("dxdp-rcu-{}-{n}", std::process::id()));
        fs::create_dir_all(dir.join("run")).expect("run");
        let knob = dir.join("rcu_expedited");
        fs::write(&knob, value).expect("knob");
        let switch = Switch::at(&knob, &dir.join("run/rcu_expedited"));
        Files { dir, switch }
    }

    /// The marker of a watch that turned the switch on (from 0) and died.
    fn dead_holder(f: &Files) -> Holder {
        let dead = Holder {
            pid: dead_pid(),
            start_time: 1,
            previous: 0,
        };
        fs::write(&f.switch.marker, dead.render()).expect("marker");
        dead
    }

    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().expect("true");
        let pid = child.id();
        child.wait().expect("wait");
        pid
    }

    #[test]
    fn expedites_while_held_and_puts_the_value_back() {
        let f = files("0\n");
        {
            let guard = f.switch.expedite().expect("expedite");
            assert!(guard.is_some());
            assert_eq!(f.switch.read().unwrap(), 1);
            let marker = fs::read_to_string(&f.switch.marker).expect("marker");
            let holder = Holder::parse(&marker).expect("a holder");
            assert_eq!(holder.pid, std::process::id());
            assert_eq!(holder.previous, 0);
            assert!(holder.alive());
        }
        assert_eq!(f.switch.read().unwrap(), 0);
        assert!(!f.switch.marker.exists());
    }

    #[test]
    fn leaves_a_switch_that_is_on_already_alone() {
        let f = files("1\n");
        assert!(f.switch.expedite().expect("expedite").is_none());
        assert_eq!(f.switch.read().unwrap(), 1);
        assert!(!f.switch.marker.exists());
    }

    #[test]
    fn a_live_holder_keeps_the_switch() {
        let f = files("1\n");
        let me = Holder::this_process(0).expect("holder");
        fs::write(&f.switch.marker, me.render()).expect("marker");
        assert_eq!(f.switch.recover().expect("recover"), None);
        assert_eq!(f.switch.read().unwrap(), 1);
        assert!(f.switch.marker.exists());
    }

    #[test]
    fn a_dead_holders_switch_is_put_back() {
        let f = files("1\n");
        let dead = dead_holder(&f);
        assert_eq!(f.switch.recover().expect("recover"), Some(dead));
        assert_eq!(f.switch.read().unwrap(), 0);
        assert!(!f.switch.marker.exists());
    }

    #[test]
    fn a_reused_pid_is_not_the_holder() {
        // This process's pid, with another start time: the holder is gone, the pid reused.
        let f = files("1\n");
        let mut stale = Holder::this_process(0).expect("holder");
        stale.start_time += 1;
        fs::write(&f.switch.marker, stale.render()).expect("marker");
        assert!(f.switch.recover().expect("recover").is_some());
        assert_eq!(f.switch.read().unwrap(), 0);
    }

    #[test]
    fn a_switch_found_off_is_not_touched_by_recovery() {
        let f = files("0\n");
        dead_holder(&f);
        assert!(f.switch.recover().expect("recover").is_some());
        assert_eq!(f.switch.read().unwrap(), 0);
        assert!(!f.switch.marker.exists());
    }

    #[test]
    fn a_garbled_marker_is_removed_and_the_switch_left_alone() {
        let f = files("1\n");
        fs::write(&f.switch.marker, "not a marker").expect("marker");
        assert_eq!(f.switch.recover().expect("recover"), None);
        assert_eq!(f.switch.read().unwrap(), 1);
        assert!(!f.switch.marker.exists());
    }

    #[test]
    fn holders_round_trip_and_reject_extra_words() {
        let h = Holder {
            pid: 42,
            start_time: 7,
            previous: 0,
        };
        assert_eq!(Holder::parse(&h.render()), Some(h));
        assert_eq!(Holder::parse("42 7 0 9"), None);
        assert_eq!(Holder::parse("42 7"), None);
    }

    #[test]
    fn start_time_of_this_process_is_readable() {
        assert!(start_time(std::process::id()).is_some());
        assert_eq!(start_time(dead_pid()), None);
    }
}
