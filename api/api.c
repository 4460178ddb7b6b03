/*
 * The public API for setup, point-to-point, requests and memory: argument
 * validation (every failure names the function, the argument and the value)
 * and the blocking wrappers. The collectives' API lives in api/api_coll.c.
 */
#include "api/api.h"
#include "api/api_stage.h"
#include "coll/coll.h"
#include "core/hc_core.h"
#include "core/progress_thread.h"
#include "mem/mem.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>


HC_EXPORT size_t hcomm_dtype_size(hcomm_dtype_t dtype)
{
    return (unsigned)dtype < HCOMM_DTYPE_COUNT ? hc_dtype_sizes[dtype] : 0;
}

/* hcomm_init's and hcomm_init_rank's failures, whatever the cause, are
 * logged here and only here: once per rank, at error level (shown unless
 * HCOMM_LOG silences errors), with exactly the text of hcomm_last_error().
 * The layers below set the message and log nothing of it themselves. */
static hcomm_status_t hc_api_init_failed(hcomm_status_t st)
{
    hc_log_error("%s", hc_error_last());
    return st;
}

/* ---- the threading contract's entry check (api.h) ---------------------------- */

uintptr_t hc_api_owner;
const char *hc_api_owner_fn;

/* hcomm's own threads (the progress thread, rank 0's bootstrap service
 * thread) hold the library only for a non-blocking post, test or
 * bootstrap pass: a call that finds one inside waits for it to leave,
 * bounded by HCOMM_TIMEOUT, instead of being refused. 1: claimed; 0: the
 * owner is the application's other thread (refuse). */
static bool hc_api_own_thread(uintptr_t t)
{
    return t && (t == __atomic_load_n(&hc_pt_thread_self, __ATOMIC_ACQUIRE) ||
                 t == __atomic_load_n(&hc_bs_service_self, __ATOMIC_ACQUIRE));
}

static int hc_api_wait_own_thread(const char *fn)
{
    uintptr_t me = hc_api_self();
    if (hc_api_own_thread(me)) return 0; /* one of them: it only tries */
    double t = hc_cfg.timeout > 0 ? hc_cfg.timeout : 300;
    uint64_t deadline = hc_time_ns() + (uint64_t)(t * 1e9);
    while (hc_time_ns() < deadline) {
        uintptr_t cur = 0;
        if (__atomic_compare_exchange_n(&hc_api_owner, &cur, me, false, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED)) {
            __atomic_store_n(&hc_api_owner_fn, fn, __ATOMIC_RELAXED);
            return 1;
        }
        if (!hc_api_own_thread(cur)) return 0;
        sched_yield();
    }
    return 0;
}

HC_NOINLINE int hc_api_refuse(const char *fn)
{
    if (hc_api_wait_own_thread(fn) == 1) return 1;
    const char *other = __atomic_load_n(&hc_api_owner_fn, __ATOMIC_RELAXED);
    hc_error(HCOMM_ERR_INVALID,
             "%s: another thread of this process is inside %s: the threading contract "
             "(hcomm.h) allows one thread at a time in hcomm's calls per process, whichever "
             "communicators they use (one progress engine serves them all); serialize them "
             "(e.g. with a mutex). hcomm_comm_abort, hcomm_comm_rank/size, hcomm_mem_* and "
             "the few others hcomm.h lists may run alongside. Nothing was done: the call may "
             "be retried",
             fn, other ? other : "an hcomm call");
    return -1;
}

static hcomm_status_t hc_api_init(const hc_bootstrap_params_t *given)
{
    if (hc_ctx.initialized)
        return hc_api_init_failed(
            hc_error(HCOMM_ERR_ALREADY_INITIALIZED, "hcomm_init: already initialized"));
    hcomm_status_t st = hc_ctx_init(given);
    if (st != HCOMM_OK) return hc_api_init_failed(st);
    st = hc_coll_init();
    if (st == HCOMM_OK && ((st = hc_coll_post_init()) != HCOMM_OK || (st = hc_api_topo_probe()) != HCOMM_OK))
        hc_coll_fini();
    if (st == HCOMM_OK && (st = hc_api_stream_init()) != HCOMM_OK) hc_coll_fini();
    if (st == HCOMM_OK) st = hc_api_bs_service_start();
    if (st != HCOMM_OK) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", hc_error_last());
        hc_ctx_finalize();
        return hc_api_init_failed(hc_error(st, "%s", saved));
    }
    return HCOMM_OK;
}

HC_EXPORT hcomm_status_t hcomm_init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    int g = hc_api_enter("hcomm_init");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_api_init(NULL);
    hc_api_leave(g);
    return st;
}

HC_EXPORT hcomm_status_t hcomm_init_rank(const hcomm_init_params_t *params)
{
    int g = hc_api_enter("hcomm_init_rank");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hc_bootstrap_params_t p;
    hcomm_status_t st = HCOMM_OK;
    if (!params)
        st = hc_error(HCOMM_ERR_INVALID, "hcomm_init_rank: params is NULL");
    else
        st = hc_bootstrap_params_given(params->rank, params->size, params->local_rank,
                                       params->local_size, params->bootstrap, params->job_key,
                                       &p);
    if (st == HCOMM_OK)
        st = hc_api_init(&p);
    else
        hc_api_init_failed(st);
    hc_api_leave(g);
    return st;
}

HC_EXPORT hcomm_status_t hcomm_bootstrap_address(char *url, size_t url_len, char *key,
                                                 size_t key_len)
{
    if (!url || url_len < 64)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_bootstrap_address: url is NULL or url_len %zu "
                                           "< 64", url_len);
    if (!key || key_len < 33)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_bootstrap_address: key is NULL or key_len %zu "
                                           "< 33", key_len);
    return hc_bootstrap_address_make(url, url_len, key, key_len);
}

HC_EXPORT hcomm_status_t hcomm_finalize(void)
{
    int g = hc_api_enter("hcomm_finalize");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_check_init("hcomm_finalize");
    if (st == HCOMM_OK) {
        hc_api_bs_service_stop(); /* its thread enters the library too */
        hc_api_stream_fini(); /* first: its thread posts and tests through the layers below */
        hc_api_stage_fini();
        hc_coll_group_fini();
        hc_coll_fini();
        hc_ctx_finalize();
    }
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_api_stats_dump(hcomm_comm_t comm)
{
    hcomm_status_t st = hc_check_init("hcomm_stats_dump");
    if (st != HCOMM_OK)
        return st;
    if (comm) {
        if ((st = hc_check_comm("hcomm_stats_dump", comm)) != HCOMM_OK)
            return st;
        if (hc_stats_level) {
            int level = hc_stats_level;
            hc_stats_level = 0; /* the barrier is the dump's, not the program's */
            st = hcomm_barrier(comm);
            hc_stats_level = level;
            if (st != HCOMM_OK)
                return st;
        }
    }
    hc_stats_report("dump");
    return HCOMM_OK;
}

HC_EXPORT hcomm_status_t hcomm_stats_dump(hcomm_comm_t comm)
{
    int g = hc_api_enter("hcomm_stats_dump");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_api_stats_dump(comm);
    hc_api_leave(g);
    return st;
}

HC_EXPORT int hcomm_initialized(void)
{
    return hc_ctx.initialized;
}

HC_EXPORT hcomm_comm_t hcomm_comm_world(void)
{
    return hc_ctx.initialized ? hc_ctx.world : NULL;
}

/* Any thread (hcomm.h): read under the communicator list's lock. */
HC_EXPORT int hcomm_comm_rank(hcomm_comm_t comm)
{
    int rank;
    return hc_comm_shape("hcomm_comm_rank", comm, &rank, NULL) == HCOMM_OK ? rank : -1;
}

HC_EXPORT int hcomm_comm_size(hcomm_comm_t comm)
{
    int size;
    return hc_comm_shape("hcomm_comm_size", comm, NULL, &size) == HCOMM_OK ? size : -1;
}

static hcomm_status_t hc_api_comm_free(hcomm_comm_t comm)
{
    hcomm_status_t st = hc_check_init("hcomm_comm_free");
    if (st != HCOMM_OK)
        return st;
    if (comm == hc_ctx.world)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_comm_free: the world communicator belongs to "
                                           "the library");
    if (!hc_comm_valid(comm))
        return hc_error(HCOMM_ERR_INVALID, "hcomm_comm_free: communicator %p is NULL, freed or "
                                           "not a communicator", (void *)comm);
    if ((st = hc_api_stream_comm_free(comm)) != HCOMM_OK) return st;
    hc_comm_destroy(comm);
    return HCOMM_OK;
}

HC_EXPORT hcomm_status_t hcomm_comm_free(hcomm_comm_t comm)
{
    int g = hc_api_enter("hcomm_comm_free");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_api_comm_free(comm);
    hc_api_leave(g);
    return st;
}

HC_EXPORT hcomm_status_t hcomm_comm_abort(hcomm_comm_t comm)
{
    /* Any thread: validates under the communicator-list lock and raises a
     * flag; the thread waiting on comm fails its operations. */
    if (!hc_ctx.initialized)
        return hc_error(HCOMM_ERR_NOT_INITIALIZED, "hcomm_comm_abort: not initialized");
    return hc_comm_abort(comm);
}

/* The communicator for revoke and shrink: valid, and usable although
 * aborted or revoked (that is what they are for). */
static hcomm_status_t hc_api_comm_any(const char *fn, hcomm_comm_t comm)
{
    hcomm_status_t st = hc_check_init(fn);
    if (st != HCOMM_OK)
        return st;
    if (comm != hc_ctx.world && !hc_comm_valid(comm))
        return hc_error(HCOMM_ERR_INVALID, "%s: communicator %p is NULL, freed or not a "
                                           "communicator", fn, (void *)comm);
    return HCOMM_OK;
}

HC_EXPORT hcomm_status_t hcomm_comm_revoke(hcomm_comm_t comm)
{
    int g = hc_api_enter("hcomm_comm_revoke");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_api_comm_any("hcomm_comm_revoke", comm);
    if (st == HCOMM_OK)
        st = hc_comm_revoke(comm);
    hc_api_leave(g);
    return st;
}

HC_EXPORT hcomm_status_t hcomm_comm_shrink(hcomm_comm_t comm, hcomm_comm_t *newcomm_p)
{
    int g = hc_api_enter("hcomm_comm_shrink");
    if (g < 0)
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_api_comm_any("hcomm_comm_shrink", comm);
    if (st == HCOMM_OK && !newcomm_p)
        st = hc_error(HCOMM_ERR_INVALID, "hcomm_comm_shrink: newcomm_p is NULL");
    if (st == HCOMM_OK && hc_ctx.group_depth)
        st = hc_error(HCOMM_ERR_INVALID, "hcomm_comm_shrink: not allowed inside a group");
    if (st == HCOMM_OK) {
        struct hcomm_comm *nc = NULL;
        st = hc_coll_shrink(comm, &nc);
        if (st == HCOMM_OK)
            *newcomm_p = nc;
    }
    hc_api_leave(g);
    return st;
}

/* ---- point-to-point --------------------------------------------------------- */

/* recv: a receive (HCOMM_ANY_SOURCE is a valid peer). */
/* A peer or tag hc_api_p2p_check refused, said. */
static HC_NOINLINE hcomm_status_t hc_api_p2p_bad(const char *fn, bool recv, int peer, int tag,
                                                 hcomm_comm_t comm)
{
    if ((peer < 0 || peer >= comm->size) && !(recv && peer == HCOMM_ANY_SOURCE))
        return hc_error(HCOMM_ERR_INVALID, "%s: peer %d out of range for a communicator of %d "
                                           "ranks%s", fn, peer, comm->size,
                        recv ? " (or HCOMM_ANY_SOURCE)" : "");
    return hc_error(HCOMM_ERR_INVALID, "%s: tag %d is negative", fn, tag);
}

/* Inlined into each call: the good case is a few compares (docs/bench.md,
 * "Instruction budget"). */
static HC_ALWAYS_INLINE hcomm_status_t hc_api_p2p_check(const char *fn, bool recv, const void *buf,
                                                        size_t count, hcomm_dtype_t dtype, int peer,
                                                        int tag, hcomm_comm_t comm, size_t *bytes_p)
{
    hcomm_status_t st = hc_check_comm(fn, comm);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return st;
    if (HC_UNLIKELY(((unsigned)peer >= (unsigned)comm->size && !(recv && peer == HCOMM_ANY_SOURCE)) ||
                    tag < 0))
        return hc_api_p2p_bad(fn, recv, peer, tag, comm);
    return hc_check_buf(fn, "buf", buf, count, dtype, 1, bytes_p);
}

/* A send posted as hc_api_stage_p2p chose: streamed from the device buffer
 * src through the host staging buf, or from buf (memory m; NULL: host). */
static inline hcomm_status_t hc_api_isend(struct hcomm_comm *comm, const void *buf, size_t bytes,
                                          int peer, int tag, const hc_mem_attr_t *m,
                                          const void *src, struct hcomm_request **req_p)
{
    if (HC_UNLIKELY(src != NULL))
        return hc_p2p_isend_streamed(comm, comm->ctx_id, (void *)buf, src, m, bytes, peer, tag,
                                     req_p);
    return hc_p2p_isend_mem(comm, comm->ctx_id, buf, bytes, peer, tag, m, req_p);
}

/* hcomm_isend, hcomm_irecv and hcomm_irecv_any (recv with source_p). */
static hcomm_status_t hc_api_ipost(const char *fn, bool recv, const void *buf, size_t count,
                                   hcomm_dtype_t dtype, int peer, int tag, hcomm_comm_t comm,
                                   int *source_p, hcomm_request_t *req_p)
{
    size_t bytes;
    hcomm_status_t st = hc_api_p2p_check(fn, recv, buf, count, dtype, peer, tag, comm, &bytes);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return st;
    if (HC_UNLIKELY(!req_p))
        return hc_error(HCOMM_ERR_INVALID, "%s: req_p is NULL", fn);
    struct hcomm_request *req;
    hc_api_stage_t *stg = NULL;
    hc_mem_attr_t mem = {.type = HC_MEM_HOST};
    const void *src = NULL;
    if (HC_UNLIKELY(hc_gpu_on) && (st = hc_api_stage_p2p(fn, recv, (void **)&buf, bytes, comm, peer,
                                                         &stg, &mem, &src)) != HCOMM_OK)
        return st;
    const hc_mem_attr_t *m = HC_UNLIKELY(mem.type != HC_MEM_HOST) ? &mem : NULL;
    unsigned kind = recv ? HC_STATS_RECV : HC_STATS_SEND;
    uint64_t t0 = hc_stats_begin(kind, bytes, comm, peer);
    st = recv ? hc_p2p_irecv_mem(comm, comm->ctx_id, (void *)buf, bytes, peer, tag, m, &req)
              : hc_api_isend(comm, buf, bytes, peer, tag, m, src, &req);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return HC_UNLIKELY(stg != NULL) ? hc_api_stage_end(stg, st, 0) : st;
    req->stage = stg;
    hc_request_stat(req, kind, bytes, t0);
    if (source_p) {
        if (req->peer == HCOMM_ANY_SOURCE)
            req->source_out = source_p;
        else /* matched at once (the message was already here) */
            *source_p = req->peer;
    }
    req->user = true;
    *req_p = hc_request_handle(req);
    return HCOMM_OK;
}

/* hcomm_isend, hcomm_irecv and hcomm_irecv_any: one entry point, the
 * direction (recv) and the source's output (irecv_any) its arguments;
 * inlined into each, so each costs what it did written out. */
static HC_ALWAYS_INLINE hcomm_status_t hc_api_ipost_entry(const char *fn, bool recv, const void *buf,
                                                          size_t count, hcomm_dtype_t dtype,
                                                          int peer, int tag, hcomm_comm_t comm,
                                                          int *source_p, hcomm_request_t *req_p)
{
    int g = hc_api_enter(fn);
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    if (source_p)
        *source_p = HCOMM_ANY_SOURCE;
    hcomm_status_t st = hc_api_ipost(fn, recv, buf, count, dtype, peer, tag, comm, source_p, req_p);
    hc_api_leave(g);
    return st;
}

HC_EXPORT hcomm_status_t hcomm_isend(const void *buf, size_t count, hcomm_dtype_t dtype, int peer,
                                     int tag, hcomm_comm_t comm, hcomm_request_t *req_p)
{
    return hc_api_ipost_entry("hcomm_isend", false, buf, count, dtype, peer, tag, comm, NULL,
                              req_p);
}

HC_EXPORT hcomm_status_t hcomm_irecv(void *buf, size_t count, hcomm_dtype_t dtype, int peer,
                                     int tag, hcomm_comm_t comm, hcomm_request_t *req_p)
{
    return hc_api_ipost_entry("hcomm_irecv", true, buf, count, dtype, peer, tag, comm, NULL,
                              req_p);
}

HC_EXPORT hcomm_status_t hcomm_irecv_any(void *buf, size_t count, hcomm_dtype_t dtype, int tag,
                                         hcomm_comm_t comm, int *source_p, hcomm_request_t *req_p)
{
    return hc_api_ipost_entry("hcomm_irecv_any", true, buf, count, dtype, HCOMM_ANY_SOURCE, tag,
                              comm, source_p, req_p);
}

/* Blocking calls: the request never leaves the library. */
static hcomm_status_t hc_api_finish(struct hcomm_request *req, const char *what)
{
    hcomm_status_t st = hc_api_stage_check(req, hc_request_wait(req, what));
    hc_request_stat_end(req);
    hc_request_free(req);
    return st;
}

static hcomm_status_t hc_api_send(const void *buf, size_t count, hcomm_dtype_t dtype, int peer,
                                  int tag, hcomm_comm_t comm)
{
    size_t bytes;
    hcomm_status_t st =
        hc_api_p2p_check("hcomm_send", false, buf, count, dtype, peer, tag, comm, &bytes);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return st;
    bool sent = false;
    hc_api_stage_t *stg = NULL;
    hc_mem_attr_t mem = {.type = HC_MEM_HOST};
    const void *src = NULL;
    if (HC_UNLIKELY(hc_gpu_on) && (st = hc_api_stage_p2p("hcomm_send", false, (void **)&buf, bytes,
                                                         comm, peer, &stg, &mem, &src)) != HCOMM_OK)
        return st;
    const hc_mem_attr_t *m = HC_UNLIKELY(mem.type != HC_MEM_HOST) ? &mem : NULL;
    uint64_t t0 = hc_stats_begin(HC_STATS_SEND, bytes, comm, peer);
    if (HC_LIKELY(!m)) st = hc_p2p_send_eager_now(comm, buf, bytes, peer, tag, &sent);
    if (HC_LIKELY(sent) || HC_UNLIKELY(st != HCOMM_OK)) {
        if (HC_UNLIKELY(t0 != 0))
            hc_stats_end(HC_STATS_SEND, bytes, comm, t0);
        return HC_UNLIKELY(stg != NULL) ? hc_api_stage_end(stg, st, 0) : st;
    }
    struct hcomm_request *req;
    st = hc_api_isend(comm, buf, bytes, peer, tag, m, src, &req);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return HC_UNLIKELY(stg != NULL) ? hc_api_stage_end(stg, st, 0) : st;
    req->stage = stg;
    hc_request_stat(req, HC_STATS_SEND, bytes, t0);
    if (HC_LIKELY(req->done)) {
        st = hc_api_stage_check(req, hc_request_result(req));
        hc_request_stat_end(req);
        hc_request_free(req);
        return st;
    }
    return hc_api_finish(req, "hcomm_send");
}

HC_EXPORT hcomm_status_t hcomm_send(const void *buf, size_t count, hcomm_dtype_t dtype, int peer,
                                    int tag, hcomm_comm_t comm)
{
    int g = hc_api_enter("hcomm_send");
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_api_send(buf, count, dtype, peer, tag, comm);
    hc_api_leave(g);
    return st;
}

/* hcomm_recv and hcomm_recv_any (peer HCOMM_ANY_SOURCE, source_p). */
static hcomm_status_t hc_api_recv(const char *fn, void *buf, size_t count, hcomm_dtype_t dtype,
                                  int peer, int tag, hcomm_comm_t comm, int *source_p)
{
    size_t bytes;
    hcomm_status_t st = hc_api_p2p_check(fn, true, buf, count, dtype, peer, tag, comm, &bytes);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return st;
    struct hcomm_request *req;
    hc_api_stage_t *stg = NULL;
    hc_mem_attr_t mem = {.type = HC_MEM_HOST};
    const void *src;
    if (HC_UNLIKELY(hc_gpu_on) &&
        (st = hc_api_stage_p2p(fn, true, &buf, bytes, comm, peer, &stg, &mem, &src)) != HCOMM_OK)
        return st;
    const hc_mem_attr_t *m = HC_UNLIKELY(mem.type != HC_MEM_HOST) ? &mem : NULL;
    uint64_t t0 = hc_stats_begin(HC_STATS_RECV, bytes, comm, peer);
    if (HC_LIKELY(!m && !stg && peer != HCOMM_ANY_SOURCE) &&
        hc_p2p_recv_now(comm, buf, bytes, peer, tag)) {
        if (HC_UNLIKELY(t0 != 0))
            hc_stats_end(HC_STATS_RECV, bytes, comm, t0);
        return HCOMM_OK;
    }
    st = hc_p2p_irecv_mem(comm, comm->ctx_id, buf, bytes, peer, tag, m, &req);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return HC_UNLIKELY(stg != NULL) ? hc_api_stage_end(stg, st, 0) : st;
    req->stage = stg;
    hc_request_stat(req, HC_STATS_RECV, bytes, t0);
    if (source_p) {
        if (req->peer == HCOMM_ANY_SOURCE)
            req->source_out = source_p;
        else
            *source_p = req->peer;
    }
    return hc_api_finish(req, fn);
}

HC_EXPORT hcomm_status_t hcomm_recv(void *buf, size_t count, hcomm_dtype_t dtype, int peer,
                                    int tag, hcomm_comm_t comm)
{
    int g = hc_api_enter("hcomm_recv");
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_api_recv("hcomm_recv", buf, count, dtype, peer, tag, comm, NULL);
    hc_api_leave(g);
    return st;
}

HC_EXPORT hcomm_status_t hcomm_recv_any(void *buf, size_t count, hcomm_dtype_t dtype, int tag,
                                        hcomm_comm_t comm, int *source_p)
{
    int g = hc_api_enter("hcomm_recv_any");
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    if (source_p)
        *source_p = HCOMM_ANY_SOURCE;
    hcomm_status_t st = hc_api_recv("hcomm_recv_any", buf, count, dtype, HCOMM_ANY_SOURCE, tag,
                                    comm, source_p);
    hc_api_leave(g);
    return st;
}

/* The live request a user handle names, or ERR_INVALID saying why not. */
static hcomm_status_t hc_api_request(const char *fn, hcomm_request_t handle,
                                     struct hcomm_request **req_p)
{
    hcomm_status_t st = hc_check_init(fn);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return st;
    struct hcomm_request *req = hc_request_from_handle(handle);
    if (HC_UNLIKELY(!req)) {
        char why[160];
        hc_request_handle_explain(handle, why, sizeof(why));
        return hc_error(HCOMM_ERR_INVALID, "%s: request %p is %s", fn, (void *)handle, why);
    }
    if (HC_UNLIKELY(req->deferred))
        return hc_error(HCOMM_ERR_INVALID, "%s: the collective of request %p was posted inside "
                        "a group that has not ended: call hcomm_group_end first", fn,
                        (void *)handle);
    *req_p = req;
    return HCOMM_OK;
}

HC_EXPORT hcomm_status_t hcomm_wait(hcomm_request_t handle)
{
    int g = hc_api_enter("hcomm_wait");
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    struct hcomm_request *req;
    hcomm_status_t st = hc_api_request("hcomm_wait", handle, &req);
    if (HC_LIKELY(st == HCOMM_OK))
        st = hc_api_finish(req, req->kind == HC_REQ_SEND   ? "hcomm_wait(send)"
                                : req->kind == HC_REQ_RECV ? "hcomm_wait(recv)"
                                                           : "hcomm_wait(collective)");
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_api_test(hcomm_request_t handle, int *done_p)
{
    struct hcomm_request *req;
    hcomm_status_t st = hc_api_request("hcomm_test", handle, &req);
    if (HC_UNLIKELY(st != HCOMM_OK))
        return st;
    if (HC_UNLIKELY(!done_p))
        return hc_error(HCOMM_ERR_INVALID, "hcomm_test: done_p is NULL");
    if (!req->done) {
        hc_progress();
        hc_progress_slow();
        if (req->comm && hc_comm_aborted(req->comm))
            hc_comm_handle_abort(req->comm);
    }
    /* A failed send whose payload a driver still holds is not done for the
     * caller yet: the buffer is still being read. */
    if (!req->done || HC_UNLIKELY(req->kind == HC_REQ_SEND && req->inflight > 0)) {
        *done_p = 0;
        return HCOMM_OK;
    }
    *done_p = 1;
    st = hc_api_stage_check(req, hc_request_result(req));
    hc_request_stat_end(req);
    hc_request_free(req);
    return st;
}

HC_EXPORT hcomm_status_t hcomm_test(hcomm_request_t handle, int *done_p)
{
    int g = hc_api_enter("hcomm_test");
    if (HC_UNLIKELY(g < 0))
        return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_api_test(handle, done_p);
    hc_api_leave(g);
    return st;
}

/* ---- memory ----------------------------------------------------------------- */

/* mem/ names its own functions in messages; the user called the public one. */
static hcomm_status_t hc_api_rename(hcomm_status_t st, const char *inner, const char *outer)
{
    if (st == HCOMM_OK)
        return st;
    const char *msg = hc_error_last();
    size_t n = strlen(inner);
    if (!strncmp(msg, inner, n)) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", msg + n);
        return hc_error(st, "%s%s", outer, saved);
    }
    return hc_error(st, "%s: %s", outer, msg);
}

HC_EXPORT hcomm_status_t hcomm_mem_alloc(size_t bytes, void **ptr_p)
{
    hcomm_status_t st = hc_check_init("hcomm_mem_alloc");
    if (st != HCOMM_OK)
        return st;
    if (!ptr_p)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_mem_alloc: ptr_p is NULL");
    if (bytes == 0)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_mem_alloc: bytes is 0");
    return hc_api_rename(hc_mem_alloc(bytes, ptr_p), "hc_mem_alloc", "hcomm_mem_alloc");
}

HC_EXPORT hcomm_status_t hcomm_mem_free(void *ptr)
{
    hcomm_status_t st = hc_check_init("hcomm_mem_free");
    if (st != HCOMM_OK)
        return st;
    if (!ptr)
        return HCOMM_OK;
    return hc_api_rename(hc_mem_free(ptr), "hc_mem_free", "hcomm_mem_free");
}

HC_EXPORT hcomm_status_t hcomm_mem_deregister(void *ptr, size_t bytes)
{
    hcomm_status_t st = hc_check_init("hcomm_mem_deregister");
    if (st != HCOMM_OK)
        return st;
    if (ptr && bytes)
        hc_mem_reg_cache_invalidate(ptr, bytes);
    return HCOMM_OK;
}

HC_EXPORT const char *hcomm_version(void)
{
    return HCOMM_VERSION_STRING;
}

HC_EXPORT const char *hcomm_version_string(void)
{
    static char buf[256];
    if (!buf[0]) {
        int n = snprintf(buf, sizeof(buf), "hcomm %s (drivers:", HCOMM_VERSION_STRING);
        for (int i = 0; i < hc_drv_count() && n < (int)sizeof(buf) - 16; i++)
            n += snprintf(buf + n, sizeof(buf) - (size_t)n, " %s", hc_drv_at(i)->name);
        snprintf(buf + n, sizeof(buf) - (size_t)n, ")");
    }
    return buf;
}
