/* test_cuda_abi: the values as CUDA's own cuda.h has them (built only
 * where the headers were found at configure time). */
#include <cuda.h>
#include <stddef.h>

#include "cuda_abi_list.h"

#define HC_ABI_ENTRY_(x) (long long)(x),
const long long hc_cuda_abi_cuda[] = {HC_CUDA_ABI_LIST(HC_ABI_ENTRY_)};
