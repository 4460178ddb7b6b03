/*
 * dpdk driver, data path: framing, connections, put, progress, failure.
 * See docs/dpdk.md.
 *
 * Every packet is Ethernet + IPv4 + UDP (so that switches and routers carry
 * it) + hc_dpdk_hdr_t (sessions, sequence and acknowledgement numbers, time
 * stamps) and, in a DATA packet, one core frame: its 32-byte header and
 * payload. One frame is one packet: conn->max_frame is what the port's MTU
 * leaves, and the core cuts larger messages into frames of that size, so
 * the driver never fragments.
 *
 * A put is copied into an mbuf (OK at once), or, when the caller gave a
 * cookie, the payload is large enough and the port sends chained mbufs, it
 * goes zero copy: a header mbuf chained to an mbuf attached to the caller's
 * memory (rte_pktmbuf_attach_extbuf), IN_PROGRESS until the peer has
 * acknowledged it (the caller's memory is what a retransmission reads, so
 * the payload is needed until then, not just until the NIC sent it).
 * The window (dpdk_rel.c) keeps one reference to each packet; each
 * transmission adds one that the PMD drops when it has sent it, and a packet
 * the PMD still holds is not rewritten for a retransmission.
 *
 * Receiving: one RX burst at a time; packets that are not ours (another
 * MAC, UDP port or EtherType, a stale session, a peer we have no connection
 * to yet) are dropped, which the sender's retransmission covers. After the
 * burst each connection that received data acknowledges it once.
 */
/* rte_dev_dma_map is still experimental in DPDK 22.11. */
#define ALLOW_EXPERIMENTAL_API 1
#include "drv/dpdk/dpdk.h"
#include "base/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_malloc.h>
#include <rte_udp.h>

#define HC_DPDK_TICK_US 100      /* timers run at most this often */
#define HC_DPDK_ACK_EVERY 16u    /* packets owed that make an acknowledgement due at once */
#define HC_DPDK_ABSENT_US 100000 /* a gap between polls this long is ours, not the peer's */
#define HC_DPDK_HOST_GAP_US 20   /* a gap between clock readings this long is host delay */
#define HC_DPDK_CLOCK_EVERY 16u  /* empty polls per clock reading */
#define HC_DPDK_STALL_RETX 12u   /* retransmissions of one packet that make a warning */

typedef struct hc_dpdk_drv hc_dpdk_drv_t;

typedef struct {
    uintptr_t lo, hi; /* hi 0: a free slot */
    uint32_t refs;    /* registrations of exactly this range: the cache may hold an
                         invalidated record, still referenced, beside its successor */
    bool user;        /* registration-cache memory, not a library region */
    bool owned;       /* we registered it with EAL (not already known to it) */
} hc_dpdk_reg_t;

typedef struct {
    hc_conn_t base;
    hc_dpdk_drv_t *d;
    hc_dpdk_addr_t addr;
    uint8_t l2l4[HC_DPDK_L2L4_LEN]; /* Ethernet + IPv4 + UDP to the peer, lengths 0 */
    hc_rel_t rel;
    bool failed;
    bool touched;    /* on d->touched: owes an acknowledgement (sent once due, hc_rel_flush) */
    bool busy;       /* in d->busy: has (or had, until the next tick) packets in flight */
    bool stall_told; /* the warning about a packet retransmitted over and over went */
} hc_dpdk_conn_t;

struct hc_dpdk_drv {
    hc_drv_t base;
    uint64_t session;
    uint16_t udp_port;
    size_t max_payload;
    hc_dpdk_conn_t **conns; /* by world rank, NULL until connect */
    hc_dpdk_conn_t **touched;
    int ntouched;
    hc_dpdk_conn_t **busy; /* connections with packets in flight: what the timers visit */
    int nbusy;
    uint64_t t_tick;
    uint64_t t_poll;     /* the last progress call that read the clock */
    uint64_t t_clock;    /* the last clock reading (a poll or a send) */
    uint64_t t_backlog;  /* 0, or the clock before a gap in polling: what the rings
                            still hold may have waited since then (host delay) */
    unsigned idle_polls; /* empty polls since the clock was last read */
    bool rx_version_warned;
    uint64_t rng;
    struct rte_mbuf_ext_shared_info shinfo; /* of every zero-copy segment: never freed */
    /* Packets sent but not yet handed to the PMD: one rte_eth_tx_burst per
     * burst (on af_packet one sendto, on memif one ring update), flushed
     * when full, at the start and end of progress and by ops->flush. */
    struct rte_mbuf *txq[HC_DPDK_TXQ];
    unsigned ntxq;
    /* counters (HCOMM_STATS_LEVEL=2) */
    uint64_t tx_pkts, rx_pkts, tx_bytes, rx_bytes, rx_foreign, rx_stale, rx_dropped_fault;
    uint64_t rx_corrupted; /* fault injection */
    uint64_t zcopy_puts, copy_puts, tx_full, tx_bursts, mbuf_short, rx_bad_cksum, rx_cksum_ok;
    uint64_t zcopy_bytes, copy_bytes, copied_large_bytes; /* payload; large: >= the threshold */
    uint64_t zcopy_user_bytes, user_regs, reg_failures;
    uint64_t tx_reaps; /* empty bursts for a retransmission the PMD still held */
    /* Memory registered with DPDK (a DMAing port): library regions and,
     * through the registration cache, the buffers of large user sends. A
     * key is its slot + 1, stable while registered. */
    hc_dpdk_reg_t *regs;
    int nregs, capregs, last_reg;
};

/* Zero copy on this port needs the payload's memory registered: the core
 * then registers streamed user buffers (HC_CONN_CAP_PUT_REG). */
static bool hc_dpdk_needs_reg(void)
{
    return !hc_dpdk_port.ext_iova_ok && hc_dpdk_port.multi_seg &&
           hc_dpdk_cfg.zcopy_threshold != 0 && rte_eal_iova_mode() == RTE_IOVA_VA;
}

/* Microseconds from the TSC as EAL calibrated it ((2^32 us) per cycle;
 * 0 until open): the driver reads the clock on every poll, and
 * clock_gettime took 17% of the CPU of an 8-byte memif ping-pong. */
static uint64_t hc_dpdk_us_per_cycle_q32;

static uint64_t hc_dpdk_now_us(void)
{
    if (HC_LIKELY(hc_dpdk_us_per_cycle_q32))
        return (uint64_t)(((unsigned __int128)rte_get_tsc_cycles() * hc_dpdk_us_per_cycle_q32) >>
                          32);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static double hc_dpdk_rand01(hc_dpdk_drv_t *d)
{
    d->rng ^= d->rng << 13;
    d->rng ^= d->rng >> 7;
    d->rng ^= d->rng << 17;
    return (double)(d->rng >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- framing --------------------------------------------------------------------- */

static void hc_dpdk_build_l2l4(hc_dpdk_drv_t *d, hc_dpdk_conn_t *c)
{
    struct rte_ether_hdr *eth = (struct rte_ether_hdr *)c->l2l4;
    struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
    struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);
    memcpy(eth->dst_addr.addr_bytes, c->addr.mac, RTE_ETHER_ADDR_LEN);
    rte_ether_addr_copy(&hc_dpdk_port.mac, &eth->src_addr);
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
    memset(ip, 0, sizeof(*ip));
    ip->version_ihl = RTE_IPV4_VHL_DEF;
    ip->time_to_live = 64;
    ip->next_proto_id = IPPROTO_UDP;
    ip->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG);
    ip->src_addr = hc_dpdk_port.ip;
    ip->dst_addr = c->addr.ip;
    udp->src_port = rte_cpu_to_be_16(d->udp_port);
    udp->dst_port = rte_cpu_to_be_16(c->addr.udp_port);
    udp->dgram_cksum = 0; /* optional in IPv4; the Ethernet FCS covers the link */
}

/* Headers for a packet of total length len (from the Ethernet header) into
 * the first segment of m. */
static hc_dpdk_hdr_t *hc_dpdk_put_headers(hc_dpdk_conn_t *c, struct rte_mbuf *m, size_t len,
                                          uint8_t kind)
{
    uint8_t *p = rte_pktmbuf_mtod(m, uint8_t *);
    memcpy(p, c->l2l4, HC_DPDK_L2L4_LEN);
    struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(p + sizeof(struct rte_ether_hdr));
    struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);
    ip->total_length = rte_cpu_to_be_16((uint16_t)(len - sizeof(struct rte_ether_hdr)));
    ip->hdr_checksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
    udp->dgram_len = rte_cpu_to_be_16((uint16_t)(len - sizeof(struct rte_ether_hdr) - 20));
    hc_dpdk_hdr_t *h = (hc_dpdk_hdr_t *)(udp + 1);
    h->magic = HC_DPDK_MAGIC;
    h->version = HC_DPDK_VERSION;
    h->kind = kind;
    h->src_rank = (uint32_t)c->d->base.env->rank;
    h->src_session = c->d->session;
    h->dst_session = c->addr.session;
    return h;
}

static void hc_dpdk_wire_to_hdr(hc_dpdk_hdr_t *h, const hc_rel_wire_t *w)
{
    h->seq = w->seq;
    h->ack = w->ack;
    h->sack = w->sack;
    h->ts = w->ts;
    h->ts_echo = w->ts_echo;
    h->ts_wait = w->ts_wait;
    h->kind =
        (uint8_t)((h->kind & ~HC_DPDK_KIND_ACK_SOON) | (w->ack_soon ? HC_DPDK_KIND_ACK_SOON : 0));
}

static hc_dpdk_hdr_t *hc_dpdk_hdr_of(struct rte_mbuf *m)
{
    return rte_pktmbuf_mtod_offset(m, hc_dpdk_hdr_t *, HC_DPDK_L2L4_LEN);
}

/* Hands the queued packets to the PMD (which frees what it sent); what it
 * refuses (its ring is full) stays queued, in order, for the next flush. */
static void hc_dpdk_tx_flush(hc_dpdk_drv_t *d)
{
    if (d->ntxq == 0) return;
    uint16_t sent = rte_eth_tx_burst(hc_dpdk_port.port_id, 0, d->txq, (uint16_t)d->ntxq);
    d->tx_bursts++;
    if (sent < d->ntxq) {
        d->tx_full++;
        memmove(d->txq, d->txq + sent, (d->ntxq - sent) * sizeof(d->txq[0]));
    }
    d->ntxq -= sent;
}

/* One packet to the NIC, queued for the next burst: -1 when the queue is
 * full and the PMD takes none of it (the caller keeps the packet). */
static int hc_dpdk_tx1(hc_dpdk_drv_t *d, struct rte_mbuf *m)
{
    if (d->ntxq == HC_DPDK_TXQ) hc_dpdk_tx_flush(d);
    if (d->ntxq == HC_DPDK_TXQ) return -1;
    /* The UDP checksum, now that the driver header (seq, ack, stamps) of
     * this transmission is written. */
    if (hc_dpdk_port.cksum != HC_DPDK_CKSUM_OFF) {
        struct rte_ipv4_hdr *ip =
            rte_pktmbuf_mtod_offset(m, struct rte_ipv4_hdr *, sizeof(struct rte_ether_hdr));
        struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);
        if (hc_dpdk_port.cksum == HC_DPDK_CKSUM_HW) {
            m->l2_len = sizeof(struct rte_ether_hdr);
            m->l3_len = sizeof(*ip);
            m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_UDP_CKSUM;
            udp->dgram_cksum = rte_ipv4_phdr_cksum(ip, m->ol_flags);
        } else {
            udp->dgram_cksum = 0;
            udp->dgram_cksum = rte_ipv4_udptcp_cksum_mbuf(m, ip, HC_DPDK_L2L4_LEN - sizeof(*udp));
        }
    }
    d->txq[d->ntxq++] = m;
    d->tx_pkts++;
    d->tx_bytes += m->pkt_len;
    return 0;
}

static void hc_dpdk_flush(hc_drv_t *drv)
{
    hc_dpdk_tx_flush((hc_dpdk_drv_t *)drv);
}

/* ---- hc_rel_ops_t ---------------------------------------------------------------- */

static int hc_dpdk_rel_xmit(void *arg, void *pkt, const hc_rel_wire_t *w)
{
    hc_dpdk_conn_t *c = arg;
    struct rte_mbuf *m = pkt;
    /* Still in the NIC's queue from the last transmission: not now. But the
     * PMD may have sent it without reaping its completion yet (af_xdp reaps
     * only inside a TX burst): with nothing else to send, a lost packet
     * would stay held, never retransmitted, until the peer timeout. Our own
     * queue goes first, then an empty burst lets the PMD reap. */
    if (rte_mbuf_refcnt_read(m) > 1) {
        hc_dpdk_tx_flush(c->d);
        (void)rte_eth_tx_burst(hc_dpdk_port.port_id, 0, c->d->txq, 0);
        c->d->tx_reaps++;
        if (rte_mbuf_refcnt_read(m) > 1) return -1;
    }
    hc_dpdk_wire_to_hdr(hc_dpdk_hdr_of(m), w);
    for (struct rte_mbuf *s = m; s; s = s->next)
        rte_mbuf_refcnt_update(s, 1);
    if (hc_dpdk_tx1(c->d, m) == 0) return 0;
    for (struct rte_mbuf *s = m; s; s = s->next)
        rte_mbuf_refcnt_update(s, -1);
    return -1;
}

/* A packet leaves the window: freed, and its put (zero copy) completes. */
static void hc_dpdk_complete(hc_dpdk_conn_t *c, void *pkt, void *cookie, hcomm_status_t st)
{
    rte_pktmbuf_free(pkt);
    if (cookie) {
        const hc_drv_env_t *env = c->d->base.env;
        env->put_done(env->core, &c->base, cookie, st);
    }
}

static void hc_dpdk_rel_acked(void *arg, void *pkt, void *cookie)
{
    hc_dpdk_complete(arg, pkt, cookie, HCOMM_OK);
}

static int hc_dpdk_rel_ack(void *arg, const hc_rel_wire_t *w)
{
    hc_dpdk_conn_t *c = arg;
    struct rte_mbuf *m = rte_pktmbuf_alloc(hc_dpdk_port.pool);
    if (!m) {
        c->d->mbuf_short++;
        return -1;
    }
    size_t len = HC_DPDK_HDRS_LEN;
    if (!rte_pktmbuf_append(m, (uint16_t)len)) {
        rte_pktmbuf_free(m);
        return -1;
    }
    hc_dpdk_wire_to_hdr(hc_dpdk_put_headers(c, m, len, HC_REL_ACK), w);
    if (hc_dpdk_tx1(c->d, m) == 0) return 0;
    rte_pktmbuf_free(m);
    return -1;
}

static void hc_dpdk_rel_deliver(void *arg, void *pkt)
{
    hc_dpdk_conn_t *c = arg;
    struct rte_mbuf *m = pkt;
    const uint8_t *p = rte_pktmbuf_mtod_offset(m, const uint8_t *, HC_DPDK_HDRS_LEN);
    hc_frame_hdr_t fh;
    memcpy(&fh, p, sizeof(fh));
    if (fh.type < HC_FRAME_DRIVER && !c->failed) {
        const hc_drv_env_t *env = c->d->base.env;
        env->deliver(env->core, &c->base, &fh, p + sizeof(fh));
    }
    rte_pktmbuf_free(m);
}

static void hc_dpdk_rel_discard(void *arg, void *pkt)
{
    (void)arg;
    rte_pktmbuf_free(pkt);
}

static const hc_rel_ops_t hc_dpdk_rel_ops = {
    .xmit = hc_dpdk_rel_xmit,
    .acked = hc_dpdk_rel_acked,
    .ack = hc_dpdk_rel_ack,
    .deliver = hc_dpdk_rel_deliver,
    .discard = hc_dpdk_rel_discard,
};

/* ---- open, wireup, connect --------------------------------------------------------- */

static void hc_dpdk_shinfo_free(void *addr, void *opaque)
{
    (void)addr;
    (void)opaque; /* the caller's memory: nothing to free */
}

static hcomm_status_t hc_dpdk_open(const hc_drv_env_t *env, hc_drv_t **drv_p)
{
    char why[512];
    hcomm_status_t st = hc_dpdk_port_up(env, why, sizeof(why));
    if (st != HCOMM_OK) return hc_error(st, "dpdk: %s", why);
    if (hc_dpdk_port.in_use)
        return hc_error(HCOMM_ERR_INVALID, "dpdk: the port is in use by another open instance");
    if (strcmp(hc_dpdk_cfg.cc, "swift") && strcmp(hc_dpdk_cfg.cc, "off"))
        return hc_error(HCOMM_ERR_INVALID, "dpdk: HCOMM_DPDK_CC=\"%s\": swift or off",
                        hc_dpdk_cfg.cc);
    if (!(hc_dpdk_cfg.rx_drop >= 0 && hc_dpdk_cfg.rx_drop < 1))
        return hc_error(HCOMM_ERR_INVALID, "dpdk: HCOMM_DPDK_RX_DROP=%g is not in [0, 1)",
                        hc_dpdk_cfg.rx_drop);
    if (!(hc_dpdk_cfg.rx_corrupt >= 0 && hc_dpdk_cfg.rx_corrupt < 1))
        return hc_error(HCOMM_ERR_INVALID, "dpdk: HCOMM_DPDK_RX_CORRUPT=%g is not in [0, 1)",
                        hc_dpdk_cfg.rx_corrupt);
    if (!(hc_dpdk_cfg.rx_drop_acks >= 0 && hc_dpdk_cfg.rx_drop_acks < 1))
        return hc_error(HCOMM_ERR_INVALID, "dpdk: HCOMM_DPDK_RX_DROP_ACKS=%g is not in [0, 1)",
                        hc_dpdk_cfg.rx_drop_acks);
    hc_dpdk_drv_t *d = calloc(1, sizeof(*d));
    if (d) d->conns = calloc((size_t)env->size, sizeof(*d->conns));
    if (d && d->conns) d->touched = calloc((size_t)env->size, sizeof(*d->touched));
    if (d && d->touched) d->busy = calloc((size_t)env->size, sizeof(*d->busy));
    if (!d || !d->conns || !d->touched || !d->busy) {
        if (d) {
            free(d->conns);
            free(d->touched);
        }
        free(d);
        return hc_error(HCOMM_ERR_NO_MEMORY, "dpdk: driver state for %d ranks", env->size);
    }
    d->base.env = env;
    uint64_t hz = rte_get_tsc_hz();
    if (hz >= 1000000 && !hc_dpdk_us_per_cycle_q32)
        hc_dpdk_us_per_cycle_q32 = (uint64_t)((1000000ull << 32) / hz);
    if (getrandom(&d->session, sizeof(d->session), 0) != (ssize_t)sizeof(d->session))
        d->session = hc_dpdk_now_us() ^ ((uint64_t)getpid() << 32);
    d->session |= 1;
    d->rng = d->session ^ 0x9e3779b97f4a7c15ull;
    d->udp_port = (uint16_t)(hc_dpdk_cfg.udp_base + HC_MAX(env->local_rank, 0));
    d->max_payload = (size_t)hc_dpdk_port.mtu - 20 - 8 - sizeof(hc_dpdk_hdr_t);
    d->shinfo.free_cb = hc_dpdk_shinfo_free;
    rte_mbuf_ext_refcnt_set(&d->shinfo, 1); /* one that is never dropped */
    hc_dpdk_port.in_use = true;
    static bool told;
    if (!hc_dpdk_port.multi_seg && hc_dpdk_cfg.zcopy_threshold && !told) {
        told = true;
        hc_log_warn("dpdk: port %s (%s) does not send chained mbufs: every payload is copied "
                    "into its packet (counted as copy_bytes)",
                    hc_dpdk_port.name, hc_dpdk_port.driver);
    }
    *drv_p = &d->base;
    return HCOMM_OK;
}

static hcomm_status_t hc_dpdk_addr_pack(hc_drv_t *drv, void *buf, size_t *len_p)
{
    hc_dpdk_drv_t *d = (hc_dpdk_drv_t *)drv;
    if (*len_p < sizeof(hc_dpdk_addr_t))
        return hc_error(HCOMM_ERR_INVALID, "dpdk: address blob needs %zu bytes, %zu given",
                        sizeof(hc_dpdk_addr_t), *len_p);
    hc_dpdk_addr_t a = {.magic = HC_DPDK_MAGIC,
                        .udp_port = d->udp_port,
                        .ip = hc_dpdk_port.ip,
                        .max_payload = (uint32_t)d->max_payload,
                        .session = d->session};
    memcpy(a.mac, hc_dpdk_port.mac.addr_bytes, 6);
    memcpy(buf, &a, sizeof(a));
    *len_p = sizeof(a);
    return HCOMM_OK;
}

static hcomm_status_t hc_dpdk_wireup(hc_drv_t *drv, const void *const *addrs,
                                     const size_t *addr_lens)
{
    (void)drv;
    (void)addrs;
    (void)addr_lens; /* connect has each peer's blob */
    char why[512];
    hcomm_status_t st = hc_dpdk_port_start(true, why, sizeof(why));
    return st == HCOMM_OK ? st : hc_error(st, "dpdk: %s", why);
}

static hcomm_status_t hc_dpdk_connect(hc_drv_t *drv, int peer, const void *addr, size_t addr_len,
                                      hc_conn_t **conn_p)
{
    hc_dpdk_drv_t *d = (hc_dpdk_drv_t *)drv;
    hc_dpdk_addr_t a;
    if (peer < 0 || peer >= drv->env->size)
        return hc_error(HCOMM_ERR_INVALID, "dpdk: connect to rank %d of %d", peer, drv->env->size);
    if (addr_len != sizeof(a))
        return hc_error(HCOMM_ERR_INVALID,
                        "dpdk: rank %d's address blob has %zu bytes, not %zu "
                        "(is dpdk open there?)",
                        peer, addr_len, sizeof(a));
    memcpy(&a, addr, sizeof(a));
    if (a.magic != HC_DPDK_MAGIC || a.max_payload < 64 + sizeof(hc_frame_hdr_t))
        return hc_error(HCOMM_ERR_INVALID, "dpdk: rank %d's address blob is not a dpdk one", peer);
    if (d->conns[peer]) {
        *conn_p = &d->conns[peer]->base;
        return HCOMM_OK;
    }
    hc_dpdk_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return hc_error(HCOMM_ERR_NO_MEMORY, "dpdk: connection to rank %d", peer);
    hc_rel_cfg_t rc;
    hc_rel_cfg_default(&rc);
    rc.window = (unsigned)hc_dpdk_cfg.window;
    rc.rto_min = hc_dpdk_cfg.rto_min;
    rc.rto_max = hc_dpdk_cfg.rto_max;
    rc.peer_timeout = hc_dpdk_cfg.peer_timeout > 0 ? hc_dpdk_cfg.peer_timeout : hc_cfg.timeout;
    rc.adaptive = !strcmp(hc_dpdk_cfg.cc, "swift");
    rc.cwnd_init = HC_MIN(rc.cwnd_init, (double)rc.window);
    rc.ack_delay = hc_dpdk_cfg.ack_delay;
    rc.ack_every = HC_MAX(1u, HC_MIN(HC_DPDK_ACK_EVERY, rc.window / 4));
    char why[256];
    if (hc_dpdk_cfg.window < 2 || hc_dpdk_cfg.window > 4096 ||
        hc_rel_init(&c->rel, &rc, &hc_dpdk_rel_ops, c, why, sizeof(why)) != 0) {
        free(c);
        if (hc_dpdk_cfg.window < 2 || hc_dpdk_cfg.window > 4096)
            snprintf(why, sizeof(why), "HCOMM_DPDK_WINDOW %lld is not a power of two in [2, 4096]",
                     (long long)hc_dpdk_cfg.window);
        return hc_error(HCOMM_ERR_INVALID, "dpdk: %s", why);
    }
    c->d = d;
    c->addr = a;
    hc_dpdk_build_l2l4(d, c);
    c->base.ops = drv->ops;
    c->base.drv = drv;
    c->base.peer = peer;
    c->base.caps = hc_dpdk_needs_reg() ? HC_CONN_CAP_PUT_REG : 0;
    c->base.max_frame = HC_MIN(d->max_payload, (size_t)a.max_payload) - sizeof(hc_frame_hdr_t);
    c->base.eager_max = 8 * c->base.max_frame;
    d->conns[peer] = c;
    *conn_p = &c->base;
    return HCOMM_OK;
}

/* ---- put ------------------------------------------------------------------------- */

/* The registration holding [lo, hi), or -1. A stream's packets hit the
 * same one: it is tried first. */
static int hc_dpdk_reg_find(hc_dpdk_drv_t *d, uintptr_t lo, uintptr_t hi)
{
    int k = d->last_reg;
    if (k < d->nregs && lo >= d->regs[k].lo && hi <= d->regs[k].hi) return k;
    for (int i = 0; i < d->nregs; i++)
        if (lo >= d->regs[i].lo && hi <= d->regs[i].hi) return d->last_reg = i;
    return -1;
}

/* Zero copy for this payload: 0 no, 1 yes, 2 yes from a user buffer that
 * the registration cache registered. */
static int hc_dpdk_zcopy_ok(hc_dpdk_drv_t *d, const void *payload, size_t len)
{
    if (!hc_dpdk_port.multi_seg || hc_dpdk_cfg.zcopy_threshold == 0 ||
        len < hc_dpdk_cfg.zcopy_threshold)
        return 0;
    if (hc_dpdk_port.ext_iova_ok) return 1;
    int k = hc_dpdk_reg_find(d, (uintptr_t)payload, (uintptr_t)payload + len);
    return k < 0 ? 0 : d->regs[k].user ? 2 : 1;
}

static hcomm_status_t hc_dpdk_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
                                  void *cookie)
{
    hc_dpdk_conn_t *c = (hc_dpdk_conn_t *)conn;
    hc_dpdk_drv_t *d = c->d;
    if (c->failed) return hc_error(HCOMM_ERR_PEER_FAILED, "dpdk: rank %d has failed", conn->peer);
    if (hdr->len > conn->max_frame)
        return hc_error(HCOMM_ERR_INVALID, "dpdk: frame of %u bytes, at most %zu", hdr->len,
                        conn->max_frame);
    if (!hc_rel_can_send(&c->rel)) return HCOMM_ERR_AGAIN;
    int how = cookie && hdr->len ? hc_dpdk_zcopy_ok(d, payload, hdr->len) : 0;
    bool zc = how != 0;
    size_t head = HC_DPDK_HDRS_LEN + sizeof(*hdr) + (zc ? 0 : hdr->len);
    struct rte_mbuf *m = rte_pktmbuf_alloc(hc_dpdk_port.pool), *ext = NULL;
    if (m && zc) ext = rte_pktmbuf_alloc(hc_dpdk_port.pool);
    if (!m || (zc && !ext) || !rte_pktmbuf_append(m, (uint16_t)head)) {
        rte_pktmbuf_free(m);
        rte_pktmbuf_free(ext);
        d->mbuf_short++;
        return HCOMM_ERR_AGAIN;
    }
    size_t total = head + (zc ? hdr->len : 0);
    (void)hc_dpdk_put_headers(c, m, total, HC_REL_DATA);
    uint8_t *fp = rte_pktmbuf_mtod_offset(m, uint8_t *, HC_DPDK_HDRS_LEN);
    memcpy(fp, hdr, sizeof(*hdr));
    if (zc) {
        rte_mbuf_ext_refcnt_update(&d->shinfo, 1);
        rte_pktmbuf_attach_extbuf(ext, (void *)(uintptr_t)payload, (rte_iova_t)(uintptr_t)payload,
                                  (uint16_t)hdr->len, &d->shinfo);
        ext->data_off = 0;
        ext->data_len = (uint16_t)hdr->len;
        ext->pkt_len = hdr->len;
        if (rte_pktmbuf_chain(m, ext) != 0) {
            rte_pktmbuf_free(m);
            rte_pktmbuf_free(ext);
            return HCOMM_ERR_AGAIN;
        }
        d->zcopy_puts++;
        d->zcopy_bytes += hdr->len;
        if (how == 2) d->zcopy_user_bytes += hdr->len;
    } else {
        if (hdr->len) memcpy(fp + sizeof(*hdr), payload, hdr->len);
        d->copy_puts++;
        d->copy_bytes += hdr->len;
        if (hc_dpdk_cfg.zcopy_threshold && hdr->len >= hc_dpdk_cfg.zcopy_threshold)
            d->copied_large_bytes += hdr->len;
    }
    d->t_clock = hc_dpdk_now_us();
    hc_rel_send(&c->rel, m, zc ? cookie : NULL, d->t_clock);
    if (!c->busy) {
        c->busy = true;
        d->busy[d->nbusy++] = c;
    }
    return zc ? HCOMM_IN_PROGRESS : HCOMM_OK;
}

/* ---- progress ---------------------------------------------------------------------- */

static void hc_dpdk_fail_one(void *arg, void *pkt, void *cookie)
{
    hc_dpdk_complete(arg, pkt, cookie, HCOMM_ERR_PEER_FAILED);
}

static void hc_dpdk_peer_gone(hc_drv_t *drv, int peer)
{
    hc_dpdk_drv_t *d = (hc_dpdk_drv_t *)drv;
    hc_dpdk_conn_t *c = peer >= 0 && peer < drv->env->size ? d->conns[peer] : NULL;
    if (!c || c->failed) return;
    c->failed = true;
    hc_rel_drain(&c->rel, hc_dpdk_fail_one, c);
}

static void hc_dpdk_fail(hc_dpdk_conn_t *c, const char *why)
{
    if (c->failed) return;
    c->failed = true;
    hc_rel_drain(&c->rel, hc_dpdk_fail_one, c);
    const hc_drv_env_t *env = c->d->base.env;
    env->peer_failed(env->core, c->base.peer, HCOMM_ERR_PEER_FAILED, why);
}

/* Drops d->busy[i] (the last entry takes its place). */
static void hc_dpdk_unbusy(hc_dpdk_drv_t *d, int i)
{
    d->busy[i]->busy = false;
    d->busy[i] = d->busy[--d->nbusy];
}

/* The connection a received packet belongs to, or NULL (then it is freed). */
static hc_dpdk_conn_t *hc_dpdk_classify(hc_dpdk_drv_t *d, struct rte_mbuf *m, hc_rel_wire_t *w)
{
    if (m->pkt_len < HC_DPDK_HDRS_LEN || m->data_len < HC_DPDK_HDRS_LEN) goto foreign;
    const struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, const struct rte_ether_hdr *);
    const struct rte_ipv4_hdr *ip = (const struct rte_ipv4_hdr *)(eth + 1);
    const struct rte_udp_hdr *udp = (const struct rte_udp_hdr *)(ip + 1);
    if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) ||
        !rte_is_same_ether_addr(&eth->dst_addr, &hc_dpdk_port.mac) ||
        ip->version_ihl != RTE_IPV4_VHL_DEF || ip->next_proto_id != IPPROTO_UDP ||
        udp->dst_port != rte_cpu_to_be_16(d->udp_port))
        goto foreign;
    const hc_dpdk_hdr_t *h = (const hc_dpdk_hdr_t *)(udp + 1);
    if (h->magic != HC_DPDK_MAGIC) goto foreign;
    if (h->version != HC_DPDK_VERSION) {
        if (!d->rx_version_warned) {
            d->rx_version_warned = true;
            hc_log_warn("dpdk: a packet of protocol version %u arrived; this rank speaks version "
                        "%u: every rank of a job must run the same hcomm (packets dropped)",
                        (unsigned)h->version, (unsigned)HC_DPDK_VERSION);
        }
        goto foreign;
    }
    if (HC_UNLIKELY(hc_dpdk_cfg.rx_corrupt > 0) && m->data_len > HC_DPDK_L2L4_LEN + 3 &&
        hc_dpdk_rand01(d) < hc_dpdk_cfg.rx_corrupt) {
        /* One of ours: a byte past the driver header's magic and version
         * flipped. Only the checksum can catch it. */
        size_t off = HC_DPDK_L2L4_LEN + 3 +
                     (size_t)(hc_dpdk_rand01(d) * (double)(m->data_len - HC_DPDK_L2L4_LEN - 3));
        rte_pktmbuf_mtod(m, uint8_t *)[HC_MIN(off, (size_t)m->data_len - 1)] ^= 0x5a;
        d->rx_corrupted++;
    }
    if (udp->dgram_cksum != 0) { /* 0: the sender computed none (IPv4 allows it) */
        uint64_t f = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;
        if (f == RTE_MBUF_F_RX_L4_CKSUM_BAD ||
            (f != RTE_MBUF_F_RX_L4_CKSUM_GOOD &&
             rte_ipv4_udptcp_cksum_mbuf_verify(m, ip, HC_DPDK_L2L4_LEN - sizeof(*udp)) != 0)) {
            d->rx_bad_cksum++;
            return NULL;
        }
        d->rx_cksum_ok++;
    }
    if (h->dst_session != d->session || h->src_rank >= (uint32_t)d->base.env->size) goto stale;
    hc_dpdk_conn_t *c = d->conns[h->src_rank];
    if (!c || c->addr.session != h->src_session || c->failed) goto stale;
    uint8_t kind = h->kind & (uint8_t)~HC_DPDK_KIND_ACK_SOON;
    if (kind == HC_REL_DATA) {
        hc_frame_hdr_t fh;
        if (m->data_len < HC_DPDK_HDRS_LEN + sizeof(fh)) goto foreign;
        memcpy(&fh, rte_pktmbuf_mtod_offset(m, const void *, HC_DPDK_HDRS_LEN), sizeof(fh));
        if ((size_t)m->data_len < HC_DPDK_HDRS_LEN + sizeof(fh) + fh.len) goto foreign;
    } else if (kind != HC_REL_ACK) {
        goto foreign;
    }
    *w = (hc_rel_wire_t){.seq = h->seq,
                         .ack = h->ack,
                         .sack = h->sack,
                         .ts = h->ts,
                         .ts_echo = h->ts_echo,
                         .ts_wait = h->ts_wait,
                         .kind = kind,
                         .ack_soon = (h->kind & HC_DPDK_KIND_ACK_SOON) != 0};
    return c;
foreign:
    d->rx_foreign++;
    return NULL;
stale:
    d->rx_stale++;
    return NULL;
}

static int hc_dpdk_progress(hc_drv_t *drv)
{
    hc_dpdk_drv_t *d = (hc_dpdk_drv_t *)drv;
    struct rte_mbuf *pkts[HC_DPDK_BURST];
    if (!hc_dpdk_port.started) return 0; /* a memif client before wireup */
    hc_dpdk_tx_flush(d);
    uint16_t n = rte_eth_rx_burst(hc_dpdk_port.port_id, 0, pkts, HC_DPDK_BURST);
    /* An empty poll reads the clock only every HC_DPDK_CLOCK_EVERY-th time:
     * the timers (100 us ticks, 50 us acknowledgement delay) need no finer
     * grain, and reading the TSC took 11% of an 8-byte memif ping-pong's
     * CPU. Received packets always get the time (RTT samples). */
    if (n == 0 && ++d->idle_polls < HC_DPDK_CLOCK_EVERY) return 0;
    d->idle_polls = 0;
    uint64_t now = hc_dpdk_now_us();
    if (now - d->t_poll > HC_DPDK_ABSENT_US) {
        /* Nobody polled for a while (the caller computed, or waited on the
         * bootstrap): acknowledgements may be waiting in the ring, and a
         * peer is not silent for the time we did not listen. */
        for (int i = 0; i < d->nbusy; i++)
            hc_rel_resume(&d->busy[i]->rel, now);
    }
    d->t_poll = now;
    /* Host delay: after a gap between two clock readings (this process
     * was not running, or ran other work) what the receive burst brings
     * may have waited since the earlier reading, and so may the rest of
     * that backlog, until a burst comes back short (the ring was emptied).
     * The delay-based window leaves that time out (hc_rel_input). */
    if (now - d->t_clock > HC_DPDK_HOST_GAP_US && d->t_clock) d->t_backlog = d->t_clock;
    d->t_clock = now;
    uint64_t wait = d->t_backlog && n ? now - d->t_backlog : 0;
    if (n < HC_DPDK_BURST) d->t_backlog = 0;
    int events = n;
    for (uint16_t i = 0; i < n; i++) {
        struct rte_mbuf *m = pkts[i];
        hc_rel_wire_t w;
        d->rx_pkts++;
        d->rx_bytes += m->pkt_len;
        hc_dpdk_conn_t *c = hc_dpdk_classify(d, m, &w);
        if (!c) {
            rte_pktmbuf_free(m);
            continue;
        }
        double drop = w.kind == HC_REL_DATA ? hc_dpdk_cfg.rx_drop : hc_dpdk_cfg.rx_drop_acks;
        if (drop > 0 && hc_dpdk_rand01(d) < drop) {
            d->rx_dropped_fault++;
            rte_pktmbuf_free(m);
            continue;
        }
        if (!c->touched) {
            c->touched = true;
            d->touched[d->ntouched++] = c;
        }
        hc_rel_input(&c->rel, &w, w.kind == HC_REL_DATA ? m : NULL, now, wait);
        if (w.kind != HC_REL_DATA) rte_pktmbuf_free(m);
    }
    /* Connections owing an acknowledgement: it goes once due (it may still
     * ride on data: HCOMM_DPDK_ACK_DELAY); the others stay on the list. */
    int keep = 0;
    for (int i = 0; i < d->ntouched; i++) {
        hc_dpdk_conn_t *c = d->touched[i];
        if (!c->failed) hc_rel_flush(&c->rel, now, false);
        if (!c->failed && hc_rel_ack_owed(&c->rel))
            d->touched[keep++] = c;
        else
            c->touched = false;
    }
    d->ntouched = keep;
    if (now - d->t_tick >= HC_DPDK_TICK_US) {
        d->t_tick = now;
        for (int i = 0; i < d->nbusy; i++) {
            hc_dpdk_conn_t *c = d->busy[i];
            if (c->failed || hc_rel_inflight(&c->rel) == 0) {
                hc_dpdk_unbusy(d, i--); /* the next put puts it back */
                continue;
            }
            int r = c->base.peer;
            uint32_t retx;
            struct rte_mbuf *oldest = hc_rel_oldest(&c->rel, &retx);
            if (HC_UNLIKELY(retx >= HC_DPDK_STALL_RETX && oldest && !c->stall_told)) {
                /* Said once: a path that drops frames of some sizes (an MTU
                 * smaller than the port's) stalls a job until the peer
                 * timeout, which can be minutes. */
                c->stall_told = true;
                hc_log_warn("dpdk: rank %d has not acknowledged a %u-byte packet through %u "
                            "retransmissions; if smaller messages get through, frames this large "
                            "are lost on the path (HCOMM_DPDK_MTU=%u here: lower it, or raise "
                            "the MTU of every link)",
                            r, oldest->pkt_len, retx, (unsigned)hc_dpdk_port.mtu);
            }
            if (!hc_rel_tick(&c->rel, now)) {
                char why[200];
                snprintf(why, sizeof(why),
                         "dpdk: rank %d acknowledged nothing for %.1f s (HCOMM_DPDK_PEER_TIMEOUT) "
                         "with %u packets in flight",
                         r, c->rel.cfg.peer_timeout, hc_rel_inflight(&c->rel));
                hc_dpdk_fail(c, why);
                events++;
            }
        }
    }
    hc_dpdk_tx_flush(d); /* the acknowledgements and retransmissions of this pass */
    return events;
}

/* ---- memory, teardown, counters ----------------------------------------------------- */

static hcomm_status_t hc_dpdk_mem_reg(hc_drv_t *drv, const hc_mem_desc_t *desc, uint64_t *key_p)
{
    hc_dpdk_drv_t *d = (hc_dpdk_drv_t *)drv;
    *key_p = 0;
    /* A DMAing port reads only memory DPDK knows: register the range (IOVA
     * as VA) and map it for the device. The external buffers carry their
     * virtual address as IO address, right only when EAL runs IOVA-as-VA (an
     * IOMMU, vfio). A failure only costs the range its zero copy. */
    if (!hc_dpdk_needs_reg()) return HCOMM_OK;
    uintptr_t lo = (uintptr_t)desc->addr, hi = lo + desc->len;
    int slot = -1;
    for (int i = 0; i < d->nregs; i++) {
        if (d->regs[i].hi == 0) {
            if (slot < 0) slot = i;
        } else if (d->regs[i].lo == lo && d->regs[i].hi == hi) {
            d->regs[i].refs++; /* EAL knows a range once */
            *key_p = (uint64_t)i + 1;
            return HCOMM_OK;
        }
    }
    if (slot < 0 && d->nregs == d->capregs) {
        int cap = d->capregs ? 2 * d->capregs : 16;
        hc_dpdk_reg_t *n = realloc(d->regs, sizeof(*n) * (size_t)cap);
        if (!n) {
            d->reg_failures++;
            return HCOMM_OK;
        }
        d->regs = n;
        d->capregs = cap;
    }
    bool owned = true;
    if (rte_extmem_register(desc->addr, desc->len, NULL, 0, desc->page_size) != 0) {
        if (rte_errno != EEXIST) {
            d->reg_failures++;
            hc_log(d->reg_failures == 1 ? HC_LOG_INFO : HC_LOG_DEBUG,
                   "dpdk: rte_extmem_register(%zu bytes%s): %s: that memory is sent by copy",
                   desc->len, desc->user ? ", a user buffer" : "", rte_strerror(rte_errno));
            return HCOMM_OK;
        }
        owned = false; /* the application registered it itself */
    }
    struct rte_eth_dev_info info;
    if (rte_eth_dev_info_get(hc_dpdk_port.port_id, &info) == 0 && info.device &&
        rte_dev_dma_map(info.device, desc->addr, (uint64_t)lo, desc->len) != 0 &&
        rte_errno != EEXIST) {
        d->reg_failures++;
        hc_log(d->reg_failures == 1 ? HC_LOG_INFO : HC_LOG_DEBUG,
               "dpdk: rte_dev_dma_map(%zu bytes%s): %s: that memory is sent by copy", desc->len,
               desc->user ? ", a user buffer" : "", rte_strerror(rte_errno));
        if (owned) (void)rte_extmem_unregister(desc->addr, desc->len);
        return HCOMM_OK;
    }
    if (slot < 0) slot = d->nregs++;
    d->regs[slot] =
        (hc_dpdk_reg_t){.lo = lo, .hi = hi, .refs = 1, .user = desc->user, .owned = owned};
    if (desc->user) d->user_regs++;
    *key_p = (uint64_t)slot + 1;
    return HCOMM_OK;
}

static void hc_dpdk_mem_dereg(hc_drv_t *drv, uint64_t key)
{
    hc_dpdk_drv_t *d = (hc_dpdk_drv_t *)drv;
    if (key == 0 || key > (uint64_t)d->nregs || d->regs[key - 1].hi == 0) return;
    hc_dpdk_reg_t *g = &d->regs[key - 1];
    if (--g->refs > 0) return;
    void *addr = (void *)g->lo;
    size_t len = g->hi - g->lo;
    struct rte_eth_dev_info info;
    if (rte_eth_dev_info_get(hc_dpdk_port.port_id, &info) == 0 && info.device)
        (void)rte_dev_dma_unmap(info.device, addr, (uint64_t)(uintptr_t)addr, len);
    if (g->owned) (void)rte_extmem_unregister(addr, len);
    g->lo = g->hi = 0; /* the slot is free; other keys stay as they are */
}

static void hc_dpdk_conn_free(hc_dpdk_drv_t *d, hc_dpdk_conn_t *c)
{
    /* Puts still owed a completion fail: nobody will acknowledge them now. */
    c->failed = true;
    hc_rel_drain(&c->rel, hc_dpdk_fail_one, c);
    hc_rel_fini(&c->rel);
    for (int i = 0; i < d->nbusy; i++)
        if (d->busy[i] == c) hc_dpdk_unbusy(d, i);
    for (int i = 0; i < d->ntouched; i++)
        if (d->touched[i] == c) d->touched[i--] = d->touched[--d->ntouched];
    d->conns[c->base.peer] = NULL;
    free(c);
}

static void hc_dpdk_disconnect(hc_conn_t *conn)
{
    hc_dpdk_conn_t *c = (hc_dpdk_conn_t *)conn;
    hc_dpdk_conn_free(c->d, c);
}

static void hc_dpdk_close(hc_drv_t *drv)
{
    hc_dpdk_drv_t *d = (hc_dpdk_drv_t *)drv;
    /* The last acknowledgements go out; what the PMD will not take is dropped. */
    uint64_t now = hc_dpdk_now_us();
    for (int i = 0; i < d->ntouched; i++)
        if (!d->touched[i]->failed) hc_rel_flush(&d->touched[i]->rel, now, true);
    hc_dpdk_tx_flush(d);
    if (d->ntxq) rte_pktmbuf_free_bulk(d->txq, d->ntxq);
    d->ntxq = 0;
    for (int r = 0; r < drv->env->size; r++)
        if (d->conns[r]) hc_dpdk_conn_free(d, d->conns[r]);
    /* Drop what is still queued for us: the next instance has a new session. */
    struct rte_mbuf *pkts[HC_DPDK_BURST];
    uint16_t n;
    while (hc_dpdk_port.started &&
           (n = rte_eth_rx_burst(hc_dpdk_port.port_id, 0, pkts, HC_DPDK_BURST)) > 0)
        rte_pktmbuf_free_bulk(pkts, n);
    for (int i = 0; i < d->nregs; i++)
        if (d->regs[i].hi) {
            d->regs[i].refs = 1;
            hc_dpdk_mem_dereg(drv, (uint64_t)i + 1);
        }
    free(d->regs);
    hc_dpdk_port.in_use = false;
    free(d->conns);
    free(d->touched);
    free(d->busy);
    free(d);
}

static void hc_dpdk_counters(hc_drv_t *drv, void (*kv)(const char *name, uint64_t value, void *arg),
                             void *arg)
{
    hc_dpdk_drv_t *d = (hc_dpdk_drv_t *)drv;
    hc_rel_counters_t t = {0};
    uint64_t cwnd_min = UINT64_MAX, srtt_us_max = 0;
    for (int r = 0; r < drv->env->size; r++) {
        hc_dpdk_conn_t *c = d->conns[r];
        if (!c) continue;
        const hc_rel_counters_t *n = &c->rel.n;
        t.sent += n->sent;
        t.retransmits += n->retransmits;
        t.timeouts += n->timeouts;
        t.fast_retransmits += n->fast_retransmits;
        t.spurious_timeouts += n->spurious_timeouts;
        t.duplicates += n->duplicates;
        t.out_of_order += n->out_of_order;
        t.acks_sent += n->acks_sent;
        t.host_delay_us += n->host_delay_us;
        t.rtt_samples += n->rtt_samples;
        t.path_delay_us += n->path_delay_us;
        t.delay_decreases += n->delay_decreases;
        cwnd_min = HC_MIN(cwnd_min, (uint64_t)c->rel.cwnd);
        srtt_us_max = HC_MAX(srtt_us_max, (uint64_t)(c->rel.srtt * 1e6));
    }
    kv("tx_packets", d->tx_pkts, arg);
    kv("tx_bytes", d->tx_bytes, arg);
    kv("rx_packets", d->rx_pkts, arg);
    kv("rx_bytes", d->rx_bytes, arg);
    kv("zcopy_puts", d->zcopy_puts, arg);
    kv("copy_puts", d->copy_puts, arg);
    kv("zcopy_bytes", d->zcopy_bytes, arg);
    kv("copy_bytes", d->copy_bytes, arg);
    kv("copied_large_bytes", d->copied_large_bytes, arg);
    kv("zcopy_user_bytes", d->zcopy_user_bytes, arg);
    kv("user_regs", d->user_regs, arg);
    kv("reg_failures", d->reg_failures, arg);
    kv("retransmits", t.retransmits, arg);
    kv("timeouts", t.timeouts, arg);
    kv("fast_retransmits", t.fast_retransmits, arg);
    kv("spurious_timeouts", t.spurious_timeouts, arg);
    kv("rx_duplicates", t.duplicates, arg);
    kv("rx_out_of_order", t.out_of_order, arg);
    kv("acks_sent", t.acks_sent, arg);
    kv("rx_foreign", d->rx_foreign, arg);
    kv("rx_stale", d->rx_stale, arg);
    kv("rx_fault_dropped", d->rx_dropped_fault, arg);
    kv("tx_queue_full", d->tx_full, arg);
    kv("tx_bursts", d->tx_bursts, arg);
    kv("tx_reaps", d->tx_reaps, arg);
    kv("rx_bad_checksum", d->rx_bad_cksum, arg);
    kv("rx_fault_corrupted", d->rx_corrupted, arg);
    kv("rx_checksum_ok", d->rx_cksum_ok, arg);
    kv("mbuf_shortage", d->mbuf_short, arg);
    struct rte_eth_stats es;
    if (rte_eth_stats_get(hc_dpdk_port.port_id, &es) == 0) {
        kv("port_ipackets", es.ipackets, arg);
        kv("port_imissed", es.imissed, arg);
        kv("port_ierrors", es.ierrors, arg);
        kv("port_rx_nombuf", es.rx_nombuf, arg);
        kv("port_opackets", es.opackets, arg);
        kv("port_oerrors", es.oerrors, arg);
    }
    if (cwnd_min != UINT64_MAX) kv("cwnd_min_packets", cwnd_min, arg);
    kv("srtt_max_us", srtt_us_max, arg);
    kv("rtt_samples", t.rtt_samples, arg);
    kv("host_delay_us", t.host_delay_us, arg); /* summed over the samples: left out of the
                                                  window's delay signal */
    kv("path_delay_us", t.path_delay_us, arg); /* summed: what the window reads */
    kv("delay_decreases", t.delay_decreases, arg);
}

static const struct hc_drv_ops hc_dpdk_ops = {
    .name = "dpdk",
    .scope = HC_DRV_SCOPE_NET,
    .priority = 20,
    .probe = hc_dpdk_probe,
    .open = hc_dpdk_open,
    .addr_pack = hc_dpdk_addr_pack,
    .wireup = hc_dpdk_wireup,
    .connect = hc_dpdk_connect,
    .put = hc_dpdk_put,
    .progress = hc_dpdk_progress,
    .mem_reg = hc_dpdk_mem_reg,
    .mem_dereg = hc_dpdk_mem_dereg,
    .disconnect = hc_dpdk_disconnect,
    .close = hc_dpdk_close,
    .describe = hc_dpdk_describe,
    .counters = hc_dpdk_counters,
    .flush = hc_dpdk_flush,
    .peer_gone = hc_dpdk_peer_gone,
};
HC_DRV_REGISTER(hc_dpdk_ops)
