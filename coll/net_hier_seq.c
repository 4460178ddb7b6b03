/*
 * The hierarchical broadcast and barrier (coll/net_hier.h): their levels
 * one after the other, and the model that picks them for small messages.
 */
#include "coll/net_hier.h"

/* ---- broadcast and barrier: levels in sequence ------------------------------------------------
 * One child collective at a time (h->child).
 * broadcast: the root's rail broadcasts from the root across nodes (only
 * the ranks of the root's local index take part), then every node
 * broadcasts from its rank of that index. barrier: the node's barrier, the
 * barrier of rail 0 across nodes, the node's barrier again. The model:
 * log2(N) network rounds and one node step per level against the flat
 * algorithm's log2(n) rounds, each as slow as its slowest pair. */

typedef struct {
    struct hcomm_request *child;
} hc_hier_seq_t;

size_t hc_net_hier_seq_state(const hc_coll_op_t *op)
{
    (void)op;
    return sizeof(hc_hier_seq_t);
}

void hc_net_hier_seq_release(hc_coll_op_t *op)
{
    hc_hier_seq_t *h = op->tmp;
    if (h && h->child) hc_coll_child_end(h->child, op->end_status);
    if (h) h->child = NULL;
}

static hc_hier_seq_t *hc_hier_seq(hc_coll_op_t *op)
{
    if (op->tmp) return op->tmp;
    if (hc_net_alloc(op) != HCOMM_OK) return NULL;
    hc_hier_seq_t *h = op->tmp;
    memset(h, 0, sizeof(*h));
    return h;
}

static hc_step_t hc_hier_seq_wait(hc_coll_op_t *op, hc_hier_seq_t *h, const char *level)
{
    if (!h->child) return HC_STEP_DONE;
    if (!h->child->done) return HC_STEP_PENDING;
    if (h->child->status != HCOMM_OK)
        return hc_hier_child_fail(hc_coll_name(op->kind), level, h->child);
    hc_request_free(h->child);
    h->child = NULL;
    return HC_STEP_DONE;
}

/* Flat binomial tree (broadcast) or dissemination (barrier) rounds, each
 * as slow as its slowest pair over the whole comm (what every rank knows
 * alike), against hier's log2(N) network rounds plus its node levels. */
bool hc_net_hier_small_auto(const hc_coll_op_t *op)
{
    if (!hc_net_hier_applies(op) || op->bytes > HC_NET_SMALL_BYTES) return false;
    hc_coll_comm_t *cc = op->comm->coll_priv;
    const hc_topo_map_t *map = hc_ctx.topo;
    double a_net, b_net;
    hc_hier_net(&a_net, &b_net);
    double S = (double)op->bytes / 1e3;
    int n = op->comm->size;
    const int *w = op->comm->world_ranks;
    double flat = 0;
    for (int d = 1; d < n; d *= 2) {
        bool cross = false;
        for (int v = 0; v < n && !cross && map; v++) {
            int a, b;
            if (op->kind == HC_COLL_BARRIER) {
                a = v, b = (v + d) % n;
            } else {
                if (v % (2 * d) || v + d >= n) continue;
                a = (v + op->root) % n, b = (v + d + op->root) % n;
            }
            cross = map->node[w[a]] != map->node[w[b]];
        }
        flat += cross || !map ? a_net + S / b_net : HC_HIER_A_HOST + S / HC_HIER_B_HOST;
    }
    int levels = op->kind == HC_COLL_BARRIER ? 3 : 2;
    double hier = hc_hier_log2(cc->hier_N) * (a_net + S / b_net) +
                  (levels - 1) * (HC_HIER_A_HOST + S / HC_HIER_B_HOST) + levels * HC_HIER_LEVEL_US;
    return hier < flat;
}

hc_step_t hc_net_broadcast_hier(hc_coll_op_t *op)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    hc_hier_seq_t *h = hc_hier_seq(op);
    if (!h) return hc_step_fail(HCOMM_ERR_NO_MEMORY);
    int L = cc->hier_L, pos, rootp = 0;
    const int *order = hc_coll_ring_order(op->comm, &pos);
    if (!order)
        return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_broadcast (hier): ring order"));
    while (order[rootp] != op->root)
        rootp++;
    int root_node = rootp / L, root_i = rootp % L; /* the hier comms' ranks of the root */
    hc_step_t t;
    switch (op->phase) {
    case 0:
        if (cc->hier_i == root_i)
            HC_STEP_TRY(hc_coll_child_start(op, cc->hier_rail, HC_COLL_BROADCAST, op->rbuf,
                                            op->rbuf, op->count, op->op, root_node, &h->child));
        op->phase = 1;
        /* fall through */
    case 1:
        t = hc_hier_seq_wait(op, h, "broadcast across nodes");
        if (!hc_step_ok(t)) return t;
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_BROADCAST, op->rbuf, op->rbuf,
                                        op->count, op->op, root_i, &h->child));
        op->phase = 2;
        /* fall through */
    case 2:
        return hc_hier_seq_wait(op, h, "broadcast inside the node");
    }
    return hc_step_fail(
        hc_error(HCOMM_ERR_INTERNAL, "hcomm_broadcast (hier): phase %d", op->phase));
}

hc_step_t hc_net_barrier_hier(hc_coll_op_t *op)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    hc_hier_seq_t *h = hc_hier_seq(op);
    if (!h) return hc_step_fail(HCOMM_ERR_NO_MEMORY);
    hc_step_t t;
    switch (op->phase) {
    case 0:
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_BARRIER, NULL, NULL, 0, op->op,
                                        0, &h->child));
        op->phase = 1;
        /* fall through */
    case 1:
        t = hc_hier_seq_wait(op, h, "barrier inside the node");
        if (!hc_step_ok(t)) return t;
        if (cc->hier_i == 0)
            HC_STEP_TRY(hc_coll_child_start(op, cc->hier_rail, HC_COLL_BARRIER, NULL, NULL, 0,
                                            op->op, 0, &h->child));
        op->phase = 2;
        /* fall through */
    case 2:
        t = hc_hier_seq_wait(op, h, "barrier across nodes");
        if (!hc_step_ok(t)) return t;
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_BARRIER, NULL, NULL, 0, op->op,
                                        0, &h->child));
        op->phase = 3;
        /* fall through */
    case 3:
        return hc_hier_seq_wait(op, h, "barrier inside the node (release)");
    }
    return hc_step_fail(hc_error(HCOMM_ERR_INTERNAL, "hcomm_barrier (hier): phase %d", op->phase));
}

hc_coll_step_fn hc_net_hier_small_prepare(hc_coll_op_t *op, const char *forced)
{
    (void)forced;
    return op->kind == HC_COLL_BROADCAST ? hc_net_broadcast_hier : hc_net_barrier_hier;
}
