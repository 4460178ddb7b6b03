/*
 * The progress thread (docs/gpu.md "Stream-ordered calls"): it runs the
 * stream-ordered operations that api/api_stream.c queues, and may advance
 * the engine for host operations too (HCOMM_PROGRESS_THREAD=1).
 *
 * An item is one operation (or one group of them) queued on a user stream.
 * At enqueue the stream gets write_value32(ready, seq) ("everything before
 * me on the stream is done: the inputs are ready") and wait_value32(done,
 * seq) ("wait until the library says complete"); ready and done are words
 * of one host_register'ed slab, slot seq % HC_PT_SLOTS, and seq only grows,
 * so a slot is re-used without resetting its words (wait is GEQ). The
 * thread polls ready; posts items in the order they were queued (the order
 * every rank must issue a communicator's operations in); tests the posted
 * ones; and writes done when one completes or fails. Nothing here blocks a
 * stream callback, and no host thread waits on the device.
 *
 * The thread never blocks on the library's entry lock (api.h): an item's
 * post and test callbacks claim it with a try and answer ERR_AGAIN when
 * another thread is inside; the thread tries again on its next pass. The
 * callbacks live in api/ (this layer cannot call the public API).
 */
#ifndef HC_CORE_PROGRESS_THREAD_H
#define HC_CORE_PROGRESS_THREAD_H

#include "base/hc_base.h"
#include "base/list.h"
#include "gpu/gpu.h"

#include <stdbool.h>
#include <stdint.h>

#define HC_PT_SLOTS 1024 /* items queued at once, at most */

typedef struct hc_pt_item hc_pt_item_t;

typedef struct {
    /* Posts the operation. OK: posted; ERR_AGAIN: the library is busy
     * (another thread inside, a group open), try later; any other status:
     * it failed, with hc_error()'s message naming it. */
    hcomm_status_t (*post)(hc_pt_item_t *it);
    /* OK: complete (results copied back); IN_PROGRESS; ERR_AGAIN: busy;
     * any other status: it failed (message set). */
    hcomm_status_t (*test)(hc_pt_item_t *it);
    /* Frees the item, after its done word was written (the thread). */
    void (*release)(hc_pt_item_t *it);
} hc_pt_ops_t;

typedef enum { HC_PT_QUEUED, HC_PT_POSTED } hc_pt_state_t;

struct hc_pt_item {
    hc_list_t link;
    const hc_pt_ops_t *ops;
    const char *name; /* the call: "hcomm_allreduce_stream" */
    const void *key;  /* its communicator (async errors are kept per key) */
    hc_gpu_stream_t stream;
    uint64_t seq;         /* set by hc_pt_enqueue */
    uint64_t deadline_ns; /* its inputs must be ready by then (HCOMM_TIMEOUT) */
    hc_pt_state_t state;
};

/* HCOMM_PROGRESS_THREAD: -1 unset (started by the first stream-ordered
 * call), 0 off (stream-ordered calls refused), 1 on (started by hcomm_init,
 * and advancing host operations when idle). */
int hc_pt_mode(void);

/* Starts the thread if it is not running (the flag slab registered with
 * the GPU backend, when one is active). idle: called by the thread when no
 * item needs it (may be NULL), to advance host operations. */
hcomm_status_t hc_pt_start(void (*idle)(void));
/* Stops and joins the thread; items still queued or posted fail
 * (ERR_ABORTED, their done words written so that no stream hangs). Called
 * by hcomm_finalize with the entry lock held: the thread only ever tries
 * it, so the join cannot wait for the lock. */
void hc_pt_stop(void);
bool hc_pt_running(void);

/* Queues it on its stream (it->stream: write ready, wait done) and hands it
 * to the thread. Refused (nothing queued on the stream) when HC_PT_SLOTS
 * items are pending or the backend refuses the stream memory ops. */
hcomm_status_t hc_pt_enqueue(hc_pt_item_t *it);

/* The thread pointer of the progress thread while it runs, else 0: api.h's
 * entry check waits for it instead of refusing. */
extern uintptr_t hc_pt_thread_self;

/* The first failure of an item of key (HCOMM_OK: none); not OK: the calling
 * thread's last error is set to its message. Sticky, until hc_pt_forget. */
hcomm_status_t hc_pt_async_error(const void *key);
/* Items of key queued or posted and not done. */
int hc_pt_pending(const void *key);
/* key is going away (hcomm_comm_free): its error is forgotten. */
void hc_pt_forget(const void *key);

/* Counters (tests): items queued, completed, failed since the thread started. */
typedef struct {
    uint64_t queued, completed, failed;
} hc_pt_counters_t;
void hc_pt_counters(hc_pt_counters_t *c_p);

#endif /* HC_CORE_PROGRESS_THREAD_H */
