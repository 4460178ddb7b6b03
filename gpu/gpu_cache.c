/*
 * The memory-type cache: what a pointer is, asked of the backend once per
 * allocation. Device and managed allocations are kept in one array sorted
 * by base address (an allocation never overlaps another), found by binary
 * search. Host memory is not cached: the backend knows no extent for
 * pageable memory, so a host pointer is asked each time (cheap on the model;
 * the cuda backend will want a negative cache, docs/gpu.md).
 *
 * Staleness: a backend reports every range it stops owning
 * (hc_gpu_range_freed: a free, an IPC close) before the address can be
 * handed out again, and the entries overlapping it are dropped, so an
 * address re-used by a new allocation is looked up anew (the model re-uses
 * addresses on purpose to prove it). A generation counter keeps a query
 * that raced with a free from caching what it saw.
 */
#include "gpu/gpu_int.h"

#include <pthread.h>
#include <string.h>

#define HC_GPU_CACHE_MAX 512

typedef struct {
    uintptr_t end; /* base + length */
    hc_mem_attr_t attr;
} hc_gpu_cache_entry_t;

static struct {
    pthread_mutex_t lock;
    hc_gpu_cache_entry_t e[HC_GPU_CACHE_MAX];
    int n;
    uint64_t gen; /* bumped by every range freed */
    uint64_t hits, queries;
} hc_gpu_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Index of the last entry whose base is <= p, or -1. */
static int hc_gpu_cache_find(uintptr_t p)
{
    int lo = 0, hi = hc_gpu_cache.n - 1, at = -1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (hc_gpu_cache.e[mid].attr.base <= p) {
            at = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return at;
}

/* Drops the entries overlapping [base, end). Called with the lock held. */
static void hc_gpu_cache_drop(uintptr_t base, uintptr_t end)
{
    int w = 0;
    for (int i = 0; i < hc_gpu_cache.n; i++) {
        hc_gpu_cache_entry_t *x = &hc_gpu_cache.e[i];
        if (x->attr.base < end && base < x->end) continue;
        hc_gpu_cache.e[w++] = *x;
    }
    hc_gpu_cache.n = w;
}

static void hc_gpu_cache_insert(const hc_mem_attr_t *a, uint64_t gen)
{
    uintptr_t end = a->base + a->length;
    pthread_mutex_lock(&hc_gpu_cache.lock);
    if (gen != hc_gpu_cache.gen) goto out; /* a range was freed meanwhile: ask again next time */
    hc_gpu_cache_drop(a->base, end);
    if (hc_gpu_cache.n == HC_GPU_CACHE_MAX) {
        hc_log_debug("gpu: memory-type cache full (%d allocations): emptied", HC_GPU_CACHE_MAX);
        hc_gpu_cache.n = 0;
    }
    int at = hc_gpu_cache_find(a->base) + 1;
    memmove(&hc_gpu_cache.e[at + 1], &hc_gpu_cache.e[at],
            (size_t)(hc_gpu_cache.n - at) * sizeof(hc_gpu_cache.e[0]));
    hc_gpu_cache.e[at] = (hc_gpu_cache_entry_t){.end = end, .attr = *a};
    hc_gpu_cache.n++;
out:
    pthread_mutex_unlock(&hc_gpu_cache.lock);
}

void (*hc_gpu_free_listener)(uintptr_t base, size_t len);

void hc_gpu_range_freed(uintptr_t base, size_t len)
{
    pthread_mutex_lock(&hc_gpu_cache.lock);
    hc_gpu_cache.gen++;
    hc_gpu_cache_drop(base, base + len);
    pthread_mutex_unlock(&hc_gpu_cache.lock);
    void (*listener)(uintptr_t, size_t) = __atomic_load_n(&hc_gpu_free_listener, __ATOMIC_ACQUIRE);
    if (listener) listener(base, len);
}

void hc_gpu_cache_clear(void)
{
    pthread_mutex_lock(&hc_gpu_cache.lock);
    hc_gpu_cache.gen++;
    hc_gpu_cache.n = 0;
    pthread_mutex_unlock(&hc_gpu_cache.lock);
}

void hc_gpu_cache_counters(uint64_t *hits_p, uint64_t *queries_p)
{
    pthread_mutex_lock(&hc_gpu_cache.lock);
    *hits_p = hc_gpu_cache.hits;
    *queries_p = hc_gpu_cache.queries;
    pthread_mutex_unlock(&hc_gpu_cache.lock);
}

static bool hc_gpu_cache_lookup(uintptr_t p, hc_mem_attr_t *attr_p, uint64_t *gen_p)
{
    bool hit = false;
    pthread_mutex_lock(&hc_gpu_cache.lock);
    int at = hc_gpu_cache_find(p);
    if (at >= 0 && p < hc_gpu_cache.e[at].end) {
        *attr_p = hc_gpu_cache.e[at].attr;
        hc_gpu_cache.hits++;
        hit = true;
    } else {
        hc_gpu_cache.queries++;
    }
    *gen_p = hc_gpu_cache.gen;
    pthread_mutex_unlock(&hc_gpu_cache.lock);
    return hit;
}

hcomm_status_t hc_gpu_mem_type(const void *ptr, size_t len, hc_mem_attr_t *attr_p)
{
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    hc_mem_attr_t a = {.type = HC_MEM_HOST, .device = -1};
    if (!ops || !ptr) {
        *attr_p = a;
        return HCOMM_OK;
    }
    uintptr_t p = (uintptr_t)ptr;
    uint64_t gen;
    if (!hc_gpu_cache_lookup(p, &a, &gen)) {
        hcomm_status_t st = ops->query(ptr, &a);
        if (st != HCOMM_OK) return hc_gpu_fail(st, -1, "pointer query of %p", ptr);
        if (a.type != HC_MEM_HOST) hc_gpu_cache_insert(&a, gen);
    }
    if (a.type != HC_MEM_HOST && (len > a.length || p - a.base > a.length - len))
        return hc_error(HCOMM_ERR_INVALID,
                        "gpu: buffer [%p, +%zu) runs past the end of %s allocation %llu "
                        "[%#lx, +%zu) on device %d",
                        ptr, len, hc_mem_type_name(a.type), (unsigned long long)a.alloc_id,
                        (unsigned long)a.base, a.length, a.device);
    *attr_p = a;
    return HCOMM_OK;
}
