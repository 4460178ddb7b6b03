#!/bin/bash
# stats_job_test.sh HCOMMRUN MP_STATS HCOMM_STATS: statistics read back.
#   - HCOMM_STATS=1 and 2 on a 4-rank job whose calls are known
#     (tests/core/mp_stats.c): per-rank JSON files from a %r/%h/%p pattern,
#     two reports per rank (hcomm_stats_dump, finalize), exact calls and
#     bytes per operation and size class, the algorithm and driver of each
#     class, level 2's per-communicator (a freed split included), per-peer
#     and counter records, and the human table on stderr;
#   - hcomm_stats merges the files: top operations, the straggler of the
#     barriers (rank 3 sleeps before each), the busiest pair (0 -> 1);
#   - bad values fail hcomm_init with a message naming the variable;
#   - hcomm_stats on a file with no records exits 2 with a message.
set -u
run=${1:?hcommrun} prog=${2:?mp_stats} tool=${3:?hcomm_stats}
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
work=$(mktemp -d /tmp/hc-stats.XXXXXX)
trap 'rm -rf "$work"' EXIT
bad=0
fail() { echo "FAIL: $*"; bad=1; }

# LEVEL SAMPLE NODES (2: fake nodes of this host, tcp between them and the
# topology probe at init, whose internal collectives must not be counted)
for cfg in "1 1 1" "2 1 1" "1 16 1" "2 1 2"; do
    read -r level sample nodes <<<"$cfg"
    d="$work/l$level.s$sample.n$nodes"
    wrap=()
    [ "$nodes" = 2 ] && wrap=("$here/../lib/fake_nodes.sh" 2 cyclic)
    mkdir -p "$d/json"
    # level 1 samples calls under 64 KiB (HCOMM_STATS_SAMPLE); with 1 every
    # call is timed and the barriers' straggler shows at both levels
    if ! "$run" -n 4 --timeout 100 --env HCOMM_STATS=$level --env HCOMM_STATS_SAMPLE=$sample \
        --env "HCOMM_STATS_FILE=$d/json/st.%r.%h.%p.json" "${wrap[@]}" "$prog" >"$d/out" 2>"$d/err"; then
        fail "level $level: the job failed"; cat "$d/err"; continue
    fi
    nfiles=$(ls "$d"/json/st.*.json 2>/dev/null | wc -l)
    [ "$nfiles" = 4 ] || fail "level $level: $nfiles JSON files, want 4 (one per rank)"
    host=$(hostname)
    ls "$d"/json/st.0."$host".*.json >/dev/null 2>&1 || fail "level $level: %h/%p not expanded: $(ls "$d/json")"
    grep -q "statistics (finalize" "$d/err" || fail "level $level: no table on stderr"
    grep -q "statistics (dump" "$d/err" || fail "level $level: hcomm_stats_dump printed no table"
    $py - "$d" "$level" "$sample" "$nodes" <<'PY' || bad=1
import glob, json, sys
d, level, sample, nodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ok = True
def fail(msg):
    global ok
    print("FAIL: level %d: %s" % (level, msg)); ok = False
for f in sorted(glob.glob(d + "/json/st.*.json")):
    recs = [json.loads(l) for l in open(f) if l.strip()]
    reps = sorted({r["report"] for r in recs})
    if reps != [0, 1]:
        fail("%s: reports %s, want [0, 1] (dump, finalize)" % (f, reps)); continue
    last = [r for r in recs if r["report"] == 1]
    info = [r for r in last if r["type"] == "rank"][0]
    rank = info["rank"]
    if info["why"] != "finalize" or info["level"] != level or info["size"] != 4:
        fail("rank %d: rank record %s" % (rank, info))
    ops = {r["op"]: r for r in last if r["type"] == "op"}
    ar = ops.get("allreduce")
    # 100 x 32 B and 10 x 1 MiB on the world, 5 x 8 B on the split
    if not ar or ar["calls"] != 115 or ar["bytes"] != 100 * 32 + 10 * (1 << 20) + 5 * 8:
        fail("rank %d: allreduce %s" % (rank, ar and (ar["calls"], ar["bytes"])))
    sizes = {s["from"]: s for s in (ar or {}).get("sizes", [])}
    if sizes.get(32, {}).get("calls") != 100 or sizes.get(1 << 20, {}).get("calls") != 10 \
       or sizes.get(8, {}).get("calls") != 5:
        fail("rank %d: allreduce size classes %s" % (rank, sizes))
    for s in sizes.values():
        if not s["algo"] or s["drivers"] != ("shm" if nodes == 1 else "shm+tcp"):
            fail("rank %d: size class %s lacks its algorithm or driver" % (rank, s))
    bc = ops.get("broadcast")
    if not bc or bc["calls"] != 20 or bc["bytes"] != 20 * 1024:
        fail("rank %d: broadcast %s" % (rank, bc))
    bar = ops.get("barrier")
    if not bar or bar["calls"] != 10:
        fail("rank %d: barrier %s" % (rank, bar))
    if ar and not (0 < ar["p50_us"] <= ar["p99_us"] <= ar["max_us"] * 1.07 + 1):
        fail("rank %d: allreduce percentiles out of order %s" % (rank, ar))
    if ar and ar["timed"] < 10:
        fail("rank %d: only %d allreduces timed (the 1 MiB ones are always)" % (rank, ar["timed"]))
    if (level == 2 or sample == 1) and ar and ar["timed"] != ar["calls"]:
        fail("rank %d: timed %d of %d, want all" % (rank, ar["timed"], ar["calls"]))
    if sample > 1 and ar and not (10 <= ar["timed"] < 60):
        # 10 large calls always, ~105/16 of the small ones
        fail("rank %d: sampling 1 in %d timed %d of %d" % (rank, sample, ar["timed"], ar["calls"]))
    if rank == 0 and ops.get("send", {}).get("calls") != 30:
        fail("rank 0: send %s" % ops.get("send"))
    if rank == 1 and (ops.get("recv", {}).get("calls") != 30 or ops["recv"]["bytes"] != 30 * 4096):
        fail("rank 1: recv %s" % ops.get("recv"))
    if level == 1:
        if any(r["type"] in ("peer", "comm", "counters") for r in last):
            fail("rank %d: level 1 wrote level 2 records" % rank)
        continue
    comms = [r for r in last if r["type"] == "comm"]
    world = [c for c in comms if c["world"]]
    freed = [c for c in comms if c["freed"]]
    if not world or world[0]["ops"].get("allreduce", {}).get("calls") != 110:
        fail("rank %d: world comm record %s" % (rank, world))
    if not freed or freed[0]["ops"].get("allreduce", {}).get("calls") != 5:
        fail("rank %d: the freed split's record %s" % (rank, freed))
    if "wait_s" not in ar:
        fail("rank %d: level 2 op record without wait_s" % rank)
    for o in ops.values():  # time blocked is part of the time inside
        if o.get("wait_s", 0) > o["time_s"] * 1.02 + 20e-6:
            fail("rank %d: %s blocked %.6f s > %.6f s inside" % (rank, o["op"], o["wait_s"],
                                                              o["time_s"]))
    peers = {p["peer"]: p for p in last if p["type"] == "peer"}
    if rank == 0 and (peers.get(1, {}).get("tx_msgs", 0) < 30 or
                      peers[1]["driver"] != ("shm" if nodes == 1 else "tcp")):
        fail("rank 0: peer record for rank 1 %s" % peers.get(1))
    if not [r for r in last if r["type"] == "counters" and "reg_cache" in r and "pool" in r]:
        fail("rank %d: no counters record" % rank)
sys.exit(0 if ok else 1)
PY
    "$tool" "$d/json" >"$d/report" 2>&1 || fail "level $level: hcomm_stats failed: $(cat "$d/report")"
    grep -q "4 of 4 ranks reported" "$d/report" || fail "level $level: report header: $(head -3 "$d/report")"
    if [ "$sample" = 1 ]; then
        grep -Eq "^  barrier +rank 3: .*\[straggler\]" "$d/report" ||
            fail "level $level: rank 3 not named the barriers' straggler: $(grep barrier "$d/report")"
    fi
    grep -Eq "^  allreduce " "$d/report" || fail "level $level: allreduce missing from the report"
    if [ $level = 2 ]; then
        grep -q "rank 0 -> 1 " "$d/report" || fail "level 2: busiest pair 0 -> 1 missing"
        grep -q "busiest links" "$d/report" || fail "level 2: no links section"
    fi
    "$tool" --json "$d/json" | $py -c 'import json,sys; m=json.load(sys.stdin); assert m["size"]==4 and m["ops"]' ||
        fail "level $level: hcomm_stats --json"
done
cat "$work/l2.s1.n2/report"

# bad values name the variable
for kv in HCOMM_STATS=3 HCOMM_STATS_LEVEL=0 HCOMM_STATS_SAMPLE=0 HCOMM_WARN_AFTER=-1; do
    var=${kv%%=*}
    out=$("$run" -n 1 --timeout 30 --env "$kv" "$prog" 2>&1)
    echo "$out" | grep -q "$var" || fail "$kv: no error naming $var: $out"
done
: >"$work/empty.json"
out=$("$tool" "$work/empty.json" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "no statistics records" || fail "empty file: rc $rc: $out"
echo '{"x":1}' >"$work/junk.json"
out=$("$tool" "$work/junk.json" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "junk.json:1" || fail "junk file: rc $rc: $out"
[ $bad = 0 ] && echo "stats_job: all checks passed"
exit $bad
