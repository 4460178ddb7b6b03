/* core/request.c: reuse bumps the generation so stale rendezvous ids are
 * refused, handles that are not live requests are recognised, the pool
 * grows past one slab. */
#include "core/hc_core.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

static int setup(void **state)
{
    (void)state;
    return hc_request_pool_init() == HCOMM_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    hc_request_pool_fini();
    return 0;
}

static void test_stale_ids(void **state)
{
    (void)state;
    struct hcomm_request *a = hc_request_alloc(HC_REQ_SEND);
    assert_non_null(a);
    uint64_t id = hc_request_id(a);
    assert_ptr_equal(hc_request_by_id(id), a);
    hc_request_free(a);
    assert_null(hc_request_by_id(id));
    struct hcomm_request *b = hc_request_alloc(HC_REQ_RECV);
    assert_ptr_equal(b, a); /* LIFO reuse of the same slot... */
    assert_null(hc_request_by_id(id)); /* ...but the old id stays dead */
    assert_ptr_equal(hc_request_by_id(hc_request_id(b)), b);
    assert_null(hc_request_by_id(0xffffffffull));
    hc_request_free(b);
}

static void test_valid(void **state)
{
    (void)state;
    struct hcomm_request *a = hc_request_alloc(HC_REQ_SEND);
    assert_true(hc_request_valid(a));
    assert_false(hc_request_valid(NULL));
    int on_stack;
    assert_false(hc_request_valid((struct hcomm_request *)&on_stack));
    assert_false(hc_request_valid((struct hcomm_request *)((char *)a + 1)));
    hc_request_free(a);
    assert_false(hc_request_valid(a)); /* freed */
}

static void test_growth(void **state)
{
    (void)state;
    enum { N = 1000 };
    struct hcomm_request *r[N];
    for (int i = 0; i < N; i++) {
        r[i] = hc_request_alloc(HC_REQ_COLL);
        assert_non_null(r[i]);
        assert_int_equal(r[i]->status, HCOMM_IN_PROGRESS);
        assert_false(r[i]->done);
        for (int j = 0; j < i; j += 97)
            assert_ptr_not_equal(r[i], r[j]);
    }
    for (int i = 0; i < N; i++)
        assert_true(hc_request_valid(r[i]));
    for (int i = 0; i < N; i++)
        hc_request_free(r[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stale_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_valid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_growth, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
