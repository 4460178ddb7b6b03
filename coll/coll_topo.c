/*
 * Topology for the collectives (docs/topology.md): each communicator's
 * ring order, computed once from the map, and the internal communicators
 * of the hierarchical algorithms (the node's and the rail's).
 */
#include "coll/coll.h"
#include "mem/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const int *hc_coll_ring_order(struct hcomm_comm *comm, int *pos_p)
{
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (!cc) return NULL;
    if (!cc->ring) {
        int *order = malloc(sizeof(int) * (size_t)comm->size);
        if (!order) return NULL;
        hc_topo_mode_t mode = hc_ctx.topo && comm->size > 2 ? hc_ctx.topo_mode : HC_TOPO_MODE_OFF;
        if (hc_topo_ring(hc_ctx.topo, comm->world_ranks, comm->size, mode, order) != HCOMM_OK) {
            free(order);
            return NULL;
        }
        cc->ring = order;
        for (int p = 0; p < comm->size; p++)
            if (order[p] == comm->rank) cc->ring_pos = p;
        if (mode != HC_TOPO_MODE_OFF && hc_log_level_current >= HC_LOG_INFO && comm->rank == 0) {
            char text[512];
            size_t len = 0;
            for (int p = 0; p < comm->size && len < sizeof(text) - 16; p++)
                len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%d", p ? " " : "", order[p]);
            hc_log_info("topology: ring of a %d-rank communicator (HCOMM_TOPO=%s): %s%s; %d node "
                        "crossings, %d switch crossings", comm->size, hc_cfg.topo, text,
                        len >= sizeof(text) - 16 ? " ..." : "",
                        hc_topo_ring_crossings(hc_ctx.topo, comm->world_ranks, comm->size, order,
                                               HC_TOPO_SWITCH),
                        hc_topo_ring_crossings(hc_ctx.topo, comm->world_ranks, comm->size, order,
                                               HC_TOPO_NET));
        }
    }
    *pos_p = cc->ring_pos;
    return cc->ring;
}

/* An internal communicator: its context id is derived from the parent's,
 * so every member computes the same one without talking. */
static hcomm_status_t hc_coll_sub_comm(struct hcomm_comm *parent, uint32_t which, const int *world,
                                       int n, struct hcomm_comm **out)
{
    uint32_t saved = hc_ctx.next_ctx_id;
    hcomm_status_t st = hc_comm_create(HC_CTX_SUB | parent->ctx_id << 1 | which, n, world, out);
    hc_ctx.next_ctx_id = saved;
    return st;
}

bool hc_coll_hier_ready(struct hcomm_comm *comm)
{
    hc_coll_comm_t *cc = hc_coll_comm(comm);
    if (!cc) return false;
    if (cc->hier_checked) return cc->hier_ok;
    cc->hier_checked = true;
    const hc_topo_map_t *map = hc_ctx.topo;
    int n = comm->size;
    /* Parents below 2^28: their internal ids stay below HC_CTX_SUB |
     * 0x20000000, clear of the probe's (api_probe.c). */
    if (!map || hc_ctx.topo_mode == HC_TOPO_MODE_OFF || n < 4 || (comm->ctx_id & (HC_CTX_SUB | 0x30000000u)))
        return false;
    int pos;
    const int *order = hc_coll_ring_order(comm, &pos);
    if (!order) return false;
    /* Along the ring the nodes come in blocks: count them and their sizes. */
    int nodes = 0, L = 0, run = 0, my_i = -1, my_block = -1;
    for (int p = 0; p < n; p++) {
        int node = map->node[comm->world_ranks[order[p]]];
        bool first = p == 0 || node != map->node[comm->world_ranks[order[p - 1]]];
        if (first) {
            if (p && (L ? run != L : false)) return false;
            if (p && !L) L = run;
            nodes++;
            run = 0;
        }
        if (order[p] == comm->rank) my_i = run, my_block = nodes - 1;
        run++;
    }
    if (!L) L = run;
    if (run != L || nodes < 2 || L < 2 || nodes * L != n) return false;
    /* Every node must come as one block: nodes counted along the ring equal
     * the comm's distinct nodes. */
    int distinct = 0;
    for (int p = 0; p < n; p++) {
        int node = map->node[comm->world_ranks[order[p]]];
        bool seen = false;
        for (int q = 0; q < p && !seen; q++) seen = map->node[comm->world_ranks[order[q]]] == node;
        distinct += !seen;
    }
    if (distinct != nodes) return false;
    int *w = malloc(sizeof(int) * (size_t)(L > nodes ? L : nodes));
    if (!w) return false;
    for (int i = 0; i < L; i++) w[i] = comm->world_ranks[order[my_block * L + i]];
    hcomm_status_t st = hc_coll_sub_comm(comm, 0, w, L, &cc->hier_node);
    if (st == HCOMM_OK) {
        for (int k = 0; k < nodes; k++) w[k] = comm->world_ranks[order[k * L + my_i]];
        st = hc_coll_sub_comm(comm, 1, w, nodes, &cc->hier_rail);
    }
    free(w);
    if (st != HCOMM_OK) {
        hc_coll_topo_free(cc);
        return false;
    }
    cc->hier_L = L;
    cc->hier_N = nodes;
    cc->hier_i = my_i;
    cc->hier_ok = true;
    hc_log_debug("topology: communicator %u: %d nodes x %d ranks, local index %d", comm->ctx_id, nodes,
                 L, my_i);
    return true;
}

void hc_coll_topo_free(hc_coll_comm_t *cc)
{
    if (cc->hier_buf) hc_mem_free(cc->hier_buf);
    cc->hier_buf = NULL;
    cc->hier_buf_bytes = 0;
    free(cc->ring);
    cc->ring = NULL;
    struct hcomm_comm *subs[2] = {cc->hier_node, cc->hier_rail};
    cc->hier_node = cc->hier_rail = NULL;
    cc->hier_ok = false;
    for (int i = 0; i < 2; i++)
        if (subs[i]) hc_comm_destroy(subs[i]);
}

void hc_coll_topo_recalibrated(void)
{
    for (hc_list_t *pos = hc_ctx.comms.next; pos != &hc_ctx.comms; pos = pos->next) {
        struct hcomm_comm *c = hc_container_of(pos, struct hcomm_comm, link);
        hc_coll_comm_t *cc = c->coll_priv;
        if (!cc || (c->ctx_id & HC_CTX_SUB)) continue;
        /* Internal communicators of cc go too (they are further on the
         * list or before it: the walk goes on from c, which stays). */
        hc_coll_topo_free(cc);
        cc->hier_checked = false;
        cc->hier_decided = cc->hier_yes = 0;
    }
}
