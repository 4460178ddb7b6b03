/*
 * AVX2 (+F16C, FMA) reduction kernels, compiled with function-level target
 * attributes so the library needs no -march flag; reduce.c only calls them
 * after CPUID/XGETBV said the CPU and OS support them.
 *
 * Same shape as the AVX-512 kernels (reduce_avx512.c): 32 bytes of every input
 * per step, inputs folded left to right like the scalar reference, a separate
 * loop for two inputs. AVX2 has no masked byte/word loads, so the tail (less
 * than one vector) goes to the scalar reference, which computes the same bits.
 *
 * AVX2 lacks 64-bit max/min and multiplies: max/min are a signed 64-bit
 * compare (unsigned: with the sign bits flipped) and a blend; 64-bit PROD
 * stays scalar.
 */
#include "base/reduce_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define HC_AVX2 __attribute__((target("avx2,f16c,fma")))
#define HC_INLINE2 static inline __attribute__((always_inline)) HC_AVX2
#define HC_PH_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

#define HC_PTR(p, i, sz) ((const char *)(p) + (i) * (sz))
#define HC_WPTR(p, i, sz) ((char *)(p) + (i) * (sz))

/* ---- loads and stores ---------------------------------------------------- */

HC_INLINE2 __m256 hc2_ld_f32(const void *p, size_t i)
{
    return _mm256_loadu_ps((const float *)HC_PTR(p, i, 4));
}
HC_INLINE2 void hc2_st_f32(void *p, size_t i, __m256 v)
{
    _mm256_storeu_ps((float *)HC_WPTR(p, i, 4), v);
}
HC_INLINE2 __m256d hc2_ld_f64(const void *p, size_t i)
{
    return _mm256_loadu_pd((const double *)HC_PTR(p, i, 8));
}
HC_INLINE2 void hc2_st_f64(void *p, size_t i, __m256d v)
{
    _mm256_storeu_pd((double *)HC_WPTR(p, i, 8), v);
}
HC_INLINE2 __m256 hc2_ld_f16(const void *p, size_t i)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)HC_PTR(p, i, 2)));
}
HC_INLINE2 void hc2_st_f16(void *p, size_t i, __m256 v)
{
    _mm_storeu_si128((__m128i *)HC_WPTR(p, i, 2), _mm256_cvtps_ph(v, HC_PH_RNE));
}
/* bf16 in place, even/odd halves of 32-bit lanes (see reduce_avx512.c). */
typedef struct {
    __m256 e, o;
} hc2_bp_t;
HC_INLINE2 hc2_bp_t hc2_ld_bf16(const void *p, size_t i)
{
    __m256i x = _mm256_loadu_si256((const __m256i *)HC_PTR(p, i, 2));
    hc2_bp_t v = {_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)),
                  _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u)))};
    return v;
}
HC_INLINE2 __m256i hc2_bf16_rne(__m256 v)
{
    __m256i x = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
}
HC_INLINE2 void hc2_st_bf16(void *p, size_t i, hc2_bp_t v)
{
    __m256i e = _mm256_srli_epi32(hc2_bf16_rne(v.e), 16);
    __m256i o = _mm256_and_si256(hc2_bf16_rne(v.o), _mm256_set1_epi32((int)0xffff0000u));
    _mm256_storeu_si256((__m256i *)HC_WPTR(p, i, 2), _mm256_or_si256(e, o));
}
#define HC2_INT_LDST(tag, sz)                                                                      \
    HC_INLINE2 __m256i hc2_ld_##tag(const void *p, size_t i)                                       \
    {                                                                                              \
        return _mm256_loadu_si256((const __m256i *)HC_PTR(p, i, sz));                              \
    }                                                                                              \
    HC_INLINE2 void hc2_st_##tag(void *p, size_t i, __m256i v)                                     \
    {                                                                                              \
        _mm256_storeu_si256((__m256i *)HC_WPTR(p, i, sz), v);                                      \
    }
HC2_INT_LDST(i8, 1)
HC2_INT_LDST(i32, 4)
HC2_INT_LDST(i64, 8)

/* ---- operations (see reduce_avx512.c for the MAX/MIN rules) ---------------- */

HC_INLINE2 __m256 hc2_ps_add(__m256 a, __m256 b)
{
    return _mm256_add_ps(a, b);
}
HC_INLINE2 __m256 hc2_ps_mul(__m256 a, __m256 b)
{
    return _mm256_mul_ps(a, b);
}
HC_INLINE2 __m256 hc2_ps_max(__m256 a, __m256 b)
{
    __m256 r = _mm256_max_ps(a, b);
    r = _mm256_blendv_ps(r, _mm256_and_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_ps(r, _mm256_add_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}
HC_INLINE2 __m256 hc2_ps_min(__m256 a, __m256 b)
{
    __m256 r = _mm256_min_ps(a, b);
    r = _mm256_blendv_ps(r, _mm256_or_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_ps(r, _mm256_add_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}
HC_INLINE2 __m256 hc2_ps_fin(__m256 v, __m256 div)
{
    (void)div;
    __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32((int)HC_F32_QNAN_BITS));
    return _mm256_blendv_ps(v, qnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}
HC_INLINE2 __m256 hc2_ps_fin_avg(__m256 v, __m256 div)
{
    return hc2_ps_fin(_mm256_div_ps(v, div), div);
}
HC_INLINE2 __m256 hc2_ps_div(int avg_div)
{
    return _mm256_set1_ps((float)avg_div);
}

#define HC2_BP_OP(op)                                                                              \
    HC_INLINE2 hc2_bp_t hc2_bp_##op(hc2_bp_t a, hc2_bp_t b)                                        \
    {                                                                                              \
        hc2_bp_t r = {hc2_ps_##op(a.e, b.e), hc2_ps_##op(a.o, b.o)};                               \
        return r;                                                                                  \
    }
HC2_BP_OP(add)
HC2_BP_OP(mul)
HC2_BP_OP(max)
HC2_BP_OP(min)
HC2_BP_OP(fin)
HC2_BP_OP(fin_avg)
HC_INLINE2 hc2_bp_t hc2_bp_div(int avg_div)
{
    hc2_bp_t r = {hc2_ps_div(avg_div), hc2_ps_div(avg_div)};
    return r;
}

HC_INLINE2 __m256d hc2_pd_add(__m256d a, __m256d b)
{
    return _mm256_add_pd(a, b);
}
HC_INLINE2 __m256d hc2_pd_mul(__m256d a, __m256d b)
{
    return _mm256_mul_pd(a, b);
}
HC_INLINE2 __m256d hc2_pd_max(__m256d a, __m256d b)
{
    __m256d r = _mm256_max_pd(a, b);
    r = _mm256_blendv_pd(r, _mm256_and_pd(a, b), _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_pd(r, _mm256_add_pd(a, b), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
}
HC_INLINE2 __m256d hc2_pd_min(__m256d a, __m256d b)
{
    __m256d r = _mm256_min_pd(a, b);
    r = _mm256_blendv_pd(r, _mm256_or_pd(a, b), _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_pd(r, _mm256_add_pd(a, b), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
}
HC_INLINE2 __m256d hc2_pd_fin(__m256d v, __m256d div)
{
    (void)div;
    __m256d qnan = _mm256_castsi256_pd(_mm256_set1_epi64x((long long)HC_F64_QNAN_BITS));
    return _mm256_blendv_pd(v, qnan, _mm256_cmp_pd(v, v, _CMP_UNORD_Q));
}
HC_INLINE2 __m256d hc2_pd_fin_avg(__m256d v, __m256d div)
{
    return hc2_pd_fin(_mm256_div_pd(v, div), div);
}
HC_INLINE2 __m256d hc2_pd_div(int avg_div)
{
    return _mm256_set1_pd((double)avg_div);
}

HC_INLINE2 __m256i hc2_i8_mul(__m256i a, __m256i b)
{
    __m256i even = _mm256_mullo_epi16(a, b);
    __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
    return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0xff)),
                           _mm256_slli_epi16(odd, 8));
}
HC_INLINE2 __m256i hc2_i64_gt(__m256i a, __m256i b)
{
    return _mm256_cmpgt_epi64(a, b);
}
HC_INLINE2 __m256i hc2_u64_gt(__m256i a, __m256i b)
{
    __m256i bias = _mm256_set1_epi64x(INT64_MIN);
    return _mm256_cmpgt_epi64(_mm256_xor_si256(a, bias), _mm256_xor_si256(b, bias));
}
HC_INLINE2 __m256i hc2_int_fin(__m256i v, __m256i div)
{
    (void)div;
    return v;
}
HC_INLINE2 __m256i hc2_int_div(int avg_div)
{
    (void)avg_div;
    return _mm256_setzero_si256();
}
#define HC2_INT_OP(name, expr)                                                                     \
    HC_INLINE2 __m256i hc2_##name(__m256i a, __m256i b)                                            \
    {                                                                                              \
        return expr;                                                                               \
    }
HC2_INT_OP(i8_add, _mm256_add_epi8(a, b))
HC2_INT_OP(i8_max, _mm256_max_epi8(a, b))
HC2_INT_OP(i8_min, _mm256_min_epi8(a, b))
HC2_INT_OP(u8_max, _mm256_max_epu8(a, b))
HC2_INT_OP(u8_min, _mm256_min_epu8(a, b))
HC2_INT_OP(i32_add, _mm256_add_epi32(a, b))
HC2_INT_OP(i32_mul, _mm256_mullo_epi32(a, b))
HC2_INT_OP(i32_max, _mm256_max_epi32(a, b))
HC2_INT_OP(i32_min, _mm256_min_epi32(a, b))
HC2_INT_OP(u32_max, _mm256_max_epu32(a, b))
HC2_INT_OP(u32_min, _mm256_min_epu32(a, b))
HC2_INT_OP(i64_add, _mm256_add_epi64(a, b))
HC2_INT_OP(i64_max, _mm256_blendv_epi8(b, a, hc2_i64_gt(a, b)))
HC2_INT_OP(i64_min, _mm256_blendv_epi8(a, b, hc2_i64_gt(a, b)))
HC2_INT_OP(u64_max, _mm256_blendv_epi8(b, a, hc2_u64_gt(a, b)))
HC2_INT_OP(u64_min, _mm256_blendv_epi8(a, b, hc2_u64_gt(a, b)))

/* ---- the kernel template ---------------------------------------------------
 * As HC512_KERNEL; DT/OPC name the scalar kernel that finishes the tail. */
#define HC2_KERNEL(name, LS, V, N, OP, FIN, K, DT, OPC)                                            \
    HC_AVX2 static void name(void *dst, const void *const *srcs, int nsrc, size_t count,           \
                             int avg_div)                                                          \
    {                                                                                              \
        const V k = K(avg_div);                                                                    \
        const void *s0 = srcs[0];                                                                  \
        size_t i = 0;                                                                              \
        if (nsrc == 2) {                                                                           \
            const void *s1 = srcs[1];                                                              \
            for (; i + (N) <= count; i += (N))                                                     \
                hc2_st_##LS(dst, i, FIN(OP(hc2_ld_##LS(s0, i), hc2_ld_##LS(s1, i)), k));           \
        } else {                                                                                   \
            for (; i + (N) <= count; i += (N)) {                                                   \
                V acc = hc2_ld_##LS(s0, i);                                                        \
                for (int j = 1; j < nsrc; j++)                                                     \
                    acc = OP(acc, hc2_ld_##LS(srcs[j], i));                                        \
                hc2_st_##LS(dst, i, FIN(acc, k));                                                  \
            }                                                                                      \
        }                                                                                          \
        hc_reduce_scalar_tail(dst, srcs, nsrc, i, count, DT, OPC, avg_div);                        \
    }

#define HC2_FLOAT(dt, tag, V, N, C)                                                                \
    HC2_KERNEL(hc2_sum_##tag, tag, V, N, hc2_##C##_add, hc2_##C##_fin, hc2_##C##_div, dt,          \
               HCOMM_SUM)                                                                          \
    HC2_KERNEL(hc2_prod_##tag, tag, V, N, hc2_##C##_mul, hc2_##C##_fin, hc2_##C##_div, dt,         \
               HCOMM_PROD)                                                                         \
    HC2_KERNEL(hc2_max_##tag, tag, V, N, hc2_##C##_max, hc2_##C##_fin, hc2_##C##_div, dt,          \
               HCOMM_MAX)                                                                          \
    HC2_KERNEL(hc2_min_##tag, tag, V, N, hc2_##C##_min, hc2_##C##_fin, hc2_##C##_div, dt,          \
               HCOMM_MIN)                                                                          \
    HC2_KERNEL(hc2_avgdiv_##tag, tag, V, N, hc2_##C##_add, hc2_##C##_fin_avg, hc2_##C##_div, dt,   \
               HCOMM_AVG)                                                                          \
    HC_AVX2 static void hc2_avg_##tag(void *dst, const void *const *srcs, int nsrc, size_t count,  \
                                      int avg_div)                                                 \
    {                                                                                              \
        if (avg_div > 0)                                                                           \
            hc2_avgdiv_##tag(dst, srcs, nsrc, count, avg_div);                                     \
        else                                                                                       \
            hc2_sum_##tag(dst, srcs, nsrc, count, avg_div);                                        \
    }

HC2_FLOAT(HCOMM_FLOAT32, f32, __m256, 8, ps)
HC2_FLOAT(HCOMM_FLOAT16, f16, __m256, 8, ps)
HC2_FLOAT(HCOMM_BFLOAT16, bf16, hc2_bp_t, 16, bp)
HC2_FLOAT(HCOMM_FLOAT64, f64, __m256d, 4, pd)

/* Integers: the tail of a shared signed/unsigned SUM/PROD kernel may use
 * either type's scalar kernel, they compute the same bits. */
#define HC2_INT_KERNEL(name, LS, N, OP, DT, OPC)                                                   \
    HC2_KERNEL(name, LS, __m256i, N, OP, hc2_int_fin, hc2_int_div, DT, OPC)
#define HC2_INT(dt, tag, LS, N)                                                                    \
    HC2_INT_KERNEL(hc2_sum_##tag, LS, N, hc2_##LS##_add, dt, HCOMM_SUM)                            \
    HC2_INT_KERNEL(hc2_max_##tag, LS, N, hc2_##tag##_max, dt, HCOMM_MAX)                           \
    HC2_INT_KERNEL(hc2_min_##tag, LS, N, hc2_##tag##_min, dt, HCOMM_MIN)                           \
    HC_AVX2 static void hc2_avg_##tag(void *dst, const void *const *srcs, int nsrc, size_t count,  \
                                      int avg_div)                                                 \
    {                                                                                              \
        hc2_sum_##tag(dst, srcs, nsrc, count, avg_div);                                            \
        if (avg_div > 0) hc_reduce_int_div(dst, count, dt, avg_div);                               \
    }

HC2_INT(HCOMM_INT8, i8, i8, 32)
HC2_INT(HCOMM_UINT8, u8, i8, 32)
HC2_INT(HCOMM_INT32, i32, i32, 8)
HC2_INT(HCOMM_UINT32, u32, i32, 8)
HC2_INT(HCOMM_INT64, i64, i64, 4)
HC2_INT(HCOMM_UINT64, u64, i64, 4)
HC2_INT_KERNEL(hc2_prod_i8, i8, 32, hc2_i8_mul, HCOMM_INT8, HCOMM_PROD)
HC2_INT_KERNEL(hc2_prod_i32, i32, 8, hc2_i32_mul, HCOMM_INT32, HCOMM_PROD)

void hc_reduce_avx2_fill(hc_reduce_table_t t)
{
#define HC_FILL(dt, tag)                                                                           \
    t[dt][HCOMM_SUM] = hc2_sum_##tag;                                                              \
    t[dt][HCOMM_MAX] = hc2_max_##tag;                                                              \
    t[dt][HCOMM_MIN] = hc2_min_##tag;                                                              \
    t[dt][HCOMM_AVG] = hc2_avg_##tag;
    HC_FILL(HCOMM_INT8, i8)
    HC_FILL(HCOMM_UINT8, u8)
    HC_FILL(HCOMM_INT32, i32)
    HC_FILL(HCOMM_UINT32, u32)
    HC_FILL(HCOMM_INT64, i64)
    HC_FILL(HCOMM_UINT64, u64)
    HC_FILL(HCOMM_FLOAT16, f16)
    HC_FILL(HCOMM_BFLOAT16, bf16)
    HC_FILL(HCOMM_FLOAT32, f32)
    HC_FILL(HCOMM_FLOAT64, f64)
#undef HC_FILL
    t[HCOMM_INT8][HCOMM_PROD] = hc2_prod_i8;
    t[HCOMM_UINT8][HCOMM_PROD] = hc2_prod_i8;
    t[HCOMM_INT32][HCOMM_PROD] = hc2_prod_i32;
    t[HCOMM_UINT32][HCOMM_PROD] = hc2_prod_i32;
    t[HCOMM_FLOAT16][HCOMM_PROD] = hc2_prod_f16;
    t[HCOMM_BFLOAT16][HCOMM_PROD] = hc2_prod_bf16;
    t[HCOMM_FLOAT32][HCOMM_PROD] = hc2_prod_f32;
    t[HCOMM_FLOAT64][HCOMM_PROD] = hc2_prod_f64;
    /* 64-bit PROD: the scalar kernel (AVX2 has no 64-bit multiply) */
}

#else /* !__x86_64__ */

void hc_reduce_avx2_fill(hc_reduce_table_t t)
{
    (void)t; /* never selected: hc_reduce_cpu_detect reports no AVX2 */
}

#endif
