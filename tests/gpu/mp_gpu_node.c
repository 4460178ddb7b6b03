/*
 * Node collectives on device memory (coll/node_device.c, docs/gpu.md "Node
 * collectives on device memory"), every rank on one node over shm, on the
 * GPU model:
 *
 *   mp_gpu_node cases   allreduce of 256Ki and 1Mi+28 int32 (the least
 *       size that goes unstaged is 256 KiB), reduce (root 1) likewise (the
 *       other ranks' receive buffers must stay untouched), gather and
 *       scatter (root 1; the other ranks pass NULL for the root's buffer)
 *       of 64Ki and 256Ki+7 int32 per rank, allgather and reduce_scatter of
 *       64Ki and 256Ki+7 int32 per rank, broadcast (root 1) of 256Ki and
 *       1Mi+28 int32, alltoall of 64Ki and 256Ki+7 int32 per block (in
 *       place: in the region on every rank); sum and max, in place (the documented forms) and out
 *       of place, blocking, + hcomm_wait,
 *       + hcomm_test, with
 *         all:   device buffers on every rank: by IPC (each rank's slice
 *                reduced on the device through the peers' mapped buffers);
 *         some:  device buffers on even ranks only: the region's staged
 *                algorithm, the device ranks' buffers staged by the node
 *                family (the single copy's fall back);
 *         recv:  host send, device receive everywhere: likewise;
 *         host:  host buffers everywhere, the backend active (broadcast
 *                tries the single copy then, and falls back to staged);
 *       every element and the guard bytes are checked, and the counters: a
 *       node call with device buffers counted on each device rank; in "all"
 *       an IPC call on every rank and no byte staged (an alltoall in place
 *       excepted); otherwise each device rank's input staged in whole and
 *       its output back, once. Under HCOMM_GPU_IPC=0 (mp_gpu_node off) the same calls
 *       are staged by the API as before (the counters say so).
 *   mp_gpu_node split   the same cases on each fake node's communicator
 *       (hcomm_comm_split) in a job of two fake nodes over tcp: a
 *       sub-communicator of one node takes the same paths (by IPC).
 *   mp_gpu_node realloc   an in-place allreduce, the buffer freed and a new
 *       one made at the same address (the model re-uses it) with other
 *       values, another allreduce: the peers' IPC imports of the old allocations
 *       are never used for the new ones.
 *   mp_gpu_node fault   rank 1's first device reduction fails
 *       (HCOMM_GPU_MODEL_FAULT=reduce:1): its error names the device and
 *       hcomm_allreduce, the others fail promptly, never a wrong result.
 *   mp_gpu_node noimport   rank 1 cannot import (HCOMM_GPU_MODEL_FAULT=ipc):
 *       under auto every rank runs in the region and the result is right;
 *       under HCOMM_GPU_IPC=1 (mp_gpu_node strict) every rank fails with
 *       ERR_UNSUPPORTED naming HCOMM_GPU_IPC=1 and rank 1.
 */
#include "common/mp_test.h"
#include "gpu/gpu.h"
#include "gpu/model/gpu_model_test.h"
#include "mp_gpu_buf.h"

static int32_t val(int rank, size_t i, int v)
{
    return (int32_t)((rank + 1) * (int)(i % 1000) + v);
}

enum {
    K_ALLREDUCE,
    K_ALLGATHER,
    K_REDUCE_SCATTER,
    K_BROADCAST,
    K_ALLTOALL,
    K_REDUCE,
    K_GATHER,
    K_SCATTER,
    K_KINDS
};
/* The communicator of the cases: the world, or (split) the ranks of this
 * rank's fake node in a job of two; its size and this rank's rank there. */
static hcomm_comm_t C;
static int csize, crank;
#define ROOT (1 % csize) /* the rooted collectives' */
static void *last_buf; /* the receive buffer of the last call of one() (freed since) */
static const char *kname[] = {"allreduce", "allgather", "reduce_scatter", "broadcast",
                              "alltoall",  "reduce",    "gather",         "scatter"};

/* Element i of the result of kind (allgather: of the whole output). */
static int32_t want(int kind, hcomm_op_t op, size_t count, size_t i, int v)
{
    int n = csize;
    if (kind == K_ALLGATHER || kind == K_GATHER) return val((int)(i / count), i % count, v);
    if (kind == K_SCATTER) return val(ROOT, (size_t)crank * count + i, v);
    if (kind == K_BROADCAST) return val(ROOT, i, v);
    if (kind == K_ALLTOALL) return val((int)(i / count), (size_t)crank * count + i % count, v);
    size_t k = kind == K_REDUCE_SCATTER ? (size_t)crank * count + i : i;
    if (op == HCOMM_MAX) return val(n - 1, k, v);
    return (int32_t)(n * (n + 1) / 2 * (int)(k % 1000) + v * n);
}

/* how: 0 blocking, 1 non-blocking + hcomm_wait, 2 + hcomm_test. */
static hcomm_status_t call(int kind, int how, const void *s, void *r, size_t count, hcomm_op_t op)
{
    hcomm_comm_t w = C;
    hcomm_request_t req;
    hcomm_request_t *rp = how ? &req : NULL;
    hcomm_status_t st;
    if (kind == K_ALLREDUCE)
        st = how ? hcomm_iallreduce(s, r, count, HCOMM_INT32, op, w, rp)
                 : hcomm_allreduce(s, r, count, HCOMM_INT32, op, w);
    else if (kind == K_REDUCE)
        st = how ? hcomm_ireduce(s, r, count, HCOMM_INT32, op, ROOT, w, rp)
                 : hcomm_reduce(s, r, count, HCOMM_INT32, op, ROOT, w);
    else if (kind == K_GATHER)
        st = how ? hcomm_igather(s, r, count, HCOMM_INT32, ROOT, w, rp)
                 : hcomm_gather(s, r, count, HCOMM_INT32, ROOT, w);
    else if (kind == K_SCATTER)
        st = how ? hcomm_iscatter(s, r, count, HCOMM_INT32, ROOT, w, rp)
                 : hcomm_scatter(s, r, count, HCOMM_INT32, ROOT, w);
    else if (kind == K_BROADCAST)
        st = how ? hcomm_ibroadcast(r, count, HCOMM_INT32, ROOT, w, rp)
                 : hcomm_broadcast(r, count, HCOMM_INT32, ROOT, w);
    else if (kind == K_ALLTOALL)
        st = how ? hcomm_ialltoall(s, r, count, HCOMM_INT32, w, rp)
                 : hcomm_alltoall(s, r, count, HCOMM_INT32, w);
    else if (kind == K_ALLGATHER)
        st = how ? hcomm_iallgather(s, r, count, HCOMM_INT32, w, rp)
                 : hcomm_allgather(s, r, count, HCOMM_INT32, w);
    else
        st = how ? hcomm_ireduce_scatter(s, r, count, HCOMM_INT32, op, w, rp)
                 : hcomm_reduce_scatter(s, r, count, HCOMM_INT32, op, w);
    if (st != HCOMM_OK || how == 0) return st;
    return req_end(req, how);
}

/* One call of kind on count int32 per block (values val(rank, i, v)):
 * out of place with sdev / rdev, or in place (one buffer, rdev) in the
 * documented form; false on failure. */
static bool one(const char *what, int kind, bool inplace, bool sdev, bool rdev, size_t count,
                hcomm_op_t op, int how, int v)
{
    size_t nb = (size_t)csize, me = (size_t)crank;
    /* a gather's output and a scatter's input are the root's only: the
     * others pass NULL, and in place is the root's form */
    bool has_in = kind != K_SCATTER || crank == ROOT, has_out = kind != K_GATHER || crank == ROOT;
    inplace = inplace && has_in && has_out;
    bool many_in = kind == K_REDUCE_SCATTER || kind == K_ALLTOALL || kind == K_SCATTER;
    bool many_out = kind == K_ALLGATHER || kind == K_ALLTOALL || kind == K_GATHER;
    size_t sin = !has_in ? 0 : many_in ? nb * count : count;
    size_t sout = !has_out ? 0 : many_out ? nb * count : count;
    size_t big = HC_MAX(HC_MAX(sin, sout), 1);
    int32_t *h = mp_xmalloc(big * 4), *g = mp_xmalloc(big * 4);
    for (size_t i = 0; i < big; i++)
        g[i] = -7;
    for (size_t i = 0; i < sin; i++)
        h[i] = val(crank, i, v);
    buf_t r = {0}, s = {0};
    if (sout || inplace) r = buf_new(rdev, (inplace ? big : sout) * 4);
    s = r;
    last_buf = r.p;
    /* in place: where the input and the output lie in the one buffer */
    size_t in_at = inplace && (kind == K_ALLGATHER || kind == K_GATHER) ? me * count : 0;
    size_t out_at = inplace && (kind == K_REDUCE_SCATTER || kind == K_SCATTER) ? me * count : 0;
    if (inplace) {
        memcpy(g + in_at, h, sin * 4);
        buf_put(&r, g, big * 4);
    } else {
        s = (buf_t){0};
        if (sin) {
            s = buf_new(sdev, sin * 4);
            buf_put(&s, h, sin * 4);
        }
        if (sout) buf_put(&r, g, sout * 4);
    }
    hcomm_status_t st = call(kind, how, s.p ? (int32_t *)s.p + in_at : NULL,
                             r.p ? (int32_t *)r.p + out_at : NULL, count, op);
    bool ok = st == HCOMM_OK;
    if (!ok) mp_fail("%s: %s (%s)", what, mp_status_name(st), hcomm_last_error());
    if (r.p) buf_get(&r, g, (inplace ? big : sout) * 4, what);
    /* a reduce's result is the root's: elsewhere the buffer passed is
     * ignored (out of place: untouched; in place: still the input) */
    bool here = kind != K_REDUCE || crank == ROOT;
    for (size_t i = 0; ok && i < sout; i++) {
        int32_t w = here ? want(kind, op, count, i, v) : inplace ? h[i] : -7;
        if (g[out_at + i] != w) {
            mp_fail("%s: element %zu of %zu expected %d got %d", what, i, sout, w,
                    g[out_at + i]);
            ok = false;
        }
    }
    if (ok && !inplace && sin) {
        buf_get(&s, g, sin * 4, what);
        if (memcmp(g, h, sin * 4)) mp_fail("%s: the send buffer changed", what);
    }
    if (!inplace && s.p) buf_free(&s);
    if (r.p) buf_free(&r);
    free(h);
    free(g);
    return ok;
}

static int run_cases(bool ipc_on, const char *name)
{
    static const char *mname[] = {"all", "some", "recv", "host"};
    const size_t counts[] = {(size_t)1 << 16, ((size_t)1 << 18) + 7};
    const hcomm_op_t ops[] = {HCOMM_SUM, HCOMM_MAX};
    for (int kind = 0; kind < K_KINDS; kind++)
        for (int m = 0; m < 4; m++)
            for (int c = 0; c < 2; c++)
                for (int inplace = 0; inplace < 2; inplace++)
                    for (int how = 0; how < 3; how++) {
                        if (inplace && m == 2) continue; /* recv: the send buffer is host */
                        if (kind == K_BROADCAST && !inplace) continue; /* one buffer */
                        bool rd = m == 0 || m == 2 || (m == 1 && crank % 2 == 0);
                        bool sd = m == 0 || (m == 1 && rd);
                        bool whole = kind == K_ALLREDUCE || kind == K_BROADCAST || kind == K_REDUCE;
                        size_t count = counts[c] << (whole ? 2 : 0);
                        hcomm_op_t op = ops[(how + c) % 2];
                        char what[160];
                        snprintf(what, sizeof(what), "%s %s, %zu int32 %s, %s, %s", kname[kind],
                                 mname[m], count, op == HCOMM_SUM ? "sum" : "max",
                                 inplace ? "in place" : "out of place",
                                 how == 0   ? "blocking"
                                 : how == 1 ? "+ wait"
                                            : "+ test");
                        hc_gpu_stats_t c0 = hc_gpu_stats;
                        bool ok = one(what, kind, inplace, sd, rd, count, op, how, 3);
                        hc_gpu_stats_t c1 = hc_gpu_stats;
                        uint64_t d2h = c1.d2h_bytes - c0.d2h_bytes, h2d = c1.h2d_bytes - c0.h2d_bytes;
                        uint64_t staged = d2h + h2d;
                        uint64_t node = c1.node_dev_calls - c0.node_dev_calls;
                        uint64_t ipc = c1.node_ipc_calls - c0.node_ipc_calls;
                        /* (a reduce's and a gather's output is the root's only,
                         * a scatter's input too) */
                        bool out_here = (kind != K_REDUCE && kind != K_GATHER) || crank == ROOT;
                        bool in_here = kind != K_SCATTER || crank == ROOT;
                        bool dev_here = (sd && in_here) || (rd && out_here);
                        /* (an alltoall in place is done in the region) */
                        uint64_t want_node = ipc_on && dev_here,
                                 want_ipc = ipc_on && m == 0 && !(kind == K_ALLTOALL && inplace);
                        if (ok && (node != want_node || ipc != want_ipc))
                            mp_fail("%s: %llu node calls with device buffers and %llu by IPC "
                                    "here, expected %llu and %llu",
                                    what, (unsigned long long)node, (unsigned long long)ipc,
                                    (unsigned long long)want_node, (unsigned long long)want_ipc);
                        /* not by IPC: a rank with device buffers stages them
                         * whole, its input in and its output back */
                        size_t all = (size_t)csize * count * 4, one = count * 4;
                        bool many_in = kind == K_REDUCE_SCATTER || kind == K_ALLTOALL ||
                                       kind == K_SCATTER;
                        bool many_out = kind == K_ALLGATHER || kind == K_ALLTOALL || kind == K_GATHER;
                        bool root = crank == ROOT, bc = kind == K_BROADCAST;
                        uint64_t want_in =
                            sd && in_here && (!bc || root) ? (many_in ? all : one) : 0;
                        uint64_t want_out =
                            rd && (!bc || !root) && out_here ? (many_out ? all : one) : 0;
                        if (want_ipc) want_in = want_out = 0;
                        if (ok && ipc_on && (d2h != want_in || h2d != want_out))
                            mp_fail("%s: %llu bytes staged in and %llu back, expected %llu and "
                                    "%llu",
                                    what, (unsigned long long)d2h, (unsigned long long)h2d,
                                    (unsigned long long)want_in, (unsigned long long)want_out);
                        if (ok && !ipc_on && dev_here && !staged)
                            mp_fail("%s: HCOMM_GPU_IPC=0, yet nothing was staged", what);
                        if (ok && ipc_on && m == 0 && (kind == K_ALLREDUCE || kind == K_REDUCE_SCATTER || kind == K_REDUCE) &&
                            c1.dev_reduces == c0.dev_reduces)
                            mp_fail("%s: by IPC, yet no reduction ran on the device", what);
                    }
    MP_OK(hcomm_barrier(hcomm_comm_world()));
    if (C != hcomm_comm_world()) MP_OK(hcomm_comm_free(C));
    return mp_finish(name);
}

static int run_realloc(void)
{
    size_t count = ((size_t)1 << 18) + 5;
    one("realloc, first", K_ALLREDUCE, true, true, true, count, HCOMM_SUM, 0, 1);
    void *p = last_buf;
    one("realloc, second", K_ALLREDUCE, true, true, true, count, HCOMM_SUM, 0, 11);
    if (last_buf != p)
        mp_fail("realloc: the model did not re-use the address (%p, then %p): the case tests "
                "nothing",
                p, last_buf);
    MP_OK(hcomm_barrier(hcomm_comm_world()));
    return mp_finish("mp_gpu_node realloc");
}

/* fault: rank 1's first device reduction fails; noimport / strict: rank 1
 * cannot import a peer's allocation. */
static int run_fault(const char *what)
{
    bool fault = !strcmp(what, "fault"), strict = !strcmp(what, "strict");
    const char *rk = getenv("HCOMM_RANK");
    if (rk && atoi(rk) == 1) setenv("HCOMM_GPU_MODEL_FAULT", fault ? "reduce:1" : "ipc", 1);
    if (strict) setenv("HCOMM_GPU_IPC", "1", 1);
    mp_init();
    C = hcomm_comm_world();
    csize = mp_size;
    crank = mp_rank;
    size_t count = (size_t)1 << 18, n = count * 4;
    buf_t s = buf_new(true, n), r = buf_new(true, n);
    int32_t *h = mp_xmalloc(n);
    for (size_t i = 0; i < count; i++)
        h[i] = val(mp_rank, i, 0);
    buf_put(&s, h, n);
    buf_put(&r, h, n); /* its guard bytes too (copies, not reductions: reduce:1 is the call's) */
    double t0 = mp_now();
    hcomm_status_t st = hcomm_allreduce(s.p, r.p, count, HCOMM_INT32, HCOMM_SUM,
                                        hcomm_comm_world());
    double dt = mp_now() - t0;
    const char *msg = hcomm_last_error();
    if (fault && mp_rank == 1) {
        if (st == HCOMM_OK)
            mp_fail("fault: the failed reduction went unnoticed");
        else if (!strstr(msg, "device 0") || !strstr(msg, "hcomm_allreduce"))
            mp_fail("fault: the error does not name the device and the call: %s", msg);
        else
            printf("rank 1: %s (as expected)\n", msg);
    } else if (fault) {
        if (st == HCOMM_OK)
            mp_fail("fault: this rank completed although rank 1's reduction failed");
        else if (dt > 20)
            mp_fail("fault: failed only after %.1f s (expected promptly): %s", dt, msg);
    } else if (strict) {
        if (st != HCOMM_ERR_UNSUPPORTED || !strstr(msg, "HCOMM_GPU_IPC=1") ||
            !strstr(msg, "rank 1"))
            mp_fail("strict: expected ERR_UNSUPPORTED naming HCOMM_GPU_IPC=1 and rank 1, got "
                    "%s: %s",
                    mp_status_name(st), msg);
        else
            printf("rank %d: %s (as expected)\n", mp_rank, msg);
    } else {
        if (st != HCOMM_OK) mp_fail("noimport: %s (%s)", mp_status_name(st), msg);
        if (hc_gpu_stats.node_ipc_calls)
            mp_fail("noimport: rank 1 cannot import, yet the call went by IPC");
        buf_get(&r, h, n, "noimport");
        for (size_t i = 0; st == HCOMM_OK && i < count; i++)
            if (h[i] != want(K_ALLREDUCE, HCOMM_SUM, count, i, 0)) {
                mp_fail("noimport: element %zu expected %d got %d", i,
                        want(K_ALLREDUCE, HCOMM_SUM, count, i, 0), h[i]);
                break;
            }
    }
    return buf_case_end(h, &s, &r, what, dt);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "fault") || !strcmp(what, "noimport") || !strcmp(what, "strict"))
        return run_fault(what);
    bool off = !strcmp(what, "off"), split = !strcmp(what, "split");
    if (off) setenv("HCOMM_GPU_IPC", "0", 1);
    if (!off && !split && strcmp(what, "cases") && strcmp(what, "realloc")) {
        fprintf(stderr,
                "usage: mp_gpu_node cases | off | split | realloc | fault | noimport | strict\n");
        return 2;
    }
    mp_init();
    C = hcomm_comm_world();
    if (split) {
        /* two fake nodes, ranks placed cyclically: rank r on node r % 2 */
        if (mp_size < 4 || mp_size % 2) {
            fprintf(stderr, "mp_gpu_node split: 2 fake nodes of 2 ranks or more each\n");
            return 2;
        }
        MP_OK(hcomm_comm_split(hcomm_comm_world(), mp_rank % 2, mp_rank, &C));
    }
    csize = hcomm_comm_size(C);
    crank = hcomm_comm_rank(C);
    if (!strcmp(what, "realloc")) return run_realloc();
    return run_cases(!off, off     ? "mp_gpu_node off"
                           : split ? "mp_gpu_node split"
                                   : "mp_gpu_node cases");
}
