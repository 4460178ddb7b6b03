/* core/request.c: reuse bumps the generation so stale rendezvous ids are
 * refused, user handles that are not live requests (stale, foreign, of an
 * earlier pool) are recognised, the pool grows past one slab, a failed
 * request keeps its own words. */
#include "core/hc_core.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

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

/* A user handle of a live request names it; NULL, garbage, pointers and
 * internal requests name nothing. */
static struct hcomm_request *user_alloc(hc_req_kind_t kind)
{
    struct hcomm_request *r = hc_request_alloc(kind);
    assert_non_null(r);
    r->user = true;
    return r;
}

static void test_handles(void **state)
{
    (void)state;
    struct hcomm_request *a = user_alloc(HC_REQ_SEND);
    hcomm_request_t h = hc_request_handle(a);
    assert_ptr_equal(hc_request_from_handle(h), a);
    assert_null(hc_request_from_handle(NULL));
    int on_stack;
    assert_null(hc_request_from_handle((hcomm_request_t)(void *)&on_stack));
    assert_null(hc_request_from_handle((hcomm_request_t)(void *)a)); /* the pointer is no handle */
    assert_null(hc_request_from_handle((hcomm_request_t)(uintptr_t)0x5e5e5e5f));
    struct hcomm_request *internal = hc_request_alloc(HC_REQ_RECV);
    assert_null(hc_request_from_handle(hc_request_handle(internal)));
    hc_request_free(internal);
    hc_request_free(a);
    assert_null(hc_request_from_handle(h)); /* completed */
    char why[160];
    hc_request_handle_explain(h, why, sizeof(why));
    assert_non_null(strstr(why, "already completed"));
    hc_request_handle_explain(NULL, why, sizeof(why));
    assert_string_equal(why, "NULL");
}

/* The case: a freed handle used to alias the next request of the
 * slot (LIFO reuse), so hcomm_wait(stale) completed somebody else's. */
static void test_stale_handle(void **state)
{
    (void)state;
    struct hcomm_request *a = user_alloc(HC_REQ_SEND);
    hcomm_request_t stale = hc_request_handle(a);
    hc_request_free(a);
    struct hcomm_request *b = user_alloc(HC_REQ_RECV);
    assert_ptr_equal(b, a); /* the same slot... */
    assert_null(hc_request_from_handle(stale)); /* ...but the old handle names nothing */
    assert_ptr_equal(hc_request_from_handle(hc_request_handle(b)), b);
    char why[160];
    hc_request_handle_explain(stale, why, sizeof(why));
    assert_non_null(strstr(why, "stale"));
    hc_request_free(b);
}

/* Handles of an earlier pool (before hcomm_finalize) match nothing in the
 * next one, although its slots start over. */
static void test_handle_across_pools(void **state)
{
    (void)state;
    enum { N = 8 };
    hcomm_request_t old[N];
    for (int i = 0; i < N; i++) {
        struct hcomm_request *r = user_alloc(HC_REQ_COLL);
        old[i] = hc_request_handle(r);
        if (i % 2)
            hc_request_free(r); /* some completed, some still live at fini */
    }
    hc_request_pool_fini();
    assert_int_equal(hc_request_pool_init(), HCOMM_OK);
    struct hcomm_request *fresh[N];
    for (int i = 0; i < N; i++)
        fresh[i] = user_alloc(HC_REQ_COLL);
    for (int i = 0; i < N; i++)
        assert_null(hc_request_from_handle(old[i]));
    for (int i = 0; i < N; i++)
        hc_request_free(fresh[i]);
}

/* The words of a request's failure come back with its status, whatever
 * failed after it (a revoke processed before the caller waited). */
static void test_own_error(void **state)
{
    (void)state;
    struct hcomm_request *a = hc_request_alloc(HC_REQ_COLL), *b = hc_request_alloc(HC_REQ_RECV);
    hc_error(HCOMM_ERR_PEER_FAILED, "allreduce: peer rank 2 (world) failed");
    hc_request_complete(a, HCOMM_ERR_PEER_FAILED);
    hc_error(HCOMM_ERR_REVOKED, "recv: communicator rank 1 revoked the communicator");
    hc_request_complete(b, HCOMM_ERR_REVOKED);
    assert_int_equal(hc_request_result(a), HCOMM_ERR_PEER_FAILED);
    assert_string_equal(hc_error_last(), "allreduce: peer rank 2 (world) failed");
    assert_int_equal(hc_request_result(b), HCOMM_ERR_REVOKED);
    assert_string_equal(hc_error_last(), "recv: communicator rank 1 revoked the communicator");
    hc_request_free(a);
    struct hcomm_request *c = hc_request_alloc(HC_REQ_SEND); /* a's slot, no words of a's */
    assert_ptr_equal(c, a);
    hc_request_complete(c, HCOMM_OK);
    assert_int_equal(hc_request_result(c), HCOMM_OK);
    assert_string_equal(hc_error_last(), "recv: communicator rank 1 revoked the communicator");
    hc_request_free(c);
    /* b is never freed: the pool's teardown frees its words (ASan's leak check) */
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
        r[i]->user = true;
    for (int i = 0; i < N; i++)
        assert_ptr_equal(hc_request_from_handle(hc_request_handle(r[i])), r[i]);
    for (int i = 0; i < N; i++)
        hc_request_free(r[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stale_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_handles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_handle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_handle_across_pools, setup, teardown),
        cmocka_unit_test_setup_teardown(test_growth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_own_error, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
