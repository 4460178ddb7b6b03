/*
 * Rendezvous: a star around rank 0 over kernel TCP, used once at init to
 * exchange the transports' address blobs, then kept for rare allgathers,
 * barriers and as a liveness signal (a closed socket = a dead rank).
 *
 * Rank 0's port is reachable by anything on the network, so rank 0 treats
 * every connection as hostile until it proves the job key (bootstrap_auth.c:
 * HMACs over both sides' nonces; the key never travels): the header is
 * validated before any body is buffered (bounded memory per connection), a
 * PROOF's MAC is checked before its blob is read, and a connection that is
 * malformed, fails the proof or is silent past HC_BS_HELLO_SILENCE is closed
 * and logged without affecting the others. A peer that proves the key is a
 * member: if it is misconfigured (its size, a duplicate rank, its blob
 * length) rank 0 refuses it with the reason and fails the whole job at once.
 * When more connections wait for their hello than rank 0 keeps, the one that
 * has waited longest is dropped, never the newcomer, so a flood of idle
 * clients delays nobody's join; it is told BUSY, and a real rank that was
 * merely slow to send its hello connects again.
 * Nothing blocks: every socket is non-blocking and every wait is a poll()
 * bounded by the caller's deadline.
 *
 * Failures travel: when rank 0 gives up (a rank never came, a member was
 * refused, a rank died mid-allgather) it sends ABORT with the reason to the
 * ranks that are still connected, so each of them reports "rank 2 never
 * joined" rather than a bare timeout. Non-zero ranks therefore wait a short
 * grace past their deadline for rank 0's verdict while opening (their clocks
 * started at slightly different times).
 */
#include "core/bootstrap_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define HC_BS_EXTRA_PENDING 64    /* connections beyond size-1 that may wait for hello */
#define HC_BS_CONNECT_ATTEMPT 5.0 /* seconds one connect() may take before a retry */
#define HC_BS_BACKOFF_MIN 0.001
#define HC_BS_BACKOFF_MAX 0.100
#define HC_BS_PORT_SPAN_MAX 256   /* ports a span may cover */

/* A collective's wait sleeps at most this long between idle calls. */
#define HC_BS_IDLE_MS 1

static void hc_bs_notice_msg(hc_bootstrap_t *bs, int from, const hc_bootstrap_msg_t *m);
static void hc_bs_relay_msg(hc_bootstrap_t *bs, int from, const hc_bootstrap_msg_t *m);

/* Messages that may come between allgathers or inside one (failure notices,
 * relayed blobs): taken wherever the star is read, never by the hello. */
static bool hc_bs_is_sideband(uint32_t type)
{
    return type == HC_BOOTSTRAP_MSG_FAILED || type == HC_BOOTSTRAP_MSG_RELAY;
}

/* Connection i (rank 0: rank i; others: 0) can still be written to. */
static bool hc_bs_conn_up(const hc_bootstrap_t *bs, int i)
{
    return i >= 0 && i < bs->nconns && bs->conns[i].fd >= 0 && !bs->conns[i].gone;
}

static void hc_bs_sideband(hc_bootstrap_t *bs, int from, const hc_bootstrap_msg_t *m)
{
    if (m->type == HC_BOOTSTRAP_MSG_FAILED)
        hc_bs_notice_msg(bs, from, m);
    else
        hc_bs_relay_msg(bs, from, m);
}

/* ---- small helpers --------------------------------------------------------- */

static int hc_bs_poll_ms(double deadline)
{
    double left = deadline - hc_time_sec();
    if (left <= 0) return 0;
    return left > 3600.0 ? 3600000 : (int)ceil(left * 1000.0);
}

static void hc_bs_sleep(double sec)
{
    struct timespec ts = {(time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

void hc_bs_conn_init(hc_bs_conn_t *c)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->rank = -1;
}

void hc_bs_conn_close(hc_bs_conn_t *c)
{
    if (c->fd >= 0) close(c->fd);
    free(c->buf);
    hc_bs_conn_init(c);
}

static void hc_bs_sockaddr_str(const struct sockaddr *sa, socklen_t len, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN + 8], port[16];
    if (getnameinfo(sa, len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, cap, "(unknown address)");
        return;
    }
    snprintf(out, cap, sa->sa_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
}

static void hc_bs_set_nodelay(int fd)
{
    int one = 1;
    /* Failure only costs latency on a control path: not worth failing for. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

hcomm_status_t hc_bs_send_msg(int fd, const hc_bootstrap_msg_t *m, double deadline,
                              const char *what, int peer)
{
    uint8_t hdr[HC_BOOTSTRAP_HDR_LEN + HC_BOOTSTRAP_MAX_AUTH];
    long hlen = hc_bootstrap_msg_pack_header(m, hdr, sizeof(hdr));
    if (hlen < 0)
        return hc_error(HCOMM_ERR_INTERNAL, "%s: cannot encode a message of type %u", what,
                        m->type);
    struct iovec iov[2] = {{hdr, (size_t)hlen}, {(void *)m->payload, (size_t)m->payload_len}};
    int iovcnt = m->payload_len ? 2 : 1, i = 0;
    while (i < iovcnt) {
        struct msghdr mh = {.msg_iov = iov + i, .msg_iovlen = (size_t)(iovcnt - i)};
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return hc_error_errno(errno == EPIPE || errno == ECONNRESET ? HCOMM_ERR_PEER_FAILED
                                                                            : HCOMM_ERR_IO,
                                      errno, "%s: sending to rank %d failed", what, peer);
            struct pollfd pfd = {fd, POLLOUT, 0};
            int ms = hc_bs_poll_ms(deadline);
            if (ms == 0)
                return hc_error(HCOMM_ERR_TIMEOUT, "%s: timed out sending to rank %d", what, peer);
            (void)poll(&pfd, 1, ms);
            continue;
        }
        size_t left = (size_t)n;
        while (i < iovcnt && left >= iov[i].iov_len)
            left -= iov[i++].iov_len;
        if (i < iovcnt) {
            iov[i].iov_base = (uint8_t *)iov[i].iov_base + left;
            iov[i].iov_len -= left;
        }
    }
    return HCOMM_OK;
}

hc_bs_rx_t hc_bs_conn_read(hc_bs_conn_t *c, const hc_bs_expect_t *e, char *why, size_t whycap)
{
    for (;;) {
        size_t need = c->have < HC_BOOTSTRAP_HDR_LEN ? HC_BOOTSTRAP_HDR_LEN : c->need;
        if (c->have >= HC_BOOTSTRAP_HDR_LEN && c->have == need) return HC_BS_RX_DONE;
        if (c->cap < need) {
            uint8_t *nb = realloc(c->buf, need);
            if (nb == NULL) {
                snprintf(why, whycap, "out of memory for a %zu-byte message", need);
                return HC_BS_RX_BAD;
            }
            c->buf = nb;
            c->cap = need;
        }
        ssize_t n = recv(c->fd, c->buf + c->have, need - c->have, MSG_DONTWAIT);
        if (n == 0) {
            snprintf(why, whycap, "connection closed");
            return HC_BS_RX_EOF;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return HC_BS_RX_MORE;
            snprintf(why, whycap, "recv: %s", strerror(errno));
            return HC_BS_RX_EOF;
        }
        c->have += (size_t)n;
        hc_bootstrap_msg_t m;
        long total = hc_bootstrap_msg_parse_header(c->buf, c->have, &m);
        if (total < 0) {
            uint32_t v = hc_bootstrap_msg_version(c->buf, c->have);
            if (v && v != HC_BOOTSTRAP_VERSION)
                snprintf(why, whycap, "bootstrap protocol %u (this hcomm speaks %u)", v,
                         HC_BOOTSTRAP_VERSION);
            else
                snprintf(why, whycap, "malformed message header");
            return HC_BS_RX_BAD;
        }
        if (c->have != HC_BOOTSTRAP_HDR_LEN || total == 0) continue;
        bool notice = e->notices && hc_bs_is_sideband(m.type);
        /* Rank 0's verdicts (ABORT; BUSY and REFUSE to a rank in its
         * handshake) may come in place of the expected message. */
        bool handshake = e->type == HC_BOOTSTRAP_MSG_TABLE || e->type == HC_BOOTSTRAP_MSG_CHALLENGE;
        bool verdict =
            m.type == HC_BOOTSTRAP_MSG_ABORT ||
            (handshake && (m.type == HC_BOOTSTRAP_MSG_BUSY || m.type == HC_BOOTSTRAP_MSG_REFUSE));
        if (m.type != e->type && !verdict && !notice) {
            snprintf(why, whycap, "message type %u where %u was expected", m.type, e->type);
            return HC_BS_RX_BAD;
        }
        if (!verdict && e->size && m.size != e->size) {
            snprintf(why, whycap, "job size %u, this job has %u ranks", m.size, e->size);
            return HC_BS_RX_BAD;
        }
        if (!verdict && !notice && !e->any_payload && m.payload_len != e->payload_len) {
            snprintf(why, whycap, "payload of %llu bytes, expected %llu",
                     (unsigned long long)m.payload_len, (unsigned long long)e->payload_len);
            return HC_BS_RX_BAD;
        }
        c->need = e->auth_first && !verdict ? HC_BOOTSTRAP_HDR_LEN + m.auth_len : (size_t)total;
    }
}

hcomm_status_t hc_bs_conn_wait(hc_bs_conn_t *c, const hc_bs_expect_t *e, double deadline,
                               hc_bootstrap_msg_t *m_p, char *why, size_t whycap)
{
    for (;;) {
        hc_bs_rx_t r = hc_bs_conn_read(c, e, why, whycap);
        if (r == HC_BS_RX_DONE) {
            (void)hc_bootstrap_msg_parse(c->buf, c->have, m_p);
            c->have = 0;
            return HCOMM_OK;
        }
        if (r == HC_BS_RX_EOF) return HCOMM_ERR_PEER_FAILED;
        if (r == HC_BS_RX_BAD) return HCOMM_ERR_BOOTSTRAP;
        int ms = hc_bs_poll_ms(deadline);
        if (ms == 0) {
            snprintf(why, whycap, "timed out");
            return HCOMM_ERR_TIMEOUT;
        }
        bool idle = c->bs && c->bs->idle;
        struct pollfd pfd = {c->fd, POLLIN, 0};
        if (poll(&pfd, 1, idle ? HC_MIN(ms, HC_BS_IDLE_MS) : ms) == 0 && idle)
            c->bs->idle(c->bs->idle_arg);
    }
}

hcomm_status_t hc_bs_abort_decode(const hc_bootstrap_msg_t *m, char *text, size_t cap)
{
    const uint8_t *p = m->payload;
    int32_t code = (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
    size_t n = HC_MIN((size_t)m->payload_len - 4, cap - 1);
    for (size_t i = 0; i < n; i++)
        text[i] = p[4 + i] >= 0x20 && p[4 + i] < 0x7f ? (char)p[4 + i] : '?';
    text[n] = '\0';
    switch (code) {
    case HCOMM_ERR_TIMEOUT:
    case HCOMM_ERR_PEER_FAILED:
    case HCOMM_ERR_BOOTSTRAP:
    case HCOMM_ERR_INVALID:
    case HCOMM_ERR_IO:
        return (hcomm_status_t)code;
    default:
        return HCOMM_ERR_BOOTSTRAP;
    }
}

/* Rank 0 tells every connected rank why the job stops; best effort, one
 * non-blocking send each: a rank whose socket is full learns from EOF. */
void hc_bs_abort_all(hc_bootstrap_t *bs, hcomm_status_t st, const char *text)
{
    uint8_t payload[4 + HC_BOOTSTRAP_MAX_ABORT_TEXT];
    char saved[HC_BOOTSTRAP_MAX_ABORT_TEXT + 1];
    /* text is usually hc_error_last(), which a failed send below would
     * overwrite: the caller must still see the original reason. */
    snprintf(saved, sizeof(saved), "%s", text);
    text = saved;
    size_t tl = HC_MIN(strlen(text), (size_t)HC_BOOTSTRAP_MAX_ABORT_TEXT);
    uint32_t code = (uint32_t)(int32_t)st;
    for (int i = 0; i < 4; i++)
        payload[i] = (uint8_t)(code >> (8 * i));
    memcpy(payload + 4, text, tl);
    for (int i = 0; i < bs->nconns; i++) {
        hc_bs_conn_t *c = &bs->conns[i];
        if (c->fd < 0 || c->rank <= 0) continue;
        hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC,
                                HC_BOOTSTRAP_VERSION,
                                HC_BOOTSTRAP_MSG_ABORT,
                                0,
                                (uint32_t)bs->size,
                                0,
                                NULL,
                                4 + tl,
                                payload};
        (void)hc_bs_send_msg(c->fd, &m, 0.0, "abort", c->rank);
    }
    (void)hc_error(st, "%s", saved);
}

/* "2, 5, 7" of the ranks whose flag is false, truncated to fit. */
static void hc_bs_rank_list(const bool *have, int size, char *out, size_t cap)
{
    size_t n = 0;
    int listed = 0, missing = 0;
    out[0] = '\0';
    for (int r = 0; r < size; r++) {
        if (have[r]) continue;
        missing++;
        if (n + 24 < cap) {
            n += (size_t)snprintf(out + n, cap - n, "%s%d", listed ? ", " : "", r);
            listed++;
        }
    }
    if (listed < missing) snprintf(out + n, cap - n, " and %d more", missing - listed);
}

/* ---- rank 0: listening and the address file ------------------------------- */

/* DIR/hcomm-<tag>.addr: the tag says which job without saying anything
 * about its key (bootstrap_auth.c). */
static hcomm_status_t hc_bs_addr_file_path(const hc_bootstrap_url_t *u, const char *key, char *out,
                                           size_t cap)
{
    char tag[24] = "nokey";
    hcomm_status_t st = key[0] ? hc_bs_auth_file_tag(key, tag, sizeof(tag)) : HCOMM_OK;
    if (st == HCOMM_OK) snprintf(out, cap, "%s/hcomm-%s.addr", u->dir, tag);
    return st;
}

const char *hc_bs_key_name(const hc_bootstrap_params_t *p)
{
    return p->source && !strcmp(p->source, "hcomm_init_rank") ? "job_key" : "HCOMM_JOB_KEY";
}

/* Listens on host:port; *err_p (when not NULL): the errno of the failure,
 * 0 on success. */
static hcomm_status_t hc_bs_listen_on(const char *host, const char *port, int *fd_p, char *where,
                                      size_t wcap, int *err_p)
{
    if (err_p) *err_p = 0;
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res, *ai;
    int rc = getaddrinfo(host, port, &hints, &res), err = 0;
    if (rc != 0)
        return hc_error(HCOMM_ERR_BOOTSTRAP, "hc_bootstrap_open: cannot resolve %s: %s", host,
                        gai_strerror(rc));
    for (ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
        if (fd < 0) {
            err = errno;
            continue;
        }
        /* A restarted job must not wait out TIME_WAIT on the same port. */
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4096) == 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof(ss);
            if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
                hc_bs_sockaddr_str((struct sockaddr *)&ss, sl, where, wcap);
            freeaddrinfo(res);
            *fd_p = fd;
            return HCOMM_OK;
        }
        err = errno;
        close(fd);
    }
    freeaddrinfo(res);
    if (err_p) *err_p = err;
    return hc_error_errno(HCOMM_ERR_BOOTSTRAP, err,
                          "hc_bootstrap_open: cannot listen on %s:%s%s", host, port,
                          err == EADDRINUSE ? " (another process holds the port: set "
                                              "HCOMM_BOOTSTRAP=tcp://host:PORT to a free one; "
                                              "under torchrun hcomm uses MASTER_PORT+1)"
                                            : "");
}

/* file://: an ephemeral port on this host's address, published atomically. */
static hcomm_status_t hc_bs_listen_file(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                                        const hc_bootstrap_url_t *u, int *fd_p)
{
    char host[256], where[128], tmp[700], line[160];
    hcomm_status_t st = HCOMM_ERR_BOOTSTRAP;
    int fd = -1, ffd;

    if (gethostname(host, sizeof(host)) == 0) {
        host[sizeof(host) - 1] = '\0';
        st = hc_bs_listen_on(host, "0", &fd, where, sizeof(where), NULL);
    }
    if (st != HCOMM_OK) {
        hc_log_info("bootstrap: host name does not resolve to a bindable address, using "
                    "127.0.0.1 (single-node job only)");
        st = hc_bs_listen_on("127.0.0.1", "0", &fd, where, sizeof(where), NULL);
        if (st != HCOMM_OK) return st;
    }
    st = hc_bs_addr_file_path(u, p->job_key, bs->addr_file, sizeof(bs->addr_file));
    if (st != HCOMM_OK) goto err_close_fd;
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", bs->addr_file, (int)getpid());
    int n = snprintf(line, sizeof(line), "tcp://%s\n", where);
    ffd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (ffd < 0) {
        st = hc_error_errno(HCOMM_ERR_BOOTSTRAP, errno, "hc_bootstrap_open: cannot create %s", tmp);
        goto err_close_fd;
    }
    if (write(ffd, line, (size_t)n) != n || fsync(ffd) != 0) {
        st = hc_error_errno(HCOMM_ERR_BOOTSTRAP, errno, "hc_bootstrap_open: cannot write %s", tmp);
        close(ffd);
        goto err_unlink;
    }
    close(ffd);
    if (rename(tmp, bs->addr_file) != 0) {
        st = hc_error_errno(HCOMM_ERR_BOOTSTRAP, errno, "hc_bootstrap_open: cannot rename %s", tmp);
        goto err_unlink;
    }
    hc_log_info("bootstrap: rank 0 listens on %s, published in %s", where, bs->addr_file);
    *fd_p = fd;
    return HCOMM_OK;

err_unlink:
    unlink(tmp);
err_close_fd:
    close(fd);
    bs->addr_file[0] = '\0';
    return st;
}

/* ---- rank 0: collecting hellos -------------------------------------------- */

/* Rejections are logged one by one up to HC_BS_REJECT_LOG_MAX a second;
 * past that a flood is summed up once a second, so that it cannot flood the
 * log too. */
#define HC_BS_REJECT_LOG_MAX 10
static _Thread_local struct {
    double window;        /* start of the current one-second window */
    unsigned logged;      /* rejections logged in it */
    unsigned long quiet;  /* rejections not logged since the last summary */
} hc_bs_rejects;

static void hc_bs_reject_summary(double now)
{
    if (hc_bs_rejects.quiet)
        hc_log_warn("bootstrap: %lu more connections rejected in %.1f s (not logged one by one)",
                    hc_bs_rejects.quiet, now - hc_bs_rejects.window);
    hc_bs_rejects.window = now;
    hc_bs_rejects.logged = 0;
    hc_bs_rejects.quiet = 0;
}

void hc_bs_reject(hc_bs_conn_t *c, const char *why)
{
    double now = hc_time_sec();
    if (now - hc_bs_rejects.window >= 1.0) hc_bs_reject_summary(now);
    if (hc_bs_rejects.logged < HC_BS_REJECT_LOG_MAX) {
        hc_bs_rejects.logged++;
        hc_log_warn("bootstrap: rejected connection from %s: %s", c->peer, why);
    } else {
        hc_bs_rejects.quiet++;
    }
    hc_bs_conn_close(c);
}

/* The pending connection to drop when the list is full: the first accepted
 * of those that sent nothing yet, else the first accepted, among those
 * accepted up to max_seq (earlier rounds: each connection gets at least one
 * read pass). npend when there is none. */
static size_t hc_bs_pending_victim(const hc_bs_conn_t *pend, size_t npend, uint64_t max_seq)
{
    size_t best = npend;
    for (size_t i = 0; i < npend; i++) {
        if (pend[i].seq > max_seq) continue;
        if (best == npend) {
            best = i;
            continue;
        }
        bool silent_i = pend[i].have == 0, silent_b = pend[best].have == 0;
        if (silent_i != silent_b ? silent_i : pend[i].seq < pend[best].seq) best = i;
    }
    return best;
}

/* Drops a pending connection to make room. A rank whose process was slow
 * to run between connect() and its hello looks exactly like a flood client,
 * so it is not simply closed: its handshake is advanced once more (a message
 * may have arrived since the last poll), and if it is still pending rank 0
 * says BUSY before closing, which a rank answers by connecting again. The
 * read also drains what is there, so the close is a FIN that lets BUSY
 * arrive, not a reset that could discard it. */
static void hc_bs_evict(hc_bs_gather_t *g, hc_bs_conn_t *c, size_t npend, double now)
{
    char why[160];
    if (!hc_bs_auth_root_step(g, c)) return; /* joined or refused meanwhile */
    hc_bootstrap_msg_t busy = {HC_BOOTSTRAP_MAGIC,
                               HC_BOOTSTRAP_VERSION,
                               HC_BOOTSTRAP_MSG_BUSY,
                               0,
                               (uint32_t)g->bs->size,
                               0,
                               NULL,
                               0,
                               NULL};
    (void)hc_bs_send_msg(c->fd, &busy, 0.0, "busy", -1); /* best effort */
    snprintf(why, sizeof(why),
             "%zu connections waiting to say hello, this one the longest (%.1f s); told to "
             "connect again",
             npend, now - c->t_open);
    hc_bs_reject(c, why);
}

/* The deadline passed: who never came, and the latest claim rank 0 refused
 * (a rank whose key differs shows up there). */
static hcomm_status_t hc_bs_gather_timeout(hc_bs_gather_t *g, double timeout)
{
    hc_bootstrap_t *bs = g->bs;
    bool *have = calloc((size_t)bs->size, sizeof(bool));
    char list[200] = "?", claims[400] = "";
    if (have) {
        have[0] = true;
        for (int r = 1; r < bs->size; r++)
            have[r] = bs->conns[r].fd >= 0;
        hc_bs_rank_list(have, bs->size, list, sizeof(list));
        free(have);
    }
    if (g->nclaims)
        snprintf(claims, sizeof(claims), "; rank 0 refused %d connection(s), the latest %s",
                 g->nclaims, g->claim_text);
    hcomm_status_t st = hc_error(HCOMM_ERR_TIMEOUT,
                                 "hc_bootstrap_open: rank(s) %s never joined the rendezvous within "
                                 "%.1f s (%d of %d ranks joined)%s",
                                 list, timeout, g->joined + 1, bs->size, claims);
    hc_bs_abort_all(bs, st, hc_error_last());
    return st;
}

/* Accepts what waits on the listening socket, at most max_pending per round,
 * none that would evict a connection of this round: a client that connects
 * faster than we accept must not keep us from reading the hellos already
 * here, from the deadline check, nor push a rank out before its hello was
 * read once. What is left waits in the listen backlog. */
static void hc_bs_accept_round(hc_bs_gather_t *g, int lfd, hc_bs_conn_t *pend, size_t *npend_p,
                               size_t max_pending, uint64_t *seq_p, bool *flooded_p, double now)
{
    uint64_t round_seq = *seq_p;
    size_t npend = *npend_p;
    for (size_t accepted = 0; accepted < max_pending; accepted++) {
        if (npend == max_pending && hc_bs_pending_victim(pend, npend, round_seq) == npend) break;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                /* Out of descriptors or memory: the listening socket stays
                 * readable, so pause rather than spin. */
                hc_log_warn("bootstrap: accept: %s", strerror(errno));
                hc_bs_sleep(0.01);
            }
            break;
        }
        hc_bs_conn_t c;
        hc_bs_conn_init(&c);
        c.fd = fd;
        c.t_open = now;
        c.seq = ++*seq_p;
        hc_bs_sockaddr_str((struct sockaddr *)&ss, sl, c.peer, sizeof(c.peer));
        hc_bs_set_nodelay(fd);
        if (npend == max_pending) {
            /* Full: make room by dropping the connection that has waited
             * longest (a silent one before one mid-hello). A flood of idle
             * clients thus cannot lock a real rank out: its hello arrives
             * right after connect and is read first in the next round. */
            if (!*flooded_p)
                hc_log_warn("bootstrap: more than %zu connections waiting to say hello: "
                            "dropping the longest-waiting first (a connection flood?)",
                            max_pending);
            *flooded_p = true;
            size_t victim = hc_bs_pending_victim(pend, npend, round_seq);
            hc_bs_evict(g, &pend[victim], npend, now);
            pend[victim] = c;
            continue;
        }
        pend[npend++] = c;
    }
    *npend_p = npend;
}

/* Rank 0 collects every other rank's proof and blob until all have joined,
 * the deadline, or the job fails (then it keeps telling newcomers why for a
 * while: see hc_bs_gather_t). */
static hcomm_status_t hc_bs_root_gather_hellos(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                                               int lfd, double deadline, double timeout)
{
    const size_t max_pending = (size_t)bs->size - 1 + HC_BS_EXTRA_PENDING;
    hc_bs_conn_t *pend = calloc(max_pending, sizeof(*pend));
    struct pollfd *pfds = calloc(max_pending + 1, sizeof(*pfds));
    hc_bs_gather_t g = {.bs = bs, .p = p, .deadline = deadline};
    hcomm_status_t st = HCOMM_OK;
    size_t npend = 0;
    uint64_t seq = 0;
    bool flooded = false;
    char why[160];

    if (pend == NULL || pfds == NULL) {
        st = hc_error(HCOMM_ERR_NO_MEMORY, "hc_bootstrap_open: no memory for %zu connections",
                      max_pending);
        goto out;
    }
    for (;;) {
        double now = hc_time_sec(), wake = g.fail ? g.fail_until : deadline;
        if (g.fail ? g.told >= bs->size - 1 || now >= g.fail_until : g.joined == bs->size - 1)
            break;
        if (now >= deadline) {
            st = hc_bs_gather_timeout(&g, timeout);
            goto out;
        }
        pfds[0] = (struct pollfd){lfd, POLLIN, 0};
        for (size_t i = 0; i < npend; i++) {
            pfds[i + 1] = (struct pollfd){pend[i].fd, POLLIN, 0};
            wake = HC_MIN(wake, pend[i].t_open + HC_BS_HELLO_SILENCE);
        }
        (void)poll(pfds, npend + 1, hc_bs_poll_ms(wake));
        now = hc_time_sec();

        /* Incoming data first: pfds[i + 1] matches pend[i] only until the
         * pending list is compacted below. */
        for (size_t i = 0; i < npend; i++)
            if (pfds[i + 1].revents) (void)hc_bs_auth_root_step(&g, &pend[i]);
        for (size_t i = 0; i < npend; i++) {
            if (pend[i].fd >= 0 && now - pend[i].t_open > HC_BS_HELLO_SILENCE) {
                snprintf(why, sizeof(why), "no complete hello within %.1f s", HC_BS_HELLO_SILENCE);
                hc_bs_reject(&pend[i], why);
            }
        }
        size_t k = 0;
        for (size_t i = 0; i < npend; i++) {
            if (pend[i].fd >= 0) pend[k++] = pend[i];
        }
        npend = k;
        hc_bs_accept_round(&g, lfd, pend, &npend, max_pending, &seq, &flooded, now);
    }
    if (g.fail) st = hc_error(g.fail, "hc_bootstrap_open: %s", g.fail_text);

out:
    for (size_t i = 0; i < npend; i++)
        hc_bs_reject(&pend[i], "rendezvous is over");
    hc_bs_reject_summary(hc_time_sec());
    free(pend);
    free(pfds);
    return st;
}

/* Ports of the span that exist (a span never runs past 65535). */
static int hc_bs_port_span(const hc_bootstrap_params_t *p, const hc_bootstrap_url_t *u)
{
    if (u->is_file || p->port_span <= 1) return 1;
    return HC_MIN(HC_MIN(p->port_span, HC_BS_PORT_SPAN_MAX), 65536 - u->port);
}

static hcomm_status_t hc_bs_root_open(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                                      const hc_bootstrap_url_t *u, double deadline, double timeout)
{
    hcomm_status_t st = HCOMM_ERR_BOOTSTRAP;
    char port[16], where[128];
    int lfd = -1;

    if (p->job_key[0] == '\0' && p->key_expected)
        hc_log_warn("bootstrap: rendezvous is unauthenticated (no %s): any process that reaches "
                    "rank 0's port may join",
                    hc_bs_key_name(p));
    if (u->is_file) {
        st = hc_bs_listen_file(bs, p, u, &lfd);
    } else {
        /* A port span: the first port of it that is free (another job or a
         * service may hold the derived one). */
        int span = hc_bs_port_span(p, u), err = 0;
        for (int k = 0; k < span; k++) {
            snprintf(port, sizeof(port), "%d", u->port + k);
            st = hc_bs_listen_on(u->host, port, &lfd, where, sizeof(where), &err);
            if (st == HCOMM_OK || span == 1 || err != EADDRINUSE || k == span - 1) break;
            hc_log_info("bootstrap: port %d is in use, trying %d (span of %d from %d)",
                        u->port + k, u->port + k + 1, span, u->port);
        }
        if (st != HCOMM_OK && span > 1 && err == EADDRINUSE)
            st = hc_error(HCOMM_ERR_BOOTSTRAP,
                          "hc_bootstrap_open: every port of %s:%d..%d is in use (the port derived "
                          "from the launcher's ids and the %d after it): set "
                          "HCOMM_BOOTSTRAP=tcp://host:PORT to a free one",
                          u->host, u->port, u->port + span - 1, span - 1);
        if (st == HCOMM_OK) hc_log_info("bootstrap: rank 0 listens on %s", where);
    }
    if (st != HCOMM_OK) return st;
    st = hc_bs_root_gather_hellos(bs, p, lfd, deadline, timeout);
    close(lfd);
    if (st != HCOMM_OK) return st;

    for (int r = 1; r < bs->size; r++) {
        hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC,
                                HC_BOOTSTRAP_VERSION,
                                HC_BOOTSTRAP_MSG_TABLE,
                                0,
                                (uint32_t)bs->size,
                                0,
                                NULL,
                                (uint64_t)bs->blob_len * (uint64_t)bs->size,
                                bs->table};
        st = hc_bs_send_msg(bs->conns[r].fd, &m, deadline, "hc_bootstrap_open", r);
        if (st != HCOMM_OK) {
            hc_bs_abort_all(bs, st, hc_error_last());
            return st;
        }
    }
    return HCOMM_OK;
}

/* ---- other ranks: reaching rank 0 ----------------------------------------- */

/* One connect() attempt to host:port, bounded by the deadline. */
static int hc_bs_try_connect(const char *host, int port, double deadline, char *why, size_t wcap)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res, *ai;
    char ports[16];
    int fd = -1;

    snprintf(ports, sizeof(ports), "%d", port);
    int rc = getaddrinfo(host, ports, &hints, &res);
    if (rc != 0) {
        snprintf(why, wcap, "cannot resolve %.200s: %s", host, gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            snprintf(why, wcap, "socket: %s", strerror(errno));
            continue;
        }
        int err = 0;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            err = errno;
            if (err == EINPROGRESS) {
                struct pollfd pfd = {fd, POLLOUT, 0};
                double until = HC_MIN(deadline, hc_time_sec() + HC_BS_CONNECT_ATTEMPT);
                int prc;
                while ((prc = poll(&pfd, 1, hc_bs_poll_ms(until))) < 0 && errno == EINTR)
                    ;
                socklen_t sl = sizeof(err);
                if (prc <= 0)
                    err = ETIMEDOUT;
                else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) != 0)
                    err = errno;
            }
        }
        if (err) {
            snprintf(why, wcap, "connect to %.200s:%d: %s", host, port, strerror(err));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd >= 0) hc_bs_set_nodelay(fd);
    return fd;
}

/* file://: reads rank 0's published address; false while it is not there. */
static bool hc_bs_read_addr_file(const hc_bootstrap_url_t *u, const char *key,
                                 hc_bootstrap_url_t *target, char *why, size_t wcap)
{
    char path[640], line[600];
    if (hc_bs_addr_file_path(u, key, path, sizeof(path)) != HCOMM_OK) {
        snprintf(why, wcap, "%s", hc_error_last());
        return false;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, wcap, "%.400s: %s", path, strerror(errno));
        return false;
    }
    ssize_t n = read(fd, line, sizeof(line) - 1);
    close(fd);
    if (n <= 0) {
        snprintf(why, wcap, "%.400s is empty", path);
        return false;
    }
    line[n] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    if (hc_bootstrap_url_parse(line, path, target) != HCOMM_OK || target->is_file) {
        snprintf(why, wcap, "%.400s holds no tcp:// address (\"%.80s\")", path, line);
        return false;
    }
    return true;
}

/* What a rank that joined learns from rank 0: the table, or why not. */
static hcomm_status_t hc_bs_rank_result(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                                        const hc_bs_conn_t *c, hcomm_status_t st,
                                        const hc_bootstrap_msg_t *m, const char *why,
                                        double timeout)
{
    char text[HC_BOOTSTRAP_MAX_ABORT_TEXT + 1];
    if (st == HCOMM_ERR_TIMEOUT)
        return hc_error(st,
                        "hc_bootstrap_open: rank %d joined rank 0 but got no table within %.1f s "
                        "(rank 0's log names the missing ranks)",
                        p->rank, timeout);
    if (st == HCOMM_ERR_PEER_FAILED)
        return hc_error(HCOMM_ERR_BOOTSTRAP,
                        "hc_bootstrap_open: rank 0 (%s) closed rank %d's connection after both "
                        "proved the job key (%s): rank 0 died or gave up; see its log",
                        c->peer, p->rank, why);
    if (st != HCOMM_OK) return hc_error(st, "hc_bootstrap_open: bad reply from rank 0: %s", why);
    if (m->type == HC_BOOTSTRAP_MSG_ABORT) {
        st = hc_bs_abort_decode(m, text, sizeof(text));
        return hc_error(st, "hc_bootstrap_open: rank 0 stopped the job: %s", text);
    }
    if (m->type == HC_BOOTSTRAP_MSG_REFUSE) {
        st = hc_bs_auth_refuse_decode(c, p, m, text, sizeof(text));
        return hc_error(st, "hc_bootstrap_open: rank 0 refused this rank (%d): %s", p->rank, text);
    }
    memcpy(bs->table, m->payload, (size_t)m->payload_len);
    return HCOMM_OK;
}

/* A handshake that found no rank 0 of this job where one was expected. */
static hcomm_status_t hc_bs_rank_nobody(const hc_bootstrap_params_t *p, const char *where,
                                        hcomm_status_t st, const char *why, double timeout)
{
    if (st == HCOMM_ERR_TIMEOUT)
        return hc_error(st,
                        "hc_bootstrap_open: rank %d got no answer to its hello from %s within "
                        "%.1f s (is an hcomm rank 0 listening there?)",
                        p->rank, where, timeout);
    if (st == HCOMM_ERR_PEER_FAILED)
        return hc_error(HCOMM_ERR_BOOTSTRAP,
                        "hc_bootstrap_open: rank 0 at %s closed rank %d's connection without "
                        "answering its hello: it runs an hcomm older than bootstrap protocol %d, "
                        "or it gave up on the job (see its log)",
                        where, p->rank, HC_BOOTSTRAP_VERSION);
    return hc_error(HCOMM_ERR_BOOTSTRAP, "hc_bootstrap_open: rank %d: %s", p->rank, why);
}

static hcomm_status_t hc_bs_rank_open(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                                      const hc_bootstrap_url_t *u, const void *blob,
                                      double deadline, double timeout)
{
    hc_bs_conn_t *c = &bs->conns[0];
    double backoff = HC_BS_BACKOFF_MIN;
    char why[600] = "no attempt yet";
    hc_bootstrap_url_t target = *u;
    hcomm_status_t st = HCOMM_OK;
    /* With a port span the ports are tried in turn, from the first. Where
     * rank 0 may be in several places (a span; a file that may be stale), a
     * key that differs there says "another job", not "this rank is wrong". */
    int span = hc_bs_port_span(p, u), k = 0;
    bool probing = span > 1 || u->is_file;

    hc_bootstrap_msg_t m;
    for (unsigned busy = 0;; busy++) {
        for (int tried = 1;; tried++) {
            if (!u->is_file || hc_bs_read_addr_file(u, p->job_key, &target, why, sizeof(why)))
                c->fd = hc_bs_try_connect(target.host, target.port + k, deadline, why, sizeof(why));
            if (c->fd >= 0) break;
            k = (k + 1) % span;
            double left = deadline - hc_time_sec();
            if (left <= 0)
                return hc_error(HCOMM_ERR_TIMEOUT,
                                "hc_bootstrap_open: rank %d could not reach rank 0 through %s%s "
                                "within %.1f s (rank 0 never came up?): %s",
                                p->rank, p->url, span > 1 ? " or the ports after it" : "",
                                timeout, why);
            if (tried % span) continue; /* the next port of the span at once */
            hc_bs_sleep(HC_MIN(backoff, left));
            backoff = HC_MIN(backoff * 2, HC_BS_BACKOFF_MAX);
        }
        c->rank = 0;
        snprintf(c->peer, sizeof(c->peer), "%.60s:%d", target.host, target.port + k);

        double until = span > 1 ? HC_MIN(deadline, hc_time_sec() + HC_BS_CHALLENGE_WAIT) : deadline;
        hc_bs_hs_t hs = hc_bs_auth_rank_handshake(c, p, blob, bs->blob_len, until, deadline,
                                                  probing, &st, why, sizeof(why));
        if (hs == HC_BS_HS_FAILED) return st;
        if (hs == HC_BS_HS_KEY)
            return hc_error(HCOMM_ERR_BOOTSTRAP,
                            "hc_bootstrap_open: job key mismatch: rank 0 at %s proved a job key "
                            "other than this rank's %s (rank %d); keys never travel, compare %s "
                            "on every rank",
                            c->peer, hc_bs_key_name(p), p->rank, hc_bs_key_name(p));
        if (hs == HC_BS_HS_ELSEWHERE) {
            if (!probing) return hc_bs_rank_nobody(p, c->peer, st, why, timeout);
            hc_log_debug("bootstrap: rank %d: %s; trying again", p->rank, why);
            hc_bs_conn_close(c);
            k = (k + 1) % span;
            if (hc_time_sec() >= deadline)
                return hc_error(HCOMM_ERR_TIMEOUT,
                                "hc_bootstrap_open: rank %d found no rank 0 of its job on %s%s "
                                "within %.1f s: %s",
                                p->rank, p->url, span > 1 ? " or the ports after it" : "", timeout,
                                why);
            if (u->is_file) hc_bs_sleep(HC_MIN(HC_BS_BACKOFF_MAX, deadline - hc_time_sec()));
            continue;
        }
        if (hs == HC_BS_HS_PROVEN) {
            /* Rank 0 may still be deciding who is missing: give it a moment to say. */
            double grace = HC_MIN(0.25 * timeout, 2.0);
            hc_bs_expect_t e = {HC_BOOTSTRAP_MSG_TABLE, (uint32_t)p->size,
                                (uint64_t)bs->blob_len * (uint64_t)p->size};
            st = hc_bs_conn_wait(c, &e, deadline + grace, &m, why, sizeof(why));
            if (st != HCOMM_OK || m.type != HC_BOOTSTRAP_MSG_BUSY) break;
        }
        /* Rank 0 dropped this connection before it read the hello or the
         * proof (a flood of connections, or this process was slow): again. */
        hc_log_debug("bootstrap: rank %d: rank 0 was busy (%u time(s)), connecting again",
                     p->rank, busy + 1);
        hc_bs_conn_close(c);
        hc_bs_sleep(HC_MIN(backoff, HC_MAX(deadline - hc_time_sec(), 0.0)));
        backoff = HC_MIN(backoff * 2, HC_BS_BACKOFF_MAX);
    }
    return hc_bs_rank_result(bs, p, c, st, &m, why, timeout);
}

/* ---- public entry points --------------------------------------------------- */

static hcomm_status_t hc_bs_check_args(const hc_bootstrap_params_t *p, const void *blob,
                                       size_t blob_len, double timeout_sec, hc_bootstrap_t **bs_p,
                                       const void **table_p, hc_bootstrap_url_t *u)
{
    if (p == NULL || bs_p == NULL || table_p == NULL)
        return hc_error(HCOMM_ERR_INVALID, "hc_bootstrap_open: argument %s is NULL",
                        p == NULL      ? "p"
                        : bs_p == NULL ? "bs_p"
                                       : "table_p");
    if (p->size < 1 || (unsigned)p->size > HC_BOOTSTRAP_MAX_SIZE)
        return hc_error(HCOMM_ERR_INVALID, "hc_bootstrap_open: size %d out of range [1, %u]",
                        p->size, HC_BOOTSTRAP_MAX_SIZE);
    if (p->rank < 0 || p->rank >= p->size)
        return hc_error(HCOMM_ERR_INVALID, "hc_bootstrap_open: rank %d out of range [0, %d)",
                        p->rank, p->size);
    if (blob == NULL && blob_len)
        return hc_error(HCOMM_ERR_INVALID, "hc_bootstrap_open: blob is NULL, blob_len %zu",
                        blob_len);
    if (blob_len > HC_BOOTSTRAP_MAX_BLOB ||
        (uint64_t)blob_len * (uint64_t)p->size > HC_BOOTSTRAP_MAX_PAYLOAD)
        return hc_error(HCOMM_ERR_INVALID,
                        "hc_bootstrap_open: blob_len %zu too large (at most %u, and %llu for all "
                        "%d ranks together)",
                        blob_len, HC_BOOTSTRAP_MAX_BLOB,
                        (unsigned long long)HC_BOOTSTRAP_MAX_PAYLOAD, p->size);
    if (!(timeout_sec > 0) || !isfinite(timeout_sec))
        return hc_error(HCOMM_ERR_INVALID, "hc_bootstrap_open: timeout_sec %g is not > 0",
                        timeout_sec);
    if (strnlen(p->job_key, sizeof(p->job_key)) > HC_BOOTSTRAP_MAX_KEY)
        return hc_error(HCOMM_ERR_INVALID, "hc_bootstrap_open: job_key is not terminated");
    if (p->size == 1) return HCOMM_OK;
    if (strnlen(p->url, sizeof(p->url)) == sizeof(p->url) || p->url[0] == '\0')
        return hc_error(HCOMM_ERR_INVALID,
                        "hc_bootstrap_open: a job of %d ranks needs a bootstrap url", p->size);
    return hc_bootstrap_url_parse(p->url, "hc_bootstrap_open: url", u);
}

hcomm_status_t hc_bootstrap_open(const hc_bootstrap_params_t *p, const void *blob, size_t blob_len,
                                 double timeout_sec, hc_bootstrap_t **bs_p, const void **table_p)
{
    hc_bootstrap_url_t u;
    hcomm_status_t st;
    double deadline = hc_time_sec() + timeout_sec;

    st = hc_bs_check_args(p, blob, blob_len, timeout_sec, bs_p, table_p, &u);
    if (st != HCOMM_OK) return st;

    hc_bootstrap_t *bs = calloc(1, sizeof(*bs));
    if (bs == NULL) return hc_error(HCOMM_ERR_NO_MEMORY, "hc_bootstrap_open: no memory");
    bs->rank = p->rank;
    bs->size = p->size;
    bs->blob_len = blob_len;
    bs->nconns = p->size == 1 ? 0 : p->rank == 0 ? p->size : 1;
    bs->table = malloc(HC_MAX(blob_len * (size_t)p->size, (size_t)1));
    bs->conns = calloc((size_t)HC_MAX(bs->nconns, 1), sizeof(*bs->conns));
    bs->pfds = calloc((size_t)HC_MAX(bs->nconns, 1), sizeof(*bs->pfds));
    bs->verdict = malloc(sizeof(int) * (size_t)p->size);
    bs->left_after = malloc(sizeof(int) * (size_t)p->size);
    bs->first_cause = -1;
    if (bs->table == NULL || bs->conns == NULL || bs->pfds == NULL || bs->verdict == NULL ||
        bs->left_after == NULL) {
        st = hc_error(HCOMM_ERR_NO_MEMORY, "hc_bootstrap_open: no memory for %d ranks", p->size);
        goto err_close;
    }
    for (int i = 0; i < bs->nconns; i++)
        hc_bs_conn_init(&bs->conns[i]);
    for (int r = 0; r < p->size; r++)
        bs->verdict[r] = bs->left_after[r] = -1;
    if (blob_len) memcpy(bs->table + (size_t)p->rank * blob_len, blob, blob_len);

    if (p->size > 1) {
        st = p->rank == 0 ? hc_bs_root_open(bs, p, &u, deadline, timeout_sec)
                          : hc_bs_rank_open(bs, p, &u, blob, deadline, timeout_sec);
        if (st != HCOMM_OK) goto err_close;
    }
    for (int i = 0; i < bs->nconns; i++)
        bs->pfds[i] = (struct pollfd){bs->conns[i].fd, POLLIN | POLLRDHUP, 0};
    hc_log_debug("bootstrap: rank %d of %d ready (%s)", p->rank, p->size,
                 p->size == 1 ? "single rank" : p->url);
    *bs_p = bs;
    *table_p = bs->table;
    return HCOMM_OK;

err_close:
    hc_bootstrap_close(bs);
    return st;
}

hcomm_status_t hc_bootstrap_allgather(hc_bootstrap_t *bs, const void *in, size_t len, void *out,
                                      double timeout_sec)
{
    const char *fn = len ? "hc_bootstrap_allgather" : "hc_bootstrap_barrier";
    double deadline = hc_time_sec() + timeout_sec;
    char why[160], text[HC_BOOTSTRAP_MAX_ABORT_TEXT + 1];
    hcomm_status_t st = HCOMM_OK;
    hc_bootstrap_msg_t m;

    if (bs == NULL || (len && (in == NULL || out == NULL)))
        return hc_error(HCOMM_ERR_INVALID, "%s: argument %s is NULL", fn,
                        bs == NULL   ? "bs"
                        : in == NULL ? "in"
                                     : "out");
    if (len > HC_BOOTSTRAP_MAX_BLOB ||
        (uint64_t)len * (uint64_t)bs->size > HC_BOOTSTRAP_MAX_PAYLOAD)
        return hc_error(HCOMM_ERR_INVALID, "%s: len %zu too large (at most %u per rank)", fn, len,
                        HC_BOOTSTRAP_MAX_BLOB);
    if (!(timeout_sec > 0) || !isfinite(timeout_sec))
        return hc_error(HCOMM_ERR_INVALID, "%s: timeout_sec %g is not > 0", fn, timeout_sec);
    if (bs->dead != HCOMM_OK)
        return hc_error(bs->dead, "%s: the bootstrap failed earlier and cannot be used", fn);
    /* Non-zero ranks get their own contribution back from rank 0; copying it
     * now could overwrite `in` when it lies inside `out`. */
    if (len && bs->rank == 0) memmove(out, in, len);
    if (bs->size == 1) return HCOMM_OK;

    hc_bs_expect_t e = {bs->rank == 0 ? HC_BOOTSTRAP_MSG_AG_IN : HC_BOOTSTRAP_MSG_AG_OUT,
                        (uint32_t)bs->size, bs->rank == 0 ? len : len * (size_t)bs->size, true};
    if (bs->rank != 0) {
        hc_bs_conn_t *c = &bs->conns[0];
        m = (hc_bootstrap_msg_t){HC_BOOTSTRAP_MAGIC,
                                 HC_BOOTSTRAP_VERSION,
                                 HC_BOOTSTRAP_MSG_AG_IN,
                                 (uint32_t)bs->rank,
                                 (uint32_t)bs->size,
                                 0,
                                 NULL,
                                 len,
                                 in};
        st = hc_bs_send_msg(c->fd, &m, deadline, fn, 0);
        if (st == HCOMM_OK) {
            /* Failure notices may come first: taken, then wait on. */
            while ((st = hc_bs_conn_wait(c, &e, deadline, &m, why, sizeof(why))) == HCOMM_OK &&
                   hc_bs_is_sideband(m.type))
                hc_bs_sideband(bs, 0, &m);
            if (st == HCOMM_ERR_TIMEOUT)
                st = hc_error(st, "%s: rank %d got no reply from rank 0 within %.1f s", fn,
                              bs->rank, timeout_sec);
            else if (st == HCOMM_ERR_PEER_FAILED)
                st = hc_error(st, "%s: rank 0 closed its bootstrap connection (%s)", fn, why);
            else if (st != HCOMM_OK)
                st = hc_error(st, "%s: bad message from rank 0: %s", fn, why);
            else if (m.type == HC_BOOTSTRAP_MSG_ABORT)
                st = hc_error(hc_bs_abort_decode(&m, text, sizeof(text)),
                              "%s: rank 0 stopped the job: %s", fn, text);
            else if (len)
                memcpy(out, m.payload, (size_t)m.payload_len);
        }
        if (st != HCOMM_OK) bs->dead = st;
        return st;
    }

    /* Rank 0: gather from whoever is ready first, then send everything. */
    bool *have = calloc((size_t)bs->size, sizeof(bool));
    if (have == NULL) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    have[0] = true;
    int left = bs->size - 1;
    while (left > 0 && st == HCOMM_OK) {
        for (int r = 1; r < bs->size; r++)
            bs->pfds[r].fd = have[r] ? -1 : bs->conns[r].fd;
        int ms = hc_bs_poll_ms(deadline);
        if (ms == 0) {
            char list[200];
            hc_bs_rank_list(have, bs->size, list, sizeof(list));
            st = hc_error(HCOMM_ERR_TIMEOUT, "%s: rank(s) %s did not arrive within %.1f s", fn,
                          list, timeout_sec);
            break;
        }
        if (poll(bs->pfds + 1, (nfds_t)bs->size - 1, bs->idle ? HC_MIN(ms, HC_BS_IDLE_MS) : ms) == 0 &&
            bs->idle)
            bs->idle(bs->idle_arg);
        for (int r = 1; r < bs->size && st == HCOMM_OK; r++) {
            if (have[r] || bs->pfds[r].revents == 0) continue;
            hc_bs_rx_t rx = hc_bs_conn_read(&bs->conns[r], &e, why, sizeof(why));
            if (rx == HC_BS_RX_MORE) continue;
            if (rx == HC_BS_RX_EOF) {
                st = hc_error(HCOMM_ERR_PEER_FAILED,
                              "%s: rank %d closed its bootstrap "
                              "connection (%s)",
                              fn, r, why);
                break;
            }
            if (rx == HC_BS_RX_DONE &&
                hc_bootstrap_msg_parse(bs->conns[r].buf, bs->conns[r].have, &m) > 0 &&
                hc_bs_is_sideband(m.type)) {
                hc_bs_sideband(bs, r, &m);
                bs->conns[r].have = 0;
                continue;
            }
            if (rx == HC_BS_RX_BAD ||
                hc_bootstrap_msg_parse(bs->conns[r].buf, bs->conns[r].have, &m) <= 0 ||
                m.type != HC_BOOTSTRAP_MSG_AG_IN || m.rank != (uint32_t)r) {
                st = hc_error(HCOMM_ERR_BOOTSTRAP, "%s: bad message from rank %d: %s", fn, r,
                              rx == HC_BS_RX_BAD ? why : "wrong type or rank");
                break;
            }
            if (len) memcpy((uint8_t *)out + (size_t)r * len, m.payload, len);
            bs->conns[r].have = 0;
            have[r] = true;
            left--;
        }
    }
    for (int r = 1; r < bs->size && st == HCOMM_OK; r++) {
        m = (hc_bootstrap_msg_t){HC_BOOTSTRAP_MAGIC,
                                 HC_BOOTSTRAP_VERSION,
                                 HC_BOOTSTRAP_MSG_AG_OUT,
                                 0,
                                 (uint32_t)bs->size,
                                 0,
                                 NULL,
                                 len * (size_t)bs->size,
                                 out};
        st = hc_bs_send_msg(bs->conns[r].fd, &m, deadline, fn, r);
    }
    for (int r = 1; r < bs->size; r++)
        bs->pfds[r].fd = bs->conns[r].gone ? -1 : bs->conns[r].fd;
    free(have);
    if (st != HCOMM_OK) {
        hc_bs_abort_all(bs, st, hc_error_last());
        bs->dead = st;
    }
    return st;
}

hcomm_status_t hc_bootstrap_barrier(hc_bootstrap_t *bs, double timeout_sec)
{
    return hc_bootstrap_allgather(bs, NULL, 0, NULL, timeout_sec);
}

void hc_bootstrap_set_idle(hc_bootstrap_t *bs, void (*fn)(void *arg), void *arg)
{
    bs->idle = fn;
    bs->idle_arg = arg;
    for (int i = 0; i < bs->nconns; i++)
        bs->conns[i].bs = bs;
}

/* ---- failure notices ------------------------------------------------------
 *
 * Rank 0 decides who failed and why, from what it alone sees: the bootstrap
 * connection of every rank. A rank that sees a peer gone by its own evidence
 * (a pidfd, a reset socket) reports it to rank 0 before it goes on (and
 * before it may leave): so when a connection closes, rank 0 knows whether
 * that rank had seen another rank fail first (it left after that rank: the
 * cause is where that chain of reports ends) or had said nothing (it died).
 * Each verdict, "rank X failed, cause C", goes to every rank still
 * connected, before rank 0 itself may leave; a rank whose connection to
 * rank 0 closes after a verdict takes rank 0 as having left after it.
 */

/* One FAILED message, built in one buffer and written without blocking; a
 * partial write is finished within a short bound (the star is idle when
 * failures travel). Silent: the caller's last error is what the user sees. */
static void hc_bs_send_notice(hc_bootstrap_t *bs, int fd, int rank, int cause,
                              hcomm_status_t status, const char *why)
{
    uint8_t payload[HC_BOOTSTRAP_NOTICE_HDR + HC_BOOTSTRAP_MAX_NOTICE_TEXT];
    uint8_t buf[HC_BOOTSTRAP_HDR_LEN + sizeof(payload)];
    size_t tl = HC_MIN(strlen(why), (size_t)HC_BOOTSTRAP_MAX_NOTICE_TEXT);
    uint32_t words[3] = {(uint32_t)rank, (uint32_t)cause, (uint32_t)(int32_t)status};
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < 4; i++)
            payload[4 * w + i] = (uint8_t)(words[w] >> (8 * i));
    memcpy(payload + HC_BOOTSTRAP_NOTICE_HDR, why, tl);
    hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC, HC_BOOTSTRAP_VERSION, HC_BOOTSTRAP_MSG_FAILED,
                            (uint32_t)bs->rank, (uint32_t)bs->size, 0, NULL,
                            HC_BOOTSTRAP_NOTICE_HDR + tl, payload};
    long len = hc_bootstrap_msg_pack(&m, buf, sizeof(buf));
    if (len < 0 || fd < 0) return;
    size_t off = 0;
    double deadline = hc_time_sec() + 0.05;
    while (off < (size_t)len) {
        ssize_t n = send(fd, buf + off, (size_t)len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            int ms = hc_bs_poll_ms(deadline);
            if (ms > 0 && poll(&pfd, 1, ms) >= 0) continue;
        }
        hc_log_debug("bootstrap: failure notice for rank %d not sent (%s)", rank,
                     n < 0 ? strerror(errno) : "timed out");
        return;
    }
}

/* Rank 0: where the chain "x left after seeing y fail" ends. */
static int hc_bs_root_cause(const hc_bootstrap_t *bs, int x)
{
    int c = x;
    for (int steps = 0; steps < bs->size && bs->left_after[c] >= 0; steps++)
        c = bs->left_after[c];
    return bs->left_after[c] >= 0 ? x : c; /* a cycle: nobody to blame but x */
}

static void hc_bs_verdict_taken(hc_bootstrap_t *bs, int rank, int cause, hcomm_status_t status,
                                const char *why)
{
    bs->verdict[rank] = cause;
    bs->nverdicts++;
    if (bs->first_cause < 0) bs->first_cause = cause;
    if (bs->notice) bs->notice(bs->notice_arg, rank, cause, status, why);
}

/* Rank 0: rank x is gone; decides the cause, tells itself and everyone. */
static int hc_bs_hub_verdict(hc_bootstrap_t *bs, int x, hcomm_status_t status, const char *why)
{
    if (bs->verdict[x] >= 0) return bs->verdict[x];
    int c = hc_bs_root_cause(bs, x);
    /* Silent, but gone after a verdict we sent it: it left because of that. */
    if (c == x && bs->left_after[x] < 0 && bs->first_cause >= 0) c = bs->first_cause;
    char text[HC_BOOTSTRAP_MAX_NOTICE_TEXT + 1];
    if (c != x) {
        if (bs->verdict[c] < 0) {
            int by = x;
            while (bs->left_after[by] != c) by = bs->left_after[by];
            snprintf(text, sizeof(text), "rank %d saw it fail", by);
            (void)hc_bs_hub_verdict(bs, c, HCOMM_ERR_PEER_FAILED, text);
        }
        snprintf(text, sizeof(text), "it left after rank %d failed", c);
        why = text;
    }
    hc_bs_verdict_taken(bs, x, c, status, why);
    for (int r = 1; r < bs->nconns; r++)
        if (r != x && hc_bs_conn_up(bs, r))
            hc_bs_send_notice(bs, bs->conns[r].fd, x, c, status, why);
    return c;
}

/* A FAILED message: on rank 0 a rank's report ("I saw x fail"), elsewhere
 * rank 0's verdict. */
static void hc_bs_notice_msg(hc_bootstrap_t *bs, int from, const hc_bootstrap_msg_t *m)
{
    const uint8_t *p = m->payload;
    uint32_t w[3];
    for (int k = 0; k < 3; k++)
        w[k] = (uint32_t)p[4 * k] | (uint32_t)p[4 * k + 1] << 8 | (uint32_t)p[4 * k + 2] << 16 |
               (uint32_t)p[4 * k + 3] << 24;
    char text[HC_BOOTSTRAP_MAX_NOTICE_TEXT + 1];
    size_t n = (size_t)m->payload_len - HC_BOOTSTRAP_NOTICE_HDR;
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = p[HC_BOOTSTRAP_NOTICE_HDR + i];
        text[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    text[n] = '\0';
    if (w[0] >= (uint32_t)bs->size || (int)w[0] == bs->rank || (int)w[0] == from) return;
    int x = (int)w[0];
    if (bs->rank == 0) {
        if (bs->left_after[from] < 0) bs->left_after[from] = x;
        return;
    }
    if (bs->verdict[x] >= 0) return;
    int cause = w[1] < (uint32_t)bs->size ? (int)w[1] : x;
    hcomm_status_t st = (int32_t)w[2] == HCOMM_ERR_TIMEOUT ? HCOMM_ERR_TIMEOUT
                                                           : HCOMM_ERR_PEER_FAILED;
    hc_bs_verdict_taken(bs, x, cause, st, text);
}

/* A bootstrap connection closed: rank 0 judges; elsewhere it is rank 0's,
 * gone by itself unless it had told us of a failure before. */
static void hc_bs_closed(hc_bootstrap_t *bs, int peer)
{
    if (bs->rank == 0) {
        (void)hc_bs_hub_verdict(bs, peer, HCOMM_ERR_PEER_FAILED, "its bootstrap connection closed");
    } else if (bs->verdict[peer] < 0) {
        char text[80];
        int c = bs->first_cause >= 0 ? bs->first_cause : peer;
        if (c != peer) snprintf(text, sizeof(text), "it left after rank %d failed", c);
        hc_bs_verdict_taken(bs, peer, c, HCOMM_ERR_PEER_FAILED,
                            c != peer ? text : "its bootstrap connection closed");
    }
}

void hc_bootstrap_set_notice(hc_bootstrap_t *bs, hc_bootstrap_notice_fn fn, void *arg)
{
    if (bs == NULL) return;
    bs->notice = fn;
    bs->notice_arg = arg;
}

int hc_bootstrap_report_failure(hc_bootstrap_t *bs, int rank, hcomm_status_t status,
                                const char *why)
{
    if (bs == NULL || bs->size == 1 || rank < 0 || rank >= bs->size || rank == bs->rank)
        return -1;
    if (bs->verdict[rank] >= 0) return bs->verdict[rank];
    if (bs->rank != 0) {
        if (hc_bs_conn_up(bs, 0)) hc_bs_send_notice(bs, bs->conns[0].fd, rank, -1, status, why);
        return -1;
    }
    /* What rank's connection says before it closes (its own reports) is
     * read before judging it. */
    (void)hc_bootstrap_poll(bs);
    return hc_bs_hub_verdict(bs, rank, status, why);
}

int hc_bootstrap_verdict(hc_bootstrap_t *bs, int rank, int *first_cause_p)
{
    if (first_cause_p) *first_cause_p = bs ? bs->first_cause : -1;
    if (bs == NULL || rank < 0 || rank >= bs->size) return -1;
    return bs->verdict[rank];
}

/* ---- relay: point-to-point through the star ---------------------------- */

static hcomm_status_t hc_bs_relay_send(hc_bootstrap_t *bs, int fd, int to, int from,
                                       uint32_t channel, const void *blob, size_t len)
{
    uint8_t payload[HC_BOOTSTRAP_RELAY_HDR + HC_BOOTSTRAP_MAX_RELAY];
    uint32_t words[3] = {(uint32_t)to, (uint32_t)from, channel};
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < 4; i++)
            payload[4 * w + i] = (uint8_t)(words[w] >> (8 * i));
    if (len) memcpy(payload + HC_BOOTSTRAP_RELAY_HDR, blob, len);
    hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC, HC_BOOTSTRAP_VERSION, HC_BOOTSTRAP_MSG_RELAY,
                            (uint32_t)bs->rank, (uint32_t)bs->size, 0, NULL,
                            HC_BOOTSTRAP_RELAY_HDR + len, payload};
    /* Rare (a connection's setup) and small: a short bounded send. */
    return hc_bs_send_msg(fd, &m, hc_time_sec() + 1.0, "bootstrap relay", to);
}

static void hc_bs_relay_msg(hc_bootstrap_t *bs, int from, const hc_bootstrap_msg_t *m)
{
    const uint8_t *p = m->payload;
    uint32_t w[3];
    for (int k = 0; k < 3; k++)
        w[k] = (uint32_t)p[4 * k] | (uint32_t)p[4 * k + 1] << 8 | (uint32_t)p[4 * k + 2] << 16 |
               (uint32_t)p[4 * k + 3] << 24;
    size_t len = (size_t)m->payload_len - HC_BOOTSTRAP_RELAY_HDR;
    /* The sender is who the connection says, never what the message claims
     * (rank 0 forwards with the true sender). */
    int src = bs->rank == 0 ? from : (int)w[1];
    if (w[0] >= (uint32_t)bs->size || src < 0 || src >= bs->size) {
        hc_log_warn("bootstrap: relay from rank %d to rank %u dropped (bad rank)", from, w[0]);
        return;
    }
    if ((int)w[0] != bs->rank) {
        /* Rank 0 forwards; a destination that is gone loses it. */
        if (bs->rank == 0 && hc_bs_conn_up(bs, (int)w[0]) &&
            hc_bs_relay_send(bs, bs->conns[w[0]].fd, (int)w[0], src, w[2],
                             p + HC_BOOTSTRAP_RELAY_HDR, len) != HCOMM_OK)
            hc_log_debug("bootstrap: relay %d -> %u not forwarded", src, w[0]);
        return;
    }
    bs->nrelayed++;
    if (bs->relay) bs->relay(bs->relay_arg, src, w[2], p + HC_BOOTSTRAP_RELAY_HDR, len);
}

void hc_bootstrap_set_relay(hc_bootstrap_t *bs, hc_bootstrap_relay_fn fn, void *arg)
{
    if (bs == NULL) return;
    bs->relay = fn;
    bs->relay_arg = arg;
}

hcomm_status_t hc_bootstrap_relay(hc_bootstrap_t *bs, int to, uint32_t channel, const void *blob,
                                  size_t len)
{
    if (bs == NULL || to < 0 || to >= bs->size || to == bs->rank)
        return hc_error(HCOMM_ERR_INVALID, "hc_bootstrap_relay: argument to (%d) is not a peer",
                        to);
    if (len > HC_BOOTSTRAP_MAX_RELAY || (len && blob == NULL))
        return hc_error(HCOMM_ERR_INVALID, "hc_bootstrap_relay: argument len (%zu) above %u", len,
                        HC_BOOTSTRAP_MAX_RELAY);
    int link = bs->rank == 0 ? to : 0;
    if (!hc_bs_conn_up(bs, link))
        return hc_error(HCOMM_ERR_PEER_FAILED, "hc_bootstrap_relay: the star to rank %d is gone",
                        link);
    return hc_bs_relay_send(bs, bs->conns[link].fd, to, bs->rank, channel, blob, len);
}

int hc_bootstrap_poll(hc_bootstrap_t *bs)
{
    if (bs == NULL || bs->nconns == 0) return 0;
    /* Rank 0's slot 0 is itself (fd -1, ignored by poll). */
    if (poll(bs->pfds, (nfds_t)bs->nconns, 0) <= 0) return 0;
    hc_bs_expect_t e = {HC_BOOTSTRAP_MSG_FAILED, (uint32_t)bs->size, 0, true};
    int before = bs->nverdicts + bs->nrelayed;
    char why[160];
    /* Everything a connection says before it closes is read first (pass 1),
     * closes are judged after (pass 2). */
    for (int i = 0; i < bs->nconns; i++) {
        if (bs->pfds[i].revents == 0 || bs->pfds[i].fd < 0) continue;
        hc_bs_conn_t *c = &bs->conns[i];
        for (;;) {
            /* Only notices are taken here: anything else (a rank already in
             * the next bootstrap allgather) stays on the socket for it. */
            if (c->have == 0) {
                uint8_t hdr[HC_BOOTSTRAP_HDR_LEN];
                hc_bootstrap_msg_t m;
                ssize_t n = recv(c->fd, hdr, sizeof(hdr), MSG_PEEK | MSG_DONTWAIT);
                long h = n > 0 ? hc_bootstrap_msg_parse_header(hdr, (size_t)n, &m) : -1;
                if (h == 0 || (h > 0 && !hc_bs_is_sideband(m.type))) {
                    if (bs->pfds[i].revents & (POLLERR | POLLHUP | POLLRDHUP)) {
                        bs->pfds[i].fd = -1;
                        c->gone = c->closed = true;
                    }
                    break;
                }
            }
            hc_bs_rx_t rx = hc_bs_conn_read(c, &e, why, sizeof(why));
            if (rx == HC_BS_RX_MORE) break;
            if (rx == HC_BS_RX_DONE) {
                hc_bootstrap_msg_t m;
                if (hc_bootstrap_msg_parse(c->buf, c->have, &m) > 0 && hc_bs_is_sideband(m.type))
                    hc_bs_sideband(bs, bs->rank == 0 ? i : 0, &m);
                c->have = 0;
                continue;
            }
            if (rx == HC_BS_RX_BAD)
                hc_log_warn("bootstrap: unexpected message from rank %d: %s",
                            bs->rank == 0 ? i : 0, why);
            bs->pfds[i].fd = -1; /* closed or unreadable: not polled again */
            c->gone = true;
            c->closed = rx == HC_BS_RX_EOF;
            break;
        }
    }
    for (int i = 0; i < bs->nconns; i++) {
        if (!bs->conns[i].closed) continue;
        bs->conns[i].closed = false;
        hc_bs_closed(bs, bs->rank == 0 ? i : 0);
    }
    return bs->nverdicts + bs->nrelayed - before;
}

void hc_bootstrap_close(hc_bootstrap_t *bs)
{
    if (bs == NULL) return;
    for (int i = 0; i < bs->nconns && bs->conns; i++)
        hc_bs_conn_close(&bs->conns[i]);
    if (bs->addr_file[0] && unlink(bs->addr_file) != 0 && errno != ENOENT)
        hc_log_warn("bootstrap: cannot remove %s: %s", bs->addr_file, strerror(errno));
    free(bs->conns);
    free(bs->pfds);
    free(bs->verdict);
    free(bs->left_after);
    free(bs->table);
    free(bs);
}
