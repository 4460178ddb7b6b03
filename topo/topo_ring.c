/*
 * Ring orders on the map (docs/topology.md): nodes toured by greedy nearest
 * neighbour from several starts, each tour improved by 2-opt, the shortest
 * kept; ranks grouped by NUMA node inside each node. No time budget and no
 * randomness: every rank must compute the same ring.
 */
#include "topo/topo_int.h"

#include <stdlib.h>
#include <string.h>

#define HC_TOPO_STARTS_ALL 64 /* up to this many nodes: every node is a start */
#define HC_TOPO_STARTS 8   /* up to 512 nodes */
#define HC_TOPO_STARTS_BIG 2
#define HC_TOPO_2OPT_PASSES 64

typedef struct {
    int nn;          /* nodes of the communicator */
    const int *rep;  /* node -> a map rank on it (its first member) */
    const hc_topo_map_t *map;
} hc_topo_nodes_t;

static inline double hc_topo_ncost(const hc_topo_nodes_t *g, int a, int b)
{
    return hc_topo_cost(g->map, g->rep[a], g->rep[b]);
}

static double hc_topo_tour_cost(const hc_topo_nodes_t *g, const int *t)
{
    double c = 0;
    for (int i = 0; i < g->nn; i++) c += hc_topo_ncost(g, t[i], t[(i + 1) % g->nn]);
    return c;
}

static void hc_topo_greedy(const hc_topo_nodes_t *g, int start, int *t, char *seen)
{
    memset(seen, 0, (size_t)g->nn);
    t[0] = start;
    seen[start] = 1;
    for (int i = 1; i < g->nn; i++) {
        int best = -1;
        double bc = 0;
        for (int j = 0; j < g->nn; j++) {
            if (seen[j]) continue;
            double c = hc_topo_ncost(g, t[i - 1], j);
            if (best < 0 || c < bc) best = j, bc = c;
        }
        t[i] = best;
        seen[best] = 1;
    }
}

/* 2-opt: reverses t[i..j] while that shortens the closed tour. */
static void hc_topo_2opt(const hc_topo_nodes_t *g, int *t)
{
    int n = g->nn;
    if (n < 4) return;
    for (int pass = 0; pass < HC_TOPO_2OPT_PASSES; pass++) {
        bool improved = false;
        for (int i = 1; i < n - 1; i++) {
            for (int j = i + 1; j < n; j++) {
                int a = t[i - 1], b = t[i], c = t[j], d = t[(j + 1) % n];
                double delta = hc_topo_ncost(g, a, c) + hc_topo_ncost(g, b, d) -
                               hc_topo_ncost(g, a, b) - hc_topo_ncost(g, c, d);
                if (delta < -1e-9) {
                    for (int x = i, y = j; x < y; x++, y--) {
                        int s = t[x];
                        t[x] = t[y];
                        t[y] = s;
                    }
                    improved = true;
                }
            }
        }
        if (!improved) break;
    }
}

/* The shortest tour found; t[0] = node 0. */
static hcomm_status_t hc_topo_tour(const hc_topo_nodes_t *g, int *best)
{
    int n = g->nn;
    int *t = malloc(sizeof(int) * (size_t)n);
    char *seen = malloc((size_t)n);
    if (!t || !seen) {
        free(t);
        free(seen);
        return hc_error(HCOMM_ERR_NO_MEMORY, "topology: ring over %d nodes", n);
    }
    for (int i = 0; i < n; i++) best[i] = i;
    int starts = n <= HC_TOPO_STARTS_ALL ? n : n <= 512 ? HC_TOPO_STARTS : HC_TOPO_STARTS_BIG;
    double bc = 0;
    for (int s = 0; s < starts; s++) {
        hc_topo_greedy(g, (int)((long)s * n / starts), t, seen);
        hc_topo_2opt(g, t);
        double c = hc_topo_tour_cost(g, t);
        if (s == 0 || c < bc - 1e-9) {
            bc = c;
            memcpy(best, t, sizeof(int) * (size_t)n);
        }
    }
    /* Rotate so that node 0 (member 0's) comes first. */
    int z = 0;
    while (z < n - 1 && best[z] != 0) z++;
    for (int i = 0; i < n; i++) t[i] = best[(z + i) % n];
    memcpy(best, t, sizeof(int) * (size_t)n);
    free(t);
    free(seen);
    return HCOMM_OK;
}

hcomm_status_t hc_topo_ring(const hc_topo_map_t *map, const int *members, int n,
                            hc_topo_mode_t mode, int *order)
{
    for (int i = 0; i < n; i++) order[i] = i;
    if (mode == HC_TOPO_MODE_OFF || n < 3) return HCOMM_OK;
    /* Communicator nodes, numbered by first member. */
    int *cnode = malloc(sizeof(int) * (size_t)n); /* member -> comm node */
    int *rep = malloc(sizeof(int) * (size_t)n);   /* comm node -> first member's map rank */
    int *mnode = malloc(sizeof(int) * (size_t)map->nnodes); /* map node -> comm node */
    int *tour = calloc((size_t)n, sizeof(int));
    char *taken = calloc((size_t)n, 1);
    hcomm_status_t st = HCOMM_OK;
    if (!cnode || !rep || !mnode || !tour || !taken) {
        st = hc_error(HCOMM_ERR_NO_MEMORY, "topology: ring of %d ranks", n);
        goto out;
    }
    for (int k = 0; k < map->nnodes; k++) mnode[k] = -1;
    int nn = 0;
    for (int i = 0; i < n; i++) {
        int r = members[i];
        if (r < 0 || r >= map->n) {
            st = hc_error(HCOMM_ERR_INVALID, "topology: member %d is rank %d of a %d-rank map", i, r,
                          map->n);
            goto out;
        }
        int k = map->node[r];
        if (mnode[k] < 0) {
            mnode[k] = nn;
            rep[nn++] = r;
        }
        cnode[i] = mnode[k];
    }
    for (int k = 0; k < nn; k++) tour[k] = k;
    if (mode == HC_TOPO_MODE_FULL && nn > 2) {
        hc_topo_nodes_t g = {.nn = nn, .rep = rep, .map = map};
        if ((st = hc_topo_tour(&g, tour)) != HCOMM_OK) goto out;
    }
    /* Each node's members: NUMA groups in order of their first member. */
    int p = 0;
    for (int t = 0; t < nn; t++) {
        int k = tour[t];
        for (int i = 0; i < n; i++) {
            if (cnode[i] != k || taken[i]) continue;
            int numa = map->numa[members[i]];
            for (int j = i; j < n; j++) {
                if (cnode[j] != k || taken[j]) continue;
                if (map->numa[members[j]] != numa) continue;
                taken[j] = 1;
                order[p++] = j;
            }
        }
    }
out:
    free(cnode);
    free(rep);
    free(mnode);
    free(tour);
    free(taken);
    return st;
}

double hc_topo_ring_cost(const hc_topo_map_t *map, const int *members, int n, const int *order)
{
    double c = 0;
    for (int p = 0; p < n && n > 1; p++)
        c += hc_topo_cost(map, members[order[p]], members[order[(p + 1) % n]]);
    return c;
}

int hc_topo_ring_crossings(const hc_topo_map_t *map, const int *members, int n, const int *order,
                           int cls)
{
    int x = 0;
    for (int p = 0; p < n && n > 1; p++)
        if (hc_topo_class(map, members[order[p]], members[order[(p + 1) % n]]) >= cls) x++;
    return x;
}
