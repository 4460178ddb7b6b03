/*
 * Multi-process test of the collectives, run under hcommrun. Meant to run
 * with HCOMM_ALGO forced to one of the point-to-point algorithms (ring, rd,
 * tree, direct): on one host the node algorithms would run otherwise. Each
 * collective x dtype x op x count x in-place/out-of-place is checked element
 * by element against a reference computed here; the data are small integers
 * so that every partial and final result is exact in every dtype (bf16
 * included), which makes the checks exact whatever order the algorithm
 * reduces in. Collectives the forced algorithm does not cover fall back to
 * the automatic choice (and are checked the same).
 *
 *   mp_coll_net [-c 1,7,1023] [--big] [--pieces K] [--bench BYTES]
 *     -c      element counts to test (default 1,7,1023,65537)
 *     --big   also a multi-MiB float32 case per collective (many ring chunks)
 *     --pieces K only the collectives hier pipelines, at sizes of K pieces
 *             (test_pieces)
 *     --bench allreduce float32 SUM of BYTES, prints busbw (no checks)
 *     --die   the last rank exits after a barrier; the others' allreduce must
 *             fail promptly with ERR_PEER_FAILED and a message
 */
#include "common/mp_test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

enum { K_ALLREDUCE, K_REDUCE, K_BROADCAST, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL, K_BARRIER };

static int me, n, fails, checks, pieces; /* --pieces K */
static const char *algo;
static hcomm_comm_t world;

static const hcomm_dtype_t dtypes[] = {HCOMM_INT32, HCOMM_FLOAT32, HCOMM_BFLOAT16, HCOMM_FLOAT64,
                                       HCOMM_UINT8};
static const char *const dtype_names[HCOMM_DTYPE_COUNT] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "fp16", "bf16", "f32", "f64"};
static const char *const op_names[HCOMM_OP_COUNT] = {"sum", "prod", "max", "min", "avg"};

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static void put(hcomm_dtype_t dt, void *buf, size_t i, double v)
{
    switch (dt) {
    case HCOMM_INT32:
        ((int32_t *)buf)[i] = (int32_t)(int64_t)v;
        break;
    case HCOMM_UINT8:
        ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v;
        break;
    case HCOMM_FLOAT32:
        ((float *)buf)[i] = (float)v;
        break;
    case HCOMM_FLOAT64:
        ((double *)buf)[i] = v;
        break;
    case HCOMM_BFLOAT16:
        ((uint16_t *)buf)[i] = to_bf16((float)v);
        break;
    default:
        abort();
    }
}

static double get(hcomm_dtype_t dt, const void *buf, size_t i)
{
    switch (dt) {
    case HCOMM_INT32:
        return ((const int32_t *)buf)[i];
    case HCOMM_UINT8:
        return ((const uint8_t *)buf)[i];
    case HCOMM_FLOAT32:
        return ((const float *)buf)[i];
    case HCOMM_FLOAT64:
        return ((const double *)buf)[i];
    case HCOMM_BFLOAT16: {
        uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default:
        abort();
    }
}

/* Rank r's element i: small integers, chosen per op so that every result is
 * exact (|prod| <= 2^8, |sum| <= 15 n); negative values only for signed
 * types. */
static double gen(hcomm_op_t op, hcomm_dtype_t dt, int r, size_t i)
{
    int sgn = dt != HCOMM_UINT8;
    switch (op) {
    case HCOMM_PROD: {
        double v = (i + (size_t)r) % 3 == 0 ? 2 : 1;
        return sgn && (i + 2 * (size_t)r) % 5 == 0 ? -v : v;
    }
    case HCOMM_MAX:
    case HCOMM_MIN:
        return (double)((i * 7 + (size_t)r * 13) % 31) - (sgn ? 15 : 0);
    default:
        return (double)((i * 3 + (size_t)r * 5) % 16) - (sgn ? 7 : 0);
    }
}

/* Expected element i of the reduction over all ranks, written into out[0]. */
static void ref(hcomm_op_t op, hcomm_dtype_t dt, size_t i, void *out)
{
    double acc = gen(op, dt, 0, i);
    for (int r = 1; r < n; r++) {
        double v = gen(op, dt, r, i);
        switch (op) {
        case HCOMM_PROD:
            acc *= v;
            break;
        case HCOMM_MAX:
            acc = v > acc ? v : acc;
            break;
        case HCOMM_MIN:
            acc = v < acc ? v : acc;
            break;
        default:
            acc += v;
        }
    }
    if (op != HCOMM_AVG) {
        put(dt, out, 0, acc);
        return;
    }
    switch (dt) { /* the library divides once, in the accumulator type */
    case HCOMM_INT32:
    case HCOMM_UINT8:
        put(dt, out, 0, (double)((int64_t)acc / n));
        break;
    case HCOMM_FLOAT64:
        put(dt, out, 0, acc / n);
        break;
    default:
        put(dt, out, 0, (double)((float)acc / (float)n));
    }
}

static void fill(hcomm_op_t op, hcomm_dtype_t dt, void *buf, size_t base, size_t count, int r)
{
    for (size_t i = 0; i < count; i++)
        put(dt, buf, i, gen(op, dt, r, base + i));
}

static void fail(const char *what, const char *detail)
{
    fails++;
    if (fails <= 20) fprintf(stderr, "rank %d: FAIL %s: %s\n", me, what, detail);
}

/* Checks the call's status: 1 when results should be checked. */
static int status_ok(int kind, hcomm_status_t st, const char *what)
{
    char msg[512];
    (void)kind;
    checks++;
    /* A collective the forced family does not cover falls back to the
     * automatic choice: it must work all the same. */
    if (st != HCOMM_OK) {
        snprintf(msg, sizeof(msg), "%s (%s)", hcomm_strerror(st), hcomm_last_error());
        fail(what, msg);
        return 0;
    }
    return 1;
}

/* got[i] == expected value of element base+i for i < count (bytewise). */
static void check(const char *what, hcomm_dtype_t dt, const void *got, size_t count,
                  void (*expect)(size_t, void *, void *), void *arg)
{
    size_t es = hcomm_dtype_size(dt);
    uint8_t want[8];
    for (size_t i = 0; i < count; i++) {
        expect(i, want, arg);
        if (memcmp((const uint8_t *)got + i * es, want, es)) {
            char msg[200];
            snprintf(msg, sizeof(msg), "element %zu: got %g, want %g", i, get(dt, got, i),
                     get(dt, want, 0));
            fail(what, msg);
            return;
        }
    }
}

typedef struct {
    hcomm_op_t op;
    hcomm_dtype_t dt;
    size_t base;  /* element index offset */
    size_t block; /* allgather: elements per rank block */
    int root;
} exp_t;

static void exp_reduce(size_t i, void *out, void *arg)
{
    exp_t *e = arg;
    ref(e->op, e->dt, e->base + i, out);
}
static void exp_bcast(size_t i, void *out, void *arg)
{
    exp_t *e = arg;
    put(e->dt, out, 0, gen(HCOMM_SUM, e->dt, e->root, i));
}
static void exp_gather(size_t i, void *out, void *arg)
{
    exp_t *e = arg;
    put(e->dt, out, 0, gen(HCOMM_SUM, e->dt, (int)(i / e->block), i % e->block));
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", me, bytes);
        exit(1);
    }
    return p;
}

/* allreduce and reduce of count elements, reduce_scatter of rs_count per rank. */
static void test_reductions(hcomm_dtype_t dt, hcomm_op_t op, size_t count, size_t rs_count,
                            int inplace)
{
    size_t es = hcomm_dtype_size(dt), all = rs_count * (size_t)n, most = count > all ? count : all;
    uint8_t *s = xmalloc(most * es), *r = xmalloc(most * es);
    char what[160];
    exp_t e = {.op = op, .dt = dt};

    snprintf(what, sizeof(what), "allreduce %s %s count %zu %s", dtype_names[dt], op_names[op],
             count, inplace ? "in-place" : "out-of-place");
    fill(op, dt, s, 0, count, me);
    memset(r, 0xa5, count * es);
    if (inplace) memcpy(r, s, count * es);
    if (status_ok(K_ALLREDUCE, hcomm_allreduce(inplace ? r : s, r, count, dt, op, world), what))
        check(what, dt, r, count, exp_reduce, &e);

    /* --pieces: also a root on another node than rank 0 with its local index */
    int roots[3] = {0, n - 1, 1}, nroots = pieces ? 3 : 2;
    for (int k = 0; k < nroots; k++) {
        int root = roots[k];
        snprintf(what, sizeof(what), "reduce root %d %s %s count %zu %s", root, dtype_names[dt],
                 op_names[op], count, inplace ? "in-place" : "out-of-place");
        memset(r, 0xa5, count * es);
        if (inplace) memcpy(r, s, count * es);
        hcomm_status_t st =
            hcomm_reduce(inplace ? r : s, me == root ? r : NULL, count, dt, op, root, world);
        if (status_ok(K_REDUCE, st, what) && me == root) check(what, dt, r, count, exp_reduce, &e);
    }

    snprintf(what, sizeof(what), "reduce_scatter %s %s count %zu %s", dtype_names[dt], op_names[op],
             rs_count, inplace ? "in-place" : "out-of-place");
    fill(op, dt, s, 0, rs_count * (size_t)n, me);
    uint8_t *dst = inplace ? s + (size_t)me * rs_count * es : r;
    if (!inplace) memset(r, 0xa5, rs_count * es);
    e.base = (size_t)me * rs_count;
    if (status_ok(K_REDUCE_SCATTER, hcomm_reduce_scatter(s, dst, rs_count, dt, op, world), what))
        check(what, dt, dst, rs_count, exp_reduce, &e);
    free(s);
    free(r);
}

static void test_moves(hcomm_dtype_t dt, size_t count, int inplace)
{
    size_t es = hcomm_dtype_size(dt);
    uint8_t *s = xmalloc(count * es * (size_t)n), *r = xmalloc(count * es * (size_t)n);
    char what[160];
    exp_t e = {.dt = dt, .block = count};

    int roots[2] = {0, n - 1};
    for (int k = 0; k < 2 && !inplace && !pieces; k++) {
        e.root = roots[k];
        snprintf(what, sizeof(what), "broadcast root %d %s count %zu", e.root, dtype_names[dt],
                 count);
        if (me == e.root)
            fill(HCOMM_SUM, dt, r, 0, count, me);
        else
            memset(r, 0xa5, count * es);
        if (status_ok(K_BROADCAST, hcomm_broadcast(r, count, dt, e.root, world), what))
            check(what, dt, r, count, exp_bcast, &e);
    }

    snprintf(what, sizeof(what), "allgather %s count %zu %s", dtype_names[dt], count,
             inplace ? "in-place" : "out-of-place");
    memset(r, 0xa5, count * es * (size_t)n);
    uint8_t *src = inplace ? r + (size_t)me * count * es : s;
    fill(HCOMM_SUM, dt, src, 0, count, me);
    if (status_ok(K_ALLGATHER, hcomm_allgather(src, r, count, dt, world), what))
        check(what, dt, r, count * (size_t)n, exp_gather, &e);

    if (pieces) goto out;
    /* alltoall: rank q's block j holds j*1000 + q*10 + i (mod the type) */
    snprintf(what, sizeof(what), "alltoall %s count %zu %s", dtype_names[dt], count,
             inplace ? "in-place" : "out-of-place");
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < count; i++)
            put(dt, s, (size_t)j * count + i, (double)((j * 1000 + me * 10 + (int)(i % 7)) % 97));
    if (inplace)
        memcpy(r, s, count * es * (size_t)n);
    else
        memset(r, 0xa5, count * es * (size_t)n);
    if (status_ok(K_ALLTOALL, hcomm_alltoall(inplace ? r : s, r, count, dt, world), what)) {
        for (int q = 0; q < n; q++)
            for (size_t i = 0; i < count; i++) {
                double want = (double)((me * 1000 + q * 10 + (int)(i % 7)) % 97);
                double got = get(dt, r, (size_t)q * count + i);
                if (got != want) {
                    char msg[160];
                    snprintf(msg, sizeof(msg), "block %d element %zu: got %g, want %g", q, i, got,
                             want);
                    fail(what, msg);
                    q = n;
                    break;
                }
            }
    }
out:
    free(s);
    free(r);
}

/* The hierarchical pipelines (coll/net_hier*.c) cut the vector, or every
 * rank's block, into pieces of which a rank's share is at least 1 MiB.
 * K pieces here (the vectors' fewer on 4 ranks a node), the last one half as
 * long, and for the vectors a count that the ranks per node (2 or 4) do
 * not divide, so that the last piece is padded; every element is checked,
 * so a piece in the wrong place, a slot reused too early or a lost tail
 * fails. K > 4: more pieces than are in flight (their scratch slots
 * cycle). Three reduce roots (another node, another local index). */
static void test_pieces(int K)
{
    size_t mib = (size_t)1 << 18;                     /* float32 elements */
    size_t vec = (size_t)(2 * K - 1) * mib + 5;       /* pieces of 2 MiB on 2 ranks a node */
    size_t blk = (size_t)(2 * K - 1) * (mib / 2) + 3; /* pieces of 1 MiB of every block */
    test_reductions(HCOMM_FLOAT32, HCOMM_SUM, vec, blk, 0);
    test_reductions(HCOMM_FLOAT32, HCOMM_AVG, vec, blk, 1);
    test_reductions(HCOMM_INT32, HCOMM_MAX, vec, blk, 0);
    test_moves(HCOMM_FLOAT32, blk, 0);
    test_moves(HCOMM_UINT8, 4 * blk + 1, 1);
}

/* Floats whose sums round: every rank must still hold the same bits (rank 0
 * compares everyone's result, sent over point-to-point). */
static void test_identical(hcomm_dtype_t dt, hcomm_op_t op, size_t count)
{
    size_t es = hcomm_dtype_size(dt), bytes = count * es;
    uint8_t *s = xmalloc(bytes), *r = xmalloc(bytes), *o = xmalloc(bytes);
    char what[160];
    snprintf(what, sizeof(what), "allreduce %s %s count %zu identical on all ranks",
             dtype_names[dt], op_names[op], count);
    for (size_t i = 0; i < count; i++)
        put(dt, s, i,
            (op == HCOMM_PROD ? 1.0 : 100.0) + 0.1 * (double)((i * 7 + (size_t)me * 3) % 11) +
                (double)me / 3.0);
    hcomm_status_t st = hcomm_allreduce(s, r, count, dt, op, world);
    if (!status_ok(K_ALLREDUCE, st, what)) goto out;
    if (me != 0) {
        st = hcomm_send(r, bytes, HCOMM_UINT8, 0, 77, world);
    } else {
        for (int q = 1; q < n && st == HCOMM_OK; q++) {
            st = hcomm_recv(o, bytes, HCOMM_UINT8, q, 77, world);
            if (st == HCOMM_OK && memcmp(o, r, bytes)) {
                char msg[80];
                snprintf(msg, sizeof(msg), "rank %d's result differs from rank 0's", q);
                fail(what, msg);
            }
        }
    }
    if (st != HCOMM_OK) fail(what, hcomm_last_error());
out:
    free(s);
    free(r);
    free(o);
}

/* Two outstanding iallreduces completed in reverse order, then a barrier. */
static void test_nonblocking(void)
{
    enum { C = 4099 };
    int32_t *a = xmalloc(C * 4), *b = xmalloc(C * 4), *ra = xmalloc(C * 4), *rb = xmalloc(C * 4);
    for (int i = 0; i < C; i++) {
        a[i] = me + i;
        b[i] = me * 3 - i;
    }
    hcomm_request_t qa, qb;
    hcomm_status_t st = hcomm_iallreduce(a, ra, C, HCOMM_INT32, HCOMM_SUM, world, &qa);
    if (!status_ok(K_ALLREDUCE, st, "iallreduce #1")) goto out;
    st = hcomm_iallreduce(b, rb, C, HCOMM_INT32, HCOMM_MAX, world, &qb);
    if (!status_ok(K_ALLREDUCE, st, "iallreduce #2")) {
        hcomm_wait(qa);
        goto out;
    }
    st = hcomm_wait(qb);
    if (status_ok(K_ALLREDUCE, st, "wait iallreduce #2"))
        for (int i = 0; i < C; i++)
            if (rb[i] != (n - 1) * 3 - i) {
                fail("iallreduce #2", "wrong MAX");
                break;
            }
    st = hcomm_wait(qa);
    if (status_ok(K_ALLREDUCE, st, "wait iallreduce #1"))
        for (int i = 0; i < C; i++)
            if (ra[i] != n * (n - 1) / 2 + n * i) {
                fail("iallreduce #1", "wrong SUM");
                break;
            }
out:
    status_ok(K_BARRIER, hcomm_barrier(world), "barrier");
    free(a);
    free(b);
    free(ra);
    free(rb);
}

static int bench(size_t bytes)
{
    size_t count = bytes / 4;
    float *s = xmalloc(bytes), *r = xmalloc(bytes);
    for (size_t i = 0; i < count; i++)
        s[i] = (float)(i % 13);
    int iters = 10;
    hcomm_status_t st = hcomm_allreduce(s, r, count, HCOMM_FLOAT32, HCOMM_SUM, world); /* warm */
    double t0 = mp_now();
    for (int k = 0; k < iters && st == HCOMM_OK; k++)
        st = hcomm_allreduce(s, r, count, HCOMM_FLOAT32, HCOMM_SUM, world);
    double dt = (mp_now() - t0) / iters;
    if (st != HCOMM_OK) {
        fprintf(stderr, "rank %d: bench allreduce failed: %s\n", me, hcomm_last_error());
        return 1;
    }
    if (me == 0)
        printf("allreduce f32 %zu bytes on %d ranks (HCOMM_ALGO=%s): %.3f ms, busbw %.2f GB/s\n",
               bytes, n, algo ? algo : "auto", dt * 1e3,
               2.0 * (n - 1) / n * (double)bytes / dt / 1e9);
    free(s);
    free(r);
    return 0;
}

static int die_test(void)
{
    hcomm_status_t st = hcomm_barrier(world);
    /* Rank n-1 leaves once its own barrier is done: a survivor may see it
     * vanish before reading its last barrier message (its bootstrap
     * connection closes first), and then fails the barrier, for the same
     * reason and as promptly as the allreduce below. */
    if (st != HCOMM_OK && !(st == HCOMM_ERR_PEER_FAILED && me != n - 1)) {
        fprintf(stderr, "rank %d: barrier: %s\n", me, hcomm_last_error());
        return 1;
    }
    if (me == n - 1) _exit(0); /* no finalize: the others see the process vanish */
    size_t count = (size_t)1 << 20;
    float *s = xmalloc(count * 4), *r = xmalloc(count * 4);
    memset(s, 0, count * 4);
    double t0 = mp_now();
    st = hcomm_allreduce(s, r, count, HCOMM_FLOAT32, HCOMM_SUM, world);
    /* A survivor may see rank n-1 vanish, or another survivor that gave up
     * first: either way an error that explains itself, well before the
     * timeout, never a hang. */
    double took = mp_now() - t0;
    int ok = st == HCOMM_ERR_PEER_FAILED && hcomm_last_error()[0] && took < 20;
    printf("rank %d: allreduce with a dead peer -> %s after %.2f s (%s): %s\n", me,
           hcomm_strerror(st), took, hcomm_last_error(), ok ? "ok" : "FAIL");
    /* The communicator is now broken: later collectives fail at once. */
    st = hcomm_allreduce(s, r, 1, HCOMM_FLOAT32, HCOMM_SUM, world);
    if (st == HCOMM_OK) {
        printf("rank %d: FAIL: collective after the failure succeeded\n", me);
        ok = 0;
    }
    free(s);
    free(r);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    size_t counts[16] = {1, 7, 1023, 65537};
    int ncounts = 4, big = 0, die = 0;
    size_t bench_bytes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-c") && i + 1 < argc) {
            ncounts = 0;
            for (char *tok = strtok(argv[++i], ","); tok && ncounts < 16; tok = strtok(NULL, ","))
                counts[ncounts++] = strtoull(tok, NULL, 0);
        } else if (!strcmp(argv[i], "--big")) {
            big = 1;
        } else if (!strcmp(argv[i], "--pieces") && i + 1 < argc) {
            pieces = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--die")) {
            die = 1;
        } else if (!strcmp(argv[i], "--bench") && i + 1 < argc) {
            bench_bytes = strtoull(argv[++i], NULL, 0);
        } else {
            fprintf(stderr, "usage: %s [-c n,n,...] [--big] [--pieces K] [--die] [--bench BYTES]\n",
                    argv[0]);
            return 2;
        }
    }
    mp_init();
    world = hcomm_comm_world();
    me = mp_rank;
    n = mp_size;
    algo = getenv("HCOMM_ALGO");
    if (die) {
        int rc = die_test();
        hcomm_finalize();
        return rc;
    }
    if (bench_bytes) {
        int rc = bench(bench_bytes);
        hcomm_finalize();
        return rc;
    }

    if (pieces) {
        test_pieces(pieces);
        ncounts = 0;
    }
    for (int c = 0; c < ncounts; c++)
        for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
            for (int op = 0; op < HCOMM_OP_COUNT; op++)
                for (int ip = 0; ip < 2; ip++)
                    test_reductions(dtypes[d], (hcomm_op_t)op, counts[c], counts[c], ip);
            for (int ip = 0; ip < 2; ip++)
                test_moves(dtypes[d], counts[c], ip);
        }
    if (big) {
        /* Several 1 MiB ring chunks per slice and more units than the window. */
        size_t bc = ((size_t)3 << 20) + 17;
        test_reductions(HCOMM_FLOAT32, HCOMM_SUM, bc, bc, 1);
        test_reductions(HCOMM_FLOAT32, HCOMM_AVG, bc, bc, 0);
        test_moves(HCOMM_FLOAT32, bc / (size_t)n, 0);
        test_moves(HCOMM_UINT8, bc, 1);
    }
    for (int c = 0; c < ncounts; c++) {
        test_identical(HCOMM_FLOAT32, HCOMM_SUM, counts[c]);
        test_identical(HCOMM_FLOAT32, HCOMM_PROD, counts[c]);
        test_identical(HCOMM_BFLOAT16, HCOMM_AVG, counts[c]);
        test_identical(HCOMM_FLOAT64, HCOMM_AVG, counts[c]);
    }
    test_nonblocking();

    printf("rank %d: %d checks, %d failures (HCOMM_ALGO=%s, %d ranks)\n", me, checks, fails,
           algo ? algo : "auto", n);
    hcomm_finalize();
    return fails ? 1 : 0;
}
