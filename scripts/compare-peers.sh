#!/usr/bin/env bash
# Every side-by-side measurement behind the closing notes, in one run:
# hcomm's bench tools against Open MPI, MPICH (and gloo) with the peer
# scripts of bench/peers (in this repository; PEERS=dir for others). Run from the project root after building into
# build/. Ratios, not absolute numbers, are what compare across runs.
set -u
cd "$(dirname "$0")/.."
P=${PEERS:-bench/peers}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "### $(date) load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "### pingpong 8 B (target ratio <= 0.7)";      "$P/compare.sh" pingpong 8 5
echo "### allreduce time 8 B (target <= 1.0)";      "$P/compare.sh" allreduce_time 8 5
echo "### allreduce busbw 2 MiB (target >= 1.2)";   "$P/compare.sh" allreduce 2097152 5
echo "### allreduce busbw 32 MiB (target >= 2.5)";  "$P/compare.sh" allreduce 33554432 3
echo "### hcomm allreduce_bw, 2 ranks, malloc";     build/bin/hcommrun -n 2 build/bin/allreduce_bw -b 8 -e 64M -f 4
echo "### hcomm allreduce_bw, 2 ranks, -m hcomm";   build/bin/hcommrun -n 2 build/bin/allreduce_bw -b 8 -e 64M -f 4 -m hcomm
echo "### peers, 2 ranks";                          "$P/run.sh" allreduce 2 67108864
# compare.sh/run.sh bind one rank per core, which Open MPI refuses for 4
# ranks on a 2-core machine: the 4-rank peers run oversubscribed here.
echo "### 4 ranks: hcomm";                          build/bin/hcommrun -n 4 build/bin/allreduce_bw -b 8 -e 32M -f 8
work=${PEERS_WORK:-/tmp/hcomm-peers}
if [[ -x $work/mpi_bench_ompi ]]; then
    echo "### 4 ranks: Open MPI (--oversubscribe)"; mpirun.openmpi --oversubscribe -n 4 "$work/mpi_bench_ompi" allreduce 8 33554432
    echo "### 4 ranks: MPICH";                      mpirun.mpich -n 4 "$work/mpi_bench_mpich" allreduce 8 33554432
fi
echo "### pingpong table";                          build/bin/hcommrun -n 2 build/bin/pingpong -e 4M
echo "### pools vs malloc (target >= 5x, 2 threads <= 2x)"; build/bin/mem_bench
echo "### between nodes (veth, root): tests/netns/bench_tcp.sh build"
