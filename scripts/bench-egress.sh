#!/usr/bin/env bash
# Runs `dxdp bench-egress` on this machine against a fixture it makes and removes again
# (scripts/lib/nic-fixture.sh):
#   - a server namespace dxbe-server behind a veth "NIC": dxbe-nic (10.238.1.1/24) on the host,
#     eth0 (10.238.1.2/24) in the namespace, where the bench runs its servers;
#   - a user network dxbe-net and a container dxbe-client from dxdp-test:local, whose
#     connections to 10.238.1.2 Docker masquerades out of dxbe-nic;
#   - a pin directory of its own, so that no other dxdp state is touched.
# Everything it made is removed on exit, also after an error or Ctrl-C.
#
# Usage: scripts/bench-egress.sh [BENCH OPTIONS...]   e.g. --rounds 3 --seconds 5 --json FILE
#   DXDP=PATH picks the binary (default: target/release/dxdp of this checkout).
#   DXBE_WIRE=SUBNET is the bench's --wire (default 10.238.2.0/30: a veth from dxbe-client
#   straight into dxbe-server, the reference no path through the NIC beats); DXBE_WIRE= skips it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dxdp=${DXDP:-$root/target/release/dxdp}
readonly tag=bench-egress ns=dxbe-server nic=dxbe-nic net=dxbe-net ctr=dxbe-client
readonly host_addr=10.238.1.1 outside_addr=10.238.1.2
readonly pin_dir=/sys/fs/bpf/dxdp-bench-egress-$$
# shellcheck source=lib/nic-fixture.sh
source "$root/scripts/lib/nic-fixture.sh"

fixture_prepare
fixture_run_container
log "fixture: $ctr on $net -> masquerade -> $nic ($host_addr) -> $ns ($outside_addr)"

wire=()
[[ -n ${DXBE_WIRE-10.238.2.0/30} ]] && wire=(--wire "${DXBE_WIRE-10.238.2.0/30}")
"$dxdp" --pin-dir "$pin_dir" bench-egress "$ctr" --server "netns:$ns" --nic "$nic" \
    "${wire[@]}" "$@"
