#!/usr/bin/env bash
# The one prepared script for a lent GPU machine (docs/gpu.md, "Device runs";
# issue 34). One `device` call runs it all in about 8 minutes:
#
#   run: bash tests/gpu/run.sh            (carry .gpudeps where the machine
#                                          lacks hwloc/numa/cmocka/openssl
#                                          headers: tests/gpu/fetch-debs.sh)
#   here: bash tests/gpu/run.sh --dry-run (the steps that need no GPU; the
#                                          others say "skipped: no GPU")
#
# Steps: the dependencies (unpacked from carried .deb files with dpkg -x into
# /tmp/gpudeps where missing); configure and build with nvcc
# (-DHCOMM_GPU_MODEL=ON, so that the model tier's tests are built too); the
# gpu-label tests (the model tier, and the cuda backend's: test_cuda_device
# on the card); the collectives matrix on device buffers at 1, 2 and 4 ranks
# sharing the GPU with HCOMM_GPU=cuda; benchmarks: allreduce_bw and pingpong
# with -m device and host, the card's D2D/H2D/D2H copy bandwidth and gloo's
# allreduce on CUDA tensors through PyTorch. Logs and summary.json go to
# $OUT (./gpu-run-out when unset); a summary table is printed last.
set -u
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-run-out}
mkdir -p "$OUT"
BUILD=${HCOMM_GPU_BUILD:-$ROOT/build-gpu}
JOBS=${JOBS:-$(nproc)}
[ $DRY = 1 ] && JOBS=${JOBS_DRY:-2}
T0=$(date +%s)
declare -a NAMES RESULTS SECS

GPU=0
if [ $DRY = 0 ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >"$OUT/nvidia-smi.log" 2>&1; then
    GPU=1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$OUT/nvidia-smi.log" 2>&1
fi

# step NAME NEEDS_GPU(0/1) COMMAND...: runs it with its log in $OUT/NAME.log
step() {
    local name=$1 needs=$2
    shift 2
    local t=$(date +%s) rc
    if [ "$needs" = 1 ] && [ $GPU = 0 ]; then
        echo "skipped: no GPU" >"$OUT/$name.log"
        NAMES+=("$name"); RESULTS+=("skipped: no GPU"); SECS+=(0)
        echo "== $name: skipped: no GPU"
        return 0
    fi
    echo "== $name: $*"
    ( "$@" ) >"$OUT/$name.log" 2>&1
    rc=$?
    NAMES+=("$name"); SECS+=($(( $(date +%s) - t )))
    if [ $rc = 0 ]; then RESULTS+=("pass"); else RESULTS+=("FAIL (rc $rc)"); fi
    tail -n 3 "$OUT/$name.log" | sed 's/^/   /'
    return $rc
}

# ---- 1. dependencies ------------------------------------------------------
deps() {
    local missing=()
    pkg-config --exists hwloc 2>/dev/null || missing+=(hwloc)
    pkg-config --exists cmocka 2>/dev/null || missing+=(cmocka)
    pkg-config --exists libcrypto 2>/dev/null || missing+=(libcrypto)
    [ -e /usr/include/numa.h ] || missing+=(numa)
    echo "missing here: ${missing[*]:-none}"
    [ ${#missing[@]} = 0 ] && return 0
    if ! ls "$ROOT"/.gpudeps/*.deb >/dev/null 2>&1; then
        echo "no .gpudeps/*.deb carried (tests/gpu/fetch-debs.sh makes them): cannot build"
        return 1
    fi
    for f in "$ROOT"/.gpudeps/*.deb; do dpkg -x "$f" /tmp/gpudeps || return 1; done
    echo "unpacked $(ls "$ROOT"/.gpudeps/*.deb | wc -l) packages into /tmp/gpudeps"
}
step deps 0 deps
if [ -d /tmp/gpudeps ]; then
    A=/tmp/gpudeps/usr/lib/x86_64-linux-gnu
    # the .pc files name prefix=/usr: point them at the unpacked tree
    for pc in "$A"/pkgconfig/*.pc /tmp/gpudeps/usr/share/pkgconfig/*.pc; do
        [ -f "$pc" ] && sed -i "s|^prefix=/usr|prefix=/tmp/gpudeps/usr|" "$pc"
    done
    export PKG_CONFIG_PATH=$A/pkgconfig:/tmp/gpudeps/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}
    export CPATH=/tmp/gpudeps/usr/include:${CPATH:-}
    export LIBRARY_PATH=$A:${LIBRARY_PATH:-}
    export LD_LIBRARY_PATH=$A:${LD_LIBRARY_PATH:-}
    export CMAKE_PREFIX_PATH=/tmp/gpudeps/usr
    export PATH=/tmp/gpudeps/usr/bin:$PATH
fi

# ---- 2. configure and build ---------------------------------------------
TARGETS="hcomm hcomm_test hcommrun hcomm_info test_gpu test_cuda_load test_cuda_abi
 test_cuda_device hc_cuda_stub hc_cuda_stub_noproc mp_coll_matrix mp_gpu_matrix allreduce_bw pingpong"
build() {
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHCOMM_GPU_MODEL=ON \
        || return 1
    if [ $GPU = 1 ]; then ninja -C "$BUILD" -j"$JOBS"; else ninja -C "$BUILD" -j"$JOBS" $TARGETS; fi
}
step build 0 build || { echo "build failed: see $OUT/build.log"; }
"$BUILD/bin/hcomm_info" >"$OUT/hcomm_info.log" 2>&1
grep -E "^gpu:|cuda" "$OUT/hcomm_info.log" | sed 's/^/   /'

# ---- 3. tests -------------------------------------------------------------
nogpu_tests="test_cuda_load|test_cuda_abi|gpu_cuda_fatbin|gpu_info|gpu_init_cuda|^test_gpu$"
step tests_nogpu 0 ctest --test-dir "$BUILD" -R "$nogpu_tests" --output-on-failure
# on the card: the backend's own test, then the whole gpu label (model tier
# included: it must pass unchanged where a GPU is present)
step test_cuda_device 1 env HCOMM_GPU=cuda "$BUILD/bin/test_cuda_device"
step tests_gpu_label 1 ctest --test-dir "$BUILD" -L gpu -j"$JOBS" --output-on-failure --timeout 300

# ---- 4. the collectives matrix on device buffers, ranks sharing the GPU ----
FEW="--dtypes int8,int32,float16,bfloat16,float32,float64 --counts 0,1,7,1023,65537,1048583"
for np in 1 2 4; do
    step matrix_cuda_np$np 1 env HCOMM_GPU=cuda HCOMM_TIMEOUT=120 "$BUILD/bin/hcommrun" -n $np \
        --timeout 150 "$BUILD/bin/mp_gpu_matrix" --device all $FEW
done
step matrix_cuda_mixed_np3 1 env HCOMM_GPU=cuda "$BUILD/bin/hcommrun" -n 3 --timeout 150 \
    "$BUILD/bin/mp_gpu_matrix" --device some $FEW
step matrix_cuda_tcp_2x2 1 env HCOMM_GPU=cuda HCOMM_NET=tcp "$BUILD/bin/hcommrun" -n 4 --timeout 200 \
    "$ROOT/tests/lib/fake_nodes.sh" 2 cyclic "$BUILD/bin/mp_gpu_matrix" --device all \
    --dtypes float32,bfloat16 --counts 1,1023,1048583

# ---- 5. benchmarks ----------------------------------------------------------
for m in malloc device; do
    step bench_allreduce_$m 1 env HCOMM_GPU=cuda "$BUILD/bin/hcommrun" -n 2 --timeout 120 \
        "$BUILD/bin/allreduce_bw" -b 8 -e 256M -f 4 -n 10 -w 3 -m $m
    step bench_pingpong_$m 1 env HCOMM_GPU=cuda "$BUILD/bin/hcommrun" -n 2 --timeout 120 \
        "$BUILD/bin/pingpong" -M lat -b 8 -e 1M -f 16 -n 200 -w 20 -m $m
    step bench_allreduce_tcp_$m 1 env HCOMM_GPU=cuda HCOMM_NET=tcp "$BUILD/bin/hcommrun" -n 2 \
        --timeout 150 "$ROOT/tests/lib/fake_nodes.sh" 2 cyclic "$BUILD/bin/allreduce_bw" \
        -b 64M -e 64M -n 5 -w 2 -m $m
done
# the node collectives on device memory (docs/gpu.md): by IPC against the
# API's staging, 2 ranks sharing the card
for ipc in 0 auto; do
    step bench_allreduce_node_ipc_$ipc 1 env HCOMM_GPU=cuda HCOMM_GPU_IPC=$ipc "$BUILD/bin/hcommrun" \
        -n 2 --timeout 120 "$BUILD/bin/allreduce_bw" -b 1M -e 256M -f 4 -n 10 -w 3 -m device
done
step copy_bw 1 env PYTHONUNBUFFERED=1 python3 "$ROOT/tests/gpu/copy_bw.py" --json "$OUT/copy_bw.json"
step gloo_cuda 1 env PYTHONUNBUFFERED=1 python3 "$ROOT/tests/gpu/gloo_bw.py" --bytes 67108864

# ---- summary -----------------------------------------------------------------
{
    echo "{\"dry_run\": $DRY, \"gpu\": $GPU, \"seconds\": $(( $(date +%s) - T0 )),"
    echo " \"gpu_line\": \"$(grep -m1 '^gpu:' "$OUT/hcomm_info.log" 2>/dev/null | sed 's/["\\]/ /g')\","
    echo " \"steps\": ["
    for i in "${!NAMES[@]}"; do
        sep=,; [ $i = $(( ${#NAMES[@]} - 1 )) ] && sep=
        echo "  {\"name\": \"${NAMES[$i]}\", \"result\": \"${RESULTS[$i]}\", \"seconds\": ${SECS[$i]}}$sep"
    done
    echo " ]}"
} >"$OUT/summary.json"
echo
echo "summary ($(( $(date +%s) - T0 )) s; logs in $OUT):"
fail=0
for i in "${!NAMES[@]}"; do
    printf '  %-26s %-18s %4ss\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${SECS[$i]}"
    case ${RESULTS[$i]} in FAIL*) fail=1 ;; esac
done
[ $GPU = 0 ] && echo "no GPU here: the steps that need one were skipped (blocked: needs a GPU run)"
exit $fail
