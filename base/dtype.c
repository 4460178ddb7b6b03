/* Element sizes and names of the public dtypes and ops (base/dtype.h). */
#include "base/dtype.h"

const size_t hc_dtype_sizes[HCOMM_DTYPE_COUNT] = {
    [HCOMM_INT8] = 1,    [HCOMM_UINT8] = 1,    [HCOMM_INT32] = 4,   [HCOMM_UINT32] = 4,
    [HCOMM_INT64] = 8,   [HCOMM_UINT64] = 8,   [HCOMM_FLOAT16] = 2, [HCOMM_BFLOAT16] = 2,
    [HCOMM_FLOAT32] = 4, [HCOMM_FLOAT64] = 8,
};

static const char *const hc_dtype_names[HCOMM_DTYPE_COUNT] = {
    [HCOMM_INT8] = "int8",       [HCOMM_UINT8] = "uint8",       [HCOMM_INT32] = "int32",
    [HCOMM_UINT32] = "uint32",   [HCOMM_INT64] = "int64",       [HCOMM_UINT64] = "uint64",
    [HCOMM_FLOAT16] = "float16", [HCOMM_BFLOAT16] = "bfloat16", [HCOMM_FLOAT32] = "float32",
    [HCOMM_FLOAT64] = "float64",
};

static const char *const hc_op_names[HCOMM_OP_COUNT] = {
    [HCOMM_SUM] = "sum", [HCOMM_PROD] = "prod", [HCOMM_MAX] = "max",
    [HCOMM_MIN] = "min", [HCOMM_AVG] = "avg",
};

const char *hc_dtype_name(hcomm_dtype_t dtype)
{
    return (unsigned)dtype < HCOMM_DTYPE_COUNT ? hc_dtype_names[dtype] : "an unknown dtype";
}

const char *hc_op_name(hcomm_op_t op)
{
    return (unsigned)op < HCOMM_OP_COUNT ? hc_op_names[op] : "an unknown op";
}
