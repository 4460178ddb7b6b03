#!/bin/bash
# tcp_idle_test.sh HCOMMRUN MP_TCP_IDLE [NP]: runs mp_tcp_idle over loopback
# tcp with HCOMM_CONN_IDLE_TIMEOUT=1 and checks the driver's log: every rank
# idle-closed its connections at least once per cycle, and no rank logged an
# idle close while rank 0 was mid-way through a large send to a stalled
# receiver (between its "midsend begin/end" lines).
set -u
run=$1 prog=$2 np=${3:-2} cycles=3
log=$(mktemp /tmp/tcp_idle.XXXXXX)
trap 'rm -f "$log"' EXIT
HCOMM_SHM=0 HCOMM_NET=tcp HCOMM_CONN_IDLE_TIMEOUT=1 HCOMM_LOG=info \
    "$run" -n "$np" --timeout 100 "$prog" --cycles $cycles --idle 2.5 >"$log" 2>&1
rc=$?
grep -E "FAIL|error|warn|rank [0-9]+: cycle|midsend|passed" "$log"
if [ $rc -ne 0 ]; then
    echo "FAIL: mp_tcp_idle exited $rc"; tail -n 40 "$log"; exit 1
fi
bad=0
for ((r = 0; r < np; r++)); do
    n=$(grep -c "^\[hcomm r$r\] info: tcp: .* idle-closed" "$log")
    echo "rank $r: $n idle closes logged"
    if [ "$n" -lt $cycles ]; then
        echo "FAIL: rank $r logged $n idle closes, expected at least $cycles"; bad=1
    fi
done
# Closes of the 0-1 connection logged by rank 0 or 1 between its own
# midsend markers (their connections to other ranks are idle meanwhile).
for r in 0 1; do
    n=$(awk -v r="$r" -v p="$((1 - r))" '
        $0 ~ "^rank " r ": midsend begin" { on = 1; next }
        $0 ~ "^rank " r ": midsend end" { on = 0 }
        on && $0 ~ "^\\[hcomm r" r "\\] info: tcp: rank " p " .*idle-closed" { c++ }
        END { print c + 0 }' "$log")
    grep -q "^rank $r: midsend end" "$log" || { echo "FAIL: rank $r never finished midsend"; bad=1; }
    if [ "$n" -ne 0 ]; then
        echo "FAIL: rank $r idle-closed a connection in the middle of a large message"; bad=1
    fi
done
[ $bad -eq 0 ] && echo "PASS"
exit $bad
