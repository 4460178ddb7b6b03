/*
 * Device memory on the public API (include/hcomm.h: hcomm_mem_alloc_device,
 * hcomm_mem_free_device, hcomm_memcpy): the active GPU backend's allocation
 * and copies, for benchmarks and tests that have no GPU runtime of their own
 * (`-m device`). Like the other memory calls they need no engine, so they do
 * not take the threading contract's entry check.
 */
#include "api/api.h"
#include "gpu/gpu.h"

#include <stdio.h>

static hcomm_status_t hc_api_gpu_backend(const char *fn, const hc_gpu_ops_t **ops_p)
{
    hcomm_status_t st = hc_check_init(fn);
    if (st != HCOMM_OK) return st;
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    if (!ops) {
        char why[400];
        hc_gpu_describe(why, sizeof(why));
        return hc_error(HCOMM_ERR_UNSUPPORTED, "%s: no GPU backend is active (%s)", fn, why);
    }
    *ops_p = ops;
    return HCOMM_OK;
}

static hcomm_status_t hc_api_gpu_named(hcomm_status_t st, const char *fn)
{
    char saved[512];
    snprintf(saved, sizeof(saved), "%s", hc_error_last());
    return hc_error(st, "%s: %s", fn, saved);
}

HC_EXPORT hcomm_status_t hcomm_mem_alloc_device(int device, size_t bytes, void **ptr_p)
{
    const char *fn = "hcomm_mem_alloc_device";
    const hc_gpu_ops_t *ops = NULL;
    hcomm_status_t st = hc_api_gpu_backend(fn, &ops);
    if (st != HCOMM_OK) return st;
    if (!ptr_p || bytes == 0)
        return hc_error(HCOMM_ERR_INVALID, "%s: %s", fn, !ptr_p ? "ptr_p is NULL" : "bytes is 0");
    if (device < 0 || device >= ops->device_count())
        return hc_error(HCOMM_ERR_INVALID, "%s: device %d out of range (%d devices)", fn, device,
                        ops->device_count());
    if ((st = ops->alloc(device, bytes, HC_MEM_DEVICE, ptr_p)) != HCOMM_OK)
        return hc_api_gpu_named(st, fn);
    return HCOMM_OK;
}

HC_EXPORT hcomm_status_t hcomm_mem_free_device(void *ptr)
{
    const char *fn = "hcomm_mem_free_device";
    const hc_gpu_ops_t *ops = NULL;
    hcomm_status_t st = hc_api_gpu_backend(fn, &ops);
    if (st != HCOMM_OK || !ptr) return st;
    if ((st = ops->free(ptr)) != HCOMM_OK) return hc_api_gpu_named(st, fn);
    return HCOMM_OK;
}

HC_EXPORT hcomm_status_t hcomm_memcpy(void *dst, const void *src, size_t n)
{
    const char *fn = "hcomm_memcpy";
    hcomm_status_t st = hc_check_init(fn);
    if (st != HCOMM_OK || n == 0) return st;
    if (!dst || !src) return hc_error(HCOMM_ERR_INVALID, "%s: %s is NULL", fn, dst ? "src" : "dst");
    hc_mem_attr_t da, sa;
    if ((st = hc_gpu_mem_type(dst, n, &da)) != HCOMM_OK ||
        (st = hc_gpu_mem_type(src, n, &sa)) != HCOMM_OK ||
        (st = hc_gpu_copy(dst, &da, src, &sa, n)) != HCOMM_OK)
        return hc_api_gpu_named(st, fn);
    return HCOMM_OK;
}
