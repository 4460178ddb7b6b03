#!/usr/bin/env bash
# The peers (Open MPI 4.1, MPICH 4.0, torch.distributed gloo) measured by
# bench/peers (mpi_bench.c, gloo_bench.py, run.sh: all in this repository),
# written as the JSON lines of hcomm's bench tools (-J), so
# that scripts/plot-bench.py puts them next to hcomm:
#
#   scripts/peers-json.sh allreduce NPROC MIN MAX OUTDIR
#   scripts/peers-json.sh pingpong  NPROC MIN MAX OUTDIR
#   scripts/peers-json.sh mixed     NPROC PROFILE OUTDIR
#   scripts/peers-json.sh convert allreduce|pingpong LIB NPROC  <peer text  >JSON lines
#
# allreduce: mpi_bench.c and gloo_bench.py (float32 sum, sizes MIN, 4 MIN,
#   16 MIN, ... <= MAX; PEERS_FACTOR=2 adds a second run from 2 MIN: every
#   step of two) -> OUTDIR/allreduce-{openmpi,mpich,gloo}.json, rows as
#   allreduce_bw -J writes them ("lib" = openmpi / mpich / gloo; the peers
#   print no percentiles, so p50_us ... max_us are absent).
# pingpong: mpi_bench.c pingpong (8 B, 16 B, ... <= MAX; rows below MIN
#   dropped) -> OUTDIR/pingpong-{openmpi,mpich}.json, mode "lat". gloo has no
#   pingpong program among the peers: reported and skipped.
# mixed: bench/peers/mixed_load_mpi.c (built with mpicc.openmpi and
#   mpicc.mpich) and bench/peers/mixed_load_gloo.py on PROFILE (the format of
#   bench/profiles/) -> OUTDIR/mixed-<profile>-{openmpi,mpich,gloo}.json.
#   Collectives gloo lacks are reported by mixed_load_gloo.py and skipped.
# convert: the text tables of mpi_bench.c / gloo_bench.py / run.sh on stdin
#   to JSON lines on stdout (lines that are not result rows are ignored).
#
# MIN, MAX: bytes with an optional K, M or G (binary) suffix. The raw text of
# every run is kept next to its JSON (.txt). Installs and builds the peers
# with bench/peers/run.sh the first time (apt-get, root).
# Environment: PEERS (the peer scripts; default <project>/bench/peers),
# PEERS_WORK (where the peer binaries live; /tmp/hcomm-peers, as run.sh),
# PEERS_LIBS (default "openmpi mpich gloo"), PEERS_TIMEOUT (seconds per run,
# 600), PEERS_FACTOR (4 or 2), MIXED_STEPS (100), MIXED_WARMUP (10),
# GLOO_PORT (29517; mixed uses the next port).
# With more ranks than cores the MPI runs are oversubscribed, unbound.
# Exit: 0; 1 when a peer failed or printed no rows (the others still written);
# 2 on bad usage.
set -euo pipefail
prog=peers-json.sh
root=$(cd "$(dirname "$0")/.." && pwd)
P=${PEERS:-$root/bench/peers}
[[ -d $P ]] && P=$(cd "$P" && pwd)
work=${PEERS_WORK:-/tmp/hcomm-peers}
libs=${PEERS_LIBS:-openmpi mpich gloo}
tmo=${PEERS_TIMEOUT:-600}

usage() {
    [[ $# -gt 0 ]] && echo "$prog: $*" >&2
    sed -n '6,9p' "$0" | sed 's/^# */usage: /' >&2
    exit 2
}

# bytes with an optional K/M/G suffix (and B/iB)
to_bytes() {
    local s=$1 n u
    [[ $s =~ ^([0-9]+)([KkMmGg]?)(B|iB)?$ ]] || return 1
    n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2],,}
    case $u in k) n=$((n << 10)) ;; m) n=$((n << 20)) ;; g) n=$((n << 30)) ;; esac
    echo "$n"
}

# convert KIND LIB NPROC [MIN MAX]: peer text on stdin -> JSON lines on stdout
convert() {
    local kind=$1 lib=$2 np=$3 lo=${4:-0} hi=${5:-0}
    awk -v kind="$kind" -v lib="$lib" -v np="$np" -v lo="$lo" -v hi="$hi" '
    function jnum(x) { return (x ~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/) ? x : "null" }
    function jstr(x) { gsub(/["\\]/, "\\\\&", x); return "\"" x "\"" }
    function dtype(t) {
        if (t == "float") return "float32"; if (t == "double") return "float64"
        if (t == "half") return "float16"; return t
    }
    $1 !~ /^[0-9]+$/ { next }
    hi > 0 && ($1 < lo + 0 || $1 > hi + 0) { next }
    kind == "allreduce" && NF >= 8 {
        # algbw/busbw again from bytes and time (the peers print 3 decimals of
        # GB/s, 0.000 for small sizes): the same formulas, more digits
        alg = jnum($6); bus = jnum($7)
        if (jnum($5) != "null" && $5 > 0) {
            alg = sprintf("%.6g", $1 / $5 / 1e3)
            bus = sprintf("%.6g", alg * 2.0 * (np - 1) / np)
        }
        printf "{\"tool\":\"allreduce_bw\",\"lib\":%s,\"nranks\":%d,\"dtype\":%s,\"op\":%s," \
               "\"root\":-1,\"blocking\":1,\"in_place\":0,\"bytes\":%s,\"count\":%s," \
               "\"time_us\":%s,\"algbw_GBps\":%s,\"busbw_GBps\":%s,\"wrong\":%s}\n",
               jstr(lib), np, jstr(dtype($3)), jstr($4), $1, jnum($2), jnum($5), alg, bus,
               jnum($8)
        next
    }
    kind == "pingpong" && NF >= 5 {
        printf "{\"tool\":\"pingpong\",\"lib\":%s,\"mode\":\"lat\",\"bytes\":%s,\"lat_us\":%s," \
               "\"p50_us\":%s,\"p99_us\":%s,\"MBps\":%s}\n",
               jstr(lib), $1, jnum($2), jnum($3), jnum($4), jnum($5)
    }'
}

# Peers installed and built (run.sh does both), plus our mixed-load program.
ensure_peers() {
    local stale=0
    command -v mpicc.openmpi >/dev/null && command -v mpicc.mpich >/dev/null || stale=1
    [[ $work/mpi_bench_ompi -nt $P/mpi_bench.c && $work/mpi_bench_mpich -nt $P/mpi_bench.c ]] ||
        stale=1
    [[ " $libs " != *" gloo "* ]] || /usr/bin/python3 -c 'import torch' 2>/dev/null || stale=1
    if ((stale)); then
        [[ -x $P/run.sh ]] || { echo "$prog: no peer scripts in $P (set PEERS=dir)" >&2; exit 1; }
        echo "$prog: installing / building the peers with $P/run.sh" >&2
        "$P/run.sh" pingpong 2 8 </dev/null >/dev/null ||
            { echo "$prog: $P/run.sh failed" >&2; exit 1; }
    fi
}

ensure_mixed() {
    local src=$root/bench/peers/mixed_load_mpi.c
    [[ $work/mixed_load_mpi_ompi -nt $src ]] ||
        mpicc.openmpi -O2 -o "$work/mixed_load_mpi_ompi" "$src"
    [[ $work/mixed_load_mpi_mpich -nt $src ]] ||
        mpicc.mpich -O2 -o "$work/mixed_load_mpi_mpich" "$src"
}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-cma}
ompi_flags=(--bind-to core --map-by core) mpich_flags=(-bind-to core)
set_binding() { # run.sh binds a rank per core; Open MPI refuses more ranks than cores so
    if (($1 > $(nproc))); then
        ompi_flags=(--oversubscribe --bind-to none) mpich_flags=()
        echo "$prog: $1 ranks on $(nproc) cores: MPI runs oversubscribed, unbound" >&2
    fi
}
# run LIB CMD...: the command of one peer, under the timeout, no stdin
run_peer() {
    local lib=$1
    shift
    case $lib in
    openmpi) timeout -k 10 "$tmo" mpirun.openmpi "${ompi_flags[@]}" -n "$np" "$@" </dev/null ;;
    mpich) timeout -k 10 "$tmo" mpirun.mpich "${mpich_flags[@]}" -n "$np" "$@" </dev/null ;;
    *) timeout -k 10 "$tmo" "$@" </dev/null ;;
    esac
}

# allreduce_pass LIB START: one run of the peer's allreduce, START, 4 START, ... <= hi
allreduce_pass() {
    case $1 in
    gloo) run_peer gloo /usr/bin/python3 "$P/gloo_bench.py" --nproc "$np" --min "$2" --max "$hi" \
        --port "$port" ;;
    *) run_peer "$1" "$bin" allreduce "$2" "$hi" ;;
    esac
}
# allreduce_all LIB: the peers step sizes by 4; PEERS_FACTOR=2 runs them a
# second time from 2 MIN for every power of two in between
allreduce_all() {
    allreduce_pass "$1" "$lo" || return
    if ((factor == 2 && 2 * lo <= hi)); then allreduce_pass "$1" $((2 * lo)); fi
}

fails=0 written=()
# collect LIB BASE KIND CMD...: runs CMD (a function or a program), keeps its
# output in BASE.txt and converts it to BASE.json
collect() {
    local lib=$1 base=$2 kind=$3 rc=0 rows
    shift 3
    echo "$prog: $lib $kind, $np ranks ..." >&2
    "$@" >"$base.txt" || rc=$?
    case $kind in
    mixed) grep '^{' "$base.txt" >"$base.json" || true ;;
    allreduce) sort -s -n -k1,1 "$base.txt" | convert allreduce "$lib" "$np" >"$base.json" ;;
    *) convert "$kind" "$lib" "$np" "$lo" "$hi" <"$base.txt" >"$base.json" ;;
    esac
    rows=$(wc -l <"$base.json")
    if ((rc)); then
        echo "$prog: $lib $kind failed (exit $rc$( ((rc == 124)) && echo ", timed out after ${tmo}s")), output in $base.txt" >&2
        fails=$((fails + 1))
    elif ((rows == 0)); then
        echo "$prog: $lib $kind printed no result rows, output in $base.txt" >&2
        fails=$((fails + 1))
    fi
    if ((rows == 0)); then rm -f "$base.json"; else written+=("$base.json ($rows rows)"); fi
}

what=${1:-}
case $what in
convert)
    (($# == 4)) || usage "convert wants KIND LIB NPROC"
    [[ $2 == allreduce || $2 == pingpong ]] || usage "convert: allreduce or pingpong, not '$2'"
    [[ $4 =~ ^[0-9]+$ ]] || usage "NPROC '$4' is not a number"
    convert "$2" "$3" "$4"
    exit 0 ;;
allreduce | pingpong)
    (($# == 5)) || usage "$what wants NPROC MIN MAX OUTDIR"
    np=$2 out=$5
    lo=$(to_bytes "$3") || usage "bad MIN '$3'"
    hi=$(to_bytes "$4") || usage "bad MAX '$4'"
    ((lo <= hi)) || usage "MIN $lo > MAX $hi" ;;
mixed)
    (($# == 4)) || usage "mixed wants NPROC PROFILE OUTDIR"
    np=$2 profile=$3 out=$4
    [[ -r $profile ]] || usage "profile '$profile' is not readable"
    profile=$(cd "$(dirname "$profile")" && pwd)/$(basename "$profile")
    pname=$(basename "$profile") pname=${pname%.txt} ;; # as mixed_load names it
*) usage ;;
esac
{ [[ $np =~ ^[0-9]+$ ]] && ((np >= 1)); } || usage "NPROC '$np' is not a positive number"
[[ $what != pingpong ]] || ((np >= 2)) || usage "pingpong needs 2 ranks"
for l in $libs; do
    [[ $l == openmpi || $l == mpich || $l == gloo ]] || usage "PEERS_LIBS: unknown peer '$l'"
done
mkdir -p "$out"
ensure_peers
set_binding "$np"
port=${GLOO_PORT:-29517}
factor=${PEERS_FACTOR:-4}
[[ $factor == 2 || $factor == 4 ]] || usage "PEERS_FACTOR is 2 or 4, not '$factor'"

for lib in $libs; do
    bin=$work/mpi_bench_ompi
    [[ $lib == mpich ]] && bin=$work/mpi_bench_mpich
    case $what:$lib in
    allreduce:*)
        collect "$lib" "$out/allreduce-$lib" allreduce allreduce_all "$lib" ;;
    pingpong:gloo)
        echo "$prog: gloo pingpong skipped: the peers have no gloo pingpong program (gloo_bench.py measures allreduce only)" >&2 ;;
    pingpong:*)
        collect "$lib" "$out/pingpong-$lib" pingpong run_peer "$lib" "$bin" pingpong "$hi" ;;
    mixed:gloo)
        collect gloo "$out/mixed-$pname-gloo" mixed run_peer gloo /usr/bin/python3 \
            "$root/bench/peers/mixed_load_gloo.py" --nproc "$np" -p "$profile" \
            -n "${MIXED_STEPS:-100}" -w "${MIXED_WARMUP:-10}" --port "$((port + 1))" ;;
    mixed:*)
        ensure_mixed
        m=$work/mixed_load_mpi_ompi
        [[ $lib == mpich ]] && m=$work/mixed_load_mpi_mpich
        collect "$lib" "$out/mixed-$pname-$lib" mixed run_peer "$lib" "$m" -p "$profile" \
            -l "$lib" -n "${MIXED_STEPS:-100}" -w "${MIXED_WARMUP:-10}" ;;
    esac
done
for w in "${written[@]}"; do echo "$prog: wrote $w" >&2; done
((${#written[@]})) && echo "$prog: plot: scripts/plot-bench.py $out/*.json -o $what.png --table" >&2
((fails == 0))
