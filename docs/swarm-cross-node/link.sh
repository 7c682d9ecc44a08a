#!/usr/bin/env bash
# link.sh on|off — dxdp's own link across nodes (not the prototype): `dxdp link c1 c2` on node 1
# and `dxdp link c2 c1` on node 2, or unlink; the binary is the tree's release build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
S=$here/../../scripts/swarm-nodes.sh
X=${DXDP:-$here/../../target/release/dxdp}
pins=/sys/fs/bpf/dxdp-crossnode
case $1 in
on) $S exec 1 "$X" --pin-dir $pins link c1 c2 >/dev/null; $S exec 2 "$X" --pin-dir $pins link c2 c1 >/dev/null ;;
off)
    $S exec 1 "$X" --pin-dir $pins unlink c1 c2 >/dev/null 2>&1 || true
    $S exec 2 "$X" --pin-dir $pins unlink c2 c1 >/dev/null 2>&1 || true ;;
*) echo "usage: $0 on|off" >&2; exit 2 ;;
esac
