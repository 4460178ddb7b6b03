/*
 * Internal state shared by the files of mem/: the process-wide settings
 * derived from hc_cfg at hc_mem_init, the region table, the pool's reserved
 * virtual range and the counters. Nothing outside mem/ includes this header,
 * except mem/ unit tests.
 */
#ifndef HC_MEM_INT_H
#define HC_MEM_INT_H

#include "mem/mem.h"

#include <pthread.h>
#include <stdatomic.h>

#define HC_MEM_GRANULE_SHIFT 21 /* 2 MiB: unit of the pool's O(1) lookup table */
#define HC_MEM_GRANULE ((size_t)1 << HC_MEM_GRANULE_SHIFT)
#define HC_MEM_REGIONS_MAX 16384 /* live regions (ids are slots of this table) */

struct hc_mem_slab;

/* One entry per 2 MiB of the pool's reserved range: which region and which
 * slab (run of same-size blocks) covers it. Written once when the memory is
 * carved (release), read lock-free by lookup and free (acquire). */
typedef struct {
    _Atomic(hc_mem_region_t *) region;
    _Atomic(struct hc_mem_slab *) slab;
} hc_mem_granule_t;

typedef struct {
    bool initialized;
    size_t hugepage_size; /* from HCOMM_HUGEPAGE_SIZE */
    size_t base_page;     /* sysconf(_SC_PAGESIZE) */
    bool numa_ok;         /* numa_available() >= 0 */

    /* The pool's reserved virtual range: every pool region is mapped at a
     * fixed address inside it, so pointer -> region is one shift. */
    uint8_t *pool_base;
    size_t pool_reserved;
    size_t pool_initial; /* the initial pool's bytes (hc_mem_initial_for) */
    hc_mem_granule_t *granules; /* pool_reserved >> HC_MEM_GRANULE_SHIFT */

    /* Registration hooks and region creation/destruction are serialized by
     * lock; the sorted table of non-pool regions is read under rw. */
    pthread_mutex_t lock;
    pthread_rwlock_t rw;
    hc_mem_reg_fn reg;
    hc_mem_dereg_fn dereg;
    void *reg_arg;
    hc_mem_region_t *slots[HC_MEM_REGIONS_MAX]; /* by id, every live region */
    uint32_t nslots_used;
    hc_mem_region_t **sorted; /* non-pool regions, by base address */
    size_t nsorted, sorted_cap;

    /* Region counters (process lifetime of one init/finalize cycle). */
    _Atomic uint64_t regions_created, huge_fallbacks, mlock_failures, numa_bind_failures;
    _Atomic uint64_t reg_failures, bytes_huge, bytes_regular;
} hc_mem_global_t;

extern hc_mem_global_t hc_mem_g;

/* Kinds of regions (hc_mem_region_t.kind). */
enum {
    HC_MEM_KIND_USER = 0, /* hc_mem_region_create by a module (shm segments...) */
    HC_MEM_KIND_POOL,     /* a chunk of the pool, inside the reserved range */
    HC_MEM_KIND_LARGE,    /* one hc_mem_alloc larger than the largest class */
    HC_MEM_KIND_FALLBACK, /* one hc_mem_alloc past the pool limit */
    HC_MEM_KIND_ATTACHED, /* a peer's region mapped from its memfd */
    HC_MEM_KIND_CACHE,    /* a registration-cache record of user memory */
};

/* Internal create flag: regular pages only (the pool-limit fallback). */
#define HC_MEM_INT_PLAIN (1u << 31)

/* Creates a region at the fixed address addr (inside the pool range) when
 * addr is not NULL. kind is one of HC_MEM_KIND_*. */
hcomm_status_t hc_mem_region_create_kind(size_t size, unsigned flags, int numa_node,
                                         const char *name, void *addr, uint32_t kind,
                                         hc_mem_region_t **region_p);

/* Removes from the table the LARGE or FALLBACK region whose base is ptr and
 * returns it (kind in *kind_p), or NULL: two racing frees cannot both win. */
hc_mem_region_t *hc_mem_region_take(const void *ptr, uint32_t *kind_p);

/* Size classes (for tests and the bench). */
unsigned hc_mem_pool_nclasses(void);
size_t hc_mem_pool_class_size(unsigned c);
unsigned hc_mem_pool_class_of(size_t bytes);

/* Pool and registration cache parts of init/finalize/stats. */
hcomm_status_t hc_mem_pool_init(void);
/* Reserving bytes of address space for what failed with errno err: the
 * message says so and, under an address-space limit (ulimit -v), names the
 * limit, what the process maps already and the HCOMM_MEM_POOL_MAX_SIZE that
 * fits (mem.c). */
hcomm_status_t hc_mem_reserve_error(int err, const char *what, size_t bytes);
void hc_mem_pool_finalize(void);
void hc_mem_pool_stats_get(hc_mem_stats_t *s);

/* ---- registration cache (reg_cache.c, mem_hooks.c) ----------------------
 * Init reads HCOMM_MEM_HOOKS; the hooks are installed at the first lookup of
 * user memory. Finalize deregisters every record, referenced or not (a
 * warning counts the references still held; their puts then only free). */
void hc_mem_reg_cache_init(void);
void hc_mem_reg_cache_finalize(void);
/* Drops every record: used when the registration hooks change (and only
 * then: it starts a new hooks epoch). Unreferenced records are deregistered
 * now; referenced ones leave the cache at once and their last put frees them
 * without calling a hook: the hooks that registered them are being replaced
 * and the new ones never saw their keys (the driver that owns the keys drops
 * them when it closes). */
void hc_mem_reg_cache_flush(void);
void hc_mem_reg_cache_stats_get(hc_mem_stats_t *s);

/* For the memory hooks' wrappers: [addr, addr+len) is about to be unmapped
 * or to lose its pages; every record overlapping it leaves the cache (a
 * referenced one is deregistered by its last put, others by the next cache
 * call). Safe under hc_mem_g.lock and in a signal handler that interrupted
 * the cache (the range is then processed when the cache unlocks); never
 * calls a registration hook, never allocates. */
void hc_mem_reg_cache_unmapped(const void *addr, size_t len);
/* Records the wrappers must watch: the number of cached records while the
 * hooks are on, else 0. The wrappers' fast path reads it (relaxed) and does
 * nothing more when it is 0. */
extern atomic_size_t hc_mem_reg_cache_watched;

/* Registers / deregisters one record through the installed hooks (callers
 * hold hc_mem_g.lock). */
hcomm_status_t hc_mem_region_reg_locked(hc_mem_region_t *r);
void hc_mem_region_dereg_locked(hc_mem_region_t *r);

#endif /* HC_MEM_INT_H */
