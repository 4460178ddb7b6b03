/*
 * dpdk: plain Ethernet without the kernel, through DPDK poll-mode drivers.
 * Internal header shared by
 *   dpdk_eal.c    HCOMM_DPDK_PORT (this rank's entry), EAL's arguments and
 *                 its start (once per process), the probe;
 *   dpdk_port.c   the knobs, the port (a PCI device or a vdev such as
 *                 net_af_packet): MTU, mbuf pool, queues and offloads,
 *                 addresses, start and link; hcomm_info's listing;
 *   dpdk_setup.c  the driver's control path: open, connect, memory
 *                 registration, teardown, counters, the ops table;
 *   dpdk_tx.c     transmit: Ethernet + IPv4 + UDP framing, put (copied, or
 *                 zero copy from the caller's memory), the TX queue, the
 *                 window's (re)transmissions and acknowledgement packets;
 *   dpdk_rx.c     receive: progress (an RX burst, the acknowledgements
 *                 owed after it), classifying packets, delivery;
 *   dpdk_retx.c   the window's callbacks table, completions, the timers
 *                 (retransmission, peer timeout), peer failure;
 *   dpdk_rel.c    reliable delivery and congestion control (no DPDK types).
 * dpdk_inl.h holds the static inlines the data path's files share.
 * The design is in docs/dpdk.md.
 */
#ifndef HC_DRV_DPDK_H
#define HC_DRV_DPDK_H

#include "base/hc_base.h"
#include "drv/dpdk/dpdk_rel.h"
#include "drv/drv.h"

#include <rte_ether.h>
#include <rte_mbuf.h>

#define HC_DPDK_MAGIC 0x4843u /* "HC" */
#define HC_DPDK_VERSION 3     /* 2: kind's top bit, HC_DPDK_KIND_ACK_SOON; 3: ts_wait */
#define HC_DPDK_BURST 32
#define HC_DPDK_TXQ 64 /* packets queued for one rte_eth_tx_burst at most */

/* Address blob: how to reach this rank's port. */
typedef struct {
    uint32_t magic;
    uint8_t mac[6];
    uint16_t udp_port;    /* host order */
    uint32_t ip;          /* network order */
    uint32_t max_payload; /* frame header + payload bytes one packet carries */
    uint64_t session;     /* random per driver instance */
} hc_dpdk_addr_t;

/* After Ethernet + IPv4 + UDP, in every packet (little-endian fields). */
typedef struct __attribute__((packed)) {
    uint16_t magic;
    uint8_t version;
    uint8_t kind; /* HC_REL_DATA / HC_REL_ACK, | HC_DPDK_KIND_ACK_SOON */
    uint32_t src_rank;
    uint64_t src_session;
    uint64_t dst_session;
    uint32_t seq, ack;
    uint64_t sack;
    uint32_t ts, ts_echo, ts_wait;
} hc_dpdk_hdr_t;
/* Then, in DATA packets: hc_frame_hdr_t and its payload. */
#define HC_DPDK_KIND_ACK_SOON 0x80u /* the sender waits for this packet's acknowledgement */

#define HC_DPDK_L2L4_LEN (sizeof(struct rte_ether_hdr) + 20 + 8)
#define HC_DPDK_HDRS_LEN (HC_DPDK_L2L4_LEN + sizeof(hc_dpdk_hdr_t))

typedef struct {
    const char *port_list; /* HCOMM_DPDK_PORT as set: entries by local rank, %r and %l */
    const char *args;      /* HCOMM_DPDK_ARGS */
    char port[512];        /* HCOMM_DPDK_PORT, %r and %l expanded, this rank's entry */
    char eal_args[1024];   /* the EAL command line (hcomm_info, logs) */
    int64_t udp_base;
    int64_t window;
    double rto_min, rto_max, peer_timeout;
    double ack_delay; /* HCOMM_DPDK_ACK_DELAY, seconds */
    const char *cc;   /* swift | off */
    size_t zcopy_threshold;
    double rx_drop;        /* test fault injection: received DATA packets dropped */
    double rx_drop_acks;   /* test fault injection: received ACK packets dropped */
    double rx_corrupt;     /* test fault injection: received packets with a byte flipped */
    const char *udp_cksum; /* auto | on | off */
    const char *reg;       /* HCOMM_DPDK_REGISTER: auto | all */
    int64_t mtu;           /* 0: the port's */
    double link_wait;      /* seconds */
    int64_t mbufs;
    int64_t ring;
    const char *ip;
} hc_dpdk_cfg_t;
extern hc_dpdk_cfg_t hc_dpdk_cfg;

/* The process's port: EAL runs once per process and cannot restart, so the
 * port stays configured and started from the first open to exit; each
 * driver instance (one at a time) uses it. */
enum { HC_DPDK_CKSUM_OFF, HC_DPDK_CKSUM_SW, HC_DPDK_CKSUM_HW };

/* The largest frame the driver sends (an IPv4 datagram's 64 KiB, less room). */
#define HC_DPDK_MTU_MAX 65000
/* memif's frame size unless HCOMM_DPDK_MTU says: 32 MiB allreduce busbw on
 * this host at 1500 / 9000 / 16000 / 32000 / 64000: 1.0 / 2.3 / 2.6 / 2.3 /
 * 2.4 GB/s (in place; docs/dpdk.md). */
#define HC_DPDK_MEMIF_MTU 16000

typedef struct {
    bool up;
    uint16_t port_id;
    struct rte_mempool *pool;
    struct rte_ether_addr mac;
    uint32_t ip; /* network order */
    uint16_t mtu;
    bool multi_seg;   /* the port sends chained mbufs (zero copy) */
    bool ext_iova_ok; /* the PMD does not DMA by IOVA (a vdev that copies): zero copy
                         from any memory; else only from registered memory */
    char driver[64];
    char name[128];
    char iface[64]; /* af_packet/af_xdp iface=, "" otherwise */
    int guard_fd;   /* kernel UDP socket holding our port (vdevs on a kernel iface) */
    bool in_use;
    bool memif_client; /* started at wireup (hc_dpdk_port_start), not at open */
    bool started;      /* rte_eth_dev_start done: bursts allowed */
    bool link_seen;    /* its link was up once */
    int cksum;         /* HC_DPDK_CKSUM_*: how sent packets get their UDP checksum */
} hc_dpdk_port_t;
extern hc_dpdk_port_t hc_dpdk_port;

/* dpdk_port.c */
/* Starts EAL and the port (idempotent). why on failure. */
hcomm_status_t hc_dpdk_port_up(const hc_drv_env_t *env, char *why, size_t why_len);
/* Starts the configured port (idempotent) and, with wait_link, waits up to
 * HCOMM_DPDK_LINK_WAIT for its link. */
hcomm_status_t hc_dpdk_port_start(bool wait_link, char *why, size_t why_len);
void hc_dpdk_describe(const hc_drv_env_t *env, void (*line)(const char *text, void *arg),
                      void *arg);

/* dpdk_eal.c */
/* Expands HCOMM_DPDK_PORT for this rank into out; false when unset. */
bool hc_dpdk_port_spec(const hc_drv_env_t *env, char *out, size_t cap);
/* A PCI address (dddd:bb:dd.f or bb:dd.f), as opposed to a vdev string. */
bool hc_dpdk_is_pci(const char *spec);
/* The value of key= in a vdev's argument list ("" when absent). */
void hc_dpdk_vdev_arg(const char *spec, const char *key, char *out, size_t cap);
/* The MTU asked for: HCOMM_DPDK_MTU, else on memif (a shared-memory link
 * with no wire MTU) HC_DPDK_MEMIF_MTU, else 0 (the port's). */
int64_t hc_dpdk_want_mtu(const char *spec);
/* Starts EAL for port once per process; a failure is final (EAL cannot
 * start again) and said again to every later call. */
hcomm_status_t hc_dpdk_eal_start(const char *port, char *why, size_t why_len);
/* EAL was started and runs. */
bool hc_dpdk_eal_running(void);
hcomm_status_t hc_dpdk_probe(const hc_drv_env_t *env, char *why, size_t why_len);

/* ---- the driver instance (dpdk_setup.c, dpdk_tx.c, dpdk_rx.c, dpdk_retx.c) ---------- */

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

/* dpdk_tx.c: put, the TX queue, the packets the window sends */
hcomm_status_t hc_dpdk_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
                           void *cookie);
/* Hands the queued packets to the PMD (which frees what it sent); what it
 * refuses (its ring is full) stays queued, in order, for the next flush. */
void hc_dpdk_tx_flush(hc_dpdk_drv_t *d);
void hc_dpdk_flush(hc_drv_t *drv);
int hc_dpdk_rel_xmit(void *arg, void *pkt, const hc_rel_wire_t *w);
int hc_dpdk_rel_ack(void *arg, const hc_rel_wire_t *w);

/* dpdk_rx.c: progress, receiving */
int hc_dpdk_progress(hc_drv_t *drv);
void hc_dpdk_rel_deliver(void *arg, void *pkt);
void hc_dpdk_rel_discard(void *arg, void *pkt);

/* dpdk_retx.c: the window's callbacks, timers, peer failure */
extern const hc_rel_ops_t hc_dpdk_rel_ops;
/* Runs the timers of the connections with packets in flight (retransmission,
 * peer timeout); answers how many peers it failed. */
int hc_dpdk_timers(hc_dpdk_drv_t *d, uint64_t now);
/* hc_rel_drain's callback: a packet whose peer failed, its put failed. */
void hc_dpdk_fail_one(void *arg, void *pkt, void *cookie);
void hc_dpdk_peer_gone(hc_drv_t *drv, int peer);

#endif /* HC_DRV_DPDK_H */
