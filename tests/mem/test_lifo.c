/*
 * mem/lifo.h: the classic ABA interleaving, driven step by step on an
 * untagged list (where it corrupts the list) and on the tagged list the pool
 * uses (where the stale CAS fails). No threads needed: "A" and "B" are two
 * sequences of the same step functions the pool runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mem/lifo.h"

enum { X = 0, Y = 1, Z = 2, NBLK = 3 };

static _Atomic uint32_t next_link[NBLK];

static void push(hc_mem_lifo_t *l, uint32_t idx)
{
    uint64_t h = hc_mem_lifo_load(l);
    do {
        atomic_store(&next_link[idx], hc_mem_lifo_idx(h));
    } while (!hc_mem_lifo_push_commit(l, &h, idx));
}

static uint32_t pop(hc_mem_lifo_t *l)
{
    uint64_t h = hc_mem_lifo_load(l);
    for (;;) {
        uint32_t idx = hc_mem_lifo_idx(h);
        if (idx == HC_MEM_LIFO_NIL) return idx;
        if (hc_mem_lifo_pop_commit(l, &h, atomic_load(&next_link[idx]))) return idx;
    }
}

/* Runs the interleaving; returns whether A's stale CAS succeeded, and leaves
 * the list's head in *head_after. */
static bool aba_interleaving(bool tagged, uint32_t *head_after)
{
    hc_mem_lifo_t l;
    hc_mem_lifo_init(&l, tagged);
    push(&l, Z);
    push(&l, Y);
    push(&l, X); /* X -> Y -> Z */

    /* A: pop step 1, reads head X and its next Y, then is preempted. */
    uint64_t a_head = hc_mem_lifo_load(&l);
    uint32_t a_next = atomic_load(&next_link[hc_mem_lifo_idx(a_head)]);
    assert_int_equal(hc_mem_lifo_idx(a_head), X);
    assert_int_equal(a_next, Y);

    /* B: pops X and Y (now B owns Y), pushes X back: head is X again. */
    assert_int_equal(pop(&l), X);
    assert_int_equal(pop(&l), Y);
    push(&l, X); /* X -> Z */
    assert_int_equal(hc_mem_lifo_idx(hc_mem_lifo_load(&l)), X);

    /* A: pop step 2 with its stale snapshot. */
    bool won = hc_mem_lifo_pop_commit(&l, &a_head, a_next);
    *head_after = hc_mem_lifo_idx(hc_mem_lifo_load(&l));
    return won;
}

static void test_aba_untagged_corrupts(void **state)
{
    (void)state;
    uint32_t head;
    /* The stale CAS wrongly succeeds: the head is now Y, a block B owns. */
    assert_true(aba_interleaving(false, &head));
    assert_int_equal(head, Y);
}

static void test_aba_tagged_detects(void **state)
{
    (void)state;
    uint32_t head;
    /* The tag moved on: A's CAS fails and refreshes its snapshot... */
    assert_false(aba_interleaving(true, &head));
    assert_int_equal(head, X);
}

static void test_tagged_retry_after_aba(void **state)
{
    (void)state;
    hc_mem_lifo_t l;
    hc_mem_lifo_init(&l, true);
    push(&l, Z);
    push(&l, Y);
    push(&l, X);
    uint64_t a_head = hc_mem_lifo_load(&l);
    uint32_t a_next = atomic_load(&next_link[X]);
    assert_int_equal(pop(&l), X);
    assert_int_equal(pop(&l), Y);
    push(&l, X);
    assert_false(hc_mem_lifo_pop_commit(&l, &a_head, a_next));
    /* ...and A's retry with the refreshed head takes X and leaves Z. */
    assert_int_equal(hc_mem_lifo_idx(a_head), X);
    assert_true(hc_mem_lifo_pop_commit(&l, &a_head, atomic_load(&next_link[X])));
    assert_int_equal(pop(&l), Z);
    assert_int_equal(pop(&l), HC_MEM_LIFO_NIL);
    /* Every successful push and pop moved the tag. */
    assert_int_equal(hc_mem_lifo_tag(hc_mem_lifo_load(&l)), 3 + 2 + 1 + 1 + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aba_untagged_corrupts),
        cmocka_unit_test(test_aba_tagged_detects),
        cmocka_unit_test(test_tagged_retry_after_aba),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
