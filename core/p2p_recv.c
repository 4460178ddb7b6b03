/*
 * The p2p receive path: a frame from a driver (hc_p2p_deliver, called
 * inside driver progress, so it never waits) meets a posted receive of its
 * communicator, source and tag, or is kept as unexpected until one is
 * posted (hc_p2p_irecv); fragments of an eager message are reassembled per
 * (peer, lane); messages for a communicator this rank has not created yet
 * wait as orphans. Separate from the send path (p2p.c) because the two share
 * only the frame format; the matching functions here are inlined into
 * deliver and irecv, so they stay together.
 */
#include "core/hc_core.h"
#include "core/p2p_int.h"
#include "core/stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Completes a receive whose matched message has msg_len bytes where the
 * receive expects req->len: ERR_TRUNCATED naming both sizes. */
void hc_p2p_size_mismatch(struct hcomm_request *req, size_t msg_len)
{
    hc_request_complete(req, hc_error(HCOMM_ERR_TRUNCATED,
                                      "hcomm_recv: message of %zu bytes from rank %d tag %d %s "
                                      "the %zu-byte receive%s",
                                      msg_len, req->peer, req->tag,
                                      msg_len > req->len ? "does not fit" : "is shorter than",
                                      req->len, msg_len > req->len ? " buffer" : ""));
}

/* A collective's receive met a message of the same collective slot from a
 * rank that called it with other arguments (hc_coll_tag_conflict). */
static HC_NOINLINE void hc_p2p_coll_conflict(struct hcomm_request *req, int32_t theirs)
{
    char why[400];
    if (hc_coll_ops.conflict)
        hc_coll_ops.conflict(req->ctx_id, req->tag, theirs, req->peer, why, sizeof(why));
    else
        snprintf(why, sizeof(why), "rank %d called a different collective here", req->peer);
    hc_request_complete(req, hc_error(HCOMM_ERR_INVALID, "%s", why));
}

/* Received bytes into req's buffer at off: memcpy, or for a device buffer
 * (GPUDirect RDMA, core/gdr.c) the GPU dispatch, never the CPU. */
hcomm_status_t hc_p2p_recv_put(struct hcomm_request *req, size_t off, const void *data, size_t len)
{
    if (HC_LIKELY(!req->dev)) {
        memcpy((char *)req->buf + off, data, len);
        return HCOMM_OK;
    }
    hcomm_status_t st = hc_gpu_copy((char *)req->buf + off, &req->mem, data, NULL, len);
    if (st == HCOMM_OK) return HCOMM_OK;
    char saved[512];
    snprintf(saved, sizeof(saved), "%s", hc_error_last());
    return hc_error(st, "hcomm_recv: %zu bytes from rank %d into device memory: %s", len, req->peer,
                    saved);
}

/* The same; false: the copy failed and req is complete with the error. */
bool hc_p2p_recv_copy(struct hcomm_request *req, size_t off, const void *data, size_t len)
{
    hcomm_status_t st = hc_p2p_recv_put(req, off, data, len);
    if (HC_LIKELY(st == HCOMM_OK)) return true;
    if (!req->done) hc_request_complete(req, st);
    return false;
}

static void hc_p2p_eager_recv(struct hcomm_request *req, const void *data, size_t len)
{
    req->msg_len = len;
    if (HC_UNLIKELY(len != req->len)) {
        if (len && len < req->len && !hc_p2p_recv_copy(req, 0, data, len)) return;
        hc_p2p_size_mismatch(req, len);
        return;
    }
    if (len && !hc_p2p_recv_copy(req, 0, data, len)) return;
    hc_request_complete(req, HCOMM_OK);
}

/* The state of the fragmented message arriving from p on lane (created at
 * the first one; NULL when out of memory, logged). */
static hc_p2p_partial_t *hc_p2p_partial(hc_peer_t *p, int wpeer, uint8_t lane)
{
    if (HC_UNLIKELY(!p->partial)) {
        p->partial = calloc(HC_FRAME_LANES, sizeof(*p->partial));
        if (!p->partial) {
            hc_log_error("out of memory for the fragmented messages of rank %d: dropped", wpeer);
            return NULL;
        }
    }
    return &p->partial[lane & (HC_FRAME_LANES - 1)];
}

/* The first fragment of a multi-frame EAGER message met its receive. */
static void hc_p2p_eager_first(struct hcomm_request *req, hc_p2p_partial_t *pp, size_t total,
                               const void *data, size_t len)
{
    req->msg_len = total;
    if (HC_UNLIKELY(!pp)) {
        hc_request_complete(req, hc_error(HCOMM_ERR_NO_MEMORY,
                                          "hcomm_recv: no memory to reassemble a %zu-byte "
                                          "message from rank %d",
                                          total, req->peer));
        return;
    }
    pp->active = true;
    pp->unexp = NULL;
    pp->off = len;
    pp->len = total;
    if (total > req->len) {
        pp->req = NULL; /* its fragments are swallowed */
        hc_p2p_size_mismatch(req, total);
        return;
    }
    if (!hc_p2p_recv_copy(req, 0, data, len)) {
        pp->req = NULL; /* its fragments are swallowed */
        return;
    }
    pp->req = req;
}

/* A continuation fragment from peer p on lane. */
static void hc_p2p_eager_cont(hc_peer_t *p, int wpeer, uint8_t lane, const void *data, size_t len)
{
    hc_p2p_partial_t *pp = p->partial ? &p->partial[lane & (HC_FRAME_LANES - 1)] : NULL;
    if (HC_UNLIKELY(!pp || !pp->active || pp->off + len > pp->len)) {
        hc_log_warn("unexpected continuation fragment from rank %d (lane %u) dropped", wpeer, lane);
        return;
    }
    struct hcomm_request *req = pp->req;
    hc_unexp_t *u = pp->unexp;
    if (req && !hc_p2p_recv_copy(req, pp->off, data, len))
        pp->req = req = NULL; /* failed: the rest is swallowed */
    else if (u)
        memcpy(u->data + pp->off, data, len);
    pp->off += len;
    if (u) u->have = pp->off;
    if (pp->off < pp->len) return;
    pp->active = false;
    pp->req = NULL;
    pp->unexp = NULL;
    if (!req) return;
    if (req->msg_len == req->len)
        hc_request_complete(req, HCOMM_OK);
    else
        hc_p2p_size_mismatch(req, req->msg_len);
}

void hc_p2p_unexpected(hc_list_t *q, int wpeer, const hc_frame_hdr_t *hdr, const void *payload)
{
    hc_stats.unexpected++;
    bool more = hdr->type == HC_FRAME_EAGER && (hdr->flags & HC_FRAME_FLAG_MORE);
    size_t dlen = hdr->type == HC_FRAME_EAGER ? (more ? hdr->a : hdr->len)
                  : hdr->type == HC_FRAME_SHRINK ? hdr->len
                                                 : 0;
    hc_unexp_t *u = malloc(sizeof(*u) + dlen);
    hc_peer_t *p = &hc_ctx.peers[wpeer];
    hc_p2p_partial_t *pp = more ? hc_p2p_partial(p, wpeer, hdr->lane) : NULL;
    if (!u || (more && !pp)) {
        hc_log_error("out of memory queueing a message from rank %d: dropped", wpeer);
        free(u);
        if (pp) {
            pp->active = true; /* swallow its fragments */
            pp->req = NULL;
            pp->unexp = NULL;
            pp->off = hdr->len;
            pp->len = hdr->a;
        }
        return;
    }
    u->wpeer = wpeer;
    u->ctx_id = hdr->ctx_id;
    u->tag = hdr->tag;
    u->type = hdr->type;
    u->lane = hdr->lane & (HC_FRAME_LANES - 1);
    if (hdr->type == HC_FRAME_EAGER) {
        u->len = dlen;
        u->have = hdr->len;
        if (hdr->len) memcpy(u->data, payload, hdr->len);
        if (more) {
            pp->active = true;
            pp->req = NULL;
            pp->unexp = u;
            pp->off = hdr->len;
            pp->len = dlen;
        }
    } else if (hdr->type == HC_FRAME_GIVE_UP) {
        u->len = (size_t)hdr->b; /* its cause + 1 */
        u->remote_id = hdr->a;   /* -status */
    } else if (hdr->type == HC_FRAME_SHRINK) {
        u->len = hdr->len;
        u->remote_id = hdr->a;
        u->b = hdr->b;
        if (hdr->len) memcpy(u->data, payload, hdr->len);
    } else if (hdr->type == HC_FRAME_REVOKE) {
        u->len = 0;
    } else {
        (void)hc_rndv_offer_parse(hdr, payload, &u->offer); /* checked by the caller */
        u->len = hdr->a;
        u->remote_id = hdr->b;
    }
    hc_list_push_back(q, &u->link);
}

/* A receive from any source found its message: from here on it is a
 * receive from that rank (the caller learns which through source_out). */
static void hc_p2p_bind_source(struct hcomm_request *req, int src, int wpeer)
{
    req->peer = src;
    req->wpeer = wpeer;
    if (req->source_out) *req->source_out = src;
    hc_stats_peer_rx(wpeer, req->len);
}

/* An EAGER or RTS frame from p (world rank wpeer): the first posted receive
 * of its communicator that matches takes it, or it waits as unexpected. */
static void hc_p2p_deliver_msg(hc_peer_t *p, int wpeer, const hc_frame_hdr_t *hdr,
                               const void *payload)
{
    struct hcomm_request *req;
    hc_rndv_offer_t offer;
    if (HC_UNLIKELY(hdr->type == HC_FRAME_RTS && !hc_rndv_offer_parse(hdr, payload, &offer))) {
        hc_log_warn("malformed RTS from rank %d dropped", wpeer);
        return;
    }
    struct hcomm_comm *comm = hc_p2p_comm_of(hdr->ctx_id);
    if (HC_UNLIKELY(!comm)) {
        hc_p2p_unexpected(&hc_ctx.orphans, wpeer, hdr, payload);
        return;
    }
    int src = comm->comm_rank_of[wpeer];
    hc_list_t *pos, *tmp;
    hc_list_foreach_safe(pos, tmp, &comm->posted)
    {
        req = hc_container_of(pos, struct hcomm_request, link);
        if ((req->peer != src && req->peer != HCOMM_ANY_SOURCE) || req->ctx_id != hdr->ctx_id)
            continue;
        if (HC_UNLIKELY(hc_coll_tag_conflict(hdr->ctx_id, req->tag, hdr->tag))) {
            hc_list_del(&req->link);
            hc_p2p_coll_conflict(req, hdr->tag);
            break; /* the message stays unexpected; the collective fails */
        }
        if (req->tag != hdr->tag) continue;
        hc_list_del(&req->link);
        if (req->peer == HCOMM_ANY_SOURCE) hc_p2p_bind_source(req, src, wpeer);
        if (hdr->type == HC_FRAME_EAGER && (hdr->flags & HC_FRAME_FLAG_MORE)) {
            hc_p2p_eager_first(req, hc_p2p_partial(p, wpeer, hdr->lane), hdr->a, payload, hdr->len);
        } else if (hdr->type == HC_FRAME_EAGER) {
            hc_p2p_eager_recv(req, payload, hdr->len);
        } else {
            hc_rndv_matched(req, p, hdr->a, hdr->b, &offer);
        }
        return;
    }
    hc_p2p_blk_t *b = hc_ctx.blk;
    if (HC_UNLIKELY(b != NULL) && b->ctx_id == hdr->ctx_id && b->src == src && b->tag == hdr->tag) {
        /* The blocking receive polling now (posted after every receive
         * above) takes it; anything but the message it can take whole is
         * left unexpected, where its request finds it. */
        hc_ctx.blk = NULL;
        if (hdr->type == HC_FRAME_EAGER && !(hdr->flags & HC_FRAME_FLAG_MORE) &&
            hdr->len == b->len) {
            if (hdr->len) memcpy(b->buf, payload, hdr->len);
            b->state = HC_P2P_BLK_DONE;
            return;
        }
        b->state = HC_P2P_BLK_LEFT;
    }
    if ((hdr->ctx_id & HC_CTX_COLL) && hc_coll_ops.stray) hc_coll_ops.stray(comm, src, hdr->tag);
    hc_p2p_unexpected(&comm->unexpected, wpeer, hdr, payload);
}

void hc_p2p_deliver(void *core, hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload)
{
    (void)core;
    int wpeer = conn->peer;
    hc_peer_t *p = &hc_ctx.peers[wpeer];
    p->rx_frames++;
    if (HC_UNLIKELY(hc_ctx.tearing_down)) return;

    switch (hdr->type) {
    case HC_FRAME_EAGER:
    case HC_FRAME_RTS:
        hc_p2p_deliver_msg(p, wpeer, hdr, payload);
        return;
    case HC_FRAME_GIVE_UP:
    case HC_FRAME_REVOKE:
    case HC_FRAME_SHRINK:
    case HC_FRAME_COLL_PROBE:
        hc_p2p_comm_frame_deliver(wpeer, hdr, payload);
        return;
    case HC_FRAME_CONT:
        hc_p2p_eager_cont(p, wpeer, hdr->lane, payload, hdr->len);
        return;
    case HC_FRAME_CTS:
    case HC_FRAME_DATA:
    case HC_FRAME_FIN:
    case HC_FRAME_NACK:
        hc_rndv_frame(p, wpeer, hdr, payload);
        return;
    default:
        hc_log_warn("unknown frame type %u from rank %d dropped", hdr->type, wpeer);
    }
}

/* Driver passes of the request-free receive before it posts a request (a
 * message already in a driver's queue is found by the first). */
#define HC_P2P_BLK_POLLS 16

bool hc_p2p_recv_now(struct hcomm_comm *comm, void *buf, size_t len, int peer, int32_t tag)
{
    int wpeer = comm->world_ranks[peer];
    if (!hc_list_empty(&comm->unexpected) || hc_ctx.blk || hc_ctx.in_progress ||
        HC_UNLIKELY(hc_ctx.peers[wpeer].failed))
        return false;
    hc_p2p_blk_t b = {
        .ctx_id = comm->ctx_id, .src = peer, .tag = tag, .buf = buf, .len = len};
    hc_ctx.blk = &b;
    for (int i = 0; i < HC_P2P_BLK_POLLS && b.state == HC_P2P_BLK_WAIT; i++)
        hc_progress();
    hc_ctx.blk = NULL;
    if (b.state != HC_P2P_BLK_DONE) return false;
    hc_stats.recv_msgs++;
    hc_stats.recv_bytes += len;
    hc_stats_peer_rx(wpeer, len);
    return true;
}

hcomm_status_t hc_p2p_irecv(struct hcomm_comm *comm, uint32_t ctx_id, void *buf, size_t len,
                            int peer, int32_t tag, struct hcomm_request **req_p)
{
    return hc_p2p_irecv_mem(comm, ctx_id, buf, len, peer, tag, NULL, req_p);
}

hcomm_status_t hc_p2p_irecv_mem(struct hcomm_comm *comm, uint32_t ctx_id, void *buf, size_t len,
                                int peer, int32_t tag, const hc_mem_attr_t *mem,
                                struct hcomm_request **req_p)
{
    bool any = peer == HCOMM_ANY_SOURCE;
    int wpeer = any ? -1 : comm->world_ranks[peer];
    if (HC_UNLIKELY(mem && mem->type != HC_MEM_HOST && any))
        return hc_error(HCOMM_ERR_INTERNAL,
                        "hcomm_recv: a device buffer from any source must be staged");
    struct hcomm_request *req = hc_request_alloc(HC_REQ_RECV);
    if (HC_UNLIKELY(!req))
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_recv: no memory for a request");
    if (mem && mem->type != HC_MEM_HOST) {
        req->dev = true;
        req->mem = *mem;
    }
    hc_stats.recv_msgs++;
    hc_stats.recv_bytes += len;
    if (!any) hc_stats_peer_rx(wpeer, len);
    req->comm = comm;
    req->buf = buf;
    req->len = len;
    req->peer = peer;
    req->wpeer = wpeer;
    req->tag = tag;
    req->ctx_id = ctx_id;

    hc_list_t *pos, *tmp;
    hc_list_foreach_safe(pos, tmp, &comm->unexpected)
    {
        hc_unexp_t *u = hc_container_of(pos, hc_unexp_t, link);
        if ((u->wpeer != wpeer && !any) || u->ctx_id != ctx_id) continue;
        if (HC_UNLIKELY(!any && hc_coll_tag_conflict(ctx_id, tag, u->tag))) {
            hc_p2p_coll_conflict(req, u->tag);
            *req_p = req;
            return HCOMM_OK;
        }
        if (u->tag != tag) continue;
        hc_list_del(&u->link);
        if (any) {
            wpeer = u->wpeer;
            hc_p2p_bind_source(req, comm->comm_rank_of[wpeer], wpeer);
        }
        hc_peer_t *p = &hc_ctx.peers[wpeer];
        if (u->type == HC_FRAME_EAGER && u->have < u->len) {
            /* Its fragments are still arriving (on its lane, whose state
             * exists: its first fragment made it): they go to the receive. */
            hc_p2p_eager_first(req, &p->partial[u->lane], u->len, u->data, u->have);
        } else if (u->type == HC_FRAME_EAGER)
            hc_p2p_eager_recv(req, u->data, u->len);
        else
            hc_rndv_matched(req, p, u->len, u->remote_id, &u->offer);
        free(u);
        *req_p = req;
        return HCOMM_OK;
    }
    if (HC_UNLIKELY(any)) {
        /* Any member that failed could have been the sender (as MPI's
         * ULFM says of MPI_ANY_SOURCE): the receive fails, naming it. */
        for (int r = 0; r < comm->size; r++)
            if (hc_ctx.peers[comm->world_ranks[r]].failed) {
                hc_request_free(req);
                return hc_peer_error(comm->world_ranks[r], "hcomm_recv (from any source)");
            }
    } else if (HC_UNLIKELY(hc_ctx.peers[wpeer].failed)) {
        hc_request_free(req);
        return hc_peer_error(wpeer, "hcomm_recv");
    }
    hc_list_push_back(&comm->posted, &req->link);
    *req_p = req;
    return HCOMM_OK;
}

/* Frees an unexpected message; one still receiving fragments is forgotten
 * by its peer's lane first (the rest of it is then swallowed). */
static void hc_p2p_unexp_free(hc_unexp_t *u)
{
    hc_peer_t *p = hc_ctx.peers ? &hc_ctx.peers[u->wpeer] : NULL;
    if (p && p->partial && p->partial[u->lane].unexp == u) p->partial[u->lane].unexp = NULL;
    free(u);
}

/* Moves frames that arrived before comm existed into its queue; give-ups
 * for it are taken now. */
void hc_p2p_adopt_orphans(struct hcomm_comm *comm)
{
    hc_list_t *pos, *tmp;
    hc_list_foreach_safe(pos, tmp, &hc_ctx.orphans)
    {
        hc_unexp_t *u = hc_container_of(pos, hc_unexp_t, link);
        if ((u->ctx_id & ~HC_CTX_COLL) != comm->ctx_id) continue;
        hc_list_del(&u->link);
        int from = comm->comm_rank_of[u->wpeer];
        if (u->type == HC_FRAME_GIVE_UP) {
            if (hc_coll_ops.gave_up)
                hc_coll_ops.gave_up(comm, from, (hcomm_status_t)(-(int64_t)u->remote_id),
                                    (int)u->len - 1);
            hc_p2p_unexp_free(u);
            continue;
        }
        if (u->type == HC_FRAME_REVOKE || u->type == HC_FRAME_SHRINK) {
            if (from >= 0 && u->type == HC_FRAME_REVOKE) {
                hc_comm_revoked(comm, from);
            } else if (from >= 0 && hc_coll_ops.shrink) {
                hc_frame_hdr_t h = {.type = HC_FRAME_SHRINK, .ctx_id = u->ctx_id, .tag = u->tag,
                                    .a = u->remote_id, .b = u->b, .len = (uint32_t)u->len};
                hc_coll_ops.shrink(comm, from, &h, u->data);
            }
            hc_p2p_unexp_free(u);
            continue;
        }
        hc_list_push_back(&comm->unexpected, &u->link);
    }
}

void hc_p2p_comm_cleanup(struct hcomm_comm *comm)
{
    hc_p2p_fail_comm(comm, HCOMM_ERR_ABORTED);
    hc_list_t *pos, *tmp;
    hc_list_foreach_safe(pos, tmp, &comm->unexpected)
    {
        hc_list_del(pos);
        hc_p2p_unexp_free(hc_container_of(pos, hc_unexp_t, link));
    }
}

void hc_p2p_orphans_cleanup(void)
{
    hc_list_t *pos, *tmp;
    hc_list_foreach_safe(pos, tmp, &hc_ctx.orphans)
    {
        hc_list_del(pos);
        hc_p2p_unexp_free(hc_container_of(pos, hc_unexp_t, link));
    }
}
