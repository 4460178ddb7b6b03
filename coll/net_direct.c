/*
 * Pairwise alltoall and the dissemination barrier.
 */
#include "coll/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- alltoall: pairwise exchange ------------------------------------------------------ */

/* Out of place: round i sends block r+i to rank r+i and receives block r-i
 * from rank r-i; each pair meets once, so up to HC_NET_BATCH rounds are
 * posted together. In place: round i pairs r with i-r (a symmetric pairing)
 * and the block sent to the partner is copied to tmp first, since its
 * answer lands in the same block; one round at a time. */
size_t hc_net_alltoall_state(const hc_coll_op_t *op)
{
    return op->sbuf == op->rbuf ? op->bytes : 0; /* in place: the block being exchanged */
}

hc_step_t hc_net_alltoall(hc_coll_op_t *op)
{
    int n = op->comm->size, me = op->comm->rank;
    size_t B = op->bytes;
    uint8_t *rbuf = op->rbuf;
    const uint8_t *sbuf = op->sbuf;
    bool inplace = op->sbuf == op->rbuf;
    if (op->phase == 0) {
        if (inplace) {
            int rc = hc_net_alloc(op);
            if (rc != HCOMM_OK) return hc_step_fail(rc);
            op->round = 0;
        } else {
            memcpy(rbuf + (size_t)me * B, sbuf + (size_t)me * B, B);
            op->round = 1;
        }
        op->phase = 1;
    }
    for (;;) {
        hc_step_t t = hc_net_test(op);
        if (!hc_step_ok(t)) return t;
        hcomm_status_t rc = HCOMM_OK;
        if (op->round >= n) return HC_STEP_DONE;
        if (inplace) {
            int peer = hc_net_mod(op->round++ - me, n);
            if (peer == me) continue;
            memcpy(op->tmp, rbuf + (size_t)peer * B, B);
            rc = hc_net_recv(op, rbuf + (size_t)peer * B, B, peer);
            if (rc == HCOMM_OK) rc = hc_net_send(op, op->tmp, B, peer);
            if (rc != HCOMM_OK) return hc_step_fail(rc);
            continue;
        }
        for (int k = 0; k < HC_NET_BATCH && op->round < n; k++, op->round++) {
            int to = hc_net_mod(me + op->round, n), from = hc_net_mod(me - op->round, n);
            rc = hc_net_recv(op, rbuf + (size_t)from * B, B, from);
            if (rc == HCOMM_OK) rc = hc_net_send(op, sbuf + (size_t)to * B, B, to);
            if (rc != HCOMM_OK) return hc_step_fail(rc);
        }
    }
}

/* ---- barrier: dissemination ---------------------------------------------------------- */

hc_step_t hc_net_barrier(hc_coll_op_t *op)
{
    int n = op->comm->size, me = op->comm->rank;
    for (;;) {
        hc_step_t t = hc_net_test(op);
        if (!hc_step_ok(t)) return t;
        hcomm_status_t rc = HCOMM_OK;
        int d = 1 << op->round;
        if (d >= n) return HC_STEP_DONE;
        rc = hc_net_recv(op, NULL, 0, hc_net_mod(me - d, n));
        if (rc == HCOMM_OK) rc = hc_net_send(op, NULL, 0, hc_net_mod(me + d, n));
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        op->round++;
    }
}
