#!/bin/bash
# topo_probe_test.sh MP_COLL_NET: the calibration probe over real links.
# Four network namespaces ("nodes", tests/netns/netns.sh) of one rank each;
# the link between nodes 0 and 1 is slowed to 40 Mbit/s both ways (htb +
# u32 on their eth0 for the other's address). With the probe, the ring of
# world avoids that link (0 and 1 not neighbours), the probe's log says what
# it measured, and a second job reads the results from HCOMM_TOPO_CACHE
# instead of probing, with the same ring; with HCOMM_TOPO_PROBE=0 the ring
# is the class order 0 1 2 3, which uses the slow link. Then the link runs
# at 2 Mbit/s, where the probe's 512 KiB would take 2 s (it did: 2234 ms):
# within HCOMM_TOPO_PROBE_BUDGET (0.5 s; and 0.05 s) the probe ends in its
# budget and one round's overrun, measuring the slow pair with fewer bytes,
# and the ring still avoids the link. Every job also runs the collectives
# check (mp_coll_net -c 1,7, HCOMM_ALGO=ring).
# Exit 0 pass, 1 fail, 77 skipped.
set -u
prog=${1:?mp_coll_net}
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
command -v tc >/dev/null || skip "tc (iproute2) not installed"
export HCN_JOB="p$$"
work=$(mktemp -d /tmp/hcn-probe.XXXXXX)
trap '"$here/netns.sh" down >/dev/null 2>&1; rm -rf "$work"' EXIT
"$here/netns.sh" up 4 >/dev/null || skip "cannot create network namespaces"
slow() { # NODE PEER_ADDR: traffic from NODE to PEER_ADDR at 40 Mbit/s (class 1:20)
    "$here/netns.sh" run "$1" sh -c "tc qdisc add dev eth0 root handle 1: htb default 10 r2q 1000 &&
        tc class add dev eth0 parent 1: classid 1:10 htb rate 10gbit &&
        tc class add dev eth0 parent 1: classid 1:20 htb rate 40mbit &&
        tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst $2/32 flowid 1:20" 2>"$work/tc.err" ||
        skip "cannot shape a link (htb/u32): $(cat "$work/tc.err")"
}
slow 0 10.77.0.2
slow 1 10.77.0.1
bad=0
fail() { echo "FAIL: $*"; bad=1; }
job() { # NAME ENV...: 4 ranks, one per node; rank 0's log in $work/NAME.log
    local name=$1 port=$((20000 + RANDOM % 12000)) r pids=() rc=0
    shift
    for r in 0 1 2 3; do
        env HCOMM_RANK=$r HCOMM_SIZE=4 HCOMM_LOCAL_RANK=0 HCOMM_LOCAL_SIZE=1 \
            HCOMM_BOOTSTRAP="tcp://10.77.0.1:$port" HCOMM_JOB_KEY=probe HCOMM_LOG=info HCOMM_ALGO=ring \
            HCOMM_TIMEOUT=60 HCOMM_TOPO_CACHE="$work/cache" "$@" \
            "$here/netns.sh" run $r "$prog" -c 1,7 >"$work/$name.$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    [ $rc = 0 ] || fail "job $name failed: $(tail -3 "$work/$name.0.log")"
    # the world ring: the last ring line (the probe's own communicator's come first)
    grep "topology: ring of a 4-rank" "$work/$name.0.log" | tail -1 | sed 's/.*): \([0-9 ]*\);.*/\1/'
}
adjacent01() { # RING: 0 and 1 neighbours on it?
    local a=($1) i n=${#a[@]}
    for ((i = 0; i < n; i++)); do
        local x=${a[$i]} y=${a[$(((i + 1) % n))]}
        { [ "$x$y" = 01 ] || [ "$x$y" = 10 ]; } && return 0
    done
    return 1
}

probe_ms() { # LOG: the probe's time, from "N node pairs measured in T ms (budget B ms): ..."
    sed -n 's/.*topology probe: [0-9]* node pairs measured in \([0-9]*\) ms.*/\1/p' "$1" | head -1
}
within() { # LOG BUDGET_MS: the probe took at most the budget and one round's overrun
    local ms over=150 # a round's overrun on these links: 2 pings, 2 x 4 KiB at 2 Mbit/s, a chunk misjudged
    ms=$(probe_ms "$1")
    echo "probe time: ${ms:-?} ms (budget $2 ms)"
    [ -n "$ms" ] && [ "$ms" -le $(($2 + over)) ] || fail "the probe took ${ms:-?} ms, over its budget $2 ms + $over ms"
}

ring=$(job probe)
echo "with the probe: ring $ring"
grep -h "topology probe" "$work/probe.0.log"
grep -q "topology probe: 6 node pairs measured" "$work/probe.0.log" || fail "no probe line for 6 pairs"
within "$work/probe.0.log" 500
[ -n "$ring" ] && ! adjacent01 "$ring" || fail "the ring ($ring) uses the slow link 0-1"
ls "$work/cache"/topo-4-tcp-*.txt >/dev/null 2>&1 || fail "no cache file in $work/cache"

ring2=$(job cached)
echo "from the cache: ring $ring2"
grep -q "topology probe: 6 node pairs from the cache" "$work/cached.0.log" || fail "the second job did not read the cache"
[ "$ring2" = "$ring" ] || fail "the cached job's ring ($ring2) is not the probed one ($ring)"

ring3=$(job noprobe HCOMM_TOPO_PROBE=0)
echo "HCOMM_TOPO_PROBE=0: ring $ring3"
grep -q "topology probe" "$work/noprobe.0.log" && fail "HCOMM_TOPO_PROBE=0 still probed"
[ "$ring3" = "0 1 2 3" ] || fail "without the probe the ring is $ring3, want 0 1 2 3"

# 2 Mbit/s: the budget bounds the probe; the slow pair is measured with
# fewer bytes and still avoided.
for n in 0 1; do
    "$here/netns.sh" run $n tc class change dev eth0 parent 1: classid 1:20 htb rate 2mbit quantum 1514 ||
        fail "cannot slow node $n's link to 2 Mbit/s"
done
ring4=$(job slow HCOMM_TOPO_CACHE=none)
echo "2 Mbit/s, HCOMM_TOPO_PROBE_BUDGET=0.5: ring $ring4"
grep -h "topology probe: [^n]" "$work/slow.0.log"
within "$work/slow.0.log" 500
grep -q "topology probe: within HCOMM_TOPO_PROBE_BUDGET=0.5 s: 3 of 3 rounds run, [1-6] pairs measured with fewer" \
    "$work/slow.0.log" || fail "no line saying the slow pair was measured with fewer bytes"
[ -n "$ring4" ] && ! adjacent01 "$ring4" || fail "at 2 Mbit/s the ring ($ring4) uses the slow link 0-1"
ring5=$(job slow05 HCOMM_TOPO_CACHE=none HCOMM_TOPO_PROBE_BUDGET=0.05)
echo "2 Mbit/s, HCOMM_TOPO_PROBE_BUDGET=0.05: ring $ring5"
grep -h "topology probe: [^n]" "$work/slow05.0.log"
within "$work/slow05.0.log" 50
grep -q "topology probe: within HCOMM_TOPO_PROBE_BUDGET=0.05 s" "$work/slow05.0.log" ||
    fail "no line on what the 0.05 s budget cut"
[ $bad = 0 ] && echo "topo_probe_test: all passed"
exit $bad
