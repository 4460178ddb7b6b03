/*
 * allgather_bw: hcomm_allgather time and bandwidth, nccl-tests columns.
 * size = bytes gathered on each rank (nranks * sendcount * element size),
 * count = its elements; busbw = algbw * (n-1)/n. In place: sendbuf is the
 * rank's own block of recvbuf.
 * The collective itself is hb_coll_allgather in bench_colls.c.
 */
#include "bench_common.h"

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &hb_coll_allgather);
}
