/*
 * Node allreduce and reduce (coll/node.h): inline in the flag line, direct
 * (every rank reduces whole blocks) and staged (each rank its slice).
 */
#include "coll/node.h"

/* ---- allreduce / reduce ------------------------------------------------------ */

hc_step_t hc_node_allreduce_inline(hc_coll_op_t *op)
{
    hc_coll_node_t *nd = hc_node_of(op);
    uint64_t t = op->tick;
    int par = (int)(t & 1);
    if (op->state == 0) {
        if (!hc_node_can_write(nd, op, t))
            return HC_STEP_PENDING;
        memcpy(nd->line[nd->me].inline_data[par], op->sbuf, op->bytes);
        hc_node_post_a(nd, op, t);
        op->state = 1;
    }
    if (!hc_node_wait_a(nd, op, t))
        return HC_STEP_PENDING;
    const void *srcs[64];
    for (int j = 0; j < nd->n; j++)
        srcs[j] = nd->line[j].inline_data[par];
    if (op->kind == HC_COLL_ALLREDUCE || op->comm->rank == op->root)
        hc_reduce(op->rbuf, srcs, nd->n, op->count, op->dtype, op->op, nd->n);
    hc_node_post_b(nd, t);
    if (hc_node_counting())
        hc_node_count_direct(op, nd, op->bytes);
    return HC_STEP_DONE;
}

/* Reduce-scatter + allgather through shared memory, block by block: each
 * rank stages the slices the others reduce (its own slice it reads straight
 * from its input: nobody else does), reduces its slice of every rank's
 * block into the shared result, and copies the whole result block out. */
hc_step_t hc_node_allreduce_staged(hc_coll_op_t *op)
{
    hc_coll_node_t *nd = hc_node_of(op);
    bool want_result = op->kind == HC_COLL_ALLREDUCE || op->comm->rank == op->root;
    const void *srcs[64];
    for (;;) {
        uint64_t t = op->tick + (uint64_t)op->phase;
        if (t == op->tick_end)
            return HC_STEP_DONE;
        size_t off = (size_t)op->phase * nd->block;
        size_t bb = HC_MIN(nd->block, op->bytes - off);
        size_t ec = bb / op->esize, lo, hi;
        hc_node_slice(ec, nd->n, nd->me, &lo, &hi);
        const uint8_t *in = (const uint8_t *)op->sbuf + off;
        switch (op->state) {
        case 0: {
            if (!hc_node_can_write(nd, op, t))
                return HC_STEP_PENDING;
            uint8_t *st = hc_node_stage(nd, nd->me, t);
            memcpy(st, in, lo * op->esize);
            memcpy(st + hi * op->esize, in + hi * op->esize, bb - hi * op->esize);
            hc_node_post_a(nd, op, t);
            op->state = 1;
        }
            /* fallthrough */
        case 1:
            if (!hc_node_wait_a(nd, op, t))
                return HC_STEP_PENDING;
            if (hi > lo) {
                for (int j = 0; j < nd->n; j++)
                    srcs[j] = (j == nd->me ? in : hc_node_stage(nd, j, t)) + lo * op->esize;
                hc_reduce(hc_node_res(nd, t) + lo * op->esize, srcs, nd->n, hi - lo, op->dtype,
                          op->op, nd->n);
            }
            hc_node_post_b(nd, t);
            if (hc_node_counting())
                hc_node_count_staged(op, nd, ec);
            op->state = 2;
            /* fallthrough */
        case 2:
            if (want_result) {
                if (!hc_node_wait_b(nd, op, t))
                    return HC_STEP_PENDING;
                if (op->bytes >= HC_COPY_NT_THRESHOLD)
                    hc_copy_nt((uint8_t *)op->rbuf + off, hc_node_res(nd, t), bb);
                else
                    memcpy((uint8_t *)op->rbuf + off, hc_node_res(nd, t), bb);
                if (hc_node_counting())
                    hc_node_count_staged_out(op, nd, ec);
            }
            op->state = 0;
            op->phase++;
        }
    }
}

/* Every rank reduces the whole block out of every rank's staging block (its
 * own included, so in-place calls never alias) straight into its output: one
 * barrier per block instead of two, and less memory traffic than slicing
 * while the rank count is small. Reduce uses it with only the root reading.
 * All ranks reduce in rank order, so results are bit-identical. */
hc_step_t hc_node_allreduce_direct(hc_coll_op_t *op)
{
    hc_coll_node_t *nd = hc_node_of(op);
    bool want_result = op->kind == HC_COLL_ALLREDUCE || op->comm->rank == op->root;
    const void *srcs[64];
    for (;;) {
        uint64_t t = op->tick + (uint64_t)op->phase;
        if (t == op->tick_end)
            return HC_STEP_DONE;
        size_t off = (size_t)op->phase * nd->block;
        size_t bb = HC_MIN(nd->block, op->bytes - off);
        if (op->state == 0) {
            if (!hc_node_stage_publish(nd, op, t, (const uint8_t *)op->sbuf + off, bb))
                return HC_STEP_PENDING;
            op->state = 1;
        }
        if (want_result) {
            if (!hc_node_wait_a(nd, op, t))
                return HC_STEP_PENDING;
            for (int j = 0; j < nd->n; j++)
                srcs[j] = hc_node_stage(nd, j, t);
            if (op->bytes >= HC_COPY_NT_THRESHOLD && nd->scratch) {
                hc_reduce(nd->scratch, srcs, nd->n, bb / op->esize, op->dtype, op->op, nd->n);
                hc_copy_nt((uint8_t *)op->rbuf + off, nd->scratch, bb);
            } else {
                hc_reduce((uint8_t *)op->rbuf + off, srcs, nd->n, bb / op->esize, op->dtype,
                          op->op, nd->n);
            }
        }
        hc_node_post_b(nd, t);
        if (hc_node_counting())
            hc_node_count_direct(op, nd, bb);
        op->state = 0;
        op->phase++;
    }
}
