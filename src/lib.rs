//! dxdp: container-to-container links on one host that bypass the Linux bridge with eBPF.
pub mod bench;
pub mod compose;
pub mod datapath;
pub mod docker;
pub mod endpoint;
pub mod ethtool;
pub mod firewall;
pub mod labels;
pub mod metrics;
pub mod netlink;
pub mod netns;
pub mod plan;
pub mod reconcile;
pub mod sd_notify;
