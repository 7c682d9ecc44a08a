//! Conntrack's TCP switches (`nf_conntrack_tcp_be_liberal`, `_ignore_invalid_rst`) for the
//! published ports' programs, which judge a carried connection's segments as conntrack would:
//! the map `DXDP_TCP_SWITCHES` they read, and its writers. Not load-time constants, as they
//! were: an operator's switch turned off after `expose` would have left the fast path carrying
//! segments conntrack now finds INVALID, frames Docker's path never delivers.
use anyhow::{Result, anyhow};
use aya::maps::Array;
use dxdp_common::ingress::names;

use super::super::{Datapath, sysctl};

impl Datapath {
    /// Writes conntrack's TCP switches as its sysctls are now into `DXDP_TCP_SWITCHES`, where
    /// they changed since the last write; whether they had.
    pub fn follow_tcp_switches(&mut self) -> Result<bool> {
        let map = self
            .ebpf
            .map_mut(names::TCP_SWITCHES)
            .ok_or_else(|| anyhow!("eBPF object lacks map {}", names::TCP_SWITCHES))?;
        let mut switches: Array<_, u32> = Array::try_from(map)?;
        let now = sysctl::tcp_switches();
        if switches.get(&0, 0)? == now {
            return Ok(false);
        }
        switches.set(0, now, 0)?;
        Ok(true)
    }

    /// The switches the published ports' programs judge by, and conntrack's as its sysctls
    /// are now.
    pub fn tcp_switches(&self) -> Result<(u32, u32)> {
        let map = self
            .ebpf
            .map(names::TCP_SWITCHES)
            .ok_or_else(|| anyhow!("eBPF object lacks map {}", names::TCP_SWITCHES))?;
        let switches: Array<_, u32> = Array::try_from(map)?;
        Ok((switches.get(&0, 0)?, sysctl::tcp_switches()))
    }
}
