/*
 * mem/ lifecycle: hc_mem_init reads the knobs,
 * reserves the pool's virtual range (PROT_NONE, no memory behind it) and
 * builds the pool; hc_mem_finalize undoes it. Also the counters' snapshot and
 * their printout.
 */
#include "mem/mem_int.h"
#include "base/config.h"

#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

hc_mem_global_t hc_mem_g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .rw = PTHREAD_RWLOCK_INITIALIZER,
};

static hcomm_status_t hc_mem_parse_hugepage_size(size_t *size_p)
{
    size_t v;
    if (!hc_cfg.hugepage_size || !hc_config_parse_size(hc_cfg.hugepage_size, &v) ||
        (v != ((size_t)2 << 20) && v != ((size_t)1 << 30)))
        return hc_error(HCOMM_ERR_INVALID,
                        "hc_mem_init: HCOMM_HUGEPAGE_SIZE=\"%s\" is not 2M or 1G",
                        hc_cfg.hugepage_size ? hc_cfg.hugepage_size : "");
    *size_p = v;
    return HCOMM_OK;
}

/* Locked memory matters only once a driver pins memory for a NIC (verbs,
 * mlx5, DPDK's DMA map count it against RLIMIT_MEMLOCK): until then an mlock
 * that fails costs nothing a job can see, and is only counted. */
static atomic_bool hc_mem_lock_needed, hc_mem_lock_warned;

static bool hc_mem_memlock_low(size_t want, unsigned long long *limit_kb_p)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
        return false;
    *limit_kb_p = (unsigned long long)rl.rlim_cur >> 10;
    return true;
}

/* One warning per process, at the job's level (hc_log_warn_job: rank 0 warns,
 * the other ranks log it at info), naming who needs the memory locked. */
static void hc_mem_memlock_warn(const char *who, const char *what)
{
    if (atomic_exchange(&hc_mem_lock_warned, true)) return;
    hc_log_warn_job("mem: %s; %s registers memory with its NIC, which locks it: registrations "
                    "past the limit fail (and fall back or fail the call). Raise the limit "
                    "(`ulimit -l unlimited`; memlock in /etc/security/limits.conf; docker "
                    "--ulimit memlock=-1): docs/install.md, \"Locked memory\".",
                    what, who);
}

void hc_mem_memlock_needed(const char *who)
{
    atomic_store(&hc_mem_lock_needed, true);
    unsigned long long kb = 0;
    char what[200];
    size_t want = hc_cfg.mem_pool_max;
    uint64_t failed = atomic_load(&hc_mem_g.mlock_failures);
    if (hc_mem_memlock_low(want, &kb))
        snprintf(what, sizeof(what),
                 "RLIMIT_MEMLOCK (ulimit -l) is %llu kB, below the pool limit "
                 "HCOMM_MEM_POOL_MAX_SIZE=%zu kB",
                 kb, want >> 10);
    else if (failed)
        snprintf(what, sizeof(what), "%llu mlock calls of the pool failed",
                 (unsigned long long)failed);
    else
        return;
    hc_mem_memlock_warn(who, what);
}

void hc_mem_mlock_failed(size_t bytes, int err)
{
    if (!atomic_load(&hc_mem_lock_needed)) {
        hc_log_debug("mem: mlock of %zu bytes failed (%s); no driver here registers memory: "
                     "counted only",
                     bytes, strerror(err));
        return;
    }
    char what[160];
    snprintf(what, sizeof(what), "mlock of %zu bytes failed (%s)", bytes, strerror(err));
    hc_mem_memlock_warn("a driver of this job", what);
}

/* Address space the process maps now (VmSize), 0 if unknown. */
static size_t hc_mem_vm_size(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%lu", &pages) != 1)
        pages = 0;
    fclose(f);
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

hcomm_status_t hc_mem_reserve_error(int err, const char *what, size_t bytes)
{
    char hint[320];
    struct rlimit rl;
    size_t max = hc_cfg.mem_pool_max;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        size_t limit = (size_t)rl.rlim_cur, vm = hc_mem_vm_size();
        size_t room = limit > vm ? limit - vm : 0;
        /* Half the room: the pool's range plus its tables, and the rest of
         * init (drivers' segments, threads' stacks) must fit. */
        size_t suggest = (room / 2) & ~(((size_t)2 << 20) - 1);
        int n = snprintf(hint, sizeof(hint),
                         "the address-space limit RLIMIT_AS (ulimit -v) is %zu bytes (%zu kB), "
                         "%zu of them mapped already; ",
                         limit, limit >> 10, vm);
        if (suggest >= ((size_t)2 << 20) && suggest < max)
            snprintf(hint + n, sizeof(hint) - (size_t)n,
                     "set HCOMM_MEM_POOL_MAX_SIZE=%zuM (now %zu bytes)%s or raise the limit",
                     suggest >> 20, max,
                     suggest < hc_cfg.mem_pool_initial ? " and HCOMM_MEM_POOL_INITIAL_SIZE to "
                                                         "at most as much,"
                                                       : "");
        else
            snprintf(hint + n, sizeof(hint) - (size_t)n,
                     "raise the limit (`ulimit -v unlimited`): it leaves no room for a pool "
                     "(HCOMM_MEM_POOL_MAX_SIZE=%zu)",
                     max);
    } else {
        snprintf(hint, sizeof(hint),
                 "no address-space limit (ulimit -v) is set; lower HCOMM_MEM_POOL_MAX_SIZE (now "
                 "%zu bytes) or look at vm.overcommit_memory and vm.max_map_count",
                 max);
    }
    return hc_error(HCOMM_ERR_NO_MEMORY, "hc_mem_init: reserving %zu bytes of address space for %s "
                                         "failed (%s): %s",
                    bytes, what, strerror(err), hint);
}

/* Reserves the pool's range, aligned to the hugepage size so that every pool
 * region can be mapped on hugepages at a fixed address. */
static hcomm_status_t hc_mem_reserve(size_t bytes)
{
    size_t align = HC_MAX(hc_mem_g.hugepage_size, HC_MEM_GRANULE);
    bytes = HC_ALIGN_UP(bytes, align);
    size_t len = bytes + align;
    uint8_t *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return hc_mem_reserve_error(errno, "the pool", len);
    uint8_t *base = (uint8_t *)HC_ALIGN_UP((uintptr_t)p, align);
    if (base > p) munmap(p, (size_t)(base - p));
    if (base + bytes < p + len) munmap(base + bytes, (size_t)(p + len - (base + bytes)));
    hc_mem_g.granules = calloc(bytes >> HC_MEM_GRANULE_SHIFT, sizeof(hc_mem_granule_t));
    if (!hc_mem_g.granules) {
        munmap(base, bytes);
        return hc_error(HCOMM_ERR_NO_MEMORY, "hc_mem_init: pool lookup table");
    }
    hc_mem_g.pool_base = base;
    hc_mem_g.pool_reserved = bytes;
    return HCOMM_OK;
}

static int hc_mem_local_size;

void hc_mem_set_local_size(int local_size)
{
    hc_mem_local_size = local_size;
}

/* HCOMM_MEM_POOL_INITIAL_SIZE capped by this rank's share of
 * HCOMM_MEM_POOL_NODE_INITIAL_SIZE (whole hugepages, at least one). */
static size_t hc_mem_initial_for(size_t hp)
{
    size_t want = hc_cfg.mem_pool_initial, node = hc_cfg.mem_pool_node_initial;
    if (!want || !node || hc_mem_local_size <= 1) return want;
    size_t share = node / (size_t)hc_mem_local_size / hp * hp;
    if (share < hp) share = hp;
    return HC_MIN(want, share);
}

size_t hc_mem_pool_initial_size(void)
{
    return hc_mem_g.pool_initial;
}

hcomm_status_t hc_mem_init(void)
{
    hcomm_status_t st;
    if (hc_mem_g.initialized) return HCOMM_OK;
    size_t hp = 0;
    st = hc_mem_parse_hugepage_size(&hp);
    if (st != HCOMM_OK) return st;
    hc_mem_g.pool_initial = hc_mem_initial_for(hp);
    if (hc_mem_g.pool_initial < hc_cfg.mem_pool_initial)
        hc_log_debug("mem: initial pool %zu bytes (HCOMM_MEM_POOL_INITIAL_SIZE=%zu, "
                     "HCOMM_MEM_POOL_NODE_INITIAL_SIZE=%zu over %d local ranks)",
                     hc_mem_g.pool_initial, hc_cfg.mem_pool_initial,
                     hc_cfg.mem_pool_node_initial, hc_mem_local_size);
    if (hc_cfg.mem_pool_bucket_bits < 1 || hc_cfg.mem_pool_bucket_bits > 5)
        return hc_error(HCOMM_ERR_INVALID,
                        "hc_mem_init: HCOMM_MEM_POOL_BUCKET_BITS=%lld is not in 1..5",
                        (long long)hc_cfg.mem_pool_bucket_bits);
    if (hc_cfg.mem_pool_max < hc_cfg.mem_pool_initial)
        return hc_error(HCOMM_ERR_INVALID,
                        "hc_mem_init: HCOMM_MEM_POOL_MAX_SIZE=%zu is below "
                        "HCOMM_MEM_POOL_INITIAL_SIZE=%zu",
                        hc_cfg.mem_pool_max, hc_cfg.mem_pool_initial);
    if (hc_cfg.mem_pool_max > ((size_t)1 << 44))
        return hc_error(HCOMM_ERR_INVALID, "hc_mem_init: HCOMM_MEM_POOL_MAX_SIZE=%zu is above 16T",
                        hc_cfg.mem_pool_max);
    hc_mem_g.hugepage_size = hp;
    hc_mem_g.base_page = (size_t)sysconf(_SC_PAGESIZE);
    hc_mem_g.numa_ok = numa_available() >= 0;
    if (!hc_mem_g.numa_ok)
        hc_log_debug("mem: libnuma reports no NUMA support; regions are not bound");
    atomic_store(&hc_mem_g.regions_created, 0);
    atomic_store(&hc_mem_g.huge_fallbacks, 0);
    atomic_store(&hc_mem_g.mlock_failures, 0);
    atomic_store(&hc_mem_g.numa_bind_failures, 0);
    atomic_store(&hc_mem_g.reg_failures, 0);

    /* The pool can exceed its limit by rounding to a hugepage (1G pages). */
    st = hc_mem_reserve(HC_MAX(hc_cfg.mem_pool_max, HC_ALIGN_UP(hc_mem_g.pool_initial, hp)));
    if (st != HCOMM_OK) return st;
    hc_mem_g.initialized = true;
    hc_mem_reg_cache_init();
    st = hc_mem_pool_init();
    if (st != HCOMM_OK) {
        hc_mem_finalize();
        return st;
    }
    return HCOMM_OK;
}

void hc_mem_finalize(void)
{
    if (!hc_mem_g.initialized) return;
    hc_mem_reg_cache_finalize();
    pthread_mutex_lock(&hc_mem_g.lock);
    for (uint32_t i = 0; i < HC_MEM_REGIONS_MAX; i++) {
        hc_mem_region_t *r = hc_mem_g.slots[i];
        if (r && r->kind != HC_MEM_KIND_POOL && r->kind != HC_MEM_KIND_LARGE &&
            r->kind != HC_MEM_KIND_FALLBACK)
            hc_log_debug("mem: region %u (%p, %zu bytes) still alive at finalize", r->id, r->base,
                         r->size);
    }
    pthread_mutex_unlock(&hc_mem_g.lock);
    hc_mem_pool_finalize();
    for (uint32_t i = 0; i < HC_MEM_REGIONS_MAX; i++)
        if (hc_mem_g.slots[i]) hc_mem_region_destroy(hc_mem_g.slots[i]);
    munmap(hc_mem_g.pool_base, hc_mem_g.pool_reserved);
    free(hc_mem_g.granules);
    free(hc_mem_g.sorted);
    hc_mem_g.granules = NULL;
    hc_mem_g.sorted = NULL;
    hc_mem_g.nsorted = hc_mem_g.sorted_cap = 0;
    hc_mem_g.pool_base = NULL;
    hc_mem_g.pool_reserved = 0;
    hc_mem_g.initialized = false;
    atomic_store(&hc_mem_lock_needed, false); /* the drivers are closed; warned stays */
}

void hc_mem_stats_get(hc_mem_stats_t *s)
{
    memset(s, 0, sizeof(*s));
    s->regions_created = atomic_load(&hc_mem_g.regions_created);
    s->huge_fallbacks = atomic_load(&hc_mem_g.huge_fallbacks);
    s->mlock_failures = atomic_load(&hc_mem_g.mlock_failures);
    s->numa_bind_failures = atomic_load(&hc_mem_g.numa_bind_failures);
    s->reg_failures = atomic_load(&hc_mem_g.reg_failures);
    s->bytes_huge = atomic_load(&hc_mem_g.bytes_huge);
    s->bytes_regular = atomic_load(&hc_mem_g.bytes_regular);
    hc_mem_pool_stats_get(s);
    hc_mem_reg_cache_stats_get(s);
}

void hc_mem_stats_print(void (*line)(const char *text, void *arg), void *arg)
{
    hc_mem_stats_t s;
    char buf[256];
    hc_mem_stats_get(&s);
    snprintf(buf, sizeof(buf),
             "mem: regions %llu, huge %llu B, regular %llu B, hugepage fallbacks %llu, mlock "
             "failures %llu, numa bind failures %llu, reg failures %llu",
             (unsigned long long)s.regions_created, (unsigned long long)s.bytes_huge,
             (unsigned long long)s.bytes_regular, (unsigned long long)s.huge_fallbacks,
             (unsigned long long)s.mlock_failures, (unsigned long long)s.numa_bind_failures,
             (unsigned long long)s.reg_failures);
    line(buf, arg);
    snprintf(buf, sizeof(buf),
             "mem: pool %zu of %zu bytes mapped; large allocs %llu frees %llu failures %llu; "
             "fallback frees %llu; invalid frees %llu",
             s.pool_bytes, s.pool_max, (unsigned long long)s.large_allocs,
             (unsigned long long)s.large_frees, (unsigned long long)s.large_failures,
             (unsigned long long)s.fallback_frees, (unsigned long long)s.invalid_frees);
    line(buf, arg);
    snprintf(buf, sizeof(buf),
             "mem: reg cache hits %llu misses %llu evictions %llu uncached %llu, %llu entries, "
             "%llu bytes",
             (unsigned long long)s.cache_hits, (unsigned long long)s.cache_misses,
             (unsigned long long)s.cache_evictions, (unsigned long long)s.cache_uncached,
             (unsigned long long)s.cache_entries, (unsigned long long)s.cache_bytes);
    line(buf, arg);
    for (unsigned i = 0; i < s.nclasses; i++) {
        const hc_mem_class_stats_t *c = &s.cls[i];
        snprintf(buf, sizeof(buf),
                 "mem: class %7zu B: allocs %llu frees %llu in use %llu hwm %llu failures %llu "
                 "fallbacks %llu waits %llu, huge %llu B regular %llu B",
                 c->block_size, (unsigned long long)c->allocs, (unsigned long long)c->frees,
                 (unsigned long long)c->in_use, (unsigned long long)c->hwm,
                 (unsigned long long)c->failures, (unsigned long long)c->fallbacks,
                 (unsigned long long)c->waits, (unsigned long long)c->bytes_huge,
                 (unsigned long long)c->bytes_regular);
        line(buf, arg);
    }
}
