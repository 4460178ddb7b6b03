/*
 * Request pool. Requests live in slabs that are never returned to the system
 * while the library is initialized, so a freed or stale handle can be
 * recognised (magic) instead of crashing, and a rendezvous frame can name a
 * request by (index, generation): a frame for a request that completed and was
 * reused is dropped rather than written into someone else's buffer.
 */
#include "core/hc_core.h"
#include "mem/mem.h"

#include <stdlib.h>
#include <string.h>

#define HC_REQ_SLAB 256

static struct {
    struct hcomm_request **slabs;
    uint32_t nslabs;
    uint32_t *free_idx; /* stack of free indices */
    uint32_t nfree, cap;
} hc_reqs;

static struct hcomm_request *hc_request_at(uint32_t idx)
{
    return &hc_reqs.slabs[idx / HC_REQ_SLAB][idx % HC_REQ_SLAB];
}

static bool hc_request_pool_grow(void)
{
    uint32_t n = hc_reqs.nslabs + 1;
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
    for (uint32_t i = 0; i < hc_reqs.nslabs; i++)
        free(hc_reqs.slabs[i]);
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
    req->source_out = NULL;
    req->stat_kind = HC_STATS_NONE;
    req->stat_t0 = 0;
    req->kind = (uint8_t)kind;
    req->status = HCOMM_IN_PROGRESS;
    hc_list_init(&req->link);
    return req;
}

void hc_request_free(struct hcomm_request *req)
{
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

bool hc_request_valid(const struct hcomm_request *req)
{
    if (!req)
        return false;
    /* Only pointers into our slabs are dereferenced. */
    for (uint32_t i = 0; i < hc_reqs.nslabs; i++) {
        const struct hcomm_request *s = hc_reqs.slabs[i];
        if (req >= s && req < s + HC_REQ_SLAB)
            return ((uintptr_t)req - (uintptr_t)s) % sizeof(*req) == 0 &&
                   req->magic == HC_REQ_MAGIC;
    }
    return false;
}
