/* Statistics: counters, time histograms and their reports (see stats.h). */
#include "core/stats.h"
#include "core/hc_core.h"
#include "mem/mem.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

hc_stats_t hc_stats;
int hc_stats_level;
hc_stats_op_t hc_stats_ops[HC_STATS_KINDS];
hc_stats_peer_t *hc_stats_peers;

/* Level 2: one record per communicator that carried a user operation. */
typedef struct hc_stats_comm {
    struct hc_stats_comm *next;
    uint32_t ctx_id;
    int size;
    bool world, gone;
    uint64_t calls[HC_STATS_KINDS], bytes[HC_STATS_KINDS], ns[HC_STATS_KINDS];
} hc_stats_comm_t;

static struct {
    hc_stats_comm_t *comms;
    uint8_t *peer_drv; /* world rank -> bit of the driver that reaches it */
    uint32_t period;                   /* HCOMM_STATS_SAMPLE */
    uint32_t rng;
    uint64_t init_ns;
    unsigned reports; /* reports written so far (JSON "report" number) */
    FILE *file;       /* HCOMM_STATS_FILE, opened at the first report */
    char path[512];
} hc_st;

static const char *const hc_stats_kind_names[HC_STATS_KINDS] = {
    "allreduce", "broadcast", "reduce",          "allgather",       "reduce_scatter", "alltoall",
    "barrier",   "gather",    "scatter",         "allgatherv",      "reduce_scatterv", "alltoallv",
    "send",      "recv"};

const char *hc_stats_kind_name(unsigned kind)
{
    return kind < HC_STATS_KINDS ? hc_stats_kind_names[kind] : "internal";
}

static uint32_t hc_stats_reload(void)
{
    /* xorshift32: a period of random phase with mean hc_st.period */
    uint32_t x = hc_st.rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    hc_st.rng = x;
    return 1u + x % (2u * hc_st.period - 1u);
}

static uint8_t hc_stats_drv_bit(int wrank)
{
    hc_conn_t *conn = hc_core_conn(wrank);
    return conn && conn->drv && conn->drv->index >= 0 && conn->drv->index < 8
               ? (uint8_t)(1u << conn->drv->index)
               : 0;
}

hcomm_status_t hc_stats_init(void)
{
    memset(&hc_stats, 0, sizeof(hc_stats));
    memset(hc_stats_ops, 0, sizeof(hc_stats_ops));
    hc_stats_gpu_reset();
    free(hc_stats_peers);
    hc_stats_peers = NULL;
    hc_st.comms = NULL;
    hc_st.reports = 0;
    hc_st.file = NULL;
    hc_st.path[0] = 0;
    if (hc_cfg.stats < 0 || hc_cfg.stats > 2)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_init: HCOMM_STATS=%lld: use 0 (off), 1 or 2",
                        (long long)hc_cfg.stats);
    if (hc_cfg.stats_level < 1 || hc_cfg.stats_level > 2)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_init: HCOMM_STATS_LEVEL=%lld: use 1 or 2",
                        (long long)hc_cfg.stats_level);
    if (hc_cfg.stats_sample < 1 || hc_cfg.stats_sample > 1000000)
        return hc_error(HCOMM_ERR_INVALID,
                        "hcomm_init: HCOMM_STATS_SAMPLE=%lld: use 1 (time every call) to 1000000",
                        (long long)hc_cfg.stats_sample);
    /* The level: HCOMM_STATS, or HCOMM_STATS_LEVEL when only it is set (it
     * alone turns statistics on); both set: the higher, except that an
     * explicit HCOMM_STATS=0 keeps them off. */
    int level = (int)hc_cfg.stats;
    if (hc_config_env("HCOMM_STATS_LEVEL")) {
        if (!hc_config_env("HCOMM_STATS"))
            level = (int)hc_cfg.stats_level;
        else if (level == 0)
            hc_log_info("HCOMM_STATS=0 with HCOMM_STATS_LEVEL=%lld: statistics off (an explicit "
                        "HCOMM_STATS=0 wins; unset it for level %lld)",
                        (long long)hc_cfg.stats_level, (long long)hc_cfg.stats_level);
        else if (hc_cfg.stats_level > level)
            level = (int)hc_cfg.stats_level;
    }
    hc_stats_level = level;
    hc_st.period = (uint32_t)hc_cfg.stats_sample;
    hc_st.rng = 0x9e3779b9u ^ (uint32_t)getpid() ^ (uint32_t)hc_ctx.rank * 0x85ebca6bu;
    if (!hc_st.rng)
        hc_st.rng = 1;
    for (int k = 0; k < HC_STATS_KINDS; k++) {
        hc_stats_ops[k].countdown = hc_stats_reload();
        hc_stats_ops[k].run_peer = -1;
    }
    hc_st.init_ns = hc_time_ns();
    free(hc_st.peer_drv);
    hc_st.peer_drv = NULL;
    if (level) {
        hc_st.peer_drv = calloc((size_t)hc_ctx.size, 1);
        if (!hc_st.peer_drv)
            return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: no memory for HCOMM_STATS");
        for (int r = 0; r < hc_ctx.size; r++)
            hc_st.peer_drv[r] = hc_stats_drv_bit(r);
    }
    if (level >= 2) {
        hc_stats_peers = calloc((size_t)hc_ctx.size, sizeof(*hc_stats_peers));
        if (!hc_stats_peers)
            return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: no memory for HCOMM_STATS_LEVEL=2");
    }
    return HCOMM_OK;
}

void hc_stats_fini(void)
{
    while (hc_st.comms) {
        hc_stats_comm_t *c = hc_st.comms;
        hc_st.comms = c->next;
        free(c);
    }
    free(hc_stats_peers);
    hc_stats_peers = NULL;
    free(hc_st.peer_drv);
    hc_st.peer_drv = NULL;
    if (hc_st.file)
        fclose(hc_st.file);
    hc_st.file = NULL;
    hc_stats_level = 0;
}

static void hc_stats_run_start(hc_stats_op_t *s, unsigned cls, const struct hcomm_comm *comm,
                               int peer);

static hc_stats_comm_t *hc_stats_comm_of(const struct hcomm_comm *comm)
{
    struct hcomm_comm *c = (struct hcomm_comm *)comm;
    if (HC_LIKELY(c->stats != NULL))
        return c->stats;
    hc_stats_comm_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL; /* counted nowhere, but the operation goes on */
    r->ctx_id = comm->ctx_id;
    r->size = comm->size;
    r->world = comm->is_world;
    r->next = hc_st.comms;
    hc_st.comms = r;
    c->stats = r;
    return r;
}

void hc_stats_comm_gone(struct hcomm_comm *comm)
{
    /* a run on comm ends: a communicator created later at the same address
     * must not continue it */
    for (unsigned k = 0; hc_stats_level && k < HC_STATS_KINDS; k++)
        if (hc_stats_ops[k].run_comm == comm)
            hc_stats_run_start(&hc_stats_ops[k], hc_stats_ops[k].run_cls, NULL, -1);
    if (comm->stats)
        comm->stats->gone = true;
    comm->stats = NULL;
}

/* The run of calls of one size class to one comm and peer ends: its count
 * (and the driver to the peer) go to the class; a new run begins. */
static HC_NOINLINE void hc_stats_run_start(hc_stats_op_t *s, unsigned cls,
                                           const struct hcomm_comm *comm, int peer)
{
    s->sizes[s->run_cls] += s->run;
    if (s->run)
        s->drvs[s->run_cls] |= s->run_drv;
    s->run = 0;
    s->run_cls = (uint8_t)cls;
    s->run_comm = comm;
    s->run_peer = peer;
    s->run_drv = peer >= 0 ? hc_st.peer_drv[comm->world_ranks[peer]] : 0;
}

/* Every run so far into sizes[] and drvs[] (before a report). */
static void hc_stats_runs_flush(void)
{
    for (unsigned k = 0; k < HC_STATS_KINDS; k++) {
        hc_stats_op_t *s = &hc_stats_ops[k];
        s->sizes[s->run_cls] += s->run;
        if (s->run)
            s->drvs[s->run_cls] |= s->run_drv;
        s->run = 0; /* the run goes on from 0: its class, comm and peer stay */
    }
}

uint64_t hc_stats_begin_slow(unsigned kind, size_t bytes, const struct hcomm_comm *comm, int peer)
{
    if (kind >= HC_STATS_KINDS || (comm->ctx_id & HC_CTX_SUB))
        return 0;
    hc_stats_op_t *s = &hc_stats_ops[kind];
    unsigned cls = hc_stats_size_class(bytes);
    s->calls++;
    s->bytes += bytes;
    if (HC_UNLIKELY(cls != s->run_cls || comm != s->run_comm || peer != s->run_peer))
        hc_stats_run_start(s, cls, comm, peer);
    s->run++;
    if (hc_stats_level >= 2) {
        hc_stats_comm_t *c = hc_stats_comm_of(comm);
        if (c) {
            c->calls[kind]++;
            c->bytes[kind] += bytes;
        }
        if (bytes < HC_STATS_TIME_ALWAYS) {
            s->small_calls++;
            s->small_timed++;
        }
        return hc_time_ns() | 1;
    }
    if (bytes >= HC_STATS_TIME_ALWAYS)
        return hc_time_ns() | 1;
    s->small_calls++;
    if (--s->countdown != 0)
        return 0;
    s->countdown = hc_stats_reload();
    s->small_timed++;
    return hc_time_ns() | 1;
}

static unsigned hc_stats_time_bucket(uint64_t ns)
{
    if (ns < HC_STATS_TIME_SUB)
        return (unsigned)ns;
    unsigned e = 63u - (unsigned)__builtin_clzll(ns); /* >= 3 */
    unsigned sub = (unsigned)(ns >> (e - 3)) & (HC_STATS_TIME_SUB - 1);
    return (e - 2) * HC_STATS_TIME_SUB + sub;
}

static double hc_stats_bucket_mid(unsigned b)
{
    if (b < HC_STATS_TIME_SUB)
        return b;
    unsigned e = b / HC_STATS_TIME_SUB + 2, sub = b % HC_STATS_TIME_SUB;
    double lo = (double)(HC_STATS_TIME_SUB + sub) * (double)(1ull << (e - 3));
    return lo + (double)(1ull << (e - 3)) / 2.0;
}

void hc_stats_end(unsigned kind, size_t bytes, const struct hcomm_comm *comm, uint64_t t0)
{
    if (kind >= HC_STATS_KINDS)
        return;
    uint64_t now = hc_time_ns();
    uint64_t ns = now > t0 ? now - t0 : 0;
    hc_stats_op_t *s = &hc_stats_ops[kind];
    bool small = bytes < HC_STATS_TIME_ALWAYS;
    uint64_t w = small && hc_stats_level < 2 ? hc_st.period : 1;
    if (small)
        s->small_ns += ns;
    else
        s->large_ns += ns;
    if (ns > s->max_ns)
        s->max_ns = ns;
    s->thist[hc_stats_time_bucket(ns)] += w;
    if (hc_stats_level >= 2 && comm && comm->stats)
        comm->stats->ns[kind] += ns;
}

void hc_stats_algo_slow(unsigned kind, size_t bytes, const char *algo,
                        const struct hcomm_comm *comm, bool node)
{
    if (kind >= HC_STATS_KINDS || (comm->ctx_id & HC_CTX_SUB) || !algo)
        return;
    unsigned cls = hc_stats_size_class(bytes);
    const char **slot = hc_stats_ops[kind].algo[cls];
    if (slot[0] == algo || slot[1] == algo)
        return;
    if (!slot[0])
        slot[0] = algo;
    else if (!slot[1])
        slot[1] = algo;
    uint8_t mask = 0;
    if (node) {
        hc_drv_t *nd = hc_core_node_driver();
        if (nd && nd->index >= 0 && nd->index < 8)
            mask = (uint8_t)(1u << nd->index);
    } else {
        for (int r = 0; r < comm->size; r++)
            if (r != comm->rank)
                mask |= hc_stats_drv_bit(comm->world_ranks[r]);
    }
    hc_stats_ops[kind].drvs[cls] |= mask;
}

double hc_stats_percentile_ns(const hc_stats_op_t *s, double p)
{
    uint64_t total = 0;
    for (unsigned b = 0; b < HC_STATS_TIME_BUCKETS; b++)
        total += s->thist[b];
    if (!total)
        return 0;
    double want = p / 100.0 * (double)total;
    uint64_t acc = 0;
    for (unsigned b = 0; b < HC_STATS_TIME_BUCKETS; b++) {
        acc += s->thist[b];
        if (s->thist[b] && (double)acc >= want) /* a bucket's middle may pass the max */
            return HC_MIN(hc_stats_bucket_mid(b), (double)s->max_ns);
    }
    return hc_stats_bucket_mid(HC_STATS_TIME_BUCKETS - 1);
}

/* Estimated total ns: sampled small calls scaled by their sampling rate. */
static double hc_stats_total_ns(const hc_stats_op_t *s)
{
    double small = s->small_timed ? (double)s->small_ns * (double)s->small_calls /
                                        (double)s->small_timed
                                  : 0;
    return small + (double)s->large_ns;
}

static uint64_t hc_stats_timed(const hc_stats_op_t *s)
{
    return s->small_timed + (s->calls - s->small_calls);
}

/* ---- the reports ------------------------------------------------------------------- */

static void hc_stats_drv_names(uint8_t mask, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < hc_ctx.ndrvs && i < 8; i++) {
        if (!(mask & (1u << i)))
            continue;
        int w = snprintf(buf + n, len - n, "%s%s", n ? "+" : "", hc_ctx.drvs[i]->ops->name);
        if (w < 0 || (size_t)w >= len - n)
            break;
        n += (size_t)w;
    }
    if (!n)
        snprintf(buf, len, "local");
}

/* The next peer after *r that carried messages, with its drivers' names
 * (level 2); NULL after the last. */
static const hc_stats_peer_t *hc_stats_peer_next(int *r, char *drv, size_t len)
{
    while (hc_stats_peers && ++*r < hc_ctx.size) {
        const hc_stats_peer_t *p = &hc_stats_peers[*r];
        if (!p->tx_msgs && !p->rx_msgs)
            continue;
        hc_stats_drv_names(hc_stats_drv_bit(*r), drv, len);
        return p;
    }
    return NULL;
}

static void hc_stats_size_label(unsigned cls, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (cls == 0) {
        snprintf(buf, len, "0 B");
        return;
    }
    unsigned lo = cls - 1; /* [2^lo, 2^(lo+1)) */
    snprintf(buf, len, "%llu %s", 1ull << (lo % 10), units[lo / 10]);
}

static void hc_stats_out(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hc_stats_out(FILE *f, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(f, "[hcomm r%d] %s\n", hc_ctx.rank, line);
}

static void hc_stats_mem_line(const char *text, void *arg)
{
    hc_stats_out(arg, "  %s", text);
}

typedef struct {
    char line[2048]; /* tcp's per-socket counters take ~900 bytes with 4 sockets */
    size_t n;
} hc_stats_drv_acc_t;

static void hc_stats_drv_line(const char *name, uint64_t value, void *arg)
{
    hc_stats_drv_acc_t *a = arg;
    if (a->n + 1 < sizeof(a->line)) {
        int w = snprintf(a->line + a->n, sizeof(a->line) - a->n, "%s %s %llu", a->n ? "," : "",
                         name, (unsigned long long)value);
        if (w > 0)
            a->n = HC_MIN(a->n + (size_t)w, sizeof(a->line) - 1);
    }
}

/* One row per operation kind that was called. */
static void hc_stats_table_ops(FILE *f)
{
    hc_stats_out(f, "  %-14s %10s %14s %11s %9s %9s %9s %9s %9s %10s", "op", "calls", "bytes",
                 "total_ms", "mean_us", "p50_us", "p99_us", "max_us", "timed", "wait_ms");
    for (unsigned k = 0; k < HC_STATS_KINDS; k++) {
        const hc_stats_op_t *s = &hc_stats_ops[k];
        if (!s->calls)
            continue;
        double tot = hc_stats_total_ns(s);
        char wait[24] = "-";
        if (hc_stats_level >= 2)
            snprintf(wait, sizeof(wait), "%.3f", (double)s->wait_ns * 1e-6);
        if (!hc_stats_timed(s)) {
            /* level 1 times one small call in HCOMM_STATS_SAMPLE: a short
             * job may have none of this kind timed */
            hc_stats_out(f, "  %-14s %10llu %14llu   not sampled: none of its %llu calls timed "
                            "(HCOMM_STATS_SAMPLE=%lld; HCOMM_STATS=2 times every call)",
                         hc_stats_kind_names[k], (unsigned long long)s->calls,
                         (unsigned long long)s->bytes, (unsigned long long)s->calls,
                         (long long)hc_cfg.stats_sample);
            continue;
        }
        hc_stats_out(f, "  %-14s %10llu %14llu %11.3f %9.2f %9.2f %9.2f %9.2f %9llu %10s",
                     hc_stats_kind_names[k], (unsigned long long)s->calls,
                     (unsigned long long)s->bytes, tot * 1e-6,
                     s->calls ? tot / (double)s->calls * 1e-3 : 0.0,
                     hc_stats_percentile_ns(s, 50) * 1e-3, hc_stats_percentile_ns(s, 99) * 1e-3,
                     (double)s->max_ns * 1e-3, (unsigned long long)hc_stats_timed(s), wait);
    }
}

/* Per operation kind: its share of the time in hcomm calls and its size
 * classes (calls, algorithm, drivers). */
static void hc_stats_table_sizes(FILE *f)
{
    double all_ns = 0;
    for (unsigned k = 0; k < HC_STATS_KINDS; k++)
        all_ns += hc_stats_total_ns(&hc_stats_ops[k]);
    for (unsigned k = 0; k < HC_STATS_KINDS; k++) {
        const hc_stats_op_t *s = &hc_stats_ops[k];
        if (!s->calls)
            continue;
        double tot = hc_stats_total_ns(s);
        char share[48] = "not sampled";
        if (hc_stats_timed(s) && all_ns > 0)
            snprintf(share, sizeof(share), "%.1f%% of the time in hcomm calls",
                     100.0 * tot / all_ns);
        hc_stats_out(f, "  %s: %s; sizes (from, calls, algorithm, drivers):",
                     hc_stats_kind_names[k], share);
        for (unsigned c = 0; c < HC_STATS_SIZE_CLASSES; c++) {
            if (!s->sizes[c])
                continue;
            char lab[24], drv[64];
            hc_stats_size_label(c, lab, sizeof(lab));
            hc_stats_drv_names(s->drvs[c], drv, sizeof(drv));
            const char *a0 = s->algo[c][0], *a1 = s->algo[c][1];
            hc_stats_out(f, "    >= %-8s %10llu  %s%s%s  %s", lab, (unsigned long long)s->sizes[c],
                         a0 ? a0 : (k >= HC_STATS_SEND ? "p2p" : "-"), a1 ? "," : "", a1 ? a1 : "",
                         drv);
        }
    }
}

/* Level 2: per communicator, per peer, the drivers' counters and mem/'s. */
static void hc_stats_table_detail(FILE *f)
{
    hc_stats_out(f, "  per communicator (calls / bytes / ms by op):");
    for (const hc_stats_comm_t *c = hc_st.comms; c; c = c->next) {
        char line[768];
        size_t n = 0;
        for (unsigned k = 0; k < HC_STATS_KINDS && n < sizeof(line) - 64; k++)
            if (c->calls[k])
                n += (size_t)snprintf(line + n, sizeof(line) - n, " %s %llu/%llu/%.3f",
                                      hc_stats_kind_names[k], (unsigned long long)c->calls[k],
                                      (unsigned long long)c->bytes[k], (double)c->ns[k] * 1e-6);
        hc_stats_out(f, "    comm 0x%x (%d ranks%s%s):%s", c->ctx_id, c->size,
                     c->world ? ", world" : "", c->gone ? ", freed" : "", n ? line : " -");
    }
    hc_stats_out(f, "  per peer (world rank, driver: messages and bytes sent, received):");
    char drv[64];
    const hc_stats_peer_t *p;
    for (int r = -1; (p = hc_stats_peer_next(&r, drv, sizeof(drv))) != NULL;) {
        hc_stats_out(f, "    rank %-5d %-6s tx %10llu msgs %14llu B   rx %10llu msgs %14llu B", r,
                     drv, (unsigned long long)p->tx_msgs, (unsigned long long)p->tx_bytes,
                     (unsigned long long)p->rx_msgs, (unsigned long long)p->rx_bytes);
    }
    for (int i = 0; i < hc_ctx.ndrvs; i++) {
        hc_drv_t *d = hc_ctx.drvs[i];
        hc_stats_drv_acc_t acc = {.n = 0};
        acc.line[0] = 0;
        d->ops->counters(d, hc_stats_drv_line, &acc);
        if (acc.n)
            hc_stats_out(f, "  driver %s:%s", d->ops->name, acc.line);
    }
    hc_mem_stats_print(hc_stats_mem_line, f);
}

static void hc_stats_table(FILE *f, const char *why)
{
    double since = (double)(hc_time_ns() - hc_st.init_ns) * 1e-9;
    hc_stats_out(f, "statistics (%s, %.3f s after init, HCOMM_STATS level %d%s):", why, since,
                 hc_stats_level,
                 hc_stats_level >= 2 ? ", every call timed"
                                     : ", calls under 64 KiB timed one in HCOMM_STATS_SAMPLE");
    hc_stats_table_ops(f);
    hc_stats_table_sizes(f);
    hc_stats_out(f, "  p2p protocol: sent %llu msgs / %llu B, received %llu msgs / %llu B; "
                    "eager %llu, fragmented %llu, rendezvous get %llu, write %llu, stream %llu; "
                    "unexpected %llu; credit waits %llu; collectives by node algorithms %llu, "
                    "by p2p %llu",
                 (unsigned long long)hc_stats.send_msgs, (unsigned long long)hc_stats.send_bytes,
                 (unsigned long long)hc_stats.recv_msgs, (unsigned long long)hc_stats.recv_bytes,
                 (unsigned long long)hc_stats.eager, (unsigned long long)hc_stats.fragmented,
                 (unsigned long long)hc_stats.rndv_get, (unsigned long long)hc_stats.rndv_write,
                 (unsigned long long)hc_stats.rndv_stream, (unsigned long long)hc_stats.unexpected,
                 (unsigned long long)hc_stats.credit_waits, (unsigned long long)hc_stats.coll_node,
                 (unsigned long long)hc_stats.coll_p2p);
    hc_stats_gpu_lines(hc_stats_mem_line, f);
    if (hc_stats.gdr_rndv || hc_stats.gdr_staged || hc_stats.gdr_streamed)
        hc_stats_out(f, "  device buffers direct (GPUDirect RDMA, IPC): %llu B in %llu rendezvous "
                        "by RMA; %llu device-buffer p2p calls staged by auto (HCOMM_GDR, "
                        "HCOMM_GPU_IPC); %llu device-buffer receives streamed frame by frame",
                     (unsigned long long)hc_stats.gdr_bytes, (unsigned long long)hc_stats.gdr_rndv,
                     (unsigned long long)hc_stats.gdr_staged,
                     (unsigned long long)hc_stats.gdr_streamed);
    if (hc_stats_level < 2)
        return;
    hc_stats_table_detail(f);
}

/* ---- JSON lines -------------------------------------------------------------------- */

static void hc_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void hc_stats_json_drv(FILE *f, const char *name, uint64_t value, void *arg)
{
    int *first = arg;
    fprintf(f, "%s", *first ? "" : ",");
    *first = 0;
    hc_json_str(f, name);
    fprintf(f, ":%llu", (unsigned long long)value);
}

typedef struct {
    FILE *f;
    int first;
} hc_json_drv_arg_t;

static void hc_stats_json_drv_cb(const char *name, uint64_t value, void *arg)
{
    hc_json_drv_arg_t *a = arg;
    hc_stats_json_drv(a->f, name, value, &a->first);
}

/* The "rank" line: who, where, when. */
static void hc_stats_json_rank(FILE *f, unsigned rep, const char *why)
{
    double since = (double)(hc_time_ns() - hc_st.init_ns) * 1e-9;
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    fprintf(f, "{\"type\":\"rank\",\"report\":%u,\"why\":", rep);
    hc_json_str(f, why);
    fprintf(f, ",\"rank\":%d,\"size\":%d,\"host\":", hc_ctx.rank, hc_ctx.size);
    hc_json_str(f, host);
    fprintf(f, ",\"node_id\":");
    hc_json_str(f, hc_ctx.node_id);
    fprintf(f, ",\"node\":%d,\"pid\":%d,\"level\":%d,\"sample\":%u,\"elapsed_s\":%.6f,"
               "\"nodes\":[",
            hc_ctx.node, (int)getpid(), hc_stats_level, hc_st.period, since);
    for (int r = 0; r < hc_ctx.size; r++)
        fprintf(f, "%s%d", r ? "," : "", hc_ctx.node_of_rank[r]);
    fprintf(f, "]}\n");
}

/* An "op" line: operation kind k (called), its times and size classes. */
static void hc_stats_json_op(FILE *f, unsigned rep, unsigned k)
{
    const hc_stats_op_t *s = &hc_stats_ops[k];
    double tot = hc_stats_total_ns(s);
    fprintf(f,
            "{\"type\":\"op\",\"report\":%u,\"rank\":%d,\"op\":\"%s\",\"calls\":%llu,"
            "\"bytes\":%llu,\"timed\":%llu,\"time_s\":%.9f,\"mean_us\":%.3f,\"p50_us\":%.3f,"
            "\"p99_us\":%.3f,\"max_us\":%.3f",
            rep, hc_ctx.rank, hc_stats_kind_names[k], (unsigned long long)s->calls,
            (unsigned long long)s->bytes, (unsigned long long)hc_stats_timed(s), tot * 1e-9,
            tot / (double)s->calls * 1e-3, hc_stats_percentile_ns(s, 50) * 1e-3,
            hc_stats_percentile_ns(s, 99) * 1e-3, (double)s->max_ns * 1e-3);
    if (hc_stats_level >= 2)
        fprintf(f, ",\"wait_s\":%.9f", (double)s->wait_ns * 1e-9);
    fprintf(f, ",\"sizes\":[");
    int first = 1;
    for (unsigned c = 0; c < HC_STATS_SIZE_CLASSES; c++) {
        if (!s->sizes[c])
            continue;
        char drv[64];
        hc_stats_drv_names(s->drvs[c], drv, sizeof(drv));
        fprintf(f, "%s{\"from\":%llu,\"calls\":%llu,\"algo\":", first ? "" : ",",
                c ? 1ull << (c - 1) : 0ull, (unsigned long long)s->sizes[c]);
        first = 0;
        char algo[96];
        snprintf(algo, sizeof(algo), "%s%s%s",
                 s->algo[c][0] ? s->algo[c][0] : (k >= HC_STATS_SEND ? "p2p" : ""),
                 s->algo[c][1] ? "," : "", s->algo[c][1] ? s->algo[c][1] : "");
        hc_json_str(f, algo);
        fprintf(f, ",\"drivers\":");
        hc_json_str(f, drv);
        fprintf(f, "}");
    }
    fprintf(f, "]}\n");
}

/* The "p2p" line: the protocol's counters. */
static void hc_stats_json_p2p(FILE *f, unsigned rep)
{
    fprintf(f,
            "{\"type\":\"p2p\",\"report\":%u,\"rank\":%d,\"send_msgs\":%llu,\"send_bytes\":%llu,"
            "\"recv_msgs\":%llu,\"recv_bytes\":%llu,\"eager\":%llu,\"fragmented\":%llu,"
            "\"rndv_get\":%llu,\"rndv_write\":%llu,\"rndv_stream\":%llu,\"unexpected\":%llu,"
            "\"credit_waits\":%llu,\"coll_node\":%llu,\"coll_p2p\":%llu}\n",
            rep, hc_ctx.rank, (unsigned long long)hc_stats.send_msgs,
            (unsigned long long)hc_stats.send_bytes, (unsigned long long)hc_stats.recv_msgs,
            (unsigned long long)hc_stats.recv_bytes, (unsigned long long)hc_stats.eager,
            (unsigned long long)hc_stats.fragmented, (unsigned long long)hc_stats.rndv_get,
            (unsigned long long)hc_stats.rndv_write, (unsigned long long)hc_stats.rndv_stream,
            (unsigned long long)hc_stats.unexpected, (unsigned long long)hc_stats.credit_waits,
            (unsigned long long)hc_stats.coll_node, (unsigned long long)hc_stats.coll_p2p);
}

/* Level 2: a "comm" line per communicator. */
static void hc_stats_json_comms(FILE *f, unsigned rep)
{
    for (const hc_stats_comm_t *c = hc_st.comms; c; c = c->next) {
        fprintf(f, "{\"type\":\"comm\",\"report\":%u,\"rank\":%d,\"ctx_id\":%u,\"size\":%d,"
                   "\"world\":%s,\"freed\":%s,\"ops\":{",
                rep, hc_ctx.rank, c->ctx_id, c->size, c->world ? "true" : "false",
                c->gone ? "true" : "false");
        int first = 1;
        for (unsigned k = 0; k < HC_STATS_KINDS; k++) {
            if (!c->calls[k])
                continue;
            fprintf(f, "%s\"%s\":{\"calls\":%llu,\"bytes\":%llu,\"time_s\":%.9f}",
                    first ? "" : ",", hc_stats_kind_names[k], (unsigned long long)c->calls[k],
                    (unsigned long long)c->bytes[k], (double)c->ns[k] * 1e-9);
            first = 0;
        }
        fprintf(f, "}}\n");
    }
}

/* Level 2: a "peer" line per peer that carried messages. */
static void hc_stats_json_peers(FILE *f, unsigned rep)
{
    char drv[64];
    const hc_stats_peer_t *p;
    for (int r = -1; (p = hc_stats_peer_next(&r, drv, sizeof(drv))) != NULL;) {
        fprintf(f, "{\"type\":\"peer\",\"report\":%u,\"rank\":%d,\"peer\":%d,\"driver\":", rep,
                hc_ctx.rank, r);
        hc_json_str(f, drv);
        fprintf(f, ",\"tx_msgs\":%llu,\"tx_bytes\":%llu,\"rx_msgs\":%llu,\"rx_bytes\":%llu}\n",
                (unsigned long long)p->tx_msgs, (unsigned long long)p->tx_bytes,
                (unsigned long long)p->rx_msgs, (unsigned long long)p->rx_bytes);
    }
}

/* Level 2: the "counters" line: the drivers', the pool's, the registration
 * cache's. */
static void hc_stats_json_counters(FILE *f, unsigned rep)
{
    fprintf(f, "{\"type\":\"counters\",\"report\":%u,\"rank\":%d,\"drivers\":{", rep, hc_ctx.rank);
    int firstd = 1;
    for (int i = 0; i < hc_ctx.ndrvs; i++) {
        hc_drv_t *d = hc_ctx.drvs[i];
        if (!d->ops->counters)
            continue;
        fprintf(f, "%s", firstd ? "" : ",");
        firstd = 0;
        hc_json_str(f, d->ops->name);
        fprintf(f, ":{");
        hc_json_drv_arg_t a = {f, 1};
        d->ops->counters(d, hc_stats_json_drv_cb, &a);
        fprintf(f, "}");
    }
    hc_mem_stats_t m;
    hc_mem_stats_get(&m);
    fprintf(f,
            "},\"pool\":{\"bytes\":%zu,\"max\":%zu,\"regions\":%llu,\"large_allocs\":%llu,"
            "\"huge_fallbacks\":%llu},\"reg_cache\":{\"hits\":%llu,\"misses\":%llu,"
            "\"evictions\":%llu,\"uncached\":%llu,\"entries\":%llu,\"bytes\":%llu}}\n",
            m.pool_bytes, m.pool_max, (unsigned long long)m.regions_created,
            (unsigned long long)m.large_allocs, (unsigned long long)m.huge_fallbacks,
            (unsigned long long)m.cache_hits, (unsigned long long)m.cache_misses,
            (unsigned long long)m.cache_evictions, (unsigned long long)m.cache_uncached,
            (unsigned long long)m.cache_entries, (unsigned long long)m.cache_bytes);
}

static void hc_stats_json(FILE *f, const char *why)
{
    unsigned rep = hc_st.reports;
    hc_stats_json_rank(f, rep, why);
    for (unsigned k = 0; k < HC_STATS_KINDS; k++) {
        if (!hc_stats_ops[k].calls)
            continue;
        hc_stats_json_op(f, rep, k);
    }
    hc_stats_json_p2p(f, rep);
    hc_stats_gpu_json(f, rep);
    if (hc_stats_level < 2)
        return;
    hc_stats_json_comms(f, rep);
    hc_stats_json_peers(f, rep);
    hc_stats_json_counters(f, rep);
}

void hc_stats_report(const char *why)
{
    if (!hc_stats_level)
        return;
    hc_stats_runs_flush();
    /* One write: the ranks' tables do not interleave line by line. */
    char *text = NULL;
    size_t tlen = 0;
    FILE *mf = open_memstream(&text, &tlen);
    if (mf) {
        hc_stats_table(mf, why);
        fclose(mf);
        if (text)
            (void)!write(STDERR_FILENO, text, tlen);
        free(text);
    }
    if (hc_cfg.stats_file && hc_cfg.stats_file[0]) {
        if (!hc_st.file) {
            if (!hc_path_expand(hc_cfg.stats_file, hc_ctx.rank, hc_st.path, sizeof(hc_st.path))) {
                hc_log_warn("HCOMM_STATS_FILE=%s: the expanded path is too long: statistics not "
                            "written",
                            hc_cfg.stats_file);
                hc_st.reports++;
                return;
            }
            hc_st.file = fopen(hc_st.path, "w");
            if (!hc_st.file) {
                hc_log_warn("HCOMM_STATS_FILE: cannot open %s: %s: statistics not written",
                            hc_st.path, strerror(errno));
                hc_st.reports++;
                return;
            }
        }
        hc_stats_json(hc_st.file, why);
        fflush(hc_st.file);
    }
    hc_st.reports++;
}
