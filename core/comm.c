/*
 * Communicators: a context id (agreed by all members, see hcomm_comm_split),
 * the rank maps, the matching queues and the collective queue. Also the
 * argument checks every public call shares, so that each failure message has
 * one shape: "<function>: <argument> <what is wrong> (<value>)".
 */
#include "core/hc_core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>


/* Guards the communicator list against hcomm_comm_abort, which may run on
 * another thread. Only the communicating thread changes the list (under the
 * lock); its own unlocked reads never race with itself. */
static pthread_mutex_t hc_comm_list_lock = PTHREAD_MUTEX_INITIALIZER;

bool hc_comm_valid(const struct hcomm_comm *comm)
{
    if (!comm)
        return false;
    /* Only communicators on our list are dereferenced beyond this point. */
    const hc_list_t *pos;
    for (pos = hc_ctx.comms.next; pos != &hc_ctx.comms; pos = pos->next)
        if (hc_container_of(pos, struct hcomm_comm, link) == comm)
            return comm->magic == HC_COMM_MAGIC;
    return false;
}

struct hcomm_comm *hc_comm_by_ctx(uint32_t ctx_id)
{
    hc_list_t *pos;
    for (pos = hc_ctx.comms.next; pos != &hc_ctx.comms; pos = pos->next) {
        struct hcomm_comm *c = hc_container_of(pos, struct hcomm_comm, link);
        if (c->ctx_id == ctx_id)
            return c;
    }
    return NULL;
}

hcomm_status_t hc_comm_create(uint32_t ctx_id, int size, const int *world_ranks,
                              struct hcomm_comm **comm_p)
{
    struct hcomm_comm *c = calloc(1, sizeof(*c));
    if (!c)
        goto err;
    c->world_ranks = malloc(sizeof(int) * (size_t)size);
    c->comm_rank_of = malloc(sizeof(int) * (size_t)hc_ctx.size);
    if (!c->world_ranks || !c->comm_rank_of)
        goto err_free;
    c->magic = HC_COMM_MAGIC;
    c->ctx_id = ctx_id;
    c->size = size;
    c->rank = -1;
    c->revoked_by = -1;
    for (int w = 0; w < hc_ctx.size; w++)
        c->comm_rank_of[w] = -1;
    for (int r = 0; r < size; r++) {
        c->world_ranks[r] = world_ranks[r];
        c->comm_rank_of[world_ranks[r]] = r;
        if (world_ranks[r] == hc_ctx.rank)
            c->rank = r;
    }
    hc_list_init(&c->posted);
    hc_list_init(&c->unexpected);
    hc_list_init(&c->coll_queue);
    pthread_mutex_lock(&hc_comm_list_lock);
    hc_list_push_back(&hc_ctx.comms, &c->link);
    pthread_mutex_unlock(&hc_comm_list_lock);
    if (ctx_id >= hc_ctx.next_ctx_id)
        hc_ctx.next_ctx_id = ctx_id + 1;
    hc_p2p_adopt_orphans(c);
    *comm_p = c;
    return HCOMM_OK;
err_free:
    free(c->world_ranks);
    free(c->comm_rank_of);
    free(c);
err:
    return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm: no memory for a communicator of %d ranks", size);
}

void hc_comm_destroy(struct hcomm_comm *comm)
{
    if (hc_coll_ops.comm_free)
        hc_coll_ops.comm_free(comm, HCOMM_ERR_ABORTED, true);
    hc_p2p_comm_cleanup(comm);
    hc_stats_comm_gone(comm);
    pthread_mutex_lock(&hc_comm_list_lock);
    hc_list_del(&comm->link);
    comm->magic = HC_COMM_FREED;
    pthread_mutex_unlock(&hc_comm_list_lock);
    free(comm->world_ranks);
    free(comm->comm_rank_of);
    free(comm);
}

hcomm_status_t hc_comm_abort(struct hcomm_comm *comm)
{
    pthread_mutex_lock(&hc_comm_list_lock);
    bool ok = hc_ctx.initialized && (comm == hc_ctx.world || hc_comm_valid(comm));
    if (ok)
        __atomic_store_n(&comm->aborted, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&hc_comm_list_lock);
    if (!ok)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_comm_abort: communicator %p is NULL, freed or "
                                           "not a communicator", (void *)comm);
    return HCOMM_OK;
}

hcomm_status_t hc_comm_shape(const char *fn, struct hcomm_comm *comm, int *rank_p, int *size_p)
{
    hcomm_status_t st = hc_check_init(fn);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return st;
    pthread_mutex_lock(&hc_comm_list_lock);
    bool ok = comm == hc_ctx.world || hc_comm_valid(comm);
    bool aborted = ok && hc_comm_aborted(comm);
    int rank = ok ? comm->rank : -1, size = ok ? comm->size : -1;
    pthread_mutex_unlock(&hc_comm_list_lock);
    if (HC_UNLIKELY(!ok))
        return hc_error(HCOMM_ERR_INVALID, "%s: communicator %p is NULL, freed or not a "
                                           "communicator", fn, (void *)comm);
    if (HC_UNLIKELY(aborted))
        return hc_comm_abort_error(comm, fn);
    if (rank_p)
        *rank_p = rank;
    if (size_p)
        *size_p = size;
    return HCOMM_OK;
}

hcomm_status_t hc_comm_abort_error(const struct hcomm_comm *comm, const char *fn)
{
    if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE) != 2)
        return hc_error(HCOMM_ERR_ABORTED, "%s: communicator was aborted", fn);
    int by = __atomic_load_n(&comm->revoked_by, __ATOMIC_RELAXED);
    if (by < 0 || by == comm->rank)
        return hc_error(HCOMM_ERR_REVOKED, "%s: this rank revoked the communicator "
                                           "(hcomm_comm_revoke): shrink it or free it", fn);
    return hc_error(HCOMM_ERR_REVOKED, "%s: communicator rank %d (world rank %d) revoked the "
                                       "communicator (hcomm_comm_revoke): shrink it or free it",
                    fn, by, comm->world_ranks[by]);
}

void hc_comm_handle_abort(struct hcomm_comm *comm)
{
    hcomm_status_t st = hc_comm_abort_error(comm, "hcomm");
    if (hc_coll_ops.comm_free)
        hc_coll_ops.comm_free(comm, st, false);
    hc_p2p_fail_comm(comm, hc_comm_abort_error(comm, "hcomm"));
}

void hc_comm_revoked(struct hcomm_comm *comm, int by)
{
    int expect = -1;
    __atomic_compare_exchange_n(&comm->revoked_by, &expect, by, false, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
    __atomic_store_n(&comm->aborted, 2, __ATOMIC_RELEASE);
}

hcomm_status_t hc_comm_revoke(struct hcomm_comm *comm)
{
    bool first = __atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE) != 2;
    hc_comm_revoked(comm, comm->rank);
    if (first)
        hc_p2p_revoke(comm);
    hc_comm_handle_abort(comm); /* this rank's pending operations fail now */
    return HCOMM_OK;
}

/* ---- argument checks ------------------------------------------------------ */

hcomm_status_t hc_check_init(const char *fn)
{
    if (HC_UNLIKELY(!hc_ctx.initialized))
        return hc_error(HCOMM_ERR_NOT_INITIALIZED, "%s: called before hcomm_init or after "
                                                   "hcomm_finalize", fn);
    return HCOMM_OK;
}

HC_NOINLINE hcomm_status_t hc_check_comm_slow(const char *fn, struct hcomm_comm *comm)
{
    hcomm_status_t st = hc_check_init(fn);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return st;
    if (HC_UNLIKELY(comm != hc_ctx.world && !hc_comm_valid(comm)))
        return hc_error(HCOMM_ERR_INVALID, "%s: communicator %p is NULL, freed or not a "
                                           "communicator", fn, (void *)comm);
    if (HC_UNLIKELY(hc_comm_aborted(comm)))
        return hc_comm_abort_error(comm, fn);
    return HCOMM_OK;
}

hcomm_status_t hc_check_dtype(const char *fn, hcomm_dtype_t dtype)
{
    if (HC_UNLIKELY((unsigned)dtype >= HCOMM_DTYPE_COUNT))
        return hc_error(HCOMM_ERR_INVALID, "%s: unknown dtype %d (valid: 0..%d, "
                                           "HCOMM_INT8..HCOMM_FLOAT64)", fn, (int)dtype,
                        HCOMM_DTYPE_COUNT - 1);
    return HCOMM_OK;
}

HC_NOINLINE hcomm_status_t hc_check_buf_slow(const char *fn, const char *name, const void *buf,
                                         size_t count, hcomm_dtype_t dtype, size_t mult,
                                         size_t *bytes_p)
{
    hcomm_status_t st = hc_check_dtype(fn, dtype);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return st;
    size_t bytes;
    if (HC_UNLIKELY(hc_mul_overflows(count, hc_dtype_size(dtype), &bytes) ||
                    (mult != 1 && hc_mul_overflows(bytes, mult, &bytes)) || bytes > (size_t)PTRDIFF_MAX))
        return hc_error(HCOMM_ERR_INVALID, "%s: count %zu of %s overflows the byte size", fn,
                        count, hc_dtype_name(dtype));
    if (HC_UNLIKELY(!buf && bytes))
        return hc_error(HCOMM_ERR_INVALID, "%s: %s is NULL with count %zu", fn, name, count);
    if (HC_UNLIKELY((uintptr_t)buf > UINTPTR_MAX - bytes))
        return hc_error(HCOMM_ERR_INVALID, "%s: %s %p + %zu bytes wraps around the address space",
                        fn, name, buf, bytes);
    *bytes_p = bytes;
    return HCOMM_OK;
}
