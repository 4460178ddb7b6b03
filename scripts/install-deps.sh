#!/usr/bin/env bash
# Installs what hcomm needs to build and test on Debian 12 (as root).
# Required: compiler, CMake + Ninja, hwloc, libnuma, cmocka. Optional but
# installed so the configure summary shows them: rdma-core (ibverbs/mlx5dv),
# clang + its runtime (libFuzzer), iproute2 and nftables (network-namespace
# tests: nodes, and packet loss where the kernel has no netem).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
      libhwloc-dev hwloc libnuma-dev numactl libcmocka-dev
      libibverbs-dev rdma-core iproute2 nftables procps)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install-deps: all dependencies present"
