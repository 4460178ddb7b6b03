/*
 * The rooted and vector collectives (gather, scatter, allgatherv,
 * reduce_scatterv, alltoallv) for every dtype, blocking and non-blocking
 * (all five in flight at once on one communicator), out of place and in
 * place, with uneven counts, zero counts and gaps between blocks (which must
 * stay untouched), checked element by element. Values are small integers,
 * so that every dtype holds sums of up to 16 ranks exactly (integers wrap
 * as the API says; the expected value is wrapped the same way).
 * Then the errors: NULL arrays, sendcount != recvcounts[rank], alltoallv in
 * place, and counts that disagree between ranks (ERR_TRUNCATED on a rank,
 * never a hang or a partial result taken as good).
 *
 *   mp_coll_vector [--big | --scale N]   (--big: counts up to ~256 Ki
 *       elements, --scale 2048; --scale N: the counts times N)
 */
#include "common/mp_test.h"

#include <stdbool.h>
#ifdef HC_TEST_GPU
#include "gpu/mp_gpu_mirror.h"
#endif

static int me, n;
static size_t scale = 1;

static size_t esz(hcomm_dtype_t d)
{
    return hcomm_dtype_size(d);
}

/* The element of dtype d at index i of buf, set from / read as an integer. */
static void put(hcomm_dtype_t d, void *buf, size_t i, int64_t v)
{
    uint8_t *p = (uint8_t *)buf + i * esz(d);
    switch (d) {
    case HCOMM_INT8: *(int8_t *)p = (int8_t)v; break;
    case HCOMM_UINT8: *(uint8_t *)p = (uint8_t)v; break;
    case HCOMM_INT32: *(int32_t *)p = (int32_t)v; break;
    case HCOMM_UINT32: *(uint32_t *)p = (uint32_t)v; break;
    case HCOMM_INT64: *(int64_t *)p = v; break;
    case HCOMM_UINT64: *(uint64_t *)p = (uint64_t)v; break;
    case HCOMM_FLOAT16: { /* small non-negative integers (< 2048): exact in binary16 */
        uint16_t h = 0;
        if (v > 0) {
            int e = 63 - __builtin_clzll((unsigned long long)v);
            h = (uint16_t)((e + 15) << 10 | (((unsigned long long)v << (10 - e)) & 0x3ff));
        }
        memcpy(p, &h, 2);
        break;
    }
    case HCOMM_BFLOAT16: { /* small integers: exact in the top 16 bits of a float */
        float f = (float)v;
        uint32_t b;
        memcpy(&b, &f, 4);
        uint16_t h = (uint16_t)(b >> 16);
        memcpy(p, &h, 2);
        break;
    }
    case HCOMM_FLOAT32: *(float *)p = (float)v; break;
    case HCOMM_FLOAT64: *(double *)p = (double)v; break;
    default: break;
    }
}

/* v as dtype d holds it (integers wrapped), back as an integer. */
static int64_t get(hcomm_dtype_t d, const void *buf, size_t i)
{
    const uint8_t *p = (const uint8_t *)buf + i * esz(d);
    switch (d) {
    case HCOMM_INT8: return *(const int8_t *)p;
    case HCOMM_UINT8: return *(const uint8_t *)p;
    case HCOMM_INT32: return *(const int32_t *)p;
    case HCOMM_UINT32: return *(const uint32_t *)p;
    case HCOMM_INT64: return *(const int64_t *)p;
    case HCOMM_UINT64: return (int64_t) * (const uint64_t *)p;
    case HCOMM_FLOAT16: { /* normal values and zero: what put() writes and sums give */
        uint16_t h;
        memcpy(&h, p, 2);
        int e = (h >> 10) & 0x1f;
        if (e == 0)
            return 0;
        int64_t m = (h & 0x3ff) | 0x400;
        return e >= 25 ? m << (e - 25) : m >> (25 - e);
    }
    case HCOMM_BFLOAT16: {
        uint16_t h;
        memcpy(&h, p, 2);
        uint32_t b = (uint32_t)h << 16;
        float f;
        memcpy(&f, &b, 4);
        return (int64_t)f;
    }
    case HCOMM_FLOAT32: return (int64_t) * (const float *)p;
    case HCOMM_FLOAT64: return (int64_t) * (const double *)p;
    default: return 0;
    }
}

static int64_t wrapped(hcomm_dtype_t d, int64_t v)
{
    uint8_t tmp[8];
    put(d, tmp, 0, v);
    return get(d, tmp, 0);
}

#define SENTINEL 0x5a
static const char *const dnames[HCOMM_DTYPE_COUNT] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64"};

static int fails;
static void bad(const char *what, hcomm_dtype_t d, int s, size_t i, int64_t got, int64_t want)
{
    if (fails++ < 10)
        mp_fail("%s %s shape %d: element %zu is %lld, expected %lld", what, dnames[d], s, i,
                (long long)got, (long long)want);
}

static int64_t val(int a, int b, size_t i)
{
    return (int64_t)((a * 7 + b * 3 + (int)(i % 1021)) % 16 + 1);
}

/* counts per shape: uneven, some zero */
static size_t cnt(int s, int j)
{
    static const size_t pat[] = {3, 0, 17, 1, 64, 5, 0, 129};
    return pat[(size_t)(j + s) % 8] * scale + (s == 2 ? 1000 * scale : 0);
}

typedef struct {
    void *gs, *gr;          /* gather */
    void *ss, *sr;          /* scatter */
    void *as, *ar;          /* allgatherv */
    void *rs, *rr;          /* reduce_scatterv */
    void *ts, *tr;          /* alltoallv */
    size_t gc, acnt[64], adsp[64], atot, rcnt[64], rtot;
    size_t tsc[64], tsd[64], trc[64], trd[64], tstot, trtot;
    int root;
} bufs_t;

static void setup(bufs_t *b, hcomm_dtype_t d, int s, bool inplace)
{
    size_t es = esz(d);
    memset(b, 0, sizeof(*b));
    b->root = s % n;
    b->gc = cnt(s, 0) + 1;
    /* gather / scatter */
    b->gr = malloc(b->gc * (size_t)n * es + 1);
    memset(b->gr, SENTINEL, b->gc * (size_t)n * es);
    b->gs = inplace && me == b->root ? (uint8_t *)b->gr + (size_t)me * b->gc * es : malloc(b->gc * es + 1);
    for (size_t i = 0; i < b->gc; i++)
        put(d, b->gs, i, val(me, 1, i));
    b->ss = malloc(b->gc * (size_t)n * es + 1);
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < b->gc; i++)
            put(d, b->ss, (size_t)j * b->gc + i, val(j, 2, i));
    b->sr = inplace && me == b->root ? (uint8_t *)b->ss + (size_t)me * b->gc * es : malloc(b->gc * es + 1);
    if (!(inplace && me == b->root))
        memset(b->sr, SENTINEL, b->gc * es);
    /* allgatherv: blocks with 3-element gaps */
    size_t at = 0;
    for (int j = 0; j < n; j++) {
        b->acnt[j] = cnt(s, j);
        b->adsp[j] = at + 3;
        at += b->acnt[j] + 3;
    }
    b->atot = at + 3;
    b->ar = malloc(b->atot * es + 1);
    memset(b->ar, SENTINEL, b->atot * es);
    b->as = inplace ? (uint8_t *)b->ar + b->adsp[me] * es : malloc(b->acnt[me] * es + 1);
    for (size_t i = 0; i < b->acnt[me]; i++)
        put(d, b->as, i, val(me, 3, i));
    /* reduce_scatterv */
    b->rtot = 0;
    for (int j = 0; j < n; j++) {
        b->rcnt[j] = cnt(s + 1, j);
        b->rtot += b->rcnt[j];
    }
    b->rs = malloc(b->rtot * es + 1);
    for (size_t i = 0; i < b->rtot; i++)
        put(d, b->rs, i, val(me, 4, i));
    size_t off = 0;
    for (int j = 0; j < me; j++)
        off += b->rcnt[j];
    b->rr = inplace ? (uint8_t *)b->rs + off * es : malloc(b->rcnt[me] * es + 1);
    /* alltoallv: rank a sends (a + 2b + s) % 5 * k elements to rank b */
    size_t k = scale * 3, sat = 0, rat = 0;
    for (int j = 0; j < n; j++) {
        b->tsc[j] = (size_t)((me + 2 * j + s) % 5) * k;
        b->trc[j] = (size_t)((j + 2 * me + s) % 5) * k;
        b->tsd[j] = sat;
        b->trd[j] = rat + 1; /* a gap of one element before each block */
        sat += b->tsc[j];
        rat += b->trc[j] + 1;
    }
    b->tstot = sat;
    b->trtot = rat + 1;
    b->ts = malloc(b->tstot * es + 1);
    b->tr = malloc(b->trtot * es + 1);
    memset(b->tr, SENTINEL, b->trtot * es);
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < b->tsc[j]; i++)
            put(d, b->ts, b->tsd[j] + i, val(me * 5 + j, 5, i));
}

static void teardown(bufs_t *b, bool inplace)
{
    bool r = me == b->root;
    free(b->gr);
    if (!(inplace && r)) free(b->gs);
    free(b->ss);
    if (!(inplace && r)) free(b->sr);
    free(b->ar);
    if (!inplace) free(b->as);
    free(b->rs);
    if (!inplace) free(b->rr);
    free(b->ts);
    free(b->tr);
}

static void check(bufs_t *b, hcomm_dtype_t d, int s, hcomm_op_t rop)
{
    size_t es = esz(d);
    uint8_t sent[8];
    memset(sent, SENTINEL, sizeof(sent));
    if (me == b->root)
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < b->gc; i++) {
                int64_t got = get(d, b->gr, (size_t)j * b->gc + i), want = wrapped(d, val(j, 1, i));
                if (got != want) bad("gather", d, s, (size_t)j * b->gc + i, got, want);
            }
    for (size_t i = 0; i < b->gc; i++) {
        int64_t got = get(d, b->sr, i), want = wrapped(d, val(me, 2, i));
        if (got != want) bad("scatter", d, s, i, got, want);
    }
    for (int j = 0; j < n; j++) {
        for (size_t i = 0; i < b->acnt[j]; i++) {
            int64_t got = get(d, b->ar, b->adsp[j] + i), want = wrapped(d, val(j, 3, i));
            if (got != want) bad("allgatherv", d, s, b->adsp[j] + i, got, want);
        }
        for (size_t g = b->adsp[j] - 3; g < b->adsp[j]; g++)
            if (memcmp((uint8_t *)b->ar + g * es, sent, es))
                bad("allgatherv gap", d, s, g, get(d, b->ar, g), -1);
    }
    size_t off = 0;
    for (int j = 0; j < me; j++)
        off += b->rcnt[j];
    for (size_t i = 0; i < b->rcnt[me]; i++) {
        int64_t want = rop == HCOMM_MAX ? 0 : 0;
        for (int r = 0; r < n; r++) {
            int64_t v = val(r, 4, off + i);
            want = rop == HCOMM_MAX ? (v > want ? v : want) : want + v;
        }
        want = wrapped(d, want);
        int64_t got = get(d, b->rr, i);
        if (got != want) bad(rop == HCOMM_MAX ? "reduce_scatterv max" : "reduce_scatterv sum", d, s, i, got, want);
    }
    for (int j = 0; j < n; j++) {
        for (size_t i = 0; i < b->trc[j]; i++) {
            int64_t got = get(d, b->tr, b->trd[j] + i), want = wrapped(d, val(j * 5 + me, 5, i));
            if (got != want) bad("alltoallv", d, s, b->trd[j] + i, got, want);
        }
        if (memcmp((uint8_t *)b->tr + (b->trd[j] - 1) * es, sent, es))
            bad("alltoallv gap", d, s, b->trd[j] - 1, get(d, b->tr, b->trd[j] - 1), -1);
    }
}

#ifdef HC_TEST_GPU /* mp_gpu_vector: --device (tests/gpu/mp_gpu_mirror.h) */
static void *mir(void *p, size_t bytes, int recv)
{
    return gpu_mirror(p, bytes, gpu_dev_side(recv));
}

/* inner lies in host outer ho; its place in outer's mirror o */
static void *inner(void *o, void *ho, void *in)
{
    return (uint8_t *)o + ((uint8_t *)in - (uint8_t *)ho);
}

/* b's buffers replaced by their mirrors (h: the host ones); in place, the
 * inner buffer is a part of its outer one's mirror. */
static void gpu_mirror_bufs(bufs_t *b, const bufs_t *h, size_t es, bool inplace, bool back)
{
    size_t nn = (size_t)n;
    bool ipr = inplace && me == b->root;
    struct {
        void **dev, *host;
        size_t bytes;
        int recv;
        void *outer_host, **outer_dev;
    } m[] = {
        {&b->gr, h->gr, b->gc * nn * es + 1, 1, NULL, NULL},
        {&b->gs, h->gs, b->gc * es + 1, 0, ipr ? h->gr : NULL, &b->gr},
        {&b->ss, h->ss, b->gc * nn * es + 1, 0, NULL, NULL},
        {&b->sr, h->sr, b->gc * es + 1, 1, ipr ? h->ss : NULL, &b->ss},
        {&b->ar, h->ar, b->atot * es + 1, 1, NULL, NULL},
        {&b->as, h->as, b->acnt[me] * es + 1, 0, inplace ? h->ar : NULL, &b->ar},
        {&b->rs, h->rs, b->rtot * es + 1, 0, NULL, NULL},
        {&b->rr, h->rr, b->rcnt[me] * es + 1, 1, inplace ? h->rs : NULL, &b->rs},
        {&b->ts, h->ts, b->tstot * es + 1, 0, NULL, NULL},
        {&b->tr, h->tr, b->trtot * es + 1, 1, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        if (back) {
            if (!m[i].outer_host) gpu_unmirror(m[i].host, *m[i].dev, m[i].bytes);
            *m[i].dev = m[i].host;
        } else {
            *m[i].dev = m[i].outer_host ? inner(*m[i].outer_dev, m[i].outer_host, m[i].host)
                                        : mir(m[i].host, m[i].bytes, m[i].recv);
        }
    }
}
#endif

static void run(hcomm_comm_t w, hcomm_dtype_t d, int s, bool nb, bool inplace, hcomm_op_t rop)
{
    bufs_t b;
    setup(&b, d, s, inplace);
#ifdef HC_TEST_GPU
    bufs_t h = b;
    if (g_dev) gpu_mirror_bufs(&b, &h, esz(d), inplace, false);
#endif
    if (!nb) {
        MP_OK(hcomm_gather(b.gs, b.gr, b.gc, d, b.root, w));
        MP_OK(hcomm_scatter(b.ss, b.sr, b.gc, d, b.root, w));
        MP_OK(hcomm_allgatherv(b.as, b.acnt[me], b.ar, b.acnt, b.adsp, d, w));
        MP_OK(hcomm_reduce_scatterv(b.rs, b.rr, b.rcnt, d, rop, w));
        MP_OK(hcomm_alltoallv(b.ts, b.tsc, b.tsd, b.tr, b.trc, b.trd, d, w));
    } else {
        hcomm_request_t r[5];
        size_t acnt[64], adsp[64];
        memcpy(acnt, b.acnt, sizeof(acnt));
        memcpy(adsp, b.adsp, sizeof(adsp));
        MP_OK(hcomm_igather(b.gs, b.gr, b.gc, d, b.root, w, &r[0]));
        MP_OK(hcomm_iscatter(b.ss, b.sr, b.gc, d, b.root, w, &r[1]));
        MP_OK(hcomm_iallgatherv(b.as, acnt[me], b.ar, acnt, adsp, d, w, &r[2]));
        /* the arrays were copied: scribbling on them now must not matter */
        memset(acnt, 0xff, sizeof(acnt));
        memset(adsp, 0xff, sizeof(adsp));
        MP_OK(hcomm_ireduce_scatterv(b.rs, b.rr, b.rcnt, d, rop, w, &r[3]));
        MP_OK(hcomm_ialltoallv(b.ts, b.tsc, b.tsd, b.tr, b.trc, b.trd, d, w, &r[4]));
        for (int k = 4; k >= 0; k--) /* waited in another order than posted */
            MP_OK(hcomm_wait(r[k]));
    }
#ifdef HC_TEST_GPU
    if (g_dev) gpu_mirror_bufs(&b, &h, esz(d), inplace, true);
#endif
    check(&b, d, s, rop);
    teardown(&b, inplace);
}

static void errors(hcomm_comm_t w)
{
    size_t c[64] = {0}, dsp[64] = {0};
    static float x[64], y[64 * 64];
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_allgatherv(x, 1, y, NULL, dsp, HCOMM_FLOAT32, w));
    mp_expect_msg("allgatherv NULL recvcounts", "hcomm_allgatherv", "recvcounts is NULL", NULL);
    for (int j = 0; j < n; j++) c[j] = 2;
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_allgatherv(x, 1, y, c, dsp, HCOMM_FLOAT32, w));
    mp_expect_msg("allgatherv sendcount", "sendcount 1 differs from recvcounts", NULL);
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_alltoallv(y, c, dsp, y, c, dsp, HCOMM_FLOAT32, w));
    mp_expect_msg("alltoallv in place", "hcomm_alltoallv", "not done in place", NULL);
    size_t c2[64];
    memcpy(c2, c, sizeof(c2));
    c2[me] = 3; /* sends itself 3, expects 2 */
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_alltoallv(x, c2, dsp, y, c, dsp, HCOMM_FLOAT32, w));
    mp_expect_msg("alltoallv own block", "sendcounts[", "recvcounts[", NULL);
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_reduce_scatterv(x, y, c, HCOMM_FLOAT32, (hcomm_op_t)99, w));
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_gather(x, y, 1, HCOMM_FLOAT32, n, w));
    mp_expect_msg("gather root", "hcomm_gather", "root", NULL);
    c[0] = SIZE_MAX / 2;
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_reduce_scatterv(x, y, c, HCOMM_FLOAT32, HCOMM_SUM, w));
    mp_expect_msg("reduce_scatterv overflow", "recvcounts[0]", "overflows", NULL);
    /* counts that disagree (on a fresh communicator: a mismatch breaks it) */
    if (n < 2)
        return;
    hcomm_comm_t sub;
    MP_OK(hcomm_comm_split(w, 0, me, &sub));
    size_t sc[64], sd[64], rc[64], rd[64];
    for (int j = 0; j < n; j++) {
        sc[j] = rc[j] = 4;
        sd[j] = rd[j] = (size_t)j * 8;
    }
    if (me == n - 1)
        sc[0] = 6; /* rank 0 expects 4 from the last rank */
    hcomm_status_t st = hcomm_alltoallv(y, sc, sd, y + 1024, rc, rd, HCOMM_FLOAT32, sub);
    int mine = st != HCOMM_OK, any;
    MP_OK(hcomm_allreduce(&mine, &any, 1, HCOMM_INT32, HCOMM_MAX, w));
    if (!any)
        mp_fail("alltoallv with disagreeing counts succeeded on every rank");
    if (me == 0 && st != HCOMM_ERR_TRUNCATED)
        mp_fail("alltoallv mismatch: rank 0 (which receives 6 for 4) got %s: %s", mp_status_name(st),
                hcomm_last_error());
    hcomm_comm_free(sub);
}

int main(int argc, char **argv)
{
    MP_OK(hcomm_init(&argc, &argv));
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--big"))
            scale = 2048;
        else if (!strcmp(argv[i], "--scale") && i + 1 < argc)
            scale = (size_t)atoi(argv[++i]);
#ifdef HC_TEST_GPU
        else if (!strcmp(argv[i], "--device") && i + 1 < argc && !gpu_dev_mode(argv[i + 1]))
            i++;
#endif
    hcomm_comm_t w = hcomm_comm_world();
    me = hcomm_comm_rank(w);
    n = hcomm_comm_size(w);
    mp_rank = me;
    if (n > 64) {
        fprintf(stderr, "mp_coll_vector: at most 64 ranks\n");
        return 2;
    }
    for (int d = 0; d < HCOMM_DTYPE_COUNT; d++)
        for (int s = 0; s < 3; s++)
            for (int v = 0; v < 4; v++)
                run(w, (hcomm_dtype_t)d, s, v & 1, v & 2, (d + s + v) % 2 ? HCOMM_MAX : HCOMM_SUM);
    errors(w);
    MP_OK(hcomm_barrier(w));
    MP_OK(hcomm_finalize());
    if (me == 0 && !mp_failures && !fails)
        printf("mp_coll_vector: %d ranks, every dtype, all checks passed\n", n);
    return mp_failures || fails ? 1 : 0;
}
