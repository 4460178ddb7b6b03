/*
 * The bootstrap's collectives over the star, after the rendezvous: an
 * allgather (each rank sends its part to rank 0, which gathers from
 * whoever is ready first and sends everything back) and the barrier built
 * on it. Failure notices and relayed blobs that arrive in the middle are
 * taken (hc_bs_sideband); a failure makes the star unusable (bs->dead) and
 * rank 0 tells the others why.
 */
#include "core/bootstrap_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A non-zero rank's part, to rank 0 (AG_IN). */
static hcomm_status_t hc_bs_ag_in(hc_bootstrap_t *bs, const char *fn, const void *in, size_t len,
                                  double deadline)
{
    hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC,
                            HC_BOOTSTRAP_VERSION,
                            HC_BOOTSTRAP_MSG_AG_IN,
                            (uint32_t)bs->rank,
                            (uint32_t)bs->size,
                            0,
                            NULL,
                            len,
                            in};
    return hc_bs_send_msg(bs->conns[0].fd, &m, deadline, fn, 0);
}

/* A non-zero rank: sends its part to rank 0, then waits for everything
 * (failure notices may come first: taken, then waited on). */
static hcomm_status_t hc_bs_allgather_rank(hc_bootstrap_t *bs, const char *fn, const void *in,
                                           size_t len, void *out, const hc_bs_expect_t *e,
                                           double deadline, double timeout_sec)
{
    hc_bs_conn_t *c = &bs->conns[0];
    char why[160], text[HC_BOOTSTRAP_MAX_ABORT_TEXT + 1];
    hc_bootstrap_msg_t m;
    hcomm_status_t st = hc_bs_ag_in(bs, fn, in, len, deadline);
    if (st == HCOMM_OK) {
        while ((st = hc_bs_conn_wait(c, e, deadline, &m, why, sizeof(why))) == HCOMM_OK &&
               hc_bs_is_sideband(m.type))
            hc_bs_sideband(bs, 0, &m);
        if (st == HCOMM_ERR_TIMEOUT)
            st = hc_error(st, "%s: rank %d got no reply from rank 0 within %.1f s", fn, bs->rank,
                          timeout_sec);
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

/* Rank 0: reads what readable connection r has; a sideband message is
 * taken, rank r's part is stored (have[r], *left_p counts down). */
static hcomm_status_t hc_bs_gather_from(hc_bootstrap_t *bs, int r, const char *fn,
                                        const hc_bs_expect_t *e, size_t len, void *out, bool *have,
                                        int *left_p)
{
    char why[160];
    hc_bootstrap_msg_t m;
    hc_bs_rx_t rx = hc_bs_conn_read(&bs->conns[r], e, why, sizeof(why));
    if (rx == HC_BS_RX_MORE) return HCOMM_OK;
    if (rx == HC_BS_RX_EOF)
        return hc_error(HCOMM_ERR_PEER_FAILED,
                        "%s: rank %d closed its bootstrap "
                        "connection (%s)",
                        fn, r, why);
    if (rx == HC_BS_RX_DONE &&
        hc_bootstrap_msg_parse(bs->conns[r].buf, bs->conns[r].have, &m) > 0 &&
        hc_bs_is_sideband(m.type)) {
        hc_bs_sideband(bs, r, &m);
        bs->conns[r].have = 0;
        return HCOMM_OK;
    }
    if (rx == HC_BS_RX_BAD ||
        hc_bootstrap_msg_parse(bs->conns[r].buf, bs->conns[r].have, &m) <= 0 ||
        m.type != HC_BOOTSTRAP_MSG_AG_IN || m.rank != (uint32_t)r)
        return hc_error(HCOMM_ERR_BOOTSTRAP, "%s: bad message from rank %d: %s", fn, r,
                        rx == HC_BS_RX_BAD ? why : "wrong type or rank");
    if (len) memcpy((uint8_t *)out + (size_t)r * len, m.payload, len);
    bs->conns[r].have = 0;
    have[r] = true;
    (*left_p)--;
    return HCOMM_OK;
}

/* Rank 0: gathers every other rank's part, from whoever is ready first. */
static hcomm_status_t hc_bs_gather_all(hc_bootstrap_t *bs, const char *fn, const hc_bs_expect_t *e,
                                       size_t len, void *out, bool *have, double deadline,
                                       double timeout_sec)
{
    hcomm_status_t st = HCOMM_OK;
    int left = bs->size - 1;
    while (left > 0 && st == HCOMM_OK) {
        for (int r = 1; r < bs->size; r++)
            bs->pfds[r].fd = have[r] ? -1 : bs->conns[r].fd;
        int ms = hc_bs_poll_ms(deadline);
        if (ms == 0) {
            char list[200];
            hc_bs_rank_list(have, bs->size, list, sizeof(list));
            return hc_error(HCOMM_ERR_TIMEOUT, "%s: rank(s) %s did not arrive within %.1f s", fn,
                            list, timeout_sec);
        }
        if (poll(bs->pfds + 1, (nfds_t)bs->size - 1, bs->idle ? HC_MIN(ms, HC_BS_IDLE_MS) : ms) ==
                0 &&
            bs->idle)
            bs->idle(bs->idle_arg);
        for (int r = 1; r < bs->size && st == HCOMM_OK; r++) {
            if (have[r] || bs->pfds[r].revents == 0) continue;
            st = hc_bs_gather_from(bs, r, fn, e, len, out, have, &left);
        }
    }
    return st;
}

/* Rank 0: gathers, then sends everything to every rank; a failure is told
 * to every rank (hc_bs_abort_all) and leaves the star unusable. */
static hcomm_status_t hc_bs_allgather_root(hc_bootstrap_t *bs, const char *fn, size_t len,
                                           void *out, const bool *to, const hc_bs_expect_t *e,
                                           double deadline, double timeout_sec)
{
    bool *have = calloc((size_t)bs->size, sizeof(bool));
    if (have == NULL) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    have[0] = true;
    hcomm_status_t st = hc_bs_gather_all(bs, fn, e, len, out, have, deadline, timeout_sec);
    for (int r = 1; r < bs->size && st == HCOMM_OK; r++) {
        if (to && !to[r]) continue;
        hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC,
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

static hcomm_status_t hc_bs_allgather_check(hc_bootstrap_t *bs, const char *fn, const void *in,
                                            size_t len, const void *out, double timeout_sec)
{
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
    return HCOMM_OK;
}

hcomm_status_t hc_bs_allgather(hc_bootstrap_t *bs, const char *fn, const void *in, size_t len,
                               void *out, const bool *to, double timeout_sec)
{
    double deadline = hc_time_sec() + timeout_sec;
    hcomm_status_t st = hc_bs_allgather_check(bs, fn, in, len, out, timeout_sec);
    if (st != HCOMM_OK) return st;
    /* Non-zero ranks get their own contribution back from rank 0; copying it
     * now could overwrite `in` when it lies inside `out`. */
    if (len && bs->rank == 0) memmove(out, in, len);
    if (bs->size == 1) return HCOMM_OK;

    hc_bs_expect_t e = {bs->rank == 0 ? HC_BOOTSTRAP_MSG_AG_IN : HC_BOOTSTRAP_MSG_AG_OUT,
                        (uint32_t)bs->size, bs->rank == 0 ? len : len * (size_t)bs->size, true};
    if (bs->rank != 0) return hc_bs_allgather_rank(bs, fn, in, len, out, &e, deadline, timeout_sec);
    return hc_bs_allgather_root(bs, fn, len, out, to, &e, deadline, timeout_sec);
}

hcomm_status_t hc_bs_allgather_send(hc_bootstrap_t *bs, const char *fn, const void *in, size_t len,
                                    double deadline, double timeout_sec)
{
    hcomm_status_t st = hc_bs_allgather_check(bs, fn, in, len, in, timeout_sec);
    if (st != HCOMM_OK) return st;
    st = hc_bs_ag_in(bs, fn, in, len, deadline);
    if (st != HCOMM_OK) bs->dead = st;
    return st;
}

hcomm_status_t hc_bootstrap_allgather(hc_bootstrap_t *bs, const void *in, size_t len, void *out,
                                      double timeout_sec)
{
    return hc_bs_allgather(bs, len ? "hc_bootstrap_allgather" : "hc_bootstrap_barrier", in, len,
                           out, NULL, timeout_sec);
}

hcomm_status_t hc_bootstrap_barrier(hc_bootstrap_t *bs, double timeout_sec)
{
    return hc_bootstrap_allgather(bs, NULL, 0, NULL, timeout_sec);
}
