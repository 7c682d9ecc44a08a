//! Switching a container's outbound connections between Docker's path and the egress fast path
//! (`dxdp egress on|off`), and putting back what was found.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::{Route, RouteSwitch, exposure::purge_if_empty};
use crate::datapath::{Capacity, Datapath, EgressPlan};

/// The container's egress fast path while the bench switches it; what was found (on through the
/// bench's NIC, or off) is put back when dropped, also after an error and Ctrl-C.
pub struct EgressSwitch {
    pin_dir: PathBuf,
    capacity: Capacity,
    plan: EgressPlan,
    found_on: bool,
    pin_dir_existed: bool,
    restored: bool,
}

impl EgressSwitch {
    /// Records whether the container's egress fast path is on now; nothing is changed. One that
    /// leaves by another NIC than the plan's is refused: the bench would move it.
    pub fn snapshot(pin_dir: &Path, capacity: Capacity, plan: EgressPlan) -> Result<Self> {
        let pin_dir_existed = pin_dir.exists();
        let mut found_on = false;
        if pin_dir_existed {
            let veth = plan.endpoint.host_ifindex;
            let found = Datapath::open(pin_dir, capacity)?
                .egress()?
                .into_iter()
                .find(|r| r.veth_ifindex == veth);
            if let Some(record) = found {
                if record.nic_ifindex != plan.nic_ifindex {
                    bail!(
                        "{}'s outbound connections already leave by interface {} on the fast \
                         path, not by {}; run `dxdp egress off {}` first, or bench through \
                         that NIC",
                        plan.container,
                        record.nic_ifindex,
                        plan.nic,
                        plan.container
                    );
                }
                found_on = true;
            }
        }
        Ok(Self {
            pin_dir: pin_dir.to_path_buf(),
            capacity,
            plan,
            found_on,
            pin_dir_existed,
            restored: false,
        })
    }

    /// Whether the fast path was on when the bench began.
    pub fn found_on(&self) -> bool {
        self.found_on
    }

    fn open(&self) -> Result<Datapath> {
        Datapath::open(&self.pin_dir, self.capacity)
    }

    fn on(&self) -> Result<()> {
        self.open()?
            .egress_on(&self.plan)
            .with_context(|| format!("cannot turn egress on for {}", self.plan.container))
    }

    /// Off, its connections (all ended by then) handed back to conntrack.
    fn off(&self) -> Result<()> {
        if !self.pin_dir.exists() {
            return Ok(());
        }
        self.open()?
            .egress_off(self.plan.endpoint.host_ifindex)
            .with_context(|| format!("cannot turn egress off for {}", self.plan.container))?;
        Ok(())
    }
}

impl RouteSwitch for EgressSwitch {
    fn set(&mut self, route: Route) -> Result<()> {
        match route {
            Route::Fast => self.on(),
            Route::Docker => self.off(),
            // The wire does not cross the NIC: the fast path stays as the round before left it.
            Route::Wire => Ok(()),
        }
    }

    /// Packets the fast path has sent out of the NIC for the container so far.
    fn carried(&self) -> Result<u64> {
        if !self.pin_dir.exists() {
            return Ok(0);
        }
        let veth = self.plan.endpoint.host_ifindex;
        Ok(self
            .open()?
            .egress()?
            .iter()
            .filter(|r| r.veth_ifindex == veth)
            .map(|r| r.outbound.packets)
            .sum())
    }

    fn found_description(&self) -> String {
        if self.found_on {
            format!("egress on (by {})", self.plan.nic)
        } else {
            "egress off".to_owned()
        }
    }

    /// Puts back what was found; removes a pin directory the bench created if nothing else is
    /// in it. Idempotent.
    fn restore(&mut self) -> Result<()> {
        if self.restored {
            return Ok(());
        }
        if self.found_on {
            self.on()?;
        } else {
            self.off()?;
        }
        if !self.pin_dir_existed && self.pin_dir.exists() {
            purge_if_empty(self.open()?)?;
        }
        self.restored = true;
        Ok(())
    }
}

impl Drop for EgressSwitch {
    fn drop(&mut self) {
        if !self.restored
            && let Err(err) = self.restore()
        {
            let how = if self.found_on { "on" } else { "off" };
            eprintln!(
                "dxdp: error: could not put the egress fast path of {} back as it was: {err:#}; \
                 run `dxdp egress {how} {}`",
                self.plan.container, self.plan.container
            );
        }
    }
}
