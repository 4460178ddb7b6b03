/*
 * AVX-512 (F, BW, VL, DQ) reduction kernels, compiled with function-level
 * target attributes so the library needs no -march flag; reduce.c only calls
 * them after CPUID/XGETBV said the CPU and OS support them.
 *
 * Each kernel walks 64 bytes of every input per step, folding the inputs left
 * to right exactly like the scalar reference, then finishes with a masked
 * step for the tail (masked loads never touch memory beyond count). Inputs
 * == 2 gets its own loop: it is the common case (reduce-scatter steps) and
 * keeps the source pointers in registers.
 *
 * fp16 goes through vcvtph2ps/vcvtps2ph (round to nearest even). bf16 is
 * widened in place (see hc512_bp_t) and rounded with integer RNE arithmetic rather than AVX512_BF16
 * vcvtne2ps2bf16, because that instruction flushes subnormal inputs to zero and the result must
 * match the scalar reference bit for bit. NaNs are made canonical before the store (reduce.h), so
 * the bf16 rounding never sees a NaN payload.
 */
#include "base/reduce_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define HC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c,fma")))
#define HC_INLINE512 static inline __attribute__((always_inline)) HC_AVX512
#define HC_PH_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* ---- loads and stores, one set per dtype: (p, i) is element i of p ------ */

#define HC_PTR(p, i, sz) ((const char *)(p) + (i) * (sz))
#define HC_WPTR(p, i, sz) ((char *)(p) + (i) * (sz))

HC_INLINE512 __m512 hc512_ld_f32(const void *p, size_t i)
{
    return _mm512_loadu_ps(HC_PTR(p, i, 4));
}
HC_INLINE512 __m512 hc512_ldm_f32(const void *p, size_t i, __mmask16 m)
{
    return _mm512_maskz_loadu_ps(m, HC_PTR(p, i, 4));
}
HC_INLINE512 void hc512_st_f32(void *p, size_t i, __m512 v)
{
    _mm512_storeu_ps(HC_WPTR(p, i, 4), v);
}
HC_INLINE512 void hc512_stm_f32(void *p, size_t i, __m512 v, __mmask16 m)
{
    _mm512_mask_storeu_ps(HC_WPTR(p, i, 4), m, v);
}

HC_INLINE512 __m512d hc512_ld_f64(const void *p, size_t i)
{
    return _mm512_loadu_pd(HC_PTR(p, i, 8));
}
HC_INLINE512 __m512d hc512_ldm_f64(const void *p, size_t i, __mmask8 m)
{
    return _mm512_maskz_loadu_pd(m, HC_PTR(p, i, 8));
}
HC_INLINE512 void hc512_st_f64(void *p, size_t i, __m512d v)
{
    _mm512_storeu_pd(HC_WPTR(p, i, 8), v);
}
HC_INLINE512 void hc512_stm_f64(void *p, size_t i, __m512d v, __mmask8 m)
{
    _mm512_mask_storeu_pd(HC_WPTR(p, i, 8), m, v);
}

HC_INLINE512 __m512 hc512_ld_f16(const void *p, size_t i)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)HC_PTR(p, i, 2)));
}
HC_INLINE512 __m512 hc512_ldm_f16(const void *p, size_t i, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, HC_PTR(p, i, 2)));
}
HC_INLINE512 void hc512_st_f16(void *p, size_t i, __m512 v)
{
    _mm256_storeu_si256((__m256i *)HC_WPTR(p, i, 2), _mm512_cvtps_ph(v, HC_PH_RNE));
}
HC_INLINE512 void hc512_stm_f16(void *p, size_t i, __m512 v, __mmask16 m)
{
    _mm256_mask_storeu_epi16(HC_WPTR(p, i, 2), m, _mm512_cvtps_ph(v, HC_PH_RNE));
}

/* bf16 stays in place: a 64-byte load holds 32 bf16, the even ones in the
 * low halves of the 32-bit lanes, the odd ones in the high halves. Shifting
 * the even ones up and masking the odd ones gives two fp32 vectors with no
 * cross-lane shuffle; elementwise ops do not care which lane holds which
 * element. The store rounds (integer RNE) and puts each half back. */
typedef struct {
    __m512 e, o;
} hc512_bp_t;
HC_INLINE512 hc512_bp_t hc512_bf16_split(__m512i x)
{
    hc512_bp_t v = {_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)),
                    _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u)))};
    return v;
}
/* x + 0x7fff + lsb: RNE to the top 16 bits; a carry into the exponent (even
 * into Inf) is right. */
HC_INLINE512 __m512i hc512_bf16_rne(__m512 v)
{
    __m512i x = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
}
HC_INLINE512 __m512i hc512_bf16_join(hc512_bp_t v)
{
    __m512i e = _mm512_srli_epi32(hc512_bf16_rne(v.e), 16);
    __m512i o = _mm512_and_si512(hc512_bf16_rne(v.o), _mm512_set1_epi32((int)0xffff0000u));
    return _mm512_or_si512(e, o);
}
HC_INLINE512 hc512_bp_t hc512_ld_bf16(const void *p, size_t i)
{
    return hc512_bf16_split(_mm512_loadu_si512(HC_PTR(p, i, 2)));
}
HC_INLINE512 hc512_bp_t hc512_ldm_bf16(const void *p, size_t i, __mmask32 m)
{
    return hc512_bf16_split(_mm512_maskz_loadu_epi16(m, HC_PTR(p, i, 2)));
}
HC_INLINE512 void hc512_st_bf16(void *p, size_t i, hc512_bp_t v)
{
    _mm512_storeu_si512(HC_WPTR(p, i, 2), hc512_bf16_join(v));
}
HC_INLINE512 void hc512_stm_bf16(void *p, size_t i, hc512_bp_t v, __mmask32 m)
{
    _mm512_mask_storeu_epi16(HC_WPTR(p, i, 2), m, hc512_bf16_join(v));
}

#define HC512_INT_LDST(tag, sz, M, bits)                                                           \
    HC_INLINE512 __m512i hc512_ld_##tag(const void *p, size_t i)                                   \
    {                                                                                              \
        return _mm512_loadu_si512(HC_PTR(p, i, sz));                                               \
    }                                                                                              \
    HC_INLINE512 __m512i hc512_ldm_##tag(const void *p, size_t i, M m)                             \
    {                                                                                              \
        return _mm512_maskz_loadu_epi##bits(m, HC_PTR(p, i, sz));                                  \
    }                                                                                              \
    HC_INLINE512 void hc512_st_##tag(void *p, size_t i, __m512i v)                                 \
    {                                                                                              \
        _mm512_storeu_si512(HC_WPTR(p, i, sz), v);                                                 \
    }                                                                                              \
    HC_INLINE512 void hc512_stm_##tag(void *p, size_t i, __m512i v, M m)                           \
    {                                                                                              \
        _mm512_mask_storeu_epi##bits(HC_WPTR(p, i, sz), m, v);                                     \
    }
HC512_INT_LDST(i8, 1, __mmask64, 8)
HC512_INT_LDST(i32, 4, __mmask16, 32)
HC512_INT_LDST(i64, 8, __mmask8, 64)

/* ---- operations ---------------------------------------------------------- */

HC_INLINE512 __m512 hc512_ps_add(__m512 a, __m512 b)
{
    return _mm512_add_ps(a, b);
}
HC_INLINE512 __m512 hc512_ps_mul(__m512 a, __m512 b)
{
    return _mm512_mul_ps(a, b);
}
/* reduce.h MAX/MIN: equal operands (only +-0 differ) combine their bits,
 * AND giving +0 for max, OR giving -0 for min; a NaN operand gives a NaN
 * (a + b), made canonical by the finish step. */
HC_INLINE512 __m512 hc512_ps_max(__m512 a, __m512 b)
{
    __m512 r = _mm512_max_ps(a, b);
    r = _mm512_mask_and_ps(r, _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), a, b);
    return _mm512_mask_add_ps(r, _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), a, b);
}
HC_INLINE512 __m512 hc512_ps_min(__m512 a, __m512 b)
{
    __m512 r = _mm512_min_ps(a, b);
    r = _mm512_mask_or_ps(r, _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), a, b);
    return _mm512_mask_add_ps(r, _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), a, b);
}
HC_INLINE512 __m512 hc512_ps_fin(__m512 v, __m512 div)
{
    (void)div;
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(_mm512_set1_epi32(HC_F32_QNAN_BITS)));
}
HC_INLINE512 __m512 hc512_ps_fin_avg(__m512 v, __m512 div)
{
    return hc512_ps_fin(_mm512_div_ps(v, div), div);
}
HC_INLINE512 __m512 hc512_ps_div(int avg_div)
{
    return _mm512_set1_ps((float)avg_div);
}

/* The bf16 pair applies the fp32 op to both halves. */
#define HC512_BP_OP(op)                                                                            \
    HC_INLINE512 hc512_bp_t hc512_bp_##op(hc512_bp_t a, hc512_bp_t b)                              \
    {                                                                                              \
        hc512_bp_t r = {hc512_ps_##op(a.e, b.e), hc512_ps_##op(a.o, b.o)};                         \
        return r;                                                                                  \
    }
HC512_BP_OP(add)
HC512_BP_OP(mul)
HC512_BP_OP(max)
HC512_BP_OP(min)
HC512_BP_OP(fin)
HC512_BP_OP(fin_avg)
HC_INLINE512 hc512_bp_t hc512_bp_div(int avg_div)
{
    hc512_bp_t r = {hc512_ps_div(avg_div), hc512_ps_div(avg_div)};
    return r;
}

HC_INLINE512 __m512d hc512_pd_add(__m512d a, __m512d b)
{
    return _mm512_add_pd(a, b);
}
HC_INLINE512 __m512d hc512_pd_mul(__m512d a, __m512d b)
{
    return _mm512_mul_pd(a, b);
}
HC_INLINE512 __m512d hc512_pd_max(__m512d a, __m512d b)
{
    __m512d r = _mm512_max_pd(a, b);
    r = _mm512_mask_and_pd(r, _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ), a, b);
    return _mm512_mask_add_pd(r, _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q), a, b);
}
HC_INLINE512 __m512d hc512_pd_min(__m512d a, __m512d b)
{
    __m512d r = _mm512_min_pd(a, b);
    r = _mm512_mask_or_pd(r, _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ), a, b);
    return _mm512_mask_add_pd(r, _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q), a, b);
}
HC_INLINE512 __m512d hc512_pd_fin(__m512d v, __m512d div)
{
    (void)div;
    __mmask8 nan = _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_pd(v, nan,
                              _mm512_castsi512_pd(_mm512_set1_epi64((long long)HC_F64_QNAN_BITS)));
}
HC_INLINE512 __m512d hc512_pd_fin_avg(__m512d v, __m512d div)
{
    return hc512_pd_fin(_mm512_div_pd(v, div), div);
}
HC_INLINE512 __m512d hc512_pd_div(int avg_div)
{
    return _mm512_set1_pd((double)avg_div);
}

/* No 8-bit multiply: multiply the even and the odd bytes as 16-bit lanes;
 * the low byte of each 16-bit product is the wrapped 8-bit product. */
HC_INLINE512 __m512i hc512_i8_mul(__m512i a, __m512i b)
{
    __m512i even = _mm512_mullo_epi16(a, b);
    __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
    return _mm512_mask_blend_epi8(0xaaaaaaaaaaaaaaaaull, even, _mm512_slli_epi16(odd, 8));
}
HC_INLINE512 __m512i hc512_int_fin(__m512i v, __m512i div)
{
    (void)div;
    return v;
}
HC_INLINE512 __m512i hc512_int_div(int avg_div)
{
    (void)avg_div;
    return _mm512_setzero_si512();
}
#define HC512_INT_OP(name, expr)                                                                   \
    HC_INLINE512 __m512i hc512_##name(__m512i a, __m512i b)                                        \
    {                                                                                              \
        return expr;                                                                               \
    }
HC512_INT_OP(i8_add, _mm512_add_epi8(a, b))
HC512_INT_OP(i8_max, _mm512_max_epi8(a, b))
HC512_INT_OP(i8_min, _mm512_min_epi8(a, b))
HC512_INT_OP(u8_max, _mm512_max_epu8(a, b))
HC512_INT_OP(u8_min, _mm512_min_epu8(a, b))
HC512_INT_OP(i32_add, _mm512_add_epi32(a, b))
HC512_INT_OP(i32_mul, _mm512_mullo_epi32(a, b))
HC512_INT_OP(i32_max, _mm512_max_epi32(a, b))
HC512_INT_OP(i32_min, _mm512_min_epi32(a, b))
HC512_INT_OP(u32_max, _mm512_max_epu32(a, b))
HC512_INT_OP(u32_min, _mm512_min_epu32(a, b))
HC512_INT_OP(i64_add, _mm512_add_epi64(a, b))
HC512_INT_OP(i64_mul, _mm512_mullo_epi64(a, b))
HC512_INT_OP(i64_max, _mm512_max_epi64(a, b))
HC512_INT_OP(i64_min, _mm512_min_epi64(a, b))
HC512_INT_OP(u64_max, _mm512_max_epu64(a, b))
HC512_INT_OP(u64_min, _mm512_min_epu64(a, b))

/* ---- the kernel template ---------------------------------------------------
 * LS: load/store tag, V: vector type, M: mask type, N: lanes, OP: fold step,
 * FIN(acc, k): finish (NaN canonicalization, AVG division), K: make k from
 * avg_div. */
#define HC512_KERNEL(name, LS, V, M, N, OP, FIN, K)                                                \
    HC_AVX512 static void name(void *dst, const void *const *srcs, int nsrc, size_t count,         \
                               int avg_div)                                                        \
    {                                                                                              \
        const V k = K(avg_div);                                                                    \
        const void *s0 = srcs[0];                                                                  \
        size_t i = 0;                                                                              \
        if (nsrc == 2) {                                                                           \
            const void *s1 = srcs[1];                                                              \
            for (; i + (N) <= count; i += (N))                                                     \
                hc512_st_##LS(dst, i, FIN(OP(hc512_ld_##LS(s0, i), hc512_ld_##LS(s1, i)), k));     \
        } else {                                                                                   \
            for (; i + (N) <= count; i += (N)) {                                                   \
                V acc = hc512_ld_##LS(s0, i);                                                      \
                for (int j = 1; j < nsrc; j++)                                                     \
                    acc = OP(acc, hc512_ld_##LS(srcs[j], i));                                      \
                hc512_st_##LS(dst, i, FIN(acc, k));                                                \
            }                                                                                      \
        }                                                                                          \
        if (i < count) {                                                                           \
            M m = (M)((1ull << (count - i)) - 1u);                                                 \
            V acc = hc512_ldm_##LS(s0, i, m);                                                      \
            for (int j = 1; j < nsrc; j++)                                                         \
                acc = OP(acc, hc512_ldm_##LS(srcs[j], i, m));                                      \
            hc512_stm_##LS(dst, i, FIN(acc, k), m);                                                \
        }                                                                                          \
    }

/* Float kinds: SUM, PROD, MAX, MIN, and AVG (the SUM kernel when avg_div is
 * 0, so the division can be unconditional). */
#define HC512_FLOAT(tag, LS, V, M, N, C)                                                           \
    HC512_KERNEL(hc512_sum_##tag, LS, V, M, N, hc512_##C##_add, hc512_##C##_fin, hc512_##C##_div)  \
    HC512_KERNEL(hc512_prod_##tag, LS, V, M, N, hc512_##C##_mul, hc512_##C##_fin, hc512_##C##_div) \
    HC512_KERNEL(hc512_max_##tag, LS, V, M, N, hc512_##C##_max, hc512_##C##_fin, hc512_##C##_div)  \
    HC512_KERNEL(hc512_min_##tag, LS, V, M, N, hc512_##C##_min, hc512_##C##_fin, hc512_##C##_div)  \
    HC512_KERNEL(hc512_avgdiv_##tag, LS, V, M, N, hc512_##C##_add, hc512_##C##_fin_avg,            \
                 hc512_##C##_div)                                                                  \
    HC_AVX512 static void hc512_avg_##tag(void *dst, const void *const *srcs, int nsrc,            \
                                          size_t count, int avg_div)                               \
    {                                                                                              \
        if (avg_div > 0)                                                                           \
            hc512_avgdiv_##tag(dst, srcs, nsrc, count, avg_div);                                   \
        else                                                                                       \
            hc512_sum_##tag(dst, srcs, nsrc, count, avg_div);                                      \
    }

HC512_FLOAT(f32, f32, __m512, __mmask16, 16, ps)
HC512_FLOAT(f16, f16, __m512, __mmask16, 16, ps)
HC512_FLOAT(bf16, bf16, hc512_bp_t, __mmask32, 32, bp)
HC512_FLOAT(f64, f64, __m512d, __mmask8, 8, pd)

/* Integer kinds: signed and unsigned share SUM/PROD (wrapping arithmetic is
 * sign-blind); AVG is the SUM kernel plus a scalar division pass. */
#define HC512_INT_KERNEL(name, LS, M, N, OP)                                                       \
    HC512_KERNEL(name, LS, __m512i, M, N, OP, hc512_int_fin, hc512_int_div)
#define HC512_INT(dt, tag, stag, LS, M, N)                                                         \
    HC512_INT_KERNEL(hc512_max_##tag, LS, M, N, hc512_##tag##_max)                                 \
    HC512_INT_KERNEL(hc512_min_##tag, LS, M, N, hc512_##tag##_min)                                 \
    HC_AVX512 static void hc512_avg_##tag(void *dst, const void *const *srcs, int nsrc,            \
                                          size_t count, int avg_div)                               \
    {                                                                                              \
        hc512_sum_##stag(dst, srcs, nsrc, count, avg_div);                                         \
        if (avg_div > 0) hc_reduce_int_div(dst, count, dt, avg_div);                               \
    }

HC512_INT_KERNEL(hc512_sum_i8, i8, __mmask64, 64, hc512_i8_add)
HC512_INT_KERNEL(hc512_prod_i8, i8, __mmask64, 64, hc512_i8_mul)
HC512_INT_KERNEL(hc512_sum_i32, i32, __mmask16, 16, hc512_i32_add)
HC512_INT_KERNEL(hc512_prod_i32, i32, __mmask16, 16, hc512_i32_mul)
HC512_INT_KERNEL(hc512_sum_i64, i64, __mmask8, 8, hc512_i64_add)
HC512_INT_KERNEL(hc512_prod_i64, i64, __mmask8, 8, hc512_i64_mul)
HC512_INT(HCOMM_INT8, i8, i8, i8, __mmask64, 64)
HC512_INT(HCOMM_UINT8, u8, i8, i8, __mmask64, 64)
HC512_INT(HCOMM_INT32, i32, i32, i32, __mmask16, 16)
HC512_INT(HCOMM_UINT32, u32, i32, i32, __mmask16, 16)
HC512_INT(HCOMM_INT64, i64, i64, i64, __mmask8, 8)
HC512_INT(HCOMM_UINT64, u64, i64, i64, __mmask8, 8)

void hc_reduce_avx512_fill(hc_reduce_table_t t)
{
#define HC_FILL(dt, tag, stag)                                                                     \
    t[dt][HCOMM_SUM] = hc512_sum_##stag;                                                           \
    t[dt][HCOMM_PROD] = hc512_prod_##stag;                                                         \
    t[dt][HCOMM_MAX] = hc512_max_##tag;                                                            \
    t[dt][HCOMM_MIN] = hc512_min_##tag;                                                            \
    t[dt][HCOMM_AVG] = hc512_avg_##tag;
    HC_FILL(HCOMM_INT8, i8, i8)
    HC_FILL(HCOMM_UINT8, u8, i8)
    HC_FILL(HCOMM_INT32, i32, i32)
    HC_FILL(HCOMM_UINT32, u32, i32)
    HC_FILL(HCOMM_INT64, i64, i64)
    HC_FILL(HCOMM_UINT64, u64, i64)
    HC_FILL(HCOMM_FLOAT16, f16, f16)
    HC_FILL(HCOMM_BFLOAT16, bf16, bf16)
    HC_FILL(HCOMM_FLOAT32, f32, f32)
    HC_FILL(HCOMM_FLOAT64, f64, f64)
#undef HC_FILL
}

/* ---- AVX512_FP16: native fp16 arithmetic for two inputs ---------------------
 * One fp16 add or multiply of two fp16 values equals the same operation in
 * fp32 rounded to fp16: double rounding is innocuous when the wider format has
 * at least 2p + 2 significand bits (24 >= 2 * 11 + 2), and fp32 holds every
 * fp16 subnormal exactly. So with two inputs the native instruction gives the
 * reference's bits at 32 elements per instruction; more inputs (or AVG) need
 * the fp32 accumulator. Needs compiler support for the intrinsics (GCC 12;
 * clang only with -mavx512fp16, which we do not use). */
#if (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12) || defined(__AVX512FP16__)
#define HC_AVX512FP16                                                                              \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512fp16,avx2,f16c,fma")))

#define HC512H_KERNEL(name, OPH, fallback)                                                         \
    HC_AVX512FP16 static void name(void *dst, const void *const *srcs, int nsrc, size_t count,     \
                                   int avg_div)                                                    \
    {                                                                                              \
        if (nsrc != 2) {                                                                           \
            fallback(dst, srcs, nsrc, count, avg_div);                                             \
            return;                                                                                \
        }                                                                                          \
        const __m512i qnan = _mm512_set1_epi16(0x7e00);                                            \
        const void *s0 = srcs[0], *s1 = srcs[1];                                                   \
        size_t i = 0;                                                                              \
        for (; i + 32 <= count; i += 32) {                                                         \
            __m512h r = OPH(_mm512_loadu_ph(HC_PTR(s0, i, 2)), _mm512_loadu_ph(HC_PTR(s1, i, 2))); \
            __mmask32 nan = _mm512_cmp_ph_mask(r, r, _CMP_UNORD_Q);                                \
            _mm512_storeu_si512(HC_WPTR(dst, i, 2),                                                \
                                _mm512_mask_mov_epi16(_mm512_castph_si512(r), nan, qnan));         \
        }                                                                                          \
        if (i < count) {                                                                           \
            __mmask32 m = (__mmask32)((1ull << (count - i)) - 1u);                                 \
            __m512h a = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, HC_PTR(s0, i, 2)));        \
            __m512h b = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, HC_PTR(s1, i, 2)));        \
            __m512h r = OPH(a, b);                                                                 \
            __mmask32 nan = _mm512_cmp_ph_mask(r, r, _CMP_UNORD_Q);                                \
            _mm512_mask_storeu_epi16(HC_WPTR(dst, i, 2), m,                                        \
                                     _mm512_mask_mov_epi16(_mm512_castph_si512(r), nan, qnan));    \
        }                                                                                          \
    }
HC512H_KERNEL(hc512h_sum_f16, _mm512_add_ph, hc512_sum_f16)
HC512H_KERNEL(hc512h_prod_f16, _mm512_mul_ph, hc512_prod_f16)

bool hc_reduce_avx512fp16_fill(hc_reduce_table_t t)
{
    t[HCOMM_FLOAT16][HCOMM_SUM] = hc512h_sum_f16;
    t[HCOMM_FLOAT16][HCOMM_PROD] = hc512h_prod_f16;
    return true;
}
#else
bool hc_reduce_avx512fp16_fill(hc_reduce_table_t t)
{
    (void)t;
    return false;
}
#endif

#else /* !__x86_64__ */

void hc_reduce_avx512_fill(hc_reduce_table_t t)
{
    (void)t; /* never selected: hc_reduce_cpu_detect reports no AVX-512 */
}

bool hc_reduce_avx512fp16_fill(hc_reduce_table_t t)
{
    (void)t;
    return false;
}

#endif
