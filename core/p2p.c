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
 *
 * This file is the send path: frames out (hc_p2p_put), the per-peer queue
 * of frames that found no credit, eager sends and fragments; the receive
 * path (matching, unexpected messages, reassembly) is p2p_recv.c, failures
 * and the communicator control frames p2p_fail.c, the rendezvous rndv.c,
 * hang reports p2p_explain.c; what they share is in p2p_int.h.
 */
#include "core/hc_core.h"
#include "core/p2p_int.h"
#include "core/stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (--p->lane_pending[l] == 0) p->lane_mask &= ~(1u << l);
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
    if (conn->ops->flush && !hc_ctx.in_progress) conn->ops->flush(conn->drv);
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
    if (HC_UNLIKELY(p->lane_mask & (1u << h.lane))) return hc_p2p_queue(p, hdr, payload, req);
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
    if (st == HCOMM_ERR_AGAIN) return hc_p2p_queue(p, hdr, payload, req);
    return st;
}

/* A streamed send from device memory (req->stage_src): its staging holds
 * the bytes up to end, copied by the GPU dispatch just before the frames
 * that carry them go. */
static hcomm_status_t hc_p2p_stream_fill(struct hcomm_request *req, size_t end)
{
    if (HC_LIKELY(!req->stage_src) || req->stage_done >= end) return HCOMM_OK;
    size_t n = end - req->stage_done;
    hcomm_status_t st = hc_gpu_copy((char *)req->buf + req->stage_done, NULL,
                                    (const char *)req->stage_src + req->stage_done, &req->mem, n);
    if (HC_UNLIKELY(st != HCOMM_OK)) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", hc_error_last());
        return hc_error(st, "hcomm_send: %zu bytes to rank %d out of device memory: %s", n,
                        req->peer, saved);
    }
    hc_gpu_stats.d2h_copies++;
    hc_gpu_stats.d2h_bytes += n;
    req->stage_done = end;
    return HCOMM_OK;
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
            if ((p->lane_mask & ~blocked) == 0) break; /* every lane with frames here is refused */
            hc_pending_frame_t *f = hc_container_of(pos, hc_pending_frame_t, link);
            uint32_t bit = 1u << (f->hdr.lane & (HC_FRAME_LANES - 1));
            if (blocked & bit) continue;
            hc_conn_t *conn = p->conn;
            hcomm_status_t st = HCOMM_OK;
            if (f->hdr.type == HC_FRAME_DATA && f->stream_end) {
                f->hdr.flags |= HC_FRAME_FLAG_UNORDERED; /* placed by offset */
                while (f->stream_off < f->stream_end) {
                    size_t n = HC_MIN(conn->max_frame, f->stream_end - f->stream_off);
                    if (HC_UNLIKELY((st = hc_p2p_stream_fill(f->req, f->stream_off + n)) !=
                                    HCOMM_OK)) {
                        /* The receiver waits for the rest: it fails too. */
                        hc_p2p_control(p, HC_FRAME_NACK, f->hdr.ctx_id, f->hdr.a,
                                       (uint64_t)(-(int64_t)st));
                        break;
                    }
                    f->hdr.len = (uint32_t)n;
                    f->hdr.b = f->stream_off;
                    st = conn->ops->put(conn, &f->hdr, (char *)f->req->buf + f->stream_off, f->req);
                    if (st == HCOMM_OK || st == HCOMM_IN_PROGRESS) {
                        if (st == HCOMM_IN_PROGRESS) f->req->inflight++;
                        f->req->done_bytes += n;
                        f->stream_off += n;
                        sent++;
                    } else {
                        break;
                    }
                }
                if (st == HCOMM_OK || st == HCOMM_IN_PROGRESS) hc_p2p_send_check_done(f->req);
            } else {
                st = conn->ops->put(conn, &f->hdr, f->payload, f->req);
                if (st == HCOMM_OK || st == HCOMM_IN_PROGRESS) {
                    sent++;
                    if (f->req && (f->hdr.type == HC_FRAME_EAGER || f->hdr.type == HC_FRAME_CONT)) {
                        if (st == HCOMM_IN_PROGRESS) f->req->inflight++;
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
    if (!req) return;
    req->inflight--;
    if (HC_UNLIKELY(req->magic == HC_REQ_DRAINING)) {
        hc_request_drained(req);
        return;
    }
    if (status != HCOMM_OK && !req->done) hc_request_complete(req, status);
    hc_p2p_send_check_done(req);
}

/* Best effort: a refused frame is logged, and the thread's last error stays
 * the caller's (a collective broken by a revoke tells every member, a dead
 * one too, whose connection then fails: shrink_mlx5_model saw REVOKED
 * returned with the words of that connect). */
void hc_p2p_control(hc_peer_t *p, uint8_t type, uint32_t ctx_id, uint64_t a, uint64_t b)
{
    hc_frame_hdr_t hdr = {.type = type, .ctx_id = ctx_id, .a = a, .b = b};
    hc_error_saved_t saved;
    hc_error_save(&saved);
    hcomm_status_t st = hc_p2p_put(p, &hdr, NULL, NULL);
    if (st != HCOMM_OK) {
        hc_log_warn("cannot send a control frame to rank %d: %s (%s)", p->conn->peer,
                    hcomm_strerror(st), hc_error_last());
        hc_error_restore(&saved);
    }
}

hcomm_status_t hc_p2p_send_eager_now(struct hcomm_comm *comm, const void *buf, size_t len, int peer,
                                     int32_t tag, bool *sent_p)
{
    int wpeer = comm->world_ranks[peer];
    hc_peer_t *p = &hc_ctx.peers[wpeer];
    *sent_p = false;
    if (HC_UNLIKELY(p->failed)) return hc_peer_error(wpeer, "hcomm_send");
    uint8_t lane = hc_p2p_lane(comm->ctx_id);
    if (len > p->conn->max_frame || (p->lane_mask & (1u << lane))) return HCOMM_OK;
    hc_frame_hdr_t hdr = {.type = HC_FRAME_EAGER,
                          .lane = lane,
                          .ctx_id = comm->ctx_id,
                          .tag = tag,
                          .len = (uint32_t)len};
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
    if (st == HCOMM_ERR_AGAIN) return HCOMM_OK; /* the queued path below takes it */
    if (st == HCOMM_IN_PROGRESS)
        return hc_error(HCOMM_ERR_INTERNAL, "driver %s kept a NULL-cookie payload",
                        p->conn->ops->name);
    return st;
}

hcomm_status_t hc_p2p_isend(struct hcomm_comm *comm, uint32_t ctx_id, const void *buf, size_t len,
                            int peer, int32_t tag, struct hcomm_request **req_p)
{
    return hc_p2p_isend_mem(comm, ctx_id, buf, len, peer, tag, NULL, req_p);
}

static hcomm_status_t hc_p2p_isend_post(hc_peer_t *p, struct hcomm_request *req,
                                        struct hcomm_request **req_p);

/* A send request for buf, len bytes to comm rank peer (NULL: no memory). */
static struct hcomm_request *hc_p2p_send_req(struct hcomm_comm *comm, uint32_t ctx_id,
                                             const void *buf, size_t len, int peer, int32_t tag)
{
    struct hcomm_request *req = hc_request_alloc(HC_REQ_SEND);
    if (HC_UNLIKELY(!req)) return NULL;
    req->comm = comm;
    req->buf = (void *)buf;
    req->len = len;
    req->peer = peer;
    req->wpeer = comm->world_ranks[peer];
    req->tag = tag;
    req->ctx_id = ctx_id;
    return req;
}

hcomm_status_t hc_p2p_isend_mem(struct hcomm_comm *comm, uint32_t ctx_id, const void *buf,
                                size_t len, int peer, int32_t tag, const hc_mem_attr_t *mem,
                                struct hcomm_request **req_p)
{
    int wpeer = comm->world_ranks[peer];
    hc_peer_t *p = &hc_ctx.peers[wpeer];
    if (HC_UNLIKELY(p->failed)) return hc_peer_error(wpeer, "hcomm_send");
    bool dev = mem && mem->type != HC_MEM_HOST;
    if (HC_UNLIKELY(dev && !hc_p2p_goes_rndv(p->conn, len)))
        return hc_error(HCOMM_ERR_INTERNAL,
                        "hcomm_send: a %zu-byte device buffer to rank %d would go in frames (eager "
                        "up to %zu bytes): it must be staged",
                        len, peer, p->conn->eager_max);
    struct hcomm_request *req = hc_p2p_send_req(comm, ctx_id, buf, len, peer, tag);
    if (HC_UNLIKELY(!req))
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_send: no memory for a request");
    if (dev) {
        req->dev = true;
        req->mem = *mem;
    }
    return hc_p2p_isend_post(p, req, req_p);
}

hcomm_status_t hc_p2p_isend_streamed(struct hcomm_comm *comm, uint32_t ctx_id, void *buf,
                                     const void *src, const hc_mem_attr_t *mem, size_t len,
                                     int peer, int32_t tag, struct hcomm_request **req_p)
{
    int wpeer = comm->world_ranks[peer];
    hc_peer_t *p = &hc_ctx.peers[wpeer];
    if (HC_UNLIKELY(p->failed)) return hc_peer_error(wpeer, "hcomm_send");
    /* Only a stream may read the staging, and only after the frame's bytes
     * are in: no get or write can reach it before (a connection without
     * either; the RTS then never says the sender can write). */
    if (HC_UNLIKELY(!hc_p2p_goes_rndv(p->conn, len) ||
                    (p->conn->caps & (HC_CONN_CAP_GET | HC_CONN_CAP_WRITE))))
        return hc_error(HCOMM_ERR_INTERNAL,
                        "hcomm_send: a %zu-byte device buffer to rank %d cannot be streamed over "
                        "%s (eager up to %zu bytes, caps 0x%x)",
                        len, peer, p->conn->ops->name, p->conn->eager_max, p->conn->caps);
    struct hcomm_request *req = hc_p2p_send_req(comm, ctx_id, buf, len, peer, tag);
    if (HC_UNLIKELY(!req))
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_send: no memory for a request");
    req->mem = *mem;
    req->stage_src = src;
    req->stage_done = 0;
    return hc_p2p_isend_post(p, req, req_p);
}

/* Frames (eager, fragments) or a rendezvous for req, set up. */
static hcomm_status_t hc_p2p_isend_post(hc_peer_t *p, struct hcomm_request *req,
                                        struct hcomm_request **req_p)
{
    const void *buf = req->buf;
    size_t len = req->len;
    int wpeer = req->wpeer;
    hc_frame_hdr_t hdr = {.ctx_id = req->ctx_id, .tag = req->tag};
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
