/*
 * verbs driver: device, port and GID choice, the probe, hcomm_info's listing,
 * and the driver's open/close and ops table. See docs/verbs.md.
 *
 * Device choice: HCOMM_IB_HCA filters the devices in the syntax NCCL users
 * know ("mlx5_0:1,mlx5_1": prefixes, an optional port each; a leading "^"
 * excludes the list instead; "=" after it makes the names exact); each
 * device (in ibv_get_device_list order) with an ACTIVE port that passes is
 * a candidate, on its first such port. One device per rank: with several
 * candidates (a node with a NIC per GPU) the local ranks spread over them,
 * each over those on its own NUMA node when any is (hc_verbs_spread), so
 * that eight ranks do not share the first NIC; HCOMM_IB_SPREAD=0 puts every
 * rank on the first candidate.
 *
 * GID choice (RoCE): HCOMM_IB_GID_INDEX when set (>= 0); otherwise the RoCE
 * v2 GID of the network interface that reaches the bootstrap host, IPv4-
 * mapped first, then any RoCE v2 IPv4-mapped GID, then any RoCE v2 GID,
 * then index 0. InfiniBand ports address by LID and use GID 0.
 */
#include "drv/verbs/verbs.h"
#include "base/config.h"
#include "mem/mem.h"

#include <arpa/inet.h>
#include <limits.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

hc_verbs_cfg_t hc_verbs_cfg;

static const hc_config_knob_t hc_verbs_knobs[] = {
    HC_KNOB_STR(hc_verbs_cfg.hca, "HCOMM_IB_HCA", "",
                "verbs: devices to use, as NCCL_IB_HCA: name[:port],... prefixes; ^ excludes, "
                "= exact names (\"\": every device with an active port; local ranks spread over "
                "them, HCOMM_IB_SPREAD)"),
    HC_KNOB_BOOL(hc_verbs_cfg.spread, "HCOMM_IB_SPREAD", "1",
                 "verbs: with several devices passing HCOMM_IB_HCA, local rank r uses the r-th "
                 "(mod their count) of those on its NUMA node when any is, else of all (0: every "
                 "rank the first)"),
    HC_KNOB_INT(hc_verbs_cfg.gid_index, "HCOMM_IB_GID_INDEX", "-1",
                "verbs: GID index on RoCE ports (-1: the RoCE v2 GID of the interface that "
                "reaches the bootstrap host, IPv4-mapped first)"),
    HC_KNOB_INT(hc_verbs_cfg.timeout, "HCOMM_IB_TIMEOUT", "16",
                "verbs: RC ack timeout exponent (4.096 us * 2^N; 16 = 268 ms), 1..31"),
    HC_KNOB_INT(hc_verbs_cfg.retry_cnt, "HCOMM_IB_RETRY_CNT", "7",
                "verbs: RC transport retries before a peer is failed, 0..7"),
    HC_KNOB_INT(hc_verbs_cfg.tc, "HCOMM_IB_TC", "0",
                "verbs: traffic class of RoCE/global-routed packets, 0..255"),
    HC_KNOB_INT(hc_verbs_cfg.sl, "HCOMM_IB_SL", "0", "verbs: InfiniBand service level, 0..15"),
    HC_KNOB_INT(hc_verbs_cfg.qps_per_peer, "HCOMM_IB_QPS_PER_PEER", "2",
                "verbs: RC queue pairs per peer, 1..8: QP 0 carries eager frames and credits, large "
                "transfers are striped across the others (across QP 0 too when it is the only one)"),
    HC_KNOB_STR(hc_verbs_cfg.eager, "HCOMM_IB_EAGER", "write",
                "verbs: eager frames by RDMA WRITE into the peer's slot ring, which it polls "
                "(write), or by SEND into posted receives (send); every rank must agree"),
    HC_KNOB_INT(hc_verbs_cfg.signal_every, "HCOMM_IB_SIGNAL_EVERY", "16",
                "verbs/mlx5: a completion is asked for every this many send WQEs (selective "
                "signalling; RMA pieces always ask), 1..128"),
    HC_KNOB_SIZE(hc_verbs_cfg.zcopy_threshold, "HCOMM_ZCOPY_THRESHOLD", "8K",
                 "verbs: messages above this go by zero-copy rendezvous (RDMA READ/WRITE), "
                 "smaller ones through the eager slots (copied), 0..128K"),
};
HC_CONFIG_KNOBS("verbs", hc_verbs_knobs)

/* ---- HCOMM_IB_HCA ------------------------------------------------------------------------------ */

bool hc_verbs_hca_match(const char *spec, const char *dev, int port)
{
    if (!spec || !spec[0]) return true;
    bool exclude = false, exact = false;
    if (*spec == '^') {
        exclude = true;
        spec++;
    }
    if (*spec == '=') {
        exact = true;
        spec++;
    }
    bool hit = false;
    const char *p = spec;
    while (*p && !hit) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', n);
        size_t nlen = colon ? (size_t)(colon - p) : n;
        int want_port = colon ? atoi(colon + 1) : 0;
        bool name_ok = nlen > 0 && (exact ? strlen(dev) == nlen && !strncmp(dev, p, nlen)
                                          : !strncmp(dev, p, nlen));
        if (name_ok && (want_port <= 0 || want_port == port)) hit = true;
        p += n;
        if (*p == ',') p++;
    }
    return exclude ? !hit : hit;
}

static const char *hc_verbs_state_name(enum ibv_port_state s)
{
    return ibv_port_state_str(s);
}

static const char *hc_verbs_ll_name(uint8_t ll)
{
    return ll == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : ll == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand"
                                                                                       : "unspecified";
}

static int hc_verbs_mtu_bytes(enum ibv_mtu m)
{
    return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0;
}

/* ---- GID choice -------------------------------------------------------------------------------- */

/* Interface index of the local address that reaches host (0: unknown). */
static unsigned hc_verbs_route_ifindex(const char *host)
{
    if (!host || !host[0]) return 0;
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res = NULL;
    if (getaddrinfo(host, "9", &hints, &res) != 0 || !res) return 0;
    unsigned idx = 0;
    int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage local;
    socklen_t ll = sizeof(local);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&local, &ll) == 0) {
        struct ifaddrs *ifs = NULL;
        if (getifaddrs(&ifs) == 0) {
            for (struct ifaddrs *i = ifs; i && !idx; i = i->ifa_next) {
                if (!i->ifa_addr || i->ifa_addr->sa_family != local.ss_family) continue;
                bool same = local.ss_family == AF_INET
                                ? ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
                                      ((struct sockaddr_in *)&local)->sin_addr.s_addr
                                : !memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
                                          &((struct sockaddr_in6 *)&local)->sin6_addr, 16);
                if (same) idx = if_nametoindex(i->ifa_name);
            }
            freeifaddrs(ifs);
        }
    }
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return idx;
}

static bool hc_verbs_gid_v4mapped(const union ibv_gid *g)
{
    static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return !memcmp(g->raw, pfx, sizeof(pfx));
}

static bool hc_verbs_gid_zero(const union ibv_gid *g)
{
    static const uint8_t z[16];
    return !memcmp(g->raw, z, 16);
}

/* Picks the GID index of a RoCE port (see the top of the file). */
static int hc_verbs_pick_gid(struct ibv_context *ctx, int port, int tbl_len, const char *host)
{
    unsigned want_if = hc_verbs_route_ifindex(host);
    int best = -1, best_score = -1;
    for (int i = 0; i < tbl_len; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx, (uint32_t)port, (uint32_t)i, &e, 0) != 0) continue;
        if (hc_verbs_gid_zero(&e.gid)) continue;
        int score = 0;
        if (e.gid_type == IBV_GID_TYPE_ROCE_V2) score += 4;
        if (hc_verbs_gid_v4mapped(&e.gid)) score += 2;
        if (want_if && e.ndev_ifindex == want_if) score += 8;
        if (score > best_score) {
            best_score = score;
            best = i;
        }
    }
    return best < 0 ? 0 : best;
}

/* ---- choosing the device ----------------------------------------------------------------------- */


int hc_verbs_spread(const int *node, int n, int my_node, int local_rank, int *near_p)
{
    int near = 0;
    for (int i = 0; i < n; i++)
        near += my_node >= 0 && node[i] == my_node;
    *near_p = near;
    int k = local_rank < 0 ? 0 : local_rank;
    if (!near) return k % n;
    k %= near;
    for (int i = 0; i < n; i++)
        if (node[i] == my_node && k-- == 0) return i;
    return 0; /* not reached */
}

/* The NUMA node of a device (sysfs; -1: unknown or none). */
static int hc_verbs_dev_node(struct ibv_device *dev)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/device/numa_node", dev->ibdev_path);
    long node = -1;
    hc_read_long(path, &node);
    return node >= 0 && node < 4096 ? (int)node : -1;
}

void hc_verbs_fastest(const double *gbps, const uint8_t *ll, int n, bool *keep)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (gbps[i] > gbps[best]) best = i;
    for (int i = 0; i < n; i++)
        keep[i] = gbps[i] == gbps[best] && ll[i] == ll[best];
}

/* A port's rate in Gbit/s from its width and speed codes (ibv_query_port(3));
 * 0: a code this table does not know. */
static double hc_verbs_port_gbps(const struct ibv_port_attr *pa)
{
    double lanes = pa->active_width == 1    ? 1
                   : pa->active_width == 2  ? 4
                   : pa->active_width == 4  ? 8
                   : pa->active_width == 8  ? 12
                   : pa->active_width == 16 ? 2
                                            : 0;
    double lane;
    switch (pa->active_speed) {
    case 1: lane = 2.5; break;
    case 2: lane = 5; break;
    case 4:
    case 8: lane = 10; break;
    case 16: lane = 14; break;
    case 32: lane = 25; break;
    case 64: lane = 50; break;
    case 128: lane = 100; break;
    default: lane = 0;
    }
    return lanes * lane;
}

#define HC_VERBS_MAX_CANDIDATES 32

/* Opens the device and port local rank local_rank uses (env NULL: local
 * rank 0); on failure why says why none fits. */
hcomm_status_t hc_verbs_choose(const hc_drv_env_t *env, hc_verbs_pick_t *pick, char *why,
                               size_t why_len)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        if (list) ibv_free_device_list(list);
        snprintf(why, why_len,
                 "no RDMA devices (ibv_get_device_list found none: no HCA driver loaded; "
                 "soft-RoCE: modprobe rdma_rxe and rdma link add rxe0 type rxe netdev DEV)");
        return HCOMM_ERR_UNSUPPORTED;
    }
    char seen[256] = "";
    size_t used = 0;
    hc_verbs_pick_t cand[HC_VERBS_MAX_CANDIDATES];
    struct ibv_device *dev[HC_VERBS_MAX_CANDIDATES];
    int node[HC_VERBS_MAX_CANDIDATES], ncand = 0;
    int stop = hc_verbs_cfg.spread ? HC_VERBS_MAX_CANDIDATES : 1;
    for (int i = 0; i < n && ncand < stop; i++) {
        const char *name = ibv_get_device_name(list[i]);
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx) {
            used += (size_t)snprintf(seen + used, used < sizeof(seen) ? sizeof(seen) - used : 0,
                                     "%s%s cannot be opened (%s)", used ? "; " : "", name,
                                     strerror(errno));
            continue;
        }
        struct ibv_device_attr da;
        int nports = ibv_query_device(ctx, &da) == 0 ? da.phys_port_cnt : 0;
        int chosen = 0;
        struct ibv_port_attr pa;
        const char *reason = "no port";
        for (int p = 1; p <= nports && !chosen; p++) {
            if (!hc_verbs_hca_match(hc_verbs_cfg.hca, name, p)) {
                reason = "excluded by HCOMM_IB_HCA";
                continue;
            }
            if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0) {
                reason = "port query failed";
                continue;
            }
            if (pa.state != IBV_PORT_ACTIVE) {
                reason = "no ACTIVE port";
                continue;
            }
            chosen = p;
        }
        if (chosen) {
            hc_verbs_pick_t *c = &cand[ncand];
            snprintf(c->name, sizeof(c->name), "%s", name);
            c->port = chosen;
            c->pattr = pa;
            dev[ncand] = list[i];
            node[ncand++] = hc_verbs_dev_node(list[i]);
        } else {
            used += (size_t)snprintf(seen + used, used < sizeof(seen) ? sizeof(seen) - used : 0,
                                     "%s%s: %s", used ? "; " : "", name, reason);
        }
        ibv_close_device(ctx); /* the chosen one is opened again below */
    }
    if (!ncand) {
        ibv_free_device_list(list);
        snprintf(why, why_len, "no usable RDMA port (%s%s%s)", seen,
                 hc_verbs_cfg.hca[0] ? "; HCOMM_IB_HCA=" : "", hc_verbs_cfg.hca);
        return HCOMM_ERR_UNSUPPORTED;
    }
    /* Only the fastest ports of one link layer: a node's slower port (a
     * management NIC with RoCE, say) may not reach the peers' fabric, and
     * would hold back the ranks spread onto it. */
    double gbps[HC_VERBS_MAX_CANDIDATES];
    uint8_t ll[HC_VERBS_MAX_CANDIDATES];
    bool keep[HC_VERBS_MAX_CANDIDATES];
    for (int i = 0; i < ncand; i++) {
        gbps[i] = hc_verbs_port_gbps(&cand[i].pattr);
        ll[i] = cand[i].pattr.link_layer;
    }
    hc_verbs_fastest(gbps, ll, ncand, keep);
    int kept = 0;
    for (int i = 0; i < ncand; i++)
        if (keep[i]) {
            node[kept] = node[i];
            dev[kept] = dev[i];
            cand[kept++] = cand[i];
        }
    int slower = ncand - kept;
    ncand = kept;
    int lr = env ? env->local_rank : 0, my_node = ncand > 1 ? hc_mem_my_node() : -1, near = 0;
    int k = ncand > 1 ? hc_verbs_spread(node, ncand, my_node, lr, &near) : 0;
    *pick = cand[k];
    pick->ctx = ibv_open_device(dev[k]);
    ibv_free_device_list(list);
    if (!pick->ctx) {
        snprintf(why, why_len, "%s cannot be opened again (%s)", pick->name, strerror(errno));
        return HCOMM_ERR_UNSUPPORTED;
    }
    pick->index = k;
    pick->ncand = ncand;
    pick->near = near;
    pick->node = my_node;
    pick->slower = slower;
    return HCOMM_OK;
}

hcomm_status_t hc_verbs_check_knobs(void)
{
    const hc_verbs_cfg_t *k = &hc_verbs_cfg;
    if (k->timeout < 1 || k->timeout > 31)
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_IB_TIMEOUT=%lld must be 1..31", (long long)k->timeout);
    if (k->retry_cnt < 0 || k->retry_cnt > 7)
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_IB_RETRY_CNT=%lld must be 0..7",
                        (long long)k->retry_cnt);
    if (k->tc < 0 || k->tc > 255)
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_IB_TC=%lld must be 0..255", (long long)k->tc);
    if (k->sl < 0 || k->sl > 15)
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_IB_SL=%lld must be 0..15", (long long)k->sl);
    if (k->qps_per_peer < 1 || k->qps_per_peer > HC_VERBS_MAX_QPS)
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_IB_QPS_PER_PEER=%lld must be 1..%d",
                        (long long)k->qps_per_peer, HC_VERBS_MAX_QPS);
    if (k->signal_every < 1 || k->signal_every > 128)
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_IB_SIGNAL_EVERY=%lld must be 1..128",
                        (long long)k->signal_every);
    if (strcmp(k->eager, "write") && strcmp(k->eager, "send"))
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_IB_EAGER=%s must be write or send", k->eager);
    if (k->zcopy_threshold > 16 * HC_VERBS_MAX_FRAME)
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_ZCOPY_THRESHOLD=%zu must be at most %zu",
                        k->zcopy_threshold, (size_t)(16 * HC_VERBS_MAX_FRAME));
    return HCOMM_OK;
}

hcomm_status_t hc_verbs_probe(const hc_drv_env_t *env, char *why, size_t why_len)
{
    (void)env;
    if (hc_verbs_check_knobs() != HCOMM_OK) {
        snprintf(why, why_len, "%s", hc_error_last());
        return HCOMM_ERR_INVALID;
    }
    hc_verbs_pick_t pick;
    hcomm_status_t st = hc_verbs_choose(env, &pick, why, why_len);
    if (st != HCOMM_OK) return st;
    snprintf(why, why_len, "%s port %d (%s, %s, MTU %d)", pick.name, pick.port,
             hc_verbs_ll_name(pick.pattr.link_layer), hc_verbs_state_name(pick.pattr.state),
             hc_verbs_mtu_bytes(pick.pattr.active_mtu));
    ibv_close_device(pick.ctx);
    return HCOMM_OK;
}

/* hcomm_info: every device, port, state, link layer, MTU and GID. */
void hc_verbs_describe(const hc_drv_env_t *env, void (*line)(const char *text, void *arg), void *arg)
{
    (void)env;
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    char t[320];
    if (!list || n == 0) {
        line("  verbs: no RDMA devices", arg);
        if (list) ibv_free_device_list(list);
        return;
    }
    for (int i = 0; i < n; i++) {
        const char *name = ibv_get_device_name(list[i]);
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx) {
            snprintf(t, sizeof(t), "  verbs: %s: cannot open (%s)", name, strerror(errno));
            line(t, arg);
            continue;
        }
        struct ibv_device_attr da;
        if (ibv_query_device(ctx, &da) != 0) da.phys_port_cnt = 0;
        snprintf(t, sizeof(t), "  verbs: %s: %d port(s), max_qp %d, max_mr_size %llu, fw %s", name,
                 da.phys_port_cnt, da.max_qp, (unsigned long long)da.max_mr_size, da.fw_ver);
        line(t, arg);
        for (int p = 1; p <= da.phys_port_cnt; p++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0) continue;
            snprintf(t, sizeof(t),
                     "  verbs:   port %d: %s, link layer %s, active MTU %d, max msg %u, lid %u%s", p,
                     hc_verbs_state_name(pa.state), hc_verbs_ll_name(pa.link_layer),
                     hc_verbs_mtu_bytes(pa.active_mtu), pa.max_msg_sz, pa.lid,
                     hc_verbs_hca_match(hc_verbs_cfg.hca, name, p) ? "" : " (excluded by HCOMM_IB_HCA)");
            line(t, arg);
            for (int g = 0; g < pa.gid_tbl_len; g++) {
                struct ibv_gid_entry e;
                if (ibv_query_gid_ex(ctx, (uint32_t)p, (uint32_t)g, &e, 0) != 0) continue;
                if (hc_verbs_gid_zero(&e.gid)) continue;
                char s[INET6_ADDRSTRLEN], ifn[IF_NAMESIZE] = "-";
                inet_ntop(AF_INET6, e.gid.raw, s, sizeof(s));
                if (e.ndev_ifindex) (void)if_indextoname(e.ndev_ifindex, ifn);
                snprintf(t, sizeof(t), "  verbs:     GID[%d] %s %s dev %s", g, s,
                         e.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2"
                         : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1"
                                                              : "IB",
                         ifn);
                line(t, arg);
            }
        }
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
}

/* ---- open / close ------------------------------------------------------------------------------ */

hcomm_status_t hc_verbs_dev_open(hc_verbs_drv_t *d, const hc_drv_env_t *env)
{
    char why[512];
    hc_verbs_pick_t pick;
    if (hc_verbs_choose(env, &pick, why, sizeof(why)) != HCOMM_OK)
        return hc_error(HCOMM_ERR_UNSUPPORTED, "verbs: %s", why);
    if (pick.ncand > 1 || pick.slower)
        hc_log_info("verbs: local rank %d uses %s port %d (%.0f Gbit/s), device %d of the %d "
                    "fastest that pass HCOMM_IB_HCA (%d of them on NUMA node %d, this rank's "
                    "CPU's%s; %d slower or of another link layer left out)",
                    env->local_rank, pick.name, pick.port, hc_verbs_port_gbps(&pick.pattr),
                    pick.index + 1, pick.ncand, pick.near, pick.node,
                    pick.near ? "" : ": spread over all", pick.slower);
    d->ctx = pick.ctx;
    snprintf(d->dev_name, sizeof(d->dev_name), "%s", pick.name);
    d->port_attr = pick.pattr;
    if (ibv_query_device(d->ctx, &d->dev_attr) != 0)
        return hc_error_errno(HCOMM_ERR_INTERNAL, errno, "verbs: ibv_query_device(%s)", d->dev_name);
    d->pd = ibv_alloc_pd(d->ctx);
    if (!d->pd) return hc_error_errno(HCOMM_ERR_NO_MEMORY, errno, "verbs: ibv_alloc_pd(%s)", d->dev_name);
    d->me.port = (uint8_t)pick.port;
    d->me.link_layer = pick.pattr.link_layer;
    d->me.mtu = (uint8_t)pick.pattr.active_mtu;
    d->me.lid = pick.pattr.lid;
    if (pick.pattr.link_layer == IBV_LINK_LAYER_ETHERNET)
        d->gid_index = hc_verbs_cfg.gid_index >= 0
                           ? (int)hc_verbs_cfg.gid_index
                           : hc_verbs_pick_gid(d->ctx, pick.port, pick.pattr.gid_tbl_len,
                                               env->bootstrap_host);
    else
        d->gid_index = hc_verbs_cfg.gid_index >= 0 ? (int)hc_verbs_cfg.gid_index : 0;
    union ibv_gid gid;
    if (ibv_query_gid(d->ctx, (uint8_t)pick.port, d->gid_index, &gid) != 0)
        return hc_error_errno(HCOMM_ERR_INVALID, errno, "verbs: %s port %d has no GID index %d (HCOMM_IB_GID_INDEX)",
                              d->dev_name, pick.port, d->gid_index);
    if (pick.pattr.link_layer == IBV_LINK_LAYER_ETHERNET && hc_verbs_gid_zero(&gid))
        return hc_error(HCOMM_ERR_INVALID, "verbs: %s port %d: GID index %d is empty (HCOMM_IB_GID_INDEX)",
                        d->dev_name, pick.port, d->gid_index);
    memcpy(d->me.gid, gid.raw, 16);
    d->max_msg = pick.pattr.max_msg_sz ? pick.pattr.max_msg_sz : (1u << 30);
    char gs[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, gid.raw, gs, sizeof(gs));
    hc_log_info("verbs: %s port %d (%s, MTU %d), GID[%d] %s", d->dev_name, pick.port,
                hc_verbs_ll_name(pick.pattr.link_layer), hc_verbs_mtu_bytes(pick.pattr.active_mtu),
                d->gid_index, gs);
    return HCOMM_OK;
}

void hc_verbs_dev_close(hc_verbs_drv_t *d)
{
    int rc = d->pd ? ibv_dealloc_pd(d->pd) : 0;
    if (rc != 0)
        hc_log_warn("%s: ibv_dealloc_pd on %s: %s (resources of the protection domain still "
                    "allocated)",
                    d->base.ops ? d->base.ops->name : "verbs",
                    d->ctx ? ibv_get_device_name(d->ctx->device) : "?", strerror(rc));
    if (d->ctx) (void)ibv_close_device(d->ctx);
    d->pd = NULL;
    d->ctx = NULL;
}

/* What open made, undone (also after a failed open). */
static void hc_verbs_teardown(hc_verbs_drv_t *d)
{
    for (int i = 0; i < d->ncq; i++)
        d->dp->cq_destroy(d, &d->cqs[i]);
    free(d->cqs);
    d->dp->mr_dereg(d, &d->ctrl_mr);
    free(d->ctrl);
    if (d->dp->dev_close)
        d->dp->dev_close(d);
    else
        hc_verbs_dev_close(d);
    free(d->conns);
    free(d->up);
    free(d->early);
    free(d);
}

static hcomm_status_t hc_verbs_setup(hc_verbs_drv_t *d, const hc_drv_env_t *env)
{
    hcomm_status_t st = hc_verbs_check_knobs();
    if (st != HCOMM_OK) return st;
    d->conns = calloc((size_t)env->size, sizeof(*d->conns));
    d->up = calloc((size_t)env->size, sizeof(*d->up));
    d->early = calloc((size_t)env->size, sizeof(*d->early));
    if (!d->conns || !d->up || !d->early) return hc_error(HCOMM_ERR_NO_MEMORY, "verbs: connection table");
    d->me.magic = HC_VERBS_MAGIC;
    if (getrandom(&d->me.instance, sizeof(d->me.instance), 0) != sizeof(d->me.instance))
        d->me.instance = hc_time_ns() ^ ((uint64_t)getpid() << 32);
    st = d->dp->dev_open ? d->dp->dev_open(d, env) : hc_verbs_dev_open(d, env);
    if (st != HCOMM_OK) return st;
    d->nqp = (int)hc_verbs_cfg.qps_per_peer;
    /* Twice what the HCA's own retries take (4.096 us * 2^timeout per try),
     * plus a second: the NIC reports retry exhaustion itself well before;
     * this catches a peer end that neither answers nor is reported (rxe
     * was seen to let a dead process's QP go unreported for minutes). */
    d->stall_ns = 2 * (uint64_t)(4096.0 * (double)(1ull << hc_verbs_cfg.timeout)) *
                      (uint64_t)(hc_verbs_cfg.retry_cnt + 1) +
                  1000000000ull;
    d->zcopy_threshold = hc_verbs_cfg.zcopy_threshold;
    d->signal_every = (uint32_t)hc_verbs_cfg.signal_every;
    d->eager = strcmp(hc_verbs_cfg.eager, "send") ? HC_VERBS_EAGER_WRITE : HC_VERBS_EAGER_SEND;
    /* The control region: one line per peer for its credit word. */
    size_t ctrl_len = HC_ALIGN_UP((size_t)env->size * HC_VERBS_CTRL_STRIDE, (size_t)4096);
    if (posix_memalign((void **)&d->ctrl, 4096, ctrl_len) != 0)
        return hc_error(HCOMM_ERR_NO_MEMORY, "verbs: %zu-byte control region", ctrl_len);
    memset(d->ctrl, 0, ctrl_len);
    if (d->dp->mr_reg(d, d->ctrl, ctrl_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                      &d->ctrl_mr) != HCOMM_OK)
        return hc_error(HCOMM_ERR_NO_MEMORY, "verbs: registering the control region: %s", hc_error_last());
    hc_log_info("%s: queues by %s, %d QP(s) per peer, eager by %s, zero copy above %zu B",
                d->base.ops ? d->base.ops->name : "verbs", d->dp->name, d->nqp,
                d->eager == HC_VERBS_EAGER_WRITE ? "RDMA WRITE" : "SEND", d->zcopy_threshold);
    return HCOMM_OK;
}

hcomm_status_t hc_verbs_open_dp(const hc_drv_env_t *env, const hc_verbs_dp_t *dp, hc_drv_t **drv_p)
{
    hc_verbs_drv_t *d = calloc(1, sizeof(*d));
    if (!d) return hc_error(HCOMM_ERR_NO_MEMORY, "verbs: driver state");
    d->env = env;
    d->dp = dp;
    hcomm_status_t st = hc_verbs_setup(d, env);
    if (st != HCOMM_OK) {
        hc_verbs_teardown(d);
        return st;
    }
    *drv_p = &d->base;
    return HCOMM_OK;
}

static hcomm_status_t hc_verbs_open(const hc_drv_env_t *env, hc_drv_t **drv_p)
{
    return hc_verbs_open_dp(env, &hc_verbs_dp_ibv, drv_p);
}

void hc_verbs_close(hc_drv_t *drv)
{
    hc_verbs_drv_t *d = (hc_verbs_drv_t *)drv;
    for (int r = 0; r < d->env->size; r++)
        if (d->conns[r]) hc_verbs_disconnect(&d->conns[r]->base);
    /* HCOMM_STATS_LEVEL=2 reports them (hc_verbs_counters); info logs them here. */
    char t[512];
    snprintf(t, sizeof(t),
             "%s stats: rank %d: RDMA WRITE %llu B, RDMA READ %llu B, eager %llu B in %llu frames "
             "(%llu inline), %llu credit writes, %llu put retries for want of credit, %llu "
             "registrations (%llu released)",
             drv->ops->name, d->env->rank, (unsigned long long)d->n_write_bytes,
             (unsigned long long)d->n_read_bytes, (unsigned long long)d->n_eager_bytes,
             (unsigned long long)d->n_eager_frames, (unsigned long long)d->n_inline,
             (unsigned long long)d->n_credit_writes, (unsigned long long)d->n_again_credit,
             (unsigned long long)d->n_regs, (unsigned long long)d->n_deregs);
    hc_log_info("%s", t);
    while (d->rma_free) {
        hc_verbs_rma_t *o = d->rma_free;
        d->rma_free = o->next;
        free(o);
    }
    hc_verbs_regs_release(d);
    hc_verbs_teardown(d);
}

static hcomm_status_t hc_verbs_addr_pack(hc_drv_t *drv, void *buf, size_t *len_p)
{
    hc_verbs_drv_t *d = (hc_verbs_drv_t *)drv;
    if (*len_p < sizeof(d->me))
        return hc_error(HCOMM_ERR_INVALID, "verbs: address blob needs %zu bytes, %zu given",
                        sizeof(d->me), *len_p);
    memcpy(buf, &d->me, sizeof(d->me));
    *len_p = sizeof(d->me);
    return HCOMM_OK;
}

static void hc_verbs_counters(hc_drv_t *drv,
                              void (*kv)(const char *name, uint64_t value, void *arg), void *arg)
{
    hc_verbs_drv_t *d = (hc_verbs_drv_t *)drv;
    kv("rdma_write_bytes", d->n_write_bytes, arg);
    kv("rdma_read_bytes", d->n_read_bytes, arg);
    kv("eager_bytes", d->n_eager_bytes, arg);
    kv("eager_frames", d->n_eager_frames, arg);
    kv("inline_frames", d->n_inline, arg);
    kv("credit_writes", d->n_credit_writes, arg);
    kv("put_retries_for_credit", d->n_again_credit, arg);
    kv("registrations", d->n_regs, arg);
    kv("deregistrations", d->n_deregs, arg);
}

/* The topology cache's key: the device and port (verbs and mlx5). */
static void hc_verbs_local_links(hc_drv_t *drv, char *buf, size_t len)
{
    const hc_verbs_drv_t *d = (const hc_verbs_drv_t *)drv;
    snprintf(buf, len, "%s port %u", d->dev_name, (unsigned)d->me.port);
}

void hc_verbs_fill_ops(struct hc_drv_ops *o)
{
    o->scope = HC_DRV_SCOPE_NET;
    o->caps = HC_DRV_CAP_USER_REG;
    /* device memory by dmabuf (the backend's mr_reg_dmabuf; refused there
     * where the provider or the kernel cannot: staged under HCOMM_GDR=auto) */
    o->mem_types = 1u << HC_MEM_DEVICE;
    o->addr_pack = hc_verbs_addr_pack;
    o->connect = hc_verbs_connect;
    o->put = hc_verbs_put;
    o->get = hc_verbs_get;
    o->progress = hc_verbs_progress;
    o->mem_reg = hc_verbs_mem_reg;
    o->mem_dereg = hc_verbs_mem_dereg;
    o->disconnect = hc_verbs_disconnect;
    o->close = hc_verbs_close;
    o->write = hc_verbs_write;
    o->rkey_pack = hc_verbs_rkey_pack;
    o->rkey_unpack = hc_verbs_rkey_unpack;
    o->rkey_release = hc_verbs_rkey_release;
    o->ep_recv = hc_verbs_ep_recv;
    o->counters = hc_verbs_counters;
    o->local_links = hc_verbs_local_links;
}

static struct hc_drv_ops hc_verbs_ops = {
    .name = "verbs",
    .priority = 50,
    .probe = hc_verbs_probe,
    .open = hc_verbs_open,
    .describe = hc_verbs_describe,
};

__attribute__((constructor)) static void hc_verbs_register(void)
{
    hc_verbs_fill_ops(&hc_verbs_ops);
    hc_drv_register(&hc_verbs_ops);
}
