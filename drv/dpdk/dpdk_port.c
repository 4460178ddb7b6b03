/*
 * dpdk driver, setup: the knobs, the port (its MTU, its mbuf pool, its
 * queues and offloads, its addresses, starting it and waiting for its link)
 * and hcomm_info's listing. See docs/dpdk.md.
 *
 * The port is the process's: EAL (dpdk_eal.c) cannot restart, so the port
 * is configured by the first open and stays configured and started until
 * exit; each driver instance (one at a time) uses it.
 */
#include "drv/dpdk/dpdk.h"
#include "base/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_version.h>

hc_dpdk_cfg_t hc_dpdk_cfg;
hc_dpdk_port_t hc_dpdk_port = {.guard_fd = -1};

static const hc_config_knob_t hc_dpdk_knobs[] = {
    HC_KNOB_STR(hc_dpdk_cfg.port_list, "HCOMM_DPDK_PORT", "",
                "dpdk: the port, a PCI address or a vdev (net_af_packet0,iface=eth1); %r = "
                "rank, %l = local rank; entries separated by ';' are used one per local rank"),
    HC_KNOB_STR(hc_dpdk_cfg.args, "HCOMM_DPDK_ARGS", "",
                "dpdk: EAL arguments replacing the defaults (--in-memory --no-telemetry, "
                "hugepages when free); the port's argument and -l are added unless given"),
    HC_KNOB_STR(hc_dpdk_cfg.ip, "HCOMM_DPDK_IP", "",
                "dpdk: this rank's IPv4 address in the frames (\"\": the vdev's kernel "
                "interface address, else 169.254.<node>)"),
    HC_KNOB_INT(hc_dpdk_cfg.udp_base, "HCOMM_DPDK_UDP_PORT", "47590",
                "dpdk: UDP port of local rank 0 (local rank i uses this + i)"),
    HC_KNOB_INT(hc_dpdk_cfg.window, "HCOMM_DPDK_WINDOW", "512",
                "dpdk: packets in flight per peer at most (power of two, 2..4096)"),
    HC_KNOB_STR(hc_dpdk_cfg.cc, "HCOMM_DPDK_CC", "swift",
                "dpdk: congestion control, swift (delay-based window) or off (the whole window)"),
    HC_KNOB_DOUBLE(hc_dpdk_cfg.rto_min, "HCOMM_DPDK_RTO_MIN", "0.001",
                   "dpdk: smallest retransmission timeout, seconds"),
    HC_KNOB_DOUBLE(hc_dpdk_cfg.rto_max, "HCOMM_DPDK_RTO_MAX", "0.2",
                   "dpdk: largest retransmission timeout, seconds"),
    HC_KNOB_DOUBLE(hc_dpdk_cfg.peer_timeout, "HCOMM_DPDK_PEER_TIMEOUT", "0",
                   "dpdk: seconds of unacknowledged data before a peer is declared failed; 0: "
                   "HCOMM_TIMEOUT (a peer acknowledges only while its process polls, and a rank "
                   "computing between two calls is not failed sooner than a wait on it would "
                   "time out; a process that died is seen within seconds by its bootstrap "
                   "connection)"),
    HC_KNOB_DOUBLE(hc_dpdk_cfg.ack_delay, "HCOMM_DPDK_ACK_DELAY", "0.00005",
                   "dpdk: seconds an acknowledgement may wait to ride on data to the peer (a "
                   "reply), at most half HCOMM_DPDK_RTO_MIN; 16 packets owed, a hole or a "
                   "duplicate acknowledge at once; 0: at the end of every receive burst"),
    HC_KNOB_SIZE(hc_dpdk_cfg.zcopy_threshold, "HCOMM_DPDK_ZCOPY_THRESHOLD", "1K",
                 "dpdk: payloads from this size go zero copy (the NIC reads the caller's "
                 "memory) when the port sends chained mbufs; 0 disables"),
    HC_KNOB_INT(hc_dpdk_cfg.mtu, "HCOMM_DPDK_MTU", "0",
                "dpdk: port MTU to set (0: keep the port's; jumbo frames carry more per packet)"),
    HC_KNOB_DOUBLE(hc_dpdk_cfg.link_wait, "HCOMM_DPDK_LINK_WAIT", "10",
                   "dpdk: seconds init waits for the port's link to come up (a memif client "
                   "starts its port again until its server takes it); frames sent before "
                   "are retransmitted"),
    HC_KNOB_INT(hc_dpdk_cfg.mbufs, "HCOMM_DPDK_MBUFS", "0",
                "dpdk: mbufs in the pool (0: 16383, fewer for frames over 4 KiB: 64 MiB "
                "of them, at least 4095)"),
    HC_KNOB_INT(hc_dpdk_cfg.ring, "HCOMM_DPDK_RING", "1024",
                "dpdk: RX and TX descriptors of the port's queue"),
    HC_KNOB_DOUBLE(hc_dpdk_cfg.rx_drop, "HCOMM_DPDK_RX_DROP", "0",
                   "dpdk: fault injection for tests: this fraction of received data packets "
                   "is dropped"),
    HC_KNOB_STR(hc_dpdk_cfg.udp_cksum, "HCOMM_DPDK_UDP_CKSUM", "auto",
                "dpdk: UDP checksums on sent packets: on (the port's offload, else computed), "
                "off (0: none, as IPv4 allows), auto (the offload where the port has it, "
                "computed on a PCI port without it, none on a virtual device); received "
                "checksums are always checked"),
    HC_KNOB_DOUBLE(hc_dpdk_cfg.rx_corrupt, "HCOMM_DPDK_RX_CORRUPT", "0",
                   "dpdk: fault injection for tests: this fraction of received packets gets "
                   "a byte flipped before it is checked"),
    HC_KNOB_STR(hc_dpdk_cfg.reg, "HCOMM_DPDK_REGISTER", "auto",
                "dpdk: which memory is registered with DPDK for zero-copy sends: auto (on a "
                "port that DMAs, a PCI device: library regions at creation and the buffers of "
                "large sends through the registration cache; nothing on a virtual device, "
                "which copies from any address), all (as on a DMAing port, whatever the port: "
                "tests the registration path on a virtual device; needs EAL in IOVA-as-VA "
                "mode, --iova-mode=va)"),
    HC_KNOB_DOUBLE(hc_dpdk_cfg.rx_drop_acks, "HCOMM_DPDK_RX_DROP_ACKS", "0",
                   "dpdk: fault injection for tests: this fraction of received "
                   "acknowledgements is dropped"),
};
HC_CONFIG_KNOBS("dpdk", hc_dpdk_knobs)

/* ---- the port -------------------------------------------------------------------- */

static void hc_dpdk_port_exit(void)
{
    if (!hc_dpdk_port.up) return;
    if (hc_dpdk_port.started) (void)rte_eth_dev_stop(hc_dpdk_port.port_id);
    (void)rte_eth_dev_close(hc_dpdk_port.port_id);
    hc_dpdk_port.up = hc_dpdk_port.started = false;
}

/* Waits up to ms for the port's link to come up; *link says how it is. */
static void hc_dpdk_wait_link(uint16_t pid, int ms, struct rte_eth_link *link)
{
    for (int i = 0; i <= ms / 20; i++) {
        memset(link, 0, sizeof(*link));
        if (rte_eth_link_get_nowait(pid, link) != 0 || link->link_status) return;
        usleep(20000);
    }
}

/* A memif vdev in the client role (memif's default role is server). */
static bool hc_dpdk_memif_client(const char *spec)
{
    char role[16];
    if (strncmp(spec, "net_memif", 9)) return false;
    hc_dpdk_vdev_arg(spec, "role", role, sizeof(role));
    return !strcmp(role, "client") || !strcmp(role, "slave");
}

static uint32_t hc_dpdk_iface_ip(const char *iface)
{
    struct ifaddrs *ifa, *i;
    uint32_t ip = 0;
    if (iface[0] == '\0' || getifaddrs(&ifa) != 0) return 0;
    for (i = ifa; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !strcmp(i->ifa_name, iface)) {
            ip = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
            break;
        }
    freeifaddrs(ifa);
    return ip;
}

/* The UDP port is this rank's: hold it in the kernel too where the kernel
 * sees the interface (a vdev on a kernel iface), so that no other program
 * takes it and the kernel does not answer our frames with ICMP
 * port-unreachable. */
static hcomm_status_t hc_dpdk_guard_port(uint32_t ip, uint16_t port, char *why, size_t why_len)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return HCOMM_OK; /* only a courtesy */
    int small = 4096;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr = {ip}};
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int e = errno;
        close(fd);
        if (e == EADDRINUSE) {
            char a[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &ip, a, sizeof(a));
            snprintf(why, why_len,
                     "UDP port %s:%u is taken by another program (HCOMM_DPDK_UDP_PORT moves it)", a,
                     port);
            return HCOMM_ERR_IO;
        }
        return HCOMM_OK;
    }
    hc_dpdk_port.guard_fd = fd;
    return HCOMM_OK;
}

/* A port's frame sizes: mtu, what the driver sends; eth_mtu, what ethdev
 * is told; free_frames: memif, whose frames ethdev's MTU does not bound. */
typedef struct {
    uint16_t mtu, eth_mtu;
    bool free_frames;
} hc_dpdk_mtu_t;

static hcomm_status_t hc_dpdk_port_mtu(uint16_t pid, const char *spec,
                                       const struct rte_eth_dev_info *info, hc_dpdk_mtu_t *m,
                                       char *why, size_t why_len)
{
    uint16_t mtu = RTE_ETHER_MTU;
    (void)rte_eth_dev_get_mtu(pid, &mtu);
    /* memif chains its ring buffers for a packet of any length and checks
     * no MTU on its data path; ethdev still refuses an MTU above 1500 for
     * it. So on memif, HCOMM_DPDK_MTU is the frame size the driver uses
     * and the port keeps its ethdev MTU (up to an IPv4 datagram's 64 KiB). */
    m->free_frames = !strncmp(spec, "net_memif", 9);
    unsigned max_mtu = m->free_frames ? HC_DPDK_MTU_MAX : info->max_mtu;
    int64_t want = hc_dpdk_want_mtu(spec);
    if (want != 0) {
        if (want < 576 || want > max_mtu) {
            snprintf(why, why_len, "HCOMM_DPDK_MTU %lld outside [576, %u] (the port's maximum)",
                     (long long)want, max_mtu);
            return HCOMM_ERR_INVALID;
        }
        mtu = (uint16_t)want;
    }
    if (mtu < 576) mtu = 576;
    m->mtu = m->eth_mtu = mtu;
    if (m->free_frames &&
        (uint32_t)mtu + RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN > info->max_rx_pktlen)
        m->eth_mtu = (uint16_t)(info->max_rx_pktlen - RTE_ETHER_HDR_LEN - RTE_ETHER_CRC_LEN);
    return HCOMM_OK;
}

/* The knobs only the port uses, checked before anything is allocated. */
static hcomm_status_t hc_dpdk_port_knobs(char *why, size_t why_len)
{
    if ((hc_dpdk_cfg.mbufs != 0 && hc_dpdk_cfg.mbufs < 1023) || hc_dpdk_cfg.ring < 64 ||
        hc_dpdk_cfg.ring > 16384) {
        snprintf(why, why_len,
                 "HCOMM_DPDK_MBUFS %lld (0 or >= 1023) or HCOMM_DPDK_RING %lld "
                 "(64..16384) out of range",
                 (long long)hc_dpdk_cfg.mbufs, (long long)hc_dpdk_cfg.ring);
        return HCOMM_ERR_INVALID;
    }
    const char *reg = hc_dpdk_cfg.reg ? hc_dpdk_cfg.reg : "auto";
    if (strcmp(reg, "auto") && strcmp(reg, "all")) {
        snprintf(why, why_len, "HCOMM_DPDK_REGISTER=\"%s\": auto or all", reg);
        return HCOMM_ERR_INVALID;
    }
    if (!(hc_dpdk_cfg.link_wait >= 0 && hc_dpdk_cfg.link_wait <= 600)) {
        snprintf(why, why_len, "HCOMM_DPDK_LINK_WAIT %g out of range (0..600 seconds)",
                 hc_dpdk_cfg.link_wait);
        return HCOMM_ERR_INVALID;
    }
    return HCOMM_OK;
}

/* The mbuf pool (hc_dpdk_port.pool): HCOMM_DPDK_MBUFS mbufs that hold a
 * frame of mtu bytes each. */
static hcomm_status_t hc_dpdk_pool_create(uint16_t pid, const char *spec, uint16_t mtu, char *why,
                                          size_t why_len)
{
    /* On af_xdp the pool is the umem (unaligned chunks, one per mbuf): the
     * kernel writes a frame XDP_PACKET_HEADROOM (256) bytes past the mbuf's
     * own headroom and drops a larger one silently (the socket's
     * rx_dropped: frames of 2150-2950 bytes at MTU 3000 never arrived and
     * the job stalled), so the data room holds that too; and a chunk is at
     * most a page. */
    bool xdp = !strncmp(spec, "net_af_xdp", 10);
    const unsigned xdp_headroom = 256, mbuf_overhead = (unsigned)sizeof(struct rte_mbuf) + 64;
    unsigned room = HC_MAX((unsigned)mtu + RTE_ETHER_HDR_LEN + 64 + (xdp ? xdp_headroom : 0),
                           (unsigned)RTE_MBUF_DEFAULT_DATAROOM);
    unsigned page = (unsigned)getpagesize();
    if (xdp && room + RTE_PKTMBUF_HEADROOM + mbuf_overhead > page) {
        snprintf(
            why, why_len,
            "HCOMM_DPDK_MTU %u is too large for net_af_xdp: a frame, its headroom and its "
            "mbuf must fit a %u-byte page (by that, MTU at most %u; the interface may allow less)",
            mtu, page,
            page - mbuf_overhead - RTE_PKTMBUF_HEADROOM - xdp_headroom - 64 - RTE_ETHER_HDR_LEN);
        return HCOMM_ERR_INVALID;
    }
    char pool_name[32];
    snprintf(pool_name, sizeof(pool_name), "hcomm_%u", pid);
    unsigned mbufs = (unsigned)hc_dpdk_cfg.mbufs;
    if (mbufs == 0) mbufs = HC_MIN(16383u, HC_MAX(4095u, (64u << 20) / room));
    hc_dpdk_port.pool = rte_pktmbuf_pool_create(
        pool_name, mbufs, 256, 0, (uint16_t)(room + RTE_PKTMBUF_HEADROOM),
        (int)rte_eth_dev_socket_id(pid) < 0 ? SOCKET_ID_ANY : rte_eth_dev_socket_id(pid));
    if (!hc_dpdk_port.pool) {
        snprintf(why, why_len,
                 "rte_pktmbuf_pool_create(%u mbufs of %u bytes): %s (HCOMM_DPDK_MBUFS)", mbufs,
                 room, rte_strerror(rte_errno));
        return HCOMM_ERR_NO_MEMORY;
    }
    return HCOMM_OK;
}

/* How sent packets get their UDP checksum (HCOMM_DPDK_UDP_CKSUM, what the
 * port offloads): HC_DPDK_CKSUM_*, or -1 for a value it does not know. */
static int hc_dpdk_cksum_mode(const char *spec, const struct rte_eth_dev_info *info)
{
    const char *ck = hc_dpdk_cfg.udp_cksum ? hc_dpdk_cfg.udp_cksum : "auto";
    bool hw_ck = (info->tx_offload_capa & RTE_ETH_TX_OFFLOAD_UDP_CKSUM) != 0;
    if (!strcmp(ck, "off")) return HC_DPDK_CKSUM_OFF;
    if (strcmp(ck, "on") && strcmp(ck, "auto")) return -1;
    return hw_ck                                       ? HC_DPDK_CKSUM_HW
           : !strcmp(ck, "on") || hc_dpdk_is_pci(spec) ? HC_DPDK_CKSUM_SW
                                                       : HC_DPDK_CKSUM_OFF;
}

/* One RX and one TX queue on the pool, chained TX and the checksum offload
 * where the port has them, the MTU. */
static hcomm_status_t hc_dpdk_port_configure(const hc_drv_env_t *env, uint16_t pid,
                                             const char *name, const char *spec,
                                             const struct rte_eth_dev_info *info,
                                             const hc_dpdk_mtu_t *m, char *why, size_t why_len)
{
    hc_dpdk_port_t *P = &hc_dpdk_port;
    struct rte_eth_conf conf;
    memset(&conf, 0, sizeof(conf));
    conf.rxmode.mtu = m->eth_mtu;
    P->multi_seg = (info->tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0;
    if (P->multi_seg) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
    int cksum = hc_dpdk_cksum_mode(spec, info);
    if (cksum < 0) {
        snprintf(why, why_len, "HCOMM_DPDK_UDP_CKSUM=\"%s\": auto, on or off",
                 hc_dpdk_cfg.udp_cksum);
        return HCOMM_ERR_INVALID;
    }
    P->cksum = cksum;
    if (P->cksum == HC_DPDK_CKSUM_HW) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
    int rc = rte_eth_dev_configure(pid, 1, 1, &conf);
    uint16_t nrx = (uint16_t)hc_dpdk_cfg.ring, ntx = (uint16_t)hc_dpdk_cfg.ring;
    if (rc == 0) rc = rte_eth_dev_adjust_nb_rx_tx_desc(pid, &nrx, &ntx);
    int sock = rte_eth_dev_socket_id(pid);
    unsigned socket = sock < 0 ? (unsigned)SOCKET_ID_ANY : (unsigned)sock;
    if (rc == 0) rc = rte_eth_rx_queue_setup(pid, 0, nrx, socket, NULL, P->pool);
    if (rc == 0) rc = rte_eth_tx_queue_setup(pid, 0, ntx, socket, NULL);
    if (rc == 0 && hc_dpdk_cfg.mtu > 0 && !m->free_frames)
        rc = rte_eth_dev_set_mtu(pid, m->eth_mtu);
    if (rc == 0) return HCOMM_OK;
    /* An AF_XDP socket owns its interface queue: ranks of one node on
     * one interface need a queue each (or an interface each). */
    bool xdp = !strncmp(spec, "net_af_xdp", 10);
    char shared[300] = "";
    if (xdp && env->local_size > 1 && !strstr(spec, "start_queue="))
        snprintf(shared, sizeof(shared),
                 "; %d ranks of this node: each needs its own interface queue "
                 "(start_queue=%%l on a NIC that steers UDP port %lld+l to queue l) or its "
                 "own interface (%%l in iface=)",
                 env->local_size, (long long)hc_dpdk_cfg.udp_base);
    snprintf(why, why_len, "configuring port %s (1 RX/TX queue, %u/%u descriptors, MTU %u): %s%s%s",
             name, nrx, ntx, m->mtu, rte_strerror(rc < 0 ? -rc : rc),
             !xdp ? ""
                  : " (is an XDP program already on the interface? A job that was killed "
                    "leaves one: ip link set dev <iface> xdp off)",
             shared);
    return HCOMM_ERR_NO_DEVICE;
}

/* This rank's IPv4 address in the frames (HCOMM_DPDK_IP, the vdev's kernel
 * interface's, else 169.254.<node>) and, on a kernel interface, its UDP
 * port held by a kernel socket. */
static hcomm_status_t hc_dpdk_port_addr(const hc_drv_env_t *env, char *why, size_t why_len)
{
    hc_dpdk_port_t *P = &hc_dpdk_port;
    uint16_t udp = (uint16_t)(hc_dpdk_cfg.udp_base + HC_MAX(env->local_rank, 0));
    if (hc_dpdk_cfg.ip && hc_dpdk_cfg.ip[0]) {
        struct in_addr a;
        if (inet_pton(AF_INET, hc_dpdk_cfg.ip, &a) != 1) {
            snprintf(why, why_len, "HCOMM_DPDK_IP \"%s\" is not an IPv4 address", hc_dpdk_cfg.ip);
            return HCOMM_ERR_INVALID;
        }
        P->ip = a.s_addr;
    } else if ((P->ip = hc_dpdk_iface_ip(P->iface)) == 0) {
        int node = env->node_of_rank ? env->node_of_rank[env->rank] : env->rank;
        P->ip = htonl(0xa9fe0000u | (uint32_t)((node + 1) & 0xffff)); /* 169.254/16 */
    }
    if (P->iface[0]) return hc_dpdk_guard_port(P->ip, udp, why, why_len);
    return HCOMM_OK;
}

/* The configured port started, except a memif client's, and told. */
static hcomm_status_t hc_dpdk_port_go(const char *spec, char *why, size_t why_len)
{
    hc_dpdk_port_t *P = &hc_dpdk_port;
    /* A memif client starts its port at wireup, after the address exchange,
     * when its server (a rank of this job) has surely started its own: a
     * client that connects between its server's EAL start (which makes the
     * socket) and its server's port start is told "ID not found" and
     * disconnected, and DPDK does not try again (2 of 8 runs failed so). */
    P->memif_client = hc_dpdk_memif_client(spec);
    if (!P->memif_client) {
        /* A memif server's link comes up when its client connects, after
         * this open: it waits for it at wireup. */
        hcomm_status_t st = hc_dpdk_port_start(strncmp(spec, "net_memif", 9) != 0, why, why_len);
        if (st != HCOMM_OK) return st;
    }
    hc_log_info("dpdk: port %s (%s) %02x:%02x:%02x:%02x:%02x:%02x MTU %u%s, UDP checksum %s, "
                "EAL: %s",
                P->name, P->driver, P->mac.addr_bytes[0], P->mac.addr_bytes[1],
                P->mac.addr_bytes[2], P->mac.addr_bytes[3], P->mac.addr_bytes[4],
                P->mac.addr_bytes[5], P->mtu,
                P->multi_seg ? ", chained TX (zero copy)" : ", no chained TX (copies)",
                P->cksum == HC_DPDK_CKSUM_HW   ? "offloaded"
                : P->cksum == HC_DPDK_CKSUM_SW ? "computed"
                                               : "none",
                hc_dpdk_cfg.eal_args);
    return HCOMM_OK;
}

/* Starts EAL and configures the port (HCOMM_DPDK_PORT, this rank's entry)
 * in phases: its MTU, the mbuf pool, its queues and offloads, its
 * addresses; then starts it, except a memif client (at wireup). */
hcomm_status_t hc_dpdk_port_up(const hc_drv_env_t *env, char *why, size_t why_len)
{
    hc_dpdk_port_t *P = &hc_dpdk_port;
    if (P->up) return HCOMM_OK;
    char spec[sizeof(hc_dpdk_cfg.port)];
    if (!hc_dpdk_port_spec(env, spec, sizeof(spec))) {
        snprintf(why, why_len,
                 "HCOMM_DPDK_PORT is not set (a PCI address or a vdev such as "
                 "net_af_packet0,iface=eth1)");
        return HCOMM_ERR_NO_DEVICE;
    }
    snprintf(hc_dpdk_cfg.port, sizeof(hc_dpdk_cfg.port), "%s", spec);
    hcomm_status_t st = hc_dpdk_eal_start(spec, why, why_len);
    if (st != HCOMM_OK) return st;

    char name[128];
    snprintf(name, sizeof(name), "%.*s", (int)strcspn(spec, ","), spec);
    uint16_t pid;
    if (rte_eth_dev_get_port_by_name(name, &pid) != 0) {
        snprintf(why, why_len, "DPDK has no port %s (%u ports: check HCOMM_DPDK_PORT and the PMD)",
                 name, rte_eth_dev_count_avail());
        return HCOMM_ERR_NO_DEVICE;
    }
    struct rte_eth_dev_info info;
    int rc = rte_eth_dev_info_get(pid, &info);
    if (rc != 0) {
        snprintf(why, why_len, "rte_eth_dev_info_get(%s): %s", name, rte_strerror(-rc));
        return HCOMM_ERR_NO_DEVICE;
    }
    hc_dpdk_mtu_t m;
    st = hc_dpdk_port_mtu(pid, spec, &info, &m, why, why_len);
    if (st == HCOMM_OK) st = hc_dpdk_port_knobs(why, why_len);
    if (st == HCOMM_OK) st = hc_dpdk_pool_create(pid, spec, m.mtu, why, why_len);
    if (st == HCOMM_OK) st = hc_dpdk_port_configure(env, pid, name, spec, &info, &m, why, why_len);
    if (st != HCOMM_OK) return st;
    /* At exit the port is closed: af_xdp then takes its XDP program off the
     * interface (left there, the next job could not attach its own). */
    static bool atexit_done;
    if (!atexit_done) atexit_done = atexit(hc_dpdk_port_exit) == 0;
    if (!m.free_frames) (void)rte_eth_dev_get_mtu(pid, &m.mtu);
    rte_eth_macaddr_get(pid, &P->mac);
    P->port_id = pid;
    P->mtu = m.mtu;
    snprintf(P->driver, sizeof(P->driver), "%s", info.driver_name ? info.driver_name : "?");
    snprintf(P->name, sizeof(P->name), "%s", name);
    /* Software PMDs on a kernel interface copy what they send: IO addresses
     * of the caller's memory do not matter to them. A PCI device DMAs, so
     * zero copy there needs memory DPDK knows (registered regions). */
    P->ext_iova_ok =
        !hc_dpdk_is_pci(spec) && strcmp(hc_dpdk_cfg.reg ? hc_dpdk_cfg.reg : "auto", "all") != 0;
    if (!P->ext_iova_ok && P->multi_seg && rte_eal_iova_mode() != RTE_IOVA_VA)
        hc_log_info("dpdk: port %s DMAs but EAL runs IOVA as PA: payloads are copied (zero "
                    "copy needs --iova-mode=va, an IOMMU and vfio-pci)",
                    name);
    hc_dpdk_vdev_arg(spec, "iface", P->iface, sizeof(P->iface));
    st = hc_dpdk_port_addr(env, why, why_len);
    if (st != HCOMM_OK) return st;
    P->up = true;
    return hc_dpdk_port_go(spec, why, why_len);
}

hcomm_status_t hc_dpdk_port_start(bool wait_link, char *why, size_t why_len)
{
    hc_dpdk_port_t *P = &hc_dpdk_port;
    int64_t limit = (int64_t)(hc_dpdk_cfg.link_wait * 1000);
    int rc = 0, waited = 0;
    /* A memif client cannot start before its server has made the socket
     * (the server may not be a rank of this job): try again for a while. */
    while (!P->started && (rc = rte_eth_dev_start(P->port_id)) != 0 && P->memif_client &&
           waited < limit) {
        usleep(50000);
        waited += 50;
    }
    if (rc != 0) {
        snprintf(why, why_len, "starting port %s (%s): %s", P->name, P->driver,
                 rte_strerror(rc < 0 ? -rc : rc));
        return HCOMM_ERR_NO_DEVICE;
    }
    P->started = true;
    if (!wait_link || P->link_seen) return HCOMM_OK;
    /* Frames sent before the link is up are lost (and retransmitted):
     * wait for it, as a memif pair takes a moment to connect. */
    struct rte_eth_link link;
    hc_dpdk_wait_link(P->port_id, (int)HC_MAX(limit - waited, 0), &link);
    P->link_seen = link.link_status;
    if (!link.link_status)
        hc_log_warn("dpdk: port %s (%s): link still down after %.1f s (HCOMM_DPDK_LINK_WAIT; "
                    "frames sent now are lost and retransmitted)",
                    P->name, P->driver, hc_dpdk_cfg.link_wait);
    return HCOMM_OK;
}
void hc_dpdk_describe(const hc_drv_env_t *env, void (*line)(const char *text, void *arg), void *arg)
{
    char text[1400], why[512];
    snprintf(text, sizeof(text), "  %s", rte_version());
    line(text, arg);
    if (hc_dpdk_probe(env, why, sizeof(why)) != HCOMM_OK) return; /* the reason is printed */
    if (hc_dpdk_port_up(env, why, sizeof(why)) != HCOMM_OK) {
        snprintf(text, sizeof(text), "  port not usable: %s", why);
        line(text, arg);
        if (!hc_dpdk_eal_running()) return;
    }
    snprintf(text, sizeof(text), "  EAL: %s", hc_dpdk_cfg.eal_args);
    line(text, arg);
    uint16_t pid;
    RTE_ETH_FOREACH_DEV(pid)
    {
        struct rte_eth_dev_info info;
        struct rte_ether_addr mac;
        struct rte_eth_link link;
        uint16_t mtu = 0;
        if (rte_eth_dev_info_get(pid, &info) != 0) continue;
        (void)rte_eth_dev_get_mtu(pid, &mtu);
        (void)rte_eth_macaddr_get(pid, &mac);
        memset(&link, 0, sizeof(link));
        (void)rte_eth_link_get_nowait(pid, &link);
        char name[RTE_ETH_NAME_MAX_LEN] = "?";
        (void)rte_eth_dev_get_name_by_port(pid, name);
        snprintf(text, sizeof(text),
                 "  port %u %s: driver %s, MAC %02x:%02x:%02x:%02x:%02x:%02x, MTU %u (max %u), "
                 "link %s %u Mb/s, queues rx %u tx %u, TX offloads%s%s%s",
                 pid, name, info.driver_name, mac.addr_bytes[0], mac.addr_bytes[1],
                 mac.addr_bytes[2], mac.addr_bytes[3], mac.addr_bytes[4], mac.addr_bytes[5], mtu,
                 info.max_mtu, link.link_status ? "up" : "down", link.link_speed,
                 info.max_rx_queues, info.max_tx_queues,
                 info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS ? " multi-seg" : "",
                 info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM ? " ipv4-cksum" : "",
                 info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_UDP_CKSUM ? " udp-cksum" : "");
        line(text, arg);
    }
}
