#!/usr/bin/env bash
# Tests of the hcommrun launcher against hcommrun_probe.
#   test_hcommrun.sh HCOMMRUN PROBE CASE
# CASE: env bind exit signal timeout sigterm stop pdeathsig tag usage skip
set -euo pipefail

HR=$1
PROBE=$2
CASE=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/hcommrun_test.XXXXXX")
BG=""

cleanup() {
    if [[ -n $BG ]]; then kill -9 "$BG" 2>/dev/null || true; fi
    # Ranks or grandchildren a failed test may have left behind.
    for f in "$T"/pid.* "$T"/gc.*; do
        if [[ -f $f ]]; then kill -9 "$(cat "$f")" 2>/dev/null || true; fi
    done
    rm -rf "$T"
}
trap cleanup EXIT

fail() {
    echo "FAIL ($CASE): $*" >&2
    for f in "$T"/out "$T"/err; do
        [[ -f $f ]] && { echo "--- $f:"; head -c 4000 "$f"; } >&2
    done
    exit 1
}

now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }

# run EXPECTED_RC ARGS...: runs hcommrun, stdout/stderr to $T/out, $T/err,
# checks the exit status, sets ELAPSED_MS.
run() {
    local want=$1 rc=0 t0
    shift
    t0=$(now_ms)
    "$HR" "$@" >"$T/out" 2>"$T/err" || rc=$?
    ELAPSED_MS=$(($(now_ms) - t0))
    [[ $rc == "$want" ]] || fail "hcommrun $* exited $rc, expected $want"
}

expect_err() { grep -Eq -- "$1" "$T/err" || fail "stderr lacks /$1/"; }

# A process is gone once it no longer exists or is a zombie.
alive() {
    local st
    st=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
    [[ -n $st && $st != Z ]]
}

wait_files() { # wait_files PATTERN COUNT TIMEOUT_S
    local i
    for ((i = 0; i < $3 * 20; i++)); do
        # shellcheck disable=SC2086
        [[ $(ls $1 2>/dev/null | grep -vc '\.tmp$') -ge $2 ]] && return 0
        sleep 0.05
    done
    fail "only $(ls $1 2>/dev/null | wc -l) of $2 files $1 appeared"
}

case_env() {
    HCOMM_BOOTSTRAP=tcp://10.0.0.1:1 HCOMM_JOB_KEY=stale HCOMM_RANK=7 \
        run 0 -n 4 --env HCR_TEST_VAR=hello "$PROBE" env "$T"
    local r
    for r in 0 1 2 3; do
        [[ -f $T/env.$r ]] || fail "rank $r wrote no env file"
    done
    # All fields but the rank agree; the rank is the file's suffix.
    for r in 0 1 2 3; do
        read -r rank size lrank lsize bs key extra <"$T/env.$r"
        [[ $rank == "$r" && $lrank == "$r" && $size == 4 && $lsize == 4 ]] ||
            fail "rank $r: bad rank fields: $(cat "$T/env.$r")"
        [[ $bs =~ ^tcp://127\.0\.0\.1:[0-9]+$ ]] || fail "bad bootstrap $bs"
        [[ $key =~ ^[0-9a-f]{32}$ ]] || fail "bad job key $key"
        [[ $extra == hello ]] || fail "--env not applied: $extra"
        [[ $r == 0 ]] && { bs0=$bs key0=$key; }
        [[ $bs == "$bs0" && $key == "$key0" ]] || fail "rank $r: bootstrap/key differ from rank 0"
    done
    # A second job gets a fresh key.
    rm -f "$T"/env.*
    run 0 -n 1 "$PROBE" env "$T"
    read -r _ _ _ _ _ key _ <"$T/env.0"
    [[ $key != "$key0" ]] || fail "two jobs got the same key $key"
}

case_bind() {
    "$PROBE" affinity "$T"
    read -r -a self <"$T/aff.self"
    local k=${self[0]} allowed="${self[*]:1}" n r
    n=$((k + 1))
    # core: one CPU each, distinct until the CPUs run out, then wrapping.
    run 0 -n $n --bind core "$PROBE" affinity "$T"
    declare -A seen=()
    for ((r = 0; r < n; r++)); do
        read -r -a a <"$T/aff.$r"
        [[ ${a[0]} == 1 ]] || fail "--bind core: rank $r has ${a[0]} CPUs: ${a[*]:1}"
        [[ " $allowed " == *" ${a[1]} "* ]] || fail "rank $r on CPU ${a[1]}, not in '$allowed'"
        cpu[r]=${a[1]}
        if ((r < k)); then
            [[ -z ${seen[${a[1]}]:-} ]] || fail "ranks ${seen[${a[1]}]} and $r share CPU ${a[1]}"
            seen[${a[1]}]=$r
        fi
    done
    [[ ${cpu[k]} == "${cpu[0]}" ]] || fail "rank $k should wrap to rank 0's CPU ${cpu[0]}"
    # none: the launcher's own mask.
    run 0 -n 2 --bind none "$PROBE" affinity "$T"
    for r in 0 1; do
        [[ $(cut -d' ' -f2- "$T/aff.$r") == "$allowed" ]] || fail "--bind none changed the mask"
    done
    # numa: all allowed CPUs of a node.
    local nodes
    nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
    run 0 -n 2 --bind numa "$PROBE" affinity "$T"
    for r in 0 1; do
        local got
        got=$(cut -d' ' -f2- "$T/aff.$r")
        if ((nodes <= 1)); then
            [[ $got == "$allowed" ]] || fail "--bind numa, one node: rank $r got '$got'"
        else
            for c in $got; do [[ " $allowed " == *" $c "* ]] || fail "numa: CPU $c not allowed"; done
        fi
    done
    # The launcher's own affinity limits the choice.
    if command -v taskset >/dev/null && ((k >= 2)); then
        local last=${self[k]}
        rm -f "$T"/aff.[0-9]*
        local rc=0
        taskset -c "$last" "$HR" -n 2 "$PROBE" affinity "$T" >"$T/out" 2>"$T/err" || rc=$?
        [[ $rc == 0 ]] || fail "taskset run exited $rc"
        for r in 0 1; do
            [[ $(cat "$T/aff.$r") == "1 $last" ]] || fail "under taskset -c $last: $(cat "$T/aff.$r")"
        done
    fi
}

case_exit() {
    run 3 -n 3 "$PROBE" fail 1 3
    expect_err '^hcommrun: rank 1 \(pid [0-9]+\) exited with status 3$'
    ((ELAPSED_MS < 8000)) || fail "other ranks not terminated (took $ELAPSED_MS ms)"
    [[ $(grep -c 'hcommrun: rank' "$T/err") == 1 ]] || fail "expected one failure line"
    run 0 -n 3 "$PROBE" codes 0
}

case_signal() {
    run 137 -n 3 "$PROBE" kill 2 9
    expect_err '^hcommrun: rank 2 \(pid [0-9]+\) killed by signal 9 \(Killed\)$'
    ((ELAPSED_MS < 8000)) || fail "other ranks not terminated (took $ELAPSED_MS ms)"
    run 134 -n 2 "$PROBE" kill 0 6
    expect_err 'rank 0 \(pid [0-9]+\) killed by signal 6'
}

case_timeout() {
    run 124 -n 2 --timeout 1 "$PROBE" spawn "$T"
    expect_err '^hcommrun: timeout after 1 s, killing 2 ranks$'
    ((ELAPSED_MS < 5000)) || fail "timeout took $ELAPSED_MS ms"
    sleep 0.2
    for f in "$T"/gc.*; do
        ! alive "$(cat "$f")" || fail "grandchild $(cat "$f") of a rank survived the timeout"
    done
    # Ranks that ignore SIGTERM get SIGKILL 3 s later: within timeout + 4 s.
    run 124 -n 2 --timeout 1 "$PROBE" trap "$T" ignore
    ((ELAPSED_MS >= 3900 && ELAPSED_MS < 6500)) || fail "escalation took $ELAPSED_MS ms"
    expect_err 'sending SIGKILL'
    [[ $(cat "$T/sig.0") == 15 && $(cat "$T/sig.1") == 15 ]] || fail "ranks did not see SIGTERM"
}

case_sigterm() {
    local sig rc want
    for sig in TERM INT; do
        rm -f "$T"/pid.* "$T"/sig.*
        "$HR" -n 3 "$PROBE" trap "$T" >"$T/out" 2>"$T/err" &
        BG=$!
        wait_files "$T/pid.*" 3 5
        kill -s $sig "$BG"
        rc=0
        wait "$BG" || rc=$?
        BG=""
        want=$((128 + $(kill -l $sig)))
        [[ $rc == "$want" ]] || fail "SIG$sig: hcommrun exited $rc, expected $want"
        for r in 0 1 2; do
            [[ -f $T/sig.$r && $(cat "$T/sig.$r") == "$(kill -l $sig)" ]] ||
                fail "SIG$sig did not reach rank $r"
        done
        expect_err "got SIG$sig, forwarding it to 3 ranks"
    done
}

state() { awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo gone; }

wait_state() { # wait_state PID STATE
    local i
    for ((i = 0; i < 40; i++)); do
        [[ $(state "$1") == "$2" ]] && return 0
        sleep 0.05
    done
    fail "process $1 is in state $(state "$1"), expected $2"
}

case_stop() {
    "$HR" -n 2 "$PROBE" trap "$T" >"$T/out" 2>"$T/err" &
    BG=$!
    wait_files "$T/pid.*" 2 5
    kill -TSTP "$BG"
    wait_state "$BG" T
    wait_state "$(cat "$T/pid.0")" T
    wait_state "$(cat "$T/pid.1")" T
    kill -CONT "$BG"
    wait_state "$(cat "$T/pid.0")" S
    wait_state "$(cat "$T/pid.1")" S
    kill -TERM "$BG"
    local rc=0
    wait "$BG" || rc=$?
    BG=""
    [[ $rc == 143 ]] || fail "after stop/continue/TERM: exit $rc"
}

case_pdeathsig() {
    "$HR" -n 2 "$PROBE" trap "$T" >"$T/out" 2>"$T/err" &
    BG=$!
    wait_files "$T/pid.*" 2 5
    kill -9 "$BG"
    wait "$BG" 2>/dev/null || true
    BG=""
    local i r
    for ((i = 0; i < 40; i++)); do
        alive "$(cat "$T/pid.0")" || alive "$(cat "$T/pid.1")" || return 0
        sleep 0.05
    done
    fail "ranks outlived a SIGKILLed hcommrun"
}

case_tag() {
    run 0 -n 2 --tag-output "$PROBE" print 3
    local r k
    for r in 0 1; do
        for k in 0 1 2; do
            grep -qx "\[$r\] line $k of rank $r" "$T/out" || fail "stdout lacks rank $r line $k"
            grep -qx "\[$r\] err $k of rank $r" "$T/err" || fail "stderr lacks rank $r line $k"
        done
        grep -qx "\[$r\] tail of rank $r" "$T/out" || fail "partial line of rank $r lost"
    done
    [[ $(wc -l <"$T/out") == 8 && $(wc -l <"$T/err") == 6 ]] || fail "wrong line counts"
    ! grep -qv '^\[[01]\] ' "$T/out" "$T/err" || fail "an untagged line"
    # Without the option the output is untouched.
    run 0 -n 1 "$PROBE" print 1
    grep -qx "line 0 of rank 0" "$T/out" || fail "untagged output changed"
    # A line beyond the 64 KiB limit is cut there, both parts tagged.
    run 0 -n 1 --tag-output "$PROBE" longline 70000
    [[ $(wc -l <"$T/out") == 2 ]] || fail "long line: $(wc -l <"$T/out") lines"
    [[ $(head -1 "$T/out" | wc -c) == $((65536 + 5)) ]] || fail "long line cut at the wrong place"
    ! grep -qv '^\[0\] ' "$T/out" || fail "long line: untagged part"
}

case_usage() {
    run 2
    expect_err 'missing -n'
    run 2 -n 0 true
    expect_err 'number of ranks must be an integer in \[1, 4096\]'
    run 2 -n 4097 true
    run 2 -n abc true
    run 2 -n 2
    expect_err 'missing the program'
    run 2 -n 2 --frobnicate true
    expect_err "unknown option '--frobnicate'"
    run 2 -n 2 --bind socket true
    expect_err '--bind: expected core, numa or none'
    run 2 -n 2 --timeout -1 true
    expect_err '--timeout: expected a positive number'
    run 2 -n 2 --env NOEQUALS true
    expect_err '--env: expected VAR=VALUE'
    run 2 -n 2 --env HCOMM_RANK=3 true
    expect_err 'HCOMM_RANK=3.*set by hcommrun'
    run 2 -n 2 "$T/does-not-exist"
    expect_err "cannot execute '.*does-not-exist': No such file"
    printf '#!/bin/sh\nexit 0\n' >"$T/noexec"
    chmod 644 "$T/noexec"
    run 2 -n 2 "$T/noexec"
    expect_err 'Permission denied'
    run 0 --help
    grep -q '^usage: hcommrun -n N' "$T/out" || fail "--help prints no usage"
    run 0 -n2 --timeout=5 --bind=none -- "$PROBE" codes 0
}

case_skip() {
    run 77 -n 2 "$PROBE" codes 77 77
    run 77 -n 3 "$PROBE" codes 77 0
    run 1 -n 2 "$PROBE" codes 0 77
    expect_err 'rank 1 \(pid [0-9]+\) exited with status 77 \(skip\) but rank 0 did not skip'
    run 5 -n 3 "$PROBE" codes 77 5 0
}

"case_$CASE"
echo "ok: hcommrun $CASE"
