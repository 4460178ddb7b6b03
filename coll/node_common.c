/*
 * The node family's flag protocol (coll/node.h): signatures compared at a
 * collective's first tick, waits on every rank's a and b flags (resumable,
 * failing at once when the rank waited for gave up), ticks, staging.
 */
#include "coll/node.h"

/* Rank j's signature of tick t (op's first) against mine; on a mismatch
 * op->error is set and false returned. */
bool hc_node_sig_mismatch(hc_coll_op_t *op, int j, uint32_t theirs,
                                             bool moved_on)
{
    hc_coll_kind_t tk = (hc_coll_kind_t)(theirs & HC_COLL_SIG_KIND_MASK); /* hc_coll_sig */
    if (moved_on)
        /* its slot already holds a later collective's signature: it went
         * through this one without this rank (it called it with another
         * root, or with arguments that did not need this rank) */
        op->error = hc_error(HCOMM_ERR_INVALID,
                             "%s (%zu elements of %s, op %s, root %d) #%llu: communicator rank %d "
                             "went past this collective without this rank (it is in a later "
                             "one): it called this one with other arguments (root, count, dtype "
                             "or op, or an earlier collective on this communicator differed)",
                             hc_coll_name(op->kind), op->count, hc_dtype_name(op->dtype),
                             hc_op_name(op->op), op->root, (unsigned long long)op->seq, j);
    else if (tk != op->kind && tk < HC_COLL_KIND_COUNT)
        op->error = hc_error(HCOMM_ERR_INVALID,
                             "%s (%zu elements of %s, op %s, root %d) #%llu: communicator rank %d "
                             "called %s at this point of the collective order (a rank skipped or "
                             "added a collective, or called another one)",
                             hc_coll_name(op->kind), op->count, hc_dtype_name(op->dtype),
                             hc_op_name(op->op), op->root, (unsigned long long)op->seq, j,
                             hc_coll_name(tk));
    else
        op->error = hc_error(HCOMM_ERR_INVALID,
                             "%s (%zu elements of %s, op %s, root %d) #%llu: communicator rank %d "
                             "called %s here with other arguments: its count, dtype, op or root "
                             "differ from this call's, or from an earlier collective's on this "
                             "communicator (signature %08x, mine %08x: ranks compare a hash of "
                             "the four, chained, not which one); HCOMM_CHECK=1 names the field and "
                             "both values",
                             hc_coll_name(op->kind), op->count, hc_dtype_name(op->dtype),
                             hc_op_name(op->op), op->root, (unsigned long long)op->seq, j,
                             hc_coll_name(op->kind), theirs, op->sig);
    return false;
}

/* Every a[j] >= t? Resumable: op->round is the next rank to check. At the
 * op's first tick the signatures are compared too. */
bool hc_node_wait_a(hc_coll_node_t *nd, hc_coll_op_t *op, uint64_t t)
{
    if (nd->a_seen_all >= t)
        return true;
    for (; op->round < nd->n; op->round++)
        if (__atomic_load_n(&nd->line[op->round].a, __ATOMIC_ACQUIRE) < t)
            return hc_node_gave_up(nd, op, op->round);
    op->round = 0;
    if (t == op->tick)
        for (int j = 0; j < nd->n; j++)
            if (!hc_node_sig_check(nd, op, j, t))
                return false;
    nd->a_seen_all = t;
    /* Publishing a(t) came after finishing t-1: b[j] >= t-1 follows. */
    if (nd->b_seen_all < t - 1)
        nd->b_seen_all = t - 1;
    return true;
}

bool hc_node_wait_b(hc_coll_node_t *nd, hc_coll_op_t *op, uint64_t t)
{
    if (nd->b_seen_all >= t)
        return true;
    for (; op->round < nd->n; op->round++)
        if (__atomic_load_n(&nd->done[op->round].b, __ATOMIC_ACQUIRE) < t)
            return hc_node_gave_up(nd, op, op->round);
    op->round = 0;
    nd->b_seen_all = t;
    return true;
}

/* Ticks are numbered from the op's first one: op->tick = first, tick_end =
 * one past the last. A tick's block covers bytes [k*B, k*B + B) of the
 * per-rank data, k = t - op->tick. */
void hc_node_begin(hc_coll_op_t *op, size_t per_rank_bytes)
{
    hc_coll_node_t *nd = hc_node_of(op);
    size_t nb = per_rank_bytes ? (per_rank_bytes + nd->block - 1) / nd->block : 1;
    op->tick = nd->tick + 1;
    op->tick_end = op->tick + nb;
    nd->tick += nb;
    op->state = 0;
    op->round = 0;
}

/* Stage bb bytes of src into my block of tick t and publish it; false while
 * the block may still be read by a slower rank (tick t-2). */
bool hc_node_stage_publish(hc_coll_node_t *nd, hc_coll_op_t *op, uint64_t t,
                                  const void *src, size_t bb)
{
    if (!hc_node_can_write(nd, op, t))
        return false;
    memcpy(hc_node_stage(nd, nd->me, t), src, bb);
    hc_node_post_a(nd, op, t);
    return true;
}
