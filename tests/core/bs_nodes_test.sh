#!/bin/bash
# bs_nodes_test.sh HCOMMRUN INIT_PROBE FAKE_NODES
# The address allgather of hcomm_init goes by node (core/bootstrap_node.c):
# rank 0 sends the table to one rank per other node, the others read it
# from their node leader's file. Counted by rank 0's init line
# (HCOMM_LOG=info: "rank 0's bootstrap: sent M messages (B bytes)"):
# 2 (N - 1) messages (the handshake's CHALLENGE, round 1's table) plus one
# per other node, where the star sent 3 (N - 1); every job leaves no file
# in /dev/shm. Fails without the node allgather (M = 21 at 8 ranks).
set -u
run=$1 probe=$2 fake=$3
fail() { echo "FAIL: $*"; exit 1; }
before=$(ls /dev/shm | grep -c '^hcomm-ag-')
check() { # ranks nodes cmd...
    local n=$1 nodes=$2
    shift 2
    out=$(HCOMM_LOG=info HCOMM_TOPO_CACHE=none "$run" -n "$n" --timeout 60 "$@" 2>&1) ||
        { echo "$out" | tail -20; fail "$n ranks on $nodes node(s): the job failed"; }
    line=$(echo "$out" | grep -o "rank 0's bootstrap: sent [0-9]* messages ([0-9]* bytes)")
    [ -n "$line" ] || { echo "$out" | tail -20; fail "no init line from rank 0"; }
    sent=$(echo "$line" | awk '{print $5}') bytes=$(echo "$line" | awk '{print $7}' | tr -d '(')
    want=$((2 * (n - 1) + nodes - 1))
    echo "$n ranks on $nodes node(s): rank 0 sent $sent messages, $bytes bytes (want $want messages; the star: $((3 * (n - 1))))"
    [ "$sent" = "$want" ] || fail "$n ranks on $nodes node(s): rank 0 sent $sent messages, want $want"
    echo "$out" | grep -q "init_probe: $n ranks" || fail "no result line"
}
check 8 1 "$probe"
check 8 2 "$fake" 2 cyclic "$probe"
check 6 3 "$fake" 3 block "$probe"
check 2 1 "$probe"
after=$(ls /dev/shm | grep -c '^hcomm-ag-')
[ "$after" -le "$before" ] || fail "files left in /dev/shm: $(ls /dev/shm | grep '^hcomm-ag-')"
echo "PASS"
