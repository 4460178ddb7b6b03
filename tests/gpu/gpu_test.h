/*
 * Helpers of the gpu/ tests: start the layer on the model with a fault or
 * delay specification, attributes of a pointer, random bytes.
 */
#ifndef HC_TESTS_GPU_TEST_H
#define HC_TESTS_GPU_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpu/gpu.h"

/* hc_gpu_fini, then hc_gpu_init with HCOMM_GPU_MODEL=model and the model's
 * knobs (NULL: unset). */
static inline hcomm_status_t gpu_test_start(const char *model, const char *fault, const char *delay)
{
    hc_gpu_fini();
    if (model)
        setenv("HCOMM_GPU_MODEL", model, 1);
    else
        unsetenv("HCOMM_GPU_MODEL");
    if (fault)
        setenv("HCOMM_GPU_MODEL_FAULT", fault, 1);
    else
        unsetenv("HCOMM_GPU_MODEL_FAULT");
    if (delay)
        setenv("HCOMM_GPU_MODEL_DELAY", delay, 1);
    else
        unsetenv("HCOMM_GPU_MODEL_DELAY");
    return hc_gpu_init();
}

static inline hc_mem_attr_t gpu_test_attr(const void *p, size_t n)
{
    hc_mem_attr_t a;
    assert_int_equal(hc_gpu_mem_type(p, n, &a), HCOMM_OK);
    return a;
}

static inline void gpu_test_random(void *p, size_t n, unsigned seed)
{
    unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        c[i] = (unsigned char)(seed >> 16);
    }
}

static inline void gpu_test_contains(const char *text, const char *want)
{
    if (!strstr(text, want)) fail_msg("\"%s\" does not say \"%s\"", text, want);
}

#endif /* HC_TESTS_GPU_TEST_H */
