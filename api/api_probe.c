/*
 * The topology calibration probe (docs/topology.md), run at the end of
 * hcomm_init when HCOMM_TOPO_PROBE=1, HCOMM_TOPO=full and the job spans
 * nodes. One leader per node (its lowest rank) measures small-message
 * latency and bandwidth to other nodes' leaders in rounds of a round-robin
 * tournament (every pair of a round at once): all pairs up to 16 nodes, 4
 * rounds beyond (pairs not measured take their class's mean). The results
 * are allgathered, so every rank installs the same costs
 * (hc_topo_map_calibrate) and derives the same rings; rank 0 keeps them in
 * HCOMM_TOPO_CACHE, keyed by the node set, the network driver and rank 0's
 * links through it (its local_links op: tcp's rails, the RDMA device and
 * port, the DPDK port), and a job on the same nodes and links reads them
 * instead of probing.
 *
 * Bounded by time (HCOMM_TOPO_PROBE_BUDGET, rank 0's value for everyone)
 * without letting partners disagree on what comes next:
 *   - before each round every rank takes part in a one-double MAX allreduce
 *     of its time in the probe (counted from the first one, when every rank
 *     has come); all get the same answer, so all go on or all stop (pairs
 *     of the rounds left take their class's mean);
 *   - the round's slice is what is left of the budget over the rounds
 *     left; inside a pair the client (the lower node) alone decides, from
 *     the slice and what it has measured, whether to send one more ping or
 *     one more chunk, and says so in the message itself (a ping's "more"
 *     flag, a chunk's size header, 0 at the end): the server follows the
 *     messages, never a clock. A fast link gets the whole 512 KiB at once
 *     after two chunks of 4 KiB; a slow one chunk by chunk (doubling, up to
 *     256 KiB), each only when the rate seen says it ends inside the slice.
 * A round thus costs at most its slice, plus what a pair always does (two
 * pings, two chunks of 4 KiB) and a chunk the rate before it misjudged; the
 * probe ends within the budget and one such overrun.
 *
 * It is written on the public API (blocking p2p, broadcast, allreduce,
 * allgather) on a private communicator of all ranks, and ends before
 * hcomm_init returns.
 */
#include "api/api.h"
#include "coll/coll.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HC_PROBE_ALL_PAIRS 16 /* nodes: up to this, every pair */
#define HC_PROBE_ROUNDS_BIG 4
#define HC_PROBE_MAX_ENTRIES 16 /* per leader: at most one pair per round */
#define HC_PROBE_WARMUP 2       /* pings not counted (1 when only 2 are sent) */
#define HC_PROBE_PINGS 8        /* counted pings, at most */
#define HC_PROBE_CHUNK_MIN ((size_t)4 << 10)
#define HC_PROBE_CHUNK_MAX ((size_t)256 << 10)
#define HC_PROBE_BW_BYTES ((size_t)512 << 10) /* per pair, at most: 4+4+8+...+256 KiB */
#define HC_PROBE_TAG 0x70726f00               /* + 4 per round: ping, header, chunk, ack */

typedef struct {
    int32_t n;
    int32_t shrunk; /* pairs of this leader measured with fewer than HC_PROBE_BW_BYTES */
    hc_topo_meas_t e[HC_PROBE_MAX_ENTRIES];
} hc_probe_row_t;

/* What every rank takes from rank 0, so that all decide alike. */
typedef struct {
    int32_t cached; /* entries in rank 0's cache; 0: probe */
    int32_t pad;
    double budget_s; /* HCOMM_TOPO_PROBE_BUDGET; 0: none */
} hc_probe_plan_t;

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
    if (k == m)
        p = r % m;
    else if (k == r % m)
        p = m;
    else
        p = ((2 * r - k) % m + m) % m; /* pairs (r + i, r - i): m is odd, so all differ */
    return p >= N ? -1 : p;
}

static double hc_probe_us_since(uint64_t t0)
{
    return (double)(hc_time_ns() - t0) / 1e3;
}

/* The client's pings: one more while it and the next fit in a quarter of
 * the slice (us; HUGE_VAL: no limit), the first two always; *rt_p: the
 * median round trip (us) after the warmup. t0: when the pair began. */
static hcomm_status_t hc_probe_pings(hcomm_comm_t pc, int peer, int tag, double slice_us,
                                     uint64_t t0, double *rt_p)
{
    double rtt[HC_PROBE_WARMUP + HC_PROBE_PINGS];
    int n = 0;
    hcomm_status_t st = HCOMM_OK;
    for (bool more = true; more && st == HCOMM_OK;) {
        /* After this ping, one more if it and this one fit in a quarter of the slice. */
        more = n + 1 < (int)HC_ARRAY_SIZE(rtt) &&
               (n == 0 || hc_probe_us_since(t0) + 2 * rtt[n - 1] <= slice_us / 4);
        uint64_t msg = more, t = hc_time_ns();
        if ((st = hcomm_send(&msg, 8, HCOMM_UINT8, peer, tag, pc)) == HCOMM_OK &&
            (st = hcomm_recv(&msg, 8, HCOMM_UINT8, peer, tag, pc)) == HCOMM_OK)
            rtt[n++] = hc_probe_us_since(t);
    }
    if (st != HCOMM_OK) return st;
    int skip = n > HC_PROBE_WARMUP ? HC_PROBE_WARMUP : 1;
    qsort(rtt + skip, (size_t)(n - skip), sizeof(double), hc_probe_cmp_double);
    *rt_p = rtt[skip + (n - skip) / 2];
    return HCOMM_OK;
}

/* Bandwidth. Two chunks of 4 KiB, each acknowledged before the next, show
 * roughly what the link does. A link that at that rate moves the whole
 * measurement in half of what is left of the slice gets it at once, as 2 x
 * 256 KiB and one acknowledgement (round trips are then small beside the
 * transfer, and only one is counted out). A slower one goes on chunk by
 * chunk, stop-and-wait (as many bytes as so far, up to 256 KiB): a chunk
 * goes when it and the one before could both still be on their way at the
 * rate seen so far and end inside the slice; a token-bucket shaper lets a
 * chunk through at once and holds what follows until its bytes are paid, so
 * a chunk's round trip may show the one before it. The rate is the bytes
 * before the last chunk over the time since the first, less the round
 * trips: right for such a shaper, half the rate on a plain link. A header
 * of 0 and its acknowledgement close the pair, so that the client's clock
 * covers every byte. A header is a chunk's size and, above bit 32, how many
 * chunks follow it.
 *
 * out->gbps and *bytes_p: the bandwidth and the bytes measured; t0: when
 * the pair began; rt: the round trip (us). */
static hcomm_status_t hc_probe_chunks(hcomm_comm_t pc, int peer, int tag, uint8_t *buf,
                                      double slice_us, uint64_t t0, double rt, hc_topo_meas_t *out,
                                      size_t *bytes_p)
{
    hcomm_status_t st = HCOMM_OK;
    size_t sent = 0, last_b = 0;
    int acks = 0;
    double burst_us = 0;
    bool closing = false;
    uint64_t t_bw = hc_time_ns();
    for (;;) {
        size_t size = sent < HC_PROBE_CHUNK_MIN ? HC_PROBE_CHUNK_MIN
                                                : HC_MIN(sent, HC_PROBE_CHUNK_MAX),
               count = 1;
        size = closing ? 0 : HC_MIN(size, HC_PROBE_BW_BYTES - sent);
        bool burst = false;
        if (size && sent == 2 * HC_PROBE_CHUNK_MIN) {
            double el = hc_probe_us_since(t_bw);
            double rate =
                (double)HC_PROBE_CHUNK_MIN / HC_MAX(el - 2 * rt, el / 4); /* bytes per us */
            burst = hc_probe_us_since(t0) + 2 * rt +
                        (double)(HC_PROBE_CHUNK_MIN + HC_PROBE_BW_BYTES) / rate <=
                    slice_us / 2;
        }
        if (burst) {
            size = HC_PROBE_CHUNK_MAX;
            count = HC_PROBE_BW_BYTES / HC_PROBE_CHUNK_MAX;
        } else if (size && sent > last_b) {
            double el = hc_probe_us_since(t_bw);
            double rate = (double)(sent - last_b) / HC_MAX(el - acks * rt, el / 4);
            if (hc_probe_us_since(t0) + 2 * rt + (double)(last_b + size) / rate > slice_us)
                size = 0;
        }
        uint64_t hdr = (uint64_t)size | (uint64_t)count << 32, t = hc_time_ns();
        if ((st = hcomm_send(&hdr, 8, HCOMM_UINT8, peer, tag + 1, pc)) != HCOMM_OK) break;
        for (size_t i = 0; i < count && size && st == HCOMM_OK; i++)
            st = hcomm_send(buf, size, HCOMM_UINT8, peer, tag + 2, pc);
        if (st != HCOMM_OK ||
            (st = hcomm_recv(&hdr, 8, HCOMM_UINT8, peer, tag + 3, pc)) != HCOMM_OK || !size)
            break;
        if (burst) burst_us = hc_probe_us_since(t);
        closing = burst;
        last_b = size * count;
        sent += last_b;
        acks++;
    }
    if (st != HCOMM_OK) return st;
    /* Bandwidth: the burst's bytes over its time less its round trip; or
     * the chunks' over the time from the first header to the last
     * acknowledgement, less a round trip per acknowledgement. */
    double bytes = burst_us > 0 ? (double)HC_PROBE_BW_BYTES : (double)sent;
    double total = burst_us > 0 ? burst_us : hc_probe_us_since(t_bw);
    double move = HC_MAX(total - (burst_us > 0 ? 1 : acks + 1) * rt, total / 4);
    out->gbps = (float)(bytes / (HC_MAX(move, 0.001) * 1e3));
    *bytes_p = burst_us > 0 ? HC_PROBE_BW_BYTES : sent;
    return HCOMM_OK;
}

/* The client's side of a pair: pings, then chunks, each only when the
 * slice (us; HUGE_VAL: no limit) leaves room for it by what the pair has
 * measured so far; the first two pings and the first two chunks always go. */
static hcomm_status_t hc_probe_client(hcomm_comm_t pc, int peer, int tag, uint8_t *buf,
                                      double slice_us, hc_topo_meas_t *out, size_t *bytes_p)
{
    uint64_t t0 = hc_time_ns();
    double rt;
    hcomm_status_t st = hc_probe_pings(pc, peer, tag, slice_us, t0, &rt);
    if (st != HCOMM_OK) return st;
    st = hc_probe_chunks(pc, peer, tag, buf, slice_us, t0, rt, out, bytes_p);
    if (st == HCOMM_OK) out->lat_us = (float)(rt / 2);
    return st;
}

/* The server's side: it echoes pings until one says it is the last, then
 * takes and acknowledges chunks until a header of 0, which it
 * acknowledges too. */
static hcomm_status_t hc_probe_server(hcomm_comm_t pc, int peer, int tag, uint8_t *buf)
{
    hcomm_status_t st = HCOMM_OK;
    uint64_t msg = 1;
    for (int n = 0; msg && n < HC_PROBE_WARMUP + HC_PROBE_PINGS && st == HCOMM_OK; n++)
        if ((st = hcomm_recv(&msg, 8, HCOMM_UINT8, peer, tag, pc)) == HCOMM_OK)
            st = hcomm_send(&msg, 8, HCOMM_UINT8, peer, tag, pc);
    for (size_t got = 0; st == HCOMM_OK;) {
        uint64_t hdr;
        if ((st = hcomm_recv(&hdr, 8, HCOMM_UINT8, peer, tag + 1, pc)) != HCOMM_OK) break;
        size_t size = (size_t)(hdr & 0xffffffffu), count = (size_t)(hdr >> 32);
        if (size > HC_PROBE_CHUNK_MAX || count < 1 ||
            count > HC_PROBE_BW_BYTES / HC_PROBE_CHUNK_MAX ||
            got + size * count > HC_PROBE_BW_BYTES + 2 * HC_PROBE_CHUNK_MIN)
            return hc_error(HCOMM_ERR_INTERNAL,
                            "topology probe: rank %d announced %zu chunks of %zu bytes "
                            "after %zu",
                            peer, count, size, got);
        for (size_t i = 0; i < count && size && st == HCOMM_OK; i++)
            st = hcomm_recv(buf, size, HCOMM_UINT8, peer, tag + 2, pc);
        if (st != HCOMM_OK ||
            (st = hcomm_send(&hdr, 8, HCOMM_UINT8, peer, tag + 3, pc)) != HCOMM_OK || !size)
            break;
        got += size * count;
    }
    return st;
}

/* FNV-1a of string s into h (with its terminating NUL when nul). */
static uint64_t hc_probe_fnv(uint64_t h, const char *s, bool nul)
{
    for (;; s++) {
        if (!*s && !nul) return h;
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
        if (!*s) return h;
    }
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
        if (x && x[0])
            snprintf(def, sizeof(def), "%s/hcomm", x);
        else if (home && home[0])
            snprintf(def, sizeof(def), "%s/.cache/hcomm", home);
        else
            return;
        dir = def;
    }
    const char *net = "none";
    char links[512] = "";
    for (int i = 0; i < hc_ctx.ndrvs; i++) {
        hc_drv_t *d = hc_ctx.drvs[i];
        if (d->ops->scope != HC_DRV_SCOPE_NET) continue;
        net = d->ops->name;
        links[0] = '\0';
        if (d->ops->local_links) d->ops->local_links(d, links, sizeof(links));
    }
    /* Key: the node names in node order (the order is the job's: nodes
     * numbered by first rank), the driver and rank 0's links (a matrix
     * measured over one tcp rail is not one over two). */
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < map->nnodes; k++)
        h = hc_probe_fnv(h, map->name[k], true);
    h = hc_probe_fnv(h, net, false);
    h = (h ^ 0xffu) * 1099511628211ull; /* between the driver's name and its links */
    h = hc_probe_fnv(h, links, false);
    snprintf(path, len, "%s/topo-%d-%s-%016llx.txt", dir, map->nnodes, net, (unsigned long long)h);
}

/* Rank 0: reads the cache; the number of entries (0: none). */
static int hc_probe_cache_read(const char *path, const hc_topo_map_t *map, hc_topo_meas_t *e,
                               int max)
{
    FILE *f = path[0] ? fopen(path, "r") : NULL;
    if (!f) return 0;
    char line[512];
    int n = 0, nodes = -1;
    if (!fgets(line, sizeof(line), f) ||
        sscanf(line, "hcomm topology probe v1 nodes %d", &nodes) != 1 || nodes != map->nnodes) {
        fclose(f);
        hc_log_info("topology probe: ignoring cache %s (not this job's format or node count)",
                    path);
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

static void hc_probe_cache_write(const char *path, const hc_topo_map_t *map,
                                 const hc_topo_meas_t *e, int n)
{
    if (!path[0]) return;
    char dir[1024];
    if ((size_t)snprintf(dir, sizeof(dir), "%s", path) >= sizeof(dir)) return;
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
    char tmp[1100];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid()) >= sizeof(tmp)) return;
    FILE *f = fopen(tmp, "w");
    if (!f) {
        hc_log_info("topology probe: cannot write the cache %s: %s", tmp, strerror(errno));
        return;
    }
    fprintf(f, "hcomm topology probe v1 nodes %d\n", map->nnodes);
    for (int k = 0; k < map->nnodes; k++)
        fprintf(f, "# node %d %s\n", k, map->name[k]);
    for (int i = 0; i < n; i++)
        fprintf(f, "pair %d %d %.3f %.4f\n", e[i].a, e[i].b, e[i].lat_us, e[i].gbps);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        hc_log_info("topology probe: cannot write the cache %s: %s", path, strerror(errno));
        remove(tmp);
    }
}

static void hc_probe_report(const hc_topo_map_t *map, const char *how, double ms, double budget_s)
{
    if (hc_ctx.rank != 0 || hc_log_level_current < HC_LOG_INFO) return;
    char budget[64];
    if (budget_s > 0)
        snprintf(budget, sizeof(budget), "budget %g ms", budget_s * 1e3);
    else
        snprintf(budget, sizeof(budget), "no budget");
    hc_log_info("topology probe: %d node pairs %s%.0f ms (%s): latency %.1f us, bandwidth %.2f "
                "GB/s (means); "
                "node costs are now us per %zu bytes",
                map->measured_pairs, how, ms, budget, map->net_lat_us, map->net_gbps,
                HC_TOPO_REF_BYTES);
    int nn = map->nnodes;
    for (int a = 0; a < nn && nn <= 16; a++) {
        char row[16 * 12 + 64];
        size_t len = (size_t)snprintf(row, sizeof(row), "topology probe: node %2d:", a);
        for (int b = 0; b < nn; b++)
            len += (size_t)snprintf(row + len, sizeof(row) - len, " %8.1f", map->ncost[a * nn + b]);
        hc_log_info("%s", row);
    }
}

/* One probe's state (hc_api_topo_probe). */
typedef struct {
    hc_topo_map_t *map;
    hcomm_comm_t pc;     /* the probe's communicator of every rank */
    hc_topo_meas_t *all; /* the pairs' measurements, cap at most */
    int cap;
    hc_probe_row_t *rows; /* every rank's measurements (allgathered) */
    uint8_t *buf;         /* a chunk */
    char path[1024];      /* the cache file, "" (none) */
    hc_probe_plan_t plan;
    int rounds, done;        /* rounds planned, rounds run */
    uint64_t t_start, t_all; /* this rank came; every rank had come (the budget's clock) */
} hc_probe_t;

/* The probe's own communicator of every rank, made locally (no collective
 * on world: world's state, its ring, its hierarchy, must not exist before
 * the costs do). Its context id is one no parent's internal communicator
 * can have (coll_topo.c), and it never runs a hierarchical algorithm (an
 * internal id). */
static hcomm_status_t hc_probe_comm_create(hcomm_comm_t *pc_p)
{
    int *all_ranks = malloc(sizeof(int) * (size_t)hc_ctx.size);
    if (!all_ranks) return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: topology probe");
    for (int r = 0; r < hc_ctx.size; r++)
        all_ranks[r] = r;
    uint32_t saved = hc_ctx.next_ctx_id;
    hcomm_status_t st = hc_comm_create(HC_CTX_SUB | 0x3fffffffu, hc_ctx.size, all_ranks, pc_p);
    hc_ctx.next_ctx_id = saved;
    free(all_ranks);
    return st;
}

/* Every rank: the costs of rank 0's cache. */
static hcomm_status_t hc_probe_from_cache(hc_probe_t *pr)
{
    hcomm_status_t st;
    if ((st = hcomm_broadcast(pr->all, (size_t)pr->plan.cached * sizeof(*pr->all), HCOMM_UINT8, 0,
                              pr->pc)) != HCOMM_OK)
        return st;
    if ((st = hc_topo_map_calibrate(pr->map, pr->all, pr->plan.cached)) != HCOMM_OK) return st;
    hc_coll_topo_recalibrated();
    char how[1100];
    snprintf(how, sizeof(how), "from the cache %s in ", pr->path);
    hc_probe_report(pr->map, how, (double)(hc_time_ns() - pr->t_start) / 1e6, pr->plan.budget_s);
    return HCOMM_OK;
}

/* A leader's pair of round r with node pn: the lower node measures (the
 * client, into *mine), the other serves. */
static hcomm_status_t hc_probe_pair(hc_probe_t *pr, int my_node, int pn, int r, double slice_us,
                                    hc_probe_row_t *mine)
{
    int peer = 0;
    while (pr->map->node[peer] != pn)
        peer++; /* its leader */
    if (my_node > pn) return hc_probe_server(pr->pc, peer, HC_PROBE_TAG + 4 * r, pr->buf);
    hc_topo_meas_t m = {.a = my_node, .b = pn};
    size_t bytes = 0;
    hcomm_status_t st =
        hc_probe_client(pr->pc, peer, HC_PROBE_TAG + 4 * r, pr->buf, slice_us, &m, &bytes);
    if (st == HCOMM_OK && mine->n < HC_PROBE_MAX_ENTRIES) {
        mine->e[mine->n++] = m;
        mine->shrunk += bytes < HC_PROBE_BW_BYTES;
        if (bytes < HC_PROBE_BW_BYTES)
            hc_log_debug(
                "topology probe: nodes %d-%d measured with %zu of %zu bytes (slice %.1f ms)",
                my_node, pn, bytes, HC_PROBE_BW_BYTES, slice_us / 1e3);
    }
    return st;
}

/* The rounds (see the top of this file): before each, every rank learns
 * whether time is left; then each leader measures or serves its pair. */
static hcomm_status_t hc_probe_rounds(hc_probe_t *pr, hc_probe_row_t *mine)
{
    const hc_topo_map_t *map = pr->map;
    int N = map->nnodes, M = N + (N & 1);
    hcomm_status_t st = HCOMM_OK;
    /* Leaders: the lowest rank of each node. */
    int my_node = map->node[hc_ctx.rank];
    bool leader = true;
    for (int r = 0; r < hc_ctx.rank && leader; r++)
        leader = map->node[r] != my_node;
    for (int r = 0; r < pr->rounds && st == HCOMM_OK; r++) {
        /* Every rank, every round: the longest time in the probe so far. */
        double mine_s = r ? (double)(hc_time_ns() - pr->t_all) / 1e9 : 0, most_s;
        if ((st = hcomm_allreduce(&mine_s, &most_s, 1, HCOMM_FLOAT64, HCOMM_MAX, pr->pc)) !=
            HCOMM_OK)
            break;
        if (!r) pr->t_all = hc_time_ns();
        double left_s = pr->plan.budget_s - most_s;
        if (pr->plan.budget_s > 0 && left_s <= 0) break;
        double slice_us = pr->plan.budget_s > 0 ? left_s / (pr->rounds - r) * 1e6 : HUGE_VAL;
        pr->done = r + 1;
        int pn = leader ? hc_probe_partner(my_node, r, M, N) : -1;
        if (pn >= 0) st = hc_probe_pair(pr, my_node, pn, r, slice_us, mine);
    }
    return st;
}

/* Every rank's measurements to every rank: the costs installed, rank 0's
 * cache written, the report. */
static hcomm_status_t hc_probe_install(hc_probe_t *pr, const hc_probe_row_t *mine)
{
    hcomm_status_t st;
    if ((st = hcomm_allgather(mine, pr->rows, sizeof(*mine), HCOMM_UINT8, pr->pc)) != HCOMM_OK)
        return st;
    int n = 0, shrunk = 0;
    for (int r = 0; r < hc_ctx.size; r++) {
        shrunk += pr->rows[r].shrunk;
        for (int i = 0; i < pr->rows[r].n && i < HC_PROBE_MAX_ENTRIES && n < pr->cap; i++)
            pr->all[n++] = pr->rows[r].e[i];
    }
    if ((st = hc_topo_map_calibrate(pr->map, pr->all, n)) != HCOMM_OK) return st;
    hc_coll_topo_recalibrated();
    if (hc_ctx.rank == 0) hc_probe_cache_write(pr->path, pr->map, pr->all, n);
    if (hc_ctx.rank == 0 && pr->t_all - pr->t_start > 1000000)
        hc_log_info(
            "topology probe: rank 0 waited %.0f ms for every rank to come (not counted below)",
            (double)(pr->t_all - pr->t_start) / 1e6);
    hc_probe_report(pr->map, "measured in ", (double)(hc_time_ns() - pr->t_all) / 1e6,
                    pr->plan.budget_s);
    if (hc_ctx.rank == 0 && (shrunk || pr->done < pr->rounds))
        hc_log_info(
            "topology probe: within HCOMM_TOPO_PROBE_BUDGET=%g s: %d of %d rounds run, %d pairs "
            "measured with fewer than %zu KiB (slow, or little time left); pairs not measured "
            "take their class's mean",
            pr->plan.budget_s, pr->done, pr->rounds, shrunk, HC_PROBE_BW_BYTES >> 10);
    return HCOMM_OK;
}

hcomm_status_t hc_api_topo_probe(void)
{
    hc_topo_map_t *map = hc_ctx.topo;
    if (!hc_cfg.topo_probe || !map || map->nnodes < 2 || hc_ctx.topo_mode != HC_TOPO_MODE_FULL)
        return HCOMM_OK;
    hc_probe_t pr = {.map = map, .t_start = hc_time_ns()};
    int N = map->nnodes, M = N + (N & 1);
    pr.rounds = N <= HC_PROBE_ALL_PAIRS ? M - 1 : HC_PROBE_ROUNDS_BIG;
    hcomm_status_t st = hc_probe_comm_create(&pr.pc);
    if (st != HCOMM_OK) return st;
    pr.cap = pr.rounds * N + 1;
    pr.all = calloc((size_t)pr.cap, sizeof(*pr.all));
    pr.rows = calloc((size_t)hc_ctx.size, sizeof(*pr.rows));
    pr.buf = malloc(HC_PROBE_CHUNK_MAX);
    hc_probe_cache_path(map, pr.path, sizeof(pr.path));
    if (!pr.all || !pr.rows || !pr.buf) {
        st = hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: topology probe");
        goto out;
    }
    pr.plan.budget_s = hc_cfg.topo_probe_budget;
    if (hc_ctx.rank == 0) pr.plan.cached = hc_probe_cache_read(pr.path, map, pr.all, pr.cap);
    if ((st = hcomm_broadcast(&pr.plan, sizeof(pr.plan), HCOMM_UINT8, 0, pr.pc)) != HCOMM_OK)
        goto out;
    if (pr.plan.cached > 0) {
        st = hc_probe_from_cache(&pr);
        goto out;
    }
    hc_probe_row_t mine = {0};
    if ((st = hc_probe_rounds(&pr, &mine)) != HCOMM_OK) {
        st = hc_error(st, "hcomm_init: topology probe (HCOMM_TOPO_PROBE=0 skips it): %s",
                      hcomm_last_error());
        goto out;
    }
    st = hc_probe_install(&pr, &mine);
out:
    free(pr.all);
    free(pr.rows);
    free(pr.buf);
    if (pr.pc) hc_comm_destroy(pr.pc);
    return st;
}
