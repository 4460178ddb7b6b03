/*
 * mp_tcp_rails: a loop of allreduces and small point-to-point messages,
 * every byte checked, timed per iteration: the application's view of tcp
 * rails (issue 37; tests/netns/rails_test.sh moves links down and up
 * meanwhile).
 *
 *   mp_tcp_rails [--min BYTES] [--max BYTES] [--seconds S] [--expect-fail] [--trace]
 *
 * Each iteration allreduces (sum, uint32) a buffer whose size cycles from
 * --min to --max by doubling, with contents every rank can recompute, and
 * passes an eager message carrying (iteration, sender) around the ring: a
 * lost, duplicated or reordered message shows as a wrong one. The time of an
 * iteration is its allreduce's (what the application waits for). Rank 0 decides
 * when --seconds are over (a 1-element allreduce per iteration carries it).
 * At the end each rank prints, per size, the iterations, the median time
 * and its bus bandwidth, and the longest iteration with its wall-clock
 * start (CLOCK_REALTIME, to set against the script's link changes): "stall"
 * is that iteration's time less the median of its size.
 *
 * --trace: one line per iteration, "iter I bytes B start WALL ms T median M",
 * for the script to find the iterations a link change fell into.
 *
 * --expect-fail: the loop must end with ERR_PEER_FAILED (both links were
 * taken down for longer than HCOMM_CONN_FAIL_TIMEOUT): the rank prints how
 * long after its last good iteration it came and exits 0 without the final
 * allreduce.
 */
#include "common/mp_test.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ITERS 100000
#define MAX_SIZES 8

static double t_iter[MAX_ITERS], wall_start[MAX_ITERS];
static int size_of[MAX_ITERS];

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k') v *= 1024;
    if (*end == 'M' || *end == 'm') v *= 1048576;
    if (*end == 'G' || *end == 'g') v *= 1073741824.0;
    return (size_t)v;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint32_t val(int rank, int iter, size_t j)
{
    return (uint32_t)j * 2654435761u + (uint32_t)rank * 40503u + (uint32_t)iter * 7919u;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One iteration: the allreduce of n elements, checked, and the ring message. */
static hcomm_status_t one_iter(uint32_t *sbuf, uint32_t *rbuf, size_t n, int it)
{
    hcomm_comm_t w = hcomm_comm_world();
    for (size_t j = 0; j < n; j++)
        sbuf[j] = val(mp_rank, it, j);
    double a = mp_now();
    wall_start[it] = wall_now();
    hcomm_status_t st = hcomm_allreduce(sbuf, rbuf, n, HCOMM_UINT32, HCOMM_SUM, w);
    t_iter[it] = mp_now() - a; /* the time the application waits (filling and checking not) */
    if (st != HCOMM_OK) return st;
    uint32_t rsum = (uint32_t)(mp_size * (mp_size - 1) / 2);
    size_t bad = 0, first = 0;
    for (size_t j = 0; j < n; j++) {
        uint32_t want =
            (uint32_t)mp_size * ((uint32_t)j * 2654435761u + (uint32_t)it * 7919u) + rsum * 40503u;
        if (rbuf[j] != want && !bad++) first = j;
    }
    if (bad)
        mp_fail("iteration %d: %zu of %zu elements wrong, first at %zu (%u, expected sum)", it, bad,
                n, first, rbuf[first]);
    if (mp_size < 2) return HCOMM_OK;
    uint64_t out[4] = {(uint64_t)it, (uint64_t)mp_rank, 0x7261696cull, 0}, in[4] = {0};
    int to = (mp_rank + 1) % mp_size, from = (mp_rank + mp_size - 1) % mp_size;
    hcomm_request_t req;
    st = hcomm_isend(out, 4, HCOMM_UINT64, to, 77, w, &req);
    if (st == HCOMM_OK) st = hcomm_recv(in, 4, HCOMM_UINT64, from, 77, w);
    hcomm_status_t st2 = st == HCOMM_OK ? hcomm_wait(req) : HCOMM_OK;
    if (st != HCOMM_OK) return st;
    if (st2 != HCOMM_OK) return st2;
    if (in[0] != (uint64_t)it || in[1] != (uint64_t)from || in[2] != 0x7261696cull)
        mp_fail("iteration %d: ring message from rank %d was (%llu, %llu, %llx): lost, duplicated "
                "or reordered",
                it, from, (unsigned long long)in[0], (unsigned long long)in[1],
                (unsigned long long)in[2]);
    return HCOMM_OK;
}

static void report(int iters, const size_t *sizes, int nsizes, bool trace)
{
    double meds[MAX_SIZES] = {0};
    for (int z = 0; z < nsizes; z++) {
        static double tmp[MAX_ITERS];
        int k = 0, worst = -1;
        for (int i = 0; i < iters; i++)
            if (size_of[i] == z) {
                tmp[k++] = t_iter[i];
                if (worst < 0 || t_iter[i] > t_iter[worst]) worst = i;
            }
        if (!k) continue;
        qsort(tmp, (size_t)k, sizeof(double), cmp_double);
        double med = meds[z] = tmp[k / 2];
        double busbw = 2.0 * (mp_size - 1) / mp_size * (double)sizes[z] / med / 1e9;
        printf("rank %d: %zu bytes: %d iterations, median %.1f ms, busbw %.3f GB/s; longest %.1f "
               "ms (iteration %d, started at %.3f): stall %.1f ms\n",
               mp_rank, sizes[z], k, med * 1e3, busbw, t_iter[worst] * 1e3, worst,
               wall_start[worst], (t_iter[worst] - med) * 1e3);
    }
    for (int i = 0; i < iters && trace; i++)
        printf("rank %d: iter %d bytes %zu start %.3f ms %.1f median %.1f\n", mp_rank, i,
               sizes[size_of[i]], wall_start[i], t_iter[i] * 1e3, meds[size_of[i]] * 1e3);
}

int main(int argc, char **argv)
{
    size_t min = 16u << 20, max = 64u << 20;
    double seconds = 10;
    bool expect_fail = false, trace = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--min") && i + 1 < argc)
            min = parse_size(argv[++i]);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max = parse_size(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--expect-fail"))
            expect_fail = true;
        else if (!strcmp(argv[i], "--trace"))
            trace = true;
        else {
            fprintf(stderr,
                    "usage: %s [--min B] [--max B] [--seconds S] [--expect-fail] [--trace]\n",
                    argv[0]);
            return 2;
        }
    }
    if (min < 4 || max < min) {
        fprintf(stderr, "mp_tcp_rails: need 4 <= --min <= --max\n");
        return 2;
    }
    size_t sizes[MAX_SIZES];
    int nsizes = 0;
    for (size_t s = min; s <= max && nsizes < MAX_SIZES; s *= 2)
        sizes[nsizes++] = s;
    mp_init();
    uint32_t *sbuf = mp_xmalloc(max), *rbuf = mp_xmalloc(max);
    /* the scripts time their link changes from here, not from the launch
     * (init in a busy CI takes seconds) */
    printf("rank %d: the loop starts\n", mp_rank);
    fflush(stdout);
    double t0 = mp_now(), last_good = t0;
    int it = 0;
    hcomm_status_t st = HCOMM_OK;
    for (; it < MAX_ITERS; it++) {
        int64_t stop = mp_rank == 0 && mp_now() - t0 > seconds, any = 0;
        st = hcomm_allreduce(&stop, &any, 1, HCOMM_INT64, HCOMM_SUM, hcomm_comm_world());
        if (st != HCOMM_OK || any) break;
        int z = it % nsizes;
        st = one_iter(sbuf, rbuf, sizes[z] / 4, it);
        if (st != HCOMM_OK) break;
        size_of[it] = z;
        last_good = mp_now();
    }
    report(it, sizes, nsizes, trace);
    if (expect_fail) {
        if (st != HCOMM_ERR_PEER_FAILED)
            mp_fail("the loop expected to end with ERR_PEER_FAILED got %s after %d iterations",
                    mp_status_name(st), it);
        else
            printf("rank %d: PEER_FAILED %.2f s after the last good iteration (%d done): %s\n",
                   mp_rank, mp_now() - last_good, it, hcomm_last_error());
        fflush(stdout);
        hcomm_finalize();
        free(sbuf);
        free(rbuf);
        return mp_failures ? 1 : 0;
    }
    if (st != HCOMM_OK) {
        mp_fail("iteration %d: %s (%s)", it, mp_status_name(st), hcomm_last_error());
        exit(1);
    }
    free(sbuf);
    free(rbuf);
    return mp_finish("mp_tcp_rails");
}
