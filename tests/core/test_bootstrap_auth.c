/*
 * The job key's handshake and misconfigured members, with forked ranks on
 * loopback (bs_test.h):
 *   - the key never travels: every byte between the ranks and rank 0, taken
 *     through a recording proxy, is searched for it;
 *   - a recorded handshake replayed to rank 0 is refused;
 *   - a wrong key, a wrong size, a duplicate rank and a wrong blob length on
 *     one rank fail every rank within seconds (HCOMM_TIMEOUT-like deadline
 *     of 60 s), the refused rank naming the cause, the others the cause and
 *     the rank;
 *   - a stranger (another user) with a wrong key cannot stop the job, and a
 *     job that times out names its refused claim.
 * It uses nothing but hc_bootstrap_open's interface and raw sockets, so that
 * it runs against an older bootstrap as well (to show what it catches).
 */
#include "core/bs_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define LONG_TIMEOUT 60.0 /* a job's deadline that no check may wait for */
#define FAIL_WITHIN 5.0   /* ... every rank fails within this instead */

/* ---- a proxy that records what passes ----------------------------------- */

typedef struct {
    int lfd;         /* listening, made before the fork */
    int target_port; /* rank 0's */
    int nconn;       /* connections it serves, then it ends */
    char up[128];    /* file: every byte from the ranks to rank 0 */
    char down[128];  /* file: every byte from rank 0 to the ranks */
} proxy_arg_t;

static int proxy_listen(int *port_p)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    *port_p = ntohs(sa.sin_port);
    return fd;
}

/* Moves what fd has to `to`, appending it to f; false at EOF or error. */
static bool proxy_pass(int fd, int to, FILE *f)
{
    uint8_t buf[65536];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    fwrite(buf, 1, (size_t)n, f);
    return send(to, buf, (size_t)n, MSG_NOSIGNAL) == n;
}

static int run_proxy(void *arg)
{
    proxy_arg_t *a = arg;
    FILE *up = fopen(a->up, "w"), *down = fopen(a->down, "w");
    int cl[8], sv[8], n = 0, live = 0;
    if (up == NULL || down == NULL || a->nconn > 8) return 90;
    double end = hc_time_sec() + 30;
    while (hc_time_sec() < end && (n < a->nconn || live > 0)) {
        struct pollfd pf[17];
        int np = 0;
        pf[np++] = (struct pollfd){n < a->nconn ? a->lfd : -1, POLLIN, 0};
        for (int i = 0; i < n; i++) {
            pf[np++] = (struct pollfd){cl[i], POLLIN, 0};
            pf[np++] = (struct pollfd){sv[i], POLLIN, 0};
        }
        if (poll(pf, (nfds_t)np, 100) <= 0) continue;
        if (pf[0].revents) {
            cl[n] = accept(a->lfd, NULL, NULL);
            sv[n] = connect_retry(a->target_port, 10);
            if (cl[n] < 0 || sv[n] < 0) return 91;
            n++;
            live++;
            continue;
        }
        for (int i = 0; i < n; i++) {
            bool ok = true;
            if (pf[1 + 2 * i].revents) ok = proxy_pass(cl[i], sv[i], up);
            if (ok && pf[2 + 2 * i].revents) ok = proxy_pass(sv[i], cl[i], down);
            if (!ok && cl[i] >= 0) {
                close(cl[i]);
                close(sv[i]);
                cl[i] = sv[i] = -1;
                live--;
            }
        }
    }
    fclose(up);
    fclose(down);
    return 0;
}

static uint8_t *slurp(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    uint8_t *b = malloc(1 << 20);
    assert_non_null(b);
    *len_p = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

/* ---- the key never travels ------------------------------------------------ */

static void test_key_never_sent(void **state)
{
    (void)state;
    char dir[] = "/tmp/hc_bs_auth_XXXXXX", url[64], purl[64];
    assert_non_null(mkdtemp(dir));
    int port = free_port(), pport;
    proxy_arg_t px = {proxy_listen(&pport), port, 2, "", ""};
    snprintf(px.up, sizeof(px.up), "%s/up", dir);
    snprintf(px.down, sizeof(px.down), "%s/down", dir);
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
    snprintf(purl, sizeof(purl), "tcp://127.0.0.1:%d", pport);
    pid_t proxy = spawn(run_proxy, &px);
    close(px.lfd);
    /* Ranks 1 and 2 reach rank 0 through the proxy: the handshake, the
     * table, allgathers and a barrier all pass it. */
    rank_arg_t r[3];
    for (int k = 1; k < 3; k++) {
        r[k] = (rank_arg_t){params(k, 3, purl, KEY), 0, false};
        spawn(run_rank, &r[k]);
    }
    r[0] = (rank_arg_t){params(0, 3, url, KEY), 0, false};
    assert_int_equal(run_rank(&r[0]), 0);
    assert_int_equal(reap(proxy, 20), 0);
    reap_all_ok();

    size_t nup, ndown;
    uint8_t *up = slurp(px.up, &nup), *down = slurp(px.down, &ndown), blob[BLOB_LEN];
    print_message("captured %zu bytes to rank 0, %zu from it\n", nup, ndown);
    /* The capture works: rank 1's blob went up, and came down in the table. */
    blob_fill(blob, 1);
    assert_non_null(memmem(up, nup, blob, BLOB_LEN));
    assert_non_null(memmem(down, ndown, blob, BLOB_LEN));
    /* ... and the key is in neither direction. */
    if (memmem(up, nup, KEY, strlen(KEY)) || memmem(down, ndown, KEY, strlen(KEY)))
        fail_msg("the job key \"%s\" travelled between the ranks and rank 0", KEY);
    free(up);
    free(down);
    unlink(px.up);
    unlink(px.down);
    rmdir(dir);
}

/* ---- a replayed handshake ------------------------------------------------- */

typedef struct {
    int port;
    const char *path; /* what to send: a recording of a rank's side */
} replay_arg_t;

/* Sends a recorded rank's bytes to rank 0 as they were, as another user
 * when it can (a replay from this user would stop the job: also a refusal,
 * which the test checks instead). */
static int run_replay(void *arg)
{
    replay_arg_t *a = arg;
    size_t n;
    uint8_t *rec = slurp(a->path, &n), buf[4096];
    (void)become_stranger();
    int fd = connect_retry(a->port, 5);
    if (fd < 0 || send(fd, rec, n, MSG_NOSIGNAL) != (ssize_t)n) return 80;
    struct pollfd pfd = {fd, POLLIN, 0};
    while (poll(&pfd, 1, 5000) == 1 && recv(fd, buf, sizeof(buf), 0) > 0)
        ;
    close(fd);
    free(rec);
    return 0;
}

static void test_replay_refused(void **state)
{
    (void)state;
    char dir[] = "/tmp/hc_bs_auth_XXXXXX", url[64], purl[64];
    assert_non_null(mkdtemp(dir));
    int port = free_port(), pport;
    proxy_arg_t px = {proxy_listen(&pport), port, 1, "", ""};
    snprintf(px.up, sizeof(px.up), "%s/up", dir);
    snprintf(px.down, sizeof(px.down), "%s/down", dir);
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
    snprintf(purl, sizeof(purl), "tcp://127.0.0.1:%d", pport);
    /* Job A: rank 1's side recorded. */
    pid_t proxy = spawn(run_proxy, &px);
    close(px.lfd);
    rank_arg_t r1 = {params(1, 2, purl, KEY), 0, false};
    spawn(run_rank, &r1);
    rank_arg_t a0 = {params(0, 2, url, KEY), 0, false};
    assert_int_equal(run_rank(&a0), 0);
    assert_int_equal(reap(proxy, 20), 0);
    reap_all_ok();

    /* Job B, the same key, size and address: the recording is replayed to
     * its rank 0 before the real rank 1 comes. */
    replay_arg_t rp = {port, px.up};
    spawn(run_replay, &rp);
    if (geteuid() == 0) {
        /* A stranger's replay: refused, and the real rank 1 still joins
         * (a rank 0 that took the replay would refuse it as a duplicate). */
        rank_arg_t b1 = {params(1, 2, url, KEY), 500, false};
        spawn(run_rank, &b1);
        rank_arg_t b0 = {params(0, 2, url, KEY), 0, false};
        assert_int_equal(run_rank(&b0), 0);
    } else {
        print_message("not root: the replay comes from this user, so it stops the job\n");
        expect_fail_arg_t b0 = {params(0, 2, url, KEY), HCOMM_ERR_BOOTSTRAP, "job key mismatch",
                                LONG_TIMEOUT, FAIL_WITHIN};
        assert_int_equal(run_expect_fail(&b0), 0);
    }
    reap_all_ok();
    unlink(px.up);
    unlink(px.down);
    rmdir(dir);
}

/* ---- a misconfigured rank fails every rank at once ------------------------- */

typedef struct {
    expect_fail_arg_t f;
    int delay_ms;
} late_fail_arg_t;

static int run_late_fail(void *arg)
{
    late_fail_arg_t *a = arg;
    sleep_ms(a->delay_ms);
    return run_expect_fail(&a->f);
}

/* Forks ranks 1..n-1 as given, runs rank 0's expectation here, and checks
 * that every rank failed as expected within FAIL_WITHIN. */
static void run_failing_job(late_fail_arg_t *ranks, int n, expect_fail_arg_t *r0)
{
    double t0 = hc_time_sec();
    for (int i = 0; i < n; i++)
        spawn(run_late_fail, &ranks[i]);
    assert_int_equal(run_expect_fail(r0), 0);
    reap_all_ok();
    print_message("every rank failed within %.2f s (deadline %.0f s)\n", hc_time_sec() - t0,
                  LONG_TIMEOUT);
}

#define EXPECT(rank_, size_, key_, text_)                                                          \
    {                                                                                              \
        params(rank_, size_, url, key_), HCOMM_ERR_BOOTSTRAP, text_, LONG_TIMEOUT, FAIL_WITHIN, 0  \
    }

static void test_wrong_key_fails_job(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    /* Rank 2 has another key; rank 1 joined before it. */
    late_fail_arg_t r[] = {
        {EXPECT(1, 3, KEY,
                "rank 0 stopped the job: job key mismatch: rank 2 (a process of this "
                "user on this host"),
         0},
        {EXPECT(2, 3, "other-key", "job key mismatch: rank 0 at 127.0.0.1:"), 300},
    };
    expect_fail_arg_t r0 = EXPECT(0, 3, KEY, "job key mismatch: rank 2 (a process of this user");
    run_failing_job(r, 2, &r0);
}

static void test_wrong_size_fails_job(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    /* Rank 2 says the job has 5 ranks; rank 1 joined before it, rank 3 comes
     * after the job failed and is told why all the same. */
#define SIZE_WHY "job size mismatch: rank 2 says the job has 5 ranks, rank 0 says 4"
    late_fail_arg_t r[] = {
        {EXPECT(1, 4, KEY, "rank 0 stopped the job: " SIZE_WHY), 0},
        {EXPECT(2, 5, KEY, "rank 0 refused this rank (2): " SIZE_WHY), 300},
        {EXPECT(3, 4, KEY, "rank 0 stopped the job: " SIZE_WHY), 1500},
    };
    expect_fail_arg_t r0 = EXPECT(0, 4, KEY, "hc_bootstrap_open: " SIZE_WHY);
    run_failing_job(r, 3, &r0);
}

static void test_duplicate_rank_fails_job(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    /* Ranks 0, 1, 1 and 3: the second rank 1 (later) is refused; nobody is
     * rank 2, and nobody waits for it. */
#define DUP_WHY "duplicate rank 1: two processes say they are rank 1"
    late_fail_arg_t r[] = {
        {EXPECT(1, 4, KEY, "rank 0 stopped the job: " DUP_WHY), 0},
        {EXPECT(3, 4, KEY, "rank 0 stopped the job: " DUP_WHY), 0},
        {EXPECT(1, 4, KEY, "rank 0 refused this rank (1): " DUP_WHY), 400},
    };
    expect_fail_arg_t r0 = EXPECT(0, 4, KEY, DUP_WHY);
    run_failing_job(r, 3, &r0);
}

static void test_blob_len_fails_job(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
#define BLOB_WHY "address blob length mismatch: rank 2 sent 23 bytes, rank 0 expects 24"
    late_fail_arg_t r[] = {
        {EXPECT(1, 3, KEY, "rank 0 stopped the job: " BLOB_WHY), 0},
        {EXPECT(2, 3, KEY, "rank 0 refused this rank (2): " BLOB_WHY), 300},
    };
    r[1].f.blob_len = BLOB_LEN - 1;
    expect_fail_arg_t r0 = EXPECT(0, 3, KEY, BLOB_WHY);
    run_failing_job(r, 2, &r0);
}

/* ---- strangers --------------------------------------------------------------- */

typedef struct {
    expect_fail_arg_t f;
    int repeat;
} stranger_arg_t;

/* A rank with a wrong key, as another user, over and over. */
static int run_stranger(void *arg)
{
    stranger_arg_t *a = arg;
    if (!become_stranger()) return 70;
    for (int i = 0; i < a->repeat; i++) {
        int rc = run_expect_fail(&a->f);
        if (rc) return rc;
        sleep_ms(100);
    }
    return 0;
}

static void test_stranger_cannot_stop_job(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        print_message("skipped: a stranger must run as another user (needs root)\n");
        skip();
    }
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    /* Strangers claim ranks 1 and 2 with wrong keys, again and again, before
     * and while the real ranks come: each is told "job key mismatch" at
     * once, and the job completes. */
    stranger_arg_t s[2];
    for (int k = 0; k < 2; k++) {
        s[k] = (stranger_arg_t){{params(1 + k, 3, url, k ? "" : "guess"), HCOMM_ERR_BOOTSTRAP,
                                 "job key mismatch", 5.0, 3.0, 0},
                                5};
        spawn(run_stranger, &s[k]);
    }
    rank_arg_t r[3];
    for (int k = 1; k < 3; k++) {
        r[k] = (rank_arg_t){params(k, 3, url, KEY), 300 * k, false};
        spawn(run_rank, &r[k]);
    }
    r[0] = (rank_arg_t){params(0, 3, url, KEY), 0, false};
    assert_int_equal(run_rank(&r[0]), 0);
    reap_all_ok();

    /* Rank 1 never comes, a stranger claimed it: the timeout says so. */
    stranger_arg_t s1 = {
        {params(1, 2, url, "guess"), HCOMM_ERR_BOOTSTRAP, "job key mismatch", 5.0, 3.0, 0}, 1};
    spawn(run_stranger, &s1);
    expect_fail_arg_t a0 = {params(0, 2, url, KEY),
                            HCOMM_ERR_TIMEOUT,
                            "claiming rank 1: it failed the job key proof",
                            1.5,
                            4.0,
                            0};
    assert_int_equal(run_expect_fail(&a0), 0);
    assert_non_null(strstr(hc_error_last(), "rank(s) 1 never joined"));
    reap_all_ok();
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
#define T(f) cmocka_unit_test_teardown(f, kill_all)
    const struct CMUnitTest tests[] = {
        T(test_key_never_sent),           T(test_replay_refused),
        T(test_wrong_key_fails_job),      T(test_wrong_size_fails_job),
        T(test_duplicate_rank_fails_job), T(test_blob_len_fails_job),
        T(test_stranger_cannot_stop_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
