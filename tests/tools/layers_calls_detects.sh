#!/usr/bin/env bash
# layers_calls_detects.sh ROOT OBJECT_LIST...: proves scripts/check-calls.py
# fails on what it must catch, with the library's real objects plus
# injected ones (compiled here, placed where the checker reads a layer and a
# folder from the path):
#   1. base/inject_up.c calls a function core/ defines (an upward call);
#   2. drv/zz1/a.c and drv/zz2/b.c call each other: same layer, so no
#      upward call, but a circle across folders.
set -euo pipefail
root=$1
shift
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
cat "$@" >"$t/objs.txt"
fail() { echo "FAIL: $*"; exit 1; }

core_obj=$(grep -m1 -E '\.dir/(\./)?core/' "$t/objs.txt") || fail "no core/ object in $*"
sym=$(nm -P -g --defined-only "$core_obj" | awk '$2 == "T" { print $1; exit }')
[[ -n $sym ]] || fail "$core_obj defines no global function"
mkdir -p "$t/inject.dir/base" "$t/inject.dir/drv/zz1" "$t/inject.dir/drv/zz2"
printf 'extern void %s(void);\nvoid hc_inject_up(void) { %s(); }\n' "$sym" "$sym" >"$t/up.c"
printf 'void hc_inject_b(void);\nvoid hc_inject_a(void) { hc_inject_b(); }\n' >"$t/a.c"
printf 'void hc_inject_a(void);\nvoid hc_inject_b(void) { hc_inject_a(); }\n' >"$t/b.c"
cc -c "$t/up.c" -o "$t/inject.dir/base/inject_up.c.o"
cc -c "$t/a.c" -o "$t/inject.dir/drv/zz1/a.c.o"
cc -c "$t/b.c" -o "$t/inject.dir/drv/zz2/b.c.o"

cp "$t/objs.txt" "$t/up.txt"
echo "$t/inject.dir/base/inject_up.c.o" >>"$t/up.txt"
if out=$(python3 "$root/scripts/check-calls.py" --root "$root" "$t/up.txt"); then
    fail "an upward call passed: $out"
fi
grep -q "check-calls: base/inject_up.c (base) uses $sym, defined in core/" <<<"$out" ||
    fail "the upward call base -> core ($sym) is not named: $out"

cp "$t/objs.txt" "$t/circle.txt"
printf '%s\n' "$t/inject.dir/drv/zz1/a.c.o" "$t/inject.dir/drv/zz2/b.c.o" >>"$t/circle.txt"
if out=$(python3 "$root/scripts/check-calls.py" --root "$root" "$t/circle.txt"); then
    fail "a circle of calls passed: $out"
fi
grep -q "a circle of calls spans the folders drv/zz1, drv/zz2:" <<<"$out" ||
    fail "the circle drv/zz1 <-> drv/zz2 is not named: $out"
grep -q "drv/zz1 -> drv/zz2: drv/zz1/a.c uses hc_inject_b" <<<"$out" ||
    fail "the circle's edge is not explained: $out"
echo "ok: the upward call to $sym and the circle drv/zz1 <-> drv/zz2 were both reported"
