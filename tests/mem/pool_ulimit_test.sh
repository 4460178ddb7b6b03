#!/bin/bash
# Under an address-space limit (`ulimit -v`) too small for the pool's
# reservation, hcomm_init must fail with a message that names the limit
# (RLIMIT_AS and its value), the size it was reserving and
# HCOMM_MEM_POOL_MAX_SIZE with a value to set; set as told, init must then
# succeed under the same limit. (The message used to be "reserving N bytes
# of address space for the pool: Cannot allocate memory", naming neither.)
#
#   pool_ulimit_test.sh HCOMMRUN PROG     PROG: a one-rank program that calls
#                                         hcomm_init and prints last_error
#                                         when it fails (mp_badinput)
set -u
run=$1 prog=$2
fails=0

fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# $1: limit in kB; the rest: VAR=VALUE settings. Prints the job's output.
under_limit() {
    local kb=$1
    shift
    (ulimit -v "$kb" && exec env "$@" "$run" -n 1 --timeout 60 "$prog") 2>&1
}

# $1: limit in kB. The default pool (HCOMM_MEM_POOL_MAX_SIZE=512M) does not
# fit; the message must say why and what to set.
check_limit() {
    local kb=$1 bytes=$(($1 * 1024))
    local out
    out=$(under_limit "$kb" HCOMM_MEM_POOL_MAX_SIZE=512M HCOMM_MEM_POOL_INITIAL_SIZE=64M)
    local msg
    msg=$(grep -o 'hc_mem_init: reserving.*' <<<"$out" | head -1)
    if [ -z "$msg" ]; then
        fail "ulimit -v $kb: expected hcomm_init to fail reserving the pool, got: $out"
        return
    fi
    echo "ulimit -v $kb: $msg"
    grep -q "RLIMIT_AS (ulimit -v) is $bytes bytes" <<<"$msg" ||
        fail "ulimit -v $kb: the message does not name RLIMIT_AS = $bytes bytes"
    grep -Eq "reserving [0-9]+ bytes of address space for the pool" <<<"$msg" ||
        fail "ulimit -v $kb: the message does not name the size being reserved"
    local want
    want=$(grep -Eo 'set HCOMM_MEM_POOL_MAX_SIZE=[0-9]+M' <<<"$msg" | cut -d= -f2)
    if [ -z "$want" ]; then
        fail "ulimit -v $kb: the message does not say what to set HCOMM_MEM_POOL_MAX_SIZE to"
        return
    fi
    local init=64M
    if grep -q "HCOMM_MEM_POOL_INITIAL_SIZE to at most as much" <<<"$msg"; then
        init=$want
    fi
    # As told: init now succeeds under the same limit.
    out=$(under_limit "$kb" HCOMM_MEM_POOL_MAX_SIZE="$want" HCOMM_MEM_POOL_INITIAL_SIZE="$init")
    if ! grep -q "passed" <<<"$out"; then
        fail "ulimit -v $kb with HCOMM_MEM_POOL_MAX_SIZE=$want HCOMM_MEM_POOL_INITIAL_SIZE=$init:" \
            "expected the program to pass, got: $(tail -3 <<<"$out")"
    else
        echo "ulimit -v $kb: passes with HCOMM_MEM_POOL_MAX_SIZE=$want" \
            "HCOMM_MEM_POOL_INITIAL_SIZE=$init"
    fi
}

check_limit 400000 # room for a smaller pool than the default
check_limit 70000  # room for less than the default initial 64M too

if [ "$fails" -ne 0 ]; then
    echo "pool_ulimit_test: $fails failures"
    exit 1
fi
echo "pool_ulimit_test: passed"
