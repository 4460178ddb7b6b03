/* core/config.c: defaults, size suffixes, malformed values named in the
 * error, and the table walk hcomm_info -c prints. */
#include "base/config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_defaults(void **state)
{
    (void)state;
    unsetenv("HCOMM_TIMEOUT");
    unsetenv("HCOMM_GROUP_FUSE");
    unsetenv("HCOMM_SHM");
    assert_int_equal(hc_config_load(), HCOMM_OK);
    assert_true(hc_cfg.timeout == 300.0);
    assert_int_equal(hc_cfg.group_fuse, 65536);
    assert_true(hc_cfg.shm);
    assert_string_equal(hc_cfg.algo, "auto");
}

static void test_sizes(void **state)
{
    (void)state;
    size_t v;
    assert_true(hc_config_parse_size("4096", &v) && v == 4096);
    assert_true(hc_config_parse_size("8K", &v) && v == 8192);
    assert_true(hc_config_parse_size("64M", &v) && v == 64u << 20);
    assert_true(hc_config_parse_size("1G", &v) && v == 1u << 30);
    assert_true(hc_config_parse_size("2MiB", &v) && v == 2u << 20);
    assert_false(hc_config_parse_size("0x10", &v)); /* decimal only */
    assert_true(hc_config_parse_size("010", &v) && v == 10);
    assert_false(hc_config_parse_size("", &v));
    assert_false(hc_config_parse_size("-1", &v));
    assert_false(hc_config_parse_size("12Q", &v));
    assert_false(hc_config_parse_size("99999999999999999999T", &v));
}

static void test_env_values(void **state)
{
    (void)state;
    setenv("HCOMM_TIMEOUT", "2.5", 1);
    setenv("HCOMM_GROUP_FUSE", "16K", 1);
    setenv("HCOMM_SHM", "off", 1);
    assert_int_equal(hc_config_load(), HCOMM_OK);
    assert_true(hc_cfg.timeout == 2.5);
    assert_int_equal(hc_cfg.group_fuse, 16384);
    assert_false(hc_cfg.shm);
    unsetenv("HCOMM_TIMEOUT");
    unsetenv("HCOMM_GROUP_FUSE");
    unsetenv("HCOMM_SHM");
}

static void test_bad_values_named(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"HCOMM_TIMEOUT", "soon"}, {"HCOMM_TIMEOUT", "-3"},  {"HCOMM_SHM", "maybe"},
        {"HCOMM_SHM_SLOTS", "12x"}, {"HCOMM_LOG", "loud"},    {"HCOMM_COLL_CHUNK", "1Z"},
        {"HCOMM_TIMEOUT", "0"},     {"HCOMM_TIMEOUT", "0x10"}, {"HCOMM_TIMEOUT", "inf"},
        {"HCOMM_TIMEOUT", "nan"},   {"HCOMM_TIMEOUT", "0x1p4"}, {"HCOMM_SHM_SLOTS", "0x10"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv(bad[i][0], bad[i][1], 1);
        hcomm_status_t st = hc_config_load();
        assert_int_equal(st, HCOMM_ERR_INVALID);
        assert_non_null(strstr(hc_error_last(), bad[i][0]));
        unsetenv(bad[i][0]);
    }
    assert_int_equal(hc_config_load(), HCOMM_OK);
}

/* Huge timeouts saturate instead of overflowing the deadline arithmetic
 * (1e15 s used to time out at once). */
static void test_timeout_saturates(void **state)
{
    (void)state;
    static const char *const huge[] = {"1e15", "1e17", "1e300", "99999999999999999"};
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        setenv("HCOMM_TIMEOUT", huge[i], 1);
        assert_int_equal(hc_config_load(), HCOMM_OK);
        assert_true(hc_cfg.timeout == HC_TIMEOUT_MAX);
        uint64_t now = hc_time_ns();
        uint64_t deadline = now + (uint64_t)(hc_cfg.timeout * 1e9);
        assert_true(deadline > now + 1000000000ull * 86400 * 365);
    }
    setenv("HCOMM_TIMEOUT", "1e9", 1);
    assert_int_equal(hc_config_load(), HCOMM_OK);
    assert_true(hc_cfg.timeout == 1e9);
    setenv("HCOMM_TIMEOUT", "16", 1);
    assert_int_equal(hc_config_load(), HCOMM_OK);
    assert_true(hc_cfg.timeout == 16.0);
    unsetenv("HCOMM_TIMEOUT");
}

static int seen;
static void count_knob(const char *env, const char *value, const char *def, const char *help,
                       void *arg)
{
    (void)arg;
    assert_true(!strncmp(env, "HCOMM_", 6));
    assert_non_null(value);
    assert_non_null(def);
    assert_true(strlen(help) > 10);
    seen++;
}

static void test_foreach(void **state)
{
    (void)state;
    assert_int_equal(hc_config_load(), HCOMM_OK);
    seen = 0;
    hc_config_foreach(count_knob, NULL);
    assert_true(seen >= 20);
}

/* A driver's own knobs: declared in its table, read by hc_config_load with
 * the core's, listed after them (drivers sorted by name), errors named. */
static int64_t zz_depth;
static bool zz_fast;
static const hc_config_knob_t zz_knobs[] = {
    HC_KNOB_INT(zz_depth, "HCOMM_ZZTEST_DEPTH", "7", "zztest: a test driver's queue depth"),
    HC_KNOB_BOOL(zz_fast, "HCOMM_ZZTEST_FAST", "no", "zztest: a test driver's fast mode"),
};
HC_CONFIG_KNOBS("zztest", zz_knobs)

static char order[256][40];
static int norder;
static void record_knob(const char *env, const char *value, const char *def, const char *help,
                        void *arg)
{
    (void)value, (void)def, (void)help, (void)arg;
    if (norder < 256)
        snprintf(order[norder++], sizeof(order[0]), "%s", env);
}

static void test_driver_knobs(void **state)
{
    (void)state;
    unsetenv("HCOMM_ZZTEST_DEPTH");
    assert_int_equal(hc_config_load(), HCOMM_OK);
    assert_int_equal(zz_depth, 7);
    assert_false(zz_fast);
    setenv("HCOMM_ZZTEST_DEPTH", "12", 1);
    setenv("HCOMM_ZZTEST_FAST", "on", 1);
    assert_int_equal(hc_config_load(), HCOMM_OK);
    assert_int_equal(zz_depth, 12);
    assert_true(zz_fast);
    setenv("HCOMM_ZZTEST_DEPTH", "0x10", 1);
    assert_int_equal(hc_config_load(), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hcomm_last_error(), "HCOMM_ZZTEST_DEPTH"));
    unsetenv("HCOMM_ZZTEST_DEPTH");
    unsetenv("HCOMM_ZZTEST_FAST");
    assert_int_equal(hc_config_load(), HCOMM_OK);
    /* The core's knobs first, then drivers by name: shm before tcp before
     * zztest, so docs/config.md does not depend on constructor order. */
    norder = 0;
    hc_config_foreach(record_knob, NULL);
    int log = -1, shm = -1, tcp = -1, zz = -1;
    for (int i = 0; i < norder; i++) {
        if (!strcmp(order[i], "HCOMM_LOG")) log = i;
        if (!strcmp(order[i], "HCOMM_SHM_SLOTS")) shm = i;
        if (!strcmp(order[i], "HCOMM_CONN_PER_PEER")) tcp = i;
        if (!strcmp(order[i], "HCOMM_ZZTEST_DEPTH")) zz = i;
    }
    assert_true(log == 0 && shm > log && tcp > shm && zz > tcp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),       cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_env_values),     cmocka_unit_test(test_bad_values_named),
        cmocka_unit_test(test_foreach),        cmocka_unit_test(test_timeout_saturates),
        cmocka_unit_test(test_driver_knobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
