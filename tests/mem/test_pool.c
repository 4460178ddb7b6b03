/*
 * mem/pool.c: size classes, alloc/free, growth to HCOMM_MEM_POOL_MAX_SIZE and
 * the counted fallback past it, invalid and double frees, large requests,
 * and the O(1) lookup of pool / attached / fallback memory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mem_test.h"

#include <pthread.h>

static void check_classes(const char *bits, const size_t *want, unsigned nwant)
{
    mem_test_init_pool(bits, "4M", "64M");
    assert_int_equal(hc_mem_pool_nclasses(), nwant);
    for (unsigned i = 0; i < nwant; i++)
        assert_int_equal(hc_mem_pool_class_size(i), want[i]);
    /* Every request goes to the smallest class that holds it. */
    for (size_t b = 1; b <= ((size_t)4 << 20); b = b < 8192 ? b + 1 : b + b / 7 + 1) {
        unsigned c = hc_mem_pool_class_of(b);
        assert_true(hc_mem_pool_class_size(c) >= b);
        if (c > 0) assert_true(hc_mem_pool_class_size(c - 1) < b);
    }
    /* And alloc honours it: the block holds the request. */
    void *p;
    assert_int_equal(hc_mem_alloc(want[nwant - 1] - 100, &p), HCOMM_OK);
    memset(p, 1, want[nwant - 1] - 100);
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    assert_int_equal(s.cls[nwant - 1].allocs, 1);
    assert_int_equal(hc_mem_free(p), HCOMM_OK);
    hc_mem_finalize();
}

static void test_size_classes(void **state)
{
    (void)state;
    const size_t K = 1024;
    const size_t b1[] = {4 * K,   8 * K,   16 * K,   32 * K,   64 * K,  128 * K,
                         256 * K, 512 * K, 1024 * K, 2048 * K, 4096 * K};
    const size_t b2[] = {4 * K, 16 * K, 64 * K, 256 * K, 1024 * K, 4096 * K};
    const size_t b3[] = {4 * K, 32 * K, 256 * K, 2048 * K, 4096 * K};
    check_classes("1", b1, HC_ARRAY_SIZE(b1));
    check_classes("2", b2, HC_ARRAY_SIZE(b2));
    check_classes("3", b3, HC_ARRAY_SIZE(b3));
    assert_int_equal(hc_mem_pool_class_of(1), 0);
    assert_int_equal(hc_mem_pool_class_of(4096), 0);
    /* Bad knob: a clear error naming it. */
    setenv("HCOMM_MEM_POOL_BUCKET_BITS", "9", 1);
    assert_int_equal(hc_config_load(), HCOMM_OK);
    assert_int_equal(hc_mem_init(), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "HCOMM_MEM_POOL_BUCKET_BITS"));
    setenv("HCOMM_MEM_POOL_BUCKET_BITS", "2", 1);
}

/* The initial pool is capped by the node's share: HCOMM_MEM_POOL_NODE_
 * INITIAL_SIZE divided by the launcher's local size, whole hugepages, at
 * least one; no cap with one local rank, an unknown local size, or 0. */
static void check_initial(const char *initial, const char *node, int local, size_t want)
{
    setenv("HCOMM_MEM_POOL_NODE_INITIAL_SIZE", node, 1);
    hc_mem_set_local_size(local);
    mem_test_init_pool("2", initial, "512M");
    assert_int_equal(hc_mem_pool_initial_size(), want);
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    assert_int_equal(s.pool_bytes, want); /* what init mapped */
    hc_mem_finalize();
}

static void test_initial_node_share(void **state)
{
    (void)state;
    const size_t M = (size_t)1 << 20;
    setenv("HCOMM_HUGEPAGE_SIZE", "2M", 1);
    check_initial("64M", "512M", 8, 64 * M);  /* 512M / 8: the knob's 64M */
    check_initial("64M", "512M", 64, 8 * M);  /* the share caps it */
    check_initial("64M", "512M", 256, 2 * M); /* one hugepage */
    check_initial("64M", "512M", 1024, 2 * M); /* at least one */
    check_initial("64M", "600M", 64, 8 * M);  /* 9.375M: whole hugepages */
    check_initial("16M", "512M", 8, 16 * M);  /* the rank's own knob is lower */
    check_initial("64M", "0", 256, 64 * M);   /* no cap */
    check_initial("64M", "512M", -1, 64 * M); /* local size unknown */
    check_initial("64M", "512M", 1, 64 * M);
    check_initial("0", "512M", 64, 0);        /* no initial pool */
    hc_mem_set_local_size(0);
    unsetenv("HCOMM_MEM_POOL_NODE_INITIAL_SIZE");
}

static void test_alloc_free_basic(void **state)
{
    (void)state;
    mem_test_init_pool("2", "8M", "64M");
    void *p[64];
    for (int i = 0; i < 64; i++) {
        size_t sz = (size_t)1 << (6 + i % 17); /* 64 B .. 4 MiB */
        assert_int_equal(hc_mem_alloc(sz, &p[i]), HCOMM_OK);
        assert_int_equal((uintptr_t)p[i] % 64, 0);
        memset(p[i], i, sz);
        size_t off = 1;
        hc_mem_region_t *r = hc_mem_region_lookup(p[i], sz, &off);
        assert_non_null(r);
        assert_int_equal(r->kind, HC_MEM_KIND_POOL);
        assert_ptr_equal((char *)r->base + off, p[i]);
    }
    for (int i = 0; i < 64; i++)
        for (int j = i + 1; j < 64; j++)
            assert_ptr_not_equal(p[i], p[j]);
    for (int i = 0; i < 64; i++) {
        size_t sz = (size_t)1 << (6 + i % 17);
        assert_int_equal(((unsigned char *)p[i])[sz - 1], i);
        assert_int_equal(hc_mem_free(p[i]), HCOMM_OK);
    }
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    uint64_t allocs = 0, frees = 0, in_use = 0;
    for (unsigned c = 0; c < s.nclasses; c++) {
        allocs += s.cls[c].allocs;
        frees += s.cls[c].frees;
        in_use += s.cls[c].in_use;
    }
    assert_int_equal(allocs, 64);
    assert_int_equal(frees, 64);
    assert_int_equal(in_use, 0);
    /* Bad arguments. */
    assert_int_equal(hc_mem_alloc(0, &p[0]), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "bytes"));
    assert_int_equal(hc_mem_alloc(16, NULL), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "ptr_p"));
    assert_int_equal(hc_mem_free(NULL), HCOMM_OK);
}

static void test_growth_limit_fallback(void **state)
{
    (void)state;
    mem_test_init_pool("2", "2M", "16M");
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    assert_int_equal(s.pool_max, 16u << 20);
    assert_int_equal(s.pool_bytes, 2u << 20);
    unsigned c64 = hc_mem_pool_class_of(64 << 10);
    enum { N = 400 }; /* 25 MiB of 64 KiB blocks: more than the 16 MiB limit */
    void **p = calloc(N, sizeof(*p));
    size_t fallback_at = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(hc_mem_alloc(60000, &p[i]), HCOMM_OK);
        memset(p[i], 0x5a, 60000);
        size_t off;
        hc_mem_region_t *r = hc_mem_region_lookup(p[i], 60000, &off);
        assert_non_null(r);
        if (r->kind == HC_MEM_KIND_FALLBACK) {
            assert_int_equal(off, 0);
            if (!fallback_at) fallback_at = (size_t)i;
        } else {
            assert_int_equal(r->kind, HC_MEM_KIND_POOL);
            assert_int_equal(fallback_at, 0); /* no pool block once the pool is full */
        }
    }
    hc_mem_stats_get(&s);
    assert_int_equal(s.pool_bytes, 16u << 20); /* grew to the limit, not past it */
    /* 16 MiB of 64 KiB blocks is 256 blocks, all but the thread cache's. */
    assert_true(fallback_at >= 256 - 32 && fallback_at <= 256);
    assert_int_equal(s.cls[c64].fallbacks, N - fallback_at);
    assert_int_equal(s.cls[c64].allocs, fallback_at);
    assert_true(s.cls[c64].waits >= 1);
    assert_true(s.cls[c64].hwm >= fallback_at);
    assert_int_equal(s.cls[c64].bytes_huge + s.cls[c64].bytes_regular, 16u << 20);
    for (int i = 0; i < N; i++)
        assert_int_equal(hc_mem_free(p[i]), HCOMM_OK);
    hc_mem_stats_get(&s);
    assert_int_equal(s.fallback_frees, N - fallback_at);
    assert_int_equal(s.cls[c64].in_use, 0);
    /* Freed pool blocks are reused; nothing falls back now. */
    for (int i = 0; i < 200; i++)
        assert_int_equal(hc_mem_alloc(60000, &p[i]), HCOMM_OK);
    hc_mem_stats_get(&s);
    assert_int_equal(s.cls[c64].fallbacks, N - fallback_at);
    for (int i = 0; i < 200; i++)
        assert_int_equal(hc_mem_free(p[i]), HCOMM_OK);
    free(p);
}

static void test_invalid_double_free(void **state)
{
    (void)state;
    mem_test_init_pool("2", "8M", "64M");
    void *p, *q, *big;
    int on_stack;
    assert_int_equal(hc_mem_alloc(10000, &p), HCOMM_OK);
    assert_int_equal(hc_mem_alloc(10000, &q), HCOMM_OK);
    assert_int_equal(hc_mem_free((char *)p + 64), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "inside a block"));
    assert_int_equal(hc_mem_free(&on_stack), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "ptr"));
    void *m = malloc(100);
    assert_int_equal(hc_mem_free(m), HCOMM_ERR_INVALID);
    free(m);
    /* Pool memory never handed out (past the allocated blocks). */
    assert_int_equal(hc_mem_free(hc_mem_g.pool_base + (6u << 20)), HCOMM_ERR_INVALID);
    assert_int_equal(hc_mem_free(hc_mem_g.pool_base + hc_mem_g.pool_reserved - 4096),
                     HCOMM_ERR_INVALID);
    assert_int_equal(hc_mem_free(p), HCOMM_OK);
    assert_int_equal(hc_mem_free(p), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "already free"));
    /* The rejected double free did not put p on a list twice: two allocs of
     * the class return two different blocks. */
    void *a, *b;
    assert_int_equal(hc_mem_alloc(10000, &a), HCOMM_OK);
    assert_int_equal(hc_mem_alloc(10000, &b), HCOMM_OK);
    assert_ptr_not_equal(a, b);
    assert_ptr_not_equal(a, q);
    assert_ptr_not_equal(b, q);
    /* Large requests get their own region, freed once. */
    assert_int_equal(hc_mem_alloc((5u << 20) + 3, &big), HCOMM_OK);
    memset(big, 7, (5u << 20) + 3);
    size_t off;
    hc_mem_region_t *r = hc_mem_region_lookup((char *)big + 4096, 100, &off);
    assert_non_null(r);
    assert_int_equal(r->kind, HC_MEM_KIND_LARGE);
    assert_int_equal(off, 4096);
    assert_true(r->fd >= 0); /* shareable with local peers */
    assert_int_equal(hc_mem_free((char *)big + 4096), HCOMM_ERR_INVALID);
    assert_int_equal(hc_mem_free(big), HCOMM_OK);
    assert_int_equal(hc_mem_free(big), HCOMM_ERR_INVALID);
    assert_null(hc_mem_region_lookup(big, 1, NULL));
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    assert_int_equal(s.invalid_frees, 8);
    assert_int_equal(s.large_allocs, 1);
    assert_int_equal(s.large_frees, 1);
    assert_int_equal(hc_mem_free(a), HCOMM_OK);
    assert_int_equal(hc_mem_free(b), HCOMM_OK);
    assert_int_equal(hc_mem_free(q), HCOMM_OK);
}

/* Holds the sorted table's write lock: a lookup that needed it would hang
 * (and the test time out), so pool lookups must be lock-free. */
static pthread_barrier_t lk_barrier;
static void *hold_table_lock(void *arg)
{
    (void)arg;
    pthread_rwlock_wrlock(&hc_mem_g.rw);
    pthread_barrier_wait(&lk_barrier);
    pthread_barrier_wait(&lk_barrier);
    pthread_rwlock_unlock(&hc_mem_g.rw);
    return NULL;
}

static void test_lookup(void **state)
{
    (void)state;
    mem_test_init_pool("2", "8M", "8M");
    void *blocks[200];
    for (int i = 0; i < 200; i++)
        assert_int_equal(hc_mem_alloc(4096u << (2 * (i % 2)), &blocks[i]), HCOMM_OK);
    hc_mem_region_t *user, *att;
    assert_int_equal(hc_mem_region_create(1 << 20, HC_MEM_SHARED, -1, "lk", &user), HCOMM_OK);
    assert_int_equal(hc_mem_region_attach(user->fd, user->size, &att), HCOMM_OK);
    void *fb = NULL;
    for (int i = 0; i < 100 && !fb; i++) { /* exhaust the 8 MiB pool of 1 MiB blocks */
        void *x;
        assert_int_equal(hc_mem_alloc(1 << 20, &x), HCOMM_OK);
        if (hc_mem_region_lookup(x, 1, NULL)->kind == HC_MEM_KIND_FALLBACK) fb = x;
    }
    assert_non_null(fb);

    pthread_t t;
    pthread_barrier_init(&lk_barrier, NULL, 2);
    pthread_create(&t, NULL, hold_table_lock, NULL);
    pthread_barrier_wait(&lk_barrier);
    /* No cmocka assert while the lock is held: a failure must not leave the
     * helper holding it. */
    int bad = 0;
    for (int i = 0; i < 200; i++) {
        size_t off = 0;
        hc_mem_region_t *r = hc_mem_region_lookup((char *)blocks[i] + 100, 50, &off);
        if (!r || r->kind != HC_MEM_KIND_POOL || (char *)r->base + off != (char *)blocks[i] + 100 ||
            off + 50 > r->size)
            bad++;
    }
    pthread_barrier_wait(&lk_barrier);
    pthread_join(t, NULL);
    assert_int_equal(bad, 0);
    pthread_barrier_destroy(&lk_barrier);

    size_t off;
    assert_ptr_equal(hc_mem_region_lookup((char *)att->base + 777, 10, &off), att);
    assert_int_equal(off, 777);
    assert_ptr_equal(hc_mem_region_lookup((char *)user->base + 777, 10, &off), user);
    assert_ptr_equal(hc_mem_region_lookup((char *)fb + 5, 10, &off)->base, fb);
    assert_int_equal(off, 5);
    assert_null(hc_mem_region_lookup((char *)user->base + user->size - 4, 8, NULL));
    hc_mem_region_destroy(att);
    hc_mem_region_destroy(user);
    /* Everything else is reclaimed by finalize. */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_classes),
        cmocka_unit_test_teardown(test_alloc_free_basic, mem_test_teardown),
        cmocka_unit_test_teardown(test_growth_limit_fallback, mem_test_teardown),
        cmocka_unit_test_teardown(test_initial_node_share, mem_test_teardown),
        cmocka_unit_test_teardown(test_invalid_double_free, mem_test_teardown),
        cmocka_unit_test_teardown(test_lookup, mem_test_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
