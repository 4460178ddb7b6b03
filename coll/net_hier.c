/*
 * Hierarchical collectives (docs/topology.md) for communicators of N >= 2
 * nodes with L >= 2 of their ranks on each, made of child collectives
 * (hc_coll_child_start) on two internal communicators: the node's (its L
 * ranks) and the rails' (rail i: the ranks of local index i on every node,
 * in the ring's node order). Each child runs whatever algorithm its level
 * picks (node-staged inside, rd or ring across).
 *
 * allreduce, reduce, allgather and reduce_scatter are pipelines. The vector
 * (allreduce, reduce: pieces of L slices) or every rank's block (allgather,
 * reduce_scatter) is cut into pieces, and every piece passes the
 * collective's stages, each a child on the node's comm or the rail's (its
 * lane):
 *   allreduce       node reduce-scatter, rail allreduce, node allgather
 *   reduce          node reduce-scatter, rail reduce to the root's node,
 *                   node gather to the root (only on the root's node)
 *   allgather       rail allgather, node allgather, copy into rank order
 *   reduce_scatter  copy into (local index, node) order, node
 *                   reduce-scatter, rail reduce-scatter
 * so that while the rail works on piece k, the node works on pieces k+1
 * and k-1. One engine (hc_hier_run) runs all four from a table of stages
 * (hc_hier_pipe_t). When L does not divide the last piece of a vector,
 * that piece is padded to L slices in scratch. AVG sums at every level and
 * divides once, so every rank holds the same bits.
 *
 * broadcast and barrier (small): their levels one after the other.
 *
 * The automatic choice is a cost model (time = latency + bytes / bandwidth
 * per level, the pipeline's overlap included, docs/topology.md);
 * HCOMM_LOG=info prints its predictions for each size class and the
 * measured time of the first hierarchical call.
 */
#include "coll/net.h"

#include "mem/mem.h"

#include <stdio.h>

/* ---- the pipeline ------------------------------------------------------------------------------
 * Each lane's children are issued in one fixed order, the same on every
 * rank (each comm runs its collectives in issue order, so its members must
 * issue the same sequence): piece k reaches stage s at time k + s, and at
 * one time the later stage goes first. For allreduce the node's order is
 * RS0, RS1, AG0, RS2, AG1, ..., RS(K-1), AG(K-2), AG(K-1). A child is
 * issued once what it needs is there: stage s of piece k after stage s-1
 * of piece k; stage 0 of piece k once piece k - HC_HIER_DEPTH has left
 * every stage, which frees its slot of scratch. Every wait is then for a
 * child of an earlier time, issued earlier in its lane, so the pipeline
 * cannot deadlock (HC_HIER_DEPTH >= stages). */
#define HC_HIER_DEPTH 4
#define HC_HIER_STAGES 3
#define HC_HIER_PIECE_MIN ((size_t)1 << 20) /* bytes of a rank's share of a piece */
#define HC_HIER_PIECES_MAX 8
#define HC_HIER_QUEUE (HC_HIER_DEPTH * HC_HIER_STAGES) /* children of a lane in flight, at most */

_Static_assert(HC_HIER_DEPTH >= HC_HIER_STAGES, "every wait is for a child of an earlier time");
_Static_assert((HC_HIER_PIECES_MAX) * (HC_HIER_STAGES) <= 256, "a lane's items fit a byte");

typedef enum {
    HC_HIER_NODE,
    HC_HIER_RAIL,
    HC_HIER_LANES,
    HC_HIER_SKIP = HC_HIER_LANES
} hc_hier_lane_t;

typedef struct hc_hier hc_hier_t;

/* A collective as a pipeline: its stages and what each does. */
typedef struct {
    int nstages;
    bool slices; /* pieces of L slices of the vector, else pieces of every block */
    hc_hier_lane_t lane[HC_HIER_STAGES];
    const char *level[HC_HIER_STAGES]; /* in errors: "its <level> failed" */
    /* After the cut: what the collective needs in h (the ring, the root,
     * the stages it skips on this rank); *shares_p: scratch per piece in
     * flight, in rank shares of a piece. */
    hcomm_status_t (*init)(hc_coll_op_t *op, hc_hier_t *h, size_t *shares_p);
    /* Issues stage s of piece k (a child collective, after any copy). */
    hcomm_status_t (*start)(hc_coll_op_t *op, hc_hier_t *h, int s, int k,
                            struct hcomm_request **req_p);
    /* Stage s of piece k completed (copies out, AVG). */
    void (*done)(hc_coll_op_t *op, hc_hier_t *h, int s, int k);
    /* The model's time for op (us), printed beside the measured one. */
    double (*predict)(const hc_coll_op_t *op);
} hc_hier_pipe_t;

struct hc_hier {
    int K;              /* pieces */
    size_t unit;        /* a piece is a multiple of this many elements: L (slices) or 1 */
    size_t piece;       /* elements per piece; the last may be shorter */
    size_t share_bytes; /* a rank's share of a full piece (piece / unit elements), line-aligned */
    uint8_t *slot[HC_HIER_DEPTH]; /* scratch of piece k: slot[k % HC_HIER_DEPTH] */
    uint8_t *pad; /* the last piece, padded to L slices, when L does not divide it */
    hc_hier_lane_t lane[HC_HIER_STAGES]; /* the table's, HC_HIER_SKIP where this rank has no part */
    uint8_t order[HC_HIER_LANES][HC_HIER_PIECES_MAX * HC_HIER_STAGES]; /* k * STAGES + s */
    int norder[HC_HIER_LANES], next[HC_HIER_LANES]; /* items, and the next to issue */
    int done[HC_HIER_STAGES]; /* pieces through each stage (a stage completes them in order) */
    struct hcomm_request *q[HC_HIER_LANES][HC_HIER_QUEUE]; /* children in flight, oldest first */
    uint8_t q_item[HC_HIER_LANES][HC_HIER_QUEUE];
    int qn[HC_HIER_LANES];
    const int *ring;       /* allgather, reduce_scatter: the comm's ring order */
    int root_node, root_i; /* reduce: the root's node and local index */
    bool on_root_node;
    uint64_t t0; /* start, when this call's time is to be logged */
};

static double hc_hier_allreduce_predicted(const hc_coll_op_t *op); /* the model, below */
static double hc_hier_blocks_predicted(const hc_coll_op_t *op);

/* Cuts count elements of es bytes into pieces of a multiple of unit
 * elements: a rank's share of a piece (piece / unit) at least
 * HC_HIER_PIECE_MIN bytes, at most HC_HIER_PIECES_MAX pieces. Returns the
 * pieces; *piece_p: elements of each but the last, which may be shorter. */
static int hc_hier_cut(size_t count, size_t es, size_t unit, size_t *piece_p)
{
    size_t per = HC_HIER_PIECES_MAX * unit;
    size_t share = HC_MAX((HC_HIER_PIECE_MIN + es - 1) / es, (count + per - 1) / per);
    share = HC_MAX((size_t)1, HC_MIN(share, (count + unit - 1) / unit));
    *piece_p = share * unit;
    return (int)HC_MAX((size_t)1, (count + *piece_p - 1) / *piece_p);
}

static uint64_t hc_hier_logged[HC_COLL_KIND_COUNT]; /* size classes whose prediction was printed */
static uint64_t hc_hier_timed[HC_COLL_KIND_COUNT];  /* size classes whose hier time was printed */

static int hc_hier_class(size_t bytes)
{
    return bytes ? 64 - __builtin_clzll(bytes) : 0;
}

/* The collective's name in the model's lines: "allgather". */
static const char *hc_hier_what(hc_coll_kind_t kind)
{
    const char *name = hc_coll_name(kind);
    return strncmp(name, "hcomm_", 6) ? name : name + 6;
}

size_t hc_net_hier_state(const hc_coll_op_t *op)
{
    (void)op;
    return sizeof(hc_hier_t);
}

void hc_net_hier_release(hc_coll_op_t *op)
{
    hc_hier_t *h = op->tmp;
    if (!h) return;
    for (int l = 0; l < HC_HIER_LANES; l++) {
        for (int i = 0; i < h->qn[l]; i++)
            hc_coll_child_end(h->q[l][i], op->end_status);
        h->qn[l] = 0;
    }
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

/* Elements of piece k, and of a rank's share of it. */
static size_t hc_hier_len(const hc_coll_op_t *op, const hc_hier_t *h, int k)
{
    return HC_MIN(h->piece, op->count - (size_t)k * h->piece);
}

static size_t hc_hier_share(const hc_coll_op_t *op, const hc_hier_t *h, int k)
{
    return (hc_hier_len(op, h, k) + h->unit - 1) / h->unit;
}

/* Share j of piece k's slot (a child's array may span several shares). */
static uint8_t *hc_hier_at(const hc_hier_t *h, int k, size_t j)
{
    return h->slot[k % HC_HIER_DEPTH] + j * h->share_bytes;
}

static hcomm_op_t hc_hier_sum(const hc_coll_op_t *op)
{
    return op->op == HCOMM_AVG ? HCOMM_SUM : op->op;
}

static void hc_hier_avg(const hc_coll_op_t *op, void *buf, size_t count)
{
    const void *src[1] = {buf};
    hc_reduce(buf, src, 1, count, op->dtype, HCOMM_AVG, op->comm->size);
}

/* Why a child collective failed: the reason its communicator recorded
 * when it broke (copied: the caller's hc_error reuses the error buffer). */
static hc_step_t hc_hier_child_fail(const char *what, const char *level, struct hcomm_request *req)
{
    char why[512]; /* as long as broken_why */
    hc_coll_comm_t *cc = req->comm ? req->comm->coll_priv : NULL;
    snprintf(why, sizeof(why), "%s",
             cc && cc->broken ? cc->broken_why : hcomm_strerror(req->status));
    return hc_step_fail(hc_error(req->status, "%s (hier): its %s failed: %s", what, level, why));
}

static hc_step_t hc_hier_setup(hc_coll_op_t *op, const hc_hier_pipe_t *p)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    if (hc_net_alloc(op) != HCOMM_OK) return hc_step_fail(HCOMM_ERR_NO_MEMORY);
    hc_hier_t *h = op->tmp;
    memset(h, 0, sizeof(*h));
    size_t es = op->esize, shares;
    h->unit = p->slices ? (size_t)cc->hier_L : 1;
    h->K = hc_hier_cut(op->count, es, h->unit, &h->piece);
    memcpy(h->lane, p->lane, sizeof(h->lane));
    HC_STEP_TRY(p->init(op, h, &shares));
    h->share_bytes = HC_ALIGN_UP(h->piece / h->unit * es, (size_t)HC_CACHE_LINE);
    size_t depth = (size_t)HC_MIN(h->K, HC_HIER_DEPTH), slot = shares * h->share_bytes;
    bool pad = hc_hier_len(op, h, h->K - 1) % h->unit != 0;
    size_t bytes = slot * depth + (pad ? h->piece * es : 0);
    uint8_t *base = hc_hier_scratch(cc, bytes);
    if (!base)
        return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY, "%s (hier): %zu bytes of scratch",
                                     hc_coll_name(op->kind), bytes));
    for (size_t i = 0; i < depth; i++)
        h->slot[i] = base + slot * i;
    if (pad) h->pad = base + slot * depth;
    for (int t = 0; t < h->K + p->nstages - 1; t++)
        for (int s = p->nstages - 1; s >= 0; s--) {
            int k = t - s, l = h->lane[s];
            if (k < 0 || k >= h->K || l == HC_HIER_SKIP) continue;
            h->order[l][h->norder[l]++] = (uint8_t)(k * HC_HIER_STAGES + s);
        }
    int cls = hc_hier_class(op->bytes);
    if (hc_log_level_current >= HC_LOG_DEBUG ||
        (hc_log_level_current >= HC_LOG_INFO && op->comm->rank == 0 &&
         !(hc_hier_timed[op->kind] & (1ull << cls)))) {
        hc_hier_timed[op->kind] |= 1ull << cls;
        h->t0 = hc_time_ns();
    }
    return HC_STEP_DONE;
}

/* Runs the pipeline of p until it has to wait (docs: the fixed order above). */
static hc_step_t hc_hier_run(hc_coll_op_t *op, const hc_hier_pipe_t *p)
{
    hc_hier_t *h = op->tmp;
    if (!h) {
        hc_step_t t = hc_hier_setup(op, p);
        if (!hc_step_ok(t)) return t;
        h = op->tmp;
    }
    int S = p->nstages;
    for (;;) {
        bool moved = false;
        /* Completions, oldest first (each comm runs its collectives in order). */
        for (int l = 0; l < HC_HIER_LANES; l++)
            while (h->qn[l] && h->q[l][0]->done) {
                struct hcomm_request *req = h->q[l][0];
                int s = h->q_item[l][0] % HC_HIER_STAGES, k = h->q_item[l][0] / HC_HIER_STAGES;
                if (req->status != HCOMM_OK)
                    return hc_hier_child_fail(hc_coll_name(op->kind), p->level[s], req);
                hc_request_free(req);
                h->qn[l]--;
                memmove(h->q[l], h->q[l] + 1, sizeof(h->q[l][0]) * (size_t)h->qn[l]);
                memmove(h->q_item[l], h->q_item[l] + 1, sizeof(h->q_item[l][0]) * (size_t)h->qn[l]);
                if (p->done) p->done(op, h, s, k);
                h->done[s] = k + 1;
                moved = true;
            }
        /* A stage this rank has no part in passes its pieces on. */
        for (int s = 1; s < S; s++)
            if (h->lane[s] == HC_HIER_SKIP && h->done[s] < h->done[s - 1]) {
                h->done[s] = h->done[s - 1];
                moved = true;
            }
        if (h->done[S - 1] == h->K) break;
        for (int l = 0; l < HC_HIER_LANES; l++)
            while (h->next[l] < h->norder[l] && h->qn[l] < HC_HIER_QUEUE) {
                int item = h->order[l][h->next[l]], s = item % HC_HIER_STAGES,
                    k = item / HC_HIER_STAGES;
                bool ready = s ? h->done[s - 1] > k
                               : k < HC_HIER_DEPTH || h->done[S - 1] > k - HC_HIER_DEPTH;
                if (!ready) break;
                HC_STEP_TRY(p->start(op, h, s, k, &h->q[l][h->qn[l]]));
                h->q_item[l][h->qn[l]++] = (uint8_t)item;
                h->next[l]++;
                moved = true;
            }
        if (!moved) return HC_STEP_PENDING;
    }
    if (h->t0)
        hc_log_info("topology model: %s of %zu bytes by hier (%d pieces): predicted %.1f us, "
                    "measured %.1f us (first call of its size class)",
                    hc_hier_what(op->kind), op->bytes, h->K, p->predict(op),
                    (double)(hc_time_ns() - h->t0) / 1e3);
    return HC_STEP_DONE;
}

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

static const hc_hier_pipe_t hc_hier_allreduce_pipe = {
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

static const hc_hier_pipe_t hc_hier_allgather_pipe = {
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

static const hc_hier_pipe_t hc_hier_reduce_scatter_pipe = {
    .nstages = 2,
    .lane = {HC_HIER_NODE, HC_HIER_RAIL},
    .level = {"reduce-scatter inside the node", "reduce-scatter across nodes"},
    .init = hc_hier_blocks_init,
    .start = hc_hier_reduce_scatter_start,
    .done = hc_hier_reduce_scatter_done,
    .predict = hc_hier_blocks_predicted,
};

hc_step_t hc_net_allreduce_hier(hc_coll_op_t *op)
{
    return hc_hier_run(op, &hc_hier_allreduce_pipe);
}

hc_step_t hc_net_reduce_hier(hc_coll_op_t *op)
{
    return hc_hier_run(op, &hc_hier_reduce_pipe);
}

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
    while ((1 << k) < n)
        k++;
    return k;
}

/* The network's latency and bandwidth: the probe's when it ran. */
static void hc_hier_net(double *a_p, double *b_p)
{
    const hc_topo_map_t *map = hc_ctx.topo;
    *a_p = map && map->net_gbps > 0 ? map->net_lat_us : HC_HIER_A_NET;
    *b_p = map && map->net_gbps > 0 ? map->net_gbps : HC_HIER_B_NET;
}

/* Ring links that leave each node (the ring's node crossings, spread over
 * the nodes): they share the node's link. */
static int hc_hier_ring_per_node(struct hcomm_comm *comm)
{
    hc_coll_comm_t *cc = comm->coll_priv;
    const hc_topo_map_t *map = hc_ctx.topo;
    int pos, N = cc->hier_N;
    const int *order = hc_coll_ring_order(comm, &pos);
    if (!order || !map) return 1;
    return HC_MAX(
        1, (hc_topo_ring_crossings(map, comm->world_ranks, comm->size, order, HC_TOPO_SWITCH) + N -
            1) /
               N);
}

/* A pipeline of K pieces whose stage s takes t[s] us per piece: the first
 * piece passes every stage, each further one adds the time of the busiest
 * lane per piece (a comm runs its children one at a time). K = 1: the
 * levels in sequence. */
static double hc_hier_pipe_time(const hc_hier_pipe_t *p, int K, const double *t)
{
    double sum = 0, busy[HC_HIER_LANES] = {0}, most = 0;
    for (int s = 0; s < p->nstages; s++) {
        sum += t[s];
        busy[p->lane[s]] += t[s];
    }
    for (int l = 0; l < HC_HIER_LANES; l++)
        most = HC_MAX(most, busy[l]);
    return sum + (K - 1) * most;
}

typedef struct {
    double ring, rd, hier;
} hc_hier_model_t;

/* Recursive doubling over the power-of-two part of comm: round k pairs r
 * with r ^ 2^k and lasts as long as its slowest pair (rounds whose pairs
 * all share a node cost the host class). S: microseconds-per-GB/s of the
 * first round's message (bytes / 1e3); growing: round k moves 2^k times
 * that (allgather), else the same (allreduce). */
static double hc_hier_rd_time(struct hcomm_comm *comm, const hc_topo_map_t *map, double a_net,
                              double b_net, double S, bool growing)
{
    int n = comm->size, pof2 = 1;
    while (pof2 * 2 <= n)
        pof2 *= 2;
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
    int n = comm->size, N = cc->hier_N, L = cc->hier_L;
    double a_net, b_net;
    hc_hier_net(&a_net, &b_net);
    hc_hier_model_t m;
    /* The ring: every step waits for its slowest link, a network link; a
     * node's NIC carries as many ring links as leave that node. */
    m.ring = 2.0 * (n - 1) * (a_net + S / n / (b_net / hc_hier_ring_per_node(comm)));
    m.rd = hc_hier_rd_time(comm, hc_ctx.topo, a_net, b_net, S, false);
    /* hier, per piece P: the node's reduce-scatter and allgather, L - 1
     * steps of P / L each; the rails' allreduce of P / L, L rails sharing
     * the node's link (each moves P / L at a 1/L share); each level with
     * its start. */
    size_t piece;
    int K = hc_hier_cut(bytes, 1, (size_t)L, &piece);
    double P = S / K, t[3];
    t[0] = t[2] = HC_HIER_A_HOST + (L - 1) * (HC_HIER_A_HOST + P / L / HC_HIER_B_HOST);
    double rail_ring = 2.0 * (N - 1) * (a_net + P / N / b_net);
    double rail_rd = hc_hier_log2(N) * (a_net + P / b_net);
    t[1] = HC_HIER_A_HOST + HC_MIN(rail_ring, rail_rd);
    m.hier = hc_hier_pipe_time(&hc_hier_allreduce_pipe, K, t);
    return m;
}

static double hc_hier_allreduce_predicted(const hc_coll_op_t *op)
{
    return hc_hier_predict(op->comm, op->bytes).hier;
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
    uint64_t *logged = &hc_hier_logged[HC_COLL_ALLREDUCE];
    if (hc_log_level_current >= HC_LOG_INFO && !(*logged & (1ull << cls)) && op->comm->rank == 0) {
        *logged |= 1ull << cls;
        hc_log_info("topology model: allreduce of %zu bytes on %d nodes x %d ranks: predicted "
                    "hier %.1f us, ring %.1f us, rd %.1f us -> %s",
                    op->bytes, cc->hier_N, cc->hier_L, m.hier, m.ring, m.rd,
                    pick                       ? "hier"
                    : ub <= HC_NET_SMALL_BYTES ? "rd"
                                               : "ring");
    }
    return pick;
}

/* Reduce: the allreduce model (see hc_hier_reduce_pipe). */
bool hc_net_hier_reduce_auto(const hc_coll_op_t *op)
{
    return hc_net_hier_auto(op);
}

/* allgather and reduce_scatter of op->bytes per rank: the flat ring's
 * n - 1 steps of a block, as slow as the node's link shared by the ring
 * links leaving the node (recursive doubling for small pof2 allgathers),
 * against hier's pipeline: per piece P of a block, the rail's N - 1 steps
 * of P (L rails sharing the node's link) and the node's L - 1 steps of
 * N P plus the copy of n P, each level with its start. */
typedef struct {
    double flat, hier;
} hc_hier_blocks_model_t;

static hc_hier_blocks_model_t hc_hier_blocks_predict(const hc_coll_op_t *op)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    double a_net, b_net;
    hc_hier_net(&a_net, &b_net);
    int n = op->comm->size, N = cc->hier_N, L = cc->hier_L;
    double B = (double)op->bytes / 1e3;
    hc_hier_blocks_model_t m;
    m.flat = (n - 1) * (a_net + B * hc_hier_ring_per_node(op->comm) / b_net);
    if (op->kind == HC_COLL_ALLGATHER && !(n & (n - 1)) &&
        op->bytes * (size_t)n <= HC_NET_SMALL_BYTES)
        m.flat = HC_MIN(m.flat, hc_hier_rd_time(op->comm, hc_ctx.topo, a_net, b_net, B, true));
    size_t piece;
    int K = hc_hier_cut(op->bytes, 1, 1, &piece);
    double P = B / K;
    double rail = HC_HIER_A_HOST + HC_HIER_LEVEL_US + (N - 1) * (a_net + P * L / b_net);
    double node = HC_HIER_A_HOST + HC_HIER_LEVEL_US +
                  (L - 1) * (HC_HIER_A_HOST + N * P / HC_HIER_B_HOST) +
                  (double)n * P / HC_HIER_B_HOST /* the copy */;
    const hc_hier_pipe_t *p =
        op->kind == HC_COLL_ALLGATHER ? &hc_hier_allgather_pipe : &hc_hier_reduce_scatter_pipe;
    double t[2] = {p->lane[0] == HC_HIER_RAIL ? rail : node,
                   p->lane[0] == HC_HIER_RAIL ? node : rail};
    m.hier = hc_hier_pipe_time(p, K, t);
    return m;
}

static double hc_hier_blocks_predicted(const hc_coll_op_t *op)
{
    return hc_hier_blocks_predict(op).hier;
}

bool hc_net_hier_blocks_auto(const hc_coll_op_t *op)
{
    if (!hc_net_hier_applies(op)) return false;
    hc_coll_comm_t *cc = op->comm->coll_priv;
    hc_hier_blocks_model_t m = hc_hier_blocks_predict(op);
    bool pick = m.hier < m.flat;
    int cls = hc_hier_class(op->bytes);
    uint64_t *logged = &hc_hier_logged[op->kind];
    if (hc_log_level_current >= HC_LOG_INFO && !(*logged & (1ull << cls)) && op->comm->rank == 0) {
        *logged |= 1ull << cls;
        hc_log_info("topology model: %s of %zu bytes per rank on %d nodes x %d ranks: predicted "
                    "hier %.1f us, "
                    "flat %.1f us -> %s",
                    hc_hier_what(op->kind), op->bytes, cc->hier_N, cc->hier_L, m.hier, m.flat,
                    pick ? "hier" : "flat");
    }
    return pick;
}

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
