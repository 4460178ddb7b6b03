/*
 * Recursive doubling: allreduce (non-power-of-two counts fold the extra
 * ranks into a partner first) and allgather (power-of-two rank counts).
 */
#include "coll/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- allreduce: recursive doubling ------------------------------------------------ */

/* Phases: 0 start; 1 odd fold rank got its partner's data; 2 exchange rounds
 * (op->round = log2 of the distance, op->state 1 = a round is in flight);
 * 3 sending the result back to the folded partner; 4 folded rank sent its
 * data; 5 folded rank waits for the result. op->vrank: 1 when the running
 * value is in tmp rather than rbuf. */
size_t hc_net_rd_state(const hc_coll_op_t *op)
{
    return op->bytes; /* the partner's data, or the running value */
}

/* Phase 0: the running value into rbuf, the rounds counted, and the
 * extra ranks folded: an even one below 2 * rem sends its data to the odd
 * one above it (phase 4), which receives it (phase 1). */
static hcomm_status_t hc_net_rd_start(hc_coll_op_t *op, int n, int me)
{
    int rc = hc_net_alloc(op);
    if (rc != HCOMM_OK) return rc;
    if (op->sbuf != op->rbuf) memcpy(op->rbuf, op->sbuf, op->bytes);
    op->vrank = 0; /* fields past reqs[] are not cleared by the engine */
    op->pof2 = 1;
    while (op->pof2 * 2 <= n)
        op->pof2 *= 2;
    op->rem = n - op->pof2;
    op->round = 0;
    if (me < 2 * op->rem && me % 2 == 0) {
        if ((rc = hc_net_send(op, op->rbuf, op->bytes, me + 1)) != HCOMM_OK) return rc;
        op->phase = 4;
    } else if (me < 2 * op->rem) {
        if ((rc = hc_net_recv(op, op->tmp, op->bytes, me - 1)) != HCOMM_OK) return rc;
        op->phase = 1;
    } else {
        op->phase = 2;
    }
    return HCOMM_OK;
}

/* The comm rank of virtual rank vr's partner at distance mask. */
static int hc_net_rd_peer(const hc_coll_op_t *op, int vr, int mask)
{
    int pv = vr ^ mask;
    return pv < op->rem ? pv * 2 + 1 : pv + op->rem;
}

/* Phase 2, one step: reduce the round that arrived (op->state 1), or post
 * the next round's exchange, or, past the last round, send the result
 * back to the folded partner (phase 3). */
static hcomm_status_t hc_net_rd_round(hc_coll_op_t *op, int me)
{
    uint8_t *bufs[2];
    bufs[0] = op->rbuf;
    bufs[1] = op->tmp;
    uint8_t *cur = bufs[op->vrank], *other = bufs[!op->vrank];
    int vr = me < 2 * op->rem ? me / 2 : me - op->rem;
    int mask = 1 << op->round;
    if (op->state == 1) {
        int peer = hc_net_rd_peer(op, vr, mask);
        bool last = mask * 2 >= op->pof2;
        if (me < peer) {
            hc_net_reduce2(op, cur, cur, other, op->count, last);
        } else {
            hc_net_reduce2(op, other, other, cur, op->count, last);
            op->vrank = !op->vrank;
        }
        op->state = 0;
        op->round++;
        return HCOMM_OK;
    }
    if (mask >= op->pof2) {
        if (op->vrank) memcpy(op->rbuf, op->tmp, op->bytes);
        op->vrank = 0;
        op->phase = 3;
        if (me < 2 * op->rem) return hc_net_send(op, op->rbuf, op->bytes, me - 1);
        return HCOMM_OK;
    }
    int peer = hc_net_rd_peer(op, vr, mask);
    int rc = hc_net_recv(op, other, op->bytes, peer);
    if (rc == HCOMM_OK) rc = hc_net_send(op, cur, op->bytes, peer);
    if (rc != HCOMM_OK) return rc;
    op->state = 1;
    return HCOMM_OK;
}

hc_step_t hc_net_allreduce_rd(hc_coll_op_t *op)
{
    int n = op->comm->size, me = op->comm->rank;
    for (;;) {
        if (op->nreqs) {
            hc_step_t t = hc_net_test(op);
            if (!hc_step_ok(t)) return t;
        }
        int rc = HCOMM_OK;
        switch (op->phase) {
        case 0:
            rc = hc_net_rd_start(op, n, me);
            break;
        case 1: /* op(data of me-1, mine): the value lives in tmp from now on */
            hc_net_reduce2(op, op->tmp, op->tmp, op->rbuf, op->count, false);
            op->vrank = 1;
            op->phase = 2;
            break;
        case 2:
            rc = hc_net_rd_round(op, me);
            break;
        case 3:
        case 5:
            return HC_STEP_DONE;
        case 4:
            rc = hc_net_recv(op, op->rbuf, op->bytes, me + 1);
            if (rc == HCOMM_OK) op->phase = 5;
            break;
        }
        if (rc != HCOMM_OK) return hc_step_fail(rc);
    }
}

/* ---- allgather: recursive doubling ------------------------------------------------ */

/* Power-of-two n: in round k, rank r holds the 2^k blocks of its aligned
 * group and swaps them with partner r ^ 2^k. */
hc_step_t hc_net_allgather_rd(hc_coll_op_t *op)
{
    int n = op->comm->size, me = op->comm->rank;
    uint8_t *rbuf = op->rbuf;
    size_t B = op->bytes;
    if (op->phase == 0) {
        if (op->sbuf != rbuf + (size_t)me * B) memcpy(rbuf + (size_t)me * B, op->sbuf, B);
        op->phase = 1;
    }
    for (;;) {
        hc_step_t t = hc_net_test(op);
        if (!hc_step_ok(t)) return t;
        hcomm_status_t rc = HCOMM_OK;
        int mask = 1 << op->round;
        if (mask >= n) return HC_STEP_DONE;
        int peer = me ^ mask;
        size_t mine = (size_t)(me & ~(mask - 1)) * B, theirs = (size_t)(peer & ~(mask - 1)) * B;
        rc = hc_net_recv(op, rbuf + theirs, (size_t)mask * B, peer);
        if (rc == HCOMM_OK) rc = hc_net_send(op, rbuf + mine, (size_t)mask * B, peer);
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        op->round++;
    }
}
