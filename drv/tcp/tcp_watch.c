/*
 * tcp driver, stalls: a watchdog for sockets whose bytes stopped moving, and
 * the hang report's account of each socket.
 *
 * The data path moves on readiness: a socket is read when epoll says it is
 * readable, written while it is on the flush list, and its zero-copy sends
 * retire when its error queue reports them. Each step has one trigger; a
 * lost one (a readiness event that never comes, a socket with queued frames
 * off the flush list, an unreaped completion) would hold a transfer until
 * HCOMM_TIMEOUT with both peers waiting on bytes that nobody moves. A CI
 * run saw that once and no rerun did: mp_tcp_p2p_2, both ranks' 64 MiB
 * sends stalled for 60 s with 16 MiB queued on the lane's socket and
 * nothing failed (heartbeats kept flowing on socket 0).
 *
 * So the timer looks at each connection at most every HC_TCP_WATCH_NS, at
 * a socket that is up and either holds frames that wrote nothing for that
 * long, or belongs to a driver whose epoll reported nothing for that long.
 * A socket that looks stalled at two looks in a row, with nothing moved on
 * it in between while progress ran, has its zero-copy completions reaped,
 * its queued frames put back on the flush list, and the bytes the kernel
 * holds for it (SIOCINQ) read. What it moved is counted (stall_kicks) and
 * logged at info; a socket that merely waits (the peer computes, its window
 * is closed) costs one ioctl per period and moves nothing. The hang report prints each
 * socket's queues and the kernel's counts (hc_drv_tcp_explain), so that a
 * stall shows which side holds the bytes.
 */
#include "drv/tcp/tcp.h"

#include <linux/sockios.h>
#include <stdio.h>
#include <sys/ioctl.h>

#define HC_TCP_WATCH_NS 200000000ull /* 200 ms */

/* Bytes the kernel holds for fd: unread (SIOCINQ) or not acknowledged by
 * the peer (SIOCOUTQ); -1 when it will not say. */
static int hc_tcp_kernel_bytes(int fd, unsigned long req)
{
    int v = 0;
    return fd >= 0 && ioctl(fd, req, &v) == 0 ? v : -1;
}

static void hc_tcp_queue_counts(const hc_tcp_txq_t *q, unsigned *frames, size_t *bytes,
                                const hc_tcp_drv_t *d)
{
    for (const hc_tcp_tx_t *t = q->head; t; t = t->next) {
        (*frames)++;
        *bytes += hc_drv_tcp_tx_total(d, t) - t->off;
    }
}

/* Socket s looks stalled: frames that wrote nothing for a period, or bytes
 * the kernel holds that were not read for a period while epoll reported
 * nothing at all (quiet). *inq: the unread bytes, when asked. */
static bool hc_tcp_looks_stalled(const hc_tcp_slot_t *s, uint64_t now, bool quiet, int *inq)
{
    *inq = 0;
    if ((s->txq.head || s->zcwait.head) && now - s->last_wr_ns >= HC_TCP_WATCH_NS) return true;
    if (!quiet || now - s->last_rd_ns < HC_TCP_WATCH_NS) return false;
    *inq = hc_tcp_kernel_bytes(s->fd, SIOCINQ);
    return *inq > 0;
}

/* A socket that looks stalled is marked; it is moved only if at the next
 * look it still does, nothing moved on it since the mark, and progress ran
 * meanwhile (HC_TCP_WATCH_CALLS passes: epoll was polled even while the
 * idle gate of hc_drv_tcp_progress lets it poll one pass in 16). The first
 * progress call after the application computed for a while finds bytes
 * unread for that long and may skip epoll: that is not a stall. */
#define HC_TCP_WATCH_CALLS 64u

void hc_drv_tcp_watch(hc_tcp_conn_t *c, uint64_t now)
{
    hc_tcp_drv_t *d = c->drv;
    if (now - c->watch_ns < HC_TCP_WATCH_NS) return;
    c->watch_ns = now;
    bool quiet = now - d->last_event_ns >= HC_TCP_WATCH_NS;
    for (int i = 0; i < HC_TCP_MAX_SOCKS && !c->failed; i++) {
        hc_tcp_slot_t *s = &c->slots[i];
        if (s->state != HC_TCP_S_UP || s->fd < 0) continue;
        int inq;
        if (!hc_tcp_looks_stalled(s, now, quiet, &inq)) {
            s->watch_mark_ns = 0;
            continue;
        }
        bool moved = s->last_rd_ns >= s->watch_mark_ns || s->last_wr_ns >= s->watch_mark_ns;
        if (!s->watch_mark_ns || moved) {
            s->watch_mark_ns = now;
            s->watch_mark_calls = d->calls;
            continue;
        }
        if (d->calls - s->watch_mark_calls < HC_TCP_WATCH_CALLS) continue;
        s->watch_mark_ns = 0;
        char what[160];
        int len = 0, reaped = 0;
        what[0] = '\0';
        double unread_s = (double)(now - s->last_rd_ns) * 1e-9;
        if (s->zcwait.head && (reaped = hc_drv_tcp_zc_reap(s)) > 0)
            len += snprintf(what + len, sizeof(what) - (size_t)len,
                            "%s%d zero-copy sends' completions unreaped", len ? ", " : "",
                            reaped);
        if (s->txq.head && !s->want_write && !c->hold && !s->err) {
            hc_drv_tcp_flush_mark(s);
            len += snprintf(what + len, sizeof(what) - (size_t)len,
                            "%squeued frames off the flush list", len ? ", " : "");
        }
        if (!inq && now - s->last_rd_ns >= HC_TCP_WATCH_NS)
            inq = hc_tcp_kernel_bytes(s->fd, SIOCINQ);
        if (inq > 0) {
            (void)hc_drv_tcp_read(s);
            len += snprintf(what + len, sizeof(what) - (size_t)len,
                            "%s%d bytes unread for %.1f s with no readiness event", len ? ", " : "",
                            inq, unread_s);
        }
        if (!what[0]) continue;
        d->n_stall_kicks++;
        hc_log_info("tcp: socket %d to %s stalled: %s; moved by the watchdog (%llu so far)", i,
                    c->name, what, (unsigned long long)d->n_stall_kicks);
    }
}

static const char *hc_tcp_state_name(int state)
{
    switch (state) {
    case HC_TCP_S_NONE: return "closed";
    case HC_TCP_S_CONNECTING: return "connecting";
    case HC_TCP_S_HELLO_SENT: return "hello sent";
    case HC_TCP_S_WAIT: return "waiting for the peer's connect";
    default: return "up";
    }
}

static double hc_tcp_ago(uint64_t now, uint64_t t)
{
    return t ? (double)(now - t) * 1e-9 : -1.0;
}

void hc_drv_tcp_explain(hc_conn_t *conn, char *buf, size_t len)
{
    hc_tcp_conn_t *c = (hc_tcp_conn_t *)conn;
    const hc_tcp_drv_t *d = c->drv;
    uint64_t now = hc_time_ns();
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < HC_TCP_MAX_SOCKS && off + 1 < len; i++) {
        const hc_tcp_slot_t *s = &c->slots[i];
        unsigned q = 0, zc = 0, fl = 0;
        size_t qb = 0, zb = 0, fb = 0;
        hc_tcp_queue_counts(&s->txq, &q, &qb, d);
        hc_tcp_queue_counts(&s->zcwait, &zc, &zb, d);
        hc_tcp_queue_counts(&s->inflight, &fl, &fb, d);
        int inq = hc_tcp_kernel_bytes(s->fd, SIOCINQ), outq = hc_tcp_kernel_bytes(s->fd, SIOCOUTQ),
            unsent = hc_tcp_kernel_bytes(s->fd, SIOCOUTQNSD);
        if (!q && !zc && !fl && inq <= 0 && outq <= 0) continue; /* nothing held here */
        int n = snprintf(buf + off, len - off, "%ssocket %d %s: %u frames queued (%zu bytes)%s",
                         off ? "; " : "", i, hc_tcp_state_name(s->state), q, qb,
                         q && !s->want_write && !c->hold ? " off the flush list" : "");
        if (n > 0) off = HC_MIN(len - 1, off + (size_t)n);
        if (zc)
            off += (size_t)snprintf(buf + off, len - off, ", %u owed a zero-copy completion", zc);
        if (off + 1 < len && fl)
            off += (size_t)snprintf(buf + off, len - off, ", %u not acknowledged", fl);
        if (off + 1 < len)
            off += (size_t)snprintf(buf + off, len - off,
                                    ", kernel: %d bytes unacknowledged (%d of them unsent), %d "
                                    "unread; last write %.1f s, last read %.1f s ago (-1: never)",
                                    outq, unsent, inq, hc_tcp_ago(now, s->last_wr_ns),
                                    hc_tcp_ago(now, s->last_rd_ns));
        off = HC_MIN(off, len - 1);
    }
    if (off + 1 < len && d->n_stall_kicks)
        snprintf(buf + off, len - off, "%sthe watchdog moved %llu stalled sockets",
                 off ? "; " : "", (unsigned long long)d->n_stall_kicks);
}
