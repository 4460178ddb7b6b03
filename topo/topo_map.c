/*
 * The map: every rank's node and NUMA node, every node's switch path, and
 * the cost classes between ranks (docs/topology.md).
 */
#include "topo/topo_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

hcomm_status_t hc_topo_weights_parse(const char *s, hc_topo_weights_t *out)
{
    *out = (hc_topo_weights_t){{0, 1, 3, 15, 30}};
    if (!s || !*s) return HCOMM_OK;
    const char *p = s;
    for (int c = HC_TOPO_NUMA; c < HC_TOPO_NCLASS; c++) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || v <= 0 || v > 1e12 || (c < HC_TOPO_NET ? *end != ',' : *end != '\0'))
            return hc_error(HCOMM_ERR_INVALID, "HCOMM_TOPO_WEIGHTS=%s: want four positive numbers, "
                            "numa,host,switch,net (default 1,3,15,30)", s);
        out->w[c] = v;
        p = end + 1;
    }
    return HCOMM_OK;
}

hcomm_status_t hc_topo_mode_parse(const char *s, hc_topo_mode_t *out)
{
    if (!s || !strcasecmp(s, "full")) *out = HC_TOPO_MODE_FULL;
    else if (!strcasecmp(s, "local")) *out = HC_TOPO_MODE_LOCAL;
    else if (!strcasecmp(s, "off")) *out = HC_TOPO_MODE_OFF;
    else return hc_error(HCOMM_ERR_INVALID, "HCOMM_TOPO=%s: want off, local or full", s);
    return HCOMM_OK;
}

void hc_topo_map_free(hc_topo_map_t *map)
{
    if (!map) return;
    free(map->node);
    free(map->numa);
    free(map->name);
    free(map->sw);
    free(map->leaf);
    free(map->ncost);
    free(map);
}

hcomm_status_t hc_topo_map_new(int n, const int *node, const int *numa, int nnodes,
                               const char *const *names, const char *const *sw,
                               const hc_topo_weights_t *weights, hc_topo_map_t **map_p)
{
    if (n < 1 || nnodes < 1 || nnodes > n)
        return hc_error(HCOMM_ERR_INVALID, "topology map: %d ranks on %d nodes", n, nnodes);
    hc_topo_map_t *m = calloc(1, sizeof(*m));
    int *renum = malloc(sizeof(int) * (size_t)nnodes);
    if (!m || !renum) goto nomem;
    m->n = n;
    m->node = malloc(sizeof(int) * (size_t)n);
    m->numa = malloc(sizeof(int) * (size_t)n);
    m->name = calloc((size_t)nnodes, sizeof(*m->name));
    m->sw = calloc((size_t)nnodes, sizeof(*m->sw));
    m->leaf = malloc(sizeof(int) * (size_t)nnodes);
    if (!m->node || !m->numa || !m->name || !m->sw || !m->leaf) goto nomem;
    /* Nodes renumbered by their lowest rank. */
    for (int k = 0; k < nnodes; k++) renum[k] = -1;
    for (int r = 0; r < n; r++) {
        if (node[r] < 0 || node[r] >= nnodes) {
            free(renum);
            hc_topo_map_free(m);
            return hc_error(HCOMM_ERR_INVALID, "topology map: rank %d on node %d of %d", r, node[r],
                            nnodes);
        }
        if (renum[node[r]] < 0) {
            int k = m->nnodes++;
            renum[node[r]] = k;
            snprintf(m->name[k], HC_TOPO_NAME_MAX, "%s", names && names[node[r]] ? names[node[r]] : "");
            if (!m->name[k][0]) snprintf(m->name[k], HC_TOPO_NAME_MAX, "node%d", k);
            snprintf(m->sw[k], HC_TOPO_PATH_MAX, "%s", sw && sw[node[r]] ? sw[node[r]] : "");
        }
        m->node[r] = renum[node[r]];
        m->numa[r] = numa ? numa[r] : -1;
    }
    free(renum);
    renum = NULL;
    /* Leaf groups: nodes with the same (known) switch path. */
    for (int k = 0; k < m->nnodes; k++) {
        m->leaf[k] = -1;
        if (!m->sw[k][0]) continue;
        for (int j = 0; j < k && m->leaf[k] < 0; j++)
            if (!strcmp(m->sw[j], m->sw[k])) m->leaf[k] = m->leaf[j];
        if (m->leaf[k] < 0) m->leaf[k] = m->nleaves++;
    }
    if (weights) m->weights = *weights;
    else (void)hc_topo_weights_parse(NULL, &m->weights);
    *map_p = m;
    return HCOMM_OK;
nomem:
    free(renum);
    hc_topo_map_free(m);
    return hc_error(HCOMM_ERR_NO_MEMORY, "topology map of %d ranks", n);
}

int hc_topo_class(const hc_topo_map_t *m, int a, int b)
{
    if (a == b) return HC_TOPO_SELF;
    int na = m->node[a], nb = m->node[b];
    if (na == nb) return m->numa[a] >= 0 && m->numa[a] == m->numa[b] ? HC_TOPO_NUMA : HC_TOPO_HOST;
    /* Unknown switch: one switch for the whole cluster. */
    if (m->leaf[na] < 0 || m->leaf[nb] < 0 || m->leaf[na] == m->leaf[nb]) return HC_TOPO_SWITCH;
    return HC_TOPO_NET;
}

/* ---- loading and dumping ---------------------------------------------------------------- */

typedef struct {
    int n, cap;                 /* rank lines: ranks 0..n-1 must all appear */
    int *node, *numa;
    int nnodes, ncap;
    char (*names)[HC_TOPO_NAME_MAX];
    char (*sw)[HC_TOPO_PATH_MAX];
    hcomm_status_t oom;
} hc_topo_load_t;

static int hc_topo_load_node(hc_topo_load_t *L, const char *name)
{
    for (int k = 0; k < L->nnodes; k++)
        if (!strcmp(L->names[k], name)) return k;
    if (L->nnodes == L->ncap) {
        int cap = L->ncap ? 2 * L->ncap : 64;
        void *a = realloc(L->names, sizeof(*L->names) * (size_t)cap);
        if (!a) return -1;
        L->names = a;
        void *b = realloc(L->sw, sizeof(*L->sw) * (size_t)cap);
        if (!b) return -1;
        L->sw = b;
        L->ncap = cap;
    }
    int k = L->nnodes++;
    snprintf(L->names[k], HC_TOPO_NAME_MAX, "%s", name);
    L->sw[k][0] = '\0';
    return k;
}

static hcomm_status_t hc_topo_load_node_cb(void *arg, const char *name, const char *sw, const char *where)
{
    hc_topo_load_t *L = arg;
    int k = hc_topo_load_node(L, name);
    if (k < 0) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: topology file", where);
    if (L->sw[k][0] && strcmp(L->sw[k], sw))
        return hc_error(HCOMM_ERR_INVALID, "%s: node %s listed twice with different switches (%s, %s)",
                        where, name, L->sw[k], sw);
    snprintf(L->sw[k], HC_TOPO_PATH_MAX, "%s", sw);
    return HCOMM_OK;
}

static hcomm_status_t hc_topo_load_rank_cb(void *arg, int r, const char *node, int numa, const char *where)
{
    hc_topo_load_t *L = arg;
    if (r >= L->cap) {
        int cap = HC_MAX(r + 1, 2 * L->cap);
        int *a = realloc(L->node, sizeof(int) * (size_t)cap);
        if (!a) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: topology file", where);
        L->node = a;
        int *b = realloc(L->numa, sizeof(int) * (size_t)cap);
        if (!b) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: topology file", where);
        L->numa = b;
        for (int i = L->cap; i < cap; i++) L->node[i] = -1;
        L->cap = cap;
    }
    if (L->node[r] >= 0) return hc_error(HCOMM_ERR_INVALID, "%s: rank %d placed twice", where, r);
    int k = hc_topo_load_node(L, node);
    if (k < 0) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: topology file", where);
    L->node[r] = k;
    L->numa[r] = numa;
    if (r >= L->n) L->n = r + 1;
    return HCOMM_OK;
}

static hcomm_status_t hc_topo_load_system_cb(void *arg, const hc_topo_sys_t *sys, const char *where)
{
    (void)arg;
    (void)sys;
    return hc_error(
        HCOMM_ERR_INVALID,
        "%s: an NCCL <system> file describes one node's internals, not the "
        "ranks of a job: a map needs rank lines or hcomm's <cluster> with <rank> elements "
        "(docs/topology.md)",
        where);
}

hcomm_status_t hc_topo_map_load(const char *path, const hc_topo_weights_t *weights,
                                hc_topo_map_t **map_p)
{
    hc_topo_load_t L = {0};
    hc_topo_file_cb_t cb = {.node = hc_topo_load_node_cb,
                            .rank = hc_topo_load_rank_cb,
                            .system = hc_topo_load_system_cb,
                            .arg = &L};
    hcomm_status_t st = hc_topo_file_parse(path, &cb);
    if (st == HCOMM_OK && L.n == 0)
        st = hc_error(HCOMM_ERR_INVALID,
                      "%s: no rank lines (or <rank> elements): a map needs the "
                      "placement of every rank",
                      path);
    for (int r = 0; st == HCOMM_OK && r < L.n; r++)
        if (L.node[r] < 0) st = hc_error(HCOMM_ERR_INVALID, "%s: rank %d has no rank line (ranks "
                                         "0..%d are placed)", path, r, L.n - 1);
    if (st == HCOMM_OK) {
        const char **names = malloc(sizeof(char *) * (size_t)L.nnodes);
        const char **sw = malloc(sizeof(char *) * (size_t)L.nnodes);
        if (!names || !sw) {
            st = hc_error(HCOMM_ERR_NO_MEMORY, "%s: topology map", path);
        } else {
            for (int k = 0; k < L.nnodes; k++) {
                names[k] = L.names[k];
                sw[k] = L.sw[k];
            }
            /* Nodes listed without ranks are dropped (renumbering keeps
             * only the nodes some rank is on). */
            int used = 0;
            int *idx = calloc((size_t)L.nnodes, sizeof(int));
            int *node = malloc(sizeof(int) * (size_t)L.n);
            const char **un = malloc(sizeof(char *) * (size_t)L.nnodes), **us = malloc(sizeof(char *) * (size_t)L.nnodes);
            if (!idx || !node || !un || !us) {
                st = hc_error(HCOMM_ERR_NO_MEMORY, "%s: topology map", path);
            } else {
                for (int k = 0; k < L.nnodes; k++) idx[k] = -1;
                for (int r = 0; r < L.n; r++) {
                    int k = L.node[r];
                    if (idx[k] < 0) {
                        idx[k] = used;
                        un[used] = names[k];
                        us[used] = sw[k];
                        used++;
                    }
                    node[r] = idx[k];
                }
                st = hc_topo_map_new(L.n, node, L.numa, used, un, us, weights, map_p);
            }
            free(idx);
            free(node);
            free(un);
            free(us);
        }
        free(names);
        free(sw);
    }
    free(L.node);
    free(L.numa);
    free(L.names);
    free(L.sw);
    return st;
}

hcomm_status_t hc_topo_map_dump(const hc_topo_map_t *m, FILE *f)
{
    fprintf(f, "# hcomm topology v1: %d ranks on %d nodes (docs/topology.md)\n", m->n, m->nnodes);
    for (int k = 0; k < m->nnodes; k++)
        if (m->sw[k][0]) fprintf(f, "node %s switch %s\n", m->name[k], m->sw[k]);
    for (int r = 0; r < m->n; r++) {
        if (m->numa[r] >= 0)
            fprintf(f, "rank %d node %s numa %d\n", r, m->name[m->node[r]], m->numa[r]);
        else
            fprintf(f, "rank %d node %s\n", r, m->name[m->node[r]]);
    }
    return ferror(f) ? hc_error(HCOMM_ERR_INVALID, "topology dump: write error") : HCOMM_OK;
}

/* ---- calibration ------------------------------------------------------------------------- */

hcomm_status_t hc_topo_map_calibrate(hc_topo_map_t *map, const hc_topo_meas_t *m, int n)
{
    if (n <= 0) return HCOMM_OK;
    size_t nn = (size_t)map->nnodes;
    double *c = malloc(sizeof(double) * nn * nn);
    if (!c) return hc_error(HCOMM_ERR_NO_MEMORY, "topology calibration of %zu nodes", nn);
    for (size_t i = 0; i < nn * nn; i++) c[i] = -1;
    /* A rank on each node stands for it in the class of a pair. */
    int *rep = malloc(sizeof(int) * nn);
    if (!rep) {
        free(c);
        return hc_error(HCOMM_ERR_NO_MEMORY, "topology calibration of %zu nodes", nn);
    }
    for (int r = map->n - 1; r >= 0; r--) rep[map->node[r]] = r;
    double sum[HC_TOPO_NCLASS] = {0}, lat = 0, bw = 0, all = 0;
    int cnt[HC_TOPO_NCLASS] = {0}, used = 0;
    for (int i = 0; i < n; i++) {
        if (m[i].a < 0 || m[i].b < 0 || (size_t)m[i].a >= nn || (size_t)m[i].b >= nn || m[i].a == m[i].b ||
            !(m[i].gbps > 0) || !(m[i].lat_us >= 0))
            continue;
        double t = m[i].lat_us + (double)HC_TOPO_REF_BYTES / (m[i].gbps * 1e3);
        c[(size_t)m[i].a * nn + (size_t)m[i].b] = c[(size_t)m[i].b * nn + (size_t)m[i].a] = t;
        int cls = hc_topo_class(map, rep[m[i].a], rep[m[i].b]);
        sum[cls] += t;
        cnt[cls]++;
        lat += m[i].lat_us;
        bw += m[i].gbps;
        all += t;
        used++;
    }
    if (!used) {
        free(c);
        free(rep);
        return HCOMM_OK;
    }
    for (size_t a = 0; a < nn; a++)
        for (size_t b = 0; b < nn; b++) {
            if (a == b) c[a * nn + b] = 0;
            if (a == b || c[a * nn + b] >= 0) continue;
            int cls = hc_topo_class(map, rep[a], rep[b]);
            c[a * nn + b] = cnt[cls] ? sum[cls] / cnt[cls] : all / used;
        }
    free(map->ncost);
    map->ncost = c;
    map->net_lat_us = lat / used;
    map->net_gbps = bw / used;
    map->measured_pairs = used;
    free(rep);
    return HCOMM_OK;
}
