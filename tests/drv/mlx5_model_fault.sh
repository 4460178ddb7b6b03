#!/bin/bash
# mlx5_model_fault.sh HCOMMRUN PROG KIND@N EXPECT: a 1+1 job on two fake
# nodes over drv/mlx5 on the model, with HCOMM_MLX5_MODEL_FAULT=KIND@N (the
# N-th WQE each rank's model runs completes with that error). The job must
# fail (not hang: it runs under a 60 s limit, HCOMM_TIMEOUT=20), and the
# failure must reach the user as a peer failure whose message says what the
# NIC reported (EXPECT, an extended regular expression).
set -u
hcommrun=$1 prog=$2 fault=$3 expect=$4
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
HCOMM_NET=mlx5 HCOMM_MLX5_MODEL=1 HCOMM_MLX5_MODEL_FAULT=$fault HCOMM_TIMEOUT=20 \
    timeout 60 "$hcommrun" -n 2 --timeout 50 "$here/../lib/fake_nodes.sh" 2 cyclic "$prog" -c 1023,65537 \
    >"$out" 2>&1
rc=$?
took=$(($(date +%s) - start))
if [ $rc = 0 ]; then
    echo "FAIL: the job passed with HCOMM_MLX5_MODEL_FAULT=$fault (no fault fired?)"
    tail -20 "$out"
    exit 1
fi
if [ $rc = 124 ]; then
    echo "FAIL: the job hung (killed after 60 s)"
    tail -20 "$out"
    exit 1
fi
if ! grep -Eq "$expect" "$out"; then
    echo "FAIL: no message matching /$expect/ in the job's output (exit $rc):"
    tail -30 "$out"
    exit 1
fi
if ! grep -Eq "ERR_PEER_FAILED|peer rank [0-9]+ .*failed|failed" "$out"; then
    echo "FAIL: the failure was not reported as a peer failure:"
    tail -30 "$out"
    exit 1
fi
echo "ok: HCOMM_MLX5_MODEL_FAULT=$fault: the job failed in ${took} s (exit $rc) with:"
grep -Em3 "$expect" "$out"
exit 0
