/*
 * fake: a fault-injecting network driver for tests. It moves real bytes
 * between the processes of one host and is usable only when HCOMM_NET=fake
 * (lowest priority of the network scope; the ladder never picks it on its
 * own). It exists so that the core's handling of everything a real NIC
 * driver may answer (no credit, late completions, completions out of order,
 * RMA that needs registered memory and keys, a connection that breaks) is
 * exercised on any machine; see docs/drivers.md.
 *
 * Frames. Each rank listens on an abstract-namespace AF_UNIX SOCK_SEQPACKET
 * socket named from a hash of the job key and its rank. One datagram is one
 * frame (header + payload), so message boundaries come for free. Sockets are
 * connected lazily, on the first frame to a peer, and carry one direction
 * only: a rank writes its frames to a peer on the socket it connected and
 * reads the peer's frames from the socket the peer connected. Two ranks
 * that send to each other for the first time at once thus each open their
 * own socket, and no tie-break is needed: each direction is one socket,
 * ordered by the kernel. The first datagram on a socket is a hello {magic,
 * ranks, instance ids, job key hash}; a socket with a bad hello is closed
 * and logged. Everything is non-blocking and polled by progress (epoll): a
 * full socket (EAGAIN) means "queue it", progress retries, and a connection
 * queue past HC_FAKE_QUEUE_BYTES answers ERR_AGAIN. Frames to a peer go out
 * strictly in put order: put writes directly only when nothing is queued
 * (with HCOMM_FAKE_LANE_SHUFFLE: in put order per lane, see below).
 *
 * RMA. get and write (HC_CONN_CAP_GET | HC_CONN_CAP_WRITE) need memory
 * registered with this driver (HC_DRV_CAP_USER_REG): mem_reg hands out a
 * random-looking 64-bit handle per registration, kept in a table with its
 * range; rkey_pack packs {magic, owner pid, handle, base, len}. get/write
 * check that the lkey is a live registration covering local..+len, that the
 * rkey covers remote_addr..+len and that the owner still holds that
 * registration (read from its table with process_vm_readv), and fail with
 * ERR_INVALID naming the key otherwise: this is what catches a core that
 * forgets to register a buffer, to send its key, or deregisters it while a
 * peer still reads it. The bytes move with process_vm_readv/_writev. There
 * is no rkey_ptr (ERR_UNSUPPORTED).
 *
 * Faults, from this driver's knobs (hc_fake_knobs below, read with the
 * others at init). Percentages are 0..100; every default is 0 (no faults).
 *   HCOMM_FAKE_SEED=N       seed of the fault PRNG (default: pid and clock);
 *                           each rank mixes in its rank. Logged at info.
 *   HCOMM_FAKE_AGAIN=P      P% of puts refused with ERR_AGAIN ("no credit").
 *   HCOMM_FAKE_ASYNC=P      P% of puts with a cookie answer IN_PROGRESS: the
 *                           frame is queued and sent later by progress, in
 *                           order with every other frame of the connection,
 *                           and put_done comes after it was sent, held back
 *                           0-3 progress calls (so completions of different
 *                           frames are reported out of order).
 *   HCOMM_FAKE_RMA_ASYNC=P  P% of get/write with a cookie answer IN_PROGRESS:
 *                           they are executed (keys checked again) and
 *                           completed through env->rma_done from progress,
 *                           in shuffled order.
 *   HCOMM_FAKE_LANE_SHUFFLE=P frames of different lanes (hdr.lane) overtake
 *                           each other, as over separate connections
 *                           (docs/lanes.md): P% of the frames that may be
 *                           kept wait in the queue, put writes a frame
 *                           directly when nothing of its lane is queued,
 *                           and progress holds a queued lane back for the
 *                           pass P% of the time while later lanes go; each
 *                           lane stays in put order.
 *   HCOMM_FAKE_DROP_AFTER=N after N frames sent on a connection, close it:
 *                           frames not yet sent fail, both sides report
 *                           env->peer_failed with a reason naming
 *                           HCOMM_FAKE_DROP_AFTER (the dropping side sends a
 *                           last DROP frame so the peer can tell a fake
 *                           drop from a crash).
 * A put without a cookie never answers IN_PROGRESS: control frames are
 * copied, user data (EAGER, CONT, DATA) that cannot go at once is refused
 * with ERR_AGAIN, as tcp does, so a blocking send never returns while its
 * bytes sit in this process.
 *
 * A peer whose socket closes without the goodbye frame (BYE, sent by
 * disconnect) is reported with env->peer_failed, after every put and RMA
 * still owed a completion on that connection got it.
 */
#include "base/list.h"
#include "drv/drv.h"
#include "base/config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define HC_FAKE_MAX_FRAME (32u << 10)
#define HC_FAKE_EAGER_MAX (256u << 10)
#define HC_FAKE_HDR sizeof(hc_frame_hdr_t)
#define HC_FAKE_QUEUE_BYTES (8u << 20) /* per connection: queued before ERR_AGAIN */
#define HC_FAKE_QUEUE_COPY (1u << 20)  /* per connection: copied control bytes */
#define HC_FAKE_REG_SLOTS 65536u       /* registrations one process may hold */
#define HC_FAKE_SLOT_BITS 20           /* low bits of a handle: its slot */
#define HC_FAKE_RMA_MAX 1024           /* asynchronous RMAs in flight before ERR_AGAIN */
#define HC_FAKE_DONE_DELAY 4           /* put_done held back 0..3 progress calls */
#define HC_FAKE_READ_BUDGET 32         /* datagrams read per socket per progress call */
#define HC_FAKE_HELLO_NS (5ull * 1000000000ull)
#define HC_FAKE_CONNECT_NS (10ull * 1000000000ull)
#define HC_FAKE_CLOSING_NS 1000000000ull
#define HC_FAKE_DRAIN_NS 1000000000ull
#define HC_FAKE_MAGIC 0x6863666bu      /* "hcfk" */
#define HC_FAKE_RKEY_MAGIC 0x6b72666bu /* "kfrk" */

/* Driver frames (never delivered). */
enum {
    HC_FAKE_FRAME_BYE = HC_FRAME_DRIVER, /* orderly close follows: EOF is not a failure */
    HC_FAKE_FRAME_DROP,                  /* fault: a = frames sent before the drop */
};

/* Address blob. */
typedef struct {
    uint32_t magic;
    int32_t rank;
    uint32_t pid;
    uint32_t nregs; /* slots of the registration table */
    uint64_t instance;
    uint64_t regs; /* address of the registration table (key liveness checks) */
} hc_fake_addr_t;

/* First datagram on every socket. */
typedef struct {
    uint32_t magic;
    int32_t src_rank, dst_rank;
    uint32_t pid;
    uint64_t src_instance, dst_instance;
    uint64_t key; /* hash of the job key */
} hc_fake_hello_t;

/* A registration. handle 0: free slot. */
typedef struct {
    uint64_t handle;
    uint64_t base;
    uint64_t len;
} hc_fake_reg_t;

/* Packed remote key. */
typedef struct {
    uint32_t magic;
    uint32_t pid;
    uint64_t handle;
    uint64_t base;
    uint64_t len;
} hc_fake_rkey_wire_t;
_Static_assert(sizeof(hc_fake_rkey_wire_t) <= HC_RKEY_MAX, "fake rkey fits HC_RKEY_MAX");

struct hc_rkey {
    hc_fake_rkey_wire_t w;
};

/* What epoll reports: the first field of each object. */
enum { HC_FAKE_EP_LISTEN = 1, HC_FAKE_EP_ANON, HC_FAKE_EP_IN, HC_FAKE_EP_OUT };
/* The sending socket. CLOSING: dropped, the DROP notice still to go out. */
enum { HC_FAKE_OUT_NONE, HC_FAKE_OUT_RETRY, HC_FAKE_OUT_UP, HC_FAKE_OUT_CLOSING };

typedef struct hc_fake_tx {
    struct hc_fake_tx *next;
    hc_frame_hdr_t hdr;
    const void *payload;
    void *cookie;
    uint8_t *copy; /* owned copy of a NULL-cookie payload */
    bool inprog;   /* put answered IN_PROGRESS: put_done owed */
    int delay;     /* sent: progress calls left before put_done */
} hc_fake_tx_t;

typedef struct {
    hc_fake_tx_t *head, *tail;
} hc_fake_txq_t;

typedef struct hc_fake_drv hc_fake_drv_t;
typedef struct hc_fake_conn hc_fake_conn_t;

typedef struct {
    int kind; /* HC_FAKE_EP_IN / _OUT */
    hc_fake_conn_t *conn;
} hc_fake_ep_t;

struct hc_fake_conn {
    hc_conn_t base;
    hc_fake_drv_t *drv;
    hc_fake_addr_t addr; /* the peer's blob */
    char name[48];       /* "rank 3 (pid 1234)" */
    int out_fd, in_fd;
    int out_state;
    int err; /* errno of a failed send, acted on by progress */
    bool failed, bye;
    bool drop_now;     /* HCOMM_FAKE_DROP_AFTER reached: progress drops the connection */
    bool active;       /* on the driver's active list */
    uint64_t deadline; /* RETRY: connect; CLOSING: DROP notice */
    uint64_t sent;     /* core frames written to the socket */
    size_t q_bytes, q_copy;
    uint32_t lane_q[HC_FRAME_LANES]; /* frames of each lane in txq */
    hc_fake_txq_t txq;  /* not sent yet, in order */
    hc_fake_txq_t done; /* sent, put_done held back */
    hc_fake_ep_t out_ep, in_ep;
    hc_fake_conn_t *active_next;
    /* HCOMM_FAKE_HANDSHAKE: puts wait (ERR_AGAIN) until the peer answered
     * our endpoint blob through env->ep_send / ops->ep_recv. */
    int hs_state; /* 0 none, 1 hello sent, 2 up */
    uint64_t hs_token;
};

typedef struct hc_fake_anon {
    int kind; /* HC_FAKE_EP_ANON */
    int fd;
    struct hc_fake_anon *next;
    uint64_t deadline;
} hc_fake_anon_t;

typedef struct {
    hc_fake_conn_t *conn;
    hc_rma_t rma;
    struct hc_rkey rkey; /* a copy: the core may release its own after the call */
    bool has_rkey;
    bool write;
} hc_fake_rma_op_t;

struct hc_fake_drv {
    hc_drv_t base;
    const hc_drv_env_t *env;
    int epfd;
    int listen_kind; /* HC_FAKE_EP_LISTEN: epoll's tag for the listener */
    int listen_fd;
    hc_fake_addr_t me;
    uint64_t key_hash;
    hc_fake_conn_t **conns;    /* by world rank */
    hc_fake_conn_t *active;    /* conns with sockets, queues or held completions */
    hc_fake_anon_t *anon;      /* accepted, hello pending */
    hc_fake_anon_t *anon_dead; /* retired during a progress batch */
    uint8_t *rbuf;             /* one datagram */
    hc_fake_reg_t *regs;
    uint32_t *reg_free; /* stack of free slots */
    uint32_t nfree;
    uint64_t reg_gen;
    hc_fake_rma_op_t **rma; /* asynchronous RMAs not executed yet */
    int nrma;
    uint64_t rng;
    uint64_t next_timer_ns;
    bool closing;
    /* faults */
    uint64_t seed;
    int pct_again, pct_async, pct_rma_async, pct_shuffle;
    uint64_t drop_after;
    /* counters, logged at close */
    uint64_t n_put, n_again, n_async, n_rma, n_rma_async, n_drops;
    uint64_t n_overtaken; /* frames sent before an earlier frame of another lane */
};

/* ---- helpers ------------------------------------------------------------------------ */

static uint64_t hc_fake_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t hc_fake_rand(hc_fake_drv_t *d)
{
    d->rng += 0x9e3779b97f4a7c15ull;
    return hc_fake_mix(d->rng);
}

static bool hc_fake_roll(hc_fake_drv_t *d, int pct)
{
    return pct > 0 && (int)(hc_fake_rand(d) % 100) < pct;
}

static uint64_t hc_fake_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; s && *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static socklen_t hc_fake_sockaddr(uint64_t key_hash, int rank, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    /* Abstract name (leading NUL): nothing in the file system. */
    int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "hcomm-fake-%016llx-%d",
                     (unsigned long long)key_hash, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* This driver's knobs (registered: hcomm_info -c lists them). 0 seed: from
 * the pid and the clock; 0 drop: never. */
static struct {
    int64_t seed, again, async, rma_async, drop_after, shuffle;
    bool handshake;
} hc_fake_cfg;

static const hc_config_knob_t hc_fake_knobs[] = {
    HC_KNOB_INT(hc_fake_cfg.seed, "HCOMM_FAKE_SEED", "0",
                "fake (test driver): seed of the fault PRNG (0: from pid and clock; logged)"),
    HC_KNOB_INT(hc_fake_cfg.again, "HCOMM_FAKE_AGAIN", "0",
                "fake (test driver): percent of puts refused with ERR_AGAIN (no credit)"),
    HC_KNOB_INT(hc_fake_cfg.async, "HCOMM_FAKE_ASYNC", "0",
                "fake (test driver): percent of puts with a cookie completed later, out of order"),
    HC_KNOB_INT(hc_fake_cfg.rma_async, "HCOMM_FAKE_RMA_ASYNC", "0",
                "fake (test driver): percent of get/write with a cookie completed later, shuffled"),
    HC_KNOB_INT(hc_fake_cfg.shuffle, "HCOMM_FAKE_LANE_SHUFFLE", "0",
                "fake (test driver): percent of frames held back so that frames of other lanes "
                "overtake them, as over separate connections (each lane stays in order)"),
    HC_KNOB_INT(hc_fake_cfg.drop_after, "HCOMM_FAKE_DROP_AFTER", "0",
                "fake (test driver): close a connection after this many frames (0: never)"),
    HC_KNOB_BOOL(hc_fake_cfg.handshake, "HCOMM_FAKE_HANDSHAKE", "0",
                 "fake (test driver): a per-peer endpoint handshake (through the bootstrap "
                 "relay) before a connection carries frames"),
};
HC_CONFIG_KNOBS("fake", hc_fake_knobs)

static bool hc_fake_pct(const char *name, int64_t v, int *out)
{
    if (v < 0 || v > 100) {
        hc_error(HCOMM_ERR_INVALID, "fake driver: %s=%lld must be a percentage 0..100", name,
                 (long long)v);
        return false;
    }
    *out = (int)v;
    return true;
}

static void hc_fake_ep(hc_fake_drv_t *d, int op, int fd, uint32_t events, void *ptr)
{
    struct epoll_event ev = {.events = events, .data.ptr = ptr};
    if (epoll_ctl(d->epfd, op, fd, &ev) != 0)
        hc_log_warn("fake: epoll_ctl(%d) on fd %d: %s", op, fd, strerror(errno));
}

static void hc_fake_close_fd(hc_fake_drv_t *d, int *fd)
{
    if (*fd >= 0) {
        epoll_ctl(d->epfd, EPOLL_CTL_DEL, *fd, NULL);
        close(*fd);
    }
    *fd = -1;
}

static void hc_fake_activate(hc_fake_conn_t *c)
{
    if (c->active) return;
    c->active = true;
    c->active_next = c->drv->active;
    c->drv->active = c;
}

static void hc_fake_q_push(hc_fake_txq_t *q, hc_fake_tx_t *t)
{
    HC_FIFO_PUSH(q, t);
}

static hc_fake_tx_t *hc_fake_q_pop(hc_fake_txq_t *q)
{
    return HC_FIFO_POP(q);
}

static inline unsigned hc_fake_lane(const hc_fake_tx_t *t)
{
    return t->hdr.lane & (HC_FRAME_LANES - 1);
}

/* txq's own push and pop: they count each lane's queued frames. */
static void hc_fake_txq_push(hc_fake_conn_t *c, hc_fake_tx_t *t)
{
    c->lane_q[hc_fake_lane(t)]++;
    hc_fake_q_push(&c->txq, t);
}

/* Takes t (after prev, NULL: the head) out of txq. */
static void hc_fake_txq_take(hc_fake_conn_t *c, hc_fake_tx_t *prev, hc_fake_tx_t *t)
{
    if (prev)
        prev->next = t->next;
    else
        c->txq.head = t->next;
    if (c->txq.tail == t) c->txq.tail = prev;
    t->next = NULL;
    c->lane_q[hc_fake_lane(t)]--;
}

static void hc_fake_tx_free(hc_fake_tx_t *t)
{
    free(t->copy);
    free(t);
}

/* One datagram: header + payload, all or nothing (SOCK_SEQPACKET). */
static ssize_t hc_fake_send(int fd, const hc_frame_hdr_t *hdr, const void *payload)
{
    struct iovec iov[2] = {{(void *)hdr, HC_FAKE_HDR}, {(void *)payload, hdr->len}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = hdr->len ? 2 : 1};
    ssize_t n;
    do
        n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    return n;
}

/* ---- failure ----------------------------------------------------------------------- */

/* Completes every asynchronous RMA of conn c (all of them: c == NULL). */
static void hc_fake_rma_fail(hc_fake_drv_t *d, hc_fake_conn_t *c, hcomm_status_t status,
                             bool notify)
{
    for (int i = 0; i < d->nrma;) {
        hc_fake_rma_op_t *op = d->rma[i];
        if (c && op->conn != c) {
            i++;
            continue;
        }
        d->rma[i] = d->rma[--d->nrma];
        if (notify) d->env->rma_done(d->env->core, &op->conn->base, op->rma.cookie, status);
        free(op);
    }
}

/* Retires what c still owes: held completions (those frames went: OK),
 * queued frames (status). notify false: the core is going away. */
static void hc_fake_conn_flush_owed(hc_fake_conn_t *c, hcomm_status_t status, bool notify)
{
    const hc_drv_env_t *env = c->drv->env;
    hc_fake_tx_t *t;
    while ((t = hc_fake_q_pop(&c->done))) {
        if (notify) env->put_done(env->core, &c->base, t->cookie, HCOMM_OK);
        hc_fake_tx_free(t);
    }
    while ((t = c->txq.head)) {
        hc_fake_txq_take(c, NULL, t);
        if (notify && t->inprog) env->put_done(env->core, &c->base, t->cookie, status);
        hc_fake_tx_free(t);
    }
    c->q_bytes = c->q_copy = 0;
    hc_fake_rma_fail(c->drv, c, status, notify);
}

static void hc_fake_conn_fail(hc_fake_conn_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void hc_fake_conn_fail(hc_fake_conn_t *c, const char *fmt, ...)
{
    if (c->failed) return;
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    c->failed = true;
    /* Completions first: the core frees requests once the failure reaches
     * them, and no completion may name a freed request afterwards. */
    hc_fake_conn_flush_owed(c, HCOMM_ERR_PEER_FAILED, true);
    if (c->out_state != HC_FAKE_OUT_CLOSING) {
        hc_fake_close_fd(c->drv, &c->out_fd);
        hc_fake_close_fd(c->drv, &c->in_fd);
        c->out_state = HC_FAKE_OUT_NONE;
    }
    hc_log_warn("fake: %s", why);
    const hc_drv_env_t *env = c->drv->env;
    env->peer_failed(env->core, c->base.peer, HCOMM_ERR_PEER_FAILED, why);
}

/* HCOMM_FAKE_DROP_AFTER reached: the DROP notice goes last on the sending
 * socket, and both sockets stay open until it is out (or a second passed),
 * so the peer reads it before it sees either socket close. */
static void hc_fake_drop(hc_fake_conn_t *c)
{
    hc_fake_drv_t *d = c->drv;
    d->n_drops++;
    hc_frame_hdr_t h = {.type = HC_FAKE_FRAME_DROP, .a = c->sent};
    if (c->out_fd >= 0 && hc_fake_send(c->out_fd, &h, NULL) < 0 && errno == EAGAIN) {
        c->out_state = HC_FAKE_OUT_CLOSING;
        c->deadline = hc_time_ns() + HC_FAKE_CLOSING_NS;
    }
    hc_fake_conn_fail(c,
                      "fake drop: connection to %s closed after %llu frames sent "
                      "(HCOMM_FAKE_DROP_AFTER=%llu on rank %d)",
                      c->name, (unsigned long long)c->sent, (unsigned long long)d->drop_after,
                      d->env->rank);
}

/* ---- probe / open / addr ------------------------------------------------------------- */

static hcomm_status_t hc_fake_probe(const hc_drv_env_t *env, char *why, size_t why_len)
{
    (void)env;
    if (!hc_cfg.net || strcasecmp(hc_cfg.net, "fake")) {
        snprintf(why, why_len, "test driver: set HCOMM_NET=fake");
        return HCOMM_ERR_UNSUPPORTED;
    }
    snprintf(why, why_len, "test driver (AF_UNIX, one host only)");
    return HCOMM_OK;
}

static hcomm_status_t hc_fake_read_faults(hc_fake_drv_t *d)
{
    if (!hc_fake_pct("HCOMM_FAKE_AGAIN", hc_fake_cfg.again, &d->pct_again) ||
        !hc_fake_pct("HCOMM_FAKE_ASYNC", hc_fake_cfg.async, &d->pct_async) ||
        !hc_fake_pct("HCOMM_FAKE_RMA_ASYNC", hc_fake_cfg.rma_async, &d->pct_rma_async) ||
        !hc_fake_pct("HCOMM_FAKE_LANE_SHUFFLE", hc_fake_cfg.shuffle, &d->pct_shuffle))
        return HCOMM_ERR_INVALID;
    if (hc_fake_cfg.seed < 0 || hc_fake_cfg.drop_after < 0)
        return hc_error(HCOMM_ERR_INVALID, "fake driver: HCOMM_FAKE_SEED and "
                        "HCOMM_FAKE_DROP_AFTER must not be negative");
    d->seed = hc_fake_cfg.seed ? (uint64_t)hc_fake_cfg.seed : (uint64_t)getpid() ^ hc_time_ns();
    d->drop_after = (uint64_t)hc_fake_cfg.drop_after;
    d->rng = hc_fake_mix(d->seed ^ ((uint64_t)d->env->rank * 0xd1b54a32d192ed03ull));
    hc_log_info("fake: seed %llu (HCOMM_FAKE_SEED), again %d%%, async %d%%, rma async %d%%, lane "
                "shuffle %d%%, drop after %llu frames",
                (unsigned long long)d->seed, d->pct_again, d->pct_async, d->pct_rma_async,
                d->pct_shuffle, (unsigned long long)d->drop_after);
    return HCOMM_OK;
}

static hcomm_status_t hc_fake_open(const hc_drv_env_t *env, hc_drv_t **drv_p)
{
    hcomm_status_t st;
    if (!env->deliver || !env->put_done || !env->rma_done || !env->peer_failed)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake driver: the core left a callback of hc_drv_env_t NULL (deliver, "
                        "put_done, rma_done and peer_failed are all used)");
    hc_fake_drv_t *d = calloc(1, sizeof(*d));
    if (!d) return hc_error(HCOMM_ERR_NO_MEMORY, "fake driver");
    d->env = env;
    d->base.env = env;
    d->epfd = d->listen_fd = -1;
    d->listen_kind = HC_FAKE_EP_LISTEN;
    if ((st = hc_fake_read_faults(d)) != HCOMM_OK) goto err_free;
    d->conns = calloc((size_t)env->size, sizeof(*d->conns));
    d->rbuf = malloc(HC_FAKE_HDR + HC_FAKE_MAX_FRAME + 1);
    d->regs = calloc(HC_FAKE_REG_SLOTS, sizeof(*d->regs));
    d->reg_free = malloc(HC_FAKE_REG_SLOTS * sizeof(*d->reg_free));
    d->rma = malloc(HC_FAKE_RMA_MAX * sizeof(*d->rma));
    if (!d->conns || !d->rbuf || !d->regs || !d->reg_free || !d->rma) {
        st = hc_error(HCOMM_ERR_NO_MEMORY, "fake driver: tables for %d peers", env->size);
        goto err_free;
    }
    for (uint32_t i = 0; i < HC_FAKE_REG_SLOTS; i++)
        d->reg_free[i] = HC_FAKE_REG_SLOTS - 1 - i;
    d->nfree = HC_FAKE_REG_SLOTS;
    d->reg_gen = d->seed ^ 0x5851f42d4c957f2dull;
    d->key_hash = hc_fake_hash(env->job_key);

    d->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d->epfd < 0) {
        st = hc_error_errno(HCOMM_ERR_IO, errno, "fake driver: epoll_create1");
        goto err_free;
    }
    d->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (d->listen_fd < 0) {
        st = hc_error_errno(HCOMM_ERR_IO, errno, "fake driver: socket");
        goto err_epoll;
    }
    struct sockaddr_un sa;
    socklen_t salen = hc_fake_sockaddr(d->key_hash, env->rank, &sa);
    if (bind(d->listen_fd, (struct sockaddr *)&sa, salen) != 0 || listen(d->listen_fd, 512) != 0) {
        st = hc_error_errno(HCOMM_ERR_IO, errno, "fake driver: cannot listen on @%s",
                            sa.sun_path + 1);
        goto err_listen;
    }
    hc_fake_ep(d, EPOLL_CTL_ADD, d->listen_fd, EPOLLIN, &d->listen_kind);
    d->me = (hc_fake_addr_t){.magic = HC_FAKE_MAGIC,
                             .rank = env->rank,
                             .pid = (uint32_t)getpid(),
                             .nregs = HC_FAKE_REG_SLOTS,
                             .instance = hc_fake_mix(d->seed ^ hc_time_ns()) | 1,
                             .regs = (uint64_t)(uintptr_t)d->regs};
    hc_log_info("fake: listening on @%s", sa.sun_path + 1);
    *drv_p = &d->base;
    return HCOMM_OK;
err_listen:
    close(d->listen_fd);
err_epoll:
    close(d->epfd);
err_free:
    free(d->rma);
    free(d->reg_free);
    free(d->regs);
    free(d->rbuf);
    free(d->conns);
    free(d);
    return st;
}

static hcomm_status_t hc_fake_addr_pack(hc_drv_t *drv, void *buf, size_t *len_p)
{
    hc_fake_drv_t *d = (hc_fake_drv_t *)drv;
    if (*len_p < sizeof(d->me))
        return hc_error(HCOMM_ERR_INTERNAL, "fake: address slot of %zu bytes, need %zu", *len_p,
                        sizeof(d->me));
    memcpy(buf, &d->me, sizeof(d->me));
    *len_p = sizeof(d->me);
    return HCOMM_OK;
}

static hcomm_status_t hc_fake_connect(hc_drv_t *drv, int peer, const void *addr, size_t addr_len,
                                      hc_conn_t **conn_p)
{
    hc_fake_drv_t *d = (hc_fake_drv_t *)drv;
    hc_fake_addr_t a;
    if (addr_len != sizeof(a))
        return hc_error(
            HCOMM_ERR_BOOTSTRAP,
            "fake: rank %d published a %zu-byte address, expected %zu (not the fake driver?)", peer,
            addr_len, sizeof(a));
    memcpy(&a, addr, sizeof(a));
    if (a.magic != HC_FAKE_MAGIC || a.rank != peer)
        return hc_error(HCOMM_ERR_BOOTSTRAP,
                        "fake: bad address blob from rank %d (magic %08x, rank %d)", peer, a.magic,
                        a.rank);
    if (peer < 0 || peer >= d->env->size || d->conns[peer])
        return hc_error(HCOMM_ERR_INVALID, "fake: connect to rank %d: %s", peer,
                        d->conns[peer] ? "already connected" : "out of range");
    hc_fake_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return hc_error(HCOMM_ERR_NO_MEMORY, "fake: connection to rank %d", peer);
    c->base.ops = drv->ops;
    c->base.drv = drv;
    c->base.peer = peer;
    c->base.caps = HC_CONN_CAP_GET | HC_CONN_CAP_WRITE;
    c->base.max_frame = HC_FAKE_MAX_FRAME;
    c->base.eager_max = HC_FAKE_EAGER_MAX;
    c->drv = d;
    c->addr = a;
    c->out_fd = c->in_fd = -1;
    c->out_ep = (hc_fake_ep_t){HC_FAKE_EP_OUT, c};
    c->in_ep = (hc_fake_ep_t){HC_FAKE_EP_IN, c};
    snprintf(c->name, sizeof(c->name), "rank %d (pid %u)", peer, a.pid);
    d->conns[peer] = c;
    *conn_p = &c->base;
    return HCOMM_OK;
}

/* ---- sending ---------------------------------------------------------------------------- */

/* Opens the sending socket to c's peer and writes the hello. Errors are
 * left in c->err for progress: never a failure from inside put. */
static void hc_fake_out_start(hc_fake_conn_t *c)
{
    hc_fake_drv_t *d = c->drv;
    hc_fake_activate(c);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        c->err = errno;
        return;
    }
    struct sockaddr_un sa;
    socklen_t salen = hc_fake_sockaddr(d->key_hash, c->base.peer, &sa);
    if (connect(fd, (struct sockaddr *)&sa, salen) != 0) {
        int e = errno;
        close(fd);
        if (e == EAGAIN || e == EINTR) { /* the peer's backlog is full: retry from progress */
            if (c->out_state != HC_FAKE_OUT_RETRY) c->deadline = hc_time_ns() + HC_FAKE_CONNECT_NS;
            c->out_state = HC_FAKE_OUT_RETRY;
            return;
        }
        c->err = e;
        return;
    }
    hc_fake_hello_t h = {.magic = HC_FAKE_MAGIC,
                         .src_rank = d->env->rank,
                         .dst_rank = c->base.peer,
                         .pid = d->me.pid,
                         .src_instance = d->me.instance,
                         .dst_instance = c->addr.instance,
                         .key = d->key_hash};
    /* A fresh socket always takes one small datagram. */
    if (send(fd, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(h)) {
        c->err = errno ? errno : EIO;
        close(fd);
        return;
    }
    c->out_fd = fd;
    c->out_state = HC_FAKE_OUT_UP;
    /* Only to hear the peer close: nothing is ever read from this socket. */
    hc_fake_ep(d, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP, &c->out_ep);
}

/* A core frame went out on c's socket. */
static void hc_fake_sent(hc_fake_conn_t *c)
{
    c->sent++;
    if (HC_UNLIKELY(c->drv->drop_after && c->sent == c->drv->drop_after)) c->drop_now = true;
}

/* Writes queued frames while the socket takes them; returns how many. With
 * the lane shuffle a lane may be held back for this pass (its later frames
 * with it) while the frames of other lanes behind it go; on the way out
 * (drain) nothing is held. */
static int hc_fake_flush_lanes(hc_fake_conn_t *c, bool shuffle)
{
    hc_fake_drv_t *d = c->drv;
    int n = 0;
    uint32_t held = 0;
    hc_fake_tx_t *prev = NULL;
    bool passed = false; /* a frame of a held lane is still queued before this one */
    while (c->out_state == HC_FAKE_OUT_UP && !c->err && !c->drop_now && !c->failed) {
        hc_fake_tx_t *t = prev ? prev->next : c->txq.head;
        if (!t) break;
        uint32_t bit = 1u << hc_fake_lane(t);
        if (shuffle && !(held & bit) && hc_fake_roll(d, d->pct_shuffle)) held |= bit;
        if (held & bit) {
            prev = t;
            passed = true;
            continue;
        }
        if (hc_fake_send(c->out_fd, &t->hdr, t->payload) < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) c->err = errno;
            break;
        }
        hc_fake_txq_take(c, prev, t);
        if (passed) d->n_overtaken++;
        c->q_bytes -= HC_FAKE_HDR + t->hdr.len;
        if (t->copy) c->q_copy -= t->hdr.len;
        hc_fake_sent(c);
        n++;
        if (t->inprog) {
            t->delay = (int)(hc_fake_rand(d) % HC_FAKE_DONE_DELAY);
            hc_fake_q_push(&c->done, t);
        } else {
            hc_fake_tx_free(t);
        }
    }
    if (shuffle && n == 0 && held && c->txq.head)
        return hc_fake_flush_lanes(c, false); /* every lane held: nobody would ever go */
    return n;
}

static int hc_fake_flush(hc_fake_conn_t *c)
{
    return hc_fake_flush_lanes(c, c->drv->pct_shuffle > 0);
}

static hcomm_status_t hc_fake_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
                                  void *cookie)
{
    hc_fake_conn_t *c = (hc_fake_conn_t *)conn;
    hc_fake_drv_t *d = c->drv;
    if (HC_UNLIKELY(c->failed))
        return hc_error(HCOMM_ERR_PEER_FAILED, "fake: connection to %s failed", c->name);
    size_t len = hdr->len, total = HC_FAKE_HDR + len;
    if (HC_UNLIKELY(len > HC_FAKE_MAX_FRAME))
        return hc_error(HCOMM_ERR_INVALID,
                        "fake put to %s: frame of %zu bytes exceeds max_frame %u", c->name, len,
                        HC_FAKE_MAX_FRAME);
    if (HC_UNLIKELY(hdr->type >= HC_FRAME_DRIVER))
        return hc_error(HCOMM_ERR_INVALID, "fake put to %s: frame type %u is reserved for drivers",
                        c->name, hdr->type);
    if (HC_UNLIKELY(hc_fake_cfg.handshake) && c->hs_state != 2) {
        if (c->hs_state == 0) {
            /* HELLO {magic, token}; the peer's ep_recv answers ACK {magic, token}. */
            uint64_t blob[3] = {0x6f6c6c6568ull, 0, hc_fake_mix(d->seed ^ (uint64_t)conn->peer)};
            c->hs_token = blob[2];
            const hc_drv_env_t *env = d->env;
            hcomm_status_t st = env->ep_send(env->core, &d->base, conn->peer, blob, sizeof(blob));
            if (st == HCOMM_OK)
                c->hs_state = 1;
            else if (st != HCOMM_ERR_AGAIN)
                return st;
        }
        return HCOMM_ERR_AGAIN; /* the core queues the frame and retries */
    }
    d->n_put++;
    if (hc_fake_roll(d, d->pct_again)) {
        d->n_again++;
        return HCOMM_ERR_AGAIN;
    }
    if (c->out_state == HC_FAKE_OUT_NONE && !c->err) hc_fake_out_start(c);
    bool async = cookie && hc_fake_roll(d, d->pct_async);
    bool user_data =
        hdr->type == HC_FRAME_EAGER || hdr->type == HC_FRAME_CONT || hdr->type == HC_FRAME_DATA;
    /* Lane shuffle: a frame that can be kept may wait so that later frames
     * of other lanes pass it; only its own lane's queued frames hold it. */
    bool ahead = d->pct_shuffle ? c->lane_q[hdr->lane & (HC_FRAME_LANES - 1)] != 0
                                : c->txq.head != NULL;
    if (d->pct_shuffle && (cookie || !user_data) && hc_fake_roll(d, d->pct_shuffle)) async = true;
    if (!async && !ahead && c->out_state == HC_FAKE_OUT_UP && !c->err && !c->drop_now) {
        if (c->txq.head) d->n_overtaken++;
        if (hc_fake_send(c->out_fd, hdr, payload) >= 0) {
            hc_fake_sent(c);
            if (HC_UNLIKELY(c->drop_now)) hc_fake_activate(c); /* progress drops it */
            return HCOMM_OK;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            c->err = errno; /* failed by progress; the frame is queued and failed with it */
    }
    if (!cookie && user_data)
        return HCOMM_ERR_AGAIN; /* not kept past the call: the core takes its request path */
    if (c->txq.head && c->q_bytes + total > HC_FAKE_QUEUE_BYTES) return HCOMM_ERR_AGAIN;
    if (!cookie && c->q_copy + len > HC_FAKE_QUEUE_COPY) return HCOMM_ERR_AGAIN;
    hc_fake_tx_t *t = calloc(1, sizeof(*t));
    if (!t) return hc_error(HCOMM_ERR_NO_MEMORY, "fake put to %s: queue entry", c->name);
    t->hdr = *hdr;
    t->cookie = cookie;
    if (cookie) {
        t->payload = payload;
        t->inprog = true;
    } else if (len) {
        t->copy = malloc(len);
        if (!t->copy) {
            free(t);
            return hc_error(HCOMM_ERR_NO_MEMORY, "fake put to %s: %zu-byte copy", c->name, len);
        }
        memcpy(t->copy, payload, len);
        t->payload = t->copy;
        c->q_copy += len;
    }
    c->q_bytes += total;
    hc_fake_txq_push(c, t);
    hc_fake_activate(c);
    if (async) d->n_async++;
    return cookie ? HCOMM_IN_PROGRESS : HCOMM_OK;
}

/* ---- memory keys ------------------------------------------------------------------------- */

static hc_fake_reg_t *hc_fake_reg_find(hc_fake_drv_t *d, uint64_t key)
{
    uint64_t slot = key & ((1ull << HC_FAKE_SLOT_BITS) - 1);
    if (key == 0 || slot >= HC_FAKE_REG_SLOTS || d->regs[slot].handle != key) return NULL;
    return &d->regs[slot];
}

static hcomm_status_t hc_fake_mem_reg(hc_drv_t *drv, const hc_mem_desc_t *desc, uint64_t *key_p)
{
    hc_fake_drv_t *d = (hc_fake_drv_t *)drv;
    if (!desc || !desc->addr || desc->len == 0)
        return hc_error(HCOMM_ERR_INVALID, "fake mem_reg: empty range (%p, %zu bytes)",
                        desc ? desc->addr : NULL, desc ? desc->len : 0);
    if (d->nfree == 0)
        return hc_error(HCOMM_ERR_NO_MEMORY, "fake mem_reg: all %u registrations in use",
                        HC_FAKE_REG_SLOTS);
    uint32_t slot = d->reg_free[--d->nfree];
    uint64_t handle = (hc_fake_mix(++d->reg_gen) << HC_FAKE_SLOT_BITS) | slot;
    if ((handle >> HC_FAKE_SLOT_BITS) == 0) handle |= 1ull << 63; /* never 0, whatever the slot */
    d->regs[slot] = (hc_fake_reg_t){
        .handle = handle, .base = (uint64_t)(uintptr_t)desc->addr, .len = desc->len};
    *key_p = handle;
    return HCOMM_OK;
}

static void hc_fake_mem_dereg(hc_drv_t *drv, uint64_t key)
{
    hc_fake_drv_t *d = (hc_fake_drv_t *)drv;
    hc_fake_reg_t *r = hc_fake_reg_find(d, key);
    if (!r) {
        hc_log_warn("fake mem_dereg: key %016llx is not a live registration (deregistered twice?)",
                    (unsigned long long)key);
        return;
    }
    for (int i = 0; i < d->nrma; i++) {
        const hc_fake_rma_op_t *op = d->rma[i];
        if (op->rma.lkey == key)
            hc_log_warn("fake mem_dereg: key %016llx still used by a %s to %s in flight "
                        "(deregistered before rma_done)",
                        (unsigned long long)key, op->write ? "write" : "get", op->conn->name);
    }
    __atomic_store_n(&r->handle, 0, __ATOMIC_RELEASE);
    d->reg_free[d->nfree++] = (uint32_t)(r - d->regs);
}

static hcomm_status_t hc_fake_rkey_pack(hc_drv_t *drv, uint64_t key, const hc_mem_desc_t *desc,
                                        void *buf, size_t *len_p)
{
    hc_fake_drv_t *d = (hc_fake_drv_t *)drv;
    const hc_fake_reg_t *r = hc_fake_reg_find(d, key);
    if (!r)
        return hc_error(HCOMM_ERR_INVALID, "fake rkey_pack: key %016llx is not a live registration",
                        (unsigned long long)key);
    uint64_t a = (uint64_t)(uintptr_t)desc->addr;
    if (a < r->base || desc->len > r->len || a - r->base > r->len - desc->len)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake rkey_pack: [%p, +%zu) is outside key %016llx ([%#llx, +%llu))",
                        desc->addr, desc->len, (unsigned long long)key, (unsigned long long)r->base,
                        (unsigned long long)r->len);
    if (*len_p < sizeof(hc_fake_rkey_wire_t))
        return hc_error(HCOMM_ERR_INVALID, "fake rkey_pack: %zu bytes of room, need %zu", *len_p,
                        sizeof(hc_fake_rkey_wire_t));
    hc_fake_rkey_wire_t w = {
        .magic = HC_FAKE_RKEY_MAGIC, .pid = d->me.pid, .handle = key, .base = a, .len = desc->len};
    memcpy(buf, &w, sizeof(w));
    *len_p = sizeof(w);
    return HCOMM_OK;
}

static hcomm_status_t hc_fake_rkey_unpack(hc_conn_t *conn, const void *buf, size_t len,
                                          hc_rkey_t **rkey_p)
{
    hc_fake_conn_t *c = (hc_fake_conn_t *)conn;
    hc_fake_rkey_wire_t w;
    if (len == 0) {
        *rkey_p = NULL; /* get/write then fail, naming the missing key */
        return HCOMM_OK;
    }
    if (len != sizeof(w))
        return hc_error(HCOMM_ERR_INVALID, "fake rkey_unpack: %zu-byte key from %s, expected %zu",
                        len, c->name, sizeof(w));
    memcpy(&w, buf, sizeof(w));
    if (w.magic != HC_FAKE_RKEY_MAGIC || w.handle == 0)
        return hc_error(
            HCOMM_ERR_INVALID,
            "fake rkey_unpack: key from %s is not a fake rkey (magic %08x, handle %016llx)",
            c->name, w.magic, (unsigned long long)w.handle);
    if (w.pid != c->addr.pid)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake rkey_unpack: key %016llx belongs to pid %u, not to %s",
                        (unsigned long long)w.handle, w.pid, c->name);
    hc_rkey_t *k = malloc(sizeof(*k));
    if (!k) return hc_error(HCOMM_ERR_NO_MEMORY, "fake rkey_unpack");
    k->w = w;
    *rkey_p = k;
    return HCOMM_OK;
}

static void hc_fake_rkey_release(hc_conn_t *conn, hc_rkey_t *rkey)
{
    (void)conn;
    free(rkey);
}

static hcomm_status_t hc_fake_rkey_ptr(hc_conn_t *conn, const hc_rkey_t *rkey, uint64_t remote_addr,
                                       size_t len, void **ptr_p)
{
    (void)rkey;
    (void)remote_addr;
    (void)len;
    *ptr_p = NULL;
    return hc_error(HCOMM_ERR_UNSUPPORTED, "fake: %s's memory cannot be mapped here (no rkey_ptr)",
                    ((hc_fake_conn_t *)conn)->name);
}

/* ---- RMA ----------------------------------------------------------------------------------- */

/* Every key check of one transfer; the message names the bad key. */
static hcomm_status_t hc_fake_rma_check(hc_fake_conn_t *c, const hc_rma_t *rma,
                                        const hc_rkey_t *rkey, bool write)
{
    hc_fake_drv_t *d = c->drv;
    const char *what = write ? "write to" : "get from";
    uint64_t local = (uint64_t)(uintptr_t)rma->local, remote = rma->remote_addr;
    if (!rma->local && rma->len)
        return hc_error(HCOMM_ERR_INVALID, "fake %s %s: local buffer is NULL", what, c->name);
    const hc_fake_reg_t *r = hc_fake_reg_find(d, rma->lkey);
    if (!r)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake %s %s: lkey %016llx is not a live registration (local %p, %zu bytes: "
                        "not registered?)",
                        what, c->name, (unsigned long long)rma->lkey, rma->local, rma->len);
    if (local < r->base || rma->len > r->len || local - r->base > r->len - rma->len)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake %s %s: lkey %016llx covers [%#llx, +%llu), not local %p+%zu", what,
                        c->name, (unsigned long long)rma->lkey, (unsigned long long)r->base,
                        (unsigned long long)r->len, rma->local, rma->len);
    if (!rkey)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake %s %s: no rkey for remote %#llx+%zu (the peer's key was not sent or "
                        "not unpacked)",
                        what, c->name, (unsigned long long)remote, rma->len);
    const hc_fake_rkey_wire_t *w = &rkey->w;
    if (remote < w->base || rma->len > w->len || remote - w->base > w->len - rma->len)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake %s %s: rkey %016llx covers [%#llx, +%llu), not remote %#llx+%zu",
                        what, c->name, (unsigned long long)w->handle, (unsigned long long)w->base,
                        (unsigned long long)w->len, (unsigned long long)remote, rma->len);
    /* The owner must still hold the registration: read its table entry. */
    uint64_t slot = w->handle & ((1ull << HC_FAKE_SLOT_BITS) - 1);
    hc_fake_reg_t theirs = {0};
    struct iovec l = {.iov_base = &theirs, .iov_len = sizeof(theirs)};
    struct iovec rv = {.iov_base = (void *)(uintptr_t)(c->addr.regs + slot * sizeof(theirs)),
                       .iov_len = sizeof(theirs)};
    if (slot >= c->addr.nregs)
        return hc_error(HCOMM_ERR_INVALID, "fake %s %s: rkey %016llx names no registration slot",
                        what, c->name, (unsigned long long)w->handle);
    if (process_vm_readv((pid_t)c->addr.pid, &l, 1, &rv, 1, 0) != (ssize_t)sizeof(theirs))
        return hc_error_errno(HCOMM_ERR_IO, errno, "fake %s %s: cannot read its registration table",
                              what, c->name);
    if (theirs.handle != w->handle || w->base < theirs.base ||
        w->base - theirs.base + w->len > theirs.len)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake %s %s: rkey %016llx is no longer registered there (deregistered "
                        "before the transfer)",
                        what, c->name, (unsigned long long)w->handle);
    return HCOMM_OK;
}

static hcomm_status_t hc_fake_rma_move(hc_fake_conn_t *c, const hc_rma_t *rma, bool write)
{
    size_t done = 0;
    while (done < rma->len) {
        struct iovec l = {.iov_base = (char *)rma->local + done, .iov_len = rma->len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(rma->remote_addr + done),
                          .iov_len = rma->len - done};
        ssize_t n = write ? process_vm_writev((pid_t)c->addr.pid, &l, 1, &r, 1, 0)
                          : process_vm_readv((pid_t)c->addr.pid, &l, 1, &r, 1, 0);
        if (n <= 0)
            return hc_error_errno(HCOMM_ERR_IO, n < 0 ? errno : EIO, "fake: process_vm_%s %s",
                                  write ? "writev to" : "readv from", c->name);
        done += (size_t)n;
    }
    return HCOMM_OK;
}

static hcomm_status_t hc_fake_rma(hc_conn_t *conn, const hc_rma_t *rma, bool write)
{
    hc_fake_conn_t *c = (hc_fake_conn_t *)conn;
    hc_fake_drv_t *d = c->drv;
    if (HC_UNLIKELY(c->failed))
        return hc_error(HCOMM_ERR_PEER_FAILED, "fake: connection to %s failed", c->name);
    hcomm_status_t st = hc_fake_rma_check(c, rma, rma->rkey, write);
    if (st != HCOMM_OK) return st;
    d->n_rma++;
    if (rma->cookie && hc_fake_roll(d, d->pct_rma_async)) {
        if (d->nrma == HC_FAKE_RMA_MAX) return HCOMM_ERR_AGAIN;
        hc_fake_rma_op_t *op = calloc(1, sizeof(*op));
        if (!op) return hc_error(HCOMM_ERR_NO_MEMORY, "fake: RMA to %s", c->name);
        op->conn = c;
        op->rma = *rma;
        op->write = write;
        op->rkey = *rma->rkey;
        op->rma.rkey = &op->rkey;
        d->rma[d->nrma++] = op;
        d->n_rma_async++;
        return HCOMM_IN_PROGRESS;
    }
    return hc_fake_rma_move(c, rma, write);
}

static hcomm_status_t hc_fake_get(hc_conn_t *conn, const hc_rma_t *rma)
{
    return hc_fake_rma(conn, rma, false);
}

static hcomm_status_t hc_fake_write(hc_conn_t *conn, const hc_rma_t *rma)
{
    return hc_fake_rma(conn, rma, true);
}

/* Executes about half of the asynchronous RMAs, in random order. */
static int hc_fake_rma_progress(hc_fake_drv_t *d)
{
    int n = 0;
    for (int budget = d->nrma; budget > 0 && d->nrma > 0; budget--) {
        int i = (int)(hc_fake_rand(d) % (uint64_t)d->nrma);
        if (hc_fake_rand(d) & 1) continue;
        hc_fake_rma_op_t *op = d->rma[i];
        d->rma[i] = d->rma[--d->nrma];
        /* Checked again: the core must keep both registrations until rma_done. */
        hcomm_status_t st = hc_fake_rma_check(op->conn, &op->rma, &op->rkey, op->write);
        if (st == HCOMM_OK) st = hc_fake_rma_move(op->conn, &op->rma, op->write);
        if (st != HCOMM_OK) hc_log_warn("%s", hc_error_last());
        d->env->rma_done(d->env->core, &op->conn->base, op->rma.cookie, st);
        free(op);
        n++;
    }
    return n;
}

/* ---- receiving ------------------------------------------------------------------------------- */

static void hc_fake_accept(hc_fake_drv_t *d)
{
    for (int k = 0; k < 16; k++) {
        int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                hc_log_warn("fake: accept: %s", strerror(errno));
            return;
        }
        hc_fake_anon_t *a = calloc(1, sizeof(*a));
        if (!a) {
            close(fd);
            continue;
        }
        a->kind = HC_FAKE_EP_ANON;
        a->fd = fd;
        a->deadline = hc_time_ns() + HC_FAKE_HELLO_NS;
        a->next = d->anon;
        d->anon = a;
        hc_fake_ep(d, EPOLL_CTL_ADD, fd, EPOLLIN, a);
    }
}

/* Retired, not freed: an event for it may still wait in progress's batch.
 * Progress frees the retired ones when the batch is done. */
static void hc_fake_anon_free(hc_fake_drv_t *d, hc_fake_anon_t *a, bool close_fd)
{
    for (hc_fake_anon_t **pp = &d->anon; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    if (close_fd) hc_fake_close_fd(d, &a->fd);
    a->kind = 0;
    a->fd = -1;
    a->next = d->anon_dead;
    d->anon_dead = a;
}

static void hc_fake_anon_reap(hc_fake_drv_t *d)
{
    while (d->anon_dead) {
        hc_fake_anon_t *a = d->anon_dead;
        d->anon_dead = a->next;
        free(a);
    }
}

/* An accepted socket's hello: hand it to its connection, or close it. */
static void hc_fake_anon_hello(hc_fake_drv_t *d, hc_fake_anon_t *a)
{
    hc_fake_hello_t h;
    ssize_t n = recv(a->fd, &h, sizeof(h), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    const hc_drv_env_t *env = d->env;
    const char *bad = NULL;
    hc_fake_conn_t *c = NULL;
    if (n != (ssize_t)sizeof(h) || h.magic != HC_FAKE_MAGIC)
        bad = "not a fake-driver hello";
    else if (h.key != d->key_hash)
        bad = "wrong job key";
    else if (h.dst_rank != env->rank || h.dst_instance != d->me.instance)
        bad = "meant for another rank or process";
    else if (h.src_rank < 0 || h.src_rank >= env->size || !(c = d->conns[h.src_rank]))
        bad = "from a rank this one has no connection to";
    else if (h.src_instance != c->addr.instance || h.pid != c->addr.pid)
        bad = "from a process other than the one recorded at wireup";
    else if (c->failed)
        bad = "from a rank that failed";
    else if (c->in_fd >= 0)
        bad = "a second socket from the same rank";
    if (bad) {
        hc_log_warn("fake: dropped an incoming socket claiming rank %d: %s",
                    n == (ssize_t)sizeof(h) ? h.src_rank : -1, bad);
        hc_fake_anon_free(d, a, true);
        return;
    }
    c->in_fd = a->fd;
    hc_fake_anon_free(d, a, false);
    hc_fake_ep(d, EPOLL_CTL_MOD, c->in_fd, EPOLLIN | EPOLLRDHUP, &c->in_ep);
    hc_fake_activate(c);
}

/* Reads c's incoming frames; returns events. */
static int hc_fake_read(hc_fake_conn_t *c)
{
    hc_fake_drv_t *d = c->drv;
    const hc_drv_env_t *env = d->env;
    int events = 0;
    for (int k = 0; k < HC_FAKE_READ_BUDGET && c->in_fd >= 0 && !c->failed; k++) {
        struct iovec iov = {.iov_base = d->rbuf, .iov_len = HC_FAKE_HDR + HC_FAKE_MAX_FRAME + 1};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
        ssize_t n = recvmsg(c->in_fd, &m, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) {
            if (c->bye || d->closing) {
                hc_fake_close_fd(d, &c->in_fd);
            } else if (n == 0) {
                hc_fake_conn_fail(c, "%s closed its connection (process exited or was killed)",
                                  c->name);
            } else {
                hc_fake_conn_fail(c, "reading from %s failed: %s", c->name, strerror(errno));
            }
            return events + 1;
        }
        hc_frame_hdr_t h;
        memcpy(&h, d->rbuf, HC_FAKE_HDR < (size_t)n ? HC_FAKE_HDR : (size_t)n);
        if ((size_t)n < HC_FAKE_HDR || (m.msg_flags & MSG_TRUNC) || h.len != n - HC_FAKE_HDR) {
            hc_fake_conn_fail(c, "%s sent a malformed frame (%zd bytes, header says %u)", c->name,
                              n, (size_t)n < HC_FAKE_HDR ? 0 : h.len);
            return events + 1;
        }
        events++;
        if (h.type == HC_FAKE_FRAME_BYE) {
            c->bye = true;
        } else if (h.type == HC_FAKE_FRAME_DROP) {
            d->n_drops++;
            hc_fake_conn_fail(c,
                              "fake drop: %s closed the connection after %llu frames sent "
                              "(HCOMM_FAKE_DROP_AFTER there)",
                              c->name, (unsigned long long)h.a);
        } else if (h.type >= HC_FRAME_DRIVER) {
            hc_log_debug("fake: unknown driver frame %u from %s ignored", h.type, c->name);
        } else if (c->out_state != HC_FAKE_OUT_CLOSING) {
            env->deliver(env->core, &c->base, &h, d->rbuf + HC_FAKE_HDR);
        }
    }
    return events;
}

/* The peer closed our sending socket. Its last frames to us (a DROP notice,
 * a goodbye) are read first: they say why. */
static void hc_fake_out_hup(hc_fake_conn_t *c)
{
    hc_fake_drv_t *d = c->drv;
    if (c->in_fd < 0) {
        /* Its socket to us may still wait in the listen queue. */
        hc_fake_accept(d);
        for (hc_fake_anon_t *a = d->anon, *next; a; a = next) {
            next = a->next;
            hc_fake_anon_hello(d, a);
        }
    }
    if (c->in_fd >= 0)
        while (!c->failed && c->in_fd >= 0 && hc_fake_read(c) > 0)
            ;
    if (c->failed) return;
    if (c->bye || d->closing) {
        hc_fake_close_fd(d, &c->out_fd);
        c->out_state = HC_FAKE_OUT_NONE;
        return;
    }
    hc_fake_conn_fail(c, "%s closed its connection (process exited or was killed)", c->name);
}

/* ---- progress -------------------------------------------------------------------------------- */

/* put_done for sent frames whose hold expired. */
static int hc_fake_done_progress(hc_fake_conn_t *c)
{
    const hc_drv_env_t *env = c->drv->env;
    int n = 0;
    hc_fake_tx_t **pp = &c->done.head, *prev = NULL;
    while (*pp) {
        hc_fake_tx_t *t = *pp;
        if (t->delay-- > 0) {
            prev = t;
            pp = &t->next;
            continue;
        }
        *pp = t->next;
        if (c->done.tail == t) c->done.tail = prev;
        env->put_done(env->core, &c->base, t->cookie, HCOMM_OK);
        hc_fake_tx_free(t);
        n++;
        if (c->failed) break; /* put_done failed it (cannot happen today) */
    }
    return n;
}

static void hc_fake_timers(hc_fake_drv_t *d, uint64_t now)
{
    for (hc_fake_anon_t *a = d->anon, *next; a; a = next) {
        next = a->next;
        if (now > a->deadline) {
            hc_log_warn("fake: dropped an incoming socket: no hello within %llu s",
                        HC_FAKE_HELLO_NS / 1000000000ull);
            hc_fake_anon_free(d, a, true);
        }
    }
}

/* One connection's send side: connect retries, errors, the queue, a drop. */
static int hc_fake_conn_progress(hc_fake_conn_t *c, uint64_t now)
{
    hc_fake_drv_t *d = c->drv;
    int n = 0;
    if (c->out_state == HC_FAKE_OUT_CLOSING) {
        hc_frame_hdr_t h = {.type = HC_FAKE_FRAME_DROP, .a = c->sent};
        if (hc_fake_send(c->out_fd, &h, NULL) >= 0 || errno != EAGAIN || now > c->deadline) {
            hc_fake_close_fd(d, &c->out_fd);
            hc_fake_close_fd(d, &c->in_fd);
            c->out_state = HC_FAKE_OUT_NONE;
        }
        return 1;
    }
    if (c->failed) return 0;
    if (c->out_state == HC_FAKE_OUT_RETRY) {
        hc_fake_out_start(c);
        if (c->out_state == HC_FAKE_OUT_RETRY && now > c->deadline) {
            hc_fake_conn_fail(c, "cannot connect to %s: its listen queue stayed full for %llu s",
                              c->name, HC_FAKE_CONNECT_NS / 1000000000ull);
            return 1;
        }
    }
    if (c->txq.head) n += hc_fake_flush(c);
    if (HC_UNLIKELY(c->err)) {
        int e = c->err;
        /* A peer that closed our socket may have said why first (a DROP
         * notice, a goodbye on its socket to us): read that before blaming. */
        if (e == EPIPE || e == ECONNRESET)
            hc_fake_out_hup(c);
        if (c->failed || c->out_state == HC_FAKE_OUT_NONE)
            return n + 1;
        if (e == ECONNREFUSED || e == ENOENT || e == EPIPE || e == ECONNRESET)
            hc_fake_conn_fail(c, "cannot send to %s: %s (process exited or was killed)", c->name,
                              strerror(e));
        else
            hc_fake_conn_fail(c, "cannot send to %s: %s", c->name, strerror(e));
        return n + 1;
    }
    if (HC_UNLIKELY(c->drop_now)) {
        hc_fake_drop(c);
        return n + 1;
    }
    if (c->done.head) n += hc_fake_done_progress(c);
    return n;
}

static int hc_fake_progress(hc_drv_t *drv)
{
    hc_fake_drv_t *d = (hc_fake_drv_t *)drv;
    int n = 0;
    struct epoll_event ev[64];
    int k = epoll_wait(d->epfd, ev, 64, 0);
    for (int i = 0; i < k; i++) {
        void *p = ev[i].data.ptr;
        int kind = *(int *)p;
        if (kind == HC_FAKE_EP_LISTEN) {
            hc_fake_accept(d);
        } else if (kind == HC_FAKE_EP_ANON) {
            hc_fake_anon_hello(d, p);
            n++;
        } else if (kind == HC_FAKE_EP_IN || kind == HC_FAKE_EP_OUT) {
            hc_fake_ep_t *e = p;
            hc_fake_conn_t *c = e->conn;
            /* A socket closed earlier in this batch still has its event here. */
            if (kind == HC_FAKE_EP_IN && c->in_fd >= 0)
                n += hc_fake_read(c);
            else if (kind == HC_FAKE_EP_OUT && c->out_fd >= 0 && c->out_state == HC_FAKE_OUT_UP)
                hc_fake_out_hup(c);
        }
    }
    uint64_t now = hc_time_ns();
    /* A failed connection stays on the list (it costs a test per call):
     * callbacks below may put to a peer, which can push a connection at
     * the head while this walks. */
    for (hc_fake_conn_t *c = d->active; c; c = c->active_next)
        n += hc_fake_conn_progress(c, now);
    if (d->nrma) n += hc_fake_rma_progress(d);
    if (now >= d->next_timer_ns) {
        d->next_timer_ns = now + 10000000ull;
        hc_fake_timers(d, now);
    }
    hc_fake_anon_reap(d);
    return n;
}

/* ---- teardown -------------------------------------------------------------------------------- */

/* Best effort on the way out: what is queued, for at most a second, then a
 * goodbye so the peer does not take our EOF for a crash. */
static void hc_fake_drain(hc_fake_conn_t *c)
{
    uint64_t deadline = hc_time_ns() + HC_FAKE_DRAIN_NS;
    while (!c->failed && c->out_state == HC_FAKE_OUT_UP && c->txq.head && !c->err && !c->drop_now &&
           hc_time_ns() < deadline) {
        if (hc_fake_flush_lanes(c, false) == 0) {
            struct pollfd p = {.fd = c->out_fd, .events = POLLOUT};
            poll(&p, 1, 10);
        }
    }
    if (!c->failed && c->out_state == HC_FAKE_OUT_UP && !c->err) {
        hc_frame_hdr_t bye = {.type = HC_FAKE_FRAME_BYE};
        while (hc_fake_send(c->out_fd, &bye, NULL) < 0 && errno == EAGAIN &&
               hc_time_ns() < deadline) {
            struct pollfd p = {.fd = c->out_fd, .events = POLLOUT};
            poll(&p, 1, 10);
        }
    }
}

/* Endpoint handshake blobs (HCOMM_FAKE_HANDSHAKE): a HELLO is answered with
 * an ACK carrying its token; an ACK with our token opens the connection. */
static void hc_fake_ep_recv(hc_drv_t *drv, int from, const void *blob, size_t len)
{
    hc_fake_drv_t *d = (hc_fake_drv_t *)drv;
    uint64_t w[3];
    if (len != sizeof(w) || from < 0 || from >= d->env->size) {
        hc_log_warn("fake: a %zu-byte handshake from rank %d dropped", len, from);
        return;
    }
    memcpy(w, blob, sizeof(w));
    if (w[0] == 0x6f6c6c6568ull && w[1] == 0) { /* HELLO */
        uint64_t ack[3] = {0x6f6c6c6568ull, 1, w[2]};
        if (d->env->ep_send(d->env->core, drv, from, ack, sizeof(ack)) != HCOMM_OK)
            hc_log_warn("fake: cannot answer rank %d's handshake", from);
        return;
    }
    hc_fake_conn_t *c = d->conns ? d->conns[from] : NULL;
    if (w[0] == 0x6f6c6c6568ull && w[1] == 1 && c && c->hs_state == 1 && w[2] == c->hs_token) {
        c->hs_state = 2;
        hc_log_debug("fake: endpoint handshake with rank %d done", from);
        return;
    }
    hc_log_warn("fake: an unexpected handshake blob from rank %d dropped", from);
}

static void hc_fake_disconnect(hc_conn_t *conn)
{
    hc_fake_conn_t *c = (hc_fake_conn_t *)conn;
    hc_fake_drv_t *d = c->drv;
    hc_fake_drain(c);
    hc_fake_conn_flush_owed(c, HCOMM_ERR_ABORTED, false); /* the core is going away */
    hc_fake_close_fd(d, &c->out_fd);
    hc_fake_close_fd(d, &c->in_fd);
    for (hc_fake_conn_t **pp = &d->active; *pp; pp = &(*pp)->active_next)
        if (*pp == c) {
            *pp = c->active_next;
            break;
        }
    d->conns[conn->peer] = NULL;
    free(c);
}

static void hc_fake_close(hc_drv_t *drv)
{
    hc_fake_drv_t *d = (hc_fake_drv_t *)drv;
    d->closing = true;
    for (int r = 0; r < d->env->size; r++)
        if (d->conns[r]) hc_fake_disconnect(&d->conns[r]->base);
    hc_fake_rma_fail(d, NULL, HCOMM_ERR_ABORTED, false);
    while (d->anon)
        hc_fake_anon_free(d, d->anon, true);
    hc_fake_anon_reap(d);
    hc_log_info("fake: %llu puts (%llu refused, %llu late), %llu RMAs (%llu late), %llu drops, "
                "%llu frames overtook another lane's",
                (unsigned long long)d->n_put, (unsigned long long)d->n_again,
                (unsigned long long)d->n_async, (unsigned long long)d->n_rma,
                (unsigned long long)d->n_rma_async, (unsigned long long)d->n_drops,
                (unsigned long long)d->n_overtaken);
    close(d->listen_fd);
    close(d->epfd);
    free(d->rma);
    free(d->reg_free);
    free(d->regs);
    free(d->rbuf);
    free(d->conns);
    free(d);
}

static void hc_fake_counters(hc_drv_t *drv, void (*kv)(const char *name, uint64_t value, void *arg),
                             void *arg)
{
    hc_fake_drv_t *d = (hc_fake_drv_t *)drv;
    kv("puts", d->n_put, arg);
    kv("puts_refused", d->n_again, arg);
    kv("puts_late", d->n_async, arg);
    kv("frames_overtaken", d->n_overtaken, arg);
}

static const struct hc_drv_ops hc_fake_ops = {
    .name = "fake",
    .scope = HC_DRV_SCOPE_NET,
    .priority = 0,
    .caps = HC_DRV_CAP_USER_REG,
    .probe = hc_fake_probe,
    .open = hc_fake_open,
    .addr_pack = hc_fake_addr_pack,
    .connect = hc_fake_connect,
    .put = hc_fake_put,
    .ep_recv = hc_fake_ep_recv,
    .get = hc_fake_get,
    .progress = hc_fake_progress,
    .mem_reg = hc_fake_mem_reg,
    .mem_dereg = hc_fake_mem_dereg,
    .disconnect = hc_fake_disconnect,
    .close = hc_fake_close,
    .write = hc_fake_write,
    .rkey_pack = hc_fake_rkey_pack,
    .rkey_unpack = hc_fake_rkey_unpack,
    .rkey_release = hc_fake_rkey_release,
    .rkey_ptr = hc_fake_rkey_ptr,
    .counters = hc_fake_counters,
};
HC_DRV_REGISTER(hc_fake_ops)
