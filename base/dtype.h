/*
 * The public dtypes and reduction ops as the layers see them: element sizes
 * (without the exported hcomm_dtype_size's PLT) and names for messages.
 * Tables, no state: every layer may use them.
 */
#ifndef HC_BASE_DTYPE_H
#define HC_BASE_DTYPE_H

#include "hcomm.h"

#include <stddef.h>

extern const size_t hc_dtype_sizes[HCOMM_DTYPE_COUNT];
/* "float32", "sum": for messages (never NULL, also out of range). */
const char *hc_dtype_name(hcomm_dtype_t dtype);
const char *hc_op_name(hcomm_op_t op);
static inline size_t hc_dtype_size(hcomm_dtype_t dtype)
{
    return (unsigned)dtype < HCOMM_DTYPE_COUNT ? hc_dtype_sizes[dtype] : 0;
}

#endif /* HC_BASE_DTYPE_H */
