#!/usr/bin/env bash
# The README's second command (and what .ci/run calls): installs the
# dependencies, reserves hugepages, then builds and runs the whole suite:
#   build/       RelWithDebInfo: every test (unit, mp, tools, netns, slow),
#                with the model of a GPU built in (-DHCOMM_GPU_MODEL=ON, so
#                that gpu/ runs its tests, label gpu)
#   build-asan/  ASan+UBSan: unit and mp tests (not slow), with the model of
#                the mlx5 queues built in (-DHCOMM_MLX5_MODEL=ON), so that
#                drv/mlx5's data path runs its tests (label mlx5) here, and
#                the GPU model's
#   build-tsan/  ThreadSanitizer: pool, progress and GPU model tests (label
#                tsan)
#   build-fuzz/  clang + libFuzzer: short fuzz runs (label fuzz)
#   build-release-gcc/, build-release-clang/  Release (-O3) with gcc and
#                with clang, the test drivers and the mlx5 model included
#                (-DHCOMM_MLX5_MODEL=ON): built (every target), then a
#                smoke run: the registry, the release library's symbols, a
#                2-rank job (users build Release with their compiler, so its
#                warnings are ours to fix)
# Every build has warnings as errors (-DHCOMM_WERROR=ON). Set
# HCOMM_TEST_QUICK=1 to skip the sanitizer, fuzz and Release builds, and
# HCOMM_TEST_BUILD_TYPES="Debug MinSizeRel ..." to build (no tests) more
# build types with both compilers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
if [[ $(id -u) == 0 ]]; then
    hugepages/hcomm-hugepages -n "${HCOMM_HUGEPAGES:-1024}" || echo "test: could not reserve hugepages; tests run on regular pages"
fi
# The python tests' interpreters: venvs of the newest and the oldest torch
# hcomm supports, from PyPI (made once; without them those tests skip).
py_args=()
if py=$(scripts/python-venv.sh 2.15.0); then py_args+=("-DHCOMM_PYTHON=$py"); fi
if py=$(scripts/python-venv.sh 2.11.0); then py_args+=("-DHCOMM_PYTHON_OLDEST=$py"); fi
jobs=$(nproc)
status=0
run() { # name, build dir, cmake args..., -- ctest args...
    local name=$1 dir=$2; shift 2
    local cargs=() targs=()
    while (($#)) && [[ $1 != -- ]]; do cargs+=("$1"); shift; done
    (($#)) && shift
    targs=("$@")
    echo "=== $name: configure + build ($dir)"
    mkdir -p "$dir"
    # Warnings are errors here (HCOMM_WERROR): CI chooses the compilers.
    if ! cmake -S . -B "$dir" -G Ninja -DHCOMM_WERROR=ON "${cargs[@]}" >"$dir/configure.log" 2>&1 ||
        ! cmake --build "$dir" -j "$jobs" >"$dir/build.log" 2>&1; then
        echo "=== $name: BUILD FAILED"
        tail -40 "$dir/configure.log" "$dir/build.log" 2>/dev/null
        status=1
        return
    fi
    if ((${#targs[@]} == 0)); then
        echo "=== $name: built (no tests)"
        return
    fi
    echo "=== $name: ctest ${targs[*]}"
    if ! ctest --test-dir "$dir" --output-on-failure --timeout 600 "${targs[@]}"; then
        echo "=== $name: FAILED"
        status=1
    fi
}
run release build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHCOMM_GPU_MODEL=ON "${py_args[@]}" -- -j 2
if [[ -z ${HCOMM_TEST_QUICK:-} ]]; then
    run asan build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHCOMM_SANITIZE=address,undefined -DHCOMM_MLX5_MODEL=ON -DHCOMM_GPU_MODEL=ON -- -j 2 -L "unit|mp|tools" -LE "slow|tsan|fuzz|netns"
    run tsan build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHCOMM_SANITIZE=thread -DHCOMM_GPU_MODEL=ON -- -L tsan
    if command -v clang >/dev/null; then
        run fuzz build-fuzz -DCMAKE_C_COMPILER=clang -DHCOMM_BUILD_FUZZ=ON -- -L fuzz
    fi
    smoke='^(test_drv|release_no_test_drivers|mp_p2p_np2)$'
    for cc in gcc clang; do
        command -v $cc >/dev/null || { echo "=== release-$cc: no $cc"; status=1; continue; }
        run release-$cc build-release-$cc -DCMAKE_C_COMPILER=$cc -DCMAKE_BUILD_TYPE=Release \
            -DHCOMM_MLX5_MODEL=ON -DHCOMM_GPU_MODEL=ON -- -R "$smoke"
        for type in ${HCOMM_TEST_BUILD_TYPES:-}; do
            run "$type-$cc" "build-$type-$cc" -DCMAKE_C_COMPILER=$cc -DCMAKE_BUILD_TYPE="$type" \
                -DHCOMM_MLX5_MODEL=ON -DHCOMM_GPU_MODEL=ON --
        done
    done
fi
exit $status
