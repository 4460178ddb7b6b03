#!/bin/bash
# bench_gpu_stage.sh BUILD_DIR [ROUNDS] [BYTES]: the staged pipeline on the
# GPU model (docs/gpu.md "Measured"): allreduce_bw busbw, float sum of BYTES
# (default 64M), between two network namespaces over tcp, one rank each,
# with device buffers (-m device) against host buffers, side by side:
#   host     -m malloc, no GPU layer (HCOMM_GPU=none): the host path itself
#   host+gpu -m malloc, the model on: chunked like device buffers, no copies
#   device   -m device, the model on: staged through pinned host chunks
#   keep0    (only with HCB_KEEP0=1) device with HCOMM_GPU_STAGE_KEEP=0:
#            every call makes and pins its own staging (as before pinned
#            staging was kept)
# Each round runs them in turn (a new order each round, so that a slow
# spell of the machine does not always hit the same one); ROUNDS rounds
# (default 5). The medians of the rounds and the ratios device/host and
# device/host+gpu close the output, out of place and in place. A last,
# checked device run with HCOMM_STATS=1 gives the staging's copies per byte.
# Needs the test library (build/lib/test) of a -DHCOMM_GPU_MODEL=ON build.
set -u
build=$(cd "${1:?build dir}" && pwd)
rounds=${2:-5}
bytes=${3:-64M}
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "skipped: needs root"; exit 77; }
[ -e "$build/lib/test/libhcomm.so" ] || { echo "skipped: no test library (HCOMM_GPU_MODEL=ON)"; exit 77; }
export HCN_JOB="g$$"
work=$(mktemp -d /tmp/hcn-gpu.XXXXXX)
trap '"$here/netns.sh" down; rm -rf "$work"' EXIT
"$here/netns.sh" up 2 || exit 1

# hc_run VARIANT [ENV=V ...] -- ARGS: allreduce_bw in both nodes; rank 0's output
hc_run() {
    local name=$1 port=$((20000 + RANDOM % 12000)) r pids=() envs=()
    shift
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    for r in 0 1; do
        env HCOMM_RANK=$r HCOMM_SIZE=2 HCOMM_LOCAL_RANK=0 HCOMM_LOCAL_SIZE=1 \
            HCOMM_BOOTSTRAP="tcp://10.77.0.1:$port" HCOMM_JOB_KEY=bench HCOMM_LOG=error \
            LD_LIBRARY_PATH="$build/lib/test" "${envs[@]}" \
            "$here/netns.sh" run $r "$build/bin/allreduce_bw" "$@" >"$work/$name.$r" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    cat "$work/$name.0"
}
median() { sort -g | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "nan"}'; }

args=(-b "$bytes" -e "$bytes" -n 5 -w 1 -d float -o sum -c 0)
declare -A oop ip
variants=(host hostgpu device)
[ "${HCB_KEEP0:-0}" = 1 ] && variants+=(keep0)
nv=${#variants[@]}
run_variant() {
    case $1 in
    host) hc_run host HCOMM_GPU=none -- "${args[@]}" -m malloc ;;
    hostgpu) hc_run hostgpu HCOMM_GPU_MODEL=1 -- "${args[@]}" -m malloc ;;
    device) hc_run device HCOMM_GPU_MODEL=1 -- "${args[@]}" -m device ;;
    keep0) hc_run keep0 HCOMM_GPU_MODEL=1 HCOMM_GPU_STAGE_KEEP=0 -- "${args[@]}" -m device ;;
    esac
}
for ((i = 1; i <= rounds; i++)); do
    order=("${variants[@]:i%nv}" "${variants[@]:0:i%nv}")
    for v in "${order[@]}"; do
        out=$(run_variant "$v" | grep -E '^ +[0-9]+ ')
        read -r o p <<<"$(awk '{print $8, $14}' <<<"$out")"
        echo "round $i $v: busbw out of place $o GB/s, in place $p GB/s"
        oop[$v]+="$o " ip[$v]+="$p "
    done
done

echo "== medians over $rounds rounds, $bytes float sum, busbw GB/s (out of place / in place)"
declare -A mo mi
for v in "${variants[@]}"; do
    mo[$v]=$(tr ' ' '\n' <<<"${oop[$v]}" | grep . | median)
    mi[$v]=$(tr ' ' '\n' <<<"${ip[$v]}" | grep . | median)
    echo "$v: ${mo[$v]} / ${mi[$v]}  (rounds: ${oop[$v]}/ ${ip[$v]})"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
# the median of the rounds' own ratios too: a round's variants ran within
# seconds of each other, so a slow spell of the machine cancels out
paired() { # LIST_A LIST_B: the median of a_i / b_i
    paste <(tr ' ' '\n' <<<"$1" | grep .) <(tr ' ' '\n' <<<"$2" | grep .) |
        awk '$2 > 0 {printf "%.3f\n", $1 / $2}' | median
}
for b in "${variants[@]:0:2}" "${variants[@]:3}"; do
    echo "ratio device/$b: medians $(ratio "${mo[device]}" "${mo[$b]}") / $(ratio "${mi[device]}" "${mi[$b]}"), per round $(paired "${oop[device]}" "${oop[$b]}") / $(paired "${ip[device]}" "${ip[$b]}")"
done

echo "== staging counters of a checked device run (HCOMM_STATS=1, rank 0)"
hc_run stats HCOMM_GPU_MODEL=1 HCOMM_STATS=1 -- -b "$bytes" -e "$bytes" -n 3 -w 1 -m device \
    >/dev/null
grep -E "device (memory|staging)" "$work/stats.0"
grep -E "wrong|Out of bounds" "$work/stats.0" | tail -1
awk -v b="$bytes" '
    BEGIN { n = b + 0; u = substr(b, length(b)); if (u == "K") n *= 1024; if (u == "M") n *= 1048576; if (u == "G") n *= 1073741824 }
    /device memory/ { match($0, /device->host [0-9]+ \/ [0-9]+/); split(substr($0, RSTART, RLENGTH), d, " ");
                      match($0, /host->device [0-9]+ \/ [0-9]+/); split(substr($0, RSTART, RLENGTH), h, " ");
                      match($0, /\(([0-9]+) with a device/); c = substr($0, RSTART + 1, RLENGTH) + 0 }
    END { if (c) printf "copies per byte (%d calls of %d B): device->host %.3f, host->device %.3f\n", c, n, d[4] / (c * n), h[4] / (c * n) }
' "$work/stats.0"
