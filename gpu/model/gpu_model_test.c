/*
 * The GPU model's test API (gpu_model_test.h): allocation, and filling and
 * reading device memory through the model's own copies.
 */
#include "gpu/model/gpu_model_test.h"
#include "gpu/model/gpu_model.h"

static hcomm_status_t hc_gm_test_active(const char *what)
{
    if (hc_gpu_backend() == &hc_gpu_model_ops) return HCOMM_OK;
    return hc_error(HCOMM_ERR_UNSUPPORTED,
                    "%s: the GPU model is not the active backend "
                    "(HCOMM_GPU_MODEL=1, then hc_gpu_init)",
                    what);
}

hcomm_status_t hc_gpu_model_test_alloc(size_t len, void **ptr_p)
{
    hcomm_status_t st = hc_gm_test_active("hc_gpu_model_test_alloc");
    return st != HCOMM_OK ? st : hc_gpu_model_ops.alloc(0, len, HC_MEM_DEVICE, ptr_p);
}

hcomm_status_t hc_gpu_model_test_free(void *ptr)
{
    hcomm_status_t st = hc_gm_test_active("hc_gpu_model_test_free");
    return st != HCOMM_OK ? st : hc_gpu_model_ops.free(ptr);
}

static hcomm_status_t hc_gm_test_copy(void *dst, const void *src, size_t n, const char *what)
{
    hcomm_status_t st = hc_gm_test_active(what);
    if (st != HCOMM_OK) return st;
    hc_gpu_stream_t s;
    if ((st = hc_gpu_model_stream_create(0, &s)) != HCOMM_OK) return st;
    if ((st = hc_gpu_model_copy_async(dst, src, n, s)) == HCOMM_OK)
        st = hc_gpu_model_stream_synchronize(s);
    hc_gpu_model_stream_destroy(s);
    return st;
}

hcomm_status_t hc_gpu_model_test_fill(void *dev, const void *host, size_t n)
{
    return hc_gm_test_copy(dev, host, n, "hc_gpu_model_test_fill");
}

hcomm_status_t hc_gpu_model_test_read(void *host, const void *dev, size_t n)
{
    return hc_gm_test_copy(host, dev, n, "hc_gpu_model_test_read");
}

hcomm_status_t hc_gpu_model_test_stream_create(hc_gpu_stream_t *s_p)
{
    hcomm_status_t st = hc_gm_test_active("hc_gpu_model_test_stream_create");
    return st != HCOMM_OK ? st : hc_gpu_model_stream_create(0, s_p);
}

hcomm_status_t hc_gpu_model_test_stream_destroy(hc_gpu_stream_t s)
{
    hcomm_status_t st = hc_gm_test_active("hc_gpu_model_test_stream_destroy");
    return st != HCOMM_OK ? st : hc_gpu_model_stream_destroy(s);
}

hcomm_status_t hc_gpu_model_test_stream_sync(hc_gpu_stream_t s)
{
    hcomm_status_t st = hc_gm_test_active("hc_gpu_model_test_stream_sync");
    return st != HCOMM_OK ? st : hc_gpu_model_stream_synchronize(s);
}

hcomm_status_t hc_gpu_model_test_copy_async(void *dst, const void *src, size_t n,
                                            hc_gpu_stream_t s)
{
    hcomm_status_t st = hc_gm_test_active("hc_gpu_model_test_copy_async");
    return st != HCOMM_OK ? st : hc_gpu_model_copy_async(dst, src, n, s);
}

hcomm_status_t hc_gpu_model_test_gate(hc_gpu_stream_t s, uint32_t *word, uint32_t value)
{
    hcomm_status_t st = hc_gm_test_active("hc_gpu_model_test_gate");
    return st != HCOMM_OK ? st : hc_gpu_model_wait_value32(s, word, value);
}

hcomm_status_t hc_gpu_model_test_host_register(void *p, size_t n)
{
    hcomm_status_t st = hc_gm_test_active("hc_gpu_model_test_host_register");
    return st != HCOMM_OK ? st : hc_gpu_model_ops.host_register(p, n);
}

hcomm_status_t hc_gpu_model_test_host_unregister(void *p)
{
    hcomm_status_t st = hc_gm_test_active("hc_gpu_model_test_host_unregister");
    return st != HCOMM_OK ? st : hc_gpu_model_ops.host_unregister(p);
}

void hc_gpu_model_test_counters(hc_gpu_model_counters_t *c_p)
{
    *c_p = (hc_gpu_model_counters_t){
        .copies = atomic_load(&hc_gpu_model.done_copies),
        .copy_bytes = atomic_load(&hc_gpu_model.done_bytes),
        .kernels = atomic_load(&hc_gpu_model.done_kernels),
        .allocs = atomic_load(&hc_gpu_model.allocs),
        .frees = atomic_load(&hc_gpu_model.frees),
        .imports = atomic_load(&hc_gpu_model.imports),
        .registers = atomic_load(&hc_gpu_model.registers),
    };
}
