/*
 * Failures and disagreements, as the collective engine sees them: a
 * communicator that breaks (and tells its members, with the cause), the
 * checks before a collective may start, what a stray or probing message
 * proves (ranks that disagree on a collective), a peer that went past a
 * collective on node flags, the failed member to name (the first to fail),
 * and derived communicators (hierarchical algorithms' node and rail ones)
 * given up when their parent's member fails. docs/faults.md and
 * docs/observability.md say what users see of it.
 *
 * The frame hooks (stray, probe, gave_up) run inside a driver's progress:
 * they only record; the engine acts at its next pass (coll.c).
 */
#include "coll/coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hc_coll_heard_cause = -1;

hcomm_status_t hc_coll_gave_up_error(const hc_coll_comm_t *cc, const char *what)
{
    int c = cc->gave_up_cause >= 0 ? cc->gave_up_cause : hc_coll_known_cause();
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
         * them (a dead peer they see for themselves). A revoke's give-up
         * names the rank that revoked (hc_coll_gave_up): it may reach a
         * member before that rank's own REVOKE does. */
        int by = status == HCOMM_ERR_REVOKED ? __atomic_load_n(&comm->revoked_by, __ATOMIC_RELAXED)
                                             : -1;
        if (status != HCOMM_ERR_PEER_FAILED && cc->node)
            hc_coll_node_give_up(cc->node, status, by);
        if (status != HCOMM_ERR_PEER_FAILED && comm->size > 1)
            hc_p2p_give_up(comm, status, by);
        snprintf(cc->broken_why, sizeof(cc->broken_why), "%s", why);
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
HC_NOINLINE void hc_coll_maybe_probe(hc_coll_op_t *op)
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
HC_NOINLINE hcomm_status_t hc_coll_check_ahead(hc_coll_op_t *op, hc_coll_comm_t *cc)
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

/* A collective message no posted receive took (core/p2p.c, before it is
 * queued as unexpected). Every collective message is taken by the
 * collective it belongs to, so one of a collective this rank completed, or
 * of the running one with another signature, proves the ranks disagree:
 * recorded here (this runs inside a driver's progress), acted on by the
 * engine (hc_coll_run, hc_coll_progress, hc_coll_comm_usable). A message
 * of a later collective is the sender being ahead: normal. */
void hc_coll_stray(struct hcomm_comm *comm, int from, int32_t tag)
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
    hc_coll_activate(cc); /* the engine acts on it at its next progress pass */
}

/* HC_FRAME_COLL_PROBE: comm rank `from` waits for this rank in its
 * collective `tag`. This rank's own collective of that sequence (running,
 * or one of the last eight completed) with another signature proves they
 * disagree: recorded as hc_coll_stray records, and the communicator
 * breaks, which tells the prober. Behind it, or in agreement: nothing. */
void hc_coll_probe(struct hcomm_comm *comm, int from, int32_t tag)
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
    hc_coll_activate(cc);
}

/* HC_FRAME_GIVE_UP from communicator rank `from`: the queued collectives
 * fail at their next step (not here: this runs inside a driver's progress). */
void hc_coll_gave_up(struct hcomm_comm *comm, int from, hcomm_status_t status, int cause)
{
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (!cc || cc->gave_up_rank >= 0 || from < 0)
        return;
    if (!hc_status_is_error(status))
        status = HCOMM_ERR_PEER_FAILED;
    if (status == HCOMM_ERR_REVOKED && cause >= 0 && cause < comm->size) {
        /* `from` gave up because communicator rank `cause` revoked it: the
         * communicator is revoked here too, by that rank (what its own
         * REVOKE, perhaps still on its way, does). */
        hc_comm_revoked(comm, cause);
        return;
    }
    cc->gave_up_status = status;
    cc->gave_up_rank = from;
    cc->gave_up_cause = cause >= 0 && cause < hc_ctx.size ? cause : -1;
    if (cc->gave_up_cause >= 0 && hc_coll_heard_cause < 0)
        hc_coll_heard_cause = cc->gave_up_cause;
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
        int cause = status == HCOMM_ERR_PEER_FAILED ? hc_coll_known_cause() : -1;
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
void hc_coll_children_give_up(struct hcomm_comm *comm, int dead)
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
int hc_coll_failures_seen;

void hc_coll_check_failures_new(void)
{
    hc_coll_failures_seen = hc_ctx.nfailed;
    hc_list_t *pos;
    for (pos = hc_ctx.comms.next; pos != &hc_ctx.comms; pos = pos->next) {
        struct hcomm_comm *c = hc_container_of(pos, struct hcomm_comm, link);
        int dead = c->coll_priv ? hc_coll_failed_member(c) : -1;
        if (dead >= 0)
            hc_coll_children_give_up(c, dead);
    }
}
