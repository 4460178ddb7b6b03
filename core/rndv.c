/*
 * Rendezvous: messages larger than the connection's eager limit, as an
 * explicit state machine per request (req->rndv_state). Three ways to move
 * the data; the receiver chooses when the RTS meets its receive:
 *
 *   sender                                  receiver
 *   key for its buffer (REG)
 *   RTS {size, id, addr, rkey, can-write} ->  matched:
 *   RTS_SENT                                  GET   (its conn can get, HCOMM_RNDV=get|auto)
 *                                               get(addr, rkey) into its buffer, perhaps
 *                                               IN_PROGRESS until rma_done
 *                           <- FIN {sender id}    then DONE
 *   DONE
 *                                             WRITE (the sender can write, HCOMM_RNDV=write|auto
 *                                               when it cannot get): key for its buffer
 *                  <- CTS {ids, addr, rkey}       CTS_SENT
 *   WRITING: write(addr, rkey), perhaps
 *   IN_PROGRESS until rma_done
 *   FIN {receiver id} ->                        DONE
 *   DONE
 *                                             STREAM (neither, or HCOMM_RNDV=stream)
 *                  <- CTS {ids}                   CTS_SENT
 *   DATA frames -> (done when all are out)        DONE when all arrived
 *   NACK {sender id, status} ends a send the receiver refused (too large).
 *
 * Device buffers (GPUDirect RDMA, core/gdr.c: req->dev): registered by
 * dmabuf through the registration cache and moved only by get/write. The
 * RTS carries HC_FRAME_FLAG_DEVICE when the sender's buffer is device
 * memory. A stream would have the sender's CPU read its buffer, so
 * a device sender is never streamed: a receiver that cannot get and may
 * not ask for a write NACKs it, a device sender that gets a keyless CTS
 * NACKs the receiver, both failing by name. A device receiver of a stream
 * copies each DATA frame through the GPU dispatch.
 *
 * Keys: a driver with HC_DRV_CAP_USER_REG needs user buffers registered:
 * pool memory has its keys from creation, other memory goes through the
 * registration cache and is held until the request ends. Drivers without it
 * pack empty keys. Cookies of asynchronous RMA are request ids (index and
 * generation), so a completion for a request that ended meanwhile (a peer
 * failure, a timeout) is recognised as stale and dropped.
 */
#include "core/hc_core.h"
#include "core/p2p_int.h"
#include "core/stats.h"
#include "mem/mem.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void hc_rndv_release(struct hcomm_request *req)
{
    if (req->rndv_held) {
        hc_mem_reg_cache_put(req->rndv_held);
        req->rndv_held = NULL;
    }
}

/* The request leaves the rendezvous (done, or failed by the caller). */
static void hc_rndv_end(struct hcomm_request *req)
{
    if (req->rndv) {
        req->rndv = false;
        hc_list_del(&req->link);
    }
    req->rndv_state = HC_RNDV_NONE;
    hc_rndv_release(req);
}

/* Key and descriptor of req's buffer (len bytes) for conn, held in
 * req->rndv_held: host or device memory (req->dev). */
static hcomm_status_t hc_rndv_key(hc_conn_t *conn, struct hcomm_request *req, size_t len,
                                  uint64_t *key_p, hc_mem_desc_t *desc)
{
    return hc_mem_key_typed(conn->drv, req->buf, len, req->dev ? &req->mem : NULL, key_p, desc,
                            &req->rndv_held);
}

/* A rendezvous moved req's device buffer by RMA (GPUDirect RDMA). */
static void hc_rndv_count_direct(const struct hcomm_request *req, size_t bytes)
{
    if (!req->dev) return;
    hc_stats.gdr_bytes += bytes;
    hc_stats.gdr_rndv++;
}

static void hc_rndv_finish(struct hcomm_request *req, hcomm_status_t st)
{
    hc_rndv_end(req);
    if (!req->done)
        hc_request_complete(req, st);
}

static void hc_rndv_recv_finish(struct hcomm_request *req)
{
    hc_rndv_end(req);
    if (req->msg_len == req->len)
        hc_request_complete(req, HCOMM_OK);
    else
        hc_p2p_size_mismatch(req, req->msg_len);
}

static void hc_rndv_wait(struct hcomm_request *req, uint8_t state)
{
    req->rndv_state = state;
    if (!req->rndv) {
        req->rndv = true;
        hc_list_push_back(&hc_ctx.rndv_active, &req->link);
    }
}

enum { HC_RNDV_MODE_AUTO, HC_RNDV_MODE_GET, HC_RNDV_MODE_WRITE, HC_RNDV_MODE_STREAM };
static int hc_rndv_mode;

hcomm_status_t hc_rndv_init(void)
{
    static const char *const names[] = {"auto", "get", "write", "stream"};
    for (int m = 0; m < (int)HC_ARRAY_SIZE(names); m++)
        if (!strcasecmp(hc_cfg.rndv, names[m])) {
            hc_rndv_mode = m;
            return HCOMM_OK;
        }
    return hc_error(HCOMM_ERR_INVALID, "hcomm_init: HCOMM_RNDV=%s is not auto, get, write or stream",
                    hc_cfg.rndv);
}

static bool hc_rndv_mode_allows(int mode)
{
    return hc_rndv_mode == HC_RNDV_MODE_AUTO || hc_rndv_mode == mode;
}

/* As hc_rndv_matched decides (a connection's caps are the same on both
 * sides: the sender's can-write is this side's write cap). */
bool hc_rndv_streams(const hc_conn_t *conn)
{
    return !((conn->caps & HC_CONN_CAP_GET) && hc_rndv_mode_allows(HC_RNDV_MODE_GET)) &&
           !((conn->caps & HC_CONN_CAP_WRITE) && hc_rndv_mode_allows(HC_RNDV_MODE_WRITE));
}

hcomm_status_t hc_rndv_send(hc_peer_t *p, struct hcomm_request *req)
{
    hc_conn_t *conn = p->conn;
    hc_frame_rts_t rts = {.addr = (uint64_t)(uintptr_t)req->buf};
    hc_mem_desc_t desc;
    uint64_t key;
    hcomm_status_t st = hc_rndv_key(conn, req, req->len, &key, &desc);
    if (st != HCOMM_OK)
        return st;
    /* Only a driver whose RMA needs keys gets one packed (shm's CMA reaches
     * any address: no fstat per message for its memfd key). */
    size_t klen = sizeof(rts.rkey);
    if ((conn->ops->caps & HC_DRV_CAP_USER_REG) || req->dev)
        st = conn->ops->rkey_pack(conn->drv, key, &desc, rts.rkey, &klen);
    else
        klen = 0;
    if (st != HCOMM_OK || klen > sizeof(rts.rkey)) {
        hc_rndv_release(req);
        return st != HCOMM_OK ? st
                              : hc_error(HCOMM_ERR_INTERNAL, "%s: packed key of %zu bytes",
                                         conn->ops->name, klen);
    }
    rts.rkey_len = (uint8_t)klen;
    hc_frame_hdr_t hdr = {.type = HC_FRAME_RTS,
                          .ctx_id = req->ctx_id,
                          .tag = req->tag,
                          .len = (uint32_t)(offsetof(hc_frame_rts_t, rkey) + klen),
                          .a = req->len,
                          .b = hc_request_id(req)};
    if ((conn->caps & HC_CONN_CAP_WRITE) && hc_rndv_mode_allows(HC_RNDV_MODE_WRITE))
        hdr.flags |= HC_FRAME_FLAG_CAN_WRITE;
    if (req->dev) hdr.flags |= HC_FRAME_FLAG_DEVICE;
    hc_rndv_wait(req, HC_RNDV_RTS_SENT);
    st = hc_p2p_put(p, &hdr, &rts, NULL);
    if (st != HCOMM_OK)
        hc_rndv_end(req);
    return st;
}

bool hc_rndv_offer_parse(const hc_frame_hdr_t *hdr, const void *payload, hc_rndv_offer_t *o)
{
    const size_t fixed = offsetof(hc_frame_rts_t, rkey);
    if (hdr->len < fixed || hdr->len > sizeof(hc_frame_rts_t))
        return false;
    hc_frame_rts_t rts = {0};
    memcpy(&rts, payload, hdr->len);
    if (rts.rkey_len != hdr->len - fixed)
        return false;
    o->addr = rts.addr;
    o->can_write = (hdr->flags & HC_FRAME_FLAG_CAN_WRITE) != 0;
    o->device = (hdr->flags & HC_FRAME_FLAG_DEVICE) != 0;
    o->rkey_len = rts.rkey_len;
    memcpy(o->rkey, rts.rkey, rts.rkey_len);
    return true;
}

/* Receiver: get the sender's buffer (GET). False when the connection
 * refuses, so the caller falls back to a CTS. */
static bool hc_rndv_try_get(struct hcomm_request *req, hc_peer_t *p, uint64_t sid,
                            const hc_rndv_offer_t *o)
{
    hc_conn_t *conn = p->conn;
    hc_rkey_t *rkey = NULL;
    hc_mem_desc_t desc;
    uint64_t lkey;
    hcomm_status_t st = hc_rndv_key(conn, req, req->msg_len, &lkey, &desc);
    if (st == HCOMM_OK)
        st = conn->ops->rkey_unpack(conn, o->rkey, o->rkey_len, &rkey);
    if (st != HCOMM_OK) {
        hc_rndv_release(req);
        hc_log_debug("rendezvous with rank %d: no key for get (%s), asking instead", conn->peer,
                     hcomm_strerror(st));
        return false;
    }
    req->remote_id = sid;
    hc_rma_t rma = {.local = req->buf,
                    .len = req->msg_len,
                    .lkey = lkey,
                    .remote_addr = o->addr,
                    .rkey = rkey,
                    .cookie = (void *)(uintptr_t)hc_request_id(req)};
    hc_rndv_wait(req, HC_RNDV_GETTING);
    st = conn->ops->get(conn, &rma);
    if (rkey)
        conn->ops->rkey_release(conn, rkey);
    if (st == HCOMM_IN_PROGRESS)
        return true; /* hc_rndv_rma_done finishes it */
    if (st == HCOMM_OK) {
        hc_stats.rndv_get++;
        hc_rndv_count_direct(req, req->msg_len);
        hc_p2p_control(p, HC_FRAME_FIN, req->ctx_id, sid, 0);
        hc_rndv_recv_finish(req);
        return true;
    }
    hc_rndv_end(req);
    hc_log_debug("get from rank %d failed (%s), asking instead", conn->peer, hcomm_strerror(st));
    return false;
}

void hc_rndv_matched(struct hcomm_request *req, hc_peer_t *p, size_t size, uint64_t sid,
                     const hc_rndv_offer_t *o)
{
    req->msg_len = size;
    if (size > req->len) {
        hc_p2p_control(p, HC_FRAME_NACK, req->ctx_id, sid, (uint64_t)(-HCOMM_ERR_TRUNCATED));
        hc_p2p_size_mismatch(req, size);
        return;
    }
    hc_conn_t *conn = p->conn;
    if ((conn->caps & HC_CONN_CAP_GET) && hc_rndv_mode_allows(HC_RNDV_MODE_GET) &&
        hc_rndv_try_get(req, p, sid, o))
        return;
    req->done_bytes = 0;
    req->remote_id = sid;
    hc_frame_hdr_t hdr = {.type = HC_FRAME_CTS, .ctx_id = req->ctx_id, .a = sid,
                          .b = hc_request_id(req)};
    hc_frame_cts_t cts = {.addr = (uint64_t)(uintptr_t)req->buf};
    if (o->can_write && hc_rndv_mode_allows(HC_RNDV_MODE_WRITE)) {
        hc_mem_desc_t desc;
        uint64_t key;
        size_t klen = sizeof(cts.rkey);
        hcomm_status_t st = hc_rndv_key(conn, req, size, &key, &desc);
        if (st == HCOMM_OK && ((conn->ops->caps & HC_DRV_CAP_USER_REG) || req->dev))
            st = conn->ops->rkey_pack(conn->drv, key, &desc, cts.rkey, &klen);
        else if (st == HCOMM_OK)
            klen = 0;
        if (st == HCOMM_OK && klen <= sizeof(cts.rkey)) {
            cts.rkey_len = (uint8_t)klen;
            hdr.len = (uint32_t)(offsetof(hc_frame_cts_t, rkey) + klen);
        } else {
            hc_rndv_release(req);
        }
    }
    if (!hdr.len && o->device) {
        /* A stream would have the sender's CPU read its device buffer. */
        hc_rndv_release(req);
        hc_p2p_control(p, HC_FRAME_NACK, req->ctx_id, sid, (uint64_t)(-HCOMM_ERR_UNSUPPORTED));
        hc_rndv_finish(req, hc_error(HCOMM_ERR_UNSUPPORTED,
                                     "hcomm_recv: rank %d sends %zu bytes from device memory, "
                                     "which %s can neither get nor have written here (HCOMM_RNDV=%s"
                                     "): a stream would read it with the CPU",
                                     req->peer, size, conn->ops->name, hc_cfg.rndv));
        return;
    }
    hc_rndv_wait(req, HC_RNDV_CTS_SENT);
    if (hdr.len)
        hc_stats.rndv_write++;
    else
        hc_stats.rndv_stream++;
    hcomm_status_t st = hc_p2p_put(p, &hdr, hdr.len ? &cts : NULL, NULL);
    if (st != HCOMM_OK)
        hc_rndv_finish(req, st);
}

/* A stream on a connection whose zero copy needs registered memory: user
 * memory (pool memory is registered from creation) goes through the
 * registration cache, held until the request is recycled. A failure costs
 * only the zero copy: the driver copies what it cannot send from a
 * registration (and counts it). */
static void hc_rndv_hold_for_puts(hc_conn_t *conn, struct hcomm_request *sreq)
{
    size_t off;
    if (hc_mem_region_lookup(sreq->buf, sreq->len, &off))
        return;
    hcomm_status_t st = hc_mem_reg_cache_get(sreq->buf, sreq->len, &sreq->put_held);
    if (st != HCOMM_OK) {
        sreq->put_held = NULL;
        hc_log_debug("%s: %zu-byte send to rank %d not registered (%s): sent by copy",
                     conn->ops->name, sreq->len, conn->peer, hcomm_strerror(st));
    }
}

/* Sender: a CTS without a key: stream DATA frames into the receive buffer. */
static hcomm_status_t hc_rndv_stream_start(hc_peer_t *p, struct hcomm_request *sreq, uint64_t rid)
{
    hc_pending_frame_t *f = calloc(1, sizeof(*f));
    if (!f)
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_send: rendezvous stream");
    f->hdr.type = HC_FRAME_DATA;
    f->hdr.lane = hc_p2p_lane(sreq->ctx_id);
    f->hdr.ctx_id = sreq->ctx_id;
    f->hdr.tag = sreq->tag;
    f->hdr.a = rid;
    f->req = sreq;
    f->stream_off = 0;
    f->stream_end = sreq->len;
    hc_rndv_end(sreq); /* now completes like an eager send: when every byte went */
    if ((p->conn->caps & HC_CONN_CAP_PUT_REG) && !sreq->put_held)
        hc_rndv_hold_for_puts(p->conn, sreq);
    sreq->rndv_state = HC_RNDV_STREAMING;
    sreq->done_bytes = 0;
    hc_p2p_pending_add(p, f);
    return HCOMM_OK;
}

/* Sender of a device buffer: a CTS without a key asks for a stream, which
 * would read the buffer with the CPU. Refused: the receiver is told. */
static void hc_rndv_no_stream(hc_peer_t *p, struct hcomm_request *sreq, uint64_t rid)
{
    hc_p2p_control(p, HC_FRAME_NACK, sreq->ctx_id, rid, (uint64_t)(-HCOMM_ERR_UNSUPPORTED));
    hc_rndv_finish(sreq, hc_error(HCOMM_ERR_UNSUPPORTED,
                                  "hcomm_send: rank %d asked for the %zu-byte device buffer as a "
                                  "stream of frames over %s, which would read it with the CPU "
                                  "(HCOMM_RNDV=%s; GPUDirect RDMA needs a get or a write)",
                                  sreq->peer, sreq->len, p->conn->ops->name, hc_cfg.rndv));
}

static const char *hc_rndv_nack_why(hcomm_status_t st)
{
    if (st == HCOMM_ERR_TRUNCATED) return "receive buffer too small";
    if (st == HCOMM_ERR_UNSUPPORTED)
        return "it can neither get nor ask for a write of device memory, and will not stream it";
    return "its get failed";
}

/* Sender: a CTS with the receiver's key: write the data, then FIN. */
static void hc_rndv_write(hc_peer_t *p, struct hcomm_request *sreq, uint64_t rid,
                          const void *payload, size_t plen)
{
    hc_conn_t *conn = p->conn;
    const size_t fixed = offsetof(hc_frame_cts_t, rkey);
    hc_frame_cts_t cts = {0};
    hcomm_status_t st = HCOMM_ERR_INVALID;
    hc_rkey_t *rkey = NULL;
    if (plen >= fixed && plen <= sizeof(cts)) {
        memcpy(&cts, payload, plen);
        if (cts.rkey_len == plen - fixed)
            st = HCOMM_OK;
    }
    if (st != HCOMM_OK) {
        hc_log_warn("malformed CTS from rank %d", conn->peer);
        hc_rndv_finish(sreq, hc_error(HCOMM_ERR_IO, "hcomm_send: malformed CTS from rank %d",
                                      conn->peer));
        return;
    }
    if (!(conn->caps & HC_CONN_CAP_WRITE)) {
        hc_rndv_finish(sreq, hc_error(HCOMM_ERR_INTERNAL,
                                      "hcomm_send: rank %d asked for a write %s cannot do",
                                      conn->peer, conn->ops->name));
        return;
    }
    uint64_t lkey = 0;
    hc_mem_desc_t desc;
    if (!sreq->rndv_held)
        st = hc_rndv_key(conn, sreq, sreq->len, &lkey, &desc);
    else
        lkey = sreq->rndv_held->keys[conn->drv->index];
    if (st == HCOMM_OK)
        st = conn->ops->rkey_unpack(conn, cts.rkey, cts.rkey_len, &rkey);
    if (st != HCOMM_OK) {
        hc_rndv_finish(sreq, st);
        return;
    }
    sreq->remote_id = rid;
    hc_rma_t rma = {.local = sreq->buf,
                    .len = sreq->len,
                    .lkey = lkey,
                    .remote_addr = cts.addr,
                    .rkey = rkey,
                    .cookie = (void *)(uintptr_t)hc_request_id(sreq)};
    sreq->rndv_state = HC_RNDV_WRITING;
    st = conn->ops->write(conn, &rma);
    if (rkey)
        conn->ops->rkey_release(conn, rkey);
    if (st == HCOMM_IN_PROGRESS)
        return;
    if (st == HCOMM_OK) {
        hc_rndv_count_direct(sreq, sreq->len);
        hc_p2p_control(p, HC_FRAME_FIN, sreq->ctx_id, rid, 0);
        hc_rndv_finish(sreq, HCOMM_OK);
        return;
    }
    /* The receiver waits for FIN: tell it the send failed. */
    hc_p2p_control(p, HC_FRAME_NACK, sreq->ctx_id, rid, (uint64_t)(-(int64_t)st));
    hc_rndv_finish(sreq, st);
}

void hc_rndv_rma_done(void *core, hc_conn_t *conn, void *cookie, hcomm_status_t status)
{
    (void)core;
    struct hcomm_request *req = hc_request_by_id((uint64_t)(uintptr_t)cookie);
    if (!req || req->done ||
        (req->rndv_state != HC_RNDV_GETTING && req->rndv_state != HC_RNDV_WRITING)) {
        hc_log_debug("stale RMA completion from %s dropped", conn->ops->name);
        return;
    }
    hc_peer_t *p = &hc_ctx.peers[conn->peer];
    bool get = req->rndv_state == HC_RNDV_GETTING;
    if (status != HCOMM_OK) {
        /* The peer waits for our FIN: a NACK ends its side. */
        hc_p2p_control(p, HC_FRAME_NACK, req->ctx_id, req->remote_id,
                       (uint64_t)(-(int64_t)status));
        hc_rndv_finish(req, hc_error(status, "%s: %s with rank %d failed",
                                     get ? "hcomm_recv" : "hcomm_send",
                                     get ? "rendezvous get" : "rendezvous write", conn->peer));
        return;
    }
    hc_p2p_control(p, HC_FRAME_FIN, req->ctx_id, req->remote_id, 0);
    hc_rndv_count_direct(req, get ? req->msg_len : req->len);
    if (get) {
        hc_stats.rndv_get++;
        hc_rndv_recv_finish(req);
    } else {
        hc_rndv_finish(req, HCOMM_OK);
    }
}

void hc_rndv_frame(hc_peer_t *p, int wpeer, const hc_frame_hdr_t *hdr, const void *payload)
{
    struct hcomm_request *req = hc_request_by_id(hdr->a);
    switch (hdr->type) {
    case HC_FRAME_CTS:
        if (!req || req->kind != HC_REQ_SEND || req->rndv_state != HC_RNDV_RTS_SENT || req->done) {
            hc_log_debug("stale CTS from rank %d dropped", wpeer);
            return;
        }
        if (hdr->len) {
            hc_rndv_write(p, req, hdr->b, payload, hdr->len);
        } else if (req->dev) {
            hc_rndv_no_stream(p, req, hdr->b);
        } else if (hc_rndv_stream_start(p, req, hdr->b) != HCOMM_OK) {
            hc_rndv_finish(req, HCOMM_ERR_NO_MEMORY);
        }
        return;
    case HC_FRAME_DATA: {
        if (!req || req->kind != HC_REQ_RECV || req->rndv_state != HC_RNDV_CTS_SENT ||
            req->done || hdr->b + hdr->len > req->msg_len) {
            hc_log_debug("stale DATA from rank %d dropped", wpeer);
            return;
        }
        hcomm_status_t st = hc_p2p_recv_put(req, hdr->b, payload, hdr->len);
        if (HC_UNLIKELY(st != HCOMM_OK)) {
            hc_rndv_finish(req, st);
            return;
        }
        req->done_bytes += hdr->len;
        if (req->done_bytes == req->msg_len)
            hc_rndv_recv_finish(req);
        return;
    }
    case HC_FRAME_FIN:
    case HC_FRAME_NACK:
        if (!req || req->done)
            return;
        if (req->kind == HC_REQ_SEND && req->rndv_state == HC_RNDV_RTS_SENT) {
            if (hdr->type == HC_FRAME_FIN) {
                hc_rndv_count_direct(req, req->len); /* the receiver got it */
                hc_rndv_finish(req, HCOMM_OK);
            } else {
                hc_rndv_finish(req, hc_error((hcomm_status_t)(-(int64_t)hdr->b),
                                             "hcomm_send: rank %d rejected the %zu-byte message "
                                             "(tag %d): %s",
                                             req->peer, req->len, req->tag,
                                             hc_rndv_nack_why((hcomm_status_t)(-(int64_t)hdr->b))));
            }
        } else if (req->kind == HC_REQ_RECV && req->rndv_state == HC_RNDV_CTS_SENT) {
            /* A write-based rendezvous: the sender wrote everything (FIN) or
             * failed (NACK). */
            if (hdr->type == HC_FRAME_FIN) {
                hc_rndv_count_direct(req, req->msg_len); /* the sender wrote it */
                hc_rndv_recv_finish(req);
            } else {
                hcomm_status_t why = (hcomm_status_t)(-(int64_t)hdr->b);
                hc_rndv_finish(req, hc_error(why,
                                             "hcomm_recv: rank %d could not write or stream the "
                                             "%zu-byte message (%s)",
                                             req->peer, req->msg_len, hcomm_strerror(why)));
            }
        }
        return;
    default:
        return;
    }
}

void hc_rndv_forget(struct hcomm_request *req)
{
    req->rndv = false;
    req->rndv_state = HC_RNDV_NONE;
    hc_rndv_release(req);
}
