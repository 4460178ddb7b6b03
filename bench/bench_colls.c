/*
 * The collectives the benchmark tools measure, one descriptor each: the
 * blocking call and its non-blocking twin, buffer sizes, the nccl-tests
 * busbw factor, the inputs of a checked run and its check. The *_bw tools
 * run one descriptor through hb_coll_main(); mixed_load issues a profile's
 * messages through the same descriptors, so both check alike.
 *
 * Each section's comment gives the row's size and count (the nccl-tests
 * meaning), the busbw factor and what in place means.
 */
#include "bench_common.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------
 * allreduce: hcomm_allreduce and its non-blocking twin.
 * size = count * element size; busbw = algbw * 2(n-1)/n. In place:
 * sendbuf == recvbuf.
 * ---------------------------------------------------------------------- */

static double allreduce_busbw(int n)
{
    return 2.0 * (n - 1) / n;
}

static void allreduce_bufs(size_t max_elems, int n, size_t *send_p, size_t *recv_p)
{
    (void)n;
    *send_p = max_elems;
    *recv_p = max_elems;
}

static hcomm_status_t allreduce_run(const struct hb_coll_ctx *c, int in_place)
{
    return hcomm_allreduce(in_place ? c->recvbuf : c->sendbuf, c->recvbuf, c->count, c->dtype,
                           (hcomm_op_t)c->op, c->comm);
}

static hcomm_status_t allreduce_irun(const struct hb_coll_ctx *c, int in_place,
                                     hcomm_request_t *req_p)
{
    return hcomm_iallreduce(in_place ? c->recvbuf : c->sendbuf, c->recvbuf, c->count, c->dtype,
                            (hcomm_op_t)c->op, c->comm, req_p);
}

static void allreduce_fill(const struct hb_coll_ctx *c, int in_place)
{
    hb_fill_sentinel(c->recvbuf, c->count, c->dtype);
    hb_fill(in_place ? c->recvbuf : c->sendbuf, c->first, c->count, c->dtype, c->op, c->rank);
}

static size_t allreduce_check(const struct hb_coll_ctx *c, int in_place)
{
    size_t wrong =
        hb_count_wrong(c->recvbuf, c->first, c->count, c->dtype, c->op, HB_REDUCED, c->what);

    if (!in_place) /* the input is const */
        wrong +=
            hb_count_wrong(c->sendbuf, c->first, c->count, c->dtype, c->op, c->rank, c->what_input);
    return wrong;
}

const struct hb_coll hb_coll_allreduce = {
    .name = "allreduce",
    .reduces = 1,
    .busbw_factor = allreduce_busbw,
    .buf_elems = allreduce_bufs,
    .run = allreduce_run,
    .irun = allreduce_irun,
    .fill = allreduce_fill,
    .check = allreduce_check,
};

/* ------------------------------------------------------------------------
 * allgather: hcomm_allgather and its non-blocking twin.
 * size = bytes gathered on each rank (nranks * sendcount * element size),
 * count = its elements; busbw = algbw * (n-1)/n. In place: sendbuf is the
 * rank's own block of recvbuf.
 * ---------------------------------------------------------------------- */

static double allgather_busbw(int n)
{
    return (double)(n - 1) / n;
}

static void allgather_bufs(size_t max_elems, int n, size_t *send_p, size_t *recv_p)
{
    *send_p = max_elems / (size_t)n;
    *recv_p = max_elems;
}

static char *allgather_input(const struct hb_coll_ctx *c, int in_place)
{
    return in_place ? c->recvbuf + (size_t)c->rank * c->count * c->esize : c->sendbuf;
}

static hcomm_status_t allgather_run(const struct hb_coll_ctx *c, int in_place)
{
    return hcomm_allgather(allgather_input(c, in_place), c->recvbuf, c->count, c->dtype, c->comm);
}

static hcomm_status_t allgather_irun(const struct hb_coll_ctx *c, int in_place,
                                     hcomm_request_t *req_p)
{
    return hcomm_iallgather(allgather_input(c, in_place), c->recvbuf, c->count, c->dtype, c->comm,
                            req_p);
}

static void allgather_fill(const struct hb_coll_ctx *c, int in_place)
{
    hb_fill_sentinel(c->recvbuf, c->count * (size_t)c->nranks, c->dtype);
    hb_fill(allgather_input(c, in_place), c->first, c->count, c->dtype, c->op, c->rank);
}

static size_t allgather_check(const struct hb_coll_ctx *c, int in_place)
{
    size_t wrong = 0;

    for (int q = 0; q < c->nranks; q++)
        wrong += hb_count_wrong(c->recvbuf + (size_t)q * c->count * c->esize, c->first, c->count,
                                c->dtype, c->op, q, c->what);
    if (!in_place)
        wrong +=
            hb_count_wrong(c->sendbuf, c->first, c->count, c->dtype, c->op, c->rank, c->what_input);
    return wrong;
}

const struct hb_coll hb_coll_allgather = {
    .name = "allgather",
    .per_rank = 1,
    .busbw_factor = allgather_busbw,
    .buf_elems = allgather_bufs,
    .run = allgather_run,
    .irun = allgather_irun,
    .fill = allgather_fill,
    .check = allgather_check,
};

/* ------------------------------------------------------------------------
 * broadcast: hcomm_broadcast and its non-blocking twin.
 * size = count * element size; busbw = algbw. hcomm_broadcast has one
 * buffer, so the out-of-place and in-place columns time the same call.
 * ---------------------------------------------------------------------- */

static double broadcast_busbw(int n)
{
    (void)n;
    return 1.0;
}

static void broadcast_bufs(size_t max_elems, int n, size_t *send_p, size_t *recv_p)
{
    (void)n;
    *send_p = 0;
    *recv_p = max_elems;
}

static hcomm_status_t broadcast_run(const struct hb_coll_ctx *c, int in_place)
{
    (void)in_place;
    return hcomm_broadcast(c->recvbuf, c->count, c->dtype, c->root, c->comm);
}

static hcomm_status_t broadcast_irun(const struct hb_coll_ctx *c, int in_place,
                                     hcomm_request_t *req_p)
{
    (void)in_place;
    return hcomm_ibroadcast(c->recvbuf, c->count, c->dtype, c->root, c->comm, req_p);
}

static void broadcast_fill(const struct hb_coll_ctx *c, int in_place)
{
    (void)in_place;
    if (c->rank == c->root)
        hb_fill(c->recvbuf, c->first, c->count, c->dtype, c->op, c->root);
    else
        hb_fill_sentinel(c->recvbuf, c->count, c->dtype);
}

static size_t broadcast_check(const struct hb_coll_ctx *c, int in_place)
{
    (void)in_place;
    return hb_count_wrong(c->recvbuf, c->first, c->count, c->dtype, c->op, c->root, c->what);
}

const struct hb_coll hb_coll_broadcast = {
    .name = "broadcast",
    .rooted = 1,
    .busbw_factor = broadcast_busbw,
    .buf_elems = broadcast_bufs,
    .run = broadcast_run,
    .irun = broadcast_irun,
    .fill = broadcast_fill,
    .check = broadcast_check,
};

/* ------------------------------------------------------------------------
 * reduce: hcomm_reduce and its non-blocking twin.
 * size = count * element size; busbw = algbw. In place: sendbuf == recvbuf
 * on every rank; only the root's recvbuf holds a result, and the other
 * ranks' inputs must come back unchanged.
 * ---------------------------------------------------------------------- */

static double reduce_busbw(int n)
{
    (void)n;
    return 1.0;
}

static void reduce_bufs(size_t max_elems, int n, size_t *send_p, size_t *recv_p)
{
    (void)n;
    *send_p = max_elems;
    *recv_p = max_elems;
}

static hcomm_status_t reduce_run(const struct hb_coll_ctx *c, int in_place)
{
    return hcomm_reduce(in_place ? c->recvbuf : c->sendbuf, c->recvbuf, c->count, c->dtype,
                        (hcomm_op_t)c->op, c->root, c->comm);
}

static hcomm_status_t reduce_irun(const struct hb_coll_ctx *c, int in_place, hcomm_request_t *req_p)
{
    return hcomm_ireduce(in_place ? c->recvbuf : c->sendbuf, c->recvbuf, c->count, c->dtype,
                         (hcomm_op_t)c->op, c->root, c->comm, req_p);
}

static void reduce_fill(const struct hb_coll_ctx *c, int in_place)
{
    hb_fill_sentinel(c->recvbuf, c->count, c->dtype);
    hb_fill(in_place ? c->recvbuf : c->sendbuf, c->first, c->count, c->dtype, c->op, c->rank);
}

static size_t reduce_check(const struct hb_coll_ctx *c, int in_place)
{
    size_t wrong = 0;

    if (c->rank == c->root)
        wrong +=
            hb_count_wrong(c->recvbuf, c->first, c->count, c->dtype, c->op, HB_REDUCED, c->what);
    if (!in_place || c->rank != c->root)
        wrong += hb_count_wrong(in_place ? c->recvbuf : c->sendbuf, c->first, c->count, c->dtype,
                                c->op, c->rank, c->what_input);
    return wrong;
}

const struct hb_coll hb_coll_reduce = {
    .name = "reduce",
    .reduces = 1,
    .rooted = 1,
    .busbw_factor = reduce_busbw,
    .buf_elems = reduce_bufs,
    .run = reduce_run,
    .irun = reduce_irun,
    .fill = reduce_fill,
    .check = reduce_check,
};

/* ------------------------------------------------------------------------
 * reduce_scatter: hcomm_reduce_scatter and its non-blocking twin.
 * size = bytes reduced on each rank (nranks * recvcount * element
 * size), count = its elements; busbw = algbw * (n-1)/n. In place: recvbuf is
 * the rank's own block of sendbuf.
 * ---------------------------------------------------------------------- */

static double reduce_scatter_busbw(int n)
{
    return (double)(n - 1) / n;
}

static void reduce_scatter_bufs(size_t max_elems, int n, size_t *send_p, size_t *recv_p)
{
    *send_p = max_elems;
    *recv_p = max_elems / (size_t)n;
}

static char *reduce_scatter_output(const struct hb_coll_ctx *c, int in_place)
{
    return in_place ? c->sendbuf + (size_t)c->rank * c->count * c->esize : c->recvbuf;
}

static hcomm_status_t reduce_scatter_run(const struct hb_coll_ctx *c, int in_place)
{
    return hcomm_reduce_scatter(c->sendbuf, reduce_scatter_output(c, in_place), c->count, c->dtype,
                                (hcomm_op_t)c->op, c->comm);
}

static hcomm_status_t reduce_scatter_irun(const struct hb_coll_ctx *c, int in_place,
                                          hcomm_request_t *req_p)
{
    return hcomm_ireduce_scatter(c->sendbuf, reduce_scatter_output(c, in_place), c->count, c->dtype,
                                 (hcomm_op_t)c->op, c->comm, req_p);
}

static void reduce_scatter_fill(const struct hb_coll_ctx *c, int in_place)
{
    if (!in_place) hb_fill_sentinel(c->recvbuf, c->count, c->dtype);
    hb_fill(c->sendbuf, c->first, c->count * (size_t)c->nranks, c->dtype, c->op, c->rank);
}

static size_t reduce_scatter_check(const struct hb_coll_ctx *c, int in_place)
{
    size_t first = c->first + (size_t)c->rank * c->count, wrong;

    wrong = hb_count_wrong(reduce_scatter_output(c, in_place), first, c->count, c->dtype, c->op,
                           HB_REDUCED, c->what);
    if (!in_place)
        wrong += hb_count_wrong(c->sendbuf, c->first, c->count * (size_t)c->nranks, c->dtype, c->op,
                                c->rank, c->what_input);
    return wrong;
}

const struct hb_coll hb_coll_reduce_scatter = {
    .name = "reduce_scatter",
    .reduces = 1,
    .per_rank = 1,
    .busbw_factor = reduce_scatter_busbw,
    .buf_elems = reduce_scatter_bufs,
    .run = reduce_scatter_run,
    .irun = reduce_scatter_irun,
    .fill = reduce_scatter_fill,
    .check = reduce_scatter_check,
};

/* ------------------------------------------------------------------------
 * alltoall: hcomm_alltoall and its non-blocking twin.
 * size = bytes sent by each rank (nranks * count * element size), count =
 * its elements; busbw = algbw * (n-1)/n. In place: sendbuf == recvbuf.
 * ---------------------------------------------------------------------- */

static double alltoall_busbw(int n)
{
    return (double)(n - 1) / n;
}

static void alltoall_bufs(size_t max_elems, int n, size_t *send_p, size_t *recv_p)
{
    (void)n;
    *send_p = max_elems;
    *recv_p = max_elems;
}

static hcomm_status_t alltoall_run(const struct hb_coll_ctx *c, int in_place)
{
    return hcomm_alltoall(in_place ? c->recvbuf : c->sendbuf, c->recvbuf, c->count, c->dtype,
                          c->comm);
}

static hcomm_status_t alltoall_irun(const struct hb_coll_ctx *c, int in_place,
                                    hcomm_request_t *req_p)
{
    return hcomm_ialltoall(in_place ? c->recvbuf : c->sendbuf, c->recvbuf, c->count, c->dtype,
                           c->comm, req_p);
}

static void alltoall_fill(const struct hb_coll_ctx *c, int in_place)
{
    size_t total = c->count * (size_t)c->nranks;

    hb_fill_sentinel(c->recvbuf, total, c->dtype);
    hb_fill(in_place ? c->recvbuf : c->sendbuf, c->first, total, c->dtype, c->op, c->rank);
}

static size_t alltoall_check(const struct hb_coll_ctx *c, int in_place)
{
    size_t wrong = 0, total = c->count * (size_t)c->nranks;

    /* block q came from rank q, which sent its block `rank` */
    for (int q = 0; q < c->nranks; q++)
        wrong += hb_count_wrong(c->recvbuf + (size_t)q * c->count * c->esize,
                                c->first + (size_t)c->rank * c->count, c->count, c->dtype, c->op, q,
                                c->what);
    if (!in_place)
        wrong +=
            hb_count_wrong(c->sendbuf, c->first, total, c->dtype, c->op, c->rank, c->what_input);
    return wrong;
}

const struct hb_coll hb_coll_alltoall = {
    .name = "alltoall",
    .per_rank = 1,
    .busbw_factor = alltoall_busbw,
    .buf_elems = alltoall_bufs,
    .run = alltoall_run,
    .irun = alltoall_irun,
    .fill = alltoall_fill,
    .check = alltoall_check,
};

/* ------------------------------------------------------------------------
 * gather: hcomm_gather and its non-blocking twin, root -r.
 * size = bytes gathered at the root (nranks * count * element size), count
 * = its elements; busbw = algbw * (n-1)/n. In place: the root's sendbuf is
 * its own block of recvbuf.
 * ---------------------------------------------------------------------- */

static double gather_busbw(int n)
{
    return (double)(n - 1) / n;
}

static void gather_bufs(size_t max_elems, int n, size_t *send_p, size_t *recv_p)
{
    *send_p = max_elems / (size_t)n;
    *recv_p = max_elems;
}

static char *gather_input(const struct hb_coll_ctx *c, int in_place)
{
    return in_place && c->rank == c->root ? c->recvbuf + (size_t)c->rank * c->count * c->esize
                                          : c->sendbuf;
}

static hcomm_status_t gather_run(const struct hb_coll_ctx *c, int in_place)
{
    return hcomm_gather(gather_input(c, in_place), c->recvbuf, c->count, c->dtype, c->root,
                        c->comm);
}

static hcomm_status_t gather_irun(const struct hb_coll_ctx *c, int in_place,
                                  hcomm_request_t *req_p)
{
    return hcomm_igather(gather_input(c, in_place), c->recvbuf, c->count, c->dtype, c->root,
                         c->comm, req_p);
}

static void gather_fill(const struct hb_coll_ctx *c, int in_place)
{
    if (c->rank == c->root)
        hb_fill_sentinel(c->recvbuf, c->count * (size_t)c->nranks, c->dtype);
    hb_fill(gather_input(c, in_place), c->first, c->count, c->dtype, c->op, c->rank);
}

static size_t gather_check(const struct hb_coll_ctx *c, int in_place)
{
    size_t wrong = 0;

    if (c->rank == c->root)
        for (int q = 0; q < c->nranks; q++)
            wrong += hb_count_wrong(c->recvbuf + (size_t)q * c->count * c->esize, c->first,
                                    c->count, c->dtype, c->op, q, c->what);
    if (!(in_place && c->rank == c->root))
        wrong += hb_count_wrong(gather_input(c, in_place), c->first, c->count, c->dtype, c->op,
                                c->rank, c->what_input);
    return wrong;
}

const struct hb_coll hb_coll_gather = {
    .name = "gather",
    .rooted = 1,
    .per_rank = 1,
    .busbw_factor = gather_busbw,
    .buf_elems = gather_bufs,
    .run = gather_run,
    .irun = gather_irun,
    .fill = gather_fill,
    .check = gather_check,
};

/* ------------------------------------------------------------------------
 * scatter: hcomm_scatter and its non-blocking twin, root -r.
 * size = bytes scattered by the root (nranks * count * element size), count
 * = its elements; busbw = algbw * (n-1)/n. In place: the root's recvbuf is
 * its own block of sendbuf.
 * ---------------------------------------------------------------------- */

static void scatter_bufs(size_t max_elems, int n, size_t *send_p, size_t *recv_p)
{
    *send_p = max_elems;
    *recv_p = max_elems / (size_t)n;
}

static char *scatter_output(const struct hb_coll_ctx *c, int in_place)
{
    return in_place && c->rank == c->root ? c->sendbuf + (size_t)c->rank * c->count * c->esize
                                          : c->recvbuf;
}

static hcomm_status_t scatter_run(const struct hb_coll_ctx *c, int in_place)
{
    return hcomm_scatter(c->sendbuf, scatter_output(c, in_place), c->count, c->dtype, c->root,
                         c->comm);
}

static hcomm_status_t scatter_irun(const struct hb_coll_ctx *c, int in_place,
                                   hcomm_request_t *req_p)
{
    return hcomm_iscatter(c->sendbuf, scatter_output(c, in_place), c->count, c->dtype, c->root,
                          c->comm, req_p);
}

static void scatter_fill(const struct hb_coll_ctx *c, int in_place)
{
    /* block q of the root's input holds rank q's reference values */
    if (c->rank == c->root)
        for (int q = 0; q < c->nranks; q++)
            hb_fill(c->sendbuf + (size_t)q * c->count * c->esize, c->first, c->count, c->dtype,
                    c->op, q);
    if (!(in_place && c->rank == c->root))
        hb_fill_sentinel(scatter_output(c, in_place), c->count, c->dtype);
}

static size_t scatter_check(const struct hb_coll_ctx *c, int in_place)
{
    size_t wrong = hb_count_wrong(scatter_output(c, in_place), c->first, c->count, c->dtype,
                                  c->op, c->rank, c->what);

    if (c->rank == c->root)
        for (int q = 0; q < c->nranks; q++)
            wrong += hb_count_wrong(c->sendbuf + (size_t)q * c->count * c->esize, c->first,
                                    c->count, c->dtype, c->op, q, c->what_input);
    return wrong;
}

const struct hb_coll hb_coll_scatter = {
    .name = "scatter",
    .rooted = 1,
    .per_rank = 1,
    .busbw_factor = gather_busbw,
    .buf_elems = scatter_bufs,
    .run = scatter_run,
    .irun = scatter_irun,
    .fill = scatter_fill,
    .check = scatter_check,
};

/* ------------------------------------------------------------------------
 * alltoallv: hcomm_alltoallv and its non-blocking twin with equal counts
 * (every block `count` elements, displacements q * count): the vector
 * call's cost next to alltoall_bw's. size, count and busbw as alltoall.
 * alltoallv is not done in place: both columns time the out-of-place call.
 * ---------------------------------------------------------------------- */

static size_t *alltoallv_arrays(const struct hb_coll_ctx *c)
{
    static size_t *arr;
    static int n;
    if (n != c->nranks) {
        free(arr);
        arr = malloc(sizeof(size_t) * 2 * (size_t)c->nranks);
        if (!arr) {
            fprintf(stderr, "rank %d: out of memory\n", c->rank);
            exit(1);
        }
        n = c->nranks;
    }
    for (int q = 0; q < n; q++) {
        arr[q] = c->count;
        arr[n + q] = (size_t)q * c->count;
    }
    return arr;
}

static hcomm_status_t alltoallv_run(const struct hb_coll_ctx *c, int in_place)
{
    (void)in_place;
    size_t *a = alltoallv_arrays(c);
    return hcomm_alltoallv(c->sendbuf, a, a + c->nranks, c->recvbuf, a, a + c->nranks, c->dtype,
                           c->comm);
}

static hcomm_status_t alltoallv_irun(const struct hb_coll_ctx *c, int in_place,
                                     hcomm_request_t *req_p)
{
    (void)in_place;
    size_t *a = alltoallv_arrays(c);
    return hcomm_ialltoallv(c->sendbuf, a, a + c->nranks, c->recvbuf, a, a + c->nranks, c->dtype,
                            c->comm, req_p);
}

static void alltoallv_fill(const struct hb_coll_ctx *c, int in_place)
{
    (void)in_place;
    alltoall_fill(c, 0);
}

static size_t alltoallv_check(const struct hb_coll_ctx *c, int in_place)
{
    (void)in_place;
    return alltoall_check(c, 0);
}

const struct hb_coll hb_coll_alltoallv = {
    .name = "alltoallv",
    .per_rank = 1,
    .busbw_factor = alltoall_busbw,
    .buf_elems = alltoall_bufs,
    .run = alltoallv_run,
    .irun = alltoallv_irun,
    .fill = alltoallv_fill,
    .check = alltoallv_check,
};
