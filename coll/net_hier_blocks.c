/*
 * The hierarchical allgather and reduce_scatter (coll/net_hier.h):
 * pipelines over pieces of every rank's block.
 */
#include "coll/net_hier.h"

/* ---- allgather and reduce_scatter: pieces of every rank's block ---------------------------------
 * Along the ring the comm is N node blocks of L ranks: position j * L + i
 * is (node j, local index i). allgather: the rails first (each rank gets
 * piece k of the blocks of its local index from every node: the least a
 * node can receive), then the node (each local index contributes its N),
 * then a copy from (i, j) order into rank order. reduce_scatter: piece k
 * of every block copied into (i, j) order, the node reduce-scatters N
 * pieces to each local index, then the rail reduce-scatters them one per
 * node, straight into the result. A slot holds N + n shares: the N
 * pieces of the rail's level, then the n of the node's. */

static hcomm_status_t hc_hier_blocks_init(hc_coll_op_t *op, hc_hier_t *h, size_t *shares_p)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    int pos;
    h->ring = hc_coll_ring_order(op->comm, &pos);
    if (!h->ring)
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s (hier): ring order", hc_coll_name(op->kind));
    *shares_p = (size_t)cc->hier_N + (size_t)op->comm->size;
    return HCOMM_OK;
}

/* Piece k of every block between rank order (blocks: n blocks of op->bytes)
 * and (i, j) order in the slot (packed: pieces of the piece's length). */
static void hc_hier_permute(const hc_coll_op_t *op, const hc_hier_t *h, int k,
                            const uint8_t *from_blocks, uint8_t *to_blocks)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    int N = cc->hier_N, L = cc->hier_L;
    size_t len = hc_hier_len(op, h, k) * op->esize, at = (size_t)k * h->piece * op->esize;
    uint8_t *ij = hc_hier_at(h, k, (size_t)N);
    for (int i = 0; i < L; i++)
        for (int j = 0; j < N; j++) {
            size_t r = (size_t)h->ring[j * L + i] * op->bytes + at, x = ((size_t)i * N + j) * len;
            if (to_blocks)
                memcpy(to_blocks + r, ij + x, len);
            else
                memcpy(ij + x, from_blocks + r, len);
        }
}

static hcomm_status_t hc_hier_allgather_start(hc_coll_op_t *op, hc_hier_t *h, int s, int k,
                                              struct hcomm_request **req_p)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    size_t len = hc_hier_len(op, h, k), N = (size_t)cc->hier_N;
    /* In place, sbuf is this rank's block of rbuf: the copies of earlier
     * pieces rewrite only its earlier pieces, with the same bytes. */
    if (s == 0)
        return hc_coll_child_start(op, cc->hier_rail, HC_COLL_ALLGATHER,
                                   (const uint8_t *)op->sbuf + (size_t)k * h->piece * op->esize,
                                   hc_hier_at(h, k, 0), len, op->op, 0, req_p);
    return hc_coll_child_start(op, cc->hier_node, HC_COLL_ALLGATHER, hc_hier_at(h, k, 0),
                               hc_hier_at(h, k, N), len * N, op->op, 0, req_p);
}

static void hc_hier_allgather_done(hc_coll_op_t *op, hc_hier_t *h, int s, int k)
{
    if (s == 1) hc_hier_permute(op, h, k, NULL, op->rbuf);
}

const hc_hier_pipe_t hc_hier_allgather_pipe = {
    .nstages = 2,
    .lane = {HC_HIER_RAIL, HC_HIER_NODE},
    .level = {"allgather across nodes", "allgather inside the node"},
    .init = hc_hier_blocks_init,
    .start = hc_hier_allgather_start,
    .done = hc_hier_allgather_done,
    .predict = hc_hier_blocks_predicted,
};

static hcomm_status_t hc_hier_reduce_scatter_start(hc_coll_op_t *op, hc_hier_t *h, int s, int k,
                                                   struct hcomm_request **req_p)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    size_t len = hc_hier_len(op, h, k), N = (size_t)cc->hier_N;
    if (s == 0) {
        hc_hier_permute(op, h, k, op->sbuf, NULL);
        return hc_coll_child_start(op, cc->hier_node, HC_COLL_REDUCE_SCATTER, hc_hier_at(h, k, N),
                                   hc_hier_at(h, k, 0), len * N, hc_hier_sum(op), 0, req_p);
    }
    return hc_coll_child_start(op, cc->hier_rail, HC_COLL_REDUCE_SCATTER, hc_hier_at(h, k, 0),
                               (uint8_t *)op->rbuf + (size_t)k * h->piece * op->esize, len,
                               hc_hier_sum(op), 0, req_p);
}

static void hc_hier_reduce_scatter_done(hc_coll_op_t *op, hc_hier_t *h, int s, int k)
{
    if (s == 1 && op->op == HCOMM_AVG)
        hc_hier_avg(op, (uint8_t *)op->rbuf + (size_t)k * h->piece * op->esize,
                    hc_hier_len(op, h, k));
}

const hc_hier_pipe_t hc_hier_reduce_scatter_pipe = {
    .nstages = 2,
    .lane = {HC_HIER_NODE, HC_HIER_RAIL},
    .level = {"reduce-scatter inside the node", "reduce-scatter across nodes"},
    .init = hc_hier_blocks_init,
    .start = hc_hier_reduce_scatter_start,
    .done = hc_hier_reduce_scatter_done,
    .predict = hc_hier_blocks_predicted,
};

static hc_step_t hc_net_allgather_hier(hc_coll_op_t *op)
{
    return hc_hier_run(op, &hc_hier_allgather_pipe);
}

static hc_step_t hc_net_reduce_scatter_hier(hc_coll_op_t *op)
{
    return hc_hier_run(op, &hc_hier_reduce_scatter_pipe);
}

hc_coll_step_fn hc_net_hier_blocks_prepare(hc_coll_op_t *op, const char *forced)
{
    (void)forced;
    return op->kind == HC_COLL_ALLGATHER ? hc_net_allgather_hier : hc_net_reduce_scatter_hier;
}
