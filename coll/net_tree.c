/*
 * Binomial trees: broadcast and reduce (the small-message choice).
 */
#include "coll/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- broadcast ------------------------------------------------------------------------ */

/* Binomial tree over ranks relative to the root: receive from the parent
 * (phase 0 -> 1), then send to every child at once (phase 2). */
hc_step_t hc_net_broadcast_tree(hc_coll_op_t *op)
{
    int n = op->comm->size, vr = hc_net_mod(op->comm->rank - op->root, n);
    for (;;) {
        hc_step_t t = hc_net_test(op);
        if (!hc_step_ok(t)) return t;
        hcomm_status_t rc = HCOMM_OK;
        int mask = 1;
        while (mask < n && !(vr & mask))
            mask <<= 1;
        switch (op->phase) {
        case 0:
            op->phase = 1;
            if (vr != 0) {
                rc = hc_net_recv(op, op->rbuf, op->bytes, hc_net_mod(vr - mask + op->root, n));
                if (rc != HCOMM_OK) return hc_step_fail(rc);
            }
            break;
        case 1:
            op->phase = 2;
            for (mask >>= 1; mask > 0; mask >>= 1) {
                if (vr + mask >= n) continue;
                rc = hc_net_send(op, op->rbuf, op->bytes, hc_net_mod(vr + mask + op->root, n));
                if (rc != HCOMM_OK) return hc_step_fail(rc);
            }
            break;
        default:
            return HC_STEP_DONE;
        }
    }
}

/* ---- reduce: binomial tree ---------------------------------------------------------- */

/* Ranks relative to the root; in round k a rank with bit k set sends its
 * value to vr - 2^k and is done, the others receive from vr + 2^k. The value
 * starts as sbuf and lives in rbuf (root) or tmp after the first reduction
 * (op->vrank = 1). tmp: [value (non-root) | receive area]. */
size_t hc_net_tree_reduce_state(const hc_coll_op_t *op)
{
    bool root = op->comm->rank == op->root;
    return op->bytes * (root ? 1 : 2); /* [value (non-root) | receive area] */
}

hc_step_t hc_net_reduce_tree(hc_coll_op_t *op)
{
    int n = op->comm->size, vr = hc_net_mod(op->comm->rank - op->root, n);
    bool root = vr == 0;
    if (!op->tmp) {
        int rc = hc_net_alloc(op);
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        op->vrank = 0; /* fields past reqs[] are not cleared by the engine */
    }
    uint8_t *acc = root ? op->rbuf : (uint8_t *)op->tmp + op->bytes;
    uint8_t *in = op->tmp;
    for (;;) {
        hc_step_t t = hc_net_test(op);
        if (!hc_step_ok(t)) return t;
        hcomm_status_t rc = HCOMM_OK;
        const void *val = op->vrank ? acc : op->sbuf;
        int mask = 1 << op->round;
        if (op->state == 1) { /* a child's value arrived in `in` */
            hc_net_reduce2(op, acc, val, in, op->count, root && mask * 2 >= n);
            op->vrank = 1;
            op->state = 0;
            op->round++;
            continue;
        }
        if (op->state == 2 || mask >= n) return HC_STEP_DONE;
        if (vr & mask) {
            op->state = 2;
            rc = hc_net_send(op, val, op->bytes, hc_net_mod(vr - mask + op->root, n));
        } else if (vr + mask < n) {
            op->state = 1;
            rc = hc_net_recv(op, in, op->bytes, hc_net_mod(vr + mask + op->root, n));
        } else {
            op->round++;
            continue;
        }
        if (rc != HCOMM_OK) return hc_step_fail(rc);
    }
}
