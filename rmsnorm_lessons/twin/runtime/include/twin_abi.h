// twin_abi.h: what a kernel built against cuda_twin.h and the runtime (twin_sched.cpp,
// twin_sync.cpp, twin_shadow.cpp) share: the built-in vector types, where a thread is, the
// runtime's entry points and the atomics' operation codes. The runtime includes this header
// alone; kernels get it through cuda_twin.h.
#pragma once
#include <cstdint>

// ---- built-in vector types -----------------------------------------------------------------
struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
#define TWIN_VEC(T, A2, A4)                                                          \
    struct alignas(A2) T##2 { T x, y; };                                                      \
    struct alignas(A4) T##4 { T x, y, z, w; };                                                \
    inline T##2 make_##T##2(T a, T b) { return T##2{a, b}; }                                  \
    inline T##4 make_##T##4(T a, T b, T c, T d) { return T##4{a, b, c, d}; }
typedef unsigned int uint;
TWIN_VEC(float, 8, 16)
TWIN_VEC(int, 8, 16)
TWIN_VEC(uint, 8, 16)
TWIN_VEC(double, 16, 16)
typedef long long longlong;
typedef unsigned long long ulonglong;
TWIN_VEC(longlong, 16, 16)
TWIN_VEC(ulonglong, 16, 16)
#undef TWIN_VEC
inline uint3 make_uint3(unsigned a, unsigned b, unsigned c) { return uint3{a, b, c}; }

// ---- where a thread is: set by the scheduler before each fiber runs ------------------------
struct TwinCtx { uint3 thread_idx; uint3 block_idx; dim3 block_dim; dim3 grid_dim; };
extern "C" TwinCtx twin_ctx;

// ---- the runtime's entry points (twin_sched.cpp, not instrumented) ------------------------
extern "C" {
void twin_syncthreads(void);
int twin_syncthreads_op(int op, int predicate);  // op 0 count, 1 and, 2 or
void twin_syncwarp(unsigned mask);
void twin_threadfence(void);
void twin_threadfence_block(void);
uint64_t twin_shfl(int kind, unsigned mask, uint64_t value, int arg, int width);
unsigned twin_vote(int kind, unsigned mask, unsigned value);
uint64_t twin_atomic(int op, void* address, int bytes, uint64_t operand, uint64_t compare);
void* twin_dynamic_shared(void);
}

// the atomics' operation codes (twin_atomic's op, with the operand's type code in bits 8+)
enum { TWIN_ADD, TWIN_SUB, TWIN_EXCH, TWIN_MIN, TWIN_MAX, TWIN_INC, TWIN_DEC, TWIN_CAS,
       TWIN_AND, TWIN_OR, TWIN_XOR };
