#!/bin/bash
# bench_mlx5_dp_rxe.sh BUILD_DIR [MODEL_BUILD_DIR]: the generic path's CPU cost per message
# (ibv_post_send + ibv_poll_cq, 8-byte inline RDMA WRITEs on a loopback RC
# QP pair) on soft-RoCE in a tests/vm guest: bench_mlx5_dp ibv, the
# reference drv/mlx5's numbers (bench_mlx5_dp model, on the host) are
# compared with in docs/mlx5.md. rxe's post includes its kernel kick (a
# system call that runs the software NIC), so the script also prints the
# cost of a bare system call measured in the same guest (bench_mlx5_dp
# syscall). With MODEL_BUILD_DIR (a build configured with
# -DHCOMM_MLX5_MODEL=ON), drv/mlx5's data path on the model runs in the same
# guest too, so that the two are compared under the same emulation. Not a ctest test.
# Exit 0, 1 when the measurement failed, 77 when there is no guest or rxe.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" != --guest ]; then
    build=$(cd "${1:?build dir}" && pwd) || exit 1
    [ -z "${2:-}" ] || set -- "$1" "$(cd "$2" && pwd)"
    exec bash "$here/vm-run.sh" --timeout "${HCOMM_VM_TIMEOUT:-300}" -- \
        bash "$here/rxe-run.sh" bash "$here/bench_mlx5_dp_rxe.sh" --guest "$build" "${2:-}"
fi
build=${2:?build dir}
model=${3:-}
echo "bench_mlx5_dp_rxe: $(uname -r), GID index $HCOMM_VM_RXE_GID"
BENCH_GID_INDEX=$HCOMM_VM_RXE_GID timeout 200 "$build/bin/bench_mlx5_dp" ibv "${HCOMM_BENCH_MSGS:-64000}"
rc=$?
"$build/bin/bench_mlx5_dp" syscall 1000000 || rc=1
if [ -n "$model" ]; then
    "$model/bin/bench_mlx5_dp" model "${HCOMM_BENCH_MSGS:-64000}" || rc=1
fi
exit $rc
