/*
 * Bad arguments to every public call, on 1 or 2 ranks: each must return a
 * negative status (the one hcomm.h names where it names one), leave output
 * arguments untouched, and set last_error to a message naming the function
 * and the argument. After each group of bad calls a valid allreduce must
 * still work. Misuse too: stale request handles (of requests already
 * completed, whose slot serves another), vector displacements that leave
 * the address space, send and receive buffers that partly overlap. Also: calls before init and after finalize, double init,
 * init -> finalize -> init -> finalize.
 *
 *   mp_badinput          everything except the bad-pointer hcomm_mem_free
 *   mp_badinput mem      hcomm_mem_alloc/free checks (pointers hcomm did not
 *                        return, double free, interior pointers)
 *   mp_badinput abort_freed  hcomm_comm_abort on a freed communicator
 *
 * Every rank makes the same calls; a bad call fails locally before any
 * communication, so the ranks stay in step.
 */
#include "common/mp_test.h"

#include <stdint.h>

#define BAD_DTYPE ((hcomm_dtype_t)97)
#define BAD_OP ((hcomm_op_t)97)
#define HUGE_COUNT (SIZE_MAX / 2)
#define SENTINEL ((hcomm_request_t)(uintptr_t)0x5e5e5e5e)

/* want: the status; fn and arg: substrings last_error must contain. */
#define BAD(want, call, fn, arg)                                                                   \
    do {                                                                                           \
        if (mp_expect_status_((want), (call), #call, __FILE__, __LINE__))                          \
            mp_expect_msg(#call, (fn), (arg), (const char *)NULL);                                 \
    } while (0)

/* The request output must not be written by a failing call. */
#define BAD_NB(want, call, fn, arg)                                                                \
    do {                                                                                           \
        req = SENTINEL;                                                                            \
        BAD(want, call, fn, arg);                                                                  \
        if (req != SENTINEL)                                                                       \
            mp_fail("%s: req_p expected untouched on failure got %p", #call, (void *)req);         \
    } while (0)

static int g_checkpoints;

/* A valid allreduce: the library must still work after the bad calls. */
static void still_ok(const char *after)
{
    int64_t v = mp_rank + 1, s = 0, want = (int64_t)mp_size * (mp_size + 1) / 2;
    hcomm_status_t st = hcomm_allreduce(&v, &s, 1, HCOMM_INT64, HCOMM_SUM, hcomm_comm_world());
    if (st != HCOMM_OK) {
        mp_fail("allreduce after %s expected OK got %s (%s)", after, mp_status_name(st),
                hcomm_last_error());
        exit(1);
    }
    if (s != want)
        mp_fail("allreduce after %s expected %lld got %lld", after, (long long)want, (long long)s);
    g_checkpoints++;
}

static void check_not_initialized(hcomm_comm_t stale_comm, const char *when)
{
    char buf[64] = {0};
    hcomm_request_t req;
    const hcomm_status_t NI = HCOMM_ERR_NOT_INITIALIZED;
    if (hcomm_initialized() != 0)
        mp_fail("%s: hcomm_initialized() expected 0 got %d", when, hcomm_initialized());
    if (hcomm_comm_world() != NULL)
        mp_fail("%s: hcomm_comm_world() expected NULL got %p", when, (void *)hcomm_comm_world());
    if (hcomm_comm_rank(stale_comm) != -1)
        mp_fail("%s: hcomm_comm_rank expected -1 got %d", when, hcomm_comm_rank(stale_comm));
    if (hcomm_comm_size(stale_comm) != -1)
        mp_fail("%s: hcomm_comm_size expected -1 got %d", when, hcomm_comm_size(stale_comm));
    BAD(NI, hcomm_finalize(), "hcomm_finalize", "init");
    BAD(NI, hcomm_send(buf, 1, HCOMM_UINT8, 0, 0, stale_comm), "hcomm_send", "init");
    BAD(NI, hcomm_recv(buf, 1, HCOMM_UINT8, 0, 0, stale_comm), "hcomm_recv", "init");
    BAD_NB(NI, hcomm_isend(buf, 1, HCOMM_UINT8, 0, 0, stale_comm, &req), "hcomm_isend", "init");
    BAD_NB(NI, hcomm_irecv(buf, 1, HCOMM_UINT8, 0, 0, stale_comm, &req), "hcomm_irecv", "init");
    BAD(NI, hcomm_allreduce(buf, buf, 1, HCOMM_UINT8, HCOMM_SUM, stale_comm), "hcomm_allreduce",
        "init");
    BAD(NI, hcomm_broadcast(buf, 1, HCOMM_UINT8, 0, stale_comm), "hcomm_broadcast", "init");
    BAD(NI, hcomm_reduce(buf, buf, 1, HCOMM_UINT8, HCOMM_SUM, 0, stale_comm), "hcomm_reduce",
        "init");
    BAD(NI, hcomm_allgather(buf, buf, 1, HCOMM_UINT8, stale_comm), "hcomm_allgather", "init");
    BAD(NI, hcomm_reduce_scatter(buf, buf, 1, HCOMM_UINT8, HCOMM_SUM, stale_comm),
        "hcomm_reduce_scatter", "init");
    BAD(NI, hcomm_alltoall(buf, buf, 1, HCOMM_UINT8, stale_comm), "hcomm_alltoall", "init");
    BAD(NI, hcomm_barrier(stale_comm), "hcomm_barrier", "init");
    BAD_NB(NI, hcomm_iallreduce(buf, buf, 1, HCOMM_UINT8, HCOMM_SUM, stale_comm, &req),
           "hcomm_iallreduce", "init");
    BAD_NB(NI, hcomm_ibarrier(stale_comm, &req), "hcomm_ibarrier", "init");
    BAD(NI, hcomm_wait(SENTINEL), "hcomm_wait", "init");
    int done = 7;
    BAD(NI, hcomm_test(SENTINEL, &done), "hcomm_test", "init");
    if (done != 7) mp_fail("%s: hcomm_test done_p expected untouched got %d", when, done);
    void *p = (void *)buf;
    BAD(NI, hcomm_mem_alloc(64, &p), "hcomm_mem_alloc", "init");
    if (p != (void *)buf) mp_fail("%s: hcomm_mem_alloc ptr_p expected untouched", when);
    BAD(NI, hcomm_mem_free(buf), "hcomm_mem_free", "init");
    BAD(NI, hcomm_group_start(), "hcomm_group_start", "init");
    BAD(NI, hcomm_group_end(), "hcomm_group_end", "init");
    hcomm_comm_t nc = (hcomm_comm_t)(uintptr_t)0x5e5e;
    BAD(NI, hcomm_comm_split(stale_comm, 0, 0, &nc), "hcomm_comm_split", "init");
    if (nc != (hcomm_comm_t)(uintptr_t)0x5e5e)
        mp_fail("%s: hcomm_comm_split newcomm_p expected untouched", when);
    BAD(NI, hcomm_comm_free(stale_comm), "hcomm_comm_free", "init");
    BAD(NI, hcomm_comm_abort(stale_comm), "hcomm_comm_abort", "init");
}

static void check_p2p(hcomm_comm_t w, hcomm_comm_t freed)
{
    char buf[64] = {0};
    hcomm_request_t req;
    const hcomm_status_t INV = HCOMM_ERR_INVALID;
    int n = mp_size;
    /* The four calls share one checker; each is called with each bad argument. */
    BAD(INV, hcomm_send(NULL, 1, HCOMM_UINT8, 0, 0, w), "hcomm_send", "buf");
    BAD(INV, hcomm_recv(NULL, 4, HCOMM_INT32, 0, 0, w), "hcomm_recv", "buf");
    BAD_NB(INV, hcomm_isend(NULL, 1, HCOMM_UINT8, 0, 0, w, &req), "hcomm_isend", "buf");
    BAD_NB(INV, hcomm_irecv(NULL, 1, HCOMM_UINT8, 0, 0, w, &req), "hcomm_irecv", "buf");

    BAD(INV, hcomm_send(buf, 1, BAD_DTYPE, 0, 0, w), "hcomm_send", "dtype 97");
    BAD(INV, hcomm_recv(buf, 1, BAD_DTYPE, 0, 0, w), "hcomm_recv", "dtype 97");
    BAD_NB(INV, hcomm_isend(buf, 1, BAD_DTYPE, 0, 0, w, &req), "hcomm_isend", "dtype 97");
    BAD_NB(INV, hcomm_irecv(buf, 1, (hcomm_dtype_t)-1, 0, 0, w, &req), "hcomm_irecv", "dtype");

    BAD(INV, hcomm_send(buf, 1, HCOMM_UINT8, n, 0, w), "hcomm_send", "peer");
    BAD(INV, hcomm_send(buf, 1, HCOMM_UINT8, -1, 0, w), "hcomm_send", "peer -1");
    BAD(INV, hcomm_recv(buf, 1, HCOMM_UINT8, n, 0, w), "hcomm_recv", "peer");
    BAD_NB(INV, hcomm_isend(buf, 1, HCOMM_UINT8, n + 5, 0, w, &req), "hcomm_isend", "peer");
    BAD_NB(INV, hcomm_irecv(buf, 1, HCOMM_UINT8, -7, 0, w, &req), "hcomm_irecv", "peer -7");

    BAD(INV, hcomm_send(buf, 1, HCOMM_UINT8, 0, -1, w), "hcomm_send", "tag -1");
    BAD(INV, hcomm_recv(buf, 1, HCOMM_UINT8, 0, -5, w), "hcomm_recv", "tag -5");
    BAD_NB(INV, hcomm_isend(buf, 1, HCOMM_UINT8, 0, -1, w, &req), "hcomm_isend", "tag");
    BAD_NB(INV, hcomm_irecv(buf, 1, HCOMM_UINT8, 0, -1, w, &req), "hcomm_irecv", "tag");

    BAD(INV, hcomm_send(buf, HUGE_COUNT, HCOMM_FLOAT32, 0, 0, w), "hcomm_send", "count");
    BAD(INV, hcomm_recv(buf, HUGE_COUNT, HCOMM_INT64, 0, 0, w), "hcomm_recv", "count");
    BAD_NB(INV, hcomm_isend(buf, SIZE_MAX, HCOMM_UINT32, 0, 0, w, &req), "hcomm_isend", "count");
    BAD_NB(INV, hcomm_irecv(buf, HUGE_COUNT, HCOMM_FLOAT16, 0, 0, w, &req), "hcomm_irecv", "count");

    BAD(INV, hcomm_send(buf, 1, HCOMM_UINT8, 0, 0, NULL), "hcomm_send", "comm");
    BAD(INV, hcomm_recv(buf, 1, HCOMM_UINT8, 0, 0, freed), "hcomm_recv", "comm");
    BAD_NB(INV, hcomm_isend(buf, 1, HCOMM_UINT8, 0, 0, freed, &req), "hcomm_isend", "comm");
    BAD_NB(INV, hcomm_irecv(buf, 1, HCOMM_UINT8, 0, 0, NULL, &req), "hcomm_irecv", "comm");

    BAD(INV, hcomm_isend(buf, 1, HCOMM_UINT8, 0, 0, w, NULL), "hcomm_isend", "req_p");
    BAD(INV, hcomm_irecv(buf, 1, HCOMM_UINT8, 0, 0, w, NULL), "hcomm_irecv", "req_p");
    still_ok("bad point-to-point arguments");

    /* count 0 with NULL buffers is valid: a message of 0 bytes to self. */
    hcomm_request_t rr;
    MP_OK(hcomm_irecv(NULL, 0, HCOMM_FLOAT64, mp_rank, 3, w, &rr));
    MP_OK(hcomm_send(NULL, 0, HCOMM_FLOAT64, mp_rank, 3, w));
    MP_OK(hcomm_wait(rr));
}

static void check_requests(hcomm_comm_t w)
{
    const hcomm_status_t INV = HCOMM_ERR_INVALID;
    int done = 7;
    BAD(INV, hcomm_wait(NULL), "hcomm_wait", "request");
    BAD(INV, hcomm_test(NULL, &done), "hcomm_test", "request");
    if (done != 7) mp_fail("hcomm_test(NULL): done_p expected untouched got %d", done);
    /* Not a request at all: memory of the caller. */
    uint64_t fake[32];
    memset(fake, 0x68, sizeof(fake));
    BAD(INV, hcomm_wait((hcomm_request_t)(void *)fake), "hcomm_wait", "request");
    BAD(INV, hcomm_test((hcomm_request_t)(void *)fake, &done), "hcomm_test", "request");

    /* A pending receive: test with a NULL done_p, then completed normally. */
    uint64_t v = 42 + (uint64_t)mp_rank, r = 0;
    hcomm_request_t rr, sr;
    MP_OK(hcomm_irecv(&r, 1, HCOMM_UINT64, mp_rank, 9, w, &rr));
    BAD(INV, hcomm_test(rr, NULL), "hcomm_test", "done_p");
    MP_OK(hcomm_isend(&v, 1, HCOMM_UINT64, mp_rank, 9, w, &sr));
    MP_OK(hcomm_wait(rr));
    MP_OK(hcomm_wait(sr));
    if (r != v)
        mp_fail("self message after hcomm_test(req, NULL): expected %llu got %llu",
                (unsigned long long)v, (unsigned long long)r);
    /* Completed requests are gone: wait/test on them again is invalid. */
    BAD(INV, hcomm_wait(rr), "hcomm_wait", "request");
    BAD(INV, hcomm_wait(sr), "hcomm_wait", "request");
    done = 7;
    BAD(INV, hcomm_test(rr, &done), "hcomm_test", "request");
    if (done != 7) mp_fail("hcomm_test(completed request): done_p expected untouched got %d", done);
    /* Same through hcomm_test completion. */
    MP_OK(hcomm_isend(&v, 1, HCOMM_UINT64, mp_rank, 10, w, &sr));
    MP_OK(hcomm_irecv(&r, 1, HCOMM_UINT64, mp_rank, 10, w, &rr));
    for (int d = 0; !d;)
        MP_OK(hcomm_test(rr, &d));
    for (int d = 0; !d;)
        MP_OK(hcomm_test(sr, &d));
    BAD(INV, hcomm_test(rr, &done), "hcomm_test", "request");
    BAD(INV, hcomm_wait(sr), "hcomm_wait", "request");
    still_ok("bad requests");
}

/* A completed request's handle is stale: it must not reach the request that
 * reuses its slot (before generations in handles, hcomm_wait(stale)
 * completed the new request and freed it under its owner). */
static void check_stale_handles(hcomm_comm_t w)
{
    const hcomm_status_t INV = HCOMM_ERR_INVALID;
    uint64_t v = 7 + (uint64_t)mp_rank, r = 0, r2 = 0;
    hcomm_request_t stale, sr, fresh;
    MP_OK(hcomm_irecv(&r, 1, HCOMM_UINT64, mp_rank, 20, w, &stale));
    MP_OK(hcomm_isend(&v, 1, HCOMM_UINT64, mp_rank, 20, w, &sr));
    MP_OK(hcomm_wait(sr));
    MP_OK(hcomm_wait(stale));
    /* The next request takes the slot stale named (the pool reuses the
     * most recently freed one first), and completes at once. */
    MP_OK(hcomm_irecv(&r2, 1, HCOMM_UINT64, mp_rank, 21, w, &fresh));
    MP_OK(hcomm_isend(&v, 1, HCOMM_UINT64, mp_rank, 21, w, &sr));
    BAD(INV, hcomm_wait(stale), "hcomm_wait", "stale");
    int done = 7;
    BAD(INV, hcomm_test(stale, &done), "hcomm_test", "stale");
    if (done != 7) mp_fail("hcomm_test(stale): done_p expected untouched got %d", done);
    MP_OK(hcomm_wait(fresh)); /* still the owner's to complete */
    MP_OK(hcomm_wait(sr));
    if (r2 != v)
        mp_fail("receive whose slot a stale handle named: expected %llu got %llu",
                (unsigned long long)v, (unsigned long long)r2);
    /* The same for collectives. */
    int64_t x = mp_rank + 1, y = 0, y2 = 0, want = (int64_t)mp_size * (mp_size + 1) / 2;
    MP_OK(hcomm_iallreduce(&x, &y, 1, HCOMM_INT64, HCOMM_SUM, w, &stale));
    MP_OK(hcomm_wait(stale));
    MP_OK(hcomm_iallreduce(&x, &y2, 1, HCOMM_INT64, HCOMM_SUM, w, &fresh));
    BAD(INV, hcomm_wait(stale), "hcomm_wait", "stale");
    MP_OK(hcomm_wait(fresh));
    if (y != want || y2 != want)
        mp_fail("iallreduce next to a stale handle: expected %lld, %lld got %lld, %lld",
                (long long)want, (long long)want, (long long)y, (long long)y2);
    /* A pointer is never a handle (handles are not addresses). */
    BAD(INV, hcomm_wait((hcomm_request_t)(void *)&x), "hcomm_wait", "request");
    still_ok("stale request handles");
}

/* Displacements that put a block outside the address space: rbuf plus a
 * displacement near SIZE_MAX / size wraps to just before rbuf (allgatherv
 * wrote there and returned OK). Nothing may be written around the buffers. */
static void check_vector_bounds(hcomm_comm_t w)
{
    const hcomm_status_t INV = HCOMM_ERR_INVALID;
    enum { GUARD = 32 };
    int n = mp_size, me = mp_rank;
    double arena[GUARD + 64 + GUARD], src[64], *rb = arena + GUARD;
    size_t rc[64], dsp[64];
    for (int i = 0; i < GUARD + 64 + GUARD; i++) arena[i] = -1;
    for (int j = 0; j < 64; j++) src[j] = me;
    for (int j = 0; j < n; j++) {
        rc[j] = 1;
        dsp[j] = (size_t)j;
    }
    dsp[0] = SIZE_MAX / sizeof(double) - 1; /* (dsp + 1) * 8 fits size_t; rb + that is rb - 16 */
    hcomm_request_t req;
    BAD(INV, hcomm_allgatherv(src, 1, rb, rc, dsp, HCOMM_FLOAT64, w), "hcomm_allgatherv",
        "displs[0]");
    BAD_NB(INV, hcomm_iallgatherv(src, 1, rb, rc, dsp, HCOMM_FLOAT64, w, &req),
           "hcomm_iallgatherv", "displs[0]");
    dsp[0] = (size_t)PTRDIFF_MAX / sizeof(double); /* no wrap from rb, but no object is that big */
    BAD(INV, hcomm_allgatherv(src, 1, rb, rc, dsp, HCOMM_FLOAT64, w), "hcomm_allgatherv",
        "displs[0]");
    dsp[0] = 0;
    size_t sd[64];
    for (int j = 0; j < n; j++) sd[j] = (size_t)j;
    sd[n - 1] = SIZE_MAX / sizeof(double) - 1; /* reads before sendbuf */
    BAD(INV, hcomm_alltoallv(src, rc, sd, rb, rc, dsp, HCOMM_FLOAT64, w), "hcomm_alltoallv",
        "sdispls[");
    sd[n - 1] = (size_t)(n - 1);
    dsp[n - 1] = SIZE_MAX / sizeof(double) - 3;
    BAD(INV, hcomm_alltoallv(src, rc, sd, rb, rc, dsp, HCOMM_FLOAT64, w), "hcomm_alltoallv",
        "rdispls[");
    for (int i = 0; i < GUARD + 64 + GUARD; i++)
        if (arena[i] != -1) {
            mp_fail("vector collectives with wild displacements wrote arena[%d] (recvbuf%+d) = %g",
                    i, i - GUARD, arena[i]);
            break;
        }
    still_ok("displacements outside the address space");
}

/* Send and receive buffers that partly overlap: only the documented
 * in-place forms may share bytes (these returned OK with a wrong result). */
static void check_overlap(hcomm_comm_t w)
{
    const hcomm_status_t INV = HCOMM_ERR_INVALID;
    const hcomm_dtype_t D = HCOMM_FLOAT64;
    const hcomm_op_t S = HCOMM_SUM;
    int n = mp_size, me = mp_rank;
    static double b[4096];
    hcomm_request_t req;
    BAD(INV, hcomm_allreduce(b, b + 1, 4, D, S, w), "hcomm_allreduce", "overlap");
    BAD_NB(INV, hcomm_iallreduce(b + 3, b, 4, D, S, w, &req), "hcomm_iallreduce", "overlap");
    BAD(INV, hcomm_reduce(b, b + 2, 4, D, S, me, w), "hcomm_reduce", "overlap");
    /* allgather: in place is sendbuf == recvbuf + rank * count; one element off is not */
    BAD(INV, hcomm_allgather(b + (size_t)me * 4 + 1, b, 4, D, w), "hcomm_allgather", "overlap");
    BAD(INV, hcomm_reduce_scatter(b, b + (size_t)me * 4 + 1, 4, D, S, w), "hcomm_reduce_scatter",
        "overlap");
    BAD(INV, hcomm_alltoall(b, b + 1, 4, D, w), "hcomm_alltoall", "overlap");
    BAD(INV, hcomm_gather(b + (size_t)me * 4 + 2, b, 4, D, me, w), "hcomm_gather", "overlap");
    BAD(INV, hcomm_scatter(b, b + (size_t)me * 4 + 2, 4, D, me, w), "hcomm_scatter", "overlap");
    size_t rc[64], dsp[64];
    for (int j = 0; j < n; j++) {
        rc[j] = 4;
        dsp[j] = (size_t)j * 4;
    }
    /* allgatherv: sendbuf one element past this rank's block */
    BAD(INV, hcomm_allgatherv(b + dsp[me] + 1, 4, b, rc, dsp, D, w), "hcomm_allgatherv",
        "overlap");
    BAD(INV, hcomm_reduce_scatterv(b, b + (size_t)me * 4 + 1, rc, D, S, w),
        "hcomm_reduce_scatterv", "overlap");
    /* alltoallv: a send block lands on a receive block */
    size_t sd[64];
    for (int j = 0; j < n; j++) sd[j] = 1024 + (size_t)j * 4;
    sd[n - 1] = 2048 + 2; /* inside the receive blocks at 2048.. */
    BAD(INV, hcomm_alltoallv(b, rc, sd, b + 2048, rc, dsp, D, w), "hcomm_alltoallv", "overlap");
    if (n > 1) {
        /* receive blocks of two ranks on the same bytes */
        dsp[1] = 1;
        BAD(INV, hcomm_allgatherv(b + 1024, 4, b, rc, dsp, D, w), "hcomm_allgatherv", "overlap");
        for (int j = 0; j < n; j++) sd[j] = 1024 + (size_t)j * 4;
        BAD(INV, hcomm_alltoallv(b, rc, sd, b + 2048, rc, dsp, D, w), "hcomm_alltoallv",
            "overlap");
        /* the same blocks out of order (sorted, not scanned) are fine */
        for (int j = 0; j < n; j++) dsp[j] = (size_t)(n - 1 - j) * 4;
        MP_OK(hcomm_alltoallv(b, rc, sd, b + 2048, rc, dsp, D, w));
    }
    /* Sharing that is the in-place form, and buffers side by side, are fine. */
    for (int i = 0; i < 8; i++) b[i] = me + 1;
    MP_OK(hcomm_allreduce(b, b, 4, D, S, w));
    MP_OK(hcomm_allreduce(b, b + 4, 4, D, S, w)); /* adjacent, not overlapping */
    if (b[0] != (double)n * (n + 1) / 2 || b[4] != (double)n * n * (n + 1) / 2)
        mp_fail("in-place and adjacent allreduce expected %g, %g got %g, %g",
                (double)n * (n + 1) / 2, (double)n * n * (n + 1) / 2, b[0], b[4]);
    for (int j = 0; j < n; j++) dsp[j] = (size_t)j * 4;
    MP_OK(hcomm_allgather(b + (size_t)me * 4, b, 4, D, w));
    MP_OK(hcomm_allgatherv(b + dsp[me], 4, b, rc, dsp, D, w));
    still_ok("overlapping buffers");
}

/* Each collective, blocking and non-blocking, with each bad argument. */
static void check_collectives(hcomm_comm_t w, hcomm_comm_t freed)
{
    const hcomm_status_t INV = HCOMM_ERR_INVALID;
    double sb[64] = {0}, rb[64] = {0};
    hcomm_request_t req;
    int n = mp_size, me = mp_rank;
    const hcomm_dtype_t D = HCOMM_FLOAT64;
    const hcomm_op_t S = HCOMM_SUM;

    /* NULL buffers with count > 0 */
    BAD(INV, hcomm_allreduce(NULL, rb, 1, D, S, w), "hcomm_allreduce", "sendbuf");
    BAD(INV, hcomm_allreduce(sb, NULL, 1, D, S, w), "hcomm_allreduce", "recvbuf");
    BAD_NB(INV, hcomm_iallreduce(NULL, rb, 2, D, S, w, &req), "hcomm_iallreduce", "sendbuf");
    BAD_NB(INV, hcomm_iallreduce(sb, NULL, 2, D, S, w, &req), "hcomm_iallreduce", "recvbuf");
    BAD(INV, hcomm_broadcast(NULL, 1, D, 0, w), "hcomm_broadcast", "buf");
    BAD_NB(INV, hcomm_ibroadcast(NULL, 1, D, 0, w, &req), "hcomm_ibroadcast", "buf");
    BAD(INV, hcomm_reduce(NULL, rb, 1, D, S, me, w), "hcomm_reduce", "sendbuf");
    BAD(INV, hcomm_reduce(sb, NULL, 1, D, S, me, w), "hcomm_reduce", "recvbuf");
    BAD_NB(INV, hcomm_ireduce(sb, NULL, 1, D, S, me, w, &req), "hcomm_ireduce", "recvbuf");
    BAD(INV, hcomm_allgather(NULL, rb, 1, D, w), "hcomm_allgather", "sendbuf");
    BAD(INV, hcomm_allgather(sb, NULL, 1, D, w), "hcomm_allgather", "recvbuf");
    BAD_NB(INV, hcomm_iallgather(sb, NULL, 1, D, w, &req), "hcomm_iallgather", "recvbuf");
    BAD(INV, hcomm_reduce_scatter(NULL, rb, 1, D, S, w), "hcomm_reduce_scatter", "sendbuf");
    BAD(INV, hcomm_reduce_scatter(sb, NULL, 1, D, S, w), "hcomm_reduce_scatter", "recvbuf");
    BAD_NB(INV, hcomm_ireduce_scatter(NULL, rb, 1, D, S, w, &req), "hcomm_ireduce_scatter",
           "sendbuf");
    BAD(INV, hcomm_alltoall(NULL, rb, 1, D, w), "hcomm_alltoall", "sendbuf");
    BAD(INV, hcomm_alltoall(sb, NULL, 1, D, w), "hcomm_alltoall", "recvbuf");
    BAD_NB(INV, hcomm_ialltoall(NULL, rb, 1, D, w, &req), "hcomm_ialltoall", "sendbuf");
    still_ok("collectives with NULL buffers");

    /* unknown dtype */
    BAD(INV, hcomm_allreduce(sb, rb, 1, BAD_DTYPE, S, w), "hcomm_allreduce", "dtype 97");
    BAD_NB(INV, hcomm_iallreduce(sb, rb, 1, BAD_DTYPE, S, w, &req), "hcomm_iallreduce", "dtype");
    BAD(INV, hcomm_broadcast(sb, 1, BAD_DTYPE, 0, w), "hcomm_broadcast", "dtype 97");
    BAD(INV, hcomm_reduce(sb, rb, 1, BAD_DTYPE, S, 0, w), "hcomm_reduce", "dtype 97");
    BAD(INV, hcomm_allgather(sb, rb, 1, BAD_DTYPE, w), "hcomm_allgather", "dtype 97");
    BAD(INV, hcomm_reduce_scatter(sb, rb, 1, BAD_DTYPE, S, w), "hcomm_reduce_scatter", "dtype");
    BAD(INV, hcomm_alltoall(sb, rb, 1, BAD_DTYPE, w), "hcomm_alltoall", "dtype 97");
    BAD_NB(INV, hcomm_ialltoall(sb, rb, 1, HCOMM_DTYPE_COUNT, w, &req), "hcomm_ialltoall", "dtype");
    /* unknown dtype with count 0 is still an unknown dtype */
    BAD(INV, hcomm_allreduce(sb, rb, 0, BAD_DTYPE, S, w), "hcomm_allreduce", "dtype 97");

    /* unknown op */
    BAD(INV, hcomm_allreduce(sb, rb, 1, D, BAD_OP, w), "hcomm_allreduce", "op 97");
    BAD_NB(INV, hcomm_iallreduce(sb, rb, 1, D, HCOMM_OP_COUNT, w, &req), "hcomm_iallreduce", "op");
    BAD(INV, hcomm_reduce(sb, rb, 1, D, BAD_OP, 0, w), "hcomm_reduce", "op 97");
    BAD(INV, hcomm_reduce_scatter(sb, rb, 1, D, (hcomm_op_t)-1, w), "hcomm_reduce_scatter", "op");
    BAD(INV, hcomm_allreduce(sb, rb, 0, D, BAD_OP, w), "hcomm_allreduce", "op 97");
    still_ok("unknown dtype and op");

    /* root out of range */
    BAD(INV, hcomm_broadcast(sb, 1, D, n, w), "hcomm_broadcast", "root");
    BAD(INV, hcomm_broadcast(sb, 1, D, -1, w), "hcomm_broadcast", "root -1");
    BAD_NB(INV, hcomm_ibroadcast(sb, 1, D, n + 3, w, &req), "hcomm_ibroadcast", "root");
    BAD(INV, hcomm_reduce(sb, rb, 1, D, S, n, w), "hcomm_reduce", "root");
    BAD_NB(INV, hcomm_ireduce(sb, rb, 1, D, S, -2, w, &req), "hcomm_ireduce", "root -2");
    still_ok("roots out of range");

    /* NULL and freed communicators */
    BAD(INV, hcomm_allreduce(sb, rb, 1, D, S, NULL), "hcomm_allreduce", "comm");
    BAD(INV, hcomm_allreduce(sb, rb, 1, D, S, freed), "hcomm_allreduce", "comm");
    BAD_NB(INV, hcomm_iallreduce(sb, rb, 1, D, S, freed, &req), "hcomm_iallreduce", "comm");
    BAD(INV, hcomm_broadcast(sb, 1, D, 0, freed), "hcomm_broadcast", "comm");
    BAD(INV, hcomm_reduce(sb, rb, 1, D, S, 0, NULL), "hcomm_reduce", "comm");
    BAD(INV, hcomm_allgather(sb, rb, 1, D, freed), "hcomm_allgather", "comm");
    BAD(INV, hcomm_reduce_scatter(sb, rb, 1, D, S, NULL), "hcomm_reduce_scatter", "comm");
    BAD(INV, hcomm_alltoall(sb, rb, 1, D, freed), "hcomm_alltoall", "comm");
    BAD(INV, hcomm_barrier(NULL), "hcomm_barrier", "comm");
    BAD(INV, hcomm_barrier(freed), "hcomm_barrier", "comm");
    BAD_NB(INV, hcomm_ibarrier(freed, &req), "hcomm_ibarrier", "comm");
    BAD(INV, hcomm_allreduce(NULL, NULL, 0, D, S, freed), "hcomm_allreduce", "comm");
    still_ok("NULL and freed communicators");

    /* byte sizes that overflow */
    BAD(INV, hcomm_allreduce(sb, rb, HUGE_COUNT, D, S, w), "hcomm_allreduce", "count");
    BAD(INV, hcomm_broadcast(sb, HUGE_COUNT, HCOMM_INT32, 0, w), "hcomm_broadcast", "count");
    BAD(INV, hcomm_reduce(sb, rb, HUGE_COUNT, HCOMM_INT64, S, 0, w), "hcomm_reduce", "count");
    BAD(INV, hcomm_allgather(sb, rb, HUGE_COUNT, HCOMM_UINT32, w), "hcomm_allgather", "count");
    BAD(INV, hcomm_reduce_scatter(sb, rb, HUGE_COUNT, HCOMM_FLOAT16, S, w), "hcomm_reduce_scatter",
        "count");
    BAD(INV, hcomm_alltoall(sb, rb, HUGE_COUNT, D, w), "hcomm_alltoall", "count");
    BAD_NB(INV, hcomm_iallgather(sb, rb, SIZE_MAX, HCOMM_UINT8, w, &req), "hcomm_iallgather",
           "count");
    if (n > 1) /* size * count overflows only with the rank count */
        BAD(INV, hcomm_allgather(sb, rb, SIZE_MAX / 2 + 1, HCOMM_UINT8, w), "hcomm_allgather",
            "count");
    still_ok("overflowing counts");

    /* NULL req_p */
    BAD(INV, hcomm_iallreduce(sb, rb, 1, D, S, w, NULL), "hcomm_iallreduce", "req_p");
    BAD(INV, hcomm_ibroadcast(sb, 1, D, 0, w, NULL), "hcomm_ibroadcast", "req_p");
    BAD(INV, hcomm_ireduce(sb, rb, 1, D, S, 0, w, NULL), "hcomm_ireduce", "req_p");
    BAD(INV, hcomm_iallgather(sb, rb, 1, D, w, NULL), "hcomm_iallgather", "req_p");
    BAD(INV, hcomm_ireduce_scatter(sb, rb, 1, D, S, w, NULL), "hcomm_ireduce_scatter", "req_p");
    BAD(INV, hcomm_ialltoall(sb, rb, 1, D, w, NULL), "hcomm_ialltoall", "req_p");
    BAD(INV, hcomm_ibarrier(w, NULL), "hcomm_ibarrier", "req_p");
    still_ok("NULL req_p");

    /* Valid edge cases: count 0 with NULL buffers is a no-op, reduce's
     * recvbuf may be NULL off the root. */
    MP_OK(hcomm_allreduce(NULL, NULL, 0, D, S, w));
    MP_OK(hcomm_broadcast(NULL, 0, D, 0, w));
    MP_OK(hcomm_allgather(NULL, NULL, 0, D, w));
    MP_OK(hcomm_alltoall(NULL, NULL, 0, D, w));
    MP_OK(hcomm_reduce_scatter(NULL, NULL, 0, D, S, w));
    MP_OK(hcomm_iallreduce(NULL, NULL, 0, D, S, w, &req));
    MP_OK(hcomm_wait(req));
    double one = 1, sum = -1;
    MP_OK(hcomm_reduce(&one, me == n - 1 ? &sum : NULL, 1, D, S, n - 1, w));
    if (me == n - 1 && sum != n)
        mp_fail("reduce to root %d with NULL recvbuf elsewhere expected %d got %g", n - 1, n, sum);
}

static void check_groups(hcomm_comm_t w)
{
    const hcomm_status_t INV = HCOMM_ERR_INVALID;
    BAD(INV, hcomm_group_end(), "hcomm_group_end", "start");
    MP_OK(hcomm_group_start());
    hcomm_comm_t nc = (hcomm_comm_t)(uintptr_t)0x5e5e;
    BAD(INV, hcomm_comm_split(w, 0, 0, &nc), "hcomm_comm_split", "group");
    MP_OK(hcomm_group_end());
    BAD(INV, hcomm_group_end(), "hcomm_group_end", "start");
    still_ok("group_end without start");
}

static void check_comms(hcomm_comm_t w, hcomm_comm_t freed)
{
    const hcomm_status_t INV = HCOMM_ERR_INVALID;
    hcomm_comm_t nc = (hcomm_comm_t)(uintptr_t)0x5e5e;
    BAD(INV, hcomm_comm_split(NULL, 0, 0, &nc), "hcomm_comm_split", "comm");
    BAD(INV, hcomm_comm_split(freed, 0, 0, &nc), "hcomm_comm_split", "comm");
    BAD(INV, hcomm_comm_split(w, 0, 0, NULL), "hcomm_comm_split", "newcomm_p");
    if (nc != (hcomm_comm_t)(uintptr_t)0x5e5e)
        mp_fail("hcomm_comm_split: newcomm_p expected untouched on failure");
    if (hcomm_comm_rank(NULL) != -1)
        mp_fail("hcomm_comm_rank(NULL) expected -1 got %d", hcomm_comm_rank(NULL));
    else
        mp_expect_msg("hcomm_comm_rank(NULL)", "hcomm_comm_rank", "comm", (const char *)NULL);
    if (hcomm_comm_size(freed) != -1)
        mp_fail("hcomm_comm_size(freed) expected -1 got %d", hcomm_comm_size(freed));
    else
        mp_expect_msg("hcomm_comm_size(freed)", "hcomm_comm_size", "comm", (const char *)NULL);
    BAD(INV, hcomm_comm_free(NULL), "hcomm_comm_free", "comm");
    BAD(INV, hcomm_comm_free(w), "hcomm_comm_free", "world");
    BAD(INV, hcomm_comm_free(freed), "hcomm_comm_free", "comm");
    BAD(INV, hcomm_comm_abort(NULL), "hcomm_comm_abort", "comm");
    still_ok("bad communicators");

    /* An aborted communicator: pending and later operations return
     * ERR_ABORTED; it can still be freed; world is unaffected. */
    hcomm_comm_t sub;
    MP_OK(hcomm_comm_split(w, 0, mp_rank, &sub));
    char c = 0;
    hcomm_request_t rr;
    MP_OK(hcomm_irecv(&c, 1, HCOMM_INT8, hcomm_comm_rank(sub), 1, sub, &rr));
    MP_OK(hcomm_comm_abort(sub));
    double t0 = mp_now();
    MP_EXPECT(HCOMM_ERR_ABORTED, hcomm_wait(rr));
    if (mp_now() - t0 > 5)
        mp_fail("wait on an aborted communicator expected prompt got %.1f s", mp_now() - t0);
    int64_t x = 1, y = 0;
    MP_EXPECT(HCOMM_ERR_ABORTED, hcomm_allreduce(&x, &y, 1, HCOMM_INT64, HCOMM_SUM, sub));
    MP_EXPECT(HCOMM_ERR_ABORTED, hcomm_send(&c, 1, HCOMM_INT8, 0, 0, sub));
    MP_OK(hcomm_comm_free(sub));
    still_ok("an aborted sub-communicator");
}

static void check_misc(void)
{
    if (hcomm_dtype_size(BAD_DTYPE) != 0)
        mp_fail("hcomm_dtype_size(97) expected 0 got %zu", hcomm_dtype_size(BAD_DTYPE));
    static const size_t want[HCOMM_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
    for (int d = 0; d < HCOMM_DTYPE_COUNT; d++)
        if (hcomm_dtype_size((hcomm_dtype_t)d) != want[d])
            mp_fail("hcomm_dtype_size(%d) expected %zu got %zu", d, want[d],
                    hcomm_dtype_size((hcomm_dtype_t)d));
    const char *s = hcomm_strerror((hcomm_status_t)12345);
    if (!s || strcmp(s, "unknown status"))
        mp_fail("hcomm_strerror(12345) expected \"unknown status\" got \"%s\"", s ? s : "(null)");
    s = hcomm_strerror(HCOMM_ERR_TRUNCATED);
    if (!s || !strcmp(s, "unknown status"))
        mp_fail("hcomm_strerror(ERR_TRUNCATED) expected a description got \"%s\"",
                s ? s : "(null)");
    s = hcomm_version_string();
    if (!s || strncmp(s, "hcomm ", 6))
        mp_fail("hcomm_version_string expected \"hcomm ...\" got \"%s\"", s ? s : "(null)");
}

/* Pool memory: pointers hcomm did not return are refused, nothing freed. */
static void check_mem(void)
{
    const hcomm_status_t INV = HCOMM_ERR_INVALID;
    void *p = (void *)&p;
    BAD(INV, hcomm_mem_alloc(0, &p), "hcomm_mem_alloc", "bytes");
    BAD(INV, hcomm_mem_alloc(64, NULL), "hcomm_mem_alloc", "ptr_p");
    hcomm_status_t st = hcomm_mem_alloc(SIZE_MAX, &p);
    if (st != HCOMM_ERR_NO_MEMORY && st != HCOMM_ERR_INVALID)
        mp_fail("hcomm_mem_alloc(SIZE_MAX) expected ERR_NO_MEMORY or ERR_INVALID got %s",
                mp_status_name(st));
    if (p != (void *)&p) mp_fail("hcomm_mem_alloc(SIZE_MAX): ptr_p expected untouched got %p", p);
    MP_OK(hcomm_mem_free(NULL));
    MP_OK(hcomm_mem_deregister(NULL, 0));

    char stack_buf[256];
    BAD(INV, hcomm_mem_free(stack_buf), "hcomm_mem_free", "ptr");
    char *heap = mp_xmalloc(256);
    BAD(INV, hcomm_mem_free(heap), "hcomm_mem_free", "ptr");
    heap[0] = 1; /* still ours: not freed by the refused call */
    free(heap);

    char *q = NULL;
    MP_OK(hcomm_mem_alloc(4096, (void **)&q));
    if (!q || ((uintptr_t)q & 63))
        mp_fail("hcomm_mem_alloc(4096) expected a 64-byte aligned pointer got %p", (void *)q);
    memset(q, 0x5a, 4096);
    BAD(INV, hcomm_mem_free(q + 64), "hcomm_mem_free", "ptr");
    MP_OK(hcomm_mem_free(q));
    BAD(INV, hcomm_mem_free(q), "hcomm_mem_free", "ptr");
    still_ok("bad hcomm_mem_free pointers");

    /* Pool memory works as a message buffer. */
    int64_t *a = NULL, *b = NULL;
    MP_OK(hcomm_mem_alloc(1024 * sizeof(int64_t), (void **)&a));
    MP_OK(hcomm_mem_alloc(1024 * sizeof(int64_t), (void **)&b));
    for (int i = 0; i < 1024; i++)
        a[i] = i * (mp_rank + 1);
    MP_OK(hcomm_allreduce(a, b, 1024, HCOMM_INT64, HCOMM_SUM, hcomm_comm_world()));
    for (int i = 0; i < 1024; i++)
        if (b[i] != (int64_t)i * mp_size * (mp_size + 1) / 2) {
            mp_fail("allreduce on pool memory: element %d expected %lld got %lld", i,
                    (long long)i * mp_size * (mp_size + 1) / 2, (long long)b[i]);
            break;
        }
    MP_OK(hcomm_mem_free(a));
    MP_OK(hcomm_mem_free(b));
}

int main(int argc, char **argv)
{
    int mem = argc > 1 && !strcmp(argv[1], "mem");
    int abort_freed = argc > 1 && !strcmp(argv[1], "abort_freed");
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && !mem && !abort_freed) {
        fprintf(stderr, "usage: mp_badinput [mem | abort_freed]\n");
        return 2;
    }
    check_not_initialized(NULL, "before hcomm_init");
    mp_init();
    hcomm_comm_t w = hcomm_comm_world();
    BAD(HCOMM_ERR_ALREADY_INITIALIZED, hcomm_init(NULL, NULL), "hcomm_init", "already");
    still_ok("a second hcomm_init");

    if (mem) {
        check_mem();
    } else if (abort_freed) {
        /* Kept apart: today it writes into the freed communicator. */
        hcomm_comm_t freed;
        MP_OK(hcomm_comm_split(w, 1, 0, &freed));
        MP_OK(hcomm_comm_free(freed));
        BAD(HCOMM_ERR_INVALID, hcomm_comm_abort(freed), "hcomm_comm_abort", "comm");
    } else {
        /* A communicator that existed and was freed. */
        hcomm_comm_t freed;
        MP_OK(hcomm_comm_split(w, 1, -mp_rank, &freed));
        if (!freed || hcomm_comm_size(freed) != mp_size)
            mp_fail("split with one color: size expected %d got %d", mp_size,
                    freed ? hcomm_comm_size(freed) : -1);
        MP_OK(hcomm_comm_free(freed));
        check_misc();
        check_p2p(w, freed);
        check_requests(w);
        check_stale_handles(w);
        check_collectives(w, freed);
        check_vector_bounds(w);
        check_overlap(w);
        check_groups(w);
        check_comms(w, freed);
    }
    still_ok("all bad calls");
    MP_OK(hcomm_finalize());
    check_not_initialized(w, "after hcomm_finalize");

    /* The library starts again after finalize. */
    MP_OK(hcomm_init(NULL, NULL));
    if (hcomm_comm_rank(hcomm_comm_world()) != mp_rank ||
        hcomm_comm_size(hcomm_comm_world()) != mp_size)
        mp_fail("second hcomm_init: rank/size expected %d/%d got %d/%d", mp_rank, mp_size,
                hcomm_comm_rank(hcomm_comm_world()), hcomm_comm_size(hcomm_comm_world()));
    still_ok("init -> finalize -> init");
    if (mp_rank == 0) printf("rank 0: %d checkpoints passed through\n", g_checkpoints);
    return mp_finish(mem           ? "mp_badinput mem"
                     : abort_freed ? "mp_badinput abort_freed"
                                   : "mp_badinput");
}
