/*
 * Public collective API: argument checks (each failure names the function,
 * the argument and the value), algorithm choice, blocking/non-blocking
 * wrappers, groups, and hcomm_comm_split (an allgather on the parent).
 */
#include "api/api.h"
#include "coll/coll.h"
#include "core/stats.h"

_Static_assert((int)HC_COLL_KIND_COUNT == (int)HC_STATS_COLL_KINDS, "stats cover every collective");
_Static_assert((int)HC_COLL_ALLREDUCE == 0 && (int)HC_COLL_BARRIER == 6 &&
                   (int)HC_COLL_ALLTOALLV == 11,
               "stats name the collectives in hc_coll_kind_t's order");
_Static_assert((int)HC_COLL_SIG_KIND_MASK == (int)HC_STATS_SIG_KIND_MASK,
               "p2p reads the kind of a collective tag as coll writes it");

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

hc_coll_op_t *hc_coll_op_alloc(void);
void hc_coll_op_release(hc_coll_op_t *op);

/* Collectives created inside hcomm_group_start/end, launched at the end. */
static struct {
    hc_coll_op_t **ops;
    struct hcomm_request **blocking; /* requests of blocking calls, waited at end */
    int nops, nblocking, cap;
} hc_group;

static uint64_t hc_coll_logged[HC_COLL_KIND_COUNT]; /* size classes already explained */
static bool hc_coll_checking; /* the HCOMM_CHECK allgather: neither checked nor counted */

static void hc_coll_explain(const hc_coll_op_t *op)
{
    if (hc_log_level_current < HC_LOG_INFO)
        return;
    int cls = op->bytes ? 64 - __builtin_clzll(op->bytes) : 0;
    if (hc_coll_logged[op->kind] & (1ull << cls))
        return;
    hc_coll_logged[op->kind] |= 1ull << cls;
    hc_log_info("%s: %zu bytes on %d ranks -> algorithm %s", hc_coll_name(op->kind), op->bytes,
                op->comm->size, op->algo);
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

static const char *hc_coll_forced; /* HCOMM_ALGO unless "auto", read at init */

static uint32_t hc_coll_fallback_logged; /* kinds the forced algorithm does not cover */

hcomm_status_t hc_coll_api_init(void)
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

/* Explains (HCOMM_LOG=info) and counts (HCOMM_STATS) a chosen algorithm. */
static void hc_coll_account(const hc_coll_op_t *op)
{
    hc_coll_explain(op);
    bool node = op->algo && !strncmp(op->algo, "node", 4);
    if (node)
        hc_stats.coll_node++;
    else if (op->comm->size > 1)
        hc_stats.coll_p2p++;
    if (HC_UNLIKELY(hc_stats_level) && !hc_coll_checking)
        hc_stats_algo(op->kind, op->bytes, op->algo, op->comm, node);
}

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
    if (!op->step)
        return hc_error(HCOMM_ERR_UNSUPPORTED, "%s: no algorithm for %zu bytes on %d ranks%s%s",
                        hc_coll_name(op->kind), op->bytes, op->comm->size,
                        forced ? " with HCOMM_ALGO=" : "", forced ? forced : "");
    hc_coll_account(op);
    return HCOMM_OK;
}

static bool hc_group_push(void **arr_p, int *n, size_t elem)
{
    if (*n == hc_group.cap) {
        int cap = hc_group.cap ? hc_group.cap * 2 : 16;
        void *ops = realloc(hc_group.ops, sizeof(*hc_group.ops) * (size_t)cap);
        if (!ops)
            return false;
        hc_group.ops = ops;
        void *bl = realloc(hc_group.blocking, sizeof(*hc_group.blocking) * (size_t)cap);
        if (!bl)
            return false;
        hc_group.blocking = bl;
        hc_group.cap = cap;
    }
    (void)arr_p;
    (void)elem;
    return true;
}

static hcomm_status_t hc_coll_post(hc_coll_kind_t kind, const void *sbuf, void *rbuf, size_t count,
                                   size_t bytes, hcomm_dtype_t dtype, hcomm_op_t rop, int root,
                                   hcomm_comm_t comm, hcomm_request_t *req_p,
                                   const hc_coll_vec_t *vec);

/* HCOMM_CHECK=1: what every rank must agree on, compared across ranks by an
 * allgather before the collective itself (fields that do not apply to the
 * kind are 0 on every rank). */
typedef struct {
    int32_t kind, dtype, op, root;
    uint64_t count;
} hc_coll_print_t;


static hcomm_status_t hc_coll_check_args(hc_coll_kind_t kind, size_t count, hcomm_dtype_t dtype,
                                         hcomm_op_t rop, int root, hcomm_comm_t comm)
{
    const char *fn = hc_coll_name(kind);
    bool reduction = kind == HC_COLL_ALLREDUCE || kind == HC_COLL_REDUCE ||
                     kind == HC_COLL_REDUCE_SCATTER || kind == HC_COLL_REDUCE_SCATTERV;
    bool rooted = kind == HC_COLL_REDUCE || kind == HC_COLL_BROADCAST ||
                  kind == HC_COLL_GATHER || kind == HC_COLL_SCATTER;
    hc_coll_print_t mine = {.kind = (int32_t)kind,
                            .dtype = kind == HC_COLL_BARRIER ? 0 : (int32_t)dtype,
                            .op = reduction ? (int32_t)rop : 0,
                            .root = rooted ? root : 0,
                            .count = kind == HC_COLL_BARRIER ? 0 : count};
    hc_coll_print_t *all = malloc(sizeof(*all) * (size_t)comm->size);
    if (!all)
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory for HCOMM_CHECK", fn);
    int depth = hc_ctx.group_depth; /* the check runs now, also inside a group */
    hc_ctx.group_depth = 0;
    hc_coll_checking = true;
    hcomm_status_t st = hc_coll_post(HC_COLL_ALLGATHER, &mine, all, sizeof(mine), sizeof(mine),
                                     HCOMM_UINT8, 0, 0, comm, NULL, NULL);
    hc_coll_checking = false;
    hc_ctx.group_depth = depth;
    for (int r = 0; st == HCOMM_OK && r < comm->size; r++) {
        const hc_coll_print_t *o = &all[r];
        if (o->kind != mine.kind)
            st = hc_error(HCOMM_ERR_INVALID, "%s: rank %d called %s here (HCOMM_CHECK)", fn, r,
                          hc_coll_name((hc_coll_kind_t)o->kind));
        else if (o->count != mine.count)
            st = hc_error(HCOMM_ERR_INVALID, "%s: count %zu here, %llu on rank %d (HCOMM_CHECK)",
                          fn, count, (unsigned long long)o->count, r);
        else if (o->dtype != mine.dtype)
            st = hc_error(HCOMM_ERR_INVALID, "%s: dtype %s here, %s on rank %d (HCOMM_CHECK)", fn,
                          hc_dtype_name(dtype), hc_dtype_name((hcomm_dtype_t)o->dtype), r);
        else if (o->op != mine.op)
            st = hc_error(HCOMM_ERR_INVALID, "%s: op %s here, %s on rank %d (HCOMM_CHECK)", fn,
                          hc_op_name(rop), hc_op_name((hcomm_op_t)o->op), r);
        else if (o->root != mine.root)
            st = hc_error(HCOMM_ERR_INVALID, "%s: root %d here, %d on rank %d (HCOMM_CHECK)", fn,
                          root, o->root, r);
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

/* Creates, selects and launches (or, inside a group, defers) one collective. */
static hcomm_status_t hc_coll_post(hc_coll_kind_t kind, const void *sbuf, void *rbuf, size_t count,
                                   size_t bytes, hcomm_dtype_t dtype, hcomm_op_t rop, int root,
                                   hcomm_comm_t comm, hcomm_request_t *req_p,
                                   const hc_coll_vec_t *vec)
{
    const char *fn = hc_coll_name(kind);
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (HC_UNLIKELY(!cc))
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    hcomm_status_t ust = hc_coll_comm_usable(comm, cc, fn);
    if (HC_UNLIKELY(ust != HCOMM_OK))
        return ust;
    uint64_t t0 = hc_coll_checking ? 0 : hc_stats_begin(kind, bytes, comm, -1);
    if (HC_UNLIKELY(hc_cfg.check) && comm->size > 1 && !hc_coll_checking) {
        hcomm_status_t st = hc_coll_check_args(kind, count, dtype, rop, root, comm);
        if (st != HCOMM_OK)
            return st;
    }
    if (!req_p && hc_ctx.group_depth == 0 && bytes <= HC_COLL_NODE_INLINE &&
        (kind == HC_COLL_ALLREDUCE || kind == HC_COLL_REDUCE || kind == HC_COLL_BARRIER) &&
        hc_list_empty(&comm->coll_queue) && comm->size > 1 &&
        (!hc_coll_forced || !strncasecmp(hc_coll_forced, "node", 4)) &&
        hc_coll_node_usable(comm)) {
        /* Small blocking node collective: no request, no queue. */
        hc_coll_op_t op;
        hc_coll_op_init(&op);
        op.req = NULL;
        op.comm = comm;
        op.kind = kind;
        op.sbuf = sbuf;
        op.rbuf = rbuf;
        op.count = count;
        op.dtype = dtype;
        op.op = rop;
        op.root = root;
        op.esize = hc_dtype_size(dtype);
        op.bytes = bytes;
        hc_coll_number(&op);
        op.step = hc_coll_algo_pick(&op, hc_coll_forced, true);
        hc_coll_account(&op);
        hcomm_status_t st = hc_coll_run_inline(&op, fn);
        if (t0) {
            if (hc_stats_level >= 2) /* all of it was a wait */
                hc_stats_wait(kind, hc_time_ns() - t0);
            hc_stats_end(kind, bytes, comm, t0);
        }
        return st;
    }
    hc_coll_op_t *op;
    hcomm_status_t st = hc_coll_op_create(kind, sbuf, rbuf, count, bytes, dtype, rop, root, comm, &op);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return st;
    struct hcomm_request *req = op->req;
    if (!hc_coll_checking)
        hc_request_stat(req, kind, bytes, t0);
    if (vec && (st = hc_coll_vec_copy(op, vec)) != HCOMM_OK) {
        req->coll = NULL;
        hc_coll_op_release(op);
        hc_request_free(req);
        return st;
    }

    if (hc_ctx.group_depth > 0) {
        if (!hc_group_push(NULL, &hc_group.nops, 0)) {
            hc_coll_op_release(op);
            hc_request_free(req);
            return hc_error(HCOMM_ERR_NO_MEMORY, "%s: group too large", fn);
        }
        hc_group.ops[hc_group.nops++] = op;
        req->deferred = true;
        if (req_p) {
            req->user = true;
            *req_p = hc_request_handle(req);
        } else {
            hc_group.blocking[hc_group.nblocking++] = req;
        }
        return HCOMM_OK;
    }
    st = hc_coll_select(op);
    if (st == HCOMM_OK)
        st = hc_coll_start(op);
    if (HC_UNLIKELY(st != HCOMM_OK)) {
        req->coll = NULL;
        hc_coll_op_release(op);
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

/* A request that is already complete (count 0, the no-op cases). */
static hcomm_status_t hc_coll_noop(hcomm_request_t *req_p)
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

static hcomm_status_t hc_coll_check_common(const char *fn, hcomm_comm_t comm, hcomm_dtype_t dtype,
                                           bool is_reduction, hcomm_op_t op, bool nb,
                                           hcomm_request_t *req_p)
{
    hcomm_status_t st = hc_check_comm(fn, comm);
    if (st != HCOMM_OK)
        return st;
    if ((st = hc_check_dtype(fn, dtype)) != HCOMM_OK)
        return st;
    if (is_reduction && (unsigned)op >= HCOMM_OP_COUNT)
        return hc_error(HCOMM_ERR_INVALID, "%s: unknown op %d (valid: 0..%d, "
                                           "HCOMM_SUM..HCOMM_AVG)", fn, (int)op, HCOMM_OP_COUNT - 1);
    if (nb && !req_p)
        return hc_error(HCOMM_ERR_INVALID, "%s: req_p is NULL", fn);
    return HCOMM_OK;
}

static hcomm_status_t hc_coll_check_root(const char *fn, hcomm_comm_t comm, int root)
{
    if (root < 0 || root >= comm->size)
        return hc_error(HCOMM_ERR_INVALID, "%s: root %d out of range for a communicator of %d "
                                           "ranks", fn, root, comm->size);
    return HCOMM_OK;
}

/* Each collective below runs between hc_api_enter and hc_api_leave (api.h:
 * the threading contract), checks its arguments, then posts. */

static hcomm_status_t hc_allreduce_impl(const char *fn, const void *sbuf, void *rbuf, size_t count,
                                        hcomm_dtype_t dtype, hcomm_op_t op, hcomm_comm_t comm,
                                        hcomm_request_t *req_p, bool nb)
{
    int g = hc_api_enter(fn);
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    size_t bytes;
    hcomm_status_t st = hc_coll_check_common(fn, comm, dtype, true, op, nb, req_p);
    if (!st && !(st = hc_check_buf(fn, "sendbuf", sbuf, count, dtype, 1, &bytes)) &&
        !(st = hc_check_buf(fn, "recvbuf", rbuf, count, dtype, 1, &bytes)) &&
        !(st = hc_check_overlap(fn, sbuf, bytes, rbuf, bytes, sbuf == rbuf,
                                "in place means sendbuf == recvbuf")))
        st = count == 0 ? hc_coll_noop(req_p)
                        : hc_coll_post(HC_COLL_ALLREDUCE, sbuf, rbuf, count, bytes, dtype, op, 0,
                                       comm, req_p, NULL);
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_broadcast_impl(const char *fn, void *buf, size_t count, hcomm_dtype_t dtype,
                                        int root, hcomm_comm_t comm, hcomm_request_t *req_p, bool nb)
{
    int g = hc_api_enter(fn);
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    size_t bytes;
    hcomm_status_t st = hc_coll_check_common(fn, comm, dtype, false, 0, nb, req_p);
    if (!st && !(st = hc_coll_check_root(fn, comm, root)) &&
        !(st = hc_check_buf(fn, "buf", buf, count, dtype, 1, &bytes)))
        st = count == 0 ? hc_coll_noop(req_p)
                        : hc_coll_post(HC_COLL_BROADCAST, buf, buf, count, bytes, dtype, 0, root,
                                       comm, req_p, NULL);
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_reduce_impl(const char *fn, const void *sbuf, void *rbuf, size_t count,
                                     hcomm_dtype_t dtype, hcomm_op_t op, int root,
                                     hcomm_comm_t comm, hcomm_request_t *req_p, bool nb)
{
    int g = hc_api_enter(fn);
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    size_t bytes;
    hcomm_status_t st = hc_coll_check_common(fn, comm, dtype, true, op, nb, req_p);
    if (!st && !(st = hc_coll_check_root(fn, comm, root)) &&
        !(st = hc_check_buf(fn, "sendbuf", sbuf, count, dtype, 1, &bytes))) {
        bool at_root = comm->rank == root; /* recvbuf is ignored elsewhere */
        if (at_root && !(st = hc_check_buf(fn, "recvbuf", rbuf, count, dtype, 1, &bytes)))
            st = hc_check_overlap(fn, sbuf, bytes, rbuf, bytes, sbuf == rbuf,
                                  "in place on the root means sendbuf == recvbuf");
        if (!st)
            st = count == 0 ? hc_coll_noop(req_p)
                            : hc_coll_post(HC_COLL_REDUCE, sbuf, at_root ? rbuf : NULL, count,
                                           bytes, dtype, op, root, comm, req_p, NULL);
    }
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_allgather_impl(const char *fn, const void *sbuf, void *rbuf, size_t count,
                                        hcomm_dtype_t dtype, hcomm_comm_t comm,
                                        hcomm_request_t *req_p, bool nb)
{
    int g = hc_api_enter(fn);
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    size_t bytes, total;
    hcomm_status_t st = hc_coll_check_common(fn, comm, dtype, false, 0, nb, req_p);
    if (!st && !(st = hc_check_buf(fn, "sendbuf", sbuf, count, dtype, 1, &bytes)) &&
        !(st = hc_check_buf(fn, "recvbuf", rbuf, count, dtype, (size_t)comm->size, &total)) &&
        !(st = hc_check_overlap(
              fn, sbuf, bytes, rbuf, total,
              (uintptr_t)sbuf == (uintptr_t)rbuf + (size_t)comm->rank * bytes,
              "in place means sendbuf == recvbuf + rank * sendcount elements")))
        st = count == 0 ? hc_coll_noop(req_p)
                        : hc_coll_post(HC_COLL_ALLGATHER, sbuf, rbuf, count, bytes, dtype, 0, 0,
                                       comm, req_p, NULL);
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_reduce_scatter_impl(const char *fn, const void *sbuf, void *rbuf,
                                             size_t count, hcomm_dtype_t dtype, hcomm_op_t op,
                                             hcomm_comm_t comm, hcomm_request_t *req_p, bool nb)
{
    int g = hc_api_enter(fn);
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    size_t bytes, total;
    hcomm_status_t st = hc_coll_check_common(fn, comm, dtype, true, op, nb, req_p);
    if (!st &&
        !(st = hc_check_buf(fn, "sendbuf", sbuf, count, dtype, (size_t)comm->size, &total)) &&
        !(st = hc_check_buf(fn, "recvbuf", rbuf, count, dtype, 1, &bytes)) &&
        !(st = hc_check_overlap(
              fn, sbuf, total, rbuf, bytes,
              (uintptr_t)rbuf == (uintptr_t)sbuf + (size_t)comm->rank * bytes,
              "in place means recvbuf == sendbuf + rank * recvcount elements")))
        st = count == 0 ? hc_coll_noop(req_p)
                        : hc_coll_post(HC_COLL_REDUCE_SCATTER, sbuf, rbuf, count, bytes, dtype, op,
                                       0, comm, req_p, NULL);
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_alltoall_impl(const char *fn, const void *sbuf, void *rbuf, size_t count,
                                       hcomm_dtype_t dtype, hcomm_comm_t comm,
                                       hcomm_request_t *req_p, bool nb)
{
    int g = hc_api_enter(fn);
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    size_t bytes, total;
    hcomm_status_t st = hc_coll_check_common(fn, comm, dtype, false, 0, nb, req_p);
    if (!st &&
        !(st = hc_check_buf(fn, "sendbuf", sbuf, count, dtype, (size_t)comm->size, &total)) &&
        !(st = hc_check_buf(fn, "recvbuf", rbuf, count, dtype, (size_t)comm->size, &total)) &&
        !(st = hc_check_overlap(fn, sbuf, total, rbuf, total, sbuf == rbuf,
                                "in place means sendbuf == recvbuf"))) {
        hc_check_buf(fn, "sendbuf", sbuf, count, dtype, 1, &bytes);
        st = count == 0 ? hc_coll_noop(req_p)
                        : hc_coll_post(HC_COLL_ALLTOALL, sbuf, rbuf, count, bytes, dtype, 0, 0,
                                       comm, req_p, NULL);
    }
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_barrier_impl(const char *fn, hcomm_comm_t comm, hcomm_request_t *req_p,
                                      bool nb)
{
    int g = hc_api_enter(fn);
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_coll_check_common(fn, comm, HCOMM_UINT8, false, 0, nb, req_p);
    if (!st)
        st = hc_coll_post(HC_COLL_BARRIER, NULL, NULL, 0, 0, HCOMM_UINT8, 0, 0, comm, req_p,
                          NULL);
    hc_api_leave(g);
    return st;
}

/* ---- rooted and vector collectives ------------------------------------------------------- */

static hcomm_status_t hc_gather_args(const char *fn, bool scatter, const void *sbuf, void *rbuf,
                                     size_t count, hcomm_dtype_t dtype, int root,
                                     hcomm_comm_t comm, hcomm_request_t *req_p, bool nb)
{
    hcomm_status_t st = hc_coll_check_common(fn, comm, dtype, false, 0, nb, req_p);
    size_t bytes, total;
    if (st != HCOMM_OK || (st = hc_coll_check_root(fn, comm, root)))
        return st;
    bool at_root = comm->rank == root;
    /* gather: every rank's sendbuf, the root's recvbuf of size blocks;
     * scatter: the root's sendbuf of size blocks, every rank's recvbuf */
    if ((st = hc_check_buf(fn, scatter ? "recvbuf" : "sendbuf", scatter ? rbuf : sbuf, count,
                           dtype, 1, &bytes)))
        return st;
    if (at_root && (st = hc_check_buf(fn, scatter ? "sendbuf" : "recvbuf", scatter ? sbuf : rbuf,
                                      count, dtype, (size_t)comm->size, &total)))
        return st;
    if (at_root && !scatter &&
        (st = hc_check_overlap(fn, sbuf, bytes, rbuf, total,
                               (uintptr_t)sbuf == (uintptr_t)rbuf + (size_t)root * bytes,
                               "in place on the root means sendbuf == recvbuf + root * count "
                               "elements")))
        return st;
    if (at_root && scatter &&
        (st = hc_check_overlap(fn, sbuf, total, rbuf, bytes,
                               (uintptr_t)rbuf == (uintptr_t)sbuf + (size_t)root * bytes,
                               "in place on the root means recvbuf == sendbuf + root * count "
                               "elements")))
        return st;
    if (count == 0)
        return hc_coll_noop(req_p);
    return hc_coll_post(scatter ? HC_COLL_SCATTER : HC_COLL_GATHER, sbuf, rbuf, count, bytes,
                        dtype, 0, root, comm, req_p, NULL);
}

static hcomm_status_t hc_gather_impl(const char *fn, bool scatter, const void *sbuf, void *rbuf,
                                     size_t count, hcomm_dtype_t dtype, int root,
                                     hcomm_comm_t comm, hcomm_request_t *req_p, bool nb)
{
    int g = hc_api_enter(fn);
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    hcomm_status_t st =
        hc_gather_args(fn, scatter, sbuf, rbuf, count, dtype, root, comm, req_p, nb);
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_allgatherv_args(const char *fn, const void *sbuf, size_t sendcount,
                                         void *rbuf, const size_t *rcounts, const size_t *rdispls,
                                         hcomm_dtype_t dtype, hcomm_comm_t comm,
                                         hcomm_request_t *req_p, bool nb)
{
    hcomm_status_t st = hc_coll_check_common(fn, comm, dtype, false, 0, nb, req_p);
    size_t total, bytes;
    if (st != HCOMM_OK || (st = hc_check_counts(fn, "recvcounts", rcounts, comm, dtype, &total)) ||
        (st = hc_check_displs(fn, "displs", rdispls, rcounts, "recvbuf", rbuf, comm, dtype)))
        return st;
    if (sendcount != rcounts[comm->rank])
        return hc_error(HCOMM_ERR_INVALID, "%s: sendcount %zu differs from recvcounts[%d] = %zu",
                        fn, sendcount, comm->rank, rcounts[comm->rank]);
    if ((st = hc_check_buf(fn, "sendbuf", sbuf, sendcount, dtype, 1, &bytes)) ||
        (st = hc_check_buf(fn, "recvbuf", rbuf, total, dtype, 1, &bytes)) ||
        (st = hc_check_allgatherv_overlap(fn, sbuf, sendcount, rbuf, rcounts, rdispls, comm,
                                          dtype)))
        return st;
    if (total == 0)
        return hc_coll_noop(req_p);
    hc_coll_vec_t v = {NULL, NULL, rcounts, rdispls};
    return hc_coll_post(HC_COLL_ALLGATHERV, sbuf, rbuf, total, total * hc_dtype_size(dtype),
                        dtype, 0, 0, comm, req_p, &v);
}

static hcomm_status_t hc_allgatherv_impl(const char *fn, const void *sbuf, size_t sendcount,
                                         void *rbuf, const size_t *rcounts, const size_t *rdispls,
                                         hcomm_dtype_t dtype, hcomm_comm_t comm,
                                         hcomm_request_t *req_p, bool nb)
{
    int g = hc_api_enter(fn);
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    hcomm_status_t st =
        hc_allgatherv_args(fn, sbuf, sendcount, rbuf, rcounts, rdispls, dtype, comm, req_p, nb);
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_reduce_scatterv_args(const char *fn, const void *sbuf, void *rbuf,
                                              const size_t *rcounts, hcomm_dtype_t dtype,
                                              hcomm_op_t op, hcomm_comm_t comm,
                                              hcomm_request_t *req_p, bool nb)
{
    hcomm_status_t st = hc_coll_check_common(fn, comm, dtype, true, op, nb, req_p);
    size_t total, bytes, es = hc_dtype_size(dtype);
    if (st != HCOMM_OK || (st = hc_check_counts(fn, "recvcounts", rcounts, comm, dtype, &total)))
        return st;
    if ((st = hc_check_buf(fn, "sendbuf", sbuf, total, dtype, 1, &bytes)) ||
        (st = hc_check_buf(fn, "recvbuf", rbuf, rcounts[comm->rank], dtype, 1, &bytes)))
        return st;
    size_t mine = 0; /* elements before this rank's block */
    for (int r = 0; r < comm->rank; r++)
        mine += rcounts[r];
    if ((st = hc_check_overlap(fn, sbuf, total * es, rbuf, bytes,
                               (uintptr_t)rbuf == (uintptr_t)sbuf + mine * es,
                               "in place means recvbuf == sendbuf + recvcounts[0] + ... + "
                               "recvcounts[rank - 1] elements")))
        return st;
    if (total == 0)
        return hc_coll_noop(req_p);
    /* the blocks lie in rank order in sendbuf: their offsets */
    size_t *off = malloc(sizeof(size_t) * (size_t)comm->size);
    if (!off)
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    size_t acc = 0;
    for (int r = 0; r < comm->size; r++) {
        off[r] = acc;
        acc += rcounts[r];
    }
    hc_coll_vec_t v = {NULL, off, rcounts, NULL};
    st = hc_coll_post(HC_COLL_REDUCE_SCATTERV, sbuf, rbuf, total, total * es, dtype, op, 0, comm,
                      req_p, &v);
    free(off);
    return st;
}

static hcomm_status_t hc_reduce_scatterv_impl(const char *fn, const void *sbuf, void *rbuf,
                                              const size_t *rcounts, hcomm_dtype_t dtype,
                                              hcomm_op_t op, hcomm_comm_t comm,
                                              hcomm_request_t *req_p, bool nb)
{
    int g = hc_api_enter(fn);
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    hcomm_status_t st =
        hc_reduce_scatterv_args(fn, sbuf, rbuf, rcounts, dtype, op, comm, req_p, nb);
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_alltoallv_args(const char *fn, const void *sbuf, const size_t *scounts,
                                        const size_t *sdispls, void *rbuf, const size_t *rcounts,
                                        const size_t *rdispls, hcomm_dtype_t dtype,
                                        hcomm_comm_t comm, hcomm_request_t *req_p, bool nb)
{
    hcomm_status_t st = hc_coll_check_common(fn, comm, dtype, false, 0, nb, req_p);
    size_t stotal, rtotal, bytes;
    if (st != HCOMM_OK || (st = hc_check_counts(fn, "sendcounts", scounts, comm, dtype, &stotal)) ||
        (st = hc_check_displs(fn, "sdispls", sdispls, scounts, "sendbuf", sbuf, comm, dtype)) ||
        (st = hc_check_counts(fn, "recvcounts", rcounts, comm, dtype, &rtotal)) ||
        (st = hc_check_displs(fn, "rdispls", rdispls, rcounts, "recvbuf", rbuf, comm, dtype)))
        return st;
    if ((st = hc_check_buf(fn, "sendbuf", sbuf, stotal, dtype, 1, &bytes)) ||
        (st = hc_check_buf(fn, "recvbuf", rbuf, rtotal, dtype, 1, &bytes)))
        return st;
    if (sbuf && sbuf == rbuf)
        return hc_error(HCOMM_ERR_INVALID, "%s: sendbuf == recvbuf: alltoallv is not done in "
                                           "place (use separate buffers)", fn);
    if (scounts[comm->rank] != rcounts[comm->rank])
        return hc_error(HCOMM_ERR_INVALID, "%s: sendcounts[%d] = %zu but recvcounts[%d] = %zu "
                                           "(the block this rank sends itself)", fn, comm->rank,
                        scounts[comm->rank], comm->rank, rcounts[comm->rank]);
    if ((st = hc_check_alltoallv_overlap(fn, sbuf, scounts, sdispls, rbuf, rcounts, rdispls, comm,
                                         dtype)))
        return st;
    /* Every rank posts its messages, whatever the counts (zero: a zero-byte
     * message), so even a rank with nothing to send or receive takes part:
     * the signature's count is 0 (ranks' totals differ by design). */
    hc_coll_vec_t v = {scounts, sdispls, rcounts, rdispls};
    return hc_coll_post(HC_COLL_ALLTOALLV, sbuf, rbuf, 0, stotal * hc_dtype_size(dtype), dtype,
                        0, 0, comm, req_p, &v);
}

static hcomm_status_t hc_alltoallv_impl(const char *fn, const void *sbuf, const size_t *scounts,
                                        const size_t *sdispls, void *rbuf, const size_t *rcounts,
                                        const size_t *rdispls, hcomm_dtype_t dtype,
                                        hcomm_comm_t comm, hcomm_request_t *req_p, bool nb)
{
    int g = hc_api_enter(fn);
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_alltoallv_args(fn, sbuf, scounts, sdispls, rbuf, rcounts, rdispls,
                                          dtype, comm, req_p, nb);
    hc_api_leave(g);
    return st;
}

HC_EXPORT hcomm_status_t hcomm_gather(const void *sendbuf, void *recvbuf, size_t count,
                                      hcomm_dtype_t dtype, int root, hcomm_comm_t comm)
{
    return hc_gather_impl("hcomm_gather", false, sendbuf, recvbuf, count, dtype, root, comm, NULL,
                          false);
}
HC_EXPORT hcomm_status_t hcomm_igather(const void *sendbuf, void *recvbuf, size_t count,
                                       hcomm_dtype_t dtype, int root, hcomm_comm_t comm,
                                       hcomm_request_t *req_p)
{
    return hc_gather_impl("hcomm_igather", false, sendbuf, recvbuf, count, dtype, root, comm,
                          req_p, true);
}
HC_EXPORT hcomm_status_t hcomm_scatter(const void *sendbuf, void *recvbuf, size_t count,
                                       hcomm_dtype_t dtype, int root, hcomm_comm_t comm)
{
    return hc_gather_impl("hcomm_scatter", true, sendbuf, recvbuf, count, dtype, root, comm, NULL,
                          false);
}
HC_EXPORT hcomm_status_t hcomm_iscatter(const void *sendbuf, void *recvbuf, size_t count,
                                        hcomm_dtype_t dtype, int root, hcomm_comm_t comm,
                                        hcomm_request_t *req_p)
{
    return hc_gather_impl("hcomm_iscatter", true, sendbuf, recvbuf, count, dtype, root, comm,
                          req_p, true);
}
HC_EXPORT hcomm_status_t hcomm_allgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                          const size_t *recvcounts, const size_t *displs,
                                          hcomm_dtype_t dtype, hcomm_comm_t comm)
{
    return hc_allgatherv_impl("hcomm_allgatherv", sendbuf, sendcount, recvbuf, recvcounts, displs,
                              dtype, comm, NULL, false);
}
HC_EXPORT hcomm_status_t hcomm_iallgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                           const size_t *recvcounts, const size_t *displs,
                                           hcomm_dtype_t dtype, hcomm_comm_t comm,
                                           hcomm_request_t *req_p)
{
    return hc_allgatherv_impl("hcomm_iallgatherv", sendbuf, sendcount, recvbuf, recvcounts,
                              displs, dtype, comm, req_p, true);
}
HC_EXPORT hcomm_status_t hcomm_reduce_scatterv(const void *sendbuf, void *recvbuf,
                                               const size_t *recvcounts, hcomm_dtype_t dtype,
                                               hcomm_op_t op, hcomm_comm_t comm)
{
    return hc_reduce_scatterv_impl("hcomm_reduce_scatterv", sendbuf, recvbuf, recvcounts, dtype,
                                   op, comm, NULL, false);
}
HC_EXPORT hcomm_status_t hcomm_ireduce_scatterv(const void *sendbuf, void *recvbuf,
                                                const size_t *recvcounts, hcomm_dtype_t dtype,
                                                hcomm_op_t op, hcomm_comm_t comm,
                                                hcomm_request_t *req_p)
{
    return hc_reduce_scatterv_impl("hcomm_ireduce_scatterv", sendbuf, recvbuf, recvcounts, dtype,
                                   op, comm, req_p, true);
}
HC_EXPORT hcomm_status_t hcomm_alltoallv(const void *sendbuf, const size_t *sendcounts,
                                         const size_t *sdispls, void *recvbuf,
                                         const size_t *recvcounts, const size_t *rdispls,
                                         hcomm_dtype_t dtype, hcomm_comm_t comm)
{
    return hc_alltoallv_impl("hcomm_alltoallv", sendbuf, sendcounts, sdispls, recvbuf, recvcounts,
                             rdispls, dtype, comm, NULL, false);
}
HC_EXPORT hcomm_status_t hcomm_ialltoallv(const void *sendbuf, const size_t *sendcounts,
                                          const size_t *sdispls, void *recvbuf,
                                          const size_t *recvcounts, const size_t *rdispls,
                                          hcomm_dtype_t dtype, hcomm_comm_t comm,
                                          hcomm_request_t *req_p)
{
    return hc_alltoallv_impl("hcomm_ialltoallv", sendbuf, sendcounts, sdispls, recvbuf,
                             recvcounts, rdispls, dtype, comm, req_p, true);
}

HC_EXPORT hcomm_status_t hcomm_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                         hcomm_dtype_t dtype, hcomm_op_t op, hcomm_comm_t comm)
{
    return hc_allreduce_impl("hcomm_allreduce", sendbuf, recvbuf, count, dtype, op, comm, NULL,
                             false);
}
HC_EXPORT hcomm_status_t hcomm_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                          hcomm_dtype_t dtype, hcomm_op_t op, hcomm_comm_t comm,
                                          hcomm_request_t *req_p)
{
    return hc_allreduce_impl("hcomm_iallreduce", sendbuf, recvbuf, count, dtype, op, comm, req_p,
                             true);
}
HC_EXPORT hcomm_status_t hcomm_broadcast(void *buf, size_t count, hcomm_dtype_t dtype, int root,
                                         hcomm_comm_t comm)
{
    return hc_broadcast_impl("hcomm_broadcast", buf, count, dtype, root, comm, NULL, false);
}
HC_EXPORT hcomm_status_t hcomm_ibroadcast(void *buf, size_t count, hcomm_dtype_t dtype, int root,
                                          hcomm_comm_t comm, hcomm_request_t *req_p)
{
    return hc_broadcast_impl("hcomm_ibroadcast", buf, count, dtype, root, comm, req_p, true);
}
HC_EXPORT hcomm_status_t hcomm_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                      hcomm_dtype_t dtype, hcomm_op_t op, int root,
                                      hcomm_comm_t comm)
{
    return hc_reduce_impl("hcomm_reduce", sendbuf, recvbuf, count, dtype, op, root, comm, NULL,
                          false);
}
HC_EXPORT hcomm_status_t hcomm_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                                       hcomm_dtype_t dtype, hcomm_op_t op, int root,
                                       hcomm_comm_t comm, hcomm_request_t *req_p)
{
    return hc_reduce_impl("hcomm_ireduce", sendbuf, recvbuf, count, dtype, op, root, comm, req_p,
                          true);
}
HC_EXPORT hcomm_status_t hcomm_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                         hcomm_dtype_t dtype, hcomm_comm_t comm)
{
    return hc_allgather_impl("hcomm_allgather", sendbuf, recvbuf, sendcount, dtype, comm, NULL,
                             false);
}
HC_EXPORT hcomm_status_t hcomm_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                          hcomm_dtype_t dtype, hcomm_comm_t comm,
                                          hcomm_request_t *req_p)
{
    return hc_allgather_impl("hcomm_iallgather", sendbuf, recvbuf, sendcount, dtype, comm, req_p,
                             true);
}
HC_EXPORT hcomm_status_t hcomm_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                              hcomm_dtype_t dtype, hcomm_op_t op,
                                              hcomm_comm_t comm)
{
    return hc_reduce_scatter_impl("hcomm_reduce_scatter", sendbuf, recvbuf, recvcount, dtype, op,
                                  comm, NULL, false);
}
HC_EXPORT hcomm_status_t hcomm_ireduce_scatter(const void *sendbuf, void *recvbuf,
                                               size_t recvcount, hcomm_dtype_t dtype,
                                               hcomm_op_t op, hcomm_comm_t comm,
                                               hcomm_request_t *req_p)
{
    return hc_reduce_scatter_impl("hcomm_ireduce_scatter", sendbuf, recvbuf, recvcount, dtype, op,
                                  comm, req_p, true);
}
HC_EXPORT hcomm_status_t hcomm_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                        hcomm_dtype_t dtype, hcomm_comm_t comm)
{
    return hc_alltoall_impl("hcomm_alltoall", sendbuf, recvbuf, count, dtype, comm, NULL, false);
}
HC_EXPORT hcomm_status_t hcomm_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                                         hcomm_dtype_t dtype, hcomm_comm_t comm,
                                         hcomm_request_t *req_p)
{
    return hc_alltoall_impl("hcomm_ialltoall", sendbuf, recvbuf, count, dtype, comm, req_p, true);
}
HC_EXPORT hcomm_status_t hcomm_barrier(hcomm_comm_t comm)
{
    return hc_barrier_impl("hcomm_barrier", comm, NULL, false);
}
HC_EXPORT hcomm_status_t hcomm_ibarrier(hcomm_comm_t comm, hcomm_request_t *req_p)
{
    return hc_barrier_impl("hcomm_ibarrier", comm, req_p, true);
}

/* ---- groups ------------------------------------------------------------------------ */

static hcomm_status_t hc_group_launch(hc_coll_op_t *op)
{
    struct hcomm_request *req = op->req;
    req->deferred = false;
    hcomm_status_t st = hc_coll_select(op);
    if (st == HCOMM_OK)
        st = hc_coll_start(op);
    if (st != HCOMM_OK) {
        req->coll = NULL;
        if (op->on_done)
            op->on_done(op, st);
        hc_coll_op_release(op);
        hc_request_complete(req, st);
    }
    return st;
}

/* A fused allreduce. The members' inputs are packed into buf, the fused
 * collective reduces buf into buf + total, and its end unpacks the result
 * into each member's output and completes each member's request. The
 * members' own ops are released when they are fused: from then on their
 * requests point at the fused op, so a wait on any of them that runs out
 * of time ends the fused op with every member (hc_coll_cancel). The fused
 * op's own request is its first member's: nothing else needs waiting or
 * freeing. The buffer belongs to the fusion, not to the op: the algorithm
 * may use op->tmp. */
typedef struct {
    int n;
    uint8_t *buf; /* 2 * total bytes: inputs, then the result */
    struct {
        struct hcomm_request *req;
        void *rbuf;
        size_t bytes;
    } m[];
} hc_fusion_t;

static void hc_fusion_done(hc_coll_op_t *op, hcomm_status_t status)
{
    hc_fusion_t *f = op->done_arg;
    const uint8_t *res = op->rbuf;
    size_t off = 0;
    for (int i = 0; i < f->n; i++) {
        if (status == HCOMM_OK)
            memcpy(f->m[i].rbuf, res + off, f->m[i].bytes);
        off += f->m[i].bytes;
        f->m[i].req->coll = NULL;
        hc_request_complete(f->m[i].req, status);
    }
    free(f->buf);
    free(f);
    op->done_arg = NULL;
}

static bool hc_group_fusable(const hc_coll_op_t *m, const hc_coll_op_t *lead)
{
    return m && m->kind == HC_COLL_ALLREDUCE && m->comm == lead->comm &&
           m->dtype == lead->dtype && m->op == lead->op;
}

/* Fuses small allreduces of the group that share comm, dtype and op with
 * group op i into one, when their total fits HCOMM_GROUP_FUSE. */
static hcomm_status_t hc_group_fuse(int i)
{
    hc_coll_op_t *lead = hc_group.ops[i];
    if (lead->kind != HC_COLL_ALLREDUCE || lead->bytes > hc_cfg.group_fuse)
        return HCOMM_OK;
    int n = 0;
    size_t total = 0;
    for (int k = i; k < hc_group.nops; k++) {
        hc_coll_op_t *m = hc_group.ops[k];
        if (hc_group_fusable(m, lead) && total + m->bytes <= hc_cfg.group_fuse) {
            n++;
            total += m->bytes;
        } else if (m && m->comm == lead->comm) {
            break; /* keep issue order on this communicator */
        }
    }
    if (n < 2)
        return HCOMM_OK;
    hc_fusion_t *f = malloc(sizeof(*f) + sizeof(f->m[0]) * (size_t)n);
    hc_coll_op_t *op = hc_coll_op_alloc();
    uint8_t *buf = malloc(2 * total);
    if (!f || !op || !buf) {
        free(f);
        free(buf);
        if (op)
            hc_coll_op_release(op);
        return HCOMM_OK; /* no memory to fuse: launch them one by one */
    }
    struct hcomm_request *req = lead->req;
    f->n = 0;
    f->buf = buf;
    size_t off = 0;
    for (int k = i; f->n < n; k++) {
        hc_coll_op_t *m = hc_group.ops[k];
        if (!hc_group_fusable(m, lead))
            continue;
        memcpy(buf + off, m->sbuf, m->bytes);
        off += m->bytes;
        f->m[f->n].req = m->req;
        f->m[f->n].rbuf = m->rbuf;
        f->m[f->n].bytes = m->bytes;
        f->n++;
        m->req->coll = op;
        m->req->deferred = false;
        hc_group.ops[k] = NULL;
        if (m != lead)
            hc_coll_op_release(m);
    }
    op->req = req;
    op->comm = lead->comm;
    op->kind = HC_COLL_ALLREDUCE;
    op->sbuf = buf;
    op->rbuf = buf + total;
    op->dtype = lead->dtype;
    op->op = lead->op;
    op->root = 0;
    op->esize = lead->esize;
    op->count = total / lead->esize;
    op->bytes = total;
    op->on_done = hc_fusion_done;
    op->done_arg = f;
    hc_coll_op_release(lead);
    return hc_group_launch(op);
}

HC_EXPORT hcomm_status_t hcomm_group_start(void)
{
    int g = hc_api_enter("hcomm_group_start");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_check_init("hcomm_group_start");
    if (st == HCOMM_OK)
        hc_ctx.group_depth++;
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_group_end(void)
{
    hcomm_status_t st = hc_check_init("hcomm_group_end");
    if (st != HCOMM_OK)
        return st;
    if (hc_ctx.group_depth == 0)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_group_end: no matching hcomm_group_start");
    if (--hc_ctx.group_depth > 0)
        return HCOMM_OK;
    hcomm_status_t first = HCOMM_OK;
    for (int i = 0; i < hc_group.nops; i++) {
        hc_coll_op_t *op = hc_group.ops[i];
        if (!op)
            continue; /* fused into an earlier one */
        st = hc_group_fuse(i);
        if (st == HCOMM_OK && hc_group.ops[i])
            st = hc_group_launch(op);
        if (st != HCOMM_OK && first == HCOMM_OK)
            first = st;
    }
    hc_group.nops = 0;
    /* One deadline for the whole group, not one per member. */
    uint64_t deadline = 0;
    for (int i = 0; i < hc_group.nblocking; i++) {
        st = hc_request_wait_until(hc_group.blocking[i], "hcomm_group_end", &deadline);
        if (st != HCOMM_OK && first == HCOMM_OK)
            first = st;
        hc_request_stat_end(hc_group.blocking[i]);
        hc_request_free(hc_group.blocking[i]);
    }
    hc_group.nblocking = 0;
    return first;
}

HC_EXPORT hcomm_status_t hcomm_group_end(void)
{
    int g = hc_api_enter("hcomm_group_end");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_group_end();
    hc_api_leave(g);
    return st;
}

void hc_coll_group_fini(void)
{
    free(hc_group.ops);
    free(hc_group.blocking);
    memset(&hc_group, 0, sizeof(hc_group));
}

/* ---- comm split ------------------------------------------------------------------------- */

typedef struct {
    int32_t color, key;
    uint32_t next_ctx;
} hc_split_info_t;

static hcomm_status_t hc_comm_split(hcomm_comm_t comm, int color, int key,
                                    hcomm_comm_t *newcomm_p);

HC_EXPORT hcomm_status_t hcomm_comm_split(hcomm_comm_t comm, int color, int key,
                                          hcomm_comm_t *newcomm_p)
{
    int g = hc_api_enter("hcomm_comm_split");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_comm_split(comm, color, key, newcomm_p);
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_comm_split(hcomm_comm_t comm, int color, int key, hcomm_comm_t *newcomm_p)
{
    hcomm_status_t st = hc_check_comm("hcomm_comm_split", comm);
    if (st != HCOMM_OK)
        return st;
    if (!newcomm_p)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_comm_split: newcomm_p is NULL");
    if (hc_ctx.group_depth)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_comm_split: not allowed inside a group");
    int n = comm->size;
    hc_split_info_t mine = {.color = color < 0 ? -1 : color, .key = key,
                            .next_ctx = hc_ctx.next_ctx_id};
    hc_split_info_t *all = malloc(sizeof(*all) * (size_t)n);
    int *members = malloc(sizeof(int) * (size_t)n);
    if (!all || !members) {
        free(all);
        free(members);
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_comm_split: no memory");
    }
    /* The split's own allgather: not the user's collective (not counted,
     * not fingerprinted). */
    hc_coll_checking = true;
    st = hc_coll_post(HC_COLL_ALLGATHER, &mine, all, sizeof(mine), sizeof(mine), HCOMM_UINT8, 0, 0,
                      comm, NULL, NULL);
    hc_coll_checking = false;
    if (st != HCOMM_OK)
        goto out;
    /* Context id: above every id any member has used; colors in ascending
     * order take consecutive ids. */
    uint32_t base = 0;
    for (int r = 0; r < n; r++)
        base = HC_MAX(base, all[r].next_ctx);
    int ncolors = 0, my_index = 0;
    for (int r = 0; r < n; r++) {
        if (all[r].color < 0)
            continue;
        bool first = true; /* is r the first rank of its color? */
        for (int q = 0; q < r; q++)
            if (all[q].color == all[r].color)
                first = false;
        if (!first)
            continue;
        if (all[r].color < mine.color)
            my_index++;
        ncolors++;
    }
    hc_ctx.next_ctx_id = base + (uint32_t)ncolors;
    if (mine.color < 0) {
        *newcomm_p = NULL;
        goto out;
    }
    int m = 0;
    for (int r = 0; r < n; r++)
        if (all[r].color == mine.color)
            members[m++] = r;
    /* Order by (key, rank in comm): insertion sort, stable. */
    for (int i = 1; i < m; i++) {
        int v = members[i], j = i - 1;
        while (j >= 0 && all[members[j]].key > all[v].key) {
            members[j + 1] = members[j];
            j--;
        }
        members[j + 1] = v;
    }
    for (int i = 0; i < m; i++)
        members[i] = comm->world_ranks[members[i]];
    struct hcomm_comm *nc;
    st = hc_comm_create(base + (uint32_t)my_index, m, members, &nc);
    if (st == HCOMM_OK)
        *newcomm_p = nc;
out:
    free(all);
    free(members);
    return st;
}

/* hcomm_comm_create_group: a communicator of some of comm's ranks, made by
 * those ranks alone. The context id comes as split's does (above every id a
 * member has used): the members send theirs to the first member, which
 * answers with the largest, on comm's point-to-point context with a
 * negative tag (never a user's: the API refuses negative tags). */
static hcomm_status_t hc_group_xchg(hcomm_comm_t comm, int peer, bool send, uint32_t *v,
                                    int32_t itag, const char *fn)
{
    struct hcomm_request *req;
    hcomm_status_t st = send ? hc_p2p_isend(comm, comm->ctx_id, v, sizeof(*v), peer, itag, &req)
                             : hc_p2p_irecv(comm, comm->ctx_id, v, sizeof(*v), peer, itag, &req);
    if (st != HCOMM_OK)
        return st;
    st = hc_request_wait(req, fn);
    hc_request_free(req);
    return st;
}

static hcomm_status_t hc_comm_create_group(hcomm_comm_t comm, const int *ranks, int n, int tag,
                                           hcomm_comm_t *newcomm_p);

HC_EXPORT hcomm_status_t hcomm_comm_create_group(hcomm_comm_t comm, const int *ranks, int n,
                                                 int tag, hcomm_comm_t *newcomm_p)
{
    int g = hc_api_enter("hcomm_comm_create_group");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_comm_create_group(comm, ranks, n, tag, newcomm_p);
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_comm_create_group(hcomm_comm_t comm, const int *ranks, int n, int tag,
                                           hcomm_comm_t *newcomm_p)
{
    const char *fn = "hcomm_comm_create_group";
    hcomm_status_t st = hc_check_comm(fn, comm);
    if (st != HCOMM_OK)
        return st;
    if (!newcomm_p)
        return hc_error(HCOMM_ERR_INVALID, "%s: newcomm_p is NULL", fn);
    if (hc_ctx.group_depth)
        return hc_error(HCOMM_ERR_INVALID, "%s: not allowed inside a group", fn);
    if (!ranks || n < 1 || n > comm->size)
        return hc_error(HCOMM_ERR_INVALID, "%s: ranks is NULL or n = %d is not in [1, %d]", fn, n,
                        comm->size);
    if (tag < 0)
        return hc_error(HCOMM_ERR_INVALID, "%s: tag %d is negative", fn, tag);
    uint8_t *seen = calloc((size_t)comm->size, 1);
    int *members = malloc(sizeof(int) * (size_t)n);
    if (!seen || !members) {
        free(seen);
        free(members);
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    }
    int me = -1;
    for (int i = 0; i < n && st == HCOMM_OK; i++) {
        if (ranks[i] < 0 || ranks[i] >= comm->size)
            st = hc_error(HCOMM_ERR_INVALID, "%s: ranks[%d] = %d is out of range for a "
                                             "communicator of %d ranks", fn, i, ranks[i],
                          comm->size);
        else if (seen[ranks[i]]++)
            st = hc_error(HCOMM_ERR_INVALID, "%s: rank %d is listed twice (ranks[%d])", fn,
                          ranks[i], i);
        else {
            members[i] = comm->world_ranks[ranks[i]];
            if (ranks[i] == comm->rank)
                me = i;
        }
    }
    if (st == HCOMM_OK && me < 0)
        st = hc_error(HCOMM_ERR_INVALID, "%s: this rank (%d) is not in ranks: only the members "
                                         "call it", fn, comm->rank);
    int32_t itag = -1 - (int32_t)(tag & 0x3fffffff);
    uint32_t base = hc_ctx.next_ctx_id;
    if (st == HCOMM_OK && me == 0) {
        for (int i = 1; i < n && st == HCOMM_OK; i++) {
            uint32_t v;
            st = hc_group_xchg(comm, ranks[i], false, &v, itag, fn);
            base = HC_MAX(base, v);
        }
        for (int i = 1; i < n && st == HCOMM_OK; i++)
            st = hc_group_xchg(comm, ranks[i], true, &base, itag, fn);
    } else if (st == HCOMM_OK) {
        uint32_t v = base;
        st = hc_group_xchg(comm, ranks[0], true, &v, itag, fn);
        if (st == HCOMM_OK)
            st = hc_group_xchg(comm, ranks[0], false, &base, itag, fn);
    }
    if (st == HCOMM_OK) {
        hc_ctx.next_ctx_id = HC_MAX(hc_ctx.next_ctx_id, base + 1);
        struct hcomm_comm *nc;
        st = hc_comm_create(base, n, members, &nc);
        if (st == HCOMM_OK)
            *newcomm_p = nc;
    }
    free(seen);
    free(members);
    return st;
}
