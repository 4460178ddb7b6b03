/*
 * Node broadcast and the block-per-peer collectives (coll/node.h):
 * allgather, gather, reduce_scatter, alltoall, scatter, barrier.
 */
#include "coll/node.h"

/* ---- broadcast ------------------------------------------------------------------ */

hc_step_t hc_node_broadcast(hc_coll_op_t *op)
{
    hc_coll_node_t *nd = hc_node_of(op);
    bool root = op->comm->rank == op->root;
    for (;;) {
        uint64_t t = op->tick + (uint64_t)op->phase;
        if (t == op->tick_end)
            return HC_STEP_DONE;
        size_t off = (size_t)op->phase * nd->block;
        size_t bb = op->bytes ? HC_MIN(nd->block, op->bytes - off) : 0;
        if (root) {
            if (!hc_node_stage_publish(nd, op, t, (uint8_t *)op->rbuf + off, bb))
                return HC_STEP_PENDING;
            hc_node_post_b(nd, t);
            if (hc_node_counting())
                hc_node_count_bcast(op, nd, bb);
        } else {
            if (t == op->tick && op->state == 0) {
                /* A receiver publishes its signature too (no data: nobody
                 * reads its block), first, so that a rank that takes it for
                 * the root sees the disagreement (two ranks that each take
                 * the other for the root would otherwise wait for ever),
                 * and every later collective compares the chain
                 * (hc_coll_number). Its sig slot is free once every rank
                 * is past tick t-2, as the root's is. */
                if (!hc_node_can_write(nd, op, t))
                    return HC_STEP_PENDING;
                hc_node_post_a(nd, op, t);
                op->state = 1;
            }
            if (__atomic_load_n(&nd->line[op->root].a, __ATOMIC_ACQUIRE) < t) {
                op->round = op->root; /* whom we wait for, should it time out */
                hc_node_gave_up(nd, op, op->root);
                return HC_STEP_PENDING;
            }
            op->round = 0;
            if (t == op->tick && !hc_node_sig_check(nd, op, op->root, t))
                return HC_STEP_PENDING; /* op->error says why */
            memcpy((uint8_t *)op->rbuf + off, hc_node_stage(nd, op->root, t), bb);
            hc_node_post_b(nd, t);
            if (hc_node_counting())
                hc_node_count_bcast(op, nd, bb);
        }
        op->phase++;
    }
}

/* ---- allgather, gather, reduce_scatter, alltoall, scatter, barrier -------------- */

/* Tick t's piece of this rank's input into its stage: one piece of its
 * block (allgather, gather), or of each per-peer block (reduce_scatter,
 * alltoall, a scatter's root). A scatter's other ranks have no input. */
static void hc_node_blocks_in(hc_coll_op_t *op, hc_coll_node_t *nd, uint8_t *st, size_t c,
                              size_t off, size_t bb)
{
    const uint8_t *in = op->sbuf;
    switch (op->kind) {
    case HC_COLL_ALLGATHER:
    case HC_COLL_GATHER:
        memcpy(st, in + off, bb);
        break;
    case HC_COLL_SCATTER:
        if (op->comm->rank != op->root)
            break;
        /* fallthrough */
    case HC_COLL_REDUCE_SCATTER:
    case HC_COLL_ALLTOALL:
        for (int j = 0; j < nd->n; j++)
            memcpy(st + (size_t)j * c, in + (size_t)j * op->bytes + off, bb);
        break;
    default:
        break;
    }
}


hc_step_t hc_node_blocks(hc_coll_op_t *op)
{
    hc_coll_node_t *nd = hc_node_of(op);
    const void *srcs[64];
    size_t c = op->chunk; /* bytes of each per-peer block per tick */
    for (;;) {
        uint64_t t = op->tick + (uint64_t)op->phase;
        if (t == op->tick_end)
            return HC_STEP_DONE;
        size_t off = (size_t)op->phase * c;
        size_t bb = op->bytes ? HC_MIN(c, op->bytes - off) : 0; /* op->bytes: per-peer block */
        if (op->state == 0) {
            if (!hc_node_can_write(nd, op, t))
                return HC_STEP_PENDING;
            hc_node_blocks_in(op, nd, hc_node_stage(nd, nd->me, t), c, off, bb);
            hc_node_post_a(nd, op, t);
            op->state = 1;
        }
        if (!hc_node_wait_a(nd, op, t))
            return HC_STEP_PENDING;
        switch (op->kind) {
        case HC_COLL_GATHER:
            if (op->comm->rank != op->root)
                break;
            /* fallthrough */
        case HC_COLL_ALLGATHER:
            for (int j = 0; j < nd->n; j++)
                memcpy((uint8_t *)op->rbuf + (size_t)j * op->bytes + off, hc_node_stage(nd, j, t),
                       bb);
            break;
        case HC_COLL_ALLTOALL:
            for (int j = 0; j < nd->n; j++)
                memcpy((uint8_t *)op->rbuf + (size_t)j * op->bytes + off,
                       hc_node_stage(nd, j, t) + (size_t)nd->me * c, bb);
            break;
        case HC_COLL_SCATTER:
            memcpy((uint8_t *)op->rbuf + off, hc_node_stage(nd, op->root, t) + (size_t)nd->me * c,
                   bb);
            break;
        case HC_COLL_REDUCE_SCATTER:
            for (int j = 0; j < nd->n; j++)
                srcs[j] = hc_node_stage(nd, j, t) + (size_t)nd->me * c;
            hc_reduce((uint8_t *)op->rbuf + off, srcs, nd->n, bb / op->esize, op->dtype, op->op,
                      nd->n);
            break;
        default:
            break;
        }
        hc_node_post_b(nd, t);
        if (hc_node_counting())
            hc_node_count_each(op, nd, 1, bb); /* barrier: bb 0, nothing */
        op->state = 0;
        op->phase++;
    }
}
