#!/bin/bash
# test_version_agree.sh SRC BUILD: the version is written once, in
# CMakeLists.txt (project(hcomm VERSION x.y.z)), and these five say it:
#   hcomm_version() of build/lib/libhcomm.so (ctypes), hcomm_info --version,
#   the pc files (hcomm.pc, hcomm-uninstalled.pc), the .deb (CPack's
#   CPACK_PACKAGE_VERSION; install_deb checks the package file itself), and
#   Python: the package metadata (setup.py's _version) and hcomm.__version__
#   (the module of build/python when built; else its source derives it).
# Also: include/hcomm.h's HCOMM_VERSION_* macros agree (configure fails
# otherwise) and no other file writes the version as a literal.
set -u
src=$(realpath "${1:?src}") build=$(realpath "${2:?build}")
bad=0
fail() { echo "FAIL: $*"; bad=1; }
v=$(sed -n 's/^project(hcomm VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "FAIL: no version in CMakeLists.txt"; exit 1; }
echo "CMakeLists.txt: $v"

if [[ -n ${HCOMM_TEST_SANITIZED:-} ]]; then
    echo "note: a sanitized libhcomm cannot be loaded by python: hcomm_version() not checked here"
else
    got=$(python3 -c 'import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); f=l.hcomm_version; f.restype=ctypes.c_char_p; print(f().decode())' \
        "$build/lib/libhcomm.so.0") || fail "hcomm_version() not callable"
    [[ $got == "$v" ]] || fail "hcomm_version() says '$got'"
fi
got=$("$build/bin/hcomm_info" --version) || fail "hcomm_info --version failed"
[[ $got == "hcomm $v "* ]] || fail "hcomm_info --version says '$got'"
for pc in hcomm.pc hcomm-uninstalled.pc; do
    got=$(sed -n 's/^Version: //p' "$build/$pc")
    [[ $got == "$v" ]] || fail "$pc says '$got'"
done
got=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")/\1/p' "$build/CPackConfig.cmake")
[[ $got == "$v" ]] || fail "the .deb (CPACK_PACKAGE_VERSION) says '$got'"
h=$(sed -n 's/^#define HCOMM_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$src/include/hcomm.h" | paste -sd.)
[[ $h == "$v" ]] || fail "include/hcomm.h says '$h'"

# Python: the metadata from setup.py's _version(), run on its own
got=$(cd "$src/python" && python3 -c '
import ast, os, sys
tree = ast.parse(open("setup.py").read())
fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_version"][0]
ns = {"os": os, "SOURCE_DIR": os.path.dirname(os.getcwd()), "HERE": os.getcwd()}
exec(compile(ast.Module(body=[fn], type_ignores=[]), "setup.py", "exec"), ns)
print(ns["_version"]())') || fail "setup.py _version() failed"
[[ $got == "$v" ]] || fail "python package metadata (setup.py) says '$got'"
grep -q '^dynamic = \["version"\]' "$src/python/pyproject.toml" || fail "pyproject.toml writes its own version"
if [ -f "$build/python/hcomm/__init__.py" ] &&
    got=$(cd / && PYTHONPATH=$build/python python3 -c 'import hcomm; print(hcomm.__version__)' 2>/dev/null); then
    [[ $got == "$v" ]] || fail "hcomm.__version__ says '$got'"
    echo "hcomm.__version__ (build/python): $got"
else
    echo "note: build/python has no importable hcomm (py_build not run): checking the source"
    grep -q '^__version__ = _text(version()).split()\[1\]' "$src/python/hcomm/__init__.py" ||
        fail "python/hcomm/__init__.py does not take __version__ from the library"
fi
# no second copy of the literal where a version belongs
lit=$(grep -rnE "version *= *\"$v\"|__version__ *= *\"$v\"" "$src/python" "$src/cmake" "$src/CMakeLists.txt" 2>/dev/null)
[ -z "$lit" ] || fail "the version written again: $lit"
[ $bad = 0 ] && echo "version_agree: $v everywhere"
exit $bad
