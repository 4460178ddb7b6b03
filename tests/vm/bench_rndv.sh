#!/bin/bash
# bench_rndv.sh BUILD_DIR [ROUNDS]: the rendezvous by RDMA READ (the
# receiver pulls, HCOMM_RNDV=get) against RDMA WRITE (the sender pushes into
# the buffer the receiver advertised, HCOMM_RNDV=write), per size, over the
# verbs driver on soft-RoCE (rxe0 in a tests/vm/vm-run.sh guest), 1+1 in
# one guest. ROUNDS (default 4) rounds of `pingpong -b 16K -e 4M -f 4`, the
# two modes alternating which goes first; prints the p50 one-way time (us)
# of every round per size and mode. Not a ctest test (a benchmark).
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" != --guest ]; then
    build=$(cd "${1:?build dir}" && pwd) || exit 1
    exec bash "$here/vm-run.sh" --timeout "${HCOMM_VM_TIMEOUT:-900}" -- \
        bash "$here/rxe-run.sh" bash "$here/bench_rndv.sh" --guest "$build" "${2:-4}"
fi
build=${2:?build dir}
rounds=${3:-4}
work=$(mktemp -d /tmp/hc-rndv.XXXXXX)
run() { # MODE: "MODE SIZE P50" lines
    local port=$((20000 + RANDOM % 12000)) r pids=()
    for r in 0 1; do
        env HCOMM_RANK=$r HCOMM_SIZE=2 HCOMM_LOCAL_RANK=0 HCOMM_LOCAL_SIZE=1 HCOMM_NODE_ID=node$r \
            HCOMM_NET=verbs HCOMM_BOOTSTRAP=tcp://127.0.0.1:$port HCOMM_JOB_KEY=rndv HCOMM_TIMEOUT=60 \
            HCOMM_RNDV=$1 HCOMM_LOG=error "$build/bin/pingpong" -b 16K -e 4M -f 4 -n 30 -w 3 \
            >"$work/r$r.log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    awk -v m="$1" '!/^#/ && NF >= 3 {print m, $1, $3}' "$work/r0.log"
}
for ((i = 1; i <= rounds; i++)); do
    if ((i % 2)); then run get; run write; else run write; run get; fi
done >"$work/all"
echo "p50 one-way us per round (HCOMM_RNDV=get: RDMA READ; write: RDMA WRITE)"
sort -k2,2n -k1,1 "$work/all" | awk '{k = $2 " " $1; v[k] = v[k] " " $3; o[k] = NR} END {for (k in v) print k, v[k]}' |
    sort -k1,1n -k2,2
rm -rf "$work"
