/*
 * Reduction kernels: dst[i] = op(src[0][i], ..., src[n-1][i]). One scalar
 * reference implementation and AVX2 / AVX-512 (incl. AVX512_BF16 where
 * useful) variants, chosen once at init from CPUID (HCOMM_REDUCE_ISA=
 * scalar|avx2|avx512 forces one, for tests). fp16 and bf16 accumulate in
 * fp32 across all n inputs and are rounded to nearest-even once; integer
 * arithmetic wraps; MAX/MIN compare in the element type; NaN propagates for
 * SUM/PROD and follows IEEE fmax/fmin semantics of the scalar reference for
 * MAX/MIN (every ISA gives bit-identical results to the scalar reference).
 */
#ifndef HC_COLL_REDUCE_H
#define HC_COLL_REDUCE_H

#include "core/hc_base.h"

typedef enum { HC_ISA_SCALAR, HC_ISA_AVX2, HC_ISA_AVX512 } hc_isa_t;

/* Picks the best ISA the CPU has (or the forced one). Thread-safe, idempotent. */
void hc_reduce_init(void);
hc_isa_t hc_reduce_isa(void);
const char *hc_reduce_isa_name(hc_isa_t isa);
/* Forces an ISA (tests); returns false when the CPU lacks it. */
bool hc_reduce_set_isa(hc_isa_t isa);

/* dst[i] = op over srcs[0..nsrc-1][i], nsrc >= 1. dst may equal srcs[0] (and
 * only srcs[0]). For HCOMM_AVG the inputs are summed, and when avg_div > 0 the
 * sum is divided by avg_div (floats: true division, rounded once; integers:
 * truncating division of the wrapped sum); avg_div == 0 leaves the plain sum
 * (an intermediate step). For other ops avg_div is ignored. */
void hc_reduce(void *dst, const void *const *srcs, int nsrc, size_t count, hcomm_dtype_t dtype,
               hcomm_op_t op, int avg_div);

/* The scalar reference, always available (used by tests and odd tails). */
void hc_reduce_scalar(void *dst, const void *const *srcs, int nsrc, size_t count,
                      hcomm_dtype_t dtype, hcomm_op_t op, int avg_div);

/* fp16 / bf16 <-> fp32 conversions (round to nearest even, NaN kept quiet). */
float hc_half_to_float(uint16_t h);
uint16_t hc_float_to_half(float f);
float hc_bf16_to_float(uint16_t b);
uint16_t hc_float_to_bf16(float f);

#endif /* HC_COLL_REDUCE_H */
