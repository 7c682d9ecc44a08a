#!/usr/bin/env bash
# The dxdp demo: two labeled containers (compose-examples/iperf3-pair), `dxdp watch` linking them,
# and the before/after table of `dxdp bench` (bridge, tc, xdp, loopback).
#
# Usage: scripts/demo.sh [--keep] [--rounds N] [--seconds S] [--plot FILE.svg]
#   --keep   leave the containers, the network and the link in place at the end
# Everything else is put back as it was found: containers, network, pins (its own pin
# directory, so a dxdp already running on this host is not touched).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

keep=0
bench_args=()
while (($#)); do
    case $1 in
    --keep) keep=1 ;;
    --rounds | --seconds | --plot)
        bench_args+=("$1" "$2")
        shift
        ;;
    *)
        echo "demo.sh: unknown argument $1 (see the usage at the top of scripts/demo.sh)" >&2
        exit 2
        ;;
    esac
    shift
done
((${#bench_args[@]})) || bench_args=(--rounds 3 --seconds 2)

cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
[[ :$PATH: == *:"$cargo_bin":* ]] || export PATH="$cargo_bin:$PATH"

say() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

say "setting up the host (idempotent)"
scripts/setup.sh
say "building dxdp"
cargo build --release --quiet 2>&1 | grep -v '^warning: dxdp@' || true
dxdp=$root/target/release/dxdp
[[ -x $dxdp ]] || {
    echo "demo.sh: the build did not produce $dxdp" >&2
    exit 1
}
scripts/build-test-image.sh

project=dxdp-demo
# Compose v2 (`docker compose`) where the CLI has the plugin, else a standalone docker-compose
# (v2's binary, or 1.29 on a legacy host); DXDP_COMPOSE overrides both.
if [[ -n ${DXDP_COMPOSE:-} ]]; then
    read -r -a compose <<<"$DXDP_COMPOSE"
elif docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
else
    compose=(docker-compose)
fi
compose+=(-p "$project" -f compose-examples/iperf3-pair/docker-compose.yml)
export DXDP_PIN_DIR=/sys/fs/bpf/dxdp-demo
export DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock}
watch_pid=
watch_log=$(mktemp /tmp/dxdp-demo-watch.XXXXXX)

cleanup() {
    local rc=$?
    [[ -n $watch_pid ]] && kill "$watch_pid" 2>/dev/null && wait "$watch_pid" 2>/dev/null
    if ((keep)); then
        say "kept: containers of project $project, link pinned at $DXDP_PIN_DIR"
        echo "remove them with: ${compose[*]} down && DXDP_PIN_DIR=$DXDP_PIN_DIR $dxdp cleanup" >&2
    else
        say "putting everything back"
        "${compose[@]}" down --remove-orphans >/dev/null 2>&1 || true
        "$dxdp" cleanup >/dev/null 2>&1 || true
    fi
    rm -f "$watch_log"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -e $DXDP_PIN_DIR ]]; then
    echo "demo.sh: $DXDP_PIN_DIR exists (a previous demo kept with --keep?); remove it with" \
        "DXDP_PIN_DIR=$DXDP_PIN_DIR $dxdp cleanup" >&2
    trap - EXIT
    exit 1
fi

say "two containers labeled dxdp.enable=true, dxdp.group=pair"
"${compose[@]}" up -d
server=$(docker ps -q --filter "label=com.docker.compose.project=$project" \
    --filter label=com.docker.compose.service=server)
client=$(docker ps -q --filter "label=com.docker.compose.project=$project" \
    --filter label=com.docker.compose.service=client)
server=$(docker inspect -f '{{.Name}}' "$server")
client=$(docker inspect -f '{{.Name}}' "$client")
server=${server#/}
client=${client#/}

say "dxdp watch: links what the labels ask for"
"$dxdp" watch >"$watch_log" 2>&1 &
watch_pid=$!
for _ in $(seq 100); do
    "$dxdp" status --json | grep -q '"origin": "watch"' && break
    sleep 0.1
done
cat "$watch_log" >&2
"$dxdp" status

say "stopping the watch: the link stays pinned and keeps working without it"
kill "$watch_pid"
wait "$watch_pid" 2>/dev/null || true
watch_pid=
"$dxdp" status | head -2

say "dxdp bench $client $server: bridge vs tc vs xdp vs loopback, interleaved"
"$dxdp" bench "$client" "$server" "${bench_args[@]}"
