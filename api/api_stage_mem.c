/*
 * Host staging buffers for device memory, pinned once and kept (api_stage.h,
 * docs/gpu.md "Pinned staging").
 *
 * A staged call (whole-buffer or pipelined) takes its host staging here. A
 * buffer is made from the pool (hc_mem_alloc) and host_register'ed with the
 * GPU backend (cuMemHostRegister) once, when it is made: the device's copy
 * engines then reach it directly, and an asynchronous copy from it is
 * asynchronous (from pageable memory CUDA copies through a bounce buffer of
 * its own and blocks). Pinning is a syscall that locks pages, milliseconds
 * for large buffers, so it is not done per call: a call gives its buffer
 * back here and the next call of the same size class takes it again, still
 * registered. Sizes are rounded up to a class (64 KiB, then four classes
 * per power of two: at most a quarter wasted), so that the buffers of
 * calls of similar sizes are shared.
 *
 * Idle buffers are kept up to HCOMM_GPU_STAGE_KEEP bytes, the least
 * recently used given back (unregistered, freed) first; hcomm_finalize
 * gives back the rest. A registration the backend refuses (RLIMIT_MEMLOCK,
 * a backend without it) leaves the buffer pageable: it still works, is
 * still kept, and the first refusal of a job says so in one warning.
 */
#include "api/api_stage.h"
#include "mem/mem.h"

#include <stdio.h>
#include <stdlib.h>

#define HC_STAGE_BUF_MIN ((size_t)64 << 10)

static size_t hc_stage_keep;
static const hc_config_knob_t hc_stage_mem_knobs[] = {
    HC_KNOB_SIZE(hc_stage_keep, "HCOMM_GPU_STAGE_KEEP", "256M",
                 "device buffers: bytes of idle host staging kept pinned (host_register'ed) for "
                 "the next staged calls; 0: every call makes and pins its own"),
};
HC_CONFIG_KNOBS("gpu", hc_stage_mem_knobs)

static struct {
    hc_list_t kept; /* idle buffers, the most recently used last */
    size_t kept_bytes;
    bool warned; /* a refused registration said (once per hcomm_init) */
} hc_sbuf = {.kept = {&hc_sbuf.kept, &hc_sbuf.kept}};

/* The class of a request: 64 KiB, else bytes rounded up to a quarter of
 * the power of two below it. */
static size_t hc_stage_buf_class(size_t bytes)
{
    if (bytes <= HC_STAGE_BUF_MIN) return HC_STAGE_BUF_MIN;
    unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)(bytes - 1));
    size_t step = (size_t)1 << (k - 2), up = (bytes + step - 1) & ~(step - 1);
    return up < bytes ? bytes : up; /* wrapped: past any pool, hc_mem_alloc says no */
}

/* Registers b with the backend; a refusal leaves it pageable. */
static void hc_stage_buf_pin(hc_stage_buf_t *b)
{
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    if (!ops) return; /* no device: nothing to pin for */
    hcomm_status_t st =
        ops->host_register
            ? ops->host_register(b->p, b->size)
            : hc_error(HCOMM_ERR_UNSUPPORTED, "the %s backend cannot pin memory", ops->name);
    if (st == HCOMM_OK) {
        b->pinned = true;
        hc_gpu_stats.pin_regs++;
        hc_gpu_stats.pin_bytes += b->size;
        return;
    }
    hc_gpu_stats.pin_failures++;
    if (hc_sbuf.warned) {
        hc_log_debug("device staging: %zu bytes left pageable: %s", b->size, hc_error_last());
        return;
    }
    hc_sbuf.warned = true;
    hc_log_warn("device staging: pinning %zu bytes of host staging failed (%s): staging goes on "
                "in pageable memory, with slower copies (said once)",
                b->size, hc_error_last());
}

static void hc_stage_buf_release(hc_stage_buf_t *b)
{
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    if (b->pinned && ops && ops->host_unregister(b->p) != HCOMM_OK)
        hc_log_debug("device staging: host_unregister(%p): %s", (void *)b->p, hc_error_last());
    (void)hc_mem_free(b->p);
    free(b);
}

hcomm_status_t hc_stage_buf_get(const char *fn, size_t bytes, hc_stage_buf_t **b_p)
{
    size_t size = hc_stage_buf_class(bytes);
    for (hc_list_t *l = hc_sbuf.kept.prev; l != &hc_sbuf.kept; l = l->prev) {
        hc_stage_buf_t *b = hc_container_of(l, hc_stage_buf_t, link);
        if (b->size != size) continue;
        hc_list_del(&b->link);
        hc_sbuf.kept_bytes -= size;
        hc_gpu_stats.buf_reuses++;
        *b_p = b;
        return HCOMM_OK;
    }
    hc_stage_buf_t *b = calloc(1, sizeof(*b));
    if (!b) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory for a staging record", fn);
    hcomm_status_t st = hc_mem_alloc(size, (void **)&b->p);
    if (st != HCOMM_OK) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", hc_error_last());
        free(b);
        return hc_error(st, "%s: no host staging for %zu bytes of device memory: %s", fn, bytes,
                        saved);
    }
    b->size = size;
    hc_gpu_stats.buf_allocs++;
    hc_stage_buf_pin(b);
    *b_p = b;
    return HCOMM_OK;
}

void hc_stage_buf_put(hc_stage_buf_t *b)
{
    hc_list_push_back(&hc_sbuf.kept, &b->link);
    hc_sbuf.kept_bytes += b->size;
    while (hc_sbuf.kept_bytes > hc_stage_keep) {
        hc_stage_buf_t *old = hc_container_of(hc_sbuf.kept.next, hc_stage_buf_t, link);
        hc_list_del(&old->link);
        hc_sbuf.kept_bytes -= old->size;
        hc_stage_buf_release(old);
    }
}

void hc_stage_buf_fini(void)
{
    while (!hc_list_empty(&hc_sbuf.kept)) {
        hc_stage_buf_t *b = hc_container_of(hc_sbuf.kept.next, hc_stage_buf_t, link);
        hc_list_del(&b->link);
        hc_stage_buf_release(b);
    }
    hc_sbuf.kept_bytes = 0;
    hc_sbuf.warned = false;
}
