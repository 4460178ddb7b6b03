#!/usr/bin/env bash
# Peer baselines for hcomm's bench tools, measured the same way:
#   bench/peers/run.sh pingpong|allreduce [NPROC] [MAX_BYTES]
# Prints one table per peer (Open MPI, MPICH, and for allreduce torch.distributed
# gloo). Installs the peers with apt-get on first use (root, Debian 12).
# Columns match hcomm's tools: pingpong "bytes lat_us p50_us p99_us MB/s";
# allreduce "size count type redop time_us algbw busbw wrong" (GB/s, 1e9).
set -euo pipefail
what=${1:-allreduce} np=${2:-2} max=${3:-33554432}
here=$(cd "$(dirname "$0")" && pwd)
work=${PEERS_WORK:-/tmp/hcomm-peers}
mkdir -p "$work"

need=()
command -v mpicc.openmpi >/dev/null || need+=(libopenmpi-dev openmpi-bin)
command -v mpicc.mpich >/dev/null || need+=(libmpich-dev mpich)
/usr/bin/python3 -c 'import torch' 2>/dev/null || need+=(python3-torch)
if ((${#need[@]})); then
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
[[ $work/mpi_bench_ompi -nt $here/mpi_bench.c ]] ||
    mpicc.openmpi -O2 -o "$work/mpi_bench_ompi" "$here/mpi_bench.c"
[[ $work/mpi_bench_mpich -nt $here/mpi_bench.c ]] ||
    mpicc.mpich -O2 -o "$work/mpi_bench_mpich" "$here/mpi_bench.c"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-cma}
ompi() { mpirun.openmpi --bind-to core --map-by core -n "$np" "$work/mpi_bench_ompi" "$@"; }
mpich() { mpirun.mpich -bind-to core -n "$np" "$work/mpi_bench_mpich" "$@"; }
case $what in
pingpong)
    echo "## Open MPI $(mpirun.openmpi --version 2>/dev/null | head -1 | awk '{print $NF}')"; ompi pingpong "$max"
    echo "## MPICH"; mpich pingpong "$max" ;;
allreduce)
    echo "## Open MPI"; ompi allreduce 8 "$max"
    echo "## MPICH"; mpich allreduce 8 "$max"
    echo "## gloo (torch.distributed $(/usr/bin/python3 -c 'import torch;print(torch.__version__)'))"
    /usr/bin/python3 "$here/gloo_bench.py" --nproc "$np" --min 8 --max "$max" ;;
*) echo "usage: $0 pingpong|allreduce [NPROC] [MAX_BYTES]" >&2; exit 2 ;;
esac
