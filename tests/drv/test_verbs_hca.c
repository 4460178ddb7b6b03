/*
 * drv/verbs: the HCOMM_IB_HCA device filter, in the syntax NCCL_IB_HCA users
 * know: name prefixes with an optional port, "^" to exclude, "=" for exact
 * names; and how local ranks spread over the devices that pass
 * (hc_verbs_spread). (The rest of the driver needs an RDMA device:
 * tests/vm.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "drv/verbs/verbs.h"

static void t_empty(void **state)
{
    (void)state;
    assert_true(hc_verbs_hca_match("", "mlx5_0", 1));
    assert_true(hc_verbs_hca_match(NULL, "rxe0", 1));
}

static void t_prefix_and_port(void **state)
{
    (void)state;
    const char *s = "mlx5_0:1,mlx5_1";
    assert_true(hc_verbs_hca_match(s, "mlx5_0", 1));
    assert_false(hc_verbs_hca_match(s, "mlx5_0", 2)); /* port 1 only */
    assert_true(hc_verbs_hca_match(s, "mlx5_1", 1));
    assert_true(hc_verbs_hca_match(s, "mlx5_1", 2)); /* any port */
    assert_true(hc_verbs_hca_match(s, "mlx5_10", 1)); /* prefix of mlx5_1 */
    assert_false(hc_verbs_hca_match(s, "rxe0", 1));
    assert_true(hc_verbs_hca_match("mlx5", "mlx5_3", 1));
}

static void t_exact(void **state)
{
    (void)state;
    assert_true(hc_verbs_hca_match("=mlx5_1", "mlx5_1", 1));
    assert_false(hc_verbs_hca_match("=mlx5_1", "mlx5_10", 1));
    assert_false(hc_verbs_hca_match("=mlx5_1:2", "mlx5_1", 1));
    assert_true(hc_verbs_hca_match("=mlx5_1:2", "mlx5_1", 2));
}

static void t_exclude(void **state)
{
    (void)state;
    assert_false(hc_verbs_hca_match("^mlx5_0", "mlx5_0", 1));
    assert_true(hc_verbs_hca_match("^mlx5_0", "rxe0", 1));
    assert_false(hc_verbs_hca_match("^mlx5_0", "mlx5_01", 1)); /* prefix */
    assert_true(hc_verbs_hca_match("^=mlx5_0", "mlx5_01", 1)); /* exact */
    assert_false(hc_verbs_hca_match("^=mlx5_0", "mlx5_0", 1));
    assert_true(hc_verbs_hca_match("^mlx5_0:1", "mlx5_0", 2)); /* only port 1 excluded */
    assert_false(hc_verbs_hca_match("^rxe0,mlx5_0", "mlx5_0", 1));
}

static void t_malformed(void **state)
{
    (void)state;
    /* Empty entries and a lone "^" never crash; an empty list excludes nothing. */
    assert_false(hc_verbs_hca_match(",,", "rxe0", 1));
    assert_true(hc_verbs_hca_match("^", "rxe0", 1));
    assert_true(hc_verbs_hca_match(",rxe", "rxe0", 1));
}

/* 8 ranks of a node with 8 NICs, 4 on each of 2 NUMA nodes: each rank its
 * own NIC, on its node (ranks 0-3 on node 0, 4-7 on node 1); 2 NICs and 8
 * ranks: 4 per NIC, alternating; a rank on a node with no NIC, or whose
 * node is unknown, spreads over all of them. (Before, every rank took the
 * first device.) */
static void t_spread(void **state)
{
    (void)state;
    const int node8[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    int near, used[8] = {0};
    for (int r = 0; r < 8; r++) {
        int k = hc_verbs_spread(node8, 8, r / 4, r, &near);
        assert_int_equal(near, 4);
        assert_int_equal(node8[k], r / 4);
        used[k]++;
    }
    for (int k = 0; k < 8; k++)
        assert_int_equal(used[k], 1);
    /* NICs listed interleaved by node: still on the rank's node, each once */
    const int mixed[4] = {1, 0, 1, 0};
    int seen[4] = {0};
    for (int r = 0; r < 4; r++) {
        int k = hc_verbs_spread(mixed, 4, r / 2, r, &near);
        assert_int_equal(mixed[k], r / 2);
        seen[k]++;
    }
    for (int k = 0; k < 4; k++)
        assert_int_equal(seen[k], 1);
    const int node2[2] = {0, 0};
    for (int r = 0; r < 8; r++)
        assert_int_equal(hc_verbs_spread(node2, 2, 0, r, &near), r % 2);
    const int other[3] = {1, 1, 1};
    assert_int_equal(hc_verbs_spread(other, 3, 0, 4, &near), 1); /* none near: 4 mod 3 */
    assert_int_equal(near, 0);
    const int unknown[3] = {-1, -1, -1};
    assert_int_equal(hc_verbs_spread(unknown, 3, -1, 5, &near), 2);
    assert_int_equal(near, 0);
    assert_int_equal(hc_verbs_spread(unknown, 3, 0, -1, &near), 0); /* no local rank */
}

/* A node's 1 Gbit/s RoCE management port among four 400 Gbit/s IB HCAs is
 * left out; a 200 Gbit/s Ethernet port beside 200 Gbit/s IB ones too (the
 * link layer of the first fastest); equal ports all stay. */
static void t_fastest(void **state)
{
    (void)state;
    bool keep[5];
    const double g1[5] = {1, 400, 400, 400, 400};
    const uint8_t l1[5] = {2, 1, 1, 1, 1}; /* IBV_LINK_LAYER_ETHERNET 2, INFINIBAND 1 */
    hc_verbs_fastest(g1, l1, 5, keep);
    assert_false(keep[0]);
    for (int i = 1; i < 5; i++)
        assert_true(keep[i]);
    const double g2[3] = {200, 200, 200};
    const uint8_t l2[3] = {1, 2, 1};
    hc_verbs_fastest(g2, l2, 3, keep);
    assert_true(keep[0] && !keep[1] && keep[2]);
    const double g3[2] = {100, 100};
    const uint8_t l3[2] = {2, 2};
    hc_verbs_fastest(g3, l3, 2, keep);
    assert_true(keep[0] && keep[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_empty),   cmocka_unit_test(t_prefix_and_port), cmocka_unit_test(t_exact),
        cmocka_unit_test(t_exclude), cmocka_unit_test(t_malformed),   cmocka_unit_test(t_spread),
        cmocka_unit_test(t_fastest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
