/*
 * Reduction kernels: dst[i] = op(src[0][i], ..., src[n-1][i]). One scalar
 * reference implementation and AVX2 / AVX-512 / AVX512_FP16 variants (not
 * AVX512_BF16: its conversion flushes subnormals), chosen once at init from
 * CPUID (HCOMM_REDUCE_ISA=scalar|avx2|avx512|avx512fp16 forces one, for
 * tests). fp16 and bf16 accumulate in fp32 across all n inputs and are rounded
 * to nearest-even once; integer arithmetic wraps; MAX/MIN compare in the
 * element type. Every ISA gives bit-identical results to the scalar
 * reference.
 *
 * Floating-point results, precisely (float32, float64, and float16/bfloat16
 * through their fp32 accumulator):
 *  - SUM/AVG/PROD fold left to right: ((src0 op src1) op src2) ..., each step
 *    rounded to nearest-even in the accumulator type; AVG then divides once by
 *    avg_div converted to the accumulator type. fp16/bf16 are rounded to their
 *    own format once, at the end (overflow gives Inf).
 *  - MAX/MIN are IEEE 754-2019 maximum/minimum: NaN propagates (any NaN input
 *    makes the result NaN, like SUM: a diverged rank must not be hidden), and
 *    -0.0 < +0.0 (max(-0, +0) = +0, min(-0, +0) = -0) whatever the order.
 *  - A NaN result is always the canonical quiet NaN, positive with a zero
 *    payload (f32 0x7fc00000, f64 0x7ff8000000000000, fp16 0x7e00, bf16
 *    0x7fc0), whatever the input NaNs were: which NaN hardware returns depends
 *    on operand order, which compilers do not preserve. This holds for nsrc == 1
 *    too (a copy, except that NaNs become canonical).
 */
#ifndef HC_BASE_REDUCE_H
#define HC_BASE_REDUCE_H

#include "base/hc_base.h"

/* HC_ISA_AVX512_FP16: AVX-512 plus native AVX512_FP16 arithmetic for 2-input
 * fp16 SUM/PROD (same bits as the fp32 path, see reduce_avx512.c). */
typedef enum { HC_ISA_SCALAR, HC_ISA_AVX2, HC_ISA_AVX512, HC_ISA_AVX512_FP16 } hc_isa_t;

/* Picks the best ISA the CPU has (or the forced one). Thread-safe, idempotent. */
void hc_reduce_init(void);
hc_isa_t hc_reduce_isa(void);
const char *hc_reduce_isa_name(hc_isa_t isa);
/* Forces an ISA (tests); returns false when the CPU lacks it. */
bool hc_reduce_set_isa(hc_isa_t isa);

/* The most inputs one hc_reduce() call takes. */
#define HC_REDUCE_MAX_SRCS 64

/* dst[i] = op over srcs[0..nsrc-1][i], 1 <= nsrc <= HC_REDUCE_MAX_SRCS. Any
 * pointer alignment is fine. Bad arguments (unknown dtype/op, nsrc out of
 * range, NULL buffer with count > 0, AVG with avg_div < 0) are logged as errors
 * and leave dst untouched: callers validate user input before this point. dst may equal srcs[0]
 * (and only srcs[0]). For HCOMM_AVG the inputs are summed, and when avg_div > 0 the sum is divided
 * by avg_div (floats: true division, rounded once; integers: truncating division of the wrapped
 * sum); avg_div == 0 leaves the plain sum (an intermediate step). For other ops avg_div is ignored.
 * Initializes the dispatch on first use; no allocation, no lock after that. */
void hc_reduce(void *dst, const void *const *srcs, int nsrc, size_t count, hcomm_dtype_t dtype,
               hcomm_op_t op, int avg_div);

/* The scalar reference, always available (used by tests and odd tails). */
void hc_reduce_scalar(void *dst, const void *const *srcs, int nsrc, size_t count,
                      hcomm_dtype_t dtype, hcomm_op_t op, int avg_div);

/* fp16 / bf16 <-> fp32 conversions. To 16 bits: round to nearest even,
 * overflow to Inf, subnormals exact; a NaN stays NaN with its sign and the top
 * bits of its payload, quiet bit set (like F16C vcvtps2ph). From fp16: exact,
 * signalling NaNs quieted (like vcvtph2ps). From bf16: exact (a shift). */
float hc_half_to_float(uint16_t h);
uint16_t hc_float_to_half(float f);
float hc_bf16_to_float(uint16_t b);
uint16_t hc_float_to_bf16(float f);

#endif /* HC_BASE_REDUCE_H */
