/*
 * Whole-buffer staging of device memory at the entry points (api_stage.h,
 * docs/gpu.md "The staged path").
 *
 * A staged call holds at most two regions (the send and the receive
 * buffer; one when they overlap, the in-place forms): each is a device (or
 * managed) range of the user's and its host copy, carved from one pool
 * chunk. What is copied in: the bytes the call reads (the send extent), and
 * the receive extent too where the call may leave parts of it untouched
 * (gather, scatter, the vector collectives: gaps between blocks, a root's
 * own block). What is copied back: the receive extent (a p2p receive: the
 * bytes that arrived). Extents are the exact ranges each call touches on
 * this rank, root-only buffers at the root only.
 */
#include "api/api_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *user; /* the user's range [user, user + bytes) */
    char *host; /* its staging */
    size_t bytes;
    hc_mem_attr_t attr;
} hc_stage_region_t;

struct hc_api_stage {
    hc_list_t link; /* hc_stage.live */
    const char *fn;
    hc_stage_buf_t *buf; /* the staging buffer holding every region's staging */
    int nreg;
    hc_stage_region_t reg[2];
    int out; /* the region the output lies in, -1: nothing to copy back */
    size_t out_off, out_bytes;
    bool recv;             /* a p2p receive: copy back only the bytes received */
    hc_stage_pipe_t *pipe; /* a pipelined non-blocking collective (api_stage_pipe.c) */
};

static struct {
    hc_list_t live;  /* every staged call not ended (finalize frees them) */
    hc_list_t group; /* staged blocking collectives of the open group */
    bool logged;     /* the path said once (HCOMM_LOG=info) */
} hc_stage = {.live = {&hc_stage.live, &hc_stage.live},
              .group = {&hc_stage.group, &hc_stage.group}};

void hc_api_stage_counters(hc_api_stage_counters_t *c_p)
{
    const hc_gpu_stats_t *g = &hc_gpu_stats;
    *c_p = (hc_api_stage_counters_t){.calls = g->whole_calls + g->pipe_dev_calls,
                                     .bytes_in = g->d2h_bytes,
                                     .bytes_out = g->h2d_bytes,
                                     .pipelined = g->pipe_calls,
                                     .chunks = g->pipe_chunks};
}

void hc_api_stage_describe(char *buf, size_t len)
{
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    if (!ops) {
        snprintf(buf, len, "device buffers: none (no GPU backend)");
        return;
    }
    char gdr[512];
    hc_gdr_describe(gdr, sizeof(gdr));
    snprintf(buf, len,
             "device buffers (%s): allreduce, reduce, broadcast, gather, scatter, allgather, "
             "reduce_scatter, alltoall moving at least %u "
             "bytes on a communicator of one node unstaged (HCOMM_GPU_IPC=%s%s); other "
             "collectives staged through host memory on every driver; "
             "allreduce, reduce, broadcast above HCOMM_GPU_STAGE_CHUNK=%zu bytes (allgather, "
             "reduce_scatter, alltoall, gather, scatter: per-rank block; allgatherv, "
             "reduce_scatterv, alltoallv: largest block) pipelined in "
             "chunks of that size, HCOMM_GPU_STAGE_DEPTH=%lld in flight; smaller ones, groups "
             "and the other collectives staged whole; p2p staged whole unless direct; %s",
             ops->name, HC_COLL_NODE_DEVICE_MIN,
             hc_ipc_mode == HC_GDR_OFF  ? "0"
             : hc_ipc_mode == HC_GDR_ON ? "1"
                                        : "auto",
             hc_ipc_mode == HC_GDR_OFF ? ": off, staged"
                                       : ": by IPC between the ranks' device buffers where every "
                                         "rank has device buffers, else staged whole in the "
                                         "node collective",
             hc_stage_pipe_chunk, (long long)hc_stage_pipe_depth, gdr);
}

/* HCOMM_LOG=info: the path, once per hcomm_init. */
static void hc_stage_log_path(void)
{
    if (hc_stage.logged || hc_log_level_current < HC_LOG_INFO) return;
    hc_stage.logged = true;
    char line[2048];
    hc_api_stage_describe(line, sizeof(line));
    hc_log_info("%s", line);
}

/* A buffer the call touches: [p, p + n) and what memory it is. */
typedef struct {
    char *p;
    size_t n;
    hc_mem_attr_t attr;
} hc_extent_t;

static bool hc_extent_device(const hc_extent_t *e)
{
    return e->n > 0 && e->attr.type != HC_MEM_HOST;
}

static hcomm_status_t hc_extent_type(const char *fn, const char *name, hc_extent_t *e)
{
    e->attr = (hc_mem_attr_t){.type = HC_MEM_HOST, .device = -1};
    if (e->n == 0) return HCOMM_OK;
    hcomm_status_t st = hc_gpu_mem_type(e->p, e->n, &e->attr);
    if (st != HCOMM_OK) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", hc_error_last());
        return hc_error(st, "%s: %s [%p, +%zu bytes): %s", fn, name, (void *)e->p, e->n, saved);
    }
    return HCOMM_OK;
}

static hcomm_status_t hc_stage_copy_fail(hcomm_status_t st, const char *fn, const char *what,
                                         const hc_stage_region_t *r)
{
    char saved[512];
    snprintf(saved, sizeof(saved), "%s", hc_error_last());
    return hc_error(st, "%s: %s (%s memory on device %d): %s", fn, what,
                    hc_mem_type_name(r->attr.type), r->attr.device, saved);
}

static void hc_stage_free(hc_api_stage_t *stg)
{
    hc_list_del(&stg->link);
    if (stg->pipe) hc_stage_pipe_free(stg->pipe);
    if (stg->buf) hc_stage_buf_put(stg->buf);
    free(stg);
}

/* A record with room for the regions' staging (their bytes set). */
static hcomm_status_t hc_stage_alloc(const char *fn, hc_api_stage_t *stg)
{
    size_t total = 0;
    for (int i = 0; i < stg->nreg; i++)
        total += (stg->reg[i].bytes + 63) & ~(size_t)63;
    hcomm_status_t st = hc_stage_buf_get(fn, total, &stg->buf);
    if (st != HCOMM_OK) return st;
    char *at = stg->buf->p;
    for (int i = 0; i < stg->nreg; i++) {
        stg->reg[i].host = at;
        at += (stg->reg[i].bytes + 63) & ~(size_t)63;
    }
    hc_list_push_back(&hc_stage.live, &stg->link);
    hc_gpu_stats.whole_calls++;
    return HCOMM_OK;
}

/* The region holding e (staged), or -1. */
static int hc_stage_region_of(const hc_api_stage_t *stg, const hc_extent_t *e)
{
    for (int i = 0; e->n && i < stg->nreg; i++)
        if (e->p >= stg->reg[i].user && e->p + e->n <= stg->reg[i].user + stg->reg[i].bytes)
            return i;
    return -1;
}

/* Copies e's bytes (in region i) into the staging; a failure revokes comm,
 * so that the other ranks fail at once rather than wait for this one. */
static hcomm_status_t hc_stage_copy_in(hc_api_stage_t *stg, int i, const hc_extent_t *e,
                                       struct hcomm_comm *comm)
{
    hc_stage_region_t *r = &stg->reg[i];
    size_t off = (size_t)(e->p - r->user);
    hcomm_status_t st = hc_gpu_copy(r->host + off, NULL, e->p, &r->attr, e->n);
    if (st != HCOMM_OK) {
        st = hc_stage_copy_fail(st, stg->fn, "copying the input to host staging", r);
        if (comm->size > 1) {
            char saved[512];
            snprintf(saved, sizeof(saved), "%s", hc_error_last());
            (void)hc_comm_revoke(comm);
            hc_error(st, "%s (the communicator is revoked: the other ranks fail now)", saved);
        }
        return st;
    }
    hc_gpu_stats.d2h_copies++;
    hc_gpu_stats.d2h_bytes += e->n;
    return HCOMM_OK;
}

hcomm_status_t hc_api_stage_end(hc_api_stage_t *stg, hcomm_status_t st, size_t received)
{
    if (stg->pipe) {
        st = hc_stage_pipe_end(stg->pipe, st);
        stg->pipe = NULL;
    }
    if (st == HCOMM_OK && stg->out >= 0) {
        hc_stage_region_t *r = &stg->reg[stg->out];
        size_t n = stg->recv ? HC_MIN(received, stg->out_bytes) : stg->out_bytes;
        hcomm_status_t cst =
            hc_gpu_copy(r->user + stg->out_off, &r->attr, r->host + stg->out_off, NULL, n);
        if (cst != HCOMM_OK) {
            st = hc_stage_copy_fail(cst, stg->fn, "copying the result back from host staging", r);
        } else if (n > 0) {
            hc_gpu_stats.h2d_copies++;
            hc_gpu_stats.h2d_bytes += n;
        }
    }
    hc_stage_free(stg);
    return st;
}

hcomm_status_t hc_api_stage_retire(struct hcomm_request *req, hcomm_status_t st)
{
    hc_api_stage_t *stg = req->stage;
    req->stage = NULL;
    return hc_api_stage_end(stg, st, req->kind == HC_REQ_RECV ? req->msg_len : 0);
}

hcomm_status_t hc_api_stage_p2p(const char *fn, bool recv, void **buf_p, size_t bytes,
                                struct hcomm_comm *comm, int peer, hc_api_stage_t **stg_p,
                                hc_mem_attr_t *mem_p, const void **src_p)
{
    *stg_p = NULL;
    *src_p = NULL;
    mem_p->type = HC_MEM_HOST;
    hc_extent_t e = {.p = *buf_p, .n = bytes};
    hcomm_status_t st = hc_extent_type(fn, "buf", &e);
    if (st != HCOMM_OK || !hc_extent_device(&e) || hc_gpu_no_stage) return st;
    hc_stage_log_path();
    hc_gdr_path_t path;
    if ((st = hc_gdr_choose(fn, recv, comm, peer, e.p, e.n, &e.attr, &path)) != HCOMM_OK)
        return st;
    if (path == HC_GDR_PATH_DIRECT || (recv && path == HC_GDR_PATH_STREAMED)) {
        *mem_p = e.attr;
        return HCOMM_OK;
    }
    bool streamed = path == HC_GDR_PATH_STREAMED; /* a send: staging filled by its stream */
    hc_api_stage_t *stg = calloc(1, sizeof(*stg));
    if (!stg) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory to stage device buffer", fn);
    stg->fn = fn;
    stg->nreg = 1;
    stg->reg[0] = (hc_stage_region_t){.user = e.p, .bytes = e.n, .attr = e.attr};
    stg->out = recv ? 0 : -1;
    stg->out_bytes = e.n;
    stg->recv = recv;
    if ((st = hc_stage_alloc(fn, stg)) != HCOMM_OK) {
        free(stg);
        return st;
    }
    if (!recv && !streamed && (st = hc_stage_copy_in(stg, 0, &e, comm)) != HCOMM_OK) {
        hc_stage_free(stg);
        return st;
    }
    if (streamed) {
        *mem_p = e.attr;
        *src_p = e.p;
    }
    *buf_p = stg->reg[0].host;
    *stg_p = stg;
    return HCOMM_OK;
}

/* ---- collectives ------------------------------------------------------------------------ */

static size_t hc_vec_extent(const size_t *counts, const size_t *displs, int n, size_t es)
{
    size_t m = 0;
    for (int r = 0; r < n; r++)
        if (counts[r]) m = HC_MAX(m, (displs[r] + counts[r]) * es);
    return m;
}

/* What the collective reads (s) and writes (r) on this rank, in bytes, and
 * whether r's old bytes matter (parts of it may stay untouched). */
static void hc_stage_extents(const hc_coll_args_t *a, const struct hcomm_comm *comm, hc_extent_t *s,
                             hc_extent_t *r, bool *rin_p)
{
    size_t b = a->bytes, n = (size_t)comm->size, es = hc_dtype_size(a->dtype);
    bool root = comm->rank == a->root;
    const hc_coll_vec_t *v = a->vec;
    size_t sn = 0, rn = 0;
    bool rin = false;
    switch (a->kind) {
    case HC_COLL_ALLREDUCE:
        sn = b, rn = b;
        break;
    case HC_COLL_BROADCAST:
        sn = root ? b : 0, rn = root ? 0 : b;
        break;
    case HC_COLL_REDUCE:
        sn = b, rn = root && a->rbuf ? b : 0;
        break;
    case HC_COLL_ALLGATHER:
        sn = b, rn = b * n;
        break;
    case HC_COLL_REDUCE_SCATTER:
        sn = b * n, rn = b;
        break;
    case HC_COLL_ALLTOALL:
        sn = b * n, rn = b * n;
        break;
    case HC_COLL_GATHER:
        sn = b, rn = root ? b * n : 0, rin = true;
        break;
    case HC_COLL_SCATTER:
        sn = root ? b * n : 0, rn = b, rin = true;
        break;
    case HC_COLL_ALLGATHERV:
        sn = v->rcounts[comm->rank] * es,
        rn = hc_vec_extent(v->rcounts, v->rdispls, comm->size, es);
        rin = true;
        break;
    case HC_COLL_REDUCE_SCATTERV:
        sn = b, rn = v->rcounts[comm->rank] * es, rin = true;
        break;
    case HC_COLL_ALLTOALLV:
        sn = hc_vec_extent(v->scounts, v->sdispls, comm->size, es);
        rn = hc_vec_extent(v->rcounts, v->rdispls, comm->size, es);
        rin = true;
        break;
    default:
        break; /* barrier */
    }
    *s = (hc_extent_t){.p = (char *)a->sbuf, .n = sn};
    *r = (hc_extent_t){.p = a->rbuf, .n = rn};
    *rin_p = rin;
}

/* The regions: one per device extent, or one for both when they overlap
 * (in place: the union, one allocation). */
static void hc_stage_regions(hc_api_stage_t *stg, const hc_extent_t *s, const hc_extent_t *r)
{
    bool sd = hc_extent_device(s), rd = hc_extent_device(r);
    if (sd && rd && s->p < r->p + r->n && r->p < s->p + s->n) {
        char *lo = HC_MIN(s->p, r->p), *hi = HC_MAX(s->p + s->n, r->p + r->n);
        stg->reg[stg->nreg++] =
            (hc_stage_region_t){.user = lo, .bytes = (size_t)(hi - lo), .attr = s->attr};
        return;
    }
    if (sd)
        stg->reg[stg->nreg++] = (hc_stage_region_t){.user = s->p, .bytes = s->n, .attr = s->attr};
    if (rd)
        stg->reg[stg->nreg++] = (hc_stage_region_t){.user = r->p, .bytes = r->n, .attr = r->attr};
}

/* Ends a posted staged collective: now (blocking), at hcomm_group_end (a
 * blocking member of an open group), or when its request is retired. */
static hcomm_status_t hc_stage_posted(hc_api_stage_t *stg, hcomm_status_t st,
                                      hcomm_request_t *req_p)
{
    if (st != HCOMM_OK) return hc_api_stage_end(stg, st, 0);
    if (req_p) {
        struct hcomm_request *req = hc_request_from_handle(*req_p);
        if (req) {
            req->stage = stg;
            return HCOMM_OK;
        }
        return hc_api_stage_end(stg, st, 0); /* cannot happen: a handle just made */
    }
    if (hc_ctx.group_depth > 0) {
        hc_list_del(&stg->link);
        hc_list_push_back(&hc_stage.group, &stg->link);
        return HCOMM_OK;
    }
    return hc_api_stage_end(stg, st, 0);
}

/* A collective through the pipeline (every rank, whatever its memory). */
static hcomm_status_t hc_stage_coll_pipe(const char *fn, const hc_coll_args_t *a,
                                         struct hcomm_comm *comm, const hc_extent_t *s,
                                         const hc_extent_t *r, size_t span, hcomm_request_t *req_p)
{
    hc_stage_pipe_args_t pa = {.fn = fn, .a = a, .comm = comm, .span = span};
    if (hc_extent_device(s)) pa.sdev = s->p, pa.sattr = s->attr;
    if (hc_extent_device(r)) pa.rdev = r->p, pa.rattr = r->attr;
    pa.one = a->kind == HC_COLL_BROADCAST || (pa.sdev && pa.sdev == pa.rdev);
    hc_gpu_stats.pipe_calls++;
    hc_gpu_stats.pipe_chunks += hc_stage_pipe_nchunk(&pa);
    if (pa.sdev || pa.rdev) hc_gpu_stats.pipe_dev_calls++;
    hc_stage_pipe_t *p;
    if (!req_p) return hc_stage_pipe_start(&pa, NULL, &p);
    hc_api_stage_t *stg = calloc(1, sizeof(*stg));
    if (!stg) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory to stage device buffers", fn);
    stg->fn = fn;
    stg->out = -1;
    hcomm_status_t st = hc_stage_pipe_start(&pa, req_p, &stg->pipe);
    if (st != HCOMM_OK) {
        free(stg);
        return st;
    }
    hc_request_from_handle(*req_p)->stage = stg;
    hc_list_push_back(&hc_stage.live, &stg->link);
    return HCOMM_OK;
}

hcomm_status_t hc_api_stage_coll(const hc_coll_args_t *a, struct hcomm_comm *comm,
                                 hcomm_request_t *req_p)
{
    const char *fn = hc_coll_name(a->kind);
    hc_extent_t s, r;
    bool rin;
    hc_stage_extents(a, comm, &s, &r, &rin);
    hcomm_status_t st;
    if ((st = hc_extent_type(fn, "sendbuf", &s)) || (st = hc_extent_type(fn, "recvbuf", &r)))
        return st;
    if (hc_gpu_no_stage) return hc_coll_post(a, comm, req_p);
    if (hc_extent_device(&s) || hc_extent_device(&r)) hc_stage_log_path();
    bool pipe = false;
    size_t span = 0; /* (alltoallv: the largest block, voted) */
    if (hc_ipc_mode != HC_GDR_OFF && hc_coll_node_takes_device(a, comm)) {
        /* Every rank decides this alike (whatever its memory), so none
         * pipelines. Device buffers go down as they are; managed memory is
         * staged whole (the CPU must not touch it, and it has no IPC). */
        bool managed =
            (s.n && s.attr.type == HC_MEM_MANAGED) || (r.n && r.attr.type == HC_MEM_MANAGED);
        if (!managed) {
            hc_coll_args_t d = *a;
            d.smem = (uint8_t)(s.n ? s.attr.type : HC_MEM_HOST);
            d.rmem = (uint8_t)(r.n ? r.attr.type : HC_MEM_HOST);
            if (a->kind == HC_COLL_BROADCAST) /* one buffer: the root's input, the others' output */
                d.smem = d.rmem = (uint8_t)(s.n ? d.smem : d.rmem);
            return hc_coll_post(&d, comm, req_p);
        }
    } else if ((st = hc_stage_pipe_fits(fn, a, comm, &pipe)) != HCOMM_OK) {
        return st;
    } else if (a->kind == HC_COLL_ALLTOALLV && hc_ctx.group_depth == 0) {
        /* Its counts are each rank's own, so no rank knows the largest
         * block: the ranks vote on it (every alltoallv outside a group
         * calls the vote while a GPU backend is active), and the pipeline
         * splits every block by the chunk. */
        size_t es = hc_dtype_size(a->dtype), mine = 0, n = (size_t)comm->size;
        for (size_t j = 0; j < n; j++)
            mine = HC_MAX(mine, HC_MAX(a->vec->scounts[j], a->vec->rcounts[j]) * es);
        uint64_t most = 0;
        if ((st = hc_coll_internal_max(mine, &most, comm)) != HCOMM_OK) return st;
        span = (size_t)most;
        pipe = span > hc_stage_pipe_chunk / es * es;
    }
    if (pipe && hc_stage_pipe_blocks(a->kind)) {
        /* The block collectives' chunks cost a rank with host buffers CPU
         * copies (its pieces packed into slots): they are pipelined only
         * when some rank has device buffers, which every rank learns from
         * a one-byte vote (all call it: the size decided it), so a job of
         * host buffers runs the one collective as before. */
        bool mine = hc_extent_device(&s) || hc_extent_device(&r);
        if ((st = hc_coll_internal_any(mine, &pipe, comm)) != HCOMM_OK) return st;
    }
    if (pipe) return hc_stage_coll_pipe(fn, a, comm, &s, &r, span, req_p);
    if (!hc_extent_device(&s) && !hc_extent_device(&r)) return hc_coll_post(a, comm, req_p);
    hc_api_stage_t *stg = calloc(1, sizeof(*stg));
    if (!stg) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory to stage device buffers", fn);
    stg->fn = fn;
    stg->out = -1;
    hc_stage_regions(stg, &s, &r);
    if ((st = hc_stage_alloc(fn, stg)) != HCOMM_OK) {
        free(stg);
        return st;
    }
    int si = hc_stage_region_of(stg, &s), ri = hc_stage_region_of(stg, &r);
    bool r_in_s = si >= 0 && si == ri && r.p >= s.p && r.p + r.n <= s.p + s.n;
    if ((si >= 0 && (st = hc_stage_copy_in(stg, si, &s, comm))) ||
        (ri >= 0 && rin && !r_in_s && (st = hc_stage_copy_in(stg, ri, &r, comm)))) {
        hc_stage_free(stg);
        return st;
    }
    hc_coll_args_t h = *a;
    if (si >= 0) h.sbuf = stg->reg[si].host + (s.p - stg->reg[si].user);
    if (ri >= 0) {
        h.rbuf = stg->reg[ri].host + (r.p - stg->reg[ri].user);
        stg->out = ri;
        stg->out_off = (size_t)(r.p - stg->reg[ri].user);
        stg->out_bytes = r.n;
    }
    if (a->kind == HC_COLL_BROADCAST) /* one buffer: the root's input, the others' output */
        h.sbuf = h.rbuf = si >= 0 ? (void *)h.sbuf : h.rbuf;
    return hc_stage_posted(stg, hc_coll_post(&h, comm, req_p), req_p);
}

hcomm_status_t hc_api_stage_group_end(hcomm_status_t st)
{
    if (hc_ctx.group_depth > 0) return st;
    hcomm_status_t first = st;
    while (!hc_list_empty(&hc_stage.group)) {
        hc_api_stage_t *stg = hc_container_of(hc_stage.group.next, hc_api_stage_t, link);
        hcomm_status_t e = hc_api_stage_end(stg, st, 0);
        if (first == HCOMM_OK) first = e;
    }
    return first;
}

void hc_api_stage_fini(void)
{
    hc_list_t *lists[2] = {&hc_stage.live, &hc_stage.group};
    for (int i = 0; i < 2; i++)
        while (!hc_list_empty(lists[i]))
            hc_stage_free(hc_container_of(lists[i]->next, hc_api_stage_t, link));
    hc_stage_pipe_fini();
    hc_stage_buf_fini();
    hc_stage.logged = false;
}
