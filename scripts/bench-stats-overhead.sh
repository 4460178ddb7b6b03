#!/bin/bash
# bench-stats-overhead.sh [ROUNDS] [NP]: the cost of HCOMM_STATS=1 (and 2,
# and HCOMM_CHECK=1) on 8-byte allreduce and pingpong, measured side by side:
# the settings interleaved round by round (the order rotating), medians of
# the rounds, ratios (mean latency; p50 in the columns after).
set -euo pipefail
rounds=${1:-5} np=${2:-2}
b=${HCOMM_BUILD:-build}/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
pick() { awk -v f="$1" '$1 !~ /^#/ && $1 == 8 {print $f; exit}'; }
declare -A ar pp
settings=("HCOMM_STATS=0" "HCOMM_STATS=1" "HCOMM_STATS=2" "HCOMM_CHECK=1")
n=${#settings[@]}
for ((r = 0; r < rounds; r++)); do
    # the order rotates every round: no setting always runs first
    for ((k = 0; k < n; k++)); do
        s=${settings[$(((k + r) % n))]}
        # the JSON line: full precision (the table prints 2 decimals)
        "$b/hcommrun" -n "$np" --env "$s" "$b/allreduce_bw" -b 8 -e 8 -n 100000 -w 2000 \
            -J "$tmp/ar.json" >/dev/null 2>&1
        ar[$s]+="$(sed -n 's/.*"time_us":\([0-9.e+-]*\).*/\1/p' "$tmp/ar.json" | head -1) "
        pp[$s]+="$("$b/hcommrun" -n 2 --env "$s" "$b/pingpong" -b 8 -e 8 -n 100000 2>/dev/null | pick 2) "
    done
done
base_ar=$(echo ${ar[HCOMM_STATS=0]} | tr ' ' '\n' | median)
base_pp=$(echo ${pp[HCOMM_STATS=0]} | tr ' ' '\n' | median)
printf "%-16s %14s %8s %14s %8s\n" setting "allreduce_us" ratio "pingpong_us" ratio
for s in "${settings[@]}"; do
    a=$(echo ${ar[$s]} | tr ' ' '\n' | median)
    p=$(echo ${pp[$s]} | tr ' ' '\n' | median)
    printf "%-16s %14s %8.3f %14s %8.3f\n" "$s" "$a" "$(echo "$a / $base_ar" | bc -l)" "$p" \
        "$(echo "$p / $base_pp" | bc -l)"
done
