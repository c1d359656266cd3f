// cuda_twin.h: the CUDA C the course uses, for g++ on the host (rmsnorm_lessons.twin).
// A kernel compiled against this header runs on the CPU: each thread of a block is a fiber of
// twin_sched.cpp, and every call below that a warp or a block must reach together (__syncthreads,
// the shuffles and votes) switches fibers there. Loads and stores are seen by twin_shadow.cpp
// through g++'s -fsanitize=thread instrumentation (the hooks are ours, not libtsan's).
// What is not here is not modelled: rmsnorm_lessons/twin/scan.py refuses it by name before g++.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>  // for the entry points the build appends
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// static shared memory: one copy, which blocks take in turn (they run one at a time); the section
// tells the shadow which addresses are shared memory
#ifndef __shared__
#define __shared__ static __attribute__((section("twin_shared")))
#endif
#define warpSize 32
#define CUDART_INF_F __builtin_inff()

#include "twin_abi.h"

// where a thread is: twin_ctx, set by the scheduler before each fiber runs (twin_abi.h)
#define threadIdx (twin_ctx.thread_idx)
#define blockIdx (twin_ctx.block_idx)
#define blockDim (twin_ctx.block_dim)
#define gridDim (twin_ctx.grid_dim)

__forceinline__ void __syncthreads() { twin_syncthreads(); }
__forceinline__ int __syncthreads_count(int p) { return twin_syncthreads_op(0, p); }
__forceinline__ int __syncthreads_and(int p) { return twin_syncthreads_op(1, p); }
__forceinline__ int __syncthreads_or(int p) { return twin_syncthreads_op(2, p); }
__forceinline__ void __syncwarp(unsigned mask = 0xffffffffu) { twin_syncwarp(mask); }
__forceinline__ void __threadfence() { twin_threadfence(); }
__forceinline__ void __threadfence_block() { twin_threadfence_block(); }
__forceinline__ void __threadfence_system() { twin_threadfence(); }

// ---- shuffles and votes: every lane of mask arrives, then the values move -------------------
template <class T>
__forceinline__ uint64_t twin_bits(T v) {
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    uint64_t b = 0;
    __builtin_memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
__forceinline__ T twin_from_bits(uint64_t b) {
    T v;
    __builtin_memcpy(&v, &b, sizeof(T));
    return v;
}
#define TWIN_SHFL(NAME, KIND, ARG)                                                            \
    template <class T>                                                                        \
    __forceinline__ T NAME(unsigned mask, T v, ARG a, int width = 32) {                       \
        return twin_from_bits<T>(twin_shfl(KIND, mask, twin_bits(v), (int)a, width));         \
    }
TWIN_SHFL(__shfl_sync, 0, int)
TWIN_SHFL(__shfl_xor_sync, 1, int)
TWIN_SHFL(__shfl_up_sync, 2, unsigned)
TWIN_SHFL(__shfl_down_sync, 3, unsigned)
#undef TWIN_SHFL
__forceinline__ int __all_sync(unsigned m, int p) { return (int)twin_vote(0, m, p != 0); }
__forceinline__ int __any_sync(unsigned m, int p) { return (int)twin_vote(1, m, p != 0); }
__forceinline__ unsigned __ballot_sync(unsigned m, int p) { return twin_vote(2, m, p != 0); }
__forceinline__ unsigned __reduce_add_sync(unsigned m, unsigned v) { return twin_vote(3, m, v); }
__forceinline__ unsigned __reduce_and_sync(unsigned m, unsigned v) { return twin_vote(4, m, v); }
__forceinline__ unsigned __reduce_or_sync(unsigned m, unsigned v) { return twin_vote(5, m, v); }
__forceinline__ unsigned __reduce_xor_sync(unsigned m, unsigned v) { return twin_vote(6, m, v); }

// ---- atomics: done by the runtime, one at a time, seen by the shadow as atomic ---------------
// the operand's type tells the runtime how to add: 0 unsigned, 1 signed, 2 float
template <class T> struct TwinType { static constexpr int code = 1; };
template <> struct TwinType<unsigned> { static constexpr int code = 0; };
template <> struct TwinType<unsigned long long> { static constexpr int code = 0; };
template <> struct TwinType<float> { static constexpr int code = 2; };
template <> struct TwinType<double> { static constexpr int code = 2; };
template <class T>
__forceinline__ T twin_atomic_op(int op, T* p, T v, T compare = T()) {
    return twin_from_bits<T>(twin_atomic(op | (TwinType<T>::code << 8), (void*)p, sizeof(T),
                                         twin_bits(v), twin_bits(compare)));
}
#define TWIN_ATOMIC(NAME, OP)                                                                 \
    template <class T>                                                                        \
    __forceinline__ T NAME(T* p, T v) { return twin_atomic_op<T>(OP, p, v); }                 \
    template <class T>                                                                        \
    __forceinline__ T NAME##_block(T* p, T v) { return twin_atomic_op<T>(OP, p, v); }         \
    template <class T>                                                                        \
    __forceinline__ T NAME##_system(T* p, T v) { return twin_atomic_op<T>(OP, p, v); }
TWIN_ATOMIC(atomicAdd, TWIN_ADD)
TWIN_ATOMIC(atomicSub, TWIN_SUB)
TWIN_ATOMIC(atomicExch, TWIN_EXCH)
TWIN_ATOMIC(atomicMin, TWIN_MIN)
TWIN_ATOMIC(atomicMax, TWIN_MAX)
TWIN_ATOMIC(atomicAnd, TWIN_AND)
TWIN_ATOMIC(atomicOr, TWIN_OR)
TWIN_ATOMIC(atomicXor, TWIN_XOR)
#undef TWIN_ATOMIC
// ((old >= limit) ? 0 : old + 1), CUDA's rule: the counter wraps to 0 after reaching limit
__forceinline__ unsigned atomicInc(unsigned* p, unsigned limit) {
    return twin_atomic_op<unsigned>(TWIN_INC, p, limit);
}
__forceinline__ unsigned atomicDec(unsigned* p, unsigned limit) {
    return twin_atomic_op<unsigned>(TWIN_DEC, p, limit);
}
template <class T>
__forceinline__ T atomicCAS(T* p, T compare, T value) {
    return twin_atomic_op<T>(TWIN_CAS, p, value, compare);
}

// ---- loads and stores with cache hints: plain accesses on the CPU ---------------------------
#define TWIN_LOAD(NAME) template <class T> __forceinline__ T NAME(const T* p) { return *p; }
TWIN_LOAD(__ldg)
TWIN_LOAD(__ldcs)
TWIN_LOAD(__ldcg)
TWIN_LOAD(__ldca)
TWIN_LOAD(__ldlu)
TWIN_LOAD(__ldcv)
#undef TWIN_LOAD
#define TWIN_STORE(NAME) template <class T> __forceinline__ void NAME(T* p, T v) { *p = v; }
TWIN_STORE(__stcs)
TWIN_STORE(__stcg)
TWIN_STORE(__stwb)
TWIN_STORE(__stwt)
#undef TWIN_STORE

// ---- math and bit intrinsics the host has under other names --------------------------------
__forceinline__ float rsqrtf(float x) { return 1.0f / sqrtf(x); }
__forceinline__ float __fdividef(float a, float b) { return a / b; }
__forceinline__ float __frcp_rn(float a) { return 1.0f / a; }
__forceinline__ float __expf(float x) { return expf(x); }
__forceinline__ float __logf(float x) { return logf(x); }
__forceinline__ float __powf(float a, float b) { return powf(a, b); }
__forceinline__ float __fsqrt_rn(float x) { return sqrtf(x); }
__forceinline__ float __fadd_rn(float a, float b) { return a + b; }
__forceinline__ float __fmul_rn(float a, float b) { return a * b; }
__forceinline__ float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
__forceinline__ float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
__forceinline__ int __float_as_int(float x) { return twin_from_bits<int>(twin_bits(x)); }
__forceinline__ unsigned __float_as_uint(float x) { return twin_from_bits<unsigned>(twin_bits(x)); }
__forceinline__ float __int_as_float(int x) { return twin_from_bits<float>(twin_bits(x)); }
__forceinline__ float __uint_as_float(unsigned x) { return twin_from_bits<float>(twin_bits(x)); }
__forceinline__ int __popc(unsigned x) { return __builtin_popcount(x); }
__forceinline__ int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
__forceinline__ int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
__forceinline__ int __ffs(int x) { return __builtin_ffs(x); }
__forceinline__ unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32);
}
#define TWIN_MINMAX(T)                                                                        \
    __forceinline__ T min(T a, T b) { return a < b ? a : b; }                                 \
    __forceinline__ T max(T a, T b) { return a < b ? b : a; }
TWIN_MINMAX(int)
TWIN_MINMAX(unsigned)
TWIN_MINMAX(long long)
TWIN_MINMAX(unsigned long long)
TWIN_MINMAX(float)
TWIN_MINMAX(double)
#undef TWIN_MINMAX

#include "twin_bf16.h"
