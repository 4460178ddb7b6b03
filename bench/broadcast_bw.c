/*
 * broadcast_bw: hcomm_broadcast time and bandwidth, nccl-tests columns.
 * size = count * element size; busbw = algbw. hcomm_broadcast has one
 * buffer, so the out-of-place and in-place columns time the same call.
 */
#include "bench_common.h"

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

static void broadcast_fill(const struct hb_coll_ctx *c, int in_place)
{
    (void)in_place;
    if (c->rank == c->root)
        hb_fill(c->recvbuf, 0, c->count, c->dtype, c->op, c->root);
    else
        hb_fill_sentinel(c->recvbuf, c->count, c->dtype);
}

static size_t broadcast_check(const struct hb_coll_ctx *c, int in_place)
{
    (void)in_place;
    return hb_count_wrong(c->recvbuf, 0, c->count, c->dtype, c->op, c->root, c->what);
}

static const struct hb_coll broadcast = {
    .name = "broadcast",
    .rooted = 1,
    .busbw_factor = broadcast_busbw,
    .buf_elems = broadcast_bufs,
    .run = broadcast_run,
    .fill = broadcast_fill,
    .check = broadcast_check,
};

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &broadcast);
}
