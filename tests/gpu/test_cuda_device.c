/*
 * The cuda backend on a real GPU (tests/gpu/run.sh runs it there; anywhere
 * else it prints "skipped: no GPU: <why>" and exits 77, which ctest counts
 * as skipped, never as passed). Through the GPU layer's dispatch and the
 * backend's table:
 *  - memory types: device, managed, registered host, plain host; the cache
 *    drops a freed allocation (a new allocation id after a free);
 *  - copies host->device->device->host, 0 B to 64 MiB + 3, exact;
 *  - every dtype x op reduced on the device (aligned: the 16-byte path;
 *    misaligned by one element: the element path; past the grid), device
 *    into device and host into device, equal bit for bit to the host
 *    reference hc_reduce_scalar, with NaNs, +-0 and infinities among the
 *    inputs for the float types;
 *  - stream memory ops: a stream held by wait_value32 on a registered host
 *    word until the host writes it; write_value32 lands in stream order;
 *  - dmabuf: an fd for a device range where the device supports it.
 */
#include "gpu_test.h"
#include "base/dtype.h"
#include "base/reduce.h"

#include <math.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static const hc_gpu_ops_t *ops;

static void *dev_alloc(size_t n)
{
    void *p = NULL;
    assert_int_equal(ops->alloc(0, n, HC_MEM_DEVICE, &p), HCOMM_OK);
    return p;
}

static hc_mem_attr_t attr_of(const void *p, size_t n)
{
    return gpu_test_attr(p, n);
}

static void put(void *d, const void *h, size_t n)
{
    hc_mem_attr_t a = attr_of(d, n);
    assert_int_equal(hc_gpu_copy(d, &a, h, NULL, n), HCOMM_OK);
}

static void get(void *h, const void *d, size_t n)
{
    hc_mem_attr_t a = attr_of(d, n);
    assert_int_equal(hc_gpu_copy(h, NULL, d, &a, n), HCOMM_OK);
}

static void test_types(void **state)
{
    (void)state;
    char *d = dev_alloc(1 << 20);
    hc_mem_attr_t a = attr_of(d + 100, 1000);
    assert_int_equal(a.type, HC_MEM_DEVICE);
    assert_int_equal(a.device, 0);
    assert_true(a.base == (uintptr_t)d && a.length >= (1 << 20));
    uint64_t id = a.alloc_id;
    assert_int_not_equal(id, 0);
    hc_mem_attr_t bad;
    assert_int_equal(hc_gpu_mem_type(d + 100, (size_t)4 << 20, &bad), HCOMM_ERR_INVALID);
    assert_int_equal(ops->free(d), HCOMM_OK);
    char *d2 = dev_alloc(1 << 20);
    assert_int_not_equal(attr_of(d2, 8).alloc_id, id);
    assert_int_equal(ops->free(d2), HCOMM_OK);
    void *m = NULL;
    assert_int_equal(ops->alloc(0, 1 << 16, HC_MEM_MANAGED, &m), HCOMM_OK);
    assert_int_equal(attr_of(m, 64).type, HC_MEM_MANAGED);
    assert_int_equal(ops->free(m), HCOMM_OK);
    int x = 3;
    assert_int_equal(attr_of(&x, sizeof(x)).type, HC_MEM_HOST);
}

static void test_copies(void **state)
{
    (void)state;
    size_t sizes[] = {0, 1, 7, 4096, 65537, ((size_t)64 << 20) + 3};
    size_t most = sizes[5];
    unsigned char *h = malloc(most), *back = malloc(most);
    char *d1 = dev_alloc(most), *d2 = dev_alloc(most);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        gpu_test_random(h, n, (unsigned)i + 1);
        memset(back, 0xa5, most);
        put(d1, h, n);
        hc_mem_attr_t a1 = attr_of(d1, most), a2 = attr_of(d2, most);
        assert_int_equal(hc_gpu_copy(d2, &a2, d1, &a1, n), HCOMM_OK);
        get(back, d2, n);
        assert_memory_equal(back, h, n);
    }
    assert_int_equal(ops->free(d1), HCOMM_OK);
    assert_int_equal(ops->free(d2), HCOMM_OK);
    free(h);
    free(back);
}

/* Random bytes, with float specials sprinkled in for the float types. */
static void fill(void *p, size_t count, hcomm_dtype_t dt, unsigned seed)
{
    size_t es = hc_dtype_size(dt);
    gpu_test_random(p, count * es, seed);
    for (size_t i = 0; i < count; i += 97) {
        unsigned k = (unsigned)(i / 97 + seed) % 5;
        if (dt == HCOMM_FLOAT32) {
            float v[] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY};
            memcpy((char *)p + i * es, &v[k], es);
        } else if (dt == HCOMM_FLOAT64) {
            double v[] = {NAN, -0.0, 0.0, INFINITY, -INFINITY};
            memcpy((char *)p + i * es, &v[k], es);
        } else if (dt == HCOMM_FLOAT16 || dt == HCOMM_BFLOAT16) {
            uint16_t h16[] = {0x7e01, 0x8000, 0x0000, 0x7c00, 0xfc00};
            uint16_t b16[] = {0x7fc1, 0x8000, 0x0000, 0x7f80, 0xff80};
            memcpy((char *)p + i * es, dt == HCOMM_FLOAT16 ? &h16[k] : &b16[k], es);
        }
    }
}

static void test_reductions(void **state)
{
    (void)state;
    enum { N = 300007 }; /* odd: a tail after the 16-byte steps */
    size_t most = (size_t)N * 8 + 16;
    unsigned char *a = malloc(most), *b = malloc(most), *ref = malloc(most), *out = malloc(most);
    char *da = dev_alloc(most), *db = dev_alloc(most);
    int checked = 0;
    for (int dt = 0; dt < HCOMM_DTYPE_COUNT; dt++)
        for (int op = 0; op < HCOMM_OP_COUNT; op++)
            for (int shift = 0; shift < 2; shift++) {
                hcomm_dtype_t t = (hcomm_dtype_t)dt;
                size_t es = hc_dtype_size(t), off = shift * es;
                int avg_div = op == HCOMM_AVG ? 3 : 0;
                fill(a, N, t, (unsigned)(dt * 131 + op * 7 + shift));
                fill(b, N, t, (unsigned)(dt * 17 + op * 3 + shift + 1000));
                const void *in[2] = {a, b};
                hc_reduce_scalar(ref, in, 2, N, t, (hcomm_op_t)op, avg_div);
                /* device into device */
                put(da + off, a, N * es);
                put(db + off, b, N * es);
                hc_mem_attr_t aa = attr_of(da, most), ab = attr_of(db, most);
                assert_int_equal(
                    hc_gpu_reduce(da + off, &aa, db + off, &ab, N, t, (hcomm_op_t)op, avg_div),
                    HCOMM_OK);
                get(out, da + off, N * es);
                if (memcmp(out, ref, N * es))
                    fail_msg("device %s %s (offset %zu) differs from the host reference",
                             hc_dtype_name(t), hc_op_name((hcomm_op_t)op), off);
                /* host into device (through the device scratch) */
                put(da + off, a, N * es);
                assert_int_equal(
                    hc_gpu_reduce(da + off, &aa, b, NULL, N, t, (hcomm_op_t)op, avg_div), HCOMM_OK);
                get(out, da + off, N * es);
                if (memcmp(out, ref, N * es))
                    fail_msg("host->device %s %s differs", hc_dtype_name(t),
                             hc_op_name((hcomm_op_t)op));
                checked++;
            }
    printf("  %d dtype x op x alignment cases equal to the host reference\n", checked);
    assert_int_equal(ops->free(da), HCOMM_OK);
    assert_int_equal(ops->free(db), HCOMM_OK);
    free(a);
    free(b);
    free(ref);
    free(out);
}

static void test_memops(void **state)
{
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint32_t *words = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(words != MAP_FAILED);
    assert_int_equal(ops->host_register(words, page), HCOMM_OK);
    hc_mem_attr_t ha = attr_of(words, 8);
    assert_int_equal(ha.type, HC_MEM_HOST);
    assert_true(ha.base == (uintptr_t)words);
    hc_gpu_stream_t s;
    hc_gpu_event_t e;
    assert_int_equal(ops->stream_create(0, &s), HCOMM_OK);
    assert_int_equal(ops->event_create(&e), HCOMM_OK);
    assert_int_equal(ops->event_query(e), HCOMM_OK); /* never recorded */
    __atomic_store_n(&words[0], 0, __ATOMIC_SEQ_CST);
    words[1] = 0;
    assert_int_equal(ops->wait_value32(s, &words[0], 5), HCOMM_OK);
    assert_int_equal(ops->write_value32(s, &words[1], 77), HCOMM_OK);
    assert_int_equal(ops->event_record(e, s), HCOMM_OK);
    usleep(200000);
    assert_int_equal(ops->event_query(e), HCOMM_IN_PROGRESS);
    assert_int_equal(__atomic_load_n(&words[1], __ATOMIC_SEQ_CST), 0);
    __atomic_store_n(&words[0], 6, __ATOMIC_SEQ_CST); /* GEQ: 6 >= 5 */
    uint64_t deadline = hc_time_ns() + 10000000000ull;
    hcomm_status_t st;
    while ((st = ops->event_query(e)) == HCOMM_IN_PROGRESS && hc_time_ns() < deadline)
        usleep(100);
    assert_int_equal(st, HCOMM_OK);
    assert_int_equal(__atomic_load_n(&words[1], __ATOMIC_SEQ_CST), 77);
    assert_int_equal(ops->event_destroy(e), HCOMM_OK);
    assert_int_equal(ops->stream_destroy(s), HCOMM_OK);
    assert_int_equal(ops->host_unregister(words), HCOMM_OK);
    munmap(words, page);
}

static void test_dmabuf(void **state)
{
    (void)state;
    size_t n = (size_t)2 << 20;
    char *d = dev_alloc(n);
    int fd = -1;
    uint64_t off = 0;
    hcomm_status_t st = ops->dmabuf_fd(d + 4096, 8192, &fd, &off);
    if (st == HCOMM_ERR_UNSUPPORTED || st == HCOMM_ERR_IO) {
        printf("  dmabuf: not here: %s\n", hc_error_last());
    } else {
        assert_int_equal(st, HCOMM_OK);
        off_t size = lseek(fd, 0, SEEK_END);
        printf("  dmabuf: fd %d, %lld bytes, offset %llu\n", fd, (long long)size,
               (unsigned long long)off);
        assert_true(size >= (off_t)(off + 8192));
        close(fd);
    }
    assert_int_equal(ops->free(d), HCOMM_OK);
}

int main(void)
{
    unsetenv("HCOMM_GPU_MODEL");
    setenv("HCOMM_GPU", "cuda", 1);
    if (hc_gpu_init() != HCOMM_OK) {
        printf("skipped: no GPU: %s\n", hc_error_last());
        return 77;
    }
    ops = hc_gpu_backend();
    char line[1024];
    hc_gpu_describe(line, sizeof(line));
    printf("%s\n", line);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),      cmocka_unit_test(test_copies),
        cmocka_unit_test(test_reductions), cmocka_unit_test(test_memops),
        cmocka_unit_test(test_dmabuf),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    hc_gpu_fini();
    return rc;
}
