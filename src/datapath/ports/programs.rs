//! The two programs of exposed ports and their attachments: `dxdp_ingress` on the NICs,
//! `dxdp_reply` on the exposed containers' veths, each pinned through a TCX link.
use std::{collections::BTreeSet, path::PathBuf};

use anyhow::{Context, Result};
use aya::{Ebpf, programs::SchedClassifier};
use dxdp_common::ingress::{PortKey, PortTarget, names};

use crate::datapath::{
    attach, icmp_programs,
    pins::{self, Pins},
};

/// The two programs, pinned once and attached through pinned TCX links.
pub(super) struct PortPrograms<'p> {
    pins: &'p Pins,
    ingress: SchedClassifier,
    reply: SchedClassifier,
}

/// Which of the two programs, and so which attachment pin.
#[derive(Clone, Copy)]
pub(super) enum Role {
    Ingress,
    Reply,
}

impl Role {
    pub(super) fn program(self) -> &'static str {
        match self {
            Role::Ingress => names::INGRESS_PROGRAM,
            Role::Reply => names::REPLY_PROGRAM,
        }
    }

    /// What its attachment pins are named after.
    pub(super) fn name(self) -> &'static str {
        match self {
            Role::Ingress => "ingress",
            Role::Reply => "reply",
        }
    }

    /// `links/ingress-IFINDEX` on a NIC, `links/reply-IFINDEX` on a veth.
    pub(super) fn pin(self, pins: &Pins, ifindex: u32) -> PathBuf {
        pins.links().join(format!("{}-{ifindex}", self.name()))
    }
}

impl<'p> PortPrograms<'p> {
    pub(super) fn open(ebpf: &mut Ebpf, pins: &'p Pins) -> Result<Self> {
        let mut load = |role: Role| {
            attach::pinned_classifier(ebpf, role.program(), &pins.progs().join(role.program()))
        };
        let ingress = load(Role::Ingress)?;
        let reply = load(Role::Reply)?;
        // Before either is attached: what they hand on must be there.
        icmp_programs::hand_on(ebpf, pins)?;
        Ok(Self {
            pins,
            ingress,
            reply,
        })
    }

    /// Attaches `role`'s program to the device unless its pinned attachment is there.
    pub(super) fn attach(&mut self, role: Role, ifindex: u32, ifname: &str) -> Result<bool> {
        let path = role.pin(self.pins, ifindex);
        let prog = match role {
            Role::Ingress => &mut self.ingress,
            Role::Reply => &mut self.reply,
        };
        attach::attach_pinned(prog, role.program(), &path, ifname)
    }
}

/// Unpins (so detaches) `role`'s attachment on `ifindex`.
pub(super) fn detach(pins: &Pins, role: Role, ifindex: u32) -> Result<()> {
    pins::remove_if_present(&role.pin(pins, ifindex))
}

/// Attachment pins of `role`, by ifindex.
pub(super) fn attachment_pins(pins: &Pins, role: Role) -> Result<Vec<u32>> {
    let prefix = format!("{}-", role.name());
    let dir = pins.links();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
    };
    Ok(entries
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix(prefix.as_str())?
                .parse::<u32>()
                .ok()
        })
        .collect())
}

/// Replaces the pinned port programs that differ from this binary's (after an upgrade), in
/// every attachment at once; returns the names of those replaced.
pub(in crate::datapath) fn upgrade(ebpf: &mut Ebpf, pins: &Pins) -> Result<Vec<&'static str>> {
    // First what the new programs hand on to, so that none finds its slot empty or stale.
    let mut replaced = icmp_programs::upgrade(ebpf, pins)?;
    for role in [Role::Ingress, Role::Reply] {
        let prog_pin = pins.progs().join(role.program());
        if !prog_pin.exists() {
            continue;
        }
        let links: Vec<PathBuf> = attachment_pins(pins, role)?
            .into_iter()
            .map(|ifindex| role.pin(pins, ifindex))
            .collect();
        if attach::upgrade_classifier(ebpf, role.program(), &prog_pin, &links)? {
            replaced.push(role.program());
        }
    }
    Ok(replaced)
}

/// Detaches the NIC program from the NICs no entry of `entries` (the ports map as it is) is on.
pub(super) fn detach_idle_nics(pins: &Pins, entries: &[(PortKey, PortTarget)]) -> Result<()> {
    let in_use: BTreeSet<u32> = entries.iter().map(|(k, _)| k.nic_ifindex).collect();
    for nic in attachment_pins(pins, Role::Ingress)? {
        if !in_use.contains(&nic) {
            detach(pins, Role::Ingress, nic)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::datapath::{Capacity, Datapath};

    /// Both programs (and the ICMP ones they hand on to) pass the running kernel's verifier, in
    /// a pin directory of the test's own, with how many instructions it walked for each
    /// printed: the window copies' merge has to stay inside the verifier's budget and the
    /// 512-byte stack. Skipped without root.
    #[test]
    fn the_port_programs_pass_the_verifier() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipping: needs root");
            return;
        }
        let root = PathBuf::from(format!(
            "/sys/fs/bpf/dxdp-ports-verify-{}",
            std::process::id()
        ));
        let loaded = Datapath::open(&root, Capacity::default()).and_then(|mut dp| {
            let programs = PortPrograms::open(&mut dp.ebpf, &dp.pins)?;
            for (role, program) in [
                (Role::Ingress, &programs.ingress),
                (Role::Reply, &programs.reply),
            ] {
                let info = program.info()?;
                eprintln!(
                    "{}: {} instructions verified",
                    role.program(),
                    info.verified_instruction_count().unwrap_or(0)
                );
            }
            Ok(())
        });
        let _ = std::fs::remove_dir_all(&root);
        loaded.unwrap();
    }
}
