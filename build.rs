//! Builds the eBPF programs with the nightly toolchain and bpf-linker, so that `cargo build`
//! produces one `dxdp` binary with the object embedded. The package's objects land in OUT_DIR:
//! `dxdp-ebpf`, the datapath dxdp embeds, `dxdp-egress`, the outbound fast path (embedded too),
//! `dxdp-bench`, the generator and receiver of
//! `dxdp bench --pps` (embedded too), and `dxdp-sock-lab`, the socket-level lab that only the
//! integration tests load (docs/sock-datapath.md).
fn main() -> anyhow::Result<()> {
    // aya-build reruns on changes to the program crate; the shared types live beside it.
    println!("cargo:rerun-if-changed=ebpf/common");
    let programs = aya_build::Package {
        name: "dxdp-ebpf",
        root_dir: "ebpf/programs",
        ..Default::default()
    };
    aya_build::build_ebpf([programs], aya_build::Toolchain::default())
}
