/*
 * p2p failure handling: when a peer fails (hc_p2p_fail_peer) or a
 * communicator is aborted, revoked or freed (hc_p2p_fail_comm), every
 * request, queued frame and half-received message that needs it fails now
 * rather than waiting for its deadline; and the communicator control frames
 * that carry failures between ranks (GIVE_UP, REVOKE, SHRINK) and the
 * collective probe (COLL_PROBE). All rare: kept out of the data path files.
 */
#include "core/hc_core.h"
#include "core/p2p_int.h"

#include <stdlib.h>

static void hc_p2p_fail_list(hc_list_t *list, struct hcomm_comm *comm, int wpeer,
                             hcomm_status_t status)
{
    hc_list_t *pos, *tmp;
    hc_list_foreach_safe(pos, tmp, list)
    {
        struct hcomm_request *req = hc_container_of(pos, struct hcomm_request, link);
        if (comm && req->comm != comm) continue;
        /* A receive from any source not matched yet waits on every member
         * of its communicator: the failed one may have been its sender. */
        bool any_hit = req->wpeer < 0 && req->kind == HC_REQ_RECV && wpeer >= 0 && req->comm &&
                       req->comm->comm_rank_of[wpeer] >= 0;
        if (wpeer >= 0 && req->wpeer != wpeer && !any_hit) continue;
        if (any_hit) { /* its error names the member that failed; source_out stays unset */
            req->wpeer = wpeer;
            req->peer = req->comm->comm_rank_of[wpeer];
        }
        hc_list_del(&req->link);
        hc_rndv_forget(req);
        if (!req->done) hc_request_complete(req, status);
    }
}

static void hc_p2p_fail_pending(struct hcomm_comm *comm, int wpeer, hcomm_status_t status)
{
    for (int w = 0; w < hc_ctx.size; w++) {
        if (wpeer >= 0 && w != wpeer) continue;
        hc_list_t *pos, *tmp;
        hc_list_foreach_safe(pos, tmp, &hc_ctx.peers[w].pending)
        {
            hc_pending_frame_t *f = hc_container_of(pos, hc_pending_frame_t, link);
            if (comm && (!f->req || f->req->comm != comm)) continue;
            if (f->req && !f->req->done) hc_request_complete(f->req, status);
            hc_p2p_pending_del(&hc_ctx.peers[w], f);
            free(f);
        }
    }
}

/* Receives that are midway through a fragmented message are in no queue. */
static void hc_p2p_fail_partial(struct hcomm_comm *comm, int wpeer, hcomm_status_t status)
{
    for (int w = 0; w < hc_ctx.size; w++) {
        hc_peer_t *p = &hc_ctx.peers[w];
        if (!p->partial || (wpeer >= 0 && w != wpeer)) continue;
        for (int l = 0; l < HC_FRAME_LANES; l++) {
            struct hcomm_request *req = p->partial[l].req;
            if (!req || (comm && req->comm != comm)) continue;
            p->partial[l].req = NULL; /* keep swallowing the rest */
            if (!req->done) hc_request_complete(req, status);
        }
    }
}

void hc_p2p_partial_forget(struct hcomm_request *req)
{
    for (int w = 0; w < hc_ctx.size; w++) {
        hc_peer_t *p = &hc_ctx.peers[w];
        for (int l = 0; p->partial && l < HC_FRAME_LANES; l++)
            if (p->partial[l].req == req)
                p->partial[l].req = NULL; /* its fragments are swallowed */
    }
}

void hc_p2p_fail_comm(struct hcomm_comm *comm, hcomm_status_t status)
{
    hc_p2p_fail_partial(comm, -1, status);
    hc_p2p_fail_list(&comm->posted, comm, -1, status);
    hc_p2p_fail_list(&hc_ctx.rndv_active, comm, -1, status);
    hc_p2p_fail_pending(comm, -1, status);
}

void hc_p2p_give_up(struct hcomm_comm *comm, hcomm_status_t status, int cause)
{
    for (int r = 0; r < comm->size; r++) {
        int w = comm->world_ranks[r];
        if (w != hc_ctx.rank && !hc_ctx.peers[w].failed && hc_ctx.peers[w].conn)
            hc_p2p_control(&hc_ctx.peers[w], HC_FRAME_GIVE_UP, comm->ctx_id | HC_CTX_COLL,
                           (uint64_t)(-(int64_t)status), (uint64_t)(cause + 1));
    }
}

void hc_p2p_revoke(struct hcomm_comm *comm)
{
    for (int r = 0; r < comm->size; r++) {
        int w = comm->world_ranks[r];
        if (w != hc_ctx.rank && !hc_ctx.peers[w].failed && hc_ctx.peers[w].conn)
            hc_p2p_control(&hc_ctx.peers[w], HC_FRAME_REVOKE, comm->ctx_id | HC_CTX_COLL, 0, 0);
    }
}

void hc_p2p_shrink_frame(struct hcomm_comm *comm, int peer, int32_t tag, uint64_t a, uint64_t b,
                         const void *payload, uint32_t len)
{
    int w = comm->world_ranks[peer];
    if (w == hc_ctx.rank || hc_ctx.peers[w].failed || !hc_ctx.peers[w].conn) return;
    hc_frame_hdr_t hdr = {.type = HC_FRAME_SHRINK,
                          .ctx_id = comm->ctx_id | HC_CTX_COLL,
                          .tag = tag,
                          .a = a,
                          .b = b,
                          .len = len};
    hc_error_saved_t saved; /* best effort, as hc_p2p_control */
    hc_error_save(&saved);
    hcomm_status_t st = hc_p2p_put(&hc_ctx.peers[w], &hdr, payload, NULL);
    if (st != HCOMM_OK) {
        hc_log_warn("cannot send a shrink frame to rank %d: %s (%s)", w, hcomm_strerror(st),
                    hc_error_last());
        hc_error_restore(&saved);
    }
}

void hc_p2p_coll_probe(struct hcomm_comm *comm, int peer, int32_t tag)
{
    int w = comm->world_ranks[peer];
    if (w != hc_ctx.rank && !hc_ctx.peers[w].failed && hc_ctx.peers[w].conn)
        hc_p2p_control(&hc_ctx.peers[w], HC_FRAME_COLL_PROBE, comm->ctx_id | HC_CTX_COLL,
                       (uint64_t)(uint32_t)tag, 0);
}

void hc_p2p_fail_peer(int wpeer, hcomm_status_t status)
{
    hc_p2p_fail_partial(NULL, wpeer, status);
    hc_list_t *pos;
    for (pos = hc_ctx.comms.next; pos != &hc_ctx.comms; pos = pos->next) {
        struct hcomm_comm *comm = hc_container_of(pos, struct hcomm_comm, link);
        hc_p2p_fail_list(&comm->posted, comm, wpeer, status);
    }
    hc_p2p_fail_list(&hc_ctx.rndv_active, NULL, wpeer, status);
    hc_p2p_fail_pending(NULL, wpeer, status);
}

/* ---- communicator control frames, received ------------------------------- */

/* GIVE_UP, REVOKE, SHRINK and COLL_PROBE frames from world rank wpeer
 * (hc_p2p_deliver): handed to the communicator and coll/. */
void hc_p2p_comm_frame_deliver(int wpeer, const hc_frame_hdr_t *hdr, const void *payload)
{
    switch (hdr->type) {
    case HC_FRAME_GIVE_UP: {
        struct hcomm_comm *comm = hc_p2p_comm_of(hdr->ctx_id);
        if (!comm) {
            /* The sender created, used and gave up on a communicator this
             * rank has not created yet (a fast rank right after a split):
             * kept until it is, or its collectives would wait for ever. */
            hc_p2p_unexpected(&hc_ctx.orphans, wpeer, hdr, payload);
            return;
        }
        if (hc_coll_ops.gave_up)
            hc_coll_ops.gave_up(comm, comm->comm_rank_of[wpeer], (hcomm_status_t)(-(int64_t)hdr->a),
                                (int)hdr->b - 1);
        return;
    }
    case HC_FRAME_REVOKE:
    case HC_FRAME_SHRINK: {
        /* For a communicator this rank has not created yet (a fast member
         * made, used and revoked or shrank it): kept until it is, as
         * give-ups are. */
        struct hcomm_comm *comm = hc_p2p_comm_of(hdr->ctx_id);
        if (!comm)
            hc_p2p_unexpected(&hc_ctx.orphans, wpeer, hdr, payload);
        else if (comm->comm_rank_of[wpeer] < 0)
            return;
        else if (hdr->type == HC_FRAME_REVOKE)
            hc_comm_revoked(comm, comm->comm_rank_of[wpeer]);
        else if (hc_coll_ops.shrink)
            hc_coll_ops.shrink(comm, comm->comm_rank_of[wpeer], hdr, payload);
        return;
    }
    case HC_FRAME_COLL_PROBE: {
        /* no communicator yet: this rank is behind the prober, nothing to say */
        struct hcomm_comm *comm = hc_p2p_comm_of(hdr->ctx_id);
        if (comm && hc_coll_ops.probe && comm->comm_rank_of[wpeer] >= 0)
            hc_coll_ops.probe(comm, comm->comm_rank_of[wpeer], (int32_t)(uint32_t)hdr->a);
        return;
    }
    default:
        break;
    }
}
