/*
 * The node family's internals, shared by its files: node_region.c (the
 * region: its key and identity, attach, lifetime; the family's algorithm
 * table), node_common.c (the flag protocol), node_reduce.c (inline, direct
 * and staged allreduce/reduce), node_1copy.c (single copy), node_blocks.c
 * (broadcast, allgather, reduce_scatter, alltoall, barrier), node_stats.c
 * (level-2 per-peer counts).
 *
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
#ifndef HC_COLL_NODE_H
#define HC_COLL_NODE_H

#include "coll/coll.h"
#include "coll/copy.h"
#include "mem/mem.h"

#include <stdlib.h>
#include <string.h>

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
    uint8_t mem; /* HC_NODE_MEM_*: what this rank's buffers are (node_device.c) */
    uint8_t pad;
    uint64_t saddr, raddr;
    uint8_t skey[HC_RKEY_MAX], rkey[HC_RKEY_MAX];
} HC_ALIGNED_CL hc_node_desc_t;
_Static_assert(sizeof(hc_node_desc_t) == 2 * HC_CACHE_LINE, "two lines per rank");

enum {
    HC_NODE_CAN_GET = 1u << 0,
    HC_NODE_CAN_MAP = 1u << 1,
    HC_NODE_OUT_OF_PLACE = 1u << 2, /* my output does not overlap my input */
};

/* What a rank's buffers are (hc_node_desc_t.mem): both host, both device,
 * or one of each. */
enum { HC_NODE_MEM_HOST = 1, HC_NODE_MEM_DEVICE = 2, HC_NODE_MEM_MIXED = 3 };

/* Large pool-to-pool allreduces at least this big go zero-copy (the API
 * passes device buffers down from the same size: coll.h). */
#define HC_NODE_ZC_MIN HC_COLL_NODE_DEVICE_MIN

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
    /* This rank's registration records behind its device buffers' IPC keys
     * (node_device.c), held as long as the peers' mappings of them. */
    struct hc_mem_region *held[2];
    int nheld;
    /* Host staging of this rank's device buffers when the single copy
     * falls back (node_device.c), kept for the next: one op runs at a
     * time on a communicator. */
    uint8_t *dev_stage;
    size_t dev_stage_bytes;
    const uint8_t *zs[64];            /* this op: every rank's input and output */
    uint8_t *zr[64];
    uint8_t *stage;
    uint8_t *res;
    uint8_t *scratch;    /* private block: reduce here, stream out (large outputs) */
    uint64_t tick;       /* last tick started here */
    uint64_t a_seen_all; /* highest tick for which every a[j] was seen */
    uint64_t b_seen_all;
} hc_coll_node_t;

/* ---- node_common.c: the flag protocol ---------------------------------------- */
/* Rank j's signature of tick t (op's first) against mine; on a mismatch
 * op->error is set and false returned. */
bool hc_node_sig_mismatch(hc_coll_op_t *op, int j, uint32_t theirs, bool moved_on);
/* Every a[j] >= t? Resumable: op->round is the next rank to check. At the
 * op's first tick the signatures are compared too. */
bool hc_node_wait_a(hc_coll_node_t *nd, hc_coll_op_t *op, uint64_t t);
bool hc_node_wait_b(hc_coll_node_t *nd, hc_coll_op_t *op, uint64_t t);
/* Ticks for op: per_rank_bytes in blocks of the region's block size
 * (op->tick = the first, tick_end = one past the last). */
void hc_node_begin(hc_coll_op_t *op, size_t per_rank_bytes);
/* Stage bb bytes of src into my block of tick t and publish it; false while
 * the block may still be read by a slower rank (tick t-2). */
bool hc_node_stage_publish(hc_coll_node_t *nd, hc_coll_op_t *op, uint64_t t, const void *src,
                           size_t bb);


static inline uint8_t *hc_node_stage(hc_coll_node_t *nd, int rank, uint64_t t)
{
    return nd->stage + ((size_t)rank * 2 + (t & 1)) * nd->block;
}
static inline uint8_t *hc_node_res(hc_coll_node_t *nd, uint64_t t)
{
    return nd->res + (t & 1) * nd->block;
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
        if (!hc_status_is_error(-st))
            st = -HCOMM_ERR_PEER_FAILED;
        if (-st == HCOMM_ERR_REVOKED && cause >= 0 && cause < op->comm->size) {
            /* j gave up because communicator rank `cause` revoked it
             * (hc_coll_break): revoked here too, by that rank */
            hc_comm_revoked(op->comm, cause);
            op->error = hc_comm_abort_error(op->comm, hc_coll_name(op->kind));
            return false;
        }
        if (cause >= 0 && cause < hc_ctx.size && hc_coll_heard_cause < 0)
            hc_coll_heard_cause = cause;
        if (cause < 0 && -st == HCOMM_ERR_PEER_FAILED)
            cause = hc_coll_known_cause();
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

/* Does comm rank j read the result of op (allreduce: all; reduce: the root)? */
static inline bool hc_node_wants(const hc_coll_op_t *op, int j)
{
    return op->kind != HC_COLL_REDUCE || j == op->root;
}

/* Bytes of slice j of a tick's ec elements (hc_node_slice). */
static inline size_t hc_node_slice_bytes(const hc_coll_op_t *op, size_t ec, int n, int j)
{
    size_t lo, hi;
    hc_node_slice(ec, n, j, &lo, &hi);
    return (hi - lo) * op->esize;
}

/* ---- node_stats.c: level-2 statistics, out of line (one load and a branch
 * not taken below level 2: hc_node_counting) -------------------------------- */
void hc_node_peer(const hc_coll_op_t *op, int j, uint64_t tx_msgs, size_t tx, uint64_t rx_msgs,
                  size_t rx);
void hc_node_count_direct(const hc_coll_op_t *op, const hc_coll_node_t *nd, size_t bb);
void hc_node_count_staged(const hc_coll_op_t *op, const hc_coll_node_t *nd, size_t ec);
void hc_node_count_staged_out(const hc_coll_op_t *op, const hc_coll_node_t *nd, size_t ec);
void hc_node_count_each(const hc_coll_op_t *op, const hc_coll_node_t *nd, uint64_t msgs,
                        size_t bytes);
void hc_node_count_sliced(const hc_coll_op_t *op, const hc_coll_node_t *nd, size_t chunk);
void hc_node_count_bcast(const hc_coll_op_t *op, const hc_coll_node_t *nd, size_t bb);

/* ---- the algorithms' steps (node_reduce.c, node_1copy.c, node_blocks.c) ------- */
hc_step_t hc_node_allreduce_inline(hc_coll_op_t *op);
hc_step_t hc_node_allreduce_staged(hc_coll_op_t *op);
hc_step_t hc_node_allreduce_direct(hc_coll_op_t *op);
hc_step_t hc_node_1copy(hc_coll_op_t *op);
hc_step_t hc_node_broadcast(hc_coll_op_t *op);
hc_step_t hc_node_blocks(hc_coll_op_t *op);
/* Peers' remote keys of the last single-copy collective, and this rank's
 * records behind its own device keys, released. */
void hc_node_rkeys_release(hc_coll_node_t *nd);

/* ---- node_device.c: device memory in the node family ---------------------------- */
/* The single copy falls back (fallback: op->step's algorithm, on the
 * region) while this rank has device buffers: they are staged through a
 * private host buffer (op->tmp) for it, the input copied in now and the
 * output copied back when it is done (hc_gpu_stats' staging counters);
 * the region's algorithms then see host memory only. */
hc_step_t hc_node_dev_fall_back(hc_coll_op_t *op);
/* The bytes a single-copy collective reads from every rank's input (sn)
 * and writes into its output (rn): op->bytes, times the ranks for the
 * per-rank blocks (allgather's and gather's output, reduce_scatter's and
 * scatter's input, both of alltoall's). The same on every rank. */
static inline void hc_node_extents(const hc_coll_op_t *op, size_t *sn, size_t *rn)
{
    size_t all = op->bytes * (size_t)op->comm->size;
    hc_coll_kind_t k = op->kind;
    *sn = k == HC_COLL_REDUCE_SCATTER || k == HC_COLL_ALLTOALL || k == HC_COLL_SCATTER ? all
                                                                                       : op->bytes;
    *rn = k == HC_COLL_ALLGATHER || k == HC_COLL_ALLTOALL || k == HC_COLL_GATHER ? all : op->bytes;
}
/* Whether comm rank j passes an output: a reduce's and a gather's are the
 * root's only (the others may pass none, or anything: never touched, and
 * their memory type is their input's). */
static inline bool hc_node_writes_out(const hc_coll_op_t *op, int j)
{
    return (op->kind != HC_COLL_REDUCE && op->kind != HC_COLL_GATHER) || j == op->root;
}
/* Whether comm rank j passes an input: a scatter's is the root's only. */
static inline bool hc_node_reads_in(const hc_coll_op_t *op, int j)
{
    return op->kind != HC_COLL_SCATTER || j == op->root;
}
/* HC_NODE_MEM_* of op's buffers. */
uint8_t hc_node_mem_bits(const hc_coll_op_t *op);
/* The node driver's packed IPC key of a device buffer (0 bytes: none); the
 * registration record is held in nd->held until hc_node_rkeys_release. */
uint8_t hc_node_pack_device(hc_coll_node_t *nd, const void *buf, size_t len, uint8_t *out);
/* The single copy's MAP on device memory (every rank's buffers mapped:
 * nd->zs, nd->zr), on the device: allreduce of elements [lo, hi) (this
 * rank's slice) into every output; reduce: the same into the root's output;
 * broadcast: the root's buffer into this rank's; gather: this rank's input
 * into its block of the root's output; scatter: this rank's block of the
 * root's input into its output; allgather: every input into this rank's output; reduce_scatter:
 * this rank's block of every input; alltoall: this rank's block of every
 * input into its output. */
hcomm_status_t hc_node_1copy_map_device(hc_coll_op_t *op, hc_coll_node_t *nd, size_t lo,
                                        size_t hi);
/* HCOMM_GPU_IPC=1 and the votes say no IPC: the error, naming the rank. */
hcomm_status_t hc_node_device_refused(hc_coll_op_t *op, hc_coll_node_t *nd);
/* node_region.c: ticks in chunks, and the single copy tried first. */
void hc_node_begin_chunks(hc_coll_op_t *op, size_t per_rank_bytes, size_t chunk);
hc_coll_step_fn hc_node_try_1copy(hc_coll_op_t *op, hc_coll_step_fn staged, bool allowed);

/* Staging for the block-per-peer collectives: tick k carries bytes
 * [k*c, k*c + c) of every one of the n per-peer blocks (c = B / n). */
static inline size_t hc_node_sub(hc_coll_node_t *nd, size_t esize)
{
    size_t c = nd->block / (size_t)nd->n;
    return c - c % esize;
}

#endif /* HC_COLL_NODE_H */
