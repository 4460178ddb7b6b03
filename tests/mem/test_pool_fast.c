/*
 * mem/pool.c fast paths: the per-thread slot and class arrays, the per-block
 * state lines and the counters derived from them. Double and interior frees
 * are rejected wherever the block sits (slot, class array, shared list, other
 * thread's cache), with a message naming the pointer; a stale thread cache
 * (previous init cycle) is noticed by both fast paths; a thread's slot block
 * goes back to the pool when the thread exits; blocks handed between threads
 * are counted once. Also run under TSan (label tsan).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mem_test.h"

#include <pthread.h>

/* hc_mem_free(p) fails with ERR_INVALID, the message names p and says why. */
static void expect_rejected(void *p, const char *why)
{
    char name[32];
    snprintf(name, sizeof(name), "%p", p);
    assert_int_equal(hc_mem_free(p), HCOMM_ERR_INVALID);
    const char *msg = hc_error_last();
    if (!strstr(msg, name) || !strstr(msg, why))
        fail_msg("free(%s): message \"%s\" lacks \"%s\"", name, msg, why);
}

static void class_totals(unsigned c, uint64_t *allocs, uint64_t *frees, uint64_t *in_use)
{
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    *allocs = s.cls[c].allocs;
    *frees = s.cls[c].frees;
    *in_use = s.cls[c].in_use;
}

static void test_double_free_everywhere(void **state)
{
    (void)state;
    mem_test_init_pool("2", "8M", "64M");
    unsigned c4 = hc_mem_pool_class_of(4096), c16 = hc_mem_pool_class_of(16384);
    void *p, *q, *r[40];
    assert_int_equal(hc_mem_alloc(4096, &p), HCOMM_OK);
    assert_int_equal(hc_mem_free(p), HCOMM_OK); /* p is in the slot */
    expect_rejected(p, "already free");
    assert_int_equal(hc_mem_alloc(16384, &q), HCOMM_OK);
    assert_int_equal(hc_mem_free(q), HCOMM_OK); /* q in the slot, p in its class array */
    expect_rejected(p, "already free");
    expect_rejected(q, "already free");
    /* Enough blocks of one class to overflow the thread's array: some of
     * them go back to the shared list. Each is still rejected a second time. */
    for (int i = 0; i < 40; i++)
        assert_int_equal(hc_mem_alloc(4000, &r[i]), HCOMM_OK);
    for (int i = 0; i < 40; i++)
        assert_int_equal(hc_mem_free(r[i]), HCOMM_OK);
    for (int i = 0; i < 40; i++)
        expect_rejected(r[i], "already free");
    /* The rejected frees put nothing on a list twice: 41 live blocks of the
     * class are 41 different blocks. */
    void *live[41];
    for (int i = 0; i < 41; i++) {
        assert_int_equal(hc_mem_alloc(4096, &live[i]), HCOMM_OK);
        for (int j = 0; j < i; j++)
            assert_ptr_not_equal(live[i], live[j]);
    }
    uint64_t allocs, frees, in_use;
    class_totals(c4, &allocs, &frees, &in_use);
    assert_int_equal(allocs, 1 + 40 + 41);
    assert_int_equal(in_use, 41);
    assert_int_equal(frees, allocs - in_use);
    class_totals(c16, &allocs, &frees, &in_use);
    assert_int_equal(allocs, 1);
    assert_int_equal(frees, 1);
    for (int i = 0; i < 41; i++)
        assert_int_equal(hc_mem_free(live[i]), HCOMM_OK);
    class_totals(c4, &allocs, &frees, &in_use);
    assert_int_equal(in_use, 0);
    assert_int_equal(frees, allocs);
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    assert_int_equal(s.invalid_frees, 2 + 1 + 40);
}

static void test_interior_and_foreign(void **state)
{
    (void)state;
    mem_test_init_pool("2", "8M", "64M");
    void *p, *big;
    assert_int_equal(hc_mem_alloc(16384, &p), HCOMM_OK);
    assert_int_equal(hc_mem_alloc(1 << 20, &big), HCOMM_OK);
    /* Page-aligned interior pointers look like block starts to the fast
     * path's alignment test: the state line says otherwise. */
    expect_rejected((char *)p + 4096, "inside a block");
    expect_rejected((char *)p + 12288, "inside a block");
    expect_rejected((char *)p + 1, "inside a block");
    expect_rejected((char *)big + (7 << 12), "inside a block");
    expect_rejected((char *)big + (1 << 19), "inside a block");
    /* Pool range, never carved; past the range; not ours at all. */
    expect_rejected(hc_mem_g.pool_base + (7u << 20), "not in any block");
    expect_rejected(hc_mem_g.pool_base + hc_mem_g.pool_reserved, "not returned by hc_mem_alloc");
    int on_stack;
    expect_rejected(&on_stack, "not returned by hc_mem_alloc");
    /* Nothing was freed by the rejections. */
    assert_int_equal(hc_mem_free(p), HCOMM_OK);
    assert_int_equal(hc_mem_free(big), HCOMM_OK);
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    assert_int_equal(s.invalid_frees, 8);
}

/* ---- blocks handed between threads -------------------------------------- */

enum { HANDOFF_N = 20000, RING = 64 };

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void *ring[RING];
    unsigned head, tail;
    bool done;
} hq = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void hq_put(void *p)
{
    pthread_mutex_lock(&hq.mu);
    while (hq.tail - hq.head == RING)
        pthread_cond_wait(&hq.cv, &hq.mu);
    hq.ring[hq.tail++ % RING] = p;
    pthread_cond_broadcast(&hq.cv);
    pthread_mutex_unlock(&hq.mu);
}

static void *hq_get(void)
{
    pthread_mutex_lock(&hq.mu);
    while (hq.tail == hq.head && !hq.done)
        pthread_cond_wait(&hq.cv, &hq.mu);
    void *p = hq.tail == hq.head ? NULL : hq.ring[hq.head++ % RING];
    pthread_cond_broadcast(&hq.cv);
    pthread_mutex_unlock(&hq.mu);
    return p;
}

/* Allocates blocks of every class, writes them, hands them over; also runs
 * alloc+free pairs of its own on the same classes. */
static void *producer(void *arg)
{
    long *errors = arg;
    for (unsigned i = 0; i < HANDOFF_N; i++) {
        void *p, *own;
        size_t sz = (size_t)4096 << (2 * (i % 5));
        if (hc_mem_alloc(sz, &p) != HCOMM_OK || hc_mem_alloc(sz, &own) != HCOMM_OK) {
            (*errors)++;
            continue;
        }
        memset(p, (int)(i & 0xff), 64);
        memset(own, 0, 64);
        if (hc_mem_free(own) != HCOMM_OK) (*errors)++;
        hq_put(p);
    }
    pthread_mutex_lock(&hq.mu);
    hq.done = true;
    pthread_cond_broadcast(&hq.cv);
    pthread_mutex_unlock(&hq.mu);
    return NULL;
}

static void *consumer(void *arg)
{
    long *errors = arg;
    unsigned i = 0;
    for (void *p; (p = hq_get()); i++) {
        if (((unsigned char *)p)[63] != (i & 0xff)) (*errors)++;
        if (hc_mem_free(p) != HCOMM_OK) (*errors)++;
        /* Ordered after the first free (same thread): always caught. */
        if (i % 64 == 0 && hc_mem_free(p) != HCOMM_ERR_INVALID) (*errors)++;
    }
    return NULL;
}

static void test_handoff_between_threads(void **state)
{
    (void)state;
    mem_test_init_pool("2", "16M", "128M");
    hq.head = hq.tail = 0;
    hq.done = false;
    long perr = 0, cerr = 0;
    pthread_t pt, ct;
    assert_int_equal(pthread_create(&ct, NULL, consumer, &cerr), 0);
    assert_int_equal(pthread_create(&pt, NULL, producer, &perr), 0);
    pthread_join(pt, NULL);
    pthread_join(ct, NULL);
    assert_int_equal(perr, 0);
    assert_int_equal(cerr, 0);
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    uint64_t allocs = 0, frees = 0;
    for (unsigned c = 0; c < s.nclasses; c++) {
        allocs += s.cls[c].allocs + s.cls[c].fallbacks;
        frees += s.cls[c].frees;
        assert_int_equal(s.cls[c].in_use, 0);
    }
    assert_int_equal(allocs, 2 * HANDOFF_N);
    assert_int_equal(frees + s.fallback_frees, 2 * HANDOFF_N);
    assert_int_equal(s.invalid_frees, (HANDOFF_N + 63) / 64);
}

/* ---- a thread cache across finalize / init ------------------------------ */

static pthread_barrier_t cyc;
static void *cycle_block;
static long cycle_errors;

static void *cycle_thread(void *arg)
{
    (void)arg;
    void *p;
    /* Cycle 1: a cache whose slot was used and is empty again (the block
     * stays allocated; finalize takes the pool). */
    if (hc_mem_alloc(4096, &p) != HCOMM_OK || hc_mem_free(p) != HCOMM_OK ||
        hc_mem_alloc(4096, &p) != HCOMM_OK)
        cycle_errors++;
    pthread_barrier_wait(&cyc); /* main: finalize, init, alloc cycle_block */
    pthread_barrier_wait(&cyc);
    /* Cycle 2, stale cache: the free must not park the block in it. */
    if (hc_mem_free(cycle_block) != HCOMM_OK) cycle_errors++;
    if (hc_mem_free(cycle_block) != HCOMM_ERR_INVALID) cycle_errors++;
    for (int i = 0; i < 100; i++) {
        if (hc_mem_alloc(4096, &p) != HCOMM_OK || hc_mem_free(p) != HCOMM_OK) cycle_errors++;
    }
    pthread_barrier_wait(&cyc); /* main: stats */
    pthread_barrier_wait(&cyc); /* main: finalize; this thread exits with a stale cache */
    return NULL;
}

static void test_stale_cache_across_cycles(void **state)
{
    (void)state;
    mem_test_init_pool("2", "4M", "32M");
    pthread_t t;
    cycle_errors = 0;
    pthread_barrier_init(&cyc, NULL, 2);
    assert_int_equal(pthread_create(&t, NULL, cycle_thread, NULL), 0);
    pthread_barrier_wait(&cyc);
    hc_mem_finalize();
    mem_test_init_pool("2", "4M", "32M");
    assert_int_equal(hc_mem_alloc(4096, &cycle_block), HCOMM_OK);
    pthread_barrier_wait(&cyc);
    pthread_barrier_wait(&cyc);
    unsigned c4 = hc_mem_pool_class_of(4096);
    uint64_t allocs, frees, in_use;
    class_totals(c4, &allocs, &frees, &in_use);
    assert_int_equal(allocs, 1 + 100);
    assert_int_equal(in_use, 0);
    assert_int_equal(frees, 101);
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    assert_int_equal(s.invalid_frees, 1);
    hc_mem_finalize();
    pthread_barrier_wait(&cyc);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&cyc);
    assert_int_equal(cycle_errors, 0);
    /* And this thread's own cache, stale since the finalize above. */
    mem_test_init_pool("2", "4M", "32M");
    void *p;
    assert_int_equal(hc_mem_alloc(100, &p), HCOMM_OK);
    assert_int_equal(hc_mem_free(p), HCOMM_OK);
    class_totals(c4, &allocs, &frees, &in_use);
    assert_int_equal(allocs, 1);
    assert_int_equal(frees, 1);
}

/* ---- a thread's slot goes back at exit ---------------------------------- */

static void *one_pair(void *arg)
{
    void *p;
    if (hc_mem_alloc(4u << 20, &p) != HCOMM_OK || hc_mem_free(p) != HCOMM_OK) *(long *)arg = 1;
    return NULL; /* p stays in this thread's slot until the thread exits */
}

static void test_slot_returned_at_exit(void **state)
{
    (void)state;
    /* 8 MiB: room for exactly two 4 MiB blocks. */
    mem_test_init_pool("2", "8M", "8M");
    long err = 0;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, one_pair, &err), 0);
    pthread_join(t, NULL);
    assert_int_equal(err, 0);
    void *a, *b;
    assert_int_equal(hc_mem_alloc(4u << 20, &a), HCOMM_OK);
    assert_int_equal(hc_mem_alloc(4u << 20, &b), HCOMM_OK);
    assert_int_equal(hc_mem_region_lookup(a, 1, NULL)->kind, HC_MEM_KIND_POOL);
    assert_int_equal(hc_mem_region_lookup(b, 1, NULL)->kind, HC_MEM_KIND_POOL);
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    unsigned c = hc_mem_pool_class_of(4u << 20);
    assert_int_equal(s.cls[c].fallbacks, 0);
    assert_int_equal(s.cls[c].allocs, 3); /* the exited thread's count is kept */
    assert_int_equal(s.cls[c].in_use, 2);
    assert_int_equal(hc_mem_free(a), HCOMM_OK);
    assert_int_equal(hc_mem_free(b), HCOMM_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_double_free_everywhere, mem_test_teardown),
        cmocka_unit_test_teardown(test_interior_and_foreign, mem_test_teardown),
        cmocka_unit_test_teardown(test_handoff_between_threads, mem_test_teardown),
        cmocka_unit_test_teardown(test_stale_cache_across_cycles, mem_test_teardown),
        cmocka_unit_test_teardown(test_slot_returned_at_exit, mem_test_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
