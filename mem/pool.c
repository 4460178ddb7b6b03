/*
 * The pool: size classes 4 KiB .. 4 MiB (ratio 2^HCOMM_MEM_POOL_BUCKET_BITS,
 * the last class exactly 4 MiB), carved out of pool regions that are mapped
 * one after the other inside the range hc_mem_init reserved.
 *
 * Layout. A pool region is cut into slabs: runs of same-size blocks, each a
 * multiple of 2 MiB and 2 MiB-aligned, so the granule table (one entry per
 * 2 MiB of the range) maps any pool pointer to its region and slab with one
 * shift. A block is named by its 32-bit index, (addr - pool base) / 4 KiB.
 * Metadata stays out of the blocks: each slab has an array of next links, and
 * one flat state array covers the whole reserved range, a state byte per
 * 4 KiB unit, each on a cache line of its own (mmap'ed MAP_NORESERVE: only
 * the pages of carved slabs are ever touched). The byte of a block's first
 * unit says "block start", its class and whether it is FREE or USED; every
 * other byte is 0. That is all hc_mem_free needs to reject a double free, an
 * interior pointer or a pointer it never handed out, and to find the block's
 * class: one shift and one load, no slab lookup.
 *
 * Fast path. Each class has a tagged lock-free LIFO (lifo.h) shared by all
 * threads; each thread keeps an array of block indices per class in front of
 * it (taken and returned in batches, like a magazine) and, in front of those,
 * a one-block slot of any class: free parks the block there (its previous
 * block moving to its class array), alloc takes it back when the class
 * matches. An alloc+free pair of one size thus touches the TLS pointer, the
 * slot, the block's state line and one counter: 25 to 30 instructions per
 * call, plain loads and stores (no atomic RMW, no shared line written, no
 * load whose address waits for another load of the pair). The hot globals
 * (pool base, state array, size -> class table) sit in one read-mostly line.
 * Allocs are counted per thread (written by their owner only, relaxed,
 * summed by hc_mem_stats_get); frees are not counted at all: stats derive
 * them as allocs minus the blocks whose state says USED.
 *
 * The fast paths do not read the init generation: finalize marks every
 * registered thread cache's slot STALE, which matches no class (alloc falls
 * to the array path, which checks the generation) and is not empty (free
 * falls to the parking slow path, which checks it too).
 *
 * Double frees: the state byte is read then written (no CAS: a locked
 * instruction was most of the cost of a free). A second free is caught
 * whenever the two frees are ordered (same thread, or handed over through any
 * synchronization); two threads racing to free the same block, itself a user
 * bug, may both pass (and the block then sits in two caches).
 *
 * Slow path. An empty class takes the growth mutex, carves a new slab (and,
 * when the current region is used up, maps the next region) and pushes its
 * blocks. Past HCOMM_MEM_POOL_MAX_SIZE an allocation gets its own plain
 * mapping instead (counted as a fallback); requests above 4 MiB always get
 * their own region. Both are freed with hc_mem_free and found by lookup.
 */
#include "mem/lifo.h"
#include "mem/mem_int.h"
#include "base/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HC_MEM_BLOCK_SHIFT 12 /* block indices count 4 KiB units */
#define HC_MEM_BLOCK_UNIT ((size_t)1 << HC_MEM_BLOCK_SHIFT)
#define HC_MEM_CLASS_MIN ((size_t)4 << 10)
#define HC_MEM_CLASS_MAX ((size_t)4 << 20)
#define HC_MEM_TCACHE_MAX 32          /* blocks a thread may hold per class */
#define HC_MEM_TCACHE_BYTES (1 << 20) /* ...and at most about this many bytes */
#define HC_MEM_REGION_GROW ((size_t)32 << 20)

/* State byte of a block's first unit: START | class << 2 | USED. 0 for every
 * unit that does not start a block (interior, or not carved). */
enum { HC_MEM_ST_USED = 1, HC_MEM_ST_START = 2, HC_MEM_ST_CLS_SHIFT = 2 };
#define HC_MEM_ST_FREE(ci) ((uint8_t)(HC_MEM_ST_START | (ci) << HC_MEM_ST_CLS_SHIFT))
#define HC_MEM_ST_INUSE(ci) ((uint8_t)(HC_MEM_ST_FREE(ci) | HC_MEM_ST_USED))
#define HC_MEM_ST_MAX (HC_MEM_CLASSES_MAX << HC_MEM_ST_CLS_SHIFT)
#define HC_MEM_SLOT_STALE 0xffu /* no state byte has every bit set */

typedef struct hc_mem_slab {
    uint8_t *base;
    size_t size;
    hc_mem_region_t *region;
    uint32_t cls, shift, nblocks;
    _Atomic uint32_t *next; /* LIFO links, by block number in the slab */
    struct hc_mem_slab *all_next;
} hc_mem_slab_t;

typedef struct {
    hc_mem_lifo_t free HC_ALIGNED_CL;
    size_t block_size;
    uint32_t shift, tcache_max, batch;
    size_t slab_size;
    /* Slow-path counters. */
    _Atomic uint64_t fallbacks HC_ALIGNED_CL, waits, failures, out, hwm, bytes_huge, bytes_regular;
} hc_mem_class_t;

/* Layout of the fast paths' data. Each block's state byte has a cache line
 * of its own (byte 32 of line idx of the state array): no two blocks share a
 * state line, so two threads hammering one class never write the same line,
 * and finding the byte is one shift. That costs 64 bytes of state per 4 KiB
 * of pool (1.6%, touched only for carved slabs of the 4 KiB class, less for
 * larger classes). Byte 32 also keeps clear of 4K aliasing (a load waiting
 * for an older store to a different address with the same low 12 bits): no
 * field the fast paths touch covers byte 32 of its line, and users most
 * often write at the start of their (page-aligned) blocks, byte 0. */
#define HC_MEM_ST_LINE_SHIFT 6
#define HC_MEM_ST_LINE_OFF 32

/* A thread's cache and counters. Lives in TLS; linked in the registry while
 * the thread uses the pool, so that stats can sum it and thread exit can
 * return its blocks. Only the owner writes it (stats read the counters). */
typedef struct hc_mem_tcache {
    uint32_t blk[HC_MEM_CLASSES_MAX][HC_MEM_TCACHE_MAX];
    uint32_t n[HC_MEM_CLASSES_MAX];
    uint32_t max[HC_MEM_CLASSES_MAX]; /* the class's tcache_max, copied at attach */
    struct hc_mem_tcache *next, *prev;
    /* Hot line: bytes 0-12. */
    _Alignas(HC_CACHE_LINE) uint64_t gen;
    uint32_t slot; /* one free block of any class (see hc_mem_tcache_park) */
    /* The slot block's state byte, HC_MEM_ST_FREE(class); 0: the slot is
     * empty; HC_MEM_SLOT_STALE: this cache is from another init cycle (set
     * by finalize, hence atomic), which sends both fast paths to the paths
     * that check the generation. */
    _Atomic uint8_t slot_st;
    /* Blocks handed out, indexed by HC_MEM_ST_FREE(class), the byte alloc
     * works with, so that no index conversion sits on the fast path (the
     * entries in use, 2 mod 4, sit at bytes 16 and 48 of their lines). Frees
     * are not counted: hc_mem_stats_get derives them from the state array
     * (frees = allocs - blocks marked USED). */
    _Alignas(HC_CACHE_LINE) _Atomic uint64_t allocs[HC_MEM_ST_MAX];
} hc_mem_tcache_t;

/* What the fast paths read, in one line, written only by init/finalize.
 * Byte 32 holds a field they do not read. */
static struct {
    _Atomic uint64_t gen;   /* bumped at init and finalize: stale thread caches reset */
    uint8_t *base;          /* hc_mem_g.pool_base */
    size_t units;           /* hc_mem_g.pool_reserved >> 12 (0: not initialized) */
    _Atomic uint8_t *state; /* byte 32 of the first state line */
    size_t reserved;        /* hc_mem_g.pool_reserved */
    /* HC_MEM_ST_FREE(class of a request) by hc_mem_size_bucket, 0..21 */
    uint8_t st_of_bucket[24];
    size_t state_bytes; /* mapped at state - HC_MEM_ST_LINE_OFF */
} hc_mem_hot HC_ALIGNED_CL;

static struct {
    hc_mem_class_t cls[HC_MEM_CLASSES_MAX];
    unsigned ncls, bits;
    pthread_mutex_t grow_lock;
    hc_mem_region_t *cur; /* region slabs are carved from */
    size_t cur_used;
    size_t pool_bytes, pool_max;
    hc_mem_slab_t *slabs;
    pthread_mutex_t tc_lock;
    hc_mem_tcache_t *tcaches;
    uint64_t retired_allocs[HC_MEM_CLASSES_MAX]; /* of exited threads */
    _Atomic uint64_t large_allocs, large_frees, large_failures, fallback_frees, invalid_frees;
} hc_mem_pool = {
    .grow_lock = PTHREAD_MUTEX_INITIALIZER,
    .tc_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* The thread's cache: a pointer, initial-exec (one load from %fs, no
 * __tls_get_addr call, little static TLS taken from programs that dlopen the
 * library), line-aligned (clear of byte 32, see HC_MEM_ST_LINE_OFF). Threads
 * without a cache point at hc_mem_tc_none: stale slot, empty arrays, a
 * generation that never matches, never written. The fast paths need no NULL
 * test. */
static hc_mem_tcache_t hc_mem_tc_none = {.gen = UINT64_MAX, .slot_st = HC_MEM_SLOT_STALE};
static __thread hc_mem_tcache_t *hc_mem_tcp
    __attribute__((tls_model("initial-exec"), aligned(HC_CACHE_LINE))) = &hc_mem_tc_none;
static pthread_key_t hc_mem_tc_key;
static pthread_once_t hc_mem_tc_once = PTHREAD_ONCE_INIT;

static inline void hc_mem_count(_Atomic uint64_t *c)
{
    /* Only the owning thread writes: no RMW needed, relaxed for readers. */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* ---- classes ------------------------------------------------------------ */

unsigned hc_mem_pool_nclasses(void)
{
    return hc_mem_pool.ncls;
}

size_t hc_mem_pool_class_size(unsigned c)
{
    return c < hc_mem_pool.ncls ? hc_mem_pool.cls[c].block_size : 0;
}

/* floor(log2(bytes - 1)) for 2 < bytes (0 for 1 and 2): one bsr. A request
 * of bucket b needs at most 2^(b + 1) bytes. */
static inline unsigned hc_mem_size_bucket(size_t bytes)
{
    return 63u - (unsigned)__builtin_clzll((unsigned long long)((bytes - 1) | 1));
}

/* Class of a request of 1..4 MiB bytes: the smallest class that holds it. */
unsigned hc_mem_pool_class_of(size_t bytes)
{
    return hc_mem_hot.st_of_bucket[hc_mem_size_bucket(bytes)] >> HC_MEM_ST_CLS_SHIFT;
}

static void hc_mem_classes_init(unsigned bits)
{
    unsigned n = 0;
    hc_mem_pool.bits = bits;
    for (size_t sz = HC_MEM_CLASS_MIN;; sz <<= bits) {
        if (sz > HC_MEM_CLASS_MAX)
            sz = HC_MEM_CLASS_MAX; /* a ratio that skips 4 MiB still ends there */
        hc_mem_class_t *c = &hc_mem_pool.cls[n++];
        memset(c, 0, sizeof(*c));
        hc_mem_lifo_init(&c->free, true);
        c->block_size = sz;
        c->shift = (uint32_t)__builtin_ctzll(sz);
        c->tcache_max = (uint32_t)HC_MAX(2, HC_MIN(HC_MEM_TCACHE_MAX, HC_MEM_TCACHE_BYTES / sz));
        c->batch = HC_MAX(1, c->tcache_max / 2);
        c->slab_size = HC_MAX(HC_MEM_GRANULE, 4 * sz);
        if (sz == HC_MEM_CLASS_MAX) break;
    }
    hc_mem_pool.ncls = n;
    /* Sizes up to 2^12 are class 0; above, class c holds 2^(12 + c * bits).
     * Bucket b holds requests of up to 2^(b + 1) bytes. */
    for (unsigned b = 0; b < HC_ARRAY_SIZE(hc_mem_hot.st_of_bucket); b++) {
        unsigned l = b + 1;
        unsigned c = l <= HC_MEM_BLOCK_SHIFT ? 0 : (l - HC_MEM_BLOCK_SHIFT + bits - 1) / bits;
        hc_mem_hot.st_of_bucket[b] = HC_MEM_ST_FREE(c < n ? c : n - 1);
    }
}

/* ---- blocks ------------------------------------------------------------- */

/* The state byte of block idx (see HC_MEM_ST_LINE_SHIFT). */
static inline _Atomic uint8_t *hc_mem_state_of(size_t idx)
{
    return &hc_mem_hot.state[idx << HC_MEM_ST_LINE_SHIFT];
}

static inline hc_mem_slab_t *hc_mem_slab_of(uint32_t idx)
{
    size_t off = (size_t)idx << HC_MEM_BLOCK_SHIFT;
    return atomic_load_explicit(&hc_mem_g.granules[off >> HC_MEM_GRANULE_SHIFT].slab,
                                memory_order_acquire);
}

static inline uint32_t hc_mem_slab_local(const hc_mem_slab_t *s, uint32_t idx)
{
    size_t off = ((size_t)idx << HC_MEM_BLOCK_SHIFT) - (size_t)(s->base - hc_mem_g.pool_base);
    return (uint32_t)(off >> s->shift);
}

static inline _Atomic uint32_t *hc_mem_next_of(uint32_t idx)
{
    hc_mem_slab_t *s = hc_mem_slab_of(idx);
    return &s->next[hc_mem_slab_local(s, idx)];
}

/* Takes up to max blocks off the class list in one CAS. Walking the links of
 * blocks we do not own yet is safe: links live in slab metadata, and a stale
 * walk fails the tagged CAS. */
static uint32_t hc_mem_list_pop(hc_mem_class_t *c, uint32_t *out, uint32_t max)
{
    uint64_t h = hc_mem_lifo_load(&c->free);
    for (;;) {
        uint32_t idx = hc_mem_lifo_idx(h), n = 0;
        while (idx != HC_MEM_LIFO_NIL && n < max) {
            out[n++] = idx;
            idx = atomic_load_explicit(hc_mem_next_of(idx), memory_order_relaxed);
        }
        if (n == 0) return 0;
        if (hc_mem_lifo_pop_commit(&c->free, &h, idx)) return n;
    }
}

/* Pushes blocks[0..n) as one chain. */
static void hc_mem_list_push(hc_mem_class_t *c, const uint32_t *blocks, uint32_t n)
{
    for (uint32_t i = 0; i + 1 < n; i++)
        atomic_store_explicit(hc_mem_next_of(blocks[i]), blocks[i + 1], memory_order_relaxed);
    _Atomic uint32_t *last = hc_mem_next_of(blocks[n - 1]);
    uint64_t h = atomic_load_explicit(&c->free.head, memory_order_relaxed);
    do {
        atomic_store_explicit(last, hc_mem_lifo_idx(h), memory_order_relaxed);
    } while (!hc_mem_lifo_push_commit(&c->free, &h, blocks[0]));
}

static void hc_mem_out_add(hc_mem_class_t *c, int64_t n)
{
    uint64_t out = atomic_fetch_add(&c->out, (uint64_t)n) + (uint64_t)n;
    uint64_t hwm = atomic_load_explicit(&c->hwm, memory_order_relaxed);
    while (n > 0 && out > hwm && !atomic_compare_exchange_weak(&c->hwm, &hwm, out))
        ;
}

/* ---- thread caches ------------------------------------------------------ */

static void hc_mem_tcache_release(void *arg)
{
    hc_mem_tcache_t *tc = arg;
    pthread_mutex_lock(&hc_mem_pool.tc_lock);
    if (tc->gen == atomic_load(&hc_mem_hot.gen)) {
        uint8_t sst = atomic_load_explicit(&tc->slot_st, memory_order_relaxed);
        if (sst) {
            hc_mem_class_t *c = &hc_mem_pool.cls[sst >> HC_MEM_ST_CLS_SHIFT];
            hc_mem_list_push(c, &tc->slot, 1);
            hc_mem_out_add(c, -1);
        }
        for (unsigned c = 0; c < hc_mem_pool.ncls; c++) {
            if (tc->n[c]) {
                hc_mem_list_push(&hc_mem_pool.cls[c], tc->blk[c], tc->n[c]);
                hc_mem_out_add(&hc_mem_pool.cls[c], -(int64_t)tc->n[c]);
                tc->n[c] = 0;
            }
            hc_mem_pool.retired_allocs[c] += atomic_load(&tc->allocs[HC_MEM_ST_FREE(c)]);
        }
        if (tc->prev)
            tc->prev->next = tc->next;
        else
            hc_mem_pool.tcaches = tc->next;
        if (tc->next) tc->next->prev = tc->prev;
    }
    tc->gen = 0;
    pthread_mutex_unlock(&hc_mem_pool.tc_lock);
    hc_mem_tcp = &hc_mem_tc_none;
    free(tc);
}

static void hc_mem_tcache_key_create(void)
{
    pthread_key_create(&hc_mem_tc_key, hc_mem_tcache_release);
}

static HC_NOINLINE hc_mem_tcache_t *hc_mem_tcache_attach(void)
{
    hc_mem_tcache_t *tc = hc_mem_tcp;
    pthread_once(&hc_mem_tc_once, hc_mem_tcache_key_create);
    if (tc == &hc_mem_tc_none) {
        tc = aligned_alloc(HC_CACHE_LINE, HC_ALIGN_UP(sizeof(*tc), HC_CACHE_LINE));
        if (!tc) return NULL;
        memset(tc, 0, sizeof(*tc));
        hc_mem_tcp = tc;
    }
    pthread_mutex_lock(&hc_mem_pool.tc_lock);
    /* Blocks of a previous init cycle are gone with their pool, and the
     * classes may differ. */
    memset(tc->n, 0, sizeof(tc->n));
    atomic_store_explicit(&tc->slot_st, 0, memory_order_relaxed);
    for (unsigned c = 0; c < HC_MEM_CLASSES_MAX; c++)
        tc->max[c] = c < hc_mem_pool.ncls ? hc_mem_pool.cls[c].tcache_max : 0;
    for (unsigned i = 0; i < HC_MEM_ST_MAX; i++)
        atomic_store(&tc->allocs[i], 0);
    tc->prev = NULL;
    tc->next = hc_mem_pool.tcaches;
    if (tc->next) tc->next->prev = tc;
    hc_mem_pool.tcaches = tc;
    tc->gen = atomic_load(&hc_mem_hot.gen);
    pthread_mutex_unlock(&hc_mem_pool.tc_lock);
    pthread_setspecific(hc_mem_tc_key, tc);
    return tc;
}

/* The calling thread's cache, or NULL when it is missing or from another
 * init cycle (the slow paths attach it). */
static inline hc_mem_tcache_t *hc_mem_tcache_get(void)
{
    hc_mem_tcache_t *tc = hc_mem_tcp;
    if (HC_UNLIKELY(tc->gen != atomic_load_explicit(&hc_mem_hot.gen, memory_order_relaxed)))
        return NULL;
    return tc;
}

/* ---- growth ------------------------------------------------------------- */

/* Carves a slab for class ci and pushes its blocks. Called with grow_lock. */
static hcomm_status_t hc_mem_slab_carve(unsigned ci)
{
    hc_mem_class_t *c = &hc_mem_pool.cls[ci];
    size_t unit = HC_MAX(c->block_size, HC_MEM_GRANULE);
    hcomm_status_t st;
    if (!hc_mem_pool.cur || hc_mem_pool.cur->size - hc_mem_pool.cur_used < unit) {
        size_t left = hc_mem_pool.pool_max - hc_mem_pool.pool_bytes;
        size_t size = HC_ALIGN_UP(HC_MAX(HC_MEM_REGION_GROW, unit), hc_mem_g.hugepage_size);
        if (size > left) size = left / HC_MEM_GRANULE * HC_MEM_GRANULE;
        if (size < unit)
            return hc_error(HCOMM_ERR_NO_MEMORY,
                            "hc_mem_alloc: pool at its limit HCOMM_MEM_POOL_MAX_SIZE=%zu",
                            hc_mem_pool.pool_max);
        hc_mem_region_t *r;
        st = hc_mem_region_create_kind(size, HC_MEM_SHARED, -1, "hcomm-pool",
                                       hc_mem_g.pool_base + hc_mem_pool.pool_bytes,
                                       HC_MEM_KIND_POOL, &r);
        if (st != HCOMM_OK) return st;
        hc_mem_pool.pool_bytes += r->size;
        hc_mem_pool.cur = r;
        hc_mem_pool.cur_used = 0;
    }
    hc_mem_region_t *r = hc_mem_pool.cur;
    size_t size = HC_MIN(c->slab_size, (r->size - hc_mem_pool.cur_used) / unit * unit);
    hc_mem_slab_t *s = calloc(1, sizeof(*s));
    uint32_t nblocks = (uint32_t)(size >> c->shift);
    uint32_t *idx = malloc(nblocks * sizeof(*idx));
    if (s) s->next = calloc(nblocks, sizeof(*s->next));
    if (!s || !idx || !s->next) {
        if (s) free((void *)s->next);
        free(s);
        free(idx);
        return hc_error(HCOMM_ERR_NO_MEMORY, "hc_mem_alloc: slab metadata");
    }
    s->base = (uint8_t *)r->base + hc_mem_pool.cur_used;
    s->size = size;
    s->region = r;
    s->cls = ci;
    s->shift = c->shift;
    s->nblocks = nblocks;
    size_t first = (size_t)(s->base - hc_mem_g.pool_base);
    /* Block states first: the push below publishes them (release) with the
     * blocks, and the granule store publishes them to the error paths. */
    for (uint32_t i = 0; i < nblocks; i++) {
        idx[i] = (uint32_t)((first + ((size_t)i << c->shift)) >> HC_MEM_BLOCK_SHIFT);
        atomic_store_explicit(hc_mem_state_of(idx[i]),
                              (uint8_t)(HC_MEM_ST_START | ci << HC_MEM_ST_CLS_SHIFT),
                              memory_order_relaxed);
    }
    for (size_t g = first >> HC_MEM_GRANULE_SHIFT; g < (first + size) >> HC_MEM_GRANULE_SHIFT; g++)
        atomic_store_explicit(&hc_mem_g.granules[g].slab, s, memory_order_release);
    hc_mem_pool.cur_used += size;
    s->all_next = hc_mem_pool.slabs;
    hc_mem_pool.slabs = s;
    atomic_fetch_add(r->huge ? &c->bytes_huge : &c->bytes_regular, size);
    hc_mem_list_push(c, idx, nblocks);
    free(idx);
    return HCOMM_OK;
}

/* The class list is empty: grow under the mutex (another thread may have
 * grown it meanwhile, hence the second pop). */
static HC_NOINLINE uint32_t hc_mem_refill_slow(unsigned ci, uint32_t *out, uint32_t max)
{
    hc_mem_class_t *c = &hc_mem_pool.cls[ci];
    atomic_fetch_add_explicit(&c->waits, 1, memory_order_relaxed);
    pthread_mutex_lock(&hc_mem_pool.grow_lock);
    uint32_t n = hc_mem_list_pop(c, out, max);
    if (n == 0 && hc_mem_slab_carve(ci) == HCOMM_OK) n = hc_mem_list_pop(c, out, max);
    pthread_mutex_unlock(&hc_mem_pool.grow_lock);
    return n;
}

/* ---- alloc / free ------------------------------------------------------- */

static HC_NOINLINE hcomm_status_t hc_mem_alloc_region(size_t bytes, unsigned ci, void **ptr_p)
{
    hc_mem_region_t *r;
    hcomm_status_t st;
    if (ci == UINT32_MAX) {
        st = hc_mem_region_create_kind(bytes, HC_MEM_SHARED, -1, "hcomm-large", NULL,
                                       HC_MEM_KIND_LARGE, &r);
        atomic_fetch_add(st == HCOMM_OK ? &hc_mem_pool.large_allocs : &hc_mem_pool.large_failures,
                         1);
    } else {
        /* Past the pool limit: a plain mapping of regular pages. */
        st = hc_mem_region_create_kind(hc_mem_pool.cls[ci].block_size, HC_MEM_INT_PLAIN, -1,
                                       "hcomm-fallback", NULL, HC_MEM_KIND_FALLBACK, &r);
        if (st == HCOMM_OK) {
            atomic_fetch_add(&hc_mem_pool.cls[ci].fallbacks, 1);
            hc_log_debug("mem: pool at its limit (%zu bytes): %zu-byte allocation falls back to "
                         "its own mapping",
                         hc_mem_pool.pool_max, bytes);
        } else {
            atomic_fetch_add(&hc_mem_pool.cls[ci].failures, 1);
        }
    }
    if (st != HCOMM_OK) return st;
    *ptr_p = r->base;
    return HCOMM_OK;
}

/* Spills the older half of a full class cache to the shared list. */
static HC_NOINLINE void hc_mem_tcache_spill(hc_mem_tcache_t *tc, unsigned ci)
{
    hc_mem_class_t *c = &hc_mem_pool.cls[ci];
    hc_mem_list_push(c, tc->blk[ci], c->batch);
    hc_mem_out_add(c, -(int64_t)c->batch);
    tc->n[ci] -= c->batch;
    memmove(tc->blk[ci], tc->blk[ci] + c->batch, tc->n[ci] * sizeof(uint32_t));
}

/* The slot's previous block (state byte st) moves to its class array. */
static HC_NOINLINE void hc_mem_tcache_evict(hc_mem_tcache_t *tc, uint32_t old, uint8_t st)
{
    unsigned ci = st >> HC_MEM_ST_CLS_SHIFT;
    if (tc->n[ci] == tc->max[ci]) hc_mem_tcache_spill(tc, ci);
    tc->blk[ci][tc->n[ci]++] = old;
}

/* Parks free block idx (state byte st, already stored) in the one-block
 * slot of the thread's cache. The slot is what makes an alloc+free pair
 * cheap: its address does not depend on the block's class, so the next
 * alloc reads what this free wrote without waiting for the free's state
 * load, and checks the class with one compare. */
static inline void hc_mem_tcache_park(hc_mem_tcache_t *tc, uint32_t idx, uint8_t st)
{
    tc->slot = idx;
    atomic_store_explicit(&tc->slot_st, st, memory_order_relaxed);
}

/* The slot is taken (its block goes to its class array) or the cache is
 * stale or missing (attach it first). */
static HC_NOINLINE hcomm_status_t hc_mem_free_park_slow(uint32_t idx, uint8_t st)
{
    hc_mem_tcache_t *tc = hc_mem_tcache_get();
    if (!tc) {
        tc = hc_mem_tcache_attach();
        if (!tc) {
            /* No cache for this thread: the block goes straight back. */
            hc_mem_class_t *c = &hc_mem_pool.cls[st >> HC_MEM_ST_CLS_SHIFT];
            hc_mem_list_push(c, &idx, 1);
            hc_mem_out_add(c, -1);
            return HCOMM_OK;
        }
    }
    uint8_t old_st = atomic_load_explicit(&tc->slot_st, memory_order_relaxed);
    if (old_st) hc_mem_tcache_evict(tc, tc->slot, old_st);
    hc_mem_tcache_park(tc, idx, st);
    return HCOMM_OK;
}

/* Marks block idx (free state byte fst) USED and returns its address. */
static inline void *hc_mem_block_hand_out(hc_mem_tcache_t *tc, uint32_t idx, uint8_t fst)
{
    atomic_store_explicit(hc_mem_state_of(idx), fst | HC_MEM_ST_USED, memory_order_relaxed);
    hc_mem_count(&tc->allocs[fst]);
    return hc_mem_hot.base + ((size_t)idx << HC_MEM_BLOCK_SHIFT);
}

/* Everything the fast path does not: argument errors, large requests, a
 * missing or stale thread cache, an empty cache (refill, growth, fallback). */
static HC_NOINLINE hcomm_status_t hc_mem_alloc_slow(size_t bytes, void **ptr_p)
{
    if (!ptr_p) return hc_error(HCOMM_ERR_INVALID, "hc_mem_alloc: argument ptr_p is NULL");
    if (bytes == 0 || bytes > ((size_t)1 << 46))
        return hc_error(HCOMM_ERR_INVALID, "hc_mem_alloc: argument bytes is bad (%zu)", bytes);
    if (!hc_mem_g.initialized)
        return hc_error(HCOMM_ERR_NOT_INITIALIZED, "hc_mem_alloc: hc_mem_init not called");
    if (bytes > HC_MEM_CLASS_MAX) return hc_mem_alloc_region(bytes, UINT32_MAX, ptr_p);
    unsigned ci = hc_mem_pool_class_of(bytes);
    hc_mem_class_t *c = &hc_mem_pool.cls[ci];
    hc_mem_tcache_t *tc = hc_mem_tcache_get();
    if (!tc) {
        tc = hc_mem_tcache_attach();
        if (!tc) return hc_error(HCOMM_ERR_NO_MEMORY, "hc_mem_alloc: thread cache");
    }
    if (atomic_load_explicit(&tc->slot_st, memory_order_relaxed) == HC_MEM_ST_FREE(ci)) {
        atomic_store_explicit(&tc->slot_st, 0, memory_order_relaxed);
        *ptr_p = hc_mem_block_hand_out(tc, tc->slot, HC_MEM_ST_FREE(ci));
        return HCOMM_OK;
    }
    if (tc->n[ci] == 0) {
        uint32_t n = hc_mem_list_pop(c, tc->blk[ci], c->batch);
        if (n == 0) n = hc_mem_refill_slow(ci, tc->blk[ci], c->batch);
        if (n == 0) return hc_mem_alloc_region(bytes, ci, ptr_p);
        hc_mem_out_add(c, n);
        tc->n[ci] = n;
    }
    *ptr_p = hc_mem_block_hand_out(tc, tc->blk[ci][--tc->n[ci]], HC_MEM_ST_FREE(ci));
    return HCOMM_OK;
}

/* The slot holds no block of class ci (or the cache is stale): the top of
 * the class array. */
static HC_NOINLINE hcomm_status_t hc_mem_alloc_array(hc_mem_tcache_t *tc, unsigned ci, size_t bytes,
                                                     void **ptr_p)
{
    if (HC_UNLIKELY(tc->gen != atomic_load_explicit(&hc_mem_hot.gen, memory_order_relaxed)) ||
        HC_UNLIKELY(tc->n[ci] == 0))
        return hc_mem_alloc_slow(bytes, ptr_p);
    *ptr_p = hc_mem_block_hand_out(tc, tc->blk[ci][--tc->n[ci]], HC_MEM_ST_FREE(ci));
    return HCOMM_OK;
}

hcomm_status_t hc_mem_alloc(size_t bytes, void **ptr_p)
{
    hc_mem_tcache_t *tc = hc_mem_tcp;
    /* bytes - 1 wraps for 0: one compare rejects 0 and large requests. */
    if (HC_UNLIKELY(!ptr_p || bytes - 1 >= HC_MEM_CLASS_MAX))
        return hc_mem_alloc_slow(bytes, ptr_p);
    uint8_t fst = hc_mem_hot.st_of_bucket[hc_mem_size_bucket(bytes)];
    /* The slot's block if it is of this class, else the top of the class
     * array. Neither an empty slot (0) nor a stale cache (the generation is
     * checked on that path) matches a class. */
    if (HC_UNLIKELY(atomic_load_explicit(&tc->slot_st, memory_order_relaxed) != fst))
        return hc_mem_alloc_array(tc, fst >> HC_MEM_ST_CLS_SHIFT, bytes, ptr_p);
    atomic_store_explicit(&tc->slot_st, 0, memory_order_relaxed);
    *ptr_p = hc_mem_block_hand_out(tc, tc->slot, fst);
    return HCOMM_OK;
}

static HC_NOINLINE hcomm_status_t hc_mem_free_invalid(void *ptr, const char *why)
{
    atomic_fetch_add(&hc_mem_pool.invalid_frees, 1);
    return hc_error(HCOMM_ERR_INVALID, "hc_mem_free: argument ptr %p %s (nothing freed)", ptr, why);
}

static HC_NOINLINE hcomm_status_t hc_mem_free_region(void *ptr)
{
    uint32_t kind;
    hc_mem_region_t *r = hc_mem_region_take(ptr, &kind);
    if (!r) return hc_mem_free_invalid(ptr, "was not returned by hc_mem_alloc or is already freed");
    atomic_fetch_add(
        kind == HC_MEM_KIND_LARGE ? &hc_mem_pool.large_frees : &hc_mem_pool.fallback_frees, 1);
    hc_mem_region_destroy(r);
    return HCOMM_OK;
}

/* Everything the fast path does not: NULL, memory outside the pool range,
 * rejected pointers (with the reason), a missing or stale thread cache. */
static HC_NOINLINE hcomm_status_t hc_mem_free_slow(void *ptr)
{
    if (!ptr) return HCOMM_OK;
    size_t off = (size_t)((uintptr_t)ptr - (uintptr_t)hc_mem_hot.base);
    if (off >= hc_mem_hot.reserved) return hc_mem_free_region(ptr);
    uint32_t idx = (uint32_t)(off >> HC_MEM_BLOCK_SHIFT);
    _Atomic uint8_t *state = hc_mem_state_of(idx);
    uint8_t st = atomic_load_explicit(state, memory_order_relaxed);
    if ((off & (HC_MEM_BLOCK_UNIT - 1)) || !(st & HC_MEM_ST_START)) {
        bool in_slab = atomic_load_explicit(&hc_mem_g.granules[off >> HC_MEM_GRANULE_SHIFT].slab,
                                            memory_order_acquire) != NULL;
        return hc_mem_free_invalid(ptr, in_slab ? "points inside a block, not at its start"
                                                : "is in the pool range but not in any block");
    }
    if (!(st & HC_MEM_ST_USED)) return hc_mem_free_invalid(ptr, "is already free (double free?)");
    st &= (uint8_t)~HC_MEM_ST_USED;
    atomic_store_explicit(state, st, memory_order_relaxed);
    return hc_mem_free_park_slow(idx, st);
}

hcomm_status_t hc_mem_free(void *ptr)
{
    /* The offset rotated by 12: the block index when ptr is 4 KiB-aligned
     * inside the range, else a huge value (low bits rotated to the top), so
     * one compare sends NULL, foreign and unaligned pointers, and everything
     * before init (units 0), to the slow path. */
    size_t off = (size_t)((uintptr_t)ptr - (uintptr_t)hc_mem_hot.base);
    size_t ridx = (off >> HC_MEM_BLOCK_SHIFT) | (off << (64 - HC_MEM_BLOCK_SHIFT));
    if (HC_UNLIKELY(ridx >= hc_mem_hot.units)) return hc_mem_free_slow(ptr);
    _Atomic uint8_t *state = hc_mem_state_of(ridx);
    uint8_t st = atomic_load_explicit(state, memory_order_relaxed);
    /* Not a used block start (interior, free, never carved: USED implies
     * START): the slow path says which. */
    if (HC_UNLIKELY(!(st & HC_MEM_ST_USED))) return hc_mem_free_slow(ptr);
    st -= HC_MEM_ST_USED;
    atomic_store_explicit(state, st, memory_order_relaxed);
    hc_mem_tcache_t *tc = hc_mem_tcp;
    /* A taken slot, or a stale or missing cache (HC_MEM_SLOT_STALE). */
    if (HC_UNLIKELY(atomic_load_explicit(&tc->slot_st, memory_order_relaxed) != 0))
        return hc_mem_free_park_slow((uint32_t)ridx, st);
    hc_mem_tcache_park(tc, (uint32_t)ridx, st);
    return HCOMM_OK;
}

/* ---- init / finalize / stats -------------------------------------------- */

hcomm_status_t hc_mem_pool_init(void)
{
    hc_mem_classes_init((unsigned)hc_cfg.mem_pool_bucket_bits);
    hc_mem_pool.pool_max =
        HC_MAX(hc_cfg.mem_pool_max, HC_ALIGN_UP(hc_mem_g.pool_initial, hc_mem_g.hugepage_size));
    hc_mem_pool.pool_max = HC_MIN(hc_mem_pool.pool_max, hc_mem_g.pool_reserved);
    hc_mem_pool.pool_bytes = 0;
    hc_mem_pool.cur = NULL;
    hc_mem_pool.cur_used = 0;
    hc_mem_pool.slabs = NULL;
    memset(hc_mem_pool.retired_allocs, 0, sizeof(hc_mem_pool.retired_allocs));
    atomic_store(&hc_mem_pool.large_allocs, 0);
    atomic_store(&hc_mem_pool.large_frees, 0);
    atomic_store(&hc_mem_pool.large_failures, 0);
    atomic_store(&hc_mem_pool.fallback_frees, 0);
    atomic_store(&hc_mem_pool.invalid_frees, 0);
    /* The state array: one line per 4 KiB of the reserved range. Untouched
     * pages read 0 and take no memory. */
    size_t bytes = (hc_mem_g.pool_reserved >> HC_MEM_BLOCK_SHIFT) << HC_MEM_ST_LINE_SHIFT;
    void *st = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (st == MAP_FAILED)
        return hc_mem_reserve_error(errno, "the pool's block state array", bytes);
    hc_mem_hot.state = (_Atomic uint8_t *)st + HC_MEM_ST_LINE_OFF;
    hc_mem_hot.state_bytes = bytes;
    hc_mem_hot.base = hc_mem_g.pool_base;
    hc_mem_hot.reserved = hc_mem_g.pool_reserved;
    hc_mem_hot.units = hc_mem_g.pool_reserved >> HC_MEM_BLOCK_SHIFT;
    atomic_fetch_add(&hc_mem_hot.gen, 1);
    if (hc_mem_g.pool_initial == 0) return HCOMM_OK;
    size_t size = HC_ALIGN_UP(hc_mem_g.pool_initial, hc_mem_g.hugepage_size);
    hc_mem_region_t *r;
    hcomm_status_t rc = hc_mem_region_create_kind(size, HC_MEM_SHARED, -1, "hcomm-pool",
                                                  hc_mem_g.pool_base, HC_MEM_KIND_POOL, &r);
    if (rc != HCOMM_OK) return rc;
    hc_mem_pool.pool_bytes = r->size;
    hc_mem_pool.cur = r;
    return HCOMM_OK;
}

void hc_mem_pool_finalize(void)
{
    pthread_mutex_lock(&hc_mem_pool.tc_lock);
    atomic_fetch_add(&hc_mem_hot.gen, 1); /* every thread cache is now stale */
    /* ...and must leave the fast paths (which do not read the generation). */
    for (hc_mem_tcache_t *tc = hc_mem_pool.tcaches; tc; tc = tc->next)
        atomic_store_explicit(&tc->slot_st, HC_MEM_SLOT_STALE, memory_order_relaxed);
    hc_mem_pool.tcaches = NULL;
    pthread_mutex_unlock(&hc_mem_pool.tc_lock);
    /* From here on every hc_mem_free of a pool pointer takes the slow path
     * and finds no region. */
    hc_mem_hot.base = NULL;
    hc_mem_hot.reserved = 0;
    hc_mem_hot.units = 0;
    if (hc_mem_hot.state)
        munmap((void *)(hc_mem_hot.state - HC_MEM_ST_LINE_OFF), hc_mem_hot.state_bytes);
    hc_mem_hot.state = NULL;
    hc_mem_hot.state_bytes = 0;
    for (hc_mem_slab_t *s = hc_mem_pool.slabs, *n; s; s = n) {
        n = s->all_next;
        free((void *)s->next);
        free(s);
    }
    hc_mem_pool.slabs = NULL;
    hc_mem_pool.cur = NULL;
    for (unsigned c = 0; c < hc_mem_pool.ncls; c++)
        hc_mem_lifo_init(&hc_mem_pool.cls[c].free, true);
}

void hc_mem_pool_stats_get(hc_mem_stats_t *s)
{
    s->nclasses = hc_mem_pool.ncls;
    s->pool_bytes = hc_mem_pool.pool_bytes;
    s->pool_max = hc_mem_pool.pool_max;
    s->large_allocs = atomic_load(&hc_mem_pool.large_allocs);
    s->large_frees = atomic_load(&hc_mem_pool.large_frees);
    s->large_failures = atomic_load(&hc_mem_pool.large_failures);
    s->fallback_frees = atomic_load(&hc_mem_pool.fallback_frees);
    s->invalid_frees = atomic_load(&hc_mem_pool.invalid_frees);
    /* Blocks in use, by class: the USED marks of every carved block. */
    uint64_t used[HC_MEM_CLASSES_MAX] = {0};
    pthread_mutex_lock(&hc_mem_pool.grow_lock);
    for (hc_mem_slab_t *sl = hc_mem_pool.slabs; sl; sl = sl->all_next) {
        uint32_t first = (uint32_t)((size_t)(sl->base - hc_mem_g.pool_base) >> HC_MEM_BLOCK_SHIFT);
        uint32_t step = 1u << (sl->shift - HC_MEM_BLOCK_SHIFT);
        for (uint32_t b = 0; b < sl->nblocks; b++)
            used[sl->cls] +=
                atomic_load_explicit(hc_mem_state_of(first + b * step), memory_order_relaxed) &
                HC_MEM_ST_USED;
    }
    pthread_mutex_unlock(&hc_mem_pool.grow_lock);
    pthread_mutex_lock(&hc_mem_pool.tc_lock);
    for (unsigned i = 0; i < hc_mem_pool.ncls; i++) {
        hc_mem_class_t *c = &hc_mem_pool.cls[i];
        hc_mem_class_stats_t *o = &s->cls[i];
        o->block_size = c->block_size;
        o->allocs = hc_mem_pool.retired_allocs[i];
        for (hc_mem_tcache_t *tc = hc_mem_pool.tcaches; tc; tc = tc->next) {
            o->allocs += atomic_load_explicit(&tc->allocs[HC_MEM_ST_FREE(i)], memory_order_relaxed);
        }
        /* Counted after its state store: clamp a block caught in between. */
        o->in_use = HC_MIN(used[i], o->allocs);
        o->frees = o->allocs - o->in_use;
        o->failures = atomic_load(&c->failures);
        o->fallbacks = atomic_load(&c->fallbacks);
        o->waits = atomic_load(&c->waits);
        o->hwm = atomic_load(&c->hwm);
        o->bytes_huge = atomic_load(&c->bytes_huge);
        o->bytes_regular = atomic_load(&c->bytes_regular);
    }
    pthread_mutex_unlock(&hc_mem_pool.tc_lock);
}
