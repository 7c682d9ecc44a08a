#!/usr/bin/env bash
# build-bpf.sh OUT LOCAL_MAC REMOTE_MAC VXLAN_IFINDEX VETH_IFINDEX — the prototype with its constants.
set -euo pipefail
export PATH=$HOME/.cargo/bin:$PATH
out=$1; mac() { echo "[0x${1//:/, 0x}]"; }
cd "$(dirname "$0")/skipbr"
cat > consts.rs <<EOF
const LOCAL_MAC: [u8; 6] = $(mac "$2");
const REMOTE_MAC: [u8; 6] = $(mac "$3");
const VXLAN_IFINDEX: u32 = $4;
const VETH_IFINDEX: u32 = $5;
EOF
RUSTFLAGS='--cfg=bpf_target_arch="x86_64" -Cdebuginfo=2 -Clink-arg=--btf' \
  cargo +nightly build --offline --release --target bpfel-unknown-none -Z build-std=core >/dev/null 2>&1
cp target/bpfel-unknown-none/release/skipbr "$out"
