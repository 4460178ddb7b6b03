/*
 * The cuda backend's IPC and dmabuf (docs/gpu.md, "CUDA backend").
 *
 * Export: an allocation made by the VMM API (cuMemCreate: a
 * cuMemRetainAllocationHandle on it succeeds) is exported as a POSIX file
 * descriptor (cuMemExportToShareableHandle), for which it must have been
 * created with that handle type; anything else (cuMemAlloc, cudaMalloc) by
 * the legacy cuIpcGetMemHandle, 64 opaque bytes. Either way the handle
 * names the whole allocation (cuMemGetAddressRange) and the offset of the
 * exported pointer in it.
 *
 * Import: an fd by cuMemImportFromShareableHandle, a reserved address range,
 * cuMemMap and cuMemSetAccess (read-write for the importing device); bytes
 * by cuIpcOpenMemHandle. Each import is kept in a list so that ipc_close
 * undoes it the same way, and reports its range freed to the memory-type
 * cache. The per-peer cache of imports belongs to the engine's IPC path.
 */
#include "gpu/cuda/cuda_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct hc_cuda_import {
    struct hc_cuda_import *next;
    CUdeviceptr base;
    size_t length;
    bool vmm;
    CUmemGenericAllocationHandle handle;
    CUcontext ctx;
} hc_cuda_import_t;

static hc_cuda_import_t *hc_cuda_imports; /* under hc_cuda.lock */

hcomm_status_t hc_cuda_ipc_export(const void *ptr, hc_gpu_ipc_handle_t *h_p)
{
    hc_mem_attr_t a;
    hcomm_status_t st = hc_gpu_cuda_ops.query(ptr, &a);
    if (st != HCOMM_OK) return st;
    if (a.type != HC_MEM_DEVICE)
        return hc_error(HCOMM_ERR_INVALID, "cuda ipc_export: %p is %s memory, not device memory",
                        ptr, hc_mem_type_name(a.type));
    hc_cuda_ctx_save_t save;
    if ((st = hc_cuda_ctx_enter(hc_cuda_ctx_for(a.device), &save)) != HCOMM_OK) return st;
    hc_gpu_ipc_handle_t h = {.fd = -1, .device = a.device, .alloc_id = a.alloc_id};
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r = hc_cuda.fn.cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)ptr);
    CUmemGenericAllocationHandle ah;
    if (r != CUDA_SUCCESS) {
        st = hc_cuda_fail(r, "cuMemGetAddressRange(%p)", ptr);
    } else if (hc_cuda.fn.cuMemRetainAllocationHandle(&ah, (void *)ptr) == CUDA_SUCCESS) {
        int fd = -1;
        r = hc_cuda.fn.cuMemExportToShareableHandle(&fd, ah,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        (void)hc_cuda.fn.cuMemRelease(ah);
        if (r != CUDA_SUCCESS)
            st = hc_cuda_fail(r,
                              "cuMemExportToShareableHandle(%p, POSIX fd) (a VMM allocation "
                              "must be created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)",
                              ptr);
        h.fd = fd;
    } else {
        CUipcMemHandle ih;
        r = hc_cuda.fn.cuIpcGetMemHandle(&ih, base);
        if (r != CUDA_SUCCESS) st = hc_cuda_fail(r, "cuIpcGetMemHandle(%p)", (void *)base);
        memcpy(h.bytes, ih.reserved, sizeof(h.bytes));
    }
    hc_cuda_ctx_leave(&save);
    if (st != HCOMM_OK) return st;
    h.offset = (size_t)((uintptr_t)ptr - (uintptr_t)base);
    h.length = size;
    *h_p = h;
    return HCOMM_OK;
}

/* Maps an exported fd: reserve, map, grant access to device d. */
static hcomm_status_t hc_cuda_import_fd(const hc_gpu_ipc_handle_t *h, int d, hc_cuda_import_t *im)
{
    CUresult r = hc_cuda.fn.cuMemImportFromShareableHandle(
        &im->handle, (void *)(uintptr_t)h->fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) return hc_cuda_fail(r, "cuMemImportFromShareableHandle(fd %d)", h->fd);
    const char *step = "cuMemAddressReserve";
    if ((r = hc_cuda.fn.cuMemAddressReserve(&im->base, h->length, 0, 0, 0)) == CUDA_SUCCESS) {
        step = "cuMemMap";
        if ((r = hc_cuda.fn.cuMemMap(im->base, h->length, 0, im->handle, 0)) == CUDA_SUCCESS) {
            CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, hc_cuda.dev[d].dev},
                                   CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
            step = "cuMemSetAccess";
            if ((r = hc_cuda.fn.cuMemSetAccess(im->base, h->length, &acc, 1)) == CUDA_SUCCESS)
                return HCOMM_OK;
            (void)hc_cuda.fn.cuMemUnmap(im->base, h->length);
        }
        (void)hc_cuda.fn.cuMemAddressFree(im->base, h->length);
    }
    (void)hc_cuda.fn.cuMemRelease(im->handle);
    return hc_cuda_fail(r, "%s of an imported allocation of %zu bytes", step, h->length);
}

hcomm_status_t hc_cuda_ipc_import(const hc_gpu_ipc_handle_t *h, void **ptr_p)
{
    if (!h || !ptr_p || h->length == 0 || h->offset >= h->length)
        return hc_error(HCOMM_ERR_INVALID, "cuda ipc_import: %s",
                        !h || !ptr_p ? "NULL argument" : "offset/length do not describe a range");
    int d = h->device >= 0 && h->device < hc_cuda.ndev ? h->device : 0;
    hc_cuda_import_t *im = calloc(1, sizeof(*im));
    if (!im) return hc_error(HCOMM_ERR_NO_MEMORY, "cuda ipc_import");
    im->ctx = hc_cuda_ctx_for(d);
    im->length = h->length;
    im->vmm = h->fd >= 0;
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_ctx_enter(im->ctx, &save);
    if (st == HCOMM_OK) {
        if (im->vmm) {
            st = hc_cuda_import_fd(h, d, im);
        } else {
            CUipcMemHandle ih;
            memcpy(ih.reserved, h->bytes, sizeof(ih.reserved));
            CUresult r =
                hc_cuda.fn.cuIpcOpenMemHandle(&im->base, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
            if (r != CUDA_SUCCESS) st = hc_cuda_fail(r, "cuIpcOpenMemHandle");
        }
        hc_cuda_ctx_leave(&save);
    }
    if (st != HCOMM_OK) {
        free(im);
        return st;
    }
    pthread_mutex_lock(&hc_cuda.lock);
    im->next = hc_cuda_imports;
    hc_cuda_imports = im;
    pthread_mutex_unlock(&hc_cuda.lock);
    *ptr_p = (void *)(uintptr_t)(im->base + h->offset);
    return HCOMM_OK;
}

static hcomm_status_t hc_cuda_unimport(hc_cuda_import_t *im)
{
    hc_cuda_ctx_save_t save;
    hcomm_status_t st = hc_cuda_ctx_enter(im->ctx, &save);
    if (st != HCOMM_OK) return st;
    CUresult r;
    if (im->vmm) {
        r = hc_cuda.fn.cuMemUnmap(im->base, im->length);
        (void)hc_cuda.fn.cuMemAddressFree(im->base, im->length);
        (void)hc_cuda.fn.cuMemRelease(im->handle);
    } else {
        r = hc_cuda.fn.cuIpcCloseMemHandle(im->base);
    }
    hc_cuda_ctx_leave(&save);
    hc_gpu_range_freed((uintptr_t)im->base, im->length);
    if (r != CUDA_SUCCESS)
        return hc_cuda_fail(r, "%s", im->vmm ? "cuMemUnmap" : "cuIpcCloseMemHandle");
    return HCOMM_OK;
}

hcomm_status_t hc_cuda_ipc_close(void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    pthread_mutex_lock(&hc_cuda.lock);
    hc_cuda_import_t **at = &hc_cuda_imports;
    while (*at && !(p >= (*at)->base && p < (*at)->base + (*at)->length))
        at = &(*at)->next;
    hc_cuda_import_t *im = *at;
    if (im) *at = im->next;
    pthread_mutex_unlock(&hc_cuda.lock);
    if (!im)
        return hc_error(HCOMM_ERR_INVALID, "cuda ipc_close: %p is not an imported allocation", ptr);
    hcomm_status_t st = hc_cuda_unimport(im);
    free(im);
    return st;
}

void hc_cuda_ipc_close_all(void)
{
    pthread_mutex_lock(&hc_cuda.lock);
    hc_cuda_import_t *im = hc_cuda_imports;
    hc_cuda_imports = NULL;
    pthread_mutex_unlock(&hc_cuda.lock);
    while (im) {
        hc_cuda_import_t *next = im->next;
        (void)hc_cuda_unimport(im);
        free(im);
        im = next;
    }
}

hcomm_status_t hc_cuda_dmabuf_fd(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p)
{
    hc_mem_attr_t a;
    hcomm_status_t st = hc_gpu_cuda_ops.query(ptr, &a);
    if (st != HCOMM_OK) return st;
    if (a.type == HC_MEM_HOST || len == 0)
        return hc_error(HCOMM_ERR_INVALID, "cuda dmabuf_fd: %s",
                        len ? "not device memory" : "len is 0");
    if (!hc_cuda.dev[a.device].dmabuf)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "cuda dmabuf_fd: device %d does not support dma_buf "
                        "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: kernel or driver too old)",
                        a.device);
    /* the range must be aligned to the host page size */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)ptr & ~(page - 1);
    size_t span = (((uintptr_t)ptr + len + page - 1) & ~(page - 1)) - start;
    hc_cuda_ctx_save_t save;
    if ((st = hc_cuda_ctx_enter(hc_cuda_ctx_for(a.device), &save)) != HCOMM_OK) return st;
    int fd = -1;
    CUresult r = hc_cuda.fn.cuMemGetHandleForAddressRange(&fd, (CUdeviceptr)start, span,
                                                          CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    hc_cuda_ctx_leave(&save);
    if (r != CUDA_SUCCESS)
        return hc_cuda_fail(r, "cuMemGetHandleForAddressRange(%p, %zu bytes, DMA_BUF_FD)",
                            (void *)start, span);
    *fd_p = fd;
    *offset_p = (uint64_t)((uintptr_t)ptr - start);
    return HCOMM_OK;
}
