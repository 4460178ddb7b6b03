#!/bin/bash
# bench_lanes.sh BUILD_DIR [ROUNDS] [A_BYTES...]: the latency of small
# allreduces on one communicator while a large allreduce runs in a loop on
# another (bench/lanes_lat), with lanes (HCOMM_LANES=auto) and without
# (HCOMM_LANES=0), side by side in one run (docs/lanes.md). Two network
# namespaces joined by veth, one rank each, tcp between. Rounds (default 5)
# alternate the two settings so that both see the same machine; for each A
# size (default 16M and 128K: rendezvous chunks, and eager messages that
# shared socket 0 with B's before lanes) the medians of B's p50 and p99
# with A running, B alone, and A's bus bandwidth close the output, with the
# ratios off/on (latency: above 1 means lanes are faster) and on/off
# (bandwidth).
set -u
build=${1:?build dir}
rounds=${2:-5}
shift $(($# >= 2 ? 2 : $#))
sizes=("$@")
((${#sizes[@]})) || sizes=(16777216 131072)
here=$(cd "$(dirname "$0")" && pwd)
prog=$build/bin/lanes_lat
[ -x "$prog" ] || { echo "bench_lanes.sh: $prog not built"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "skipped: needs root"; exit 77; }
iters=${ITERS:-1000}
export HCN_JOB="l$$"
work=$(mktemp -d /tmp/hcn-lanes.XXXXXX)
trap '"$here/netns.sh" down; rm -rf "$work"' EXIT
"$here/netns.sh" up 2 || exit 1

launch() { # LANES A_BYTES: 2 nodes x 1 rank; rank 0's key=value line
    local lanes=$1 abytes=$2 port=$((20000 + RANDOM % 12000)) r pids=() rc=0
    for ((r = 0; r < 2; r++)); do
        env HCOMM_RANK=$r HCOMM_SIZE=2 HCOMM_LOCAL_RANK=0 HCOMM_LOCAL_SIZE=1 \
            HCOMM_BOOTSTRAP="tcp://10.77.0.1:$port" HCOMM_JOB_KEY=lanes HCOMM_LOG=error \
            HCOMM_TIMEOUT=120 HCOMM_TOPO_CACHE=none HCOMM_LANES="$lanes" \
            "$here/netns.sh" run $r "$prog" -a "$abytes" -b 8 -n "$iters" -w 100 \
            >"$work/o$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    ((rc == 0)) || { echo "run failed (HCOMM_LANES=$lanes, A $abytes B):"; cat "$work"/o*.log; exit 1; }
    grep '^lanes=' "$work/o0.log"
}
val() { tr ' ' '\n' | sed -n "s/^$1=//p"; }
median() { sort -g | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "nan"}'; }

declare -A res
for ((i = 1; i <= rounds; i++)); do
    for a in "${sizes[@]}"; do
        for lanes in auto 0; do
            line=$(launch $lanes "$a")
            echo "round $i A $a HCOMM_LANES=$lanes: $line"
            for k in busy_p50_us busy_p99_us alone_p50_us a_busbw_gbs; do
                res[$a,$lanes,$k]+="$(echo "$line" | val $k) "
            done
        done
    done
done

echo "== medians of $rounds rounds (B: 8 B float sum allreduce, $iters per run; A: float sum allreduce in a loop)"
printf "%-10s %-12s %10s %10s %10s %10s\n" A_bytes metric lanes=auto lanes=0 ratio which
for a in "${sizes[@]}"; do
    for k in busy_p50_us busy_p99_us alone_p50_us a_busbw_gbs; do
        on=$(echo ${res[$a,auto,$k]} | tr ' ' '\n' | median)
        off=$(echo ${res[$a,0,$k]} | tr ' ' '\n' | median)
        if [ "$k" = a_busbw_gbs ]; then
            r=$(echo "scale=3; $on / $off" | bc) w=on/off
        else
            r=$(echo "scale=3; $off / $on" | bc) w=off/on
        fi
        printf "%-10s %-12s %10s %10s %10s %10s\n" "$a" "$k" "$on" "$off" "$r" "$w"
    done
done
