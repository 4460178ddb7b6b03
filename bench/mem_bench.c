/*
 * mem_bench: pool alloc+free vs glibc malloc+free, ns per pair.
 *   - one thread, 4 KiB and 1 MiB (the block is touched once, as a user
 *     would, so that malloc cannot hand back untouched memory for free)
 *   - two threads on one class vs one thread
 * Uses mem/'s internal API: bench/CMakeLists.txt links it against the
 * library objects rather than the public libhcomm.
 */

#include "core/config.h"
#include "mem/mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { ITERS = 2000000 };

static double pool_pairs(size_t size, long iters)
{
    uint64_t t0 = hc_time_ns();
    for (long i = 0; i < iters; i++) {
        void *p;
        if (hc_mem_alloc(size, &p) != HCOMM_OK) {
            fprintf(stderr, "hc_mem_alloc: %s\n", hc_error_last());
            exit(1);
        }
        *(volatile char *)p = 1;
        hc_mem_free(p);
    }
    return (double)(hc_time_ns() - t0) / (double)iters;
}

static double malloc_pairs(size_t size, long iters)
{
    uint64_t t0 = hc_time_ns();
    for (long i = 0; i < iters; i++) {
        void *p = malloc(size);
        if (!p) exit(1);
        *(volatile char *)p = 1;
        free(p);
    }
    return (double)(hc_time_ns() - t0) / (double)iters;
}

static double thread_ns[2];
static void *thread_run(void *arg)
{
    long i = (long)arg;
    thread_ns[i] = pool_pairs(4096, ITERS);
    return NULL;
}

int main(void)
{
    if (hc_config_load() != HCOMM_OK || hc_mem_init() != HCOMM_OK) {
        fprintf(stderr, "init: %s\n", hc_error_last());
        return 1;
    }
    const size_t sizes[] = {4096, 1 << 20};
    for (size_t i = 0; i < 2; i++) {
        pool_pairs(sizes[i], 1000); /* warm: slabs carved, caches filled */
        malloc_pairs(sizes[i], 1000);
        double p = pool_pairs(sizes[i], ITERS);
        double m = malloc_pairs(sizes[i], ITERS);
        printf("%7zu B: pool %.1f ns/pair, malloc %.1f ns/pair, pool %.1fx faster\n", sizes[i], p,
               m, m / p);
    }
    double one = pool_pairs(4096, ITERS);
    pthread_t t[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, thread_run, (void *)i);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    double two = (thread_ns[0] + thread_ns[1]) / 2;
    printf("4096 B, one class: 1 thread %.1f ns/pair, 2 threads %.1f ns/pair each (%.2fx)\n", one,
           two, two / one);
    hc_mem_finalize();
    return 0;
}
