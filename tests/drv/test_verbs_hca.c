/*
 * drv/verbs: the HCOMM_IB_HCA device filter, in the syntax NCCL_IB_HCA users
 * know: name prefixes with an optional port, "^" to exclude, "=" for exact
 * names. (The rest of the driver needs an RDMA device: tests/vm.)
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_empty),   cmocka_unit_test(t_prefix_and_port), cmocka_unit_test(t_exact),
        cmocka_unit_test(t_exclude), cmocka_unit_test(t_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
