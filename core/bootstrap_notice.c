/*
 * Failure notices over the bootstrap star: who failed and why, decided by
 * rank 0 and told to every rank (see the comment below). Separate because it
 * is a protocol of its own, with its own state (bs->verdict, left_after),
 * that runs whenever the star is read: inside collectives and in
 * hc_bootstrap_poll.
 */
#include "core/bootstrap_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

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
    hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC,
                            HC_BOOTSTRAP_VERSION,
                            HC_BOOTSTRAP_MSG_FAILED,
                            (uint32_t)bs->rank,
                            (uint32_t)bs->size,
                            0,
                            NULL,
                            HC_BOOTSTRAP_NOTICE_HDR + tl,
                            payload};
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
            while (bs->left_after[by] != c)
                by = bs->left_after[by];
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
void hc_bs_notice_msg(hc_bootstrap_t *bs, int from, const hc_bootstrap_msg_t *m)
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
    hcomm_status_t st =
        (int32_t)w[2] == HCOMM_ERR_TIMEOUT ? HCOMM_ERR_TIMEOUT : HCOMM_ERR_PEER_FAILED;
    hc_bs_verdict_taken(bs, x, cause, st, text);
}

/* A bootstrap connection closed: rank 0 judges; elsewhere it is rank 0's,
 * gone by itself unless it had told us of a failure before. */
void hc_bs_closed(hc_bootstrap_t *bs, int peer)
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
    if (bs == NULL || bs->size == 1 || rank < 0 || rank >= bs->size || rank == bs->rank) return -1;
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
