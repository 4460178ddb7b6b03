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
 *
 * The files: net_hier.c the pipeline engine (the cut, the scratch, the
 * issue order, completions); net_hier_slices.c allreduce and reduce;
 * net_hier_blocks.c allgather and reduce_scatter; net_hier_model.c the
 * cost model of the four; net_hier_seq.c broadcast and barrier (their
 * model with them). This header: what they share.
 */
#ifndef HC_COLL_NET_HIER_H
#define HC_COLL_NET_HIER_H

#include "coll/net.h"

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

static inline int hc_hier_class(size_t bytes)
{
    return bytes ? 64 - __builtin_clzll(bytes) : 0;
}

/* The collective's name in the model's lines: "allgather". */
static inline const char *hc_hier_what(hc_coll_kind_t kind)
{
    const char *name = hc_coll_name(kind);
    return strncmp(name, "hcomm_", 6) ? name : name + 6;
}

/* Elements of piece k, and of a rank's share of it. */
static inline size_t hc_hier_len(const hc_coll_op_t *op, const hc_hier_t *h, int k)
{
    return HC_MIN(h->piece, op->count - (size_t)k * h->piece);
}

static inline size_t hc_hier_share(const hc_coll_op_t *op, const hc_hier_t *h, int k)
{
    return (hc_hier_len(op, h, k) + h->unit - 1) / h->unit;
}

/* Share j of piece k's slot (a child's array may span several shares). */
static inline uint8_t *hc_hier_at(const hc_hier_t *h, int k, size_t j)
{
    return h->slot[k % HC_HIER_DEPTH] + j * h->share_bytes;
}

static inline hcomm_op_t hc_hier_sum(const hc_coll_op_t *op)
{
    return op->op == HCOMM_AVG ? HCOMM_SUM : op->op;
}

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

/* net_hier.c: the engine */
int hc_hier_cut(size_t count, size_t es, size_t unit, size_t *piece_p);
void hc_hier_avg(const hc_coll_op_t *op, void *buf, size_t count);
hc_step_t hc_hier_child_fail(const char *what, const char *level, struct hcomm_request *req);
hc_step_t hc_hier_run(hc_coll_op_t *op, const hc_hier_pipe_t *p);

/* net_hier_slices.c, net_hier_blocks.c: the pipelines */
extern const hc_hier_pipe_t hc_hier_allreduce_pipe; /* the model's stages */
extern const hc_hier_pipe_t hc_hier_allgather_pipe, hc_hier_reduce_scatter_pipe;

/* net_hier_model.c: the pipelines' predictions (us), and what the
 * model of broadcast and barrier shares with them */
double hc_hier_allreduce_predicted(const hc_coll_op_t *op);
double hc_hier_blocks_predicted(const hc_coll_op_t *op);
double hc_hier_log2(int n);
void hc_hier_net(double *a_p, double *b_p);

#endif
