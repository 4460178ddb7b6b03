/*
 * The staging pipeline (api/api_stage_pipe.c, docs/gpu.md "The pipeline")
 * on the GPU model, run with a small HCOMM_GPU_STAGE_CHUNK (64K in ctest):
 *
 *   mp_gpu_pipe cases   allreduce, reduce (root size-1) and broadcast
 *       (root 0) of 1M+7 int32 (64 chunks and a last partial one of 28
 *       bytes), in place and out of place, blocking, hcomm_wait and
 *       hcomm_test; device to device, host to device, device to host, and
 *       device buffers on even ranks only (host on the others: their calls
 *       are chunked too, so the chunk collectives match). Every element and
 *       the guard bytes past each buffer are checked; the staging counters
 *       show the call pipelined in the expected number of chunks, each
 *       staged byte copied once in and once back.
 *   mp_gpu_pipe blocks   allgather, reduce_scatter, alltoall, gather (root
 *       size-1) and scatter (root 1) whose per-rank block is 64Ki+7 int32
 *       (4 chunks and a partial one of 28 bytes; chunk k is the same piece
 *       of every block), in place (the documented forms) and out of place,
 *       blocking, + wait, + test, with the same four placements of device
 *       buffers (host ranks pack the pieces with the CPU): every element
 *       and guard byte; the counters show one pipelined call of 5 chunks,
 *       every device byte copied once in and once back, one copy per piece
 *       (n pieces of a chunk for the blocks that are n; a gather's output
 *       and a scatter's input only at the root: NULL elsewhere). With host
 *       buffers on every rank the ranks' vote finds no device buffer and
 *       nobody pipelines.
 *   mp_gpu_pipe vectors   allgatherv (blocks in reverse rank order, 5
 *       elements apart) and reduce_scatterv whose blocks are 7, 40007,
 *       10006, 50006 int32 (rank order): chunk k is the same element range
 *       of every block, a short block empty in the later chunks; in place
 *       and out, blocking, + wait, + test (the count arrays overwritten
 *       once the call returned), the five placements (host everywhere:
 *       chunked too, with no copies): every element, the gaps untouched,
 *       the guard bytes; the counters: one pipelined call of as many
 *       chunks as the largest block, every device byte of the blocks
 *       copied once in and once back. Then alltoallv (out of place, its
 *       only form) with counts that differ per pair (0 to 3 chunks and a
 *       partial one), so that the chunk count is the ranks' vote.
 *   mp_gpu_pipe fault-in | fault-out   rank 1's copy of a middle chunk fails
 *       (HCOMM_GPU_MODEL_FAULT=copy:N, set by the test on that rank; the
 *       only copies in the call are the ones of that direction): its error
 *       names the device and hcomm_allreduce; the others fail promptly
 *       (copy in: the communicator is revoked) or complete with the right
 *       result (copy back), never a wrong one.
 */
#include "common/mp_test.h"
#include "api/api_stage.h"
#include "gpu/gpu.h"
#include "gpu/model/gpu_model_test.h"
#include "mp_gpu_buf.h"

#define COUNT (((size_t)1 << 20) + 7)

static int32_t val(int rank, size_t i, int v)
{
    return (int32_t)((rank + 1) * (int)(i % 1000) + v);
}

/* A case's name: "<call> [in place|out of place] <how>, send <mem>, recv <mem>". */
static void case_name(char *what, size_t len, const char *call, int inplace, int how, bool sdev,
                      bool rdev)
{
    snprintf(what, len, "%s%s %s, send %s, recv %s", call,
             inplace < 0 ? ""
             : inplace   ? " in place"
                         : " out of place",
             how == 0   ? "blocking"
             : how == 1 ? "+ wait"
                        : "+ test",
             sdev ? "device" : "host", rdev ? "device" : "host");
}

enum { K_ALLREDUCE, K_REDUCE, K_BROADCAST };
static const char *kname[] = {"allreduce", "reduce", "broadcast"};

/* Posts the call: how 0 blocking, 1 non-blocking + hcomm_wait, 2 + hcomm_test. */
static hcomm_status_t call(int kind, int how, const void *s, void *r, size_t count)
{
    hcomm_comm_t w = hcomm_comm_world();
    hcomm_request_t req;
    hcomm_status_t st;
    if (how == 0) {
        if (kind == K_ALLREDUCE) return hcomm_allreduce(s, r, count, HCOMM_INT32, HCOMM_SUM, w);
        if (kind == K_REDUCE)
            return hcomm_reduce(s, r, count, HCOMM_INT32, HCOMM_SUM, mp_size - 1, w);
        return hcomm_broadcast(r, count, HCOMM_INT32, 0, w);
    }
    if (kind == K_ALLREDUCE)
        st = hcomm_iallreduce(s, r, count, HCOMM_INT32, HCOMM_SUM, w, &req);
    else if (kind == K_REDUCE)
        st = hcomm_ireduce(s, r, count, HCOMM_INT32, HCOMM_SUM, mp_size - 1, w, &req);
    else
        st = hcomm_ibroadcast(r, count, HCOMM_INT32, 0, w, &req);
    if (st != HCOMM_OK) return st;
    return req_end(req, how);
}

/* One case: sdev / rdev on this rank, in place (one buffer, rdev's kind). */
static void one_case(int kind, int how, bool inplace, bool sdev, bool rdev)
{
    char what[160];
    case_name(what, sizeof(what), kname[kind], inplace, how, sdev, rdev);
    size_t n = COUNT * 4;
    int32_t *h = mp_xmalloc(n), *g = mp_xmalloc(n);
    bool root = kind == K_BROADCAST ? mp_rank == 0 : kind == K_REDUCE ? mp_rank == mp_size - 1 : 1;
    buf_t r = buf_new(rdev, n), s = inplace || kind == K_BROADCAST ? r : buf_new(sdev, n);
    for (size_t i = 0; i < COUNT; i++) {
        h[i] = val(mp_rank, i, 3);
        g[i] = -7;
    }
    buf_put(&s, h, n);
    if (!inplace && kind != K_BROADCAST) buf_put(&r, g, n);
    if (kind == K_BROADCAST && !root) buf_put(&r, g, n);
    hc_gpu_stats_t c0 = hc_gpu_stats;
    hcomm_status_t st = call(kind, how, s.p, r.p, COUNT);
    hc_gpu_stats_t c1 = hc_gpu_stats;
    if (st != HCOMM_OK) mp_fail("%s: %s (%s)", what, mp_status_name(st), hcomm_last_error());
    size_t chunk = hc_stage_pipe_chunk / 4 * 4, chunks = (n + chunk - 1) / chunk;
    if (c1.pipe_calls != c0.pipe_calls + 1 || c1.pipe_chunks != c0.pipe_chunks + chunks)
        mp_fail("%s: expected 1 pipelined call of %zu chunks, got %llu calls, %llu chunks", what,
                chunks, (unsigned long long)(c1.pipe_calls - c0.pipe_calls),
                (unsigned long long)(c1.pipe_chunks - c0.pipe_chunks));
    bool sd = s.dev && (kind != K_BROADCAST || root), rd = r.dev && (kind != K_BROADCAST || !root);
    bool out = kind == K_ALLREDUCE || (kind == K_REDUCE && root) || (kind == K_BROADCAST && !root);
    size_t want_in = sd ? n : 0, want_out = rd && out ? n : 0;
    if (c1.d2h_bytes - c0.d2h_bytes != want_in || c1.h2d_bytes - c0.h2d_bytes != want_out)
        mp_fail("%s: staging copied %llu bytes in and %llu back, expected %zu and %zu", what,
                (unsigned long long)(c1.d2h_bytes - c0.d2h_bytes),
                (unsigned long long)(c1.h2d_bytes - c0.h2d_bytes), want_in, want_out);
    size_t want_cin = want_in ? chunks : 0, want_cout = want_out ? chunks : 0;
    if (c1.d2h_copies - c0.d2h_copies != want_cin || c1.h2d_copies - c0.h2d_copies != want_cout)
        mp_fail("%s: staging made %llu copies in and %llu back, expected %zu and %zu", what,
                (unsigned long long)(c1.d2h_copies - c0.d2h_copies),
                (unsigned long long)(c1.h2d_copies - c0.h2d_copies), want_cin, want_cout);
    buf_get(&r, g, n, what);
    int sum = mp_size * (mp_size + 1) / 2;
    for (size_t i = 0; out && i < COUNT; i++) {
        int32_t want =
            kind == K_BROADCAST ? val(0, i, 3) : (int32_t)(sum * (int)(i % 1000) + 3 * mp_size);
        if (g[i] != want) {
            mp_fail("%s: element %zu of %zu (chunk %zu) expected %d got %d", what, i, COUNT,
                    i * 4 / chunk, want, g[i]);
            break;
        }
    }
    if (!inplace && kind != K_BROADCAST) { /* the input stays as it was */
        buf_get(&s, g, n, what);
        if (memcmp(g, h, n)) mp_fail("%s: the send buffer changed", what);
        buf_free(&s);
    }
    buf_free(&r);
    free(h);
    free(g);
}

/* ---- the block collectives ---- */

#define BCOUNT (((size_t)1 << 16) + 7)
enum { B_ALLGATHER, B_REDUCE_SCATTER, B_ALLTOALL, B_GATHER, B_SCATTER, B_KINDS };
static const char *bname[] = {"allgather", "reduce_scatter", "alltoall", "gather", "scatter"};

static int broot(int kind)
{
    return kind == B_GATHER ? mp_size - 1 : kind == B_SCATTER ? 1 % mp_size : -1;
}

static hcomm_status_t call_block(int kind, int how, const void *s, void *r)
{
    hcomm_comm_t w = hcomm_comm_world();
    hcomm_request_t req;
    hcomm_request_t *rp = how ? &req : NULL;
    hcomm_status_t st;
    if (kind == B_ALLGATHER)
        st = how ? hcomm_iallgather(s, r, BCOUNT, HCOMM_INT32, w, rp)
                 : hcomm_allgather(s, r, BCOUNT, HCOMM_INT32, w);
    else if (kind == B_REDUCE_SCATTER)
        st = how ? hcomm_ireduce_scatter(s, r, BCOUNT, HCOMM_INT32, HCOMM_SUM, w, rp)
                 : hcomm_reduce_scatter(s, r, BCOUNT, HCOMM_INT32, HCOMM_SUM, w);
    else if (kind == B_ALLTOALL)
        st = how ? hcomm_ialltoall(s, r, BCOUNT, HCOMM_INT32, w, rp)
                 : hcomm_alltoall(s, r, BCOUNT, HCOMM_INT32, w);
    else if (kind == B_GATHER)
        st = how ? hcomm_igather(s, r, BCOUNT, HCOMM_INT32, broot(kind), w, rp)
                 : hcomm_gather(s, r, BCOUNT, HCOMM_INT32, broot(kind), w);
    else
        st = how ? hcomm_iscatter(s, r, BCOUNT, HCOMM_INT32, broot(kind), w, rp)
                 : hcomm_scatter(s, r, BCOUNT, HCOMM_INT32, broot(kind), w);
    if (st != HCOMM_OK || how == 0) return st;
    return req_end(req, how);
}

static int32_t want_block(int kind, size_t i)
{
    size_t me = (size_t)mp_rank, n = (size_t)mp_size;
    if (kind == B_ALLGATHER || kind == B_GATHER) return val((int)(i / BCOUNT), i % BCOUNT, 3);
    if (kind == B_SCATTER) return val(broot(kind), me * BCOUNT + i, 3);
    if (kind == B_ALLTOALL) return val((int)(i / BCOUNT), me * BCOUNT + i % BCOUNT, 3);
    int sum = mp_size * (mp_size + 1) / 2;
    return (int32_t)(sum * (int)((me * BCOUNT + i) % 1000) + 3 * (int)n);
}

/* job_dev: some rank has device buffers (else nobody pipelines: the vote) */
static void one_block(int kind, int how, bool inplace, bool sdev, bool rdev, bool job_dev)
{
    bool root = mp_rank == broot(kind), rooted = kind == B_GATHER || kind == B_SCATTER;
    inplace = inplace && (!rooted || root); /* in place is the root's form */
    char what[160];
    case_name(what, sizeof(what), bname[kind], inplace, how, sdev, rdev);
    size_t n = (size_t)mp_size, me = (size_t)mp_rank, b = BCOUNT * 4;
    /* pieces of a chunk in the input and the output: a gather's output and
     * a scatter's input are the root's only (NULL elsewhere) */
    size_t ni = kind == B_ALLGATHER || kind == B_GATHER ? 1 : kind == B_SCATTER && !root ? 0 : n;
    size_t no = kind == B_REDUCE_SCATTER || kind == B_SCATTER ? 1
                : kind == B_GATHER && !root                   ? 0
                                                              : n;
    size_t sin = ni * BCOUNT, sout = no * BCOUNT, big = HC_MAX(sin, sout);
    int32_t *h = mp_xmalloc(big * 4 + 4), *g = mp_xmalloc(big * 4 + 4);
    for (size_t i = 0; i < big; i++)
        g[i] = -7;
    for (size_t i = 0; i < sin; i++)
        h[i] = val(mp_rank, i, 3);
    /* in place: allgather's and the root's gather's input is its block of
     * the output, reduce_scatter's and the root's scatter's output its
     * block of the input, alltoall's one buffer */
    size_t in_at = !inplace              ? 0
                   : kind == B_ALLGATHER ? me * BCOUNT
                   : kind == B_GATHER    ? me * BCOUNT
                                         : 0;
    size_t out_at = !inplace ? 0 : kind == B_REDUCE_SCATTER || kind == B_SCATTER ? me * BCOUNT : 0;
    buf_t r = {0}, s = {0};
    if (inplace || no) r = buf_new(rdev, (inplace ? big : sout) * 4);
    if (inplace) {
        s = r;
        memcpy(g + in_at, h, sin * 4);
        buf_put(&r, g, big * 4);
    } else {
        if (ni) {
            s = buf_new(sdev, sin * 4);
            buf_put(&s, h, sin * 4);
        }
        if (no) buf_put(&r, g, sout * 4);
    }
    hc_gpu_stats_t c0 = hc_gpu_stats;
    hcomm_status_t st = call_block(kind, how, (int32_t *)s.p + in_at, (int32_t *)r.p + out_at);
    hc_gpu_stats_t c1 = hc_gpu_stats;
    if (st != HCOMM_OK) mp_fail("%s: %s (%s)", what, mp_status_name(st), hcomm_last_error());
    size_t chunk = hc_stage_pipe_chunk / 4 * 4, chunks = (b + chunk - 1) / chunk;
    size_t calls = job_dev ? 1 : 0;
    if (!job_dev) chunks = 0;
    if (c1.pipe_calls != c0.pipe_calls + calls || c1.pipe_chunks != c0.pipe_chunks + chunks)
        mp_fail("%s: expected %zu pipelined calls of %zu chunks, got %llu calls, %llu chunks", what,
                calls, chunks, (unsigned long long)(c1.pipe_calls - c0.pipe_calls),
                (unsigned long long)(c1.pipe_chunks - c0.pipe_chunks));
    size_t want_in = s.dev ? ni * b : 0, want_out = r.dev ? no * b : 0;
    if (c1.d2h_bytes - c0.d2h_bytes != want_in || c1.h2d_bytes - c0.h2d_bytes != want_out)
        mp_fail("%s: staging copied %llu bytes in and %llu back, expected %zu and %zu", what,
                (unsigned long long)(c1.d2h_bytes - c0.d2h_bytes),
                (unsigned long long)(c1.h2d_bytes - c0.h2d_bytes), want_in, want_out);
    size_t want_cin = s.dev ? chunks * ni : 0, want_cout = r.dev ? chunks * no : 0;
    if (c1.d2h_copies - c0.d2h_copies != want_cin || c1.h2d_copies - c0.h2d_copies != want_cout)
        mp_fail("%s: staging made %llu copies in and %llu back, expected %zu and %zu", what,
                (unsigned long long)(c1.d2h_copies - c0.d2h_copies),
                (unsigned long long)(c1.h2d_copies - c0.h2d_copies), want_cin, want_cout);
    if (inplace || no) buf_get(&r, g, (inplace ? big : sout) * 4, what);
    for (size_t i = 0; i < sout; i++)
        if (g[out_at + i] != want_block(kind, i)) {
            mp_fail("%s: element %zu of %zu (piece %zu of chunk %zu) expected %d got %d", what, i,
                    sout, i / BCOUNT, i % BCOUNT * 4 / chunk, want_block(kind, i), g[out_at + i]);
            break;
        }
    if (!inplace && ni) { /* the input stays as it was */
        buf_get(&s, g, sin * 4, what);
        if (memcmp(g, h, sin * 4)) mp_fail("%s: the send buffer changed", what);
        buf_free(&s);
    }
    if (inplace || no) buf_free(&r);
    free(h);
    free(g);
}

static int run_blocks(void)
{
    /* ... and host buffers on every rank: not pipelined, one collective */
    const int mems[5][2] = {{1, 1}, {0, 1}, {1, 0}, {2, 2}, {0, 0}};
    for (int kind = 0; kind < B_KINDS; kind++)
        for (int m = 0; m < 5; m++)
            for (int inplace = 0; inplace < 2; inplace++) {
                if (inplace && mems[m][0] != mems[m][1]) continue;
                bool sd = mems[m][0] == 2 ? mp_rank % 2 == 0 : mems[m][0];
                bool rd = mems[m][1] == 2 ? mp_rank % 2 == 0 : mems[m][1];
                for (int how = 0; how < 3; how++)
                    one_block(kind, how, inplace, sd, rd, m != 4);
            }
    MP_OK(hcomm_barrier(hcomm_comm_world()));
    return mp_finish("mp_gpu_pipe blocks");
}

/* ---- the vector collectives ---- */

/* Rank j's block: 7, 40007, 10006, 50006, ... elements (at 64K chunks: one
 * piece, 3 chunks and a partial one, a partial one, 4 chunks), so chunk k
 * holds pieces of some ranks only. */
static size_t vcount(int j)
{
    return ((size_t)j * 40000 + 7) % 70001;
}

enum { V_ALLGATHERV, V_REDUCE_SCATTERV };
static const char *vname[] = {"allgatherv", "reduce_scatterv"};

/* allgatherv's output: the blocks in reverse rank order, 5 elements apart
 * (the gaps must stay as they were); reduce_scatterv's input: rank order,
 * contiguous (its form). disp[j] in elements; returns the buffer's length. */
static size_t vlayout(int kind, size_t *cnt, size_t *disp)
{
    size_t at = 0;
    for (int j = 0; j < mp_size; j++)
        cnt[j] = vcount(j);
    for (int i = 0; i < mp_size; i++) {
        int j = kind == V_ALLGATHERV ? mp_size - 1 - i : i;
        disp[j] = at;
        at += cnt[j] + (kind == V_ALLGATHERV ? 5 : 0);
    }
    return at;
}

static void one_vector(int kind, int how, bool inplace, bool sdev, bool rdev)
{
    char what[160];
    case_name(what, sizeof(what), vname[kind], inplace, how, sdev, rdev);
    size_t n = (size_t)mp_size, me = (size_t)mp_rank;
    size_t *cnt = mp_xmalloc(n * sizeof(size_t)), *disp = mp_xmalloc(n * sizeof(size_t));
    size_t len = vlayout(kind, cnt, disp), mine = cnt[me];
    bool ag = kind == V_ALLGATHERV;
    size_t sin = ag ? mine : len, sout = ag ? len : mine, big = HC_MAX(sin, sout);
    int32_t *h = mp_xmalloc(big * 4 + 4), *g = mp_xmalloc(big * 4 + 4),
            *want = mp_xmalloc(big * 4 + 4);
    for (size_t i = 0; i < big; i++)
        g[i] = -7;
    for (size_t i = 0; i < sin; i++)
        h[i] = val(mp_rank, i, 3);
    /* in place: allgatherv's input is its block of the output,
     * reduce_scatterv's output its block of the input */
    size_t in_at = inplace && ag ? disp[me] : 0, out_at = inplace && !ag ? disp[me] : 0;
    buf_t r = buf_new(rdev, (inplace ? big : sout) * 4), s = r;
    if (inplace) {
        memcpy(g + in_at, h, sin * 4);
        buf_put(&r, g, big * 4);
    } else {
        s = buf_new(sdev, sin * 4);
        buf_put(&s, h, sin * 4);
        buf_put(&r, g, sout * 4);
    }
    /* what the output holds after: allgatherv's gaps as they were */
    for (size_t i = 0; i < sout; i++)
        want[i] = inplace ? g[out_at + i] : -7;
    int sum = mp_size * (mp_size + 1) / 2;
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; ag && i < cnt[j]; i++)
            want[disp[j] + i] = val((int)j, i, 3);
    for (size_t i = 0; !ag && i < mine; i++)
        want[i] = (int32_t)(sum * (int)((disp[me] + i) % 1000) + 3 * (int)n);
    hc_gpu_stats_t c0 = hc_gpu_stats;
    hcomm_comm_t w = hcomm_comm_world();
    hcomm_request_t req;
    hcomm_request_t *rp = how ? &req : NULL;
    const int32_t *sp = (int32_t *)s.p + in_at;
    int32_t *rpp = (int32_t *)r.p + out_at;
    hcomm_status_t st;
    if (ag)
        st = how ? hcomm_iallgatherv(sp, mine, rpp, cnt, disp, HCOMM_INT32, w, rp)
                 : hcomm_allgatherv(sp, mine, rpp, cnt, disp, HCOMM_INT32, w);
    else
        st = how ? hcomm_ireduce_scatterv(sp, rpp, cnt, HCOMM_INT32, HCOMM_SUM, w, rp)
                 : hcomm_reduce_scatterv(sp, rpp, cnt, HCOMM_INT32, HCOMM_SUM, w);
    /* the arrays may be reused once the call returned */
    for (size_t j = 0; j < n; j++)
        cnt[j] = disp[j] = 99999999;
    if (st == HCOMM_OK && how) st = req_end(req, how);
    hc_gpu_stats_t c1 = hc_gpu_stats;
    if (st != HCOMM_OK) mp_fail("%s: %s (%s)", what, mp_status_name(st), hcomm_last_error());
    vlayout(kind, cnt, disp);
    size_t chunk = hc_stage_pipe_chunk / 4, chunks = 0;
    for (size_t j = 0; j < n; j++)
        chunks = HC_MAX(chunks, (cnt[j] + chunk - 1) / chunk);
    if (c1.pipe_calls != c0.pipe_calls + 1 || c1.pipe_chunks != c0.pipe_chunks + chunks)
        mp_fail("%s: expected 1 pipelined call of %zu chunks, got %llu calls, %llu chunks", what,
                chunks, (unsigned long long)(c1.pipe_calls - c0.pipe_calls),
                (unsigned long long)(c1.pipe_chunks - c0.pipe_chunks));
    /* device bytes copied once in and once back: the blocks, not the gaps */
    size_t blocks = 0;
    for (size_t j = 0; j < n; j++)
        blocks += cnt[j] * 4;
    size_t want_in = s.dev ? (ag ? mine * 4 : blocks) : 0,
           want_out = r.dev ? (ag ? blocks : mine * 4) : 0;
    if (c1.d2h_bytes - c0.d2h_bytes != want_in || c1.h2d_bytes - c0.h2d_bytes != want_out)
        mp_fail("%s: staging copied %llu bytes in and %llu back, expected %zu and %zu", what,
                (unsigned long long)(c1.d2h_bytes - c0.d2h_bytes),
                (unsigned long long)(c1.h2d_bytes - c0.h2d_bytes), want_in, want_out);
    buf_get(&r, g, (inplace ? big : sout) * 4, what);
    for (size_t i = 0; i < sout; i++)
        if (g[out_at + i] != want[i]) {
            mp_fail("%s: element %zu of %zu expected %d got %d", what, i, sout, want[i],
                    g[out_at + i]);
            break;
        }
    if (!inplace) { /* the input stays as it was */
        buf_get(&s, g, sin * 4, what);
        if (memcmp(g, h, sin * 4)) mp_fail("%s: the send buffer changed", what);
        buf_free(&s);
    }
    buf_free(&r);
    free(h);
    free(g);
    free(want);
    free(cnt);
    free(disp);
}

/* alltoallv: rank i sends rank j a2a_count(i, j) elements (0 to 3 chunks
 * and a partial one at 64K chunks; every rank's largest differs, so the
 * chunk count is the ranks' vote), send blocks in reverse rank order 3
 * elements apart, receive blocks in rank order 5 apart (the gaps stay). */
static size_t a2a_count(int i, int j)
{
    return ((size_t)(i * 3 + j * 5) * 13001 + 7) % 50001;
}

static size_t a2a_layout(bool send, size_t *cnt, size_t *disp)
{
    size_t at = 0;
    for (int k = 0; k < mp_size; k++) {
        int j = send ? mp_size - 1 - k : k;
        cnt[j] = send ? a2a_count(mp_rank, j) : a2a_count(j, mp_rank);
        disp[j] = at;
        at += cnt[j] + (send ? 3 : 5);
    }
    return at;
}

static void one_alltoallv(int how, bool sdev, bool rdev)
{
    char what[160];
    case_name(what, sizeof(what), "alltoallv", -1, how, sdev, rdev);
    size_t n = (size_t)mp_size, me = (size_t)mp_rank;
    size_t *sc = mp_xmalloc(n * sizeof(size_t)), *sd = mp_xmalloc(n * sizeof(size_t));
    size_t *rc = mp_xmalloc(n * sizeof(size_t)), *rd = mp_xmalloc(n * sizeof(size_t));
    size_t slen = a2a_layout(true, sc, sd), rlen = a2a_layout(false, rc, rd);
    int32_t *h = mp_xmalloc(slen * 4 + 4), *g = mp_xmalloc(rlen * 4 + 4);
    int32_t *want = mp_xmalloc(rlen * 4 + 4);
    for (size_t i = 0; i < slen; i++)
        h[i] = -3;
    for (size_t j = 0; j < n; j++)
        for (size_t t = 0; t < sc[j]; t++)
            h[sd[j] + t] = val(mp_rank, j * 1009 + t, 3);
    for (size_t i = 0; i < rlen; i++)
        g[i] = want[i] = -7;
    for (size_t j = 0; j < n; j++)
        for (size_t t = 0; t < rc[j]; t++)
            want[rd[j] + t] = val((int)j, me * 1009 + t, 3);
    buf_t s = buf_new(sdev, slen * 4), r = buf_new(rdev, rlen * 4);
    buf_put(&s, h, slen * 4);
    buf_put(&r, g, rlen * 4);
    hc_gpu_stats_t c0 = hc_gpu_stats;
    hcomm_comm_t w = hcomm_comm_world();
    hcomm_request_t req;
    hcomm_status_t st = how ? hcomm_ialltoallv(s.p, sc, sd, r.p, rc, rd, HCOMM_INT32, w, &req)
                            : hcomm_alltoallv(s.p, sc, sd, r.p, rc, rd, HCOMM_INT32, w);
    for (size_t j = 0; j < n; j++) /* the arrays may be reused once the call returned */
        sc[j] = sd[j] = rc[j] = rd[j] = 99999999;
    if (st == HCOMM_OK && how) st = req_end(req, how);
    hc_gpu_stats_t c1 = hc_gpu_stats;
    if (st != HCOMM_OK) mp_fail("%s: %s (%s)", what, mp_status_name(st), hcomm_last_error());
    a2a_layout(true, sc, sd);
    a2a_layout(false, rc, rd);
    size_t chunk = hc_stage_pipe_chunk / 4, most = 0, sbytes = 0, rbytes = 0;
    for (int i = 0; i < mp_size; i++)
        for (int j = 0; j < mp_size; j++)
            most = HC_MAX(most, a2a_count(i, j));
    for (size_t j = 0; j < n; j++)
        sbytes += sc[j] * 4, rbytes += rc[j] * 4;
    size_t chunks = (most + chunk - 1) / chunk;
    if (c1.pipe_calls != c0.pipe_calls + 1 || c1.pipe_chunks != c0.pipe_chunks + chunks)
        mp_fail("%s: expected 1 pipelined call of %zu chunks, got %llu calls, %llu chunks", what,
                chunks, (unsigned long long)(c1.pipe_calls - c0.pipe_calls),
                (unsigned long long)(c1.pipe_chunks - c0.pipe_chunks));
    size_t want_in = s.dev ? sbytes : 0, want_out = r.dev ? rbytes : 0;
    if (c1.d2h_bytes - c0.d2h_bytes != want_in || c1.h2d_bytes - c0.h2d_bytes != want_out)
        mp_fail("%s: staging copied %llu bytes in and %llu back, expected %zu and %zu", what,
                (unsigned long long)(c1.d2h_bytes - c0.d2h_bytes),
                (unsigned long long)(c1.h2d_bytes - c0.h2d_bytes), want_in, want_out);
    buf_get(&r, g, rlen * 4, what);
    for (size_t i = 0; i < rlen; i++)
        if (g[i] != want[i]) {
            mp_fail("%s: element %zu of %zu expected %d got %d", what, i, rlen, want[i], g[i]);
            break;
        }
    int32_t *back = mp_xmalloc(slen * 4 + 4);
    buf_get(&s, back, slen * 4, what);
    if (memcmp(back, h, slen * 4)) mp_fail("%s: the send buffer changed", what);
    free(back);
    buf_free(&s);
    buf_free(&r);
    free(h);
    free(g);
    free(want);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

static int run_vectors(void)
{
    /* host buffers everywhere too: chunked alike, with no copies */
    const int mems[5][2] = {{1, 1}, {0, 1}, {1, 0}, {2, 2}, {0, 0}};
    for (int kind = 0; kind < 2; kind++)
        for (int m = 0; m < 5; m++)
            for (int inplace = 0; inplace < 2; inplace++) {
                if (inplace && mems[m][0] != mems[m][1]) continue;
                bool sd = mems[m][0] == 2 ? mp_rank % 2 == 0 : mems[m][0];
                bool rd = mems[m][1] == 2 ? mp_rank % 2 == 0 : mems[m][1];
                for (int how = 0; how < 3; how++)
                    one_vector(kind, how, inplace, sd, rd);
            }
    for (int m = 0; m < 5; m++) /* (alltoallv is not done in place) */
        for (int how = 0; how < 3; how++)
            one_alltoallv(how, mems[m][0] == 2 ? mp_rank % 2 == 0 : mems[m][0],
                          mems[m][1] == 2 ? mp_rank % 2 == 0 : mems[m][1]);
    MP_OK(hcomm_barrier(hcomm_comm_world()));
    return mp_finish("mp_gpu_pipe vectors");
}

static int run_cases(void)
{
    /* device / device, host send + device recv, device send + host recv,
     * device on even ranks only */
    const int mems[4][2] = {{1, 1}, {0, 1}, {1, 0}, {2, 2}};
    for (int kind = 0; kind < 3; kind++)
        for (int m = 0; m < 4; m++)
            for (int inplace = 0; inplace < 2; inplace++) {
                if (kind == K_BROADCAST && (!inplace || mems[m][0] != mems[m][1])) continue;
                if (inplace && mems[m][0] != mems[m][1]) continue;
                bool sd = mems[m][0] == 2 ? mp_rank % 2 == 0 : mems[m][0];
                bool rd = mems[m][1] == 2 ? mp_rank % 2 == 0 : mems[m][1];
                for (int how = 0; how < 3; how++)
                    one_case(kind, how, inplace, sd, rd);
            }
    MP_OK(hcomm_barrier(hcomm_comm_world()));
    return mp_finish("mp_gpu_pipe cases");
}

/* Rank 1: fault-in: sendbuf device, recvbuf host, so the call's copies are
 * its copies in (copy 1 is the test's fill, copy 2 + k chunk k's);
 * fault-out: sendbuf host, recvbuf device (copy 1 fills it and its guard), so they are
 * its copies back (copy 2 + k is chunk k's). The fault hits chunk 32 of 65. */
static int run_fault(int in)
{
    const char *rk = getenv("HCOMM_RANK");
    if (rk && atoi(rk) == 1) setenv("HCOMM_GPU_MODEL_FAULT", "copy:34", 1);
    mp_init();
    size_t n = COUNT * 4;
    buf_t s = buf_new(in, n), r = buf_new(!in, n);
    int32_t *h = mp_xmalloc(n);
    for (size_t i = 0; i < COUNT; i++)
        h[i] = val(mp_rank, i, 0);
    int32_t *z = calloc(COUNT, 4);
    buf_put(&s, h, n); /* one model copy in all: the device buffer's fill */
    buf_put(&r, z, n);
    free(z);
    double t0 = mp_now();
    hcomm_status_t st =
        hcomm_allreduce(s.p, r.p, COUNT, HCOMM_INT32, HCOMM_SUM, hcomm_comm_world());
    double dt = mp_now() - t0;
    const char *msg = hcomm_last_error();
    if (mp_rank == 1) {
        if (st == HCOMM_OK)
            mp_fail("fault %s: the failed copy went unnoticed", in ? "in" : "out");
        else if (!strstr(msg, "device 0") || !strstr(msg, "hcomm_allreduce") ||
                 !strstr(msg, "chunk 32 of 65"))
            mp_fail("fault: the error does not name the device, the call and the chunk: %s", msg);
        else
            printf("rank 1: %s (as expected)\n", msg);
    } else if (st != HCOMM_OK) {
        if (!in)
            mp_fail("fault out: rank 1's copy back failed, yet this rank failed: %s", msg);
        else if (dt > 20)
            mp_fail("fault in: failed only after %.1f s (expected promptly): %s", dt, msg);
    } else {
        if (in) mp_fail("fault in: this rank completed although rank 1 had no input");
        buf_get(&r, h, n, "fault");
        int sum = mp_size * (mp_size + 1) / 2;
        for (size_t i = 0; i < COUNT; i++)
            if (h[i] != (int32_t)(sum * (int)(i % 1000))) {
                mp_fail("fault out: element %zu expected %d got %d", i, sum * (int)(i % 1000),
                        h[i]);
                break;
            }
    }
    return buf_case_end(h, &s, &r, in ? "fault in" : "fault out", dt);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "fault-in") || !strcmp(what, "fault-out"))
        return run_fault(!strcmp(what, "fault-in"));
    if (strcmp(what, "cases") && strcmp(what, "blocks") && strcmp(what, "vectors")) {
        fprintf(stderr, "usage: mp_gpu_pipe cases | blocks | vectors | fault-in | fault-out\n");
        return 2;
    }
    mp_init();
    return !strcmp(what, "blocks")    ? run_blocks()
           : !strcmp(what, "vectors") ? run_vectors()
                                      : run_cases();
}
