// twin_bf16.h: __nv_bfloat16 on the host, bit for bit as the GPU converts.
// float -> bf16 rounds to nearest, ties to even (cvt.rn.bf16.f32); every NaN becomes the
// canonical NaN 0x7FFF, as the GPU's conversion gives (ml_dtypes keeps the sign and payload
// instead: tests/test_twin_bf16.py checks both facts). Subnormals are kept, not flushed: the
// conversion has no .ftz. bf16 -> float is exact (the 16 bits shifted up).
#pragma once
#include <cstdint>

__forceinline__ unsigned short twin_f2bf(float f) {
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
__forceinline__ float twin_bf2f(unsigned short h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}

struct alignas(2) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(twin_f2bf(f)) {}
    __nv_bfloat16(double f) : __x(twin_f2bf((float)f)) {}
    __nv_bfloat16(int i) : __x(twin_f2bf((float)i)) {}
    operator float() const { return twin_bf2f(__x); }
};
typedef __nv_bfloat16 nv_bfloat16;
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
typedef __nv_bfloat162 nv_bfloat162;

__forceinline__ __nv_bfloat16 twin_bf(unsigned short bits) {
    __nv_bfloat16 b;
    b.__x = bits;
    return b;
}
__forceinline__ __nv_bfloat16 __float2bfloat16(float f) { return twin_bf(twin_f2bf(f)); }
__forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) { return twin_bf(twin_f2bf(f)); }
__forceinline__ float __bfloat162float(__nv_bfloat16 b) { return twin_bf2f(b.__x); }
__forceinline__ unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
__forceinline__ __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return twin_bf(u); }
__forceinline__ __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return __nv_bfloat162{__float2bfloat16(a), __float2bfloat16(b)};
}
__forceinline__ __nv_bfloat162 __float2bfloat162_rn(float a) { return __floats2bfloat162_rn(a, a); }
__forceinline__ float2 __bfloat1622float2(__nv_bfloat162 v) {
    return float2{twin_bf2f(v.x.__x), twin_bf2f(v.y.__x)};
}
__forceinline__ float __low2float(__nv_bfloat162 v) { return twin_bf2f(v.x.__x); }
__forceinline__ float __high2float(__nv_bfloat162 v) { return twin_bf2f(v.y.__x); }
// bf16 arithmetic: the float result rounded once to bf16
#define TWIN_BF_OP(OP, NAME)                                                                  \
    __forceinline__ __nv_bfloat16 operator OP(const __nv_bfloat16& a, const __nv_bfloat16& b) { \
        return __float2bfloat16((float)a OP (float)b);                                        \
    }                                                                                         \
    __forceinline__ __nv_bfloat16 NAME(__nv_bfloat16 a, __nv_bfloat16 b) { return a OP b; }
TWIN_BF_OP(+, __hadd)
TWIN_BF_OP(-, __hsub)
TWIN_BF_OP(*, __hmul)
TWIN_BF_OP(/, __hdiv)
#undef TWIN_BF_OP
__forceinline__ __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __float2bfloat16(fmaf((float)a, (float)b, (float)c));
}
