#!/bin/bash
# kill_matrix.sh HCOMMRUN BINDIR RUNS [NET] [VICTIMS] [MODES]: the kill
# matrix of issue 30.4. 2 fake nodes x 2 ranks (ranks 0,1 on one, 2,3 on the
# other: shm inside a node, NET between them, tcp by default; "mlx5" runs
# drv/mlx5 on the model of the queues, which needs a -DHCOMM_MLX5_MODEL=ON
# build), a loop of 4 MiB allreduces (tests/core/mp_kill_loop.c), each
# victim in turn SIGKILLed RUNS times per mode:
#   exit    survivors exit at once after their error
#   linger  survivors tear down as a framework does (one more call on each
#           communicator, free, sleep 1 s, finalize)
# Every survivor's every failure must name the victim ("peer rank V
# (world) failed") and come within BOUND seconds (10; HCOMM_TIMEOUT is
# 60), a lingering survivor's finalize too; the victim dies by SIGKILL,
# the survivors exit 0. Prints a table of counts per victim and mode; exit
# 1 when any check failed.
set -u
HCOMMRUN=$1 BINDIR=$2 RUNS=${3:-1} NET=${4:-tcp}
VICTIMS=${5:-"0 1 2 3"} MODES=${6:-"exit linger"}
BOUND=${KILL_BOUND:-10}
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
bad=0
fail() { echo "kill_matrix: FAIL: $*"; bad=1; }

pick_port() {
    local bs
    bs=$("$HCOMMRUN" -n 1 sh -c 'echo $HCOMM_BOOTSTRAP') || return 1
    echo "${bs##*:}"
}

netenv=(HCOMM_NET=tcp)
if [[ $NET == mlx5 ]]; then
    netenv=(HCOMM_NET=mlx5 HCOMM_MLX5_MODEL=1)
fi

# run VICTIM MODE SEED: one job; the counts go to the table's files.
run() {
    local victim=$1 mode=$2 seed=$3 port key r
    port=$(pick_port) || { fail "cannot pick a port"; return; }
    key=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    local -a pids rcs
    for r in 0 1 2 3; do
        env HCOMM_RANK=$r HCOMM_SIZE=4 HCOMM_NODE_ID=node$((r / 2)) HCOMM_LOCAL_RANK=$((r % 2)) \
            HCOMM_LOCAL_SIZE=2 HCOMM_BOOTSTRAP=tcp://127.0.0.1:$port HCOMM_JOB_KEY=$key \
            HCOMM_TIMEOUT=60 HCOMM_TOPO_CACHE=none "${netenv[@]}" \
            timeout -k 5 120 "$BINDIR/mp_kill_loop" "$victim" "$mode" --seed "$seed" \
            >"$TMP/out.$r" 2>&1 &
        pids[r]=$!
    done
    for r in 0 1 2 3; do
        wait "${pids[r]}" 2>/dev/null
        rcs[r]=$?
    done
    local what="victim $victim $mode run $seed"
    for r in 0 1 2 3; do
        if ((r == victim)); then
            ((rcs[r] == 137)) || fail "$what: rank $r (victim) exit ${rcs[r]}, not 137 (SIGKILL)"
            continue
        fi
        ((rcs[r] == 0)) || fail "$what: rank $r exit ${rcs[r]}: $(tail -3 "$TMP/out.$r")"
        local n=0 named=0 slow=0 line t
        while IFS= read -r line; do
            n=$((n + 1))
            if [[ $line == *"peer rank $victim (world) failed"* ]]; then
                named=$((named + 1))
            else
                fail "$what: rank $r: does not name rank $victim: $line"
            fi
            t=${line#* after }
            t=${t%% s*}
            if [[ $(echo "$t > $BOUND" | bc) == 1 ]]; then
                slow=$((slow + 1))
                fail "$what: rank $r: took $t s (bound $BOUND): $line"
            fi
        done < <(grep "^rank $r: failed " "$TMP/out.$r")
        ((n > 0)) || fail "$what: rank $r reported no failure: $(tail -3 "$TMP/out.$r")"
        if [[ $mode == linger ]]; then
            line=$(grep "^rank $r: hcomm_finalize" "$TMP/out.$r")
            t=${line#* after }
            t=${t%% s*}
            if [[ -z $line ]]; then
                fail "$what: rank $r did not finalize: $(tail -3 "$TMP/out.$r")"
            elif [[ $(echo "$t > $BOUND" | bc) == 1 ]]; then
                fail "$what: rank $r: hcomm_finalize took $t s: $line"
            fi
        fi
        echo "$n $named $slow" >>"$TMP/count.$victim.$mode"
        grep "^rank $r: failed " "$TMP/out.$r" | sed 's/.* after \([0-9.]*\) s.*/\1/' \
            >>"$TMP/times.$victim.$mode"
    done
    if ((bad)) && [[ -n ${KILL_VERBOSE:-} ]]; then
        for r in 0 1 2 3; do sed "s/^/[$r] /" "$TMP/out.$r"; done
    fi
}

for victim in $VICTIMS; do
    for mode in $MODES; do
        for ((i = 1; i <= RUNS; i++)); do
            run "$victim" "$mode" "$i"
        done
    done
done

printf "%-7s %-7s %5s %8s %12s %6s %9s\n" victim mode runs reports "named victim" slow "max s"
for victim in $VICTIMS; do
    for mode in $MODES; do
        f=$TMP/count.$victim.$mode
        [[ -f $f ]] || continue
        read -r n named slow < <(awk '{a += $1; b += $2; c += $3} END {print a, b, c}' "$f")
        max=$(sort -g "$TMP/times.$victim.$mode" | tail -1)
        printf "%-7s %-7s %5s %8s %12s %6s %9s\n" "$victim" "$mode" "$RUNS" "$n" "$named" "$slow" \
            "${max:--}"
    done
done
exit $bad
