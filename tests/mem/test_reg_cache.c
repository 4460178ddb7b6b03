/*
 * mem/reg_cache.c: hits, misses, page rounding, references (get/put), LRU
 * eviction by entries and by bytes that skips referenced records,
 * invalidate and flush deferred while a record is referenced, private
 * registrations (oversize, or no room), finalize with references held, and
 * one registration / deregistration per record. (Memory given back to the
 * system behind the cache's back: test_reg_cache_hooks.c.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mem_test.h"

#include <sys/mman.h>

/* Registrations of cache records seen by the fake driver (pool regions are
 * counted apart). */
static int live, regs, deregs, other_regs, other_deregs;

static hcomm_status_t reg(void *arg, hc_mem_region_t *r)
{
    (void)arg;
    if (r->kind != HC_MEM_KIND_CACHE) {
        other_regs++;
        return HCOMM_OK;
    }
    regs++;
    live++;
    r->keys[0] = (uint64_t)(uintptr_t)r->base;
    return HCOMM_OK;
}

static void dereg(void *arg, hc_mem_region_t *r)
{
    (void)arg;
    if (r->kind != HC_MEM_KIND_CACHE) {
        other_deregs++;
        return;
    }
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
    live = regs = deregs = other_regs = other_deregs = 0;
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

/* get that must succeed. */
static hc_mem_region_t *get(const void *ptr, size_t len)
{
    hc_mem_region_t *r = NULL;
    assert_int_equal(hc_mem_reg_cache_get(ptr, len, &r), HCOMM_OK);
    assert_non_null(r);
    return r;
}

static void test_hit_miss(void **state)
{
    (void)state;
    hc_mem_region_t *a = get(PAGE(0) + 100, 5000);
    /* Rounded out to whole pages: [page 0, page 2). */
    assert_ptr_equal(a->base, PAGE(0));
    assert_int_equal(a->size, 8192);
    assert_true(a->registered);
    assert_true(a->flags & HC_MEM_USER);
    assert_int_equal(a->keys[0], (uint64_t)(uintptr_t)PAGE(0));
    /* Inside it: a hit, same record, no new registration. */
    hc_mem_region_t *b = get(PAGE(1) + 8, 4000);
    assert_ptr_equal(a, b);
    /* Running past it: a miss. */
    hc_mem_region_t *c = get(PAGE(1), 4097);
    assert_ptr_not_equal(a, c);
    hc_mem_stats_t s = stats();
    assert_int_equal(s.cache_hits, 1);
    assert_int_equal(s.cache_misses, 2);
    assert_int_equal(s.cache_entries, 2);
    assert_int_equal(s.cache_bytes, 16384);
    assert_int_equal(regs, 2);
    hc_mem_reg_cache_put(a);
    hc_mem_reg_cache_put(b);
    hc_mem_reg_cache_put(c);
    assert_int_equal(deregs, 0); /* unreferenced records stay cached */
    /* Pool memory is not cached: its own region comes back, and its put does
     * nothing. */
    void *p;
    assert_int_equal(hc_mem_alloc(1000, &p), HCOMM_OK);
    c = get(p, 1000);
    assert_int_equal(c->kind, HC_MEM_KIND_POOL);
    hc_mem_reg_cache_put(c);
    hc_mem_reg_cache_put(NULL);
    assert_int_equal(stats().cache_misses, 2);
    assert_int_equal(hc_mem_free(p), HCOMM_OK);
    /* Bad arguments. */
    assert_int_equal(hc_mem_reg_cache_get(NULL, 10, &c), HCOMM_ERR_INVALID);
    assert_int_equal(hc_mem_reg_cache_get(PAGE(0), 0, &c), HCOMM_ERR_INVALID);
    assert_int_equal(hc_mem_reg_cache_get(PAGE(0), 10, NULL), HCOMM_ERR_INVALID);
    assert_int_equal(hc_mem_reg_cache_get((void *)(UINTPTR_MAX - 10), 100, &c), HCOMM_ERR_INVALID);
}

static void test_lru_eviction(void **state)
{
    (void)state;
    hc_mem_region_t *r[6];
    for (int i = 0; i < 4; i++) /* 4 one-page records: the entry limit */
        hc_mem_reg_cache_put(r[i] = get(PAGE(2 * i), 10));
    /* Touch record 0: record 1 becomes the least recently used. */
    r[5] = get(PAGE(0), 10);
    assert_ptr_equal(r[5], r[0]);
    hc_mem_reg_cache_put(r[5]);
    hc_mem_reg_cache_put(r[4] = get(PAGE(20), 10));
    hc_mem_stats_t s = stats();
    assert_int_equal(s.cache_evictions, 1);
    assert_int_equal(s.cache_entries, 4);
    assert_int_equal(deregs, 1);
    /* 0, 2, 3 and 20 hit; 1 was evicted and misses. */
    uint64_t misses = s.cache_misses;
    hc_mem_reg_cache_put(get(PAGE(0), 10));
    hc_mem_reg_cache_put(get(PAGE(4), 10));
    hc_mem_reg_cache_put(get(PAGE(6), 10));
    hc_mem_reg_cache_put(get(PAGE(20), 10));
    assert_int_equal(stats().cache_misses, misses);
    hc_mem_reg_cache_put(get(PAGE(2), 10));
    assert_int_equal(stats().cache_misses, misses + 1);
    /* Bytes bound: a 60 KiB record leaves room for one 4 KiB record. */
    hc_mem_reg_cache_put(get(PAGE(30), 60 * 1024));
    s = stats();
    assert_true(s.cache_bytes <= 64 * 1024);
    assert_int_equal(s.cache_entries, 2);
    assert_int_equal(live, (int)s.cache_entries);
    assert_int_equal(s.cache_uncached, 0);
}

/* Eviction takes the least recently used record without references; when
 * none is left the new registration is private (the cache keeps its bound). */
static void test_evict_skips_referenced(void **state)
{
    (void)state;
    hc_mem_region_t *r[4];
    for (int i = 0; i < 4; i++)
        r[i] = get(PAGE(2 * i), 10);
    for (int i = 1; i < 4; i++)
        hc_mem_reg_cache_put(r[i]);
    /* r[0] is the least recently used but referenced: r[1] goes. */
    hc_mem_region_t *x = get(PAGE(20), 10);
    assert_int_equal(deregs, 1);
    assert_int_equal(stats().cache_evictions, 1);
    hc_mem_region_t *again = get(PAGE(0), 10);
    assert_ptr_equal(again, r[0]);
    hc_mem_reg_cache_put(again);
    assert_true(r[0]->registered);
    /* Reference every cached record: no room, so a private registration. */
    hc_mem_region_t *h2 = get(PAGE(4), 10), *h3 = get(PAGE(6), 10);
    uint64_t evictions = stats().cache_evictions;
    hc_mem_region_t *p = get(PAGE(40), 10);
    hc_mem_stats_t s = stats();
    assert_int_equal(s.cache_entries, 4);
    assert_int_equal(s.cache_uncached, 1);
    assert_int_equal(s.cache_evictions, evictions);
    assert_true(p->registered);
    assert_int_equal(p->kind, HC_MEM_KIND_CACHE);
    /* Not found by a later get: another private registration. */
    int before = regs;
    hc_mem_region_t *p2 = get(PAGE(40), 10);
    assert_ptr_not_equal(p, p2);
    assert_int_equal(regs, before + 1);
    int d = deregs;
    hc_mem_reg_cache_put(p);
    hc_mem_reg_cache_put(p2);
    assert_int_equal(deregs, d + 2);
    hc_mem_reg_cache_put(r[0]);
    hc_mem_reg_cache_put(x);
    hc_mem_reg_cache_put(h2);
    hc_mem_reg_cache_put(h3);
    assert_int_equal(stats().cache_entries, 4);
    assert_int_equal(live, 4);
}

/* get twice, put twice; invalidate while referenced defers the dereg to the
 * last put, and a new get misses meanwhile. */
static void test_refcount(void **state)
{
    (void)state;
    hc_mem_region_t *a = get(PAGE(0), 4096), *b = get(PAGE(0) + 10, 20);
    assert_ptr_equal(a, b);
    assert_int_equal(regs, 1);
    hc_mem_reg_cache_put(b);
    hc_mem_reg_cache_invalidate(PAGE(0), 4096);
    assert_int_equal(stats().cache_entries, 0);
    assert_int_equal(deregs, 0); /* a still holds it */
    assert_true(a->registered);
    assert_int_equal(a->keys[0], (uint64_t)(uintptr_t)PAGE(0));
    hc_mem_region_t *c = get(PAGE(0), 4096);
    assert_ptr_not_equal(c, a);
    assert_int_equal(regs, 2);
    hc_mem_reg_cache_put(a); /* the last reference: deregistered now */
    assert_int_equal(deregs, 1);
    hc_mem_reg_cache_put(c);
    assert_int_equal(deregs, 1); /* c stays cached */
    /* An unreferenced record goes at once. */
    hc_mem_reg_cache_invalidate(PAGE(0), 1);
    assert_int_equal(deregs, 2);
    assert_int_equal(live, 0);
}

static void test_invalidate(void **state)
{
    (void)state;
    hc_mem_reg_cache_put(get(PAGE(0), 8192));
    hc_mem_reg_cache_put(get(PAGE(4), 4096));
    hc_mem_reg_cache_put(get(PAGE(8), 4096));
    /* One byte of page 1 overlaps only the first record. */
    hc_mem_reg_cache_invalidate(PAGE(1) + 4095, 1);
    assert_int_equal(stats().cache_entries, 2);
    assert_int_equal(deregs, 1);
    /* Memory no record covers: nothing happens. */
    hc_mem_reg_cache_invalidate(PAGE(40), 4096);
    hc_mem_reg_cache_invalidate(NULL, 10);
    assert_int_equal(stats().cache_entries, 2);
    uint64_t misses = stats().cache_misses;
    hc_mem_reg_cache_put(get(PAGE(0), 10)); /* re-registered */
    assert_int_equal(stats().cache_misses, misses + 1);
    hc_mem_reg_cache_invalidate(user_buf, PAGES * 4096);
    assert_int_equal(stats().cache_entries, 0);
    assert_int_equal(live, 0);
    assert_int_equal(regs, deregs);
    /* Changing the hooks flushes the cache (records were registered with the
     * old ones). */
    hc_mem_reg_cache_put(get(PAGE(0), 10));
    hc_mem_set_reg_hooks(NULL, NULL, NULL);
    assert_int_equal(stats().cache_entries, 0);
    assert_int_equal(live, 0);
}

/* A record referenced while the hooks change leaves the cache; its last put
 * does not call the new hooks with keys the old ones made. */
static void test_hooks_change_referenced(void **state)
{
    (void)state;
    hc_mem_region_t *a = get(PAGE(0), 10);
    hc_mem_set_reg_hooks(reg, dereg, &live); /* new hooks (another arg) */
    assert_int_equal(stats().cache_entries, 0);
    assert_int_equal(deregs, 0);
    assert_true(a->registered); /* keys valid until the put */
    hc_mem_reg_cache_put(a);
    assert_int_equal(deregs, 0);
    /* The new hooks register what comes next. */
    hc_mem_region_t *b = get(PAGE(0), 10);
    assert_int_equal(regs, 2);
    hc_mem_reg_cache_put(b);
    hc_mem_reg_cache_invalidate(PAGE(0), 10);
    assert_int_equal(deregs, 1);
}

/* A range over HCOMM_REG_CACHE_MAX_BYTES is registered for one use. */
static void test_oversize(void **state)
{
    (void)state;
    hc_mem_region_t *a = get(PAGE(0), 65 * 1024);
    assert_true(a->registered);
    assert_ptr_equal(a->base, PAGE(0));
    assert_int_equal(a->size, 68 * 1024);
    hc_mem_region_t *b = get(PAGE(0), 65 * 1024);
    assert_ptr_not_equal(a, b);
    assert_int_equal(regs, 2);
    hc_mem_stats_t s = stats();
    assert_int_equal(s.cache_uncached, 2);
    assert_int_equal(s.cache_entries, 0);
    assert_int_equal(s.cache_misses, 0);
    hc_mem_reg_cache_put(a);
    assert_int_equal(deregs, 1);
    hc_mem_reg_cache_put(b);
    assert_int_equal(deregs, 2);
    assert_int_equal(stats().cache_entries, 0);
    /* A cached record inside it is no help either: still private. */
    hc_mem_reg_cache_put(get(PAGE(0), 10));
    hc_mem_reg_cache_put(get(PAGE(0), 65 * 1024));
    assert_int_equal(stats().cache_uncached, 3);
    assert_int_equal(live, 1);
}

/* Finalize deregisters records still referenced (and warns); their put
 * afterwards frees them without calling a hook. */
static void test_finalize_referenced(void **state)
{
    (void)state;
    hc_mem_region_t *a = get(PAGE(0), 10), *b = get(PAGE(4), 65 * 1024);
    hc_mem_region_t *c = get(PAGE(2), 10);
    hc_mem_reg_cache_invalidate(PAGE(2), 1); /* c: dead, referenced */
    assert_int_equal(deregs, 0);
    hc_mem_finalize();
    assert_int_equal(deregs, 3);
    assert_int_equal(live, 0);
    assert_false(a->registered);
    assert_false(b->registered);
    assert_false(c->registered);
    hc_mem_reg_cache_put(a);
    hc_mem_reg_cache_put(b);
    hc_mem_reg_cache_put(c);
    assert_int_equal(deregs, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hit_miss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lru_eviction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_evict_skips_referenced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refcount, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalidate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hooks_change_referenced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_finalize_referenced, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
