# The fixture `scripts/bench-ingress.sh` and `scripts/bench-egress.sh` share, sourced by both: an
# outside namespace behind a veth "NIC" and a container on a user network, both removed on exit
# (also after an error or Ctrl-C), with a pin directory of its own.
#
# The sourcing script sets, before calling fixture_prepare:
#   tag        what messages start with (bench-ingress, bench-egress)
#   ns nic     the outside namespace and the NIC's host end (eth0 in the namespace)
#   host_addr outside_addr   the NIC's and the namespace's IPv4 addresses (in one /24)
#   net ctr    the user network and the container
#   pin_dir    the pin directory of its own
#   dxdp root  the binary and the checkout
# then fixture_run_container ARGS... (docker run's options before the image).

log() { printf '%s: %s\n' "$tag" "$*" >&2; }
die() { printf '%s: error: %s\n' "$tag" "$*" >&2; exit 1; }

image=dxdp-test:local
made_ns=0 made_nic=0 made_net=0 made_ctr=0

fixture_cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    # The bench puts the fast path back itself; this catches a bench that was killed outright.
    if [[ -d $pin_dir ]]; then
        "$dxdp" --pin-dir "$pin_dir" cleanup >/dev/null 2>&1 || log "warning: dxdp cleanup of $pin_dir failed"
    fi
    ((made_ctr)) && docker rm -f "$ctr" >/dev/null 2>&1
    ((made_net)) && docker network rm "$net" >/dev/null 2>&1
    ((made_nic)) && ip link del "$nic" 2>/dev/null
    ((made_ns)) && ip netns del "$ns" 2>/dev/null
    log "removed the fixture"
    exit "$rc"
}

# Checks what the bench needs, refuses leftovers of another run (they would be taken for ours,
# or removed under it), then lays the namespace behind the NIC and the user network.
fixture_prepare() {
    ((EUID == 0)) || die "must run as root (namespaces, veths, bpffs)"
    [[ -x $dxdp ]] || die "$dxdp is not built; run cargo build --release (or set DXDP)"
    docker info >/dev/null 2>&1 || die "docker cannot reach dockerd; run scripts/setup.sh"
    docker image inspect "$image" >/dev/null 2>&1 || bash "$root/scripts/build-test-image.sh"
    ip netns list | grep -qw "$ns" && die "netns $ns exists (another run, or a leftover: ip netns del $ns)"
    ip link show "$nic" >/dev/null 2>&1 && die "interface $nic exists (ip link del $nic)"
    docker container inspect "$ctr" >/dev/null 2>&1 && die "container $ctr exists (docker rm -f $ctr)"
    docker network inspect "$net" >/dev/null 2>&1 && die "network $net exists (docker network rm $net)"

    trap fixture_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    ip netns add "$ns"
    made_ns=1
    ip -n "$ns" link set lo up
    ip link add "$nic" type veth peer name eth0 netns "$ns"
    made_nic=1
    ip addr add "$host_addr/24" dev "$nic"
    ip link set "$nic" up
    ip -n "$ns" addr add "$outside_addr/24" dev eth0
    ip -n "$ns" link set eth0 up

    docker network create "$net" >/dev/null
    made_net=1
}

# docker run -d --name CTR --network NET ARGS... IMAGE
fixture_run_container() {
    docker run -d --name "$ctr" --network "$net" "$@" "$image" >/dev/null
    made_ctr=1
}
