/*
 * hc_bootstrap_params_from_env for every launcher flavour, their precedence,
 * and every error case: each must be ERR_INVALID with a message naming the
 * variable and its value, and must leave the output untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "core/bootstrap.h"

#include <stdlib.h>
#include <string.h>

static const char *const all_vars[] = {
    "HCOMM_RANK",
    "HCOMM_SIZE",
    "HCOMM_LOCAL_RANK",
    "HCOMM_LOCAL_SIZE",
    "HCOMM_BOOTSTRAP",
    "HCOMM_JOB_KEY",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_NODEID",
    "SLURM_CLUSTER_NAME",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_FD",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
};

static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < HC_ARRAY_SIZE(all_vars); i++)
        unsetenv(all_vars[i]);
    return 0;
}

/* setenv pairs, NULL-terminated. */
static void set(const char *name, const char *value, ...)
{
    va_list ap;
    va_start(ap, value);
    while (name) {
        setenv(name, value, 1);
        name = va_arg(ap, const char *);
        if (name) value = va_arg(ap, const char *);
    }
    va_end(ap);
}

static hc_bootstrap_params_t ok(void)
{
    hc_bootstrap_params_t p;
    hcomm_status_t st = hc_bootstrap_params_from_env(&p);
    if (st != HCOMM_OK) fail_msg("unexpected error: %s", hc_error_last());
    return p;
}

/* Expects ERR_INVALID whose message contains every given fragment. */
static void bad(const char *frag1, const char *frag2)
{
    hc_bootstrap_params_t p;
    memset(&p, 0x5a, sizeof(p));
    hcomm_status_t st = hc_bootstrap_params_from_env(&p);
    if (st != HCOMM_ERR_INVALID) fail_msg("expected ERR_INVALID mentioning %s, got %d", frag1, st);
    const char *msg = hc_error_last();
    if (!strstr(msg, frag1) || (frag2 && !strstr(msg, frag2)))
        fail_msg("message \"%s\" does not name \"%s\"/\"%s\"", msg, frag1, frag2 ? frag2 : "");
    for (size_t i = 0; i < sizeof(p); i++) {
        if (((unsigned char *)&p)[i] != 0x5a) fail_msg("output modified on error");
    }
}

static void test_single(void **state)
{
    (void)state;
    hc_bootstrap_params_t p = ok();
    assert_int_equal(p.rank, 0);
    assert_int_equal(p.size, 1);
    assert_string_equal(p.url, "");
    assert_string_equal(p.job_key, "");
    assert_string_equal(p.source, "single");
    assert_int_equal(hc_bootstrap_params_from_env(NULL), HCOMM_ERR_INVALID);
}

static void test_hcommrun(void **state)
{
    (void)state;
    set("HCOMM_RANK", "2", "HCOMM_SIZE", "4", "HCOMM_LOCAL_RANK", "0", "HCOMM_LOCAL_SIZE", "2",
        "HCOMM_BOOTSTRAP", "tcp://127.0.0.1:5000", "HCOMM_JOB_KEY", "s3cret", NULL);
    hc_bootstrap_params_t p = ok();
    assert_int_equal(p.rank, 2);
    assert_int_equal(p.size, 4);
    assert_int_equal(p.local_rank, 0);
    assert_int_equal(p.local_size, 2);
    assert_string_equal(p.url, "tcp://127.0.0.1:5000");
    assert_string_equal(p.job_key, "s3cret");
    assert_string_equal(p.source, "hcommrun");

    /* hcommrun wins over torchrun variables that leak in from a wrapper. */
    set("RANK", "0", "WORLD_SIZE", "8", "MASTER_ADDR", "x", "MASTER_PORT", "1", NULL);
    p = ok();
    assert_string_equal(p.source, "hcommrun");
    assert_int_equal(p.size, 4);

    /* Local values are optional. */
    clear_env(NULL);
    set("HCOMM_RANK", "0", "HCOMM_SIZE", "1", NULL);
    p = ok();
    assert_int_equal(p.local_rank, -1);
    assert_int_equal(p.local_size, -1);
    assert_string_equal(p.url, "");

    set("HCOMM_RANK", "1", "HCOMM_SIZE", "2", "HCOMM_BOOTSTRAP", "tcp://[fe80::1%eth0]:7", NULL);
    p = ok();
    assert_string_equal(p.url, "tcp://[fe80::1%eth0]:7");
    set("HCOMM_BOOTSTRAP", "file:///shared/jobs/42", NULL);
    p = ok();
    assert_string_equal(p.url, "file:///shared/jobs/42");
    set("HCOMM_BOOTSTRAP", "tcp://node-01.cluster_a:65535", NULL);
    p = ok();
    assert_string_equal(p.url, "tcp://node-01.cluster_a:65535");
}

static void test_torchrun(void **state)
{
    (void)state;
    set("RANK", "1", "WORLD_SIZE", "2", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2", "MASTER_ADDR",
        "10.0.0.1", "MASTER_PORT", "29500", NULL);
    hc_bootstrap_params_t p = ok();
    assert_string_equal(p.source, "torchrun");
    assert_int_equal(p.rank, 1);
    assert_int_equal(p.size, 2);
    assert_int_equal(p.local_rank, 1);
    assert_int_equal(p.local_size, 2);
    assert_string_equal(p.url, "tcp://10.0.0.1:29500");

    set("MASTER_ADDR", "::1", NULL);
    p = ok();
    assert_string_equal(p.url, "tcp://[::1]:29500");

    set("HCOMM_BOOTSTRAP", "tcp://other:1234", NULL);
    p = ok();
    assert_string_equal(p.url, "tcp://other:1234");
    unsetenv("HCOMM_BOOTSTRAP");

    unsetenv("MASTER_PORT");
    bad("MASTER_PORT", "torchrun");
    set("MASTER_PORT", "29500x", NULL);
    bad("MASTER_ADDR:MASTER_PORT", "29500x");
    set("MASTER_PORT", "1", "MASTER_ADDR", "bad host", NULL);
    bad("MASTER_ADDR", "bad host");

    /* A torchrun job of one needs no address. */
    clear_env(NULL);
    set("RANK", "0", "WORLD_SIZE", "1", NULL);
    p = ok();
    assert_string_equal(p.source, "torchrun");
    assert_string_equal(p.url, "");
}

static void test_openmpi(void **state)
{
    (void)state;
    set("OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", "6", "OMPI_COMM_WORLD_LOCAL_RANK", "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE", "2", NULL);
    bad("HCOMM_BOOTSTRAP", "openmpi");
    set("HCOMM_BOOTSTRAP", "file:///tmp/x", NULL);
    hc_bootstrap_params_t p = ok();
    assert_string_equal(p.source, "openmpi");
    assert_int_equal(p.rank, 5);
    assert_int_equal(p.size, 6);
    assert_int_equal(p.local_rank, 1);
    assert_int_equal(p.local_size, 2);
    assert_string_equal(p.url, "file:///tmp/x");
}

static void test_slurm(void **state)
{
    (void)state;
    set("SLURM_PROCID", "3", "SLURM_NTASKS", "8", "SLURM_LOCALID", "1", NULL);
    bad("SLURM_STEP_NODELIST", "srun");
    /* srun's own variables: rank 0's host, the port from job and step,
     * the local size of this node (SLURM_NODEID 2: the third node) */
    set("SLURM_STEP_NODELIST", "gpu[07-09,12]-ib,login", "SLURM_JOB_ID", "4242", "SLURM_STEP_ID",
        "3", "SLURM_STEP_TASKS_PER_NODE", "1(x2),4,1", "SLURM_NODEID", "2", NULL);
    hc_bootstrap_params_t p = ok();
    assert_string_equal(p.url, "tcp://gpu07-ib:51491"); /* 20000 + (4242*64+3) % 40000 */
    assert_string_equal(p.job_key, "slurm::4242.3");
    assert_int_equal(p.local_size, 4);
    assert_int_equal(p.local_rank, 1);
    assert_false(p.key_expected);
    set("SLURM_NODEID", "0", NULL); /* 1 task there, but SLURM_LOCALID 1 */
    bad("SLURM_LOCALID", NULL);
    set("SLURM_NODEID", "9", NULL);
    bad("SLURM_STEP_TASKS_PER_NODE", NULL);
    set("SLURM_NODEID", "2", "SLURM_STEP_NODELIST", "[1-2]", NULL);
    bad("node list", NULL);
    char h[64];
    assert_int_equal(hc_bootstrap_slurm_first_host("n[3]", h, sizeof(h)), HCOMM_OK);
    assert_string_equal(h, "n3");
    assert_int_equal(hc_bootstrap_slurm_first_host("a,b", h, sizeof(h)), HCOMM_OK);
    assert_string_equal(h, "a");
    assert_int_equal(hc_bootstrap_slurm_first_host("x[0005-0007]", h, sizeof(h)), HCOMM_OK);
    assert_string_equal(h, "x0005");
    assert_int_not_equal(hc_bootstrap_slurm_first_host("x[", h, sizeof(h)), HCOMM_OK);
    unsetenv("SLURM_STEP_NODELIST");
    unsetenv("SLURM_NODEID");
    set("HCOMM_BOOTSTRAP", "tcp://head:9000", "HCOMM_JOB_KEY", "k", NULL);
    p = ok();
    assert_string_equal(p.source, "slurm");
    assert_int_equal(p.rank, 3);
    assert_int_equal(p.size, 8);
    assert_int_equal(p.local_rank, 1);
    assert_int_equal(p.local_size, -1);
    assert_string_equal(p.job_key, "k");
    /* Open MPI is asked before Slurm (mpirun under salloc sets both). */
    set("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "2", NULL);
    p = ok();
    assert_string_equal(p.source, "openmpi");
}

static void test_bad_integers(void **state)
{
    (void)state;
    static const char *const junk[] = {
        "abc", "", " 1", "1x", "+1", "1.0", "0x2", "99999999999999999999", "-"};
    set("HCOMM_BOOTSTRAP", "tcp://h:1", NULL);
    for (size_t i = 0; i < HC_ARRAY_SIZE(junk); i++) {
        set("HCOMM_RANK", "0", "HCOMM_SIZE", junk[i], NULL);
        bad("HCOMM_SIZE", junk[i]);
        set("HCOMM_RANK", junk[i], "HCOMM_SIZE", "4", NULL);
        bad("HCOMM_RANK", junk[i]);
        set("HCOMM_RANK", "0", "HCOMM_LOCAL_RANK", junk[i], NULL);
        bad("HCOMM_LOCAL_RANK", junk[i]);
        unsetenv("HCOMM_LOCAL_RANK");
        set("HCOMM_LOCAL_SIZE", junk[i], NULL);
        bad("HCOMM_LOCAL_SIZE", junk[i]);
        unsetenv("HCOMM_LOCAL_SIZE");
    }
}

static void test_bad_ranges(void **state)
{
    (void)state;
    set("HCOMM_BOOTSTRAP", "tcp://h:1", NULL);
    set("HCOMM_RANK", "0", "HCOMM_SIZE", "0", NULL);
    bad("HCOMM_SIZE", "=0");
    set("HCOMM_SIZE", "1048577", NULL);
    bad("HCOMM_SIZE", "1048577");
    set("HCOMM_SIZE", "1048576", NULL);
    assert_int_equal(ok().size, 1048576);
    set("HCOMM_SIZE", "4", "HCOMM_RANK", "4", NULL);
    bad("HCOMM_RANK", "=4");
    set("HCOMM_RANK", "-1", NULL);
    bad("HCOMM_RANK", "=-1");
    set("HCOMM_RANK", "3", "HCOMM_LOCAL_SIZE", "5", "HCOMM_LOCAL_RANK", "0", NULL);
    bad("HCOMM_LOCAL_SIZE", "=5");
    set("HCOMM_LOCAL_SIZE", "2", "HCOMM_LOCAL_RANK", "2", NULL);
    bad("HCOMM_LOCAL_RANK", "=2");
    set("HCOMM_LOCAL_SIZE", "0", "HCOMM_LOCAL_RANK", "0", NULL);
    bad("HCOMM_LOCAL_SIZE", "=0");
    set("HCOMM_LOCAL_SIZE", "2", NULL);
    unsetenv("HCOMM_LOCAL_RANK");
    bad("HCOMM_LOCAL_SIZE", "HCOMM_LOCAL_RANK");

    /* Half a launcher is an error, not a quiet single-rank run. */
    clear_env(NULL);
    set("HCOMM_RANK", "1", NULL);
    bad("HCOMM_SIZE", "HCOMM_RANK");
    clear_env(NULL);
    set("WORLD_SIZE", "4", NULL);
    bad("RANK", "WORLD_SIZE");
}

static void test_bad_urls(void **state)
{
    (void)state;
    static const char *const urls[] = {
        "http://h:80", "tcp://h",        "tcp://:80",     "tcp://h:0",     "tcp://h:65536",
        "tcp://h:80x", "tcp://::1:80",   "tcp://[::1]80", "tcp://[::1:80", "tcp://h:",
        "tcp://a b:1", "file://rel/dir", "file://",       "tcp://h:-1",    "tcp://h:+80",
        "TCP://h:1",   "tcp://h:1/x",
    };
    set("HCOMM_RANK", "1", "HCOMM_SIZE", "2", NULL);
    bad("HCOMM_BOOTSTRAP", "hcommrun");
    for (size_t i = 0; i < HC_ARRAY_SIZE(urls); i++) {
        set("HCOMM_BOOTSTRAP", urls[i], NULL);
        bad("HCOMM_BOOTSTRAP", urls[i]);
    }
    char longurl[600];
    memset(longurl, 'a', sizeof(longurl) - 1);
    longurl[sizeof(longurl) - 1] = '\0';
    memcpy(longurl, "tcp://", 6);
    set("HCOMM_BOOTSTRAP", longurl, NULL);
    bad("HCOMM_BOOTSTRAP", "too long");
}

static void test_job_key(void **state)
{
    (void)state;
    char key[130];
    memset(key, 'k', sizeof(key));
    key[127] = '\0';
    set("HCOMM_JOB_KEY", key, NULL);
    assert_int_equal(strlen(ok().job_key), 127);
    key[127] = 'k';
    key[128] = '\0';
    set("HCOMM_JOB_KEY", key, NULL);
    bad("HCOMM_JOB_KEY", "128");
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, clear_env, clear_env)
    const struct CMUnitTest tests[] = {
        T(test_single),       T(test_hcommrun),   T(test_torchrun), T(test_openmpi), T(test_slurm),
        T(test_bad_integers), T(test_bad_ranges), T(test_bad_urls), T(test_job_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
