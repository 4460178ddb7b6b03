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

hcomm_status_t hc_coll_gave_up_error(const hc_coll_comm_t *cc, const char *what)
{
    int c = cc->gave_up_cause;
    if (c >= 0 && c < hc_ctx.size) {
        const hc_peer_t *p = &hc_ctx.peers[c];
        return hc_error(cc->gave_up_status,
                        "%s: peer rank %d (world) failed%s%s (communicator rank %d gave up on "
                        "this communicator because of it)",
                        what, c, p->failed && p->fail_why[0] ? ": " : "",
                        p->failed ? p->fail_why : "", cc->gave_up_rank);
    }
    return hc_error(cc->gave_up_status,
                    "%s: communicator rank %d gave up on this communicator (%s there)", what,
                    cc->gave_up_rank, hcomm_strerror(cc->gave_up_status));
}

static hc_list_t hc_coll_active = {&hc_coll_active, &hc_coll_active};
static hc_coll_op_t *hc_coll_op_cache;

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

int hc_coll_failed_member(struct hcomm_comm *comm)
{
    if (HC_LIKELY(!hc_core_any_failed()))
        return -1;
    /* the member that failed first (the others may have left after it:
     * hc_peer_error names the cause) */
    int best = -1;
    for (int r = 0; r < comm->size; r++) {
        int w = comm->world_ranks[r];
        if (hc_core_peer_failed(w) &&
            (best < 0 || hc_ctx.peers[w].fail_ns < hc_ctx.peers[best].fail_ns))
            best = w;
    }
    return best;
}

void hc_coll_break(struct hcomm_comm *comm, hcomm_status_t status, const char *why)
{
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (cc && !cc->broken) {
        cc->broken = true;
        cc->broken_status = status;
        /* The other members' collectives cannot complete either: tell
         * them (a dead peer they see for themselves). */
        if (status != HCOMM_ERR_PEER_FAILED && cc->node)
            hc_coll_node_give_up(cc->node, status, -1);
        if (status != HCOMM_ERR_PEER_FAILED && comm->size > 1)
            hc_p2p_give_up(comm, status, -1);
        snprintf(cc->broken_why, sizeof(cc->broken_why), "%s", why);
    }
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
static void hc_coll_finish(hc_coll_op_t *op, hcomm_status_t status)
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

static hcomm_status_t hc_coll_check_ahead(hc_coll_op_t *op, hc_coll_comm_t *cc);
static void hc_coll_children_give_up(struct hcomm_comm *comm, int dead);
static void hc_coll_check_failures(void);
static void hc_coll_maybe_probe(hc_coll_op_t *op);

/* Runs the head of comm's queue until it has to wait. */
static int hc_coll_run(struct hcomm_comm *comm)
{
    int done = 0;
    while (!hc_list_empty(&comm->coll_queue)) {
        hc_coll_op_t *op = hc_container_of(comm->coll_queue.next, hc_coll_op_t, link);
        if (HC_UNLIKELY(!op->started)) {
            /* every earlier collective here has completed: its messages
             * are out (hc_coll_check_ahead relies on it) */
            op->started = true;
            hc_coll_comm_t *ccs = comm->coll_priv;
            if (ccs->node)
                hc_coll_node_started(ccs->node, op->seq);
        }
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
                hc_coll_break(comm, st, hc_error_last());
                op->draining = true;
                op->drain_status = st;
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
                break;
            char what[64];
            snprintf(what, sizeof(what), "hcomm collective (%s)", op->algo);
            if (rc.st != HCOMM_OK)
                ; /* hc_coll_check_ahead's */
            else if (dead >= 0)
                rc = hc_step_fail(hc_peer_error(dead, what));
            else
                rc = hc_step_fail(hc_coll_gave_up_error(cc, what));
        }
        if (HC_UNLIKELY(rc.st != HCOMM_OK) && hc_coll_op_inflight(op)) {
            /* Failed while a driver still holds some of its sends, which
             * point into the user's buffers and the op's scratch: the op
             * ends when they are out (the peers learn of the failure now). */
            hc_coll_break(comm, rc.st, hc_error_last());
            op->draining = true;
            op->drain_status = rc.st;
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

static inline int32_t hc_coll_tag(const hc_coll_op_t *op)
{
    return (int32_t)(((uint32_t)op->seq & HC_COLL_TAG_SEQ_MASK) | (op->sig & 0x7fff) << 16);
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

/* A collective that waits for peers' messages long (HC_COLL_PROBE_AFTER_NS,
 * then every HC_COLL_PROBE_EVERY_NS) asks each of them whether it agrees
 * (HC_FRAME_COLL_PROBE): ranks that disagree on a collective may all wait
 * for each other with no message in flight (two ranks that both take
 * themselves for the root), which nothing else would end before the
 * timeout. A peer that is only slow costs one small frame a second. */
#define HC_COLL_PROBE_AFTER_NS 200000000ull
#define HC_COLL_PROBE_EVERY_NS 1000000000ull
static HC_NOINLINE void hc_coll_maybe_probe(hc_coll_op_t *op)
{
    uint64_t now = hc_time_ns();
    if (!op->probe_at) {
        op->probe_at = now + HC_COLL_PROBE_AFTER_NS;
        return;
    }
    if (now < op->probe_at)
        return;
    op->probe_at = now + HC_COLL_PROBE_EVERY_NS;
    int32_t tag = hc_coll_tag(op);
    for (int i = 0; i < op->nreqs; i++) {
        struct hcomm_request *r = op->reqs[i];
        bool dup = false; /* once per peer */
        for (int k = 0; k < i && !dup; k++)
            dup = op->reqs[k]->peer == r->peer && !op->reqs[k]->done &&
                  op->reqs[k]->kind == HC_REQ_RECV;
        if (!r->done && r->kind == HC_REQ_RECV && r->peer >= 0 && !dup)
            hc_p2p_coll_probe(op->comm, r->peer, tag);
    }
}

/* A point-to-point collective on a communicator whose ranks share a node
 * region waits for a peer's message, and that peer has started a later
 * collective there: a later one whose messages travel by node flags, not
 * frames, which the "went past" check of core/p2p.c cannot see. Seen twice,
 * with progress passes in between (a message sent before the peer moved on
 * has been delivered by then), it proves the peer will not send it. */
static HC_NOINLINE hcomm_status_t hc_coll_check_ahead(hc_coll_op_t *op, hc_coll_comm_t *cc)
{
    for (int i = 0; i < op->nreqs; i++) {
        struct hcomm_request *r = op->reqs[i];
        if (r->done || r->kind != HC_REQ_RECV || r->peer < 0)
            continue;
        if (!hc_coll_node_ahead(cc->node, r->peer, op->seq)) {
            if (op->ahead_suspect == r->peer + 1)
                op->ahead_suspect = 0;
            continue;
        }
        if (op->ahead_suspect != r->peer + 1) {
            op->ahead_suspect = r->peer + 1;
            return HCOMM_OK;
        }
        return hc_error(HCOMM_ERR_INVALID,
                        "%s #%llu: communicator rank %d went past this collective without sending "
                        "this rank its part (it has started a later collective): it called this "
                        "one with other arguments (root, count, dtype or op, or an earlier "
                        "collective on this communicator differed)",
                        hc_coll_name(op->kind), (unsigned long long)op->seq, r->peer);
    }
    return HCOMM_OK;
}

hcomm_status_t hc_coll_comm_usable(struct hcomm_comm *comm, hc_coll_comm_t *cc, const char *fn)
{
    if (HC_UNLIKELY(cc->mismatch_rank >= 0) && !cc->broken) {
        hc_error(HCOMM_ERR_INVALID, "%s", cc->mismatch_why);
        hc_coll_break(comm, HCOMM_ERR_INVALID, hc_error_last());
    }
    if (HC_UNLIKELY(cc->broken))
        return hc_error(cc->broken_status, "%s: communicator unusable after an earlier "
                                           "collective failed (%s)", fn, cc->broken_why);
    int dead = hc_coll_failed_member(comm);
    if (HC_UNLIKELY(dead >= 0)) {
        /* members may wait in its derived communicators for this rank's
         * part of a collective it now refuses: they are told */
        hc_coll_children_give_up(comm, dead);
        return hc_peer_error(dead, fn);
    }
    if (HC_UNLIKELY(cc->gave_up_rank >= 0)) {
        /* Refused here: the members that may wait for this rank in it
         * (on node flags, which a give-up frame does not reach) learn it
         * from this rank too. */
        hcomm_status_t st = hc_coll_gave_up_error(cc, fn);
        hc_coll_break(comm, st, hc_error_last());
        return st;
    }
    return HCOMM_OK;
}

hcomm_status_t hc_coll_start(hc_coll_op_t *op)
{
    struct hcomm_comm *comm = op->comm;
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (!cc)
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm collective: no memory");
    hc_coll_number(op);
    hc_list_push_back(&comm->coll_queue, &op->link);
    if (!cc->active) {
        cc->active = true;
        hc_list_push_back(&hc_coll_active, &cc->active_link);
    }
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

static void hc_coll_explain_comm(const struct hcomm_comm *comm, hc_explain_t *e)
{
    if (comm->is_world)
        hc_explain_add(e, "the world communicator (%d ranks)", comm->size);
    else if (comm->ctx_id & HC_CTX_SUB)
        hc_explain_add(e, "an internal communicator of %d ranks (ctx 0x%x)", comm->size,
                       comm->ctx_id);
    else
        hc_explain_add(e, "communicator 0x%x (%d ranks)", comm->ctx_id, comm->size);
}

static void hc_coll_explain_call(const hc_coll_op_t *op, hc_explain_t *e)
{
    hc_explain_add(e, "%s(", hc_coll_name(op->kind));
    if (op->kind != HC_COLL_BARRIER)
        hc_explain_add(e, "count %zu, %s", op->count, hc_dtype_name(op->dtype));
    if (op->kind == HC_COLL_ALLREDUCE || op->kind == HC_COLL_REDUCE ||
        op->kind == HC_COLL_REDUCE_SCATTER || op->kind == HC_COLL_REDUCE_SCATTERV)
        hc_explain_add(e, ", %s", hc_op_name(op->op));
    if (op->kind == HC_COLL_REDUCE || op->kind == HC_COLL_BROADCAST ||
        op->kind == HC_COLL_GATHER || op->kind == HC_COLL_SCATTER)
        hc_explain_add(e, ", root %d", op->root);
    hc_explain_add(e, ") #%llu on ", (unsigned long long)op->seq);
    hc_coll_explain_comm(op->comm, e);
}

static void hc_coll_explain_op(const hc_coll_op_t *op, hc_explain_t *e, int depth)
{
    hc_coll_explain_call(op, e);
    hc_explain_add(e, ", algorithm %s, step: state %d, phase %d, round %d", op->algo ? op->algo : "?",
                   op->state, op->phase, op->round);
    if (op->nrounds)
        hc_explain_add(e, " of %d", op->nrounds);
    bool any = false;
    for (int i = 0; i < op->nreqs; i++) {
        if (op->reqs[i]->done)
            continue;
        hc_explain_add(e, any ? "; and " : "; waiting for ");
        any = true;
        hc_p2p_explain(op->reqs[i], e);
    }
    if (any)
        return;
    /* a child collective (hierarchical algorithms) */
    hc_list_t *pos;
    for (pos = hc_coll_active.next; pos != &hc_coll_active && depth < 4; pos = pos->next) {
        hc_coll_comm_t *cc = hc_container_of(pos, hc_coll_comm_t, active_link);
        if (hc_list_empty(&cc->comm->coll_queue))
            continue;
        const hc_coll_op_t *head = hc_container_of(cc->comm->coll_queue.next, hc_coll_op_t, link);
        if (head->parent != op)
            continue;
        hc_explain_add(e, "; inside it, ");
        hc_coll_explain_op(head, e, depth + 1);
        return;
    }
    if (op->algo && !strncmp(op->algo, "node", 4) && op->round >= 0 && op->round < op->comm->size) {
        int w = op->comm->world_ranks[op->round];
        hc_explain_wait(e, w);
        if (op->comm->is_world)
            hc_explain_add(e, "; waiting for rank %d: its flag in the node's shared region (it "
                              "has not reached this step)",
                           op->round);
        else
            hc_explain_add(e, "; waiting for rank %d (world rank %d): its flag in the node's "
                              "shared region (it has not reached this step)",
                           op->round, w);
        return;
    }
    hc_explain_add(e, "; nothing outstanding (between steps)");
}

static void hc_coll_explain(struct hcomm_request *req, const struct hc_coll_op *op,
                            hc_explain_t *e)
{
    if (!op && req)
        op = req->coll;
    if (!op) {
        hc_explain_add(e, "a collective that has ended");
        return;
    }
    const struct hcomm_comm *comm = op->comm;
    if (!hc_list_empty(&comm->coll_queue) && comm->coll_queue.next != &op->link) {
        const hc_coll_op_t *head = hc_container_of(comm->coll_queue.next, hc_coll_op_t, link);
        hc_coll_explain_call(op, e);
        hc_explain_add(e, ", queued behind ");
        op = head;
    }
    hc_coll_explain_op(op, e, 0);
}

/* The low bits of a signature are the kind (hc_coll_sig): a conflict names it. */
static void hc_coll_conflict(uint32_t ctx_id, int32_t mine, int32_t theirs, int peer, char *buf,
                             size_t len)
{
    hc_coll_kind_t their_kind = (hc_coll_kind_t)(((uint32_t)theirs >> 16) & HC_COLL_SIG_KIND_MASK);
    uint64_t seq = (uint32_t)mine & HC_COLL_TAG_SEQ_MASK;
    struct hcomm_comm *comm = hc_comm_by_ctx(ctx_id & ~HC_CTX_COLL);
    const hc_coll_op_t *op = NULL;
    hc_list_t *pos;
    for (pos = comm ? comm->coll_queue.next : NULL; pos && pos != &comm->coll_queue;
         pos = pos->next) {
        const hc_coll_op_t *o = hc_container_of(pos, hc_coll_op_t, link);
        if ((o->seq & HC_COLL_TAG_SEQ_MASK) == seq) {
            op = o;
            break;
        }
    }
    char mine_s[256] = "";
    if (op) {
        hc_explain_t e = {.buf = mine_s, .len = sizeof(mine_s)};
        hc_coll_explain_call(op, &e);
    } else {
        snprintf(mine_s, sizeof(mine_s), "collective #%llu", (unsigned long long)seq);
    }
    int mk = (int)(((uint32_t)mine >> 16) & HC_COLL_SIG_KIND_MASK);
    uint16_t their_seq = (uint16_t)theirs;
    if (their_seq != (uint16_t)seq)
        snprintf(buf, len,
                 "%s: communicator rank %d went past this collective without sending this rank "
                 "its part (its next message is of a later %s, #%u): it called this one with "
                 "other arguments (root, count, dtype or op, or an earlier collective on this "
                 "communicator differed)",
                 mine_s, peer, hc_coll_name(their_kind), (unsigned)their_seq);
    else if ((int)their_kind != mk && their_kind < HC_COLL_KIND_COUNT)
        snprintf(buf, len,
                 "%s: communicator rank %d called %s at this point of the collective order "
                 "(a rank skipped or added a collective, or called another one)",
                 mine_s, peer, hc_coll_name(their_kind));
    else
        snprintf(buf, len,
                 "%s: communicator rank %d called %s here with other arguments: its count, "
                 "dtype, op or root differ from this call's, or from an earlier collective's on "
                 "this communicator (ranks compare a hash of the four, chained, not which one); "
                 "HCOMM_CHECK=1 names the field and both values",
                 mine_s, peer, hc_coll_name(op ? op->kind : their_kind));
}

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

/* A collective message no posted receive took (core/p2p.c, before it is
 * queued as unexpected). Every collective message is taken by the
 * collective it belongs to, so one of a collective this rank completed, or
 * of the running one with another signature, proves the ranks disagree:
 * recorded here (this runs inside a driver's progress), acted on by the
 * engine (hc_coll_run, hc_coll_progress, hc_coll_comm_usable). A message
 * of a later collective is the sender being ahead: normal. */
static void hc_coll_stray(struct hcomm_comm *comm, int from, int32_t tag)
{
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (!cc || cc->broken || cc->mismatch_rank >= 0 || from < 0)
        return;
    const hc_coll_op_t *head = hc_list_empty(&comm->coll_queue)
                                   ? NULL
                                   : hc_container_of(comm->coll_queue.next, hc_coll_op_t, link);
    uint64_t next = head ? head->seq : comm->coll_seq; /* the lowest not completed here */
    uint16_t seq = (uint16_t)(uint32_t)tag;
    int16_t d = (int16_t)(uint16_t)(seq - (uint16_t)next);
    hc_coll_kind_t tk = (hc_coll_kind_t)(((uint32_t)tag >> 16) & HC_COLL_SIG_KIND_MASK);
    if (d > 0 || (d == 0 && (!head || (((uint32_t)tag >> 16) & 0x7fff) == (head->sig & 0x7fff))))
        return;
    if (d == 0) /* in the words of a receive that meets it */
        hc_coll_conflict(comm->ctx_id | HC_CTX_COLL, hc_coll_tag(head), tag, from,
                         cc->mismatch_why, sizeof(cc->mismatch_why));
    else
        snprintf(cc->mismatch_why, sizeof(cc->mismatch_why),
                 "collective #%u on this communicator: communicator rank %d sent this rank a "
                 "message of it (%s) after this rank had completed it without that message: "
                 "the ranks called it with other arguments (root, count, dtype or op, or an "
                 "earlier collective differed)",
                 (unsigned)seq, from, hc_coll_name(tk));
    cc->mismatch_rank = from;
    if (!cc->active) { /* the engine acts on it at the next progress pass */
        cc->active = true;
        hc_list_push_back(&hc_coll_active, &cc->active_link);
    }
}

/* HC_FRAME_COLL_PROBE: comm rank `from` waits for this rank in its
 * collective `tag`. This rank's own collective of that sequence (running,
 * or one of the last eight completed) with another signature proves they
 * disagree: recorded as hc_coll_stray records, and the communicator
 * breaks, which tells the prober. Behind it, or in agreement: nothing. */
static void hc_coll_probe(struct hcomm_comm *comm, int from, int32_t tag)
{
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (!cc || cc->broken || cc->mismatch_rank >= 0)
        return;
    uint16_t seq = (uint16_t)(uint32_t)tag;
    uint32_t theirs = ((uint32_t)tag >> 16) & 0x7fff;
    const hc_coll_op_t *head = hc_list_empty(&comm->coll_queue)
                                   ? NULL
                                   : hc_container_of(comm->coll_queue.next, hc_coll_op_t, link);
    uint64_t next = head ? head->seq : comm->coll_seq;
    int16_t d = (int16_t)(uint16_t)(seq - (uint16_t)next);
    uint32_t mine;
    hc_coll_kind_t mk;
    if (d > 0 || (d == 0 && !head))
        return; /* this rank has not reached it yet */
    if (d == 0) {
        mine = head->sig;
    } else {
        int k = seq & 7;
        if ((uint16_t)cc->sig_hist[k].seq != seq || cc->sig_hist[k].seq >= next)
            return; /* too old to tell */
        mine = cc->sig_hist[k].sig;
    }
    if ((mine & 0x7fff) == theirs)
        return;
    mk = (hc_coll_kind_t)(mine & HC_COLL_SIG_KIND_MASK);
    snprintf(cc->mismatch_why, sizeof(cc->mismatch_why),
             "%s #%u: communicator rank %d waits for this rank in it, but called %s there with "
             "other arguments (root, count, dtype or op, or an earlier collective on this "
             "communicator differed)",
             hc_coll_name(mk), (unsigned)seq, from,
             hc_coll_name((hc_coll_kind_t)(theirs & HC_COLL_SIG_KIND_MASK)));
    cc->mismatch_rank = from;
    if (!cc->active) {
        cc->active = true;
        hc_list_push_back(&hc_coll_active, &cc->active_link);
    }
}

/* HC_FRAME_GIVE_UP from communicator rank `from`: the queued collectives
 * fail at their next step (not here: this runs inside a driver's progress). */
static void hc_coll_gave_up(struct hcomm_comm *comm, int from, hcomm_status_t status, int cause)
{
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (!cc || cc->gave_up_rank >= 0 || from < 0)
        return;
    if (status >= 0 || status < HCOMM_ERR_INTERNAL)
        status = HCOMM_ERR_PEER_FAILED;
    cc->gave_up_status = status;
    cc->gave_up_rank = from;
    cc->gave_up_cause = cause >= 0 && cause < hc_ctx.size ? cause : -1;
}


hcomm_status_t hc_coll_init(void)
{
    hc_reduce_init();
    hc_list_init(&hc_coll_active);
    static const hc_coll_ops_t ops = {.progress = hc_coll_progress,
                                      .cancel = hc_coll_cancel,
                                      .explain = hc_coll_explain,
                                      .conflict = hc_coll_conflict,
                                      .stray = hc_coll_stray,
                                      .probe = hc_coll_probe,
                                      .shrink = hc_coll_shrink_frame,
                                      .comm_free = hc_coll_comm_free,
                                      .gave_up = hc_coll_gave_up};
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

hcomm_status_t hc_coll_op_create(hc_coll_kind_t kind, const void *sbuf, void *rbuf, size_t count,
                                 size_t bytes, hcomm_dtype_t dtype, hcomm_op_t rop, int root,
                                 struct hcomm_comm *comm, hc_coll_op_t **op_p)
{
    struct hcomm_request *req = hc_request_alloc(HC_REQ_COLL);
    hc_coll_op_t *op = hc_coll_op_alloc();
    if (HC_UNLIKELY(!req || !op)) {
        if (req) hc_request_free(req);
        if (op) hc_coll_op_release(op);
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory for the operation", hc_coll_name(kind));
    }
    req->comm = comm;
    req->peer = -1;
    req->coll = op;
    op->req = req;
    op->comm = comm;
    op->kind = kind;
    op->sbuf = sbuf;
    op->rbuf = rbuf;
    op->count = count;
    op->dtype = dtype;
    op->op = rop;
    op->root = root;
    op->esize = hc_dtype_size(dtype);
    op->bytes = bytes;
    *op_p = op;
    return HCOMM_OK;
}

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
    hc_coll_op_t *op;
    hcomm_status_t st = hc_coll_op_create(kind, sbuf, rbuf, count, count * parent->esize, parent->dtype,
                                          rop, root, comm, &op);
    if (st != HCOMM_OK) return st;
    struct hcomm_request *req = op->req; /* allgather, reduce_scatter: bytes per rank block */
    op->parent = parent;
    op->step = comm->size == 1 ? NULL : hc_coll_algo_pick(op, NULL, hc_coll_node_usable(comm));
    if (!op->step) {
        req->coll = NULL;
        hc_coll_op_release(op);
        hc_request_free(req);
        return hc_error(HCOMM_ERR_INTERNAL, "%s (%s): no algorithm for its %s on %d ranks", fn,
                        parent->algo, hc_coll_name(kind), comm->size);
    }
    hc_log_debug("%s (%s): its %s of %zu bytes on %d ranks -> algorithm %s", fn, parent->algo,
                 hc_coll_name(kind), op->bytes, comm->size, op->algo);
    st = hc_coll_start(op);
    if (st != HCOMM_OK) {
        req->coll = NULL;
        hc_coll_op_release(op);
        hc_request_free(req);
        return st;
    }
    *req_p = req;
    return HCOMM_OK;
}

/* comm is a derived communicator (a hierarchical collective's node or
 * rail communicator) whose parent failed with status, because of the world
 * rank `cause` (or -1): it breaks, its members are told (with the cause: a
 * dead peer that is no member here is not seen by them otherwise), and
 * what is queued on it ends. */
static void hc_coll_derived_fail(struct hcomm_comm *comm, hcomm_status_t status, int cause,
                                 const char *why)
{
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    bool was_broken = cc && cc->broken;
    hc_coll_break(comm, status, why);
    if (cc && !was_broken && status == HCOMM_ERR_PEER_FAILED) {
        if (cc->node)
            hc_coll_node_give_up(cc->node, status, cause);
        if (comm->size > 1)
            hc_p2p_give_up(comm, status, cause);
    }
    while (!hc_list_empty(&comm->coll_queue)) {
        hc_error(status, "%s", why);
        hc_coll_finish(hc_container_of(comm->coll_queue.next, hc_coll_op_t, link), status);
    }
}

/* The words for a derived communicator's failure: the parent's own error
 * (what the caller reads), naming the failed peer when there is one. */
static void hc_coll_derived_why(hcomm_status_t status, int cause, const char *parent_why,
                                char *buf, size_t len)
{
    if (status == HCOMM_ERR_PEER_FAILED && cause >= 0 && !strstr(parent_why, "peer rank "))
        snprintf(buf, len, "the collective it was part of failed: peer rank %d (world) failed (%s)",
                 cause, parent_why);
    else
        snprintf(buf, len, "the collective it was part of failed: %s", parent_why);
}

void hc_coll_child_end(struct hcomm_request *req, hcomm_status_t status)
{
    if (!req) return;
    if (!req->done && req->coll) {
        /* The parent failed with status (a dead peer elsewhere, a
         * timeout): the members of this child's comm learn it with that
         * status and the parent's reason, not a bare "aborted". */
        if (status == HCOMM_OK || status == HCOMM_IN_PROGRESS) status = HCOMM_ERR_ABORTED;
        char saved[512], why[600];
        snprintf(saved, sizeof(saved), "%s", hc_error_last());
        int cause = status == HCOMM_ERR_PEER_FAILED ? hc_core_first_failed() : -1;
        hc_coll_derived_why(status, cause, saved, why, sizeof(why));
        hc_coll_derived_fail(req->coll->comm, status, cause, why);
        hc_error(status, "%s", saved); /* the parent's error stays the caller's */
    }
    hc_request_free(req);
}

/* A member of comm has failed: its derived communicators (hier_node,
 * hier_rail), whose members may not include the failed one, give up now,
 * so that a member waiting in one of them (its part of a hierarchical
 * collective this rank will never start: it refuses comm's collectives
 * from now on) learns it at once instead of at the timeout. */
static void hc_coll_children_give_up(struct hcomm_comm *comm, int dead)
{
    hc_coll_comm_t *cc = comm->coll_priv;
    if (!cc || (!cc->hier_node && !cc->hier_rail))
        return;
    struct hcomm_comm *subs[2] = {cc->hier_node, cc->hier_rail};
    char saved[512], why[600];
    snprintf(saved, sizeof(saved), "%s", hc_error_last());
    hcomm_status_t st = hc_peer_error(dead, "its parent communicator");
    hc_coll_derived_why(HCOMM_ERR_PEER_FAILED, dead, hc_error_last(), why, sizeof(why));
    for (int i = 0; i < 2; i++) {
        hc_coll_comm_t *sc = subs[i] ? subs[i]->coll_priv : NULL;
        if (subs[i] && !(sc && sc->broken))
            hc_coll_derived_fail(subs[i], st, hc_core_first_failed(), why);
    }
    hc_error(st, "%s", saved);
}

/* Called from every progress pass: when a peer failed since the last
 * look, every communicator with a failed member lets its derived ones go. */
static void hc_coll_check_failures(void)
{
    static int seen;
    if (HC_LIKELY(hc_ctx.nfailed == seen))
        return;
    seen = hc_ctx.nfailed;
    hc_list_t *pos;
    for (pos = hc_ctx.comms.next; pos != &hc_ctx.comms; pos = pos->next) {
        struct hcomm_comm *c = hc_container_of(pos, struct hcomm_comm, link);
        int dead = c->coll_priv ? hc_coll_failed_member(c) : -1;
        if (dead >= 0)
            hc_coll_children_give_up(c, dead);
    }
}
