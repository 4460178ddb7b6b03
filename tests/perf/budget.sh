#!/usr/bin/env bash
# The instruction budget of the small-message path (docs/bench.md,
# "Instruction budget"): callgrind counts on fixed workloads, compared with
# the baseline recorded for this build type and compiler in budget.txt.
#
#   budget.sh --bindir DIR --config KEY [--baseline FILE] [--tolerance PCT]
#             [--runs N] [--record] [--only NAME]
#
#   --bindir     the build's bin/ (hcommrun, allreduce_bw, budget_probe)
#   --config     the baseline key: CMAKE_BUILD_TYPE/compiler id-major version
#                (+sanitizers), as tests/perf/CMakeLists.txt passes it
#   --baseline   the file of recorded counts (default: budget.txt here)
#   --tolerance  the growth over the baseline that fails (percent, default 10)
#   --runs N     measure each workload N times and print the spread (no
#                comparison): the stability check
#   --record     measure and write this key's counts into the baseline file
#                (replacing its old lines for this key); commit the file
#   --only NAME  one workload
#
# Workloads (instructions per iteration = (count at 1500 - count at 500) /
# 1000, which drops init, finalize and first-call costs):
#   allreduce_1rank  hcommrun -n 1 allreduce_bw -b 8 -e 8 -n N -w 0, the
#                    whole program (deterministic: one rank)
#   pingpong_2rank   budget_probe pingpong: rank 0's hcomm_send + hcomm_recv
#                    of 8 B over shm, inclusive (--toggle-collect)
#   allreduce_2rank  budget_probe allreduce: rank 0's hcomm_allreduce of 8 B
#                    over shm, inclusive
# In the 2-rank workloads only rank 0 runs under valgrind, and it never
# waits inside the calls counted (budget_probe.c says how), so the counts
# do not depend on scheduling.
#
# Exit: 0 within budget, 1 over it (or a run failed), 77 skipped (no
# valgrind, or no baseline for this key: "skipped: no baseline for KEY").
set -u
here=$(cd "$(dirname "$0")" && pwd)
bindir= key= baseline=$here/budget.txt tolerance=10 runs=0 record=0 only=
while [ $# -gt 0 ]; do
    case $1 in
    --bindir) bindir=$2; shift 2 ;;
    --config) key=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --tolerance) tolerance=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --record) record=1; shift ;;
    --only) only=$2; shift 2 ;;
    *) echo "budget.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
    esac
done
if [ -z "$bindir" ] || [ -z "$key" ]; then
    echo "budget.sh: --bindir and --config are required" >&2
    exit 2
fi
if ! command -v valgrind >/dev/null; then
    echo "skipped: valgrind not found"
    exit 77
fi
if [ "$record" = 0 ] && [ "$runs" = 0 ] && ! grep -q "^$key " "$baseline" 2>/dev/null; then
    echo "skipped: no baseline for $key in $baseline (record one: $0 --bindir $bindir --config $key --record)"
    exit 77
fi
workloads="allreduce_1rank pingpong_2rank allreduce_2rank"
[ -n "$only" ] && workloads=$only
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export HCOMM_TOPO_CACHE=none HCOMM_TIMEOUT=60

# count WORKLOAD N: prints the instructions callgrind counted, or fails.
count() {
    local w=$1 n=$2 out=$tmp/cg.$1.$2 cmd
    local vg="valgrind --tool=callgrind --callgrind-out-file=$out"
    case $w in
    allreduce_1rank)
        cmd=("$bindir/hcommrun" -n 1 --timeout 120 $vg "$bindir/allreduce_bw" -b 8 -e 8 -n "$n" -w 0) ;;
    pingpong_2rank | allreduce_2rank)
        local mode=${w%_2rank} toggles="--collect-atstart=no --toggle-collect=hcomm_send --toggle-collect=hcomm_recv"
        [ "$mode" = allreduce ] && toggles="--collect-atstart=no --toggle-collect=hcomm_allreduce"
        cmd=("$bindir/hcommrun" -n 2 --timeout 120 bash -c \
            'if [ "$HCOMM_RANK" = 0 ]; then exec '"$vg $toggles"' "$@"; else exec "$@"; fi' \
            probe "$bindir/budget_probe" "$mode" "$n") ;;
    *) echo "budget.sh: unknown workload '$w'" >&2; return 1 ;;
    esac
    if ! "${cmd[@]}" >"$tmp/log.$w.$n" 2>&1; then
        echo "budget.sh: $w at $n iterations failed:" >&2
        tail -20 "$tmp/log.$w.$n" >&2
        return 1
    fi
    awk '/^totals:/ {print $2; found=1} END {exit !found}' "$out"
}

# per_iter WORKLOAD: instructions per iteration, one decimal.
per_iter() {
    local a b
    a=$(count "$1" 500) || return 1
    b=$(count "$1" 1500) || return 1
    awk -v a="$a" -v b="$b" 'BEGIN {printf "%.1f\n", (b - a) / 1000}'
}

if [ "$runs" != 0 ]; then
    for w in $workloads; do
        vals=
        for ((i = 0; i < runs; i++)); do
            v=$(per_iter "$w") || exit 1
            vals="$vals $v"
        done
        echo "$w:$vals" | awk '{min=$2; max=$2; for (i=2;i<=NF;i++) {if ($i<min) min=$i; if ($i>max) max=$i}
            printf "%s  min %.1f max %.1f spread %.2f%%\n", $0, min, max, (max-min)*100/min}'
    done
    exit 0
fi

status=0
declare -A got
for w in $workloads; do
    v=$(per_iter "$w") || exit 1
    got[$w]=$v
    if [ "$record" = 1 ]; then
        echo "$w: $v instructions per iteration"
        continue
    fi
    base=$(awk -v k="$key" -v w="$w" '$1 == k && $2 == w {print $3}' "$baseline")
    if [ -z "$base" ]; then
        echo "$w: $v instructions per iteration (no baseline for $key: not compared)"
        continue
    fi
    verdict=$(awk -v v="$v" -v b="$base" -v t="$tolerance" 'BEGIN {
        g = (v - b) * 100 / b
        printf "%s %+.1f%%", (g > t ? "FAIL" : "ok"), g }')
    echo "$w: $v instructions per iteration, baseline $base: $verdict (limit +$tolerance%)"
    case $verdict in FAIL*) status=1 ;; esac
done
if [ "$record" = 1 ]; then
    { grep -v "^$key " "$baseline" 2>/dev/null || true
      for w in $workloads; do echo "$key $w ${got[$w]}"; done; } >"$tmp/new"
    cp "$tmp/new" "$baseline"
    echo "recorded in $baseline for $key"
fi
[ "$status" = 0 ] || echo "over budget: a count grew more than $tolerance% over $baseline ($key)"
exit $status
