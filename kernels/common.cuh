// common.cuh: the small toolbox every kernel of the course includes.
// Packed128 (a 16-byte vector of floats or bf16s), 128-bit load/store helpers with cache hints,
// the warp butterfly reduction, ceil_div, and two pieces v3 and v4 share: zeroing a block's shared
// array and a warp's rows in a grid-stride loop. Kernels are compiled with no_extern_c, so each
// file marks its entry points extern "C" and may use templates freely.
#pragma once
#include <cuda_bf16.h>

#define WARP_SIZE 32

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Sixteen bytes of T, moved with one 128-bit instruction (LDG.E.128 / STG.E.128 in the SASS).
template <class T>
struct alignas(16) Packed128 {
    static constexpr int size = 16 / sizeof(T);
    T payload[size];

    __device__ static Packed128 zeros() {
        Packed128 p;
        #pragma unroll
        for (int k = 0; k < size; k++) p.payload[k] = T(0.0f);
        return p;
    }
    __device__ T& operator[](int k) { return payload[k]; }
    __device__ const T& operator[](int k) const { return payload[k]; }
};

typedef Packed128<float> f128;              // 4 floats
typedef Packed128<__nv_bfloat16> x128;      // 8 bf16 values

// A plain 128-bit load: goes through L1 and L2 like any global load.
template <class T>
__device__ Packed128<T> load128(const T* address) {
    return *reinterpret_cast<const Packed128<T>*>(address);
}
// A streaming load (ld.global.cs): the data is read once, so ask the caches to evict it first.
template <class T>
__device__ Packed128<T> load128cs(const T* address) {
    Packed128<T> p;
    *reinterpret_cast<int4*>(&p) = __ldcs(reinterpret_cast<const int4*>(address));
    return p;
}
template <class T>
__device__ void store128(T* target, Packed128<T> value) {
    *reinterpret_cast<Packed128<T>*>(target) = value;
}
// st.global.cg: PTX's "cache at L2, not L1"; sm_90's SASS has it as STG.E.128.STRONG.GPU, a plain
// 128-bit store with a device-scope strong qualifier (lesson 06 times what it buys).
template <class T>
__device__ void store128cg(T* target, Packed128<T> value) {
    __stcg(reinterpret_cast<int4*>(target), *reinterpret_cast<int4*>(&value));
}
// st.global.cs: streaming store, written once and not read again soon.
template <class T>
__device__ void store128cs(T* target, Packed128<T> value) {
    __stcs(reinterpret_cast<int4*>(target), *reinterpret_cast<int4*>(&value));
}

// Butterfly: after log2(32) = 5 exchanges every lane holds the sum of all 32 lanes.
__device__ inline float warp_reduce_sum(float value) {
    #pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    }
    return value;
}

// The block's threads zero n floats of shared memory together (thread t takes t, t + blockDim.x,
// ...). A __syncthreads() must follow before any warp adds into them.
__device__ inline void zero_block_shared(float* shared, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) shared[i] = 0.0f;
}

// One warp a row, in a grid-stride loop over all rows: warp w of block b (W warps a block) takes
// row b * W + w (first_row_of_warp), then every (gridDim.x * W)-th row after it (warps_in_grid).
__device__ inline long long first_row_of_warp() {
    int warps_per_block = blockDim.x / WARP_SIZE;
    return (long long)blockIdx.x * warps_per_block + threadIdx.x / WARP_SIZE;
}
__device__ inline long long warps_in_grid() {
    int warps_per_block = blockDim.x / WARP_SIZE;
    return (long long)gridDim.x * warps_per_block;
}
