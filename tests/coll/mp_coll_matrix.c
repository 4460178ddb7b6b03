/*
 * Every collective x every dtype x every op x a list of counts x in-place /
 * out-of-place, checked element by element against a reference that every
 * rank computes locally from the inputs all ranks generate deterministically.
 *
 * Inputs are chosen so that the exact result does not depend on the order in
 * which the library combines ranks, and can be stated exactly:
 *   integers: full-range random values (plus the type's extremes for max/min
 *     and small factors for prod); sums and products wrap (mod 2^bits), avg is
 *     the truncating division of the wrapped sum (hcomm.h);
 *   floats: sum: small integers; prod: +-1, +-2, +-0.5; max/min: any finite
 *     value of the type (subnormals included); avg: values whose sum is a
 *     multiple of the rank count, so the quotient is exact.
 * Moves without arithmetic (broadcast, allgather, alltoall) carry random
 * bytes and are compared bytewise. Out of place, the send buffer must come
 * back unchanged; every receive buffer has guard bytes that must stay intact.
 *
 *   mp_coll_matrix [--counts 0,1,7,...] [--colls allreduce,reduce,...]
 *                  [--dtypes int8,...] [--ops sum,...] [--pool] [--groups]
 *   --pool: every buffer comes from hcomm_mem_alloc (the zero-copy paths)
 *   --groups: the allreduces (with a broadcast and a reduce among them)
 *     posted inside hcomm_group_start/end instead of one by one
 */
#include "common/mp_test.h"

#include <math.h>
#ifdef HC_TEST_GPU /* mp_gpu_matrix: --device (tests/gpu/mp_gpu_mirror.h) */
#include "gpu/mp_gpu_mirror.h"
#endif

enum { C_ALLREDUCE, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_ALLTOALL, C_NCOLL };
static const char *const coll_names[C_NCOLL] = {"allreduce", "broadcast",      "reduce",
                                                "allgather", "reduce_scatter", "alltoall"};
static const char *const dtype_names[HCOMM_DTYPE_COUNT] = {
    "int8",   "uint8",   "int32",    "uint32",  "int64",
    "uint64", "float16", "bfloat16", "float32", "float64"};
static const char *const op_names[HCOMM_OP_COUNT] = {"sum", "prod", "max", "min", "avg"};

#define GUARD 64
#define GUARD_BYTE 0xcd

/* ---- fp16 / bf16 ----------------------------------------------------------- */

static float bits_to_float(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint32_t float_to_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static double half_to_double(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v;
    if (exp == 0)
        v = ldexp(man, -24); /* subnormal */
    else if (exp == 31)
        v = man ? NAN : INFINITY;
    else
        v = ldexp(man | 0x400, exp - 25);
    return sign ? -v : v;
}

/* Round to nearest even; only used on values that are exact halves here,
 * but written in full so a wrong input is still converted correctly. */
static uint16_t double_to_half(double d)
{
    uint16_t sign = signbit(d) ? 0x8000 : 0;
    double a = fabs(d);
    if (isnan(d)) return 0x7e00;
    if (a >= 65520.0) return sign | 0x7c00;
    if (a < ldexp(1, -14)) { /* subnormal: multiples of 2^-24 */
        double m = nearbyint(ldexp(a, 24));
        return sign | (uint16_t)m; /* m == 1024 rolls into the smallest normal */
    }
    int e;
    double fr = frexp(a, &e);            /* a = fr * 2^e, fr in [0.5, 1) */
    double m = nearbyint(ldexp(fr, 11)); /* 11 significant bits */
    if (m == 2048) {
        m = 1024;
        e++;
    }
    int exp = e - 1 + 15;
    if (exp >= 31) return sign | 0x7c00;
    return sign | (uint16_t)(exp << 10) | (uint16_t)((int)m & 0x3ff);
}

static double bf16_to_double(uint16_t b)
{
    return bits_to_float((uint32_t)b << 16);
}

static uint16_t double_to_bf16(double d)
{
    uint32_t b = float_to_bits((float)d);
    if ((b & 0x7fffffff) > 0x7f800000) return 0x7fc0;
    b += 0x7fff + ((b >> 16) & 1);
    return (uint16_t)(b >> 16);
}

/* ---- values ------------------------------------------------------------------ */

typedef union {
    uint64_t u; /* integers: sign- or zero-extended from the type's width */
    double f;   /* floats */
} wide_t;

static int is_float(hcomm_dtype_t d)
{
    return d >= HCOMM_FLOAT16;
}

static int is_signed_int(hcomm_dtype_t d)
{
    return d == HCOMM_INT8 || d == HCOMM_INT32 || d == HCOMM_INT64;
}

static uint64_t trunc_int(hcomm_dtype_t d, uint64_t v)
{
    switch (d) {
    case HCOMM_INT8:
        return (uint64_t)(int64_t)(int8_t)(uint8_t)v;
    case HCOMM_UINT8:
        return (uint8_t)v;
    case HCOMM_INT32:
        return (uint64_t)(int64_t)(int32_t)(uint32_t)v;
    case HCOMM_UINT32:
        return (uint32_t)v;
    default:
        return v;
    }
}

static void store(hcomm_dtype_t d, void *buf, size_t i, wide_t v)
{
    switch (d) {
    case HCOMM_INT8:
    case HCOMM_UINT8:
        ((uint8_t *)buf)[i] = (uint8_t)v.u;
        break;
    case HCOMM_INT32:
    case HCOMM_UINT32:
        ((uint32_t *)buf)[i] = (uint32_t)v.u;
        break;
    case HCOMM_INT64:
    case HCOMM_UINT64:
        ((uint64_t *)buf)[i] = v.u;
        break;
    case HCOMM_FLOAT16:
        ((uint16_t *)buf)[i] = double_to_half(v.f);
        break;
    case HCOMM_BFLOAT16:
        ((uint16_t *)buf)[i] = double_to_bf16(v.f);
        break;
    case HCOMM_FLOAT32:
        ((float *)buf)[i] = (float)v.f;
        break;
    default:
        ((double *)buf)[i] = v.f;
        break;
    }
}

static wide_t load(hcomm_dtype_t d, const void *buf, size_t i)
{
    wide_t v;
    switch (d) {
    case HCOMM_INT8:
    case HCOMM_UINT8:
        v.u = trunc_int(d, ((const uint8_t *)buf)[i]);
        break;
    case HCOMM_INT32:
    case HCOMM_UINT32:
        v.u = trunc_int(d, ((const uint32_t *)buf)[i]);
        break;
    case HCOMM_INT64:
    case HCOMM_UINT64:
        v.u = ((const uint64_t *)buf)[i];
        break;
    case HCOMM_FLOAT16:
        v.f = half_to_double(((const uint16_t *)buf)[i]);
        break;
    case HCOMM_BFLOAT16:
        v.f = bf16_to_double(((const uint16_t *)buf)[i]);
        break;
    case HCOMM_FLOAT32:
        v.f = ((const float *)buf)[i];
        break;
    default:
        v.f = ((const double *)buf)[i];
        break;
    }
    return v;
}

/* A random finite value of a float type (its bit pattern's value). */
static double random_finite(hcomm_dtype_t d, uint64_t h)
{
    switch (d) {
    case HCOMM_FLOAT16: {
        uint16_t b = (uint16_t)h;
        if (((b >> 10) & 0x1f) == 0x1f) b &= (uint16_t)~0x4000;
        return half_to_double(b);
    }
    case HCOMM_BFLOAT16: {
        uint16_t b = (uint16_t)h;
        if (((b >> 7) & 0xff) == 0xff) b &= (uint16_t)~0x4000;
        return bf16_to_double(b);
    }
    case HCOMM_FLOAT32: {
        uint32_t b = (uint32_t)h;
        if (((b >> 23) & 0xff) == 0xff) b &= ~0x40000000u;
        return bits_to_float(b);
    }
    default: {
        uint64_t b = h;
        if (((b >> 52) & 0x7ff) == 0x7ff) b &= ~0x4000000000000000ull;
        double f;
        memcpy(&f, &b, 8);
        return f;
    }
    }
}

static uint64_t int_min(hcomm_dtype_t d)
{
    switch (d) {
    case HCOMM_INT8:
        return trunc_int(d, 0x80);
    case HCOMM_INT32:
        return trunc_int(d, 0x80000000u);
    case HCOMM_INT64:
        return 0x8000000000000000ull;
    default:
        return 0;
    }
}

static uint64_t int_max(hcomm_dtype_t d)
{
    switch (d) {
    case HCOMM_INT8:
        return 0x7f;
    case HCOMM_UINT8:
        return 0xff;
    case HCOMM_INT32:
        return 0x7fffffff;
    case HCOMM_UINT32:
        return 0xffffffffu;
    case HCOMM_INT64:
        return 0x7fffffffffffffffull;
    default:
        return ~0ull;
    }
}

static int g_n; /* ranks */

/* The input of rank r at element idx of a reduction. */
static wide_t gen(hcomm_dtype_t d, hcomm_op_t op, uint64_t salt, int r, size_t idx)
{
    uint64_t h = mp_hash(salt * 1000003u + (uint64_t)r * 0x100000001b3ull + idx);
    wide_t v;
    if (!is_float(d)) {
        if (op == HCOMM_PROD && (h & 1)) {
            static const int64_t small[] = {-1, 1, 2, 3, 1, 1, -2, 1};
            v.u = trunc_int(d, (uint64_t)small[(h >> 1) % 8]);
        } else if ((op == HCOMM_MAX || op == HCOMM_MIN) && (h >> 3) % 8 == 0) {
            v.u = (h >> 6) & 1 ? int_max(d) : int_min(d);
        } else {
            v.u = trunc_int(d, h >> 7 | h << 57);
        }
        return v;
    }
    switch (op) {
    case HCOMM_SUM:
        v.f = (double)((int)(h % 9) - 4);
        break;
    case HCOMM_PROD: {
        static const double f[] = {1, 1, 1, 2, -1, 0.5, -2, 1, -0.5, 1};
        v.f = f[h % 10];
        break;
    }
    case HCOMM_AVG: { /* k + t*c_r with sum over r of c_r == 0 */
        uint64_t g = mp_hash(salt * 1000003u + idx + 0x5555);
        int k = (int)(g % 9) - 4, t = (int)((g >> 8) % 3) - 1;
        v.f = (double)(k + t * (r == 0 ? -(g_n - 1) : 1));
        break;
    }
    default:
        v.f = random_finite(d, h);
        break;
    }
    return v;
}

static wide_t combine(hcomm_dtype_t d, hcomm_op_t op, wide_t a, wide_t b)
{
    wide_t v;
    if (!is_float(d)) {
        int lt = is_signed_int(d) ? (int64_t)a.u < (int64_t)b.u : a.u < b.u;
        switch (op) {
        case HCOMM_PROD:
            v.u = trunc_int(d, a.u * b.u);
            break;
        case HCOMM_MAX:
            v.u = lt ? b.u : a.u;
            break;
        case HCOMM_MIN:
            v.u = lt ? a.u : b.u;
            break;
        default: /* sum, avg */
            v.u = trunc_int(d, a.u + b.u);
            break;
        }
        return v;
    }
    switch (op) {
    case HCOMM_PROD:
        v.f = a.f * b.f;
        break;
    case HCOMM_MAX:
        v.f = a.f < b.f ? b.f : a.f;
        break;
    case HCOMM_MIN:
        v.f = a.f < b.f ? a.f : b.f;
        break;
    default:
        v.f = a.f + b.f;
        break;
    }
    return v;
}

static wide_t reference(hcomm_dtype_t d, hcomm_op_t op, uint64_t salt, size_t idx)
{
    wide_t acc = gen(d, op, salt, 0, idx);
    for (int r = 1; r < g_n; r++)
        acc = combine(d, op, acc, gen(d, op, salt, r, idx));
    if (op == HCOMM_AVG) {
        if (is_float(d))
            acc.f /= g_n;
        else if (is_signed_int(d))
            acc.u = trunc_int(d, (uint64_t)((int64_t)acc.u / g_n));
        else
            acc.u = acc.u / (uint64_t)g_n;
    }
    return acc;
}

static int equal(hcomm_dtype_t d, wide_t a, wide_t b)
{
    return is_float(d) ? a.f == b.f : a.u == b.u;
}

static void format(hcomm_dtype_t d, wide_t v, char *out, size_t cap)
{
    if (is_float(d))
        snprintf(out, cap, "%.17g", v.f);
    else if (is_signed_int(d))
        snprintf(out, cap, "%lld", (long long)(int64_t)v.u);
    else
        snprintf(out, cap, "%llu", (unsigned long long)v.u);
}

static uint8_t raw_byte(uint64_t salt, int r, size_t byte)
{
    return (uint8_t)(mp_hash(salt * 1000003u + (uint64_t)r * 0x100000001b3ull + byte / 8) >>
                     (8 * (byte % 8)));
}

/* ---- one call ----------------------------------------------------------------- */

typedef struct {
    int coll;
    hcomm_dtype_t d;
    hcomm_op_t op;
    size_t count;
    int inplace;
    int root;
    uint64_t salt;
} case_t;

static int g_reported;

static void describe(const case_t *c, char *out, size_t cap)
{
    snprintf(out, cap, "%s %s%s%s count %zu %s root %d", coll_names[c->coll], dtype_names[c->d],
             c->coll == C_ALLREDUCE || c->coll == C_REDUCE || c->coll == C_REDUCE_SCATTER ? " "
                                                                                          : "",
             c->coll == C_ALLREDUCE || c->coll == C_REDUCE || c->coll == C_REDUCE_SCATTER
                 ? op_names[c->op]
                 : "",
             c->count, c->inplace ? "in-place" : "out-of-place", c->root);
}

static void fail_case(const case_t *c, const char *fmt, ...)
{
    mp_failures++;
    if (++g_reported > 30) return; /* counted, not printed */
    char what[160], msg[512];
    describe(c, what, sizeof(what));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: %s: %s\n", mp_rank, what, msg);
}

/* Checks `count` elements of buf against the reduction of element base+i. */
static void check_reduced(const case_t *c, const void *buf, size_t base)
{
    size_t bad = 0, first = 0;
    wide_t want1 = {0}, got1 = {0};
    for (size_t i = 0; i < c->count; i++) {
        wide_t want = reference(c->d, c->op, c->salt, base + i), got = load(c->d, buf, i);
        if (!equal(c->d, want, got)) {
            if (!bad++) {
                first = i;
                want1 = want;
                got1 = got;
            }
        }
    }
    if (bad) {
        char a[64], b[64];
        format(c->d, want1, a, sizeof(a));
        format(c->d, got1, b, sizeof(b));
        fail_case(c, "element %zu expected %s got %s (%zu of %zu elements wrong)", first, a, b, bad,
                  c->count);
    }
}

/* Bytes [0, n) of buf must equal raw bytes [off, off+n) of rank r's data. */
static void check_raw(const case_t *c, const uint8_t *buf, size_t n, int r, size_t off,
                      const char *what)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t w = raw_byte(c->salt, r, off + i);
        if (buf[i] != w) {
            size_t bad = 0;
            for (size_t k = i; k < n; k++)
                bad += buf[k] != raw_byte(c->salt, r, off + k);
            fail_case(c,
                      "%s: byte %zu (element %zu) of rank %d's data expected 0x%02x got "
                      "0x%02x (%zu bytes wrong)",
                      what, i, i / hcomm_dtype_size(c->d), r, w, buf[i], bad);
            return;
        }
    }
}

static void check_guard(const case_t *c, const uint8_t *end, const char *what)
{
    for (size_t i = 0; i < GUARD; i++)
        if (end[i] != GUARD_BYTE) {
            fail_case(c, "%s: guard byte %zu past the end expected 0x%02x got 0x%02x (overrun)",
                      what, i, GUARD_BYTE, end[i]);
            return;
        }
}

static int g_pool; /* --pool: buffers from hcomm_mem_alloc (zero-copy paths) */

static void *alloc_buf(size_t bytes, int fill)
{
    uint8_t *p;
    if (g_pool)
        MP_OK(hcomm_mem_alloc(bytes + GUARD, (void **)&p));
    else
        p = mp_xmalloc(bytes + GUARD);
    memset(p, fill, bytes);
    memset(p + bytes, GUARD_BYTE, GUARD);
    return p;
}

/* One call's buffers, from prepare to check. */
typedef struct {
    case_t c;
    uint8_t *sb, *rb, *copy;
    uint8_t *dsb, *drb; /* --device: their device mirrors */
    size_t sbytes, rbytes;
    hcomm_request_t req;
} call_t;

static void call_prepare(call_t *k)
{
    const case_t *c = &k->c;
    const int n = g_n, me = mp_rank;
    const size_t es = hcomm_dtype_size(c->d), cnt = c->count, blk = cnt * es;
    hcomm_dtype_t d = c->d;
    hcomm_op_t op = c->op;
    uint8_t *sb = NULL, *rb = NULL;
    size_t sbytes = 0, rbytes = 0;

    switch (c->coll) {
    case C_ALLREDUCE:
    case C_REDUCE:
        sbytes = rbytes = blk;
        sb = alloc_buf(sbytes, 0);
        for (size_t i = 0; i < cnt; i++)
            store(d, sb, i, gen(d, op, c->salt, me, i));
        if (!c->inplace) {
            int want_recv = c->coll == C_ALLREDUCE || me == c->root;
            rb = want_recv ? alloc_buf(rbytes, 0xa5) : NULL;
        }
        break;
    case C_REDUCE_SCATTER:
        sbytes = blk * (size_t)n;
        rbytes = blk;
        sb = alloc_buf(sbytes, 0);
        for (size_t i = 0; i < cnt * (size_t)n; i++)
            store(d, sb, i, gen(d, op, c->salt, me, i));
        if (!c->inplace) rb = alloc_buf(rbytes, 0xa5);
        break;
    case C_BROADCAST:
        rbytes = blk;
        rb = alloc_buf(rbytes, 0xa5);
        if (me == c->root)
            for (size_t i = 0; i < blk; i++)
                rb[i] = raw_byte(c->salt, me, i);
        break;
    case C_ALLGATHER:
        sbytes = blk;
        rbytes = blk * (size_t)n;
        rb = alloc_buf(rbytes, 0xa5);
        if (c->inplace) {
            for (size_t i = 0; i < blk; i++)
                rb[(size_t)me * blk + i] = raw_byte(c->salt, me, i);
        } else {
            sb = alloc_buf(sbytes, 0);
            for (size_t i = 0; i < blk; i++)
                sb[i] = raw_byte(c->salt, me, i);
        }
        break;
    case C_ALLTOALL:
        sbytes = rbytes = blk * (size_t)n;
        sb = alloc_buf(sbytes, 0);
        for (size_t i = 0; i < sbytes; i++)
            sb[i] = raw_byte(c->salt, me, i);
        if (!c->inplace) rb = alloc_buf(rbytes, 0xa5);
        break;
    }
    k->copy = NULL;
    if (sb && !c->inplace) {
        k->copy = mp_xmalloc(sbytes);
        memcpy(k->copy, sb, sbytes);
    }
    k->sb = sb;
    k->rb = rb;
    k->sbytes = sbytes;
    k->rbytes = rbytes;
    k->req = NULL;
}

/* Posts the call: blocking when req_p is NULL, else non-blocking. */
static hcomm_status_t call_post(call_t *k, hcomm_comm_t w, hcomm_request_t *req_p)
{
    const case_t *c = &k->c;
    const size_t cnt = c->count, blk = cnt * hcomm_dtype_size(c->d);
    uint8_t *sb = k->sb, *rb = k->rb;
    hcomm_dtype_t d = c->d;
    hcomm_op_t op = c->op;
    const int me = mp_rank;
#ifdef HC_TEST_GPU
    if (g_dev) { /* in place: the one buffer follows the receive side */
        sb = k->dsb = gpu_mirror(sb, k->sbytes + GUARD, gpu_dev_side(!c->inplace ? 0 : 1));
        rb = k->drb = gpu_mirror(rb, k->rbytes + GUARD, gpu_dev_side(1));
    }
#endif
    switch (c->coll) {
    case C_ALLREDUCE:
        return req_p ? hcomm_iallreduce(sb, c->inplace ? sb : rb, cnt, d, op, w, req_p)
                     : hcomm_allreduce(sb, c->inplace ? sb : rb, cnt, d, op, w);
    case C_REDUCE:
        return req_p ? hcomm_ireduce(sb, c->inplace ? sb : rb, cnt, d, op, c->root, w, req_p)
                     : hcomm_reduce(sb, c->inplace ? sb : rb, cnt, d, op, c->root, w);
    case C_REDUCE_SCATTER: {
        void *out = c->inplace ? sb + (size_t)me * blk : rb;
        return req_p ? hcomm_ireduce_scatter(sb, out, cnt, d, op, w, req_p)
                     : hcomm_reduce_scatter(sb, out, cnt, d, op, w);
    }
    case C_BROADCAST:
        return req_p ? hcomm_ibroadcast(rb, cnt, d, c->root, w, req_p)
                     : hcomm_broadcast(rb, cnt, d, c->root, w);
    case C_ALLGATHER: {
        const void *in = c->inplace ? rb + (size_t)me * blk : sb;
        return req_p ? hcomm_iallgather(in, rb, cnt, d, w, req_p)
                     : hcomm_allgather(in, rb, cnt, d, w);
    }
    case C_ALLTOALL:
        return req_p ? hcomm_ialltoall(sb, c->inplace ? sb : rb, cnt, d, w, req_p)
                     : hcomm_alltoall(sb, c->inplace ? sb : rb, cnt, d, w);
    }
    return HCOMM_ERR_INVALID;
}

static void call_status(const call_t *k, hcomm_status_t st, const char *how)
{
    if (st == HCOMM_OK) return;
    char what[160];
    describe(&k->c, what, sizeof(what));
    mp_fail("%s%s: expected OK got %s (%s)", what, how, mp_status_name(st), hcomm_last_error());
    exit(1);
}

/* Checks the results and guards, then frees the buffers. */
static void call_check(call_t *k)
{
    const case_t *c = &k->c;
    const int n = g_n, me = mp_rank;
    const size_t blk = c->count * hcomm_dtype_size(c->d);
    uint8_t *sb = k->sb, *rb = k->rb;
#ifdef HC_TEST_GPU
    gpu_unmirror(sb, k->dsb, k->sbytes + GUARD);
    gpu_unmirror(rb, k->drb, k->rbytes + GUARD);
#endif
    const uint8_t *res =
        c->inplace ? (c->coll == C_BROADCAST || c->coll == C_ALLGATHER ? rb : sb) : rb;
    switch (c->coll) {
    case C_ALLREDUCE:
        check_reduced(c, res, 0);
        break;
    case C_REDUCE:
        if (me == c->root) check_reduced(c, res, 0);
        break;
    case C_REDUCE_SCATTER:
        check_reduced(c, c->inplace ? sb + (size_t)me * blk : rb, (size_t)me * c->count);
        break;
    case C_BROADCAST:
        check_raw(c, rb, blk, c->root, 0, "broadcast data");
        break;
    case C_ALLGATHER:
        for (int r = 0; r < n; r++)
            check_raw(c, rb + (size_t)r * blk, blk, r, 0, "block of a rank");
        break;
    case C_ALLTOALL:
        for (int r = 0; r < n; r++)
            check_raw(c, res + (size_t)r * blk, blk, r, (size_t)me * blk, "block from a rank");
        break;
    }
    if (k->copy && memcmp(k->copy, sb, k->sbytes))
        fail_case(c, "send buffer expected unchanged out of place got modified");
    if (sb) check_guard(c, sb + k->sbytes, "send buffer");
    if (rb) check_guard(c, rb + k->rbytes, "receive buffer");
    if (g_pool) {
        MP_OK(hcomm_mem_free(sb));
        MP_OK(hcomm_mem_free(rb));
    } else {
        free(sb);
        free(rb);
    }
    free(k->copy);
}

static void run_case(const case_t *c, hcomm_comm_t w)
{
    call_t k = {.c = *c};
    call_prepare(&k);
    call_status(&k, call_post(&k, w, NULL), "");
    call_check(&k);
}

/* --groups: one hcomm_group_start/end per dtype x op holding, for every
 * count, an allreduce in place and one out of place (blocking and
 * non-blocking alternate), with a broadcast and a reduce of the same
 * dtype in the middle (fusion of the allreduces around them must keep
 * issue order). Small allreduces are fused into one collective
 * (HCOMM_GROUP_FUSE): the unpacking of the fused result is what this
 * checks, over whichever driver connects the ranks. */
#define GROUP_MAX 40
static long run_groups(hcomm_comm_t w, const size_t *counts, int ncounts, const int *dsel,
                       const int *osel, uint64_t *salt)
{
    long ncases = 0;
    for (int d = 0; d < HCOMM_DTYPE_COUNT; d++) {
        if (!dsel[d]) continue;
        for (int op = 0; op < HCOMM_OP_COUNT; op++) {
            if (!osel[op]) continue;
            call_t calls[GROUP_MAX];
            int nc = 0;
            for (int k = 0; k < ncounts && nc + 4 <= GROUP_MAX; k++) {
                for (int inplace = 0; inplace < 2; inplace++) {
                    case_t c = {.coll = C_ALLREDUCE, .d = (hcomm_dtype_t)d,
                                .op = (hcomm_op_t)op, .count = counts[k], .inplace = inplace,
                                .root = 0, .salt = (*salt)++};
                    calls[nc++] = (call_t){.c = c};
                }
                if (k == ncounts / 2) {
                    case_t b = {.coll = C_BROADCAST, .d = (hcomm_dtype_t)d, .count = counts[k],
                                .inplace = 1, .root = (int)(*salt % (uint64_t)g_n),
                                .salt = (*salt)++};
                    calls[nc++] = (call_t){.c = b};
                    case_t r = {.coll = C_REDUCE, .d = (hcomm_dtype_t)d, .op = (hcomm_op_t)op,
                                .count = counts[k], .inplace = 0,
                                .root = (int)(*salt % (uint64_t)g_n), .salt = (*salt)++};
                    calls[nc++] = (call_t){.c = r};
                }
            }
            for (int i = 0; i < nc; i++)
                call_prepare(&calls[i]);
            MP_OK(hcomm_group_start());
            for (int i = 0; i < nc; i++)
                call_status(&calls[i], call_post(&calls[i], w, i % 2 ? &calls[i].req : NULL),
                            " (posted in a group)");
            call_status(&calls[0], hcomm_group_end(), " (hcomm_group_end)");
            for (int i = 0; i < nc; i++)
                if (calls[i].req)
                    call_status(&calls[i], hcomm_wait(calls[i].req), " (wait after the group)");
            for (int i = 0; i < nc; i++)
                call_check(&calls[i]);
            ncases += nc;
        }
    }
    return ncases;
}

/* Rank 0 arrives 200 ms late: nobody may leave the barrier before it
 * entered. Compared on the host's monotonic clock (the ranks of every run
 * of this program share one kernel): a rank descheduled after the first
 * barrier would see less than 200 ms from its own start, on a loaded
 * machine (seen: 0.112 s beside a full CI run). */
static void check_barrier(hcomm_comm_t w)
{
    for (int nb = 0; nb < 2; nb++) {
        MP_OK(hcomm_barrier(w));
        double entered = 0;
        if (mp_rank == 0) {
            mp_sleep_ms(200);
            entered = mp_now();
        }
        if (nb) {
            hcomm_request_t req;
            MP_OK(hcomm_ibarrier(w, &req));
            MP_OK(hcomm_wait(req));
        } else {
            MP_OK(hcomm_barrier(w));
        }
        double left = mp_now();
        MP_OK(hcomm_broadcast(&entered, 1, HCOMM_FLOAT64, 0, w));
        if (left < entered)
            mp_fail("%s: left %.3f s before rank 0 entered it", nb ? "ibarrier" : "barrier",
                    entered - left);
    }
    for (int i = 0; i < 50; i++)
        MP_OK(hcomm_barrier(w));
}

static int parse_list(const char *arg, const char *const *names, int nnames, int *sel)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", arg);
    for (int i = 0; i < nnames; i++)
        sel[i] = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int found = 0;
        for (int i = 0; i < nnames; i++)
            if (!strcmp(tok, names[i])) sel[i] = found = 1;
        if (!found) {
            fprintf(stderr, "mp_coll_matrix: unknown name %s\n", tok);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t counts[16] = {0, 1, 7, 1023, 65537};
    int ncounts = 5, barrier = 1, groups = 0;
    int csel[C_NCOLL], dsel[HCOMM_DTYPE_COUNT], osel[HCOMM_OP_COUNT];
    for (int i = 0; i < C_NCOLL; i++)
        csel[i] = 1;
    for (int i = 0; i < HCOMM_DTYPE_COUNT; i++)
        dsel[i] = 1;
    for (int i = 0; i < HCOMM_OP_COUNT; i++)
        osel[i] = 1;
    for (int i = 1; i < argc; i++) {
        int bad = i + 1 >= argc;
        if (!bad && !strcmp(argv[i], "--counts")) {
            char *s = argv[++i];
            ncounts = 0;
            for (char *tok = strtok(s, ","); tok && ncounts < 16; tok = strtok(NULL, ","))
                counts[ncounts++] = strtoull(tok, NULL, 0);
        } else if (!bad && !strcmp(argv[i], "--colls")) {
            bad = parse_list(argv[++i], coll_names, C_NCOLL, csel);
            barrier = strstr(argv[i], "barrier") != NULL;
        } else if (!bad && !strcmp(argv[i], "--dtypes")) {
            bad = parse_list(argv[++i], dtype_names, HCOMM_DTYPE_COUNT, dsel);
        } else if (!strcmp(argv[i], "--pool")) {
            g_pool = 1;
            bad = 0;
#ifdef HC_TEST_GPU
        } else if (!bad && !strcmp(argv[i], "--device")) {
            bad = gpu_dev_mode(argv[++i]);
#endif
        } else if (!strcmp(argv[i], "--groups")) {
            groups = 1;
            bad = 0;
        } else if (!bad && !strcmp(argv[i], "--ops")) {
            bad = parse_list(argv[++i], op_names, HCOMM_OP_COUNT, osel);
        } else {
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "usage: mp_coll_matrix [--counts a,b,..] [--colls x,..] "
                            "[--dtypes x,..] [--ops x,..] [--pool] [--groups]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    mp_init();
    g_n = mp_size;
    hcomm_comm_t w = hcomm_comm_world();
    if (barrier) check_barrier(w);
    long ncases = 0;
    uint64_t salt = 1;
    if (groups) {
        double t0 = mp_now();
        ncases = run_groups(w, counts, ncounts, dsel, osel, &salt);
        if (mp_rank == 0) printf("rank 0: groups done in %.2f s\n", mp_now() - t0);
        for (int co = 0; co < C_NCOLL; co++)
            csel[co] = 0;
    }
    for (int co = 0; co < C_NCOLL; co++) {
        if (!csel[co]) continue;
        double t0 = mp_now();
        int reduction = co == C_ALLREDUCE || co == C_REDUCE || co == C_REDUCE_SCATTER;
        for (int d = 0; d < HCOMM_DTYPE_COUNT; d++) {
            if (!dsel[d]) continue;
            for (int op = 0; op < (reduction ? HCOMM_OP_COUNT : 1); op++) {
                if (reduction && !osel[op]) continue;
                for (int k = 0; k < ncounts; k++) {
                    for (int inplace = 0; inplace < 2; inplace++) {
                        case_t c = {.coll = co,
                                    .d = (hcomm_dtype_t)d,
                                    .op = (hcomm_op_t)op,
                                    .count = counts[k],
                                    .inplace = inplace,
                                    .root = (int)((salt * 7 + 1) % (uint64_t)g_n),
                                    .salt = salt};
                        salt++;
                        if (co == C_BROADCAST && inplace) /* broadcast is in place */
                            c.root = (c.root + g_n / 2) % g_n;
                        run_case(&c, w);
                        ncases++;
                    }
                }
            }
        }
        if (mp_rank == 0) printf("rank 0: %s done in %.2f s\n", coll_names[co], mp_now() - t0);
    }
    if (mp_rank == 0) printf("rank 0: %ld cases on %d ranks\n", ncases, g_n);
    return mp_finish("mp_coll_matrix");
}
