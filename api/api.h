/*
 * api/: the public entry points (include/hcomm.h) on top of every layer:
 * argument checks and the threading contract's entry check; what runs is
 * the layers' below (collectives: coll/coll_post.c). What this layer's
 * files share.
 */
#ifndef HC_API_H
#define HC_API_H

#include "base/hc_base.h"
#include "core/hc_core.h"

#include <stdbool.h>
#include <stdint.h>

/* The topology calibration probe at the end of hcomm_init (api_probe.c). */
hcomm_status_t hc_api_topo_probe(void);

/* ---- the entry check of hcomm.h's threading contract ----------------------
 * The process has one progress engine: one request pool, one set of
 * connections and per-peer queues, and every communicator's queues, all
 * advanced by whichever thread waits. So the rule is per process, not per
 * communicator: at most one thread at a time inside the calls that use the
 * engine, whatever communicators they name. Each of those calls begins with
 * hc_api_enter and ends with hc_api_leave: one compare-and-swap claims the
 * process for the calling thread (its thread pointer), and the release
 * store hands everything it wrote to the next thread that claims it. The
 * same thread may enter again (hcomm_stats_dump's barrier, the probe's
 * sends inside hcomm_init); another thread's call is refused at once, having
 * done nothing, with ERR_INVALID naming the rule and the call it ran into.
 *
 *     int g = hc_api_enter("hcomm_barrier");
 *     if (HC_UNLIKELY(g < 0))
 *         return HCOMM_ERR_INVALID;
 *     hcomm_status_t st = ...;
 *     hc_api_leave(g);
 *     return st;
 */
extern uintptr_t hc_api_owner;      /* the thread inside (its thread pointer), 0: none */
extern const char *hc_api_owner_fn; /* the call it made (for the refusal's message) */
/* The refusal: sets last_error, returns -1. */
int hc_api_refuse(const char *fn);

static inline uintptr_t hc_api_self(void)
{
    return (uintptr_t)__builtin_thread_pointer();
}

/* 1: the calling thread claimed the process (hc_api_leave releases it);
 * 0: it was already inside (a nested call); -1: another thread is inside
 * (ERR_INVALID, last_error set). */
static inline int hc_api_enter(const char *fn)
{
    uintptr_t me = hc_api_self(), cur = 0;
    if (HC_LIKELY(__atomic_compare_exchange_n(&hc_api_owner, &cur, me, false, __ATOMIC_ACQUIRE,
                                              __ATOMIC_RELAXED))) {
        __atomic_store_n(&hc_api_owner_fn, fn, __ATOMIC_RELAXED);
        return 1;
    }
    return cur == me ? 0 : hc_api_refuse(fn);
}

static inline void hc_api_leave(int g)
{
    if (g > 0)
        __atomic_store_n(&hc_api_owner, 0, __ATOMIC_RELEASE);
}

/* ---- stream-ordered calls (api_stream.c, docs/gpu.md) ----------------------
 * hcomm_init starts the progress thread under HCOMM_PROGRESS_THREAD=1;
 * hcomm_finalize stops it first (pending items fail, their streams go on);
 * hcomm_group_end queues the group's stream-ordered operations as one once
 * the outermost group ends (st: the host group's result, returned or the
 * queueing's failure); hcomm_comm_free refuses a communicator with
 * stream-ordered operations pending and forgets its async error. */
/* Rank 0's bootstrap service thread (api_bs_service.c): started at the end
 * of hcomm_init (HCOMM_BOOTSTRAP_SERVICE), stopped first in hcomm_finalize;
 * its thread pointer while it runs (hc_api_refuse waits for it). */
hcomm_status_t hc_api_bs_service_start(void);
void hc_api_bs_service_stop(void);
extern uintptr_t hc_bs_service_self;
hcomm_status_t hc_api_stream_init(void);
void hc_api_stream_fini(void);
hcomm_status_t hc_api_stream_group_end(hcomm_status_t st);
hcomm_status_t hc_api_stream_comm_free(hcomm_comm_t comm);

/* ---- argument checks of the vector collectives and of buffer overlap
 * (api_args.c) -------------------------------------------------------------- */
/* counts: non-NULL, each count and the sum representable in bytes
 * (total_p: the sum, in elements). */
hcomm_status_t hc_check_counts(const char *fn, const char *name, const size_t *counts,
                               hcomm_comm_t comm, hcomm_dtype_t dtype, size_t *total_p);
/* displs: non-NULL, and every block [buf + displs[r], + counts[r]) elements
 * inside the address space: (displs[r] + counts[r]) * size at most
 * PTRDIFF_MAX and buf plus that not wrapping. */
hcomm_status_t hc_check_displs(const char *fn, const char *name, const size_t *displs,
                               const size_t *counts, const char *buf_name, const void *buf,
                               hcomm_comm_t comm, hcomm_dtype_t dtype);
/* sendbuf [sbuf, + sbytes) against recvbuf [rbuf, + rbytes): they may share
 * bytes only in the collective's documented in-place form (in_place: the
 * caller found the buffers in it); rule says what in place means. Inline:
 * every collective call makes it. */
hcomm_status_t hc_overlap_error(const char *fn, const void *sbuf, size_t sbytes, const void *rbuf,
                                size_t rbytes, const char *rule);
static inline hcomm_status_t hc_check_overlap(const char *fn, const void *sbuf, size_t sbytes,
                                              const void *rbuf, size_t rbytes, bool in_place,
                                              const char *rule)
{
    uintptr_t s = (uintptr_t)sbuf, r = (uintptr_t)rbuf;
    if (HC_LIKELY(in_place || s >= r + rbytes || r >= s + sbytes || !sbytes || !rbytes))
        return HCOMM_OK;
    return hc_overlap_error(fn, sbuf, sbytes, rbuf, rbytes, rule);
}
/* allgatherv: the receive blocks are disjoint, and sendbuf overlaps none
 * unless it is this rank's block (in place). */
hcomm_status_t hc_check_allgatherv_overlap(const char *fn, const void *sbuf, size_t scount,
                                           const void *rbuf, const size_t *rcounts,
                                           const size_t *rdispls, hcomm_comm_t comm,
                                           hcomm_dtype_t dtype);
/* alltoallv: the receive blocks are disjoint and no send block overlaps a
 * receive block (never in place). */
hcomm_status_t hc_check_alltoallv_overlap(const char *fn, const void *sbuf, const size_t *scounts,
                                          const size_t *sdispls, const void *rbuf,
                                          const size_t *rcounts, const size_t *rdispls,
                                          hcomm_comm_t comm, hcomm_dtype_t dtype);

#endif /* HC_API_H */
