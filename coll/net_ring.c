/*
 * The pipelined ring: allreduce (reduce-scatter + allgather), reduce_scatter,
 * allgather, reduce (reduce-scatter + gather to the root), and the broadcast
 * chain (root -> root+1 -> ... in chunks), which forcing "ring" selects.
 */
#include "coll/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- pipelined ring ------------------------------------------------------------------ */

/* Slices: the data is cut in n slices (allreduce, reduce: element ranges with
 * vector-friendly inner boundaries; allgather, reduce_scatter: the rank
 * blocks). Positions are ring positions (the topology's order, see
 * hc_coll_ring_order): slice j is the one position j ends up with, for rank
 * blocks the block of the rank at position j. Reduce-scatter step k (0 <= k < rs_steps = n-1) sends slice
 * me-k-1 and receives slice me-k-2 from the left into a slot, then reduces
 * it with this rank's own data; after n-1 steps slice `me` is complete here.
 * Allgather step t sends slice me-t and receives slice me-t-1 from the left,
 * straight into `out`. A unit is (step, chunk), numbered step-major. */
typedef struct {
    int n, me, left, right; /* me: this rank's ring position; left, right: comm ranks */
    const int *order;       /* ring position -> comm rank (hc_coll_ring_order) */
    int rs_steps, nchunks;
    hc_net_pipe_t pipe; /* units: (step, chunk), lag: a step's chunks */
    bool blocks; /* slices are whole rank blocks of ec elements */
    size_t ec;   /* elements: per block, or in all */
    size_t esize;
    const uint8_t *mine; /* this rank's contribution, in slice layout */
    uint8_t *part;       /* partial results, in slice layout */
    uint8_t *fin;        /* where the complete slice `me` goes */
    uint8_t *out;        /* allgather destination, in slice layout */
    uint8_t *slots;
    size_t slot_bytes;
} hc_net_ring_t;

static void hc_net_slice(const hc_net_ring_t *rg, int j, size_t *lo, size_t *len)
{
    if (rg->blocks) {
        *lo = (size_t)rg->order[j] * rg->ec;
        *len = rg->ec;
        return;
    }
    size_t a = j == 0 ? 0 : HC_MIN(rg->ec, HC_ALIGN_UP(hc_net_split(rg->ec, rg->n, j), 16));
    size_t b = j == rg->n - 1 ? rg->ec
                              : HC_MIN(rg->ec, HC_ALIGN_UP(hc_net_split(rg->ec, rg->n, j + 1), 16));
    *lo = a;
    *len = b - a;
}

/* Chunk c of slice j: byte offset of the slice, offset inside it, elements. */
static void hc_net_chunk(const hc_net_ring_t *rg, int j, int c, size_t *soff, size_t *coff,
                         size_t *cnt)
{
    size_t lo, len;
    hc_net_slice(rg, j, &lo, &len);
    size_t a = hc_net_split(len, rg->nchunks, c), b = hc_net_split(len, rg->nchunks, c + 1);
    *soff = lo * rg->esize;
    *coff = a * rg->esize;
    *cnt = b - a;
}

/* Sets the geometry and allocates the header, the slots and extra bytes of
 * scratch (returned in *extra_p). */
/* The geometry of a ring run and the bytes of its state: the header, the
 * receive slots and `extra` bytes of scratch. */
static size_t hc_net_ring_geom(const hc_coll_op_t *op, bool blocks, int rs_steps, int ag_steps,
                               size_t extra, hc_net_ring_t *g, size_t *hdr_p, size_t *slots_p)
{
    int n = op->comm->size, pos = op->comm->rank;
    const int *order = hc_coll_ring_order(op->comm, &pos);
    *g = (hc_net_ring_t){.n = n,
                         .me = pos,
                         .order = order,
                         .blocks = blocks,
                         .ec = op->count,
                         .esize = op->esize,
                         .rs_steps = rs_steps,
                         .nchunks = 1};
    g->left = order ? order[hc_net_mod(g->me - 1, n)] : -1;
    g->right = order ? order[hc_net_mod(g->me + 1, n)] : -1;
    size_t maxlen = 0, lo, len;
    for (int j = 0; j < n && order; j++) {
        hc_net_slice(g, j, &lo, &len);
        maxlen = HC_MAX(maxlen, len);
    }
    size_t per_chunk = HC_MAX((size_t)1, HC_NET_CHUNK_BYTES / op->esize);
    g->nchunks = (int)HC_MAX((size_t)1, (maxlen + per_chunk - 1) / per_chunk);
    g->pipe.nunits = g->nchunks * (rs_steps + ag_steps);
    g->pipe.window = HC_MIN(HC_NET_WINDOW, g->pipe.nunits);
    g->pipe.lag = g->nchunks; /* step k > 0 forwards what step k - 1 produced */
    g->slot_bytes = rs_steps ? HC_ALIGN_UP((maxlen + g->nchunks - 1) / g->nchunks * op->esize,
                                           (size_t)HC_CACHE_LINE)
                             : 0;
    *hdr_p = HC_ALIGN_UP(sizeof(*g), (size_t)HC_CACHE_LINE);
    *slots_p = g->slot_bytes * (size_t)g->pipe.window;
    return *hdr_p + *slots_p + extra;
}

/* The parameters of each ring variant: one place for the state size and
 * the run. */
static void hc_net_ring_params(const hc_coll_op_t *op, bool *blocks, int *rs, int *ag,
                               size_t *extra)
{
    int n = op->comm->size;
    bool root = op->comm->rank == op->root;
    switch (op->kind) {
    case HC_COLL_REDUCE_SCATTER:
        *blocks = true, *rs = n - 1, *ag = 0, *extra = op->bytes * (size_t)n;
        return;
    case HC_COLL_ALLGATHER:
        *blocks = true, *rs = 0, *ag = n - 1, *extra = 0;
        return;
    case HC_COLL_REDUCE:
        *blocks = false, *rs = n - 1, *ag = 0, *extra = root ? 0 : op->bytes;
        return;
    default: /* allreduce */
        *blocks = false, *rs = n - 1, *ag = n - 1, *extra = 0;
        return;
    }
}

static size_t hc_net_ring_state(const hc_coll_op_t *op)
{
    bool blocks;
    int rs, ag;
    size_t extra, hdr, slots;
    hc_net_ring_t g;
    hc_net_ring_params(op, &blocks, &rs, &ag, &extra);
    return hc_net_ring_geom(op, blocks, rs, ag, extra, &g, &hdr, &slots);
}

size_t hc_net_allreduce_ring_state(const hc_coll_op_t *op)
{
    return hc_net_ring_state(op);
}
size_t hc_net_reduce_scatter_ring_state(const hc_coll_op_t *op)
{
    return hc_net_ring_state(op);
}
size_t hc_net_allgather_ring_state(const hc_coll_op_t *op)
{
    return hc_net_ring_state(op);
}
size_t hc_net_reduce_ring_state(const hc_coll_op_t *op)
{
    return hc_net_ring_state(op);
}

/* Lays the geometry into the op's state (sized by hc_net_ring_state) and
 * returns the header and the extra scratch. */
static int hc_net_ring_init(hc_coll_op_t *op, hc_net_ring_t **rg_p, uint8_t **extra_p)
{
    bool blocks;
    int rs, ag;
    size_t extra, hdr, slots;
    hc_net_ring_t g;
    hc_net_ring_params(op, &blocks, &rs, &ag, &extra);
    (void)hc_net_ring_geom(op, blocks, rs, ag, extra, &g, &hdr, &slots);
    if (!g.order)
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s (ring): no memory for the ring order", hc_coll_name(op->kind));
    int rc = hc_net_alloc(op);
    if (rc != HCOMM_OK) return rc;
    hc_net_ring_t *rg = op->tmp;
    *rg = g;
    rg->slots = (uint8_t *)op->tmp + hdr;
    *extra_p = rg->slots + slots;
    *rg_p = rg;
    return HCOMM_OK;
}

static hcomm_status_t hc_net_ring_post_send(hc_coll_op_t *op, void *ctx, int u)
{
    hc_net_ring_t *rg = ctx;
    int k = u / rg->nchunks, c = u % rg->nchunks, j;
    const uint8_t *base;
    if (k < rg->rs_steps) {
        j = hc_net_mod(rg->me - k - 1, rg->n);
        base = k == 0 ? rg->mine : rg->part;
    } else {
        j = hc_net_mod(rg->me - (k - rg->rs_steps), rg->n);
        base = rg->out;
    }
    size_t soff, coff, cnt;
    hc_net_chunk(rg, j, c, &soff, &coff, &cnt);
    return hc_net_post(op, rg->pipe.ids, u * 2 + 1, true, base + soff + coff, cnt * rg->esize,
                       rg->right);
}

static hcomm_status_t hc_net_ring_post_recv(hc_coll_op_t *op, void *ctx, int u)
{
    hc_net_ring_t *rg = ctx;
    int k = u / rg->nchunks, c = u % rg->nchunks;
    size_t soff, coff, cnt;
    uint8_t *dst;
    if (k < rg->rs_steps) {
        hc_net_chunk(rg, hc_net_mod(rg->me - k - 2, rg->n), c, &soff, &coff, &cnt);
        dst = rg->slots + (size_t)(u % rg->pipe.window) * rg->slot_bytes;
    } else {
        hc_net_chunk(rg, hc_net_mod(rg->me - (k - rg->rs_steps) - 1, rg->n), c, &soff, &coff, &cnt);
        dst = rg->out + soff + coff;
    }
    return hc_net_post(op, rg->pipe.ids, u * 2, false, dst, cnt * rg->esize, rg->left);
}

static void hc_net_ring_process(hc_coll_op_t *op, void *ctx, int u)
{
    hc_net_ring_t *rg = ctx;
    int k = u / rg->nchunks, c = u % rg->nchunks;
    if (k >= rg->rs_steps) return; /* allgather data landed in place */
    size_t soff, coff, cnt;
    hc_net_chunk(rg, hc_net_mod(rg->me - k - 2, rg->n), c, &soff, &coff, &cnt);
    bool last = k == rg->rs_steps - 1;
    uint8_t *dst = last ? rg->fin + coff : rg->part + soff + coff;
    /* mine first: in place, dst is the caller's own data (hc_reduce allows dst == srcs[0]) */
    hc_net_reduce2(op, dst, rg->mine + soff + coff,
                   rg->slots + (size_t)(u % rg->pipe.window) * rg->slot_bytes, cnt, last);
}

static const hc_net_pipe_ops_t hc_net_ring_ops = {
    hc_net_ring_post_send, hc_net_ring_post_recv, hc_net_ring_process};

/* Advances the ring as far as completed requests allow. */
static hc_step_t hc_net_ring_run(hc_coll_op_t *op, hc_net_ring_t *rg)
{
    return hc_net_pipe_run(op, &rg->pipe, &hc_net_ring_ops, rg);
}

hc_step_t hc_net_allreduce_ring(hc_coll_op_t *op)
{
    hc_net_ring_t *rg = op->tmp;
    if (!rg) {
        uint8_t *extra;
        int rc = hc_net_ring_init(op, &rg, &extra);
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        size_t lo, len;
        hc_net_slice(rg, rg->me, &lo, &len);
        rg->mine = op->sbuf;
        rg->part = rg->out = op->rbuf;
        rg->fin = (uint8_t *)op->rbuf + lo * op->esize;
    }
    return hc_net_ring_run(op, rg);
}

hc_step_t hc_net_reduce_scatter_ring(hc_coll_op_t *op)
{
    hc_net_ring_t *rg = op->tmp;
    if (!rg) {
        uint8_t *extra;
        int rc = hc_net_ring_init(op, &rg, &extra);
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        rg->part = extra;
        rg->mine = op->sbuf;
        rg->fin = op->rbuf;
    }
    return hc_net_ring_run(op, rg);
}

hc_step_t hc_net_allgather_ring(hc_coll_op_t *op)
{
    hc_net_ring_t *rg = op->tmp;
    if (!rg) {
        uint8_t *extra;
        int rc = hc_net_ring_init(op, &rg, &extra);
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        rg->out = op->rbuf;
        uint8_t *own = rg->out + (size_t)op->comm->rank * op->bytes;
        if (op->sbuf != own) memcpy(own, op->sbuf, op->bytes);
    }
    return hc_net_ring_run(op, rg);
}

/* Ring reduce-scatter (slice j complete on rank j), then rank j sends slice j
 * to the root. op->phase: 0 ring, 1 gather (op->round: next rank to post). */
hc_step_t hc_net_reduce_ring(hc_coll_op_t *op)
{
    hc_net_ring_t *rg = op->tmp;
    int n = op->comm->size, me = op->comm->rank;
    bool root = me == op->root;
    if (!rg) {
        uint8_t *extra;
        int rc = hc_net_ring_init(op, &rg, &extra);
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        size_t lo, len;
        hc_net_slice(rg, rg->me, &lo, &len);
        rg->mine = op->sbuf;
        rg->part = root ? op->rbuf : extra;
        rg->fin = rg->part + lo * op->esize;
    }
    if (op->phase == 0) {
        hc_step_t t = hc_net_ring_run(op, rg);
        if (!hc_step_ok(t)) return t;
        op->phase = 1;
        op->round = 0;
    }
    for (;;) {
        hc_step_t t = hc_net_test(op);
        if (!hc_step_ok(t)) return t;
        hcomm_status_t rc = HCOMM_OK;
        if (op->round >= n) return HC_STEP_DONE;
        size_t lo, len;
        if (!root) {
            hc_net_slice(rg, rg->me, &lo, &len);
            if ((rc = hc_net_send(op, rg->fin, len * op->esize, op->root)) != HCOMM_OK)
                return hc_step_fail(rc);
            op->round = n;
            continue;
        }
        for (int posted = 0; op->round < n && posted < HC_NET_BATCH; op->round++) {
            if (op->round == rg->me) continue; /* round: a ring position */
            hc_net_slice(rg, op->round, &lo, &len);
            rc = hc_net_recv(op, (uint8_t *)op->rbuf + lo * op->esize, len * op->esize,
                             rg->order[op->round]);
            if (rc != HCOMM_OK) return hc_step_fail(rc);
            posted++;
        }
    }
}

/* ---- broadcast ------------------------------------------------------------------------ */

/* Pipelined chain root -> root+1 -> ... -> root-1: chunk c is forwarded as
 * soon as it arrived, while later chunks are still in flight (a pipeline of
 * lag 0: hc_net_pipe_run). */
typedef struct {
    int prev, next; /* -1: none */
    size_t chunk;   /* elements */
    uint8_t *buf;
    hc_net_pipe_t pipe;
} hc_net_chain_t;

size_t hc_net_chain_state(const hc_coll_op_t *op)
{
    (void)op;
    return sizeof(hc_net_chain_t);
}

static hcomm_status_t hc_net_chain_post(hc_coll_op_t *op, hc_net_chain_t *ch, int u, bool send)
{
    size_t lo = (size_t)u * ch->chunk, cnt = HC_MIN(ch->chunk, op->count - lo);
    return hc_net_post(op, ch->pipe.ids, u * 2 + send, send, ch->buf + lo * op->esize,
                       cnt * op->esize, send ? ch->next : ch->prev);
}

static hcomm_status_t hc_net_chain_post_send(hc_coll_op_t *op, void *ctx, int u)
{
    return hc_net_chain_post(op, ctx, u, true);
}

static hcomm_status_t hc_net_chain_post_recv(hc_coll_op_t *op, void *ctx, int u)
{
    return hc_net_chain_post(op, ctx, u, false);
}

static const hc_net_pipe_ops_t hc_net_chain_ops = {hc_net_chain_post_send,
                                                   hc_net_chain_post_recv, NULL};

hc_step_t hc_net_broadcast_chain(hc_coll_op_t *op)
{
    hc_net_chain_t *ch = op->tmp;
    if (!ch) {
        /* The chain follows the ring order from the root's position. */
        int n = op->comm->size, me, rootp = 0;
        const int *order = hc_coll_ring_order(op->comm, &me);
        if (!order) return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_broadcast: ring order"));
        while (order[rootp] != op->root) rootp++;
        int vr = hc_net_mod(me - rootp, n);
        int rc = hc_net_alloc(op);
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        ch = op->tmp;
        memset(ch, 0, sizeof(*ch));
        ch->buf = op->rbuf;
        ch->prev = vr == 0 ? -1 : order[hc_net_mod(me - 1, n)];
        ch->next = vr == n - 1 ? -1 : order[hc_net_mod(me + 1, n)];
        /* Chunks small enough that the chain fills quickly, large enough to
         * amortize the per-message cost. */
        size_t cb = op->bytes >= 8 * HC_NET_CHUNK_BYTES ? HC_NET_CHUNK_BYTES
                                                        : HC_MAX(HC_NET_SMALL_BYTES, op->bytes / 8);
        ch->chunk = HC_MAX((size_t)1, cb / op->esize);
        hc_net_pipe_t *p = &ch->pipe;
        p->nunits = (int)((op->count + ch->chunk - 1) / ch->chunk);
        p->window = HC_MIN(HC_NET_WINDOW, p->nunits);
        p->lag = 0;
        if (ch->prev < 0) p->next_recv = p->next_proc = p->nunits; /* the root sends only */
        if (ch->next < 0) p->next_send = p->nunits;                /* the last receives only */
    }
    return hc_net_pipe_run(op, &ch->pipe, &hc_net_chain_ops, ch);
}
