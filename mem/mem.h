/*
 * mem/: every buffer a peer or a NIC touches. Regions (hugepage, NUMA-bound,
 * locked; shareable between the ranks of a node through a memfd), size-class
 * pools on top of them with tagged lock-free free lists, an O(1) pointer ->
 * region lookup for the hot path, and a registration cache for user memory.
 *
 * mem/ sits below drv/: it never calls a driver. The core installs
 * registration hooks (hc_mem_set_reg_hooks) so that every region is
 * registered with every open driver exactly once, when it is created.
 */
#ifndef HC_MEM_H
#define HC_MEM_H

#include "base/hc_base.h"
#include "gpu/gpu.h"

#define HC_MEM_MAX_KEYS HC_MAX_DRIVERS /* one registration key per open driver */

enum {
    HC_MEM_SHARED = 1u << 0, /* backed by a memfd other local ranks can map */
    HC_MEM_NO_REG = 1u << 1, /* do not register with drivers (control memory) */
    HC_MEM_USER = 1u << 2,   /* user memory: a registration-cache record */
};

typedef struct hc_mem_region {
    void *base;
    size_t size;      /* bytes mapped (a multiple of page_size) */
    size_t page_size; /* 2M / 1G when on hugepages, else the base page size */
    int fd;           /* memfd for HC_MEM_SHARED regions, else -1 */
    int numa_node;    /* node the pages are bound to, -1 if unbound */
    unsigned flags;
    bool huge;       /* on hugepages */
    bool owner;      /* created here (else mapped from a peer's fd) */
    uint32_t id;     /* index in the region table */
    uint32_t kind;   /* internal: pool chunk, large/fallback allocation, user, peer, cache */
    bool registered; /* the reg hook accepted it (keys[] are valid) */
    uint64_t keys[HC_MEM_MAX_KEYS]; /* driver registration keys, by driver index */
    /* Device memory (registration-cache records only; else HC_MEM_HOST):
     * the whole allocation, its device and id, and while the reg hook runs
     * the GPU layer's dmabuf fd of it (-1 otherwise). */
    hc_mem_type_t mem_type;
    int device;
    uint64_t alloc_id;
    int dmabuf_fd;
    uint64_t dmabuf_offset;
} hc_mem_region_t;

/* Reads HCOMM_MEM_* / HCOMM_HUGEPAGE_SIZE from hc_cfg, creates the initial
 * pool. Idempotent per init/finalize cycle. */
hcomm_status_t hc_mem_init(void);
/* Before hc_mem_init: how many ranks of this job share this host's memory
 * (the launcher's local size; <= 0 unknown). The initial pool is then at
 * most HCOMM_MEM_POOL_NODE_INITIAL_SIZE / local_size: every rank faults its
 * initial pool in at init, and 256 ranks x 64 MiB made init take 56 s on a
 * 2-core host instead of 9 (docs/mem.md). */
void hc_mem_set_local_size(int local_size);
/* The initial pool size hc_mem_init uses (after the node's cap). */
size_t hc_mem_pool_initial_size(void);
void hc_mem_finalize(void);

/* Locked memory (docs/install.md, "Locked memory"): who (a driver's name)
 * registers memory with a NIC, so RLIMIT_MEMLOCK matters from now on until
 * hc_mem_finalize. Warns, once per process at the job's level (rank 0 warns,
 * the others log at info), when the limit is below HCOMM_MEM_POOL_MAX_SIZE or
 * an mlock of the pool failed already. Without such a driver nothing about
 * locked memory is logged above debug. */
void hc_mem_memlock_needed(const char *who);
/* A region's mlock failed (counted by the caller): warned as above once a
 * driver needs locked memory, else logged at debug. */
void hc_mem_mlock_failed(size_t bytes, int err);

/* Registration hooks: called for every region created (and once for every
 * existing region when the hooks are installed), and before it is destroyed. */
typedef hcomm_status_t (*hc_mem_reg_fn)(void *arg, hc_mem_region_t *region);
typedef void (*hc_mem_dereg_fn)(void *arg, hc_mem_region_t *region);
void hc_mem_set_reg_hooks(hc_mem_reg_fn reg, hc_mem_dereg_fn dereg, void *arg);

/* The NUMA node of the CPU this thread runs on (-1: unknown, or libnuma
 * reports no NUMA support). */
int hc_mem_my_node(void);

/* A new region of at least size bytes: hugepages when available (else regular
 * pages, a one-time warning and a counter), bound to numa_node (-1: this
 * rank's node), mlocked. name labels the memfd (/proc/PID/fd). */
hcomm_status_t hc_mem_region_create(size_t size, unsigned flags, int numa_node, const char *name,
                                    hc_mem_region_t **region_p);
/* Maps a peer's HC_MEM_SHARED region from its memfd (the fd is dup'ed; the
 * caller keeps its own). size may be less than the memfd's size, never more.
 * Attached regions are a peer's memory: they are found by lookup but not
 * registered with drivers (their owner registers them). */
hcomm_status_t hc_mem_region_attach(int fd, size_t size, hc_mem_region_t **region_p);
void hc_mem_region_destroy(hc_mem_region_t *region);

/* Region holding [ptr, ptr+len) and the offset of ptr in it, or NULL. O(1)
 * for pool memory. */
hc_mem_region_t *hc_mem_region_lookup(const void *ptr, size_t len, size_t *offset_p);

/* Pool memory for users (hcomm_mem_alloc) and for the library. 64-byte
 * aligned. hc_mem_free fails with ERR_INVALID for a pointer it did not hand
 * out. */
hcomm_status_t hc_mem_alloc(size_t bytes, void **ptr_p);
hcomm_status_t hc_mem_free(void *ptr);

/* Registration cache for user memory (not pool memory): a region-like
 * record covering [ptr, ptr+len) rounded out to pages, registered with every
 * driver (flags HC_MEM_USER, kind HC_MEM_KIND_CACHE).
 *
 * get: memory of one of our own regions (pool, large, user; not attached)
 * returns that region, without a reference. Otherwise it takes a reference on
 * the cached record covering the range, or registers a new one: cached (LRU,
 * bounded by HCOMM_REG_CACHE_MAX_ENTRIES / HCOMM_REG_CACHE_MAX_BYTES, only
 * unreferenced records are evicted) or, when the range exceeds the byte limit
 * or referenced records fill the cache, private to this reference. Errors:
 * ERR_INVALID (NULL ptr or region_p, len 0 or wrapping), ERR_NOT_INITIALIZED,
 * ERR_NO_MEMORY, or the registration hook's status.
 *
 * put: drops the reference of one get; the record's keys stay valid until
 * then, whatever happens to the cache meanwhile (invalidate, eviction, flush,
 * an intercepted munmap or free: the record is unlinked at once and
 * deregistered by the last put). A region of our own or NULL: nothing.
 *
 * invalidate: every record overlapping [ptr, ptr+len) leaves the cache (what
 * hcomm_mem_deregister does). With HCOMM_MEM_HOOKS=1 (default) memory given
 * back through munmap, free and the like is dropped by itself; with 0 only
 * invalidate protects against a stale registration of reused memory.
 *
 * Thread-safe. Not to be called from a registration hook. */
hcomm_status_t hc_mem_reg_cache_get(const void *ptr, size_t len, hc_mem_region_t **region_p);
/* The same for memory of any type (attr: hc_gpu_mem_type's answer for the
 * range; NULL or HOST: hc_mem_reg_cache_get). Device memory is keyed on
 * (range, type, allocation id) and a record covers the whole allocation,
 * registered by dmabuf (the GPU layer's dmabuf_fd) with the drivers that
 * move device memory (the core's hook decides which). A record dies when
 * the GPU layer reports its range freed (hc_gpu_range_freed), and a record
 * of another allocation id is never found: a freed and re-used address
 * gets a new registration. */
hcomm_status_t hc_mem_reg_cache_get_typed(const void *ptr, size_t len, const hc_mem_attr_t *attr,
                                          hc_mem_region_t **region_p);
void hc_mem_reg_cache_put(hc_mem_region_t *region);
void hc_mem_reg_cache_invalidate(const void *ptr, size_t len);

/* Counters, printed by hcomm_info and at finalize with HCOMM_LOG=info. */
void hc_mem_stats_print(void (*line)(const char *text, void *arg), void *arg);

#define HC_MEM_CLASSES_MAX 12
typedef struct {
    size_t block_size;
    uint64_t allocs, frees;
    uint64_t failures;    /* allocations that returned an error */
    uint64_t fallbacks;   /* served by a plain mapping because the pool hit its limit */
    uint64_t waits;       /* allocations that found the class empty and took the growth lock */
    uint64_t in_use, hwm; /* blocks handed out now / at most */
    uint64_t bytes_huge, bytes_regular; /* slab bytes of this class by page kind */
} hc_mem_class_stats_t;

typedef struct {
    unsigned nclasses;
    hc_mem_class_stats_t cls[HC_MEM_CLASSES_MAX];
    uint64_t large_allocs, large_frees, large_failures; /* > largest class: own region */
    uint64_t fallback_frees;     /* frees of pool-limit fallback allocations */
    uint64_t invalid_frees;      /* rejected hc_mem_free calls */
    size_t pool_bytes, pool_max; /* pool regions mapped / limit */
    uint64_t regions_created, huge_fallbacks, mlock_failures, numa_bind_failures, reg_failures;
    uint64_t bytes_huge, bytes_regular; /* all regions created here, by page kind */
    uint64_t cache_hits, cache_misses, cache_evictions, cache_entries, cache_bytes;
    uint64_t cache_uncached; /* private registrations: over the byte limit, or no room */
} hc_mem_stats_t;

/* Snapshot of the counters (for tests and hcomm_info). */
void hc_mem_stats_get(hc_mem_stats_t *stats);

#endif /* HC_MEM_H */
