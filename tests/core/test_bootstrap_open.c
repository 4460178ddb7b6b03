/*
 * The rendezvous with real processes on loopback: each test forks the ranks
 * (the test process itself is rank 0, so its assertions see rank 0's view),
 * plus hostile clients where the test is about them (bs_test.h). The job
 * key's handshake and misconfigured members: test_bootstrap_auth.c.
 */
#include "core/bs_test.h"
#include "core/bootstrap_int.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_single_rank(void **state)
{
    (void)state;
    hc_bootstrap_params_t p = params(0, 1, "", "");
    uint8_t blob[BLOB_LEN];
    blob_fill(blob, 0);
    hc_bootstrap_t *bs;
    const void *table;
    assert_int_equal(hc_bootstrap_open(&p, blob, BLOB_LEN, 1.0, &bs, &table), HCOMM_OK);
    assert_true(table_ok(table, 1));
    uint32_t in = 77, out = 0;
    assert_int_equal(hc_bootstrap_allgather(bs, &in, 4, &out, 1.0), HCOMM_OK);
    assert_int_equal(out, 77);
    assert_int_equal(hc_bootstrap_barrier(bs, 1.0), HCOMM_OK);
    assert_int_equal(dead_rank(bs, 1), -1);
    hc_bootstrap_close(bs);
    hc_bootstrap_close(NULL);
}

static void test_bad_args(void **state)
{
    (void)state;
    hc_bootstrap_params_t p = params(0, 2, "tcp://127.0.0.1:1", KEY);
    uint8_t blob[8] = {0};
    hc_bootstrap_t *bs = (hc_bootstrap_t *)0x1;
    const void *table = (const void *)0x1;
    assert_int_equal(hc_bootstrap_open(NULL, blob, 8, 1, &bs, &table), HCOMM_ERR_INVALID);
    assert_int_equal(hc_bootstrap_open(&p, NULL, 8, 1, &bs, &table), HCOMM_ERR_INVALID);
    assert_int_equal(hc_bootstrap_open(&p, blob, 8, 0, &bs, &table), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "timeout_sec"));
    assert_int_equal(hc_bootstrap_open(&p, blob, 8, 1, NULL, &table), HCOMM_ERR_INVALID);
    assert_int_equal(hc_bootstrap_open(&p, blob, HC_BOOTSTRAP_MAX_BLOB + 1, 1, &bs, &table),
                     HCOMM_ERR_INVALID);
    p.rank = 2;
    assert_int_equal(hc_bootstrap_open(&p, blob, 8, 1, &bs, &table), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "rank 2"));
    p = params(1, 2, "", KEY);
    assert_int_equal(hc_bootstrap_open(&p, blob, 8, 1, &bs, &table), HCOMM_ERR_INVALID);
    p = params(1, 2, "udp://x:1", KEY);
    assert_int_equal(hc_bootstrap_open(&p, blob, 8, 1, &bs, &table), HCOMM_ERR_INVALID);
    /* Outputs untouched on failure. */
    assert_ptr_equal(bs, (hc_bootstrap_t *)0x1);
    assert_ptr_equal(table, (const void *)0x1);
}

static void test_tcp_4(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    /* Rank 0 comes up last: the others must retry their connects. */
    run_job(url, 4, 300, KEY);
}

static void test_file_4(void **state)
{
    (void)state;
    char dir[] = "/tmp/hc_bs_test_XXXXXX", url[128];
    assert_non_null(mkdtemp(dir));
    snprintf(url, sizeof(url), "file://%s", dir);
    /* Rank 0 late: the others poll for the address file. */
    run_job(url, 4, 300, KEY);
    /* Rank 0 removed its address file at close. */
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int left = 0;
    while ((e = readdir(d)))
        left += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(left, 0);
    assert_int_equal(rmdir(dir), 0);
}

static void test_file_stale_nokey(void **state)
{
    (void)state;
    char dir[] = "/tmp/hc_bs_test_XXXXXX", url[128], path[160];
    assert_non_null(mkdtemp(dir));
    snprintf(url, sizeof(url), "file://%s", dir);
    /* A crashed earlier job without a key left its address behind, pointing
     * at a port where nobody listens: the ranks must keep re-reading the file
     * until rank 0 replaces it. */
    snprintf(path, sizeof(path), "%s/hcomm-nokey.addr", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "tcp://127.0.0.1:%d\n", free_port());
    fclose(f);
    run_job(url, 3, 300, "");
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(rmdir(dir), 0);
}

/* ---- hostile clients -------------------------------------------------------- */

/* Each kind of client and what rank 0 must answer it: nothing (a close),
 * or one message (the kinds marked), then a close. None may join or stop the
 * job. A process of this user on this host that fails the key proof would
 * stop it (it could read the key anyway: docs/bootstrap.md), so the wrong-key
 * clients are real ranks run as another user (nobody), and skipped when the
 * test cannot change its user. */
enum {
    G_RANDOM,
    G_PARTIAL,
    G_SILENT,
    G_RANK_RANGE,
    G_VERSION,    /* answered REFUSE: "bootstrap protocol mismatch" */
    G_OLD_HELLO,  /* protocol 1, its key in the clear: answered protocol 1's ABORT */
    G_HELLO_ONLY, /* answered CHALLENGE, then never proves anything */
    G_WRONG_KEY,  /* a stranger's rank: told "job key mismatch" */
    G_NO_KEY,
    G_COUNT
};

typedef struct {
    int kind, port, size;
    double close_min, close_max; /* when rank 0 must hang up, seconds after connect; 0 = any */
} garbage_arg_t;

/* A rank of the job with another key (or none), as another user. */
static int run_stranger(garbage_arg_t *g)
{
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", g->port);
    if (!become_stranger()) return 0; /* not root: reported by the test */
    expect_fail_arg_t a = {params(1, g->size, url, g->kind == G_WRONG_KEY ? "test-key-43" : ""),
                           HCOMM_ERR_BOOTSTRAP, "job key mismatch", 5.0, 3.0};
    return run_expect_fail(&a);
}

/* What came back matches the kind: 0, or a code. */
static int garbage_answer_ok(const garbage_arg_t *g, const uint8_t *buf, size_t n)
{
    hc_bootstrap_msg_t m;
    uint32_t want = g->kind == G_VERSION      ? HC_BOOTSTRAP_MSG_REFUSE
                    : g->kind == G_HELLO_ONLY ? HC_BOOTSTRAP_MSG_CHALLENGE
                    : g->kind == G_OLD_HELLO  ? HC_BOOTSTRAP_MSG_ABORT
                                              : 0;
    if (want == 0) return n == 0 ? 0 : 24;
    if (g->kind == G_OLD_HELLO) {
        /* Protocol 1 (the only difference: the version field), so that an
         * old rank can show why it is refused. */
        if (n < HC_BOOTSTRAP_HDR_LEN + 4 || buf[4] != 1 || buf[8] != HC_BOOTSTRAP_MSG_ABORT ||
            !memmem(buf, n, "protocol mismatch", 17))
            return 26;
        return 0;
    }
    if (hc_bootstrap_msg_parse(buf, n, &m) != (long)n || m.type != want) return 27;
    if (want == HC_BOOTSTRAP_MSG_REFUSE &&
        (m.auth_len != 0 || !memmem(m.payload, (size_t)m.payload_len, "protocol mismatch", 17)))
        return 28;
    return 0;
}

/* Sends its kind of garbage; succeeds when rank 0 answers as it must and
 * closes the connection. */
static int run_garbage(void *arg)
{
    garbage_arg_t *g = arg;
    uint8_t buf[4096], nonce[HC_BOOTSTRAP_NONCE_LEN] = {7};
    long n = 0;
    if (g->kind == G_WRONG_KEY || g->kind == G_NO_KEY) return run_stranger(g);
    hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC,
                            HC_BOOTSTRAP_VERSION,
                            HC_BOOTSTRAP_MSG_HELLO,
                            1,
                            (uint32_t)g->size,
                            sizeof(nonce),
                            nonce,
                            0,
                            NULL};
    int fd = connect_retry(g->port, 5);
    if (fd < 0) return 20;
    switch (g->kind) {
    case G_RANDOM:
        srand(7);
        for (size_t i = 0; i < 1000; i++)
            buf[i] = (uint8_t)rand();
        n = 1000;
        break;
    case G_PARTIAL:
        n = 10; /* of a hello */
        (void)hc_bootstrap_msg_pack(&m, buf, sizeof(buf));
        break;
    case G_OLD_HELLO:
        /* magic, version 1, HELLO, rank 1, size, key_len, payload_len; key; blob */
        n = hc_bootstrap_msg_pack(&m, buf, sizeof(buf));
        buf[4] = 1;
        buf[20] = (uint8_t)strlen(KEY);
        buf[24] = BLOB_LEN;
        memcpy(buf + HC_BOOTSTRAP_HDR_LEN, KEY, strlen(KEY));
        memset(buf + HC_BOOTSTRAP_HDR_LEN + strlen(KEY), 0, BLOB_LEN);
        n = (long)(HC_BOOTSTRAP_HDR_LEN + strlen(KEY) + BLOB_LEN);
        break;
    case G_SILENT:
        break;
    default: /* a valid hello, patched below where pack would refuse */
        n = hc_bootstrap_msg_pack(&m, buf, sizeof(buf));
        if (n <= 0) return 21;
        if (g->kind == G_VERSION) buf[4] = HC_BOOTSTRAP_VERSION + 1;
        if (g->kind == G_RANK_RANGE) buf[12] = (uint8_t)g->size; /* rank == size */
        break;
    }
    if (n > 0 && send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n && g->kind != G_RANDOM) return 22;
    /* Read until rank 0 hangs up (EOF or reset). */
    double t0 = hc_time_sec();
    size_t got = 0;
    for (;;) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 15000) != 1) return 23;
        ssize_t r = recv(fd, buf + got, sizeof(buf) - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    double took = hc_time_sec() - t0;
    if (g->close_max > 0 && (took < g->close_min || took > g->close_max)) {
        fprintf(stderr, "garbage client %d was closed after %.2f s\n", g->kind, took);
        return 25;
    }
    int rc = garbage_answer_ok(g, buf, got);
    if (rc)
        fprintf(stderr, "garbage client %d was answered with %zu bytes (%d)\n", g->kind, got, rc);
    return rc;
}

static void test_garbage_clients(void **state)
{
    (void)state;
    char url[64];
    int port = free_port(), size = 3;
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
    if (geteuid() != 0)
        print_message("not root: the wrong-key clients are skipped (they must run as another "
                      "user)\n");
    garbage_arg_t g[G_COUNT];
    for (int k = 0; k < G_COUNT; k++) {
        g[k] = (garbage_arg_t){k, port, size, 0, 0};
        spawn(run_garbage, &g[k]);
    }
    /* Rank 1 early, rank 2 late (after the strangers claimed rank 1). */
    rank_arg_t r1 = {params(1, size, url, KEY), 100, false};
    rank_arg_t r2 = {params(2, size, url, KEY), 800, false};
    spawn(run_rank, &r1);
    spawn(run_rank, &r2);
    rank_arg_t a0 = {params(0, size, url, KEY), 0, false};
    double t0 = hc_time_sec();
    assert_int_equal(run_rank(&a0), 0);
    /* The silent and stalled clients did not hold the job up. */
    assert_true(hc_time_sec() - t0 < 4.0);
    reap_all_ok();
}

static void test_silent_clients_dropped(void **state)
{
    (void)state;
    char url[64];
    int port = free_port();
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
    /* Rank 1 comes after 6 s; a silent and a stalled client must be dropped
     * by the 5 s hello limit, not kept until the rendezvous ends. */
    garbage_arg_t g[2] = {{G_SILENT, port, 2, 4.5, 5.8}, {G_PARTIAL, port, 2, 4.5, 5.8}};
    spawn(run_garbage, &g[0]);
    spawn(run_garbage, &g[1]);
    rank_arg_t r1 = {params(1, 2, url, KEY), 6000, false};
    spawn(run_rank, &r1);
    rank_arg_t a0 = {params(0, 2, url, KEY), 0, false};
    assert_int_equal(run_rank(&a0), 0);
    reap_all_ok();
}

/* Connects as fast as it can for up to storm_s seconds, holding the newest
 * 200 connections open and sending nothing: rank 0's hello list is full the
 * whole time and new clients keep arriving. Stops when rank 0 stops
 * listening. */
static int run_connect_storm(void *arg)
{
    const int *port = arg;
    int fds[200];
    size_t n = 0, opened = 0;
    double end = hc_time_sec() + 8.0;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)*port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (size_t i = 0; i < 200; i++)
        fds[i] = -1;
    while (hc_time_sec() < end) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return 30;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            close(fd);
            if (opened > 0) break; /* rank 0 has stopped listening */
            sleep_ms(1);
            continue;
        }
        opened++;
        if (fds[n] >= 0) close(fds[n]);
        fds[n] = fd;
        n = (n + 1) % 200;
    }
    for (size_t i = 0; i < 200; i++)
        if (fds[i] >= 0) close(fds[i]);
    return opened > 200 ? 0 : 31; /* the storm did overflow the list */
}

static void test_connect_storm(void **state)
{
    (void)state;
    char url[64];
    int port = free_port();
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
    /* The storm starts first; ranks 1-3 join 0.5 s into it. Rank 0 must
     * still read their hellos and finish the rendezvous, well within its
     * timeout, while clients connect faster than it accepts. */
    spawn(run_connect_storm, &port);
    rank_arg_t args[4];
    for (int r = 1; r < 4; r++) {
        args[r] = (rank_arg_t){params(r, 4, url, KEY), 500, false};
        spawn(run_rank, &args[r]);
    }
    double t0 = hc_time_sec();
    rank_arg_t a0 = {params(0, 4, url, KEY), 0, false};
    assert_int_equal(run_rank(&a0), 0);
    print_message("rendezvous under a connect storm took %.2f s\n", hc_time_sec() - t0);
    assert_true(hc_time_sec() - t0 < 5.0);
    reap_all_ok();
}

/* Opens 1 + HC_BS_EXTRA_PENDING (64) silent connections to a 2-rank job's
 * rank 0 (its list holds size - 1 + 64 = 65), waits until they are accepted,
 * then one more: the first must be dropped, and told BUSY (a rank whose
 * hello was late connects again on it) rather than closed bare. Then rank 1
 * is let in. */
static int run_busy_client(void *arg)
{
    const int *port = arg;
    enum { N = 66 };
    int fds[N];
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)*port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int i = 0; i < N; i++) {
        double end = hc_time_sec() + 5.0;
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0) return 30;
        while (connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            if (hc_time_sec() > end) return 31;
            close(fds[i]);
            fds[i] = socket(AF_INET, SOCK_STREAM, 0);
            sleep_ms(5);
        }
        if (i == N - 2) sleep_ms(300); /* the first 65 are accepted by now */
    }
    uint8_t hdr[HC_BOOTSTRAP_HDR_LEN];
    size_t have = 0;
    struct pollfd pfd = {fds[0], POLLIN, 0};
    while (have < sizeof(hdr) && poll(&pfd, 1, 3000) == 1) {
        ssize_t n = recv(fds[0], hdr + have, sizeof(hdr) - have, 0);
        if (n <= 0) break;
        have += (size_t)n;
    }
    hc_bootstrap_msg_t m;
    if (have != sizeof(hdr) || hc_bootstrap_msg_parse(hdr, have, &m) != (long)sizeof(hdr) ||
        m.type != HC_BOOTSTRAP_MSG_BUSY) {
        fprintf(stderr, "busy client: %zu header bytes, not a BUSY message\n", have);
        return 32;
    }
    for (int i = 0; i < N; i++)
        close(fds[i]);
    return 0;
}

static void test_evicted_told_busy(void **state)
{
    (void)state;
    char url[64];
    int port = free_port();
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
    pid_t client = spawn(run_busy_client, &port);
    rank_arg_t r1 = {params(1, 2, url, KEY), 1500, false};
    spawn(run_rank, &r1);
    rank_arg_t a0 = {params(0, 2, url, KEY), 0, false};
    assert_int_equal(run_rank(&a0), 0);
    assert_int_equal(reap(client, 5.0), 0);
    reap_all_ok();
}

/* ---- failures ------------------------------------------------------------ */

static void test_missing_rank(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    /* Rank 2 never comes: rank 1 learns who is missing from rank 0. */
    expect_fail_arg_t a1 = {params(1, 3, url, KEY), HCOMM_ERR_TIMEOUT, "rank(s) 2 never joined",
                            1.0};
    spawn(run_expect_fail, &a1);
    expect_fail_arg_t a0 = {params(0, 3, url, KEY), HCOMM_ERR_TIMEOUT, "rank(s) 2 never joined",
                            1.0};
    double t0 = hc_time_sec();
    assert_int_equal(run_expect_fail(&a0), 0);
    double took = hc_time_sec() - t0;
    assert_true(took >= 0.9 && took < 3.0);
    reap_all_ok();
}

static void test_missing_rank0(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    expect_fail_arg_t a1 = {params(1, 2, url, KEY), HCOMM_ERR_TIMEOUT, "could not reach rank 0",
                            1.0};
    double t0 = hc_time_sec();
    assert_int_equal(run_expect_fail(&a1), 0);
    assert_true(hc_time_sec() - t0 < 3.0);
}

static void test_wrong_key_rank(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    /* A rank with another key is turned away at once and says why; as a
     * process of this user on this host it stops the job at once too (a
     * stranger's wrong key does not: test_bootstrap_auth). */
    expect_fail_arg_t a1 = {params(1, 2, url, "another-job"), HCOMM_ERR_BOOTSTRAP,
                            "job key mismatch: rank 0 at", 5.0, 2.0};
    spawn(run_expect_fail, &a1);
    expect_fail_arg_t a0 = {params(0, 2, url, KEY), HCOMM_ERR_BOOTSTRAP,
                            "job key mismatch: rank 1 (a process of this user", 5.0, 2.0};
    assert_int_equal(run_expect_fail(&a0), 0);
    reap_all_ok();
}

/* ---- a port span (a port derived from a launcher's ids) ----------------- */

/* A listening socket on 127.0.0.1:port that never accepts: the kernel
 * completes connections into its backlog, and nobody answers a hello. */
static int listen_silent(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    assert_true(fd >= 0);
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 64) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A base port with the n ports from it free (each bound once to check). */
static int free_ports(int n)
{
    /* Candidates: ephemeral ports the kernel hands out, then fixed bases
     * below the ephemeral range (tests running beside this one take
     * ephemeral ports all the time). */
    for (int attempt = 0; attempt < 400; attempt++) {
        int base = attempt < 100 ? free_port() : 20000 + (attempt - 100) * 37, fds[8], k;
        if (base + n > 65535) continue;
        for (k = 0; k < n && (fds[k] = listen_silent(base + k)) >= 0; k++)
            ;
        for (int i = 0; i < k; i++)
            close(fds[i]);
        if (k == n) return base;
    }
    fail_msg("no %d consecutive free ports (last error: %s)", n, strerror(errno));
    return -1;
}

static bool port_listening(int port)
{
    char why[64];
    (void)why;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool up = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return up;
}

static void test_port_span(void **state)
{
    (void)state;
    int base = free_ports(4);
    char url[64], other[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", base);
    snprintf(other, sizeof(other), "tcp://127.0.0.1:%d", base + 1);
    /* The first port of the span: something that accepts and never answers.
     * The second: another job's rank 0, waiting for its own rank 1. */
    int silent = listen_silent(base);
    assert_true(silent >= 0);
    rank_arg_t o0 = {params(0, 2, other, "another-job"), 0, false};
    spawn(run_rank, &o0);
    for (int i = 0; i < 400 && !port_listening(base + 1); i++)
        sleep_ms(5);
    assert_true(port_listening(base + 1));
    /* This job, its address the first port of a span of 4: rank 0 listens
     * on the third, its ranks pass the silent one (no WELCOME within 2 s)
     * and the other job's (which refuses their key). */
    rank_arg_t args[3];
    for (int r = 1; r < 3; r++) {
        args[r] = (rank_arg_t){params(r, 3, url, KEY), 0, false};
        args[r].p.port_span = 4;
        spawn(run_rank, &args[r]);
    }
    rank_arg_t a0 = {params(0, 3, url, KEY), 100, false};
    a0.p.port_span = 4;
    double t0 = hc_time_sec();
    assert_int_equal(run_rank(&a0), 0);
    double took = hc_time_sec() - t0;
    assert_true(took < 8.0);
    /* The other job still completes once its rank 1 comes. */
    rank_arg_t o1 = {params(1, 2, other, "another-job"), 0, false};
    spawn(run_rank, &o1);
    reap_all_ok();
    /* Without a span the same address finds the silent listener only. */
    expect_fail_arg_t a1 = {params(1, 2, url, KEY), HCOMM_ERR_TIMEOUT, "got no answer to its hello",
                            1.0, 0};
    assert_int_equal(run_expect_fail(&a1), 0);
    close(silent);
}

static void test_port_span_all_busy(void **state)
{
    (void)state;
    int base = free_ports(2);
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", base);
    int a = listen_silent(base), b = listen_silent(base + 1);
    assert_true(a >= 0 && b >= 0);
    expect_fail_arg_t a0 = {params(0, 2, url, KEY), HCOMM_ERR_BOOTSTRAP, "every port", 1.0, 1.0};
    a0.p.port_span = 2;
    assert_int_equal(run_expect_fail(&a0), 0);
    /* A rank of that job finds no rank 0 of its own on either port and
     * says so by the deadline. */
    expect_fail_arg_t a1 = {params(1, 2, url, KEY), HCOMM_ERR_TIMEOUT, "found no rank 0 of its job",
                            3.0, 6.0};
    a1.p.port_span = 2;
    assert_int_equal(run_expect_fail(&a1), 0);
    close(a);
    close(b);
}

static int run_mismatch(void *arg)
{
    rank_arg_t *a = arg;
    uint8_t blob[BLOB_LEN], in[8] = {0}, out[8 * 4];
    hc_bootstrap_t *bs = NULL;
    const void *table;
    int rc = 0;
    blob_fill(blob, a->p.rank);
    if (hc_bootstrap_open(&a->p, blob, BLOB_LEN, TIMEOUT, &bs, &table) != HCOMM_OK)
        CHILD_FAIL(50, "open failed");
    /* Rank 2 disagrees about the length: everyone fails, naming rank 2. */
    hcomm_status_t st = hc_bootstrap_allgather(bs, in, a->p.rank == 2 ? 4 : 8, out, TIMEOUT);
    if (st != HCOMM_ERR_BOOTSTRAP || !strstr(hc_error_last(), "rank 2"))
        CHILD_FAIL(51, "allgather gave %d", st);
out:
    hc_bootstrap_close(bs);
    return rc;
}

static void test_allgather_len_mismatch(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    rank_arg_t args[3];
    for (int r = 1; r < 3; r++) {
        args[r] = (rank_arg_t){params(r, 3, url, KEY), 0, false};
        spawn(run_mismatch, &args[r]);
    }
    args[0] = (rank_arg_t){params(0, 3, url, KEY), 0, false};
    assert_int_equal(run_mismatch(&args[0]), 0);
    reap_all_ok();
}

static void test_tcp_ipv6(void **state)
{
    (void)state;
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (fd >= 0) close(fd);
        print_message("skipped: no IPv6 loopback here\n");
        skip();
    }
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    char url[64];
    snprintf(url, sizeof(url), "tcp://[::1]:%d", ntohs(sa.sin6_port));
    run_job(url, 3, 100, KEY);
}

/* ---- liveness ------------------------------------------------------------- */

typedef struct {
    hc_bootstrap_params_t p;
    int victim;
} peer_arg_t;

/* Survivors: barrier, then an allgather that must fail naming the victim. */
static int run_survivor(void *arg)
{
    peer_arg_t *a = arg;
    uint8_t blob[BLOB_LEN];
    hc_bootstrap_t *bs = NULL;
    const void *table;
    char want[32];
    int rc = 0;
    blob_fill(blob, a->p.rank);
    if (hc_bootstrap_open(&a->p, blob, BLOB_LEN, TIMEOUT, &bs, &table) != HCOMM_OK) return 40;
    if (a->p.rank == a->victim) {
        /* Wait to be killed. */
        if (hc_bootstrap_barrier(bs, TIMEOUT) != HCOMM_OK) rc = 41;
        for (;;)
            pause();
    }
    if (hc_bootstrap_barrier(bs, TIMEOUT) != HCOMM_OK) rc = 42;
    uint32_t in = 5, out[8];
    hcomm_status_t st = hc_bootstrap_allgather(bs, &in, 4, out, TIMEOUT);
    snprintf(want, sizeof(want), "rank %d", a->victim);
    if (rc == 0 && (st != HCOMM_ERR_PEER_FAILED || !strstr(hc_error_last(), want))) {
        fprintf(stderr, "rank %d: allgather gave %d \"%s\"\n", a->p.rank, st, hc_error_last());
        rc = 43;
    }
    hc_bootstrap_close(bs);
    return rc;
}

/* Verdicts: rank 3 reports rank 1 failed and leaves at once while rank 1 is
 * still up (its close reaches rank 0 first), then rank 1 is killed. Rank 0
 * must judge rank 1 the cause of both, and rank 2 must hear the same. */
static int run_verdict_rank(void *arg)
{
    peer_arg_t *a = arg;
    uint8_t blob[BLOB_LEN];
    hc_bootstrap_t *bs = NULL;
    const void *table;
    blob_fill(blob, a->p.rank);
    if (hc_bootstrap_open(&a->p, blob, BLOB_LEN, TIMEOUT, &bs, &table) != HCOMM_OK) return 50;
    if (hc_bootstrap_barrier(bs, TIMEOUT) != HCOMM_OK) return 51;
    if (a->p.rank == 1)
        for (;;)
            pause();
    if (a->p.rank == 3) {
        if (hc_bootstrap_report_failure(bs, 1, HCOMM_ERR_PEER_FAILED, "seen by rank 3") != -1)
            return 52; /* no verdict can exist yet */
        _exit(0);      /* leaves without a goodbye, as a failed job's rank does */
    }
    double end = hc_time_sec() + TIMEOUT;
    while ((hc_bootstrap_verdict(bs, 1, NULL) < 0 || hc_bootstrap_verdict(bs, 3, NULL) < 0) &&
           hc_time_sec() < end) {
        (void)hc_bootstrap_poll(bs);
        sleep_ms(1);
    }
    int first = -1, v1 = hc_bootstrap_verdict(bs, 1, &first), v3 = hc_bootstrap_verdict(bs, 3, NULL);
    if (v1 != 1 || v3 != 1 || first != 1) {
        fprintf(stderr, "rank 2: verdicts rank 1 -> %d, rank 3 -> %d, first %d\n", v1, v3, first);
        return 53;
    }
    hc_bootstrap_close(bs);
    return 0;
}

static void test_verdicts(void **state)
{
    (void)state;
    char url[64];
    int size = 4;
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    peer_arg_t args[4];
    pid_t pids[4];
    for (int r = 1; r < size; r++) {
        args[r] = (peer_arg_t){params(r, size, url, KEY), 1};
        pids[r] = spawn(run_verdict_rank, &args[r]);
    }
    hc_bootstrap_params_t p = params(0, size, url, KEY);
    uint8_t blob[BLOB_LEN];
    blob_fill(blob, 0);
    hc_bootstrap_t *bs;
    const void *table;
    assert_int_equal(hc_bootstrap_open(&p, blob, BLOB_LEN, TIMEOUT, &bs, &table), HCOMM_OK);
    assert_int_equal(hc_bootstrap_barrier(bs, TIMEOUT), HCOMM_OK);
    assert_int_equal(reap(pids[3], 10), 0);
    double end = hc_time_sec() + 5;
    while (hc_bootstrap_verdict(bs, 3, NULL) < 0 && hc_time_sec() < end) {
        (void)hc_bootstrap_poll(bs);
        sleep_ms(1);
    }
    /* Rank 3 left after seeing rank 1 fail: rank 1 is the cause, judged
     * before its own connection closes. */
    assert_int_equal(hc_bootstrap_verdict(bs, 3, NULL), 1);
    assert_int_equal(hc_bootstrap_verdict(bs, 1, NULL), 1);
    assert_int_equal(kill(pids[1], SIGKILL), 0);
    assert_int_equal(reap(pids[1], 5), 128 + SIGKILL);
    assert_int_equal(reap(pids[2], 10), 0);
    (void)hc_bootstrap_poll(bs);
    assert_int_equal(hc_bootstrap_verdict(bs, 1, NULL), 1);
    assert_int_equal(hc_bootstrap_verdict(bs, 2, NULL), 1); /* left after it */
    hc_bootstrap_close(bs);
}

/* Relay: blobs between non-zero ranks go through rank 0, in order, with the
 * true sender; rank 0 sends and receives its own; a relay sent just before an
 * allgather is taken inside it (sideband) and still delivered. */
typedef struct {
    int n;
    int from[8];
    uint32_t channel[8];
    char text[8][16];
} relay_log_t;

static void relay_record(void *arg, int from, uint32_t channel, const void *blob, size_t len)
{
    relay_log_t *l = arg;
    if (l->n == 8) return;
    l->from[l->n] = from;
    l->channel[l->n] = channel;
    snprintf(l->text[l->n], sizeof(l->text[0]), "%.*s", (int)len, (const char *)blob);
    l->n++;
}

static bool relay_wait(hc_bootstrap_t *bs, relay_log_t *l, int want)
{
    double end = hc_time_sec() + TIMEOUT;
    while (l->n < want && hc_time_sec() < end) {
        (void)hc_bootstrap_poll(bs);
        sleep_ms(1);
    }
    return l->n >= want;
}

static int run_relay_rank(void *arg)
{
    peer_arg_t *a = arg;
    uint8_t blob[BLOB_LEN];
    hc_bootstrap_t *bs = NULL;
    const void *table;
    relay_log_t log = {0};
    blob_fill(blob, a->p.rank);
    if (hc_bootstrap_open(&a->p, blob, BLOB_LEN, TIMEOUT, &bs, &table) != HCOMM_OK) return 60;
    hc_bootstrap_set_relay(bs, relay_record, &log);
    if (hc_bootstrap_barrier(bs, TIMEOUT) != HCOMM_OK) return 61;
    if (a->p.rank == 1) {
        if (hc_bootstrap_relay(bs, 2, 3, "one", 3) != HCOMM_OK) return 62;
        if (hc_bootstrap_relay(bs, 2, 3, "two", 3) != HCOMM_OK) return 63;
        if (hc_bootstrap_relay(bs, 0, 5, "hub", 3) != HCOMM_OK) return 64;
        if (!relay_wait(bs, &log, 2)) return 65;
        /* From rank 2 (through rank 0) and from rank 0 itself. */
        bool ok = false;
        for (int i = 0; i < 2; i++)
            ok |= log.from[i] == 2 && !strcmp(log.text[i], "back") && log.channel[i] == 4;
        if (!ok) return 66;
    } else {
        if (!relay_wait(bs, &log, 2)) return 67;
        if (log.from[0] != 1 || strcmp(log.text[0], "one") || log.channel[0] != 3 ||
            log.from[1] != 1 || strcmp(log.text[1], "two"))
            return 68;
        if (hc_bootstrap_relay(bs, 1, 4, "back", 4) != HCOMM_OK) return 69;
    }
    uint32_t in = 1, out[3];
    if (hc_bootstrap_allgather(bs, &in, 4, out, TIMEOUT) != HCOMM_OK) return 70;
    hc_bootstrap_close(bs);
    return 0;
}

static void test_relay(void **state)
{
    (void)state;
    char url[64];
    int size = 3;
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    peer_arg_t args[3];
    pid_t pids[3];
    for (int r = 1; r < size; r++) {
        args[r] = (peer_arg_t){params(r, size, url, KEY), -1};
        pids[r] = spawn(run_relay_rank, &args[r]);
    }
    hc_bootstrap_params_t p = params(0, size, url, KEY);
    uint8_t blob[BLOB_LEN];
    blob_fill(blob, 0);
    hc_bootstrap_t *bs;
    const void *table;
    relay_log_t log = {0};
    assert_int_equal(hc_bootstrap_open(&p, blob, BLOB_LEN, TIMEOUT, &bs, &table), HCOMM_OK);
    hc_bootstrap_set_relay(bs, relay_record, &log);
    assert_int_equal(hc_bootstrap_barrier(bs, TIMEOUT), HCOMM_OK);
    assert_int_equal(hc_bootstrap_relay(bs, 1, 4, "back", 4), HCOMM_OK);
    /* Rank 0 forwards 1 -> 2 and 2 -> 1 from its poll (or inside the
     * allgather below) and receives "hub" itself. */
    uint32_t in = 1, out[3];
    assert_true(relay_wait(bs, &log, 1));
    assert_int_equal(hc_bootstrap_allgather(bs, &in, 4, out, TIMEOUT), HCOMM_OK);
    assert_int_equal(log.from[0], 1);
    assert_int_equal(log.channel[0], 5);
    assert_string_equal(log.text[0], "hub");
    assert_int_equal(hc_bootstrap_relay(bs, 0, 1, "x", 1), HCOMM_ERR_INVALID);
    char big[HC_BOOTSTRAP_MAX_RELAY + 1] = {0};
    assert_int_equal(hc_bootstrap_relay(bs, 1, 1, big, sizeof(big)), HCOMM_ERR_INVALID);
    assert_int_equal(reap(pids[1], 10), 0);
    assert_int_equal(reap(pids[2], 10), 0);
    hc_bootstrap_close(bs);
}

static void test_poll_kill(void **state)
{
    (void)state;
    char url[64];
    int size = 4, victim = 2;
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    peer_arg_t args[4];
    pid_t pids[4];
    for (int r = 1; r < size; r++) {
        args[r] = (peer_arg_t){params(r, size, url, KEY), victim};
        pids[r] = spawn(run_survivor, &args[r]);
    }
    hc_bootstrap_params_t p = params(0, size, url, KEY);
    uint8_t blob[BLOB_LEN];
    blob_fill(blob, 0);
    hc_bootstrap_t *bs;
    const void *table;
    assert_int_equal(hc_bootstrap_open(&p, blob, BLOB_LEN, TIMEOUT, &bs, &table), HCOMM_OK);
    assert_true(table_ok(table, size));
    /* The others are inside the barrier: their messages wait on our sockets,
     * and pending data is not a failure. */
    sleep_ms(100);
    assert_int_equal(dead_rank(bs, size), -1);
    assert_int_equal(hc_bootstrap_barrier(bs, TIMEOUT), HCOMM_OK);
    assert_int_equal(dead_rank(bs, size), -1);

    assert_int_equal(kill(pids[victim], SIGKILL), 0);
    double t0 = hc_time_sec();
    int dead;
    while ((dead = dead_rank(bs, size)) == -1 && hc_time_sec() - t0 < 2.0)
        sleep_ms(1);
    double took = hc_time_sec() - t0;
    print_message("bootstrap poll saw rank %d die after %.1f ms\n", dead, took * 1e3);
    assert_int_equal(dead, victim);
    /* The kernel closes the victim's sockets as it exits, which on a loaded
     * machine (an ASan process unmapping its shadow) takes tens of ms; what
     * is checked is that no timeout is involved. */
    assert_true(took < 0.5);
    assert_int_equal(reap(pids[victim], 5), 128 + SIGKILL);

    uint32_t in = 5, out[8];
    assert_int_equal(hc_bootstrap_allgather(bs, &in, 4, out, TIMEOUT), HCOMM_ERR_PEER_FAILED);
    assert_non_null(strstr(hc_error_last(), "rank 2"));
    /* The star is unusable after a failure, and says so at once. */
    assert_int_equal(hc_bootstrap_barrier(bs, TIMEOUT), HCOMM_ERR_PEER_FAILED);
    hc_bootstrap_close(bs);
    reap_all_ok();
}

/* A connect() to a port nothing listens on, from that same port, joins the
 * socket to itself (TCP's simultaneous open): what a rank's retries can do
 * by chance when rank 0's port is in the ephemeral range, holding the port
 * rank 0 is about to bind (a netns test failed so: "cannot listen on
 * 10.77.0.1:46054 ... Address already in use"). hc_bs_self_connected finds
 * it; an ordinary connection is not one. */
static void test_self_connect_detected(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0); /* to itself */
    assert_true(hc_bs_self_connected(fd));
    close(fd);

    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in b = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t bl = sizeof(b);
    assert_int_equal(bind(l, (struct sockaddr *)&b, sizeof(b)), 0);
    assert_int_equal(listen(l, 1), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&b, &bl), 0);
    assert_int_equal(connect(c, (struct sockaddr *)&b, sizeof(b)), 0);
    assert_false(hc_bs_self_connected(c));
    int s = accept(l, NULL, NULL);
    assert_true(s >= 0);
    assert_false(hc_bs_self_connected(s));
    close(s);
    close(c);
    close(l);
    int u = socket(AF_INET, SOCK_STREAM, 0); /* not connected */
    assert_false(hc_bs_self_connected(u));
    close(u);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
#define T(f) cmocka_unit_test_teardown(f, kill_all)
    const struct CMUnitTest tests[] = {
        T(test_single_rank),
        T(test_self_connect_detected),
        T(test_bad_args),
        T(test_tcp_4),
        T(test_file_4),
        T(test_file_stale_nokey),
        T(test_wrong_key_rank),
        T(test_garbage_clients),
        T(test_missing_rank),
        T(test_missing_rank0),
        T(test_poll_kill),
        T(test_verdicts),
        T(test_relay),
        T(test_allgather_len_mismatch),
        T(test_tcp_ipv6),
        T(test_silent_clients_dropped),
        T(test_connect_storm),
        T(test_evicted_told_busy),
        T(test_port_span),
        T(test_port_span_all_busy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
