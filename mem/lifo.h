/*
 * A lock-free LIFO (Treiber stack) of 32-bit block indices whose head is one
 * 64-bit word: {tag:32, index:32}. The "next" links live outside the blocks,
 * in an array the caller owns (the pool keeps one per slab), so a user who
 * overruns a block cannot corrupt the list, and reading the next link of a
 * block that another thread has just popped reads a stale index, never freed
 * memory.
 *
 * ABA: every successful pop and push adds tag_step (1) to the tag, so a head
 * that was popped and pushed back between a reader's load and its CAS no
 * longer compares equal. A wrap needs 2^32 operations inside one CAS window.
 * tag_step 0 gives the classic untagged stack: only the ABA unit test builds
 * one, to show the interleaving that breaks it.
 *
 * Memory orderings:
 *  - push: the caller stores the block's next link (relaxed), then the CAS
 *    publishes the block with release, so the link (and everything the owner
 *    wrote to the block) happens-before any pop that sees the new head.
 *  - pop: the head is loaded with acquire (and reloaded with acquire when a
 *    CAS fails), pairing with that release, so the next link read after it is
 *    the one written before the push. The pop's CAS is acquire too: the block
 *    it wins was published by some push's release.
 * The functions are the steps of push and pop, so that a test can interleave
 * them by hand; the pool loops over them.
 */
#ifndef HC_MEM_LIFO_H
#define HC_MEM_LIFO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define HC_MEM_LIFO_NIL UINT32_MAX

typedef struct {
    _Atomic uint64_t head;
    uint32_t tag_step; /* 1: tagged (always, outside tests); 0: untagged */
} hc_mem_lifo_t;

static inline uint64_t hc_mem_lifo_pack(uint32_t idx, uint32_t tag)
{
    return ((uint64_t)tag << 32) | idx;
}

static inline uint32_t hc_mem_lifo_idx(uint64_t head)
{
    return (uint32_t)head;
}

static inline uint32_t hc_mem_lifo_tag(uint64_t head)
{
    return (uint32_t)(head >> 32);
}

static inline void hc_mem_lifo_init(hc_mem_lifo_t *l, bool tagged)
{
    atomic_init(&l->head, hc_mem_lifo_pack(HC_MEM_LIFO_NIL, 0));
    l->tag_step = tagged ? 1 : 0;
}

/* Pop step 1 (also the start of a push): the current head. */
static inline uint64_t hc_mem_lifo_load(hc_mem_lifo_t *l)
{
    return atomic_load_explicit(&l->head, memory_order_acquire);
}

/* Pop step 2: swing the head from *head_io to new_first (the next link of the
 * block(s) being taken). Fails, refreshing *head_io, if the head changed. */
static inline bool hc_mem_lifo_pop_commit(hc_mem_lifo_t *l, uint64_t *head_io, uint32_t new_first)
{
    uint64_t nh = hc_mem_lifo_pack(new_first, hc_mem_lifo_tag(*head_io) + l->tag_step);
    return atomic_compare_exchange_strong_explicit(&l->head, head_io, nh, memory_order_acquire,
                                                   memory_order_acquire);
}

/* Push step: make first the head, its chain's last next link having been set
 * to hc_mem_lifo_idx(*head_io) by the caller. Fails, refreshing *head_io. */
static inline bool hc_mem_lifo_push_commit(hc_mem_lifo_t *l, uint64_t *head_io, uint32_t first)
{
    uint64_t nh = hc_mem_lifo_pack(first, hc_mem_lifo_tag(*head_io) + l->tag_step);
    return atomic_compare_exchange_strong_explicit(&l->head, head_io, nh, memory_order_release,
                                                   memory_order_acquire);
}

#endif /* HC_MEM_LIFO_H */
