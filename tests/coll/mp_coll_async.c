/*
 * Non-blocking collectives, groups and communicator splits.
 *
 *   mp_coll_async          several outstanding collectives of every kind on
 *                          one communicator, completed in reverse order with
 *                          hcomm_wait, in a rank-specific random order with
 *                          hcomm_test, and in issue order with point-to-point
 *                          traffic in between; groups of blocking and
 *                          non-blocking collectives (nested too); splits
 *                          (even/odd, reversed keys, HCOMM_UNDEFINED) with
 *                          collectives outstanding on several communicators
 *                          at once, posted in different orders on different
 *                          ranks; hcomm_comm_abort from a watchdog thread
 *                          ending a blocked receive and a collective that
 *                          cannot complete; 40 split/free cycles (--no-cycles: without
 *                          them, --cycles-only: only them).
 *   mp_coll_async --kill V rank V SIGKILLs itself right after posting large
 *                          collectives; the others must get ERR_PEER_FAILED
 *                          naming it within 10 s (driver: tests/api/mp_fault.sh)
 */
#include "common/mp_test.h"

#include <pthread.h>
#include <signal.h>

#define NOPS 8

typedef struct {
    const char *name;
    void *sbuf, *rbuf;
    size_t count;
    hcomm_request_t req;
} op_t;

/* Issues NOPS collectives of every kind on w; all ranks the same order. */
static void issue(op_t *ops, hcomm_comm_t w, int round)
{
    int n = mp_size, me = mp_rank;
    memset(ops, 0, sizeof(*ops) * NOPS);
    /* 0: iallreduce int32 sum */
    ops[0].name = "iallreduce int32 sum";
    ops[0].count = 1000;
    int32_t *a = mp_xmalloc(4 * 1000), *ar = mp_xmalloc(4 * 1000);
    for (int i = 0; i < 1000; i++)
        a[i] = me * 1000 + i + round;
    ops[0].sbuf = a;
    ops[0].rbuf = ar;
    MP_OK(hcomm_iallreduce(a, ar, 1000, HCOMM_INT32, HCOMM_SUM, w, &ops[0].req));
    /* 1: ibroadcast float32 from the last rank */
    ops[1].name = "ibroadcast float32";
    ops[1].count = 5000;
    float *b = mp_xmalloc(4 * 5000);
    for (int i = 0; i < 5000; i++)
        b[i] = me == n - 1 ? (float)(i * 3 + round) : -1.0f;
    ops[1].rbuf = b;
    MP_OK(hcomm_ibroadcast(b, 5000, HCOMM_FLOAT32, n - 1, w, &ops[1].req));
    /* 2: ireduce int64 max to rank 1 % n */
    ops[2].name = "ireduce int64 max";
    ops[2].count = 777;
    int64_t *c = mp_xmalloc(8 * 777), *cr = mp_xmalloc(8 * 777);
    for (int i = 0; i < 777; i++)
        c[i] = (int64_t)((me * 7919 + i * 31) % 1000) - 500 + round;
    ops[2].sbuf = c;
    ops[2].rbuf = cr;
    MP_OK(hcomm_ireduce(c, me == 1 % n ? cr : NULL, 777, HCOMM_INT64, HCOMM_MAX, 1 % n, w,
                        &ops[2].req));
    /* 3: iallgather int8 */
    ops[3].name = "iallgather int8";
    ops[3].count = 333;
    int8_t *d = mp_xmalloc(333), *dr = mp_xmalloc(333 * (size_t)n);
    for (int i = 0; i < 333; i++)
        d[i] = (int8_t)(me * 13 + i + round);
    ops[3].sbuf = d;
    ops[3].rbuf = dr;
    MP_OK(hcomm_iallgather(d, dr, 333, HCOMM_INT8, w, &ops[3].req));
    /* 4: ireduce_scatter float64 sum, 100 per rank */
    ops[4].name = "ireduce_scatter float64 sum";
    ops[4].count = 100;
    double *e = mp_xmalloc(8 * 100 * (size_t)n), *er = mp_xmalloc(8 * 100);
    for (int i = 0; i < 100 * n; i++)
        e[i] = me + i + round;
    ops[4].sbuf = e;
    ops[4].rbuf = er;
    MP_OK(hcomm_ireduce_scatter(e, er, 100, HCOMM_FLOAT64, HCOMM_SUM, w, &ops[4].req));
    /* 5: ialltoall uint32, 50 per rank */
    ops[5].name = "ialltoall uint32";
    ops[5].count = 50;
    uint32_t *f = mp_xmalloc(4 * 50 * (size_t)n), *fr = mp_xmalloc(4 * 50 * (size_t)n);
    for (int i = 0; i < 50 * n; i++)
        f[i] = (uint32_t)(me * 100000 + i + round);
    ops[5].sbuf = f;
    ops[5].rbuf = fr;
    MP_OK(hcomm_ialltoall(f, fr, 50, HCOMM_UINT32, w, &ops[5].req));
    /* 6: ibarrier */
    ops[6].name = "ibarrier";
    MP_OK(hcomm_ibarrier(w, &ops[6].req));
    /* 7: a large in-place iallreduce float32 sum */
    ops[7].name = "iallreduce float32 sum 65537 in place";
    ops[7].count = 65537;
    float *g = mp_xmalloc(4 * 65537);
    for (int i = 0; i < 65537; i++)
        g[i] = (float)((i % 100) + me + round);
    ops[7].rbuf = g;
    MP_OK(hcomm_iallreduce(g, g, 65537, HCOMM_FLOAT32, HCOMM_SUM, w, &ops[7].req));
}

static void verify_free(op_t *ops, int round, const char *how)
{
    int n = mp_size, me = mp_rank;
    long bad = 0;
    const char *which = NULL;
#define BADIF(cond, opi)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            if (!bad++) which = ops[opi].name;                                                     \
        }                                                                                          \
    } while (0)
    int32_t *ar = ops[0].rbuf;
    for (int i = 0; i < 1000; i++)
        BADIF(ar[i] != 1000 * n * (n - 1) / 2 + n * (i + round), 0);
    float *b = ops[1].rbuf;
    for (int i = 0; i < 5000; i++)
        BADIF(b[i] != (float)(i * 3 + round), 1);
    if (me == 1 % n) {
        int64_t *cr = ops[2].rbuf;
        for (int i = 0; i < 777; i++) {
            int64_t m = INT64_MIN;
            for (int r = 0; r < n; r++) {
                int64_t v = (int64_t)((r * 7919 + i * 31) % 1000) - 500 + round;
                m = v > m ? v : m;
            }
            BADIF(cr[i] != m, 2);
        }
    }
    int8_t *dr = ops[3].rbuf;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < 333; i++)
            BADIF(dr[r * 333 + i] != (int8_t)(r * 13 + i + round), 3);
    double *er = ops[4].rbuf;
    for (int i = 0; i < 100; i++)
        BADIF(er[i] != (double)n * (n - 1) / 2 + n * (me * 100 + i + round), 4);
    uint32_t *fr = ops[5].rbuf;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < 50; i++)
            BADIF(fr[r * 50 + i] != (uint32_t)(r * 100000 + me * 50 + i + round), 5);
    float *g = ops[7].rbuf;
    for (int i = 0; i < 65537; i++)
        BADIF(g[i] != (float)(n * ((i % 100) + round) + n * (n - 1) / 2), 7);
    if (bad)
        mp_fail("outstanding collectives completed %s (round %d): %ld wrong elements, first in "
                "%s",
                how, round, bad, which);
    for (int k = 0; k < NOPS; k++) {
        free(ops[k].sbuf);
        free(ops[k].rbuf);
    }
#undef BADIF
}

static void phase_outstanding(hcomm_comm_t w)
{
    op_t ops[NOPS];
    /* Reverse order, hcomm_wait. */
    issue(ops, w, 0);
    for (int k = NOPS - 1; k >= 0; k--) {
        hcomm_status_t st = hcomm_wait(ops[k].req);
        if (st != HCOMM_OK) {
            mp_fail("%s: hcomm_wait in reverse order expected OK got %s (%s)", ops[k].name,
                    mp_status_name(st), hcomm_last_error());
            exit(1);
        }
    }
    verify_free(ops, 0, "in reverse order by hcomm_wait");

    /* Rank-specific random order, hcomm_test polling only. */
    for (int rep = 0; rep < 3; rep++) {
        issue(ops, w, 1 + rep);
        int order[NOPS], left = NOPS;
        for (int k = 0; k < NOPS; k++)
            order[k] = k;
        uint64_t h = mp_hash((uint64_t)mp_rank * 977 + (uint64_t)rep);
        for (int k = NOPS - 1; k > 0; k--) {
            int j = (int)((h >> (k * 3)) % (uint64_t)(k + 1));
            int t = order[k];
            order[k] = order[j];
            order[j] = t;
        }
        double t0 = mp_now();
        int done[NOPS] = {0};
        while (left) {
            for (int k = 0; k < NOPS; k++) {
                int i = order[k], d = 0;
                if (done[i]) continue;
                hcomm_status_t st = hcomm_test(ops[i].req, &d);
                if (st != HCOMM_OK) {
                    mp_fail("%s: hcomm_test expected OK got %s (%s)", ops[i].name,
                            mp_status_name(st), hcomm_last_error());
                    exit(1);
                }
                if (d) {
                    done[i] = 1;
                    left--;
                }
                break; /* poll only the first unfinished one in our order */
            }
            if (mp_now() - t0 > 60) {
                mp_fail("hcomm_test loop: %d collectives expected done within 60 s got pending",
                        left);
                exit(1);
            }
        }
        verify_free(ops, 1 + rep, "in random order by hcomm_test");
    }

    /* Issue order, with point-to-point messages in between. */
    issue(ops, w, 9);
    int next = (mp_rank + 1) % mp_size, prev = (mp_rank + mp_size - 1) % mp_size;
    for (int k = 0; k < NOPS; k++) {
        int64_t v = mp_rank * 100 + k, r = -1;
        hcomm_request_t sr;
        MP_OK(hcomm_isend(&v, 1, HCOMM_INT64, next, k, w, &sr));
        MP_OK(hcomm_recv(&r, 1, HCOMM_INT64, prev, k, w));
        MP_OK(hcomm_wait(sr));
        if (r != prev * 100 + k)
            mp_fail("p2p between outstanding collectives: expected %d got %lld", prev * 100 + k,
                    (long long)r);
        MP_OK(hcomm_wait(ops[k].req));
    }
    verify_free(ops, 9, "in issue order with p2p in between");
}

static void phase_groups(hcomm_comm_t w)
{
    int n = mp_size, me = mp_rank;
    int64_t in[10][11], out[10][11];
    double bc[300];
    for (int rep = 0; rep < 2; rep++) {
        for (int k = 0; k < 10; k++)
            for (int i = 0; i <= k; i++) {
                in[k][i] = me * 10 + k * i + rep;
                out[k][i] = -12345;
            }
        for (int i = 0; i < 300; i++)
            bc[i] = me == 0 ? i * 0.5 + rep : -1;
        hcomm_request_t breq;
        MP_OK(hcomm_group_start());
        if (rep) /* nested: only the outermost end launches */
            MP_OK(hcomm_group_start());
        for (int k = 0; k < 10; k++)
            MP_OK(hcomm_allreduce(in[k], out[k], (size_t)k + 1, HCOMM_INT64, HCOMM_SUM, w));
        MP_OK(hcomm_ibroadcast(bc, 300, HCOMM_FLOAT64, 0, w, &breq));
        if (rep) MP_OK(hcomm_group_end());
        MP_OK(hcomm_group_end());
        for (int k = 0; k < 10; k++)
            for (int i = 0; i <= k; i++) {
                int64_t want = 10 * (int64_t)n * (n - 1) / 2 + (int64_t)n * (k * i + rep);
                if (out[k][i] != want) {
                    mp_fail("group%s: allreduce %d element %d expected %lld got %lld",
                            rep ? " (nested)" : "", k, i, (long long)want, (long long)out[k][i]);
                    k = 10;
                    break;
                }
            }
        MP_OK(hcomm_wait(breq));
        for (int i = 0; i < 300; i++)
            if (bc[i] != i * 0.5 + rep) {
                mp_fail("group: ibroadcast element %d expected %g got %g", i, i * 0.5 + rep, bc[i]);
                break;
            }
    }
    /* An empty group is fine. */
    MP_OK(hcomm_group_start());
    MP_OK(hcomm_group_end());
}

static void phase_split(hcomm_comm_t w)
{
    int n = mp_size, me = mp_rank;
    hcomm_comm_t eo, rev;
    MP_OK(hcomm_comm_split(w, me % 2, me, &eo));
    MP_OK(hcomm_comm_split(w, 0, n - me, &rev));
    int eo_size = (n + (me % 2 ? 0 : 1)) / 2;
    if (!eo || hcomm_comm_size(eo) != eo_size || hcomm_comm_rank(eo) != me / 2)
        mp_fail("even/odd split: rank/size expected %d/%d got %d/%d", me / 2, eo_size,
                eo ? hcomm_comm_rank(eo) : -1, eo ? hcomm_comm_size(eo) : -1);
    if (!rev || hcomm_comm_size(rev) != n || hcomm_comm_rank(rev) != n - 1 - me)
        mp_fail("reversed split: rank/size expected %d/%d got %d/%d", n - 1 - me, n,
                rev ? hcomm_comm_rank(rev) : -1, rev ? hcomm_comm_size(rev) : -1);

    /* Outstanding on three communicators at once, posted in a different
     * order on odd and even ranks, completed in reverse. */
    for (int rep = 0; rep < 3; rep++) {
        int64_t eo_in = me + rep, eo_out = -1, w_in = me * 3, w_out = -1;
        size_t big = 65537;
        int32_t *rv = mp_xmalloc(4 * big);
        for (size_t i = 0; i < big; i++)
            rv[i] = (int32_t)(i % 1000) * (me + 1);
        int64_t root_val = me == n - 1 ? 4242 + rep : -1; /* rev's rank 0 is world rank n-1 */
        hcomm_request_t r[4];
        if (me % 2) {
            MP_OK(hcomm_iallreduce(rv, rv, big, HCOMM_INT32, HCOMM_SUM, rev, &r[0]));
            MP_OK(hcomm_iallreduce(&eo_in, &eo_out, 1, HCOMM_INT64, HCOMM_SUM, eo, &r[1]));
        } else {
            MP_OK(hcomm_iallreduce(&eo_in, &eo_out, 1, HCOMM_INT64, HCOMM_SUM, eo, &r[1]));
            MP_OK(hcomm_iallreduce(rv, rv, big, HCOMM_INT32, HCOMM_SUM, rev, &r[0]));
        }
        MP_OK(hcomm_iallreduce(&w_in, &w_out, 1, HCOMM_INT64, HCOMM_SUM, w, &r[2]));
        MP_OK(hcomm_ibroadcast(&root_val, 1, HCOMM_INT64, 0, rev, &r[3]));
        for (int k = 3; k >= 0; k--)
            MP_OK(hcomm_wait(r[k]));
        int64_t want_eo = 0;
        for (int q = me % 2; q < n; q += 2)
            want_eo += q + rep;
        if (eo_out != want_eo)
            mp_fail("even/odd allreduce expected %lld got %lld", (long long)want_eo,
                    (long long)eo_out);
        if (w_out != 3LL * n * (n - 1) / 2)
            mp_fail("world allreduce among sub-communicator ones expected %lld got %lld",
                    3LL * n * (n - 1) / 2, (long long)w_out);
        if (root_val != 4242 + rep)
            mp_fail("broadcast from rank 0 of the reversed communicator (world rank %d) "
                    "expected %d got %lld",
                    n - 1, 4242 + rep, (long long)root_val);
        for (size_t i = 0; i < big; i++)
            if (rv[i] != (int32_t)(i % 1000) * n * (n + 1) / 2) {
                mp_fail("reversed-comm allreduce element %zu expected %d got %d", i,
                        (int)(i % 1000) * n * (n + 1) / 2, rv[i]);
                break;
            }
        free(rv);
    }
    /* p2p on a sub-communicator uses its ranks. */
    int64_t v = me, got = -1;
    hcomm_request_t sr;
    int rn = hcomm_comm_rank(rev);
    MP_OK(hcomm_isend(&v, 1, HCOMM_INT64, (rn + 1) % n, 0, rev, &sr));
    MP_OK(hcomm_recv(&got, 1, HCOMM_INT64, (rn + n - 1) % n, 0, rev));
    MP_OK(hcomm_wait(sr));
    /* rev rank rn-1 is world rank n-1-(rn-1) = me+1 (mod n) */
    if (got != (me + 1) % n)
        mp_fail("p2p on the reversed communicator: expected world rank %d's value got %lld",
                (me + 1) % n, (long long)got);
    MP_OK(hcomm_comm_free(eo));
    MP_OK(hcomm_comm_free(rev));

    /* HCOMM_UNDEFINED: rank 0 stays out and gets NULL. */
    hcomm_comm_t rest = (hcomm_comm_t)(uintptr_t)0x5e5e;
    MP_OK(hcomm_comm_split(w, me == 0 ? HCOMM_UNDEFINED : 7, 0, &rest));
    if (me == 0) {
        if (rest != NULL) mp_fail("split with HCOMM_UNDEFINED expected NULL got %p", (void *)rest);
    } else {
        int64_t one = 1, cnt = 0;
        if (!rest || hcomm_comm_size(rest) != n - 1 || hcomm_comm_rank(rest) != me - 1) {
            mp_fail("split without rank 0: rank/size expected %d/%d got %d/%d", me - 1, n - 1,
                    rest ? hcomm_comm_rank(rest) : -1, rest ? hcomm_comm_size(rest) : -1);
        } else {
            MP_OK(hcomm_allreduce(&one, &cnt, 1, HCOMM_INT64, HCOMM_SUM, rest));
            if (cnt != n - 1)
                mp_fail("allreduce without rank 0 expected %d got %lld", n - 1, (long long)cnt);
            MP_OK(hcomm_comm_free(rest));
        }
    }
}

/* Split/free cycles, half of them over every rank: context ids and node
 * regions of freed communicators must not leak. */
static void phase_cycles(hcomm_comm_t w)
{
    int me = mp_rank;
    for (int i = 0; i < 40; i++) {
        hcomm_comm_t c;
        MP_OK(hcomm_comm_split(w, i % 2 ? (me + i) % 3 : 0, -me, &c));
        int64_t one = 1, cnt = 0;
        hcomm_status_t st = hcomm_allreduce(&one, &cnt, 1, HCOMM_INT64, HCOMM_SUM, c);
        if (st != HCOMM_OK) {
            mp_fail("split cycle %d: allreduce on a fresh %d-rank communicator expected OK got "
                    "%s (%s)",
                    i, hcomm_comm_size(c), mp_status_name(st), hcomm_last_error());
            exit(1);
        }
        if (cnt != hcomm_comm_size(c)) {
            mp_fail("split cycle %d: allreduce of ones expected %d got %lld", i, hcomm_comm_size(c),
                    (long long)cnt);
            break;
        }
        MP_OK(hcomm_comm_free(c));
    }
}

/* hcomm_comm_abort from a watchdog thread while the main thread is blocked
 * in hcomm_recv, and while a collective that can never complete (rank 0
 * does not join it) is outstanding: both must end with ERR_ABORTED promptly;
 * world stays usable. */
static void *watchdog(void *arg)
{
    mp_sleep_ms(300);
    hcomm_status_t st = hcomm_comm_abort((hcomm_comm_t)arg);
    if (st != HCOMM_OK)
        mp_fail("hcomm_comm_abort from a watchdog thread expected OK got %s", mp_status_name(st));
    return NULL;
}

static void phase_abort(hcomm_comm_t w)
{
    for (int kind = 0; kind < 2; kind++) {
        hcomm_comm_t sub;
        MP_OK(hcomm_comm_split(w, 0, mp_rank, &sub));
        pthread_t th;
        int joins = kind == 0 || mp_rank != 0;
        if (joins && pthread_create(&th, NULL, watchdog, sub) != 0) {
            mp_fail("pthread_create failed");
            exit(1);
        }
        double t0 = mp_now();
        if (kind == 0) {
            int32_t x;
            hcomm_status_t st = hcomm_recv(&x, 1, HCOMM_INT32, hcomm_comm_rank(sub), 5, sub);
            if (st != HCOMM_ERR_ABORTED)
                mp_fail("hcomm_recv on a communicator aborted by another thread expected "
                        "ERR_ABORTED got %s (%s)",
                        mp_status_name(st), hcomm_last_error());
        } else if (joins) {
            int64_t v = 1, r = 0;
            hcomm_request_t req;
            MP_OK(hcomm_iallreduce(&v, &r, 1, HCOMM_INT64, HCOMM_SUM, sub, &req));
            hcomm_status_t st = hcomm_wait(req);
            if (st != HCOMM_ERR_ABORTED)
                mp_fail("iallreduce rank 0 never joins, aborted by another thread: expected "
                        "ERR_ABORTED got %s (%s)",
                        mp_status_name(st), hcomm_last_error());
        }
        if (joins) {
            if (mp_now() - t0 > 10)
                mp_fail("abort from another thread took %.1f s to end the wait", mp_now() - t0);
            pthread_join(th, NULL);
        }
        MP_OK(hcomm_comm_free(sub));
        MP_OK(hcomm_barrier(w));
    }
    int64_t one = 1, n = 0;
    MP_OK(hcomm_allreduce(&one, &n, 1, HCOMM_INT64, HCOMM_SUM, w));
    if (n != mp_size)
        mp_fail("world allreduce after aborted sub-communicators expected %d got %lld", mp_size,
                (long long)n);
}


static int run_kill(int victim)
{
    hcomm_comm_t w = hcomm_comm_world();
    size_t big = 4 << 20; /* 16 MiB of float32: many pipeline steps */
    float *buf = mp_xmalloc(big * 4);
    for (size_t i = 0; i < big; i++)
        buf[i] = 1;
    MP_OK(hcomm_allreduce(buf, buf, 1024, HCOMM_FLOAT32, HCOMM_SUM, w));
    MP_OK(hcomm_barrier(w));
    hcomm_request_t ar, br;
    int64_t bval = 5;
    double t0 = mp_now();
    MP_OK(hcomm_iallreduce(buf, buf, big, HCOMM_FLOAT32, HCOMM_SUM, w, &ar));
    MP_OK(hcomm_ibroadcast(&bval, 1, HCOMM_INT64, victim, w, &br));
    if (mp_rank == victim) raise(SIGKILL);
    mp_expect_peer_failed(hcomm_wait(ar), t0, victim, "hcomm_iallreduce");
    t0 = mp_now();
    mp_expect_peer_failed(hcomm_wait(br), t0, victim, "hcomm_ibroadcast");
    t0 = mp_now();
    int64_t one = 1, s = 0;
    mp_expect_peer_failed(hcomm_allreduce(&one, &s, 1, HCOMM_INT64, HCOMM_SUM, w), t0, victim,
                  "hcomm_allreduce after");
    mp_survivors_sync(victim);
    free(buf);
    t0 = mp_now();
    hcomm_status_t st = hcomm_finalize();
    if (st != HCOMM_OK)
        mp_fail("hcomm_finalize after a peer died expected OK got %s (%s)", mp_status_name(st),
                hcomm_last_error());
    if (mp_now() - t0 > 10) mp_fail("hcomm_finalize after a peer died took %.1f s", mp_now() - t0);
    printf("rank %d: mp_coll_async --kill: %s\n", mp_rank, mp_failures ? "FAILED" : "passed");
    return mp_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int victim = -1, cycles = 1, others = 1;
    if (argc == 3 && !strcmp(argv[1], "--kill")) {
        victim = atoi(argv[2]);
    } else if (argc == 2 && !strcmp(argv[1], "--no-cycles")) {
        cycles = 0;
    } else if (argc == 2 && !strcmp(argv[1], "--cycles-only")) {
        others = 0;
    } else if (argc != 1) {
        fprintf(stderr, "usage: mp_coll_async [--kill RANK | --no-cycles | --cycles-only]\n");
        return 2;
    }
    mp_init();
    if (victim >= 0) {
        if (victim >= mp_size || mp_size < 2) {
            mp_fail("--kill %d needs 2+ ranks and a victim in range (%d ranks)", victim, mp_size);
            return 2;
        }
        return run_kill(victim);
    }
    hcomm_comm_t w = hcomm_comm_world();
    struct {
        const char *name;
        void (*fn)(hcomm_comm_t);
        int run;
    } phases[] = {{"outstanding", phase_outstanding, others},
                  {"groups", phase_groups, others},
                  {"split", phase_split, others},
                  {"abort", phase_abort, others},
                  {"split/free cycles", phase_cycles, cycles}};
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
        if (!phases[i].run) continue;
        double t0 = mp_now();
        phases[i].fn(w);
        MP_OK(hcomm_barrier(w));
        if (mp_rank == 0)
            printf("rank 0: phase %s done in %.2f s\n", phases[i].name, mp_now() - t0);
    }
    return mp_finish("mp_coll_async");
}
