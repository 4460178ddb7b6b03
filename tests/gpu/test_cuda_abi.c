/*
 * gpu/cuda/cuda_api.h declares the part of CUDA's driver API the backend
 * calls, so that libhcomm builds without CUDA's headers: every value and
 * layout there must be cuda.h's. Each differing entry is named; exit 1.
 */
#include <stddef.h>
#include <stdio.h>

#include "cuda_abi_list.h"

extern const long long hc_cuda_abi_hc[], hc_cuda_abi_cuda[];
#define HC_ABI_NAME_(x) #x,
static const char *const names[] = {HC_CUDA_ABI_LIST(HC_ABI_NAME_)};

int main(void)
{
    int bad = 0;
    size_t n = sizeof(names) / sizeof(names[0]);
    for (size_t i = 0; i < n; i++)
        if (hc_cuda_abi_hc[i] != hc_cuda_abi_cuda[i]) {
            printf("FAIL: %s is %lld in cuda_api.h, %lld in cuda.h\n", names[i], hc_cuda_abi_hc[i],
                   hc_cuda_abi_cuda[i]);
            bad = 1;
        }
    printf("%zu values and layouts of cuda_api.h checked against cuda.h: %s\n", n,
           bad ? "differences" : "equal");
    return bad;
}
