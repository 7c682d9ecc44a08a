//! dxdp: container-to-container links on one host that bypass the Linux bridge with eBPF.
//!
//! The library is what the `dxdp` binary (its command line and one module per subcommand, under
//! `src/main.rs`) and the tests use; everything else is `pub(crate)`.
#![warn(unreachable_pub)]
pub mod bench;
pub mod choice;
pub mod compose;
pub mod datapath;
pub mod docker;
pub mod endpoint;
pub mod engine;
mod ethtool;
pub mod exposure;
pub mod family;
pub mod firewall;
pub mod labels;
pub mod metrics;
pub mod netlink;
pub mod netns;
mod nfnetlink;
pub mod overlay;
pub mod plan;
pub mod ports;
pub mod rcu;
pub mod route_mtus;
mod rules;
pub mod runtime;
pub mod sd_notify;

#[cfg(test)]
mod fuzz_parsers;
