//! The shared harness of the integration tests, one module per job. Everything a test makes is
//! named after the test process and undone on drop (also while a failed assertion unwinds), so
//! tests never collide with each other nor touch anything they did not make.
//!
//! - [`prereq`]: whether a test can run here: skip, or fail under CI=true;
//! - [`process`]: commands bounded in time, background processes;
//! - [`names`]: per-process names and numbers;
//! - [`guards`]: netns, links, iptables rules, pin directories and pinned objects undone on drop;
//! - [`host`]: host interfaces and containers' veths seen from the host;
//! - [`topology`]: the netns fixture, a bridge with "containers" (namespaces with a veth each);
//! - [`traffic`]: ping and iperf3 between netns nodes;
//! - [`dxdp`]: the binary under test and its `status --json`;
//! - [`bpf`]: bpf(2) and bpftool as another tool would use them;
//! - [`pinned`]: the pinned state, entry by entry;
//! - [`docker_cli`]: the docker and compose commands;
//! - [`docker_proxy`]: a proxy in front of a dockerd that can stall its event streams;
//! - [`world`]: the Docker fixture, on the host's dockerd or on a private one;
//! - [`outside`]: a client namespace behind a veth "NIC", the outside world of published ports;
//! - [`netns`]: code run on a thread inside another network namespace;
//! - [`engine`]: what a scenario needs of Docker's or Podman's world, to run on both;
//! - [`watch`]: a `dxdp watch` in the background;
//! - [`labeled`]: labeled containers as planned, the links they call for, convergence;
//! - [`rng`]: seeded randomness and `DXDP_SOAK`;
//! - [`rcu_switch`]: the kernel's RCU expedite switch, put back on drop, and sampled;
//! - [`one_node_swarm`]: a one-node swarm of the host's dockerd, and overlay sandboxes on it;
//! - [`swarm_nodes`]: a real multi-node Swarm, dockerd nodes in namespaces of their own with
//!   VXLAN between them (scripts/swarm-nodes.sh);
//! - [`library`]: the dxdp library items the tests use, in one place.
//!
//! The items are re-exported here: areas `use crate::support::{…}`.

pub mod bench_report;
pub mod bpf;
pub mod docker_cli;
pub mod docker_proxy;
pub mod dxdp;
pub mod engine;
pub mod guards;
pub mod host;
pub mod labeled;
pub mod library;
pub mod names;
pub mod netns;
pub mod one_node_swarm;
pub mod outside;
pub mod pinned;
pub mod prereq;
pub mod process;
pub mod rcu_switch;
pub mod rng;
pub mod swarm_nodes;
pub mod topology;
pub mod traffic;
pub mod watch;
pub mod world;

pub use self::{
    bench_report::*, bpf::*, docker_cli::*, docker_proxy::*, dxdp::*, engine::*, guards::*,
    host::*, labeled::*, names::*, netns::*, one_node_swarm::*, outside::*, pinned::*, prereq::*,
    process::*, rcu_switch::*, rng::*, swarm_nodes::*, topology::*, traffic::*, watch::*, world::*,
};
