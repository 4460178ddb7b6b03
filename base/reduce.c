/*
 * Reduction kernels: the scalar reference, the fp16/bf16 conversions and the
 * dispatch.
 *
 * Dispatch: at first use hc_reduce_init() detects the CPU (CPUID, plus XGETBV
 * for the OS saving ymm/zmm state) and builds one table of kernels per ISA,
 * each layered over the one below (scalar, AVX2 over it, AVX-512 over that,
 * AVX512_FP16 over AVX-512),
 * so an ISA without a kernel for some (dtype, op) falls back to the best lower
 * one. hc_reduce() then costs one acquire load (a plain load on x86) and an
 * indirect call per call, nothing per element.
 *
 * The scalar reference defines the results: it works element by element,
 * folding the inputs left to right, so dst may alias srcs[0]. Loads go
 * through memcpy, because any pointer alignment is allowed and a misaligned
 * typed access is undefined behaviour. Integer arithmetic is done in the
 * unsigned type of the same width (wrapping without UB).
 */
#include "base/reduce_impl.h"
#include "base/config.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* ---- fp16 / bf16 conversions -------------------------------------------- */

float hc_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in fp32 */
        float mag = (float)mant * 0x1p-24f;
        return hc_f32_from_bits(sign | hc_f32_bits(mag));
    }
    if (exp == 0x1f) {
        if (mant == 0) return hc_f32_from_bits(sign | 0x7f800000u);
        return hc_f32_from_bits(sign | 0x7fc00000u | (mant << 13));
    }
    return hc_f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t hc_float_to_half(float f)
{
    uint32_t x = hc_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;

    if (ax > 0x7f800000u) /* NaN: keep the payload's top bits, force quiet */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    /* 65520 = 65504 + half an ulp is a tie with an odd mantissa: rounds up */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* normal half */
        uint32_t h = ((ax >> 23) - 112u) << 10 | ((ax >> 13) & 0x3ffu);
        uint32_t rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++; /* a carry into the exponent is still the right encoding */
        return (uint16_t)(sign | h);
    }
    if (ax <= 0x33000000u) /* at most 2^-25 (a tie with 0): zero */
        return sign;
    /* subnormal half: round mant * 2^(exp-150) to a multiple of 2^-24 */
    uint32_t exp = ax >> 23; /* 102..112 here */
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp; /* 14..24 */
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u)))
        h++; /* may become 0x400, the smallest normal: right as is */
    return (uint16_t)(sign | h);
}

float hc_bf16_to_float(uint16_t b)
{
    return hc_f32_from_bits((uint32_t)b << 16);
}

uint16_t hc_float_to_bf16(float f)
{
    uint32_t x = hc_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    /* integer RNE; a carry out of the mantissa overflows to Inf correctly */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- scalar kernels -------------------------------------------------------- */

#define HC_LDST(T, tag)                                                                            \
    static inline T hc_ld_##tag(const void *p, size_t i)                                           \
    {                                                                                              \
        T v;                                                                                       \
        memcpy(&v, (const char *)p + i * sizeof(T), sizeof(v));                                    \
        return v;                                                                                  \
    }                                                                                              \
    static inline void hc_st_##tag(void *p, size_t i, T v)                                         \
    {                                                                                              \
        memcpy((char *)p + i * sizeof(T), &v, sizeof(v));                                          \
    }

HC_LDST(int8_t, i8)
HC_LDST(uint8_t, u8)
HC_LDST(int32_t, i32)
HC_LDST(uint32_t, u32)
HC_LDST(int64_t, i64)
HC_LDST(uint64_t, u64)
HC_LDST(uint16_t, u16)
HC_LDST(float, f32)
HC_LDST(double, f64)

/* The accumulator loads and stores of the float types: fp16/bf16 live in
 * fp32 between load and store. */
static inline float hc_ld_f16(const void *p, size_t i)
{
    return hc_half_to_float(hc_ld_u16(p, i));
}
static inline void hc_st_f16(void *p, size_t i, float v)
{
    hc_st_u16(p, i, hc_float_to_half(v));
}
static inline float hc_ld_bf16(const void *p, size_t i)
{
    return hc_bf16_to_float(hc_ld_u16(p, i));
}
static inline void hc_st_bf16(void *p, size_t i, float v)
{
    hc_st_u16(p, i, hc_float_to_bf16(v));
}

/* Integers: T the element type, U the unsigned type of its width. */
#define HC_SCALAR_INT_SUM(name, tag, T, U, AVG)                                                    \
    static void hc_scalar_##name##_##tag(void *dst, const void *const *srcs, int nsrc,             \
                                         size_t count, int avg_div)                                \
    {                                                                                              \
        (void)avg_div;                                                                             \
        for (size_t i = 0; i < count; i++) {                                                       \
            U acc = (U)hc_ld_##tag(srcs[0], i);                                                    \
            for (int j = 1; j < nsrc; j++)                                                         \
                acc = (U)(acc + (U)hc_ld_##tag(srcs[j], i));                                       \
            if (AVG && avg_div > 0) acc = (U)((T)acc / avg_div);                                   \
            hc_st_##tag(dst, i, (T)acc);                                                           \
        }                                                                                          \
    }
#define HC_SCALAR_INT(tag, T, U)                                                                   \
    HC_SCALAR_INT_SUM(sum, tag, T, U, 0)                                                           \
    HC_SCALAR_INT_SUM(avg, tag, T, U, 1)                                                           \
    static void hc_scalar_prod_##tag(void *dst, const void *const *srcs, int nsrc, size_t count,   \
                                     int avg_div)                                                  \
    {                                                                                              \
        (void)avg_div;                                                                             \
        for (size_t i = 0; i < count; i++) {                                                       \
            U acc = (U)hc_ld_##tag(srcs[0], i);                                                    \
            for (int j = 1; j < nsrc; j++)                                                         \
                acc = (U)(acc * (U)hc_ld_##tag(srcs[j], i));                                       \
            hc_st_##tag(dst, i, (T)acc);                                                           \
        }                                                                                          \
    }                                                                                              \
    static void hc_scalar_max_##tag(void *dst, const void *const *srcs, int nsrc, size_t count,    \
                                    int avg_div)                                                   \
    {                                                                                              \
        (void)avg_div;                                                                             \
        for (size_t i = 0; i < count; i++) {                                                       \
            T acc = hc_ld_##tag(srcs[0], i);                                                       \
            for (int j = 1; j < nsrc; j++) {                                                       \
                T x = hc_ld_##tag(srcs[j], i);                                                     \
                acc = x > acc ? x : acc;                                                           \
            }                                                                                      \
            hc_st_##tag(dst, i, acc);                                                              \
        }                                                                                          \
    }                                                                                              \
    static void hc_scalar_min_##tag(void *dst, const void *const *srcs, int nsrc, size_t count,    \
                                    int avg_div)                                                   \
    {                                                                                              \
        (void)avg_div;                                                                             \
        for (size_t i = 0; i < count; i++) {                                                       \
            T acc = hc_ld_##tag(srcs[0], i);                                                       \
            for (int j = 1; j < nsrc; j++) {                                                       \
                T x = hc_ld_##tag(srcs[j], i);                                                     \
                acc = x < acc ? x : acc;                                                           \
            }                                                                                      \
            hc_st_##tag(dst, i, acc);                                                              \
        }                                                                                          \
    }                                                                                              \
    static void hc_int_div_##tag(void *dst, size_t count, int avg_div)                             \
    {                                                                                              \
        for (size_t i = 0; i < count; i++)                                                         \
            hc_st_##tag(dst, i, (T)(hc_ld_##tag(dst, i) / avg_div));                               \
    }

HC_SCALAR_INT(i8, int8_t, uint8_t)
HC_SCALAR_INT(u8, uint8_t, uint8_t)
HC_SCALAR_INT(i32, int32_t, uint32_t)
HC_SCALAR_INT(u32, uint32_t, uint32_t)
HC_SCALAR_INT(i64, int64_t, uint64_t)
HC_SCALAR_INT(u64, uint64_t, uint64_t)

/* Float MAX/MIN per reduce.h: a NaN operand makes a NaN (made canonical at
 * the end), and equal values differ only for +-0, where AND of the bits picks
 * +0 for max and OR picks -0 for min. The vector kernels do the same. */
#define HC_FLOAT_MAXMIN(A, tag, UINT)                                                              \
    static inline A hc_##tag##_max(A a, A b)                                                       \
    {                                                                                              \
        if (a != a || b != b) return a + b;                                                        \
        if (a != b) return a > b ? a : b;                                                          \
        UINT ua, ub;                                                                               \
        memcpy(&ua, &a, sizeof(a));                                                                \
        memcpy(&ub, &b, sizeof(b));                                                                \
        ua &= ub;                                                                                  \
        memcpy(&a, &ua, sizeof(a));                                                                \
        return a;                                                                                  \
    }                                                                                              \
    static inline A hc_##tag##_min(A a, A b)                                                       \
    {                                                                                              \
        if (a != a || b != b) return a + b;                                                        \
        if (a != b) return a < b ? a : b;                                                          \
        UINT ua, ub;                                                                               \
        memcpy(&ua, &a, sizeof(a));                                                                \
        memcpy(&ub, &b, sizeof(b));                                                                \
        ua |= ub;                                                                                  \
        memcpy(&a, &ua, sizeof(a));                                                                \
        return a;                                                                                  \
    }                                                                                              \
    static inline A hc_##tag##_canon(A a)                                                          \
    {                                                                                              \
        return a != a ? (A)NAN : a;                                                                \
    }

HC_FLOAT_MAXMIN(float, f32, uint32_t)
HC_FLOAT_MAXMIN(double, f64, uint64_t)

/* Floats: tag names the load/store pair, A the accumulator type, atag its
 * helpers. */
#define HC_SCALAR_FP_OP(name, tag, A, atag, STEP, AVG)                                             \
    static void hc_scalar_##name##_##tag(void *dst, const void *const *srcs, int nsrc,             \
                                         size_t count, int avg_div)                                \
    {                                                                                              \
        (void)avg_div;                                                                             \
        for (size_t i = 0; i < count; i++) {                                                       \
            A acc = hc_ld_##tag(srcs[0], i);                                                       \
            for (int j = 1; j < nsrc; j++) {                                                       \
                A x = hc_ld_##tag(srcs[j], i);                                                     \
                acc = STEP;                                                                        \
            }                                                                                      \
            if (AVG && avg_div > 0) acc = acc / (A)avg_div;                                        \
            hc_st_##tag(dst, i, hc_##atag##_canon(acc));                                           \
        }                                                                                          \
    }
#define HC_SCALAR_FP(tag, A, atag)                                                                 \
    HC_SCALAR_FP_OP(sum, tag, A, atag, acc + x, 0)                                                 \
    HC_SCALAR_FP_OP(prod, tag, A, atag, acc *x, 0)                                                 \
    HC_SCALAR_FP_OP(max, tag, A, atag, hc_##atag##_max(acc, x), 0)                                 \
    HC_SCALAR_FP_OP(min, tag, A, atag, hc_##atag##_min(acc, x), 0)                                 \
    HC_SCALAR_FP_OP(avg, tag, A, atag, acc + x, 1)

HC_SCALAR_FP(f16, float, f32)
HC_SCALAR_FP(bf16, float, f32)
HC_SCALAR_FP(f32, float, f32)
HC_SCALAR_FP(f64, double, f64)

void hc_reduce_scalar_fill(hc_reduce_table_t t)
{
#define HC_FILL_INT(dt, tag)                                                                       \
    t[dt][HCOMM_SUM] = hc_scalar_sum_##tag;                                                        \
    t[dt][HCOMM_AVG] = hc_scalar_avg_##tag;                                                        \
    t[dt][HCOMM_PROD] = hc_scalar_prod_##tag;                                                      \
    t[dt][HCOMM_MAX] = hc_scalar_max_##tag;                                                        \
    t[dt][HCOMM_MIN] = hc_scalar_min_##tag;
#define HC_FILL_FP(dt, tag)                                                                        \
    t[dt][HCOMM_SUM] = hc_scalar_sum_##tag;                                                        \
    t[dt][HCOMM_AVG] = hc_scalar_avg_##tag;                                                        \
    t[dt][HCOMM_PROD] = hc_scalar_prod_##tag;                                                      \
    t[dt][HCOMM_MAX] = hc_scalar_max_##tag;                                                        \
    t[dt][HCOMM_MIN] = hc_scalar_min_##tag;
    HC_FILL_INT(HCOMM_INT8, i8)
    HC_FILL_INT(HCOMM_UINT8, u8)
    HC_FILL_INT(HCOMM_INT32, i32)
    HC_FILL_INT(HCOMM_UINT32, u32)
    HC_FILL_INT(HCOMM_INT64, i64)
    HC_FILL_INT(HCOMM_UINT64, u64)
    HC_FILL_FP(HCOMM_FLOAT16, f16)
    HC_FILL_FP(HCOMM_BFLOAT16, bf16)
    HC_FILL_FP(HCOMM_FLOAT32, f32)
    HC_FILL_FP(HCOMM_FLOAT64, f64)
#undef HC_FILL_INT
#undef HC_FILL_FP
}

void hc_reduce_int_div(void *dst, size_t count, hcomm_dtype_t dtype, int avg_div)
{
    switch (dtype) {
    case HCOMM_INT8:
        hc_int_div_i8(dst, count, avg_div);
        break;
    case HCOMM_UINT8:
        hc_int_div_u8(dst, count, avg_div);
        break;
    case HCOMM_INT32:
        hc_int_div_i32(dst, count, avg_div);
        break;
    case HCOMM_UINT32:
        hc_int_div_u32(dst, count, avg_div);
        break;
    case HCOMM_INT64:
        hc_int_div_i64(dst, count, avg_div);
        break;
    case HCOMM_UINT64:
        hc_int_div_u64(dst, count, avg_div);
        break;
    default:
        break;
    }
}

/* ---- dispatch ------------------------------------------------------------ */

static const size_t hc_reduce_esize[HCOMM_DTYPE_COUNT] = {
    [HCOMM_INT8] = 1,    [HCOMM_UINT8] = 1,   [HCOMM_INT32] = 4,   [HCOMM_UINT32] = 4,
    [HCOMM_INT64] = 8,   [HCOMM_UINT64] = 8,  [HCOMM_FLOAT16] = 2, [HCOMM_BFLOAT16] = 2,
    [HCOMM_FLOAT32] = 4, [HCOMM_FLOAT64] = 8,
};

static const char *const hc_reduce_isa_names[] = {"scalar", "avx2", "avx512", "avx512fp16"};
#define HC_ISA_COUNT ((int)HC_ARRAY_SIZE(hc_reduce_isa_names))

static hc_reduce_table_t hc_reduce_tables[HC_ISA_COUNT];
static bool hc_reduce_have[HC_ISA_COUNT];
static atomic_int hc_reduce_cur = -1; /* an hc_isa_t once initialized */
static pthread_once_t hc_reduce_once = PTHREAD_ONCE_INIT;

static void hc_reduce_cpu_detect(bool have[])
{
    have[HC_ISA_SCALAR] = true;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29),
         fma = c & (1u << 12);
    if (!osxsave || !avx) return;
    /* XCR0 says which register state the OS saves on context switch */
    uint32_t xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    bool os_ymm = (xlo & 0x6u) == 0x6u;
    bool os_zmm = (xlo & 0xe6u) == 0xe6u;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    bool avx2 = b & (1u << 5), avx512f = b & (1u << 16), avx512dq = b & (1u << 17),
         avx512bw = b & (1u << 30), avx512vl = b & (1u << 31), avx512fp16 = d & (1u << 23);
    have[HC_ISA_AVX2] = os_ymm && avx2 && f16c && fma;
    have[HC_ISA_AVX512] =
        have[HC_ISA_AVX2] && os_zmm && avx512f && avx512dq && avx512bw && avx512vl;
    have[HC_ISA_AVX512_FP16] = have[HC_ISA_AVX512] && avx512fp16;
#else
    (void)have;
#endif
}

static void hc_reduce_init_once(void)
{
    hc_reduce_cpu_detect(hc_reduce_have);

    hc_reduce_scalar_fill(hc_reduce_tables[HC_ISA_SCALAR]);
    memcpy(hc_reduce_tables[HC_ISA_AVX2], hc_reduce_tables[HC_ISA_SCALAR],
           sizeof(hc_reduce_table_t));
    hc_reduce_avx2_fill(hc_reduce_tables[HC_ISA_AVX2]);
    memcpy(hc_reduce_tables[HC_ISA_AVX512], hc_reduce_tables[HC_ISA_AVX2],
           sizeof(hc_reduce_table_t));
    hc_reduce_avx512_fill(hc_reduce_tables[HC_ISA_AVX512]);
    memcpy(hc_reduce_tables[HC_ISA_AVX512_FP16], hc_reduce_tables[HC_ISA_AVX512],
           sizeof(hc_reduce_table_t));
    if (!hc_reduce_avx512fp16_fill(hc_reduce_tables[HC_ISA_AVX512_FP16]))
        hc_reduce_have[HC_ISA_AVX512_FP16] = false;

    int best = HC_ISA_SCALAR;
    for (int i = 0; i < HC_ISA_COUNT; i++)
        if (hc_reduce_have[i]) best = i;

    /* A debug knob of the table, read at first use rather than by
     * hc_config_load: it must work in unit tests that never call hcomm_init(). */
    const char *force = hc_config_env("HCOMM_REDUCE_ISA");
    if (force && *force) {
        int want = -1;
        for (int i = 0; i < HC_ISA_COUNT; i++)
            if (strcasecmp(force, hc_reduce_isa_names[i]) == 0) want = i;
        if (want < 0)
            hc_log_warn("HCOMM_REDUCE_ISA=%s is not one of scalar|avx2|avx512|avx512fp16; using %s",
                        force, hc_reduce_isa_names[best]);
        else if (!hc_reduce_have[want])
            hc_log_warn("HCOMM_REDUCE_ISA=%s: this CPU (or OS) lacks it; using %s", force,
                        hc_reduce_isa_names[best]);
        else
            best = want;
    }
    hc_log_info("reduce kernels: %s (usable: avx2 %s, avx512 %s, avx512fp16 %s)",
                hc_reduce_isa_names[best], hc_reduce_have[HC_ISA_AVX2] ? "yes" : "no",
                hc_reduce_have[HC_ISA_AVX512] ? "yes" : "no",
                hc_reduce_have[HC_ISA_AVX512_FP16] ? "yes" : "no");
    atomic_store_explicit(&hc_reduce_cur, best, memory_order_release);
}

void hc_reduce_init(void)
{
    pthread_once(&hc_reduce_once, hc_reduce_init_once);
}

hc_isa_t hc_reduce_isa(void)
{
    hc_reduce_init();
    return (hc_isa_t)atomic_load_explicit(&hc_reduce_cur, memory_order_acquire);
}

const char *hc_reduce_isa_name(hc_isa_t isa)
{
    if ((unsigned)isa >= (unsigned)HC_ISA_COUNT) return "unknown";
    return hc_reduce_isa_names[isa];
}

bool hc_reduce_set_isa(hc_isa_t isa)
{
    hc_reduce_init();
    if ((unsigned)isa >= (unsigned)HC_ISA_COUNT || !hc_reduce_have[isa]) return false;
    atomic_store_explicit(&hc_reduce_cur, (int)isa, memory_order_release);
    return true;
}

static HC_NOINLINE bool hc_reduce_args_bad(const char *func, void *dst, const void *const *srcs,
                                           int nsrc, size_t count, hcomm_dtype_t dtype,
                                           hcomm_op_t op, int avg_div)
{
    const char *what = NULL;
    long long value = 0;
    if ((unsigned)dtype >= HCOMM_DTYPE_COUNT)
        what = "dtype", value = (int)dtype;
    else if ((unsigned)op >= HCOMM_OP_COUNT)
        what = "op", value = (int)op;
    else if (nsrc < 1 || nsrc > HC_REDUCE_MAX_SRCS)
        what = "nsrc", value = nsrc;
    else if (op == HCOMM_AVG && avg_div < 0)
        what = "avg_div", value = avg_div;
    else if (count > 0 && !dst)
        what = "dst (NULL)", value = 0;
    else if (count > 0 && !srcs)
        what = "srcs (NULL)", value = 0;
    else if (count > 0)
        for (int j = 0; j < nsrc && !what; j++)
            if (!srcs[j]) what = "srcs[j] (NULL), j", value = j;
    if (!what) return false;
    hc_error(HCOMM_ERR_INVALID, "%s: argument %s is bad (%lld)", func, what, value);
    hc_log_error("%s", hc_error_last());
    return true;
}

/* Below this many bytes no vector kernel runs a vector step (the narrowest,
 * AVX2's fp16 and bf16 through fp32, takes 8 elements): the whole call is
 * its scalar tail, so the scalar kernel is called directly (the same bits;
 * an 8-byte allreduce spent 160 of its 1060 instructions getting there). */
#define HC_REDUCE_VECTOR_MIN_BYTES 16

void hc_reduce(void *dst, const void *const *srcs, int nsrc, size_t count, hcomm_dtype_t dtype,
               hcomm_op_t op, int avg_div)
{
    int isa = atomic_load_explicit(&hc_reduce_cur, memory_order_acquire);
    if (HC_UNLIKELY(isa < 0)) {
        hc_reduce_init();
        isa = atomic_load_explicit(&hc_reduce_cur, memory_order_acquire);
    }
    /* The good case inline; hc_reduce_args_bad finds and names the rule. */
    if (HC_UNLIKELY((unsigned)dtype >= HCOMM_DTYPE_COUNT || (unsigned)op >= HCOMM_OP_COUNT ||
                    nsrc < 1 || nsrc > HC_REDUCE_MAX_SRCS || (op == HCOMM_AVG && avg_div < 0) ||
                    (count > 0 && (!dst || !srcs || !srcs[0] || (nsrc > 1 && !srcs[1]) ||
                                   nsrc > 2))) &&
        hc_reduce_args_bad("hc_reduce", dst, srcs, nsrc, count, dtype, op, avg_div))
        return;
    if (count == 0) return;
    if (count * hc_reduce_esize[dtype] < HC_REDUCE_VECTOR_MIN_BYTES) isa = HC_ISA_SCALAR;
    hc_reduce_tables[isa][dtype][op](dst, srcs, nsrc, count, avg_div);
}

void hc_reduce_scalar(void *dst, const void *const *srcs, int nsrc, size_t count,
                      hcomm_dtype_t dtype, hcomm_op_t op, int avg_div)
{
    hc_reduce_init();
    if (hc_reduce_args_bad("hc_reduce_scalar", dst, srcs, nsrc, count, dtype, op, avg_div)) return;
    if (count == 0) return;
    hc_reduce_tables[HC_ISA_SCALAR][dtype][op](dst, srcs, nsrc, count, avg_div);
}

void hc_reduce_scalar_tail(void *dst, const void *const *srcs, int nsrc, size_t start, size_t count,
                           hcomm_dtype_t dtype, hcomm_op_t op, int avg_div)
{
    if (start >= count) return;
    size_t off = start * hc_reduce_esize[dtype];
    const void *p[HC_REDUCE_MAX_SRCS];
    for (int j = 0; j < nsrc; j++)
        p[j] = (const char *)srcs[j] + off;
    hc_reduce_tables[HC_ISA_SCALAR][dtype][op]((char *)dst + off, p, nsrc, count - start, avg_div);
}
