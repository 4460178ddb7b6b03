/*
 * allreduce_bw: hcomm_allreduce time and bandwidth, nccl-tests columns.
 * size = count * element size; busbw = algbw * 2(n-1)/n. In place:
 * sendbuf == recvbuf.
 * The collective itself is hb_coll_allreduce in bench_colls.c.
 */
#include "bench_common.h"

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &hb_coll_allreduce);
}
