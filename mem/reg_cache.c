/*
 * Registration cache for user memory that is not ours (not pool memory, not
 * a region): registering with a NIC pins pages and costs tens of
 * microseconds, so a buffer that is sent again and again is registered once.
 *
 * A record covers whole pages ([ptr, ptr+len) rounded out to the base page).
 * A get that some record covers is a hit and moves it to the front of the
 * LRU list; a miss registers a new record through the hooks, first evicting
 * from the back while the cache would exceed HCOMM_REG_CACHE_MAX_ENTRIES or
 * HCOMM_REG_CACHE_MAX_BYTES. Records may overlap; invalidate drops every
 * record overlapping its range (hcomm_mem_deregister maps to it: the library
 * cannot see free()/munmap(), so the user must say when memory goes away).
 *
 * Lookup is a scan from the most recently used end under one mutex: the
 * cache holds at most max_entries (1024 by default) records and serves large
 * transfers, where a registration miss costs far more than the scan.
 */
#include "mem/mem_int.h"
#include "core/config.h"

#include <stdlib.h>
#include <string.h>

typedef struct hc_mem_rc_entry {
    hc_mem_region_t r; /* first: the record handed out */
    struct hc_mem_rc_entry *prev, *next;
} hc_mem_rc_entry_t;

static struct {
    pthread_mutex_t lock;
    hc_mem_rc_entry_t *mru, *lru;
    size_t entries, bytes;
    uint64_t hits, misses, evictions;
} hc_mem_rc = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void hc_mem_rc_unlink(hc_mem_rc_entry_t *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        hc_mem_rc.mru = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        hc_mem_rc.lru = e->prev;
    e->prev = e->next = NULL;
}

static void hc_mem_rc_push_front(hc_mem_rc_entry_t *e)
{
    e->prev = NULL;
    e->next = hc_mem_rc.mru;
    if (e->next)
        e->next->prev = e;
    else
        hc_mem_rc.lru = e;
    hc_mem_rc.mru = e;
}

/* Drops one record (cache lock held). */
static void hc_mem_rc_drop(hc_mem_rc_entry_t *e)
{
    hc_mem_rc_unlink(e);
    hc_mem_rc.entries--;
    hc_mem_rc.bytes -= e->r.size;
    pthread_mutex_lock(&hc_mem_g.lock);
    hc_mem_region_dereg_locked(&e->r);
    pthread_mutex_unlock(&hc_mem_g.lock);
    free(e);
}

hcomm_status_t hc_mem_reg_cache_get(const void *ptr, size_t len, hc_mem_region_t **region_p)
{
    hcomm_status_t st;
    if (!ptr) return hc_error(HCOMM_ERR_INVALID, "hc_mem_reg_cache_get: argument ptr is NULL");
    if (len == 0 || (uintptr_t)ptr + len < (uintptr_t)ptr)
        return hc_error(HCOMM_ERR_INVALID, "hc_mem_reg_cache_get: argument len is bad (%zu)", len);
    if (!region_p)
        return hc_error(HCOMM_ERR_INVALID, "hc_mem_reg_cache_get: argument region_p is NULL");
    if (!hc_mem_g.initialized)
        return hc_error(HCOMM_ERR_NOT_INITIALIZED, "hc_mem_reg_cache_get: hc_mem_init not called");
    /* Our own memory is registered already, for its whole life. */
    hc_mem_region_t *own = hc_mem_region_lookup(ptr, len, NULL);
    if (own && own->kind != HC_MEM_KIND_ATTACHED) {
        *region_p = own;
        return HCOMM_OK;
    }
    uintptr_t start = (uintptr_t)ptr & ~(uintptr_t)(hc_mem_g.base_page - 1);
    uintptr_t end = HC_ALIGN_UP((uintptr_t)ptr + len, hc_mem_g.base_page);
    size_t size = (size_t)(end - start);
    if (size > hc_cfg.reg_cache_max_bytes)
        return hc_error(HCOMM_ERR_INVALID,
                        "hc_mem_reg_cache_get: argument len (%zu) exceeds "
                        "HCOMM_REG_CACHE_MAX_BYTES=%zu",
                        len, hc_cfg.reg_cache_max_bytes);

    pthread_mutex_lock(&hc_mem_rc.lock);
    for (hc_mem_rc_entry_t *e = hc_mem_rc.mru; e; e = e->next) {
        uintptr_t b = (uintptr_t)e->r.base;
        if (b <= start && b + e->r.size >= end) {
            hc_mem_rc.hits++;
            hc_mem_rc_unlink(e);
            hc_mem_rc_push_front(e);
            *region_p = &e->r;
            pthread_mutex_unlock(&hc_mem_rc.lock);
            return HCOMM_OK;
        }
    }
    hc_mem_rc.misses++;
    size_t max_entries =
        hc_cfg.reg_cache_max_entries > 0 ? (size_t)hc_cfg.reg_cache_max_entries : 1;
    while (hc_mem_rc.lru && (hc_mem_rc.entries + 1 > max_entries ||
                             hc_mem_rc.bytes + size > hc_cfg.reg_cache_max_bytes)) {
        hc_mem_rc.evictions++;
        hc_mem_rc_drop(hc_mem_rc.lru);
    }
    hc_mem_rc_entry_t *e = calloc(1, sizeof(*e));
    if (!e) {
        st = hc_error(HCOMM_ERR_NO_MEMORY, "hc_mem_reg_cache_get: cache record");
        goto out_unlock;
    }
    e->r.base = (void *)start;
    e->r.size = size;
    e->r.page_size = hc_mem_g.base_page;
    e->r.fd = -1;
    e->r.numa_node = -1;
    e->r.kind = HC_MEM_KIND_CACHE;
    e->r.id = UINT32_MAX; /* not in the region table */
    pthread_mutex_lock(&hc_mem_g.lock);
    st = hc_mem_region_reg_locked(&e->r);
    pthread_mutex_unlock(&hc_mem_g.lock);
    if (st != HCOMM_OK) {
        free(e);
        goto out_unlock;
    }
    hc_mem_rc_push_front(e);
    hc_mem_rc.entries++;
    hc_mem_rc.bytes += size;
    *region_p = &e->r;
out_unlock:
    pthread_mutex_unlock(&hc_mem_rc.lock);
    return st;
}

void hc_mem_reg_cache_invalidate(const void *ptr, size_t len)
{
    if (!ptr || len == 0) return;
    uintptr_t start = (uintptr_t)ptr;
    uintptr_t end = len > UINTPTR_MAX - start ? UINTPTR_MAX : start + len;
    pthread_mutex_lock(&hc_mem_rc.lock);
    for (hc_mem_rc_entry_t *e = hc_mem_rc.mru, *n; e; e = n) {
        n = e->next;
        uintptr_t b = (uintptr_t)e->r.base;
        if (b < end && start < b + e->r.size) hc_mem_rc_drop(e);
    }
    pthread_mutex_unlock(&hc_mem_rc.lock);
}

void hc_mem_reg_cache_flush(void)
{
    pthread_mutex_lock(&hc_mem_rc.lock);
    while (hc_mem_rc.mru)
        hc_mem_rc_drop(hc_mem_rc.mru);
    pthread_mutex_unlock(&hc_mem_rc.lock);
}

void hc_mem_reg_cache_init(void)
{
    pthread_mutex_lock(&hc_mem_rc.lock);
    hc_mem_rc.hits = hc_mem_rc.misses = hc_mem_rc.evictions = 0;
    pthread_mutex_unlock(&hc_mem_rc.lock);
}

void hc_mem_reg_cache_finalize(void)
{
    hc_mem_reg_cache_flush();
}

void hc_mem_reg_cache_stats_get(hc_mem_stats_t *s)
{
    pthread_mutex_lock(&hc_mem_rc.lock);
    s->cache_hits = hc_mem_rc.hits;
    s->cache_misses = hc_mem_rc.misses;
    s->cache_evictions = hc_mem_rc.evictions;
    s->cache_entries = hc_mem_rc.entries;
    s->cache_bytes = hc_mem_rc.bytes;
    pthread_mutex_unlock(&hc_mem_rc.lock);
}
