/*
 * The model of a GPU: streams, events, stream memory ops and the kernels
 * (test library only).
 *
 * A stream is a worker thread with a FIFO of operations, run one at a time
 * in order; two streams run concurrently, so their completions can come in
 * any order (HCOMM_GPU_MODEL_DELAY adds a random wait before each operation
 * to make that likely). Operands are resolved when an operation is
 * enqueued: device memory to the model's alias (holding a reference to the
 * allocation), host memory as is. Copies are memmove; reductions run
 * base/reduce's kernels on the worker, dst = op(dst, src).
 *
 * CUDA's rules: an event record captures the work enqueued on its stream so
 * far (a marker the worker completes when it reaches it), a new record
 * replaces the last, an event never recorded is complete; a stream wait on
 * an event waits for the marker current at the time of the call. A failed
 * operation leaves an error on its stream: later operations there are
 * skipped until the error is reported, by the next event record reached
 * (its query returns it) or by a stream synchronize. wait_value32 polls a
 * 32-bit word until (int32_t)(*addr - value) >= 0.
 */
#include "gpu/model/gpu_model.h"
#include "base/dtype.h"
#include "base/reduce.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    atomic_bool done;
    atomic_int refs;
    hcomm_status_t status; /* written before done is set */
    char msg[256];
} hc_gm_marker_t;

typedef enum {
    HC_GM_COPY,
    HC_GM_REDUCE,
    HC_GM_RECORD,
    HC_GM_WAIT_EVENT,
    HC_GM_WAIT_VALUE,
    HC_GM_WRITE_VALUE
} hc_gm_kind_t;

typedef struct hc_gm_op {
    struct hc_gm_op *next;
    hc_gm_kind_t kind;
    char *dst, *src;
    hc_gpu_model_alloc_t *dst_a, *src_a;
    size_t n, count;
    hcomm_dtype_t dtype;
    hcomm_op_t op;
    int avg_div;
    long fail_no; /* > 0: this copy or reduction is the faulty one */
    hc_gm_marker_t *marker;
    uint32_t *word;
    uint32_t value;
} hc_gm_op_t;

struct hc_gpu_stream {
    struct hc_gpu_stream *next_stream;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    hc_gm_op_t *head, *tail;
    uint64_t enqueued, finished;
    bool stop;
    int device;
    unsigned seed;
    hcomm_status_t err; /* the pending error, until reported */
    char err_msg[256];
};

struct hc_gpu_event {
    pthread_mutex_t lock;
    hc_gm_marker_t *marker;
};

/* Woken at every marker completed and word written, so that waits on
 * other streams' work need no polling of their own (host writes to a
 * word are found by a short timed wait). */
static pthread_mutex_t hc_gm_wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hc_gm_wake = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t hc_gm_streams_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hc_gpu_stream *hc_gm_streams;

static void hc_gm_wake_all(void)
{
    pthread_mutex_lock(&hc_gm_wake_lock);
    pthread_cond_broadcast(&hc_gm_wake);
    pthread_mutex_unlock(&hc_gm_wake_lock);
}

/* Sleeps until woken or 100 us pass. */
static void hc_gm_nap(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_mutex_lock(&hc_gm_wake_lock);
    pthread_cond_timedwait(&hc_gm_wake, &hc_gm_wake_lock, &ts);
    pthread_mutex_unlock(&hc_gm_wake_lock);
}

static void hc_gm_marker_put(hc_gm_marker_t *m)
{
    if (m && atomic_fetch_sub(&m->refs, 1) == 1) free(m);
}

/* ---- the worker ----------------------------------------------------------------------------- */

static bool hc_gm_stopping(struct hc_gpu_stream *s)
{
    pthread_mutex_lock(&s->lock);
    bool stop = s->stop;
    pthread_mutex_unlock(&s->lock);
    return stop;
}

/* Runs one operation; an error's text into msg. */
static hcomm_status_t hc_gm_exec(struct hc_gpu_stream *s, hc_gm_op_t *o, char *msg, size_t len)
{
    if (atomic_load(&hc_gpu_model.lost) && o->kind != HC_GM_RECORD) {
        snprintf(msg, len, "model device %d is lost (HCOMM_GPU_MODEL_FAULT=lost:%ld)", s->device,
                 hc_gpu_model.lost_after);
        return HCOMM_ERR_IO;
    }
    switch (o->kind) {
    case HC_GM_COPY:
    case HC_GM_REDUCE:
        if (o->fail_no) {
            snprintf(msg, len, "model device %d: %s number %ld failed (HCOMM_GPU_MODEL_FAULT)",
                     s->device, o->kind == HC_GM_COPY ? "copy" : "reduction", o->fail_no);
            return HCOMM_ERR_IO;
        }
        if (o->kind == HC_GM_COPY) {
            memmove(o->dst, o->src, o->n);
            atomic_fetch_add(&hc_gpu_model.done_copies, 1);
            atomic_fetch_add(&hc_gpu_model.done_bytes, o->n);
        } else {
            const void *in[2] = {o->dst, o->src};
            hc_reduce(o->dst, in, 2, o->count, o->dtype, o->op, o->avg_div);
            atomic_fetch_add(&hc_gpu_model.done_kernels, 1);
        }
        return HCOMM_OK;
    case HC_GM_WAIT_EVENT:
        while (!atomic_load(&o->marker->done)) {
            if (hc_gm_stopping(s)) {
                snprintf(msg, len, "model stream destroyed while it waited for an event");
                return HCOMM_ERR_ABORTED;
            }
            hc_gm_nap();
        }
        return HCOMM_OK;
    case HC_GM_WAIT_VALUE:
        while ((int32_t)(__atomic_load_n(o->word, __ATOMIC_ACQUIRE) - o->value) < 0) {
            if (hc_gm_stopping(s) || atomic_load(&hc_gpu_model.lost)) {
                snprintf(msg, len, "model stream %s while it waited for %p >= %u",
                         hc_gm_stopping(s) ? "destroyed" : "lost", (void *)o->word, o->value);
                return HCOMM_ERR_ABORTED;
            }
            hc_gm_nap();
        }
        return HCOMM_OK;
    case HC_GM_WRITE_VALUE:
        __atomic_store_n(o->word, o->value, __ATOMIC_RELEASE);
        hc_gm_wake_all();
        return HCOMM_OK;
    case HC_GM_RECORD:
        return HCOMM_OK;
    }
    return HCOMM_OK;
}

static void hc_gm_finish(struct hc_gpu_stream *s, hc_gm_op_t *o)
{
    char msg[256] = "";
    pthread_mutex_lock(&s->lock);
    bool skip = s->err != HCOMM_OK && o->kind != HC_GM_RECORD;
    pthread_mutex_unlock(&s->lock);
    hcomm_status_t st = skip ? HCOMM_OK : hc_gm_exec(s, o, msg, sizeof(msg));
    pthread_mutex_lock(&s->lock);
    if (st != HCOMM_OK && s->err == HCOMM_OK) {
        s->err = st;
        snprintf(s->err_msg, sizeof(s->err_msg), "%s", msg);
    }
    if (o->kind == HC_GM_RECORD) { /* reports the pending error, if any */
        o->marker->status = s->err;
        snprintf(o->marker->msg, sizeof(o->marker->msg), "%s", s->err_msg);
        s->err = HCOMM_OK;
        atomic_store(&o->marker->done, true);
    }
    s->finished++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    if (o->kind == HC_GM_RECORD) hc_gm_wake_all();
}

static void *hc_gm_worker(void *arg)
{
    struct hc_gpu_stream *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cond, &s->lock);
        hc_gm_op_t *o = s->head;
        if (!o) {
            pthread_mutex_unlock(&s->lock);
            return NULL;
        }
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        pthread_mutex_unlock(&s->lock);
        if (hc_gpu_model.delay_us)
            usleep((useconds_t)(rand_r(&s->seed) % (unsigned)(hc_gpu_model.delay_us + 1)));
        hc_gm_finish(s, o);
        hc_gpu_model_unref(o->dst_a);
        hc_gpu_model_unref(o->src_a);
        hc_gm_marker_put(o->marker);
        free(o);
    }
}

/* ---- enqueueing ----------------------------------------------------------------------------- */

static hcomm_status_t hc_gm_enqueue(struct hc_gpu_stream *s, hc_gm_op_t *o, const char *what)
{
    if (s) hc_gpu_model_count_op(); /* toward lost:N: the (N+1)th operation finds it lost */
    hcomm_status_t st = !s ? hc_error(HCOMM_ERR_INVALID, "model %s: NULL stream", what)
                           : hc_gpu_model_check_lost(what);
    if (st != HCOMM_OK) {
        hc_gpu_model_unref(o->dst_a);
        hc_gpu_model_unref(o->src_a);
        hc_gm_marker_put(o->marker);
        free(o);
        return st;
    }
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    s->enqueued++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return HCOMM_OK;
}

/* Resolves dst and src of a copy or reduction of n bytes into a new op. */
static hcomm_status_t hc_gm_op_make(hc_gm_kind_t kind, void *dst, const void *src, size_t n,
                                    const char *what, hc_gm_op_t **o_p)
{
    hc_gm_op_t *o = calloc(1, sizeof(*o));
    if (!o) return hc_error(HCOMM_ERR_NO_MEMORY, "model %s", what);
    o->kind = kind;
    o->n = n;
    hcomm_status_t st = hc_gpu_model_resolve(dst, n, "destination", &o->dst, &o->dst_a);
    if (st == HCOMM_OK &&
        (st = hc_gpu_model_resolve(src, n, "source", &o->src, &o->src_a)) != HCOMM_OK)
        hc_gpu_model_unref(o->dst_a);
    if (st != HCOMM_OK) {
        free(o);
        return hc_error(st, "model %s: %s", what, hc_error_last());
    }
    *o_p = o;
    return HCOMM_OK;
}

hcomm_status_t hc_gpu_model_copy_async(void *dst, const void *src, size_t n, hc_gpu_stream_t s)
{
    if (n == 0) return hc_gpu_model_check_lost("model copy");
    if (!dst || !src) return hc_error(HCOMM_ERR_INVALID, "model copy: NULL pointer");
    hc_gm_op_t *o;
    hcomm_status_t st = hc_gm_op_make(HC_GM_COPY, dst, src, n, "copy", &o);
    if (st != HCOMM_OK) return st;
    long no = atomic_fetch_add(&hc_gpu_model.copies, 1) + 1;
    if (no == hc_gpu_model.copy_at) o->fail_no = no;
    return hc_gm_enqueue(s, o, "copy");
}

hcomm_status_t hc_gpu_model_reduce_async(void *dst, const void *src, size_t count,
                                         hcomm_dtype_t dtype, hcomm_op_t op, int avg_div,
                                         hc_gpu_stream_t s)
{
    size_t es = hc_dtype_size(dtype), n;
    if (!es || (unsigned)op >= HCOMM_OP_COUNT || avg_div < 0 || hc_mul_overflows(count, es, &n))
        return hc_error(HCOMM_ERR_INVALID,
                        "model reduce: dtype %d, op %d, avg_div %d, count %zu "
                        "(not a dtype, an op, >= 0, or too many)",
                        (int)dtype, (int)op, avg_div, count);
    if (count == 0) return hc_gpu_model_check_lost("model reduce");
    if (!dst || !src) return hc_error(HCOMM_ERR_INVALID, "model reduce: NULL pointer");
    hc_gm_op_t *o;
    hcomm_status_t st = hc_gm_op_make(HC_GM_REDUCE, dst, src, n, "reduce", &o);
    if (st != HCOMM_OK) return st;
    o->count = count;
    o->dtype = dtype;
    o->op = op;
    o->avg_div = avg_div;
    long no = atomic_fetch_add(&hc_gpu_model.reduces, 1) + 1;
    if (no == hc_gpu_model.reduce_at) o->fail_no = no;
    return hc_gm_enqueue(s, o, "reduce");
}

/* A word for a stream memory op: device memory (its alias) or registered host memory. */
static hcomm_status_t hc_gm_word_op(hc_gpu_stream_t s, hc_gm_kind_t kind, uint32_t *addr,
                                    uint32_t value, const char *what)
{
    if (!addr || ((uintptr_t)addr & 3) || !hc_gpu_model_memop_ok(addr))
        return hc_error(HCOMM_ERR_INVALID,
                        "model %s(%p): the word must be 4-byte aligned device "
                        "memory or host_register'ed host memory",
                        what, (void *)addr);
    hc_gm_op_t *o = calloc(1, sizeof(*o));
    if (!o) return hc_error(HCOMM_ERR_NO_MEMORY, "model %s", what);
    char *w;
    hcomm_status_t st = hc_gpu_model_resolve(addr, 4, what, &w, &o->dst_a);
    if (st != HCOMM_OK) {
        free(o);
        return st;
    }
    o->kind = kind;
    o->word = (uint32_t *)w;
    o->value = value;
    return hc_gm_enqueue(s, o, what);
}

hcomm_status_t hc_gpu_model_wait_value32(hc_gpu_stream_t s, uint32_t *addr, uint32_t value)
{
    return hc_gm_word_op(s, HC_GM_WAIT_VALUE, addr, value, "wait_value32");
}

hcomm_status_t hc_gpu_model_write_value32(hc_gpu_stream_t s, uint32_t *addr, uint32_t value)
{
    return hc_gm_word_op(s, HC_GM_WRITE_VALUE, addr, value, "write_value32");
}

/* ---- streams -------------------------------------------------------------------------------- */

hcomm_status_t hc_gpu_model_stream_create(int device, hc_gpu_stream_t *s_p)
{
    hcomm_status_t st = hc_gpu_model_check_lost("model stream_create");
    if (st != HCOMM_OK) return st;
    if (device != 0)
        return hc_error(HCOMM_ERR_INVALID,
                        "model stream_create: device %d (the model has "
                        "device 0)",
                        device);
    struct hc_gpu_stream *s = calloc(1, sizeof(*s));
    if (!s) return hc_error(HCOMM_ERR_NO_MEMORY, "model stream_create");
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->device = device;
    s->seed = (unsigned)hc_time_ns();
    int e = pthread_create(&s->thread, NULL, hc_gm_worker, s);
    if (e) {
        pthread_cond_destroy(&s->cond);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return hc_error_errno(HCOMM_ERR_NO_MEMORY, e, "model stream_create: thread");
    }
    pthread_mutex_lock(&hc_gm_streams_lock);
    s->next_stream = hc_gm_streams;
    hc_gm_streams = s;
    pthread_mutex_unlock(&hc_gm_streams_lock);
    *s_p = s;
    return HCOMM_OK;
}

/* The queue runs to its end; waits still pending give up. */
static void hc_gm_stream_stop(struct hc_gpu_stream *s)
{
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    hc_gm_wake_all();
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

hcomm_status_t hc_gpu_model_stream_destroy(hc_gpu_stream_t s)
{
    if (!s) return hc_error(HCOMM_ERR_INVALID, "model stream_destroy: NULL stream");
    pthread_mutex_lock(&hc_gm_streams_lock);
    struct hc_gpu_stream **pp = &hc_gm_streams;
    while (*pp && *pp != s)
        pp = &(*pp)->next_stream;
    bool found = *pp != NULL;
    if (found) *pp = s->next_stream;
    pthread_mutex_unlock(&hc_gm_streams_lock);
    if (!found)
        return hc_error(HCOMM_ERR_INVALID, "model stream_destroy(%p): not a live stream",
                        (void *)s);
    hc_gm_stream_stop(s);
    return HCOMM_OK;
}

void hc_gpu_model_streams_fini(void)
{
    for (;;) {
        pthread_mutex_lock(&hc_gm_streams_lock);
        struct hc_gpu_stream *s = hc_gm_streams;
        if (s) hc_gm_streams = s->next_stream;
        pthread_mutex_unlock(&hc_gm_streams_lock);
        if (!s) return;
        hc_gm_stream_stop(s);
    }
}

hcomm_status_t hc_gpu_model_stream_synchronize(hc_gpu_stream_t s)
{
    if (!s) return hc_error(HCOMM_ERR_INVALID, "model stream_synchronize: NULL stream");
    pthread_mutex_lock(&s->lock);
    while (s->finished != s->enqueued)
        pthread_cond_wait(&s->cond, &s->lock);
    hcomm_status_t st = s->err;
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", s->err_msg);
    s->err = HCOMM_OK;
    pthread_mutex_unlock(&s->lock);
    if (st != HCOMM_OK) return hc_error(st, "%s", msg);
    return hc_gpu_model_check_lost("model stream_synchronize");
}

/* ---- events --------------------------------------------------------------------------------- */

hcomm_status_t hc_gpu_model_event_create(hc_gpu_event_t *e_p)
{
    struct hc_gpu_event *e = calloc(1, sizeof(*e));
    if (!e) return hc_error(HCOMM_ERR_NO_MEMORY, "model event_create");
    pthread_mutex_init(&e->lock, NULL);
    *e_p = e;
    return HCOMM_OK;
}

hcomm_status_t hc_gpu_model_event_destroy(hc_gpu_event_t e)
{
    if (!e) return hc_error(HCOMM_ERR_INVALID, "model event_destroy: NULL event");
    hc_gm_marker_put(e->marker);
    pthread_mutex_destroy(&e->lock);
    free(e);
    return HCOMM_OK;
}

hcomm_status_t hc_gpu_model_event_record(hc_gpu_event_t e, hc_gpu_stream_t s)
{
    if (!e) return hc_error(HCOMM_ERR_INVALID, "model event_record: NULL event");
    hc_gm_marker_t *m = calloc(1, sizeof(*m));
    hc_gm_op_t *o = calloc(1, sizeof(*o));
    if (!m || !o) {
        free(m);
        free(o);
        return hc_error(HCOMM_ERR_NO_MEMORY, "model event_record");
    }
    atomic_init(&m->refs, 2); /* the event's and the operation's */
    o->kind = HC_GM_RECORD;
    o->marker = m;
    hcomm_status_t st = hc_gm_enqueue(s, o, "event_record");
    if (st != HCOMM_OK) {
        free(m);
        return st;
    }
    pthread_mutex_lock(&e->lock);
    hc_gm_marker_t *old = e->marker;
    e->marker = m;
    pthread_mutex_unlock(&e->lock);
    hc_gm_marker_put(old);
    return HCOMM_OK;
}

/* The event's current marker, referenced (NULL: never recorded). */
static hc_gm_marker_t *hc_gm_marker_get(struct hc_gpu_event *e)
{
    pthread_mutex_lock(&e->lock);
    hc_gm_marker_t *m = e->marker;
    if (m) atomic_fetch_add(&m->refs, 1);
    pthread_mutex_unlock(&e->lock);
    return m;
}

static hcomm_status_t hc_gm_marker_status(hc_gm_marker_t *m)
{
    hcomm_status_t st = m->status;
    if (st != HCOMM_OK) st = hc_error(st, "%s", m->msg);
    hc_gm_marker_put(m);
    return st;
}

hcomm_status_t hc_gpu_model_event_query(hc_gpu_event_t e)
{
    if (!e) return hc_error(HCOMM_ERR_INVALID, "model event_query: NULL event");
    hc_gm_marker_t *m = hc_gm_marker_get(e);
    if (!m) return HCOMM_OK;
    if (!atomic_load(&m->done)) {
        hc_gm_marker_put(m);
        return HCOMM_IN_PROGRESS;
    }
    return hc_gm_marker_status(m);
}

hcomm_status_t hc_gpu_model_event_synchronize(hc_gpu_event_t e)
{
    if (!e) return hc_error(HCOMM_ERR_INVALID, "model event_synchronize: NULL event");
    hc_gm_marker_t *m = hc_gm_marker_get(e);
    if (!m) return HCOMM_OK;
    while (!atomic_load(&m->done))
        hc_gm_nap();
    return hc_gm_marker_status(m);
}

hcomm_status_t hc_gpu_model_stream_wait_event(hc_gpu_stream_t s, hc_gpu_event_t e)
{
    if (!e) return hc_error(HCOMM_ERR_INVALID, "model stream_wait_event: NULL event");
    hc_gm_marker_t *m = hc_gm_marker_get(e);
    if (!m) return HCOMM_OK; /* never recorded: nothing to wait for */
    hc_gm_op_t *o = calloc(1, sizeof(*o));
    if (!o) {
        hc_gm_marker_put(m);
        return hc_error(HCOMM_ERR_NO_MEMORY, "model stream_wait_event");
    }
    o->kind = HC_GM_WAIT_EVENT;
    o->marker = m;
    return hc_gm_enqueue(s, o, "stream_wait_event");
}
