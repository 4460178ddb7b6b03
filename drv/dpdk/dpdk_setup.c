/*
 * dpdk driver, control path: open, the address blob, wireup, connect,
 * memory registration (zero copy on a port that DMAs), teardown, counters
 * and the ops table. The data path is dpdk_tx.c (transmit), dpdk_rx.c
 * (receive, progress) and dpdk_retx.c (the window's callbacks, timers,
 * failure); the port and EAL are dpdk_port.c and dpdk_eal.c. See
 * docs/dpdk.md.
 */
/* rte_dev_dma_map is still experimental in DPDK 22.11. */
#define ALLOW_EXPERIMENTAL_API 1
#include "drv/dpdk/dpdk_inl.h"
#include "base/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <rte_byteorder.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_malloc.h>
#include <rte_udp.h>

#define HC_DPDK_ACK_EVERY 16u /* packets owed that make an acknowledgement due at once */

uint64_t hc_dpdk_us_per_cycle_q32; /* hc_dpdk_now_us's calibration, set by the first open */

/* Zero copy on this port needs the payload's memory registered: the core
 * then registers streamed user buffers (HC_CONN_CAP_PUT_REG). */
static bool hc_dpdk_needs_reg(void)
{
    return !hc_dpdk_port.ext_iova_ok && hc_dpdk_port.multi_seg &&
           hc_dpdk_cfg.zcopy_threshold != 0 && rte_eal_iova_mode() == RTE_IOVA_VA;
}

/* ---- open, wireup, connect --------------------------------------------------------- */

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

/* The topology cache's key: this rank's HCOMM_DPDK_PORT entry. */
static void hc_dpdk_local_links(hc_drv_t *drv, char *buf, size_t len)
{
    (void)drv;
    snprintf(buf, len, "%s", hc_dpdk_cfg.port);
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
    .local_links = hc_dpdk_local_links,
    .counters = hc_dpdk_counters,
    .flush = hc_dpdk_flush,
    .peer_gone = hc_dpdk_peer_gone,
};
HC_DRV_REGISTER(hc_dpdk_ops)
