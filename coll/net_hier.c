/*
 * Hierarchical allreduce (docs/topology.md) for communicators of N >= 2
 * nodes with L >= 2 of their ranks on each:
 *   1. reduce-scatter inside the node (node-shared memory): local index i
 *      gets slice i of the node's sum;
 *   2. allreduce of slice i with the local ranks i of the other nodes, all
 *      L rails at once, each its own internal communicator in ring order;
 *   3. allgather of the slices inside the node.
 * Each level is a collective of its own on an internal communicator
 * (hc_coll_child_start), so it runs whatever algorithm that level picks
 * (node-staged inside, rd or ring across). count % L != 0: the vector is
 * padded to L equal slices in scratch. AVG sums at every level and divides
 * once, before the allgather, so every rank holds the same bits.
 *
 * The automatic choice is a cost model (time = latency + bytes / bandwidth
 * per level, docs/topology.md); HCOMM_LOG=info prints its predictions for
 * each size class and the measured time of the first hierarchical call.
 */
#include "coll/net.h"

#include "mem/mem.h"

#include <stdio.h>

typedef struct {
    struct hcomm_request *child;
    size_t b;     /* elements per slice */
    uint8_t *blk; /* this rank's slice (b elements) */
    uint8_t *pad; /* L * b elements when count % L, else NULL */
    uint64_t t0;  /* start, when this call's time is to be logged */
} hc_hier_t;

/* ---- the cost model -------------------------------------------------------------------------- */

/* Latency (us) and bandwidth (GB/s) per link class, until a probe measures
 * them: shared memory inside a host, a network link between nodes. */
#define HC_HIER_A_HOST 2.0
#define HC_HIER_B_HOST 8.0
#define HC_HIER_A_NET 15.0
#define HC_HIER_B_NET 1.25

static double hc_hier_log2(int n)
{
    int k = 0;
    while ((1 << k) < n) k++;
    return k;
}

typedef struct {
    double ring, rd, hier;
} hc_hier_model_t;

/* Predicted microseconds of allreduce of `bytes` on comm (N nodes x L).
 * Uses only what every rank knows alike (the map, the comm, the size), so
 * that every rank makes the same choice. */
static hc_hier_model_t hc_hier_predict(struct hcomm_comm *comm, size_t bytes)
{
    hc_coll_comm_t *cc = comm->coll_priv;
    double S = (double)bytes / 1e3; /* bytes / (GB/s) in us: bytes / 1e3 / GBps */
    int n = comm->size, N = cc->hier_N, L = cc->hier_L, pos;
    const hc_topo_map_t *map = hc_ctx.topo;
    /* The ring: every step waits for its slowest link, a network link; a
     * node's NIC carries as many ring links as leave that node. */
    const int *order = hc_coll_ring_order(comm, &pos);
    int per_node = 1;
    if (order && map) {
        int x = hc_topo_ring_crossings(map, comm->world_ranks, n, order, HC_TOPO_SWITCH);
        per_node = (x + N - 1) / N;
        if (per_node < 1) per_node = 1;
    }
    hc_hier_model_t m;
    m.ring = 2.0 * (n - 1) * (HC_HIER_A_NET + S / n / (HC_HIER_B_NET / per_node));
    /* Recursive doubling: round k pairs r with r ^ 2^k; a round lasts as
     * long as its slowest pair (over the power-of-two part of the comm). */
    int pof2 = 1;
    while (pof2 * 2 <= n) pof2 *= 2;
    m.rd = n > pof2 ? 2 * (HC_HIER_A_NET + S / HC_HIER_B_NET) : 0;
    for (int d = 1; d < pof2; d *= 2) {
        bool cross = false;
        for (int r = 0; r < pof2 && !cross && map; r++)
            cross = map->node[comm->world_ranks[r]] != map->node[comm->world_ranks[r ^ d]];
        m.rd += cross || !map ? HC_HIER_A_NET + S / HC_HIER_B_NET : HC_HIER_A_HOST + S / HC_HIER_B_HOST;
    }
    /* hier: three collectives in a row, each with its start cost. */
    double intra = 2.0 * (HC_HIER_A_HOST + (L - 1) * (HC_HIER_A_HOST + S / L / HC_HIER_B_HOST));
    /* L rails share the node's link: each moves S/L at a 1/L share. */
    double rail_ring = 2.0 * (N - 1) * (HC_HIER_A_NET + S / N / HC_HIER_B_NET);
    double rail_rd = hc_hier_log2(N) * (HC_HIER_A_NET + S / HC_HIER_B_NET);
    m.hier = intra + HC_HIER_A_HOST + (rail_ring < rail_rd ? rail_ring : rail_rd);
    return m;
}

static uint64_t hc_hier_logged; /* size classes whose prediction was printed */
static uint64_t hc_hier_timed;  /* size classes whose hier time was printed */

static int hc_hier_class(size_t bytes)
{
    return bytes ? 64 - __builtin_clzll(bytes) : 0;
}

bool hc_net_hier_applies(const hc_coll_op_t *op)
{
    return op->comm->size >= 4 && hc_coll_hier_ready(op->comm);
}

bool hc_net_hier_auto(const hc_coll_op_t *op)
{
    if (!hc_net_hier_applies(op)) return false; /* the registry asks auto_pick first */
    /* Decided once per communicator and size class (a power of two: the
     * model runs on the class's upper bound). */
    hc_coll_comm_t *cc = op->comm->coll_priv;
    int cls = hc_hier_class(op->bytes);
    if (cc->hier_decided & (1ull << cls)) return cc->hier_yes & (1ull << cls);
    size_t ub = cls >= 63 ? SIZE_MAX : ((size_t)1 << cls) - 1;
    if (ub < op->bytes) ub = op->bytes;
    hc_hier_model_t m = hc_hier_predict(op->comm, ub);
    double flat = ub <= HC_NET_SMALL_BYTES ? m.rd : m.ring;
    bool pick = m.hier < flat;
    cc->hier_decided |= 1ull << cls;
    if (pick) cc->hier_yes |= 1ull << cls;
    if (hc_log_level_current >= HC_LOG_INFO && !(hc_hier_logged & (1ull << cls)) && op->comm->rank == 0) {
        hc_hier_logged |= 1ull << cls;
        hc_log_info("topology model: allreduce of %zu bytes on %d nodes x %d ranks: predicted "
                    "hier %.1f us, ring %.1f us, rd %.1f us -> %s", op->bytes, cc->hier_N, cc->hier_L,
                    m.hier, m.ring, m.rd, pick ? "hier" : ub <= HC_NET_SMALL_BYTES ? "rd" : "ring");
    }
    return pick;
}

size_t hc_net_hier_state(const hc_coll_op_t *op)
{
    (void)op;
    return sizeof(hc_hier_t);
}

/* The slices live in the communicator's scratch, pool memory kept from
 * call to call (registered once, no page faults per call: a fresh buffer
 * per call made the node's single-copy reduce-scatter 3x slower). Only the
 * head of the communicator's queue runs, so one call uses it at a time. */
static uint8_t *hc_hier_scratch(hc_coll_comm_t *cc, size_t bytes)
{
    if (cc->hier_buf_bytes < bytes) {
        if (cc->hier_buf) hc_mem_free(cc->hier_buf);
        cc->hier_buf = NULL;
        cc->hier_buf_bytes = 0;
        void *p;
        if (hc_mem_alloc(bytes, &p) != HCOMM_OK) return NULL;
        cc->hier_buf = p;
        cc->hier_buf_bytes = bytes;
    }
    return cc->hier_buf;
}

void hc_net_hier_release(hc_coll_op_t *op)
{
    hc_hier_t *h = op->tmp;
    if (h && h->child) {
        hc_coll_child_end(h->child);
        h->child = NULL;
    }
}

/* The running level's outcome: pending, done (its request freed), failed. */
static hc_step_t hc_hier_wait(hc_hier_t *h, const char *level)
{
    struct hcomm_request *req = h->child;
    if (!req->done) return HC_STEP_PENDING;
    hcomm_status_t st = req->status;
    hc_request_free(req);
    h->child = NULL;
    if (st != HCOMM_OK)
        return hc_step_fail(hc_error(st, "hcomm_allreduce (hier): its %s failed: %s", level,
                                     hc_error_last()));
    if (h->t0) hc_log_debug("hier: %s done at %.1f us", level, (double)(hc_time_ns() - h->t0) / 1e3);
    return HC_STEP_DONE;
}

hc_step_t hc_net_allreduce_hier(hc_coll_op_t *op)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    hc_hier_t *h = op->tmp;
    hcomm_op_t sum = op->op == HCOMM_AVG ? HCOMM_SUM : op->op;
    size_t es = op->esize;
    hc_step_t t;
    switch (op->phase) {
    case 0: {
        if (!h) {
            if (hc_net_alloc(op) != HCOMM_OK) return hc_step_fail(HCOMM_ERR_NO_MEMORY);
            h = op->tmp;
            size_t L = (size_t)cc->hier_L;
            *h = (hc_hier_t){.b = (op->count + L - 1) / L};
            size_t blk_bytes = HC_ALIGN_UP(h->b * es, (size_t)HC_CACHE_LINE);
            h->blk = hc_hier_scratch(cc, blk_bytes + (op->count % L ? L * h->b * es : 0));
            if (!h->blk)
                return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_allreduce (hier): %zu bytes "
                                             "of scratch", blk_bytes + L * h->b * es));
            if (op->count % L) {
                h->pad = h->blk + HC_ALIGN_UP(h->b * es, (size_t)HC_CACHE_LINE);
                memcpy(h->pad, op->sbuf, op->bytes);
                memset(h->pad + op->bytes, 0, L * h->b * es - op->bytes);
            }
            int cls = hc_hier_class(op->bytes);
            if (hc_log_level_current >= HC_LOG_DEBUG ||
                (hc_log_level_current >= HC_LOG_INFO && op->comm->rank == 0 && !(hc_hier_timed & (1ull << cls)))) {
                hc_hier_timed |= 1ull << cls;
                h->t0 = hc_time_ns();
            }
        }
        const void *in = h->pad ? h->pad : op->sbuf;
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_REDUCE_SCATTER, in, h->blk, h->b, sum,
                                        &h->child));
        op->phase = 1;
    } /* fall through */
    case 1:
        t = hc_hier_wait(h, "reduce-scatter inside the node");
        if (!hc_step_ok(t)) return t;
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_rail, HC_COLL_ALLREDUCE, h->blk, h->blk, h->b, sum,
                                        &h->child));
        op->phase = 2;
        /* fall through */
    case 2:
        t = hc_hier_wait(h, "allreduce across nodes");
        if (!hc_step_ok(t)) return t;
        if (op->op == HCOMM_AVG) {
            const void *src[1] = {h->blk};
            hc_reduce(h->blk, src, 1, h->b, op->dtype, HCOMM_AVG, op->comm->size);
        }
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_ALLGATHER, h->blk,
                                        h->pad ? h->pad : op->rbuf, h->b, sum, &h->child));
        op->phase = 3;
        /* fall through */
    case 3:
        t = hc_hier_wait(h, "allgather inside the node");
        if (!hc_step_ok(t)) return t;
        if (h->pad) memcpy(op->rbuf, h->pad, op->bytes);
        if (h->t0) {
            hc_hier_model_t m = hc_hier_predict(op->comm, op->bytes);
            hc_log_info("topology model: allreduce of %zu bytes by hier: predicted %.1f us, measured "
                        "%.1f us (first call of its size class)", op->bytes, m.hier,
                        (double)(hc_time_ns() - h->t0) / 1e3);
        }
        return HC_STEP_DONE;
    }
    return hc_step_fail(hc_error(HCOMM_ERR_INTERNAL, "hcomm_allreduce (hier): phase %d", op->phase));
}
