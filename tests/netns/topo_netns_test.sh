#!/bin/bash
# topo_netns_test.sh MP_COLL_NET: topology awareness between real network
# namespaces ("nodes", tests/netns/netns.sh): 2 nodes x 2 ranks numbered
# across them (0 and 2 on node 0, 1 and 3 on node 1), tcp between.
#   - every collective x dtype x op x count, in and out of place, with the
#     automatic choice, the hierarchical allreduce and the topology ring;
#   - the bytes that cross node 0's veth during a 16 MiB allreduce benchmark
#     (mp_coll_net --bench): the automatic choice (hier) moves at most 0.40x
#     of what HCOMM_TOPO=off (the rank-order ring) moves; the algorithms
#     predict 2 S against 6 S per allreduce, 0.33x (docs/topology.md).
# Exit 0 pass, 1 fail, 77 skipped.
set -u
prog=${1:?mp_coll_net}
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
export HCN_JOB="o$$"
work=$(mktemp -d /tmp/hcn-topo2.XXXXXX)
trap '"$here/netns.sh" down >/dev/null 2>&1; rm -rf "$work"' EXIT
"$here/netns.sh" up 2 >/dev/null || skip "cannot create network namespaces"
bad=0
fail() { echo "FAIL: $*"; bad=1; }
veth_bytes() {
    "$here/netns.sh" run 0 cat /sys/class/net/eth0/statistics/tx_bytes /sys/class/net/eth0/statistics/rx_bytes |
        awk '{s += $1} END {printf "%.0f\n", s}'
}
job() { # NAME ARGS -- ENV...: 4 ranks interleaved over the 2 nodes
    local name=$1 port=$((20000 + RANDOM % 12000)) r pids=() rc=0 args=()
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
    shift
    for r in 0 1 2 3; do
        env HCOMM_RANK=$r HCOMM_SIZE=4 HCOMM_LOCAL_RANK=$((r / 2)) HCOMM_LOCAL_SIZE=2 \
            HCOMM_BOOTSTRAP="tcp://10.77.0.1:$port" HCOMM_JOB_KEY=topo2 HCOMM_TIMEOUT=60 \
            HCOMM_TOPO_CACHE=none "$@" "$here/netns.sh" run $((r % 2)) "$prog" "${args[@]}" \
            >"$work/$name.$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    [ $rc = 0 ] || fail "job $name failed: $(tail -3 "$work/$name.0.log")"
    return $rc
}
for algo in auto hier ring; do
    job "coll-$algo" -c 1,7,1023,65537 -- HCOMM_ALGO=$algo && echo "collectives with HCOMM_ALGO=$algo: $(tail -1 "$work/coll-$algo.0.log")"
done
declare -A bytes bw
for cfg in off auto; do
    envs=()
    [ $cfg = off ] && envs=(HCOMM_TOPO=off)
    b0=$(veth_bytes)
    job "bench-$cfg" --bench 16777216 -- "${envs[@]}" || continue
    bytes[$cfg]=$(($(veth_bytes) - b0))
    bw[$cfg]=$(grep -o "busbw [0-9.]*" "$work/bench-$cfg.0.log" | awk '{print $2}')
    echo "16 MiB, $cfg: ${bytes[$cfg]} bytes across node 0's veth, busbw ${bw[$cfg]} GB/s"
done
if [ -n "${bytes[off]:-}" ] && [ -n "${bytes[auto]:-}" ]; then
    ratio=$(awk -v a="${bytes[auto]}" -v o="${bytes[off]}" 'BEGIN {printf "%.3f", a / o}')
    echo "veth bytes auto / off: $ratio (predicted 0.33)"
    awk -v r="$ratio" 'BEGIN {exit !(r <= 0.40)}' || fail "auto moved $ratio of off's bytes (want <= 0.40)"
fi
[ $bad = 0 ] && echo "topo_netns_test: all passed"
exit $bad
