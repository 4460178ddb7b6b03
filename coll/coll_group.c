/*
 * Groups (hcomm_group_start/end): the collectives posted inside a group are
 * deferred (hc_coll_post -> hc_coll_group_defer) and launched at the end,
 * in posting order, through hc_coll_launch. Small allreduces of one
 * communicator, dtype and op are fused into one: the fusion packs the
 * members' inputs, the fused op reduces them at once, and its end unpacks
 * the result into each member's output and completes each member's
 * request. hcomm_group_end waits for the group's blocking members against
 * one deadline.
 */
#include "coll/coll.h"

#include <stdlib.h>
#include <string.h>

/* Collectives created inside hcomm_group_start/end, launched at the end. */
static struct {
    hc_coll_op_t **ops;
    struct hcomm_request **blocking; /* requests of blocking calls, waited at end */
    int nops, nblocking, cap;
} hc_group;

static bool hc_group_grow(void)
{
    if (hc_group.nops < hc_group.cap)
        return true;
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
    return true;
}

hcomm_status_t hc_coll_group_defer(hc_coll_op_t *op, hcomm_request_t *req_p)
{
    struct hcomm_request *req = op->req;
    if (!hc_group_grow()) {
        req->coll = NULL;
        hc_coll_op_release(op);
        hc_request_free(req);
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: group too large", hc_coll_name(op->kind));
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

/* Launches a deferred op; a failure completes its request with the status
 * (the caller holds it, or hcomm_group_end waits for it). */
static hcomm_status_t hc_group_launch(hc_coll_op_t *op)
{
    struct hcomm_request *req = op->req;
    hcomm_status_t st = hc_coll_launch(op);
    if (st != HCOMM_OK)
        hc_request_complete(req, st);
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

/* How many of the group's ops from i on fuse with op i, and their bytes. */
static int hc_group_fuse_count(int i, size_t *total_p)
{
    hc_coll_op_t *lead = hc_group.ops[i];
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
    *total_p = total;
    return n;
}

/* Fuses small allreduces of the group that share comm, dtype and op with
 * group op i into one, when their total fits HCOMM_GROUP_FUSE. */
static hcomm_status_t hc_group_fuse(int i)
{
    hc_coll_op_t *lead = hc_group.ops[i];
    if (lead->kind != HC_COLL_ALLREDUCE || lead->bytes > hc_cfg.group_fuse)
        return HCOMM_OK;
    size_t total;
    int n = hc_group_fuse_count(i, &total);
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
    hc_coll_args_t a = {.kind = HC_COLL_ALLREDUCE, .sbuf = buf, .rbuf = buf + total,
                        .count = total / lead->esize, .bytes = total, .dtype = lead->dtype,
                        .op = lead->op};
    hc_coll_op_set(op, &a, lead->comm);
    op->req = req;
    op->on_done = hc_fusion_done;
    op->done_arg = f;
    hc_coll_op_release(lead);
    return hc_group_launch(op);
}

void hc_coll_group_start(void)
{
    hc_ctx.group_depth++;
}

hcomm_status_t hc_coll_group_end(void)
{
    if (hc_ctx.group_depth == 0)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_group_end: no matching hcomm_group_start");
    if (--hc_ctx.group_depth > 0)
        return HCOMM_OK;
    hcomm_status_t st, first = HCOMM_OK;
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

void hc_coll_group_fini(void)
{
    free(hc_group.ops);
    free(hc_group.blocking);
    memset(&hc_group, 0, sizeof(hc_group));
}
