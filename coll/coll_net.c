/*
 * Point-to-point collective algorithms: they run over any driver, for
 * communicators that span nodes, that have no node-shared region, or when
 * HCOMM_ALGO forces one. Every message goes through hc_coll_isend/irecv on
 * the communicator's collective context with the op's sequence number as tag,
 * so matching is FIFO per (peer, op): each algorithm posts the messages between
 * a pair of ranks in the same order on both sides, which is all the protocol
 * it needs. step() never waits: it posts, returns PENDING and resumes from
 * its state on the next progress pass.
 *
 * Algorithms and the HCOMM_ALGO names that force them (a name that does not
 * apply to a collective makes it fail with ERR_UNSUPPORTED):
 *
 *   allreduce       rd    recursive doubling; non-power-of-two counts fold
 *                         the extra ranks into a partner first (auto: <= 64 KiB)
 *                   ring  pipelined ring reduce-scatter + ring allgather
 *   reduce          tree  binomial tree to the root (auto: <= 64 KiB)
 *                   ring  pipelined ring reduce-scatter + gather to the root
 *   broadcast       tree  binomial tree (auto: <= 64 KiB)
 *                   ring  pipelined chain root -> root+1 -> ... in chunks
 *   allgather       rd    recursive doubling, power-of-two rank counts only
 *                         (auto: total <= 64 KiB)
 *                   ring  pipelined ring
 *   reduce_scatter  ring  pipelined ring reduce-scatter
 *   alltoall        direct  pairwise exchange (n-1 rounds, several in flight)
 *   barrier         any name: dissemination (ceil(log2 n) zero-byte rounds);
 *                   there is no other, and forcing a family must not leave a
 *                   job unable to synchronize.
 *
 * Results are identical on every rank, bit for bit: the ring distributes one
 * reduced copy of each slice, and in recursive doubling both partners compute
 * op(lower rank's data, higher rank's data). AVG sums (avg_div 0) until the
 * last reduction of each element, which divides by n once.
 *
 * The pipelined ring cuts each ring step into chunks (<= 1 MiB) and numbers
 * the (step, chunk) units; receives, reductions and sends each advance in
 * unit order, so a chunk can move on to the next step while later chunks of
 * the previous step are still in flight, with at most HC_NET_WINDOW receives
 * and as many sends outstanding.
 */
#include "coll/coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HC_NET_SMALL_BYTES ((size_t)64 << 10)
#define HC_NET_CHUNK_BYTES ((size_t)1 << 20)
#define HC_NET_WINDOW 8
/* Round-based algorithms post at most this many requests at once. */
#define HC_NET_BATCH (HC_COLL_MAX_REQS / 2)

_Static_assert(2 * HC_NET_WINDOW <= HC_COLL_MAX_REQS, "window fits the request array");

static uint8_t hc_net_zero; /* the buffer of zero-byte messages */

static inline int hc_net_mod(int a, int n)
{
    a %= n;
    return a < 0 ? a + n : a;
}

/* Element j*len/parts without overflowing for huge len. */
static inline size_t hc_net_split(size_t len, size_t parts, size_t j)
{
    return (len / parts) * j + (len % parts) * j / parts;
}

static int hc_net_alloc(hc_coll_op_t *op, size_t bytes)
{
    op->tmp = malloc(bytes ? bytes : 1);
    if (!op->tmp)
        return hc_error(HCOMM_ERR_NO_MEMORY,
                        "%s (algorithm %s): no memory for %zu bytes of scratch",
                        hc_coll_name(op->kind), op->algo, bytes);
    op->tmp_bytes = bytes;
    return HCOMM_OK;
}

/* dst = op(a, b); last: the final reduction of these elements (AVG divides). */
static inline void hc_net_reduce2(hc_coll_op_t *op, void *dst, const void *a, const void *b,
                                  size_t count, bool last)
{
    const void *srcs[2] = {a, b};
    if (count)
        hc_reduce(dst, srcs, 2, count, op->dtype, op->op,
                  last && op->op == HCOMM_AVG ? op->comm->size : 0);
}

/* A request of op failed with st: returns st with a message naming the
 * collective and the failed peer (or the transport's own reason). */
static HC_NOINLINE int hc_net_failed(hc_coll_op_t *op, int st)
{
    char what[96], why[256];
    snprintf(what, sizeof(what), "%s (algorithm %s)", hc_coll_name(op->kind), op->algo);
    int dead = hc_coll_failed_member(op->comm);
    if (dead >= 0) return hc_peer_error(dead, what);
    snprintf(why, sizeof(why), "%s", hc_error_last());
    return hc_error((hcomm_status_t)st, "%s: a transfer failed: %s", what,
                    why[0] ? why : hcomm_strerror((hcomm_status_t)st));
}

/* hc_coll_reqs_test with failures explained. */
static inline hc_step_t hc_net_test(hc_coll_op_t *op)
{
    hc_step_t rc = hc_coll_reqs_test(op);
    return HC_UNLIKELY(rc.st != HCOMM_OK) ? hc_step_fail(hc_net_failed(op, rc.st)) : rc;
}

static inline hcomm_status_t hc_net_send(hc_coll_op_t *op, const void *buf, size_t len, int peer)
{
    return hc_coll_isend(op, len ? buf : &hc_net_zero, len, peer);
}

static inline hcomm_status_t hc_net_recv(hc_coll_op_t *op, void *buf, size_t len, int peer)
{
    return hc_coll_irecv(op, len ? buf : &hc_net_zero, len, peer);
}

/* For the pipelined engines, which track requests one by one: ids[i] names
 * op->reqs[i]. Pops one completed request: 1 (its id in *id_p), 0 when none
 * has completed, or its failure status. */
static int hc_net_pop(hc_coll_op_t *op, int32_t *ids, int32_t *id_p)
{
    for (int i = 0; i < op->nreqs; i++) {
        struct hcomm_request *req = op->reqs[i];
        if (!req->done) continue;
        hcomm_status_t st = req->status;
        *id_p = ids[i];
        hc_request_free(req);
        op->nreqs--;
        op->reqs[i] = op->reqs[op->nreqs];
        ids[i] = ids[op->nreqs];
        return st == HCOMM_OK ? 1 : hc_net_failed(op, st);
    }
    return 0;
}

static hcomm_status_t hc_net_post(hc_coll_op_t *op, int32_t *ids, int32_t id, bool send,
                                  const void *buf, size_t len, int peer)
{
    int i = op->nreqs;
    hcomm_status_t st =
        send ? hc_net_send(op, buf, len, peer) : hc_net_recv(op, (void *)buf, len, peer);
    if (st == HCOMM_OK) ids[i] = id;
    return st;
}

/* ---- allreduce: recursive doubling ------------------------------------------------ */

/* Phases: 0 start; 1 odd fold rank got its partner's data; 2 exchange rounds
 * (op->round = log2 of the distance, op->state 1 = a round is in flight);
 * 3 sending the result back to the folded partner; 4 folded rank sent its
 * data; 5 folded rank waits for the result. op->vrank: 1 when the running
 * value is in tmp rather than rbuf. */
static hc_step_t hc_net_allreduce_rd(hc_coll_op_t *op)
{
    int n = op->comm->size, me = op->comm->rank;
    uint8_t *bufs[2];
    for (;;) {
        if (op->nreqs) {
            hc_step_t t = hc_net_test(op);
            if (!hc_step_ok(t)) return t;
        }
        switch (op->phase) {
        case 0: {
            int rc = hc_net_alloc(op, op->bytes);
            if (rc != HCOMM_OK) return hc_step_fail(rc);
            if (op->sbuf != op->rbuf) memcpy(op->rbuf, op->sbuf, op->bytes);
            op->vrank = 0; /* fields past reqs[] are not cleared by the engine */
            op->pof2 = 1;
            while (op->pof2 * 2 <= n)
                op->pof2 *= 2;
            op->rem = n - op->pof2;
            op->round = 0;
            if (me < 2 * op->rem && me % 2 == 0) {
                if ((rc = hc_net_send(op, op->rbuf, op->bytes, me + 1)) != HCOMM_OK)
                    return hc_step_fail(rc);
                op->phase = 4;
            } else if (me < 2 * op->rem) {
                if ((rc = hc_net_recv(op, op->tmp, op->bytes, me - 1)) != HCOMM_OK)
                    return hc_step_fail(rc);
                op->phase = 1;
            } else {
                op->phase = 2;
            }
            break;
        }
        case 1: /* op(data of me-1, mine): the value lives in tmp from now on */
            hc_net_reduce2(op, op->tmp, op->tmp, op->rbuf, op->count, false);
            op->vrank = 1;
            op->phase = 2;
            break;
        case 2: {
            bufs[0] = op->rbuf;
            bufs[1] = op->tmp;
            uint8_t *cur = bufs[op->vrank], *other = bufs[!op->vrank];
            int vr = me < 2 * op->rem ? me / 2 : me - op->rem;
            int mask = 1 << op->round;
            if (op->state == 1) {
                int pv = vr ^ mask, peer = pv < op->rem ? pv * 2 + 1 : pv + op->rem;
                bool last = mask * 2 >= op->pof2;
                if (me < peer) {
                    hc_net_reduce2(op, cur, cur, other, op->count, last);
                } else {
                    hc_net_reduce2(op, other, other, cur, op->count, last);
                    op->vrank = !op->vrank;
                }
                op->state = 0;
                op->round++;
                break;
            }
            if (mask >= op->pof2) {
                if (op->vrank) memcpy(op->rbuf, op->tmp, op->bytes);
                op->vrank = 0;
                op->phase = 3;
                if (me < 2 * op->rem) {
                    int rc = hc_net_send(op, op->rbuf, op->bytes, me - 1);
                    if (rc != HCOMM_OK) return hc_step_fail(rc);
                }
                break;
            }
            int pv = vr ^ mask, peer = pv < op->rem ? pv * 2 + 1 : pv + op->rem;
            int rc = hc_net_recv(op, other, op->bytes, peer);
            if (rc == HCOMM_OK) rc = hc_net_send(op, cur, op->bytes, peer);
            if (rc != HCOMM_OK) return hc_step_fail(rc);
            op->state = 1;
            break;
        }
        case 3:
        case 5:
            return HC_STEP_DONE;
        case 4: {
            int rc = hc_net_recv(op, op->rbuf, op->bytes, me + 1);
            if (rc != HCOMM_OK) return hc_step_fail(rc);
            op->phase = 5;
            break;
        }
        }
    }
}

/* ---- pipelined ring ------------------------------------------------------------------ */

/* Slices: the data is cut in n slices (allreduce, reduce: element ranges with
 * vector-friendly inner boundaries; allgather, reduce_scatter: the rank
 * blocks). Reduce-scatter step k (0 <= k < rs_steps = n-1) sends slice
 * me-k-1 and receives slice me-k-2 from the left into a slot, then reduces
 * it with this rank's own data; after n-1 steps slice `me` is complete here.
 * Allgather step t sends slice me-t and receives slice me-t-1 from the left,
 * straight into `out`. A unit is (step, chunk), numbered step-major. */
typedef struct {
    int n, me, left, right;
    int rs_steps, nchunks, nunits, window;
    int next_send, next_recv, next_proc, sends_inflight;
    bool blocks; /* slices are whole rank blocks of ec elements */
    size_t ec;   /* elements: per block, or in all */
    size_t esize;
    const uint8_t *mine; /* this rank's contribution, in slice layout */
    uint8_t *part;       /* partial results, in slice layout */
    uint8_t *fin;        /* where the complete slice `me` goes */
    uint8_t *out;        /* allgather destination, in slice layout */
    uint8_t *slots;
    size_t slot_bytes;
    uint8_t rdone[HC_NET_WINDOW];
    int32_t ids[HC_COLL_MAX_REQS];
} hc_net_ring_t;

static void hc_net_slice(const hc_net_ring_t *rg, int j, size_t *lo, size_t *len)
{
    if (rg->blocks) {
        *lo = (size_t)j * rg->ec;
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
static int hc_net_ring_init(hc_coll_op_t *op, bool blocks, int rs_steps, int ag_steps, size_t extra,
                            hc_net_ring_t **rg_p, uint8_t **extra_p)
{
    int n = op->comm->size;
    hc_net_ring_t g = {.n = n,
                       .me = op->comm->rank,
                       .blocks = blocks,
                       .ec = op->count,
                       .esize = op->esize,
                       .rs_steps = rs_steps,
                       .nchunks = 1};
    g.left = hc_net_mod(g.me - 1, n);
    g.right = hc_net_mod(g.me + 1, n);
    size_t maxlen = 0, lo, len;
    for (int j = 0; j < n; j++) {
        hc_net_slice(&g, j, &lo, &len);
        maxlen = HC_MAX(maxlen, len);
    }
    size_t per_chunk = HC_MAX((size_t)1, HC_NET_CHUNK_BYTES / op->esize);
    g.nchunks = (int)HC_MAX((size_t)1, (maxlen + per_chunk - 1) / per_chunk);
    g.nunits = g.nchunks * (rs_steps + ag_steps);
    g.window = HC_MIN(HC_NET_WINDOW, g.nunits);
    g.slot_bytes = rs_steps ? HC_ALIGN_UP((maxlen + g.nchunks - 1) / g.nchunks * op->esize,
                                          (size_t)HC_CACHE_LINE)
                            : 0;
    size_t hdr = HC_ALIGN_UP(sizeof(g), (size_t)HC_CACHE_LINE);
    size_t slots = g.slot_bytes * (size_t)g.window;
    int rc = hc_net_alloc(op, hdr + slots + extra);
    if (rc != HCOMM_OK) return rc;
    hc_net_ring_t *rg = op->tmp;
    *rg = g;
    rg->slots = (uint8_t *)op->tmp + hdr;
    *extra_p = rg->slots + slots;
    *rg_p = rg;
    return HCOMM_OK;
}

static hcomm_status_t hc_net_ring_post_send(hc_coll_op_t *op, hc_net_ring_t *rg, int u)
{
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
    return hc_net_post(op, rg->ids, u * 2 + 1, true, base + soff + coff, cnt * rg->esize,
                       rg->right);
}

static hcomm_status_t hc_net_ring_post_recv(hc_coll_op_t *op, hc_net_ring_t *rg, int u)
{
    int k = u / rg->nchunks, c = u % rg->nchunks;
    size_t soff, coff, cnt;
    uint8_t *dst;
    if (k < rg->rs_steps) {
        hc_net_chunk(rg, hc_net_mod(rg->me - k - 2, rg->n), c, &soff, &coff, &cnt);
        dst = rg->slots + (size_t)(u % rg->window) * rg->slot_bytes;
    } else {
        hc_net_chunk(rg, hc_net_mod(rg->me - (k - rg->rs_steps) - 1, rg->n), c, &soff, &coff, &cnt);
        dst = rg->out + soff + coff;
    }
    return hc_net_post(op, rg->ids, u * 2, false, dst, cnt * rg->esize, rg->left);
}

static void hc_net_ring_process(hc_coll_op_t *op, hc_net_ring_t *rg, int u)
{
    int k = u / rg->nchunks, c = u % rg->nchunks;
    if (k >= rg->rs_steps) return; /* allgather data landed in place */
    size_t soff, coff, cnt;
    hc_net_chunk(rg, hc_net_mod(rg->me - k - 2, rg->n), c, &soff, &coff, &cnt);
    bool last = k == rg->rs_steps - 1;
    uint8_t *dst = last ? rg->fin + coff : rg->part + soff + coff;
    /* mine first: in place, dst is the caller's own data (hc_reduce allows dst == srcs[0]) */
    hc_net_reduce2(op, dst, rg->mine + soff + coff,
                   rg->slots + (size_t)(u % rg->window) * rg->slot_bytes, cnt, last);
}

/* Advances the ring as far as completed requests allow. */
static hc_step_t hc_net_ring_run(hc_coll_op_t *op, hc_net_ring_t *rg)
{
    for (;;) {
        bool moved = false;
        int32_t id;
        int rc;
        while ((rc = hc_net_pop(op, rg->ids, &id)) == 1) {
            moved = true;
            if (id & 1)
                rg->sends_inflight--;
            else
                rg->rdone[(id >> 1) % rg->window] = 1;
        }
        if (rc < 0) return hc_step_fail(rc);
        while (rg->next_proc < rg->next_recv && rg->rdone[rg->next_proc % rg->window]) {
            rg->rdone[rg->next_proc % rg->window] = 0;
            hc_net_ring_process(op, rg, rg->next_proc++);
            moved = true;
        }
        /* A unit of step k > 0 forwards what unit u - nchunks produced. */
        while (rg->next_send < rg->nunits && rg->sends_inflight < rg->window &&
               (rg->next_send < rg->nchunks || rg->next_proc > rg->next_send - rg->nchunks)) {
            if ((rc = hc_net_ring_post_send(op, rg, rg->next_send)) != HCOMM_OK)
                return hc_step_fail(rc);
            rg->next_send++;
            rg->sends_inflight++;
            moved = true;
        }
        while (rg->next_recv < rg->nunits && rg->next_recv < rg->next_proc + rg->window) {
            if ((rc = hc_net_ring_post_recv(op, rg, rg->next_recv)) != HCOMM_OK)
                return hc_step_fail(rc);
            rg->next_recv++;
            moved = true;
        }
        if (rg->next_proc == rg->nunits && rg->next_send == rg->nunits && rg->sends_inflight == 0)
            return HC_STEP_DONE;
        if (!moved) return HC_STEP_PENDING;
    }
}

static hc_step_t hc_net_allreduce_ring(hc_coll_op_t *op)
{
    hc_net_ring_t *rg = op->tmp;
    if (!rg) {
        uint8_t *extra;
        int n = op->comm->size;
        int rc = hc_net_ring_init(op, false, n - 1, n - 1, 0, &rg, &extra);
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        size_t lo, len;
        hc_net_slice(rg, rg->me, &lo, &len);
        rg->mine = op->sbuf;
        rg->part = rg->out = op->rbuf;
        rg->fin = (uint8_t *)op->rbuf + lo * op->esize;
    }
    return hc_net_ring_run(op, rg);
}

static hc_step_t hc_net_reduce_scatter_ring(hc_coll_op_t *op)
{
    hc_net_ring_t *rg = op->tmp;
    if (!rg) {
        int n = op->comm->size;
        uint8_t *extra;
        int rc = hc_net_ring_init(op, true, n - 1, 0, op->bytes * (size_t)n, &rg, &extra);
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        rg->part = extra;
        rg->mine = op->sbuf;
        rg->fin = op->rbuf;
    }
    return hc_net_ring_run(op, rg);
}

static hc_step_t hc_net_allgather_ring(hc_coll_op_t *op)
{
    hc_net_ring_t *rg = op->tmp;
    if (!rg) {
        uint8_t *extra;
        int rc = hc_net_ring_init(op, true, 0, op->comm->size - 1, 0, &rg, &extra);
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        rg->out = op->rbuf;
        uint8_t *own = rg->out + (size_t)rg->me * op->bytes;
        if (op->sbuf != own) memcpy(own, op->sbuf, op->bytes);
    }
    return hc_net_ring_run(op, rg);
}

/* Ring reduce-scatter (slice j complete on rank j), then rank j sends slice j
 * to the root. op->phase: 0 ring, 1 gather (op->round: next rank to post). */
static hc_step_t hc_net_reduce_ring(hc_coll_op_t *op)
{
    hc_net_ring_t *rg = op->tmp;
    int n = op->comm->size, me = op->comm->rank;
    bool root = me == op->root;
    if (!rg) {
        uint8_t *extra;
        int rc = hc_net_ring_init(op, false, n - 1, 0, root ? 0 : op->bytes, &rg, &extra);
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        size_t lo, len;
        hc_net_slice(rg, me, &lo, &len);
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
            hc_net_slice(rg, me, &lo, &len);
            if ((rc = hc_net_send(op, rg->fin, len * op->esize, op->root)) != HCOMM_OK)
                return hc_step_fail(rc);
            op->round = n;
            continue;
        }
        for (int posted = 0; op->round < n && posted < HC_NET_BATCH; op->round++) {
            if (op->round == me) continue;
            hc_net_slice(rg, op->round, &lo, &len);
            rc = hc_net_recv(op, (uint8_t *)op->rbuf + lo * op->esize, len * op->esize, op->round);
            if (rc != HCOMM_OK) return hc_step_fail(rc);
            posted++;
        }
    }
}

/* ---- broadcast ------------------------------------------------------------------------ */

/* Binomial tree over ranks relative to the root: receive from the parent
 * (phase 0 -> 1), then send to every child at once (phase 2). */
static hc_step_t hc_net_broadcast_tree(hc_coll_op_t *op)
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

/* Pipelined chain root -> root+1 -> ... -> root-1: chunk c is forwarded as
 * soon as it arrived, while later chunks are still in flight. */
typedef struct {
    int prev, next; /* -1: none */
    int nchunks, window;
    int next_send, next_recv, next_proc, sends_inflight;
    size_t chunk; /* elements */
    uint8_t rdone[HC_NET_WINDOW];
    int32_t ids[HC_COLL_MAX_REQS];
} hc_net_chain_t;

static hc_step_t hc_net_broadcast_chain(hc_coll_op_t *op)
{
    hc_net_chain_t *ch = op->tmp;
    uint8_t *buf = op->rbuf;
    if (!ch) {
        int n = op->comm->size, me = op->comm->rank, vr = hc_net_mod(me - op->root, n);
        int rc = hc_net_alloc(op, sizeof(*ch));
        if (rc != HCOMM_OK) return hc_step_fail(rc);
        ch = op->tmp;
        memset(ch, 0, sizeof(*ch));
        ch->prev = vr == 0 ? -1 : hc_net_mod(me - 1, n);
        ch->next = vr == n - 1 ? -1 : hc_net_mod(me + 1, n);
        /* Chunks small enough that the chain fills quickly, large enough to
         * amortize the per-message cost. */
        size_t cb = op->bytes >= 8 * HC_NET_CHUNK_BYTES ? HC_NET_CHUNK_BYTES
                                                        : HC_MAX(HC_NET_SMALL_BYTES, op->bytes / 8);
        ch->chunk = HC_MAX((size_t)1, cb / op->esize);
        ch->nchunks = (int)((op->count + ch->chunk - 1) / ch->chunk);
        ch->window = HC_MIN(HC_NET_WINDOW, ch->nchunks);
        if (ch->prev < 0) ch->next_recv = ch->next_proc = ch->nchunks;
        if (ch->next < 0) ch->next_send = ch->nchunks;
    }
    for (;;) {
        bool moved = false;
        int32_t id;
        int rc;
        while ((rc = hc_net_pop(op, ch->ids, &id)) == 1) {
            moved = true;
            if (id & 1)
                ch->sends_inflight--;
            else
                ch->rdone[(id >> 1) % ch->window] = 1;
        }
        if (rc < 0) return hc_step_fail(rc);
        while (ch->next_proc < ch->next_recv && ch->rdone[ch->next_proc % ch->window]) {
            ch->rdone[ch->next_proc++ % ch->window] = 0;
            moved = true;
        }
        while (ch->next_send < ch->nchunks && ch->sends_inflight < ch->window &&
               ch->next_send < ch->next_proc) {
            size_t lo = (size_t)ch->next_send * ch->chunk, cnt = HC_MIN(ch->chunk, op->count - lo);
            rc = hc_net_post(op, ch->ids, ch->next_send * 2 + 1, true, buf + lo * op->esize,
                             cnt * op->esize, ch->next);
            if (rc != HCOMM_OK) return hc_step_fail(rc);
            ch->next_send++;
            ch->sends_inflight++;
            moved = true;
        }
        while (ch->next_recv < ch->nchunks && ch->next_recv < ch->next_proc + ch->window) {
            size_t lo = (size_t)ch->next_recv * ch->chunk, cnt = HC_MIN(ch->chunk, op->count - lo);
            rc = hc_net_post(op, ch->ids, ch->next_recv * 2, false, buf + lo * op->esize,
                             cnt * op->esize, ch->prev);
            if (rc != HCOMM_OK) return hc_step_fail(rc);
            ch->next_recv++;
            moved = true;
        }
        if (ch->next_proc == ch->nchunks && ch->next_send == ch->nchunks && ch->sends_inflight == 0)
            return HC_STEP_DONE;
        if (!moved) return HC_STEP_PENDING;
    }
}

/* ---- reduce: binomial tree ---------------------------------------------------------- */

/* Ranks relative to the root; in round k a rank with bit k set sends its
 * value to vr - 2^k and is done, the others receive from vr + 2^k. The value
 * starts as sbuf and lives in rbuf (root) or tmp after the first reduction
 * (op->vrank = 1). tmp: [value (non-root) | receive area]. */
static hc_step_t hc_net_reduce_tree(hc_coll_op_t *op)
{
    int n = op->comm->size, vr = hc_net_mod(op->comm->rank - op->root, n);
    bool root = vr == 0;
    if (!op->tmp) {
        int rc = hc_net_alloc(op, op->bytes * (root ? 1 : 2));
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

/* ---- allgather: recursive doubling ------------------------------------------------ */

/* Power-of-two n: in round k, rank r holds the 2^k blocks of its aligned
 * group and swaps them with partner r ^ 2^k. */
static hc_step_t hc_net_allgather_rd(hc_coll_op_t *op)
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

/* ---- alltoall: pairwise exchange ------------------------------------------------------ */

/* Out of place: round i sends block r+i to rank r+i and receives block r-i
 * from rank r-i; each pair meets once, so up to HC_NET_BATCH rounds are
 * posted together. In place: round i pairs r with i-r (a symmetric pairing)
 * and the block sent to the partner is copied to tmp first, since its
 * answer lands in the same block; one round at a time. */
static hc_step_t hc_net_alltoall(hc_coll_op_t *op)
{
    int n = op->comm->size, me = op->comm->rank;
    size_t B = op->bytes;
    uint8_t *rbuf = op->rbuf;
    const uint8_t *sbuf = op->sbuf;
    bool inplace = op->sbuf == op->rbuf;
    if (op->phase == 0) {
        if (inplace) {
            int rc = hc_net_alloc(op, B);
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

static hc_step_t hc_net_barrier(hc_coll_op_t *op)
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

/* ---- the family's table (coll.h: the algorithm registry) ------------------------------ */

static bool hc_net_small(const hc_coll_op_t *op)
{
    return op->bytes <= HC_NET_SMALL_BYTES;
}

static bool hc_net_pof2(const hc_coll_op_t *op)
{
    int n = op->comm->size;
    return (n & (n - 1)) == 0;
}

static bool hc_net_small_total(const hc_coll_op_t *op)
{
    return op->bytes * (size_t)op->comm->size <= HC_NET_SMALL_BYTES;
}

/* Order matters: for each collective the automatic choice is the first
 * entry whose auto_pick says yes. */
const hc_coll_algo_t hc_coll_net_algos[] = {
    {.name = "rd", .family = "rd", .colls = HC_COLL_BIT(HC_COLL_ALLREDUCE),
     .auto_pick = hc_net_small, .step = hc_net_allreduce_rd},
    {.name = "ring", .family = "ring", .colls = HC_COLL_BIT(HC_COLL_ALLREDUCE),
     .step = hc_net_allreduce_ring},
    {.name = "tree", .family = "tree", .colls = HC_COLL_BIT(HC_COLL_REDUCE),
     .auto_pick = hc_net_small, .step = hc_net_reduce_tree},
    {.name = "ring", .family = "ring", .colls = HC_COLL_BIT(HC_COLL_REDUCE),
     .step = hc_net_reduce_ring},
    {.name = "tree", .family = "tree", .colls = HC_COLL_BIT(HC_COLL_BROADCAST),
     .auto_pick = hc_net_small, .step = hc_net_broadcast_tree},
    {.name = "chain", .family = "ring", .colls = HC_COLL_BIT(HC_COLL_BROADCAST),
     .step = hc_net_broadcast_chain},
    {.name = "rd", .family = "rd", .colls = HC_COLL_BIT(HC_COLL_ALLGATHER),
     .applies = hc_net_pof2, .auto_pick = hc_net_small_total, .step = hc_net_allgather_rd},
    {.name = "ring", .family = "ring", .colls = HC_COLL_BIT(HC_COLL_ALLGATHER),
     .step = hc_net_allgather_ring},
    {.name = "ring", .family = "ring", .colls = HC_COLL_BIT(HC_COLL_REDUCE_SCATTER),
     .step = hc_net_reduce_scatter_ring},
    {.name = "pairwise", .family = "direct", .colls = HC_COLL_BIT(HC_COLL_ALLTOALL),
     .step = hc_net_alltoall},
    /* One way to do it, whatever HCOMM_ALGO says. */
    {.name = "dissemination", .family = NULL, .colls = HC_COLL_BIT(HC_COLL_BARRIER),
     .step = hc_net_barrier},
    {.name = NULL},
};
