/*
 * fake: receiving (accepting, hellos, datagrams) and progress (fake.h has
 * the design).
 */
#include "drv/fake/fake.h"

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
void hc_fake_anon_free(hc_fake_drv_t *d, hc_fake_anon_t *a, bool close_fd)
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

void hc_fake_anon_reap(hc_fake_drv_t *d)
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
        if (e == EPIPE || e == ECONNRESET) hc_fake_out_hup(c);
        if (c->failed || c->out_state == HC_FAKE_OUT_NONE) return n + 1;
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

int hc_fake_progress(hc_drv_t *drv)
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
