/*
 * dpdk driver, transmit path: framing, put (copied, or zero copy from the
 * caller's memory), the TX queue, and the packets the window (dpdk_rel.c)
 * sends: data, again after a loss, and acknowledgements. See docs/dpdk.md.
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
 */
/* rte_ipv4_udptcp_cksum_mbuf is still experimental in DPDK 22.11. */
#define ALLOW_EXPERIMENTAL_API 1
#include "drv/dpdk/dpdk_inl.h"

#include <string.h>

#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_udp.h>

/* ---- framing --------------------------------------------------------------------- */

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

/* ---- the TX queue ---------------------------------------------------------------- */

void hc_dpdk_tx_flush(hc_dpdk_drv_t *d)
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

void hc_dpdk_flush(hc_drv_t *drv)
{
    hc_dpdk_tx_flush((hc_dpdk_drv_t *)drv);
}

/* ---- the window's packets (hc_rel_ops_t) ----------------------------------------- */

int hc_dpdk_rel_xmit(void *arg, void *pkt, const hc_rel_wire_t *w)
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

int hc_dpdk_rel_ack(void *arg, const hc_rel_wire_t *w)
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

hcomm_status_t hc_dpdk_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
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
