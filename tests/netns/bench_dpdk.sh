#!/bin/bash
# bench_dpdk.sh BUILD_DIR [ROUNDS] [memif]: hcomm over the dpdk driver (DPDK's
# net_af_packet PMD on each node's veth) against hcomm over the tcp driver
# (kernel sockets), between two network namespaces joined by a bridge, one
# rank each, interleaved round by round so that both see the same machine:
# 8-byte ping-pong latency (p50) and 32 MiB allreduce bus bandwidth; the
# same with net_af_xdp on the veths (AF_XDP sockets, hcomm's XDP program)
# and over a memif pair (two fake nodes of this host, DPDK's shared-memory
# Ethernet link: the protocol's cost without a kernel on the path), and over
# a memif pair between the two namespaces (the layout of one container per
# rank: the control socket a file, socket-abstract=no, as an abstract one
# is per network namespace). Then the
# dpdk driver under 1% and 5% loss (HCOMM_DPDK_RX_DROP) and with its delay-
# based window off (HCOMM_DPDK_CC=off), and two dpdk jobs at once on the
# same two nodes (each on its own UDP ports) against one alone: what the
# window does when a flow competes. Medians and ratios close the output.
#
# af_packet copies every frame through the kernel's packet rings, so these
# absolute numbers say little about a DPDK NIC; the ratios, the loss
# behaviour and the sharing are what this measures. A third argument
# "memif" runs only tcp and the two memif layouts.
set -u
build=${1:?build dir}
rounds=${2:-3}
only=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "skipped: needs root"; exit 77; }
export HCN_JOB="bd$$"
work=$(mktemp -d /tmp/hcn-bench.XXXXXX)
trap '"$here/netns.sh" down; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
"$here/netns.sh" up 2 || exit 1

# hc_run TAG NET ENV... -- prog args: rank 0's output in $work/TAG
hc_run() {
    local tag=$1 net=$2 port=$((20000 + RANDOM % 12000)) r pids=() envs=()
    shift 2
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    for r in 0 1; do
        env HCOMM_RANK=$r HCOMM_SIZE=2 HCOMM_LOCAL_RANK=0 HCOMM_LOCAL_SIZE=1 \
            HCOMM_BOOTSTRAP="tcp://10.77.0.1:$port" HCOMM_JOB_KEY=bench HCOMM_LOG=error \
            HCOMM_NET=$net HCOMM_DPDK_PORT="net_af_packet0,iface=eth0" "${envs[@]}" \
            "$here/netns.sh" run $r "$@" >"$work/$tag.$r" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    cp "$work/$tag.0" "$work/$tag"
}
# memif_run TAG ENV... -- prog args: 2 ranks joined by a memif pair, on
# two fake nodes of this host; memif_ns_run: one per namespace, the control
# socket a file both namespaces see (an abstract one is per namespace).
# Rank 0's output in $work/TAG.
memif_job() { # LAYOUT (host|ns) TAG ENV... -- prog args
    local layout=$1 tag=$2 port=$((20000 + RANDOM % 12000)) r role pids=() envs=() where
    shift 2
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    for r in 1 0; do
        role=client
        [ $r = 0 ] && role=server
        if [ "$layout" = ns ]; then
            where=(HCOMM_BOOTSTRAP="tcp://10.77.0.1:$port"
                HCOMM_DPDK_PORT="net_memif0,role=$role,socket=$work/memifns.$port,socket-abstract=no"
                "$here/netns.sh" run $r)
        else
            where=(HCOMM_NODE_ID="memif$r" HCOMM_BOOTSTRAP="tcp://127.0.0.1:$port"
                HCOMM_DPDK_PORT="net_memif$r,role=$role,socket=$work/memif.$port")
        fi
        env HCOMM_RANK=$r HCOMM_SIZE=2 HCOMM_LOCAL_RANK=0 HCOMM_LOCAL_SIZE=1 HCOMM_JOB_KEY=bench \
            HCOMM_LOG=error HCOMM_NET=dpdk "${envs[@]}" "${where[@]}" "$@" >"$work/$tag.$r" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    cp "$work/$tag.0" "$work/$tag"
}
memif_run() { memif_job host "$@"; }
memif_ns_run() { memif_job ns "$@"; }
median() { sort -n | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "nan"}'; }
lat() { awk '$1 == 8 {print $3}' "$work/$1"; }   # p50 us
bw() { awk '$1 == 33554432 {print $8}' "$work/$1"; } # busbw GB/s

declare -A res
for ((i = 1; i <= rounds; i++)); do
    for net in tcp dpdk; do
        [ "$only" = memif ] && [ $net = dpdk ] && continue
        hc_run lat $net -- "$build/bin/pingpong" -b 8 -e 8 -n 2000
        res[lat,$net]+="$(lat lat) "
        hc_run bw $net -- "$build/bin/allreduce_bw" -b 32M -e 32M -n 10 -w 2
        res[bw,$net]+="$(bw bw) "
        cp "$work/bw" "$work/bw$([ $net = tcp ] && echo t || echo d)"
    done
    memif_ns_run lat -- "$build/bin/pingpong" -b 8 -e 8 -n 2000
    res[lat,memifns]+="$(lat lat) "
    memif_ns_run bw -- "$build/bin/allreduce_bw" -b 32M -e 32M -n 10 -w 2
    res[bw,memifns]+="$(bw bw) "
    cp "$work/bw" "$work/bwn"
    memif_run lat -- "$build/bin/pingpong" -b 8 -e 8 -n 2000
    res[lat,memif]+="$(lat lat) "
    memif_run bw -- "$build/bin/allreduce_bw" -b 32M -e 32M -n 10 -w 2
    res[bw,memif]+="$(bw bw) "
    if [ "$only" = memif ]; then
        echo "round $i: busbw tcp $(bw bwt) memif(netns) $(bw bwn) memif(host) $(bw bw)"
        continue
    fi
    xdp=HCOMM_DPDK_PORT=net_af_xdp0,iface=eth0
    hc_run lat dpdk $xdp -- "$build/bin/pingpong" -b 8 -e 8 -n 2000
    res[lat,xdp]+="$(lat lat) "
    hc_run bw dpdk $xdp -- "$build/bin/allreduce_bw" -b 32M -e 32M -n 10 -w 2
    res[bw,xdp]+="$(bw bw) "
    for loss in 0.01 0.05; do
        hc_run bw dpdk HCOMM_DPDK_RX_DROP=$loss -- "$build/bin/allreduce_bw" -b 32M -e 32M -n 6 -w 1
        res[bw,loss$loss]+="$(bw bw) "
    done
    hc_run bw dpdk HCOMM_DPDK_CC=off -- "$build/bin/allreduce_bw" -b 32M -e 32M -n 6 -w 1
    res[bw,ccoff]+="$(bw bw) "
    # Two jobs at once (UDP ports 47590 and 47600): each one's busbw.
    hc_run bwa dpdk -- "$build/bin/allreduce_bw" -b 32M -e 32M -n 10 -w 1 &
    a=$!
    hc_run bwb dpdk HCOMM_DPDK_UDP_PORT=47600 -- "$build/bin/allreduce_bw" -b 32M -e 32M -n 10 -w 1
    wait $a
    res[bw,pair_a]+="$(bw bwa) "
    res[bw,pair_b]+="$(bw bwb) "
    echo "round $i: lat tcp/dpdk ${res[lat,tcp]##* } / ${res[lat,dpdk]##* }"
done

med() { printf '%s\n' ${res[$1]} | median; }
echo "== summary ($rounds rounds, medians; every round interleaved)"
lt=$(med lat,tcp) bt=$(med bw,tcp)
lm=$(med lat,memif) bm=$(med bw,memif) lmn=$(med lat,memifns) bmn=$(med bw,memifns)
memif_lines() {
    echo "over memif (fake nodes):     pingpong $lm us (memif/tcp-veth $(echo "scale=3; $lm / $lt" | bc)), busbw $bm GB/s (memif/tcp-veth $(echo "scale=3; $bm / $bt" | bc))"
    echo "over memif (the namespaces): pingpong $lmn us (memif/tcp-veth $(echo "scale=3; $lmn / $lt" | bc)), busbw $bmn GB/s (memif/tcp-veth $(echo "scale=3; $bmn / $bt" | bc))"
}
if [ "$only" = memif ]; then
    echo "tcp(veth): pingpong $lt us, busbw $bt GB/s"
    memif_lines
    for k in "${!res[@]}"; do echo "raw $k: ${res[$k]}"; done | sort
    exit 0
fi
ld=$(med lat,dpdk) bd=$(med bw,dpdk)
echo "pingpong 8 B p50 us:         tcp(veth) $lt   dpdk(af_packet) $ld   dpdk/tcp $(echo "scale=3; $ld / $lt" | bc)"
echo "allreduce 32 MiB busbw GB/s: tcp(veth) $bt   dpdk(af_packet) $bd   dpdk/tcp $(echo "scale=3; $bd / $bt" | bc)"
lx=$(med lat,xdp) bx=$(med bw,xdp)
echo "over af_xdp:                 pingpong $lx us (af_xdp/tcp-veth $(echo "scale=3; $lx / $lt" | bc)), busbw $bx GB/s (af_xdp/tcp-veth $(echo "scale=3; $bx / $bt" | bc))"
memif_lines
echo "dpdk under loss:            1% $(med bw,loss0.01)   5% $(med bw,loss0.05)   (no loss $bd)"
echo "dpdk window off (CC=off):   $(med bw,ccoff)"
pa=$(med bw,pair_a) pb=$(med bw,pair_b)
echo "two dpdk jobs at once:      $pa + $pb   (shares $(echo "scale=2; 100 * $pa / ($pa + $pb)" | bc)% / $(echo "scale=2; 100 * $pb / ($pa + $pb)" | bc)%, one alone $bd)"
for k in "${!res[@]}"; do echo "raw $k: ${res[$k]}"; done | sort
