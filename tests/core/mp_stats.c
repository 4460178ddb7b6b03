/*
 * mp_stats: a job whose statistics are known in advance, for
 * stats_job_test.sh to read back (HCOMM_STATS, HCOMM_STATS_FILE).
 * 3+ ranks. Every rank: 100 allreduces of 8 float32 (32 B), 10 of 256 Ki
 * float32 (1 MiB), 20 broadcasts of 256 float32 (1 KiB) from root 0,
 * hcomm_stats_dump(world) once, then 10 barriers before which the last
 * rank sleeps 20 ms (the straggler). Rank 0 sends 30 messages of 4 KiB to
 * rank 1. A freed communicator (split) carries 5 allreduces of 8 B.
 *
 * `mp_stats allreduce N M...` (2+ ranks): only N allreduces of M bytes of
 * float32 for each M (a multiple of 4), each size's calls in a row, out of
 * pool memory when M ends in p (`4194304p`: the mapped single copy), then
 * finalize: for the per-peer counts of the node algorithms.
 */
#include "common/mp_test.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int allreduces(int argc, char **argv, hcomm_comm_t w)
{
    int n = argc > 2 ? atoi(argv[2]) : 0;
    for (int k = 3; k < argc; k++) {
        char *end;
        size_t m = strtoull(argv[k], &end, 10);
        bool pool = *end == 'p';
        if (n <= 0 || m == 0 || m % 4 || (*end && (!pool || end[1]))) {
            fprintf(stderr, "mp_stats allreduce N M...: bad arguments\n");
            return 2;
        }
        void *a, *b;
        if (pool) {
            MP_OK(hcomm_mem_alloc(m, &a));
            MP_OK(hcomm_mem_alloc(m, &b));
            memset(a, 0, m);
        } else {
            a = calloc(1, m);
            b = calloc(1, m);
            if (!a || !b) return 1;
        }
        for (int i = 0; i < n; i++)
            MP_OK(hcomm_allreduce(a, b, m / 4, HCOMM_FLOAT32, HCOMM_SUM, w));
        if (pool) {
            MP_OK(hcomm_mem_free(a));
            MP_OK(hcomm_mem_free(b));
        } else {
            free(a);
            free(b);
        }
    }
    MP_OK(hcomm_finalize());
    return mp_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    MP_OK(hcomm_init(&argc, &argv));
    hcomm_comm_t w = hcomm_comm_world();
    if (argc > 1 && !strcmp(argv[1], "allreduce"))
        return allreduces(argc, argv, w);
    int me = hcomm_comm_rank(w), n = hcomm_comm_size(w);
    if (n < 3) {
        fprintf(stderr, "mp_stats: needs 3+ ranks\n");
        return 2;
    }
    size_t big = 256 * 1024;
    float *a = calloc(big, sizeof(float)), *b = calloc(big, sizeof(float));
    if (!a || !b) return 1;
    for (int i = 0; i < 100; i++)
        MP_OK(hcomm_allreduce(a, b, 8, HCOMM_FLOAT32, HCOMM_SUM, w));
    for (int i = 0; i < 10; i++)
        MP_OK(hcomm_allreduce(a, b, big, HCOMM_FLOAT32, HCOMM_SUM, w));
    for (int i = 0; i < 20; i++)
        MP_OK(hcomm_broadcast(a, 256, HCOMM_FLOAT32, 0, w));
    if (me == 0)
        for (int i = 0; i < 30; i++)
            MP_OK(hcomm_send(a, 4096, HCOMM_UINT8, 1, 5, w));
    else if (me == 1)
        for (int i = 0; i < 30; i++)
            MP_OK(hcomm_recv(b, 4096, HCOMM_UINT8, 0, 5, w));
    hcomm_comm_t sub;
    MP_OK(hcomm_comm_split(w, 0, me, &sub));
    for (int i = 0; i < 5; i++)
        MP_OK(hcomm_allreduce(a, b, 2, HCOMM_FLOAT32, HCOMM_SUM, sub));
    MP_OK(hcomm_comm_free(sub));
    MP_OK(hcomm_stats_dump(w));
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_stats_dump(sub)); /* freed */
    for (int i = 0; i < 10; i++) {
        if (me == n - 1) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        MP_OK(hcomm_barrier(w));
    }
    MP_OK(hcomm_finalize());
    free(a);
    free(b);
    return mp_failures ? 1 : 0;
}
