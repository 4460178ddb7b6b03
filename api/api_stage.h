/*
 * Whole-buffer staging of device memory at the entry points (issue 32's
 * first engine slice, docs/gpu.md "The staged path"). Every collective and
 * p2p call finds the memory type of each user buffer it reads or writes,
 * once, over the exact extent the call touches. All host: the call goes on
 * as before. Any device (or managed) buffer: its bytes go through a host
 * staging chunk from the pool (hc_mem_alloc), copied in with hc_gpu_copy
 * before the host operation is posted and copied back, when it completes,
 * before the user can see it complete. Nothing below api/ ever sees a
 * device pointer, so no CPU access reaches device memory.
 *
 * It lives in api/ because it wraps whole calls (their extents are the
 * API's arguments, and a staged request is retired where the API retires
 * requests: hcomm_wait, hcomm_test, the blocking calls, hcomm_group_end).
 *
 * Large allreduce, reduce and broadcast calls (more than one chunk,
 * HCOMM_GPU_STAGE_CHUNK), and allgather, reduce_scatter, alltoall, gather
 * and scatter calls whose per-rank block is, go through the pipeline instead
 * (api_stage_pipe.c): one collective per chunk, the staging copies of the
 * neighbouring chunks overlapping each chunk's transfer.
 */
#ifndef HC_API_STAGE_H
#define HC_API_STAGE_H

#include "api/api.h"
#include "coll/coll.h"
#include "gpu/gpu.h"

typedef struct hc_api_stage hc_api_stage_t;

/* A collective with its arguments checked: hc_coll_post, staged where a
 * buffer is device memory. The caller tests hc_gpu_on first. */
hcomm_status_t hc_api_stage_coll(const hc_coll_args_t *a, struct hcomm_comm *comm,
                                 hcomm_request_t *req_p);

/* p2p: *buf_p (bytes) is looked up. Device memory that can go by GPUDirect
 * RDMA to or from peer (core/gdr.c, HCOMM_GDR) is left as is and *mem_p
 * describes it (post with hc_p2p_isend_mem / irecv_mem); other device
 * memory is replaced by a host staging buffer (a send's bytes copied in)
 * and *stg_p set; host memory changes nothing. *mem_p is HC_MEM_HOST
 * unless direct, *stg_p NULL unless staged. A failed copy revokes comm
 * (the peer fails at once instead of waiting for a message that will not
 * come); under HCOMM_GDR=1 a call that cannot go direct fails by name.
 * A send streamed to its peer (HC_GDR_PATH_STREAMED) gets host staging that
 * nothing is copied into yet: *src_p is then the device buffer and *mem_p
 * its memory (post with hc_p2p_isend_streamed, which fills the staging
 * frame by frame); else *src_p is NULL. */
hcomm_status_t hc_api_stage_p2p(const char *fn, bool recv, void **buf_p, size_t bytes,
                                struct hcomm_comm *comm, int peer, hc_api_stage_t **stg_p,
                                hc_mem_attr_t *mem_p, const void **src_p);

/* Ends a staged call whose host operation ended with st: on success the
 * outputs are copied back (a receive: only the `received` bytes), then the
 * staging is freed. Returns st, or the copy-back's failure naming the device
 * and the call. */
hcomm_status_t hc_api_stage_end(hc_api_stage_t *stg, hcomm_status_t st, size_t received);

/* A request being retired to the user (hcomm_wait, hcomm_test that says
 * done, a blocking call's own request) with status st: its staging ended. */
hcomm_status_t hc_api_stage_retire(struct hcomm_request *req, hcomm_status_t st);
static inline hcomm_status_t hc_api_stage_check(struct hcomm_request *req, hcomm_status_t st)
{
    return HC_UNLIKELY(req->stage != NULL) ? hc_api_stage_retire(req, st) : st;
}

/* hcomm_group_end: the staged blocking collectives of the group that ended
 * with st (copied back when st is OK). Returns st or the first copy-back
 * failure. */
hcomm_status_t hc_api_stage_group_end(hcomm_status_t st);

/* hcomm_finalize: frees the staging of requests never retired. */
void hc_api_stage_fini(void);

/* The staging's copies, calls and buffers are counted in hc_gpu_stats
 * (gpu/gpu.h), reported by HCOMM_STATS. hc_api_stage_counters is the
 * older view of them, since hcomm_init: calls staged (whole, and
 * pipelined with a device buffer here), bytes copied into and out of
 * staging, pipelined calls (every rank's) and their chunks. */
typedef struct {
    uint64_t calls, bytes_in, bytes_out, pipelined, chunks;
} hc_api_stage_counters_t;
void hc_api_stage_counters(hc_api_stage_counters_t *c_p);

/* ---- staging buffers (api_stage_mem.c) ------------------------------------------------------ */

/* Host staging: pool memory, host_register'ed (pinned) with the GPU
 * backend once when made, then kept for later calls. */
typedef struct hc_stage_buf {
    hc_list_t link; /* the kept list, while idle */
    char *p;        /* size bytes, 64-byte aligned */
    size_t size;    /* the size class: at least what was asked */
    bool pinned;    /* host_register'ed (false: the backend refused; pageable) */
} hc_stage_buf_t;

/* A buffer of at least bytes: a kept one of its size class, else a new one,
 * pinned. fn: the call, for errors. */
hcomm_status_t hc_stage_buf_get(const char *fn, size_t bytes, hc_stage_buf_t **b_p);
/* The call is done with b: kept (HCOMM_GPU_STAGE_KEEP), or given back. */
void hc_stage_buf_put(hc_stage_buf_t *b);
/* hcomm_finalize: every kept buffer unregistered and freed. */
void hc_stage_buf_fini(void);

/* One line for hcomm_info and HCOMM_LOG=info: the path device buffers
 * take and why (staged; the pipeline's chunk and depth; IPC and GPUDirect
 * not yet). */
void hc_api_stage_describe(char *buf, size_t len);

/* ---- the pipeline (api_stage_pipe.c) ------------------------------------------------------ */

typedef struct hc_stage_pipe hc_stage_pipe_t;

/* HCOMM_GPU_STAGE_CHUNK (bytes) and HCOMM_GPU_STAGE_DEPTH (chunks in
 * flight). The chunk must be the same on every rank (it decides how many
 * collectives a call is); the depth is this rank's own. */
extern size_t hc_stage_pipe_chunk;
extern int64_t hc_stage_pipe_depth;

/* Whether a collective goes through the pipeline: allreduce, reduce and
 * broadcast of more than one chunk, allgather, reduce_scatter, alltoall,
 * gather and scatter whose per-rank block is more than one chunk,
 * allgatherv and reduce_scatterv whose largest block is, outside groups.
 * It depends only on what every rank passes alike (kind, counts, dtype),
 * never on memory types, so every rank makes the same number of chunk
 * collectives, even one with host buffers (no copies there, only the
 * chunks; the block collectives' pieces packed by the CPU, after a vote).
 * alltoallv: never (the API votes on its largest block). fn: the call,
 * for a knob's refusal (then *fits_p is false and the status an error). */
hcomm_status_t hc_stage_pipe_fits(const char *fn, const hc_coll_args_t *a,
                                  const struct hcomm_comm *comm, bool *fits_p);

/* The vector collectives of the pipeline (allgatherv, reduce_scatterv:
 * their counts are every rank's alike, so every rank splits them alike):
 * chunk k is the same element range of every block, the ranks' blocks of
 * their own sizes (a block past its end: 0 bytes in that chunk). A rank
 * with host buffers passes its displacements to the chunk collective, so
 * it makes no copy, and there is no vote on whether. alltoallv is split
 * the same way, but its counts are each rank's own: the API votes on the
 * largest block (hc_coll_internal_max) and passes it as the span. */
static inline bool hc_stage_pipe_vector(hc_coll_kind_t k)
{
    return k == HC_COLL_ALLGATHERV || k == HC_COLL_REDUCE_SCATTERV;
}

/* The block collectives of the pipeline: a chunk is one piece of each of
 * the n blocks of a buffer (allgather, reduce_scatter, alltoall, gather,
 * scatter). A rank with host buffers packs its pieces with the CPU, so they
 * are pipelined only when some rank has device buffers (a vote). */
static inline bool hc_stage_pipe_blocks(hc_coll_kind_t k)
{
    return k == HC_COLL_ALLGATHER || k == HC_COLL_REDUCE_SCATTER || k == HC_COLL_ALLTOALL ||
           k == HC_COLL_GATHER || k == HC_COLL_SCATTER;
}

typedef struct {
    const char *fn;
    const hc_coll_args_t *a;
    struct hcomm_comm *comm;
    char *sdev, *rdev; /* the device input / output (NULL: host memory, or none) */
    hc_mem_attr_t sattr, rattr;
    bool one;    /* input and output are one buffer (in place, broadcast) */
    size_t span; /* what the chunks split where the arguments do not say it
                  * (alltoallv: the ranks' largest block, voted); 0: from them */
} hc_stage_pipe_args_t;

/* The chunk collectives a pipelined call makes. */
size_t hc_stage_pipe_nchunk(const hc_stage_pipe_args_t *pa);

/* Runs the pipeline. Blocking (req_p NULL): to the end. Non-blocking:
 * until every chunk is posted; *req_p is then the last chunk's request and
 * *p_p the pipeline, ended by hc_stage_pipe_end when that request is
 * retired (the remaining copies back happen there). */
hcomm_status_t hc_stage_pipe_start(const hc_stage_pipe_args_t *pa, hcomm_request_t *req_p,
                                   hc_stage_pipe_t **p_p);
/* Drives p to its end and frees it; st: the user's request's status.
 * Returns the first failure (its words the last error) or st. */
hcomm_status_t hc_stage_pipe_end(hc_stage_pipe_t *p, hcomm_status_t st);
/* hcomm_finalize: a pipeline never retired, freed without waiting. */
void hc_stage_pipe_free(hc_stage_pipe_t *p);
/* hcomm_finalize: the pipeline's streams. */
void hc_stage_pipe_fini(void);

#endif /* HC_API_STAGE_H */
