/*
 * The cuda backend: hc_gpu_ops_t over CUDA's driver API, opened at run time
 * (docs/gpu.md, "CUDA backend"). libhcomm has no link-time dependency on
 * libcuda or libcudart and needs no CUDA header to build (cuda_api.h
 * declares what it calls): init dlopens libcuda.so.1 (HCOMM_CUDA_LIB names
 * another file, for tests), takes cuInit, cuDriverGetVersion and
 * cuGetProcAddress_v2 by dlsym and every other function by cuGetProcAddress
 * for the API of CUDA 12.0, and says exactly why it cannot run: "no
 * libcuda.so.1: <dlerror>", "driver too old: cuDriverGetVersion X, needs
 * 12000", "<lib> has no <symbol>", "no device: ...".
 *
 * Contexts: each device's primary context is retained at init. A call on a
 * device uses the caller's current context where it is on that device, else
 * the primary one, made current on a thread that has none (as the runtime
 * does) and pushed/popped on a thread that has another (cuda_int.h).
 *
 * This file: the loading, init/fini, devices, pointer attributes, alloc and
 * free, host registration. cuda_stream.c: streams, events, copies, the
 * kernels, stream memory ops. cuda_ipc.c: IPC and dmabuf.
 */
#include "gpu/cuda/cuda_int.h"
#include "base/config.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

hc_cuda_t hc_cuda = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *hc_cuda_knob_lib;
static const hc_config_knob_t hc_cuda_knobs[] = {
    HC_KNOB_STR(hc_cuda_knob_lib, "HCOMM_CUDA_LIB", "libcuda.so.1",
                "gpu: the CUDA driver library the cuda backend dlopens (a file name searched as "
                "dlopen does, or a path; tests point it at a stub)"),
};
HC_CONFIG_KNOBS("cuda", hc_cuda_knobs)

/* ---- errors and contexts ----------------------------------------------------------------- */

const char *hc_cuda_strerror(CUresult r, char *buf, size_t len)
{
    const char *name = NULL, *text = NULL;
    if (hc_cuda.fn.cuGetErrorName) (void)hc_cuda.fn.cuGetErrorName(r, &name);
    if (hc_cuda.fn.cuGetErrorString) (void)hc_cuda.fn.cuGetErrorString(r, &text);
    if (name && text)
        snprintf(buf, len, "%s (%s)", name, text);
    else
        snprintf(buf, len, "CUresult %d", r);
    return buf;
}

hcomm_status_t hc_cuda_fail(CUresult r, const char *fmt, ...)
{
    char what[256], err[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    hcomm_status_t st = r == CUDA_ERROR_OUT_OF_MEMORY   ? HCOMM_ERR_NO_MEMORY
                        : r == CUDA_ERROR_INVALID_VALUE ? HCOMM_ERR_INVALID
                        : r == CUDA_ERROR_NOT_SUPPORTED ? HCOMM_ERR_UNSUPPORTED
                                                        : HCOMM_ERR_IO;
    return hc_error(st, "cuda: %s: %s", what, hc_cuda_strerror(r, err, sizeof(err)));
}

hcomm_status_t hc_cuda_ctx_enter(CUcontext ctx, hc_cuda_ctx_save_t *save)
{
    CUcontext cur = NULL;
    CUresult r;
    save->pushed = false;
    if ((r = hc_cuda.fn.cuCtxGetCurrent(&cur)) != CUDA_SUCCESS)
        return hc_cuda_fail(r, "cuCtxGetCurrent");
    if (cur == ctx) return HCOMM_OK;
    if (!cur) {
        if ((r = hc_cuda.fn.cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
            return hc_cuda_fail(r, "cuCtxSetCurrent");
        return HCOMM_OK;
    }
    if ((r = hc_cuda.fn.cuCtxPushCurrent(ctx)) != CUDA_SUCCESS)
        return hc_cuda_fail(r, "cuCtxPushCurrent");
    save->pushed = true;
    return HCOMM_OK;
}

void hc_cuda_ctx_leave(hc_cuda_ctx_save_t *save)
{
    CUcontext popped;
    if (save->pushed) (void)hc_cuda.fn.cuCtxPopCurrent(&popped);
    save->pushed = false;
}

CUcontext hc_cuda_ctx_for(int device)
{
    CUcontext cur = NULL;
    CUdevice d;
    if (hc_cuda.fn.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur &&
        hc_cuda.fn.cuCtxGetDevice(&d) == CUDA_SUCCESS && d == hc_cuda.dev[device].dev)
        return cur;
    return hc_cuda.dev[device].primary;
}

/* ---- loading ----------------------------------------------------------------------------- */

static void hc_cuda_unload(void)
{
    for (int d = 0; d < hc_cuda.ndev; d++)
        if (hc_cuda.dev[d].primary) (void)hc_cuda.fn.cuDevicePrimaryCtxRelease(hc_cuda.dev[d].dev);
    if (hc_cuda.lib) dlclose(hc_cuda.lib);
    hc_cuda.lib = NULL;
    hc_cuda.ndev = 0;
    memset(&hc_cuda.fn, 0, sizeof(hc_cuda.fn));
    memset(hc_cuda.dev, 0, sizeof(hc_cuda.dev));
}

/* dlopen and the symbols; why says what is missing. */
static hcomm_status_t hc_cuda_load(const char *lib, hc_cu_init_fn *init_p, char *why, size_t len)
{
    if (!(hc_cuda.lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL))) {
        snprintf(why, len, "no %s: %s", lib, dlerror());
        return HCOMM_ERR_UNSUPPORTED;
    }
    static const char *const first[] = {"cuInit", "cuDriverGetVersion", "cuGetProcAddress_v2"};
    void *sym[3];
    for (int i = 0; i < 3; i++)
        if (!(sym[i] = dlsym(hc_cuda.lib, first[i]))) {
            snprintf(why, len, "%s has no %s (a driver older than CUDA 12.0, or not CUDA's)", lib,
                     first[i]);
            return HCOMM_ERR_UNSUPPORTED;
        }
    *init_p = (hc_cu_init_fn)sym[0];
    hc_cu_driver_get_version_fn version = (hc_cu_driver_get_version_fn)sym[1];
    hc_cu_get_proc_address_fn proc = (hc_cu_get_proc_address_fn)sym[2];
    CUresult r = version(&hc_cuda.driver_version);
    if (r != CUDA_SUCCESS) {
        snprintf(why, len, "%s: cuDriverGetVersion failed: CUresult %d", lib, r);
        return HCOMM_ERR_UNSUPPORTED;
    }
    if (hc_cuda.driver_version < HC_CUDA_API_VERSION) {
        snprintf(why, len, "driver too old: cuDriverGetVersion %d, needs %d (CUDA 12.0)",
                 hc_cuda.driver_version, HC_CUDA_API_VERSION);
        return HCOMM_ERR_UNSUPPORTED;
    }
#define HC_CUDA_FN_GET_(name, params)                                                              \
    {                                                                                              \
        void *fp = NULL;                                                                           \
        int found = -1;                                                                            \
        r = proc(#name, &fp, HC_CUDA_API_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found);            \
        if (r != CUDA_SUCCESS || !fp || found != CU_GET_PROC_ADDRESS_SUCCESS) {                    \
            snprintf(why, len, "%s: cuGetProcAddress(%s, %d): %s (CUresult %d)", lib, #name,       \
                     HC_CUDA_API_VERSION,                                                          \
                     found == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND ? "symbol not found"            \
                     : found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT                         \
                         ? "version not sufficient"                                                \
                         : "failed",                                                               \
                     r);                                                                           \
            return HCOMM_ERR_UNSUPPORTED;                                                          \
        }                                                                                          \
        memcpy(&hc_cuda.fn.name, &fp, sizeof(fp));                                                 \
    }
    HC_CUDA_FUNCS(HC_CUDA_FN_GET_)
#undef HC_CUDA_FN_GET_
    return HCOMM_OK;
}

static int hc_cuda_attr(CUdevice d, int attr)
{
    int v = 0;
    if (hc_cuda.fn.cuDeviceGetAttribute(&v, attr, d) != CUDA_SUCCESS) v = 0;
    return v;
}

/* The devices: each needs unified addressing; its primary context is
 * retained. */
static hcomm_status_t hc_cuda_devices(char *why, size_t len)
{
    char err[160];
    int n = 0;
    CUresult r = hc_cuda.fn.cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS || n <= 0) {
        snprintf(why, len, "no device: cuDeviceGetCount %s",
                 r != CUDA_SUCCESS ? hc_cuda_strerror(r, err, sizeof(err)) : "0");
        return HCOMM_ERR_UNSUPPORTED;
    }
    if (n > HC_CUDA_MAX_DEVICES) n = HC_CUDA_MAX_DEVICES;
    for (int i = 0; i < n; i++) {
        hc_cuda_dev_t *dv = &hc_cuda.dev[i];
        if ((r = hc_cuda.fn.cuDeviceGet(&dv->dev, i)) != CUDA_SUCCESS ||
            (r = hc_cuda.fn.cuDevicePrimaryCtxRetain(&dv->primary, dv->dev)) != CUDA_SUCCESS) {
            snprintf(why, len, "device %d: %s: %s", i,
                     dv->primary ? "cuDevicePrimaryCtxRetain" : "cuDeviceGet",
                     hc_cuda_strerror(r, err, sizeof(err)));
            hc_cuda.ndev = i;
            return HCOMM_ERR_UNSUPPORTED;
        }
        hc_cuda.ndev = i + 1;
        if (hc_cuda.fn.cuDeviceGetName(dv->name, sizeof(dv->name), dv->dev) != CUDA_SUCCESS)
            snprintf(dv->name, sizeof(dv->name), "device %d", i);
        if (hc_cuda.fn.cuDeviceTotalMem(&dv->total_mem, dv->dev) != CUDA_SUCCESS) dv->total_mem = 0;
        dv->cc_major = hc_cuda_attr(dv->dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        dv->cc_minor = hc_cuda_attr(dv->dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        dv->sms = hc_cuda_attr(dv->dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
        dv->vmm = hc_cuda_attr(dv->dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
        dv->posix_fd =
            hc_cuda_attr(dv->dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
        dv->dmabuf = hc_cuda_attr(dv->dev, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
        dv->gdr = hc_cuda_attr(dv->dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
        if (!hc_cuda_attr(dv->dev, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)) {
            snprintf(why, len, "device %d (%s) has no unified addressing", i, dv->name);
            return HCOMM_ERR_UNSUPPORTED;
        }
    }
    return HCOMM_OK;
}

static hcomm_status_t hc_cuda_init(char *why, size_t len)
{
    const char *lib = hc_config_env("HCOMM_CUDA_LIB");
    if (!lib || !*lib) lib = "libcuda.so.1";
    memset(hc_cuda.dev, 0, sizeof(hc_cuda.dev));
    hc_cu_init_fn cu_init = NULL;
    hcomm_status_t st = hc_cuda_load(lib, &cu_init, why, len);
    if (st == HCOMM_OK) {
        char err[160];
        CUresult r = cu_init(0);
        if (r == CUDA_ERROR_NO_DEVICE) {
            snprintf(why, len, "no device: cuInit: %s", hc_cuda_strerror(r, err, sizeof(err)));
            st = HCOMM_ERR_UNSUPPORTED;
        } else if (r != CUDA_SUCCESS) {
            snprintf(why, len, "cuInit: %s", hc_cuda_strerror(r, err, sizeof(err)));
            st = HCOMM_ERR_UNSUPPORTED;
        } else {
            st = hc_cuda_devices(why, len);
        }
    }
    if (st != HCOMM_OK) hc_cuda_unload();
    return st;
}

static void hc_cuda_fini(void)
{
    hc_cuda_ipc_close_all();
    hc_cuda_modules_unload();
    hc_cuda_unload();
}

static int hc_cuda_device_count(void)
{
    return hc_cuda.ndev;
}

static void hc_cuda_device_describe(int device, char *buf, size_t len)
{
    if (device < 0 || device >= hc_cuda.ndev) {
        snprintf(buf, len, "no device %d", device);
        return;
    }
    const hc_cuda_dev_t *dv = &hc_cuda.dev[device];
    snprintf(buf, len,
             "%s (sm_%d%d, %.1f GiB, %d SMs; driver %d.%d; reductions: %s; IPC: %s; dmabuf %s, "
             "GPUDirect RDMA %s)",
             dv->name, dv->cc_major, dv->cc_minor, (double)dv->total_mem / (1u << 30), dv->sms,
             hc_cuda.driver_version / 1000, hc_cuda.driver_version % 1000 / 10,
             hc_cuda_fatbin_size ? "device kernels" : "unavailable (built without nvcc: staged)",
             dv->vmm && dv->posix_fd ? "cuIpc + POSIX fd" : "cuIpc", dv->dmabuf ? "yes" : "no",
             dv->gdr ? "yes" : "no");
}

/* ---- pointers, memory -------------------------------------------------------------------- */

static int hc_cuda_device_index(CUdevice d)
{
    for (int i = 0; i < hc_cuda.ndev; i++)
        if (hc_cuda.dev[i].dev == d) return i;
    return -1;
}

/* The context for a call that names no device: the caller's, else device 0's. */
static hcomm_status_t hc_cuda_enter_any(hc_cuda_ctx_save_t *save)
{
    CUcontext cur = NULL;
    save->pushed = false;
    if (hc_cuda.fn.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur) return HCOMM_OK;
    return hc_cuda_ctx_enter(hc_cuda.dev[0].primary, save);
}

static hcomm_status_t hc_cuda_query(const void *ptr, hc_mem_attr_t *attr_p)
{
    /* Every slot zeroed and 8 bytes wide: the driver writes 4 (memory type,
     * ordinal), 8 (id, address, size) or a bool (managed); little-endian
     * reads of the low bytes are right for each. Unknown memory: all 0. */
    int attrs[6] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                    CU_POINTER_ATTRIBUTE_BUFFER_ID,   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                    CU_POINTER_ATTRIBUTE_RANGE_SIZE,  CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned long long v[6] = {0};
    void *data[6] = {&v[0], &v[1], &v[2], &v[3], &v[4], &v[5]};
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_enter_any(&save);
    if (st != HCOMM_OK) return st;
    CUresult r = hc_cuda.fn.cuPointerGetAttributes(6, attrs, data, (CUdeviceptr)(uintptr_t)ptr);
    hc_cuda_ctx_leave(&save);
    if (r != CUDA_SUCCESS) return hc_cuda_fail(r, "cuPointerGetAttributes(%p)", ptr);
    unsigned type = (unsigned)v[0];
    bool managed = (v[5] & 0xff) != 0;
    *attr_p = (hc_mem_attr_t){.type = HC_MEM_HOST, .device = -1};
    if (type == CU_MEMORYTYPE_HOST && !managed) { /* registered host memory */
        attr_p->base = (uintptr_t)v[3];
        attr_p->length = (size_t)v[4];
        return HCOMM_OK;
    }
    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED && !managed)
        return HCOMM_OK; /* unknown to CUDA: plain host memory */
    attr_p->type = managed || type == CU_MEMORYTYPE_UNIFIED ? HC_MEM_MANAGED : HC_MEM_DEVICE;
    attr_p->device = (int)(int32_t)(uint32_t)v[1];
    attr_p->alloc_id = v[2];
    attr_p->base = (uintptr_t)v[3];
    attr_p->length = (size_t)v[4];
    if (attr_p->device < 0 || attr_p->device >= hc_cuda.ndev) {
        int idx = hc_cuda_device_index((CUdevice)attr_p->device);
        attr_p->device = idx >= 0 ? idx : 0;
    }
    return HCOMM_OK;
}

static hcomm_status_t hc_cuda_alloc(int device, size_t len, hc_mem_type_t type, void **ptr_p)
{
    if (device < 0 || device >= hc_cuda.ndev || len == 0 ||
        (type != HC_MEM_DEVICE && type != HC_MEM_MANAGED))
        return hc_error(HCOMM_ERR_INVALID, "cuda alloc: %s",
                        len == 0 ? "len is 0"
                        : type != HC_MEM_DEVICE && type != HC_MEM_MANAGED
                            ? "type must be device or managed"
                            : "no such device");
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_ctx_enter(hc_cuda_ctx_for(device), &save);
    if (st != HCOMM_OK) return st;
    CUdeviceptr p = 0;
    CUresult r = type == HC_MEM_DEVICE
                     ? hc_cuda.fn.cuMemAlloc(&p, len)
                     : hc_cuda.fn.cuMemAllocManaged(&p, len, CU_MEM_ATTACH_GLOBAL);
    hc_cuda_ctx_leave(&save);
    if (r != CUDA_SUCCESS)
        return hc_cuda_fail(r, "%s(%zu bytes) on device %d",
                            type == HC_MEM_DEVICE ? "cuMemAlloc" : "cuMemAllocManaged", len,
                            device);
    *ptr_p = (void *)(uintptr_t)p;
    return HCOMM_OK;
}

static hcomm_status_t hc_cuda_free(void *ptr)
{
    if (!ptr) return HCOMM_OK;
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_enter_any(&save);
    if (st != HCOMM_OK) return st;
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r = hc_cuda.fn.cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)ptr);
    if (r == CUDA_SUCCESS) r = hc_cuda.fn.cuMemFree((CUdeviceptr)(uintptr_t)ptr);
    hc_cuda_ctx_leave(&save);
    if (r != CUDA_SUCCESS) return hc_cuda_fail(r, "cuMemFree(%p)", ptr);
    /* after the free: a query that raced with it is dropped here */
    hc_gpu_range_freed((uintptr_t)base, size);
    return HCOMM_OK;
}

static hcomm_status_t hc_cuda_host_register(void *ptr, size_t len)
{
    if (!ptr || !len)
        return hc_error(HCOMM_ERR_INVALID, "cuda host_register: %s",
                        ptr ? "len is 0" : "ptr is NULL");
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_enter_any(&save);
    if (st != HCOMM_OK) return st;
    CUresult r = hc_cuda.fn.cuMemHostRegister(
        ptr, len, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    hc_cuda_ctx_leave(&save);
    if (r != CUDA_SUCCESS) return hc_cuda_fail(r, "cuMemHostRegister(%p, %zu)", ptr, len);
    return HCOMM_OK;
}

static hcomm_status_t hc_cuda_host_unregister(void *ptr)
{
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_enter_any(&save);
    if (st != HCOMM_OK) return st;
    CUresult r = hc_cuda.fn.cuMemHostUnregister(ptr);
    hc_cuda_ctx_leave(&save);
    if (r != CUDA_SUCCESS) return hc_cuda_fail(r, "cuMemHostUnregister(%p)", ptr);
    return HCOMM_OK;
}

const hc_gpu_ops_t hc_gpu_cuda_ops = {
    .name = "cuda",
    .init = hc_cuda_init,
    .fini = hc_cuda_fini,
    .device_count = hc_cuda_device_count,
    .device_describe = hc_cuda_device_describe,
    .query = hc_cuda_query,
    .alloc = hc_cuda_alloc,
    .free = hc_cuda_free,
    .copy_async = hc_cuda_copy_async,
    .reduce_async = hc_cuda_reduce_async,
    .stream_create = hc_cuda_stream_create,
    .stream_destroy = hc_cuda_stream_destroy,
    .stream_synchronize = hc_cuda_stream_synchronize,
    .stream_wait_event = hc_cuda_stream_wait_event,
    .event_create = hc_cuda_event_create,
    .event_record = hc_cuda_event_record,
    .event_query = hc_cuda_event_query,
    .event_synchronize = hc_cuda_event_synchronize,
    .event_destroy = hc_cuda_event_destroy,
    .wait_value32 = hc_cuda_wait_value32,
    .write_value32 = hc_cuda_write_value32,
    .ipc_export = hc_cuda_ipc_export,
    .ipc_import = hc_cuda_ipc_import,
    .ipc_close = hc_cuda_ipc_close,
    .dmabuf_fd = hc_cuda_dmabuf_fd,
    .host_register = hc_cuda_host_register,
    .host_unregister = hc_cuda_host_unregister,
};

__attribute__((constructor)) static void hc_cuda_glue_set(void)
{
    hc_gpu_cuda_glue = &hc_gpu_cuda_ops;
}
