#!/bin/sh
# fake_nodes.sh NODES cyclic|block PROG [ARGS...]
# Run by hcommrun on one host: makes this rank (HCOMM_RANK of HCOMM_SIZE)
# one of NODES "nodes": HCOMM_NODE_ID=fakeK and the local rank and size to
# match, so that ranks of one fake node share memory and the others talk
# through the network driver (tcp over loopback here). cyclic puts rank r
# on node r % NODES (interleaved numbering: 0 and 2 on one node, 1 and 3 on
# the other), block on node r / (SIZE / NODES).
set -eu
nodes=$1 place=$2
shift 2
r=${HCOMM_RANK:?run me under hcommrun} s=${HCOMM_SIZE:?}
case $place in
cyclic)
    k=$((r % nodes)) lr=$((r / nodes)) ls=$(((s - r % nodes + nodes - 1) / nodes)) ;;
block)
    [ $((s % nodes)) = 0 ] || { echo "fake_nodes.sh: $s ranks do not split into $nodes nodes" >&2; exit 2; }
    per=$((s / nodes)) k=$((r / per)) lr=$((r % per)) ls=$((s / nodes)) ;;
*)
    echo "fake_nodes.sh: placement $place: want cyclic or block" >&2; exit 2 ;;
esac
export HCOMM_NODE_ID="fake$k" HCOMM_LOCAL_RANK=$lr HCOMM_LOCAL_SIZE=$ls
exec "$@"
