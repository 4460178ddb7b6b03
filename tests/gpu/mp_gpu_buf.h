/*
 * Model device buffers with guard bytes for the multi-process gpu tests
 * (mp_gpu_pipe.c, mp_gpu_node.c): made, filled and read back through the
 * model's own copies, so that hcomm's handling of them is all that is
 * tested; GUARD bytes 0xa5 past each buffer are checked on every read.
 */
#ifndef MP_GPU_BUF_H
#define MP_GPU_BUF_H

#include "common/mp_test.h"
#include "gpu/model/gpu_model_test.h"

#define GUARD 64

typedef struct {
    void *p;
    bool dev;
} buf_t;

static buf_t buf_new(bool dev, size_t n)
{
    buf_t b = {.dev = dev};
    if (dev)
        MP_OK(hc_gpu_model_test_alloc(n + GUARD, &b.p));
    else
        b.p = mp_xmalloc(n + GUARD);
    return b;
}

static void buf_free(buf_t *b)
{
    if (b->dev)
        MP_OK(hc_gpu_model_test_free(b->p));
    else
        free(b->p);
}

/* n bytes of h, then GUARD bytes 0xa5. */
static void buf_put(buf_t *b, const void *h, size_t n)
{
    uint8_t *t = mp_xmalloc(n + GUARD);
    memcpy(t, h, n);
    memset(t + n, 0xa5, GUARD);
    if (b->dev)
        MP_OK(hc_gpu_model_test_fill(b->p, t, n + GUARD));
    else
        memcpy(b->p, t, n + GUARD);
    free(t);
}

/* The n bytes into h; the guard checked. */
static void buf_get(const buf_t *b, void *h, size_t n, const char *what)
{
    uint8_t *t = mp_xmalloc(n + GUARD);
    if (b->dev)
        MP_OK(hc_gpu_model_test_read(t, b->p, n + GUARD));
    else
        memcpy(t, b->p, n + GUARD);
    memcpy(h, t, n);
    for (size_t i = 0; i < GUARD; i++)
        if (t[n + i] != 0xa5) {
            mp_fail("%s: guard byte %zu past the buffer overwritten", what, i);
            break;
        }
    free(t);
}

/* A non-blocking call's request ended: how 1 by hcomm_wait, 2 by
 * hcomm_test until done (at most 60 s). */
static hcomm_status_t req_end(hcomm_request_t req, int how)
{
    if (how == 1) return hcomm_wait(req);
    hcomm_status_t st = HCOMM_OK;
    int done = 0;
    double t0 = mp_now();
    while (!done && (st = hcomm_test(req, &done)) == HCOMM_OK)
        if (mp_now() - t0 > 60) return HCOMM_ERR_TIMEOUT;
    return done ? HCOMM_OK : st;
}

/* The end of a single-call fault case: h, s and r freed, hcomm finalized,
 * "rank R: <what>: ok" printed when nothing failed; the exit status. */
static int buf_case_end(void *h, buf_t *s, buf_t *r, const char *what, double dt)
{
    free(h);
    buf_free(s);
    buf_free(r);
    int ret = mp_failures ? 1 : 0;
    hcomm_finalize();
    if (!ret) printf("rank %d: %s: ok (%.2f s)\n", mp_rank, what, dt);
    return ret;
}

#endif /* MP_GPU_BUF_H */
