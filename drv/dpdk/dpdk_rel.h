/*
 * drv/dpdk's reliable delivery, free of DPDK types so that it is tested on
 * its own (tests/drv/test_dpdk_rel.c drives two of them through a lossy,
 * reordering, delaying link model).
 *
 * One hc_rel_t per connection and direction pair. The sender numbers its
 * packets (32-bit sequence numbers, wrap-safe comparisons), keeps each one
 * until it is acknowledged and retransmits what is not: after a timeout
 * computed from the measured round trip (RFC 6298: srtt + 4 rttvar, clamped,
 * doubled on each expiry) and, sooner, a hole the receiver's selective
 * acknowledgements have reported three packets past (fast retransmit, at
 * most once per round trip). A selectively acknowledged packet goes again
 * only if it is the oldest and its timeout expires (the acknowledgements
 * then contradict each other; the duplicate makes the receiver restate).
 * The receiver delivers in order, keeps what arrives early in a window of
 * the same size (so the sender, never more than a window ahead, can never
 * overrun it), drops duplicates and answers them
 * with an acknowledgement at once, and otherwise acknowledges cumulatively,
 * with a bitmap of the 64 sequence numbers after the cumulative point and
 * the newest time stamp it received (the sender's RTT sample; no ambiguity
 * after a retransmission, since the echo names the transmission; a
 * duplicate's stamp only when nothing new came since the last
 * acknowledgement) and how long that packet may have waited for the
 * receiver's process to poll. An
 * acknowledgement rides on the next data packet to the peer; one of its own
 * goes at the end of a receive burst (hc_rel_flush) once ack_every packets
 * are owed or the oldest has waited ack_delay, so that a request answered
 * within ack_delay costs one packet each way, not two; a packet the sender
 * is waiting on (ack_soon) is acknowledged at the end of its burst, without
 * delay. The echoed stamp is
 * advanced by the time the receiver held it, so the sender's RTT sample
 * excludes that wait (QUIC's ack delay, folded into the stamp).
 *
 * Congestion: the number of packets in flight is bounded by cwnd, adjusted
 * from the measured delay as Swift does (Kumar et al., SIGCOMM 2020). The
 * delay is the path's, the RTT less the host delay of both ends (as Swift
 * separates fabric from endpoint delay): the time a packet waited in a ring
 * because its receiver's process was not running, estimated by each side's
 * gap between two polls. No window removes that delay, and reading it as
 * congestion (with spurious timeouts taken for real ones) collapsed two
 * jobs sharing a 2-core host to a tenth of their share. The timeout still
 * uses the whole RTT. The window rule: below the target delay the window
 * grows by one packet per round trip; once per round trip, when the
 * standing delay (the smallest of that round trip's samples: a queue delays
 * them all, a descheduled process only some) is above the target, it
 * shrinks in proportion to the excess, by at most max_mdf; a loss (a fast
 * retransmission) shrinks it by max_mdf/4, a timeout by max_mdf. The target
 * is one fixed value for every flow, as in Swift: a target taken from each
 * flow's own smallest RTT would let a flow that started into another's
 * queue aim higher and starve it (the unit test's two-flow case showed
 * 0.5% / 99.5%). Only when the base delay, the smallest of the last 1-2 s,
 * is well above the target (a long path, a slow software port) does a flow
 * aim at a multiple of the base instead; a base from the last 64 samples
 * followed a standing queue and let two flows' windows grow without bound.
 * With adaptive off cwnd stays at the window. RTT samples come only from
 * acknowledgements of new data (an echo on a packet that acknowledges
 * nothing new is stale). A timeout that the next acknowledgement shows was
 * spurious (it echoes a transmission from before the timeout: the original
 * was only late, as when the peer's process was not scheduled) gives the
 * window back (Eifel, RFC 3522). A receiver that wakes to originals and
 * their retransmissions in one burst echoes an original's stamp, not the
 * newer duplicate's: else every such wake-up halved the window for good.
 *
 * Failure: data in flight with no acknowledgement progress for
 * peer_timeout seconds makes hc_rel_tick return false; the driver then fails
 * the peer. Nothing here blocks or allocates after init.
 */
#ifndef HC_DPDK_REL_H
#define HC_DPDK_REL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { HC_REL_DATA = 1, HC_REL_ACK = 2 };

/* What travels in every packet's transport header. */
typedef struct {
    uint32_t seq;     /* DATA: this packet's number; ACK: the sender's next one */
    uint32_t ack;     /* every packet before this one has arrived */
    uint64_t sack;    /* bit i: packet ack + 1 + i has arrived too */
    uint32_t ts;      /* sender's clock when sent, microseconds (low 32 bits) */
    uint32_t ts_echo; /* newest ts received from the peer (0: none yet) */
    uint32_t ts_wait; /* us the packet that ts_echo names may have waited at the peer
                         before the peer polled (its process not running): host delay */
    uint8_t kind;     /* HC_REL_DATA or HC_REL_ACK */
    bool ack_soon;    /* DATA: the sender waits for this acknowledgement (a put's
                         completion, a window half full, a retransmission): no delay */
} hc_rel_wire_t;

typedef struct {
    /* (Re)sends pkt; the driver writes w into its header. 0: handed to the
     * NIC; -1: the transmit queue is full (hc_rel_tick tries again). The
     * driver may also refuse (-1) a packet the NIC still holds from an
     * earlier transmission. */
    int (*xmit)(void *arg, void *pkt, const hc_rel_wire_t *w);
    /* The peer has pkt: free it; cookie (as given to hc_rel_send) is done. */
    void (*acked)(void *arg, void *pkt, void *cookie);
    /* Sends a packet carrying only w (kind ACK). 0 / -1 as xmit. */
    int (*ack)(void *arg, const hc_rel_wire_t *w);
    /* A data packet, in order, exactly once: the driver hands it on and
     * frees it. May call hc_rel_send on the same hc_rel_t. */
    void (*deliver)(void *arg, void *pkt);
    /* A data packet not kept (duplicate, outside the window): free it. */
    void (*discard)(void *arg, void *pkt);
} hc_rel_ops_t;

typedef struct {
    unsigned window; /* packets, power of two, 2..4096 */
    double rto_min;  /* seconds */
    double rto_max;
    double peer_timeout;  /* seconds without acknowledgement progress */
    bool adaptive;        /* delay-based cwnd; false: cwnd = window */
    double target_delay;  /* seconds: the RTT every flow aims at (one value for all, so that
                             flows sharing a bottleneck converge to equal shares) */
    double target_factor; /* a path whose smallest RTT exceeds target_delay by half aims at
                             its smallest RTT times this instead */
    double max_mdf;       /* largest multiplicative decrease, 0..1 */
    double cwnd_init;     /* packets */
    double ack_delay;     /* seconds an acknowledgement may wait for data to ride on (0: none) */
    unsigned ack_every;   /* ... or packets it may owe first (1: acknowledge every burst) */
} hc_rel_cfg_t;

typedef struct {
    uint64_t sent, retransmits, timeouts, fast_retransmits, spurious_timeouts;
    uint64_t received, duplicates, out_of_order, beyond_window;
    uint64_t acks_sent, acks_received;
    uint64_t rtt_samples;
    uint64_t host_delay_us;   /* sum over RTT samples of the host delay taken out of them */
    uint64_t path_delay_us;   /* sum over RTT samples of what is left: the window's signal */
    uint64_t delay_decreases; /* window decreases for a delay above the target */
} hc_rel_counters_t;

typedef struct {
    void *pkt;
    void *cookie;
    uint64_t t_sent; /* us of the latest transmission, 0: not sent yet */
    uint32_t retx;
    bool sacked;
} hc_rel_tx_slot_t;

typedef struct {
    hc_rel_cfg_t cfg;
    const hc_rel_ops_t *ops;
    void *arg;
    uint32_t mask; /* window - 1 */

    /* sender */
    hc_rel_tx_slot_t *tx;
    uint32_t snd_una, snd_nxt;
    double cwnd;
    double srtt, rttvar, rto, min_rtt; /* seconds; srtt 0: no sample yet */
    double min_cur, min_prev;          /* smallest delay of this window and the last */
    uint32_t min_n;                    /* samples in this window */
    uint64_t t_min;                    /* us: this window began (HC_REL_BASE_WINDOW_US) */
    double cwnd_undo;                  /* cwnd before the last timeout (0: none to undo) */
    uint32_t ts_timeout;               /* our clock (low 32 bits) at that timeout */
    uint64_t t_progress;               /* us: the last time snd_una moved (or first send) */
    uint64_t t_decrease;               /* us of the last cwnd decrease */
    uint64_t t_epoch;                  /* us: this round trip's samples began */
    double epoch_min;                  /* their smallest delay (the standing delay) */
    uint32_t epoch_n;
    uint64_t t_fast;    /* us of the last fast retransmission */
    uint32_t recover;   /* snd_nxt at the last fast retransmission */
    bool fast_pending;  /* a hole reported, its fast retransmission not yet due */
    uint32_t fast_hole; /* the last hole fast-retransmitted (each goes once) */

    /* receiver */
    void **rx;
    uint32_t rcv_nxt;
    uint32_t ts_recent;
    uint64_t t_recent;    /* us: when ts_recent arrived (the echo adds the time since) */
    uint32_t wait_recent; /* us ts_recent's packet may have waited before we polled */
    bool recent_fresh;    /* ts_recent is a new packet's, since the last acknowledgement */
    uint64_t t_owed;      /* us: when the oldest unacknowledged packet arrived */
    uint32_t ack_owed;    /* packets received since the last acknowledgement */
    uint32_t ack_sent;    /* the cumulative point the last acknowledgement named */
    bool ack_now;         /* a duplicate arrived: acknowledge without waiting */
    bool ack_due;         /* the sender waits (ack_soon): acknowledge after this burst */

    hc_rel_counters_t n;
} hc_rel_t;

/* The defaults above (window 512, rto 1 ms .. 200 ms, ...), for tests. */
void hc_rel_cfg_default(hc_rel_cfg_t *cfg);
/* 0, or -1 for a bad cfg / no memory (why says which). */
int hc_rel_init(hc_rel_t *r, const hc_rel_cfg_t *cfg, const hc_rel_ops_t *ops, void *arg, char *why,
                size_t why_len);
/* Frees the windows; received packets still kept go to discard. Sent ones
 * must have been drained first (hc_rel_drain). */
void hc_rel_fini(hc_rel_t *r);
/* Calls fn(arg, pkt, cookie) for every packet not yet acknowledged, oldest
 * first, and forgets them (a failed peer: the driver fails their puts). */
void hc_rel_drain(hc_rel_t *r, void (*fn)(void *arg, void *pkt, void *cookie), void *arg);

/* Room for one more packet in flight now (cwnd and window)? */
bool hc_rel_can_send(const hc_rel_t *r);
/* Takes pkt into the window (hc_rel_can_send must be true) and transmits
 * it, piggybacking the acknowledgement owed; if the queue is full it is
 * sent by a later tick. */
void hc_rel_send(hc_rel_t *r, void *pkt, void *cookie, uint64_t now_us);
/* A packet from the peer: w from its header; pkt (DATA) is the packet,
 * whose ownership passes to rel (delivered, kept or discarded). wait_us:
 * how long it may have waited for this side to poll (this process was not
 * running, or ran other work: the gap since the clock was read before), 0
 * when this side polled without a gap. */
void hc_rel_input(hc_rel_t *r, const hc_rel_wire_t *w, void *pkt, uint64_t now_us,
                  uint64_t wait_us);
/* After a receive burst: sends the acknowledgement owed if it is due
 * (ack_every packets owed, ack_delay passed, a packet asked for it, or a
 * duplicate or a hole seen);
 * force: whatever is owed (the connection is closing). */
void hc_rel_flush(hc_rel_t *r, uint64_t now_us, bool force);
/* An acknowledgement is owed and not yet sent (hc_rel_flush again later). */
bool hc_rel_ack_owed(const hc_rel_t *r);
/* Timers: unsent and timed-out packets. false: the peer is unresponsive
 * (data in flight, no progress for peer_timeout). */
bool hc_rel_tick(hc_rel_t *r, uint64_t now_us);
/* This side was not listening (not polled) until now: the peer cannot be
 * blamed for that time, so its timeout restarts. */
void hc_rel_resume(hc_rel_t *r, uint64_t now_us);
/* Packets in flight (sent or queued, not yet acknowledged). */
uint32_t hc_rel_inflight(const hc_rel_t *r);
/* The oldest packet not yet acknowledged (NULL: none) and how many times it
 * was retransmitted. */
void *hc_rel_oldest(const hc_rel_t *r, uint32_t *retx_p);

#endif /* HC_DPDK_REL_H */
