#!/usr/bin/env bash
# init_scale.sh: hcomm_init's time and rank 0's bootstrap traffic by job size
# on this machine, beside Open MPI's MPI_Init (docs/bootstrap.md, "Init time
# by job size"). Not a ctest test: minutes, and the numbers are timings.
#
#   tests/perf/init_scale.sh [--bindir build/bin] [--sizes "2 8 32 64 128 256"]
#                            [--reps R] [--no-mpi]
#
# Per size, R runs (default 3) of `hcommrun -n N init_probe` at HCOMM_LOG=info;
# the median run (by rank 0's init) is printed as one markdown table row:
# rank 0's hcomm_init, the slowest rank's, from the latest rank's call to the
# latest return, hcommrun's whole job (launch to exit), rank 0's phases
# (round 1, round 2 + connections) and its bootstrap messages and bytes (sent
# / received). Then the same program built with mpicc.openmpi, run with
# mpirun.openmpi --oversubscribe (skipped without it or with --no-mpi).
set -u
here=$(cd "$(dirname "$0")" && pwd)
bindir=$here/../../build/bin sizes="2 8 32 64 128 256" reps=3 mpi=1
while [ $# -gt 0 ]; do
    case $1 in
    --bindir) bindir=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --no-mpi) mpi=0; shift ;;
    *) echo "init_scale.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }

echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| ranks | rank 0 init ms | slowest init ms | last call to done ms | job s | round 1 ms | round 2 + conn ms | rank 0 msgs sent/recv | rank 0 bytes sent/recv |"
echo "|---|---|---|---|---|---|---|---|---|"
for n in $sizes; do
    : >"$tmp/rows"
    for ((r = 0; r < reps; r++)); do
        t0=$(now)
        HCOMM_LOG=info HCOMM_TOPO_CACHE=none HCOMM_TIMEOUT=120 \
            "$bindir/hcommrun" -n "$n" --timeout 300 "$bindir/init_probe" >"$tmp/out" 2>&1
        rc=$?
        t1=$(now)
        if [ $rc != 0 ]; then
            echo "| $n | failed (rc $rc): $(grep -v '^\[hcomm r[1-9]' "$tmp/out" | tail -1) |"
            continue 2
        fi
        awk -v job="$(echo "$t1 - $t0" | bc)" '
            /^init_probe:/ {r0=$5; slow=$8; last=$11}
            /\[hcomm r0\] info: init:/ {
                for (i = 1; i <= NF; i++) {
                    if ($i == "round" && $(i+1) == "1") r1=$(i+2)
                    if ($i == "connections") r2=$(i+1)
                    if ($i == "sent") {sm=$(i+1); sb=$(i+3)}
                    if ($i == "received") {rm=$(i+1); rb=$(i+2)}
                }
                gsub(/[(,]/, "", r1); gsub(/[(,]/, "", r2); gsub(/[(,]/, "", sb); gsub(/[(,]/, "", rb)
            }
            END {printf "%s %s %s %.2f %s %s %s/%s %s/%s\n", r0, slow, last, job, r1, r2, sm, rm, sb, rb}
        ' "$tmp/out" >>"$tmp/rows"
    done
    sort -n "$tmp/rows" | awk -v n="$n" -v k="$reps" 'NR == int((k + 1) / 2) {
        printf "| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, $1, $2, $3, $4, $5, $6, $7, $8}'
done

[ "$mpi" = 1 ] || exit 0
if ! command -v mpicc.openmpi >/dev/null || ! command -v mpirun.openmpi >/dev/null; then
    echo; echo "Open MPI: skipped (no mpicc.openmpi / mpirun.openmpi)"; exit 0
fi
mpicc.openmpi -O2 -DINIT_PROBE_MPI -o "$tmp/init_probe_mpi" "$here/init_probe.c" || exit 1
echo
echo "Open MPI $(mpirun.openmpi --version 2>/dev/null | head -1 | awk '{print $NF}'), mpirun.openmpi --oversubscribe, same program (MPI_Init):"
echo
echo "| ranks | rank 0 MPI_Init ms | slowest MPI_Init ms | last call to done ms | job s |"
echo "|---|---|---|---|---|"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
for n in $sizes; do
    : >"$tmp/rows"
    for ((r = 0; r < reps; r++)); do
        t0=$(now)
        timeout 300 mpirun.openmpi --oversubscribe -np "$n" "$tmp/init_probe_mpi" >"$tmp/out" 2>&1
        rc=$?
        t1=$(now)
        if [ $rc != 0 ]; then
            echo "| $n | failed (rc $rc): $(tail -1 "$tmp/out") |"
            continue 2
        fi
        awk -v job="$(echo "$t1 - $t0" | bc)" '/^init_probe:/ {printf "%s %s %s %.2f\n", $5, $8, $11, job}' \
            "$tmp/out" >>"$tmp/rows"
    done
    sort -n "$tmp/rows" | awk -v n="$n" -v k="$reps" 'NR == int((k + 1) / 2) {
        printf "| %d | %s | %s | %s | %s |\n", n, $1, $2, $3, $4}'
done
