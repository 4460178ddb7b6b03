/*
 * LD_PRELOAD helper of the bench tests: damages results on one rank so the
 * tests can show that the tools' data checks catch wrong bytes (hcomm has
 * no knob that corrupts a payload, and a check that never fails proves
 * nothing).
 *
 *   HB_CORRUPT=allreduce  after each float32 hcomm_allreduce, and each
 *                         hcomm_wait of a float32 hcomm_iallreduce, adds 1 to
 *                         the last element of recvbuf
 *   HB_CORRUPT=allgather  the same after each float32 hcomm_allgather / hcomm_wait
 *                         of an hcomm_iallgather (the last element of the
 *                         gathered recvbuf: the last rank's block)
 *   HB_CORRUPT=recv       after each hcomm_recv, and each hcomm_wait of an
 *                         hcomm_irecv, adds 1 to the last byte (adds: the
 *                         receives of a pingpong window share one buffer,
 *                         and an even number of bit flips would cancel)
 *   HB_CORRUPT_RANK=R     the rank that damages its results (default 1)
 *
 * Only float32 allreduces and allgathers are touched, so the tools' own float64 and int64
 * reductions of times and wrong counts stay exact. The real functions are
 * found with dlsym(RTLD_NEXT).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hcomm.h>

#define HB_PENDING_MAX 4096

enum hb_kind { HB_NONE, HB_ALLREDUCE, HB_ALLGATHER, HB_RECV };

struct hb_pending {
    hcomm_request_t req;
    void *buf;
    size_t bytes;
};

static struct hb_pending hb_pending[HB_PENDING_MAX];

static enum hb_kind hb_kind(void)
{
    static int kind = -1;

    if (kind < 0) {
        const char *what = getenv("HB_CORRUPT"), *rank = getenv("HCOMM_RANK");
        const char *want = getenv("HB_CORRUPT_RANK");

        kind = HB_NONE;
        if (what && rank && atoi(rank) == (want ? atoi(want) : 1)) {
            if (!strcmp(what, "allreduce"))
                kind = HB_ALLREDUCE;
            else if (!strcmp(what, "allgather"))
                kind = HB_ALLGATHER;
            else if (!strcmp(what, "recv"))
                kind = HB_RECV;
        }
    }
    return (enum hb_kind)kind;
}

static void *hb_real(const char *name)
{
    void *fn = dlsym(RTLD_NEXT, name);

    if (!fn) {
        fprintf(stderr, "bench_corrupt: %s not found: %s\n", name, dlerror());
        abort();
    }
    return fn;
}

static void hb_damage(void *buf, size_t bytes, enum hb_kind kind)
{
    if (!buf || !bytes) return;
    if (kind == HB_ALLREDUCE || kind == HB_ALLGATHER) {
        float *last = (float *)((char *)buf + bytes) - 1;
        *last += 1.0f;
    } else {
        ((unsigned char *)buf)[bytes - 1]++;
    }
}

static void hb_remember(hcomm_request_t req, void *buf, size_t bytes)
{
    for (int i = 0; i < HB_PENDING_MAX; i++) {
        if (!hb_pending[i].req) {
            hb_pending[i] = (struct hb_pending){req, buf, bytes};
            return;
        }
    }
}

hcomm_status_t hcomm_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                               hcomm_dtype_t dtype, hcomm_op_t op, hcomm_comm_t comm)
{
    hcomm_status_t (*real)(const void *, void *, size_t, hcomm_dtype_t, hcomm_op_t, hcomm_comm_t) =
        hb_real("hcomm_allreduce");
    hcomm_status_t st = real(sendbuf, recvbuf, count, dtype, op, comm);

    if (st == HCOMM_OK && dtype == HCOMM_FLOAT32 && hb_kind() == HB_ALLREDUCE)
        hb_damage(recvbuf, count * sizeof(float), HB_ALLREDUCE);
    return st;
}

hcomm_status_t hcomm_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                hcomm_dtype_t dtype, hcomm_op_t op, hcomm_comm_t comm,
                                hcomm_request_t *req_p)
{
    hcomm_status_t (*real)(const void *, void *, size_t, hcomm_dtype_t, hcomm_op_t, hcomm_comm_t,
                           hcomm_request_t *) = hb_real("hcomm_iallreduce");
    hcomm_status_t st = real(sendbuf, recvbuf, count, dtype, op, comm, req_p);

    if (st == HCOMM_OK && dtype == HCOMM_FLOAT32 && hb_kind() == HB_ALLREDUCE)
        hb_remember(*req_p, recvbuf, count * sizeof(float));
    return st;
}

hcomm_status_t hcomm_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                               hcomm_dtype_t dtype, hcomm_comm_t comm)
{
    hcomm_status_t (*real)(const void *, void *, size_t, hcomm_dtype_t, hcomm_comm_t) =
        hb_real("hcomm_allgather");
    hcomm_status_t st = real(sendbuf, recvbuf, sendcount, dtype, comm);

    if (st == HCOMM_OK && dtype == HCOMM_FLOAT32 && hb_kind() == HB_ALLGATHER)
        hb_damage(recvbuf, sendcount * (size_t)hcomm_comm_size(comm) * sizeof(float),
                  HB_ALLGATHER);
    return st;
}

hcomm_status_t hcomm_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                hcomm_dtype_t dtype, hcomm_comm_t comm, hcomm_request_t *req_p)
{
    hcomm_status_t (*real)(const void *, void *, size_t, hcomm_dtype_t, hcomm_comm_t,
                           hcomm_request_t *) = hb_real("hcomm_iallgather");
    hcomm_status_t st = real(sendbuf, recvbuf, sendcount, dtype, comm, req_p);

    if (st == HCOMM_OK && dtype == HCOMM_FLOAT32 && hb_kind() == HB_ALLGATHER)
        hb_remember(*req_p, recvbuf, sendcount * (size_t)hcomm_comm_size(comm) * sizeof(float));
    return st;
}

hcomm_status_t hcomm_recv(void *buf, size_t count, hcomm_dtype_t dtype, int peer, int tag,
                          hcomm_comm_t comm)
{
    hcomm_status_t (*real)(void *, size_t, hcomm_dtype_t, int, int, hcomm_comm_t) =
        hb_real("hcomm_recv");
    hcomm_status_t st = real(buf, count, dtype, peer, tag, comm);

    if (st == HCOMM_OK && hb_kind() == HB_RECV)
        hb_damage(buf, count * hcomm_dtype_size(dtype), HB_RECV);
    return st;
}

hcomm_status_t hcomm_irecv(void *buf, size_t count, hcomm_dtype_t dtype, int peer, int tag,
                           hcomm_comm_t comm, hcomm_request_t *req_p)
{
    hcomm_status_t (*real)(void *, size_t, hcomm_dtype_t, int, int, hcomm_comm_t,
                           hcomm_request_t *) = hb_real("hcomm_irecv");
    hcomm_status_t st = real(buf, count, dtype, peer, tag, comm, req_p);

    if (st == HCOMM_OK && hb_kind() == HB_RECV)
        hb_remember(*req_p, buf, count * hcomm_dtype_size(dtype));
    return st;
}

hcomm_status_t hcomm_wait(hcomm_request_t req)
{
    hcomm_status_t (*real)(hcomm_request_t) = hb_real("hcomm_wait");
    hcomm_status_t st = real(req);

    if (hb_kind() == HB_NONE || !req) return st;
    for (int i = 0; i < HB_PENDING_MAX; i++) {
        if (hb_pending[i].req == req) {
            if (st == HCOMM_OK) hb_damage(hb_pending[i].buf, hb_pending[i].bytes, hb_kind());
            hb_pending[i].req = NULL;
            break;
        }
    }
    return st;
}
