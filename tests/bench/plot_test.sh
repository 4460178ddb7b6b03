#!/usr/bin/env bash
# plot_test.sh [SRCDIR]: smoke test of scripts/plot-bench.py (and of the text
# to JSON conversion of scripts/peers-json.sh), no build and no MPI needed.
# Synthetic JSON lines of two libraries and more (a few sizes each) go
# through plot-bench.py: the PNG must be a real PNG (magic bytes, > 10 KB),
# --table must print the expected hcomm / best peer ratios, a file with no
# usable rows must give exit 2 and say so. Exit 0 pass, 1 fail, 77 skipped
# (no python3-matplotlib).
set -u
src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
py=/usr/bin/python3
plot=$src/scripts/plot-bench.py
peers=$src/scripts/peers-json.sh
t=$(mktemp -d /tmp/plot_test.XXXXXX)
trap 'rm -rf "$t"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }

$py -c 'import matplotlib' 2>/dev/null ||
    { echo "skipped: python3-matplotlib missing (apt-get install -y python3-matplotlib)"; exit 77; }

# --- synthetic rows -------------------------------------------------------
# allreduce busbw at 1 MiB: hcomm 6, openmpi 4, mpich 5 -> ratio 1.200;
# at 4 KiB: hcomm 1, openmpi 2, mpich 0.5 -> 0.500. time_us follows from it.
coll() { # lib in_place bytes busbw
    awk -v lib="$1" -v ip="$2" -v b="$3" -v bw="$4" 'BEGIN {
        t = b / bw / 1e3
        printf "{\"tool\":\"allreduce_bw\",\"lib\":\"%s\",\"nranks\":2,\"dtype\":\"float32\",", lib
        printf "\"op\":\"sum\",\"root\":-1,\"blocking\":1,\"in_place\":%d,\"bytes\":%d,", ip, b
        printf "\"count\":%d,\"time_us\":%.6f,\"p50_us\":%.6f,\"p99_us\":%.6f,", b / 4, t, t * .95, t * 1.5
        printf "\"min_us\":%.6f,\"max_us\":%.6f,\"algbw_GBps\":%.6f,", t * .9, t * 2, bw
        printf "\"busbw_GBps\":%.6f,\"wrong\":0}\n", bw }'
}
{
    echo "# hcomm allreduce_bw -J, synthetic"
    for ip in 0 1; do
        coll hcomm $ip 8 0.01; coll hcomm $ip 4096 1; coll hcomm $ip 65536 3
        coll hcomm $ip 1048576 6; coll hcomm $ip 16777216 7
    done
} >"$t/hcomm.json"
{
    coll openmpi 0 8 0.02; coll openmpi 0 4096 2; coll openmpi 0 65536 2.5
    coll openmpi 0 1048576 4; coll openmpi 0 16777216 3.5
} >"$t/openmpi.json"
{
    coll mpich 0 8 0.01; coll mpich 0 4096 0.5; coll mpich 0 65536 2
    coll mpich 0 1048576 5; coll mpich 0 16777216 3
} >"$t/mpich.json"
# pingpong: 8 B hcomm 0.30 us, openmpi 0.20 us -> ratio 1.500
pp() { printf '{"tool":"pingpong","lib":"%s","mode":"lat","bytes":%d,"lat_us":%s,"p50_us":%s,"p99_us":%s,"MBps":%s}\n' \
    "$1" "$2" "$3" "$3" "$3" "$(awk -v b="$2" -v l="$3" 'BEGIN {print b / l}')"; }
{ pp hcomm 8 0.30; pp hcomm 4096 1.5; pp hcomm 1048576 200; } >"$t/pp-hcomm.json"
{ pp openmpi 8 0.20; pp openmpi 4096 2.0; pp openmpi 1048576 180; } >"$t/pp-openmpi.json"
# mixed_load: hcomm 3.0 GB/s, openmpi 2.0, gloo 4.0 but it skipped
# reduce_scatter (no best peer) -> ratio 1.500
mx() { printf '{"tool":"mixed_load","lib":"%s","profile":"mixed","nranks":2,"steps":100,"step_us_mean":%s,"step_us_p50":%s,"step_us_p99":%s,"bytes_per_step":8000000,"eff_GBps":%s,"wrong":0%s}\n' \
    "$1" "$(awk -v g="$2" 'BEGIN {print 8e3 / g}')" "$(awk -v g="$2" 'BEGIN {print 7.9e3 / g}')" \
    "$(awk -v g="$2" 'BEGIN {print 9e3 / g}')" "$2" "${3:-}"; }
{ mx hcomm 3.0; mx openmpi 2.0; mx gloo 4.0 ',"skipped":[{"collective":"reduce_scatter","bytes":2097152,"count":1}]'; } >"$t/mixed.json"

# --- the PNG ----------------------------------------------------------------
out=$t/out.png
if $py "$plot" "$t/hcomm.json" "$t/openmpi.json" "$t/mpich.json" "$t/pp-hcomm.json" \
    "$t/pp-openmpi.json" "$t/mixed.json" -o "$out" --title "plot_test" 2>"$t/err"; then
    pass "plot-bench.py -o wrote $(cat "$t/err")"
else
    fail "plot-bench.py -o exited $?: $(cat "$t/err")"
fi
if [[ -s $out ]]; then
    magic=$(head -c 8 "$out" | od -An -tx1 | tr -d ' \n')
    [[ $magic == 89504e470d0a1a0a ]] && pass "PNG magic bytes" || fail "not a PNG: magic $magic"
    size=$(stat -c %s "$out")
    ((size > 10240)) && pass "PNG is $size bytes" || fail "PNG only $size bytes (want > 10 KB)"
    # IHDR: width and height (big endian) right after the chunk type
    read -r w h < <($py -c 'import struct,sys; d=open(sys.argv[1],"rb").read(24); print(*struct.unpack(">II", d[16:24]))' "$out")
    ((w >= 800 && h >= 400)) && pass "PNG ${w}x${h}" || fail "PNG ${w}x${h}, too small"
else
    fail "no PNG at $out"
fi

# --- the table --------------------------------------------------------------
# row_ratio FILE BYTES: the last column of the table row for BYTES
row_ratio() { awk -v b="$2" '$1 == b {r = $NF} END {print r}' "$1"; }
if $py "$plot" "$t/hcomm.json" "$t/openmpi.json" "$t/mpich.json" "$t/pp-hcomm.json" \
    "$t/pp-openmpi.json" "$t/mixed.json" --table >"$t/table" 2>"$t/err"; then
    pass "--table"
else
    fail "--table exited $?: $(cat "$t/err")"
fi
cat "$t/table"
grep -q '^## allreduce_bw float32 sum, 2 ranks: busbw_GBps' "$t/table" &&
    grep -Eq '^ +bytes +hcomm +hcomm in-place +openmpi +mpich +ratio$' "$t/table" &&
    pass "allreduce table header" || fail "allreduce table header"
# the first (allreduce) block only: pingpong also has 4096 and 1048576
awk '/^## /{n++} n == 1' "$t/table" >"$t/t1"
r=$(row_ratio "$t/t1" 1048576)
[[ $r == 1.200 ]] && pass "allreduce 1 MiB ratio $r" || fail "allreduce 1 MiB ratio '$r', want 1.200"
r=$(row_ratio "$t/t1" 4096)
[[ $r == 0.500 ]] && pass "allreduce 4 KiB ratio $r" || fail "allreduce 4 KiB ratio '$r', want 0.500"
awk '/^## pingpong/{on = 1; next} /^## /{on = 0} on' "$t/table" >"$t/t2"
r=$(row_ratio "$t/t2" 8)
[[ $r == 1.500 ]] && pass "pingpong 8 B latency ratio $r" || fail "pingpong 8 B ratio '$r', want 1.500"
awk '/^## mixed_load/{on = 1; next} /^## /{on = 0} on' "$t/table" >"$t/t3"
r=$(row_ratio "$t/t3" mixed)
[[ $r == 1.500 ]] && pass "mixed ratio $r (gloo skipped work: no best peer)" ||
    fail "mixed ratio '$r', want 1.500"
grep -q 'gloo (skips reduce_scatter)' "$t/t3" && pass "gloo's skipped collective named" ||
    fail "gloo's skipped collective not in the mixed table"
# --metric time_us: lower is better; 1 MiB: hcomm 1048576/6e3, best peer mpich /5e3
$py "$plot" "$t/hcomm.json" "$t/openmpi.json" "$t/mpich.json" --table --metric time_us >"$t/tm"
r=$(row_ratio "$t/tm" 1048576)
[[ $r == 0.833 ]] && pass "time_us ratio $r" || fail "time_us 1 MiB ratio '$r', want 0.833"
# FILE:LABEL and --ours: two "hcomm builds" compared
$py "$plot" "$t/hcomm.json:new" "$t/openmpi.json:old" --ours new --table >"$t/lab"
grep -Eq '^ +bytes +new +new in-place +old +ratio$' "$t/lab" && r=$(row_ratio "$t/lab" 1048576) &&
    [[ $r == 1.500 ]] && pass "FILE:LABEL, --ours (ratio $r)" || fail "FILE:LABEL / --ours: $(cat "$t/lab")"
# a row read twice is the median, not a second line
cat "$t/openmpi.json" "$t/openmpi.json" >"$t/twice.json"
n=$($py "$plot" "$t/twice.json" --table | awk '$1 == 1048576' | wc -l)
((n == 1)) && pass "duplicate rows merged" || fail "duplicate rows: $n table lines"

# --- files with no usable rows ----------------------------------------------
: >"$t/empty.json"
printf '# only a comment\n\n' >"$t/comment.json"
printf 'not json\n{"tool":"allreduce_bw","lib":"x"}\n' >"$t/junk.json"
for f in empty comment junk; do
    $py "$plot" "$t/openmpi.json" "$t/$f.json" -o "$t/$f.png" >"$t/out" 2>"$t/err"
    rc=$?
    if ((rc == 2)) && grep -q "$f.json: no usable rows" "$t/err" && [[ ! -e $t/$f.png ]]; then
        pass "$f file: exit 2, '$(cat "$t/err" | tail -1)'"
    else
        fail "$f file: exit $rc, stderr '$(cat "$t/err")'"
    fi
done
$py "$plot" "$t/nonexistent.json" --table >/dev/null 2>"$t/err"
rc=$?
((rc == 2)) && grep -q "nonexistent.json" "$t/err" && pass "missing file: exit 2" ||
    fail "missing file: exit $rc, '$(cat "$t/err")'"

# --- many groups (-d all -o all): one readable figure per metric -----------
# 10 dtypes x 5 ops of allreduce: 50 groups. Split by metric, 12 panels a
# page: 5 pages of busbw and 5 of time, none above 1500 x 1500 px; the
# filters keep what they name; nothing matched: exit 2.
dtypes="float32 float16 bfloat16 float64 int8 uint8 int32 uint32 int64 uint64"
for d in $dtypes; do
    for o in sum prod max min avg; do
        for b in 8 4096 1048576; do
            coll hcomm 0 $b 2 | sed "s/\"dtype\":\"float32\"/\"dtype\":\"$d\"/; s/\"op\":\"sum\"/\"op\":\"$o\"/"
        done
    done
done >"$t/all.json"
png_size() { $py -c 'import struct,sys; d=open(sys.argv[1],"rb").read(24); print(*struct.unpack(">II", d[16:24]))' "$1"; }
if $py "$plot" "$t/all.json" -o "$t/all.png" 2>"$t/err"; then
    n_b=$(ls "$t"/all-busbw-*.png 2>/dev/null | wc -l) n_t=$(ls "$t"/all-time-*.png 2>/dev/null | wc -l)
    [[ $n_b == 5 && $n_t == 5 && ! -e $t/all.png ]] && pass "50 groups: 5 pages of busbw, 5 of time" ||
        fail "50 groups: $n_b busbw and $n_t time pages, want 5 and 5 ($(ls "$t"))"
    for f in "$t"/all-*.png; do
        read -r w h < <(png_size "$f")
        ((w <= 1500 && h <= 1500)) || fail "$(basename "$f") is $w x $h px"
    done
else
    fail "50 groups: exit $?: $(cat "$t/err")"
fi
if $py "$plot" "$t/all.json" --dtype float32,bfloat16 --op sum -o "$t/f.png" --table >"$t/ftab" 2>"$t/err"; then
    read -r w h < <(png_size "$t/f.png")
    groups=$(grep -c "^## " "$t/ftab")
    [[ $groups == 2 ]] && ((h < 1500)) && pass "--dtype float32,bfloat16 --op sum: 2 groups, one figure ($w x $h)" ||
        fail "filters: $groups groups in the table, figure $w x $h: $(head -3 "$t/ftab")"
else
    fail "filters: exit $?: $(cat "$t/err")"
fi
$py "$plot" "$t/all.json" --tool pingpong --table >"$t/out" 2>"$t/err"
rc=$?
((rc == 2)) && grep -q "no row of the 150 read matches" "$t/err" && pass "a filter matching nothing: exit 2" ||
    fail "a filter matching nothing: exit $rc, '$(cat "$t/err")'"

# --- the comparison scripts are self-contained -------------------------------
# everything peers-json.sh and compare-peers.sh run lives in the repository
for f in mpi_bench.c gloo_bench.py run.sh compare.sh mixed_load_mpi.c mixed_load_gloo.py; do
    [[ -f $src/bench/peers/$f ]] || fail "bench/peers/$f is missing"
done
if grep -n "shared/peers\|\.\./shared" "$src"/scripts/*.sh "$src"/bench/peers/* >"$t/outside"; then
    fail "a script reaches outside the repository: $(head -3 "$t/outside")"
else
    pass "peers-json.sh, compare-peers.sh and bench/peers name nothing outside the repository"
fi
if command -v mpicc.openmpi >/dev/null; then
    mpicc.openmpi -fsyntax-only "$src/bench/peers/mpi_bench.c" 2>"$t/err" &&
        pass "bench/peers/mpi_bench.c compiles" || fail "bench/peers/mpi_bench.c: $(head -3 "$t/err")"
fi
$py -m py_compile "$src/bench/peers/gloo_bench.py" 2>"$t/err" && pass "gloo_bench.py compiles" ||
    fail "gloo_bench.py: $(cat "$t/err")"

# --- peers-json.sh convert: peer text -> rows plot-bench.py accepts ----------
cat >"$t/peer.txt" <<'EOF'
## Open MPI
# mpi_bench allreduce
#         size        count   type  redop    time_us      algbw      busbw  wrong
             8            2  float    sum       0.56      0.014      0.014      0
       1048576       262144  float    sum     262.14      4.000      4.000      0
EOF
if bash "$peers" convert allreduce openmpi 2 <"$t/peer.txt" >"$t/conv.json" &&
    (($(wc -l <"$t/conv.json") == 2)) &&
    $py "$plot" "$t/hcomm.json" "$t/conv.json" --table >"$t/ct" &&
    r=$(awk '/^## /{n++} n == 1' "$t/ct" | awk '$1 == 1048576 {print $NF}') && [[ $r == 1.500 ]]; then
    pass "peers-json.sh convert (ratio $r against hcomm)"
else
    fail "peers-json.sh convert: $(cat "$t/conv.json" "$t/ct" 2>/dev/null)"
fi
printf '  8 0.200 0.190 0.400 40.0\n' | bash "$peers" convert pingpong mpich 2 >"$t/cpp.json"
grep -q '"tool":"pingpong","lib":"mpich","mode":"lat","bytes":8,"lat_us":0.200' "$t/cpp.json" &&
    pass "peers-json.sh convert pingpong" || fail "convert pingpong: $(cat "$t/cpp.json")"

if ((fails)); then
    echo "plot_test: $fails check(s) FAILED"
    exit 1
fi
echo "plot_test: all checks passed"
