/* test_cuda_abi: the values as gpu/cuda/cuda_api.h declares them. */
#include "gpu/cuda/cuda_api.h"
#include "cuda_abi_list.h"

#define HC_ABI_ENTRY_(x) (long long)(x),
const long long hc_cuda_abi_hc[] = {HC_CUDA_ABI_LIST(HC_ABI_ENTRY_)};
