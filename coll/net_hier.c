/*
 * The hierarchical pipelines' engine (coll/net_hier.h): the cut into
 * pieces, the scratch, the fixed issue order of every lane's children and
 * their completions, for the tables of stages of net_hier_slices.c and
 * net_hier_blocks.c.
 */
#include "coll/net_hier.h"

#include "mem/mem.h"

#include <stdio.h>

/* Cuts count elements of es bytes into pieces of a multiple of unit
 * elements: a rank's share of a piece (piece / unit) at least
 * HC_HIER_PIECE_MIN bytes, at most HC_HIER_PIECES_MAX pieces. Returns the
 * pieces; *piece_p: elements of each but the last, which may be shorter. */
int hc_hier_cut(size_t count, size_t es, size_t unit, size_t *piece_p)
{
    size_t per = HC_HIER_PIECES_MAX * unit;
    size_t share = HC_MAX((HC_HIER_PIECE_MIN + es - 1) / es, (count + per - 1) / per);
    share = HC_MAX((size_t)1, HC_MIN(share, (count + unit - 1) / unit));
    *piece_p = share * unit;
    return (int)HC_MAX((size_t)1, (count + *piece_p - 1) / *piece_p);
}

static uint64_t hc_hier_timed[HC_COLL_KIND_COUNT]; /* size classes whose hier time was printed */

size_t hc_net_hier_state(const hc_coll_op_t *op)
{
    (void)op;
    return sizeof(hc_hier_t);
}

void hc_net_hier_release(hc_coll_op_t *op)
{
    hc_hier_t *h = op->tmp;
    if (!h) return;
    for (int l = 0; l < HC_HIER_LANES; l++) {
        for (int i = 0; i < h->qn[l]; i++)
            hc_coll_child_end(h->q[l][i], op->end_status);
        h->qn[l] = 0;
    }
}

/* The slices live in the communicator's scratch, pool memory kept from
 * call to call (registered once, no page faults per call: a fresh buffer
 * per call made the node's single-copy reduce-scatter 3x slower). Only the
 * head of the communicator's queue runs, so one call uses it at a time. */
static uint8_t *hc_hier_scratch(hc_coll_comm_t *cc, size_t bytes)
{
    if (cc->hier_buf_bytes < bytes) {
        if (cc->hier_buf) hc_mem_free(cc->hier_buf);
        cc->hier_buf = NULL;
        cc->hier_buf_bytes = 0;
        void *p;
        if (hc_mem_alloc(bytes, &p) != HCOMM_OK) return NULL;
        cc->hier_buf = p;
        cc->hier_buf_bytes = bytes;
    }
    return cc->hier_buf;
}

void hc_hier_avg(const hc_coll_op_t *op, void *buf, size_t count)
{
    const void *src[1] = {buf};
    hc_reduce(buf, src, 1, count, op->dtype, HCOMM_AVG, op->comm->size);
}

/* Why a child collective failed: the reason its communicator recorded
 * when it broke (copied: the caller's hc_error reuses the error buffer). */
hc_step_t hc_hier_child_fail(const char *what, const char *level, struct hcomm_request *req)
{
    char why[512]; /* as long as broken_why */
    hc_coll_comm_t *cc = req->comm ? req->comm->coll_priv : NULL;
    snprintf(why, sizeof(why), "%s",
             cc && cc->broken ? cc->broken_why : hcomm_strerror(req->status));
    return hc_step_fail(hc_error(req->status, "%s (hier): its %s failed: %s", what, level, why));
}

static hc_step_t hc_hier_setup(hc_coll_op_t *op, const hc_hier_pipe_t *p)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    if (hc_net_alloc(op) != HCOMM_OK) return hc_step_fail(HCOMM_ERR_NO_MEMORY);
    hc_hier_t *h = op->tmp;
    memset(h, 0, sizeof(*h));
    size_t es = op->esize, shares;
    h->unit = p->slices ? (size_t)cc->hier_L : 1;
    h->K = hc_hier_cut(op->count, es, h->unit, &h->piece);
    memcpy(h->lane, p->lane, sizeof(h->lane));
    HC_STEP_TRY(p->init(op, h, &shares));
    h->share_bytes = HC_ALIGN_UP(h->piece / h->unit * es, (size_t)HC_CACHE_LINE);
    size_t depth = (size_t)HC_MIN(h->K, HC_HIER_DEPTH), slot = shares * h->share_bytes;
    bool pad = hc_hier_len(op, h, h->K - 1) % h->unit != 0;
    size_t bytes = slot * depth + (pad ? h->piece * es : 0);
    uint8_t *base = hc_hier_scratch(cc, bytes);
    if (!base)
        return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY, "%s (hier): %zu bytes of scratch",
                                     hc_coll_name(op->kind), bytes));
    for (size_t i = 0; i < depth; i++)
        h->slot[i] = base + slot * i;
    if (pad) h->pad = base + slot * depth;
    for (int t = 0; t < h->K + p->nstages - 1; t++)
        for (int s = p->nstages - 1; s >= 0; s--) {
            int k = t - s, l = h->lane[s];
            if (k < 0 || k >= h->K || l == HC_HIER_SKIP) continue;
            h->order[l][h->norder[l]++] = (uint8_t)(k * HC_HIER_STAGES + s);
        }
    int cls = hc_hier_class(op->bytes);
    if (hc_log_level_current >= HC_LOG_DEBUG ||
        (hc_log_level_current >= HC_LOG_INFO && op->comm->rank == 0 &&
         !(hc_hier_timed[op->kind] & (1ull << cls)))) {
        hc_hier_timed[op->kind] |= 1ull << cls;
        h->t0 = hc_time_ns();
    }
    return HC_STEP_DONE;
}

/* Runs the pipeline of p until it has to wait (docs: the fixed order above). */
hc_step_t hc_hier_run(hc_coll_op_t *op, const hc_hier_pipe_t *p)
{
    hc_hier_t *h = op->tmp;
    if (!h) {
        hc_step_t t = hc_hier_setup(op, p);
        if (!hc_step_ok(t)) return t;
        h = op->tmp;
    }
    int S = p->nstages;
    for (;;) {
        bool moved = false;
        /* Completions, oldest first (each comm runs its collectives in order). */
        for (int l = 0; l < HC_HIER_LANES; l++)
            while (h->qn[l] && h->q[l][0]->done) {
                struct hcomm_request *req = h->q[l][0];
                int s = h->q_item[l][0] % HC_HIER_STAGES, k = h->q_item[l][0] / HC_HIER_STAGES;
                if (req->status != HCOMM_OK)
                    return hc_hier_child_fail(hc_coll_name(op->kind), p->level[s], req);
                hc_request_free(req);
                h->qn[l]--;
                memmove(h->q[l], h->q[l] + 1, sizeof(h->q[l][0]) * (size_t)h->qn[l]);
                memmove(h->q_item[l], h->q_item[l] + 1, sizeof(h->q_item[l][0]) * (size_t)h->qn[l]);
                if (p->done) p->done(op, h, s, k);
                h->done[s] = k + 1;
                moved = true;
            }
        /* A stage this rank has no part in passes its pieces on. */
        for (int s = 1; s < S; s++)
            if (h->lane[s] == HC_HIER_SKIP && h->done[s] < h->done[s - 1]) {
                h->done[s] = h->done[s - 1];
                moved = true;
            }
        if (h->done[S - 1] == h->K) break;
        for (int l = 0; l < HC_HIER_LANES; l++)
            while (h->next[l] < h->norder[l] && h->qn[l] < HC_HIER_QUEUE) {
                int item = h->order[l][h->next[l]], s = item % HC_HIER_STAGES,
                    k = item / HC_HIER_STAGES;
                bool ready = s ? h->done[s - 1] > k
                               : k < HC_HIER_DEPTH || h->done[S - 1] > k - HC_HIER_DEPTH;
                if (!ready) break;
                HC_STEP_TRY(p->start(op, h, s, k, &h->q[l][h->qn[l]]));
                h->q_item[l][h->qn[l]++] = (uint8_t)item;
                h->next[l]++;
                moved = true;
            }
        if (!moved) return HC_STEP_PENDING;
    }
    if (h->t0)
        hc_log_info("topology model: %s of %zu bytes by hier (%d pieces): predicted %.1f us, "
                    "measured %.1f us (first call of its size class)",
                    hc_hier_what(op->kind), op->bytes, h->K, p->predict(op),
                    (double)(hc_time_ns() - h->t0) / 1e3);
    return HC_STEP_DONE;
}
