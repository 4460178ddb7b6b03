/*
 * Helpers shared by the bootstrap tests that fork ranks (test_bootstrap_open,
 * test_bootstrap_auth): see bs_test.h.
 */
#include "core/bs_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

pid_t kids[32];
int nkids;

void blob_fill(uint8_t *b, int rank)
{
    for (int i = 0; i < BLOB_LEN; i++)
        b[i] = (uint8_t)(rank * 31 + i);
}

int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

hc_bootstrap_params_t params(int rank, int size, const char *url, const char *key)
{
    hc_bootstrap_params_t p;
    memset(&p, 0, sizeof(p));
    p.rank = rank;
    p.size = size;
    p.local_rank = p.local_size = -1;
    snprintf(p.url, sizeof(p.url), "%s", url);
    snprintf(p.job_key, sizeof(p.job_key), "%s", key);
    p.source = "test";
    return p;
}

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

pid_t spawn(child_fn fn, void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) exit(fn(arg));
    kids[nkids++] = pid;
    return pid;
}

/* Exit status of pid, waiting at most timeout_s (then -1). */
int reap(pid_t pid, double timeout_s)
{
    double end = hc_time_sec() + timeout_s;
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            for (int i = 0; i < nkids; i++)
                if (kids[i] == pid) kids[i] = 0;
            if (WIFEXITED(status)) return WEXITSTATUS(status);
            return 128 + WTERMSIG(status);
        }
        if (hc_time_sec() > end) return -1;
        sleep_ms(5);
    }
}

int kill_all(void **state)
{
    (void)state;
    for (int i = 0; i < nkids; i++) {
        if (kids[i] > 0) {
            kill(kids[i], SIGKILL);
            waitpid(kids[i], NULL, 0);
        }
    }
    nkids = 0;
    return 0;
}

void reap_all_ok(void)
{
    for (int i = 0; i < nkids; i++) {
        if (kids[i] <= 0) continue;
        pid_t pid = kids[i];
        int rc = reap(pid, 20);
        if (rc != 0) fail_msg("child %d (pid %d) ended with %d", i, (int)pid, rc);
    }
}

bool table_ok(const void *table, int size)
{
    uint8_t want[BLOB_LEN];
    for (int r = 0; r < size; r++) {
        blob_fill(want, r);
        if (memcmp((const uint8_t *)table + (size_t)r * BLOB_LEN, want, BLOB_LEN)) return false;
    }
    return true;
}

/* ---- a well-behaved rank ------------------------------------------------- */

/* Open, check the table, allgather, barrier; 0 on success. */

/* The first rank judged failed after polling the bootstrap, or -1. */
int dead_rank(hc_bootstrap_t *bs, int size)
{
    (void)hc_bootstrap_poll(bs);
    for (int r = 0; r < size; r++)
        if (hc_bootstrap_verdict(bs, r, NULL) >= 0) return r;
    return -1;
}

int run_rank(void *arg)
{
    rank_arg_t *a = arg;
    uint8_t blob[BLOB_LEN];
    hc_bootstrap_t *bs = NULL;
    const void *table;
    int rc = 0;

    sleep_ms(a->delay_ms);
    blob_fill(blob, a->p.rank);
    if (hc_bootstrap_open(&a->p, blob, BLOB_LEN, TIMEOUT, &bs, &table) != HCOMM_OK)
        CHILD_FAIL(10, "open failed");
    if (!table_ok(table, a->p.size)) CHILD_FAIL(11, "wrong table");
    uint64_t in = 1000u + (uint64_t)a->p.rank, out[16] = {0};
    if (hc_bootstrap_allgather(bs, &in, sizeof(in), out, TIMEOUT) != HCOMM_OK)
        CHILD_FAIL(12, "allgather failed");
    for (int r = 0; r < a->p.size; r++)
        if (out[r] != 1000u + (uint64_t)r)
            CHILD_FAIL(13, "allgather slot %d holds %llu", r, (unsigned long long)out[r]);
    if (hc_bootstrap_barrier(bs, TIMEOUT) != HCOMM_OK) CHILD_FAIL(14, "barrier failed");
    /* Nobody can have left yet: every rank still has to do the allgather below
     * (a contribution already waiting on a socket is not a failure). */
    if (dead_rank(bs, a->p.size) != -1)
        CHILD_FAIL(17, "bootstrap poll reports a failure in a healthy job");
    /* A second round with a different length: no stale state between rounds. */
    uint8_t in2[3] = {(uint8_t)a->p.rank, 7, 9}, out2[16 * 3];
    if (hc_bootstrap_allgather(bs, in2, 3, out2, TIMEOUT) != HCOMM_OK)
        CHILD_FAIL(15, "second allgather failed");
    for (int r = 0; r < a->p.size; r++)
        if (out2[3 * r] != r || out2[3 * r + 2] != 9)
            CHILD_FAIL(16, "second allgather slot %d wrong", r);
    if (a->wait_rank0_death) {
        double end = hc_time_sec() + TIMEOUT;
        int dead;
        while ((dead = dead_rank(bs, a->p.size)) == -1 && hc_time_sec() < end)
            sleep_ms(1);
        if (dead != 0) CHILD_FAIL(18, "bootstrap poll did not report rank 0 gone (%d)", dead);
    }
out:
    hc_bootstrap_close(bs);
    return rc;
}

void run_job(const char *url, int size, int rank0_delay_ms, const char *key)
{
    rank_arg_t args[8];
    for (int r = 1; r < size; r++) {
        args[r] = (rank_arg_t){params(r, size, url, key), 0, true};
        spawn(run_rank, &args[r]);
    }
    rank_arg_t a0 = {params(0, size, url, key), rank0_delay_ms, false};
    assert_int_equal(run_rank(&a0), 0);
    reap_all_ok();
}

int connect_retry(int port, double timeout)
{
    double end = hc_time_sec() + timeout;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    while (hc_time_sec() < end) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) return fd;
        close(fd);
        sleep_ms(2);
    }
    return -1;
}

int run_expect_fail(void *arg)
{
    expect_fail_arg_t *a = arg;
    uint8_t blob[BLOB_LEN];
    hc_bootstrap_t *bs = NULL;
    const void *table;
    blob_fill(blob, a->p.rank);
    double t0 = hc_time_sec();
    size_t len = a->blob_len ? a->blob_len : BLOB_LEN;
    hcomm_status_t st = hc_bootstrap_open(&a->p, blob, len, a->timeout, &bs, &table);
    if (a->max_time > 0 && hc_time_sec() - t0 > a->max_time) {
        fprintf(stderr, "rank %d: failing took %.2f s\n", a->p.rank, hc_time_sec() - t0);
        return 31;
    }
    if (st != a->want || !strstr(hc_error_last(), a->want_text)) {
        fprintf(stderr, "rank %d: got %d \"%s\", wanted %d containing \"%s\"\n", a->p.rank, st,
                hc_error_last(), a->want, a->want_text);
        hc_bootstrap_close(bs);
        return 30;
    }
    return 0;
}

bool become_stranger(void)
{
    if (geteuid() != 0) return false;
    return setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0;
}
