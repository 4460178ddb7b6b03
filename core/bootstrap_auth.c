/*
 * The bootstrap handshake: a rank and rank 0 prove to each other that they
 * hold the job key without sending it, and rank 0 decides what a peer's
 * failure to prove it, or a member's misconfiguration, means for the job.
 *
 *   rank -> 0   HELLO      rank, size; nonce_r
 *   0 -> rank   CHALLENGE  nonce0, MAC(key, "challenge", nonce_r, nonce0, rank, size0)
 *   rank -> 0   PROOF      MAC(key, "proof", nonce_r, nonce0, rank, size, blob_len); blob
 *   0 -> rank   TABLE later, or REFUSE (status, text; MAC(key, "refuse", ...) when
 *               the peer proved the key), ABORT (the job failed before), or
 *               BUSY (connect again)
 *
 * HMAC-SHA256 from base/auth.h, over length-framed parts: both sides'
 * fresh nonces make every MAC good for one connection only (a recorded
 * handshake replayed to rank 0 fails: rank 0's nonce is new), the rank and
 * sizes bind it to this pair, and rank 0 proves itself first, so a rank
 * scanning a port span learns "another job's rank 0" without signing
 * anything for it. Rank 0 checks a PROOF's MAC before it reads the blob.
 *
 * Who may fail the job: a peer that proved the key is a member, so a
 * duplicate rank, another size or another blob length fails the whole job
 * at once with that reason. A peer that fails the proof cannot be told
 * apart from a stranger by anything it sends, so it is only refused and
 * logged, unless the kernel says its socket belongs to this user on this
 * host (sock_diag): such a process can read the key from rank 0's
 * environment or signal it anyway, so believing it gives nobody outside the
 * key's reach a way to stop the job.
 */
#include "core/bootstrap_int.h"

#include "base/auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

_Static_assert(HC_BOOTSTRAP_NONCE_LEN == HC_AUTH_NONCE, "bootstrap nonce is base/auth's");
_Static_assert(HC_BOOTSTRAP_MAC_LEN == HC_AUTH_MAC, "bootstrap MAC is base/auth's");

typedef enum { HC_BS_MAC_CHALLENGE, HC_BS_MAC_PROOF, HC_BS_MAC_REFUSE } hc_bs_mac_kind_t;

/* Each kind its own label, so that no MAC can stand in for another. */
static const char *const hc_bs_mac_labels[] = {
    [HC_BS_MAC_CHALLENGE] = "hcomm bootstrap 2: challenge",
    [HC_BS_MAC_PROOF] = "hcomm bootstrap 2: proof",
    [HC_BS_MAC_REFUSE] = "hcomm bootstrap 2: refuse",
};

static hcomm_status_t hc_bs_mac(const char *key, hc_bs_mac_kind_t kind, const hc_bs_conn_t *c,
                                uint32_t rank, uint32_t size, uint64_t blob_len, const void *extra,
                                size_t extra_len, uint8_t mac[HC_AUTH_MAC])
{
    uint8_t words[16];
    uint64_t v[3] = {rank, size, blob_len};
    for (int i = 0; i < 16; i++)
        words[i] = (uint8_t)(i < 4   ? v[0] >> (8 * i)
                             : i < 8 ? v[1] >> (8 * (i - 4))
                                     : v[2] >> (8 * (i - 8)));
    const char *label = hc_bs_mac_labels[kind];
    hc_auth_part_t parts[] = {{label, strlen(label)},
                              {c->nonce_r, sizeof(c->nonce_r)},
                              {c->nonce0, sizeof(c->nonce0)},
                              {words, sizeof(words)},
                              {extra, extra_len}};
    return hc_auth_mac(key, strlen(key), parts, (int)HC_ARRAY_SIZE(parts), mac);
}

/* *ok_p: got is the MAC of that message (compared in constant time). */
static hcomm_status_t hc_bs_mac_check(const char *key, hc_bs_mac_kind_t kind, const hc_bs_conn_t *c,
                                      uint32_t rank, uint32_t size, uint64_t blob_len,
                                      const void *extra, size_t extra_len, const uint8_t *got,
                                      bool *ok_p)
{
    uint8_t want[HC_AUTH_MAC];
    hcomm_status_t st = hc_bs_mac(key, kind, c, rank, size, blob_len, extra, extra_len, want);
    *ok_p = st == HCOMM_OK && hc_auth_equal(want, got, HC_AUTH_MAC);
    return st;
}

hcomm_status_t hc_bs_auth_file_tag(const char *key, char *out, size_t cap)
{
    static const char label[] = "hcomm bootstrap: address file";
    hc_auth_part_t part = {label, sizeof(label) - 1};
    uint8_t mac[HC_AUTH_MAC];
    if (cap < 17) return hc_error(HCOMM_ERR_INTERNAL, "hc_bs_auth_file_tag: cap %zu < 17", cap);
    hcomm_status_t st = hc_auth_mac(key, strlen(key), &part, 1, mac);
    if (st != HCOMM_OK) return st;
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, cap - 2 * (size_t)i, "%02x", mac[i]);
    return HCOMM_OK;
}

/* ---- who is on the other end ---------------------------------------------- */

/* The peer socket's 4-tuple, from its own side: its source is our peer, its
 * destination us. False for an address family sock_diag cannot look up. */
static bool hc_bs_diag_id(int fd, struct inet_diag_req_v2 *req)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);
    if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 || me.ss_family != peer.ss_family)
        return false;
    req->sdiag_protocol = IPPROTO_TCP;
    req->idiag_states = ~0u;
    req->id.idiag_cookie[0] = req->id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    if (peer.ss_family == AF_INET) {
        const struct sockaddr_in *p4 = (const void *)&peer, *m4 = (const void *)&me;
        req->sdiag_family = AF_INET;
        req->id.idiag_sport = p4->sin_port;
        req->id.idiag_dport = m4->sin_port;
        memcpy(req->id.idiag_src, &p4->sin_addr, 4);
        memcpy(req->id.idiag_dst, &m4->sin_addr, 4);
        return true;
    }
    if (peer.ss_family != AF_INET6) return false;
    const struct sockaddr_in6 *p6 = (const void *)&peer, *m6 = (const void *)&me;
    req->id.idiag_sport = p6->sin6_port;
    req->id.idiag_dport = m6->sin6_port;
    if (IN6_IS_ADDR_V4MAPPED(&p6->sin6_addr) && IN6_IS_ADDR_V4MAPPED(&m6->sin6_addr)) {
        /* An IPv4 client of a dual-stack listener: its socket is AF_INET. */
        req->sdiag_family = AF_INET;
        memcpy(req->id.idiag_src, p6->sin6_addr.s6_addr + 12, 4);
        memcpy(req->id.idiag_dst, m6->sin6_addr.s6_addr + 12, 4);
    } else {
        req->sdiag_family = AF_INET6;
        memcpy(req->id.idiag_src, &p6->sin6_addr, 16);
        memcpy(req->id.idiag_dst, &m6->sin6_addr, 16);
    }
    return true;
}

/* Whether the other end of connection fd is a socket on this host (this
 * network namespace) owned by this process's user, as the kernel's
 * sock_diag says. False when it cannot tell (another host, another
 * namespace, no sock_diag). */
static bool hc_bs_peer_is_own_user(int fd)
{
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } q;
    memset(&q, 0, sizeof(q));
    q.nlh.nlmsg_len = sizeof(q);
    q.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    q.nlh.nlmsg_flags = NLM_F_REQUEST;
    if (!hc_bs_diag_id(fd, &q.req)) return false;
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0) return false;
    struct timeval tv = {0, 200000}; /* the kernel answers at once; bound it anyway */
    (void)setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    long answer[2048 / sizeof(long)]; /* aligned for the nlmsghdr */
    ssize_t n = -1;
    if (sendto(nl, &q, sizeof(q), 0, (struct sockaddr *)&kernel, sizeof(kernel)) == sizeof(q))
        while ((n = recv(nl, answer, sizeof(answer), 0)) < 0 && errno == EINTR)
            ;
    close(nl);
    const struct nlmsghdr *h = (const struct nlmsghdr *)answer;
    if (n < 0 || !NLMSG_OK(h, (size_t)n) || h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
        h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
        return false;
    const struct inet_diag_msg *d = NLMSG_DATA(h);
    return d->idiag_uid == (uint32_t)geteuid();
}

/* ---- rank 0 ---------------------------------------------------------------- */

/* Reads and drops what a refused peer has sent, so that closing sends FIN
 * after our refusal rather than a reset that could discard it. */
static void hc_bs_drain(int fd)
{
    uint8_t sink[4096];
    for (int i = 0; i < 512; i++) {
        ssize_t n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (n > 0 || (n < 0 && errno == EINTR)) continue;
        return;
    }
}

/* REFUSE (or ABORT) to c with a status and text; a REFUSE is signed over
 * c's nonces when the peer proved the key (a member: it can trust the
 * reason), bare otherwise. Best effort. */
static void hc_bs_send_verdict(const hc_bs_gather_t *g, hc_bs_conn_t *c, uint32_t type, bool sign,
                               hcomm_status_t st, const char *text)
{
    uint8_t payload[4 + HC_BOOTSTRAP_MAX_ABORT_TEXT], mac[HC_AUTH_MAC];
    size_t tl = HC_MIN(strlen(text), (size_t)HC_BOOTSTRAP_MAX_ABORT_TEXT);
    uint32_t code = (uint32_t)(int32_t)st;
    for (int i = 0; i < 4; i++)
        payload[i] = (uint8_t)(code >> (8 * i));
    memcpy(payload + 4, text, tl);
    hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC,
                            HC_BOOTSTRAP_VERSION,
                            type,
                            0,
                            (uint32_t)g->bs->size,
                            0,
                            NULL,
                            4 + tl,
                            payload};
    if (type == HC_BOOTSTRAP_MSG_REFUSE && sign &&
        hc_bs_mac(g->p->job_key, HC_BS_MAC_REFUSE, c, c->claim_rank, (uint32_t)g->bs->size, 0,
                  payload, 4 + tl, mac) == HCOMM_OK) {
        m.auth_len = HC_AUTH_MAC;
        m.auth = mac;
    }
    (void)hc_bs_send_msg(c->fd, &m, 0.0, "refuse", -1);
}

void hc_bs_auth_job_fail(hc_bs_gather_t *g, hcomm_status_t st, const char *text)
{
    if (g->fail != HCOMM_OK) return;
    g->fail = st;
    snprintf(g->fail_text, sizeof(g->fail_text), "%s", text);
    g->fail_until = HC_MIN(g->deadline, hc_time_sec() + HC_BS_FAIL_LINGER);
    g->told = g->joined;
    hc_bs_abort_all(g->bs, st, g->fail_text);
}

/* A peer that speaks another protocol version: told so in a form it can
 * show (protocol 1's ABORT has the very layout of ours, only the version
 * differs), then dropped. It proved nothing, so it cannot fail the job. */
static void hc_bs_root_other_version(hc_bs_gather_t *g, hc_bs_conn_t *c, uint32_t v)
{
    uint8_t buf[HC_BOOTSTRAP_HDR_LEN + 4 + 200];
    char text[200];
    uint32_t rank = (uint32_t)c->buf[12] | (uint32_t)c->buf[13] << 8 | (uint32_t)c->buf[14] << 16 |
                    (uint32_t)c->buf[15] << 24;
    int tl = snprintf(text, sizeof(text),
                      "bootstrap protocol mismatch: rank 0 speaks protocol %d, this rank %u (ranks "
                      "run different hcomm versions)",
                      HC_BOOTSTRAP_VERSION, v);
    tl = HC_MIN(tl, (int)sizeof(text) - 1);
    uint8_t payload[4 + sizeof(text)];
    uint32_t code = (uint32_t)(int32_t)HCOMM_ERR_BOOTSTRAP;
    for (int i = 0; i < 4; i++)
        payload[i] = (uint8_t)(code >> (8 * i));
    memcpy(payload + 4, text, (size_t)tl);
    hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC,
                            HC_BOOTSTRAP_VERSION,
                            v == 1 ? HC_BOOTSTRAP_MSG_ABORT : HC_BOOTSTRAP_MSG_REFUSE,
                            0,
                            (uint32_t)g->bs->size,
                            0,
                            NULL,
                            4 + (uint64_t)tl,
                            payload};
    long n = hc_bootstrap_msg_pack(&m, buf, sizeof(buf));
    if (n > 0 && v == 1) buf[4] = 1; /* the version field, little-endian */
    hc_bs_drain(c->fd);
    if (n > 0) (void)send(c->fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
    g->nclaims++;
    snprintf(g->claim_text, sizeof(g->claim_text),
             "from %s claiming rank %u: it speaks bootstrap protocol %u, rank 0 protocol %d",
             c->peer, rank, v, HC_BOOTSTRAP_VERSION);
    snprintf(text, sizeof(text), "speaks bootstrap protocol %u, rank 0 protocol %d: told so", v,
             HC_BOOTSTRAP_VERSION);
    hc_bs_reject(c, text);
}

/* A HELLO: answered with rank 0's nonce and its MAC (rank 0 proves the key
 * first). */
static bool hc_bs_root_hello(hc_bs_gather_t *g, hc_bs_conn_t *c)
{
    hc_bootstrap_msg_t m;
    uint8_t auth[HC_BOOTSTRAP_NONCE_LEN + HC_AUTH_MAC];
    (void)hc_bootstrap_msg_parse(c->buf, c->have, &m);
    c->have = 0;
    c->claim_rank = m.rank;
    c->claim_size = m.size;
    memcpy(c->nonce_r, m.auth, sizeof(c->nonce_r));
    if (hc_auth_random(c->nonce0, sizeof(c->nonce0)) != HCOMM_OK ||
        hc_bs_mac(g->p->job_key, HC_BS_MAC_CHALLENGE, c, m.rank, (uint32_t)g->bs->size, 0, NULL, 0,
                  auth + HC_BOOTSTRAP_NONCE_LEN) != HCOMM_OK) {
        hc_bs_reject(c, hc_error_last());
        return false;
    }
    memcpy(auth, c->nonce0, HC_BOOTSTRAP_NONCE_LEN);
    hc_bootstrap_msg_t ch = {HC_BOOTSTRAP_MAGIC,
                             HC_BOOTSTRAP_VERSION,
                             HC_BOOTSTRAP_MSG_CHALLENGE,
                             0,
                             (uint32_t)g->bs->size,
                             sizeof(auth),
                             auth,
                             0,
                             NULL};
    /* 80 bytes on a fresh socket: if they cannot go now, the rank retries. */
    if (hc_bs_send_msg(c->fd, &ch, 0.0, "challenge", -1) != HCOMM_OK) {
        hc_bs_reject(c, "could not send the CHALLENGE");
        return false;
    }
    c->stage = 1;
    return true;
}

/* A PROOF whose MAC is wrong: a job key other than rank 0's, or a replay
 * (the nonce it signed is not this connection's). Told "job key mismatch"
 * and dropped; it fails the job only when it is this user's, on this host
 * (see the top of this file). */
static void hc_bs_root_key_refused(hc_bs_gather_t *g, hc_bs_conn_t *c)
{
    const char *name = hc_bs_key_name(g->p);
    char text[HC_BOOTSTRAP_MAX_ABORT_TEXT];
    /* Asked before the refusal goes: the rank leaves once it has it. */
    bool own = hc_bs_peer_is_own_user(c->fd);
    hc_bs_send_verdict(g, c, HC_BOOTSTRAP_MSG_REFUSE, false, HCOMM_ERR_BOOTSTRAP,
                       "job key mismatch");
    hc_bs_drain(c->fd);
    if (own) {
        snprintf(text, sizeof(text),
                 "job key mismatch: rank %u (a process of this user on this host, %s) holds a job "
                 "key other than rank 0's (%s differs)",
                 c->claim_rank, c->peer, name);
        hc_bs_auth_job_fail(g, HCOMM_ERR_BOOTSTRAP, text);
        g->told++;
        hc_log_debug("bootstrap: refused %s: %s", c->peer, text);
        hc_bs_conn_close(c);
        return;
    }
    g->nclaims++;
    snprintf(g->claim_text, sizeof(g->claim_text),
             "from %s claiming rank %u: it failed the job key proof (%s differs there?)", c->peer,
             c->claim_rank, name);
    snprintf(text, sizeof(text),
             "claims rank %u but failed the job key proof (a different %s, or a replayed "
             "handshake): told \"job key mismatch\"",
             c->claim_rank, name);
    hc_bs_reject(c, text);
}

/* A PROOF's header and MAC are in (its blob not yet read). */
static bool hc_bs_root_proof(hc_bs_gather_t *g, hc_bs_conn_t *c, const hc_bootstrap_msg_t *m)
{
    char why[160];
    bool ok;
    if (m->rank != c->claim_rank || m->size != c->claim_size) {
        snprintf(why, sizeof(why), "a PROOF for rank %u of %u after a HELLO for rank %u of %u",
                 m->rank, m->size, c->claim_rank, c->claim_size);
        hc_bs_reject(c, why);
        return false;
    }
    if (hc_bs_mac_check(g->p->job_key, HC_BS_MAC_PROOF, c, m->rank, m->size, m->payload_len, NULL,
                        0, c->buf + HC_BOOTSTRAP_HDR_LEN, &ok) != HCOMM_OK) {
        hc_bs_reject(c, hc_error_last());
        return false;
    }
    if (!ok) {
        hc_bs_root_key_refused(g, c);
        return false;
    }
    c->stage = 2;
    return true;
}

/* A whole PROOF from a member: it joins, or its misconfiguration fails the
 * job (and once the job has failed, every member that comes is told why). */
static void hc_bs_root_member(hc_bs_gather_t *g, hc_bs_conn_t *c)
{
    hc_bootstrap_t *bs = g->bs;
    hc_bootstrap_msg_t m;
    char text[HC_BOOTSTRAP_MAX_ABORT_TEXT];
    (void)hc_bootstrap_msg_parse(c->buf, c->have, &m);
    text[0] = '\0';
    if (m.size != (uint32_t)bs->size)
        snprintf(text, sizeof(text),
                 "job size mismatch: rank %u says the job has %u ranks, rank 0 says %d", m.rank,
                 m.size, bs->size);
    else if (m.payload_len != bs->blob_len)
        snprintf(text, sizeof(text),
                 "address blob length mismatch: rank %u sent %llu bytes, rank 0 expects %zu (the "
                 "ranks run different hcomm builds?)",
                 m.rank, (unsigned long long)m.payload_len, bs->blob_len);
    else if (m.rank == 0)
        snprintf(text, sizeof(text), "duplicate rank 0: a process at %s says it is rank 0 too",
                 c->peer);
    else if (bs->conns[m.rank].fd >= 0)
        snprintf(text, sizeof(text),
                 "duplicate rank %u: two processes say they are rank %u (the first from %s, the "
                 "second from %s)",
                 m.rank, m.rank, bs->conns[m.rank].peer, c->peer);
    if (text[0] || g->fail != HCOMM_OK) {
        /* The cause is refused; a member that comes after the job failed is
         * told, as the joined ranks were, that the job stopped. */
        if (text[0]) hc_bs_auth_job_fail(g, HCOMM_ERR_BOOTSTRAP, text);
        hc_bs_send_verdict(g, c, text[0] ? HC_BOOTSTRAP_MSG_REFUSE : HC_BOOTSTRAP_MSG_ABORT, true,
                           g->fail, g->fail_text);
        g->told++;
        hc_log_debug("bootstrap: refused rank %u from %s: %s", m.rank, c->peer, g->fail_text);
        hc_bs_drain(c->fd);
        hc_bs_conn_close(c);
        return;
    }
    memcpy(bs->table + (size_t)m.rank * bs->blob_len, m.payload, bs->blob_len);
    c->rank = (int)m.rank;
    c->have = 0;
    hc_log_debug("bootstrap: rank %u joined from %s", m.rank, c->peer);
    bs->conns[m.rank] = *c;
    hc_bs_conn_init(c);
    g->joined++;
}

bool hc_bs_auth_root_step(hc_bs_gather_t *g, hc_bs_conn_t *c)
{
    char why[160];
    for (;;) {
        hc_bs_expect_t e = {c->stage == 0 ? HC_BOOTSTRAP_MSG_HELLO : HC_BOOTSTRAP_MSG_PROOF,
                            0,
                            0,
                            false,
                            c->stage > 0,
                            c->stage == 1};
        hc_bs_rx_t r = hc_bs_conn_read(c, &e, why, sizeof(why));
        if (r == HC_BS_RX_MORE) return true;
        if (r != HC_BS_RX_DONE) {
            uint32_t v = hc_bootstrap_msg_version(c->buf, c->have);
            if (r == HC_BS_RX_BAD && c->have >= HC_BOOTSTRAP_HDR_LEN && v &&
                v != HC_BOOTSTRAP_VERSION)
                hc_bs_root_other_version(g, c, v);
            else
                hc_bs_reject(c, why);
            return false;
        }
        if (c->stage == 0) {
            if (!hc_bs_root_hello(g, c)) return false;
            continue;
        }
        hc_bootstrap_msg_t m;
        long total = hc_bootstrap_msg_parse_header(c->buf, c->have, &m);
        if (c->stage == 1) {
            if (!hc_bs_root_proof(g, c, &m)) return false;
            c->need = (size_t)total; /* now the blob */
            if (c->have < c->need) continue;
        }
        hc_bs_root_member(g, c);
        return false;
    }
}

/* ---- a rank ------------------------------------------------------------------ */

/* A rank whose rank 0 proved another key tells it so (rank 0 cannot know
 * otherwise): a PROOF under this rank's key, without the blob (it is for
 * this job's rank 0 only); best effort. */
static void hc_bs_auth_tell_key(hc_bs_conn_t *c, const hc_bootstrap_params_t *p, double deadline)
{
    hc_bootstrap_msg_t m;
    uint8_t mac[HC_AUTH_MAC];
    char r[200];
    if (hc_bs_mac(p->job_key, HC_BS_MAC_PROOF, c, (uint32_t)p->rank, (uint32_t)p->size, 0, NULL, 0,
                  mac) == HCOMM_OK) {
        hc_bootstrap_msg_t pr = {HC_BOOTSTRAP_MAGIC,
                                 HC_BOOTSTRAP_VERSION,
                                 HC_BOOTSTRAP_MSG_PROOF,
                                 (uint32_t)p->rank,
                                 (uint32_t)p->size,
                                 HC_AUTH_MAC,
                                 mac,
                                 0,
                                 NULL};
        /* Until rank 0 answers (briefly): it asks the kernel whose
         * socket this is while the connection is still open. */
        hc_bs_expect_t re = {HC_BOOTSTRAP_MSG_REFUSE, 0, 0, false, true, false};
        if (hc_bs_send_msg(c->fd, &pr, deadline, "hc_bootstrap_open", 0) == HCOMM_OK)
            (void)hc_bs_conn_wait(c, &re, HC_MIN(deadline, hc_time_sec() + 1.0), &m, r, sizeof(r));
    }
}

hc_bs_hs_t hc_bs_auth_rank_handshake(hc_bs_conn_t *c, const hc_bootstrap_params_t *p,
                                     const void *blob, size_t blob_len, double challenge_until,
                                     double deadline, bool probing, hcomm_status_t *st_p, char *why,
                                     size_t wcap)
{
    hc_bootstrap_msg_t m;
    uint8_t mac[HC_AUTH_MAC];
    char r[200];
    bool ok;

    if ((*st_p = hc_auth_random(c->nonce_r, sizeof(c->nonce_r))) != HCOMM_OK)
        return HC_BS_HS_FAILED;
    hc_bootstrap_msg_t hello = {HC_BOOTSTRAP_MAGIC,
                                HC_BOOTSTRAP_VERSION,
                                HC_BOOTSTRAP_MSG_HELLO,
                                (uint32_t)p->rank,
                                (uint32_t)p->size,
                                HC_BOOTSTRAP_NONCE_LEN,
                                c->nonce_r,
                                0,
                                NULL};
    *st_p = hc_bs_send_msg(c->fd, &hello, challenge_until, "hc_bootstrap_open", 0);
    /* A reset while sending may follow a BUSY that is already here: the
     * reply below tells. */
    if (*st_p != HCOMM_OK && *st_p != HCOMM_ERR_PEER_FAILED) return HC_BS_HS_FAILED;
    hc_bs_expect_t e = {HC_BOOTSTRAP_MSG_CHALLENGE, 0, 0};
    *st_p = hc_bs_conn_wait(c, &e, challenge_until, &m, r, sizeof(r));
    if (*st_p == HCOMM_OK && m.type == HC_BOOTSTRAP_MSG_BUSY) return HC_BS_HS_BUSY;
    if (*st_p == HCOMM_OK && m.type != HC_BOOTSTRAP_MSG_CHALLENGE) {
        snprintf(r, sizeof(r), "a message of type %u", m.type);
        *st_p = HCOMM_ERR_BOOTSTRAP;
    }
    if (*st_p != HCOMM_OK) {
        snprintf(why, wcap, "%s answered the hello with %s: not this job's rank 0", c->peer,
                 *st_p == HCOMM_ERR_PEER_FAILED ? "a close"
                 : *st_p == HCOMM_ERR_TIMEOUT   ? "silence"
                                                : r);
        return HC_BS_HS_ELSEWHERE;
    }
    memcpy(c->nonce0, m.auth, sizeof(c->nonce0));
    *st_p = hc_bs_mac_check(p->job_key, HC_BS_MAC_CHALLENGE, c, (uint32_t)p->rank, m.size, 0, NULL,
                            0, (const uint8_t *)m.auth + HC_BOOTSTRAP_NONCE_LEN, &ok);
    if (*st_p != HCOMM_OK) return HC_BS_HS_FAILED;
    if (!ok) {
        snprintf(why, wcap, "%s proved a job key other than this rank's: another job's rank 0",
                 c->peer);
        if (probing) return HC_BS_HS_ELSEWHERE;
        hc_bs_auth_tell_key(c, p, deadline);
        return HC_BS_HS_KEY;
    }
    *st_p = hc_bs_mac(p->job_key, HC_BS_MAC_PROOF, c, (uint32_t)p->rank, (uint32_t)p->size,
                      blob_len, NULL, 0, mac);
    if (*st_p != HCOMM_OK) return HC_BS_HS_FAILED;
    hc_bootstrap_msg_t pr = {HC_BOOTSTRAP_MAGIC,
                             HC_BOOTSTRAP_VERSION,
                             HC_BOOTSTRAP_MSG_PROOF,
                             (uint32_t)p->rank,
                             (uint32_t)p->size,
                             HC_AUTH_MAC,
                             mac,
                             blob_len,
                             blob};
    *st_p = hc_bs_send_msg(c->fd, &pr, deadline, "hc_bootstrap_open", 0);
    /* A reset: rank 0 evicted this connection, its BUSY may be here. */
    if (*st_p != HCOMM_OK && *st_p != HCOMM_ERR_PEER_FAILED) return HC_BS_HS_FAILED;
    return HC_BS_HS_PROVEN;
}

hcomm_status_t hc_bs_auth_refuse_decode(const hc_bs_conn_t *c, const hc_bootstrap_params_t *p,
                                        const hc_bootstrap_msg_t *m, char *text, size_t cap)
{
    bool ok = false;
    if (m->auth_len == 0) {
        snprintf(text, cap, "job key mismatch: this rank's proof of its %s failed at rank 0",
                 hc_bs_key_name(p));
        return HCOMM_ERR_BOOTSTRAP;
    }
    if (hc_bs_mac_check(p->job_key, HC_BS_MAC_REFUSE, c, (uint32_t)p->rank, m->size, 0, m->payload,
                        (size_t)m->payload_len, m->auth, &ok) != HCOMM_OK ||
        !ok) {
        snprintf(text, cap, "a refusal whose MAC does not verify (not from this job's rank 0)");
        return HCOMM_ERR_BOOTSTRAP;
    }
    return hc_bs_abort_decode(m, text, cap);
}
