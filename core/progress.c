/*
 * Progress engine. Blocking calls and hcomm_test drive it from the calling
 * thread: every pass polls each open driver, retries frames waiting for
 * credit and advances the collectives in flight (through hc_coll_ops.progress, set
 * by the API layer, since coll/ sits above core/). Idle waits back off from
 * spinning to yielding, so that more ranks than cores still move.
 *
 * About every millisecond a wait also does the slow work: deadline checks,
 * abort checks, and liveness (a local peer's pidfd turns readable when its
 * process exits; the bootstrap sockets to rank 0 close when a rank dies).
 */
#include "core/hc_core.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define HC_SLOW_PERIOD_NS 1000000ull

hc_coll_ops_t hc_coll_ops;

void hc_core_register_coll(const hc_coll_ops_t *ops)
{
    hc_coll_ops = ops ? *ops : (hc_coll_ops_t){0};
}

int hc_progress(void)
{
    int n = 0;
    bool outer = !hc_ctx.in_progress;
    hc_ctx.in_progress = true;
    for (int i = 0; i < hc_ctx.npoll; i++)
        n += hc_ctx.poll[i]->ops->progress(hc_ctx.poll[i]);
    if (HC_UNLIKELY(hc_ctx.npending))
        n += hc_p2p_flush_pending();
    if (hc_coll_ops.progress)
        n += hc_coll_ops.progress();
    if (outer) {
        hc_ctx.in_progress = false;
        for (int i = 0; i < hc_ctx.nflush; i++)
            hc_ctx.flush[i]->ops->flush(hc_ctx.flush[i]);
    }
    return n;
}

/* How long an error message waits for rank 0's verdict on a peer this rank
 * saw fail by its own evidence: the peer may have left because of another
 * rank's failure (rank 0 tells), and the message must name that rank. */
#define HC_VERDICT_GRACE_NS 100000000ull

static void hc_peer_mark_failed(int peer)
{
    hc_peer_t *p = &hc_ctx.peers[peer];
    p->failed = true;
    hc_ctx.nfailed++;
    /* A payload a driver still holds for the peer (a zero-copy put waiting
     * for an acknowledgement that will not come) completes now. */
    for (int i = 0; i < hc_ctx.ndrvs; i++)
        if (hc_ctx.drvs[i]->ops->peer_gone)
            hc_ctx.drvs[i]->ops->peer_gone(hc_ctx.drvs[i], peer);
    if (p->cause != peer)
        hc_log_warn("rank %d failed: %s (after rank %d failed)", peer, p->fail_why, p->cause);
    else
        hc_log_warn("rank %d failed: %s", peer, p->fail_why);
    hc_p2p_fail_peer(peer, p->fail_status);
}

void hc_peer_fail(int peer, hcomm_status_t status, const char *why)
{
    if (peer < 0 || peer >= hc_ctx.size || peer == hc_ctx.rank)
        return;
    hc_peer_t *p = &hc_ctx.peers[peer];
    if (p->failed)
        return;
    if (!p->judged) {
        p->fail_status = status;
        snprintf(p->fail_why, sizeof(p->fail_why), "%s", why);
        int cause = hc_bootstrap_report_failure(hc_ctx.bs, peer, status, why);
        /* Rank 0 judges at once (its verdict came through the notice
         * function); elsewhere the verdict is awaited by hc_peer_error. */
        if (!p->judged)
            p->cause = cause >= 0 ? cause : peer;
    }
    if (p->verdict_pending) {
        p->verdict_pending = false;
        hc_ctx.nverdicts_pending--;
    }
    p->fail_ns = hc_time_ns();
    hc_peer_mark_failed(peer);
}

/* The bootstrap's notice function: records only (it may run inside a
 * bootstrap allgather); the failure itself is taken at the next slow poll. */
void hc_peer_verdict(int peer, int cause, hcomm_status_t status, const char *why)
{
    if (peer < 0 || peer >= hc_ctx.size || peer == hc_ctx.rank)
        return;
    hc_peer_t *p = &hc_ctx.peers[peer];
    if (p->judged)
        return;
    p->judged = true;
    p->cause = cause;
    if (p->failed) {
        if (cause != peer)
            hc_log_info("rank %d: rank 0 says it left after rank %d failed", peer, cause);
        return;
    }
    p->fail_status = status;
    snprintf(p->fail_why, sizeof(p->fail_why), "%s", why);
    p->verdict_pending = true;
    hc_ctx.nverdicts_pending++;
}

hcomm_status_t hc_peer_error(int wpeer, const char *what)
{
    hc_peer_t *p = &hc_ctx.peers[wpeer];
    /* Seen by this rank alone so far: give rank 0 a moment to say whether
     * wpeer died or left after another rank's failure. */
    if (!p->judged && hc_ctx.bs) {
        while (!p->judged && hc_time_ns() - p->fail_ns < HC_VERDICT_GRACE_NS) {
            if (hc_bootstrap_poll(hc_ctx.bs) == 0) {
                struct timespec ts = {0, 200000};
                nanosleep(&ts, NULL);
            }
        }
        int first = -1;
        (void)hc_bootstrap_verdict(hc_ctx.bs, wpeer, &first);
        if (!p->judged && first >= 0)
            p->cause = first; /* no word on wpeer itself, but on an earlier failure */
    }
    int c = p->cause;
    if (c != wpeer && c >= 0 && c < hc_ctx.size) {
        hc_peer_t *q = &hc_ctx.peers[c];
        return hc_error(p->fail_status,
                        "%s: peer rank %d (world) failed: %s (rank %d, which this operation "
                        "needed, left after that: %s)",
                        what, c, q->fail_why[0] ? q->fail_why : "no details", wpeer, p->fail_why);
    }
    return hc_error(p->fail_status, "%s: peer rank %d (world) failed: %s", what, wpeer, p->fail_why);
}

int hc_core_first_failed(void)
{
    if (HC_LIKELY(!hc_core_any_failed()))
        return -1;
    int best = -1;
    uint64_t best_ns = UINT64_MAX;
    for (int w = 0; w < hc_ctx.size; w++) {
        const hc_peer_t *p = &hc_ctx.peers[w];
        if (!p->failed)
            continue;
        /* a peer that left after another's failure: that one came first */
        int c = p->cause >= 0 && p->cause < hc_ctx.size ? p->cause : w;
        uint64_t t = p->fail_ns;
        if (c != w)
            t = hc_ctx.peers[c].failed ? HC_MIN(t, hc_ctx.peers[c].fail_ns) : t - 1;
        if (t < best_ns || (t == best_ns && c < best)) {
            best = c;
            best_ns = t;
        }
    }
    return best;
}

void hc_progress_slow(void)
{
    uint64_t now = hc_time_ns();
    if (now < hc_ctx.slow_next_ns)
        return;
    hc_ctx.slow_next_ns = now + HC_SLOW_PERIOD_NS;
    hc_hang_poll(now);

    /* Rank 0's word first: a peer that left after another's failure is
     * then known as such when its exit is seen below. */
    if (hc_ctx.bs)
        (void)hc_bootstrap_poll(hc_ctx.bs);
    if (HC_UNLIKELY(hc_ctx.nverdicts_pending))
        for (int r = 0; r < hc_ctx.size; r++)
            if (hc_ctx.peers[r].verdict_pending)
                hc_peer_fail(r, hc_ctx.peers[r].fail_status, hc_ctx.peers[r].fail_why);

    /* Local peers: a pidfd polls readable once its process has exited. */
    struct pollfd pfds[64];
    int who[64], n = 0;
    for (int i = 0; i <= hc_ctx.local_size; i++) {
        if (i < hc_ctx.local_size) {
            hc_peer_t *p = &hc_ctx.peers[hc_ctx.local_ranks[i]];
            if (p->pidfd >= 0 && !p->failed) {
                pfds[n] = (struct pollfd){.fd = p->pidfd, .events = POLLIN};
                who[n++] = hc_ctx.local_ranks[i];
            }
        }
        if (n == (int)HC_ARRAY_SIZE(pfds) || (i == hc_ctx.local_size && n > 0)) {
            if (poll(pfds, (nfds_t)n, 0) > 0) {
                /* What the peer wrote before it exited may still sit in
                 * shared memory, unread: take it first, or a receive it
                 * had already satisfied fails (called from waits only,
                 * never from inside a driver's progress). */
                for (int spin = 0; spin < 64 && hc_progress() > 0; spin++)
                    ;
                for (int k = 0; k < n; k++)
                    if (pfds[k].revents)
                        hc_peer_fail(who[k], HCOMM_ERR_PEER_FAILED, "its process exited");
            }
            n = 0;
        }
    }
}


void hc_request_drain(struct hcomm_request *req, uint64_t *deadline_p)
{
    uint64_t limit = *deadline_p ? *deadline_p : hc_time_ns() + (uint64_t)(hc_cfg.timeout * 1e9);
    hc_backoff_t backoff = {0};
    while (req->inflight > 0 && hc_time_ns() < limit) {
        int n = hc_progress();
        hc_progress_slow();
        if (n)
            hc_backoff_reset(&backoff);
        else
            hc_backoff_step(&backoff);
    }
    if (req->inflight > 0)
        hc_log_warn("a failed send to rank %d still has %u frames in its driver after the "
                    "deadline: its buffer must stay valid until the connection ends",
                    req->wpeer, req->inflight);
}

/* A completed request's status for a caller that waited on it: its own
 * failure's words, or for requests failed in bulk (a peer died), which
 * carry none of their own, the failed peer named for this caller. */
static hcomm_status_t hc_request_wait_result(struct hcomm_request *req, const char *what)
{
    (void)hc_request_result(req);
    if (req->status == HCOMM_ERR_PEER_FAILED && req->kind != HC_REQ_COLL && req->wpeer >= 0 &&
        req->wpeer < hc_ctx.size && hc_ctx.peers[req->wpeer].failed)
        hc_peer_error(req->wpeer, what);
    return req->status;
}

hcomm_status_t hc_request_wait(struct hcomm_request *req, const char *what)
{
    uint64_t deadline = 0;
    return hc_request_wait_until(req, what, &deadline);
}

hcomm_status_t hc_request_wait_until(struct hcomm_request *req, const char *what,
                                     uint64_t *deadline_p)
{
    if (req->done)
        return hc_request_wait_result(req, what);
    /* The deadline is taken at the first slow check, not here: a wait that
     * ends within a few polls never reads the clock. */
    uint64_t deadline = *deadline_p;
    hc_backoff_t backoff = {0};
    unsigned iter = 0;
    uint64_t start = 0, next_warn = 0;
    /* level 2: the time blocked, for operations the statistics count
     * (timed: internal communicators' are not) */
    uint64_t wait_t0 = HC_UNLIKELY(hc_stats_level >= 2 && req->stat_t0) ? hc_time_ns() : 0;
    hc_wait_state_t outer = hc_ctx.waiting;
    hc_ctx.waiting.req = req;
    hc_ctx.waiting.op = NULL;
    hc_ctx.waiting.what = what;
    hc_ctx.waiting.since_ns = 0;
    while (!req->done) {
        int n = hc_progress();
        if (req->done)
            break;
        if ((++iter & 31) == 0) {
            hc_progress_slow();
            if (req->comm && hc_comm_aborted(req->comm))
                hc_comm_handle_abort(req->comm);
            if (req->done)
                break;
            uint64_t now = hc_time_ns();
            if (deadline == 0)
                *deadline_p = deadline = now + (uint64_t)(hc_cfg.timeout * 1e9);
            if (!start)
                hc_ctx.waiting.since_ns = start = now;
            hc_hang_check(req, NULL, what, start, now, &next_warn);
            if (now > deadline) {
                /* the explanation first: cancelling drops what it reads */
                char why[2048];
                hc_explain_t e = {.buf = why, .len = sizeof(why)};
                hc_wait_explain(req, NULL, what, now - start, &e);
                hc_request_detach(req);
                if (req->kind == HC_REQ_COLL && hc_coll_ops.cancel)
                    hc_coll_ops.cancel(req);
                hc_error(HCOMM_ERR_TIMEOUT, "%s: timed out after %g s (HCOMM_TIMEOUT): %s", what,
                         hc_cfg.timeout, why);
                hc_request_complete(req, HCOMM_ERR_TIMEOUT);
                break;
            }
        }
        if (n)
            hc_backoff_reset(&backoff);
        else
            hc_backoff_step(&backoff);
    }
    hc_ctx.waiting = outer;
    if (HC_UNLIKELY(wait_t0 != 0))
        hc_stats_wait(req->stat_kind, hc_time_ns() - wait_t0);
    /* A send that failed while a driver still holds its payload (the peer
     * is alive: a broken communicator, a refused message): the caller may
     * free the buffer once this returns, so the puts go out first, within
     * the same deadline. */
    if (HC_UNLIKELY(req->kind == HC_REQ_SEND && req->inflight > 0))
        hc_request_drain(req, deadline_p);
    return hc_request_wait_result(req, what);
}
