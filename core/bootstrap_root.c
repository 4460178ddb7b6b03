/*
 * Rank 0's side of the rendezvous: it listens (on the url's port, the first
 * free port of a span, or an ephemeral port published in a file), accepts
 * whatever connects, advances each pending connection's handshake
 * (bootstrap_auth.c) until every rank has joined, and sends the table.
 * Separate from the ranks' client (bootstrap_rank.c) because it is the only
 * code that faces connections from anyone: its bounds (pending connections,
 * hello silence, rate-limited rejection logs, eviction of the longest
 * waiting) are the rendezvous's defence and read best together.
 */
#include "core/bootstrap_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HC_BS_EXTRA_PENDING 64 /* connections beyond size-1 that may wait for hello */

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

/* ---- rank 0: listening ------------------------------- */

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
    return hc_error_errno(HCOMM_ERR_BOOTSTRAP, err, "hc_bootstrap_open: cannot listen on %s:%s%s",
                          host, port,
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
    double window;       /* start of the current one-second window */
    unsigned logged;     /* rejections logged in it */
    unsigned long quiet; /* rejections not logged since the last summary */
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

/* ---- rank 0: opening ----------------------------------------------------- */

/* Listens, collects every rank's proof and blob, then sends the table. */
hcomm_status_t hc_bs_root_open(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
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
            hc_log_info("bootstrap: port %d is in use, trying %d (span of %d from %d)", u->port + k,
                        u->port + k + 1, span, u->port);
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

    if (p->node_key_len) return hc_bs_node_send_tables(bs, p, deadline);
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
