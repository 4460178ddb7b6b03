/*
 * mem_bench: pool alloc+free vs glibc malloc+free, ns per pair.
 *   - one thread, 4 KiB and 1 MiB (the block is touched once, as a user
 *     would, so that malloc cannot hand back untouched memory for free)
 *   - two threads hammering one class vs one thread
 * Every figure is the median of REPS runs, pool and malloc runs interleaved
 * so that both see the same machine. Time is the thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID), not wall time: on a shared, oversubscribed
 * machine wall time mostly measures the other tenants, while CPU time still
 * counts every cache miss and coherence stall of the loop itself.
 *
 * `mem_bench CASE` runs one loop only (pool-4k, malloc-4k, pool-1m,
 * malloc-1m), REPS times, for `perf stat` on machines that have counters.
 * Uses mem/'s internal API: bench/CMakeLists.txt links it against the
 * library objects rather than the public libhcomm.
 */

#include "base/config.h"
#include "mem/mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ITERS = 2000000, REPS = 5 };

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double pool_pairs(size_t size, long iters)
{
    uint64_t t0 = cpu_ns();
    for (long i = 0; i < iters; i++) {
        void *p;
        if (hc_mem_alloc(size, &p) != HCOMM_OK) {
            fprintf(stderr, "hc_mem_alloc: %s\n", hc_error_last());
            exit(1);
        }
        *(volatile char *)p = 1;
        if (hc_mem_free(p) != HCOMM_OK) {
            fprintf(stderr, "hc_mem_free: %s\n", hc_error_last());
            exit(1);
        }
    }
    return (double)(cpu_ns() - t0) / (double)iters;
}

static double malloc_pairs(size_t size, long iters)
{
    uint64_t t0 = cpu_ns();
    for (long i = 0; i < iters; i++) {
        void *p = malloc(size);
        if (!p) exit(1);
        *(volatile char *)p = 1;
        free(p);
    }
    return (double)(cpu_ns() - t0) / (double)iters;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

static double thread_ns[2];
static pthread_barrier_t start;
static void *thread_run(void *arg)
{
    long i = (long)arg;
    pool_pairs(4096, 1000); /* this thread's cache */
    pthread_barrier_wait(&start);
    thread_ns[i] = pool_pairs(4096, ITERS);
    return NULL;
}

static int run_one(const char *name)
{
    static const struct {
        const char *name;
        double (*fn)(size_t, long);
        size_t size;
    } cases[] = {{"pool-4k", pool_pairs, 4096},
                 {"malloc-4k", malloc_pairs, 4096},
                 {"pool-1m", pool_pairs, 1 << 20},
                 {"malloc-1m", malloc_pairs, 1 << 20}};
    for (size_t i = 0; i < HC_ARRAY_SIZE(cases); i++) {
        if (strcmp(name, cases[i].name)) continue;
        cases[i].fn(cases[i].size, 1000);
        double v[REPS];
        for (int r = 0; r < REPS; r++)
            v[r] = cases[i].fn(cases[i].size, ITERS);
        printf("%s: %.1f ns/pair (median of %d x %d pairs)\n", name, median(v, REPS), REPS, ITERS);
        return 0;
    }
    fprintf(stderr, "usage: mem_bench [pool-4k|malloc-4k|pool-1m|malloc-1m]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (hc_config_load() != HCOMM_OK || hc_mem_init() != HCOMM_OK) {
        fprintf(stderr, "init: %s\n", hc_error_last());
        return 1;
    }
    if (argc > 1) {
        int rc = run_one(argv[1]);
        hc_mem_finalize();
        return rc;
    }
    printf("ns per alloc+free pair, thread CPU time, median of %d runs of %d pairs\n", REPS, ITERS);
    /* The sizes and allocators take turns, so that a burst of load from
     * other tenants hits all of them alike. */
    const size_t sizes[] = {4096, 1 << 20};
    double p[2][REPS], m[2][REPS];
    for (size_t i = 0; i < 2; i++) {
        pool_pairs(sizes[i], 1000); /* warm: slabs carved, caches filled */
        malloc_pairs(sizes[i], 1000);
    }
    for (int r = 0; r < REPS; r++) {
        for (size_t i = 0; i < 2; i++) {
            p[i][r] = pool_pairs(sizes[i], ITERS);
            m[i][r] = malloc_pairs(sizes[i], ITERS);
        }
    }
    for (size_t i = 0; i < 2; i++) {
        double pm = median(p[i], REPS), mm = median(m[i], REPS);
        printf("%7zu B: pool %5.1f ns, malloc %5.1f ns  ->  RATIO malloc/pool %.1fx (goal >= "
               "5x)\n",
               sizes[i], pm, mm, mm / pm);
    }
    double one[REPS], two[REPS];
    for (int r = 0; r < REPS; r++) {
        one[r] = pool_pairs(4096, ITERS);
        pthread_t t[2];
        pthread_barrier_init(&start, NULL, 2);
        for (long i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, thread_run, (void *)i);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        pthread_barrier_destroy(&start);
        two[r] = HC_MAX(thread_ns[0], thread_ns[1]);
    }
    double om = median(one, REPS), tm = median(two, REPS);
    printf("4096 B, one class: 1 thread %5.1f ns, 2 threads %5.1f ns each (slower of the two) "
           " ->  RATIO 2T/1T %.2fx (goal <= 2x)\n",
           om, tm, tm / om);
    hc_mem_finalize();
    return 0;
}
