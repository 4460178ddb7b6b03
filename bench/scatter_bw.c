/*
 * scatter_bw: hcomm_scatter time and bandwidth, nccl-tests columns.
 * The collective itself is hb_coll_scatter in bench_colls.c (its comment
 * gives the row's size, count, busbw and in-place meaning).
 */
#include "bench_common.h"

int main(int argc, char **argv)
{
    return hb_coll_main(argc, argv, &hb_coll_scatter);
}
