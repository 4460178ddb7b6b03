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

/* The levels are pipelined over pieces of the vector: while the rails
 * reduce piece k, the node reduce-scatters piece k+1 and allgathers piece
 * k-1. Node collectives are issued in one fixed order on every rank, RS0,
 * RS1, AG0, RS2, AG1, ..., RS(K-1), AG(K-2), AG(K-1) (the node comm runs
 * them in that order), rail allreduces in piece order, each when what it
 * needs is there; slices cycle through HC_HIER_DEPTH buffers. */
#define HC_HIER_DEPTH 4
#define HC_HIER_PIECE_MIN ((size_t)1 << 20) /* bytes */
#define HC_HIER_PIECES_MAX 8

typedef struct {
    int K;          /* pieces */
    size_t piece;   /* elements per piece (L slices of bp); the last may be shorter */
    size_t bp;      /* slice elements of a full piece */
    uint8_t *blk[HC_HIER_DEPTH];
    uint8_t *pad;   /* the last piece, padded to L slices, when L does not divide it */
    int next_node;  /* next node collective of the fixed order to issue (0 .. 2K-1) */
    int next_rail;  /* next piece to issue its rail allreduce */
    int rs_done, ar_done, ag_done; /* pieces through each level (they complete in order) */
    struct hcomm_request *nq[2 * HC_HIER_DEPTH]; /* node collectives in flight, oldest first */
    int nq_piece[2 * HC_HIER_DEPTH];
    bool nq_ag[2 * HC_HIER_DEPTH];
    int nq_n;
    struct hcomm_request *rq[HC_HIER_DEPTH]; /* rail allreduces in flight */
    int rq_n;
    uint64_t t0; /* start, when this call's time is to be logged */
} hc_hier_t;

/* ---- the cost model -------------------------------------------------------------------------- */

/* Latency (us) and bandwidth (GB/s) per link class, until a probe measures
 * them: shared memory inside a host, a network link between nodes. */
#define HC_HIER_A_HOST 2.0
#define HC_HIER_B_HOST 8.0
#define HC_HIER_A_NET 15.0
#define HC_HIER_B_NET 1.25
/* Each child collective's start and wake-up, measured on netns nodes:
 * hier broadcast of 8 B took 17-20 us against the binomial tree's 9-10 us
 * with the same single cross-node round. */
#define HC_HIER_LEVEL_US 4.0

static double hc_hier_log2(int n)
{
    int k = 0;
    while ((1 << k) < n) k++;
    return k;
}

typedef struct {
    double ring, rd, hier;
} hc_hier_model_t;

/* Recursive doubling over the power-of-two part of comm: round k pairs r
 * with r ^ 2^k and lasts as long as its slowest pair (rounds whose pairs
 * all share a node cost the host class). S: microseconds-per-GB/s of the
 * first round's message (bytes / 1e3); growing: round k moves 2^k times
 * that (allgather), else the same (allreduce). */
static double hc_hier_rd_time(struct hcomm_comm *comm, const hc_topo_map_t *map, double a_net, double b_net,
                              double S, bool growing)
{
    int n = comm->size, pof2 = 1;
    while (pof2 * 2 <= n) pof2 *= 2;
    double t = n > pof2 ? 2 * (a_net + S / b_net) : 0, m = S;
    for (int d = 1; d < pof2; d *= 2, m = growing ? 2 * m : m) {
        bool cross = false;
        for (int r = 0; r < pof2 && !cross && map; r++)
            cross = map->node[comm->world_ranks[r]] != map->node[comm->world_ranks[r ^ d]];
        t += cross || !map ? a_net + m / b_net : HC_HIER_A_HOST + m / HC_HIER_B_HOST;
    }
    return t;
}

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
    /* Measured by the calibration probe when it ran. */
    double a_net = map && map->net_gbps > 0 ? map->net_lat_us : HC_HIER_A_NET;
    double b_net = map && map->net_gbps > 0 ? map->net_gbps : HC_HIER_B_NET;
    hc_hier_model_t m;
    m.ring = 2.0 * (n - 1) * (a_net + S / n / (b_net / per_node));
    m.rd = hc_hier_rd_time(comm, map, a_net, b_net, S, false);
    /* hier: three collectives in a row, each with its start cost. */
    double intra = 2.0 * (HC_HIER_A_HOST + (L - 1) * (HC_HIER_A_HOST + S / L / HC_HIER_B_HOST));
    /* L rails share the node's link: each moves S/L at a 1/L share. */
    double rail_ring = 2.0 * (N - 1) * (a_net + S / N / b_net);
    double rail_rd = hc_hier_log2(N) * (a_net + S / b_net);
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
    if (!h) return;
    for (int i = 0; i < h->nq_n; i++) hc_coll_child_end(h->nq[i], op->end_status);
    for (int i = 0; i < h->rq_n; i++) hc_coll_child_end(h->rq[i], op->end_status);
    h->nq_n = h->rq_n = 0;
}

/* Elements of piece k, and of its slices. */
static size_t hc_hier_len(const hc_coll_op_t *op, const hc_hier_t *h, int k)
{
    size_t lo = (size_t)k * h->piece;
    return HC_MIN(h->piece, op->count - lo);
}

static size_t hc_hier_slice(const hc_coll_op_t *op, const hc_hier_t *h, int k, int L)
{
    return (hc_hier_len(op, h, k) + (size_t)L - 1) / (size_t)L;
}

static bool hc_hier_padded(const hc_coll_op_t *op, const hc_hier_t *h, int k, int L)
{
    return hc_hier_len(op, h, k) % (size_t)L != 0;
}

/* Why a child collective failed: the reason its communicator recorded
 * when it broke (copied: the caller's hc_error reuses the error buffer). */
static hc_step_t hc_hier_child_fail(const char *what, const char *level, struct hcomm_request *req)
{
    char why[512]; /* as long as broken_why */
    hc_coll_comm_t *cc = req->comm ? req->comm->coll_priv : NULL;
    snprintf(why, sizeof(why), "%s", cc && cc->broken ? cc->broken_why : hcomm_strerror(req->status));
    return hc_step_fail(hc_error(req->status, "%s (hier): its %s failed: %s", what, level, why));
}

static hc_step_t hc_hier_failed(struct hcomm_request *req, const char *level)
{
    return hc_hier_child_fail("hcomm_allreduce", level, req);
}

static hc_step_t hc_hier_setup(hc_coll_op_t *op, hc_coll_comm_t *cc)
{
    if (hc_net_alloc(op) != HCOMM_OK) return hc_step_fail(HCOMM_ERR_NO_MEMORY);
    hc_hier_t *h = op->tmp;
    memset(h, 0, sizeof(*h));
    size_t L = (size_t)cc->hier_L, es = op->esize;
    size_t piece_bytes = HC_MAX(HC_HIER_PIECE_MIN * L, op->bytes / HC_HIER_PIECES_MAX);
    h->bp = HC_MAX((size_t)1, (piece_bytes / es + L - 1) / L);
    if (h->bp * L >= op->count) h->bp = (op->count + L - 1) / L; /* one piece */
    h->piece = h->bp * L;
    h->K = (int)((op->count + h->piece - 1) / h->piece);
    if (h->K < 1) h->K = 1;
    size_t slot = HC_ALIGN_UP(h->bp * es, (size_t)HC_CACHE_LINE);
    int depth = HC_MIN(h->K, HC_HIER_DEPTH);
    bool pad = hc_hier_padded(op, h, h->K - 1, (int)L);
    size_t bytes = slot * (size_t)depth + (pad ? h->piece * es : 0);
    uint8_t *base = hc_hier_scratch(cc, bytes);
    if (!base)
        return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_allreduce (hier): %zu bytes of scratch",
                                     bytes));
    for (int i = 0; i < depth; i++) h->blk[i] = base + slot * (size_t)i;
    if (pad) h->pad = base + slot * (size_t)depth;
    int cls = hc_hier_class(op->bytes);
    if (hc_log_level_current >= HC_LOG_DEBUG ||
        (hc_log_level_current >= HC_LOG_INFO && op->comm->rank == 0 && !(hc_hier_timed & (1ull << cls)))) {
        hc_hier_timed |= 1ull << cls;
        h->t0 = hc_time_ns();
    }
    return HC_STEP_DONE;
}

/* The node collective at position s of the fixed order: its piece, and
 * whether it is the allgather. */
static int hc_hier_node_item(int s, int K, bool *ag)
{
    if (s == 0) return *ag = false, 0;
    if (s == 2 * K - 1) return *ag = true, K - 1;
    if (s & 1) return *ag = false, (s + 1) / 2;
    return *ag = true, s / 2 - 1;
}

hc_step_t hc_net_allreduce_hier(hc_coll_op_t *op)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    hc_hier_t *h = op->tmp;
    hcomm_op_t sum = op->op == HCOMM_AVG ? HCOMM_SUM : op->op;
    size_t es = op->esize;
    int L = cc->hier_L;
    if (!h) {
        hc_step_t t = hc_hier_setup(op, cc);
        if (!hc_step_ok(t)) return t;
        h = op->tmp;
    }
    for (;;) {
        bool moved = false;
        /* Completions, oldest first (each comm runs its collectives in order). */
        while (h->nq_n && h->nq[0]->done) {
            struct hcomm_request *req = h->nq[0];
            int k = h->nq_piece[0];
            bool ag = h->nq_ag[0];
            if (req->status != HCOMM_OK)
                return hc_hier_failed(req, ag ? "allgather inside the node" : "reduce-scatter inside the node");
            hc_request_free(req);
            h->nq_n--;
            memmove(h->nq, h->nq + 1, sizeof(h->nq[0]) * (size_t)h->nq_n);
            memmove(h->nq_piece, h->nq_piece + 1, sizeof(h->nq_piece[0]) * (size_t)h->nq_n);
            memmove(h->nq_ag, h->nq_ag + 1, sizeof(h->nq_ag[0]) * (size_t)h->nq_n);
            if (ag) {
                if (h->pad && k == h->K - 1)
                    memcpy((uint8_t *)op->rbuf + (size_t)k * h->piece * es, h->pad, hc_hier_len(op, h, k) * es);
                h->ag_done = k + 1;
            } else {
                h->rs_done = k + 1;
            }
            moved = true;
        }
        while (h->rq_n && h->rq[0]->done) {
            struct hcomm_request *req = h->rq[0];
            if (req->status != HCOMM_OK) return hc_hier_failed(req, "allreduce across nodes");
            hc_request_free(req);
            h->rq_n--;
            memmove(h->rq, h->rq + 1, sizeof(h->rq[0]) * (size_t)h->rq_n);
            int k = h->ar_done++;
            if (op->op == HCOMM_AVG) {
                uint8_t *blk = h->blk[k % HC_HIER_DEPTH];
                const void *src[1] = {blk};
                hc_reduce(blk, src, 1, hc_hier_slice(op, h, k, L), op->dtype, HCOMM_AVG, op->comm->size);
            }
            moved = true;
        }
        if (h->ag_done == h->K) break;
        /* Rail allreduces, in piece order, once their slice is reduced. */
        while (h->next_rail < h->rs_done && h->rq_n < HC_HIER_DEPTH) {
            int k = h->next_rail;
            uint8_t *blk = h->blk[k % HC_HIER_DEPTH];
            HC_STEP_TRY(hc_coll_child_start(op, cc->hier_rail, HC_COLL_ALLREDUCE, blk, blk,
                                            hc_hier_slice(op, h, k, L), sum, 0, &h->rq[h->rq_n]));
            h->rq_n++;
            h->next_rail++;
            moved = true;
        }
        /* Node collectives, in the fixed order, each when it can start. */
        while (h->next_node < 2 * h->K && h->nq_n < 2 * HC_HIER_DEPTH) {
            bool ag;
            int k = hc_hier_node_item(h->next_node, h->K, &ag);
            uint8_t *blk = h->blk[k % HC_HIER_DEPTH];
            size_t b = hc_hier_slice(op, h, k, L);
            bool pad = h->pad && k == h->K - 1;
            if (ag) {
                if (h->ar_done <= k) break;
                void *out = pad ? (void *)h->pad : (uint8_t *)op->rbuf + (size_t)k * h->piece * es;
                HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_ALLGATHER, blk, out, b, sum, 0,
                                                &h->nq[h->nq_n]));
            } else {
                if (k >= HC_HIER_DEPTH && h->ag_done <= k - HC_HIER_DEPTH) break; /* its buffer */
                const void *in = (const uint8_t *)op->sbuf + (size_t)k * h->piece * es;
                if (pad) {
                    size_t len = hc_hier_len(op, h, k);
                    memcpy(h->pad, in, len * es);
                    memset(h->pad + len * es, 0, ((size_t)L * b - len) * es);
                    in = h->pad;
                }
                HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_REDUCE_SCATTER, in, blk, b, sum, 0,
                                                &h->nq[h->nq_n]));
            }
            h->nq_piece[h->nq_n] = k;
            h->nq_ag[h->nq_n] = ag;
            h->nq_n++;
            h->next_node++;
            moved = true;
        }
        if (!moved) return HC_STEP_PENDING;
    }
    if (h->t0) {
        hc_hier_model_t m = hc_hier_predict(op->comm, op->bytes);
        hc_log_info("topology model: allreduce of %zu bytes by hier (%d pieces): predicted %.1f us, "
                    "measured %.1f us (first call of its size class)", op->bytes, h->K, m.hier,
                    (double)(hc_time_ns() - h->t0) / 1e3);
    }
    return HC_STEP_DONE;
}

/* ---- broadcast, barrier, allgather, reduce_scatter, reduce: levels in sequence --------------------------
 * One child collective at a time (h->child); the state is the same for
 * all five. */

typedef struct {
    struct hcomm_request *child;
    uint8_t *a, *b; /* allgather, reduce_scatter: scratch of n and N blocks */
    /* reduce */
    size_t slice;   /* elements */
    uint8_t *blk;   /* this rank's slice of the node's sum */
    uint8_t *red;   /* the rail's reduced slice (ranks of the root's node) */
    uint8_t *pad;   /* L slices when L does not divide count: padded input, then the root's output */
    int root_node, root_i;
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

static hc_hier_seq_t *hc_hier_seq(hc_coll_op_t *op, hc_coll_comm_t *cc, bool blocks)
{
    if (op->tmp) return op->tmp;
    if (hc_net_alloc(op) != HCOMM_OK) return NULL;
    hc_hier_seq_t *h = op->tmp;
    memset(h, 0, sizeof(*h));
    if (!blocks) return h;
    size_t n = (size_t)op->comm->size, N = (size_t)cc->hier_N, B = HC_ALIGN_UP(op->bytes, (size_t)HC_CACHE_LINE);
    uint8_t *base = hc_hier_scratch(cc, B * (n + N));
    if (!base) {
        hc_error(HCOMM_ERR_NO_MEMORY, "%s (hier): %zu bytes of scratch", hc_coll_name(op->kind), B * (n + N));
        return NULL;
    }
    h->a = base;         /* n blocks */
    h->b = base + B * n; /* N blocks */
    return h;
}

static hc_step_t hc_hier_seq_wait(hc_coll_op_t *op, hc_hier_seq_t *h, const char *level)
{
    if (!h->child) return HC_STEP_DONE;
    if (!h->child->done) return HC_STEP_PENDING;
    if (h->child->status != HCOMM_OK) return hc_hier_child_fail(hc_coll_name(op->kind), level, h->child);
    hc_request_free(h->child);
    h->child = NULL;
    return HC_STEP_DONE;
}

/* ---- broadcast and barrier ----------------------------------------------------------------------
 * broadcast: the root's rail broadcasts from the root across nodes (only
 * the ranks of the root's local index take part), then every node
 * broadcasts from its rank of that index. barrier: the node's barrier, the
 * barrier of rail 0 across nodes, the node's barrier again. Each level a
 * child collective, as above; the model: log2(N) network rounds and one
 * node step per level against the flat algorithm's log2(n) rounds, each
 * as slow as its slowest pair. */

/* Flat binomial tree (broadcast) or dissemination (barrier) rounds, each
 * as slow as its slowest pair over the whole comm (what every rank knows
 * alike), against hier's log2(N) network rounds plus its node levels. */
bool hc_net_hier_small_auto(const hc_coll_op_t *op)
{
    if (!hc_net_hier_applies(op) || op->bytes > HC_NET_SMALL_BYTES) return false;
    hc_coll_comm_t *cc = op->comm->coll_priv;
    const hc_topo_map_t *map = hc_ctx.topo;
    double a_net = map && map->net_gbps > 0 ? map->net_lat_us : HC_HIER_A_NET;
    double b_net = map && map->net_gbps > 0 ? map->net_gbps : HC_HIER_B_NET;
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
    hc_hier_seq_t *h = hc_hier_seq(op, cc, false);
    if (!h) return hc_step_fail(HCOMM_ERR_NO_MEMORY);
    int L = cc->hier_L, pos, rootp = 0;
    const int *order = hc_coll_ring_order(op->comm, &pos);
    if (!order) return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_broadcast (hier): ring order"));
    while (order[rootp] != op->root) rootp++;
    int root_node = rootp / L, root_i = rootp % L; /* the hier comms' ranks of the root */
    hc_step_t t;
    switch (op->phase) {
    case 0:
        if (cc->hier_i == root_i)
            HC_STEP_TRY(hc_coll_child_start(op, cc->hier_rail, HC_COLL_BROADCAST, op->rbuf, op->rbuf,
                                            op->count, op->op, root_node, &h->child));
        op->phase = 1;
        /* fall through */
    case 1:
        t = hc_hier_seq_wait(op, h, "broadcast across nodes");
        if (!hc_step_ok(t)) return t;
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_BROADCAST, op->rbuf, op->rbuf, op->count,
                                        op->op, root_i, &h->child));
        op->phase = 2;
        /* fall through */
    case 2:
        return hc_hier_seq_wait(op, h, "broadcast inside the node");
    }
    return hc_step_fail(hc_error(HCOMM_ERR_INTERNAL, "hcomm_broadcast (hier): phase %d", op->phase));
}

hc_step_t hc_net_barrier_hier(hc_coll_op_t *op)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    hc_hier_seq_t *h = hc_hier_seq(op, cc, false);
    if (!h) return hc_step_fail(HCOMM_ERR_NO_MEMORY);
    hc_step_t t;
    switch (op->phase) {
    case 0:
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_BARRIER, NULL, NULL, 0, op->op, 0, &h->child));
        op->phase = 1;
        /* fall through */
    case 1:
        t = hc_hier_seq_wait(op, h, "barrier inside the node");
        if (!hc_step_ok(t)) return t;
        if (cc->hier_i == 0)
            HC_STEP_TRY(hc_coll_child_start(op, cc->hier_rail, HC_COLL_BARRIER, NULL, NULL, 0, op->op, 0,
                                            &h->child));
        op->phase = 2;
        /* fall through */
    case 2:
        t = hc_hier_seq_wait(op, h, "barrier across nodes");
        if (!hc_step_ok(t)) return t;
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_BARRIER, NULL, NULL, 0, op->op, 0, &h->child));
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

/* ---- allgather and reduce_scatter ------------------------------------------------------------
 * Blocks of B bytes, one per comm rank. Along the ring the comm is N node
 * blocks of L ranks: position k * L + i is (node k, local index i).
 * allgather: the rails first (each rank gets the blocks of its local index
 * from every node: the least a node can receive, (N-1) L blocks), then the
 * node (each local index contributes its N blocks), then a copy from
 * (i, k) order into rank order. reduce_scatter: the input copied into (i,
 * k) order, the node reduce-scatters N blocks to each local index, then
 * the rail reduce-scatters them one block per node. */

bool hc_net_hier_blocks_auto(const hc_coll_op_t *op)
{
    if (!hc_net_hier_applies(op)) return false;
    hc_coll_comm_t *cc = op->comm->coll_priv;
    const hc_topo_map_t *map = hc_ctx.topo;
    double a_net = map && map->net_gbps > 0 ? map->net_lat_us : HC_HIER_A_NET;
    double b_net = map && map->net_gbps > 0 ? map->net_gbps : HC_HIER_B_NET;
    int n = op->comm->size, N = cc->hier_N, L = cc->hier_L, pos;
    double B = (double)op->bytes / 1e3;
    int per_node = 1;
    const int *order = hc_coll_ring_order(op->comm, &pos);
    if (order && map)
        per_node = HC_MAX(1, (hc_topo_ring_crossings(map, op->comm->world_ranks, n, order, HC_TOPO_SWITCH) + N - 1) / N);
    double flat = (n - 1) * (a_net + B * per_node / b_net); /* the ring */
    if (op->kind == HC_COLL_ALLGATHER && !(n & (n - 1)) && op->bytes * (size_t)n <= HC_NET_SMALL_BYTES)
        flat = HC_MIN(flat, hc_hier_rd_time(op->comm, map, a_net, b_net, B, true));
    double hier = 2 * (HC_HIER_A_HOST + HC_HIER_LEVEL_US) + (L - 1) * (HC_HIER_A_HOST + N * B / HC_HIER_B_HOST) +
                  (N - 1) * (a_net + B * L / b_net) + (double)n * B / HC_HIER_B_HOST /* the copy */;
    return hier < flat;
}

/* Scratch blocks are op->bytes apart (packed: the children see contiguous
 * arrays); only the pool allocation is line-aligned. */
hc_step_t hc_net_allgather_hier(hc_coll_op_t *op)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    hc_hier_seq_t *h = hc_hier_seq(op, cc, true);
    if (!h) return hc_step_fail(HCOMM_ERR_NO_MEMORY);
    int N = cc->hier_N, L = cc->hier_L, pos;
    size_t B = op->bytes;
    const int *order = hc_coll_ring_order(op->comm, &pos);
    if (!order) return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_allgather (hier): ring order"));
    hc_step_t t;
    switch (op->phase) {
    case 0: {
        /* In place, sbuf is this rank's block of rbuf: still there at the end (only rank-order copies land). */
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_rail, HC_COLL_ALLGATHER, op->sbuf, h->b, op->count, op->op, 0,
                                        &h->child));
        op->phase = 1;
    } /* fall through */
    case 1:
        t = hc_hier_seq_wait(op, h, "allgather across nodes");
        if (!hc_step_ok(t)) return t;
        /* h->a in (i, k) order: local index i's N blocks, node-major inside */
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_ALLGATHER, h->b, h->a, op->count * (size_t)N,
                                        op->op, 0, &h->child));
        op->phase = 2;
        /* fall through */
    case 2:
        t = hc_hier_seq_wait(op, h, "allgather inside the node");
        if (!hc_step_ok(t)) return t;
        for (int i = 0; i < L; i++)
            for (int k = 0; k < N; k++)
                memcpy((uint8_t *)op->rbuf + (size_t)order[k * L + i] * B, h->a + ((size_t)i * N + k) * B, B);
        return HC_STEP_DONE;
    }
    return hc_step_fail(hc_error(HCOMM_ERR_INTERNAL, "hcomm_allgather (hier): phase %d", op->phase));
}

hc_step_t hc_net_reduce_scatter_hier(hc_coll_op_t *op)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    hc_hier_seq_t *h = hc_hier_seq(op, cc, true);
    if (!h) return hc_step_fail(HCOMM_ERR_NO_MEMORY);
    int N = cc->hier_N, L = cc->hier_L, pos;
    size_t B = op->bytes;
    hcomm_op_t sum = op->op == HCOMM_AVG ? HCOMM_SUM : op->op;
    const int *order = hc_coll_ring_order(op->comm, &pos);
    if (!order) return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_reduce_scatter (hier): ring order"));
    hc_step_t t;
    switch (op->phase) {
    case 0:
        for (int i = 0; i < L; i++)
            for (int k = 0; k < N; k++)
                memcpy(h->a + ((size_t)i * N + k) * B, (const uint8_t *)op->sbuf + (size_t)order[k * L + i] * B, B);
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_REDUCE_SCATTER, h->a, h->b, op->count * (size_t)N,
                                        sum, 0, &h->child));
        op->phase = 1;
        /* fall through */
    case 1:
        t = hc_hier_seq_wait(op, h, "reduce-scatter inside the node");
        if (!hc_step_ok(t)) return t;
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_rail, HC_COLL_REDUCE_SCATTER, h->b, op->rbuf, op->count, sum, 0,
                                        &h->child));
        op->phase = 2;
        /* fall through */
    case 2:
        t = hc_hier_seq_wait(op, h, "reduce-scatter across nodes");
        if (!hc_step_ok(t)) return t;
        if (op->op == HCOMM_AVG) {
            const void *src[1] = {op->rbuf};
            hc_reduce(op->rbuf, src, 1, op->count, op->dtype, HCOMM_AVG, op->comm->size);
        }
        return HC_STEP_DONE;
    }
    return hc_step_fail(hc_error(HCOMM_ERR_INTERNAL, "hcomm_reduce_scatter (hier): phase %d", op->phase));
}

hc_coll_step_fn hc_net_hier_blocks_prepare(hc_coll_op_t *op, const char *forced)
{
    (void)forced;
    return op->kind == HC_COLL_ALLGATHER ? hc_net_allgather_hier : hc_net_reduce_scatter_hier;
}

/* ---- reduce ------------------------------------------------------------------------------------
 * The root at ring position p is (node p / L, local index p % L). Every
 * node reduce-scatters the vector (padded to L equal slices when L does
 * not divide it), the rails reduce slice i to their rank on the root's
 * node, and those ranks send their slices to the root (point-to-point on
 * the comm, inside the root's node). AVG divides each slice once, on the
 * root's node. Decided by the allreduce model (reduce is about half of an
 * allreduce on either side). */

bool hc_net_hier_reduce_auto(const hc_coll_op_t *op)
{
    return hc_net_hier_auto(op);
}

hc_step_t hc_net_reduce_hier(hc_coll_op_t *op)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    hc_hier_seq_t *h = op->tmp;
    int L = cc->hier_L, pos;
    size_t es = op->esize;
    hcomm_op_t sum = op->op == HCOMM_AVG ? HCOMM_SUM : op->op;
    const int *order = hc_coll_ring_order(op->comm, &pos);
    if (!order) return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_reduce (hier): ring order"));
    if (!h) {
        if (hc_net_alloc(op) != HCOMM_OK) return hc_step_fail(HCOMM_ERR_NO_MEMORY);
        h = op->tmp;
        memset(h, 0, sizeof(*h));
        int rootp = 0;
        while (order[rootp] != op->root) rootp++;
        h->root_node = rootp / L;
        h->root_i = rootp % L;
        h->slice = (op->count + (size_t)L - 1) / (size_t)L;
        size_t slot = HC_ALIGN_UP(h->slice * es, (size_t)HC_CACHE_LINE);
        bool pad = op->count % (size_t)L != 0;
        uint8_t *base = hc_hier_scratch(cc, 2 * slot + (pad ? (size_t)L * h->slice * es : 0));
        if (!base)
            return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_reduce (hier): scratch"));
        h->blk = base;
        h->red = base + slot;
        if (pad) {
            h->pad = base + 2 * slot;
            memcpy(h->pad, op->sbuf, op->bytes);
            memset(h->pad + op->bytes, 0, (size_t)L * h->slice * es - op->bytes);
        }
    }
    bool on_root_node = pos / L == h->root_node, root = op->comm->rank == op->root;
    hc_step_t t;
    switch (op->phase) {
    case 0:
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_node, HC_COLL_REDUCE_SCATTER, h->pad ? h->pad : op->sbuf,
                                        h->blk, h->slice, sum, 0, &h->child));
        op->phase = 1;
        /* fall through */
    case 1:
        t = hc_hier_seq_wait(op, h, "reduce-scatter inside the node");
        if (!hc_step_ok(t)) return t;
        HC_STEP_TRY(hc_coll_child_start(op, cc->hier_rail, HC_COLL_REDUCE, h->blk, on_root_node ? h->red : NULL,
                                        h->slice, sum, h->root_node, &h->child));
        op->phase = 2;
        /* fall through */
    case 2:
        t = hc_hier_seq_wait(op, h, "reduce across nodes");
        if (!hc_step_ok(t)) return t;
        if (!on_root_node) return HC_STEP_DONE;
        if (op->op == HCOMM_AVG) {
            const void *src[1] = {h->red};
            hc_reduce(h->red, src, 1, h->slice, op->dtype, HCOMM_AVG, op->comm->size);
        }
        /* The root's node: slices to the root. */
        if (!root) {
            HC_STEP_TRY(hc_net_send(op, h->red, h->slice * es, op->root));
        } else {
            uint8_t *out = h->pad ? h->pad : op->rbuf;
            for (int j = 0; j < L; j++) {
                uint8_t *dst = out + (size_t)j * h->slice * es;
                if (j == h->root_i) memcpy(dst, h->red, h->slice * es);
                else HC_STEP_TRY(hc_net_recv(op, dst, h->slice * es, order[h->root_node * L + j]));
            }
        }
        op->phase = 3;
        /* fall through */
    case 3:
        t = hc_net_test(op);
        if (!hc_step_ok(t)) return t;
        if (root && h->pad) memcpy(op->rbuf, h->pad, op->bytes);
        return HC_STEP_DONE;
    }
    return hc_step_fail(hc_error(HCOMM_ERR_INTERNAL, "hcomm_reduce (hier): phase %d", op->phase));
}
