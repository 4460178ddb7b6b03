/*
 * mem/mem_hooks.c with mem/reg_cache.c: memory given back to the system and
 * mapped again must not hit the old registration. Each test caches a range,
 * makes it go away behind the cache's back (munmap, mmap MAP_FIXED, madvise,
 * mremap, shmdt, free/realloc of a glibc-mmapped chunk, sbrk/brk, a
 * dlopen'ed object's munmap), and checks that the record left the cache and that the next get
 * is a new registration. With HCOMM_MEM_HOOKS=0 the same MAP_FIXED is not
 * seen: the hooks are what detects it.
 *
 * Built a second time as a module (HC_TEST_UNMAP_MODULE) that the dlopen test
 * loads once the hooks are in.
 */
#ifdef HC_TEST_UNMAP_MODULE

#include <sys/mman.h>

int hc_test_module_munmap(void *addr, size_t len);
int hc_test_module_munmap(void *addr, size_t len)
{
    return munmap(addr, len);
}

#else

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mem_test.h"
#include "mem/mem_hooks.h"

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

static int regs, deregs;

static hcomm_status_t reg(void *arg, hc_mem_region_t *r)
{
    (void)arg;
    if (r->kind == HC_MEM_KIND_CACHE) regs++;
    return HCOMM_OK;
}

static void dereg(void *arg, hc_mem_region_t *r)
{
    (void)arg;
    if (r->kind == HC_MEM_KIND_CACHE) deregs++;
}

enum { LEN = 16 * 4096 };

static int setup_with(const char *hooks)
{
    setenv("HCOMM_REG_CACHE_MAX_ENTRIES", "64", 1);
    setenv("HCOMM_REG_CACHE_MAX_BYTES", "256M", 1);
    setenv("HCOMM_MEM_POOL_INITIAL_SIZE", "2M", 1);
    setenv("HCOMM_MEM_HOOKS", hooks, 1);
    mem_test_init();
    hc_mem_set_reg_hooks(reg, dereg, NULL);
    regs = deregs = 0;
    return 0;
}

static int setup(void **state)
{
    (void)state;
    return setup_with("1");
}

static int setup_no_hooks(void **state)
{
    (void)state;
    return setup_with("0");
}

static int teardown(void **state)
{
    (void)state;
    hc_mem_finalize();
    unsetenv("HCOMM_MEM_HOOKS");
    return 0;
}

static hc_mem_stats_t stats(void)
{
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    return s;
}

static char *map(void *at, size_t len)
{
    char *p = mmap(at, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
    assert_true(p != MAP_FAILED);
    if (at) assert_ptr_equal(p, at);
    p[0] = 1;
    return p;
}

/* Caches [p, p+len) and drops the reference: one more registration. */
static void cache(const void *p, size_t len)
{
    hc_mem_region_t *r;
    int before = regs;
    assert_int_equal(hc_mem_reg_cache_get(p, len, &r), HCOMM_OK);
    assert_int_equal(regs, before + 1);
    assert_int_equal(r->kind, HC_MEM_KIND_CACHE);
    hc_mem_reg_cache_put(r);
}

/* The next get of [p, p+len) is a new registration, not a hit. */
static void assert_miss(const void *p, size_t len)
{
    hc_mem_region_t *r;
    int before = regs;
    uint64_t hits = stats().cache_hits;
    assert_int_equal(hc_mem_reg_cache_get(p, len, &r), HCOMM_OK);
    assert_int_equal(regs, before + 1);
    assert_int_equal(stats().cache_hits, hits);
    hc_mem_reg_cache_put(r);
}

static void test_installed(void **state)
{
    (void)state;
    char *p = map(NULL, LEN);
    cache(p, LEN);
    assert_true(hc_mem_hooks_slots() > 0);
    /* An unrelated unmap leaves the record alone. */
    char *q = map(NULL, LEN);
    assert_int_equal(munmap(q, LEN), 0);
    assert_int_equal(stats().cache_entries, 1);
    assert_int_equal(munmap(p, LEN), 0);
    assert_int_equal(stats().cache_entries, 0);
}

/* The case: munmap, a new anonymous mapping at the same address. */
static void test_munmap_then_map_fixed(void **state)
{
    (void)state;
    char *p = map(NULL, LEN);
    cache(p, LEN);
    assert_int_equal(munmap(p, LEN), 0);
    assert_int_equal(stats().cache_entries, 0);
    map(p, LEN);
    assert_miss(p, LEN);
    assert_int_equal(deregs, 1); /* the old record, deregistered by that get */
    munmap(p, LEN);
}

static void test_map_fixed_over_live(void **state)
{
    (void)state;
    char *p = map(NULL, LEN);
    cache(p + 4096, 4096);
    map(p, LEN);
    assert_int_equal(stats().cache_entries, 0);
    assert_miss(p + 4096, 4096);
    munmap(p, LEN);
}

static void test_madvise_dontneed(void **state)
{
    (void)state;
    char *p = map(NULL, LEN);
    cache(p, LEN);
    assert_int_equal(madvise(p + LEN - 4096, 4096, MADV_WILLNEED), 0); /* harmless advice */
    assert_int_equal(stats().cache_entries, 1);
    assert_int_equal(madvise(p + LEN - 4096, 4096, MADV_DONTNEED), 0);
    assert_int_equal(stats().cache_entries, 0);
    assert_miss(p, LEN);
    munmap(p, LEN);
}

static void test_mremap(void **state)
{
    (void)state;
    char *p = map(NULL, LEN);
    cache(p, LEN);
    char *q = mremap(p, LEN, 4 * LEN, MREMAP_MAYMOVE);
    assert_true(q != MAP_FAILED);
    assert_int_equal(stats().cache_entries, 0);
    munmap(q, 4 * LEN);
}

/* A record referenced while its memory goes stays valid for its holder and
 * is deregistered by the put; a new get meanwhile misses. */
static void test_munmap_while_referenced(void **state)
{
    (void)state;
    char *p = map(NULL, LEN);
    hc_mem_region_t *r;
    assert_int_equal(hc_mem_reg_cache_get(p, LEN, &r), HCOMM_OK);
    assert_int_equal(munmap(p, LEN), 0);
    assert_int_equal(stats().cache_entries, 0);
    map(p, LEN);
    assert_miss(p, LEN);
    assert_int_equal(deregs, 0);
    hc_mem_reg_cache_put(r);
    assert_int_equal(deregs, 1);
    munmap(p, LEN);
}

static void test_shmdt(void **state)
{
    (void)state;
    int id = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600);
    if (id < 0) skip();
    char *p = shmat(id, NULL, 0);
    shmctl(id, IPC_RMID, NULL);
    assert_true(p != (void *)-1);
    p[0] = 1;
    cache(p + 4096, 100);
    assert_int_equal(shmdt(p), 0);
    assert_int_equal(stats().cache_entries, 0);
}

/* glibc serves 64 MiB with its own mmap and frees it with an internal
 * munmap: the free wrapper reads the chunk header. The second malloc often
 * returns the same address. */
static void test_malloc_free_64m(void **state)
{
    (void)state;
    size_t len = (size_t)64 << 20;
    char *p = malloc(len);
    assert_non_null(p);
    memset(p, 1, 4096);
    cache(p, len);
    free(p);
    assert_int_equal(stats().cache_entries, 0);
    char *q = malloc(len);
    assert_non_null(q);
    memset(q, 2, 4096);
    assert_miss(q, len);
    free(q);
    assert_int_equal(stats().cache_entries, 0);
}

static void test_realloc_mmapped(void **state)
{
    (void)state;
    size_t len = (size_t)8 << 20;
    char *p = malloc(len);
    assert_non_null(p);
    memset(p, 1, 4096);
    cache(p, len);
    char *q = realloc(p, 2 * len);
    assert_non_null(q);
    assert_int_equal(stats().cache_entries, 0);
    free(q);
}

/* The program break moved down by hand (sbrk, then brk). Only where nothing
 * else moved it meanwhile: the heap above the old break is glibc's. */
static void test_sbrk_brk(void **state)
{
    (void)state;
    char *p = sbrk(0);
    if (sbrk(LEN) != p) skip();
    memset(p, 1, LEN);
    cache(p, LEN);
    if ((char *)sbrk(0) != p + LEN) skip();
    assert_true(sbrk(-(intptr_t)(LEN / 2)) != (void *)-1);
    assert_int_equal(stats().cache_entries, 0);
    cache(p, LEN / 2);
    if ((char *)sbrk(0) != p + LEN / 2) skip();
    assert_int_equal(brk(p), 0);
    assert_int_equal(stats().cache_entries, 0);
}

/* Threads caching, unmapping and freeing at once: no deadlock between the
 * wrappers and the cache, every record deregistered in the end. */
static atomic_int churn_failures;

static void *churn(void *arg)
{
    bool heap = arg != NULL;
    for (int i = 0; i < 300; i++) {
        hc_mem_region_t *r, *h;
        char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED || hc_mem_reg_cache_get(p, LEN, &r) != HCOMM_OK) {
            atomic_fetch_add(&churn_failures, 1);
            break;
        }
        if (i % 3 == 0) munmap(p, LEN); /* while referenced */
        hc_mem_reg_cache_put(r);
        if (i % 3 != 0) munmap(p, LEN);
        if (heap) {
            char *m = malloc((size_t)1 << 20);
            if (!m || hc_mem_reg_cache_get(m, (size_t)1 << 20, &h) != HCOMM_OK) {
                atomic_fetch_add(&churn_failures, 1);
                free(m);
                break;
            }
            free(m);
            hc_mem_reg_cache_put(h);
        }
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, i < 2 ? (void *)1 : NULL), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&churn_failures), 0);
    assert_int_equal(stats().cache_entries, 0);
    hc_mem_finalize();
    assert_int_equal(regs, deregs);
}

/* An object loaded after the hooks went in is patched at the next get. */
static void test_dlopen(void **state)
{
    (void)state;
    char *p = map(NULL, LEN), *q = map(NULL, LEN);
    cache(p, LEN); /* the hooks are in */
    unsigned slots = hc_mem_hooks_slots();
    void *mod = dlopen(HC_TEST_MODULE, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(mod);
    int (*mod_munmap)(void *, size_t) =
        (int (*)(void *, size_t))dlsym(mod, "hc_test_module_munmap");
    assert_non_null(mod_munmap);
    cache(q, LEN); /* re-walks: the module's munmap slot is patched */
    assert_true(hc_mem_hooks_slots() > slots);
    assert_int_equal(mod_munmap(q, LEN), 0);
    assert_int_equal(stats().cache_entries, 1);
    assert_int_equal(mod_munmap(p, LEN), 0);
    assert_int_equal(stats().cache_entries, 0);
    dlclose(mod);
}

/* HCOMM_MEM_HOOKS=0: the MAP_FIXED replacement is not seen (a stale hit);
 * hcomm_mem_deregister's invalidate is what protects the cache then. */
static void test_hooks_off(void **state)
{
    (void)state;
    char *p = map(NULL, LEN);
    cache(p, LEN);
    map(p, LEN);
    assert_int_equal(stats().cache_entries, 1);
    hc_mem_region_t *r;
    int before = regs;
    assert_int_equal(hc_mem_reg_cache_get(p, LEN, &r), HCOMM_OK);
    assert_int_equal(regs, before);
    assert_int_equal(stats().cache_hits, 1);
    hc_mem_reg_cache_put(r);
    hc_mem_reg_cache_invalidate(p, LEN);
    assert_miss(p, LEN);
    /* free of a glibc-mmapped chunk is not followed either. */
    size_t len = (size_t)64 << 20;
    char *m = malloc(len);
    assert_non_null(m);
    memset(m, 1, 4096);
    cache(m, len);
    free(m);
    assert_int_equal(stats().cache_entries, 2); /* stale until finalize */
    munmap(p, LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_installed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_munmap_then_map_fixed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_fixed_over_live, setup, teardown),
        cmocka_unit_test_setup_teardown(test_madvise_dontneed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mremap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_munmap_while_referenced, setup, teardown),
        /* Off in the middle: the tests after it prove the hooks come back. */
        cmocka_unit_test_setup_teardown(test_hooks_off, setup_no_hooks, teardown),
        cmocka_unit_test_setup_teardown(test_shmdt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malloc_free_64m, setup, teardown),
        cmocka_unit_test_setup_teardown(test_realloc_mmapped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sbrk_brk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dlopen, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
