/*
 * allgather_bw: hcomm_allgather time and bandwidth, nccl-tests columns.
 * size = bytes gathered on each rank (nranks * sendcount * element size),
 * count = its elements; busbw = algbw * (n-1)/n. In place: sendbuf is the
 * rank's own block of recvbuf.
 */
#include "bench_common.h"

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

static void allgather_fill(const struct hb_coll_ctx *c, int in_place)
{
    hb_fill_sentinel(c->recvbuf, c->count * (size_t)c->nranks, c->dtype);
    hb_fill(allgather_input(c, in_place), 0, c->count, c->dtype, c->op, c->rank);
}

static size_t allgather_check(const struct hb_coll_ctx *c, int in_place)
{
    size_t wrong = 0;

    for (int q = 0; q < c->nranks; q++)
        wrong += hb_count_wrong(c->recvbuf + (size_t)q * c->count * c->esize, 0, c->count, c->dtype,
                                c->op, q, c->what);
    if (!in_place)
        wrong += hb_count_wrong(c->sendbuf, 0, c->count, c->dtype, c->op, c->rank, c->what_input);
    return wrong;
}

static const struct hb_coll allgather = {
    .name = "allgather",
    .per_rank = 1,
    .busbw_factor = allgather_busbw,
    .buf_elems = allgather_bufs,
    .run = allgather_run,
    .fill = allgather_fill,
    .check = allgather_check,
};

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &allgather);
}
