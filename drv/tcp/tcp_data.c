/*
 * tcp driver, data path: put, send queues, MSG_ZEROCOPY completions,
 * progress and liveness (the receive stream: tcp_recv.c).
 *
 * put() writes [frame header][payload] with one sendmsg when the socket is
 * up and its queue empty, which is the common case. What does not fit is
 * queued per socket, in order: with a cookie the driver keeps a reference to
 * the caller's payload and answers IN_PROGRESS (large DATA frames are never
 * copied); without one (control frames) it copies the few bytes and answers
 * OK, except for user data (EAGER/DATA), which it refuses with ERR_AGAIN so
 * that the core takes its request path and a blocking send never returns
 * while its bytes sit in user space. A socket's queue is bounded
 * (HC_TCP_QUEUE_BYTES): beyond it put answers ERR_AGAIN, the core's credit
 * signal. Queued frames are written in batches with one sendmsg.
 *
 * Frames larger than HCOMM_ZCOPY_THRESHOLD bytes that carry a cookie go with
 * MSG_ZEROCOPY on sockets that allow it: put_done then waits for the
 * kernel's completion ranges on the socket's error queue. A socket whose
 * completions keep reporting that the kernel copied anyway (loopback, some
 * NICs) stops asking for zero copy, as the kernel documentation advises.
 *
 * Socket choice. With lanes (the core's env->lanes, HCOMM_LANES=auto, and
 * more than one socket) every core frame of lane l goes on socket l % n,
 * ordered frames and DATA alike: each lane is one TCP stream, so one
 * communicator's bulk data never sits in front of another's small frames,
 * in this queue or in the kernel's, and each lane keeps its order
 * (docs/lanes.md). Without lanes every ordered frame (EAGER, RTS, CTS,
 * FIN, NACK) goes on socket 0, so small messages never wait behind bulk
 * data, and DATA frames, which carry their byte offset and may arrive in
 * any order, are striped round-robin over sockets 1..n-1. Either way
 * HCOMM_CONN_SCHED=round_robin stripes DATA over all n, and the driver's
 * own frames go on socket 0.
 *
 * Receive (tcp_recv.c): each socket reads into its own buffer of max_frame
 * plus slack, as much as the kernel has, and hands every complete frame to
 * the core; small frames are thus read many per system call.
 *
 * Progress polls epoll with a zero timeout (every 16th call after a long
 * idle stretch, so an idle rank spinning in a wait costs little), flushes
 * the sockets that have queued frames and, every 10 ms, runs the timers:
 * hello deadlines, a heartbeat on socket 0 when it sent nothing for a third
 * of HCOMM_CONN_HALF_OPEN_TIMEOUT, suspicion (logged, probed with an echo
 * request, forgotten when the peer speaks) after that long without a byte,
 * failure after HCOMM_CONN_FAIL_TIMEOUT, and the idle close (tcp_idle.c),
 * which put and flush honour by holding core frames while it is in flight.
 */
#include "drv/tcp/tcp.h"
#include "base/list.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <linux/errqueue.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>

#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif
#ifndef SO_EE_ORIGIN_ZEROCOPY
#define SO_EE_ORIGIN_ZEROCOPY 5
#endif
#ifndef SO_EE_CODE_ZEROCOPY_COPIED
#define SO_EE_CODE_ZEROCOPY_COPIED 1
#endif

#define HC_TCP_IOV 64
#define HC_TCP_BATCH_BYTES (4u << 20)
#define HC_TCP_TIMER_NS 10000000ull
#define HC_TCP_ABSENT_NS 100000000ull /* a gap between our progress calls this long is ours */
#define HC_TCP_ZC_GIVE_UP 64          /* copied completions, none real: stop asking */

/* ---- queue entries ---------------------------------------------------------- */

hc_tcp_tx_t *hc_drv_tcp_tx_get(hc_tcp_drv_t *d)
{
    hc_tcp_tx_t *t = d->tx_free;
    if (HC_LIKELY(t))
        d->tx_free = t->next;
    else if (!(t = malloc(sizeof(*t))))
        return NULL;
    memset(t, 0, offsetof(hc_tcp_tx_t, inline_buf));
    return t;
}

void hc_drv_tcp_tx_put(hc_tcp_drv_t *d, hc_tcp_tx_t *t)
{
    free(t->heap);
    t->heap = NULL;
    t->next = d->tx_free;
    d->tx_free = t;
}

void hc_drv_tcp_tx_free_all(hc_tcp_drv_t *d)
{
    while (d->tx_free) {
        hc_tcp_tx_t *t = d->tx_free;
        d->tx_free = t->next;
        free(t);
    }
}

static void hc_drv_tcp_q_push(hc_tcp_txq_t *q, hc_tcp_tx_t *t)
{
    HC_FIFO_PUSH(q, t);
}

static hc_tcp_tx_t *hc_drv_tcp_q_pop(hc_tcp_txq_t *q)
{
    return HC_FIFO_POP(q);
}

void hc_drv_tcp_tx_done(hc_tcp_slot_t *s, hc_tcp_tx_t *t, hcomm_status_t status)
{
    hc_tcp_conn_t *c = s->conn;
    if (t->inprog) {
        const hc_drv_env_t *env = c->drv->env;
        env->put_done(env->core, &c->base, t->cookie, status);
    }
    hc_drv_tcp_tx_put(c->drv, t);
}

void hc_drv_tcp_txq_fail(hc_tcp_slot_t *s, hcomm_status_t status)
{
    hc_tcp_tx_t *t;
    while ((t = hc_drv_tcp_q_pop(&s->unacked)))
        hc_drv_tcp_tx_done(s, t, status);
    while ((t = hc_drv_tcp_q_pop(&s->txq)))
        hc_drv_tcp_tx_done(s, t, status);
    while ((t = hc_drv_tcp_q_pop(&s->zcwait)))
        hc_drv_tcp_tx_done(s, t, status);
    while ((t = hc_drv_tcp_q_pop(&s->inflight)))
        hc_drv_tcp_tx_done(s, t, status);
    s->q_bytes = s->q_copy = 0;
}

void hc_drv_tcp_txq_forget(hc_tcp_slot_t *s)
{
    hc_tcp_tx_t *t;
    while ((t = hc_drv_tcp_q_pop(&s->unacked)))
        hc_drv_tcp_tx_put(s->conn->drv, t);
    while ((t = hc_drv_tcp_q_pop(&s->txq)))
        hc_drv_tcp_tx_put(s->conn->drv, t);
    while ((t = hc_drv_tcp_q_pop(&s->zcwait)))
        hc_drv_tcp_tx_put(s->conn->drv, t);
    while ((t = hc_drv_tcp_q_pop(&s->inflight)))
        hc_drv_tcp_tx_put(s->conn->drv, t);
    s->q_bytes = s->q_copy = 0;
}

void hc_drv_tcp_unacked_done(hc_tcp_slot_t *s)
{
    hc_tcp_tx_t *t;
    while ((t = hc_drv_tcp_q_pop(&s->unacked))) {
        s->q_bytes -= hc_drv_tcp_tx_total(s->conn->drv, t);
        if (t->heap) s->q_copy -= t->hdr.len;
        hc_drv_tcp_tx_done(s, t, HCOMM_OK);
    }
}

void hc_drv_tcp_unacked_rewind(hc_tcp_slot_t *s)
{
    if (s->conn->drv->nrails > 1) {
        hc_drv_tcp_rail_requeue(s, s); /* rails: written, unacknowledged frames go again */
        return;
    }
    if (s->txq.head) s->txq.head->off = 0; /* half written on the dropped socket */
    if (!s->unacked.head) return;
    for (hc_tcp_tx_t *t = s->unacked.head; t; t = t->next)
        t->off = 0;
    s->unacked.tail->next = s->txq.head;
    if (!s->txq.head) s->txq.tail = s->unacked.tail;
    s->txq.head = s->unacked.head;
    s->unacked.head = s->unacked.tail = NULL;
}

void hc_drv_tcp_flush_mark(hc_tcp_slot_t *s)
{
    if (s->want_write) return;
    hc_tcp_drv_t *d = s->conn->drv;
    s->want_write = true;
    s->flush_next = d->flush;
    d->flush = s;
}

/* ---- sending ------------------------------------------------------------------ */

/* The socket of a frame: hc_drv_tcp_pick (tcp.h). A lane maps to one
 * socket index for the driver's life (nsocks is fixed at open), and a
 * socket is written in put order, which keeps each lane in order. */

/* A core frame was accepted for socket s. */
static inline void hc_drv_tcp_count_tx(hc_tcp_drv_t *d, const hc_tcp_slot_t *s,
                                       const hc_frame_hdr_t *h)
{
    hc_tcp_sock_stats_t *st = &d->sock[s->idx];
    st->tx_frames++;
    st->tx_bytes += HC_TCP_HDR + h->len;
    st->tx_lanes |= 1u << (h->lane & (HC_FRAME_LANES - 1));
}

/* Bytes n of the queue went out: retire what is complete. */
static int hc_drv_tcp_advance(hc_tcp_slot_t *s, size_t n)
{
    int done = 0;
    hc_tcp_drv_t *d = s->conn->drv;
    while (n > 0 && s->txq.head) {
        hc_tcp_tx_t *t = s->txq.head;
        size_t total = hc_drv_tcp_tx_total(d, t), take = HC_MIN(n, total - t->off);
        t->off += take;
        n -= take;
        if (t->off < total) break;
        hc_drv_tcp_q_pop(&s->txq);
        if (HC_UNLIKELY(d->pre)) {
            hc_drv_tcp_rail_written(s, t); /* kept until the peer's ACK */
            done++;
            continue;
        }
        if (HC_UNLIKELY(s->state != HC_TCP_S_UP)) {
            /* Written before the verdict: kept (and counted) until it. */
            hc_drv_tcp_q_push(&s->unacked, t);
            continue;
        }
        s->q_bytes -= total;
        if (t->heap) s->q_copy -= t->hdr.len;
        if (t->zc_left)
            hc_drv_tcp_q_push(&s->zcwait, t);
        else
            hc_drv_tcp_tx_done(s, t, HCOMM_OK);
        done++;
    }
    return done;
}

static void hc_drv_tcp_zc_used(hc_tcp_slot_t *s, hc_tcp_tx_t *t)
{
    if (t->zc_ids == 0) t->zc_lo = s->zc_next;
    t->zc_ids++;
    t->zc_left++;
    s->zc_next++;
}

/* Writes what the queue holds, on an up socket or (frames kept until the
 * verdict, no zero copy) one whose hello went out. A hard error is left in
 * s->err: flush fails the peer, put leaves it to progress. */
int hc_drv_tcp_write(hc_tcp_slot_t *s)
{
    hc_tcp_conn_t *c = s->conn;
    const size_t hl = c->drv->pre + HC_TCP_HDR; /* header bytes: the rail header, if any, first */
    if (s->err || s->wr_shut || (s->state != HC_TCP_S_UP && s->state != HC_TCP_S_HELLO_SENT))
        return 0;
    /* Rails: a probe of a rail that was left carries nothing before its
     * verdict (its frames may move to another rail meanwhile). */
    if (HC_UNLIKELY(c->drv->pre) && s->state != HC_TCP_S_UP &&
        !c->rail[s->idx / HC_TCP_RAIL_STRIDE].up)
        return 0;
    bool zc_ok = s->zc_on && s->state == HC_TCP_S_UP;
    int done = 0;
    while (s->txq.head) {
        struct iovec iov[HC_TCP_IOV];
        int niov = 0;
        size_t bytes = 0;
        hc_tcp_tx_t *t = s->txq.head;
        bool zc = t->zc && zc_ok;
        for (hc_tcp_tx_t *u = t; u && niov < HC_TCP_IOV - 1 && bytes < HC_TCP_BATCH_BYTES;
             u = u->next) {
            if (u != t && (zc || (u->zc && zc_ok)))
                break; /* a zerocopy frame goes alone: its ids must be its own */
            if (HC_UNLIKELY(c->hold) && u->hdr.type < HC_FRAME_DRIVER)
                break; /* an idle-close handshake is in flight: core frames wait */
            if (u->off < hl) {
                uint8_t *h0 = (uint8_t *)&u->hdr - (hl - HC_TCP_HDR);
                iov[niov++] = (struct iovec){h0 + u->off, hl - u->off};
                bytes += hl - u->off;
            }
            size_t poff = u->off > hl ? u->off - hl : 0;
            if (u->hdr.len > poff) {
                iov[niov++] = (struct iovec){(void *)(u->payload + poff), u->hdr.len - poff};
                bytes += u->hdr.len - poff;
            }
        }
        if (niov == 0) break;
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
        ssize_t n = sendmsg(s->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT | (zc ? MSG_ZEROCOPY : 0));
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == ENOBUFS && zc) {
                t->zc = false; /* optmem exhausted: this one goes by copy */
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (s->state == HC_TCP_S_HELLO_SENT) {
                /* A socket that lost the tie-break is closed unread; the
                 * verdict that says so is in our receive buffer: it, not
                 * this error, decides (what this socket carried goes again). */
                s->wr_shut = true;
                break;
            }
            s->err = errno;
            break;
        }
        if (zc) hc_drv_tcp_zc_used(s, t);
        c->last_tx_ns = s->last_wr_ns = hc_time_ns();
        done += hc_drv_tcp_advance(s, (size_t)n);
        if ((size_t)n < bytes) break;
    }
    return done;
}

int hc_drv_tcp_flush(hc_tcp_slot_t *s)
{
    hc_tcp_conn_t *c = s->conn;
    int done = hc_drv_tcp_write(s);
    if (HC_UNLIKELY(s->err))
        hc_drv_tcp_sock_lost(s, false, "writing to %s failed: %s", c->name, strerror(s->err));
    return done;
}

/* What a sendmsg of a whole frame left to queue: the bytes it wrote (0 when
 * none). ENOBUFS on a zero-copy send turns the frame into a copied one;
 * a hard error is left in s->err, for progress to fail the peer. */
static size_t hc_drv_tcp_sent(hc_tcp_slot_t *s, ssize_t n, bool *zc)
{
    if (n > 0) {
        s->conn->last_tx_ns = s->last_wr_ns = hc_time_ns();
        return (size_t)n;
    }
    if (n < 0 && errno == ENOBUFS && *zc) {
        *zc = false; /* optmem exhausted: queued, goes by copy */
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        s->err = errno; /* failed by progress, not inside the caller's put */
        hc_drv_tcp_flush_mark(s);
    }
    return 0;
}

/* The payload into queue entry t: by reference when the caller gave a
 * cookie (put_done releases it), else copied; false without memory. */
bool hc_drv_tcp_tx_keep(hc_tcp_slot_t *s, hc_tcp_tx_t *t, const void *payload, size_t len,
                        void *cookie)
{
    if (cookie) {
        t->payload = payload;
        t->inprog = true;
    } else if (len <= HC_TCP_INLINE) {
        if (len) memcpy(t->inline_buf, payload, len);
        t->payload = t->inline_buf;
    } else {
        t->heap = malloc(len);
        if (!t->heap) return false;
        memcpy(t->heap, payload, len);
        t->payload = t->heap;
        s->q_copy += len;
    }
    return true;
}

/* A frame not written whole at once (sent bytes of it were) queued on s in
 * a new entry (or t, holding a zero-copy send's header), or refused with
 * ERR_AGAIN when nothing was written and the queue is full or the payload
 * cannot be kept. held: an idle-close handshake holds the frame back. */
static HC_NOINLINE hcomm_status_t hc_drv_tcp_put_queue(hc_tcp_slot_t *s, const hc_frame_hdr_t *hdr,
                                                       const void *payload, void *cookie,
                                                       hc_tcp_tx_t *t, size_t sent, bool zc,
                                                       bool held)
{
    hc_tcp_conn_t *c = s->conn;
    hc_tcp_drv_t *d = c->drv;
    size_t len = hdr->len, total = HC_TCP_HDR + len;
    bool core = hdr->type < HC_FRAME_DRIVER;
    if (sent == 0) {
        /* Without a cookie the payload cannot be kept: small ones are
         * copied into the entry, larger ones refused (the core queues). */
        bool refuse = !cookie && len > HC_TCP_INLINE;
        refuse |= s->txq.head && s->q_bytes + total > HC_TCP_QUEUE_BYTES && core;
        refuse |= !cookie && len > HC_TCP_INLINE && s->q_copy + len > HC_TCP_QUEUE_COPY;
        if (refuse) {
            if (t) hc_drv_tcp_tx_put(d, t);
            return HCOMM_ERR_AGAIN;
        }
    }
    if (!t) t = hc_drv_tcp_tx_get(d);
    if (!t || !hc_drv_tcp_tx_keep(s, t, payload, len, cookie)) {
        if (t) hc_drv_tcp_tx_put(d, t);
        if (sent) {
            s->err = ENOMEM; /* half a frame is on the wire: the stream is lost */
            hc_drv_tcp_flush_mark(s);
        }
        return t ? hc_error(HCOMM_ERR_NO_MEMORY, "tcp put to %s: %zu-byte copy", c->name, len)
                 : hc_error(HCOMM_ERR_NO_MEMORY, "tcp put to %s: queue entry", c->name);
    }
    if (hdr != &t->hdr) t->hdr = *hdr;
    t->off = sent;
    t->cookie = cookie;
    t->zc = zc;
    if (zc && sent) hc_drv_tcp_zc_used(s, t);
    s->q_bytes += total;
    c->n_tx += core;
    if (core) hc_drv_tcp_count_tx(d, s, &t->hdr);
    if (sent == total) {
        hc_drv_tcp_q_push(&s->zcwait, t); /* all written with MSG_ZEROCOPY */
        return HCOMM_IN_PROGRESS;
    }
    hc_drv_tcp_q_push(&s->txq, t);
    hc_drv_tcp_flush_mark(s);
    bool inprog = t->inprog;
    /* A socket whose hello went out takes the frame now, before the
     * verdict: the caller may compute before it calls hcomm again. */
    if (s->state == HC_TCP_S_HELLO_SENT && !held) hc_drv_tcp_write(s);
    return inprog ? HCOMM_IN_PROGRESS : HCOMM_OK;
}

/* put's cases other than a copied frame written whole at once: a zero-copy
 * send (its header must outlive the call), a socket to open, a queue. */
static HC_NOINLINE hcomm_status_t hc_drv_tcp_put_slow(hc_tcp_slot_t *s, const hc_frame_hdr_t *hdr,
                                                      const void *payload, void *cookie, bool zc,
                                                      bool held)
{
    hc_tcp_conn_t *c = s->conn;
    size_t sent = 0;
    hc_tcp_tx_t *t = NULL;
    if (s->state == HC_TCP_S_UP && !s->txq.head && !s->err && !held) {
        /* Zero copy: the kernel reads the header after we return: it must
         * live in the entry, not in the caller's (reused) header. */
        if (!(t = hc_drv_tcp_tx_get(c->drv)))
            return hc_error(HCOMM_ERR_NO_MEMORY, "tcp put to %s: queue entry", c->name);
        t->hdr = *hdr;
        hdr = &t->hdr;
        struct iovec iov[2] = {{(void *)hdr, HC_TCP_HDR}, {(void *)payload, hdr->len}};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = hdr->len ? 2 : 1};
        ssize_t n = sendmsg(s->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT | (zc ? MSG_ZEROCOPY : 0));
        sent = hc_drv_tcp_sent(s, n, &zc);
    } else if (s->state == HC_TCP_S_NONE && !held) {
        hcomm_status_t st = hc_drv_tcp_slot_start(c, s->idx);
        if (st != HCOMM_OK) return st;
    }
    return hc_drv_tcp_put_queue(s, hdr, payload, cookie, t, sent, zc, held);
}

hcomm_status_t hc_drv_tcp_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
                              void *cookie)
{
    hc_tcp_conn_t *c = (hc_tcp_conn_t *)conn;
    hc_tcp_drv_t *d = c->drv;
    if (HC_UNLIKELY(c->failed))
        return hc_error(HCOMM_ERR_PEER_FAILED, "tcp: connection to %s failed", c->name);
    size_t len = hdr->len, total = HC_TCP_HDR + len;
    if (HC_UNLIKELY(len > HC_TCP_MAX_FRAME))
        return hc_error(HCOMM_ERR_INVALID, "tcp put: frame of %zu bytes exceeds max_frame %u", len,
                        HC_TCP_MAX_FRAME);
    if (HC_UNLIKELY(d->pre)) return hc_drv_tcp_rail_put(c, hdr, payload, cookie);
    hc_tcp_slot_t *s = &c->slots[hc_drv_tcp_pick(c, d, hdr)];
    bool zc = cookie && len > d->zc_threshold && s->zc_on;
    bool core = hdr->type < HC_FRAME_DRIVER;
    bool held = c->hold && core; /* queued until the idle-close handshake ends */
    if (HC_UNLIKELY(zc || s->state != HC_TCP_S_UP || s->txq.head || s->err || held))
        return hc_drv_tcp_put_slow(s, hdr, payload, cookie, zc, held);
    /* The common case: the socket is up and idle, the frame goes whole. */
    struct iovec iov[2] = {{(void *)hdr, HC_TCP_HDR}, {(void *)payload, len}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
    ssize_t n = sendmsg(s->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (HC_UNLIKELY(n != (ssize_t)total))
        return hc_drv_tcp_put_queue(s, hdr, payload, cookie, NULL, hc_drv_tcp_sent(s, n, &zc),
                                    false, false);
    c->last_tx_ns = s->last_wr_ns = hc_time_ns();
    c->n_tx += core;
    if (core) hc_drv_tcp_count_tx(d, s, hdr);
    return HCOMM_OK;
}

void hc_drv_tcp_ctrl(hc_tcp_conn_t *c, uint8_t type, uint8_t flags, uint64_t a, uint64_t b)
{
    hc_frame_hdr_t h = {.type = type, .flags = flags, .a = a, .b = b};
    hcomm_status_t st = hc_drv_tcp_put(&c->base, &h, NULL, NULL);
    if (st != HCOMM_OK)
        hc_log_debug("tcp: control frame %u to %s: %s", type, c->name, hcomm_strerror(st));
}

/* ---- zerocopy completions -------------------------------------------------------- */

static void hc_drv_tcp_zc_range(hc_tcp_slot_t *s, hc_tcp_tx_t *t, uint32_t lo, uint32_t hi)
{
    if (!t || !t->zc_left) return;
    int64_t a = (int32_t)(t->zc_lo - lo), b = a + t->zc_ids - 1, span = (int64_t)(hi - lo);
    int64_t from = HC_MAX(a, 0), to = HC_MIN(b, span);
    (void)s;
    if (to >= from) {
        uint32_t k = (uint32_t)(to - from + 1);
        t->zc_left -= HC_MIN(k, t->zc_left);
    }
}

int hc_drv_tcp_zc_reap(hc_tcp_slot_t *s)
{
    int done = 0;
    for (int k = 0; k < 64; k++) {
        char ctrl[128];
        struct msghdr m = {.msg_control = ctrl, .msg_controllen = sizeof(ctrl)};
        if (recvmsg(s->fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) break;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
            if (!((cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR) ||
                  (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR)))
                continue;
            struct sock_extended_err ee;
            memcpy(&ee, CMSG_DATA(cm), sizeof(ee));
            if (ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY || ee.ee_errno != 0) continue;
            uint32_t lo = ee.ee_info, hi = ee.ee_data, nids = hi - lo + 1;
            if (ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
                s->zc_copied += nids;
            else
                s->zc_real += nids;
            hc_drv_tcp_zc_range(s, s->txq.head, lo, hi);
            for (hc_tcp_tx_t *t = s->zcwait.head; t; t = t->next)
                hc_drv_tcp_zc_range(s, t, lo, hi);
        }
    }
    /* Completions may retire frames out of order; each has its own cookie. */
    hc_tcp_tx_t **pp = &s->zcwait.head, *prev = NULL;
    while (*pp) {
        hc_tcp_tx_t *t = *pp;
        if (t->zc_left) {
            prev = t;
            pp = &t->next;
            continue;
        }
        *pp = t->next;
        if (s->zcwait.tail == t) s->zcwait.tail = prev;
        s->q_bytes -= hc_drv_tcp_tx_total(s->conn->drv, t);
        hc_drv_tcp_tx_done(s, t, HCOMM_OK);
        done++;
    }
    if (s->zc_on && s->zc_copied >= HC_TCP_ZC_GIVE_UP && s->zc_real == 0) {
        s->zc_on = false;
        hc_log_info("tcp: the kernel copies MSG_ZEROCOPY sends to %s (socket %d): plain sends "
                    "from now on",
                    s->conn->name, s->idx);
    }
    return done;
}

static int hc_drv_tcp_slot_event(hc_tcp_slot_t *s, uint32_t ev)
{
    if (s->fd < 0) return 0; /* closed earlier in this batch */
    if (s->state == HC_TCP_S_CONNECTING || s->state == HC_TCP_S_HELLO_SENT) {
        hc_drv_tcp_slot_handshake(s, ev);
        return 1;
    }
    if (s->state != HC_TCP_S_UP) return 0;
    int n = 0;
    if (ev & EPOLLERR) {
        n += hc_drv_tcp_zc_reap(s);
        int err = 0;
        socklen_t el = sizeof(err);
        if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err) {
            hc_tcp_conn_t *c = s->conn;
            if (hc_drv_tcp_idle_eof(s))
                ;
            else if (c->bye || c->drv->closing)
                hc_drv_tcp_slot_close(s, HCOMM_ERR_PEER_FAILED);
            else
                hc_drv_tcp_sock_lost(s, false, "connection to %s broke: %s", c->name,
                                     strerror(err));
            return n + 1;
        }
    }
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) n += hc_drv_tcp_read(s);
    return n;
}

/* ---- timers ------------------------------------------------------------------------- */

static void hc_drv_tcp_timers(hc_tcp_drv_t *d, uint64_t now)
{
    hc_drv_tcp_anon_expire(d, now);
    for (hc_tcp_conn_t *c = d->active; c; c = c->active_next) {
        if (c->failed || c->bye) continue;
        for (int i = 0; i < HC_TCP_MAX_SOCKS && !c->failed; i++) {
            hc_tcp_slot_t *s = &c->slots[i];
            if (s->state != HC_TCP_S_NONE && s->state != HC_TCP_S_UP && now > s->hs_deadline)
                hc_drv_tcp_sock_lost(s, false,
                                     "socket %d to %s not established within %.0f s "
                                     "(HCOMM_TIMEOUT; %s)",
                                     i, c->name, (double)d->hs_ns * 1e-9,
                                     s->state == HC_TCP_S_CONNECTING ? "connecting"
                                     : s->state == HC_TCP_S_WAIT     ? "waiting for its connect"
                                                                     : "no verdict");
        }
        if (c->failed) continue;
        if (HC_UNLIKELY(d->pre)) {
            hc_drv_tcp_rail_timer(c, now); /* rails: per-rail liveness, probes, heartbeats */
            continue;
        }
        hc_drv_tcp_idle_timer(c, now);
        hc_tcp_slot_t *s0 = &c->slots[0];
        if (c->failed || s0->state != HC_TCP_S_UP) continue;
        uint64_t silent = now - c->last_rx_ns;
        if (silent > d->fail_ns) {
            hc_drv_tcp_conn_fail(c, "%s silent for %.1f s (HCOMM_CONN_FAIL_TIMEOUT)", c->name,
                                 (double)silent * 1e-9);
            continue;
        }
        if (silent > d->suspect_ns) {
            if (!c->suspect) {
                c->suspect = true;
                d->n_suspects++;
                hc_log_info("tcp: %s silent for %.1f s: suspect, probing", c->name,
                            (double)silent * 1e-9);
            }
            if (now - c->last_probe_ns >= d->hb_period_ns) {
                c->last_probe_ns = now;
                d->n_hb_probes++;
                hc_drv_tcp_ctrl(c, HC_TCP_FRAME_HB, HC_TCP_HB_ECHO, 0, 0);
            }
        } else if (now - c->last_tx_ns >= d->hb_period_ns && !s0->txq.head) {
            d->n_hb_sent++;
            hc_drv_tcp_ctrl(c, HC_TCP_FRAME_HB, 0, 0, 0);
        }
    }
    /* After the liveness checks: a read here stamps times past now. */
    for (hc_tcp_conn_t *c = d->active; c; c = c->active_next)
        if (!c->failed && !c->bye) hc_drv_tcp_watch(c, now);
}

/* ---- progress ------------------------------------------------------------------------ */

/* We did not call progress for gap ns (the caller computed, or waited on
 * something else): what the peers said meanwhile waits unread, so that time
 * counts neither as their silence nor against their handshakes. */
static void hc_drv_tcp_resume(hc_tcp_drv_t *d, uint64_t gap, uint64_t now)
{
    for (hc_tcp_conn_t *c = d->active; c; c = c->active_next) {
        c->last_rx_ns = HC_MIN(c->last_rx_ns + gap, now);
        for (int i = 0; i < HC_TCP_MAX_SOCKS; i++)
            c->slots[i].hs_deadline += gap;
    }
    for (hc_tcp_anon_t *a = d->anon; a; a = a->next)
        if (a->deadline) a->deadline += gap;
}

static inline bool hc_drv_tcp_writes(const hc_tcp_slot_t *s)
{
    return s->state == HC_TCP_S_UP || s->state == HC_TCP_S_HELLO_SENT;
}

int hc_drv_tcp_progress(hc_drv_t *drv)
{
    hc_tcp_drv_t *d = (hc_tcp_drv_t *)drv;
    int n = 0;
    bool evented = false;
    d->calls++;
    if (d->idle_polls < 4096 || d->flush || (d->calls & 15) == 0) {
        struct epoll_event ev[64];
        int k = epoll_wait(d->epfd, ev, 64, 0);
        if (k > 0) {
            d->idle_polls = 0;
            evented = true;
            for (int i = 0; i < k; i++) {
                int obj = *(int *)ev[i].data.ptr;
                if (obj == HC_TCP_OBJ_SLOT)
                    n += hc_drv_tcp_slot_event(ev[i].data.ptr, ev[i].events);
                else if (obj == HC_TCP_OBJ_ANON)
                    hc_drv_tcp_anon_readable(d, ev[i].data.ptr);
                else
                    hc_drv_tcp_accept(d, ev[i].data.ptr);
            }
        } else {
            d->idle_polls++;
        }
    }
    for (hc_tcp_slot_t **pp = &d->flush; *pp;) {
        hc_tcp_slot_t *s = *pp;
        if (HC_UNLIKELY(s->state == HC_TCP_S_NONE && s->txq.head)) hc_drv_tcp_idle_reopen(s);
        if (s->err || (hc_drv_tcp_writes(s) && s->txq.head)) n += hc_drv_tcp_flush(s);
        if (hc_drv_tcp_writes(s) && s->txq.head && !s->err &&
            !(s->conn->hold && s->txq.head->hdr.type < HC_FRAME_DRIVER)) {
            pp = &s->flush_next;
        } else {
            /* drained, not writable or held: the hello, slot_up or the end of the idle
             * close marks it again. The flush may have marked other slots (a
             * frame written completes a put, whose successor queues; a rail
             * left requeues): pushed at the head, they stand before s when s
             * was the head; unlinking by *pp alone would drop them. */
            while (*pp != s)
                pp = &(*pp)->flush_next;
            *pp = s->flush_next;
            s->want_write = false;
        }
    }
    uint64_t now = hc_time_ns();
    if (HC_UNLIKELY(now - d->last_poll_ns > HC_TCP_ABSENT_NS) && d->last_poll_ns)
        hc_drv_tcp_resume(d, now - d->last_poll_ns, now);
    d->last_poll_ns = now;
    if (evented) d->last_event_ns = now;
    if (HC_UNLIKELY(now >= d->next_timer_ns)) {
        d->next_timer_ns = now + HC_TCP_TIMER_NS;
        hc_drv_tcp_timers(d, now);
    }
    if (HC_UNLIKELY(d->ack_due)) hc_drv_tcp_rail_acks(d);
    return n;
}
