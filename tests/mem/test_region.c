/*
 * mem/region.c: create (private/shared, hugepage fallback), attach in a
 * forked child, the region table lookup, registration hooks, bad arguments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mem_test.h"

#include <sys/wait.h>
#include <unistd.h>

static int setup(void **state)
{
    (void)state;
    mem_test_init();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    hc_mem_set_reg_hooks(NULL, NULL, NULL);
    hc_mem_finalize();
    return 0;
}

static void test_private_region(void **state)
{
    (void)state;
    hc_mem_region_t *r = NULL;
    hc_mem_stats_t before, after;
    hc_mem_stats_get(&before);
    assert_int_equal(hc_mem_region_create(100000, 0, -1, "t_private", &r), HCOMM_OK);
    assert_non_null(r);
    assert_true(r->size >= 100000);
    assert_int_equal(r->size % r->page_size, 0);
    assert_int_equal(r->fd, -1);
    assert_true(r->owner);
    memset(r->base, 0xab, r->size);
    size_t off = 0;
    assert_ptr_equal(hc_mem_region_lookup((char *)r->base + 1000, 16, &off), r);
    assert_int_equal(off, 1000);
    assert_ptr_equal(hc_mem_region_lookup(r->base, r->size, &off), r);
    assert_int_equal(off, 0);
    /* A range running past the end is not covered. */
    assert_null(hc_mem_region_lookup((char *)r->base + r->size - 8, 16, &off));
    /* The next byte may belong to a neighbouring mapping, never to r. */
    assert_ptr_not_equal(hc_mem_region_lookup((char *)r->base + r->size, 1, &off), r);
    hc_mem_stats_get(&after);
    assert_int_equal(after.regions_created, before.regions_created + 1);
    if (r->huge) {
        assert_int_equal(r->page_size, hc_mem_g.hugepage_size);
    } else {
        /* No hugepages here: the fallback must have been counted. */
        assert_true(after.huge_fallbacks > before.huge_fallbacks);
        assert_int_equal(r->page_size, (size_t)sysconf(_SC_PAGESIZE));
    }
    void *base = r->base;
    hc_mem_region_destroy(r);
    assert_null(hc_mem_region_lookup(base, 1, NULL));
}

static void test_shared_region_fork_attach(void **state)
{
    (void)state;
    hc_mem_region_t *r = NULL;
    assert_int_equal(hc_mem_region_create(3 << 20, HC_MEM_SHARED, -1, "t_shared", &r), HCOMM_OK);
    assert_true(r->fd >= 0);
    uint32_t *w = r->base;
    size_t n = r->size / sizeof(*w);
    for (size_t i = 0; i < n; i++)
        w[i] = (uint32_t)(i * 2654435761u);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The child sees the parent's mapping too (fork); attach maps the
         * memfd a second time, as a peer process would. */
        hc_mem_region_t *a = NULL;
        if (hc_mem_region_attach(r->fd, r->size, &a) != HCOMM_OK) _exit(2);
        if (a->base == r->base || a->owner || a->size != r->size) _exit(3);
        const uint32_t *rw = a->base;
        for (size_t i = 0; i < n; i++)
            if (rw[i] != (uint32_t)(i * 2654435761u)) _exit(4);
        size_t off;
        if (hc_mem_region_lookup((char *)a->base + 64, 64, &off) != a || off != 64) _exit(5);
        ((uint32_t *)a->base)[7] = 0xc0ffee;
        hc_mem_region_destroy(a);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The child's write through its own mapping reached ours. */
    assert_int_equal(w[7], 0xc0ffee);
    hc_mem_region_destroy(r);
}

static void test_attach_bad_args(void **state)
{
    (void)state;
    hc_mem_region_t *r = NULL, *a = NULL;
    assert_int_equal(hc_mem_region_attach(-1, 4096, &a), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "fd"));
    assert_int_equal(hc_mem_region_create(1 << 20, HC_MEM_SHARED, -1, "t_att", &r), HCOMM_OK);
    assert_int_equal(hc_mem_region_attach(r->fd, r->size + 1, &a), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "size"));
    assert_int_equal(hc_mem_region_attach(r->fd, r->size, NULL), HCOMM_ERR_INVALID);
    assert_null(a);
    /* Attached in the same process: a second, distinct mapping of the same
     * pages, found by lookup. */
    assert_int_equal(hc_mem_region_attach(r->fd, r->size, &a), HCOMM_OK);
    assert_ptr_not_equal(a->base, r->base);
    ((char *)r->base)[123] = 'x';
    assert_int_equal(((char *)a->base)[123], 'x');
    size_t off;
    assert_ptr_equal(hc_mem_region_lookup((char *)a->base + 5, 10, &off), a);
    assert_int_equal(off, 5);
    hc_mem_region_destroy(a);
    hc_mem_region_destroy(r);
}

static void test_create_bad_args(void **state)
{
    (void)state;
    hc_mem_region_t *r = NULL;
    assert_int_equal(hc_mem_region_create(0, 0, -1, "x", &r), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "size"));
    assert_int_equal(hc_mem_region_create(4096, 0x100, -1, "x", &r), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "flags"));
    assert_int_equal(hc_mem_region_create(4096, 0, 4096, "x", &r), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "numa_node"));
    assert_int_equal(hc_mem_region_create(4096, 0, -2, "x", &r), HCOMM_ERR_INVALID);
    assert_int_equal(hc_mem_region_create(4096, 0, -1, "x", NULL), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "region_p"));
    assert_null(r);
    assert_null(hc_mem_region_lookup(&r, 1, NULL));
}

/* ---- registration hooks ---- */
typedef struct {
    int regs, deregs, fail_next;
    hc_mem_region_t *seen[64];
    int seen_count[64];
    int nseen;
} hook_log_t;

static int hook_index(hook_log_t *h, hc_mem_region_t *r)
{
    for (int i = 0; i < h->nseen; i++)
        if (h->seen[i] == r) return i;
    h->seen[h->nseen] = r;
    h->seen_count[h->nseen] = 0;
    return h->nseen++;
}

static hcomm_status_t hook_reg(void *arg, hc_mem_region_t *r)
{
    hook_log_t *h = arg;
    if (h->fail_next) {
        h->fail_next = 0;
        return hc_error(HCOMM_ERR_IO, "test: registration refused");
    }
    h->regs++;
    h->seen_count[hook_index(h, r)]++;
    r->keys[0] = 0x1000 + (uint64_t)r->id;
    return HCOMM_OK;
}

static void hook_dereg(void *arg, hc_mem_region_t *r)
{
    hook_log_t *h = arg;
    h->deregs++;
    h->seen_count[hook_index(h, r)]--;
}

static void test_reg_hooks(void **state)
{
    (void)state;
    hook_log_t h = {0};
    hc_mem_region_t *early = NULL, *r1 = NULL, *r2 = NULL, *noreg = NULL, *bad = NULL;
    assert_int_equal(hc_mem_region_create(1 << 20, 0, -1, "early", &early), HCOMM_OK);
    assert_false(early->registered);
    /* Installing the hooks registers what exists. */
    hc_mem_set_reg_hooks(hook_reg, hook_dereg, &h);
    int base_regs = h.regs;
    assert_true(base_regs >= 1);
    assert_true(early->registered);
    assert_int_equal(early->keys[0], 0x1000 + (uint64_t)early->id);
    assert_int_equal(h.seen_count[hook_index(&h, early)], 1);

    assert_int_equal(hc_mem_region_create(1 << 20, 0, -1, "r1", &r1), HCOMM_OK);
    assert_int_equal(hc_mem_region_create(1 << 20, HC_MEM_SHARED, -1, "r2", &r2), HCOMM_OK);
    assert_int_equal(hc_mem_region_create(1 << 20, HC_MEM_NO_REG, -1, "noreg", &noreg), HCOMM_OK);
    assert_int_equal(h.regs, base_regs + 2); /* once per region, not for NO_REG */
    assert_int_equal(h.seen_count[hook_index(&h, r1)], 1);
    assert_int_equal(h.seen_count[hook_index(&h, r2)], 1);
    assert_false(noreg->registered);

    /* A refused registration fails the create and leaves nothing behind. */
    h.fail_next = 1;
    assert_int_equal(hc_mem_region_create(1 << 20, 0, -1, "bad", &bad), HCOMM_ERR_IO);
    assert_null(bad);

    int deregs = h.deregs;
    hc_mem_region_destroy(r1);
    assert_int_equal(h.deregs, deregs + 1);
    hc_mem_region_destroy(noreg);
    assert_int_equal(h.deregs, deregs + 1);

    /* Removing the hooks deregisters everything still registered, once. */
    hc_mem_set_reg_hooks(NULL, NULL, NULL);
    assert_int_equal(h.seen_count[hook_index(&h, early)], 0);
    assert_int_equal(h.seen_count[hook_index(&h, r2)], 0);
    assert_false(r2->registered);
    hc_mem_region_destroy(r2);
    hc_mem_region_destroy(early);
    assert_int_equal(h.regs, h.deregs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_private_region, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_region_fork_attach, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attach_bad_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_bad_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reg_hooks, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
