/*
 * A non-zero rank's side of the rendezvous: finding rank 0 (the url's
 * address, each port of a span in turn, or the address rank 0 published in
 * a file), connecting with bounded attempts and backoff, the handshake
 * (bootstrap_auth.c), connecting again when rank 0 was busy, and turning
 * what rank 0 answers (the table, an ABORT, a REFUSE, silence) into this
 * rank's result with a message that says where to look.
 */
#include "core/bootstrap_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HC_BS_CONNECT_ATTEMPT 5.0 /* seconds one connect() may take before a retry */
#define HC_BS_BACKOFF_MIN 0.001
#define HC_BS_BACKOFF_MAX 0.100

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
        if (!err && hc_bs_self_connected(fd)) {
            /* nothing listens there yet, and this socket would keep rank 0
             * from binding its port: close it, and try again */
            close(fd);
            fd = -1;
            snprintf(why, wcap, "connect to %.200s:%d joined the socket to itself (nothing "
                     "listens there yet)", host, port);
            continue;
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
                                        double deadline, double timeout)
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
    if (p->node_key_len) return hc_bs_node_take_table(bs, p, m, deadline, timeout);
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
/* Connects to rank 0 and joins; the table is in bs->table on success. */
hcomm_status_t hc_bs_rank_open(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                               const hc_bootstrap_url_t *u, const void *blob, double deadline,
                               double timeout)
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
                                p->rank, p->url, span > 1 ? " or the ports after it" : "", timeout,
                                why);
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
                                (uint64_t)bs->blob_len * (uint64_t)p->size,
                                false, /* by node: the table or a reference */
                                p->node_key_len > 0};
            st = hc_bs_conn_wait(c, &e, deadline + grace, &m, why, sizeof(why));
            if (st != HCOMM_OK || m.type != HC_BOOTSTRAP_MSG_BUSY) break;
        }
        /* Rank 0 dropped this connection before it read the hello or the
         * proof (a flood of connections, or this process was slow): again. */
        hc_log_debug("bootstrap: rank %d: rank 0 was busy (%u time(s)), connecting again", p->rank,
                     busy + 1);
        hc_bs_conn_close(c);
        hc_bs_sleep(HC_MIN(backoff, HC_MAX(deadline - hc_time_sec(), 0.0)));
        backoff = HC_MIN(backoff * 2, HC_BS_BACKOFF_MAX);
    }
    return hc_bs_rank_result(bs, p, c, st, &m, why, deadline, timeout);
}
