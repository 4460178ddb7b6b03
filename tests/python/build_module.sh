#!/bin/sh
# py_build: builds the hcomm Python package (hcomm._hcomm, and
# hcomm._torch_backend when a supported torch and its headers are there)
# against this build's libhcomm into OUT, which the other python tests put
# on PYTHONPATH. Incremental: setuptools and ninja rebuild what changed.
#   build_module.sh PYTHON SOURCE_DIR BUILD_DIR OUT
py=$1 src=$2 bin=$3 out=$4
if ! "$py" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  echo "SKIP: $py has no Python.h (apt-get install python3-dev)"; exit 77
fi
if ! "$py" -c 'import setuptools' 2>/dev/null; then
  echo "SKIP: $py has no setuptools (pip install setuptools)"; exit 77
fi
export HCOMM_BUILD_DIR="$bin" HCOMM_PY_WERROR=1 MAX_JOBS=${MAX_JOBS:-2}
tag=$(basename "$out")
exec "$py" "$src/python/setup.py" -q build --build-base "$bin/$tag-build" --build-lib "$out"
