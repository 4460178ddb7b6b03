/*
 * The one way a collective is decided and started (issue 31): every
 * collective, the user's (api/api_coll.c, after its argument checks), a
 * group's member (coll_group.c), a hierarchical algorithm's child on an
 * internal communicator (coll.c: hc_coll_child_start) and the library's
 * own (comm split's allgather, HCOMM_CHECK's fingerprint), goes through
 * hc_coll_post or hc_coll_launch here:
 *
 *   hc_coll_post    refuses a communicator that cannot take it (broken, a
 *                   failed member, a member gave up, a disagreement seen),
 *                   counts it (HCOMM_STATS), compares fingerprints
 *                   (HCOMM_CHECK), runs a small blocking node collective
 *                   inline (no request, no queue), or creates the op and
 *                   defers it into the open group or launches it, then
 *                   waits for a blocking one
 *   hc_coll_launch  picks the algorithm (HCOMM_ALGO, with the automatic
 *                   choice where the forced one does not apply: said once
 *                   per collective), explains it (HCOMM_LOG=info, once per
 *                   collective and size class), accounts it (HCOMM_STATS),
 *                   and starts it on its communicator's queue; on failure
 *                   the op and its request are released
 */
#include "coll/coll.h"
#include "gpu/gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *hc_coll_forced;      /* HCOMM_ALGO unless "auto", read at init */
static uint32_t hc_coll_fallback_logged; /* kinds the forced algorithm does not cover */
static uint64_t hc_coll_logged[HC_COLL_KIND_COUNT]; /* size classes already explained */
bool hc_coll_internal; /* the library's own collective: neither checked nor counted */

hcomm_status_t hc_coll_post_init(void)
{
    if (!hc_coll_algo_known(hc_cfg.algo)) {
        char names[400];
        hc_coll_algo_list(names, sizeof(names));
        return hc_error(HCOMM_ERR_INVALID, "hcomm_init: HCOMM_ALGO=%s is not an algorithm: use %s",
                        hc_cfg.algo, names);
    }
    hc_coll_forced = strcasecmp(hc_cfg.algo, "auto") ? hc_cfg.algo : NULL;
    memset(hc_coll_logged, 0, sizeof(hc_coll_logged));
    hc_coll_fallback_logged = 0;
    return HCOMM_OK;
}

/* HCOMM_LOG=info: the choice, once per collective and size class. */
static void hc_coll_explain_choice(const hc_coll_op_t *op)
{
    if (hc_log_level_current < HC_LOG_INFO)
        return;
    int cls = op->bytes ? 64 - __builtin_clzll(op->bytes) : 0;
    if (hc_coll_logged[op->kind] & (1ull << cls))
        return;
    hc_coll_logged[op->kind] |= 1ull << cls;
    if (op->parent)
        hc_log_info("%s (%s): its %s of %zu bytes on %d ranks -> algorithm %s",
                    hc_coll_name(op->parent->kind), op->parent->algo, hc_coll_name(op->kind),
                    op->bytes, op->comm->size, op->algo);
    else
        hc_log_info("%s: %zu bytes on %d ranks -> algorithm %s", hc_coll_name(op->kind),
                    op->bytes, op->comm->size, op->algo);
}

/* Explains (HCOMM_LOG=info) and counts (HCOMM_STATS) a chosen algorithm. */
static void hc_coll_account(const hc_coll_op_t *op)
{
    hc_coll_explain_choice(op);
    const char *a = op->algo; /* "node..." (no strncmp call on the small-message path) */
    bool node = a && a[0] == 'n' && a[1] == 'o' && a[2] == 'd' && a[3] == 'e';
    if (node)
        hc_stats.coll_node++;
    else if (op->comm->size > 1)
        hc_stats.coll_p2p++;
    if (HC_UNLIKELY(hc_stats_level) && !hc_coll_internal)
        hc_stats_algo(op->kind, op->bytes, op->algo, op->comm, node);
}

/* Local copy for communicators of one rank and in-place bookkeeping. */
static hc_step_t hc_coll_local_step(hc_coll_op_t *op)
{
    size_t n = op->bytes;
    if (op->kind == HC_COLL_BARRIER || op->kind == HC_COLL_BROADCAST || !op->rbuf)
        return HC_STEP_DONE;
    if (op->sbuf != op->rbuf)
        memmove(op->rbuf, op->sbuf, n);
    return HC_STEP_DONE;
}

/* op->step and op->algo from the registry, HCOMM_ALGO first. */
static hcomm_status_t hc_coll_select(hc_coll_op_t *op)
{
    const char *forced = hc_coll_forced;
    op->step = NULL;
    if (op->comm->size == 1 && op->kind <= HC_COLL_BARRIER) {
        /* (the rooted and vector kinds' algorithms handle one rank) */
        op->step = hc_coll_local_step;
        op->algo = "local";
    } else {
        op->step = hc_coll_algo_pick(op, forced, hc_coll_node_usable(op->comm));
    }
    if (!op->step && forced) {
        /* The forced family does not implement this collective (at this
         * size or rank count): the automatic choice, said once per kind. */
        if (!(hc_coll_fallback_logged & (1u << op->kind)) && !(op->comm->ctx_id & HC_CTX_SUB)) {
            hc_coll_fallback_logged |= 1u << op->kind;
            hc_log_warn("HCOMM_ALGO=%s does not implement %s on %d ranks (%zu bytes): using the "
                        "automatic choice for it",
                        forced, hc_coll_name(op->kind), op->comm->size, op->bytes);
        }
        op->step = hc_coll_algo_pick(op, NULL, hc_coll_node_usable(op->comm));
    }
    if (!op->step) {
        if (op->parent)
            return hc_error(HCOMM_ERR_INTERNAL, "%s (%s): no algorithm for its %s on %d ranks",
                            hc_coll_name(op->parent->kind), op->parent->algo,
                            hc_coll_name(op->kind), op->comm->size);
        return hc_error(HCOMM_ERR_UNSUPPORTED, "%s: no algorithm for %zu bytes on %d ranks%s%s",
                        hc_coll_name(op->kind), op->bytes, op->comm->size,
                        forced ? " with HCOMM_ALGO=" : "", forced ? forced : "");
    }
    if (HC_UNLIKELY(op->smem != HC_MEM_HOST || op->rmem != HC_MEM_HOST) &&
        strcmp(op->algo, "node-1copy"))
        /* hc_coll_node_takes_device promised the single copy, the one
         * algorithm that takes device memory: never let another touch it */
        return hc_error(HCOMM_ERR_INTERNAL,
                        "%s: device buffers reached algorithm %s, which moves host memory only",
                        hc_coll_name(op->kind), op->algo);
    hc_coll_account(op);
    return HCOMM_OK;
}

hcomm_status_t hc_coll_launch(hc_coll_op_t *op)
{
    struct hcomm_request *req = op->req;
    req->deferred = false;
    hcomm_status_t st = hc_coll_select(op);
    if (st == HCOMM_OK)
        st = hc_coll_start(op);
    if (HC_UNLIKELY(st != HCOMM_OK)) {
        req->coll = NULL;
        if (op->on_done)
            op->on_done(op, st);
        hc_coll_op_release(op);
    }
    return st;
}

/* HCOMM_CHECK=1: what every rank must agree on, compared across ranks by an
 * allgather before the collective itself (fields that do not apply to the
 * kind are 0 on every rank). */
typedef struct {
    int32_t kind, dtype, op, root;
    uint64_t count;
} hc_coll_print_t;

static hcomm_status_t hc_coll_check_args(const hc_coll_args_t *a, struct hcomm_comm *comm)
{
    const char *fn = hc_coll_name(a->kind);
    hc_coll_kind_t kind = a->kind;
    bool reduction = kind == HC_COLL_ALLREDUCE || kind == HC_COLL_REDUCE ||
                     kind == HC_COLL_REDUCE_SCATTER || kind == HC_COLL_REDUCE_SCATTERV;
    bool rooted = hc_coll_rooted(kind);
    hc_coll_print_t mine = {.kind = (int32_t)kind,
                            .dtype = kind == HC_COLL_BARRIER ? 0 : (int32_t)a->dtype,
                            .op = reduction ? (int32_t)a->op : 0,
                            .root = rooted ? a->root : 0,
                            .count = kind == HC_COLL_BARRIER ? 0 : a->count};
    hc_coll_print_t *all = malloc(sizeof(*all) * (size_t)comm->size);
    if (!all)
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory for HCOMM_CHECK", fn);
    int depth = hc_ctx.group_depth; /* the check runs now, also inside a group */
    hc_ctx.group_depth = 0;
    hcomm_status_t st = hc_coll_internal_allgather(&mine, all, sizeof(mine), comm);
    hc_ctx.group_depth = depth;
    for (int r = 0; st == HCOMM_OK && r < comm->size; r++) {
        const hc_coll_print_t *o = &all[r];
        if (o->kind != mine.kind)
            st = hc_error(HCOMM_ERR_INVALID, "%s: rank %d called %s here (HCOMM_CHECK)", fn, r,
                          hc_coll_name((hc_coll_kind_t)o->kind));
        else if (o->count != mine.count)
            st = hc_error(HCOMM_ERR_INVALID, "%s: count %zu here, %llu on rank %d (HCOMM_CHECK)",
                          fn, a->count, (unsigned long long)o->count, r);
        else if (o->dtype != mine.dtype)
            st = hc_error(HCOMM_ERR_INVALID, "%s: dtype %s here, %s on rank %d (HCOMM_CHECK)", fn,
                          hc_dtype_name(a->dtype), hc_dtype_name((hcomm_dtype_t)o->dtype), r);
        else if (o->op != mine.op)
            st = hc_error(HCOMM_ERR_INVALID, "%s: op %s here, %s on rank %d (HCOMM_CHECK)", fn,
                          hc_op_name(a->op), hc_op_name((hcomm_op_t)o->op), r);
        else if (o->root != mine.root)
            st = hc_error(HCOMM_ERR_INVALID, "%s: root %d here, %d on rank %d (HCOMM_CHECK)", fn,
                          a->root, o->root, r);
    }
    free(all);
    return st;
}

/* The vector collective's arrays, copied into the op (one allocation). */
static hcomm_status_t hc_coll_vec_copy(hc_coll_op_t *op, const hc_coll_vec_t *vec)
{
    size_t n = (size_t)op->comm->size;
    const size_t *src[4] = {vec->scounts, vec->sdispls, vec->rcounts, vec->rdispls};
    op->varr = malloc(4 * n * sizeof(size_t));
    if (!op->varr)
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory for %zu counts", hc_coll_name(op->kind),
                        4 * n);
    const size_t *dst[4] = {NULL, NULL, NULL, NULL};
    for (int k = 0; k < 4; k++)
        if (src[k]) {
            memcpy(op->varr + (size_t)k * n, src[k], n * sizeof(size_t));
            dst[k] = op->varr + (size_t)k * n;
        }
    op->vec = (hc_coll_vec_t){dst[0], dst[1], dst[2], dst[3]};
    return HCOMM_OK;
}

/* A small blocking node collective with nothing queued on its
 * communicator: no request, no queue, on the caller's stack. */
static bool hc_coll_inline_fits(const hc_coll_args_t *a, struct hcomm_comm *comm, bool blocking)
{
    return blocking && hc_ctx.group_depth == 0 && a->bytes <= HC_COLL_NODE_INLINE &&
           (a->kind == HC_COLL_ALLREDUCE || a->kind == HC_COLL_REDUCE ||
            a->kind == HC_COLL_BARRIER) &&
           hc_list_empty(&comm->coll_queue) && comm->size > 1 &&
           (!hc_coll_forced || !strncasecmp(hc_coll_forced, "node", 4)) &&
           hc_coll_node_usable(comm);
}

bool hc_coll_node_takes_device(const hc_coll_args_t *a, struct hcomm_comm *comm)
{
    /* (hc_node_try_1copy's own rule: what moves, the forced name) */
    bool whole = a->kind == HC_COLL_ALLREDUCE || a->kind == HC_COLL_BROADCAST ||
                 a->kind == HC_COLL_REDUCE;
    bool rooted = hc_coll_rooted(a->kind);
    size_t moved = whole ? a->bytes : a->bytes * (size_t)comm->size;
    bool kind = rooted || a->kind == HC_COLL_ALLREDUCE || a->kind == HC_COLL_ALLGATHER ||
                a->kind == HC_COLL_REDUCE_SCATTER || a->kind == HC_COLL_ALLTOALL;
    /* (the rooted ones try the single copy only while a backend is active:
     * on host memory other algorithms are the better ones) */
    if (!kind || (rooted && !hc_gpu_on) ||
        moved < HC_COLL_NODE_DEVICE_MIN || comm->size < 2 || hc_ctx.group_depth > 0 ||
        (hc_coll_forced && strcasecmp(hc_coll_forced, "node")) || !hc_coll_node_usable(comm))
        return false;
    return hc_coll_node_scratch(comm);
}

static hcomm_status_t hc_coll_inline(const hc_coll_args_t *a, struct hcomm_comm *comm, uint64_t t0)
{
    hc_coll_op_t op;
    hc_coll_op_init(&op);
    hc_coll_op_set(&op, a, comm);
    op.req = NULL;
    hc_coll_number(&op);
    op.step = hc_coll_algo_pick(&op, hc_coll_forced, true);
    hc_coll_account(&op);
    hcomm_status_t st = hc_coll_run_inline(&op, hc_coll_name(a->kind));
    if (t0) {
        if (hc_stats_level >= 2) /* all of it was a wait */
            hc_stats_wait(a->kind, hc_time_ns() - t0);
        hc_stats_end(a->kind, a->bytes, comm, t0);
    }
    return st;
}

hcomm_status_t hc_coll_post(const hc_coll_args_t *a, struct hcomm_comm *comm,
                            hcomm_request_t *req_p)
{
    const char *fn = hc_coll_name(a->kind);
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (HC_UNLIKELY(!cc))
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    hcomm_status_t st = hc_coll_comm_usable(comm, cc, fn);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return st;
    uint64_t t0 = hc_coll_internal ? 0 : hc_stats_begin(a->kind, a->bytes, comm, -1);
    if (HC_UNLIKELY(hc_cfg.check) && comm->size > 1 && !hc_coll_internal &&
        (st = hc_coll_check_args(a, comm)) != HCOMM_OK)
        return st;
    if (hc_coll_inline_fits(a, comm, !req_p))
        return hc_coll_inline(a, comm, t0);
    hc_coll_op_t *op;
    if (HC_UNLIKELY((st = hc_coll_op_create(a, comm, &op)) != HCOMM_OK))
        return st;
    struct hcomm_request *req = op->req;
    if (!hc_coll_internal)
        hc_request_stat(req, a->kind, a->bytes, t0);
    if (a->vec && (st = hc_coll_vec_copy(op, a->vec)) != HCOMM_OK) {
        req->coll = NULL;
        hc_coll_op_release(op);
        hc_request_free(req);
        return st;
    }
    if (hc_ctx.group_depth > 0)
        return hc_coll_group_defer(op, req_p);
    if (HC_UNLIKELY((st = hc_coll_launch(op)) != HCOMM_OK)) {
        hc_request_free(req);
        return st;
    }
    if (req_p) {
        req->user = true;
        *req_p = hc_request_handle(req);
        return HCOMM_OK;
    }
    st = hc_request_wait(req, fn);
    hc_request_stat_end(req);
    hc_request_free(req);
    return st;
}

hcomm_status_t hc_coll_noop(hcomm_request_t *req_p)
{
    if (!req_p)
        return HCOMM_OK;
    struct hcomm_request *req = hc_request_alloc(HC_REQ_COLL);
    if (!req)
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm collective: no memory for a request");
    req->user = true;
    req->peer = -1;
    hc_request_complete(req, HCOMM_OK);
    *req_p = hc_request_handle(req);
    return HCOMM_OK;
}

hcomm_status_t hc_coll_internal_max(uint64_t mine, uint64_t *max_p, struct hcomm_comm *comm)
{
    uint64_t in = mine, out = 0;
    hc_coll_args_t a = {.kind = HC_COLL_ALLREDUCE, .sbuf = &in, .rbuf = &out, .count = 1,
                        .bytes = sizeof(in), .dtype = HCOMM_UINT64, .op = HCOMM_MAX};
    bool outer = hc_coll_internal;
    int depth = hc_ctx.group_depth; /* (never inside a group: it runs now) */
    hc_coll_internal = true;
    hc_ctx.group_depth = 0;
    hcomm_status_t st = hc_coll_post(&a, comm, NULL);
    hc_ctx.group_depth = depth;
    hc_coll_internal = outer;
    *max_p = out;
    return st;
}

hcomm_status_t hc_coll_internal_any(bool mine, bool *any_p, struct hcomm_comm *comm)
{
    uint64_t any = 0;
    hcomm_status_t st = hc_coll_internal_max(mine, &any, comm);
    *any_p = any != 0;
    return st;
}

hcomm_status_t hc_coll_internal_allgather(const void *mine, void *all, size_t bytes,
                                          struct hcomm_comm *comm)
{
    hc_coll_args_t a = {.kind = HC_COLL_ALLGATHER, .sbuf = mine, .rbuf = all, .count = bytes,
                        .bytes = bytes, .dtype = HCOMM_UINT8};
    bool outer = hc_coll_internal;
    hc_coll_internal = true;
    hcomm_status_t st = hc_coll_post(&a, comm, NULL);
    hc_coll_internal = outer;
    return st;
}
