/*
 * tcp driver, the handshake of a data socket, both sides (issue 30: a
 * handshake that needs no progress from a computing connector, and a job
 * key that is proven, never sent).
 *
 *   connector                                  acceptor
 *   connect, then at once (tcp_setup.c waits
 *   a short while for the connect):
 *   hello {ranks, socket index, both          (accepts when it next calls hcomm;
 *     instance ids, counter, nonce_c,          the hello is already there)
 *     mac = HMAC(key, "hcomm-tcp-hello",
 *       those fields, nonce_a)}      ------->  checks ranks, index < the count the
 *   frames, kept until the verdict   ------->  peer published, the MAC (constant
 *                                              time), both instance ids, counter >
 *                                              the highest seen on that index
 *                                    <-------  verdict {ACCEPT | TIEBREAK | STALE |
 *                                              BUSY, instance, mac = HMAC(key,
 *                                              "hcomm-tcp-ack", those, the hello)}
 *   checks the verdict's MAC before it                then reads the frames
 *   reads a byte past it
 *
 * nonce_a is random per process and published in the address blob at
 * wireup; nonce_c is fresh per hello; the counter counts our hellos per
 * (peer, socket index). The job key (HCOMM_JOB_KEY) never travels. A hello
 * recorded on the wire verifies only at the process it was made for (both
 * instance ids and nonce_a are signed), and only once: its counter is then
 * "seen", and the acceptor refuses any hello on that index whose counter is
 * not higher. The verdict is signed over the connector's fresh nonce, so a
 * stranger cannot answer a connect in the acceptor's place and have the
 * connector read its frames.
 *
 * The connector needs no answer before it writes: hello and frames go out
 * inside the put that opened the socket, and a sender that then computes
 * for minutes has nothing left in user space that the receiver waits for.
 * Frames written before the verdict are kept (not completed) until it: a
 * socket that loses the tie-break (docs/tcp.md) was never read by the
 * acceptor, so what it carried goes again, first, on the winning socket.
 * Every wait here that depends on the other process calling hcomm (the
 * acceptor's for a hello, the connector's for its verdict, the tie-break
 * loser's for the winner) lasts HCOMM_TIMEOUT, not a few seconds.
 *
 * What this does not give (docs/tcp.md): confidentiality, and integrity of
 * the frames after the handshake; an active attacker on the path can still
 * hijack or alter a TCP stream, or replay a hello it kept from the acceptor.
 */
#include "drv/tcp/tcp.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static const char hc_tcp_hello_label[] = "hcomm-tcp-hello";
static const char hc_tcp_ack_label[] = "hcomm-tcp-ack";

/* ---- the signatures -------------------------------------------------------- */

static hcomm_status_t hc_drv_tcp_hello_mac(const hc_tcp_drv_t *d, const hc_tcp_hello_t *h,
                                           const uint8_t nonce_a[HC_AUTH_NONCE],
                                           uint8_t mac[HC_AUTH_MAC])
{
    const hc_auth_part_t parts[] = {{hc_tcp_hello_label, sizeof(hc_tcp_hello_label) - 1},
                                    {h, offsetof(hc_tcp_hello_t, mac)},
                                    {nonce_a, HC_AUTH_NONCE}};
    return hc_auth_mac(d->key, d->key_len, parts, 3, mac);
}

static hcomm_status_t hc_drv_tcp_ack_mac(const hc_tcp_drv_t *d, const hc_tcp_ack_t *a,
                                         const hc_tcp_hello_t *h, uint8_t mac[HC_AUTH_MAC])
{
    const hc_auth_part_t parts[] = {{hc_tcp_ack_label, sizeof(hc_tcp_ack_label) - 1},
                                    {a, offsetof(hc_tcp_ack_t, mac)},
                                    {h, offsetof(hc_tcp_hello_t, mac)}};
    return hc_auth_mac(d->key, d->key_len, parts, 3, mac);
}

/* ---- connector ---------------------------------------------------------------- */

int hc_drv_tcp_hello_send(hc_tcp_slot_t *s)
{
    hc_tcp_conn_t *c = s->conn;
    hc_tcp_drv_t *d = c->drv;
    int err = 0;
    socklen_t el = sizeof(err);
    if (s->err)
        err = s->err;
    else if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
        err = errno;
    if (err) return err;
    hc_tcp_hello_t *h = &s->hello;
    memset(h, 0, sizeof(*h));
    h->magic = HC_TCP_MAGIC;
    h->version = HC_TCP_VERSION;
    h->sock_idx = (uint16_t)s->idx;
    if (d->pre && s->was_up) h->sock_idx |= HC_TCP_IDX_REPLACE; /* rails: ours is gone */
    h->src_rank = d->env->rank;
    h->dst_rank = c->base.peer;
    h->src_instance = d->me.instance;
    h->dst_instance = c->addr.instance;
    h->counter = ++s->ctr_out;
    if (hc_auth_random(h->nonce, sizeof(h->nonce)) != HCOMM_OK ||
        hc_drv_tcp_hello_mac(d, h, c->addr.nonce, h->mac) != HCOMM_OK)
        return EIO; /* hc_error holds the reason */
    /* A fresh socket's buffer always takes these bytes at once. */
    ssize_t n = send(s->fd, h, sizeof(*h), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n != (ssize_t)sizeof(*h)) return n < 0 ? errno : EPROTO;
    s->state = HC_TCP_S_HELLO_SENT;
    s->hs_got = 0;
    hc_drv_tcp_ep(d, EPOLL_CTL_MOD, s->fd, EPOLLIN, s);
    return 0;
}

/* The verdict is complete and signed: act on it. */
static void hc_drv_tcp_verdict(hc_tcp_slot_t *s, const hc_tcp_ack_t *ack)
{
    hc_tcp_conn_t *c = s->conn;
    switch (ack->verdict) {
    case HC_TCP_ACCEPT:
        /* The address table's instance, recorded at wireup, must still be the
         * process that answers: a restarted rank (same address, new process)
         * never gets a frame meant for its predecessor. */
        if (ack->instance != c->addr.instance) {
            hc_drv_tcp_conn_fail(c,
                                 "%s answered as instance %016llx, not %016llx recorded at "
                                 "wireup: it restarted, not writing to it",
                                 c->name, (unsigned long long)ack->instance,
                                 (unsigned long long)c->addr.instance);
            return;
        }
        hc_drv_tcp_unacked_done(s);
        hc_drv_tcp_slot_up(s);
        return;
    case HC_TCP_REJ_TIEBREAK:
        /* The peer's own connect for this socket wins; it is on its way. It
         * never read what ours carried: that goes again on the winner. */
        hc_drv_tcp_slot_drop_fd(s);
        hc_drv_tcp_unacked_rewind(s);
        s->outgoing = false;
        s->state = HC_TCP_S_WAIT;
        s->hs_deadline = hc_time_ns() + c->drv->hs_ns;
        return;
    case HC_TCP_REJ_STALE:
        hc_drv_tcp_conn_fail(c, "%s restarted (instance changed): not writing to a stale address",
                             c->name);
        return;
    default:
        hc_drv_tcp_sock_lost(s, false, "%s refused the connection (verdict %u)", c->name,
                             ack->verdict);
    }
}

void hc_drv_tcp_slot_handshake(hc_tcp_slot_t *s, uint32_t events)
{
    hc_tcp_conn_t *c = s->conn;
    if (s->state == HC_TCP_S_CONNECTING) {
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
        int err = hc_drv_tcp_hello_send(s);
        if (err)
            hc_drv_tcp_sock_lost(s, false, "cannot connect to %s: %s", c->name,
                                 err == EIO ? hc_error_last() : strerror(err));
        else if (s->txq.head)
            hc_drv_tcp_flush_mark(s); /* frames put meanwhile go before the verdict */
        return;
    }
    hc_tcp_ack_t ack;
    ssize_t n = recv(s->fd, s->hs + s->hs_got, sizeof(ack) - s->hs_got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
        hc_drv_tcp_sock_lost(s, false, "%s closed the connection during the handshake%s%s", c->name,
                             n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
        return;
    }
    s->hs_got += (size_t)n;
    if (s->hs_got < sizeof(ack)) return;
    memcpy(&ack, s->hs, sizeof(ack));
    uint8_t mac[HC_AUTH_MAC];
    if (ack.magic != HC_TCP_MAGIC) {
        hc_drv_tcp_conn_fail(c, "%s answered the handshake with garbage", c->name);
        return;
    }
    if (hc_drv_tcp_ack_mac(c->drv, &ack, &s->hello, mac) != HCOMM_OK ||
        !hc_auth_equal(mac, ack.mac, HC_AUTH_MAC)) {
        hc_drv_tcp_conn_fail(c,
                             "%s answered socket %d's hello without proof of the job key: not "
                             "reading from it",
                             c->name, s->idx);
        return;
    }
    hc_drv_tcp_verdict(s, &ack);
}

/* ---- acceptor -------------------------------------------------------------------- */

void hc_drv_tcp_anon_free(hc_tcp_drv_t *d, hc_tcp_anon_t *a, bool close_fd)
{
    for (hc_tcp_anon_t **pp = &d->anon; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            d->nanon--;
            break;
        }
    if (close_fd) {
        epoll_ctl(d->epfd, EPOLL_CTL_DEL, a->fd, NULL);
        close(a->fd);
    }
    free(a);
}

/* A signed verdict (any connector checks it before it believes it). */
static bool hc_drv_tcp_anon_answer(hc_tcp_drv_t *d, hc_tcp_anon_t *a, uint32_t verdict)
{
    hc_tcp_ack_t ack = {.magic = HC_TCP_MAGIC, .verdict = verdict, .instance = d->me.instance};
    if (hc_drv_tcp_ack_mac(d, &ack, &a->hello, ack.mac) != HCOMM_OK) {
        hc_log_warn("tcp: cannot sign the verdict to %s: %s", a->from, hc_error_last());
        return false;
    }
    ssize_t n = send(a->fd, &ack, sizeof(ack), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n != (ssize_t)sizeof(ack)) {
        hc_log_debug("tcp: verdict %u to %s: %s", verdict, a->from,
                     n < 0 ? strerror(errno) : "short write");
        return false;
    }
    return true;
}

static void hc_drv_tcp_anon_reject(hc_tcp_drv_t *d, hc_tcp_anon_t *a, uint32_t verdict)
{
    (void)hc_drv_tcp_anon_answer(d, a, verdict);
    hc_drv_tcp_anon_free(d, a, true);
}

/* A socket index the peer may not connect: beyond its count (no rails), or,
 * with rails, beyond its count on a rail, or on a rail we do not pair. */
static bool hc_drv_tcp_idx_bad(const hc_tcp_drv_t *d, const hc_tcp_conn_t *c, uint16_t raw)
{
    if (!d->pre) return raw >= c->addr.nsocks;
    unsigned idx = raw & ~HC_TCP_IDX_REPLACE;
    return idx >= HC_TCP_MAX_SOCKS || idx % HC_TCP_RAIL_STRIDE >= c->addr.nsocks ||
           (int)(idx / HC_TCP_RAIL_STRIDE) >= c->nrails;
}

/* The checks that need no connection: the hello names this rank and a peer
 * of it on a socket index that peer opens, and proves the job key. NULL
 * (logged, closed) when it does not. */
static hc_tcp_conn_t *hc_drv_tcp_anon_check(hc_tcp_drv_t *d, hc_tcp_anon_t *a)
{
    const hc_tcp_hello_t *h = &a->hello;
    const hc_drv_env_t *env = d->env;
    hc_tcp_conn_t *c = NULL;
    if (h->dst_rank != env->rank || h->src_rank < 0 || h->src_rank >= env->size ||
        h->src_rank == env->rank) {
        hc_log_warn("tcp: dropped a connection from %s: a hello for ranks %d -> %d (this is rank "
                    "%d of %d)",
                    a->from, h->src_rank, h->dst_rank, env->rank, env->size);
    } else if (!(c = d->conns[h->src_rank])) {
        /* A peer that connected before this rank's connect to it (both
         * come out of the same address exchange, in any order): parked
         * until connect, or until its handshake deadline. */
        a->parked = true;
        hc_log_debug("tcp: a hello from %s claiming to be rank %d waits for the connection to it",
                     a->from, h->src_rank);
        return NULL;
    } else if (!c || c->failed) {
        hc_log_warn("tcp: dropped a connection from %s claiming to be rank %d: that rank failed",
                    a->from, h->src_rank);
    } else if (hc_drv_tcp_idx_bad(d, c, h->sock_idx)) {
        hc_log_warn("tcp: dropped a connection from %s claiming to be %s: socket index %u, but it "
                    "opens %u per peer on %d rails",
                    a->from, c->name, h->sock_idx & ~HC_TCP_IDX_REPLACE, c->addr.nsocks,
                    c->nrails ? c->nrails : 1);
    } else if (h->dst_instance != d->me.instance) {
        /* Meant for a process that had this address before us: its MAC is
         * over that one's nonce. The signed verdict tells the connector. */
        hc_log_warn("tcp: refused a connection from %s claiming to be %s: it is meant for "
                    "instance %016llx, this is %016llx",
                    a->from, c->name, (unsigned long long)h->dst_instance,
                    (unsigned long long)d->me.instance);
        hc_drv_tcp_anon_reject(d, a, HC_TCP_REJ_STALE);
        return NULL;
    } else {
        uint8_t mac[HC_AUTH_MAC];
        if (hc_drv_tcp_hello_mac(d, h, d->me.nonce, mac) == HCOMM_OK &&
            hc_auth_equal(mac, h->mac, HC_AUTH_MAC))
            return c;
        hc_log_warn("tcp: dropped a connection from %s claiming to be %s (socket %u): its hello "
                    "does not prove the job key (another job's key, or forged)",
                    a->from, c->name, h->sock_idx);
    }
    hc_drv_tcp_anon_free(d, a, true);
    return NULL;
}

/* A complete hello: check it, break a tie, hand the socket to its slot. */
static void hc_drv_tcp_anon_hello(hc_tcp_drv_t *d, hc_tcp_anon_t *a)
{
    const hc_tcp_hello_t *h = &a->hello;
    const hc_drv_env_t *env = d->env;
    hc_tcp_conn_t *c = hc_drv_tcp_anon_check(d, a);
    if (!c) return;
    if (h->src_instance != c->addr.instance) {
        hc_log_warn("tcp: refused a connection from %s claiming to be %s: instance %016llx, not "
                    "%016llx recorded at wireup (a restarted process?)",
                    a->from, c->name, (unsigned long long)h->src_instance,
                    (unsigned long long)c->addr.instance);
        hc_drv_tcp_anon_reject(d, a, HC_TCP_REJ_STALE);
        return;
    }
    bool replace = d->pre && (h->sock_idx & HC_TCP_IDX_REPLACE);
    hc_tcp_slot_t *s = &c->slots[h->sock_idx & ~HC_TCP_IDX_REPLACE];
    if (h->counter <= s->ctr_in) {
        hc_log_warn("tcp: dropped a connection from %s claiming to be %s (socket %u): a replayed "
                    "hello (counter %llu, %llu already seen)",
                    a->from, c->name, h->sock_idx, (unsigned long long)h->counter,
                    (unsigned long long)s->ctr_in);
        hc_drv_tcp_anon_free(d, a, true);
        return;
    }
    s->ctr_in = h->counter; /* seen, accepted or not: it never verifies again */
    if (c->idle_mask & (1u << s->idx)) {
        /* We agreed to an idle close and the peer, which closes every socket
         * before it reconnects, is back before we read this one's EOF. */
        hc_drv_tcp_idle_eof(s);
    }
    if (replace && s->state == HC_TCP_S_UP && hc_time_ns() - s->up_ns > 10000000ull) {
        /* Rails: the peer lost its end of this socket (it left the rail)
         * and connects again; ours is stale. What we wrote on it and the
         * peer did not acknowledge goes again on the new one. (A younger
         * socket is more likely the winner of a tie-break whose loser's
         * hello arrives late: kept.) */
        hc_log_info("tcp: %s replaces socket %d (rail %d)", c->name, s->idx,
                    s->idx / HC_TCP_RAIL_STRIDE);
        hc_drv_tcp_slot_drop_fd(s);
        hc_drv_tcp_rail_requeue(s, s);
        s->state = HC_TCP_S_NONE;
    }
    if (s->state == HC_TCP_S_UP && s->outgoing && env->rank < h->src_rank) {
        /* The peer's attempt that lost the tie-break, read after ours won. */
        hc_drv_tcp_anon_reject(d, a, HC_TCP_REJ_TIEBREAK);
        return;
    }
    if (s->state == HC_TCP_S_UP) {
        hc_log_warn("tcp: %s opened socket %u twice: second one dropped", c->name, h->sock_idx);
        hc_drv_tcp_anon_reject(d, a, HC_TCP_REJ_BUSY);
        return;
    }
    if (s->fd >= 0 && s->outgoing) {
        if (env->rank < h->src_rank) {
            hc_drv_tcp_anon_reject(d, a, HC_TCP_REJ_TIEBREAK);
            return;
        }
        /* The lower rank's socket wins; it rejects ours unread, so what ours
         * carried goes again on this one. */
        hc_drv_tcp_slot_drop_fd(s);
        hc_drv_tcp_unacked_rewind(s);
    }
    if (!hc_drv_tcp_anon_answer(d, a, HC_TCP_ACCEPT)) {
        hc_drv_tcp_anon_free(d, a, true);
        return;
    }
    int fd = a->fd;
    hc_drv_tcp_anon_free(d, a, false);
    s->fd = fd;
    s->outgoing = false;
    s->zc_on = hc_drv_tcp_sock_opts(d, fd);
    hc_drv_tcp_ep(d, EPOLL_CTL_MOD, fd, EPOLLIN, s);
    hc_drv_tcp_conn_activate(c);
    hc_drv_tcp_slot_up(s);
}

void hc_drv_tcp_anon_unpark(hc_tcp_drv_t *d, int peer)
{
    hc_tcp_anon_t *a = d->anon, *next;
    for (; a; a = next) {
        next = a->next; /* a may be freed */
        if (a->parked && a->hello.src_rank == peer) {
            a->parked = false;
            hc_drv_tcp_anon_hello(d, a);
        }
    }
}

void hc_drv_tcp_anon_readable(hc_tcp_drv_t *d, hc_tcp_anon_t *a)
{
    ssize_t n = recv(a->fd, (uint8_t *)&a->hello + a->got, sizeof(a->hello) - a->got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
        /* A connector that dropped its attempt before the connect completed
         * closes before its hello: not worth a warning. */
        if (a->got)
            hc_log_warn("tcp: dropped a connection from %s: it closed after %zu bytes of a hello",
                        a->from, a->got);
        else
            hc_log_debug("tcp: %s closed before its hello: %s", a->from,
                         n < 0 ? strerror(errno) : "EOF");
        hc_drv_tcp_anon_free(d, a, true);
        return;
    }
    a->got += (size_t)n;
    const hc_tcp_hello_t *h = &a->hello;
    if (a->got >= sizeof(uint32_t) && h->magic != HC_TCP_MAGIC) {
        hc_log_warn("tcp: dropped a connection from %s: not an hcomm peer (bad magic)", a->from);
        hc_drv_tcp_anon_free(d, a, true);
        return;
    }
    if (a->got >= offsetof(hc_tcp_hello_t, sock_idx) && h->version != HC_TCP_VERSION) {
        hc_log_warn("tcp: dropped a connection from %s: handshake version %u, this rank speaks %u "
                    "(every rank of a job must run the same hcomm)",
                    a->from, h->version, HC_TCP_VERSION);
        hc_drv_tcp_anon_free(d, a, true);
        return;
    }
    if (a->got == sizeof(a->hello)) hc_drv_tcp_anon_hello(d, a);
}

/* Too many sockets wait for a hello: a legitimate one waits only on a
 * connector whose connect outlasted its short wait, so the oldest goes. It
 * is freed by the next timer pass (its event may be pending in this one). */
static void hc_drv_tcp_anon_evict(hc_tcp_drv_t *d)
{
    hc_tcp_anon_t *old = NULL;
    int waiting = 0;
    for (hc_tcp_anon_t *a = d->anon; a; a = a->next)
        if (a->deadline) {
            old = a;
            waiting++;
        }
    if (old && waiting > HC_TCP_ANON_MAX) old->deadline = 0;
}

void hc_drv_tcp_accept(hc_tcp_drv_t *d, hc_tcp_slot_t *listen)
{
    for (int k = 0; k < 16; k++) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof(sa);
        int fd = accept4(listen->fd, (struct sockaddr *)&sa, &salen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                hc_log_warn("tcp: accept on %s: %s", d->me_str, strerror(errno));
            return;
        }
        hc_tcp_anon_t *a = calloc(1, sizeof(*a));
        if (!a) {
            close(fd);
            continue;
        }
        a->obj = HC_TCP_OBJ_ANON;
        a->fd = fd;
        a->deadline = hc_time_ns() + d->hs_ns;
        hc_drv_tcp_sa_str(&sa, a->from, sizeof(a->from));
        if (hc_drv_tcp_ep(d, EPOLL_CTL_ADD, fd, EPOLLIN, a) != 0) {
            close(fd);
            free(a);
            continue;
        }
        a->next = d->anon;
        d->anon = a;
        d->nanon++;
        /* The connector wrote its hello right after connecting: read it now,
         * in the order the connections came. */
        hc_drv_tcp_anon_readable(d, a);
        if (d->nanon > HC_TCP_ANON_MAX) hc_drv_tcp_anon_evict(d);
    }
}

void hc_drv_tcp_anon_expire(hc_tcp_drv_t *d, uint64_t now)
{
    hc_tcp_anon_t *a = d->anon, *next;
    for (; a; a = next) {
        next = a->next;
        if (!a->deadline)
            hc_log_warn("tcp: dropped a connection from %s: no hello yet, and more than %d "
                        "connections wait for one (the oldest goes)",
                        a->from, HC_TCP_ANON_MAX);
        else if (now > a->deadline && a->parked)
            hc_log_warn("tcp: dropped a connection from %s claiming to be rank %d: this rank did "
                        "not connect to it within %.0f s (HCOMM_TIMEOUT): not a tcp peer of this "
                        "rank",
                        a->from, a->hello.src_rank, (double)d->hs_ns * 1e-9);
        else if (now > a->deadline)
            hc_log_warn("tcp: dropped a connection from %s: no hello within %.0f s (HCOMM_TIMEOUT)",
                        a->from, (double)d->hs_ns * 1e-9);
        else
            continue;
        hc_drv_tcp_anon_free(d, a, true);
    }
}
