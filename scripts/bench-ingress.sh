#!/usr/bin/env bash
# Runs `dxdp bench-ingress` on this machine against a fixture it makes and removes again:
#   - a client namespace dxbi-client behind a veth "NIC": dxbi-nic (10.237.1.1/24) on the host,
#     eth0 (10.237.1.2/24) in the namespace;
#   - a user network dxbi-net and a container dxbi-web from dxdp-test:local publishing, on
#     10.237.1.1, the ports the bench's servers listen on: 6379, 80, 5201, 5201/udp, 11111;
#   - a pin directory of its own, so that no other dxdp state is touched.
# Everything it made is removed on exit, also after an error or Ctrl-C.
#
# Usage: scripts/bench-ingress.sh [BENCH OPTIONS...]   e.g. --rounds 3 --seconds 5 --json FILE
#   DXDP=PATH picks the binary (default: target/release/dxdp of this checkout).
#   DXBI_CHECK_FIREWALL=1 lets `expose`'s firewall walk decide instead of --bypass-firewall.
#   DXBI_WIRE=SUBNET is the bench's --wire (default 10.237.2.0/30: a veth from dxbi-client
#   straight into dxbi-web, the reference no path through the NIC beats); DXBI_WIRE= skips it.
set -euo pipefail

log() { printf 'bench-ingress: %s\n' "$*" >&2; }
die() { printf 'bench-ingress: error: %s\n' "$*" >&2; exit 1; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dxdp=${DXDP:-$root/target/release/dxdp}
readonly ns=dxbi-client nic=dxbi-nic net=dxbi-net web=dxbi-web
readonly host_addr=10.237.1.1 client_addr=10.237.1.2
readonly pin_dir=/sys/fs/bpf/dxdp-bench-ingress-$$
image=dxdp-test:local

((EUID == 0)) || die "must run as root (namespaces, veths, bpffs)"
[[ -x $dxdp ]] || die "$dxdp is not built; run cargo build --release (or set DXDP)"
docker info >/dev/null 2>&1 || die "docker cannot reach dockerd; run scripts/setup.sh"
docker image inspect "$image" >/dev/null 2>&1 || bash "$root/scripts/build-test-image.sh"

# Leftovers of another run would be taken for ours, or removed under it: refuse instead.
ip netns list | grep -qw "$ns" && die "netns $ns exists (another run, or a leftover: ip netns del $ns)"
ip link show "$nic" >/dev/null 2>&1 && die "interface $nic exists (ip link del $nic)"
docker container inspect "$web" >/dev/null 2>&1 && die "container $web exists (docker rm -f $web)"
docker network inspect "$net" >/dev/null 2>&1 && die "network $net exists (docker network rm $net)"

made_ns=0 made_nic=0 made_net=0 made_web=0
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    # The bench puts the exposure back itself; this catches a bench that was killed outright.
    if [[ -d $pin_dir ]]; then
        "$dxdp" --pin-dir "$pin_dir" cleanup >/dev/null 2>&1 || log "warning: dxdp cleanup of $pin_dir failed"
    fi
    ((made_web)) && docker rm -f "$web" >/dev/null 2>&1
    ((made_net)) && docker network rm "$net" >/dev/null 2>&1
    ((made_nic)) && ip link del "$nic" 2>/dev/null
    ((made_ns)) && ip netns del "$ns" 2>/dev/null
    log "removed the fixture"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$ns"
made_ns=1
ip -n "$ns" link set lo up
ip link add "$nic" type veth peer name eth0 netns "$ns"
made_nic=1
ip addr add "$host_addr/24" dev "$nic"
ip link set "$nic" up
ip -n "$ns" addr add "$client_addr/24" dev eth0
ip -n "$ns" link set eth0 up

docker network create "$net" >/dev/null
made_net=1
publish=()
for port in 6379/tcp 80/tcp 5201/tcp 5201/udp 11111/tcp; do
    publish+=(-p "$host_addr:${port%/*}:$port")
done
docker run -d --name "$web" --network "$net" "${publish[@]}" "$image" >/dev/null
made_web=1
log "fixture: $ns ($client_addr) -> $nic ($host_addr) -> $web on $net"

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
"$dxdp" --pin-dir "$pin_dir" bench-ingress "$web" --client "netns:$ns" --nic "$nic" \
    "${bypass[@]}" "${wire[@]}" "$@"
