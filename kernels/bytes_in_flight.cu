// Lesson 09, bytes in flight: how long one load takes, and how many bytes a kernel keeps asking
// for.
//  - pointer_chase: one thread follows a chain of indices, each load's address being the value the
//    previous load returned, so exactly one load is in flight: time / steps is the latency of one
//    access (pointer_chase_l1: the same through L1).
//  - scale_<width>_x<U>: y = a * x, like lesson 00's scale, with 4-byte (float) or 16-byte (float4)
//    loads, and U loads issued by each thread before the first is used. A grid-stride loop, so a
//    launch of any grid covers n; the lesson picks the grid to set how many threads each SM holds.
// Bytes in flight per SM = resident threads x width x U
// (rmsnorm_lessons.lessons.lesson09.inflight).

// __ldcg: cached in L2 only, not in L1 (PTX ld.global.cg), so every hop of a chain larger than L2
// goes to DRAM.
extern "C" __global__ void pointer_chase(const unsigned* next, long long steps, unsigned* out) {
    unsigned j = 0;
    // the next address is the value just loaded
    for (long long s = 0; s < steps; s++) j = __ldcg(next + j);
    *out = j;  // keeps the chain from being optimised away
}

// __ldca: cached in L1 as well (PTX ld.global.ca), so a chain that fits in L1, walked once, is
// found there.
extern "C" __global__ void pointer_chase_l1(const unsigned* next, long long steps, unsigned* out) {
    unsigned j = 0;
    for (long long s = 0; s < steps; s++) j = __ldca(next + j);
    *out = j;
}

__device__ __forceinline__ float times(float a, float v) { return a * v; }
__device__ __forceinline__ float4 times(float a, float4 v) {
    return make_float4(a * v.x, a * v.y, a * v.z, a * v.w);
}

// T: float (4-byte loads) or float4 (16-byte loads); U: loads issued per thread before the first
// use. Thread t of the grid handles elements t, t + S, ..., t + (U - 1) S (S = threads in the grid,
// so a warp's loads are contiguous), then t + U S, ...; the last, partial step one element at a
// time.
template <typename T, int U>
__device__ __forceinline__ void scale_loop(T* y, const T* x, float a, long long n) {
    const long long S = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    #pragma unroll 1  // one step of U loads at a time: what the lesson counts
    for (; i + (U - 1) * S < n; i += U * S) {
        T v[U];
        #pragma unroll
        for (int k = 0; k < U; k++) v[k] = x[i + k * S];  // U loads issued ...
        #pragma unroll
        for (int k = 0; k < U; k++) y[i + k * S] = times(a, v[k]);  // ... before the first is used
    }
    // the tail: fewer than U elements left for this thread
    for (; i < n; i += S) y[i] = times(a, x[i]);
}

// n: elements of T (floats, or float4s). __launch_bounds__(256, 8): at most 32 registers, so 8
// blocks of 256 (2048 threads) fit on an SM of sm_80..sm_90 (65536 registers) and the lesson's
// threads per SM are real.
// SCALE(name, T, U): the extern "C" kernel `name`, scale_loop<T, U> with those launch bounds.
#define SCALE(NAME, T, U)                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 8)                                           \
    NAME(T* y, const T* x, float a, long long n) { scale_loop<T, U>(y, x, a, n); }
SCALE(scale_f32_x1, float, 1)
SCALE(scale_f32_x4, float, 4)
SCALE(scale_f128_x1, float4, 1)
SCALE(scale_f128_x4, float4, 4)
