/*
 * reduce_bw: hcomm_reduce time and bandwidth, nccl-tests columns.
 * size = count * element size; busbw = algbw. In place: sendbuf == recvbuf
 * on every rank; only the root's recvbuf holds a result, and the other
 * ranks' inputs must come back unchanged.
 */
#include "bench_common.h"

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

static void reduce_fill(const struct hb_coll_ctx *c, int in_place)
{
    hb_fill_sentinel(c->recvbuf, c->count, c->dtype);
    hb_fill(in_place ? c->recvbuf : c->sendbuf, 0, c->count, c->dtype, c->op, c->rank);
}

static size_t reduce_check(const struct hb_coll_ctx *c, int in_place)
{
    size_t wrong = 0;

    if (c->rank == c->root)
        wrong += hb_count_wrong(c->recvbuf, 0, c->count, c->dtype, c->op, HB_REDUCED, c->what);
    if (!in_place || c->rank != c->root)
        wrong += hb_count_wrong(in_place ? c->recvbuf : c->sendbuf, 0, c->count, c->dtype, c->op,
                                c->rank, c->what_input);
    return wrong;
}

static const struct hb_coll reduce = {
    .name = "reduce",
    .reduces = 1,
    .rooted = 1,
    .busbw_factor = reduce_busbw,
    .buf_elems = reduce_bufs,
    .run = reduce_run,
    .fill = reduce_fill,
    .check = reduce_check,
};

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &reduce);
}
