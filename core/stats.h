/*
 * Statistics (HCOMM_STATS, docs/observability.md).
 *
 * Two kinds of counters:
 *   - hc_stats: the p2p protocol's own (eager, rendezvous, unexpected,
 *     credit waits), plain increments, always on;
 *   - per operation kind (the seven collectives, send, recv): calls,
 *     bytes, a size histogram, the algorithm and drivers each size class
 *     used, and times, only with HCOMM_STATS >= 1. Level 2 adds per
 *     communicator and per peer counts and the time blocked in waits.
 * Every counter is a plain increment on the calling thread (hcomm calls are
 * serialized); nothing on these paths takes a lock or makes a syscall.
 *
 * Times: an operation is timed from its call to the completion its caller
 * sees (the blocking call's return, hcomm_wait, a successful hcomm_test).
 * A clock read costs ~45 ns on some virtual machines, a tenth of an 8-byte
 * node allreduce, so at level 1 operations under HC_STATS_TIME_ALWAYS bytes
 * are timed one call in HCOMM_STATS_SAMPLE (at random phase), each sample
 * weighted by the period: totals, means and percentiles are estimates with
 * a stated sample count; larger operations and level 2 time every call.
 */
#ifndef HC_STATS_H
#define HC_STATS_H

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hc_base.h"

struct hcomm_comm;
struct hcomm_request;

enum {
    HC_STATS_COLL_KINDS = 12, /* hc_coll_kind_t, in its order */
    HC_STATS_SIG_KIND_MASK = 15, /* coll/'s HC_COLL_SIG_KIND_MASK: the kind in a collective tag */
    HC_STATS_SEND = HC_STATS_COLL_KINDS,
    HC_STATS_RECV,
    HC_STATS_KINDS,
    HC_STATS_NONE = 0xff, /* an internal operation: not counted */
};

/* Size classes: 0 for 0 bytes, k for [2^(k-1), 2^k). */
#define HC_STATS_SIZE_CLASSES 65
/* Time histogram: 8 log-linear buckets per power of two of nanoseconds. */
#define HC_STATS_TIME_SUB 8
#define HC_STATS_TIME_BUCKETS (64 * HC_STATS_TIME_SUB)
/* Operations at least this large are timed at every call. */
#define HC_STATS_TIME_ALWAYS (64u * 1024u)

typedef struct {
    uint64_t send_msgs, send_bytes, recv_msgs, recv_bytes;
    uint64_t eager, fragmented, rndv_get, rndv_write, rndv_stream, unexpected;
    uint64_t credit_waits; /* frames queued because a peer's slots were full */
    uint64_t coll_node, coll_p2p;
    /* Direct device paths (core/gdr.c: GPUDirect RDMA between nodes, IPC inside one):
     * bytes and rendezvous of this rank's device buffers moved by a driver's RMA (either
     * side initiating), and device-buffer calls staged because they could not go direct
     * under auto (HCOMM_GDR, HCOMM_GPU_IPC); device-buffer receives that took their
     * messages frame by frame through the GPU dispatch instead (a driver that streams) */
    uint64_t gdr_bytes, gdr_rndv, gdr_staged, gdr_streamed;
} hc_stats_t;

extern hc_stats_t hc_stats;

/* 0 off, 1 basic, 2 detailed (from HCOMM_STATS and HCOMM_STATS_LEVEL). */
extern int hc_stats_level;

typedef struct {
    /* What every call touches, in one cache line: the counts, the sampling
     * countdown, and the current run of calls of one size class to one
     * comm and peer (sizes[] and drvs[] take a run when it ends). */
    uint64_t calls, bytes, small_calls;
    uint64_t run;
    const void *run_comm;
    int32_t run_peer;
    uint32_t countdown; /* calls until the next timed one */
    uint8_t run_cls, run_drv;
    /* timed calls: small = under HC_STATS_TIME_ALWAYS */
    uint64_t small_timed, small_ns, large_ns;
    uint64_t max_ns;
    uint64_t wait_ns; /* level 2: time blocked in waits */
    uint64_t sizes[HC_STATS_SIZE_CLASSES];
    uint64_t thist[HC_STATS_TIME_BUCKETS]; /* weighted */
    /* per size class: the algorithm (collectives; up to two seen) and the
     * drivers (bit i: hc_ctx.drvs[i]) that carried it */
    const char *algo[HC_STATS_SIZE_CLASSES][2];
    uint8_t drvs[HC_STATS_SIZE_CLASSES];
} __attribute__((aligned(64))) hc_stats_op_t;

extern hc_stats_op_t hc_stats_ops[HC_STATS_KINDS];

static inline unsigned hc_stats_size_class(size_t bytes)
{
    return bytes ? 64u - (unsigned)__builtin_clzll((unsigned long long)bytes) : 0u;
}

/* Start of an operation of kind on comm (peer: its comm rank for send and
 * recv, else -1): counts it and returns the time stamp to end it with, or
 * 0 when it is not timed. Internal communicators are not counted. */
uint64_t hc_stats_begin_slow(unsigned kind, size_t bytes, const struct hcomm_comm *comm, int peer);
static inline uint64_t hc_stats_begin(unsigned kind, size_t bytes, const struct hcomm_comm *comm,
                                      int peer)
{
    if (HC_LIKELY(hc_stats_level == 0))
        return 0;
    /* Level 1's common case inline: a small call, not the one to time,
     * continuing the current run (same size class, comm and peer; a run
     * never starts on an internal communicator). */
    hc_stats_op_t *s = &hc_stats_ops[kind];
    if (HC_LIKELY(hc_stats_level == 1 && bytes < HC_STATS_TIME_ALWAYS && s->countdown > 1 &&
                  comm == s->run_comm && peer == s->run_peer &&
                  hc_stats_size_class(bytes) == s->run_cls)) {
        s->countdown--;
        s->calls++;
        s->bytes += bytes;
        s->small_calls++;
        s->run++;
        return 0;
    }
    return hc_stats_begin_slow(kind, bytes, comm, peer);
}
/* End of an operation begun at t0 (non-zero). */
void hc_stats_end(unsigned kind, size_t bytes, const struct hcomm_comm *comm, uint64_t t0);
/* The algorithm a collective of kind and size chose on comm (node: only
 * the node driver carries it). */
void hc_stats_algo_slow(unsigned kind, size_t bytes, const char *algo,
                        const struct hcomm_comm *comm, bool node);
static inline void hc_stats_algo(unsigned kind, size_t bytes, const char *algo,
                                 const struct hcomm_comm *comm, bool node)
{
    const char *const *slot = hc_stats_ops[kind].algo[hc_stats_size_class(bytes)];
    if (HC_UNLIKELY(slot[0] != algo && slot[1] != algo))
        hc_stats_algo_slow(kind, bytes, algo, comm, node);
}
/* Level 2: ns spent blocked in a wait for an operation of kind. */
static inline void hc_stats_wait(unsigned kind, uint64_t ns)
{
    if (kind < HC_STATS_KINDS)
        hc_stats_ops[kind].wait_ns += ns;
}

/* Level 2: messages to and from world rank wpeer (any communicator): the
 * p2p path's (p2p.c, p2p_recv.c) and the data the node collectives move through the
 * node's shared memory (coll/node_stats.c: its blocks and buffers, CMA). A
 * peer's record is reported under the driver of its connection, which for
 * every rank of this node is the node driver (shm). */
typedef struct {
    uint64_t tx_msgs, tx_bytes, rx_msgs, rx_bytes;
} hc_stats_peer_t;
extern hc_stats_peer_t *hc_stats_peers; /* [world size] at level 2, else NULL */
static inline void hc_stats_peer_tx(int wpeer, size_t bytes)
{
    if (HC_UNLIKELY(hc_stats_peers != NULL)) {
        hc_stats_peers[wpeer].tx_msgs++;
        hc_stats_peers[wpeer].tx_bytes += bytes;
    }
}
static inline void hc_stats_peer_rx(int wpeer, size_t bytes)
{
    if (HC_UNLIKELY(hc_stats_peers != NULL)) {
        hc_stats_peers[wpeer].rx_msgs++;
        hc_stats_peers[wpeer].rx_bytes += bytes;
    }
}

/* Several messages at once (the node collectives); only where
 * hc_stats_peers != NULL. */
static inline void hc_stats_peer_add(int wpeer, uint64_t tx_msgs, uint64_t tx_bytes,
                                     uint64_t rx_msgs, uint64_t rx_bytes)
{
    hc_stats_peer_t *p = &hc_stats_peers[wpeer];
    p->tx_msgs += tx_msgs;
    p->tx_bytes += tx_bytes;
    p->rx_msgs += rx_msgs;
    p->rx_bytes += rx_bytes;
}

/* Lifecycle (context.c): init after the job's shape and drivers are known;
 * report (table to stderr, JSON lines to HCOMM_STATS_FILE) with why =
 * "finalize" or "dump"; fini frees. */
hcomm_status_t hc_stats_init(void);
void hc_stats_report(const char *why);
void hc_stats_fini(void);
/* comm is being destroyed: its level-2 record keeps its counts, unnamed. */
void hc_stats_comm_gone(struct hcomm_comm *comm);

/* Device memory's part of the report (stats_gpu.c): the counters of
 * hc_gpu_stats (gpu/gpu.h) zeroed at init, as lines of text (each without
 * its rank prefix) and as the JSON "gpu" record, written while a GPU
 * backend is active or something was counted. */
void hc_stats_gpu_reset(void);
void hc_stats_gpu_lines(void (*line)(const char *text, void *arg), void *arg);
void hc_stats_gpu_json(FILE *f, unsigned rep);

/* Percentile p (0..100) of kind's time histogram, in ns (0: no samples). */
double hc_stats_percentile_ns(const hc_stats_op_t *s, double p);
/* "allreduce", ..., "send", "recv". */
const char *hc_stats_kind_name(unsigned kind);

#endif
