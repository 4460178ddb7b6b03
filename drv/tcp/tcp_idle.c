/*
 * tcp driver, idle connections: a peer's sockets are closed after
 * HCOMM_CONN_IDLE_TIMEOUT seconds without traffic and reopened by the next
 * put, through the same lazy path that opened them.
 *
 * Traffic means core frames (EAGER, RTS, CTS, DATA, ...), counted on both
 * sides: n_tx when put accepts one, n_rx when one is delivered. Heartbeats do
 * not count, so two ranks that only exchange heartbeats go idle. The timer
 * notices a change of the counters (no cost on the data path beyond the
 * increments) and, once they have not moved for the timeout and nothing is
 * queued, half-read or in a handshake, asks the peer to close:
 *
 *   closer                               responder
 *   CLOSE {a = n_tx, b = n_rx}  ---->    agrees when a == its n_rx (it got
 *   (hold: core frames queue,            every frame we sent), b == its n_tx
 *    are not written)                    (we got all of its frames) and it
 *                                        has nothing queued; else CLOSE_NO
 *                               <----    CLOSE_OK, then holds its own frames
 *   closes every socket                  each socket's EOF retires it; after
 *   reconnects if frames wait            the last one, reconnects if frames wait
 *
 * Nothing core crosses the handshake: both sides hold core frames from the
 * moment they commit until their sockets are gone, and the counters prove
 * that everything sent before was received, so the per-connection order the
 * core relies on (EAGER/RTS/CTS/FIN) spans the close and the reopen. The
 * responder never closes first: a socket closed with unread bytes resets, and
 * its last bytes (CLOSE_OK) must arrive. When both sides ask at once, the
 * lower rank's request stands and the higher rank withdraws its own.
 *
 * An idle-closed peer is neither suspect nor failed: it has no sockets, so no
 * heartbeat is expected; its liveness is the core's business (pidfd for local
 * ranks, the bootstrap connection otherwise). Reopening runs the full
 * handshake, which checks both instance ids recorded at wireup: a peer that
 * restarted at the same address is failed, never written to.
 */
#include "drv/tcp/tcp.h"

#include <stdlib.h>

/* ACKED, socket 0 gone: the closer closes all at once, so the others' EOF is
 * due; after this long we stop waiting for it. */
#define HC_TCP_IDLE_LINGER_NS (5ull * 1000000000ull)

/* Nothing in flight: every socket up or absent, no frame queued or owed a
 * zerocopy completion, no write error; with rbuf, no partial frame read. */
static bool hc_drv_tcp_idle_quiet(const hc_tcp_conn_t *c, bool rbuf)
{
    if (c->slots[0].state != HC_TCP_S_UP) return false;
    for (int i = 0; i < HC_TCP_MAX_SOCKS; i++) {
        const hc_tcp_slot_t *s = &c->slots[i];
        if (s->txq.head || s->zcwait.head || s->err) return false;
        if (s->state != HC_TCP_S_UP && s->state != HC_TCP_S_NONE) return false;
        if (rbuf && s->rstart != s->rend) return false;
    }
    return true;
}

/* The socket goes, its queue stays: frames held during the handshake were
 * never written and go on the next socket. */
static void hc_drv_tcp_slot_retire(hc_tcp_slot_t *s)
{
    hc_drv_tcp_slot_drop_fd(s);
    free(s->rbuf);
    s->rbuf = NULL;
    s->rstart = s->rend = s->rcap = 0;
    s->state = HC_TCP_S_NONE;
    s->err = 0;
    s->zc_next = 0; /* a new socket numbers its zerocopy sends from 0 */
    s->zc_copied = s->zc_real = 0;
}

/* Handshake over (withdrawn, refused or done): held frames may go. Slots
 * without a socket are reopened by progress (never from inside a parse). */
static void hc_drv_tcp_idle_release(hc_tcp_conn_t *c)
{
    c->hold = false;
    c->idle_state = HC_TCP_IDLE_NONE;
    c->idle_mask = 0;
    for (int i = 0; i < HC_TCP_MAX_SOCKS; i++)
        if (c->slots[i].txq.head) hc_drv_tcp_flush_mark(&c->slots[i]);
}

static void hc_drv_tcp_idle_done(hc_tcp_conn_t *c, const char *who)
{
    hc_tcp_drv_t *d = c->drv;
    uint64_t now = hc_time_ns();
    d->idle_closed++;
    hc_log_info("tcp: %s idle-closed after %.1f s without traffic (%s; %llu so far)", c->name,
                (double)(now - c->last_act_ns) * 1e-9, who, (unsigned long long)d->idle_closed);
    c->suspect = false;
    c->last_act_ns = now;
    hc_drv_tcp_idle_release(c);
}

void hc_drv_tcp_idle_reopen(hc_tcp_slot_t *s)
{
    hc_tcp_conn_t *c = s->conn;
    if (c->hold || c->failed || c->drv->closing) return;
    if (c->drv->pre && !c->rail[s->idx / HC_TCP_RAIL_STRIDE].up) return; /* the probe reopens */
    hc_log_debug("tcp: reopening socket %d to %s after an idle close", s->idx, c->name);
    if (hc_drv_tcp_slot_start(c, s->idx) != HCOMM_OK)
        hc_drv_tcp_conn_fail(c, "cannot reopen socket %d to %s: %s", s->idx, c->name,
                             hc_error_last());
}

bool hc_drv_tcp_idle_eof(hc_tcp_slot_t *s)
{
    hc_tcp_conn_t *c = s->conn;
    uint32_t bit = 1u << s->idx;
    if (!(c->idle_mask & bit)) return false;
    hc_drv_tcp_slot_retire(s);
    c->idle_mask &= ~bit;
    if (!c->idle_mask) hc_drv_tcp_idle_done(c, "the peer asked");
    return true;
}

void hc_drv_tcp_idle_timer(hc_tcp_conn_t *c, uint64_t now)
{
    hc_tcp_drv_t *d = c->drv;
    if (c->n_tx != c->seen_tx || c->n_rx != c->seen_rx) {
        c->seen_tx = c->n_tx;
        c->seen_rx = c->n_rx;
        c->last_act_ns = now;
    }
    if (c->idle_state == HC_TCP_IDLE_ACKED) {
        if (!(c->idle_mask & 1u) && now - c->idle_t_ns > HC_TCP_IDLE_LINGER_NS) {
            for (int i = 0; i < HC_TCP_MAX_SOCKS; i++)
                if (c->idle_mask & (1u << i)) hc_drv_tcp_slot_retire(&c->slots[i]);
            c->idle_mask = 0;
            hc_drv_tcp_idle_done(c, "the peer asked; some sockets did not close in time");
        }
        return;
    }
    if (!d->idle_ns || c->idle_state != HC_TCP_IDLE_NONE || c->suspect || c->bye) return;
    if (now - c->last_act_ns < d->idle_ns || !hc_drv_tcp_idle_quiet(c, true)) return;
    hc_frame_hdr_t h = {.type = HC_TCP_FRAME_CLOSE, .a = c->n_tx, .b = c->n_rx};
    if (hc_drv_tcp_put(&c->base, &h, NULL, NULL) != HCOMM_OK) return;
    c->idle_state = HC_TCP_IDLE_CLOSE_SENT;
    c->hold = true;
    c->idle_t_ns = now;
    hc_log_debug("tcp: %s idle for %.1f s: asking to close (sent %llu, received %llu)", c->name,
                 (double)(now - c->last_act_ns) * 1e-9, (unsigned long long)c->n_tx,
                 (unsigned long long)c->n_rx);
}

static void hc_drv_tcp_idle_answer(hc_tcp_conn_t *c, const hc_frame_hdr_t *h)
{
    hc_tcp_drv_t *d = c->drv;
    if (c->idle_state == HC_TCP_IDLE_CLOSE_SENT) {
        if (d->env->rank < c->base.peer) return; /* ours stands; the peer withdraws its own */
        hc_drv_tcp_idle_release(c);              /* theirs stands: withdraw ours */
    } else if (c->idle_state == HC_TCP_IDLE_ACKED) {
        hc_log_debug("tcp: %s asked to close twice", c->name);
        return;
    }
    /* The closer sent nothing core since CLOSE, so its counts are final. */
    bool ok = h->a == c->n_rx && h->b == c->n_tx && !c->bye && hc_drv_tcp_idle_quiet(c, false);
    hc_frame_hdr_t r = {.type = ok ? HC_TCP_FRAME_CLOSE_OK : HC_TCP_FRAME_CLOSE_NO};
    if (hc_drv_tcp_put(&c->base, &r, NULL, NULL) != HCOMM_OK || !ok) {
        hc_log_debug("tcp: %s asked to close: refused (it sent %llu, we got %llu; it got %llu, "
                     "we sent %llu)",
                     c->name, (unsigned long long)h->a, (unsigned long long)c->n_rx,
                     (unsigned long long)h->b, (unsigned long long)c->n_tx);
        return;
    }
    c->idle_state = HC_TCP_IDLE_ACKED;
    c->hold = true;
    c->idle_t_ns = hc_time_ns();
    c->idle_mask = 0;
    for (int i = 0; i < HC_TCP_MAX_SOCKS; i++)
        if (c->slots[i].fd >= 0) c->idle_mask |= 1u << i;
}

void hc_drv_tcp_idle_frame(hc_tcp_conn_t *c, const hc_frame_hdr_t *h)
{
    switch (h->type) {
    case HC_TCP_FRAME_CLOSE:
        hc_drv_tcp_idle_answer(c, h);
        return;
    case HC_TCP_FRAME_CLOSE_OK:
        if (c->idle_state != HC_TCP_IDLE_CLOSE_SENT) break;
        /* Called from the parse of socket 0: it sees fd < 0 and stops. */
        for (int i = 0; i < HC_TCP_MAX_SOCKS; i++)
            if (c->slots[i].fd >= 0) hc_drv_tcp_slot_retire(&c->slots[i]);
        hc_drv_tcp_idle_done(c, "we asked");
        return;
    case HC_TCP_FRAME_CLOSE_NO:
        if (c->idle_state != HC_TCP_IDLE_CLOSE_SENT) break;
        hc_log_debug("tcp: %s refused an idle close: traffic pending", c->name);
        c->last_act_ns = hc_time_ns(); /* try again after another full timeout */
        hc_drv_tcp_idle_release(c);
        return;
    }
    hc_log_debug("tcp: idle-close frame %u from %s in state %d ignored", h->type, c->name,
                 c->idle_state);
}
