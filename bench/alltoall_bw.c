/*
 * alltoall_bw: hcomm_alltoall time and bandwidth, nccl-tests columns.
 * size = bytes sent by each rank (nranks * count * element size), count =
 * its elements; busbw = algbw * (n-1)/n. In place: sendbuf == recvbuf.
 */
#include "bench_common.h"

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

static void alltoall_fill(const struct hb_coll_ctx *c, int in_place)
{
    size_t total = c->count * (size_t)c->nranks;

    hb_fill_sentinel(c->recvbuf, total, c->dtype);
    hb_fill(in_place ? c->recvbuf : c->sendbuf, 0, total, c->dtype, c->op, c->rank);
}

static size_t alltoall_check(const struct hb_coll_ctx *c, int in_place)
{
    size_t wrong = 0, total = c->count * (size_t)c->nranks;

    /* block q came from rank q, which sent its block `rank` */
    for (int q = 0; q < c->nranks; q++)
        wrong += hb_count_wrong(c->recvbuf + (size_t)q * c->count * c->esize,
                                (size_t)c->rank * c->count, c->count, c->dtype, c->op, q, c->what);
    if (!in_place)
        wrong += hb_count_wrong(c->sendbuf, 0, total, c->dtype, c->op, c->rank, c->what_input);
    return wrong;
}

static const struct hb_coll alltoall = {
    .name = "alltoall",
    .per_rank = 1,
    .busbw_factor = alltoall_busbw,
    .buf_elems = alltoall_bufs,
    .run = alltoall_run,
    .fill = alltoall_fill,
    .check = alltoall_check,
};

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &alltoall);
}
