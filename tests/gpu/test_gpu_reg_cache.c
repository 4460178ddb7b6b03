/*
 * mem/reg_cache.c on device memory (GPUDirect RDMA, docs/gpu.md), on the
 * GPU model: a record covers the whole allocation and reaches the
 * registration hook with the memory type, the device and an open dmabuf fd
 * of it; a second get hits; a free retires the record at once (the GPU
 * layer's free listener) and a held one is deregistered at its put; with
 * the listener off, the allocation id alone keeps a re-used address from
 * finding the old record; bad ranges, managed memory and a device without
 * dmabuf export are refused by name.
 */
#include "gpu_test.h"
#include "mem/mem_test.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "gpu/model/gpu_model_test.h"

static int regs, deregs, live;
static hc_mem_type_t seen_type;
static int seen_device;
static size_t seen_fd_size;
static uint64_t seen_offset;

static hcomm_status_t reg(void *arg, hc_mem_region_t *r)
{
    (void)arg;
    if (r->kind != HC_MEM_KIND_CACHE) return HCOMM_OK;
    regs++;
    live++;
    seen_type = r->mem_type;
    seen_device = r->device;
    seen_offset = r->dmabuf_offset;
    struct stat sb;
    seen_fd_size =
        r->mem_type == HC_MEM_DEVICE && fstat(r->dmabuf_fd, &sb) == 0 ? (size_t)sb.st_size : 0;
    return HCOMM_OK;
}

static void dereg(void *arg, hc_mem_region_t *r)
{
    (void)arg;
    if (r->kind != HC_MEM_KIND_CACHE) return;
    deregs++;
    live--;
}

static int setup(void **state)
{
    (void)state;
    setenv("HCOMM_MEM_POOL_INITIAL_SIZE", "2M", 1);
    if (gpu_test_start("1", getenv("TEST_GPU_FAULT"), NULL) != HCOMM_OK) return -1;
    mem_test_init();
    hc_mem_set_reg_hooks(reg, dereg, NULL);
    regs = deregs = live = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    hc_mem_finalize();
    hc_gpu_fini();
    return 0;
}

static hc_mem_region_t *get_dev(void *p, size_t n)
{
    hc_mem_attr_t a = gpu_test_attr(p, n);
    hc_mem_region_t *r = NULL;
    assert_int_equal(hc_mem_reg_cache_get_typed(p, n, &a, &r), HCOMM_OK);
    return r;
}

static hc_mem_stats_t stats(void)
{
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    return s;
}

static void test_whole_allocation(void **state)
{
    (void)state;
    void *d;
    assert_int_equal(hc_gpu_model_test_alloc(3 * 4096 + 5, &d), HCOMM_OK);
    hc_mem_region_t *r = get_dev((char *)d + 100, 50);
    assert_int_equal(regs, 1);
    assert_int_equal(seen_type, HC_MEM_DEVICE);
    assert_int_equal(seen_device, 0);
    assert_int_equal(seen_offset, 0);
    assert_true(seen_fd_size >= 4 * 4096); /* the allocation's memfd */
    assert_ptr_equal(r->base, d);
    assert_int_equal(r->size, 3 * 4096 + 5); /* the allocation, as the GPU layer gives it */
    assert_int_equal(r->dmabuf_fd, -1);      /* open only while the hook ran */
    hc_mem_region_t *r2 = get_dev((char *)d + 4096, 4096);
    assert_ptr_equal(r2, r);
    assert_int_equal(regs, 1);
    assert_int_equal(stats().cache_hits, 1);
    hc_mem_reg_cache_put(r);
    hc_mem_reg_cache_put(r2);
    assert_int_equal(hc_gpu_model_test_free(d), HCOMM_OK);
}

static void test_free_retires(void **state)
{
    (void)state;
    void *d;
    assert_int_equal(hc_gpu_model_test_alloc(8192, &d), HCOMM_OK);
    hc_mem_reg_cache_put(get_dev(d, 8192)); /* cached, unreferenced */
    hc_mem_region_t *held = NULL;
    void *e;
    assert_int_equal(hc_gpu_model_test_alloc(8192, &e), HCOMM_OK);
    held = get_dev(e, 8192); /* referenced: a transfer in flight */
    assert_int_equal(stats().cache_entries, 2);
    assert_int_equal(hc_gpu_model_test_free(d), HCOMM_OK);
    assert_int_equal(hc_gpu_model_test_free(e), HCOMM_OK);
    assert_int_equal(stats().cache_entries, 0); /* both out of the cache at once */
    void *f;
    assert_int_equal(hc_gpu_model_test_alloc(8192, &f), HCOMM_OK);
    assert_true(f == d || f == e); /* the model re-uses the address */
    hc_mem_region_t *r = get_dev(f, 8192);
    assert_ptr_not_equal(r, held);
    assert_int_equal(regs, 3);
    assert_int_equal(deregs, 1); /* d's, drained; e's waits for its put */
    hc_mem_reg_cache_put(held);
    assert_int_equal(deregs, 2);
    hc_mem_reg_cache_put(r);
    assert_int_equal(hc_gpu_model_test_free(f), HCOMM_OK);
}

/* Without the free listener (a backend that cannot report frees), the
 * allocation id still tells a re-used address from the old one. */
static void test_alloc_id_alone(void **state)
{
    (void)state;
    void *d, *f;
    assert_int_equal(hc_gpu_model_test_alloc(8192, &d), HCOMM_OK);
    hc_mem_region_t *old = get_dev(d, 8192);
    hc_mem_reg_cache_put(old);
    void (*listener)(uintptr_t, size_t) = hc_gpu_free_listener;
    hc_gpu_free_listener = NULL;
    assert_int_equal(hc_gpu_model_test_free(d), HCOMM_OK);
    assert_int_equal(hc_gpu_model_test_alloc(8192, &f), HCOMM_OK);
    hc_gpu_free_listener = listener;
    assert_ptr_equal(f, d);
    assert_int_equal(stats().cache_entries, 1); /* the stale record is still there */
    hc_mem_region_t *r = get_dev(f, 8192);
    assert_ptr_not_equal(r, old);
    assert_int_equal(regs, 2);
    hc_mem_reg_cache_put(r);
    assert_int_equal(hc_gpu_model_test_free(f), HCOMM_OK);
}

static void test_refused(void **state)
{
    (void)state;
    void *d;
    assert_int_equal(hc_gpu_model_test_alloc(8192, &d), HCOMM_OK);
    hc_mem_attr_t a = gpu_test_attr(d, 8192);
    hc_mem_region_t *r = NULL;
    a.length = 4096; /* a range past the allocation the caller described */
    assert_int_equal(hc_mem_reg_cache_get_typed(d, 8192, &a, &r), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "outside its allocation");
    a = gpu_test_attr(d, 8192);
    a.type = HC_MEM_MANAGED;
    assert_int_equal(hc_mem_reg_cache_get_typed(d, 8192, &a, &r), HCOMM_ERR_UNSUPPORTED);
    gpu_test_contains(hc_error_last(), "managed");
    assert_int_equal(regs, 0);
    assert_int_equal(hc_gpu_model_test_free(d), HCOMM_OK);
}

static void test_no_dmabuf(void **state)
{
    (void)state;
    setenv("TEST_GPU_FAULT", "dmabuf", 1);
    teardown(state);
    assert_int_equal(setup(state), 0);
    void *d;
    assert_int_equal(hc_gpu_model_test_alloc(8192, &d), HCOMM_OK);
    hc_mem_attr_t a = gpu_test_attr(d, 8192);
    hc_mem_region_t *r = NULL;
    assert_int_equal(hc_mem_reg_cache_get_typed(d, 8192, &a, &r), HCOMM_ERR_UNSUPPORTED);
    gpu_test_contains(hc_error_last(), "device memory");
    gpu_test_contains(hc_error_last(), "no dmabuf export");
    assert_int_equal(regs, 0);
    assert_int_equal(hc_gpu_model_test_free(d), HCOMM_OK);
    unsetenv("TEST_GPU_FAULT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_whole_allocation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_retires, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_id_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_dmabuf, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
