/*
 * A stand-in libcuda.so.1 for the cuda backend's loading tests
 * (test_cuda_load): no GPU, no CUDA; it answers the few calls the backend's
 * init makes, as HC_CUDA_STUB (read at each call) says:
 *   old         cuDriverGetVersion says 11080 (the backend needs 12000)
 *   nosym:NAME  cuGetProcAddress does not find NAME
 *   nodevice    cuInit fails with CUDA_ERROR_NO_DEVICE (100)
 *   zero        cuDeviceGetCount says 0
 *   ok          one device, "hcomm stub GPU", sm_90, unified addressing;
 *               every other call fails with CUDA_ERROR_NOT_SUPPORTED (801)
 * Built twice: libcuda.so.1 in cuda_stub/, and without cuGetProcAddress_v2
 * (-DHC_STUB_NO_PROC) in cuda_stub_noproc/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static const char *mode(void)
{
    const char *m = getenv("HC_CUDA_STUB");
    return m ? m : "ok";
}

static int stub_unsupported(void)
{
    return 801;
}

static int stub_error_name(int e, const char **s)
{
    *s = e == 100 ? "CUDA_ERROR_NO_DEVICE" : e == 801 ? "CUDA_ERROR_NOT_SUPPORTED" : "CUDA_ERROR_?";
    return 0;
}
static int stub_error_string(int e, const char **s)
{
    *s = e == 100 ? "no CUDA-capable device is detected (stub)" : "stub";
    return 0;
}
static int stub_count(int *n)
{
    *n = strcmp(mode(), "zero") ? 1 : 0;
    return 0;
}
static int stub_device_get(int *d, int i)
{
    *d = i;
    return 0;
}
static int stub_name(char *name, int len, int d)
{
    (void)d;
    strncpy(name, "hcomm stub GPU", (size_t)len - 1);
    name[len - 1] = '\0';
    return 0;
}
static int stub_total(size_t *b, int d)
{
    (void)d;
    *b = (size_t)1 << 30;
    return 0;
}
static int stub_attr(int *v, int attr, int d)
{
    (void)d;
    *v = attr == 41 ? 1 : attr == 75 ? 9 : attr == 76 ? 0 : attr == 16 ? 4 : 0;
    return 0;
}
static int stub_ctx;
static int stub_retain(void **c, int d)
{
    (void)d;
    *c = &stub_ctx;
    return 0;
}
static int stub_release(int d)
{
    (void)d;
    return 0;
}

EXPORT int cuInit(unsigned flags)
{
    (void)flags;
    return strcmp(mode(), "nodevice") ? 0 : 100;
}

EXPORT int cuDriverGetVersion(int *v)
{
    *v = strcmp(mode(), "old") ? 12080 : 11080;
    return 0;
}

#ifndef HC_STUB_NO_PROC
EXPORT int cuGetProcAddress_v2(const char *sym, void **pfn, int version, uint64_t flags,
                               int *status)
{
    (void)version;
    (void)flags;
    const char *m = mode();
    if (!strncmp(m, "nosym:", 6) && !strcmp(m + 6, sym)) {
        *pfn = NULL;
        *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
        return 500;  /* CUDA_ERROR_NOT_FOUND */
    }
    static const struct {
        const char *name;
        void *fn;
    } known[] = {
        {"cuGetErrorName", (void *)stub_error_name},
        {"cuGetErrorString", (void *)stub_error_string},
        {"cuDeviceGetCount", (void *)stub_count},
        {"cuDeviceGet", (void *)stub_device_get},
        {"cuDeviceGetName", (void *)stub_name},
        {"cuDeviceTotalMem", (void *)stub_total},
        {"cuDeviceGetAttribute", (void *)stub_attr},
        {"cuDevicePrimaryCtxRetain", (void *)stub_retain},
        {"cuDevicePrimaryCtxRelease", (void *)stub_release},
    };
    *pfn = (void *)stub_unsupported;
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (!strcmp(known[i].name, sym)) *pfn = known[i].fn;
    *status = 0;
    return 0;
}
#endif
