#!/usr/bin/env bash
# The README's first command: install, reserve hugepages, build, and run the
# main job (4 local ranks running allreduce_bw from 16 B to 64 MiB, x4 per step).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
if [[ $(id -u) == 0 ]]; then
    hugepages/hcomm-hugepages -n "${HCOMM_HUGEPAGES:-1024}" || echo "quickstart: no hugepages reserved; hcomm falls back to regular pages"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
build/bin/hcomm_info
build/bin/hcommrun -n "${NP:-4}" build/bin/allreduce_bw -b 16 -e 64M -f 4
