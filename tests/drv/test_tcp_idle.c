/* drv/tcp/tcp_idle.c: two tcp driver instances in one process (ranks 0 and 1
 * of a pretend job, over loopback) with HCOMM_CONN_IDLE_TIMEOUT=0.2:
 * idle close and transparent reopen keep frame order; frames put during the
 * handshake are held, not lost; a handshake refused because of traffic;
 * both sides asking at once; a peer that restarted at the address the table
 * holds is failed with HCOMM_ERR_PEER_FAILED and gets no frame.
 * test_stall_watchdog (drv/tcp/tcp_watch.c): a socket whose readiness event
 * is lost and a socket whose queued frames fell off the flush list still
 * deliver every frame, in order; the hang report's line names what is held.
 * test_socket_buffers: data sockets keep the kernel's autotuning unless
 * HCOMM_SOCKET_BUF sets their size. */
#include "base/config.h"
#include "drv/tcp/tcp.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

typedef struct {
    uint64_t next_seq; /* expected hdr.a of the next EAGER frame */
    int delivered, bad_order, done, failed;
    hcomm_status_t fail_status;
    char why[160];
} side_t;

static side_t side[3];
static hc_drv_env_t env[3];
static const int node_of_rank[2] = {0, 1};
static const int local0[1] = {0}, local1[1] = {1};
static const struct hc_drv_ops *ops;
static uint8_t payload[64];

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
    s->failed++;
    s->fail_status = st;
    snprintf(s->why, sizeof(s->why), "%s", why);
}

static hc_drv_t *open_rank(int i, int rank)
{
    memset(&side[i], 0, sizeof(side[i]));
    env[i] = (hc_drv_env_t){.rank = rank,
                            .size = 2,
                            .local_rank = 0,
                            .local_size = 1,
                            .local_ranks = rank ? local1 : local0,
                            .node_of_rank = node_of_rank,
                            .node_id = rank ? "n1" : "n0",
                            .job_key = "test-key",
                            .bootstrap_host = "",
                            .core = &side[i],
                            .deliver = cb_deliver,
                            .put_done = cb_put_done,
                            .peer_failed = cb_peer_failed};
    hc_drv_t *d = NULL;
    assert_int_equal(ops->open(&env[i], &d), HCOMM_OK);
    return d;
}

static hc_conn_t *wire(hc_drv_t *from, int peer, hc_drv_t *to)
{
    hc_tcp_addr_t a;
    size_t len = sizeof(a);
    assert_int_equal(ops->addr_pack(to, &a, &len), HCOMM_OK);
    hc_conn_t *c = NULL;
    assert_int_equal(ops->connect(from, peer, &a, len, &c), HCOMM_OK);
    return c;
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

/* Pumps until *v >= want or 5 s pass. */
static void pump_until(hc_drv_t *a, hc_drv_t *b, const int *v, int want)
{
    uint64_t end = hc_time_ns() + 5000000000ull;
    while (*v < want && hc_time_ns() < end) {
        if (a) ops->progress(a);
        if (b) ops->progress(b);
        usleep(100);
    }
    assert_true(*v >= want);
}

static uint64_t seq_of[2];

static void put_n(hc_conn_t *c, int from, int n)
{
    for (int i = 0; i < n; i++) {
        hc_frame_hdr_t h = {.type = HC_FRAME_EAGER, .len = sizeof(payload), .a = seq_of[from]++};
        hcomm_status_t st = ops->put(c, &h, payload, payload);
        assert_true(st == HCOMM_OK || st == HCOMM_IN_PROGRESS);
    }
}

static bool all_closed(hc_conn_t *conn)
{
    hc_tcp_conn_t *c = (hc_tcp_conn_t *)conn;
    for (int i = 0; i < HC_TCP_MAX_SOCKS; i++)
        if (c->slots[i].fd >= 0) return false;
    return c->idle_state == HC_TCP_IDLE_NONE && !c->hold;
}

/* The tcp driver's ops over lo with HCOMM_CONN_IDLE_TIMEOUT=idle (the
 * configuration reloaded: other variables a test set count too). */
static void load_tcp(const char *idle)
{
    setenv("HCOMM_CONN_IDLE_TIMEOUT", idle, 1);
    setenv("HCOMM_SOCKET_IFNAME", "lo", 1);
    assert_int_equal(hc_config_load(), HCOMM_OK);
    ops = hc_drv_find("tcp");
    assert_non_null(ops);
}

/* Ranks 0 and 1, each connected to the other, frame numbers from 0. */
static void open_pair(hc_drv_t **d0, hc_drv_t **d1, hc_conn_t **c01, hc_conn_t **c10)
{
    seq_of[0] = seq_of[1] = 0;
    *d0 = open_rank(0, 0);
    *d1 = open_rank(1, 1);
    *c01 = wire(*d0, 1, *d1);
    *c10 = wire(*d1, 0, *d0);
}

static void test_idle(void **state)
{
    (void)state;
    load_tcp("0.2");
    hc_drv_t *d0, *d1;
    hc_conn_t *c01, *c10;
    open_pair(&d0, &d1, &c01, &c10);
    hc_tcp_conn_t *t01 = (hc_tcp_conn_t *)c01, *t10 = (hc_tcp_conn_t *)c10;
    hc_tcp_drv_t *td0 = (hc_tcp_drv_t *)d0, *td1 = (hc_tcp_drv_t *)d1;

    /* 1. traffic both ways, idle, closed on both sides, reopened in order */
    put_n(c01, 0, 50);
    put_n(c10, 1, 50);
    pump_until(d0, d1, &side[1].delivered, 50);
    pump_until(d0, d1, &side[0].delivered, 50);
    assert_false(all_closed(c01));
    pump(d0, d1, 0.5);
    assert_true(all_closed(c01));
    assert_true(all_closed(c10));
    assert_true(td0->idle_closed == 1 && td1->idle_closed == 1);
    put_n(c01, 0, 50);
    pump_until(d0, d1, &side[1].delivered, 100);
    put_n(c10, 1, 50);
    pump_until(d0, d1, &side[0].delivered, 100);

    /* 2. frames put while our CLOSE is in flight are held, then the peer
     * (which sent meanwhile) refuses: nothing lost, order kept */
    pump(d0, d1, 0.1);
    uint64_t end = hc_time_ns() + 2000000000ull;
    t10->last_act_ns = hc_time_ns(); /* rank 1 stays busy-looking: rank 0 asks */
    while (t01->idle_state != HC_TCP_IDLE_CLOSE_SENT && hc_time_ns() < end)
        ops->progress(d0), usleep(200);
    assert_int_equal(t01->idle_state, HC_TCP_IDLE_CLOSE_SENT);
    put_n(c01, 0, 10); /* held */
    assert_non_null(t01->slots[0].txq.head);
    put_n(c10, 1, 10); /* crosses the CLOSE: rank 1 will refuse */
    pump_until(d0, d1, &side[1].delivered, 110);
    pump_until(d0, d1, &side[0].delivered, 110);
    assert_int_equal(t01->idle_state, HC_TCP_IDLE_NONE);
    assert_true(td0->idle_closed == 1 && td1->idle_closed == 1);

    /* 3. held frames, peer agrees: closed, reopened, the held frames arrive */
    end = hc_time_ns() + 2000000000ull;
    t10->last_act_ns = hc_time_ns();
    while (t01->idle_state != HC_TCP_IDLE_CLOSE_SENT && hc_time_ns() < end)
        ops->progress(d0), usleep(200);
    assert_int_equal(t01->idle_state, HC_TCP_IDLE_CLOSE_SENT);
    put_n(c01, 0, 10);
    pump_until(d0, d1, &side[1].delivered, 120);
    assert_true(td0->idle_closed == 2 && td1->idle_closed == 2);

    /* 4. both ask at once: the lower rank's request stands */
    pump(d0, d1, 0.05);
    uint64_t now = hc_time_ns();
    t01->last_act_ns = t10->last_act_ns = now - 1000000000ull;
    t01->seen_tx = t01->n_tx, t01->seen_rx = t01->n_rx;
    t10->seen_tx = t10->n_tx, t10->seen_rx = t10->n_rx;
    hc_drv_tcp_idle_timer(t01, now);
    hc_drv_tcp_idle_timer(t10, now);
    assert_int_equal(t01->idle_state, HC_TCP_IDLE_CLOSE_SENT);
    assert_int_equal(t10->idle_state, HC_TCP_IDLE_CLOSE_SENT);
    pump(d0, d1, 0.1);
    assert_true(all_closed(c01) && all_closed(c10));
    assert_true(td0->idle_closed == 3 && td1->idle_closed == 3);
    put_n(c10, 1, 5);
    pump_until(d0, d1, &side[0].delivered, 115);

    assert_int_equal(side[0].bad_order, 0);
    assert_int_equal(side[1].bad_order, 0);
    assert_int_equal(side[0].failed + side[1].failed, 0);

    /* 5. rank 1 restarts at the address the table holds (same address, new
     * process): rank 0's reconnect must fail the peer, and the new process
     * gets nothing. The table keeps the old instance; only the port moves. */
    pump(d0, d1, 0.5);
    assert_true(all_closed(c01));
    ops->close(d1);
    hc_drv_t *d2 = open_rank(2, 1);
    wire(d2, 0, d0);
    hc_tcp_drv_t *td2 = (hc_tcp_drv_t *)d2;
    assert_true(td2->me.instance != t01->addr.instance);
    t01->addr.port = td2->me.port;
    memcpy(t01->addr.addr, td2->me.addr, sizeof(t01->addr.addr));
    put_n(c01, 0, 3);
    pump_until(d0, d2, &side[0].failed, 1);
    assert_int_equal(side[0].fail_status, HCOMM_ERR_PEER_FAILED);
    assert_non_null(strstr(side[0].why, "restarted"));
    assert_int_equal(side[2].delivered, 0);
    hc_frame_hdr_t h = {.type = HC_FRAME_EAGER, .len = 0};
    assert_int_equal(ops->put(c01, &h, NULL, payload), HCOMM_ERR_PEER_FAILED);
    ops->close(d2);
    ops->close(d0);
}

static uint8_t big[256 << 10];

static void test_stall_watchdog(void **state)
{
    (void)state;
    load_tcp("0");
    hc_drv_t *d0, *d1;
    hc_conn_t *c01, *c10;
    open_pair(&d0, &d1, &c01, &c10);
    hc_tcp_conn_t *t01 = (hc_tcp_conn_t *)c01, *t10 = (hc_tcp_conn_t *)c10;
    hc_tcp_drv_t *td0 = (hc_tcp_drv_t *)d0, *td1 = (hc_tcp_drv_t *)d1;
    put_n(c01, 0, 10);
    pump_until(d0, d1, &side[1].delivered, 10);
    char why[600];

    /* 1. rank 1's epoll no longer reports socket 0 (a lost readiness
     * event): the frames wait in the kernel until the watchdog reads them */
    hc_tcp_slot_t *r0 = &t10->slots[0];
    assert_int_equal(r0->state, HC_TCP_S_UP);
    assert_int_equal(epoll_ctl(td1->epfd, EPOLL_CTL_DEL, r0->fd, NULL), 0);
    put_n(c01, 0, 50);
    pump(d0, d1, 0.05);
    assert_int_equal(side[1].delivered, 10);
    ops->explain(c10, why, sizeof(why));
    assert_non_null(strstr(why, "socket 0 up: 0 frames queued"));
    assert_null(strstr(why, " 0 unread"));
    pump_until(d0, d1, &side[1].delivered, 60);
    assert_true(td1->n_stall_kicks >= 1);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = r0};
    assert_int_equal(epoll_ctl(td1->epfd, EPOLL_CTL_ADD, r0->fd, &ev), 0);

    /* 2. rank 0's socket 0 holds queued frames (rank 1 reads nothing
     * meanwhile) and falls off the flush list: the watchdog puts it back */
    hc_tcp_slot_t *s0 = &t01->slots[0];
    int sent = 0;
    while (!s0->txq.head && sent < 200) {
        hc_frame_hdr_t h = {.type = HC_FRAME_EAGER, .len = sizeof(big), .a = seq_of[0]++};
        hcomm_status_t st = ops->put(c01, &h, big, big);
        assert_true(st == HCOMM_OK || st == HCOMM_IN_PROGRESS);
        sent++;
    }
    assert_non_null(s0->txq.head);
    assert_true(td0->flush == s0 && !s0->flush_next && s0->want_write);
    td0->flush = NULL;
    s0->want_write = false;
    ops->explain(c01, why, sizeof(why));
    assert_non_null(strstr(why, "off the flush list"));
    uint64_t kicks = td0->n_stall_kicks, t0 = hc_time_ns();
    pump_until(d0, d1, &side[1].delivered, 60 + sent);
    /* a few watch periods, well before rank 1 would suspect rank 0 (3 s)
     * and its probe's echo, queued behind, would mark the socket again */
    assert_true(hc_time_ns() - t0 < 1500000000ull);
    assert_true(td0->n_stall_kicks > kicks);
    assert_int_equal(side[1].bad_order, 0);
    assert_int_equal(side[0].failed + side[1].failed, 0);
    ops->close(d1);
    ops->close(d0);
}

static int rcvbuf_of(const hc_tcp_slot_t *s)
{
    int v = 0;
    socklen_t l = sizeof(v);
    assert_int_equal(getsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &v, &l), 0);
    return v;
}

/* 32 MiB from rank 0 to rank 1 in 256 KiB frames; rank 1's rcvbuf of
 * socket 0 before and after. */
static void stream_rcvbuf(int *before, int *after)
{
    hc_drv_t *d0, *d1;
    hc_conn_t *c01, *c10;
    open_pair(&d0, &d1, &c01, &c10);
    put_n(c01, 0, 1);
    pump_until(d0, d1, &side[1].delivered, 1);
    hc_tcp_slot_t *r0 = &((hc_tcp_conn_t *)c10)->slots[0];
    *before = rcvbuf_of(r0);
    for (int i = 0; i < 128; i++) {
        hc_frame_hdr_t h = {.type = HC_FRAME_EAGER, .len = sizeof(big), .a = seq_of[0]++};
        hcomm_status_t st;
        while ((st = ops->put(c01, &h, big, NULL)) == HCOMM_ERR_AGAIN) {
            ops->progress(d0);
            ops->progress(d1);
        }
        assert_true(st == HCOMM_OK || st == HCOMM_IN_PROGRESS);
    }
    pump_until(d0, d1, &side[1].delivered, 129);
    *after = rcvbuf_of(r0);
    assert_int_equal(side[1].bad_order, 0);
    ops->close(d1);
    ops->close(d0);
}

/* Socket buffers: the kernel's autotuning unless HCOMM_SOCKET_BUF sets
 * them. A fixed 4 MiB (the old default) made loopback receivers drop
 * segments under load and a transfer stall (docs/tcp.md, "Stalls"). */
static void test_socket_buffers(void **state)
{
    (void)state;
    unsetenv("HCOMM_SOCKET_BUF");
    load_tcp("0");
    int before, after;
    stream_rcvbuf(&before, &after);
    printf("autotuned: rcvbuf %d before, %d after 32 MiB\n", before, after);
    assert_true(after > before); /* autotuning is on: it grew */
    setenv("HCOMM_SOCKET_BUF", "1M", 1);
    load_tcp("0");
    stream_rcvbuf(&before, &after);
    printf("HCOMM_SOCKET_BUF=1M: rcvbuf %d before, %d after\n", before, after);
    assert_int_equal(before, 2 << 20); /* the kernel doubles what is set */
    assert_int_equal(after, 2 << 20);
    unsetenv("HCOMM_SOCKET_BUF");
    assert_int_equal(hc_config_load(), HCOMM_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_idle),
                                       cmocka_unit_test(test_stall_watchdog),
                                       cmocka_unit_test(test_socket_buffers)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
