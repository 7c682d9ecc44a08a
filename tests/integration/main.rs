//! dxdp's integration tests, built as one test binary (as ripgrep and cargo do): the harness in
//! [`support`] compiles once and every area shares it.
//!
//! One module per area; a test is named `AREA::…::NAME`, so `cargo test --test integration --
//! AREA::` runs one area (libtest filters are substrings; several may be given, and `--skip`
//! drops matches). To add an area: put its tests in `tests/integration/AREA.rs` (or
//! `AREA/mod.rs` with submodules), declare `mod AREA;` below, import the harness with
//! `use crate::support::{…}`, start every test that needs the host with one of the
//! `require_*` checks (or `can_run`), and keep area names from ending in another area's name
//! (scripts/test.sh selects areas by `AREA::`).
//!
//! Privileged tests share the host's bpffs, links and dockerd: run with `--test-threads=1`
//! (scripts/test.sh does).

mod support;
// Scenarios that docker.rs and podman.rs both run, each on its engine.
mod scenarios;

// Unprivileged: the binary on files.
mod compose_check;
// Root and bpffs: eBPF programs on crafted frames, and the binary on network namespaces.
mod bench;
mod netns_datapath;
// `dxdp top` on the netns fixture, and its screen under a tmux pseudo-terminal.
mod top;
// Root, bpffs, cgroup2 and BTF: the socket layer on namespaces (not shipped: the evidence why).
mod sock;
mod verdicts;
// Root, bpffs, BTF, nft and conntrack: the conntrack kfuncs from an aya program (issue 36's first
// step), on namespaces of its own.
mod ct_kfunc;
// Root and dockerd: the binary on real containers. `docker`, `compose_examples` and `firewall`
// also run in the legacy engine lane (Docker 20.10), where tests named `engine28_` are skipped.
mod churn;
mod compose_examples;
mod docker;
mod firewall;
// Published ports from a veth "NIC" straight into containers (`dxdp expose`).
mod ingress;
// Containers' outbound connections straight to a veth "NIC" (`dxdp egress`).
mod egress;
// The same cases through Docker's path and dxdp's, and what each observer saw compared.
mod differential;
// The control plane at fleet scale (a private dockerd with up to 200 containers, 500 in the soak).
mod fleet;
// `watch --expedite-rcu`: the host's RCU expedite switch, on only while a pass attaches.
mod monitoring;
mod operations;
mod packaging;
mod rcu_expedite;
// Root and rootful Podman (its API socket beside dockerd): the binary on Podman containers.
mod podman;
// Root, dockerd and Podman: setup's proof that each engine runs a container, and doctor's runtime.
mod engines;
mod reliability;
mod sd_notify;
// Root and dockerd in no swarm: the Swarm stack on a one-node swarm the test makes and leaves.
mod swarm;
// Root and dockerd: a real multi-node Swarm, dockerd nodes in namespaces of their own with VXLAN
// between them (support::swarm_nodes, scripts/swarm-nodes.sh).
mod multinode;
