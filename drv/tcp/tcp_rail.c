/*
 * tcp driver, rails: several local interfaces (HCOMM_SOCKET_IFNAME=a,b),
 * one TCP connection per rail per socket index per peer, large frames
 * striped over the healthy rails, and failover when a rail stalls (issue 37).
 * Used only when both sides have more than one rail; with one interface
 * none of this runs and the wire format is the plain one.
 *
 * Pairing: rail r of a rank pairs with rail r of its peer (the same index
 * in both HCOMM_SOCKET_IFNAME lists; min of both counts). Socket k of a
 * peer is socket index k % 4 on rail k / 4; the peer's listener of that
 * rail accepts it and the connector binds to its own rail's address.
 *
 * Channels: every core frame carries a 16-byte rail header {channel,
 * sequence} before its frame header. Channel k (as socket k) is an ordered
 * stream numbered 1, 2, ...: ordered frames of lane l (or every ordered
 * frame without lanes) use channel l % n of one rail, rail 0 unless its
 * path delay is far above another rail's (hc_drv_tcp_rail_order_pick), so
 * small frames stay on one rail; DATA frames (HC_FRAME_FLAG_UNORDERED) use
 * channel (r, l % n) of the healthy rail r whose socket has the fewest bytes queued and not
 * acknowledged: a rail that delivers less gets less (striping). A channel
 * rides the socket (cur_rail, k % 4); it leaves its home rail only by a
 * failover and returns once everything it sent is acknowledged, so a
 * channel's frames are only ever on one socket at a time.
 *
 * Acknowledgements: the receiver delivers a channel's frames in sequence
 * order, drops those it has already delivered (a resend), and at the end of
 * each progress pass that delivered something sends ACK {channel, highest
 * delivered} on the socket the frames came on. The sender keeps every frame
 * (its payload: no zero copy; put_done waits for the ACK) until then, in
 * the socket's inflight list: the socket's bound on queued bytes
 * (HC_TCP_QUEUE_BYTES) is the retransmit window, past which put answers
 * ERR_AGAIN.
 *
 * Failover: every 10 ms the timer reads TCP_INFO of each socket of a rail
 * that is up. A socket with segments in flight and no TCP acknowledgement
 * (the kernel's, independent of whether the peer's process is computing)
 * for longer than the deadline -- 4 x (srtt + 4 rttvar), at least 50 ms (the
 * kernel's delayed-ACK minimum is 40 ms) and at most
 * HCOMM_SOCKET_RAIL_TIMEOUT (0.1 s) -- makes the rail suspect and it is
 * left at once: its sockets are closed and what they carried (written and
 * not acknowledged, then queued) goes, in order, to the front of the same
 * socket index on another healthy rail. A socket that breaks (reset, EOF,
 * refused connect) leaves its rail the same way, unless a younger socket of
 * the rail is up (a stale one the peer replaced: only it is reconnected). An
 * idle rail is watched by a heartbeat every half deadline on its first
 * socket. A rail that was left is probed every HCOMM_SOCKET_RAIL_TIMEOUT by
 * a fresh connect of its socket 0 (hello flagged "replace": the peer drops
 * its own stale end); when it comes up the rail rejoins and channels whose
 * home it is return as they drain. A peer is failed only when every rail is
 * down for HCOMM_CONN_FAIL_TIMEOUT (at once when each was closed by the
 * peer), naming each rail and why it was left. Every switch is logged at
 * info and counted (HCOMM_STATS_LEVEL=2: rails_left, rails_rejoined,
 * frames_resent, duplicates_dropped, rail<r>_tx/rx_bytes).
 */
#include "drv/tcp/tcp.h"
#include "base/list.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HC_TCP_RAIL_FLOOR_NS 50000000ull
/* A channel whose frames see no acknowledgement this long (at least; 4 x
 * HCOMM_SOCKET_RAIL_TIMEOUT when longer) goes back N, then twice as long
 * each time up to the cap; a receiver's report of a gap, at most once per
 * hold. */
#define HC_TCP_RAIL_RTO_NS 250000000ull
#define HC_TCP_RAIL_RTO_MAX_NS 8000000000ull
#define HC_TCP_RAIL_GAP_HOLD_NS 50000000ull

static inline hc_tcp_slot_t *hc_rail_slot(hc_tcp_conn_t *c, int rail, int i)
{
    return &c->slots[rail * HC_TCP_RAIL_STRIDE + i];
}

static inline int hc_rail_of(const hc_tcp_slot_t *s)
{
    return s->idx / HC_TCP_RAIL_STRIDE;
}

/* Wall-clock seconds, to set a switch against the link changes of a test. */
static double hc_rail_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void hc_rail_peer_str(const hc_tcp_conn_t *c, int r, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    const hc_tcp_rail_addr_t *a = &c->addr.rail[c->rif[r]];
    inet_ntop(a->family, a->addr, ip, sizeof(ip));
    snprintf(buf, len, "%s:%u", ip, ntohs(a->port));
}

/* This side's interface of the connection's rail r (logs, counters). */
static inline const char *hc_rail_ifname(const hc_tcp_conn_t *c, int r)
{
    return c->drv->rail_if[c->lif[r]];
}

/* Do two rail addresses share a subnet (the shorter of their prefixes)? */
static bool hc_rail_same_subnet(const hc_tcp_rail_addr_t *a, const hc_tcp_rail_addr_t *b)
{
    if (a->family != b->family || !a->prefix || !b->prefix) return false;
    int bits = HC_MIN(a->prefix, b->prefix), n = a->family == AF_INET ? 4 : 16;
    bits = HC_MIN(bits, n * 8);
    for (int k = 0; k < n && bits > 0; k++, bits -= 8) {
        uint8_t mask = bits >= 8 ? 0xff : (uint8_t)(0xff << (8 - bits));
        if ((a->addr[k] ^ b->addr[k]) & mask) return false;
    }
    return true;
}

/* The pairs: the lower rank's interfaces in its order, each with the first
 * free interface of the higher rank on its subnet, then the rest by
 * position. Both sides compute the same from the two blobs. */
static void hc_rail_pair(hc_tcp_conn_t *c)
{
    hc_tcp_drv_t *d = c->drv;
    bool lower = d->env->rank < c->base.peer;
    const hc_tcp_rail_addr_t *lo = lower ? d->me.rail : c->addr.rail;
    const hc_tcp_rail_addr_t *hi = lower ? c->addr.rail : d->me.rail;
    int nhi = lower ? (int)c->addr.nrails : d->nrails, map[HC_TCP_MAX_RAILS];
    bool taken[HC_TCP_MAX_RAILS] = {false};
    for (int r = 0; r < c->nrails; r++) {
        map[r] = -1;
        for (int j = 0; j < nhi && j < HC_TCP_MAX_RAILS && map[r] < 0; j++)
            if (!taken[j] && hc_rail_same_subnet(&lo[r], &hi[j])) {
                map[r] = j;
                taken[j] = true;
            }
    }
    for (int r = 0; r < c->nrails; r++)
        for (int j = 0; j < nhi && j < HC_TCP_MAX_RAILS && map[r] < 0; j++)
            if (!taken[j]) {
                map[r] = j;
                taken[j] = true;
            }
    for (int r = 0; r < c->nrails; r++) {
        c->lif[r] = (uint8_t)(lower ? r : map[r]);
        c->rif[r] = (uint8_t)(lower ? map[r] : r);
        if (map[r] != r)
            hc_log_info("tcp: rail %d to rank %d pairs %s with the peer's interface %d (%s)", r,
                        c->base.peer, d->rail_if[c->lif[r]], c->rif[r],
                        map[r] >= 0 && hc_rail_same_subnet(&lo[r], &hi[map[r]])
                            ? "the same subnet"
                            : "by position: no free one on the subnet");
    }
}

void hc_drv_tcp_rail_conn_init(hc_tcp_conn_t *c)
{
    c->nrails = HC_MIN(c->drv->nrails, (int)c->addr.nrails);
    hc_rail_pair(c);
    for (int r = 0; r < c->nrails; r++)
        c->rail[r].up = true;
    for (int k = 0; k < HC_TCP_MAX_SOCKS; k++) {
        int home = k / HC_TCP_RAIL_STRIDE;
        c->chan[k].cur_rail = home < c->nrails ? home : 0;
        c->chan[k].ack_slot = -1;
    }
    c->ord_rail = 0;
    memset(c->ord_cur, 0, sizeof(c->ord_cur));
}

/* ---- sending ------------------------------------------------------------------- */

static void hc_rail_retire(hc_tcp_slot_t *s, hc_tcp_tx_t *t)
{
    hc_tcp_conn_t *c = s->conn;
    size_t total = hc_drv_tcp_tx_total(c->drv, t);
    s->q_bytes -= total;
    if (t->enq_ns) { /* a DATA frame: what its rail delivers */
        hc_tcp_rail_t *rail = &c->rail[hc_rail_of(s)];
        uint64_t now = hc_time_ns(), from = HC_MAX(t->enq_ns, rail->last_ack_ns);
        rail->svc_ns += now > from ? now - from : 0;
        rail->svc_bytes += total;
        rail->last_ack_ns = now;
    }
    if (t->heap) s->q_copy -= t->hdr.len;
    if (t->rhdr.chan != HC_TCP_NOCHAN) c->chan[t->rhdr.chan].pending--;
    hc_drv_tcp_tx_done(s, t, HCOMM_OK);
}

void hc_drv_tcp_rail_written(hc_tcp_slot_t *s, hc_tcp_tx_t *t)
{
    if (!s->busy_since) s->busy_since = s->last_wr_ns;
    if (t->rhdr.chan == HC_TCP_NOCHAN || t->rhdr.seq <= s->conn->chan[t->rhdr.chan].acked) {
        hc_rail_retire(s, t);
        return;
    }
    t->next = NULL;
    if (s->inflight.tail)
        s->inflight.tail->next = t;
    else
        s->inflight.head = t;
    s->inflight.tail = t;
}

/* The list head..tail at the front of to's queue, after a frame half
 * written there (it must end before another starts). */
static void hc_rail_queue_front(hc_tcp_slot_t *to, hc_tcp_tx_t *head, hc_tcp_tx_t *tail)
{
    hc_tcp_tx_t *keep = to->txq.head && to->txq.head->off ? to->txq.head : NULL;
    hc_tcp_tx_t *rest = keep ? keep->next : to->txq.head;
    tail->next = rest;
    if (keep)
        keep->next = head;
    else
        to->txq.head = head;
    if (!rest) to->txq.tail = tail;
    hc_drv_tcp_flush_mark(to);
}

void hc_drv_tcp_rail_requeue(hc_tcp_slot_t *from, hc_tcp_slot_t *to)
{
    hc_tcp_drv_t *d = from->conn->drv;
    /* from's list: written (in flight) then queued; each channel's in order */
    hc_tcp_tx_t *head = from->inflight.head, *tail = from->inflight.tail;
    for (hc_tcp_tx_t *t = head; t; t = t->next)
        d->n_resent++;
    if (from->txq.head) {
        if (tail)
            tail->next = from->txq.head;
        else
            head = from->txq.head;
        tail = from->txq.tail;
    }
    from->inflight.head = from->inflight.tail = NULL;
    from->txq.head = from->txq.tail = NULL;
    for (hc_tcp_tx_t *t = head; t; t = t->next)
        t->off = 0;
    if (from != to) {
        to->q_bytes += from->q_bytes;
        to->q_copy += from->q_copy;
        from->q_bytes = from->q_copy = 0;
    }
    if (head) hc_rail_queue_front(to, head, tail);
}

/* The socket stays a slot, its connection goes (not its frames). */
static void hc_rail_sock_reset(hc_tcp_slot_t *s)
{
    hc_drv_tcp_slot_drop_fd(s);
    s->state = HC_TCP_S_NONE;
    s->err = 0;
    s->rstart = s->rend = 0;
    s->busy_since = 0;
}

/* t at the end of s's queue, written at once when it is the head (rails
 * queue every frame: its sequence number is taken when it is queued). */
static void hc_rail_enqueue(hc_tcp_slot_t *s, hc_tcp_tx_t *t)
{
    HC_FIFO_PUSH(&s->txq, t);
    if (s->txq.head == t) hc_drv_tcp_write(s);
    if (s->txq.head || s->err) hc_drv_tcp_flush_mark(s);
}

void hc_drv_tcp_rail_ctrl(hc_tcp_slot_t *s, uint8_t type, uint8_t flags, uint64_t a, uint64_t b)
{
    hc_tcp_drv_t *d = s->conn->drv;
    if (s->state != HC_TCP_S_UP && s->state != HC_TCP_S_HELLO_SENT) return;
    hc_tcp_tx_t *t = hc_drv_tcp_tx_get(d);
    if (!t) return; /* a heartbeat or an ACK: the next one says it again */
    t->hdr = (hc_frame_hdr_t){.type = type, .flags = flags, .a = a, .b = b};
    t->rhdr.chan = HC_TCP_NOCHAN;
    t->payload = t->inline_buf;
    s->q_bytes += hc_drv_tcp_tx_total(d, t);
    hc_rail_enqueue(s, t);
}

/* Bytes queued or in flight (not acknowledged) on rail r's sockets. */
static size_t hc_rail_outstanding(hc_tcp_conn_t *c, int r)
{
    size_t q = 0;
    for (int i = 0; i < HC_TCP_RAIL_STRIDE; i++)
        q += hc_rail_slot(c, r, i)->q_bytes;
    return q;
}

/* The channel of socket index i's ordered frames: that index on the rail
 * they ride (ord_cur[i]), or -1: wait (put answers ERR_AGAIN). They go
 * over to the rail the timer prefers (ord_rail) once everything sent on
 * their old channel is acknowledged, that is delivered in order to the
 * peer's core, so that nothing sent on the new channel overtakes it; until
 * then the next one waits rather than join the old channel, which would
 * never drain under a steady stream. The wait is at most the old path's
 * round trip and the peer's ACK delay (one timer tick), and no longer than
 * the frame would have queued behind the old channel's frames on its
 * socket. */
static int hc_rail_ordered_chan(hc_tcp_conn_t *c, int i)
{
    int cur = c->ord_cur[i], want = c->ord_rail;
    if (HC_UNLIKELY(want != cur) && c->rail[want].up) {
        if (c->chan[cur * HC_TCP_RAIL_STRIDE + i].pending) return -1;
        c->ord_cur[i] = (uint8_t)want;
        cur = want;
    }
    return cur * HC_TCP_RAIL_STRIDE + i;
}

/* The least delay of a rail that is up and has one (0: none), and the
 * bound above which another rail's delay counts as far above it: more
 * than the least RTT and more than HC_TCP_RAIL_DELAY_FAR_NS (the minimum
 * RTTs of equal links differ by tens of percent: steering by that noise
 * would starve a rail). */
static uint64_t hc_rail_least_delay(const hc_tcp_conn_t *c, uint64_t *far)
{
    uint64_t least = 0;
    for (int r = 0; r < c->nrails; r++) {
        uint64_t d = c->rail[r].delay_ns;
        if (c->rail[r].up && d && (!least || d < least)) least = d;
    }
    *far = HC_MAX(least, HC_TCP_RAIL_DELAY_FAR_NS);
    return least;
}

/* Rail r is up and its delay is not far above the least (or unknown). */
static bool hc_rail_near(const hc_tcp_conn_t *c, int r, uint64_t least, uint64_t far)
{
    const hc_tcp_rail_t *rail = &c->rail[r];
    return rail->up && (!rail->delay_ns || rail->delay_ns <= least + far);
}

/* Ordered frames (eager messages, rendezvous handshakes: latency) ride
 * rail 0 while its delay is near the least; when it is far above, the
 * rail ord_rail already is while that one is near, else the rail of least
 * delay. While ord_rail is down, nothing moves: that is the failover's
 * business (its channels ride another rail and return when it is back).
 * Each move is logged and counted. */
void hc_drv_tcp_rail_order_pick(hc_tcp_conn_t *c)
{
    uint64_t far, least = hc_rail_least_delay(c, &far);
    if (!least || !c->rail[c->ord_rail].up) return;
    int want = c->ord_rail;
    if (hc_rail_near(c, 0, least, far))
        want = 0;
    else if (!hc_rail_near(c, want, least, far))
        for (int r = 0; r < c->nrails; r++)
            if (c->rail[r].up && c->rail[r].delay_ns == least) {
                want = r;
                break;
            }
    if (want == c->ord_rail) return;
    const hc_tcp_rail_t *from = &c->rail[c->ord_rail], *to = &c->rail[want];
    c->drv->n_ordered_moves++;
    hc_log_info("tcp: ordered frames to rank %d move from rail %d (%s, %.3f ms RTT) to rail %d "
                "(%s, %.3f ms): %s",
                c->base.peer, c->ord_rail, hc_rail_ifname(c, c->ord_rail),
                (double)from->delay_ns * 1e-6, want, hc_rail_ifname(c, want),
                (double)to->delay_ns * 1e-6,
                want == 0 ? "rail 0's delay is near the least again" : "the delay is far above");
    c->ord_rail = want;
}

/* The channel of a core frame: ordered ones on their lane's channel of
 * one rail (hc_rail_ordered_chan), DATA on that index of the healthy rail
 * that would deliver it first: the least delay + (outstanding + frame) / rate, the rate each
 * rail was measured to deliver (hc_rail_rate_sample; one not measured yet,
 * or being probed, counts as the best measured; all unmeasured: the least
 * outstanding), the delay half of what its RTT (hc_rail_rtt_sample) is
 * above the least rail's, counted only where that is far above (more than
 * the least RTT and more than HC_TCP_RAIL_DELAY_FAR_NS: the minimum RTTs
 * of equal links differ by tens of percent, and a stripe steered by that
 * noise would starve a rail). A frame's bytes thus
 * split in proportion to what the rails deliver, whether a rail is slower
 * by its link or by congestion, also when a whole message is queued at
 * once (which the least-queued rule alone splits evenly); a rail whose
 * delay is far above the others' takes only what the others could not
 * deliver sooner (a message shorter than the delay's worth of the fast
 * rails' rate stays off it). */
static int hc_rail_chan(hc_tcp_conn_t *c, const hc_frame_hdr_t *h)
{
    int i = hc_drv_tcp_pick(c, c->drv, h);
    if (!(h->flags & HC_FRAME_FLAG_UNORDERED)) return hc_rail_ordered_chan(c, i);
    double top = 0;
    for (int r = 0; r < c->nrails; r++)
        if (c->rail[r].up) top = HC_MAX(top, c->rail[r].rate);
    uint64_t far, least = hc_rail_least_delay(c, &far);
    int best = -1;
    double best_t = 0;
    uint32_t rr = c->rr_rail++;
    for (int k = 0; k < c->nrails; k++) {
        int r = (int)((rr + (uint32_t)k) % (uint32_t)c->nrails);
        const hc_tcp_rail_t *rail = &c->rail[r];
        if (!rail->up) continue;
        double rate = rail->rate > 0 && !rail->probe_left ? rail->rate : top > 0 ? top : 1.0;
        /* its delay above the least, one way, where far above it (a rail
         * being probed counts as the best by its delay too) */
        uint64_t extra = rail->delay_ns > least ? rail->delay_ns - least : 0;
        double lat = rail->probe_left || extra <= far ? 0 : (double)extra / 2;
        double t = lat + (double)(hc_rail_outstanding(c, r) + h->len) / rate;
        if (best < 0 || t < best_t) {
            best = r;
            best_t = t;
        }
    }
    if (best < 0) return i;
    hc_tcp_rail_t *rail = &c->rail[best];
    rail->probe_left -= HC_MIN(rail->probe_left, h->len);
    return best * HC_TCP_RAIL_STRIDE + i;
}

/* The rail's delay: the least minimum RTT of its up sockets (the kernel's
 * windowed minimum). Not the smoothed RTT: an idle rail's sockets carry
 * heartbeats, whose delayed acknowledgements made it read tens of ms on
 * loopback, so a rail the stripe had left idle looked slow and stayed
 * idle (test_low_rate_probed starved that way). Queueing is the rate's
 * business; the delay is the path's. */
static void hc_rail_rtt_sample(hc_tcp_conn_t *c, int r)
{
    uint32_t us = 0;
    for (int i = 0; i < HC_TCP_RAIL_STRIDE; i++) {
        const hc_tcp_slot_t *s = hc_rail_slot(c, r, i);
        uint32_t x = s->state == HC_TCP_S_UP ? hc_drv_tcp_min_rtt_us(s->fd) : 0;
        if (x && (!us || x < us)) us = x;
    }
    if (us) c->rail[r].delay_ns = (uint64_t)us * 1000u;
}

/* A rate no sample has refreshed for HC_RAIL_RATE_STALE_NS is probed with
 * HC_TCP_RAIL_PROBE_BYTES; after HC_RAIL_PROBE_TRIES probes in a row that
 * found the rail no faster, each next one waits twice as long, up to
 * HC_RAIL_PROBE_GAP_MAX_NS. */
#define HC_RAIL_RATE_STALE_NS 200000000ull
#define HC_RAIL_PROBE_TRIES 3
#define HC_RAIL_PROBE_GAP_MAX_NS 3200000000ull

/* The timer's sample of what rail r delivered since the last one (DATA
 * bytes over the time it was busy with them), kept when it covers at least
 * 1 ms of work: a moving average over about 4 samples.
 *
 * A rate measured low (a sample that spanned a stall of either process)
 * gives the rail so little of the stripe that it may never again gather
 * 1 ms of work to be measured by: starved, it carried 0.01% of the bytes in
 * one CI run of mp_tcp_rails_lo. So a stale rate is probed: the rail counts
 * as the best one for the next 1 MiB of DATA it takes (pipelined beside the
 * other rails, as its share would be), and once those are acknowledged
 * their sample, however short, raises the rate to what it measured (a
 * probe never lowers it: its one sample may span a stall too, which is how
 * the rate fell; samples of the rail's regular traffic do). The probe is
 * bounded: a rail that is slow for good (tbf at 400 Mbit/s in
 * netns_tcp_rails_congest) takes 1 MiB, not the 16 MiB queue that counting
 * it as the best one until its next sample gave it (two rails fell to
 * 0.4-0.5x the fast one alone), and after three probes in a row that found
 * it no faster they back off to one per 3.2 s. */
static void hc_rail_rate_sample(hc_tcp_conn_t *c, int r, uint64_t now)
{
    hc_tcp_rail_t *rail = &c->rail[r];
    uint64_t dns = rail->svc_ns - rail->rate_ns;
    bool probed = rail->probing && !rail->probe_left && rail->svc_bytes > rail->rate_bytes &&
                  dns > 0 && hc_rail_outstanding(c, r) == 0;
    if (dns < 1000000 && !probed) {
        uint32_t over = rail->probe_misses > HC_RAIL_PROBE_TRIES
                            ? HC_MIN(rail->probe_misses - HC_RAIL_PROBE_TRIES, 4u)
                            : 0;
        uint64_t gap = HC_MIN(HC_RAIL_RATE_STALE_NS << over, HC_RAIL_PROBE_GAP_MAX_NS);
        if (rail->rate > 0 && !rail->probing && now - rail->rate_at > gap) {
            rail->probing = true;
            rail->probe_left = HC_TCP_RAIL_PROBE_BYTES;
            c->drv->n_rate_probes++;
        }
        return;
    }
    double x = (double)(rail->svc_bytes - rail->rate_bytes) / (double)dns;
    double was = rail->rate;
    if (rail->probing) {
        rail->rate = HC_MAX(x, was);
        rail->probe_misses = x > 1.5 * was ? 0 : rail->probe_misses + 1;
        rail->probing = false;
        rail->probe_left = 0;
    } else {
        rail->rate = was > 0 ? 0.75 * was + 0.25 * x : x;
    }
    rail->rate_bytes = rail->svc_bytes;
    rail->rate_ns = rail->svc_ns;
    rail->rate_at = now;
}

/* The socket a channel rides now; it returns home once drained. */
static hc_tcp_slot_t *hc_rail_chan_slot(hc_tcp_conn_t *c, int k)
{
    hc_tcp_chan_t *ch = &c->chan[k];
    int home = k / HC_TCP_RAIL_STRIDE;
    if (HC_UNLIKELY(ch->cur_rail != home) && c->rail[home].up && ch->pending == 0) {
        ch->cur_rail = home;
        if (!c->rail[home].returned && c->rail[home].down_ns) {
            c->rail[home].returned = true;
            c->drv->n_rail_returns++;
            hc_log_info("tcp: rail %d (%s) to rank %d carries traffic again (channel %d back "
                        "home %.3f s after the rail was left)",
                        home, hc_rail_ifname(c, home), c->base.peer, k,
                        (double)(hc_time_ns() - c->rail[home].down_ns) * 1e-9);
        }
    }
    return hc_rail_slot(c, ch->cur_rail, k % HC_TCP_RAIL_STRIDE);
}

hcomm_status_t hc_drv_tcp_rail_put(hc_tcp_conn_t *c, const hc_frame_hdr_t *hdr, const void *payload,
                                   void *cookie)
{
    hc_tcp_drv_t *d = c->drv;
    bool core = hdr->type < HC_FRAME_DRIVER;
    if (!core) {
        /* the driver's own frames (goodbye): the first socket that is up */
        for (int k = 0; k < HC_TCP_MAX_SOCKS; k++)
            if (c->slots[k].state == HC_TCP_S_UP) {
                hc_drv_tcp_rail_ctrl(&c->slots[k], hdr->type, hdr->flags, hdr->a, hdr->b);
                return HCOMM_OK;
            }
        return HCOMM_ERR_AGAIN;
    }
    int k = hc_rail_chan(c, hdr);
    if (k < 0) return HCOMM_ERR_AGAIN; /* ordered frames move rails: the old channel drains */
    hc_tcp_chan_t *ch = &c->chan[k];
    hc_tcp_slot_t *s = hc_rail_chan_slot(c, k);
    size_t len = hdr->len, total = d->pre + sizeof(hc_frame_hdr_t) + len;
    if ((s->txq.head || s->inflight.head) && s->q_bytes + total > HC_TCP_QUEUE_BYTES)
        return HCOMM_ERR_AGAIN; /* the window: wait for the peer's ACKs */
    /* Eager-sized payloads are copied into the retransmit buffer: put is
     * done at once and a blocking send does not wait for the ACK. */
    if (cookie && len <= HC_TCP_EAGER_MAX && s->q_copy + len <= HC_TCP_QUEUE_COPY) cookie = NULL;
    if (!cookie && len > HC_TCP_INLINE && s->q_copy + len > HC_TCP_QUEUE_COPY)
        return HCOMM_ERR_AGAIN;
    hc_tcp_tx_t *t = hc_drv_tcp_tx_get(d);
    if (!t || !hc_drv_tcp_tx_keep(s, t, payload, len, cookie)) {
        if (t) hc_drv_tcp_tx_put(d, t);
        return hc_error(HCOMM_ERR_NO_MEMORY, "tcp put to %s: %zu-byte frame", c->name, len);
    }
    if (s->state == HC_TCP_S_NONE && c->rail[hc_rail_of(s)].up) {
        hcomm_status_t st = hc_drv_tcp_slot_start(c, s->idx);
        if (st != HCOMM_OK) {
            if (t->heap) s->q_copy -= len;
            hc_drv_tcp_tx_put(d, t);
            return st;
        }
    }
    t->hdr = *hdr;
    t->cookie = cookie;
    t->rhdr.chan = (uint16_t)k;
    t->rhdr.seq = ++ch->next_seq;
    if (hdr->flags & HC_FRAME_FLAG_UNORDERED) t->enq_ns = hc_time_ns();
    if (ch->pending++ == 0) ch->progress_ns = d->last_poll_ns;
    s->q_bytes += total;
    c->n_tx++;
    hc_tcp_sock_stats_t *st = &d->sock[k % HC_TCP_RAIL_STRIDE];
    st->tx_frames++;
    st->tx_bytes += total;
    st->tx_lanes |= 1u << (hdr->lane & (HC_FRAME_LANES - 1));
    d->rail_tx_bytes[c->lif[hc_rail_of(s)]] += total;
    bool inprog = t->inprog;
    hc_rail_enqueue(s, t);
    return inprog ? HCOMM_IN_PROGRESS : HCOMM_OK;
}

/* ---- acknowledgements ------------------------------------------------------------ */

/* Channel k's frames out of list q of socket s (not `keep`: a frame half
 * written on a live socket ends there), in q's order, which is the
 * channel's: those the peer acknowledged are retired, the others (their
 * bytes counted on `to` from now on) returned as a list. */
static hc_tcp_tx_t *hc_rail_take(hc_tcp_slot_t *s, hc_tcp_txq_t *q, int k, const hc_tcp_tx_t *keep,
                                 hc_tcp_slot_t *to, unsigned *n)
{
    hc_tcp_conn_t *c = s->conn;
    hc_tcp_tx_t *run = NULL, **rt = &run, **pp = &q->head, *prev = NULL;
    while (*pp) {
        hc_tcp_tx_t *t = *pp;
        if (t == keep || t->rhdr.chan != k) {
            prev = t;
            pp = &t->next;
            continue;
        }
        *pp = t->next;
        if (q->tail == t) q->tail = prev;
        t->next = NULL;
        if (t->rhdr.seq <= c->chan[k].acked) {
            hc_rail_retire(s, t);
            continue;
        }
        if (s != to) {
            size_t total = hc_drv_tcp_tx_total(c->drv, t);
            s->q_bytes -= total;
            to->q_bytes += total;
            if (t->heap) {
                s->q_copy -= t->hdr.len;
                to->q_copy += t->hdr.len;
            }
        }
        t->off = 0;
        *rt = t;
        rt = &t->next;
        (*n)++;
    }
    return run;
}

/* Two lists of one channel's frames, each in sequence order, as one. */
static hc_tcp_tx_t *hc_rail_merge(hc_tcp_tx_t *a, hc_tcp_tx_t *b)
{
    hc_tcp_tx_t *head = NULL, **pp = &head;
    while (a && b) {
        hc_tcp_tx_t **from = a->rhdr.seq <= b->rhdr.seq ? &a : &b;
        *pp = *from;
        *from = (*from)->next;
        pp = &(*pp)->next;
    }
    *pp = a ? a : b;
    return head;
}

/* Go back N on channel k: every frame of it not acknowledged, wherever it
 * is (written on any socket, or queued on one that is not its socket now),
 * goes again, in order, at the front of the socket the channel rides. The
 * receiver drops what it has (duplicates) and what comes past a gap, so
 * this heals a frame lost with a connection however that happened, and
 * an acknowledgement lost with one. Returns the frames queued again. */
static unsigned hc_rail_resync(hc_tcp_conn_t *c, int k, uint64_t now)
{
    hc_tcp_chan_t *ch = &c->chan[k];
    hc_tcp_slot_t *dst = hc_rail_slot(c, ch->cur_rail, k % HC_TCP_RAIL_STRIDE);
    hc_tcp_tx_t *all = NULL;
    unsigned n = 0;
    for (int x = 0; x < c->nrails * HC_TCP_RAIL_STRIDE; x++) {
        hc_tcp_slot_t *s = &c->slots[x];
        all = hc_rail_merge(all, hc_rail_take(s, &s->inflight, k, NULL, dst, &n));
        const hc_tcp_tx_t *keep =
            s->fd >= 0 && s->txq.head && s->txq.head->off ? s->txq.head : NULL;
        all = hc_rail_merge(all, hc_rail_take(s, &s->txq, k, keep, dst, &n));
    }
    ch->resync_ns = ch->progress_ns = now;
    if (!all) return 0;
    hc_tcp_tx_t *tail = all;
    while (tail->next)
        tail = tail->next;
    hc_rail_queue_front(dst, all, tail);
    c->drv->n_resyncs++;
    c->drv->n_resent += n;
    return n;
}

void hc_drv_tcp_rail_ack(hc_tcp_conn_t *c, const hc_frame_hdr_t *h)
{
    if (!c->drv->pre || h->a >= (uint64_t)(c->nrails * HC_TCP_RAIL_STRIDE)) {
        hc_log_debug("tcp: ACK of channel %llu from %s ignored", (unsigned long long)h->a, c->name);
        return;
    }
    int k = (int)h->a;
    hc_tcp_chan_t *ch = &c->chan[k];
    if (h->b > ch->next_seq) {
        hc_drv_tcp_conn_fail(c, "%s acknowledged frame %llu of channel %d, only %llu were sent",
                             c->name, (unsigned long long)h->b, k,
                             (unsigned long long)ch->next_seq);
        return;
    }
    uint64_t now = c->drv->last_poll_ns;
    if (h->b > ch->acked) {
        ch->acked = h->b;
        ch->progress_ns = now;
        ch->rto_ns = 0;
        hc_tcp_slot_t *s = hc_rail_slot(c, ch->cur_rail, k % HC_TCP_RAIL_STRIDE);
        hc_tcp_tx_t **pp = &s->inflight.head, *prev = NULL;
        while (*pp) {
            hc_tcp_tx_t *t = *pp;
            if (t->rhdr.chan != k || t->rhdr.seq > ch->acked) {
                prev = t;
                pp = &t->next;
                continue;
            }
            *pp = t->next;
            if (s->inflight.tail == t) s->inflight.tail = prev;
            hc_rail_retire(s, t);
        }
        /* Everything acknowledged and frames still held: they were written
         * on another socket (a resend's straggler): find and retire them. */
        if (ch->pending && ch->acked == ch->next_seq) hc_rail_resync(c, k, now);
    }
    if ((h->flags & HC_TCP_ACK_GAP) && ch->pending &&
        now - ch->resync_ns > HC_TCP_RAIL_GAP_HOLD_NS) {
        unsigned n = hc_rail_resync(c, k, now);
        hc_log_info("tcp: %s dropped a frame of channel %d past a gap (after %llu): %u frames "
                    "not acknowledged go again",
                    c->name, k, (unsigned long long)ch->acked, n);
    }
}

/* A socket that is up on a rail that is up, else NULL. */
static hc_tcp_slot_t *hc_rail_any_up(hc_tcp_conn_t *c)
{
    for (int k = 0; k < HC_TCP_MAX_SOCKS; k++) {
        hc_tcp_slot_t *s = &c->slots[k];
        if (s->state == HC_TCP_S_UP && c->rail[hc_rail_of(s)].up) return s;
    }
    return NULL;
}

void hc_drv_tcp_rail_acks(hc_tcp_drv_t *d)
{
    d->ack_due = false;
    for (hc_tcp_conn_t *c = d->active; c; c = c->active_next) {
        if (!c->ack_due || c->failed) continue;
        c->ack_due = false;
        for (int k = 0; k < c->nrails * HC_TCP_RAIL_STRIDE; k++) {
            hc_tcp_chan_t *ch = &c->chan[k];
            if (!ch->ack_due) continue;
            ch->ack_due = false;
            hc_tcp_slot_t *s = ch->ack_slot >= 0 ? &c->slots[ch->ack_slot] : NULL;
            if (!s || s->state != HC_TCP_S_UP) s = hc_rail_any_up(c);
            if (!s) continue; /* the next frame asks again */
            hc_drv_tcp_rail_ctrl(s, HC_TCP_FRAME_ACK, ch->rx_gap ? HC_TCP_ACK_GAP : 0, (uint64_t)k,
                                 ch->rx_seq);
            ch->rx_gap = false;
            ch->rx_frames = 0;
            ch->rx_bytes = 0;
            d->n_acks++;
        }
    }
}

/* ---- receiving ------------------------------------------------------------------- */

/* A core frame of channel rh->chan: delivered when it is the next one,
 * dropped when delivered before (a resend) or when one before it is
 * missing (a gap: the ACK says so and the sender goes back N). */
static bool hc_rail_rx_core(hc_tcp_slot_t *s, const hc_tcp_rhdr_t *rh, const hc_frame_hdr_t *h,
                            const uint8_t *payload)
{
    hc_tcp_conn_t *c = s->conn;
    hc_tcp_drv_t *d = c->drv;
    if (rh->chan >= c->nrails * HC_TCP_RAIL_STRIDE) {
        hc_drv_tcp_conn_fail(c, "%s sent a frame of channel %u (rails: %d)", c->name, rh->chan,
                             c->nrails);
        return false;
    }
    hc_tcp_chan_t *ch = &c->chan[rh->chan];
    ch->ack_slot = s->idx;
    ch->rx_frames++;
    ch->rx_bytes += h->len;
    /* ACK at the end of this progress pass when a sender may wait on it (a
     * large frame's put_done, a window filling up, a resend), else with the
     * next few frames or at the next timer tick (10 ms): small frames were
     * copied by the sender, nobody waits for their ACK. */
    if (h->len > HC_TCP_EAGER_MAX || ch->rx_frames >= 16 || ch->rx_bytes >= HC_TCP_QUEUE_COPY / 4 ||
        rh->seq <= ch->rx_seq)
        ch->ack_due = c->ack_due = d->ack_due = true;
    if (rh->seq <= ch->rx_seq) {
        d->n_dups++;
        return true;
    }
    if (rh->seq != ch->rx_seq + 1) {
        /* A frame before it was lost with a connection: this one goes too
         * (the sender goes back N when the ACK says so, or when no ACK
         * comes: hc_rail_resync). */
        d->n_gaps++;
        if (!ch->rx_gap)
            hc_log_debug("tcp: %s sent frame %llu of channel %u after %llu: dropped (a gap)",
                         c->name, (unsigned long long)rh->seq, rh->chan,
                         (unsigned long long)ch->rx_seq);
        ch->rx_gap = true;
        ch->ack_due = c->ack_due = d->ack_due = true;
        return true;
    }
    ch->rx_seq++;
    hc_tcp_sock_stats_t *st = &d->sock[rh->chan % HC_TCP_RAIL_STRIDE];
    st->rx_frames++;
    st->rx_bytes += d->pre + sizeof(*h) + h->len;
    st->rx_lanes |= 1u << (h->lane & (HC_FRAME_LANES - 1));
    c->n_rx++;
    d->env->deliver(d->env->core, &c->base, h, payload);
    return true;
}

int hc_drv_tcp_rail_parse(hc_tcp_slot_t *s)
{
    hc_tcp_conn_t *c = s->conn;
    hc_tcp_drv_t *d = c->drv;
    int n = 0, got;
    hc_frame_hdr_t h;
    const uint8_t *pre, *payload;
    while ((got = hc_drv_tcp_next_frame(s, sizeof(hc_tcp_rhdr_t), &h, &pre, &payload)) > 0) {
        hc_tcp_rhdr_t rh;
        memcpy(&rh, pre, sizeof(rh));
        d->rail_rx_bytes[c->lif[hc_rail_of(s)]] += sizeof(rh) + sizeof(h) + h.len;
        if (h.type >= HC_FRAME_DRIVER)
            hc_drv_tcp_driver_frame(c, s, &h);
        else if (!hc_rail_rx_core(s, &rh, &h, payload))
            return -1;
        n++;
        if (HC_UNLIKELY(c->failed || s->fd < 0)) return -1;
    }
    if (got < 0) return -1;
    if (s->rstart == s->rend) s->rstart = s->rend = 0;
    return n;
}

/* ---- failover and rejoin ---------------------------------------------------------- */

/* No rail works (each left, or the last one stalled) for the fail timeout:
 * the peer fails, naming each rail and why. */
static void hc_rail_fail_all(hc_tcp_conn_t *c, uint64_t now, bool silent)
{
    uint64_t since = 0; /* the last rail stopped working then */
    for (int r = 0; r < c->nrails; r++)
        since = HC_MAX(since, c->rail[r].up ? c->rail[r].stall_ns : c->rail[r].down_ns);
    if (silent) since = c->last_rx_ns;
    /* The core keeps 160 bytes of the reason: a few words per rail there,
     * the whole story in the log. */
    char buf[200];
    size_t off =
        (size_t)snprintf(buf, sizeof(buf), "every rail %s %.1f s (HCOMM_CONN_FAIL_TIMEOUT):",
                         silent ? "silent" : "down", (double)(now - HC_MIN(since, now)) * 1e-9);
    for (int r = 0; r < c->nrails && off < sizeof(buf); r++) {
        const hc_tcp_rail_t *rail = &c->rail[r];
        const char *state = !rail->up ? "left" : rail->stall_ns ? "stalled" : "up";
        off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s rail %d %s %s (%s)", r ? ";" : "",
                                r, hc_rail_ifname(c, r), state,
                                rail->up && !rail->stall_ns ? "nothing read" : rail->brief);
        char peer[64];
        hc_rail_peer_str(c, r, peer, sizeof(peer));
        hc_log_warn("tcp: rank %d: rail %d (%s -> %s) %s: %s", c->base.peer, r,
                    hc_rail_ifname(c, r), peer, state,
                    rail->up && !rail->stall_ns ? "nothing read" : rail->why);
    }
    hc_drv_tcp_conn_fail(c, "%s: %s", c->name, buf);
}

/* A rail that is up, other than not, with the fewest bytes queued; -1. */
static int hc_rail_pick_up(hc_tcp_conn_t *c, int not )
{
    int best = -1;
    size_t best_q = SIZE_MAX;
    for (int r = 0; r < c->nrails; r++) {
        if (r == not || !c->rail[r].up) continue;
        size_t q = 0;
        for (int i = 0; i < HC_TCP_RAIL_STRIDE; i++)
            q += hc_rail_slot(c, r, i)->q_bytes;
        if (q < best_q) {
            best = r;
            best_q = q;
        }
    }
    return best;
}

/* What rail `from` holds (its sockets' frames, its channels) moves to `to`. */
static void hc_rail_move(hc_tcp_conn_t *c, int from, int to)
{
    for (int i = 0; i < HC_TCP_RAIL_STRIDE; i++)
        hc_drv_tcp_rail_requeue(hc_rail_slot(c, from, i), hc_rail_slot(c, to, i));
    for (int k = 0; k < c->nrails * HC_TCP_RAIL_STRIDE; k++)
        if (c->chan[k].cur_rail == from) c->chan[k].cur_rail = to;
}

static void hc_rail_down(hc_tcp_conn_t *c, int r, bool eof, const char *why, const char *brief)
{
    hc_tcp_drv_t *d = c->drv;
    hc_tcp_rail_t *rail = &c->rail[r];
    uint64_t now = hc_time_ns();
    rail->up = false;
    rail->eof = eof;
    rail->returned = false;
    rail->down_ns = rail->probe_ns = now;
    snprintf(rail->why, sizeof(rail->why), "%s", why);
    snprintf(rail->brief, sizeof(rail->brief), "%s", brief);
    d->n_rail_left++;
    uint64_t resent0 = d->n_resent;
    for (int i = 0; i < HC_TCP_RAIL_STRIDE; i++)
        hc_rail_sock_reset(hc_rail_slot(c, r, i));
    int to = hc_rail_pick_up(c, r);
    if (to < 0) {
        /* Nowhere to go: what the sockets wrote goes again when a rail is
         * back (hc_drv_tcp_rail_slot_up moves it there or rewrites it). */
        for (int i = 0; i < HC_TCP_RAIL_STRIDE; i++)
            hc_drv_tcp_rail_requeue(hc_rail_slot(c, r, i), hc_rail_slot(c, r, i));
    } else {
        hc_rail_move(c, r, to);
        /* Tell the peer: what we read of its frames there and did not
         * acknowledge is lost with our sockets; it resends them at once. */
        hc_tcp_slot_t *note = hc_rail_any_up(c);
        if (note) hc_drv_tcp_rail_ctrl(note, HC_TCP_FRAME_RAIL_DOWN, 0, (uint64_t)r, 0);
    }
    char peer[64];
    hc_rail_peer_str(c, r, peer, sizeof(peer));
    if (to >= 0) {
        hc_log_info("tcp: rail %d (%s -> %s) to rank %d left at %.3f: %s; its traffic moves to "
                    "rail %d (%s), %llu frames resent (%llu rails left so far)",
                    r, hc_rail_ifname(c, r), peer, c->base.peer, hc_rail_wall(), why, to,
                    hc_rail_ifname(c, to), (unsigned long long)(d->n_resent - resent0),
                    (unsigned long long)d->n_rail_left);
        return;
    }
    hc_log_info("tcp: rail %d (%s -> %s) to rank %d left at %.3f: %s; no rail to it is up: "
                "waiting up to %.1f s (HCOMM_CONN_FAIL_TIMEOUT) for one to come back",
                r, hc_rail_ifname(c, r), peer, c->base.peer, hc_rail_wall(), why,
                (double)d->fail_ns * 1e-9);
    if (!c->all_down_ns) c->all_down_ns = now;
}

void hc_drv_tcp_rail_peer_left(hc_tcp_conn_t *c, const hc_frame_hdr_t *h)
{
    if (!c->drv->pre || h->a >= (uint64_t)c->nrails || !c->rail[h->a].up) return;
    char why[96];
    snprintf(why, sizeof(why), "rank %d left it (its own detection)", c->base.peer);
    hc_rail_down(c, (int)h->a, false, why, "the peer left it");
}

void hc_drv_tcp_rail_lost(hc_tcp_slot_t *s, bool eof, const char *why)
{
    hc_tcp_conn_t *c = s->conn;
    int r = hc_rail_of(s);
    if (c->failed) return;
    if (c->bye || c->drv->closing) {
        /* the peer said goodbye (or we are closing): a write that fails
         * now is its exit, not a rail to leave */
        hc_drv_tcp_slot_close(s, HCOMM_ERR_PEER_FAILED);
        return;
    }
    bool stale = !c->rail[r].up; /* a probe, or a socket of a rail already left */
    for (int i = 0; i < HC_TCP_RAIL_STRIDE && !stale; i++) {
        const hc_tcp_slot_t *o = hc_rail_slot(c, r, i);
        stale = o != s && o->state == HC_TCP_S_UP && o->up_ns > s->up_ns && s->up_ns;
    }
    if (stale) {
        /* The rail works (or is being probed): only this socket goes; what
         * it carried goes again on its next connection. */
        hc_log_debug("tcp: socket %d (rail %d) to %s: %s", s->idx, r, c->name, why);
        hc_rail_sock_reset(s);
        hc_drv_tcp_rail_requeue(s, s);
        return;
    }
    hc_rail_down(c, r, eof, why, eof ? "closed by the peer" : "socket error");
}

void hc_drv_tcp_sock_lost(hc_tcp_slot_t *s, bool eof, const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (s->conn->drv->pre)
        hc_drv_tcp_rail_lost(s, eof, why);
    else
        hc_drv_tcp_conn_fail(s->conn, "%s", why);
}

void hc_drv_tcp_rail_slot_up(hc_tcp_slot_t *s)
{
    hc_tcp_conn_t *c = s->conn;
    hc_tcp_drv_t *d = c->drv;
    int r = hc_rail_of(s);
    uint64_t now = hc_time_ns();
    s->up_ns = now;
    s->was_up = true;
    s->busy_since = 0;
    if (c->rail[r].up) return;
    c->rail[r].up = true;
    c->rail[r].eof = false;
    c->all_down_ns = 0;
    d->n_rail_rejoined++;
    char peer[64];
    hc_rail_peer_str(c, r, peer, sizeof(peer));
    hc_log_info("tcp: rail %d (%s -> %s) to rank %d rejoined at %.3f after %.3f s down (its "
                "socket %d connected; %llu rejoins so far)",
                r, hc_rail_ifname(c, r), peer, c->base.peer, hc_rail_wall(),
                (double)(now - c->rail[r].down_ns) * 1e-9, s->idx,
                (unsigned long long)d->n_rail_rejoined);
    /* frames parked while no rail was up go now, on this rail: those of
     * the other rails moved here, its own ones reopen their sockets */
    for (int q = 0; q < c->nrails; q++)
        if (!c->rail[q].up) hc_rail_move(c, q, r);
    for (int i = 0; i < HC_TCP_RAIL_STRIDE; i++) {
        hc_tcp_slot_t *o = hc_rail_slot(c, r, i);
        if (o->txq.head) hc_drv_tcp_flush_mark(o);
    }
}

/* ---- timer ------------------------------------------------------------------------ */

static uint64_t hc_rail_deadline(const hc_tcp_drv_t *d, const struct tcp_info *ti)
{
    uint64_t v = 4000ull * ((uint64_t)ti->tcpi_rtt + 4ull * ti->tcpi_rttvar); /* us -> ns */
    uint64_t floor = HC_MIN(HC_TCP_RAIL_FLOOR_NS, d->rail_bound_ns);
    return HC_MIN(HC_MAX(v, floor), d->rail_bound_ns);
}

enum { HC_RAIL_OK, HC_RAIL_STALLED, HC_RAIL_LEFT };

/* A socket of an up rail: OK, STALLED (the last rail up: kept, rail->stall_ns
 * says since when) or LEFT (its rail was left). */
static int hc_rail_watch(hc_tcp_slot_t *s, uint64_t now)
{
    hc_tcp_conn_t *c = s->conn;
    int r = hc_rail_of(s);
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    if (getsockopt(s->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return HC_RAIL_OK;
    if (ti.tcpi_unacked == 0) {
        s->busy_since = 0;
        return HC_RAIL_OK;
    }
    if (!s->busy_since) s->busy_since = now;
    uint64_t ack_ns = now - HC_MIN((uint64_t)ti.tcpi_last_ack_recv * 1000000ull, now);
    uint64_t since = HC_MIN(HC_MAX(s->busy_since, ack_ns), now);
    uint64_t limit = hc_rail_deadline(c->drv, &ti);
    if (now - since <= limit) return HC_RAIL_OK;
    /* The peer's heartbeats and ACK frames come on every rail it uses: a
     * rail that still brings bytes works (the kernel is slow to acknowledge:
     * a receiver short of memory drops segments and our RTO is 200 ms). */
    uint64_t rd = 0;
    for (int i = 0; i < HC_TCP_RAIL_STRIDE; i++)
        rd = HC_MAX(rd, hc_rail_slot(c, r, i)->last_rd_ns);
    if (now - HC_MIN(rd, now) <= limit) return HC_RAIL_OK;
    char why[160];
    snprintf(why, sizeof(why),
             "no TCP acknowledgement for %.0f ms on socket %d, %u segments in flight, nothing "
             "read from the rail (rtt %.2f ms, deadline %.0f ms)",
             (double)(now - since) * 1e-6, s->idx, ti.tcpi_unacked, ti.tcpi_rtt * 1e-3,
             (double)limit * 1e-6);
    hc_tcp_rail_t *rail = &c->rail[r];
    if (hc_rail_pick_up(c, r) >= 0) {
        char brief[40];
        snprintf(brief, sizeof(brief), "no TCP ack for %.0f ms", (double)(now - since) * 1e-6);
        hc_rail_down(c, r, false, why, brief);
        return HC_RAIL_LEFT;
    }
    /* The last rail up: leaving it gains nothing; its sockets stay (TCP
     * resumes if the link does) and the peer fails if this lasts. */
    if (!rail->stall_ns) {
        rail->stall_ns = since;
        hc_log_info("tcp: rail %d (%s) to rank %d stalls at %.3f: %s; no other rail is up: "
                    "staying on it (the peer fails after %.1f s of this)",
                    r, hc_rail_ifname(c, r), c->base.peer, hc_rail_wall(), why,
                    (double)c->drv->fail_ns * 1e-9);
    }
    snprintf(rail->why, sizeof(rail->why), "%s", why);
    snprintf(rail->brief, sizeof(rail->brief), "no TCP ack for %.1f s",
             (double)(now - rail->stall_ns) * 1e-9);
    return HC_RAIL_STALLED;
}

/* A rail that was left: a fresh connect of its socket 0 every period. */
static void hc_rail_probe(hc_tcp_conn_t *c, int r, uint64_t now)
{
    hc_tcp_drv_t *d = c->drv;
    hc_tcp_rail_t *rail = &c->rail[r];
    if (now - rail->probe_ns < d->rail_bound_ns || c->bye || d->closing) return;
    rail->probe_ns = now;
    hc_tcp_slot_t *s = hc_rail_slot(c, r, 0);
    if (s->state != HC_TCP_S_NONE) {
        hc_rail_sock_reset(s); /* the last probe did not get through */
        hc_drv_tcp_rail_requeue(s, s);
    }
    d->n_rail_probes++;
    if (hc_drv_tcp_slot_connect(c, s->idx) != HCOMM_OK)
        hc_log_debug("tcp: probe of rail %d to %s: %s", r, c->name, hc_error_last());
}

/* Channels whose frames wait for an acknowledgement too long go back N. */
static void hc_rail_rto(hc_tcp_conn_t *c, uint64_t now)
{
    hc_tcp_drv_t *d = c->drv;
    uint64_t base = HC_MAX(HC_TCP_RAIL_RTO_NS, 4 * d->rail_bound_ns);
    for (int k = 0; k < c->nrails * HC_TCP_RAIL_STRIDE; k++) {
        hc_tcp_chan_t *ch = &c->chan[k];
        if (!ch->pending || !c->rail[ch->cur_rail].up) continue;
        if (!ch->rto_ns) ch->rto_ns = base;
        if (!ch->progress_ns) ch->progress_ns = now; /* queued before the first progress */
        if (now - HC_MIN(ch->progress_ns, now) <= ch->rto_ns) continue;
        uint64_t waited = now - ch->progress_ns;
        unsigned n = hc_rail_resync(c, k, now);
        static const char *const state[] = {"closed", "connecting", "hello sent", "waiting", "up"};
        const hc_tcp_slot_t *dst = hc_rail_slot(c, ch->cur_rail, k % HC_TCP_RAIL_STRIDE);
        hc_log_info("tcp: no acknowledgement from %s of channel %d for %.0f ms (after frame %llu "
                    "of %llu): %u frames go again on socket %d (%s)",
                    c->name, k, (double)waited * 1e-6, (unsigned long long)ch->acked,
                    (unsigned long long)ch->next_seq, n, dst->idx, state[dst->state]);
        ch->rto_ns = HC_MIN(2 * ch->rto_ns, HC_TCP_RAIL_RTO_MAX_NS);
    }
}

void hc_drv_tcp_rail_timer(hc_tcp_conn_t *c, uint64_t now)
{
    hc_tcp_drv_t *d = c->drv;
    for (int k = 0; k < c->nrails * HC_TCP_RAIL_STRIDE; k++)
        if (c->chan[k].rx_frames) /* small frames' coalesced ACKs */
            c->chan[k].ack_due = c->ack_due = d->ack_due = true;
    hc_rail_rto(c, now);
    bool any_up = false, stalled_out = false;
    uint64_t hb_ns = d->rail_bound_ns / 2;
    for (int r = 0; r < c->nrails && !c->failed; r++) {
        hc_tcp_rail_t *rail = &c->rail[r];
        if (!rail->up) {
            hc_rail_probe(c, r, now);
            continue;
        }
        int res = HC_RAIL_OK, worst = HC_RAIL_OK;
        bool hb = false;
        for (int i = 0; i < HC_TCP_RAIL_STRIDE && res != HC_RAIL_LEFT; i++) {
            hc_tcp_slot_t *s = hc_rail_slot(c, r, i);
            if ((s->state == HC_TCP_S_CONNECTING || s->state == HC_TCP_S_WAIT) && !s->err &&
                now + d->hs_ns - s->hs_deadline > d->rail_bound_ns) {
                /* The kernel's handshake (not the peer's process) is late:
                 * a lost SYN waits a second for its retransmit. Or we lost
                 * a tie-break to a socket the peer holds as up but is
                 * stale to us (younger than its replace rule's 10 ms): its
                 * connect never comes; ours goes again, flagged replace. */
                char why[96];
                snprintf(why, sizeof(why), "%s of socket %d not done within %.0f ms",
                         s->state == HC_TCP_S_WAIT ? "the peer's connect" : "connect", s->idx,
                         (double)d->rail_bound_ns * 1e-6);
                hc_drv_tcp_rail_lost(s, false, why);
                res = worst = c->rail[r].up ? HC_RAIL_OK : HC_RAIL_LEFT;
                continue;
            }
            if (s->state != HC_TCP_S_UP && s->state != HC_TCP_S_HELLO_SENT) continue;
            res = hc_rail_watch(s, now);
            worst = HC_MAX(worst, res);
            if (res == HC_RAIL_OK && !hb && !s->txq.head && now - s->last_wr_ns >= hb_ns) {
                d->n_hb_sent++;
                hc_drv_tcp_rail_ctrl(s, HC_TCP_FRAME_HB, 0, 0, 0);
            }
            hb = true; /* one heartbeat per rail */
        }
        if (worst == HC_RAIL_LEFT) continue;
        any_up = true;
        hc_rail_rate_sample(c, r, now);
        hc_rail_rtt_sample(c, r);
        if (worst == HC_RAIL_OK && rail->stall_ns) {
            hc_log_info("tcp: rail %d (%s) to rank %d acknowledges again after %.3f s", r,
                        hc_rail_ifname(c, r), c->base.peer, (double)(now - rail->stall_ns) * 1e-9);
            rail->stall_ns = 0;
        }
        stalled_out |= worst == HC_RAIL_STALLED && now - rail->stall_ns > d->fail_ns;
    }
    if (c->failed) return;
    hc_drv_tcp_rail_order_pick(c);
    if (!any_up) {
        if (!c->all_down_ns) c->all_down_ns = now;
        if (now > c->all_down_ns && now - c->all_down_ns > d->fail_ns)
            hc_rail_fail_all(c, now, false);
        return;
    }
    uint64_t silent = now - HC_MIN(c->last_rx_ns, now);
    if (stalled_out || silent > d->fail_ns) hc_rail_fail_all(c, now, !stalled_out);
}
