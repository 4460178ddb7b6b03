#!/bin/bash
# stats_job_test.sh HCOMMRUN MP_STATS HCOMM_STATS: statistics read back.
#   - HCOMM_STATS=1 and 2 on a 4-rank job whose calls are known
#     (tests/core/mp_stats.c): per-rank JSON files from a %r/%h/%p pattern,
#     two reports per rank (hcomm_stats_dump, finalize), exact calls and
#     bytes per operation and size class, the algorithm and driver of each
#     class, level 2's per-communicator (a freed split included), per-peer
#     and counter records, and the human table on stderr;
#   - hcomm_stats merges the files: top operations, the straggler of the
#     barriers (rank 3 sleeps before each), the pair 0 -> 1 among the
#     busiest;
#   - the knobs' forms: HCOMM_STATS=N, HCOMM_STATS_LEVEL=N alone,
#     HCOMM_STATS=1 with HCOMM_STATS_LEVEL=2 (level 2), HCOMM_STATS=0 with
#     HCOMM_STATS_LEVEL=2 (off, said at info);
#   - level 2's per-peer counts of what the node algorithms move through
#     shared memory (coll/node_stats.c), rank a's tx to b equal to b's rx
#     from a: a one-node 2-rank job of allreduces of known sizes (every node
#     allreduce algorithm), mp_stats on one node (node-staged 1 MiB) and on
#     two fake nodes (hierarchical: MiB inside each node);
#   - bad values fail hcomm_init with a message naming the variable;
#   - hcomm_stats on a file with no records exits 2 with a message;
#   - a short level-1 job (3 small allreduces, one in 10^6 timed: none is):
#     "not sampled" on its row and its share line, no "-" time columns and
#     no "0.0% of the time".
set -u
run=${1:?hcommrun} prog=${2:?mp_stats} tool=${3:?hcomm_stats}
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
work=$(mktemp -d /tmp/hc-stats.XXXXXX)
trap 'rm -rf "$work"' EXIT
bad=0
fail() { echo "FAIL: $*"; bad=1; }

# The knobs that ask for statistics at a level: stats (HCOMM_STATS=L),
# level (HCOMM_STATS_LEVEL=L alone), both (HCOMM_STATS=1 HCOMM_STATS_LEVEL=L).
knobs() {
    case $1 in
    stats) echo "--env HCOMM_STATS=$2" ;;
    level) echo "--env HCOMM_STATS_LEVEL=$2" ;;
    both) echo "--env HCOMM_STATS=1 --env HCOMM_STATS_LEVEL=$2" ;;
    esac
}

# LEVEL SAMPLE NODES FORM (nodes 2: fake nodes of this host, tcp between
# them and the topology probe at init, whose internal collectives must not
# be counted)
for cfg in "1 1 1 stats" "2 1 1 stats" "1 16 1 stats" "2 1 1 level" "2 1 2 both"; do
    read -r level sample nodes form <<<"$cfg"
    d="$work/l$level.s$sample.n$nodes.$form"
    wrap=()
    [ "$nodes" = 2 ] && wrap=("$here/../lib/fake_nodes.sh" 2 cyclic)
    mkdir -p "$d/json"
    # level 1 samples calls under 64 KiB (HCOMM_STATS_SAMPLE); with 1 every
    # call is timed and the barriers' straggler shows at both levels
    # shellcheck disable=SC2046
    if ! "$run" -n 4 --timeout 100 $(knobs $form $level) --env HCOMM_STATS_SAMPLE=$sample \
        --env "HCOMM_STATS_FILE=$d/json/st.%r.%h.%p.json" "${wrap[@]}" "$prog" >"$d/out" 2>"$d/err"; then
        fail "level $level ($form): the job failed"; cat "$d/err"; continue
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
allpeers = {}  # (rank, peer): its last peer record
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
    allpeers.update({(rank, q): p for q, p in peers.items()})
    if nodes == 1:
        # The 10 allreduces of S = 1 MiB at 4 ranks run node-staged (or
        # single copy by slices): per call and pair, a rank stages (or
        # writes) the peer's quarter and its own quarter of the result
        # goes to it: S/4 + S/4 each way, 10 * S/2 = 5 MiB at least.
        for q in range(4):
            p = peers.get(q)
            if q != rank and (not p or p["driver"] != "shm" or
                              min(p["tx_bytes"], p["rx_bytes"]) < 10 * (1 << 20) // 2):
                fail("rank %d: shm peer %d: %s, want >= 5 MiB each way" % (rank, q, p))
    if not [r for r in last if r["type"] == "counters" and "reg_cache" in r and "pool" in r]:
        fail("rank %d: no counters record" % rank)
# what a sends to b over shm is what b receives from a (node algorithms and
# p2p alike), in bytes and messages
for (a, b), p in sorted(allpeers.items()):
    q = allpeers.get((b, a))
    if p["driver"] == "shm" and (not q or (p["tx_bytes"], p["tx_msgs"]) !=
                                 (q["rx_bytes"], q["rx_msgs"])):
        fail("rank %d -> %d: tx %d B in %d msgs, rank %d counts rx %s" % (
            a, b, p["tx_bytes"], p["tx_msgs"], b, q and (q["rx_bytes"], q["rx_msgs"])))
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
    if [ $level = 2 ] && [ $nodes = 2 ]; then
        # Hierarchical 1 MiB allreduces (S): per call a node's reduce-scatter
        # and allgather each move (L-1)/L * S each way between its L = 2
        # ranks: 2 * S per node link, 10 calls: 20 MiB inside each node (the
        # intra-node p2p of the small ones adds KiB). Another algorithm
        # still moves MiB there (rd: S per step between the node's pair).
        "$tool" --json "$d/json" | $py -c '
import json, sys
m = json.load(sys.stdin)
hier = any(s["algo"] == "hier" for f in sys.argv[1:] for r in map(json.loads, open(f))
           if r.get("type") == "op" and r["op"] == "allreduce" for s in r["sizes"]
           if s["from"] == 1 << 20)
want = 20 << 20 if hier else 10 << 20
inside = [l for l in m["links"] if l["nodes"][0] == l["nodes"][1]]
assert len(inside) == 2 and all(l["driver"] == "shm" and l["bytes"] >= want for l in inside), \
    "inside links %s, want 2 of >= %d B (hier %s)" % (inside, want, hier)
' "$d"/json/st.*.json || fail "level 2, 2 nodes: the links inside the nodes"
    fi
done
cat "$work/l2.s1.n2.both/report"

# The node algorithms' per-peer counts, exactly known: 2 ranks on one node,
# N allreduces of each size M (float32): node-inline (16 B), node-direct
# (64 KiB), node-1copy by CMA get (4 MiB of malloc memory; node-direct if
# the kernel refuses CMA) and mapped (4 MiB of pool memory). At 2 ranks
# each of these moves exactly M each way per call: inline and direct reduce
# the peer's whole slot or block, the single copy pulls the peer's whole
# input (or, by slices, reads and writes its half while the peer does the
# other half), node-staged reduces its half of the peer's block and copies
# the peer's half of the result. So rank 0's tx to rank 1 and its rx from
# it are both >= N * (sum of M) (nothing else moves here), in >= 4 N
# messages. Asked for by HCOMM_STATS_LEVEL=2 alone and with HCOMM_STATS=1.
N=20 sizes="16 65536 4194304 4194304p"
for form in level both; do
    d="$work/pair.$form"
    mkdir -p "$d/json"
    # shellcheck disable=SC2046,SC2086
    if ! "$run" -n 2 --timeout 60 $(knobs $form 2) --env "HCOMM_STATS_FILE=$d/json/st.%r.json" \
        "$prog" allreduce $N $sizes >"$d/out" 2>"$d/err"; then
        fail "pair ($form): the job failed"; cat "$d/err"; continue
    fi
    grep -q "HCOMM_STATS level 2" "$d/err" || fail "pair ($form): no level 2 table: $(head -3 "$d/err")"
    # shellcheck disable=SC2086
    $py - "$d" $N $sizes <<'PY' || bad=1
import glob, json, sys
d, n = sys.argv[1], int(sys.argv[2])
sizes = [int(m.rstrip("p")) for m in sys.argv[3:]]
vol = n * sum(sizes)
ok = True
files = sorted(glob.glob(d + "/json/st.*.json"))
if len(files) != 2:
    print("FAIL: pair: %d JSON files" % len(files)); sys.exit(1)
for f in files:
    recs = [json.loads(l) for l in open(f) if l.strip()]
    info = [r for r in recs if r["type"] == "rank"][0]
    me = info["rank"]
    ar = [r for r in recs if r["type"] == "op" and r["op"] == "allreduce"]
    peer = [r for r in recs if r["type"] == "peer" and r["peer"] == 1 - me]
    algos = {s["from"]: s["algo"] for s in (ar[0]["sizes"] if ar else [])}
    why = None
    if info["level"] != 2:
        why = "level %d, want 2" % info["level"]
    elif not ar or ar[0]["calls"] != n * len(sizes) or ar[0]["bytes"] != vol:
        why = "allreduce %s" % (ar and (ar[0]["calls"], ar[0]["bytes"]))
    elif not peer or peer[0]["driver"] != "shm":
        why = "no shm peer record: %s (the node algorithms %s moved nothing?)" % (peer, algos)
    elif min(peer[0]["tx_bytes"], peer[0]["rx_bytes"]) < vol or \
            min(peer[0]["tx_msgs"], peer[0]["rx_msgs"]) < n * len(sizes):
        why = "peer %s, want >= %d B and >= %d msgs each way (algorithms %s)" % (
            peer[0], vol, n * len(sizes), algos)
    if why:
        print("FAIL: pair: rank %d: %s" % (me, why)); ok = False
sys.exit(0 if ok else 1)
PY
    "$tool" --json "$d/json" | $py -c '
import json, sys
m, vol = json.load(sys.stdin), int(sys.argv[1])
pairs = {(p["from"], p["to"]): p for p in m["pairs"]}
assert all(pairs.get(k, {}).get("bytes", 0) >= vol and pairs[k]["driver"] == "shm"
           for k in ((0, 1), (1, 0))), "pairs %s, want >= %d B via shm" % (m["pairs"], vol)
assert [l for l in m["links"] if l["nodes"][0] == l["nodes"][1] and l["bytes"] >= 2 * vol], \
    "links %s" % m["links"]
' $((N * (16 + 65536 + 2 * 4194304))) || fail "pair ($form): hcomm_stats pairs and links"
done
"$tool" "$work/pair.level/json" | sed -n '/busiest peer/,$p'

# HCOMM_STATS_LEVEL=1 alone: level 1; an explicit HCOMM_STATS=0 wins over
# HCOMM_STATS_LEVEL=2 (statistics off, an info line says so)
out=$("$run" -n 2 --timeout 30 --env HCOMM_STATS_LEVEL=1 "$prog" allreduce 2 16 2>&1)
echo "$out" | grep -q "HCOMM_STATS level 1" || fail "HCOMM_STATS_LEVEL=1 alone: no level 1 table: $out"
out=$("$run" -n 2 --timeout 30 --env HCOMM_STATS=0 --env HCOMM_STATS_LEVEL=2 --env HCOMM_LOG=info \
    --env "HCOMM_STATS_FILE=$work/off.%r.json" "$prog" allreduce 2 16 2>&1)
if echo "$out" | grep -q "statistics (" || ls "$work"/off.*.json >/dev/null 2>&1; then
    fail "HCOMM_STATS=0 HCOMM_STATS_LEVEL=2: statistics on: $out"
fi
echo "$out" | grep -q "HCOMM_STATS=0 with HCOMM_STATS_LEVEL=2: statistics off" ||
    fail "HCOMM_STATS=0 HCOMM_STATS_LEVEL=2: no info line: $out"

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

"$run" -n 2 --env HCOMM_STATS=1 --env HCOMM_STATS_SAMPLE=1000000 "$prog" allreduce 3 64 >/dev/null 2>"$work/short" ||
    fail "short job failed: $(head -3 "$work/short")"
grep -Eq "r0\]   allreduce +3 +[0-9]+   not sampled: none of its 3 calls timed" "$work/short" ||
    fail "short job: no \"not sampled\" row: $(grep -A3 ' op  ' "$work/short" | head -4)"
grep -q "r0\]   allreduce: not sampled; sizes" "$work/short" || fail "short job: no \"not sampled\" share line"
grep -Eq " - +- +- +- +- " "$work/short" && fail "short job: \"-\" time columns"
grep -q "0.0% of the time" "$work/short" && fail "short job: \"0.0% of the time\""
[ $bad = 0 ] && echo "stats_job: all checks passed"
exit $bad
