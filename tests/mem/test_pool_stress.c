/*
 * mem/pool.c under 4 threads: 1M+ alloc/free pairs across the size classes.
 * Each thread holds 128 blocks at a time (more than its cache keeps), stamps its id and a sequence
 * number at both ends of each block and checks the stamp before freeing: a
 * block handed to two owners at once shows up as a foreign stamp.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mem_test.h"

#include <pthread.h>

enum { NTHREADS = 4, PAIRS_PER_THREAD = 262144, HELD = 128 };

typedef struct {
    uint64_t owner, seq;
} stamp_t;

typedef struct {
    int id;
    long errors;
    char msg[160];
} worker_t;

static size_t size_for(uint64_t r)
{
    /* Mostly 64 B .. 64 KiB, so that each thread holds more blocks of a
     * class than its cache keeps and blocks travel between threads through
     * the shared lists; every 16th up to 1 MiB. */
    unsigned shift = (r >> 40) % 16 ? 6 + (unsigned)(r % 11) : 17 + (unsigned)(r % 4);
    return ((size_t)1 << shift) - (size_t)(r >> 20) % 32;
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    void *held[HELD] = {0};
    size_t held_size[HELD] = {0};
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(w->id + 1);
    for (uint64_t i = 0; i < PAIRS_PER_THREAD + HELD; i++) {
        unsigned slot = (unsigned)(i % HELD);
        if (held[slot]) {
            stamp_t head, tail; /* the tail stamp may be unaligned */
            memcpy(&head, held[slot], sizeof(head));
            memcpy(&tail, (char *)held[slot] + held_size[slot] - sizeof(tail), sizeof(tail));
            uint64_t seq = i - HELD;
            if (head.owner != (uint64_t)w->id || head.seq != seq || tail.owner != (uint64_t)w->id ||
                tail.seq != seq) {
                if (!w->errors++)
                    snprintf(w->msg, sizeof(w->msg),
                             "thread %d: block %p stamp %llu/%llu, expected %d/%llu", w->id,
                             held[slot], (unsigned long long)head.owner,
                             (unsigned long long)head.seq, w->id, (unsigned long long)seq);
            }
            if (hc_mem_free(held[slot]) != HCOMM_OK && !w->errors++)
                snprintf(w->msg, sizeof(w->msg), "free: %s", hc_error_last());
            held[slot] = NULL;
        }
        if (i >= PAIRS_PER_THREAD) continue;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        size_t sz = size_for(rng);
        if (sz < 2 * sizeof(stamp_t)) sz = 2 * sizeof(stamp_t);
        if (hc_mem_alloc(sz, &held[slot]) != HCOMM_OK) {
            if (!w->errors++) snprintf(w->msg, sizeof(w->msg), "alloc: %s", hc_error_last());
            held[slot] = NULL;
            continue;
        }
        held_size[slot] = sz;
        stamp_t st = {(uint64_t)w->id, i};
        memcpy(held[slot], &st, sizeof(st));
        memcpy((char *)held[slot] + sz - sizeof(st), &st, sizeof(st));
    }
    return NULL;
}

static void test_stress_4_threads(void **state)
{
    (void)state;
    setenv("HCOMM_MEM_POOL_INITIAL_SIZE", "16M", 1);
    setenv("HCOMM_MEM_POOL_MAX_SIZE", "256M", 1);
    mem_test_init();
    pthread_t t[NTHREADS];
    worker_t w[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].id = i + 1;
        assert_int_equal(pthread_create(&t[i], NULL, worker, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < NTHREADS; i++) {
        if (w[i].errors) fail_msg("%ld errors, first: %s", w[i].errors, w[i].msg);
    }
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    uint64_t allocs = 0, frees = 0, fallbacks = 0;
    for (unsigned c = 0; c < s.nclasses; c++) {
        allocs += s.cls[c].allocs;
        frees += s.cls[c].frees;
        fallbacks += s.cls[c].fallbacks;
        assert_int_equal(s.cls[c].in_use, 0);
    }
    assert_int_equal(allocs + fallbacks, (uint64_t)NTHREADS * PAIRS_PER_THREAD);
    assert_int_equal(frees + s.fallback_frees, allocs + fallbacks);
    assert_true(allocs >= 1000000);
    assert_int_equal(s.invalid_frees, 0);
    hc_mem_finalize();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress_4_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
