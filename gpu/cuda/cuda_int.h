/*
 * What the cuda backend's files share (gpu/cuda/): the driver's functions,
 * opened at run time (cuda.c), the devices and their primary contexts, and
 * the kernels' module. Not for other layers: they use gpu/gpu.h.
 */
#ifndef HC_GPU_CUDA_INT_H
#define HC_GPU_CUDA_INT_H

#include "gpu/cuda/cuda_api.h"
#include "gpu/gpu.h"

#include <pthread.h>

#define HC_CUDA_MAX_DEVICES 16

typedef struct {
#define HC_CUDA_FN_FIELD_(name, params) CUresult(*name) params;
    HC_CUDA_FUNCS(HC_CUDA_FN_FIELD_)
#undef HC_CUDA_FN_FIELD_
} hc_cuda_fns_t;

typedef struct {
    CUdevice dev;
    CUcontext primary; /* retained at init, released at fini */
    int cc_major, cc_minor, sms;
    bool vmm, posix_fd, dmabuf, gdr;
    size_t total_mem;
    char name[96];
    /* the kernels, loaded into the primary context at first use */
    CUmodule module;
    bool module_failed;
    CUfunction reduce[HCOMM_DTYPE_COUNT][HCOMM_OP_COUNT];
    CUfunction wait_kernel;
    int memops; /* cuStreamWaitValue32: 0 untried, 1 works, -1 unsupported (the wait kernel) */
} hc_cuda_dev_t;

typedef struct {
    void *lib; /* dlopen handle */
    hc_cuda_fns_t fn;
    int driver_version;
    int ndev;
    hc_cuda_dev_t dev[HC_CUDA_MAX_DEVICES];
    pthread_mutex_t lock; /* the kernels' lazy loading, the import list */
} hc_cuda_t;

extern hc_cuda_t hc_cuda;
extern const hc_gpu_ops_t hc_gpu_cuda_ops;

/* "CUDA_ERROR_X (the driver's words)" for r. */
const char *hc_cuda_strerror(CUresult r, char *buf, size_t len);
/* hc_error(status for r, "<what>: CUDA_ERROR_X (...)"). */
hcomm_status_t hc_cuda_fail(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A context made current for a call and put back after: ctx becomes
 * current; where the thread had none, it stays (as the runtime does with a
 * primary context); where the thread had another, it is pushed and popped. */
typedef struct {
    bool pushed;
} hc_cuda_ctx_save_t;
hcomm_status_t hc_cuda_ctx_enter(CUcontext ctx, hc_cuda_ctx_save_t *save);
void hc_cuda_ctx_leave(hc_cuda_ctx_save_t *save);
/* The context to use for device d: the caller's current one where it is on
 * d, else d's primary context. */
CUcontext hc_cuda_ctx_for(int device);

/* The embedded fatbin (cuda_fatbin.c): NULL / 0 in a build without nvcc. */
extern const unsigned char *const hc_cuda_fatbin;
extern const size_t hc_cuda_fatbin_size;
extern const char hc_cuda_fatbin_archs[]; /* "sm_75 ... + PTX compute_120" or "" */

/* cuda_stream.c: streams, events, copies, kernels, stream memory ops, IPC */
hcomm_status_t hc_cuda_stream_create(int device, hc_gpu_stream_t *s_p);
hcomm_status_t hc_cuda_stream_destroy(hc_gpu_stream_t s);
hcomm_status_t hc_cuda_stream_synchronize(hc_gpu_stream_t s);
hcomm_status_t hc_cuda_stream_wait_event(hc_gpu_stream_t s, hc_gpu_event_t e);
hcomm_status_t hc_cuda_event_create(hc_gpu_event_t *e_p);
hcomm_status_t hc_cuda_event_record(hc_gpu_event_t e, hc_gpu_stream_t s);
hcomm_status_t hc_cuda_event_query(hc_gpu_event_t e);
hcomm_status_t hc_cuda_event_synchronize(hc_gpu_event_t e);
hcomm_status_t hc_cuda_event_destroy(hc_gpu_event_t e);
hcomm_status_t hc_cuda_copy_async(void *dst, const void *src, size_t n, hc_gpu_stream_t s);
hcomm_status_t hc_cuda_reduce_async(void *dst, const void *src, size_t count, hcomm_dtype_t dtype,
                                    hcomm_op_t op, int avg_div, hc_gpu_stream_t s);
hcomm_status_t hc_cuda_wait_value32(hc_gpu_stream_t s, uint32_t *addr, uint32_t value);
hcomm_status_t hc_cuda_write_value32(hc_gpu_stream_t s, uint32_t *addr, uint32_t value);
void hc_cuda_modules_unload(void);

/* cuda_ipc.c */
hcomm_status_t hc_cuda_ipc_export(const void *ptr, hc_gpu_ipc_handle_t *h_p);
hcomm_status_t hc_cuda_ipc_import(const hc_gpu_ipc_handle_t *h, void **ptr_p);
hcomm_status_t hc_cuda_ipc_close(void *ptr);
hcomm_status_t hc_cuda_dmabuf_fd(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p);
void hc_cuda_ipc_close_all(void);

#endif /* HC_GPU_CUDA_INT_H */
