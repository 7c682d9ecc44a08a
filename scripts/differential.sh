#!/usr/bin/env bash
# The differential harness's long run (docs/differential.md): generated cases through Docker's
# path and dxdp's, for a number of minutes; prints the cases run and every difference found.
#   scripts/differential.sh [--seed N] [--minutes M]
set -euo pipefail
seed="" minutes=10
while (($#)); do
    case "$1" in
        --seed) seed="$2"; shift 2 ;;
        --minutes) minutes="$2"; shift 2 ;;
        *) echo "usage: $0 [--seed N] [--minutes M]" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.."
export DXDP_DIFF_MINUTES="$minutes"
[[ -n "$seed" ]] && export DXDP_DIFF_SEED="$seed"
exec cargo test --release --test integration -- --test-threads=1 --nocapture --ignored \
    --exact differential::exposed_ports_match_dockers_path_long
