/*
 * Node collectives: every rank of the communicator on one node, sharing one
 * region from the node driver (shared_get). Layout, for n ranks and block B:
 *
 *   ident          the communicator it is for (context id, members), checked
 *                  by every member that attaches
 *   line[n]        one cache line per rank: `a` (tick whose data this rank
 *                  has published) + two inline payload slots (parity) for
 *                  messages of at most HC_NODE_INLINE bytes
 *   started[n]     one cache line per rank: the collective it started last
 *                  (any path), for hc_coll_node_ahead
 *   done[n]        one cache line per rank: `b` (tick this rank has finished
 *                  reading shared data of)
 *   stage[n][2][B] per rank, double-buffered staging blocks
 *   res[2][B]      the reduced block (allreduce/reduce)
 *
 * Everything advances in ticks, numbered identically on all ranks because
 * they run the same collectives in the same order. A rank writes shared
 * buffers of tick t only once every rank has finished reading tick t-2 (the
 * same parity): b[j] >= t-2 for all j, usually implied by having seen
 * a[j] >= t-1. Each tick:
 *   1. stage: copy my part of the input into my block, publish a[me] = t;
 *   2. wait until every a[j] >= t; compute: reduce my slice of the block out
 *      of every rank's block (allreduce: into res; reduce_scatter: straight
 *      into my output) or copy other ranks' blocks out (allgather,
 *      alltoall, broadcast); publish b[me] = t;
 *   3. allreduce/reduce only: wait until every b[j] >= t, copy res out.
 * A message that fits inline travels in the flag's own cache line: one line
 * moves between cores per peer.
 *
 * Ranks that disagree on a collective (count, dtype, op, root) would
 * desynchronise the ticks and reduce garbage: with its first tick every
 * rank publishes a 32-bit signature of the call beside its flag, and every
 * rank that waits for the others' flags compares theirs with its own
 * (broadcast receivers compare the root's). A mismatch fails the
 * collective on the ranks that see it, which break the communicator; a
 * rank whose communicator breaks says so beside its `b` flag (gave_up),
 * and a rank waiting for it fails at once with the same status.
 *
 * Large allreduce, allgather, reduce_scatter and alltoall first try a single
 * copy (hc_node_1copy): a handshake tick publishes each rank's buffer
 * addresses and a vote; then ranks read (and, for allreduce, write) each
 * other's buffers directly, through mapped pool memory or the node driver's
 * get/write, and meet once at the end. If any rank cannot, all run staged.
 */
#include "coll/coll.h"
#include "coll/copy.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "mem/mem.h"

#define HC_NODE_INLINE HC_COLL_NODE_INLINE
/* Allreduces up to this size use node-direct at any rank count: one
 * barrier instead of two beats reducing only a slice while the n inputs are
 * small (4 ranks: 2.9 vs 6.5-8.7 us up to 8 KiB, even at 32 KiB, behind
 * from 128 KiB; 8 ranks on 2 cores: 9-13 vs 21-31 us up to 2 KiB, ahead at
 * 32 KiB, behind from 128 KiB). */
#define HC_NODE_DIRECT_MAX (32u << 10)

typedef struct {
    uint64_t a;
    uint8_t inline_data[2][HC_NODE_INLINE];
    /* By tick parity: the signature (hc_node_sig) of the collective whose
     * first tick this is, written before a. */
    uint32_t sig[2];
} HC_ALIGNED_CL hc_node_line_t;
_Static_assert(sizeof(hc_node_line_t) == HC_CACHE_LINE, "one line per rank");

typedef struct {
    uint64_t b;
    /* -status (> 0) once this rank has given up on the communicator (a
     * collective failed here: mismatch, timeout): the others' waits on it
     * fail at once instead of running out their timeout. */
    int32_t gave_up;
    int32_t gave_up_cause; /* + 1: the world rank whose failure made it give up (0: none) */
} HC_ALIGNED_CL hc_node_done_t;

/* The collective this rank started last on the communicator, whatever its
 * path: seq + 1 (hc_coll_node_started). Written by its owner only, read by
 * a rank whose point-to-point collective waits for this one too long
 * (hc_coll_node_ahead): a line of its own, so the store stays private. */
typedef struct {
    uint64_t seq;
} HC_ALIGNED_CL hc_node_started_t;

/* Single-copy descriptor of a rank's buffers for the current collective:
 * their addresses in its process (for the node driver's get and write) and
 * the node driver's packed remote keys for them (zero copy where a peer can
 * map them: rkey_ptr). */
typedef struct {
    uint32_t vote; /* HC_NODE_VOTE_*: what this rank can do with everyone's buffers */
    uint8_t skey_len, rkey_len; /* 0: no key (the buffer cannot be mapped) */
    uint16_t pad;
    uint64_t saddr, raddr;
    uint8_t skey[HC_RKEY_MAX], rkey[HC_RKEY_MAX];
} HC_ALIGNED_CL hc_node_desc_t;
_Static_assert(sizeof(hc_node_desc_t) == 2 * HC_CACHE_LINE, "two lines per rank");

enum {
    HC_NODE_CAN_GET = 1u << 0,
    HC_NODE_CAN_MAP = 1u << 1,
    HC_NODE_OUT_OF_PLACE = 1u << 2, /* my output does not overlap my input */
};

/* Large pool-to-pool allreduces at least this big go zero-copy. */
#define HC_NODE_ZC_MIN (256u * 1024)

typedef struct hc_coll_node {
    hc_drv_t *drv;  /* the node driver the region came from */
    uint64_t key;   /* its shared_get key, released with shared_put */
    int n, me;
    size_t block;
    hc_node_line_t *line;
    hc_node_done_t *done;
    hc_node_desc_t *desc;
    hc_node_started_t *started;
    /* Peers' remote keys of the last zero-copy collective, held while their
     * mappings are in use (released when the next one starts, or at free). */
    hc_rkey_t *rkeys[128];
    hc_conn_t *rkey_conn[128];
    int nrkeys;
    const uint8_t *zs[64];            /* this op: every rank's input and output */
    uint8_t *zr[64];
    uint8_t *stage;
    uint8_t *res;
    uint8_t *scratch;    /* private block: reduce here, stream out (large outputs) */
    uint64_t tick;       /* last tick started here */
    uint64_t a_seen_all; /* highest tick for which every a[j] was seen */
    uint64_t b_seen_all;
} hc_coll_node_t;

static inline uint8_t *hc_node_stage(hc_coll_node_t *nd, int rank, uint64_t t)
{
    return nd->stage + ((size_t)rank * 2 + (t & 1)) * nd->block;
}
static inline uint8_t *hc_node_res(hc_coll_node_t *nd, uint64_t t)
{
    return nd->res + (t & 1) * nd->block;
}

/* Rank j's signature of tick t (op's first) against mine; on a mismatch
 * op->error is set and false returned. */
static HC_NOINLINE bool hc_node_sig_mismatch(hc_coll_op_t *op, int j, uint32_t theirs,
                                             bool moved_on)
{
    hc_coll_kind_t tk = (hc_coll_kind_t)(theirs & HC_COLL_SIG_KIND_MASK); /* hc_coll_sig */
    if (moved_on)
        /* its slot already holds a later collective's signature: it went
         * through this one without this rank (it called it with another
         * root, or with arguments that did not need this rank) */
        op->error = hc_error(HCOMM_ERR_INVALID,
                             "%s (%zu elements of %s, op %s, root %d) #%llu: communicator rank %d "
                             "went past this collective without this rank (it is in a later "
                             "one): it called this one with other arguments (root, count, dtype "
                             "or op, or an earlier collective on this communicator differed)",
                             hc_coll_name(op->kind), op->count, hc_dtype_name(op->dtype),
                             hc_op_name(op->op), op->root, (unsigned long long)op->seq, j);
    else if (tk != op->kind && tk < HC_COLL_KIND_COUNT)
        op->error = hc_error(HCOMM_ERR_INVALID,
                             "%s (%zu elements of %s, op %s, root %d) #%llu: communicator rank %d "
                             "called %s at this point of the collective order (a rank skipped or "
                             "added a collective, or called another one)",
                             hc_coll_name(op->kind), op->count, hc_dtype_name(op->dtype),
                             hc_op_name(op->op), op->root, (unsigned long long)op->seq, j,
                             hc_coll_name(tk));
    else
        op->error = hc_error(HCOMM_ERR_INVALID,
                             "%s (%zu elements of %s, op %s, root %d) #%llu: communicator rank %d "
                             "called %s here with other arguments: its count, dtype, op or root "
                             "differ from this call's, or from an earlier collective's on this "
                             "communicator (signature %08x, mine %08x: ranks compare a hash of "
                             "the four, chained, not which one); HCOMM_CHECK=1 names the field and "
                             "both values",
                             hc_coll_name(op->kind), op->count, hc_dtype_name(op->dtype),
                             hc_op_name(op->op), op->root, (unsigned long long)op->seq, j,
                             hc_coll_name(op->kind), theirs, op->sig);
    return false;
}

static inline bool hc_node_sig_check(hc_coll_node_t *nd, hc_coll_op_t *op, int j, uint64_t t)
{
    uint32_t theirs = __atomic_load_n(&nd->line[j].sig[t & 1], __ATOMIC_RELAXED);
    return HC_LIKELY(theirs == op->sig) ||
           hc_node_sig_mismatch(op, j, theirs,
                                __atomic_load_n(&nd->line[j].a, __ATOMIC_ACQUIRE) > t);
}

/* Rank j, which op waits for, has not arrived: has it given up on the
 * communicator? Then op fails with its status (op->error). False always. */
static inline bool hc_node_gave_up(hc_coll_node_t *nd, hc_coll_op_t *op, int j)
{
    int32_t st = __atomic_load_n(&nd->done[j].gave_up, __ATOMIC_ACQUIRE);
    if (HC_UNLIKELY(st > 0)) {
        int cause = __atomic_load_n(&nd->done[j].gave_up_cause, __ATOMIC_RELAXED) - 1;
        if (cause >= 0 && cause < hc_ctx.size)
            op->error = hc_error((hcomm_status_t)-st,
                                 "%s: peer rank %d (world) failed (communicator rank %d gave up "
                                 "on this communicator because of it)",
                                 hc_coll_name(op->kind), cause, j);
        else
            op->error = hc_error((hcomm_status_t)-st,
                                 "%s: communicator rank %d gave up on this communicator (%s): an "
                                 "earlier or this collective failed there",
                                 hc_coll_name(op->kind), j, hcomm_strerror((hcomm_status_t)-st));
    }
    return false;
}

/* Every a[j] >= t? Resumable: op->round is the next rank to check. At the
 * op's first tick the signatures are compared too. */
static bool hc_node_wait_a(hc_coll_node_t *nd, hc_coll_op_t *op, uint64_t t)
{
    if (nd->a_seen_all >= t)
        return true;
    for (; op->round < nd->n; op->round++)
        if (__atomic_load_n(&nd->line[op->round].a, __ATOMIC_ACQUIRE) < t)
            return hc_node_gave_up(nd, op, op->round);
    op->round = 0;
    if (t == op->tick)
        for (int j = 0; j < nd->n; j++)
            if (!hc_node_sig_check(nd, op, j, t))
                return false;
    nd->a_seen_all = t;
    /* Publishing a(t) came after finishing t-1: b[j] >= t-1 follows. */
    if (nd->b_seen_all < t - 1)
        nd->b_seen_all = t - 1;
    return true;
}

static bool hc_node_wait_b(hc_coll_node_t *nd, hc_coll_op_t *op, uint64_t t)
{
    if (nd->b_seen_all >= t)
        return true;
    for (; op->round < nd->n; op->round++)
        if (__atomic_load_n(&nd->done[op->round].b, __ATOMIC_ACQUIRE) < t)
            return hc_node_gave_up(nd, op, op->round);
    op->round = 0;
    nd->b_seen_all = t;
    return true;
}

/* May this rank overwrite the shared buffers of tick t? */
static inline bool hc_node_can_write(hc_coll_node_t *nd, hc_coll_op_t *op, uint64_t t)
{
    return t < 3 || hc_node_wait_b(nd, op, t - 2);
}

static inline void hc_node_post_a(hc_coll_node_t *nd, const hc_coll_op_t *op, uint64_t t)
{
    if (t == op->tick)
        __atomic_store_n(&nd->line[nd->me].sig[t & 1], op->sig, __ATOMIC_RELAXED);
    __atomic_store_n(&nd->line[nd->me].a, t, __ATOMIC_RELEASE);
}
static inline void hc_node_post_b(hc_coll_node_t *nd, uint64_t t)
{
    __atomic_store_n(&nd->done[nd->me].b, t, __ATOMIC_RELEASE);
}

/* Element range [lo, hi) of slice j when ec elements are cut in n slices
 * whose inner boundaries are rounded to 16 elements (vector friendly). */
static inline void hc_node_slice(size_t ec, int n, int j, size_t *lo, size_t *hi)
{
    size_t a = j == 0 ? 0 : HC_MIN(ec, HC_ALIGN_UP(ec * (size_t)j / (size_t)n, (size_t)16));
    size_t b = j == n - 1 ? ec : HC_MIN(ec, HC_ALIGN_UP(ec * (size_t)(j + 1) / (size_t)n, (size_t)16));
    *lo = a;
    *hi = b;
}

static inline hc_coll_node_t *hc_node_of(hc_coll_op_t *op)
{
    return ((hc_coll_comm_t *)op->comm->coll_priv)->node;
}

/* Ticks are numbered from the op's first one: op->tick = first, tick_end =
 * one past the last. A tick's block covers bytes [k*B, k*B + B) of the
 * per-rank data, k = t - op->tick. */
static void hc_node_begin(hc_coll_op_t *op, size_t per_rank_bytes)
{
    hc_coll_node_t *nd = hc_node_of(op);
    size_t nb = per_rank_bytes ? (per_rank_bytes + nd->block - 1) / nd->block : 1;
    op->tick = nd->tick + 1;
    op->tick_end = op->tick + nb;
    nd->tick += nb;
    op->state = 0;
    op->round = 0;
}

/* Stage bb bytes of src into my block of tick t and publish it; false while
 * the block may still be read by a slower rank (tick t-2). */
static bool hc_node_stage_publish(hc_coll_node_t *nd, hc_coll_op_t *op, uint64_t t,
                                  const void *src, size_t bb)
{
    if (!hc_node_can_write(nd, op, t))
        return false;
    memcpy(hc_node_stage(nd, nd->me, t), src, bb);
    hc_node_post_a(nd, op, t);
    return true;
}

/* ---- level-2 statistics: what moves between the node's ranks ------------------- */

/* Per peer counts (core/stats.h, reported under the node driver, shm) of
 * the data the node algorithms move, by comm rank j (its world rank's
 * record). rx from j: what this rank copies or reduces out of j's staging
 * block, inline slot, slice of the result block or buffer (CMA get, mapped
 * memory), or what j writes into this rank's output; tx to j: what this
 * rank stages for j to read or writes into j's output, or what j reads out
 * of this rank's buffer. So rank a's tx to b is b's rx from a, bytes and
 * messages; a message is one block moved (a tick's piece, a chunk), a
 * block reduced out of k peers' is k messages in. Flags, signatures and
 * descriptors are not counted. Below level 2 the algorithms skip all of it
 * after one load and a branch not taken (hc_node_counting, as p2p's
 * hc_stats_peer_tx): the work is in these out-of-line functions. */
static inline bool hc_node_counting(void)
{
    return HC_UNLIKELY(hc_stats_peers != NULL);
}

static void hc_node_peer(const hc_coll_op_t *op, int j, uint64_t tx_msgs, size_t tx,
                         uint64_t rx_msgs, size_t rx)
{
    if (tx_msgs || rx_msgs)
        hc_stats_peer_add(op->comm->world_ranks[j], tx_msgs, tx, rx_msgs, rx);
}

/* Does comm rank j read the result of op (allreduce: all; reduce: the root)? */
static inline bool hc_node_wants(const hc_coll_op_t *op, int j)
{
    return op->kind != HC_COLL_REDUCE || j == op->root;
}

/* Inline and node-direct allreduce/reduce, one tick of bb bytes: every
 * rank that wants the result reduces bb out of every rank's slot or block. */
static HC_NOINLINE void hc_node_count_direct(const hc_coll_op_t *op, const hc_coll_node_t *nd,
                                             size_t bb)
{
    bool mine = hc_node_wants(op, nd->me);
    for (int j = 0; j < nd->n && bb; j++)
        if (j != nd->me) {
            bool theirs = hc_node_wants(op, j);
            hc_node_peer(op, j, theirs, theirs ? bb : 0, mine, mine ? bb : 0);
        }
}

/* Bytes of slice j of a tick's ec elements (hc_node_slice). */
static inline size_t hc_node_slice_bytes(const hc_coll_op_t *op, size_t ec, int n, int j)
{
    size_t lo, hi;
    hc_node_slice(ec, n, j, &lo, &hi);
    return (hi - lo) * op->esize;
}

/* Node-staged allreduce, a tick of ec elements, once this rank has reduced
 * its slice: it staged slice j for j to reduce, reduced its own slice out
 * of j's block, and its slice of the result is there for j to copy. */
static HC_NOINLINE void hc_node_count_staged(const hc_coll_op_t *op, const hc_coll_node_t *nd,
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
static HC_NOINLINE void hc_node_count_staged_out(const hc_coll_op_t *op, const hc_coll_node_t *nd,
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
static HC_NOINLINE void hc_node_count_each(const hc_coll_op_t *op, const hc_coll_node_t *nd,
                                           uint64_t msgs, size_t bytes)
{
    for (int j = 0; j < nd->n && bytes; j++)
        if (j != nd->me)
            hc_node_peer(op, j, msgs, bytes, msgs, bytes);
}

/* Single-copy allreduce by slices (mapped, or CMA get and write) in
 * chunks of chunk elements: this rank reads its slice out of j's input
 * and writes it into j's output; j does the same with its slice here. */
static HC_NOINLINE void hc_node_count_sliced(const hc_coll_op_t *op, const hc_coll_node_t *nd,
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
static HC_NOINLINE void hc_node_count_bcast(const hc_coll_op_t *op, const hc_coll_node_t *nd,
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

/* ---- allreduce / reduce ------------------------------------------------------ */

static hc_step_t hc_node_allreduce_inline(hc_coll_op_t *op)
{
    hc_coll_node_t *nd = hc_node_of(op);
    uint64_t t = op->tick;
    int par = (int)(t & 1);
    if (op->state == 0) {
        if (!hc_node_can_write(nd, op, t))
            return HC_STEP_PENDING;
        memcpy(nd->line[nd->me].inline_data[par], op->sbuf, op->bytes);
        hc_node_post_a(nd, op, t);
        op->state = 1;
    }
    if (!hc_node_wait_a(nd, op, t))
        return HC_STEP_PENDING;
    const void *srcs[64];
    for (int j = 0; j < nd->n; j++)
        srcs[j] = nd->line[j].inline_data[par];
    if (op->kind == HC_COLL_ALLREDUCE || op->comm->rank == op->root)
        hc_reduce(op->rbuf, srcs, nd->n, op->count, op->dtype, op->op, nd->n);
    hc_node_post_b(nd, t);
    if (hc_node_counting())
        hc_node_count_direct(op, nd, op->bytes);
    return HC_STEP_DONE;
}

/* Reduce-scatter + allgather through shared memory, block by block: each
 * rank stages the slices the others reduce (its own slice it reads straight
 * from its input: nobody else does), reduces its slice of every rank's
 * block into the shared result, and copies the whole result block out. */
static hc_step_t hc_node_allreduce_staged(hc_coll_op_t *op)
{
    hc_coll_node_t *nd = hc_node_of(op);
    bool want_result = op->kind == HC_COLL_ALLREDUCE || op->comm->rank == op->root;
    const void *srcs[64];
    for (;;) {
        uint64_t t = op->tick + (uint64_t)op->phase;
        if (t == op->tick_end)
            return HC_STEP_DONE;
        size_t off = (size_t)op->phase * nd->block;
        size_t bb = HC_MIN(nd->block, op->bytes - off);
        size_t ec = bb / op->esize, lo, hi;
        hc_node_slice(ec, nd->n, nd->me, &lo, &hi);
        const uint8_t *in = (const uint8_t *)op->sbuf + off;
        switch (op->state) {
        case 0: {
            if (!hc_node_can_write(nd, op, t))
                return HC_STEP_PENDING;
            uint8_t *st = hc_node_stage(nd, nd->me, t);
            memcpy(st, in, lo * op->esize);
            memcpy(st + hi * op->esize, in + hi * op->esize, bb - hi * op->esize);
            hc_node_post_a(nd, op, t);
            op->state = 1;
        }
            /* fallthrough */
        case 1:
            if (!hc_node_wait_a(nd, op, t))
                return HC_STEP_PENDING;
            if (hi > lo) {
                for (int j = 0; j < nd->n; j++)
                    srcs[j] = (j == nd->me ? in : hc_node_stage(nd, j, t)) + lo * op->esize;
                hc_reduce(hc_node_res(nd, t) + lo * op->esize, srcs, nd->n, hi - lo, op->dtype,
                          op->op, nd->n);
            }
            hc_node_post_b(nd, t);
            if (hc_node_counting())
                hc_node_count_staged(op, nd, ec);
            op->state = 2;
            /* fallthrough */
        case 2:
            if (want_result) {
                if (!hc_node_wait_b(nd, op, t))
                    return HC_STEP_PENDING;
                if (op->bytes >= HC_COPY_NT_THRESHOLD)
                    hc_copy_nt((uint8_t *)op->rbuf + off, hc_node_res(nd, t), bb);
                else
                    memcpy((uint8_t *)op->rbuf + off, hc_node_res(nd, t), bb);
                if (hc_node_counting())
                    hc_node_count_staged_out(op, nd, ec);
            }
            op->state = 0;
            op->phase++;
        }
    }
}

/* Every rank reduces the whole block out of every rank's staging block (its
 * own included, so in-place calls never alias) straight into its output: one
 * barrier per block instead of two, and less memory traffic than slicing
 * while the rank count is small. Reduce uses it with only the root reading.
 * All ranks reduce in rank order, so results are bit-identical. */
static hc_step_t hc_node_allreduce_direct(hc_coll_op_t *op)
{
    hc_coll_node_t *nd = hc_node_of(op);
    bool want_result = op->kind == HC_COLL_ALLREDUCE || op->comm->rank == op->root;
    const void *srcs[64];
    for (;;) {
        uint64_t t = op->tick + (uint64_t)op->phase;
        if (t == op->tick_end)
            return HC_STEP_DONE;
        size_t off = (size_t)op->phase * nd->block;
        size_t bb = HC_MIN(nd->block, op->bytes - off);
        if (op->state == 0) {
            if (!hc_node_stage_publish(nd, op, t, (const uint8_t *)op->sbuf + off, bb))
                return HC_STEP_PENDING;
            op->state = 1;
        }
        if (want_result) {
            if (!hc_node_wait_a(nd, op, t))
                return HC_STEP_PENDING;
            for (int j = 0; j < nd->n; j++)
                srcs[j] = hc_node_stage(nd, j, t);
            if (op->bytes >= HC_COPY_NT_THRESHOLD && nd->scratch) {
                hc_reduce(nd->scratch, srcs, nd->n, bb / op->esize, op->dtype, op->op, nd->n);
                hc_copy_nt((uint8_t *)op->rbuf + off, nd->scratch, bb);
            } else {
                hc_reduce((uint8_t *)op->rbuf + off, srcs, nd->n, bb / op->esize, op->dtype,
                          op->op, nd->n);
            }
        }
        hc_node_post_b(nd, t);
        if (hc_node_counting())
            hc_node_count_direct(op, nd, bb);
        op->state = 0;
        op->phase++;
    }
}

/* ---- zero-copy allreduce of pool memory ------------------------------------------ */

static void hc_node_rkeys_release(hc_coll_node_t *nd)
{
    for (int i = 0; i < nd->nrkeys; i++)
        nd->rkey_conn[i]->ops->rkey_release(nd->rkey_conn[i], nd->rkeys[i]);
    nd->nrkeys = 0;
}

/* This rank's packed node-driver key for buf (0 bytes: none, not mappable). */
static uint8_t hc_node_pack(hc_coll_node_t *nd, const void *buf, size_t len, uint8_t *out)
{
    uint64_t key;
    hc_mem_desc_t desc;
    size_t klen = HC_RKEY_MAX;
    if (hc_mem_key_local(nd->drv, (void *)buf, len, &key, &desc, NULL) != HCOMM_OK ||
        desc.fd < 0 || nd->drv->ops->rkey_pack(nd->drv, key, &desc, out, &klen) != HCOMM_OK ||
        klen > HC_RKEY_MAX)
        return 0;
    return (uint8_t)klen;
}

/* Where rank j's buffer at addr (its key: key/klen) is mapped here, or NULL. */
static uint8_t *hc_node_ptr(hc_coll_op_t *op, hc_coll_node_t *nd, int j, const uint8_t *key,
                            uint8_t klen, uint64_t addr)
{
    hc_conn_t *c = hc_core_conn(op->comm->world_ranks[j]);
    hc_rkey_t *rk = NULL;
    void *ptr = NULL;
    if (!klen || !(c->caps & HC_CONN_CAP_RKEY_PTR) ||
        nd->nrkeys == (int)HC_ARRAY_SIZE(nd->rkeys) ||
        c->ops->rkey_unpack(c, key, klen, &rk) != HCOMM_OK)
        return NULL;
    nd->rkeys[nd->nrkeys] = rk;
    nd->rkey_conn[nd->nrkeys++] = c;
    if (c->ops->rkey_ptr(c, rk, addr, op->bytes, &ptr) != HCOMM_OK)
        return NULL;
    return ptr;
}

/* Large collectives without staging. Ticks: op->tick is the handshake (a:
 * descriptors published; b: votes cast), then the data ticks. Every rank
 * votes for the best it can do with everyone's buffers and all take the
 * lowest vote, so all decide alike:
 *   MAP (every buffer is pool memory every rank can map): each rank reduces
 *     its slice of the message out of every rank's input and writes it into
 *     every rank's output; one barrier at the end. No copy besides the result.
 *   GET (the node driver reads and writes peers' memory: process_vm_readv
 *     and _writev): each rank pulls its slice of every peer's input,
 *     reduces it, and writes the result into its own output and every
 *     peer's; one barrier at the end. One copy per byte in and out.
 *   STAGE: the data ticks run the staged algorithms. */
/* The node driver found comm rank j's process gone: that is its failure
 * (recorded as any other, so the error names the rank that failed first,
 * which may be another one j left after). */
static HC_NOINLINE hcomm_status_t hc_node_peer_gone(hc_coll_op_t *op, int j, hcomm_status_t st)
{
    if (st != HCOMM_ERR_PEER_FAILED)
        return st;
    int w = op->comm->world_ranks[j];
    hc_peer_fail(w, st, hc_error_last());
    return hc_peer_error(w, hc_coll_name(op->kind));
}

static hcomm_status_t hc_node_get(hc_coll_op_t *op, int j, void *dst, uint64_t raddr, size_t len)
{
    hc_conn_t *c = hc_core_conn(op->comm->world_ranks[j]);
    hc_rma_t rma = {.local = dst, .len = len, .remote_addr = raddr}; /* CMA: no keys, at once */
    hcomm_status_t st = len ? c->ops->get(c, &rma) : HCOMM_OK;
    return HC_LIKELY(st == HCOMM_OK) ? st : hc_node_peer_gone(op, j, st);
}

static hcomm_status_t hc_node_write(hc_coll_op_t *op, int j, uint64_t raddr, const void *src,
                                    size_t len)
{
    hc_conn_t *c = hc_core_conn(op->comm->world_ranks[j]);
    hc_rma_t rma = {.local = (void *)src, .len = len, .remote_addr = raddr};
    hcomm_status_t st = len ? c->ops->write(c, &rma) : HCOMM_OK;
    return HC_LIKELY(st == HCOMM_OK) ? st : hc_node_peer_gone(op, j, st);
}

static bool hc_node_can_get(hc_coll_op_t *op)
{
    const uint32_t need = HC_CONN_CAP_GET | HC_CONN_CAP_WRITE;
    for (int j = 0; j < op->comm->size; j++) {
        if (j == op->comm->rank)
            continue;
        hc_conn_t *c = hc_core_conn(op->comm->world_ranks[j]);
        if (!c || (c->caps & need) != need || c->drv != hc_core_node_driver())
            return false;
    }
    return true;
}

/* GET-mode data movement of the collectives other than allreduce: every
 * rank reads what it needs straight out of the peers' buffers. */
static hcomm_status_t hc_node_get_phase(hc_coll_op_t *op, hc_coll_node_t *nd)
{
    size_t b = op->bytes, es = op->esize;
    uint8_t *out = op->rbuf;
    const uint8_t *in = op->sbuf;
    const void *srcs[64];
    hcomm_status_t st = HCOMM_OK;
    switch (op->kind) {
    case HC_COLL_ALLGATHER:
        for (int j = 0; j < nd->n && st == HCOMM_OK; j++) {
            if (j != nd->me)
                st = hc_node_get(op, j, out + (size_t)j * b, nd->desc[j].saddr, b);
            else if (in != out + (size_t)j * b)
                memcpy(out + (size_t)j * b, in, b);
        }
        break;
    case HC_COLL_ALLTOALL:
        for (int j = 0; j < nd->n && st == HCOMM_OK; j++) {
            if (j != nd->me)
                st = hc_node_get(op, j, out + (size_t)j * b,
                                 nd->desc[j].saddr + (size_t)nd->me * b, b);
            else if (in != out)
                memcpy(out + (size_t)j * b, in + (size_t)j * b, b);
        }
        break;
    case HC_COLL_REDUCE_SCATTER: {
        /* My block of every rank's input, chunk by chunk; my own input
         * first so that in place (out is my block of in) aliases srcs[0]. */
        size_t chunk = nd->block / (size_t)nd->n / es, count = b / es;
        for (size_t e = 0; e < count && st == HCOMM_OK; e += chunk) {
            size_t m = HC_MIN(chunk, count - e);
            int k = 1;
            srcs[0] = in + (size_t)nd->me * b + e * es;
            for (int j = 0; j < nd->n && st == HCOMM_OK; j++) {
                if (j == nd->me)
                    continue;
                uint8_t *tmp = nd->scratch + (size_t)(k - 1) * chunk * es;
                st = hc_node_get(op, j, tmp, nd->desc[j].saddr + (size_t)nd->me * b + e * es,
                                 m * es);
                srcs[k++] = tmp;
            }
            if (st == HCOMM_OK)
                hc_reduce(out + e * es, srcs, nd->n, m, op->dtype, op->op, nd->n);
        }
        break;
    }
    default:
        st = hc_error(HCOMM_ERR_INTERNAL, "node single copy: collective %d", (int)op->kind);
    }
    return st;
}

static hc_step_t hc_node_1copy(hc_coll_op_t *op)
{
    hc_coll_node_t *nd = hc_node_of(op);
    uint64_t t0 = op->tick, last = op->tick_end - 1;
    hc_node_desc_t *me = &nd->desc[nd->me];
    size_t es = op->esize, lo, hi;
    const void *srcs[64];
    hc_node_slice(op->count, nd->n, nd->me, &lo, &hi);
    switch (op->state) {
    case 0: /* publish: descriptors are read up to the vote, so wait b >= t0-1 */
        if (!hc_node_wait_b(nd, op, t0 - 1))
            return HC_STEP_PENDING;
        hc_node_rkeys_release(nd);
        me->saddr = (uint64_t)(uintptr_t)op->sbuf;
        me->raddr = (uint64_t)(uintptr_t)op->rbuf;
        me->skey_len = hc_node_pack(nd, op->sbuf, op->bytes, me->skey);
        me->rkey_len = me->skey_len ? hc_node_pack(nd, op->rbuf, op->bytes, me->rkey) : 0;
        hc_node_post_a(nd, op, t0);
        op->state = 1;
        /* fallthrough */
    case 1: { /* vote */
        if (!hc_node_wait_a(nd, op, t0))
            return HC_STEP_PENDING;
        bool map = op->kind == HC_COLL_ALLREDUCE;
        for (int j = 0; j < nd->n && map; j++) {
            hc_node_desc_t *d = &nd->desc[j];
            if (!d->skey_len || !d->rkey_len) {
                map = false;
            } else if (j == nd->me) {
                nd->zs[j] = op->sbuf;
                nd->zr[j] = op->rbuf;
            } else {
                uint8_t *sb = hc_node_ptr(op, nd, j, d->skey, d->skey_len, d->saddr);
                uint8_t *rb = sb ? hc_node_ptr(op, nd, j, d->rkey, d->rkey_len, d->raddr) : NULL;
                map = sb && rb;
                if (map) {
                    nd->zs[j] = sb;
                    nd->zr[j] = rb;
                }
            }
        }
        const uint8_t *sb = op->sbuf, *rb = op->rbuf;
        bool apart = sb + op->bytes <= rb || rb + op->bytes <= sb;
        me->vote = (map ? HC_NODE_CAN_MAP : 0u) | (hc_node_can_get(op) ? HC_NODE_CAN_GET : 0u) |
                   (apart ? HC_NODE_OUT_OF_PLACE : 0u);
        hc_node_post_b(nd, t0); /* publishes the vote */
        op->state = 2;
    }
        /* fallthrough */
    case 2: {
        if (!hc_node_wait_b(nd, op, t0))
            return HC_STEP_PENDING;
        uint32_t mode = HC_NODE_CAN_GET | HC_NODE_CAN_MAP | HC_NODE_OUT_OF_PLACE;
        for (int j = 0; j < nd->n; j++)
            mode &= nd->desc[j].vote;
        if (!(mode & (HC_NODE_CAN_GET | HC_NODE_CAN_MAP))) {
            op->tick = t0 + 1;
            op->state = op->phase = op->round = 0;
            op->step = op->fallback;
            op->algo = "node-staged";
            return op->step(op);
        }
        if (op->kind != HC_COLL_ALLREDUCE) {
            hcomm_status_t st = hc_node_get_phase(op, nd);
            if (st != HCOMM_OK)
                return hc_step_fail(st);
            if (hc_node_counting()) {
                /* reduce_scatter pulls in chunks (hc_node_get_phase) */
                size_t chunk = nd->block / (size_t)nd->n / es, count = op->bytes / es;
                hc_node_count_each(op, nd,
                                   op->kind == HC_COLL_REDUCE_SCATTER ? (count + chunk - 1) / chunk
                                                                      : 1,
                                   op->bytes);
            }
            hc_node_post_b(nd, last);
            hc_node_post_a(nd, op, last);
            op->state = 4;
            return hc_node_wait_b(nd, op, last) ? HC_STEP_DONE : HC_STEP_PENDING;
        }
        if (mode & HC_NODE_CAN_MAP) {
            size_t chunk = nd->block / es;
            for (size_t e = lo; e < hi; e += chunk) {
                size_t m = HC_MIN(chunk, hi - e);
                for (int j = 0; j < nd->n; j++)
                    srcs[j] = nd->zs[j] + e * es;
                hc_reduce(nd->scratch, srcs, nd->n, m, op->dtype, op->op, nd->n);
                for (int j = 0; j < nd->n; j++)
                    hc_copy_nt(nd->zr[j] + e * es, nd->scratch, m * es);
            }
            if (hc_node_counting())
                hc_node_count_sliced(op, nd, chunk);
            /* b before a: seeing a(t) must keep implying b >= t-1. */
            hc_node_post_b(nd, last);
            hc_node_post_a(nd, op, last);
            op->state = 4;
            return hc_node_wait_b(nd, op, last) ? HC_STEP_DONE : HC_STEP_PENDING;
        }
        /* GET. Outputs that fit the caches: my slice of every peer's input
         * is pulled next to mine, reduced, written into my output and pushed
         * into every peer's; one barrier. Larger outputs with few ranks are
         * memory bound: each rank pulls every peer's whole input and reduces
         * it into its own output (streaming stores), touching exactly its
         * inputs once and its output once, like `c = a + b`; no remote
         * writes (each would pay a read for ownership of the line). All
         * ranks reduce in rank order, so results are bit-identical. Only when
         * no rank works in place: a peer may still be pulling the input I
         * would overwrite. */
        bool full = op->bytes >= HC_COPY_NT_THRESHOLD && nd->n <= 3 &&
                    (mode & HC_NODE_OUT_OF_PLACE);
        size_t chunk = nd->block / (size_t)nd->n / es;
        uint8_t *res = nd->scratch + (size_t)(nd->n - 1) * chunk * es;
        size_t from = full ? 0 : lo, to = full ? op->count : hi;
        for (size_t e = from; e < to; e += chunk) {
            size_t m = HC_MIN(chunk, to - e);
            for (int j = 0, k = 0; j < nd->n; j++) {
                if (j == nd->me) {
                    srcs[j] = (const uint8_t *)op->sbuf + e * es;
                    continue;
                }
                uint8_t *tmp = nd->scratch + (size_t)k++ * chunk * es;
                hcomm_status_t st = hc_node_get(op, j, tmp, nd->desc[j].saddr + e * es, m * es);
                if (st != HCOMM_OK)
                    return hc_step_fail(st);
                srcs[j] = tmp;
            }
            hc_reduce(res, srcs, nd->n, m, op->dtype, op->op, nd->n);
            if (full) {
                hc_copy_nt((uint8_t *)op->rbuf + e * es, res, m * es);
                continue;
            }
            memcpy((uint8_t *)op->rbuf + e * es, res, m * es);
            for (int j = 0; j < nd->n; j++) {
                if (j == nd->me)
                    continue;
                hcomm_status_t st = hc_node_write(op, j, nd->desc[j].raddr + e * es, res, m * es);
                if (st != HCOMM_OK)
                    return hc_step_fail(st);
            }
        }
        if (hc_node_counting()) {
            if (full) /* every rank pulls every peer's whole input */
                hc_node_count_each(op, nd, (op->count + chunk - 1) / chunk, op->bytes);
            else
                hc_node_count_sliced(op, nd, chunk);
        }
        hc_node_post_b(nd, last);
        hc_node_post_a(nd, op, last);
        op->state = 4;
    }
        /* fallthrough */
    case 4: /* nobody returns while others may still read its buffers */
        if (!hc_node_wait_b(nd, op, last))
            return HC_STEP_PENDING;
        return HC_STEP_DONE;
    }
    return HC_STEP_DONE;
}

/* ---- broadcast ------------------------------------------------------------------ */

static hc_step_t hc_node_broadcast(hc_coll_op_t *op)
{
    hc_coll_node_t *nd = hc_node_of(op);
    bool root = op->comm->rank == op->root;
    for (;;) {
        uint64_t t = op->tick + (uint64_t)op->phase;
        if (t == op->tick_end)
            return HC_STEP_DONE;
        size_t off = (size_t)op->phase * nd->block;
        size_t bb = op->bytes ? HC_MIN(nd->block, op->bytes - off) : 0;
        if (root) {
            if (!hc_node_stage_publish(nd, op, t, (uint8_t *)op->rbuf + off, bb))
                return HC_STEP_PENDING;
            hc_node_post_b(nd, t);
            if (hc_node_counting())
                hc_node_count_bcast(op, nd, bb);
        } else {
            if (t == op->tick && op->state == 0) {
                /* A receiver publishes its signature too (no data: nobody
                 * reads its block), first, so that a rank that takes it for
                 * the root sees the disagreement (two ranks that each take
                 * the other for the root would otherwise wait for ever),
                 * and every later collective compares the chain
                 * (hc_coll_number). Its sig slot is free once every rank
                 * is past tick t-2, as the root's is. */
                if (!hc_node_can_write(nd, op, t))
                    return HC_STEP_PENDING;
                hc_node_post_a(nd, op, t);
                op->state = 1;
            }
            if (__atomic_load_n(&nd->line[op->root].a, __ATOMIC_ACQUIRE) < t) {
                op->round = op->root; /* whom we wait for, should it time out */
                hc_node_gave_up(nd, op, op->root);
                return HC_STEP_PENDING;
            }
            op->round = 0;
            if (t == op->tick && !hc_node_sig_check(nd, op, op->root, t))
                return HC_STEP_PENDING; /* op->error says why */
            memcpy((uint8_t *)op->rbuf + off, hc_node_stage(nd, op->root, t), bb);
            hc_node_post_b(nd, t);
            if (hc_node_counting())
                hc_node_count_bcast(op, nd, bb);
        }
        op->phase++;
    }
}

/* ---- allgather, reduce_scatter, alltoall, barrier ------------------------------- */

/* Staging for the block-per-peer collectives: tick k carries bytes
 * [k*c, k*c + c) of every one of the n per-peer blocks (c = B / n). */
static inline size_t hc_node_sub(hc_coll_node_t *nd, size_t esize)
{
    size_t c = nd->block / (size_t)nd->n;
    return c - c % esize;
}

static hc_step_t hc_node_blocks(hc_coll_op_t *op)
{
    hc_coll_node_t *nd = hc_node_of(op);
    const void *srcs[64];
    size_t c = op->chunk; /* bytes of each per-peer block per tick */
    for (;;) {
        uint64_t t = op->tick + (uint64_t)op->phase;
        if (t == op->tick_end)
            return HC_STEP_DONE;
        size_t off = (size_t)op->phase * c;
        size_t bb = op->bytes ? HC_MIN(c, op->bytes - off) : 0; /* op->bytes: per-peer block */
        if (op->state == 0) {
            if (!hc_node_can_write(nd, op, t))
                return HC_STEP_PENDING;
            uint8_t *st = hc_node_stage(nd, nd->me, t);
            if (op->kind == HC_COLL_ALLGATHER) {
                memcpy(st, (const uint8_t *)op->sbuf + off, bb);
            } else if (op->kind != HC_COLL_BARRIER) {
                for (int j = 0; j < nd->n; j++)
                    memcpy(st + (size_t)j * c, (const uint8_t *)op->sbuf + (size_t)j * op->bytes + off,
                           bb);
            }
            hc_node_post_a(nd, op, t);
            op->state = 1;
        }
        if (!hc_node_wait_a(nd, op, t))
            return HC_STEP_PENDING;
        switch (op->kind) {
        case HC_COLL_ALLGATHER:
            for (int j = 0; j < nd->n; j++)
                memcpy((uint8_t *)op->rbuf + (size_t)j * op->bytes + off, hc_node_stage(nd, j, t),
                       bb);
            break;
        case HC_COLL_ALLTOALL:
            for (int j = 0; j < nd->n; j++)
                memcpy((uint8_t *)op->rbuf + (size_t)j * op->bytes + off,
                       hc_node_stage(nd, j, t) + (size_t)nd->me * c, bb);
            break;
        case HC_COLL_REDUCE_SCATTER:
            for (int j = 0; j < nd->n; j++)
                srcs[j] = hc_node_stage(nd, j, t) + (size_t)nd->me * c;
            hc_reduce((uint8_t *)op->rbuf + off, srcs, nd->n, bb / op->esize, op->dtype, op->op,
                      nd->n);
            break;
        default:
            break;
        }
        hc_node_post_b(nd, t);
        if (hc_node_counting())
            hc_node_count_each(op, nd, 1, bb); /* barrier: bb 0, nothing */
        op->state = 0;
        op->phase++;
    }
}

/* ---- setup ------------------------------------------------------------------------ */

/* The identity a node region is made for, at its start: the first member
 * to attach writes it, every later one compares (a region is never shared
 * by two communicators, whatever their keys). */
typedef struct {
    uint32_t claimed; /* 0 -> 1 by the first member to attach */
    uint32_t ready;   /* 1 once the fields below are written */
    uint32_t ctx_id;
    int32_t n;
    int32_t members[64]; /* world ranks, in communicator order */
} HC_ALIGNED_CL hc_node_ident_t;

/* The region's key: the context id and the lowest member's world rank,
 * exactly (no hash). Unique among all communicators that ever exist on a
 * node: every rank's context ids grow (a new communicator's id is above
 * every id any of its members has used, core/comm.c), so two communicators
 * with one id have no member in common, hence different lowest members.
 * The low bit is set: keys 0 and 1 mean "unused" and "free" to the driver. */
static uint64_t hc_node_key(const struct hcomm_comm *comm)
{
    int lowest = comm->world_ranks[0];
    for (int r = 1; r < comm->size; r++)
        lowest = HC_MIN(lowest, comm->world_ranks[r]);
    return (uint64_t)comm->ctx_id << 32 | (uint64_t)(uint32_t)lowest << 1 | 1u;
}

/* Claims or checks the region's identity; false (with an error logged) on
 * a region made for another communicator. */
static bool hc_node_ident_check(hc_node_ident_t *id, const struct hcomm_comm *comm)
{
    uint32_t zero = 0;
    if (__atomic_compare_exchange_n(&id->claimed, &zero, 1, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        id->ctx_id = comm->ctx_id;
        id->n = comm->size;
        for (int r = 0; r < comm->size; r++)
            id->members[r] = comm->world_ranks[r];
        __atomic_store_n(&id->ready, 1, __ATOMIC_RELEASE);
        return true;
    }
    /* The claimer writes at once (no waiting in between): a short spin. */
    double deadline = hc_time_sec() + HC_MIN(hc_cfg.timeout, 10.0);
    hc_backoff_t b = {0};
    while (!__atomic_load_n(&id->ready, __ATOMIC_ACQUIRE)) {
        if (hc_time_sec() > deadline) {
            hc_log_error("node region of communicator 0x%x: the member that created it never "
                         "wrote its identity (died?)", comm->ctx_id);
            return false;
        }
        hc_backoff_step(&b);
    }
    bool same = id->ctx_id == comm->ctx_id && id->n == comm->size;
    for (int r = 0; same && r < comm->size; r++)
        same = id->members[r] == comm->world_ranks[r];
    if (!same)
        hc_log_error("node region of communicator 0x%x (%d ranks, first world rank %d) was made "
                     "for communicator 0x%x (%d ranks, first world rank %d): refused (a bug: "
                     "please report it)",
                     comm->ctx_id, comm->size, comm->world_ranks[0], id->ctx_id, id->n,
                     id->members[0]);
    return same;
}

bool hc_coll_node_usable(struct hcomm_comm *comm)
{
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (!cc)
        return false;
    if (cc->node_checked)
        return cc->node != NULL;
    cc->node_checked = true;
    if (comm->size < 2 || comm->size > 64)
        return false;
    for (int r = 0; r < comm->size; r++)
        if (!hc_core_on_my_node(comm->world_ranks[r]))
            return false;
    hc_drv_t *d = hc_core_node_driver();
    if (!d)
        return false;
    int n = comm->size;
    size_t block = HC_ALIGN_UP(HC_MAX(hc_cfg.coll_chunk, (size_t)4096), (size_t)4096);
    size_t size = sizeof(hc_node_ident_t) + sizeof(hc_node_line_t) * (size_t)n +
                  sizeof(hc_node_done_t) * (size_t)n + sizeof(hc_node_desc_t) * (size_t)n +
                  sizeof(hc_node_started_t) * (size_t)n + block * 2 * (size_t)n + block * 2;
    uint64_t key = hc_node_key(comm);
    uint8_t *base = d->ops->shared_get(d, key, size, n);
    if (!base) {
        hc_log_info("no node-shared region for a communicator of %d ranks: using p2p algorithms", n);
        return false;
    }
    if (!hc_node_ident_check((hc_node_ident_t *)base, comm)) {
        /* Not ours: no reference of ours to drop. Its members would read
         * our flags as theirs: this communicator stops here. */
        hc_coll_break(comm, HCOMM_ERR_INTERNAL,
                      "its node-shared region belongs to another communicator (see the log)");
        return false;
    }
    base += sizeof(hc_node_ident_t);
    hc_coll_node_t *nd = calloc(1, sizeof(*nd));
    if (!nd) {
        d->ops->shared_put(d, key);
        return false;
    }
    nd->drv = d;
    nd->key = key;
    nd->n = n;
    nd->me = comm->rank;
    nd->block = block;
    nd->line = (hc_node_line_t *)base;
    nd->done = (hc_node_done_t *)(base + sizeof(hc_node_line_t) * (size_t)n);
    nd->desc = (hc_node_desc_t *)(base + (sizeof(hc_node_line_t) + sizeof(hc_node_done_t)) *
                                             (size_t)n);
    nd->started = (hc_node_started_t *)(nd->desc + n);
    nd->stage = (uint8_t *)(nd->started + n);
    nd->res = nd->stage + block * 2 * (size_t)n;
    nd->scratch = aligned_alloc(64, block); /* NULL: large outputs use plain stores */
    cc->node = nd;
    return true;
}

void hc_coll_node_started(struct hc_coll_node *nd, uint64_t seq)
{
    __atomic_store_n(&nd->started[nd->me].seq, seq + 1, __ATOMIC_RELEASE);
}

bool hc_coll_node_ahead(const struct hc_coll_node *nd, int j, uint64_t seq)
{
    return __atomic_load_n(&nd->started[j].seq, __ATOMIC_ACQUIRE) > seq + 1;
}

void hc_coll_node_give_up(struct hc_coll_node *nd, hcomm_status_t status, int cause)
{
    if (status < 0) {
        __atomic_store_n(&nd->done[nd->me].gave_up_cause, cause + 1, __ATOMIC_RELAXED);
        __atomic_store_n(&nd->done[nd->me].gave_up, -(int32_t)status, __ATOMIC_RELEASE);
    }
}

void hc_coll_node_free(hc_coll_node_t *node)
{
    hc_node_rkeys_release(node);
    free(node->scratch);
    node->drv->ops->shared_put(node->drv, node->key);
    free(node);
}

/* Ticks for per_rank_bytes moved in pieces of chunk bytes (at least one). */
static void hc_node_begin_chunks(hc_coll_op_t *op, size_t per_rank_bytes, size_t chunk)
{
    hc_coll_node_t *nd = hc_node_of(op);
    size_t nb = per_rank_bytes ? (per_rank_bytes + chunk - 1) / chunk : 1;
    op->tick = nd->tick + 1;
    op->tick_end = op->tick + nb;
    nd->tick += nb;
    op->state = 0;
    op->round = 0;
}

/* Large collectives first try the single-copy path, keeping the staged
 * algorithm (and its ticks) as the fallback all ranks agree on. */
static hc_coll_step_fn hc_node_try_1copy(hc_coll_op_t *op, hc_coll_step_fn staged, bool allowed)
{
    hc_coll_node_t *nd = hc_node_of(op);
    size_t moved = op->kind == HC_COLL_ALLREDUCE ? op->bytes : op->bytes * (size_t)nd->n;
    if (!allowed || !nd->scratch || moved < HC_NODE_ZC_MIN)
        return staged;
    op->fallback = staged;
    op->tick_end += 1; /* the handshake tick */
    nd->tick += 1;
    op->algo = "node-1copy";
    return hc_node_1copy;
}

/* ---- the family's table (coll.h: the algorithm registry) ------------------------------ */

/* The single-copy path is tried unless a staged or direct one was forced. */
static bool hc_node_one_copy_ok(const char *forced)
{
    return !forced || !strcasecmp(forced, "node");
}

static bool hc_node_fits_inline(const hc_coll_op_t *op)
{
    return op->bytes <= HC_NODE_INLINE;
}

static bool hc_node_direct_auto(const hc_coll_op_t *op)
{
    return op->comm->size <= 3 || op->bytes <= HC_NODE_DIRECT_MAX;
}

static hc_coll_step_fn hc_node_prep_inline(hc_coll_op_t *op, const char *forced)
{
    (void)forced;
    hc_node_begin(op, 0);
    return hc_node_allreduce_inline;
}

static hc_coll_step_fn hc_node_prep_direct(hc_coll_op_t *op, const char *forced)
{
    hc_node_begin(op, op->bytes);
    return hc_node_try_1copy(op, hc_node_allreduce_direct,
                             hc_node_one_copy_ok(forced) && op->kind == HC_COLL_ALLREDUCE);
}

static hc_coll_step_fn hc_node_prep_staged(hc_coll_op_t *op, const char *forced)
{
    hc_node_begin(op, op->bytes);
    return hc_node_try_1copy(op, hc_node_allreduce_staged, hc_node_one_copy_ok(forced));
}

/* Staged beats a single copy here: the root's copy-in and the receivers'
 * copy-out overlap block by block (measured). */
static hc_coll_step_fn hc_node_prep_broadcast(hc_coll_op_t *op, const char *forced)
{
    (void)forced;
    hc_node_begin(op, op->bytes);
    return hc_node_broadcast;
}

static hc_coll_step_fn hc_node_prep_allgather(hc_coll_op_t *op, const char *forced)
{
    op->chunk = hc_node_of(op)->block;
    hc_node_begin(op, op->bytes);
    return hc_node_try_1copy(op, hc_node_blocks, hc_node_one_copy_ok(forced));
}

static hc_coll_step_fn hc_node_prep_chunks(hc_coll_op_t *op, const char *forced)
{
    op->chunk = hc_node_sub(hc_node_of(op), op->esize);
    if (op->chunk == 0)
        return NULL;
    hc_node_begin_chunks(op, op->bytes, op->chunk);
    /* In-place alltoall: a peer may still read the block I would
     * overwrite; it stays staged. */
    return hc_node_try_1copy(op, hc_node_blocks,
                             hc_node_one_copy_ok(forced) &&
                                 !(op->kind == HC_COLL_ALLTOALL && op->sbuf == op->rbuf));
}

static hc_coll_step_fn hc_node_prep_barrier(hc_coll_op_t *op, const char *forced)
{
    (void)forced;
    op->chunk = 0;
    hc_node_begin(op, 0);
    return hc_node_blocks;
}

#define HC_NODE_ANY "node node-direct node-staged"

/* Order matters: for each collective the automatic choice is the first
 * entry whose auto_pick says yes. prepare may rename the op to node-1copy
 * (hc_node_try_1copy). */
const hc_coll_algo_t hc_coll_node_algos[] = {
    {.name = "node-inline", .family = HC_NODE_ANY,
     .colls = HC_COLL_BIT(HC_COLL_ALLREDUCE) | HC_COLL_BIT(HC_COLL_REDUCE),
     .applies = hc_node_fits_inline, .prepare = hc_node_prep_inline},
    /* reduce has no staged variant: every node value means direct */
    {.name = "node-direct", .family = HC_NODE_ANY, .colls = HC_COLL_BIT(HC_COLL_REDUCE),
     .prepare = hc_node_prep_direct},
    {.name = "node-direct", .family = "node", .colls = HC_COLL_BIT(HC_COLL_ALLREDUCE),
     .auto_pick = hc_node_direct_auto, .prepare = hc_node_prep_direct},
    {.name = "node-staged", .family = "node", .colls = HC_COLL_BIT(HC_COLL_ALLREDUCE),
     .prepare = hc_node_prep_staged},
    {.name = "node-staged", .family = HC_NODE_ANY, .colls = HC_COLL_BIT(HC_COLL_BROADCAST),
     .prepare = hc_node_prep_broadcast},
    {.name = "node-staged", .family = HC_NODE_ANY, .colls = HC_COLL_BIT(HC_COLL_ALLGATHER),
     .prepare = hc_node_prep_allgather},
    {.name = "node-staged", .family = HC_NODE_ANY,
     .colls = HC_COLL_BIT(HC_COLL_REDUCE_SCATTER) | HC_COLL_BIT(HC_COLL_ALLTOALL),
     .prepare = hc_node_prep_chunks},
    {.name = "node-flags", .family = HC_NODE_ANY, .colls = HC_COLL_BIT(HC_COLL_BARRIER),
     .prepare = hc_node_prep_barrier},
    {.name = NULL},
};
