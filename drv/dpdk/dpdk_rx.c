/*
 * dpdk driver, receive path: progress (one RX burst, the clock, the
 * acknowledgements owed after it, the timers when due), what a received
 * packet is, and the window's deliveries to the core. See docs/dpdk.md.
 *
 * Receiving: one RX burst at a time; packets that are not ours (another
 * MAC, UDP port or EtherType, a stale session, a peer we have no connection
 * to yet) are dropped, which the sender's retransmission covers. After the
 * burst each connection that received data acknowledges it once.
 */
/* rte_ipv4_udptcp_cksum_mbuf_verify is still experimental in DPDK 22.11. */
#define ALLOW_EXPERIMENTAL_API 1
#include "drv/dpdk/dpdk_inl.h"

#include <string.h>

#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_udp.h>

#define HC_DPDK_TICK_US 100      /* timers run at most this often */
#define HC_DPDK_ABSENT_US 100000 /* a gap between polls this long is ours, not the peer's */
#define HC_DPDK_HOST_GAP_US 20   /* a gap between clock readings this long is host delay */
#define HC_DPDK_CLOCK_EVERY 16u  /* empty polls per clock reading */

static double hc_dpdk_rand01(hc_dpdk_drv_t *d)
{
    d->rng ^= d->rng << 13;
    d->rng ^= d->rng >> 7;
    d->rng ^= d->rng << 17;
    return (double)(d->rng >> 11) * (1.0 / 9007199254740992.0);
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

/* Feeds one received packet to its connection's window (which keeps a DATA
 * packet until delivered) or frees it. */
static void hc_dpdk_rx_one(hc_dpdk_drv_t *d, struct rte_mbuf *m, uint64_t now, uint64_t wait)
{
    hc_rel_wire_t w;
    d->rx_pkts++;
    d->rx_bytes += m->pkt_len;
    hc_dpdk_conn_t *c = hc_dpdk_classify(d, m, &w);
    if (!c) {
        rte_pktmbuf_free(m);
        return;
    }
    double drop = w.kind == HC_REL_DATA ? hc_dpdk_cfg.rx_drop : hc_dpdk_cfg.rx_drop_acks;
    if (drop > 0 && hc_dpdk_rand01(d) < drop) {
        d->rx_dropped_fault++;
        rte_pktmbuf_free(m);
        return;
    }
    if (!c->touched) {
        c->touched = true;
        d->touched[d->ntouched++] = c;
    }
    hc_rel_input(&c->rel, &w, w.kind == HC_REL_DATA ? m : NULL, now, wait);
    if (w.kind != HC_REL_DATA) rte_pktmbuf_free(m);
}

/* The clock of a poll that reads it: now, and in *wait how long what this
 * burst of n packets brings may have waited for us (host delay). */
static uint64_t hc_dpdk_rx_clock(hc_dpdk_drv_t *d, uint16_t n, uint64_t *wait)
{
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
    *wait = d->t_backlog && n ? now - d->t_backlog : 0;
    if (n < HC_DPDK_BURST) d->t_backlog = 0;
    return now;
}

/* Connections owing an acknowledgement: it goes once due (it may still
 * ride on data: HCOMM_DPDK_ACK_DELAY); the others leave the list. */
static void hc_dpdk_rx_acks(hc_dpdk_drv_t *d, uint64_t now)
{
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
}

int hc_dpdk_progress(hc_drv_t *drv)
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
    uint64_t wait, now = hc_dpdk_rx_clock(d, n, &wait);
    int events = n;
    for (uint16_t i = 0; i < n; i++)
        hc_dpdk_rx_one(d, pkts[i], now, wait);
    hc_dpdk_rx_acks(d, now);
    if (now - d->t_tick >= HC_DPDK_TICK_US) {
        d->t_tick = now;
        events += hc_dpdk_timers(d, now);
    }
    hc_dpdk_tx_flush(d); /* the acknowledgements and retransmissions of this pass */
    return events;
}

/* ---- the window's deliveries (hc_rel_ops_t) -------------------------------------- */

void hc_dpdk_rel_deliver(void *arg, void *pkt)
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

void hc_dpdk_rel_discard(void *arg, void *pkt)
{
    (void)arg;
    rte_pktmbuf_free(pkt);
}
