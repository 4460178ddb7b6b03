/*
 * The hierarchical allreduce and reduce (coll/net_hier.h): pipelines over
 * pieces of L slices of the vector.
 */
#include "coll/net_hier.h"

/* ---- allreduce and reduce: pieces of L slices --------------------------------------------------
 * Local index i reduces slice i of every piece: the node's reduce-scatter
 * leaves it in the piece's slot (share 0); reduce's rail reduces it into
 * share 1 on the root's node, whose ranks then gather their slices to the
 * root (the root at ring position p is node p / L, local index p % L). */

/* Where piece k of the result goes: the user's buffer, or the padded
 * scratch for a last piece that L does not divide. */
static uint8_t *hc_hier_out(const hc_coll_op_t *op, const hc_hier_t *h, int k)
{
    if (h->pad && k == h->K - 1) return h->pad;
    return (uint8_t *)op->rbuf + (size_t)k * h->piece * op->esize;
}

static void hc_hier_unpad(const hc_coll_op_t *op, const hc_hier_t *h, int k)
{
    if (h->pad && k == h->K - 1)
        memcpy((uint8_t *)op->rbuf + (size_t)k * h->piece * op->esize, h->pad,
               hc_hier_len(op, h, k) * op->esize);
}

/* Stage 0 of both: the node reduce-scatters piece k into this rank's slice. */
static hcomm_status_t hc_hier_slices_rs(hc_coll_op_t *op, hc_hier_t *h, int k,
                                        struct hcomm_request **req_p)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    size_t es = op->esize, len = hc_hier_len(op, h, k), b = hc_hier_share(op, h, k);
    const void *in = (const uint8_t *)op->sbuf + (size_t)k * h->piece * es;
    if (len % h->unit) {
        memcpy(h->pad, in, len * es);
        memset(h->pad + len * es, 0, (h->unit * b - len) * es);
        in = h->pad;
    }
    return hc_coll_child_start(op, cc->hier_node, HC_COLL_REDUCE_SCATTER, in, hc_hier_at(h, k, 0),
                               b, hc_hier_sum(op), 0, req_p);
}

static hcomm_status_t hc_hier_allreduce_init(hc_coll_op_t *op, hc_hier_t *h, size_t *shares_p)
{
    (void)op, (void)h;
    *shares_p = 1;
    return HCOMM_OK;
}

static hcomm_status_t hc_hier_allreduce_start(hc_coll_op_t *op, hc_hier_t *h, int s, int k,
                                              struct hcomm_request **req_p)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    uint8_t *blk = hc_hier_at(h, k, 0);
    size_t b = hc_hier_share(op, h, k);
    if (s == 0) return hc_hier_slices_rs(op, h, k, req_p);
    if (s == 1)
        return hc_coll_child_start(op, cc->hier_rail, HC_COLL_ALLREDUCE, blk, blk, b,
                                   hc_hier_sum(op), 0, req_p);
    return hc_coll_child_start(op, cc->hier_node, HC_COLL_ALLGATHER, blk, hc_hier_out(op, h, k), b,
                               hc_hier_sum(op), 0, req_p);
}

static void hc_hier_allreduce_done(hc_coll_op_t *op, hc_hier_t *h, int s, int k)
{
    if (s == 1 && op->op == HCOMM_AVG)
        hc_hier_avg(op, hc_hier_at(h, k, 0), hc_hier_share(op, h, k));
    if (s == 2) hc_hier_unpad(op, h, k);
}

const hc_hier_pipe_t hc_hier_allreduce_pipe = {
    .nstages = 3,
    .slices = true,
    .lane = {HC_HIER_NODE, HC_HIER_RAIL, HC_HIER_NODE},
    .level = {"reduce-scatter inside the node", "allreduce across nodes",
              "allgather inside the node"},
    .init = hc_hier_allreduce_init,
    .start = hc_hier_allreduce_start,
    .done = hc_hier_allreduce_done,
    .predict = hc_hier_allreduce_predicted,
};

static hcomm_status_t hc_hier_reduce_init(hc_coll_op_t *op, hc_hier_t *h, size_t *shares_p)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    int L = cc->hier_L, pos, rootp = 0;
    const int *order = hc_coll_ring_order(op->comm, &pos);
    if (!order) return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_reduce (hier): ring order");
    while (order[rootp] != op->root)
        rootp++;
    h->root_node = rootp / L;
    h->root_i = rootp % L;
    h->on_root_node = pos / L == h->root_node;
    if (!h->on_root_node) h->lane[2] = HC_HIER_SKIP;
    *shares_p = 2;
    return HCOMM_OK;
}

static hcomm_status_t hc_hier_reduce_start(hc_coll_op_t *op, hc_hier_t *h, int s, int k,
                                           struct hcomm_request **req_p)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    uint8_t *red = hc_hier_at(h, k, 1);
    size_t b = hc_hier_share(op, h, k);
    if (s == 0) return hc_hier_slices_rs(op, h, k, req_p);
    if (s == 1)
        return hc_coll_child_start(op, cc->hier_rail, HC_COLL_REDUCE, hc_hier_at(h, k, 0),
                                   h->on_root_node ? red : NULL, b, hc_hier_sum(op), h->root_node,
                                   req_p);
    bool root = op->comm->rank == op->root;
    return hc_coll_child_start(op, cc->hier_node, HC_COLL_GATHER, red,
                               root ? hc_hier_out(op, h, k) : NULL, b, hc_hier_sum(op), h->root_i,
                               req_p);
}

static void hc_hier_reduce_done(hc_coll_op_t *op, hc_hier_t *h, int s, int k)
{
    if (s == 1 && op->op == HCOMM_AVG && h->on_root_node)
        hc_hier_avg(op, hc_hier_at(h, k, 1), hc_hier_share(op, h, k));
    if (s == 2 && op->comm->rank == op->root) hc_hier_unpad(op, h, k);
}

/* Decided and predicted by the allreduce model (reduce is about half of an
 * allreduce on either side). */
static const hc_hier_pipe_t hc_hier_reduce_pipe = {
    .nstages = 3,
    .slices = true,
    .lane = {HC_HIER_NODE, HC_HIER_RAIL, HC_HIER_NODE},
    .level = {"reduce-scatter inside the node", "reduce across nodes",
              "gather inside the root's node"},
    .init = hc_hier_reduce_init,
    .start = hc_hier_reduce_start,
    .done = hc_hier_reduce_done,
    .predict = hc_hier_allreduce_predicted,
};

hc_step_t hc_net_allreduce_hier(hc_coll_op_t *op)
{
    return hc_hier_run(op, &hc_hier_allreduce_pipe);
}

hc_step_t hc_net_reduce_hier(hc_coll_op_t *op)
{
    return hc_hier_run(op, &hc_hier_reduce_pipe);
}
