/*
 * Rooted and vector collectives over point-to-point messages: gather and
 * scatter (linear: the root posts a batch of receives or sends at a time),
 * allgatherv (a ring in the topology's order, blocks of any size),
 * reduce_scatterv (direct: every rank sends each block to its owner, which
 * reduces the contributions in rank order) and alltoallv (pairwise
 * exchange). Counts of zero are messages of zero bytes: every rank posts
 * the same messages whatever the counts, so matching never depends on them.
 * Counts that disagree between ranks fail on the p2p exact-size check.
 */
#include "coll/net.h"

/* ---- gather / scatter: linear ------------------------------------------------------------- */

/* The root receives (gather) or sends (scatter) every other rank's block,
 * a batch of HC_COLL_MAX_REQS at a time; the others send or receive theirs.
 * The root's own block is copied unless it is already in place. */
static hc_step_t hc_net_rooted_linear(hc_coll_op_t *op, bool gather)
{
    int n = op->comm->size, me = op->comm->rank, root = op->root;
    size_t B = op->bytes; /* per rank */
    uint8_t *blocks = gather ? (uint8_t *)op->rbuf : (uint8_t *)op->sbuf; /* the root's n blocks */
    uint8_t *mine = gather ? (uint8_t *)op->sbuf : (uint8_t *)op->rbuf;  /* this rank's one */
    if (op->phase == 0) {
        op->phase = 1;
        if (me != root) {
            HC_STEP_TRY(gather ? hc_net_send(op, mine, B, root) : hc_net_recv(op, mine, B, root));
            return hc_net_test(op);
        }
        if (mine != blocks + (size_t)root * B) /* else in place */
            memmove(gather ? blocks + (size_t)root * B : mine,
                    gather ? mine : blocks + (size_t)root * B, B);
        op->round = 0;
    }
    if (me != root)
        return hc_net_test(op);
    for (;;) {
        hc_step_t t = hc_net_test(op);
        if (!hc_step_ok(t))
            return t;
        if (op->round >= n)
            return HC_STEP_DONE;
        for (int k = 0; k < HC_COLL_MAX_REQS && op->round < n; op->round++) {
            if (op->round == me)
                continue;
            uint8_t *blk = blocks + (size_t)op->round * B;
            HC_STEP_TRY(gather ? hc_net_recv(op, blk, B, op->round)
                               : hc_net_send(op, blk, B, op->round));
            k++;
        }
    }
}

hc_step_t hc_net_gather(hc_coll_op_t *op)
{
    return hc_net_rooted_linear(op, true);
}

hc_step_t hc_net_scatter(hc_coll_op_t *op)
{
    return hc_net_rooted_linear(op, false);
}

/* ---- allgatherv: ring ------------------------------------------------------------------- */

/* Step s (1 .. n-1) sends on the block received at step s-1 (at step 1 its
 * own) to the next rank of the ring and receives the previous rank's. */
hc_step_t hc_net_allgatherv_ring(hc_coll_op_t *op)
{
    int n = op->comm->size, me = op->comm->rank;
    size_t es = op->esize;
    uint8_t *rbuf = op->rbuf;
    const size_t *cnt = op->vec.rcounts, *dsp = op->vec.rdispls;
    int pos;
    const int *ring = hc_coll_ring_order(op->comm, &pos);
    if (!ring)
        return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_allgatherv: no memory"));
    if (op->phase == 0) {
        op->phase = 1;
        uint8_t *mine = rbuf + dsp[me] * es;
        if ((const uint8_t *)op->sbuf != mine) /* else in place */
            memmove(mine, op->sbuf, cnt[me] * es);
        op->round = 1;
        op->nrounds = n;
    }
    for (;;) {
        hc_step_t t = hc_net_test(op);
        if (!hc_step_ok(t))
            return t;
        if (op->round >= n)
            return HC_STEP_DONE;
        int s = op->round++;
        int right = ring[hc_net_mod(pos + 1, n)], left = ring[hc_net_mod(pos - 1, n)];
        int out = ring[hc_net_mod(pos - s + 1, n)], in = ring[hc_net_mod(pos - s, n)];
        HC_STEP_TRY(hc_net_recv(op, rbuf + dsp[in] * es, cnt[in] * es, left));
        HC_STEP_TRY(hc_net_send(op, rbuf + dsp[out] * es, cnt[out] * es, right));
    }
}

/* ---- pairwise exchange (reduce_scatterv, alltoallv) ------------------------------------------- */

/* Where this rank's block for peer lies (send) or peer's block lands (recv),
 * and its bytes. */
typedef uint8_t *(*hc_net_block_fn)(hc_coll_op_t *op, int peer, bool send, size_t *len_p);

/* Round i sends to me+i and receives from me-i, up to HC_NET_BATCH rounds in
 * flight; done when every round's messages are. op->round starts at 1. */
static hc_step_t hc_net_pairwise(hc_coll_op_t *op, hc_net_block_fn block)
{
    int n = op->comm->size, me = op->comm->rank;
    for (;;) {
        hc_step_t t = hc_net_test(op);
        if (!hc_step_ok(t))
            return t;
        if (op->round >= n)
            return HC_STEP_DONE;
        for (int k = 0; k < HC_NET_BATCH && op->round < n; k++, op->round++) {
            int to = hc_net_mod(me + op->round, n), from = hc_net_mod(me - op->round, n);
            size_t rl, sl;
            uint8_t *rb = block(op, from, false, &rl), *sb = block(op, to, true, &sl);
            HC_STEP_TRY(hc_net_recv(op, rb, rl, from));
            HC_STEP_TRY(hc_net_send(op, sb, sl, to));
        }
    }
}

/* ---- reduce_scatterv: direct ----------------------------------------------------------------- */

/* Scratch: n slots of this rank's block (its own contribution and every
 * other rank's), then n source pointers. */
static size_t hc_net_rsv_slot(const hc_coll_op_t *op)
{
    return HC_ALIGN_UP(op->vec.rcounts[op->comm->rank] * op->esize, (size_t)64);
}

size_t hc_net_reduce_scatterv_state(const hc_coll_op_t *op)
{
    return (size_t)op->comm->size * (hc_net_rsv_slot(op) + sizeof(void *));
}

/* Sends: block `peer` of sendbuf (offsets in vec.sdispls); receives: peer's
 * contribution to this rank's block, into its scratch slot. */
static uint8_t *hc_net_rsv_block(hc_coll_op_t *op, int peer, bool send, size_t *len_p)
{
    const size_t *cnt = op->vec.rcounts;
    if (send) {
        *len_p = cnt[peer] * op->esize;
        return (uint8_t *)op->sbuf + op->vec.sdispls[peer] * op->esize;
    }
    *len_p = cnt[op->comm->rank] * op->esize;
    return (uint8_t *)op->tmp + (size_t)peer * hc_net_rsv_slot(op);
}

hc_step_t hc_net_reduce_scatterv(hc_coll_op_t *op)
{
    int n = op->comm->size, me = op->comm->rank;
    size_t mine, slot = hc_net_rsv_slot(op);
    if (op->phase == 0) {
        HC_STEP_TRY(hc_net_alloc(op));
        uint8_t *own = hc_net_rsv_block(op, me, true, &mine);
        memcpy((uint8_t *)op->tmp + (size_t)me * slot, own, mine);
        op->round = 1;
        op->phase = 1;
    }
    hc_step_t t = hc_net_pairwise(op, hc_net_rsv_block);
    if (!hc_step_ok(t))
        return t;
    /* every contribution is here: reduce them in rank order */
    const void **srcs = (const void **)((uint8_t *)op->tmp + (size_t)n * slot);
    for (int r = 0; r < n; r++)
        srcs[r] = (uint8_t *)op->tmp + (size_t)r * slot;
    size_t cnt = op->vec.rcounts[me];
    if (cnt)
        hc_reduce(op->rbuf, srcs, n, cnt, op->dtype, op->op, op->op == HCOMM_AVG ? n : 0);
    return HC_STEP_DONE;
}

/* ---- alltoallv: pairwise exchange ------------------------------------------------------------ */

static uint8_t *hc_net_a2av_block(hc_coll_op_t *op, int peer, bool send, size_t *len_p)
{
    const hc_coll_vec_t *v = &op->vec;
    *len_p = (send ? v->scounts[peer] : v->rcounts[peer]) * op->esize;
    return send ? (uint8_t *)op->sbuf + v->sdispls[peer] * op->esize
                : (uint8_t *)op->rbuf + v->rdispls[peer] * op->esize;
}

hc_step_t hc_net_alltoallv(hc_coll_op_t *op)
{
    int me = op->comm->rank;
    if (op->phase == 0) {
        size_t sl, rl;
        uint8_t *s = hc_net_a2av_block(op, me, true, &sl), *r = hc_net_a2av_block(op, me, false, &rl);
        memmove(r, s, sl < rl ? sl : rl);
        op->round = 1;
        op->phase = 1;
    }
    return hc_net_pairwise(op, hc_net_a2av_block);
}
