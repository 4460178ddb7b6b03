#!/usr/bin/env bash
# Installs what hcomm needs to build and test on Debian 12 (as root).
# Required: compiler, CMake + Ninja, hwloc, libnuma, libssl-dev (libcrypto's
# HMAC proves the job key), cmocka. Optional but
# installed so the configure summary shows them: rdma-core (ibverbs/mlx5dv),
# clang + its runtime (libFuzzer), iproute2 and nftables (network-namespace
# tests: nodes, and packet loss where the kernel has no netem), libpmix-dev
# (the rendezvous under Open MPI's mpirun and srun --mpi=pmix), DPDK 22.11
# (libdpdk-dev, with its poll-mode drivers: the dpdk driver; its tests run
# net_af_packet between network namespaces).
#   install-deps.sh --test   also what only the test suite needs: bc, and
#                            qemu + Debian's kernel + a static busybox for the
#                            tests that boot a guest kernel (tests/vm: tc netem
#                            where this host's kernel lacks it, soft-RoCE for
#                            the verbs driver), perftest, ibverbs-utils and
#                            ucx-utils (the references of tests/vm/bench_rdma.sh
#                            and the two-guest check), gdb (backtraces of a
#                            rank that hangs in a guest), slurm-wlm and munge
#                            (tests/launchers: srun jobs on a private
#                            single-node Slurm), mpich, openmpi-bin and
#                            python3-torch (the launchers test: mpiexec.hydra,
#                            mpirun and torchrun; the torch.distributed
#                            backend's tests use torch 2.x from PyPI instead:
#                            scripts/python-venv.sh), libopenmpi-dev (mpicc for
#                            the Open MPI build of the mixed-load peer),
#                            python3-venv (those venvs), python3-matplotlib (bench_plot),
#                            dpdk-dev (dpdk-testpmd, the
#                            reference of tests/netns/bench_testpmd.sh)
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
      libhwloc-dev hwloc libnuma-dev numactl libssl-dev libcmocka-dev
      libibverbs-dev rdma-core iproute2 nftables procps libpmix-dev libdpdk-dev)
test_pkgs=(bc cpio qemu-system-x86 linux-image-amd64 busybox-static
           perftest ibverbs-utils ucx-utils gdb slurm-wlm munge
           mpich openmpi-bin libopenmpi-dev python3-torch python3-venv python3-matplotlib dpdk-dev)
missing() { # prints the packages among "$@" that are not installed
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}
export DEBIAN_FRONTEND=noninteractive
updated=0
install() {
    ((updated)) || { apt-get update -q >/dev/null; updated=1; }
    apt-get install -y -q --no-install-recommends "$@" >/dev/null
}
mapfile -t need < <(missing "${pkgs[@]}")
if ((${#need[@]})); then
    echo "install-deps: installing ${need[*]}"
    install "${need[@]}"
fi
if [[ ${1:-} == --test ]]; then
    # Best effort: without them the guest-kernel and Slurm tests skip and say why.
    mapfile -t need < <(missing "${test_pkgs[@]}")
    if ((${#need[@]})); then
        echo "install-deps: installing (for tests) ${need[*]}"
        install "${need[@]}" || echo "install-deps: could not install ${need[*]}: the tests that need them will skip"
    fi
fi
echo "install-deps: all dependencies present"
