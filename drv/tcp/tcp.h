/*
 * tcp: the network driver of last resort, kernel sockets between nodes.
 * Internal header shared by tcp_setup.c (interface choice, listening,
 * connection establishment, failure handling, teardown), tcp_hello.c (the
 * authenticated handshake of a data socket, both sides), tcp_data.c (put,
 * the send queues, MSG_ZEROCOPY completions, the receive path, progress and
 * heartbeats), tcp_idle.c (closing idle connections), tcp_if.c (the
 * interface choice) and tcp_rail.c (several interfaces: rails, striping,
 * failover). See tcp_setup.c, tcp_hello.c and tcp_rail.c for the design.
 */
#ifndef HC_DRV_TCP_H
#define HC_DRV_TCP_H

#include "base/auth.h"
#include "base/hc_base.h"
#include "drv/drv.h"

#include <netinet/in.h>
#include <sys/socket.h>

#define HC_TCP_MAX_SOCKS 16           /* sockets per peer we accept (we open conn_per_peer) */
#define HC_TCP_MAX_FRAME (512u << 10) /* payload bytes per frame */
#define HC_TCP_EAGER_MAX (64u << 10)
#define HC_TCP_RBUF_SLACK (64u << 10)      /* room to read small frames in batches */
#define HC_TCP_INLINE 64                   /* control payloads copied into the queue entry */
#define HC_TCP_QUEUE_BYTES (16u << 20)     /* per socket: bytes queued before ERR_AGAIN */
#define HC_TCP_QUEUE_COPY (1u << 20)       /* per socket: copied bytes before ERR_AGAIN */
#define HC_TCP_RAIL_PROBE_BYTES (1u << 20) /* DATA that probes a rail's stale rate */
#define HC_TCP_RAIL_DELAY_FAR_NS                                                                   \
    1000000ull                     /* a rail's RTT this far above the least steers the stripe */
#define HC_TCP_MAGIC 0x68637470u   /* "hctp" */
#define HC_TCP_VERSION 2           /* 2: the key is proven (HMAC), never sent */
#define HC_TCP_ANON_MAX 64         /* accepted sockets whose hello is not read yet */
#define HC_TCP_MAX_RAILS 4         /* local interfaces (HCOMM_SOCKET_IFNAME=a,b) */
#define HC_TCP_RAIL_STRIDE 4       /* with rails: socket k is rail k / 4, index k % 4 */
#define HC_TCP_NOCHAN 0xffffu      /* rail header of a driver frame: no channel, no seq */
#define HC_TCP_IDX_REPLACE 0x8000u /* hello.sock_idx: the connector lost its socket here */

/* Driver-private frame types (never delivered to the core). */
enum {
    HC_TCP_FRAME_HB = HC_FRAME_DRIVER, /* heartbeat; flags & HC_TCP_HB_ECHO asks for a reply */
    HC_TCP_FRAME_BYE,                  /* orderly close follows: EOF is not a failure */
    HC_TCP_FRAME_CLOSE,     /* idle close request: a = core frames sent, b = core frames received */
    HC_TCP_FRAME_CLOSE_OK,  /* agreed: the requester closes every socket, we wait for EOF */
    HC_TCP_FRAME_CLOSE_NO,  /* refused (traffic pending): the connection stays */
    HC_TCP_FRAME_ACK,       /* rails: a = channel, b = its highest sequence delivered in order */
    HC_TCP_FRAME_RAIL_DOWN, /* rails: the sender left rail a (what it read there is lost) */
};
/* Idle-close handshake state of a connection (tcp_idle.c). */
enum { HC_TCP_IDLE_NONE, HC_TCP_IDLE_CLOSE_SENT, HC_TCP_IDLE_ACKED };
#define HC_TCP_HB_ECHO 1u
#define HC_TCP_ACK_GAP 1u /* rails: the ACK's sender dropped a frame past a gap: resend */

/* One rail's listening address in the blob. */
typedef struct {
    uint8_t addr[16];
    uint16_t port; /* network order */
    uint16_t family;
    uint8_t prefix; /* its subnet's prefix length (rails pair by subnet) */
    uint8_t pad[3];
} hc_tcp_rail_addr_t;

/* Address blob every rank publishes (round 2 of init). */
typedef struct {
    uint32_t magic;
    uint16_t family; /* AF_INET / AF_INET6 */
    uint16_t port;   /* network order */
    uint8_t addr[16];
    uint32_t pid;
    uint16_t nsocks;              /* sockets this rank opens per peer: the indexes it may connect */
    uint16_t version;             /* HC_TCP_VERSION */
    uint64_t instance;            /* random per process: a change means the peer restarted */
    uint8_t nonce[HC_AUTH_NONCE]; /* random per process: every hello to it is signed over it */
    uint16_t nrails;              /* 1: addr/port only; else rail[0..nrails) (rail[0] = addr) */
    uint16_t pad[3];
    hc_tcp_rail_addr_t rail[HC_TCP_MAX_RAILS];
} hc_tcp_addr_t;

/* With rails every frame is preceded by this (tcp_rail.c): core frames are
 * numbered per channel, so that a channel moved to another rail is resent
 * from its first unacknowledged frame and the receiver drops duplicates. */
typedef struct {
    uint16_t chan; /* HC_TCP_NOCHAN for the driver's own frames */
    uint16_t flags;
    uint32_t pad;
    uint64_t seq; /* 1, 2, ... per channel */
} hc_tcp_rhdr_t;

/* First bytes a connector writes on a new socket (tcp_hello.c). No field
 * is secret; mac proves the job key over all of them. */
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t sock_idx;
    int32_t src_rank, dst_rank;
    uint64_t src_instance, dst_instance;
    uint64_t counter;             /* per (acceptor, socket index): only grows */
    uint8_t nonce[HC_AUTH_NONCE]; /* the connector's, fresh: the answer is signed over it */
    uint8_t mac[HC_AUTH_MAC];     /* HMAC(key, "hcomm-tcp-hello", the above, acceptor's nonce) */
} hc_tcp_hello_t;

/* The acceptor's answer; anything but ACCEPT is followed by close. */
enum { HC_TCP_ACCEPT = 0, HC_TCP_REJ_TIEBREAK, HC_TCP_REJ_STALE, HC_TCP_REJ_BUSY };
typedef struct {
    uint32_t magic;
    uint32_t verdict;
    uint64_t instance;
    uint8_t mac[HC_AUTH_MAC]; /* HMAC(key, "hcomm-tcp-ack", the above, the hello less its mac) */
} hc_tcp_ack_t;

enum { HC_TCP_OBJ_LISTEN = 1, HC_TCP_OBJ_ANON, HC_TCP_OBJ_SLOT };
/* WAIT: lost a tie-break, the peer's connect for this socket is on its way. */
enum { HC_TCP_S_NONE, HC_TCP_S_CONNECTING, HC_TCP_S_HELLO_SENT, HC_TCP_S_WAIT, HC_TCP_S_UP };

typedef struct hc_tcp_tx {
    struct hc_tcp_tx *next;
    hc_tcp_rhdr_t rhdr; /* written just before hdr with rails (d->pre = 16) */
    hc_frame_hdr_t hdr;
    const uint8_t *payload;
    size_t off;       /* bytes of hdr + payload written */
    void *cookie;     /* put_done target when inprog */
    uint8_t *heap;    /* owned copy of a large NULL-cookie payload */
    bool inprog;      /* put returned IN_PROGRESS: put_done owed */
    bool zc;          /* sent with MSG_ZEROCOPY */
    uint32_t zc_lo;   /* first zerocopy id used */
    uint32_t zc_ids;  /* zerocopy ids used */
    uint32_t zc_left; /* of those, not completed yet */
    uint64_t enq_ns;  /* rails: when a DATA frame was queued (its rail's rate) */
    uint8_t inline_buf[HC_TCP_INLINE];
} hc_tcp_tx_t;

typedef struct {
    hc_tcp_tx_t *head, *tail;
} hc_tcp_txq_t;

struct hc_tcp_conn;

/* One socket to a peer (or the listener, or an accepted socket whose hello
 * has not arrived: the first field tells which, for epoll). */
typedef struct hc_tcp_slot {
    int obj; /* HC_TCP_OBJ_SLOT */
    int fd;
    int state;
    int idx;
    bool outgoing;   /* we connected (vs accepted) */
    bool want_write; /* on the driver's flush list */
    bool zc_on;      /* SO_ZEROCOPY set and not found useless */
    bool rx_bulk;    /* this read met a DATA frame: acknowledge at once (tcp_data.c) */
    bool wr_shut;    /* the acceptor stopped reading before we read its verdict: wait for it */
    int err;         /* errno of a failed write/connect, acted on by progress */
    struct hc_tcp_conn *conn;
    struct hc_tcp_slot *flush_next;
    hc_tcp_txq_t txq;      /* frames not fully written, in order */
    hc_tcp_txq_t zcwait;   /* written with MSG_ZEROCOPY, completions owed */
    hc_tcp_txq_t unacked;  /* written after our hello, before the verdict: kept until it */
    hc_tcp_txq_t inflight; /* rails: written, not acknowledged by the peer's ACK frame */
    uint64_t last_wr_ns;   /* rails: our last write (heartbeat per rail) */
    uint64_t last_rd_ns;   /* rails: our last read of a byte from it */
    uint64_t busy_since;   /* rails: bytes in flight since (stall detection) */
    uint64_t up_ns;        /* rails: when it came up */
    uint64_t watch_mark_ns;    /* tcp_watch.c: when it first looked stalled (0: not) */
    unsigned watch_mark_calls; /* the driver's progress calls then */
    bool was_up;           /* rails: it was up once: a reconnect replaces the peer's socket */
    size_t q_bytes, q_copy;
    uint32_t zc_next;   /* next zerocopy id the kernel will assign */
    uint32_t zc_copied; /* completions the kernel reported as copied */
    uint32_t zc_real;
    /* handshake (tcp_hello.c) */
    hc_tcp_hello_t hello; /* the last one we sent: its verdict is signed over it */
    uint8_t hs[sizeof(hc_tcp_ack_t)];
    size_t hs_got;
    uint64_t hs_deadline;
    uint64_t ctr_out; /* counter of our last hello on this index */
    uint64_t ctr_in;  /* highest counter of a genuine hello from the peer on this index */
    /* receive stream */
    uint8_t *rbuf;
    size_t rstart, rend, rcap;
} hc_tcp_slot_t;

typedef struct hc_tcp_anon {
    int obj; /* HC_TCP_OBJ_ANON */
    int fd;
    struct hc_tcp_anon *next; /* newest first */
    uint64_t deadline;
    size_t got;
    bool parked; /* a complete hello from a rank this one has not connected to yet */
    hc_tcp_hello_t hello;
    char from[64];
} hc_tcp_anon_t;

typedef struct hc_tcp_drv hc_tcp_drv_t;

/* Core frames per socket index, over all peers: what each lane's socket
 * carried (logged at close, the counters op at HCOMM_STATS_LEVEL=2). */
typedef struct {
    uint64_t tx_frames, tx_bytes, rx_frames, rx_bytes;
    uint32_t tx_lanes, rx_lanes; /* bit l: a frame of lane l went / came */
} hc_tcp_sock_stats_t;

/* Rails: a channel is an ordered, numbered stream of core frames (channel k
 * lives on rail k / 4 at home and rides socket (cur_rail, k % 4)). */
typedef struct {
    uint64_t next_seq;  /* last number given */
    uint64_t acked;     /* highest the peer acknowledged */
    uint64_t rx_seq;    /* highest delivered in order from the peer */
    uint32_t pending;   /* our frames not acknowledged yet */
    uint32_t rx_frames; /* delivered since our last ACK of this channel */
    size_t rx_bytes;
    int cur_rail;
    int ack_slot; /* socket the peer's last frame of this channel came on */
    bool ack_due;
    bool rx_gap;          /* a frame past a gap was dropped: the next ACK says so */
    uint64_t progress_ns; /* the last ACK that advanced, or when pending left 0 */
    uint64_t resync_ns;   /* our last resend of the channel (hc_rail_resync) */
    uint64_t rto_ns;      /* no ACK progress this long: resend (doubles, reset by progress) */
} hc_tcp_chan_t;

typedef struct {
    bool up;
    bool eof;          /* left because the peer closed it (not a stall) */
    bool returned;     /* since it rejoined, a channel came home to it */
    uint64_t down_ns;  /* when it was left */
    uint64_t probe_ns; /* last probe (connect) while down */
    uint64_t stall_ns; /* up, the last one, stalled since (not left: nowhere to go) */
    /* What it delivers, for the stripe (hc_rail_chan): DATA bytes the
     * peer acknowledged over the time the rail was busy with them (each
     * frame from when it was queued or the rail's previous acknowledgement,
     * whichever is later, to its own: the union of the frames' times). */
    uint64_t svc_bytes, svc_ns;   /* all time */
    uint64_t last_ack_ns;         /* the rail's last retired DATA frame */
    uint64_t rate_bytes, rate_ns; /* svc_bytes, svc_ns at the last sample */
    uint64_t rate_at;             /* when the last sample (or probe) was taken */
    double rate;                  /* bytes per ns, moving average; 0: not measured yet */
    /* Its delay, for the stripe too: the least minimum RTT of its sockets
     * (hc_drv_tcp_min_rtt_us, each timer tick); 0: none yet. */
    uint64_t delay_ns;
    /* A stale rate is probed (hc_rail_rate_sample): the rail counts as the
     * best one for probe_left more bytes, then their sample may raise it. */
    bool probing;
    uint32_t probe_left;
    uint32_t probe_misses; /* probes in a row that did not raise the rate (the gap backs off) */
    char why[160];
    char brief[40]; /* why, in a few words (the failure message names every rail) */
} hc_tcp_rail_t;

typedef struct hc_tcp_conn {
    hc_conn_t base;
    hc_tcp_drv_t *drv;
    hc_tcp_addr_t addr; /* the peer's blob */
    char name[96];      /* "rank 3 (10.77.0.2:41234)" for logs */
    bool failed;
    bool bye; /* peer said goodbye: EOF is orderly */
    bool suspect;
    bool active; /* some socket is (being) connected */
    /* Idle close: while a handshake is in flight (hold), core frames are
     * queued but not written, so none can cross the close. */
    bool hold;
    int idle_state;      /* HC_TCP_IDLE_* */
    uint32_t idle_mask;  /* ACKED: sockets whose EOF we still wait for */
    uint32_t rr;         /* round-robin cursor over bulk sockets */
    uint64_t n_tx, n_rx; /* core frames accepted by put / delivered, over the conn's life */
    uint64_t seen_tx, seen_rx, last_act_ns, idle_t_ns;
    uint64_t watch_ns; /* tcp_watch.c: the watchdog's last look at a stall */
    uint64_t last_rx_ns, last_tx_ns, last_probe_ns;
    struct hc_tcp_conn *active_next;
    /* rails (nrails > 1: paired rails, min of both sides' counts). Rail r
     * of the connection joins the lower rank's interface r with the higher
     * rank's interface on the same subnet (by position where none is):
     * lif[r] is this side's interface, rif[r] the peer's (its blob's rail). */
    int nrails;
    uint8_t lif[HC_TCP_MAX_RAILS], rif[HC_TCP_MAX_RAILS];
    bool ack_due;
    uint32_t rr_rail;
    /* Ordered frames: the rail they should ride (hc_drv_tcp_rail_order_pick:
     * rail 0 unless its delay is far above another's), and the rail each
     * socket index's ordered frames ride now (they follow ord_rail once
     * their old channel is drained). */
    int ord_rail;
    uint8_t ord_cur[HC_TCP_RAIL_STRIDE];
    uint64_t all_down_ns;
    hc_tcp_rail_t rail[HC_TCP_MAX_RAILS];
    hc_tcp_chan_t chan[HC_TCP_MAX_SOCKS];
    hc_tcp_slot_t slots[HC_TCP_MAX_SOCKS];
} hc_tcp_conn_t;

struct hc_tcp_drv {
    hc_drv_t base;
    const hc_drv_env_t *env;
    int epfd;
    hc_tcp_slot_t listen;                        /* obj = HC_TCP_OBJ_LISTEN, only fd used */
    hc_tcp_slot_t listen_rail[HC_TCP_MAX_RAILS]; /* rails 1..: their listeners */
    int nrails;                                  /* local interfaces: 1 = no rails */
    size_t pre;                                  /* bytes before the frame header: 0 or 16 */
    char rail_if[HC_TCP_MAX_RAILS][32];
    uint8_t rail_prefix[HC_TCP_MAX_RAILS];
    char rail_str[HC_TCP_MAX_RAILS][64];
    struct sockaddr_storage rail_sa[HC_TCP_MAX_RAILS];
    socklen_t rail_salen[HC_TCP_MAX_RAILS];
    uint64_t rail_bound_ns; /* HCOMM_SOCKET_RAIL_TIMEOUT */
    bool ack_due;
    uint64_t n_rail_left, n_rail_rejoined, n_rail_returns, n_rail_probes, n_resent, n_dups, n_acks,
        n_gaps, n_resyncs, n_rate_probes, n_ordered_moves;
    uint64_t rail_tx_bytes[HC_TCP_MAX_RAILS], rail_rx_bytes[HC_TCP_MAX_RAILS];
    hc_tcp_addr_t me;
    char me_str[64];
    char ifname[32];
    struct sockaddr_storage me_sa;
    socklen_t me_salen;
    int nsocks;          /* sockets we open per peer */
    bool rr_all;         /* HCOMM_CONN_SCHED=round_robin */
    bool lanes;          /* env->lanes > 1 and nsocks > 1: lane l on socket l % n */
    size_t zc_threshold; /* SIZE_MAX: zerocopy off */
    int sockbuf;         /* SO_SNDBUF/SO_RCVBUF to set (0: leave to autotuning) */
    const char *key;     /* the job key (env->job_key): proven, never sent */
    size_t key_len;
    hc_tcp_conn_t **conns; /* by world rank, NULL if not ours */
    hc_tcp_conn_t *active; /* conns with sockets, for heartbeats */
    hc_tcp_slot_t *flush;  /* slots with queued frames */
    hc_tcp_anon_t *anon;   /* accepted, hello pending */
    int nanon;
    hc_tcp_tx_t *tx_free;
    uint64_t hb_period_ns, suspect_ns, fail_ns;
    uint64_t hs_ns;        /* a handshake step the peer's progress must take: HCOMM_TIMEOUT */
    uint64_t last_poll_ns; /* our previous progress call: a long gap is ours, not the peers' */
    uint64_t idle_ns;      /* HCOMM_CONN_IDLE_TIMEOUT, 0: never close */
    uint64_t idle_closed;  /* connections closed for idleness (logged) */
    /* counters (HCOMM_STATS_LEVEL=2) */
    uint64_t n_hb_sent, n_hb_probes, n_hb_rx, n_suspects;
    uint64_t n_stall_kicks; /* tcp_watch.c: stalled sockets the watchdog moved */
    hc_tcp_sock_stats_t sock[HC_TCP_MAX_SOCKS];
    uint64_t next_timer_ns;
    uint64_t last_event_ns; /* epoll's last report of anything (tcp_watch.c) */
    unsigned idle_polls, calls;
    bool closing;
};

/* Socket index of a frame (tcp_data.c's top comment): 0..nsocks-1. */
static inline int hc_drv_tcp_pick(hc_tcp_conn_t *c, const hc_tcp_drv_t *d, const hc_frame_hdr_t *h)
{
    if (d->nsocks == 1 || h->type >= HC_FRAME_DRIVER) return 0;
    bool bulk = h->flags & HC_FRAME_FLAG_UNORDERED;
    if (bulk && d->rr_all) return (int)(c->rr++ % (uint32_t)d->nsocks);
    if (d->lanes) return (int)((h->lane & (HC_FRAME_LANES - 1)) % (uint32_t)d->nsocks);
    if (!bulk) return 0;
    return 1 + (int)(c->rr++ % (uint32_t)(d->nsocks - 1));
}

static inline size_t hc_drv_tcp_tx_total(const hc_tcp_drv_t *d, const hc_tcp_tx_t *t)
{
    return d->pre + sizeof(hc_frame_hdr_t) + t->hdr.len;
}

/* tcp_if.c */
/* The interfaces to listen on for list (HCOMM_SOCKET_IFNAME): one per entry
 * with rails (two entries or more that match), else the single choice;
 * how many (0: none, why says so). */
int hc_drv_tcp_pick_rails(const hc_drv_env_t *env, const char *list, struct sockaddr_storage *sa,
                          socklen_t *salen, char (*ifname)[32], char *why, size_t why_len);
/* The prefix length of the subnet of the interface address sa (0: none
 * found). */
uint8_t hc_drv_tcp_prefix_of(const struct sockaddr_storage *sa);
void hc_drv_tcp_ip_str(const struct sockaddr_storage *sa, char *buf, size_t len);
void hc_drv_tcp_addr_str(int family, const void *addr, uint16_t port_n, char *buf, size_t len);
void hc_drv_tcp_sa_str(const struct sockaddr_storage *sa, char *buf, size_t len);

/* tcp_setup.c */
hcomm_status_t hc_drv_tcp_slot_start(hc_tcp_conn_t *c, int idx);
void hc_drv_tcp_conn_fail(hc_tcp_conn_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void hc_drv_tcp_conn_activate(hc_tcp_conn_t *c);
void hc_drv_tcp_slot_close(hc_tcp_slot_t *s, hcomm_status_t status);
void hc_drv_tcp_slot_up(hc_tcp_slot_t *s);
void hc_drv_tcp_slot_drop_fd(hc_tcp_slot_t *s);
bool hc_drv_tcp_sock_opts(hc_tcp_drv_t *d, int fd);
int hc_drv_tcp_ep(hc_tcp_drv_t *d, int op, int fd, uint32_t events, void *ptr);

/* tcp_hello.c: the handshake. The connector signs its hello with the job
 * key over the acceptor's published nonce and writes it at once; the
 * acceptor checks it, answers a verdict signed over the connector's nonce,
 * which the connector checks before it reads a frame from the socket. */
/* Connector: the socket connected (or failed): writes the hello. 0, or the
 * errno that stopped it (the caller fails the peer, or leaves it to
 * progress). */
int hc_drv_tcp_hello_send(hc_tcp_slot_t *s);
/* Connector, from progress: the connect completed, or the verdict arrived. */
void hc_drv_tcp_slot_handshake(hc_tcp_slot_t *s, uint32_t events);
/* Acceptor, from progress: the listener or an accepted socket is readable. */
void hc_drv_tcp_accept(hc_tcp_drv_t *d, hc_tcp_slot_t *listen);
void hc_drv_tcp_anon_readable(hc_tcp_drv_t *d, hc_tcp_anon_t *a);
void hc_drv_tcp_anon_expire(hc_tcp_drv_t *d, uint64_t now);
/* connect(peer) made its connection: hellos parked for it are taken now. */
void hc_drv_tcp_anon_unpark(hc_tcp_drv_t *d, int peer);
void hc_drv_tcp_anon_free(hc_tcp_drv_t *d, hc_tcp_anon_t *a, bool close_fd);

/* tcp_data.c */
hcomm_status_t hc_drv_tcp_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
                              void *cookie);
int hc_drv_tcp_progress(hc_drv_t *drv);
int hc_drv_tcp_flush(hc_tcp_slot_t *s);
void hc_drv_tcp_flush_mark(hc_tcp_slot_t *s);
void hc_drv_tcp_txq_fail(hc_tcp_slot_t *s, hcomm_status_t status);
/* Frees what s still queues, with no completion (the core is going away). */
void hc_drv_tcp_txq_forget(hc_tcp_slot_t *s);
/* The verdict accepted the socket: frames written before it are done. */
void hc_drv_tcp_unacked_done(hc_tcp_slot_t *s);
/* The socket is dropped before a verdict accepted it: what it carried goes
 * again, first, on the socket that replaces it. */
void hc_drv_tcp_unacked_rewind(hc_tcp_slot_t *s);
hc_tcp_tx_t *hc_drv_tcp_tx_get(hc_tcp_drv_t *d);
void hc_drv_tcp_tx_free_all(hc_tcp_drv_t *d);
void hc_drv_tcp_ctrl(hc_tcp_conn_t *c, uint8_t type, uint8_t flags, uint64_t a, uint64_t b);

void hc_drv_tcp_tx_done(hc_tcp_slot_t *s, hc_tcp_tx_t *t, hcomm_status_t status);
void hc_drv_tcp_tx_put(hc_tcp_drv_t *d, hc_tcp_tx_t *t);
bool hc_drv_tcp_tx_keep(hc_tcp_slot_t *s, hc_tcp_tx_t *t, const void *payload, size_t len,
                        void *cookie);
int hc_drv_tcp_write(hc_tcp_slot_t *s);
void hc_drv_tcp_driver_frame(hc_tcp_conn_t *c, hc_tcp_slot_t *s, const hc_frame_hdr_t *h);
/* A socket failed (read/write error, EOF, handshake): the peer fails, or,
 * with rails, the socket's rail is left (tcp_rail.c). eof: an orderly close. */
void hc_drv_tcp_sock_lost(hc_tcp_slot_t *s, bool eof, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tcp_rail.c: several interfaces (rails), channels numbered per frame,
 * acknowledgements, failover and rejoin. Used only when nrails > 1. */
hcomm_status_t hc_drv_tcp_rail_put(hc_tcp_conn_t *c, const hc_frame_hdr_t *hdr, const void *payload,
                                   void *cookie);
void hc_drv_tcp_rail_written(hc_tcp_slot_t *s, hc_tcp_tx_t *t);
int hc_drv_tcp_rail_parse(hc_tcp_slot_t *s);
/* tcp_recv.c: reads what s's socket has and parses it; the events handled
 * (frames, a lost socket). */
int hc_drv_tcp_read(hc_tcp_slot_t *s);
/* A frame's header on the wire (after a rail's header, with rails). */
#define HC_TCP_HDR sizeof(hc_frame_hdr_t)
/* The next complete frame in s's read buffer, after a prefix of pre bytes
 * (a rail's header; 0 without rails): 1 with *h, the prefix at *pre_p and
 * the payload at *payload, s->rstart past the frame; 0 when it is not all
 * there yet (moved to the buffer's start if the rest would not fit); -1 for
 * a malformed frame (the connection is failed). */
int hc_drv_tcp_next_frame(hc_tcp_slot_t *s, size_t pre, hc_frame_hdr_t *h, const uint8_t **pre_p,
                          const uint8_t **payload);
void hc_drv_tcp_rail_ack(hc_tcp_conn_t *c, const hc_frame_hdr_t *h);
void hc_drv_tcp_rail_peer_left(hc_tcp_conn_t *c, const hc_frame_hdr_t *h);
void hc_drv_tcp_rail_ctrl(hc_tcp_slot_t *s, uint8_t type, uint8_t flags, uint64_t a, uint64_t b);
void hc_drv_tcp_rail_acks(hc_tcp_drv_t *d);
void hc_drv_tcp_rail_timer(hc_tcp_conn_t *c, uint64_t now);
void hc_drv_tcp_rail_lost(hc_tcp_slot_t *s, bool eof, const char *why);
void hc_drv_tcp_rail_slot_up(hc_tcp_slot_t *s);
/* What s carried (written and not acknowledged, then queued) goes to the
 * front of to's queue (after a frame half written there). */
void hc_drv_tcp_rail_requeue(hc_tcp_slot_t *from, hc_tcp_slot_t *to);
void hc_drv_tcp_rail_conn_init(hc_tcp_conn_t *c);
/* The timer's choice of c->ord_rail from the rails' delays (a test sets
 * the delays and calls it). */
void hc_drv_tcp_rail_order_pick(hc_tcp_conn_t *c);
hcomm_status_t hc_drv_tcp_slot_connect(hc_tcp_conn_t *c, int idx);

/* tcp_idle.c */
void hc_drv_tcp_idle_timer(hc_tcp_conn_t *c, uint64_t now);
void hc_drv_tcp_idle_frame(hc_tcp_conn_t *c, const hc_frame_hdr_t *h);
bool hc_drv_tcp_idle_eof(hc_tcp_slot_t *s);
void hc_drv_tcp_idle_reopen(hc_tcp_slot_t *s);

/* tcp_watch.c: the stall watchdog (timer) and the hang report's line. */
void hc_drv_tcp_watch(hc_tcp_conn_t *c, uint64_t now);
void hc_drv_tcp_explain(hc_conn_t *conn, char *buf, size_t len);
/* tcp_data.c: reaps s's zerocopy completions; the frames they retired. */
int hc_drv_tcp_zc_reap(hc_tcp_slot_t *s);

/* tcp_info.c: the kernel's minimum RTT of socket fd, in us (0: unknown). */
uint32_t hc_drv_tcp_min_rtt_us(int fd);

#endif /* HC_DRV_TCP_H */
