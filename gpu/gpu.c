/*
 * The GPU layer: which backend is active, and the one dispatch that copies
 * and reduces bytes wherever they are (docs/gpu.md).
 *
 * Registry: HCOMM_GPU_MODEL=1 selects the model (gpu/model/, in the test
 * library only, plugged in through hc_gpu_model_glue); a library without
 * it refuses the knob by name. Otherwise HCOMM_GPU: auto (default) opens
 * the cuda backend (gpu/cuda/, libcuda.so.1 by dlopen) and falls back to no
 * backend, keeping why for hcomm_info; cuda fails init naming why; none
 * means no backend, every buffer host memory.
 *
 * Dispatch: host to host is memcpy / hc_reduce on the calling thread. Any
 * device or managed side goes to the backend on the dispatch's own stream
 * for that device, then waits for an event with a deadline (HCOMM_TIMEOUT),
 * never the backend's unbounded synchronize. A reduction runs where its
 * destination is: a device destination with a host source copies the
 * source into a device scratch chunk first (a kernel cannot read pageable
 * host memory), a host destination with a device source copies the source
 * into a host scratch chunk and reduces on the CPU. One mutex serialises
 * the dispatch (its streams and scratch buffers are shared).
 */
#include "gpu/gpu_int.h"
#include "base/config.h"
#include "base/dtype.h"
#include "base/reduce.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HC_GPU_MAX_DEVICES 16
#define HC_GPU_SCRATCH (4u << 20) /* bytes of a reduction's staging chunk */

const hc_gpu_ops_t *hc_gpu_model_glue;
const hc_gpu_ops_t *hc_gpu_cuda_glue;
bool hc_gpu_on;
bool hc_gpu_no_stage;
hc_gpu_stats_t hc_gpu_stats;

/* HCOMM_GPU and HCOMM_GPU_MODEL are read by hc_gpu_init itself
 * (hc_config_env), so that the layer works before hcomm_init; the table
 * lists them for hcomm_info -c and hcomm_init's check of their values.
 * HCOMM_GPU_MODEL is here, not in the model, so that a shipped library
 * refuses it by name. The model's own knobs (HCOMM_GPU_MODEL_FAULT, _DELAY)
 * are the test library's; the cuda backend's (HCOMM_CUDA_LIB) are in
 * gpu/cuda/cuda.c. */
static bool hc_gpu_knob_model;
static const char *hc_gpu_knob_gpu;
static const hc_config_knob_t hc_gpu_knobs[] = {
    HC_KNOB_BOOL(hc_gpu_knob_model, "HCOMM_GPU_MODEL", "0",
                 "gpu: device memory from the model of a GPU (tests: only the test library of a "
                 "-DHCOMM_GPU_MODEL=ON build has it; docs/gpu.md)"),
    HC_KNOB_STR(hc_gpu_knob_gpu, "HCOMM_GPU", "auto",
                "gpu: the GPU backend: auto (cuda where libcuda.so.1 opens and has a device, "
                "else none, saying why in hcomm_info), cuda (the same, but a failure fails "
                "hcomm_init naming why), none (every buffer is host memory; docs/gpu.md)"),
};
HC_CONFIG_KNOBS("gpu", hc_gpu_knobs)

typedef struct {
    hc_gpu_stream_t stream;
    hc_gpu_event_t event;
    void *scratch; /* HC_GPU_SCRATCH bytes of device memory, for reductions */
} hc_gpu_dev_t;

static struct {
    pthread_mutex_t lock; /* init/fini and the dispatch */
    _Atomic(const hc_gpu_ops_t *) ops;
    bool inited;
    char why[512]; /* why no backend, for hc_gpu_describe */
    hc_gpu_dev_t dev[HC_GPU_MAX_DEVICES];
    void *host_scratch;
} hc_gpu = {.lock = PTHREAD_MUTEX_INITIALIZER};

const char *hc_mem_type_name(hc_mem_type_t type)
{
    static const char *const names[] = {"host", "device", "managed"};
    return (unsigned)type < HC_MEM_TYPE_COUNT ? names[type] : "unknown";
}

const hc_gpu_ops_t *hc_gpu_backend(void)
{
    return atomic_load_explicit(&hc_gpu.ops, memory_order_acquire);
}

hcomm_status_t hc_gpu_fail(hcomm_status_t st, int device, const char *fmt, ...)
{
    char what[256], last[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(last, sizeof(last), "%s", hc_error_last());
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    const char *name = ops ? ops->name : "none";
    if (device >= 0) return hc_error(st, "gpu %s device %d: %s: %s", name, device, what, last);
    return hc_error(st, "gpu %s: %s: %s", name, what, last);
}

/* ---- the knobs and the registry ---------------------------------------------------------- */

typedef enum { HC_GPU_AUTO, HC_GPU_CUDA, HC_GPU_NONE } hc_gpu_choice_t;

static hcomm_status_t hc_gpu_read_knobs(bool *model_p, hc_gpu_choice_t *choice_p)
{
    const char *m = hc_config_env("HCOMM_GPU_MODEL");
    if (!m || !*m || !strcmp(m, "0") || !strcasecmp(m, "no") || !strcasecmp(m, "off") ||
        !strcasecmp(m, "false"))
        *model_p = false;
    else if (!strcmp(m, "1") || !strcasecmp(m, "yes") || !strcasecmp(m, "on") ||
             !strcasecmp(m, "true"))
        *model_p = true;
    else
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_GPU_MODEL=%s must be 0 or 1", m);
    const char *g = hc_config_env("HCOMM_GPU");
    if (!g || !*g || !strcasecmp(g, "auto"))
        *choice_p = HC_GPU_AUTO;
    else if (!strcasecmp(g, "cuda"))
        *choice_p = HC_GPU_CUDA;
    else if (!strcasecmp(g, "none"))
        *choice_p = HC_GPU_NONE;
    else
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_GPU=%s must be auto, cuda or none", g);
    if (*model_p && *choice_p == HC_GPU_CUDA)
        return hc_error(HCOMM_ERR_INVALID,
                        "HCOMM_GPU_MODEL=1 and HCOMM_GPU=cuda: choose one backend");
    return HCOMM_OK;
}

/* Opens ops (called with the lock held): on failure hc_gpu.why says why,
 * after prefix. */
static hcomm_status_t hc_gpu_open(const hc_gpu_ops_t *ops, const char *prefix)
{
    char why[400] = "";
    hcomm_status_t st = ops->init(why, sizeof(why));
    if (st != HCOMM_OK) {
        snprintf(hc_gpu.why, sizeof(hc_gpu.why), "%s%s", prefix, why);
        return st;
    }
    atomic_store_explicit(&hc_gpu.ops, ops, memory_order_release);
    hc_gpu_on = true;
    hc_gpu.inited = true;
    hc_log_info("gpu: backend %s, %d device(s)", ops->name, ops->device_count());
    return HCOMM_OK;
}

/* The model, where the test library has it. */
static hcomm_status_t hc_gpu_open_model(void)
{
    if (!hc_gpu_model_glue) {
        hcomm_status_t st =
            hc_error(HCOMM_ERR_UNSUPPORTED,
                     "HCOMM_GPU_MODEL=1, but this library has no model of a GPU (test "
                     "machinery: only the test library of a -DHCOMM_GPU_MODEL=ON build has it)");
        snprintf(hc_gpu.why, sizeof(hc_gpu.why), "%s", hc_error_last());
        return st;
    }
    hcomm_status_t st = hc_gpu_open(hc_gpu_model_glue, "the GPU model cannot run: ");
    if (st != HCOMM_OK) st = hc_error(st, "gpu: %s", hc_gpu.why);
    return st;
}

hcomm_status_t hc_gpu_init(void)
{
    hcomm_status_t st = HCOMM_OK;
    pthread_mutex_lock(&hc_gpu.lock);
    if (hc_gpu.inited) goto out;
    hc_reduce_init();
    bool model = false;
    hc_gpu_choice_t choice = HC_GPU_AUTO;
    if ((st = hc_gpu_read_knobs(&model, &choice)) != HCOMM_OK) {
        snprintf(hc_gpu.why, sizeof(hc_gpu.why), "%s", hc_error_last());
        goto out;
    }
    if (model) {
        st = hc_gpu_open_model();
        goto out;
    }
    if (choice == HC_GPU_NONE) {
        snprintf(hc_gpu.why, sizeof(hc_gpu.why), "HCOMM_GPU=none: every buffer is host memory");
        hc_gpu.inited = true;
        goto out;
    }
    if (!hc_gpu_cuda_glue)
        snprintf(hc_gpu.why, sizeof(hc_gpu.why), "cuda: the cuda backend is not linked in");
    else if ((st = hc_gpu_open(hc_gpu_cuda_glue, "cuda: ")) == HCOMM_OK)
        goto out;
    else
        st = HCOMM_OK;
    if (choice == HC_GPU_CUDA) {
        st = hc_error(HCOMM_ERR_UNSUPPORTED, "HCOMM_GPU=cuda, but the cuda backend cannot run: %s",
                      hc_gpu.why);
        snprintf(hc_gpu.why, sizeof(hc_gpu.why), "%s", hc_error_last());
        goto out;
    }
    /* auto: no GPU here, and the line says why */
    size_t at = strlen(hc_gpu.why);
    snprintf(hc_gpu.why + at, sizeof(hc_gpu.why) - at, " (every buffer is host memory)");
    hc_log_info("gpu: none: %s", hc_gpu.why);
    hc_gpu.inited = true;
    st = HCOMM_OK;
out:
    pthread_mutex_unlock(&hc_gpu.lock);
    return st;
}

void hc_gpu_fini(void)
{
    pthread_mutex_lock(&hc_gpu.lock);
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    for (int d = 0; ops && d < HC_GPU_MAX_DEVICES; d++) {
        hc_gpu_dev_t *dv = &hc_gpu.dev[d];
        if (dv->scratch) (void)ops->free(dv->scratch);
        if (dv->event) (void)ops->event_destroy(dv->event);
        if (dv->stream) (void)ops->stream_destroy(dv->stream);
        *dv = (hc_gpu_dev_t){0};
    }
    free(hc_gpu.host_scratch);
    hc_gpu.host_scratch = NULL;
    atomic_store_explicit(&hc_gpu.ops, NULL, memory_order_release);
    hc_gpu_on = false;
    hc_gpu_no_stage = false;
    if (ops) ops->fini();
    hc_gpu_cache_clear();
    hc_gpu.inited = false;
    hc_gpu.why[0] = '\0';
    pthread_mutex_unlock(&hc_gpu.lock);
}

void hc_gpu_describe(char *buf, size_t len)
{
    pthread_mutex_lock(&hc_gpu.lock);
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    if (!ops) {
        snprintf(buf, len, "gpu: none: %s", hc_gpu.why[0] ? hc_gpu.why : "not initialized");
        goto out;
    }
    int n = ops->device_count();
    int at = snprintf(buf, len, "gpu: %s, %d device%s", ops->name, n, n == 1 ? "" : "s");
    for (int d = 0; d < n && at >= 0 && (size_t)at < len; d++) {
        char one[160];
        ops->device_describe(d, one, sizeof(one));
        at += snprintf(buf + at, len - (size_t)at, "%s %s", d ? ";" : ":", one);
    }
out:
    pthread_mutex_unlock(&hc_gpu.lock);
}

/* ---- the dispatch ------------------------------------------------------------------------ */

static bool hc_gpu_is_host(const hc_mem_attr_t *a)
{
    return !a || a->type == HC_MEM_HOST;
}

/* The dispatch's stream and event for device d, made at first use. Called
 * with the lock held. */
static hcomm_status_t hc_gpu_dev_get(const hc_gpu_ops_t *ops, int d, hc_gpu_dev_t **dv_p)
{
    if (!ops)
        return hc_error(HCOMM_ERR_INVALID,
                        "gpu: a buffer is device memory (device %d) but no GPU backend is active",
                        d);
    if (d < 0 || d >= HC_GPU_MAX_DEVICES || d >= ops->device_count())
        return hc_error(HCOMM_ERR_INVALID, "gpu %s: device %d out of range (%d devices)", ops->name,
                        d, ops->device_count());
    hc_gpu_dev_t *dv = &hc_gpu.dev[d];
    hcomm_status_t st;
    if (!dv->stream && (st = ops->stream_create(d, &dv->stream)) != HCOMM_OK)
        return hc_gpu_fail(st, d, "the dispatch's stream");
    if (!dv->event && (st = ops->event_create(&dv->event)) != HCOMM_OK)
        return hc_gpu_fail(st, d, "the dispatch's event");
    *dv_p = dv;
    return HCOMM_OK;
}

/* Records the dispatch's event on its stream and waits for it, at most
 * HCOMM_TIMEOUT seconds. */
static hcomm_status_t hc_gpu_dev_wait(const hc_gpu_ops_t *ops, hc_gpu_dev_t *dv)
{
    hcomm_status_t st = ops->event_record(dv->event, dv->stream);
    if (st != HCOMM_OK) return st;
    double timeout = hc_cfg.timeout > 0 ? hc_cfg.timeout : 300.0;
    uint64_t deadline = hc_time_ns() + (uint64_t)(timeout * 1e9);
    hc_backoff_t b = {0};
    while ((st = ops->event_query(dv->event)) == HCOMM_IN_PROGRESS) {
        if (hc_time_ns() > deadline)
            return hc_error(HCOMM_ERR_TIMEOUT, "not done after %.3g s (HCOMM_TIMEOUT)", timeout);
        hc_backoff_step(&b);
    }
    return st;
}

static int hc_gpu_device_of(const hc_mem_attr_t *a, const hc_mem_attr_t *b)
{
    return !hc_gpu_is_host(a) ? a->device : b->device;
}

hcomm_status_t hc_gpu_copy(void *dst, const hc_mem_attr_t *dst_attr, const void *src,
                           const hc_mem_attr_t *src_attr, size_t n)
{
    if (n == 0) return HCOMM_OK;
    if (!dst || !src)
        return hc_error(HCOMM_ERR_INVALID, "gpu copy of %zu bytes: %s is NULL", n,
                        dst ? "src" : "dst");
    if (hc_gpu_is_host(dst_attr) && hc_gpu_is_host(src_attr)) {
        if (dst != src) memmove(dst, src, n);
        return HCOMM_OK;
    }
    const char *to = hc_mem_type_name(dst_attr ? dst_attr->type : HC_MEM_HOST);
    const char *from = hc_mem_type_name(src_attr ? src_attr->type : HC_MEM_HOST);
    int d = hc_gpu_device_of(dst_attr, src_attr);
    pthread_mutex_lock(&hc_gpu.lock);
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    hc_gpu_dev_t *dv;
    hcomm_status_t st = hc_gpu_dev_get(ops, d, &dv);
    if (st != HCOMM_OK) goto out;
    if ((st = ops->copy_async(dst, src, n, dv->stream)) == HCOMM_OK) st = hc_gpu_dev_wait(ops, dv);
    if (st != HCOMM_OK) st = hc_gpu_fail(st, d, "copy of %zu bytes %s->%s", n, from, to);
out:
    pthread_mutex_unlock(&hc_gpu.lock);
    return st;
}

/* dst (device) op= src (host): src through the device scratch, chunk by
 * chunk; stream order keeps a chunk's copy behind the previous kernel. */
static hcomm_status_t hc_gpu_reduce_to_device(const hc_gpu_ops_t *ops, hc_gpu_dev_t *dv, int d,
                                              char *dst, const char *src, size_t count, size_t es,
                                              hcomm_dtype_t dtype, hcomm_op_t op, int avg_div)
{
    hcomm_status_t st;
    if (!dv->scratch && (st = ops->alloc(d, HC_GPU_SCRATCH, HC_MEM_DEVICE, &dv->scratch)))
        return st;
    size_t per = HC_GPU_SCRATCH / es;
    for (size_t i = 0; i < count; i += per) {
        size_t c = HC_MIN(per, count - i);
        if ((st = ops->copy_async(dv->scratch, src + i * es, c * es, dv->stream)) != HCOMM_OK ||
            (st = ops->reduce_async(dst + i * es, dv->scratch, c, dtype, op, avg_div,
                                    dv->stream)) != HCOMM_OK)
            return st;
    }
    return hc_gpu_dev_wait(ops, dv);
}

/* dst (host) op= src (device): src through a host scratch chunk, reduced on
 * the CPU. */
static hcomm_status_t hc_gpu_reduce_to_host(const hc_gpu_ops_t *ops, hc_gpu_dev_t *dv, char *dst,
                                            const char *src, size_t count, size_t es,
                                            hcomm_dtype_t dtype, hcomm_op_t op, int avg_div)
{
    hcomm_status_t st;
    if (!hc_gpu.host_scratch && !(hc_gpu.host_scratch = malloc(HC_GPU_SCRATCH)))
        return hc_error(HCOMM_ERR_NO_MEMORY, "host scratch of %u bytes", HC_GPU_SCRATCH);
    size_t per = HC_GPU_SCRATCH / es;
    for (size_t i = 0; i < count; i += per) {
        size_t c = HC_MIN(per, count - i);
        if ((st = ops->copy_async(hc_gpu.host_scratch, src + i * es, c * es, dv->stream)) ||
            (st = hc_gpu_dev_wait(ops, dv)))
            return st;
        const void *in[2] = {dst + i * es, hc_gpu.host_scratch};
        hc_reduce(dst + i * es, in, 2, c, dtype, op, avg_div);
    }
    return HCOMM_OK;
}

hcomm_status_t hc_gpu_reduce(void *dst, const hc_mem_attr_t *dst_attr, const void *src,
                             const hc_mem_attr_t *src_attr, size_t count, hcomm_dtype_t dtype,
                             hcomm_op_t op, int avg_div)
{
    size_t es = hc_dtype_size(dtype), bytes;
    if (!es) return hc_error(HCOMM_ERR_INVALID, "gpu reduce: dtype %d is not a dtype", (int)dtype);
    if ((unsigned)op >= HCOMM_OP_COUNT)
        return hc_error(HCOMM_ERR_INVALID, "gpu reduce: op %d is not an op", (int)op);
    if (avg_div < 0) return hc_error(HCOMM_ERR_INVALID, "gpu reduce: avg_div %d < 0", avg_div);
    if (count == 0) return HCOMM_OK;
    if (!dst || !src || hc_mul_overflows(count, es, &bytes))
        return hc_error(HCOMM_ERR_INVALID, "gpu reduce of %zu %s: %s", count, hc_dtype_name(dtype),
                        !dst   ? "dst is NULL"
                        : !src ? "src is NULL"
                               : "the byte count overflows");
    bool dst_host = hc_gpu_is_host(dst_attr), src_host = hc_gpu_is_host(src_attr);
    if (dst_host && src_host) {
        const void *in[2] = {dst, src};
        hc_reduce(dst, in, 2, count, dtype, op, avg_div);
        return HCOMM_OK;
    }
    int d = hc_gpu_device_of(dst_attr, src_attr);
    pthread_mutex_lock(&hc_gpu.lock);
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    hc_gpu_dev_t *dv;
    hcomm_status_t st = hc_gpu_dev_get(ops, d, &dv);
    if (st != HCOMM_OK) goto out;
    if (dst_host)
        st = hc_gpu_reduce_to_host(ops, dv, dst, src, count, es, dtype, op, avg_div);
    else if (src_host)
        st = hc_gpu_reduce_to_device(ops, dv, d, dst, src, count, es, dtype, op, avg_div);
    else if ((st = ops->reduce_async(dst, src, count, dtype, op, avg_div, dv->stream)) == HCOMM_OK)
        st = hc_gpu_dev_wait(ops, dv);
    if (st == HCOMM_OK && !dst_host) {
        hc_gpu_stats.dev_reduces++;
        hc_gpu_stats.dev_reduce_bytes += bytes;
    }
    if (st != HCOMM_OK)
        st = hc_gpu_fail(st, d, "%s reduction of %zu %s %s into %s", hc_op_name(op), count,
                         hc_dtype_name(dtype),
                         hc_mem_type_name(src_host ? HC_MEM_HOST : src_attr->type),
                         hc_mem_type_name(dst_host ? HC_MEM_HOST : dst_attr->type));
out:
    pthread_mutex_unlock(&hc_gpu.lock);
    return st;
}
