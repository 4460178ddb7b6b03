/*
 * alltoall_bw: hcomm_alltoall time and bandwidth, nccl-tests columns.
 * size = bytes sent by each rank (nranks * count * element size), count =
 * its elements; busbw = algbw * (n-1)/n. In place: sendbuf == recvbuf.
 * The collective itself is hb_coll_alltoall in bench_colls.c.
 */
#include "bench_common.h"

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &hb_coll_alltoall);
}
