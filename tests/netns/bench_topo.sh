#!/bin/bash
# bench_topo.sh BUILD_DIR [ROUNDS]: topology awareness over tcp between two
# network namespaces ("nodes", tests/netns/netns.sh), 2 ranks each, ranks
# numbered across the nodes (0 and 2 on node 0, 1 and 3 on node 1). ROUNDS
# (default 3) interleaved rounds of allreduce_bw at 16 MiB and at 8 B with
#   off   HCOMM_TOPO=off                 (the rank-order ring)
#   ring  HCOMM_TOPO=full HCOMM_ALGO=ring (the topology-ordered ring)
#   auto  HCOMM_TOPO=full                 (the model's choice: hier at 16 MiB)
# and, for each 16 MiB run, the bytes that crossed node 0's veth (tx + rx,
# /sys/class/net/eth0/statistics, bootstrap and wireup included). Prints the
# medians and the ratios against off. Then, where Open MPI is installed, its
# 16 MiB allreduce on the same placement (mpirun --map-by node over the two
# namespaces: ranks alternate nodes) with its default coll tuned and with
# coll han (hierarchical), once each, after the rounds. Not a ctest test (a
# benchmark).
#
# bench_topo.sh BUILD_DIR ROUNDS COLL:BYTES...: instead, ROUNDS interleaved
# rounds of each COLL_bw (allreduce, allgather, reduce_scatter, reduce) at
# BYTES (the bench's size: for allgather and reduce_scatter all n blocks,
# BYTES / 4 per rank) with ALGO=ring, ALGO=hier and the automatic choice;
# prints the medians of the out-of-place time and hier / ring, auto / ring.
#   bash tests/netns/bench_topo.sh build 5 allgather:4M allgather:16M reduce_scatter:16M
set -u
build=$(cd "${1:?build dir}" && pwd)
rounds=${2:-3}
shift $(($# < 2 ? $# : 2))
colls=("$@")
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "skipped: needs root"; exit 77; }
export HCN_JOB="t$$"
work=$(mktemp -d /tmp/hcn-topo.XXXXXX)
trap '"$here/netns.sh" down; rm -rf "$work"' EXIT
"$here/netns.sh" up 2 || exit 1
ITERS=${HCOMM_BENCH_ITERS:-20}

veth_bytes() {
    "$here/netns.sh" run 0 cat /sys/class/net/eth0/statistics/tx_bytes /sys/class/net/eth0/statistics/rx_bytes |
        awk '{s += $1} END {printf "%.0f\n", s}'
}

run() { # NAME PROG BYTES ENV...: prints "busbw_GBps cross_bytes"
    local name=$1 prog=$2 bytes=$3 port=$((20000 + RANDOM % 12000)) r pids=() before after
    shift 3
    before=$(veth_bytes)
    for r in 0 1 2 3; do
        env HCOMM_RANK=$r HCOMM_SIZE=4 HCOMM_LOCAL_RANK=$((r / 2)) HCOMM_LOCAL_SIZE=2 \
            HCOMM_BOOTSTRAP="tcp://10.77.0.1:$port" HCOMM_JOB_KEY=topo HCOMM_LOG=warn "$@" \
            "$here/netns.sh" run $((r % 2)) "$build/bin/$prog" -b "$bytes" -e "$bytes" \
            -n "$ITERS" -w 3 >"$work/$name.$r.log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}" || { echo "run $name failed:" >&2; cat "$work/$name.0.log" >&2; }
    after=$(veth_bytes)
    # nccl-tests columns: size count type redop root time algbw busbw #wrong (out of place)
    local bw
    bw=$(awk -v s="$bytes" '$1 == s {print $8; exit}' "$work/$name.0.log")
    echo "${bw:-nan} $((after - before))"
}
median() { sort -g | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "nan"}'; }

if [ ${#colls[@]} -gt 0 ]; then
    declare -A us
    for ((i = 1; i <= rounds; i++)); do
        for cb in "${colls[@]}"; do
            coll=${cb%%:*} size=${cb#*:}
            for cfg in ring hier auto; do
                case $cfg in
                ring) envs=(HCOMM_ALGO=ring) ;;
                hier) envs=(HCOMM_ALGO=hier) ;;
                auto) envs=() ;;
                esac
                run "$coll-$size-$cfg-$i" "${coll}_bw" "$size" "${envs[@]}" >/dev/null
                # nccl-tests columns: size count type redop root time algbw busbw #wrong
                # (out of place), then in place: a wrong element is no time
                read -r t w < <(awk '$1 ~ /^[0-9]+$/ && $1 > 0 {print $6, $9 + $15; exit}' \
                    "$work/$coll-$size-$cfg-$i.0.log")
                [ "${w:-1}" = 0 ] || { echo "$coll $size $cfg: ${w:-no} wrong elements" >&2; t=nan; }
                us[$cb.$cfg]+="${t:-nan} "
                echo "round $i $coll $size $cfg: ${t:-nan} us"
            done
        done
    done
    echo
    printf '%-22s %10s %10s %10s %12s %12s\n' "collective:size" "ring us" "hier us" "auto us" "hier/ring" "auto/ring"
    for cb in "${colls[@]}"; do
        for cfg in ring hier auto; do
            eval "m_$cfg=$(tr ' ' '\n' <<<"${us[$cb.$cfg]}" | grep . | median)"
        done
        awk -v c="$cb" -v r="$m_ring" -v h="$m_hier" -v a="$m_auto" \
            'BEGIN {printf "%-22s %10s %10s %10s %12.2f %12.2f\n", c, r, h, a, h / r, a / r}'
    done
    exit 0
fi

declare -A bw lat xb
for ((i = 1; i <= rounds; i++)); do
    for cfg in off ring auto; do
        case $cfg in
        off) envs=(HCOMM_TOPO=off) ;;
        ring) envs=(HCOMM_TOPO=full HCOMM_ALGO=ring) ;;
        auto) envs=(HCOMM_TOPO=full) ;;
        esac
        read -r b x < <(run "$cfg-big-$i" allreduce_bw 16777216 "${envs[@]}")
        read -r l _ < <(run "$cfg-small-$i" allreduce_bw 8 "${envs[@]}")
        lt=$(awk '$1 == 8 {print $6; exit}' "$work/$cfg-small-$i.0.log")
        bw[$cfg]+="$b " xb[$cfg]+="$x " lat[$cfg]+="${lt:-nan} "
        echo "round $i $cfg: 16 MiB busbw $b GB/s, $x bytes across the veth; 8 B time ${lt:-nan} us"
    done
done
echo
printf '%-6s %14s %18s %14s\n' config "busbw GB/s" "veth bytes" "8 B us"
for cfg in off ring auto; do
    m_bw=$(tr ' ' '\n' <<<"${bw[$cfg]}" | grep . | median)
    m_x=$(tr ' ' '\n' <<<"${xb[$cfg]}" | grep . | median)
    m_l=$(tr ' ' '\n' <<<"${lat[$cfg]}" | grep . | median)
    printf '%-6s %14s %18s %14s\n' "$cfg" "$m_bw" "$m_x" "$m_l"
    eval "M_BW_$cfg=$m_bw M_X_$cfg=$m_x M_L_$cfg=$m_l"
done

# Open MPI on the same placement: daemons started in each namespace by an
# rsh agent (as bench_tcp.sh), 2 slots per node, ranks mapped by node, btl
# tcp,self. Its node detection goes by host name, and the namespaces share
# this host's: coll han sees one node here (in Open MPI 4.1.4 it then
# crashed with SIGSEGV in rank 2), so its row is a reference only where it
# runs.
ompi_bw() { # MCA args...: busbw GB/s of the 16 MiB allreduce
    "$here/netns.sh" run 0 mpirun --allow-run-as-root -np 4 --host 10.77.0.1:2,10.77.0.2:2 --map-by node \
        --mca plm_rsh_agent "$work/agent.sh" --mca btl tcp,self --mca btl_tcp_if_include eth0 \
        --mca oob_tcp_if_include eth0 --mca pml ob1 "$@" "$work/mpi_ref" 16777216 2>&1 |
        sed -n 's/.*busbw \([0-9.]*\) GB.*/\1/p'
}
M_BW_tuned="" M_BW_han=""
if command -v mpicc >/dev/null && command -v mpirun >/dev/null && mpicc -O2 "$here/mpi_ref.c" -o "$work/mpi_ref"; then
    "$here/netns.sh" rsh-agent "$work/agent.sh"
    M_BW_tuned=$(ompi_bw --mca coll_han_priority 0)
    M_BW_han=$(ompi_bw --mca coll_han_priority 100)
    printf '%-6s %14s   (Open MPI %s, coll tuned, one run)\n' tuned "${M_BW_tuned:-failed}" "$(mpirun --version | head -1 | awk '{print $NF}')"
    printf '%-6s %14s   (Open MPI, coll han, one run)\n' han "${M_BW_han:-failed}"
else
    echo "Open MPI not installed: no reference (apt-get install openmpi-bin libopenmpi-dev)"
fi
echo
for cfg in ring auto; do
    eval "b=\$M_BW_$cfg x=\$M_X_$cfg l=\$M_L_$cfg"
    awk -v c="$cfg" -v b="$b" -v x="$x" -v l="$l" -v B="$M_BW_off" -v X="$M_X_off" -v L="$M_L_off" \
        'BEGIN {printf "%s / off: busbw %.2fx, veth bytes %.2fx, 8 B time %.2fx\n", c, b / B, x / X, l / L}'
done
for ref in tuned han; do
    eval "r=\$M_BW_$ref"
    [ -n "$r" ] && awk -v c="$ref" -v a="$M_BW_auto" -v r="$r" 'BEGIN {printf "auto / Open MPI %s: busbw %.2fx\n", c, a / r}'
done
