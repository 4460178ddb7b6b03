/* drv/tcp/tcp_hello.c: the handshake of a data socket, between tcp driver
 * instances of one process (ranks of a pretend job, over loopback) and raw
 * sockets playing a stranger:
 *   - a put on a new connection writes hello and frame before it returns
 *     (the frame is in the acceptor's socket before anyone progresses);
 *   - both sides connect at once, frames written before the verdict: the
 *     lower rank's socket wins, the loser's frames arrive once, in order;
 *   - the hello proves the key: a rank with another key is refused, and
 *     the hello carries no byte of the key;
 *   - a stranger replaying a recorded hello, the same hello on an index
 *     the peer does not open, or with its counter raised, is refused and
 *     delivers nothing;
 *   - a stranger answering a connect with ACCEPT but no proof: the
 *     connector fails the peer and reads nothing from it. */
#include "base/config.h"
#include "drv/tcp/tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

typedef struct {
    uint64_t next_seq; /* expected hdr.a of the next EAGER frame */
    int delivered, bad_order, done, failed;
    char why[200];
} side_t;

static side_t side[2];
static hc_drv_env_t env[2];
static const int node_of_rank[2] = {0, 1};
static const int local0[1] = {0}, local1[1] = {1};
static const struct hc_drv_ops *ops;
static uint8_t payload[256];
static uint64_t seq_of[2];

static void cb_deliver(void *core, hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *p)
{
    side_t *s = core;
    (void)conn;
    (void)p;
    if (hdr->type != HC_FRAME_EAGER || hdr->a != s->next_seq) s->bad_order++;
    s->next_seq = hdr->a + 1;
    s->delivered++;
}

static void cb_put_done(void *core, hc_conn_t *conn, void *cookie, hcomm_status_t st)
{
    (void)conn;
    (void)cookie;
    if (st == HCOMM_OK) ((side_t *)core)->done++;
}

static void cb_peer_failed(void *core, int peer, hcomm_status_t st, const char *why)
{
    side_t *s = core;
    (void)peer;
    (void)st;
    s->failed++;
    snprintf(s->why, sizeof(s->why), "%s", why);
}

static hc_drv_t *open_rank(int rank, const char *key)
{
    memset(&side[rank], 0, sizeof(side[rank]));
    seq_of[rank] = 0;
    env[rank] = (hc_drv_env_t){.rank = rank,
                               .size = 2,
                               .local_rank = 0,
                               .local_size = 1,
                               .local_ranks = rank ? local1 : local0,
                               .node_of_rank = node_of_rank,
                               .node_id = rank ? "n1" : "n0",
                               .job_key = key,
                               .bootstrap_host = "",
                               .core = &side[rank],
                               .deliver = cb_deliver,
                               .put_done = cb_put_done,
                               .peer_failed = cb_peer_failed};
    hc_drv_t *d = NULL;
    assert_int_equal(ops->open(&env[rank], &d), HCOMM_OK);
    return d;
}

static hc_conn_t *wire_addr(hc_drv_t *from, int peer, const hc_tcp_addr_t *a)
{
    hc_conn_t *c = NULL;
    assert_int_equal(ops->connect(from, peer, a, sizeof(*a), &c), HCOMM_OK);
    return c;
}

static hc_conn_t *wire(hc_drv_t *from, int peer, hc_drv_t *to)
{
    hc_tcp_addr_t a;
    size_t len = sizeof(a);
    assert_int_equal(ops->addr_pack(to, &a, &len), HCOMM_OK);
    assert_int_equal(len, sizeof(a));
    return wire_addr(from, peer, &a);
}

static void put_n(hc_conn_t *c, int from, int n, bool cookie)
{
    for (int i = 0; i < n; i++) {
        hc_frame_hdr_t h = {.type = HC_FRAME_EAGER, .len = cookie ? 200 : 8, .a = seq_of[from]++};
        hcomm_status_t st = ops->put(c, &h, payload, cookie ? payload : NULL);
        assert_true(st == HCOMM_OK || st == HCOMM_IN_PROGRESS);
    }
}

static void pump(hc_drv_t *a, hc_drv_t *b, double secs)
{
    uint64_t end = hc_time_ns() + (uint64_t)(secs * 1e9);
    while (hc_time_ns() < end) {
        if (a) ops->progress(a);
        if (b) ops->progress(b);
        usleep(200);
    }
}

static void pump_until(hc_drv_t *a, hc_drv_t *b, const int *v, int want)
{
    uint64_t end = hc_time_ns() + 5000000000ull;
    while (*v < want && hc_time_ns() < end) {
        if (a) ops->progress(a);
        if (b) ops->progress(b);
        usleep(100);
    }
    assert_int_equal(*v, want);
}

static void setup_cfg(void)
{
    setenv("HCOMM_SOCKET_IFNAME", "lo", 1);
    setenv("HCOMM_CONN_IDLE_TIMEOUT", "0", 1);
    assert_int_equal(hc_config_load(), HCOMM_OK);
    ops = hc_drv_find("tcp");
    assert_non_null(ops);
}

static int dial(const hc_tcp_drv_t *d)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = d->me.port};
    memcpy(&sa.sin_addr, d->me.addr, 4);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* 1. The put that opens a connection has written hello and frame before it
 * returns: rank 1 finds both without rank 0 progressing again. */
static void test_put_writes_hello(void **state)
{
    (void)state;
    setup_cfg();
    hc_drv_t *d0 = open_rank(0, "job-key-1"), *d1 = open_rank(1, "job-key-1");
    hc_conn_t *c01 = wire(d0, 1, d1);
    wire(d1, 0, d0);
    put_n(c01, 0, 3, false);
    pump_until(NULL, d1, &side[1].delivered, 3); /* rank 0 never called in again */
    hc_tcp_conn_t *t01 = (hc_tcp_conn_t *)c01;
    assert_int_equal(t01->slots[0].state, HC_TCP_S_HELLO_SENT);
    assert_non_null(t01->slots[0].unacked.head); /* kept until the verdict */
    put_n(c01, 0, 2, true);                      /* cookies: put_done waits for the verdict */
    assert_int_equal(side[0].done, 0);
    pump_until(d0, d1, &side[0].done, 2);
    pump_until(d0, d1, &side[1].delivered, 5);
    assert_int_equal(t01->slots[0].state, HC_TCP_S_UP);
    assert_null(t01->slots[0].unacked.head);
    assert_int_equal(side[1].bad_order, 0);
    assert_int_equal(side[0].failed + side[1].failed, 0);
    ops->close(d0);
    ops->close(d1);
}

/* 2. Both connect at once, each writing frames before a verdict: the lower
 * rank's socket wins and the higher rank's frames, written on the socket
 * that lost (some after it was reset), arrive on the winner, once and in
 * order. */
static void test_simultaneous(void **state)
{
    (void)state;
    setup_cfg();
    hc_drv_t *d0 = open_rank(0, "job-key-2"), *d1 = open_rank(1, "job-key-2");
    hc_conn_t *c01 = wire(d0, 1, d1), *c10 = wire(d1, 0, d0);
    put_n(c01, 0, 20, false);
    put_n(c10, 1, 20, false);
    put_n(c10, 1, 5, true);
    put_n(c01, 0, 5, true);
    hc_tcp_conn_t *t01 = (hc_tcp_conn_t *)c01, *t10 = (hc_tcp_conn_t *)c10;
    /* both wrote their frames before any verdict, on sockets of their own */
    assert_int_equal(t01->slots[0].state, HC_TCP_S_HELLO_SENT);
    assert_int_equal(t10->slots[0].state, HC_TCP_S_HELLO_SENT);
    assert_non_null(t01->slots[0].unacked.head);
    assert_non_null(t10->slots[0].unacked.head);
    /* Rank 0 alone: it refuses rank 1's socket (TIEBREAK) and closes it
     * unread, which resets it; rank 1, not progressing, writes more on it:
     * the error must not fail rank 0, the verdict decides. */
    pump(d0, NULL, 0.02);
    put_n(c10, 1, 5, false);
    assert_true(t10->slots[0].wr_shut);
    assert_int_equal(side[1].failed, 0);
    pump_until(d0, d1, &side[1].delivered, 25);
    pump_until(d0, d1, &side[0].delivered, 30);
    pump_until(d0, d1, &side[0].done, 5);
    pump_until(d0, d1, &side[1].done, 5);
    assert_true(t01->slots[0].outgoing);  /* rank 0's socket won */
    assert_false(t10->slots[0].outgoing); /* rank 1 took it */
    pump(d0, d1, 0.1);
    assert_int_equal(side[0].delivered, 30); /* nothing twice */
    assert_int_equal(side[1].delivered, 25);
    assert_int_equal(side[0].bad_order + side[1].bad_order, 0);
    assert_int_equal(side[0].failed + side[1].failed, 0);
    ops->close(d0);
    ops->close(d1);
}

/* 3. Another job's key: refused, nothing delivered; the hello holds no
 * byte string of the key. */
static void test_wrong_key(void **state)
{
    (void)state;
    setup_cfg();
    static const char key[] = "the-secret-of-job-3";
    hc_drv_t *d0 = open_rank(0, key), *d1 = open_rank(1, "another-job-key");
    hc_conn_t *c01 = wire(d0, 1, d1);
    wire(d1, 0, d0);
    put_n(c01, 0, 2, false);
    const hc_tcp_hello_t *h = &((hc_tcp_conn_t *)c01)->slots[0].hello;
    assert_null(memmem(h, sizeof(*h), key, 8));
    pump_until(d0, d1, &side[0].failed, 1);
    assert_non_null(strstr(side[0].why, "closed the connection during the handshake"));
    assert_int_equal(side[1].delivered, 0);
    assert_int_equal(side[1].failed, 0);
    ops->close(d0);
    ops->close(d1);
}

/* Sends hello bytes and a forged frame from a raw socket; returns whether
 * the acceptor answered at all (it must close without a verdict). */
static bool stranger_try(hc_drv_t *d1, const void *hello)
{
    int fd = dial((hc_tcp_drv_t *)d1);
    hc_frame_hdr_t f = {.type = HC_FRAME_EAGER, .len = 8, .a = 1000};
    uint8_t msg[sizeof(hc_tcp_hello_t) + sizeof(f) + 8];
    memcpy(msg, hello, sizeof(hc_tcp_hello_t));
    memcpy(msg + sizeof(hc_tcp_hello_t), &f, sizeof(f));
    memset(msg + sizeof(hc_tcp_hello_t) + sizeof(f), 'A', 8);
    assert_int_equal(send(fd, msg, sizeof(msg), MSG_NOSIGNAL), (ssize_t)sizeof(msg));
    uint8_t ack[sizeof(hc_tcp_ack_t)];
    bool answered = false, closed = false;
    for (int i = 0; i < 3000 && !answered && !closed; i++) {
        ops->progress(d1);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1) != 1) continue;
        ssize_t n = recv(fd, ack, sizeof(ack), MSG_DONTWAIT);
        answered = n > 0;
        closed = n == 0 || (n < 0 && errno != EAGAIN);
    }
    close(fd);
    assert_true(answered || closed); /* the acceptor acted, one way or the other */
    return answered;
}

/* 4. A stranger with rank 0's recorded hello: verbatim (a replay), on
 * socket index 9, with the counter raised: refused without a verdict, and
 * rank 1 delivers nothing. Rank 0's own connection is unharmed. */
static void test_replay(void **state)
{
    (void)state;
    setup_cfg();
    hc_drv_t *d0 = open_rank(0, "job-key-4"), *d1 = open_rank(1, "job-key-4");
    hc_conn_t *c01 = wire(d0, 1, d1);
    wire(d1, 0, d0);
    put_n(c01, 0, 1, false);
    pump_until(d0, d1, &side[1].delivered, 1);
    hc_tcp_hello_t rec = ((hc_tcp_conn_t *)c01)->slots[0].hello;
    assert_int_equal(rec.counter, 1);
    assert_false(stranger_try(d1, &rec));
    hc_tcp_hello_t idx9 = rec;
    idx9.sock_idx = 9;
    assert_false(stranger_try(d1, &idx9));
    hc_tcp_hello_t bumped = rec;
    bumped.counter += 1000;
    assert_false(stranger_try(d1, &bumped));
    pump(d0, d1, 0.1);
    assert_int_equal(side[1].delivered, 1);
    assert_int_equal(side[0].failed + side[1].failed, 0);
    put_n(c01, 0, 1, false);
    pump_until(d0, d1, &side[1].delivered, 2);
    ops->close(d0);
    ops->close(d1);
}

/* 5. A stranger listening at rank 1's address (the table says so) answers
 * rank 0's hello with ACCEPT and a frame, but cannot sign the verdict:
 * rank 0 fails the peer and delivers nothing. The hello it got verifies
 * with the key over the nonce the stranger published. */
static void test_forged_verdict(void **state)
{
    (void)state;
    setup_cfg();
    static const char key[] = "job-key-5";
    hc_drv_t *d0 = open_rank(0, key);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(lfd, 4), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    hc_tcp_addr_t a = {.magic = HC_TCP_MAGIC,
                       .family = AF_INET,
                       .port = sa.sin_port,
                       .nsocks = 1,
                       .version = HC_TCP_VERSION,
                       .instance = 0x5151};
    memcpy(a.addr, &sa.sin_addr, 4);
    memset(a.nonce, 0x77, sizeof(a.nonce));
    hc_conn_t *c01 = wire_addr(d0, 1, &a);
    put_n(c01, 0, 1, false);
    int fd = accept(lfd, NULL, NULL);
    assert_true(fd >= 0);
    hc_tcp_hello_t h;
    assert_int_equal(recv(fd, &h, sizeof(h), MSG_WAITALL), (ssize_t)sizeof(h));
    uint8_t mac[HC_AUTH_MAC];
    const hc_auth_part_t parts[] = {
        {"hcomm-tcp-hello", 15}, {&h, offsetof(hc_tcp_hello_t, mac)}, {a.nonce, sizeof(a.nonce)}};
    assert_int_equal(hc_auth_mac(key, strlen(key), parts, 3, mac), HCOMM_OK);
    assert_true(hc_auth_equal(mac, h.mac, sizeof(mac)));
    assert_true(h.dst_instance == 0x5151 && h.src_rank == 0 && h.dst_rank == 1);
    hc_tcp_ack_t ack = {.magic = HC_TCP_MAGIC, .verdict = HC_TCP_ACCEPT, .instance = 0x5151};
    hc_frame_hdr_t f = {.type = HC_FRAME_EAGER, .len = 0, .a = 0};
    assert_int_equal(send(fd, &ack, sizeof(ack), 0), (ssize_t)sizeof(ack));
    assert_int_equal(send(fd, &f, sizeof(f), 0), (ssize_t)sizeof(f));
    pump_until(d0, NULL, &side[0].failed, 1);
    assert_non_null(strstr(side[0].why, "without proof of the job key"));
    assert_int_equal(side[0].delivered, 0);
    close(fd);
    close(lfd);
    ops->close(d0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_writes_hello), cmocka_unit_test(test_simultaneous),
        cmocka_unit_test(test_wrong_key), cmocka_unit_test(test_replay),
        cmocka_unit_test(test_forged_verdict)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
