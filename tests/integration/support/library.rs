//! The dxdp library as the tests use it: the only `use dxdp::…` of the integration tests, so that
//! a change of the library's public API is adjusted here alone. (Most tests drive the `dxdp`
//! binary instead; `dxdp_common`, the crate shared with the eBPF programs, is used directly.)

/// The compiled eBPF object the binary embeds, loaded by the verdict tests.
pub use dxdp::datapath::OBJECT;

/// The loader step that resolves kfunc calls by BTF id, which aya 0.14 cannot (docs/kfuncs.md).
pub use dxdp::datapath::kfunc;
