/*
 * Device mirrors of a host test's buffers (tests/coll/mp_coll_matrix.c and
 * mp_coll_vector.c built with -DHC_TEST_GPU as mp_gpu_matrix and
 * mp_gpu_vector): the test prepares and checks its host buffers as ever;
 * around each call, every buffer (with its guard bytes) is mirrored into
 * model device memory through the model's own copies, the call gets the
 * device pointers, and the device bytes are read back over the host buffer
 * before the checks. So every check of the host test (results, untouched
 * send buffers, guards) holds for device buffers, and any CPU access to
 * them inside hcomm faults (the model's device memory is PROT_NONE).
 *
 *   --device all    every buffer is device memory
 *   --device recv   send buffers host, receive buffers device (in place:
 *                   device)
 *   --device some   device buffers on even ranks, host on odd ranks
 *
 * On a real GPU (HCOMM_GPU=cuda, tests/gpu/run.sh) the mirrors are made and
 * read through the public API (hcomm_mem_alloc_device, hcomm_memcpy) instead
 * of the model's test API.
 */
#ifndef MP_GPU_MIRROR_H
#define MP_GPU_MIRROR_H

#include "gpu/model/gpu_model_test.h"

/* Whether the active backend is the model (else: a real GPU). */
static int gpu_is_model(void)
{
    const hc_gpu_ops_t *o = hc_gpu_backend();
    return o && !strcmp(o->name, "model");
}

static int g_dev; /* 0: host buffers; 1 all, 2 recv, 3 some */

static int gpu_dev_mode(const char *s)
{
    g_dev = !strcmp(s, "all") ? 1 : !strcmp(s, "recv") ? 2 : !strcmp(s, "some") ? 3 : -1;
    return g_dev < 0;
}

/* Whether this rank's send (recv = 0) or receive (recv = 1) buffer is on
 * the device. */
static int gpu_dev_side(int recv)
{
    switch (g_dev) {
    case 1:
        return 1;
    case 2:
        return recv;
    case 3:
        return mp_rank % 2 == 0;
    default:
        return 0;
    }
}

/* A device copy of host[0, bytes) (bytes > 0), or host itself when not on
 * the device (or NULL). */
static void *gpu_mirror(void *host, size_t bytes, int dev)
{
    if (!dev || !host || !bytes) return host;
    void *d;
    hcomm_status_t st =
        gpu_is_model() ? hc_gpu_model_test_alloc(bytes, &d) : hcomm_mem_alloc_device(0, bytes, &d);
    if (st == HCOMM_OK)
        st = gpu_is_model() ? hc_gpu_model_test_fill(d, host, bytes) : hcomm_memcpy(d, host, bytes);
    if (st != HCOMM_OK) {
        mp_fail("gpu mirror of %zu bytes: %s", bytes, hcomm_last_error());
        exit(1);
    }
    return d;
}

/* Reads the device copy back over host and frees it. */
static void gpu_unmirror(void *host, void *d, size_t bytes)
{
    if (!d || d == host) return;
    hcomm_status_t st =
        gpu_is_model() ? hc_gpu_model_test_read(host, d, bytes) : hcomm_memcpy(host, d, bytes);
    if (st == HCOMM_OK) st = gpu_is_model() ? hc_gpu_model_test_free(d) : hcomm_mem_free_device(d);
    if (st != HCOMM_OK) {
        mp_fail("gpu read back of %zu bytes: %s", bytes, hcomm_last_error());
        exit(1);
    }
}

#endif /* MP_GPU_MIRROR_H */
