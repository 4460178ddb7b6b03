#!/bin/bash
# The dpdk driver between network namespaces: every byte between "nodes"
# goes through DPDK's net_af_packet PMD on the node's veth (no kernel
# socket carries data), one case per call:
#
#   dpdk_test.sh CASE BUILD_DIR
#
#   conformance  the driver conformance suite (test_drv_conformance dpdk):
#                two processes in one namespace on the two ends of a veth
#   p2p_1x1      2 nodes x 1 rank: p2p up to 4 MiB (mp_tcp_check)
#   coll_2x2     2 nodes x 2 ranks (shm inside, dpdk between; the two ranks
#                of a node share its interface, each on its own UDP port)
#   coll_3x1     3 nodes x 1 rank through the bridge
#   loss         2 x 1 with 2% of received data packets dropped
#                (HCOMM_DPDK_RX_DROP): every result still exact, and the
#                ranks' statistics show the retransmissions that did it
#   sigkill      2 x 2: a rank killed mid-run, the others report
#                HCOMM_ERR_PEER_FAILED
#
# Exit 0 pass, 1 fail, 77 skipped (not root, no netns, no dpdk driver).
set -u
case_=${1:?case}
build=${2:?build directory}
prog="$build/bin/mp_tcp_check"
HCN_PREFIX=d
job_env=(HCOMM_NET=dpdk HCOMM_DPDK_PORT="net_af_packet0,iface=eth0")
export HCOMM_TIMEOUT=${HCOMM_TIMEOUT:-90}
"$build/bin/hcomm_info" 2>/dev/null | grep -q "^ *dpdk" || {
    echo "skipped: this build has no dpdk driver"
    exit 77
}
# shellcheck source=tests/netns/jobs.sh
. "$(cd "$(dirname "$0")" && pwd)/jobs.sh"
cleanup_extra() { ip netns del "hcdp-$$" 2>/dev/null; }

case "$case_" in
conformance)
    # One namespace, a veth pair: rank 0 on a0, rank 1 on a1. The ends get
    # far-apart interface indexes: af_packet names its fanout group
    # (pid ^ ifindex), and two forked processes with neighbouring pids on
    # neighbouring indexes would collide (EINVAL).
    ns="hcdp-$$"
    ip netns add "$ns" || fail "netns add"
    ip -n "$ns" link add a0 index $((4096 + $$ % 1000 * 2)) type veth peer name a1 \
        index $((12288 + $$ % 1000 * 2)) || fail "veth"
    ip -n "$ns" link set a0 up && ip -n "$ns" link set a1 up || fail "link up"
    ip -n "$ns" addr add 10.88.0.1/24 dev a0 && ip -n "$ns" addr add 10.88.0.2/24 dev a1
    HCOMM_DPDK_PORT='net_af_packet%r,iface=a%r' HCOMM_DPDK_PEER_TIMEOUT=5 \
        timeout 300 ip netns exec "$ns" "$build/bin/test_drv_conformance" dpdk >"$work/r0.log" 2>&1
    rc=$?
    cat "$work/r0.log"
    [ $rc = 0 ] || fail "conformance exit $rc"
    grep -q "PASSED" "$work/r0.log" || fail "no PASSED line"
    ;;
p2p_1x1)
    "$netns" up 2 || fail "netns setup"
    launch 2 1 --max 4M
    wait_all 150
    ;;
coll_2x2)
    "$netns" up 2 || fail "netns setup"
    launch 2 2 --max 2M --coll
    wait_all 200
    ;;
coll_3x1)
    "$netns" up 3 || fail "netns setup"
    launch 3 1 --max 2M --coll
    wait_all 200
    ;;
loss)
    "$netns" up 2 || fail "netns setup"
    job_env+=(HCOMM_DPDK_RX_DROP=0.02 HCOMM_STATS=1 HCOMM_STATS_LEVEL=2)
    launch 2 1 --max 2M --coll
    wait_all 200
    for r in 0 1; do
        n=$(grep -o "retransmits[^0-9]*[0-9]*" "$work/r$r.log" | grep -o "[0-9]*$" | sort -n | tail -1)
        d=$(grep -o "rx_fault_dropped[^0-9]*[0-9]*" "$work/r$r.log" | grep -o "[0-9]*$" | sort -n | tail -1)
        echo "rank $r: ${d:-?} data packets dropped on receipt, ${n:-?} retransmitted"
        [ "${n:-0}" -gt 0 ] || fail "rank $r: no retransmissions reported under 2% loss"
        [ "${d:-0}" -gt 0 ] || fail "rank $r: the fault injection dropped nothing"
    done
    ;;
sigkill)
    "$netns" up 2 || fail "netns setup"
    launch 2 2 --until-fail 60
    sleep 4
    kill -KILL "${pids[3]}"
    for i in 0 1 2; do
        t0=$SECONDS
        while kill -0 "${pids[$i]}" 2>/dev/null && ((SECONDS - t0 < 60)); do sleep 0.2; done
        wait "${pids[$i]}" || fail "rank $i did not report the failure (exit $?)"
        grep -q "PEER_FAILED\|failed" "$work/r$i.log" || fail "rank $i: no failure message"
    done
    pids=()
    ;;
*)
    echo "unknown case $case_"
    exit 2
    ;;
esac
echo "PASS ($case_)"
exit 0
