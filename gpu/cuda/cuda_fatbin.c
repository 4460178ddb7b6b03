/*
 * hcomm's device kernels (cuda_kernels.cu) as nvcc built them at build time:
 * a fatbin with SASS for each architecture in HC_CUDA_FATBIN_ARCHS plus PTX,
 * pulled into libhcomm's read-only data by the assembler's .incbin, so that
 * no CUDA library or file is needed at run time (cuModuleLoadData takes the
 * bytes). A build without nvcc has none: hc_cuda_fatbin_size is 0 and GPU
 * reductions say they are unavailable (gpu/CMakeLists.txt).
 */
#include "gpu/cuda/cuda_int.h"

#ifdef HC_CUDA_FATBIN_PATH
/* 64-byte aligned (cuModuleLoadData wants at least 8); hidden, like every
 * library symbol. */
__asm__(".section .rodata\n"
        ".balign 64\n"
        ".globl hc_cuda_fatbin_bytes\n"
        ".hidden hc_cuda_fatbin_bytes\n"
        "hc_cuda_fatbin_bytes:\n"
        ".incbin \"" HC_CUDA_FATBIN_PATH "\"\n"
        ".globl hc_cuda_fatbin_end\n"
        ".hidden hc_cuda_fatbin_end\n"
        "hc_cuda_fatbin_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const unsigned char hc_cuda_fatbin_bytes[];
extern const unsigned char hc_cuda_fatbin_end[];
const unsigned char *const hc_cuda_fatbin = hc_cuda_fatbin_bytes;
/* a link-time constant difference cannot initialise a const in C: computed
 * by the assembler instead */
__asm__(".section .data.rel.ro\n"
        ".balign 8\n"
        ".globl hc_cuda_fatbin_size\n"
        ".hidden hc_cuda_fatbin_size\n"
        "hc_cuda_fatbin_size:\n"
        ".quad hc_cuda_fatbin_end - hc_cuda_fatbin_bytes\n"
        ".previous\n");
const char hc_cuda_fatbin_archs[] = HC_CUDA_FATBIN_ARCHS;
#else
const unsigned char *const hc_cuda_fatbin = NULL;
const size_t hc_cuda_fatbin_size = 0;
const char hc_cuda_fatbin_archs[] = "";
#endif
