/*
 * Tests of base/reduce: the scalar reference against hand-computed results
 * (wrapping, truncating AVG, rounding ties, NaN and signed-zero rules), the
 * fp16/bf16 conversions (exhaustively over 16-bit inputs, and against F16C
 * when the CPU has it), and every ISA against the scalar reference bit for bit
 * over every dtype x op x input count x length, with edge values, aliasing
 * and misaligned buffers. Buffers are sized exactly so ASan sees overruns;
 * guard bytes around dst catch stray stores without ASan.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/reduce.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static const size_t esize[HCOMM_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
static const char *const dtype_name[HCOMM_DTYPE_COUNT] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "fp16", "bf16", "f32", "f64"};
static const char *const op_name[HCOMM_OP_COUNT] = {"sum", "prod", "max", "min", "avg"};

static hc_isa_t isas[4];
static int n_isas;
static hc_isa_t best_isa;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    /* xorshift64*: fixed seed, so a failure reproduces */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double f64_of(uint64_t u)
{
    double f;
    memcpy(&f, &u, 8);
    return f;
}

static void find_isas(void)
{
    n_isas = 0;
    for (int i = HC_ISA_SCALAR; i <= HC_ISA_AVX512_FP16; i++)
        if (hc_reduce_set_isa((hc_isa_t)i)) {
            isas[n_isas++] = (hc_isa_t)i;
            best_isa = (hc_isa_t)i;
        }
    hc_reduce_set_isa(best_isa);
}

/* Must run first: HCOMM_REDUCE_ISA is read once, at the first use. */
static void test_env_forces_isa(void **state)
{
    (void)state;
    setenv("HCOMM_REDUCE_ISA", "scalar", 1);
    assert_int_equal(hc_reduce_isa(), HC_ISA_SCALAR);
    unsetenv("HCOMM_REDUCE_ISA");
    find_isas();
    assert_true(n_isas >= 1);
    assert_int_equal(hc_reduce_isa(), best_isa);
    assert_string_equal(hc_reduce_isa_name(HC_ISA_AVX2), "avx2");
    assert_string_equal(hc_reduce_isa_name((hc_isa_t)7), "unknown");
    assert_false(hc_reduce_set_isa((hc_isa_t)7));
    printf("ISAs available:");
    for (int i = 0; i < n_isas; i++)
        printf(" %s", hc_reduce_isa_name(isas[i]));
    printf("\n");
}

/* ---- hand-computed expectations ------------------------------------------- */

#define HAND_N 37 /* one vector body and a tail on every ISA */

/* Reduces nsrc single values (replicated HAND_N times) on every ISA and the
 * scalar reference, and checks each element against expect. */
static void check_hand(int line, hcomm_dtype_t dt, hcomm_op_t op, int avg_div, int nsrc,
                       const void *in, const void *expect)
{
    size_t sz = esize[dt];
    unsigned char src[8][HAND_N * 8], dst[HAND_N * 8];
    const void *srcs[8];
    for (int j = 0; j < nsrc; j++) {
        for (int i = 0; i < HAND_N; i++)
            memcpy(src[j] + i * sz, (const char *)in + j * sz, sz);
        srcs[j] = src[j];
    }
    for (int k = -1; k < n_isas; k++) {
        memset(dst, 0x5a, sizeof(dst));
        if (k < 0) {
            hc_reduce_scalar(dst, srcs, nsrc, HAND_N, dt, op, avg_div);
        } else {
            assert_true(hc_reduce_set_isa(isas[k]));
            hc_reduce(dst, srcs, nsrc, HAND_N, dt, op, avg_div);
        }
        for (int i = 0; i < HAND_N; i++) {
            if (memcmp(dst + i * sz, expect, sz) == 0) continue;
            uint64_t got = 0, want = 0;
            memcpy(&got, dst + i * sz, sz);
            memcpy(&want, expect, sz);
            fail_msg("line %d: %s %s nsrc %d (%s) elem %d: got 0x%llx, want 0x%llx", line,
                     dtype_name[dt], op_name[op], nsrc, k < 0 ? "ref" : hc_reduce_isa_name(isas[k]),
                     i, (unsigned long long)got, (unsigned long long)want);
        }
    }
    hc_reduce_set_isa(best_isa);
}

#define HAND(T, dt, op, div, expect, ...)                                                          \
    do {                                                                                           \
        T in_[] = {__VA_ARGS__};                                                                   \
        T want_ = (expect);                                                                        \
        check_hand(__LINE__, dt, op, div, (int)(sizeof(in_) / sizeof(T)), in_, &want_);            \
    } while (0)

static void test_hand_int(void **state)
{
    (void)state;
    HAND(int8_t, HCOMM_INT8, HCOMM_SUM, 0, -128, 127, 1);
    HAND(int8_t, HCOMM_INT8, HCOMM_SUM, 5, 127, -128, -1); /* avg_div ignored by SUM */
    HAND(int8_t, HCOMM_INT8, HCOMM_PROD, 0, 0, 16, 16);
    HAND(int8_t, HCOMM_INT8, HCOMM_PROD, 0, -128, -128, -1);
    HAND(int8_t, HCOMM_INT8, HCOMM_PROD, 0, -6, 3, -2, 1);
    HAND(int8_t, HCOMM_INT8, HCOMM_MAX, 0, 1, -1, 1);
    HAND(int8_t, HCOMM_INT8, HCOMM_MIN, 0, -128, 127, -128, 0);
    HAND(int8_t, HCOMM_INT8, HCOMM_AVG, 2, -3, -3, -4);
    HAND(int8_t, HCOMM_INT8, HCOMM_AVG, 2, -28, 100, 100); /* wrapped sum -56 */
    HAND(int8_t, HCOMM_INT8, HCOMM_AVG, 0, -56, 100, 100);
    HAND(int8_t, HCOMM_INT8, HCOMM_AVG, 3, 5, 17); /* one input divided */
    HAND(uint8_t, HCOMM_UINT8, HCOMM_SUM, 0, 0, 255, 1);
    HAND(uint8_t, HCOMM_UINT8, HCOMM_MAX, 0, 200, 100, 200);
    HAND(uint8_t, HCOMM_UINT8, HCOMM_MIN, 0, 100, 200, 100);
    HAND(uint8_t, HCOMM_UINT8, HCOMM_AVG, 2, 127, 255, 255); /* wrapped sum 254 */
    HAND(uint8_t, HCOMM_UINT8, HCOMM_PROD, 0, 1, 255, 255);
    HAND(int32_t, HCOMM_INT32, HCOMM_SUM, 0, INT32_MIN, INT32_MAX, 1);
    HAND(int32_t, HCOMM_INT32, HCOMM_AVG, 2, -3, -7, 0);
    HAND(int32_t, HCOMM_INT32, HCOMM_AVG, 2, 3, 7, 0);
    HAND(int32_t, HCOMM_INT32, HCOMM_MAX, 0, -1, INT32_MIN, -1);
    HAND(int32_t, HCOMM_INT32, HCOMM_PROD, 0, INT32_MIN, 65536, 32768);
    HAND(uint32_t, HCOMM_UINT32, HCOMM_MAX, 0, 0x80000000u, 0x80000000u, 1);
    HAND(uint32_t, HCOMM_UINT32, HCOMM_MIN, 0, 1, 0x80000000u, 1);
    HAND(uint32_t, HCOMM_UINT32, HCOMM_AVG, 1, 0, 0xffffffffu, 1);
    HAND(uint32_t, HCOMM_UINT32, HCOMM_AVG, 2, 0x7fffffffu, 0xffffffffu, 0xffffffffu);
    HAND(int64_t, HCOMM_INT64, HCOMM_MAX, 0, INT64_MAX, INT64_MIN, INT64_MAX);
    HAND(int64_t, HCOMM_INT64, HCOMM_MIN, 0, INT64_MIN, INT64_MAX, INT64_MIN);
    HAND(int64_t, HCOMM_INT64, HCOMM_MAX, 0, 1, -1, 1);
    HAND(int64_t, HCOMM_INT64, HCOMM_MIN, 0, INT64_MIN + 1, INT64_MIN + 1, INT64_MAX, 0);
    HAND(int64_t, HCOMM_INT64, HCOMM_SUM, 0, INT64_MIN, INT64_MAX, 1);
    HAND(int64_t, HCOMM_INT64, HCOMM_PROD, 0, 0, INT64_C(1) << 32, INT64_C(1) << 32);
    HAND(int64_t, HCOMM_INT64, HCOMM_PROD, 0, -6, 3, -2);
    HAND(int64_t, HCOMM_INT64, HCOMM_AVG, 2, -3, -7, 0);
    HAND(int64_t, HCOMM_INT64, HCOMM_AVG, 3, INT64_C(-3074457345618258602), INT64_MIN, 0);
    HAND(uint64_t, HCOMM_UINT64, HCOMM_MAX, 0, UINT64_C(1) << 63, 1, UINT64_C(1) << 63);
    HAND(uint64_t, HCOMM_UINT64, HCOMM_MIN, 0, 0, UINT64_MAX, 0);
    HAND(uint64_t, HCOMM_UINT64, HCOMM_AVG, 2, INT64_MAX, UINT64_MAX, 0);
    HAND(uint64_t, HCOMM_UINT64, HCOMM_SUM, 0, 0, UINT64_MAX, 1);
}

static void test_hand_fp16_bf16(void **state)
{
    (void)state;
    /* fp16: 1 + 2^-11 is a tie between 1 and 1 + 2^-10: even wins */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x3c00, 0x3c00, 0x1000);
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x3c02, 0x3c01, 0x1000);
    /* accumulation in fp32, rounded once: two half-ulps make one ulp */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x3c01, 0x3c00, 0x1000, 0x1000);
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x7bff, 0x7bff, 0x7bff, 0xfbff);
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x7c00, 0x7bff, 0x7bff);
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x7c00, 0x7bff, 0x4c00); /* 65520: tie -> Inf */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x7bff, 0x7bff, 0x4800); /* 65512 -> 65504 */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x0002, 0x0001, 0x0001); /* subnormals */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x0400, 0x03ff, 0x0001); /* to normal */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x8000, 0x8000, 0x8000);
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x0000, 0x8000, 0x0000);
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x7e00, 0x3c00, 0x7c01);  /* sNaN */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x7e00, 0x7c00, 0xfc00);  /* Inf - Inf */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_SUM, 0, 0x7e00, 0xfe37);          /* copy: canonical */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_PROD, 0, 0x7c00, 0x5c00, 0x5c00); /* 256^2 > max */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_PROD, 0, 0x7bfe, 0x5bff, 0x5bff); /* 65472.02 */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_AVG, 2, 0x3e00, 0x3c00, 0x4000);  /* (1+2)/2 */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_AVG, 2, 0x7bff, 0x7bff, 0x7bff);  /* no fp16 overflow */
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_MAX, 0, 0x0000, 0x8000, 0x0000);
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_MAX, 0, 0x0000, 0x0000, 0x8000);
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_MIN, 0, 0x8000, 0x0000, 0x8000);
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_MAX, 0, 0x7e00, 0x3c00, 0x7e55, 0x4000);
    HAND(uint16_t, HCOMM_FLOAT16, HCOMM_MIN, 0, 0xfc00, 0x3c00, 0xfc00);

    /* bf16: 1 + 2^-8 is a tie: even (1.0) wins; from an odd mantissa it rounds up */
    HAND(uint16_t, HCOMM_BFLOAT16, HCOMM_SUM, 0, 0x3f80, 0x3f80, 0x3b80);
    HAND(uint16_t, HCOMM_BFLOAT16, HCOMM_SUM, 0, 0x3f82, 0x3f81, 0x3b80);
    HAND(uint16_t, HCOMM_BFLOAT16, HCOMM_SUM, 0, 0x3f81, 0x3f80, 0x3b80, 0x3b80);
    HAND(uint16_t, HCOMM_BFLOAT16, HCOMM_SUM, 0, 0x7f80, 0x7f7f, 0x7f7f); /* overflow */
    HAND(uint16_t, HCOMM_BFLOAT16, HCOMM_SUM, 0, 0x0002, 0x0001, 0x0001); /* subnormal */
    HAND(uint16_t, HCOMM_BFLOAT16, HCOMM_SUM, 0, 0x7fc0, 0x7f81, 0x3f80); /* sNaN */
    HAND(uint16_t, HCOMM_BFLOAT16, HCOMM_SUM, 0, 0x7fc0, 0xffc1);
    HAND(uint16_t, HCOMM_BFLOAT16, HCOMM_AVG, 3, 0x4015, 0x3f80, 0x4000, 0x4080); /* 7/3 */
    HAND(uint16_t, HCOMM_BFLOAT16, HCOMM_MIN, 0, 0x8000, 0x8000, 0x0000);
    HAND(uint16_t, HCOMM_BFLOAT16, HCOMM_MIN, 0, 0x7fc0, 0x3f80, 0xff81);
}

static void test_hand_f32_f64(void **state)
{
    (void)state;
    const float nan = f32_of(0x7fc00000u);
    HAND(float, HCOMM_FLOAT32, HCOMM_AVG, 2, 1.5f, 1.0f, 2.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_AVG, 3, 7.0f / 3.0f, 1.0f, 2.0f, 4.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_AVG, 0, 7.0f, 1.0f, 2.0f, 4.0f);
    /* left-to-right order: (1e30 - 1e30) + 1 = 1, (1 + 1e30) - 1e30 = 0 */
    HAND(float, HCOMM_FLOAT32, HCOMM_SUM, 0, 1.0f, 1e30f, -1e30f, 1.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_SUM, 0, 0.0f, 1.0f, 1e30f, -1e30f);
    HAND(float, HCOMM_FLOAT32, HCOMM_SUM, 0, nan, f32_of(0xffc00001u), 1.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_SUM, 0, nan, f32_of(0x7f800000u), f32_of(0xff800000u));
    HAND(float, HCOMM_FLOAT32, HCOMM_SUM, 0, nan, f32_of(0xffc00123u)); /* copy */
    HAND(float, HCOMM_FLOAT32, HCOMM_SUM, 0, -0.0f, -0.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_SUM, 0, f32_of(2), f32_of(1), f32_of(1)); /* subnormals */
    HAND(float, HCOMM_FLOAT32, HCOMM_PROD, 0, nan, 0.0f, f32_of(0x7f800000u));
    HAND(float, HCOMM_FLOAT32, HCOMM_PROD, 0, -24.0f, 2.0f, -3.0f, 4.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_MAX, 0, 0.0f, -0.0f, 0.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_MAX, 0, 0.0f, 0.0f, -0.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_MIN, 0, -0.0f, 0.0f, -0.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_MIN, 0, -0.0f, -0.0f, 0.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_MAX, 0, nan, f32_of(0x7f800001u), 1.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_MAX, 0, nan, 1.0f, f32_of(0x7f800001u), 2.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_MAX, 0, 3.0f, f32_of(0xff800000u), 3.0f, -5.0f);
    HAND(float, HCOMM_FLOAT32, HCOMM_MIN, 0, -5.0f, f32_of(0x7f800000u), 3.0f, -5.0f);
    const double dnan = f64_of(0x7ff8000000000000ull);
    HAND(double, HCOMM_FLOAT64, HCOMM_AVG, 3, 7.0 / 3.0, 1.0, 2.0, 4.0);
    HAND(double, HCOMM_FLOAT64, HCOMM_SUM, 0, 1.0, 1e300, -1e300, 1.0);
    HAND(double, HCOMM_FLOAT64, HCOMM_SUM, 0, dnan, f64_of(0xfff0000000000001ull), 1.0);
    HAND(double, HCOMM_FLOAT64, HCOMM_MIN, 0, -0.0, 0.0, -0.0);
    HAND(double, HCOMM_FLOAT64, HCOMM_MAX, 0, 0.0, -0.0, 0.0);
    HAND(double, HCOMM_FLOAT64, HCOMM_MAX, 0, dnan, 1.0, dnan);
    HAND(double, HCOMM_FLOAT64, HCOMM_PROD, 0, f64_of(0x7ff0000000000000ull), 1e200, 1e200);
}

/* ---- conversions ------------------------------------------------------------ */

static void test_conversions_hand(void **state)
{
    (void)state;
    assert_true(hc_half_to_float(0x0001) == 0x1p-24f);
    assert_true(hc_half_to_float(0x03ff) == 0x3ffp-24f);
    assert_true(hc_half_to_float(0x0400) == 0x1p-14f);
    assert_true(hc_half_to_float(0x7bff) == 65504.0f);
    assert_true(hc_half_to_float(0xc000) == -2.0f);
    assert_int_equal(f32_bits(hc_half_to_float(0x8000)), 0x80000000u);
    assert_int_equal(f32_bits(hc_half_to_float(0x7c00)), 0x7f800000u);
    assert_int_equal(f32_bits(hc_half_to_float(0xfc00)), 0xff800000u);
    assert_int_equal(f32_bits(hc_half_to_float(0x7e01)), 0x7fc02000u);
    assert_int_equal(f32_bits(hc_half_to_float(0x7c01)), 0x7fc02000u); /* sNaN quieted */
    assert_int_equal(f32_bits(hc_half_to_float(0xfe00)), 0xffc00000u);

    assert_int_equal(hc_float_to_half(65504.0f), 0x7bff);
    assert_int_equal(hc_float_to_half(65519.99f), 0x7bff);
    assert_int_equal(hc_float_to_half(65520.0f), 0x7c00);
    assert_int_equal(hc_float_to_half(-1e10f), 0xfc00);
    assert_int_equal(hc_float_to_half(f32_of(0x7f800000u)), 0x7c00);
    assert_int_equal(hc_float_to_half(0x1p-25f), 0x0000); /* tie with 0 -> 0 */
    assert_int_equal(hc_float_to_half(-0x1p-25f), 0x8000);
    assert_int_equal(hc_float_to_half(f32_of(0x33000001u)), 0x0001);
    assert_int_equal(hc_float_to_half(0x1.8p-24f), 0x0002);   /* 1.5 ulp: tie -> 2 */
    assert_int_equal(hc_float_to_half(0x1.4p-23f), 0x0002);   /* 2.5 ulp: tie -> 2 */
    assert_int_equal(hc_float_to_half(0x1.ffcp-15f), 0x0400); /* rounds up to normal */
    assert_int_equal(hc_float_to_half(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(hc_float_to_half(1.0f + 0x1.8p-10f), 0x3c02);
    assert_int_equal(hc_float_to_half(f32_of(1)), 0x0000); /* fp32 subnormal */
    assert_int_equal(hc_float_to_half(f32_of(0x7f800001u)), 0x7e00);
    assert_int_equal(hc_float_to_half(f32_of(0xffffe000u)), 0xffff);
    assert_int_equal(hc_float_to_half(f32_of(0x7fc00000u)), 0x7e00);

    assert_int_equal(hc_float_to_bf16(1.0f), 0x3f80);
    assert_int_equal(hc_float_to_bf16(f32_of(0x3f808000u)), 0x3f80); /* tie -> even */
    assert_int_equal(hc_float_to_bf16(f32_of(0x3f818000u)), 0x3f82);
    assert_int_equal(hc_float_to_bf16(f32_of(0x3f808001u)), 0x3f81);
    assert_int_equal(hc_float_to_bf16(f32_of(0x7f7fffffu)), 0x7f80); /* overflow */
    assert_int_equal(hc_float_to_bf16(f32_of(0x00018000u)), 0x0002); /* subnormal tie */
    assert_int_equal(hc_float_to_bf16(f32_of(0x7f800001u)), 0x7fc0);
    assert_int_equal(hc_float_to_bf16(f32_of(0xff812345u)), 0xffc1);
    assert_int_equal(f32_bits(hc_bf16_to_float(0x0001)), 0x00010000u);
    assert_int_equal(f32_bits(hc_bf16_to_float(0xff80)), 0xff800000u);
}

static int f16_is_nan(uint16_t h)
{
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

static void test_conversions_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t back = hc_float_to_half(hc_half_to_float((uint16_t)h));
        uint16_t want = f16_is_nan((uint16_t)h) ? (uint16_t)(h | 0x200) : (uint16_t)h;
        if (back != want) fail_msg("fp16 round trip 0x%04x -> 0x%04x", h, back);

        uint16_t b = (uint16_t)h;
        int b_special = (b & 0x7f80) == 0x7f80;
        uint16_t bback = hc_float_to_bf16(hc_bf16_to_float(b));
        uint16_t bwant = b_special && (b & 0x7f) ? (uint16_t)(b | 0x40) : b;
        if (bback != bwant) fail_msg("bf16 round trip 0x%04x -> 0x%04x", b, bback);
        if (b_special) continue;
        /* just below, at and just above the tie above b */
        uint32_t x = (uint32_t)b << 16;
        uint16_t up = (uint16_t)(b + 1); /* may carry into Inf: right */
        assert_int_equal(hc_float_to_bf16(f32_of(x | 0x7fff)), b);
        assert_int_equal(hc_float_to_bf16(f32_of(x | 0x8000)), (b & 1) ? up : b);
        assert_int_equal(hc_float_to_bf16(f32_of(x | 0x8001)), up);
    }
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) static uint16_t f16c_from_float(float f)
{
    __m128i h = _mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return (uint16_t)_mm_extract_epi16(h, 0);
}
__attribute__((target("avx2,f16c"))) static float f16c_to_float(uint16_t h)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

static void check_f2h(uint32_t bits)
{
    float f = f32_of(bits);
    uint16_t mine = hc_float_to_half(f), hw = f16c_from_float(f);
    if (mine != hw) fail_msg("float 0x%08x -> half: 0x%04x, F16C says 0x%04x", bits, mine, hw);
}
#endif

/* The scalar conversions agree with the F16C instructions the vector kernels
 * use: every half, and floats around every rounding boundary. */
static void test_conversions_vs_f16c(void **state)
{
    (void)state;
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx2") || !hc_reduce_set_isa(HC_ISA_AVX2)) {
        hc_reduce_set_isa(best_isa);
        skip();
    }
    hc_reduce_set_isa(best_isa);
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint32_t mine = f32_bits(hc_half_to_float((uint16_t)h));
        uint32_t hw = f32_bits(f16c_to_float((uint16_t)h));
        if (mine != hw) fail_msg("half 0x%04x -> float: 0x%08x, F16C says 0x%08x", h, mine, hw);
        if ((h & 0x7c00) == 0x7c00) continue;
        /* the midpoint between h and the next half up (in magnitude) */
        double lo = hc_half_to_float((uint16_t)h);
        double hi = (h & 0x7fff) == 0x7bff ? (h & 0x8000 ? -65536.0 : 65536.0)
                                           : hc_half_to_float((uint16_t)(h + 1));
        uint32_t mid = f32_bits((float)((lo + hi) / 2));
        for (uint32_t d = 0; d < 3; d++)
            check_f2h(mid - 1 + d);
        check_f2h(f32_bits((float)lo) + 1);
    }
    for (uint64_t x = 0; x < 0x100000000ull; x += 4099)
        check_f2h((uint32_t)x);
#else
    skip();
#endif
}

/* ---- every ISA against the scalar reference ------------------------------- */

static void fill_random(hcomm_dtype_t dt, unsigned char *p, size_t n)
{
    static const uint64_t edges_int8[] = {0x80, 0x7f, 0, 0xff, 1};
    static const uint64_t edges_int32[] = {0x80000000u, 0x7fffffffu, 0, 0xffffffffu, 1};
    static const uint64_t edges_int64[] = {1ull << 63, INT64_MAX, 0, UINT64_MAX, 1};
    static const uint64_t edges_f16[] = {0x7e00, 0x7c01, 0xfe00, 0x7d23, 0x7c00, 0xfc00, 0x0000,
                                         0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff};
    static const uint64_t edges_bf16[] = {0x7fc0, 0x7f81, 0xffc0, 0x7f80, 0xff80, 0x0000, 0x8000,
                                          0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f};
    static const uint64_t edges_f32[] = {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fc12345u,
                                         0x7f800000u, 0xff800000u, 0,           0x80000000u,
                                         1,           0x80000001u, 0x007fffffu, 0x00800000u,
                                         0x7f7fffffu, 0xff7fffffu, 0x477ff000u, 0x477fe000u};
    static const uint64_t edges_f64[] = {0x7ff8000000000000ull,
                                         0x7ff0000000000001ull,
                                         0xfff8000000000000ull,
                                         0x7ff0000000000000ull,
                                         0xfff0000000000000ull,
                                         0,
                                         1ull << 63,
                                         1,
                                         0x000fffffffffffffull,
                                         0x7fefffffffffffffull,
                                         0xffefffffffffffffull};
    const uint64_t *edges;
    size_t nedges;
#define EDGES(a) (edges = (a), nedges = sizeof(a) / sizeof((a)[0]))
    switch (dt) {
    case HCOMM_INT8:
    case HCOMM_UINT8:
        EDGES(edges_int8);
        break;
    case HCOMM_INT32:
    case HCOMM_UINT32:
        EDGES(edges_int32);
        break;
    case HCOMM_INT64:
    case HCOMM_UINT64:
        EDGES(edges_int64);
        break;
    case HCOMM_FLOAT16:
        EDGES(edges_f16);
        break;
    case HCOMM_BFLOAT16:
        EDGES(edges_bf16);
        break;
    case HCOMM_FLOAT32:
        EDGES(edges_f32);
        break;
    default:
        EDGES(edges_f64);
        break;
    }
#undef EDGES
    size_t sz = esize[dt];
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng(), v = rng(), sign = r & 1;
        switch ((r >> 1) % 8) {
        case 0: /* an edge value */
            v = edges[(r >> 4) % nedges];
            break;
        case 1:
        case 2: /* any bit pattern */
            break;
        default: /* moderate magnitudes: cancellation, rounding ties, small products */
            switch (dt) {
            case HCOMM_FLOAT16:
                v = sign << 15 | ((r >> 8) % 11 + 10) << 10 | (v & 0x3ff);
                break;
            case HCOMM_BFLOAT16:
                v = sign << 15 | ((r >> 8) % 15 + 120) << 7 | (v & 0x7f);
                break;
            case HCOMM_FLOAT32:
                v = sign << 31 | ((r >> 8) % 15 + 120) << 23 | (v & 0x7fffff);
                break;
            case HCOMM_FLOAT64:
                v = sign << 63 | ((r >> 8) % 15 + 1016) << 52 | (v & 0xfffffffffffffull);
                break;
            default:
                v = (uint64_t)((int64_t)(v % 201) - 100);
                break;
            }
        }
        memcpy(p + i * sz, &v, sz); /* little-endian: the low bytes */
    }
}

enum { LAYOUT_ALIGNED, LAYOUT_ALIASED, LAYOUT_BYTE_OFF, LAYOUT_ELEM_OFF, LAYOUT_COUNT };
static const char *const layout_name[] = {"aligned", "dst==src0", "byte-offset", "odd-elem-offset"};
#define GUARD 64
#define MAXSRC 64

/* Runs one case on the current ISA in the given layout and compares with ref. */
static void run_layout(int layout, hcomm_dtype_t dt, hcomm_op_t op, int nsrc, size_t count,
                       int avg_div, unsigned char *const *data, const unsigned char *ref)
{
    size_t sz = esize[dt], bytes = count * sz;
    unsigned char *sbuf[MAXSRC], *dbuf;
    const void *srcs[MAXSRC];
    size_t doff = 0;
    if (layout == LAYOUT_BYTE_OFF)
        doff = 5;
    else if (layout == LAYOUT_ELEM_OFF)
        doff = 3 * sz;
    dbuf = malloc(doff + bytes + GUARD);
    assert_non_null(dbuf);
    memset(dbuf, 0xa5, doff + bytes + GUARD);
    unsigned char *dst = dbuf + doff;
    for (int j = 0; j < nsrc; j++) {
        size_t off = 0;
        if (layout == LAYOUT_BYTE_OFF)
            off = (size_t)(1 + 3 * j) % 64;
        else if (layout == LAYOUT_ELEM_OFF)
            off = (size_t)(2 * j + 1) * sz;
        /* exactly sized (at least 1 byte): ASan sees any read past the end */
        sbuf[j] = malloc(off + bytes ? off + bytes : 1);
        assert_non_null(sbuf[j]);
        memcpy(sbuf[j] + off, data[j], bytes);
        srcs[j] = sbuf[j] + off;
    }
    if (layout == LAYOUT_ALIASED) {
        memcpy(dst, data[0], bytes);
        srcs[0] = dst;
    }
    /* avg_div must be ignored by ops other than AVG */
    hc_reduce(dst, srcs, nsrc, count, dt, op, op == HCOMM_AVG ? avg_div : 3);
    if (memcmp(dst, ref, bytes) != 0) {
        size_t i = 0;
        while (memcmp(dst + i * sz, ref + i * sz, sz) == 0)
            i++;
        uint64_t got = 0, want = 0;
        memcpy(&got, dst + i * sz, sz);
        memcpy(&want, ref + i * sz, sz);
        fail_msg("%s %s %s nsrc %d count %zu avg_div %d %s: elem %zu got 0x%llx, ref 0x%llx",
                 hc_reduce_isa_name(hc_reduce_isa()), dtype_name[dt], op_name[op], nsrc, count,
                 avg_div, layout_name[layout], i, (unsigned long long)got,
                 (unsigned long long)want);
    }
    for (size_t b = 0; b < doff; b++)
        assert_int_equal(dbuf[b], 0xa5);
    for (size_t b = 0; b < GUARD; b++)
        assert_int_equal(dst[bytes + b], 0xa5);
    for (int j = 0; j < nsrc; j++)
        free(sbuf[j]);
    free(dbuf);
}

static void run_matrix(const int *nsrcs, size_t n_nsrcs, const size_t *counts, size_t n_counts)
{
    for (int dt = 0; dt < HCOMM_DTYPE_COUNT; dt++) {
        for (size_t c = 0; c < n_counts; c++) {
            size_t count = counts[c], bytes = count * esize[dt];
            unsigned char *data[MAXSRC];
            for (int j = 0; j < MAXSRC; j++) {
                data[j] = malloc(bytes + 1);
                assert_non_null(data[j]);
                fill_random((hcomm_dtype_t)dt, data[j], count);
            }
            unsigned char *ref = malloc(bytes + 1);
            assert_non_null(ref);
            for (size_t s = 0; s < n_nsrcs; s++) {
                int nsrc = nsrcs[s];
                for (int op = 0; op < HCOMM_OP_COUNT; op++) {
                    int divs[3] = {0, nsrc, 7};
                    int ndiv = op == HCOMM_AVG ? 3 : 1;
                    for (int d = 0; d < ndiv; d++) {
                        const void *srcs[MAXSRC];
                        for (int j = 0; j < nsrc; j++)
                            srcs[j] = data[j];
                        memset(ref, 0, bytes + 1);
                        hc_reduce_scalar(ref, srcs, nsrc, count, (hcomm_dtype_t)dt, (hcomm_op_t)op,
                                         divs[d]);
                        for (int k = 0; k < n_isas; k++) {
                            assert_true(hc_reduce_set_isa(isas[k]));
                            for (int l = 0; l < LAYOUT_COUNT; l++)
                                run_layout(l, (hcomm_dtype_t)dt, (hcomm_op_t)op, nsrc, count,
                                           divs[d], data, ref);
                        }
                    }
                }
            }
            for (int j = 0; j < MAXSRC; j++)
                free(data[j]);
            free(ref);
        }
    }
    hc_reduce_set_isa(best_isa);
}

static void test_isa_matrix(void **state)
{
    (void)state;
    static const int nsrcs[] = {1, 2, 3, 8};
    static const size_t counts[] = {0, 1, 7, 15, 16, 17, 63, 64, 65, 1023, 4097};
    run_matrix(nsrcs, sizeof(nsrcs) / sizeof(nsrcs[0]), counts, sizeof(counts) / sizeof(counts[0]));
}

static void test_isa_many_inputs(void **state)
{
    (void)state;
    static const int nsrcs[] = {64};
    static const size_t counts[] = {129};
    run_matrix(nsrcs, 1, counts, 1);
}

static void test_bad_args(void **state)
{
    (void)state;
    int8_t a[4] = {1, 2, 3, 4}, d[4] = {9, 9, 9, 9};
    const void *srcs[2] = {a, a};
    hc_reduce(d, srcs, 0, 4, HCOMM_INT8, HCOMM_SUM, 0);
    assert_non_null(strstr(hcomm_last_error(), "nsrc"));
    hc_reduce(d, srcs, 65, 4, HCOMM_INT8, HCOMM_SUM, 0);
    hc_reduce(d, srcs, 2, 4, (hcomm_dtype_t)99, HCOMM_SUM, 0);
    assert_non_null(strstr(hcomm_last_error(), "dtype"));
    hc_reduce(d, srcs, 2, 4, HCOMM_INT8, (hcomm_op_t)-1, 0);
    assert_non_null(strstr(hcomm_last_error(), "op"));
    hc_reduce(d, srcs, 2, 4, HCOMM_INT8, HCOMM_AVG, -2);
    assert_non_null(strstr(hcomm_last_error(), "avg_div"));
    hc_reduce(NULL, srcs, 2, 4, HCOMM_INT8, HCOMM_SUM, 0);
    assert_non_null(strstr(hcomm_last_error(), "dst"));
    const void *bad[2] = {a, NULL};
    hc_reduce_scalar(d, bad, 2, 4, HCOMM_INT8, HCOMM_SUM, 0);
    assert_non_null(strstr(hcomm_last_error(), "srcs[j]"));
    for (int i = 0; i < 4; i++)
        assert_int_equal(d[i], 9);
    hc_reduce(NULL, NULL, 2, 0, HCOMM_INT8, HCOMM_SUM, 0); /* count 0: nothing to touch */
    hc_reduce(d, srcs, 2, 4, HCOMM_INT8, HCOMM_SUM, 0);
    assert_int_equal(d[3], 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_forces_isa), /* first: the ISA is chosen at first use */
        cmocka_unit_test(test_hand_int),
        cmocka_unit_test(test_hand_fp16_bf16),
        cmocka_unit_test(test_hand_f32_f64),
        cmocka_unit_test(test_conversions_hand),
        cmocka_unit_test(test_conversions_exhaustive),
        cmocka_unit_test(test_conversions_vs_f16c),
        cmocka_unit_test(test_isa_matrix),
        cmocka_unit_test(test_isa_many_inputs),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
