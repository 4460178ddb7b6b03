#!/bin/bash
# topo_job_test.sh HCOMMRUN MP_COLL_NET: the topology in real jobs on fake
# nodes of this host (tests/lib/fake_nodes.sh), read from HCOMM_LOG=info:
#   - 2 nodes x 2 ranks numbered across nodes: the ring is 0 2 1 3 and
#     crosses nodes twice; HCOMM_TOPO=off keeps the rank order;
#   - 4 nodes x 1 rank, HCOMM_TOPO_FILE putting nodes 0 and 2 under one
#     switch, 1 and 3 under another: full crosses switches twice, local
#     (no switch knowledge) four times;
#   - HCOMM_TOPO_DUMP_FILE writes the map (node and rank lines);
#   - the same switches as <cluster> XML, dumped as XML (dump.xml) and read
#     back; NCCL's <system> file gives the ranks its <cpu>'s NUMA node;
#   - bad HCOMM_TOPO, HCOMM_TOPO_WEIGHTS and topology files fail hcomm_init
#     with messages that name them (file and line);
#   - the hierarchical allreduce's model line for 16 MiB.
set -u
run=${1:?hcommrun} prog=${2:?mp_coll_net}
here=$(cd "$(dirname "$0")" && pwd)
fake="$here/../lib/fake_nodes.sh"
work=$(mktemp -d /tmp/hc-topo-job.XXXXXX)
trap 'rm -rf "$work"' EXIT
bad=0
fail() { echo "FAIL: $*"; bad=1; }
job() { # LOG NP NODES PLACE ENV... -- ARGS
    local log=$1 np=$2 nodes=$3 place=$4
    shift 4
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=(--env "$1"); shift; done
    shift
    "$run" -n "$np" --timeout 100 --env HCOMM_LOG=info "${envs[@]}" "$fake" "$nodes" "$place" \
        "$prog" "$@" >"$log" 2>&1
}

job "$work/a.log" 4 2 cyclic HCOMM_ALGO=ring -- -c 1,7 || fail "2x2 ring job failed: $(tail -3 "$work/a.log")"
grep -q "topology: ring of a 4-rank communicator (HCOMM_TOPO=full): 0 2 1 3; 2 node crossings" "$work/a.log" ||
    fail "2x2 cyclic: no ring 0 2 1 3 with 2 node crossings: $(grep topology "$work/a.log")"
job "$work/b.log" 4 2 cyclic HCOMM_ALGO=ring HCOMM_TOPO=off -- -c 1 || fail "HCOMM_TOPO=off job failed"
grep -q "topology: ring" "$work/b.log" && fail "HCOMM_TOPO=off still reorders: $(grep topology "$work/b.log")"

cat >"$work/sw.topo" <<'T'
# two switches, nodes interleaved
node fake0 switch spine/a
node fake1 switch spine/b
node fake2 switch spine/a
node fake3 switch spine/b
T
# HCOMM_TOPO_PROBE=0: the file's classes decide (measured costs would win
# over them; tests/netns/topo_probe_test.sh covers those).
job "$work/c.log" 4 4 cyclic HCOMM_ALGO=ring HCOMM_TOPO_PROBE=0 HCOMM_TOPO_FILE="$work/sw.topo" \
    HCOMM_TOPO_DUMP_FILE="$work/dump.topo" -- -c 1 || fail "4x1 switch-file job failed: $(tail -3 "$work/c.log")"
grep -q "ring of a 4-rank communicator (HCOMM_TOPO=full): 0 2 1 3; 4 node crossings, 2 switch crossings" "$work/c.log" ||
    fail "4x1 two switches: want ring 0 2 1 3 crossing switches twice: $(grep 'topology: ring' "$work/c.log")"
job "$work/d.log" 4 4 cyclic HCOMM_ALGO=ring HCOMM_TOPO=local HCOMM_TOPO_PROBE=0 HCOMM_TOPO_FILE="$work/sw.topo" -- -c 1 ||
    fail "HCOMM_TOPO=local job failed"
grep -q "(HCOMM_TOPO=local): 0 1 2 3; 4 node crossings, 4 switch crossings" "$work/d.log" ||
    fail "HCOMM_TOPO=local: want the node order and 4 switch crossings: $(grep 'topology: ring' "$work/d.log")"
for want in "node fake2 switch spine/a" "rank 3 node fake3"; do
    grep -q "^$want" "$work/dump.topo" 2>/dev/null || fail "HCOMM_TOPO_DUMP_FILE lacks \"$want\": $(cat "$work/dump.topo" 2>&1)"
done

# The same switches as <cluster> XML, the map dumped as XML (a name ending
# in .xml) and read back by hcomm_info --topo; NCCL's <system> file gives
# every rank the NUMA node of the <cpu> whose affinity holds its CPUs.
cat >"$work/sw.xml" <<'T'
<?xml version="1.0"?>
<!-- two switches, nodes interleaved -->
<cluster version="1">
  <switch name="spine">
    <switch name="a"><node name="fake0"/><node name="fake2"/></switch>
    <switch name="b"><node name="fake1"/><node name="fake3"/></switch>
  </switch>
</cluster>
T
job "$work/x.log" 4 4 cyclic HCOMM_ALGO=ring HCOMM_TOPO_PROBE=0 HCOMM_TOPO_FILE="$work/sw.xml" \
    HCOMM_TOPO_DUMP_FILE="$work/dump.xml" -- -c 1 || fail "4x1 <cluster> job failed: $(tail -3 "$work/x.log")"
grep -q "ring of a 4-rank communicator (HCOMM_TOPO=full): 0 2 1 3; 4 node crossings, 2 switch crossings" "$work/x.log" ||
    fail "4x1 <cluster>: want ring 0 2 1 3 crossing switches twice: $(grep 'topology: ring' "$work/x.log")"
grep -q '<switch name="a">' "$work/dump.xml" 2>/dev/null && grep -q '<rank id="3"' "$work/dump.xml" ||
    fail "HCOMM_TOPO_DUMP_FILE=dump.xml is not <cluster> XML: $(head -5 "$work/dump.xml" 2>&1)"
info=$(dirname "$prog")/hcomm_info
if [ -x "$info" ]; then
    "$info" --topo "$work/dump.xml" >"$work/dump.txt" 2>&1 || fail "hcomm_info --topo dump.xml: $(cat "$work/dump.txt")"
    grep -q "node 2 fake2 (switch spine/a): 2" "$work/dump.txt" || fail "hcomm_info --topo dump.xml: $(head -4 "$work/dump.txt")"
fi
cat >"$work/sys.xml" <<'T'
<system version="1">
  <cpu numaid="3" affinity="ffffffff,ffffffff">
    <pci busid="0000:0d:00.0" class="0x020000"><nic><net name="mlx5_0" dev="0" speed="100000" port="1"/></nic></pci>
  </cpu>
</system>
T
job "$work/s.log" 2 2 cyclic HCOMM_TOPO_PROBE=0 HCOMM_TOPO_FILE="$work/sys.xml" HCOMM_TOPO_DUMP_FILE="$work/sys.topo" \
    -- -c 1 || fail "NCCL <system> job failed: $(tail -3 "$work/s.log")"
for want in "rank 0 node fake0 numa 3" "rank 1 node fake1 numa 3"; do
    grep -q "^$want" "$work/sys.topo" 2>/dev/null || fail "<system> NUMA: the map lacks \"$want\": $(cat "$work/sys.topo" 2>&1)"
done

expect_init_error() { # WHAT ENV: the job fails and rank 0's error says WHAT
    local what=$1
    shift
    if job "$work/e.log" 2 2 cyclic "$@" -- -c 1; then fail "$* was accepted"; return; fi
    grep -qF "$what" "$work/e.log" || fail "$*: no \"$what\" in: $(grep -i error "$work/e.log" | head -2)"
}
expect_init_error "HCOMM_TOPO=nearby: want off, local or full" HCOMM_TOPO=nearby
expect_init_error "HCOMM_TOPO_WEIGHTS=1,2: want four positive numbers" HCOMM_TOPO_WEIGHTS=1,2
printf 'node fake0 switch a\nnode fake1 sw b\n' >"$work/bad.topo"
expect_init_error "bad.topo:2: want \"node <name> switch <path>\"" HCOMM_TOPO_FILE="$work/bad.topo"
expect_init_error "cannot open $work/none.topo" HCOMM_TOPO_FILE="$work/none.topo"
printf '<cluster>\n  <node name="fake0">\n</cluster>\n' >"$work/bad.xml"
expect_init_error "bad.xml:3: end tag </cluster> does not match <node> of line 2" HCOMM_TOPO_FILE="$work/bad.xml"

job "$work/h.log" 4 2 cyclic -- --bench 16777216 || fail "16 MiB bench job failed: $(tail -3 "$work/h.log")"
grep -q "topology model: allreduce of 16777216 bytes on 2 nodes x 2 ranks: predicted hier .* -> hier" "$work/h.log" ||
    fail "no model line choosing hier for 16 MiB: $(grep 'topology model' "$work/h.log")"
grep -q "allreduce of 16777216 bytes by hier .*predicted .* measured" "$work/h.log" ||
    fail "no measured time for hier: $(grep 'topology model' "$work/h.log")"
[ $bad = 0 ] && echo "topo_job_test: all passed"
exit $bad
