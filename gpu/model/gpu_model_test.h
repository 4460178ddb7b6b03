/*
 * The GPU model's test API: for test programs (tests/ may include it), in
 * the test objects only (-DHCOMM_GPU_MODEL=ON); users never see it. Every
 * call needs the model to be the active backend (HCOMM_GPU_MODEL=1 and
 * hc_gpu_init()), else ERR_UNSUPPORTED. fill and read go through the
 * model's copies on a stream of their own: they never touch the device
 * pointer with the CPU, so they test what they claim.
 */
#ifndef HC_GPU_MODEL_TEST_H
#define HC_GPU_MODEL_TEST_H

#include "gpu/gpu.h"

/* Device memory on the model's device 0 (len > 0), and its free. */
hcomm_status_t hc_gpu_model_test_alloc(size_t len, void **ptr_p);
hcomm_status_t hc_gpu_model_test_free(void *ptr);
/* dev[0..n) = host[0..n); host[0..n) = dev[0..n), synchronously. */
hcomm_status_t hc_gpu_model_test_fill(void *dev, const void *host, size_t n);
hcomm_status_t hc_gpu_model_test_read(void *host, const void *dev, size_t n);

/* Streams for tests of stream-ordered calls (a model stream is what
 * hcomm_stream_t is on the model: cast it). copy_async is the model's
 * copy_async on s (any direction, unified addresses); gate makes s wait
 * until *word >= value (wait_value32; word must be host_register'ed: see
 * host_register), and host_register pins [p, p + n) for it. sync waits for
 * s and returns the first failure of its work. */
hcomm_status_t hc_gpu_model_test_stream_create(hc_gpu_stream_t *s_p);
hcomm_status_t hc_gpu_model_test_stream_destroy(hc_gpu_stream_t s);
hcomm_status_t hc_gpu_model_test_stream_sync(hc_gpu_stream_t s);
hcomm_status_t hc_gpu_model_test_copy_async(void *dst, const void *src, size_t n,
                                            hc_gpu_stream_t s);
hcomm_status_t hc_gpu_model_test_gate(hc_gpu_stream_t s, uint32_t *word, uint32_t value);
hcomm_status_t hc_gpu_model_test_host_register(void *p, size_t n);
hcomm_status_t hc_gpu_model_test_host_unregister(void *p);

/* What the model has done since hc_gpu_init (registers: host_register
 * calls that succeeded). */
typedef struct {
    uint64_t copies, copy_bytes, kernels, allocs, frees, imports, registers;
} hc_gpu_model_counters_t;
void hc_gpu_model_test_counters(hc_gpu_model_counters_t *c_p);

#endif /* HC_GPU_MODEL_TEST_H */
