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
 *
 * The roles live in their own files, around what they share here (the
 * connections, their messages, opening and closing the star, polling it
 * between collectives): rank 0's listener (bootstrap_root.c), the ranks'
 * client (bootstrap_rank.c), the collectives (bootstrap_allgather.c),
 * failure notices (bootstrap_notice.c), the relay (bootstrap_relay.c),
 * and the handshake (bootstrap_auth.c). Their shared internals are in
 * bootstrap_int.h.
 */
#include "core/bootstrap_int.h"

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define HC_BS_PORT_SPAN_MAX 256 /* ports a span may cover */

/* hc_bootstrap_traffic: plain increments (init and the rare collectives
 * run on one thread). */
static hc_bootstrap_traffic_t hc_bs_traffic;

void hc_bootstrap_traffic(hc_bootstrap_traffic_t *out)
{
    *out = hc_bs_traffic;
}

/* ---- small helpers --------------------------------------------------------- */

void hc_bs_sleep(double sec)
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

bool hc_bs_self_connected(int fd)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);
    if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 || ml != pl ||
        me.ss_family != peer.ss_family)
        return false;
    if (me.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)&me, *b = (const void *)&peer;
        return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
    }
    if (me.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)&me, *b = (const void *)&peer;
        return a->sin6_port == b->sin6_port &&
               !memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr));
    }
    return false;
}

void hc_bs_set_nodelay(int fd)
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
        hc_bs_traffic.sent_bytes += (uint64_t)n;
        while (i < iovcnt && left >= iov[i].iov_len)
            left -= iov[i++].iov_len;
        if (i < iovcnt) {
            iov[i].iov_base = (uint8_t *)iov[i].iov_base + left;
            iov[i].iov_len -= left;
        }
    }
    hc_bs_traffic.sent_msgs++;
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
        hc_bs_traffic.recv_bytes += (uint64_t)n;
        if (c->have == HC_BOOTSTRAP_HDR_LEN) hc_bs_traffic.recv_msgs++; /* once per message */
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
void hc_bs_rank_list(const bool *have, int size, char *out, size_t cap)
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

/* ---- the address file and the port span --------------------------------- */

/* DIR/hcomm-<tag>.addr: the tag says which job without saying anything
 * about its key (bootstrap_auth.c). */
hcomm_status_t hc_bs_addr_file_path(const hc_bootstrap_url_t *u, const char *key, char *out,
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

/* Ports of the span that exist (a span never runs past 65535). */
int hc_bs_port_span(const hc_bootstrap_params_t *p, const hc_bootstrap_url_t *u)
{
    if (u->is_file || p->port_span <= 1) return 1;
    return HC_MIN(HC_MIN(p->port_span, HC_BS_PORT_SPAN_MAX), 65536 - u->port);
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
    bs->table = malloc(blob_len * (size_t)p->size + HC_BS_NODE_REF_LEN); /* + round 1's reference */
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
    hc_bs_node_init(bs, p->job_key);

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

void hc_bootstrap_set_idle(hc_bootstrap_t *bs, void (*fn)(void *arg), void *arg)
{
    bs->idle = fn;
    bs->idle_arg = arg;
    for (int i = 0; i < bs->nconns; i++)
        bs->conns[i].bs = bs;
}

/* ---- between collectives --------------------------------------------------- */

/* A message that came between allgathers or inside one: a failure notice
 * (bootstrap_notice.c) or a relayed blob (bootstrap_relay.c). */
void hc_bs_sideband(hc_bootstrap_t *bs, int from, const hc_bootstrap_msg_t *m)
{
    if (m->type == HC_BOOTSTRAP_MSG_FAILED)
        hc_bs_notice_msg(bs, from, m);
    else
        hc_bs_relay_msg(bs, from, m);
}

int hc_bootstrap_poll_fds(const hc_bootstrap_t *bs, struct pollfd *out, int max)
{
    int n = 0;
    for (int i = 0; bs && i < bs->nconns && n < max; i++)
        if (bs->pfds[i].fd >= 0)
            out[n++] = (struct pollfd){.fd = bs->pfds[i].fd, .events = bs->pfds[i].events};
    return n;
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
                hc_log_warn("bootstrap: unexpected message from rank %d: %s", bs->rank == 0 ? i : 0,
                            why);
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
    hc_bs_node_close(bs);
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
