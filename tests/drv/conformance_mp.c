/*
 * Driver conformance through the public API: what the driver contract of
 * drv/drv.h looks like from hcomm_* calls, run once per driver under
 * hcommrun (HCOMM_NET=<driver> HCOMM_SHM=0 for network drivers, HCOMM_SHM=1
 * for shm, one rank for self). Every byte received is compared with a
 * pattern of (source, destination, phase, index), so a message delivered to
 * the wrong receive, shifted, cut, reordered or duplicated is caught.
 *
 *   mp_drv_conformance          the p2p phases below, 1 or 2 ranks (more:
 *                               pairs 0-1, 2-3, ...; an odd last rank talks
 *                               to itself)
 *   mp_drv_conformance --kill   2 ranks: rank 1 is SIGKILLed while rank 0
 *                               waits on it: ERR_PEER_FAILED naming rank 1
 *                               within 10 s for a receive, a rendezvous send
 *                               in flight and a later send
 *   mp_drv_conformance --drop   2 ranks, fake driver with
 *                               HCOMM_FAKE_DROP_AFTER: ping-pong until the
 *                               connection drops; both ranks get
 *                               ERR_PEER_FAILED naming the other and the
 *                               fake drop within 10 s
 *
 * Phases: sizes (every size around the drivers' max_frame, eager_max and
 * the core's 16-fragment cap, up to 16 MiB, in malloc, unaligned and pool
 * buffers, non-blocking both ways at once and blocking), self (messages to
 * this rank), order (2000 messages of one tag, half received unexpected,
 * eager, fragmented and rendezvous sizes mixed, zero-byte ones with a NULL
 * buffer), outstanding (1000 sends and 1000 receives posted before any is
 * waited for, completed in random order), truncation (too long and too
 * short at eager, fragmented and rendezvous sizes; the connection works
 * afterwards).
 */
#include "common/mp_test.h"

#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

static hcomm_comm_t world;
static int partner; /* this rank's peer in the pair (itself when alone) */

/* Around every limit a driver has today: shm max_frame 8152 and eager
 * 65216, fake 32 KiB / 256 KiB, tcp 512 KiB / 64 KiB, the core's cap of 16
 * fragments, self's 64 KiB; then rendezvous sizes. */
static const size_t sizes[] = {
    0,      1,      7,      8,      63,     64,     65,      4095,        4096,
    4097,   8151,   8152,   8153,   8191,   8192,   8193,    32767,       32768,
    32769,  65215,  65216,  65217,  65535,  65536,  65537,   130432,      130433,
    262143, 262144, 262145, 524287, 524288, 524289, MIB + 3, 4 * MIB + 1, 16 * MIB + 5};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static uint64_t seed_of(int src, int dst, int phase, uint64_t idx)
{
    return mp_hash(((uint64_t)src << 48) ^ ((uint64_t)dst << 40) ^ ((uint64_t)phase << 32) ^ idx);
}

static void fill(uint8_t *buf, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = mp_hash(seed + i / 8);
        memcpy(buf + i, &v, n - i < 8 ? n - i : 8);
    }
}

/* First wrong byte or n. */
static size_t check(const uint8_t *buf, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = mp_hash(seed + i / 8);
        size_t m = n - i < 8 ? n - i : 8;
        if (memcmp(buf + i, &v, m))
            for (size_t k = 0; k < m; k++)
                if (buf[i + k] != ((uint8_t *)&v)[k]) return i + k;
    }
    return n;
}

static void expect_data(const uint8_t *buf, size_t n, uint64_t seed, const char *what, size_t size)
{
    size_t bad = check(buf, n, seed);
    if (bad != n) mp_fail("%s (%zu bytes from rank %d): byte %zu wrong", what, size, partner, bad);
}

/* A buffer of kind k: 0 malloc, 1 malloc + 1 (unaligned), 2 pool memory. */
typedef struct {
    uint8_t *base, *p;
    int kind;
} buf_t;

static void buf_get(buf_t *b, size_t n, int kind)
{
    b->kind = kind;
    if (kind == 2) {
        void *p = NULL;
        MP_OK(hcomm_mem_alloc(n ? n : 1, &p));
        b->base = b->p = p;
    } else {
        b->base = mp_xmalloc(n + 1);
        b->p = b->base + kind;
    }
}

static void buf_put(buf_t *b, size_t n)
{
    if (b->kind == 2) {
        MP_OK(hcomm_mem_free(b->base));
    } else {
        /* The registration cache cannot see free(). */
        MP_OK(hcomm_mem_deregister(b->base, n + 1));
        free(b->base);
    }
}

static const char *const kind_names[] = {"malloc", "unaligned", "pool"};

/* ---- phases ------------------------------------------------------------------------------- */

static void phase_sizes(void)
{
    for (size_t si = 0; si < NSIZES; si++) {
        size_t n = sizes[si];
        for (int kind = 0; kind < 3; kind++) {
            buf_t s, r;
            buf_get(&s, n, kind);
            buf_get(&r, n, (kind + 1) % 3); /* receive into another kind */
            uint64_t idx = si * 8 + (uint64_t)kind;
            fill(s.p, n, seed_of(mp_rank, partner, 1, idx));
            memset(r.p, 0, n);
            hcomm_request_t rq, sq;
            char what[96];
            snprintf(what, sizeof(what), "isend/irecv of %s into %s", kind_names[kind],
                     kind_names[r.kind]);
            MP_OK(hcomm_irecv(r.p, n, HCOMM_UINT8, partner, (int)idx, world, &rq));
            MP_OK(hcomm_isend(s.p, n, HCOMM_UINT8, partner, (int)idx, world, &sq));
            if (MP_EXPECT(HCOMM_OK, hcomm_wait(sq)) & MP_EXPECT(HCOMM_OK, hcomm_wait(rq)))
                expect_data(r.p, n, seed_of(partner, mp_rank, 1, idx), what, n);
            /* Blocking: the lower rank sends first. */
            idx += 4;
            fill(s.p, n, seed_of(mp_rank, partner, 1, idx));
            memset(r.p, 0, n);
            hcomm_status_t a = HCOMM_OK, b = HCOMM_OK;
            if (partner == mp_rank) {
                MP_OK(hcomm_irecv(r.p, n, HCOMM_UINT8, partner, (int)idx, world, &rq));
                a = hcomm_send(s.p, n, HCOMM_UINT8, partner, (int)idx, world);
                b = hcomm_wait(rq);
            } else if (mp_rank < partner) {
                a = hcomm_send(s.p, n, HCOMM_UINT8, partner, (int)idx, world);
                b = hcomm_recv(r.p, n, HCOMM_UINT8, partner, (int)idx, world);
            } else {
                b = hcomm_recv(r.p, n, HCOMM_UINT8, partner, (int)idx, world);
                a = hcomm_send(s.p, n, HCOMM_UINT8, partner, (int)idx, world);
            }
            snprintf(what, sizeof(what), "send/recv of %s into %s", kind_names[kind],
                     kind_names[r.kind]);
            if (MP_EXPECT(HCOMM_OK, a) & MP_EXPECT(HCOMM_OK, b))
                expect_data(r.p, n, seed_of(partner, mp_rank, 1, idx), what, n);
            buf_put(&s, n);
            buf_put(&r, n);
        }
    }
}

/* Messages to this rank itself, eager and rendezvous, expected and not. */
static void phase_self(void)
{
    static const size_t self_sizes[] = {0, 1, 8192, 65536, 65537, MIB + 3};
    for (size_t i = 0; i < sizeof(self_sizes) / sizeof(self_sizes[0]); i++) {
        size_t n = self_sizes[i];
        uint8_t *s = mp_xmalloc(n), *r = mp_xmalloc(n);
        fill(s, n, seed_of(mp_rank, mp_rank, 2, i));
        hcomm_request_t sq, rq;
        MP_OK(hcomm_isend(s, n, HCOMM_UINT8, mp_rank, 100 + (int)i, world, &sq));
        MP_OK(hcomm_irecv(r, n, HCOMM_UINT8, mp_rank, 100 + (int)i, world, &rq));
        if (MP_EXPECT(HCOMM_OK, hcomm_wait(rq)) & MP_EXPECT(HCOMM_OK, hcomm_wait(sq)))
            expect_data(r, n, seed_of(mp_rank, mp_rank, 2, i), "message to self", n);
        MP_OK(hcomm_mem_deregister(s, n ? n : 1));
        MP_OK(hcomm_mem_deregister(r, n ? n : 1));
        free(s);
        free(r);
    }
}

/* Message i of the order phase: eager, fragmented and rendezvous sizes,
 * and zero bytes (every 11th with a NULL buffer). */
static size_t order_size(uint32_t i)
{
    static const size_t cyc[] = {0, 1, 100, 4000, 9000, 33000, 70000, 17, 8, 0};
    if (i % 50 == 49) return 300000 + i;
    return cyc[i % 10];
}

static void phase_order(void)
{
    const uint32_t n = 2000, early = 1000;
    uint8_t **sb = mp_xmalloc(n * sizeof(*sb)), **rb = mp_xmalloc(n * sizeof(*rb));
    hcomm_request_t *sq = mp_xmalloc(n * sizeof(*sq)), *rq = mp_xmalloc(n * sizeof(*rq));
    for (uint32_t i = 0; i < n; i++) {
        size_t len = order_size(i);
        bool null = len == 0 && i % 11 == 0;
        sb[i] = null ? NULL : mp_xmalloc(len);
        rb[i] = null ? NULL : mp_xmalloc(len);
        if (sb[i]) fill(sb[i], len, seed_of(mp_rank, partner, 3, i));
    }
    /* The first half is posted before anything is sent, the rest after
     * the partner sent everything: those arrive unexpected. */
    for (uint32_t i = 0; i < early; i++)
        MP_OK(hcomm_irecv(rb[i], order_size(i), HCOMM_UINT8, partner, 7, world, &rq[i]));
    for (uint32_t i = 0; i < n; i++)
        MP_OK(hcomm_isend(sb[i], order_size(i), HCOMM_UINT8, partner, 7, world, &sq[i]));
    for (uint32_t i = 0; i < early; i++)
        MP_EXPECT(HCOMM_OK, hcomm_wait(rq[i]));
    mp_sleep_ms(50);
    for (uint32_t i = early; i < n; i++)
        MP_OK(hcomm_irecv(rb[i], order_size(i), HCOMM_UINT8, partner, 7, world, &rq[i]));
    for (uint32_t i = early; i < n; i++)
        MP_EXPECT(HCOMM_OK, hcomm_wait(rq[i]));
    for (uint32_t i = 0; i < n; i++)
        MP_EXPECT(HCOMM_OK, hcomm_wait(sq[i]));
    int reported = 0;
    for (uint32_t i = 0; i < n && reported < 5; i++) {
        size_t len = order_size(i),
               bad = rb[i] ? check(rb[i], len, seed_of(partner, mp_rank, 3, i)) : len;
        if (bad != len) {
            mp_fail("order: message %u of %u (%zu bytes, tag 7) from rank %d: byte %zu wrong "
                    "(reordered, lost or duplicated)",
                    i, n, len, partner, bad);
            reported++;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        size_t len = order_size(i);
        if (sb[i]) {
            MP_OK(hcomm_mem_deregister(sb[i], len ? len : 1));
            MP_OK(hcomm_mem_deregister(rb[i], len ? len : 1));
        }
        free(sb[i]);
        free(rb[i]);
    }
    free(sb);
    free(rb);
    free(sq);
    free(rq);
}

/* 1000 sends and 1000 receives outstanding, over 13 tags, completed by
 * hcomm_test in a shuffled order. */
static void phase_outstanding(void)
{
    const uint32_t n = 1000;
    size_t *len = mp_xmalloc(n * sizeof(*len));
    uint8_t **sb = mp_xmalloc(n * sizeof(*sb)), **rb = mp_xmalloc(n * sizeof(*rb));
    hcomm_request_t *req = mp_xmalloc(2 * n * sizeof(*req));
    uint32_t *order = mp_xmalloc(2 * n * sizeof(*order));
    for (uint32_t i = 0; i < n; i++) {
        len[i] = i % 100 == 0 ? 200000 + i : (size_t)(mp_hash(i) % 40000);
        sb[i] = mp_xmalloc(len[i]);
        rb[i] = mp_xmalloc(len[i]);
        fill(sb[i], len[i], seed_of(mp_rank, partner, 4, i));
    }
    /* Tag i % 13: within a tag, messages match in order; the receive for
     * message i is the (i / 13)-th of its tag on both sides. */
    for (uint32_t i = 0; i < n; i++)
        MP_OK(
            hcomm_irecv(rb[i], len[i], HCOMM_UINT8, partner, 1000 + (int)(i % 13), world, &req[i]));
    for (uint32_t i = 0; i < n; i++)
        MP_OK(hcomm_isend(sb[i], len[i], HCOMM_UINT8, partner, 1000 + (int)(i % 13), world,
                          &req[n + i]));
    for (uint32_t i = 0; i < 2 * n; i++)
        order[i] = i;
    for (uint32_t i = 2 * n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(mp_hash(i ^ (uint64_t)mp_rank << 20) % (i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    uint32_t left = 2 * n;
    double deadline = mp_now() + 120;
    while (left && mp_now() < deadline) {
        for (uint32_t k = 0; k < 2 * n; k++) {
            uint32_t i = order[k];
            if (!req[i]) continue;
            int done = 0;
            hcomm_status_t st = hcomm_test(req[i], &done);
            if (done || st != HCOMM_OK) {
                if (st != HCOMM_OK)
                    mp_fail("outstanding: %s %u completed with %s (%s)", i < n ? "recv" : "send",
                            i % n, mp_status_name(st), hcomm_last_error());
                req[i] = NULL;
                left--;
            }
        }
    }
    if (left) mp_fail("outstanding: %u of %u requests not complete after 120 s", left, 2 * n);
    for (uint32_t i = 0; i < n; i++) {
        size_t bad = check(rb[i], len[i], seed_of(partner, mp_rank, 4, i));
        if (bad != len[i])
            mp_fail("outstanding: message %u (%zu bytes, tag %u) from rank %d: byte %zu wrong", i,
                    len[i], 1000 + i % 13, partner, bad);
        MP_OK(hcomm_mem_deregister(sb[i], len[i] ? len[i] : 1));
        MP_OK(hcomm_mem_deregister(rb[i], len[i] ? len[i] : 1));
        free(sb[i]);
        free(rb[i]);
    }
    free(len);
    free(sb);
    free(rb);
    free(req);
    free(order);
}

/* A message longer or shorter than its receive: ERR_TRUNCATED naming both
 * sizes, at eager, fragmented and rendezvous sizes, and not a byte written
 * past the receive buffer; the sender returns (OK or ERR_TRUNCATED, as
 * hcomm.h leaves it open). One direction at a time, so that the receiver's
 * last_error is its own (with a peer, the sender's failure lands in the
 * other process). The next message works. */
static void phase_truncation(void)
{
    static const size_t msg[] = {100, 100000, 2 * MIB};
    const size_t guard = 64;
    for (int dir = 0; dir < 2; dir++) {
        bool alone = partner == mp_rank;
        bool sender = alone || (dir == 0 ? mp_rank < partner : mp_rank > partner);
        bool receiver = alone || !sender;
        for (size_t i = 0; i < 3; i++) {
            for (int longer = 0; longer < 2; longer++) {
                size_t m = msg[i], cap = longer ? m / 2 : 2 * m;
                int tag = 2000 + dir * 100 + (int)i * 2 + longer;
                char what[96];
                snprintf(what, sizeof(what), "truncation: %zu-byte message into %zu bytes", m, cap);
                uint8_t *s = mp_xmalloc(m), *r = mp_xmalloc(cap + guard);
                fill(s, m, seed_of(mp_rank, partner, 5, i));
                memset(r + cap, 0xa5, guard);
                hcomm_request_t rq = NULL, sq = NULL;
                if (receiver) MP_OK(hcomm_irecv(r, cap, HCOMM_UINT8, partner, tag, world, &rq));
                if (sender) MP_OK(hcomm_isend(s, m, HCOMM_UINT8, partner, tag, world, &sq));
                hcomm_status_t sst = sq ? hcomm_wait(sq) : HCOMM_OK;
                if (sst != HCOMM_OK && sst != HCOMM_ERR_TRUNCATED)
                    mp_fail("%s: sender expected OK or ERR_TRUNCATED got %s (%s)", what,
                            mp_status_name(sst), hcomm_last_error());
                if (rq &&
                    mp_expect_status_(HCOMM_ERR_TRUNCATED, hcomm_wait(rq), what, __FILE__,
                                      __LINE__) &&
                    !alone) {
                    char ms[32], cs[32];
                    snprintf(ms, sizeof(ms), "%zu", m);
                    snprintf(cs, sizeof(cs), "%zu", cap);
                    mp_expect_msg(what, "hcomm_recv", ms, cs, NULL);
                }
                for (size_t g = 0; rq && g < guard; g++)
                    if (r[cap + g] != 0xa5) {
                        mp_fail("%s: byte %zu past the receive buffer was overwritten", what, g);
                        break;
                    }
                MP_OK(hcomm_mem_deregister(s, m));
                MP_OK(hcomm_mem_deregister(r, cap + guard));
                free(s);
                free(r);
            }
        }
        MP_OK(hcomm_barrier(world));
    }
    /* Zero bytes: NULL buffers are fine; a zero-byte receive does not take
     * a longer message. */
    hcomm_request_t rq, sq;
    MP_OK(hcomm_irecv(NULL, 0, HCOMM_UINT8, partner, 2100, world, &rq));
    MP_EXPECT(HCOMM_OK, hcomm_send(NULL, 0, HCOMM_UINT8, partner, 2100, world));
    MP_EXPECT(HCOMM_OK, hcomm_wait(rq));
    MP_OK(hcomm_irecv(NULL, 0, HCOMM_UINT8, partner, 2101, world, &rq));
    uint64_t x = 5;
    MP_OK(hcomm_isend(&x, 1, HCOMM_UINT64, partner, 2101, world, &sq));
    MP_EXPECT(HCOMM_ERR_TRUNCATED, hcomm_wait(rq));
    MP_EXPECT(HCOMM_OK, hcomm_wait(sq));
    /* The connection still works. */
    uint64_t out = seed_of(mp_rank, partner, 6, 0), in = 0;
    MP_OK(hcomm_irecv(&in, 1, HCOMM_UINT64, partner, 2102, world, &rq));
    MP_OK(hcomm_send(&out, 1, HCOMM_UINT64, partner, 2102, world));
    MP_EXPECT(HCOMM_OK, hcomm_wait(rq));
    if (in != seed_of(partner, mp_rank, 6, 0))
        mp_fail("after truncation: message from rank %d expected %llx got %llx", partner,
                (unsigned long long)seed_of(partner, mp_rank, 6, 0), (unsigned long long)in);
}

/* ---- faults ------------------------------------------------------------------------------- */

/* Rank 1 of --kill: the process hcommrun started waits for the real rank,
 * its child, and exits 0 when that was SIGKILLed as planned, so that
 * hcommrun does not terminate the survivor first. */
static void kill_wrap(void)
{
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) return;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        ;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
        printf("rank 1: SIGKILLed as planned\n");
        exit(0);
    }
    fprintf(stderr, "rank 1: expected to die by SIGKILL, exit status %#x\n", status);
    exit(1);
}

static int run_kill(void)
{
    if (mp_size != 2) {
        printf("skipped: --kill needs 2 ranks\n");
        return mp_rank == 0 ? 77 : 0;
    }
    /* Warm up: eager and rendezvous both ways, so every path is up. */
    phase_self();
    size_t big = 4 * MIB;
    uint8_t *s = mp_xmalloc(big), *r = mp_xmalloc(big);
    fill(s, big, 1);
    for (int k = 0; k < 2; k++) {
        size_t n = k ? big : 64;
        hcomm_request_t rq;
        MP_OK(hcomm_irecv(r, n, HCOMM_UINT8, partner, 1, world, &rq));
        MP_OK(hcomm_send(s, n, HCOMM_UINT8, partner, 1, world));
        MP_OK(hcomm_wait(rq));
    }
    MP_OK(hcomm_barrier(world));
    if (mp_rank == 1) {
        mp_sleep_ms(300);
        raise(SIGKILL);
    }
    double t0 = mp_now();
    hcomm_request_t sq;
    MP_OK(hcomm_isend(s, big, HCOMM_UINT8, 1, 2, world, &sq)); /* never received */
    uint64_t x;
    mp_expect_peer_failed(hcomm_recv(&x, 1, HCOMM_UINT64, 1, 3, world), t0, 1, "hcomm_recv");
    mp_expect_peer_failed(hcomm_wait(sq), t0, 1, "rendezvous hcomm_isend+wait");
    mp_expect_peer_failed(hcomm_send(s, 64, HCOMM_UINT8, 1, 4, world), t0, 1, "hcomm_send after");
    free(s);
    free(r);
    hcomm_status_t st = hcomm_finalize();
    if (st != HCOMM_OK)
        mp_fail("hcomm_finalize after the peer died: %s (%s)", mp_status_name(st),
                hcomm_last_error());
    printf("rank 0: mp_drv_conformance --kill: %s\n", mp_failures ? "FAILED" : "passed");
    return mp_failures ? 1 : 0;
}

static int run_drop(void)
{
    const char *v = getenv("HCOMM_FAKE_DROP_AFTER");
    if (mp_size != 2 || !v || !v[0] || !strcmp(v, "0")) {
        printf("skipped: --drop needs 2 ranks and HCOMM_FAKE_DROP_AFTER\n");
        return mp_rank == 0 ? 77 : 0;
    }
    double t0 = mp_now(), t_end = t0 + 20;
    hcomm_status_t st = HCOMM_OK;
    uint64_t i = 0;
    uint8_t buf[3000];
    for (; st == HCOMM_OK && mp_now() < t_end; i++) {
        size_t n = (size_t)(mp_hash(i) % sizeof(buf));
        if ((i % 2 == 0) == (mp_rank == 0)) {
            fill(buf, n, seed_of(mp_rank, partner, 7, i));
            st = hcomm_send(buf, n, HCOMM_UINT8, partner, 9, world);
        } else {
            st = hcomm_recv(buf, n, HCOMM_UINT8, partner, 9, world);
            if (st == HCOMM_OK)
                expect_data(buf, n, seed_of(partner, mp_rank, 7, i), "ping-pong", n);
        }
    }
    char name[32];
    snprintf(name, sizeof(name), "rank %d", partner);
    if (st != HCOMM_ERR_PEER_FAILED) {
        mp_fail("--drop: after %llu messages expected ERR_PEER_FAILED got %s (%s)",
                (unsigned long long)i, mp_status_name(st), hcomm_last_error());
    } else {
        mp_expect_msg("--drop: the failure", name, "HCOMM_FAKE_DROP_AFTER", NULL);
        if (mp_now() - t0 > 10)
            mp_fail("--drop: ERR_PEER_FAILED after %.1f s, expected within 10 s", mp_now() - t0);
        printf("rank %d: message %llu failed as expected: %s\n", mp_rank, (unsigned long long)i,
               hcomm_last_error());
    }
    st = hcomm_finalize();
    if (st != HCOMM_OK)
        mp_fail("hcomm_finalize after the drop: %s (%s)", mp_status_name(st), hcomm_last_error());
    if (mp_rank == 0 || mp_failures)
        printf("rank %d: mp_drv_conformance --drop: %s\n", mp_rank,
               mp_failures ? "FAILED" : "passed");
    return mp_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    bool kill_mode = false, drop_mode = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kill"))
            kill_mode = true;
        else if (!strcmp(argv[i], "--drop"))
            drop_mode = true;
        else {
            fprintf(stderr, "usage: %s [--kill | --drop]\n", argv[0]);
            return 2;
        }
    }
    const char *r = getenv("HCOMM_RANK"), *n = getenv("HCOMM_SIZE");
    if (kill_mode && r && n && !strcmp(r, "1") && !strcmp(n, "2")) kill_wrap();
    hcomm_status_t st = hcomm_init(NULL, NULL);
    if (st == HCOMM_ERR_NO_DEVICE) {
        printf("skipped: %s\n", hcomm_last_error());
        return 77;
    }
    MP_OK(st);
    mp_rank = hcomm_comm_rank(hcomm_comm_world());
    mp_size = hcomm_comm_size(hcomm_comm_world());
    world = hcomm_comm_world();
    partner = (mp_rank ^ 1) < mp_size ? (mp_rank ^ 1) : mp_rank;
    if (kill_mode) return run_kill();
    if (drop_mode) return run_drop();
    struct {
        const char *name;
        void (*fn)(void);
    } phases[] = {{"sizes", phase_sizes},
                  {"self", phase_self},
                  {"order", phase_order},
                  {"outstanding", phase_outstanding},
                  {"truncation", phase_truncation}};
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
        double t = mp_now();
        phases[i].fn();
        MP_OK(hcomm_barrier(world));
        if (mp_rank == 0) printf("rank 0: phase %s done in %.2f s\n", phases[i].name, mp_now() - t);
    }
    return mp_finish("mp_drv_conformance");
}
