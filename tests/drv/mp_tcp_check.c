/*
 * mp_tcp_check: correctness of point-to-point (and, with --coll, the
 * collectives) between ranks, meant to run over the tcp driver (several
 * network namespaces, or HCOMM_SHM=0 on one host). Every byte received is
 * compared with a pattern derived from (source, destination, size, index),
 * so a frame that lands at the wrong offset, in the wrong receive or twice
 * is caught.
 *
 *   mp_tcp_check [--max BYTES] [--duration S] [--coll] [--until-fail S]
 *                [--compute S] [--send-compute S [--idle-first S [--check-closed]]]
 *                [--inject-wait S]
 *
 * --max         largest p2p message (default 64M)
 * --duration S  repeat the p2p rounds until S seconds have passed (used
 *               while a rank is stopped, or under packet loss)
 * --until-fail S exchange with every peer until an operation reports
 *               HCOMM_ERR_PEER_FAILED (exit 0, printing the message) or S
 *               seconds pass (exit 1): the harness kills one rank meanwhile
 * --compute S   first, a worker that computes: rank 0 sends rank 1 a small
 *               message and waits for the answer, rank 1 receives it, computes
 *               (sleeps) S seconds without calling hcomm, then answers; both
 *               must succeed (a driver whose peer acknowledges only while it
 *               polls must not declare a computing rank failed)
 * --send-compute S  a sender that computes: rank 0 sends rank 1 a small
 *               message on a connection nobody has opened yet (the send
 *               opens it), computes (sleeps) S seconds without calling
 *               hcomm, then waits for rank 1's answer. The handshake must not
 *               need the computing sender: rank 1 must not drop the
 *               connection, rank 0 must not fail rank 1 when it comes back
 * --idle-first S  with --send-compute: a second round after both ranks
 *               drove progress S seconds with no traffic, so that the
 *               connection was idle-closed (HCOMM_CONN_IDLE_TIMEOUT below
 *               S): the send reopens it, the sender computes again
 * --check-closed  with --idle-first: the process's sockets (/proc/self/fd)
 *               must have dropped during the idle phase (tcp closed them)
 * --inject-wait S  the victim of a stranger (tests/netns/tcp_inject.py):
 *               rank 0 sends rank 1 a message (tag 7), then both wait S
 *               seconds with a receive of tag 99 from the other posted,
 *               driving progress; nobody sends tag 99 meanwhile, so a
 *               receive that completes got a frame a stranger injected
 *               (reported: "INJECTED"). Then each sends the other its
 *               real tag-99 message.
 * --coll-until-fail S  a training loop: allreduces on the world until one
 *               fails, then print its message and leave at once, as a user
 *               would (survivors then see each other go: each must still
 *               name the rank that really died)
 *
 * Exit 0 on success, 1 on a wrong result or error; prints one line per
 * failure naming the check.
 */
#include "common/mp_test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

static int rank, size;
static hcomm_comm_t world;
static int failures;

#define CHECK_ST(st, what)                                                                         \
    do {                                                                                           \
        hcomm_status_t st_ = (st);                                                                 \
        if (st_ != HCOMM_OK) {                                                                     \
            fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, (what), hcomm_strerror(st_),    \
                    hcomm_last_error());                                                           \
            failures++;                                                                            \
            return st_;                                                                            \
        }                                                                                          \
    } while (0)

static uint64_t seed_of(int src, int dst, size_t len, uint64_t idx)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    h ^= (uint64_t)src * 0xff51afd7ed558ccdull + (uint64_t)dst * 0xc4ceb9fe1a85ec53ull;
    h ^= (uint64_t)len * 0x2545f4914f6cdd1dull + idx;
    h ^= h >> 31;
    return h * 0x94d049bb133111ebull;
}

static void fill(uint8_t *buf, size_t len, uint64_t seed)
{
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = seed ^ (i * 0x9e3779b97f4a7c15ull);
        memcpy(buf + i, &v, 8);
    }
    for (; i < len; i++)
        buf[i] = (uint8_t)(seed >> (i % 8 * 8)) ^ (uint8_t)i;
}

/* Index of the first wrong byte, or len. */
static size_t verify(const uint8_t *buf, size_t len, uint64_t seed)
{
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = seed ^ (i * 0x9e3779b97f4a7c15ull), got;
        memcpy(&got, buf + i, 8);
        if (got != v)
            for (size_t k = 0; k < 8; k++)
                if (buf[i + k] != ((uint8_t *)&v)[k]) return i + k;
    }
    for (; i < len; i++)
        if (buf[i] != ((uint8_t)(seed >> (i % 8 * 8)) ^ (uint8_t)i)) return i;
    return len;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", rank, n);
        exit(1);
    }
    return p;
}

/* Shift exchange: every rank sends to rank+k and receives from rank-k. */
static hcomm_status_t p2p_sizes(size_t max, uint64_t round)
{
    static const size_t sizes[] = {0,        1,       8,      1000,       8192,    65535,
                                   65536,    65537,   262144, 524288 + 7, 1 << 20, (1 << 22) + 3,
                                   16 << 20, 64 << 20};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        size_t len = sizes[si];
        if (len > max) break;
        uint8_t *sb = xmalloc(len), *rb = xmalloc(len);
        for (int k = 1; k < size; k++) {
            int dst = (rank + k) % size, src = (rank - k + size) % size;
            fill(sb, len, seed_of(rank, dst, len, round));
            memset(rb, 0xee, len);
            hcomm_request_t rr, sr;
            CHECK_ST(hcomm_irecv(rb, len, HCOMM_UINT8, src, 7, world, &rr), "irecv");
            CHECK_ST(hcomm_isend(sb, len, HCOMM_UINT8, dst, 7, world, &sr), "isend");
            CHECK_ST(hcomm_wait(sr), "wait(send)");
            CHECK_ST(hcomm_wait(rr), "wait(recv)");
            size_t bad = verify(rb, len, seed_of(src, rank, len, round));
            if (bad != len) {
                fprintf(stderr, "rank %d: p2p %zu bytes from rank %d: byte %zu wrong\n", rank, len,
                        src, bad);
                failures++;
            }
        }
        free(sb);
        free(rb);
    }
    return HCOMM_OK;
}

/* Many messages in flight at once, same tag (order must hold) and distinct
 * tags, mixing eager and rendezvous sizes; half the receives are posted
 * after the sends (unexpected path). */
#define NMSG 96
static hcomm_status_t p2p_outstanding(size_t max, uint64_t round)
{
    static const size_t lens[] = {0, 17, 4096, 65536, 70001, 300000};
    int dst = (rank + 1) % size, src = (rank - 1 + size) % size;
    uint8_t *sb[NMSG], *rb[NMSG];
    size_t ln[NMSG];
    hcomm_request_t sr[NMSG], rr[NMSG];
    for (int i = 0; i < NMSG; i++) {
        ln[i] = lens[(i * 7 + (int)round) % 6];
        if (ln[i] > max) ln[i] = max;
        sb[i] = xmalloc(ln[i]);
        rb[i] = xmalloc(ln[i]);
        fill(sb[i], ln[i], seed_of(rank, dst, ln[i], round * 1000 + (uint64_t)i));
        memset(rb[i], 0xee, ln[i]);
    }
    /* Even i: same tag 100 (FIFO matching); odd i: tag 200 + i. */
    for (int i = 0; i < NMSG / 2; i++)
        CHECK_ST(hcomm_irecv(rb[i], ln[i], HCOMM_UINT8, src, i % 2 ? 200 + i : 100, world, &rr[i]),
                 "irecv(outstanding)");
    for (int i = 0; i < NMSG; i++)
        CHECK_ST(hcomm_isend(sb[i], ln[i], HCOMM_UINT8, dst, i % 2 ? 200 + i : 100, world, &sr[i]),
                 "isend(outstanding)");
    /* Late receives: tag 100 in order (FIFO), distinct tags in reverse. */
    for (int i = NMSG / 2; i < NMSG; i += 2)
        CHECK_ST(hcomm_irecv(rb[i], ln[i], HCOMM_UINT8, src, 100, world, &rr[i]),
                 "irecv(outstanding, late)");
    for (int i = NMSG - 1; i >= NMSG / 2; i -= 2)
        CHECK_ST(hcomm_irecv(rb[i], ln[i], HCOMM_UINT8, src, 200 + i, world, &rr[i]),
                 "irecv(outstanding, late)");
    for (int i = 0; i < NMSG; i++) {
        CHECK_ST(hcomm_wait(sr[i]), "wait(outstanding send)");
        CHECK_ST(hcomm_wait(rr[i]), "wait(outstanding recv)");
    }
    for (int i = 0; i < NMSG; i++) {
        size_t bad = verify(rb[i], ln[i], seed_of(src, rank, ln[i], round * 1000 + (uint64_t)i));
        if (bad != ln[i]) {
            fprintf(stderr,
                    "rank %d: outstanding message %d (%zu bytes) from rank %d: byte %zu "
                    "wrong\n",
                    rank, i, ln[i], src, bad);
            failures++;
        }
        free(sb[i]);
        free(rb[i]);
    }
    return HCOMM_OK;
}

/* ---- collectives, exact references (integers) ------------------------------ */

static int32_t elem(int r, size_t i)
{
    return (int32_t)((uint32_t)r * 2654435761u + (uint32_t)i * 40503u) % 100003;
}

static void expect_i32(const char *what, const int32_t *got, const int32_t *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "rank %d: %s: element %zu is %d, expected %d\n", rank, what, i, got[i],
                    want[i]);
            failures++;
            return;
        }
}

static hcomm_status_t coll_checks(size_t count)
{
    int32_t *a = xmalloc(count * sizeof(int32_t) * (size_t)size);
    int32_t *b = xmalloc(count * sizeof(int32_t) * (size_t)size);
    int32_t *w = xmalloc(count * sizeof(int32_t) * (size_t)size);
    char what[64];

    for (size_t i = 0; i < count; i++)
        a[i] = elem(rank, i);
    CHECK_ST(hcomm_allreduce(a, b, count, HCOMM_INT32, HCOMM_SUM, world), "allreduce");
    for (size_t i = 0; i < count; i++) {
        int64_t s = 0;
        for (int r = 0; r < size; r++)
            s += elem(r, i);
        w[i] = (int32_t)s;
    }
    snprintf(what, sizeof(what), "allreduce(%zu)", count);
    expect_i32(what, b, w, count);

    int root = (int)(count % (size_t)size);
    for (size_t i = 0; i < count; i++)
        b[i] = rank == root ? elem(root, i) : -1;
    CHECK_ST(hcomm_broadcast(b, count, HCOMM_INT32, root, world), "broadcast");
    for (size_t i = 0; i < count; i++)
        w[i] = elem(root, i);
    snprintf(what, sizeof(what), "broadcast(%zu, root %d)", count, root);
    expect_i32(what, b, w, count);

    CHECK_ST(hcomm_allgather(a, b, count, HCOMM_INT32, world), "allgather");
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < count; i++)
            w[(size_t)r * count + i] = elem(r, i);
    snprintf(what, sizeof(what), "allgather(%zu)", count);
    expect_i32(what, b, w, count * (size_t)size);

    /* reduce_scatter: input is size blocks of count. */
    for (size_t i = 0; i < count * (size_t)size; i++)
        a[i] = elem(rank, i);
    CHECK_ST(hcomm_reduce_scatter(a, b, count, HCOMM_INT32, HCOMM_SUM, world), "reduce_scatter");
    for (size_t i = 0; i < count; i++) {
        int64_t s = 0;
        for (int r = 0; r < size; r++)
            s += elem(r, (size_t)rank * count + i);
        w[i] = (int32_t)s;
    }
    snprintf(what, sizeof(what), "reduce_scatter(%zu)", count);
    expect_i32(what, b, w, count);

    /* alltoall: block j of rank r goes to rank j. */
    CHECK_ST(hcomm_alltoall(a, b, count, HCOMM_INT32, world), "alltoall");
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < count; i++)
            w[(size_t)r * count + i] = elem(r, (size_t)rank * count + i);
    snprintf(what, sizeof(what), "alltoall(%zu)", count);
    expect_i32(what, b, w, count * (size_t)size);

    CHECK_ST(hcomm_barrier(world), "barrier");
    free(a);
    free(b);
    free(w);
    return HCOMM_OK;
}

/* Exchanges with every live peer at once, round after round. The first
 * operation that reports HCOMM_ERR_PEER_FAILED is printed with its time and
 * the failed rank's message; the failed rank is then left out and the rank
 * keeps exchanging with the others for 3 more seconds, so that no survivor
 * stalls another by leaving early. */
static int until_fail(double limit)
{
    double t0 = mp_now(), t_first = 0;
    uint8_t *sb = xmalloc(4096), *rb = xmalloc(4096 * (size_t)size);
    hcomm_request_t *reqs = xmalloc(sizeof(*reqs) * 2 * (size_t)size);
    int *peer_of = xmalloc(sizeof(int) * 2 * (size_t)size);
    char *dead = calloc((size_t)size, 1);
    char first[600] = "";
    memset(sb, rank, 4096);
    printf("rank %d: exchanging\n", rank);
    fflush(stdout);
    while (mp_now() - t0 < limit && !(t_first > 0 && mp_now() - t_first > 3)) {
        int n = 0;
        for (int p = 0; p < size; p++) {
            if (p == rank || dead[p]) continue;
            hcomm_status_t st =
                hcomm_irecv(rb + 4096 * (size_t)p, 4096, HCOMM_UINT8, p, 9, world, &reqs[n]);
            if (st == HCOMM_OK) {
                peer_of[n++] = p;
                st = hcomm_isend(sb, 4096, HCOMM_UINT8, p, 9, world, &reqs[n]);
                if (st == HCOMM_OK) peer_of[n++] = p;
            }
            if (st != HCOMM_OK && st != HCOMM_ERR_PEER_FAILED) {
                fprintf(stderr, "rank %d: unexpected status %s: %s\n", rank, hcomm_strerror(st),
                        hcomm_last_error());
                return 1;
            }
            if (st == HCOMM_ERR_PEER_FAILED) dead[p] = 2; /* reported below */
        }
        for (int left = n; left > 0 && mp_now() - t0 < limit;) {
            for (int i = 0; i < n; i++) {
                int done = 0;
                if (!reqs[i]) continue;
                hcomm_status_t st = hcomm_test(reqs[i], &done);
                if (!done && st == HCOMM_OK) continue;
                reqs[i] = NULL;
                left--;
                if (st == HCOMM_ERR_PEER_FAILED && !dead[peer_of[i]])
                    dead[peer_of[i]] = 2;
                else if (st != HCOMM_OK && st != HCOMM_ERR_PEER_FAILED) {
                    fprintf(stderr, "rank %d: unexpected status %s: %s\n", rank, hcomm_strerror(st),
                            hcomm_last_error());
                    return 1;
                }
            }
        }
        for (int p = 0; p < size; p++) {
            if (dead[p] != 2) continue;
            dead[p] = 1;
            if (first[0]) continue;
            /* A new operation towards the failed rank says who it was and why. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            hcomm_request_t r;
            hcomm_status_t st = hcomm_isend(sb, 0, HCOMM_UINT8, p, 10, world, &r);
            snprintf(first, sizeof(first), "peer failure reported at T=%.3f: %s",
                     (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9,
                     st == HCOMM_ERR_PEER_FAILED ? hcomm_last_error() : "(no message)");
            printf("rank %d: %s\n", rank, first);
            fflush(stdout);
            t_first = mp_now();
        }
    }
    if (first[0]) return 0;
    fprintf(stderr, "rank %d: no peer failure reported within %.0f s\n", rank, limit);
    return 1;
}

static int coll_until_fail(double limit)
{
    float grad[64];
    double t0 = mp_now();
    printf("rank %d: exchanging\n", rank);
    fflush(stdout);
    while (mp_now() - t0 < limit) {
        for (int i = 0; i < 64; i++) grad[i] = (float)(rank + i);
        hcomm_status_t st = hcomm_allreduce(grad, grad, 64, HCOMM_FLOAT32, HCOMM_SUM, world);
        if (st == HCOMM_OK) continue;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        printf("rank %d: peer failure reported at T=%.3f: %s: %s\n", rank,
               (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9, hcomm_strerror(st),
               hcomm_last_error());
        fflush(stdout);
        return st == HCOMM_ERR_PEER_FAILED ? 0 : 1;
    }
    fprintf(stderr, "rank %d: no collective failed within %.0f s\n", rank, limit);
    return 1;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1024;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024;
    return (size_t)v;
}

static int count_sockets(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[300], target[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, target, sizeof(target) - 1);
        if (k > 0) {
            target[k] = 0;
            n += !strncmp(target, "socket:", 7);
        }
    }
    closedir(d);
    return n;
}

/* Drives progress for secs with a receive pending (completed by the peer
 * afterwards, tag 9) and no other traffic: the connection goes idle. With
 * check_closed its sockets must go. */
static hcomm_status_t idle_progress(double secs, bool check_closed, hcomm_request_t *req,
                                    int32_t *in)
{
    int peer = 1 - rank, done = 0, busy = count_sockets(), fewest = busy;
    hcomm_status_t st = hcomm_irecv(in, 1, HCOMM_INT32, peer, 9, world, req);
    double end = mp_now() + secs;
    while (st == HCOMM_OK && !done && mp_now() < end) {
        st = hcomm_test(*req, &done);
        int n = count_sockets();
        fewest = n < fewest ? n : fewest;
        usleep(2000);
    }
    if (st == HCOMM_OK && done) {
        fprintf(stderr, "rank %d: idle phase: the peer's wake message came early\n", rank);
        return HCOMM_ERR_INTERNAL;
    }
    if (st == HCOMM_OK && check_closed && !(fewest < busy)) {
        fprintf(stderr,
                "rank %d: idle phase: %d sockets before, never fewer in %.1f s: the "
                "connection was not idle-closed\n",
                rank, busy, secs);
        return HCOMM_ERR_INTERNAL;
    }
    if (check_closed)
        printf("rank %d: idle phase: sockets %d -> %d (idle-closed)\n", rank, busy, fewest);
    return st;
}

/* --send-compute: rank 0 sends (opening the connection) and computes before
 * it waits for the answer; with idle, once more after an idle close. */
static void send_compute_gap(double secs, double idle, bool check_closed)
{
    hcomm_status_t st = HCOMM_OK;
    hcomm_request_t wake = NULL;
    int32_t in = 0, out = 77;
    for (int round = 0; round < (idle > 0 ? 2 : 1) && st == HCOMM_OK; round++) {
        if (round == 1) {
            /* Together (rank 0 computed while rank 1 went on), then quiet. */
            st = hcomm_barrier(world);
            if (st == HCOMM_OK && rank <= 1) st = idle_progress(idle, check_closed, &wake, &in);
        }
        if (rank > 1) continue;
        int64_t v = 100 * round + 41;
        double t0 = mp_now();
        if (st == HCOMM_OK && rank == 0) {
            st = hcomm_send(&v, 1, HCOMM_INT64, 1, 7, world);
            struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
            while (st == HCOMM_OK && nanosleep(&ts, &ts) != 0) /* computing: no hcomm call */
                ;
            if (st == HCOMM_OK) st = hcomm_recv(&v, 1, HCOMM_INT64, 1, 7, world);
            if (st == HCOMM_OK && v != 100 * round + 42) {
                fprintf(stderr, "rank 0: send-compute: the answer is %lld, want %d\n", (long long)v,
                        100 * round + 42);
                failures++;
            }
        } else if (st == HCOMM_OK) {
            st = hcomm_recv(&v, 1, HCOMM_INT64, 0, 7, world);
            v++;
            if (st == HCOMM_OK) st = hcomm_send(&v, 1, HCOMM_INT64, 0, 7, world);
        }
        if (st == HCOMM_OK)
            printf("rank %d: %s a %.0f s computation after a send: ok (%.1f s)\n", rank,
                   round ? "after an idle close," : "on a new connection,", secs, mp_now() - t0);
    }
    if (st == HCOMM_OK && wake && rank <= 1) {
        st = hcomm_send(&out, 1, HCOMM_INT32, 1 - rank, 9, world);
        if (st == HCOMM_OK) st = hcomm_wait(wake);
    }
    if (st != HCOMM_OK) {
        fprintf(stderr, "rank %d: send-compute gap of %.0f s: %s (%s)\n", rank, secs,
                hcomm_strerror(st), hcomm_last_error());
        failures++;
    }
}

/* --inject-wait: a receive only a stranger can complete early. */
static void inject_wait(double secs)
{
    if (rank > 1) return;
    int64_t v = 0x1111111111111111ll, got = 0, real = 77;
    int peer = 1 - rank, done = 0;
    hcomm_request_t req = NULL;
    hcomm_status_t st = rank == 0 ? hcomm_send(&v, 1, HCOMM_INT64, 1, 7, world)
                                  : hcomm_recv(&v, 1, HCOMM_INT64, 0, 7, world);
    if (st == HCOMM_OK) st = hcomm_irecv(&got, 1, HCOMM_INT64, peer, 99, world, &req);
    double end = mp_now() + secs;
    while (st == HCOMM_OK && !done && mp_now() < end) {
        st = hcomm_test(req, &done);
        usleep(2000);
    }
    if (done && st == HCOMM_OK) {
        fprintf(stderr,
                "rank %d: INJECTED: a message was delivered as from rank %d (tag 99, value "
                "%016llx, status OK) though that rank sent none\n",
                rank, peer, (unsigned long long)got);
        failures++;
    } else if (st == HCOMM_OK) {
        printf("rank %d: nothing delivered from a stranger in %.0f s\n", rank, secs);
    }
    if (st == HCOMM_OK) st = hcomm_send(&real, 1, HCOMM_INT64, peer, 99, world);
    if (st == HCOMM_OK && !done) st = hcomm_wait(req);
    if (st == HCOMM_OK && !done && got != 77) {
        fprintf(stderr, "rank %d: the real tag-99 message holds %lld, want 77\n", rank,
                (long long)got);
        failures++;
    }
    if (st != HCOMM_OK) {
        fprintf(stderr, "rank %d: inject-wait: %s (%s)\n", rank, hcomm_strerror(st),
                hcomm_last_error());
        failures++;
    }
}

/* --compute: rank 1 computes between a receive and its answer. */
static void compute_gap(double secs)
{
    int64_t v = 41;
    hcomm_status_t st = HCOMM_OK;
    if (rank == 0) {
        st = hcomm_send(&v, 1, HCOMM_INT64, 1, 7, world);
        if (st == HCOMM_OK) st = hcomm_recv(&v, 1, HCOMM_INT64, 1, 7, world);
        if (st == HCOMM_OK && v != 42) {
            fprintf(stderr, "rank 0: compute gap: the answer is %lld, want 42\n", (long long)v);
            failures++;
        }
    } else if (rank == 1) {
        st = hcomm_recv(&v, 1, HCOMM_INT64, 0, 7, world);
        struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
        while (nanosleep(&ts, &ts) != 0) /* the computation: no hcomm call */
            ;
        v++;
        if (st == HCOMM_OK) st = hcomm_send(&v, 1, HCOMM_INT64, 0, 7, world);
    }
    if (st != HCOMM_OK) {
        fprintf(stderr, "rank %d: compute gap of %.0f s: %s (%s)\n", rank, secs, hcomm_strerror(st),
                hcomm_last_error());
        failures++;
    } else if (rank <= 1) {
        printf("rank %d: a %.0f s computation between a receive and its answer: ok\n", rank, secs);
    }
}

int main(int argc, char **argv)
{
    size_t max = 64 << 20;
    double duration = 0, fail_limit = 0, coll_fail_limit = 0, compute = 0, send_compute = 0;
    double idle_first = 0, inject = 0;
    bool check_closed = false;
    int coll = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max = parse_size(argv[++i]);
        else if (!strcmp(argv[i], "--duration") && i + 1 < argc)
            duration = atof(argv[++i]);
        else if (!strcmp(argv[i], "--until-fail") && i + 1 < argc)
            fail_limit = atof(argv[++i]);
        else if (!strcmp(argv[i], "--coll-until-fail") && i + 1 < argc)
            coll_fail_limit = atof(argv[++i]);
        else if (!strcmp(argv[i], "--compute") && i + 1 < argc)
            compute = atof(argv[++i]);
        else if (!strcmp(argv[i], "--send-compute") && i + 1 < argc)
            send_compute = atof(argv[++i]);
        else if (!strcmp(argv[i], "--idle-first") && i + 1 < argc)
            idle_first = atof(argv[++i]);
        else if (!strcmp(argv[i], "--inject-wait") && i + 1 < argc)
            inject = atof(argv[++i]);
        else if (!strcmp(argv[i], "--check-closed"))
            check_closed = true;
        else if (!strcmp(argv[i], "--coll"))
            coll = 1;
        else {
            fprintf(stderr,
                    "usage: %s [--max BYTES] [--duration S] [--compute S] [--send-compute S "
                    "[--idle-first S [--check-closed]]] [--inject-wait S] [--coll] [--until-fail "
                    "S] [--coll-until-fail S]\n",
                    argv[0]);
            return 2;
        }
    }
    mp_init();
    world = hcomm_comm_world();
    rank = mp_rank;
    size = mp_size;
    if (fail_limit > 0 || coll_fail_limit > 0) {
        int rc = fail_limit > 0 ? until_fail(fail_limit) : coll_until_fail(coll_fail_limit);
        _exit(rc); /* the job is broken: no finalize barrier */
    }
    if (inject > 0 && size >= 2) inject_wait(inject);
    if (send_compute > 0 && size >= 2) send_compute_gap(send_compute, idle_first, check_closed);
    if (compute > 0 && size >= 2) compute_gap(compute);
    double t0 = mp_now();
    uint64_t round = 0;
    int more = 0;
    do {
        if (p2p_sizes(max, round) != HCOMM_OK || p2p_outstanding(max, round) != HCOMM_OK) break;
        round++;
        /* Every rank must run the same number of rounds: each one's clock
         * alone would let one rank stop while its peers wait for another. */
        int mine = mp_now() - t0 < duration;
        more = 0;
        if (duration > 0) {
            hcomm_status_t st = hcomm_allreduce(&mine, &more, 1, HCOMM_INT32, HCOMM_MIN, world);
            if (st != HCOMM_OK) {
                fprintf(stderr, "rank %d: round agreement failed: %s (%s)\n", rank,
                        hcomm_strerror(st), hcomm_last_error());
                failures++;
            }
        }
    } while (more && failures == 0);
    if (coll && failures == 0) {
        static const size_t counts[] = {1, 3, 1000, 65536 + 5, 1 << 20};
        for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]) && failures == 0; i++)
            if (counts[i] * sizeof(int32_t) <= max) coll_checks(counts[i]);
    }
    if (failures == 0)
        printf("rank %d: mp_tcp_check passed (%llu rounds, %.1f s)\n", rank,
               (unsigned long long)round, mp_now() - t0);
    hcomm_finalize();
    return failures ? 1 : 0;
}
