#!/usr/bin/env bash
# bench.sh ROUNDS OUTDIR — interleaved A/B (plain overlay / br0 skip) cross-node: c1 (node 1) -> c2 (node 2).
# The skip is the prototype's (skip.sh), or with SKIP=link.sh dxdp's own link across nodes.
# Per round and mode: UDP 64 B iperf3 (5 s, received pps), TCP sockperf ping-pong 64 B (5 s),
# redis GET c20 (redis-benchmark, 200k requests). Load recorded before every run.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-5} out=${2:-$here/raw}; mkdir -p "$out"
D1="docker -H unix:///var/lib/dxt-swarm/sw1/docker.sock"
: "${SBX:?}" "${SRV:=10.240.220.4}"
csv=$out/results.csv; [[ -e $csv ]] || echo "round,mode,test,value,unit,loadavg1" >"$csv"
row() { echo "$1,$2,$3,$4,$5,$(cut -d' ' -f1 /proc/loadavg)" >>"$csv"; echo "$1 $2 $3 $4 $5 load=$(cut -d' ' -f1 /proc/loadavg)"; }
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then order="plain skip"; else order="skip plain"; fi
  for mode in $order; do
    if [[ $mode == skip ]]; then SBX=$SBX "$here/${SKIP:-skip.sh}" on; else SBX=$SBX "$here/${SKIP:-skip.sh}" off; fi
    { date; cat /proc/loadavg; top -bn1 | head -15; } >"$out/load-r$r-$mode.txt"
    l=$(cut -d' ' -f1 /proc/loadavg)
    $D1 exec c1 iperf3 -c $SRV -u -l 64 -b 0 -t 5 -J >"$out/udp-r$r-$mode.json"
    v=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["end"]["sum"]; print(round((s["packets"]-s["lost_packets"])/s["seconds"]))' "$out/udp-r$r-$mode.json")
    row $r $mode udp64_rx_pps "$v" pps
    $D1 exec c1 sockperf pp --tcp -i $SRV -p 11111 -m 64 -t 5 >"$out/rtt-r$r-$mode.txt" 2>&1
    v=$(grep -o 'Summary: Latency is [0-9.]*' "$out/rtt-r$r-$mode.txt" | awk '{print $NF}')
    row $r $mode tcp_pp_avg_latency_us "$v" us
    v=$(grep -E 'percentile 50.000 =' "$out/rtt-r$r-$mode.txt" | awk '{print $NF}')
    row $r $mode tcp_pp_p50_us "$v" us
    $D1 exec c1 redis-benchmark -h $SRV -t get -c 20 -n 200000 -q >"$out/redis-r$r-$mode.txt" 2>&1
    v=$(tr '\r' '\n' <"$out/redis-r$r-$mode.txt" | grep -o 'GET: [0-9.]* requests per second' | tail -1 | awk '{print $2}')
    row $r $mode redis_get_c20_rps "$v" rps
  done
done
SBX=$SBX "$here/${SKIP:-skip.sh}" off
