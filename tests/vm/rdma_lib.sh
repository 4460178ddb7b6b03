# shellcheck shell=bash disable=SC2154
# Shared by tests/vm/rdma_test.sh and bench_rdma.sh (sourced, inside the
# guest, after rxe-run.sh brought rxe0 up): ranks launched by hand on "nodes"
# of one host, every command under `timeout`.
#
# Expects $build (the build folder) and $case_ (for messages). Sets $NET
# (HCOMM_VM_NET, default verbs) and $work (a scratch folder, removed at
# exit with every rank still running).
#
#   bin NAME                  the path of a built program (BUILD/bin, ...)
#   launch NODES PPN PROG ARGS...  starts NODES*PPN ranks, rank r on node
#                             r/PPN (HCOMM_NODE_ID=node<r/PPN>), logs in
#                             $work/rR.log; fills pids[] (each a `timeout`
#                             whose child is the rank)
#   wait_all LIMIT [PATTERN]  every rank exits 0 within LIMIT s, else fail;
#                             prints the lines of the logs matching PATTERN
#   rank_pid R                sets rpid, the pid of rank R itself
#   kill_rank R               SIGKILLs rank R, notes the time in $t_kill
#   check_blame R WHAT LIMIT SURVIVORS...  each survivor logged "peer failure
#                             reported" naming WHAT within LIMIT s of the kill
#   fail MSG                  prints MSG and every rank's log tail, exit 1
set -u
NET=${HCOMM_VM_NET:-verbs}
RANK_LIMIT=${HCOMM_VM_RANK_LIMIT:-150}
work=$(mktemp -d /tmp/hcomm-rdma.XXXXXX) || exit 1
pids=() ranks=()

t() { # LIMIT_S COMMAND...: COMMAND under timeout
    local lim=$1
    shift
    timeout -k 5 "$lim" "$@"
}

_rdma_cleanup() {
    local p c
    for p in "${pids[@]}"; do
        for c in $(pgrep -P "$p" 2>/dev/null); do kill -KILL "$c" 2>/dev/null; done
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    rm -rf "$work"
}

# backtraces of the first rank still running (a hang), when gdb is here
dump_hung() {
    local i c
    command -v gdb >/dev/null || return 0
    for i in "${!pids[@]}"; do
        kill -0 "${pids[$i]}" 2>/dev/null || continue
        c=$(pgrep -P "${pids[$i]}" 2>/dev/null | head -1)
        [ -n "$c" ] || continue
        echo "--- rank ${ranks[$i]} (pid $c) is still running; its threads:"
        timeout -k 2 "${HCOMM_VM_GDB_S:-45}" gdb -q -batch -p "$c" -ex "thread apply all bt 12" 2>&1 |
            grep -E "^(Thread|#)|ptrace|rror" | head -50
        return 0
    done
}

log_tails() {
    local f
    for f in "$work"/r*.log; do
        [ -f "$f" ] && tail -n "${1:-25}" "$f" | sed "s/^/[$(basename "$f" .log)] /"
    done
}

fail() {
    echo "FAIL (${case_:-?}, HCOMM_NET=$NET): $*"
    log_tails 25
    exit 1
}

step() { echo "== $* [HCOMM_NET=$NET, ${HCOMM_IB_HCA:+HCOMM_IB_HCA=$HCOMM_IB_HCA, }T+${SECONDS}s]"; }

bin() {
    local d
    for d in "$build/bin" "$build/tests/drv" "$build/tests/coll" "$build/bench" "$build"; do
        [ -x "$d/$1" ] && { echo "$d/$1"; return 0; }
    done
    echo "rdma_lib.sh: $1 not built in $build" >&2
    echo "/nonexistent/$1"
    return 1
}

launch() {
    local nodes=$1 ppn=$2 r
    shift 2
    [ -x "$1" ] || fail "no program $1 (not built?)"
    local size=$((nodes * ppn)) port=$((20000 + RANDOM % 12000)) key
    key=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    rm -f "$work"/r*.log
    pids=() ranks=()
    for ((r = 0; r < size; r++)); do
        env HCOMM_RANK=$r HCOMM_SIZE=$size HCOMM_LOCAL_RANK=$((r % ppn)) HCOMM_LOCAL_SIZE=$ppn \
            HCOMM_NODE_ID="node$((r / ppn))" HCOMM_NET="$NET" \
            HCOMM_BOOTSTRAP="tcp://127.0.0.1:$port" HCOMM_JOB_KEY="$key" \
            HCOMM_TIMEOUT="${HCOMM_TIMEOUT:-60}" HCOMM_LOG="${HCOMM_LOG:-warn}" \
            timeout -k 5 "$RANK_LIMIT" "$@" >"$work/r$r.log" 2>&1 &
        pids+=("$!") ranks+=("$r")
    done
}

wait_all() {
    local limit=${1:-120} pat=${2:-} t0=$SECONDS i rc bad=0
    for i in "${!pids[@]}"; do
        while kill -0 "${pids[$i]}" 2>/dev/null && ((SECONDS - t0 < limit)); do sleep 0.2; done
        if kill -0 "${pids[$i]}" 2>/dev/null; then
            dump_hung
            fail "rank ${ranks[$i]} still running after ${limit} s"
        fi
        wait "${pids[$i]}"
        rc=$?
        case $rc in
        0) ;;
        124 | 137) echo "rank ${ranks[$i]} killed by its timeout (${RANK_LIMIT} s, status $rc)"; bad=1 ;;
        *) echo "rank ${ranks[$i]} exited with status $rc"; bad=1 ;;
        esac
    done
    pids=() ranks=()
    [ $bad = 0 ] || fail "some ranks failed"
    [ -z "$pat" ] || grep -h "$pat" "$work"/r*.log
    echo "-- all ranks passed in $((SECONDS - t0)) s"
}

# shellcheck source=tests/lib/wait_for_log.sh
. "$here/../lib/wait_for_log.sh"

_rank_index() { # R: sets ri, its index in pids[]
    local i
    for i in "${!ranks[@]}"; do [ "${ranks[$i]}" = "$1" ] && { ri=$i; return 0; }; done
    fail "rank $1 is not running"
}

rank_pid() { # R: sets rpid, the pid of rank R itself (the child of its timeout)
    _rank_index "$1"
    rpid=$(pgrep -P "${pids[$ri]}" 2>/dev/null | head -1)
    [ -n "$rpid" ] || fail "rank $1 has no process"
}

kill_rank() {
    local r=$1 j kp=() kr=()
    rank_pid "$r"
    t_kill=$(date +%s.%N)
    kill -KILL "$rpid"
    echo "rank $r (pid $rpid) SIGKILLed"
    wait "${pids[$ri]}" 2>/dev/null
    for j in "${!pids[@]}"; do [ "$j" = "$ri" ] || { kp+=("${pids[$j]}"); kr+=("${ranks[$j]}"); }; done
    pids=("${kp[@]}") ranks=("${kr[@]}")
}

check_blame() {
    local victim=$1 what=$2 lim=$3 r line tt dt
    shift 3
    for r in "$@"; do
        line=$(grep "peer failure reported" "$work/r$r.log") || fail "rank $r reported no failure of rank $victim"
        echo "$line" | grep -qF "$what" || fail "rank $r did not name rank $victim ($what): $line"
        tt=$(echo "$line" | sed -n 's/.*at T=\([0-9.]*\).*/\1/p')
        dt=$(awk -v a="$tt" -v b="$t_kill" 'BEGIN {printf "%.3f", a - b}')
        echo "rank $r: failure seen after ${dt} s: $line"
        awk -v d="$dt" -v l="$lim" 'BEGIN {exit !(d < l)}' || fail "rank $r took ${dt} s to notice (limit $lim s)"
    done
}
