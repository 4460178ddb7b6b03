/*
 * What gpu.c (the registry, the dispatch) and gpu_cache.c (the memory-type
 * cache) share. Not for other layers: they use gpu/gpu.h.
 */
#ifndef HC_GPU_INT_H
#define HC_GPU_INT_H

#include "gpu/gpu.h"

/* hc_error(st, "gpu <backend> device <d>: <what>: <the backend's message>")
 * (device -1: not named). Returns st. */
hcomm_status_t hc_gpu_fail(hcomm_status_t st, int device, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Empties the memory-type cache (hc_gpu_fini). */
void hc_gpu_cache_clear(void);

#endif /* HC_GPU_INT_H */
