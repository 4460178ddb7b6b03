#!/usr/bin/env bash
# check-release-syms.sh TESTDRV_OBJECTS LIB_OBJECTS LIB...: fails when a
# library (libhcomm.so, libhcomm.a) contains test machinery: the fake driver
# or the model of the mlx5 queues (docs/architecture.md, "What ships").
#
# TESTDRV_OBJECTS and LIB_OBJECTS are files listing object paths, one a line
# (CMake writes build/hcomm_testdrv_objects.txt and build/hcomm_objects.txt).
# The names to look for are every symbol the test objects define, local ones
# included (static functions and tables: hc_fake_put, hc_fake_ops,
# hc_m5_exec...), less any name the library objects define too; each LIB's
# symbol table (nm; every member of an archive) must contain none of them.
# A LIB without a symbol table (stripped) cannot be checked and fails.
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: check-release-syms.sh TESTDRV_OBJECTS LIB_OBJECTS LIB..." >&2; exit 2; }
testobjs=$1 libobjs=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# nm's defined names, without GCC's clone suffixes (hc_x.part.0 -> hc_x).
names() {
    nm --defined-only "$@" 2>/dev/null | awk 'NF >= 3 && $3 !~ /^\./ { sub(/\..*/, "", $3); print $3 }' | sort -u
}
mapfile -t tobjs <"$testobjs"
mapfile -t lobjs <"$libobjs"
((${#tobjs[@]})) || { echo "check-release-syms: $testobjs lists no test objects"; exit 1; }
names "${tobjs[@]}" >"$work/test"
names "${lobjs[@]}" >"$work/lib"
comm -23 "$work/test" "$work/lib" >"$work/only_test"
n=$(wc -l <"$work/only_test")
((n > 0)) || { echo "check-release-syms: the test objects define no symbol of their own: nothing to look for"; exit 1; }

bad=0
for lib in "$@"; do
    names "$lib" >"$work/have"
    if ! grep -qx hc_drv_register "$work/have"; then
        echo "check-release-syms: $lib: no symbol table with the library's own symbols (stripped?): cannot check"
        bad=1
        continue
    fi
    comm -12 "$work/only_test" "$work/have" >"$work/found"
    if [[ -s $work/found ]]; then
        echo "check-release-syms: $lib contains $(wc -l <"$work/found") symbols of the test drivers, e.g.: $(head -8 "$work/found" | tr '\n' ' ')"
        echo "check-release-syms: $lib: their prefixes: $(grep -o '^hc_[a-z0-9]*' "$work/found" | sort -u | tr '\n' ' ')"
        bad=1
    else
        echo "check-release-syms: $lib: none of the $n symbols of the test drivers"
    fi
done
exit $bad
