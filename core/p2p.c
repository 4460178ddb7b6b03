/*
 * Point-to-point protocol over driver connections (see hc_core.h for the
 * frame sequence). Everything here runs in the caller's thread, inside
 * hcomm calls: deliver() is called from driver progress, so it never waits;
 * a frame that finds no credit is queued on its peer, in order, and retried
 * by hc_p2p_flush_pending().
 *
 * Lanes (docs/lanes.md): every frame leaves with its context's lane
 * (hc_p2p_lane), set in hc_p2p_put and the two paths that bypass it. Only
 * the frames of one lane keep their order: a queued frame holds back the
 * later frames of its lane, not the peer's, and a fragmented message is
 * reassembled per (peer, lane), since another lane's fragments may come
 * between its own.
 */
#include "core/hc_core.h"
#include "core/p2p_int.h"
#include "core/stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A message that arrived before its receive was posted. */
typedef struct {
    hc_list_t link;
    int wpeer;
    uint32_t ctx_id;
    int32_t tag;
    uint8_t type;     /* EAGER or RTS */
    uint8_t lane;     /* hdr.lane: where its fragments' state is while they arrive */
    size_t len;       /* message bytes */
    size_t have;      /* EAGER bytes arrived so far (< len while fragments follow) */
    uint64_t remote_id;
    uint64_t b;       /* SHRINK (an orphan): hdr.b */
    hc_rndv_offer_t offer; /* RTS */
    uint8_t data[];   /* EAGER payload; SHRINK's */
} hc_unexp_t;

static void hc_p2p_send_check_done(struct hcomm_request *req)
{
    if (!req->rndv && req->done_bytes == req->len && req->inflight == 0 && !req->done)
        hc_request_complete(req, HCOMM_OK);
}

hcomm_status_t hc_p2p_lanes_init(void)
{
    if (!strcmp(hc_cfg.lanes, "auto"))
        hc_ctx.lanes = true;
    else if (!strcmp(hc_cfg.lanes, "0"))
        hc_ctx.lanes = false;
    else
        return hc_error(HCOMM_ERR_INVALID, "hcomm_init: HCOMM_LANES=%s is not auto or 0",
                        hc_cfg.lanes);
    return HCOMM_OK;
}

void hc_p2p_pending_add(hc_peer_t *p, hc_pending_frame_t *f)
{
    unsigned l = f->hdr.lane & (HC_FRAME_LANES - 1);
    hc_list_push_back(&p->pending, &f->link);
    p->lane_pending[l]++;
    p->lane_mask |= 1u << l;
    hc_ctx.npending++;
}

void hc_p2p_pending_del(hc_peer_t *p, hc_pending_frame_t *f)
{
    unsigned l = f->hdr.lane & (HC_FRAME_LANES - 1);
    hc_list_del(&f->link);
    if (--p->lane_pending[l] == 0)
        p->lane_mask &= ~(1u << l);
    hc_ctx.npending--;
}

static hcomm_status_t hc_p2p_queue(hc_peer_t *p, const hc_frame_hdr_t *hdr, const void *payload,
                                   struct hcomm_request *req)
{
    bool control = hdr->type != HC_FRAME_EAGER && hdr->type != HC_FRAME_DATA &&
                   hdr->type != HC_FRAME_CONT && hdr->len;
    if (HC_UNLIKELY(control && hdr->len > sizeof(((hc_pending_frame_t *)0)->inline_payload)))
        return hc_error(HCOMM_ERR_INTERNAL,
                        "hcomm: a %u-byte control payload (frame type %u) for rank %d exceeds "
                        "HC_FRAME_CTRL_MAX",
                        hdr->len, hdr->type, p->conn->peer);
    hc_pending_frame_t *f = calloc(1, sizeof(*f));
    if (!f)
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm: cannot queue a frame for rank %d",
                        p->conn->peer);
    f->hdr = *hdr;
    f->req = req;
    if (control) {
        memcpy(f->inline_payload, payload, hdr->len); /* bounded above */
        f->payload = f->inline_payload;
    } else {
        f->payload = payload;
    }
    hc_p2p_pending_add(p, f);
    hc_stats.credit_waits++;
    return HCOMM_OK;
}

/* A put made outside progress leaves now: a driver that batches (ops->flush)
 * would otherwise hold it until the next progress pass. */
static inline void hc_p2p_kick(hc_conn_t *conn)
{
    if (conn->ops->flush && !hc_ctx.in_progress)
        conn->ops->flush(conn->drv);
}

/* Sends one frame now, or queues it behind earlier ones of its lane. A
 * send request's bytes are accounted here so that its completion needs no
 * other path. The frame's lane is set here, from its context. */
hcomm_status_t hc_p2p_put(hc_peer_t *p, const hc_frame_hdr_t *hdr_in, const void *payload,
                          struct hcomm_request *req)
{
    hc_frame_hdr_t h = *hdr_in;
    const hc_frame_hdr_t *hdr = &h;
    h.lane = hc_p2p_lane(h.ctx_id);
    if (HC_UNLIKELY(p->lane_mask & (1u << h.lane)))
        return hc_p2p_queue(p, hdr, payload, req);
    hc_conn_t *conn = p->conn;
    hcomm_status_t st = conn->ops->put(conn, hdr, payload, req);
    hc_p2p_kick(conn);
    if (HC_LIKELY(st == HCOMM_OK)) {
        if (req && (hdr->type == HC_FRAME_EAGER || hdr->type == HC_FRAME_DATA ||
                    hdr->type == HC_FRAME_CONT)) {
            req->done_bytes += hdr->len;
            hc_p2p_send_check_done(req);
        }
        return HCOMM_OK;
    }
    if (st == HCOMM_IN_PROGRESS) {
        req->inflight++;
        req->done_bytes += hdr->len;
        return HCOMM_OK;
    }
    if (st == HCOMM_ERR_AGAIN)
        return hc_p2p_queue(p, hdr, payload, req);
    return st;
}

int hc_p2p_flush_pending(void)
{
    int sent = 0;
    for (int w = 0; w < hc_ctx.size && hc_ctx.npending; w++) {
        hc_peer_t *p = &hc_ctx.peers[w];
        uint32_t blocked = 0; /* lanes refused in this pass: their later frames wait */
        hc_list_t *pos, *tmp;
        hc_list_foreach_safe(pos, tmp, &p->pending)
        {
            if ((p->lane_mask & ~blocked) == 0)
                break; /* every lane with frames here is refused */
            hc_pending_frame_t *f = hc_container_of(pos, hc_pending_frame_t, link);
            uint32_t bit = 1u << (f->hdr.lane & (HC_FRAME_LANES - 1));
            if (blocked & bit)
                continue;
            hc_conn_t *conn = p->conn;
            hcomm_status_t st = HCOMM_OK;
            if (f->hdr.type == HC_FRAME_DATA && f->stream_end) {
                f->hdr.flags |= HC_FRAME_FLAG_UNORDERED; /* placed by offset */
                while (f->stream_off < f->stream_end) {
                    size_t n = HC_MIN(conn->max_frame, f->stream_end - f->stream_off);
                    f->hdr.len = (uint32_t)n;
                    f->hdr.b = f->stream_off;
                    st = conn->ops->put(conn, &f->hdr, (char *)f->req->buf + f->stream_off,
                                        f->req);
                    if (st == HCOMM_OK || st == HCOMM_IN_PROGRESS) {
                        if (st == HCOMM_IN_PROGRESS)
                            f->req->inflight++;
                        f->req->done_bytes += n;
                        f->stream_off += n;
                        sent++;
                    } else {
                        break;
                    }
                }
                if (st == HCOMM_OK || st == HCOMM_IN_PROGRESS)
                    hc_p2p_send_check_done(f->req);
            } else {
                st = conn->ops->put(conn, &f->hdr, f->payload, f->req);
                if (st == HCOMM_OK || st == HCOMM_IN_PROGRESS) {
                    sent++;
                    if (f->req && (f->hdr.type == HC_FRAME_EAGER || f->hdr.type == HC_FRAME_CONT)) {
                        if (st == HCOMM_IN_PROGRESS)
                            f->req->inflight++;
                        f->req->done_bytes += f->hdr.len;
                        hc_p2p_send_check_done(f->req);
                    }
                }
            }
            if (st == HCOMM_ERR_AGAIN) {
                blocked |= bit; /* keep its lane's order: nothing of it behind may pass */
                continue;
            }
            if (st != HCOMM_OK && st != HCOMM_IN_PROGRESS && f->req && !f->req->done)
                hc_request_complete(f->req, st);
            hc_p2p_pending_del(p, f);
            free(f);
        }
    }
    return sent;
}

void hc_p2p_put_done(void *core, hc_conn_t *conn, void *cookie, hcomm_status_t status)
{
    (void)core;
    (void)conn;
    struct hcomm_request *req = cookie;
    if (!req)
        return;
    req->inflight--;
    if (HC_UNLIKELY(req->magic == HC_REQ_DRAINING)) {
        hc_request_drained(req);
        return;
    }
    if (status != HCOMM_OK && !req->done)
        hc_request_complete(req, status);
    hc_p2p_send_check_done(req);
}

void hc_p2p_control(hc_peer_t *p, uint8_t type, uint32_t ctx_id, uint64_t a, uint64_t b)
{
    hc_frame_hdr_t hdr = {.type = type, .ctx_id = ctx_id, .a = a, .b = b};
    hcomm_status_t st = hc_p2p_put(p, &hdr, NULL, NULL);
    if (st != HCOMM_OK)
        hc_log_warn("cannot send a control frame to rank %d: %s", p->conn->peer,
                    hcomm_strerror(st));
}

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

static void hc_p2p_eager_recv(struct hcomm_request *req, const void *data, size_t len)
{
    req->msg_len = len;
    if (HC_UNLIKELY(len != req->len)) {
        if (len && len < req->len)
            memcpy(req->buf, data, len);
        hc_p2p_size_mismatch(req, len);
        return;
    }
    if (len)
        memcpy(req->buf, data, len);
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
    memcpy(req->buf, data, len);
    pp->req = req;
}

/* A continuation fragment from peer p on lane. */
static void hc_p2p_eager_cont(hc_peer_t *p, int wpeer, uint8_t lane, const void *data, size_t len)
{
    hc_p2p_partial_t *pp = p->partial ? &p->partial[lane & (HC_FRAME_LANES - 1)] : NULL;
    if (HC_UNLIKELY(!pp || !pp->active || pp->off + len > pp->len)) {
        hc_log_warn("unexpected continuation fragment from rank %d (lane %u) dropped", wpeer,
                    lane);
        return;
    }
    struct hcomm_request *req = pp->req;
    hc_unexp_t *u = pp->unexp;
    if (req)
        memcpy((char *)req->buf + pp->off, data, len);
    else if (u)
        memcpy(u->data + pp->off, data, len);
    pp->off += len;
    if (u)
        u->have = pp->off;
    if (pp->off < pp->len)
        return;
    pp->active = false;
    pp->req = NULL;
    pp->unexp = NULL;
    if (!req)
        return;
    if (req->msg_len == req->len)
        hc_request_complete(req, HCOMM_OK);
    else
        hc_p2p_size_mismatch(req, req->msg_len);
}

static struct hcomm_comm *hc_p2p_comm_of(uint32_t ctx_id)
{
    uint32_t base = ctx_id & ~HC_CTX_COLL;
    struct hcomm_comm *w = hc_ctx.world;
    if (HC_LIKELY(w && w->ctx_id == base))
        return w;
    return hc_comm_by_ctx(base);
}

static void hc_p2p_unexpected(hc_list_t *q, int wpeer, const hc_frame_hdr_t *hdr,
                              const void *payload)
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
        if (hdr->len)
            memcpy(u->data, payload, hdr->len);
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
        if (hdr->len)
            memcpy(u->data, payload, hdr->len);
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
    if (req->source_out)
        *req->source_out = src;
    hc_stats_peer_rx(wpeer, req->len);
}

void hc_p2p_deliver(void *core, hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload)
{
    (void)core;
    int wpeer = conn->peer;
    hc_peer_t *p = &hc_ctx.peers[wpeer];
    struct hcomm_request *req;
    p->rx_frames++;
    if (HC_UNLIKELY(hc_ctx.tearing_down))
        return;

    switch (hdr->type) {
    case HC_FRAME_EAGER:
    case HC_FRAME_RTS: {
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
            if (req->tag != hdr->tag)
                continue;
            hc_list_del(&req->link);
            if (req->peer == HCOMM_ANY_SOURCE)
                hc_p2p_bind_source(req, src, wpeer);
            if (hdr->type == HC_FRAME_EAGER && (hdr->flags & HC_FRAME_FLAG_MORE)) {
                hc_p2p_eager_first(req, hc_p2p_partial(p, wpeer, hdr->lane), hdr->a, payload,
                                   hdr->len);
            } else if (hdr->type == HC_FRAME_EAGER) {
                hc_p2p_eager_recv(req, payload, hdr->len);
            } else {
                hc_rndv_matched(req, p, hdr->a, hdr->b, &offer);
            }
            return;
        }
        if ((hdr->ctx_id & HC_CTX_COLL) && hc_coll_ops.stray)
            hc_coll_ops.stray(comm, src, hdr->tag);
        hc_p2p_unexpected(&comm->unexpected, wpeer, hdr, payload);
        return;
    }
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
            hc_coll_ops.gave_up(comm, comm->comm_rank_of[wpeer],
                                 (hcomm_status_t)(-(int64_t)hdr->a), (int)hdr->b - 1);
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

hcomm_status_t hc_p2p_send_eager_now(struct hcomm_comm *comm, const void *buf, size_t len,
                                     int peer, int32_t tag, bool *sent_p)
{
    int wpeer = comm->world_ranks[peer];
    hc_peer_t *p = &hc_ctx.peers[wpeer];
    *sent_p = false;
    if (HC_UNLIKELY(p->failed))
        return hc_peer_error(wpeer, "hcomm_send");
    uint8_t lane = hc_p2p_lane(comm->ctx_id);
    if (len > p->conn->max_frame || (p->lane_mask & (1u << lane)))
        return HCOMM_OK;
    hc_frame_hdr_t hdr = {.type = HC_FRAME_EAGER, .lane = lane, .ctx_id = comm->ctx_id,
                          .tag = tag, .len = (uint32_t)len};
    hcomm_status_t st = p->conn->ops->put(p->conn, &hdr, buf, NULL);
    hc_p2p_kick(p->conn);
    if (HC_LIKELY(st == HCOMM_OK)) {
        *sent_p = true;
        hc_stats.send_msgs++;
        hc_stats.send_bytes += len;
        hc_stats.eager++;
        hc_stats_peer_tx(wpeer, len);
        return HCOMM_OK;
    }
    if (st == HCOMM_ERR_AGAIN)
        return HCOMM_OK; /* the queued path below takes it */
    if (st == HCOMM_IN_PROGRESS)
        return hc_error(HCOMM_ERR_INTERNAL, "driver %s kept a NULL-cookie payload",
                        p->conn->ops->name);
    return st;
}

hcomm_status_t hc_p2p_isend(struct hcomm_comm *comm, uint32_t ctx_id, const void *buf, size_t len,
                            int peer, int32_t tag, struct hcomm_request **req_p)
{
    int wpeer = comm->world_ranks[peer];
    hc_peer_t *p = &hc_ctx.peers[wpeer];
    if (HC_UNLIKELY(p->failed))
        return hc_peer_error(wpeer, "hcomm_send");
    struct hcomm_request *req = hc_request_alloc(HC_REQ_SEND);
    if (HC_UNLIKELY(!req))
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_send: no memory for a request");
    req->comm = comm;
    req->buf = (void *)buf;
    req->len = len;
    req->peer = peer;
    req->wpeer = wpeer;
    req->tag = tag;
    req->ctx_id = ctx_id;

    hc_frame_hdr_t hdr = {.ctx_id = ctx_id, .tag = tag};
    hcomm_status_t st;
    size_t frame = p->conn->max_frame;
    hc_stats.send_msgs++;
    hc_stats.send_bytes += len;
    hc_stats_peer_tx(wpeer, len);
    if (len <= frame)
        hc_stats.eager++;
    else if (len <= p->conn->eager_max)
        hc_stats.fragmented++;
    if (len <= frame) {
        hdr.type = HC_FRAME_EAGER;
        hdr.len = (uint32_t)len;
        st = hc_p2p_put(p, &hdr, buf, req);
    } else if (len <= p->conn->eager_max) {
        /* Fragments in consecutive frames: nothing may come between them on
         * this connection, which hc_p2p_put's in-order queue guarantees. */
        hdr.type = HC_FRAME_EAGER;
        hdr.flags = HC_FRAME_FLAG_MORE;
        hdr.a = len;
        hdr.len = (uint32_t)frame;
        st = hc_p2p_put(p, &hdr, buf, req);
        hdr.type = HC_FRAME_CONT;
        hdr.flags = 0;
        hdr.a = 0;
        for (size_t off = frame; st == HCOMM_OK && off < len; off += frame) {
            hdr.len = (uint32_t)HC_MIN(frame, len - off);
            st = hc_p2p_put(p, &hdr, (const char *)buf + off, req);
        }
    } else {
        st = hc_rndv_send(p, req);
    }
    if (HC_UNLIKELY(st != HCOMM_OK)) {
        hc_list_del(&req->link);
        hc_request_free(req);
        return st;
    }
    *req_p = req;
    return HCOMM_OK;
}

hcomm_status_t hc_p2p_irecv(struct hcomm_comm *comm, uint32_t ctx_id, void *buf, size_t len,
                            int peer, int32_t tag, struct hcomm_request **req_p)
{
    bool any = peer == HCOMM_ANY_SOURCE;
    int wpeer = any ? -1 : comm->world_ranks[peer];
    struct hcomm_request *req = hc_request_alloc(HC_REQ_RECV);
    if (HC_UNLIKELY(!req))
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_recv: no memory for a request");
    hc_stats.recv_msgs++;
    hc_stats.recv_bytes += len;
    if (!any)
        hc_stats_peer_rx(wpeer, len);
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
        if ((u->wpeer != wpeer && !any) || u->ctx_id != ctx_id)
            continue;
        if (HC_UNLIKELY(!any && hc_coll_tag_conflict(ctx_id, tag, u->tag))) {
            hc_p2p_coll_conflict(req, u->tag);
            *req_p = req;
            return HCOMM_OK;
        }
        if (u->tag != tag)
            continue;
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

static void hc_p2p_unexp_free(hc_unexp_t *u);

/* Moves frames that arrived before comm existed into its queue; give-ups
 * for it are taken now. */
void hc_p2p_adopt_orphans(struct hcomm_comm *comm)
{
    hc_list_t *pos, *tmp;
    hc_list_foreach_safe(pos, tmp, &hc_ctx.orphans)
    {
        hc_unexp_t *u = hc_container_of(pos, hc_unexp_t, link);
        if ((u->ctx_id & ~HC_CTX_COLL) != comm->ctx_id)
            continue;
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

static void hc_p2p_fail_list(hc_list_t *list, struct hcomm_comm *comm, int wpeer,
                             hcomm_status_t status)
{
    hc_list_t *pos, *tmp;
    hc_list_foreach_safe(pos, tmp, list)
    {
        struct hcomm_request *req = hc_container_of(pos, struct hcomm_request, link);
        if (comm && req->comm != comm)
            continue;
        /* A receive from any source not matched yet waits on every member
         * of its communicator: the failed one may have been its sender. */
        bool any_hit = req->wpeer < 0 && req->kind == HC_REQ_RECV && wpeer >= 0 && req->comm &&
                       req->comm->comm_rank_of[wpeer] >= 0;
        if (wpeer >= 0 && req->wpeer != wpeer && !any_hit)
            continue;
        if (any_hit) { /* its error names the member that failed; source_out stays unset */
            req->wpeer = wpeer;
            req->peer = req->comm->comm_rank_of[wpeer];
        }
        hc_list_del(&req->link);
        hc_rndv_forget(req);
        if (!req->done)
            hc_request_complete(req, status);
    }
}

static void hc_p2p_fail_pending(struct hcomm_comm *comm, int wpeer, hcomm_status_t status)
{
    for (int w = 0; w < hc_ctx.size; w++) {
        if (wpeer >= 0 && w != wpeer)
            continue;
        hc_list_t *pos, *tmp;
        hc_list_foreach_safe(pos, tmp, &hc_ctx.peers[w].pending)
        {
            hc_pending_frame_t *f = hc_container_of(pos, hc_pending_frame_t, link);
            if (comm && (!f->req || f->req->comm != comm))
                continue;
            if (f->req && !f->req->done)
                hc_request_complete(f->req, status);
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
        if (!p->partial || (wpeer >= 0 && w != wpeer))
            continue;
        for (int l = 0; l < HC_FRAME_LANES; l++) {
            struct hcomm_request *req = p->partial[l].req;
            if (!req || (comm && req->comm != comm))
                continue;
            p->partial[l].req = NULL; /* keep swallowing the rest */
            if (!req->done)
                hc_request_complete(req, status);
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
    if (w == hc_ctx.rank || hc_ctx.peers[w].failed || !hc_ctx.peers[w].conn)
        return;
    hc_frame_hdr_t hdr = {.type = HC_FRAME_SHRINK, .ctx_id = comm->ctx_id | HC_CTX_COLL,
                          .tag = tag, .a = a, .b = b, .len = len};
    hcomm_status_t st = hc_p2p_put(&hc_ctx.peers[w], &hdr, payload, NULL);
    if (st != HCOMM_OK)
        hc_log_warn("cannot send a shrink frame to rank %d: %s", w, hcomm_strerror(st));
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

/* Frees an unexpected message; one still receiving fragments is forgotten
 * by its peer's lane first (the rest of it is then swallowed). */
static void hc_p2p_unexp_free(hc_unexp_t *u)
{
    hc_peer_t *p = hc_ctx.peers ? &hc_ctx.peers[u->wpeer] : NULL;
    if (p && p->partial && p->partial[u->lane].unexp == u)
        p->partial[u->lane].unexp = NULL;
    free(u);
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

/* ---- hang reports ----------------------------------------------------------------------- */

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
    if (req->wpeer >= 0)
        hc_explain_wait(e, req->wpeer);
    if (req->kind == HC_REQ_RECV) {
        const hc_peer_t *p = req->wpeer >= 0 ? &hc_ctx.peers[req->wpeer] : NULL;
        const hc_p2p_partial_t *pp = NULL;
        for (int l = 0; p && p->partial && l < HC_FRAME_LANES && !pp; l++)
            if (p->partial[l].req == req)
                pp = &p->partial[l];
        if (pp) {
            hc_explain_add(e, "data from %s: %zu of %zu bytes of its message arrived", who,
                           pp->off, pp->len);
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
                        if (!other++)
                            first_tag = u->tag;
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
        hc_explain_add(e, "%s to take a message of %zu bytes: its matching receive is not posted "
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
