// The ceiling for v7_fast's bytes: an elementwise kernel that moves exactly what RMSNorm's backward
// must (reads dout and inp, reads dinp unless overwriting, writes dinp) with no reduction, no
// barrier and no row structure: out = a * b (+ out), bf16 in and out, fp32 math. What it reaches,
// as a fraction of the copy bandwidth, is what any kernel with these bytes can hope for
// (rmsnorm_lessons.speed.bench.stream_ceiling).
#include "common.cuh"

__device__ __forceinline__ unsigned product(unsigned a, unsigned b, unsigned c, bool accumulate) {
    // bf16 pairs in 32-bit words: widen each half (bf16 is the top half of an fp32), multiply, add,
    // round
    float x = __uint_as_float(a << 16) * __uint_as_float(b << 16);
    float y = __uint_as_float(a & 0xffff0000u) * __uint_as_float(b & 0xffff0000u);
    if (accumulate) {
        x += __uint_as_float(c << 16);
        y += __uint_as_float(c & 0xffff0000u);
    }
    __nv_bfloat162 p = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<unsigned*>(&p);
}

// n16: 16-byte chunks (8 bf16) per tensor. One chunk a thread, as many blocks of 256 as it takes:
// no loop, the block scheduler hands out the work. A grid-stride loop of 4 blocks of 512 an SM
// moved the same bytes 3-7 % slower on the H200 (it issues one chunk's loads, then its store, then
// the next chunk's loads: the store may alias them); spellings with 2 or 4 chunks' loads before
// their stores ranged from 5.5 % slower to 2.5 % faster than it (results/NOTES.md).
extern "C" __global__ void __launch_bounds__(256)
stream_elementwise(uint4* __restrict__ out, const uint4* __restrict__ a,
                   const uint4* __restrict__ b, long long n16, int accumulate) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n16) return;
    const uint4 x = __ldcs(a + i), y = __ldcs(b + i);
    const uint4 z = accumulate ? __ldcs(out + i) : make_uint4(0u, 0u, 0u, 0u);
    __stcs(out + i, make_uint4(product(x.x, y.x, z.x, accumulate),
                               product(x.y, y.y, z.y, accumulate),
                               product(x.z, y.z, z.z, accumulate),
                               product(x.w, y.w, z.w, accumulate)));
}

// The copy half of the bench's yardstick (rmsnorm_lessons.speed.bench.copy_yardstick): out = in,
// one 16-byte chunk a thread, the loads and stores of stream_elementwise with nothing between them.
extern "C" __global__ void __launch_bounds__(256)
stream_copy(uint4* __restrict__ out, const uint4* __restrict__ in, long long n16) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n16) __stcs(out + i, __ldcs(in + i));
}

// both kernels run blocks of 256 threads, ceil(n16 / 256) of them
// (rmsnorm_lessons.speed.bench.STREAM_THREADS)
