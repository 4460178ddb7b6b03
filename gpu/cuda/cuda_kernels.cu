/*
 * hcomm's device kernels, compiled by nvcc into a fatbin at build time
 * (gpu/CMakeLists.txt: SASS for every architecture nvcc supports from sm_75,
 * plus PTX) and embedded in libhcomm (cuda_fatbin.c); gpu/cuda/cuda.c loads
 * it with cuModuleLoadData and launches by name with cuLaunchKernel.
 *
 * Reductions: hc_reduce_<dtype>_<op>(dst, src, count, avg_div), dst[i] =
 * op(dst[i], src[i]), with base/reduce.h's results bit for bit: integer
 * arithmetic wraps (done in the unsigned type), AVG divides the wrapped sum
 * (truncating, as C); floats round to nearest-even at each step (__fadd_rn
 * and friends: no contraction into FMA whatever the flags), AVG divides once
 * by avg_div (0: the plain sum), MAX/MIN are IEEE 754-2019 maximum/minimum
 * (NaN propagates, -0 < +0), and a NaN result is the canonical quiet NaN;
 * fp16 and bf16 go through fp32 and are rounded once at the end. extern "C"
 * names, so that the host looks them up without C++ mangling.
 *
 * Vectorised: when dst and src are both 16-byte aligned, each thread moves
 * 16 bytes at a time (one uint4 load of each side, one store); the tail and
 * misaligned buffers go element by element.
 *
 * hc_wait_geq32(addr, value): the fallback of cuStreamWaitValue32 where the
 * device cannot (CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS... see cuda.c):
 * one thread spins until (int32_t)(*addr - value) >= 0.
 */
#include <stdint.h>

namespace {

struct f16_t {
    uint16_t bits;
};
struct bf16_t {
    uint16_t bits;
};

/* ---- fp16 / bf16 <-> fp32, exactly as base/reduce.c ----------------------- */

__device__ __forceinline__ float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) return __uint_as_float(sign | __float_as_uint(__fmul_rn((float)mant, 0x1p-24f)));
    if (exp == 0x1f) {
        if (mant == 0) return __uint_as_float(sign | 0x7f800000u);
        return __uint_as_float(sign | 0x7fc00000u | (mant << 13));
    }
    return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

__device__ __forceinline__ uint16_t float_to_half(float f)
{
    uint32_t x = __float_as_uint(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) {
        uint32_t h = ((ax >> 23) - 112u) << 10 | ((ax >> 13) & 0x3ffu);
        uint32_t rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    if (ax <= 0x33000000u) return sign;
    uint32_t exp = ax >> 23;
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp;
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

__device__ __forceinline__ float bf16_to_float(uint16_t b)
{
    return __uint_as_float((uint32_t)b << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16(float f)
{
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- the ops on the accumulator types -------------------------------------- */

enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG }; /* include/hcomm.h's order */

template <typename A> struct fp;
template <> struct fp<float> {
    typedef uint32_t U;
    __device__ static float add(float a, float b) { return __fadd_rn(a, b); }
    __device__ static float mul(float a, float b) { return __fmul_rn(a, b); }
    __device__ static float div(float a, int d) { return __fdiv_rn(a, (float)d); }
    __device__ static U bits(float a) { return __float_as_uint(a); }
    __device__ static float from(U u) { return __uint_as_float(u); }
    __device__ static float nan() { return __uint_as_float(0x7fc00000u); }
};
template <> struct fp<double> {
    typedef unsigned long long U;
    __device__ static double add(double a, double b) { return __dadd_rn(a, b); }
    __device__ static double mul(double a, double b) { return __dmul_rn(a, b); }
    __device__ static double div(double a, int d) { return __ddiv_rn(a, (double)d); }
    __device__ static U bits(double a) { return (U)__double_as_longlong(a); }
    __device__ static double from(U u) { return __longlong_as_double((long long)u); }
    __device__ static double nan() { return __longlong_as_double(0x7ff8000000000000ll); }
};

template <typename A, int OP> __device__ __forceinline__ A fp_op(A a, A b, int avg_div)
{
    typedef fp<A> F;
    A r;
    if (OP == OP_SUM || OP == OP_AVG) {
        r = F::add(a, b);
        if (OP == OP_AVG && avg_div > 0) r = F::div(r, avg_div);
    } else if (OP == OP_PROD) {
        r = F::mul(a, b);
    } else {
        if (a != a || b != b) return F::nan();
        if (a != b) {
            r = OP == OP_MAX ? (a > b ? a : b) : (a < b ? a : b);
        } else {
            typename F::U ua = F::bits(a), ub = F::bits(b);
            r = F::from(OP == OP_MAX ? (ua & ub) : (ua | ub));
        }
    }
    return r != r ? F::nan() : r;
}

template <typename T> struct uns;
template <> struct uns<int8_t> { typedef uint8_t type; };
template <> struct uns<uint8_t> { typedef uint8_t type; };
template <> struct uns<int32_t> { typedef uint32_t type; };
template <> struct uns<uint32_t> { typedef uint32_t type; };
template <> struct uns<long long> { typedef unsigned long long type; };
template <> struct uns<unsigned long long> { typedef unsigned long long type; };

/* One element: a = dst[i], b = src[i]; returns what dst[i] becomes. */
template <typename T, int OP> struct elem {
    /* integers, arithmetic in the unsigned type of the same width */
    __device__ static T run(T a, T b, int avg_div)
    {
        typedef typename uns<T>::type U;
        if (OP == OP_SUM) return (T)(U)((U)a + (U)b);
        if (OP == OP_AVG) {
            U acc = (U)((U)a + (U)b);
            if (avg_div > 0) acc = (U)((T)acc / avg_div);
            return (T)acc;
        }
        if (OP == OP_PROD) return (T)(U)((U)a * (U)b);
        if (OP == OP_MAX) return b > a ? b : a;
        return b < a ? b : a;
    }
};
template <int OP> struct elem<float, OP> {
    __device__ static float run(float a, float b, int d) { return fp_op<float, OP>(a, b, d); }
};
template <int OP> struct elem<double, OP> {
    __device__ static double run(double a, double b, int d) { return fp_op<double, OP>(a, b, d); }
};
template <int OP> struct elem<f16_t, OP> {
    __device__ static f16_t run(f16_t a, f16_t b, int d)
    {
        f16_t r = {float_to_half(fp_op<float, OP>(half_to_float(a.bits), half_to_float(b.bits), d))};
        return r;
    }
};
template <int OP> struct elem<bf16_t, OP> {
    __device__ static bf16_t run(bf16_t a, bf16_t b, int d)
    {
        bf16_t r = {float_to_bf16(fp_op<float, OP>(bf16_to_float(a.bits), bf16_to_float(b.bits), d))};
        return r;
    }
};

/* dst[i] = op(dst[i], src[i]), grid-stride; 16 bytes per step where both
 * are 16-byte aligned. */
template <typename T, int OP>
__device__ __forceinline__ void reduce(T *dst, const T *src, unsigned long long count, int avg_div)
{
    const unsigned long long tid = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    const unsigned long long nthreads = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long done = 0;
    if ((((uintptr_t)dst | (uintptr_t)src) & 15u) == 0) {
        const unsigned per = 16 / sizeof(T);
        const unsigned long long nvec = count / per;
        uint4 *dv = reinterpret_cast<uint4 *>(dst);
        const uint4 *sv = reinterpret_cast<const uint4 *>(src);
        for (unsigned long long v = tid; v < nvec; v += nthreads) {
            union {
                uint4 u;
                T e[16 / sizeof(T)];
            } a, b;
            a.u = dv[v];
            b.u = sv[v];
#pragma unroll
            for (unsigned k = 0; k < per; k++) a.e[k] = elem<T, OP>::run(a.e[k], b.e[k], avg_div);
            dv[v] = a.u;
        }
        done = nvec * per;
    }
    for (unsigned long long i = done + tid; i < count; i += nthreads)
        dst[i] = elem<T, OP>::run(dst[i], src[i], avg_div);
}

} // namespace

#define HC_KERNEL(tname, T, oname, OP)                                                             \
    extern "C" __global__ void hc_reduce_##tname##_##oname(T *dst, const T *src,                   \
                                                           unsigned long long count, int avg_div)  \
    {                                                                                              \
        reduce<T, OP>(dst, src, count, avg_div);                                                   \
    }
#define HC_KERNELS(tname, T)                                                                       \
    HC_KERNEL(tname, T, sum, OP_SUM)                                                               \
    HC_KERNEL(tname, T, prod, OP_PROD)                                                             \
    HC_KERNEL(tname, T, max, OP_MAX)                                                               \
    HC_KERNEL(tname, T, min, OP_MIN)                                                               \
    HC_KERNEL(tname, T, avg, OP_AVG)

/* the names are base/dtype.c's hc_dtype_name and hc_op_name */
HC_KERNELS(int8, int8_t)
HC_KERNELS(uint8, uint8_t)
HC_KERNELS(int32, int32_t)
HC_KERNELS(uint32, uint32_t)
HC_KERNELS(int64, long long)
HC_KERNELS(uint64, unsigned long long)
HC_KERNELS(float16, f16_t)
HC_KERNELS(bfloat16, bf16_t)
HC_KERNELS(float32, float)
HC_KERNELS(float64, double)

/* The fallback of cuStreamWaitValue32 (GEQ): one thread spins on the word
 * until (int32_t)(*addr - value) >= 0. The word is pinned host memory
 * (device-mapped) or device memory; volatile reads see the host's stores. */
extern "C" __global__ void hc_wait_geq32(const volatile unsigned *addr, unsigned value)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    while ((int)(*addr - value) < 0) __nanosleep(1000);
    __threadfence_system();
}
