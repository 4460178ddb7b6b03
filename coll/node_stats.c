/*
 * Level-2 statistics of the node family (coll/node.h): what moves between
 * the node's ranks, per peer, counted out of line.
 */
#include "coll/node.h"

/* ---- level-2 statistics: what moves between the node's ranks ------------------- */

void hc_node_peer(const hc_coll_op_t *op, int j, uint64_t tx_msgs, size_t tx,
                         uint64_t rx_msgs, size_t rx)
{
    if (tx_msgs || rx_msgs)
        hc_stats_peer_add(op->comm->world_ranks[j], tx_msgs, tx, rx_msgs, rx);
}

/* Inline and node-direct allreduce/reduce, one tick of bb bytes: every
 * rank that wants the result reduces bb out of every rank's slot or block. */
void hc_node_count_direct(const hc_coll_op_t *op, const hc_coll_node_t *nd,
                                             size_t bb)
{
    bool mine = hc_node_wants(op, nd->me);
    for (int j = 0; j < nd->n && bb; j++)
        if (j != nd->me) {
            bool theirs = hc_node_wants(op, j);
            hc_node_peer(op, j, theirs, theirs ? bb : 0, mine, mine ? bb : 0);
        }
}

/* Node-staged allreduce, a tick of ec elements, once this rank has reduced
 * its slice: it staged slice j for j to reduce, reduced its own slice out
 * of j's block, and its slice of the result is there for j to copy. */
void hc_node_count_staged(const hc_coll_op_t *op, const hc_coll_node_t *nd,
                                             size_t ec)
{
    size_t mine = hc_node_slice_bytes(op, ec, nd->n, nd->me);
    for (int j = 0; j < nd->n; j++) {
        if (j == nd->me)
            continue;
        size_t theirs = hc_node_slice_bytes(op, ec, nd->n, j);
        bool res = mine && hc_node_wants(op, j);
        hc_node_peer(op, j, (theirs != 0) + res, theirs + (res ? mine : 0), mine != 0, mine);
    }
}

/* ... and once it has copied the result block out: slice j from j. */
void hc_node_count_staged_out(const hc_coll_op_t *op, const hc_coll_node_t *nd,
                                                 size_t ec)
{
    for (int j = 0; j < nd->n; j++) {
        size_t theirs = j == nd->me ? 0 : hc_node_slice_bytes(op, ec, nd->n, j);
        hc_node_peer(op, j, 0, 0, theirs != 0, theirs);
    }
}

/* Every peer and this rank exchange bytes each way in msgs blocks
 * (allgather, alltoall, reduce_scatter: staged and single copy; the
 * single-copy allreduce that pulls every peer's whole input). */
void hc_node_count_each(const hc_coll_op_t *op, const hc_coll_node_t *nd,
                                           uint64_t msgs, size_t bytes)
{
    for (int j = 0; j < nd->n && bytes; j++)
        if (j != nd->me)
            hc_node_peer(op, j, msgs, bytes, msgs, bytes);
}

/* Single-copy allreduce by slices (mapped, or CMA get and write) in
 * chunks of chunk elements: this rank reads its slice out of j's input
 * and writes it into j's output; j does the same with its slice here. */
void hc_node_count_sliced(const hc_coll_op_t *op, const hc_coll_node_t *nd,
                                             size_t chunk)
{
    size_t lo, hi;
    hc_node_slice(op->count, nd->n, nd->me, &lo, &hi);
    uint64_t my_msgs = (hi - lo + chunk - 1) / chunk;
    size_t mine = (hi - lo) * op->esize;
    for (int j = 0; j < nd->n; j++) {
        if (j == nd->me)
            continue;
        hc_node_slice(op->count, nd->n, j, &lo, &hi);
        uint64_t msgs = my_msgs + (hi - lo + chunk - 1) / chunk;
        size_t bytes = mine + (hi - lo) * op->esize;
        hc_node_peer(op, j, msgs, bytes, msgs, bytes);
    }
}

/* Broadcast, one tick of bb bytes: receivers copy them out of the root's
 * block. */
void hc_node_count_bcast(const hc_coll_op_t *op, const hc_coll_node_t *nd,
                                            size_t bb)
{
    if (!bb)
        return;
    if (nd->me != op->root) {
        hc_node_peer(op, op->root, 0, 0, 1, bb);
        return;
    }
    for (int j = 0; j < nd->n; j++)
        if (j != nd->me)
            hc_node_peer(op, j, 1, bb, 0, 0);
}
