/*
 * reduce_scatter_bw: hcomm_reduce_scatter time and bandwidth, nccl-tests
 * columns. size = bytes reduced on each rank (nranks * recvcount * element
 * size), count = its elements; busbw = algbw * (n-1)/n. In place: recvbuf is
 * the rank's own block of sendbuf.
 */
#include "bench_common.h"

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

static void reduce_scatter_fill(const struct hb_coll_ctx *c, int in_place)
{
    if (!in_place) hb_fill_sentinel(c->recvbuf, c->count, c->dtype);
    hb_fill(c->sendbuf, 0, c->count * (size_t)c->nranks, c->dtype, c->op, c->rank);
}

static size_t reduce_scatter_check(const struct hb_coll_ctx *c, int in_place)
{
    size_t first = (size_t)c->rank * c->count, wrong;

    wrong = hb_count_wrong(reduce_scatter_output(c, in_place), first, c->count, c->dtype, c->op,
                           HB_REDUCED, c->what);
    if (!in_place)
        wrong += hb_count_wrong(c->sendbuf, 0, c->count * (size_t)c->nranks, c->dtype, c->op,
                                c->rank, c->what_input);
    return wrong;
}

static const struct hb_coll reduce_scatter = {
    .name = "reduce_scatter",
    .reduces = 1,
    .per_rank = 1,
    .busbw_factor = reduce_scatter_busbw,
    .buf_elems = reduce_scatter_bufs,
    .run = reduce_scatter_run,
    .fill = reduce_scatter_fill,
    .check = reduce_scatter_check,
};

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &reduce_scatter);
}
