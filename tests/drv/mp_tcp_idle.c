/*
 * mp_tcp_idle: the tcp driver closes idle connections and reopens them
 * transparently. Meant for hcommrun with HCOMM_SHM=0 HCOMM_NET=tcp
 * HCOMM_CONN_IDLE_TIMEOUT=1 (tcp_idle_test.sh also checks the log).
 *
 *   mp_tcp_idle [--cycles N] [--idle S] [--big BYTES]
 *
 * Each cycle every pair of ranks exchanges messages of several sizes (eager,
 * rendezvous, multi-socket), checked byte for byte, then idles --idle seconds
 * while driving progress. The sockets of the process (/proc/self/fd) must
 * then be back to the count right after init: the tcp sockets are gone. The
 * next cycle's exchange has to reopen them.
 *
 * Then rank 0 sends --big bytes to rank 1, which receives for a few
 * tens of milliseconds and stops calling hcomm for --idle seconds mid-message: rank
 * 0's idle timer fires while its frames are queued and must not close (its
 * stderr markers "midsend begin/end" let the wrapper check that no idle
 * close is logged in between); the message must arrive intact.
 *
 * Exit 0 on success, 1 on a wrong result or error, one line per failure.
 */
#include "common/mp_test.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank, size, failures;
static hcomm_comm_t world;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "rank %d: FAIL ", rank);                                                   \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        failures++;                                                                                \
    } while (0)

#define CHECK_ST(st, what)                                                                         \
    do {                                                                                           \
        hcomm_status_t st_ = (st);                                                                 \
        if (st_ != HCOMM_OK) {                                                                     \
            FAIL("%s: %s (%s)", (what), hcomm_strerror(st_), hcomm_last_error());                  \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

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

static uint8_t pattern(int src, int dst, int cycle, size_t len, size_t i)
{
    uint64_t h = (uint64_t)src * 131 + (uint64_t)dst * 7919 + (uint64_t)cycle * 104729 + len;
    h = (h + i) * 0x9e3779b97f4a7c15ull;
    return (uint8_t)(h >> 56);
}

static void fill(uint8_t *b, int src, int dst, int cycle, size_t len)
{
    for (size_t i = 0; i < len; i++)
        b[i] = pattern(src, dst, cycle, len, i);
}

static int verify(const uint8_t *b, int src, int dst, int cycle, size_t len, const char *what)
{
    for (size_t i = 0; i < len; i++)
        if (b[i] != pattern(src, dst, cycle, len, i)) {
            FAIL("%s: %zu-byte message from rank %d, cycle %d: wrong byte at %zu", what, len, src,
                 cycle, i);
            return -1;
        }
    return 0;
}

/* Every rank sends each size to every other rank and checks what it gets. */
static int exchange(int cycle)
{
    static const size_t sizes[] = {8, 4096, 200000, 4u << 20};
    enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
    int np = size - 1, nreq = 0, rc = 0;
    uint8_t **sb = calloc((size_t)np * NS, sizeof(*sb)),
            **rb = calloc((size_t)np * NS, sizeof(*rb));
    hcomm_request_t *req = calloc((size_t)np * NS * 2, sizeof(*req));
    if (!sb || !rb || !req) {
        FAIL("out of memory");
        rc = -1;
        goto out;
    }
    for (int k = 0, p = 0; p < size; p++) {
        if (p == rank) continue;
        for (int s = 0; s < NS; s++, k++) {
            rb[k] = malloc(sizes[s]);
            sb[k] = malloc(sizes[s]);
            if (!rb[k] || !sb[k]) {
                FAIL("out of memory");
                rc = -1;
                goto out;
            }
            fill(sb[k], rank, p, cycle, sizes[s]);
            hcomm_status_t st =
                hcomm_irecv(rb[k], sizes[s], HCOMM_UINT8, p, 100 + s, world, &req[nreq]);
            if (st == HCOMM_OK) nreq++;
            if (st == HCOMM_OK)
                st = hcomm_isend(sb[k], sizes[s], HCOMM_UINT8, p, 100 + s, world, &req[nreq]);
            if (st == HCOMM_OK) nreq++;
            if (st != HCOMM_OK) {
                FAIL("post to rank %d: %s (%s)", p, hcomm_strerror(st), hcomm_last_error());
                rc = -1;
                goto out;
            }
        }
    }
out:
    for (int i = 0; i < nreq; i++) {
        hcomm_status_t st = hcomm_wait(req[i]);
        if (st != HCOMM_OK) {
            FAIL("cycle %d wait: %s (%s)", cycle, hcomm_strerror(st), hcomm_last_error());
            rc = -1;
        }
    }
    for (int k = 0, p = 0; p < size && rc == 0; p++) {
        if (p == rank) continue;
        for (int s = 0; s < NS; s++, k++)
            if (verify(rb[k], p, rank, cycle, sizes[s], "exchange")) rc = -1;
    }
    for (int k = 0; sb && rb && k < np * NS; k++) {
        free(sb[k]);
        free(rb[k]);
    }
    free(sb);
    free(rb);
    free(req);
    return rc;
}

/* Idles for secs while driving progress (a receive nobody has sent yet),
 * then completes it with a small message from each peer: that message
 * travels on reopened connections. */
static int idle_phase(int cycle, double secs, int base_socks)
{
    int np = size - 1, rc = 0;
    int32_t *in = calloc((size_t)size, sizeof(*in)), out = 1000 * cycle + rank;
    hcomm_request_t *req = calloc((size_t)np, sizeof(*req));
    if (!in || !req) {
        FAIL("out of memory");
        free(in);
        free(req);
        return -1;
    }
    int busy = count_sockets();
    for (int k = 0, p = 0; p < size; p++)
        if (p != rank)
            CHECK_ST(hcomm_irecv(&in[p], 1, HCOMM_INT32, p, 7, world, &req[k++]), "wake irecv");
    /* Peers leave their own idle phase a little earlier or later, and their
     * wake message reopens a connection: what counts is that the sockets
     * were all gone at some point. */
    double end = mp_now() + secs;
    int idle = busy, done = 0;
    while (mp_now() < end) {
        if (!done) CHECK_ST(hcomm_test(req[0], &done), "hcomm_test while idle");
        if (done) req[0] = NULL;
        int n = count_sockets();
        idle = n < idle ? n : idle;
        usleep(2000);
    }
    if (!(idle <= base_socks && idle < busy)) {
        FAIL("cycle %d: never fewer than %d sockets in %.1f s idle (%d right after init, %d while "
             "busy): idle connections were not closed",
             cycle, idle, secs, base_socks, busy);
        rc = -1;
    } else {
        fprintf(stderr, "rank %d: cycle %d: sockets %d busy -> %d idle (after init %d)\n", rank,
                cycle, busy, idle, base_socks);
    }
    for (int p = 0; p < size; p++)
        if (p != rank) CHECK_ST(hcomm_send(&out, 1, HCOMM_INT32, p, 7, world), "wake send");
    for (int k = 0, p = 0; p < size; p++) {
        if (p == rank) continue;
        if (req[k]) CHECK_ST(hcomm_wait(req[k]), "wake wait");
        k++;
        if (in[p] != 1000 * cycle + p) {
            FAIL("cycle %d: wake message from rank %d is %d, expected %d", cycle, p, in[p],
                 1000 * cycle + p);
            rc = -1;
        }
    }
    free(in);
    free(req);
    return rc;
}

/* Rank 0 sends big bytes to rank 1, which stops progressing mid-message. */
static int midsend(size_t big, double secs)
{
    if (rank > 1) return 0;
    int rc = 0;
    uint8_t *b = malloc(big);
    if (!b) {
        FAIL("out of memory for %zu bytes", big);
        return -1;
    }
    /* The markers enclose the time in which a close would be wrong: from
     * "go" (traffic, so neither idle timer can be due) to the end of the
     * big message; filling the buffer before may take longer than the
     * timeout, and a close then is right. */
    if (rank == 0) {
        fill(b, 0, 1, 99, big);
        int go = 1; /* the big message follows at once: rank 1 catches it mid-way */
        CHECK_ST(hcomm_send(&go, 1, HCOMM_INT32, 1, 8, world), "go send");
        fprintf(stderr, "rank %d: midsend begin\n", rank);
        CHECK_ST(hcomm_send(b, big, HCOMM_UINT8, 1, 9, world), "big send");
    } else {
        hcomm_request_t req;
        int go = 0;
        CHECK_ST(hcomm_recv(&go, 1, HCOMM_INT32, 0, 8, world), "go recv");
        fprintf(stderr, "rank %d: midsend begin\n", rank);
        CHECK_ST(hcomm_irecv(b, big, HCOMM_UINT8, 0, 9, world, &req), "big irecv");
        double until = mp_now() + 0.05;
        int done = 0;
        while (mp_now() < until && !done)
            CHECK_ST(hcomm_test(req, &done), "big test");
        if (done) {
            FAIL("%zu bytes arrived within 50 ms: the stall would not be mid-message", big);
            return -1;
        }
        usleep((useconds_t)(secs * 1e6)); /* no hcomm call: the sender stays queued */
        CHECK_ST(hcomm_wait(req), "big wait");
        rc = verify(b, 0, 1, 99, big, "midsend");
    }
    fprintf(stderr, "rank %d: midsend end\n", rank);
    free(b);
    return rc;
}

int main(int argc, char **argv)
{
    int cycles = 3;
    double idle = 2.5;
    size_t big = 256u << 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cycles") && i + 1 < argc)
            cycles = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--idle") && i + 1 < argc)
            idle = atof(argv[++i]);
        else if (!strcmp(argv[i], "--big") && i + 1 < argc) {
            char *end;
            big = strtoull(argv[++i], &end, 0);
            big <<= *end == 'G' ? 30 : *end == 'M' ? 20 : *end == 'K' ? 10 : 0;
        } else {
            fprintf(stderr, "usage: %s [--cycles N] [--idle S] [--big BYTES]\n", argv[0]);
            return 2;
        }
    }
    mp_init();
    world = hcomm_comm_world();
    rank = mp_rank;
    size = mp_size;
    if (size < 2) {
        fprintf(stderr, "skipped: needs at least 2 ranks\n");
        hcomm_finalize();
        return 77;
    }
    int base = count_sockets();
    for (int c = 0; c < cycles && !failures; c++) {
        exchange(c);
        if (!failures) idle_phase(c, idle, base);
    }
    if (!failures) midsend(big, idle);
    if (!failures) exchange(cycles); /* after the stall, both directions still work */
    hcomm_finalize();
    if (rank == 0 && !failures) printf("mp_tcp_idle: %d cycles passed\n", cycles);
    return failures ? 1 : 0;
}
