#!/usr/bin/env bash
# Creates (once) a Python virtual environment with torch from PyPI for the
# python tests, and prints its interpreter's path on stdout:
#   scripts/python-venv.sh [TORCH_VERSION]      (default: 2.15.0, the newest supported)
# The venv lives in ${HCOMM_VENV_ROOT:-/var/cache/hcomm-venv}/torch-<version>,
# made by Debian's /usr/bin/python3 (python3-venv): a fresh CI machine
# installs it once (torch's Linux wheels pull the CUDA runtime wheels, a few
# GiB; nothing here runs CUDA code), later runs reuse it. A venv is only
# used once its install finished (the marker file .hcomm-ready); a failed or
# interrupted install is started again from scratch.
# Exit 0: the venv is ready; 1: it could not be made (pip's log on stderr).
set -euo pipefail
ver=${1:-2.15.0}
root=${HCOMM_VENV_ROOT:-/var/cache/hcomm-venv}
dir=$root/torch-$ver
py=${HCOMM_VENV_PYTHON:-/usr/bin/python3}
if [[ -f $dir/.hcomm-ready && -x $dir/bin/python ]]; then
    echo "$dir/bin/python"
    exit 0
fi
mkdir -p "$root"
exec 9>"$root/.lock-$ver"
flock 9 # one install at a time per version (parallel ctest, two CI runs)
if [[ -f $dir/.hcomm-ready && -x $dir/bin/python ]]; then
    echo "$dir/bin/python"
    exit 0
fi
rm -rf "$dir.tmp"
log=$root/install-$ver.log
echo "python-venv: installing torch $ver into $dir (once; a few GiB)" >&2
# numpy: the module's tests; setuptools, wheel: pip install --no-build-isolation
# of python/ (no download at build time); cmake and ninja come from Debian.
if ! "$py" -m venv "$dir.tmp" >"$log" 2>&1 ||
    ! "$dir.tmp/bin/pip" install --disable-pip-version-check "torch==$ver" numpy setuptools wheel \
        >>"$log" 2>&1; then
    echo "python-venv: could not install torch $ver (log: $log):" >&2
    tail -20 "$log" >&2
    rm -rf "$dir.tmp"
    exit 1
fi
# The venv's scripts name its path: move it where it stays, then say so in them.
rm -rf "$dir"
mv "$dir.tmp" "$dir"
grep -rlI -- "$dir.tmp" "$dir/bin" | xargs -r sed -i "s|$dir.tmp|$dir|g"
"$dir/bin/python" -c "import torch, numpy; print('python-venv: torch', torch.__version__, 'numpy', numpy.__version__)" >&2
touch "$dir/.hcomm-ready"
echo "$dir/bin/python"
