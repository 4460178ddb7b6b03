/*
 * reduce_bw: hcomm_reduce time and bandwidth, nccl-tests columns.
 * size = count * element size; busbw = algbw. In place: sendbuf == recvbuf
 * on every rank; only the root's recvbuf holds a result, and the other
 * ranks' inputs must come back unchanged.
 * The collective itself is hb_coll_reduce in bench_colls.c.
 */
#include "bench_common.h"

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &hb_coll_reduce);
}
