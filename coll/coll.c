/*
 * The collective engine: per-communicator queues of resumable operations,
 * advanced from every progress pass (hc_coll_ops.progress). Only a queue's head
 * runs, which gives issue-order matching on every rank without any
 * negotiation. A collective that fails midway (a dead peer, a timeout)
 * leaves its communicator "broken": later collectives on it fail at once
 * with a message saying why, instead of mismatching with the survivors.
 */
#include "coll/coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const hc_coll_kind_names[HC_COLL_KIND_COUNT] = {
    "hcomm_allreduce",      "hcomm_broadcast", "hcomm_reduce",     "hcomm_allgather",
    "hcomm_reduce_scatter", "hcomm_alltoall",  "hcomm_barrier",    "hcomm_gather",
    "hcomm_scatter",        "hcomm_allgatherv", "hcomm_reduce_scatterv", "hcomm_alltoallv"};

const char *hc_coll_name(hc_coll_kind_t kind)
{
    return (unsigned)kind < HC_COLL_KIND_COUNT ? hc_coll_kind_names[kind] : "hcomm collective";
}

static hc_list_t hc_coll_active = {&hc_coll_active, &hc_coll_active};
static hc_coll_op_t *hc_coll_op_cache;

void hc_coll_activate(hc_coll_comm_t *cc)
{
    if (!cc->active) {
        cc->active = true;
        hc_list_push_back(&hc_coll_active, &cc->active_link);
    }
}

hc_coll_comm_t *hc_coll_comm(struct hcomm_comm *comm)
{
    if (HC_UNLIKELY(!comm->coll_priv)) {
        hc_coll_comm_t *cc = calloc(1, sizeof(*cc));
        if (!cc)
            return NULL;
        hc_list_init(&cc->active_link);
        cc->comm = comm;
        cc->gave_up_rank = -1;
        cc->gave_up_cause = -1;
        cc->mismatch_rank = -1;
        comm->coll_priv = cc;
    }
    return comm->coll_priv;
}

void hc_coll_op_init(hc_coll_op_t *op)
{
    op->end_status = HCOMM_OK;
    /* Only the algorithm state is reset: hc_coll_post sets the arguments. */
    op->started = false;
    op->error = 0;
    op->draining = false;
    op->state = op->phase = op->round = op->nrounds = 0;
    op->tick = op->tick_end = 0;
    op->off = op->chunk = 0;
    op->tmp = NULL;
    op->tmp_bytes = 0;
    op->nreqs = 0;
    op->parent = NULL;
    op->vec = (hc_coll_vec_t){NULL, NULL, NULL, NULL};
    op->varr = NULL;
    op->vrank = op->pof2 = op->rem = 0;
    op->polls = 0;
    op->ahead_suspect = 0;
    op->probe_at = 0;
    op->algo = NULL;
    op->entry = NULL;
    op->fallback = NULL;
    op->on_done = NULL;
    op->done_arg = NULL;
    hc_list_init(&op->link);
}

hc_coll_op_t *hc_coll_op_alloc(void)
{
    hc_coll_op_t *op = hc_coll_op_cache;
    if (op)
        hc_coll_op_cache = *(hc_coll_op_t **)op;
    else if (!(op = malloc(sizeof(*op))))
        return NULL;
    hc_coll_op_init(op);
    return op;
}

void hc_coll_op_release(hc_coll_op_t *op)
{
    free(op->varr);
    op->varr = NULL;
    if (op->tmp && op->entry && op->entry->release)
        op->entry->release(op);
    /* A failed op's sends may still be inside a driver, pointing into its
     * scratch: the scratch then lives until the last of them is out. */
    hc_drain_t *drain = NULL;
    for (int i = 0; i < op->nreqs && op->tmp && !drain; i++)
        if (op->reqs[i]->inflight > 0) {
            if ((drain = malloc(sizeof(*drain))) == NULL)
                break; /* cannot track it: the scratch leaks rather than be freed */
            drain->buf = op->tmp;
            drain->refs = 0;
        }
    bool leak = false;
    for (int i = 0; i < op->nreqs; i++) {
        struct hcomm_request *req = op->reqs[i];
        hc_list_del(&req->link);
        if (req->inflight > 0) {
            if (drain) {
                req->drain = drain;
                drain->refs++;
            } else {
                leak = true;
            }
        }
        hc_request_free(req);
    }
    op->nreqs = 0;
    if (!drain && !leak)
        free(op->tmp);
    op->tmp = NULL;
    *(hc_coll_op_t **)op = hc_coll_op_cache;
    hc_coll_op_cache = op;
}

/* Some request of op is a send a driver still holds payloads of. */
static bool hc_coll_op_inflight(const hc_coll_op_t *op)
{
    for (int i = 0; i < op->nreqs; i++)
        if (op->reqs[i]->inflight > 0)
            return true;
    return false;
}

/* Ends op with status: completes its request and drops it from its queue. */
void hc_coll_finish(hc_coll_op_t *op, hcomm_status_t status)
{
    struct hcomm_request *req = op->req;
    if (HC_UNLIKELY(status == HCOMM_ERR_PEER_FAILED) && !strstr(hc_error_last(), "peer rank ")) {
        /* a driver's or a child's words without the rank that failed
         * first: the caller must read which one */
        int c = hc_core_first_failed();
        if (c >= 0) {
            char saved[400];
            snprintf(saved, sizeof(saved), "%s", hc_error_last());
            hc_peer_error(c, hc_coll_name(op->kind));
            hc_error(status, "%s (%s)", hc_error_last(), saved);
        }
    }
    op->end_status = status; /* for the entry's release hook */
    hc_list_del(&op->link);
    if (status != HCOMM_OK)
        hc_coll_break(op->comm, status, hc_error_last());
    if (op->on_done)
        op->on_done(op, status);
    req->coll = NULL;
    hc_coll_op_release(op);
    hc_request_complete(req, status);
}


/* The head op's first turn: every earlier collective here has completed,
 * so its messages are out (hc_coll_check_ahead relies on it). */
static void hc_coll_op_first_turn(struct hcomm_comm *comm, hc_coll_op_t *op)
{
    op->started = true;
    hc_coll_comm_t *ccs = comm->coll_priv;
    if (ccs->node)
        hc_coll_node_started(ccs->node, op->seq);
}

/* op failed with st while a driver still holds some of its sends, which
 * point into the user's buffers and the op's scratch: the op ends when they
 * are out (the peers learn of the failure now). */
static void hc_coll_op_drain(struct hcomm_comm *comm, hc_coll_op_t *op, hcomm_status_t st)
{
    hc_coll_break(comm, st, hc_error_last());
    op->draining = true;
    op->drain_status = st;
}

/* A step that has to wait (rc pending): rc again if it may, else rc failed
 * with why (a member died, a member gave up, or the periodic look ahead
 * failed). */
static hc_step_t hc_coll_op_wait_check(struct hcomm_comm *comm, hc_coll_op_t *op, hc_step_t rc)
{
    /* An op made of child collectives (hier) waits only on the
     * members of its children's comms, which check them: a member
     * that finished its part and left must not fail the others'. */
    int dead = op->entry && op->entry->release ? -1 : hc_coll_failed_member(comm);
    hc_coll_comm_t *cc = comm->coll_priv;
    if (op->nreqs && (++op->polls & 1023) == 0) {
        hc_coll_maybe_probe(op);
        hcomm_status_t ast = cc->node ? hc_coll_check_ahead(op, cc) : HCOMM_OK;
        if (ast != HCOMM_OK)
            rc = hc_step_fail(ast);
    }
    if (HC_LIKELY(dead < 0 && cc->gave_up_rank < 0 && rc.st == HCOMM_OK))
        return rc;
    char what[64];
    snprintf(what, sizeof(what), "hcomm collective (%s)", op->algo);
    if (rc.st != HCOMM_OK)
        ; /* hc_coll_check_ahead's */
    else if (dead >= 0)
        rc = hc_step_fail(hc_peer_error(dead, what));
    else
        rc = hc_step_fail(hc_coll_gave_up_error(cc, what));
    return rc;
}

/* Runs the head of comm's queue until it has to wait. */
static int hc_coll_run(struct hcomm_comm *comm)
{
    int done = 0;
    while (!hc_list_empty(&comm->coll_queue)) {
        hc_coll_op_t *op = hc_container_of(comm->coll_queue.next, hc_coll_op_t, link);
        if (HC_UNLIKELY(!op->started))
            hc_coll_op_first_turn(comm, op);
        if (HC_UNLIKELY(op->draining)) {
            if (hc_coll_op_inflight(op))
                break;
            hc_coll_comm_t *cc = comm->coll_priv;
            hc_error(op->drain_status, "%s", cc->broken_why);
            hc_coll_finish(op, op->drain_status);
            done++;
            continue;
        }
        hc_coll_comm_t *ccm = comm->coll_priv;
        if (HC_UNLIKELY(ccm->mismatch_rank >= 0)) {
            /* a message proved the ranks disagree on this collective (or
             * an earlier one): it fails whatever its step would say */
            hcomm_status_t st = hc_error(HCOMM_ERR_INVALID, "%s", ccm->mismatch_why);
            if (hc_coll_op_inflight(op)) {
                hc_coll_op_drain(comm, op, st);
                done++;
                break;
            }
            hc_coll_finish(op, st);
            done++;
            continue;
        }
        int before = op->phase * 8 + op->state;
        hc_step_t rc = op->step(op);
        if (HC_UNLIKELY(op->error) && rc.st == HCOMM_OK)
            rc = hc_step_fail(op->error);
        if (!rc.done) {
            /* A step that moved counts as an event: the wait stays hot. */
            done += op->phase * 8 + op->state != before;
            rc = hc_coll_op_wait_check(comm, op, rc);
            if (HC_LIKELY(rc.st == HCOMM_OK))
                break; /* still pending: it waits */
        }
        if (HC_UNLIKELY(rc.st != HCOMM_OK) && hc_coll_op_inflight(op)) {
            hc_coll_op_drain(comm, op, rc.st);
            done++;
            break;
        }
        hc_coll_finish(op, rc.st);
        done++;
    }
    return done;
}

int hc_coll_progress(void)
{
    int n = 0;
    hc_coll_check_failures();
    hc_coll_shrink_progress();
    if (HC_LIKELY(hc_list_empty(&hc_coll_active))) return 0;
    hc_list_t *pos, *tmp;
    hc_list_foreach_safe(pos, tmp, &hc_coll_active)
    {
        hc_coll_comm_t *cc = hc_container_of(pos, hc_coll_comm_t, active_link);
        struct hcomm_comm *comm = cc->comm;
        n += hc_coll_run(comm);
        if (HC_UNLIKELY(cc->mismatch_rank >= 0) && !cc->broken) {
            /* seen with no collective running: the others learn it now */
            hc_error(HCOMM_ERR_INVALID, "%s", cc->mismatch_why);
            hc_coll_break(comm, HCOMM_ERR_INVALID, hc_error_last());
        }
        if (hc_list_empty(&comm->coll_queue)) {
            hc_list_del(&cc->active_link);
            cc->active = false;
        }
    }
    return n;
}


uint32_t hc_coll_sig(const hc_coll_op_t *op)
{
    /* The kind in the low 4 bits, as it is (a conflict can name the other
     * call), a hash of the arguments above. */
    uint64_t x = (uint64_t)op->kind | (uint64_t)op->dtype << 4 | (uint64_t)op->op << 9 |
                 (uint64_t)(uint32_t)op->root << 16;
    x ^= (uint64_t)op->count * 0x9e3779b97f4a7c15ull;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return ((uint32_t)(x >> 32) & ~HC_COLL_SIG_KIND_MASK) | ((uint32_t)op->kind & HC_COLL_SIG_KIND_MASK);
}

/* Numbering and the signature every rank compares: this call's arguments
 * folded into the chain of all earlier collectives on the communicator, so
 * that a disagreement the algorithm of one collective cannot see (broadcast
 * receivers that agree with the root they named, while another root sends
 * elsewhere) is seen by the next collective that compares signatures. */
void hc_coll_number(hc_coll_op_t *op)
{
    struct hcomm_comm *comm = op->comm;
    op->seq = comm->coll_seq++;
    uint32_t own = hc_coll_sig(op);
    uint64_t x = comm->coll_chain ^ ((uint64_t)own * 0x9e3779b97f4a7c15ull);
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    comm->coll_chain = x;
    op->sig = ((uint32_t)x & ~HC_COLL_SIG_KIND_MASK) | (own & HC_COLL_SIG_KIND_MASK);
    hc_coll_comm_t *cc = comm->coll_priv;
    if (cc) {
        cc->sig_hist[op->seq & 7].seq = op->seq;
        cc->sig_hist[op->seq & 7].sig = op->sig;
    }
}

hcomm_status_t hc_coll_start(hc_coll_op_t *op)
{
    struct hcomm_comm *comm = op->comm;
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (!cc)
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm collective: no memory");
    hc_coll_number(op);
    hc_list_push_back(&comm->coll_queue, &op->link);
    hc_coll_activate(cc);
    if (comm->coll_queue.next == &op->link)
        hc_coll_run(comm);
    return HCOMM_OK;
}

/* A wait on req ran out of time: the collective behind it (for a member of
 * a fused group, the fused one, with every member) ends with a timeout, and
 * so does every collective queued on its communicator, which can no longer
 * match the other ranks' (their waits return at once instead of each
 * running out its own HCOMM_TIMEOUT). */
static void hc_coll_cancel(struct hcomm_request *req)
{
    hc_coll_op_t *op = req->coll;
    if (!op)
        return;
    struct hcomm_comm *comm = op->comm;
    hc_coll_break(comm, HCOMM_ERR_TIMEOUT, "a collective on this communicator timed out");
    hc_coll_finish(op, HCOMM_ERR_TIMEOUT);
    while (!hc_list_empty(&comm->coll_queue))
        hc_coll_finish(hc_container_of(comm->coll_queue.next, hc_coll_op_t, link),
                       HCOMM_ERR_TIMEOUT);
}

/* ---- hang reports ---------------------------------------------------------------------- */

static void hc_coll_comm_free(struct hcomm_comm *comm, hcomm_status_t status, bool release)
{
    hc_coll_comm_t *cc = comm->coll_priv;
    if (!cc)
        return;
    while (!hc_list_empty(&comm->coll_queue)) {
        hc_coll_op_t *op = hc_container_of(comm->coll_queue.next, hc_coll_op_t, link);
        if (status == HCOMM_ERR_REVOKED)
            hc_comm_abort_error(comm, hc_coll_name(op->kind));
        else
            hc_error(status, "hcomm collective: communicator was %s",
                     status == HCOMM_ERR_ABORTED ? "aborted or freed" : "torn down");
        hc_coll_finish(op, status);
    }
    if (!release) {
        hc_coll_break(comm, status, status == HCOMM_ERR_REVOKED ? "the communicator was revoked"
                                                                : "the communicator was aborted");
        return; /* the state stays until hcomm_comm_free destroys the comm */
    }
    if (cc->active)
        hc_list_del(&cc->active_link);
    if (cc->node)
        hc_coll_node_free(cc->node);
    hc_coll_shrink_free(cc->shrink);
    hc_coll_topo_free(cc);
    free(cc);
    comm->coll_priv = NULL;
}


hcomm_status_t hc_coll_init(void)
{
    hc_reduce_init();
    hc_list_init(&hc_coll_active);
    hc_coll_heard_cause = -1; /* a failure of an earlier hcomm_init's job */
    static const hc_coll_ops_t ops = {.progress = hc_coll_progress,
                                      .cancel = hc_coll_cancel,
                                      .explain = hc_coll_explain,
                                      .conflict = hc_coll_conflict,
                                      .stray = hc_coll_stray,
                                      .probe = hc_coll_probe,
                                      .shrink = hc_coll_shrink_frame,
                                      .comm_free = hc_coll_comm_free,
                                      .gave_up = hc_coll_gave_up,
                                      .node_heard = hc_coll_node_heard};
    hc_core_register_coll(&ops);
    return HCOMM_OK;
}

void hc_coll_fini(void)
{
    /* Queued collectives are failed by hc_comm_destroy through the hook. */
    hc_list_t *pos, *tmp;
    for (pos = hc_ctx.comms.next; pos != &hc_ctx.comms; pos = pos->next) {
        struct hcomm_comm *comm = hc_container_of(pos, struct hcomm_comm, link);
        hc_coll_comm_free(comm, HCOMM_ERR_ABORTED, true);
    }
    (void)tmp;
    while (hc_coll_op_cache) {
        hc_coll_op_t *op = hc_coll_op_cache;
        hc_coll_op_cache = *(hc_coll_op_t **)op;
        free(op);
    }
    hc_core_register_coll(NULL);
}

/* Runs a blocking collective to completion on the caller's stack, outside
 * the queues: for small node collectives, whose whole cost is this path.
 * Only used when nothing is queued on the communicator, so issue order is
 * kept. Progress of everything else, liveness, aborts and the deadline are
 * checked every 64 polls, as hc_request_wait does. */
hcomm_status_t hc_coll_run_inline(hc_coll_op_t *op, const char *fn)
{
    struct hcomm_comm *comm = op->comm;
    uint64_t deadline = 0, start = 0, next_warn = 0;
    hc_backoff_t backoff = {0};
    hc_coll_comm_t *cc = comm->coll_priv;
    if (cc && cc->node)
        hc_coll_node_started(cc->node, op->seq);
    hc_wait_state_t outer = hc_ctx.waiting;
    for (unsigned it = 1;; it++) {
        hc_step_t rc = op->step(op);
        if (HC_LIKELY(hc_step_ok(rc) && !op->error)) {
            if (HC_UNLIKELY(start != 0))
                hc_ctx.waiting = outer;
            return HCOMM_OK;
        }
        hcomm_status_t st = HCOMM_OK;
        if (op->error && rc.st == HCOMM_OK)
            rc = hc_step_fail(op->error);
        if (rc.st != HCOMM_OK) {
            st = rc.st;
        } else if ((it & 63) == 0) {
            hc_progress();
            hc_progress_slow();
            int dead = hc_coll_failed_member(comm);
            uint64_t now = hc_time_ns();
            if (!deadline)
                deadline = now + (uint64_t)(hc_cfg.timeout * 1e9);
            if (!start) {
                start = now;
                hc_ctx.waiting = (hc_wait_state_t){NULL, op, fn, now};
            }
            hc_hang_check(NULL, op, fn, start, now, &next_warn);
            if (hc_comm_aborted(comm)) {
                hc_comm_handle_abort(comm);
                st = hc_comm_abort_error(comm, fn);
            } else if (dead >= 0) {
                st = hc_peer_error(dead, fn);
            } else if (cc && cc->gave_up_rank >= 0) {
                st = hc_coll_gave_up_error(cc, fn);
            } else if (cc && cc->mismatch_rank >= 0) {
                st = hc_error(HCOMM_ERR_INVALID, "%s", cc->mismatch_why);
            } else if (now > deadline) {
                char why[2048];
                hc_explain_t e = {.buf = why, .len = sizeof(why)};
                hc_wait_explain(NULL, op, fn, now - start, &e);
                st = hc_error(HCOMM_ERR_TIMEOUT, "%s: timed out after %g s (HCOMM_TIMEOUT): %s", fn,
                              hc_cfg.timeout, why);
            }
        }
        if (HC_UNLIKELY(st != HCOMM_OK)) {
            if (start)
                hc_ctx.waiting = outer;
            hc_coll_break(comm, st, hc_error_last());
            return st;
        }
        hc_backoff_step(&backoff);
    }
}

/* ---- helpers for p2p algorithms ---------------------------------------------- */


hcomm_status_t hc_coll_isend(hc_coll_op_t *op, const void *buf, size_t len, int peer)
{
    struct hcomm_request *req;
    hcomm_status_t st = hc_p2p_isend(op->comm, op->comm->ctx_id | HC_CTX_COLL, buf, len, peer,
                                     hc_coll_tag(op), &req);
    if (st != HCOMM_OK)
        return st;
    op->reqs[op->nreqs++] = req;
    return HCOMM_OK;
}

hcomm_status_t hc_coll_irecv(hc_coll_op_t *op, void *buf, size_t len, int peer)
{
    struct hcomm_request *req;
    hcomm_status_t st = hc_p2p_irecv(op->comm, op->comm->ctx_id | HC_CTX_COLL, buf, len, peer,
                                     hc_coll_tag(op), &req);
    if (st != HCOMM_OK)
        return st;
    op->reqs[op->nreqs++] = req;
    return HCOMM_OK;
}

hc_step_t hc_coll_reqs_test(hc_coll_op_t *op)
{
    for (int i = 0; i < op->nreqs; i++)
        if (!op->reqs[i]->done)
            return HC_STEP_PENDING;
    hcomm_status_t st = HCOMM_OK;
    for (int i = 0; i < op->nreqs; i++) {
        if (op->reqs[i]->status != HCOMM_OK && st == HCOMM_OK)
            st = op->reqs[i]->status;
        hc_request_free(op->reqs[i]);
    }
    op->nreqs = 0;
    return st == HCOMM_OK ? HC_STEP_DONE : hc_step_fail(st);
}

/* ---- collectives on internal communicators (hierarchical algorithms) ---------------------- */

void hc_coll_op_set(hc_coll_op_t *op, const hc_coll_args_t *a, struct hcomm_comm *comm)
{
    op->comm = comm;
    op->kind = a->kind;
    op->sbuf = a->sbuf;
    op->rbuf = a->rbuf;
    op->count = a->count;
    op->dtype = a->dtype;
    op->op = a->op;
    op->root = a->root;
    op->esize = hc_dtype_size(a->dtype);
    op->bytes = a->bytes;
    op->smem = a->smem;
    op->rmem = a->rmem;
}

hcomm_status_t hc_coll_op_create(const hc_coll_args_t *a, struct hcomm_comm *comm,
                                 hc_coll_op_t **op_p)
{
    struct hcomm_request *req = hc_request_alloc(HC_REQ_COLL);
    hc_coll_op_t *op = hc_coll_op_alloc();
    if (HC_UNLIKELY(!req || !op)) {
        if (req) hc_request_free(req);
        if (op) hc_coll_op_release(op);
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory for the operation",
                        hc_coll_name(a->kind));
    }
    req->comm = comm;
    req->peer = -1;
    req->coll = op;
    op->req = req;
    hc_coll_op_set(op, a, comm);
    *op_p = op;
    return HCOMM_OK;
}

/* A child collective runs through the same post path as any other
 * (hc_coll_launch: HCOMM_ALGO and its fallback, the explanation, the
 * statistics), on its internal communicator's queue. */
hcomm_status_t hc_coll_child_start(hc_coll_op_t *parent, struct hcomm_comm *comm, hc_coll_kind_t kind,
                                   const void *sbuf, void *rbuf, size_t count, hcomm_op_t rop, int root,
                                   struct hcomm_request **req_p)
{
    const char *fn = hc_coll_name(parent->kind);
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (!cc) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    if (cc->mismatch_rank >= 0 && !cc->broken) {
        hc_error(HCOMM_ERR_INVALID, "%s", cc->mismatch_why);
        hc_coll_break(comm, HCOMM_ERR_INVALID, hc_error_last());
    }
    if (cc->broken)
        return hc_error(cc->broken_status, "%s (%s): its internal communicator broke earlier (%s)", fn,
                        parent->algo, cc->broken_why);
    /* allgather, reduce_scatter: count and bytes per rank block */
    hc_coll_args_t a = {.kind = kind, .sbuf = sbuf, .rbuf = rbuf, .count = count,
                        .bytes = count * parent->esize, .dtype = parent->dtype, .op = rop,
                        .root = root};
    hc_coll_op_t *op;
    hcomm_status_t st = hc_coll_op_create(&a, comm, &op);
    if (st != HCOMM_OK) return st;
    struct hcomm_request *req = op->req;
    op->parent = parent;
    if ((st = hc_coll_launch(op)) != HCOMM_OK) {
        hc_request_free(req);
        return st;
    }
    *req_p = req;
    return HCOMM_OK;
}
