/*
 * The GPU layer (internal): what kind of memory a buffer is, one ops table a
 * GPU backend fills, and the one dispatch that moves and combines bytes
 * whatever memory they are in. Between base/ and mem/ in the layer order:
 * it uses base/ (status, log, config, the reduction kernels) and nothing
 * above; coll/ and core/ will reach the device only through it and never
 * name CUDA. docs/gpu.md has the design.
 *
 * Backends: "model" (gpu/model/, a software device in the test library
 * only, -DHCOMM_GPU_MODEL=ON, selected by HCOMM_GPU_MODEL=1) and, to come,
 * "cuda" (the driver API through dlopen("libcuda.so.1")). With no backend
 * every buffer is host memory and the dispatch is memcpy and base/reduce.
 *
 * The table's shape follows CUDA's driver API so that the cuda backend is a
 * thin wrapper: query is cuPointerGetAttributes (MEMORY_TYPE, DEVICE_ORDINAL,
 * BUFFER_ID, RANGE_START_ADDR, RANGE_SIZE, IS_MANAGED); copy_async is
 * cuMemcpyAsync on unified addresses; streams and events are CUstream and
 * CUevent; wait_value32 / write_value32 are cuStreamWaitValue32 (GEQ) and
 * cuStreamWriteValue32; ipc_export is cuMemExportToShareableHandle (POSIX
 * fd) or cuIpcGetMemHandle (64 opaque bytes); dmabuf_fd is
 * cuMemGetHandleForAddressRange(DMA_BUF_FD); host_register is
 * cuMemHostRegister.
 */
#ifndef HC_GPU_H
#define HC_GPU_H

#include "base/hc_base.h"

/* ---- memory types ------------------------------------------------------ */

typedef enum {
    HC_MEM_HOST,    /* the CPU may read and write it (pageable or pinned) */
    HC_MEM_DEVICE,  /* GPU memory: the CPU must never touch it */
    HC_MEM_MANAGED, /* unified (managed) memory: moved by the backend, never by the CPU here */
    HC_MEM_TYPE_COUNT
} hc_mem_type_t;

/* What a pointer is. For device and managed memory: the allocation that
 * holds it ([base, base + length), its id, unique in this process for the
 * life of the process: CUDA's BUFFER_ID). For host memory: device -1,
 * alloc_id 0, base and length those of a host_register'ed range holding the
 * pointer, or 0 when the backend knows nothing of it (plain host memory). */
typedef struct {
    hc_mem_type_t type;
    int device;
    uint64_t alloc_id;
    uintptr_t base;
    size_t length;
} hc_mem_attr_t;

const char *hc_mem_type_name(hc_mem_type_t type); /* "host", "device", "managed" */

/* ---- the backend's ops table ------------------------------------------- */

/* Opaque handles: for cuda a CUstream and a CUevent themselves. */
typedef struct hc_gpu_stream *hc_gpu_stream_t;
typedef struct hc_gpu_event *hc_gpu_event_t;

#define HC_GPU_IPC_BYTES 64 /* CU_IPC_HANDLE_SIZE */

/* An exported allocation, what a peer process needs to map it. A handle is
 * either a file descriptor (fd >= 0: the model's memfd, CUDA's POSIX-fd
 * export; pass it with SCM_RIGHTS and put the received fd here before
 * import) or opaque bytes (fd = -1: CUDA's legacy cuIpcMemHandle). It names
 * the whole allocation (length bytes, the exporter's alloc_id) and where
 * the exported pointer lies in it (offset): import returns that pointer. */
typedef struct {
    int fd;
    int device;
    uint64_t alloc_id;
    size_t offset;
    size_t length;
    uint8_t bytes[HC_GPU_IPC_BYTES];
} hc_gpu_ipc_handle_t;

/*
 * One backend. Every op returns HCOMM_OK or a status with hc_error()'s
 * message naming the operation; _async ops enqueue on the stream and
 * return, their failures surface at the next event_query / synchronize on
 * it. Pointers are unified addresses: a copy's src and dst may each be host
 * or device memory (as cuMemcpyAsync with unified addressing).
 */
typedef struct hc_gpu_ops {
    const char *name; /* "model", "cuda" */

    /* Open the backend (false why: the reason it cannot run here). */
    hcomm_status_t (*init)(char *why, size_t why_len);
    void (*fini)(void);
    int (*device_count)(void);
    /* One line about device d ("model0: 1 GiB, memfd-backed"). */
    void (*device_describe)(int device, char *buf, size_t len);

    /* Pointer attributes (cuPointerGetAttributes). Memory the backend does
     * not know is HOST with base 0. */
    hcomm_status_t (*query)(const void *ptr, hc_mem_attr_t *attr_p);

    /* type DEVICE (cuMemAlloc) or MANAGED (cuMemAllocManaged) on device. */
    hcomm_status_t (*alloc)(int device, size_t len, hc_mem_type_t type, void **ptr_p);
    /* Frees what alloc returned; the backend calls hc_gpu_range_freed()
     * before the address can be handed out again. */
    hcomm_status_t (*free)(void *ptr);

    hcomm_status_t (*copy_async)(void *dst, const void *src, size_t n, hc_gpu_stream_t s);
    /* dst[i] = op(dst[i], src[i]) for i < count, a kernel on the device: every
     * dtype and op of include/hcomm.h with base/reduce.h's results (fp16 and
     * bf16 through fp32, NaNs canonical); for HCOMM_AVG avg_div as in
     * hc_reduce() (0: the plain sum, an intermediate step). */
    hcomm_status_t (*reduce_async)(void *dst, const void *src, size_t count, hcomm_dtype_t dtype,
                                   hcomm_op_t op, int avg_div, hc_gpu_stream_t s);

    hcomm_status_t (*stream_create)(int device, hc_gpu_stream_t *s_p);
    hcomm_status_t (*stream_destroy)(hc_gpu_stream_t s);
    /* Blocks until everything enqueued on s is done (no deadline, as CUDA:
     * the dispatch waits through events instead). */
    hcomm_status_t (*stream_synchronize)(hc_gpu_stream_t s);
    /* s waits for the work e captured at its latest record (cuStreamWaitEvent). */
    hcomm_status_t (*stream_wait_event)(hc_gpu_stream_t s, hc_gpu_event_t e);

    hcomm_status_t (*event_create)(hc_gpu_event_t *e_p);
    /* Captures the work enqueued on s so far (a new record replaces the last). */
    hcomm_status_t (*event_record)(hc_gpu_event_t e, hc_gpu_stream_t s);
    /* HCOMM_OK: the captured work is done (or e was never recorded);
     * HCOMM_IN_PROGRESS: not yet; an error: that work failed. */
    hcomm_status_t (*event_query)(hc_gpu_event_t e);
    hcomm_status_t (*event_synchronize)(hc_gpu_event_t e);
    hcomm_status_t (*event_destroy)(hc_gpu_event_t e);

    /* Stream memory operations on a 32-bit word in host_register'ed (pinned)
     * host memory or device memory: the stream waits until
     * (int32_t)(*addr - value) >= 0 (CU_STREAM_WAIT_VALUE_GEQ), or stores value
     * in stream order. */
    hcomm_status_t (*wait_value32)(hc_gpu_stream_t s, uint32_t *addr, uint32_t value);
    hcomm_status_t (*write_value32)(hc_gpu_stream_t s, uint32_t *addr, uint32_t value);

    /* IPC. export: a handle for the allocation holding ptr; its fd (if any)
     * is the caller's to close once sent. import: maps a peer's allocation
     * in this process, returns the exported pointer (the handle's fd stays
     * the caller's); ipc_close unmaps it (and reports the range freed). */
    hcomm_status_t (*ipc_export)(const void *ptr, hc_gpu_ipc_handle_t *h_p);
    hcomm_status_t (*ipc_import)(const hc_gpu_ipc_handle_t *h, void **ptr_p);
    hcomm_status_t (*ipc_close)(void *ptr);

    /* A dmabuf fd for a range of device memory (for ibv_reg_dmabuf_mr): the
     * fd (the caller's to close) covers the range, which starts offset_p
     * bytes into it. */
    hcomm_status_t (*dmabuf_fd)(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p);

    /* Pins host memory for the device (cuMemHostRegister, portable and
     * device-mapped): staging pools and the stream memory ops' flags. */
    hcomm_status_t (*host_register)(void *ptr, size_t len);
    hcomm_status_t (*host_unregister)(void *ptr);
} hc_gpu_ops_t;

/* ---- the registry ------------------------------------------------------ */

/* The model's table where it is linked in (the test library: its
 * constructor sets it); NULL in libhcomm.so and libhcomm.a, where
 * HCOMM_GPU_MODEL=1 is refused by name. */
extern const hc_gpu_ops_t *hc_gpu_model_glue;
/* The cuda backend's table (gpu/cuda/: the driver API by dlopen, in every
 * build), set by its constructor, as the model's glue: the registry reaches
 * it through this pointer, so gpu/ does not call into gpu/cuda/. */
extern const hc_gpu_ops_t *hc_gpu_cuda_glue;

/* Chooses and opens the backend: HCOMM_GPU_MODEL=1 the model (refused where
 * it is not built in), otherwise none (the cuda backend comes next). Reads
 * its knobs from the environment (hc_config_env), so it works before
 * hcomm_init. Idempotent; hc_gpu_fini closes it (and frees the dispatch's
 * streams) so that a later init chooses again. */
hcomm_status_t hc_gpu_init(void);
void hc_gpu_fini(void);
/* The active backend, NULL when every buffer is host memory. */
const hc_gpu_ops_t *hc_gpu_backend(void);
/* True while a backend is active (set by hc_gpu_init, cleared by
 * hc_gpu_fini): the engine's entry points test it, one well-predicted
 * branch, before they look up any memory type (api/api_stage.c). */
extern bool hc_gpu_on;
/* Test machinery only: the model sets it under HCOMM_GPU_MODEL_NO_STAGE=1
 * (a knob of the test library, never of libhcomm), and the entry points
 * then pass device buffers on unstaged, so that a test proves the model
 * catches a path that touches device memory with the CPU. */
extern bool hc_gpu_no_stage;

/* One line for hcomm_info: the backend and its devices, or why none. */
void hc_gpu_describe(char *buf, size_t len);

/* ---- memory types, cached ---------------------------------------------- */

/* What [ptr, ptr + len) is. Device and managed ranges are cached per
 * allocation (a sorted array, looked up by address); host memory is asked
 * of the backend each time (no backend: host at once). A range that runs
 * past the end of its device allocation is ERR_INVALID, naming both. */
hcomm_status_t hc_gpu_mem_type(const void *ptr, size_t len, hc_mem_attr_t *attr_p);
/* Called by a backend when [base, base + len) stops being what it was (a
 * free, an IPC close): cache entries that overlap it are dropped. */
void hc_gpu_range_freed(uintptr_t base, size_t len);
/* Who else must forget a freed range: mem/'s registration cache (device
 * memory registered with a NIC by dmabuf) sets it at hc_mem_init. It is
 * called by hc_gpu_range_freed, under the backend's locks: it must only
 * unlink records (no deregistration, no backend call). NULL: nobody. */
extern void (*hc_gpu_free_listener)(uintptr_t base, size_t len);
/* Cache counters (tests, stats): lookups answered from the cache, and
 * backend queries. */
void hc_gpu_cache_counters(uint64_t *hits_p, uint64_t *queries_p);

/* ---- counters ---------------------------------------------------------- */

/* Device-memory traffic since hcomm_init (the HCOMM_STATS report, tests;
 * docs/observability.md). Plain increments by the thread inside an hcomm
 * call (one at a time), zeroed by hc_stats_init.
 *   staging (api/api_stage*.c): copies and bytes from device memory into
 *   host staging (d2h) and from host staging back to device memory (h2d);
 *   calls staged whole, pipelined calls (every rank's, host buffers too:
 *   they are chunked alike, with no copies), those of them with a device
 *   buffer here, and their chunks;
 *   staging buffers (api/api_stage_mem.c): buffers made, calls served by a
 *   kept buffer, host_register calls that pinned a buffer and their bytes,
 *   registrations refused (the buffer stays pageable);
 *   dev_reduces: reductions the dispatch (hc_gpu_reduce) ran on a device;
 *   node collectives (coll/node_device.c): calls with a device buffer here
 *   run in the node region without the API's staging, those of them that
 *   went by IPC, and the bytes this rank reduced by IPC (allreduce: its
 *   slice; reduce_scatter: its block). */
typedef struct {
    uint64_t d2h_copies, d2h_bytes, h2d_copies, h2d_bytes;
    uint64_t whole_calls, pipe_calls, pipe_dev_calls, pipe_chunks;
    uint64_t buf_allocs, buf_reuses, pin_regs, pin_bytes, pin_failures;
    uint64_t dev_reduces, dev_reduce_bytes;
    uint64_t node_dev_calls, node_ipc_calls, node_ipc_bytes;
} hc_gpu_stats_t;
extern hc_gpu_stats_t hc_gpu_stats;

/* ---- the dispatch ------------------------------------------------------ */

/* Synchronous copy and reduction, for any memory: both sides host (attr
 * NULL or type HOST): memcpy / hc_reduce on this thread; otherwise the
 * backend on the dispatch's own stream for the device involved, then an
 * event waited for with a deadline (HCOMM_TIMEOUT). Errors name the
 * backend, the device and the operation. reduce: dst[i] = op(dst[i],
 * src[i]), avg_div as in hc_reduce(). */
hcomm_status_t hc_gpu_copy(void *dst, const hc_mem_attr_t *dst_attr, const void *src,
                           const hc_mem_attr_t *src_attr, size_t n);
hcomm_status_t hc_gpu_reduce(void *dst, const hc_mem_attr_t *dst_attr, const void *src,
                             const hc_mem_attr_t *src_attr, size_t count, hcomm_dtype_t dtype,
                             hcomm_op_t op, int avg_div);

#endif /* HC_GPU_H */
