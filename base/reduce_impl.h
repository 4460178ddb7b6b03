/*
 * Internals shared by the reduction kernels of each ISA (reduce.c,
 * reduce_avx2.c, reduce_avx512.c): the kernel signature, the per-ISA table
 * fillers and the scalar helpers vector code uses for tails and for the
 * integer AVG division. Not for use outside base/reduce*.c and their tests.
 */
#ifndef HC_BASE_REDUCE_IMPL_H
#define HC_BASE_REDUCE_IMPL_H

#include "base/reduce.h"

#include <string.h>

/* One kernel per (dtype, op): arguments already validated, count > 0. */
typedef void (*hc_reduce_fn_t)(void *dst, const void *const *srcs, int nsrc, size_t count,
                               int avg_div);
typedef hc_reduce_fn_t hc_reduce_table_t[HCOMM_DTYPE_COUNT][HCOMM_OP_COUNT];

/* Each fills the entries it has a kernel for and leaves the others alone, so
 * tables layer: scalar, then AVX2 over it, then AVX-512 over that. */
void hc_reduce_scalar_fill(hc_reduce_table_t tbl);
void hc_reduce_avx2_fill(hc_reduce_table_t tbl);
void hc_reduce_avx512_fill(hc_reduce_table_t tbl);
/* False when the compiler could not build the AVX512_FP16 kernels. */
bool hc_reduce_avx512fp16_fill(hc_reduce_table_t tbl);

/* Runs the scalar kernel of (dtype, op) on elements [start, count) of every
 * input: the tail a vector loop leaves. */
void hc_reduce_scalar_tail(void *dst, const void *const *srcs, int nsrc, size_t start, size_t count,
                           hcomm_dtype_t dtype, hcomm_op_t op, int avg_div);

/* Integer AVG second pass: dst[i] = dst[i] / avg_div (truncating, signed for
 * signed types), dst holding the wrapped sums. avg_div > 0. */
void hc_reduce_int_div(void *dst, size_t count, hcomm_dtype_t dtype, int avg_div);

/* Canonical quiet NaNs (see reduce.h). */
#define HC_F32_QNAN_BITS 0x7fc00000u
#define HC_F64_QNAN_BITS 0x7ff8000000000000ull

static inline uint32_t hc_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float hc_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

#endif /* HC_BASE_REDUCE_IMPL_H */
