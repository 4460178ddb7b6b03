/*
 * Driver conformance, ops level: the contract of drv/drv.h checked with real
 * bytes, the same checks for every driver (self, shm, tcp, fake today;
 * verbs, dpdk, mlx5 next).
 *
 *   test_drv_conformance DRIVER [CASE...]
 *
 * Each case forks into two processes, rank 0 and rank 1 (the self driver:
 * one process, talking to itself); the test process itself never opens the
 * driver (a library like DPDK's EAL can start only once per process and
 * does not survive a fork), so even the one-process cases run in a child. Each opens DRIVER itself with a
 * hand-built hc_drv_env_t (no core: the callbacks below check what the
 * driver reports), publishes its address blob over a socketpair, wires up
 * and connects; the socketpair then carries the cases' out-of-band
 * synchronization. A second socketpair (SOCK_SEQPACKET, one message per
 * blob) is the per-peer endpoint handshake: env->ep_send sends a blob to
 * the other process, whose progress() hands it to ops->ep_recv, in order,
 * outside any other driver op (blobs tagged for a driver instance closed
 * since are dropped); with one process there is no peer and ep_send
 * refuses. Every failed check prints one line "conformance
 * DRIVER/CASE rank R line L: what" and fails the case. A case that does not
 * apply to the driver (no RMA capability, peer death on a node driver) is a
 * cmocka skip with the reason; a driver that cannot run here at all (its
 * probe fails, or an optional driver was compiled out for want of its
 * library) prints "skipped: <why>" and exits 77; a driver name this build
 * does not know fails (exit 1). The cases, in order:
 *
 *   ops_table    the registered table: size, name, scope, caps, no NULL op
 *   open_close   open/close twice in one process; addr_pack refuses a
 *                capacity that is too small instead of overflowing it
 *   connect      conn fields (ops, drv, peer, caps, max_frame, eager_max)
 *   put_order    both ranks at once send 2000 frames of every core type and
 *                of sizes 0..max_frame, with and without cookies: every
 *                header field and payload byte arrives, in order, once;
 *                OK means the payload may be reused at once (it is
 *                scribbled over), IN_PROGRESS only with a cookie and then
 *                exactly one put_done(OK), never from inside its own put;
 *                ERR_AGAIN is retried; no put blocks (> 1 s); driver frame
 *                types are never delivered; hdr.lane arrives as put
 *   put_lanes    put_order with env.lanes = HC_FRAME_LANES (the core's
 *                lanes on): frames of 5 lanes, each lane's in put order
 *                (lanes may pass each other: tcp's sockets)
 *   credit       (after 64 frames each way, so that handshakes are done)
 *                a receiver that does not progress: the sender must see
 *                sustained ERR_AGAIN before 512 MiB are accepted, never a
 *                blocking put; once the receiver runs, every frame arrives
 *                in order
 *   rma          get and write (as the caps say) of 1 B .. 4 MiB at odd
 *                offsets, with and without cookies, 256 outstanding at
 *                once; keys from mem_reg + rkey_pack/rkey_unpack (at most
 *                HC_RKEY_MAX bytes; a 0-byte key unpacks to NULL);
 *                IN_PROGRESS only with a cookie, then exactly one
 *                rma_done(OK), never from inside its own call; rkey_ptr
 *                works (HC_CONN_CAP_RKEY_PTR) or answers ERR_UNSUPPORTED.
 *                Drivers with HC_DRV_CAP_USER_REG must refuse (a failed
 *                status, or rma_done with one) a transfer with lkey 0, a
 *                local range outside its registration, no rkey, a remote
 *                range outside the rkey, and a key the owner deregistered;
 *                a synchronous refusal's message names the key
 *   mem_reg      2048 registrations, keys nonzero and distinct for drivers
 *                with HC_DRV_CAP_USER_REG, deregistered in two rounds
 *   close_held   close with 3 registrations never deregistered (what the
 *                core leaves when a request that held one never ended):
 *                close releases them without a warning or an error (the
 *                mlx5 model warns, as a device's ibv_dealloc_pd fails, when
 *                keys outlive the driver), ASan sees no leak
 *   abandoned    (keyless GET: shm) a peer unmaps a buffer it advertised:
 *                a get from it fails with ERR_PEER_FAILED naming the rank,
 *                never ERR_IO
 *   killed       rank 1 is SIGKILLed with traffic in flight: a network
 *                driver reports peer_failed(1, error, why) within 10 s,
 *                exactly once, after every put it owed a completion got
 *                it, and nothing after; later puts and gets fail
 *   drop         (fake, with HCOMM_FAKE_DROP_AFTER set) both ranks report
 *                peer_failed naming HCOMM_FAKE_DROP_AFTER, and no more
 *                frames than that arrive
 */
#include "base/config.h"
#include "drv/drv.h"
#include "mem/mem.h"

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define NS 1000000000ull
#define CASE_DEADLINE_NS (90 * NS) /* one case, in one process */
#define CHILD_WAIT_S 150           /* the parent's limit on the child */
#define ADDR_CAP (512 - 4)         /* what the core gives addr_pack (HC_DRV_ADDR_MAX - 4) */
#define PUT_BLOCK_NS (1 * NS)      /* a put that takes longer blocked */

/* ---- state of this process ---------------------------------------------------------- */

static const char *drv_name;
static const struct hc_drv_ops *ops;
static int me, peer, nranks; /* nranks 1: the self driver, one process */
static int oob = -1;         /* socketpair to the other process */
static int hs = -1;          /* handshake socketpair (SOCK_SEQPACKET) to the other process */
static bool hs_eof;          /* the other process closed it (exited or was killed) */
static uint32_t hs_gen;      /* driver instance the blobs are for: both advance it in pair_setup */
static hc_drv_env_t env;
static int node_of[2], locals[2];
static char job_key[96], node_id[96];
static hc_drv_t *drv;
static hc_conn_t *conn;
static const char *case_name;
static const char *skip_why; /* set alike in both processes: the case does not apply */
static int child_signal;     /* the case kills the child with this signal */
static int failures, printed;
static int core_marker;            /* env.core: every callback must hand it back */
static uint32_t rx_next, rx_limit; /* frames received from the peer; expected */
static uint32_t rx_ord[HC_FRAME_LANES]; /* frame_make: the next ordered frame expected (per
                                           lane when env_lanes > 1, else all in [0]) */
static int env_lanes = 1;               /* env.lanes of the case (put_lanes: HC_FRAME_LANES) */
static uint8_t *rx_seen;           /* frame_make: per frame, whether it arrived */

static void check_fail(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check_fail(int line, const char *fmt, ...)
{
    failures++;
    if (++printed > 25) return;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "conformance %s/%s rank %d line %d: %s%s\n", drv_name, case_name, me, line, msg,
            printed == 25 ? " (further failures of this rank not printed)" : "");
    fflush(stderr);
}
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) check_fail(__LINE__, __VA_ARGS__);                                            \
    } while (0)

static const char *st_name(hcomm_status_t st)
{
    switch (st) {
#define ST_CASE_(name, value, text)                                                                \
    case HCOMM_##name:                                                                             \
        return #name;
        HCOMM_STATUS_MAP(ST_CASE_)
#undef ST_CASE_
    }
    return "?";
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Byte o of the pattern seed: any sub-range of a buffer can be checked. */
static inline uint8_t pat_byte(uint64_t seed, uint64_t o)
{
    return (uint8_t)(mix(seed ^ (o >> 3)) >> ((o & 7) * 8));
}
static void pat_fill(uint8_t *p, size_t len, uint64_t seed, uint64_t off)
{
    for (size_t i = 0; i < len; i++)
        p[i] = pat_byte(seed, off + i);
}
/* First wrong byte, or len. */
static size_t pat_check(const uint8_t *p, size_t len, uint64_t seed, uint64_t off)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != pat_byte(seed, off + i)) return i;
    return len;
}

/* ---- the endpoint handshake channel (env->ep_send / ops->ep_recv) ------------------------ */

/* Each message on hs: this header, then the blob. */
#define HS_MAGIC 0x68736b21u
typedef struct {
    uint32_t magic;
    uint32_t gen; /* hs_gen of the sender when it sent */
} hs_hdr_t;

static hcomm_status_t cb_ep_send(void *core, hc_drv_t *d, int p, const void *blob, size_t len)
{
    int other = nranks == 2 ? 1 - me : -1;
    CHECK(core == &core_marker, "ep_send: core pointer %p is not env->core", core);
    CHECK(d && d == drv, "ep_send: driver %p is not the open one (%p; called from inside open?)",
          (void *)d, (void *)drv);
    CHECK(other >= 0,
          "ep_send to rank %d: this driver runs in one process, there is no peer to "
          "hand-shake with",
          p);
    CHECK(other < 0 || p == other, "ep_send to rank %d: not the peer (rank %d)", p, other);
    CHECK(len <= HC_DRV_EP_BLOB_MAX, "ep_send: a %zu-byte blob (HC_DRV_EP_BLOB_MAX is %d)", len,
          HC_DRV_EP_BLOB_MAX);
    CHECK(len == 0 || blob, "ep_send: %zu bytes from a NULL blob", len);
    if (len > HC_DRV_EP_BLOB_MAX || (len && !blob))
        return hc_error(HCOMM_ERR_INVALID, "conformance: ep_send of %zu bytes (at most %d)", len,
                        HC_DRV_EP_BLOB_MAX);
    if (p != other)
        return hc_error(HCOMM_ERR_PEER_FAILED, "conformance: ep_send to rank %d: no such peer", p);
    if (hs < 0)
        return hc_error(HCOMM_ERR_PEER_FAILED,
                        "conformance: ep_send to rank %d: case %s runs in one process", p,
                        case_name);
    uint8_t msg[sizeof(hs_hdr_t) + HC_DRV_EP_BLOB_MAX];
    hs_hdr_t h = {.magic = HS_MAGIC, .gen = hs_gen};
    memcpy(msg, &h, sizeof(h));
    if (len) memcpy(msg + sizeof(h), blob, len);
    for (;;) {
        ssize_t n = send(hs, msg, sizeof(h) + len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n == (ssize_t)(sizeof(h) + len)) return HCOMM_OK;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return HCOMM_ERR_AGAIN;
        if (n >= 0) /* SOCK_SEQPACKET sends all or nothing */
            return hc_error(HCOMM_ERR_INTERNAL,
                            "conformance: handshake blob to rank %d: %zd of %zu bytes sent", p, n,
                            sizeof(h) + len);
        return hc_error_errno(HCOMM_ERR_PEER_FAILED, errno,
                              "conformance: handshake blob to rank %d (the process is gone)", p);
    }
}

/* Hands what arrived on hs to ops->ep_recv, without blocking; returns how
 * many blobs it delivered. */
static int hs_drain(void)
{
    if (hs < 0 || hs_eof || !drv) return 0;
    int got = 0;
    for (int k = 0; k < 64; k++) {
        uint8_t msg[sizeof(hs_hdr_t) + HC_DRV_EP_BLOB_MAX + 1];
        ssize_t n = recv(hs, msg, sizeof(msg), MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) { /* 0: closed (every message has a header); else reset */
            hs_eof = true;
            break;
        }
        hs_hdr_t h;
        memcpy(&h, msg, HC_MIN((size_t)n, sizeof(h)));
        if ((size_t)n < sizeof(h) || (size_t)n > sizeof(msg) - 1 || h.magic != HS_MAGIC) {
            CHECK(0, "handshake channel: a %zd-byte message that is no blob (a bug of this test)",
                  n);
            continue;
        }
        if (h.gen != hs_gen) continue; /* for a driver instance closed since: dropped */
        ops->ep_recv(drv, peer, msg + sizeof(h), (size_t)n - sizeof(h));
        got++;
    }
    return got;
}

/* The driver's progress, then the handshake blobs that arrived (the core
 * calls ep_recv from its slow progress, never inside another driver op). */
static int progress(void)
{
    int n = ops->progress(drv);
    CHECK(n >= 0, "progress returned %d (a count of events)", n);
    return n + hs_drain();
}

static bool past(uint64_t deadline)
{
    return hc_time_ns() > deadline;
}

/* ---- out of band -------------------------------------------------------------------------- */

static bool oob_write(const void *buf, size_t len)
{
    if (nranks == 1) return true;
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = write(oob, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* Reads len bytes from the other process, progressing the driver meanwhile
 * unless told not to. */
static bool oob_read(void *buf, size_t len, bool with_progress, uint64_t timeout_ns)
{
    if (nranks == 1) return true;
    uint8_t *p = buf;
    uint64_t deadline = hc_time_ns() + timeout_ns;
    while (len) {
        struct pollfd pf = {.fd = oob, .events = POLLIN};
        int k = poll(&pf, 1, with_progress ? 0 : 10);
        if (k == 1) {
            ssize_t n = read(oob, p, len);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return false; /* the other process is gone */
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (past(deadline)) return false;
        if (with_progress && drv) progress();
    }
    return true;
}

static bool oob_sync(const char *what)
{
    if (nranks == 1) return true;
    char c = 's', got = 0;
    bool ok = oob_write(&c, 1) && oob_read(&got, 1, true, 60 * NS) && got == 's';
    CHECK(ok, "out-of-band sync (%s) with rank %d failed: it exited or hung", what, peer);
    return ok;
}

static bool oob_xchg(const void *mine, void *theirs, size_t len)
{
    bool ok = oob_write(mine, len) && oob_read(theirs, len, true, 60 * NS);
    CHECK(ok, "out-of-band exchange of %zu bytes with rank %d failed", len, peer);
    if (nranks == 1) memcpy(theirs, mine, len);
    return ok;
}

/* ---- the callbacks the driver reports through ------------------------------------------- */

#define TOK_MAGIC 0x746f6b21u
enum { TOK_FREE, TOK_PENDING, TOK_DONE };

/* One put or RMA that may complete later; its address is the cookie. */
typedef struct {
    uint32_t magic;
    int state;
    hcomm_status_t status;
    uint32_t idx;
    uint8_t *buf; /* put payload, scribbled over once put_done says it is free */
    size_t len;
} tok_t;

static void (*on_deliver)(const hc_frame_hdr_t *hdr, const void *payload);
static const void *calling; /* cookie of the put/get/write being called now */
static int pending_puts, pending_rmas;
static int n_peer_failed;
static int failed_peer;
static hcomm_status_t failed_status;
static char failed_why[256];
static uint64_t failed_ns;
static int owed_at_failure;  /* completions still owed when peer_failed came */
static int late_completions; /* completions after peer_failed */

static void cb_deliver(void *core, hc_conn_t *c, const hc_frame_hdr_t *hdr, const void *payload)
{
    CHECK(core == &core_marker, "deliver: core pointer %p is not env->core", core);
    CHECK(c == conn, "deliver: frame on connection %p, not the one connect returned (%p)",
          (void *)c, (void *)conn);
    CHECK(hdr->type < HC_FRAME_DRIVER, "deliver: driver frame type %u reached the core", hdr->type);
    CHECK(hdr->len == 0 || payload, "deliver: %u-byte frame with a NULL payload", hdr->len);
    if (on_deliver)
        on_deliver(hdr, payload);
    else
        CHECK(0, "deliver: unexpected frame (type %u, %u bytes, tag %d)", hdr->type, hdr->len,
              hdr->tag);
}

static void tok_complete(const char *what, void *cookie, hcomm_status_t status, int *pending)
{
    tok_t *t = cookie;
    CHECK(cookie != calling, "%s for cookie %p from inside the call that returned it", what,
          cookie);
    if (!t || t->magic != TOK_MAGIC) {
        CHECK(0, "%s: cookie %p was never handed to the driver", what, cookie);
        return;
    }
    CHECK(t->state == TOK_PENDING, "%s: cookie of op %u %s", what, t->idx,
          t->state == TOK_DONE ? "completed twice" : "was not in progress (its call returned OK)");
    if (n_peer_failed) late_completions++;
    if (t->state == TOK_PENDING) (*pending)--;
    t->state = TOK_DONE;
    t->status = status;
}

static void cb_put_done(void *core, hc_conn_t *c, void *cookie, hcomm_status_t status)
{
    CHECK(core == &core_marker, "put_done: core pointer %p is not env->core", core);
    CHECK(c == conn, "put_done: on connection %p, not %p", (void *)c, (void *)conn);
    tok_complete("put_done", cookie, status, &pending_puts);
    tok_t *t = cookie;
    if (t && t->magic == TOK_MAGIC && t->buf)
        memset(t->buf, 0xee, t->len); /* the driver must be done with it */
}

static void cb_rma_done(void *core, hc_conn_t *c, void *cookie, hcomm_status_t status)
{
    CHECK(core == &core_marker, "rma_done: core pointer %p is not env->core", core);
    CHECK(c == conn, "rma_done: on connection %p, not %p", (void *)c, (void *)conn);
    tok_complete("rma_done", cookie, status, &pending_rmas);
}

static void cb_peer_failed(void *core, int p, hcomm_status_t status, const char *why)
{
    CHECK(core == &core_marker, "peer_failed: core pointer %p is not env->core", core);
    n_peer_failed++;
    if (n_peer_failed > 1) return;
    failed_peer = p;
    failed_status = status;
    snprintf(failed_why, sizeof(failed_why), "%s", why ? why : "");
    failed_ns = hc_time_ns();
    owed_at_failure = pending_puts + pending_rmas;
}

/* ---- open, wireup, connect ------------------------------------------------------------------ */

static void reset_callbacks(void)
{
    on_deliver = NULL;
    calling = NULL;
    pending_puts = pending_rmas = 0;
    n_peer_failed = failed_peer = 0;
    failed_status = HCOMM_OK;
    failed_why[0] = '\0';
    owed_at_failure = late_completions = 0;
}

static void env_init(void)
{
    node_of[0] = node_of[1] = 0;
    locals[0] = 0;
    locals[1] = 1;
    env = (hc_drv_env_t){.rank = me,
                         .size = nranks,
                         .local_rank = me,
                         .local_size = nranks,
                         .local_ranks = locals,
                         .node_of_rank = node_of,
                         .node_id = node_id,
                         .job_key = job_key,
                         .bootstrap_host = "",
                         .core = &core_marker,
                         .deliver = cb_deliver,
                         .put_done = cb_put_done,
                         .rma_done = cb_rma_done,
                         .peer_failed = cb_peer_failed,
                         .ep_send = cb_ep_send,
                         .lanes = env_lanes};
}

static bool drv_open(void)
{
    hc_drv_t *d = NULL;
    hcomm_status_t st = ops->open(&env, &d);
    CHECK(st == HCOMM_OK && d, "open: %s (%s)", st_name(st), hc_error_last());
    if (st != HCOMM_OK || !d) return false;
    /* What hc_drv_select_open does after open. */
    d->ops = ops;
    d->env = &env;
    d->index = 0;
    drv = d;
    return true;
}

static void drv_close(void)
{
    if (conn) ops->disconnect(conn);
    conn = NULL;
    if (drv) ops->close(drv);
    drv = NULL;
}

static bool pair_setup(void)
{
    reset_callbacks();
    env_init();
    hs_gen++; /* both processes: blobs for an earlier instance are dropped */
    hcomm_status_t st = hc_mem_init();
    CHECK(st == HCOMM_OK, "hc_mem_init: %s", hc_error_last());
    if (st != HCOMM_OK || !drv_open()) return false;
    uint8_t mine[ADDR_CAP], theirs[ADDR_CAP];
    size_t len = ADDR_CAP;
    memset(mine, 0, sizeof(mine));
    st = ops->addr_pack(drv, mine, &len);
    CHECK(st == HCOMM_OK && len <= ADDR_CAP, "addr_pack: %s, %zu bytes (capacity %d): %s",
          st_name(st), len, ADDR_CAP, hc_error_last());
    if (st != HCOMM_OK || len > ADDR_CAP) return false;
    uint32_t l32 = (uint32_t)len, peer_len = 0;
    if (!oob_xchg(&l32, &peer_len, sizeof(l32)) || !oob_xchg(mine, theirs, ADDR_CAP)) return false;
    const void *addrs[2];
    size_t lens[2];
    addrs[me] = mine;
    lens[me] = len;
    addrs[peer] = theirs;
    lens[peer] = peer_len;
    st = ops->wireup(drv, addrs, lens);
    CHECK(st == HCOMM_OK, "wireup: %s (%s)", st_name(st), hc_error_last());
    if (st != HCOMM_OK) return false;
    hc_conn_t *c = NULL;
    st = ops->connect(drv, peer, addrs[peer], lens[peer], &c);
    CHECK(st == HCOMM_OK && c, "connect to rank %d: %s (%s)", peer, st_name(st), hc_error_last());
    if (st != HCOMM_OK || !c) return false;
    conn = c;
    return true;
}

static void pair_teardown(bool peer_alive)
{
    if (peer_alive && nranks == 2) oob_sync("before disconnect");
    on_deliver = NULL;
    uint64_t t0 = hc_time_ns();
    drv_close();
    CHECK(hc_time_ns() - t0 < 5 * NS,
          "disconnect + close took %.1f s (a drain without a deadline?)",
          (double)(hc_time_ns() - t0) * 1e-9);
    hc_mem_finalize();
    free(rx_seen);
    rx_seen = NULL;
}

/* ---- frames ------------------------------------------------------------------------------------
 */

/* The frame i from rank src: every header field and the payload vary. */
static size_t frame_cap(void)
{
    return HC_MIN(conn->max_frame, (size_t)1 << 20);
}

static void frame_make(int src, uint32_t i, hc_frame_hdr_t *h)
{
    size_t mf = frame_cap();
    static const size_t small[] = {0, 1, 7, 8, 31, 33, 64, 100, 1000, 4095, 4096, 5000, 17};
    size_t k = i % 16, len;
    if (k < HC_ARRAY_SIZE(small))
        len = small[k];
    else if ((i / 16) % 8 == 0) /* the largest sizes, every 128th frame */
        len = k == 13 ? mf / 2 : k == 14 ? mf - 1 : mf;
    else
        len = i % 97;
    len = HC_MIN(len, mf);
    *h = (hc_frame_hdr_t){.type = (uint8_t)(HC_FRAME_EAGER + (i * 5) % 8),
                          .flags = (uint8_t)(i % 3 == 0 ? HC_FRAME_FLAG_MORE : 0),
                          .lane = (uint8_t)((i / 3) % 5), /* runs of 3 frames per lane */
                          .ctx_id = 0xc0ffee00u ^ (uint32_t)src,
                          .tag = (int32_t)i,
                          .len = (uint32_t)len};
    if (i % 5) { /* every 5th frame has a = b = 0 (shm's compact frames) */
        h->a = (uint64_t)i | ((uint64_t)src << 40) | (1ull << 62);
        h->b = ~(uint64_t)i;
    }
}

static uint64_t frame_seed(int src, uint32_t i)
{
    return mix(((uint64_t)src << 32) ^ i ^ 0xf00dull);
}

static bool hdr_equal(const hc_frame_hdr_t *a, const hc_frame_hdr_t *b)
{
    return a->type == b->type && a->flags == b->flags && a->lane == b->lane &&
           a->reserved == b->reserved &&
           a->ctx_id == b->ctx_id && a->tag == b->tag && a->len == b->len && a->a == b->a &&
           a->b == b->b;
}

/* Frames of frame_make, checked field by field: each arrives once, and every
 * frame but DATA in the order it was put (with lanes, env_lanes > 1: in the
 * order it was put among the frames of its lane; a driver may carry lanes
 * on different channels). DATA frames carry their offset and may pass
 * others (tcp stripes them over its bulk sockets; the core places them by
 * hdr.b). */
static void deliver_frames(const hc_frame_hdr_t *hdr, const void *payload)
{
    if (hdr->tag < 0 || (uint32_t)hdr->tag >= rx_limit) {
        CHECK(0, "frame with tag %d from rank %d: no such frame (0..%u were sent)", hdr->tag, peer,
              rx_limit - 1);
        return;
    }
    uint32_t i = (uint32_t)hdr->tag;
    if (rx_seen[i]) {
        CHECK(0, "frame %u from rank %d arrived twice", i, peer);
        return;
    }
    hc_frame_hdr_t want;
    frame_make(peer, i, &want);
    unsigned key = env_lanes > 1 ? want.lane : 0;
    uint32_t *ord = &rx_ord[key];
    while (*ord < rx_limit) { /* skip what arrived, the DATA frames and other lanes' */
        hc_frame_hdr_t o;
        frame_make(peer, *ord, &o);
        if (!rx_seen[*ord] && o.type != HC_FRAME_DATA && (env_lanes <= 1 || o.lane == key)) break;
        (*ord)++;
    }
    CHECK(want.type == HC_FRAME_DATA || i == *ord,
          "frame %u (type %u, lane %u) from rank %d arrived before frame %u: out of order or lost",
          i, want.type, want.lane, peer, *ord);
    rx_seen[i] = 1;
    rx_next++;
    if (!hdr_equal(hdr, &want)) {
        CHECK(
            0,
            "frame %u from rank %d: header {type %u flags %u lane %u rsv %u ctx %08x tag %d len %u "
            "a %llx b %llx}, expected {type %u flags %u lane %u rsv 0 ctx %08x tag %d len %u a "
            "%llx b %llx}",
            i, peer, hdr->type, hdr->flags, hdr->lane, hdr->reserved, hdr->ctx_id, hdr->tag,
            hdr->len, (unsigned long long)hdr->a, (unsigned long long)hdr->b, want.type,
            want.flags, want.lane, want.ctx_id, want.tag, want.len, (unsigned long long)want.a,
            (unsigned long long)want.b);
        return;
    }
    size_t bad = pat_check(payload, hdr->len, frame_seed(peer, i), 0);
    CHECK(bad == hdr->len,
          "frame %u from rank %d: payload byte %zu of %u wrong (reused or overwritten before it "
          "was sent?)",
          i, peer, bad, hdr->len);
}

typedef struct {
    uint32_t next, n; /* frames put / to put */
    tok_t *toks;      /* one per frame */
    uint8_t *scratch; /* payload of NULL-cookie frames */
    uint64_t max_put_ns;
    uint64_t in_progress, again, ok;
    bool broken; /* a put failed: stop sending */
} sender_t;

static void sender_init(sender_t *s, uint32_t n)
{
    memset(s, 0, sizeof(*s));
    s->n = n;
    s->toks = calloc(n ? n : 1, sizeof(*s->toks));
    s->scratch = malloc(frame_cap() + 1);
    CHECK(s->toks && s->scratch, "out of memory");
}

static void sender_fini(sender_t *s)
{
    for (uint32_t i = 0; i < s->n; i++)
        free(s->toks[i].buf);
    free(s->toks);
    free(s->scratch);
}

/* Tries frame s->next once; returns its status. Even frames carry a cookie. */
static hcomm_status_t sender_put(sender_t *s)
{
    uint32_t i = s->next;
    hc_frame_hdr_t h;
    frame_make(me, i, &h);
    tok_t *t = &s->toks[i];
    bool cookie = i % 2 == 0;
    uint8_t *buf = s->scratch;
    if (cookie) {
        if (!t->buf) t->buf = malloc(h.len ? h.len : 1);
        buf = t->buf;
        *t = (tok_t){.magic = TOK_MAGIC, .state = TOK_PENDING, .idx = i, .buf = buf, .len = h.len};
    }
    pat_fill(buf, h.len, frame_seed(me, i), 0);
    const void *payload = h.len ? buf : (i % 4 ? NULL : buf); /* 0 bytes: NULL or not */
    calling = cookie ? t : NULL;
    uint64_t t0 = hc_time_ns();
    hcomm_status_t st = ops->put(conn, &h, payload, cookie ? t : NULL);
    uint64_t dt = hc_time_ns() - t0;
    calling = NULL;
    s->max_put_ns = HC_MAX(s->max_put_ns, dt);
    CHECK(dt < PUT_BLOCK_NS, "put of frame %u (%u bytes) took %.2f s: put must not block", i, h.len,
          (double)dt * 1e-9);
    switch (st) {
    case HCOMM_OK:
        s->ok++;
        if (cookie) t->state = TOK_DONE;
        memset(buf, 0xdd, h.len); /* OK: the payload may be reused at once */
        s->next++;
        break;
    case HCOMM_IN_PROGRESS:
        CHECK(cookie, "put of frame %u without a cookie returned IN_PROGRESS (must copy or refuse)",
              i);
        if (cookie && t->state == TOK_PENDING) pending_puts++;
        s->in_progress++;
        s->next++;
        break;
    case HCOMM_ERR_AGAIN:
        if (cookie) t->state = TOK_FREE;
        s->again++;
        break;
    default:
        CHECK(0, "put of frame %u (%u bytes, type %u) to rank %d: %s (%s)", i, h.len, h.type, peer,
              st_name(st), hc_error_last());
        if (cookie) t->state = TOK_FREE;
        s->broken = true;
    }
    return st;
}

/* Sends s->n frames while receiving as many; true when everything arrived
 * and completed before the deadline. */
static bool exchange(sender_t *s, uint32_t n_rx, uint64_t deadline)
{
    rx_next = 0;
    memset(rx_ord, 0, sizeof(rx_ord));
    rx_limit = n_rx;
    free(rx_seen);
    rx_seen = calloc(n_rx ? n_rx : 1, 1);
    on_deliver = deliver_frames;
    while (!s->broken && (s->next < s->n || pending_puts > 0 || rx_next < rx_limit)) {
        for (int k = 0; k < 16 && s->next < s->n && !s->broken; k++)
            if (sender_put(s) == HCOMM_ERR_AGAIN) break;
        progress();
        if (past(deadline)) {
            CHECK(0, "deadline: %u of %u frames put, %d put_done owed, %u of %u frames received",
                  s->next, s->n, pending_puts, rx_next, rx_limit);
            return false;
        }
    }
    for (uint32_t i = 0; !s->broken && i < rx_limit; i++)
        CHECK(rx_seen[i], "frame %u from rank %d never arrived", i, peer);
    return !s->broken;
}

/* ---- cases --------------------------------------------------------------------------------- */

static void case_ops_table(void)
{
    CHECK(ops->name && !strcmp(ops->name, drv_name), "ops->name \"%s\"", ops->name);
    CHECK(ops->scope == HC_DRV_SCOPE_SELF || ops->scope == HC_DRV_SCOPE_NODE ||
              ops->scope == HC_DRV_SCOPE_NET,
          "scope %d", ops->scope);
    CHECK((ops->caps & ~(uint32_t)HC_DRV_CAP_USER_REG) == 0, "unknown caps bits %#x", ops->caps);
    const void *fns[] = {ops->probe,       ops->open,         ops->addr_pack,  ops->wireup,
                         ops->connect,     ops->put,          ops->get,        ops->progress,
                         ops->mem_reg,     ops->mem_dereg,    ops->shared_get, ops->disconnect,
                         ops->close,       ops->shared_put,   ops->write,      ops->rkey_pack,
                         ops->rkey_unpack, ops->rkey_release, ops->rkey_ptr,   ops->ep_recv};
    for (size_t i = 0; i < HC_ARRAY_SIZE(fns); i++)
        CHECK(fns[i], "op %zu of the table is NULL after registration", i);
    CHECK(hc_drv_find(drv_name) == ops, "hc_drv_find(\"%s\") is not this table", drv_name);
}

static void case_open_close(void)
{
    env_init();
    for (int round = 0; round < 2; round++) {
        if (!drv_open()) return;
        uint8_t small[4] = {0xab, 0xab, 0xab, 0xab};
        size_t len = 4;
        hcomm_status_t st = ops->addr_pack(drv, small, &len);
        CHECK(st != HCOMM_OK || len <= 4,
              "addr_pack with 4 bytes of room answered OK with %zu bytes", len);
        ops->close(drv);
        drv = NULL;
    }
}

static void case_connect(void)
{
    CHECK(conn->ops == ops, "conn->ops is not the driver's table");
    CHECK(conn->drv == drv, "conn->drv %p, expected %p", (void *)conn->drv, (void *)drv);
    CHECK(conn->peer == peer, "conn->peer %d, expected %d", conn->peer, peer);
    CHECK((conn->caps & ~(uint32_t)(HC_CONN_CAP_GET | HC_CONN_CAP_WRITE | HC_CONN_CAP_RKEY_PTR)) ==
              0,
          "unknown conn caps bits %#x", conn->caps);
    CHECK(conn->max_frame >= 64, "max_frame %zu (the core needs room for control payloads)",
          conn->max_frame);
    CHECK(conn->max_frame <= UINT32_MAX, "max_frame %zu does not fit hdr.len", conn->max_frame);
    CHECK(conn->eager_max > 0, "eager_max 0");
    CHECK(conn->max_frame >= HC_FRAME_CTRL_MAX, "max_frame %zu < HC_FRAME_CTRL_MAX",
          conn->max_frame);
    printf("rank %d: %s connection: max_frame %zu, eager_max %zu, caps%s%s%s, driver caps%s\n", me,
           drv_name, conn->max_frame, conn->eager_max, conn->caps & HC_CONN_CAP_GET ? " GET" : "",
           conn->caps & HC_CONN_CAP_WRITE ? " WRITE" : "",
           conn->caps & HC_CONN_CAP_RKEY_PTR ? " RKEY_PTR" : "",
           ops->caps & HC_DRV_CAP_USER_REG ? " USER_REG" : " none");
}

static void case_put_order(void)
{
    sender_t s;
    uint32_t n = 2000;
    sender_init(&s, n);
    exchange(&s, n, hc_time_ns() + 60 * NS);
    for (uint32_t i = 0; i < s.next; i++)
        CHECK(s.toks[i].magic != TOK_MAGIC || s.toks[i].state != TOK_PENDING,
              "frame %u: no put_done for its IN_PROGRESS", i);
    for (uint32_t i = 0; i < s.next; i++)
        CHECK(s.toks[i].magic != TOK_MAGIC || s.toks[i].status == HCOMM_OK,
              "frame %u: put_done with %s", i, st_name(s.toks[i].status));
    printf("rank %d: put_order: %u frames each way, %llu OK, %llu IN_PROGRESS, %llu ERR_AGAIN, "
           "slowest put %.1f us\n",
           me, n, (unsigned long long)s.ok, (unsigned long long)s.in_progress,
           (unsigned long long)s.again, (double)s.max_put_ns * 1e-3);
    sender_fini(&s);
}

/* put_order with the core's lanes on (env.lanes = HC_FRAME_LANES): the same
 * frames, of 5 lanes; each lane's frames but DATA must arrive in put order,
 * lanes may pass each other (tcp carries them on different sockets). */
static void case_put_lanes(void)
{
    case_put_order();
}

/* Rank 1's receive side of case_credit. */
static void deliver_credit(const hc_frame_hdr_t *hdr, const void *payload)
{
    CHECK(hdr->type == HC_FRAME_EAGER && hdr->tag == (int32_t)rx_next && hdr->a == rx_next + 1,
          "frame %u: type %u tag %d a %llu (out of order or lost)", rx_next, hdr->type, hdr->tag,
          (unsigned long long)hdr->a);
    size_t bad = pat_check(payload, hdr->len, 0xc4ed17, 0);
    CHECK(bad == hdr->len, "frame %u: payload byte %zu wrong", rx_next, bad);
    rx_next++;
}

/* The receiver (rank 1) does not progress until rank 0 saw sustained
 * ERR_AGAIN; then every frame must arrive, in order. */
static void case_credit(void)
{
    if (nranks == 1) {
        skip_why = "the self driver delivers inside put: no credit to run out of";
        return;
    }
    /* Traffic both ways first: a driver that hand-shakes (env->ep_send)
     * answers ERR_AGAIN until the peer's ep_recv ran, which a stalled
     * receiver never does, and that is no credit running out. */
    sender_t warm;
    sender_init(&warm, 64);
    exchange(&warm, 64, hc_time_ns() + 30 * NS);
    sender_fini(&warm);
    /* Rank 0 starts once it read the sync byte, while rank 1 may still
     * progress in its sync. */
    rx_next = 0;
    on_deliver = me == 1 ? deliver_credit : NULL;
    if (!oob_sync("warmed up")) return;
    const uint64_t limit = 512ull << 20;
    size_t flen = HC_MIN(conn->max_frame, (size_t)64 << 10);
    uint32_t n = 0;
    if (me == 1) {
        CHECK(oob_read(&n, sizeof(n), false, 60 * NS), "no word from rank 0");
        rx_limit = n;
        uint64_t deadline = hc_time_ns() + 60 * NS;
        while (rx_next < rx_limit && !past(deadline) && !n_peer_failed) {
            progress();
        }
        CHECK(rx_next == rx_limit, "received %u of %u frames after the stall", rx_next, n);
        CHECK(!n_peer_failed, "peer_failed during the stall: %s", failed_why);
        return;
    }
    uint8_t *payload = malloc(flen);
    pat_fill(payload, flen, 0xc4ed17, 0);
    uint32_t cap = (uint32_t)(limit / flen) + 2;
    tok_t *toks = calloc(cap, sizeof(*toks));
    uint64_t accepted = 0, t_end = hc_time_ns() + 30 * NS, max_ns = 0;
    int streak = 0;
    bool full = false;
    while (n < cap && !past(t_end)) {
        hc_frame_hdr_t h = {.type = HC_FRAME_EAGER,
                            .ctx_id = 7,
                            .tag = (int32_t)n,
                            .len = (uint32_t)flen,
                            .a = n + 1};
        tok_t *t = &toks[n];
        *t = (tok_t){.magic = TOK_MAGIC, .state = TOK_PENDING, .idx = n};
        calling = t;
        uint64_t t0 = hc_time_ns();
        hcomm_status_t st = ops->put(conn, &h, payload, t);
        max_ns = HC_MAX(max_ns, hc_time_ns() - t0);
        calling = NULL;
        if (st == HCOMM_OK || st == HCOMM_IN_PROGRESS) {
            if (st == HCOMM_IN_PROGRESS)
                pending_puts++;
            else
                t->state = TOK_DONE;
            n++;
            accepted += flen;
            streak = 0;
            if (accepted >= limit) break;
            continue;
        }
        t->state = TOK_FREE;
        if (st != HCOMM_ERR_AGAIN) {
            CHECK(0, "put %u toward a stalled receiver: %s (%s)", n, st_name(st), hc_error_last());
            break;
        }
        progress();
        if (++streak >= 500) {
            full = true;
            break;
        }
    }
    CHECK(full,
          "no sustained ERR_AGAIN toward a receiver that does not progress: %llu MiB accepted in "
          "%u frames (credit must run out)",
          (unsigned long long)(accepted >> 20), n);
    CHECK(max_ns < PUT_BLOCK_NS, "a put toward a stalled receiver took %.2f s (must not block)",
          (double)max_ns * 1e-9);
    printf("rank 0: credit: ERR_AGAIN after %u frames of %zu bytes (%.1f MiB)\n", n, flen,
           (double)accepted / (1 << 20));
    oob_write(&n, sizeof(n));
    uint64_t deadline = hc_time_ns() + 60 * NS;
    while (pending_puts > 0 && !past(deadline) && !n_peer_failed)
        progress();
    CHECK(pending_puts == 0, "%d put_done still owed after the receiver ran", pending_puts);
    free(toks);
    free(payload);
}

/* ---- RMA ----------------------------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t len;     /* mapped */
    size_t reg_len; /* registered (a prefix) */
    int fd;
    uint64_t key;
    bool registered;
    hc_mem_desc_t desc;
} region_t;

typedef struct {
    uint64_t addr, len;
    uint32_t rkey_len;
    uint8_t rkey[HC_RKEY_MAX];
} remote_t;

static bool user_reg(void)
{
    return ops->caps & HC_DRV_CAP_USER_REG;
}

static bool region_alloc(region_t *r, size_t len, size_t reg_len, const char *name)
{
    memset(r, 0, sizeof(*r));
    r->fd = memfd_create(name, MFD_CLOEXEC);
    if (r->fd < 0 || ftruncate(r->fd, (off_t)len) != 0) {
        CHECK(0, "memfd for %s: %s", name, strerror(errno));
        return false;
    }
    r->p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (r->p == MAP_FAILED) {
        CHECK(0, "mmap %s: %s", name, strerror(errno));
        return false;
    }
    r->len = len;
    r->reg_len = reg_len;
    r->desc = (hc_mem_desc_t){.addr = r->p,
                              .len = reg_len,
                              .page_size = 4096,
                              .fd = r->fd,
                              .fd_offset = 0,
                              .iovas = NULL,
                              .numa_node = -1,
                              .user = true};
    hcomm_status_t st = ops->mem_reg(drv, &r->desc, &r->key);
    CHECK(st == HCOMM_OK, "mem_reg of %s (%zu bytes): %s (%s)", name, reg_len, st_name(st),
          hc_error_last());
    CHECK(!user_reg() || r->key != 0, "mem_reg of %s: key 0 from a driver with HC_DRV_CAP_USER_REG",
          name);
    r->registered = st == HCOMM_OK;
    return r->registered;
}

static void region_dereg(region_t *r)
{
    if (r->registered) ops->mem_dereg(drv, r->key);
    r->registered = false;
}

static void region_free(region_t *r)
{
    region_dereg(r);
    if (r->p && r->p != MAP_FAILED) munmap(r->p, r->len);
    if (r->fd >= 0) close(r->fd);
    memset(r, 0, sizeof(*r));
    r->fd = -1;
}

/* Packs a key for [r->p + off, +len) of r into x. */
static bool region_pack(region_t *r, size_t off, size_t len, remote_t *x)
{
    hc_mem_desc_t d = r->desc;
    d.addr = r->p + off;
    d.len = len;
    d.fd_offset = off;
    uint8_t buf[HC_RKEY_MAX + 16];
    memset(buf, 0x77, sizeof(buf));
    size_t blen = HC_RKEY_MAX;
    hcomm_status_t st = ops->rkey_pack(drv, r->key, &d, buf, &blen);
    CHECK(st == HCOMM_OK, "rkey_pack: %s (%s)", st_name(st), hc_error_last());
    CHECK(blen <= HC_RKEY_MAX, "rkey_pack used %zu bytes, more than HC_RKEY_MAX", blen);
    CHECK(buf[HC_RKEY_MAX] == 0x77, "rkey_pack wrote past the %d bytes of room", HC_RKEY_MAX);
    CHECK(!user_reg() || blen > 0,
          "rkey_pack: an empty key from a driver with HC_DRV_CAP_USER_REG");
    memset(x, 0, sizeof(*x));
    x->addr = (uint64_t)(uintptr_t)d.addr;
    x->len = len;
    x->rkey_len = (uint32_t)HC_MIN(blen, (size_t)HC_RKEY_MAX);
    memcpy(x->rkey, buf, x->rkey_len);
    return st == HCOMM_OK;
}

static hc_rkey_t *remote_unpack(const remote_t *x)
{
    hc_rkey_t *k = (hc_rkey_t *)(uintptr_t)1;
    hcomm_status_t st = ops->rkey_unpack(conn, x->rkey, x->rkey_len, &k);
    CHECK(st == HCOMM_OK, "rkey_unpack of a %u-byte key: %s (%s)", x->rkey_len, st_name(st),
          hc_error_last());
    if (st != HCOMM_OK) return NULL;
    CHECK(x->rkey_len > 0 || k == NULL, "rkey_unpack of a 0-byte key did not give NULL");
    CHECK(x->rkey_len == 0 || k != NULL, "rkey_unpack of a %u-byte key gave NULL", x->rkey_len);
    return k;
}

static tok_t *rma_toks;
static uint32_t rma_ntoks;

/* One transfer; with tok: a cookie, waited for when IN_PROGRESS unless
 * nowait. Returns the call's status (AGAIN retried) or, after IN_PROGRESS
 * with waiting, the completion's. */
static hcomm_status_t rma_do(bool write, void *local, uint64_t lkey, uint64_t raddr,
                             const hc_rkey_t *rkey, size_t len, tok_t *tok, bool nowait)
{
    hc_rma_t rma = {.local = local,
                    .len = len,
                    .lkey = lkey,
                    .remote_addr = raddr,
                    .rkey = rkey,
                    .cookie = tok};
    uint64_t deadline = hc_time_ns() + 20 * NS;
    hcomm_status_t st;
    for (;;) {
        if (tok) *tok = (tok_t){.magic = TOK_MAGIC, .state = TOK_PENDING, .idx = tok->idx};
        calling = tok;
        st = write ? ops->write(conn, &rma) : ops->get(conn, &rma);
        calling = NULL;
        if (st != HCOMM_ERR_AGAIN || past(deadline)) break;
        progress();
    }
    if (st == HCOMM_IN_PROGRESS) {
        CHECK(
            tok,
            "%s of %zu bytes without a cookie returned IN_PROGRESS (must finish before returning)",
            write ? "write" : "get", len);
        if (!tok) return HCOMM_ERR_INTERNAL;
        pending_rmas++;
        if (nowait) return st;
        while (tok->state == TOK_PENDING && !past(deadline))
            progress();
        CHECK(tok->state == TOK_DONE, "%s of %zu bytes: no rma_done within 20 s",
              write ? "write" : "get", len);
        return tok->state == TOK_DONE ? tok->status : HCOMM_ERR_TIMEOUT;
    }
    if (tok) tok->state = st == HCOMM_OK ? TOK_DONE : TOK_FREE;
    return st;
}

/* A transfer that must be refused: a failed status, or IN_PROGRESS and a
 * failed completion. A synchronous refusal names the key. */
static void rma_refused(bool write, void *local, uint64_t lkey, uint64_t raddr,
                        const hc_rkey_t *rkey, size_t len, const char *what)
{
    tok_t tok = {.idx = 9999};
    hc_error(HCOMM_OK, "%s", ""); /* clear the last message */
    hcomm_status_t st;
    hc_rma_t rma = {.local = local,
                    .len = len,
                    .lkey = lkey,
                    .remote_addr = raddr,
                    .rkey = rkey,
                    .cookie = NULL};
    calling = NULL;
    st = write ? ops->write(conn, &rma) : ops->get(conn, &rma);
    if (st == HCOMM_OK || st == HCOMM_IN_PROGRESS || st == HCOMM_ERR_AGAIN) {
        CHECK(0, "%s (%s, no cookie) answered %s: a driver with HC_DRV_CAP_USER_REG must refuse it",
              what, write ? "write" : "get", st_name(st));
        return;
    }
    CHECK(strstr(hc_error_last(), "key") != NULL,
          "%s refused with %s, but the message does not name the key: \"%s\"", what, st_name(st),
          hc_error_last());
    /* With a cookie the refusal may come late instead. */
    st = rma_do(write, local, lkey, raddr, rkey, len, &tok, false);
    CHECK(st != HCOMM_OK, "%s (%s, with a cookie) succeeded: it must be refused", what,
          write ? "write" : "get");
}

static void case_rma(void)
{
    uint32_t want = HC_CONN_CAP_GET | HC_CONN_CAP_WRITE;
    if (!(conn->caps & want)) {
        skip_why = "the connection has neither HC_CONN_CAP_GET nor HC_CONN_CAP_WRITE";
        return;
    }
    bool can_get = conn->caps & HC_CONN_CAP_GET, can_write = conn->caps & HC_CONN_CAP_WRITE;
    const size_t big = (4u << 20) + 4096 * 3 + 123;
    region_t src, dst, win, tmp;
    memset(&tmp, 0, sizeof(tmp));
    tmp.fd = -1;
    /* dst: only its first half is registered (the other half is a local
     * range outside the lkey, still mapped). */
    if (!region_alloc(&src, big, big, "conf-src") ||
        !region_alloc(&dst, 2 * big, big, "conf-dst") ||
        !region_alloc(&win, big, big, "conf-win") || !region_alloc(&tmp, 65536, 65536, "conf-tmp"))
        goto out;
    uint64_t my_seed = mix(0x5eed0000ull + (uint64_t)me), peer_seed = mix(0x5eed0000ull + peer);
    pat_fill(src.p, big, my_seed, 0);
    pat_fill(tmp.p, 65536, my_seed ^ 1, 0);
    remote_t mine[4], theirs[4]; /* src full, src first half, win, tmp */
    if (!region_pack(&src, 0, big, &mine[0]) || !region_pack(&src, 0, big / 2, &mine[1]) ||
        !region_pack(&win, 0, big, &mine[2]) || !region_pack(&tmp, 0, 65536, &mine[3]))
        goto out;
    if (!oob_xchg(mine, theirs, sizeof(mine))) goto out;
    hc_rkey_t *rk[4] = {0};
    for (int i = 0; i < 4; i++)
        rk[i] = remote_unpack(&theirs[i]);
    uint64_t rsrc = theirs[0].addr, rwin = theirs[2].addr, rtmp = theirs[3].addr;

    /* Single transfers of assorted sizes and offsets, both ways of completing. */
    static const size_t offs[][2] = {{0, 1},
                                     {1, 4095},
                                     {4096, 4096},
                                     {777, 65536},
                                     {12345, (1u << 20) + 3},
                                     {0, (4u << 20) + 123}};
    uint32_t async_seen = 0;
    tok_t one = {.idx = 1};
    for (size_t i = 0; can_get && i < HC_ARRAY_SIZE(offs); i++) {
        for (int withc = 0; withc < 2; withc++) {
            size_t off = offs[i][0], len = offs[i][1];
            uint8_t *local = dst.p + (off ^ 64) % 4096;
            memset(local, 0, len);
            hcomm_status_t st =
                rma_do(false, local, dst.key, rsrc + off, rk[0], len, withc ? &one : NULL, false);
            CHECK(st == HCOMM_OK, "get of %zu bytes at offset %zu (%s cookie): %s (%s)", len, off,
                  withc ? "with a" : "no", st_name(st), hc_error_last());
            size_t bad = pat_check(local, len, peer_seed, off);
            CHECK(bad == len, "get of %zu bytes at offset %zu: byte %zu wrong", len, off, bad);
        }
    }
    /* 256 gets outstanding at once, at unaligned offsets. */
    const uint32_t nout = 256;
    rma_toks = calloc(nout, sizeof(*rma_toks));
    rma_ntoks = nout;
    for (uint32_t k = 0; can_get && k < nout; k++) {
        size_t off = (size_t)k * 4096 + k, len = 4000 + k;
        rma_toks[k].idx = k;
        memset(dst.p + off, 0, len);
        hcomm_status_t st =
            rma_do(false, dst.p + off, dst.key, rsrc + off, rk[0], len, &rma_toks[k], true);
        CHECK(st == HCOMM_OK || st == HCOMM_IN_PROGRESS, "get %u of 256 outstanding: %s (%s)", k,
              st_name(st), hc_error_last());
        async_seen += st == HCOMM_IN_PROGRESS;
    }
    uint64_t deadline = hc_time_ns() + 30 * NS;
    while (pending_rmas > 0 && !past(deadline))
        progress();
    CHECK(pending_rmas == 0, "%d of 256 outstanding gets never got rma_done", pending_rmas);
    for (uint32_t k = 0; can_get && k < nout; k++) {
        size_t off = (size_t)k * 4096 + k, len = 4000 + k;
        CHECK(rma_toks[k].state == TOK_DONE && rma_toks[k].status == HCOMM_OK,
              "outstanding get %u: %s, status %s", k,
              rma_toks[k].state == TOK_DONE ? "done" : "not done", st_name(rma_toks[k].status));
        size_t bad = pat_check(dst.p + off, len, peer_seed, off);
        CHECK(bad == len, "outstanding get %u (%zu bytes at %zu): byte %zu wrong", k, len, off,
              bad);
    }
    /* Writes: my src pattern into the peer's window, in pieces, with and
     * without cookies, the last 64 pieces outstanding together. */
    if (can_write) {
        memset(win.p, 0, big);
        oob_sync("window cleared");
        size_t cuts[] = {0, 1, 4096, 8197, 65536 + 3, (1u << 20) + 11, big};
        for (size_t i = 0; i + 1 < HC_ARRAY_SIZE(cuts) - 1; i++) {
            size_t off = cuts[i], len = cuts[i + 1] - cuts[i];
            hcomm_status_t st = rma_do(true, src.p + off, src.key, rwin + off, rk[2], len,
                                       i % 2 ? &one : NULL, false);
            CHECK(st == HCOMM_OK, "write of %zu bytes at offset %zu: %s (%s)", len, off,
                  st_name(st), hc_error_last());
        }
        size_t rest = cuts[HC_ARRAY_SIZE(cuts) - 2], piece = (big - rest + 63) / 64;
        for (uint32_t k = 0; k < 64 && rest + (size_t)k * piece < big; k++) {
            size_t off = rest + (size_t)k * piece, len = HC_MIN(piece, big - off);
            rma_toks[k] = (tok_t){.idx = k};
            hcomm_status_t st =
                rma_do(true, src.p + off, src.key, rwin + off, rk[2], len, &rma_toks[k], true);
            CHECK(st == HCOMM_OK || st == HCOMM_IN_PROGRESS, "outstanding write %u: %s (%s)", k,
                  st_name(st), hc_error_last());
            async_seen += st == HCOMM_IN_PROGRESS;
        }
        deadline = hc_time_ns() + 30 * NS;
        while (pending_rmas > 0 && !past(deadline))
            progress();
        CHECK(pending_rmas == 0, "%d outstanding writes never got rma_done", pending_rmas);
        oob_sync("writes done");
        size_t bad = pat_check(win.p, big, peer_seed, 0);
        CHECK(bad == big, "the window rank %d wrote: byte %zu of %zu wrong", peer, bad, big);
    }
    /* rkey_ptr maps the peer's memory, or is unsupported. */
    void *ptr = NULL;
    hcomm_status_t st = ops->rkey_ptr(conn, rk[0], rsrc + 100, 4096, &ptr);
    if (conn->caps & HC_CONN_CAP_RKEY_PTR) {
        CHECK(st == HCOMM_OK && ptr, "rkey_ptr with HC_CONN_CAP_RKEY_PTR: %s (%s)", st_name(st),
              hc_error_last());
        if (st == HCOMM_OK && ptr)
            CHECK(pat_check(ptr, 4096, peer_seed, 100) == 4096,
                  "rkey_ptr: the mapped bytes are not the peer's");
    } else {
        CHECK(st == HCOMM_ERR_UNSUPPORTED, "rkey_ptr without HC_CONN_CAP_RKEY_PTR answered %s",
              st_name(st));
    }
    /* Keys are enforced by drivers that need them. */
    if (user_reg()) {
        bool w = !can_get;
        uint8_t *l = dst.p + 64;
        uint64_t r = w ? rwin : rsrc;
        const hc_rkey_t *k = w ? rk[2] : rk[0];
        rma_refused(w, l, 0, r, k, 4096, "a transfer with lkey 0");
        rma_refused(w, dst.p + big - 8, dst.key, r, k, 16,
                    "a transfer whose local range leaves its registration");
        rma_refused(w, l, dst.key, r, NULL, 4096, "a transfer without an rkey");
        if (!w)
            rma_refused(false, l, dst.key, rsrc + big / 2 - 8, rk[1], 16,
                        "a get past the end of its rkey");
        /* The peer deregisters tmp; its old key must no longer reach it. */
        oob_sync("before the peer deregisters");
        region_dereg(&tmp);
        oob_sync("after the peer deregistered");
        rma_refused(w, l, dst.key, rtmp, rk[3], 4096,
                    "a transfer with a key its owner deregistered");
        oob_sync("stale key checked");
    }
    printf("rank %d: rma: %s%s, %u transfers completed late (rma_done)\n", me, can_get ? "get" : "",
           can_write ? " write" : "", async_seen);
    for (int i = 0; i < 4; i++)
        if (rk[i]) ops->rkey_release(conn, rk[i]);
out:
    oob_sync("rma done");
    free(rma_toks);
    rma_toks = NULL;
    region_free(&src);
    region_free(&dst);
    region_free(&win);
    region_free(&tmp);
}

static void case_mem_reg(void)
{
    const uint32_t n = 2048;
    size_t len = (size_t)n * 4096;
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint64_t *keys = calloc(n, sizeof(*keys));
    if (p == MAP_FAILED || !keys) {
        CHECK(0, "out of memory");
        return;
    }
    for (int round = 0; round < 2; round++) {
        for (uint32_t i = round; i < n; i += 1 + (uint32_t)round) {
            hc_mem_desc_t d = {.addr = p + (size_t)i * 4096,
                               .len = 4096 - (i % 7),
                               .page_size = 4096,
                               .fd = -1,
                               .numa_node = -1,
                               .user = true};
            hcomm_status_t st = ops->mem_reg(drv, &d, &keys[i]);
            CHECK(st == HCOMM_OK, "mem_reg %u: %s (%s)", i, st_name(st), hc_error_last());
            if (st != HCOMM_OK) keys[i] = 0;
            CHECK(!user_reg() || keys[i], "mem_reg %u: key 0", i);
        }
        if (user_reg()) {
            /* Distinct: sort a copy. */
            uint64_t *s = malloc(n * sizeof(*s));
            memcpy(s, keys, n * sizeof(*s));
            for (uint32_t i = 1; i < n; i++)
                for (uint32_t j = i; j > 0 && s[j - 1] > s[j]; j--) {
                    uint64_t t = s[j];
                    s[j] = s[j - 1];
                    s[j - 1] = t;
                }
            for (uint32_t i = 1; i < n; i++)
                CHECK(!s[i] || s[i] != s[i - 1], "two live registrations share key %016llx",
                      (unsigned long long)s[i]);
            free(s);
        }
        /* Round 0 registers all, drops the odd ones; round 1 re-registers them. */
        for (uint32_t i = 1; round == 0 && i < n; i += 2) {
            ops->mem_dereg(drv, keys[i]);
            keys[i] = 0;
        }
    }
    for (uint32_t i = 0; i < n; i++)
        if (keys[i]) ops->mem_dereg(drv, keys[i]);
    free(keys);
    munmap(p, len);
}

static void case_close_held(void)
{
    enum { N = 3 };
    uint8_t *p = mmap(NULL, N * 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        CHECK(0, "out of memory");
        return;
    }
    for (int i = 0; i < N; i++) {
        hc_mem_desc_t d = {.addr = p + (size_t)i * 65536,
                           .len = 65536 - 64 * (size_t)i,
                           .page_size = 4096,
                           .fd = -1,
                           .numa_node = -1,
                           .user = true};
        uint64_t key = 0;
        hcomm_status_t st = ops->mem_reg(drv, &d, &key);
        CHECK(st == HCOMM_OK, "mem_reg %d: %s (%s)", i, st_name(st), hc_error_last());
    }
    oob_sync("before close");
    /* What close logs, read back: stderr to a file meanwhile. */
    FILE *log = tmpfile();
    int saved = dup(STDERR_FILENO);
    CHECK(log && saved >= 0, "tmpfile/dup: %s", strerror(errno));
    if (!log || saved < 0) return;
    fflush(stderr);
    dup2(fileno(log), STDERR_FILENO);
    drv_close();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(log);
    char line[1024];
    while (fgets(line, sizeof(line), log)) {
        fputs(line, stderr);
        CHECK(!strstr(line, "] warn: ") && !strstr(line, "] error: "),
              "close with registrations held complained: %s", line);
    }
    fclose(log);
    munmap(p, N * 65536);
}

/* Keeps frames going to the peer (cookies on even ones) until peer_failed;
 * returns whether it came before the deadline. */
static bool send_until_failed(sender_t *s, uint64_t deadline)
{
    while (!n_peer_failed && !past(deadline)) {
        if (s->next < s->n && !s->broken) sender_put(s);
        progress();
    }
    return n_peer_failed > 0;
}

static void check_failure_report(const char *what, uint64_t t0)
{
    CHECK(n_peer_failed == 1, "%s: peer_failed reported %d times, expected once", what,
          n_peer_failed);
    if (!n_peer_failed) return;
    CHECK(failed_peer == peer, "%s: peer_failed names rank %d, expected %d", what, failed_peer,
          peer);
    CHECK(failed_status < 0, "%s: peer_failed with status %s", what, st_name(failed_status));
    CHECK(failed_why[0], "%s: peer_failed gave no reason", what);
    CHECK(failed_ns >= t0, "%s: peer_failed came before the fault (a bug of this test)", what);
    CHECK(failed_ns < t0 + 10 * NS, "%s: peer_failed after %.2f s (expected within 10 s)", what,
          (double)(failed_ns - t0) * 1e-9);
    CHECK(owed_at_failure == 0,
          "%s: %d completions still owed when peer_failed came (completions must come first: the "
          "core frees requests on failure)",
          what, owed_at_failure);
    CHECK(pending_puts + pending_rmas == 0, "%s: %d completions never came", what,
          pending_puts + pending_rmas);
    CHECK(late_completions == 0, "%s: %d completions after peer_failed", what, late_completions);
    printf("rank %d: %s: peer_failed after %.2f s: %s (%s)\n", me, what,
           (double)(failed_ns - t0) * 1e-9, st_name(failed_status), failed_why);
}

/* After a failure puts and gets fail (not OK, not a retry forever). */
static void check_dead_conn(const char *what)
{
    hc_frame_hdr_t h = {.type = HC_FRAME_EAGER, .len = 8};
    uint64_t x = 42;
    hcomm_status_t st = ops->put(conn, &h, &x, NULL);
    CHECK(st < 0 && st != HCOMM_ERR_AGAIN, "%s: put after peer_failed answered %s", what,
          st_name(st));
    if (conn->caps & HC_CONN_CAP_GET) {
        hc_rma_t rma = {.local = &x, .len = 8, .remote_addr = 4096};
        st = ops->get(conn, &rma);
        CHECK(st < 0 && st != HCOMM_ERR_AGAIN, "%s: get after peer_failed answered %s", what,
              st_name(st));
    }
}

static void deliver_count(const hc_frame_hdr_t *hdr, const void *payload)
{
    (void)hdr;
    (void)payload;
    rx_next++;
}

/* A peer that unmaps a buffer it advertised (it abandoned the transfer:
 * its operation failed and it freed its memory) must surface as that peer
 * failing, not as an I/O error: the core names the rank and the collective
 * layer passes PEER_FAILED on (coll_topo_2x2_hier_peer_death saw ERR_IO).
 * Drivers that read a live peer's memory without keys (shm's CMA); with
 * HC_DRV_CAP_USER_REG the deregistered-key checks of "rma" cover it. */
static void case_abandoned(void)
{
    if (!(conn->caps & HC_CONN_CAP_GET) || (ops->caps & HC_DRV_CAP_USER_REG) || nranks == 1) {
        skip_why = "only for keyless GET between two processes (shm's CMA)";
        return;
    }
    size_t len = 65536;
    uint8_t *mine = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *local = malloc(len);
    CHECK(mine != MAP_FAILED && local, "mmap/malloc of %zu bytes", len);
    if (mine == MAP_FAILED || !local) {
        free(local);
        return;
    }
    memset(mine, 0x5a, len);
    uint64_t addr = (uint64_t)(uintptr_t)mine, theirs = 0;
    if (!oob_xchg(&addr, &theirs, sizeof(addr)) || !oob_sync("both mapped")) goto out;
    munmap(mine, len);
    mine = MAP_FAILED;
    if (!oob_sync("both unmapped")) goto out;
    hcomm_status_t st = rma_do(false, local, 0, theirs, NULL, len, NULL, false);
    CHECK(st == HCOMM_ERR_PEER_FAILED,
          "get from rank %d's unmapped buffer answered %s (%s), expected ERR_PEER_FAILED", peer,
          st_name(st), hc_error_last());
    CHECK(st == HCOMM_OK || strstr(hc_error_last(), "rank"),
          "the error does not name the rank: %s", hc_error_last());
    (void)oob_sync("after the get");
out:
    if (mine != MAP_FAILED) munmap(mine, len);
    free(local);
}

static void case_killed(void)
{
    if (ops->scope != HC_DRV_SCOPE_NET) {
        skip_why = "node and self drivers leave a dead peer to the core (pidfd); only network "
                   "drivers report it";
        return;
    }
    child_signal = SIGKILL;
    sender_t s;
    sender_init(&s, 100000);
    /* Traffic both ways first: each side has its sockets/queues up. */
    sender_t warm;
    sender_init(&warm, 64);
    exchange(&warm, 64, hc_time_ns() + 30 * NS);
    sender_fini(&warm);
    uint64_t t0 = hc_time_ns(); /* rank 1 dies once it read this rank's sync byte */
    oob_sync("warmed up");
    on_deliver = NULL;
    if (me == 1) {
        char k = 'K';
        oob_write(&k, 1);
        raise(SIGKILL);
        _exit(3); /* not reached */
    }
    char k = 0;
    CHECK(oob_read(&k, 1, true, 30 * NS) && k == 'K', "rank 1 did not announce its death");
    on_deliver = deliver_count; /* nothing should come; anything is tolerated */
    bool got = send_until_failed(&s, t0 + 10 * NS);
    CHECK(got,
          "no peer_failed within 10 s of rank 1's SIGKILL (%u frames put meanwhile, last put %s)",
          s.next, s.broken ? "failed" : "accepted");
    for (int i = 0; i < 100; i++) /* nothing more may come */
        progress();
    check_failure_report("killed peer", t0);
    check_dead_conn("killed peer");
    sender_fini(&s);
}

static void case_drop(void)
{
    const char *v = getenv("HCOMM_FAKE_DROP_AFTER");
    if (strcmp(drv_name, "fake") || !v || !v[0] || !strcmp(v, "0")) {
        skip_why = "only for the fake driver with HCOMM_FAKE_DROP_AFTER set";
        return;
    }
    unsigned long long n = strtoull(v, NULL, 0);
    sender_t s;
    sender_init(&s, (uint32_t)HC_MIN(n * 4 + 64, 1000000ull));
    rx_next = 0;
    on_deliver = deliver_count;
    uint64_t t0 = hc_time_ns();
    bool got = send_until_failed(&s, t0 + 20 * NS);
    CHECK(got,
          "no peer_failed within 20 s with HCOMM_FAKE_DROP_AFTER=%s (%u frames put, %u received)",
          v, s.next, rx_next);
    for (int i = 0; i < 100; i++)
        progress();
    check_failure_report("fake drop", t0);
    CHECK(strstr(failed_why, "HCOMM_FAKE_DROP_AFTER") != NULL,
          "fake drop: the reason does not name HCOMM_FAKE_DROP_AFTER: \"%s\"", failed_why);
    CHECK(rx_next <= n, "fake drop: %u frames arrived, more than HCOMM_FAKE_DROP_AFTER=%llu",
          rx_next, n);
    check_dead_conn("fake drop");
    sender_fini(&s);
}

/* A frame past max_frame is refused with an error (not a retry forever),
 * and nothing of it arrives. */
static void case_oversize(void)
{
    if (conn->max_frame > ((size_t)64 << 20)) {
        skip_why = "max_frame above 64 MiB: no frame past it is built";
        return;
    }
    rx_next = 0;
    on_deliver = deliver_count;
    if (me == 0) {
        size_t n = conn->max_frame + 1;
        uint8_t *p = calloc(1, n);
        hc_frame_hdr_t h = {.type = HC_FRAME_EAGER, .tag = 1, .len = (uint32_t)n};
        tok_t t = {.magic = TOK_MAGIC, .state = TOK_PENDING, .idx = 0};
        for (int withc = 0; withc < 2; withc++) {
            calling = withc ? &t : NULL;
            hcomm_status_t st = ops->put(conn, &h, p, withc ? &t : NULL);
            calling = NULL;
            CHECK(st < 0 && st != HCOMM_ERR_AGAIN,
                  "put of %zu bytes, one past max_frame (%s cookie), answered %s: it must fail", n,
                  withc ? "with a" : "no", st_name(st));
            if (st == HCOMM_IN_PROGRESS) pending_puts++;
        }
        free(p);
    }
    oob_sync("oversize put done");
    for (int i = 0; i < 200; i++)
        progress();
    oob_sync("receiver looked");
    CHECK(rx_next == 0, "%u frames arrived after puts past max_frame", rx_next);
}

/* Node-shared memory (shared_get): both ranks see the same zeroed bytes;
 * drivers without it answer NULL. */
static void case_shared(void)
{
    const size_t n = 65536;
    uint64_t mine = mix(hc_time_ns() ^ (uint64_t)getpid()) | 2, theirs = 0;
    if (!oob_xchg(&mine, &theirs, sizeof(mine))) return;
    uint64_t key = me == 0 ? mine : theirs; /* rank 0's */
    uint8_t *p = ops->shared_get(drv, key, n, nranks);
    bool have = p != NULL, peer_has = false;
    if (!oob_xchg(&have, &peer_has, sizeof(have))) return;
    CHECK(have == peer_has, "shared_get: one rank got memory, the other NULL");
    if (!have) {
        skip_why = "shared_get answers NULL: the driver has no node-shared memory";
        return;
    }
    size_t bad = 0;
    while (bad < n && p[bad] == 0)
        bad++;
    oob_sync("both mapped");
    CHECK(bad == n, "shared_get: a fresh block is not zeroed (byte %zu)", bad);
    if (me == 0) pat_fill(p, n, key, 0);
    oob_sync("rank 0 wrote");
    CHECK(pat_check(p, n, key, 0) == n, "shared_get: rank %d does not see the bytes rank 0 wrote",
          me);
    oob_sync("checked");
    ops->shared_put(drv, key);
}

/* ---- running a case in two processes ------------------------------------------------------- */

typedef struct {
    const char *name;
    void (*fn)(void);
    bool pair; /* needs open + wireup + connect */
    int lanes; /* env.lanes (0: 1) */
} case_t;

static const case_t cases[] = {
    {"ops_table", case_ops_table, false},
    {"open_close", case_open_close, false},
    {"connect", case_connect, true},
    {"put_order", case_put_order, true},
    {"put_lanes", case_put_lanes, true, HC_FRAME_LANES},
    {"credit", case_credit, true},
    {"rma", case_rma, true},
    {"mem_reg", case_mem_reg, true},
    {"close_held", case_close_held, true},
    {"abandoned", case_abandoned, true},
    {"killed", case_killed, true},
    {"oversize", case_oversize, true},
    {"shared", case_shared, true},
    {"drop", case_drop, true},
};

/* The case's body in this process; returns its failures. */
static int run_here(const case_t *c)
{
    failures = printed = 0;
    if (!c->pair) {
        c->fn();
        return failures;
    }
    if (pair_setup()) c->fn();
    pair_teardown(child_signal == 0);
    return failures;
}

/* One pair case, in a process of its own (rank 0), which forks rank 1:
 * 0 passed, 1 failed, 77 skipped. No cmocka assertion here: a failing one
 * would jump back into the test runner inside this child. */
static int run_pair(const case_t *c)
{
    int sv[2], hv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, hv) != 0) {
        perror("conformance: socketpair");
        return 1;
    }
    hs_eof = false;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("conformance: fork");
        return 1;
    }
    if (pid == 0) {
        close(sv[0]);
        close(hv[0]);
        oob = sv[1];
        hs = hv[1];
        me = 1;
        peer = 0;
        alarm(CHILD_WAIT_S);
        int f = run_here(c);
        fflush(stdout);
        fflush(stderr);
        _exit(f ? 1 : 0);
    }
    close(sv[1]);
    close(hv[1]);
    oob = sv[0];
    hs = hv[0];
    me = 0;
    peer = 1;
    int f = run_here(c);
    close(oob);
    oob = -1;
    close(hs);
    hs = -1;
    int status = 0;
    pid_t w = 0;
    for (int i = 0; i < CHILD_WAIT_S * 100 && (w = waitpid(pid, &status, WNOHANG)) == 0; i++)
        usleep(10000);
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        fprintf(stderr, "conformance %s/%s: rank 1 did not finish within %d s (killed)\n", drv_name,
                c->name, CHILD_WAIT_S);
        f++;
    } else if (child_signal) {
        if (!WIFSIGNALED(status) || WTERMSIG(status) != child_signal) {
            fprintf(stderr, "conformance %s/%s: rank 1 expected to die by signal %d, status %#x\n",
                    drv_name, c->name, child_signal, status);
            f++;
        }
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "conformance %s/%s: rank 1 failed (status %#x)\n", drv_name, c->name,
                status);
        f++;
    }
    if (skip_why && f == 0) {
        printf("%s: skipped: %s\n", c->name, skip_why);
        fflush(NULL);
        return 77;
    }
    fflush(NULL);
    return f ? 1 : 0;
}

static void run_case(const case_t *c)
{
    case_name = c->name;
    env_lanes = c->lanes ? c->lanes : 1;
    skip_why = NULL;
    child_signal = 0;
    unsigned long long salt = mix(hc_time_ns() ^ (uint64_t)getpid());
    snprintf(job_key, sizeof(job_key), "conformance-%d-%s-%016llx", (int)getpid(), c->name, salt);
    snprintf(node_id, sizeof(node_id), "conformance-node-%016llx", salt);
    if (nranks == 1 || !c->pair) {
        /* In a child of its own: a driver whose library cannot be started
         * twice nor survive a fork (DPDK's EAL) must not start in this
         * process, which forks the later cases' ranks. */
        me = peer = 0;
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            int f = run_here(c);
            if (skip_why) {
                printf("%s: skipped: %s\n", c->name, skip_why);
                fflush(NULL);
                _exit(77);
            }
            fflush(NULL);
            _exit(f ? 1 : 0);
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) == 77) skip();
        assert_int_equal(WEXITSTATUS(status), 0);
        return;
    }
    /* Rank 0 runs in a child too (see above): the runner forks rank 1 and
     * reports 0 (passed), 1 (failed) or 77 (skipped). */
    fflush(NULL);
    pid_t runner = fork();
    assert_true(runner >= 0);
    if (runner == 0) _exit(run_pair(c));
    int rs = 0;
    assert_int_equal(waitpid(runner, &rs, 0), runner);
    if (!WIFEXITED(rs)) fprintf(stderr, "conformance %s/%s: rank 0 died (status %#x)\n", drv_name,
                                c->name, rs);
    assert_true(WIFEXITED(rs));
    if (WEXITSTATUS(rs) == 77) skip();
    assert_int_equal(WEXITSTATUS(rs), 0);
}

#define CASE_FN_(id)                                                                               \
    static void t_##id(void **state)                                                               \
    {                                                                                              \
        (void)state;                                                                               \
        for (size_t i = 0; i < HC_ARRAY_SIZE(cases); i++)                                          \
            if (!strcmp(cases[i].name, #id)) run_case(&cases[i]);                                  \
    }
CASE_FN_(ops_table)
CASE_FN_(open_close)
CASE_FN_(connect)
CASE_FN_(put_order)
CASE_FN_(put_lanes)
CASE_FN_(credit)
CASE_FN_(rma)
CASE_FN_(mem_reg)
CASE_FN_(close_held)
CASE_FN_(abandoned)
CASE_FN_(killed)
CASE_FN_(oversize)
CASE_FN_(shared)
CASE_FN_(drop)

int main(int argc, char **argv)
{
    static const struct CMUnitTest all[] = {
        cmocka_unit_test(t_ops_table), cmocka_unit_test(t_open_close), cmocka_unit_test(t_connect),
        cmocka_unit_test(t_put_order), cmocka_unit_test(t_put_lanes),  cmocka_unit_test(t_credit),
        cmocka_unit_test(t_rma),
        cmocka_unit_test(t_mem_reg), cmocka_unit_test(t_close_held), cmocka_unit_test(t_abandoned), cmocka_unit_test(t_killed),     cmocka_unit_test(t_oversize),
        cmocka_unit_test(t_shared),    cmocka_unit_test(t_drop),
    };
    drv_name = argc > 1 ? argv[1] : getenv("HC_CONFORMANCE_DRIVER");
    if (!drv_name || !drv_name[0]) {
        fprintf(stderr, "usage: %s DRIVER [CASE...]\n", argv[0]);
        return 2;
    }
    /* What the driver reads from hc_cfg: the fake driver's probe wants
     * HCOMM_NET=fake; a small pool keeps hc_mem_init quick. */
    if (!strcmp(drv_name, "fake")) setenv("HCOMM_NET", "fake", 1);
    setenv("HCOMM_MEM_POOL_INITIAL_SIZE", "2M", 0);
    setenv("HCOMM_MEM_POOL_MAX_SIZE", "4M", 0);
    setenv("HCOMM_TIMEOUT", "30", 0);
    if (hc_config_load() != HCOMM_OK) {
        fprintf(stderr, "hc_config_load: %s\n", hc_error_last());
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    ops = hc_drv_find(drv_name);
    if (!ops) {
        /* Drivers a build leaves out when their library is missing skip;
         * any other name is a mistake (a typo, a driver that did not
         * register) and fails. */
        static const struct {
            const char *name, *lib;
            bool built;
        } optional[] = {{"verbs", "libibverbs", HCOMM_BUILD_VERBS},
                        {"mlx5", "libmlx5", HCOMM_BUILD_MLX5},
                        {"dpdk", "libdpdk", HCOMM_BUILD_DPDK}};
        for (size_t i = 0; i < HC_ARRAY_SIZE(optional); i++)
            if (!strcmp(drv_name, optional[i].name) && !optional[i].built) {
                printf("skipped: driver %s is not in this build (%s not found at configure)\n",
                       drv_name, optional[i].lib);
                return 77;
            }
        fprintf(stderr,
                "conformance: no driver \"%s\" is registered in this build (registered:", drv_name);
        for (int i = 0; i < hc_drv_count(); i++)
            fprintf(stderr, " %s", hc_drv_at(i)->name);
        fprintf(stderr, ")%s%s\n", hc_drv_registry_error() ? "; " : "",
                hc_drv_registry_error() ? hc_drv_registry_error() : "");
        return 1;
    }
    nranks = ops->scope == HC_DRV_SCOPE_SELF ? 1 : 2;
    me = 0;
    env_init();
    char why[256] = "";
    if (ops->probe(&env, why, sizeof(why)) != HCOMM_OK) {
        printf("skipped: driver %s is not usable here: %s\n", drv_name, why);
        return 77;
    }
    struct CMUnitTest sel[HC_ARRAY_SIZE(all)];
    size_t n = 0;
    for (size_t i = 0; i < HC_ARRAY_SIZE(all); i++) {
        /* drop needs HCOMM_FAKE_DROP_AFTER, which breaks every other case:
         * it runs only when named. */
        bool want = argc <= 2 && strcmp(all[i].name, "t_drop");
        for (int a = 2; a < argc; a++)
            want |= !strcmp(all[i].name + 2, argv[a]);
        if (want) sel[n++] = all[i];
    }
    if (n == 0) {
        fprintf(stderr, "no case matches; cases:");
        for (size_t i = 0; i < HC_ARRAY_SIZE(cases); i++)
            fprintf(stderr, " %s", cases[i].name);
        fprintf(stderr, "\n");
        return 2;
    }
    char group[64];
    snprintf(group, sizeof(group), "conformance_%s", drv_name);
    return _cmocka_run_group_tests(group, sel, n, NULL, NULL);
}
