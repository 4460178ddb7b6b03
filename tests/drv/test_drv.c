/* drv/drv.c: registration fills every missing op, the ladder picks the
 * highest-priority driver whose probe succeeds, HCOMM_NET forces one (and an
 * unusable forced driver is an error naming it), a job with peers on other
 * nodes and no usable network driver fails with a clear message, and
 * hcomm_info's description names the skip reasons. Two fake network drivers
 * register here next to the real ones. */
#include "base/config.h"
#include "drv/drv.h"
#include "drv/shm/shm.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static bool fake_hi_usable = true;
static int opened_hi, opened_lo;
static hc_drv_t fake_drv_hi, fake_drv_lo;

static hcomm_status_t fake_hi_probe(const hc_drv_env_t *env, char *why, size_t len)
{
    (void)env;
    if (fake_hi_usable)
        return HCOMM_OK;
    snprintf(why, len, "no fake hardware");
    return HCOMM_ERR_UNSUPPORTED;
}
static hcomm_status_t fake_hi_open(const hc_drv_env_t *env, hc_drv_t **d)
{
    (void)env;
    opened_hi++;
    *d = &fake_drv_hi;
    return HCOMM_OK;
}
static hcomm_status_t fake_lo_probe(const hc_drv_env_t *env, char *why, size_t len)
{
    (void)env;
    (void)why;
    (void)len;
    return HCOMM_OK;
}
static hcomm_status_t fake_lo_open(const hc_drv_env_t *env, hc_drv_t **d)
{
    (void)env;
    opened_lo++;
    *d = &fake_drv_lo;
    return HCOMM_OK;
}

/* A driver with only probe and open: every other op from the base table. */
static const struct hc_drv_ops fake_hi_ops = {
    .name = "fakehi",
    .scope = HC_DRV_SCOPE_NET,
    .priority = 90,
    .probe = fake_hi_probe,
    .open = fake_hi_open,
};
HC_DRV_REGISTER(fake_hi_ops)

static const struct hc_drv_ops fake_lo_ops = {
    .name = "fakelo",
    .scope = HC_DRV_SCOPE_NET,
    .priority = 1,
    .probe = fake_lo_probe,
    .open = fake_lo_open,
};
HC_DRV_REGISTER(fake_lo_ops)

static int node_of[2] = {0, 1};
static int locals[1] = {0};
static hc_drv_env_t env = {.rank = 0, .size = 2, .local_rank = 0, .local_size = 1,
                           .local_ranks = locals, .node_of_rank = node_of,
                           .node_id = "test", .job_key = "k", .bootstrap_host = ""};

static void close_all(hc_drv_t **d, int n)
{
    for (int i = 0; i < n; i++)
        if (d[i] != &fake_drv_hi && d[i] != &fake_drv_lo)
            d[i]->ops->close(d[i]);
}

static void test_defaults_filled(void **state)
{
    (void)state;
    const struct hc_drv_ops *o = hc_drv_find("fakehi");
    assert_non_null(o);
    /* Every op the driver left NULL comes from the base table. */
    assert_non_null(o->connect);
    assert_non_null(o->put);
    assert_non_null(o->get);
    assert_non_null(o->progress);
    assert_non_null(o->shared_get);
    assert_non_null(o->shared_put);
    assert_int_equal(o->put(NULL, NULL, NULL, NULL), HCOMM_ERR_UNSUPPORTED);
    assert_null(o->shared_get(NULL, 7, 64, 2));
    assert_non_null(hc_drv_find("self"));
    assert_non_null(hc_drv_find("SHM")); /* names are case-insensitive */
    assert_null(hc_drv_find("nosuch"));
}

/* The registry is in ladder order whatever the link order: self, node,
 * net; inside a scope by priority, highest first. This test's own drivers
 * register after the library's (its constructors run last) and still land
 * in place: fakehi (90) first of the network drivers, fakelo (1) after tcp
 * (10). */
static void test_registry_in_ladder_order(void **state)
{
    (void)state;
    int n = hc_drv_count(), hi = -1, lo = -1, tcp = -1;
    assert_true(n >= 5);
    for (int i = 0; i < n; i++) {
        const struct hc_drv_ops *o = hc_drv_at(i);
        if (i > 0) {
            const struct hc_drv_ops *p = hc_drv_at(i - 1);
            assert_true(p->scope <= o->scope);
            if (p->scope == o->scope) assert_true(p->priority >= o->priority);
        }
        if (!strcmp(o->name, "fakehi")) hi = i;
        if (!strcmp(o->name, "fakelo")) lo = i;
        if (!strcmp(o->name, "tcp")) tcp = i;
    }
    assert_true(hi >= 0 && tcp > hi && lo > tcp);
    assert_string_equal(hc_drv_at(0)->name, "self");
    assert_int_equal(hc_drv_at(hi - 1)->scope, HC_DRV_SCOPE_NODE);
}

static void test_ladder_picks_best_usable(void **state)
{
    (void)state;
    hc_drv_t *d[HC_DRV_MAX];
    int n = 0;
    setenv("HCOMM_NET", "auto", 1);
    assert_int_equal(hc_config_load(), HCOMM_OK);
    fake_hi_usable = true;
    opened_hi = opened_lo = 0;
    assert_int_equal(hc_drv_select_open(&env, d, &n), HCOMM_OK);
    assert_int_equal(opened_hi, 1); /* priority 90 beats tcp (10) and fakelo (1) */
    assert_int_equal(opened_lo, 0);
    close_all(d, n);

    fake_hi_usable = false; /* its probe fails: the next best (tcp) is chosen */
    opened_hi = opened_lo = 0;
    assert_int_equal(hc_drv_select_open(&env, d, &n), HCOMM_OK);
    assert_int_equal(opened_hi, 0);
    bool has_net = false;
    for (int i = 0; i < n; i++)
        has_net |= d[i]->ops->scope == HC_DRV_SCOPE_NET;
    assert_true(has_net);
    close_all(d, n);
}

static void test_forced(void **state)
{
    (void)state;
    hc_drv_t *d[HC_DRV_MAX];
    int n = 0;
    setenv("HCOMM_NET", "fakelo", 1);
    assert_int_equal(hc_config_load(), HCOMM_OK);
    fake_hi_usable = true;
    opened_hi = opened_lo = 0;
    assert_int_equal(hc_drv_select_open(&env, d, &n), HCOMM_OK);
    assert_int_equal(opened_lo, 1);
    assert_int_equal(opened_hi, 0);
    close_all(d, n);

    fake_hi_usable = false;
    setenv("HCOMM_NET", "fakehi", 1);
    assert_int_equal(hc_config_load(), HCOMM_OK);
    assert_int_equal(hc_drv_select_open(&env, d, &n), HCOMM_ERR_NO_DEVICE);
    assert_non_null(strstr(hc_error_last(), "HCOMM_NET=fakehi"));
    unsetenv("HCOMM_NET");
}

static void test_single_node_needs_no_net(void **state)
{
    (void)state;
    hc_drv_t *d[HC_DRV_MAX];
    int n = 0;
    int same[2] = {0, 0};
    hc_drv_env_t one = env;
    one.size = 1;
    one.node_of_rank = same;
    assert_int_equal(hc_config_load(), HCOMM_OK);
    opened_hi = opened_lo = 0;
    assert_int_equal(hc_drv_select_open(&one, d, &n), HCOMM_OK);
    assert_int_equal(n, 1); /* self only */
    assert_string_equal(d[0]->ops->name, "self");
    assert_int_equal(opened_hi + opened_lo, 0);
    close_all(d, n);
}

static int lines;
static bool saw_reason;
static void count_line(const char *text, void *arg)
{
    (void)arg;
    if (text[0] != ' ') lines++; /* one line per driver; its describe lines are indented */
    if (strstr(text, "fakehi") && strstr(text, "no fake hardware"))
        saw_reason = true;
}

static void test_describe(void **state)
{
    (void)state;
    fake_hi_usable = false;
    lines = 0;
    saw_reason = false;
    hc_drv_describe(&env, count_line, NULL);
    assert_int_equal(lines, hc_drv_count());
    assert_true(saw_reason);
}

/* shm's automatic slot count: 64 on small nodes; on crowded ones one rank's
 * slots from all its local peers stay within the budget (a node segment of
 * 64 x 8 KiB slots at 256 ranks is 32 GiB, touched at creation: the OOM
 * killer ended init_scale.sh's 256-rank job), never below 4. */
static void test_shm_auto_slots(void **state)
{
    (void)state;
    const size_t k8 = 8192, m16 = 16u << 20;
    assert_int_equal(hc_shm_auto_slots(2, k8, m16), 64);
    assert_int_equal(hc_shm_auto_slots(8, k8, m16), 64);
    assert_int_equal(hc_shm_auto_slots(32, k8, m16), 64); /* 31 x 512 KiB < 16 MiB */
    assert_int_equal(hc_shm_auto_slots(64, k8, m16), 32);
    assert_int_equal(hc_shm_auto_slots(128, k8, m16), 16);
    assert_int_equal(hc_shm_auto_slots(256, k8, m16), 8); /* 255 x 64 KiB */
    assert_int_equal(hc_shm_auto_slots(512, k8, m16), 4);
    assert_int_equal(hc_shm_auto_slots(1024, k8, m16), 4); /* the floor */
    assert_int_equal(hc_shm_auto_slots(8, 1u << 20, m16), 4); /* big slots */
    for (int L = 2; L <= 512; L++) {
        uint32_t n = hc_shm_auto_slots(L, k8, m16);
        assert_true(n >= 4 && n <= 64 && (n & (n - 1)) == 0);
        assert_true(n == 4 || (uint64_t)(L - 1) * n * k8 <= m16);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_filled), cmocka_unit_test(test_ladder_picks_best_usable),
        cmocka_unit_test(test_forced),          cmocka_unit_test(test_single_node_needs_no_net),
        cmocka_unit_test(test_describe),        cmocka_unit_test(test_registry_in_ladder_order),
        cmocka_unit_test(test_shm_auto_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
