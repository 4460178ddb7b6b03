#!/bin/bash
# shrink_test.sh HCOMMRUN BINDIR RUNS [NET]: survivors shrink and go on
# (tests/core/mp_shrink.c). 2 fake nodes x 2 ranks (shm inside a node, NET
# between: tcp, or mlx5 on the model of the queues), each case RUNS times
# with other seeds:
#   one      a rank dies mid-step (each rank in turn): the 3 survivors agree
#            on {the other 3} and finish every step with exact sums
#   during   a rank dies mid-step, then a second one during the shrink
#            itself: rank 0 (which coordinates the agreement) after 3, 2 or
#            1, or rank 2 after 3: the 2 survivors agree
# Over mlx5 (as over verbs) two ranks that never talked connect through a
# handshake relayed by rank 0's bootstrap: with rank 0 dead, ranks 1 and 2
# (one on each fake node, not rail partners) cannot connect, so the cases
# that need that pair are left out there (docs/faults.md says so).
# Checks: the victims died by SIGKILL, every survivor exited 0 (its sums
# and member lists held), printed the same member list and "finished".
set -u
HCOMMRUN=$1 BINDIR=$2 RUNS=${3:-1} NET=${4:-tcp}
TMP=$(mktemp -d)
[[ -n ${KEEP:-} ]] && echo "shrink_test: outputs in $TMP"
trap 'kill $(jobs -p) 2>/dev/null; [[ -n ${KEEP:-} ]] || rm -rf "$TMP"' EXIT
bad=0
fail() { echo "shrink_test: FAIL: $*"; bad=1; }
netenv=(HCOMM_NET=tcp)
[[ $NET == mlx5 ]] && netenv=(HCOMM_NET=mlx5 HCOMM_MLX5_MODEL=1)

# run WHAT SEED VICTIM [SECOND]: expects the survivors to agree on one list.
run() {
    local what=$1 seed=$2 victim=$3 second=${4:--1} port key r bs
    bs=$("$HCOMMRUN" -n 1 sh -c 'echo $HCOMM_BOOTSTRAP') || { fail "no port"; return; }
    port=${bs##*:}
    key=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    local -a pids rcs
    for r in 0 1 2 3; do
        env HCOMM_RANK=$r HCOMM_SIZE=4 HCOMM_NODE_ID=node$((r / 2)) HCOMM_LOCAL_RANK=$((r % 2)) \
            HCOMM_LOCAL_SIZE=2 HCOMM_BOOTSTRAP=tcp://127.0.0.1:$port HCOMM_JOB_KEY=$key \
            HCOMM_TIMEOUT=60 HCOMM_TOPO_CACHE=none "${netenv[@]}" \
            timeout -k 5 120 "$BINDIR/mp_shrink" "$victim" --second "$second" --seed "$seed" \
            >"$TMP/out.$r" 2>&1 &
        pids[r]=$!
    done
    for r in 0 1 2 3; do
        wait "${pids[r]}" 2>/dev/null
        rcs[r]=$?
    done
    local want="" lists
    for r in 0 1 2 3; do
        ((r == victim || r == second)) || want+="${want:+,}$r"
    done
    for r in 0 1 2 3; do
        if ((r == victim || r == second)); then
            ((rcs[r] == 137)) || fail "$what seed $seed: rank $r (victim) exit ${rcs[r]}, not 137"
            continue
        fi
        # the program's own failure lines first (its progress lines and the
        # library's warnings come after them and would hide them), then the end
        ((rcs[r] == 0)) || fail "$what seed $seed: rank $r exit ${rcs[r]}: $(grep -v -e RLIMIT \
            -e '^\[hcomm' -e 'shrunk to' -e 'finished ' -e 'returned before' "$TMP/out.$r" |
            head -3) ... $(grep -v RLIMIT "$TMP/out.$r" | tail -4)"
        grep -q "^rank $r: finished" "$TMP/out.$r" || fail "$what seed $seed: rank $r did not finish"
        lists=$(sed -n "s/^rank $r: shrunk to [0-9]* members {\(.*\)} after.*/\1/p" "$TMP/out.$r" | tail -1)
        [[ $lists == "$want" ]] || fail "$what seed $seed: rank $r ended with members {$lists}, expected {$want}"
    done
    grep -h "shrunk to" "$TMP"/out.* | sed 's/.* after \([0-9.]*\) s/\1/' >>"$TMP/times"
    if ((second >= 0)); then
        grep -q "returned before the timer" "$TMP/out.$second" && echo after >>"$TMP/second" ||
            echo during >>"$TMP/second"
    fi
}

ones="0 1 2 3" durings="3:0 2:0 1:0 3:2"
if [[ $NET == mlx5 ]]; then
    ones="1 2 3" durings="2:0 1:0 3:2"
fi
njobs=0 ndur=0
for ((i = 1; i <= RUNS; i++)); do
    for v in $ones; do
        run one "$i" "$v"
        njobs=$((njobs + 1))
    done
    for d in $durings; do
        run during "$i" "${d%:*}" "${d#*:}"
        njobs=$((njobs + 1)) ndur=$((ndur + 1))
    done
done
n=$(wc -l <"$TMP/times" 2>/dev/null || echo 0)
max=$(sort -g "$TMP/times" 2>/dev/null | tail -1)
during=$(grep -c during "$TMP/second" 2>/dev/null)
echo "shrink_test ($NET): $njobs jobs, $n shrinks, the longest ${max:-?} s; the second" \
    "victim died inside the agreement in ${during:-0} of $ndur jobs"
exit $bad
