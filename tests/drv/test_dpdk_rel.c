/* drv/dpdk/dpdk_rel.c without DPDK: two (or four) hc_rel_t endpoints over a
 * simulated link with a virtual clock (microseconds; nothing sleeps). The
 * link has a one-way delay, jitter (reordering), seeded random loss and
 * duplication, an optional bottleneck (packets per microsecond, a queue that
 * adds delay, tail drop past qmax) that flows may share, and a transmit path
 * that refuses (-1) on demand. Every message is checked at delivery (number,
 * payload), every acknowledgement against the send order, counters against
 * what the harness saw, and every allocation is freed by the end. */
#include "drv/dpdk/dpdk_rel.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define T0 1000000u /* virtual clock start: rel takes t_sent 0 for "not sent yet" */
#define BODY 24
#define MAX_EP 4
#define SEQ_WRAP 0xFFFFFF00u
#define ULL(x) ((unsigned long long)(x))
#define PLAIN(us) ((link_t){.delay = (us)}) /* fixed delay, nothing else */

typedef struct {
    uint64_t num;
    uint8_t body[BODY];
} msg_t;

static long live; /* msg_t allocated and not yet freed: 0 at the end of each case */

static uint8_t body_byte(uint64_t num, int src, int i)
{
    return (uint8_t)(num * 131 + (uint64_t)src * 17 + (uint64_t)i * 7);
}

static msg_t *msg_new(uint64_t num, int src, const msg_t *copy_of)
{
    msg_t *m = malloc(sizeof(*m));
    assert_non_null(m);
    live++;
    if (copy_of) {
        *m = *copy_of;
        return m;
    }
    m->num = num;
    for (int i = 0; i < BODY; i++)
        m->body[i] = body_byte(num, src, i);
    return m;
}

static void msg_free(msg_t *m)
{
    live--;
    free(m);
}

static void *cookie_of(uint64_t num)
{
    return (void *)(uintptr_t)(0x10000 + num);
}

static uint64_t rng_next(uint64_t *s) /* splitmix64: deterministic per seed */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * 0x1p-53;
}

typedef struct {
    double rate;    /* packets per microsecond */
    double qmax;    /* packets waiting before tail drop */
    double free_at; /* us: when the last queued packet has left */
    uint64_t drops;
} bneck_t;

typedef struct {
    uint32_t delay, jitter; /* us */
    double loss, dup;
    bneck_t *bn;                   /* NULL: unlimited rate */
    uint64_t drop_base, drop_mask; /* every copy of message drop_base + i, bit i set, is lost */
    uint64_t drop_once;            /* only the first transmission of those, bit i set, is lost */
} link_t;

typedef struct {
    uint64_t at, order;
    hc_rel_wire_t w;
    msg_t *m; /* DATA: the link's own copy (the sender keeps its packet) */
} wpkt_t;

typedef struct {
    wpkt_t **v;
    size_t n, cap;
} heap_t; /* min-heap by arrival time, then send order */

struct sim;
typedef struct ep {
    hc_rel_t r;
    struct sim *sim;
    int id;
    struct ep *peer;
    link_t link; /* towards peer */
    heap_t in;   /* arriving from peer, by arrival time */
    uint32_t seq0;
    bool hold, dead, refuse_all;
    bool no_cookie;       /* sends without a cookie (nothing waits for the acknowledgement) */
    bool echo;            /* sends one message for each delivered (request/response) */
    unsigned refuse_pct;  /* xmit and ack refuse this share of calls */
    uint64_t refuse_from; /* xmit refuses messages from this number on */
    uint64_t gap_us, last_send;
    uint64_t slice_us, slice_phase; /* polls only in alternate slices (a process sharing a
                                       core), its first slice starting at slice_phase */
    bool report_wait;               /* passes its poll gap to hc_rel_input as host delay */
    uint64_t t_poll;
    uint64_t n_msgs, next_msg, acked_next, delivered, first_tx_next;
    uint64_t xmit_ok, acks_ok, data_in, acks_in, discards, dead_at;
    double srtt_max;
} ep_t;

typedef struct sim {
    uint64_t now, order, tick_us, rng;
    ep_t ep[MAX_EP];
    int n;
} sim_t;

static bool wp_before(const wpkt_t *a, const wpkt_t *b)
{
    return a->at != b->at ? a->at < b->at : a->order < b->order;
}

static void heap_push(heap_t *h, wpkt_t *p)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 256;
        h->v = realloc(h->v, h->cap * sizeof(*h->v));
        assert_non_null(h->v);
    }
    size_t i = h->n++;
    for (; i && wp_before(p, h->v[(i - 1) / 2]); i = (i - 1) / 2)
        h->v[i] = h->v[(i - 1) / 2];
    h->v[i] = p;
}

static wpkt_t *heap_pop(heap_t *h)
{
    wpkt_t *top = h->v[0], *last = h->v[--h->n];
    size_t i = 0;
    for (size_t c; (c = 2 * i + 1) < h->n; i = c) {
        if (c + 1 < h->n && wp_before(h->v[c + 1], h->v[c])) c++;
        if (!wp_before(h->v[c], last)) break;
        h->v[i] = h->v[c];
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* Loss, then the bottleneck's queue, then delay + jitter; a duplicate is
 * a second, independent trip. */
static void link_send(ep_t *e, const hc_rel_wire_t *w, const msg_t *m)
{
    sim_t *s = e->sim;
    link_t *l = &e->link;
    if (m && m->num - l->drop_base < 64 && (l->drop_mask >> (m->num - l->drop_base) & 1)) return;
    if (m && m->num - l->drop_base < 64 && (l->drop_once >> (m->num - l->drop_base) & 1)) {
        l->drop_once &= ~(1ull << (m->num - l->drop_base));
        return;
    }
    int copies = 1 + (l->dup > 0 && rng_unit(&s->rng) < l->dup);
    for (int c = 0; c < copies; c++) {
        if (l->loss > 0 && rng_unit(&s->rng) < l->loss) continue;
        double t = (double)s->now;
        if (l->bn) {
            bneck_t *b = l->bn;
            double start = fmax(t, b->free_at);
            if ((start - t) * b->rate >= b->qmax) {
                b->drops++;
                continue;
            }
            t = b->free_at = start + 1.0 / b->rate;
        }
        wpkt_t *p = malloc(sizeof(*p));
        assert_non_null(p);
        p->at = (uint64_t)ceil(t) + l->delay;
        if (l->jitter) p->at += rng_next(&s->rng) % (l->jitter + 1);
        p->order = s->order++;
        p->w = *w;
        p->m = m ? msg_new(0, 0, m) : NULL;
        heap_push(&e->peer->in, p);
    }
}

static bool refuse(ep_t *e)
{
    return e->refuse_all || (e->refuse_pct && rng_next(&e->sim->rng) % 100 < e->refuse_pct);
}

static int cb_xmit(void *arg, void *pkt, const hc_rel_wire_t *w)
{
    ep_t *e = arg;
    msg_t *m = pkt;
    if (refuse(e) || m->num >= e->refuse_from) return -1;
    assert_int_equal(w->kind, HC_REL_DATA);
    assert_int_equal((uint32_t)(w->seq - e->seq0), (uint32_t)m->num); /* seq names the message */
    if (m->num >= e->first_tx_next) { /* first transmissions leave in order, no gap */
        assert_int_equal(m->num, e->first_tx_next);
        e->first_tx_next++;
    }
    e->xmit_ok++;
    link_send(e, w, m);
    return 0;
}

static int cb_ack(void *arg, const hc_rel_wire_t *w)
{
    ep_t *e = arg;
    if (refuse(e)) return -1;
    assert_int_equal(w->kind, HC_REL_ACK);
    e->acks_ok++;
    link_send(e, w, NULL);
    return 0;
}

static void cb_acked(void *arg, void *pkt, void *cookie)
{
    ep_t *e = arg;
    msg_t *m = pkt;
    assert_int_equal(m->num, e->acked_next); /* exactly once, in send order */
    assert_ptr_equal(cookie, e->no_cookie ? NULL : cookie_of(m->num));
    e->acked_next++;
    msg_free(m);
}

static void cb_deliver(void *arg, void *pkt)
{
    ep_t *e = arg;
    msg_t *m = pkt;
    assert_int_equal(m->num, e->delivered); /* exactly once, in order */
    for (int i = 0; i < BODY; i++)
        assert_int_equal(m->body[i], body_byte(m->num, e->peer->id, i));
    e->delivered++;
    msg_free(m);
    if (e->echo && e->next_msg < e->n_msgs && hc_rel_can_send(&e->r)) {
        hc_rel_send(&e->r, msg_new(e->next_msg, e->id, NULL),
                    e->no_cookie ? NULL : cookie_of(e->next_msg), e->sim->now);
        e->next_msg++;
    }
}

static void cb_discard(void *arg, void *pkt)
{
    ((ep_t *)arg)->discards++;
    msg_free(pkt);
}

static const hc_rel_ops_t ops = {cb_xmit, cb_acked, cb_ack, cb_deliver, cb_discard};

static hc_rel_cfg_t dcfg(void)
{
    hc_rel_cfg_t cfg;
    hc_rel_cfg_default(&cfg);
    return cfg;
}

static sim_t *sim_new(uint64_t seed)
{
    sim_t *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->now = T0;
    s->tick_us = 10;
    s->rng = seed;
    live = 0;
    return s;
}

/* The next endpoint: talks to endpoint peer over link, has n messages to send. */
static ep_t *ep_add(sim_t *s, int peer, const hc_rel_cfg_t *cfg, link_t link, uint64_t n)
{
    ep_t *e = &s->ep[s->n];
    char why[256] = "";
    *e = (ep_t){.sim = s,
                .id = s->n++,
                .peer = &s->ep[peer],
                .link = link,
                .n_msgs = n,
                .refuse_from = UINT64_MAX};
    int rc = hc_rel_init(&e->r, cfg, &ops, e, why, sizeof(why));
    if (rc) print_message("init: %s\n", why);
    assert_int_equal(rc, 0);
    return e;
}

/* Endpoints 0 (a, n_a messages) and 1 (n_b messages) over fixed-delay links. */
static ep_t *plain_pair(sim_t *s, const hc_rel_cfg_t *cfg, uint32_t us, uint64_t n_a, uint64_t n_b,
                        ep_t **b_p)
{
    ep_t *a = ep_add(s, 1, cfg, PLAIN(us), n_a);
    ep_t *b = ep_add(s, 0, cfg, PLAIN(us), n_b);
    if (b_p) *b_p = b;
    return a;
}

static void feed(sim_t *s, ep_t *e)
{
    while (!e->echo && e->next_msg < e->n_msgs && hc_rel_can_send(&e->r) &&
           (!e->gap_us || s->now - e->last_send >= e->gap_us)) {
        hc_rel_send(&e->r, msg_new(e->next_msg, e->id, NULL),
                    e->no_cookie ? NULL : cookie_of(e->next_msg), s->now);
        e->next_msg++;
        e->last_send = s->now;
    }
}

/* One poll of every endpoint not held: receive burst, send, flush, timers;
 * then the clock moves to the next arrival, or by one tick. */
static void sim_step(sim_t *s)
{
    for (int i = 0; i < s->n; i++) {
        ep_t *e = &s->ep[i];
        if (e->hold) continue;
        if (e->slice_us && ((s->now - T0 + 2 * e->slice_us - e->slice_phase) / e->slice_us) % 2)
            continue; /* not scheduled */
        uint64_t gap = e->t_poll ? s->now - e->t_poll : 0;
        uint64_t wait = e->report_wait && gap > 20 ? gap : 0;
        e->t_poll = s->now;
        while (e->in.n && e->in.v[0]->at <= s->now) {
            wpkt_t *p = heap_pop(&e->in);
            e->data_in += p->w.kind == HC_REL_DATA;
            e->acks_in += p->w.kind == HC_REL_ACK;
            hc_rel_input(&e->r, &p->w, p->m, s->now, wait);
            free(p);
        }
        feed(s, e);
        hc_rel_flush(&e->r, s->now, false);
        if (!e->dead && !hc_rel_tick(&e->r, s->now)) {
            e->dead = true;
            e->dead_at = s->now;
        }
        e->srtt_max = fmax(e->srtt_max, e->r.srtt);
    }
    uint64_t next = s->now + s->tick_us;
    for (int i = 0; i < s->n; i++) {
        ep_t *e = &s->ep[i];
        if (!e->hold && e->in.n && e->in.v[0]->at < next) next = e->in.v[0]->at;
    }
    s->now = next > s->now ? next : s->now + 1;
}

static void sim_until(sim_t *s, uint64_t t)
{
    while (s->now < t)
        sim_step(s);
}

static bool sim_done(const sim_t *s)
{
    for (int i = 0; i < s->n; i++) {
        const ep_t *e = &s->ep[i];
        if (e->delivered != e->peer->n_msgs || e->acked_next != e->n_msgs || hc_rel_inflight(&e->r))
            return false;
    }
    return true;
}

/* Steps until everything is delivered and acked: the clock then (us after
 * T0), or UINT64_MAX once limit_us has passed first. */
static uint64_t sim_run(sim_t *s, uint64_t limit_us)
{
    for (uint64_t t0 = s->now; !sim_done(s); sim_step(s))
        if (s->now - t0 > limit_us) return UINT64_MAX;
    return s->now - T0;
}

static uint64_t drained, drain_next;

static void drain_fn(void *arg, void *pkt, void *cookie)
{
    msg_t *m = pkt;
    assert_int_equal(m->num, drain_next); /* oldest first, each once */
    assert_ptr_equal(cookie, ((ep_t *)arg)->no_cookie ? NULL : cookie_of(m->num));
    drain_next++;
    drained++;
    msg_free(m);
}

/* Everything back: unacked packets, kept ones, the link's copies. */
static void sim_free(sim_t *s)
{
    for (int i = 0; i < s->n; i++) {
        ep_t *e = &s->ep[i];
        drain_next = e->acked_next;
        hc_rel_drain(&e->r, drain_fn, e);
        hc_rel_fini(&e->r);
        while (e->in.n) {
            wpkt_t *p = heap_pop(&e->in);
            if (p->m) msg_free(p->m);
            free(p);
        }
        free(e->in.v);
    }
    free(s);
    assert_int_equal(live, 0);
}

/* Counter identities once a run is done (nothing kept out of order). */
static void check_counters(const ep_t *e)
{
    const hc_rel_counters_t *n = &e->r.n;
    assert_int_equal(n->sent, e->n_msgs);
    assert_int_equal(e->first_tx_next, e->n_msgs);
    assert_int_equal(e->xmit_ok, n->sent + n->retransmits);
    assert_true(n->retransmits >= n->fast_retransmits);
    assert_int_equal(n->received, e->data_in);
    assert_true(n->received >= e->delivered);
    assert_int_equal(n->received, e->delivered + n->duplicates + n->beyond_window);
    assert_int_equal(n->acks_received, e->acks_in);
    assert_int_equal(n->acks_sent, e->acks_ok);
    assert_int_equal(hc_rel_inflight(&e->r), 0);
}

static void report(const char *tag, int i, const ep_t *e)
{
    const hc_rel_counters_t *n = &e->r.n;
    print_message("%s ep%d: %.2f ms, delivered %llu, retx %llu (fast %llu, timeouts %llu), dup "
                  "%llu, ooo %llu, acks %llu, cwnd %.1f, srtt %.1f us (max %.1f)\n",
                  tag, i, (double)(e->sim->now - T0) / 1e3, ULL(e->delivered), ULL(n->retransmits),
                  ULL(n->fast_retransmits), ULL(n->timeouts), ULL(n->duplicates),
                  ULL(n->out_of_order), ULL(n->acks_sent), e->r.cwnd, e->r.srtt * 1e6,
                  e->srtt_max * 1e6);
}

/* 1: lossless fixed delay, both ways at once: no retransmission at all. */
static void test_clean(void **state)
{
    (void)state;
    hc_rel_cfg_t cfg = dcfg();
    sim_t *s = sim_new(1);
    ep_add(s, 1, &cfg, PLAIN(10), 100000);
    ep_add(s, 0, &cfg, PLAIN(10), 100000);
    assert_true(sim_run(s, 10000000) != UINT64_MAX);
    for (int i = 0; i < 2; i++) {
        ep_t *e = &s->ep[i];
        report("clean", i, e);
        check_counters(e);
        assert_int_equal(e->delivered, 100000);
        assert_int_equal(e->r.n.retransmits + e->r.n.timeouts + e->r.n.fast_retransmits, 0);
        assert_int_equal(e->r.n.duplicates + e->r.n.out_of_order + e->discards, 0);
    }
    sim_free(s);
}

/* 2: loss each way, reordering, 1% duplicates: still exactly once, in
 * order (the callbacks check). Time and srtt bounds are asserted after all
 * three runs, so that a failure shows every run's numbers. */
static void test_lossy(void **state)
{
    (void)state;
    static const double loss[] = {0.01, 0.05, 0.20};
    /* A sound RTT estimate (the path's 40..60 us) keeps the RTO near rto_min
     * (1 ms); the losses then cost timeouts and halved cwnds. The bounds
     * leave 3x or more over what that takes. */
    static const uint64_t bound_us[] = {1000000, 2000000, 10000000};
    uint64_t took[3];
    double srtt_max[3] = {0};
    for (int k = 0; k < 3; k++) {
        hc_rel_cfg_t cfg = dcfg();
        sim_t *s = sim_new(100 + (uint64_t)k);
        link_t l = {.delay = 20, .jitter = 10, .loss = loss[k], .dup = 0.01};
        ep_add(s, 1, &cfg, l, 20000);
        ep_add(s, 0, &cfg, l, 20000);
        took[k] = sim_run(s, bound_us[k]);
        for (int i = 0; i < 2; i++) {
            ep_t *e = &s->ep[i];
            char tag[32];
            snprintf(tag, sizeof(tag), "loss %2.0f%%%s", loss[k] * 100,
                     took[k] == UINT64_MAX ? " NOT DONE" : "");
            report(tag, i, e);
            srtt_max[k] = fmax(srtt_max[k], e->srtt_max);
            if (took[k] == UINT64_MAX) continue;
            check_counters(e);
            assert_true(e->r.n.retransmits > 0);
            assert_true(e->r.n.duplicates > 0);
            assert_true(e->r.n.out_of_order > 0);
            if (k >= 1) assert_true(e->r.n.fast_retransmits > 0);
        }
        sim_free(s);
    }
    for (int k = 0; k < 3; k++) {
        assert_true(took[k] != UINT64_MAX);
        /* Under 100 path RTTs: a lost ack lengthens the next sample, no more. */
        assert_true(srtt_max[k] < 5e-3);
    }
}

/* 2b: a hole reported with 19 packets sacked past it is resent at once
 * (dpdk_rel.h: "sooner" than the timeout), also when no acknowledgement
 * follows those: here the sender has nothing more to send. */
static void test_fast_retx_tail(void **state)
{
    (void)state;
    hc_rel_cfg_t cfg = dcfg();
    sim_t *s = sim_new(12);
    ep_t *b, *a = plain_pair(s, &cfg, 20, 100, 0, &b);
    assert_true(sim_run(s, 100000) != UINT64_MAX); /* srtt: the path's 40 us */
    a->link.drop_base = 100;
    a->link.drop_mask = 1; /* message 100 is lost, every copy */
    a->n_msgs = 120;
    sim_until(s, s->now + 500); /* 12 round trips; the RTO is 1 ms */
    print_message("tail loss: %llu sacked past the hole; after 500 us: fast retx %llu, timeouts "
                  "%llu (srtt %.1f us, rto %.2f ms)\n",
                  ULL(b->r.n.out_of_order), ULL(a->r.n.fast_retransmits), ULL(a->r.n.timeouts),
                  a->r.srtt * 1e6, a->r.rto * 1e3);
    uint64_t ooo = b->r.n.out_of_order, fast = a->r.n.fast_retransmits;
    a->link.drop_mask = 0;
    assert_true(sim_run(s, 100000) != UINT64_MAX);
    sim_free(s); /* before the checks: nothing leaks when they fail */
    assert_int_equal(ooo, 19);
    assert_int_equal(fast, 1);
}

/* 2c: the RTT estimate is the path's whatever the peer sends: B streaming
 * to an idle A (its packets echo A's last, old time stamp) must not make
 * A's srtt (so its RTO and fast-retransmit spacing) the age of that stamp. */
static void test_rtt_idle_sender(void **state)
{
    (void)state;
    hc_rel_cfg_t cfg = dcfg();
    sim_t *s = sim_new(10);
    ep_t *b, *a = plain_pair(s, &cfg, 10, 10, 0, &b);
    assert_true(sim_run(s, 100000) != UINT64_MAX);
    double srtt0 = a->r.srtt;
    b->n_msgs = 2000;
    b->gap_us = 50; /* 100 ms of traffic B -> A, nothing A -> B */
    assert_true(sim_run(s, 1000000) != UINT64_MAX);
    print_message("idle sender: srtt %.1f us before, %.1f us after 100 ms of peer data; rto "
                  "%.1f ms\n",
                  srtt0 * 1e6, a->r.srtt * 1e6, a->r.rto * 1e3);
    double srtt = a->r.srtt, rto = a->r.rto;
    sim_free(s);
    assert_true(srtt < 10 * srtt0 + 100e-6);
    assert_true(rto <= 2 * cfg.rto_min);
}

/* 2d: the receiver answers with data while it delivers a run that a
 * retransmission unblocked: message 0 is lost once, 1-9 arrive and are
 * selectively acknowledged; when 0 comes again, its delivery makes B send
 * its one message, whose acknowledgement fields name 1 (still held, about
 * to be delivered). B must still acknowledge 2-9 once it has delivered them:
 * A holds them as selectively acknowledged and (rightly) never retransmits
 * them on its own, so without that acknowledgement nothing more happens
 * (a 32 MiB allreduce over af_packet at 5% loss hung this way). A needs no
 * timeout for it. */
static void test_ack_after_drain(void **state)
{
    (void)state;
    hc_rel_cfg_t cfg = dcfg();
    sim_t *s = sim_new(41);
    ep_t *b, *a = plain_pair(s, &cfg, 20, 10, 1, &b);
    b->echo = true; /* its message goes from inside the delivery of A's message 0 */
    a->link.drop_once = 1;
    uint64_t took = sim_run(s, 1000000);
    report("ack after drain", 0, a);
    uint64_t retx = a->r.n.retransmits, timeouts = a->r.n.timeouts;
    sim_free(s);
    assert_true(took != UINT64_MAX);
    assert_int_equal(retx, 1); /* message 0, by fast retransmission */
    assert_int_equal(timeouts, 0);
}

/* 2e: acknowledgements that contradict each other (selective ones that a
 * later cumulative one takes back: RFC 2018 lets a receiver renege) leave
 * A's oldest packet marked as received but unacknowledged. A selectively
 * acknowledged packet is not retransmitted, but the oldest one goes again
 * at its timeout all the same: B, which holds everything and owes nothing,
 * answers the duplicate with the acknowledgement that ends it. */
static void test_sacked_head_retransmitted(void **state)
{
    (void)state;
    hc_rel_cfg_t cfg = dcfg();
    sim_t *s = sim_new(43);
    ep_t *b, *a = plain_pair(s, &cfg, 20, 10, 0, &b);
    b->link.loss = 1.0; /* B's acknowledgements are all lost for now */
    sim_until(s, s->now + 200);
    assert_int_equal(b->delivered, 10);
    hc_rel_wire_t w = {.seq = 0, .ack = a->seq0, .sack = 0x1ff, .kind = HC_REL_ACK};
    hc_rel_input(&a->r, &w, NULL, s->now, 0); /* 1-9 received, 0 not */
    w.ack = a->seq0 + 1;
    w.sack = 0;
    hc_rel_input(&a->r, &w, NULL, s->now, 0); /* 0 received, nothing past it */
    assert_int_equal(a->acked_next, 1);
    b->link.loss = 0;
    uint64_t took = sim_run(s, 1000000);
    print_message("sacked head: done after %.2f ms, %llu timeouts\n",
                  took == UINT64_MAX ? -1.0 : (double)took / 1e3, ULL(a->r.n.timeouts));
    sim_free(s);
    assert_true(took != UINT64_MAX);
}

/* 3: the transmit queue refuses 30% of data and ack calls (and 1% loss): a
 * refused packet goes out later, still in order (cb_xmit checks). */
static void test_refusals(void **state)
{
    (void)state;
    hc_rel_cfg_t cfg = dcfg();
    sim_t *s = sim_new(3);
    link_t l = {.delay = 10, .jitter = 4, .loss = 0.01};
    ep_t *a = ep_add(s, 1, &cfg, l, 20000);
    ep_t *b = ep_add(s, 0, &cfg, l, 20000);
    a->refuse_pct = b->refuse_pct = 30;
    uint64_t took = sim_run(s, 5000000);
    report("refusals", 0, a);
    report("refusals", 1, b);
    assert_true(took != UINT64_MAX);
    check_counters(a);
    check_counters(b);
    sim_free(s);
}

/* 3b: a packet the queue refused goes out at the next tick once the queue
 * has room (dpdk_rel.h: "if the queue is full it is sent by a later tick"),
 * not only once the packets before it are acked or time out. */
static void test_refused_sent_by_next_tick(void **state)
{
    (void)state;
    hc_rel_cfg_t cfg = dcfg();
    sim_t *s = sim_new(33);
    ep_t *a = plain_pair(s, &cfg, 1000, 2, 0, NULL);
    hc_rel_send(&a->r, msg_new(0, a->id, NULL), cookie_of(0), s->now);
    a->refuse_all = true; /* the queue is full for the second one */
    hc_rel_send(&a->r, msg_new(1, a->id, NULL), cookie_of(1), s->now);
    a->next_msg = 2;
    assert_int_equal(a->r.n.sent, 1);
    a->refuse_all = false;
    s->now += 5;
    assert_true(hc_rel_tick(&a->r, s->now));
    print_message("refused packet: sent %llu after the next tick (expected 2)\n", ULL(a->r.n.sent));
    uint64_t sent = a->r.n.sent;
    sim_free(s);
    assert_int_equal(sent, 2);
}

/* 4: a receiver that stops polling: the sender fills its window and stops;
 * it resumes; held past peer_timeout with data in flight, tick fails. */
static void test_stalled_receiver(void **state)
{
    (void)state;
    hc_rel_cfg_t cfg = dcfg();
    sim_t *s = sim_new(4);
    ep_t *b, *a = plain_pair(s, &cfg, 10, 20000, 0, &b);
    sim_until(s, T0 + 2000);
    b->hold = true;
    uint64_t got = b->delivered;
    sim_until(s, s->now + 20000);
    uint32_t inflight = hc_rel_inflight(&a->r);
    print_message("stalled: inflight %u, cwnd %.1f, timeouts %llu, rto %.1f ms\n", inflight,
                  a->r.cwnd, ULL(a->r.n.timeouts), a->r.rto * 1e3);
    assert_false(hc_rel_can_send(&a->r));
    assert_true(inflight <= cfg.window);
    assert_true(inflight == cfg.window || (double)inflight >= a->r.cwnd);
    assert_false(a->dead);
    assert_int_equal(b->delivered, got);
    assert_true(a->r.n.timeouts > 0); /* it kept probing */
    uint32_t retx;
    assert_non_null(hc_rel_oldest(&a->r, &retx)); /* what the driver's stall warning reads */
    assert_true(retx > 0);
    b->hold = false;
    assert_true(sim_run(s, 5000000) != UINT64_MAX);
    check_counters(a);
    assert_null(hc_rel_oldest(&a->r, &retx));
    assert_int_equal(retx, 0);
    sim_free(s);

    /* peer_timeout 50 ms: idle with a held peer is fine, data in flight is not. */
    cfg.peer_timeout = 0.05;
    s = sim_new(5);
    a = ep_add(s, 1, &cfg, PLAIN(10), 1000);
    b = ep_add(s, 0, &cfg, PLAIN(10), 0);
    assert_true(sim_run(s, 1000000) != UINT64_MAX);
    b->hold = true;
    sim_until(s, s->now + 100000);
    assert_false(a->dead);
    a->n_msgs = 2000;
    uint64_t t_send = s->now;
    sim_until(s, s->now + 200000);
    assert_true(a->dead);
    print_message("peer timeout: tick false %.3f ms after the first unanswered send\n",
                  (double)(a->dead_at - t_send) / 1e3);
    assert_true(a->dead_at > t_send + 50000);
    assert_true(a->dead_at <= t_send + 50000 + 2 * s->tick_us);
    uint32_t left = hc_rel_inflight(&a->r);
    drain_next = a->acked_next, drained = 0;
    hc_rel_drain(&a->r, drain_fn, a);
    assert_int_equal(drained, left);
    sim_free(s);
}

typedef struct {
    double tput, srtt_max, cwnd_min, cwnd_max, cwnd_mean, min_rtt;
} cc_result_t;

/* Flows e[0..nf) through bottleneck bn, measured from t_meas to t_end (us
 * after T0); cwnd and srtt sampled every 100 us, printed every print_us. */
static void cc_run(sim_t *s, ep_t **e, int nf, const bneck_t *bn, uint64_t t_meas, uint64_t t_end,
                   uint64_t print_us, cc_result_t *res)
{
    uint64_t d0[MAX_EP] = {0}, samples = 0;
    for (int f = 0; f < nf; f++)
        res[f] = (cc_result_t){.cwnd_min = 1e9};
    for (uint64_t t = 0; t <= t_end; t += 100) {
        sim_until(s, T0 + t);
        for (int f = 0; f < nf && t % print_us == 0; f++)
            print_message("  t %3llu ms flow %d: cwnd %6.1f srtt %7.1f us min_rtt %6.1f us "
                          "delivered %llu\n",
                          ULL(t / 1000), f, e[f]->r.cwnd, e[f]->r.srtt * 1e6, e[f]->r.min_rtt * 1e6,
                          ULL(e[f]->peer->delivered));
        for (int f = 0; f < nf && t == t_meas; f++)
            d0[f] = e[f]->peer->delivered;
        if (t < t_meas) continue;
        samples++;
        for (int f = 0; f < nf; f++) {
            cc_result_t *r = &res[f];
            r->srtt_max = fmax(r->srtt_max, e[f]->r.srtt);
            r->cwnd_min = fmin(r->cwnd_min, e[f]->r.cwnd);
            r->cwnd_max = fmax(r->cwnd_max, e[f]->r.cwnd);
            r->cwnd_mean += e[f]->r.cwnd;
        }
    }
    for (int f = 0; f < nf; f++) {
        res[f].cwnd_mean /= (double)samples;
        res[f].min_rtt = e[f]->r.min_rtt;
        res[f].tput = (double)(e[f]->peer->delivered - d0[f]) / (double)(t_end - t_meas) / bn->rate;
    }
}

/* One flow A -> B: 0.5 packets/us, 50 us each way (BDP ~50 packets), a
 * queue deep enough for the whole 512 window (delay, no drops). */
static void cc_one(bool adaptive, double loss, cc_result_t *res)
{
    hc_rel_cfg_t cfg = dcfg();
    cfg.adaptive = adaptive;
    sim_t *s = sim_new(6);
    bneck_t bn = {.rate = 0.5, .qmax = 2048};
    ep_t *a = ep_add(s, 1, &cfg, (link_t){.delay = 50, .loss = loss, .bn = &bn}, UINT64_MAX);
    ep_add(s, 0, &cfg, PLAIN(50), 0);
    print_message("cc: adaptive %d, loss %.0f%%\n", adaptive, loss * 100);
    cc_run(s, &a, 1, &bn, 50000, 200000, 20000, res);
    print_message("cc: adaptive %d loss %.0f%%: throughput %.1f%% of the bottleneck, srtt max "
                  "%.1f us (min rtt %.1f us, x%.2f), cwnd %.1f..%.1f mean %.1f, fast retx %llu, "
                  "timeouts %llu, drops %llu\n",
                  adaptive, loss * 100, res->tput * 100, res->srtt_max * 1e6, res->min_rtt * 1e6,
                  res->srtt_max / res->min_rtt, res->cwnd_min, res->cwnd_max, res->cwnd_mean,
                  ULL(a->r.n.fast_retransmits), ULL(a->r.n.timeouts), ULL(bn.drops));
    sim_free(s);
}

/* 5: the delay-based cwnd keeps the standing queue near the target and the
 * link busy; without it the whole window sits in the queue. */
static void test_congestion(void **state)
{
    (void)state;
    cc_result_t ad, fixed, lossy;
    cc_one(true, 0, &ad);
    cc_one(false, 0, &fixed);
    cc_one(true, 0.02, &lossy);
    assert_true(ad.tput >= 0.8);
    assert_true(ad.srtt_max < 3 * ad.min_rtt);
    assert_true(fixed.tput >= 0.8);
    assert_true(fixed.srtt_max > 3 * ad.srtt_max); /* the queue grows much larger */
    assert_true(lossy.cwnd_max >= 4);              /* it recovers from each decrease... */
    assert_true(lossy.cwnd_mean >= 2);             /* ...and is not pinned at 1 */
    assert_true(lossy.tput >= 0.05);
}

/* Two flows, e[0] sending from the start and e[1] once given messages,
 * through link fwd (a shared bottleneck), acknowledged over back_us. */
static void two_flows(sim_t *s, const hc_rel_cfg_t *cfg, link_t fwd, uint32_t back_us, ep_t *e[2])
{
    e[0] = ep_add(s, 1, cfg, fwd, UINT64_MAX);
    ep_add(s, 0, cfg, PLAIN(back_us), 0);
    e[1] = ep_add(s, 3, cfg, fwd, 0);
    ep_add(s, 2, cfg, PLAIN(back_us), 0);
}

/* 6: two flows share one bottleneck, starting together or the second 20 ms
 * late: each should get a fair-ish share (a quarter at least). */
static void test_fairness(void **state)
{
    (void)state;
    cc_result_t res[2][2];
    for (int k = 0; k < 2; k++) {
        hc_rel_cfg_t cfg = dcfg();
        sim_t *s = sim_new(7);
        bneck_t bn = {.rate = 0.5, .qmax = 2048};
        link_t fwd = {.delay = 50, .bn = &bn};
        ep_t *e[2];
        two_flows(s, &cfg, fwd, 50, e);
        sim_until(s, T0 + (k ? 20000 : 0));
        e[1]->n_msgs = UINT64_MAX;
        cc_run(s, e, 2, &bn, 120000, 300000, 60000, res[k]);
        print_message("fairness, second flow %d ms late: shares %.1f%% + %.1f%% of the "
                      "bottleneck, min rtt %.1f / %.1f us, srtt max %.1f / %.1f us\n",
                      k ? 20 : 0, res[k][0].tput * 100, res[k][1].tput * 100,
                      res[k][0].min_rtt * 1e6, res[k][1].min_rtt * 1e6, res[k][0].srtt_max * 1e6,
                      res[k][1].srtt_max * 1e6);
        sim_free(s);
    }
    for (int k = 0; k < 2; k++) {
        assert_true(res[k][0].tput >= 0.25);
        assert_true(res[k][1].tput >= 0.25);
        assert_true(res[k][0].tput + res[k][1].tput >= 0.8);
        /* the queue stays near the target (it grew to 1.5 ms when the
         * target followed the queue) */
        assert_true(res[k][0].srtt_max <= 3 * 200e-6 && res[k][1].srtt_max <= 3 * 200e-6);
    }
}

/* 6a': a long path (300 us each way) whose base delay alone is above the
 * target: the flow aims at a multiple of its base delay (the smallest of
 * the last 1-2 s) and fills the bottleneck with a bounded queue, instead of
 * shrinking to one packet; and with a second flow joining later the target
 * does not follow the queue they build (both windows grew without bound
 * when the base was the smallest of the last 64 samples). */
static void test_long_path(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        hc_rel_cfg_t cfg = dcfg();
        cfg.window = 2048;
        sim_t *s = sim_new(13);
        bneck_t bn = {.rate = 0.5, .qmax = 4096};
        link_t fwd = {.delay = 300, .bn = &bn};
        ep_t *e[2];
        two_flows(s, &cfg, fwd, 300, e);
        if (k) {
            sim_until(s, T0 + 50000);
            e[1]->n_msgs = UINT64_MAX;
        }
        cc_result_t res[2];
        cc_run(s, e, k + 1, &bn, 100000, 400000, 100000, res);
        double tput = res[0].tput + (k ? res[1].tput : 0);
        print_message("long path, %d flow%s: throughput %.1f%% of the bottleneck (%.1f%% + "
                      "%.1f%%), min rtt %.1f us, srtt max %.1f us\n",
                      k + 1, k ? "s" : "", tput * 100, res[0].tput * 100, k ? res[1].tput * 100 : 0,
                      res[0].min_rtt * 1e6, res[0].srtt_max * 1e6);
        assert_true(tput >= 0.9);
        assert_true(res[0].srtt_max <= 2.0 * res[0].min_rtt);
        if (k) assert_true(res[1].tput >= 0.25 && res[0].tput >= 0.25);
        sim_free(s);
    }
}

/* 6b: sender and receiver each run in alternate slices (2 ms and 1.3 ms:
 * two jobs' processes sharing the cores), so RTTs range from 40 us to 4 ms
 * with a scheduling delay that no smaller window removes. With each side's
 * poll gap reported as host delay the window stays open; read as
 * congestion it shrinks (measured: cwnd mean 93.1 against 55.0, throughput
 * 32.3% of the bottleneck against 28.7%; before the standing delay decided
 * decreases, 43.7 against 23.2). */
static void sched_one(bool report, cc_result_t *res)
{
    hc_rel_cfg_t cfg = dcfg();
    sim_t *s = sim_new(11);
    bneck_t bn = {.rate = 0.5, .qmax = 4096};
    ep_t *a = ep_add(s, 1, &cfg, (link_t){.delay = 20, .bn = &bn}, UINT64_MAX);
    ep_t *b = ep_add(s, 0, &cfg, PLAIN(20), 0);
    a->slice_us = 2000; /* slices that drift apart: RTTs from 40 us to 4 ms */
    b->slice_us = 1300;
    a->report_wait = b->report_wait = report;
    cc_run(s, &a, 1, &bn, 50000, 300000, 100000, res);
    print_message("scheduled in slices, host delay %s: throughput %.1f%% of the bottleneck, "
                  "cwnd %.1f..%.1f mean %.1f, srtt max %.1f us, timeouts %llu\n",
                  report ? "reported" : "not reported", res->tput * 100, res->cwnd_min,
                  res->cwnd_max, res->cwnd_mean, res->srtt_max * 1e6, ULL(a->r.n.timeouts));
    print_message("  host delay %llu us taken out of %llu RTT samples\n", ULL(a->r.n.host_delay_us),
                  ULL(a->r.n.rtt_samples));
    if (report) assert_true(a->r.n.host_delay_us > 0);
    sim_free(s);
}

static void test_host_delay(void **state)
{
    (void)state;
    cc_result_t with, without;
    sched_one(true, &with);
    sched_one(false, &without);
    assert_true(with.cwnd_mean >= 1.5 * without.cwnd_mean);
    assert_true(with.tput >= 1.1 * without.tput);
}

/* 6c: a receiver that did not run for 3 ms (its process descheduled) finds
 * the sender's originals and then their retransmissions in one receive
 * burst. Its acknowledgement must echo an original's time stamp, so that
 * the sender sees its timeouts were spurious and gives the window back
 * (echoing the newest, the retransmission's, halved it for good on every
 * descheduling: the collapse of two jobs sharing a core). */
static void test_spurious_burst(void **state)
{
    (void)state;
    hc_rel_cfg_t cfg = dcfg();
    sim_t *s = sim_new(12);
    ep_t *b, *a = plain_pair(s, &cfg, 10, 100000, 0, &b);
    a->report_wait = b->report_wait = true;
    sim_until(s, T0 + 3000);
    b->hold = true;
    sim_until(s, s->now + 3000); /* a times out (rto_min 1 ms) and retransmits */
    double cwnd = a->r.cwnd_undo;
    assert_true(a->r.n.timeouts > 0);
    assert_true(cwnd > 0);
    assert_true(a->r.cwnd < cwnd);
    uint64_t spurious = a->r.n.spurious_timeouts;
    b->hold = false;
    sim_until(s, s->now + 100); /* one burst at b, its acknowledgement back at a */
    print_message("after the burst: spurious timeouts %llu (before %llu), cwnd %.1f (%.1f before "
                  "the timeouts), b's duplicates %llu\n",
                  ULL(a->r.n.spurious_timeouts), ULL(spurious), a->r.cwnd, cwnd,
                  ULL(b->r.n.duplicates));
    assert_true(b->r.n.duplicates > 0); /* the retransmissions did arrive */
    assert_true(a->r.n.spurious_timeouts > spurious);
    assert_true(a->r.cwnd >= cwnd);
    assert_true(sim_run(s, 5000000) != UINT64_MAX);
    check_counters(a);
    sim_free(s);
}

/* 7: sequence numbers wrap past 2^32 under loss and reordering. */
static void test_wrap(void **state)
{
    (void)state;
    hc_rel_cfg_t cfg = dcfg();
    sim_t *s = sim_new(8);
    link_t l = {.delay = 20, .jitter = 10, .loss = 0.05, .dup = 0.01};
    ep_add(s, 1, &cfg, l, 1000);
    ep_add(s, 0, &cfg, l, 1000);
    for (int i = 0; i < 2; i++) { /* right after init, both sides */
        hc_rel_t *r = &s->ep[i].r;
        r->snd_nxt = r->snd_una = r->rcv_nxt = s->ep[i].seq0 = SEQ_WRAP;
    }
    assert_true(sim_run(s, 2000000) != UINT64_MAX);
    for (int i = 0; i < 2; i++) {
        ep_t *e = &s->ep[i];
        report("wrap", i, e);
        check_counters(e);
        assert_true(e->r.n.retransmits > 0);
        assert_int_equal(e->r.snd_nxt, (uint32_t)(SEQ_WRAP + 1000u));
        assert_int_equal(e->r.rcv_nxt, (uint32_t)(SEQ_WRAP + 1000u));
    }
    sim_free(s);
}

/* 8: drain hands back every unacked packet (sent, sacked or still queued)
 * once, oldest first; fini discards what the receiver kept out of order. */
static void test_drain_fini(void **state)
{
    (void)state;
    hc_rel_cfg_t cfg = dcfg();
    sim_t *s = sim_new(9);
    link_t l = {.delay = 10, .drop_mask = (1u << 0) | (1u << 5)}; /* 0 and 5 never arrive */
    ep_t *a = ep_add(s, 1, &cfg, l, 15);
    ep_t *b = ep_add(s, 0, &cfg, PLAIN(10), 0);
    a->refuse_from = 10; /* 10..14 wait in the window, unsent */
    sim_until(s, T0 + 30000);
    assert_int_equal(b->delivered, 0);
    assert_int_equal(b->r.n.out_of_order, 8); /* 1..4, 6..9 */
    assert_int_equal(a->acked_next, 0);
    assert_int_equal(hc_rel_inflight(&a->r), 15);
    assert_int_equal(a->r.n.sent, 10);
    drain_next = 0, drained = 0;
    hc_rel_drain(&a->r, drain_fn, a);
    assert_int_equal(drained, 15);
    assert_int_equal(hc_rel_inflight(&a->r), 0);
    hc_rel_drain(&a->r, drain_fn, a); /* nothing twice */
    assert_int_equal(drained, 15);
    uint64_t before = b->discards;
    hc_rel_fini(&b->r);
    assert_int_equal(b->discards - before, 8);
    hc_rel_fini(&b->r); /* idempotent: sim_free calls it again */
    sim_free(s);
}

/* 9: bad configurations are refused with a reason. */
/* 13: delayed acknowledgements (ack_delay 50 us, every 16). Request and
 * response, 10 us each way, requests 200 us apart, nothing waiting for the
 * acknowledgements (no cookies): the responder's acknowledgements ride on
 * its responses, the requester's go alone once 50 us passed; both RTTs are
 * the path's (the echo leaves out the time an acknowledgement waited).
 * Then a one-way stream: an acknowledgement per 16 packets, no
 * retransmission; then packets with cookies (a put waiting): acknowledged
 * at once, as without the delay. */
static void test_delayed_ack(void **state)
{
    (void)state;
    hc_rel_cfg_t cfg = dcfg();
    cfg.ack_delay = 50e-6;
    cfg.ack_every = 16;
    sim_t *s = sim_new(13);
    ep_t *b, *a = plain_pair(s, &cfg, 10, 2000, 2000, &b);
    a->no_cookie = b->no_cookie = true;
    a->gap_us = 200;
    b->echo = true;
    assert_true(sim_run(s, 10000000) != UINT64_MAX);
    report("request/response", 0, a);
    report("request/response", 1, b);
    for (int i = 0; i < 2; i++) {
        check_counters(&s->ep[i]);
        assert_int_equal(s->ep[i].delivered, 2000);
        assert_int_equal(s->ep[i].r.n.retransmits, 0);
    }
    assert_true(b->r.n.acks_sent <= 20);   /* on the responses */
    assert_true(a->r.n.acks_sent >= 1900); /* alone, after 50 us */
    assert_true(a->r.srtt < 30e-6 && b->r.srtt < 30e-6);
    sim_free(s);

    s = sim_new(14);
    a = ep_add(s, 1, &cfg, PLAIN(10), 100000);
    b = ep_add(s, 0, &cfg, PLAIN(10), 0);
    a->no_cookie = b->no_cookie = true;
    assert_true(sim_run(s, 10000000) != UINT64_MAX);
    report("stream, delayed", 1, b);
    check_counters(a);
    assert_int_equal(b->delivered, 100000);
    assert_int_equal(a->r.n.retransmits, 0);
    assert_true(b->r.n.acks_sent <= 100000 / 16 + 100);
    assert_true(a->r.srtt < 100e-6);
    sim_free(s);

    s = sim_new(15);
    a = ep_add(s, 1, &cfg, PLAIN(10), 2000);
    b = ep_add(s, 0, &cfg, PLAIN(10), 0);
    a->gap_us = 200; /* cookies: each put waits for its acknowledgement */
    assert_true(sim_run(s, 10000000) != UINT64_MAX);
    check_counters(a);
    assert_int_equal(b->r.n.acks_sent, 2000);
    assert_true(a->r.srtt < 25e-6); /* no 50 us wait in it */
    sim_free(s);

    /* 50 us of delay against a 1 ms rto minimum is fine, 0.6 ms is not */
    hc_rel_t r;
    char why[256];
    cfg.ack_delay = 0.6e-3;
    assert_int_equal(hc_rel_init(&r, &cfg, &ops, NULL, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "acknowledgement delay"));
    cfg.ack_delay = 0;
    cfg.ack_every = 0;
    assert_int_equal(hc_rel_init(&r, &cfg, &ops, NULL, why, sizeof(why)), -1);
}

static void test_bad_cfg(void **state)
{
    (void)state;
    hc_rel_t r;
    char why[256];
    for (int k = 0; k < 5; k++) {
        hc_rel_cfg_t cfg = dcfg();
        switch (k) {
        case 0:
            cfg.window = 3;
            break;
        case 1:
            cfg.window = 0;
            break;
        case 2:
            cfg.window = 8192;
            break;
        case 3:
            cfg.rto_min = 0;
            break;
        default:
            cfg.max_mdf = 1;
            break;
        }
        why[0] = '\0';
        assert_int_equal(hc_rel_init(&r, &cfg, &ops, NULL, why, sizeof(why)), -1);
        print_message("bad cfg %d: %s\n", k, why);
        assert_true(why[0] != '\0');
        hc_rel_fini(&r); /* safe after a failed init */
    }
    hc_rel_cfg_t cfg = dcfg();
    assert_int_equal(hc_rel_init(&r, &cfg, &ops, NULL, why, sizeof(why)), 0);
    hc_rel_fini(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean),
        cmocka_unit_test(test_lossy),
        cmocka_unit_test(test_fast_retx_tail),
        cmocka_unit_test(test_rtt_idle_sender),
        cmocka_unit_test(test_ack_after_drain),
        cmocka_unit_test(test_sacked_head_retransmitted),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_refused_sent_by_next_tick),
        cmocka_unit_test(test_stalled_receiver),
        cmocka_unit_test(test_congestion),
        cmocka_unit_test(test_fairness),
        cmocka_unit_test(test_long_path),
        cmocka_unit_test(test_host_delay),
        cmocka_unit_test(test_spurious_burst),
        cmocka_unit_test(test_wrap),
        cmocka_unit_test(test_drain_fini),
        cmocka_unit_test(test_delayed_ack),
        cmocka_unit_test(test_bad_cfg),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
