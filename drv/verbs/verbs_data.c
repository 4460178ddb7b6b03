/*
 * verbs driver: the data path (docs/verbs.md).
 *
 * Eager frames: SEND on QP 0 into one of the peer's HC_VERBS_SLOTS posted
 * receive slots (a slot holds the 32-byte frame header and up to
 * HC_VERBS_MAX_FRAME payload bytes). Frames that fit the QP's inline room go
 * inline (the NIC takes them from the WQE); larger ones are copied into a
 * registered send copy, so put never keeps the caller's payload (always OK).
 * Credits without a round trip per message: the receiver reposts a slot as
 * soon as the core consumed it and, every HC_VERBS_CREDIT_BATCH reposts,
 * RDMA WRITEs its total count of posted receives into a word of the
 * sender's control region; the sender's credit is that count minus the
 * frames it sent. No receive is consumed by a credit, so credits never wait
 * for credits.
 *
 * Selective signalling: one CQE per HCOMM_IB_SIGNAL_EVERY sends (and for
 * every RMA piece). RC completes a QP's WQEs in order, so each signaled CQE
 * retires every WQE posted before it: a per-QP ring of marks says how far.
 *
 * RMA: get is RDMA READ, write is RDMA WRITE, from and into registered
 * memory (the lkey is our registration, the rkey the peer's, both checked
 * against their ranges before anything is posted). A transfer is cut into
 * pieces of at least HC_VERBS_CHUNK_MIN (at most the port's max message),
 * striped over the connection's QPs other than QP 0 (all of them when there
 * is only one), so that eager frames and credits never queue behind bulk;
 * pieces that find no room wait on the connection's pending list and are
 * posted by progress.
 *
 * Callbacks into the core happen only in progress: polling a CQ (which a
 * synchronous RMA also does) moves arrived slots and finished transfers to
 * the driver's queues, progress then delivers them, then reports failures.
 */
#include "drv/verbs/verbs.h"
#include "base/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *hc_verbs_kind(const hc_verbs_drv_t *d, const hc_verbs_rma_t *o)
{
    return o ? (o->write ? "RDMA WRITE" : "RDMA READ")
           : d->eager == HC_VERBS_EAGER_WRITE ? "eager RDMA WRITE (or credit write)"
                                              : "SEND (or credit write)";
}

/* ---- posting ------------------------------------------------------------------------------------ */

int hc_verbs_post_slot(hc_verbs_conn_t *c, uint32_t slot)
{
    int rc = c->d->dp->post_recv(&c->qp[0], (uint64_t)(uintptr_t)(c->rx_buf + (size_t)slot * HC_VERBS_SLOT_BYTES),
                                 HC_VERBS_SLOT_BYTES, c->rx_mr.lkey,
                                 hc_verbs_wr(HC_VERBS_WR_RECV, c->base.peer, slot));
    if (rc == 0) c->rx_posted++;
    return rc;
}

/* Room for one more WQE on QP qi (keeping one on QP 0 for credit writes). */
static bool hc_verbs_room(const hc_verbs_conn_t *c, int qi, bool credit)
{
    const hc_verbs_qp_t *q = &c->qp[qi];
    uint64_t used = q->sq_posted - q->sq_done;
    return used + (qi == 0 && !credit ? 2 : 1) <= HC_VERBS_SQ_DEPTH;
}

/* Posts one send-queue WQE; signals it when asked, or when enough went
 * unsignaled, or when the queue is filling up. 0 or an errno. */
static int hc_verbs_post(hc_verbs_conn_t *c, int qi, hc_verbs_wr_t *wr, bool signal,
                         hc_verbs_rma_t *rma, bool eager)
{
    hc_verbs_qp_t *q = &c->qp[qi];
    uint64_t used = q->sq_posted - q->sq_done;
    if (used >= HC_VERBS_SQ_DEPTH) return EAGAIN;
    if (q->unsignaled + 1 >= c->d->signal_every || used + 1 >= HC_VERBS_SQ_DEPTH / 2 ||
        (eager && c->tx_sent + 1 - c->tx_done >= HC_VERBS_SLOTS / 2))
        signal = true;
    wr->wr_id = hc_verbs_wr(HC_VERBS_WR_SEND, c->base.peer, (uint32_t)qi);
    wr->signal = signal;
    int posted = 0;
    int rc = c->d->dp->post_send(q, wr, 1, &posted);
    if (rc) return rc;
    q->sq_posted++;
    if (eager) c->tx_sent++;
    if (signal) {
        if (q->mark_n == 0) q->moved_ns = hc_time_ns();
        hc_verbs_mark_t *m = &q->marks[(q->mark_head + q->mark_n) % HC_VERBS_SQ_DEPTH];
        *m = (hc_verbs_mark_t){.sq_seq = q->sq_posted, .tx_seq = qi == 0 ? c->tx_sent : 0, .rma = rma};
        q->mark_n++;
        c->d->nmarks++;
        q->unsignaled = 0;
    } else {
        q->unsignaled++;
    }
    c->last_post_ns = 1; /* traffic since the last heartbeat tick */
    return 0;
}

/* Tells the peer how many receives we have posted (its credit). */
static void hc_verbs_credit_write(hc_verbs_conn_t *c, bool signal)
{
    hc_verbs_drv_t *d = c->d;
    if (c->state != HC_VERBS_C_UP || !hc_verbs_room(c, 0, true)) {
        c->credit_owed = c->state == HC_VERBS_C_UP;
        return;
    }
    uint64_t *stage = (uint64_t *)(d->ctrl + (size_t)c->base.peer * HC_VERBS_CTRL_STRIDE + 8);
    *stage = c->rx_posted;
    hc_verbs_wr_t wr = {.laddr = (uint64_t)(uintptr_t)stage,
                        .len = 8,
                        .lkey = d->ctrl_mr.lkey,
                        .op = HC_VERBS_OP_WRITE,
                        .inl = d->max_inline >= 8,
                        .raddr = c->peer_ctrl_addr,
                        .rkey = c->peer_ctrl_rkey};
    int rc = hc_verbs_post(c, 0, &wr, signal, NULL, false);
    if (rc == 0) {
        c->rx_advertised = c->rx_posted;
        c->credit_owed = false;
        d->n_credit_writes++;
    } else if (rc == EAGAIN || rc == ENOMEM) {
        c->credit_owed = true;
    } else {
        hc_verbs_conn_fail(c, "verbs: credit write to rank %d: %s", c->base.peer, strerror(rc));
    }
}

static uint64_t hc_verbs_peer_posted(hc_verbs_conn_t *c)
{
    const uint64_t *w = (const uint64_t *)(c->d->ctrl + (size_t)c->base.peer * HC_VERBS_CTRL_STRIDE);
    uint64_t v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
    if (v > c->peer_posted) c->peer_posted = v;
    return c->peer_posted;
}

/* ---- put ---------------------------------------------------------------------------------------- */

hcomm_status_t hc_verbs_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
                            void *cookie)
{
    (void)cookie; /* every frame is sent inline or from a copy: always OK */
    hc_verbs_conn_t *c = (hc_verbs_conn_t *)conn;
    hc_verbs_drv_t *d = c->d;
    size_t len = hdr->len, total;
    if (HC_UNLIKELY(len > HC_VERBS_MAX_FRAME))
        return hc_error(HCOMM_ERR_INVALID, "verbs: a %zu-byte frame to rank %d (at most %zu)", len,
                        conn->peer, (size_t)HC_VERBS_MAX_FRAME);
    if (HC_UNLIKELY(c->state != HC_VERBS_C_UP)) {
        hcomm_status_t st = hc_verbs_conn_start(c);
        if (st != HCOMM_OK) return st;
    }
    if (hc_verbs_peer_posted(c) == c->tx_sent) {
        d->n_again_credit++;
        return HCOMM_ERR_AGAIN;
    }
    if (c->tx_sent - c->tx_done >= HC_VERBS_SLOTS || !hc_verbs_room(c, 0, false))
        return HCOMM_ERR_AGAIN;
    /* The slot image: head, header, payload, pad, tail (verbs.h). An image
     * the QP takes inline is built on the stack (the NIC copies it into the
     * WQE at post), so a small frame touches no page of the send copies. */
    size_t slot_i = (size_t)(c->tx_sent % HC_VERBS_SLOTS);
    uint64_t mark = (uint64_t)(uint32_t)(c->tx_sent + 1) << 32 | (uint32_t)len;
    size_t tail_off = 8 + sizeof(*hdr) + HC_ALIGN_UP(len, (size_t)8);
    total = tail_off + 8;
    _Alignas(8) uint8_t inl[HC_VERBS_INLINE];
    bool inline_ok = total <= d->max_inline && total <= sizeof(inl);
    uint8_t *img = inline_ok ? inl : c->tx_buf + slot_i * HC_VERBS_SLOT_BYTES;
    memcpy(img, &mark, 8);
    memcpy(img + 8, hdr, sizeof(*hdr));
    if (len) memcpy(img + 8 + sizeof(*hdr), payload, len);
    memcpy(img + tail_off, &mark, 8);
    hc_verbs_wr_t wr = {.laddr = (uint64_t)(uintptr_t)img, .len = (uint32_t)total, .lkey = c->tx_mr.lkey};
    if (d->eager == HC_VERBS_EAGER_WRITE) {
        wr.op = HC_VERBS_OP_WRITE;
        wr.raddr = c->peer_ring_addr + slot_i * HC_VERBS_SLOT_BYTES;
        wr.rkey = c->peer_ring_rkey;
    } else {
        wr.op = HC_VERBS_OP_SEND;
    }
    if (inline_ok) {
        wr.inl = true;
        d->n_inline++;
    }
    int rc = hc_verbs_post(c, 0, &wr, hdr->type == HC_VERBS_FRAME_BYE, NULL, true);
    if (rc == EAGAIN || rc == ENOMEM) return HCOMM_ERR_AGAIN;
    if (rc) {
        hc_verbs_conn_fail(c, "verbs: SEND to rank %d: posting (%s): %s", conn->peer, d->dp->name, strerror(rc));
        return hc_error(HCOMM_ERR_PEER_FAILED, "%s", c->why);
    }
    d->n_eager_bytes += len;
    d->n_eager_frames++;
    return HCOMM_OK;
}

/* ---- RMA ---------------------------------------------------------------------------------------- */

static void hc_verbs_finish(hc_verbs_rma_t *o, hcomm_status_t st)
{
    if (o->finished) return;
    o->finished = true;
    o->status = st;
    hc_verbs_drv_t *d = o->conn->d;
    if (o->cookie)
        HC_FIFO_PUSH(&d->doneq, o);
    else if (o->orphan)
        free(o);
    /* else a synchronous caller is waiting for it */
}

/* Posts as many pieces of o as the QPs have room for. */
static hcomm_status_t hc_verbs_advance(hc_verbs_rma_t *o)
{
    hc_verbs_conn_t *c = o->conn;
    hc_verbs_drv_t *d = c->d;
    size_t chunk = HC_MAX((size_t)HC_VERBS_CHUNK_MIN, (o->len + HC_VERBS_CHUNKS_PER_RMA - 1) / HC_VERBS_CHUNKS_PER_RMA);
    chunk = HC_MIN(chunk, (size_t)d->max_msg);
    /* Bulk stays off QP 0 when there are others: an RC QP runs its WQEs in
     * order, and an eager frame or a credit write queued behind a piece
     * (or behind a READ's response) would wait for its megabyte. */
    int first = c->nqp > 1 ? 1 : 0, span = c->nqp - first;
    while (o->posted < o->len) {
        int qi = -1;
        for (int k = 0; k < span && qi < 0; k++) {
            int cand = first + (c->rr + k) % span;
            if (hc_verbs_room(c, cand, false)) qi = cand;
        }
        if (qi < 0) return HCOMM_ERR_AGAIN;
        c->rr = (qi - first + 1) % span;
        size_t piece = HC_MIN(chunk, o->len - o->posted);
        hc_verbs_wr_t wr = {.laddr = (uint64_t)(uintptr_t)(o->local + o->posted),
                            .len = (uint32_t)piece,
                            .lkey = o->lkey,
                            .op = o->write ? HC_VERBS_OP_WRITE : HC_VERBS_OP_READ,
                            .raddr = o->raddr + o->posted,
                            .rkey = o->rkey};
        int rc = hc_verbs_post(c, qi, &wr, true, o, false);
        if (rc == EAGAIN || rc == ENOMEM) return HCOMM_ERR_AGAIN;
        if (rc) {
            hc_verbs_conn_fail(c, "verbs: %s to rank %d: posting (%s): %s", hc_verbs_kind(d, o),
                               c->base.peer, d->dp->name, strerror(rc));
            return HCOMM_ERR_PEER_FAILED;
        }
        o->posted += piece;
        o->pieces_out++;
        if (o->write)
            d->n_write_bytes += piece;
        else
            d->n_read_bytes += piece;
    }
    return HCOMM_OK;
}

/* Posts what waits on c's pending list, in order. */
static void hc_verbs_advance_pending(hc_verbs_conn_t *c)
{
    while (c->pending.head && c->state == HC_VERBS_C_UP) {
        hc_verbs_rma_t *o = c->pending.head;
        if (hc_verbs_advance(o) != HCOMM_OK) return;
        (void)HC_FIFO_POP(&c->pending);
        o->queued = false;
        c->d->npending--;
    }
}

void hc_verbs_conn_flush(hc_verbs_conn_t *c, hcomm_status_t st)
{
    hc_verbs_rma_t *o;
    while ((o = HC_FIFO_POP(&c->pending))) {
        o->queued = false;
        c->d->npending--;
        hc_verbs_finish(o, st);
    }
    for (int i = 0; i < c->nqp; i++) {
        hc_verbs_qp_t *q = &c->qp[i];
        for (uint32_t k = 0; k < q->mark_n; k++) {
            hc_verbs_mark_t *m = &q->marks[(q->mark_head + k) % HC_VERBS_SQ_DEPTH];
            if (m->rma) hc_verbs_finish(m->rma, st);
        }
        c->d->nmarks -= q->mark_n;
        q->mark_n = 0;
        q->sq_done = q->sq_posted;
    }
}

static hcomm_status_t hc_verbs_rma(hc_conn_t *conn, const hc_rma_t *rma, bool write)
{
    hc_verbs_conn_t *c = (hc_verbs_conn_t *)conn;
    hc_verbs_drv_t *d = c->d;
    const char *what = write ? "write" : "get";
    if (c->state == HC_VERBS_C_FAILED || c->state == HC_VERBS_C_CLOSED)
        return hc_error(HCOMM_ERR_PEER_FAILED, "%s", c->why);
    const hc_verbs_reg_t *reg = (const hc_verbs_reg_t *)(uintptr_t)rma->lkey;
    uintptr_t l = (uintptr_t)rma->local;
    if (!reg || reg->magic != HC_VERBS_REG_MAGIC)
        return hc_error(HCOMM_ERR_INVALID,
                        "verbs: %s of %zu bytes with rank %d: the local buffer has no key (lkey %#llx)",
                        what, rma->len, conn->peer, (unsigned long long)rma->lkey);
    if (l < reg->addr || rma->len > reg->len || l - reg->addr > reg->len - rma->len)
        return hc_error(HCOMM_ERR_INVALID,
                        "verbs: %s of %zu bytes at %p: outside the registration of its local key "
                        "(%#lx + %zu)",
                        what, rma->len, rma->local, (unsigned long)reg->addr, reg->len);
    const struct hc_rkey *rk = rma->rkey;
    if (!rk)
        return hc_error(HCOMM_ERR_INVALID, "verbs: %s of %zu bytes with rank %d: no remote key", what,
                        rma->len, conn->peer);
    if (rma->remote_addr < rk->addr || rma->len > rk->len ||
        rma->remote_addr - rk->addr > rk->len - rma->len)
        return hc_error(HCOMM_ERR_INVALID,
                        "verbs: %s of %zu bytes at rank %d's %#llx: outside its remote key (%#llx + %llu)",
                        what, rma->len, conn->peer, (unsigned long long)rma->remote_addr,
                        (unsigned long long)rk->addr, (unsigned long long)rk->len);
    if (rma->len == 0) return HCOMM_OK;
    if (HC_UNLIKELY(c->state != HC_VERBS_C_UP)) {
        hcomm_status_t st = hc_verbs_conn_start(c);
        if (st != HCOMM_OK) return st;
    }
    hc_verbs_rma_t *o = d->rma_free;
    if (o)
        d->rma_free = o->next;
    else if (!(o = malloc(sizeof(*o))))
        return hc_error(HCOMM_ERR_NO_MEMORY, "verbs: RMA state");
    *o = (hc_verbs_rma_t){.conn = c,
                          .cookie = rma->cookie,
                          .local = rma->local,
                          .raddr = rma->remote_addr,
                          .len = rma->len,
                          .lkey = reg->mr.lkey,
                          .rkey = rk->rkey,
                          .write = write};
    hcomm_status_t st = c->pending.head ? HCOMM_ERR_AGAIN : hc_verbs_advance(o);
    if (st == HCOMM_ERR_AGAIN) {
        HC_FIFO_PUSH(&c->pending, o);
        o->queued = true;
        d->npending++;
    } else if (st != HCOMM_OK) {
        /* The connection failed while posting. Posted pieces were finished
         * by its flush: with a cookie, rma_done (with the error) follows. */
        if (o->pieces_out && o->cookie) return HCOMM_IN_PROGRESS;
        o->next = d->rma_free;
        d->rma_free = o;
        return hc_error(HCOMM_ERR_PEER_FAILED, "%s", c->why);
    }
    if (rma->cookie) return HCOMM_IN_PROGRESS;
    /* Synchronous: wait for our pieces, polling completions only. */
    double limit = hc_cfg.timeout > 0 ? hc_cfg.timeout : 300;
    uint64_t deadline = hc_time_ns() + (uint64_t)(limit * 1e9);
    while (!o->finished) {
        (void)hc_verbs_poll(d);
        if (o->queued && c->pending.head == o) hc_verbs_advance_pending(c);
        if (!o->finished && hc_time_ns() > deadline) {
            o->orphan = true;
            return hc_error(HCOMM_ERR_TIMEOUT, "verbs: %s of %zu bytes with rank %d: no completion in %.0f s",
                            what, rma->len, conn->peer, limit);
        }
    }
    st = o->status;
    o->next = d->rma_free;
    d->rma_free = o;
    if (st != HCOMM_OK) return hc_error(st, "%s", c->why);
    return HCOMM_OK;
}

hcomm_status_t hc_verbs_get(hc_conn_t *conn, const hc_rma_t *rma)
{
    return hc_verbs_rma(conn, rma, false);
}

hcomm_status_t hc_verbs_write(hc_conn_t *conn, const hc_rma_t *rma)
{
    return hc_verbs_rma(conn, rma, true);
}

/* ---- completions -------------------------------------------------------------------------------- */

static void hc_verbs_wc(hc_verbs_drv_t *d, const struct ibv_wc *wc)
{
    uint32_t kind = (uint32_t)(wc->wr_id & 3);
    uint32_t idx = (uint32_t)(wc->wr_id >> 2) & 0xff;
    uint64_t peer = wc->wr_id >> 10;
    if (peer >= (uint64_t)d->env->size) return;
    hc_verbs_conn_t *c = d->conns[peer];
    if (!c || !c->qp) return;
    int qi = kind == HC_VERBS_WR_RECV ? 0 : (int)idx;
    if (qi >= c->nqp || !c->qp[qi].live || c->qp[qi].qpn != wc->qp_num) return; /* a destroyed QP's */
    hc_verbs_qp_t *q = &c->qp[qi];
    if (wc->status != IBV_WC_SUCCESS) {
        hc_log_debug("verbs: error CQE from rank %d QP %d (%u): %s, wr kind %u, vendor error %#x",
                     c->base.peer, qi, wc->qp_num, ibv_wc_status_str(wc->status), kind, wc->vendor_err);
        if (c->state == HC_VERBS_C_FAILED || c->state == HC_VERBS_C_CLOSED) return;
        const hc_verbs_rma_t *o = kind == HC_VERBS_WR_SEND && q->mark_n ? q->marks[q->mark_head].rma : NULL;
        const char *op = kind == HC_VERBS_WR_RECV ? "receive" : hc_verbs_kind(d, o);
        const char *hint = wc->status == IBV_WC_REM_ACCESS_ERR || wc->status == IBV_WC_LOC_PROT_ERR
                               ? " (the key was refused: deregistered, or the range is outside it)"
                           : wc->status == IBV_WC_WR_FLUSH_ERR
                               ? " (the queue pair went into the error state before this request ran: "
                                 "an access this side refused as responder, such as a peer using a "
                                 "deregistered key or a range outside it, or a broken connection)"
                           : wc->status == IBV_WC_RETRY_EXC_ERR
                               ? " (no answer within HCOMM_IB_TIMEOUT x HCOMM_IB_RETRY_CNT: the peer is gone)"
                               : "";
        hc_verbs_conn_fail(c, "verbs: %s with rank %d failed: %s (wc status %d, vendor error %#x)%s",
                           op, c->base.peer, ibv_wc_status_str(wc->status), wc->status,
                           wc->vendor_err, hint);
        return;
    }
    if (kind == HC_VERBS_WR_RECV) {
        if (idx >= HC_VERBS_SLOTS) return;
        hc_verbs_rx_t *x = &c->rx[idx];
        x->len = wc->byte_len;
        HC_FIFO_PUSH(&d->rxq, x);
        return;
    }
    if (!q->mark_n) return; /* after a flush */
    hc_verbs_mark_t m = q->marks[q->mark_head];
    q->mark_head = (q->mark_head + 1) % HC_VERBS_SQ_DEPTH;
    q->mark_n--;
    d->nmarks--;
    if (q->mark_n) q->moved_ns = hc_time_ns();
    q->sq_done = m.sq_seq;
    if (qi == 0 && m.tx_seq > c->tx_done) c->tx_done = m.tx_seq;
    if (m.rma && !m.rma->finished) {
        hc_verbs_rma_t *o = m.rma;
        o->pieces_out--;
        if (o->pieces_out == 0 && o->posted == o->len) hc_verbs_finish(o, HCOMM_OK);
    }
    if (c->credit_owed && qi == 0) hc_verbs_credit_write(c, false);
}

int hc_verbs_poll(hc_verbs_drv_t *d)
{
    int n = 0;
    for (int i = 0; i < d->ncq; i++) {
        struct ibv_wc wc[HC_VERBS_POLL_BATCH];
        int k;
        do {
            k = d->dp->poll_cq(&d->cqs[i], wc, HC_VERBS_POLL_BATCH);
            if (k < 0) {
                hc_log_warn("verbs: polling a CQ (%s) failed (%d)", d->dp->name, k);
                break;
            }
            for (int j = 0; j < k; j++)
                hc_verbs_wc(d, &wc[j]);
            n += k;
        } while (k == HC_VERBS_POLL_BATCH);
    }
    return n;
}

/* Takes the frame in slot rx_seq % SLOTS if it is complete (head and tail
 * carry its sequence), delivers it and gives the slot back. arrived: the
 * byte count of its SEND (SEND mode), 0 in WRITE mode (polled). */
static bool hc_verbs_take(hc_verbs_drv_t *d, hc_verbs_conn_t *c, uint32_t arrived)
{
    uint32_t slot = (uint32_t)(c->rx_seq % HC_VERBS_SLOTS);
    const uint8_t *p = c->rx_buf + (size_t)slot * HC_VERBS_SLOT_BYTES;
    uint64_t head = __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE);
    uint32_t want = (uint32_t)(c->rx_seq + 1);
    if ((uint32_t)(head >> 32) != want) {
        if (arrived)
            hc_verbs_conn_fail(c, "verbs: a %u-byte message from rank %d is not frame %u", arrived,
                               c->base.peer, want);
        return false;
    }
    uint32_t len = (uint32_t)head;
    if (len > HC_VERBS_MAX_FRAME) {
        hc_verbs_conn_fail(c, "verbs: rank %d's frame %u says %u payload bytes (at most %zu)",
                           c->base.peer, want, len, (size_t)HC_VERBS_MAX_FRAME);
        return false;
    }
    size_t tail_off = 8 + sizeof(hc_frame_hdr_t) + HC_ALIGN_UP((size_t)len, (size_t)8);
    if (__atomic_load_n((const uint64_t *)(p + tail_off), __ATOMIC_ACQUIRE) != head) {
        if (arrived)
            hc_verbs_conn_fail(c, "verbs: rank %d's frame %u arrived without its tail", c->base.peer, want);
        return false; /* WRITE mode: still being placed */
    }
    hc_frame_hdr_t hdr;
    memcpy(&hdr, p + 8, sizeof(hdr));
    if (hdr.len != len) {
        hc_verbs_conn_fail(c, "verbs: a frame from rank %d says %u payload bytes, its slot %u",
                           c->base.peer, hdr.len, len);
        return false;
    }
    c->rx_seq++;
    if (hdr.type == HC_VERBS_FRAME_BYE) {
        /* The peer is tearing down (its finalize, which waits for every
         * rank first unless a rank failed): nothing more will come, and
         * whatever this rank still waits for from it never will. */
        hc_verbs_conn_fail(c, "verbs: rank %d closed its connection (it finalized, or left after "
                           "a failure) while this rank still talks to it", c->base.peer);
        c->bye = true;
        return true;
    }
    if (hdr.type < HC_FRAME_DRIVER)
        d->env->deliver(d->env->core, &c->base, &hdr, p + 8 + sizeof(hdr));
    /* The slot goes back even before this side calls the connection up (a
     * peer that is RTS may send while our READY is on its way): a slot not
     * given back would put the receive queue's order off the frames' by one
     * for good (SEND mode) or lose a credit (WRITE mode). */
    if (c->state == HC_VERBS_C_FAILED || c->state == HC_VERBS_C_CLOSED) return true;
    if (d->eager == HC_VERBS_EAGER_SEND) {
        int rc = hc_verbs_post_slot(c, slot);
        if (rc) {
            hc_verbs_conn_fail(c, "verbs: reposting a receive slot for rank %d: %s", c->base.peer,
                               strerror(rc));
            return true;
        }
    } else {
        c->rx_posted++;
    }
    if (c->rx_posted - c->rx_advertised >= HC_VERBS_CREDIT_BATCH) hc_verbs_credit_write(c, false);
    return true;
}

/* Every HC_VERBS_HB_NS: a credit write on each idle connection (a dead
 * peer then fails it), owed credits, pending RMA. */
static void hc_verbs_tick(hc_verbs_drv_t *d)
{
    uint64_t now = hc_time_ns();
    if (now < d->hb_next) return;
    d->hb_next = now + HC_VERBS_HB_NS;
    for (int r = 0; r < d->env->size; r++) {
        hc_verbs_conn_t *c = d->conns[r];
        if (!c) continue;
        if (c->state == HC_VERBS_C_HELLO) (void)hc_verbs_conn_start(c);
        if (c->state != HC_VERBS_C_UP) continue;
        /* A QP whose oldest signaled WQE has not retired for stall_ns:
         * the peer's end neither answers nor was reported dead. */
        for (int i = 0; i < c->nqp; i++)
            if (c->qp[i].mark_n && now - c->qp[i].moved_ns > d->stall_ns) {
                hc_verbs_conn_fail(c, "verbs: rank %d has not acknowledged RDMA traffic for %.1f s "
                                   "(QP %d): its process is gone or its link is down",
                                   r, (double)(now - c->qp[i].moved_ns) * 1e-9, i);
                break;
            }
        if (c->state != HC_VERBS_C_UP) continue;
        /* Idle since the last tick: a signaled credit write, so that a
         * peer that went away is noticed (its NAK, the retries running
         * out, or the stall check above). */
        if (!c->last_post_ns || c->credit_owed) {
            hc_log_trace("verbs: heartbeat (credit write) to rank %d", r);
            hc_verbs_credit_write(c, true);
        }
        c->last_post_ns = 0;
    }
}

int hc_verbs_progress(hc_drv_t *drv)
{
    hc_verbs_drv_t *d = (hc_verbs_drv_t *)drv;
    /* In WRITE mode the CQs only hold send completions: with none signaled
     * in flight, only an error (of an unsignaled WQE) can be there, and that
     * can wait a few iterations; the rings are what latency waits on. */
    uint32_t tick = d->ticks++;
    int n = d->eager == HC_VERBS_EAGER_SEND || d->nmarks || (tick & 15) == 0 ? hc_verbs_poll(d) : 0;
    hc_verbs_rx_t *x;
    while ((x = HC_FIFO_POP(&d->rxq))) { /* SEND mode */
        if (x->conn->state != HC_VERBS_C_CLOSED) (void)hc_verbs_take(d, x->conn, x->len);
        n++;
    }
    for (int i = 0; i < d->nup; i++) { /* WRITE mode: poll the rings */
        hc_verbs_conn_t *c = d->up[i];
        for (int k = 0; k < HC_VERBS_SLOTS && c->state != HC_VERBS_C_CLOSED && hc_verbs_take(d, c, 0); k++)
            n++;
    }
    hc_verbs_rma_t *o;
    while ((o = HC_FIFO_POP(&d->doneq))) {
        hc_verbs_conn_t *c = o->conn;
        void *cookie = o->cookie;
        hcomm_status_t st = o->status;
        o->next = d->rma_free;
        d->rma_free = o;
        d->env->rma_done(d->env->core, &c->base, cookie, st);
        n++;
    }
    for (int r = 0; r < d->env->size && d->npending; r++) {
        hc_verbs_conn_t *c = d->conns[r];
        if (c && c->pending.head) hc_verbs_advance_pending(c);
    }
    if ((tick & 255) == 0) hc_verbs_tick(d); /* may fail a connection: reported just below */
    if (HC_UNLIKELY(d->nfail_owed)) {
        for (int r = 0; r < d->env->size && d->nfail_owed; r++) {
            hc_verbs_conn_t *c = d->conns[r];
            if (!c || !c->fail_owed) continue;
            c->fail_owed = false;
            d->nfail_owed--;
            d->env->peer_failed(d->env->core, r, HCOMM_ERR_PEER_FAILED, c->why);
            n++;
        }
    }
    return n;
}

/* ---- memory ------------------------------------------------------------------------------------- */

hcomm_status_t hc_verbs_mem_reg(hc_drv_t *drv, const hc_mem_desc_t *desc, uint64_t *key_p)
{
    hc_verbs_drv_t *d = (hc_verbs_drv_t *)drv;
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if (desc->mem_type != HC_MEM_HOST && !d->dp->mr_reg_dmabuf)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "%s: the %s queue backend cannot register device memory (no dmabuf "
                        "registration)",
                        drv->ops->name, d->dp->name);
    hc_verbs_reg_t *r = malloc(sizeof(*r));
    if (!r) return hc_error(HCOMM_ERR_NO_MEMORY, "verbs: registration state");
    hcomm_status_t st = desc->mem_type == HC_MEM_HOST
                            ? d->dp->mr_reg(d, desc->addr, desc->len, access, &r->mr)
                            : d->dp->mr_reg_dmabuf(d, desc->addr, desc->len, desc->dmabuf_fd,
                                                   desc->dmabuf_offset, access, &r->mr);
    if (st != HCOMM_OK) {
        free(r);
        return st;
    }
    r->magic = HC_VERBS_REG_MAGIC;
    r->addr = (uintptr_t)desc->addr;
    r->len = desc->len;
    r->prev = NULL;
    r->next = d->regs;
    if (d->regs) d->regs->prev = r;
    d->regs = r;
    d->n_regs++;
    *key_p = (uint64_t)(uintptr_t)r;
    return HCOMM_OK;
}

static void hc_verbs_reg_free(hc_verbs_drv_t *d, hc_verbs_reg_t *r)
{
    d->dp->mr_dereg(d, &r->mr);
    if (r->prev)
        r->prev->next = r->next;
    else
        d->regs = r->next;
    if (r->next) r->next->prev = r->prev;
    r->magic = 0;
    free(r);
    d->n_deregs++;
}

/* Close: the registrations nobody deregistered (the registration cache's
 * records still referenced when the core dropped its hooks: a request that
 * never ended, its peer dead) go now, before the protection domain. */
void hc_verbs_regs_release(hc_verbs_drv_t *d)
{
    uint64_t n = 0;
    while (d->regs) {
        hc_verbs_reg_free(d, d->regs);
        n++;
    }
    if (n)
        hc_log_info("%s: close: released %llu memory registrations still held", d->base.ops->name,
                    (unsigned long long)n);
}

void hc_verbs_mem_dereg(hc_drv_t *drv, uint64_t key)
{
    hc_verbs_drv_t *d = (hc_verbs_drv_t *)drv;
    hc_verbs_reg_t *r = (hc_verbs_reg_t *)(uintptr_t)key;
    if (!r || r->magic != HC_VERBS_REG_MAGIC) return;
    hc_verbs_reg_free(d, r);
}

hcomm_status_t hc_verbs_rkey_pack(hc_drv_t *drv, uint64_t key, const hc_mem_desc_t *desc,
                                  void *buf, size_t *len_p)
{
    (void)drv;
    const hc_verbs_reg_t *r = (const hc_verbs_reg_t *)(uintptr_t)key;
    if (!r || r->magic != HC_VERBS_REG_MAGIC)
        return hc_error(HCOMM_ERR_INVALID, "verbs: rkey_pack of key %#llx: not a registration",
                        (unsigned long long)key);
    uintptr_t a = (uintptr_t)desc->addr;
    if (a < r->addr || desc->len > r->len || a - r->addr > r->len - desc->len)
        return hc_error(HCOMM_ERR_INVALID, "verbs: rkey_pack: %p + %zu is outside its registration key",
                        desc->addr, desc->len);
    hc_verbs_rkey_wire_t w = {.addr = a, .len = desc->len, .rkey = r->mr.rkey, .magic = HC_VERBS_REG_MAGIC};
    if (*len_p < sizeof(w))
        return hc_error(HCOMM_ERR_INVALID, "verbs: a remote key needs %zu bytes, %zu given", sizeof(w), *len_p);
    memcpy(buf, &w, sizeof(w));
    *len_p = sizeof(w);
    return HCOMM_OK;
}

hcomm_status_t hc_verbs_rkey_unpack(hc_conn_t *conn, const void *buf, size_t len, hc_rkey_t **rkey_p)
{
    hc_verbs_rkey_wire_t w;
    if (len != sizeof(w))
        return hc_error(HCOMM_ERR_INVALID, "verbs: a %zu-byte remote key from rank %d (want %zu)", len,
                        conn->peer, sizeof(w));
    memcpy(&w, buf, sizeof(w));
    if (w.magic != HC_VERBS_REG_MAGIC)
        return hc_error(HCOMM_ERR_INVALID, "verbs: rank %d sent a remote key that is not a verbs key",
                        conn->peer);
    struct hc_rkey *k = malloc(sizeof(*k));
    if (!k) return hc_error(HCOMM_ERR_NO_MEMORY, "verbs: remote key");
    *k = (struct hc_rkey){.addr = w.addr, .len = w.len, .rkey = w.rkey};
    *rkey_p = k;
    return HCOMM_OK;
}

void hc_verbs_rkey_release(hc_conn_t *conn, hc_rkey_t *rkey)
{
    (void)conn;
    free(rkey);
}
