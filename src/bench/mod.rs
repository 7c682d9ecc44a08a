//! The benches: `dxdp bench A B` over two containers ([`containers`], and its `--pps` mode,
//! [`pps`], whose AF_XDP receiver is [`xsk`]), and `dxdp bench-ingress` through a NIC
//! ([`ingress`]). What they share: the configurations a pair is measured in, the pair's link
//! switched and put back ([`pair`]), running the host's tools ([`measure`]), medians and ranges
//! ([`stats`]), table cells ([`table`]), the progress shown ([`progress`]), the host's load
//! ([`host_load`], [`cpu_idle`]) and the real workloads, redis and sockperf ([`workloads`]).
pub mod containers;
pub mod cpu_idle;
pub mod host_load;
pub mod measure;
pub mod nic;
pub mod pair;
pub mod pps;
mod progress;
pub mod stats;
pub mod table;
pub mod wire;
pub mod workloads;
pub mod xsk;

pub use progress::{Step, show_steps};

use std::fmt;

use serde::Serialize;

use crate::choice::Kind;

/// One way for the pair's traffic to travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Config {
    /// The plain path through the Linux bridge, with the pair unlinked.
    Bridge,
    /// Linked with TCX ingress + bpf_redirect_peer.
    Tc,
    /// Linked with native XDP + devmap redirect.
    Xdp,
    /// Client and server both on 127.0.0.1 inside A's namespace: the ceiling for this host.
    Loopback,
}

impl Config {
    pub(crate) const ALL: [Config; 4] = [Config::Bridge, Config::Tc, Config::Xdp, Config::Loopback];

    pub fn name(self) -> &'static str {
        match self {
            Config::Bridge => "bridge",
            Config::Tc => "tc",
            Config::Xdp => "xdp",
            Config::Loopback => "loopback",
        }
    }

    /// The datapath this configuration measures; `None` for the bridge (the pair unlinked) and
    /// for loopback, whose traffic never touches the pair.
    pub fn datapath(self) -> Option<Kind> {
        match self {
            Config::Tc => Some(Kind::Tc),
            Config::Xdp => Some(Kind::Xdp),
            Config::Bridge | Config::Loopback => None,
        }
    }

    /// The configurations asked for, in canonical order and each once, whatever order and
    /// repetitions `--only` had.
    pub fn selection(only: &[Config]) -> Vec<Config> {
        Config::ALL
            .into_iter()
            .filter(|c| only.is_empty() || only.contains(c))
            .collect()
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_is_canonical_and_unique() {
        assert_eq!(Config::selection(&[]), Config::ALL.to_vec());
        assert_eq!(
            Config::selection(&[Config::Xdp, Config::Bridge, Config::Xdp]),
            vec![Config::Bridge, Config::Xdp]
        );
    }
}
