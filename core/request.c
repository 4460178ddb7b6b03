/*
 * Request pool. Requests live in slabs that are never returned to the system
 * while the library is initialized, and every slot counts its reuses (gen).
 * Both the user's handles (hc_request_handle) and rendezvous frames name a
 * request by (index, generation), so a handle kept after its request
 * completed is refused instead of completing whichever request now uses the
 * slot, and a frame for a request that completed and was reused is dropped
 * rather than written into someone else's buffer. Generations never go back
 * across finalize and init: a new pool's slots start above every generation
 * the previous one handed out.
 */
#include "core/hc_core.h"
#include "core/p2p_int.h"
#include "mem/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HC_REQ_SLAB 256
#define HC_REQ_MAX_SLOTS (1u << 31) /* a handle holds the index in 31 bits */

static struct {
    struct hcomm_request **slabs;
    uint32_t nslabs;
    uint32_t *free_idx; /* stack of free indices */
    uint32_t nfree, cap;
} hc_reqs;

/* The highest generation any slot reached, kept across finalize: slots of
 * the next pool start there. */
static uint32_t hc_req_gen_floor;

static struct hcomm_request *hc_request_at(uint32_t idx)
{
    return &hc_reqs.slabs[idx / HC_REQ_SLAB][idx % HC_REQ_SLAB];
}

static bool hc_request_pool_grow(void)
{
    uint32_t n = hc_reqs.nslabs + 1;
    if ((uint64_t)n * HC_REQ_SLAB > HC_REQ_MAX_SLOTS)
        return false;
    struct hcomm_request **slabs = realloc(hc_reqs.slabs, n * sizeof(*slabs));
    if (!slabs)
        return false;
    hc_reqs.slabs = slabs;
    uint32_t *free_idx = realloc(hc_reqs.free_idx, n * HC_REQ_SLAB * sizeof(*free_idx));
    if (!free_idx)
        return false;
    hc_reqs.free_idx = free_idx;
    struct hcomm_request *slab = calloc(HC_REQ_SLAB, sizeof(*slab));
    if (!slab)
        return false;
    slabs[hc_reqs.nslabs] = slab;
    for (int i = HC_REQ_SLAB - 1; i >= 0; i--) {
        uint32_t idx = hc_reqs.nslabs * HC_REQ_SLAB + (uint32_t)i;
        slab[i].index = idx;
        slab[i].gen = hc_req_gen_floor;
        slab[i].magic = HC_REQ_FREED;
        hc_reqs.free_idx[hc_reqs.nfree++] = idx;
    }
    hc_reqs.nslabs = n;
    return true;
}

hcomm_status_t hc_request_pool_init(void)
{
    memset(&hc_reqs, 0, sizeof(hc_reqs));
    return hc_request_pool_grow() ? HCOMM_OK
                                  : hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: request pool");
}

void hc_request_pool_fini(void)
{
    for (uint32_t i = 0; i < hc_reqs.nslabs; i++) {
        for (uint32_t k = 0; k < HC_REQ_SLAB; k++) {
            hc_req_gen_floor = HC_MAX(hc_req_gen_floor, hc_reqs.slabs[i][k].gen);
            if (hc_reqs.slabs[i][k].magic != HC_REQ_FREED)
                free(hc_reqs.slabs[i][k].error); /* a failed request never waited for */
        }
        free(hc_reqs.slabs[i]);
    }
    free(hc_reqs.slabs);
    free(hc_reqs.free_idx);
    memset(&hc_reqs, 0, sizeof(hc_reqs));
}

struct hcomm_request *hc_request_alloc(hc_req_kind_t kind)
{
    if (HC_UNLIKELY(hc_reqs.nfree == 0) && !hc_request_pool_grow())
        return NULL;
    struct hcomm_request *req = hc_request_at(hc_reqs.free_idx[--hc_reqs.nfree]);
    /* No memset: this is the hot path. Fields the callers do not always
     * set are reset here; the rest is written by every caller. */
    req->gen++;
    req->magic = HC_REQ_MAGIC;
    req->done = false;
    req->user = false;
    req->rndv = false;
    req->deferred = false;
    req->dev = false;
    req->comm = NULL;
    req->done_bytes = 0;
    req->msg_len = 0;
    req->inflight = 0;
    req->remote_id = 0;
    req->rndv_state = 0;
    req->rndv_held = NULL;
    req->put_held = NULL;
    req->drain = NULL;
    req->coll = NULL;
    req->stage = NULL;
    req->stage_src = NULL;
    req->source_out = NULL;
    req->stat_kind = HC_STATS_NONE;
    req->stat_t0 = 0;
    req->error = NULL;
    req->kind = (uint8_t)kind;
    req->status = HCOMM_IN_PROGRESS;
    hc_list_init(&req->link);
    return req;
}

void hc_request_keep_error(struct hcomm_request *req)
{
    free(req->error);
    const char *last = hc_error_last();
    /* NULL when there are no words (failed in bulk: the waiter names the
     * peer) or no memory: the last error then stays as it is */
    req->error = last[0] ? strdup(last) : NULL;
}

/* Drops every reference the library holds to req (queues, streams). */
void hc_request_detach(struct hcomm_request *req)
{
    hc_list_del(&req->link);
    hc_p2p_partial_forget(req);
    for (int w = 0; w < hc_ctx.size && hc_ctx.npending; w++) {
        hc_list_t *pos, *tmp;
        hc_list_foreach_safe(pos, tmp, &hc_ctx.peers[w].pending)
        {
            hc_pending_frame_t *f = hc_container_of(pos, hc_pending_frame_t, link);
            if (f->req != req)
                continue;
            hc_p2p_pending_del(&hc_ctx.peers[w], f);
            free(f);
        }
    }
}

void hc_request_free(struct hcomm_request *req)
{
    /* Freed before it completed (its operation failed or was cancelled):
     * a fragment lane or a queued frame of a peer must not keep pointing
     * at a slot that another request will have. */
    if (HC_UNLIKELY(!req->done))
        hc_request_detach(req);
    if (HC_UNLIKELY(req->error)) {
        free(req->error);
        req->error = NULL;
    }
    /* Its rendezvous registration (a collective that failed frees its
     * requests still in flight to live peers): a record left referenced
     * stays pinned to the end, and loses its deregistration then. */
    if (HC_UNLIKELY(req->rndv_held != NULL))
        hc_rndv_forget(req);
    /* A driver still holds payloads of it (puts that returned IN_PROGRESS:
     * the request failed before they went out). Its slot must not be
     * reused under their put_done, nor the memory they point into freed:
     * the last put_done recycles it (hc_request_drained). */
    if (HC_UNLIKELY(req->inflight > 0)) {
        req->magic = HC_REQ_DRAINING;
        return;
    }
    req->magic = HC_REQ_FREED;
    if (HC_UNLIKELY(req->put_held)) { /* no put of it is in flight any more */
        hc_mem_reg_cache_put(req->put_held);
        req->put_held = NULL;
    }
    if (HC_UNLIKELY(req->drain)) {
        hc_drain_t *d = req->drain;
        req->drain = NULL;
        if (--d->refs == 0) {
            free(d->buf);
            free(d);
        }
    }
    hc_reqs.free_idx[hc_reqs.nfree++] = req->index;
}

void hc_request_drained(struct hcomm_request *req)
{
    if (req->magic == HC_REQ_DRAINING && req->inflight == 0)
        hc_request_free(req);
}

struct hcomm_request *hc_request_by_id(uint64_t id)
{
    uint32_t idx = (uint32_t)id, gen = (uint32_t)(id >> 32);
    if (idx >= hc_reqs.nslabs * HC_REQ_SLAB)
        return NULL;
    struct hcomm_request *req = hc_request_at(idx);
    return (req->magic == HC_REQ_MAGIC && req->gen == gen) ? req : NULL;
}

/* The slot a handle names, or NULL when it is not a handle of a slot that
 * exists. */
static struct hcomm_request *hc_request_slot(hcomm_request_t handle)
{
    uint64_t v = (uint64_t)(uintptr_t)handle;
    uint32_t idx = (uint32_t)v >> 1;
    if (!(v & 1) || idx >= hc_reqs.nslabs * HC_REQ_SLAB)
        return NULL;
    return hc_request_at(idx);
}

struct hcomm_request *hc_request_from_handle(hcomm_request_t handle)
{
    struct hcomm_request *req = hc_request_slot(handle);
    if (HC_UNLIKELY(!req))
        return NULL;
    uint32_t gen = (uint32_t)((uint64_t)(uintptr_t)handle >> 32);
    return HC_LIKELY(req->gen == gen && req->magic == HC_REQ_MAGIC && req->user) ? req : NULL;
}

void hc_request_handle_explain(hcomm_request_t handle, char *buf, size_t len)
{
    const struct hcomm_request *req = hc_request_slot(handle);
    uint32_t gen = (uint32_t)((uint64_t)(uintptr_t)handle >> 32);
    if (!handle)
        snprintf(buf, len, "NULL");
    else if (!req || gen > req->gen)
        snprintf(buf, len, "not a request handle (never returned by hcomm, or of an earlier "
                           "hcomm_init)");
    else if (gen < req->gen)
        snprintf(buf, len, "stale: its request already completed (hcomm_wait, a hcomm_test that "
                           "said done, or hcomm_finalize) and its slot has served another since");
    else if (req->magic != HC_REQ_MAGIC)
        snprintf(buf, len, "already completed (by hcomm_wait or a hcomm_test that said done)");
    else
        snprintf(buf, len, "not a request handed out to the caller");
}
