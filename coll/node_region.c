/*
 * The node family's region and table (coll/node.h): a communicator's
 * node-shared region (its exact key, its identity checked on attach), its
 * lifetime, and the family's entries in coll.h's algorithm registry.
 */
#include "coll/node.h"
#include "gpu/gpu.h"

#include <strings.h>
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

bool hc_coll_node_scratch(struct hcomm_comm *comm)
{
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    return cc && cc->node && cc->node->scratch;
}

void hc_coll_node_started(struct hc_coll_node *nd, uint64_t seq)
{
    __atomic_store_n(&nd->started[nd->me].seq, seq + 1, __ATOMIC_RELEASE);
}

bool hc_coll_node_heard(int w, char *buf, size_t len)
{
    uint64_t best = 0, mine = 0;
    uint32_t ctx = 0;
    for (hc_list_t *pos = hc_ctx.comms.next; pos != &hc_ctx.comms; pos = pos->next) {
        struct hcomm_comm *comm = hc_container_of(pos, struct hcomm_comm, link);
        hc_coll_comm_t *cc = comm->coll_priv;
        int j = comm->comm_rank_of ? comm->comm_rank_of[w] : -1;
        if (!cc || !cc->node || j < 0 || j >= cc->node->n)
            continue;
        uint64_t s = __atomic_load_n(&cc->node->started[j].seq, __ATOMIC_ACQUIRE);
        if (s > best) {
            best = s;
            ctx = comm->ctx_id;
            mine = __atomic_load_n(&cc->node->started[cc->node->me].seq, __ATOMIC_RELAXED);
        }
    }
    if (!best)
        return false;
    snprintf(buf, len, "in the node's shared region it last started collective #%llu of "
                       "communicator 0x%x (this rank: #%llu there)",
             (unsigned long long)best, ctx, (unsigned long long)mine);
    return true;
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
    free(node->dev_stage);
    node->drv->ops->shared_put(node->drv, node->key);
    free(node);
}

/* Ticks for per_rank_bytes moved in pieces of chunk bytes (at least one). */
void hc_node_begin_chunks(hc_coll_op_t *op, size_t per_rank_bytes, size_t chunk)
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
hc_coll_step_fn hc_node_try_1copy(hc_coll_op_t *op, hc_coll_step_fn staged, bool allowed)
{
    hc_coll_node_t *nd = hc_node_of(op);
    bool whole = op->kind == HC_COLL_ALLREDUCE || op->kind == HC_COLL_BROADCAST ||
                 op->kind == HC_COLL_REDUCE;
    size_t moved = whole ? op->bytes : op->bytes * (size_t)nd->n;
    if (!allowed || !nd->scratch || moved < HC_NODE_ZC_MIN)
        return staged;
    op->fallback = staged;
    op->tick_end += 1; /* the handshake tick */
    nd->tick += 1;
    op->algo = "node-1copy";
    return hc_node_1copy;
}

/* ---- the family's table (coll.h: the algorithm registry) ------------------------------ */

/* A GPU backend is active (on every rank or none) and device buffers may
 * go by IPC: then the rooted collectives try the single copy too, so that
 * device buffers go by IPC (node_device.c), host ones falling back. */
static bool hc_node_gpu_ipc(void)
{
    return hc_gpu_on && hc_ipc_mode != HC_GDR_OFF;
}

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

/* Reduce tries the single copy only while a GPU backend is active (on
 * every rank or none), so that device buffers go by IPC (node_device.c);
 * on host memory direct is the better one, and host buffers then fall back
 * to it after the single copy's handshake tick. */
static hc_coll_step_fn hc_node_prep_direct(hc_coll_op_t *op, const char *forced)
{
    hc_node_begin(op, op->bytes);
    bool one = op->kind == HC_COLL_ALLREDUCE || hc_node_gpu_ipc();
    return hc_node_try_1copy(op, hc_node_allreduce_direct, hc_node_one_copy_ok(forced) && one);
}

static hc_coll_step_fn hc_node_prep_staged(hc_coll_op_t *op, const char *forced)
{
    hc_node_begin(op, op->bytes);
    return hc_node_try_1copy(op, hc_node_allreduce_staged, hc_node_one_copy_ok(forced));
}

/* On host memory staged beats a single copy: the root's copy-in and the
 * receivers' copy-out overlap block by block (measured). While a GPU
 * backend is active (on every rank or none) the single copy is tried, so
 * that device buffers go by IPC, one device copy per receiver
 * (node_device.c); host buffers then fall back to staged after its
 * handshake tick. */
static hc_coll_step_fn hc_node_prep_broadcast(hc_coll_op_t *op, const char *forced)
{
    hc_node_begin(op, op->bytes);
    return hc_node_try_1copy(op, hc_node_broadcast,
                             hc_node_gpu_ipc() && hc_node_one_copy_ok(forced));
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
    /* (An in-place alltoall, where a peer may still read the block a rank
     * would overwrite, falls back to staged in the single copy's vote: the
     * choice to try it must not depend on what one rank passes.) */
    return hc_node_try_1copy(op, hc_node_blocks, hc_node_one_copy_ok(forced));
}

/* Gather and scatter come to the node family only while a GPU backend is
 * active (on every rank or none) and the call is large enough for the
 * single copy, so that device buffers go by IPC (node_device.c) and host
 * ones fall back to the staged blocks; otherwise (or forced to a net
 * algorithm) the net family's, as before. hc_coll_node_takes_device
 * follows the same rule. */
static bool hc_node_rooted_blocks_auto(const hc_coll_op_t *op)
{
    return hc_node_gpu_ipc() &&
           op->bytes * (size_t)op->comm->size >= HC_NODE_ZC_MIN;
}

static hc_coll_step_fn hc_node_prep_gather(hc_coll_op_t *op, const char *forced)
{
    op->chunk = hc_node_of(op)->block; /* as allgather: each rank's piece in its stage */
    hc_node_begin(op, op->bytes);
    return hc_node_try_1copy(op, hc_node_blocks,
                             hc_node_gpu_ipc() && hc_node_one_copy_ok(forced));
}

static hc_coll_step_fn hc_node_prep_scatter(hc_coll_op_t *op, const char *forced)
{
    /* as alltoall: the root's stage holds a piece of every rank's block */
    op->chunk = hc_node_sub(hc_node_of(op), op->esize);
    if (op->chunk == 0)
        return NULL;
    hc_node_begin_chunks(op, op->bytes, op->chunk);
    return hc_node_try_1copy(op, hc_node_blocks,
                             hc_node_gpu_ipc() && hc_node_one_copy_ok(forced));
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
    {.name = "node-staged", .family = HC_NODE_ANY, .colls = HC_COLL_BIT(HC_COLL_GATHER),
     .auto_pick = hc_node_rooted_blocks_auto, .prepare = hc_node_prep_gather},
    {.name = "node-staged", .family = HC_NODE_ANY, .colls = HC_COLL_BIT(HC_COLL_SCATTER),
     .auto_pick = hc_node_rooted_blocks_auto, .prepare = hc_node_prep_scatter},
    {.name = "node-flags", .family = HC_NODE_ANY, .colls = HC_COLL_BIT(HC_COLL_BARRIER),
     .prepare = hc_node_prep_barrier},
    {.name = NULL},
};
