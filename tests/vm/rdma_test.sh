#!/bin/bash
# Soft-RoCE tests of the verbs driver: one qemu guest per call
# (tests/vm/vm-run.sh, Debian's kernel, which has rdma_rxe), one rxe device
# in it (tests/vm/rxe-run.sh), ranks launched by hand as an external launcher
# would: HCOMM_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE, a bootstrap on 127.0.0.1, a
# job key, and HCOMM_NODE_ID=nodeK so that ranks r/PPN form node K: shm
# inside a node, the verbs driver between nodes (every rank on the one rxe
# device, through its loopback).
#
#   rdma_test.sh CASE BUILD_DIR
#
#   conformance  test_drv_conformance verbs (the ops contract, 2 forked
#                processes)
#   mp_1x1       2 nodes x 1 rank: mp_tcp_check --coll --max 64M (p2p sizes,
#                outstanding messages, every collective), mp_drv_conformance
#                (public-API contract), mp_stale_reg (registrations of
#                remapped buffers, rendezvous by get and by write) and
#                mp_coll_matrix (every collective x dtype x op x count, in
#                place and out of place), then mp_tcp_check again with
#                HCOMM_IB_EAGER=send (eager frames by SEND into posted
#                receives: the mlx5 model found this mode's receive order
#                slipping when a frame came before the connection was up)
#   mp_2x2       2 nodes x 2 ranks: mp_tcp_check --coll --max 16M and
#                mp_coll_matrix
#   gpu          the GPU model's device buffers (HCOMM_GPU_MODEL=1): mp_gpu_stage
#                p2p at 1+1 (0 B - 4 MiB, staged: rxe has no dmabuf),
#                mp_gpu_matrix --device all and mp_gpu_pipe vectors at 2+2
#   fault_kill   mp_drv_conformance --kill at 1+1; 2x2 p2p exchange with
#                rank 3 SIGKILLed; 2x2 allreduce loop with rank 1 SIGKILLed:
#                every survivor reports HCOMM_ERR_PEER_FAILED naming the dead
#                rank within HCOMM_VM_FAIL_S (default 5) seconds and exits
#   fault_stop   2x2: rank 2 SIGSTOPped 5 s mid-run, then continued: all pass
#   bench        pingpong and allreduce_bw (checked) at 1+1, their tables
#                printed
#
# HCOMM_VM_NET=tcp runs every case over the tcp driver instead of verbs (the
# scripts proven without the verbs driver; rxe is still brought up).
# HCOMM_VM_TIMEOUT: the guest's limit in seconds (default 200).
#
# Exit 0 pass, 1 fail (with the ranks' log tails), 77 skipped (no guest
# here, or no soft-RoCE device in it).
#
# Inside the guest this script runs again as `rdma_test.sh --guest CASE
# BUILD_DIR` under rxe-run.sh; that form also runs by hand as root on any
# host that has an RDMA device in HCOMM_IB_HCA.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" != --guest ]; then
    case_=${1:?case}
    build=$(cd "${2:?build dir}" && pwd) || exit 1
    exec bash "$here/vm-run.sh" --timeout "${HCOMM_VM_TIMEOUT:-200}" -- \
        bash "$here/rxe-run.sh" bash "$here/rdma_test.sh" --guest "$case_" "$build"
fi
shift
case_=${1:?case}
build=${2:?build dir}
# shellcheck source=tests/vm/rdma_lib.sh
. "$here/rdma_lib.sh"

case "$case_" in
conformance)
    prog=$(bin test_drv_conformance)
    step "test_drv_conformance $NET"
    HCOMM_TIMEOUT=30 t 110 "$prog" "$NET" >"$work/r0.log" 2>&1
    rc=$?
    grep -E "^\[ *(RUN|OK|FAILED|PASSED|SKIPPED) *\]|skipped" "$work/r0.log" | tail -60
    [ $rc = 77 ] && fail "test_drv_conformance skipped $NET although rxe0 is ACTIVE"
    [ $rc = 0 ] || fail "test_drv_conformance $NET exited with status $rc"
    ;;
mp_1x1)
    step "mp_tcp_check --coll --max 64M at 1+1"
    launch 2 1 "$(bin mp_tcp_check)" --coll --max 64M
    wait_all 60 "mp_tcp_check passed"
    step "mp_drv_conformance at 1+1"
    launch 2 1 "$(bin mp_drv_conformance)"
    wait_all 60 "phase .* done\|mp_drv_conformance: passed"
    step "mp_stale_reg at 1+1 (buffers remapped between rendezvous transfers; HCOMM_RNDV=auto, then write)"
    launch 2 1 "$(bin mp_stale_reg)"
    wait_all 40 "passed\|rounds"
    HCOMM_RNDV=write launch 2 1 "$(bin mp_stale_reg)"
    wait_all 40 "passed\|rounds"
    # (collectives of rendezvous sizes: mp_tcp_check above, int32)
    step "mp_coll_matrix at 1+1 (every collective x dtype x op, counts 0,1,7,1023)"
    launch 2 1 "$(bin mp_coll_matrix)" --counts 0,1,7,1023
    wait_all 60 "cases on\|mp_coll_matrix: passed"
    step "mp_tcp_check --coll --max 16M at 1+1, eager frames by SEND (HCOMM_IB_EAGER=send)"
    HCOMM_IB_EAGER=send launch 2 1 "$(bin mp_tcp_check)" --coll --max 16M
    wait_all 60 "mp_tcp_check passed"
    ;;
mp_2x2)
    step "mp_tcp_check --coll --max 16M at 2+2 (shm inside a node, $NET between)"
    launch 2 2 "$(bin mp_tcp_check)" --coll --max 16M
    wait_all 70 "mp_tcp_check passed"
    # Without the barrier timing check: 4 ranks on 2 emulated CPUs leave a
    # barrier tens of ms apart, which that check reads as an early exit.
    step "mp_coll_matrix at 2+2 (every collective x dtype x op, counts 0,1,7,1023; no barrier timing)"
    launch 2 2 "$(bin mp_coll_matrix)" --counts 0,1,7,1023 \
        --colls allreduce,broadcast,reduce,allgather,reduce_scatter,alltoall
    wait_all 60 "cases on\|mp_coll_matrix: passed"
    ;;
gpu)
    # The GPU model's device buffers over verbs (tests/gpu, docs/gpu.md):
    # rxe refuses ibv_reg_dmabuf_mr, so p2p above the eager size is staged
    # between the nodes (GPUDirect RDMA by dmabuf runs in CI on the mlx5
    # queue model and the fake driver), by IPC inside a node.
    gm=$(bin mp_gpu_matrix 2>/dev/null) || {
        echo "skipped: mp_gpu_matrix not built (-DHCOMM_GPU_MODEL=OFF)"
        exit 77
    }
    step "mp_gpu_stage p2p at 1+1 (device/host placements, 0 B - 4 MiB; staged: no dmabuf on rxe)"
    HCOMM_GPU_MODEL=1 HCOMM_LOG=info launch 2 1 "$(bin mp_gpu_stage)" p2p 4194304
    wait_all 90 "GPUDirect\|passed"
    step "mp_gpu_matrix --device all at 2+2 (every collective x op, int32 and bfloat16, counts 0,1,7,1023,65537)"
    HCOMM_GPU_MODEL=1 launch 2 2 "$gm" --device all --dtypes int32,bfloat16 --counts 0,1,7,1023,65537
    wait_all 120 "cases on\|passed"
    # (the pipeline's block collectives are ordinary host collectives per
    # chunk, over verbs in mp_2x2; its vector ones are its newest code)
    step "mp_gpu_pipe vectors at 2+2 (allgatherv, reduce_scatterv, alltoallv in 64K chunks)"
    HCOMM_GPU_MODEL=1 HCOMM_GPU_STAGE_CHUNK=64K launch 2 2 "$(bin mp_gpu_pipe)" vectors
    wait_all 60 "passed"
    ;;
fault_kill)
    lim=${HCOMM_VM_FAIL_S:-5}
    step "mp_drv_conformance --kill at 1+1 (rank 1 SIGKILLs itself)"
    launch 2 1 "$(bin mp_drv_conformance)" --kill
    wait_all 40 "kill: passed\|SIGKILLed as planned"

    step "2+2 p2p exchange, rank 3 SIGKILLed: ranks 0-2 name rank 3 within $lim s"
    launch 2 2 "$(bin mp_tcp_check)" --until-fail 40
    for r in 0 1 2 3; do wait_for_log "$work/r$r.log" "exchanging" 40 || fail "rank $r never started exchanging"; done
    sleep 2
    kill_rank 3
    wait_all 20
    check_blame 3 "rank 3" "$lim" 0 1 2

    step "2+2 allreduce loop, rank 1 SIGKILLed: ranks 0, 2, 3 name rank 1 within $lim s"
    launch 2 2 "$(bin mp_tcp_check)" --coll-until-fail 40
    for r in 0 1 2 3; do wait_for_log "$work/r$r.log" "exchanging" 40 || fail "rank $r never started"; done
    sleep 1
    kill_rank 1
    wait_all 20
    check_blame 1 "peer rank 1 (world) failed" "$lim" 0 2 3
    ;;
fault_stop)
    step "2+2 p2p rounds for 14 s, rank 2 SIGSTOPped 5 s and continued: all pass"
    HCOMM_LOG=info launch 2 2 "$(bin mp_tcp_check)" --max 1M --duration 14
    wait_for_log "$work/r2.log" "rank 2 of 4 up" 40 || fail "rank 2 never came up"
    sleep 3
    rank_pid 2
    kill -STOP "$rpid"
    echo "rank 2 (pid $rpid) stopped"
    sleep 5
    kill -CONT "$rpid"
    echo "rank 2 continued"
    wait_all 90 "mp_tcp_check passed"
    grep -h "suspect\|speaks again" "$work"/r*.log | head -4
    ;;
bench)
    step "pingpong over $NET at 1+1: 4 B - 64 KiB, 200 iterations"
    launch 2 1 "$(bin pingpong)" -b 4 -e 64K -f 16 -n 200 -w 20
    wait_all 60
    grep -v "^\[hcomm" "$work/r0.log"
    step "pingpong over $NET at 1+1: 1 - 4 MiB, 10 iterations"
    launch 2 1 "$(bin pingpong)" -b 1M -e 4M -f 4 -n 10 -w 1
    wait_all 60
    grep -v "^\[hcomm" "$work/r0.log"
    step "allreduce_bw over $NET at 1+1 (results checked)"
    launch 2 1 "$(bin allreduce_bw)" -b 4 -e 4M -f 32 -n 5 -w 1
    wait_all 60
    grep -v "^\[hcomm" "$work/r0.log"
    grep -q "Out of bounds values : 0 OK" "$work/r0.log" || fail "allreduce_bw found wrong results"
    ;;
*)
    echo "unknown case $case_" >&2
    exit 2
    ;;
esac
echo "PASS ($case_, HCOMM_NET=$NET)"
exit 0
