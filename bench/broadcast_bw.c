/*
 * broadcast_bw: hcomm_broadcast time and bandwidth, nccl-tests columns.
 * size = count * element size; busbw = algbw. hcomm_broadcast has one
 * buffer, so the out-of-place and in-place columns time the same call.
 * The collective itself is hb_coll_broadcast in bench_colls.c.
 */
#include "bench_common.h"

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &hb_coll_broadcast);
}
