/*
 * Public collective API: argument checks (each failure names the function,
 * the argument and the value) and the entry points of the collectives,
 * groups and the communicators made by collectives. What runs and how is
 * coll/'s: hc_coll_post (coll/coll_post.c) decides and posts.
 */
#include "api/api.h"
#include "api/api_stage.h"
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

/* The arguments as coll/ takes them (coll/coll_post.c decides and posts). */
static inline hcomm_status_t hc_api_post(hc_coll_kind_t kind, const void *sbuf, void *rbuf,
                                         size_t count, size_t bytes, hcomm_dtype_t dtype,
                                         hcomm_op_t op, int root, hcomm_comm_t comm,
                                         hcomm_request_t *req_p, const hc_coll_vec_t *vec)
{
    hc_coll_args_t a = {.kind = kind, .sbuf = sbuf, .rbuf = rbuf, .count = count, .bytes = bytes,
                        .dtype = dtype, .op = op, .root = root, .vec = vec};
    if (HC_UNLIKELY(hc_gpu_on)) /* device buffers staged through host (api_stage.c) */
        return hc_api_stage_coll(&a, comm, req_p);
    return hc_coll_post(&a, comm, req_p);
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
                        : hc_api_post(HC_COLL_ALLREDUCE, sbuf, rbuf, count, bytes, dtype, op, 0,
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
                        : hc_api_post(HC_COLL_BROADCAST, buf, buf, count, bytes, dtype, 0, root,
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
                            : hc_api_post(HC_COLL_REDUCE, sbuf, at_root ? rbuf : NULL, count,
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
                        : hc_api_post(HC_COLL_ALLGATHER, sbuf, rbuf, count, bytes, dtype, 0, 0,
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
                        : hc_api_post(HC_COLL_REDUCE_SCATTER, sbuf, rbuf, count, bytes, dtype, op,
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
                        : hc_api_post(HC_COLL_ALLTOALL, sbuf, rbuf, count, bytes, dtype, 0, 0,
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
        st = hc_api_post(HC_COLL_BARRIER, NULL, NULL, 0, 0, HCOMM_UINT8, 0, 0, comm, req_p,
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
    return hc_api_post(scatter ? HC_COLL_SCATTER : HC_COLL_GATHER, sbuf, rbuf, count, bytes,
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
    return hc_api_post(HC_COLL_ALLGATHERV, sbuf, rbuf, total, total * hc_dtype_size(dtype),
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
    st = hc_api_post(HC_COLL_REDUCE_SCATTERV, sbuf, rbuf, total, total * es, dtype, op, 0, comm,
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
    return hc_api_post(HC_COLL_ALLTOALLV, sbuf, rbuf, 0, stotal * hc_dtype_size(dtype), dtype,
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

/* ---- groups (coll/coll_group.c) ------------------------------------------------------- */

HC_EXPORT hcomm_status_t hcomm_group_start(void)
{
    int g = hc_api_enter("hcomm_group_start");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_check_init("hcomm_group_start");
    if (st == HCOMM_OK)
        hc_coll_group_start();
    hc_api_leave(g);
    return st;
}

HC_EXPORT hcomm_status_t hcomm_group_end(void)
{
    int g = hc_api_enter("hcomm_group_end");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_check_init("hcomm_group_end");
    if (st == HCOMM_OK)
        st = hc_coll_group_end();
    if (HC_UNLIKELY(hc_gpu_on)) st = hc_api_stage_group_end(st);
    st = hc_api_stream_group_end(st);
    hc_api_leave(g);
    return st;
}

/* ---- communicators made by collectives (coll/coll_comm.c) ------------------------------ */

static hcomm_status_t hc_api_comm_new_check(const char *fn, hcomm_comm_t comm,
                                            hcomm_comm_t *newcomm_p)
{
    hcomm_status_t st = hc_check_comm(fn, comm);
    if (st != HCOMM_OK)
        return st;
    if (!newcomm_p)
        return hc_error(HCOMM_ERR_INVALID, "%s: newcomm_p is NULL", fn);
    if (hc_ctx.group_depth)
        return hc_error(HCOMM_ERR_INVALID, "%s: not allowed inside a group", fn);
    return HCOMM_OK;
}

HC_EXPORT hcomm_status_t hcomm_comm_split(hcomm_comm_t comm, int color, int key,
                                          hcomm_comm_t *newcomm_p)
{
    int g = hc_api_enter("hcomm_comm_split");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_api_comm_new_check("hcomm_comm_split", comm, newcomm_p);
    if (st == HCOMM_OK)
        st = hc_coll_comm_split(comm, color, key, newcomm_p);
    hc_api_leave(g);
    return st;
}

HC_EXPORT hcomm_status_t hcomm_comm_create_group(hcomm_comm_t comm, const int *ranks, int n,
                                                 int tag, hcomm_comm_t *newcomm_p)
{
    const char *fn = "hcomm_comm_create_group";
    int g = hc_api_enter(fn);
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_api_comm_new_check(fn, comm, newcomm_p);
    if (st == HCOMM_OK && (!ranks || n < 1 || n > comm->size))
        st = hc_error(HCOMM_ERR_INVALID, "%s: ranks is NULL or n = %d is not in [1, %d]", fn, n,
                      comm->size);
    else if (st == HCOMM_OK && tag < 0)
        st = hc_error(HCOMM_ERR_INVALID, "%s: tag %d is negative", fn, tag);
    if (st == HCOMM_OK)
        st = hc_coll_comm_create_group(comm, ranks, n, tag, newcomm_p);
    hc_api_leave(g);
    return st;
}
