#!/usr/bin/env bash
# The differential harness's long run (docs/differential.md): generated cases through Docker's
# path and dxdp's, for a number of minutes per topology; prints the cases run and every
# difference found.
#   scripts/differential.sh [--topology exposed|links|overlay|outbound|both|all] [--seed N] [--minutes M]
# `both` runs the exposed-port topology, then the link topology, M minutes each; `all` those two,
# then the overlay link topology (a one-node swarm of the host's dockerd, made and left: not where
# dockerd is in a swarm already), then the outbound topology (`dxdp egress`).
set -euo pipefail
usage() { echo "usage: $0 [--topology exposed|links|overlay|outbound|both|all] [--seed N] [--minutes M]" >&2; exit 2; }
seed="" minutes=10 topology=exposed
while (($#)); do
    case "$1" in
        --seed) seed="${2:-}"; shift 2 ;;
        --minutes) minutes="${2:-}"; shift 2 ;;
        --topology) topology="${2:-}"; shift 2 ;;
        *) usage ;;
    esac
done
case "$topology" in
    exposed) tests=(differential::exposed_ports_match_dockers_path_long) ;;
    links) tests=(differential::links_match_the_bridge_long) ;;
    overlay) tests=(differential::overlay_links_match_the_overlay_bridge_long) ;;
    outbound) tests=(differential::outbound_connections_match_dockers_path_long) ;;
    both) tests=(differential::exposed_ports_match_dockers_path_long
                 differential::links_match_the_bridge_long) ;;
    all) tests=(differential::exposed_ports_match_dockers_path_long
                differential::links_match_the_bridge_long
                differential::overlay_links_match_the_overlay_bridge_long
                differential::outbound_connections_match_dockers_path_long) ;;
    *) usage ;;
esac
cd "$(dirname "$0")/.."
export DXDP_DIFF_MINUTES="$minutes"
[[ -n "$seed" ]] && export DXDP_DIFF_SEED="$seed"
exec cargo test --release --test integration -- --test-threads=1 --nocapture --ignored \
    --exact "${tests[@]}"
