/*
 * Stream-ordered calls (include/hcomm.h, docs/gpu.md "Stream-ordered
 * calls"): hcomm_<collective>_stream, hcomm_send_stream, hcomm_recv_stream,
 * hcomm_comm_get_async_error.
 *
 * A call checks what it can at once (the library, the communicator, the
 * stream, the backend, the dtype, an earlier asynchronous failure), copies
 * its arguments into an item and queues it on the stream through the
 * progress thread (core/progress_thread.c); inside a group the items are
 * held and queued as one at the outermost hcomm_group_end. The thread later
 * posts the item with the ordinary non-blocking call (hcomm_iallreduce...,
 * whose entry points stage device buffers: api_stage.c) and tests it with
 * hcomm_test, which copies the results back before it says done; the
 * post's full argument checks then fail the item asynchronously.
 *
 * The thread claims the entry lock (api.h) with a try: busy, the item waits
 * for the next pass. It never posts while a group is open (hc_ctx's group
 * belongs to the process: its posts would join the user's group).
 */
#include "api/api.h"
#include "core/progress_thread.h"
#include "gpu/gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    HC_S_ALLREDUCE,
    HC_S_BROADCAST,
    HC_S_REDUCE,
    HC_S_ALLGATHER,
    HC_S_REDUCE_SCATTER,
    HC_S_ALLTOALL,
    HC_S_BARRIER,
    HC_S_GATHER,
    HC_S_SCATTER,
    HC_S_ALLGATHERV,
    HC_S_REDUCE_SCATTERV,
    HC_S_ALLTOALLV,
    HC_S_SEND,
    HC_S_RECV,
} hc_s_kind_t;

/* One operation's arguments. v[]: the vector collectives' arrays (the
 * caller's while the call runs, then the item's copies). */
typedef struct {
    hc_s_kind_t kind;
    const void *sbuf;
    void *rbuf;
    size_t count;
    hcomm_dtype_t dtype;
    hcomm_op_t op;
    int root; /* the root; p2p: the peer */
    int tag;
    const size_t *v[4];
    hcomm_request_t req;
    bool posted;
} hc_s_op_t;

typedef struct {
    hc_pt_item_t it;
    hcomm_comm_t comm;
    int nops;
    hcomm_status_t err; /* the first member's failure */
    char msg[512];
    hc_s_op_t ops[];
} hc_s_item_t;

/* The open group's stream-ordered operations (queued at its end). */
static struct {
    hc_s_item_t *item;
    int cap;
} hc_s_group;

/* ---- the progress thread's callbacks ----------------------------------------------------- */

static int hc_s_try_enter(void)
{
    uintptr_t cur = 0;
    if (!__atomic_compare_exchange_n(&hc_api_owner, &cur, hc_api_self(), false, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED))
        return -1;
    __atomic_store_n(&hc_api_owner_fn, "the progress thread", __ATOMIC_RELAXED);
    return 1;
}

static hcomm_status_t hc_s_post_one(hc_s_op_t *o, hcomm_comm_t c)
{
    hcomm_request_t *r = &o->req;
    switch (o->kind) {
    case HC_S_ALLREDUCE:
        return hcomm_iallreduce(o->sbuf, o->rbuf, o->count, o->dtype, o->op, c, r);
    case HC_S_BROADCAST:
        return hcomm_ibroadcast(o->rbuf, o->count, o->dtype, o->root, c, r);
    case HC_S_REDUCE:
        return hcomm_ireduce(o->sbuf, o->rbuf, o->count, o->dtype, o->op, o->root, c, r);
    case HC_S_ALLGATHER:
        return hcomm_iallgather(o->sbuf, o->rbuf, o->count, o->dtype, c, r);
    case HC_S_REDUCE_SCATTER:
        return hcomm_ireduce_scatter(o->sbuf, o->rbuf, o->count, o->dtype, o->op, c, r);
    case HC_S_ALLTOALL:
        return hcomm_ialltoall(o->sbuf, o->rbuf, o->count, o->dtype, c, r);
    case HC_S_BARRIER:
        return hcomm_ibarrier(c, r);
    case HC_S_GATHER:
        return hcomm_igather(o->sbuf, o->rbuf, o->count, o->dtype, o->root, c, r);
    case HC_S_SCATTER:
        return hcomm_iscatter(o->sbuf, o->rbuf, o->count, o->dtype, o->root, c, r);
    case HC_S_ALLGATHERV:
        return hcomm_iallgatherv(o->sbuf, o->count, o->rbuf, o->v[0], o->v[1], o->dtype, c, r);
    case HC_S_REDUCE_SCATTERV:
        return hcomm_ireduce_scatterv(o->sbuf, o->rbuf, o->v[0], o->dtype, o->op, c, r);
    case HC_S_ALLTOALLV:
        return hcomm_ialltoallv(o->sbuf, o->v[0], o->v[1], o->rbuf, o->v[2], o->v[3], o->dtype, c,
                                r);
    case HC_S_SEND:
        return hcomm_isend(o->sbuf, o->count, o->dtype, o->root, o->tag, c, r);
    case HC_S_RECV:
        return hcomm_irecv(o->rbuf, o->count, o->dtype, o->root, o->tag, c, r);
    }
    return hc_error(HCOMM_ERR_INTERNAL, "stream operation of unknown kind %d", (int)o->kind);
}

static void hc_s_keep_error(hc_s_item_t *s, hcomm_status_t st)
{
    if (s->err != HCOMM_OK) return;
    s->err = st;
    snprintf(s->msg, sizeof(s->msg), "%s", hc_error_last());
}

static hcomm_status_t hc_s_post(hc_pt_item_t *it)
{
    hc_s_item_t *s = (hc_s_item_t *)it;
    int g = hc_s_try_enter();
    if (g < 0) return HCOMM_ERR_AGAIN;
    if (hc_ctx.group_depth > 0) { /* the user's group is open: not into it */
        hc_api_leave(g);
        return HCOMM_ERR_AGAIN;
    }
    int posted = 0;
    if (s->nops > 1) (void)hcomm_group_start();
    for (int i = 0; i < s->nops; i++) {
        hcomm_status_t st = hc_s_post_one(&s->ops[i], s->comm);
        if (st == HCOMM_OK)
            s->ops[i].posted = true, posted++;
        else
            hc_s_keep_error(s, st);
    }
    if (s->nops > 1) {
        hcomm_status_t st = hcomm_group_end();
        if (st != HCOMM_OK) hc_s_keep_error(s, st);
    }
    hc_api_leave(g);
    if (posted == 0) return hc_error(s->err, "%s", s->msg);
    return HCOMM_OK; /* a member's failure is reported once the posted ones are done */
}

static hcomm_status_t hc_s_test(hc_pt_item_t *it)
{
    hc_s_item_t *s = (hc_s_item_t *)it;
    int g = hc_s_try_enter();
    if (g < 0) return HCOMM_ERR_AGAIN;
    bool all = true;
    for (int i = 0; i < s->nops; i++) {
        hc_s_op_t *o = &s->ops[i];
        if (!o->posted) continue;
        int done = 0;
        hcomm_status_t st = hcomm_test(o->req, &done);
        if (st != HCOMM_OK) {
            hc_s_keep_error(s, st);
            o->posted = false; /* the request is retired with its failure */
        } else if (done) {
            o->posted = false;
        } else {
            all = false;
        }
    }
    hc_api_leave(g);
    if (!all) return HCOMM_IN_PROGRESS;
    return s->err == HCOMM_OK ? HCOMM_OK : hc_error(s->err, "%s", s->msg);
}

static void hc_s_release(hc_pt_item_t *it)
{
    hc_s_item_t *s = (hc_s_item_t *)it;
    for (int i = 0; i < s->nops; i++)
        for (int k = 0; k < 4; k++)
            free((void *)s->ops[i].v[k]);
    free(s);
}

static const hc_pt_ops_t hc_s_ops = {.post = hc_s_post, .test = hc_s_test, .release = hc_s_release};

/* HCOMM_PROGRESS_THREAD=1: when no item needs it, the thread advances the
 * engine for host operations (one pass, if the library is free). */
static void hc_s_idle(void)
{
    int g = hc_s_try_enter();
    if (g < 0) return;
    if (hc_ctx.initialized) (void)hc_progress();
    hc_api_leave(g);
}

/* ---- the calls ------------------------------------------------------------------------------ */

static hcomm_status_t hc_s_check(const char *fn, const hc_s_op_t *o, hcomm_comm_t comm,
                                 hcomm_stream_t stream)
{
    hcomm_status_t st;
    if ((st = hc_check_init(fn)) != HCOMM_OK || (st = hc_check_comm(fn, comm)) != HCOMM_OK)
        return st;
    if (!stream)
        return hc_error(HCOMM_ERR_INVALID,
                        "%s: stream is NULL: a stream-ordered call needs a stream of the GPU "
                        "backend (a cudaStream_t; the legacy default stream is not supported)",
                        fn);
    if (!hc_gpu_backend()) {
        char why[256];
        hc_gpu_describe(why, sizeof(why));
        return hc_error(HCOMM_ERR_UNSUPPORTED, "%s: no GPU backend is active (%s)", fn, why);
    }
    if (hc_pt_mode() == 0)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "%s: HCOMM_PROGRESS_THREAD=0: stream-ordered calls need the progress "
                        "thread",
                        fn);
    if (o->kind != HC_S_BARRIER && (st = hc_check_dtype(fn, o->dtype)) != HCOMM_OK) return st;
    if ((o->kind == HC_S_SEND || o->kind == HC_S_RECV) && (o->root < 0 || o->root >= comm->size))
        return hc_error(HCOMM_ERR_INVALID, "%s: peer %d out of range [0, %d)", fn, o->root,
                        comm->size);
    if ((st = hc_pt_async_error(comm)) != HCOMM_OK) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", hc_error_last());
        return hc_error(st,
                        "%s: an earlier stream-ordered operation on this communicator failed: %s",
                        fn, saved);
    }
    return HCOMM_OK;
}

/* o into s->ops[i], the vector arrays copied (comm->size entries). */
static hcomm_status_t hc_s_copy_op(const char *fn, hc_s_item_t *s, int i, const hc_s_op_t *o,
                                   hcomm_comm_t comm)
{
    hc_s_op_t *d = &s->ops[i];
    *d = *o;
    memset((void *)d->v, 0, sizeof(d->v));
    for (int k = 0; k < 4; k++) {
        if (!o->v[k]) continue;
        size_t *c = malloc((size_t)comm->size * sizeof(size_t));
        if (!c) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory for its counts", fn);
        memcpy(c, o->v[k], (size_t)comm->size * sizeof(size_t));
        d->v[k] = c;
    }
    return HCOMM_OK;
}

static hc_s_item_t *hc_s_item_new(const char *fn, int cap, hcomm_comm_t comm, hcomm_stream_t stream)
{
    hc_s_item_t *s = calloc(1, sizeof(*s) + (size_t)cap * sizeof(hc_s_op_t));
    if (!s) return NULL;
    s->it.ops = &hc_s_ops;
    s->it.name = fn;
    s->it.key = comm;
    s->it.stream = (hc_gpu_stream_t)stream;
    s->comm = comm;
    return s;
}

static hcomm_status_t hc_s_start_thread(void)
{
    return hc_pt_start(hc_pt_mode() == 1 ? hc_s_idle : NULL);
}

/* Inside a group: o joins the group's item (one communicator, one stream). */
static hcomm_status_t hc_s_group_add(const char *fn, const hc_s_op_t *o, hcomm_comm_t comm,
                                     hcomm_stream_t stream)
{
    hc_s_item_t *s = hc_s_group.item;
    if (s && (s->comm != comm || s->it.stream != (hc_gpu_stream_t)stream))
        return hc_error(HCOMM_ERR_INVALID,
                        "%s: the stream-ordered operations of one group must use one "
                        "communicator and one stream (the group's first: %s on comm %p, stream "
                        "%p)",
                        fn, s->it.name, (void *)s->comm, (void *)s->it.stream);
    if (!s) {
        s = hc_s_item_new("hcomm_group_end (a stream-ordered group)", 8, comm, stream);
        if (!s) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory to hold the group", fn);
        hc_s_group.item = s;
        hc_s_group.cap = 8;
    } else if (s->nops == hc_s_group.cap) {
        int cap = 2 * hc_s_group.cap;
        hc_s_item_t *n = realloc(s, sizeof(*n) + (size_t)cap * sizeof(hc_s_op_t));
        if (!n) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory to hold the group", fn);
        s = hc_s_group.item = n;
        hc_s_group.cap = cap;
    }
    hcomm_status_t st = hc_s_copy_op(fn, s, s->nops, o, comm);
    if (st != HCOMM_OK) return st;
    s->nops++;
    return HCOMM_OK;
}

static hcomm_status_t hc_s_submit_locked(const char *fn, const hc_s_op_t *o, hcomm_comm_t comm,
                                         hcomm_stream_t stream)
{
    hcomm_status_t st = hc_s_check(fn, o, comm, stream);
    if (st != HCOMM_OK) return st;
    if ((st = hc_s_start_thread()) != HCOMM_OK) return st;
    if (hc_ctx.group_depth > 0) return hc_s_group_add(fn, o, comm, stream);
    hc_s_item_t *s = hc_s_item_new(fn, 1, comm, stream);
    if (!s) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory to queue it", fn);
    s->nops = 1;
    if ((st = hc_s_copy_op(fn, s, 0, o, comm)) == HCOMM_OK) st = hc_pt_enqueue(&s->it);
    if (st != HCOMM_OK) hc_s_release(&s->it);
    return st;
}

static hcomm_status_t hc_s_submit(const char *fn, const hc_s_op_t *o, hcomm_comm_t comm,
                                  hcomm_stream_t stream)
{
    int g = hc_api_enter(fn);
    if (g < 0) return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_s_submit_locked(fn, o, comm, stream);
    hc_api_leave(g);
    return st;
}

/* ---- what api.c and api_coll.c call ------------------------------------------------------ */

hcomm_status_t hc_api_stream_group_end(hcomm_status_t st)
{
    hc_s_item_t *s = hc_s_group.item;
    if (hc_ctx.group_depth > 0 || !s) return st;
    hc_s_group.item = NULL;
    hc_s_group.cap = 0;
    hcomm_status_t qst = st == HCOMM_OK ? hc_pt_enqueue(&s->it) : st;
    if (qst != HCOMM_OK) hc_s_release(&s->it);
    return qst;
}

hcomm_status_t hc_api_stream_init(void)
{
    return hc_pt_mode() == 1 ? hc_s_start_thread() : HCOMM_OK;
}

void hc_api_stream_fini(void)
{
    hc_pt_stop();
    if (hc_s_group.item) hc_s_release(&hc_s_group.item->it);
    hc_s_group.item = NULL;
    hc_s_group.cap = 0;
}

hcomm_status_t hc_api_stream_comm_free(hcomm_comm_t comm)
{
    int n = hc_pt_pending(comm);
    if (n > 0)
        return hc_error(HCOMM_ERR_INVALID,
                        "hcomm_comm_free: %d stream-ordered operation%s on the communicator %s "
                        "pending: synchronize their streams first",
                        n, n == 1 ? "" : "s", n == 1 ? "is" : "are");
    hc_pt_forget(comm);
    return HCOMM_OK;
}

/* ---- the public calls ----------------------------------------------------------------------- */

HC_EXPORT hcomm_status_t hcomm_comm_get_async_error(hcomm_comm_t comm, hcomm_status_t *status_p)
{
    const char *fn = "hcomm_comm_get_async_error";
    int g = hc_api_enter(fn);
    if (g < 0) return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_check_init(fn);
    if (st == HCOMM_OK && !hc_comm_valid(comm)) /* revoked or aborted: still answered */
        st = hc_error(HCOMM_ERR_INVALID, "%s: communicator %p is NULL, freed or not a communicator",
                      fn, (void *)comm);
    if (st == HCOMM_OK && !status_p) st = hc_error(HCOMM_ERR_INVALID, "%s: status_p is NULL", fn);
    if (st == HCOMM_OK) *status_p = hc_pt_async_error(comm);
    hc_api_leave(g);
    return st;
}

HC_EXPORT hcomm_status_t hcomm_allreduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                                hcomm_dtype_t dtype, hcomm_op_t op,
                                                hcomm_comm_t comm, hcomm_stream_t stream)
{
    hc_s_op_t o = {.kind = HC_S_ALLREDUCE,
                   .sbuf = sendbuf,
                   .rbuf = recvbuf,
                   .count = count,
                   .dtype = dtype,
                   .op = op};
    return hc_s_submit("hcomm_allreduce_stream", &o, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_broadcast_stream(void *buf, size_t count, hcomm_dtype_t dtype,
                                                int root, hcomm_comm_t comm, hcomm_stream_t stream)
{
    hc_s_op_t o = {
        .kind = HC_S_BROADCAST, .rbuf = buf, .count = count, .dtype = dtype, .root = root};
    return hc_s_submit("hcomm_broadcast_stream", &o, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                             hcomm_dtype_t dtype, hcomm_op_t op, int root,
                                             hcomm_comm_t comm, hcomm_stream_t stream)
{
    hc_s_op_t o = {.kind = HC_S_REDUCE,
                   .sbuf = sendbuf,
                   .rbuf = recvbuf,
                   .count = count,
                   .dtype = dtype,
                   .op = op,
                   .root = root};
    return hc_s_submit("hcomm_reduce_stream", &o, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_allgather_stream(const void *sendbuf, void *recvbuf,
                                                size_t sendcount, hcomm_dtype_t dtype,
                                                hcomm_comm_t comm, hcomm_stream_t stream)
{
    hc_s_op_t o = {.kind = HC_S_ALLGATHER,
                   .sbuf = sendbuf,
                   .rbuf = recvbuf,
                   .count = sendcount,
                   .dtype = dtype};
    return hc_s_submit("hcomm_allgather_stream", &o, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_reduce_scatter_stream(const void *sendbuf, void *recvbuf,
                                                     size_t recvcount, hcomm_dtype_t dtype,
                                                     hcomm_op_t op, hcomm_comm_t comm,
                                                     hcomm_stream_t stream)
{
    hc_s_op_t o = {.kind = HC_S_REDUCE_SCATTER,
                   .sbuf = sendbuf,
                   .rbuf = recvbuf,
                   .count = recvcount,
                   .dtype = dtype,
                   .op = op};
    return hc_s_submit("hcomm_reduce_scatter_stream", &o, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_alltoall_stream(const void *sendbuf, void *recvbuf, size_t count,
                                               hcomm_dtype_t dtype, hcomm_comm_t comm,
                                               hcomm_stream_t stream)
{
    hc_s_op_t o = {
        .kind = HC_S_ALLTOALL, .sbuf = sendbuf, .rbuf = recvbuf, .count = count, .dtype = dtype};
    return hc_s_submit("hcomm_alltoall_stream", &o, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_barrier_stream(hcomm_comm_t comm, hcomm_stream_t stream)
{
    hc_s_op_t o = {.kind = HC_S_BARRIER};
    return hc_s_submit("hcomm_barrier_stream", &o, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_gather_stream(const void *sendbuf, void *recvbuf, size_t count,
                                             hcomm_dtype_t dtype, int root, hcomm_comm_t comm,
                                             hcomm_stream_t stream)
{
    hc_s_op_t o = {.kind = HC_S_GATHER,
                   .sbuf = sendbuf,
                   .rbuf = recvbuf,
                   .count = count,
                   .dtype = dtype,
                   .root = root};
    return hc_s_submit("hcomm_gather_stream", &o, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_scatter_stream(const void *sendbuf, void *recvbuf, size_t count,
                                              hcomm_dtype_t dtype, int root, hcomm_comm_t comm,
                                              hcomm_stream_t stream)
{
    hc_s_op_t o = {.kind = HC_S_SCATTER,
                   .sbuf = sendbuf,
                   .rbuf = recvbuf,
                   .count = count,
                   .dtype = dtype,
                   .root = root};
    return hc_s_submit("hcomm_scatter_stream", &o, comm, stream);
}

/* The vector calls: the arrays are checked for NULL here (they are copied). */
static hcomm_status_t hc_s_submit_vec(const char *fn, hc_s_op_t *o, const char *const *names,
                                      hcomm_comm_t comm, hcomm_stream_t stream)
{
    for (int k = 0; k < 4 && names[k]; k++)
        if (!o->v[k]) return hc_error(HCOMM_ERR_INVALID, "%s: %s is NULL", fn, names[k]);
    return hc_s_submit(fn, o, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_allgatherv_stream(const void *sendbuf, size_t sendcount,
                                                 void *recvbuf, const size_t *recvcounts,
                                                 const size_t *displs, hcomm_dtype_t dtype,
                                                 hcomm_comm_t comm, hcomm_stream_t stream)
{
    static const char *const names[4] = {"recvcounts", "displs", NULL, NULL};
    hc_s_op_t o = {.kind = HC_S_ALLGATHERV,
                   .sbuf = sendbuf,
                   .rbuf = recvbuf,
                   .count = sendcount,
                   .dtype = dtype,
                   .v = {recvcounts, displs}};
    return hc_s_submit_vec("hcomm_allgatherv_stream", &o, names, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_reduce_scatterv_stream(const void *sendbuf, void *recvbuf,
                                                      const size_t *recvcounts, hcomm_dtype_t dtype,
                                                      hcomm_op_t op, hcomm_comm_t comm,
                                                      hcomm_stream_t stream)
{
    static const char *const names[4] = {"recvcounts", NULL, NULL, NULL};
    hc_s_op_t o = {.kind = HC_S_REDUCE_SCATTERV,
                   .sbuf = sendbuf,
                   .rbuf = recvbuf,
                   .dtype = dtype,
                   .op = op,
                   .v = {recvcounts}};
    return hc_s_submit_vec("hcomm_reduce_scatterv_stream", &o, names, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_alltoallv_stream(const void *sendbuf, const size_t *sendcounts,
                                                const size_t *sdispls, void *recvbuf,
                                                const size_t *recvcounts, const size_t *rdispls,
                                                hcomm_dtype_t dtype, hcomm_comm_t comm,
                                                hcomm_stream_t stream)
{
    static const char *const names[4] = {"sendcounts", "sdispls", "recvcounts", "rdispls"};
    hc_s_op_t o = {.kind = HC_S_ALLTOALLV,
                   .sbuf = sendbuf,
                   .rbuf = recvbuf,
                   .dtype = dtype,
                   .v = {sendcounts, sdispls, recvcounts, rdispls}};
    return hc_s_submit_vec("hcomm_alltoallv_stream", &o, names, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_send_stream(const void *buf, size_t count, hcomm_dtype_t dtype,
                                           int peer, int tag, hcomm_comm_t comm,
                                           hcomm_stream_t stream)
{
    hc_s_op_t o = {
        .kind = HC_S_SEND, .sbuf = buf, .count = count, .dtype = dtype, .root = peer, .tag = tag};
    return hc_s_submit("hcomm_send_stream", &o, comm, stream);
}

HC_EXPORT hcomm_status_t hcomm_recv_stream(void *buf, size_t count, hcomm_dtype_t dtype, int peer,
                                           int tag, hcomm_comm_t comm, hcomm_stream_t stream)
{
    hc_s_op_t o = {
        .kind = HC_S_RECV, .rbuf = buf, .count = count, .dtype = dtype, .root = peer, .tag = tag};
    return hc_s_submit("hcomm_recv_stream", &o, comm, stream);
}
