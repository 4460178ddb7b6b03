/*
 * The model of a GPU (test machinery: the test objects only, with
 * -DHCOMM_GPU_MODEL=ON; selected by HCOMM_GPU_MODEL=1). Internal header
 * shared by
 *   gpu_model_mem.c     device memory (a memfd mapped twice: PROT_NONE for
 *                       the program, a private read-write alias for the
 *                       model), freed addresses re-used on purpose, pointer
 *                       attributes, IPC, dmabuf, host registration, faults,
 *                       the ops table and the glue;
 *   gpu_model_stream.c  streams (a worker thread and a FIFO each), events,
 *                       stream memory ops, the copy and reduction "kernels";
 *   gpu_model_test.c    the test API (gpu_model_test.h).
 * docs/gpu.md has the design.
 */
#ifndef HC_GPU_MODEL_H
#define HC_GPU_MODEL_H

#include "gpu/gpu.h"

#include <stdatomic.h>

/* One allocation of device or managed memory (or an imported one). Counted:
 * the table holds one reference, each queued operation one per operand, so
 * a free while work is queued leaves the alias mapped until that work is
 * done (the program's address is gone at once). */
typedef struct hc_gpu_model_alloc {
    struct hc_gpu_model_alloc *next;
    uintptr_t base; /* the program's PROT_NONE mapping (RW for managed) */
    size_t len;     /* bytes asked for */
    size_t map_len; /* len rounded up to pages: the memfd's size */
    char *alias;    /* the model's read-write mapping of the same memfd */
    int fd;         /* the memfd */
    uint64_t id;    /* allocation id, unique in this process */
    int device;
    hc_mem_type_t type;
    bool imported; /* mapped from a peer's handle (ipc_close, not free) */
    atomic_int refs;
} hc_gpu_model_alloc_t;

/* The model's faults (HCOMM_GPU_MODEL_FAULT) and counters. */
typedef struct {
    long copy_at, reduce_at, lost_after; /* 0: no such fault */
    bool ipc, no_register;
    bool dmabuf; /* every dmabuf_fd fails */
    int64_t delay_us;                 /* HCOMM_GPU_MODEL_DELAY */
    atomic_long copies, reduces, ops; /* enqueued so far */
    atomic_bool lost;
    atomic_ullong done_copies, done_bytes, done_kernels, allocs, frees, imports, registers;
} hc_gpu_model_state_t;
extern hc_gpu_model_state_t hc_gpu_model;

/* An operand of a queued operation: the address the model uses (the alias
 * for device memory, the pointer itself for host memory) and the reference
 * it holds (NULL for host memory). ERR_INVALID for freed device memory or
 * a range past the end of its allocation, naming what. */
hcomm_status_t hc_gpu_model_resolve(const void *p, size_t n, const char *what, char **addr_p,
                                    hc_gpu_model_alloc_t **a_p);
void hc_gpu_model_unref(hc_gpu_model_alloc_t *a);
/* Whether [p, p + 4) is a word a stream memory op may use: device memory
 * or host_register'ed host memory. */
bool hc_gpu_model_memop_ok(const void *p);

/* ERR_IO naming the device when it is lost (a lost:N fault), else OK. */
hcomm_status_t hc_gpu_model_check_lost(const char *what);
/* Counts one enqueued operation toward lost:N. */
void hc_gpu_model_count_op(void);

/* gpu_model_stream.c's ops and lifecycle. */
hcomm_status_t hc_gpu_model_copy_async(void *dst, const void *src, size_t n, hc_gpu_stream_t s);
hcomm_status_t hc_gpu_model_reduce_async(void *dst, const void *src, size_t count,
                                         hcomm_dtype_t dtype, hcomm_op_t op, int avg_div,
                                         hc_gpu_stream_t s);
hcomm_status_t hc_gpu_model_stream_create(int device, hc_gpu_stream_t *s_p);
hcomm_status_t hc_gpu_model_stream_destroy(hc_gpu_stream_t s);
hcomm_status_t hc_gpu_model_stream_synchronize(hc_gpu_stream_t s);
hcomm_status_t hc_gpu_model_stream_wait_event(hc_gpu_stream_t s, hc_gpu_event_t e);
hcomm_status_t hc_gpu_model_event_create(hc_gpu_event_t *e_p);
hcomm_status_t hc_gpu_model_event_record(hc_gpu_event_t e, hc_gpu_stream_t s);
hcomm_status_t hc_gpu_model_event_query(hc_gpu_event_t e);
hcomm_status_t hc_gpu_model_event_synchronize(hc_gpu_event_t e);
hcomm_status_t hc_gpu_model_event_destroy(hc_gpu_event_t e);
hcomm_status_t hc_gpu_model_wait_value32(hc_gpu_stream_t s, uint32_t *addr, uint32_t value);
hcomm_status_t hc_gpu_model_write_value32(hc_gpu_stream_t s, uint32_t *addr, uint32_t value);
/* Destroys the streams the program left (at fini). */
void hc_gpu_model_streams_fini(void);

extern const hc_gpu_ops_t hc_gpu_model_ops;

#endif /* HC_GPU_MODEL_H */
