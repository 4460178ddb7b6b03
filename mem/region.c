/*
 * Regions: the mappings every other part of mem/ is built on.
 *
 * A region is tried on hugepages first (memfd with MFD_HUGETLB for shared
 * regions, MAP_HUGETLB for private ones), bound to a NUMA node with mbind()
 * *before* any page is touched (first touch decides placement), then faulted
 * in with MADV_POPULATE_WRITE. That madvise reports a missing hugepage as an
 * error; touching a hugetlb mapping with no free page would instead SIGBUS
 * (the reservation done at mmap time is global, not per node). Where the
 * kernel lacks MADV_POPULATE_WRITE we check free_hugepages in sysfs first.
 * On failure we fall back to regular pages, warn once per process with the
 * command that fixes it, and count every fallback.
 *
 * The region table: every live region has a slot (its id). Pool regions live
 * in one reserved virtual range, so their lookup is a shift into a granule
 * table (2 MiB per entry); other regions sit in an array sorted by address,
 * searched by bisection under a read lock.
 */
#include "mem/mem_int.h"

#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif
#ifndef MFD_HUGE_SHIFT
#define MFD_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif

static atomic_bool hc_mem_warned_huge;

static unsigned hc_mem_log2(size_t v)
{
    return (unsigned)__builtin_ctzll((unsigned long long)v);
}

/* Free hugepages of the configured size, from sysfs (-1 if unknown). */
static long hc_mem_huge_free(void)
{
    char path[128];
    snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%zukB/free_hugepages",
             hc_mem_g.hugepage_size >> 10);
    long n = -1;
    hc_read_long(path, &n);
    return n;
}

int hc_mem_my_node(void)
{
    if (!hc_mem_g.numa_ok) return -1;
    int cpu = sched_getcpu();
    return cpu >= 0 ? numa_node_of_cpu(cpu) : -1;
}

static int hc_mem_node_resolve(int numa_node)
{
    if (!hc_mem_g.numa_ok) return -1;
    return numa_node >= 0 ? numa_node : hc_mem_my_node();
}

static void hc_mem_bind(void *addr, size_t len, int node)
{
    if (node < 0) {
        hc_log_debug("mem: region %p not NUMA-bound (libnuma reports no NUMA support)", addr);
        return;
    }
    unsigned long mask[16] = {0};
    if ((size_t)node >= sizeof(mask) * 8) return;
    mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
    if (mbind(addr, len, MPOL_BIND, mask, sizeof(mask) * 8, 0) != 0) {
        atomic_fetch_add(&hc_mem_g.numa_bind_failures, 1);
        hc_log_warn("mem: mbind(%p, %zu, node %d) failed: %s; pages go where first touched", addr,
                    len, node, strerror(errno));
    }
}

/* Faults every page in. Returns 0 or an errno; with hugepages a failure means
 * no free hugepage (ENOMEM / EFAULT), never a SIGBUS. */
static int hc_mem_populate(void *addr, size_t len, bool huge)
{
    if (madvise(addr, len, MADV_POPULATE_WRITE) == 0) return 0;
    int err = errno;
    if (err != EINVAL) return err;
    /* Kernel older than 5.14: touch the pages by hand, but only when the
     * hugepages are known to be there (else the touch would SIGBUS). */
    if (huge) {
        long free_pages = hc_mem_huge_free();
        if (free_pages < 0 || (size_t)free_pages < len / hc_mem_g.hugepage_size) return ENOMEM;
    }
    for (size_t off = 0; off < len; off += huge ? hc_mem_g.hugepage_size : hc_mem_g.base_page)
        ((volatile char *)addr)[off] = 0;
    return 0;
}

/* One attempt at a mapping: huge or regular pages, at addr (MAP_FIXED) or
 * anywhere. On success *addr_p / *fd_p are set. */
static int hc_mem_map_try(size_t len, unsigned flags, int node, const char *name, void *addr,
                          bool huge, void **addr_p, int *fd_p)
{
    int fd = -1;
    int fixed = addr ? MAP_FIXED : 0;
    unsigned hshift = hc_mem_log2(hc_mem_g.hugepage_size);
    void *p;
    if (flags & HC_MEM_SHARED) {
        unsigned mfd = MFD_CLOEXEC | (huge ? MFD_HUGETLB | (hshift << MFD_HUGE_SHIFT) : 0);
        fd = memfd_create(name, mfd);
        if (fd < 0) return errno;
        if (ftruncate(fd, (off_t)len) != 0) {
            int err = errno;
            close(fd);
            return err;
        }
        p = mmap(addr, len, PROT_READ | PROT_WRITE, MAP_SHARED | fixed, fd, 0);
    } else {
        int mf = MAP_PRIVATE | MAP_ANONYMOUS | fixed;
        if (huge) mf |= MAP_HUGETLB | (int)(hshift << MAP_HUGE_SHIFT);
        p = mmap(addr, len, PROT_READ | PROT_WRITE, mf, -1, 0);
    }
    if (p == MAP_FAILED) {
        int err = errno;
        if (fd >= 0) close(fd);
        return err;
    }
    hc_mem_bind(p, len, node);
    int err = hc_mem_populate(p, len, huge);
    if (err) {
        /* Give the range back; a fixed range goes back to the reservation. */
        if (addr)
            mmap(addr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
                 0);
        else
            munmap(p, len);
        if (fd >= 0) close(fd);
        return err;
    }
    *addr_p = p;
    *fd_p = fd;
    return 0;
}

static void hc_mem_warn_no_huge(size_t len, int err)
{
    atomic_fetch_add(&hc_mem_g.huge_fallbacks, 1);
    if (!atomic_exchange(&hc_mem_warned_huge, true))
        hc_log_warn("mem: no %zu kB hugepages for a %zu-byte region (%s): using regular pages, "
                    "which are slower for NICs. Reserve hugepages with `hcomm-hugepages -n N` "
                    "(hugepages/ in the source tree) or `echo N > /proc/sys/vm/nr_hugepages` as "
                    "root. Further fallbacks are only counted.",
                    hc_mem_g.hugepage_size >> 10, len, strerror(err));
}

/* ---- region table ------------------------------------------------------- */

static hcomm_status_t hc_mem_table_insert_locked(hc_mem_region_t *r)
{
    uint32_t id;
    for (id = 0; id < HC_MEM_REGIONS_MAX && hc_mem_g.slots[id]; id++)
        ;
    if (id == HC_MEM_REGIONS_MAX)
        return hc_error(HCOMM_ERR_NO_MEMORY, "hc_mem_region_create: region table full (%d regions)",
                        HC_MEM_REGIONS_MAX);
    if (r->kind != HC_MEM_KIND_POOL) {
        pthread_rwlock_wrlock(&hc_mem_g.rw);
        if (hc_mem_g.nsorted == hc_mem_g.sorted_cap) {
            size_t cap = hc_mem_g.sorted_cap ? 2 * hc_mem_g.sorted_cap : 64;
            hc_mem_region_t **n = realloc(hc_mem_g.sorted, cap * sizeof(*n));
            if (!n) {
                pthread_rwlock_unlock(&hc_mem_g.rw);
                return hc_error(HCOMM_ERR_NO_MEMORY, "hc_mem_region_create: region table");
            }
            hc_mem_g.sorted = n;
            hc_mem_g.sorted_cap = cap;
        }
        size_t i = hc_mem_g.nsorted;
        while (i > 0 && (uintptr_t)hc_mem_g.sorted[i - 1]->base > (uintptr_t)r->base) {
            hc_mem_g.sorted[i] = hc_mem_g.sorted[i - 1];
            i--;
        }
        hc_mem_g.sorted[i] = r;
        hc_mem_g.nsorted++;
        pthread_rwlock_unlock(&hc_mem_g.rw);
    } else {
        size_t first = (size_t)((uint8_t *)r->base - hc_mem_g.pool_base) >> HC_MEM_GRANULE_SHIFT;
        for (size_t g = first; g < first + (r->size >> HC_MEM_GRANULE_SHIFT); g++)
            atomic_store_explicit(&hc_mem_g.granules[g].region, r, memory_order_release);
    }
    r->id = id;
    hc_mem_g.slots[id] = r;
    hc_mem_g.nslots_used++;
    return HCOMM_OK;
}

static void hc_mem_table_remove_locked(hc_mem_region_t *r)
{
    if (r->kind != HC_MEM_KIND_POOL) {
        pthread_rwlock_wrlock(&hc_mem_g.rw);
        for (size_t i = 0; i < hc_mem_g.nsorted; i++) {
            if (hc_mem_g.sorted[i] == r) {
                memmove(&hc_mem_g.sorted[i], &hc_mem_g.sorted[i + 1],
                        (hc_mem_g.nsorted - i - 1) * sizeof(r));
                hc_mem_g.nsorted--;
                break;
            }
        }
        pthread_rwlock_unlock(&hc_mem_g.rw);
    } else {
        size_t first = (size_t)((uint8_t *)r->base - hc_mem_g.pool_base) >> HC_MEM_GRANULE_SHIFT;
        for (size_t g = first; g < first + (r->size >> HC_MEM_GRANULE_SHIFT); g++)
            atomic_store_explicit(&hc_mem_g.granules[g].region, NULL, memory_order_release);
    }
    hc_mem_g.slots[r->id] = NULL;
    hc_mem_g.nslots_used--;
}

hcomm_status_t hc_mem_region_reg_locked(hc_mem_region_t *r)
{
    if (!hc_mem_g.reg || (r->flags & HC_MEM_NO_REG) || r->kind == HC_MEM_KIND_ATTACHED ||
        r->registered)
        return HCOMM_OK;
    hcomm_status_t st = hc_mem_g.reg(hc_mem_g.reg_arg, r);
    if (st != HCOMM_OK) {
        atomic_fetch_add(&hc_mem_g.reg_failures, 1);
        return st;
    }
    r->registered = true;
    return HCOMM_OK;
}

void hc_mem_region_dereg_locked(hc_mem_region_t *r)
{
    if (!r->registered) return;
    if (hc_mem_g.dereg) hc_mem_g.dereg(hc_mem_g.reg_arg, r);
    r->registered = false;
    memset(r->keys, 0, sizeof(r->keys));
}

void hc_mem_set_reg_hooks(hc_mem_reg_fn reg, hc_mem_dereg_fn dereg, void *arg)
{
    /* Cache records were registered with the old hooks: drop them first. */
    hc_mem_reg_cache_flush();
    pthread_mutex_lock(&hc_mem_g.lock);
    for (uint32_t i = 0; i < HC_MEM_REGIONS_MAX; i++)
        if (hc_mem_g.slots[i]) hc_mem_region_dereg_locked(hc_mem_g.slots[i]);
    hc_mem_g.reg = reg;
    hc_mem_g.dereg = dereg;
    hc_mem_g.reg_arg = arg;
    for (uint32_t i = 0; i < HC_MEM_REGIONS_MAX; i++) {
        hc_mem_region_t *r = hc_mem_g.slots[i];
        if (r && hc_mem_region_reg_locked(r) != HCOMM_OK)
            hc_log_warn("mem: registering existing region %u (%p, %zu bytes) failed: %s", r->id,
                        r->base, r->size, hc_error_last());
    }
    pthread_mutex_unlock(&hc_mem_g.lock);
}

/* ---- create / attach / destroy ------------------------------------------ */

static hcomm_status_t hc_mem_region_check_args(size_t size, unsigned flags, int numa_node,
                                               hc_mem_region_t **region_p)
{
    if (!hc_mem_g.initialized)
        return hc_error(HCOMM_ERR_NOT_INITIALIZED, "hc_mem_region_create: hc_mem_init not called");
    if (size == 0 || size > ((size_t)1 << 46))
        return hc_error(HCOMM_ERR_INVALID, "hc_mem_region_create: argument size is bad (%zu)",
                        size);
    if (flags & ~(unsigned)(HC_MEM_SHARED | HC_MEM_NO_REG | HC_MEM_INT_PLAIN))
        return hc_error(HCOMM_ERR_INVALID, "hc_mem_region_create: argument flags is bad (0x%x)",
                        flags);
    if (numa_node < -1 || (hc_mem_g.numa_ok && numa_node > numa_max_node()))
        return hc_error(HCOMM_ERR_INVALID,
                        "hc_mem_region_create: argument numa_node is bad (%d, max %d)", numa_node,
                        hc_mem_g.numa_ok ? numa_max_node() : -1);
    if (!region_p)
        return hc_error(HCOMM_ERR_INVALID, "hc_mem_region_create: argument region_p is NULL");
    return HCOMM_OK;
}

/* Maps r's pages: hugepages first (not for HC_MEM_INT_PLAIN), else base
 * pages after a warning; sets r's base, fd, size, page size, node and
 * flags. */
static hcomm_status_t hc_mem_region_map(hc_mem_region_t *r, size_t size, unsigned flags, int node,
                                        const char *name, void *addr)
{
    size_t hlen = HC_ALIGN_UP(size, hc_mem_g.hugepage_size);
    void *p = NULL;
    int fd = -1;
    /* A fixed (pool) address must be hugepage-aligned for the huge attempt. */
    bool can_huge = !(flags & HC_MEM_INT_PLAIN) &&
                    (!addr || ((uintptr_t)addr % hc_mem_g.hugepage_size == 0 && hlen == size));
    int err = can_huge ? hc_mem_map_try(hlen, flags, node, name, addr, true, &p, &fd) : EINVAL;
    flags &= ~HC_MEM_INT_PLAIN;
    if (err == 0) {
        r->size = hlen;
        r->page_size = hc_mem_g.hugepage_size;
        r->huge = true;
    } else {
        if (can_huge) hc_mem_warn_no_huge(hlen, err);
        size_t len = HC_ALIGN_UP(size, hc_mem_g.base_page);
        err = hc_mem_map_try(len, flags, node, name, addr, false, &p, &fd);
        if (err)
            return hc_error_errno(
                err == ENOMEM || err == EFAULT ? HCOMM_ERR_NO_MEMORY : HCOMM_ERR_IO, err,
                "hc_mem_region_create: mapping %zu bytes for \"%s\"", len, name);
        r->size = len;
        r->page_size = hc_mem_g.base_page;
    }
    r->base = p;
    r->fd = fd;
    r->numa_node = node;
    r->flags = flags;
    return HCOMM_OK;
}

/* Pins r's pages; a failure is counted (hc_mem_mlock_failed says whether it
 * deserves a warning). */
static void hc_mem_region_lock_pages(hc_mem_region_t *r)
{
    if (mlock(r->base, r->size) != 0) {
        int err = errno;
        atomic_fetch_add(&hc_mem_g.mlock_failures, 1);
        hc_mem_mlock_failed(r->size, err);
    }
}

hcomm_status_t hc_mem_region_create_kind(size_t size, unsigned flags, int numa_node,
                                         const char *name, void *addr, uint32_t kind,
                                         hc_mem_region_t **region_p)
{
    hcomm_status_t st = hc_mem_region_check_args(size, flags, numa_node, region_p);
    if (st != HCOMM_OK) return st;
    if (!name) name = "hcomm";

    hc_mem_region_t *r = calloc(1, sizeof(*r));
    if (!r) return hc_error(HCOMM_ERR_NO_MEMORY, "hc_mem_region_create: region record");
    int node = hc_mem_node_resolve(numa_node);
    st = hc_mem_region_map(r, size, flags, node, name, addr);
    if (st != HCOMM_OK) goto err_free;
    r->owner = true;
    r->kind = kind;
    hc_mem_region_lock_pages(r);

    pthread_mutex_lock(&hc_mem_g.lock);
    st = hc_mem_table_insert_locked(r);
    if (st != HCOMM_OK) goto err_unlock;
    st = hc_mem_region_reg_locked(r);
    if (st != HCOMM_OK) goto err_remove;
    pthread_mutex_unlock(&hc_mem_g.lock);
    atomic_fetch_add(&hc_mem_g.regions_created, 1);
    atomic_fetch_add(r->huge ? &hc_mem_g.bytes_huge : &hc_mem_g.bytes_regular, r->size);
    hc_log_debug("mem: region %u \"%s\" %p %zu bytes, %s pages, node %d%s", r->id, name, r->base,
                 r->size, r->huge ? "huge" : "regular", node,
                 (r->flags & HC_MEM_SHARED) ? ", shared" : "");
    *region_p = r;
    return HCOMM_OK;

err_remove:
    hc_mem_table_remove_locked(r);
err_unlock:
    pthread_mutex_unlock(&hc_mem_g.lock);
    if (addr)
        mmap(addr, r->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
             0);
    else
        munmap(r->base, r->size);
    if (r->fd >= 0) close(r->fd);
err_free:
    free(r);
    return st;
}

hcomm_status_t hc_mem_region_create(size_t size, unsigned flags, int numa_node, const char *name,
                                    hc_mem_region_t **region_p)
{
    if (flags & HC_MEM_INT_PLAIN)
        return hc_error(HCOMM_ERR_INVALID, "hc_mem_region_create: argument flags is bad (0x%x)",
                        flags);
    return hc_mem_region_create_kind(size, flags, numa_node, name, NULL, HC_MEM_KIND_USER,
                                     region_p);
}

hcomm_status_t hc_mem_region_attach(int fd, size_t size, hc_mem_region_t **region_p)
{
    hcomm_status_t st;
    struct stat sb;
    struct statfs sfs;
    if (!hc_mem_g.initialized)
        return hc_error(HCOMM_ERR_NOT_INITIALIZED, "hc_mem_region_attach: hc_mem_init not called");
    if (!region_p)
        return hc_error(HCOMM_ERR_INVALID, "hc_mem_region_attach: argument region_p is NULL");
    if (fd < 0 || fstat(fd, &sb) != 0)
        return hc_error_errno(HCOMM_ERR_INVALID, errno,
                              "hc_mem_region_attach: argument fd is bad (%d)", fd);
    if (size == 0 || (off_t)size > sb.st_size)
        return hc_error(HCOMM_ERR_INVALID,
                        "hc_mem_region_attach: argument size is bad (%zu, memfd holds %lld)", size,
                        (long long)sb.st_size);
    size_t page = hc_mem_g.base_page;
    bool huge = fstatfs(fd, &sfs) == 0 && (unsigned long)sfs.f_type == HUGETLBFS_MAGIC;
    if (huge) page = (size_t)sfs.f_bsize;
    size_t len = HC_ALIGN_UP(size, page);
    hc_mem_region_t *r = calloc(1, sizeof(*r));
    if (!r) return hc_error(HCOMM_ERR_NO_MEMORY, "hc_mem_region_attach: region record");
    r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (r->fd < 0) {
        st = hc_error_errno(HCOMM_ERR_IO, errno, "hc_mem_region_attach: dup(%d)", fd);
        goto err_free;
    }
    r->base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (r->base == MAP_FAILED) {
        st = hc_error_errno(HCOMM_ERR_IO, errno, "hc_mem_region_attach: mmap of fd %d, %zu bytes",
                            fd, len);
        goto err_close;
    }
    r->size = len;
    r->page_size = page;
    r->huge = huge;
    r->numa_node = -1;
    r->flags = HC_MEM_SHARED;
    r->kind = HC_MEM_KIND_ATTACHED;
    pthread_mutex_lock(&hc_mem_g.lock);
    st = hc_mem_table_insert_locked(r);
    pthread_mutex_unlock(&hc_mem_g.lock);
    if (st != HCOMM_OK) goto err_unmap;
    *region_p = r;
    return HCOMM_OK;

err_unmap:
    munmap(r->base, len);
err_close:
    close(r->fd);
err_free:
    free(r);
    return st;
}

void hc_mem_region_destroy(hc_mem_region_t *r)
{
    if (!r) return;
    pthread_mutex_lock(&hc_mem_g.lock);
    hc_mem_region_dereg_locked(r);
    if (hc_mem_g.slots[r->id] == r) hc_mem_table_remove_locked(r);
    pthread_mutex_unlock(&hc_mem_g.lock);
    if (r->owner)
        atomic_fetch_sub(r->huge ? &hc_mem_g.bytes_huge : &hc_mem_g.bytes_regular, r->size);
    if (r->kind == HC_MEM_KIND_POOL)
        /* Back to the reservation, so that nothing else is mapped there. */
        mmap(r->base, r->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
             -1, 0);
    else
        munmap(r->base, r->size);
    if (r->fd >= 0) close(r->fd);
    free(r);
}

hc_mem_region_t *hc_mem_region_take(const void *ptr, uint32_t *kind_p)
{
    hc_mem_region_t *r = NULL;
    pthread_mutex_lock(&hc_mem_g.lock);
    pthread_rwlock_rdlock(&hc_mem_g.rw);
    size_t lo = 0, hi = hc_mem_g.nsorted;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uintptr_t)hc_mem_g.sorted[mid]->base < (uintptr_t)ptr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < hc_mem_g.nsorted && hc_mem_g.sorted[lo]->base == ptr &&
        (hc_mem_g.sorted[lo]->kind == HC_MEM_KIND_LARGE ||
         hc_mem_g.sorted[lo]->kind == HC_MEM_KIND_FALLBACK))
        r = hc_mem_g.sorted[lo];
    pthread_rwlock_unlock(&hc_mem_g.rw);
    if (r) {
        hc_mem_table_remove_locked(r);
        *kind_p = r->kind;
    }
    pthread_mutex_unlock(&hc_mem_g.lock);
    return r;
}

/* ---- lookup ------------------------------------------------------------- */

hc_mem_region_t *hc_mem_region_lookup(const void *ptr, size_t len, size_t *offset_p)
{
    uintptr_t a = (uintptr_t)ptr;
    uintptr_t pb = (uintptr_t)hc_mem_g.pool_base;
    hc_mem_region_t *r = NULL;
    if (a - pb < hc_mem_g.pool_reserved) {
        r = atomic_load_explicit(&hc_mem_g.granules[(a - pb) >> HC_MEM_GRANULE_SHIFT].region,
                                 memory_order_acquire);
    } else {
        pthread_rwlock_rdlock(&hc_mem_g.rw);
        size_t lo = 0, hi = hc_mem_g.nsorted;
        while (lo < hi) { /* first region whose base is > a */
            size_t mid = (lo + hi) / 2;
            if ((uintptr_t)hc_mem_g.sorted[mid]->base <= a)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo > 0) r = hc_mem_g.sorted[lo - 1];
        pthread_rwlock_unlock(&hc_mem_g.rw);
    }
    if (!r) return NULL;
    size_t off = a - (uintptr_t)r->base;
    if (off >= r->size || len > r->size - off) return NULL;
    if (offset_p) *offset_p = off;
    return r;
}
