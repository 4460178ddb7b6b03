/*
 * The cuda backend's streams, events, copies, kernels and stream memory
 * operations (docs/gpu.md, "CUDA backend").
 *
 * A stream remembers the context it was made in (the caller's on that
 * device, or the primary one), and every call on it runs in that context.
 * An event is made at its first record, in the recording stream's context
 * (made anew if a later record is on another context's stream), so that
 * event_create needs no device and an event never recorded is complete.
 *
 * Kernels: the embedded fatbin (cuda_fatbin.c) is loaded into a device's
 * primary context with cuModuleLoadData at the first reduction there, and
 * each kernel is looked up by name (hc_reduce_<dtype>_<op>). A build without
 * nvcc has no fatbin: reduce_async fails with ERR_UNSUPPORTED saying so, and
 * the engine stages the reduction through host memory.
 *
 * wait_value32 is cuStreamWaitValue32(GEQ). Where the device refuses stream
 * memory operations (CUDA_ERROR_NOT_SUPPORTED at the first try) it falls
 * back, for good on that device, to the hc_wait_geq32 kernel: one thread
 * spinning on the word (it holds one SM slot while it waits).
 */
#include "gpu/cuda/cuda_int.h"
#include "base/dtype.h"

#include <stdio.h>
#include <stdlib.h>

struct hc_gpu_stream {
    CUstream s;
    CUcontext ctx;
    int device;
};

struct hc_gpu_event {
    CUevent e; /* NULL until the first record */
    CUcontext ctx;
};

hcomm_status_t hc_cuda_stream_create(int device, hc_gpu_stream_t *s_p)
{
    if (device < 0 || device >= hc_cuda.ndev)
        return hc_error(HCOMM_ERR_INVALID, "cuda stream_create: device %d out of range (%d)",
                        device, hc_cuda.ndev);
    struct hc_gpu_stream *s = calloc(1, sizeof(*s));
    if (!s) return hc_error(HCOMM_ERR_NO_MEMORY, "cuda stream_create");
    s->ctx = hc_cuda_ctx_for(device);
    s->device = device;
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_ctx_enter(s->ctx, &save);
    if (st == HCOMM_OK) {
        CUresult r = hc_cuda.fn.cuStreamCreate(&s->s, CU_STREAM_NON_BLOCKING);
        hc_cuda_ctx_leave(&save);
        if (r != CUDA_SUCCESS) st = hc_cuda_fail(r, "cuStreamCreate on device %d", device);
    }
    if (st != HCOMM_OK) {
        free(s);
        return st;
    }
    *s_p = s;
    return HCOMM_OK;
}

hcomm_status_t hc_cuda_stream_destroy(hc_gpu_stream_t s)
{
    if (!s) return HCOMM_OK;
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_ctx_enter(s->ctx, &save);
    if (st == HCOMM_OK) {
        CUresult r = hc_cuda.fn.cuStreamDestroy(s->s);
        hc_cuda_ctx_leave(&save);
        if (r != CUDA_SUCCESS) st = hc_cuda_fail(r, "cuStreamDestroy");
    }
    free(s);
    return st;
}

hcomm_status_t hc_cuda_stream_synchronize(hc_gpu_stream_t s)
{
    CUresult r = hc_cuda.fn.cuStreamSynchronize(s->s);
    return r == CUDA_SUCCESS ? HCOMM_OK
                             : hc_cuda_fail(r, "cuStreamSynchronize on device %d", s->device);
}

hcomm_status_t hc_cuda_stream_wait_event(hc_gpu_stream_t s, hc_gpu_event_t e)
{
    if (!e->e) return HCOMM_OK; /* never recorded: nothing to wait for */
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_ctx_enter(s->ctx, &save);
    if (st != HCOMM_OK) return st;
    CUresult r = hc_cuda.fn.cuStreamWaitEvent(s->s, e->e, 0);
    hc_cuda_ctx_leave(&save);
    return r == CUDA_SUCCESS ? HCOMM_OK : hc_cuda_fail(r, "cuStreamWaitEvent");
}

hcomm_status_t hc_cuda_event_create(hc_gpu_event_t *e_p)
{
    struct hc_gpu_event *e = calloc(1, sizeof(*e));
    if (!e) return hc_error(HCOMM_ERR_NO_MEMORY, "cuda event_create");
    *e_p = e;
    return HCOMM_OK;
}

hcomm_status_t hc_cuda_event_record(hc_gpu_event_t e, hc_gpu_stream_t s)
{
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_ctx_enter(s->ctx, &save);
    if (st != HCOMM_OK) return st;
    CUresult r = CUDA_SUCCESS;
    if (e->e && e->ctx != s->ctx) {
        (void)hc_cuda.fn.cuEventDestroy(e->e);
        e->e = NULL;
    }
    if (!e->e && (r = hc_cuda.fn.cuEventCreate(&e->e, CU_EVENT_DISABLE_TIMING)) == CUDA_SUCCESS)
        e->ctx = s->ctx;
    if (r == CUDA_SUCCESS) r = hc_cuda.fn.cuEventRecord(e->e, s->s);
    hc_cuda_ctx_leave(&save);
    return r == CUDA_SUCCESS ? HCOMM_OK : hc_cuda_fail(r, "cuEventRecord on device %d", s->device);
}

hcomm_status_t hc_cuda_event_query(hc_gpu_event_t e)
{
    if (!e->e) return HCOMM_OK;
    CUresult r = hc_cuda.fn.cuEventQuery(e->e);
    if (r == CUDA_SUCCESS) return HCOMM_OK;
    if (r == CUDA_ERROR_NOT_READY) return HCOMM_IN_PROGRESS;
    return hc_cuda_fail(r, "cuEventQuery (the work before the event failed)");
}

hcomm_status_t hc_cuda_event_synchronize(hc_gpu_event_t e)
{
    if (!e->e) return HCOMM_OK;
    CUresult r = hc_cuda.fn.cuEventSynchronize(e->e);
    return r == CUDA_SUCCESS ? HCOMM_OK : hc_cuda_fail(r, "cuEventSynchronize");
}

hcomm_status_t hc_cuda_event_destroy(hc_gpu_event_t e)
{
    if (!e) return HCOMM_OK;
    CUresult r = e->e ? hc_cuda.fn.cuEventDestroy(e->e) : CUDA_SUCCESS;
    free(e);
    return r == CUDA_SUCCESS ? HCOMM_OK : hc_cuda_fail(r, "cuEventDestroy");
}

hcomm_status_t hc_cuda_copy_async(void *dst, const void *src, size_t n, hc_gpu_stream_t s)
{
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_ctx_enter(s->ctx, &save);
    if (st != HCOMM_OK) return st;
    CUresult r =
        hc_cuda.fn.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n, s->s);
    hc_cuda_ctx_leave(&save);
    return r == CUDA_SUCCESS ? HCOMM_OK
                             : hc_cuda_fail(r, "cuMemcpyAsync(%p <- %p, %zu bytes)", dst, src, n);
}

/* ---- kernels ----------------------------------------------------------------------------- */

/* Loads the fatbin into device d's module and looks up every kernel. Called
 * with hc_cuda.lock held and d's primary context current. */
static hcomm_status_t hc_cuda_module_load(hc_cuda_dev_t *dv, int d)
{
    CUresult r = hc_cuda.fn.cuModuleLoadData(&dv->module, hc_cuda_fatbin);
    if (r != CUDA_SUCCESS) {
        dv->module = NULL;
        return hc_cuda_fail(r,
                            "cuModuleLoadData of hcomm's kernels (%zu bytes: %s) on device %d "
                            "(sm_%d%d)",
                            hc_cuda_fatbin_size, hc_cuda_fatbin_archs, d, dv->cc_major,
                            dv->cc_minor);
    }
    for (int t = 0; t < HCOMM_DTYPE_COUNT; t++)
        for (int o = 0; o < HCOMM_OP_COUNT; o++) {
            char name[64];
            snprintf(name, sizeof(name), "hc_reduce_%s_%s", hc_dtype_name((hcomm_dtype_t)t),
                     hc_op_name((hcomm_op_t)o));
            if ((r = hc_cuda.fn.cuModuleGetFunction(&dv->reduce[t][o], dv->module, name)))
                return hc_cuda_fail(r, "cuModuleGetFunction(%s)", name);
        }
    if ((r = hc_cuda.fn.cuModuleGetFunction(&dv->wait_kernel, dv->module, "hc_wait_geq32")))
        return hc_cuda_fail(r, "cuModuleGetFunction(hc_wait_geq32)");
    return HCOMM_OK;
}

/* Device s->device's module, loaded at first use (in the stream's context:
 * kernels launch on streams of the context their module is in). */
static hcomm_status_t hc_cuda_module(hc_gpu_stream_t s, hc_cuda_dev_t **dv_p)
{
    hc_cuda_dev_t *dv = &hc_cuda.dev[s->device];
    if (!hc_cuda_fatbin_size)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "cuda: GPU reductions are unavailable: this libhcomm was built without "
                        "nvcc (no kernels; device buffers are reduced through host staging)");
    if (s->ctx != dv->primary)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "cuda: hcomm's kernels run on streams of the primary context of device "
                        "%d; this stream was made in another context",
                        s->device);
    hcomm_status_t st = HCOMM_OK;
    pthread_mutex_lock(&hc_cuda.lock);
    if (!dv->module && !dv->module_failed) {
        hc_cuda_ctx_save_t save;
        if ((st = hc_cuda_ctx_enter(s->ctx, &save)) == HCOMM_OK) {
            st = hc_cuda_module_load(dv, s->device);
            hc_cuda_ctx_leave(&save);
        }
        dv->module_failed = st != HCOMM_OK;
    } else if (dv->module_failed) {
        st = hc_error(HCOMM_ERR_UNSUPPORTED,
                      "cuda: hcomm's kernels did not load on device %d (see the first error)",
                      s->device);
    }
    pthread_mutex_unlock(&hc_cuda.lock);
    *dv_p = dv;
    return st;
}

void hc_cuda_modules_unload(void)
{
    for (int d = 0; d < hc_cuda.ndev; d++) {
        hc_cuda_dev_t *dv = &hc_cuda.dev[d];
        if (dv->module) {
            hc_cuda_ctx_save_t save;
            if (hc_cuda_ctx_enter(dv->primary, &save) == HCOMM_OK) {
                (void)hc_cuda.fn.cuModuleUnload(dv->module);
                hc_cuda_ctx_leave(&save);
            }
        }
        dv->module = NULL;
        dv->module_failed = false;
        dv->memops = 0;
    }
}

hcomm_status_t hc_cuda_reduce_async(void *dst, const void *src, size_t count, hcomm_dtype_t dtype,
                                    hcomm_op_t op, int avg_div, hc_gpu_stream_t s)
{
    if ((unsigned)dtype >= HCOMM_DTYPE_COUNT || (unsigned)op >= HCOMM_OP_COUNT || avg_div < 0)
        return hc_error(HCOMM_ERR_INVALID, "cuda reduce: dtype %d / op %d / avg_div %d", (int)dtype,
                        (int)op, avg_div);
    if (count == 0) return HCOMM_OK;
    hc_cuda_dev_t *dv;
    hcomm_status_t st = hc_cuda_module(s, &dv);
    if (st != HCOMM_OK) return st;
    /* 256 threads a block, each 16 bytes a step; at most 8 blocks per SM
     * (the grid strides over the rest) */
    size_t es = hc_dtype_size(dtype), per_block = 256 * (16 / es);
    size_t blocks = (count + per_block - 1) / per_block;
    size_t most = (size_t)(dv->sms > 0 ? dv->sms : 1) * 8;
    if (blocks > most) blocks = most;
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, sp = (CUdeviceptr)(uintptr_t)src;
    unsigned long long n = count;
    void *params[] = {&d, &sp, &n, &avg_div};
    hc_cuda_ctx_save_t save;
    if ((st = hc_cuda_ctx_enter(s->ctx, &save)) != HCOMM_OK) return st;
    CUresult r = hc_cuda.fn.cuLaunchKernel(dv->reduce[dtype][op], (unsigned)blocks, 1, 1, 256, 1, 1,
                                           0, s->s, params, NULL);
    hc_cuda_ctx_leave(&save);
    if (r != CUDA_SUCCESS)
        return hc_cuda_fail(r, "cuLaunchKernel(hc_reduce_%s_%s, %zu elements)",
                            hc_dtype_name(dtype), hc_op_name(op), count);
    return HCOMM_OK;
}

/* ---- stream memory operations ------------------------------------------------------------ */

/* The device address of a word: host_register'ed host memory through
 * cuMemHostGetDevicePointer, device memory as it is. */
static CUdeviceptr hc_cuda_word(uint32_t *addr)
{
    CUdeviceptr d = 0;
    if (hc_cuda.fn.cuMemHostGetDevicePointer(&d, addr, 0) == CUDA_SUCCESS && d) return d;
    return (CUdeviceptr)(uintptr_t)addr;
}

hcomm_status_t hc_cuda_wait_value32(hc_gpu_stream_t s, uint32_t *addr, uint32_t value)
{
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_ctx_enter(s->ctx, &save);
    if (st != HCOMM_OK) return st;
    hc_cuda_dev_t *dv = &hc_cuda.dev[s->device];
    CUdeviceptr w = hc_cuda_word(addr);
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    if (dv->memops >= 0) {
        r = hc_cuda.fn.cuStreamWaitValue32(s->s, w, value, CU_STREAM_WAIT_VALUE_GEQ);
        if (r == CUDA_SUCCESS) dv->memops = 1;
        if (r == CUDA_ERROR_NOT_SUPPORTED && dv->memops == 0) dv->memops = -1;
    }
    hc_cuda_ctx_leave(&save);
    if (r == CUDA_SUCCESS) return HCOMM_OK;
    if (dv->memops >= 0) return hc_cuda_fail(r, "cuStreamWaitValue32(%p >= %u)", addr, value);
    /* the fallback: the wait kernel */
    hc_cuda_dev_t *mdv;
    if ((st = hc_cuda_module(s, &mdv)) != HCOMM_OK)
        return hc_error(st,
                        "cuda: cuStreamWaitValue32 is not supported on device %d and the "
                        "wait kernel is unavailable: %s",
                        s->device, hc_error_last());
    void *params[] = {&w, &value};
    if ((st = hc_cuda_ctx_enter(s->ctx, &save)) != HCOMM_OK) return st;
    r = hc_cuda.fn.cuLaunchKernel(mdv->wait_kernel, 1, 1, 1, 32, 1, 1, 0, s->s, params, NULL);
    hc_cuda_ctx_leave(&save);
    return r == CUDA_SUCCESS ? HCOMM_OK : hc_cuda_fail(r, "cuLaunchKernel(hc_wait_geq32)");
}

hcomm_status_t hc_cuda_write_value32(hc_gpu_stream_t s, uint32_t *addr, uint32_t value)
{
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_ctx_enter(s->ctx, &save);
    if (st != HCOMM_OK) return st;
    CUresult r = hc_cuda.fn.cuStreamWriteValue32(s->s, hc_cuda_word(addr), value,
                                                 CU_STREAM_WRITE_VALUE_DEFAULT);
    hc_cuda_ctx_leave(&save);
    return r == CUDA_SUCCESS ? HCOMM_OK
                             : hc_cuda_fail(r, "cuStreamWriteValue32(%p = %u)", addr, value);
}
