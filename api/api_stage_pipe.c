/*
 * Pipelined staging of large device buffers (api_stage.h, docs/gpu.md "The
 * pipeline"). An allreduce, reduce or broadcast of more than one chunk
 * (HCOMM_GPU_STAGE_CHUNK), or an allgather, reduce_scatter, alltoall,
 * gather or scatter whose per-rank block is (allgatherv, reduce_scatterv,
 * alltoallv: whose largest block is), runs as one collective per chunk,
 * posted in chunk order on every rank (so they match), each on a slot of
 * host staging. For the block collectives chunk k is the same piece of
 * every rank's block: its pieces are packed into the slot (input: n of
 * them for reduce_scatter, alltoall and the root's scatter; output: n for
 * allgather, alltoall and the root's gather), so the chunk's collective is
 * an ordinary one on len-byte blocks. For the vector ones chunk k is the
 * same element range of every block (piece j at j x chunk in the slot, or
 * the user's own displacements on host memory), and the chunk's collective
 * a vector one of those pieces:
 *
 *   chunk k:  device -> slot (stream "in", event in[k])   when a slot is free
 *             post the chunk's collective on the slot       when in[k] is done
 *             slot -> device (stream "out", event out[k])   when it completed
 *             the slot is free again                        when out[k] is done
 *
 * At most `depth` chunks (HCOMM_GPU_STAGE_DEPTH) are between their copy in
 * and the end of their copy back, so the staging is depth slots per staged
 * buffer, whatever the size. The copies run on the GPU layer's streams while
 * this thread drives the network, so the copy in of chunk k+1 and the copy
 * back of chunk k-1 overlap the transfer of chunk k.
 *
 * Failures: a failed copy in (or a failed chunk collective) revokes the
 * communicator, so the other ranks' chunks fail at once; no more chunks are
 * posted, those posted are waited for (their slots are in use), and the
 * call fails. A failed copy back fails only this rank's call: the remaining
 * chunks still run (the other ranks need them) but are not copied back.
 */
#include "api/api_stage.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t hc_stage_pipe_chunk;
int64_t hc_stage_pipe_depth;

static const hc_config_knob_t hc_stage_pipe_knobs[] = {
    HC_KNOB_SIZE(
        hc_stage_pipe_chunk, "HCOMM_GPU_STAGE_CHUNK", "4M",
        "device buffers: allreduce, reduce and broadcast larger than this, and "
        "allgather, reduce_scatter, alltoall, gather and scatter whose per-rank block "
        "is (allgatherv, reduce_scatterv, alltoallv: their largest block), are staged through "
        "host memory in chunks of this size, pipelined (same on every rank; at least 4K)"),
    HC_KNOB_INT(hc_stage_pipe_depth, "HCOMM_GPU_STAGE_DEPTH", "4",
                "device buffers: chunks of the staging pipeline in flight at once (1..64)"),
};
HC_CONFIG_KNOBS("gpu", hc_stage_pipe_knobs)

/* What the chunks split: the per-rank block (the whole buffer for
 * allreduce, reduce, broadcast), or a vector collective's largest block. */
static size_t hc_pipe_span(const hc_coll_args_t *a, int n)
{
    if (!hc_stage_pipe_vector(a->kind)) return a->bytes;
    size_t span = 0, es = hc_dtype_size(a->dtype);
    for (int j = 0; j < n; j++)
        span = HC_MAX(span, a->vec->rcounts[j] * es);
    return span;
}

size_t hc_stage_pipe_nchunk(const hc_stage_pipe_args_t *pa)
{
    size_t es = hc_dtype_size(pa->a->dtype), chunk = hc_stage_pipe_chunk / es * es;
    size_t span = pa->span ? pa->span : hc_pipe_span(pa->a, pa->comm->size);
    return (span + chunk - 1) / chunk;
}

hcomm_status_t hc_stage_pipe_fits(const char *fn, const hc_coll_args_t *a,
                                  const struct hcomm_comm *comm, bool *fits_p)
{
    *fits_p = false;
    hc_coll_kind_t k = a->kind;
    if (k != HC_COLL_ALLREDUCE && k != HC_COLL_REDUCE && k != HC_COLL_BROADCAST &&
        !hc_stage_pipe_blocks(k) && !hc_stage_pipe_vector(k) && k != HC_COLL_ALLTOALLV)
        return HCOMM_OK;
    if (hc_stage_pipe_chunk < 4096)
        return hc_error(HCOMM_ERR_INVALID, "%s: HCOMM_GPU_STAGE_CHUNK=%zu: at least 4K", fn,
                        hc_stage_pipe_chunk);
    if (hc_stage_pipe_depth < 1 || hc_stage_pipe_depth > 64)
        return hc_error(HCOMM_ERR_INVALID, "%s: HCOMM_GPU_STAGE_DEPTH=%lld: 1..64", fn,
                        (long long)hc_stage_pipe_depth);
    if (k == HC_COLL_ALLTOALLV) return HCOMM_OK; /* the API's vote decides (api_stage.h) */
    size_t es = hc_dtype_size(a->dtype);
    *fits_p =
        hc_ctx.group_depth == 0 && hc_pipe_span(a, comm->size) > hc_stage_pipe_chunk / es * es;
    return HCOMM_OK;
}

struct hc_stage_pipe {
    const char *fn;
    hc_coll_args_t a; /* the user's arguments */
    struct hcomm_comm *comm;
    const hc_gpu_ops_t *ops;
    char *sdev, *rdev; /* device input / output (NULL: host, or none) */
    hc_mem_attr_t sattr, rattr;
    bool one; /* in place (or broadcast): one slot area */
    size_t es, chunk, nchunk, depth;
    size_t ni, no; /* pieces of a chunk in the input and the output (1, or n: blocks) */
    size_t span;   /* what the chunks split: a block, or the largest of a vector's */
    bool vector;   /* allgatherv, reduce_scatterv: blocks of their own sizes */
    /* a vector collective's blocks (n each, copied), of the input and of the
     * output: counts and displacements (NULL: that side is one block, this
     * rank's own, rcounts[rank] elements) */
    size_t *vin_cnt, *vin_displ, *vout_cnt, *vout_displ;
    size_t *varg;        /* 4n: a chunk collective's counts and displacements */
    size_t *vmem;        /* the allocation of the above */
    bool sstage, rstage; /* the input / output goes through slots (device, or pieces to pack) */
    hc_stage_buf_t *buf; /* depth slots per staged buffer */
    char *sslot, *rslot; /* the slot areas */
    hc_gpu_stream_t sin, sout;
    hc_gpu_event_t *ein, *eout; /* depth each */
    struct hcomm_request **req; /* depth */
    bool *copied;               /* depth: a copy back was enqueued for the slot's chunk */
    size_t in, post, out, done; /* done <= out <= post <= in <= nchunk, in - done <= depth */
    size_t limit;               /* chunks that will be posted (nchunk; post after a failure) */
    hcomm_status_t err;         /* the first failure (its words in errbuf) */
    char errbuf[1024];
    bool back_failed;               /* a copy back failed: no more copies back */
    bool user_last;                 /* the last chunk's request is the user's (non-blocking) */
    struct hcomm_request *user_req; /* that request, once posted */
    bool stuck;                     /* a copy never finished: the staging is never freed */
    uint64_t deadline;
};

/* The GPU layer's streams for the pipeline, one pair per device, made at
 * first use and kept until hcomm_finalize (hc_stage_pipe_fini). */
#define HC_STAGE_PIPE_DEVICES 16
static struct {
    hc_gpu_stream_t in, out;
} hc_pipe_streams[HC_STAGE_PIPE_DEVICES];

void hc_stage_pipe_fini(void)
{
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    for (int d = 0; d < HC_STAGE_PIPE_DEVICES; d++) {
        if (ops && hc_pipe_streams[d].in) (void)ops->stream_destroy(hc_pipe_streams[d].in);
        if (ops && hc_pipe_streams[d].out) (void)ops->stream_destroy(hc_pipe_streams[d].out);
        hc_pipe_streams[d].in = hc_pipe_streams[d].out = NULL;
    }
}

/* The first failure is kept (its words too); later ones are dropped. */
static hcomm_status_t hc_pipe_fail(hc_stage_pipe_t *p, hcomm_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static hcomm_status_t hc_pipe_fail(hc_stage_pipe_t *p, hcomm_status_t st, const char *fmt, ...)
{
    if (p->err != HCOMM_OK) return p->err;
    char saved[512];
    snprintf(saved, sizeof(saved), "%s", hc_error_last());
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(p->errbuf, sizeof(p->errbuf), "%s: %s: %s", p->fn, what, saved);
    p->err = st;
    return st;
}

/* A failure that the other ranks must see at once: stop posting, revoke. */
static void hc_pipe_abort(hc_stage_pipe_t *p)
{
    p->limit = p->post;
    if (p->comm->size > 1 && !hc_comm_aborted(p->comm)) (void)hc_comm_revoke(p->comm);
}

/* Chunk k's copy to host staging failed: the others must see it at once. */
static void hc_pipe_fail_in(hc_stage_pipe_t *p, hcomm_status_t st, size_t k)
{
    hc_pipe_fail(p, st,
                 "copying chunk %zu of %zu of the input to host staging (%s memory on device %d)",
                 k, p->nchunk, hc_mem_type_name(p->sattr.type), p->sattr.device);
    hc_pipe_abort(p);
}

/* Chunk k's copy back failed: this rank's call only (the others' results
 * are right). */
static void hc_pipe_fail_back(hc_stage_pipe_t *p, hcomm_status_t st, size_t k)
{
    p->back_failed = true;
    hc_pipe_fail(p, st,
                 "copying chunk %zu of %zu of the result back from host staging (%s memory on "
                 "device %d)",
                 k, p->nchunk, hc_mem_type_name(p->rattr.type), p->rattr.device);
}

static size_t hc_pipe_len(const hc_stage_pipe_t *p, size_t k)
{
    return HC_MIN(p->chunk, p->span - k * p->chunk);
}

/* A vector collective's chunk k of rank j's block: its bytes (0 past the
 * block's end). */
static size_t hc_pipe_vlen(const hc_stage_pipe_t *p, const size_t *cnt, size_t j, size_t k)
{
    size_t b = cnt[j] * p->es, off = k * p->chunk;
    return b > off ? HC_MIN(p->chunk, b - off) : 0;
}

/* Chunk k's piece j of the input (in) or the output: its bytes, and its
 * offset in the user's buffer and in the slot. A block collective's pieces
 * are len bytes, packed; a vector collective's are its blocks' chunk k,
 * piece j at j x chunk in the slot (one piece: this rank's block). */
static size_t hc_pipe_piece(const hc_stage_pipe_t *p, size_t k, size_t j, bool in, size_t *user_p,
                            size_t *slot_p)
{
    size_t off = k * p->chunk, pieces = in ? p->ni : p->no;
    if (!p->vector) {
        size_t len = hc_pipe_len(p, k);
        *user_p = j * p->a.bytes + off;
        *slot_p = j * len;
        return len;
    }
    const size_t *cnt = in ? p->vin_cnt : p->vout_cnt, *displ = in ? p->vin_displ : p->vout_displ;
    if (pieces == 1) {
        *user_p = off;
        *slot_p = 0;
        return hc_pipe_vlen(p, p->vin_cnt ? p->vin_cnt : p->vout_cnt, (size_t)p->comm->rank, k);
    }
    *user_p = displ[j] * p->es + off;
    *slot_p = j * p->chunk;
    return hc_pipe_vlen(p, cnt, j, k);
}

/* The device bytes and copies of chunk k's input (in) or output. */
static void hc_pipe_count(const hc_stage_pipe_t *p, size_t k, bool in, uint64_t *copies,
                          uint64_t *bytes)
{
    size_t u, sl;
    for (size_t j = 0; j < (in ? p->ni : p->no); j++) {
        size_t len = hc_pipe_piece(p, k, j, in, &u, &sl);
        *copies += len > 0 || !p->vector;
        *bytes += len;
    }
}

/* Chunk k's slot in an area of slots of `pieces` chunks each. */
static char *hc_pipe_slot(const hc_stage_pipe_t *p, char *area, size_t pieces, size_t k)
{
    return area + (k % p->depth) * pieces * p->chunk;
}

static char *hc_pipe_sslot(const hc_stage_pipe_t *p, size_t k)
{
    return hc_pipe_slot(p, p->sslot, p->ni, k);
}

static char *hc_pipe_rslot(const hc_stage_pipe_t *p, size_t k)
{
    return hc_pipe_slot(p, p->rslot, p->no, k);
}

/* Chunk k's pieces between the user's buffer (piece j at j * block + the
 * chunk's offset) and its slot (packed, len bytes apart): on the pipeline's
 * stream for device memory, else by the CPU at once. */
static hcomm_status_t hc_pipe_pieces(hc_stage_pipe_t *p, size_t k, bool in)
{
    size_t pieces = in ? p->ni : p->no;
    char *slot = in ? hc_pipe_sslot(p, k) : hc_pipe_rslot(p, k);
    char *dev = in ? p->sdev : p->rdev;
    char *user = dev ? dev : in ? (char *)p->a.sbuf : (char *)p->a.rbuf;
    for (size_t j = 0; j < pieces; j++) {
        size_t uo, so, len = hc_pipe_piece(p, k, j, in, &uo, &so);
        char *u = user + uo, *sl = slot + so;
        if (len == 0) continue;
        if (!dev) {
            memcpy(in ? sl : u, in ? u : sl, len);
            continue;
        }
        hcomm_status_t st =
            p->ops->copy_async(in ? sl : u, in ? u : sl, len, in ? p->sin : p->sout);
        if (st != HCOMM_OK) return st;
    }
    return HCOMM_OK;
}

/* The chunk's collective: its buffers the slots (staged) or the user's
 * host buffers at the chunk's offset. */
static hcomm_status_t hc_pipe_post(hc_stage_pipe_t *p, size_t k)
{
    size_t off = k * p->chunk, len = hc_pipe_len(p, k);
    hc_coll_args_t h = p->a;
    h.count = len / p->es;
    h.bytes = len;
    h.sbuf = p->sstage                ? hc_pipe_sslot(p, k)
             : p->a.sbuf && p->ni > 0 ? (const char *)p->a.sbuf + off
                                      : NULL;
    h.rbuf = p->rstage                ? hc_pipe_rslot(p, k)
             : p->a.rbuf && p->no > 0 ? (char *)p->a.rbuf + off
                                      : NULL;
    if (p->one) h.sbuf = h.rbuf = p->sdev ? (void *)h.sbuf : h.rbuf;
    hc_coll_vec_t v;
    if (p->vector) { /* chunk k of each block: in the slot at j x chunk, or the user's at +off */
        size_t n = (size_t)p->comm->size, *arr[4] = {NULL, NULL, NULL, NULL}, stotal = 0,
               rtotal = 0;
        for (int side = 0; side < 2; side++) { /* 0: the input, 1: the output */
            const size_t *ucnt = side ? p->vout_cnt : p->vin_cnt;
            const size_t *udispl = side ? p->vout_displ : p->vin_displ;
            if (!ucnt) continue; /* one block: the pointer at +off above */
            size_t *cnt = p->varg + (size_t)(2 * side) * n, *displ = cnt + n, t = 0;
            bool staged = side ? p->rstage : p->sstage;
            for (size_t j = 0; j < n; j++) {
                cnt[j] = hc_pipe_vlen(p, ucnt, j, k) / p->es;
                displ[j] = staged ? j * (p->chunk / p->es) : udispl[j] + off / p->es;
                t += cnt[j];
            }
            if (!staged && side) /* the displacements carry the offset */
                h.rbuf = p->a.rbuf;
            else if (!staged)
                h.sbuf = p->a.sbuf;
            arr[2 * side] = cnt;
            arr[2 * side + 1] = displ;
            *(side ? &rtotal : &stotal) = t;
        }
        if (p->a.kind == HC_COLL_ALLGATHERV) {
            v = (hc_coll_vec_t){NULL, NULL, arr[2], arr[3]};
            h.count = rtotal;
        } else if (p->a.kind == HC_COLL_REDUCE_SCATTERV) { /* its blocks' counts are rcounts */
            v = (hc_coll_vec_t){NULL, arr[1], arr[0], NULL};
            h.count = stotal;
        } else { /* alltoallv: the signature's count is 0 (the API's) */
            v = (hc_coll_vec_t){arr[0], arr[1], arr[2], arr[3]};
            h.count = 0;
        }
        h.vec = &v;
        h.bytes = (p->a.kind == HC_COLL_ALLGATHERV ? rtotal : stotal) * p->es;
    }
    hcomm_request_t handle;
    hcomm_status_t st = hc_coll_post(&h, p->comm, &handle);
    if (st != HCOMM_OK) return st;
    struct hcomm_request *req = hc_request_from_handle(handle);
    p->req[k % p->depth] = req;
    if (p->user_last && k == p->nchunk - 1) p->user_req = req;
    return HCOMM_OK;
}

/* Enqueues the copies in that fit the window. */
static bool hc_pipe_step_in(hc_stage_pipe_t *p)
{
    bool moved = false;
    while (p->in < p->limit && p->in - p->done < p->depth) {
        size_t k = p->in;
        if (p->sstage) {
            hcomm_status_t st = hc_pipe_pieces(p, k, true);
            if (st == HCOMM_OK && p->sdev) st = p->ops->event_record(p->ein[k % p->depth], p->sin);
            if (st != HCOMM_OK) {
                hc_pipe_fail_in(p, st, k);
                break;
            }
        }
        p->in++;
        moved = true;
    }
    return moved;
}

/* Posts the chunks whose input is in host staging. */
static bool hc_pipe_step_post(hc_stage_pipe_t *p)
{
    bool moved = false;
    while (p->post < p->in && p->post < p->limit) {
        size_t k = p->post;
        if (p->sdev) {
            hcomm_status_t st = p->ops->event_query(p->ein[k % p->depth]);
            if (st == HCOMM_IN_PROGRESS) break;
            if (st != HCOMM_OK) {
                hc_pipe_fail_in(p, st, k);
                break;
            }
        }
        if (p->sdev) hc_pipe_count(p, k, true, &hc_gpu_stats.d2h_copies, &hc_gpu_stats.d2h_bytes);
        hcomm_status_t st = hc_pipe_post(p, k);
        if (st != HCOMM_OK) {
            hc_pipe_fail(p, st, "posting chunk %zu of %zu", k, p->nchunk);
            hc_pipe_abort(p);
            break;
        }
        p->post++;
        moved = true;
    }
    return moved;
}

/* Takes the chunks whose collective completed (in order) and enqueues
 * their copies back. */
static bool hc_pipe_step_out(hc_stage_pipe_t *p)
{
    bool moved = false;
    while (p->out < p->post) {
        size_t k = p->out, slot = k % p->depth;
        struct hcomm_request *req = p->req[slot];
        if (!req->done) break;
        hcomm_status_t st = hc_request_result(req);
        if (!(p->user_last && k == p->nchunk - 1)) { /* the user's is freed by the API */
            hc_request_stat_end(req);
            hc_request_free(req);
        }
        p->req[slot] = NULL;
        p->copied[slot] = false;
        if (st != HCOMM_OK) {
            hc_pipe_fail(p, st, "chunk %zu of %zu", k, p->nchunk);
            hc_pipe_abort(p);
        } else if (p->rstage && !p->back_failed && p->err == HCOMM_OK) {
            st = hc_pipe_pieces(p, k, false);
            if (st == HCOMM_OK && p->rdev) st = p->ops->event_record(p->eout[slot], p->sout);
            if (st != HCOMM_OK) {
                hc_pipe_fail_back(p, st, k);
            } else {
                p->copied[slot] = p->rdev != NULL; /* (host pieces: unpacked already) */
            }
        }
        p->out++;
        moved = true;
    }
    return moved;
}

/* Frees the slots whose copy back is done. */
static bool hc_pipe_step_done(hc_stage_pipe_t *p)
{
    bool moved = false;
    while (p->done < p->out) {
        size_t k = p->done, slot = k % p->depth;
        if (p->copied[slot]) {
            hcomm_status_t st = p->ops->event_query(p->eout[slot]);
            if (st == HCOMM_IN_PROGRESS) break;
            p->copied[slot] = false;
            if (st == HCOMM_OK) {
                hc_pipe_count(p, k, false, &hc_gpu_stats.h2d_copies, &hc_gpu_stats.h2d_bytes);
            } else {
                hc_pipe_fail_back(p, st, k);
            }
        }
        p->done++;
        moved = true;
    }
    return moved;
}

/* After a failure: the copies in of chunks never posted [post, in) still
 * own their slots until they end. */
static bool hc_pipe_unposted_busy(hc_stage_pipe_t *p)
{
    for (size_t k = p->post; p->sdev && k < p->in; k++)
        if (p->ops->event_query(p->ein[k % p->depth]) == HCOMM_IN_PROGRESS) return true;
    return false;
}

static bool hc_pipe_finished(hc_stage_pipe_t *p, bool posted_only)
{
    if (p->post < p->limit) return false;
    if (posted_only) return true;
    return p->done == p->post && !hc_pipe_unposted_busy(p);
}

/* The deadline passed: a pending chunk collective is timed out by the
 * core's own wait (its explanation, its cancel); a pending copy ends the
 * pipeline with its staging kept (the device may still write it). */
static void hc_pipe_expired(hc_stage_pipe_t *p)
{
    if (p->out < p->post && !p->req[p->out % p->depth]->done) {
        (void)hc_request_wait_until(p->req[p->out % p->depth], p->fn, &p->deadline);
        return;
    }
    hc_pipe_fail(p, HCOMM_ERR_TIMEOUT,
                 "a staging copy (device %d) not done after %g s (HCOMM_TIMEOUT)",
                 p->sdev ? p->sattr.device : p->rattr.device, hc_cfg.timeout);
    (void)hc_error(HCOMM_ERR_TIMEOUT, "%s", p->errbuf);
    hc_pipe_abort(p);
    p->stuck = true;
}

/* Drives the pipeline until every chunk is posted (posted_only: the
 * non-blocking call's return) or until all of it ended. Every wait here
 * has the HCOMM_TIMEOUT deadline. */
static void hc_pipe_run(hc_stage_pipe_t *p, bool posted_only)
{
    hc_backoff_t b = {0};
    unsigned iter = 0;
    while (!p->stuck && !hc_pipe_finished(p, posted_only)) {
        bool moved = hc_pipe_step_in(p);
        moved |= hc_pipe_step_post(p);
        moved |= hc_pipe_step_out(p);
        moved |= hc_pipe_step_done(p);
        if (hc_progress() > 0 || moved) {
            b.spins = 0;
        } else {
            hc_backoff_step(&b);
        }
        if ((++iter & 31) != 0) continue;
        hc_progress_slow();
        if (hc_comm_aborted(p->comm)) hc_comm_handle_abort(p->comm);
        uint64_t now = hc_time_ns();
        if (p->deadline == 0) p->deadline = now + (uint64_t)(hc_cfg.timeout * 1e9);
        if (now > p->deadline) hc_pipe_expired(p);
    }
}

void hc_stage_pipe_free(hc_stage_pipe_t *p)
{
    for (size_t i = 0; i < p->depth; i++) {
        if (p->ein && p->ein[i]) (void)p->ops->event_destroy(p->ein[i]);
        if (p->eout && p->eout[i]) (void)p->ops->event_destroy(p->eout[i]);
    }
    if (p->buf && !p->stuck) hc_stage_buf_put(p->buf); /* stuck: the device may write it */
    free(p->ein);
    free(p->eout);
    free(p->req);
    free(p->copied);
    free(p->vmem);
    free(p);
}

static hcomm_status_t hc_pipe_streams_get(hc_stage_pipe_t *p, int d)
{
    if (d < 0 || d >= HC_STAGE_PIPE_DEVICES)
        return hc_error(HCOMM_ERR_INVALID, "%s: device %d: the pipeline takes devices 0..%d", p->fn,
                        d, HC_STAGE_PIPE_DEVICES - 1);
    hcomm_status_t st = HCOMM_OK;
    if (!hc_pipe_streams[d].in) st = p->ops->stream_create(d, &hc_pipe_streams[d].in);
    if (st == HCOMM_OK && !hc_pipe_streams[d].out)
        st = p->ops->stream_create(d, &hc_pipe_streams[d].out);
    if (st != HCOMM_OK) return st;
    p->sin = hc_pipe_streams[d].in;
    p->sout = hc_pipe_streams[d].out;
    return HCOMM_OK;
}

/* The record, its slots, streams and events. */
static hcomm_status_t hc_pipe_alloc(hc_stage_pipe_t *p)
{
    size_t d = p->depth;
    p->ein = calloc(d, sizeof(*p->ein));
    p->eout = calloc(d, sizeof(*p->eout));
    p->req = calloc(d, sizeof(*p->req));
    p->copied = calloc(d, sizeof(*p->copied));
    if (!p->ein || !p->eout || !p->req || !p->copied)
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory for the staging pipeline", p->fn);
    if (!p->sstage && !p->rstage) return HCOMM_OK; /* host buffers here: chunks only */
    hcomm_status_t st;
    if ((p->sdev || p->rdev) &&
        (st = hc_pipe_streams_get(p, p->sdev ? p->sattr.device : p->rattr.device)) != HCOMM_OK)
        return st;
    for (size_t i = 0; (p->sdev || p->rdev) && i < d; i++)
        if ((st = p->ops->event_create(&p->ein[i])) != HCOMM_OK ||
            (st = p->ops->event_create(&p->eout[i])) != HCOMM_OK)
            return st;
    size_t sarea = p->sstage || p->one ? d * p->ni * p->chunk : 0;
    size_t rarea = p->rstage && !p->one ? d * p->no * p->chunk : 0;
    if ((st = hc_stage_buf_get(p->fn, sarea + rarea, &p->buf)) != HCOMM_OK) return st;
    p->sslot = p->sstage || p->one ? p->buf->p : NULL;
    p->rslot = !p->rstage ? NULL : p->one ? p->buf->p : p->buf->p + sarea;
    return HCOMM_OK;
}

/* Ends the pipeline (st: the user's request's status, non-blocking) and
 * frees it. Returns the first failure, its words the last error. */
hcomm_status_t hc_stage_pipe_end(hc_stage_pipe_t *p, hcomm_status_t st)
{
    hc_pipe_run(p, false);
    hcomm_status_t ret = p->err != HCOMM_OK ? p->err : st;
    if (p->err != HCOMM_OK) (void)hc_error(p->err, "%s", p->errbuf);
    hc_stage_pipe_free(p);
    return ret;
}

hcomm_status_t hc_stage_pipe_start(const hc_stage_pipe_args_t *pa, hcomm_request_t *req_p,
                                   hc_stage_pipe_t **p_p)
{
    *p_p = NULL;
    hc_stage_pipe_t *p = calloc(1, sizeof(*p));
    if (!p) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory for the staging pipeline", pa->fn);
    *p = (hc_stage_pipe_t){.fn = pa->fn,
                           .a = *pa->a,
                           .comm = pa->comm,
                           .ops = hc_gpu_backend(),
                           .sdev = pa->sdev,
                           .rdev = pa->rdev,
                           .one = pa->one,
                           .es = hc_dtype_size(pa->a->dtype),
                           .depth = (size_t)hc_stage_pipe_depth};
    if (pa->sdev) p->sattr = pa->sattr;
    if (pa->rdev) p->rattr = pa->rattr;
    p->chunk = hc_stage_pipe_chunk / p->es * p->es;
    p->span = pa->span ? pa->span : hc_pipe_span(pa->a, pa->comm->size);
    p->nchunk = (p->span + p->chunk - 1) / p->chunk;
    p->vector = hc_stage_pipe_vector(pa->a->kind) || pa->a->kind == HC_COLL_ALLTOALLV;
    /* the block collectives: chunk k is a piece of each rank's block (a
     * gather's output and a scatter's input: the root's only; 0 pieces
     * elsewhere, where the buffer is ignored) */
    size_t n = (size_t)pa->comm->size;
    hc_coll_kind_t kind = pa->a->kind;
    bool root = pa->comm->rank == pa->a->root;
    p->ni = kind == HC_COLL_REDUCE_SCATTER || kind == HC_COLL_ALLTOALL ||
                    kind == HC_COLL_REDUCE_SCATTERV || kind == HC_COLL_ALLTOALLV
                ? n
            : kind == HC_COLL_SCATTER ? (root ? n : 0)
                                      : 1;
    p->no = kind == HC_COLL_ALLGATHER || kind == HC_COLL_ALLTOALL || kind == HC_COLL_ALLGATHERV ||
                    kind == HC_COLL_ALLTOALLV
                ? n
            : kind == HC_COLL_GATHER ? (root ? n : 0)
                                     : 1;
    /* staged: device memory; host pieces to pack (a vector collective's
     * chunk collective takes the user's displacements: no copy) */
    p->sstage = p->sdev || (p->ni > 1 && p->a.sbuf && !p->vector);
    p->rstage = p->rdev || (p->no > 1 && p->a.rbuf && !p->vector);
    /* (rank 0's allgather or reduce_scatter in place passes one address for
     * its input and output, of different sizes: two areas) */
    p->one = p->one && p->ni == p->no;
    if (p->one) { /* one area for both: copies only where it is device memory */
        p->sstage = p->sdev != NULL;
        p->rstage = p->rdev != NULL;
    }
    p->limit = p->nchunk;
    p->user_last = req_p != NULL;
    hcomm_status_t st = HCOMM_OK;
    if (p->vector) { /* the user's arrays may be reused once the call returns: copied */
        const hc_coll_vec_t *v = pa->a->vec;
        p->vmem = malloc(8 * n * sizeof(size_t));
        if (!p->vmem) {
            st = hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", pa->fn);
        } else {
            p->varg = p->vmem + 4 * n;
            /* allgatherv: out rcounts/rdispls; reduce_scatterv: in
             * rcounts/sdispls (rank j's block j); alltoallv: both sides */
            const size_t *src[4] = {kind == HC_COLL_ALLGATHERV  ? NULL
                                    : kind == HC_COLL_ALLTOALLV ? v->scounts
                                                                : v->rcounts,
                                    kind == HC_COLL_ALLGATHERV ? NULL : v->sdispls,
                                    kind == HC_COLL_REDUCE_SCATTERV ? NULL : v->rcounts,
                                    kind == HC_COLL_REDUCE_SCATTERV ? NULL : v->rdispls};
            size_t **dst[4] = {&p->vin_cnt, &p->vin_displ, &p->vout_cnt, &p->vout_displ};
            for (int i = 0; i < 4; i++)
                if (src[i]) {
                    *dst[i] = p->vmem + (size_t)i * n;
                    memcpy(*dst[i], src[i], n * sizeof(size_t));
                }
        }
    }
    if (st == HCOMM_OK) st = hc_pipe_alloc(p);
    if (st != HCOMM_OK) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", hc_error_last());
        hc_stage_pipe_free(p);
        return hc_error(st, "%s: the staging pipeline for device memory: %s", pa->fn, saved);
    }
    if (!req_p) return hc_stage_pipe_end(p, HCOMM_OK);
    hc_pipe_run(p, true);
    if (p->err != HCOMM_OK) { /* fails now: the user's request (if posted) is never seen */
        struct hcomm_request *ureq = p->user_req;
        st = hc_stage_pipe_end(p, HCOMM_OK);
        if (ureq) {
            hc_request_stat_end(ureq);
            hc_request_free(ureq);
        }
        return st;
    }
    *req_p = hc_request_handle(p->user_req);
    *p_p = p;
    return HCOMM_OK;
}
