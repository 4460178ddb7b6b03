/*
 * The collective engine in words: what a collective waits for (hang
 * reports: the call, its algorithm and step, the ranks and what from them,
 * a hierarchical collective's child inside it) and what a conflicting
 * message says (both calls, named by the kind in the signature's low bits).
 */
#include "coll/coll.h"

#include <stdio.h>
#include <string.h>

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
    /* a child collective (hierarchical algorithms), at the head of its
     * internal communicator's queue */
    hc_list_t *pos;
    for (pos = hc_ctx.comms.next; pos != &hc_ctx.comms && depth < 4; pos = pos->next) {
        struct hcomm_comm *c = hc_container_of(pos, struct hcomm_comm, link);
        if (hc_list_empty(&c->coll_queue))
            continue;
        const hc_coll_op_t *head = hc_container_of(c->coll_queue.next, hc_coll_op_t, link);
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

void hc_coll_explain(struct hcomm_request *req, const struct hc_coll_op *op,
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
void hc_coll_conflict(uint32_t ctx_id, int32_t mine, int32_t theirs, int peer, char *buf,
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
