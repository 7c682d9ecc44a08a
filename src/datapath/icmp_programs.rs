//! The published ports' ICMP error programs: `dxdp_ingress` and `dxdp_reply` hand what they do
//! not take to `dxdp_icmp_in` and `dxdp_icmp_out` by tail call, through the program array
//! `DXDP_ICMP_ERRORS` (the errors' parsing needs a stack frame of its own). Both are pinned
//! beside the port programs, and the array holds them; an empty slot sends the packet to the
//! stack, so the array is filled before any program that calls into it is attached.
use anyhow::{Context, Result, anyhow};
use aya::{Ebpf, maps::ProgramArray};
use dxdp_common::ingress::{ICMP_IN, ICMP_OUT, names};

use super::{attach, pins::Pins};

/// Each program with its slot in the array.
const PROGRAMS: [(u32, &str); 2] = [
    (ICMP_IN, names::ICMP_IN_PROGRAM),
    (ICMP_OUT, names::ICMP_OUT_PROGRAM),
];

/// Puts the pinned ICMP programs (loaded and pinned first where they are not yet) in the array.
pub(super) fn hand_on(ebpf: &mut Ebpf, pins: &Pins) -> Result<()> {
    for (index, name) in PROGRAMS {
        let program = attach::pinned_classifier(ebpf, name, &pins.progs().join(name))?;
        set(ebpf, index, name, &program)?;
    }
    Ok(())
}

/// Replaces pinned ICMP programs that differ from this binary's (after an upgrade), in their
/// pins and in the array; returns the names of those replaced.
pub(super) fn upgrade(ebpf: &mut Ebpf, pins: &Pins) -> Result<Vec<&'static str>> {
    let mut replaced = Vec::new();
    for (index, name) in PROGRAMS {
        let pin = pins.progs().join(name);
        if !pin.exists() {
            continue;
        }
        if attach::upgrade_classifier(ebpf, name, &pin, &[])? {
            let program = aya::programs::SchedClassifier::from_pin(&pin)?;
            set(ebpf, index, name, &program)?;
            replaced.push(name);
        }
    }
    Ok(replaced)
}

fn set(
    ebpf: &mut Ebpf,
    index: u32,
    name: &str,
    program: &aya::programs::SchedClassifier,
) -> Result<()> {
    let map = ebpf
        .map_mut(names::ICMP_ERRORS)
        .ok_or_else(|| anyhow!("eBPF object lacks map {}", names::ICMP_ERRORS))?;
    let mut array = ProgramArray::try_from(map)?;
    array
        .set(index, program.fd()?, 0)
        .with_context(|| format!("cannot put {name} in {}", names::ICMP_ERRORS))
}
