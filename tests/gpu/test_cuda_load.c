/*
 * The cuda backend's loading and the registry's choice, without a GPU
 * (docs/gpu.md, "CUDA backend"): every way init can fail says exactly why,
 * HCOMM_GPU=cuda turns that into an error naming it, HCOMM_GPU=auto into
 * "gpu: none: cuda: <why>", and a driver that has a device is chosen by auto.
 * The driver is a stand-in libcuda.so.1 built by the test (cuda_stub.c),
 * switched by HC_CUDA_STUB; HCOMM_CUDA_LIB points the backend at it by path,
 * and one case finds it by name through LD_LIBRARY_PATH (set by ctest).
 */
#include "gpu_test.h"

#include <stdio.h>

#ifndef HC_STUB_DIR
#error "HC_STUB_DIR: the folder of the stub libcuda.so.1 (tests/gpu/CMakeLists.txt)"
#endif

static const char *const stub = HC_STUB_DIR "/libcuda.so.1";
static const char *const noproc = HC_STUB_NOPROC_DIR "/libcuda.so.1";
static const char *const nolib = HC_STUB_DIR "/none/libcuda.so.1";

/* hc_gpu_init with HCOMM_GPU=gpu, HCOMM_CUDA_LIB=lib (NULL: unset) and
 * the stub's mode. */
static hcomm_status_t start(const char *gpu, const char *lib, const char *mode)
{
    hc_gpu_fini();
    unsetenv("HCOMM_GPU_MODEL");
    setenv("HCOMM_GPU", gpu, 1);
    if (lib)
        setenv("HCOMM_CUDA_LIB", lib, 1);
    else
        unsetenv("HCOMM_CUDA_LIB");
    setenv("HC_CUDA_STUB", mode, 1);
    return hc_gpu_init();
}

static void expect_line(const char *want)
{
    char line[1024];
    hc_gpu_describe(line, sizeof(line));
    printf("  %s\n", line);
    gpu_test_contains(line, want);
}

/* Init straight on the backend: its why. */
static void expect_why(const char *lib, const char *mode, const char *want)
{
    hc_gpu_fini();
    setenv("HCOMM_CUDA_LIB", lib, 1);
    setenv("HC_CUDA_STUB", mode, 1);
    char why[400] = "";
    assert_int_equal(hc_gpu_cuda_glue->init(why, sizeof(why)), HCOMM_ERR_UNSUPPORTED);
    printf("  %s: %s\n", mode, why);
    gpu_test_contains(why, want);
}

static void test_no_lib(void **state)
{
    (void)state;
    expect_why(nolib, "ok", "no ");
    expect_why(nolib, "ok", "/none/libcuda.so.1: ");
    /* cuda: an error naming why */
    assert_int_equal(start("cuda", nolib, "ok"), HCOMM_ERR_UNSUPPORTED);
    gpu_test_contains(hc_error_last(),
                      "HCOMM_GPU=cuda, but the cuda backend cannot run: cuda: no ");
    assert_null(hc_gpu_backend());
    /* auto: no GPU, and the line says why */
    assert_int_equal(start("auto", nolib, "ok"), HCOMM_OK);
    assert_null(hc_gpu_backend());
    assert_false(hc_gpu_on);
    expect_line("gpu: none: cuda: no ");
    hc_mem_attr_t a = gpu_test_attr(&a, sizeof(a));
    assert_int_equal(a.type, HC_MEM_HOST);
    hc_gpu_fini();
}

static void test_missing_symbols(void **state)
{
    (void)state;
    expect_why(noproc, "ok", "has no cuGetProcAddress_v2");
    expect_why(stub, "nosym:cuMemGetHandleForAddressRange",
               "cuGetProcAddress(cuMemGetHandleForAddressRange, 12000): symbol not found");
    expect_why(stub, "nosym:cuStreamWaitValue32", "cuGetProcAddress(cuStreamWaitValue32, 12000)");
    assert_int_equal(start("cuda", noproc, "ok"), HCOMM_ERR_UNSUPPORTED);
    gpu_test_contains(hc_error_last(), "has no cuGetProcAddress_v2");
    hc_gpu_fini();
}

static void test_old_driver(void **state)
{
    (void)state;
    expect_why(stub, "old", "driver too old: cuDriverGetVersion 11080, needs 12000");
    assert_int_equal(start("auto", stub, "old"), HCOMM_OK);
    expect_line("gpu: none: cuda: driver too old: cuDriverGetVersion 11080, needs 12000");
    hc_gpu_fini();
}

static void test_no_device(void **state)
{
    (void)state;
    expect_why(stub, "nodevice", "no device: cuInit: CUDA_ERROR_NO_DEVICE");
    expect_why(stub, "zero", "no device: cuDeviceGetCount 0");
    assert_int_equal(start("cuda", stub, "zero"), HCOMM_ERR_UNSUPPORTED);
    gpu_test_contains(hc_error_last(), "no device: cuDeviceGetCount 0");
    hc_gpu_fini();
}

/* A driver with a device: auto chooses cuda, and a call the stand-in does
 * not do fails by name (never a crash). Found by name on LD_LIBRARY_PATH. */
static void test_chosen(void **state)
{
    (void)state;
    assert_int_equal(start("auto", NULL, "ok"), HCOMM_OK);
    assert_non_null(hc_gpu_backend());
    assert_string_equal(hc_gpu_backend()->name, "cuda");
    assert_true(hc_gpu_on);
    expect_line("gpu: cuda, 1 device: hcomm stub GPU (sm_90, 1.0 GiB, 4 SMs; driver 12.8");
    hc_mem_attr_t a;
    int x = 1;
    assert_int_equal(hc_gpu_mem_type(&x, sizeof(x), &a), HCOMM_ERR_UNSUPPORTED);
    gpu_test_contains(hc_error_last(), "cuda: cuCtxGetCurrent: CUDA_ERROR_NOT_SUPPORTED");
    void *p = NULL;
    assert_int_equal(hc_gpu_cuda_glue->alloc(0, 0, HC_MEM_DEVICE, &p), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "len is 0");
    assert_int_equal(hc_gpu_cuda_glue->alloc(3, 8, HC_MEM_DEVICE, &p), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "no such device");
    hc_gpu_fini();
    /* none: not even opened */
    assert_int_equal(start("none", NULL, "ok"), HCOMM_OK);
    assert_null(hc_gpu_backend());
    expect_line("gpu: none: HCOMM_GPU=none");
    hc_gpu_fini();
}

static void test_bad_knob(void **state)
{
    (void)state;
    assert_int_equal(start("cudaa", stub, "ok"), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "HCOMM_GPU=cudaa must be auto, cuda or none");
    hc_gpu_fini();
    setenv("HCOMM_GPU_MODEL", "1", 1);
    setenv("HCOMM_GPU", "cuda", 1);
    assert_int_equal(hc_gpu_init(), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "choose one backend");
    hc_gpu_fini();
    unsetenv("HCOMM_GPU_MODEL");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_lib),     cmocka_unit_test(test_missing_symbols),
        cmocka_unit_test(test_old_driver), cmocka_unit_test(test_no_device),
        cmocka_unit_test(test_chosen),     cmocka_unit_test(test_bad_knob),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
