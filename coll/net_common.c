/*
 * The p2p family's shared helpers (net.h).
 */
#include "coll/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint8_t hc_net_zero;

/* A request of op failed with st: returns st with a message naming the
 * collective and the failed peer (or the transport's own reason). */
HC_NOINLINE int hc_net_failed(hc_coll_op_t *op, int st)
{
    char what[96], why[512]; /* the whole last error: a conflict's explanation is long */
    snprintf(what, sizeof(what), "%s (algorithm %s)", hc_coll_name(op->kind), op->algo);
    int dead = hc_coll_failed_member(op->comm);
    if (dead >= 0) return hc_peer_error(dead, what);
    snprintf(why, sizeof(why), "%s", hc_error_last());
    return hc_error((hcomm_status_t)st, "%s: a transfer failed: %s", what,
                    why[0] ? why : hcomm_strerror((hcomm_status_t)st));
}

/* For the pipelined engines, which track requests one by one: ids[i] names
 * op->reqs[i]. Pops one completed request: 1 (its id in *id_p), 0 when none
 * has completed, or its failure status. */
int hc_net_pop(hc_coll_op_t *op, int32_t *ids, int32_t *id_p)
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

hcomm_status_t hc_net_post(hc_coll_op_t *op, int32_t *ids, int32_t id, bool send, const void *buf,
                           size_t len, int peer)
{
    int i = op->nreqs;
    hcomm_status_t st =
        send ? hc_net_send(op, buf, len, peer) : hc_net_recv(op, (void *)buf, len, peer);
    if (st == HCOMM_OK) ids[i] = id;
    return st;
}

hc_step_t hc_net_pipe_run(hc_coll_op_t *op, hc_net_pipe_t *p, const hc_net_pipe_ops_t *ops,
                          void *ctx)
{
    for (;;) {
        bool moved = false;
        int32_t id;
        int rc;
        while ((rc = hc_net_pop(op, p->ids, &id)) == 1) {
            moved = true;
            if (id & 1)
                p->sends_inflight--;
            else
                p->rdone[(id >> 1) % p->window] = 1;
        }
        if (rc < 0)
            return hc_step_fail(rc);
        while (p->next_proc < p->next_recv && p->rdone[p->next_proc % p->window]) {
            p->rdone[p->next_proc % p->window] = 0;
            if (ops->process)
                ops->process(op, ctx, p->next_proc);
            p->next_proc++;
            moved = true;
        }
        while (p->next_send < p->nunits && p->sends_inflight < p->window &&
               (p->next_send < p->lag || p->next_proc > p->next_send - p->lag)) {
            if ((rc = ops->post_send(op, ctx, p->next_send)) != HCOMM_OK)
                return hc_step_fail(rc);
            p->next_send++;
            p->sends_inflight++;
            moved = true;
        }
        while (p->next_recv < p->nunits && p->next_recv < p->next_proc + p->window) {
            if ((rc = ops->post_recv(op, ctx, p->next_recv)) != HCOMM_OK)
                return hc_step_fail(rc);
            p->next_recv++;
            moved = true;
        }
        if (p->next_proc == p->nunits && p->next_send == p->nunits && p->sends_inflight == 0)
            return HC_STEP_DONE;
        if (!moved)
            return HC_STEP_PENDING;
    }
}
