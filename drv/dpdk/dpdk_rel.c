/*
 * Reliable delivery for drv/dpdk: sequence numbers, cumulative and
 * selective acknowledgements, retransmission, delay-based congestion
 * control. See dpdk_rel.h.
 */
#include "drv/dpdk/dpdk_rel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HC_REL_DUPTHRESH 3            /* packets sacked past a hole before it is resent */
#define HC_REL_TICK_BUDGET 64         /* retransmissions per tick, per connection */
#define HC_REL_BASE_WINDOW_US 1000000 /* the base delay: the smallest of the last 1-2 s */

/* now - t, 0 when t is later: a caller's clock read before a callback that
 * stamped t (progress reads the time once, its deliveries send). */
static inline uint64_t since(uint64_t now, uint64_t t)
{
    return now > t ? now - t : 0;
}

static inline bool seq_lt(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) < 0;
}

void hc_rel_cfg_default(hc_rel_cfg_t *cfg)
{
    *cfg = (hc_rel_cfg_t){.window = 512,
                          .rto_min = 0.001,
                          .rto_max = 0.2,
                          .peer_timeout = 30.0,
                          .adaptive = true,
                          .target_delay = 200e-6,
                          .target_factor = 1.25,
                          .max_mdf = 0.5,
                          .cwnd_init = 64,
                          .ack_delay = 0,
                          .ack_every = 1};
}

int hc_rel_init(hc_rel_t *r, const hc_rel_cfg_t *cfg, const hc_rel_ops_t *ops, void *arg, char *why,
                size_t why_len)
{
    memset(r, 0, sizeof(*r));
    if (cfg->window < 2 || cfg->window > 4096 || (cfg->window & (cfg->window - 1))) {
        snprintf(why, why_len, "window %u is not a power of two in [2, 4096]", cfg->window);
        return -1;
    }
    if (!(cfg->rto_min > 0) || !(cfg->rto_max >= cfg->rto_min) || !(cfg->peer_timeout > 0) ||
        !(cfg->max_mdf > 0 && cfg->max_mdf < 1) || !(cfg->target_factor >= 1) ||
        !(cfg->target_delay > 0) || !(cfg->cwnd_init >= 1)) {
        snprintf(why, why_len,
                 "bad timing or congestion settings (rto %g..%g s, peer timeout %g s, max_mdf "
                 "%g, target %g s or x%g, cwnd_init %g)",
                 cfg->rto_min, cfg->rto_max, cfg->peer_timeout, cfg->max_mdf, cfg->target_delay,
                 cfg->target_factor, cfg->cwnd_init);
        return -1;
    }
    /* An acknowledgement held as long as the sender's shortest timer would
     * make it retransmit what arrived. */
    if (!(cfg->ack_delay >= 0 && cfg->ack_delay <= cfg->rto_min / 2) || cfg->ack_every < 1 ||
        cfg->ack_every > cfg->window) {
        snprintf(why, why_len,
                 "acknowledgement delay %g s (0 .. half the minimum rto, %g s) or every %u packets "
                 "(1 .. the window, %u)",
                 cfg->ack_delay, cfg->rto_min / 2, cfg->ack_every, cfg->window);
        return -1;
    }
    r->tx = calloc(cfg->window, sizeof(*r->tx));
    r->rx = calloc(cfg->window, sizeof(*r->rx));
    if (!r->tx || !r->rx) {
        free(r->tx);
        free(r->rx);
        r->tx = NULL;
        r->rx = NULL;
        snprintf(why, why_len, "out of memory for a %u-packet window", cfg->window);
        return -1;
    }
    r->cfg = *cfg;
    r->ops = ops;
    r->arg = arg;
    r->mask = cfg->window - 1;
    r->cwnd = cfg->adaptive ? fmin(cfg->cwnd_init, cfg->window) : cfg->window;
    r->rto = fmax(cfg->rto_min, fmin(0.01, cfg->rto_max)); /* before any sample */
    return 0;
}

void hc_rel_drain(hc_rel_t *r, void (*fn)(void *arg, void *pkt, void *cookie), void *arg)
{
    if (!r->tx) return;
    for (uint32_t s = r->snd_una; seq_lt(s, r->snd_nxt); s++) {
        hc_rel_tx_slot_t *t = &r->tx[s & r->mask];
        fn(arg, t->pkt, t->cookie);
        *t = (hc_rel_tx_slot_t){0};
    }
    r->snd_una = r->snd_nxt;
}

void hc_rel_fini(hc_rel_t *r)
{
    if (r->rx) {
        for (uint32_t i = 0; i <= r->mask; i++)
            if (r->rx[i]) r->ops->discard(r->arg, r->rx[i]);
    }
    free(r->tx);
    free(r->rx);
    r->tx = NULL;
    r->rx = NULL;
}

void hc_rel_resume(hc_rel_t *r, uint64_t now)
{
    if (r->snd_una != r->snd_nxt) r->t_progress = now;
}

uint32_t hc_rel_inflight(const hc_rel_t *r)
{
    return r->snd_nxt - r->snd_una;
}

void *hc_rel_oldest(const hc_rel_t *r, uint32_t *retx_p)
{
    const hc_rel_tx_slot_t *t = &r->tx[r->snd_una & r->mask];
    *retx_p = r->snd_una == r->snd_nxt ? 0 : t->retx;
    return r->snd_una == r->snd_nxt ? NULL : t->pkt;
}

bool hc_rel_can_send(const hc_rel_t *r)
{
    uint32_t inflight = hc_rel_inflight(r);
    return inflight < r->cfg.window && (double)inflight < r->cwnd;
}

/* The acknowledgement fields of what we send next. The echo is advanced by
 * the time this side held the stamp: the sender measures the path, not our
 * wait for something to acknowledge with. */
static void hc_rel_fill_ack(hc_rel_t *r, hc_rel_wire_t *w, uint64_t now)
{
    uint64_t sack = 0;
    for (uint32_t i = 0; i < 64 && i < r->mask; i++)
        if (r->rx[(r->rcv_nxt + 1 + i) & r->mask]) sack |= 1ull << i;
    w->ack = r->ack_sent = r->rcv_nxt;
    w->sack = sack;
    w->ts_echo = r->ts_recent;
    w->ts_wait = r->wait_recent;
    r->recent_fresh = false; /* a later duplicate may be answered with its own stamp */
    if (r->ts_recent) {
        w->ts_echo = r->ts_recent + (uint32_t)since(now, r->t_recent);
        if (w->ts_echo == 0) w->ts_echo = 1; /* 0 means "no echo" */
    }
}

static int hc_rel_xmit_slot(hc_rel_t *r, uint32_t seq, uint64_t now)
{
    hc_rel_tx_slot_t *t = &r->tx[seq & r->mask];
    /* Acknowledged without delay when something waits for it: the put's
     * completion (a cookie), a window half used, a retransmission. */
    bool soon = t->cookie || t->t_sent || 2 * (double)hc_rel_inflight(r) >= r->cwnd;
    hc_rel_wire_t w = {.seq = seq, .ts = (uint32_t)now, .kind = HC_REL_DATA, .ack_soon = soon};
    if (w.ts == 0) w.ts = 1; /* 0 means "no echo" */
    hc_rel_fill_ack(r, &w, now);
    if (r->ops->xmit(r->arg, t->pkt, &w) != 0) return -1;
    if (t->t_sent) {
        t->retx++;
        r->n.retransmits++;
    } else {
        r->n.sent++;
    }
    t->t_sent = now;
    r->ack_owed = 0; /* piggybacked */
    r->ack_now = false;
    r->ack_due = false;
    return 0;
}

void hc_rel_send(hc_rel_t *r, void *pkt, void *cookie, uint64_t now)
{
    uint32_t seq = r->snd_nxt++;
    r->tx[seq & r->mask] = (hc_rel_tx_slot_t){.pkt = pkt, .cookie = cookie};
    if (seq == r->snd_una) r->t_progress = now; /* the clock starts with the first in flight */
    /* Keep the order on the wire: a packet waiting for the queue goes first. */
    if (seq == r->snd_una || r->tx[(seq - 1) & r->mask].t_sent) (void)hc_rel_xmit_slot(r, seq, now);
}

static void hc_rel_decrease(hc_rel_t *r, double factor, uint64_t now)
{
    if (!r->cfg.adaptive) return;
    r->cwnd = fmax(1.0, r->cwnd * (1.0 - factor));
    r->t_decrease = now;
}

/* One RTT sample (seconds): RFC 6298 estimators from the whole RTT, then
 * Swift's window rule from the path's delay (the RTT less host delay). */
static void hc_rel_rtt_sample(hc_rel_t *r, double rtt, double delay, uint32_t newly_acked,
                              uint64_t now)
{
    r->n.rtt_samples++;
    if (r->srtt == 0) {
        r->srtt = rtt;
        r->rttvar = rtt / 2;
        r->min_rtt = rtt;
    } else {
        r->rttvar = 0.75 * r->rttvar + 0.25 * fabs(r->srtt - rtt);
        r->srtt = 0.875 * r->srtt + 0.125 * rtt;
        r->min_rtt = fmin(r->min_rtt, rtt);
    }
    r->rto = fmin(r->cfg.rto_max, fmax(r->cfg.rto_min, r->srtt + 4 * r->rttvar));
    /* The base delay, the smallest of the last 1-2 s: long enough that a
     * standing queue does not become the base (a target that followed it
     * grew both windows of two flows without bound). */
    if (r->min_n++ == 0 || delay < r->min_cur) r->min_cur = delay;
    if (since(now, r->t_min) >= HC_REL_BASE_WINDOW_US) {
        r->min_prev = r->min_cur;
        r->min_n = 0;
        r->t_min = now;
    }
    if (!r->cfg.adaptive || newly_acked == 0) return;
    double base = r->min_n ? fmin(r->min_prev, r->min_cur) : r->min_prev;
    double target =
        base > 1.5 * r->cfg.target_delay ? base * r->cfg.target_factor : r->cfg.target_delay;
    if (delay < target) r->cwnd += (double)newly_acked / r->cwnd; /* +1 per round trip */
    /* The decrease reads the standing delay: the smallest of one round
     * trip's samples (Copa's standing RTT). A queue at a bottleneck delays
     * every packet of the round trip; a process that was not scheduled
     * (what the host delay estimate misses) delays some, and the largest
     * sample of each round trip halved the window over and over. */
    if (r->epoch_n++ == 0 || delay < r->epoch_min) r->epoch_min = delay;
    if ((double)since(now, r->t_epoch) * 1e-6 >= r->srtt) {
        double standing = r->epoch_min;
        r->t_epoch = now;
        r->epoch_n = 0;
        if (standing >= target && (double)since(now, r->t_decrease) * 1e-6 >= r->srtt) {
            hc_rel_decrease(r, fmin(r->cfg.max_mdf, 0.8 * (standing - target) / standing), now);
            r->n.delay_decreases++;
        }
    }
    r->cwnd = fmin(r->cwnd, (double)r->cfg.window);
}

static void hc_rel_fast_retransmit(hc_rel_t *r, uint64_t now);

/* The acknowledgement part of any packet from the peer. */
static void hc_rel_on_ack(hc_rel_t *r, const hc_rel_wire_t *w, uint64_t now, uint64_t wait_us)
{
    r->n.acks_received += w->kind == HC_REL_ACK;
    /* An ack outside what we sent is stale or bogus: ignore it. */
    if (seq_lt(w->ack, r->snd_una) || seq_lt(r->snd_nxt, w->ack)) return;
    uint32_t newly = 0;
    while (seq_lt(r->snd_una, w->ack)) {
        hc_rel_tx_slot_t *t = &r->tx[r->snd_una & r->mask];
        void *pkt = t->pkt, *cookie = t->cookie;
        *t = (hc_rel_tx_slot_t){0};
        r->snd_una++;
        newly++;
        r->ops->acked(r->arg, pkt, cookie);
    }
    if (newly) r->t_progress = now;
    uint32_t sacked_past = 0;
    bool have_hole = false;
    for (uint32_t i = 0; i < 64; i++) {
        uint32_t s = w->ack + 1 + i;
        if (!seq_lt(s, r->snd_nxt)) break;
        if (w->sack & (1ull << i)) {
            hc_rel_tx_slot_t *t = &r->tx[s & r->mask];
            if (!t->sacked) newly++;
            t->sacked = true;
            sacked_past++;
        }
    }
    /* The cumulative point itself is the hole when anything past it is in. */
    if (sacked_past && seq_lt(w->ack, r->snd_nxt)) have_hole = true; /* at snd_una */
    /* Only an ack of something new measures the path: the echo on any other
     * packet (the peer's data, a duplicate ack) may be arbitrarily old. */
    if (w->ts_echo && newly) {
        if (r->cwnd_undo > 0) {
            /* The first ack of new data after a timeout: for a transmission
             * made before the timeout, the timeout was spurious. */
            if ((int32_t)(w->ts_echo - r->ts_timeout) < 0) {
                r->cwnd = fmax(r->cwnd, r->cwnd_undo);
                r->n.spurious_timeouts++;
            }
            r->cwnd_undo = 0;
        }
        double rtt = (double)(uint32_t)((uint32_t)now - w->ts_echo) * 1e-6;
        /* Host delay (either side's process not polling) is not the path's:
         * at most the whole RTT, since both are estimates from poll gaps. */
        double host = fmin(rtt, ((double)w->ts_wait + (double)wait_us) * 1e-6);
        if (rtt < 10.0) {
            r->n.host_delay_us += (uint64_t)(host * 1e6);
            r->n.path_delay_us += (uint64_t)((rtt - host) * 1e6);
            hc_rel_rtt_sample(r, rtt, rtt - host, newly, now);
        }
    }
    r->fast_pending = have_hole && sacked_past >= HC_REL_DUPTHRESH;
    hc_rel_fast_retransmit(r, now);
}

/* The hole the receiver reported three packets past goes again, once it has
 * been out for a round trip (it may simply be late); tick checks again when
 * no further ack comes to trigger it. */
static void hc_rel_fast_retransmit(hc_rel_t *r, uint64_t now)
{
    if (!r->fast_pending || r->snd_una == r->snd_nxt) return;
    uint32_t hole = r->snd_una;
    hc_rel_tx_slot_t *t = &r->tx[hole & r->mask];
    if (!t->t_sent || t->sacked || (r->t_fast && hole == r->fast_hole)) return; /* once a hole */
    double out = (double)since(now, t->t_sent) * 1e-6;
    if (out < (r->srtt > 0 ? r->srtt : r->cfg.rto_min / 4)) return;
    if (hc_rel_xmit_slot(r, hole, now) != 0) return;
    r->fast_pending = false;
    r->n.fast_retransmits++;
    if (!seq_lt(hole, r->recover) || r->t_fast == 0) {
        hc_rel_decrease(r, r->cfg.max_mdf / 4, now); /* once per loss episode */
        r->recover = r->snd_nxt;
    }
    r->t_fast = now;
    r->fast_hole = hole;
}

static void hc_rel_on_data(hc_rel_t *r, const hc_rel_wire_t *w, void *pkt, uint64_t now,
                           uint64_t wait_us)
{
    uint32_t s = w->seq;
    r->n.received++;
    /* Echo the newest transmission heard. A duplicate counts only when no
     * new packet has arrived since the last acknowledgement: then it is
     * what the sender waits to hear about (its earlier acknowledgement was
     * lost), and its time stamp is the fresh one. After new packets, the
     * echo names one of them: a burst that brings originals and then their
     * retransmissions (this process did not run for longer than the
     * sender's timeout) tells the sender the timeout was spurious. */
    bool fresh = !seq_lt(s, r->rcv_nxt) && seq_lt(s, r->rcv_nxt + r->cfg.window) &&
                 (s == r->rcv_nxt || !r->rx[s & r->mask]);
    if (r->ts_recent == 0 || ((int32_t)(w->ts - r->ts_recent) > 0 && (fresh || !r->recent_fresh))) {
        r->ts_recent = w->ts;
        r->t_recent = now;
        r->wait_recent = (uint32_t)wait_us;
        r->recent_fresh = fresh;
    }
    if (seq_lt(s, r->rcv_nxt)) {
        r->n.duplicates++;
        r->ack_now = true; /* the sender missed our ack */
        r->ops->discard(r->arg, pkt);
        return;
    }
    if (!seq_lt(s, r->rcv_nxt + r->cfg.window)) {
        r->n.beyond_window++;
        r->ops->discard(r->arg, pkt);
        return;
    }
    if (r->ack_owed++ == 0) r->t_owed = now;
    if (w->ack_soon) r->ack_due = true;
    if (s != r->rcv_nxt) {
        void **slot = &r->rx[s & r->mask];
        if (*slot) {
            r->n.duplicates++;
            r->ops->discard(r->arg, pkt);
        } else {
            r->n.out_of_order++;
            *slot = pkt;
        }
        r->ack_now = true; /* a hole: tell the sender at once */
        return;
    }
    /* In order: deliver it and whatever it unblocks. rcv_nxt moves before
     * each deliver, which may send (and so read the ack fields). */
    r->rcv_nxt++;
    r->ops->deliver(r->arg, pkt);
    for (;;) {
        void **slot = &r->rx[r->rcv_nxt & r->mask];
        if (!*slot) break;
        void *next = *slot;
        *slot = NULL;
        r->rcv_nxt++;
        r->ops->deliver(r->arg, next);
    }
    /* A send from inside a deliver took the acknowledgement with it and
     * cleared what was owed, but it named a point the run has since passed:
     * the rest is owed still. The sender holds those packets as selectively
     * acknowledged and does not retransmit them, so nothing else would make
     * us tell it (a 5%-loss allreduce hung here). */
    if (r->ack_sent != r->rcv_nxt && r->ack_owed == 0) {
        r->ack_owed = 1;
        r->t_owed = now;
        r->ack_due = r->ack_due || w->ack_soon;
    }
}

void hc_rel_input(hc_rel_t *r, const hc_rel_wire_t *w, void *pkt, uint64_t now, uint64_t wait_us)
{
    hc_rel_on_ack(r, w, now, wait_us);
    if (w->kind == HC_REL_DATA && pkt) hc_rel_on_data(r, w, pkt, now, wait_us);
    if (r->ack_now) hc_rel_flush(r, now, false);
}

bool hc_rel_ack_owed(const hc_rel_t *r)
{
    return r->ack_owed || r->ack_now;
}

void hc_rel_flush(hc_rel_t *r, uint64_t now, bool force)
{
    if (!r->ack_owed && !r->ack_now) return;
    if (!force && !r->ack_now && !r->ack_due && r->ack_owed < r->cfg.ack_every &&
        (double)since(now, r->t_owed) * 1e-6 < r->cfg.ack_delay)
        return; /* may still ride on data */
    hc_rel_wire_t w = {.seq = r->snd_nxt, .ts = (uint32_t)now, .kind = HC_REL_ACK};
    hc_rel_fill_ack(r, &w, now);
    if (r->ops->ack(r->arg, &w) == 0) {
        r->n.acks_sent++;
        r->ack_owed = 0;
        r->ack_now = false;
        r->ack_due = false;
    }
}

bool hc_rel_tick(hc_rel_t *r, uint64_t now)
{
    if (r->snd_una == r->snd_nxt) return true;
    if ((double)since(now, r->t_progress) * 1e-6 > r->cfg.peer_timeout) return false;
    hc_rel_fast_retransmit(r, now);
    unsigned budget = HC_REL_TICK_BUDGET;
    bool expired = false;
    uint64_t rto_us = (uint64_t)(r->rto * 1e6);
    for (uint32_t s = r->snd_una; seq_lt(s, r->snd_nxt) && budget; s++) {
        hc_rel_tx_slot_t *t = &r->tx[s & r->mask];
        /* A selectively acknowledged packet is not sent again, except the
         * oldest at its timeout: that it is still unacknowledged means the
         * acknowledgements contradict each other (one was lost, or the
         * receiver reneged), and the duplicate makes the receiver say where
         * it stands (RFC 2018: SACK is advisory until acknowledged). */
        if (t->sacked && s != r->snd_una) continue;
        if (t->t_sent == 0) {
            /* Queued behind a full transmit queue: in order, stop at the first refusal. */
            if (hc_rel_xmit_slot(r, s, now) != 0) break;
            budget--;
            continue;
        }
        if (since(now, t->t_sent) < rto_us) continue; /* later ones may be queued, unsent */
        if (hc_rel_xmit_slot(r, s, now) != 0) break;
        budget--;
        expired = true;
    }
    if (expired) {
        r->n.timeouts++;
        if (r->cwnd_undo == 0) {
            r->cwnd_undo = r->cwnd;
            r->ts_timeout = (uint32_t)now;
        }
        r->rto = fmin(r->cfg.rto_max, r->rto * 2); /* back off until a sample */
        hc_rel_decrease(r, r->cfg.max_mdf, now);
    }
    return true;
}
