/* Zero-copy node allreduce (coll/node_1copy.c): pool buffers on every rank take the
 * zero-copy path; any rank with malloc'ed input or output makes all ranks
 * fall back to staging together. Every combination, in and out of place,
 * several repetitions (the handshake must not leak state between calls).
 * Then alltoall with in place on some ranks only (alltoall_mixed). */
#include "common/mp_test.h"

#include <stdio.h>
#include <stdlib.h>

static void *get(size_t bytes, int pool)
{
    void *p = NULL;
    if (pool)
        MP_OK(hcomm_mem_alloc(bytes, &p));
    else if (!(p = malloc(bytes)))
        exit(1);
    return p;
}

static void put(void *p, int pool)
{
    if (pool)
        MP_OK(hcomm_mem_free(p));
    else
        free(p);
}

/* Alltoall past the single copy's threshold with in place on some ranks
 * only (mode 1: even ranks, 2: every rank, 0: none): every rank must take
 * the same path (the single copy's handshake tick, then a fall back
 * together where a rank works in place); before, a rank's own choice made
 * the ticks differ and the call failed naming the wrong collective. */
static int alltoall_mixed(hcomm_comm_t w, int n)
{
    size_t cnt = (1u << 16) + 3;
    for (int mode = 0; mode < 3; mode++) {
        int inplace = mode == 2 || (mode == 1 && mp_rank % 2 == 0);
        int32_t *a = malloc(cnt * 4 * (size_t)n), *b = inplace ? a : malloc(cnt * 4 * (size_t)n);
        if (!a || !b) exit(1);
        for (int rep = 0; rep < 3; rep++) {
            for (int j = 0; j < n; j++)
                for (size_t i = 0; i < cnt; i++)
                    a[(size_t)j * cnt + i] = (int32_t)(mp_rank * 100000 + j * 1000 + rep) + (int32_t)(i % 7);
            hcomm_status_t st = hcomm_alltoall(a, b, cnt, HCOMM_INT32, w);
            if (st != HCOMM_OK) {
                printf("rank %d: alltoall mode %d rep %d: %s\n", mp_rank, mode, rep,
                       hcomm_last_error());
                return 1;
            }
            for (int j = 0; j < n; j++)
                for (size_t i = 0; i < cnt; i++) {
                    int32_t want = (int32_t)(j * 100000 + mp_rank * 1000 + rep) + (int32_t)(i % 7);
                    if (b[(size_t)j * cnt + i] != want) {
                        printf("rank %d: alltoall mode %d rep %d: block %d element %zu is %d, "
                               "expected %d\n",
                               mp_rank, mode, rep, j, i, b[(size_t)j * cnt + i], want);
                        return 1;
                    }
                }
        }
        free(a);
        if (!inplace) free(b);
    }
    return 0;
}

int main(void)
{
    mp_init();
    hcomm_comm_t w = hcomm_comm_world();
    int n = hcomm_comm_size(w);
    size_t cnt = (3u << 20) / 4 + 5; /* past the zero-copy threshold, odd length */
    /* mode bits: 1 = odd ranks' input is malloc, 2 = even ranks' output is
     * malloc, 4 = in place */
    for (int mode = 0; mode < 8; mode++) {
        int pool_s = (mode & 1) ? mp_rank % 2 == 0 : 1;
        int pool_r = (mode & 2) ? mp_rank % 2 == 1 : 1;
        int inplace = mode & 4;
        float *a = get(cnt * 4, pool_s), *b = inplace ? a : get(cnt * 4, pool_r);
        for (int rep = 0; rep < 3; rep++) {
            for (size_t i = 0; i < cnt; i++)
                a[i] = (float)((i % 5) + (size_t)mp_rank + (size_t)rep);
            MP_OK(hcomm_allreduce(a, b, cnt, HCOMM_FLOAT32, HCOMM_SUM, w));
            for (size_t i = 0; i < cnt; i++) {
                float want =
                    (float)((size_t)n * ((i % 5) + (size_t)rep)) + (float)(n * (n - 1) / 2);
                if (b[i] != want) {
                    printf("rank %d: mode %d rep %d: element %zu is %g, expected %g\n", mp_rank,
                           mode, rep, i, b[i], want);
                    return 1;
                }
            }
            int64_t v = mp_rank, mx = -1;
            MP_OK(hcomm_allreduce(&v, &mx, 1, HCOMM_INT64, HCOMM_MAX, w)); /* interleave small */
            if (mx != n - 1) {
                printf("rank %d: small allreduce between large ones gave %lld\n", mp_rank,
                       (long long)mx);
                return 1;
            }
        }
        put(a, pool_s);
        if (!inplace) put(b, pool_r);
    }
    if (alltoall_mixed(w, n)) return 1;
    MP_OK(hcomm_finalize());
    return 0;
}
