/*
 * Helpers shared by the multi-process API tests (tests/core/mp_*.c,
 * tests/coll/mp_coll_*.c, tests/drv/, tests/topo/: tests/README.md). They
 * use only the public API. Include as "common/mp_test.h" with tests/ on
 * the include path.
 *
 * Every failure prints one line "rank R: <what> expected X got Y" on stderr
 * and is counted; a failed call that leaves the test unable to go on exits
 * at once (the other ranks then see a failed peer instead of a silent hang).
 * mp_exit() ends the program with 0 only if nothing failed.
 */
#ifndef MP_TEST_H
#define MP_TEST_H

#include <hcomm.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int mp_rank = -1;
static int mp_size = 0;
static int mp_failures;

static inline double mp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void mp_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

__attribute__((format(printf, 1, 2))) static inline void mp_fail(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: %s\n", mp_rank, msg);
    fflush(stderr);
    mp_failures++;
}

static inline const char *mp_status_name(hcomm_status_t st)
{
    switch (st) {
#define MP_STATUS_CASE_(name, value, text)                                                         \
    case HCOMM_##name:                                                                             \
        return #name;
        HCOMM_STATUS_MAP(MP_STATUS_CASE_)
#undef MP_STATUS_CASE_
    }
    return "?";
}

/* A call that must succeed; on failure the test cannot go on. */
#define MP_OK(call)                                                                                \
    do {                                                                                           \
        hcomm_status_t mp_st_ = (call);                                                            \
        if (mp_st_ != HCOMM_OK) {                                                                  \
            mp_fail("%s:%d: %s expected OK got %s (%s)", __FILE__, __LINE__, #call,                \
                    mp_status_name(mp_st_), hcomm_last_error());                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* A call that must return `want`; a failure is counted, the test goes on. */
#define MP_EXPECT(want, call) mp_expect_status_((want), (call), #call, __FILE__, __LINE__)

static inline int mp_expect_status_(hcomm_status_t want, hcomm_status_t got, const char *what,
                                    const char *file, int line)
{
    if (got == want) return 1;
    mp_fail("%s:%d: %s expected %s got %s (last_error: %s)", file, line, what, mp_status_name(want),
            mp_status_name(got), hcomm_last_error());
    return 0;
}

/* last_error must contain every NULL-terminated substring. */
static inline void mp_expect_msg(const char *what, ...)
{
    const char *msg = hcomm_last_error();
    va_list ap;
    va_start(ap, what);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        if (!msg || !strstr(msg, s))
            mp_fail("%s: last_error expected to contain \"%s\" got \"%s\"", what, s,
                    msg ? msg : "(null)");
    va_end(ap);
}

/* hcomm_init plus the rank and size of world. */
static inline void mp_init(void)
{
    MP_OK(hcomm_init(NULL, NULL));
    mp_rank = hcomm_comm_rank(hcomm_comm_world());
    mp_size = hcomm_comm_size(hcomm_comm_world());
    if (mp_rank < 0 || mp_size < 1 || mp_rank >= mp_size) {
        mp_fail("world rank/size expected valid got %d/%d", mp_rank, mp_size);
        exit(1);
    }
}

/* Agrees on the failure count (so every rank reports the same verdict),
 * finalizes and exits. */
static inline int mp_finish(const char *name)
{
    int64_t mine = mp_failures, all = 0;
    hcomm_status_t st = hcomm_allreduce(&mine, &all, 1, HCOMM_INT64, HCOMM_SUM, hcomm_comm_world());
    if (st != HCOMM_OK) {
        mp_fail("final allreduce expected OK got %s (%s)", mp_status_name(st), hcomm_last_error());
        all = mine + 1;
    }
    st = hcomm_finalize();
    if (st != HCOMM_OK) {
        mp_fail("hcomm_finalize expected OK got %s (%s)", mp_status_name(st), hcomm_last_error());
        mine++;
    }
    if (mp_rank == 0 || mine)
        printf("rank %d: %s: %s (%lld failures on this rank, %lld in all)\n", mp_rank, name,
               all || mine ? "FAILED" : "passed", (long long)mine, (long long)all);
    fflush(stdout);
    return all || mine ? 1 : 0;
}

/* xorshift64*: deterministic data that every rank can regenerate. */
static inline uint64_t mp_hash(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static inline void *mp_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        mp_fail("malloc(%zu) expected memory got NULL", n);
        exit(1);
    }
    return p;
}

/* A call that needed the killed rank `victim`: it must fail with
 * ERR_PEER_FAILED, name the rank, and within 10 s of t0. */
static inline void mp_expect_peer_failed(hcomm_status_t st, double t0, int victim,
                                         const char *what)
{
    double dt = mp_now() - t0;
    char name[32];
    snprintf(name, sizeof(name), "rank %d", victim);
    if (st != HCOMM_ERR_PEER_FAILED)
        mp_fail("%s: expected ERR_PEER_FAILED got %s (%s) after %.2f s", what, mp_status_name(st),
                hcomm_last_error(), dt);
    else if (!strstr(hcomm_last_error(), name))
        mp_fail("%s: last_error expected to name \"%s\" got \"%s\"", what, name,
                hcomm_last_error());
    else if (dt > 10)
        mp_fail("%s: ERR_PEER_FAILED expected within 10 s got %.2f s", what, dt);
    else
        printf("rank %d: got PEER_FAILED naming rank %d after %.2f s (%s)\n", mp_rank, victim, dt,
               what);
}

/* Survivors wait for each other before finalizing: a survivor that exits
 * early would otherwise be the failed peer the slower ones see first. */
static inline void mp_survivors_sync(int victim)
{
    hcomm_comm_t w = hcomm_comm_world();
    hcomm_request_t *reqs = mp_xmalloc(sizeof(*reqs) * 2 * (size_t)mp_size);
    int32_t out = 1, *in = mp_xmalloc(sizeof(int32_t) * (size_t)mp_size);
    int nr = 0;
    for (int p = 0; p < mp_size; p++) {
        if (p == victim || p == mp_rank)
            continue;
        MP_OK(hcomm_irecv(&in[p], 1, HCOMM_INT32, p, 999, w, &reqs[nr++]));
        MP_OK(hcomm_isend(&out, 1, HCOMM_INT32, p, 999, w, &reqs[nr++]));
    }
    for (int i = 0; i < nr; i++)
        MP_OK(hcomm_wait(reqs[i]));
    free(reqs);
    free(in);
}

#endif /* MP_TEST_H */
