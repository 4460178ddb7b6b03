#!/bin/bash
# Fault tests that hcommrun cannot express (it terminates the surviving
# ranks as soon as one dies, and always picks its own rendezvous address):
# the ranks are launched by hand, as an external launcher would
# (docs/hcommrun.md, "Running without hcommrun"), and each rank's output and
# exit status are checked separately.
#
#   mp_fault.sh CASE HCOMMRUN BINDIR
#
# CASE:
#   killed        3 ranks, rank 2 SIGKILLs itself; 0 and 1 get PEER_FAILED
#   killed_root   3 ranks, rank 0 (the rendezvous root) dies instead
#   killed_hcommrun  the same job under hcommrun: exit 137, the rank named
#   coll_killed   4 ranks, rank 3 dies inside non-blocking collectives
#   any_killed    3 ranks, rank 2 dies while 0 and 1 wait in a receive from
#                 any source (HCOMM_ANY_SOURCE)
#   node_map      2 ranks that both say HCOMM_LOCAL_RANK=0: init fails at
#                 once on both, naming the variable, logged once per rank
#   group_killed  3 ranks, rank 1 dies before a group, between its calls and
#                 right before hcomm_group_end (three jobs)
#   garbage       2 ranks; junk, wrong job keys, truncated and silent
#                 connections hit rank 0's rendezvous port before rank 1 joins
#   garbage_flood as garbage, plus more silent connections than rank 0 keeps
#                 waiting for a hello
#   misconfig_size 3 ranks, rank 2 says HCOMM_SIZE=4: every rank's hcomm_init
#                 fails within 10 s (HCOMM_TIMEOUT=60), the refused rank naming
#                 the cause, the others the cause and the rank; each rank logs
#                 its failure once, at error level, as hcomm_last_error() says it
#   misconfig_rank the same, two processes say HCOMM_RANK=1
#   misconfig_key the same, rank 2 has another HCOMM_JOB_KEY
#   region_leak   (not a fault) 40 comm_split/comm_free cycles on 4 ranks
#                 under HCOMM_LOG=info: every communicator must still get a
#                 node-shared region (freed communicators give theirs back),
#                 not fall back to p2p algorithms
set -u
CASE=$1
HCOMMRUN=$2
BINDIR=$3
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
FAILED=0

fail() {
    echo "mp_fault $CASE: FAIL: $*" >&2
    FAILED=1
}

# A free loopback port: hcommrun picks one for its own job; we borrow it.
pick_port() {
    local bs
    bs=$("$HCOMMRUN" -n 1 sh -c 'echo $HCOMM_BOOTSTRAP') || return 1
    echo "${bs##*:}"
}

PORT=$(pick_port) || { echo "mp_fault: cannot pick a port" >&2; exit 1; }
KEY=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')

# launch NP PROG ARGS...: rank r's output in $TMP/out.r, pid in PIDS[r].
# RANK_ENV_r (if set) adds "VAR=VALUE" to rank r's environment.
declare -a PIDS
launch() {
    local np=$1
    shift
    for ((r = 0; r < np; r++)); do
        local extra_var="RANK_ENV_$r"
        env HCOMM_RANK=$r HCOMM_SIZE=$np HCOMM_LOCAL_RANK=$r HCOMM_LOCAL_SIZE=$np \
            HCOMM_BOOTSTRAP=tcp://127.0.0.1:$PORT HCOMM_JOB_KEY=$KEY HCOMM_TIMEOUT=60 \
            ${!extra_var:-} timeout -k 5 90 "$@" >"$TMP/out.$r" 2>&1 &
        PIDS[$r]=$!
    done
}

# collect NP: exit status of rank r in RC[r].
declare -a RC
collect() {
    for ((r = 0; r < $1; r++)); do
        wait "${PIDS[$r]}"
        RC[$r]=$?
    done
}

show() {
    for f in "$TMP"/out.*; do
        sed "s/^/[${f##*.}] /" "$f"
    done
}

# survivors_failed VICTIM NP CHECKS...: every rank but VICTIM exited 0 and
# printed a PEER_FAILED line for every operation named in CHECKS; VICTIM was
# killed by SIGKILL.
check_killed() {
    local victim=$1 np=$2
    shift 2
    for ((r = 0; r < np; r++)); do
        if ((r == victim)); then
            ((RC[r] == 137)) || fail "rank $r (victim) expected exit 137 (SIGKILL) got ${RC[r]}"
            continue
        fi
        ((RC[r] == 0)) || fail "rank $r expected exit 0 got ${RC[r]}"
        for what in "$@"; do
            grep -q "^rank $r: got PEER_FAILED naming rank $victim after .* s ($what)" \
                "$TMP/out.$r" ||
                fail "rank $r: expected \"rank $r: got PEER_FAILED naming rank $victim after X s ($what)\""
        done
    done
}

case $CASE in
killed | killed_root)
    victim=2
    [ "$CASE" = killed_root ] && victim=0
    launch 3 "$BINDIR/mp_killed" $victim
    collect 3
    check_killed $victim 3 hcomm_recv hcomm_allreduce hcomm_send "hcomm_irecv+wait"
    ;;
killed_hcommrun)
    HCOMM_TIMEOUT=60 "$HCOMMRUN" -n 3 --timeout 60 "$BINDIR/mp_killed" >"$TMP/out.all" 2>&1
    rc=$?
    ((rc == 137)) || fail "hcommrun expected exit 137 (rank killed by SIGKILL) got $rc"
    grep -q "hcommrun: rank 2 (pid [0-9]*) killed by signal 9" "$TMP/out.all" ||
        fail "hcommrun expected to report \"rank 2 (pid N) killed by signal 9\""
    ;;
any_killed)
    launch 3 "$BINDIR/mp_p2p" --any-kill
    collect 3
    check_killed 2 3 hcomm_recv_any
    ;;
coll_killed)
    launch 4 "$BINDIR/mp_coll_async" --kill 3
    collect 4
    check_killed 3 4 "hcomm_iallreduce" "hcomm_ibroadcast" "hcomm_allreduce after"
    ;;
node_map)
    RANK_ENV_1="HCOMM_LOCAL_RANK=0"
    t0=$SECONDS
    launch 2 "$BINDIR/mp_coll_group_fault" --deferred
    collect 2
    for r in 0 1; do
        ((RC[r] != 0)) || fail "rank $r expected hcomm_init to fail"
        grep -q "both say local rank 0 (HCOMM_LOCAL_RANK" "$TMP/out.$r" ||
            fail "rank $r expected \"both say local rank 0 (HCOMM_LOCAL_RANK\""
        # a program that only checks the status still shows its user why:
        # hcomm logs the failure once, at error level, as hcomm_last_error()
        n=$(grep -c '^\[hcomm r[0-9]*\] error: .*both say local rank 0 (HCOMM_LOCAL_RANK' "$TMP/out.$r")
        ((n == 1)) || fail "rank $r expected its failure logged once at error level, got $n"
    done
    ((SECONDS - t0 < 10)) || fail "expected the failure within 10 s took $((SECONDS - t0)) s"
    ;;
group_killed)
    for where in start between end; do
        launch 3 "$BINDIR/mp_coll_group_fault" --kill $where
        collect 3
        check_killed 1 3 "group $where"
        for r in 0 2; do mv "$TMP/out.$r" "$TMP/out.$r.$where"; done
        rm -f "$TMP/out.1"
    done
    ;;
garbage | garbage_flood)
    # rank 1 joins 3 s late (flood: once the flood is in place), so rank 0
    # sits in the rendezvous meanwhile.
    RANK_ENV_1="MP_INIT_DELAY_MS=3000"
    [ "$CASE" = garbage_flood ] && RANK_ENV_1="MP_INIT_WAIT_FILE=$TMP/flood_ready"
    launch 2 "$BINDIR/mp_bootstrap_garbage"
    t0=$SECONDS
    connect() { # connect FD: retry until rank 0 listens
        local i
        for ((i = 0; i < 50; i++)); do
            eval "exec $1<>/dev/tcp/127.0.0.1/$PORT" 2>/dev/null && return 0
            sleep 0.05
        done
        return 1
    }
    connect 9 || fail "cannot connect to rank 0's rendezvous port $PORT"
    exec 9>&-
    # The hellos below are bootstrap protocol 1's, which sent the key in the
    # clear: rank 0 (protocol 2) answers each "protocol mismatch" and drops it.
    le32() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $((($1 >> 8) & 255)))\\x$(printf %02x $((($1 >> 16) & 255)))\\x$(printf %02x $((($1 >> 24) & 255)))"; }
    # hello header: magic "hcmb", version 1, type HELLO, rank, size, key_len, payload_len (u64)
    hello() { le32 0x68636d62; le32 1; le32 1; le32 $1; le32 $2; le32 $3; le32 $4; le32 0; }
    (
        # 1. random junk
        connect 3 && head -c 4096 /dev/urandom >&3; exec 3>&-
        # 2. a well-formed hello with a wrong job key, as rank 1
        connect 3 && { hello 1 2 32 0; printf '%032d' 7; } >&3; sleep 0.2; exec 3>&-
        # 2b. the same with a payload as long as a real hello's today (372
        # bytes), so that the key itself is what gets it rejected
        connect 3 && { hello 1 2 32 372; printf '%032d' 7; head -c 372 /dev/zero; } >&3
        sleep 0.2; exec 3>&-
        # 3. the right key's length, a wrong key, an out-of-range rank
        connect 3 && { hello 5 2 32 0; printf '%032d' 0; } >&3; exec 3>&-
        # 4. a size that disagrees with the job
        connect 3 && { hello 1 1000 32 0; printf '%s' "$KEY"; } >&3; exec 3>&-
        # 5. connect and close at once
        connect 3 && exec 3>&-
        # 6. only half a header
        connect 3 && { le32 0x68636d62; le32 1; } >&3; exec 3>&-
        # 7. an empty key
        connect 3 && hello 1 2 0 0 >&3; exec 3>&-
    ) &
    garbage_pid=$!
    # 8. a header announcing 1 MiB of payload, then silence, held open
    ( connect 4 && hello 1 2 127 1048576 >&4 && exec sleep 12 ) &
    # 9. silent connections held open through the whole job, opened from one
    # shell (fast: no fork each); the flood opens more than rank 0 keeps
    # waiting for a hello (size - 1 + 64). Rank 1 joins once the garbage
    # above is sent and the flood is in place (rank 0 stops listening then).
    nsilent=3
    [ "$CASE" = garbage_flood ] && nsilent=80
    (
        for ((i = 0; i < nsilent; i++)); do
            exec {fd}<>/dev/tcp/127.0.0.1/$PORT || exit 1
        done
        touch "$TMP/silent_open"
        exec sleep 12
    ) &
    wait $garbage_pid
    for ((i = 0; i < 200; i++)); do
        [ -e "$TMP/silent_open" ] && break
        sleep 0.05
    done
    touch "$TMP/flood_ready"
    collect 2
    if [ "$CASE" = garbage_flood ]; then
        # the flood filled rank 0's list, and what it dropped was the waiting
        # clients, never rank 1
        grep -q "connections waiting to say hello: dropping the longest-waiting first" "$TMP/out.0" ||
            fail "rank 0 expected to drop its longest-waiting connection when the flood filled its list"
    fi
    for r in 0 1; do
        ((RC[r] == 0)) || fail "rank $r expected exit 0 got ${RC[r]}"
        grep -q "^rank $r: job ok" "$TMP/out.$r" || fail "rank $r expected \"rank $r: job ok\""
    done
    ((SECONDS - t0 < 30)) || fail "job expected to finish within 30 s took $((SECONDS - t0)) s"
    ;;
misconfig_size | misconfig_rank | misconfig_key)
    case $CASE in
    misconfig_size)
        RANK_ENV_2="HCOMM_SIZE=4"
        why="job size mismatch: rank 2 says the job has 4 ranks, rank 0 says 3"
        refused="rank 0 refused this rank (2): $why"
        ;;
    misconfig_rank)
        RANK_ENV_2="HCOMM_RANK=1"
        why="duplicate rank 1: two processes say they are rank 1"
        refused="rank 0 refused this rank (1): $why"
        ;;
    misconfig_key)
        RANK_ENV_2="HCOMM_JOB_KEY=not-the-job-key"
        why="job key mismatch: rank 2 (a process of this user on this host"
        refused="job key mismatch: rank 0 at 127.0.0.1:$PORT proved a job key other than this rank's HCOMM_JOB_KEY (rank 2)"
        ;;
    esac
    t0=$SECONDS
    launch 3 "$BINDIR/mp_bootstrap_garbage"
    collect 3
    ((SECONDS - t0 < 10)) || fail "expected every rank to fail within 10 s, took $((SECONDS - t0)) s"
    grep -qF "$refused" "$TMP"/out.[12] || fail "no rank says \"$refused\""
    grep -qF "hc_bootstrap_open: $why" "$TMP/out.0" || fail "rank 0 expected \"$why\""
    for r in 0 1 2; do
        ((RC[r] != 0)) || fail "rank $r expected hcomm_init to fail"
        # the refused rank names the cause; the others the cause and the rank
        grep -qF "$refused" "$TMP/out.$r" || grep -qF "$why" "$TMP/out.$r" ||
            fail "rank $r expected \"$why\""
        # logged once, at error level, with exactly hcomm_last_error()'s text
        n=$(grep -c '^\[hcomm r[0-9]*\] error: ' "$TMP/out.$r")
        ((n == 1)) || fail "rank $r expected its failure logged once at error level, got $n"
        text=$(sed -n 's/^\[hcomm r[0-9]*\] error: //p' "$TMP/out.$r")
        grep -qF "expected OK got ERR_BOOTSTRAP ($text)" "$TMP/out.$r" ||
            fail "rank $r: the logged error is not hcomm_last_error()'s text"
    done
    ;;
region_leak)
    HCOMM_LOG=info HCOMM_TIMEOUT=60 "$HCOMMRUN" -n 4 --timeout 100 "$BINDIR/mp_coll_async" \
        --cycles-only >"$TMP/out.all" 2>&1
    rc=$?
    ((rc == 0)) || fail "hcommrun expected exit 0 got $rc"
    n=$(grep -c "no node-shared region" "$TMP/out.all")
    ((n == 0)) || fail "expected every communicator to get a node-shared region, $n fell back to p2p (\"$(grep -m1 "no node-shared region" "$TMP/out.all")\")"
    ;;
*)
    echo "usage: mp_fault.sh killed|killed_root|killed_hcommrun|coll_killed|group_killed|node_map|garbage|garbage_flood|misconfig_size|misconfig_rank|misconfig_key|region_leak HCOMMRUN BINDIR" >&2
    exit 2
    ;;
esac

if ((FAILED)); then
    echo "--- rank output ---" >&2
    show >&2
    exit 1
fi
show
echo "mp_fault $CASE: passed"
exit 0
