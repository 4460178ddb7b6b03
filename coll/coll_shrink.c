/*
 * hcomm_comm_shrink: the members of a communicator that are still alive
 * agree on who they are, and on a context id, and get a new communicator of
 * exactly those (issue 30.8; MPI ULFM's MPI_Comm_shrink, NCCL's
 * ncclCommShrink). The agreement holds while more members fail during it.
 *
 * Failure detection is the runtime's (a process gone, a connection closed,
 * rank 0's verdicts, heartbeats): a member this rank sees failed stays
 * failed. The coordinator is the lowest member this rank does not see
 * failed; its epoch is its comm rank + 1, so epochs only grow as
 * coordinators die. Frames (HC_FRAME_SHRINK on the communicator's
 * collective context; each carries one 512-bit chunk of a member bitmap):
 *
 *   QUERY  coordinator -> every member it does not see failed: "I
 *          coordinate epoch e of shrink k"
 *   VIEW   member -> its coordinator (at its start, when its coordinator
 *          changes, and in answer to a QUERY): the members it sees failed
 *          and its next free context id; or FINAL: the decision it already
 *          returned with (a member that finished answers later queries so)
 *   DECIDE coordinator -> the members of the decision: the survivors and
 *          the context id; each answers ACK
 *   DONE   coordinator -> the members, once every one acknowledged: final
 *
 * A member that finished shrink k answers what later comes for k with the
 * decision it returned with: a QUERY with a FINAL VIEW; a VIEW (a member
 * whose coordinator died between this rank's DONE and its own now takes
 * this rank for the coordinator) with that decision's DECIDE and DONE.
 *
 * The coordinator waits for a VIEW from every member it does not see failed
 * (failures during the wait are added), then decides: a FINAL decision if
 * any member reports one (someone already returned with it: everybody must
 * get the same), else every member no VIEW reports failed, with a context
 * id above every member's. It sends DECIDE and waits for the ACKs; a member
 * of its decision that fails before acknowledging makes it decide again
 * without it (unless the decision was FINAL). Then DONE. A member adopts
 * the epoch of any QUERY or DECIDE above its own and ignores frames of
 * lower epochs from then on, so a dead coordinator's late DONE cannot
 * split the survivors. A failed coordinator is replaced by the next
 * member, which queries everybody again.
 *
 * Frames arrive inside a driver's progress: the handler only records
 * (coll_shrink's inbox on the communicator), the shrink call's loop and
 * hc_coll_shrink_progress act.
 */
#include "coll/coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HC_SHRINK_CHUNK_BITS (HC_FRAME_CTRL_MAX * 8)
#define HC_SH_RESEND_NS 1000000000ull /* a query or view sent again after a second unanswered */
enum { HC_SH_QUERY = 1, HC_SH_VIEW, HC_SH_DECIDE, HC_SH_ACK, HC_SH_DONE };
enum { HC_SH_LAST = 1u << 0, HC_SH_FINAL = 1u << 1 };

/* tag: k (16 bits) | kind << 16 | flags << 24; a: epoch | chunk << 32. */
static inline int32_t hc_sh_tag(uint16_t k, int kind, unsigned flags)
{
    return (int32_t)((uint32_t)k | (uint32_t)kind << 16 | (uint32_t)flags << 24);
}

/* The shrink state of a communicator (hc_coll_comm_t.shrink). */
typedef struct hc_coll_shrink {
    int n;
    size_t words;      /* of each bitmap */
    uint16_t finished; /* shrinks completed here (k of the next one = finished + 1) */
    bool active;       /* inside hcomm_comm_shrink */
    int epoch;         /* the coordinator's comm rank + 1 this rank follows */
    /* this rank's view: members it sees failed */
    uint64_t *failed;
    /* as coordinator (for epoch `coord_epoch`): views received */
    int coord_epoch;
    uint8_t *view_done; /* per member: a complete VIEW for coord_epoch (2: a FINAL one: that
                           member returned already, it acknowledges nothing more) */
    uint64_t *view_failed; /* the union of the views' failed sets */
    uint32_t view_ctx;     /* the highest next context id reported */
    bool final_seen;       /* some member reported a FINAL decision */
    uint64_t *final_set;
    uint32_t final_ctx;
    uint8_t *acked;        /* per member: ACK of the current DECIDE */
    /* as member: the decision of `epoch` */
    uint64_t *decided;
    uint32_t decided_ctx;
    bool decided_complete;
    bool done;             /* DONE for it */
    int done_epoch;        /* the epoch of that DONE */
    bool query_seen;       /* a QUERY of `epoch` arrived: answer it */
    /* the last finished shrink's decision, for queries that come later */
    uint64_t *last_set;
    uint32_t last_ctx;
    int owe_final_to;      /* comm rank + 1 that asked after this rank finished */
    int owe_decide_to;     /* comm rank + 1 that sent this rank a VIEW after it finished */
    int owe_decide_epoch;  /* that VIEW's epoch */
    uint64_t *scratch;     /* a bitmap being assembled from chunks */
} hc_coll_shrink_t;

int hc_sh_owed; /* members owed a FINAL view (hc_coll_shrink_progress) */

static const char *hc_sh_kind_name(int kind)
{
    static const char *const names[] = {"?", "QUERY", "VIEW", "DECIDE", "ACK", "DONE"};
    return kind > 0 && kind <= HC_SH_DONE ? names[kind] : "?";
}

static inline bool hc_bit(const uint64_t *m, int i)
{
    return (m[i >> 6] >> (i & 63)) & 1;
}
static inline void hc_bit_set(uint64_t *m, int i)
{
    m[i >> 6] |= 1ull << (i & 63);
}

static hc_coll_shrink_t *hc_shrink_state(struct hcomm_comm *comm)
{
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (!cc)
        return NULL;
    if (cc->shrink)
        return cc->shrink;
    hc_coll_shrink_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->n = comm->size;
    s->words = ((size_t)comm->size + 63) / 64;
    size_t nb = s->words * sizeof(uint64_t);
    /* one block: failed, view_failed, final_set, decided, last_set, scratch */
    uint64_t *maps = calloc(6, nb);
    uint8_t *flags = calloc(2, (size_t)comm->size);
    if (!maps || !flags) {
        free(maps);
        free(flags);
        free(s);
        return NULL;
    }
    s->failed = maps;
    s->view_failed = maps + s->words;
    s->final_set = maps + 2 * s->words;
    s->decided = maps + 3 * s->words;
    s->last_set = maps + 4 * s->words;
    s->scratch = maps + 5 * s->words;
    s->view_done = flags;
    s->acked = flags + comm->size;
    cc->shrink = s;
    return s;
}

void hc_coll_shrink_free(hc_coll_shrink_t *s)
{
    if (!s)
        return;
    free(s->failed); /* the block */
    free(s->view_done);
    free(s);
}

/* Sends bitmap m (or none) to comm rank `to` as one frame per 512 members. */
static void hc_sh_send(struct hcomm_comm *comm, int to, uint16_t k, int kind, unsigned flags,
                       int epoch, uint64_t b, const uint64_t *m, size_t words)
{
    size_t per = HC_SHRINK_CHUNK_BITS / 64, nchunks = m ? (words + per - 1) / per : 1;
    hc_log_debug("shrink 0x%x #%u: %s to communicator rank %d, epoch %d (word %#llx)",
                 comm->ctx_id, (unsigned)k, hc_sh_kind_name(kind), to, epoch,
                 m ? (unsigned long long)m[0] : 0ull);
    for (size_t c = 0; c < nchunks; c++) {
        size_t w0 = c * per, nw = m ? HC_MIN(per, words - w0) : 0;
        unsigned f = flags | (c + 1 == nchunks ? HC_SH_LAST : 0);
        hc_p2p_shrink_frame(comm, to, hc_sh_tag(k, kind, f), (uint64_t)(uint32_t)epoch | c << 32,
                            b, m ? m + w0 : NULL, (uint32_t)(nw * sizeof(uint64_t)));
    }
}

/* Ors chunk `c` of a bitmap into m. */
static void hc_sh_chunk_or(uint64_t *m, size_t words, uint64_t c, const void *payload, uint32_t len)
{
    size_t per = HC_SHRINK_CHUNK_BITS / 64, w0 = (size_t)c * per;
    if (w0 >= words)
        return;
    size_t nw = HC_MIN(HC_MIN(per, words - w0), (size_t)len / sizeof(uint64_t));
    uint64_t tmp[HC_FRAME_CTRL_MAX / 8];
    memcpy(tmp, payload, nw * sizeof(uint64_t));
    for (size_t i = 0; i < nw; i++)
        m[w0 + i] |= tmp[i];
}

/* A VIEW chunk (the coordinator's inbox): the members `from` sees failed,
 * or, FINAL, the decision it returned with. */
static void hc_sh_on_view(hc_coll_shrink_t *s, int from, unsigned flags, int epoch, uint64_t chunk,
                          const hc_frame_hdr_t *hdr, const void *payload)
{
    bool last = flags & HC_SH_LAST;
    if (epoch != s->coord_epoch) {
        /* the first view of a new epoch here: the inbox starts again */
        if (epoch < s->coord_epoch)
            return;
        s->coord_epoch = epoch;
        memset(s->view_done, 0, (size_t)s->n);
        memset(s->view_failed, 0, s->words * sizeof(uint64_t));
        s->view_ctx = 0;
    }
    if (flags & HC_SH_FINAL) {
        if (chunk == 0)
            memset(s->final_set, 0, s->words * sizeof(uint64_t));
        hc_sh_chunk_or(s->final_set, s->words, chunk, payload, hdr->len);
        if (last) {
            s->final_seen = true;
            s->final_ctx = (uint32_t)hdr->b;
        }
    } else {
        hc_sh_chunk_or(s->view_failed, s->words, chunk, payload, hdr->len);
        s->view_ctx = HC_MAX(s->view_ctx, (uint32_t)hdr->b);
    }
    if (last)
        s->view_done[from] = (flags & HC_SH_FINAL) ? 2 : HC_MAX(s->view_done[from], 1);
}

/* A DECIDE chunk of epoch `epoch`: the survivors, complete at the last. */
static void hc_sh_on_decide(struct hcomm_comm *comm, hc_coll_shrink_t *s, int epoch,
                            uint64_t chunk, bool last, const hc_frame_hdr_t *hdr,
                            const void *payload)
{
    if (epoch < s->epoch)
        return;
    if (epoch > s->epoch || chunk == 0) {
        s->epoch = epoch;
        memset(s->scratch, 0, s->words * sizeof(uint64_t));
        s->decided_complete = false;
    }
    hc_sh_chunk_or(s->scratch, s->words, chunk, payload, hdr->len);
    if (last) {
        memcpy(s->decided, s->scratch, s->words * sizeof(uint64_t));
        s->decided_ctx = (uint32_t)hdr->b;
        s->decided_complete = true;
        s->done = false;             /* a later DECIDE of the epoch replaces the last */
        s->acked[comm->rank] = 0;    /* and is acknowledged again */
    }
}

/* The frame handler (inside a driver's progress): records only. */
void hc_coll_shrink_frame(struct hcomm_comm *comm, int from, const hc_frame_hdr_t *hdr,
                          const void *payload)
{
    hc_coll_shrink_t *s = hc_shrink_state(comm);
    if (!s)
        return;
    uint32_t tag = (uint32_t)hdr->tag;
    uint16_t k = (uint16_t)tag;
    int kind = (int)(tag >> 16 & 0xff);
    unsigned flags = tag >> 24;
    int epoch = (int)(uint32_t)hdr->a;
    uint64_t chunk = hdr->a >> 32;
    bool last = flags & HC_SH_LAST;
    hc_log_debug("shrink 0x%x #%u: %s%s from communicator rank %d, epoch %d (here: #%u done, "
                 "epoch %d, coordinating %d%s)",
                 comm->ctx_id, (unsigned)k, hc_sh_kind_name(kind),
                 (flags & HC_SH_FINAL) ? " FINAL" : "", from, epoch, (unsigned)s->finished,
                 s->epoch, s->coord_epoch, s->active ? "" : ", not in a shrink");
    if (k == s->finished && kind == HC_SH_QUERY && !s->active) {
        s->owe_final_to = from + 1; /* answered by hc_coll_shrink_progress */
        hc_sh_owed++;
        return;
    }
    if (k == s->finished && kind == HC_SH_VIEW && !(flags & HC_SH_FINAL) && last) {
        /* A member still in shrink k takes this rank for its coordinator:
         * the one it followed died after this rank's DONE and before its
         * own. This rank returned with a decision: the member must get
         * it, so it is sent as a DECIDE and a DONE of the member's epoch
         * (hc_coll_shrink_progress). Dropping the view left the member
         * waiting for the timeout. */
        s->owe_decide_to = from + 1;
        s->owe_decide_epoch = epoch;
        hc_sh_owed++;
        return;
    }
    if (k != (uint16_t)(s->finished + 1))
        return; /* an older shrink's, or one two ahead: nothing to do with it */
    switch (kind) {
    case HC_SH_QUERY:
        if (epoch >= s->epoch) {
            s->epoch = epoch;
            s->query_seen = true;
        }
        return;
    case HC_SH_VIEW:
        hc_sh_on_view(s, from, flags, epoch, chunk, hdr, payload);
        return;
    case HC_SH_DECIDE:
        hc_sh_on_decide(comm, s, epoch, chunk, last, hdr, payload);
        return;
    case HC_SH_ACK:
        if (epoch == s->coord_epoch && epoch == s->epoch)
            s->acked[from] = 1;
        return;
    case HC_SH_DONE:
        if (epoch == s->epoch && s->decided_complete) {
            s->done = true;
            s->done_epoch = epoch;
        }
        return;
    }
}

/* A member that finished answers a later coordinator's query with its
 * decision. Called from every progress pass (a load and a branch when
 * nothing is owed). */
void hc_coll_shrink_progress_owed(void)
{
    hc_sh_owed = 0;
    hc_list_t *pos;
    for (pos = hc_ctx.comms.next; pos != &hc_ctx.comms; pos = pos->next) {
        struct hcomm_comm *comm = hc_container_of(pos, struct hcomm_comm, link);
        hc_coll_comm_t *cc = comm->coll_priv;
        hc_coll_shrink_t *s = cc ? cc->shrink : NULL;
        if (!s)
            continue;
        if (s->owe_final_to) {
            int to = s->owe_final_to - 1;
            s->owe_final_to = 0;
            hc_sh_send(comm, to, s->finished, HC_SH_VIEW, HC_SH_FINAL, to + 1, s->last_ctx,
                       s->last_set, s->words);
        }
        if (s->owe_decide_to) {
            int to = s->owe_decide_to - 1;
            s->owe_decide_to = 0;
            hc_sh_send(comm, to, s->finished, HC_SH_DECIDE, 0, s->owe_decide_epoch, s->last_ctx,
                       s->last_set, s->words);
            hc_sh_send(comm, to, s->finished, HC_SH_DONE, 0, s->owe_decide_epoch, 0, NULL, 0);
        }
    }
}

/* This rank's failed set, from the runtime; true when it grew. */
static bool hc_sh_refresh(struct hcomm_comm *comm, hc_coll_shrink_t *s)
{
    bool grew = false;
    for (int r = 0; r < comm->size; r++)
        if (!hc_bit(s->failed, r) && hc_core_peer_failed(comm->world_ranks[r])) {
            hc_bit_set(s->failed, r);
            grew = true;
        }
    return grew;
}

static int hc_sh_lowest_alive(const hc_coll_shrink_t *s)
{
    for (int r = 0; r < s->n; r++)
        if (!hc_bit(s->failed, r))
            return r;
    return -1;
}

static void hc_sh_send_view(struct hcomm_comm *comm, hc_coll_shrink_t *s, uint16_t k, int to)
{
    if (to == comm->rank) {
        /* the coordinator's own view goes straight into its inbox */
        if (s->coord_epoch != to + 1) {
            s->coord_epoch = to + 1;
            memset(s->view_done, 0, (size_t)s->n);
            memset(s->view_failed, 0, s->words * sizeof(uint64_t));
            s->view_ctx = 0;
        }
        for (size_t i = 0; i < s->words; i++)
            s->view_failed[i] |= s->failed[i];
        s->view_ctx = HC_MAX(s->view_ctx, hc_ctx.next_ctx_id);
        s->view_done[to] = 1;
        return;
    }
    hc_sh_send(comm, to, k, HC_SH_VIEW, 0, to + 1, hc_ctx.next_ctx_id, s->failed, s->words);
}

/* Makes the decision from the views (coordinator): false while a view is
 * missing from a member not seen failed. */
static bool hc_sh_decide(struct hcomm_comm *comm, hc_coll_shrink_t *s, uint32_t *ctx_p)
{
    for (int r = 0; r < s->n; r++)
        if (!hc_bit(s->failed, r) && !hc_bit(s->view_failed, r) && !s->view_done[r])
            return false;
    if (s->final_seen) {
        memcpy(s->decided, s->final_set, s->words * sizeof(uint64_t));
        *ctx_p = s->final_ctx;
    } else {
        memset(s->decided, 0, s->words * sizeof(uint64_t));
        for (int r = 0; r < s->n; r++)
            if (!hc_bit(s->failed, r) && !hc_bit(s->view_failed, r))
                hc_bit_set(s->decided, r);
        *ctx_p = s->view_ctx;
    }
    (void)comm;
    return true;
}

/* Creates the agreed communicator. */
static hcomm_status_t hc_sh_finish(struct hcomm_comm *comm, hc_coll_shrink_t *s,
                                   struct hcomm_comm **newcomm_p, const char *fn)
{
    memcpy(s->last_set, s->decided, s->words * sizeof(uint64_t));
    s->last_ctx = s->decided_ctx;
    s->finished++;
    s->active = false;
    if (s->epoch > s->done_epoch && s->done_epoch > 0) {
        /* a later coordinator asked before this rank took its DONE: it
         * must learn the decision this rank returns with */
        s->owe_final_to = s->epoch;
        hc_sh_owed++;
    }
    /* the next shrink of this communicator starts from nothing */
    s->epoch = s->coord_epoch = s->done_epoch = 0;
    s->query_seen = s->final_seen = s->decided_complete = s->done = false;
    memset(s->view_done, 0, (size_t)s->n);
    memset(s->acked, 0, (size_t)s->n);
    if (!hc_bit(s->decided, comm->rank))
        return hc_error(HCOMM_ERR_INTERNAL, "%s: the survivors agreed without this rank", fn);
    int *members = malloc(sizeof(int) * (size_t)s->n), m = 0;
    if (!members)
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    for (int r = 0; r < s->n; r++)
        if (hc_bit(s->decided, r))
            members[m++] = comm->world_ranks[r];
    hcomm_status_t st = hc_comm_create(s->decided_ctx, m, members, newcomm_p);
    free(members);
    if (st == HCOMM_OK)
        hc_log_info("%s: %d of %d members survive (context 0x%x)", fn, m, s->n,
                    s->decided_ctx);
    return st;
}

/* One coordinator round: query, collect views, decide, collect acks, done.
 * Returns OK when done, ERR_AGAIN when this rank must go on as a member
 * (a lower member is alive after all), or an error. */
static hcomm_status_t hc_sh_coordinate(struct hcomm_comm *comm, hc_coll_shrink_t *s, uint16_t k,
                                       uint64_t deadline, const char *fn)
{
    int me = comm->rank, epoch = me + 1;
    s->epoch = epoch;
    for (int r = 0; r < s->n; r++)
        if (r != me && !hc_bit(s->failed, r))
            hc_sh_send(comm, r, k, HC_SH_QUERY, 0, epoch, 0, NULL, 0);
    hc_sh_send_view(comm, s, k, me);
    bool deciding = false, sent = false, from_final = false;
    uint32_t ctx = 0;
    uint64_t requery = hc_time_ns() + HC_SH_RESEND_NS;
    hc_backoff_t b = {0};
    for (;;) {
        hc_progress();
        hc_progress_slow();
        if (hc_sh_refresh(comm, s) && deciding && !s->final_seen) {
            /* a member of the decision failed before acknowledging: decide again */
            deciding = false;
            sent = false;
        }
        if (hc_sh_lowest_alive(s) != me)
            return HCOMM_ERR_AGAIN; /* cannot happen: lower members were failed */
        if (!deciding && hc_time_ns() > requery) {
            /* ask again whoever has not answered (belt and braces: frames are
             * not lost, but a member may have been slow to exist) */
            requery = hc_time_ns() + HC_SH_RESEND_NS;
            for (int r = 0; r < s->n; r++)
                if (r != me && !hc_bit(s->failed, r) && !s->view_done[r])
                    hc_sh_send(comm, r, k, HC_SH_QUERY, 0, epoch, 0, NULL, 0);
        }
        if (deciding && s->final_seen && !from_final) {
            /* a member reports it returned with a decision: that one */
            deciding = false;
            sent = false;
        }
        if (!deciding && hc_sh_decide(comm, s, &ctx)) {
            deciding = true;
            from_final = s->final_seen;
            s->decided_ctx = ctx;
            memset(s->acked, 0, (size_t)s->n);
        }
        if (deciding && !sent) {
            for (int r = 0; r < s->n; r++)
                if (r != me && hc_bit(s->decided, r))
                    hc_sh_send(comm, r, k, HC_SH_DECIDE, 0, epoch, ctx, s->decided, s->words);
            sent = true;
        }
        if (deciding) {
            bool all = true;
            for (int r = 0; r < s->n && all; r++)
                all = r == me || !hc_bit(s->decided, r) || s->acked[r] ||
                      s->view_done[r] == 2 || (from_final && hc_bit(s->failed, r));
            if (all) {
                for (int r = 0; r < s->n; r++)
                    if (r != me && hc_bit(s->decided, r))
                        hc_sh_send(comm, r, k, HC_SH_DONE, 0, epoch, 0, NULL, 0);
                return HCOMM_OK;
            }
        }
        if (hc_time_ns() > deadline)
            return hc_error(HCOMM_ERR_TIMEOUT, "%s: timed out after %g s (HCOMM_TIMEOUT) as "
                                               "the coordinator of the survivors' agreement",
                            fn, hc_cfg.timeout);
        hc_backoff_step(&b);
    }
}

hcomm_status_t hc_coll_shrink(struct hcomm_comm *comm, struct hcomm_comm **newcomm_p)
{
    const char *fn = "hcomm_comm_shrink";
    hc_coll_shrink_t *s = hc_shrink_state(comm);
    if (!s)
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    uint16_t k = (uint16_t)(s->finished + 1);
    s->active = true;
    s->done = false;
    s->decided_complete = false;
    hc_sh_refresh(comm, s);
    uint64_t deadline = hc_time_ns() + (uint64_t)(hc_cfg.timeout * 1e9);
    int coord = -1;
    uint64_t resend = 0;
    hc_backoff_t b = {0};
    for (;;) {
        hc_progress();
        hc_progress_slow();
        if (s->done) /* before anything else: a DONE is final, whoever failed since */
            return hc_sh_finish(comm, s, newcomm_p, fn);
        hc_sh_refresh(comm, s);
        int lowest = hc_sh_lowest_alive(s);
        /* a QUERY of a higher epoch: its coordinator knows lower ones failed */
        int want = HC_MAX(lowest, s->epoch - 1);
        if (want >= 0 && hc_bit(s->failed, want))
            want = lowest;
        if (want == comm->rank) {
            hcomm_status_t st = hc_sh_coordinate(comm, s, k, deadline, fn);
            if (st == HCOMM_OK) {
                return hc_sh_finish(comm, s, newcomm_p, fn);
            }
            if (st != HCOMM_ERR_AGAIN) {
                s->active = false;
                return st;
            }
            continue;
        }
        if (want != coord || s->query_seen ||
            (!s->decided_complete && hc_time_ns() > resend)) {
            coord = want;
            s->query_seen = false;
            resend = hc_time_ns() + HC_SH_RESEND_NS;
            if (s->epoch < coord + 1) {
                s->epoch = coord + 1;
                s->decided_complete = false;
                s->done = false;
            }
            hc_sh_send_view(comm, s, k, coord);
        }
        if (s->decided_complete && !s->acked[comm->rank] && s->epoch == coord + 1) {
            hc_sh_send(comm, coord, k, HC_SH_ACK, 0, s->epoch, 0, NULL, 0);
            s->acked[comm->rank] = 1; /* sent for this decision */
        }
        if (hc_time_ns() > deadline) {
            s->active = false;
            return hc_error(HCOMM_ERR_TIMEOUT, "%s: timed out after %g s (HCOMM_TIMEOUT) waiting "
                                               "for the survivors' agreement (coordinator: "
                                               "communicator rank %d)",
                            fn, hc_cfg.timeout, coord);
        }
        hc_backoff_step(&b);
    }
}

