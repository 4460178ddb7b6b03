#!/usr/bin/env bash
# Side-by-side comparison of hcomm's bench tools with the peers, in one run,
# interleaved round by round so that machine drift hits every tool alike.
# Run from the project root after building into build/ (or set HCOMM_BUILD):
#   bench/peers/compare.sh pingpong  8         [ROUNDS] [NPROC]
#   bench/peers/compare.sh allreduce 33554432  [ROUNDS] [NPROC]
#   bench/peers/compare.sh allreduce_time 8    [ROUNDS] [NPROC]
# pingpong compares one-way latency in us (lower is better); allreduce
# compares float32-sum busbw in GB/s (higher is better); allreduce_time
# compares the allreduce time in us (lower is better; for small sizes).
# The last line is "ratio R", R = hcomm / best peer.
set -euo pipefail
what=$1 bytes=$2 rounds=${3:-3} np=${4:-2}
here=$(cd "$(dirname "$0")" && pwd)
build=${HCOMM_BUILD:-build}
work=${PEERS_WORK:-/tmp/hcomm-peers}
"$here/run.sh" pingpong "$np" 8 >/dev/null 2>&1 || true   # installs and builds peers
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# column picker: the row whose first field is $bytes; field N
pick() { awk -v b="$bytes" -v f="$1" '$1 !~ /^#/ && $1 == b {print $f; exit}'; }
declare -A got
for ((r = 0; r < rounds; r++)); do
    case $what in
    pingpong)
        got[hcomm]+="$("$build/bin/hcommrun" -n "$np" "$build/bin/pingpong" -b "$bytes" -e "$bytes" | pick 2) "
        got[ompi]+="$(mpirun.openmpi --bind-to core -n "$np" "$work/mpi_bench_ompi" pingpong "$bytes" | pick 2) "
        got[mpich]+="$(mpirun.mpich -bind-to core -n "$np" "$work/mpi_bench_mpich" pingpong "$bytes" | pick 2) " ;;
    allreduce | allreduce_time)
        # nccl-tests columns: size count type redop root time algbw busbw #wrong
        if [[ $what == allreduce ]]; then mine=8 peer=7; else mine=6 peer=5; fi
        got[hcomm]+="$("$build/bin/hcommrun" -n "$np" "$build/bin/allreduce_bw" -b "$bytes" -e "$bytes" -d float -o sum | pick $mine) "
        got[ompi]+="$(mpirun.openmpi --bind-to core -n "$np" "$work/mpi_bench_ompi" allreduce "$bytes" "$bytes" | pick $peer) "
        got[mpich]+="$(mpirun.mpich -bind-to core -n "$np" "$work/mpi_bench_mpich" allreduce "$bytes" "$bytes" | pick $peer) " ;;
    *) echo "usage: $0 pingpong|allreduce|allreduce_time BYTES [ROUNDS] [NPROC]" >&2; exit 2 ;;
    esac
done
best=""
for t in hcomm ompi mpich; do
    [[ -n ${got[$t]// /} ]] || { echo "$t printed no row for $bytes bytes"; exit 1; }
    m=$(tr ' ' '\n' <<<"${got[$t]}" | grep -v '^$' | median)
    printf '%-6s median %s  (rounds: %s)\n' "$t" "$m" "${got[$t]}"
    [[ $t == hcomm ]] && ours=$m && continue
    if [[ $what != allreduce ]]; then
        best=$(awk -v a="$best" -v b="$m" 'BEGIN {print (a == "" || b < a) ? b : a}')
    else
        best=$(awk -v a="$best" -v b="$m" 'BEGIN {print (a == "" || b > a) ? b : a}')
    fi
done
awk -v a="$ours" -v b="$best" 'BEGIN {printf "ratio %.3f\n", a / b}'
