// The ceiling for v7_fast's bytes: an elementwise kernel that moves exactly what RMSNorm's backward must
// (reads dout and inp, reads dinp unless overwriting, writes dinp) with no reduction, no barrier and no
// row structure: out = a * b (+ out), bf16 in and out, fp32 math. What it reaches, as a fraction of the
// copy bandwidth, is what any kernel with these bytes can hope for (rmsnorm_lessons.bench.stream_ceiling).
#include "common.cuh"

__device__ __forceinline__ unsigned product(unsigned a, unsigned b, unsigned c, bool accumulate) {
    // bf16 pairs in 32-bit words: widen each half (bf16 is the top half of an fp32), multiply, add, round
    float x = __uint_as_float(a << 16) * __uint_as_float(b << 16);
    float y = __uint_as_float(a & 0xffff0000u) * __uint_as_float(b & 0xffff0000u);
    if (accumulate) {
        x += __uint_as_float(c << 16);
        y += __uint_as_float(c & 0xffff0000u);
    }
    __nv_bfloat162 p = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<unsigned*>(&p);
}

// n16: 16-byte chunks (8 bf16) per tensor. A grid-stride loop of 128-bit streaming loads and stores.
extern "C" __global__ void __launch_bounds__(512) stream_elementwise(uint4* out, const uint4* a, const uint4* b,
                                                                     long long n16, int accumulate) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    #pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        const uint4 x = __ldcs(a + i), y = __ldcs(b + i);
        uint4 z = make_uint4(0u, 0u, 0u, 0u);
        if (accumulate) z = __ldcs(out + i);
        __stcs(out + i, make_uint4(product(x.x, y.x, z.x, accumulate), product(x.y, y.y, z.y, accumulate),
                                   product(x.z, y.z, z.z, accumulate), product(x.w, y.w, z.w, accumulate)));
    }
}

// The copy half of the bench's yardstick (rmsnorm_lessons.bench.copy_yardstick): out = in, 16 bytes a
// thread per step, the loads and stores of stream_elementwise with nothing between them.
extern "C" __global__ void __launch_bounds__(512) stream_copy(uint4* out, const uint4* in, long long n16) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    #pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) __stcs(out + i, __ldcs(in + i));
}
