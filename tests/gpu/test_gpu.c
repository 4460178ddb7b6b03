/*
 * gpu/gpu.c without a backend (every build): every buffer is host memory,
 * the dispatch is memcpy and base/reduce's kernels, bad knobs and bad
 * arguments are refused by name; where the model is not built in,
 * HCOMM_GPU_MODEL=1 is refused naming why.
 */
#include "gpu_test.h"

#include "base/dtype.h"
#include "base/reduce.h"

static void test_no_backend(void **state)
{
    (void)state;
    assert_int_equal(gpu_test_start(NULL, NULL, NULL), HCOMM_OK);
    assert_null(hc_gpu_backend());
    char line[512];
    hc_gpu_describe(line, sizeof(line));
    gpu_test_contains(line, "gpu: none: HCOMM_GPU=none: every buffer is host memory");
    int x = 5;
    hc_mem_attr_t a = gpu_test_attr(&x, sizeof(x));
    assert_int_equal(a.type, HC_MEM_HOST);
    assert_int_equal(a.device, -1);
    hc_gpu_fini();
}

static void test_host_dispatch(void **state)
{
    (void)state;
    assert_int_equal(gpu_test_start("0", NULL, NULL), HCOMM_OK);
    enum { N = 1027 };
    for (int dt = 0; dt < HCOMM_DTYPE_COUNT; dt++)
        for (int op = 0; op < HCOMM_OP_COUNT; op++) {
            size_t es = hc_dtype_size((hcomm_dtype_t)dt);
            unsigned char a[N * 8], b[N * 8], ref[N * 8];
            gpu_test_random(a, N * es, (unsigned)(dt * 31 + op));
            gpu_test_random(b, N * es, (unsigned)(dt * 17 + op + 5));
            const void *in[2] = {a, b};
            hc_reduce_scalar(ref, in, 2, N, (hcomm_dtype_t)dt, (hcomm_op_t)op, 3);
            assert_int_equal(
                hc_gpu_reduce(a, NULL, b, NULL, N, (hcomm_dtype_t)dt, (hcomm_op_t)op, 3), HCOMM_OK);
            assert_memory_equal(a, ref, N * es);
        }
    char s[100], d[100];
    gpu_test_random(s, sizeof(s), 9);
    assert_int_equal(hc_gpu_copy(d, NULL, s, NULL, sizeof(s)), HCOMM_OK);
    assert_memory_equal(d, s, sizeof(s));
    assert_int_equal(hc_gpu_copy(NULL, NULL, s, NULL, 0), HCOMM_OK);
    assert_int_equal(hc_gpu_copy(NULL, NULL, s, NULL, 1), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "dst is NULL");
    assert_int_equal(hc_gpu_reduce(d, NULL, s, NULL, 1, (hcomm_dtype_t)42, HCOMM_SUM, 0),
                     HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "dtype 42");
    assert_int_equal(hc_gpu_reduce(d, NULL, s, NULL, 1, HCOMM_INT8, (hcomm_op_t)9, 0),
                     HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "op 9");
    /* a device attribute with no backend: refused, not dereferenced */
    hc_mem_attr_t dev = {.type = HC_MEM_DEVICE, .device = 0};
    assert_int_equal(hc_gpu_copy(d, &dev, s, NULL, 4), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "no GPU backend");
    hc_gpu_fini();
}

static void test_bad_knob(void **state)
{
    (void)state;
    assert_int_equal(gpu_test_start("maybe", NULL, NULL), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "HCOMM_GPU_MODEL=maybe must be 0 or 1");
    char line[512];
    hc_gpu_describe(line, sizeof(line));
    gpu_test_contains(line, "HCOMM_GPU_MODEL=maybe");
    hc_gpu_fini();
}

static void test_model_refused_or_chosen(void **state)
{
    (void)state;
    hcomm_status_t st = gpu_test_start("1", NULL, NULL);
#if HCOMM_GPU_MODEL_BUILD
    assert_int_equal(st, HCOMM_OK);
    assert_string_equal(hc_gpu_backend()->name, "model");
#else
    assert_int_equal(st, HCOMM_ERR_UNSUPPORTED);
    gpu_test_contains(hc_error_last(), "this library has no model of a GPU");
    assert_null(hc_gpu_backend());
#endif
    hc_gpu_fini();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_backend),
        cmocka_unit_test(test_host_dispatch),
        cmocka_unit_test(test_bad_knob),
        cmocka_unit_test(test_model_refused_or_chosen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
