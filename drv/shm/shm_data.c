/*
 * shm driver, data path: the FIFOs.
 *
 * A FIFO is `nslots` receive slots owned by the receiver plus the receiver's
 * consumed counter (the credits). A slot is {seq, frame header, payload}: the
 * sender fills it and publishes it by storing seq = n+1 with release order;
 * the receiver polls the seq of its next slot with acquire order, so an 8-byte
 * message is one cache line handed between the two cores. Credits return by
 * the receiver storing its consumed count, which the sender reads only when
 * its cached copy says the FIFO is full.
 *
 * Large messages skip the slots: the core moves them with get/write
 * (shm_rma.c) when connect found CMA usable.
 */
#include "drv/shm/shm.h"

#include <string.h>

hcomm_status_t hc_drv_shm_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
                              void *cookie)
{
    (void)cookie;
    hc_shm_conn_t *c = (hc_shm_conn_t *)conn;
    hc_drv_shm_t *s = (hc_drv_shm_t *)conn->drv;
    if (HC_UNLIKELY(hdr->len > conn->max_frame))
        return hc_error(HCOMM_ERR_INVALID, "shm put: a %u-byte frame exceeds max_frame %zu",
                        hdr->len, conn->max_frame);
    if (HC_UNLIKELY(c->head - c->tail_cache >= s->nslots)) {
        c->tail_cache = __atomic_load_n(&c->out->tail, __ATOMIC_ACQUIRE);
        if (c->head - c->tail_cache >= s->nslots) return HCOMM_ERR_AGAIN;
    }
    hc_shm_slot_t *slot =
        (hc_shm_slot_t *)(c->out->slots + (c->head & (s->nslots - 1)) * s->slot_size);
    if (hdr->a == 0 && hdr->b == 0) {
        uint8_t *p = (uint8_t *)&slot->hdr;
        memcpy(p, hdr, HC_SHM_COMPACT_HDR);
        slot->hdr.reserved = HC_SHM_COMPACT;
        if (hdr->len) memcpy(p + HC_SHM_COMPACT_HDR, payload, hdr->len);
    } else {
        slot->hdr = *hdr;
        slot->hdr.reserved = 0;
        if (hdr->len) memcpy(slot->payload, payload, hdr->len);
    }
    /* Publish: the receiver's acquire load of seq orders header and payload. */
    __atomic_store_n(&slot->seq, c->head + 1, __ATOMIC_RELEASE);
    c->head++;
    return HCOMM_OK;
}

int hc_drv_shm_progress(hc_drv_t *drv)
{
    hc_drv_shm_t *s = (hc_drv_shm_t *)drv;
    const hc_drv_env_t *env = drv->env;
    int events = 0;
    for (int i = 0; i < s->nactive; i++) {
        hc_shm_conn_t *c = &s->conns[s->active[i]];
        for (int budget = 0; budget < 16; budget++) {
            hc_shm_slot_t *slot =
                (hc_shm_slot_t *)(c->in->slots + (c->in_tail & (s->nslots - 1)) * s->slot_size);
            if (__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE) != c->in_tail + 1) break;
            if (slot->hdr.reserved & HC_SHM_COMPACT) {
                hc_frame_hdr_t h;
                memcpy(&h, &slot->hdr, HC_SHM_COMPACT_HDR);
                h.reserved = 0;
                h.a = h.b = 0;
                env->deliver(env->core, &c->base, &h,
                             (const uint8_t *)&slot->hdr + HC_SHM_COMPACT_HDR);
            } else {
                env->deliver(env->core, &c->base, &slot->hdr, slot->payload);
            }
            c->in_tail++;
            __atomic_store_n(&c->in->tail, c->in_tail, __ATOMIC_RELEASE);
            events++;
        }
    }
    return events;
}
