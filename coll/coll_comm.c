/*
 * Communicators made by collectives: hcomm_comm_split (an allgather of
 * {color, key, next free context id} on the parent) and
 * hcomm_comm_create_group (its members alone, over the parent's
 * point-to-point context). A new communicator's context id is above every
 * id any of its members has used (core/comm.c), so every rank's ids grow
 * and two communicators with one id share no member (node_region.c's region
 * keys rely on it). The API layer checked the arguments.
 */
#include "coll/coll.h"

#include <stdlib.h>

typedef struct {
    int32_t color, key;
    uint32_t next_ctx;
} hc_split_info_t;

hcomm_status_t hc_coll_comm_split(struct hcomm_comm *comm, int color, int key,
                                  struct hcomm_comm **newcomm_p)
{
    hcomm_status_t st;
    int n = comm->size;
    hc_split_info_t mine = {.color = color < 0 ? -1 : color, .key = key,
                            .next_ctx = hc_ctx.next_ctx_id};
    hc_split_info_t *all = malloc(sizeof(*all) * (size_t)n);
    int *members = malloc(sizeof(int) * (size_t)n);
    if (!all || !members) {
        free(all);
        free(members);
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_comm_split: no memory");
    }
    /* The split's own allgather: not the user's collective (not counted,
     * not fingerprinted). */
    st = hc_coll_internal_allgather(&mine, all, sizeof(mine), comm);
    if (st != HCOMM_OK)
        goto out;
    /* Context id: above every id any member has used; colors in ascending
     * order take consecutive ids. */
    uint32_t base = 0;
    for (int r = 0; r < n; r++)
        base = HC_MAX(base, all[r].next_ctx);
    int ncolors = 0, my_index = 0;
    for (int r = 0; r < n; r++) {
        if (all[r].color < 0)
            continue;
        bool first = true; /* is r the first rank of its color? */
        for (int q = 0; q < r; q++)
            if (all[q].color == all[r].color)
                first = false;
        if (!first)
            continue;
        if (all[r].color < mine.color)
            my_index++;
        ncolors++;
    }
    hc_ctx.next_ctx_id = base + (uint32_t)ncolors;
    if (mine.color < 0) {
        *newcomm_p = NULL;
        goto out;
    }
    int m = 0;
    for (int r = 0; r < n; r++)
        if (all[r].color == mine.color)
            members[m++] = r;
    /* Order by (key, rank in comm): insertion sort, stable. */
    for (int i = 1; i < m; i++) {
        int v = members[i], j = i - 1;
        while (j >= 0 && all[members[j]].key > all[v].key) {
            members[j + 1] = members[j];
            j--;
        }
        members[j + 1] = v;
    }
    for (int i = 0; i < m; i++)
        members[i] = comm->world_ranks[members[i]];
    struct hcomm_comm *nc;
    st = hc_comm_create(base + (uint32_t)my_index, m, members, &nc);
    if (st == HCOMM_OK)
        *newcomm_p = nc;
out:
    free(all);
    free(members);
    return st;
}

/* hcomm_comm_create_group: a communicator of some of comm's ranks, made by
 * those ranks alone. The context id comes as split's does (above every id a
 * member has used): the members send theirs to the first member, which
 * answers with the largest, on comm's point-to-point context with a
 * negative tag (never a user's: the API refuses negative tags). */
static hcomm_status_t hc_group_xchg(struct hcomm_comm *comm, int peer, bool send, uint32_t *v,
                                    int32_t itag, const char *fn)
{
    struct hcomm_request *req;
    hcomm_status_t st = send ? hc_p2p_isend(comm, comm->ctx_id, v, sizeof(*v), peer, itag, &req)
                             : hc_p2p_irecv(comm, comm->ctx_id, v, sizeof(*v), peer, itag, &req);
    if (st != HCOMM_OK)
        return st;
    st = hc_request_wait(req, fn);
    hc_request_free(req);
    return st;
}

hcomm_status_t hc_coll_comm_create_group(struct hcomm_comm *comm, const int *ranks, int n,
                                         int tag, struct hcomm_comm **newcomm_p)
{
    const char *fn = "hcomm_comm_create_group";
    hcomm_status_t st = HCOMM_OK;
    uint8_t *seen = calloc((size_t)comm->size, 1);
    int *members = malloc(sizeof(int) * (size_t)n);
    if (!seen || !members) {
        free(seen);
        free(members);
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    }
    int me = -1;
    for (int i = 0; i < n && st == HCOMM_OK; i++) {
        if (ranks[i] < 0 || ranks[i] >= comm->size)
            st = hc_error(HCOMM_ERR_INVALID, "%s: ranks[%d] = %d is out of range for a "
                                             "communicator of %d ranks", fn, i, ranks[i],
                          comm->size);
        else if (seen[ranks[i]]++)
            st = hc_error(HCOMM_ERR_INVALID, "%s: rank %d is listed twice (ranks[%d])", fn,
                          ranks[i], i);
        else {
            members[i] = comm->world_ranks[ranks[i]];
            if (ranks[i] == comm->rank)
                me = i;
        }
    }
    if (st == HCOMM_OK && me < 0)
        st = hc_error(HCOMM_ERR_INVALID, "%s: this rank (%d) is not in ranks: only the members "
                                         "call it", fn, comm->rank);
    int32_t itag = -1 - (int32_t)(tag & 0x3fffffff);
    uint32_t base = hc_ctx.next_ctx_id;
    if (st == HCOMM_OK && me == 0) {
        for (int i = 1; i < n && st == HCOMM_OK; i++) {
            uint32_t v;
            st = hc_group_xchg(comm, ranks[i], false, &v, itag, fn);
            base = HC_MAX(base, v);
        }
        for (int i = 1; i < n && st == HCOMM_OK; i++)
            st = hc_group_xchg(comm, ranks[i], true, &base, itag, fn);
    } else if (st == HCOMM_OK) {
        uint32_t v = base;
        st = hc_group_xchg(comm, ranks[0], true, &v, itag, fn);
        if (st == HCOMM_OK)
            st = hc_group_xchg(comm, ranks[0], false, &base, itag, fn);
    }
    if (st == HCOMM_OK) {
        hc_ctx.next_ctx_id = HC_MAX(hc_ctx.next_ctx_id, base + 1);
        struct hcomm_comm *nc;
        st = hc_comm_create(base, n, members, &nc);
        if (st == HCOMM_OK)
            *newcomm_p = nc;
    }
    free(seen);
    free(members);
    return st;
}
