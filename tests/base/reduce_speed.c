/*
 * Micro-benchmark of the reduction kernels (not a test; run by hand):
 *   reduce_speed [bytes per input (default 1 MiB)] [nsrc (default 2)] [seconds per case (0.2)]
 * For each ISA the CPU has, times SUM over f32, bf16 and fp16 (and the other
 * dtypes) and prints GB/s counting bytes read plus bytes written, the traffic
 * the kernel moves: (nsrc + 1) * bytes per call. Buffers are 64-byte aligned
 * and stay hot in cache when they fit. Each figure is the best of 5 windows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/reduce.h"

int main(int argc, char **argv)
{
    size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (1u << 20);
    int nsrc = argc > 2 ? atoi(argv[2]) : 2;
    double secs = argc > 3 ? atof(argv[3]) : 0.2;
    if (bytes < 64 || nsrc < 1 || nsrc > HC_REDUCE_MAX_SRCS || secs <= 0) {
        fprintf(stderr, "usage: %s [bytes>=64] [nsrc 1..%d] [seconds]\n", argv[0],
                HC_REDUCE_MAX_SRCS);
        return 2;
    }
    bytes &= ~(size_t)63;
    void *src[HC_REDUCE_MAX_SRCS], *dst = aligned_alloc(64, bytes);
    if (!dst) return 1;
    for (int j = 0; j < nsrc; j++) {
        src[j] = aligned_alloc(64, bytes);
        if (!src[j]) return 1;
        /* 0x3c: small finite values in every dtype, no NaN/Inf slow paths */
        memset(src[j], 0x3c, bytes);
    }
    memset(dst, 0, bytes);

    static const struct {
        hcomm_dtype_t dt;
        size_t size;
        const char *name;
    } types[] = {{HCOMM_FLOAT32, 4, "f32"}, {HCOMM_BFLOAT16, 2, "bf16"}, {HCOMM_FLOAT16, 2, "fp16"},
                 {HCOMM_FLOAT64, 8, "f64"}, {HCOMM_INT32, 4, "int32"},   {HCOMM_INT8, 1, "int8"}};

    printf("SUM, %zu bytes per input, nsrc %d, GB/s = (nsrc+1)*bytes/time\n", bytes, nsrc);
    printf("%-11s", "isa");
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
        printf("%10s", types[t].name);
    printf("\n");
    for (int isa = HC_ISA_SCALAR; isa <= HC_ISA_AVX512_FP16; isa++) {
        if (!hc_reduce_set_isa((hc_isa_t)isa)) continue;
        printf("%-11s", hc_reduce_isa_name((hc_isa_t)isa));
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
            size_t count = bytes / types[t].size;
            const void *const *srcs = (const void *const *)src;
            hc_reduce(dst, srcs, nsrc, count, types[t].dt, HCOMM_SUM, 0); /* warm up */
            /* best of 5 windows: the machine is shared, the best is the kernel */
            double gbs = 0;
            for (int w = 0; w < 5; w++) {
                uint64_t iters = 0, t0 = hc_time_ns(), t1;
                do {
                    for (int k = 0; k < 8; k++)
                        hc_reduce(dst, srcs, nsrc, count, types[t].dt, HCOMM_SUM, 0);
                    iters += 8;
                    t1 = hc_time_ns();
                } while ((double)(t1 - t0) < secs * 1e9 / 5);
                gbs = HC_MAX(gbs, (double)iters * (double)bytes * (nsrc + 1) / (double)(t1 - t0));
            }
            printf("%10.1f", gbs);
            fflush(stdout);
        }
        printf("\n");
    }
    for (int j = 0; j < nsrc; j++)
        free(src[j]);
    free(dst);
    return 0;
}
