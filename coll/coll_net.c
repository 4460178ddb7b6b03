/*
 * Point-to-point collective algorithms: they run over any driver, for
 * communicators that span nodes, that have no node-shared region, or when
 * HCOMM_ALGO forces one. Every message goes through hc_coll_isend/irecv on
 * the communicator's collective context with the op's sequence number as tag,
 * so matching is FIFO per (peer, op): each algorithm posts the messages between
 * a pair of ranks in the same order on both sides, which is all the protocol
 * it needs. step() never waits: it posts, returns PENDING and resumes from
 * its state on the next progress pass.
 *
 * Algorithms and the HCOMM_ALGO names that force them (a name that does not
 * apply to a collective makes it fail with ERR_UNSUPPORTED):
 *
 *   allreduce       hier  across nodes of equal rank counts: reduce-scatter in
 *                         the node, allreduce across (rails), allgather in the
 *                         node (net_hier*.c; auto: by its cost model)
 *                   rd    recursive doubling; non-power-of-two counts fold
 *                         the extra ranks into a partner first (auto: <= 64 KiB)
 *                   ring  pipelined ring reduce-scatter + ring allgather
 *   broadcast,      hier  the root's rail across nodes, then each node
 *   barrier               (net_hier*.c; auto: small, by the model)
 *   reduce          hier  node reduce-scatter, rails reduce to the root's node,
 *                         node gather to the root (net_hier*.c; auto: the allreduce model)
 *   allgather,      hier  rails then node (allgather), node then rails
 *   reduce_scatter        (reduce_scatter), by the model (net_hier*.c); hier's
 *                         allreduce, reduce, allgather and reduce_scatter are
 *                         pipelined over pieces of the vector
 *   reduce          tree  binomial tree to the root (auto: <= 64 KiB)
 *                   ring  pipelined ring reduce-scatter + gather to the root
 *   broadcast       tree  binomial tree (auto: <= 64 KiB)
 *                   ring  pipelined chain root -> root+1 -> ... in chunks
 *   allgather       rd    recursive doubling, power-of-two rank counts only
 *                         (auto: total <= 64 KiB)
 *                   ring  pipelined ring
 *   reduce_scatter  ring  pipelined ring reduce-scatter
 *   alltoall        direct  pairwise exchange (n-1 rounds, several in flight)
 *   gather, scatter direct  linear: the root posts its receives or sends in
 *                           batches (net_vector.c)
 *   allgatherv      ring    a ring in the topology's order, blocks of any size
 *   reduce_scatterv direct  each block to its owner, reduced there in rank order
 *   alltoallv       direct  pairwise exchange
 *   barrier         any name: dissemination (ceil(log2 n) zero-byte rounds);
 *                   there is no other, and forcing a family must not leave a
 *                   job unable to synchronize.
 *
 * Results are identical on every rank, bit for bit: the ring distributes one
 * reduced copy of each slice, and in recursive doubling both partners compute
 * op(lower rank's data, higher rank's data). AVG sums (avg_div 0) until the
 * last reduction of each element, which divides by n once.
 *
 * The pipelined ring cuts each ring step into chunks (<= 1 MiB) and numbers
 * the (step, chunk) units; receives, reductions and sends each advance in
 * unit order, so a chunk can move on to the next step while later chunks of
 * the previous step are still in flight, with at most HC_NET_WINDOW receives
 * and as many sends outstanding.
 */
#include "coll/net.h"

/* ---- the family's table (coll.h: the algorithm registry) ------------------------------ */

static bool hc_net_small(const hc_coll_op_t *op)
{
    return op->bytes <= HC_NET_SMALL_BYTES;
}

static bool hc_net_pof2(const hc_coll_op_t *op)
{
    int n = op->comm->size;
    return (n & (n - 1)) == 0;
}

static bool hc_net_small_total(const hc_coll_op_t *op)
{
    return op->bytes * (size_t)op->comm->size <= HC_NET_SMALL_BYTES;
}

/* Order matters: for each collective the automatic choice is the first
 * entry whose auto_pick says yes. */
const hc_coll_algo_t hc_coll_net_algos[] = {
    {.name = "hier",
     .family = "hier",
     .colls = HC_COLL_BIT(HC_COLL_ALLREDUCE),
     .applies = hc_net_hier_applies,
     .auto_pick = hc_net_hier_auto,
     .step = hc_net_allreduce_hier,
     .state_size = hc_net_hier_state,
     .release = hc_net_hier_release},
    {.name = "rd",
     .family = "rd",
     .colls = HC_COLL_BIT(HC_COLL_ALLREDUCE),
     .auto_pick = hc_net_small,
     .step = hc_net_allreduce_rd,
     .state_size = hc_net_rd_state},
    {.name = "ring",
     .family = "ring",
     .colls = HC_COLL_BIT(HC_COLL_ALLREDUCE),
     .step = hc_net_allreduce_ring,
     .state_size = hc_net_allreduce_ring_state},
    {.name = "hier",
     .family = "hier",
     .colls = HC_COLL_BIT(HC_COLL_REDUCE),
     .applies = hc_net_hier_applies,
     .auto_pick = hc_net_hier_reduce_auto,
     .step = hc_net_reduce_hier,
     .state_size = hc_net_hier_state,
     .release = hc_net_hier_release},
    {.name = "tree",
     .family = "tree",
     .colls = HC_COLL_BIT(HC_COLL_REDUCE),
     .auto_pick = hc_net_small,
     .step = hc_net_reduce_tree,
     .state_size = hc_net_tree_reduce_state},
    {.name = "ring",
     .family = "ring",
     .colls = HC_COLL_BIT(HC_COLL_REDUCE),
     .step = hc_net_reduce_ring,
     .state_size = hc_net_reduce_ring_state},
    {.name = "hier",
     .family = "hier",
     .colls = HC_COLL_BIT(HC_COLL_BROADCAST) | HC_COLL_BIT(HC_COLL_BARRIER),
     .applies = hc_net_hier_applies,
     .auto_pick = hc_net_hier_small_auto,
     .prepare = hc_net_hier_small_prepare,
     .state_size = hc_net_hier_seq_state,
     .release = hc_net_hier_seq_release},
    {.name = "tree",
     .family = "tree",
     .colls = HC_COLL_BIT(HC_COLL_BROADCAST),
     .auto_pick = hc_net_small,
     .step = hc_net_broadcast_tree},
    {.name = "chain",
     .family = "ring",
     .colls = HC_COLL_BIT(HC_COLL_BROADCAST),
     .step = hc_net_broadcast_chain,
     .state_size = hc_net_chain_state},
    {.name = "hier",
     .family = "hier",
     .colls = HC_COLL_BIT(HC_COLL_ALLGATHER) | HC_COLL_BIT(HC_COLL_REDUCE_SCATTER),
     .applies = hc_net_hier_applies,
     .auto_pick = hc_net_hier_blocks_auto,
     .prepare = hc_net_hier_blocks_prepare,
     .state_size = hc_net_hier_state,
     .release = hc_net_hier_release},
    {.name = "rd",
     .family = "rd",
     .colls = HC_COLL_BIT(HC_COLL_ALLGATHER),
     .applies = hc_net_pof2,
     .auto_pick = hc_net_small_total,
     .step = hc_net_allgather_rd},
    {.name = "ring",
     .family = "ring",
     .colls = HC_COLL_BIT(HC_COLL_ALLGATHER),
     .step = hc_net_allgather_ring,
     .state_size = hc_net_allgather_ring_state},
    {.name = "ring",
     .family = "ring",
     .colls = HC_COLL_BIT(HC_COLL_REDUCE_SCATTER),
     .step = hc_net_reduce_scatter_ring,
     .state_size = hc_net_reduce_scatter_ring_state},
    {.name = "pairwise",
     .family = "direct",
     .colls = HC_COLL_BIT(HC_COLL_ALLTOALL),
     .step = hc_net_alltoall,
     .state_size = hc_net_alltoall_state},
    {.name = "linear",
     .family = "direct",
     .colls = HC_COLL_BIT(HC_COLL_GATHER),
     .step = hc_net_gather},
    {.name = "linear",
     .family = "direct",
     .colls = HC_COLL_BIT(HC_COLL_SCATTER),
     .step = hc_net_scatter},
    {.name = "ring",
     .family = "ring",
     .colls = HC_COLL_BIT(HC_COLL_ALLGATHERV),
     .step = hc_net_allgatherv_ring},
    {.name = "direct",
     .family = "direct",
     .colls = HC_COLL_BIT(HC_COLL_REDUCE_SCATTERV),
     .step = hc_net_reduce_scatterv,
     .state_size = hc_net_reduce_scatterv_state},
    {.name = "pairwise",
     .family = "direct",
     .colls = HC_COLL_BIT(HC_COLL_ALLTOALLV),
     .step = hc_net_alltoallv},
    /* One way to do it, whatever HCOMM_ALGO says. */
    {.name = "dissemination",
     .family = NULL,
     .colls = HC_COLL_BIT(HC_COLL_BARRIER),
     .step = hc_net_barrier},
    {.name = NULL},
};
