/*
 * Registration cache for user memory that is not ours (not pool memory, not
 * one of our regions): registering with a NIC pins pages and costs tens of
 * microseconds, so a buffer that is sent again and again is registered once.
 *
 * A record covers whole pages ([ptr, ptr+len) rounded out to the base page).
 * hc_mem_reg_cache_get takes a reference on the record covering the range (a
 * hit moves it to the front of the LRU list; a miss registers a new record
 * through the hooks) and hc_mem_reg_cache_put drops it. A record that has
 * references is never deregistered under a transfer: invalidate, eviction and
 * flush unlink it at once, so that no later get finds it, and its last put
 * deregisters it. Eviction, from the back while a new record would exceed
 * HCOMM_REG_CACHE_MAX_ENTRIES or HCOMM_REG_CACHE_MAX_BYTES, takes only
 * records without references. When they cannot make room, or the range alone
 * exceeds HCOMM_REG_CACHE_MAX_BYTES, the registration is private: made by the
 * get, undone by the put, never cached.
 *
 * Stale records: memory given back to the system and mapped again must not
 * hit the old record, whose pinned pages are not the new ones. mem_hooks.c
 * intercepts the unmap family and reports ranges to hc_mem_reg_cache_unmapped.
 * With HCOMM_MEM_HOOKS=0 only hcomm_mem_deregister (hc_mem_reg_cache_invalidate)
 * drops records.
 *
 * Locking rule: hc_mem_rc.lock is a leaf. Nothing done under it allocates,
 * frees, maps, logs or calls a registration hook; registration runs with it
 * released, under hc_mem_g.lock alone. So a wrapper may take it in any
 * context where its own thread does not hold it already, including inside a
 * registration hook (which runs under hc_mem_g.lock and may free memory).
 * A thread marks, in a thread-local flag, the time it holds the lock: a
 * wrapper that finds the flag set can only run in a signal handler that
 * interrupted this thread, and leaves its range for the unlock to process.
 * Wrappers never deregister (they may run under hc_mem_g.lock): records
 * they drop wait on a list that the next get, put, invalidate or flush
 * deregisters.
 *
 * Lookup is a scan from the most recently used end: the cache holds at most
 * max_entries (1024 by default) records and serves large transfers, where a
 * registration miss costs far more than the scan.
 */
#include "mem/mem_int.h"
#include "mem/mem_hooks.h"
#include "base/config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum {
    HC_RC_CACHED,  /* in the LRU list: found by get */
    HC_RC_DEAD,    /* unlinked while referenced: the last put deregisters it */
    HC_RC_PRIVATE, /* uncached: its put deregisters it */
    HC_RC_ZOMBIE,  /* unlinked, unreferenced: deregistered by the next drain */
    HC_RC_ORPHAN,  /* deregistered by finalize while referenced: the last put frees it */
} hc_mem_rc_state_t;

typedef struct hc_mem_rc_entry {
    hc_mem_region_t r;                   /* first: the record handed out */
    struct hc_mem_rc_entry *prev, *next; /* in the list of its state */
    struct hc_mem_rc_entry *fin_next;    /* finalize's own chain */
    uint32_t refs;
    uint32_t state;
    uint64_t epoch; /* hooks epoch of its registration */
} hc_mem_rc_entry_t;

typedef struct {
    hc_mem_rc_entry_t *head, *tail;
} hc_mem_rc_list_t;

static struct {
    pthread_mutex_t lock;
    hc_mem_rc_list_t lru;     /* CACHED, most recently used first */
    hc_mem_rc_list_t out;     /* DEAD, PRIVATE, ORPHAN: referenced, not found by get */
    hc_mem_rc_list_t zombies; /* awaiting deregistration */
    size_t entries, bytes;    /* CACHED records */
    uint64_t hits, misses, evictions, uncached;
    bool hooks_wanted;           /* HCOMM_MEM_HOOKS of this init cycle */
    atomic_bool hooks_on;        /* installed: the wrappers watch the records */
    atomic_bool hooks_failed;    /* installation failed this cycle */
    _Atomic uintptr_t lo, hi;    /* span of the CACHED records, for the wrappers */
    atomic_bool zombies_pending; /* zombies.head != NULL, read without the lock */
    _Atomic uint64_t epoch;      /* +1 at each flush: the hooks are about to change */
} hc_mem_rc = {.lock = PTHREAD_MUTEX_INITIALIZER, .lo = UINTPTR_MAX};

atomic_size_t hc_mem_reg_cache_watched;

/* Set while this thread holds hc_mem_rc.lock; ranges a signal handler's
 * wrapper reported meanwhile (an overflow drops every record). */
#define HC_MEM_RC_PENDING 4
static __thread struct {
    volatile sig_atomic_t inside, npending, overflow;
    uintptr_t pending[HC_MEM_RC_PENDING][2];
} hc_mem_rc_tls __attribute__((tls_model("initial-exec")));

static void hc_mem_rc_pending_run(void);

static void hc_mem_rc_lock(void)
{
    hc_mem_rc_tls.inside = 1;
    atomic_signal_fence(memory_order_seq_cst);
    pthread_mutex_lock(&hc_mem_rc.lock);
}

static void hc_mem_rc_unlock(void)
{
    pthread_mutex_unlock(&hc_mem_rc.lock);
    atomic_signal_fence(memory_order_seq_cst);
    hc_mem_rc_tls.inside = 0;
    atomic_signal_fence(memory_order_seq_cst);
    if (HC_UNLIKELY(hc_mem_rc_tls.npending || hc_mem_rc_tls.overflow)) hc_mem_rc_pending_run();
}

/* ---- lists (lock held) -------------------------------------------------- */

static void hc_mem_rc_list_push(hc_mem_rc_list_t *l, hc_mem_rc_entry_t *e)
{
    e->prev = NULL;
    e->next = l->head;
    if (e->next)
        e->next->prev = e;
    else
        l->tail = e;
    l->head = e;
}

static void hc_mem_rc_list_del(hc_mem_rc_list_t *l, hc_mem_rc_entry_t *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        l->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        l->tail = e->prev;
    e->prev = e->next = NULL;
}

/* The wrappers' view: how many records to watch, and where. */
static void hc_mem_rc_watch_update(void)
{
    if (hc_mem_rc.entries == 0) {
        atomic_store_explicit(&hc_mem_rc.lo, UINTPTR_MAX, memory_order_relaxed);
        atomic_store_explicit(&hc_mem_rc.hi, 0, memory_order_relaxed);
    }
    bool on = atomic_load_explicit(&hc_mem_rc.hooks_on, memory_order_relaxed);
    atomic_store_explicit(&hc_mem_reg_cache_watched, on ? hc_mem_rc.entries : 0,
                          memory_order_relaxed);
}

static void hc_mem_rc_insert(hc_mem_rc_entry_t *e)
{
    uintptr_t b = (uintptr_t)e->r.base;
    e->state = HC_RC_CACHED;
    hc_mem_rc_list_push(&hc_mem_rc.lru, e);
    hc_mem_rc.entries++;
    hc_mem_rc.bytes += e->r.size;
    if (b < atomic_load_explicit(&hc_mem_rc.lo, memory_order_relaxed))
        atomic_store_explicit(&hc_mem_rc.lo, b, memory_order_relaxed);
    if (b + e->r.size > atomic_load_explicit(&hc_mem_rc.hi, memory_order_relaxed))
        atomic_store_explicit(&hc_mem_rc.hi, b + e->r.size, memory_order_relaxed);
    hc_mem_rc_watch_update();
}

/* Takes a CACHED record out of the cache: the last put deregisters it if it
 * has references, else the next drain. */
static void hc_mem_rc_retire(hc_mem_rc_entry_t *e)
{
    hc_mem_rc_list_del(&hc_mem_rc.lru, e);
    hc_mem_rc.entries--;
    hc_mem_rc.bytes -= e->r.size;
    hc_mem_rc_watch_update();
    if (e->refs) {
        e->state = HC_RC_DEAD;
        hc_mem_rc_list_push(&hc_mem_rc.out, e);
    } else {
        e->state = HC_RC_ZOMBIE;
        hc_mem_rc_list_push(&hc_mem_rc.zombies, e);
        atomic_store_explicit(&hc_mem_rc.zombies_pending, true, memory_order_relaxed);
    }
}

static void hc_mem_rc_retire_range(uintptr_t start, uintptr_t end)
{
    for (hc_mem_rc_entry_t *e = hc_mem_rc.lru.head, *n; e; e = n) {
        n = e->next;
        uintptr_t b = (uintptr_t)e->r.base;
        if (b < end && start < b + e->r.size) hc_mem_rc_retire(e);
    }
}

/* The record covering [start, end) of memory type `type` (for device
 * memory: of allocation alloc_id, so that a re-used address never finds
 * the record of the memory that was there before). */
static hc_mem_rc_entry_t *hc_mem_rc_find(uintptr_t start, uintptr_t end, hc_mem_type_t type,
                                         uint64_t alloc_id)
{
    for (hc_mem_rc_entry_t *e = hc_mem_rc.lru.head; e; e = e->next) {
        uintptr_t b = (uintptr_t)e->r.base;
        if (b <= start && b + e->r.size >= end && e->r.mem_type == type &&
            e->r.alloc_id == alloc_id)
            return e;
    }
    return NULL;
}

static void hc_mem_rc_hit(hc_mem_rc_entry_t *e)
{
    e->refs++;
    hc_mem_rc_list_del(&hc_mem_rc.lru, e);
    hc_mem_rc_list_push(&hc_mem_rc.lru, e);
}

/* Evicts unreferenced records from the back until one more record of size
 * bytes fits; evicts nothing and returns false when they cannot make room. */
static bool hc_mem_rc_make_room(size_t size)
{
    size_t max_entries =
        hc_cfg.reg_cache_max_entries > 0 ? (size_t)hc_cfg.reg_cache_max_entries : 1;
    size_t n = hc_mem_rc.entries, bytes = hc_mem_rc.bytes;
    hc_mem_rc_entry_t *stop = hc_mem_rc.lru.tail;
    for (; stop && (n + 1 > max_entries || bytes + size > hc_cfg.reg_cache_max_bytes);
         stop = stop->prev) {
        if (stop->refs) continue;
        n--;
        bytes -= stop->r.size;
    }
    if (n + 1 > max_entries || bytes + size > hc_cfg.reg_cache_max_bytes) return false;
    for (hc_mem_rc_entry_t *e = hc_mem_rc.lru.tail, *p; e != stop; e = p) {
        p = e->prev;
        if (e->refs) continue;
        hc_mem_rc.evictions++;
        hc_mem_rc_retire(e);
    }
    return true;
}

/* ---- deregistration (cache lock not held) ------------------------------- */

static void hc_mem_rc_dereg(hc_mem_rc_entry_t *e)
{
    pthread_mutex_lock(&hc_mem_g.lock);
    if (e->epoch == atomic_load(&hc_mem_rc.epoch)) {
        hc_mem_region_dereg_locked(&e->r);
    } else {
        /* Registered through hooks that have been replaced since: they are
         * not ours to call, and the new ones never saw these keys. */
        e->r.registered = false;
        memset(e->r.keys, 0, sizeof(e->r.keys));
    }
    pthread_mutex_unlock(&hc_mem_g.lock);
}

/* Deregisters and frees the zombies. Not from a wrapper, nor under
 * hc_mem_g.lock. */
static void hc_mem_rc_drain(void)
{
    if (!atomic_load_explicit(&hc_mem_rc.zombies_pending, memory_order_relaxed)) return;
    hc_mem_rc_lock();
    hc_mem_rc_entry_t *z = hc_mem_rc.zombies.head;
    hc_mem_rc.zombies.head = hc_mem_rc.zombies.tail = NULL;
    atomic_store_explicit(&hc_mem_rc.zombies_pending, false, memory_order_relaxed);
    hc_mem_rc_unlock();
    for (hc_mem_rc_entry_t *n; z; z = n) {
        n = z->next;
        hc_mem_rc_dereg(z);
        free(z);
    }
}

/* ---- the wrappers' entry ------------------------------------------------ */

void hc_mem_reg_cache_unmapped(const void *addr, size_t len)
{
    uintptr_t start = (uintptr_t)addr;
    uintptr_t end = len > UINTPTR_MAX - start ? UINTPTR_MAX : start + len;
    if (len == 0 || end <= atomic_load_explicit(&hc_mem_rc.lo, memory_order_relaxed) ||
        start >= atomic_load_explicit(&hc_mem_rc.hi, memory_order_relaxed))
        return;
    if (hc_mem_rc_tls.inside) {
        /* A signal handler on a thread that holds the lock: later. */
        sig_atomic_t n = hc_mem_rc_tls.npending;
        if (n < HC_MEM_RC_PENDING) {
            hc_mem_rc_tls.pending[n][0] = start;
            hc_mem_rc_tls.pending[n][1] = end;
            atomic_signal_fence(memory_order_seq_cst);
            hc_mem_rc_tls.npending = n + 1;
        } else {
            hc_mem_rc_tls.overflow = 1;
        }
        return;
    }
    hc_mem_rc_lock();
    hc_mem_rc_retire_range(start, end);
    hc_mem_rc_unlock();
}

static void hc_mem_rc_pending_run(void)
{
    uintptr_t ranges[HC_MEM_RC_PENDING][2];
    sig_atomic_t n = hc_mem_rc_tls.npending, overflow = hc_mem_rc_tls.overflow;
    memcpy(ranges, hc_mem_rc_tls.pending, sizeof(ranges));
    hc_mem_rc_tls.npending = 0;
    hc_mem_rc_tls.overflow = 0;
    if (overflow) {
        hc_mem_reg_cache_unmapped(NULL, SIZE_MAX);
        return;
    }
    for (sig_atomic_t i = 0; i < n; i++)
        hc_mem_reg_cache_unmapped((void *)ranges[i][0], ranges[i][1] - ranges[i][0]);
}

/* ---- hooks -------------------------------------------------------------- */

static void hc_mem_rc_hooks_check(void)
{
    static atomic_bool told_off, told_failed;
    if (HC_LIKELY(atomic_load_explicit(&hc_mem_rc.hooks_on, memory_order_acquire))) {
        hc_mem_hooks_refresh();
        return;
    }
    if (!hc_mem_rc.hooks_wanted) {
        if (!atomic_load_explicit(&told_off, memory_order_relaxed) &&
            !atomic_exchange(&told_off, true))
            hc_log_info("mem: HCOMM_MEM_HOOKS=0: the registration cache does not see free() or "
                        "munmap(); call hcomm_mem_deregister before giving registered memory "
                        "back, or a later buffer at the same address may use a stale "
                        "registration");
        return;
    }
    if (atomic_load_explicit(&hc_mem_rc.hooks_failed, memory_order_relaxed)) return;
    if (hc_mem_hooks_install() != HCOMM_OK) {
        atomic_store(&hc_mem_rc.hooks_failed, true);
        if (!atomic_exchange(&told_failed, true))
            hc_log_info("%s; the registration cache relies on hcomm_mem_deregister alone",
                        hc_error_last());
        return;
    }
    hc_mem_rc_lock();
    atomic_store_explicit(&hc_mem_rc.hooks_on, true, memory_order_release);
    hc_mem_rc_watch_update();
    hc_mem_rc_unlock();
}

static void hc_mem_rc_atfork_prepare(void)
{
    hc_mem_rc_lock();
}

static void hc_mem_rc_atfork_done(void)
{
    hc_mem_rc_unlock();
}

static void hc_mem_rc_atfork_once(void)
{
    pthread_atfork(hc_mem_rc_atfork_prepare, hc_mem_rc_atfork_done, hc_mem_rc_atfork_done);
}

/* ---- API ---------------------------------------------------------------- */

/* Device memory: the dmabuf fd of the record's range for the reg hook. */
static hcomm_status_t hc_mem_rc_dmabuf(hc_mem_region_t *r)
{
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    if (!ops)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "registration of device memory at %p: no GPU "
                        "backend",
                        r->base);
    hcomm_status_t st = ops->dmabuf_fd(r->base, r->size, &r->dmabuf_fd, &r->dmabuf_offset);
    if (st != HCOMM_OK) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", hc_error_last());
        r->dmabuf_fd = -1;
        return hc_error(st, "registration of %zu bytes of device memory at %p (device %d): %s",
                        r->size, r->base, r->device, saved);
    }
    return HCOMM_OK;
}

/* A new record of [start, start+size) of memory attr (NULL: host),
 * registered, one reference. A device record's dmabuf fd is open only
 * while the hook runs: the drivers keep their own mapping or MR. */
static hcomm_status_t hc_mem_rc_register(uintptr_t start, size_t size, const hc_mem_attr_t *attr,
                                         hc_mem_rc_entry_t **e_p)
{
    hc_mem_rc_entry_t *e = calloc(1, sizeof(*e));
    if (!e) return hc_error(HCOMM_ERR_NO_MEMORY, "hc_mem_reg_cache_get: cache record");
    e->r.base = (void *)start;
    e->r.size = size;
    e->r.page_size = hc_mem_g.base_page;
    e->r.fd = -1;
    e->r.numa_node = -1;
    e->r.flags = HC_MEM_USER;
    e->r.kind = HC_MEM_KIND_CACHE;
    e->r.id = UINT32_MAX; /* not in the region table */
    e->r.mem_type = attr ? attr->type : HC_MEM_HOST;
    e->r.device = attr ? attr->device : -1;
    e->r.alloc_id = attr ? attr->alloc_id : 0;
    e->r.dmabuf_fd = -1;
    e->refs = 1;
    hcomm_status_t st = HCOMM_OK;
    if (e->r.mem_type == HC_MEM_DEVICE && (st = hc_mem_rc_dmabuf(&e->r)) != HCOMM_OK) {
        free(e);
        return st;
    }
    pthread_mutex_lock(&hc_mem_g.lock);
    e->epoch = atomic_load(&hc_mem_rc.epoch);
    st = hc_mem_region_reg_locked(&e->r);
    pthread_mutex_unlock(&hc_mem_g.lock);
    if (e->r.dmabuf_fd >= 0) {
        close(e->r.dmabuf_fd);
        e->r.dmabuf_fd = -1;
    }
    if (st != HCOMM_OK) {
        free(e);
        return st;
    }
    *e_p = e;
    return HCOMM_OK;
}

/* Finds or registers the record of [start, end) (attr: its memory, NULL
 * for host), one reference. */
static hcomm_status_t hc_mem_rc_get_range(uintptr_t start, uintptr_t end, const hc_mem_attr_t *attr,
                                          hc_mem_region_t **region_p)
{
    size_t size = (size_t)(end - start);
    hc_mem_type_t type = attr ? attr->type : HC_MEM_HOST;
    uint64_t id = attr ? attr->alloc_id : 0;
    bool cacheable = size <= hc_cfg.reg_cache_max_bytes;
    hc_mem_rc_entry_t *e;

    if (cacheable) {
        hc_mem_rc_lock();
        e = hc_mem_rc_find(start, end, type, id);
        if (e) {
            hc_mem_rc.hits++;
            hc_mem_rc_hit(e);
            hc_mem_rc_unlock();
            *region_p = &e->r;
            return HCOMM_OK;
        }
        hc_mem_rc.misses++;
        hc_mem_rc_unlock();
    }
    hcomm_status_t st = hc_mem_rc_register(start, size, attr, &e);
    if (st != HCOMM_OK) return st;

    hc_mem_rc_lock();
    hc_mem_rc_entry_t *raced = cacheable ? hc_mem_rc_find(start, end, type, id) : NULL;
    if (raced) {
        /* Another thread registered the range meanwhile: use its record. */
        hc_mem_rc_hit(raced);
        e->refs = 0;
        e->state = HC_RC_ZOMBIE;
        hc_mem_rc_list_push(&hc_mem_rc.zombies, e);
        atomic_store_explicit(&hc_mem_rc.zombies_pending, true, memory_order_relaxed);
        e = raced;
    } else if (cacheable && hc_mem_rc_make_room(size)) {
        hc_mem_rc_insert(e);
    } else {
        e->state = HC_RC_PRIVATE;
        hc_mem_rc_list_push(&hc_mem_rc.out, e);
        hc_mem_rc.uncached++;
    }
    hc_mem_rc_unlock();
    hc_mem_rc_drain();
    *region_p = &e->r;
    return HCOMM_OK;
}

hcomm_status_t hc_mem_reg_cache_get_typed(const void *ptr, size_t len, const hc_mem_attr_t *attr,
                                          hc_mem_region_t **region_p)
{
    if (!attr || attr->type == HC_MEM_HOST) return hc_mem_reg_cache_get(ptr, len, region_p);
    if (!ptr || !region_p || len == 0 || (uintptr_t)ptr + len < (uintptr_t)ptr)
        return hc_error(HCOMM_ERR_INVALID,
                        "hc_mem_reg_cache_get_typed: bad range (%p, %zu) or "
                        "region_p NULL",
                        ptr, len);
    if (attr->type != HC_MEM_DEVICE)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "registration of %s memory at %p: only host and "
                        "device memory are registered",
                        hc_mem_type_name(attr->type), ptr);
    uintptr_t start = attr->base, end = attr->base + attr->length;
    if (!hc_mem_g.initialized)
        return hc_error(HCOMM_ERR_NOT_INITIALIZED, "hc_mem_reg_cache_get: hc_mem_init not called");
    if ((uintptr_t)ptr < start || (uintptr_t)ptr + len > end)
        return hc_error(HCOMM_ERR_INVALID,
                        "registration of device memory [%p, +%zu): outside "
                        "its allocation [%#lx, +%zu)",
                        ptr, len, (unsigned long)start, attr->length);
    hc_mem_rc_drain();
    return hc_mem_rc_get_range(start, end, attr, region_p);
}

hcomm_status_t hc_mem_reg_cache_get(const void *ptr, size_t len, hc_mem_region_t **region_p)
{
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
    hc_mem_rc_hooks_check();
    hc_mem_rc_drain();
    uintptr_t start = (uintptr_t)ptr & ~(uintptr_t)(hc_mem_g.base_page - 1);
    uintptr_t end = HC_ALIGN_UP((uintptr_t)ptr + len, hc_mem_g.base_page);
    return hc_mem_rc_get_range(start, end, NULL, region_p);
}

void hc_mem_reg_cache_put(hc_mem_region_t *region)
{
    if (!region || region->kind != HC_MEM_KIND_CACHE) return;
    hc_mem_rc_entry_t *e = (hc_mem_rc_entry_t *)region;
    bool unbalanced = false, free_it = false;
    hc_mem_rc_lock();
    if (e->refs == 0) {
        unbalanced = true;
    } else if (--e->refs == 0 && e->state != HC_RC_CACHED) {
        hc_mem_rc_list_del(&hc_mem_rc.out, e);
        if (e->state == HC_RC_ORPHAN) {
            free_it = true;
        } else { /* DEAD or PRIVATE */
            e->state = HC_RC_ZOMBIE;
            hc_mem_rc_list_push(&hc_mem_rc.zombies, e);
            atomic_store_explicit(&hc_mem_rc.zombies_pending, true, memory_order_relaxed);
        }
    }
    hc_mem_rc_unlock();
    if (unbalanced)
        hc_log_warn("mem: hc_mem_reg_cache_put(%p, %zu bytes) without a reference: ignored",
                    region->base, region->size);
    if (free_it) free(e);
    hc_mem_rc_drain();
}

void hc_mem_reg_cache_invalidate(const void *ptr, size_t len)
{
    if (!ptr || len == 0) return;
    uintptr_t start = (uintptr_t)ptr;
    uintptr_t end = len > UINTPTR_MAX - start ? UINTPTR_MAX : start + len;
    hc_mem_rc_lock();
    hc_mem_rc_retire_range(start, end);
    hc_mem_rc_unlock();
    hc_mem_rc_drain();
}

void hc_mem_reg_cache_flush(void)
{
    hc_mem_rc_lock();
    size_t kept = 0;
    while (hc_mem_rc.lru.head) {
        kept += hc_mem_rc.lru.head->refs != 0;
        hc_mem_rc_retire(hc_mem_rc.lru.head);
    }
    hc_mem_rc_unlock();
    hc_mem_rc_drain();
    /* Records still referenced were registered through the hooks that are
     * about to be replaced: their last put will not call those. */
    atomic_fetch_add(&hc_mem_rc.epoch, 1);
    if (kept)
        hc_log_debug("mem: registration cache flushed with %zu records in use: they are "
                     "dropped at their last put",
                     kept);
}

/* The GPU layer freed [base, base + len) (hc_gpu_free_listener): its
 * records leave the cache; the next get, put or drain deregisters them. */
static void hc_mem_rc_gpu_freed(uintptr_t base, size_t len)
{
    hc_mem_reg_cache_unmapped((const void *)base, len);
}

void hc_mem_reg_cache_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, hc_mem_rc_atfork_once);
    __atomic_store_n(&hc_gpu_free_listener, hc_mem_rc_gpu_freed, __ATOMIC_RELEASE);
    hc_mem_rc_lock();
    hc_mem_rc.hits = hc_mem_rc.misses = hc_mem_rc.evictions = hc_mem_rc.uncached = 0;
    hc_mem_rc.hooks_wanted = hc_cfg.mem_hooks;
    atomic_store(&hc_mem_rc.hooks_failed, false);
    atomic_store(&hc_mem_rc.hooks_on, false);
    hc_mem_rc_watch_update();
    hc_mem_rc_unlock();
}

void hc_mem_reg_cache_finalize(void)
{
    __atomic_store_n(&hc_gpu_free_listener, NULL, __ATOMIC_RELEASE);
    hc_mem_rc_entry_t *held = NULL;
    size_t nheld = 0;
    uint64_t refs = 0;
    hc_mem_rc_lock();
    while (hc_mem_rc.lru.head)
        hc_mem_rc_retire(hc_mem_rc.lru.head);
    /* Referenced records are deregistered now, each held by one extra
     * reference meanwhile so that a racing put cannot free it. */
    for (hc_mem_rc_entry_t *e = hc_mem_rc.out.head; e; e = e->next) {
        if (e->state == HC_RC_ORPHAN) continue;
        refs += e->refs;
        nheld++;
        e->state = HC_RC_ORPHAN;
        e->refs++;
        e->fin_next = held;
        held = e;
    }
    atomic_store(&hc_mem_rc.hooks_on, false);
    hc_mem_rc_watch_update();
    hc_mem_rc_unlock();
    hc_mem_rc_drain();
    for (hc_mem_rc_entry_t *e = held; e; e = e->fin_next)
        hc_mem_rc_dereg(e);
    hc_mem_rc_entry_t *gone = NULL;
    hc_mem_rc_lock();
    for (hc_mem_rc_entry_t *e = held, *n; e; e = n) {
        n = e->fin_next;
        if (--e->refs == 0) {
            hc_mem_rc_list_del(&hc_mem_rc.out, e);
            e->fin_next = gone;
            gone = e;
        }
    }
    hc_mem_rc_unlock();
    for (hc_mem_rc_entry_t *n; gone; gone = n) {
        n = gone->fin_next;
        free(gone);
    }
    atomic_fetch_add(&hc_mem_rc.epoch, 1);
    if (nheld)
        hc_log_warn("mem: finalize: %zu registration-cache records still referenced (%llu "
                    "references): deregistered anyway; their puts only free them",
                    nheld, (unsigned long long)refs);
}

void hc_mem_reg_cache_stats_get(hc_mem_stats_t *s)
{
    hc_mem_rc_lock();
    s->cache_hits = hc_mem_rc.hits;
    s->cache_misses = hc_mem_rc.misses;
    s->cache_evictions = hc_mem_rc.evictions;
    s->cache_uncached = hc_mem_rc.uncached;
    s->cache_entries = hc_mem_rc.entries;
    s->cache_bytes = hc_mem_rc.bytes;
    hc_mem_rc_unlock();
}
