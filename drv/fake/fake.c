/*
 * fake: the fault-injecting test driver (fake.h has the design). This file:
 * helpers, failure, probe / open / connect, teardown and the ops table;
 * fake_send.c sends and does RMA, fake_progress.c receives and progresses.
 * Test machinery: in the test objects only, never in libhcomm.so or .a.
 */
#include "drv/fake/fake.h"

/* ---- helpers ------------------------------------------------------------------------ */

static uint64_t hc_fake_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; s && *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

socklen_t hc_fake_sockaddr(uint64_t key_hash, int rank, struct sockaddr_un *sa)
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
hc_fake_cfg_t hc_fake_cfg;

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

void hc_fake_ep(hc_fake_drv_t *d, int op, int fd, uint32_t events, void *ptr)
{
    struct epoll_event ev = {.events = events, .data.ptr = ptr};
    if (epoll_ctl(d->epfd, op, fd, &ev) != 0)
        hc_log_warn("fake: epoll_ctl(%d) on fd %d: %s", op, fd, strerror(errno));
}

void hc_fake_close_fd(hc_fake_drv_t *d, int *fd)
{
    if (*fd >= 0) {
        epoll_ctl(d->epfd, EPOLL_CTL_DEL, *fd, NULL);
        close(*fd);
    }
    *fd = -1;
}

void hc_fake_activate(hc_fake_conn_t *c)
{
    if (c->active) return;
    c->active = true;
    c->active_next = c->drv->active;
    c->drv->active = c;
}

static hc_fake_tx_t *hc_fake_q_pop(hc_fake_txq_t *q)
{
    return HC_FIFO_POP(q);
}

/* txq's own push and pop: they count each lane's queued frames. */
void hc_fake_txq_push(hc_fake_conn_t *c, hc_fake_tx_t *t)
{
    c->lane_q[hc_fake_lane(t)]++;
    hc_fake_q_push(&c->txq, t);
}

/* Takes t (after prev, NULL: the head) out of txq. */
void hc_fake_txq_take(hc_fake_conn_t *c, hc_fake_tx_t *prev, hc_fake_tx_t *t)
{
    if (prev)
        prev->next = t->next;
    else
        c->txq.head = t->next;
    if (c->txq.tail == t) c->txq.tail = prev;
    t->next = NULL;
    c->lane_q[hc_fake_lane(t)]--;
}

void hc_fake_tx_free(hc_fake_tx_t *t)
{
    free(t->copy);
    free(t);
}

/* One datagram: header + payload, all or nothing (SOCK_SEQPACKET). */
ssize_t hc_fake_send(int fd, const hc_frame_hdr_t *hdr, const void *payload)
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

void hc_fake_conn_fail(hc_fake_conn_t *c, const char *fmt, ...)
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
void hc_fake_drop(hc_fake_conn_t *c)
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
    kv("device_regs", d->n_dev_regs, arg);
}

static const struct hc_drv_ops hc_fake_ops = {
    .name = "fake",
    .scope = HC_DRV_SCOPE_NET,
    .priority = 0,
    .caps = HC_DRV_CAP_USER_REG,
    .mem_types = 1u << HC_MEM_DEVICE, /* by mapping the dmabuf fd, as a NIC would */
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
