#!/usr/bin/env bash
# skip.sh on|off|show — the br0-skip prototype on both nodes (sandbox 1-$NETID of overlay xov).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
S=$here/../scripts/swarm-nodes.sh
: "${SBX:?SBX=1-<netid prefix>}" "${VETH:=veth1}"
for k in 1 2; do
  case $1 in
  on)
    $S exec $k sh -ec "
      rm -rf /sys/fs/bpf/skipbr; bpftool prog loadall $here/skipbr-node$k.o /sys/fs/bpf/skipbr type classifier
      n='nsenter --net=/run/docker/netns/$SBX'
      \$n tc qdisc replace dev $VETH clsact; \$n tc qdisc replace dev vxlan0 clsact
      \$n tc filter add dev $VETH ingress bpf da pinned /sys/fs/bpf/skipbr/to_vxlan
      \$n tc filter add dev vxlan0 ingress bpf da pinned /sys/fs/bpf/skipbr/from_vxlan" ;;
  off)
    $S exec $k sh -c "n='nsenter --net=/run/docker/netns/$SBX'
      \$n tc qdisc del dev $VETH clsact 2>/dev/null; \$n tc qdisc del dev vxlan0 clsact 2>/dev/null; rm -rf /sys/fs/bpf/skipbr; true" ;;
  show)
    $S exec $k sh -c "n='nsenter --net=/run/docker/netns/$SBX'; echo node $k; \$n tc filter show dev $VETH ingress; \$n tc filter show dev vxlan0 ingress" ;;
  esac
done
