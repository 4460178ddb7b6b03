/*
 * verbs driver: connections. A connection object exists for every peer from
 * connect() on (the core connects all peers at init), but its RC queue
 * pairs, receive slots and send copies are made only when the first put or
 * RMA needs them, or when the peer's HELLO arrives. The queue-pair numbers
 * travel through env->ep_send (relayed by the bootstrap), in three steps:
 *
 *   A (first put)                        B
 *   QPs INIT, slots posted
 *   HELLO {qpn, psn, ctrl key}   ---->   QPs INIT, slots posted, RTR + RTS
 *                                <----   HELLO {..., RTR}: B can receive
 *   RTR + RTS: A is up (B is RTR)
 *   READY                        ---->   B is up (A is RTR)
 *
 * A HELLO sent before its sender's QPs were RTR (flag clear) is followed by
 * a READY once they are; a side may send on its QPs only when it is RTS and
 * knows the peer is RTR (a HELLO with the flag, or a READY). When both
 * start at once, both HELLOs lack the flag and both answer READY.
 *
 * Failures: the first error completion (retry exceeded after HCOMM_IB_TIMEOUT
 * x HCOMM_IB_RETRY_CNT, remote access, ...) fails the connection with the
 * status text and the peer's rank; everything it owed completes with an
 * error, then env->peer_failed. A peer that said BYE (it is closing) has its
 * errors taken quietly. Idle connections are kept alive and watched by a
 * credit write every HC_VERBS_HB_NS (verbs_data.c), so a dead peer is found
 * within about timeout x retries even when no data flows.
 */
#include "drv/verbs/verbs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* ---- completion queues -------------------------------------------------------------------------- */

/* A CQ with room for one more connection: its index, or -1. */
static int hc_verbs_cq_get(hc_verbs_drv_t *d)
{
    for (int i = 0; i < d->ncq; i++)
        if (d->cqs[i].users < d->cqs[i].cap) {
            d->cqs[i].users++;
            return i;
        }
    int per = HC_VERBS_SLOTS + d->nqp * HC_VERBS_SQ_DEPTH;
    int max = d->dev_attr.max_cqe > 0 ? d->dev_attr.max_cqe : 4096;
    int cap = HC_MIN(16, max / per);
    if (cap < 1) {
        hc_error(HCOMM_ERR_UNSUPPORTED, "verbs: %s: a CQ holds %d entries, a connection needs %d",
                 d->dev_name, max, per);
        return -1;
    }
    hc_verbs_cq_t *n = realloc(d->cqs, (size_t)(d->ncq + 1) * sizeof(*n));
    if (!n) return -1;
    d->cqs = n;
    hc_verbs_cq_t cq = {.users = 1, .cap = cap};
    if (d->dp->cq_create(d, cap * per, &cq) != HCOMM_OK) return -1;
    d->cqs[d->ncq] = cq;
    return d->ncq++;
}

static void hc_verbs_cq_put(hc_verbs_drv_t *d, int cqi)
{
    if (cqi >= 0 && cqi < d->ncq) d->cqs[cqi].users--;
}

/* ---- failure ------------------------------------------------------------------------------------ */

void hc_verbs_up_add(hc_verbs_conn_t *c)
{
    hc_verbs_drv_t *d = c->d;
    if (c->up_idx >= 0) return;
    c->up_idx = d->nup;
    d->up[d->nup++] = c;
}

void hc_verbs_up_del(hc_verbs_conn_t *c)
{
    hc_verbs_drv_t *d = c->d;
    if (c->up_idx < 0) return;
    hc_verbs_conn_t *last = d->up[--d->nup];
    d->up[c->up_idx] = last;
    last->up_idx = c->up_idx;
    c->up_idx = -1;
}

void hc_verbs_conn_fail(hc_verbs_conn_t *c, const char *fmt, ...)
{
    if (c->state == HC_VERBS_C_FAILED || c->state == HC_VERBS_C_CLOSED) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof(c->why), fmt, ap);
    va_end(ap);
    if (c->bye) {
        /* The peer is closing: its queue pairs going away is not a failure. */
        c->state = HC_VERBS_C_CLOSED;
        hc_log_debug("verbs: connection to rank %d closed after its BYE (%s)", c->base.peer, c->why);
        hc_verbs_conn_flush(c, HCOMM_ERR_PEER_FAILED);
        return;
    }
    c->state = HC_VERBS_C_FAILED;
    hc_log_info("%s", c->why);
    hc_verbs_conn_flush(c, HCOMM_ERR_PEER_FAILED);
    c->fail_owed = true;
    c->d->nfail_owed++;
}

/* ---- queue pairs -------------------------------------------------------------------------------- */

static void *hc_verbs_buf(hc_verbs_drv_t *d, size_t len, int access, hc_verbs_mr_t *mr,
                          const char *what)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, len) != 0) {
        hc_error(HCOMM_ERR_NO_MEMORY, "verbs: %zu bytes of %s", len, what);
        return NULL;
    }
    memset(p, 0, len);
    if (d->dp->mr_reg(d, p, len, access, mr) != HCOMM_OK) {
        hc_error(HCOMM_ERR_NO_MEMORY, "verbs: registering %s: %s", what, hc_error_last());
        free(p);
        return NULL;
    }
    return p;
}

/* Creates the QPs (INIT), the slots (posted) and the send copies. */
static hcomm_status_t hc_verbs_make_qps(hc_verbs_conn_t *c)
{
    hc_verbs_drv_t *d = c->d;
    int peer = c->base.peer;
    c->cqi = hc_verbs_cq_get(d);
    if (c->cqi < 0) return HCOMM_ERR_NO_MEMORY;
    c->qp = calloc((size_t)d->nqp, sizeof(*c->qp));
    if (!c->qp) return hc_error(HCOMM_ERR_NO_MEMORY, "verbs: queue pairs for rank %d", peer);
    for (int i = 0; i < d->nqp; i++) {
        uint32_t inl = 0;
        uint32_t max_recv = i == 0 && d->eager == HC_VERBS_EAGER_SEND ? HC_VERBS_SLOTS : 1;
        hcomm_status_t st = d->dp->qp_create(d, &d->cqs[c->cqi], max_recv, &c->qp[i], &inl);
        if (c->qp[i].live) c->nqp = i + 1;
        if (st != HCOMM_OK)
            return hc_error(st, "verbs: queue pair %d for rank %d: %s", i, peer, hc_error_last());
        if (i == 0) d->max_inline = inl;
    }
    size_t ring = (size_t)HC_VERBS_SLOTS * HC_VERBS_SLOT_BYTES;
    c->rx_buf = hc_verbs_buf(d, ring,
                             IBV_ACCESS_LOCAL_WRITE |
                                 (d->eager == HC_VERBS_EAGER_WRITE ? IBV_ACCESS_REMOTE_WRITE : 0),
                             &c->rx_mr, "eager receive slots");
    if (!c->rx_buf) return HCOMM_ERR_NO_MEMORY;
    c->tx_buf = hc_verbs_buf(d, ring, 0, &c->tx_mr, "eager send copies");
    if (!c->tx_buf) return HCOMM_ERR_NO_MEMORY;
    for (uint32_t s = 0; s < HC_VERBS_SLOTS; s++) {
        c->rx[s] = (hc_verbs_rx_t){.conn = c, .slot = s};
        if (d->eager == HC_VERBS_EAGER_WRITE) {
            c->rx_posted++; /* a ring slot the peer may write */
            continue;
        }
        int rc = hc_verbs_post_slot(c, s);
        if (rc) return hc_error_errno(HCOMM_ERR_INTERNAL, rc, "verbs: posting receive slots (rank %d)", peer);
    }
    c->rx_advertised = c->rx_posted;
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r)) r = (uint32_t)hc_time_ns();
    c->psn = r & 0xffffff;
    c->qps_made = true;
    return HCOMM_OK;
}

void hc_verbs_conn_free_qps(hc_verbs_conn_t *c)
{
    hc_verbs_drv_t *d = c->d;
    for (int i = 0; i < c->nqp; i++)
        if (c->qp[i].live) d->dp->qp_destroy(d, &c->qp[i]);
    free(c->qp);
    c->qp = NULL;
    c->nqp = 0;
    d->dp->mr_dereg(d, &c->rx_mr);
    d->dp->mr_dereg(d, &c->tx_mr);
    free(c->rx_buf);
    free(c->tx_buf);
    c->rx_buf = c->tx_buf = NULL;
    c->rx_mr = c->tx_mr = (hc_verbs_mr_t){0};
    hc_verbs_cq_put(d, c->cqi);
    c->cqi = -1;
}

/* RTR then RTS on every QP, from the peer's HELLO. */
static hcomm_status_t hc_verbs_to_rts(hc_verbs_conn_t *c)
{
    hc_verbs_drv_t *d = c->d;
    const hc_verbs_ep_t *r = &c->remote;
    int peer = c->base.peer;
    int n = HC_MIN(c->nqp, (int)r->nqp);
    for (int i = 0; i < n; i++) {
        hcomm_status_t st = d->dp->qp_connect(c, &c->qp[i], r->qpn[i], r->psn);
        if (st != HCOMM_OK) return hc_error(st, "verbs: QP %d (rank %d): %s", i, peer, hc_error_last());
    }
    /* QPs the peer has no partner for stay unused. */
    for (int i = n; i < c->nqp; i++)
        d->dp->qp_destroy(d, &c->qp[i]);
    c->nqp = n;
    c->rtr = true;
    c->peer_ctrl_addr = r->ctrl_addr;
    c->peer_ctrl_rkey = r->ctrl_rkey;
    c->peer_ring_addr = r->ring_addr;
    c->peer_ring_rkey = r->ring_rkey;
    if (c->peer_posted < r->slots) c->peer_posted = r->slots;
    return HCOMM_OK;
}

static hcomm_status_t hc_verbs_send_ep(hc_verbs_conn_t *c, uint8_t kind)
{
    hc_verbs_drv_t *d = c->d;
    hc_verbs_ep_t e = {.magic = HC_VERBS_MAGIC,
                       .kind = kind,
                       .flags = c->rtr ? HC_VERBS_EP_RTR : 0,
                       .nqp = (uint8_t)c->nqp,
                       .rank = d->env->rank,
                       .psn = c->psn,
                       .instance = d->me.instance,
                       .ctrl_addr = (uint64_t)(uintptr_t)(d->ctrl + (size_t)c->base.peer * HC_VERBS_CTRL_STRIDE),
                       .ctrl_rkey = d->ctrl_mr.rkey,
                       .slots = HC_VERBS_SLOTS,
                       .ring_addr = (uint64_t)(uintptr_t)c->rx_buf,
                       .ring_rkey = c->rx_mr.rkey,
                       .eager = (uint32_t)d->eager};
    for (int i = 0; i < c->nqp; i++)
        e.qpn[i] = c->qp[i].qpn;
    if (!d->env->ep_send)
        return hc_error(HCOMM_ERR_UNSUPPORTED, "verbs: no endpoint handshake in this environment");
    return d->env->ep_send(d->env->core, &d->base, c->base.peer, &e, sizeof(e));
}

static void hc_verbs_check_up(hc_verbs_conn_t *c)
{
    if (c->state == HC_VERBS_C_HELLO && c->rtr && c->peer_ready) {
        c->state = HC_VERBS_C_UP;
        if (c->d->eager == HC_VERBS_EAGER_WRITE) hc_verbs_up_add(c);
        hc_log_debug("verbs: rank %d: connection to rank %d up (%d QPs, inline %u)",
                     c->d->env->rank, c->base.peer, c->nqp, c->d->max_inline);
    }
}

/* Starts (or pushes on) the handshake; OK when the connection is up. */
hcomm_status_t hc_verbs_conn_start(hc_verbs_conn_t *c)
{
    if (c->state == HC_VERBS_C_UP) return HCOMM_OK;
    if (c->state == HC_VERBS_C_FAILED || c->state == HC_VERBS_C_CLOSED)
        return hc_error(HCOMM_ERR_PEER_FAILED, "%s", c->why);
    if (!c->qps_made) {
        hcomm_status_t st = hc_verbs_make_qps(c);
        if (st != HCOMM_OK) {
            hc_verbs_conn_fail(c, "verbs: connection to rank %d: %s", c->base.peer, hc_error_last());
            return hc_error(st, "%s", c->why);
        }
        c->state = HC_VERBS_C_HELLO;
    }
    if (!c->sent_hello) {
        hcomm_status_t st = hc_verbs_send_ep(c, HC_VERBS_EP_HELLO);
        if (st == HCOMM_OK) {
            c->sent_hello = true;
            c->hello_rtr = c->rtr;
        } else if (st != HCOMM_ERR_AGAIN) {
            hc_verbs_conn_fail(c, "verbs: handshake with rank %d: %s", c->base.peer, hc_error_last());
            return hc_error(HCOMM_ERR_PEER_FAILED, "%s", c->why);
        }
    }
    hc_verbs_check_up(c);
    return c->state == HC_VERBS_C_UP ? HCOMM_OK : HCOMM_ERR_AGAIN;
}

void hc_verbs_ep_recv(hc_drv_t *drv, int from, const void *blob, size_t len)
{
    hc_verbs_drv_t *d = (hc_verbs_drv_t *)drv;
    hc_verbs_ep_t e;
    if (len != sizeof(e) || from < 0 || from >= d->env->size) {
        hc_log_warn("verbs: a %zu-byte handshake from rank %d: not ours, dropped", len, from);
        return;
    }
    memcpy(&e, blob, sizeof(e));
    hc_verbs_conn_t *c = d->conns[from];
    if (e.magic != HC_VERBS_MAGIC || e.rank != from || e.nqp < 1 || e.nqp > HC_VERBS_MAX_QPS) {
        hc_log_warn("verbs: malformed handshake from rank %d: dropped", from);
        return;
    }
    if (!c) {
        /* The peer is faster than this side's connect(): keep its HELLO (a
         * READY cannot come before our HELLO) and take it at connect. */
        if (e.kind == HC_VERBS_EP_HELLO && d->early) {
            d->early[from] = e;
            hc_log_debug("verbs: handshake from rank %d before it was connected: kept", from);
        } else {
            hc_log_warn("verbs: handshake of kind %u from rank %d before it was connected: dropped",
                        e.kind, from);
        }
        return;
    }
    if (e.instance != c->addr.instance) {
        hc_verbs_conn_fail(c, "verbs: rank %d restarted (its handshake is from another process)", from);
        return;
    }
    if (c->state == HC_VERBS_C_FAILED || c->state == HC_VERBS_C_CLOSED) return;
    if (e.kind == HC_VERBS_EP_HELLO) {
        if (c->have_remote) {
            hc_log_warn("verbs: a second HELLO from rank %d: dropped", from);
            return;
        }
        if (!c->qps_made) {
            hcomm_status_t st = hc_verbs_make_qps(c);
            if (st != HCOMM_OK) {
                hc_verbs_conn_fail(c, "verbs: connection to rank %d: %s", from, hc_error_last());
                return;
            }
            c->state = HC_VERBS_C_HELLO;
        }
        if (e.eager != (uint32_t)d->eager) {
            hc_verbs_conn_fail(c, "verbs: rank %d sends eager frames by %s, this rank by %s: set the "
                               "same HCOMM_IB_EAGER on every rank", from,
                               e.eager == HC_VERBS_EAGER_SEND ? "SEND" : "RDMA WRITE",
                               d->eager == HC_VERBS_EAGER_SEND ? "SEND" : "RDMA WRITE");
            return;
        }
        c->remote = e;
        c->have_remote = true;
        if (hc_verbs_to_rts(c) != HCOMM_OK) {
            hc_verbs_conn_fail(c, "%s", hc_error_last());
            return;
        }
        if (e.flags & HC_VERBS_EP_RTR) c->peer_ready = true;
        /* Tell the peer we are RTR: our HELLO if it is not sent yet, else READY. */
        hcomm_status_t st = c->sent_hello && c->hello_rtr ? HCOMM_OK
                            : c->sent_hello             ? hc_verbs_send_ep(c, HC_VERBS_EP_READY)
                                                        : hc_verbs_send_ep(c, HC_VERBS_EP_HELLO);
        if (st != HCOMM_OK) {
            /* The relay has room for blobs; a refusal means the peer is gone. */
            hc_verbs_conn_fail(c, "verbs: handshake with rank %d: %s", from, hc_error_last());
            return;
        }
        c->sent_hello = true;
        c->hello_rtr = true;
    } else if (e.kind == HC_VERBS_EP_READY) {
        c->peer_ready = true;
    } else {
        hc_log_warn("verbs: handshake of kind %u from rank %d: dropped", e.kind, from);
        return;
    }
    hc_verbs_check_up(c);
}

/* ---- connect / disconnect ----------------------------------------------------------------------- */

hcomm_status_t hc_verbs_connect(hc_drv_t *drv, int peer, const void *addr, size_t addr_len,
                                hc_conn_t **conn_p)
{
    hc_verbs_drv_t *d = (hc_verbs_drv_t *)drv;
    hc_verbs_addr_t a;
    if (peer < 0 || peer >= d->env->size)
        return hc_error(HCOMM_ERR_INVALID, "verbs: connect to rank %d of %d", peer, d->env->size);
    if (addr_len != sizeof(a))
        return hc_error(HCOMM_ERR_INVALID, "verbs: rank %d's address is %zu bytes, not %zu", peer,
                        addr_len, sizeof(a));
    memcpy(&a, addr, sizeof(a));
    if (a.magic != HC_VERBS_MAGIC)
        return hc_error(HCOMM_ERR_INVALID, "verbs: rank %d's address is not a verbs address", peer);
    if (a.link_layer != d->me.link_layer)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "verbs: rank %d's port is %s, this rank's %s: they cannot talk", peer,
                        a.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand",
                        d->me.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
    if (d->conns[peer]) {
        *conn_p = &d->conns[peer]->base;
        return HCOMM_OK;
    }
    hc_verbs_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return hc_error(HCOMM_ERR_NO_MEMORY, "verbs: connection to rank %d", peer);
    c->base.ops = drv->ops;
    c->base.drv = drv;
    c->base.peer = peer;
    c->base.caps = HC_CONN_CAP_GET | HC_CONN_CAP_WRITE;
    c->base.max_frame = HC_VERBS_MAX_FRAME;
    c->base.eager_max = d->zcopy_threshold;
    c->d = d;
    c->addr = a;
    c->state = HC_VERBS_C_NONE;
    c->up_idx = -1;
    c->cqi = -1;
    d->conns[peer] = c;
    *conn_p = &c->base;
    if (d->early && d->early[peer].magic == HC_VERBS_MAGIC) {
        hc_verbs_ep_t e = d->early[peer];
        d->early[peer].magic = 0;
        hc_verbs_ep_recv(drv, peer, &e, sizeof(e));
    }
    return HCOMM_OK;
}

static bool hc_verbs_drop_done(hc_verbs_rma_t *o, const hc_verbs_conn_t *c)
{
    if (o->conn != c) return false;
    free(o);
    return true;
}

/* Drops what the driver still queues for c (it is going away). */
static void hc_verbs_purge(hc_verbs_drv_t *d, hc_verbs_conn_t *c)
{
    hc_verbs_rx_t *x;
    HC_FIFO_FILTER(&d->rxq, x, x->conn == c);
    hc_verbs_rma_t *o;
    HC_FIFO_FILTER(&d->doneq, o, hc_verbs_drop_done(o, c));
    if (c->fail_owed) {
        c->fail_owed = false;
        d->nfail_owed--;
    }
}

void hc_verbs_disconnect(hc_conn_t *conn)
{
    hc_verbs_conn_t *c = (hc_verbs_conn_t *)conn;
    hc_verbs_drv_t *d = c->d;
    if (d->conns[conn->peer] != c) return;
    /* An orderly close: BYE, so the peer takes our QPs' end quietly. */
    if (c->state == HC_VERBS_C_UP) {
        hc_frame_hdr_t bye = {.type = HC_VERBS_FRAME_BYE};
        uint64_t deadline = hc_time_ns() + 100000000ull;
        while (hc_verbs_put(conn, &bye, NULL, NULL) == HCOMM_ERR_AGAIN && hc_time_ns() < deadline)
            (void)hc_verbs_poll(d);
        /* The BYE is signaled: wait for it to leave (and be acknowledged). */
        while (c->state == HC_VERBS_C_UP && c->qp && c->qp[0].mark_n > 0 && hc_time_ns() < deadline)
            (void)hc_verbs_poll(d);
    }
    if (c->state != HC_VERBS_C_FAILED) c->state = HC_VERBS_C_CLOSED;
    hc_verbs_up_del(c);
    hc_verbs_conn_flush(c, HCOMM_ERR_PEER_FAILED);
    hc_verbs_purge(d, c);
    hc_verbs_conn_free_qps(c);
    d->conns[conn->peer] = NULL;
    free(c);
}
