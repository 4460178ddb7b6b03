/*
 * The topology calibration probe (docs/topology.md), run at the end of
 * hcomm_init when HCOMM_TOPO_PROBE=1, HCOMM_TOPO=full and the job spans
 * nodes. One leader per node (its lowest rank) measures small-message
 * latency and bandwidth (2 x 256 KiB) to other nodes' leaders in rounds of a
 * round-robin tournament (every pair of a round at once): all pairs up to
 * 16 nodes, 4 rounds beyond (pairs not measured take their class's mean).
 * The amount of work is fixed by the node count, never by a clock, so that
 * partners never disagree on what comes next. The results are allgathered,
 * so every rank installs the same costs (hc_topo_map_calibrate) and derives
 * the same rings; rank 0 keeps them in HCOMM_TOPO_CACHE, keyed by the node
 * set and the network driver, and a job on the same nodes reads them
 * instead of probing.
 *
 * It is written on the public API (blocking p2p, broadcast, allgather) on a
 * private communicator of all ranks, and ends before hcomm_init returns.
 */
#include "api/api.h"
#include "coll/coll.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HC_PROBE_ALL_PAIRS 16 /* nodes: up to this, every pair */
#define HC_PROBE_ROUNDS_BIG 4
#define HC_PROBE_MAX_ENTRIES 16 /* per leader: at most one pair per round */
#define HC_PROBE_PINGS 8
#define HC_PROBE_BW_MSGS 2
#define HC_PROBE_BW_BYTES ((size_t)256 << 10) /* per message */
#define HC_PROBE_TAG 0x70726f00

typedef struct {
    int32_t n;
    int32_t pad;
    hc_topo_meas_t e[HC_PROBE_MAX_ENTRIES];
} hc_probe_row_t;

static int hc_probe_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The partner of node k in round r of a round-robin over M (even) players,
 * M - 1 fixed and the others rotating; -1: a bye (M > N). */
static int hc_probe_partner(int k, int r, int M, int N)
{
    int m = M - 1, p;
    if (k == m) p = r % m;
    else if (k == r % m) p = m;
    else p = ((2 * r - k) % m + m) % m; /* pairs (r + i, r - i): m is odd, so all differ */
    return p >= N ? -1 : p;
}

static hcomm_status_t hc_probe_pair(hcomm_comm_t pc, int peer, bool client, int tag, uint8_t *buf,
                                    hc_topo_meas_t *out)
{
    double rtt[HC_PROBE_PINGS];
    hcomm_status_t st = HCOMM_OK;
    for (int i = -2; i < HC_PROBE_PINGS && st == HCOMM_OK; i++) {
        uint64_t t0 = hc_time_ns();
        if (client) {
            if ((st = hcomm_send(buf, 8, HCOMM_UINT8, peer, tag, pc)) == HCOMM_OK)
                st = hcomm_recv(buf, 8, HCOMM_UINT8, peer, tag, pc);
        } else {
            if ((st = hcomm_recv(buf, 8, HCOMM_UINT8, peer, tag, pc)) == HCOMM_OK)
                st = hcomm_send(buf, 8, HCOMM_UINT8, peer, tag, pc);
        }
        if (i >= 0) rtt[i] = (double)(hc_time_ns() - t0) / 1e3;
    }
    uint64_t t0 = hc_time_ns();
    for (int i = 0; i < HC_PROBE_BW_MSGS && st == HCOMM_OK; i++)
        st = client ? hcomm_send(buf, HC_PROBE_BW_BYTES, HCOMM_UINT8, peer, tag + 1, pc)
                    : hcomm_recv(buf, HC_PROBE_BW_BYTES, HCOMM_UINT8, peer, tag + 1, pc);
    if (st == HCOMM_OK)
        st = client ? hcomm_recv(buf, 8, HCOMM_UINT8, peer, tag + 2, pc)
                    : hcomm_send(buf, 8, HCOMM_UINT8, peer, tag + 2, pc);
    if (st != HCOMM_OK || !client) return st;
    double total = (double)(hc_time_ns() - t0) / 1e3;
    qsort(rtt, HC_PROBE_PINGS, sizeof(double), hc_probe_cmp_double);
    double lat = rtt[HC_PROBE_PINGS / 2] / 2;
    double move = total - lat; /* the ack's one-way time out */
    if (move < 1) move = 1;
    out->lat_us = (float)lat;
    out->gbps = (float)((double)HC_PROBE_BW_MSGS * (double)HC_PROBE_BW_BYTES / (move * 1e3));
    return HCOMM_OK;
}

/* The cache file for this job's nodes and network driver, or "" (none). */
static void hc_probe_cache_path(const hc_topo_map_t *map, char *path, size_t len)
{
    path[0] = '\0';
    const char *dir = hc_cfg.topo_cache;
    char def[512];
    if (!strcmp(dir, "none")) return;
    if (!dir[0]) {
        const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (x && x[0]) snprintf(def, sizeof(def), "%s/hcomm", x);
        else if (home && home[0]) snprintf(def, sizeof(def), "%s/.cache/hcomm", home);
        else return;
        dir = def;
    }
    const char *net = "none";
    for (int i = 0; i < hc_ctx.ndrvs; i++)
        if (hc_ctx.drvs[i]->ops->scope == HC_DRV_SCOPE_NET) net = hc_ctx.drvs[i]->ops->name;
    /* Key: the node names in node order (the order is the job's: nodes
     * numbered by first rank) and the driver. */
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < map->nnodes; k++)
        for (const char *p = map->name[k]; ; p++) {
            h = (h ^ (uint8_t)*p) * 1099511628211ull;
            if (!*p) break;
        }
    for (const char *p = net; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    snprintf(path, len, "%s/topo-%d-%s-%016llx.txt", dir, map->nnodes, net, (unsigned long long)h);
}

/* Rank 0: reads the cache; the number of entries (0: none). */
static int hc_probe_cache_read(const char *path, const hc_topo_map_t *map, hc_topo_meas_t *e, int max)
{
    FILE *f = path[0] ? fopen(path, "r") : NULL;
    if (!f) return 0;
    char line[512];
    int n = 0, nodes = -1;
    if (!fgets(line, sizeof(line), f) || sscanf(line, "hcomm topology probe v1 nodes %d", &nodes) != 1 ||
        nodes != map->nnodes) {
        fclose(f);
        hc_log_info("topology probe: ignoring cache %s (not this job's format or node count)", path);
        return 0;
    }
    while (n < max && fgets(line, sizeof(line), f)) {
        hc_topo_meas_t m;
        if (sscanf(line, "pair %d %d %f %f", &m.a, &m.b, &m.lat_us, &m.gbps) == 4 && m.a >= 0 &&
            m.b >= 0 && m.a < nodes && m.b < nodes && m.a != m.b && m.gbps > 0 && m.lat_us >= 0)
            e[n++] = m;
    }
    fclose(f);
    return n;
}

static void hc_probe_cache_write(const char *path, const hc_topo_map_t *map, const hc_topo_meas_t *e, int n)
{
    if (!path[0]) return;
    char dir[600];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        for (char *p = dir + 1; *p; p++)
            if (*p == '/') {
                *p = '\0';
                (void)mkdir(dir, 0700);
                *p = '/';
            }
        (void)mkdir(dir, 0700);
    }
    char tmp[700];
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        hc_log_info("topology probe: cannot write the cache %s: %s", tmp, strerror(errno));
        return;
    }
    fprintf(f, "hcomm topology probe v1 nodes %d\n", map->nnodes);
    for (int k = 0; k < map->nnodes; k++) fprintf(f, "# node %d %s\n", k, map->name[k]);
    for (int i = 0; i < n; i++) fprintf(f, "pair %d %d %.3f %.4f\n", e[i].a, e[i].b, e[i].lat_us, e[i].gbps);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        hc_log_info("topology probe: cannot write the cache %s: %s", path, strerror(errno));
        remove(tmp);
    }
}

static void hc_probe_report(const hc_topo_map_t *map, const char *how, double ms)
{
    if (hc_ctx.rank != 0 || hc_log_level_current < HC_LOG_INFO) return;
    hc_log_info("topology probe: %d node pairs %s%.0f ms: latency %.1f us, bandwidth %.2f GB/s (means); "
                "node costs are now us per %zu bytes", map->measured_pairs, how, ms, map->net_lat_us,
                map->net_gbps, HC_TOPO_REF_BYTES);
    int nn = map->nnodes;
    for (int a = 0; a < nn && nn <= 16; a++) {
        char row[16 * 12 + 64];
        size_t len = (size_t)snprintf(row, sizeof(row), "topology probe: node %2d:", a);
        for (int b = 0; b < nn; b++)
            len += (size_t)snprintf(row + len, sizeof(row) - len, " %8.1f", map->ncost[a * nn + b]);
        hc_log_info("%s", row);
    }
}

hcomm_status_t hc_api_topo_probe(void)
{
    hc_topo_map_t *map = hc_ctx.topo;
    if (!hc_cfg.topo_probe || !map || map->nnodes < 2 || hc_ctx.topo_mode != HC_TOPO_MODE_FULL)
        return HCOMM_OK;
    uint64_t t_start = hc_time_ns();
    int N = map->nnodes, M = N + (N & 1);
    int rounds = N <= HC_PROBE_ALL_PAIRS ? M - 1 : HC_PROBE_ROUNDS_BIG;
    /* The probe's own communicator of every rank, made locally (no
     * collective on world: world's state, its ring, its hierarchy, must
     * not exist before the costs do). Its context id is one no parent's
     * internal communicator can have (coll_topo.c), and it never runs a
     * hierarchical algorithm (an internal id). */
    hcomm_comm_t pc = NULL;
    hcomm_status_t st;
    {
        int *all_ranks = malloc(sizeof(int) * (size_t)hc_ctx.size);
        if (!all_ranks) return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: topology probe");
        for (int r = 0; r < hc_ctx.size; r++) all_ranks[r] = r;
        uint32_t saved = hc_ctx.next_ctx_id;
        st = hc_comm_create(HC_CTX_SUB | 0x3fffffffu, hc_ctx.size, all_ranks, &pc);
        hc_ctx.next_ctx_id = saved;
        free(all_ranks);
        if (st != HCOMM_OK) return st;
    }
    int cap = rounds * N + 1;
    hc_topo_meas_t *all = calloc((size_t)cap, sizeof(*all));
    hc_probe_row_t *rows = calloc((size_t)hc_ctx.size, sizeof(*rows));
    uint8_t *buf = malloc(HC_PROBE_BW_BYTES);
    char path[1024];
    hc_probe_cache_path(map, path, sizeof(path));
    if (!all || !rows || !buf) {
        st = hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: topology probe");
        goto out;
    }
    int32_t cached = hc_ctx.rank == 0 ? hc_probe_cache_read(path, map, all, cap) : 0;
    if ((st = hcomm_broadcast(&cached, 1, HCOMM_INT32, 0, pc)) != HCOMM_OK) goto out;
    if (cached > 0) {
        if ((st = hcomm_broadcast(all, (size_t)cached * sizeof(*all), HCOMM_UINT8, 0, pc)) != HCOMM_OK)
            goto out;
        if ((st = hc_topo_map_calibrate(map, all, cached)) != HCOMM_OK) goto out;
        hc_coll_topo_recalibrated();
        char how[1100];
        snprintf(how, sizeof(how), "from the cache %s in ", path);
        hc_probe_report(map, how, (double)(hc_time_ns() - t_start) / 1e6);
        goto out;
    }
    /* Leaders: the lowest rank of each node. */
    int my_node = map->node[hc_ctx.rank];
    bool leader = true;
    for (int r = 0; r < hc_ctx.rank && leader; r++) leader = map->node[r] != my_node;
    hc_probe_row_t mine = {0};
    for (int r = 0; r < rounds && leader && st == HCOMM_OK; r++) {
        int pn = hc_probe_partner(my_node, r, M, N);
        if (pn < 0) continue;
        int peer = 0;
        while (map->node[peer] != pn) peer++; /* its leader */
        bool client = my_node < pn;
        hc_topo_meas_t m = {.a = my_node, .b = pn};
        st = hc_probe_pair(pc, peer, client, HC_PROBE_TAG + 4 * r, buf, &m);
        if (st == HCOMM_OK && client && mine.n < HC_PROBE_MAX_ENTRIES) mine.e[mine.n++] = m;
    }
    if (st != HCOMM_OK) {
        char why[400]; /* hc_error writes the buffer hcomm_last_error reads */
        snprintf(why, sizeof(why), "%s", hcomm_last_error());
        hc_error(st, "hcomm_init: topology probe (HCOMM_TOPO_PROBE=0 skips it): %s", why);
        goto out;
    }
    if ((st = hcomm_allgather(&mine, rows, sizeof(mine), HCOMM_UINT8, pc)) != HCOMM_OK) goto out;
    int n = 0;
    for (int r = 0; r < hc_ctx.size; r++)
        for (int i = 0; i < rows[r].n && i < HC_PROBE_MAX_ENTRIES && n < cap; i++) all[n++] = rows[r].e[i];
    if ((st = hc_topo_map_calibrate(map, all, n)) != HCOMM_OK) goto out;
    hc_coll_topo_recalibrated();
    if (hc_ctx.rank == 0) hc_probe_cache_write(path, map, all, n);
    hc_probe_report(map, "measured in ", (double)(hc_time_ns() - t_start) / 1e6);
out:
    free(all);
    free(rows);
    free(buf);
    if (pc) hc_comm_destroy(pc);
    return st;
}
