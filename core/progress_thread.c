/*
 * The progress thread (progress_thread.h, docs/gpu.md "Stream-ordered
 * calls").
 *
 * One mutex (pt.lock) guards the queue's links, the async errors and the
 * counters; the user's thread only appends (hc_pt_enqueue) and the progress
 * thread alone unlinks, so the thread walks the queue taking the lock only
 * to step to the next item, and runs the items' callbacks without it: an
 * enqueue never waits for a post or a test. The flag words are written by
 * the streams (ready) and by the thread (done) with atomics, as the device
 * would.
 */
#include "core/progress_thread.h"
#include "base/config.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    uint32_t ready, done;
} hc_pt_slot_t;

typedef struct {
    hc_list_t link;
    const void *key;
    hcomm_status_t st;
    char msg[512];
} hc_pt_error_t;

static struct {
    pthread_mutex_t lock;
    pthread_t thread;
    bool running, stop; /* stop: read by the thread (atomic) */
    void (*idle)(void);
    hc_list_t queue;  /* hc_pt_item_t, in enqueue order */
    hc_list_t errors; /* hc_pt_error_t */
    hc_pt_slot_t *slots;
    bool registered;     /* slots host_register'ed */
    uint64_t next_seq;   /* the next item's seq (from 1) */
    uint64_t oldest_seq; /* the oldest item not done (slot re-use) */
    hc_pt_counters_t n;
} pt = {.lock = PTHREAD_MUTEX_INITIALIZER,
        .queue = {&pt.queue, &pt.queue},
        .errors = {&pt.errors, &pt.errors},
        .next_seq = 1};

uintptr_t hc_pt_thread_self;

int hc_pt_mode(void)
{
    const char *v = hc_cfg.progress_thread;
    if (!v || !*v) return -1;
    return strcmp(v, "0") != 0;
}

bool hc_pt_running(void)
{
    return __atomic_load_n(&pt.running, __ATOMIC_ACQUIRE);
}

void hc_pt_counters(hc_pt_counters_t *c_p)
{
    pthread_mutex_lock(&pt.lock);
    *c_p = pt.n;
    pthread_mutex_unlock(&pt.lock);
}

static bool hc_pt_reached(const uint32_t *word, uint64_t seq)
{
    return (int32_t)(__atomic_load_n(word, __ATOMIC_ACQUIRE) - (uint32_t)seq) >= 0;
}

static hc_pt_slot_t *hc_pt_slot(uint64_t seq)
{
    return &pt.slots[seq % HC_PT_SLOTS];
}

/* ---- async errors (pt.lock held) --------------------------------------------------------- */

static hc_pt_error_t *hc_pt_error_find(const void *key)
{
    for (hc_list_t *l = pt.errors.next; l != &pt.errors; l = l->next) {
        hc_pt_error_t *e = hc_container_of(l, hc_pt_error_t, link);
        if (e->key == key) return e;
    }
    return NULL;
}

hcomm_status_t hc_pt_async_error(const void *key)
{
    pthread_mutex_lock(&pt.lock);
    hc_pt_error_t *e = hc_pt_error_find(key);
    hcomm_status_t st = e ? e->st : HCOMM_OK;
    char msg[sizeof(e->msg)];
    if (e) snprintf(msg, sizeof(msg), "%s", e->msg);
    pthread_mutex_unlock(&pt.lock);
    return st == HCOMM_OK ? st : hc_error(st, "%s", msg);
}

void hc_pt_forget(const void *key)
{
    pthread_mutex_lock(&pt.lock);
    hc_pt_error_t *e = hc_pt_error_find(key);
    if (e) {
        hc_list_del(&e->link);
        free(e);
    }
    pthread_mutex_unlock(&pt.lock);
}

int hc_pt_pending(const void *key)
{
    int n = 0;
    pthread_mutex_lock(&pt.lock);
    for (hc_list_t *l = pt.queue.next; l != &pt.queue; l = l->next)
        n += hc_container_of(l, hc_pt_item_t, link)->key == key;
    pthread_mutex_unlock(&pt.lock);
    return n;
}

/* ---- the thread's side -------------------------------------------------------------------- */

/* it is done (st: how): an error is kept for its key (the first one wins),
 * the done word written (the stream goes on), the item unlinked and freed. */
static void hc_pt_finish(hc_pt_item_t *it, hcomm_status_t st, const char *msg)
{
    pthread_mutex_lock(&pt.lock);
    if (st != HCOMM_OK && !hc_pt_error_find(it->key)) {
        hc_pt_error_t *e = calloc(1, sizeof(*e));
        if (e) {
            e->key = it->key;
            e->st = st;
            snprintf(e->msg, sizeof(e->msg), "%s", msg);
            hc_list_push_back(&pt.errors, &e->link);
        }
    }
    if (st == HCOMM_OK)
        pt.n.completed++;
    else
        pt.n.failed++;
    hc_list_del(&it->link);
    __atomic_store_n(&hc_pt_slot(it->seq)->done, (uint32_t)it->seq, __ATOMIC_RELEASE);
    /* the oldest seq not done: the queue's head, or the next to come */
    pt.oldest_seq = hc_list_empty(&pt.queue)
                        ? pt.next_seq
                        : hc_container_of(pt.queue.next, hc_pt_item_t, link)->seq;
    pthread_mutex_unlock(&pt.lock);
    it->ops->release(it);
}

static void hc_pt_fail(hc_pt_item_t *it, hcomm_status_t st, const char *why)
{
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s (stream-ordered, queued as operation %llu): %s", it->name,
             (unsigned long long)it->seq, why);
    hc_pt_finish(it, st, msg);
}

/* One queued item whose turn has come. Returns true when it was posted or
 * failed (the next queued one may go), false when it must wait. */
static bool hc_pt_try_post(hc_pt_item_t *it, uint64_t now)
{
    if (!hc_pt_reached(&hc_pt_slot(it->seq)->ready, it->seq)) {
        if (now < it->deadline_ns) return false;
        hc_pt_fail(it, HCOMM_ERR_TIMEOUT,
                   "its inputs were not ready: the work queued before it on its stream did not "
                   "finish within HCOMM_TIMEOUT; it was not run on this rank");
        return true;
    }
    hcomm_status_t st;
    pthread_mutex_lock(&pt.lock);
    hc_pt_error_t *e = hc_pt_error_find(it->key);
    char earlier[sizeof(e->msg)];
    st = e ? e->st : HCOMM_OK;
    if (e) snprintf(earlier, sizeof(earlier), "%s", e->msg);
    pthread_mutex_unlock(&pt.lock);
    if (st != HCOMM_OK) { /* the others would wait for this rank's half */
        char why[640];
        snprintf(why, sizeof(why), "not run: an earlier operation on its communicator failed: %s",
                 earlier);
        hc_pt_fail(it, st, why);
        return true;
    }
    st = it->ops->post(it);
    if (st == HCOMM_ERR_AGAIN) return false;
    if (st != HCOMM_OK) {
        hc_pt_fail(it, st, hc_error_last());
        return true;
    }
    it->state = HC_PT_POSTED;
    return true;
}

/* One pass over the queue: posted items tested, queued ones posted in
 * order. Returns whether anything happened. */
static bool hc_pt_pass(void)
{
    bool busy = false, order_blocked = false;
    uint64_t now = hc_time_ns();
    pthread_mutex_lock(&pt.lock);
    hc_list_t *l = pt.queue.next;
    pthread_mutex_unlock(&pt.lock);
    while (l != &pt.queue) {
        hc_pt_item_t *it = hc_container_of(l, hc_pt_item_t, link);
        pthread_mutex_lock(&pt.lock);
        hc_list_t *next = l->next; /* it may be freed below */
        pthread_mutex_unlock(&pt.lock);
        if (it->state == HC_PT_POSTED) {
            busy = true;
            hcomm_status_t st = it->ops->test(it);
            if (st == HCOMM_OK)
                hc_pt_finish(it, HCOMM_OK, "");
            else if (st != HCOMM_IN_PROGRESS && st != HCOMM_ERR_AGAIN)
                hc_pt_fail(it, st, hc_error_last());
        } else if (!order_blocked) {
            busy = true;
            order_blocked = !hc_pt_try_post(it, now);
        }
        l = next;
    }
    return busy;
}

static void *hc_pt_main(void *arg)
{
    (void)arg;
    __atomic_store_n(&hc_pt_thread_self, (uintptr_t)__builtin_thread_pointer(), __ATOMIC_RELEASE);
    unsigned spins = 0;
    while (!__atomic_load_n(&pt.stop, __ATOMIC_ACQUIRE)) {
        bool busy = hc_pt_pass();
        if (!busy && pt.idle) pt.idle();
        /* spin while work is queued, then back off to 50 us sleeps */
        if (busy && ++spins < 64) {
            sched_yield();
            continue;
        }
        spins = busy ? 32 : 0;
        struct timespec ts = {0, busy ? 5000 : 50000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* ---- the user's side ----------------------------------------------------------------------- */

hcomm_status_t hc_pt_start(void (*idle)(void))
{
    if (hc_pt_running()) return HCOMM_OK;
    if (!pt.slots) {
        pt.slots = aligned_alloc(4096, HC_PT_SLOTS * sizeof(hc_pt_slot_t));
        if (!pt.slots)
            return hc_error(HCOMM_ERR_NO_MEMORY, "progress thread: no memory for its flags");
        memset(pt.slots, 0, HC_PT_SLOTS * sizeof(hc_pt_slot_t));
    }
    const hc_gpu_ops_t *gpu = hc_gpu_backend();
    if (gpu && !pt.registered) {
        hcomm_status_t st = gpu->host_register(pt.slots, HC_PT_SLOTS * sizeof(hc_pt_slot_t));
        if (st != HCOMM_OK) return st;
        pt.registered = true;
    }
    pt.idle = idle;
    pt.stop = false;
    int rc = pthread_create(&pt.thread, NULL, hc_pt_main, NULL);
    if (rc != 0) return hc_error(HCOMM_ERR_IO, "progress thread: pthread_create: %s", strerror(rc));
    __atomic_store_n(&pt.running, true, __ATOMIC_RELEASE);
    return HCOMM_OK;
}

void hc_pt_stop(void)
{
    if (hc_pt_running()) {
        __atomic_store_n(&pt.stop, true, __ATOMIC_RELEASE);
        pthread_join(pt.thread, NULL);
        __atomic_store_n(&pt.running, false, __ATOMIC_RELEASE);
        __atomic_store_n(&hc_pt_thread_self, 0, __ATOMIC_RELEASE);
    }
    while (!hc_list_empty(&pt.queue))
        hc_pt_fail(hc_container_of(pt.queue.next, hc_pt_item_t, link), HCOMM_ERR_ABORTED,
                   "hcomm_finalize was called while it was pending (its done flag is written so "
                   "that the stream goes on; its results are not there)");
    while (!hc_list_empty(&pt.errors)) {
        hc_pt_error_t *e = hc_container_of(pt.errors.next, hc_pt_error_t, link);
        hc_list_del(&e->link);
        free(e);
    }
    const hc_gpu_ops_t *gpu = hc_gpu_backend();
    if (pt.registered && gpu) gpu->host_unregister(pt.slots);
    pt.registered = false;
    /* the slab stays: a stream may still be about to write a ready word */
    memset(&pt.n, 0, sizeof(pt.n));
}

hcomm_status_t hc_pt_enqueue(hc_pt_item_t *it)
{
    const hc_gpu_ops_t *gpu = hc_gpu_backend();
    if (!gpu || !hc_pt_running())
        return hc_error(HCOMM_ERR_INTERNAL, "%s: the progress thread is not running", it->name);
    pthread_mutex_lock(&pt.lock);
    uint64_t seq = pt.next_seq;
    hcomm_status_t st = HCOMM_OK;
    if (seq - pt.oldest_seq >= HC_PT_SLOTS) {
        st = hc_error(HCOMM_ERR_AGAIN,
                      "%s: %d stream-ordered operations are pending, the most the progress "
                      "thread queues; wait for earlier ones (synchronize a stream) and retry",
                      it->name, HC_PT_SLOTS);
        goto unlock;
    }
    hc_pt_slot_t *slot = hc_pt_slot(seq);
    if ((st = gpu->write_value32(it->stream, &slot->ready, (uint32_t)seq)) != HCOMM_OK ||
        (st = gpu->wait_value32(it->stream, &slot->done, (uint32_t)seq)) != HCOMM_OK) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", hc_error_last());
        st = hc_error(st, "%s: queueing its flags on the stream: %s", it->name, saved);
        goto unlock;
    }
    it->seq = seq;
    it->state = HC_PT_QUEUED;
    double t = hc_cfg.timeout > 0 ? hc_cfg.timeout : 300;
    it->deadline_ns = hc_time_ns() + (uint64_t)(t * 1e9);
    pt.next_seq++;
    if (hc_list_empty(&pt.queue)) pt.oldest_seq = seq;
    hc_list_push_back(&pt.queue, &it->link);
    pt.n.queued++;
unlock:
    pthread_mutex_unlock(&pt.lock);
    return st;
}
