// Other spellings of the same-bytes ceiling (kernels/stream_ceiling.cu), to learn whether the shipped one is
// a ceiling at all: Quack's RMSNorm backward kernel alone streamed faster than it at 32768x1024 (overwrite).
// (The probe of 2026-12-03 timed the grid-stride spellings below as stream_elementwise / stream_copy; the
// one-chunk-a-thread spellings, elementwise_flat / copy_flat, won and are what the shipped file now has.)
// Each moves exactly the shipped kernel's bytes: out = a * b (+ out) in bf16, or out = in for the copies.
#include "stream_ceiling.cu"

// The spellings kernels/stream_ceiling.cu shipped until 2026-12-03 (grid-stride, 4 blocks of 512 an SM),
// kept here under their own names so that the probes can still time them
extern "C" __global__ void __launch_bounds__(512) gridstride_elementwise(uint4* out, const uint4* a, const uint4* b,
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

extern "C" __global__ void __launch_bounds__(512) gridstride_copy(uint4* out, const uint4* in, long long n16) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    #pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) __stcs(out + i, __ldcs(in + i));
}

__device__ __forceinline__ uint4 product4(uint4 x, uint4 y, uint4 z, bool accumulate) {
    return make_uint4(product(x.x, y.x, z.x, accumulate), product(x.y, y.y, z.y, accumulate),
                      product(x.z, y.z, z.z, accumulate), product(x.w, y.w, z.w, accumulate));
}

// U chunks a thread per step, all loads issued before any store (restrict: the compiler may not otherwise
// move a load above the previous chunk's store)
template <int U>
__device__ __forceinline__ void elementwise_batched(uint4* __restrict__ out, const uint4* __restrict__ a,
                                                    const uint4* __restrict__ b, long long n16, bool accumulate) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n16; i += U * stride) {
        uint4 x[U], y[U], z[U];
        #pragma unroll
        for (int k = 0; k < U; ++k) {
            x[k] = __ldcs(a + i + k * stride);
            y[k] = __ldcs(b + i + k * stride);
            z[k] = accumulate ? __ldcs(out + i + k * stride) : make_uint4(0u, 0u, 0u, 0u);
        }
        #pragma unroll
        for (int k = 0; k < U; ++k) __stcs(out + i + k * stride, product4(x[k], y[k], z[k], accumulate));
    }
    for (; i < n16; i += stride) {
        const uint4 z = accumulate ? __ldcs(out + i) : make_uint4(0u, 0u, 0u, 0u);
        __stcs(out + i, product4(__ldcs(a + i), __ldcs(b + i), z, accumulate));
    }
}

extern "C" __global__ void __launch_bounds__(256) elementwise_u2(uint4* out, const uint4* a, const uint4* b,
                                                                 long long n16, int accumulate) {
    elementwise_batched<2>(out, a, b, n16, accumulate);
}

extern "C" __global__ void __launch_bounds__(256) elementwise_u4(uint4* out, const uint4* a, const uint4* b,
                                                                 long long n16, int accumulate) {
    elementwise_batched<4>(out, a, b, n16, accumulate);
}

// one chunk a thread, as many blocks as it takes: no loop, the hardware's block scheduler is the loop
extern "C" __global__ void __launch_bounds__(256) elementwise_flat(uint4* __restrict__ out, const uint4* __restrict__ a,
                                                                   const uint4* __restrict__ b, long long n16,
                                                                   int accumulate) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n16) return;
    const uint4 z = accumulate ? __ldcs(out + i) : make_uint4(0u, 0u, 0u, 0u);
    __stcs(out + i, product4(__ldcs(a + i), __ldcs(b + i), z, accumulate));
}

template <int U>
__device__ __forceinline__ void copy_batched(uint4* __restrict__ out, const uint4* __restrict__ in, long long n16) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n16; i += U * stride) {
        uint4 x[U];
        #pragma unroll
        for (int k = 0; k < U; ++k) x[k] = __ldcs(in + i + k * stride);
        #pragma unroll
        for (int k = 0; k < U; ++k) __stcs(out + i + k * stride, x[k]);
    }
    for (; i < n16; i += stride) __stcs(out + i, __ldcs(in + i));
}

extern "C" __global__ void __launch_bounds__(256) copy_u4(uint4* out, const uint4* in, long long n16) {
    copy_batched<4>(out, in, n16);
}

extern "C" __global__ void __launch_bounds__(256) copy_flat(uint4* __restrict__ out, const uint4* __restrict__ in,
                                                            long long n16) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n16) __stcs(out + i, __ldcs(in + i));
}

// reads n16 chunks and keeps an XOR of them (written once by thread 0 of block 0 if it happens to be zero,
// so the loads cannot be dropped): a read-only sweep, to evict L2's dirty lines between timed launches
extern "C" __global__ void read_sweep(const uint4* __restrict__ in, long long n16, unsigned* sink) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    unsigned acc = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        const uint4 v = __ldcg(in + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc;
}
