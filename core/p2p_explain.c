/*
 * Hang reports of p2p requests (hc_p2p_explain, called by core/hang.c for a
 * wait past HCOMM_WARN_AFTER): what a send or a receive waits for, in words,
 * from the protocol's state (partial messages, rendezvous state, unexpected
 * messages of another tag, frames queued for credit).
 */
#include "core/hc_core.h"
#include "core/p2p_int.h"
#include "core/stats.h"

#include <stdio.h>

/* "with tag 7", or on a collective context "for collective #2 (broadcast)":
 * the tag's sequence number and the kind its signature carries. */
static void hc_p2p_tag_words(uint32_t ctx_id, int32_t tag, char *buf, size_t len)
{
    if (ctx_id & HC_CTX_COLL)
        snprintf(buf, len, "for collective #%u (%s)", (unsigned)tag & HC_COLL_TAG_SEQ_MASK,
                 hc_stats_kind_name(((unsigned)tag >> 16) & HC_STATS_SIG_KIND_MASK));
    else
        snprintf(buf, len, "with tag %d", (int)tag);
}

static const char *hc_p2p_who(const struct hcomm_request *req, char *buf, size_t len)
{
    if (req->peer == HCOMM_ANY_SOURCE) {
        snprintf(buf, len, "any rank");
        return buf;
    }
    if (req->comm && !req->comm->is_world && req->wpeer >= 0)
        snprintf(buf, len, "rank %d (world rank %d)", req->peer, req->wpeer);
    else
        snprintf(buf, len, "rank %d", req->peer);
    return buf;
}

void hc_p2p_explain(const struct hcomm_request *req, hc_explain_t *e)
{
    char who[48];
    hc_p2p_who(req, who, sizeof(who));
    if (req->wpeer >= 0) hc_explain_wait(e, req->wpeer);
    if (req->kind == HC_REQ_RECV) {
        const hc_peer_t *p = req->wpeer >= 0 ? &hc_ctx.peers[req->wpeer] : NULL;
        const hc_p2p_partial_t *pp = NULL;
        for (int l = 0; p && p->partial && l < HC_FRAME_LANES && !pp; l++)
            if (p->partial[l].req == req) pp = &p->partial[l];
        if (pp) {
            hc_explain_add(e, "data from %s: %zu of %zu bytes of its message arrived", who, pp->off,
                           pp->len);
        } else if (req->rndv_state == HC_RNDV_GETTING) {
            hc_explain_add(e, "data from %s: reading its %zu bytes (RMA get in flight)", who,
                           req->msg_len);
        } else if (req->rndv_state == HC_RNDV_CTS_SENT) {
            hc_explain_add(e, "data from %s: %zu of %zu bytes arrived (clear-to-send given)", who,
                           req->done_bytes, req->msg_len);
        } else {
            char what[96];
            hc_p2p_tag_words(req->ctx_id, req->tag, what, sizeof(what));
            hc_explain_add(e, "data from %s: a message of %zu bytes %s, none has arrived", who,
                           req->len, what);
            /* what did arrive from it, unexpected (another tag: a mismatch) */
            int other = 0;
            int32_t first_tag = 0;
            if (req->comm) {
                hc_list_t *pos;
                for (pos = req->comm->unexpected.next; pos != &req->comm->unexpected;
                     pos = pos->next) {
                    const hc_unexp_t *u = hc_container_of(pos, hc_unexp_t, link);
                    if (u->wpeer == req->wpeer && u->ctx_id == req->ctx_id) {
                        if (!other++) first_tag = u->tag;
                    }
                }
            }
            if (other) {
                char what2[96];
                hc_p2p_tag_words(req->ctx_id, first_tag, what2, sizeof(what2));
                hc_explain_add(e, " (%d other message%s from it wait%s unreceived, the first %s)",
                               other, other > 1 ? "s" : "", other > 1 ? "" : "s", what2);
            }
        }
        return;
    }
    /* a send */
    int queued = 0;
    if (req->wpeer >= 0) {
        const hc_list_t *pl = &hc_ctx.peers[req->wpeer].pending;
        for (const hc_list_t *pos = pl->next; pos != pl; pos = pos->next)
            queued++;
    }
    switch (req->rndv_state) {
    case HC_RNDV_RTS_SENT:
        hc_explain_add(e,
                       "%s to take a message of %zu bytes: its matching receive is not posted "
                       "(rendezvous request sent, no answer)",
                       who, req->len);
        return;
    case HC_RNDV_WRITING:
        hc_explain_add(e, "%s: the RMA write of %zu bytes is in flight", who, req->len);
        return;
    case HC_RNDV_STREAMING:
        hc_explain_add(e, "%s: streaming %zu bytes, %zu handed to the driver", who, req->len,
                       req->done_bytes);
        break;
    default:
        hc_explain_add(e, "%s to take a message of %zu bytes (%zu handed to the driver)", who,
                       req->len, req->done_bytes);
    }
    if (queued)
        hc_explain_add(e, "; a credit: %d frame%s queued for it, its receive slots are full",
                       queued, queued > 1 ? "s" : "");
    if (req->inflight)
        hc_explain_add(e, "; %u put%s still inside the driver", req->inflight,
                       req->inflight > 1 ? "s" : "");
}
