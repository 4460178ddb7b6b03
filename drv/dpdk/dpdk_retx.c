/*
 * dpdk driver: the glue between the window (dpdk_rel.c) and the port. The
 * window's callbacks (hc_rel_ops_t: the transmissions are dpdk_tx.c's, the
 * deliveries dpdk_rx.c's, completions here), the timers that retransmit and
 * time a silent peer out, and peer failure. See docs/dpdk.md.
 *
 * A packet leaves the window when the peer acknowledged it, or when the
 * peer failed: then its zero-copy put completes, with OK or
 * ERR_PEER_FAILED. The timers run every HC_DPDK_TICK_US (from progress)
 * over the connections with packets in flight only.
 */
#include "drv/dpdk/dpdk_inl.h"

#include <stdio.h>

#define HC_DPDK_STALL_RETX 12u /* retransmissions of one packet that make a warning */

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

const hc_rel_ops_t hc_dpdk_rel_ops = {
    .xmit = hc_dpdk_rel_xmit,
    .acked = hc_dpdk_rel_acked,
    .ack = hc_dpdk_rel_ack,
    .deliver = hc_dpdk_rel_deliver,
    .discard = hc_dpdk_rel_discard,
};

/* ---- failure --------------------------------------------------------------------- */

void hc_dpdk_fail_one(void *arg, void *pkt, void *cookie)
{
    hc_dpdk_complete(arg, pkt, cookie, HCOMM_ERR_PEER_FAILED);
}

void hc_dpdk_peer_gone(hc_drv_t *drv, int peer)
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

/* ---- timers ---------------------------------------------------------------------- */

int hc_dpdk_timers(hc_dpdk_drv_t *d, uint64_t now)
{
    int events = 0;
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
    return events;
}
