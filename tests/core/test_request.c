/* core/request.c: reuse bumps the generation so stale rendezvous ids are
 * refused, user handles that are not live requests (stale, foreign, of an
 * earlier pool) are recognised, the pool grows past one slab, a failed
 * request keeps its own words, a request freed unfinished leaves no
 * reference to its slot behind; a refused best-effort control frame leaves
 * the caller's error words alone. */
#include "core/hc_core.h"
#include "core/p2p_int.h"
#include "base/config.h"
#include "mem/mem.h"

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

/* A control frame the driver refuses (a peer's connect failed) is best
 * effort: the thread's last error stays the caller's (a collective broken
 * by a revoke tells every member, a dead one too; REVOKED came back with
 * the words of that connect). */
static hcomm_status_t refusing_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr,
                                   const void *payload, void *cookie)
{
    (void)conn, (void)hdr, (void)payload, (void)cookie;
    return hc_error(HCOMM_ERR_PEER_FAILED, "mlx5 model: opening the peer model's segment");
}

static void test_control_keeps_error(void **state)
{
    (void)state;
    static const struct hc_drv_ops ops = {.name = "refusing", .put = refusing_put};
    hc_conn_t conn = {.ops = &ops, .peer = 3};
    hc_peer_t p = {.conn = &conn};
    hc_list_init(&p.pending);
    hc_error(HCOMM_ERR_REVOKED, "hcomm_allreduce: rank 1 revoked the communicator");
    hc_p2p_control(&p, HC_FRAME_GIVE_UP, 5, 0, 0);
    assert_string_equal(hcomm_last_error(), "hcomm_allreduce: rank 1 revoked the communicator");
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

/* A request freed before it completed (its collective failed) must leave
 * nothing pointing at its slot: a peer's fragment lane that was receiving
 * into it would otherwise complete (or write the rest of an old message
 * into) the next request that takes the slot, and a frame of it waiting to
 * be sent would go out for that request. Seen as a leaked error string in
 * mp_coll_disagree_fake_np3 under ASan: the comm's cleanup failed a lane's
 * stale request, which had become a free slot. */
static void test_free_unfinished_detaches(void **state)
{
    (void)state;
    hc_peer_t peers[2];
    memset(peers, 0, sizeof(peers));
    hc_p2p_partial_t lanes[HC_FRAME_LANES];
    memset(lanes, 0, sizeof(lanes));
    for (int w = 0; w < 2; w++)
        hc_list_init(&peers[w].pending);
    peers[1].partial = lanes;
    hc_ctx.peers = peers;
    hc_ctx.size = 2;

    struct hcomm_request *a = hc_request_alloc(HC_REQ_RECV);
    assert_non_null(a);
    lanes[3].req = a;
    lanes[3].active = true;
    struct hcomm_request *s = hc_request_alloc(HC_REQ_SEND);
    assert_non_null(s);
    hc_pending_frame_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->req = s;
    f->hdr.lane = 2;
    hc_p2p_pending_add(&peers[1], f);

    hc_request_free(a); /* neither completed: their operation gave up */
    hc_request_free(s);
    assert_null(lanes[3].req);
    assert_true(lanes[3].active); /* the rest of the message is swallowed */
    assert_true(hc_list_empty(&peers[1].pending));
    assert_int_equal(hc_ctx.npending, 0);

    /* a completed request is not looked for: the lane let it go itself */
    struct hcomm_request *b = hc_request_alloc(HC_REQ_RECV);
    assert_ptr_equal(b, s); /* LIFO: the slots come back */
    hc_request_complete(b, HCOMM_OK);
    hc_request_free(b);

    hc_ctx.peers = NULL;
    hc_ctx.size = 0;
}

/* Registration hooks that count. */
static int n_reg, n_dereg;
static hcomm_status_t count_reg(void *arg, hc_mem_region_t *r)
{
    (void)arg, (void)r;
    n_reg++;
    return HCOMM_OK;
}
static void count_dereg(void *arg, hc_mem_region_t *r)
{
    (void)arg, (void)r;
    n_dereg++;
}

/* A rendezvous request freed unfinished (a collective that failed frees its
 * requests still in flight to live peers), or freed done with its record
 * still set, gives back the registration it held. Seen as a 64-byte hc_verbs_reg_t leaked under ASan in
 * shrink_mlx5_model: the record stayed referenced to the end, and teardown
 * dropped the hooks before its last put. */
static void test_free_unfinished_releases(void **state)
{
    (void)state;
    assert_int_equal(hc_config_load(), HCOMM_OK);
    assert_int_equal(hc_mem_init(), HCOMM_OK);
    hc_mem_set_reg_hooks(count_reg, count_dereg, NULL);
    int pool = n_reg; /* the pool's regions, registered by the hooks too */
    static uint8_t buf[3][8192];
    for (int k = 0; k < 3; k++) {
        struct hcomm_request *r = hc_request_alloc(k == 1 ? HC_REQ_SEND : HC_REQ_RECV);
        assert_non_null(r);
        hc_list_init(&r->link);
        assert_int_equal(hc_mem_reg_cache_get(buf[k], sizeof(buf[k]), &r->rndv_held), HCOMM_OK);
        r->rndv = k != 2; /* on the rendezvous list, or between steps */
        if (k == 2) hc_request_complete(r, HCOMM_ERR_PEER_FAILED);
        hc_request_free(r);
    }
    assert_int_equal(n_reg, pool + 3);
    /* Unreferenced records are deregistered here; referenced ones are not. */
    hc_mem_set_reg_hooks(NULL, NULL, NULL);
    assert_int_equal(n_dereg, pool + 3);
    hc_mem_finalize();
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
        cmocka_unit_test_setup_teardown(test_free_unfinished_detaches, setup, teardown),
        cmocka_unit_test(test_control_keeps_error),
        cmocka_unit_test_setup_teardown(test_free_unfinished_releases, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
