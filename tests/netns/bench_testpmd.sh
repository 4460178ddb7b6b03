#!/bin/bash
# bench_testpmd.sh [SECONDS]: what the virtual devices themselves carry,
# with DPDK's own dpdk-testpmd and no hcomm: one process sends as fast as
# it can (--forward-mode=txonly), the other receives (rxonly), each on one
# forwarding core, and the receiver's rate over the last stats period is
# the device's limit on this host (Mpps and GB/s of frame bytes):
#   memif     a memif pair (server receives), 1500-byte frames and, with
#             chained 2 KiB segments, 16000-byte frames (hcomm's memif default)
#   af_packet two network namespaces joined by a veth pair, net_af_packet on
#             each end, 1500-byte frames
# Compare with bench_dpdk.sh, which runs hcomm over the same devices.
# Needs root (namespaces, hugepages); skips (77) without dpdk-testpmd.
set -u
secs=${1:-6}
command -v dpdk-testpmd >/dev/null || { echo "skipped: dpdk-testpmd not installed (Debian: dpdk-dev)"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "skipped: needs root"; exit 77; }
work=$(mktemp -d /tmp/hc-testpmd.XXXXXX)
ns0="hctp0-$$" ns1="hctp1-$$"
trap 'ip netns del "$ns0" 2>/dev/null; ip netns del "$ns1" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

# run_pair TAG RXNS TXNS RXVDEV TXVDEV TXPKTS: prints "TAG Mpps GB/s"
run_pair() {
    local tag=$1 rxns=$2 txns=$3 rxdev=$4 txdev=$5 txpkts=$6 rxpre=() txpre=()
    [ -n "$rxns" ] && rxpre=(ip netns exec "$rxns")
    [ -n "$txns" ] && txpre=(ip netns exec "$txns")
    # Each process: a main lcore and one forwarding lcore, on different CPUs.
    timeout $((secs + 4)) "${rxpre[@]}" dpdk-testpmd --lcores='0@0,1@1' --in-memory --no-pci \
        --no-telemetry --vdev="$rxdev" -- --forward-mode=rxonly --stats-period 1 \
        --mbuf-size=16384 --total-num-mbufs=8192 >"$work/$tag.rx" 2>&1 &
    local rx=$!
    sleep 1.5
    timeout $((secs + 1)) "${txpre[@]}" dpdk-testpmd --lcores='0@1,1@0' --in-memory --no-pci \
        --no-telemetry --vdev="$txdev" -- --forward-mode=txonly --txpkts="$txpkts" --total-num-mbufs=8192 \
        --stats-period 1 >"$work/$tag.tx" 2>&1
    { wait $rx; } 2>/dev/null # (testpmd may crash on exit once its peer left)
    # The last full period with traffic: the highest of the last 3 readings.
    local pps bps
    pps=$(grep -o "Rx-pps: *[0-9]*" "$work/$tag.rx" | grep -o "[0-9]*$" | tail -4 | sort -n | tail -1)
    bps=$(grep -o "Rx-bps: *[0-9]*" "$work/$tag.rx" | grep -o "[0-9]*$" | tail -4 | sort -n | tail -1)
    echo "$tag $(echo "scale=3; ${pps:-0} / 1000000" | bc) Mpps $(echo "scale=3; ${bps:-0} / 8000000000" | bc) GB/s"
}

run_pair memif_1500 "" "" "net_memif0,role=server,socket=$work/m1.sock" \
    "net_memif1,role=client,socket=$work/m1.sock" 1500
run_pair memif_16000 "" "" "net_memif0,role=server,socket=$work/m2.sock,bsize=16128" \
    "net_memif1,role=client,socket=$work/m2.sock,bsize=16128" \
    2048,2048,2048,2048,2048,2048,2048,1664

ip netns add "$ns0" && ip netns add "$ns1" || { echo "skipped: cannot create namespaces"; exit 77; }
ip link add tp0 netns "$ns0" type veth peer name tp1 netns "$ns1" || exit 1
ip -n "$ns0" link set tp0 up && ip -n "$ns1" link set tp1 up
run_pair af_packet_1500 "$ns1" "$ns0" "net_af_packet0,iface=tp1,framecnt=4096,qdisc_bypass=0" \
    "net_af_packet0,iface=tp0,framecnt=4096,qdisc_bypass=0" 1500
