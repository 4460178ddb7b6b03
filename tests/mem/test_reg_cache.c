/*
 * mem/reg_cache.c: hits, misses, page rounding, LRU eviction by entries and
 * by bytes, invalidate, and one registration / deregistration per record.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mem_test.h"

#include <sys/mman.h>

static int live, regs, deregs;

static hcomm_status_t reg(void *arg, hc_mem_region_t *r)
{
    (void)arg;
    regs++;
    live++;
    r->keys[0] = (uint64_t)(uintptr_t)r->base;
    return HCOMM_OK;
}

static void dereg(void *arg, hc_mem_region_t *r)
{
    (void)arg;
    (void)r;
    deregs++;
    live--;
}

static char *user_buf;
enum { PAGES = 64 };

static int setup(void **state)
{
    (void)state;
    setenv("HCOMM_REG_CACHE_MAX_ENTRIES", "4", 1);
    setenv("HCOMM_REG_CACHE_MAX_BYTES", "64K", 1);
    setenv("HCOMM_MEM_POOL_INITIAL_SIZE", "2M", 1);
    mem_test_init();
    hc_mem_set_reg_hooks(reg, dereg, NULL);
    live = regs = deregs = 0; /* the pool region's registration aside */
    user_buf = mmap(NULL, PAGES * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return user_buf == MAP_FAILED ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    hc_mem_finalize();
    munmap(user_buf, PAGES * 4096);
    return 0;
}

#define PAGE(i) (user_buf + (size_t)(i)*4096)

static hc_mem_stats_t stats(void)
{
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    return s;
}

static void test_hit_miss(void **state)
{
    (void)state;
    hc_mem_region_t *a, *b, *c;
    assert_int_equal(hc_mem_reg_cache_get(PAGE(0) + 100, 5000, &a), HCOMM_OK);
    /* Rounded out to whole pages: [page 0, page 2). */
    assert_ptr_equal(a->base, PAGE(0));
    assert_int_equal(a->size, 8192);
    assert_true(a->registered);
    assert_int_equal(a->keys[0], (uint64_t)(uintptr_t)PAGE(0));
    /* Inside it: a hit, same record, no new registration. */
    assert_int_equal(hc_mem_reg_cache_get(PAGE(1) + 8, 4000, &b), HCOMM_OK);
    assert_ptr_equal(a, b);
    /* Running past it: a miss. */
    assert_int_equal(hc_mem_reg_cache_get(PAGE(1), 4097, &c), HCOMM_OK);
    assert_ptr_not_equal(a, c);
    hc_mem_stats_t s = stats();
    assert_int_equal(s.cache_hits, 1);
    assert_int_equal(s.cache_misses, 2);
    assert_int_equal(s.cache_entries, 2);
    assert_int_equal(s.cache_bytes, 16384);
    assert_int_equal(regs, 2);
    /* Pool memory is not cached: its own region comes back. */
    void *p;
    assert_int_equal(hc_mem_alloc(1000, &p), HCOMM_OK);
    assert_int_equal(hc_mem_reg_cache_get(p, 1000, &c), HCOMM_OK);
    assert_int_equal(c->kind, HC_MEM_KIND_POOL);
    assert_int_equal(stats().cache_misses, 2);
    assert_int_equal(hc_mem_free(p), HCOMM_OK);
    /* Bad arguments. */
    assert_int_equal(hc_mem_reg_cache_get(NULL, 10, &c), HCOMM_ERR_INVALID);
    assert_int_equal(hc_mem_reg_cache_get(PAGE(0), 0, &c), HCOMM_ERR_INVALID);
    assert_int_equal(hc_mem_reg_cache_get(PAGE(0), 10, NULL), HCOMM_ERR_INVALID);
    assert_int_equal(hc_mem_reg_cache_get(PAGE(0), 65 * 1024, &c), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "HCOMM_REG_CACHE_MAX_BYTES"));
}

static void test_lru_eviction(void **state)
{
    (void)state;
    hc_mem_region_t *r[6];
    for (int i = 0; i < 4; i++) /* 4 one-page records: the entry limit */
        assert_int_equal(hc_mem_reg_cache_get(PAGE(2 * i), 10, &r[i]), HCOMM_OK);
    /* Touch record 0: record 1 becomes the least recently used. */
    assert_int_equal(hc_mem_reg_cache_get(PAGE(0), 10, &r[5]), HCOMM_OK);
    assert_ptr_equal(r[5], r[0]);
    assert_int_equal(hc_mem_reg_cache_get(PAGE(20), 10, &r[4]), HCOMM_OK);
    hc_mem_stats_t s = stats();
    assert_int_equal(s.cache_evictions, 1);
    assert_int_equal(s.cache_entries, 4);
    assert_int_equal(deregs, 1);
    /* 0, 2, 3 and 20 hit; 1 was evicted and misses. */
    uint64_t misses = s.cache_misses;
    hc_mem_region_t *x;
    assert_int_equal(hc_mem_reg_cache_get(PAGE(0), 10, &x), HCOMM_OK);
    assert_int_equal(hc_mem_reg_cache_get(PAGE(4), 10, &x), HCOMM_OK);
    assert_int_equal(hc_mem_reg_cache_get(PAGE(6), 10, &x), HCOMM_OK);
    assert_int_equal(hc_mem_reg_cache_get(PAGE(20), 10, &x), HCOMM_OK);
    assert_int_equal(stats().cache_misses, misses);
    assert_int_equal(hc_mem_reg_cache_get(PAGE(2), 10, &x), HCOMM_OK);
    assert_int_equal(stats().cache_misses, misses + 1);
    /* Bytes bound: a 60 KiB record leaves room for one 4 KiB record. */
    assert_int_equal(hc_mem_reg_cache_get(PAGE(30), 60 * 1024, &x), HCOMM_OK);
    s = stats();
    assert_true(s.cache_bytes <= 64 * 1024);
    assert_int_equal(s.cache_entries, 2);
    assert_int_equal(live, (int)s.cache_entries);
}

static void test_invalidate(void **state)
{
    (void)state;
    hc_mem_region_t *a, *b, *c, *x;
    assert_int_equal(hc_mem_reg_cache_get(PAGE(0), 8192, &a), HCOMM_OK);
    assert_int_equal(hc_mem_reg_cache_get(PAGE(4), 4096, &b), HCOMM_OK);
    assert_int_equal(hc_mem_reg_cache_get(PAGE(8), 4096, &c), HCOMM_OK);
    /* One byte of page 1 overlaps only the first record. */
    hc_mem_reg_cache_invalidate(PAGE(1) + 4095, 1);
    assert_int_equal(stats().cache_entries, 2);
    assert_int_equal(deregs, 1);
    /* Memory no record covers: nothing happens. */
    hc_mem_reg_cache_invalidate(PAGE(40), 4096);
    hc_mem_reg_cache_invalidate(NULL, 10);
    assert_int_equal(stats().cache_entries, 2);
    uint64_t misses = stats().cache_misses;
    assert_int_equal(hc_mem_reg_cache_get(PAGE(0), 10, &x), HCOMM_OK); /* re-registered */
    assert_int_equal(stats().cache_misses, misses + 1);
    hc_mem_reg_cache_invalidate(user_buf, PAGES * 4096);
    assert_int_equal(stats().cache_entries, 0);
    assert_int_equal(live, 0);
    assert_int_equal(regs, deregs);
    /* Changing the hooks flushes the cache (records were registered with the
     * old ones). */
    assert_int_equal(hc_mem_reg_cache_get(PAGE(0), 10, &x), HCOMM_OK);
    hc_mem_set_reg_hooks(NULL, NULL, NULL);
    assert_int_equal(stats().cache_entries, 0);
    assert_int_equal(live, -1); /* the pool region was registered before the counts were reset */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hit_miss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lru_eviction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalidate, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
