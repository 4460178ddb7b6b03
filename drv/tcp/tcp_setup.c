/*
 * tcp driver, control path: the listening socket, connection
 * establishment, failure and teardown (the interface choice is tcp_if.c,
 * the handshake tcp_hello.c, several interfaces tcp_rail.c).
 *
 * Each rank listens on one address (HCOMM_SOCKET_IFNAME, else the interface
 * that routes to the rendezvous host, else the first non-loopback interface
 * that is up, else loopback; with rails one per rail) and publishes {address, port, pid, socket
 * count, instance, nonce} in its address blob. Nothing is connected at
 * init: a peer gets sockets on the first frame sent to it, so a job whose
 * ranks talk to few peers never holds n^2 sockets. Socket i of a pair
 * (0 <= i < HCOMM_CONN_PER_PEER) is set up independently of the others.
 * With lanes (docs/lanes.md) socket i carries the frames of the lanes l
 * with l % n == i; without, socket 0 carries every ordered frame (EAGER,
 * RTS, CTS, FIN, NACK), the others the DATA frames of large messages (see
 * tcp_data.c). The driver's own frames (heartbeats, goodbye, idle close)
 * always go on socket 0.
 *
 * Either side may connect socket i. The connector writes a hello proving
 * the job key (tcp_hello.c) and, before the put that opened the socket
 * returns, its frames; the acceptor answers with a signed verdict, and the
 * connector keeps those frames until it. When both connect socket i at
 * once, the lower rank's socket wins: the lower rank rejects an incoming
 * hello while its own connect for that index is in flight (TIEBREAK), the
 * higher rank drops its own attempt when the lower rank's hello arrives and
 * waits for it; the loser's frames were never read and go again on the
 * winner. Each decision is local and one-shot, so simultaneous connects
 * never deadlock.
 *
 * The connect itself is waited for a short while inside the put
 * (HC_TCP_CONNECT_WAIT_MS: on a LAN it takes a round trip), so that a rank
 * that sends and then computes has already written its hello and its eager
 * frames: the acceptor never needs the connector to call hcomm again. Every
 * wait that does depend on the other process calling hcomm lasts
 * HCOMM_TIMEOUT (tcp_hello.c), and a gap between our own progress calls
 * does not count against a peer (hc_drv_tcp_resume in tcp_data.c).
 *
 * A hello with garbage, without proof of the key, with a wrong rank or an
 * index the peer does not open, or replayed, is logged with the remote
 * address and closed; a hello that names an instance we do not know means
 * one side restarted, and the connector fails the peer rather than write to
 * a stale address. A peer whose socket closes without the goodbye frame, or
 * that is silent past HCOMM_CONN_FAIL_TIMEOUT, is reported to the core with
 * env->peer_failed, after every put still owed a completion is failed.
 * Idle connections are closed by a handshake of their own and reopened by
 * the next put through the same path (tcp_idle.c); the connector checks the
 * instance in the acceptor's verdict too, so a reopen never reaches a
 * process that replaced the one recorded at wireup.
 */
#include "drv/tcp/tcp.h"
#include "base/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <unistd.h>

/* This driver's knobs (listed by hcomm_info -c with the others). */
static struct {
    const char *ifname, *sched;
    int64_t conn_per_peer;
    size_t zcopy_threshold, sockbuf;
    double idle_timeout, half_open_timeout, fail_timeout, rail_timeout;
} hc_tcp_cfg;

static const hc_config_knob_t hc_tcp_knobs[] = {
    HC_KNOB_STR(hc_tcp_cfg.ifname, "HCOMM_SOCKET_IFNAME", "",
                "tcp: interface prefix list, ^ to exclude (default: the one reaching the "
                "bootstrap); several entries that each match an interface: one rail each"),
    HC_KNOB_DOUBLE(hc_tcp_cfg.rail_timeout, "HCOMM_SOCKET_RAIL_TIMEOUT", "0.1",
                   "tcp rails: seconds without a TCP acknowledgement, data in flight, before a "
                   "rail is left (at least 4 RTTs, at least 50 ms unless set lower)"),
    HC_KNOB_INT(hc_tcp_cfg.conn_per_peer, "HCOMM_CONN_PER_PEER", "4",
                "tcp: data connections per peer"),
    HC_KNOB_STR(hc_tcp_cfg.sched, "HCOMM_CONN_SCHED", "priority", "tcp: priority|round_robin"),
    HC_KNOB_SIZE(hc_tcp_cfg.zcopy_threshold, "HCOMM_ZCOPY_THRESHOLD", "64K",
                 "tcp: MSG_ZEROCOPY above this size"),
    HC_KNOB_SIZE(hc_tcp_cfg.sockbuf, "HCOMM_SOCKET_BUF", "0",
                 "tcp: SO_SNDBUF and SO_RCVBUF of each data socket (0: the kernel's "
                 "autotuning; a value turns it off)"),
    HC_KNOB_DOUBLE(hc_tcp_cfg.idle_timeout, "HCOMM_CONN_IDLE_TIMEOUT", "30",
                   "tcp: seconds before an idle connection is closed"),
    HC_KNOB_DOUBLE(hc_tcp_cfg.half_open_timeout, "HCOMM_CONN_HALF_OPEN_TIMEOUT", "3",
                   "tcp: seconds of silence before a peer is suspect"),
    HC_KNOB_DOUBLE(hc_tcp_cfg.fail_timeout, "HCOMM_CONN_FAIL_TIMEOUT", "0",
                   "tcp: seconds of silence before a suspect peer is declared failed (0: "
                   "HCOMM_TIMEOUT; a peer speaks only while its process calls hcomm)"),
};
HC_CONFIG_KNOBS("tcp", hc_tcp_knobs)

/* How long a put that opens a socket waits for the connect, so that the
 * hello and the frame leave before it returns. */
#define HC_TCP_CONNECT_WAIT_MS 500

/* ---- sockets ---------------------------------------------------------------- */

static int hc_drv_tcp_read_sysctl(const char *path)
{
    long v = 0;
    hc_read_long(path, &v);
    return v > 0 && v < (1l << 30) ? (int)v : 0;
}

/* Returns whether MSG_ZEROCOPY may be used on fd: without SO_ZEROCOPY the
 * kernel ignores the flag and no completion would ever come. */
bool hc_drv_tcp_sock_opts(hc_tcp_drv_t *d, int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        hc_log_debug("tcp: TCP_NODELAY: %s", strerror(errno));
    if (d->sockbuf) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &d->sockbuf, sizeof(d->sockbuf));
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &d->sockbuf, sizeof(d->sockbuf));
    }
    if (d->zc_threshold == SIZE_MAX) return false;
    if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) != 0) {
        hc_log_debug("tcp: SO_ZEROCOPY: %s", strerror(errno));
        return false;
    }
    return true;
}

int hc_drv_tcp_ep(hc_tcp_drv_t *d, int op, int fd, uint32_t events, void *ptr)
{
    struct epoll_event ev = {.events = events, .data.ptr = ptr};
    return epoll_ctl(d->epfd, op, fd, &ev);
}

/* ---- probe / open / addr ---------------------------------------------------- */

static hcomm_status_t hc_drv_tcp_probe(const hc_drv_env_t *env, char *why, size_t why_len)
{
    struct sockaddr_storage sa[HC_TCP_MAX_RAILS];
    socklen_t salen[HC_TCP_MAX_RAILS];
    char ifname[HC_TCP_MAX_RAILS][32];
    int n = hc_drv_tcp_pick_rails(env, hc_tcp_cfg.ifname, sa, salen, ifname, why, why_len);
    if (n < 1) return HCOMM_ERR_NO_DEVICE;
    size_t off = 0;
    for (int r = 0; r < n && off < why_len; r++) {
        char a[64];
        if (n == 1)
            hc_drv_tcp_sa_str(&sa[r], a, sizeof(a));
        else
            hc_drv_tcp_ip_str(&sa[r], a, sizeof(a));
        if (n == 1)
            off += (size_t)snprintf(why + off, why_len - off, "interface %s (%s)", ifname[r], a);
        else
            off += (size_t)snprintf(why + off, why_len - off, "%s%s (%s)", r ? ", " : "rails ",
                                    ifname[r], a);
    }
    return HCOMM_OK;
}

/* hcomm_info: one line per rail (with one interface, the probe's line says
 * it all). */
static void hc_drv_tcp_describe(const hc_drv_env_t *env, void (*line)(const char *text, void *arg),
                                void *arg)
{
    struct sockaddr_storage sa[HC_TCP_MAX_RAILS];
    socklen_t salen[HC_TCP_MAX_RAILS];
    char ifname[HC_TCP_MAX_RAILS][32], why[160], text[400];
    int n = hc_drv_tcp_pick_rails(env, hc_tcp_cfg.ifname, sa, salen, ifname, why, sizeof(why));
    for (int r = 0; r < n && n > 1; r++) {
        char a[64];
        hc_drv_tcp_ip_str(&sa[r], a, sizeof(a));
        snprintf(text, sizeof(text),
                 "  rail %d: %s %s (pairs with the peer's rail %d; striped DATA, failover "
                 "after %d ms without TCP acknowledgement at most)",
                 r, ifname[r], a, r, (int)(hc_tcp_cfg.rail_timeout * 1e3));
        line(text, arg);
    }
}

/* The knobs, checked, into d: sockets per peer and their use, zero copy,
 * the timeouts, socket buffers. */
static hcomm_status_t hc_drv_tcp_open_cfg(hc_tcp_drv_t *d, const hc_drv_env_t *env)
{
    if (hc_tcp_cfg.conn_per_peer < 1 || hc_tcp_cfg.conn_per_peer > HC_TCP_MAX_SOCKS)
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_CONN_PER_PEER must be in [1, %d] (got %lld)",
                        HC_TCP_MAX_SOCKS, (long long)hc_tcp_cfg.conn_per_peer);
    d->nsocks = (int)hc_tcp_cfg.conn_per_peer;
    if (d->nrails > 1 && d->nsocks > HC_TCP_RAIL_STRIDE)
        return hc_error(HCOMM_ERR_INVALID,
                        "HCOMM_CONN_PER_PEER must be at most %d with several rails "
                        "(HCOMM_SOCKET_IFNAME=%s; got %lld)",
                        HC_TCP_RAIL_STRIDE, hc_tcp_cfg.ifname, (long long)hc_tcp_cfg.conn_per_peer);
    if (d->nrails > 1 && !(hc_tcp_cfg.rail_timeout > 0))
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_SOCKET_RAIL_TIMEOUT must be > 0 (got %g)",
                        hc_tcp_cfg.rail_timeout);
    d->rail_bound_ns = (uint64_t)(hc_tcp_cfg.rail_timeout * 1e9);
    if (!strcmp(hc_tcp_cfg.sched, "round_robin"))
        d->rr_all = true;
    else if (strcmp(hc_tcp_cfg.sched, "priority"))
        return hc_error(HCOMM_ERR_INVALID,
                        "HCOMM_CONN_SCHED must be priority or round_robin (got %s)",
                        hc_tcp_cfg.sched);
    d->lanes = env->lanes > 1 && d->nsocks > 1;
    d->zc_threshold = hc_tcp_cfg.zcopy_threshold ? hc_tcp_cfg.zcopy_threshold : SIZE_MAX;
    /* A wait on another process's progress lasts the job's timeout. */
    double job = hc_cfg.timeout > 0 ? hc_cfg.timeout : 300;
    double half = hc_tcp_cfg.half_open_timeout > 0.05 ? hc_tcp_cfg.half_open_timeout : 0.05;
    double fail = hc_tcp_cfg.fail_timeout > 0 ? hc_tcp_cfg.fail_timeout : job;
    fail = fail > half ? fail : half;
    d->hs_ns = (uint64_t)(job * 1e9);
    d->suspect_ns = (uint64_t)(half * 1e9);
    d->hb_period_ns = d->suspect_ns / 3;
    d->fail_ns = (uint64_t)(fail * 1e9);
    d->idle_ns = hc_tcp_cfg.idle_timeout > 0 ? (uint64_t)(hc_tcp_cfg.idle_timeout * 1e9) : 0;
    if (d->nrails > 1) {
        /* Rails keep every frame until the peer acknowledges it (resent on
         * another rail otherwise): no zero copy, no idle close. */
        d->pre = sizeof(hc_tcp_rhdr_t);
        d->zc_threshold = SIZE_MAX;
        d->idle_ns = 0;
    }
    /* Socket buffers are the kernel's (autotuned up to net.ipv4.tcp_[rw]mem)
     * unless HCOMM_SOCKET_BUF sets them: an explicit size turns autotuning
     * off, and the kernel caps it at net.core.[rw]mem_max. A fixed 4 MiB
     * (the default until 2026-12) made the receiver drop segments under
     * load on kernel 6.18's loopback, and their resends backed off until a
     * transfer stalled for over a minute (docs/tcp.md, "Stalls"). */
    if (hc_tcp_cfg.sockbuf) {
        d->sockbuf = (int)HC_MIN(hc_tcp_cfg.sockbuf, (size_t)INT_MAX / 2);
        int wmax = hc_drv_tcp_read_sysctl("/proc/sys/net/core/wmem_max"),
            rmax = hc_drv_tcp_read_sysctl("/proc/sys/net/core/rmem_max");
        if ((wmax && wmax < d->sockbuf) || (rmax && rmax < d->sockbuf))
            hc_log_info("tcp: HCOMM_SOCKET_BUF=%d is capped by net.core.wmem_max=%d and "
                        "rmem_max=%d",
                        d->sockbuf, wmax, rmax);
    }
    return HCOMM_OK;
}

/* The epoll set and the listening socket in it, on the chosen interface
 * (d->me_sa, its port filled in). What it opened is in d->epfd and
 * d->listen.fd, closed by the caller on failure. */
/* One listening socket on sa (its port filled in), in the epoll set. */
static hcomm_status_t hc_drv_tcp_listen_one(hc_tcp_drv_t *d, hc_tcp_slot_t *l,
                                            struct sockaddr_storage *sa, socklen_t *salen,
                                            const char *ifname)
{
    l->obj = HC_TCP_OBJ_LISTEN;
    l->fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) return hc_error_errno(HCOMM_ERR_IO, errno, "tcp driver: socket");
    int one = 1;
    setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ((struct sockaddr_in *)sa)->sin_port = 0; /* same offset for in6 */
    if (bind(l->fd, (struct sockaddr *)sa, *salen) != 0 || listen(l->fd, SOMAXCONN) != 0 ||
        getsockname(l->fd, (struct sockaddr *)sa, salen) != 0) {
        char a[64];
        hc_drv_tcp_sa_str(sa, a, sizeof(a));
        return hc_error_errno(HCOMM_ERR_IO, errno, "tcp driver: cannot listen on %s (%s)", a,
                              ifname);
    }
    if (hc_drv_tcp_ep(d, EPOLL_CTL_ADD, l->fd, EPOLLIN, l) != 0)
        return hc_error_errno(HCOMM_ERR_IO, errno, "tcp driver: epoll_ctl");
    return HCOMM_OK;
}

/* The epoll set and the listening socket in it, on the chosen interface
 * (d->me_sa, its port filled in), and with rails one more per rail. What it
 * opened is in d->epfd and the listeners' fds, closed by the caller on
 * failure. */
static hcomm_status_t hc_drv_tcp_listen(hc_tcp_drv_t *d, const hc_drv_env_t *env)
{
    char why[160];
    d->nrails = hc_drv_tcp_pick_rails(env, hc_tcp_cfg.ifname, d->rail_sa, d->rail_salen, d->rail_if,
                                      why, sizeof(why));
    if (d->nrails < 1) return hc_error(HCOMM_ERR_NO_DEVICE, "tcp driver: %s", why);
    for (int r = 0; r < d->nrails; r++)
        d->rail_prefix[r] = hc_drv_tcp_prefix_of(&d->rail_sa[r]);
    d->me_sa = d->rail_sa[0];
    d->me_salen = d->rail_salen[0];
    snprintf(d->ifname, sizeof(d->ifname), "%s", d->rail_if[0]);
    d->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d->epfd < 0) return hc_error_errno(HCOMM_ERR_IO, errno, "tcp driver: epoll_create1");
    hcomm_status_t st = hc_drv_tcp_listen_one(d, &d->listen, &d->me_sa, &d->me_salen, d->ifname);
    d->rail_sa[0] = d->me_sa;
    for (int r = 1; r < d->nrails && st == HCOMM_OK; r++)
        st = hc_drv_tcp_listen_one(d, &d->listen_rail[r], &d->rail_sa[r], &d->rail_salen[r],
                                   d->rail_if[r]);
    for (int r = 0; r < d->nrails; r++)
        hc_drv_tcp_sa_str(&d->rail_sa[r], d->rail_str[r], sizeof(d->rail_str[r]));
    return st;
}

/* This rank's address blob: the listening address, socket count, instance
 * (the nonce is drawn before). */
static void hc_drv_tcp_me_fill(hc_tcp_drv_t *d)
{
    d->me.magic = HC_TCP_MAGIC;
    d->me.version = HC_TCP_VERSION;
    d->me.nsocks = (uint16_t)d->nsocks;
    d->me.family = d->me_sa.ss_family;
    d->me.pid = (uint32_t)getpid();
    if (d->me_sa.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&d->me_sa;
        d->me.port = in->sin_port;
        memcpy(d->me.addr, &in->sin_addr, 4);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&d->me_sa;
        d->me.port = in6->sin6_port;
        memcpy(d->me.addr, &in6->sin6_addr, 16);
    }
    d->me.nrails = (uint16_t)d->nrails;
    for (int r = 0; r < d->nrails; r++) {
        hc_tcp_rail_addr_t *ra = &d->me.rail[r];
        ra->family = d->rail_sa[r].ss_family;
        ra->prefix = d->rail_prefix[r];
        if (ra->family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&d->rail_sa[r];
            ra->port = in->sin_port;
            memcpy(ra->addr, &in->sin_addr, 4);
        } else {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&d->rail_sa[r];
            ra->port = in6->sin6_port;
            memcpy(ra->addr, &in6->sin6_addr, 16);
        }
    }
    if (getrandom(&d->me.instance, sizeof(d->me.instance), 0) != sizeof(d->me.instance))
        d->me.instance = hc_time_ns() ^ ((uint64_t)getpid() << 32);
    hc_drv_tcp_sa_str(&d->me_sa, d->me_str, sizeof(d->me_str));
}

static hcomm_status_t hc_drv_tcp_open(const hc_drv_env_t *env, hc_drv_t **drv_p)
{
    hc_tcp_drv_t *d = calloc(1, sizeof(*d));
    if (!d) return hc_error(HCOMM_ERR_NO_MEMORY, "tcp driver");
    d->env = env;
    d->epfd = -1;
    d->listen.obj = HC_TCP_OBJ_LISTEN;
    d->listen.fd = -1;
    for (int r = 0; r < HC_TCP_MAX_RAILS; r++)
        d->listen_rail[r].fd = -1;
    d->conns = calloc((size_t)env->size, sizeof(*d->conns));
    hcomm_status_t st = HCOMM_OK;
    if (!d->conns) st = hc_error(HCOMM_ERR_NO_MEMORY, "tcp driver: table of %d peers", env->size);
    d->key = env->job_key ? env->job_key : "";
    d->key_len = strlen(d->key);
    if (st == HCOMM_OK) st = hc_auth_random(d->me.nonce, sizeof(d->me.nonce)); /* (says why) */
    if (st == HCOMM_OK) st = hc_drv_tcp_listen(d, env);
    if (st == HCOMM_OK) st = hc_drv_tcp_open_cfg(d, env); /* (after: rails change it) */
    if (st != HCOMM_OK) goto err_free;
    hc_drv_tcp_me_fill(d);
    for (int r = 1; r < d->nrails; r++)
        hc_log_info("tcp: rail %d: listening on %s (%s)", r, d->rail_str[r], d->rail_if[r]);
    hc_log_info("tcp: listening on %s (%s), %d sockets per peer (%s), zerocopy above %zu bytes",
                d->me_str, d->ifname, d->nsocks,
                d->lanes        ? "lanes: lane l on socket l % n"
                : d->nsocks > 1 ? "ordered frames on socket 0, DATA striped"
                                : "every frame on it",
                d->zc_threshold);
    *drv_p = &d->base;
    return HCOMM_OK;

err_free:
    if (d->listen.fd >= 0) close(d->listen.fd);
    for (int r = 1; r < HC_TCP_MAX_RAILS; r++)
        if (d->listen_rail[r].fd >= 0) close(d->listen_rail[r].fd);
    if (d->epfd >= 0) close(d->epfd);
    free(d->conns);
    free(d);
    return st;
}

static hcomm_status_t hc_drv_tcp_addr_pack(hc_drv_t *drv, void *buf, size_t *len_p)
{
    hc_tcp_drv_t *d = (hc_tcp_drv_t *)drv;
    if (*len_p < sizeof(d->me))
        return hc_error(HCOMM_ERR_INTERNAL, "tcp: address blob needs %zu bytes, %zu available",
                        sizeof(d->me), *len_p);
    memcpy(buf, &d->me, sizeof(d->me));
    *len_p = sizeof(d->me);
    return HCOMM_OK;
}

static hcomm_status_t hc_drv_tcp_connect(hc_drv_t *drv, int peer, const void *addr, size_t addr_len,
                                         hc_conn_t **conn_p)
{
    hc_tcp_drv_t *d = (hc_tcp_drv_t *)drv;
    hc_tcp_addr_t a;
    if (peer < 0 || peer >= d->env->size)
        return hc_error(HCOMM_ERR_INVALID, "tcp connect: rank %d out of range", peer);
    if (addr_len != sizeof(a))
        return hc_error(HCOMM_ERR_BOOTSTRAP,
                        "tcp connect: rank %d published a %zu-byte address (expected %zu): does "
                        "it run the tcp driver of this hcomm version?",
                        peer, addr_len, sizeof(a));
    memcpy(&a, addr, sizeof(a));
    bool family_ok = a.family == AF_INET || a.family == AF_INET6;
    if (a.magic != HC_TCP_MAGIC || !family_ok || a.nsocks < 1 || a.nsocks > HC_TCP_MAX_SOCKS ||
        a.nrails > HC_TCP_MAX_RAILS) /* (0 reads as 1) */
        return hc_error(HCOMM_ERR_BOOTSTRAP, "tcp connect: rank %d published a malformed address",
                        peer);
    if (a.version != HC_TCP_VERSION)
        return hc_error(HCOMM_ERR_BOOTSTRAP,
                        "tcp connect: rank %d speaks tcp handshake version %u, this rank %u: every "
                        "rank of a job must run the same hcomm",
                        peer, a.version, HC_TCP_VERSION);
    if ((a.nrails > 1) != (d->nrails > 1))
        return hc_error(HCOMM_ERR_INVALID,
                        "tcp connect: rank %d has %u rails (HCOMM_SOCKET_IFNAME), this rank %d: "
                        "either every rank has several or none has",
                        peer, a.nrails, d->nrails);
    if (d->conns[peer])
        return hc_error(HCOMM_ERR_INTERNAL, "tcp connect: rank %d connected twice", peer);
    hc_tcp_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return hc_error(HCOMM_ERR_NO_MEMORY, "tcp connect: rank %d", peer);
    c->base.ops = drv->ops;
    c->base.drv = drv;
    c->base.peer = peer;
    c->base.max_frame = HC_TCP_MAX_FRAME;
    c->base.eager_max = HC_TCP_EAGER_MAX;
    c->drv = d;
    c->addr = a;
    char s[56];
    hc_drv_tcp_addr_str(a.family, a.addr, a.port, s, sizeof(s));
    snprintf(c->name, sizeof(c->name), "rank %d (%s)", peer, s);
    for (int i = 0; i < HC_TCP_MAX_SOCKS; i++) {
        c->slots[i].obj = HC_TCP_OBJ_SLOT;
        c->slots[i].fd = -1;
        c->slots[i].idx = i;
        c->slots[i].conn = c;
    }
    if (d->nrails > 1) hc_drv_tcp_rail_conn_init(c);
    d->conns[peer] = c;
    *conn_p = &c->base;
    hc_drv_tcp_anon_unpark(d, peer);
    return HCOMM_OK;
}

/* ---- connection establishment -------------------------------------------------- */

void hc_drv_tcp_conn_activate(hc_tcp_conn_t *c)
{
    if (c->active) return;
    c->active = true;
    c->last_rx_ns = c->last_tx_ns = c->last_act_ns = hc_time_ns();
    c->active_next = c->drv->active;
    c->drv->active = c;
}

/* Starts the connect of socket idx: the socket is CONNECTING, or s->err
 * holds why not (reported by progress, never from inside a put). */
hcomm_status_t hc_drv_tcp_slot_connect(hc_tcp_conn_t *c, int idx)
{
    hc_tcp_drv_t *d = c->drv;
    hc_tcp_slot_t *s = &c->slots[idx];
    struct sockaddr_storage sa = {0};
    socklen_t salen;
    int rail = d->pre ? idx / HC_TCP_RAIL_STRIDE : 0;
    int lif = d->pre ? c->lif[rail] : 0, rif = d->pre ? c->rif[rail] : 0; /* the pair */
    const uint8_t *addr = d->pre ? c->addr.rail[rif].addr : c->addr.addr;
    uint16_t port = d->pre ? c->addr.rail[rif].port : c->addr.port;
    if (c->addr.family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&sa;
        in->sin_family = AF_INET;
        in->sin_port = port;
        memcpy(&in->sin_addr, addr, 4);
        salen = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&sa;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = port;
        memcpy(&in6->sin6_addr, addr, 16);
        salen = sizeof(*in6);
    }
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return hc_error_errno(HCOMM_ERR_IO, errno, "tcp: socket for %s", c->name);
    s->zc_on = hc_drv_tcp_sock_opts(d, fd);
    if (d->pre) {
        /* Rails: leave from this rail's interface (port chosen by the kernel). */
        struct sockaddr_storage src = d->rail_sa[lif];
        ((struct sockaddr_in *)&src)->sin_port = 0;
        if (bind(fd, (struct sockaddr *)&src, d->rail_salen[lif]) != 0)
            hc_log_debug("tcp: bind to rail %d (%s): %s", rail, d->rail_str[lif], strerror(errno));
    }
    if (hc_drv_tcp_ep(d, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLOUT, s) != 0) {
        hcomm_status_t st = hc_error_errno(HCOMM_ERR_IO, errno, "tcp: epoll_ctl for %s", c->name);
        close(fd);
        return st;
    }
    s->fd = fd;
    s->outgoing = true;
    s->state = HC_TCP_S_CONNECTING;
    s->hs_got = 0;
    s->hs_deadline = hc_time_ns() + d->hs_ns;
    hc_drv_tcp_conn_activate(c);
    if (connect(fd, (struct sockaddr *)&sa, salen) != 0 && errno != EINPROGRESS) {
        s->err = errno;
        hc_log_debug("tcp: connect to %s: %s", c->name, strerror(errno));
    }
    return HCOMM_OK;
}

/* Waits up to HC_TCP_CONNECT_WAIT_MS for the connects of c's CONNECTING
 * sockets and writes each one's hello as it completes. What does not
 * complete in time (or fails) is left to progress. */
static void hc_drv_tcp_connect_wait(hc_tcp_conn_t *c)
{
    uint64_t wait = HC_TCP_CONNECT_WAIT_MS * 1000000ull;
    if (c->drv->pre) wait = HC_MIN(wait, c->drv->rail_bound_ns); /* rails: another rail waits */
    uint64_t end = hc_time_ns() + wait;
    for (;;) {
        struct pollfd p[HC_TCP_MAX_SOCKS];
        hc_tcp_slot_t *ps[HC_TCP_MAX_SOCKS];
        int n = 0;
        for (int i = 0; i < HC_TCP_MAX_SOCKS; i++) {
            hc_tcp_slot_t *s = &c->slots[i];
            if (s->state != HC_TCP_S_CONNECTING || s->err) continue;
            p[n] = (struct pollfd){.fd = s->fd, .events = POLLOUT};
            ps[n++] = s;
        }
        uint64_t now = hc_time_ns();
        if (n == 0 || now >= end) return;
        int k = poll(p, (nfds_t)n, (int)((end - now + 999999) / 1000000));
        if (k < 0 && errno != EINTR) return;
        for (int j = 0; j < n && k > 0; j++) {
            if (!p[j].revents) continue;
            int err = hc_drv_tcp_hello_send(ps[j]);
            if (err) ps[j]->err = err; /* its epoll event fails the peer, naming it */
        }
    }
}

hcomm_status_t hc_drv_tcp_slot_start(hc_tcp_conn_t *c, int idx)
{
    hcomm_status_t st = hc_drv_tcp_slot_connect(c, idx);
    /* Socket 0 carries the driver's own frames (heartbeats, goodbye, the
     * idle close): a peer reached on another socket (a lane's) has it too. */
    if (st == HCOMM_OK && idx != 0 && c->slots[0].state == HC_TCP_S_NONE && !c->drv->pre)
        st = hc_drv_tcp_slot_connect(c, 0);
    if (st == HCOMM_OK) hc_drv_tcp_connect_wait(c);
    return st;
}

void hc_drv_tcp_slot_drop_fd(hc_tcp_slot_t *s)
{
    if (s->fd >= 0) {
        epoll_ctl(s->conn->drv->epfd, EPOLL_CTL_DEL, s->fd, NULL);
        close(s->fd);
    }
    s->fd = -1;
    s->wr_shut = false;
}

void hc_drv_tcp_slot_up(hc_tcp_slot_t *s)
{
    hc_tcp_conn_t *c = s->conn;
    if (!s->rbuf) {
        s->rcap = HC_TCP_MAX_FRAME + sizeof(hc_frame_hdr_t) + HC_TCP_RBUF_SLACK;
        s->rbuf = malloc(s->rcap);
        if (!s->rbuf) {
            hc_drv_tcp_conn_fail(c, "out of memory for the receive buffer of %s", c->name);
            return;
        }
    }
    s->rstart = s->rend = 0;
    s->state = HC_TCP_S_UP;
    c->last_rx_ns = hc_time_ns();
    hc_log_debug("tcp: socket %d to %s up (%s)", s->idx, c->name,
                 s->outgoing ? "connected" : "accepted");
    if (c->drv->pre) hc_drv_tcp_rail_slot_up(s);
    if (s->txq.head) hc_drv_tcp_flush_mark(s);
}

/* ---- failure and teardown ------------------------------------------------------- */

void hc_drv_tcp_slot_close(hc_tcp_slot_t *s, hcomm_status_t status)
{
    hc_drv_tcp_slot_drop_fd(s);
    hc_drv_tcp_txq_fail(s, status);
    free(s->rbuf);
    s->rbuf = NULL;
    s->rstart = s->rend = s->rcap = 0;
    s->state = HC_TCP_S_NONE;
    s->err = 0;
}

void hc_drv_tcp_conn_fail(hc_tcp_conn_t *c, const char *fmt, ...)
{
    if (c->failed) return;
    char why[480]; /* with rails it names every one */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    c->failed = true;
    /* Completions first: the core frees requests once the failure reaches
     * them, and no put_done may name a freed request afterwards. */
    for (int i = 0; i < HC_TCP_MAX_SOCKS; i++)
        hc_drv_tcp_slot_close(&c->slots[i], HCOMM_ERR_PEER_FAILED);
    hc_log_warn("tcp: %s", why);
    const hc_drv_env_t *env = c->drv->env;
    env->peer_failed(env->core, c->base.peer, HCOMM_ERR_PEER_FAILED, why);
}

/* Best effort on the way out: a goodbye so the peer does not take our EOF
 * for a crash, and what is queued, for at most a short while. */
static void hc_drv_tcp_conn_drain(hc_tcp_conn_t *c, uint64_t deadline)
{
    hc_tcp_slot_t *s0 = &c->slots[0];
    c->hold = false; /* on the way out, frames held by an idle close go too */
    /* (a socket whose verdict we have not read yet takes frames too) */
    if (!c->failed && c->drv->pre) {
        /* Rails: on every socket, before its EOF. */
        for (int i = 0; i < HC_TCP_MAX_SOCKS; i++)
            if (c->slots[i].state == HC_TCP_S_UP)
                hc_drv_tcp_rail_ctrl(&c->slots[i], HC_TCP_FRAME_BYE, 0, 0, 0);
    } else if (!c->failed && (s0->state == HC_TCP_S_UP || s0->state == HC_TCP_S_HELLO_SENT)) {
        hc_frame_hdr_t bye = {.type = HC_TCP_FRAME_BYE};
        hc_drv_tcp_put(&c->base, &bye, NULL, NULL);
    }
    for (int i = 0; i < HC_TCP_MAX_SOCKS; i++) {
        hc_tcp_slot_t *s = &c->slots[i];
        while (!c->failed && (s->state == HC_TCP_S_UP || s->state == HC_TCP_S_HELLO_SENT) &&
               (s->txq.head || s->zcwait.head) && hc_time_ns() < deadline) {
            hc_drv_tcp_flush(s);
            if (s->zcwait.head || s->txq.head) {
                struct pollfd p = {.fd = s->fd, .events = POLLOUT};
                poll(&p, 1, 10);
                hc_drv_tcp_progress(&c->drv->base);
            }
        }
        if (s->fd >= 0) shutdown(s->fd, SHUT_WR);
    }
}

static void hc_drv_tcp_disconnect(hc_conn_t *conn)
{
    hc_tcp_conn_t *c = (hc_tcp_conn_t *)conn;
    hc_tcp_drv_t *d = c->drv;
    d->closing = true;
    hc_drv_tcp_conn_drain(c, hc_time_ns() + 1000000000ull);
    for (int i = 0; i < HC_TCP_MAX_SOCKS; i++) {
        hc_tcp_slot_t *s = &c->slots[i];
        hc_drv_tcp_txq_forget(s); /* the core is going away: no put_done */
        hc_drv_tcp_slot_close(s, HCOMM_ERR_ABORTED);
    }
    for (hc_tcp_slot_t **pp = &d->flush; *pp;) {
        if ((*pp)->conn == c)
            *pp = (*pp)->flush_next;
        else
            pp = &(*pp)->flush_next;
    }
    for (hc_tcp_conn_t **pp = &d->active; *pp; pp = &(*pp)->active_next)
        if (*pp == c) {
            *pp = c->active_next;
            break;
        }
    d->conns[conn->peer] = NULL;
    free(c);
}

/* "2,3" for a mask of lanes ("none" for 0). */
static void hc_drv_tcp_lanes_str(uint32_t mask, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int l = 0; l < HC_FRAME_LANES && n < len; l++)
        if (mask & (1u << l)) n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? "," : "", l);
    if (!mask) snprintf(buf, len, "none");
}

/* HCOMM_LOG=info at close: what each socket index carried, over all peers. */
static void hc_drv_tcp_log_sockets(const hc_tcp_drv_t *d)
{
    for (int i = 0; i < d->nsocks; i++) {
        const hc_tcp_sock_stats_t *st = &d->sock[i];
        if (!st->tx_frames && !st->rx_frames) continue;
        char tl[64], rl[64];
        hc_drv_tcp_lanes_str(st->tx_lanes, tl, sizeof(tl));
        hc_drv_tcp_lanes_str(st->rx_lanes, rl, sizeof(rl));
        hc_log_info("tcp: socket %d: sent %llu frames (%.2f MiB; lanes %s), received %llu frames "
                    "(%.2f MiB; lanes %s)",
                    i, (unsigned long long)st->tx_frames, (double)st->tx_bytes / 1048576.0, tl,
                    (unsigned long long)st->rx_frames, (double)st->rx_bytes / 1048576.0, rl);
    }
}

static void hc_drv_tcp_close(hc_drv_t *drv)
{
    hc_tcp_drv_t *d = (hc_tcp_drv_t *)drv;
    hc_drv_tcp_log_sockets(d);
    d->closing = true;
    for (int r = 0; r < d->env->size; r++)
        if (d->conns[r]) hc_drv_tcp_disconnect(&d->conns[r]->base);
    while (d->anon)
        hc_drv_tcp_anon_free(d, d->anon, true);
    hc_drv_tcp_tx_free_all(d);
    close(d->listen.fd);
    for (int r = 1; r < d->nrails; r++)
        close(d->listen_rail[r].fd);
    close(d->epfd);
    free(d->conns);
    free(d);
}

static void hc_drv_tcp_counters(hc_drv_t *drv,
                                void (*kv)(const char *name, uint64_t value, void *arg), void *arg)
{
    hc_tcp_drv_t *d = (hc_tcp_drv_t *)drv;
    kv("heartbeats_sent", d->n_hb_sent, arg);
    kv("heartbeat_probes", d->n_hb_probes, arg);
    kv("heartbeats_received", d->n_hb_rx, arg);
    kv("peers_suspected", d->n_suspects, arg);
    kv("idle_closed", d->idle_closed, arg);
    kv("stall_kicks", d->n_stall_kicks, arg);
    if (d->nrails > 1) {
        kv("rails_left", d->n_rail_left, arg);
        kv("rails_rejoined", d->n_rail_rejoined, arg);
        kv("rail_returns", d->n_rail_returns, arg);
        kv("rail_probes", d->n_rail_probes, arg);
        kv("frames_resent", d->n_resent, arg);
        kv("duplicates_dropped", d->n_dups, arg);
        kv("gaps_dropped", d->n_gaps, arg);
        kv("channel_resends", d->n_resyncs, arg);
        kv("acks_sent", d->n_acks, arg);
        kv("rail_rate_probes", d->n_rate_probes, arg);
        kv("ordered_rail_moves", d->n_ordered_moves, arg);
        for (int r = 0; r < d->nrails; r++) {
            char name[32];
            snprintf(name, sizeof(name), "rail%d_tx_bytes", r);
            kv(name, d->rail_tx_bytes[r], arg);
            snprintf(name, sizeof(name), "rail%d_rx_bytes", r);
            kv(name, d->rail_rx_bytes[r], arg);
        }
    }
    /* Per socket index (the lanes' sockets): core frames and bytes each
     * way, and which lanes used it (bit masks); sockets that carried
     * nothing are left out. */
    for (int i = 0; i < d->nsocks; i++) {
        const hc_tcp_sock_stats_t *st = &d->sock[i];
        if (!st->tx_frames && !st->rx_frames) continue;
        char name[32];
        const struct {
            const char *what;
            uint64_t v;
        } f[] = {{"tx_frames", st->tx_frames}, {"tx_bytes", st->tx_bytes},
                 {"rx_frames", st->rx_frames}, {"rx_bytes", st->rx_bytes},
                 {"tx_lanes", st->tx_lanes},   {"rx_lanes", st->rx_lanes}};
        for (size_t k = 0; k < sizeof(f) / sizeof(f[0]); k++) {
            snprintf(name, sizeof(name), "socket%d_%s", i, f[k].what);
            kv(name, f[k].v, arg);
        }
    }
}

/* The core learned that peer failed (its bootstrap connection closed, ...): with
 * rails, whose sockets closing only leaves rails, the peer is failed here
 * at once rather than after HCOMM_CONN_FAIL_TIMEOUT. */
static void hc_drv_tcp_peer_gone(hc_drv_t *drv, int peer)
{
    hc_tcp_drv_t *d = (hc_tcp_drv_t *)drv;
    if (!d->pre || peer < 0 || peer >= d->env->size || !d->conns[peer]) return;
    hc_drv_tcp_conn_fail(d->conns[peer], "%s failed (reported by the core)", d->conns[peer]->name);
}

/* hcomm_info --topo: with rails, each rail of the connection: this side's
 * interface and address, the peer's, and whether it is up (or why it was
 * left). */
static void hc_drv_tcp_links(hc_conn_t *conn, char *buf, size_t len)
{
    hc_tcp_conn_t *c = (hc_tcp_conn_t *)conn;
    hc_tcp_drv_t *d = c->drv;
    size_t off = 0;
    buf[0] = '\0';
    for (int r = 0; d->pre && r < c->nrails && off < len; r++) {
        char peer[80];
        const hc_tcp_rail_addr_t *a = &c->addr.rail[c->rif[r]];
        hc_drv_tcp_addr_str(a->family, a->addr, a->port, peer, sizeof(peer));
        const hc_tcp_rail_t *rail = &c->rail[r];
        off += (size_t)snprintf(buf + off, len - off, "%srail %d %s %s -> %s %s%s%s", r ? "; " : "",
                                r, d->rail_if[c->lif[r]], d->rail_str[c->lif[r]], peer,
                                rail->up ? "up" : "down", rail->up || !rail->brief[0] ? "" : ": ",
                                rail->up ? "" : rail->brief);
    }
}

static void hc_drv_tcp_local_links(hc_drv_t *drv, char *buf, size_t len)
{
    const hc_tcp_drv_t *d = (const hc_tcp_drv_t *)drv;
    size_t off = 0;
    buf[0] = '\0';
    for (int r = 0; r < d->nrails && off < len; r++) {
        char ip[64];
        hc_drv_tcp_ip_str(&d->rail_sa[r], ip, sizeof(ip));
        off += (size_t)snprintf(buf + off, len - off, "%s%s %s", r ? "," : "", d->rail_if[r], ip);
    }
}

static const struct hc_drv_ops hc_drv_tcp_ops = {
    .name = "tcp",
    .scope = HC_DRV_SCOPE_NET,
    .priority = 10,
    .probe = hc_drv_tcp_probe,
    .open = hc_drv_tcp_open,
    .addr_pack = hc_drv_tcp_addr_pack,
    .connect = hc_drv_tcp_connect,
    .put = hc_drv_tcp_put,
    .progress = hc_drv_tcp_progress,
    .disconnect = hc_drv_tcp_disconnect,
    .close = hc_drv_tcp_close,
    .counters = hc_drv_tcp_counters,
    .describe = hc_drv_tcp_describe,
    .peer_gone = hc_drv_tcp_peer_gone,
    .links = hc_drv_tcp_links,
    .local_links = hc_drv_tcp_local_links,
    .explain = hc_drv_tcp_explain,
};
HC_DRV_REGISTER(hc_drv_tcp_ops)
