#!/usr/bin/env bash
# Regenerates docs/config.md from `hcomm_info -c` (run after adding a knob).
set -euo pipefail
cd "$(dirname "$0")/.."
info=${1:-build/bin/hcomm_info}
{
    echo "# Configuration knobs"
    echo
    echo "Every knob is an environment variable read once by \`hcomm_init\`. This list is"
    echo "the output of \`hcomm_info -c\` with no \`HCOMM_*\` variable set; the test"
    echo "\`config_doc\` fails when it drifts from the code (regenerate with"
    echo "\`scripts/gen-config-doc.sh\`). The test drivers' knobs (\`HCOMM_FAKE_*\`,"
    echo "\`HCOMM_MLX5_MODEL_FAULT\`, \`HCOMM_GPU_MODEL_FAULT\`, \`HCOMM_GPU_MODEL_DELAY\`)"
    echo "belong to the test library, not to what ships: see docs/drivers.md, docs/mlx5.md"
    echo "and docs/gpu.md."
    echo
    echo '```'
    env -i "$info" -c
    echo '```'
} >docs/config.md
