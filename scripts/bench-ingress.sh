#!/usr/bin/env bash
# Runs `dxdp bench-ingress` on this machine against a fixture it makes and removes again:
#   - a client namespace dxbi-client behind a veth "NIC": dxbi-nic (10.237.1.1/24) on the host,
#     eth0 (10.237.1.2/24) in the namespace;
#   - a user network dxbi-net and a container dxbi-web from dxdp-test:local publishing, on
#     10.237.1.1, the ports the bench's servers listen on: 6379, 80, 5201, 5201/udp, 11111;
#   - a pin directory of its own, so that no other dxdp state is touched.
# (scripts/lib/nic-fixture.sh makes it.) Everything it made is removed on exit, also after an error or Ctrl-C.
#
# Usage: scripts/bench-ingress.sh [BENCH OPTIONS...]   e.g. --rounds 3 --seconds 5 --json FILE
#   DXDP=PATH picks the binary (default: target/release/dxdp of this checkout).
#   DXBI_CHECK_FIREWALL=1 lets `expose`'s firewall walk decide instead of --bypass-firewall.
#   DXBI_WIRE=SUBNET is the bench's --wire (default 10.237.2.0/30: a veth from dxbi-client
#   straight into dxbi-web, the reference no path through the NIC beats); DXBI_WIRE= skips it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dxdp=${DXDP:-$root/target/release/dxdp}
readonly tag=bench-ingress ns=dxbi-client nic=dxbi-nic net=dxbi-net ctr=dxbi-web
readonly host_addr=10.237.1.1 outside_addr=10.237.1.2
readonly pin_dir=/sys/fs/bpf/dxdp-bench-ingress-$$
# shellcheck source=lib/nic-fixture.sh
source "$root/scripts/lib/nic-fixture.sh"

fixture_prepare
publish=()
for port in 6379/tcp 80/tcp 5201/tcp 5201/udp 11111/tcp; do
    publish+=(-p "$host_addr:${port%/*}:$port")
done
fixture_run_container "${publish[@]}"
log "fixture: $ns ($outside_addr) -> $nic ($host_addr) -> $ctr on $net"

bypass=(--bypass-firewall)
if [[ ${DXBI_CHECK_FIREWALL:-0} == 1 ]]; then
    bypass=()
else
    # The bench measures the path whatever the host's rules say about other ports; the
    # fixture's ports have no rule of their own, so the fast path skips nothing they need.
    log "exposing with --bypass-firewall (DXBI_CHECK_FIREWALL=1 to let the firewall walk decide)"
fi
wire=()
[[ -n ${DXBI_WIRE-10.237.2.0/30} ]] && wire=(--wire "${DXBI_WIRE-10.237.2.0/30}")
"$dxdp" --pin-dir "$pin_dir" bench-ingress "$ctr" --client "netns:$ns" --nic "$nic" \
    "${bypass[@]}" "${wire[@]}" "$@"
