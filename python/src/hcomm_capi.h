/*
 * The C interface the hcomm._hcomm extension exports to other extensions of
 * this package (the PyTorch process group), through the capsule
 * HCPY_CAPI_NAME. Both sides call libhcomm directly; what they share here is
 * what must be one per process:
 *
 *  - the lock that serializes every communicating hcomm call of the process
 *    (libhcomm is MPI_THREAD_SERIALIZED: one thread at a time);
 *  - who holds the initialized library: the module's hcomm.init() and every
 *    live process group each take a hold; the last hold released calls
 *    hcomm_finalize() (and invalidates the module's Python objects).
 *
 * Rule for callers: never wait for the GIL while holding the lock.
 */
#ifndef HCOMM_PY_CAPI_H
#define HCOMM_PY_CAPI_H

#include <stddef.h>
#include <hcomm.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HCPY_CAPI_NAME "hcomm._hcomm._C_API"
#define HCPY_CAPI_VERSION 1

typedef struct {
    int version; /* HCPY_CAPI_VERSION */
    void (*lock)(void);
    void (*unlock)(void);
    /* 1 when libhcomm is initialized (by anyone in this process). */
    int (*initialized)(void);
    /* params != NULL: hcomm_init_rank(params) and take the first hold.
     * params == NULL: take a hold on the library already initialized.
     * Takes the lock itself; the GIL may or may not be held. Returns the
     * status; on failure msg (msglen bytes) says why. */
    hcomm_status_t (*world_acquire)(const hcomm_init_params_t *params, char *msg, size_t msglen);
    /* Drops a hold; the last one finalizes libhcomm. Any thread, GIL held
     * or not, lock not held. */
    void (*world_release)(void);
} hcpy_capi_t;

/* The name of a status ("ERR_TIMEOUT"), for messages on both sides. */
static inline const char *hcpy_status_name(int st)
{
    switch (st) {
#define HCPY_NAME_(name, value, text)                                                              \
    case value:                                                                                    \
        return #name;
        HCOMM_STATUS_MAP(HCPY_NAME_)
#undef HCPY_NAME_
    }
    return "UNKNOWN";
}

#ifdef __cplusplus
}
#endif
#endif
