#!/bin/sh
# py_install_venv: the package installs as users install it, with no network:
#   python3 -m venv --system-site-packages V && V/bin/pip install --no-build-isolation ./python
# (from a copy of python/, so the source tree stays clean), then a 2-rank job
# runs the module and the torch backend from the venv's interpreter.
#   install_venv.sh PYTHON SOURCE_DIR BUILD_DIR
py=$1 src=$2 bin=$3
set -u
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
if ! "$py" -m venv --system-site-packages "$tmp/V" >"$tmp/venv.log" 2>&1; then
  echo "SKIP: $py -m venv fails (apt-get install python3-venv):"; cat "$tmp/venv.log"; exit 77
fi
if [ ! -x "$tmp/V/bin/pip" ]; then
  echo "SKIP: the venv has no pip (apt-get install python3-pip python3-venv)"; exit 77
fi
cp -r "$src/python" "$tmp/src" && rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info "$tmp/src/hcomm"/*.so
export HCOMM_BUILD_DIR="$bin" MAX_JOBS=${MAX_JOBS:-2} PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1 \
  PIP_DISABLE_PIP_VERSION_CHECK=1
unset PYTHONPATH
if ! "$tmp/V/bin/pip" install -q --no-build-isolation "$tmp/src" >"$tmp/pip.log" 2>&1; then
  echo "FAIL: pip install:"; tail -40 "$tmp/pip.log"; exit 1
fi
"$tmp/V/bin/pip" show hcomm >"$tmp/show" && head -2 "$tmp/show"
cd "$tmp" || exit 1
where=$("$tmp/V/bin/python" -c 'import hcomm, os; print(os.path.dirname(hcomm.__file__))') || exit 1
case $where in "$tmp/V/"*) ;; *) echo "FAIL: hcomm imported from $where, not the venv"; exit 1 ;; esac
cat >"$tmp/job.py" <<'PY'
import sys, tempfile, numpy as np, hcomm
w = hcomm.init()
rank = w.rank
x = np.full(1000, w.rank + 1.0, dtype=np.float32)
w.allreduce(x)
assert (x == w.size * (w.size + 1) / 2).all(), x[:4]
torch_ok = "no torch"
try:
    import torch, torch.distributed as dist
except ImportError:
    dist = None
if dist is not None:
    import hcomm.torch
    dist.init_process_group("hcomm", init_method="file://" + sys.argv[1], rank=w.rank, world_size=w.size)
    t = torch.ones(10, dtype=torch.bfloat16)
    dist.all_reduce(t)
    assert (t == w.size).all(), t
    dist.destroy_process_group()
    torch_ok = "torch backend ok"
w.barrier()
hcomm.finalize()
print(f"rank {rank}: module ok, {torch_ok}")
PY
"$bin/bin/hcommrun" -n 2 --timeout 60 "$tmp/V/bin/python" "$tmp/job.py" "$tmp/store" || exit 1
echo "PASS: installed into a venv and ran from it"
