/*
 * allreduce_bw: hcomm_allreduce time and bandwidth, nccl-tests columns.
 * size = count * element size; busbw = algbw * 2(n-1)/n. In place:
 * sendbuf == recvbuf.
 */
#include "bench_common.h"

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

static void allreduce_fill(const struct hb_coll_ctx *c, int in_place)
{
    hb_fill_sentinel(c->recvbuf, c->count, c->dtype);
    hb_fill(in_place ? c->recvbuf : c->sendbuf, 0, c->count, c->dtype, c->op, c->rank);
}

static size_t allreduce_check(const struct hb_coll_ctx *c, int in_place)
{
    size_t wrong = hb_count_wrong(c->recvbuf, 0, c->count, c->dtype, c->op, HB_REDUCED, c->what);

    if (!in_place) /* the input is const */
        wrong += hb_count_wrong(c->sendbuf, 0, c->count, c->dtype, c->op, c->rank, c->what_input);
    return wrong;
}

static const struct hb_coll allreduce = {
    .name = "allreduce",
    .reduces = 1,
    .busbw_factor = allreduce_busbw,
    .buf_elems = allreduce_bufs,
    .run = allreduce_run,
    .fill = allreduce_fill,
    .check = allreduce_check,
};

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &allreduce);
}
