//! `DXDP_ROUTE_MTUS`, the host's routes as the published ports' reply programs read them
//! (`crate::route_mtus` says which, `ebpf/programs/src/routes.rs` why).
use std::collections::BTreeMap;

use anyhow::{Result, anyhow};
use aya::maps::lpm_trie::{Key, LpmTrie};
use dxdp_common::ingress::names;

use super::Datapath;
use crate::route_mtus::{self, RouteMtu};

impl Datapath {
    /// Mirrors the host's main routing table into `DXDP_ROUTE_MTUS` where a route sets an MTU
    /// forwarding heeds, and empties it where none does; returns how many entries changed.
    pub fn mirror_route_mtus(&mut self) -> Result<usize> {
        let wanted = route_mtus::entries(&crate::netlink::main_table_routes()?)?;
        self.write_route_mtus(&wanted)
    }

    fn write_route_mtus(&mut self, wanted: &[RouteMtu]) -> Result<usize> {
        let map = self
            .ebpf
            .map_mut(names::ROUTE_MTUS)
            .ok_or_else(|| anyhow!("eBPF object lacks map {}", names::ROUTE_MTUS))?;
        let mut trie: LpmTrie<_, [u8; 16], u32> = LpmTrie::try_from(map)?;
        let wanted: BTreeMap<([u8; 16], u32), u32> = wanted
            .iter()
            .map(|&(addr, prefix_len, mtu)| ((addr, prefix_len), mtu))
            .collect();
        let mut present = BTreeMap::new();
        for entry in trie.iter() {
            let (key, mtu) = entry?;
            present.insert((key.data(), key.prefix_len()), mtu);
        }
        let mut changed = 0;
        for (&(addr, prefix_len), _) in present.iter().filter(|(k, _)| !wanted.contains_key(k)) {
            trie.remove(&Key::new(prefix_len, addr))?;
            changed += 1;
        }
        for (&(addr, prefix_len), &mtu) in &wanted {
            if present.get(&(addr, prefix_len)) != Some(&mtu) {
                trie.insert(&Key::new(prefix_len, addr), mtu, 0)?;
                changed += 1;
            }
        }
        Ok(changed)
    }
}
