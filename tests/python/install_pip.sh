#!/bin/sh
# py_install_pip: the package installs as a user installs it, with no
# network and no separate C build, through a wheel:
#   pip wheel --no-build-isolation --no-deps -w DIST ./python
#   pip install --no-deps --target SITE DIST/hcomm-*.whl
# from a copy of python/ (the source tree stays clean), with no
# HCOMM_BUILD_DIR/HCOMM_PREFIX: setup.py must find no installed hcomm, build
# libhcomm with CMake and ship it in the package (where pkg-config finds an
# installed hcomm, HCOMM_BUNDLE=1 makes it build its own all the same).
# Then a 2-rank torchrun job from SITE that never imports hcomm: torch must
# find the backend through hcomm's entry points. Last, a torch outside the
# supported range (Debian's 1.13, when /usr/bin/python3 has it) must be
# refused at import with a message naming the range.
#   install_pip.sh PYTHON SOURCE_DIR BUILD_DIR
py=$1 src=$2 bin=$3
set -u
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
if ! "$py" -m pip --version >/dev/null 2>&1; then
  echo "SKIP: $py has no pip"; exit 77
fi
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "SKIP: $py has no torch"; exit 77
fi
mkdir "$tmp/src" && cp -r "$src/python/." "$tmp/src/" &&
  rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info "$tmp/src/hcomm"/*.so* || exit 1
unset HCOMM_BUILD_DIR HCOMM_PREFIX HCOMM_BUNDLE PYTHONPATH
if pkg-config --exists hcomm 2>/dev/null; then export HCOMM_BUNDLE=1; fi
export HCOMM_SOURCE_DIR="$src" MAX_JOBS=${MAX_JOBS:-2} PIP_NO_INDEX=1 \
  PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# a wheel first (what a package index would serve), then that wheel installed
if ! "$py" -m pip wheel -v --no-build-isolation --no-deps -w "$tmp/dist" "$tmp/src" >"$tmp/pip.log" 2>&1; then
  echo "FAIL: pip wheel:"; tail -40 "$tmp/pip.log"; exit 1
fi
whl=$(ls "$tmp/dist"/hcomm-*.whl 2>/dev/null | head -1)
[ -n "$whl" ] || { echo "FAIL: pip wheel made no hcomm-*.whl"; ls "$tmp/dist"; exit 1; }
"$py" -m zipfile -l "$whl" | grep -q "hcomm/libhcomm.so.0 " ||
  { echo "FAIL: $(basename "$whl") holds no hcomm/libhcomm.so.0"; "$py" -m zipfile -l "$whl"; exit 1; }
echo "wheel: $(basename "$whl")"
if ! "$py" -m pip install -v --no-deps --target "$tmp/site" "$whl" >>"$tmp/pip.log" 2>&1; then
  echo "FAIL: pip install of the wheel:"; tail -40 "$tmp/pip.log"; exit 1
fi
grep "hcomm setup:" "$tmp/pip.log"
grep -q "hcomm setup: libhcomm bundled" "$tmp/pip.log" || { echo "FAIL: libhcomm was not built by setup.py"; exit 1; }
ls "$tmp/site/hcomm" | grep -q '^libhcomm.so.0$' || { echo "FAIL: no libhcomm.so.0 in the package"; ls "$tmp/site/hcomm"; exit 1; }
export PYTHONPATH="$tmp/site"
cd "$tmp" || exit 1
lib=$("$py" -c 'import hcomm, os; print(os.path.dirname(hcomm.__file__))') || exit 1
[ "$lib" = "$tmp/site/hcomm" ] || { echo "FAIL: hcomm imported from $lib"; exit 1; }
ldd "$tmp/site/hcomm"/_hcomm*.so | grep -q "libhcomm.so.0 => $tmp/site/hcomm/" ||
  { echo "FAIL: _hcomm does not load the shipped libhcomm:"; ldd "$tmp/site/hcomm"/_hcomm*.so; exit 1; }
cat >"$tmp/job.py" <<'PY'
import sys
import torch
import torch.distributed as dist
assert "hcomm" not in sys.modules, "something imported hcomm"
dist.init_process_group("hcomm")  # registered by hcomm's entry point, loaded now
assert "hcomm.torch" in sys.modules
r, n = dist.get_rank(), dist.get_world_size()
t = torch.full((100,), float(r + 1), dtype=torch.bfloat16)
dist.all_reduce(t)
assert bool((t == n * (n + 1) / 2).all()), t[:4]
dist.destroy_process_group()
print(f"rank {r}: installed backend ok (torch {torch.__version__})")
PY
env -u OMP_NUM_THREADS "$py" -m torch.distributed.run --standalone --nproc-per-node 2 --max-restarts 0 "$tmp/job.py" \
  >"$tmp/job.log" 2>&1 || { echo "FAIL: the job:"; tail -30 "$tmp/job.log"; exit 1; }
grep "installed backend ok" "$tmp/job.log"
if /usr/bin/python3 -c 'import sys, torch; sys.exit(not torch.__version__.startswith("1."))' 2>/dev/null; then
  out=$(/usr/bin/python3 -c 'import hcomm.torch' 2>&1)
  echo "$out" | grep -q "is not supported by hcomm's backend, which supports torch 2" ||
    { echo "FAIL: torch 1.x not refused clearly: $out"; exit 1; }
  echo "torch 1.x refused: $(echo "$out" | tail -1)"
fi
echo "PASS: pip install built libhcomm and the backend; torch found it by its entry point"
