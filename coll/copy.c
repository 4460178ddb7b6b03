/*
 * Large copies that bypass the cache on the way out. A collective's output
 * bigger than the caches is written once and not read again by this rank:
 * non-temporal stores skip the read-for-ownership of every destination line,
 * which on a memory-bound allreduce is a third of the DRAM traffic.
 */
#include "coll/copy.h"

#include <immintrin.h>
#include <string.h>

__attribute__((target("avx512f"))) static void hc_copy_nt_avx512(void *dst, const void *src,
                                                                  size_t len)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    if (head > len)
        head = len;
    memcpy(d, s, head);
    d += head;
    s += head;
    len -= head;
    size_t n = len & ~(size_t)255;
    for (size_t i = 0; i < n; i += 256) {
        __m512i a = _mm512_loadu_si512(s + i);
        __m512i b = _mm512_loadu_si512(s + i + 64);
        __m512i c = _mm512_loadu_si512(s + i + 128);
        __m512i e = _mm512_loadu_si512(s + i + 192);
        _mm512_stream_si512((void *)(d + i), a);
        _mm512_stream_si512((void *)(d + i + 64), b);
        _mm512_stream_si512((void *)(d + i + 128), c);
        _mm512_stream_si512((void *)(d + i + 192), e);
    }
    _mm_sfence();
    memcpy(d + n, s + n, len - n);
}

__attribute__((target("avx2"))) static void hc_copy_nt_avx2(void *dst, const void *src, size_t len)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (32 - ((uintptr_t)d & 31)) & 31;
    if (head > len)
        head = len;
    memcpy(d, s, head);
    d += head;
    s += head;
    len -= head;
    size_t n = len & ~(size_t)127;
    for (size_t i = 0; i < n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
        __m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
        _mm256_stream_si256((__m256i *)(d + i), a);
        _mm256_stream_si256((__m256i *)(d + i + 32), b);
        _mm256_stream_si256((__m256i *)(d + i + 64), c);
        _mm256_stream_si256((__m256i *)(d + i + 96), e);
    }
    _mm_sfence();
    memcpy(d + n, s + n, len - n);
}

void hc_copy_nt(void *dst, const void *src, size_t len)
{
    static int isa = -1;
    if (HC_UNLIKELY(isa < 0)) {
        __builtin_cpu_init();
        isa = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    if (isa == 2)
        hc_copy_nt_avx512(dst, src, len);
    else if (isa == 1)
        hc_copy_nt_avx2(dst, src, len);
    else
        memcpy(dst, src, len);
}
