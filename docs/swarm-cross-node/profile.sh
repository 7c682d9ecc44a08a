#!/usr/bin/env bash
# profile.sh MODE OUTDIR — perf record -a -g during a 6 s UDP 64 B iperf3 run c1 -> c2 (MODE plain|skip).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); mode=$1 out=$2; mkdir -p "$out"
D1="docker -H unix:///var/lib/dxt-swarm/sw1/docker.sock"
if [[ $mode == skip ]]; then SBX=$SBX "$here/skip.sh" on; else SBX=$SBX "$here/skip.sh" off; fi
{ date; cat /proc/loadavg; top -bn1 | head -15; } >"$out/load-profile-$mode.txt"
$D1 exec c1 iperf3 -c ${SRV:-10.240.220.4} -u -l 64 -b 0 -t 8 -J >"$out/udp-profile-$mode.json" &
ip=$!
sleep 1.5
perf record -a -g -F 2999 -o "$out/perf-$mode.data" -- sleep 5 2>"$out/perf-record-$mode.log"
wait $ip
{ date; cat /proc/loadavg; } >>"$out/load-profile-$mode.txt"
SBX=$SBX "$here/skip.sh" off
