/*
 * Point-to-point under hcommrun, any number of ranks: every byte of every
 * message is checked against a pattern derived from (source, destination,
 * size, phase), so a message delivered to the wrong receive, shifted, cut or
 * duplicated is caught, not just one that is missing.
 *
 *   mp_p2p [--max-bytes N]   ring, all-to-all, FIFO, self, unexpected,
 *                            test-polling and truncation phases; message
 *                            sizes straddle the eager limit and go up to N
 *                            (default 16 MiB)
 *   mp_p2p --huge            one 1.5 GiB message 0 -> 1 (skips, exit 77,
 *                            when MemAvailable is too small)
 *   mp_p2p --short           messages shorter than the receive buffer give
 *                            the same status at eager and rendezvous sizes;
 *                            the largest tag
 *   mp_p2p --any-kill        the last rank dies while the others wait in a
 *                            receive from any source: ERR_PEER_FAILED naming
 *                            it, promptly (tests/api/mp_fault.sh any_killed)
 * The phase "any" receives from HCOMM_ANY_SOURCE: every other rank sends rank
 * 0 two messages per size; rank 0 takes them with hcomm_recv_any,
 * hcomm_irecv_any and hcomm_recv(HCOMM_ANY_SOURCE), posted before and after
 * they arrived, and checks each against the pattern of the source it was
 * told, and that each source's two messages came in the order sent.
 */
#include "common/mp_test.h"

#include <signal.h>

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

static const size_t sizes_all[] = {0,           1,        8,       100,      8 * KIB - 1, 8 * KIB,
                                   8 * KIB + 1, 64 * KIB, MIB + 3, 16 * MIB, 64 * MIB};
#define NSIZES_ALL (sizeof(sizes_all) / sizeof(sizes_all[0]))
static size_t g_max_bytes = 16 * MIB;

static uint64_t seed_of(int src, int dst, size_t size, int phase)
{
    return ((uint64_t)src << 48) ^ ((uint64_t)dst << 40) ^ ((uint64_t)phase << 32) ^ size;
}

static void fill(uint8_t *buf, size_t n, uint64_t seed)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = mp_hash(seed * 0x9e3779b97f4a7c15ull + i / 8);
        memcpy(buf + i, &v, 8);
    }
    if (i < n) {
        uint64_t v = mp_hash(seed * 0x9e3779b97f4a7c15ull + i / 8);
        memcpy(buf + i, &v, n - i);
    }
}

/* Counts wrong bytes and names the first one. */
static void verify(const uint8_t *buf, size_t n, uint64_t seed, const char *what, int src)
{
    size_t bad = 0, first = 0;
    uint8_t want_first = 0, got_first = 0;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = mp_hash(seed * 0x9e3779b97f4a7c15ull + i / 8);
        uint8_t w[8];
        memcpy(w, &v, 8);
        size_t m = n - i < 8 ? n - i : 8;
        if (memcmp(buf + i, w, m) == 0) continue;
        for (size_t k = 0; k < m; k++) {
            if (buf[i + k] == w[k]) continue;
            if (!bad) {
                first = i + k;
                want_first = w[k];
                got_first = buf[i + k];
            }
            bad++;
        }
    }
    if (bad)
        mp_fail("%s: %zu-byte message from rank %d: byte %zu expected 0x%02x got 0x%02x (%zu bad "
                "bytes)",
                what, n, src, first, want_first, got_first, bad);
}

static void wait_all(hcomm_request_t *reqs, int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        hcomm_status_t st = hcomm_wait(reqs[i]);
        if (st != HCOMM_OK) {
            mp_fail("%s: hcomm_wait(request %d) expected OK got %s (%s)", what, i,
                    mp_status_name(st), hcomm_last_error());
            exit(1);
        }
    }
}

/* Completes every request with hcomm_test only, in a polling loop. */
static void test_all(hcomm_request_t *reqs, int n, const char *what)
{
    int left = n;
    char *done = calloc((size_t)n, 1);
    double t0 = mp_now();
    while (left) {
        for (int i = 0; i < n; i++) {
            if (done[i]) continue;
            int d = -1;
            hcomm_status_t st = hcomm_test(reqs[i], &d);
            if (st != HCOMM_OK) {
                mp_fail("%s: hcomm_test(request %d) expected OK got %s (%s)", what, i,
                        mp_status_name(st), hcomm_last_error());
                exit(1);
            }
            if (d != 0 && d != 1) {
                mp_fail("%s: hcomm_test done flag expected 0 or 1 got %d", what, d);
                exit(1);
            }
            if (d) {
                done[i] = 1;
                left--;
            }
        }
        if (mp_now() - t0 > 120) {
            mp_fail("%s: %d requests expected complete within 120 s got still pending", what, left);
            exit(1);
        }
    }
    free(done);
}

static void phase_ring(hcomm_comm_t w)
{
    int next = (mp_rank + 1) % mp_size, prev = (mp_rank + mp_size - 1) % mp_size;
    for (size_t s = 0; s < NSIZES_ALL && sizes_all[s] <= g_max_bytes; s++) {
        size_t n = sizes_all[s];
        uint8_t *sb = mp_xmalloc(n), *rb = mp_xmalloc(n);
        fill(sb, n, seed_of(mp_rank, next, n, 1));
        memset(rb, 0xee, n);
        hcomm_request_t sr;
        MP_OK(hcomm_isend(sb, n, HCOMM_UINT8, next, (int)s, w, &sr));
        MP_OK(hcomm_recv(rb, n, HCOMM_UINT8, prev, (int)s, w));
        MP_OK(hcomm_wait(sr));
        verify(rb, n, seed_of(prev, mp_rank, n, 1), "ring", prev);
        /* The other direction with blocking calls, ordered to avoid a cycle. */
        fill(sb, n, seed_of(mp_rank, prev, n, 2));
        memset(rb, 0xee, n);
        if (mp_rank % 2 == 0) {
            MP_OK(hcomm_send(sb, n, HCOMM_UINT8, prev, 1000 + (int)s, w));
            MP_OK(hcomm_recv(rb, n, HCOMM_UINT8, next, 1000 + (int)s, w));
        } else {
            MP_OK(hcomm_recv(rb, n, HCOMM_UINT8, next, 1000 + (int)s, w));
            MP_OK(hcomm_send(sb, n, HCOMM_UINT8, prev, 1000 + (int)s, w));
        }
        verify(rb, n, seed_of(next, mp_rank, n, 2), "reverse ring", next);
        free(sb);
        free(rb);
    }
}

/* Every rank to every rank (itself included) at once, receives posted first
 * in one round and sends first in the next; half the rounds complete through
 * hcomm_test polling only. */
static void phase_alltoall(hcomm_comm_t w)
{
    size_t cap = g_max_bytes / (size_t)mp_size;
    if (cap > 16 * MIB / (size_t)mp_size) cap = 16 * MIB / (size_t)mp_size;
    hcomm_request_t *reqs = mp_xmalloc(sizeof(*reqs) * 2 * (size_t)mp_size);
    uint8_t **sb = mp_xmalloc(sizeof(*sb) * (size_t)mp_size);
    uint8_t **rb = mp_xmalloc(sizeof(*rb) * (size_t)mp_size);
    for (size_t s = 0; s < NSIZES_ALL; s++) {
        size_t n = sizes_all[s];
        if (n > cap && n > 8 * KIB + 1) break;
        for (int round = 0; round < 2; round++) {
            int nr = 0;
            for (int p = 0; p < mp_size; p++) {
                sb[p] = mp_xmalloc(n);
                rb[p] = mp_xmalloc(n);
                fill(sb[p], n, seed_of(mp_rank, p, n, 10 + round));
                memset(rb[p], 0xee, n);
            }
            int tag = 77 + round;
            if (round == 0)
                for (int p = 0; p < mp_size; p++)
                    MP_OK(hcomm_irecv(rb[p], n, HCOMM_UINT8, p, tag, w, &reqs[nr++]));
            for (int k = 0; k < mp_size; k++) {
                int p = (mp_rank + k) % mp_size; /* stagger to spread the load */
                MP_OK(hcomm_isend(sb[p], n, HCOMM_UINT8, p, tag, w, &reqs[nr++]));
            }
            if (round == 1)
                for (int p = mp_size - 1; p >= 0; p--)
                    MP_OK(hcomm_irecv(rb[p], n, HCOMM_UINT8, p, tag, w, &reqs[nr++]));
            if (s % 2)
                test_all(reqs, nr, "alltoall(test)");
            else
                wait_all(reqs, nr, "alltoall(wait)");
            for (int p = 0; p < mp_size; p++) {
                verify(rb[p], n, seed_of(p, mp_rank, n, 10 + round), "alltoall", p);
                free(sb[p]);
                free(rb[p]);
            }
        }
    }
    free(reqs);
    free(sb);
    free(rb);
}

/* 1000 messages to the next rank on 10 tags, every 97th one large enough for
 * the rendezvous path; the receiver posts its receives tag by tag in reverse
 * tag order. Round 0: receives posted before the sends; round 1: after. The
 * k-th receive of a tag must get the k-th send of that tag. */
#define FIFO_N 1000
#define FIFO_TAGS 10
static size_t fifo_len(int i)
{
    return i % 97 == 13 ? 20 * KIB + (size_t)i : 8;
}

static void phase_fifo(hcomm_comm_t w)
{
    int next = (mp_rank + 1) % mp_size, prev = (mp_rank + mp_size - 1) % mp_size;
    hcomm_request_t *sreq = mp_xmalloc(sizeof(*sreq) * FIFO_N);
    hcomm_request_t *rreq = mp_xmalloc(sizeof(*rreq) * FIFO_N);
    uint8_t **sbuf = mp_xmalloc(sizeof(*sbuf) * FIFO_N);
    uint8_t **rbuf = mp_xmalloc(sizeof(*rbuf) * FIFO_N);
    int *rmsg = mp_xmalloc(sizeof(int) * FIFO_N); /* which send each receive expects */
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < FIFO_N; i++) {
            sbuf[i] = mp_xmalloc(fifo_len(i));
            fill(sbuf[i], fifo_len(i), seed_of(mp_rank, next, (size_t)i, 20 + round));
            rbuf[i] = mp_xmalloc(fifo_len(i));
            memset(rbuf[i], 0xee, fifo_len(i));
        }
        int nr = 0;
        for (int t = FIFO_TAGS - 1; t >= 0; t--)
            for (int i = t; i < FIFO_N; i += FIFO_TAGS)
                rmsg[nr++] = i;
        if (round == 0)
            for (int k = 0; k < FIFO_N; k++)
                MP_OK(hcomm_irecv(rbuf[rmsg[k]], fifo_len(rmsg[k]), HCOMM_UINT8, prev,
                                  rmsg[k] % FIFO_TAGS, w, &rreq[k]));
        MP_OK(hcomm_barrier(w));
        for (int i = 0; i < FIFO_N; i++)
            MP_OK(hcomm_isend(sbuf[i], fifo_len(i), HCOMM_UINT8, next, i % FIFO_TAGS, w, &sreq[i]));
        if (round == 1) {
            mp_sleep_ms(100); /* let the sends arrive unexpected */
            for (int k = 0; k < FIFO_N; k++)
                MP_OK(hcomm_irecv(rbuf[rmsg[k]], fifo_len(rmsg[k]), HCOMM_UINT8, prev,
                                  rmsg[k] % FIFO_TAGS, w, &rreq[k]));
        }
        /* Receives in reverse posting order, sends forward. */
        for (int k = FIFO_N - 1; k >= 0; k--) {
            hcomm_status_t st = hcomm_wait(rreq[k]);
            if (st != HCOMM_OK) {
                mp_fail("fifo round %d: receive of message %d (tag %d, %zu bytes) expected OK "
                        "got %s (%s)",
                        round, rmsg[k], rmsg[k] % FIFO_TAGS, fifo_len(rmsg[k]), mp_status_name(st),
                        hcomm_last_error());
                exit(1);
            }
        }
        wait_all(sreq, FIFO_N, "fifo sends");
        for (int i = 0; i < FIFO_N; i++) {
            char what[64];
            snprintf(what, sizeof(what), "fifo round %d message %d tag %d", round, i,
                     i % FIFO_TAGS);
            verify(rbuf[i], fifo_len(i), seed_of(prev, mp_rank, (size_t)i, 20 + round), what, prev);
            free(sbuf[i]);
            free(rbuf[i]);
        }
    }
    free(sreq);
    free(rreq);
    free(sbuf);
    free(rbuf);
    free(rmsg);
}

static void phase_self(hcomm_comm_t w)
{
    for (size_t s = 0; s < NSIZES_ALL && sizes_all[s] <= g_max_bytes; s++) {
        size_t n = sizes_all[s];
        uint8_t *sb = mp_xmalloc(n), *rb = mp_xmalloc(n);
        fill(sb, n, seed_of(mp_rank, mp_rank, n, 30));
        memset(rb, 0xee, n);
        hcomm_request_t sr, rr;
        if (s % 2) { /* send first: the message waits unexpected */
            MP_OK(hcomm_isend(sb, n, HCOMM_UINT8, mp_rank, 5, w, &sr));
            MP_OK(hcomm_irecv(rb, n, HCOMM_UINT8, mp_rank, 5, w, &rr));
        } else {
            MP_OK(hcomm_irecv(rb, n, HCOMM_UINT8, mp_rank, 5, w, &rr));
            MP_OK(hcomm_isend(sb, n, HCOMM_UINT8, mp_rank, 5, w, &sr));
        }
        MP_OK(hcomm_wait(rr));
        MP_OK(hcomm_wait(sr));
        verify(rb, n, seed_of(mp_rank, mp_rank, n, 30), "self", mp_rank);
        free(sb);
        free(rb);
    }
    /* A small blocking send to self is buffered: the receive comes after. */
    uint64_t v = 0x1234567890abcdefull ^ (uint64_t)mp_rank, r = 0;
    MP_OK(hcomm_send(&v, 1, HCOMM_UINT64, mp_rank, 6, w));
    MP_OK(hcomm_recv(&r, 1, HCOMM_UINT64, mp_rank, 6, w));
    if (r != v)
        mp_fail("self blocking: expected 0x%llx got 0x%llx", (unsigned long long)v,
                (unsigned long long)r);
}

/* Even ranks send every size to the next odd rank, which sleeps before it
 * posts the receives, so every message (and every rendezvous request) arrives
 * unexpected. */
static void phase_unexpected(hcomm_comm_t w)
{
    int partner = mp_rank % 2 ? mp_rank - 1 : mp_rank + 1;
    if (partner >= mp_size) return;
    size_t ns = 0;
    while (ns < NSIZES_ALL && sizes_all[ns] <= g_max_bytes)
        ns++;
    hcomm_request_t *reqs = mp_xmalloc(sizeof(*reqs) * ns);
    uint8_t **bufs = mp_xmalloc(sizeof(*bufs) * ns);
    for (size_t s = 0; s < ns; s++) {
        bufs[s] = mp_xmalloc(sizes_all[s]);
        if (mp_rank % 2 == 0)
            fill(bufs[s], sizes_all[s], seed_of(mp_rank, partner, sizes_all[s], 40));
        else
            memset(bufs[s], 0xee, sizes_all[s]);
    }
    if (mp_rank % 2 == 0) {
        for (size_t s = 0; s < ns; s++)
            MP_OK(hcomm_isend(bufs[s], sizes_all[s], HCOMM_UINT8, partner, 40, w, &reqs[s]));
        wait_all(reqs, (int)ns, "unexpected sends");
    } else {
        mp_sleep_ms(300);
        for (size_t s = 0; s < ns; s++) /* same tag: FIFO decides which is which */
            MP_OK(hcomm_recv(bufs[s], sizes_all[s], HCOMM_UINT8, partner, 40, w));
        for (size_t s = 0; s < ns; s++)
            verify(bufs[s], sizes_all[s], seed_of(partner, mp_rank, sizes_all[s], 40), "unexpected",
                   partner);
    }
    for (size_t s = 0; s < ns; s++)
        free(bufs[s]);
    free(bufs);
    free(reqs);
}

/* A receive buffer one byte short: ERR_TRUNCATED naming both sizes on the
 * receiver; the sender returns (OK or an error) instead of hanging; the pair
 * still works afterwards. Eager and rendezvous sizes, receive posted before
 * and after the message arrived. */
static void phase_truncate(hcomm_comm_t w)
{
    static const size_t tsz[] = {100, 8 * KIB, 64 * KIB, MIB + 3};
    int partner = mp_rank % 2 ? mp_rank - 1 : mp_rank + 1;
    if (partner >= mp_size) return;
    for (size_t s = 0; s < sizeof(tsz) / sizeof(tsz[0]); s++) {
        for (int late = 0; late < 2; late++) {
            size_t n = tsz[s];
            uint8_t *buf = mp_xmalloc(n);
            int tag = 50 + (int)s * 2 + late;
            if (mp_rank % 2 == 0) {
                fill(buf, n, seed_of(mp_rank, partner, n, 50));
                double t0 = mp_now();
                hcomm_status_t st = hcomm_send(buf, n, HCOMM_UINT8, partner, tag, w);
                if (st != HCOMM_OK && st != HCOMM_ERR_TRUNCATED)
                    mp_fail("truncate: sender of %zu bytes expected OK or ERR_TRUNCATED got %s "
                            "(%s)",
                            n, mp_status_name(st), hcomm_last_error());
                if (mp_now() - t0 > 20)
                    mp_fail("truncate: sender of %zu bytes expected to return promptly got "
                            "%.1f s",
                            n, mp_now() - t0);
            } else {
                if (late) mp_sleep_ms(100);
                memset(buf, 0xee, n);
                hcomm_status_t st = hcomm_recv(buf, n - 1, HCOMM_UINT8, partner, tag, w);
                if (MP_EXPECT(HCOMM_ERR_TRUNCATED, st)) {
                    char a[32], b[32];
                    snprintf(a, sizeof(a), "%zu", n);
                    snprintf(b, sizeof(b), "%zu", n - 1);
                    mp_expect_msg("truncate", "hcomm_recv", a, b, (const char *)NULL);
                }
                if (buf[n - 1] != 0xee)
                    mp_fail("truncate: byte past the %zu-byte receive buffer expected untouched "
                            "(0xee) got 0x%02x",
                            n - 1, buf[n - 1]);
            }
            /* The pair must still work: a correct message right after. */
            uint64_t v = mp_hash((uint64_t)tag), r = 0;
            if (mp_rank % 2 == 0) {
                MP_OK(hcomm_send(&v, 1, HCOMM_UINT64, partner, tag, w));
            } else {
                MP_OK(hcomm_recv(&r, 1, HCOMM_UINT64, partner, tag, w));
                if (r != v)
                    mp_fail("truncate: message after a truncated %zu-byte one expected 0x%llx "
                            "got 0x%llx",
                            n, (unsigned long long)v, (unsigned long long)r);
            }
            free(buf);
        }
    }
}

/* A message shorter than the receive buffer: hcomm.h says a receive takes
 * exactly count elements, so whichever status that gives, it must not depend
 * on the protocol the message size happens to select (eager or rendezvous).
 * Also the largest tag. */
static void phase_short(hcomm_comm_t w)
{
    static const size_t ssz[] = {100, 64 * KIB};
    int partner = mp_rank % 2 ? mp_rank - 1 : mp_rank + 1;
    if (partner >= mp_size) return;
    hcomm_status_t got[2];
    for (int s = 0; s < 2; s++) {
        size_t n = ssz[s];
        uint8_t *buf = mp_xmalloc(n + 1);
        if (mp_rank % 2 == 0) {
            fill(buf, n, seed_of(mp_rank, partner, n, 70));
            hcomm_status_t st = hcomm_send(buf, n, HCOMM_UINT8, partner, 70 + s, w);
            if (st != HCOMM_OK && st != HCOMM_ERR_TRUNCATED)
                mp_fail("short: sender of %zu bytes expected OK or ERR_TRUNCATED got %s (%s)", n,
                        mp_status_name(st), hcomm_last_error());
        } else {
            got[s] = hcomm_recv(buf, n + 1, HCOMM_UINT8, partner, 70 + s, w);
            if (got[s] == HCOMM_OK || got[s] == HCOMM_ERR_TRUNCATED)
                verify(buf, n, seed_of(partner, mp_rank, n, 70), "short", partner);
            else
                mp_fail("short: %zu-byte message into %zu bytes expected OK or ERR_TRUNCATED "
                        "got %s (%s)",
                        n, n + 1, mp_status_name(got[s]), hcomm_last_error());
        }
        free(buf);
    }
    if (mp_rank % 2 && got[0] != got[1])
        mp_fail("short message into a larger receive: expected the same status for eager (%zu "
                "bytes) and rendezvous (%zu bytes) sizes got %s and %s",
                ssz[0], ssz[1], mp_status_name(got[0]), mp_status_name(got[1]));
    int32_t v = 0x7ead, r = 0;
    hcomm_request_t sr;
    MP_OK(hcomm_isend(&v, 1, HCOMM_INT32, mp_rank, INT32_MAX, w, &sr));
    MP_OK(hcomm_recv(&r, 1, HCOMM_INT32, mp_rank, INT32_MAX, w));
    MP_OK(hcomm_wait(sr));
    if (r != v) mp_fail("tag INT32_MAX to self: expected 0x%x got 0x%x", v, r);
}

/* The blocking receive's request-free path (core/p2p_recv.c,
 * hc_p2p_recv_now) against what was posted before it and what is queued:
 * the partner's messages arrive while this rank is outside hcomm (it
 * sleeps), so the blocking receive's first driver pass meets them all, in
 * order. Receives posted earlier (one from this rank, one from any source)
 * take their messages first; a message of another tag waits unexpected for
 * a later receive; a message of another length is not taken whole. */
static void phase_recv_now(hcomm_comm_t w)
{
    int partner = mp_rank % 2 ? mp_rank - 1 : mp_rank + 1;
    if (partner >= mp_size) return;
    uint64_t v[6];
    for (int i = 0; i < 6; i++)
        v[i] = mp_hash(((uint64_t)mp_rank << 8 | (uint64_t)i) + 80);
    if (mp_rank % 2 == 0) {
        uint8_t go;
        MP_OK(hcomm_recv(&go, 1, HCOMM_UINT8, partner, 79, w));
        MP_OK(hcomm_send(&v[0], 1, HCOMM_UINT64, partner, 80, w)); /* its irecv */
        MP_OK(hcomm_send(&v[1], 1, HCOMM_UINT64, partner, 82, w)); /* its irecv_any */
        MP_OK(hcomm_send(&v[2], 1, HCOMM_UINT64, partner, 80, w)); /* its 1st blocking recv */
        MP_OK(hcomm_send(&v[3], 1, HCOMM_UINT64, partner, 81, w)); /* unexpected, then recv */
        MP_OK(hcomm_send(&v[4], 1, HCOMM_UINT64, partner, 82, w)); /* a blocking recv */
        MP_OK(hcomm_send(&v[5], 2, HCOMM_UINT32, partner, 83, w)); /* 8 B into 4: truncated */
        MP_OK(hcomm_recv(&go, 1, HCOMM_UINT8, partner, 79, w));
        return;
    }
    uint64_t want[6];
    for (int i = 0; i < 6; i++)
        want[i] = mp_hash(((uint64_t)partner << 8 | (uint64_t)i) + 80);
    uint64_t r[6] = {0};
    int src = -1;
    hcomm_request_t q0, q1;
    uint8_t go = 1;
    MP_OK(hcomm_irecv(&r[0], 1, HCOMM_UINT64, partner, 80, w, &q0));
    MP_OK(hcomm_irecv_any(&r[1], 1, HCOMM_UINT64, 82, w, &src, &q1));
    MP_OK(hcomm_send(&go, 1, HCOMM_UINT8, partner, 79, w));
    mp_sleep_ms(100);
    MP_OK(hcomm_recv(&r[2], 1, HCOMM_UINT64, partner, 80, w));
    MP_OK(hcomm_recv(&r[4], 1, HCOMM_UINT64, partner, 82, w));
    MP_OK(hcomm_recv(&r[3], 1, HCOMM_UINT64, partner, 81, w));
    uint32_t small = 0xeeeeeeee;
    hcomm_status_t st = hcomm_recv(&small, 1, HCOMM_UINT32, partner, 83, w);
    if (MP_EXPECT(HCOMM_ERR_TRUNCATED, st))
        mp_expect_msg("recv_now truncate", "hcomm_recv", "8", "4", (const char *)NULL);
    MP_OK(hcomm_wait(q0));
    MP_OK(hcomm_wait(q1));
    for (int i = 0; i < 5; i++)
        if (r[i] != want[i])
            mp_fail("recv_now: message %d expected 0x%llx got 0x%llx (a blocking receive took "
                    "a message posted receives or later receives were owed)",
                    i, (unsigned long long)want[i], (unsigned long long)r[i]);
    if (src != partner) mp_fail("recv_now: any-source receive expected source %d got %d", partner, src);
    MP_OK(hcomm_send(&go, 1, HCOMM_UINT8, partner, 79, w));
}

static void phase_any(hcomm_comm_t w)
{
    static const size_t asz[] = {0, 8, 8 * KIB + 1, 64 * KIB, MIB + 3};
    const int per = 2; /* messages per source and size: their order is checked */
    for (size_t s = 0; s < sizeof(asz) / sizeof(asz[0]); s++) {
        size_t n = asz[s];
        if (n > g_max_bytes) break;
        for (int late = 0; late < 2; late++) { /* receives after the messages came, or before */
            int tag = 60 + (int)s * 2 + late;
            if (mp_rank != 0) {
                if (!late) MP_OK(hcomm_barrier(w)); /* rank 0 sleeps: the messages wait */
                for (int k = 0; k < per; k++) {
                    uint8_t *b = mp_xmalloc(n + 1);
                    fill(b, n, seed_of(mp_rank, 0, n, tag * 8 + k));
                    MP_OK(hcomm_send(b, n, HCOMM_UINT8, 0, tag, w));
                    free(b);
                }
                if (late) MP_OK(hcomm_barrier(w));
                continue;
            }
            int nmsg = (mp_size - 1) * per;
            uint8_t **bufs = mp_xmalloc(sizeof(*bufs) * (size_t)nmsg);
            int *src = mp_xmalloc(sizeof(int) * (size_t)nmsg);
            hcomm_request_t *reqs = mp_xmalloc(sizeof(*reqs) * (size_t)nmsg);
            int *seen = calloc((size_t)mp_size, sizeof(int));
            for (int i = 0; i < nmsg; i++)
                bufs[i] = mp_xmalloc(n + 1);
            if (!late) {
                MP_OK(hcomm_barrier(w));
                mp_sleep_ms(100);
                /* Already arrived: blocking receives, two kinds. */
                for (int i = 0; i < nmsg; i++) {
                    if (i % 2)
                        MP_OK(hcomm_recv_any(bufs[i], n, HCOMM_UINT8, tag, w, &src[i]));
                    else {
                        hcomm_status_t st = hcomm_recv(bufs[i], n, HCOMM_UINT8, HCOMM_ANY_SOURCE, tag, w);
                        MP_OK(st);
                        src[i] = -2; /* not told: found below from the pattern */
                    }
                }
            } else {
                /* Posted first, non-blocking; the senders go when they like. */
                for (int i = 0; i < nmsg; i++)
                    MP_OK(hcomm_irecv_any(bufs[i], n, HCOMM_UINT8, tag, w, &src[i], &reqs[i]));
                wait_all(reqs, nmsg, "irecv_any");
                MP_OK(hcomm_barrier(w));
            }
            for (int i = 0; i < nmsg; i++) {
                int from = src[i];
                if (from == -2) { /* plain hcomm_recv: which source's pattern is it? */
                    for (int r = 1; r < mp_size && from < 0; r++)
                        for (int k = 0; k < per && from < 0; k++) {
                            uint8_t *t = mp_xmalloc(n + 1);
                            fill(t, n, seed_of(r, 0, n, tag * 8 + k));
                            if (!memcmp(t, bufs[i], n) && seen[r] == k) from = r;
                            free(t);
                        }
                    if (from < 0 && n > 0) {
                        mp_fail("any (%zu B, tag %d): message %d matches no source's next message", n, tag, i);
                        continue;
                    }
                    if (n == 0) continue; /* nothing to tell them apart by */
                }
                if (from < 1 || from >= mp_size) {
                    mp_fail("any (%zu B, tag %d): source expected 1..%d got %d", n, tag, mp_size - 1, from);
                    continue;
                }
                verify(bufs[i], n, seed_of(from, 0, n, tag * 8 + seen[from]), "any", from);
                seen[from]++;
            }
            for (int r = 1; r < mp_size && n > 0; r++)
                if (seen[r] != per)
                    mp_fail("any (%zu B, tag %d): expected %d messages from rank %d got %d", n, tag, per, r, seen[r]);
            for (int i = 0; i < nmsg; i++)
                free(bufs[i]);
            free(bufs);
            free(src);
            free(reqs);
            free(seen);
        }
    }
    /* Bad input: only receives take HCOMM_ANY_SOURCE. */
    uint8_t b = 0;
    mp_expect_status_(HCOMM_ERR_INVALID, hcomm_send(&b, 1, HCOMM_UINT8, HCOMM_ANY_SOURCE, 1, w),
                      "hcomm_send(HCOMM_ANY_SOURCE)", __FILE__, __LINE__);
    mp_expect_status_(HCOMM_ERR_INVALID, hcomm_recv(&b, 1, HCOMM_UINT8, -2, 1, w),
                      "hcomm_recv(peer -2)", __FILE__, __LINE__);
}

/* The last rank dies while the others wait to receive from any source
 * (a message nobody sends). */
static int run_any_kill(void)
{
    hcomm_comm_t w = hcomm_comm_world();
    int victim = mp_size - 1;
    MP_OK(hcomm_barrier(w));
    if (mp_rank == victim) {
        mp_sleep_ms(200);
        raise(SIGKILL);
    }
    {
        uint8_t b[8];
        int from = 77;
        double t0 = mp_now();
        hcomm_status_t st = hcomm_recv_any(b, sizeof(b), HCOMM_UINT8, 5, w, &from);
        mp_expect_peer_failed(st, t0, victim, "hcomm_recv_any");
        if (from != HCOMM_ANY_SOURCE)
            mp_fail("hcomm_recv_any: source expected HCOMM_ANY_SOURCE after the failure got %d", from);
    }
    mp_survivors_sync(victim);
    hcomm_status_t st = hcomm_finalize();
    if (st != HCOMM_OK)
        mp_fail("hcomm_finalize after a peer died expected OK got %s (%s)", mp_status_name(st),
                hcomm_last_error());
    printf("rank %d: mp_p2p --any-kill: %s\n", mp_rank, mp_failures ? "FAILED" : "passed");
    return mp_failures ? 1 : 0;
}

static size_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * KIB;
}

static int run_huge(void)
{
    const size_t n = 1536 * MIB;
    hcomm_comm_t w = hcomm_comm_world();
    /* Rank 0 decides for everybody, so that all ranks skip together. */
    int32_t go = 0;
    if (mp_rank == 0) {
        size_t avail = mem_available();
        go = mp_size >= 2 && avail > 2 * n + 1024 * MIB;
        if (!go)
            printf("skipped: one 1.5 GiB message needs 2 ranks and %zu MiB available, have %d "
                   "ranks and %zu MiB\n",
                   (2 * n + 1024 * MIB) / MIB, mp_size, avail / MIB);
    }
    MP_OK(hcomm_broadcast(&go, 1, HCOMM_INT32, 0, w));
    if (!go) {
        MP_OK(hcomm_finalize());
        return 77;
    }
    if (mp_rank <= 1) {
        uint8_t *buf = mp_xmalloc(n);
        double t0 = mp_now();
        if (mp_rank == 0) {
            fill(buf, n, seed_of(0, 1, n, 60));
            MP_OK(hcomm_send(buf, n, HCOMM_UINT8, 1, 60, w));
        } else {
            memset(buf, 0xee, n);
            MP_OK(hcomm_recv(buf, n, HCOMM_UINT8, 0, 60, w));
            printf("rank 1: 1.5 GiB received in %.2f s\n", mp_now() - t0);
            verify(buf, n, seed_of(0, 1, n, 60), "huge", 0);
        }
        free(buf);
    }
    return mp_finish("mp_p2p --huge");
}

int main(int argc, char **argv)
{
    int huge = 0, only_short = 0, any_kill = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc) {
            g_max_bytes = strtoull(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--huge")) {
            huge = 1;
        } else if (!strcmp(argv[i], "--short")) {
            only_short = 1;
        } else if (!strcmp(argv[i], "--any-kill")) {
            any_kill = 1;
        } else {
            fprintf(stderr, "usage: mp_p2p [--max-bytes N] [--huge | --short | --any-kill]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    mp_init();
    if (huge) return run_huge();
    if (any_kill) return run_any_kill();
    hcomm_comm_t w = hcomm_comm_world();
    struct {
        const char *name;
        void (*fn)(hcomm_comm_t);
        int is_short;
    } phases[] = {
        {"ring", phase_ring},     {"self", phase_self},         {"unexpected", phase_unexpected},
        {"fifo", phase_fifo},     {"alltoall", phase_alltoall}, {"truncate", phase_truncate},
        {"any", phase_any},       {"recv_now", phase_recv_now},
        {"short", phase_short, 1}};
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
        if (phases[i].is_short != only_short) continue;
        double t0 = mp_now();
        phases[i].fn(w);
        MP_OK(hcomm_barrier(w));
        if (mp_rank == 0)
            printf("rank 0: phase %s done in %.2f s\n", phases[i].name, mp_now() - t0);
    }
    return mp_finish(only_short ? "mp_p2p --short" : "mp_p2p");
}
