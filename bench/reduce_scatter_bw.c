/*
 * reduce_scatter_bw: hcomm_reduce_scatter time and bandwidth, nccl-tests
 * columns. size = bytes reduced on each rank (nranks * recvcount * element
 * size), count = its elements; busbw = algbw * (n-1)/n. In place: recvbuf is
 * the rank's own block of sendbuf.
 * The collective itself is hb_coll_reduce_scatter in bench_colls.c.
 */
#include "bench_common.h"

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &hb_coll_reduce_scatter);
}
