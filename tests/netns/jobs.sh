# jobs.sh: what the netns test scripts share, sourced after they set
# case_, prog and HCN_JOB's prefix letter: the root/netns checks (skip 77),
# a work directory and a cleanup trap, and ranks launched by hand into the
# namespaces of netns.sh as an external launcher would (HCOMM_RANK/SIZE/
# LOCAL_RANK/LOCAL_SIZE, a rendezvous on node 0 at 10.77.0.1, a job key).
#   job_env=(VAR=value ...)   extra environment of every rank (default none)
#   launch NODES PPN args...  starts prog on every rank, fills pids[]
#   wait_log PATTERN [LIMIT_S] [RANKS...]  each rank's log shows PATTERN
#   wait_all [LIMIT_S]        every rank exits 0 within the limit, else fail
#   fail MESSAGE              prints the ranks' logs' tails, exits 1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
netns="$here/netns.sh"

skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
command -v ip >/dev/null || skip "iproute2 (ip) not installed"
export HCN_JOB="${HCN_PREFIX:-t}$$"
probe="hcn-$HCN_JOB-probe"
ip netns add "$probe" 2>/dev/null || skip "cannot create network namespaces (ip netns add failed)"
ip netns del "$probe"

work=$(mktemp -d /tmp/hcn-test.XXXXXX)
pids=()
job_env=(${job_env[@]+"${job_env[@]}"})
cleanup_extra() { :; }
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    "$netns" down
    cleanup_extra
    [ -n "${HCN_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL ($case_): $* (logs: $work)"; for f in "$work"/r*.log; do [ -f "$f" ] && sed "s/^/[$(basename "$f" .log)] /" "$f" | tail -30; done; exit 1; }

launch() {
    local nodes=$1 ppn=$2 r
    shift 2
    # The bootstrap's port, below the kernel's ephemeral ports (32768+): a
    # connection of an earlier job in the namespace could hold one of those
    # (CI saw "cannot listen on 10.77.0.1:46054 ... Address already in use").
    local size=$((nodes * ppn)) port=$((20000 + RANDOM % 12000))
    local key
    key=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    for ((r = 0; r < size; r++)); do
        env HCOMM_RANK=$r HCOMM_SIZE=$size HCOMM_LOCAL_RANK=$((r % ppn)) HCOMM_LOCAL_SIZE=$ppn \
            HCOMM_BOOTSTRAP="tcp://10.77.0.1:$port" HCOMM_JOB_KEY="$key" \
            HCOMM_TIMEOUT="${HCOMM_TIMEOUT:-60}" HCOMM_LOG="${HCOMM_LOG:-warn}" \
            ${job_env[@]+"${job_env[@]}"} \
            "$netns" run $((r / ppn)) "$prog" "$@" >"$work/r$r.log" 2>&1 &
        pids+=($!)
    done
}

# wait_log PATTERN [LIMIT_S] [RANKS...]: every given rank's log (default:
# all launched) has a line matching PATTERN within the limit, else fail.
wait_log() {
    local pat=$1 limit=${2:-60} t0=$SECONDS r
    shift 2 || shift $#
    local ranks=("$@")
    ((${#ranks[@]})) || ranks=($(seq 0 $((${#pids[@]} - 1))))
    for r in "${ranks[@]}"; do
        while ! grep -q "$pat" "$work/r$r.log" 2>/dev/null; do
            ((SECONDS - t0 < limit)) || fail "rank $r: no \"$pat\" after ${limit} s"
            sleep 0.1
        done
    done
}

wait_all() {
    local limit=${1:-120} t0=$SECONDS i rc bad=0
    for i in "${!pids[@]}"; do
        while kill -0 "${pids[$i]}" 2>/dev/null && ((SECONDS - t0 < limit)); do sleep 0.2; done
        if kill -0 "${pids[$i]}" 2>/dev/null; then
            fail "rank $i still running after ${limit} s"
        fi
        wait "${pids[$i]}"
        rc=$?
        [ $rc = 0 ] || { echo "rank $i exited with status $rc"; bad=1; }
    done
    pids=()
    [ $bad = 0 ] || fail "some ranks failed"
}
